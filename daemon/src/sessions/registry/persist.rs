//! The registry's side of the state directory: sessions are saved there at
//! intervals while they run (checkpoints) and when they end, new sessions'
//! ids are reserved there, and the sessions of earlier daemon runs found
//! there at start are registered under their own ids (new ids continue
//! after them), owned by their recorded owners, listed only on request.
//! Sessions are recorded there as they start; a save that fails leaves the
//! session in memory, marked NOT_SAVED, and is tried again every interval.
use super::{sees, Listing, LiveSessions, Registry, StoredSessions};
use crate::request_error::Error;
use crate::serve::auth::Caller;
use crate::sessions::session::{self, Handle, SaveStatus};
use crate::sessions::store::share::Ledger;
use crate::sessions::store::{Found, Store};
use profd_common::api;
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
        self.ledger = store.ledger();
        self.store = Some(store);
    }

    /// A new session's id, reserved in the state directory first.
    pub(super) async fn new_id(&self) -> Result<u64, Error> {
        let ids = self.ids.clone();
        let taken = tokio::task::spawn_blocking(move || lock(&ids).take())
            .await
            .map_err(|source| Error::Task {
                doing: "reserving a session id",
                source,
            })?;
        Ok(taken?)
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
    /// run's, and with [`Listing::AllRuns`] also those of earlier runs; by id.
    pub async fn listed(&self, caller: &Caller, listing: Listing) -> Vec<Handle> {
        let mut list = self.visible(caller).await;
        if listing == Listing::AllRuns {
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

    /// Record the session in the state directory now (as it starts), save
    /// it every checkpoint interval while it runs and once it has ended. An
    /// end that cannot be written is held in memory (NOT_SAVED) and written
    /// again every interval until it is.
    pub(super) async fn save_when_ended(&self, handle: Handle) {
        let Some(store) = self.store.clone() else {
            handle.saving.set(SaveStatus::memory_only());
            return self.keep_when_ended(handle);
        };
        let saver = Saver {
            store,
            stored: self.stored.clone(),
            live: self.sessions.clone(),
            ledger: self.ledger.clone(),
            shutdown: self.shutdown.subscribe(),
        };
        saver.save(&handle, Record::Start).await;
        let task = tokio::spawn(saver.run(handle));
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

/// What a save writes of a session.
#[derive(Debug, Clone, Copy)]
enum Record {
    /// Its start record.
    Start,
    /// The session as it is now: a checkpoint while it runs, else its end.
    Now,
}

/// What a save task needs.
struct Saver {
    store: Arc<Store>,
    stored: StoredSessions,
    live: LiveSessions,
    ledger: Arc<Ledger>,
    shutdown: tokio::sync::watch::Receiver<bool>,
}

/// How a save went.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Outcome {
    /// Written; `ended`: the session as it ended.
    Saved { ended: bool },
    /// Not written; the session is held in memory.
    Failed { ended: bool },
    /// The session's actor is gone: nothing left to save.
    Gone,
}

impl Saver {
    /// A checkpoint every interval while the session runs; then its end,
    /// again every interval until it is written, or once more at shutdown.
    async fn run(mut self, handle: Handle) {
        let id = handle.id;
        let mut state = handle.state();
        let every = self.store.checkpoint_interval();
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut outcome = loop {
            tokio::select! {
                ended = async {
                    state.wait_for(|s| *s != api::SessionState::Running).await.is_ok()
                } => {
                    if !ended {
                        return; // the actor is gone: nothing left to save
                    }
                    break self.save(&handle, Record::Now).await;
                }
                _ = ticks.tick() => match self.save(&handle, Record::Now).await {
                    Outcome::Saved { ended: false } | Outcome::Failed { ended: false } => {}
                    // Ended meanwhile: saved (or not) as such.
                    done => break done,
                },
            }
        };
        loop {
            match outcome {
                Outcome::Failed { .. } => {}
                Outcome::Saved { .. } | Outcome::Gone => return,
            }
            if *self.shutdown.borrow() {
                tracing::error!(
                    session = id,
                    dir = %self.store.dir().display(),
                    "session not saved before the daemon stopped: its profile is lost"
                );
                return;
            }
            let keep = self.store.retention().max_sessions;
            super::retain::trim_unsaved(&self.live, &self.ledger, keep).await;
            tokio::select! {
                _ = ticks.tick() => {}
                _ = self.shutdown.wait_for(|closing| *closing) => {}
            }
            if !self.live.lock().await.contains_key(&id) {
                return; // evicted from memory (its owner's share of unsaved sessions)
            }
            outcome = self.save(&handle, Record::Now).await;
        }
    }

    /// Save the session as `record` says and set its save status.
    async fn save(&self, handle: &Handle, record: Record) -> Outcome {
        let id = handle.id;
        let _turn = self.store.turn().await;
        let (session, profile) = match handle.encoded().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(session = id, %e, "session not saved");
                return Outcome::Gone;
            }
        };
        let ended = session.state() != api::SessionState::Running;
        let saving = self.store.clone();
        let saved = tokio::task::spawn_blocking(move || match record {
            Record::Start => saving.save_start(&session, profile),
            Record::Now => saving.save(&session, profile),
        })
        .await
        .map_err(|e| format!("saving panicked: {e}"))
        .and_then(|saved| saved.map_err(|e| e.to_string()));
        let what = match (record, ended) {
            (Record::Start, _) => "start record",
            (Record::Now, false) => "checkpoint",
            (Record::Now, true) => "session",
        };
        let dir = self.store.dir().display();
        match saved {
            Ok(deleted) => {
                let status = match deleted.contains(&id) {
                    false => SaveStatus {
                        state: api::SaveState::Saved,
                        error: String::new(),
                        of_end: ended,
                    },
                    true => SaveStatus {
                        state: api::SaveState::NotSaved,
                        error: format!(
                            "written to {dir}, then deleted by the retention limits: its owner \
                             is over their share (see `profctl info`)"
                        ),
                        of_end: ended,
                    },
                };
                handle.saving.set(status);
                match ended {
                    true => tracing::info!(session = id, dir = %dir, "session saved"),
                    false => tracing::debug!(session = id, dir = %dir, "{what} saved"),
                }
                {
                    let mut stored = lock(&self.stored);
                    for d in &deleted {
                        stored.remove(d);
                    }
                }
                super::retain::forget(&self.live, &deleted).await;
                Outcome::Saved { ended }
            }
            Err(e) => {
                tracing::warn!(
                    session = id,
                    %e,
                    retry_every_s = self.store.checkpoint_interval().as_secs(),
                    "{what} not saved: the session is held in memory, written again every \
                     checkpoint interval"
                );
                handle.saving.set(SaveStatus {
                    state: api::SaveState::NotSaved,
                    error: e,
                    of_end: ended,
                });
                Outcome::Failed { ended }
            }
        }
    }
}
