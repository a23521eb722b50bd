//! Turns daemon replies into text: the profile table, the JSON report, the
//! sessions table, the info page and one-line session summaries. Pure
//! functions from values to strings; writing them out is the caller's job.
use std::fmt::Write as _;

use profd_common::api::{InfoResponse, Session, SessionState, Totals, Unwind};
use profd_common::event_name;
use serde::Serialize;

use crate::profile::{totals, Profile};

/// The widest a function name gets in a table before it is shortened.
pub const DEFAULT_NAME_WIDTH: usize = 60;
/// The widest a module name gets in a table before it is shortened.
pub const MODULE_WIDTH: usize = 32;

/// How to lay out a profile table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableOptions {
    /// Rows to show; `None` = all.
    pub limit: Option<usize>,
    /// Longest function name shown; longer ones end in `…`.
    pub name_width: usize,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            limit: Some(crate::cli::DEFAULT_TOP),
            name_width: DEFAULT_NAME_WIDTH,
        }
    }
}

/// The state as JSON and tables spell it: `running`, `stopped`,
/// `duration_elapsed`, `exited`, `failed` (`unknown` if unset).
pub fn state_name(state: SessionState) -> &'static str {
    match state {
        SessionState::Running => "running",
        SessionState::Stopped => "stopped",
        SessionState::DurationElapsed => "duration_elapsed",
        SessionState::Exited => "exited",
        SessionState::Failed => "failed",
        SessionState::Unspecified => "unknown",
    }
}

/// The unwinding as JSON and tables spell it: `auto`, `fp` or `dwarf`
/// (`auto` when unset).
pub fn unwind_name(unwind: Unwind) -> &'static str {
    match unwind {
        Unwind::Auto | Unwind::Unspecified => "auto",
        Unwind::Fp => "fp",
        Unwind::Dwarf => "dwarf",
    }
}

/// `unwind dwarf (16384 B)`: the method and, with stack copies, their size.
fn unwind_text(session: &Session) -> String {
    let name = unwind_name(session.unwind());
    if session.stack_bytes > 0 {
        format!("unwind {name} ({} B)", session.stack_bytes)
    } else {
        format!("unwind {name}")
    }
}

/// Marks an inlined function's row in tables.
pub const INLINED_MARK: &str = " [inlined]";

/// `pid 1234 (work)`, or `pid 1234` when the command name is unknown.
fn target(session: &Session) -> String {
    if session.comm.is_empty() {
        format!("pid {}", session.pid)
    } else {
        format!("pid {} ({})", session.pid, session.comm)
    }
}

/// The state, with the failure reason for a failed session.
fn state_text(session: &Session) -> String {
    let state = session.state();
    if state == SessionState::Failed && !session.error.is_empty() {
        format!("failed: {}", session.error)
    } else {
        state_name(state).to_string()
    }
}

fn totals_text(t: &Totals) -> String {
    format!(
        "{} attributed, {} discarded, {} lost",
        t.attributed, t.discarded, t.lost
    )
}

/// The profile table's two header lines: session, target, event, unwinding,
/// elapsed time, state; then the sample totals, with the stack totals.
pub fn table_header(session: &Session) -> String {
    let t = totals(session);
    format!(
        "profd session {} — {} — {} @ {} Hz — {} — {:.2} s — {}\n\
         samples: {}; stacks: {} truncated, {} unsymbolized\n",
        session.id,
        target(session),
        event_name(session.event()),
        session.frequency_hz,
        unwind_text(session),
        session.duration_s,
        state_text(session),
        totals_text(&t),
        t.truncated,
        t.unsymbolized,
    )
}

/// The profile as an aligned table: header lines, a column header, then one
/// row per function (at most `options.limit`), and a note on hidden rows.
pub fn profile_table(profile: &Profile, options: TableOptions) -> String {
    let mut out = table_header(&profile.session);
    let shown = match options.limit {
        Some(n) => n.min(profile.functions.len()),
        None => profile.functions.len(),
    };
    let rows = &profile.functions[..shown];
    let widest = rows
        .iter()
        .map(|f| f.inclusive.max(f.exclusive))
        .max()
        .unwrap_or(0);
    let w = widest.to_string().len().max(5);
    let _ = writeln!(
        out,
        "{:>6}  {:>w$}  {:>6}  {:>w$}  FUNCTION  [MODULE]",
        "INCL%", "INCL", "EXCL%", "EXCL"
    );
    if profile.functions.is_empty() {
        out.push_str("(no samples)\n");
        return out;
    }
    for f in rows {
        let _ = writeln!(
            out,
            "{:>5.1}%  {:>w$}  {:>5.1}%  {:>w$}  {}{}{}",
            f.inclusive_pct,
            f.inclusive,
            f.exclusive_pct,
            f.exclusive,
            shorten(&f.name, options.name_width),
            if f.inlined { INLINED_MARK } else { "" },
            module_cell(&f.module),
        );
    }
    let hidden = profile.functions.len() - shown;
    if hidden > 0 {
        let _ = writeln!(
            out,
            "… {hidden} more function{} (--top 0 shows all)",
            if hidden == 1 { "" } else { "s" }
        );
    }
    out
}

/// `  [module]`; a module already in brackets (`[kernel]`, `[unknown]`) is
/// not bracketed again, and an empty one is left out.
fn module_cell(module: &str) -> String {
    let module = shorten(module, MODULE_WIDTH);
    if module.is_empty() {
        String::new()
    } else if module.starts_with('[') && module.ends_with(']') {
        format!("  {module}")
    } else {
        format!("  [{module}]")
    }
}

/// `s` cut to at most `max` characters, ending in `…` when cut.
pub fn shorten(s: &str, max: usize) -> String {
    let max = max.max(2);
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut cut: String = s.chars().take(max - 1).collect();
    cut.push('…');
    cut
}

/// The JSON report of a profile (README contract plus a few extra keys).
#[derive(Debug, Serialize)]
pub struct JsonReport<'a> {
    /// Session id.
    pub session_id: u64,
    /// Target process id.
    pub pid: u32,
    /// Target command name.
    pub comm: &'a str,
    /// `running`, `stopped`, `duration_elapsed`, `exited` or `failed`.
    pub state: &'static str,
    /// Why a failed session failed.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub error: &'a str,
    /// Seconds sampled.
    pub duration_s: f64,
    /// Sampling frequency per CPU.
    pub frequency_hz: u32,
    /// Event used: `cpu-clock` or `cycles`.
    pub event: &'static str,
    /// User stack unwinding in use: `fp` or `dwarf` (`auto` is reported as
    /// the method it resolved to).
    pub unwind: &'static str,
    /// Bytes of user stack copied per sample (0 without stack copies).
    pub stack_bytes: u32,
    /// Sample totals.
    pub totals: JsonTotals,
    /// Functions, by inclusive samples descending.
    pub functions: Vec<JsonFunction<'a>>,
}

/// Sample totals in the JSON report.
#[derive(Debug, Serialize)]
pub struct JsonTotals {
    /// Samples of the target.
    pub attributed: u64,
    /// Samples of other processes, dropped.
    pub discarded: u64,
    /// Samples the kernel could not deliver.
    pub lost: u64,
    /// Attributed samples whose user stack could not be followed to its end.
    pub truncated: u64,
    /// Attributed samples with at least one frame left unnamed.
    pub unsymbolized: u64,
}

/// One function in the JSON report.
#[derive(Debug, Serialize)]
pub struct JsonFunction<'a> {
    /// Demangled name.
    pub name: &'a str,
    /// Binary file name or `[kernel]`.
    pub module: &'a str,
    /// Samples with the function on the stack.
    pub inclusive: u64,
    /// Samples with the function innermost.
    pub exclusive: u64,
    /// `inclusive` over attributed samples, 0–100.
    pub inclusive_pct: f64,
    /// `exclusive` over attributed samples, 0–100.
    pub exclusive_pct: f64,
    /// Inlined into its caller at these samples (no frame of its own).
    pub inlined: bool,
}

/// The JSON report of `profile`, keeping at most `limit` functions.
pub fn json_report(profile: &Profile, limit: Option<usize>) -> JsonReport<'_> {
    let s = &profile.session;
    let t = profile.totals();
    let n = limit.unwrap_or(usize::MAX);
    JsonReport {
        session_id: s.id,
        pid: s.pid,
        comm: &s.comm,
        state: state_name(s.state()),
        error: &s.error,
        duration_s: s.duration_s,
        frequency_hz: s.frequency_hz,
        event: event_name(s.event()),
        unwind: unwind_name(s.unwind()),
        stack_bytes: s.stack_bytes,
        totals: JsonTotals {
            attributed: t.attributed,
            discarded: t.discarded,
            lost: t.lost,
            truncated: t.truncated,
            unsymbolized: t.unsymbolized,
        },
        functions: profile
            .functions
            .iter()
            .take(n)
            .map(|f| JsonFunction {
                name: &f.name,
                module: &f.module,
                inclusive: f.inclusive,
                exclusive: f.exclusive,
                inclusive_pct: f.inclusive_pct,
                exclusive_pct: f.exclusive_pct,
                inlined: f.inlined,
            })
            .collect(),
    }
}

/// The JSON report as pretty-printed text ending in a newline.
pub fn profile_json(profile: &Profile, limit: Option<usize>) -> String {
    let mut s = serde_json::to_string_pretty(&json_report(profile, limit))
        .expect("the JSON report contains only plain values");
    s.push('\n');
    s
}

/// One line on a session, e.g. for `profctl stop`:
/// `session 3 — pid 1234 (work) — stopped — 5.00 s — 9950 attributed, 812 discarded, 0 lost`.
pub fn session_line(session: &Session) -> String {
    format!(
        "session {} — {} — {} — {:.2} s — {}\n",
        session.id,
        target(session),
        state_text(session),
        session.duration_s,
        totals_text(&totals(session)),
    )
}

#[derive(Clone, Copy)]
enum Align {
    Left,
    Right,
}

/// Aligns `rows` under `header`; the last column is never padded.
fn columns(header: &[&str], align: &[Align], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let last = row.len().saturating_sub(1);
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let pad = widths[i].saturating_sub(cell.chars().count());
            match align[i] {
                Align::Right => {
                    line.extend(std::iter::repeat_n(' ', pad));
                    line.push_str(cell);
                }
                Align::Left if i == last => line.push_str(cell),
                Align::Left => {
                    line.push_str(cell);
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The `profctl sessions` table.
pub fn sessions_table(sessions: &[Session]) -> String {
    if sessions.is_empty() {
        return "no sessions\n".to_string();
    }
    use Align::{Left, Right};
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .map(|s| {
            let t = totals(s);
            vec![
                s.id.to_string(),
                s.pid.to_string(),
                shorten(&s.comm, 16),
                state_name(s.state()).to_string(),
                event_name(s.event()).to_string(),
                format!("{} Hz", s.frequency_hz),
                format!("{:.2} s", s.duration_s),
                format!("{}/{}/{}", t.attributed, t.discarded, t.lost),
            ]
        })
        .collect();
    columns(
        &[
            "ID",
            "PID",
            "COMM",
            "STATE",
            "EVENT",
            "FREQ",
            "DURATION",
            "SAMPLES attributed/discarded/lost",
        ],
        &[Right, Right, Left, Left, Left, Right, Right, Left],
        &rows,
    )
}

/// The `profctl info` page.
pub fn info_text(info: &InfoResponse) -> String {
    let pmu = if info.pmu_available {
        "available (cycles can be sampled)"
    } else {
        "not available (cycles falls back to cpu-clock)"
    };
    let groups = if info.groups.is_empty() {
        "none".to_string()
    } else {
        info.groups
            .iter()
            .map(|g| {
                format!(
                    "{} @ {} Hz ({} session{})",
                    event_name(g.event()),
                    g.frequency_hz,
                    g.sessions,
                    if g.sessions == 1 { "" } else { "s" }
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let t = info.totals.unwrap_or_default();
    let lines = [
        ("version", info.version.clone()),
        ("cpus", info.cpus.to_string()),
        ("pmu", pmu.to_string()),
        (
            "default event",
            event_name(info.default_event()).to_string(),
        ),
        ("perf_event_paranoid", info.perf_event_paranoid.to_string()),
        ("max sample rate", format!("{} Hz", info.max_sample_rate)),
        ("sampler groups", groups),
        ("samples", totals_text(&t)),
        ("running sessions", info.running_sessions.to_string()),
    ];
    let mut out = String::from("profd daemon\n");
    for (k, v) in lines {
        let _ = writeln!(out, "  {:<22}{v}", format!("{k}:"));
    }
    out
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
