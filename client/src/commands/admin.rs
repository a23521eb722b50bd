//! `profctl sessions`, `profctl stop`, `profctl info` and `profctl health`:
//! one request, one rendered reply.
use profd_common::api::{InfoRequest, ListSessionsRequest, StopRequest};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::HealthCheckRequest;

use super::required_session;
use crate::args::cli::{HealthArgs, SessionsArgs};
use crate::error::Error;
use crate::requests::connect::{Client, Connection};
use crate::requests::progress::waiting;
use crate::views::output::Output;
use crate::views::render;

/// Lists the daemon's sessions, oldest first; with `--all` also those of
/// earlier daemon runs.
pub async fn sessions(client: &mut Client, args: &SessionsArgs, out: &Output) -> Result<(), Error> {
    let mut sessions = waiting(
        "waiting for the session list",
        client.list_sessions(ListSessionsRequest { all: args.all }),
    )
    .await?
    .into_inner()
    .sessions;
    sessions.sort_by_key(|s| s.id);
    out.print(&render::sessions_table(&sessions))
}

/// Stops session `id` and prints its final state; fails when the daemon
/// could not write it to its state directory.
pub async fn stop(client: &mut Client, id: u64, out: &Output) -> Result<(), Error> {
    let reply = waiting(
        &format!("stopping session {id}"),
        client.stop(StopRequest { session_id: id }),
    )
    .await?
    .into_inner();
    let session = required_session(reply.session, "Stop")?;
    out.print(&render::session_line(&session))?;
    super::attach::check_saved(&session)
}

/// Prints the daemon's facts.
pub async fn info(client: &mut Client, out: &Output) -> Result<(), Error> {
    let info = waiting("waiting for profd", client.info(InfoRequest {}))
        .await?
        .into_inner();
    out.print(&render::info_text(&info))
}

/// Asks the health service about `args.service` and prints the status
/// (`SERVING`, `NOT_SERVING`, ...); anything but SERVING is an error.
pub async fn health(conn: &Connection, args: &HealthArgs, out: &Output) -> Result<(), Error> {
    let request = HealthCheckRequest {
        service: args.service.clone(),
    };
    let reply = waiting("waiting for profd", conn.health().check(request))
        .await?
        .into_inner();
    let status = ServingStatus::try_from(reply.status).unwrap_or(ServingStatus::Unknown);
    let name = status.as_str_name();
    let what = match args.service.as_str() {
        "" => "profd".to_string(),
        service => service.to_string(),
    };
    match status {
        ServingStatus::Serving => out.print(&format!("{what}: {name}\n")),
        _ => Err(Error::Unhealthy(format!("{what}: {name}"))),
    }
}
