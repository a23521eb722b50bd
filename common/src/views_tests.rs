//! Unit tests of the views on the hand-built profile of `testdata::known`.
use super::*;
use crate::testdata::{known, A, B, C, INL, MAIN, R, UNUSED};

/// (function, depth, parent, inclusive, exclusive) of each node.
fn shape(nodes: &[api::TreeNode]) -> Vec<(u32, u32, i32, u64, u64)> {
    nodes
        .iter()
        .map(|n| {
            (
                n.function_id as u32,
                n.depth,
                n.parent,
                n.inclusive,
                n.exclusive,
            )
        })
        .collect()
}

fn edge_figures(e: &[api::Edge]) -> Vec<(u32, u64, u64)> {
    e.iter()
        .map(|e| (e.function_id as u32, e.inclusive, e.exclusive))
        .collect()
}

#[test]
fn flat_table_counts_and_order() {
    let p = known();
    let rows: Vec<(String, u64, u64)> = functions(&p)
        .into_iter()
        .map(|f| (f.name, f.inclusive, f.exclusive))
        .collect();
    let want = [
        ("main", 12, 0),
        ("c", 5, 5),
        ("r", 4, 4),
        ("a", 4, 1),
        ("b", 4, 0),
        ("inl", 2, 2),
    ];
    let want: Vec<(String, u64, u64)> = want
        .iter()
        .map(|(n, i, e)| (n.to_string(), *i, *e))
        .collect();
    assert_eq!(rows, want, "unused functions are left out");
    let f = functions(&p);
    assert_eq!(f[0].inclusive_pct, 100.0);
    assert_eq!(f[1].exclusive_pct, 5.0 * 100.0 / 12.0);
    assert_eq!(f[1].id, u64::from(C));
    assert_eq!(f[1].module, "libc.so.6");
    assert!(f[5].inlined);
}

#[test]
fn top_down_tree() {
    let p = known();
    let t = call_tree(&p, Direction::TopDown, 0.0, 0);
    assert_eq!(
        shape(&t),
        vec![
            (MAIN, 0, -1, 12, 0),
            (A, 1, 0, 4, 1),
            (C, 2, 1, 3, 3),
            (B, 1, 0, 4, 0),
            (C, 2, 3, 2, 2),
            (INL, 2, 3, 2, 2),
            (R, 1, 0, 4, 0),
            (R, 2, 6, 4, 0),
            (R, 3, 7, 4, 4),
        ]
    );
}

#[test]
fn bottom_up_tree() {
    let p = known();
    let t = call_tree(&p, Direction::BottomUp, 0.0, 0);
    assert_eq!(
        shape(&t),
        vec![
            (C, 0, -1, 5, 5),
            (A, 1, 0, 3, 0),
            (MAIN, 2, 1, 3, 0),
            (B, 1, 0, 2, 0),
            (MAIN, 2, 3, 2, 0),
            (R, 0, -1, 4, 4),
            (R, 1, 5, 4, 0),
            (R, 2, 6, 4, 0),
            (MAIN, 3, 7, 4, 0),
            (INL, 0, -1, 2, 2),
            (B, 1, 9, 2, 0),
            (MAIN, 2, 10, 2, 0),
            (A, 0, -1, 1, 1),
            (MAIN, 1, 12, 1, 0),
        ]
    );
    // Roots carry their function's exclusive samples, as inclusive and as
    // exclusive; no other node has any; every sample ends once.
    for n in &t {
        let want = if n.parent < 0 { n.inclusive } else { 0 };
        assert_eq!(n.exclusive, want, "{n:?}");
    }
    let ends: u64 = t.iter().map(|n| n.exclusive).sum();
    assert_eq!(ends, 12);
}

#[test]
fn tree_pruning() {
    let p = known();
    // 30 % of 12 = 3.6: the c under a (3) and everything at 2 go.
    let t = call_tree(&p, Direction::TopDown, 30.0, 0);
    let f: Vec<u32> = t.iter().map(|n| n.function_id as u32).collect();
    assert_eq!(f, vec![MAIN, A, B, R, R, R]);
    assert_eq!(t[4].parent, 3);
    // Depth 1 at most: main and its children.
    let t = call_tree(&p, Direction::TopDown, 0.0, 1);
    assert_eq!(
        shape(&t),
        vec![
            (MAIN, 0, -1, 12, 0),
            (A, 1, 0, 4, 1),
            (B, 1, 0, 4, 0),
            (R, 1, 0, 4, 0),
        ]
    );
    // A min_pct over everything drops even the roots.
    assert!(call_tree(&p, Direction::BottomUp, 100.1, 0).is_empty());
    assert!(call_tree(&ResolvedProfile::default(), Direction::TopDown, 0.0, 0).is_empty());
}

#[test]
fn hot_paths() {
    let p = known();
    assert_eq!(
        shape(&hot_path(&p, Direction::TopDown, 0.0)),
        vec![(MAIN, 0, -1, 12, 0), (A, 1, 0, 4, 1), (C, 2, 1, 3, 3)]
    );
    assert_eq!(
        shape(&hot_path(&p, Direction::BottomUp, 0.0)),
        vec![(C, 0, -1, 5, 5), (A, 1, 0, 3, 0), (MAIN, 2, 1, 3, 0)]
    );
    // It ends where the heaviest child falls under the threshold: a (4 of
    // 12, 33 %) is kept at 30 %, the c under it (3 of 12, 25 %) is not;
    // above every root, the path is empty.
    assert_eq!(
        shape(&hot_path(&p, Direction::TopDown, 30.0)),
        vec![(MAIN, 0, -1, 12, 0), (A, 1, 0, 4, 1)]
    );
    assert!(hot_path(&p, Direction::TopDown, 100.1).is_empty());
    assert!(hot_path(&ResolvedProfile::default(), Direction::TopDown, 0.0).is_empty());
}

#[test]
fn callers_and_callees() {
    let p = known();
    let cc = callers_callees(&p, C);
    let f = cc.function.unwrap();
    assert_eq!((f.name.as_str(), f.inclusive, f.exclusive), ("c", 5, 5));
    assert_eq!(edge_figures(&cc.callers), vec![(A, 3, 3), (B, 2, 2)]);
    assert!(cc.callees.is_empty());
    assert_eq!(cc.callers[0].inclusive_pct, 25.0);

    let cc = callers_callees(&p, MAIN);
    assert!(cc.callers.is_empty());
    // main→r: every r r r main sample ends in r, so its exclusive is 4.
    assert_eq!(
        edge_figures(&cc.callees),
        vec![(R, 4, 4), (A, 4, 1), (B, 4, 0)]
    );

    let cc = callers_callees(&p, B);
    assert_eq!(edge_figures(&cc.callers), vec![(MAIN, 4, 0)]);
    assert_eq!(edge_figures(&cc.callees), vec![(C, 2, 2), (INL, 2, 2)]);
}

#[test]
fn recursion_is_its_own_caller_once_per_sample() {
    let p = known();
    let cc = callers_callees(&p, R);
    // r r r main ×4: the r→r pair appears twice per sample, counted once.
    assert_eq!(edge_figures(&cc.callers), vec![(MAIN, 4, 4), (R, 4, 4)]);
    assert_eq!(edge_figures(&cc.callees), vec![(R, 4, 4)]);
    assert!(cc.callers.iter().all(|e| e.inclusive <= 4));
}

#[test]
fn mutual_recursion_counts_functions_and_edges_once_per_sample() {
    // ping → pong → ping → pong: each function and each edge is on a stack
    // up to twice, and counted once per sample.
    let p = crate::testdata::mutual();
    let (main, ping, pong) = (0, 1, 2);
    let rows: Vec<(String, u64, u64)> = functions(&p)
        .into_iter()
        .map(|f| (f.name, f.inclusive, f.exclusive))
        .collect();
    let want = [("pong", 10, 7), ("ping", 10, 3), ("main", 10, 0)];
    assert_eq!(rows, want.map(|(n, i, e)| (n.to_string(), i, e)));
    let cc = callers_callees(&p, ping);
    assert_eq!(edge_figures(&cc.callers), vec![(main, 10, 3), (pong, 9, 3)]);
    assert_eq!(edge_figures(&cc.callees), vec![(pong, 10, 7)]);
    let cc = callers_callees(&p, pong);
    assert_eq!(edge_figures(&cc.callers), vec![(ping, 10, 7)]);
    assert_eq!(edge_figures(&cc.callees), vec![(ping, 9, 3)]);
}

#[test]
fn caller_callee_of_unsampled_or_unknown() {
    let p = known();
    let cc = callers_callees(&p, UNUSED);
    assert_eq!(cc.function.unwrap().inclusive, 0);
    assert!(cc.callers.is_empty() && cc.callees.is_empty());
    assert_eq!(callers_callees(&p, 999), api::CallerCallee::default());
}

#[test]
fn thread_rows() {
    let mut p = known();
    let none = HashMap::new();
    let t = threads(&p, &none);
    let rows: Vec<(u32, u32, &str, u64, f64, u64)> = t
        .iter()
        .map(|r| {
            (
                r.tid,
                r.pid,
                r.name.as_str(),
                r.samples,
                r.pct,
                r.top_function_id,
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            (10, 1234, "main", 6, 50.0, u64::from(C)),
            (11, 1235, "worker", 6, 50.0, u64::from(R)),
        ]
    );
    p.threads.clear();
    p.stacks[4].count = 10;
    p.attributed = 20;
    let t = threads(&p, &none);
    assert_eq!((t[0].tid, t[0].name.as_str(), t[0].samples), (11, "", 14));
    assert_eq!(t[0].top_function_id, u64::from(INL));
    assert_eq!(t[0].pct, 70.0);
    assert!(t.iter().all(|r| r.unknown_ns == 0));
    // Time no record tells, per thread: on its row, and a row of its own
    // for a thread with nothing else.
    let unknown = HashMap::from([(10, 5), (12, 7)]);
    let t = threads(&p, &unknown);
    let rows: Vec<(u32, u64, u64)> = t.iter().map(|r| (r.tid, r.samples, r.unknown_ns)).collect();
    assert_eq!(rows, [(11, 14, 0), (10, 6, 5), (12, 0, 7)]);
}

#[test]
fn filters_keep_the_samples_of_threads_and_processes() {
    let table = |p: &ResolvedProfile| -> Vec<(String, u64, u64)> {
        functions(p)
            .into_iter()
            .map(|f| (f.name, f.inclusive, f.exclusive))
            .collect()
    };
    let all = known();
    let mut p = known();
    keep_only(&mut p, &[], &[]);
    assert_eq!(p, all, "no filter keeps everything");
    // Thread 10: c a main ×3, c b main ×2, a main ×1.
    keep_only(&mut p, &[10], &[]);
    assert_eq!(p.attributed, 6);
    assert_eq!(
        table(&p),
        [("main", 6, 0), ("c", 5, 5), ("a", 4, 1), ("b", 2, 0)].map(|(n, i, e)| (
            n.to_string(),
            i,
            e
        ))
    );
    assert_eq!(functions(&p)[1].exclusive_pct, 5.0 * 100.0 / 6.0);
    // Process 1235 is thread 11's; a thread and a process add up.
    let mut q = known();
    keep_only(&mut q, &[], &[1235]);
    assert_eq!(q.attributed, 6);
    assert!(q.stacks.iter().all(|s| s.tid == 11));
    let mut both = known();
    keep_only(&mut both, &[10], &[1235]);
    assert_eq!(both.attributed, 12);
    // Ids without samples select nothing.
    let mut none = known();
    keep_only(&mut none, &[99], &[]);
    assert_eq!((none.attributed, none.stacks.len()), (0, 0));
}

#[test]
fn line_rows() {
    let p = known();
    let rows = lines(&p, C);
    let l: Vec<(&str, u32, u64)> = rows
        .iter()
        .map(|r| (r.file.as_str(), r.line, r.exclusive))
        .collect();
    assert_eq!(l, vec![("c.c", 30, 3), ("c.c", 31, 2)]);
    assert_eq!(lines(&p, C)[0].exclusive_pct, 25.0);
    // Only innermost frames count: main is never innermost.
    assert!(lines(&p, MAIN).is_empty());
    assert_eq!(lines(&p, R).len(), 1);
    assert!(lines(&p, 999).is_empty());
}

/// The call tree as the whole tree gives it: every path made, then cut.
fn whole_tree(
    p: &ResolvedProfile,
    direction: Direction,
    min_pct: f64,
    max_depth: u32,
) -> Vec<api::TreeNode> {
    let mut t = Tree::build(p, direction);
    t.sort(p);
    let keep = |i: usize| percent(t.inclusive[i], p.attributed) >= min_pct;
    let mut out = Vec::new();
    let mut todo: Vec<(usize, i32, u32)> = t.roots.iter().rev().map(|&r| (r, -1, 0)).collect();
    while let Some((i, parent, depth)) = todo.pop() {
        if !keep(i) {
            continue;
        }
        let here = out.len() as i32;
        out.push(t.node(i, parent, depth));
        if max_depth == 0 || depth < max_depth {
            todo.extend(t.children[i].iter().rev().map(|&c| (c, here, depth + 1)));
        }
    }
    out
}

/// The hot path as the whole tree gives it: every path made, then the
/// heaviest child followed.
fn whole_tree_hot_path(
    p: &ResolvedProfile,
    direction: Direction,
    min_pct: f64,
) -> Vec<api::TreeNode> {
    let t = Tree::build(p, direction);
    let heaviest = |nodes: &[usize]| {
        nodes
            .iter()
            .copied()
            .min_by(|&a, &b| t.order(p, a, b))
            .filter(|&i| percent(t.inclusive[i], p.attributed) >= min_pct)
    };
    let mut out = Vec::new();
    let mut next = heaviest(&t.roots);
    while let Some(i) = next {
        let depth = out.len() as u32;
        out.push(t.node(i, depth as i32 - 1, depth));
        next = heaviest(&t.children[i]);
    }
    out
}

#[test]
fn trees_built_a_depth_at_a_time_are_the_whole_trees_cut() {
    // 3000 stacks of 1 to 9 frames over 12 functions (recursion included).
    let mut p = known();
    let functions = p.functions.len() as u32;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..3000 {
        let depth = 1 + next() % 9;
        let frames = (0..depth)
            .map(|_| crate::model::FrameRef {
                function: (next() % u64::from(functions)) as u32,
                line: 0,
                address: 0,
            })
            .collect();
        let count = 1 + next() % 5;
        p.attributed += count;
        p.stacks.push(ResolvedStack {
            tid: 1,
            frames,
            count,
        });
    }
    for direction in [Direction::TopDown, Direction::BottomUp] {
        for min_pct in [0.0, 0.5, 3.0, 20.0] {
            for max_depth in [0, 1, 3] {
                assert_eq!(
                    call_tree(&p, direction, min_pct, max_depth),
                    whole_tree(&p, direction, min_pct, max_depth),
                    "{direction:?}, min_pct {min_pct}, max_depth {max_depth}"
                );
            }
            let hot = hot_path(&p, direction, min_pct);
            assert_eq!(hot, whole_tree_hot_path(&p, direction, min_pct));
            assert!(min_pct > 1.0 || hot.len() > 1, "{hot:?}");
        }
    }
}
