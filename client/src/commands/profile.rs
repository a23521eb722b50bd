//! `profctl attach`, and the session-following loop it shares with `run`:
//! Attach, Watch with a live table, Stop on Ctrl-C, and the final profile.
use std::future::pending;
use std::process::ExitStatus;
use std::time::Duration;

use profd_common::api::profiler_client::ProfilerClient;
use profd_common::api::{
    AttachRequest, GetProfileRequest, Session, SessionState, StopRequest, WatchRequest,
};
use tokio::process::Child;
use tokio::time::Instant;
use tonic::transport::Channel;

use super::required_session;
use crate::cli::{AttachArgs, Format, ProfileOptions};
use crate::error::Error;
use crate::output::Output;
use crate::profile::Profile;
use crate::render::{self, TableOptions};
use crate::watch::WatchState;

/// How long after our child exits we wait for the daemon's final update
/// before stopping the session ourselves (at least this, or three intervals).
const CHILD_EXIT_GRACE: Duration = Duration::from_secs(5);

/// Profiles process `args.pid` until it exits, `--duration` elapses or Ctrl-C.
pub async fn attach(
    client: &mut ProfilerClient<Channel>,
    args: &AttachArgs,
    out: &Output,
) -> Result<(), Error> {
    let session = start(client, args.options.attach_request(args.pid)).await?;
    let mut view = View::new(&args.options, *out);
    let profile = follow(client, &session, &mut view, None).await?;
    view.finish(&profile)
}

/// Sends Attach and returns the new session.
pub(super) async fn start(
    client: &mut ProfilerClient<Channel>,
    request: AttachRequest,
) -> Result<Session, Error> {
    let reply = client.attach(request).await?.into_inner();
    required_session(reply.session, "Attach")
}

/// A child process `run` started, and its exit status once reaped.
pub(super) struct ChildProcess {
    pub child: Child,
    pub status: Option<ExitStatus>,
}

/// What the user sees of a session: the live view while it runs, the final
/// table or JSON document at the end.
pub(super) struct View {
    options: ProfileOptions,
    out: Output,
    table: TableOptions,
    live_shown: bool,
}

impl View {
    pub(super) fn new(options: &ProfileOptions, out: Output) -> Self {
        View {
            options: options.clone(),
            out,
            table: TableOptions {
                limit: options.row_limit(),
                name_width: out.name_width(),
            },
            live_shown: false,
        }
    }

    /// One live refresh (tables only: JSON prints nothing until the end).
    fn refresh(&mut self, state: &WatchState) -> Result<(), Error> {
        if self.options.format != Format::Table {
            return Ok(());
        }
        self.live_shown = true;
        self.out
            .refresh(&render::profile_table(&state.profile(), self.table))
    }

    /// The final table, or the one JSON document.
    pub(super) fn finish(&self, profile: &Profile) -> Result<(), Error> {
        match self.options.format {
            Format::Table => self
                .out
                .finish(&render::profile_table(profile, self.table), self.live_shown),
            Format::Json => self
                .out
                .print(&render::profile_json(profile, self.options.row_limit())),
        }
    }

    fn interval(&self) -> Duration {
        self.options.interval
    }
}

/// Follows `session` until its final update and returns its whole profile
/// (from GetProfile). Ctrl-C stops the session; a second Ctrl-C gives up.
/// With a `child`, reaps it when it exits (recording its status) and stops
/// the session if the daemon has not ended it shortly after. On failure the
/// session is stopped, best effort.
pub(super) async fn follow(
    client: &mut ProfilerClient<Channel>,
    session: &Session,
    view: &mut View,
    child: Option<&mut ChildProcess>,
) -> Result<Profile, Error> {
    let result = follow_inner(client, session, view, child).await;
    if result.is_err() {
        let _ = client
            .stop(StopRequest {
                session_id: session.id,
            })
            .await;
    }
    result
}

async fn follow_inner(
    client: &mut ProfilerClient<Channel>,
    session: &Session,
    view: &mut View,
    mut child: Option<&mut ChildProcess>,
) -> Result<Profile, Error> {
    let id = session.id;
    let mut stream = client
        .watch(WatchRequest {
            session_id: id,
            interval_ms: view.options.interval_ms(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut state = WatchState::new();
    let mut ctrl_c = Box::pin(tokio::signal::ctrl_c());
    let mut interrupted = false;
    let mut stop_at: Option<Instant> = None;
    loop {
        let child_running = child.as_ref().is_some_and(|c| c.status.is_none());
        tokio::select! {
            update = stream.message() => match update? {
                Some(update) => {
                    state.apply(update)?;
                    if state.is_final() {
                        break;
                    }
                    view.refresh(&state)?;
                }
                None => break,
            },
            signal = &mut ctrl_c => {
                signal.map_err(|e| Error::io("cannot listen for Ctrl-C", e))?;
                if interrupted {
                    return Err(Error::Interrupted);
                }
                interrupted = true;
                eprintln!("profctl: stopping session {id} (Ctrl-C again to quit at once)");
                stop_session(client, id).await?;
                ctrl_c = Box::pin(tokio::signal::ctrl_c());
            },
            status = wait_child(child.as_deref_mut()), if child_running => {
                let status = status.map_err(|e| Error::io("cannot wait for the command", e))?;
                if let Some(c) = child.as_deref_mut() {
                    c.status = Some(status);
                }
                let grace = CHILD_EXIT_GRACE.max(view.interval() * 3);
                stop_at = Some(Instant::now() + grace);
            },
            () = sleep_until(stop_at), if stop_at.is_some() => {
                // The command is gone but the session goes on (it may have
                // left children behind, or the daemon missed the exit).
                stop_at = None;
                stop_session(client, id).await?;
            },
        }
    }
    let reply = client
        .get_profile(GetProfileRequest {
            session_id: id,
            ..Default::default()
        })
        .await?
        .into_inner();
    let session = required_session(reply.session, "GetProfile")?;
    if !state.is_final() && session.state() == SessionState::Running {
        return Err(Error::Protocol(
            "the Watch stream ended while the session was still running".into(),
        ));
    }
    Ok(Profile::new(session, reply.functions))
}

/// Sends Stop; a session that already ended is fine.
async fn stop_session(client: &mut ProfilerClient<Channel>, id: u64) -> Result<(), Error> {
    match client.stop(StopRequest { session_id: id }).await {
        Ok(_) => Ok(()),
        Err(s)
            if matches!(
                s.code(),
                tonic::Code::FailedPrecondition | tonic::Code::NotFound
            ) =>
        {
            Ok(())
        }
        Err(s) => Err(s.into()),
    }
}

async fn wait_child(child: Option<&mut ChildProcess>) -> std::io::Result<ExitStatus> {
    match child {
        Some(c) => c.child.wait().await,
        None => pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => pending().await,
    }
}
