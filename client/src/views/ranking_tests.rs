//! Unit tests of `ranking`.
use super::*;

pub(crate) fn func(id: u64, name: &str, inclusive: u64, exclusive: u64) -> Function {
    Function {
        id,
        name: name.into(),
        module: "m".into(),
        inclusive,
        exclusive,
        inclusive_pct: -1.0,
        exclusive_pct: -1.0,
        inlined: false,
        window_inclusive: 0,
        window_exclusive: 0,
    }
}

fn session(attributed: u64) -> Session {
    Session {
        totals: Some(Totals {
            attributed,
            discarded: 0,
            lost: 0,
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn sorts_by_inclusive_then_exclusive_then_name() {
    let p = Profile::new(
        session(100),
        vec![
            func(1, "b", 50, 10),
            func(2, "a", 50, 10),
            func(3, "c", 50, 20),
            func(4, "d", 100, 0),
            func(5, "e", 1, 1),
        ],
    );
    let names: Vec<_> = p.functions.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["d", "c", "a", "b", "e"]);
}

#[test]
fn sorts_by_exclusive_or_name_on_request() {
    let p = Profile::new(
        session(100),
        vec![
            func(1, "b", 50, 10),
            func(2, "a", 50, 10),
            func(3, "c", 60, 20),
            func(4, "d", 100, 0),
            func(5, "e", 1, 1),
        ],
    );
    let names =
        |p: &Profile| -> Vec<String> { p.functions.iter().map(|f| f.name.clone()).collect() };
    let by_self = p.clone().sorted(SortArg::Exclusive);
    assert_eq!(names(&by_self), ["c", "a", "b", "e", "d"]);
    assert_eq!(
        names(&by_self.sorted(SortArg::Name)),
        ["a", "b", "c", "d", "e"]
    );
    assert_eq!(names(&p.clone().sorted(SortArg::Inclusive)), names(&p));
}

#[test]
fn recomputes_percentages() {
    let p = Profile::new(session(200), vec![func(1, "f", 200, 50)]);
    assert_eq!(p.functions[0].inclusive_pct, 100.0);
    assert_eq!(p.functions[0].exclusive_pct, 25.0);
}

#[test]
fn zero_total_gives_zero_percent() {
    let p = Profile::new(Session::default(), vec![func(1, "f", 3, 3)]);
    assert_eq!(p.functions[0].inclusive_pct, 0.0);
    assert_eq!(p.totals(), Totals::default());
}

#[test]
fn percent_is_clamped() {
    assert_eq!(percent(5, 4), 100.0);
    assert_eq!(percent(1, 4), 25.0);
}
