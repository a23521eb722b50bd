//! The fair share of the retention limits between session owners: which
//! sessions go when a limit is exceeded (the oldest of the owner most over
//! their share; never one of an owner within their share), the evictions
//! counted by owner, and the figures `Info` and `/metrics` show of it. Used
//! by the state directory and by the sessions kept in memory alike.
use super::Retention;
use profd_common::api;
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

/// Sessions each owner keeps whatever the other owners do.
pub const MIN_SESSIONS_PER_OWNER: usize = 1;

/// Why a session was evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    /// It ended longer ago than the age limit.
    Age,
    /// Its owner was over their share of the session limit.
    Sessions,
    /// Its owner was over their share of the byte limit.
    Bytes,
}

impl Reason {
    /// The label `/metrics` gives it.
    pub fn label(self) -> &'static str {
        match self {
            Reason::Age => "age",
            Reason::Sessions => "sessions",
            Reason::Bytes => "bytes",
        }
    }
}

/// A session kept, as the rule sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Kept {
    pub id: u64,
    pub owner_uid: u32,
    /// When it ended (or any measure of age: smaller is older).
    pub ended_unix_ms: u64,
    pub bytes: u64,
}

/// A session to evict, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Victim {
    pub id: u64,
    pub owner_uid: u32,
    pub reason: Reason,
}

/// Each owner's share of `max_sessions` among `owners`.
pub fn session_share(max_sessions: usize, owners: usize) -> usize {
    (max_sessions / owners.max(1)).max(MIN_SESSIONS_PER_OWNER)
}

/// Each owner's share of `max_bytes` among `owners`.
pub fn byte_share(max_bytes: u64, owners: usize) -> u64 {
    max_bytes / owners.max(1) as u64
}

/// The retention of sessions kept in memory only: a number of sessions, no
/// byte or age limit.
pub fn in_memory(max_sessions: usize) -> Retention {
    Retention {
        max_sessions,
        max_age: Duration::MAX,
        max_bytes: u64::MAX,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One owner's sessions, oldest first, and their bytes.
#[derive(Default)]
struct Queue {
    sessions: VecDeque<Kept>,
    bytes: u64,
}

/// The sessions to evict so that `kept` is within `r` at `now_ms`, in order:
/// those older than the age limit, then, while the count or the bytes are
/// over their limit, the oldest session of the owner most over their share
/// of that limit (ties: the owner with the oldest session). An owner within
/// their share is never chosen, so the limits may stay exceeded when every
/// owner is within it (more owners than `max_sessions`).
pub fn victims(kept: &[Kept], r: &Retention, now_ms: u64) -> Vec<Victim> {
    let mut sorted = kept.to_vec();
    sorted.sort_by_key(|k| (k.ended_unix_ms, k.id));
    let cutoff = now_ms.saturating_sub(millis(r.max_age));
    let mut out = Vec::new();
    let mut owners: BTreeMap<u32, Queue> = BTreeMap::new();
    for k in sorted {
        if k.ended_unix_ms < cutoff {
            out.push(Victim {
                id: k.id,
                owner_uid: k.owner_uid,
                reason: Reason::Age,
            });
        } else {
            let q = owners.entry(k.owner_uid).or_default();
            q.bytes = q.bytes.saturating_add(k.bytes);
            q.sessions.push_back(k);
        }
    }
    let mut count: usize = owners.values().map(|q| q.sessions.len()).sum();
    let mut bytes: u64 = owners.values().map(|q| q.bytes).sum();
    loop {
        let present = owners.values().filter(|q| !q.sessions.is_empty()).count();
        let by_count = (count > r.max_sessions)
            .then(|| {
                let share = session_share(r.max_sessions, present) as u64;
                most_over(&owners, |q| (q.sessions.len() as u64).saturating_sub(share))
            })
            .flatten()
            .map(|uid| (uid, Reason::Sessions));
        let pick = by_count.or_else(|| {
            (bytes > r.max_bytes)
                .then(|| {
                    let share = byte_share(r.max_bytes, present);
                    most_over(&owners, |q| q.bytes.saturating_sub(share))
                })
                .flatten()
                .map(|uid| (uid, Reason::Bytes))
        });
        let Some((uid, reason)) = pick else {
            return out;
        };
        let Some(q) = owners.get_mut(&uid) else {
            return out;
        };
        let Some(k) = q.sessions.pop_front() else {
            return out;
        };
        q.bytes -= k.bytes.min(q.bytes);
        count -= 1;
        bytes -= k.bytes.min(bytes);
        out.push(Victim {
            id: k.id,
            owner_uid: uid,
            reason,
        });
    }
}

/// The owner with the largest positive `excess`; ties go to the one whose
/// oldest session is older.
fn most_over(owners: &BTreeMap<u32, Queue>, excess: impl Fn(&Queue) -> u64) -> Option<u32> {
    owners
        .iter()
        .filter_map(|(&uid, q)| {
            let front = q.sessions.front()?;
            let e = excess(q);
            (e > 0).then_some((e, std::cmp::Reverse((front.ended_unix_ms, front.id)), uid))
        })
        .max()
        .map(|(_, _, uid)| uid)
}

/// One owner's evictions since the daemon started.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evicted {
    pub sessions: u64,
    pub bytes: u64,
    pub age: u64,
}

/// The evictions counted by owner, and the owners' names.
#[derive(Debug, Default)]
pub struct Ledger(Mutex<BTreeMap<u32, (String, Evicted)>>);

impl Ledger {
    /// Count one eviction of a session of `owner_uid` (named `owner`).
    pub fn count(&self, owner_uid: u32, owner: &str, reason: Reason) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (name, e) = m.entry(owner_uid).or_default();
        if name.is_empty() {
            *name = owner.to_string();
        }
        match reason {
            Reason::Age => e.age += 1,
            Reason::Sessions => e.sessions += 1,
            Reason::Bytes => e.bytes += 1,
        }
    }

    /// Every owner counted: name and evictions.
    pub fn snapshot(&self) -> BTreeMap<u32, (String, Evicted)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// One owner's figures: sessions and bytes kept now, evictions so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OwnerFigures {
    pub name: String,
    pub sessions: u64,
    pub bytes: u64,
    pub evicted: Evicted,
}

/// The retention as it stands: the limits, and per owner what is kept and
/// what was evicted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// None: sessions are kept in memory only.
    pub state_dir: Option<PathBuf>,
    pub limits: Retention,
    pub owners: BTreeMap<u32, OwnerFigures>,
}

impl Report {
    /// The report of `kept` sessions (uid, name, bytes) under `limits`,
    /// with the evictions of `ledger`.
    pub fn new(
        state_dir: Option<PathBuf>,
        limits: Retention,
        kept: impl IntoIterator<Item = (u32, String, u64)>,
        ledger: &Ledger,
    ) -> Report {
        let mut owners: BTreeMap<u32, OwnerFigures> = BTreeMap::new();
        for (uid, (name, evicted)) in ledger.snapshot() {
            owners.insert(
                uid,
                OwnerFigures {
                    name,
                    evicted,
                    ..Default::default()
                },
            );
        }
        for (uid, name, bytes) in kept {
            let o = owners.entry(uid).or_default();
            o.name = name;
            o.sessions += 1;
            o.bytes += bytes;
        }
        Report {
            state_dir,
            limits,
            owners,
        }
    }

    /// Owners with sessions kept now.
    pub fn present(&self) -> usize {
        self.owners.values().filter(|o| o.sessions > 0).count()
    }

    pub fn share_sessions(&self) -> u64 {
        session_share(self.limits.max_sessions, self.present()) as u64
    }

    /// Each owner's share of the bytes; 0 without a byte limit.
    pub fn share_bytes(&self) -> u64 {
        match self.limits.max_bytes {
            u64::MAX => 0,
            max => byte_share(max, self.present()),
        }
    }

    /// As the API gives it, with the owners `sees` accepts.
    pub fn to_api(&self, sees: impl Fn(u32) -> bool) -> api::RetentionStatus {
        let l = &self.limits;
        api::RetentionStatus {
            state_dir: self
                .state_dir
                .as_ref()
                .map_or_else(String::new, |d| d.display().to_string()),
            max_sessions: l.max_sessions as u64,
            max_bytes: if l.max_bytes == u64::MAX {
                0
            } else {
                l.max_bytes
            },
            max_age_s: if l.max_age == Duration::MAX {
                0
            } else {
                l.max_age.as_secs()
            },
            min_sessions_per_owner: MIN_SESSIONS_PER_OWNER as u64,
            owners: self.present() as u32,
            share_sessions: self.share_sessions(),
            share_bytes: self.share_bytes(),
            sessions: self.owners.values().map(|o| o.sessions).sum(),
            bytes: self.owners.values().map(|o| o.bytes).sum(),
            by_owner: self
                .owners
                .iter()
                .filter(|(&uid, _)| sees(uid))
                .map(|(&uid, o)| api::OwnerRetention {
                    owner_uid: uid,
                    owner: o.name.clone(),
                    sessions: o.sessions,
                    bytes: o.bytes,
                    evicted_sessions: o.evicted.sessions,
                    evicted_bytes: o.evicted.bytes,
                    expired: o.evicted.age,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
#[path = "share_tests.rs"]
mod tests;
