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
//! second. Then it stops everything and checks: no RPC errors, every call
//! and every Watch update came within its latency bound (`ctx.rs`), every
//! Watch message adds up (exclusive counts = attributed, window counts = window
//! attributed), every watcher got `final` as its last message with an ended
//! state, every session ended as its history says and its profile adds up,
//! the daemon-wide totals agree, the rings are closed, RSS stayed bounded,
//! the resource bounds hold (`bounds.rs`, in the run's last seconds),
//! calls and updates kept their latency bound while a user held and reopened
//! connections (`hogs.rs`, mid-churn) and the daemon stops cleanly on
//! SIGTERM. Prints the figures; exits 1 on any failed check.
//!
//! This file is the driver; the checks live beside it: `ctx.rs` (what every
//! task shares), `procs.rs` (the workload, the daemon, /proc readings),
//! `watch.rs` (the watchers), `churn.rs` (the churn), `checks.rs` (the checks
//! once the churn is over) and `summary.rs` (the figures).
use anyhow::{bail, Context as _};
use clap::Parser;
use profd_common::api;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::signal::unix::{signal, SignalKind};

mod bounds;
mod checks;
mod churn;
mod ctx;
mod hogs;
mod procs;
mod summary;
mod watch;

use churn::Controller;
use ctx::{connect, ms, Ctx, Rng, Stats, POOL};
use procs::{default_profd, mib, read_proc, start_daemon, ProcSample, Sampler, Spin};

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

/// The profd binary to run, once it is known to exist and we are root.
fn profd_binary(args: &Args) -> anyhow::Result<PathBuf> {
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
    Ok(profd)
}

/// The shared context, with `POOL` connections to the daemon at `socket`.
async fn open(socket: PathBuf) -> anyhow::Result<Arc<Ctx>> {
    let mut pool = Vec::new();
    for _ in 0..POOL {
        pool.push(connect(&socket).await.context("connecting to profd")?);
    }
    let (draining, _) = tokio::sync::watch::channel(false);
    Ok(Arc::new(Ctx {
        socket,
        pool,
        next: AtomicU64::new(0),
        stats: Stats::default(),
        failures: Mutex::default(),
        notes: Mutex::default(),
        draining,
        finals: Mutex::default(),
        latencies: Mutex::default(),
        latest_update: Mutex::default(),
        slowest_call: Mutex::default(),
    }))
}

/// Prints the daemon's Info; the sampling frequencies the churn attaches with.
async fn frequencies(ctx: &Ctx) -> anyhow::Result<Vec<u32>> {
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
    Ok(freqs)
}

/// Churns until `churn` has passed since `start` (the hogs' phase at its
/// middle), printing progress every 10 s. Returns the daemon's figures at
/// its end.
async fn churn(
    ctx: &Arc<Ctx>,
    c: &mut Controller,
    churn: Duration,
    start: Instant,
    sampler: &Sampler,
    pid: u32,
) -> Option<ProcSample> {
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
            let last = sampler.last();
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
    let churn_end = read_proc(pid, start.elapsed().as_secs_f64());
    println!(
        "churn over after {:.1} s; stopping everything",
        start.elapsed().as_secs_f64()
    );
    churn_end
}

/// Runs the soak; Ok(true) when every check passed.
async fn run(args: Args) -> anyhow::Result<bool> {
    let profd = profd_binary(&args)?;
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
    let ctx = open(dir.join("profd.sock")).await?;
    let freqs = frequencies(&ctx).await?;

    let start = Instant::now();
    let mut sampler = Sampler::start(daemon.pid, start);
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
    let churn_for = Duration::from_secs(match args.seconds {
        s if s > 2 * bounds::SECONDS => s - bounds::SECONDS,
        s => s,
    });
    let churn_end = churn(&ctx, &mut c, churn_for, start, &sampler, daemon.pid).await;

    let last_list = checks::drain(&ctx, &mut c).await;
    let (by_state, sums) = checks::sessions(&ctx, &c, &last_list, start).await;
    let end_info = checks::info(&ctx, &sums).await;

    // RSS.
    tokio::time::sleep(Duration::from_secs(1)).await;
    sampler.stop().await;
    let drained = read_proc(daemon.pid, start.elapsed().as_secs_f64());
    bounds::check(&ctx, daemon.pid, baseline, drained).await;
    let samples = sampler.samples();
    let mark = (args.seconds as f64 / 2.0).min(10.0);
    let at_mark = samples.iter().find(|s| s.at_s >= mark).copied();
    let max_rss = samples.iter().map(|s| s.rss_kib).max().unwrap_or(0);
    checks::rss(&ctx, at_mark, churn_end, args.max_rss_mib);

    let exit = checks::shutdown(&ctx, &mut daemon).await;
    let (warns, errors) = checks::daemon_log(&ctx, &daemon.log);

    let failed = summary::print(
        &ctx,
        &summary::Figures {
            seconds: args.seconds,
            seed,
            by_state,
            max_running: c.max_running,
            sessions: c.sessions.len(),
            sums,
            end_info,
            baseline,
            mark,
            at_mark,
            churn_end,
            drained,
            max_rss,
            max_rss_mib: args.max_rss_mib,
            exit,
            warns,
            errors,
        },
    );
    drop(c);
    keep_or_remove(&dir, &daemon.log, failed || args.keep);
    Ok(!failed)
}

/// Keeps the run's directory (and says where) or removes it.
fn keep_or_remove(dir: &Path, log: &Path, keep: bool) {
    if keep {
        println!("kept {} (daemon log: {})", dir.display(), log.display());
    } else {
        let _ = std::fs::remove_dir_all(dir);
    }
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
