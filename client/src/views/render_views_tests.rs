//! Unit tests of `render_views`: tree, callers/callees, threads and lines text.
use super::*;
use profd_common::api::{LineRow, ThreadRow, Totals, TreeNode};

fn func(id: u64, name: &str, inclusive: u64, exclusive: u64) -> Function {
    Function {
        id,
        name: name.into(),
        module: "split".into(),
        inclusive,
        exclusive,
        ..Default::default()
    }
}

fn session() -> Session {
    Session {
        id: 2,
        pid: 99,
        comm: "split".into(),
        frequency_hz: 999,
        duration_s: 3.0,
        totals: Some(Totals {
            attributed: 1000,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn functions() -> Vec<Function> {
    vec![
        func(0, "main", 1000, 0),
        func(1, "work", 1000, 0),
        func(2, "mid", 750, 0),
        func(3, "leaf_b", 750, 750),
        func(4, "leaf_a", 250, 250),
    ]
}

fn node(parent: i32, depth: u32, function_id: u64, inclusive: u64, exclusive: u64) -> TreeNode {
    TreeNode {
        parent,
        depth,
        function_id,
        inclusive,
        exclusive,
    }
}

#[test]
fn tree_is_indented_by_depth() {
    let view = GetViewResponse {
        session: Some(session()),
        functions: functions(),
        nodes: vec![
            node(-1, 0, 0, 1000, 0),
            node(0, 1, 1, 1000, 0),
            node(1, 2, 2, 750, 0),
            node(2, 3, 3, 750, 750),
            node(1, 2, 4, 250, 250),
        ],
        ..Default::default()
    };
    let text = tree_text(&view, "call tree, top-down", NameStyle::default());
    let want = "\
call tree, top-down: 1000 samples
 INCL%   INCL   EXCL%   EXCL  FUNCTION  [MODULE]
100.0%   1000    0.0%      0  main  [split]
100.0%   1000    0.0%      0    work  [split]
 75.0%    750    0.0%      0      mid  [split]
 75.0%    750   75.0%    750        leaf_b  [split]
 25.0%    250   25.0%    250      leaf_a  [split]
";
    assert_eq!(text, want);
    let empty = GetViewResponse {
        session: Some(session()),
        ..Default::default()
    };
    assert!(tree_text(&empty, "hot path", NameStyle::default()).ends_with("(no samples)\n"));
}

fn edge(function_id: u64, inclusive: u64, exclusive: u64) -> Edge {
    Edge {
        function_id,
        inclusive,
        exclusive,
        inclusive_pct: inclusive as f64 / 10.0,
    }
}

fn work_view() -> GetViewResponse {
    GetViewResponse {
        session: Some(session()),
        functions: functions(),
        caller_callee: Some(CallerCallee {
            function: Some(func(1, "work", 1000, 0)),
            callers: vec![edge(0, 1000, 0)],
            callees: vec![edge(4, 250, 250), edge(2, 750, 0)],
        }),
        ..Default::default()
    }
}

#[test]
fn callers_callees_in_visual_studio_order() {
    let text = caller_callee_text(&work_view(), true, true, NameStyle::default());
    let want = "\
callers and callees of work: 1000 inclusive (100.0 %), 0 exclusive (0.0 %) of 1000 samples
 INCL%   INCL   SHARE   EXCL%   EXCL  FUNCTION  [MODULE]
calling functions:
100.0%   1000  100.0%    0.0%      0  main  [split]
current function:
100.0%   1000  100.0%    0.0%      0  work  [split]
called functions:
 75.0%    750   75.0%    0.0%      0  mid  [split]
 25.0%    250   25.0%   25.0%    250  leaf_a  [split]
";
    assert_eq!(text, want);
}

#[test]
fn callers_only_and_callees_only() {
    let callers = caller_callee_text(&work_view(), true, false, NameStyle::default());
    assert!(callers.contains("calling functions:") && !callers.contains("called functions:"));
    let callees = caller_callee_text(&work_view(), false, true, NameStyle::default());
    assert!(!callees.contains("calling functions:") && callees.contains("called functions:"));
    let mut none = work_view();
    none.caller_callee.as_mut().unwrap().callers.clear();
    assert!(caller_callee_text(&none, true, false, NameStyle::default())
        .contains("calling functions:\n  (none)\n"));
}

#[test]
fn threads_by_samples() {
    let view = GetViewResponse {
        session: Some(session()),
        functions: functions(),
        threads: vec![
            ThreadRow {
                tid: 12,
                name: "worker".into(),
                samples: 300,
                pct: 30.0,
                top_function_id: 4,
                pid: 0,
                unknown_ns: 0,
            },
            ThreadRow {
                tid: 11,
                name: "split".into(),
                samples: 700,
                pct: 70.0,
                top_function_id: 3,
                pid: 0,
                unknown_ns: 0,
            },
        ],
        ..Default::default()
    };
    let text = threads_text(&view, NameStyle::default());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "    TID  NAME    SAMPLES     PCT  TOP FUNCTION");
    assert_eq!(
        lines[1],
        "     11  split       700   70.0%  leaf_b  [split]"
    );
    assert_eq!(
        lines[2],
        "     12  worker      300   30.0%  leaf_a  [split]"
    );
}

#[test]
fn lines_as_file_line_samples_pct() {
    let row = |file: &str, line, exclusive| LineRow {
        file: file.into(),
        line,
        exclusive,
        exclusive_pct: 0.0,
    };
    let view = GetViewResponse {
        session: Some(session()),
        lines: vec![
            row("split.c", 24, 500),
            row("split.c", 22, 250),
            row("", 0, 0),
        ],
        ..Default::default()
    };
    let text = lines_text(&view, "leaf_b");
    let want = "\
source lines of leaf_b: 750 exclusive of 1000 samples
FILE:LINE    SAMPLES     PCT
[unknown]:0        0    0.0%
split.c:22       250   25.0%
split.c:24       500   50.0%
";
    assert_eq!(text, want);
}

#[test]
fn file_header_names_the_file() {
    assert_eq!(
        file_header("/tmp/p.pb.gz", &session()),
        "profile /tmp/p.pb.gz — pid 99 (split) — 999 Hz — 3.00 s\nsamples: 1000 attributed\n"
    );
}

/// `session()` in off-CPU mode: 1 s of waits.
fn off_cpu_session() -> Session {
    let mut s = session();
    s.set_mode(profd_common::api::Mode::OffCpu);
    s.totals = Some(Totals {
        attributed: 1_000_000_000,
        ..Default::default()
    });
    s
}

#[test]
fn off_cpu_views_show_times() {
    let ms = 1_000_000;
    let functions: Vec<Function> = functions()
        .into_iter()
        .map(|f| func(f.id, &f.name, f.inclusive * ms, f.exclusive * ms))
        .collect();
    let view = GetViewResponse {
        session: Some(off_cpu_session()),
        functions: functions.clone(),
        nodes: vec![
            node(-1, 0, 0, 1000 * ms, 0),
            node(0, 1, 3, 750 * ms, 750 * ms),
            node(0, 1, 4, 250 * ms, 250 * ms),
        ],
        ..Default::default()
    };
    let text = tree_text(&view, "call tree, top-down", NameStyle::default());
    let want = "\
call tree, top-down: 1.00 s off-CPU
 INCL%  INCL TIME   EXCL%  EXCL TIME  FUNCTION  [MODULE]
100.0%     1.00 s    0.0%       0 ns  main  [split]
 75.0%     750 ms   75.0%     750 ms    leaf_b  [split]
 25.0%     250 ms   25.0%     250 ms    leaf_a  [split]
";
    assert_eq!(text, want);

    let view = GetViewResponse {
        session: Some(off_cpu_session()),
        functions: functions.clone(),
        threads: vec![ThreadRow {
            tid: 7,
            name: "split".into(),
            samples: 1000 * ms,
            pct: 100.0,
            top_function_id: 3,
            pid: 0,
            unknown_ns: 0,
        }],
        lines: vec![LineRow {
            file: "split.c".into(),
            line: 12,
            exclusive: 750 * ms,
            ..Default::default()
        }],
        ..Default::default()
    };
    let threads = threads_text(&view, NameStyle::default());
    assert!(
        threads.starts_with("    TID  NAME     TIME     PCT  TOP FUNCTION\n"),
        "{threads}"
    );
    assert!(
        threads.contains("      7  split  1.00 s  100.0%  leaf_b  [split]"),
        "{threads}"
    );
    // Time not known (records lost) gets a column of its own, with a row
    // for a thread that has nothing else.
    let mut lost = view.clone();
    lost.threads[0].unknown_ns = 250 * ms;
    lost.threads.push(ThreadRow {
        tid: 8,
        name: "w".into(),
        unknown_ns: 1_500,
        ..Default::default()
    });
    let threads = threads_text(&lost, NameStyle::default());
    assert_eq!(
        threads,
        "    TID  NAME     TIME     PCT  NOT KNOWN  TOP FUNCTION\n      7  split  1.00 s  100.0%     250 ms  leaf_b  [split]\n      8  w        0 ns    0.0%    1.50 µs  \n",
        "{threads}"
    );
    let lines = lines_text(&view, "leaf_b");
    assert!(
        lines.starts_with("source lines of leaf_b: 750 ms exclusive of 1.00 s off-CPU\nFILE:LINE     TIME     PCT\nsplit.c:12  750 ms   75.0%\n"),
        "{lines}"
    );

    let mut callers = GetViewResponse {
        session: Some(off_cpu_session()),
        functions,
        ..Default::default()
    };
    callers.caller_callee = Some(CallerCallee {
        function: Some(func(3, "leaf_b", 750 * ms, 750 * ms)),
        callers: vec![Edge {
            function_id: 0,
            inclusive: 750 * ms,
            exclusive: 750 * ms,
            ..Default::default()
        }],
        callees: vec![],
    });
    let text = caller_callee_text(&callers, true, true, NameStyle::default());
    assert!(
        text.starts_with("callers and callees of leaf_b: 750 ms inclusive (75.0 %), 750 ms exclusive (75.0 %) of 1.00 s off-CPU\n"),
        "{text}"
    );
    assert!(
        text.contains(" 75.0%     750 ms  100.0%   75.0%     750 ms  main  [split]"),
        "{text}"
    );

    let header = file_header("w.pb.gz", &off_cpu_session());
    assert_eq!(
        header,
        "profile w.pb.gz — pid 99 (split) — off-cpu — 3.00 s\ntime: 1.00 s attributed\n"
    );
}
