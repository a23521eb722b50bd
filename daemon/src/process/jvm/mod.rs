//! Asking JVMs for a fresh perf map (`jcmd PID Compiler.perfmap`, without
//! jcmd) when their JIT code is met unnamed: the daemon-wide settings
//! (`jit.ask_jvm`, `jit.ask_interval`), at most one ask per JVM an
//! interval, off the caller's thread, and what was asked and answered for
//! `info` and the metrics. Whether a JVM may be asked is `attachable`'s;
//! the attach itself is `attach`'s; reading the map written is the perf
//! map code's, as for any map that changed.
pub mod attach;
pub mod attachable;

use crate::process::maps::{ProcessMaps, Target};
use attachable::Attachable;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The interval between two asks of one JVM unless `jit.ask_interval` says.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);
/// Answers kept for `info`: the latest per session and JVM, this many.
const KEPT: usize = 64;

/// How an ask ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The JVM wrote its map.
    Ok,
    /// The JVM answered with an error, or took no request from profd.
    Refused,
    /// Its attach mechanism is off: it was not signalled.
    AttachDisabled,
    /// Whether its attach mechanism is on is not known: not asked.
    Unsure,
    /// It did not answer in time.
    Timeout,
    /// Something else failed.
    Error,
}

impl Outcome {
    pub const ALL: [Outcome; 6] = [
        Outcome::Ok,
        Outcome::Refused,
        Outcome::AttachDisabled,
        Outcome::Unsure,
        Outcome::Timeout,
        Outcome::Error,
    ];

    /// The metrics' label and `info`'s word.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Refused => "refused",
            Outcome::AttachDisabled => "attach_disabled",
            Outcome::Unsure => "unsure",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
        }
    }
}

/// The latest ask of one JVM for one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// The session (0: continuous profiling), its owner, and the JVM.
    pub session: u64,
    pub owner_uid: u32,
    pub pid: u32,
    pub at_unix_ms: u64,
    pub outcome: Outcome,
    /// What the JVM said, or why it was not asked.
    pub detail: String,
    /// Asks of this JVM for this session so far.
    pub asks: u64,
}

/// Who asks, for the record.
#[derive(Debug, Clone, Copy)]
pub struct Asker {
    pub session: u64,
    pub owner_uid: u32,
}

/// The daemon's JVM asks.
pub struct Jvms {
    on: AtomicBool,
    interval_ms: AtomicU64,
    /// When each JVM (by pid) was last asked, or is being asked.
    last: Mutex<HashMap<u32, Instant>>,
    recent: Mutex<VecDeque<Asked>>,
    counts: [AtomicU64; 6],
}

/// The daemon's JVM asks.
pub static JVMS: LazyLock<Jvms> = LazyLock::new(Jvms::new);

/// Whether `maps` are a HotSpot JVM's: `libjvm.so` is mapped, and no
/// OpenJ9 library (OpenJ9 ships a `libjvm.so` too, but attaches otherwise,
/// and writes a dump at SIGQUIT).
pub fn is_jvm(maps: &ProcessMaps) -> bool {
    let mut libjvm = false;
    for m in maps.iter() {
        let crate::process::maps::Backing::File(path) = &m.backing else {
            continue;
        };
        let name = path.file_name().unwrap_or_default();
        if name.as_encoded_bytes().starts_with(b"libj9") {
            return false;
        }
        libjvm |= name == "libjvm.so";
    }
    libjvm
}

impl Jvms {
    fn new() -> Jvms {
        Jvms {
            on: AtomicBool::new(true),
            interval_ms: AtomicU64::new(DEFAULT_INTERVAL.as_millis() as u64),
            last: Mutex::default(),
            recent: Mutex::default(),
            counts: Default::default(),
        }
    }

    /// Apply the settings (`jit.ask_jvm`, `jit.ask_interval`).
    pub fn set(&self, on: bool, interval: Duration) {
        self.on.store(on, Ordering::Relaxed);
        self.interval_ms
            .store(interval.as_millis() as u64, Ordering::Relaxed);
    }

    /// Whether JVMs are asked at all.
    pub fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// The least time between two asks of one JVM.
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms.load(Ordering::Relaxed))
    }

    /// Asks so far, per outcome (in [`Outcome::ALL`]'s order).
    pub fn counts(&self) -> [(Outcome, u64); 6] {
        Outcome::ALL.map(|o| (o, self.counts[o as usize].load(Ordering::Relaxed)))
    }

    /// The latest asks, newest first, that `may_see` lets through (by the
    /// session's owner).
    pub fn recent(&self, may_see: impl Fn(u32) -> bool) -> Vec<Asked> {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent
            .iter()
            .rev()
            .filter(|a| may_see(a.owner_uid))
            .cloned()
            .collect()
    }

    /// Take the JVM `pid`'s turn if it is due (none within the interval);
    /// false when it is not.
    fn take_turn(&self, pid: u32) -> bool {
        let interval = self.interval();
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if last
            .get(&pid)
            .is_some_and(|t| now.duration_since(*t) < interval)
        {
            return false;
        }
        last.retain(|_, t| now.duration_since(*t) < interval * 8);
        last.insert(pid, now);
        true
    }

    fn record(&self, by: Asker, pid: u32, outcome: Outcome, detail: String) {
        self.counts[outcome as usize].fetch_add(1, Ordering::Relaxed);
        match outcome {
            Outcome::Ok => tracing::debug!(pid, "a JVM wrote its perf map"),
            _ => {
                tracing::info!(pid, result = outcome.label(), %detail, "a JVM was not asked for its perf map, or did not write it")
            }
        }
        let at_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        let asks = match recent
            .iter()
            .position(|a| a.session == by.session && a.pid == pid)
        {
            Some(i) => recent.remove(i).map_or(0, |a| a.asks),
            None => 0,
        };
        if recent.len() >= KEPT {
            recent.pop_front();
        }
        recent.push_back(Asked {
            session: by.session,
            owner_uid: by.owner_uid,
            pid,
            at_unix_ms,
            outcome,
            detail,
            asks: asks + 1,
        });
    }

    /// Ask the JVM `target` for its perf map if asking is on and its turn
    /// is due, and record the answer. Blocks (see [`attach::jcmd`]): for a
    /// blocking thread.
    pub fn ask(&self, target: &Target, by: Asker) {
        // A JVM that has exited is not asked (nor counted).
        let alive = std::fs::metadata(target.proc_path("status")).is_ok();
        if !self.on() || !alive || !self.take_turn(target.pid) {
            return;
        }
        let (outcome, detail) = ask_now(target);
        self.record(by, target.pid, outcome, detail);
    }
}

/// Ask the JVM `target` for its perf map now.
fn ask_now(target: &Target) -> (Outcome, String) {
    let may_signal = match attachable::of(target) {
        Attachable::Yes => true,
        Attachable::SocketOnly => false,
        Attachable::No(why) => return (Outcome::AttachDisabled, why),
        Attachable::Unsure(why) => return (Outcome::Unsure, why),
    };
    let Some(creds) = attachable::credentials(target) else {
        return (Outcome::Error, "its credentials cannot be read".into());
    };
    // As jcmd run by the JVM's user: its trigger file, its signal and its
    // socket (mode 0600) are that user's. A JVM of profd's own user is asked
    // as profd is.
    let ask = || attach::jcmd(target, creds, may_signal, "Compiler.perfmap");
    let answer = match creds.0 == rustix::process::geteuid().as_raw() {
        true => ask(),
        false => crate::os::as_user(creds.0, creds.1, ask).unwrap_or_else(|e| {
            Err(attach::AttachError::Failed(format!(
                "taking the JVM's user (uid {}): {e} (profd needs CAP_SETUID and CAP_SETGID)",
                creds.0
            )))
        }),
    };
    match answer {
        Ok((0, _)) => (Outcome::Ok, String::new()),
        Ok((code, output)) => (Outcome::Refused, format!("return code {code}: {output}")),
        Err(attach::AttachError::Timeout(why)) => (Outcome::Timeout, why),
        Err(e @ attach::AttachError::Closed) => (Outcome::Refused, e.to_string()),
        Err(attach::AttachError::NotSignalled(why)) => (Outcome::Unsure, why),
        Err(attach::AttachError::Failed(why)) => (Outcome::Error, why),
    }
}

/// The addresses (plain, of one process) in JIT code that a session met,
/// with the process's maps: asks the JVM if its perf map names some not.
pub struct Unnamed {
    pub maps: ProcessMaps,
    pub addrs: Vec<u64>,
}

/// Ask, on a blocking thread, each JVM whose perf map does not name some
/// of its addresses (`spaces`); the task, to wait for if wanted (an ask
/// takes at most about twice [`attach::WAIT`]). None without a tokio
/// runtime, with asking off, or with nothing to ask.
pub fn start_asks(spaces: Vec<Unnamed>, by: Asker) -> Option<tokio::task::JoinHandle<()>> {
    if spaces.is_empty() || !JVMS.on() {
        return None;
    }
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    Some(runtime.spawn_blocking(move || {
        for space in spaces {
            let Some(target) = space.maps.target().cloned() else {
                continue;
            };
            let table = space.maps.perf_map();
            let named = |a: &u64| table.as_ref().is_some_and(|t| t.lookup(*a).is_some());
            if !space.addrs.iter().all(named) {
                JVMS.ask(&target, by);
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::maps::{Backing, Mapping};

    fn maps_of(files: &[&str]) -> ProcessMaps {
        let mut maps = ProcessMaps::default();
        for (i, file) in files.iter().enumerate() {
            let start = 0x10000 * (i as u64 + 1);
            let backing = Backing::File(std::sync::Arc::new(file.into()));
            maps.insert(Mapping::new(start, start + 0x1000, 0, backing));
        }
        maps
    }

    #[test]
    fn hotspot_is_told_by_its_library_and_openj9_is_not_hotspot() {
        let hotspot = ["/usr/bin/java", "/usr/lib/jvm/17/lib/server/libjvm.so"];
        assert!(is_jvm(&maps_of(&hotspot)));
        let openj9 = [
            "/opt/j9/lib/server/libjvm.so",
            "/opt/j9/lib/default/libj9vm29.so",
        ];
        assert!(!is_jvm(&maps_of(&openj9)));
        assert!(!is_jvm(&maps_of(&["/usr/bin/node", "/lib/libjvm.so.1"])));
    }

    #[test]
    fn a_jvm_is_asked_once_an_interval() {
        let jvms = Jvms::new();
        jvms.set(true, Duration::from_millis(200));
        assert!(jvms.take_turn(10));
        assert!(!jvms.take_turn(10), "again within the interval");
        assert!(jvms.take_turn(11), "another JVM has its own turn");
        std::thread::sleep(Duration::from_millis(250));
        assert!(jvms.take_turn(10), "due again");
    }

    #[test]
    fn the_latest_answer_per_session_and_jvm_is_kept_and_counted() {
        let jvms = Jvms::new();
        let (alice, root) = (
            Asker {
                session: 1,
                owner_uid: 1000,
            },
            Asker {
                session: 0,
                owner_uid: 0,
            },
        );
        jvms.record(alice, 7, Outcome::Timeout, "slow".into());
        jvms.record(root, 7, Outcome::Ok, String::new());
        jvms.record(alice, 7, Outcome::Ok, String::new());
        let all = jvms.recent(|_| true);
        assert_eq!(all.len(), 2);
        assert_eq!(
            (all[0].session, all[0].outcome, all[0].asks),
            (1, Outcome::Ok, 2)
        );
        assert_eq!((all[1].session, all[1].asks), (0, 1));
        let hers = jvms.recent(|uid| uid == 1000);
        assert_eq!(hers.len(), 1);
        assert_eq!(hers[0].session, 1);
        let counts = jvms.counts();
        assert_eq!(counts[Outcome::Ok as usize], (Outcome::Ok, 2));
        assert_eq!(counts[Outcome::Timeout as usize], (Outcome::Timeout, 1));
        for pid in 0..(KEPT as u32 + 10) {
            jvms.record(root, 100 + pid, Outcome::Error, String::new());
        }
        assert_eq!(jvms.recent(|_| true).len(), KEPT, "bounded");
    }
}
