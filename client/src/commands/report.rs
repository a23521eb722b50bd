//! `profctl report`: one view of a live session or of the continuous
//! history (GetProfile / GetView), or of a saved pprof file (computed
//! locally), printed as text.
use profd_common::api::get_view_request::View;
use std::collections::HashMap;
use std::fmt::Write as _;

use profd_common::api::{
    Function, GetProfileRequest, GetViewRequest, GetViewResponse, Session, ThreadsRequest, Totals,
    TreeRequest,
};

use super::{required_session, Source};
use crate::args::cli::{ReportArgs, ReportView};
use crate::error::Error;
use crate::files::pprof_file;
use crate::files::symbols::{self, SymbolSource};
use crate::requests::connect::Client;
use crate::requests::progress::waiting;
use crate::views::output::Output;
use crate::views::ranking::{percent, totals, Profile};
use crate::views::render::{self, NameStyle, TableOptions};
use crate::views::render_views;
use crate::views::units::count_text;

/// The GetView request for a report view (`None` for the flat table, which
/// comes from GetProfile).
pub fn view_request(view: &ReportView) -> Option<View> {
    match view {
        ReportView::Flat { .. } => None,
        ReportView::Tree(t) => Some(View::Tree(*t)),
        ReportView::HotPath(t) => Some(View::HotPath(*t)),
        ReportView::CallerCallee { function, .. } => Some(View::Callers(function.clone())),
        ReportView::Lines(f) => Some(View::Lines(f.clone())),
        ReportView::Threads => Some(View::Threads(ThreadsRequest {})),
    }
}

/// A view's text (without the header lines naming the session or file).
pub fn view_text(view: &ReportView, reply: &GetViewResponse, names: NameStyle) -> String {
    match view {
        ReportView::Flat { .. } => String::new(),
        ReportView::Tree(t) => render_views::tree_text(
            reply,
            if t.bottom_up {
                "call tree, bottom-up (callers below their callees)"
            } else {
                "call tree, top-down"
            },
            names,
        ),
        ReportView::HotPath(t) => render_views::tree_text(
            reply,
            if t.bottom_up {
                "hot path, bottom-up"
            } else {
                "hot path, top-down"
            },
            names,
        ),
        ReportView::CallerCallee {
            callers, callees, ..
        } => render_views::caller_callee_text(reply, *callers, *callees, names),
        ReportView::Lines(f) => {
            let name = match reply
                .caller_callee
                .as_ref()
                .and_then(|c| c.function.as_ref())
            {
                Some(func) => func.name.clone(),
                None if f.name.is_empty() => format!("#{}", f.id),
                None => f.name.clone(),
            };
            render_views::lines_text(reply, &name)
        }
        ReportView::Threads => render_views::threads_text(reply, names),
    }
}

fn table_options(limit: Option<usize>, out: &Output) -> TableOptions {
    TableOptions {
        limit,
        names: out.names(),
    }
}

/// Reports on session `id` of the daemon.
pub async fn report_session(
    client: &mut Client,
    id: u64,
    args: &ReportArgs,
    out: &Output,
) -> Result<(), Error> {
    refuse_symbols_for_a_session(&args.symbols.sources)?;
    let view = args.view()?;
    report_daemon(client, &Source::Session(id), &view, out).await
}

/// Prints `view` of a session or of the continuous history.
pub async fn report_daemon(
    client: &mut Client,
    source: &Source,
    view: &ReportView,
    out: &Output,
) -> Result<(), Error> {
    let text = match view_request(view) {
        None => {
            let ReportView::Flat { limit, sort } = view else {
                unreachable!("only the flat table has no view request")
            };
            let reply = waiting(
                &format!("reading the profile of {}", source.name()),
                client.get_profile(GetProfileRequest {
                    session_id: source.session_id(),
                    query: source.query(),
                    ..Default::default()
                }),
            )
            .await?
            .into_inner();
            let session = required_session(reply.session, "GetProfile")?;
            let by = source.query().map_or(0, |q| q.by);
            if by != 0 {
                let tree = waiting(
                    &format!("reading the groups of {}", source.name()),
                    client.get_view(GetViewRequest {
                        view: Some(View::Tree(TreeRequest::default())),
                        query: source.query(),
                        ..Default::default()
                    }),
                )
                .await?
                .into_inner();
                let mut text = render::table_header(&session);
                for (group, functions) in groups(&tree) {
                    let part = Profile::new(
                        Session {
                            totals: Some(Totals {
                                attributed: group.inclusive,
                                ..Default::default()
                            }),
                            ..session.clone()
                        },
                        functions,
                    )
                    .sorted(*sort);
                    let _ = writeln!(
                        text,
                        "\n{}: {} ({:.2} % of all; the shares below are of its own)",
                        group.name,
                        count_text(&session, group.inclusive),
                        percent(group.inclusive, totals(&session).attributed)
                    );
                    text.push_str(&render::profile_rows(&part, table_options(*limit, out)));
                }
                text
            } else {
                let profile = Profile::new(session, reply.functions).sorted(*sort);
                render::profile_table(&profile, table_options(*limit, out))
            }
        }
        Some(request) => {
            let reply = waiting(
                &format!("reading the view of {}", source.name()),
                client.get_view(GetViewRequest {
                    session_id: source.session_id(),
                    view: Some(request),
                    query: source.query(),
                    ..Default::default()
                }),
            )
            .await?
            .into_inner();
            let session = required_session(reply.session.clone(), "GetView")?;
            let mut text = render::table_header(&session);
            text.push_str(&view_text(view, &reply, out.names()));
            text
        }
    };
    out.print(&text)
}

/// The groups of a query's call tree (`--by`: the frames at its roots,
/// most samples first), each with the functions under it and their counts
/// within it: exclusive the sum of their nodes', inclusive that of their
/// outermost nodes on each path (a stack counts once, recursion or not).
fn groups(tree: &GetViewResponse) -> Vec<(Function, Vec<Function>)> {
    let function = |id: u64| tree.functions.iter().find(|f| f.id == id);
    let mut out: Vec<(Function, Vec<Function>)> = Vec::new();
    // The function ids on the path to the node, root first.
    let mut path: Vec<u64> = Vec::new();
    let mut counts: HashMap<u64, (u64, u64)> = HashMap::new();
    let flush = |out: &mut Vec<(Function, Vec<Function>)>,
                 counts: &mut HashMap<u64, (u64, u64)>| {
        if let Some((_, functions)) = out.last_mut() {
            for (id, (inclusive, exclusive)) in counts.drain() {
                if let Some(f) = function(id) {
                    functions.push(Function {
                        inclusive,
                        exclusive,
                        ..f.clone()
                    });
                }
            }
        }
    };
    for node in &tree.nodes {
        path.truncate(node.depth as usize);
        if node.depth == 0 {
            flush(&mut out, &mut counts);
            let root = function(node.function_id).cloned().unwrap_or_default();
            out.push((
                Function {
                    inclusive: node.inclusive,
                    exclusive: node.exclusive,
                    ..root
                },
                Vec::new(),
            ));
        } else {
            let c = counts.entry(node.function_id).or_default();
            if !path[1..].contains(&node.function_id) {
                c.0 += node.inclusive;
            }
            c.1 += node.exclusive;
        }
        path.push(node.function_id);
    }
    flush(&mut out, &mut counts);
    out.sort_by(|a, b| {
        b.0.inclusive
            .cmp(&a.0.inclusive)
            .then(a.0.name.cmp(&b.0.name))
    });
    out
}

/// Reports on a saved pprof file, without a daemon.
pub async fn report_file(
    path: &std::path::Path,
    args: &ReportArgs,
    out: &Output,
) -> Result<(), Error> {
    out.print(&report_file_text(path, args, out.names()).await?)
}

/// The text of [`report_file`], names shown as `names` says.
pub async fn report_file_text(
    path: &std::path::Path,
    args: &ReportArgs,
    names: NameStyle,
) -> Result<String, Error> {
    let view = args.view()?;
    let mut profile = pprof_file::load(path)?;
    name_off_host(&mut profile, &args.symbols.sources).await?;
    let session = pprof_file::session(&profile);
    let mut text = render_views::file_header(&path.display().to_string(), &session);
    text.push_str(&view_text_of(&profile, &view, names)?);
    Ok(text)
}

/// `--symbols` is for saved files and the fleet: a session's functions
/// are named by its daemon.
pub fn refuse_symbols_for_a_session(sources: &[SymbolSource]) -> Result<(), Error> {
    match sources.is_empty() {
        true => Ok(()),
        false => Err(Error::Usage(
            "--symbols names the functions of a saved file (profctl report FILE, profctl \
             export FILE) or of the fleet; a session's are named by its daemon: give the \
             daemon the debug files (symbols.debuginfod_urls, or /usr/lib/debug)"
                .into(),
        )),
    }
}

/// Names a profile's stripped code from `sources` (`--symbols`), and says
/// on stderr what could not be named.
pub async fn name_off_host(
    profile: &mut profd_common::model::ResolvedProfile,
    sources: &[SymbolSource],
) -> Result<(), Error> {
    if sources.is_empty() {
        return Ok(());
    }
    let named = symbols::name_functions(profile, sources).await?;
    for (build_id, why) in &named.missing {
        eprintln!("profctl: no debug file for build id {build_id}: {why}");
    }
    if named.unnamed > 0 {
        eprintln!(
            "profctl: --symbols named {} functions; {} stay unnamed",
            named.named, named.unnamed
        );
    }
    Ok(())
}

/// A view of a profile held here (a file's, the fleet's), computed as the
/// daemon computes it, without a header.
pub fn view_text_of(
    profile: &profd_common::model::ResolvedProfile,
    view: &ReportView,
    names: NameStyle,
) -> Result<String, Error> {
    Ok(match view_request(view) {
        None => {
            let ReportView::Flat { limit, sort } = *view else {
                unreachable!("only the flat table has no view request")
            };
            let flat = Profile::new(pprof_file::session(profile), pprof_file::functions(profile))
                .sorted(sort);
            let options = TableOptions { limit, names };
            render::profile_rows(&flat, options)
        }
        Some(request) => {
            let reply = pprof_file::view(profile, &request)?;
            view_text(view, &reply, names)
        }
    })
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
