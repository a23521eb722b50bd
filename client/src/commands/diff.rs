//! `profctl diff`: two profiles (sessions, saved pprof files, or time ranges
//! of the continuous history) side by side, each function's share of its
//! own profile in both and the change, biggest first; and the pair as pprof
//! files for `go tool pprof -diff_base`.
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use profd_common::api::{self, ExportFormat, Function, GetProfileRequest, Session};
use profd_common::model::{is_time, mode_name};

use super::{required_session, Source};
use crate::args::cli::{unix_ms, DiffArgs, DiffSide};
use crate::error::Error;
use crate::files::pprof_file;
use crate::requests::connect::Client;
use crate::requests::progress::waiting;
use crate::views::output::Output;
use crate::views::ranking::{percent, totals};
use crate::views::render::{module_cell, shorten, INLINED_MARK};
use crate::views::units::count_text;

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
    let limit = (args.top > 0).then_some(args.top);
    let mut text = diff_table(&base, &new, limit, out.name_width());
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

/// A function of either side: by name, module and whether inlined.
type Key = (String, String, bool);

/// A function's self and inclusive shares of its side (0-100).
type Shares = (f64, f64);

/// The comparison: a line per side, then a row per function with its self
/// and inclusive shares in BASE and NEW and their changes (points), largest
/// self change first (then inclusive), at most `limit` rows.
fn diff_table(base: &Side, new: &Side, limit: Option<usize>, name_width: usize) -> String {
    let shares = |side: &Side| -> HashMap<Key, (f64, f64)> {
        let total = totals(&side.session).attributed;
        let mut m: HashMap<Key, (u64, u64)> = HashMap::new();
        for f in &side.functions {
            let e = m
                .entry((f.name.clone(), f.module.clone(), f.inlined))
                .or_default();
            e.0 += f.exclusive;
            e.1 += f.inclusive;
        }
        m.into_iter()
            .map(|(k, (excl, incl))| (k, (percent(excl, total), percent(incl, total))))
            .collect()
    };
    let (b, n) = (shares(base), shares(new));
    let mut rows: Vec<(&Key, Shares, Shares)> = b
        .keys()
        .chain(n.keys().filter(|k| !b.contains_key(*k)))
        .map(|k| {
            let zero = (0.0, 0.0);
            (k, *b.get(k).unwrap_or(&zero), *n.get(k).unwrap_or(&zero))
        })
        .collect();
    let change = |r: &(&Key, Shares, Shares)| ((r.2 .0 - r.1 .0).abs(), (r.2 .1 - r.1 .1).abs());
    rows.sort_by(|x, y| {
        let (cx, cy) = (change(x), change(y));
        cy.0.total_cmp(&cx.0)
            .then(cy.1.total_cmp(&cx.1))
            .then_with(|| x.0.cmp(y.0))
    });
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
            "{which:<4}  {}{target} — {} attributed",
            side.label,
            count_text(s, totals(s).attributed)
        );
    }
    let _ = writeln!(
        out,
        "{:>9}  {:>9}  {:>7}  {:>9}  {:>9}  {:>7}  FUNCTION  [MODULE]",
        "BASE EXCL", "NEW EXCL", "CHANGE", "BASE INCL", "NEW INCL", "CHANGE"
    );
    if rows.is_empty() {
        out.push_str("(no samples)\n");
    }
    for ((name, module, inlined), (be, bi), (ne, ni)) in &rows[..shown] {
        let _ = writeln!(
            out,
            "{:>8.1}%  {:>8.1}%  {:>+7.1}  {:>8.1}%  {:>8.1}%  {:>+7.1}  {}{}{}",
            be,
            ne,
            ne - be,
            bi,
            ni,
            ni - bi,
            shorten(name, name_width),
            if *inlined { INLINED_MARK } else { "" },
            module_cell(module)
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
