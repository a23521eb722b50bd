//! A session of an earlier run of the daemon, reloaded from the state
//! directory: a [`Handle`] like a live session's, whose task answers the same
//! commands from the stored summary and profile. The profile is read when
//! first asked for and dropped again after a while unused; a profile found
//! corrupt then is moved aside and the session is gone.
use super::{Command, FunctionTable, Handle, NoHistogram, Resolved};
use crate::sessions::store::{Encoded, LoadError, Store, Stored};
use profd_common::api;
use profd_common::kernel::KernelFrames;
use profd_common::model::ResolvedProfile;
use profd_common::views;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// A loaded profile is dropped after this long without requests.
const IDLE: Duration = Duration::from_secs(300);

/// The handle of a stored session; its owner is the one recorded.
pub fn open_stored(store: Arc<Store>, stored: Stored) -> Handle {
    let session = &stored.session;
    let (state, state_rx) = watch::channel(session.state());
    let (tx, rx) = mpsc::channel(16);
    let handle = Handle {
        id: session.id,
        owner_uid: session.owner_uid,
        owner: session.owner.as_str().into(),
        saving: super::Saving::with(super::SaveStatus {
            state: api::SaveState::Saved,
            error: String::new(),
            of_end: true,
        }),
        tx,
        state: state_rx,
    };
    tokio::spawn(run(store, stored, rx, state));
    handle
}

/// A loaded profile and its function table.
struct Loaded {
    profile: ResolvedProfile,
    functions: Vec<api::Function>,
}

async fn run(
    store: Arc<Store>,
    stored: Stored,
    mut commands: mpsc::Receiver<Command>,
    // Kept so that watchers see a state that never changes, not a closed channel.
    _state: watch::Sender<api::SessionState>,
) {
    let id = stored.session.id;
    let stored = Arc::new(stored);
    let mut loaded: Option<Arc<Loaded>> = None;
    loop {
        let cmd = tokio::select! {
            cmd = commands.recv() => cmd,
            _ = tokio::time::sleep(IDLE), if loaded.is_some() => {
                loaded = None;
                continue;
            }
        };
        let Some(cmd) = cmd else { break };
        let session = stored.session.clone();
        match cmd {
            Command::Summary(reply) | Command::Stop(reply) => {
                let _ = reply.send(session);
            }
            Command::Histogram(_, reply) => {
                let _ = reply.send(Err(NoHistogram::EarlierRun(id)));
            }
            Command::Profile(_, shown, reply) => {
                let Some(l) = load(&store, &stored, &mut loaded).await else {
                    break;
                };
                let functions = match shown {
                    KernelFrames::Full => l.functions.clone(),
                    shown => {
                        let mut profile = l.profile.clone();
                        shown.apply(&mut profile);
                        views::functions(&profile)
                    }
                };
                // The profile never changes: version 1, every function
                // first seen and last changed then.
                let _ = reply.send(FunctionTable {
                    session,
                    stamps: vec![(1, 1); functions.len()],
                    functions,
                    window_attributed: 0,
                    version: 1,
                    emptied: Vec::new(),
                });
            }
            Command::Encoded(reply) => {
                let Some(l) = load(&store, &stored, &mut loaded).await else {
                    break;
                };
                let _ = reply.send((session, Encoded::from(&l.profile)));
            }
            Command::Resolve(shown, reply) => {
                let Some(l) = load(&store, &stored, &mut loaded).await else {
                    break;
                };
                let mut profile = l.profile.clone();
                shown.apply(&mut profile);
                let _ = reply.send(Resolved {
                    session,
                    profile,
                    timeline: None,
                    unknown_ns: Default::default(),
                });
            }
        }
    }
}

/// The profile, read now if it is not loaded; None when it cannot be read
/// (deleted by retention, or corrupt: then moved aside).
async fn load(
    store: &Arc<Store>,
    stored: &Arc<Stored>,
    loaded: &mut Option<Arc<Loaded>>,
) -> Option<Arc<Loaded>> {
    if let Some(l) = loaded {
        return Some(l.clone());
    }
    let id = stored.session.id;
    let (s, st) = (store.clone(), stored.clone());
    let result = tokio::task::spawn_blocking(move || s.load(&st)).await;
    match result {
        Ok(Ok(profile)) => {
            let functions = views::functions(&profile);
            let l = Arc::new(Loaded { profile, functions });
            *loaded = Some(l.clone());
            Some(l)
        }
        Ok(Err(LoadError::Gone)) => {
            tracing::info!(session = id, "stored session deleted in the meantime");
            None
        }
        Ok(Err(LoadError::Corrupt(why))) => {
            let (s, why2) = (store.clone(), why.clone());
            let _ = tokio::task::spawn_blocking(move || s.discard(id, &why2)).await;
            tracing::warn!(session = id, reason = %why, "stored profile unreadable: session dropped");
            None
        }
        Err(e) => {
            tracing::error!(session = id, %e, "reading a stored profile panicked");
            None
        }
    }
}
