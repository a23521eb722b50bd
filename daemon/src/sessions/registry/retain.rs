//! This run's ended sessions kept in memory within the retention limits:
//! those the state directory's retention deletes are forgotten too; a
//! daemon that keeps nothing on disk keeps at most as many ended sessions in
//! memory as the state directory would by default, and one with a state
//! directory at most `--retain-sessions` that could not be saved; both
//! shared fairly between their owners (see [`crate::sessions::store::share`]).
use super::{LiveSessions, Registry};
use crate::sessions::session::Handle;
use crate::sessions::store::share::{self, Kept, Ledger, Report};
use crate::sessions::store::Retention;
use profd_common::api;

/// Forget this run's sessions `ids` that have ended (and were deleted from
/// the state directory): their actors and everything they hold go. A
/// running session's checkpoint deleted by retention leaves it running.
pub(super) async fn forget(live: &LiveSessions, ids: &[u64]) {
    if ids.is_empty() {
        return;
    }
    let mut live = live.lock().await;
    for id in ids {
        if live.get(id).is_some_and(ended) {
            live.remove(id);
        }
    }
}

fn ended(h: &Handle) -> bool {
    *h.state().borrow() != api::SessionState::Running
}

/// Forget the ended sessions `which` selects beyond `keep`, the oldest of
/// the owner most over their share first, counting them in `ledger`.
async fn trim(live: &LiveSessions, ledger: &Ledger, keep: usize, which: impl Fn(&Handle) -> bool) {
    let mut live = live.lock().await;
    // Ids go up with time: they order the sessions by age.
    let kept: Vec<Kept> = live
        .values()
        .filter(|h| ended(h) && which(h))
        .map(|h| Kept {
            id: h.id,
            owner_uid: h.owner_uid,
            ended_unix_ms: h.id,
            bytes: 0,
        })
        .collect();
    for v in share::victims(&kept, &share::in_memory(keep), 0) {
        if let Some(h) = live.remove(&v.id) {
            ledger.count(h.owner_uid, &h.owner, v.reason);
            tracing::info!(
                session = v.id,
                owner = %h.owner,
                keep,
                "forgot an ended session kept in memory (its owner is over their share)"
            );
        }
    }
}

/// With a state directory: forget the ended sessions that could not be
/// saved beyond `keep` (`--retain-sessions`), fairly between their owners.
pub(super) async fn trim_unsaved(live: &LiveSessions, ledger: &Ledger, keep: usize) {
    trim(live, ledger, keep, |h| {
        h.saving.get().state == api::SaveState::NotSaved
    })
    .await;
}

impl Registry {
    /// Without a state directory: once `handle`'s session has ended, forget
    /// ended sessions beyond the default `--retain-sessions`, the oldest of
    /// the owner most over their share first.
    pub(super) fn keep_when_ended(&self, handle: Handle) {
        let live = self.sessions.clone();
        let ledger = self.ledger.clone();
        let keep = Retention::default().max_sessions;
        tokio::spawn(async move {
            let mut state = handle.state();
            drop(handle);
            if state
                .wait_for(|s| *s != api::SessionState::Running)
                .await
                .is_err()
            {
                return;
            }
            trim(&live, &ledger, keep, |_| true).await;
        });
    }

    /// The retention as it stands: the state directory's, or without one
    /// the ended sessions kept in memory.
    pub async fn retention(&self) -> Report {
        if let Some(store) = &self.store {
            return store.report();
        }
        let live = self.sessions.lock().await;
        let kept = live
            .values()
            .filter(|h| ended(h))
            .map(|h| (h.owner_uid, h.owner.to_string(), 0));
        Report::new(
            None,
            share::in_memory(Retention::default().max_sessions),
            kept,
            &self.ledger,
        )
    }
}
