//! Unit tests of `units`.
use super::*;

#[test]
fn times_read_in_three_digits() {
    let cases = [
        (0, "0 ns"),
        (999, "999 ns"),
        (1_000, "1.00 µs"),
        (780_000, "780 µs"),
        (999_499, "999 µs"),
        (999_500, "1.00 ms"),
        (45_600_000, "45.6 ms"),
        (999_600_000, "1.00 s"),
        (1_234_000_000, "1.23 s"),
        (12_340_000_000, "12.3 s"),
        (3_600_000_000_000, "3600 s"),
    ];
    for (ns, text) in cases {
        assert_eq!(time_text(ns), text, "{ns} ns");
    }
}

#[test]
fn counts_follow_the_mode() {
    let mut s = Session {
        frequency_hz: 999,
        ..Default::default()
    };
    assert_eq!(count_text(&s, 1_500_000), "1500000");
    assert_eq!(total_text(&s, 12), "12 samples");
    assert_eq!(measure_text(&s), "cpu-clock @ 999 Hz");
    s.set_mode(Mode::OffCpu);
    assert_eq!(count_text(&s, 1_500_000), "1.50 ms");
    assert_eq!(total_text(&s, 2_000_000_000), "2.00 s off-CPU");
    assert_eq!(measure_text(&s), "off-cpu");
    assert_eq!(incl_excl(&s), ("INCL TIME", "EXCL TIME"));
    s.set_mode(Mode::Wall);
    assert_eq!(total_text(&s, 2_000_000_000), "2.00 s wall-clock");
    assert_eq!(measure_text(&s), "wall (cpu-clock @ 999 Hz)");
}
