//! The registry's side of the state directory: sessions are saved there at
//! intervals while they run (checkpoints) and when they end, new sessions'
//! ids are reserved there, and the sessions of earlier daemon runs found
//! there at start are registered under their own ids (new ids continue
//! after them), owned by their recorded owners, listed only on request.
use super::{sees, LiveSessions, Registry, StoredSessions};
use crate::auth::Caller;
use crate::request_error::Error;
use crate::session::{self, Handle};
use crate::store::{Found, IdError, Store};
use profd_common::api;
use profd_common::kernel::KernelFrames;
use std::sync::{Arc, Mutex, MutexGuard};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Registry {
    /// Save every session that ends in `store`, and register the sessions
    /// `found` there. Call once, before serving, within the runtime.
    pub fn open_store(&mut self, store: Arc<Store>, found: Found) {
        let mut stored = lock(&self.stored);
        for s in found.sessions {
            let id = s.session.id;
            stored.insert(id, session::stored::open_stored(store.clone(), s));
        }
        drop(stored);
        self.ids = Arc::new(Mutex::new(found.ids));
        self.store = Some(store);
    }

    /// A new session's id, reserved in the state directory first.
    pub(super) async fn new_id(&self) -> Result<u64, Error> {
        let ids = self.ids.clone();
        let taken = tokio::task::spawn_blocking(move || lock(&ids).take())
            .await
            .map_err(|e| Error::Internal(format!("reserving a session id: {e}")))?;
        taken.map_err(|e| match e {
            IdError::Exhausted => Error::ResourceExhausted(e.to_string()),
            IdError::Mark { .. } => Error::Internal(e.to_string()),
        })
    }

    /// Give back the ids reserved and not used (at shutdown, once no
    /// session starts any more).
    pub(super) async fn release_ids(&self) {
        let ids = self.ids.clone();
        match tokio::task::spawn_blocking(move || lock(&ids).release()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(%e, "unused session ids not given back"),
            Err(e) => tracing::error!(%e, "giving back unused session ids panicked"),
        }
    }

    /// The stored session with this id, if any.
    pub(super) fn stored_session(&self, id: u64) -> Option<Handle> {
        lock(&self.stored).get(&id).cloned()
    }

    /// The sessions `caller` may see (all for root, else its own): this
    /// run's, and with `all` also those of earlier runs; by id.
    pub async fn listed(&self, caller: &Caller, all: bool) -> Vec<Handle> {
        let mut list = self.visible(caller).await;
        if all {
            list.extend(
                lock(&self.stored)
                    .values()
                    .filter(|h| sees(Some(caller), h.owner_uid))
                    .cloned(),
            );
            list.sort_by_key(|h| h.id);
        }
        list
    }

    /// Save the session to the state directory every checkpoint interval
    /// while it runs, and once it has ended.
    pub(super) fn save_when_ended(&self, handle: Handle) {
        let Some(store) = self.store.clone() else {
            return self.keep_when_ended(handle);
        };
        let stored = self.stored.clone();
        let live = self.sessions.clone();
        let task = tokio::spawn(async move {
            let mut state = handle.state();
            let every = store.checkpoint_interval();
            let mut checkpoints =
                tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            checkpoints.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    ended = async {
                        state.wait_for(|s| *s != api::SessionState::Running).await.is_ok()
                    } => {
                        if !ended {
                            return; // the actor is gone: nothing left to save
                        }
                        break;
                    }
                    _ = checkpoints.tick() => {
                        if !save(&handle, &store, &stored, &live).await {
                            return; // ended meanwhile: saved as such
                        }
                    }
                }
            }
            save(&handle, &store, &stored, &live).await;
        });
        let mut saves = lock(&self.saves);
        saves.retain(|t| !t.is_finished());
        saves.push(task);
    }

    /// Wait until every session that has ended is saved (at shutdown, after
    /// `stop_all`).
    pub async fn wait_saved(&self) {
        loop {
            let tasks = std::mem::take(&mut *lock(&self.saves));
            if tasks.is_empty() {
                return;
            }
            for task in tasks {
                let _ = task.await;
            }
        }
    }

    /// Sessions of earlier runs currently registered that `seen_by` may
    /// see (all without a caller).
    pub fn stored_count(&self, seen_by: Option<&Caller>) -> usize {
        lock(&self.stored)
            .values()
            .filter(|h| sees(seen_by, h.owner_uid))
            .count()
    }

    /// Ids are handed out from here (for tests and logs).
    pub fn next_id(&self) -> u64 {
        lock(&self.ids).peek()
    }
}

/// Save the session as it is now (a checkpoint while it runs); whether it
/// still runs.
async fn save(
    handle: &Handle,
    store: &Arc<Store>,
    stored: &StoredSessions,
    live: &LiveSessions,
) -> bool {
    let id = handle.id;
    let resolved = match handle.resolve(KernelFrames::Full).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(session = id, %e, "session not saved");
            return false;
        }
    };
    let running = resolved.session.state() == api::SessionState::Running;
    let saving = store.clone();
    let saved =
        tokio::task::spawn_blocking(move || saving.save(&resolved.session, &resolved.profile))
            .await;
    let what = if running { "checkpoint" } else { "session" };
    match saved {
        Ok(Ok(deleted)) => {
            if running {
                tracing::debug!(session = id, dir = %store.dir().display(), "checkpoint saved");
            } else {
                tracing::info!(session = id, dir = %store.dir().display(), "session saved");
            }
            {
                let mut stored = lock(stored);
                for d in &deleted {
                    stored.remove(d);
                }
            }
            super::retain::forget(live, &deleted).await;
        }
        Ok(Err(e)) => tracing::warn!(session = id, %e, "{what} not saved"),
        Err(e) => tracing::error!(session = id, %e, "saving the {what} panicked"),
    }
    running
}
