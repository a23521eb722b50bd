//! A session's (or continuous profiling's) part in asking JVMs for a fresh
//! perf map: now and then, the JVMs among its processes with addresses in
//! JIT code not named yet are handed to `process::jvm`, which asks them
//! off the actor's thread; the map they write is read as any map that
//! changed.
use super::spaces::untag;
use super::Actor;
use crate::process::jvm::{self, Asker, Unnamed};
use crate::process::maps::is_jit_candidate;
use crate::process::symbolize::is_kernel;
use crate::sampling::BAD_USER_FRAME;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often a session looks for unnamed JIT code of JVMs.
const CHECK_EVERY: Duration = Duration::from_millis(500);
/// Addresses of one process looked up in its map at a check, at most (off
/// the actor's thread, each a binary search).
const ADDRS_PER_SPACE: usize = 4096;
/// How long the end of a session waits for its JVMs' answers: one that
/// answers writes its map in milliseconds; one that does not is not waited
/// for (the final profile leaves its new code unnamed).
const END_WAIT: Duration = Duration::from_secs(2);

impl Actor {
    /// The JVMs with addresses in JIT code (new since the last view, or
    /// waiting for their map) that may not be named, with those addresses.
    fn unnamed_jvm_code(&self) -> Vec<Unnamed> {
        let spaces = &self.ingest.spaces;
        // Whether a space runs a JVM, looked at only for the spaces of the
        // addresses met.
        let mut jvms: HashMap<usize, bool> = HashMap::new();
        let mut by_space: HashMap<usize, Vec<u64>> = HashMap::new();
        let addrs = self.ingest.pending.iter().chain(self.unnamed_jit.addrs());
        for &tagged in addrs {
            let (space, addr) = untag(tagged);
            if is_kernel(addr) || addr == BAD_USER_FRAME {
                continue;
            }
            let is_jvm = *jvms
                .entry(space)
                .or_insert_with(|| jvm::is_jvm(spaces.maps(space)));
            if !is_jvm {
                continue;
            }
            let in_jit = spaces
                .maps(space)
                .find(addr)
                .is_none_or(|m| is_jit_candidate(&m.backing));
            if !in_jit {
                continue;
            }
            let found = by_space.entry(space).or_default();
            if found.len() < ADDRS_PER_SPACE {
                found.push(addr);
            }
        }
        by_space
            .into_iter()
            .map(|(space, addrs)| Unnamed {
                maps: spaces.maps(space).clone(),
                addrs,
            })
            .collect()
    }

    fn asker(&self) -> Asker {
        Asker {
            session: self.id.session().unwrap_or(0),
            owner_uid: self.params.owner_uid,
        }
    }

    /// Every [`CHECK_EVERY`], ask the JVMs whose JIT code the session met
    /// unnamed for a fresh map, without waiting.
    pub(super) fn ask_jvms(&mut self) {
        if !jvm::JVMS.on() || self.jvms_checked.is_some_and(|t| t.elapsed() < CHECK_EVERY) {
            return;
        }
        self.jvms_checked = Some(Instant::now());
        let _ = jvm::start_asks(self.unnamed_jvm_code(), self.asker());
    }

    /// As the session ends, ask its JVMs with unnamed JIT code once more
    /// (if their turn is due) and wait for the answers, at most
    /// [`END_WAIT`], so that the final profile names the code compiled
    /// since the last ask.
    pub(super) async fn ask_jvms_at_end(&mut self) {
        if !jvm::JVMS.on() {
            return;
        }
        if let Some(task) = jvm::start_asks(self.unnamed_jvm_code(), self.asker()) {
            let _ = tokio::time::timeout(END_WAIT, task).await;
        }
    }
}
