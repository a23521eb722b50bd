//! Turns structured views (`GetViewResponse`, from the daemon or computed
//! from a saved file) into text: the call tree and hot path, the callers /
//! callees view, threads and source lines. Pure functions from values to
//! strings.
use std::collections::HashMap;
use std::fmt::Write as _;

use profd_common::api::{CallerCallee, Edge, Function, GetViewResponse, Session, TreeNode};

use crate::ranking::{percent, totals};
use crate::render::{module_cell, shorten, INLINED_MARK};

/// The widest a function name gets in a view before it is shortened.
pub const VIEW_NAME_WIDTH: usize = 80;

/// Header of a report on a saved file: where it came from, the target and
/// the sample total.
pub fn file_header(path: &str, session: &Session) -> String {
    let target = if session.comm.is_empty() {
        format!("pid {}", session.pid)
    } else {
        format!("pid {} ({})", session.pid, session.comm)
    };
    format!(
        "profile {path} — {target} — {} Hz — {:.2} s\nsamples: {} attributed\n",
        session.frequency_hz,
        session.duration_s,
        totals(session).attributed
    )
}

/// The functions of a view by id.
struct Names<'a> {
    by_id: HashMap<u64, &'a Function>,
}

impl<'a> Names<'a> {
    fn new(functions: &'a [Function]) -> Self {
        Names {
            by_id: functions.iter().map(|f| (f.id, f)).collect(),
        }
    }

    /// `name [inlined]  [module]`, or `[function #id]` for an unknown id.
    fn label(&self, id: u64) -> String {
        match self.by_id.get(&id) {
            Some(f) => format!(
                "{}{}{}",
                shorten(&f.name, VIEW_NAME_WIDTH),
                if f.inlined { INLINED_MARK } else { "" },
                module_cell(&f.module)
            ),
            None => format!("[function #{id}]"),
        }
    }

    fn name(&self, id: u64) -> String {
        self.by_id
            .get(&id)
            .map_or_else(|| format!("[function #{id}]"), |f| f.name.clone())
    }
}

/// Width of the count columns: the widest count, at least 5.
fn count_width(counts: impl Iterator<Item = u64>) -> usize {
    counts.max().unwrap_or(0).to_string().len().max(5)
}

/// A call tree or hot path: one line per node in depth-first order, the
/// function indented two spaces per level, with the node's inclusive and
/// exclusive samples and their shares of all samples.
pub fn tree_text(view: &GetViewResponse, title: &str) -> String {
    let attributed = view.session.as_ref().map_or(0, |s| totals(s).attributed);
    let names = Names::new(&view.functions);
    let mut out = format!("{title}: {attributed} samples\n");
    let w = count_width(view.nodes.iter().map(|n| n.inclusive));
    let _ = writeln!(
        out,
        "{:>6}  {:>w$}  {:>6}  {:>w$}  FUNCTION  [MODULE]",
        "INCL%", "INCL", "EXCL%", "EXCL"
    );
    if view.nodes.is_empty() {
        out.push_str("(no samples)\n");
    }
    for node in &view.nodes {
        let _ = writeln!(out, "{}", tree_row(node, attributed, w, &names));
    }
    out
}

fn tree_row(node: &TreeNode, attributed: u64, w: usize, names: &Names) -> String {
    format!(
        "{:>5.1}%  {:>w$}  {:>5.1}%  {:>w$}  {}{}",
        percent(node.inclusive, attributed),
        node.inclusive,
        percent(node.exclusive, attributed),
        node.exclusive,
        "  ".repeat(node.depth as usize),
        names.label(node.function_id)
    )
}

/// Callers and callees in the Visual Studio style: the calling functions
/// above, the function itself, the called functions below. Each row shows
/// samples through that edge (inclusive) and those ending in the callee
/// (exclusive) as shares of all samples, and SHARE, the edge's part of the
/// function's inclusive samples.
pub fn caller_callee_text(view: &GetViewResponse, callers: bool, callees: bool) -> String {
    let attributed = view.session.as_ref().map_or(0, |s| totals(s).attributed);
    let names = Names::new(&view.functions);
    let default = CallerCallee::default();
    let cc = view.caller_callee.as_ref().unwrap_or(&default);
    let f = cc.function.clone().unwrap_or_default();
    let w = count_width(
        cc.callers
            .iter()
            .chain(&cc.callees)
            .map(|e| e.inclusive)
            .chain([f.inclusive]),
    );
    let mut out = format!(
        "callers and callees of {}: {} inclusive ({:.1} %), {} exclusive ({:.1} %) of {attributed} samples\n",
        if f.name.is_empty() {
            names.name(f.id)
        } else {
            f.name.clone()
        },
        f.inclusive,
        percent(f.inclusive, attributed),
        f.exclusive,
        percent(f.exclusive, attributed),
    );
    let _ = writeln!(
        out,
        "{:>6}  {:>w$}  {:>6}  {:>6}  {:>w$}  FUNCTION  [MODULE]",
        "INCL%", "INCL", "SHARE", "EXCL%", "EXCL"
    );
    let row = |id: u64, inclusive: u64, exclusive: u64, label: Option<String>| {
        format!(
            "{:>5.1}%  {:>w$}  {:>5.1}%  {:>5.1}%  {:>w$}  {}\n",
            percent(inclusive, attributed),
            inclusive,
            percent(inclusive, f.inclusive),
            percent(exclusive, attributed),
            exclusive,
            label.unwrap_or_else(|| names.label(id))
        )
    };
    let edges = |out: &mut String, edges: &[Edge]| {
        if edges.is_empty() {
            out.push_str("  (none)\n");
        }
        let mut sorted: Vec<&Edge> = edges.iter().collect();
        sorted.sort_by(|a, b| {
            b.inclusive
                .cmp(&a.inclusive)
                .then_with(|| names.name(a.function_id).cmp(&names.name(b.function_id)))
        });
        for e in sorted {
            out.push_str(&row(e.function_id, e.inclusive, e.exclusive, None));
        }
    };
    if callers {
        out.push_str("calling functions:\n");
        edges(&mut out, &cc.callers);
    }
    out.push_str("current function:\n");
    let label = (!names.by_id.contains_key(&f.id)).then(|| {
        format!(
            "{}{}{}",
            f.name,
            if f.inlined { INLINED_MARK } else { "" },
            module_cell(&f.module)
        )
    });
    out.push_str(&row(f.id, f.inclusive, f.exclusive, label));
    if callees {
        out.push_str("called functions:\n");
        edges(&mut out, &cc.callees);
    }
    out
}

/// Samples per thread, most first.
pub fn threads_text(view: &GetViewResponse) -> String {
    let names = Names::new(&view.functions);
    let mut rows: Vec<_> = view.threads.iter().collect();
    rows.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.tid.cmp(&b.tid)));
    let w = count_width(rows.iter().map(|t| t.samples)).max("SAMPLES".len());
    let nw = rows
        .iter()
        .map(|t| t.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>7}  {:<nw$}  {:>w$}  {:>6}  TOP FUNCTION",
        "TID", "NAME", "SAMPLES", "PCT"
    );
    if rows.is_empty() {
        out.push_str("(no samples)\n");
    }
    for t in rows {
        let _ = writeln!(
            out,
            "{:>7}  {:<nw$}  {:>w$}  {:>5.1}%  {}",
            t.tid,
            t.name,
            t.samples,
            t.pct,
            names.label(t.top_function_id)
        );
    }
    out
}

/// Exclusive samples per source line of one function, as `file:line  samples
/// pct` (of all samples), by line.
pub fn lines_text(view: &GetViewResponse, function: &str) -> String {
    let attributed = view.session.as_ref().map_or(0, |s| totals(s).attributed);
    let total: u64 = view.lines.iter().map(|l| l.exclusive).sum();
    let mut out =
        format!("source lines of {function}: {total} exclusive of {attributed} samples\n");
    let mut rows: Vec<_> = view.lines.iter().collect();
    rows.sort_by(|a, b| a.file.cmp(&b.file).then(a.line.cmp(&b.line)));
    let cells: Vec<String> = rows
        .iter()
        .map(|l| {
            if l.file.is_empty() {
                format!("[unknown]:{}", l.line)
            } else {
                format!("{}:{}", l.file, l.line)
            }
        })
        .collect();
    let fw = cells
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0)
        .max("FILE:LINE".len());
    let w = count_width(rows.iter().map(|l| l.exclusive)).max("SAMPLES".len());
    let _ = writeln!(out, "{:<fw$}  {:>w$}  {:>6}", "FILE:LINE", "SAMPLES", "PCT");
    if rows.is_empty() {
        out.push_str("(no samples with line information)\n");
    }
    for (l, cell) in rows.iter().zip(cells) {
        let _ = writeln!(
            out,
            "{cell:<fw$}  {:>w$}  {:>5.1}%",
            l.exclusive,
            percent(l.exclusive, attributed)
        );
    }
    out
}

#[cfg(test)]
#[path = "render_views_tests.rs"]
mod tests;
