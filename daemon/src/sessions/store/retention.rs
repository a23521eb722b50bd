//! The state directory's side of the retention limits: the sessions on
//! disk with their owners, age and size, the ones the fair-share rule (see
//! [`super::share`]) deletes, counted by owner, and the report of what is
//! kept.
use super::share::{self, Kept, Ledger, Reason};
use super::{now_unix_ms, record, sync_dir, Kind, Retention, Store};
use profd_common::api;
use std::collections::BTreeMap;
use std::fs;
use std::io;

/// A session on disk, for retention.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Entry {
    pub(super) ended_unix_ms: u64,
    /// Both files.
    pub(super) bytes: u64,
    pub(super) owner_uid: u32,
    pub(super) owner: String,
}

impl Entry {
    pub(super) fn of(session: &api::Session, bytes: u64) -> Entry {
        Entry {
            ended_unix_ms: record::ended_unix_ms(session),
            bytes,
            owner_uid: session.owner_uid,
            owner: session.owner.clone(),
        }
    }
}

/// The sessions to delete so that `entries` are within `r` at `now_ms`
/// (see [`share::victims`]), with the reason.
pub(super) fn victims(
    entries: &BTreeMap<u64, Entry>,
    r: &Retention,
    now_ms: u64,
) -> Vec<(u64, Reason)> {
    let kept: Vec<Kept> = entries
        .iter()
        .map(|(&id, e)| Kept {
            id,
            owner_uid: e.owner_uid,
            ended_unix_ms: e.ended_unix_ms,
            bytes: e.bytes,
        })
        .collect();
    share::victims(&kept, r, now_ms)
        .into_iter()
        .map(|v| (v.id, v.reason))
        .collect()
}

impl Store {
    /// The limits.
    pub fn retention(&self) -> &Retention {
        &self.retention
    }

    /// The evictions counted by owner (this store's, and those of sessions
    /// held in memory because they could not be saved).
    pub fn ledger(&self) -> std::sync::Arc<Ledger> {
        self.ledger.clone()
    }

    /// The sessions kept by owner, and the evictions so far.
    pub fn report(&self) -> share::Report {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        share::Report::new(
            Some(self.dir.clone()),
            self.retention.clone(),
            entries
                .values()
                .map(|e| (e.owner_uid, e.owner.clone(), e.bytes)),
            &self.ledger,
        )
    }

    /// Delete the sessions the limits no longer allow, counting them by
    /// owner; their ids.
    pub(super) fn apply_retention(&self, entries: &mut BTreeMap<u64, Entry>) -> Vec<u64> {
        let gone = victims(entries, &self.retention, now_unix_ms());
        for &(id, reason) in &gone {
            if let Some(e) = entries.remove(&id) {
                self.ledger.count(e.owner_uid, &e.owner, reason);
                self.delete(id, &e, reason);
            }
        }
        gone.into_iter().map(|(id, _)| id).collect()
    }

    /// Delete a session's files (retention): metadata first, so that it is
    /// never half there.
    fn delete(&self, id: u64, entry: &Entry, reason: Reason) {
        for name in [Kind::Session, Kind::Json, Kind::Pprof].map(|k| k.name(id)) {
            let path = self.dir.join(&name);
            if let Err(e) = fs::remove_file(&path) {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(file = %path.display(), %e, "cannot delete an old session's file");
                }
            }
        }
        let _ = sync_dir(&self.dir);
        tracing::info!(
            session = id,
            owner = %entry.owner,
            limit = reason.label(),
            dir = %self.dir.display(),
            "deleted a session (retention limits)"
        );
    }
}
