//! `profctl attach`, and the session-following loop it shares with `run`:
//! Attach, Watch with a live table, Stop on Ctrl-C, and the final profile.
use std::future::pending;
use std::process::ExitStatus;
use std::time::Duration;

use profd_common::api::{
    AttachRequest, GetProfileRequest, GetViewRequest, SaveState, Session, SessionState,
    StopRequest, WatchRequest,
};
use tokio::process::Child;
use tokio::time::Instant;

use super::export::record;
use super::required_session;
use crate::args::cli::{AttachArgs, Format, ProfileOptions};
use crate::error::Error;
use crate::requests::connect::Client;
use crate::requests::progress::{waiting, Spinner};
use crate::requests::watch::WatchState;
use crate::tui::{Action, Tui};
use crate::views::output::Output;
use crate::views::ranking::Profile;
use crate::views::render::{self, TableOptions};
use crate::views::render_saved::not_saved_line;

/// How long after our child exits we wait for the daemon's final update
/// before stopping the session ourselves (at least this, or three intervals).
const CHILD_EXIT_GRACE: Duration = Duration::from_secs(5);

/// Profiles process `args.pid` until it exits, `--duration` elapses or Ctrl-C.
/// With `-o`, then writes the whole profile to the file.
pub async fn attach(client: &mut Client, args: &AttachArgs, out: &Output) -> Result<(), Error> {
    let recording = args.options.recording()?;
    let session = start(client, args.options.attach_request(args.pid)).await?;
    let mut view = SessionDisplay::new(&args.options, *out);
    let profile = follow(client, &session, &mut view, None).await?;
    view.finish(&profile)?;
    record(client, profile.session.id, recording, out).await?;
    check_saved(&profile.session)
}

/// Fails when the daemon could not write the ended `session` to its state
/// directory (it holds it in memory: the message says why and how to keep a
/// copy); says so when the write is still under way.
pub(super) fn check_saved(session: &Session) -> Result<(), Error> {
    match session.save_state() {
        SaveState::NotSaved => Err(Error::NotSaved(not_saved_line(session))),
        SaveState::Pending => {
            eprintln!(
                "profctl: session {} is still being written to the daemon's state directory; \
                 `profctl sessions` shows when it is (SAVED)",
                session.id
            );
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Whether the live view is the full-screen one: the output's stream is a
/// terminal, the output is a table and `--no-tui` was not given.
pub(super) fn wants_tui(options: &ProfileOptions, out: &Output) -> bool {
    out.is_terminal() && !options.no_tui && options.format == Format::Table
}

/// Sends Attach and returns the new session.
pub(super) async fn start(client: &mut Client, request: AttachRequest) -> Result<Session, Error> {
    let reply = client.attach(request).await?.into_inner();
    required_session(reply.session, "Attach")
}

/// A child process `run` started, and its exit status once reaped.
pub(super) struct ChildProcess {
    pub child: Child,
    pub status: Option<ExitStatus>,
}

/// What the user sees of a session: the live view while it runs (the
/// full-screen TUI, or a refreshed table), the final table or JSON document
/// at the end.
pub(super) struct SessionDisplay {
    options: ProfileOptions,
    out: Output,
    table: TableOptions,
    live_shown: bool,
    tui: Option<Tui>,
}

impl SessionDisplay {
    /// The view for `options`; on a terminal, opens the full-screen view
    /// (falling back to the refreshed table if the terminal refuses).
    pub(super) fn new(options: &ProfileOptions, out: Output) -> Self {
        let tui = if wants_tui(options, &out) {
            let empty = WatchState::with_window(options.window_s()).profile();
            match Tui::start(empty, options.sort, out.names(), out.stream()) {
                Ok(tui) => Some(tui),
                Err(e) => {
                    eprintln!("profctl: cannot open the full-screen view ({e}); printing tables");
                    None
                }
            }
        } else {
            None
        };
        SessionDisplay {
            options: options.clone(),
            out,
            table: TableOptions {
                limit: options.row_limit(),
                names: out.names(),
            },
            live_shown: false,
            tui,
        }
    }

    /// One live refresh (tables only: JSON prints nothing until the end).
    fn refresh(&mut self, state: &WatchState) -> Result<(), Error> {
        if self.options.format != Format::Table {
            return Ok(());
        }
        if let Some(tui) = &mut self.tui {
            tui.state.set_profile(state.profile());
            return tui.draw().map_err(Error::Output);
        }
        self.live_shown = true;
        let profile = state.profile().sorted(self.options.sort);
        self.out
            .refresh(&render::profile_table(&profile, self.table))
    }

    /// The next thing the user asked for in the full-screen view; never
    /// completes without one.
    async fn next_action(&mut self) -> Action {
        match &mut self.tui {
            Some(tui) => tui.next_action().await,
            None => pending().await,
        }
    }

    /// The view request to refresh the full-screen view's tree, callers,
    /// threads or filtered table with, if it shows one, and its filter.
    fn view_request(&self) -> Option<ViewRequest> {
        let state = &self.tui.as_ref()?.state;
        Some((state.refresh_request()?, state.only_ids()))
    }

    /// Shows a GetView reply (or its error) in the full-screen view.
    fn show_view(
        &mut self,
        reply: Result<profd_common::api::GetViewResponse, tonic::Status>,
    ) -> Result<(), Error> {
        match &mut self.tui {
            Some(tui) => {
                tui.state.set_view(reply);
                tui.draw().map_err(Error::Output)
            }
            None => Ok(()),
        }
    }

    /// A line about the stream on stderr (not over the full-screen view).
    fn notice(&self, line: &str) {
        if self.tui.is_none() {
            eprintln!("profctl: {line}");
        }
    }

    fn redraw(&mut self) -> Result<(), Error> {
        match &mut self.tui {
            Some(tui) => tui.draw().map_err(Error::Output),
            None => Ok(()),
        }
    }

    /// The final table, or the one JSON document (after leaving the
    /// full-screen view).
    pub(super) fn finish(mut self, profile: &Profile) -> Result<(), Error> {
        if let Some(mut tui) = self.tui.take() {
            tui.restore();
        }
        match self.options.format {
            Format::Table => self.out.finish(
                &render::profile_table(&profile.clone().sorted(self.options.sort), self.table),
                self.live_shown,
            ),
            Format::Json => self
                .out
                .print(&render::profile_json(profile, self.options.row_limit())),
        }
    }

    fn interval(&self) -> Duration {
        self.options.interval
    }

    /// The spinner for a wait on session `id`, unless the full-screen view
    /// owns the terminal: until the end for JSON (nothing is shown before),
    /// else until the first table.
    fn spinner(&self, id: u64) -> Option<Spinner> {
        if self.tui.is_some() {
            return None;
        }
        Some(Spinner::start(match self.options.format {
            Format::Json => format!("profiling session {id}; Ctrl-C stops it"),
            Format::Table => format!("waiting for the first update of session {id}"),
        }))
    }
}

/// Follows `session` until its final update and returns its whole profile
/// (from GetProfile). Ctrl-C stops the session; a second Ctrl-C gives up.
/// With a `child`, reaps it when it exits (recording its status) and stops
/// the session if the daemon has not ended it shortly after. On failure the
/// session is stopped, best effort.
pub(super) async fn follow(
    client: &mut Client,
    session: &Session,
    view: &mut SessionDisplay,
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

/// Times a broken Watch stream is resumed in a row before giving up.
const MAX_RECONNECTS: u32 = 5;
const RECONNECT_DELAY: std::time::Duration = std::time::Duration::from_millis(500);

/// Whether a status is the connection failing rather than the daemon
/// answering.
fn is_transport(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
    )
}

async fn follow_inner(
    client: &mut Client,
    session: &Session,
    view: &mut SessionDisplay,
    mut child: Option<&mut ChildProcess>,
) -> Result<Profile, Error> {
    let id = session.id;
    let (interval_ms, window_s) = (view.options.interval_ms(), view.options.window_s());
    let request = move |resume_after_seq| WatchRequest {
        session_id: id,
        interval_ms,
        window_s,
        resume_after_seq,
    };
    // A command run by `run` writes to the terminal too: no spinner then.
    let mut spinner = match child {
        Some(_) => None,
        None => view.spinner(id),
    };
    let mut stream = client.watch(request(0)).await?.into_inner();
    let mut reconnects = 0;
    let mut state = WatchState::with_window(view.options.window_s());
    let mut ctrl_c = Box::pin(tokio::signal::ctrl_c());
    let mut interrupted = false;
    let mut stop_at: Option<Instant> = None;
    loop {
        let child_running = child.as_ref().is_some_and(|c| c.status.is_none());
        tokio::select! {
            update = stream.message() => match update {
                // The stream broke (not the session): resume where it was.
                Err(status) if reconnects < MAX_RECONNECTS && is_transport(&status) => {
                    reconnects += 1;
                    let after = state.last_seq();
                    view.notice(&format!(
                        "the stream of session {id} broke ({}); resuming after update {after}",
                        status.message()
                    ));
                    tokio::time::sleep(RECONNECT_DELAY).await;
                    stream = client.watch(request(after)).await?.into_inner();
                }
                Err(status) => return Err(status.into()),
                Ok(Some(update)) => {
                    if reconnects > 0 {
                        view.notice(&match update.resumed {
                            true => format!("resumed session {id}: update {} after {}", update.seq, state.last_seq()),
                            false => format!("session {id} sent whole again (update {})", update.seq),
                        });
                    }
                    reconnects = 0;
                    state.apply(update)?;
                    if state.is_final() {
                        break;
                    }
                    if view.options.format == Format::Table {
                        spinner = None;
                    }
                    view.refresh(&state)?;
                    if let Some(request) = view.view_request() {
                        let reply = fetch_view(client, id, request).await;
                        view.show_view(reply)?;
                    }
                }
                Ok(None) => break,
            },
            action = view.next_action() => match action {
                Action::Quit => {
                    if interrupted {
                        return Err(Error::Interrupted);
                    }
                    interrupted = true;
                    view.redraw()?;
                    stop_session(client, id).await?;
                }
                Action::Fetch(_) => {
                    view.redraw()?;
                    if let Some(request) = view.view_request() {
                        let reply = fetch_view(client, id, request).await;
                        view.show_view(reply)?;
                    }
                }
                Action::Redraw | Action::None => view.redraw()?,
            },
            signal = &mut ctrl_c => {
                signal.map_err(|e| Error::io("cannot listen for Ctrl-C", e))?;
                if interrupted {
                    return Err(Error::Interrupted);
                }
                interrupted = true;
                let line = format!("profctl: stopping session {id} (Ctrl-C again to quit at once)");
                match &spinner {
                    Some(s) => {
                        s.suspend(|| eprintln!("{line}"));
                        s.set_message(format!("stopping session {id}"));
                    }
                    None => eprintln!("{line}"),
                }
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
    drop(spinner);
    let get_profile = client.get_profile(GetProfileRequest {
        session_id: id,
        ..Default::default()
    });
    let reply = if view.tui.is_none() && child.is_none() {
        waiting(&format!("reading the profile of session {id}"), get_profile).await
    } else {
        get_profile.await
    };
    let reply = match reply {
        Ok(reply) => reply.into_inner(),
        // The daemon went away (shutting down) after the final update:
        // that update already holds the whole profile.
        Err(status) if state.is_final() && is_transport(&status) => return Ok(state.profile()),
        Err(status) => return Err(status.into()),
    };
    let session = required_session(reply.session, "GetProfile")?;
    if !state.is_final() && session.state() == SessionState::Running {
        return Err(Error::Protocol(
            "the Watch stream ended while the session was still running".into(),
        ));
    }
    Ok(Profile::new(session, reply.functions))
}

/// A view of the full-screen view, and the threads and processes it is of
/// (none: all).
type ViewRequest = (
    profd_common::api::get_view_request::View,
    (Vec<u32>, Vec<u32>),
);

/// One GetView for the full-screen view: the reply, or the daemon's status.
async fn fetch_view(
    client: &mut Client,
    id: u64,
    (request, (tids, pids)): ViewRequest,
) -> Result<profd_common::api::GetViewResponse, tonic::Status> {
    client
        .get_view(GetViewRequest {
            session_id: id,
            view: Some(request),
            query: None,
            tids,
            pids,
        })
        .await
        .map(tonic::Response::into_inner)
}

/// Sends Stop; a session that already ended is fine.
async fn stop_session(client: &mut Client, id: u64) -> Result<(), Error> {
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
