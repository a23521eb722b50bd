//! Views of a resolved profile, as the API serves them: the flat function
//! table, call trees (top-down, bottom-up), the hot path, callers and callees
//! of one function, threads and source lines. Pure functions of a
//! [`ResolvedProfile`]; percentages are over its attributed total (samples,
//! or nanoseconds for off-CPU and wall-clock profiles: the views do not
//! depend on the unit). Exports
//! (pprof, folded, ...) live in `export`, not here.
use std::cmp::Ordering;
use std::collections::HashMap;

use crate::api;
use crate::model::{percent, Aggregator, Counts, ResolvedProfile, ResolvedStack};

/// Function ids of a stack, innermost first.
fn ids(stack: &ResolvedStack) -> impl DoubleEndedIterator<Item = u32> + '_ {
    stack.frames.iter().map(|f| f.function)
}

/// Which end of the stacks a call tree's roots are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The outermost frames: callers above their callees.
    TopDown,
    /// The innermost frames, where the samples were taken: callees above
    /// their callers.
    BottomUp,
}

impl Direction {
    /// As a request's `bottom_up` field says.
    pub fn of(bottom_up: bool) -> Direction {
        match bottom_up {
            true => Direction::BottomUp,
            false => Direction::TopDown,
        }
    }

    /// Whether depth `depth` of a path of `len` frames is the innermost frame.
    fn innermost(self, depth: usize, len: usize) -> bool {
        match self {
            Direction::BottomUp => depth == 0,
            Direction::TopDown => depth + 1 == len,
        }
    }
}

/// The function of frame `depth` of a stack's path, root first.
fn path_frame(s: &ResolvedStack, depth: usize, direction: Direction) -> u32 {
    let i = match direction {
        Direction::BottomUp => depth,
        Direction::TopDown => s.frames.len() - 1 - depth,
    };
    s.frames[i].function
}

/// Per-function counts, indexed by function id.
fn counts(p: &ResolvedProfile) -> Vec<Counts> {
    let mut agg = Aggregator::new(p.functions.len());
    let mut buf = Vec::new();
    for s in &p.stacks {
        buf.clear();
        buf.extend(ids(s));
        agg.add(&buf, s.count);
    }
    agg.into_counts()
}

/// Inclusive samples per function, indexed by function id.
pub(crate) fn inclusive_counts(p: &ResolvedProfile) -> Vec<u64> {
    counts(p).into_iter().map(|c| c.inclusive).collect()
}

/// The flat row of function `id` with counts `c`.
fn row(p: &ResolvedProfile, id: u32, c: Counts) -> api::Function {
    let info = &p.functions[id as usize];
    api::Function {
        id: u64::from(id),
        name: info.name.clone(),
        module: info.module.clone(),
        inclusive: c.inclusive,
        exclusive: c.exclusive,
        inclusive_pct: percent(c.inclusive, p.attributed),
        exclusive_pct: percent(c.exclusive, p.attributed),
        inlined: info.inlined,
        window_inclusive: 0,
        window_exclusive: 0,
    }
}

/// Name of function `id` (empty when out of range), for tie-breaking.
fn name(p: &ResolvedProfile, id: u32) -> &str {
    p.functions.get(id as usize).map_or("", |f| f.name.as_str())
}

/// Flat per-function table: inclusive (once per sample even under
/// recursion), exclusive (innermost frame), percentages over
/// `p.attributed`; sorted by inclusive descending, then exclusive
/// descending, then name (then id). Only functions with samples; `id` is the
/// function's index in `p.functions`.
pub fn functions(p: &ResolvedProfile) -> Vec<api::Function> {
    function_rows(p, counts(p))
}

/// [`functions`] from per-function `counts` (indexed by function id)
/// counted elsewhere: `p`'s stacks are not read.
pub fn function_rows(p: &ResolvedProfile, counts: Vec<Counts>) -> Vec<api::Function> {
    let mut rows: Vec<api::Function> = counts
        .into_iter()
        .enumerate()
        .filter(|(_, c)| c.inclusive > 0)
        .map(|(id, c)| row(p, id as u32, c))
        .collect();
    sort_rows(&mut rows);
    rows
}

/// Keeps only the samples of threads `tids` and of processes `pids` (none
/// of either: every sample); `attributed` becomes theirs, so that views
/// and percentages are over them.
pub fn keep_only(p: &mut ResolvedProfile, tids: &[u32], pids: &[u32]) {
    if tids.is_empty() && pids.is_empty() {
        return;
    }
    let thread_pids = &p.thread_pids;
    p.stacks.retain(|s| {
        tids.contains(&s.tid)
            || thread_pids
                .get(&s.tid)
                .is_some_and(|pid| pids.contains(pid))
    });
    p.attributed = p.stacks.iter().map(|s| s.count).sum();
}

/// Sort a function table as [`functions`] does: inclusive descending, then
/// exclusive descending, then name, then id.
pub fn sort_rows(rows: &mut [api::Function]) {
    rows.sort_by(|a, b| {
        b.inclusive
            .cmp(&a.inclusive)
            .then_with(|| b.exclusive.cmp(&a.exclusive))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.id.cmp(&b.id))
    });
}

/// A call tree of paths: node 0.. in insertion order, children by lookup.
struct Tree {
    function: Vec<u32>,
    inclusive: Vec<u64>,
    exclusive: Vec<u64>,
    children: Vec<Vec<usize>>,
    roots: Vec<usize>,
    /// (parent or usize::MAX for roots, function) → node.
    index: HashMap<(usize, u32), usize>,
}

impl Tree {
    /// Every path of every stack (the tests' reference for the trees and
    /// paths built without it).
    #[cfg(test)]
    fn build(p: &ResolvedProfile, direction: Direction) -> Tree {
        let mut t = Tree {
            function: Vec::new(),
            inclusive: Vec::new(),
            exclusive: Vec::new(),
            children: Vec::new(),
            roots: Vec::new(),
            index: HashMap::new(),
        };
        for s in p.stacks.iter().filter(|s| !s.frames.is_empty()) {
            match direction {
                Direction::BottomUp => t.add(ids(s), s.count, true),
                Direction::TopDown => t.add(ids(s).rev(), s.count, false),
            }
        }
        t
    }

    /// The tree of the nodes `keep` keeps (by their inclusive count) down
    /// to `max_depth` (0 = unlimited), built a depth at a time: the nodes
    /// of one depth are counted first and only those kept are made, so a
    /// subtree cut at the root of it is never held. The nodes kept and
    /// their counts are those of [`Tree::build`].
    fn build_kept(
        p: &ResolvedProfile,
        direction: Direction,
        keep: impl Fn(u64) -> bool,
        max_depth: u32,
    ) -> Tree {
        const GONE: usize = usize::MAX - 1;
        let mut t = Tree {
            function: Vec::new(),
            inclusive: Vec::new(),
            exclusive: Vec::new(),
            children: Vec::new(),
            roots: Vec::new(),
            index: HashMap::new(),
        };
        let stacks: Vec<&ResolvedStack> =
            p.stacks.iter().filter(|s| !s.frames.is_empty()).collect();
        let at = |s: &ResolvedStack, depth: usize| path_frame(s, depth, direction);
        // Each stack's node at the depth before (usize::MAX: the root's
        // parent; GONE: cut or ended).
        let mut node_of = vec![usize::MAX; stacks.len()];
        let mut depth = 0usize;
        loop {
            if max_depth != 0 && depth > max_depth as usize {
                break;
            }
            let mut counts: HashMap<(usize, u32), u64> = HashMap::new();
            for (s, &parent) in stacks.iter().zip(&node_of) {
                if parent != GONE && depth < s.frames.len() {
                    *counts.entry((parent, at(s, depth))).or_default() += s.count;
                }
            }
            if counts.is_empty() {
                break;
            }
            for ((parent, f), n) in counts {
                if !keep(n) {
                    continue;
                }
                let node = t.function.len();
                t.function.push(f);
                t.inclusive.push(n);
                t.exclusive.push(0);
                t.children.push(Vec::new());
                t.index.insert((parent, f), node);
                if parent == usize::MAX {
                    t.roots.push(node);
                } else {
                    t.children[parent].push(node);
                }
            }
            for (s, parent) in stacks.iter().zip(node_of.iter_mut()) {
                if *parent == GONE || depth >= s.frames.len() {
                    *parent = GONE;
                    continue;
                }
                let Some(&node) = t.index.get(&(*parent, at(s, depth))) else {
                    *parent = GONE;
                    continue;
                };
                if direction.innermost(depth, s.frames.len()) {
                    t.exclusive[node] += s.count;
                }
                *parent = node;
            }
            depth += 1;
        }
        t
    }

    /// Adds `n` samples along `path` (root first), their exclusive count
    /// to the innermost frame: the root when `innermost_first`, else the
    /// last node.
    #[cfg(test)]
    fn add(&mut self, path: impl Iterator<Item = u32>, n: u64, innermost_first: bool) {
        let mut parent = usize::MAX;
        for f in path {
            let node = match self.index.get(&(parent, f)) {
                Some(&node) => node,
                None => {
                    let node = self.function.len();
                    self.function.push(f);
                    self.inclusive.push(0);
                    self.exclusive.push(0);
                    self.children.push(Vec::new());
                    self.index.insert((parent, f), node);
                    if parent == usize::MAX {
                        self.roots.push(node);
                    } else {
                        self.children[parent].push(node);
                    }
                    node
                }
            };
            self.inclusive[node] += n;
            if innermost_first && parent == usize::MAX {
                self.exclusive[node] += n;
            }
            parent = node;
        }
        if !innermost_first && parent != usize::MAX {
            self.exclusive[parent] += n;
        }
    }

    /// Heaviest first; ties by function name, then id.
    fn order(&self, p: &ResolvedProfile, a: usize, b: usize) -> Ordering {
        let (fa, fb) = (self.function[a], self.function[b]);
        self.inclusive[b]
            .cmp(&self.inclusive[a])
            .then_with(|| name(p, fa).cmp(name(p, fb)))
            .then_with(|| fa.cmp(&fb))
    }

    fn sort(&mut self, p: &ResolvedProfile) {
        let mut roots = std::mem::take(&mut self.roots);
        roots.sort_by(|&a, &b| self.order(p, a, b));
        self.roots = roots;
        for i in 0..self.children.len() {
            let mut c = std::mem::take(&mut self.children[i]);
            c.sort_by(|&a, &b| self.order(p, a, b));
            self.children[i] = c;
        }
    }

    fn node(&self, i: usize, parent: i32, depth: u32) -> api::TreeNode {
        api::TreeNode {
            parent,
            depth,
            function_id: u64::from(self.function[i]),
            inclusive: self.inclusive[i],
            exclusive: self.exclusive[i],
        }
    }
}

/// The call tree flattened depth-first, children sorted by inclusive
/// descending (then name). Top-down, roots are the outermost frames and a
/// node's `exclusive` counts the samples whose innermost frame it is;
/// bottom-up, roots are the innermost frames and hold the exclusive
/// samples (a root's `inclusive` and `exclusive` are its function's
/// exclusive samples; other nodes have none), and a node's `inclusive`
/// counts the samples whose stack ends (innermost first) with its path.
/// A node is a path, so recursion
/// repeats frames. Nodes under `min_pct` (0–100 of attributed) are dropped
/// with their subtrees; `max_depth` is the deepest depth kept (roots are at
/// depth 0), 0 = unlimited.
pub fn call_tree(
    p: &ResolvedProfile,
    direction: Direction,
    min_pct: f64,
    max_depth: u32,
) -> Vec<api::TreeNode> {
    let kept = |n: u64| percent(n, p.attributed) >= min_pct;
    let mut t = Tree::build_kept(p, direction, kept, max_depth);
    t.sort(p);
    let keep = |i: usize| kept(t.inclusive[i]);
    let mut out = Vec::new();
    // (node, parent index in out, depth), popped in depth-first order.
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

/// The heaviest path: the root with the most inclusive samples, then at
/// each level the child with the most (ties by name, then id), as long as
/// that child holds at least `min_pct` (0–100) of the attributed samples:
/// the path ends at the hot function, not in the noise under it. Nodes as
/// in [`call_tree`], each the parent of the next.
pub fn hot_path(p: &ResolvedProfile, direction: Direction, min_pct: f64) -> Vec<api::TreeNode> {
    // Walked a depth at a time, keeping only the stacks still on the path
    // (4 bytes each): the tree around it is never made.
    let at = |s: &ResolvedStack, depth: usize| path_frame(s, depth, direction);
    let mut on: Vec<u32> = (0..p.stacks.len() as u32)
        .filter(|&i| !p.stacks[i as usize].frames.is_empty())
        .collect();
    let mut out = Vec::new();
    for depth in 0.. {
        // Each function at this depth: (inclusive, exclusive).
        let mut counts: HashMap<u32, (u64, u64)> = HashMap::new();
        for &i in &on {
            let s = &p.stacks[i as usize];
            let c = counts.entry(at(s, depth)).or_default();
            c.0 += s.count;
            if direction.innermost(depth, s.frames.len()) {
                c.1 += s.count;
            }
        }
        let heaviest = counts
            .into_iter()
            .min_by(|(fa, a), (fb, b)| {
                b.0.cmp(&a.0)
                    .then_with(|| name(p, *fa).cmp(name(p, *fb)))
                    .then_with(|| fa.cmp(fb))
            })
            .filter(|(_, c)| percent(c.0, p.attributed) >= min_pct);
        let Some((f, (inclusive, exclusive))) = heaviest else {
            break;
        };
        out.push(api::TreeNode {
            parent: depth as i32 - 1,
            depth: depth as u32,
            function_id: u64::from(f),
            inclusive,
            exclusive,
        });
        on.retain(|&i| {
            let s = &p.stacks[i as usize];
            depth + 1 < s.frames.len() && at(s, depth) == f
        });
    }
    out
}

/// Credits the edge to `f` with stack number `n` (once per stack).
fn credit(m: &mut HashMap<u32, EdgeCounts>, f: u32, n: usize, s: &ResolvedStack, leaf: bool) {
    let e = m.entry(f).or_default();
    if e.last != n {
        e.last = n;
        e.inclusive += s.count;
        if leaf {
            e.exclusive += s.count;
        }
    }
}

/// An edge's figures while counting.
#[derive(Default, Clone, Copy)]
struct EdgeCounts {
    inclusive: u64,
    exclusive: u64,
    /// Number (1-based) of the last stack counted, for once-per-sample.
    last: usize,
}

fn edges(p: &ResolvedProfile, m: HashMap<u32, EdgeCounts>) -> Vec<api::Edge> {
    let mut v: Vec<api::Edge> = m
        .into_iter()
        .map(|(f, c)| api::Edge {
            function_id: u64::from(f),
            inclusive: c.inclusive,
            exclusive: c.exclusive,
            inclusive_pct: percent(c.inclusive, p.attributed),
        })
        .collect();
    v.sort_by(|a, b| {
        b.inclusive
            .cmp(&a.inclusive)
            .then_with(|| b.exclusive.cmp(&a.exclusive))
            .then_with(|| name(p, a.function_id as u32).cmp(name(p, b.function_id as u32)))
            .then_with(|| a.function_id.cmp(&b.function_id))
    });
    v
}

/// The Caller/Callee view of `function`: `callers` are the functions
/// directly outer to it on stacks, `callees` those directly inner. An edge's
/// `inclusive` counts the samples with that pair adjacent on the stack (once
/// per sample); its `exclusive` counts, of those, the samples whose
/// innermost frame is the callee (for callers: `function` itself).
/// Recursion makes a function its own caller and callee. `function` is its
/// flat row (None when the id is out of range); edges sorted by inclusive
/// descending.
pub fn callers_callees(p: &ResolvedProfile, function: u32) -> api::CallerCallee {
    let Some(c) = counts(p).get(function as usize).copied() else {
        return api::CallerCallee::default();
    };
    let mut callers: HashMap<u32, EdgeCounts> = HashMap::new();
    let mut callees: HashMap<u32, EdgeCounts> = HashMap::new();
    for (n, s) in p.stacks.iter().enumerate() {
        let fr = &s.frames;
        let Some(leaf) = fr.first().map(|f| f.function) else {
            continue;
        };
        for i in (0..fr.len()).filter(|&i| fr[i].function == function) {
            if let Some(outer) = fr.get(i + 1) {
                credit(&mut callers, outer.function, n + 1, s, leaf == function);
            }
            if i > 0 {
                let inner = fr[i - 1].function;
                credit(&mut callees, inner, n + 1, s, leaf == inner);
            }
        }
    }
    api::CallerCallee {
        function: Some(row(p, function, c)),
        callers: edges(p, callers),
        callees: edges(p, callees),
    }
}

/// Samples per thread (name from `p.threads`, else ""), percent of
/// attributed, the function with the most exclusive samples on the
/// thread (ties: lowest id; 0 when the thread has no frames), and its time
/// no record tells from `unknown` (off-CPU and wall sessions: tid →
/// nanoseconds; a thread with only such time has a row too); sorted by
/// samples descending, then tid.
pub fn threads(p: &ResolvedProfile, unknown: &HashMap<u32, u64>) -> Vec<api::ThreadRow> {
    let mut per: HashMap<u32, (u64, HashMap<u32, u64>)> = HashMap::new();
    for s in &p.stacks {
        let (samples, excl) = per.entry(s.tid).or_default();
        *samples += s.count;
        if let Some(f) = s.frames.first() {
            *excl.entry(f.function).or_default() += s.count;
        }
    }
    for &tid in unknown.keys() {
        per.entry(tid).or_default();
    }
    let mut rows: Vec<api::ThreadRow> = per
        .into_iter()
        .map(|(tid, (samples, excl))| api::ThreadRow {
            tid,
            name: p.threads.get(&tid).cloned().unwrap_or_default(),
            samples,
            pct: percent(samples, p.attributed),
            pid: p.thread_pids.get(&tid).copied().unwrap_or(0),
            top_function_id: excl
                .into_iter()
                .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
                .map_or(0, |(f, _)| u64::from(f)),
            unknown_ns: unknown.get(&tid).copied().unwrap_or(0),
        })
        .collect();
    rows.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.tid.cmp(&b.tid)));
    rows
}

/// Exclusive samples per source line of `function` (the innermost frames of
/// stacks whose innermost function it is; `file` = the function's file;
/// line 0 = unknown), sorted by samples descending, then line.
pub fn lines(p: &ResolvedProfile, function: u32) -> Vec<api::LineRow> {
    let file = p
        .functions
        .get(function as usize)
        .map_or("", |f| f.file.as_str());
    let mut per: HashMap<u32, u64> = HashMap::new();
    for s in &p.stacks {
        if let Some(f) = s.frames.first().filter(|f| f.function == function) {
            *per.entry(f.line).or_default() += s.count;
        }
    }
    let mut rows: Vec<api::LineRow> = per
        .into_iter()
        .map(|(line, exclusive)| api::LineRow {
            file: file.to_string(),
            line,
            exclusive,
            exclusive_pct: percent(exclusive, p.attributed),
        })
        .collect();
    rows.sort_by(|a, b| b.exclusive.cmp(&a.exclusive).then(a.line.cmp(&b.line)));
    rows
}

#[cfg(test)]
#[path = "views_tests.rs"]
mod tests;
