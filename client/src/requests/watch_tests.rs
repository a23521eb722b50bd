//! Unit tests of `watch`.
use super::*;
use profd_common::api::Totals;

fn f(id: u64, name: &str, inclusive: u64, exclusive: u64) -> Function {
    Function {
        id,
        name: name.into(),
        module: if name.is_empty() { "" } else { "work" }.into(),
        inclusive,
        exclusive,
        inclusive_pct: 99.0, // stale on purpose: must be recomputed
        exclusive_pct: 99.0,
        ..Default::default()
    }
}

fn update(
    seq: u64,
    attributed: u64,
    state: SessionState,
    functions: Vec<Function>,
    last: bool,
) -> WatchResponse {
    WatchResponse {
        seq,
        snapshot: seq == 0,
        session: Some(Session {
            id: 3,
            pid: 1234,
            state: state as i32,
            totals: Some(Totals {
                attributed,
                discarded: 1,
                lost: 0,
                ..Default::default()
            }),
            ..Default::default()
        }),
        functions,
        r#final: last,
        ..Default::default()
    }
}

#[test]
fn merges_snapshot_and_deltas() {
    let mut w = WatchState::new();
    w.apply(update(
        0,
        10,
        SessionState::Running,
        vec![f(1, "main", 10, 0), f(2, "work", 8, 8)],
        false,
    ))
    .unwrap();
    // Delta: main and work changed (names omitted), new function 3 named.
    w.apply(update(
        1,
        40,
        SessionState::Running,
        vec![f(1, "", 40, 0), f(2, "", 20, 20), f(3, "spin", 18, 18)],
        false,
    ))
    .unwrap();
    // Delta: only spin changed; work is unchanged but its % must move.
    w.apply(update(
        2,
        80,
        SessionState::Exited,
        vec![f(3, "", 58, 58)],
        true,
    ))
    .unwrap();
    assert!(w.is_final());
    assert_eq!(w.state(), SessionState::Exited);
    let p = w.profile();
    let rows: Vec<_> = p
        .functions
        .iter()
        .map(|f| (f.name.as_str(), f.module.as_str(), f.inclusive, f.exclusive))
        .collect();
    assert_eq!(
        rows,
        [
            ("spin", "work", 58, 58),
            ("main", "work", 40, 0),
            ("work", "work", 20, 20),
        ]
    );
    assert_eq!(p.functions[0].inclusive_pct, 72.5);
    assert_eq!(p.functions[2].inclusive_pct, 25.0);
    assert_eq!(p.functions[2].exclusive_pct, 25.0);
    assert_eq!(p.functions[1].exclusive_pct, 0.0);
}

#[test]
fn inlined_mark_is_kept_when_a_delta_omits_it() {
    let mut w = WatchState::new();
    let hot = Function {
        inlined: true,
        ..f(1, "hot", 5, 5)
    };
    w.apply(update(0, 5, SessionState::Running, vec![hot], false))
        .unwrap();
    w.apply(update(
        1,
        9,
        SessionState::Running,
        vec![f(1, "", 9, 9)],
        false,
    ))
    .unwrap();
    let p = w.profile();
    assert!(p.functions[0].inlined);
    assert_eq!(p.functions[0].name, "hot");
}

#[test]
fn window_figures_follow_the_latest_update() {
    let mut w = WatchState::with_window(5);
    let windowed = |id, name: &str, total, win| Function {
        window_inclusive: win,
        window_exclusive: win,
        ..f(id, name, total, total)
    };
    let mut first = update(
        0,
        10,
        SessionState::Running,
        vec![windowed(1, "a", 10, 10)],
        false,
    );
    first.window_attributed = 10;
    w.apply(first).unwrap();
    let mut second = update(
        1,
        30,
        SessionState::Running,
        vec![windowed(1, "", 30, 4)],
        false,
    );
    second.window_attributed = 8;
    w.apply(second).unwrap();
    let p = w.profile();
    assert_eq!(
        p.window,
        Some(Window {
            seconds: 5,
            attributed: 8
        })
    );
    assert_eq!(p.functions[0].window_inclusive, 4);
    assert_eq!(p.functions[0].window_exclusive, 4);
    assert_eq!(WatchState::new().profile().window, None);
}

#[test]
fn snapshot_replaces_everything() {
    let mut w = WatchState::new();
    w.apply(update(
        0,
        5,
        SessionState::Running,
        vec![f(1, "a", 5, 5)],
        false,
    ))
    .unwrap();
    w.apply(update(
        0,
        7,
        SessionState::Running,
        vec![f(2, "b", 7, 7)],
        false,
    ))
    .unwrap();
    let p = w.profile();
    assert_eq!(p.functions.len(), 1);
    assert_eq!(p.functions[0].name, "b");
    assert_eq!(p.functions[0].inclusive_pct, 100.0);
}

#[test]
fn unnamed_new_function_gets_a_placeholder() {
    let mut w = WatchState::new();
    w.apply(update(
        0,
        2,
        SessionState::Running,
        vec![f(9, "", 2, 2)],
        false,
    ))
    .unwrap();
    assert_eq!(w.profile().functions[0].name, "[function #9]");
}

#[test]
fn stream_must_start_with_snapshot_and_end_at_final() {
    let mut w = WatchState::new();
    assert!(w
        .apply(update(1, 0, SessionState::Running, vec![], false))
        .is_err());
    let mut w = WatchState::new();
    w.apply(update(0, 0, SessionState::Stopped, vec![], true))
        .unwrap();
    assert!(w.is_final());
    assert!(w
        .apply(update(1, 0, SessionState::Stopped, vec![], false))
        .is_err());
}
