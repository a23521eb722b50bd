//! `profd` command line: flags and the settings file merged into a checked
//! `Config` (`--check-config` shows it), logging (plain lines with a
//! priority prefix when stderr is the journal), a socket systemd passed,
//! and the daemon run until SIGTERM or SIGINT; `profd token` adds a token
//! to a tokens file, `profd man` and `profd completions SHELL` print the
//! man page and shell completions.
use anyhow::Context;
use clap::{Args, CommandFactory, Parser, Subcommand};
use profd::config::{self, Layer, LimitsLayer, MetricsLayer, RemoteLayer, StateLayer};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::signal::unix::{signal, SignalKind};

const EXAMPLES: &str = "\
Examples:
  profd                                  serve on /run/profd/profd.sock, settings
                                         from /etc/profd/profd.toml if it exists
  profd --check-config                   check the settings and print them
  profd --config ./profd.toml --check-config
  profd --max-sessions 8 --log-level debug
                                         flags override the settings file
  profd --listen 0.0.0.0:7443 --tls-cert cert.pem --tls-key key.pem --tokens tokens
                                         also serve remote clients over TLS, and
                                         the web dashboard at https://HOST:7443/
  profd --metrics 127.0.0.1:9464         Prometheus metrics on /metrics
  profd token --tokens /etc/profd/tokens --name dash --role read-only --user root
  profd man > profd.8; profd completions bash > /usr/share/bash-completion/completions/profd

Every flag has a key in the settings file (shown as `config: KEY`); a flag
given on the command line wins over the file. Under systemd, profd takes the
socket profd.socket passes (socket activation), says READY=1 once it serves,
and logs plain lines with priorities to the journal.";

/// profd: system-wide sampling profiler daemon with a gRPC API.
#[derive(Debug, Parser)]
#[command(
    name = "profd",
    version,
    about = "System-wide sampling profiler daemon with a gRPC API",
    args_conflicts_with_subcommands = true,
    after_help = EXAMPLES
)]
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
    /// Print profd's man page (roff) on standard output.
    Man,
    /// Print a completion script for a shell on standard output.
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
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

fn positive(s: &str) -> Result<usize, String> {
    config::flag(s, config::positive)
}
fn buckets(s: &str) -> Result<u32, String> {
    config::flag(s, config::buckets)
}
fn frequency(s: &str) -> Result<u32, String> {
    config::flag(s, config::frequency)
}
fn seconds(s: &str) -> Result<u64, String> {
    config::flag(s, config::seconds)
}
fn ring_pages(s: &str) -> Result<usize, String> {
    config::flag(s, config::ring_pages)
}
fn days(s: &str) -> Result<f64, String> {
    config::flag(s, config::days)
}
fn bytes(s: &str) -> Result<u64, String> {
    config::flag(s, config::bytes)
}
fn log_level(s: &str) -> Result<String, String> {
    config::log_level(&toml::Value::String(s.to_string()))
}
fn kernel_frames(s: &str) -> Result<String, String> {
    config::kernel_frames(&toml::Value::String(s.to_string()))
}
fn addr(s: &str) -> Result<SocketAddr, String> {
    config::addr(&toml::Value::String(s.to_string()))
}
fn grant(s: &str) -> Result<String, String> {
    config::grant(&toml::Value::String(s.to_string()))
}
fn origin(s: &str) -> Result<String, String> {
    config::origin(&toml::Value::String(s.to_string()))
}

#[derive(Debug, Args)]
struct DaemonArgs {
    /// Settings file (TOML). Default: /etc/profd/profd.toml, used when it
    /// exists; a file named here must exist.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Check the settings file and flags, print the settings in effect (or
    /// what is wrong) and exit: 0 when they are valid, 1 when not.
    #[arg(long)]
    check_config: bool,
    /// Unix socket to serve the profd.v1 gRPC API on (config: socket;
    /// default /run/profd/profd.sock). Ignored when systemd passes one.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Group owning the socket (mode 0660); its members may connect
    /// (config: socket_group). Default: `profd` when that group exists, else
    /// root's group.
    #[arg(long, value_name = "GROUP")]
    socket_group: Option<String>,
    /// Let members of GROUP profile the processes of USER (repeatable;
    /// config: grants = ["GROUP:USER"], replaced by the flags when given).
    #[arg(long = "grant", value_name = "GROUP:USER", value_parser = grant)]
    grants: Vec<String>,
    /// Also serve on this TCP address, TLS only; needs --tls-cert, --tls-key
    /// and --tokens (config: remote.listen).
    #[arg(long, value_name = "ADDR:PORT", value_parser = addr)]
    listen: Option<SocketAddr>,
    /// PEM certificate chain of the TLS listener (config: remote.tls_cert).
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of the TLS listener (config: remote.tls_key).
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// Require client certificates signed by this PEM CA, mutual TLS
    /// (config: remote.tls_client_ca).
    #[arg(long, value_name = "FILE")]
    tls_client_ca: Option<PathBuf>,
    /// Bearer tokens accepted on the TLS listener; `profd token` makes them
    /// (config: remote.tokens).
    #[arg(long, value_name = "FILE")]
    tokens: Option<PathBuf>,
    /// Let pages of this origin (`https://host:port`) call the API on the
    /// TLS listener with grpc-web (CORS; repeatable; config:
    /// remote.cors_origins = [...], replaced by the flags when given).
    /// Default: none, only the dashboard the listener serves itself.
    #[arg(long = "cors-origin", value_name = "ORIGIN", value_parser = origin)]
    cors_origins: Vec<String>,
    /// Most sessions running at once (config: limits.max_sessions; default 64).
    #[arg(long, value_name = "N", value_parser = positive)]
    max_sessions: Option<usize>,
    /// Most sessions one user runs at once (config:
    /// limits.max_sessions_per_caller; default 16).
    #[arg(long, value_name = "N", value_parser = positive)]
    max_sessions_per_caller: Option<usize>,
    /// Highest sampling frequency in Hz (config: limits.max_frequency;
    /// default: the kernel's perf_event_max_sample_rate).
    #[arg(long, value_name = "HZ", value_parser = frequency)]
    max_frequency: Option<u32>,
    /// Longest session in seconds; sessions asking for no duration get this
    /// (config: limits.max_duration; default: unlimited).
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    max_duration: Option<u64>,
    /// Unique stacks one session keeps; samples of further new stacks are
    /// counted under `[stack limit reached]` (config: limits.max_stacks;
    /// default 250000).
    #[arg(long, value_name = "N", value_parser = positive)]
    max_stacks: Option<usize>,
    /// Connections each listener (the Unix socket, the TLS listener) holds
    /// at once; more are closed at once. Root may open 8 more on the Unix
    /// socket (config: limits.max_connections; default: a quarter of the
    /// open-files limit, from 16 to 4096).
    #[arg(long, value_name = "N", value_parser = positive)]
    max_connections: Option<usize>,
    /// Seconds a new connection has to finish its TLS handshake and send
    /// the HTTP/2 preface (config: limits.handshake_timeout; default 10).
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    handshake_timeout: Option<u64>,
    /// Seconds a connection whose client sends nothing is kept (over
    /// HTTP/1.1: on which nothing moves); HTTP/2 clients are pinged well
    /// before (config: limits.idle_timeout; default 120).
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    idle_timeout: Option<u64>,
    /// Most buckets one histogram may have, 8 bytes each in memory while
    /// it is made (config: limits.max_histogram_buckets; default 1048576).
    #[arg(long, value_name = "N", value_parser = buckets)]
    max_histogram_buckets: Option<u32>,
    /// Histogram, export and view requests answered at once; more are
    /// refused (config: limits.max_concurrent_exports; default 4).
    #[arg(long, value_name = "N", value_parser = positive)]
    max_concurrent_exports: Option<usize>,
    /// Data pages of each per-CPU ring, a power of two (config: ring_pages;
    /// default 128, or 512 for sessions that copy user stacks). Smaller
    /// rings lose samples (counted as lost) under load.
    #[arg(long, value_name = "PAGES", value_parser = ring_pages)]
    ring_pages: Option<usize>,
    /// Directory ended sessions are kept in across restarts, pprof and
    /// metadata, created mode 0700 (config: state.dir; default
    /// /var/lib/profd).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Keep nothing on disk: sessions end with the daemon (config:
    /// state.persist = false).
    #[arg(long, conflicts_with_all = ["state_dir", "retain_sessions", "retain_days", "retain_bytes", "checkpoint_interval"])]
    no_persist: bool,
    /// Most sessions kept in the state directory; the oldest go first
    /// (config: state.retain_sessions; default 1000).
    #[arg(long, value_name = "N", value_parser = positive)]
    retain_sessions: Option<usize>,
    /// Days an ended session is kept in the state directory, fractions
    /// allowed (config: state.retain_days; default 30).
    #[arg(long, value_name = "DAYS", value_parser = days)]
    retain_days: Option<f64>,
    /// Most bytes the state directory keeps (suffixes K, M, G, T: powers of
    /// 1024); the oldest sessions go first (config: state.retain_bytes;
    /// default 1G).
    #[arg(long, value_name = "BYTES", value_parser = bytes)]
    retain_bytes: Option<u64>,
    /// Seconds between saves of a running session to the state directory
    /// (checkpoints: what a killed daemon's sessions keep) (config:
    /// state.checkpoint_interval; default 60).
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    checkpoint_interval: Option<u64>,
    /// Serve Prometheus metrics over plain HTTP on ADDR:PORT at /metrics
    /// (config: metrics.listen; default: off).
    #[arg(long, value_name = "ADDR:PORT", value_parser = addr)]
    metrics: Option<SocketAddr>,
    /// Log level: error, warn, info, debug or trace (config: log_level;
    /// default info).
    #[arg(long, value_name = "LEVEL", value_parser = log_level)]
    log_level: Option<String>,
    /// What callers other than root are shown of kernel frames: auto (as
    /// the kernel would show them: kptr_restrict, perf_event_paranoid),
    /// full, names (without addresses) or folded (one [kernel] frame)
    /// (config: kernel_frames; default auto).
    #[arg(long, value_name = "MODE", value_parser = kernel_frames)]
    kernel_frames: Option<String>,
}

impl DaemonArgs {
    /// The settings the flags given set (a layer over the file's).
    fn layer(&self) -> Layer {
        let state_flag = self.state_dir.is_some()
            || self.retain_sessions.is_some()
            || self.retain_days.is_some()
            || self.retain_bytes.is_some()
            || self.checkpoint_interval.is_some();
        Layer {
            socket: self.socket.clone(),
            socket_group: self.socket_group.clone(),
            grants: (!self.grants.is_empty()).then(|| self.grants.clone()),
            ring_pages: self.ring_pages,
            log_level: self.log_level.clone(),
            kernel_frames: self.kernel_frames.clone(),
            limits: LimitsLayer {
                max_sessions: self.max_sessions,
                max_sessions_per_caller: self.max_sessions_per_caller,
                max_frequency: self.max_frequency,
                max_duration: self.max_duration,
                max_stacks: self.max_stacks,
                max_connections: self.max_connections,
                handshake_timeout: self.handshake_timeout,
                idle_timeout: self.idle_timeout,
                max_histogram_buckets: self.max_histogram_buckets,
                max_concurrent_exports: self.max_concurrent_exports,
            },
            remote: RemoteLayer {
                listen: self.listen,
                tls_cert: self.tls_cert.clone(),
                tls_key: self.tls_key.clone(),
                tls_client_ca: self.tls_client_ca.clone(),
                tokens: self.tokens.clone(),
                cors_origins: (!self.cors_origins.is_empty()).then(|| self.cors_origins.clone()),
            },
            state: StateLayer {
                persist: if self.no_persist {
                    Some(false)
                } else {
                    state_flag.then_some(true)
                },
                dir: self.state_dir.clone(),
                retain_sessions: self.retain_sessions,
                retain_days: self.retain_days,
                retain_bytes: self.retain_bytes,
                checkpoint_interval: self.checkpoint_interval,
            },
            metrics: MetricsLayer {
                listen: self.metrics,
            },
        }
    }
}

fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // Help and version exit 0; a bad command line exits 1 as every
            // other error does.
            return if e.use_stderr() {
                std::process::ExitCode::FAILURE
            } else {
                std::process::ExitCode::SUCCESS
            };
        }
    };
    match run(cli) {
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

/// Whether stderr is the journal: `JOURNAL_STREAM` names its device and
/// inode (it may be inherited by a process whose stderr is elsewhere).
fn stderr_is_journal() -> bool {
    let Some(want) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    match rustix::fs::fstat(std::io::stderr()) {
        Ok(st) => want.to_str() == Some(&format!("{}:{}", st.st_dev, st.st_ino)),
        Err(_) => false,
    }
}

/// Journal lines: `<PRIORITY>LEVEL message fields`, no time and no colour
/// (the journal records both the time and the priority).
struct JournalFormat<F>(F);

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for JournalFormat<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let level = *event.metadata().level();
        // syslog priorities: err, warning, info, debug.
        let priority = match level {
            tracing::Level::ERROR => 3,
            tracing::Level::WARN => 4,
            tracing::Level::INFO => 6,
            _ => 7,
        };
        write!(writer, "<{priority}>{level} ")?;
        self.0.format_event(ctx, writer, event)
    }
}

fn init_logging(level: tracing::Level) {
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_target(false);
    if stderr_is_journal() {
        let plain = tracing_subscriber::fmt::format()
            .without_time()
            .with_ansi(false)
            .with_level(false)
            .with_target(false);
        builder
            .with_ansi(false)
            .event_format(JournalFormat(plain))
            .init();
    } else {
        use std::io::IsTerminal;
        builder.with_ansi(std::io::stderr().is_terminal()).init();
    }
}

/// The listening socket systemd passed (`LISTEN_FDS`, socket activation),
/// if any: one Unix stream socket. Read before any thread starts (it clears
/// the variables).
fn activated_socket() -> anyhow::Result<Option<Arc<std::os::unix::net::UnixListener>>> {
    if std::env::var_os("LISTEN_FDS").is_none() {
        return Ok(None);
    }
    let mut fds = listenfd::ListenFd::from_env();
    match fds.len() {
        0 => return Ok(None),
        1 => {}
        n => anyhow::bail!(
            "systemd passed {n} sockets: profd serves one Unix stream socket (one ListenStream= path in profd.socket)"
        ),
    }
    match fds.take_unix_listener(0) {
        Ok(Some(listener)) => Ok(Some(Arc::new(listener))),
        Ok(None) => Ok(None),
        Err(err) => {
            if let Ok(Some(_)) = fds.take_tcp_listener(0) {
                anyhow::bail!(
                    "systemd passed a TCP socket: profd takes only a Unix stream socket from systemd (ListenStream=/run/profd/profd.sock); \
                     serve TCP with --listen or remote.listen, which is TLS with tokens"
                );
            }
            anyhow::bail!("the socket systemd passed is not a Unix stream socket: {err}")
        }
    }
}

/// Write to stdout; a reader that went away (`| head`) is not an error.
fn print_all(bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(bytes) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Some(Command::Token(t)) => {
            let token = profd::auth::new_token(&t.tokens, &t.name, &t.role, &t.user)
                .map_err(anyhow::Error::msg)?;
            println!("{token}");
            return Ok(());
        }
        Some(Command::Man) => {
            let mut page = Vec::new();
            clap_mangen::Man::new(Cli::command())
                .section("8")
                .render(&mut page)?;
            return print_all(&page);
        }
        Some(Command::Completions { shell }) => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "profd", &mut script);
            return print_all(&script);
        }
        None => {}
    }
    let args = cli.daemon;
    let file = config::read(args.config.as_deref()).map_err(anyhow::Error::msg)?;
    let read_from = file.as_ref().map(|(p, _)| p.clone());
    let settings = config::settings(file, args.layer()).map_err(anyhow::Error::msg)?;
    profd::check_socket_group(settings.config.socket_group.as_deref())?;
    if args.check_config {
        match &read_from {
            Some(path) => println!("# {}: valid; the settings in effect:", path.display()),
            None => println!(
                "# no settings file at {}: defaults and flags; the settings in effect:",
                config::DEFAULT_PATH
            ),
        }
        print!("{}", settings.to_toml());
        return Ok(());
    }
    let mut config = settings.config;
    config.activated = activated_socket()?;
    init_logging(settings.log_level);
    if let Some(path) = &read_from {
        tracing::info!(config = %path.display(), "settings read");
    }
    raise_fd_limit();
    profd::perf::tune_allocator();
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
