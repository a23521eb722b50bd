//! `profd` command line: flags and the settings file merged into a checked
//! `Config` (`--check-config` shows it), logging (plain lines with a
//! priority prefix when stderr is the journal), a socket systemd passed,
//! and the daemon run until SIGTERM or SIGINT; `profd token` adds a token
//! to a tokens file, `profd schema clickhouse` prints the backend's schema,
//! `profd man` and `profd completions SHELL` print the man page and shell
//! completions.
use anyhow::Context;
use clap::{Args, CommandFactory, Parser, Subcommand};
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
  profd schema clickhouse --cluster fleet | clickhouse-client --multiquery
                                         the tables continuous windows go to
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
    /// Print the schema a backend needs to take continuous windows: the
    /// statements to run, in order (docs/fleet.md).
    Schema(SchemaArgs),
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

#[derive(Debug, Args)]
struct SchemaArgs {
    /// The backend: clickhouse.
    #[arg(value_parser = ["clickhouse"])]
    backend: String,
    /// The database the tables go in.
    #[arg(long, default_value = "profd")]
    database: String,
    /// A cluster of the servers' remote_servers: local tables on each
    /// server (run the statements on every one), and Distributed tables
    /// over them, sharded by host.
    #[arg(long, value_name = "NAME")]
    cluster: Option<String>,
    /// With --cluster: replicated local tables (ReplicatedReplacingMergeTree
    /// with the {shard} and {replica} macros; needs Keeper or ZooKeeper).
    #[arg(long, requires = "cluster")]
    replicated: bool,
    /// Print instead the statements that add to tables an earlier profd
    /// made the columns they lack (a column already there is ClickHouse's
    /// error 44: run each statement alone).
    #[arg(long, conflicts_with = "migrate")]
    upgrade: bool,
    /// Print instead the statements that move a `stacks` table of the
    /// earlier layout (frames in every row) to the stack dictionary and
    /// rollups, keeping it as `stacks_v1` (docs/fleet.md, "Migration").
    #[arg(long)]
    migrate: bool,
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
    #[command(flatten)]
    flags: profd::Flags,
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
/// Try each sink's backend (reachable, credentials taken, schema there):
/// `--check-config` fails naming the first that cannot be used.
fn check_sinks(sinks: &[profd::SinkSettings]) -> anyhow::Result<()> {
    if sinks.is_empty() {
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let said = runtime.block_on(profd::probe_sinks(sinks));
    let mut failed = None;
    for (name, result) in said {
        match result {
            Ok(backend) => println!("# sink {name}: reachable ({backend})"),
            Err(err) => {
                println!("# sink {name}: cannot be used: {err}");
                failed.get_or_insert(format!("sink {name}: {err}"));
            }
        }
    }
    match failed {
        Some(err) => Err(anyhow::Error::msg(err)),
        None => Ok(()),
    }
}

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
            let token = profd::new_token(&t.tokens, &t.name, &t.role, &t.user)
                .map_err(anyhow::Error::msg)?;
            println!("{token}");
            return Ok(());
        }
        Some(Command::Schema(s)) => {
            let layout = profd::ClickHouseLayout {
                database: s.database,
                cluster: s.cluster,
                replicated: s.replicated,
            };
            let script = match (s.upgrade, s.migrate) {
                (true, _) => profd::clickhouse_upgrade(&layout),
                (_, true) => profd::clickhouse_migration(&layout),
                _ => profd::clickhouse_schema(&layout),
            };
            return print_all(script.map_err(anyhow::Error::msg)?.as_bytes());
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
    let file = profd::read_settings_file(args.config.as_deref()).map_err(anyhow::Error::msg)?;
    let read_from = file.as_ref().map(|(p, _)| p.clone());
    let settings = profd::settings(file, args.flags.0).map_err(anyhow::Error::msg)?;
    profd::check_socket_group(settings.config.socket_group.as_deref())?;
    if args.check_config {
        match &read_from {
            Some(path) => println!("# {}: valid; the settings in effect:", path.display()),
            None => println!(
                "# no settings file at {}: defaults and flags; the settings in effect:",
                profd::DEFAULT_SETTINGS_PATH
            ),
        }
        print!("{}", settings.to_toml());
        return check_sinks(&settings.config.sinks);
    }
    let mut config = settings.config;
    config.activated = activated_socket()?;
    init_logging(settings.log_level);
    if let Some(path) = &read_from {
        tracing::info!(config = %path.display(), "settings read");
    }
    raise_fd_limit();
    profd::tune_allocator();
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
