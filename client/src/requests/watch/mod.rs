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
mod tests {
    use super::*;
    use profd_common::api::Totals;

    fn f(id: u64, name: &str, inclusive: u64, exclusive: u64) -> Function {
        Function {
            id,
            name: name.into(),
            module: if name.is_empty() { "" } else { "work" }.into(),
            inclusive,
            exclusive,
            inclusive_pct: 99.0, // stale on purpose: must be recomputed
            exclusive_pct: 99.0,
            ..Default::default()
        }
    }

    fn update(
        seq: u64,
        attributed: u64,
        state: SessionState,
        functions: Vec<Function>,
        last: bool,
    ) -> WatchResponse {
        WatchResponse {
            seq,
            snapshot: seq == 0,
            session: Some(Session {
                id: 3,
                pid: 1234,
                state: state as i32,
                totals: Some(Totals {
                    attributed,
                    discarded: 1,
                    lost: 0,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            functions,
            r#final: last,
            ..Default::default()
        }
    }

    #[test]
    fn merges_snapshot_and_deltas() {
        let mut w = WatchState::new();
        w.apply(update(
            0,
            10,
            SessionState::Running,
            vec![f(1, "main", 10, 0), f(2, "work", 8, 8)],
            false,
        ))
        .unwrap();
        // Delta: main and work changed (names omitted), new function 3 named.
        w.apply(update(
            1,
            40,
            SessionState::Running,
            vec![f(1, "", 40, 0), f(2, "", 20, 20), f(3, "spin", 18, 18)],
            false,
        ))
        .unwrap();
        // Delta: only spin changed; work is unchanged but its % must move.
        w.apply(update(
            2,
            80,
            SessionState::Exited,
            vec![f(3, "", 58, 58)],
            true,
        ))
        .unwrap();
        assert!(w.is_final());
        assert_eq!(w.state(), SessionState::Exited);
        let p = w.profile();
        let rows: Vec<_> = p
            .functions
            .iter()
            .map(|f| (f.name.as_str(), f.module.as_str(), f.inclusive, f.exclusive))
            .collect();
        assert_eq!(
            rows,
            [
                ("spin", "work", 58, 58),
                ("main", "work", 40, 0),
                ("work", "work", 20, 20),
            ]
        );
        assert_eq!(p.functions[0].inclusive_pct, 72.5);
        assert_eq!(p.functions[2].inclusive_pct, 25.0);
        assert_eq!(p.functions[2].exclusive_pct, 25.0);
        assert_eq!(p.functions[1].exclusive_pct, 0.0);
    }

    #[test]
    fn inlined_mark_is_kept_when_a_delta_omits_it() {
        let mut w = WatchState::new();
        let hot = Function {
            inlined: true,
            ..f(1, "hot", 5, 5)
        };
        w.apply(update(0, 5, SessionState::Running, vec![hot], false))
            .unwrap();
        w.apply(update(
            1,
            9,
            SessionState::Running,
            vec![f(1, "", 9, 9)],
            false,
        ))
        .unwrap();
        let p = w.profile();
        assert!(p.functions[0].inlined);
        assert_eq!(p.functions[0].name, "hot");
    }

    #[test]
    fn window_figures_follow_the_latest_update() {
        let mut w = WatchState::with_window(5);
        let windowed = |id, name: &str, total, win| Function {
            window_inclusive: win,
            window_exclusive: win,
            ..f(id, name, total, total)
        };
        let mut first = update(
            0,
            10,
            SessionState::Running,
            vec![windowed(1, "a", 10, 10)],
            false,
        );
        first.window_attributed = 10;
        w.apply(first).unwrap();
        let mut second = update(
            1,
            30,
            SessionState::Running,
            vec![windowed(1, "", 30, 4)],
            false,
        );
        second.window_attributed = 8;
        w.apply(second).unwrap();
        let p = w.profile();
        assert_eq!(
            p.window,
            Some(Window {
                seconds: 5,
                attributed: 8
            })
        );
        assert_eq!(p.functions[0].window_inclusive, 4);
        assert_eq!(p.functions[0].window_exclusive, 4);
        assert_eq!(WatchState::new().profile().window, None);
    }

    #[test]
    fn snapshot_replaces_everything() {
        let mut w = WatchState::new();
        w.apply(update(
            0,
            5,
            SessionState::Running,
            vec![f(1, "a", 5, 5)],
            false,
        ))
        .unwrap();
        w.apply(update(
            0,
            7,
            SessionState::Running,
            vec![f(2, "b", 7, 7)],
            false,
        ))
        .unwrap();
        let p = w.profile();
        assert_eq!(p.functions.len(), 1);
        assert_eq!(p.functions[0].name, "b");
        assert_eq!(p.functions[0].inclusive_pct, 100.0);
    }

    #[test]
    fn unnamed_new_function_gets_a_placeholder() {
        let mut w = WatchState::new();
        w.apply(update(
            0,
            2,
            SessionState::Running,
            vec![f(9, "", 2, 2)],
            false,
        ))
        .unwrap();
        assert_eq!(w.profile().functions[0].name, "[function #9]");
    }

    #[test]
    fn stream_must_start_with_snapshot_and_end_at_final() {
        let mut w = WatchState::new();
        assert!(w
            .apply(update(1, 0, SessionState::Running, vec![], false))
            .is_err());
        let mut w = WatchState::new();
        w.apply(update(0, 0, SessionState::Stopped, vec![], true))
            .unwrap();
        assert!(w.is_final());
        assert!(w
            .apply(update(1, 0, SessionState::Stopped, vec![], false))
            .is_err());
    }
}
