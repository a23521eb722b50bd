//! `profctl query`: the continuous history over a time range, as a view or
//! an export of its merged profile (the code paths of `report` and
//! `export`), or with --list its windows and services (ListWindows).
use std::time::SystemTime;

use profd_common::api::ListWindowsRequest;

use super::{export_source, report_daemon, Source};
use crate::args::cli::{QueryAction, QueryArgs};
use crate::error::Error;
use crate::requests::connect::Client;
use crate::requests::progress::waiting;
use crate::views::output::Output;
use crate::views::render;

/// Runs `profctl query`.
pub async fn query(client: &mut Client, args: &QueryArgs, out: &Output) -> Result<(), Error> {
    let action = args.action()?;
    let query = args.query(SystemTime::now())?;
    let source = Source::Query(query.clone());
    match action {
        QueryAction::List => {
            let reply = waiting(
                "listing the continuous history",
                client.list_windows(ListWindowsRequest {
                    from_unix_ms: query.from_unix_ms,
                    to_unix_ms: query.to_unix_ms,
                }),
            )
            .await?
            .into_inner();
            out.print(&render::windows_text(&reply))
        }
        QueryAction::View(view) => report_daemon(client, &source, &view, out).await,
        QueryAction::Export(format) => {
            export_source(client, &source, format, &args.output, out).await
        }
    }
}
