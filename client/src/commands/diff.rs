//! `profctl diff`: two profiles (sessions, saved pprof files, or time ranges
//! of the continuous history) side by side, each function's samples or time
//! in both (per second when their durations differ) and the change, biggest
//! first, with its change in share; warnings when the two hardly compare;
//! and the pair as pprof files for `go tool pprof -diff_base`.
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use profd_common::api::{self, ExportFormat, Function, GetProfileRequest, Session};
use profd_common::model::{is_time, mode_name};

use super::{required_session, Source};
use crate::args::cli::{unix_ms, DiffArgs, DiffSide, DiffSortArg};
use crate::error::Error;
use crate::files::pprof_file;
use crate::requests::connect::Client;
use crate::requests::progress::waiting;
use crate::views::output::Output;
use crate::views::ranking::{percent, totals};
use crate::views::render::{module_cell, shorten, INLINED_MARK};
use crate::views::units::{count_text, time_text};

/// Whether both sides are files: no daemon is needed then.
pub fn diff_needs_no_daemon(args: &DiffArgs) -> bool {
    matches!(
        (&args.base, &args.new),
        (DiffSide::File(_), DiffSide::File(_))
    )
}

/// One side, read: what it is, its session (target, mode, totals) and
/// functions, and its pprof encoding when asked for.
struct Side {
    label: String,
    session: Session,
    functions: Vec<Function>,
    pprof: Option<Vec<u8>>,
}

/// Runs `profctl diff`; `client` may be None only when both sides are files.
pub async fn diff(
    mut client: Option<&mut Client>,
    args: &DiffArgs,
    out: &Output,
) -> Result<(), Error> {
    let want_pprof = args.pprof.is_some();
    let base = read(client.as_deref_mut(), &args.base, args, want_pprof).await?;
    let new = read(client, &args.new, args, want_pprof).await?;
    let (bm, nm) = (base.session.mode(), new.session.mode());
    if is_time(bm) != is_time(nm) || (is_time(bm) && bm != nm) {
        return Err(Error::Usage(format!(
            "{} is {} and {} is {}: compare profiles of the same kind",
            base.label,
            mode_name(bm),
            new.label,
            mode_name(nm)
        )));
    }
    for warning in warnings(&base, &new) {
        eprintln!("profctl: warning: {warning}");
    }
    let limit = (args.top > 0).then_some(args.top);
    let by_share = args.sort == DiffSortArg::Share;
    let mut text = diff_table(&base, &new, limit, out.name_width(), by_share);
    if let Some(dir) = &args.pprof {
        let files = write_pair(dir, &base, &new)?;
        let _ = writeln!(
            text,
            "\npprof pair written: go tool pprof -diff_base {} {}",
            files.0, files.1
        );
    }
    out.print(&text)
}

/// Reads one side: from the daemon (a session, a range) or a file.
async fn read(
    client: Option<&mut Client>,
    side: &DiffSide,
    args: &DiffArgs,
    want_pprof: bool,
) -> Result<Side, Error> {
    if let DiffSide::File(path) = side {
        let profile = pprof_file::load(path)?;
        let pprof = match want_pprof {
            true => Some(std::fs::read(path).map_err(|e| Error::BadFile {
                path: path.clone(),
                reason: e.to_string(),
            })?),
            false => None,
        };
        return Ok(Side {
            label: path.display().to_string(),
            session: pprof_file::session(&profile),
            functions: pprof_file::functions(&profile),
            pprof,
        });
    }
    let client = client.expect("a connection for a side of the daemon");
    let (source, label) = match side {
        DiffSide::Session(id) => (Source::Session(*id), format!("session {id}")),
        DiffSide::Range(from, to) => (
            Source::Query(api::Query {
                from_unix_ms: unix_ms(*from),
                to_unix_ms: unix_ms(*to),
                services: args.services.clone(),
                ..Default::default()
            }),
            format!(
                "{}..{}",
                humantime::format_rfc3339_seconds(*from),
                humantime::format_rfc3339_seconds(*to)
            ),
        ),
        DiffSide::File(_) => unreachable!("files are read above"),
    };
    let format = match want_pprof {
        true => ExportFormat::Pprof,
        false => ExportFormat::Unspecified,
    };
    let reply = waiting(
        &format!("reading {label}"),
        client.get_profile(GetProfileRequest {
            session_id: source.session_id(),
            query: source.query(),
            format: format as i32,
        }),
    )
    .await?
    .into_inner();
    Ok(Side {
        label,
        session: required_session(reply.session, "GetProfile")?,
        functions: reply.functions,
        pprof: want_pprof.then_some(reply.data),
    })
}

/// Writes `dir/base.pb.gz` and `dir/new.pb.gz` (creating `dir`); their
/// paths as shown.
fn write_pair(dir: &Path, base: &Side, new: &Side) -> Result<(String, String), Error> {
    crate::files::out_file::create_dir_all(dir)
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    let mut paths = Vec::new();
    for (name, side) in [("base.pb.gz", base), ("new.pb.gz", new)] {
        let path = dir.join(name);
        let data = side.pprof.as_deref().unwrap_or_default();
        crate::files::out_file::write_file(&path, data)
            .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
        paths.push(path.display().to_string());
    }
    Ok((paths[0].clone(), paths[1].clone()))
}

/// A function of either side: by name and whether inlined, so that a
/// function matches across builds and paths whatever its address, id or
/// module file.
type Key = (String, bool);

/// What one side holds of a function: exclusive and inclusive counts, and
/// the module it was seen in (with most exclusive samples).
#[derive(Debug, Clone, Default)]
struct Counts {
    exclusive: u64,
    inclusive: u64,
    module: String,
    module_exclusive: Option<u64>,
}

/// Durations further apart than this (a fraction of the longer) are
/// compared per second.
const RATE_WHEN_APART: f64 = 0.05;

/// Below this share of a side's samples in functions both sides have, the
/// two are said to be hardly the same program.
const SHARED_AT_LEAST: f64 = 0.2;

/// One side's functions by [`Key`].
fn counts(side: &Side) -> HashMap<Key, Counts> {
    let mut m: HashMap<Key, Counts> = HashMap::new();
    for f in &side.functions {
        let c = m.entry((f.name.clone(), f.inlined)).or_default();
        c.exclusive += f.exclusive;
        c.inclusive += f.inclusive;
        if c.module_exclusive.is_none_or(|e| f.exclusive > e) {
            c.module = f.module.clone();
            c.module_exclusive = Some(f.exclusive);
        }
    }
    m
}

/// Why the two profiles may not compare: their events, frequencies or
/// modes differ, or they share almost no functions. One line each.
fn warnings(base: &Side, new: &Side) -> Vec<String> {
    let (b, n) = (&base.session, &new.session);
    let mut out = Vec::new();
    if b.mode() != n.mode() {
        out.push(format!(
            "{} is a {} profile and {} a {} one",
            base.label,
            mode_name(b.mode()),
            new.label,
            mode_name(n.mode())
        ));
    }
    if b.event() != n.event() {
        out.push(format!(
            "{} sampled {} and {} {}",
            base.label,
            profd_common::event_name(b.event()),
            new.label,
            profd_common::event_name(n.event())
        ));
    }
    if b.frequency_hz != n.frequency_hz && b.frequency_hz > 0 && n.frequency_hz > 0 {
        out.push(format!(
            "{} sampled at {} Hz and {} at {} Hz: compare their per-second rates, not counts",
            base.label, b.frequency_hz, new.label, n.frequency_hz
        ));
    }
    let (bc, nc) = (counts(base), counts(new));
    let shared = |mine: &HashMap<Key, Counts>, theirs: &HashMap<Key, Counts>| -> Option<f64> {
        let all: u64 = mine.values().map(|c| c.exclusive).sum();
        let both: u64 = mine
            .iter()
            .filter(|(k, _)| theirs.contains_key(*k))
            .map(|(_, c)| c.exclusive)
            .sum();
        (all > 0).then(|| both as f64 / all as f64)
    };
    if let (Some(sb), Some(sn)) = (shared(&bc, &nc), shared(&nc, &bc)) {
        if sb < SHARED_AT_LEAST || sn < SHARED_AT_LEAST {
            out.push(format!(
                "the functions both profiles have hold {:.0} % of {}'s samples and {:.0} % of \
                 {}'s: they are hardly the same program",
                sb * 100.0,
                base.label,
                sn * 100.0,
                new.label
            ));
        }
    }
    out
}

/// A row of the comparison: a function's counts in BASE and NEW (per
/// second when the durations differ), their changes, and its change in
/// share of its profile's samples (points).
struct Row {
    key: Key,
    module: String,
    base: (f64, f64),
    new: (f64, f64),
    share_change: f64,
}

impl Row {
    fn exclusive_change(&self) -> f64 {
        self.new.0 - self.base.0
    }

    fn inclusive_change(&self) -> f64 {
        self.new.1 - self.base.1
    }
}

/// The comparison: a line per side (its count and duration), then a row
/// per function with its exclusive and inclusive counts in BASE and NEW
/// and their changes, and its exclusive share's change (points). Counts
/// are samples, or times for off-CPU and wall profiles; per second when
/// the durations differ by more than [`RATE_WHEN_APART`]. Rows come
/// largest exclusive change first (then inclusive), or with `by_share`
/// largest share change first; at most `limit`.
fn diff_table(
    base: &Side,
    new: &Side,
    limit: Option<usize>,
    name_width: usize,
    by_share: bool,
) -> String {
    let (bs, ns) = (&base.session, &new.session);
    let (bd, nd) = (bs.duration_s, ns.duration_s);
    let rates = bd > 0.0 && nd > 0.0 && (bd - nd).abs() > RATE_WHEN_APART * bd.max(nd);
    let per = |v: u64, d: f64| if rates { v as f64 / d } else { v as f64 };
    let (bt, nt) = (totals(bs).attributed, totals(ns).attributed);
    let (bc, nc) = (counts(base), counts(new));
    let zero = Counts::default();
    let mut rows: Vec<Row> = bc
        .keys()
        .chain(nc.keys().filter(|k| !bc.contains_key(*k)))
        .map(|k| {
            let (b, n) = (bc.get(k).unwrap_or(&zero), nc.get(k).unwrap_or(&zero));
            Row {
                key: k.clone(),
                module: if n.module_exclusive.is_some() {
                    &n.module
                } else {
                    &b.module
                }
                .clone(),
                base: (per(b.exclusive, bd), per(b.inclusive, bd)),
                new: (per(n.exclusive, nd), per(n.inclusive, nd)),
                share_change: percent(n.exclusive, nt) - percent(b.exclusive, bt),
            }
        })
        .collect();
    rows.sort_by(|x, y| {
        let primary = match by_share {
            true => y.share_change.abs().total_cmp(&x.share_change.abs()),
            false => y
                .exclusive_change()
                .abs()
                .total_cmp(&x.exclusive_change().abs()),
        };
        primary
            .then(
                y.inclusive_change()
                    .abs()
                    .total_cmp(&x.inclusive_change().abs()),
            )
            .then_with(|| x.key.cmp(&y.key))
    });
    let time = is_time(bs.mode());
    let value = |v: f64| -> String {
        match (time, rates) {
            (true, _) => time_text(v.round() as u64),
            (false, true) => format!("{v:.1}"),
            (false, false) => format!("{v:.0}"),
        }
    };
    let change = |v: f64| -> String {
        let sign = if v < 0.0 { "-" } else { "+" };
        format!("{sign}{}", value(v.abs()))
    };
    let shown = limit.map_or(rows.len(), |l| l.min(rows.len()));
    let mut out = String::new();
    for (which, side) in [("base", base), ("new", new)] {
        let s = &side.session;
        // A range of the history has no one target.
        let target = match s.comm.as_str() {
            _ if s.pid == 0 => String::new(),
            "" => format!(" — pid {}", s.pid),
            comm => format!(" — pid {} ({comm})", s.pid),
        };
        let _ = writeln!(
            out,
            "{which:<4}  {}{target} — {} attributed in {:.2} s",
            side.label,
            count_text(s, totals(s).attributed),
            s.duration_s
        );
    }
    let unit = match time {
        true => "time",
        false => "samples",
    };
    if rates {
        let _ = writeln!(
            out,
            "{unit} per second: the profiles' durations differ ({bd:.2} s and {nd:.2} s)"
        );
    }
    let _ = writeln!(
        out,
        "{:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>9}  FUNCTION  [MODULE]",
        "BASE EXCL", "NEW EXCL", "CHANGE", "BASE INCL", "NEW INCL", "CHANGE", "EXCL% CHG"
    );
    if rows.is_empty() {
        out.push_str("(no samples)\n");
    }
    for r in &rows[..shown] {
        let (name, inlined) = &r.key;
        let _ = writeln!(
            out,
            "{:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>+9.1}  {}{}{}",
            value(r.base.0),
            value(r.new.0),
            change(r.exclusive_change()),
            value(r.base.1),
            value(r.new.1),
            change(r.inclusive_change()),
            r.share_change,
            shorten(name, name_width),
            if *inlined { INLINED_MARK } else { "" },
            module_cell(&r.module)
        );
    }
    if shown < rows.len() {
        let _ = writeln!(
            out,
            "({} more functions changed less; --top 0 shows all)",
            rows.len() - shown
        );
    }
    out
}

#[cfg(test)]
#[path = "diff_tests.rs"]
mod tests;
