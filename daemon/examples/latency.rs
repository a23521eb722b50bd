//! Attach-to-first-update latency of a running `profd` (run as root):
//!
//! ```sh
//! cargo build --release -p profd --example latency
//! target/release/examples/latency --socket /run/profd/profd.sock --pid 1234 --runs 10
//! ```
//!
//! Each run attaches a new session to `--pid`, opens a Watch stream on it and
//! times, from the moment the Attach call is made: the Attach reply, the
//! first Watch message (the snapshot) and the first message that carries
//! samples (attributed > 0). Then it stops the session, reads the stream to
//! its final update and pauses before the next run, so that every run starts
//! with no session of its own running. Prints each run, then the median and
//! the maximum of each figure, and a last `summary` line of `key=value`
//! pairs (milliseconds) for scripts (benches/overhead.sh reads it).
use anyhow::{bail, Context as _};
use clap::{Parser, ValueEnum};
use profd_common::api::{self, profiler_client::ProfilerClient};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// Times Attach → first Watch update, repeatedly, against a running profd.
#[derive(Debug, Parser)]
#[command(name = "latency")]
struct Args {
    /// Unix socket of the profd daemon.
    #[arg(long, default_value = "/run/profd/profd.sock")]
    socket: PathBuf,
    /// Process to attach to (it should be busy, so that samples come at once).
    #[arg(long)]
    pid: u32,
    /// Attach/Watch/Stop cycles to time.
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// Watch interval in milliseconds.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u32,
    /// User stack unwinding of the sessions.
    #[arg(long, value_enum, default_value_t = UnwindArg::Fp)]
    unwind: UnwindArg,
    /// Sampling frequency in Hz (default: the daemon's).
    #[arg(long)]
    freq: Option<u32>,
    /// Pause between runs, in milliseconds.
    #[arg(long, default_value_t = 300)]
    pause_ms: u64,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum UnwindArg {
    Auto,
    Fp,
    Dwarf,
}

impl From<UnwindArg> for api::Unwind {
    fn from(u: UnwindArg) -> api::Unwind {
        match u {
            UnwindArg::Auto => api::Unwind::Auto,
            UnwindArg::Fp => api::Unwind::Fp,
            UnwindArg::Dwarf => api::Unwind::Dwarf,
        }
    }
}

/// Longest any one step may take beyond the Watch interval.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);

async fn connect(socket: &Path) -> anyhow::Result<ProfilerClient<Channel>> {
    let channel = profctl::requests::connect::unix_channel(socket, None)
        .await
        .with_context(|| format!("cannot connect to profd on {}", socket.display()))?;
    Ok(ProfilerClient::new(channel))
}

/// Milliseconds since `t0`.
fn ms_since(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1000.0
}

/// One run's figures, in milliseconds from the Attach call.
struct Run {
    attach: f64,
    first: f64,
    samples: f64,
}

async fn step<T, F>(what: &str, limit: Duration, fut: F) -> anyhow::Result<T>
where
    F: std::future::Future<Output = Result<T, tonic::Status>>,
{
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(status)) => bail!("{what}: {} ({:?})", status.message(), status.code()),
        Err(_) => bail!("{what}: no answer within {limit:?}"),
    }
}

async fn one_run(client: &mut ProfilerClient<Channel>, args: &Args) -> anyhow::Result<Run> {
    let limit = Duration::from_millis(u64::from(args.interval_ms)) + STEP_TIMEOUT;
    let request = api::AttachRequest {
        pid: args.pid,
        frequency_hz: args.freq,
        unwind: api::Unwind::from(args.unwind) as i32,
        ..Default::default()
    };
    let t0 = Instant::now();
    let attached = step("Attach", STEP_TIMEOUT, client.attach(request)).await?;
    let attach = ms_since(t0);
    let session = attached
        .into_inner()
        .session
        .context("Attach replied without a session")?;
    let watch = api::WatchRequest {
        session_id: session.id,
        interval_ms: args.interval_ms,
        ..Default::default()
    };
    let mut stream = step("Watch", STEP_TIMEOUT, client.watch(watch))
        .await?
        .into_inner();
    let mut first = None;
    let samples = loop {
        let msg = step("Watch message", limit, stream.message())
            .await?
            .context("Watch stream ended before any samples")?;
        let at = ms_since(t0);
        first.get_or_insert(at);
        let attributed = msg
            .session
            .as_ref()
            .and_then(|s| s.totals.as_ref())
            .map_or(0, |t| t.attributed);
        if attributed > 0 {
            break at;
        }
        if msg.r#final {
            bail!("session {} ended before any samples", session.id);
        }
    };
    step(
        "Stop",
        STEP_TIMEOUT,
        client.stop(api::StopRequest {
            session_id: session.id,
        }),
    )
    .await?;
    while let Some(msg) = step("Watch message after Stop", limit, stream.message()).await? {
        if msg.r#final {
            break;
        }
    }
    Ok(Run {
        attach,
        first: first.unwrap_or(samples),
        samples,
    })
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn max(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let mut client = connect(&args.socket).await?;
    println!(
        "{:>4} {:>10} {:>12} {:>14}",
        "run", "attach ms", "snapshot ms", "samples ms"
    );
    let mut runs = Vec::with_capacity(args.runs);
    for i in 1..=args.runs {
        let run = one_run(&mut client, &args)
            .await
            .with_context(|| format!("run {i}"))?;
        println!(
            "{i:>4} {:>10.1} {:>12.1} {:>14.1}",
            run.attach, run.first, run.samples
        );
        runs.push(run);
        tokio::time::sleep(Duration::from_millis(args.pause_ms)).await;
    }
    let mut attach: Vec<f64> = runs.iter().map(|r| r.attach).collect();
    let mut first: Vec<f64> = runs.iter().map(|r| r.first).collect();
    let mut samples: Vec<f64> = runs.iter().map(|r| r.samples).collect();
    let (attach_max, first_max, samples_max) = (max(&attach), max(&first), max(&samples));
    let (attach_med, first_med, samples_med) = (
        median(&mut attach),
        median(&mut first),
        median(&mut samples),
    );
    println!(
        "Attach reply:                     median {attach_med:7.1} ms, max {attach_max:7.1} ms"
    );
    println!("first Watch message (snapshot):   median {first_med:7.1} ms, max {first_max:7.1} ms");
    println!(
        "first Watch message with samples: median {samples_med:7.1} ms, max {samples_max:7.1} ms (interval {} ms)",
        args.interval_ms
    );
    println!(
        "summary runs={} interval_ms={} attach_median={attach_med:.1} attach_max={attach_max:.1} \
         snapshot_median={first_med:.1} snapshot_max={first_max:.1} \
         samples_median={samples_med:.1} samples_max={samples_max:.1}",
        args.runs, args.interval_ms
    );
    Ok(())
}
