//! The daemon's settings: each declared once below (its key in the settings
//! file, its flag, help, value type and default), the `Config` they build,
//! and the rules between keys. Flags and the file (TOML;
//! `/etc/profd/profd.toml` unless `--config` names another) go through the
//! same value checks; a flag given wins over the file's key.
mod error;
mod schema;
pub mod sink_files;
pub mod sinks;
mod values;
pub use values::MAX_BUCKETS;

pub use error::{ReadError, SettingsError};
pub use schema::{Flag, Flags, Layer, ParseError, Setting};

use crate::process::symbolize::{debuginfod, Naming};
use crate::sampling;
use crate::serve::auth::{Grant, TlsFiles};
use crate::serve::{conns, kernel_view};
use crate::sessions::registry;
use crate::sessions::store::{Persist, Retention, DEFAULT_CHECKPOINT_INTERVAL, DEFAULT_STATE_DIR};
use schema::{Declared, Schema};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use values::*;

/// Where the settings file is read from unless `--config` names another.
pub const DEFAULT_PATH: &str = "/etc/profd/profd.toml";

/// The daemon's settings, as the code that uses them takes them.
#[derive(Debug, Clone)]
pub struct Config {
    /// Unix socket the gRPC API is served on.
    pub socket: PathBuf,
    /// Group that owns the socket (mode 0660): its members may connect.
    /// None: the default group `profd` when it exists, else root's.
    pub socket_group: Option<String>,
    /// Members of a group may profile a user's processes.
    pub grants: Vec<Grant>,
    pub limits: registry::Limits,
    /// The TLS listener, off unless set.
    pub remote: Option<Remote>,
    /// The state directory ended sessions are kept in across restarts
    /// (`--state-dir`, retention flags). None: nothing is written to disk.
    pub persist: Option<Persist>,
    /// Data pages of each CPU ring (a power of two); None: 128, or 512 for
    /// sessions that copy user stacks.
    pub ring_pages: Option<usize>,
    /// How long after its last drain an undrained ring is drained.
    pub drain_interval: Duration,
    /// Serve Prometheus metrics over plain HTTP on this address.
    pub metrics: Option<SocketAddr>,
    /// A listening Unix socket passed by systemd (socket activation): served
    /// instead of creating `socket`.
    pub activated: Option<Arc<std::os::unix::net::UnixListener>>,
    /// What callers other than root are shown of kernel frames.
    pub kernel_frames: kernel_view::Setting,
    /// Connection caps and timeouts of both listeners.
    pub connections: conns::Limits,
    /// Continuous profiling (`--continuous`, `[continuous]`); None: off.
    pub continuous: Option<crate::continuous::Settings>,
    /// Backends continuous windows are sent to (`[[sink]]`), files read.
    pub sinks: Vec<sinks::Settings>,
    /// CPU a second for setting up new processes (see
    /// `session::setup_budget`).
    pub new_process_cpu: Duration,
    /// The memory ceiling (`memory_limit`): as it nears, load is shed (see
    /// `crate::memory`).
    pub memory_limit: u64,
    /// debuginfod servers debug files are fetched from (`[symbols]`); no
    /// URLs: off. The cache is under the state directory (none: off).
    pub debuginfod: debuginfod::Settings,
    /// Whether mapped files' code is named on the host (`symbols.on_host`).
    pub naming: Naming,
    /// How often a JVM with JIT code met unnamed is asked for a fresh perf
    /// map at most (`[jit]`); None: never (`jit.ask_jvm = false`).
    pub ask_jvm: Option<Duration>,
}

/// The TCP listener: TLS only, bearer tokens; gRPC, grpc-web and the web
/// dashboard.
#[derive(Debug, Clone)]
pub struct Remote {
    pub listen: SocketAddr,
    pub tls: TlsFiles,
    pub tokens: PathBuf,
    /// Origins (`https://host:port`) whose pages may call the API with
    /// grpc-web (CORS); none: only the listener's own (the dashboard).
    pub cors_origins: Vec<String>,
}

impl Config {
    /// Settings with defaults and the given socket path; sessions are not
    /// persisted unless `persist` is set.
    pub fn new(socket: PathBuf) -> Config {
        Config {
            socket,
            socket_group: None,
            grants: Vec::new(),
            limits: registry::Limits::default(),
            remote: None,
            persist: None,
            ring_pages: None,
            drain_interval: sampling::DRAIN_EVERY,
            metrics: None,
            activated: None,
            kernel_frames: kernel_view::Setting::Auto,
            connections: conns::Limits::default(),
            continuous: None,
            sinks: Vec::new(),
            new_process_cpu: crate::sessions::session::setup_budget::DEFAULT_PER_SECOND,
            memory_limit: crate::memory::DEFAULT_LIMIT,
            debuginfod: debuginfod::Settings::default(),
            naming: Naming::OnHost,
            ask_jvm: Some(crate::process::jvm::DEFAULT_INTERVAL),
        }
    }
}

// ---------------------------------------------------------------------------
// The settings. A key `section.name` is `name` in the file's `[section]`
// table; `--help` lists the flags in this order.

/// The file's tables, in the order `--check-config` shows them.
pub const SECTIONS: &[&str] = &[
    "limits",
    "remote",
    "state",
    "metrics",
    "symbols",
    "jit",
    "continuous",
];

/// `--LONG VALUE_NAME`.
const fn flag(long: &'static str, value_name: &'static str) -> Flag {
    Flag::Value { long, value_name }
}

/// Declares each setting as a `pub static`, and `ALL` of them in order.
macro_rules! settings {
    ($($name:ident: $t:ty = $setting:expr;)*) => {
        $(pub static $name: Setting<$t> = $setting;)*
        /// Every setting, in the order of `--help`.
        static ALL: &[&dyn Declared] = &[$(&$name),*];
    };
}

/// The settings declared here, and the file's sections.
static SCHEMA: Schema = Schema {
    all: ALL,
    sections: SECTIONS,
};

/// Parse a settings file's text; errors say `PATH: KEY: what is wrong (line N)`.
pub fn parse(path: &Path, text: &str) -> Result<Layer, ParseError> {
    SCHEMA.parse(path, text)
}

impl Layer {
    /// The defaults of every setting that has one.
    pub fn defaults() -> Layer {
        SCHEMA.defaults()
    }

    /// The layer as a TOML document: the top keys, then a table for each
    /// section that has keys.
    pub fn to_toml(&self) -> String {
        SCHEMA.show(self)
    }
}

impl clap::FromArgMatches for Flags {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        SCHEMA
            .flags_given(m)
            .map(Flags)
            .map_err(|e| clap::Error::raw(clap::error::ErrorKind::ValueValidation, e))
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl clap::Args for Flags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd.args(SCHEMA.args())
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

settings! {
    SOCKET: PathBuf = Setting {
        key: "socket",
        flag: flag("socket", "PATH"),
        ty: PATH,
        default: Some(|| profd_common::DEFAULT_SOCKET.into()),
        help: "Unix socket to serve the profd.v1 gRPC API on (config: socket; default /run/profd/profd.sock). Ignored when systemd passes one",
    };
    SOCKET_GROUP: String = Setting {
        key: "socket_group",
        flag: flag("socket-group", "GROUP"),
        ty: NAME,
        default: None,
        help: "Group owning the socket (mode 0660); its members may connect (config: socket_group). Default: `profd` when that group exists, else root's group",
    };
    GRANTS: Vec<String> = Setting {
        key: "grants",
        flag: flag("grant", "GROUP:USER"),
        ty: values::GRANTS,
        default: Some(Vec::new),
        help: "Let members of GROUP profile the processes of USER (repeatable; config: grants = [\"GROUP:USER\"], replaced by the flags when given)",
    };
    LISTEN: SocketAddr = Setting {
        key: "remote.listen",
        flag: flag("listen", "ADDR:PORT"),
        ty: ADDR,
        default: None,
        help: "Also serve on this TCP address, TLS only; needs --tls-cert, --tls-key and --tokens (config: remote.listen)",
    };
    TLS_CERT: PathBuf = Setting {
        key: "remote.tls_cert",
        flag: flag("tls-cert", "FILE"),
        ty: PATH,
        default: None,
        help: "PEM certificate chain of the TLS listener (config: remote.tls_cert)",
    };
    TLS_KEY: PathBuf = Setting {
        key: "remote.tls_key",
        flag: flag("tls-key", "FILE"),
        ty: PATH,
        default: None,
        help: "PEM private key of the TLS listener (config: remote.tls_key)",
    };
    TLS_CLIENT_CA: PathBuf = Setting {
        key: "remote.tls_client_ca",
        flag: flag("tls-client-ca", "FILE"),
        ty: PATH,
        default: None,
        help: "Require client certificates signed by this PEM CA, mutual TLS (config: remote.tls_client_ca)",
    };
    TOKENS: PathBuf = Setting {
        key: "remote.tokens",
        flag: flag("tokens", "FILE"),
        ty: PATH,
        default: None,
        help: "Bearer tokens accepted on the TLS listener; `profd token` makes them (config: remote.tokens)",
    };
    CORS_ORIGINS: Vec<String> = Setting {
        key: "remote.cors_origins",
        flag: flag("cors-origin", "ORIGIN"),
        ty: ORIGINS,
        default: None,
        help: "Let pages of this origin (`https://host:port`) call the API on the TLS listener with grpc-web (CORS; repeatable; config: remote.cors_origins = [...], replaced by the flags when given). Default: none, only the dashboard the listener serves itself",
    };
    MAX_SESSIONS: usize = Setting {
        key: "limits.max_sessions",
        flag: flag("max-sessions", "N"),
        ty: POSITIVE,
        default: Some(|| registry::Limits::default().max_sessions),
        help: "Most sessions running at once (config: limits.max_sessions; default 64)",
    };
    MAX_SESSIONS_PER_CALLER: usize = Setting {
        key: "limits.max_sessions_per_caller",
        flag: flag("max-sessions-per-caller", "N"),
        ty: POSITIVE,
        default: Some(|| registry::Limits::default().max_sessions_per_caller),
        help: "Most sessions one user runs at once (config: limits.max_sessions_per_caller; default 16)",
    };
    MAX_FREQUENCY: u32 = Setting {
        key: "limits.max_frequency",
        flag: flag("max-frequency", "HZ"),
        ty: FREQUENCY,
        default: None,
        help: "Highest sampling frequency in Hz (config: limits.max_frequency; default: the kernel's perf_event_max_sample_rate)",
    };
    MAX_DURATION: u64 = Setting {
        key: "limits.max_duration",
        flag: flag("max-duration", "SECS"),
        ty: SECONDS,
        default: None,
        help: "Longest session in seconds; sessions asking for no duration get this (config: limits.max_duration; default: unlimited)",
    };
    MAX_STACKS: usize = Setting {
        key: "limits.max_stacks",
        flag: flag("max-stacks", "N"),
        ty: POSITIVE,
        default: Some(|| registry::Limits::default().max_stacks),
        help: "Unique stacks one session keeps; samples of further new stacks are counted under `[stack limit reached]` (config: limits.max_stacks; default 250000)",
    };
    NEW_PROCESS_CPU: u64 = Setting {
        key: "limits.new_process_cpu",
        flag: flag("new-process-cpu", "MS"),
        ty: MILLIS_PER_SECOND,
        default: Some(|| crate::sessions::session::setup_budget::DEFAULT_PER_SECOND.as_millis() as u64),
        help: "Milliseconds of CPU a second for setting up the processes continuous profiling samples (reading /proc/PID/maps, opening the files they map); past it, a new process is set up at a later batch, its samples counted meanwhile, walked by frame pointers only (config: limits.new_process_cpu; default 5, half a percent of a core)",
    };
    MAX_CONNECTIONS: usize = Setting {
        key: "limits.max_connections",
        flag: flag("max-connections", "N"),
        ty: POSITIVE,
        default: None,
        help: "Connections each listener (the Unix socket, the TLS listener) holds at once; more are closed at once. Root may open 8 more on the Unix socket (config: limits.max_connections; default: a quarter of the open-files limit, from 16 to 4096)",
    };
    MAX_CONNECTIONS_PER_PEER: usize = Setting {
        key: "limits.max_connections_per_peer",
        flag: flag("max-connections-per-peer", "N"),
        ty: POSITIVE,
        default: None,
        help: "Connections one peer holds on a listener at once: a uid on the Unix socket (root excepted), an address on the TLS listener; more are closed at once (config: limits.max_connections_per_peer; default: a quarter of max_connections)",
    };
    MAX_UNAUTHENTICATED_CONNECTIONS: usize = Setting {
        key: "limits.max_unauthenticated_connections",
        flag: flag("max-unauthenticated-connections", "N"),
        ty: POSITIVE,
        default: None,
        help: "Connections the TLS listener holds that have not yet made a call with a valid token; more are closed at once, the rest of max_connections is for authenticated ones (config: limits.max_unauthenticated_connections; default: half of max_connections)",
    };
    HANDSHAKE_TIMEOUT: u64 = Setting {
        key: "limits.handshake_timeout",
        flag: flag("handshake-timeout", "SECS"),
        ty: SECONDS,
        default: Some(|| conns::Limits::default().handshake_timeout.as_secs()),
        help: "Seconds a new connection has to finish its TLS handshake and send the HTTP/2 preface (config: limits.handshake_timeout; default 10)",
    };
    FIRST_REQUEST_TIMEOUT: u64 = Setting {
        key: "limits.first_request_timeout",
        flag: flag("first-request-timeout", "SECS"),
        ty: SECONDS,
        default: Some(|| conns::Limits::default().first_request_timeout.as_secs()),
        help: "Seconds a connection has, once its handshake is done, to make its first call; on the TLS listener a call with a valid token (config: limits.first_request_timeout; default 10)",
    };
    IDLE_TIMEOUT: u64 = Setting {
        key: "limits.idle_timeout",
        flag: flag("idle-timeout", "SECS"),
        ty: SECONDS,
        default: Some(|| conns::Limits::default().idle_timeout.as_secs()),
        help: "Seconds a connection with no call open is kept; HTTP/2 PINGs and other frames that are not calls do not count (config: limits.idle_timeout; default 120)",
    };
    MAX_HISTOGRAM_BUCKETS: u32 = Setting {
        key: "limits.max_histogram_buckets",
        flag: flag("max-histogram-buckets", "N"),
        ty: BUCKETS,
        default: Some(|| registry::Limits::default().max_histogram_buckets),
        help: "Most buckets one histogram may have, 8 bytes each in memory while it is made (config: limits.max_histogram_buckets; default 1048576)",
    };
    MAX_CONCURRENT_EXPORTS: usize = Setting {
        key: "limits.max_concurrent_exports",
        flag: flag("max-concurrent-exports", "N"),
        ty: POSITIVE,
        default: Some(|| registry::Limits::default().max_concurrent_exports),
        help: "Histogram, export and view requests answered at once; more are refused (config: limits.max_concurrent_exports; default 4)",
    };
    RING_PAGES: usize = Setting {
        key: "ring_pages",
        flag: flag("ring-pages", "PAGES"),
        ty: values::RING_PAGES,
        default: None,
        help: "Data pages of each per-CPU ring, a power of two (config: ring_pages; default: two seconds of samples at the session's frequency, from 32 up to 128 pages, or up to 512 for sessions that copy user stacks; continuous profiling's: one second). Smaller rings lose samples (counted as lost) under load",
    };
    DRAIN_INTERVAL: u64 = Setting {
        key: "drain_interval",
        flag: flag("drain-interval", "SECS"),
        ty: SECONDS,
        default: Some(|| sampling::DRAIN_EVERY.as_secs()),
        help: "Seconds after its last drain that a ring is drained when neither its watermark nor a view or a session's end drained it: how late the daemon-wide counts may be. Each drain wakes profd, so a quiet host is cheaper with a longer interval (config: drain_interval; default 1)",
    };
    STATE_DIR: PathBuf = Setting {
        key: "state.dir",
        flag: flag("state-dir", "DIR"),
        ty: PATH,
        default: Some(|| DEFAULT_STATE_DIR.into()),
        help: "Directory ended sessions are kept in across restarts, pprof and metadata, created mode 0700 (config: state.dir; default /var/lib/profd)",
    };
    PERSIST: bool = Setting {
        key: "state.persist",
        flag: Flag::Off("no-persist"),
        ty: BOOL,
        default: Some(|| true),
        help: "Keep nothing on disk: sessions end with the daemon (config: state.persist = false)",
    };
    RETAIN_SESSIONS: usize = Setting {
        key: "state.retain_sessions",
        flag: flag("retain-sessions", "N"),
        ty: POSITIVE,
        default: Some(|| Retention::default().max_sessions),
        help: "Most sessions kept in the state directory, shared fairly between their owners: the oldest of the owner most over their share goes first (config: state.retain_sessions; default 1000)",
    };
    RETAIN_DAYS: f64 = Setting {
        key: "state.retain_days",
        flag: flag("retain-days", "DAYS"),
        ty: DAYS,
        default: Some(|| Retention::default().max_age.as_secs_f64() / 86400.0),
        help: "Days an ended session is kept in the state directory, fractions allowed (config: state.retain_days; default 30)",
    };
    RETAIN_BYTES: u64 = Setting {
        key: "state.retain_bytes",
        flag: flag("retain-bytes", "BYTES"),
        ty: BYTES,
        default: Some(|| Retention::default().max_bytes),
        help: "Most bytes the state directory keeps (suffixes K, M, G, T: powers of 1024), shared fairly between the sessions' owners (config: state.retain_bytes; default 1G)",
    };
    CHECKPOINT_INTERVAL: u64 = Setting {
        key: "state.checkpoint_interval",
        flag: flag("checkpoint-interval", "SECS"),
        ty: SECONDS,
        default: Some(|| DEFAULT_CHECKPOINT_INTERVAL.as_secs()),
        help: "Seconds between saves of a running session to the state directory (checkpoints: what a killed daemon's sessions keep), and between tries of a save that failed (config: state.checkpoint_interval; default 60)",
    };
    METRICS: SocketAddr = Setting {
        key: "metrics.listen",
        flag: flag("metrics", "ADDR:PORT"),
        ty: ADDR,
        default: None,
        help: "Serve Prometheus metrics over plain HTTP on ADDR:PORT at /metrics (config: metrics.listen; default: off)",
    };
    ON_HOST: bool = Setting {
        key: "symbols.on_host",
        flag: Flag::Off("no-host-symbols"),
        ty: BOOL,
        default: Some(|| true),
        help: "Read no symbols or debug information on this host: the code of programs and libraries is grouped by function (module!0xSTART) and kept with its binary's build id, for `profctl fleet --symbols` or the backend to name (config: symbols.on_host = false; the kernel's functions, the vDSO and JIT perf maps are still named)",
    };
    DEBUGINFOD_URLS: Vec<String> = Setting {
        key: "symbols.debuginfod_urls",
        flag: flag("debuginfod-url", "URL"),
        ty: values::DEBUGINFOD_URLS,
        default: Some(|| debuginfod::urls_in(&std::env::var("DEBUGINFOD_URLS").unwrap_or_default())),
        help: "Fetch the debug files of binaries that have none installed from this debuginfod server, by build id, into a cache under the state directory (off without one); servers are asked in turn (repeatable; config: symbols.debuginfod_urls = [...], replaced by the flags when given; default: the URLs of DEBUGINFOD_URLS in profd's environment, separated by spaces; none: off)",
    };
    DEBUGINFOD_TIMEOUT: u64 = Setting {
        key: "symbols.debuginfod_timeout",
        flag: flag("debuginfod-timeout", "SECS"),
        ty: SECONDS,
        default: Some(|| debuginfod::DEFAULT_TIMEOUT.as_secs()),
        help: "Seconds a debuginfod server has to connect, to answer, and between two reads of a file; past it the request fails and is tried again later (config: symbols.debuginfod_timeout; default 10)",
    };
    DEBUGINFOD_CACHE_MIB: usize = Setting {
        key: "symbols.debuginfod_cache_mib",
        flag: flag("debuginfod-cache-mib", "MIB"),
        ty: POSITIVE,
        default: Some(|| debuginfod::DEFAULT_CACHE_MIB as usize),
        help: "MiB of fetched debug files kept on disk (in STATE_DIR/debuginfod); the files used longest ago go first (config: symbols.debuginfod_cache_mib; default 1024)",
    };
    ASK_JVM: bool = Setting {
        key: "jit.ask_jvm",
        flag: Flag::Off("no-ask-jvm"),
        ty: BOOL,
        default: Some(|| true),
        help: "Never ask a JVM for its perf map. Unless off, a JVM whose JIT code a session or continuous profiling meets unnamed is asked for a fresh map (jcmd PID Compiler.perfmap) through HotSpot's attach mechanism, as its own user sees it, when its hsperfdata or options say the mechanism is on (config: jit.ask_jvm = false; default on)",
    };
    ASK_JVM_INTERVAL: u64 = Setting {
        key: "jit.ask_interval",
        flag: flag("ask-jvm-interval", "SECS"),
        ty: SECONDS,
        default: Some(|| crate::process::jvm::DEFAULT_INTERVAL.as_secs()),
        help: "Seconds between two asks of one JVM for its perf map, at least (config: jit.ask_interval; default 2)",
    };
    MEMORY_LIMIT: u64 = Setting {
        key: "memory_limit",
        flag: flag("memory-limit", "BYTES"),
        ty: values::MEMORY_BYTES,
        default: Some(|| crate::memory::DEFAULT_LIMIT),
        help: "The daemon's memory ceiling, at least 32M (suffixes K, M, G, T: powers of 1024). Nearing it, profd sheds in this order: its caches, then continuous windows' new unique stacks (counted under [stack limit reached]), then continuous profiling's frequency, then its stack copies (frame-pointer call chains instead); and restores them when the pressure goes. A lower limit of its cgroup counts too. Set the systemd unit's MemoryMax= (or the container's limit) a little above it (config: memory_limit; default 128M)",
    };
    LOG_LEVEL: String = Setting {
        key: "log_level",
        flag: flag("log-level", "LEVEL"),
        ty: values::LOG_LEVEL,
        default: Some(|| "info".into()),
        help: "Log level: error, warn, info, debug or trace (config: log_level; default info)",
    };
    KERNEL_FRAMES: String = Setting {
        key: "kernel_frames",
        flag: flag("kernel-frames", "MODE"),
        ty: values::KERNEL_FRAMES,
        default: Some(|| "auto".into()),
        help: "What callers other than root are shown of kernel frames: auto (as the kernel would show them: kptr_restrict, perf_event_paranoid), full, names (without addresses) or folded (one [kernel] frame) (config: kernel_frames; default auto)",
    };
    CONTINUOUS: bool = Setting {
        key: "continuous.enabled",
        flag: Flag::On("continuous"),
        ty: BOOL,
        default: Some(|| false),
        help: "Profile every process on the host (or those --continuous-select chooses) all the time, at a low frequency, kept as windows labelled by service (config: continuous.enabled = true; default off). The other continuous settings do not turn it on",
    };
    CONTINUOUS_FREQUENCY: u32 = Setting {
        key: "continuous.frequency",
        flag: flag("continuous-freq", "HZ"),
        ty: FREQUENCY,
        default: Some(|| crate::continuous::DEFAULT_FREQUENCY_HZ),
        help: "Samples per second on each CPU of continuous profiling (config: continuous.frequency; default 19: low enough to leave on everywhere, as Parca and the OpenTelemetry profiler's 19-20 Hz, where Pyroscope's eBPF profiler takes 97; a prime, so it does not beat with work on a round period)",
    };
    CONTINUOUS_WINDOW: u64 = Setting {
        key: "continuous.window",
        flag: flag("continuous-window", "SECS"),
        ty: WINDOW,
        default: Some(|| crate::continuous::Settings::default().window.as_secs()),
        help: "Seconds of one continuous window, the unit kept, queried and sent, from 1 to 3600 (config: continuous.window; default 10)",
    };
    CONTINUOUS_STACK_BYTES: u32 = Setting {
        key: "continuous.stack_bytes",
        flag: flag("continuous-stack-bytes", "BYTES"),
        ty: values::STACK_BYTES,
        default: Some(|| crate::sessions::registry::DEFAULT_STACK_BYTES),
        help: "Bytes of each sample's user stack continuous profiling copies, to unwind with the programs' unwind tables: a multiple of 8 up to 65528, the kernel's largest; deeper stacks are cut where the copy ends, and a query says how many. 0 takes frame-pointer call chains instead, without copies (config: continuous.stack_bytes; default 16384)",
    };
    CONTINUOUS_RETENTION_BYTES: u64 = Setting {
        key: "continuous.retention_bytes",
        flag: flag("continuous-retention-bytes", "BYTES"),
        ty: HISTORY_BYTES,
        default: Some(|| crate::continuous::Settings::default().retention_bytes),
        help: "Most bytes of continuous history kept, at least 1M (suffixes K, M, G, T: powers of 1024); the oldest windows go first (config: continuous.retention_bytes; default 256M)",
    };
    CONTINUOUS_RETENTION_AGE: Duration = Setting {
        key: "continuous.retention_age",
        flag: flag("continuous-retention-age", "AGE"),
        ty: DURATION,
        default: Some(|| crate::continuous::Settings::default().retention_age),
        help: "Oldest continuous window kept, such as 7d, 12h or 90m, at least one window (config: continuous.retention_age; default 7d)",
    };
    CONTINUOUS_HOST: String = Setting {
        key: "continuous.host",
        flag: flag("continuous-host", "NAME"),
        ty: NAME,
        default: None,
        help: "The host name continuous windows carry, in queries and in every sink (config: continuous.host; default: the machine's host name, as hostname(1) prints it). Set it where that name is not the one to group by, such as a node's name for a daemon in a container",
    };
    CONTINUOUS_SCHEDULE: f64 = Setting {
        key: "continuous.schedule",
        flag: flag("continuous-schedule", "SHARE"),
        ty: FRACTION,
        default: Some(|| 1.0),
        help: "The share of a fleet's hosts profiling at any moment, such as 0.1 or \"10%\": time is cut into slots (--continuous-schedule-period), and in each this host profiles or not by a hash of its host name and the slot, so that about this share of the fleet does, a different set each slot, with no coordinator; in an off slot no rings are open and each window says only that the host was there (config: continuous.schedule; default 1: always on)",
    };
    CONTINUOUS_SCHEDULE_PERIOD: Duration = Setting {
        key: "continuous.schedule_period",
        flag: flag("continuous-schedule-period", "PERIOD"),
        ty: DURATION,
        default: Some(|| Duration::from_secs(600)),
        help: "The length of one slot of the sampling schedule (--continuous-schedule), a multiple of continuous.window (config: continuous.schedule_period; default 10m)",
    };
    CONTINUOUS_SELECT: Vec<String> = Setting {
        key: "continuous.select",
        flag: flag("continuous-select", "SELECTOR"),
        ty: SELECTORS,
        default: Some(Vec::new),
        help: "Profile only processes this selects: unit:NAME, cgroup:/PATH (and below), container:ID (a prefix), comm:GLOB or exe:GLOB; any one selector suffices (repeatable; config: continuous.select = [...], replaced by the flags when given; default: every process)",
    };
    CONTINUOUS_KUBELET_LOGS: PathBuf = Setting {
        key: "continuous.kubelet_logs",
        flag: flag("continuous-kubelet-logs", "DIR"),
        ty: ABSOLUTE_PATH,
        default: Some(|| crate::continuous::pods::DEFAULT_ROOT.into()),
        help: "The directory holding the kubelet's pods/ and containers/ log directories, which name the Kubernetes pod and container of a process whose cgroup is a pod's (config: continuous.kubelet_logs; default /var/log; for a daemon in a container, where the node's /var/log is mounted)",
    };
}

// ---------------------------------------------------------------------------
// Reading, merging, and the rules between keys.

/// Read the settings file: `explicit` (`--config`; missing is an error), or
/// the default path (missing is fine: None).
pub fn read(explicit: Option<&Path>) -> Result<Option<(PathBuf, Layer)>, ReadError> {
    let path = explicit.unwrap_or(Path::new(DEFAULT_PATH));
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some((path.to_path_buf(), parse(path, &text)?))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && explicit.is_none() => Ok(None),
        Err(source) => Err(ReadError::Io {
            path: path.into(),
            source,
        }),
    }
}

/// The settings in effect: merged from the defaults, the file and the
/// flags, and checked.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The file read, if any.
    pub file: Option<PathBuf>,
    /// Every key in effect (for `--check-config`).
    pub effective: Layer,
    pub config: Config,
    pub log_level: tracing::Level,
}

impl Settings {
    /// The effective settings as a TOML document.
    pub fn to_toml(&self) -> String {
        self.effective.to_toml()
    }
}

/// Where a key's value came from, for messages naming it.
struct Namer<'a> {
    file: Option<&'a Path>,
    flags: &'a Layer,
}

/// Where a value was given.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Given {
    ByFlag,
    InFile,
}

impl Namer<'_> {
    /// Where `s` was given: by its flag when the flags have it, else in
    /// the file.
    fn given<T>(&self, s: &Setting<T>) -> Given {
        match self.flags.has(s) {
            true => Given::ByFlag,
            false => Given::InFile,
        }
    }

    /// `--flag` when given by the flag (or there is no file), else
    /// `FILE: key`.
    fn name(&self, given: Given, key: &str, flag: String) -> String {
        match self.file {
            Some(file) if given == Given::InFile => format!("{}: {key}", file.display()),
            _ => flag,
        }
    }
}

/// Merge the file's layer (if any) and the flags' layer over the defaults,
/// apply the rules between keys, and build the daemon's `Config`.
pub fn settings(file: Option<(PathBuf, Layer)>, flags: Layer) -> Result<Settings, SettingsError> {
    let (path, file_layer) = match file {
        Some((p, l)) => (Some(p), l),
        None => (None, Layer::default()),
    };
    let namer = Namer {
        file: path.as_deref(),
        flags: &flags,
    };
    check_off(&namer, &file_layer, &PERSIST, "keeps nothing on disk")?;
    check_off(&namer, &file_layer, &ON_HOST, "names nothing on the host")?;
    check_remote(&namer, &file_layer.clone().overlay(&flags))?;
    let m = Layer::defaults().overlay(&file_layer).overlay(&flags);
    let continuous = continuous(&namer, &m)?;
    let grants = m
        .get_or_default(&GRANTS)
        .iter()
        .map(|g| g.parse::<Grant>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(SettingsError::Grant)?;
    let mut config = Config::new(m.get_or_default(&SOCKET));
    config.socket_group = m.get(&SOCKET_GROUP);
    config.grants = grants;
    config.ring_pages = m.get(&RING_PAGES);
    config.drain_interval = Duration::from_secs(m.get_or_default(&DRAIN_INTERVAL));
    config.limits = registry::Limits {
        max_sessions: m.get_or_default(&MAX_SESSIONS),
        max_sessions_per_caller: m.get_or_default(&MAX_SESSIONS_PER_CALLER),
        max_frequency_hz: m.get(&MAX_FREQUENCY),
        max_duration: m.get(&MAX_DURATION).map(Duration::from_secs),
        max_stacks: m.get_or_default(&MAX_STACKS),
        max_histogram_buckets: m.get_or_default(&MAX_HISTOGRAM_BUCKETS),
        max_concurrent_exports: m.get_or_default(&MAX_CONCURRENT_EXPORTS),
    };
    config.new_process_cpu = Duration::from_millis(m.get_or_default(&NEW_PROCESS_CPU));
    config.connections = conns::Limits {
        max_connections: m.get(&MAX_CONNECTIONS),
        max_per_peer: m.get(&MAX_CONNECTIONS_PER_PEER),
        max_unauthenticated: m.get(&MAX_UNAUTHENTICATED_CONNECTIONS),
        handshake_timeout: Duration::from_secs(m.get_or_default(&HANDSHAKE_TIMEOUT)),
        first_request_timeout: Duration::from_secs(m.get_or_default(&FIRST_REQUEST_TIMEOUT)),
        idle_timeout: Duration::from_secs(m.get_or_default(&IDLE_TIMEOUT)),
    };
    let mut effective = m.clone();
    if m.get_or_default(&PERSIST) {
        config.persist = Some(Persist {
            dir: m.get_or_default(&STATE_DIR),
            retention: Retention {
                max_sessions: m.get_or_default(&RETAIN_SESSIONS),
                max_age: Duration::from_secs_f64(m.get_or_default(&RETAIN_DAYS) * 86400.0),
                max_bytes: m.get_or_default(&RETAIN_BYTES),
            },
            checkpoint_interval: Duration::from_secs(m.get_or_default(&CHECKPOINT_INTERVAL)),
        });
    } else {
        effective.retain(|key| key == PERSIST.key || !key.starts_with("state."));
    }
    if let (Some(listen), Some(cert), Some(key), Some(tokens)) = (
        m.get(&LISTEN),
        m.get(&TLS_CERT),
        m.get(&TLS_KEY),
        m.get(&TOKENS),
    ) {
        config.remote = Some(Remote {
            listen,
            tls: TlsFiles {
                cert,
                key,
                client_ca: m.get(&TLS_CLIENT_CA),
            },
            tokens,
            cors_origins: m.get(&CORS_ORIGINS).unwrap_or_default(),
        });
    }
    config.metrics = m.get(&METRICS);
    config.memory_limit = m.get_or_default(&MEMORY_LIMIT);
    if !m.get_or_default(&ON_HOST) {
        config.naming = Naming::OffHost;
        effective.retain(|key| key == ON_HOST.key || !key.starts_with("symbols."));
    }
    config.debuginfod = debuginfod::Settings {
        urls: match config.naming {
            Naming::OnHost => m.get_or_default(&DEBUGINFOD_URLS),
            Naming::OffHost => Vec::new(),
        },
        timeout: Duration::from_secs(m.get_or_default(&DEBUGINFOD_TIMEOUT)),
        cache_bytes: (m.get_or_default(&DEBUGINFOD_CACHE_MIB) as u64) << 20,
    };
    config.ask_jvm = m
        .get_or_default(&ASK_JVM)
        .then(|| Duration::from_secs(m.get_or_default(&ASK_JVM_INTERVAL)));
    config.continuous = m.get_or_default(&CONTINUOUS).then_some(continuous);
    config.sinks = sinks(&namer, &m)?;
    config.kernel_frames = m
        .get_or_default(&KERNEL_FRAMES)
        .parse()
        .map_err(SettingsError::KernelFrames)?;
    let log_level = m
        .get_or_default(&LOG_LEVEL)
        .parse()
        .map_err(SettingsError::LogLevel)?;
    Ok(Settings {
        file: path,
        effective,
        config,
        log_level,
    })
}

/// `state.persist = false` keeps nothing, and `symbols.on_host = false`
/// names nothing on the host: the file may not also set their sections'
/// other keys. (A flag of the section given overrides the file's `false`,
/// and `--no-persist` or `--no-host-symbols` the file's other keys.)
fn check_off(
    namer: &Namer<'_>,
    file: &Layer,
    off: &Setting<bool>,
    does: &'static str,
) -> Result<(), SettingsError> {
    if file.get(off) != Some(false) || namer.flags.has(off) {
        return Ok(());
    }
    let section = off.key.split_once('.').map_or("", |(s, _)| s);
    let mut set: Vec<&str> = file
        .keys()
        .filter(|k| k.split_once('.').is_some_and(|(s, _)| s == section) && *k != off.key)
        .collect();
    set.sort_by_key(|k| ALL.iter().position(|s| s.key() == *k));
    if let Some(&other) = set.first() {
        return Err(SettingsError::OffWith {
            setting: namer.name(Given::InFile, off.key, off.flag_name()),
            does,
            other,
        });
    }
    Ok(())
}

/// The continuous settings (checked whether or not they are on): history
/// must hold at least one window.
fn continuous(namer: &Namer<'_>, m: &Layer) -> Result<crate::continuous::Settings, SettingsError> {
    let window = Duration::from_secs(m.get_or_default(&CONTINUOUS_WINDOW));
    let retention_age = m.get_or_default(&CONTINUOUS_RETENTION_AGE);
    if retention_age < window {
        let s = &CONTINUOUS_RETENTION_AGE;
        return Err(SettingsError::HistoryShorterThanWindow {
            setting: namer.name(namer.given(s), s.key, s.flag_name()),
            age: retention_age,
            window,
        });
    }
    let fraction = m.get_or_default(&CONTINUOUS_SCHEDULE);
    let period = m.get_or_default(&CONTINUOUS_SCHEDULE_PERIOD);
    if fraction < 1.0 && !period.as_secs().is_multiple_of(window.as_secs()) {
        let s = &CONTINUOUS_SCHEDULE_PERIOD;
        return Err(SettingsError::PeriodNotWholeWindows {
            setting: namer.name(namer.given(s), s.key, s.flag_name()),
            period,
            window,
        });
    }
    let select = m
        .get_or_default(&CONTINUOUS_SELECT)
        .iter()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()
        .map_err(SettingsError::Selector)?;
    Ok(crate::continuous::Settings {
        host: m
            .get(&CONTINUOUS_HOST)
            .unwrap_or_else(crate::continuous::history::host_name),
        frequency_hz: m.get_or_default(&CONTINUOUS_FREQUENCY),
        stack_bytes: m.get_or_default(&CONTINUOUS_STACK_BYTES),
        window,
        retention_bytes: m.get_or_default(&CONTINUOUS_RETENTION_BYTES),
        retention_age,
        schedule: (fraction < 1.0).then_some(crate::continuous::Schedule { fraction, period }),
        select,
        kubelet_logs: m.get_or_default(&CONTINUOUS_KUBELET_LOGS),
    })
}

/// The `[[sink]]` entries with the files they name read; they send
/// continuous windows, so continuous profiling must be on.
fn sinks(namer: &Namer<'_>, m: &Layer) -> Result<Vec<sinks::Settings>, SettingsError> {
    let file = namer.file.map(Path::to_path_buf);
    if !m.sinks().is_empty() && !m.get_or_default(&CONTINUOUS) {
        return Err(SettingsError::SinksWithoutContinuous { file });
    }
    m.sinks()
        .iter()
        .enumerate()
        .map(|(index, e)| {
            e.settings().map_err(|source| SettingsError::Sink {
                file: file.clone(),
                index,
                source: Box::new(source),
            })
        })
        .collect()
}

/// The TLS listener needs its certificate, key and tokens; its other keys
/// mean nothing without it.
fn check_remote(namer: &Namer<'_>, r: &Layer) -> Result<(), SettingsError> {
    let flags = namer.flags;
    let needed = [&TLS_CERT, &TLS_KEY, &TOKENS];
    if r.has(&LISTEN) {
        if let Some(missing) = needed.iter().find(|s| !r.has(s)) {
            return Err(match namer.file {
                Some(file) if !flags.has(&LISTEN) => SettingsError::ListenWithoutInFile {
                    file: file.into(),
                    missing: missing.key,
                },
                _ => SettingsError::ListenWithout {
                    missing: missing.flag_name(),
                },
            });
        }
        return Ok(());
    }
    let set = needed
        .into_iter()
        .chain([&TLS_CLIENT_CA])
        .map(|s| (s.key, r.has(s), namer.given(s), s.flag_name()))
        .chain([(
            CORS_ORIGINS.key,
            r.get(&CORS_ORIGINS).is_some_and(|o| !o.is_empty()),
            namer.given(&CORS_ORIGINS),
            CORS_ORIGINS.flag_name(),
        )]);
    for (key, set, given, flag) in set {
        if set {
            return Err(SettingsError::NoListener {
                setting: namer.name(given, key, flag),
                add: if given == Given::ByFlag || namer.file.is_none() {
                    "--listen"
                } else {
                    "remote.listen ="
                },
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(Path::new("/etc/profd/profd.toml"), text)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn values_are_checked_with_key_and_line() {
        let e = err("socket = \"/run/p.sock\"\n[limits]\nmax_sessions = -1\n");
        assert_eq!(
            e,
            "/etc/profd/profd.toml: limits.max_sessions: expected a positive integer, got -1 (line 3)"
        );
        let e = err("[state]\nretain_bytes = \"lots\"\n");
        assert!(
            e.starts_with("/etc/profd/profd.toml: state.retain_bytes: expected a size"),
            "{e}"
        );
        let e = err("ring_pages = 3\n");
        assert!(e.contains("ring_pages: expected a power of two"), "{e}");
        let e = err("log_level = 5\n");
        assert!(e.contains("log_level: expected one of"), "{e}");
        let e = err("[metrics]\nlisten = \"localhost\"\n");
        assert!(
            e.contains("metrics.listen: expected an address and port"),
            "{e}"
        );
    }

    #[test]
    fn unknown_keys_and_syntax_errors_are_named() {
        let e = err("[limits]\nmax_session = 3\n");
        assert!(
            e.starts_with("/etc/profd/profd.toml: limits.max_session: unknown key"),
            "{e}"
        );
        assert!(e.contains("line 2"), "{e}");
        let e = err("sockett = \"x\"\n");
        assert!(
            e.starts_with("/etc/profd/profd.toml: sockett: unknown key"),
            "{e}"
        );
        let e = err("[limits\n");
        assert!(e.starts_with("/etc/profd/profd.toml: "), "{e}");
        assert!(e.contains("line 1"), "{e}");
    }

    #[test]
    fn flags_override_the_file_and_defaults_fill_the_rest() {
        let file = parse(
            Path::new("f.toml"),
            "[limits]\nmax_sessions = 3\nmax_stacks = 10\n[state]\npersist = false\n",
        )
        .unwrap();
        let mut flags = Layer::default();
        flags.set(&MAX_SESSIONS, 5);
        let s = settings(Some(("f.toml".into(), file)), flags).unwrap();
        assert_eq!(s.config.limits.max_sessions, 5);
        assert_eq!(s.config.limits.max_stacks, 10);
        assert_eq!(s.config.limits.max_sessions_per_caller, 16);
        assert!(s.config.persist.is_none());
        assert_eq!(s.config.socket, Path::new(profd_common::DEFAULT_SOCKET));
        let shown = s.to_toml();
        assert!(shown.contains("max_sessions = 5"), "{shown}");
        assert_eq!(s.config.connections, crate::serve::conns::Limits::default());
        let file = parse(
            Path::new("f.toml"),
            "[limits]\nmax_connections = 32\nhandshake_timeout = 3\nidle_timeout = 60\n\
             max_connections_per_peer = 5\nmax_unauthenticated_connections = 12\n\
             first_request_timeout = 4\n",
        )
        .unwrap();
        let s = settings(Some(("f.toml".into(), file)), Layer::default()).unwrap();
        assert_eq!(s.config.connections.max_connections(), 32);
        assert_eq!(s.config.connections.max_per_peer(), 5);
        assert_eq!(s.config.connections.max_unauthenticated(), 12);
        assert_eq!(
            s.config.connections.first_request_timeout,
            Duration::from_secs(4)
        );
        assert_eq!(
            s.config.connections.handshake_timeout,
            Duration::from_secs(3)
        );
        assert_eq!(s.config.connections.idle_timeout, Duration::from_secs(60));
        let e = err("[limits]\nidle_timeout = 0\n");
        assert!(
            e.contains("limits.idle_timeout: expected a positive number of seconds"),
            "{e}"
        );
    }

    #[test]
    fn the_tls_listener_needs_its_files() {
        let file = parse(
            Path::new("f.toml"),
            "[remote]\nlisten = \"127.0.0.1:7000\"\ntls_cert = \"c\"\ntls_key = \"k\"\n",
        )
        .unwrap();
        let e = settings(Some(("f.toml".into(), file.clone())), Layer::default())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("f.toml: remote.tokens: missing"), "{e}");
        let mut flags = Layer::default();
        flags.set(&TOKENS, "t".into());
        let s = settings(Some(("f.toml".into(), file)), flags).unwrap();
        assert_eq!(s.config.remote.unwrap().tokens, Path::new("t"));
        let mut flags = Layer::default();
        flags.set(&TLS_KEY, "k".into());
        let e = settings(None, flags).unwrap_err().to_string();
        assert!(e.starts_with("--tls-key: is set but"), "{e}");
    }

    #[test]
    fn cors_origins_are_origins_of_the_tls_listener() {
        let listener = "[remote]\nlisten = \"127.0.0.1:7000\"\ntls_cert = \"c\"\ntls_key = \"k\"\ntokens = \"t\"\n";
        let file = parse(
            Path::new("f.toml"),
            &format!(
                "{listener}cors_origins = [\"https://dash.example.com\", \"http://[::1]:8080\"]\n"
            ),
        )
        .unwrap();
        let s = settings(Some(("f.toml".into(), file)), Layer::default()).unwrap();
        assert_eq!(
            s.config.remote.unwrap().cors_origins,
            ["https://dash.example.com", "http://[::1]:8080"]
        );
        for bad in [
            "\"https://dash.example.com/\"",
            "\"dash.example.com\"",
            "\"*\"",
            "\"https://\"",
            "7",
        ] {
            let e = err(&format!("{listener}cors_origins = [{bad}]\n"));
            assert!(
                e.contains("remote.cors_origins")
                    && e.contains("an origin such as")
                    && e.contains("(line 6)"),
                "{bad}: {e}"
            );
        }
        let e = err(&format!("{listener}cors_origins = \"https://a.example\"\n"));
        assert!(e.contains("a list of origins"), "{e}");
        let file = parse(
            Path::new("f.toml"),
            "[remote]\ncors_origins = [\"https://a.example\"]\n",
        )
        .unwrap();
        let e = settings(Some(("f.toml".into(), file)), Layer::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("f.toml: remote.cors_origins: is set but the TLS listener is not"),
            "{e}"
        );
        let mut flags = Layer::default();
        flags.set(&CORS_ORIGINS, vec!["https://a.example".into()]);
        let e = settings(None, flags).unwrap_err().to_string();
        assert!(e.starts_with("--cors-origin: is set but"), "{e}");
    }

    #[test]
    fn persist_false_with_other_state_keys_is_refused() {
        let file = parse(
            Path::new("f.toml"),
            "[state]\npersist = false\ndir = \"/x\"\n",
        )
        .unwrap();
        let e = settings(Some(("f.toml".into(), file)), Layer::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("f.toml: state.persist: false keeps nothing"),
            "{e}"
        );
    }

    /// The flags of `args`, as `profd` reads them.
    fn flags(args: &[&str]) -> Result<Layer, clap::Error> {
        use clap::{Args, FromArgMatches};
        let cmd = Flags::augment_args(clap::Command::new("profd"));
        let m = cmd.try_get_matches_from(std::iter::once("profd").chain(args.iter().copied()))?;
        Flags::from_arg_matches(&m).map(|f| f.0)
    }

    #[test]
    fn every_setting_has_one_flag_and_one_key() {
        use clap::Args;
        Flags::augment_args(clap::Command::new("profd")).debug_assert();
        let mut keys: Vec<_> = ALL.iter().map(|s| s.key()).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), ALL.len(), "a key is declared twice");
        for key in keys {
            let section = key.split_once('.').map_or("", |(s, _)| s);
            assert!(
                section.is_empty() || SECTIONS.contains(&section),
                "{key}: no such section"
            );
        }
    }

    #[test]
    fn sink_entries_are_checked_key_by_key_with_their_line() {
        let e = err("[[sink]]\nurl = \"http://h:8123\"\n");
        assert_eq!(e, "/etc/profd/profd.toml: sink[0]: no kind: add kind = … (expected one of \"clickhouse\", \"pyroscope\", \"otlp\") (line 1)");
        let e = err("[[sink]]\nkind = \"clickhouse\"\nurl = \"http://h:8123\"\n\n[[sink]]\nkind = \"pyroscope\"\nurl = \"http://h:4040\"\ndatabase = \"x\"\n");
        assert!(
            e.starts_with("/etc/profd/profd.toml: sink[1].database: unknown key for a pyroscope sink (it takes `kind`, `name`, `url`")
                && e.ends_with("(line 8)"),
            "{e}"
        );
        let e = err("[[sink]]\nkind = \"otlp\"\nurl = \"grpc://h:4317\"\n");
        assert!(
            e.contains("sink[0].url: \"grpc://h:4317\": use http:// or https:// (line 3)"),
            "{e}"
        );
        let e = err("[[sink]]\nkind = \"clickhouse\"\nurl = \"http://u:p@h:8123\"\n");
        assert!(e.contains("sink[0].url: has credentials in it"), "{e}");
        let e = err("[[sink]]\nkind = \"clickhouse\"\nurl = \"http://h\"\nspool_bytes = 0\n");
        assert!(
            e.contains("sink[0].spool_bytes: expected a size above 0"),
            "{e}"
        );
        let e = err("[[sink]]\nkind = \"clickhouse\"\nurl = \"http://h\"\ndatabase = \"a;b\"\n");
        assert!(
            e.contains("sink[0].database: database: \"a;b\" is not a plain name"),
            "{e}"
        );
        let e = err("[[sink]]\nkind = \"clickhouse\"\nurl = \"http://a\"\n[[sink]]\nkind = \"clickhouse\"\nurl = \"http://b\"\n");
        assert!(
            e.contains("sink[1].name: name \"clickhouse\" is also sink[0]'s"),
            "{e}"
        );
        let e = err("sink = 3\n");
        assert!(e.contains("sink: expected [[sink]] tables"), "{e}");
    }

    #[test]
    fn sinks_read_their_files_and_need_continuous_profiling() {
        let dir = std::env::temp_dir().join(format!("profd-sink-conf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("ch.key");
        std::fs::write(&key, "k3y\n").unwrap();
        let path = Path::new("/etc/profd/profd.toml");
        let text = format!(
            "[continuous]\nenabled = true\n\n[[sink]]\nkind = \"clickhouse\"\nname = \"ch\"\nurl = \"http://127.0.0.1:8123\"\nuser = \"profd\"\npassword_file = \"{}\"\n",
            key.display()
        );
        let layer = parse(path, &text).unwrap();
        let s = settings(Some((path.into(), layer.clone())), Layer::default()).unwrap();
        assert_eq!(s.config.sinks.len(), 1);
        let sink = &s.config.sinks[0];
        let sinks::Settings::ClickHouse(ch) = sink else {
            panic!("a clickhouse sink: {sink:?}")
        };
        assert_eq!(ch.key.as_ref().map(|k| k.expose()), Some("k3y"));
        assert_eq!(sink.common().spool_bytes, sinks::DEFAULT_SPOOL_BYTES);
        // Shown by --check-config with the file's path, never the secret;
        // and read back the same.
        let shown = s.to_toml();
        assert!(
            shown.contains("[[sink]]\nkind = \"clickhouse\"\nname = \"ch\""),
            "{shown}"
        );
        assert!(shown.contains("password_file = "), "{shown}");
        assert!(!shown.contains("k3y"), "{shown}");
        assert_eq!(parse(path, &shown).unwrap().sinks(), layer.sinks());
        // A file that cannot be read names the key and the file.
        std::fs::remove_file(&key).unwrap();
        let e = settings(Some((path.into(), layer)), Layer::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("/etc/profd/profd.toml: sink[0].password_file: ")
                && e.contains("ch.key: No such file"),
            "{e}"
        );
        // Without continuous profiling there is nothing to send.
        let off = parse(path, &text.replace("enabled = true", "enabled = false")).unwrap();
        let e = settings(Some((path.into(), off)), Layer::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a sink sends continuous windows, but continuous profiling is off"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_defaults_shown_read_back_as_the_same_settings() {
        let defaults = Layer::defaults();
        let shown = defaults.to_toml();
        assert!(
            shown.starts_with("socket = \"/run/profd/profd.sock\"\n"),
            "{shown}"
        );
        assert!(shown.contains("\n\n[limits]\n"), "{shown}");
        assert!(shown.contains("[state]\npersist = true\n"), "{shown}");
        assert!(
            shown.ends_with(
                "[continuous]\nenabled = false\nfrequency = 19\nwindow = 10\n\
                 stack_bytes = 16384\nretention_bytes = \"256M\"\nretention_age = \"7d\"\n\
                 schedule = 1.0\nschedule_period = \"10m\"\nselect = []\n\
                 kubelet_logs = \"/var/log\"\n"
            ),
            "{shown}"
        );
        assert_eq!(parse(Path::new("f.toml"), &shown).unwrap(), defaults);
    }

    #[test]
    fn flags_read_as_the_file_reads_their_keys() {
        let layer = flags(&[
            "--max-sessions",
            "5",
            "--grant",
            "root:root",
            "--grant",
            "root:root",
            "--retain-bytes",
            "2G",
            "--log-level",
            "DEBUG",
        ])
        .unwrap();
        let file = parse(
            Path::new("f.toml"),
            "grants = [\"root:root\", \"root:root\"]\nlog_level = \"debug\"\n\
             [limits]\nmax_sessions = 5\n[state]\npersist = true\nretain_bytes = \"2G\"\n",
        )
        .unwrap();
        // A flag of [state] turns persisting on.
        assert_eq!(layer, file);
        assert_eq!(layer.get(&RETAIN_BYTES), Some(2 << 30));
        assert_eq!(flags(&[]).unwrap(), Layer::default());
        let off = flags(&["--no-persist"]).unwrap();
        assert_eq!(off.get(&PERSIST), Some(false));
        let e = flags(&["--no-persist", "--retain-days", "2"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
        let e = flags(&["--ring-pages", "3"]).unwrap_err().to_string();
        assert!(
            e.contains("'--ring-pages <PAGES>': expected a power of two"),
            "{e}"
        );
    }

    #[test]
    fn continuous_profiling_is_on_only_when_enabled() {
        let s = settings(None, Layer::default()).unwrap();
        assert_eq!(s.config.continuous, None);
        let file = parse(
            Path::new("f.toml"),
            "[continuous]\nwindow = 5\nselect = [\"unit:nginx\"]\n",
        )
        .unwrap();
        let s = settings(Some(("f.toml".into(), file.clone())), Layer::default()).unwrap();
        assert_eq!(s.config.continuous, None);
        let mut on = Layer::default();
        on.set(&CONTINUOUS, true);
        let c = settings(Some(("f.toml".into(), file)), on)
            .unwrap()
            .config
            .continuous
            .unwrap();
        assert_eq!(c.window, Duration::from_secs(5));
        assert_eq!(c.frequency_hz, 19);
        assert_eq!(c.retention_bytes, 256 << 20);
        assert_eq!(c.retention_age, Duration::from_secs(7 * 86400));
        assert_eq!(
            c.select,
            [crate::continuous::service::Selector::Unit("nginx".into())]
        );
        let file = parse(
            Path::new("f.toml"),
            "[continuous]\nenabled = true\nfrequency = 97\nwindow = 15\n\
             retention_bytes = \"2G\"\nretention_age = \"12h\"\n\
             schedule = \"10%\"\nschedule_period = \"15m\"\n",
        )
        .unwrap();
        let c = settings(Some(("f.toml".into(), file)), Layer::default())
            .unwrap()
            .config
            .continuous
            .unwrap();
        assert_eq!(
            c,
            crate::continuous::Settings {
                host: crate::continuous::history::host_name(),
                frequency_hz: 97,
                stack_bytes: 16384,
                window: Duration::from_secs(15),
                retention_bytes: 2 << 30,
                retention_age: Duration::from_secs(12 * 3600),
                schedule: Some(crate::continuous::Schedule {
                    fraction: 0.1,
                    period: Duration::from_secs(900),
                }),
                select: Vec::new(),
                kubelet_logs: "/var/log".into(),
            }
        );
    }

    /// A schedule's share is above 0 and at most 1, its slots whole
    /// windows; each refusal names the key and what to change.
    #[test]
    fn a_schedule_is_a_share_and_whole_windows() {
        let read = |text: &str| {
            let file = parse(Path::new("f.toml"), text).map_err(|e| e.to_string())?;
            settings(Some(("f.toml".into(), file)), Layer::default())
                .map(|s| s.config.continuous.and_then(|c| c.schedule))
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            read("[continuous]\nenabled = true\nschedule = 0.25\n"),
            Ok(Some(crate::continuous::Schedule {
                fraction: 0.25,
                period: Duration::from_secs(600),
            }))
        );
        assert_eq!(
            read("[continuous]\nenabled = true\nschedule = 1\n"),
            Ok(None)
        );
        for bad in ["0", "1.5", "\"120%\"", "\"some\""] {
            let e = read(&format!("[continuous]\nenabled = true\nschedule = {bad}\n")).unwrap_err();
            assert!(
                e.contains("continuous.schedule") && e.contains("a share above 0 and at most 1"),
                "{bad}: {e}"
            );
        }
        let e = read(
            "[continuous]\nenabled = true\nwindow = 7\nschedule = 0.5\nschedule_period = \"1m\"\n",
        )
        .unwrap_err();
        assert!(
            e.contains("continuous.schedule_period: 1m is not a whole number of windows (continuous.window: 7s)"),
            "{e}"
        );
    }

    #[test]
    fn continuous_flags_read_as_the_file_reads_their_keys() {
        let layer = flags(&[
            "--continuous",
            "--continuous-freq",
            "49",
            "--continuous-window",
            "30",
            "--continuous-retention-bytes",
            "64M",
            "--continuous-retention-age",
            "36h",
            "--continuous-select",
            "comm:postgres*",
            "--continuous-select",
            "cgroup:/system.slice/foo",
            "--continuous-host",
            "node-7",
            "--continuous-kubelet-logs",
            "/host/var/log",
        ])
        .unwrap();
        let file = parse(
            Path::new("f.toml"),
            "[continuous]\nenabled = true\nfrequency = 49\nwindow = 30\n\
             retention_bytes = 67108864\nretention_age = 129600\nhost = \"node-7\"\n\
             select = [\"comm:postgres*\", \"cgroup:/system.slice/foo\"]\n\
             kubelet_logs = \"/host/var/log\"\n",
        )
        .unwrap();
        assert_eq!(layer, file);
        let s = settings(None, layer.clone()).unwrap();
        let c = s.config.continuous.unwrap();
        assert_eq!(c.host, "node-7");
        assert_eq!(c.kubelet_logs, Path::new("/host/var/log"));
        // Other continuous flags do not turn it on.
        let layer = flags(&["--continuous-window", "30"]).unwrap();
        assert_eq!(layer.get(&CONTINUOUS), None);
        let s = settings(None, layer).unwrap();
        assert_eq!(s.config.continuous, None);
        let e = flags(&["--continuous-select", "nginx"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("'--continuous-select <SELECTOR>': bad selector \"nginx\": expected one of unit:NAME"),
            "{e}"
        );
        let e = flags(&["--continuous-freq", "0"]).unwrap_err().to_string();
        assert!(e.contains("expected a frequency in Hz from 1 to"), "{e}");
    }

    #[test]
    fn bad_continuous_values_name_the_setting() {
        let max = crate::os::sysctl::max_sample_rate();
        for (text, key, what) in [
            ("enabled = 1", "enabled", "expected true or false, got 1"),
            (
                "frequency = 0",
                "frequency",
                "expected a frequency in Hz from 1 to",
            ),
            (
                &format!("frequency = {}", u64::from(max) + 1),
                "frequency",
                "expected a frequency in Hz from 1 to",
            ),
            ("frequency = \"19\"", "frequency", "expected a frequency"),
            (
                "window = 0",
                "window",
                "expected a number of seconds from 1 to 3600, got 0",
            ),
            (
                "window = 3601",
                "window",
                "expected a number of seconds from 1 to 3600",
            ),
            ("window = 1.5", "window", "expected a number of seconds"),
            (
                "stack_bytes = 100",
                "stack_bytes",
                "expected bytes of stack to copy: a multiple of 8 up to 65528 \
                 (the kernel's largest), or 0 for frame pointers, got 100",
            ),
            (
                "stack_bytes = 65536",
                "stack_bytes",
                "expected bytes of stack to copy",
            ),
            (
                "retention_bytes = \"512K\"",
                "retention_bytes",
                "expected a size of at least 1M",
            ),
            (
                "retention_bytes = \"lots\"",
                "retention_bytes",
                "expected a size of at least 1M",
            ),
            (
                "retention_age = \"7 parsecs\"",
                "retention_age",
                "expected a duration such as \"7d\"",
            ),
            ("retention_age = 0", "retention_age", "expected a duration"),
            (
                "select = \"comm:x\"",
                "select",
                "expected a list of selectors",
            ),
            (
                "select = [\"pid:3\"]",
                "select",
                "bad selector \"pid:3\": unknown kind `pid`",
            ),
            (
                "select = [\"comm:[\"]",
                "select",
                "bad selector \"comm:[\": the command name is not a glob",
            ),
            (
                "select = [3]",
                "select",
                "expected a selector, one of unit:NAME",
            ),
            (
                "kubelet_logs = \"var/log\"",
                "kubelet_logs",
                "expected an absolute path (starting with /), got \"var/log\"",
            ),
            (
                "kubelet_logs = \"\"",
                "kubelet_logs",
                "expected an absolute path",
            ),
            (
                "frequncy = 19",
                "frequncy",
                "unknown key (expected one of `enabled`, `frequency`",
            ),
        ] {
            let e = err(&format!("[continuous]\n{text}\n"));
            let want = format!("/etc/profd/profd.toml: continuous.{key}: {what}");
            assert!(e.starts_with(&want), "{text}: {e}\nwanted: {want}");
            assert!(e.ends_with("(line 2)"), "{e}");
        }
    }

    #[test]
    fn the_example_file_shows_the_continuous_defaults() {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/profd.toml"));
        let mut file = parse(path, &std::fs::read_to_string(path).unwrap()).unwrap();
        let mut defaults = Layer::defaults();
        file.retain(|k| k.starts_with("continuous."));
        defaults.retain(|k| k.starts_with("continuous."));
        assert_eq!(file.to_toml(), defaults.to_toml());
        assert_eq!(file, defaults);
    }

    #[test]
    fn debuginfod_settings_are_read_from_the_file_and_the_flags() {
        let file = parse(
            Path::new("f.toml"),
            "[symbols]\ndebuginfod_urls = [\"http://a.example:8002\", \"https://b.example/\"]\n\
             debuginfod_timeout = 3\ndebuginfod_cache_mib = 64\n",
        )
        .unwrap();
        let s = settings(Some(("f.toml".into(), file.clone())), Layer::default()).unwrap();
        assert_eq!(
            s.config.debuginfod,
            debuginfod::Settings {
                urls: vec!["http://a.example:8002".into(), "https://b.example/".into()],
                timeout: Duration::from_secs(3),
                cache_bytes: 64 << 20,
            }
        );
        // The flags replace the file's list.
        let given = flags(&[
            "--debuginfod-url",
            "http://c.example",
            "--debuginfod-timeout",
            "5",
        ])
        .unwrap();
        let s = settings(Some(("f.toml".into(), file)), given).unwrap();
        assert_eq!(s.config.debuginfod.urls, vec!["http://c.example"]);
        assert_eq!(s.config.debuginfod.timeout, Duration::from_secs(5));
        assert_eq!(s.config.debuginfod.cache_bytes, 64 << 20);
        // An empty list turns it off, whatever the environment says.
        let off = parse(Path::new("f.toml"), "[symbols]\ndebuginfod_urls = []\n").unwrap();
        let s = settings(Some(("f.toml".into(), off)), Layer::default()).unwrap();
        assert!(s.config.debuginfod.urls.is_empty());
        let e = err("[symbols]\ndebuginfod_urls = [\"ftp://x.example\"]\n");
        assert!(
            e.starts_with("/etc/profd/profd.toml: symbols.debuginfod_urls: expected a URL such as"),
            "{e}"
        );
        assert!(flags(&["--debuginfod-cache-mib", "0"]).is_err());
    }

    /// `symbols.on_host = false` (or `--no-host-symbols`) names nothing on
    /// the host and fetches nothing; the file may not also set the other
    /// symbols keys, nor may the flags be given together.
    #[test]
    fn symbols_off_the_host_name_and_fetch_nothing_here() {
        let s = settings(None, Layer::default()).unwrap();
        assert_eq!(s.config.naming, Naming::OnHost);
        let off = parse(Path::new("f.toml"), "[symbols]\non_host = false\n").unwrap();
        let s = settings(Some(("f.toml".into(), off)), Layer::default()).unwrap();
        assert_eq!(s.config.naming, Naming::OffHost);
        assert!(s.config.debuginfod.urls.is_empty());
        let s = settings(None, flags(&["--no-host-symbols"]).unwrap()).unwrap();
        assert_eq!(s.config.naming, Naming::OffHost);
        let both = parse(
            Path::new("f.toml"),
            "[symbols]\non_host = false\ndebuginfod_urls = [\"http://a.example\"]\n",
        )
        .unwrap();
        let e = settings(Some(("f.toml".into(), both.clone())), Layer::default())
            .map(|_| ())
            .expect_err("refused")
            .to_string();
        assert!(
            e.ends_with(
                "symbols.on_host: false names nothing on the host, \
                 but symbols.debuginfod_urls is set too: remove one of them"
            ),
            "{e}"
        );
        // A flag of the section overrides the file's false.
        let given = flags(&["--debuginfod-url", "http://b.example"]).unwrap();
        let s = settings(Some(("f.toml".into(), both)), given).unwrap();
        assert_eq!(s.config.naming, Naming::OnHost);
        // And the state section's false, as before.
        let state = parse(
            Path::new("f.toml"),
            "[state]\npersist = false\nretain_days = 3\n",
        )
        .unwrap();
        let e = settings(Some(("f.toml".into(), state)), Layer::default())
            .map(|_| ())
            .expect_err("refused")
            .to_string();
        assert!(
            e.ends_with(
                "false keeps nothing on disk, but state.retain_days is set too: remove one of them"
            ),
            "{e}"
        );
        assert!(flags(&["--no-host-symbols", "--debuginfod-url", "http://a.example"]).is_err());
    }

    #[test]
    fn continuous_history_holds_at_least_one_window() {
        let file = parse(
            Path::new("f.toml"),
            "[continuous]\nwindow = 600\nretention_age = \"5m\"\n",
        )
        .unwrap();
        let e = settings(Some(("f.toml".into(), file.clone())), Layer::default())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "f.toml: continuous.retention_age: 5m is shorter than one window (continuous.window: 600s), so no window would be kept: make it at least 10m"
        );
        let mut flags = Layer::default();
        flags.set(&CONTINUOUS_RETENTION_AGE, Duration::from_secs(5));
        let e = settings(None, flags.clone()).unwrap_err().to_string();
        assert!(
            e.starts_with("--continuous-retention-age: 5s is shorter"),
            "{e}"
        );
        flags.set(&CONTINUOUS_RETENTION_AGE, Duration::from_secs(600));
        assert!(settings(Some(("f.toml".into(), file)), flags).is_ok());
    }
}
