//! `profctl sessions`, `profctl stop` and `profctl info`: one request, one
//! rendered reply.
use profd_common::api::{InfoRequest, ListSessionsRequest, StopRequest};

use super::required_session;
use crate::connect::Client;
use crate::error::Error;
use crate::output::Output;
use crate::render;

/// Lists the daemon's sessions, oldest first; with `all` also those of
/// earlier daemon runs.
pub async fn sessions(client: &mut Client, all: bool, out: &Output) -> Result<(), Error> {
    let mut sessions = client
        .list_sessions(ListSessionsRequest { all })
        .await?
        .into_inner()
        .sessions;
    sessions.sort_by_key(|s| s.id);
    out.print(&render::sessions_table(&sessions))
}

/// Stops session `id` and prints its final state.
pub async fn stop(client: &mut Client, id: u64, out: &Output) -> Result<(), Error> {
    let reply = client
        .stop(StopRequest { session_id: id })
        .await?
        .into_inner();
    let session = required_session(reply.session, "Stop")?;
    out.print(&render::session_line(&session))
}

/// Prints the daemon's facts.
pub async fn info(client: &mut Client, out: &Output) -> Result<(), Error> {
    let info = client.info(InfoRequest {}).await?.into_inner();
    out.print(&render::info_text(&info))
}
