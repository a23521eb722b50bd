//! How a session's counts read: samples for CPU profiles, times (`1.23 s`,
//! `45.6 ms`) for off-CPU and wall-clock ones, whose counts are nanoseconds;
//! byte counts (`1.5 MiB`).
use profd_common::api::{Mode, Session, TimeTotals};
use profd_common::model::is_time;
use profd_common::{event_name, model::mode_name};

/// Whether the session's counts are nanoseconds (off-CPU, wall-clock).
pub fn counts_time(session: &Session) -> bool {
    is_time(session.mode())
}

/// `ns` for people, three significant digits: `1.23 s`, `45.6 ms`,
/// `780 µs`, `12 ns`.
pub fn time_text(ns: u64) -> String {
    let (v, unit) = if ns >= 999_500_000 {
        (ns as f64 / 1e9, "s")
    } else if ns >= 999_500 {
        (ns as f64 / 1e6, "ms")
    } else if ns >= 1_000 {
        (ns as f64 / 1e3, "µs")
    } else {
        return format!("{ns} ns");
    };
    if v >= 99.95 {
        format!("{v:.0} {unit}")
    } else if v >= 9.995 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.2} {unit}")
    }
}

/// A count of the session's profile as shown: a number of samples, or a
/// time.
pub fn count_text(session: &Session, n: u64) -> String {
    if counts_time(session) {
        time_text(n)
    } else {
        n.to_string()
    }
}

/// A total of the session's profile with its unit: `9950 samples`, or
/// `1.23 s off-CPU` / `1.23 s wall-clock`.
pub fn total_text(session: &Session, n: u64) -> String {
    match session.mode() {
        Mode::OffCpu => format!("{} off-CPU", time_text(n)),
        Mode::Wall => format!("{} wall-clock", time_text(n)),
        Mode::Cpu | Mode::Unspecified => format!("{n} samples"),
    }
}

/// The case a word is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// For a column header.
    Upper,
    /// For a line's head.
    Lower,
}

/// The word for the counts in a column header or a line's head: `SAMPLES`
/// or `TIME` ([`Case::Upper`]), `samples` or `time` ([`Case::Lower`]).
pub fn counts_word(session: &Session, case: Case) -> &'static str {
    match (counts_time(session), case) {
        (true, Case::Upper) => "TIME",
        (true, Case::Lower) => "time",
        (false, Case::Upper) => "SAMPLES",
        (false, Case::Lower) => "samples",
    }
}

/// The inclusive and exclusive column headers: `INCL`/`EXCL`, or
/// `INCL TIME`/`EXCL TIME`.
pub fn incl_excl(session: &Session) -> (&'static str, &'static str) {
    if counts_time(session) {
        ("INCL TIME", "EXCL TIME")
    } else {
        ("INCL", "EXCL")
    }
}

/// What the session measures, for headers: `cpu-clock @ 999 Hz` (CPU),
/// `off-cpu` or `wall (cpu-clock @ 999 Hz)`.
pub fn measure_text(session: &Session) -> String {
    let event = format!(
        "{} @ {} Hz",
        event_name(session.event()),
        session.frequency_hz
    );
    match session.mode() {
        Mode::Cpu | Mode::Unspecified => event,
        Mode::OffCpu => mode_name(Mode::OffCpu).to_string(),
        Mode::Wall => format!("{} ({event})", mode_name(Mode::Wall)),
    }
}

/// The time accounting of an off-CPU or wall-clock session on one line:
/// `time: on-CPU 1.00 s, off-CPU 2.00 s (runnable 100 ms); 1234 waits,
/// 5 unpaired, 2 open at end`, and when records were lost, `; not known
/// 300 ms (records lost)`.
pub fn time_totals_text(t: &TimeTotals) -> String {
    let mut text = format!(
        "time: on-CPU {}, off-CPU {} (runnable {}); {} waits, {} unpaired, {} open at end",
        time_text(t.on_cpu_ns),
        time_text(t.off_cpu_ns),
        time_text(t.runnable_ns),
        t.waits,
        t.unpaired,
        t.open_at_end,
    );
    if t.unknown_ns > 0 {
        text += &format!("; not known {} (records lost)", time_text(t.unknown_ns));
    }
    text
}

/// `1.5 MiB`: a byte count for people.
pub fn bytes_text(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
#[path = "units_tests.rs"]
mod tests;
