//! `profd` command line: parse flags, set up logging, run the daemon until
//! SIGTERM or SIGINT; `profd token` adds a token to a tokens file.
use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use profd::auth::{Grant, TlsFiles};
use profd::registry::Limits;
use profd::store::{Persist, Retention};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tokio::signal::unix::{signal, SignalKind};

/// profd: system-wide sampling profiler daemon with a gRPC API.
#[derive(Debug, Parser)]
#[command(version, about, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(flatten)]
    daemon: DaemonArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Make a new bearer token for the TLS listener: appends its hash to the
    /// tokens file (created mode 0600) and prints the token.
    Token(TokenArgs),
}

#[derive(Debug, Args)]
struct TokenArgs {
    /// The tokens file (the daemon's --tokens).
    #[arg(long, value_name = "FILE")]
    tokens: PathBuf,
    /// A one-word name for the token, shown in logs and messages.
    #[arg(long)]
    name: String,
    /// read-only (list, watch, read, export) or operator (also attach, stop).
    #[arg(long, value_parser = ["read-only", "operator"])]
    role: String,
    /// The local user the token acts as: it may profile what that user may
    /// (root: everything) and owns the sessions it starts.
    #[arg(long)]
    user: String,
}

#[derive(Debug, Args)]
struct DaemonArgs {
    /// Unix socket to serve the profd.v1 gRPC API on.
    #[arg(long, default_value = profd_common::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Group owning the socket (mode 0660); its members may connect. Default:
    /// `profd` when that group exists, else root's group.
    #[arg(long, value_name = "GROUP")]
    socket_group: Option<String>,
    /// Let members of GROUP profile the processes of USER (repeatable).
    #[arg(long = "grant", value_name = "GROUP:USER")]
    grants: Vec<Grant>,
    /// Also serve on this TCP address, TLS only (needs --tls-cert, --tls-key
    /// and --tokens).
    #[arg(long, value_name = "ADDR:PORT", requires_all = ["tls_cert", "tls_key", "tokens"])]
    listen: Option<SocketAddr>,
    /// PEM certificate chain of the TLS listener.
    #[arg(long, value_name = "FILE", requires = "listen")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of the TLS listener.
    #[arg(long, value_name = "FILE", requires = "listen")]
    tls_key: Option<PathBuf>,
    /// Require client certificates signed by this PEM CA (mutual TLS).
    #[arg(long, value_name = "FILE", requires = "listen")]
    tls_client_ca: Option<PathBuf>,
    /// Bearer tokens accepted on the TLS listener (`profd token` makes them).
    #[arg(long, value_name = "FILE", requires = "listen")]
    tokens: Option<PathBuf>,
    /// Most sessions running at once.
    #[arg(long, default_value_t = Limits::default().max_sessions)]
    max_sessions: usize,
    /// Most sessions one user runs at once.
    #[arg(long, default_value_t = Limits::default().max_sessions_per_caller)]
    max_sessions_per_caller: usize,
    /// Highest sampling frequency in Hz (default: the kernel's
    /// perf_event_max_sample_rate).
    #[arg(long, value_name = "HZ")]
    max_frequency: Option<u32>,
    /// Longest session in seconds; sessions asking for no duration get this
    /// (default: unlimited).
    #[arg(long, value_name = "SECS")]
    max_duration: Option<u64>,
    /// Unique stacks one session keeps; samples of further new stacks are
    /// counted under `[stack limit reached]`.
    #[arg(long, default_value_t = Limits::default().max_stacks)]
    max_stacks: usize,
    /// Data pages of each per-CPU ring, a power of two (default: 128, or
    /// 512 for sessions that copy user stacks). Smaller rings lose samples
    /// (counted as lost) under load.
    #[arg(long, value_name = "PAGES")]
    ring_pages: Option<usize>,
    /// Directory ended sessions are kept in across restarts (pprof and
    /// metadata; created mode 0700).
    #[arg(long, value_name = "DIR", default_value = profd::store::DEFAULT_STATE_DIR)]
    state_dir: PathBuf,
    /// Keep nothing on disk: sessions end with the daemon.
    #[arg(long, conflicts_with_all = ["state_dir", "retain_sessions", "retain_days", "retain_bytes"])]
    no_persist: bool,
    /// Most sessions kept in the state directory; the oldest go first.
    #[arg(long, value_name = "N", default_value_t = Retention::default().max_sessions)]
    retain_sessions: usize,
    /// Days an ended session is kept in the state directory (fractions allowed).
    #[arg(long, value_name = "DAYS", default_value_t = 30.0)]
    retain_days: f64,
    /// Most bytes the state directory keeps (suffixes K, M, G, T: powers of
    /// 1024); the oldest sessions go first.
    #[arg(long, value_name = "BYTES", default_value = "1G", value_parser = profd::store::parse_bytes)]
    retain_bytes: u64,
    /// Log filter level: error, warn, info, debug or trace.
    #[arg(long, default_value = "info")]
    log_level: tracing::Level,
}

impl DaemonArgs {
    fn config(self) -> anyhow::Result<profd::Config> {
        let kernel_max = profd::registry::max_sample_rate();
        match self.max_frequency {
            Some(0) => anyhow::bail!("--max-frequency 0 allows no sampling: use 1 or more"),
            Some(f) if f > kernel_max => anyhow::bail!(
                "--max-frequency {f} is above the kernel's perf_event_max_sample_rate ({kernel_max}): use at most that"
            ),
            _ => {}
        }
        for (flag, n) in [
            ("--max-sessions", self.max_sessions),
            ("--max-sessions-per-caller", self.max_sessions_per_caller),
            ("--max-stacks", self.max_stacks),
        ] {
            anyhow::ensure!(n > 0, "{flag} 0 allows nothing: use 1 or more");
        }
        anyhow::ensure!(
            self.max_duration != Some(0),
            "--max-duration 0 allows nothing: use 1 or more seconds, or leave it out"
        );
        anyhow::ensure!(
            self.retain_sessions > 0,
            "--retain-sessions 0 keeps nothing: use 1 or more, or --no-persist"
        );
        anyhow::ensure!(
            self.retain_days.is_finite() && self.retain_days > 0.0 && self.retain_days <= 36500.0,
            "--retain-days {} is not a number of days: use more than 0 (fractions allowed), at most 36500",
            self.retain_days
        );
        anyhow::ensure!(
            self.retain_bytes > 0,
            "--retain-bytes 0 keeps nothing: use a size such as 512M, or --no-persist"
        );
        let mut config = profd::Config::new(self.socket);
        if !self.no_persist {
            config.persist = Some(Persist {
                dir: self.state_dir,
                retention: Retention {
                    max_sessions: self.retain_sessions,
                    max_age: Duration::from_secs_f64(self.retain_days * 24.0 * 3600.0),
                    max_bytes: self.retain_bytes,
                },
            });
        }
        if let Some(n) = self.ring_pages {
            anyhow::ensure!(
                n.is_power_of_two(),
                "--ring-pages {n} is not a power of two: use 1, 2, 4, ... (the kernel's rule)"
            );
        }
        config.ring_pages = self.ring_pages;
        config.socket_group = self.socket_group;
        config.grants = self.grants;
        config.limits = Limits {
            max_sessions: self.max_sessions,
            max_sessions_per_caller: self.max_sessions_per_caller,
            max_frequency_hz: self.max_frequency,
            max_duration: self.max_duration.map(Duration::from_secs),
            max_stacks: self.max_stacks,
        };
        if let (Some(listen), Some(cert), Some(key), Some(tokens)) =
            (self.listen, self.tls_cert, self.tls_key, self.tokens)
        {
            config.remote = Some(profd::Remote {
                listen,
                tls: TlsFiles {
                    cert,
                    key,
                    client_ca: self.tls_client_ca,
                },
                tokens,
            });
        }
        Ok(config)
    }
}

fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("profd: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Sessions hold the files of their targets' binaries (for names and
/// histograms) and a pidfd each: use the hard limit on open files, not the
/// soft one (often 1024).
fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if let Err(err) = setrlimit(Resource::Nofile, limit) {
            tracing::warn!(%err, "cannot raise the open-files limit");
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    if let Some(Command::Token(t)) = cli.command {
        let token = profd::auth::new_token(&t.tokens, &t.name, &t.role, &t.user)
            .map_err(anyhow::Error::msg)?;
        println!("{token}");
        return Ok(());
    }
    let args = cli.daemon;
    tracing_subscriber::fmt()
        .with_max_level(args.log_level)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let config = args.config()?;
    raise_fd_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let daemon = profd::Daemon::bind(config).await?;
        let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
        daemon
            .serve(async move {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            })
            .await?;
        anyhow::Ok(())
    })
}
