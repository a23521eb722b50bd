//! Unit tests of `diff`.
use super::*;

fn f(name: &str, inclusive: u64, exclusive: u64) -> Function {
    Function {
        name: name.into(),
        module: "split".into(),
        inclusive,
        exclusive,
        ..Default::default()
    }
}

fn side(label: &str, attributed: u64, seconds: f64, functions: Vec<Function>) -> Side {
    Side {
        label: label.into(),
        session: Session {
            pid: 7,
            comm: "split".into(),
            frequency_hz: 999,
            duration_s: seconds,
            totals: Some(api::Totals {
                attributed,
                ..Default::default()
            }),
            ..Default::default()
        },
        functions,
        pprof: None,
    }
}

/// The words of `name`'s row.
fn row(text: &str, name: &str) -> Vec<String> {
    text.lines()
        .find(|l| l.contains(&format!(" {name}  [")))
        .unwrap_or_else(|| panic!("no {name}:\n{text}"))
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The function names of the rows, in order.
fn order(text: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| !l.contains("FUNCTION"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(7).map(str::to_string))
        .collect()
}

/// 25/75 over 1000 samples, then 50/50 over 1000 (and a new function):
/// counts, changes, share changes; the largest change in samples first.
#[test]
fn same_durations_compare_samples_and_lead_with_the_largest_change() {
    let base = side(
        "session 1",
        1000,
        3.0,
        vec![
            f("main", 1000, 0),
            f("leaf_a", 250, 250),
            f("leaf_b", 750, 750),
        ],
    );
    let new = side(
        "session 2",
        1000,
        3.05,
        vec![
            f("main", 1000, 0),
            f("leaf_a", 450, 450),
            f("leaf_b", 500, 500),
            f("extra", 50, 50),
        ],
    );
    let text = diff_table(&base, &new, None, 80, false);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "base  session 1 — pid 7 (split) — 1000 attributed in 3.00 s"
    );
    assert_eq!(
        lines[1],
        "new   session 2 — pid 7 (split) — 1000 attributed in 3.05 s"
    );
    assert!(
        lines[2].ends_with("EXCL% CHG  FUNCTION  [MODULE]"),
        "{text}"
    );
    assert_eq!(
        row(&text, "leaf_b")[..7],
        ["750", "500", "-250", "750", "500", "-250", "-25.0"]
    );
    assert_eq!(
        row(&text, "leaf_a")[..7],
        ["250", "450", "+200", "250", "450", "+200", "+20.0"]
    );
    assert_eq!(row(&text, "extra")[..3], ["0", "50", "+50"]);
    assert_eq!(row(&text, "main")[3..6], ["1000", "1000", "+0"]);
    assert_eq!(order(&text), ["leaf_b", "leaf_a", "extra", "main"]);
    let text = diff_table(&base, &new, Some(2), 80, false);
    assert!(
        text.ends_with("(2 more functions changed less; --top 0 shows all)\n"),
        "{text}"
    );
}

/// Perl's case: a function whose share fell while its samples held (the
/// rest grew): by samples it barely moved, by share it leads.
#[test]
fn a_share_that_fell_while_the_samples_held_is_not_the_largest_change() {
    let base = side(
        "a",
        1000,
        2.0,
        vec![f("pp_modulo", 400, 400), f("hash", 600, 600)],
    );
    let new = side(
        "b",
        2000,
        2.0,
        vec![f("pp_modulo", 410, 410), f("hash", 1590, 1590)],
    );
    let text = diff_table(&base, &new, None, 80, false);
    assert_eq!(order(&text), ["hash", "pp_modulo"], "{text}");
    assert_eq!(row(&text, "pp_modulo")[..3], ["400", "410", "+10"]);
    assert_eq!(row(&text, "pp_modulo")[6], "-19.5");
    let text = diff_table(&base, &new, None, 80, true);
    assert_eq!(order(&text)[0], "hash", "{text}");
    assert_eq!(row(&text, "hash")[6], "+19.5");
}

/// Durations apart by more than 5 %: counts per second, said so.
#[test]
fn different_durations_compare_rates() {
    let base = side("a", 1000, 1.0, vec![f("leaf", 1000, 1000)]);
    let new = side("b", 3000, 4.0, vec![f("leaf", 3000, 3000)]);
    let text = diff_table(&base, &new, None, 80, false);
    assert!(
        text.contains("samples per second: the profiles' durations differ (1.00 s and 4.00 s)\n"),
        "{text}"
    );
    assert_eq!(row(&text, "leaf")[..3], ["1000.0", "750.0", "-250.0"]);
}

/// A function is matched by name across builds, whatever its module file.
#[test]
fn functions_match_by_name_across_module_files() {
    let mut old = f("work", 100, 100);
    old.module = "libwork.so.1".into();
    let mut new_f = f("work", 150, 150);
    new_f.module = "libwork.so.2".into();
    let base = side("a", 100, 1.0, vec![old]);
    let new = side("b", 150, 1.0, vec![new_f]);
    let text = diff_table(&base, &new, None, 80, false);
    assert_eq!(order(&text), ["work"], "{text}");
    assert_eq!(row(&text, "work")[..3], ["100", "150", "+50"]);
    assert!(text.contains("work  [libwork.so.2]"), "{text}");
}

/// Profiles that hardly compare are said to: events, frequencies, few
/// shared functions.
#[test]
fn profiles_that_hardly_compare_are_warned_of() {
    let perl = side(
        "perl.pb.gz",
        1000,
        1.0,
        vec![f("Perl_pp_modulo", 1000, 1000)],
    );
    let mut xz = side(
        "xz.pb.gz",
        1000,
        1.0,
        vec![f("lzma_encode", 950, 950), f("Perl_pp_modulo", 50, 50)],
    );
    assert!(warnings(&perl, &perl).is_empty());
    let w = warnings(&perl, &xz);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("hold 100 % of perl.pb.gz's samples and 5 % of xz.pb.gz's"),
        "{w:?}"
    );
    xz.session.frequency_hz = 99;
    xz.session.set_event(api::Event::Cycles);
    let w = warnings(&perl, &xz);
    assert!(
        w.iter()
            .any(|l| l.contains("at 999 Hz and xz.pb.gz at 99 Hz")),
        "{w:?}"
    );
    assert!(
        w.iter()
            .any(|l| l.contains("cpu-clock and xz.pb.gz cycles")),
        "{w:?}"
    );
}

/// Off-CPU (and wall) profiles compare times: each count, each change
/// and the header's totals are times, the largest change first.
#[test]
fn time_profiles_compare_times() {
    let s = 1_000_000_000;
    let mut base = side(
        "a",
        3 * s,
        3.0,
        vec![f("sleep", 5 * s / 2, 5 * s / 2), f("read", s / 2, s / 2)],
    );
    let mut new = side(
        "b",
        3 * s,
        3.0,
        vec![f("sleep", s, s), f("read", 2 * s, 2 * s)],
    );
    for side in [&mut base, &mut new] {
        side.session.mode = api::Mode::OffCpu as i32;
    }
    let text = diff_table(&base, &new, None, 80, false);
    assert!(
        text.starts_with("base  a — pid 7 (split) — 3.00 s attributed in 3.00 s\n"),
        "{text}"
    );
    let line = |name: &str| {
        text.lines()
            .find(|l| l.ends_with(&format!(" {name}  [split]")))
            .unwrap_or_else(|| panic!("no {name}:\n{text}"))
    };
    let times =
        |a: &str, b: &str, c: &str| format!("{a:>10}  {b:>10}  {c:>10}  {a:>10}  {b:>10}  {c:>10}");
    assert!(
        line("sleep").starts_with(&times("2.50 s", "1.00 s", "-1.50 s")),
        "{text}"
    );
    assert!(
        line("read").starts_with(&times("500 ms", "2.00 s", "+1.50 s")),
        "{text}"
    );
    let at = |name: &str| text.find(line(name)).unwrap();
    assert!(at("read") < at("sleep"), "equal changes, by name: {text}");
}
