//! `profctl fleet`: a view or an export of many hosts' continuous windows,
//! read from ClickHouse (no daemon), computed here with the same code the
//! daemon's views use.
use std::time::SystemTime;

use super::export::write_profile;
use super::report::{name_off_host, view_text_of};
use crate::args::cli::{ClickHouseArgs, ExportFormatArg, FleetArgs, QueryAction, ReportView};
use crate::error::Error;
use crate::requests::fleet::{explain, Answer, Fleet, Selection};
use crate::requests::progress::waiting;
use crate::views::output::Output;
use crate::views::render;

/// The ClickHouse server `server` names, its password file read.
pub(crate) fn connect(server: &ClickHouseArgs) -> Result<Fleet, Error> {
    Fleet::new(
        &server.clickhouse,
        &server.database,
        server.user.clone(),
        server.password_file.as_deref(),
    )
}

/// Runs `profctl fleet`.
pub async fn fleet(args: &FleetArgs, out: &Output) -> Result<(), Error> {
    let action = args.action()?;
    let now = SystemTime::now();
    let (from_ms, to_ms) = args.range(now)?;
    let now_ms = crate::args::cli::unix_ms(now);
    let fleet = connect(&args.server)?;
    let selection = Selection {
        services: args.services.clone(),
        hosts: args.hosts.clone(),
        namespaces: args.namespaces.clone(),
        pods: args.pods.clone(),
        from_ms,
        to_ms,
        by: args.by,
        per_thread: matches!(action, QueryAction::View(ReportView::Threads))
            || matches!(action, QueryAction::Export(ExportFormatArg::Speedscope)),
        table: args.table,
    };
    let plan = Fleet::plan(&selection, now_ms);
    if args.explain {
        eprint!("{}", explain(&plan));
    }
    let mut answer = waiting("querying ClickHouse", fleet.profile(&selection, &plan)).await?;
    if !args.symbols.sources.is_empty() {
        let naming = name_off_host(&mut answer.profile, &args.symbols.sources);
        waiting("naming stripped code", naming).await?;
    }
    let scaled = match args.scale_to_fleet {
        true => answer.coverage.scale(&mut answer.profile),
        false => None,
    };
    if answer.profile.stacks.is_empty() {
        return Err(Error::Fleet(format!(
            "no samples in {} for {}: see profctl fleet --help for the selection",
            args.server.clickhouse,
            what(&selection)
        )));
    }
    match action {
        QueryAction::View(view) => {
            let mut text = header(&answer, scaled);
            text.push_str(&view_text_of(&answer.profile, &view, out.names())?);
            out.print(&text)
        }
        QueryAction::Export(format) => write(&answer, format, &args.output, out),
        QueryAction::List => unreachable!("fleet has no --list"),
    }
}

/// `service api, host web-1, from … to …`: what a selection asks for.
fn what(s: &Selection) -> String {
    let mut parts = Vec::new();
    if !s.services.is_empty() {
        parts.push(format!("services {}", s.services.join(", ")));
    }
    if !s.hosts.is_empty() {
        parts.push(format!("hosts {}", s.hosts.join(", ")));
    }
    if !s.namespaces.is_empty() {
        parts.push(format!("namespaces {}", s.namespaces.join(", ")));
    }
    if !s.pods.is_empty() {
        parts.push(format!("pods {}", s.pods.join(", ")));
    }
    let to = if s.to_ms == 0 {
        "now".to_string()
    } else {
        render::unix_ms_text(s.to_ms)
    };
    parts.push(format!(
        "windows from {} to {to}",
        render::unix_ms_text(s.from_ms)
    ));
    parts.join(", ")
}

/// The lines above a fleet view: hosts, services, the span, the samples,
/// the hosts that profiled of those there, and the factor counts were
/// scaled by (--scale-to-fleet).
fn header(a: &Answer, scaled: Option<f64>) -> String {
    let names = |set: &std::collections::BTreeSet<String>| {
        let shown: Vec<&str> = set.iter().take(8).map(String::as_str).collect();
        let more = set.len().saturating_sub(8);
        if more > 0 {
            format!("{} and {more} more", shown.join(", "))
        } else {
            shown.join(", ")
        }
    };
    let scaled = match scaled {
        Some(f) => format!(" (counts scaled to the fleet: ×{f:.3})"),
        None => String::new(),
    };
    format!(
        "profd fleet — {} host{} ({}) — {} service{} ({}) — windows from {} to {}\n\
         samples: {} attributed{scaled}\n{} of {} hosts profiled over the range\n",
        a.hosts.len(),
        if a.hosts.len() == 1 { "" } else { "s" },
        names(&a.hosts),
        a.services.len(),
        if a.services.len() == 1 { "" } else { "s" },
        names(&a.services),
        render::unix_ms_text(a.first_ns / 1_000_000),
        render::unix_ms_text(a.last_ns / 1_000_000),
        a.profile.attributed,
        a.coverage.profiled,
        a.coverage.hosts,
    )
}

/// Write the merged profile in `format` to `output` (`-`: stdout).
fn write(
    a: &Answer,
    format: ExportFormatArg,
    output: &std::path::Path,
    out: &Output,
) -> Result<(), Error> {
    let title = format!(
        "profd fleet — {} hosts — {} services",
        a.hosts.len(),
        a.services.len()
    );
    let what = format!(
        "{} samples of {} hosts",
        a.profile.attributed,
        a.hosts.len()
    );
    write_profile(&a.profile, format, &title, output, out, &what)
}
