//! Turns daemon replies into text: the profile table, the JSON report, the
//! sessions table, the info page and one-line session summaries. Pure
//! functions from values to strings; writing them out is the caller's job.
use std::fmt::Write as _;

use profd_common::api::{
    InfoResponse, ListWindowsResponse, Mode, Scope, Session, SessionState, Totals,
};
use profd_common::event_name;
use profd_common::model::mode_name;

use crate::views::ranking::{percent, totals, Profile};
use crate::views::units::{
    bytes_text, count_text, counts_time, counts_word, incl_excl, measure_text, time_text,
    time_totals_text, Case,
};

/// The widest a function name gets in a table before it is shortened.
pub const DEFAULT_NAME_WIDTH: usize = 60;
/// The widest a module name gets in a table before it is shortened.
pub const MODULE_WIDTH: usize = 32;

/// How function names are shown in text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameStyle {
    /// Longest name shown; longer ones are cut in the middle with `…`.
    pub width: usize,
    /// Whole names (`--full-names`): no elision, no cut.
    pub full: bool,
    /// Each function's id before its name (`--ids`), as `#ID`.
    pub ids: bool,
}

impl Default for NameStyle {
    fn default() -> Self {
        NameStyle {
            width: DEFAULT_NAME_WIDTH,
            full: false,
            ids: false,
        }
    }
}

impl NameStyle {
    /// The same style with names at most `width` wide.
    pub fn at_most(self, width: usize) -> Self {
        NameStyle {
            width: self.width.min(width),
            ..self
        }
    }

    /// Function `id`'s `name` as text: `#ID ` first with `--ids`, template
    /// arguments and parameter lists elided and cut in the middle to the
    /// width, unless `--full-names`.
    pub fn name(&self, id: u64, name: &str) -> String {
        let shown = profd_common::names::display_name(name, self.width, self.full);
        if self.ids {
            format!("#{id} {shown}")
        } else {
            shown.into_owned()
        }
    }
}

/// How to lay out a profile table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableOptions {
    /// Rows to show; `None` = all.
    pub limit: Option<usize>,
    /// How function names are shown.
    pub names: NameStyle,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            limit: Some(crate::views::ranking::DEFAULT_TOP),
            names: NameStyle::default(),
        }
    }
}

pub use profd_common::export::{scope_name, state_name, unwind_name};

/// `unwind dwarf (16384 B)`: the method and, with stack copies, their size.
pub fn unwind_text(session: &Session) -> String {
    let name = unwind_name(session.unwind());
    if session.stack_bytes > 0 {
        format!("unwind {name} ({} B)", session.stack_bytes)
    } else {
        format!("unwind {name}")
    }
}

/// ` — target rings` or ` — system-wide rings`: which processes the kernel
/// samples for the session; empty when not known (a profile from a file).
fn scope_text(session: &Session) -> String {
    match session.scope() {
        Scope::Unspecified => String::new(),
        scope => format!(" — {} rings", scope_name(scope)),
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
pub fn state_text(session: &Session) -> String {
    let state = session.state();
    if state == SessionState::Failed && !session.error.is_empty() {
        format!("failed: {}", session.error)
    } else {
        state_name(state).to_string()
    }
}

/// The sample totals, with the samples the target's time called for that
/// no ring took when there are any. Attributed, over-the-limit and unchecked
/// counts are times in an off-CPU or wall-clock session's.
fn totals_text(session: &Session) -> String {
    let t = totals(session);
    let n = |v: u64| count_text(session, v);
    let mut text = format!(
        "{} attributed, {} discarded, {} lost",
        n(t.attributed),
        t.discarded,
        t.lost
    );
    if t.unsampled > 0 {
        text += &format!(", {} unsampled", t.unsampled);
    }
    if t.throttled > 0 {
        text += &format!(" (throttled {} times)", t.throttled);
    }
    if t.overflowed > 0 {
        text += &format!("; {} over the stack limit", n(t.overflowed));
    }
    if t.unchecked > 0 {
        text += &format!("; {} unchecked", n(t.unchecked));
    }
    text
}

/// The header's totals lines: `samples: …; stacks: …`, or for an off-CPU or
/// wall-clock session `time: …; stacks: …` and the time accounting.
fn totals_lines(session: &Session) -> String {
    let t = totals(session);
    let mut text = format!(
        "{}: {}; stacks: {} truncated, {} unsymbolized\n",
        counts_word(session, Case::Lower),
        totals_text(session),
        t.truncated,
        count_text(session, t.unsymbolized),
    );
    text += &copy_ended_text(session);
    if t.python_unreadable > 0 {
        text += &format!(
            "python: {} with frames not read ([python: unreadable])\n",
            count_text(session, t.python_unreadable)
        );
    }
    if t.ruby_unreadable > 0 {
        text += &format!(
            "ruby: {} with frames not read ([ruby: unreadable])\n",
            count_text(session, t.ruby_unreadable)
        );
    }
    if t.perl_unreadable > 0 {
        text += &format!(
            "perl: {} with frames not read ([perl: unreadable])\n",
            count_text(session, t.perl_unreadable)
        );
    }
    if counts_time(session) {
        text += &time_totals_text(&t.time.unwrap_or_default());
        text.push('\n');
    }
    text
}

/// The kernel's largest user stack copy, in bytes.
const MAX_STACK_BYTES: u32 = 65528;

/// A line on the stacks whose walk ran past the end of the stack copy, when
/// they are 1 % of the samples or more (of the stacks' time in an off-CPU
/// or wall-clock session, where they are counted as stacks), with the flag
/// that copies more; empty otherwise.
fn copy_ended_text(session: &Session) -> String {
    let t = totals(session);
    let ended = t.truncated_copy_ended;
    let history = is_history(session);
    if ended == 0 || (session.stack_bytes == 0 && !history) {
        return String::new();
    }
    let share = match counts_time(session) {
        true => format!("{ended} stacks"),
        false if ended * 100 >= t.attributed => {
            format!(
                "{:.1} % of stacks",
                ended as f64 * 100.0 / t.attributed as f64
            )
        }
        false => return String::new(),
    };
    if history {
        // The windows do not say what the daemon copied: its setting does.
        return format!(
            "{share} truncated where the stack copy ended: raise the daemon's \
             continuous.stack_bytes (--continuous-stack-bytes, up to {MAX_STACK_BYTES})\n"
        );
    }
    match session.stack_bytes < MAX_STACK_BYTES {
        true => format!(
            "{share} truncated where the {}-byte stack copy ended: try --stack-bytes {MAX_STACK_BYTES}\n",
            session.stack_bytes
        ),
        false => format!(
            "{share} truncated where the {MAX_STACK_BYTES}-byte stack copy, the kernel's largest, ended: \
             frame-pointer builds keep their callers with --unwind fp\n"
        ),
    }
}

/// `processes: 1234 prog 500, 1240 prog 300 (exited)` for a session that
/// follows children (times, `1234 prog 4.96 s`, in off-CPU and wall
/// sessions); empty otherwise.
fn processes_text(session: &Session) -> String {
    if !session.children {
        return String::new();
    }
    let time = counts_time(session);
    let list: Vec<String> = session
        .processes
        .iter()
        .map(|p| {
            let exited = if p.exited { " (exited)" } else { "" };
            let count = match time {
                true => time_text(p.samples),
                false => p.samples.to_string(),
            };
            format!("{} {} {count}{exited}", p.pid, p.comm)
        })
        .collect();
    format!("processes: {}\n", list.join(", "))
}

/// The synthetic session of a query of the continuous history (id 0,
/// pid 0), as the daemon answers it.
pub fn is_history(session: &Session) -> bool {
    session.id == 0 && session.pid == 0
}

/// Unix milliseconds as RFC 3339 in UTC, to the second.
pub fn unix_ms_text(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// `7 days`, `1 day 6 h`, `90 min`, `45 s`: a retention age for people, in
/// its two largest units.
fn age_text(s: u64) -> String {
    const UNITS: [(u64, &str, &str); 4] = [
        (86_400, "day", "days"),
        (3_600, "h", "h"),
        (60, "min", "min"),
        (1, "s", "s"),
    ];
    let mut parts = Vec::new();
    let mut left = s;
    for (size, one, many) in UNITS {
        if left >= size && parts.len() < 2 {
            let n = left / size;
            left %= size;
            parts.push(format!("{n} {}", if n == 1 { one } else { many }));
        } else if !parts.is_empty() {
            break;
        }
    }
    if parts.is_empty() {
        "0 s".to_string()
    } else {
        parts.join(" ")
    }
}

/// The profile table's two header lines: session, target, event (and the
/// mode when not cpu), unwinding, scope, elapsed time, state; then the
/// sample totals, with the stack totals (times, and a third line of time
/// accounting, for an off-CPU or wall-clock session). A query of the
/// continuous history says so, with the first window's start and the time
/// its windows cover.
pub fn table_header(session: &Session) -> String {
    let t = totals(session);
    if is_history(session) {
        return format!(
            "profd continuous history — windows from {} — {} @ {} Hz — {:.0} s of windows\n\
             samples: {}; stacks: {} truncated, {} unsymbolized\n{}",
            unix_ms_text(session.started_unix_ms),
            event_name(session.event()),
            session.frequency_hz,
            session.duration_s,
            totals_text(session),
            t.truncated,
            t.unsymbolized,
            copy_ended_text(session),
        );
    }
    format!(
        "profd session {} — {} — {} — {}{} — {:.2} s — {}\n{}{}",
        session.id,
        target(session),
        measure_text(session),
        unwind_text(session),
        scope_text(session),
        session.duration_s,
        state_text(session),
        totals_lines(session),
        processes_text(session),
    )
}

/// The profile as an aligned table: header lines, a column header, then one
/// row per function (at most `options.limit`), and a note on hidden rows.
/// With a window, a line on it and two more columns: the window's inclusive
/// and exclusive percentages (over the samples in the window).
pub fn profile_table(profile: &Profile, options: TableOptions) -> String {
    let mut out = table_header(&profile.session);
    out.push_str(&profile_rows(profile, options));
    out
}

/// The table of [`profile_table`] without its header lines: a line on the
/// window if any, the column header and the rows.
pub fn profile_rows(profile: &Profile, options: TableOptions) -> String {
    let mut out = String::new();
    if let Some(w) = profile.window {
        let _ = writeln!(
            out,
            "window: last {} s, {} attributed (W.INCL% and W.EXCL% are over these)",
            w.seconds,
            count_text(&profile.session, w.attributed)
        );
    }
    let shown = match options.limit {
        Some(n) => n.min(profile.functions.len()),
        None => profile.functions.len(),
    };
    let rows = &profile.functions[..shown];
    let n = |v: u64| count_text(&profile.session, v);
    let (incl, excl) = incl_excl(&profile.session);
    let w = rows
        .iter()
        .flat_map(|f| [n(f.inclusive), n(f.exclusive)])
        .map(|c| c.chars().count())
        .chain([5, incl.len()])
        .max()
        .unwrap_or(5);
    let window_header = if profile.window.is_some() {
        format!("{:>7}  {:>7}  ", "W.INCL%", "W.EXCL%")
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "{:>6}  {:>w$}  {:>6}  {:>w$}  {window_header}FUNCTION  [MODULE]",
        "INCL%", incl, "EXCL%", excl
    );
    if profile.functions.is_empty() {
        out.push_str("(no samples)\n");
        return out;
    }
    for f in rows {
        let window_cells = match profile.window {
            Some(win) => format!(
                "{:>6.1}%  {:>6.1}%  ",
                percent(f.window_inclusive, win.attributed),
                percent(f.window_exclusive, win.attributed)
            ),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "{:>5.1}%  {:>w$}  {:>5.1}%  {:>w$}  {window_cells}{}{}{}",
            f.inclusive_pct,
            n(f.inclusive),
            f.exclusive_pct,
            n(f.exclusive),
            options.names.name(f.id, &f.name),
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
pub fn module_cell(module: &str) -> String {
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

/// The JSON report of `profile` (the contract of docs/guide.md, "JSON", from
/// `profd_common::export::json`) keeping at most `limit` functions, as
/// pretty-printed text ending in a newline.
pub fn profile_json(profile: &Profile, limit: Option<usize>) -> String {
    let n = limit.unwrap_or(usize::MAX).min(profile.functions.len());
    let value = profd_common::export::json(&profile.session, &profile.functions[..n]);
    let mut s = serde_json::to_string_pretty(&value).expect("a JSON value always prints");
    s.push('\n');
    s
}

/// One line on a session, e.g. for `profctl stop`:
/// `session 3 — pid 1234 (work) — stopped — 5.00 s — 9950 attributed, 812 discarded, 0 lost`.
pub fn session_line(session: &Session) -> String {
    if is_history(session) {
        return format!(
            "the continuous history — windows from {} — {:.0} s — {}\n",
            unix_ms_text(session.started_unix_ms),
            session.duration_s,
            totals_text(session),
        );
    }
    format!(
        "session {} — {} — {} — {:.2} s — {}\n",
        session.id,
        target(session),
        state_text(session),
        session.duration_s,
        totals_text(session),
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

/// The `profctl sessions` table; sessions of earlier daemon runs have their
/// state marked `*`, explained below the table.
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
                format!(
                    "{}{}",
                    state_name(s.state()),
                    if s.earlier_run { "*" } else { "" }
                ),
                crate::views::render_saved::save_cell(s).to_string(),
                event_cell(s),
                format!("{} Hz", s.frequency_hz),
                format!("{:.2} s", s.duration_s),
                format!("{}/{}/{}", count_text(s, t.attributed), t.discarded, t.lost),
            ]
        })
        .collect();
    let mut text = columns(
        &[
            "ID",
            "PID",
            "COMM",
            "STATE",
            "SAVED",
            "EVENT",
            "FREQ",
            "DURATION",
            "SAMPLES attributed/discarded/lost",
        ],
        &[Right, Right, Left, Left, Left, Left, Right, Right, Left],
        &rows,
    );
    if sessions.iter().any(|s| s.earlier_run) {
        text.push_str(EARLIER_RUN_NOTE);
    }
    text.push_str(&crate::views::render_saved::not_saved_notes(sessions));
    text
}

/// The sessions table's EVENT cell: the event, after the mode when it is
/// not cpu (`off-cpu`, `wall cpu-clock`).
fn event_cell(s: &Session) -> String {
    match s.mode() {
        Mode::Cpu | Mode::Unspecified => event_name(s.event()).to_string(),
        Mode::OffCpu => mode_name(Mode::OffCpu).to_string(),
        Mode::Wall => format!("{} {}", mode_name(Mode::Wall), event_name(s.event())),
    }
}

/// The footnote of `profctl sessions --all` for sessions marked `*`.
pub const EARLIER_RUN_NOTE: &str =
    "* from an earlier run of the daemon (kept in its state directory; no histogram)\n";

/// The `profctl info` page.
pub fn info_text(info: &InfoResponse) -> String {
    let pmu = if info.pmu_available {
        "available (cycles can be sampled)"
    } else {
        "not available (cycles falls back to cpu-clock)"
    };
    // Continuous profiling samples every CPU on rings of its own, which
    // are not a session's group.
    let continuous = info.continuous.as_ref().map(|c| match c.schedule {
        Some(s) if !s.on => {
            "none (continuous profiling is off in this slot of its schedule)".to_string()
        }
        _ => format!(
            "continuous profiling's rings on every CPU @ {} Hz",
            c.frequency_hz
        ),
    });
    let groups = if info.groups.is_empty() {
        continuous.unwrap_or_else(|| "none".to_string())
    } else {
        info.groups
            .iter()
            .map(|g| {
                let unwind = if g.stack_bytes > 0 { "dwarf" } else { "fp" };
                let scope = match g.target_pid {
                    0 => "system-wide".to_string(),
                    pid => format!("pid {pid}"),
                };
                let event = match g.mode() {
                    Mode::OffCpu => "context switches".to_string(),
                    Mode::Wall => format!(
                        "{} @ {} Hz + context switches",
                        event_name(g.event()),
                        g.frequency_hz
                    ),
                    _ => format!("{} @ {} Hz", event_name(g.event()), g.frequency_hz),
                };
                format!(
                    "{event} {unwind} {scope} ({} session{})",
                    g.sessions,
                    if g.sessions == 1 { "" } else { "s" }
                )
            })
            .chain(continuous)
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
        ("samples", daemon_totals_text(&t)),
        ("running sessions", info.running_sessions.to_string()),
        (
            "continuous",
            info.continuous
                .as_ref()
                .map_or("off".to_string(), continuous_text),
        ),
        (
            "memory",
            info.memory
                .as_ref()
                .map_or("not reported".to_string(), memory_text),
        ),
        (
            "debuginfod",
            info.debuginfod
                .as_ref()
                .map_or("off".to_string(), debuginfod_text),
        ),
        ("python frames", info.python_frames.clone()),
        ("ruby frames", info.ruby_frames.clone()),
        ("perl frames", info.perl_frames.clone()),
        (
            "jvm perf maps",
            match info.ask_jvm {
                true => format!(
                    "asked of JVMs with unnamed JIT code, each at most every {} s",
                    info.ask_jvm_interval_s
                ),
                false => "never asked (jit.ask_jvm = false)".to_string(),
            },
        ),
    ];
    let mut out = String::from("profd daemon\n");
    let retention = info
        .retention
        .as_ref()
        .map(crate::views::render_saved::retention_lines);
    let lines = lines
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain(retention.into_iter().flatten());
    // A key too long for its column still gets a space before its value.
    for (k, v) in lines {
        let _ = writeln!(out, "  {:<21} {v}", format!("{k}:"));
    }
    for sink in &info.sinks {
        let _ = writeln!(
            out,
            "  {:<22}{}",
            format!("sink {}:", sink.name),
            sink_text(sink)
        );
    }
    for asked in &info.jvm_perfmap_requests {
        let _ = writeln!(
            out,
            "  {:<22}{}",
            format!("jvm pid {}:", asked.pid),
            jvm_request_text(asked)
        );
    }
    out
}

/// `session 3: ok at TIME (2 asks)`, with what the JVM said or why it was
/// not asked.
fn jvm_request_text(r: &profd_common::api::JvmPerfMapRequest) -> String {
    let by = match r.session_id {
        0 => "continuous profiling".to_string(),
        id => format!("session {id}"),
    };
    let mut text = format!(
        "{by}: {} at {} ({} ask{})",
        r.result.replace('_', " "),
        unix_ms_text(r.asked_unix_ms),
        r.asks,
        if r.asks == 1 { "" } else { "s" }
    );
    if !r.detail.is_empty() {
        text.push_str(": ");
        text.push_str(&r.detail);
    }
    text
}

/// The debuginfod servers, what their requests gave and the cache (Info).
fn debuginfod_text(d: &profd_common::api::DebuginfodStatus) -> String {
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1 << 20) as f64);
    let mut text = format!(
        "{}; fetched {}, not found {}, failed {}, garbage {}; cache {} of {} in {}",
        d.urls.join(" "),
        d.fetched,
        d.not_found,
        d.failed,
        d.garbage,
        mib(d.cache_bytes),
        mib(d.cache_limit_bytes),
        d.cache_dir,
    );
    if !d.last_error.is_empty() {
        text.push_str("; last error: ");
        text.push_str(&d.last_error);
    }
    text
}

/// The daemon's memory against its ceiling and what it shed (Info).
fn memory_text(m: &profd_common::api::MemoryStatus) -> String {
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1 << 20) as f64);
    let entered = |level: usize| m.entered.get(level).copied().unwrap_or(0);
    let caches = m
        .caches
        .iter()
        .map(|c| format!("{} {}", c.name, mib(c.bytes)))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "{} of {} (peak {}), level {} ({}); entered shed-caches {}, cap-stacks {}, lower-frequency {}, frame-pointers {}; shed {} times ({}); windows capped {}, lowered {}; samples dropped behind {}; caches: {}",
        mib(m.resident_bytes.max(m.cgroup_bytes)),
        mib(m.ceiling_bytes),
        mib(m.peak_bytes),
        m.level,
        m.level_name,
        entered(1),
        entered(2),
        entered(3),
        entered(4),
        m.sheds,
        mib(m.shed_bytes),
        m.windows_capped,
        m.windows_lowered,
        m.samples_dropped_behind,
        if caches.is_empty() { "none".to_string() } else { caches },
    )
}

/// The daemon's sample totals (Info), as [`totals_text`] gives a CPU
/// session's.
fn daemon_totals_text(t: &Totals) -> String {
    totals_text(&Session {
        totals: Some(*t),
        ..Default::default()
    })
}

/// A sink's backend and figures on one line (Info).
fn sink_text(s: &profd_common::api::SinkStatus) -> String {
    let drops = if s.drops.is_empty() {
        "none".to_string()
    } else {
        s.drops
            .iter()
            .map(|d| format!("{} {}", d.windows, d.reason))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut line = format!(
        "{} {} ({}); sent {} windows, {} in {} requests; {} retries; dropped {drops}; spool {} windows, {} of {}",
        s.kind,
        s.url,
        s.protocol,
        s.windows_sent,
        bytes_text(s.bytes_sent),
        s.requests,
        s.retries,
        s.spool_windows,
        bytes_text(s.spool_bytes),
        bytes_text(s.spool_limit_bytes),
    );
    if s.oldest_unsent_age_ms > 0 {
        let _ = write!(
            line,
            ", oldest unsent {}",
            age_text(s.oldest_unsent_age_ms / 1000)
        );
    }
    if s.rejected > 0 {
        let _ = write!(line, "; {} profiles rejected", s.rejected);
    }
    if s.split > 0 || s.truncated > 0 {
        let _ = write!(
            line,
            "; {} profiles split, {} stacks truncated",
            s.split, s.truncated
        );
    }
    if !s.last_error.is_empty() {
        let _ = write!(line, "; last error: {}", s.last_error);
    }
    line
}

/// Continuous profiling's settings and history on one line (Info).
fn continuous_text(c: &ListWindowsResponse) -> String {
    let schedule = c.schedule.as_ref().map_or(String::new(), |s| {
        format!(
            " {} % of hosts at a time in slots of {} s ({} in this one)",
            (s.fraction * 1e4).round() / 1e2,
            s.period_s,
            if s.on { "on" } else { "off" }
        )
    });
    format!(
        "on{schedule}, {} Hz, windows of {} s; history {} windows, {} (keeps {} and {}); dropped {} by bytes, {} by age; {} damaged",
        c.frequency_hz,
        c.window_seconds,
        c.windows_kept,
        bytes_text(c.bytes_kept),
        bytes_text(c.retention_bytes),
        age_text(c.retention_s),
        c.dropped_bytes,
        c.dropped_age,
        c.damaged,
    )
}

/// `profctl query --list`: the settings and history, the services of the
/// range (most samples first), then its windows (oldest first).
pub fn windows_text(l: &ListWindowsResponse) -> String {
    let mut out = format!(
        "profd continuous profiling on {}: {}\n",
        l.host,
        continuous_text(l)
    );
    if l.windows.is_empty() {
        out.push_str("no windows in the range\n");
        return out;
    }
    let first = l.windows.first().map_or(0, |w| w.start_unix_ns / 1_000_000);
    let last = l.windows.last().map_or(0, |w| w.end_unix_ns / 1_000_000);
    let total: u64 = l.services.iter().map(|s| s.samples).sum();
    let _ = writeln!(
        out,
        "{} windows from {} to {}, {} samples\n",
        l.windows.len(),
        unix_ms_text(first),
        unix_ms_text(last),
        total
    );
    if l.windows_left_out > 0 {
        let _ = writeln!(
            out,
            "{} older windows of the range are not listed (the samples below count them): \
             give a narrower range to see them\n",
            l.windows_left_out
        );
    }
    let rows: Vec<Vec<String>> = l
        .services
        .iter()
        .map(|s| {
            vec![
                s.samples.to_string(),
                format!("{:.1}", percent(s.samples, total)),
                s.service.clone(),
            ]
        })
        .collect();
    out.push_str(&columns(
        &["SAMPLES", "%", "SERVICE"],
        &[Align::Right, Align::Right, Align::Left],
        &rows,
    ));
    out.push('\n');
    let rows: Vec<Vec<String>> = l
        .windows
        .iter()
        .map(|w| {
            let samples: u64 = w.services.iter().map(|s| s.samples).sum();
            let mut top: Vec<String> = w
                .services
                .iter()
                .take(3)
                .map(|s| format!("{} {}", s.service, s.samples))
                .collect();
            if w.services.len() > 3 {
                top.push(format!("+{} more", w.services.len() - 3));
            }
            vec![
                unix_ms_text(w.start_unix_ns / 1_000_000),
                format!(
                    "{:.0}",
                    w.end_unix_ns.saturating_sub(w.start_unix_ns) as f64 / 1e9
                ),
                samples.to_string(),
                bytes_text(w.bytes),
                top.join(", "),
            ]
        })
        .collect();
    out.push_str(&columns(
        &["START", "SECS", "SAMPLES", "SIZE", "SERVICES"],
        &[
            Align::Left,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Left,
        ],
        &rows,
    ));
    out
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
