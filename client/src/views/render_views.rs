//! Turns structured views (`GetViewResponse`, from the daemon or computed
//! from a saved file) into text: the call tree and hot path, the callers /
//! callees view, threads and source lines. Pure functions from values to
//! strings.
use std::collections::HashMap;
use std::fmt::Write as _;

use profd_common::api::{CallerCallee, Edge, Function, GetViewResponse, Mode, Session};
use profd_common::model::mode_name;

use crate::views::ranking::{percent, totals};
use crate::views::render::{module_cell, NameStyle, INLINED_MARK};
use crate::views::units::{count_text, counts_word, incl_excl, time_text, total_text, Case};

/// The widest a function name gets in a view before it is shortened.
pub const VIEW_NAME_WIDTH: usize = 80;

/// Header of a report on a saved file: where it came from, the target and
/// the sample total (for an off-CPU or wall-clock profile, its mode and the
/// time).
pub fn file_header(path: &str, session: &Session) -> String {
    let target = if session.comm.is_empty() {
        format!("pid {}", session.pid)
    } else {
        format!("pid {} ({})", session.pid, session.comm)
    };
    let attributed = totals(session).attributed;
    match session.mode() {
        Mode::OffCpu | Mode::Wall => format!(
            "profile {path} — {target} — {} — {:.2} s\ntime: {} attributed\n",
            mode_name(session.mode()),
            session.duration_s,
            count_text(session, attributed)
        ),
        Mode::Cpu | Mode::Unspecified => format!(
            "profile {path} — {target} — {} Hz — {:.2} s\nsamples: {attributed} attributed\n",
            session.frequency_hz, session.duration_s,
        ),
    }
}

/// The session of a view reply (a default one when it has none).
fn session_of(view: &GetViewResponse) -> Session {
    view.session.clone().unwrap_or_default()
}

/// The functions of a view by id, and how to show their names.
struct Names<'a> {
    by_id: HashMap<u64, &'a Function>,
    style: NameStyle,
}

impl<'a> Names<'a> {
    fn new(functions: &'a [Function], style: NameStyle) -> Self {
        Names {
            by_id: functions.iter().map(|f| (f.id, f)).collect(),
            style: style.at_most(VIEW_NAME_WIDTH),
        }
    }

    /// `name [inlined]  [module]`, or `[function #id]` for an unknown id.
    fn label(&self, id: u64) -> String {
        match self.by_id.get(&id) {
            Some(f) => format!(
                "{}{}{}",
                self.style.name(f.id, &f.name),
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

/// Width of the count columns: the widest count as shown, at least 5.
fn count_width(session: &Session, counts: impl Iterator<Item = u64>) -> usize {
    counts
        .map(|n| count_text(session, n).chars().count())
        .max()
        .unwrap_or(0)
        .max(5)
}

/// A call tree or hot path: one line per node in depth-first order, the
/// function indented two spaces per level, with the node's inclusive and
/// exclusive samples (times, in an off-CPU or wall-clock session) and their
/// shares of the total.
pub fn tree_text(view: &GetViewResponse, title: &str, style: NameStyle) -> String {
    let (header, rows) = tree_lines(view, title, style, |_| "");
    let mut out = header.join("\n") + "\n";
    if rows.is_empty() {
        out.push_str("(no samples)\n");
    }
    for row in rows {
        out += &row;
        out.push('\n');
    }
    out
}

/// The lines of [`tree_text`]: the title and column header, and one row
/// per node, `mark(i)` before node `i`'s name (after its indentation).
pub fn tree_lines(
    view: &GetViewResponse,
    title: &str,
    style: NameStyle,
    mark: impl Fn(usize) -> &'static str,
) -> (Vec<String>, Vec<String>) {
    let session = session_of(view);
    let attributed = totals(&session).attributed;
    let names = Names::new(&view.functions, style);
    let (incl, excl) = incl_excl(&session);
    let w = count_width(&session, view.nodes.iter().map(|n| n.inclusive)).max(incl.len());
    let header = vec![
        format!("{title}: {}", total_text(&session, attributed)),
        format!(
            "{:>6}  {:>w$}  {:>6}  {:>w$}  FUNCTION  [MODULE]",
            "INCL%", incl, "EXCL%", excl
        ),
    ];
    let n = |v: u64| count_text(&session, v);
    let rows = view
        .nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            format!(
                "{:>5.1}%  {:>w$}  {:>5.1}%  {:>w$}  {}{}{}",
                percent(node.inclusive, attributed),
                n(node.inclusive),
                percent(node.exclusive, attributed),
                n(node.exclusive),
                "  ".repeat(node.depth as usize),
                mark(i),
                names.label(node.function_id)
            )
        })
        .collect();
    (header, rows)
}

/// Callers and callees in the Visual Studio style: the calling functions
/// above, the function itself, the called functions below. Each row shows
/// samples through that edge (inclusive) and those ending in the callee
/// (exclusive) as shares of all samples, and SHARE, the edge's part of the
/// function's inclusive samples.
pub fn caller_callee_text(
    view: &GetViewResponse,
    callers: bool,
    callees: bool,
    style: NameStyle,
) -> String {
    let session = session_of(view);
    let attributed = totals(&session).attributed;
    let n = |v: u64| count_text(&session, v);
    let names = Names::new(&view.functions, style);
    let default = CallerCallee::default();
    let cc = view.caller_callee.as_ref().unwrap_or(&default);
    let f = cc.function.clone().unwrap_or_default();
    let (incl, excl) = incl_excl(&session);
    let w = count_width(
        &session,
        cc.callers
            .iter()
            .chain(&cc.callees)
            .flat_map(|e| [e.inclusive, e.exclusive])
            .chain([f.inclusive, f.exclusive]),
    )
    .max(incl.len());
    let mut out = format!(
        "callers and callees of {}: {} inclusive ({:.1} %), {} exclusive ({:.1} %) of {}\n",
        if f.name.is_empty() {
            names.name(f.id)
        } else {
            names.style.name(f.id, &f.name)
        },
        n(f.inclusive),
        percent(f.inclusive, attributed),
        n(f.exclusive),
        percent(f.exclusive, attributed),
        total_text(&session, attributed),
    );
    let _ = writeln!(
        out,
        "{:>6}  {:>w$}  {:>6}  {:>6}  {:>w$}  FUNCTION  [MODULE]",
        "INCL%", incl, "SHARE", "EXCL%", excl
    );
    let row = |id: u64, inclusive: u64, exclusive: u64, label: Option<String>| {
        format!(
            "{:>5.1}%  {:>w$}  {:>5.1}%  {:>5.1}%  {:>w$}  {}\n",
            percent(inclusive, attributed),
            n(inclusive),
            percent(inclusive, f.inclusive),
            percent(exclusive, attributed),
            n(exclusive),
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
            names.style.name(f.id, &f.name),
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

/// Samples (or time, in an off-CPU or wall-clock session) per thread, most
/// first.
pub fn threads_text(view: &GetViewResponse, style: NameStyle) -> String {
    let session = session_of(view);
    let word = counts_word(&session, Case::Upper);
    let names = Names::new(&view.functions, style);
    let mut rows: Vec<_> = view.threads.iter().collect();
    rows.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.tid.cmp(&b.tid)));
    let w = count_width(&session, rows.iter().map(|t| t.samples)).max(word.len());
    let nw = rows
        .iter()
        .map(|t| t.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    // A session that follows children has threads of several processes.
    let pid = |p: &dyn std::fmt::Display| {
        if session.children {
            format!("{p:>7}  ")
        } else {
            String::new()
        }
    };
    // Off-CPU and wall sessions that lost records: each thread's time
    // not known, beside its time in the profile.
    let unknown = rows.iter().any(|t| t.unknown_ns > 0);
    let uw = rows
        .iter()
        .map(|t| time_text(t.unknown_ns).chars().count())
        .max()
        .unwrap_or(0)
        .max("NOT KNOWN".len());
    let not_known = |text: &str| {
        if unknown {
            format!("{text:>uw$}  ")
        } else {
            String::new()
        }
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>7}  {}{:<nw$}  {:>w$}  {:>6}  {}TOP FUNCTION",
        "TID",
        pid(&"PID"),
        "NAME",
        word,
        "PCT",
        not_known("NOT KNOWN"),
    );
    if rows.is_empty() {
        out.push_str("(no samples)\n");
    }
    for t in rows {
        let _ = writeln!(
            out,
            "{:>7}  {}{:<nw$}  {:>w$}  {:>5.1}%  {}{}",
            t.tid,
            pid(&t.pid),
            t.name,
            count_text(&session, t.samples),
            t.pct,
            not_known(&time_text(t.unknown_ns)),
            // A thread with only time not known has no stack.
            if t.samples > 0 {
                names.label(t.top_function_id)
            } else {
                String::new()
            }
        );
    }
    out
}

/// Exclusive samples (or time) per source line of one function, as
/// `file:line  samples pct` (of the total), by line.
pub fn lines_text(view: &GetViewResponse, function: &str) -> String {
    let session = session_of(view);
    let word = counts_word(&session, Case::Upper);
    let attributed = totals(&session).attributed;
    let total: u64 = view.lines.iter().map(|l| l.exclusive).sum();
    let mut out = format!(
        "source lines of {function}: {} exclusive of {}\n",
        count_text(&session, total),
        total_text(&session, attributed)
    );
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
    let w = count_width(&session, rows.iter().map(|l| l.exclusive)).max(word.len());
    let _ = writeln!(out, "{:<fw$}  {:>w$}  {:>6}", "FILE:LINE", word, "PCT");
    if rows.is_empty() {
        out.push_str("(no samples with line information)\n");
    }
    for (l, cell) in rows.iter().zip(cells) {
        let _ = writeln!(
            out,
            "{cell:<fw$}  {:>w$}  {:>5.1}%",
            count_text(&session, l.exclusive),
            percent(l.exclusive, attributed)
        );
    }
    out
}

#[cfg(test)]
#[path = "render_views_tests.rs"]
mod tests;
