//! Whether a session is written to the state directory, as its handle
//! reports it: set by the registry's saves, stamped on every summary the
//! handle gives, and waited for by readers of an ended session whose end is
//! being written.
use profd_common::api;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How long a reader of an ended session waits for its end to be written
/// before answering with SAVE_STATE_PENDING.
pub const SAVE_WAIT: Duration = Duration::from_secs(30);

/// The outcome of a session's last save.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SaveStatus {
    /// SAVED or NOT_SAVED after a save, MEMORY_ONLY without a state
    /// directory; UNSPECIFIED before any.
    pub state: api::SaveState,
    /// Why the last save failed.
    pub error: String,
    /// The last save was of the session as it ended (not a checkpoint).
    pub of_end: bool,
}

impl SaveStatus {
    /// Kept in memory only: nothing to wait for.
    pub fn memory_only() -> SaveStatus {
        SaveStatus {
            state: api::SaveState::MemoryOnly,
            error: String::new(),
            of_end: true,
        }
    }

    /// Whether readers of `session` have nothing to wait for: it runs, its
    /// end was written (or failed to be), or nothing is written at all.
    fn settled(&self, ended: bool) -> bool {
        !ended
            || self.of_end
            || matches!(
                self.state,
                api::SaveState::MemoryOnly | api::SaveState::Unspecified
            )
    }
}

/// A session's save status, shared by its handles.
#[derive(Debug, Clone)]
pub struct Saving(Arc<watch::Sender<SaveStatus>>);

impl Default for Saving {
    fn default() -> Saving {
        Saving(Arc::new(watch::channel(SaveStatus::default()).0))
    }
}

impl Saving {
    /// A status that is already `status`.
    pub fn with(status: SaveStatus) -> Saving {
        Saving(Arc::new(watch::channel(status).0))
    }

    pub fn set(&self, status: SaveStatus) {
        self.0.send_replace(status);
    }

    pub fn get(&self) -> SaveStatus {
        self.0.borrow().clone()
    }

    /// Stamp the status on `s`: an ended session whose end is not written
    /// yet is PENDING.
    pub fn stamp(&self, s: &mut api::Session) {
        let status = self.0.borrow();
        let ended = s.state != api::SessionState::Running as i32;
        let state = match status.settled(ended) {
            true => status.state,
            false => api::SaveState::Pending,
        };
        s.save_state = state as i32;
        s.save_error = match state {
            api::SaveState::NotSaved => status.error.clone(),
            _ => String::new(),
        };
    }

    /// Wait (at most [`SAVE_WAIT`]) until an ended session's end is
    /// written or has failed to be, then stamp `s`.
    pub async fn settle(&self, s: &mut api::Session) {
        let ended = s.state != api::SessionState::Running as i32;
        let mut rx = self.0.subscribe();
        let _ = tokio::time::timeout(SAVE_WAIT, rx.wait_for(|st| st.settled(ended))).await;
        self.stamp(s);
    }
}
