//! This run's ended sessions kept in memory within the retention limits:
//! those the state directory's retention deletes are forgotten too, and a
//! daemon that keeps nothing on disk keeps at most as many ended sessions in
//! memory as the state directory would by default.
use super::{LiveSessions, Registry};
use crate::session::Handle;
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
        if live
            .get(id)
            .is_some_and(|h| *h.state().borrow() != api::SessionState::Running)
        {
            live.remove(id);
        }
    }
}

impl Registry {
    /// Without a state directory: once `handle`'s session has ended, forget
    /// the oldest ended sessions beyond the default `--retain-sessions`.
    pub(super) fn keep_when_ended(&self, handle: Handle) {
        let live = self.sessions.clone();
        let keep = crate::store::Retention::default().max_sessions;
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
            let mut live = live.lock().await;
            let ended: Vec<u64> = live
                .iter()
                .filter(|(_, h)| *h.state().borrow() != api::SessionState::Running)
                .map(|(&id, _)| id)
                .collect();
            for id in &ended[..ended.len().saturating_sub(keep)] {
                live.remove(id);
            }
        });
    }
}
