//! The registry's side of the state directory: sessions are saved there when
//! they end, and the sessions of earlier daemon runs found there at start are
//! registered under their own ids (new ids continue after them), owned by
//! their recorded owners, listed only on request.
use super::Registry;
use crate::session::{self, Handle};
use crate::store::{Found, Store};
use profd_common::api;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::auth::Caller;

/// The sessions of earlier runs, by id; shared with the saving tasks, which
/// drop the ones the retention limits delete.
pub(super) type StoredSessions = Arc<Mutex<BTreeMap<u64, Handle>>>;

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
            stored.insert(id, session::open_stored(store.clone(), s));
        }
        drop(stored);
        let next = (found.max_id + 1).max(*self.next_id.get_mut());
        self.next_id = AtomicU64::new(next);
        self.store = Some(store);
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
                    .filter(|h| caller.is_root() || h.owner_uid == caller.uid())
                    .cloned(),
            );
            list.sort_by_key(|h| h.id);
        }
        list
    }

    /// Save the session to the state directory once it has ended.
    pub(super) fn save_when_ended(&self, handle: Handle) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let stored = self.stored.clone();
        let task = tokio::spawn(async move {
            let id = handle.id;
            let mut state = handle.state();
            if state
                .wait_for(|s| *s != api::SessionState::Running)
                .await
                .is_err()
            {
                return; // the actor is gone: nothing left to save
            }
            let resolved = match handle.resolve().await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(session = id, %e, "session not saved");
                    return;
                }
            };
            let saving = store.clone();
            let saved = tokio::task::spawn_blocking(move || {
                saving.save(&resolved.session, &resolved.profile)
            })
            .await;
            match saved {
                Ok(Ok(deleted)) => {
                    tracing::info!(session = id, dir = %store.dir().display(), "session saved");
                    let mut stored = lock(&stored);
                    for d in deleted {
                        stored.remove(&d);
                    }
                }
                Ok(Err(e)) => tracing::warn!(session = id, %e, "session not saved"),
                Err(e) => tracing::error!(session = id, %e, "saving the session panicked"),
            }
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

    /// Sessions of earlier runs currently registered.
    pub fn stored_count(&self) -> usize {
        lock(&self.stored).len()
    }

    /// Ids are handed out from here (for tests and logs).
    pub fn next_id(&self) -> u64 {
        self.next_id.load(Ordering::Relaxed)
    }
}
