//! What every task of the soak shares: the deadlines and latency bounds,
//! reproducible random choices, the failed checks and notes, the counters,
//! the pool of connections with a unary call that records failures and
//! latencies and checks its bound, and the check that a profile adds up.
use profd_common::api::{self, profiler_client::ProfilerClient, SessionState};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// Longest a unary RPC or the opening of a Watch stream may take.
pub const RPC_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a Watch stream may go without a message, beyond its interval,
/// before its watcher gives up on it.
pub const STALL: Duration = Duration::from_secs(20);
/// Longest a Watch update may come after the one before it, beyond the
/// stream's interval (slow readers aside). Eight 45 s runs of the dev
/// build on a 2-CPU machine with other builds running (load average 9 to
/// 31) measured at most 0.83 s (0.27 s to 0.83 s a run, often a final
/// update): the bound is more than three times that. What it catches: a
/// session whose actor stalls for seconds, as a look-up of a gone
/// process's /proc entries does while its exit tears them down (6 s and
/// more), holds up every update of every watcher of that session; a stall
/// longer than the bound and the stream's interval (at most 1 s) fails
/// here, where [`STALL`] alone would let 20 s pass.
pub const LATE_BOUND: Duration = Duration::from_secs(3);
/// Longest a unary call may take to be answered, and a Watch stream to
/// bring its first update. The same eight runs measured at most 0.88 s (a
/// Stop; 0.28 s to 0.88 s a run): the bound is more than three times that.
/// A call that waits on a stalled session (its Stop, its profile,
/// ListSessions, which asks every session) fails here, where
/// [`RPC_TIMEOUT`] alone would let 30 s pass.
pub const CALL_BOUND: Duration = Duration::from_secs(3);
/// How long slow watchers sleep between reads while the churn runs.
pub const SLOW_PAUSE: Duration = Duration::from_secs(5);
/// Shared connections for control RPCs and most watchers.
pub const POOL: usize = 8;

// ---------------------------------------------------------------- helpers

/// xorshift64*: reproducible choices from `--seed` without another crate.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    pub fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
    pub fn index(&mut self, len: usize) -> Option<usize> {
        (len > 0).then(|| self.below(len as u64) as usize)
    }
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next())
    }
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn state_name(state: i32) -> &'static str {
    SessionState::try_from(state)
        .map(|s| s.as_str_name())
        .unwrap_or("SESSION_STATE_?")
}

/// A child process killed (SIGKILL) and reaped when dropped.
pub struct Reaped(pub Child);

impl Reaped {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Failed checks (or, for notes, facts worth reporting) by kind: a count and
/// the first few details.
#[derive(Default)]
pub struct Findings(pub BTreeMap<String, (u64, Vec<String>)>);

impl Findings {
    pub fn add(&mut self, kind: &str, detail: String) {
        let e = self.0.entry(kind.to_string()).or_default();
        e.0 += 1;
        if e.1.len() < 5 {
            e.1.push(detail);
        }
    }
    pub fn total(&self) -> u64 {
        self.0.values().map(|e| e.0).sum()
    }
    pub fn print(&self, title: &str) {
        for (kind, (n, details)) in &self.0 {
            println!("{title}: {kind} (×{n})");
            for d in details {
                println!("    {d}");
            }
        }
    }
}

#[derive(Default)]
pub struct Stats {
    pub workloads_started: AtomicU64,
    pub workloads_killed: AtomicU64,
    pub attached: AtomicU64,
    pub attached_shared: AtomicU64,
    pub stopped: AtomicU64,
    pub streams_opened: AtomicU64,
    pub streams_final: AtomicU64,
    pub streams_dropped: AtomicU64,
    pub streams_aborted: AtomicU64,
    pub resumes_asked: AtomicU64,
    pub resumes_honored: AtomicU64,
    pub resumes_snapshot: AtomicU64,
    pub resumes_refused: AtomicU64,
    pub messages: AtomicU64,
    pub rows: AtomicU64,
    pub profile_checks: AtomicU64,
    pub folded_checks: AtomicU64,
    pub repeated_failures: AtomicU64,
    pub snapshots: AtomicU64,
    pub snapshot_rows: AtomicU64,
    pub resumed_rows: AtomicU64,
}

/// The longest of some delays, and what it was.
#[derive(Default, Clone)]
pub struct Worst {
    pub by: Duration,
    pub what: String,
}

impl Worst {
    pub fn see(&mut self, by: Duration, what: impl FnOnce() -> String) {
        if by > self.by {
            *self = Worst { by, what: what() };
        }
    }
}

pub fn bump(c: &AtomicU64) {
    c.fetch_add(1, Relaxed);
}

/// What every task shares.
pub struct Ctx {
    pub socket: PathBuf,
    pub pool: Vec<ProfilerClient<Channel>>,
    pub next: AtomicU64,
    pub stats: Stats,
    pub failures: Mutex<Findings>,
    pub notes: Mutex<Findings>,
    pub draining: tokio::sync::watch::Sender<bool>,
    /// The session of every final update a watcher received, by session id.
    pub finals: Mutex<HashMap<u64, Vec<api::Session>>>,
    /// Unary RPC latencies in ms.
    pub latencies: Mutex<Vec<u32>>,
    /// The latest Watch update, beyond its interval.
    pub latest_update: Mutex<Worst>,
    /// The slowest answer: a unary call, or a Watch stream's first update.
    pub slowest_call: Mutex<Worst>,
}

impl Ctx {
    pub fn client(&self) -> ProfilerClient<Channel> {
        let i = self.next.fetch_add(1, Relaxed) as usize % self.pool.len();
        self.pool[i].clone()
    }
    pub fn fail(&self, kind: &str, detail: String) {
        self.failures.lock().unwrap().add(kind, detail);
    }
    pub fn note(&self, kind: &str, detail: String) {
        self.notes.lock().unwrap().add(kind, detail);
    }
    /// A Watch update `late` beyond its stream's interval, described by
    /// `what`: a failed check over [`LATE_BOUND`].
    pub fn update_late(&self, late: Duration, what: impl Fn() -> String) {
        self.latest_update.lock().unwrap().see(late, &what);
        if late > LATE_BOUND {
            self.fail(
                "watch update later than the bound",
                format!(
                    "{}: {} ms beyond its interval (bound {} ms)",
                    what(),
                    late.as_millis(),
                    LATE_BOUND.as_millis()
                ),
            );
        }
    }
    /// An answer of `rpc` (about `about`) that took `took`: a failed check
    /// over [`CALL_BOUND`].
    pub fn answered(&self, rpc: &str, about: &str, took: Duration) {
        let what = || format!("{rpc} ({about})");
        self.slowest_call.lock().unwrap().see(took, what);
        if took > CALL_BOUND {
            self.fail(
                &format!("{rpc} slower than the bound"),
                format!(
                    "{about}: answered in {} ms (bound {} ms)",
                    took.as_millis(),
                    CALL_BOUND.as_millis()
                ),
            );
        }
    }
    /// A unary RPC with a deadline; errors and answers over [`CALL_BOUND`]
    /// are failed checks.
    pub async fn call<T>(
        &self,
        rpc: &str,
        about: &str,
        fut: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Option<T> {
        let t = Instant::now();
        let r = tokio::time::timeout(RPC_TIMEOUT, fut).await;
        let took = t.elapsed();
        self.latencies.lock().unwrap().push(took.as_millis() as u32);
        if r.is_ok() {
            self.answered(rpc, about, took);
        }
        match r {
            Ok(Ok(resp)) => Some(resp.into_inner()),
            Ok(Err(s)) => {
                self.fail(
                    &format!("{rpc} error {:?}", s.code()),
                    format!("{about}: {}", s.message()),
                );
                None
            }
            Err(_) => {
                self.fail(
                    &format!("{rpc} timeout"),
                    format!("{about}: no answer in {RPC_TIMEOUT:?}"),
                );
                None
            }
        }
    }
}

pub async fn connect(socket: &Path) -> Result<ProfilerClient<Channel>, tonic::transport::Error> {
    let channel = profctl::requests::connect::unix_channel(socket, None).await?;
    Ok(ProfilerClient::new(channel))
}

/// A profile's exactness: the exclusive counts add up to the attributed
/// samples, and so do the per-process samples when the daemon gives them.
pub fn check_profile(ctx: &Ctx, what: &str, p: &api::GetProfileResponse) {
    let Some(s) = &p.session else {
        ctx.fail(&format!("{what} without a session"), String::new());
        return;
    };
    let t = s.totals.unwrap_or_default();
    let excl: u64 = p.functions.iter().map(|f| f.exclusive).sum();
    if excl != t.attributed {
        ctx.fail(
            &format!("{what}: sum of exclusive != attributed"),
            format!(
                "session {} ({}): exclusive sum {excl}, attributed {}",
                s.id,
                state_name(s.state),
                t.attributed
            ),
        );
    }
    if !s.processes.is_empty() {
        let per_process: u64 = s.processes.iter().map(|p| p.samples).sum();
        if per_process != t.attributed {
            ctx.fail(
                &format!("{what}: sum of per-process samples != attributed"),
                format!(
                    "session {}: processes {per_process}, attributed {}",
                    s.id, t.attributed
                ),
            );
        }
    }
    bump(&ctx.stats.profile_checks);
}
