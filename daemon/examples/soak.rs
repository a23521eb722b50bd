//! Soak test of a real `profd` (run as root):
//!
//! ```sh
//! cargo build --release -p profd
//! cargo run --release -p profd --example soak -- --seconds 60
//! ```
//!
//! Starts its own `profd` on a temporary socket (log, and `--state-dir` when
//! the daemon has it, else `--no-persist`, in the same directory),
//! compiles and starts small busy C workloads (niced; they fork children and
//! re-exec themselves now and then), keeps `--sessions` sessions running on
//! them with `--watchers` Watch streams each (100-1000 ms, some windowed, a
//! few slow readers), and churns for `--seconds`: stops sessions, attaches
//! new ones (on new and on already profiled processes), kills workloads with
//! SIGKILL so their sessions end `exited`, drops watchers abruptly, lets some
//! drop and resume with `resume_after_seq`. It samples the daemon's RSS every
//! second. Then it stops everything and checks: no RPC errors, every Watch
//! message adds up (exclusive counts = attributed, window counts = window
//! attributed), every watcher got `final` as its last message with an ended
//! state, every session ended as its history says and its profile adds up,
//! the daemon-wide totals agree, the rings are closed, RSS stayed bounded,
//! the resource bounds hold (`soak/bounds.rs`, in the run's last seconds),
//! calls and updates kept their latency bound while a user held and reopened
//! connections (`soak/hogs.rs`, mid-churn) and the daemon stops cleanly on
//! SIGTERM. Prints the figures; exits 1 on any failed check.
use anyhow::{bail, Context as _};
use clap::Parser;
use profd_common::api::{self, profiler_client::ProfilerClient, SessionState};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::signal::unix::{signal, SignalKind};
use tokio::task::JoinHandle;
use tonic::transport::Channel;

#[path = "soak/bounds.rs"]
mod bounds;
#[path = "soak/hogs.rs"]
mod hogs;

/// Churn against a real profd: many sessions and watchers, then exactness checks.
#[derive(Debug, Parser)]
#[command(name = "soak")]
struct Args {
    /// How long to churn, in seconds.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// The profd binary (default: `profd` in this example's target directory).
    #[arg(long, value_name = "PATH")]
    profd: Option<PathBuf>,
    /// Sessions kept running at once.
    #[arg(long, default_value_t = 24)]
    sessions: usize,
    /// Watch streams kept open on each running session.
    #[arg(long, default_value_t = 10)]
    watchers: usize,
    /// Fail when the daemon's RSS at the end exceeds this many MiB.
    #[arg(long, default_value_t = 256)]
    max_rss_mib: u64,
    /// Seed of the random choices (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Keep the temporary directory (socket, daemon log, workload) even on success.
    #[arg(long)]
    keep: bool,
}

/// Longest a unary RPC or the opening of a Watch stream may take.
const RPC_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a Watch stream may go without a message, beyond its interval.
const STALL: Duration = Duration::from_secs(20);
/// How long slow watchers sleep between reads while the churn runs.
const SLOW_PAUSE: Duration = Duration::from_secs(5);
/// Shared connections for control RPCs and most watchers.
const POOL: usize = 8;

// ---------------------------------------------------------------- helpers

/// xorshift64*: reproducible choices from `--seed` without another crate.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
    fn index(&mut self, len: usize) -> Option<usize> {
        (len > 0).then(|| self.below(len as u64) as usize)
    }
    fn fork(&mut self) -> Rng {
        Rng::new(self.next())
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn state_name(state: i32) -> &'static str {
    SessionState::try_from(state)
        .map(|s| s.as_str_name())
        .unwrap_or("SESSION_STATE_?")
}

/// A child process killed (SIGKILL) and reaped when dropped.
struct Reaped(Child);

impl Reaped {
    fn pid(&self) -> u32 {
        self.0.id()
    }
    fn kill(&mut self) {
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
struct Findings(BTreeMap<String, (u64, Vec<String>)>);

impl Findings {
    fn add(&mut self, kind: &str, detail: String) {
        let e = self.0.entry(kind.to_string()).or_default();
        e.0 += 1;
        if e.1.len() < 5 {
            e.1.push(detail);
        }
    }
    fn total(&self) -> u64 {
        self.0.values().map(|e| e.0).sum()
    }
    fn print(&self, title: &str) {
        for (kind, (n, details)) in &self.0 {
            println!("{title}: {kind} (×{n})");
            for d in details {
                println!("    {d}");
            }
        }
    }
}

#[derive(Default)]
struct Stats {
    workloads_started: AtomicU64,
    workloads_killed: AtomicU64,
    attached: AtomicU64,
    attached_shared: AtomicU64,
    stopped: AtomicU64,
    streams_opened: AtomicU64,
    streams_final: AtomicU64,
    streams_dropped: AtomicU64,
    streams_aborted: AtomicU64,
    resumes_asked: AtomicU64,
    resumes_honored: AtomicU64,
    resumes_snapshot: AtomicU64,
    resumes_refused: AtomicU64,
    messages: AtomicU64,
    rows: AtomicU64,
    profile_checks: AtomicU64,
    folded_checks: AtomicU64,
    max_lateness_ms: AtomicU64,
    repeated_failures: AtomicU64,
    snapshots: AtomicU64,
    snapshot_rows: AtomicU64,
    resumed_rows: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Relaxed);
}

/// What every task shares.
struct Ctx {
    socket: PathBuf,
    pool: Vec<ProfilerClient<Channel>>,
    next: AtomicU64,
    stats: Stats,
    failures: Mutex<Findings>,
    notes: Mutex<Findings>,
    draining: tokio::sync::watch::Sender<bool>,
    /// The session of every final update a watcher received, by session id.
    finals: Mutex<HashMap<u64, Vec<api::Session>>>,
    /// Unary RPC latencies in ms.
    latencies: Mutex<Vec<u32>>,
}

impl Ctx {
    fn client(&self) -> ProfilerClient<Channel> {
        let i = self.next.fetch_add(1, Relaxed) as usize % self.pool.len();
        self.pool[i].clone()
    }
    fn fail(&self, kind: &str, detail: String) {
        self.failures.lock().unwrap().add(kind, detail);
    }
    fn note(&self, kind: &str, detail: String) {
        self.notes.lock().unwrap().add(kind, detail);
    }
    /// A unary RPC with a deadline; errors are failed checks.
    async fn call<T>(
        &self,
        rpc: &str,
        about: &str,
        fut: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Option<T> {
        let t = Instant::now();
        let r = tokio::time::timeout(RPC_TIMEOUT, fut).await;
        self.latencies
            .lock()
            .unwrap()
            .push(t.elapsed().as_millis() as u32);
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

async fn connect(socket: &Path) -> Result<ProfilerClient<Channel>, tonic::transport::Error> {
    let channel = profctl::connect::unix_channel(socket, None).await?;
    Ok(ProfilerClient::new(channel))
}

/// A profile's exactness: the exclusive counts add up to the attributed
/// samples, and so do the per-process samples when the daemon gives them.
fn check_profile(ctx: &Ctx, what: &str, p: &api::GetProfileResponse) {
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

// ---------------------------------------------------------------- watchers

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// Reads until the final update.
    Full,
    /// Drops its stream after a while.
    Dropper,
    /// Drops its stream, then resumes with `resume_after_seq`, once or more.
    Resumer,
    /// Sleeps between reads while the churn runs.
    Slow,
}

struct WatchSpec {
    session: u64,
    kind: Kind,
    interval_ms: u32,
    window_s: u32,
    /// On a connection of its own (closed with the watcher).
    dedicated: bool,
    rng: Rng,
}

/// A watcher's copy of the profile, rebuilt from the updates.
#[derive(Default)]
struct Mirror {
    /// id → (exclusive, window_exclusive)
    fns: HashMap<u64, (u64, u64)>,
    /// seq of the last update applied.
    last_seq: Option<u64>,
    /// Kinds of failed checks this watcher has reported already.
    reported: HashSet<&'static str>,
}

/// Where a message sits in its stream.
struct Position {
    first: bool,
    resume_from: Option<u64>,
    prev_seq: Option<u64>,
}

impl Mirror {
    /// A failed check, reported once per watcher and kind; repeats are only
    /// counted.
    fn fail(&mut self, ctx: &Ctx, kind: &'static str, detail: String) {
        if self.reported.insert(kind) {
            ctx.fail(kind, detail);
        } else {
            bump(&ctx.stats.repeated_failures);
        }
    }

    fn apply(
        &mut self,
        ctx: &Ctx,
        label: &str,
        window_s: u32,
        at: &Position,
        m: &api::WatchResponse,
    ) {
        let Some(s) = &m.session else {
            self.fail(ctx, "watch update without a session", label.to_string());
            return;
        };
        let seq = m.seq;
        if at.first {
            match at.resume_from {
                None if !m.snapshot || m.resumed => self.fail(
                    ctx,
                    "first update of a stream is not a snapshot",
                    format!(
                        "{label}: seq {seq} snapshot {} resumed {}",
                        m.snapshot, m.resumed
                    ),
                ),
                None => {}
                Some(after) if m.resumed => {
                    bump(&ctx.stats.resumes_honored);
                    if m.snapshot {
                        self.fail(ctx, "resumed update is also a snapshot", label.to_string());
                    }
                    if seq < after {
                        self.fail(
                            ctx,
                            "resumed update's seq is below resume_after_seq",
                            format!("{label}: resume_after_seq {after}, got seq {seq}"),
                        );
                    }
                }
                // Every view raises a session's version: a daemon now past
                // `after` could have resumed; only a version from another
                // daemon run (at or past the current one) calls for a snapshot.
                Some(after) if m.snapshot && after < seq => {
                    bump(&ctx.stats.resumes_snapshot);
                    self.fail(
                        ctx,
                        "resume answered with a snapshot though the daemon could resume",
                        format!("{label}: resume_after_seq {after}, got seq {seq}"),
                    );
                }
                Some(after) if m.snapshot => {
                    bump(&ctx.stats.resumes_snapshot);
                    ctx.note(
                        "resume from another daemon run answered with a snapshot",
                        format!("{label}: resume_after_seq {after}, got seq {seq}"),
                    );
                }
                Some(after) => self.fail(
                    ctx,
                    "answer to a resume is neither resumed nor a snapshot",
                    format!("{label}: resume_after_seq {after}, got seq {seq}"),
                ),
            }
        } else {
            if m.snapshot || m.resumed {
                self.fail(
                    ctx,
                    "snapshot or resumed set after the first update",
                    format!("{label}: seq {seq}"),
                );
            }
            if at.prev_seq.is_some_and(|p| seq <= p) {
                self.fail(
                    ctx,
                    "seq did not increase within a stream",
                    format!("{label}: {:?} then {seq}", at.prev_seq),
                );
            }
        }
        let rows = m.functions.len() as u64;
        if at.first && m.snapshot {
            bump(&ctx.stats.snapshots);
            ctx.stats.snapshot_rows.fetch_add(rows, Relaxed);
        }
        if at.first && m.resumed {
            ctx.stats.resumed_rows.fetch_add(rows, Relaxed);
        }
        if m.snapshot {
            self.fns.clear();
        }
        for f in &m.functions {
            if !self.fns.contains_key(&f.id) && f.name.is_empty() {
                self.fail(
                    ctx,
                    "function first seen without a name",
                    format!("{label}: seq {seq}, function id {}", f.id),
                );
            }
            self.fns.insert(f.id, (f.exclusive, f.window_exclusive));
        }
        let t = s.totals.unwrap_or_default();
        let excl: u64 = self.fns.values().map(|v| v.0).sum();
        if excl != t.attributed {
            let kind = if at.resume_from.is_some() {
                "watch (after a resume): sum of exclusive != attributed"
            } else {
                "watch: sum of exclusive != attributed"
            };
            self.fail(
                ctx,
                kind,
                format!(
                    "{label}: seq {seq}: exclusive sum {excl}, attributed {}",
                    t.attributed
                ),
            );
        }
        if window_s > 0 {
            let w: u64 = self.fns.values().map(|v| v.1).sum();
            if w != m.window_attributed {
                let kind = if at.resume_from.is_some() {
                    "watch (after a resume): sum of window exclusive != window_attributed"
                } else {
                    "watch: sum of window exclusive != window_attributed"
                };
                self.fail(
                    ctx,
                    kind,
                    format!(
                        "{label}: seq {seq}: window exclusive sum {w}, window_attributed {}",
                        m.window_attributed
                    ),
                );
            }
        }
        let running = s.state == SessionState::Running as i32;
        if m.r#final == running {
            self.fail(
                ctx,
                "final flag disagrees with the state",
                format!(
                    "{label}: seq {seq}: final {} state {}",
                    m.r#final,
                    state_name(s.state)
                ),
            );
        }
        self.last_seq = Some(seq);
    }
}

enum StreamEnd {
    Dropped,
    ResumeRefused,
}

async fn watcher(ctx: Arc<Ctx>, mut spec: WatchSpec) {
    let label = format!(
        "session {} {:?} watcher ({} ms, window {} s{})",
        spec.session,
        spec.kind,
        spec.interval_ms,
        spec.window_s,
        if spec.dedicated {
            ", own connection"
        } else {
            ""
        }
    );
    let mut client = if spec.dedicated {
        match connect(&ctx.socket).await {
            Ok(c) => c,
            Err(e) => {
                ctx.fail("connect error", format!("{label}: {e}"));
                return;
            }
        }
    } else {
        ctx.client()
    };
    let mut draining = ctx.draining.subscribe();
    let mut mirror = Mirror::default();
    let mut resumes_left = if spec.kind == Kind::Resumer {
        spec.rng.range(1, 3)
    } else {
        0
    };
    let mut resume_from: Option<u64> = None;
    let interval = ms(u64::from(spec.interval_ms));
    loop {
        bump(&ctx.stats.streams_opened);
        if resume_from.is_some() {
            bump(&ctx.stats.resumes_asked);
        }
        let req = api::WatchRequest {
            session_id: spec.session,
            interval_ms: spec.interval_ms,
            window_s: spec.window_s,
            resume_after_seq: resume_from.unwrap_or(0),
        };
        let mut stream = match tokio::time::timeout(RPC_TIMEOUT, client.watch(req)).await {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(s)) if resume_from.is_some() => {
                bump(&ctx.stats.resumes_refused);
                ctx.note(
                    &format!("resume refused: {:?}", s.code()),
                    format!("{label}: resume_after_seq {resume_from:?}: {}", s.message()),
                );
                resume_from = None;
                mirror = Mirror::default();
                continue;
            }
            Ok(Err(s)) => {
                ctx.fail(
                    &format!("Watch error {:?}", s.code()),
                    format!("{label}: {}", s.message()),
                );
                return;
            }
            Err(_) => {
                ctx.fail("Watch timeout", label.clone());
                return;
            }
        };
        let drop_after = match spec.kind {
            Kind::Dropper => Some(ms(spec.rng.range(300, 8000))),
            Kind::Resumer if resumes_left > 0 => Some(ms(spec.rng.range(300, 5000))),
            _ => None,
        };
        let drop_at = drop_after.map(|d| tokio::time::Instant::now() + d);
        let mut at = Position {
            first: true,
            resume_from,
            prev_seq: None,
        };
        let mut last_msg = Instant::now();
        let outcome = loop {
            if spec.kind == Kind::Slow && !at.first && !*draining.borrow() {
                tokio::select! {
                    _ = tokio::time::sleep(SLOW_PAUSE) => {}
                    _ = draining.wait_for(|d| *d) => {}
                }
            }
            let read = tokio::time::timeout(interval + STALL, stream.message());
            let next = match drop_at {
                Some(when) => tokio::select! {
                    r = read => Some(r),
                    _ = tokio::time::sleep_until(when) => None,
                },
                None => Some(read.await),
            };
            let Some(next) = next else {
                break StreamEnd::Dropped;
            };
            let m = match next {
                Err(_) => {
                    ctx.fail(
                        "watch stalled",
                        format!("{label}: no update in {:?}", interval + STALL),
                    );
                    return;
                }
                Ok(Err(s)) if at.first && resume_from.is_some() => {
                    bump(&ctx.stats.resumes_refused);
                    ctx.note(
                        &format!("resume refused: {:?}", s.code()),
                        format!("{label}: resume_after_seq {resume_from:?}: {}", s.message()),
                    );
                    break StreamEnd::ResumeRefused;
                }
                Ok(Err(s)) => {
                    ctx.fail(
                        &format!("Watch stream error {:?}", s.code()),
                        format!("{label}: {}", s.message()),
                    );
                    return;
                }
                Ok(Ok(None)) => {
                    ctx.fail("watch stream ended without a final update", label.clone());
                    return;
                }
                Ok(Ok(Some(m))) => m,
            };
            bump(&ctx.stats.messages);
            ctx.stats.rows.fetch_add(m.functions.len() as u64, Relaxed);
            if !at.first && spec.kind != Kind::Slow && !m.r#final {
                let late = last_msg.elapsed().saturating_sub(interval);
                ctx.stats
                    .max_lateness_ms
                    .fetch_max(late.as_millis() as u64, Relaxed);
            }
            last_msg = Instant::now();
            mirror.apply(&ctx, &label, spec.window_s, &at, &m);
            at.first = false;
            at.prev_seq = Some(m.seq);
            if m.r#final {
                match tokio::time::timeout(STALL, stream.message()).await {
                    Ok(Ok(None)) => {}
                    Ok(Ok(Some(extra))) => ctx.fail(
                        "an update after the final one",
                        format!("{label}: seq {} after final seq {}", extra.seq, m.seq),
                    ),
                    Ok(Err(s)) => ctx.fail(
                        "an error after the final update",
                        format!("{label}: {:?}: {}", s.code(), s.message()),
                    ),
                    Err(_) => ctx.fail("stream not closed after the final update", label.clone()),
                }
                bump(&ctx.stats.streams_final);
                if let Some(s) = m.session {
                    ctx.finals
                        .lock()
                        .unwrap()
                        .entry(spec.session)
                        .or_default()
                        .push(s);
                }
                return;
            }
        };
        drop(stream);
        match outcome {
            StreamEnd::Dropped if resumes_left > 0 => {
                resumes_left -= 1;
                tokio::time::sleep(ms(spec.rng.range(0, 1500))).await;
                // seq 0 is the old daemon's snapshot: nothing to resume from.
                resume_from = mirror.last_seq.filter(|&s| s > 0);
                if spec.dedicated {
                    // Resume over a new connection, as a client that lost its own.
                    match connect(&ctx.socket).await {
                        Ok(c) => client = c,
                        Err(e) => {
                            ctx.fail("connect error", format!("{label}: {e}"));
                            return;
                        }
                    }
                }
                if resume_from.is_none() {
                    mirror = Mirror::default();
                }
            }
            StreamEnd::Dropped => {
                bump(&ctx.stats.streams_dropped);
                return;
            }
            StreamEnd::ResumeRefused => {
                resume_from = None;
                mirror = Mirror::default();
            }
        }
    }
}

// ---------------------------------------------------------------- workloads

const SPIN_C: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void leaf_a(unsigned n) { for (unsigned i = 0; i < n; i++) sink += i * 7u; }
__attribute__((noinline)) static void leaf_b(unsigned n) { for (unsigned i = 0; i < n; i++) sink ^= i * 13u; }
__attribute__((noinline)) static void mid(unsigned n) { leaf_a(n); leaf_b(3 * n); }
__attribute__((noinline)) static void work(unsigned n) { mid(n); leaf_a(n); }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Busy in a few functions; every 0.5-2 s forks a child that spins 20 ms and
   exits or execs /bin/true; after 2-10 s re-execs itself (same pid). */
int main(int argc, char **argv) {
    int gen = argc > 1 ? atoi(argv[1]) : 0;
    if (gen == 0 && nice(19) == -1) { /* best effort */ }
    signal(SIGCHLD, SIG_IGN);
    srand((unsigned)getpid() * 2654435761u + (unsigned)gen);
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
    double t0 = now();
    double next_fork = t0 + 0.2 + (rand() % 1000) / 1000.0;
    double exec_at = t0 + 2.0 + (rand() % 8000) / 1000.0;
    for (;;) {
        work(20000);
        double t = now();
        if (t >= next_fork) {
            next_fork = t + 0.5 + (rand() % 1500) / 1000.0;
            if (fork() == 0) {
                double end = now() + 0.02;
                while (now() < end) work(2000);
                if (rand() % 2) execl("/bin/true", "true", (char *)0);
                _exit(0);
            }
        }
        if (n > 0 && t >= exec_at) {
            char g[16];
            snprintf(g, sizeof g, "%d", gen + 1);
            execl(self, argv[0], g, (char *)0);
            exec_at = t + 5.0;
        }
    }
}
"#;

/// How workloads are started: the compiled spinner, or a shell loop when
/// there is no C compiler.
enum Spin {
    C(PathBuf),
    Shell,
}

impl Spin {
    fn build(dir: &Path) -> Spin {
        let src = dir.join("soak-spin.c");
        let bin = dir.join("soak-spin");
        let built = std::fs::write(&src, SPIN_C).is_ok()
            && Command::new("cc")
                .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
                .arg(&bin)
                .arg(&src)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .status()
                .is_ok_and(|s| s.success());
        if built {
            Spin::C(bin)
        } else {
            eprintln!(
                "soak: cannot compile the C workload with cc; using `sh -c 'while :; do :; done'`"
            );
            Spin::Shell
        }
    }

    fn start(&self) -> std::io::Result<Reaped> {
        let (mut cmd, comm) = match self {
            Spin::C(bin) => {
                let mut c = Command::new(bin);
                c.arg("0");
                (c, "soak-spin")
            }
            Spin::Shell => {
                let mut c = Command::new("nice");
                c.args(["-n", "19", "sh", "-c", "while :; do :; done"]);
                (c, "sh")
            }
        };
        let child = Reaped(
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?,
        );
        // Attach once it runs its own program, so the session starts named.
        let path = format!("/proc/{}/comm", child.pid());
        for _ in 0..100 {
            if std::fs::read_to_string(&path).is_ok_and(|c| c.trim_end() == comm) {
                break;
            }
            std::thread::sleep(ms(5));
        }
        Ok(child)
    }
}

// ---------------------------------------------------------------- the daemon

struct DaemonProc {
    child: Reaped,
    pid: u32,
    log: PathBuf,
}

fn default_profd() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating this executable")?;
    // target/<profile>/examples/soak → target/<profile>/profd
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .context("this executable has no target directory")?;
    Ok(dir.join("profd"))
}

fn has_flag(help: &str, flag: &str) -> bool {
    help.split(|c: char| c.is_whitespace() || matches!(c, ',' | '=' | '[' | ']'))
        .any(|w| w == flag)
}

async fn start_daemon(profd: &Path, dir: &Path) -> anyhow::Result<(DaemonProc, Vec<String>)> {
    let help = Command::new(profd)
        .arg("--help")
        .output()
        .with_context(|| {
            format!(
                "running {} --help (build it first: cargo build --release -p profd, or give --profd)",
                profd.display()
            )
        })?;
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let socket = dir.join("profd.sock");
    let mut args: Vec<String> = vec![
        "--socket".into(),
        socket.display().to_string(),
        "--log-level".into(),
        "info".into(),
    ];
    let max_connections = hogs::MAX_CONNECTIONS.to_string();
    for (flag, value) in [
        ("--max-sessions", "4096"),
        ("--max-sessions-per-caller", "4096"),
        ("--max-connections", &max_connections),
    ] {
        if has_flag(&help, flag) {
            args.extend([flag.to_string(), value.to_string()]);
        }
    }
    if has_flag(&help, "--state-dir") {
        let state = dir.join("state");
        std::fs::create_dir_all(&state)?;
        args.extend(["--state-dir".to_string(), state.display().to_string()]);
    } else if has_flag(&help, "--no-persist") {
        args.push("--no-persist".into());
    }
    let log = dir.join("profd.log");
    let file = std::fs::File::create(&log)?;
    let child = Command::new(profd)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
        .with_context(|| format!("starting {}", profd.display()))?;
    let mut d = DaemonProc {
        pid: child.id(),
        child: Reaped(child),
        log,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = d.child.0.try_wait()? {
            bail!(
                "profd exited ({status}) before serving:\n{}",
                std::fs::read_to_string(&d.log).unwrap_or_default()
            );
        }
        if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
            return Ok((d, args));
        }
        if Instant::now() > deadline {
            d.child.kill();
            bail!(
                "profd did not accept connections on {} within 10 s:\n{}",
                socket.display(),
                std::fs::read_to_string(&d.log).unwrap_or_default()
            );
        }
        tokio::time::sleep(ms(50)).await;
    }
}

/// One reading of the daemon's /proc entries.
#[derive(Debug, Clone, Copy)]
struct ProcSample {
    at_s: f64,
    rss_kib: u64,
    /// The anonymous part of it (heap), without mapped files.
    anon_kib: u64,
    fds: usize,
    /// utime + stime in clock ticks.
    cpu_ticks: u64,
}

fn read_proc(pid: u32, at_s: f64) -> Option<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |field: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let (rss_kib, anon_kib) = (kib("VmRSS:")?, kib("RssAnon:").unwrap_or(0));
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // After the comm: state is field 3, utime 14, stime 15.
    let cpu_ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ProcSample {
        at_s,
        rss_kib,
        anon_kib,
        fds,
        cpu_ticks,
    })
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

// ---------------------------------------------------------------- the churn

struct Workload {
    proc: Option<Reaped>,
    pid: u32,
    killed_at: Option<Instant>,
}

struct Sess {
    id: u64,
    workload: usize,
    duration: Option<Duration>,
    attached_at: Instant,
    stopped_at: Option<Instant>,
    /// The state the Stop answer gave.
    stop_state: Option<i32>,
    /// Ended, as of the last ListSessions.
    ended: bool,
    watchers: Vec<JoinHandle<()>>,
}

struct Controller {
    ctx: Arc<Ctx>,
    rng: Rng,
    spin: Spin,
    workloads: Vec<Workload>,
    sessions: BTreeMap<u64, Sess>,
    freqs: Vec<u32>,
    target_sessions: usize,
    target_watchers: usize,
    /// Finished watcher tasks whose outcome is not yet collected.
    finished: Vec<JoinHandle<()>>,
    max_running: usize,
}

impl Controller {
    fn live_workloads(&self) -> Vec<usize> {
        (0..self.workloads.len())
            .filter(|&i| self.workloads[i].killed_at.is_none())
            .collect()
    }

    /// Sessions that are running and that nothing we did is ending.
    fn running(&self) -> Vec<u64> {
        self.sessions
            .values()
            .filter(|s| {
                !s.ended && s.stopped_at.is_none() && self.workloads[s.workload].killed_at.is_none()
            })
            .map(|s| s.id)
            .collect()
    }

    fn sessions_on(&self, w: usize) -> usize {
        self.running()
            .iter()
            .filter(|id| self.sessions[id].workload == w)
            .count()
    }

    fn spawn_workload(&mut self) -> Option<usize> {
        match self.spin.start() {
            Ok(p) => {
                bump(&self.ctx.stats.workloads_started);
                self.workloads.push(Workload {
                    pid: p.pid(),
                    proc: Some(p),
                    killed_at: None,
                });
                Some(self.workloads.len() - 1)
            }
            Err(e) => {
                self.ctx.fail("cannot start a workload", e.to_string());
                None
            }
        }
    }

    fn kill_workload(&mut self, w: usize) {
        let wl = &mut self.workloads[w];
        if let Some(mut p) = wl.proc.take() {
            p.kill();
        }
        wl.killed_at = Some(Instant::now());
        bump(&self.ctx.stats.workloads_killed);
    }

    async fn attach(&mut self, w: usize) -> Option<u64> {
        let pid = self.workloads[w].pid;
        let rng = &mut self.rng;
        let frequency_hz = self.freqs[rng.index(self.freqs.len()).unwrap_or(0)];
        let dwarf = rng.chance(30);
        let req = api::AttachRequest {
            pid,
            frequency_hz: Some(frequency_hz),
            duration_ms: if rng.chance(10) {
                rng.range(2000, 8000)
            } else {
                0
            },
            mode: api::Mode::Cpu as i32,
            event: api::Event::CpuClock as i32,
            unwind: if dwarf {
                api::Unwind::Dwarf
            } else {
                api::Unwind::Fp
            } as i32,
            stack_bytes: if dwarf {
                [4096, 8192, 16384][rng.below(3) as usize]
            } else {
                0
            },
            children: rng.chance(30),
            timeline: rng.chance(20),
        };
        let about = format!("pid {pid} at {frequency_hz} Hz");
        let duration = (req.duration_ms > 0).then(|| ms(req.duration_ms));
        let client = &mut self.ctx.client();
        let resp = self.ctx.call("Attach", &about, client.attach(req)).await?;
        let Some(s) = resp.session else {
            self.ctx.fail("Attach answer without a session", about);
            return None;
        };
        bump(&self.ctx.stats.attached);
        if self.sessions_on(w) > 0 {
            bump(&self.ctx.stats.attached_shared);
        }
        self.sessions.insert(
            s.id,
            Sess {
                id: s.id,
                workload: w,
                duration,
                attached_at: Instant::now(),
                stopped_at: None,
                stop_state: None,
                ended: false,
                watchers: Vec::new(),
            },
        );
        for _ in 0..self.target_watchers {
            self.spawn_watcher(s.id);
        }
        Some(s.id)
    }

    fn spawn_watcher(&mut self, session: u64) {
        let rng = &mut self.rng;
        // A few slow readers: the first watcher of 30 % of the sessions.
        let slow = self.sessions[&session].watchers.is_empty() && rng.chance(30);
        let kind = if slow {
            Kind::Slow
        } else {
            match rng.below(100) {
                0..50 => Kind::Full,
                50..75 => Kind::Dropper,
                _ => Kind::Resumer,
            }
        };
        let spec = WatchSpec {
            session,
            kind,
            interval_ms: rng.range(100, 1000) as u32,
            window_s: if rng.chance(30) {
                [2, 5, 10, 30][rng.below(4) as usize]
            } else {
                0
            },
            dedicated: rng.chance(20),
            rng: rng.fork(),
        };
        let handle = tokio::spawn(watcher(self.ctx.clone(), spec));
        self.sessions
            .get_mut(&session)
            .expect("known session")
            .watchers
            .push(handle);
    }

    /// Collect finished watcher tasks (a panic is a failure of this program).
    async fn reap_watchers(&mut self) {
        for s in self.sessions.values_mut() {
            let (done, open): (Vec<_>, Vec<_>) =
                s.watchers.drain(..).partition(|h| h.is_finished());
            s.watchers = open;
            self.finished.extend(done);
        }
        for h in self.finished.drain(..) {
            if let Err(e) = h.await {
                if e.is_panic() {
                    self.ctx.fail("soak watcher task panicked", format!("{e}"));
                }
            }
        }
    }

    async fn stop(&mut self, id: u64) {
        let client = &mut self.ctx.client();
        let about = format!("session {id}");
        let now = Instant::now();
        self.sessions.get_mut(&id).expect("known").stopped_at = Some(now);
        let resp = self
            .ctx
            .call(
                "Stop",
                &about,
                client.stop(api::StopRequest { session_id: id }),
            )
            .await;
        bump(&self.ctx.stats.stopped);
        if let Some(s) = resp.and_then(|r| r.session) {
            self.sessions.get_mut(&id).expect("known").stop_state = Some(s.state);
            if s.state == SessionState::Running as i32 {
                self.ctx.fail("Stop answered a running session", about);
            }
        }
    }

    /// Refresh which sessions have ended; check each listed session adds up.
    async fn refresh(&mut self) -> Option<Vec<api::Session>> {
        let client = &mut self.ctx.client();
        let list = self
            .ctx
            .call(
                "ListSessions",
                "refresh",
                client.list_sessions(api::ListSessionsRequest { all: false }),
            )
            .await?;
        let mut running = 0;
        for s in &list.sessions {
            if s.state == SessionState::Running as i32 {
                running += 1;
            }
            if let Some(mine) = self.sessions.get_mut(&s.id) {
                mine.ended = s.state != SessionState::Running as i32;
            }
        }
        self.max_running = self.max_running.max(running);
        Some(list.sessions)
    }

    async fn check_random_profile(&mut self, folded: bool) {
        let ids: Vec<u64> = self.sessions.keys().copied().collect();
        let Some(i) = self.rng.index(ids.len()) else {
            return;
        };
        let id = ids[i];
        let client = &mut self.ctx.client();
        let format = if folded {
            api::ExportFormat::Folded
        } else {
            api::ExportFormat::Unspecified
        };
        let req = api::GetProfileRequest {
            session_id: id,
            format: format as i32,
            query: None,
        };
        let about = format!("session {id}");
        let Some(p) = self
            .ctx
            .call("GetProfile", &about, client.get_profile(req))
            .await
        else {
            return;
        };
        check_profile(&self.ctx, "GetProfile", &p);
        if folded {
            let text = String::from_utf8_lossy(&p.data);
            let mut sum = 0u64;
            for line in text.lines().filter(|l| !l.is_empty()) {
                match line
                    .rsplit_once(' ')
                    .and_then(|(_, n)| n.parse::<u64>().ok())
                {
                    Some(n) => sum += n,
                    None => self.ctx.fail(
                        "folded export line without a count",
                        format!("{about}: {line:?}"),
                    ),
                }
            }
            let attributed = p
                .session
                .and_then(|s| s.totals)
                .unwrap_or_default()
                .attributed;
            if sum != attributed {
                self.ctx.fail(
                    "folded export: sum of counts != attributed",
                    format!("{about}: folded {sum}, attributed {attributed}"),
                );
            }
            bump(&self.ctx.stats.folded_checks);
        }
    }

    /// Keep `target_sessions` running, each with `target_watchers` watchers.
    async fn top_up(&mut self) {
        let mut tries = 0;
        while self.running().len() < self.target_sessions && tries < self.target_sessions * 2 {
            tries += 1;
            let live = self.live_workloads();
            let w = if !live.is_empty() && self.rng.chance(35) {
                Some(live[self.rng.index(live.len()).unwrap_or(0)])
            } else {
                self.spawn_workload()
            };
            if let Some(w) = w {
                self.attach(w).await;
            }
        }
        for id in self.running() {
            let n = self.sessions[&id].watchers.len();
            for _ in n..self.target_watchers {
                self.spawn_watcher(id);
            }
        }
    }

    async fn tick(&mut self, n: u64) {
        match self.rng.below(100) {
            0..25 => {
                let running = self.running();
                if let Some(i) = self.rng.index(running.len()) {
                    self.stop(running[i]).await;
                }
            }
            25..37 => {
                // A workload with sessions, so they end `exited`.
                let busy: Vec<usize> = self
                    .live_workloads()
                    .into_iter()
                    .filter(|&w| self.sessions_on(w) > 0)
                    .collect();
                if let Some(i) = self.rng.index(busy.len()) {
                    self.kill_workload(busy[i]);
                }
            }
            37..57 => {
                let open: Vec<(u64, usize)> = self
                    .sessions
                    .values()
                    .flat_map(|s| (0..s.watchers.len()).map(move |i| (s.id, i)))
                    .collect();
                if let Some(i) = self.rng.index(open.len()) {
                    let (id, j) = open[i];
                    let h = self
                        .sessions
                        .get_mut(&id)
                        .expect("known")
                        .watchers
                        .remove(j);
                    if !h.is_finished() {
                        h.abort();
                        bump(&self.ctx.stats.streams_aborted);
                    }
                    self.finished.push(h);
                }
            }
            57..67 => {
                // Another session on a process that already has one.
                let busy: Vec<usize> = self
                    .live_workloads()
                    .into_iter()
                    .filter(|&w| self.sessions_on(w) > 0)
                    .collect();
                if let Some(i) = self.rng.index(busy.len()) {
                    self.attach(busy[i]).await;
                }
            }
            67..75 => {
                let idle: Vec<usize> = self
                    .live_workloads()
                    .into_iter()
                    .filter(|&w| self.sessions_on(w) == 0)
                    .collect();
                if idle.len() > 4 {
                    if let Some(i) = self.rng.index(idle.len()) {
                        self.kill_workload(idle[i]);
                    }
                }
            }
            _ => {}
        }
        match n % 4 {
            0 => {
                self.refresh().await;
            }
            1 | 3 => self.check_random_profile(n % 40 == 1).await,
            _ => {
                let client = &mut self.ctx.client();
                self.ctx
                    .call("Info", "during churn", client.info(api::InfoRequest {}))
                    .await;
            }
        }
        self.reap_watchers().await;
        self.top_up().await;
    }

    /// States a session may have ended in, given what we did to it.
    fn acceptable(&self, s: &Sess) -> Vec<SessionState> {
        let killed = self.workloads[s.workload].killed_at;
        let deadline = s.duration.map(|d| s.attached_at + d);
        let near = |t: Instant| deadline.is_some_and(|d| t + Duration::from_secs(1) >= d);
        let first = match (s.stopped_at, killed) {
            (Some(st), Some(k)) if k < st => Some((SessionState::Exited, k)),
            (Some(st), _) => Some((SessionState::Stopped, st)),
            (None, Some(k)) => Some((SessionState::Exited, k)),
            (None, None) => None,
        };
        match first {
            Some((state, at)) if near(at) => vec![state, SessionState::DurationElapsed],
            Some((state, _)) => vec![state],
            None if deadline.is_some() => vec![SessionState::DurationElapsed],
            None => Vec::new(),
        }
    }
}

// ---------------------------------------------------------------- main

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// Runs the soak; Ok(true) when every check passed.
async fn run(args: Args) -> anyhow::Result<bool> {
    if rustix::process::geteuid().as_raw() != 0 {
        bail!("run as root: profd samples every CPU and reads other processes' maps");
    }
    let profd = match &args.profd {
        Some(p) => p.clone(),
        None => default_profd()?,
    };
    if !profd.exists() {
        bail!(
            "{} does not exist: build it first (cargo build --release -p profd) or give --profd PATH",
            profd.display()
        );
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let dir = std::env::temp_dir().join(format!("profd-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let spin = Spin::build(&dir);
    let (mut daemon, daemon_args) = start_daemon(&profd, &dir).await?;
    println!(
        "soak: {} s, {} sessions × {} watchers, seed {seed}; profd {} {} (pid {}), log {}",
        args.seconds,
        args.sessions,
        args.watchers,
        profd.display(),
        daemon_args.join(" "),
        daemon.pid,
        daemon.log.display()
    );

    let socket = dir.join("profd.sock");
    let mut pool = Vec::new();
    for _ in 0..POOL {
        pool.push(connect(&socket).await.context("connecting to profd")?);
    }
    let (draining, _) = tokio::sync::watch::channel(false);
    let ctx = Arc::new(Ctx {
        socket,
        pool,
        next: AtomicU64::new(0),
        stats: Stats::default(),
        failures: Mutex::default(),
        notes: Mutex::default(),
        draining,
        finals: Mutex::default(),
        latencies: Mutex::default(),
    });
    let info = ctx
        .call("Info", "start", ctx.client().info(api::InfoRequest {}))
        .await
        .context("Info failed at start")?;
    println!(
        "daemon: version {}, {} CPUs, max sample rate {} Hz, paranoid {}",
        info.version, info.cpus, info.max_sample_rate, info.perf_event_paranoid
    );
    let max_rate = info.max_sample_rate.max(1);
    let mut freqs: Vec<u32> = [97, 199, 499, 99]
        .into_iter()
        .map(|f: u32| f.min(max_rate))
        .collect();
    freqs.dedup();

    // The daemon's /proc figures, every second.
    let start = Instant::now();
    let samples: Arc<Mutex<Vec<ProcSample>>> = Arc::default();
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (samples, sampling, pid) = (samples.clone(), sampling.clone(), daemon.pid);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            while sampling.load(Relaxed) {
                tick.tick().await;
                if let Some(s) = read_proc(pid, start.elapsed().as_secs_f64()) {
                    samples.lock().unwrap().push(s);
                }
            }
        })
    };
    let baseline = read_proc(daemon.pid, 0.0);

    let mut c = Controller {
        ctx: ctx.clone(),
        rng: Rng::new(seed),
        spin,
        workloads: Vec::new(),
        sessions: BTreeMap::new(),
        freqs,
        target_sessions: args.sessions,
        target_watchers: args.watchers,
        finished: Vec::new(),
        max_running: 0,
    };
    c.top_up().await;

    // Churn (the resource-bound cases after the drain take the rest).
    let churn = Duration::from_secs(match args.seconds {
        s if s > 2 * bounds::SECONDS => s - bounds::SECONDS,
        s => s,
    });
    let hogs = tokio::spawn(hogs::phase(ctx.clone(), churn / 2));
    let mut n = 0u64;
    let mut next_report = Duration::from_secs(10);
    while start.elapsed() < churn {
        let pause = c.rng.range(150, 400);
        tokio::time::sleep(ms(pause)).await;
        c.tick(n).await;
        n += 1;
        if start.elapsed() >= next_report {
            next_report += Duration::from_secs(10);
            let last = samples.lock().unwrap().last().copied();
            let open: usize = c.sessions.values().map(|s| s.watchers.len()).sum();
            println!(
                "  {:>4.0} s: {} running sessions, {} watchers, {} sessions so far, {} messages, RSS {:.1} MiB, {} fds, {} failed checks",
                start.elapsed().as_secs_f64(),
                c.running().len(),
                open,
                c.sessions.len(),
                ctx.stats.messages.load(Relaxed),
                last.map(|s| mib(s.rss_kib)).unwrap_or(0.0),
                last.map(|s| s.fds).unwrap_or(0),
                ctx.failures.lock().unwrap().total()
            );
        }
    }
    if hogs.await.is_err() {
        ctx.fail("soak hogs task panicked", String::new());
    }
    let churn_end = read_proc(daemon.pid, start.elapsed().as_secs_f64());
    println!(
        "churn over after {:.1} s; stopping everything",
        start.elapsed().as_secs_f64()
    );

    // Drain: slow watchers read on, every session is ended, every watcher
    // must get its final update.
    ctx.draining.send_replace(true);
    for id in c.running() {
        c.stop(id).await;
    }
    let wait_end = Instant::now() + Duration::from_secs(20);
    let last_list = loop {
        let list = c.refresh().await.unwrap_or_default();
        let still: Vec<u64> = list
            .iter()
            .filter(|s| s.state == SessionState::Running as i32)
            .map(|s| s.id)
            .collect();
        if still.is_empty() {
            break list;
        }
        if Instant::now() > wait_end {
            ctx.fail(
                "sessions still running 20 s after being stopped or their target killed",
                format!("{still:?}"),
            );
            break list;
        }
        tokio::time::sleep(ms(200)).await;
    };
    let watch_end = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut stuck = 0;
    for s in c.sessions.values_mut() {
        for mut h in s.watchers.drain(..) {
            match tokio::time::timeout_at(watch_end, &mut h).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) if e.is_panic() => {
                    ctx.fail("soak watcher task panicked", format!("{e}"))
                }
                Ok(Err(_)) => {}
                Err(_) => {
                    h.abort();
                    stuck += 1;
                }
            }
        }
    }
    if stuck > 0 {
        ctx.fail(
            "watchers without a final update 30 s after every session ended",
            format!("{stuck} watchers"),
        );
    }
    c.reap_watchers().await;
    for w in 0..c.workloads.len() {
        if c.workloads[w].killed_at.is_none() {
            if let Some(mut p) = c.workloads[w].proc.take() {
                p.kill();
            }
        }
    }

    // Every session: ended as its history says, its profile adds up, the
    // watchers' final updates and the list agree with it.
    let listed: HashMap<u64, &api::Session> = last_list.iter().map(|s| (s.id, s)).collect();
    let finals = std::mem::take(&mut *ctx.finals.lock().unwrap());
    let mut by_state: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut sums = api::Totals::default();
    let ids: Vec<u64> = c.sessions.keys().copied().collect();
    for id in ids {
        let about = format!("session {id}");
        let client = &mut ctx.client();
        let req = api::GetProfileRequest {
            session_id: id,
            format: 0,
            query: None,
        };
        let Some(p) = ctx
            .call("GetProfile", &about, client.get_profile(req))
            .await
        else {
            continue;
        };
        check_profile(&ctx, "final GetProfile", &p);
        let Some(s) = p.session else { continue };
        *by_state.entry(state_name(s.state)).or_default() += 1;
        let t = s.totals.unwrap_or_default();
        sums.attributed += t.attributed;
        sums.discarded += t.discarded;
        sums.lost += t.lost;
        sums.truncated += t.truncated;
        sums.unsymbolized += t.unsymbolized;
        sums.overflowed += t.overflowed;
        sums.throttled += t.throttled;
        let mine = &c.sessions[&id];
        let ok = c.acceptable(mine);
        if SessionState::try_from(s.state).map_or(true, |st| !ok.contains(&st)) {
            let history = format!(
                "attached {:.1} s, duration {:?}, stopped at {:?} s (Stop answered {}), target killed at {:?} s",
                (mine.attached_at - start).as_secs_f64(),
                mine.duration,
                mine.stopped_at.map(|t| (t - start).as_secs_f64()),
                mine.stop_state.map(state_name).unwrap_or("-"),
                c.workloads[mine.workload].killed_at.map(|t| (t - start).as_secs_f64()),
            );
            ctx.fail(
                "session ended in an unexpected state",
                format!(
                    "{about} (pid {}): {} ({}), expected one of {ok:?}; {history}",
                    s.pid,
                    state_name(s.state),
                    s.error
                ),
            );
        }
        if let Some(stop_state) = mine.stop_state {
            if stop_state != s.state {
                ctx.fail(
                    "Stop answered another state than the session kept",
                    format!(
                        "{about}: Stop {}, now {}",
                        state_name(stop_state),
                        state_name(s.state)
                    ),
                );
            }
        }
        for f in finals.get(&id).into_iter().flatten() {
            if f.state != s.state || f.totals != s.totals {
                ctx.fail(
                    "a final Watch update disagrees with the ended session",
                    format!(
                        "{about}: final update {} {:?}, GetProfile {} {:?}",
                        state_name(f.state),
                        f.totals,
                        state_name(s.state),
                        s.totals
                    ),
                );
            }
        }
        match listed.get(&id) {
            None => ctx.fail("session missing from ListSessions", about.clone()),
            Some(l) if l.state != s.state || l.totals != s.totals => ctx.fail(
                "ListSessions disagrees with GetProfile",
                format!(
                    "{about}: list {} {:?}, profile {:?}",
                    state_name(l.state),
                    l.totals,
                    s.totals
                ),
            ),
            Some(_) => {}
        }
    }
    let client = &mut ctx.client();
    let end_info = ctx
        .call("Info", "end", client.info(api::InfoRequest {}))
        .await
        .unwrap_or_default();
    let it = end_info.totals.unwrap_or_default();
    if it.attributed > sums.attributed {
        ctx.fail(
            "Info attributed above the sum over sessions",
            format!("Info {} > sessions {}", it.attributed, sums.attributed),
        );
    }
    if end_info.running_sessions != 0 {
        ctx.fail(
            "Info counts running sessions after all ended",
            format!("{}", end_info.running_sessions),
        );
    }
    if !end_info.groups.is_empty() {
        ctx.fail(
            "sampling rings still open after all sessions ended",
            format!("{:?}", end_info.groups),
        );
    }

    // RSS.
    tokio::time::sleep(Duration::from_secs(1)).await;
    sampling.store(false, Relaxed);
    let _ = sampler.await;
    let drained = read_proc(daemon.pid, start.elapsed().as_secs_f64());
    bounds::check(&ctx, daemon.pid, baseline, drained).await;
    let samples = samples.lock().unwrap().clone();
    let mark = (args.seconds as f64 / 2.0).min(10.0);
    let at_mark = samples.iter().find(|s| s.at_s >= mark).copied();
    let max_rss = samples.iter().map(|s| s.rss_kib).max().unwrap_or(0);
    if let (Some(at_mark), Some(end)) = (at_mark, churn_end) {
        if end.rss_kib > args.max_rss_mib * 1024 {
            ctx.fail(
                "RSS above --max-rss-mib at the end",
                format!("{:.1} MiB > {} MiB", mib(end.rss_kib), args.max_rss_mib),
            );
        }
        if end.rss_kib > 2 * at_mark.rss_kib {
            ctx.fail(
                "RSS more than doubled after the first seconds",
                format!(
                    "{:.1} MiB at {:.0} s, {:.1} MiB at the end",
                    mib(at_mark.rss_kib),
                    at_mark.at_s,
                    mib(end.rss_kib)
                ),
            );
        }
    } else {
        ctx.fail("no RSS readings of the daemon", String::new());
    }

    // Clean shutdown.
    let mut exit = String::from("?");
    if let Some(pid) = rustix::process::Pid::from_raw(daemon.pid as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match daemon.child.0.try_wait() {
            Ok(Some(status)) => {
                exit = status.to_string();
                if !status.success() {
                    ctx.fail("profd did not exit cleanly on SIGTERM", exit.clone());
                }
                break;
            }
            Ok(None) if Instant::now() < deadline => tokio::time::sleep(ms(100)).await,
            _ => {
                ctx.fail("profd still running 15 s after SIGTERM", String::new());
                break;
            }
        }
    }
    let log = std::fs::read_to_string(&daemon.log).unwrap_or_default();
    let (mut warns, mut errors) = (Findings::default(), Findings::default());
    for line in log.lines() {
        let level = line.split_whitespace().nth(1).unwrap_or("");
        if level == "ERROR" || line.contains("panicked") {
            errors.add("daemon log", line.to_string());
        } else if level == "WARN" {
            warns.add("daemon log", line.to_string());
        }
    }
    if errors.total() > 0 {
        ctx.fail(
            "ERROR lines or panics in the daemon log",
            format!("{} lines", errors.total()),
        );
    }

    // Figures.
    let st = &ctx.stats;
    let get = |c: &AtomicU64| c.load(Relaxed);
    let mut lat = ctx.latencies.lock().unwrap().clone();
    lat.sort_unstable();
    let states: Vec<String> = by_state
        .iter()
        .map(|(k, v)| {
            format!(
                "{} {v}",
                k.trim_start_matches("SESSION_STATE_").to_lowercase()
            )
        })
        .collect();
    println!();
    println!("== soak summary ({} s churn, seed {seed})", args.seconds);
    println!(
        "sessions:   {} attached ({} on an already profiled process), {} stopped by us, max {} running at once; ended: {}",
        get(&st.attached),
        get(&st.attached_shared),
        get(&st.stopped),
        c.max_running,
        states.join(", ")
    );
    println!(
        "workloads:  {} started, {} killed (SIGKILL)",
        get(&st.workloads_started),
        get(&st.workloads_killed)
    );
    println!(
        "watch:      {} streams opened, {} ended with final, {} dropped by their watcher, {} aborted mid-read",
        get(&st.streams_opened),
        get(&st.streams_final),
        get(&st.streams_dropped),
        get(&st.streams_aborted)
    );
    println!(
        "resume:     {} asked: {} resumed, {} answered with a snapshot, {} refused",
        get(&st.resumes_asked),
        get(&st.resumes_honored),
        get(&st.resumes_snapshot),
        get(&st.resumes_refused)
    );
    let per = |rows: u64, n: u64| rows as f64 / n.max(1) as f64;
    println!(
        "resume:     rows in a first update: snapshot {:.1}, resumed {:.1} on average",
        per(get(&st.snapshot_rows), get(&st.snapshots)),
        per(get(&st.resumed_rows), get(&st.resumes_honored))
    );
    println!(
        "messages:   {} updates received ({} function rows), every one checked; max lateness {} ms",
        get(&st.messages),
        get(&st.rows),
        get(&st.max_lateness_ms)
    );
    println!(
        "profiles:   {} GetProfile checks, {} folded exports checked",
        get(&st.profile_checks),
        get(&st.folded_checks)
    );
    println!(
        "samples:    sessions attributed {} (discarded {}, lost {}, truncated {}, unsymbolized {}, overflowed {}, throttled {}); Info attributed {} discarded {} lost {}",
        sums.attributed,
        sums.discarded,
        sums.lost,
        sums.truncated,
        sums.unsymbolized,
        sums.overflowed,
        sums.throttled,
        it.attributed,
        it.discarded,
        it.lost
    );
    println!(
        "rpc:        {} unary calls, latency p50 {} ms, p99 {} ms, max {} ms",
        lat.len(),
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or(0)
    );
    let fmt = |s: Option<ProcSample>| {
        s.map(|s| {
            format!(
                "{:.1} MiB (anon {:.1})/{} fds",
                mib(s.rss_kib),
                mib(s.anon_kib),
                s.fds
            )
        })
        .unwrap_or_else(|| "-".into())
    };
    println!(
        "daemon:     RSS/fds at start {}, at {:.0} s {}, end of churn {}, after drain {}; max RSS {:.1} MiB (limit {} MiB)",
        fmt(baseline),
        mark,
        fmt(at_mark),
        fmt(churn_end),
        fmt(drained),
        mib(max_rss),
        args.max_rss_mib
    );
    if let (Some(a), Some(b)) = (baseline, drained) {
        // /proc counts CPU time in USER_HZ, 100 per second on Linux.
        let cpu = (b.cpu_ticks - a.cpu_ticks) as f64 / 100.0;
        println!(
            "            CPU {cpu:.1} s over {:.0} s ({:.0} % of one CPU); {:.1} fds held per ended session; {exit} on SIGTERM; log {} WARN, {} ERROR",
            b.at_s,
            100.0 * cpu / b.at_s.max(1.0),
            b.fds.saturating_sub(a.fds) as f64 / c.sessions.len().max(1) as f64,
            warns.total(),
            errors.total()
        );
    }
    warns.print("WARN");
    errors.print("ERROR");
    ctx.notes.lock().unwrap().print("note");
    let failures = ctx.failures.lock().unwrap();
    failures.print("FAILED");
    if get(&st.repeated_failures) > 0 {
        println!(
            "FAILED: {} more failing updates in watchers that had already reported the same check",
            get(&st.repeated_failures)
        );
    }
    let failed = failures.total() > 0;
    println!(
        "result:     {}",
        if failed {
            format!("FAIL ({} failed checks)", failures.total())
        } else {
            "PASS".into()
        }
    );
    drop(failures);
    drop(c);
    if failed || args.keep {
        println!(
            "kept {} (daemon log: {})",
            dir.display(),
            daemon.log.display()
        );
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(!failed)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        eprintln!("soak: cannot install the SIGTERM handler");
        return std::process::ExitCode::from(2);
    };
    // On SIGINT or SIGTERM, dropping `run` kills the daemon and the workloads.
    tokio::select! {
        r = run(args) => match r {
            Ok(true) => std::process::ExitCode::SUCCESS,
            Ok(false) => std::process::ExitCode::FAILURE,
            Err(e) => {
                eprintln!("soak: {e:#}");
                std::process::ExitCode::from(2)
            }
        },
        _ = tokio::signal::ctrl_c() => {
            eprintln!("soak: interrupted");
            std::process::ExitCode::from(130)
        }
        _ = term.recv() => {
            eprintln!("soak: terminated");
            std::process::ExitCode::from(143)
        }
    }
}
