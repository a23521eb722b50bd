//! Rebuilds a session's profile from a Watch stream: a snapshot, then deltas
//! keyed by function id whose names arrive only once. No I/O, no rendering.
use std::collections::HashMap;

use profd_common::api::{Function, Session, SessionState, WatchResponse};

use crate::error::Error;
use crate::views::ranking::{Profile, Window};

/// The merged state of one Watch stream.
#[derive(Debug, Default)]
pub struct WatchState {
    session: Option<Session>,
    functions: HashMap<u64, Function>,
    updates: u64,
    ended: bool,
    window_s: u32,
    window_attributed: u64,
    /// The `seq` of the last update merged: what to resume after.
    last_seq: u64,
}

impl WatchState {
    /// An empty state, before the snapshot.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty state for a stream asked for a window of `window_s` seconds
    /// (0 = none).
    pub fn with_window(window_s: u32) -> Self {
        WatchState {
            window_s,
            ..Self::default()
        }
    }

    /// The `seq` of the last update merged (0 before any): a new stream
    /// resumes after it.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Merges one update: a snapshot replaces every function; a delta
    /// replaces the counts of the functions it carries and keeps the names
    /// seen before when it omits them.
    pub fn apply(&mut self, update: WatchResponse) -> Result<(), Error> {
        if self.ended {
            return Err(Error::Protocol("an update after the final one".into()));
        }
        if self.updates == 0 && !update.snapshot && !update.resumed {
            return Err(Error::Protocol(
                "the Watch stream did not start with a snapshot".into(),
            ));
        }
        if update.snapshot {
            self.functions.clear();
        }
        self.last_seq = update.seq;
        if let Some(session) = update.session {
            self.session = Some(session);
        }
        for f in update.functions {
            match self.functions.get_mut(&f.id) {
                Some(known) => {
                    known.inclusive = f.inclusive;
                    known.exclusive = f.exclusive;
                    known.window_inclusive = f.window_inclusive;
                    known.window_exclusive = f.window_exclusive;
                    if !f.name.is_empty() {
                        known.name = f.name;
                    }
                    if !f.module.is_empty() {
                        known.module = f.module;
                    }
                    // Like the name, the mark may come only with the first sight.
                    known.inlined |= f.inlined;
                }
                None => {
                    let mut f = f;
                    if f.name.is_empty() {
                        // The daemon should have named it on first sight; keep the row.
                        f.name = format!("[function #{}]", f.id);
                    }
                    self.functions.insert(f.id, f);
                }
            }
        }
        self.window_attributed = update.window_attributed;
        self.updates += 1;
        self.ended = update.r#final;
        Ok(())
    }

    /// Whether the final update has been merged.
    pub fn is_final(&self) -> bool {
        self.ended
    }

    /// The session as of the last update, if any carried one.
    pub fn session(&self) -> Option<&Session> {
        self.session.as_ref()
    }

    /// The session's state as of the last update.
    pub fn state(&self) -> SessionState {
        self.session
            .as_ref()
            .map_or(SessionState::Unspecified, Session::state)
    }

    /// The merged profile: every function seen, sorted, percentages
    /// recomputed over the latest attributed total.
    pub fn profile(&self) -> Profile {
        let window = (self.window_s > 0).then_some(Window {
            seconds: self.window_s,
            attributed: self.window_attributed,
        });
        Profile::new(
            self.session.clone().unwrap_or_default(),
            self.functions.values().cloned().collect(),
        )
        .with_window(window)
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
