//! Command-line syntax (clap derive) and its validation into plain values;
//! no I/O and no daemon calls here.
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Parser, Subcommand, ValueEnum};
use profd_common::api;
use tonic::transport::Uri;

pub use crate::error::{ArgError, PLAINTEXT_REFUSED, RUN_REFUSED};

use crate::files::symbols::{parse_symbol_source, SymbolSource};
use crate::requests::connect::{Remote, Target};
pub use crate::requests::fleet::{FleetGroupArg, TableArg};
pub use crate::views::ranking::{SortArg, DEFAULT_TOP};

/// Command-line client of the profd sampling profiler daemon.
#[derive(Debug, Parser)]
#[command(
    name = "profctl",
    version,
    about = "Command-line client of the profd sampling profiler daemon",
    propagate_version = true,
    after_help = EXAMPLES
)]
pub struct Cli {
    /// Unix socket of the profd daemon.
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        env = "PROFD_SOCKET",
        default_value = profd_common::DEFAULT_SOCKET
    )]
    pub socket: PathBuf,

    /// Print whole function names: by default C++ and Rust template
    /// arguments and parameter lists are elided (`std::map<...>::find(...)`,
    /// with an ellipsis character) and long names are cut in the middle.
    #[arg(long, global = true)]
    pub full_names: bool,

    /// Show each function's id (`#ID`) before its name in tables and
    /// views; give `#ID` where a function is asked for.
    #[arg(long, global = true)]
    pub ids: bool,

    /// Where a remote daemon is and how to reach it.
    #[command(flatten)]
    pub remote: RemoteArgs,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options for a remote profd, reached over TLS on its TCP listener.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Remote daemon")]
pub struct RemoteArgs {
    /// A remote profd's TLS listener, `https://HOST:PORT` (--socket is then
    /// ignored; plaintext is refused).
    #[arg(long, global = true, value_name = "URL", env = "PROFD_CONNECT")]
    pub connect: Option<String>,
    /// File holding the bearer token for the --connect daemon (surrounding
    /// whitespace ignored) [env: PROFD_TOKEN_FILE, or the token itself in
    /// PROFD_TOKEN].
    #[arg(long, global = true, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// PEM certificate(s) of the CA that signed the daemon's certificate
    /// (required with --connect).
    #[arg(long, global = true, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// PEM client certificate, for a daemon that requires one (with --tls-key).
    #[arg(long, global = true, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, global = true, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// The name the daemon's certificate must carry [default: the host of --connect].
    #[arg(long, global = true, value_name = "NAME")]
    pub tls_domain: Option<String>,
}

impl Cli {
    /// The daemon to talk to: the Unix socket, or the remote daemon of
    /// `--connect` with its TLS settings. Reads no files and no environment
    /// (the token's environment variables are read when connecting).
    pub fn target(&self) -> Result<Target, ArgError> {
        let r = &self.remote;
        let Some(url) = r
            .connect
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty())
        else {
            if r.token_file.is_some() {
                return Err(ArgError::TokenFileWithoutConnect);
            }
            let tls = [
                ("--tls-ca", r.tls_ca.is_some()),
                ("--tls-cert", r.tls_cert.is_some()),
                ("--tls-key", r.tls_key.is_some()),
                ("--tls-domain", r.tls_domain.is_some()),
            ];
            if let Some((flag, _)) = tls.iter().find(|(_, given)| *given) {
                return Err(ArgError::TlsWithoutConnect(flag));
            }
            return Ok(Target::Socket(self.socket.clone()));
        };
        let (url, host) = parse_connect_url(url)?;
        if matches!(self.command, Command::Run(_)) {
            return Err(ArgError::RunRemote);
        }
        let Some(ca) = r.tls_ca.clone() else {
            return Err(ArgError::NoCa(url));
        };
        let identity = match (&r.tls_cert, &r.tls_key) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            (Some(_), None) => return Err(ArgError::CertWithoutKey),
            (None, Some(_)) => return Err(ArgError::KeyWithoutCert),
            (None, None) => None,
        };
        let domain = match r.tls_domain.as_deref().map(str::trim) {
            Some("") => return Err(ArgError::EmptyDomain),
            Some(name) => name.to_string(),
            None => host,
        };
        Ok(Target::Remote(Remote {
            url,
            domain,
            ca,
            identity,
            token_file: r.token_file.clone(),
        }))
    }
}

const EXAMPLES: &str = "\
Examples:
  profctl attach 4242                  live table of process 4242 until Ctrl-C
  profctl run -- ./build/server --port 8080
                                       profile a command from its first moment
  profctl sessions                     the daemon's sessions, running and ended
  profctl report 3 --tree              the call tree of session 3
  profctl export 3 --format pprof -o cpu.pb.gz
  profctl query --since 15m --by service
                                       the continuous history, per service (root)
  profctl info                         daemon version, CPUs, kernel limits
  profctl --connect https://host:7443 --tls-ca ca.pem --token-file token sessions
                                       a remote daemon, over TLS

Members of the group profd reach the local daemon on /run/profd/profd.sock
(--socket, PROFD_SOCKET). `profctl man` prints this manual as roff and
`profctl completions SHELL` a completion script.";

/// Checks a `--connect` value and returns it as `https://HOST[:PORT]` with
/// its host (IPv6 addresses without brackets).
fn parse_connect_url(s: &str) -> Result<(String, String), ArgError> {
    match s.split_once("://") {
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("https") => {}
        Some(_) => return Err(ArgError::Plaintext),
        None => return Err(ArgError::NoScheme(s.to_string())),
    }
    let uri: Uri = s.parse().map_err(|_| ArgError::NotAUrl(s.to_string()))?;
    let Some(authority) = uri.authority() else {
        return Err(ArgError::NoHost(s.to_string()));
    };
    if authority.as_str().contains('@') {
        return Err(ArgError::UserName(s.to_string()));
    }
    if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
        return Err(ArgError::UrlPath(s.to_string()));
    }
    let host = authority.host();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return Err(ArgError::NoHost(s.to_string()));
    }
    Ok((format!("https://{authority}"), host.to_string()))
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Profile a running process: live table while sampling, final profile at the end.
    #[command(after_help = "\
Output: on stdout; live views only when stdout is a terminal, else the final
table or JSON document alone.

Examples:
  profctl attach 4242                       until Ctrl-C (q in the full-screen view)
  profctl attach 4242 --duration 30 --format json > profile.json
  profctl attach 4242 --freq 99 --window 10 --no-tui
  profctl attach 4242 --children --unwind dwarf
  profctl attach 4242 --duration 10 -o flame.svg")]
    Attach(AttachArgs),
    /// Start a command and profile it until it exits (or --duration elapses).
    #[command(after_help = "\
Output: the command keeps stdout; profctl's tables and JSON go to stderr,
live only when stderr is a terminal, else the final one alone; -o FILE
writes the profile to a file. Options go before the command (or before --):
an unknown one is an error, not the command.

Examples:
  profctl run -- make -j4                   until the command exits
  profctl run --duration 10 -o profile.json -- ./server
  profctl run -- xz -9 -c big > big.xz      the table on the terminal, not in big.xz
  profctl run --children -- sh -c './prepare && ./compute'
  profctl run -o cpu.pb.gz -- ./bench     also write the profile as pprof
  profctl run --output-format firefox -o timeline.json -- ./bench
                                            a timeline for the Firefox Profiler")]
    Run(RunArgs),
    /// List the daemon's sessions, running and ended (--all: also those of
    /// earlier daemon runs).
    #[command(after_help = "\
Examples:
  profctl sessions
  profctl sessions --all                    also sessions of earlier daemon runs")]
    Sessions(SessionsArgs),
    /// Stop a running session; its profile stays readable.
    #[command(after_help = "\
Examples:
  profctl stop 3
  profctl stop 3 && profctl report 3 --hot-path")]
    Stop(StopArgs),
    /// Show daemon facts: version, CPUs, sampling event, kernel limits, totals.
    #[command(after_help = "\
Examples:
  profctl info
  profctl --socket /tmp/profd.sock info     a daemon on another socket")]
    Info,
    /// Write a session's whole profile as pprof, folded stacks, an SVG flame
    /// graph, speedscope JSON, profctl's JSON or a Firefox Profiler timeline.
    #[command(after_help = "\
Examples:
  profctl export 3 --format pprof -o cpu.pb.gz && go tool pprof -top cpu.pb.gz
  profctl export 3 --format svg -o flame.svg
  profctl export 3 --format folded | flamegraph.pl > flame.svg")]
    Export(ExportArgs),
    /// Print a view of a live session or a saved pprof file: the flat table,
    /// call tree, callers/callees, hot path, threads or source lines.
    #[command(after_help = "\
Examples:
  profctl report 3                          the flat table, top 20
  profctl report 3 --tree --min-pct 2 --depth 8
  profctl report 3 --callers malloc --callees malloc
  profctl report 3 --lines compute_hash
  profctl report cpu.pb.gz --hot-path       a saved pprof file, no daemon needed")]
    Report(ReportArgs),
    /// Compare two profiles: each function's share of its profile's
    /// samples (self and inclusive) in BASE and NEW, biggest changes first.
    ///
    /// BASE and NEW are each a session id, a saved pprof file, or a time
    /// range of the continuous history (FROM..TO, times as --from takes
    /// them); shares are over each side's own total, so profiles of
    /// different lengths compare. --pprof writes the pair for
    /// `go tool pprof -diff_base`.
    #[command(after_help = "\
Examples:
  profctl diff 3 4                                   two sessions
  profctl diff before.pb.gz after.pb.gz              two saved profiles
  profctl diff 2026-12-02T09:00:00Z..2026-12-02T09:10:00Z \\
               2026-12-02T10:00:00Z..2026-12-02T10:10:00Z --service nginx.service
  profctl diff 3 4 --pprof out && go tool pprof -top -diff_base out/base.pb.gz out/new.pb.gz")]
    Diff(DiffArgs),
    /// Read the continuous profiling history (root only): the services
    /// asked for over a time range, as a report view or an export.
    ///
    /// The windows of the range are merged into one profile, printed as
    /// `profctl report` prints a session (any of its views) or written as
    /// `profctl export` writes one (--format); --list shows the windows and
    /// services kept instead.
    #[command(after_help = "\
Examples:
  profctl query --since 15m                 every service, the last 15 minutes
  profctl query --since 1h --service nginx.service --tree
  profctl query --since 2h --by service --format svg -o services.svg
  profctl query --from 2026-12-02T09:00:00Z --to 2026-12-02T10:00:00Z --pid 4242
  profctl query --since 1d --service db --callers malloc
  profctl query --since 1h --namespace shop --by pod
  profctl query --since 6h --format pprof -o history.pb.gz
  profctl query --list --since 1h           the windows and services kept

The history is read by root only (on the socket, or a token whose user is
root): it covers every process on the host. Times are RFC 3339 in UTC or
Unix seconds; durations are like 30s, 15m, 2h, 1d.")]
    Query(QueryArgs),
    /// Answer across hosts from the ClickHouse tables that profd's
    /// ClickHouse sinks fill: the same views and exports as `query`,
    /// without a daemon.
    #[command(after_help = "\
Examples:
  profctl fleet --clickhouse http://ch:8123 --since 1h --service api.service
  profctl fleet --clickhouse http://ch:8123 --since 1h --by host
  profctl fleet --clickhouse http://ch:8123 --since 30m --host web-3 --tree
  profctl fleet --clickhouse http://ch:8123 --since 1d --callers malloc
  profctl fleet --clickhouse http://ch:8123 --since 6h --format pprof -o fleet.pb.gz

Each window counts once however often it was inserted (docs/fleet.md).
Times are RFC 3339 in UTC or Unix seconds; durations are like 30s, 15m, 2h, 1d.")]
    Fleet(FleetArgs),
    /// Drop the partitions of profd's ClickHouse tables older than each
    /// table's keep: print the statements, or run them with --run.
    #[command(after_help = "\
Examples:
  profctl retention --clickhouse http://ch:8123
  profctl retention --clickhouse http://ch:8123 --raw 3d --minutes 30d --hours 1y --run

On a cluster, run it against every server: it drops the local tables' partitions.")]
    Retention(RetentionArgs),
    /// Print a profil(3)-style PC histogram of one module of a session's
    /// target, and optionally write it as a gmon.out for gprof.
    #[command(after_help = "\
Examples:
  profctl histogram 3 --binary ./server --gmon gmon.out && gprof ./server gmon.out
  profctl histogram 3 --module libc.so.6 --offset 0x28000 --scale 16384 --buckets 4096")]
    Histogram(HistogramArgs),
    /// Ask the daemon's gRPC health service whether it serves: prints the
    /// status; exits 0 when SERVING, 1 otherwise (never starts a daemon).
    #[command(after_help = "\
Examples:
  profctl health                            the local daemon (for probes and scripts)
  profctl health --connect https://host:7443 --tls-ca ca.pem
                                            health needs no token")]
    Health(HealthArgs),
    /// Print profctl's manual page (roff) on standard output, or write one
    /// page per subcommand into a directory.
    #[command(after_help = "\
Examples:
  profctl man | man -l -
  profctl man --dir /usr/local/share/man/man1")]
    Man(ManArgs),
    /// Print a completion script for a shell on standard output.
    #[command(after_help = "\
Examples:
  profctl completions bash > /usr/share/bash-completion/completions/profctl
  profctl completions zsh > /usr/local/share/zsh/site-functions/_profctl
  profctl completions fish > ~/.config/fish/completions/profctl.fish")]
    Completions(CompletionsArgs),
}

/// `profctl health`.
#[derive(Debug, Args)]
pub struct HealthArgs {
    /// The service to ask about: empty for the daemon as a whole, or
    /// `profd.v1.Profiler`.
    #[arg(long, value_name = "NAME", default_value = "")]
    pub service: String,
}

/// `profctl man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write profctl.1 and one page per subcommand (profctl-attach.1, ...)
    /// into DIR (created if missing) instead of printing profctl.1.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// `profctl completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell the script is for.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// `profctl attach`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// Process id to profile (all its threads).
    #[arg(value_name = "PID")]
    pub pid: u32,
    /// How to sample and what to show.
    #[command(flatten)]
    pub options: ProfileOptions,
}

/// `profctl run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// How to sample and what to show.
    #[command(flatten)]
    pub options: ProfileOptions,
    /// The command to start and profile, with its arguments: after `--`,
    /// or from the first word that is not an option (an unknown option
    /// before it is a usage error, not a command).
    #[arg(
        value_name = "COMMAND",
        required = true,
        num_args = 1..,
        trailing_var_arg = true
    )]
    pub command: Vec<OsString>,
}

/// `profctl sessions`.
#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// Also list the sessions of earlier runs of the daemon, kept in its
    /// state directory (marked `*`).
    #[arg(long)]
    pub all: bool,
}

/// `profctl stop`.
#[derive(Debug, Args)]
pub struct StopArgs {
    /// Session id (see `profctl sessions`).
    #[arg(value_name = "ID")]
    pub id: u64,
}

/// Options shared by `attach` and `run`.
#[derive(Debug, Clone, Args)]
pub struct ProfileOptions {
    /// Sampling frequency per CPU, in Hz [default: the daemon's, 999].
    #[arg(long, value_name = "HZ")]
    pub freq: Option<u32>,
    /// Stop after this many seconds (fractions allowed) [default: until the
    /// target exits or Ctrl-C].
    #[arg(long, value_name = "SECS", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Seconds between live updates (at least 0.05).
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = parse_interval)]
    pub interval: Duration,
    /// Rows to show, 0 = all [default: 20 in tables, all in JSON].
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// Output format: live + final table, or one JSON document at the end.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Perf event that drives sampling (`cycles` needs a hardware PMU).
    #[arg(long, value_enum, default_value_t = EventArg::CpuClock)]
    pub event: EventArg,
    /// What is measured: `cpu` samples threads on the CPU; `off-cpu`
    /// weighs the stack each thread leaves the CPU with by the time until
    /// it runs again (sleep, I/O, locks, waiting for a CPU); `wall` both,
    /// as shares of the threads' wall-clock time. Off-CPU and wall figures
    /// are times.
    #[arg(long, value_enum, default_value_t = ModeArg::Cpu)]
    pub mode: ModeArg,
    /// How user stacks are followed: `auto` gives complete stacks with or
    /// without frame pointers; `fp` is the kernel's frame-pointer walk
    /// (cheapest; callers of frameless code are lost); `dwarf` unwinds user
    /// stack copies with the binaries' CFI.
    #[arg(long, value_enum, default_value_t = UnwindArg::Auto)]
    pub unwind: UnwindArg,
    /// Bytes of user stack copied per sample for DWARF unwinding: a multiple
    /// of 8, at most 65528 [default: the daemon's: 16384, and 65528 for a
    /// JVM or node].
    #[arg(long, value_name = "N")]
    pub stack_bytes: Option<u32>,
    /// Also show each function's figures over the last SECS seconds (1-600)
    /// beside the cumulative ones.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u32).range(1..=600))]
    pub window: Option<u32>,
    /// Table order, live and final: `exclusive` leads with the functions
    /// the time is spent in (as perf top and py-spy top do); `inclusive`
    /// with their callers (`_start` and `main` first, at 100 %).
    #[arg(long, value_enum, default_value_t = SortArg::Exclusive)]
    pub sort: SortArg,
    /// Print a plain refreshed table even on a terminal (no full-screen view).
    #[arg(long)]
    pub no_tui: bool,
    /// Also profile the processes the target forks from now on (and theirs),
    /// with samples per process in the header.
    #[arg(long)]
    pub children: bool,
    /// Also write the whole profile to FILE when the session ends, in the
    /// encoding its name ends with (see --output-format).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The encoding of -o's file, as `profctl export --format` [default:
    /// from FILE's name: .pb.gz/.pb/.pprof pprof, .folded folded, .svg svg,
    /// .speedscope.json speedscope, .json json].
    #[arg(long, value_enum, value_name = "FORMAT", requires = "output")]
    pub output_format: Option<ExportFormatArg>,
    /// Keep every sample's time, for a timeline (`--output-format firefox`
    /// keeps them too): 12 bytes per sample, the last 2,097,152 samples.
    /// CPU mode only.
    #[arg(long)]
    pub timeline: bool,
}

impl ProfileOptions {
    /// The `AttachRequest` these options ask for.
    pub fn attach_request(&self, pid: u32) -> api::AttachRequest {
        api::AttachRequest {
            pid,
            frequency_hz: self.freq,
            duration_ms: self.duration.map_or(0, duration_ms),
            event: api::Event::from(self.event) as i32,
            unwind: api::Unwind::from(self.unwind) as i32,
            stack_bytes: self.stack_bytes.unwrap_or(0),
            children: self.children,
            held: false,
            mode: api::Mode::from(self.mode) as i32,
            timeline: self.timeline || self.output_format == Some(ExportFormatArg::Firefox),
        }
    }

    /// The file `-o` asks for and its encoding (given, or from the file's
    /// name); an error says what to change.
    pub fn recording(&self) -> Result<Option<(PathBuf, ExportFormatArg)>, ArgError> {
        let Some(path) = &self.output else {
            return Ok(None);
        };
        if path == Path::new("-") || path.as_os_str().is_empty() {
            return Err(ArgError::OutputNotAFile);
        }
        match self
            .output_format
            .or_else(|| ExportFormatArg::from_file_name(path))
        {
            Some(format) => Ok(Some((path.clone(), format))),
            None => Err(ArgError::UnknownEncoding(path.clone())),
        }
    }

    /// Rows to show for the chosen format (`None` = all).
    pub fn row_limit(&self) -> Option<usize> {
        match (self.top, self.format) {
            (Some(0), _) => None,
            (Some(n), _) => Some(n),
            (None, Format::Table) => Some(DEFAULT_TOP),
            (None, Format::Json) => None,
        }
    }

    /// The Watch window in seconds (0 = cumulative only).
    pub fn window_s(&self) -> u32 {
        self.window.unwrap_or(0)
    }

    /// The Watch interval in milliseconds.
    pub fn interval_ms(&self) -> u32 {
        u32::try_from(self.interval.as_millis()).unwrap_or(u32::MAX)
    }
}

/// Output formats of `attach` and `run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned text table.
    Table,
    /// One JSON document at the end.
    Json,
}

/// Sampling events, as perf spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EventArg {
    /// Software timer; always available.
    CpuClock,
    /// Hardware cycle counter; the daemon falls back to cpu-clock without a PMU.
    Cycles,
}

impl From<EventArg> for api::Event {
    fn from(e: EventArg) -> Self {
        match e {
            EventArg::CpuClock => api::Event::CpuClock,
            EventArg::Cycles => api::Event::Cycles,
        }
    }
}

/// What a session measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// On-CPU samples.
    Cpu,
    /// Time off the CPU, by the stack each wait began with.
    OffCpu,
    /// On-CPU samples and off-CPU time: wall-clock time.
    Wall,
}

impl From<ModeArg> for api::Mode {
    fn from(m: ModeArg) -> Self {
        match m {
            ModeArg::Cpu => api::Mode::Cpu,
            ModeArg::OffCpu => api::Mode::OffCpu,
            ModeArg::Wall => api::Mode::Wall,
        }
    }
}

/// User stack unwinding methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UnwindArg {
    /// Complete stacks for code with or without frame pointers (the daemon
    /// picks the method).
    Auto,
    /// The kernel's frame-pointer walk.
    Fp,
    /// User stack copies unwound with DWARF CFI.
    Dwarf,
}

impl From<UnwindArg> for api::Unwind {
    fn from(u: UnwindArg) -> Self {
        match u {
            UnwindArg::Auto => api::Unwind::Auto,
            UnwindArg::Fp => api::Unwind::Fp,
            UnwindArg::Dwarf => api::Unwind::Dwarf,
        }
    }
}

/// `profctl export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Session id (see `profctl sessions`), or a saved pprof file to
    /// write in another encoding (no daemon needed).
    #[arg(value_name = "SESSION|FILE")]
    pub source: PathBuf,
    /// Naming stripped code away from its host.
    #[command(flatten)]
    pub symbols: Symbols,
    /// The encoding to write.
    #[arg(long, value_enum)]
    pub format: ExportFormatArg,
    /// The file to write, `-` for stdout.
    #[arg(short, long, value_name = "FILE", default_value = "-")]
    pub output: PathBuf,
}

/// `--symbols` of `report FILE`, `export FILE` and `fleet`.
#[derive(Debug, Clone, Args)]
pub struct Symbols {
    /// Name stripped code its host could not (`module!0xSTART`) from the
    /// debug files of a directory laid out by build id
    /// (`DIR/.build-id/xx/rest.debug`) or of a debuginfod server (http://
    /// or https:// URL); repeat to try several in turn.
    #[arg(long = "symbols", value_name = "URL|DIR", value_parser = parse_symbol_source)]
    pub sources: Vec<SymbolSource>,
}

/// Export encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormatArg {
    /// gzip'd pprof profile.proto, read by `go tool pprof`.
    Pprof,
    /// Folded stacks (`outer;...;inner count`), the FlameGraph input format.
    Folded,
    /// An SVG flame graph.
    Svg,
    /// speedscope JSON (also opened by the Firefox Profiler).
    Speedscope,
    /// The JSON document `--format json` prints.
    Json,
    /// The Firefox Profiler's processed profile (JSON): a timeline with a
    /// track per thread; only for sessions that keep sample times
    /// (`--timeline`).
    Firefox,
}

impl ExportFormatArg {
    /// The encoding a file's name calls for (`-o` of `run` and `attach`).
    pub fn from_file_name(path: &Path) -> Option<ExportFormatArg> {
        let name = path.file_name()?.to_str()?.to_ascii_lowercase();
        let ends = |suffixes: &[&str]| suffixes.iter().any(|s| name.ends_with(s));
        if ends(&[".pb.gz", ".pb", ".pprof", ".pprof.gz"]) {
            Some(ExportFormatArg::Pprof)
        } else if ends(&[".folded", ".collapsed"]) {
            Some(ExportFormatArg::Folded)
        } else if ends(&[".svg"]) {
            Some(ExportFormatArg::Svg)
        } else if ends(&[".speedscope.json"]) {
            Some(ExportFormatArg::Speedscope)
        } else if ends(&[".json"]) {
            Some(ExportFormatArg::Json)
        } else {
            None
        }
    }
}

impl From<ExportFormatArg> for api::ExportFormat {
    fn from(f: ExportFormatArg) -> Self {
        match f {
            ExportFormatArg::Pprof => api::ExportFormat::Pprof,
            ExportFormatArg::Folded => api::ExportFormat::Folded,
            ExportFormatArg::Svg => api::ExportFormat::Svg,
            ExportFormatArg::Speedscope => api::ExportFormat::Speedscope,
            ExportFormatArg::Json => api::ExportFormat::Json,
            ExportFormatArg::Firefox => api::ExportFormat::Firefox,
        }
    }
}

/// `profctl diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The profile compared against: a session id, a pprof file, or
    /// FROM..TO of the continuous history.
    #[arg(value_name = "BASE", value_parser = parse_diff_side)]
    pub base: DiffSide,
    /// The profile compared with BASE (as BASE).
    #[arg(value_name = "NEW", value_parser = parse_diff_side)]
    pub new: DiffSide,
    /// Rows to show, 0 = all.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_TOP)]
    pub top: usize,
    /// Row order: `change`, the largest change in exclusive samples (or
    /// time, or per second) first; `share`, the largest change in share of
    /// its profile first.
    #[arg(long, value_enum, default_value_t = DiffSortArg::Change)]
    pub sort: DiffSortArg,
    /// Time ranges: only this service (exact label); repeat for several
    /// [default: every service].
    #[arg(long = "service", value_name = "NAME")]
    pub services: Vec<String>,
    /// Also write both profiles into DIR as base.pb.gz and new.pb.gz, for
    /// `go tool pprof -diff_base DIR/base.pb.gz DIR/new.pb.gz`.
    #[arg(long, value_name = "DIR")]
    pub pprof: Option<PathBuf>,
}

/// The row order of `profctl diff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DiffSortArg {
    /// By the change in exclusive samples or time.
    Change,
    /// By the change in exclusive share of its profile.
    Share,
}

/// One side of `profctl diff`.
#[derive(Debug, Clone, PartialEq)]
pub enum DiffSide {
    /// A session of the daemon.
    Session(u64),
    /// A saved pprof file.
    File(PathBuf),
    /// The continuous history from one time to another.
    Range(SystemTime, SystemTime),
}

/// A session id (a number that names no file), FROM..TO, or a file.
fn parse_diff_side(s: &str) -> Result<DiffSide, ArgError> {
    if let Some((from, to)) = s.split_once("..") {
        let (from, to) = (parse_time(from)?, parse_time(to)?);
        if to <= from {
            return Err(ArgError::DiffBackwards(s.to_string()));
        }
        return Ok(DiffSide::Range(from, to));
    }
    let path = PathBuf::from(s);
    match s.parse::<u64>() {
        Ok(id) if !path.exists() => Ok(DiffSide::Session(id)),
        _ if path.exists() => Ok(DiffSide::File(path)),
        _ => Err(ArgError::NotADiffSide(s.to_string())),
    }
}

/// `profctl report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A session id of the daemon, or a pprof file (`profctl export --format pprof`).
    #[arg(value_name = "SESSION|FILE")]
    pub source: PathBuf,
    /// Naming stripped code away from its host.
    #[command(flatten)]
    pub symbols: Symbols,
    /// The view to print.
    #[command(flatten)]
    pub options: ViewOptions,
}

/// The view options of `profctl report` and `profctl query`.
#[derive(Debug, Clone, Args)]
pub struct ViewOptions {
    /// The call tree, from the outermost frames in (see --bottom-up).
    #[arg(long, conflicts_with_all = ["hot_path", "threads", "lines", "callers", "callees"])]
    pub tree: bool,
    /// With --tree or --hot-path: from the innermost frames out.
    #[arg(long)]
    pub bottom_up: bool,
    /// The functions that call FN, with their shares of its samples.
    #[arg(long, value_name = "FN", conflicts_with_all = ["hot_path", "threads", "lines"])]
    pub callers: Option<String>,
    /// The functions FN calls, with their shares of its samples.
    #[arg(long, value_name = "FN", conflicts_with_all = ["hot_path", "threads", "lines"])]
    pub callees: Option<String>,
    /// Exclusive samples per source line of FN.
    #[arg(long, value_name = "FN", conflicts_with_all = ["hot_path", "threads"])]
    pub lines: Option<String>,
    /// The heaviest path from the root: at each step the child with the
    /// most samples, while it holds at least --min-pct of them.
    #[arg(long, conflicts_with = "threads")]
    pub hot_path: bool,
    /// Samples per thread.
    #[arg(long)]
    pub threads: bool,
    /// Tree: leave out nodes below this share of the samples (0-100); hot
    /// path: end where the heaviest child falls below it.
    #[arg(long, value_name = "P", default_value_t = 0.5, value_parser = parse_pct)]
    pub min_pct: f64,
    /// Tree: the deepest level shown, 0 = all.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub depth: u32,
    /// Flat table: rows to show, 0 = all.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_TOP)]
    pub top: usize,
    /// Flat table order: `exclusive` leads with the functions the time is
    /// spent in (as perf report and pprof -top do), `inclusive` with their
    /// callers, `name` A to Z.
    #[arg(long, value_enum, default_value_t = SortArg::Exclusive)]
    pub sort: SortArg,
}

/// What `profctl report` shows.
#[derive(Debug, Clone, PartialEq)]
pub enum ReportView {
    /// The flat inclusive/exclusive table.
    Flat {
        /// Rows to show; `None` = all.
        limit: Option<usize>,
        /// The rows' order.
        sort: SortArg,
    },
    /// The call tree.
    Tree(api::TreeRequest),
    /// The hot path.
    HotPath(api::TreeRequest),
    /// Callers and/or callees of one function.
    CallerCallee {
        /// The function.
        function: api::FunctionRef,
        /// Show the calling functions.
        callers: bool,
        /// Show the called functions.
        callees: bool,
    },
    /// Exclusive samples per source line of one function.
    Lines(api::FunctionRef),
    /// Samples per thread.
    Threads,
}

/// Where `profctl report` reads from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportSource {
    /// A session of the daemon.
    Session(u64),
    /// A saved pprof file.
    File(PathBuf),
}

/// A session id when `source` is a number that names no file, else a file.
fn session_or_file(source: &Path) -> ReportSource {
    match source.to_str().and_then(|s| s.parse::<u64>().ok()) {
        Some(id) if !source.exists() => ReportSource::Session(id),
        _ => ReportSource::File(source.to_path_buf()),
    }
}

impl ExportArgs {
    /// A session id when the argument is a number that names no file, else a file.
    pub fn source(&self) -> ReportSource {
        session_or_file(&self.source)
    }
}

impl ReportArgs {
    /// A session id when the argument is a number that names no file, else a file.
    pub fn source(&self) -> ReportSource {
        session_or_file(&self.source)
    }

    /// The view the flags ask for.
    pub fn view(&self) -> Result<ReportView, ArgError> {
        self.options.view()
    }
}

impl ViewOptions {
    /// The view the flags ask for.
    pub fn view(&self) -> Result<ReportView, ArgError> {
        let tree = api::TreeRequest {
            bottom_up: self.bottom_up,
            min_pct: self.min_pct,
            max_depth: self.depth,
        };
        if self.bottom_up && !(self.tree || self.hot_path) {
            return Err(ArgError::BottomUpAlone);
        }
        if self.tree {
            return Ok(ReportView::Tree(tree));
        }
        if self.hot_path {
            return Ok(ReportView::HotPath(tree));
        }
        if self.threads {
            return Ok(ReportView::Threads);
        }
        if let Some(f) = &self.lines {
            return Ok(ReportView::Lines(function_ref(f)));
        }
        if let (Some(a), Some(b)) = (&self.callers, &self.callees) {
            if a != b {
                return Err(ArgError::CallersCalleesDiffer(a.clone(), b.clone()));
            }
        }
        match self.callers.as_ref().or(self.callees.as_ref()) {
            Some(f) => Ok(ReportView::CallerCallee {
                function: function_ref(f),
                callers: self.callers.is_some(),
                callees: self.callees.is_some(),
            }),
            None => Ok(ReportView::Flat {
                limit: (self.top > 0).then_some(self.top),
                sort: self.sort,
            }),
        }
    }
}

/// `profctl query`.
#[derive(Debug, Args)]
pub struct QueryArgs {
    /// Only this service (exact label, see --list); repeat for several
    /// [default: every service].
    #[arg(long = "service", value_name = "NAME")]
    pub services: Vec<String>,
    /// Only this process id; repeat for several [default: every process].
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Only processes of pods in this Kubernetes namespace; repeat for
    /// several [default: every process].
    #[arg(long = "namespace", value_name = "NAME")]
    pub namespaces: Vec<String>,
    /// Only processes of this Kubernetes pod, by name or as NAMESPACE/NAME;
    /// repeat for several [default: every process].
    #[arg(long = "pod", value_name = "NAME")]
    pub pods: Vec<String>,
    /// The windows of the last DURATION (30s, 15m, 2h, 1d) [default: the
    /// whole history kept].
    #[arg(long, value_name = "DURATION", value_parser = parse_since, conflicts_with = "from")]
    pub since: Option<Duration>,
    /// Windows that end after TIME: RFC 3339 in UTC (e.g.
    /// 2026-12-02T09:00:00Z), Unix seconds, or a time ago (6m, now-6m).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub from: Option<SystemTime>,
    /// Windows that start before TIME (as --from) [default: now].
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub to: Option<SystemTime>,
    /// Split the profile: each stack gets an outermost frame naming its
    /// service, process, host or Kubernetes pod.
    #[arg(long, value_enum, value_name = "GROUP")]
    pub by: Option<GroupByArg>,
    /// List the windows and services kept over the range instead.
    #[arg(long, conflicts_with_all = ["format", "by", "services", "pids", "namespaces", "pods"])]
    pub list: bool,
    /// Write the profile in this encoding (as `profctl export`) instead of
    /// printing a view.
    #[arg(long, value_enum)]
    pub format: Option<ExportFormatArg>,
    /// With --format: the file to write, `-` for stdout.
    #[arg(short, long, value_name = "FILE", default_value = "-")]
    pub output: PathBuf,
    /// The view to print.
    #[command(flatten)]
    pub options: ViewOptions,
}

/// The ClickHouse server `profctl fleet` and `profctl retention` read.
#[derive(Debug, Clone, Args)]
pub struct ClickHouseArgs {
    /// ClickHouse's HTTP interface, e.g. http://clickhouse:8123.
    #[arg(long, value_name = "URL")]
    pub clickhouse: String,
    /// The database profd's tables are in.
    #[arg(long, value_name = "NAME", default_value = "profd")]
    pub database: String,
    /// ClickHouse user [default: the server's default user].
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// A file holding the user's password.
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
}

/// `profctl fleet`.
#[derive(Debug, Args)]
pub struct FleetArgs {
    /// The server and how to log in.
    #[command(flatten)]
    pub server: ClickHouseArgs,
    /// Only this service; repeat for several [default: every service].
    #[arg(long = "service", value_name = "NAME")]
    pub services: Vec<String>,
    /// Only this host; repeat for several [default: every host].
    #[arg(long = "host", value_name = "NAME")]
    pub hosts: Vec<String>,
    /// The windows of the last DURATION (30s, 15m, 2h, 1d) [default: 1h].
    #[arg(long, value_name = "DURATION", value_parser = parse_since, conflicts_with = "from")]
    pub since: Option<Duration>,
    /// Windows that end after TIME: RFC 3339 in UTC, Unix seconds, or a
    /// time ago (6m, now-6m).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub from: Option<SystemTime>,
    /// Windows that start before TIME (as --from) [default: now].
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub to: Option<SystemTime>,
    /// Only processes of pods in this Kubernetes namespace; repeat for
    /// several (read from the raw stacks).
    #[arg(long = "namespace", value_name = "NAME")]
    pub namespaces: Vec<String>,
    /// Only processes of this pod, by name; repeat for several (read from
    /// the raw stacks).
    #[arg(long = "pod", value_name = "NAME")]
    pub pods: Vec<String>,
    /// Split the profile: each stack gets an outermost frame naming its
    /// host or service.
    #[arg(long, value_enum, value_name = "GROUP")]
    pub by: Option<FleetGroupArg>,
    /// The tables that answer: auto, the coarsest that answers exactly
    /// (hourly and per-minute rollups inside the range, raw stacks at its
    /// edges and for thread or pod detail); raw, the raw stacks only.
    #[arg(long, value_enum, value_name = "TABLES", default_value = "auto")]
    pub table: TableArg,
    /// Print on stderr which table answered which part of the range.
    #[arg(long)]
    pub explain: bool,
    /// Multiply the counts by the hosts with windows in the range over
    /// those that profiled in it (the sampling schedule's coverage), so
    /// the profile stands for the whole fleet.
    #[arg(long)]
    pub scale_to_fleet: bool,
    /// Write the profile in this encoding instead of printing a view.
    #[arg(long, value_enum)]
    pub format: Option<ExportFormatArg>,
    /// With --format: the file to write, `-` for stdout.
    #[arg(short, long, value_name = "FILE", default_value = "-")]
    pub output: PathBuf,
    /// Naming stripped code away from its host.
    #[command(flatten)]
    pub symbols: Symbols,
    /// The view to print.
    #[command(flatten)]
    pub options: ViewOptions,
}

/// `profctl retention`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct RetentionArgs {
    /// The server and how to log in.
    #[command(flatten)]
    pub server: ClickHouseArgs,
    /// How long the raw tables (stacks, windows) keep their rows.
    #[arg(long, value_name = "DURATION", value_parser = parse_since, default_value = "3d")]
    pub raw: Duration,
    /// How long stacks_minutes keeps its rows.
    #[arg(long, value_name = "DURATION", value_parser = parse_since, default_value = "30d")]
    pub minutes: Duration,
    /// How long stacks_hours keeps its rows (frames: the longest keep).
    #[arg(long, value_name = "DURATION", value_parser = parse_since, default_value = "365d")]
    pub hours: Duration,
    /// Run the statements (else print them).
    #[arg(long)]
    pub run: bool,
}

impl FleetArgs {
    /// The range asked for, in Unix ms: --since (1 h unless --from), and
    /// --to (0 = now).
    pub fn range(&self, now: SystemTime) -> Result<(u64, u64), ArgError> {
        let since = match (self.since, self.from) {
            (None, None) => Some(Duration::from_secs(3600)),
            (since, _) => since,
        };
        range_of(since, self.from, self.to, now)
    }

    /// What to do: print a view, or export.
    pub fn action(&self) -> Result<QueryAction, ArgError> {
        view_or_export(self.options.view()?, self.format, &self.output)
    }
}

/// A view to print, or with --format the whole profile to write (to -o).
fn view_or_export(
    view: ReportView,
    format: Option<ExportFormatArg>,
    output: &Path,
) -> Result<QueryAction, ArgError> {
    if output != Path::new("-") && format.is_none() {
        return Err(ArgError::OutputWithoutFormat);
    }
    match format {
        Some(_) if !matches!(view, ReportView::Flat { .. }) => Err(ArgError::FormatWithView),
        Some(format) => Ok(QueryAction::Export(format)),
        None => Ok(QueryAction::View(view)),
    }
}

/// Unix ms of `t` (0 for times before the epoch).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A range in Unix ms (0 = the oldest, and now) from --since (counting
/// back from `now`), or --from, and --to.
fn range_of(
    since: Option<Duration>,
    from: Option<SystemTime>,
    to: Option<SystemTime>,
    now: SystemTime,
) -> Result<(u64, u64), ArgError> {
    let start = match (since, from) {
        (Some(since), _) => unix_ms(now.checked_sub(since).unwrap_or(UNIX_EPOCH)).max(1),
        (None, Some(from)) => unix_ms(from),
        (None, None) => 0,
    };
    let end = to.map_or(0, unix_ms);
    if end != 0 && start > end {
        return Err(ArgError::RangeBackwards(if since.is_some() {
            "now minus --since"
        } else {
            "--from"
        }));
    }
    Ok((start, end))
}

/// How `profctl query` splits a profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GroupByArg {
    /// By service label.
    Service,
    /// By process (pid and command name).
    Process,
    /// By host name.
    Host,
    /// By Kubernetes pod (namespace/name).
    Pod,
}

impl From<GroupByArg> for api::GroupBy {
    fn from(g: GroupByArg) -> Self {
        match g {
            GroupByArg::Service => api::GroupBy::Service,
            GroupByArg::Process => api::GroupBy::Process,
            GroupByArg::Host => api::GroupBy::Host,
            GroupByArg::Pod => api::GroupBy::Pod,
        }
    }
}

/// What `profctl query` does.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryAction {
    /// List the windows and services of the range.
    List,
    /// Print a view of the merged profile.
    View(ReportView),
    /// Write the merged profile in an export format.
    Export(ExportFormatArg),
}

impl QueryArgs {
    /// The range asked for, in Unix ms (0 = the oldest window, and now),
    /// with `now` the time --since counts back from.
    pub fn range(&self, now: SystemTime) -> Result<(u64, u64), ArgError> {
        range_of(self.since, self.from, self.to, now)
    }

    /// The query the options ask for.
    pub fn query(&self, now: SystemTime) -> Result<api::Query, ArgError> {
        let (from_unix_ms, to_unix_ms) = self.range(now)?;
        Ok(api::Query {
            from_unix_ms,
            to_unix_ms,
            services: self.services.clone(),
            pids: self.pids.clone(),
            by: self
                .by
                .map_or(api::GroupBy::Unspecified, api::GroupBy::from) as i32,
            namespaces: self.namespaces.clone(),
            pods: self.pods.clone(),
        })
    }

    /// What to do: list, print a view, or export.
    pub fn action(&self) -> Result<QueryAction, ArgError> {
        let view = self.options.view()?;
        if self.list {
            if !matches!(view, ReportView::Flat { .. }) {
                return Err(ArgError::ListWithView);
            }
            return Ok(QueryAction::List);
        }
        view_or_export(view, self.format, &self.output)
    }
}

/// `profctl query --since`: a positive duration such as 30s, 15m, 2h or 1d.
fn parse_since(s: &str) -> Result<Duration, ArgError> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| ArgError::NotADuration(s.to_string(), e))?;
    if d.is_zero() {
        return Err(ArgError::ZeroDuration(s.to_string()));
    }
    Ok(d)
}

/// `profctl query --from/--to`: RFC 3339 (UTC), Unix seconds, or a time
/// ago from now: `now`, `now-6m`, or a duration alone (`6m`, `1h30m`).
fn parse_time(s: &str) -> Result<SystemTime, ArgError> {
    parse_time_at(s, SystemTime::now())
}

/// [`parse_time`], with relative times counted back from `now`.
fn parse_time_at(s: &str, now: SystemTime) -> Result<SystemTime, ArgError> {
    let t = s.trim();
    let ago = match t.strip_prefix("now") {
        Some("") => Some(Duration::ZERO),
        Some(rest) => {
            let ago = rest
                .trim_start()
                .strip_prefix('-')
                .and_then(|d| humantime::parse_duration(d.trim()).ok());
            Some(ago.ok_or_else(|| ArgError::NotAgo(t.to_string()))?)
        }
        None if t.starts_with(|c: char| c.is_ascii_digit())
            && !t.bytes().all(|b| b.is_ascii_digit()) =>
        {
            humantime::parse_duration(t).ok()
        }
        None => None,
    };
    if let Some(ago) = ago {
        return Ok(now.checked_sub(ago).unwrap_or(UNIX_EPOCH));
    }
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        let secs: u64 = t
            .parse()
            .map_err(|_| ArgError::UnixTooLarge(s.to_string()))?;
        return UNIX_EPOCH
            .checked_add(Duration::from_secs(secs))
            .ok_or_else(|| ArgError::UnixTooLarge(s.to_string()));
    }
    humantime::parse_rfc3339_weak(t).map_err(|e| ArgError::NotATime(s.to_string(), e))
}

/// `#12` selects function id 12; anything else is an exact function name.
pub fn function_ref(s: &str) -> api::FunctionRef {
    match s.strip_prefix('#').and_then(|id| id.parse::<u64>().ok()) {
        Some(id) => api::FunctionRef {
            id,
            name: String::new(),
        },
        None => api::FunctionRef {
            id: 0,
            name: s.to_string(),
        },
    }
}

/// `profctl histogram`.
#[derive(Debug, Args)]
pub struct HistogramArgs {
    /// Session id (see `profctl sessions`).
    #[arg(value_name = "SESSION")]
    pub session: u64,
    /// The module of the target whose PCs are counted (file name, e.g.
    /// `libc.so.6`) [default: the file name of --binary].
    #[arg(long, value_name = "M")]
    pub module: Option<String>,
    /// Subtracted from each PC (an ELF virtual address in the module), hex
    /// with 0x or decimal [default with --binary: the start of its .text].
    #[arg(long, value_name = "ADDR", value_parser = parse_u64)]
    pub offset: Option<u64>,
    /// 16.16 fixed point as in profil(3): 65536 = one bucket per byte
    /// [default with --binary: what covers .text with the buckets].
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u32).range(1..))]
    pub scale: Option<u32>,
    /// Number of buckets [default with --binary: one per 4 bytes of .text].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=MAX_BUCKETS as i64))]
    pub buckets: Option<u32>,
    /// Also write the histogram as a gmon.out file that `gprof BINARY FILE` reads.
    #[arg(long, value_name = "FILE")]
    pub gmon: Option<PathBuf>,
    /// The module's binary: derives the module name, offset and scale from
    /// its .text section.
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
}

/// The most buckets a histogram may have.
pub const MAX_BUCKETS: u32 = 1 << 24;

fn parse_u64(s: &str) -> Result<u64, ArgError> {
    let t = s.trim();
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse(),
    };
    parsed.map_err(|_| ArgError::NotANumber(s.to_string()))
}

fn parse_pct(s: &str) -> Result<f64, ArgError> {
    let p: f64 = s
        .trim()
        .parse()
        .map_err(|_| ArgError::NotAPercentage(s.to_string()))?;
    if !(0.0..=100.0).contains(&p) {
        return Err(ArgError::PercentageRange(s.to_string()));
    }
    Ok(p)
}

/// Whole milliseconds in `d`, at least 1 for a non-zero duration.
fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn parse_seconds(s: &str) -> Result<Duration, ArgError> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| ArgError::NotSeconds(s.to_string()))?;
    if !secs.is_finite() || secs <= 0.0 {
        return Err(ArgError::NotPositiveSeconds(s.to_string()));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| ArgError::TooManySeconds(s.to_string()))
}

fn parse_duration(s: &str) -> Result<Duration, ArgError> {
    let d = parse_seconds(s)?;
    if d < Duration::from_millis(1) {
        return Err(ArgError::UnderMillisecond(s.to_string()));
    }
    Ok(d)
}

fn parse_interval(s: &str) -> Result<Duration, ArgError> {
    let d = parse_seconds(s)?;
    if d < Duration::from_millis(50) {
        return Err(ArgError::UnderMinInterval(s.to_string()));
    }
    Ok(d)
}

#[cfg(test)]
#[path = "cli_tests.rs"]
mod tests;
