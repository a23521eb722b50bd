//! The settings file (TOML; `/etc/profd/profd.toml` unless `--config` names
//! another): its schema, the check of every value (errors name the file, the
//! key and the line), the rules between keys, and the merge with the
//! command-line flags (a flag given wins over the file) into a `Config`.
//! Flags reuse the same value checks, so both say the same thing.
use crate::auth::{Grant, TlsFiles};
use crate::registry::{max_sample_rate, Limits};
use crate::store::{
    parse_bytes, Persist, Retention, DEFAULT_CHECKPOINT_INTERVAL, DEFAULT_STATE_DIR,
};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Value;

/// Where the settings file is read from unless `--config` names another.
pub const DEFAULT_PATH: &str = "/etc/profd/profd.toml";

/// Longest retention in days (a century).
const MAX_RETAIN_DAYS: f64 = 36500.0;

/// One layer of settings: the file's, the flags given, or the defaults.
/// Every key may be missing; [`Layer::defaults`] fills the ones that have
/// a default. The field names are the file's keys.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    #[serde(
        default,
        deserialize_with = "de_path",
        skip_serializing_if = "Option::is_none"
    )]
    pub socket: Option<PathBuf>,
    #[serde(
        default,
        deserialize_with = "de_name",
        skip_serializing_if = "Option::is_none"
    )]
    pub socket_group: Option<String>,
    #[serde(
        default,
        deserialize_with = "de_grants",
        skip_serializing_if = "Option::is_none"
    )]
    pub grants: Option<Vec<String>>,
    #[serde(
        default,
        deserialize_with = "de_ring_pages",
        skip_serializing_if = "Option::is_none"
    )]
    pub ring_pages: Option<usize>,
    #[serde(
        default,
        deserialize_with = "de_log_level",
        skip_serializing_if = "Option::is_none"
    )]
    pub log_level: Option<String>,
    #[serde(
        default,
        deserialize_with = "de_kernel_frames",
        skip_serializing_if = "Option::is_none"
    )]
    pub kernel_frames: Option<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub limits: LimitsLayer,
    #[serde(default, skip_serializing_if = "is_default")]
    pub remote: RemoteLayer,
    #[serde(default, skip_serializing_if = "is_default")]
    pub state: StateLayer,
    #[serde(default, skip_serializing_if = "is_default")]
    pub metrics: MetricsLayer,
}

/// `[limits]`: the daemon's resource limits.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsLayer {
    #[serde(
        default,
        deserialize_with = "de_positive",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_sessions: Option<usize>,
    #[serde(
        default,
        deserialize_with = "de_positive",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_sessions_per_caller: Option<usize>,
    #[serde(
        default,
        deserialize_with = "de_frequency",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_frequency: Option<u32>,
    #[serde(
        default,
        deserialize_with = "de_seconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_duration: Option<u64>,
    #[serde(
        default,
        deserialize_with = "de_positive",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_stacks: Option<usize>,
    #[serde(
        default,
        deserialize_with = "de_positive",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_connections: Option<usize>,
    #[serde(
        default,
        deserialize_with = "de_seconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub handshake_timeout: Option<u64>,
    #[serde(
        default,
        deserialize_with = "de_seconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub idle_timeout: Option<u64>,
    #[serde(
        default,
        deserialize_with = "de_buckets",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_histogram_buckets: Option<u32>,
    #[serde(
        default,
        deserialize_with = "de_positive",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_concurrent_exports: Option<usize>,
}

/// `[remote]`: the TLS listener.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteLayer {
    #[serde(
        default,
        deserialize_with = "de_addr",
        skip_serializing_if = "Option::is_none"
    )]
    pub listen: Option<SocketAddr>,
    #[serde(
        default,
        deserialize_with = "de_path",
        skip_serializing_if = "Option::is_none"
    )]
    pub tls_cert: Option<PathBuf>,
    #[serde(
        default,
        deserialize_with = "de_path",
        skip_serializing_if = "Option::is_none"
    )]
    pub tls_key: Option<PathBuf>,
    #[serde(
        default,
        deserialize_with = "de_path",
        skip_serializing_if = "Option::is_none"
    )]
    pub tls_client_ca: Option<PathBuf>,
    #[serde(
        default,
        deserialize_with = "de_path",
        skip_serializing_if = "Option::is_none"
    )]
    pub tokens: Option<PathBuf>,
    #[serde(
        default,
        deserialize_with = "de_origins",
        skip_serializing_if = "Option::is_none"
    )]
    pub cors_origins: Option<Vec<String>>,
}

/// `[state]`: where ended sessions are kept across restarts.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StateLayer {
    #[serde(
        default,
        deserialize_with = "de_bool",
        skip_serializing_if = "Option::is_none"
    )]
    pub persist: Option<bool>,
    #[serde(
        default,
        deserialize_with = "de_path",
        skip_serializing_if = "Option::is_none"
    )]
    pub dir: Option<PathBuf>,
    #[serde(
        default,
        deserialize_with = "de_positive",
        skip_serializing_if = "Option::is_none"
    )]
    pub retain_sessions: Option<usize>,
    #[serde(
        default,
        deserialize_with = "de_days",
        skip_serializing_if = "Option::is_none"
    )]
    pub retain_days: Option<f64>,
    #[serde(
        default,
        deserialize_with = "de_bytes",
        skip_serializing_if = "Option::is_none"
    )]
    pub retain_bytes: Option<u64>,
    #[serde(
        default,
        deserialize_with = "de_seconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub checkpoint_interval: Option<u64>,
}

/// `[metrics]`: the Prometheus endpoint.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsLayer {
    #[serde(
        default,
        deserialize_with = "de_addr",
        skip_serializing_if = "Option::is_none"
    )]
    pub listen: Option<SocketAddr>,
}

fn is_default<T: Default + PartialEq>(t: &T) -> bool {
    *t == T::default()
}

// ---------------------------------------------------------------------------
// Value checks, shared by the file and the flags.

/// A value that is not what a key takes: says what it takes and what it got.
fn expected(what: &str, got: &Value) -> String {
    format!("expected {what}, got {got}")
}

/// An integer above 0 (counts and limits).
pub fn positive(v: &Value) -> Result<usize, String> {
    match v {
        Value::Integer(n) if *n > 0 => {
            usize::try_from(*n).map_err(|_| expected("a positive integer", v))
        }
        _ => Err(expected("a positive integer", v)),
    }
}

/// A number of histogram buckets profd can answer with at all.
pub fn buckets(v: &Value) -> Result<u32, String> {
    let max = crate::rpc::MAX_BUCKETS;
    match v {
        Value::Integer(n) if *n > 0 && *n <= i64::from(max) => Ok(*n as u32),
        _ => Err(expected(&format!("a number of buckets from 1 to {max}"), v)),
    }
}

/// A sampling frequency the kernel allows.
pub fn frequency(v: &Value) -> Result<u32, String> {
    let max = max_sample_rate();
    match v {
        Value::Integer(n) if *n > 0 && *n <= i64::from(max) => Ok(*n as u32),
        _ => Err(expected(
            &format!("a frequency in Hz from 1 to {max} (the kernel's perf_event_max_sample_rate)"),
            v,
        )),
    }
}

/// Whole seconds above 0.
pub fn seconds(v: &Value) -> Result<u64, String> {
    match v {
        Value::Integer(n) if *n > 0 => Ok(*n as u64),
        _ => Err(expected("a positive number of seconds", v)),
    }
}

/// Ring data pages: a power of two (the kernel's rule).
pub fn ring_pages(v: &Value) -> Result<usize, String> {
    match v {
        Value::Integer(n) if *n > 0 && (*n as u64).is_power_of_two() && *n <= 1 << 20 => {
            Ok(*n as usize)
        }
        _ => Err(expected(
            "a power of two (1, 2, 4, ... 1048576: the kernel's rule)",
            v,
        )),
    }
}

/// Days, fractions allowed.
pub fn days(v: &Value) -> Result<f64, String> {
    let d = match v {
        Value::Integer(n) => *n as f64,
        Value::Float(f) => *f,
        _ => f64::NAN,
    };
    if d.is_finite() && d > 0.0 && d <= MAX_RETAIN_DAYS {
        Ok(d)
    } else {
        Err(expected(
            &format!("a number of days above 0 (fractions allowed), at most {MAX_RETAIN_DAYS}"),
            v,
        ))
    }
}

/// A size above 0: bytes, or a string with K, M, G or T (powers of 1024).
pub fn bytes(v: &Value) -> Result<u64, String> {
    let what = "a size above 0, such as 1073741824 or \"512M\" (K, M, G, T: powers of 1024)";
    match v {
        Value::Integer(n) if *n > 0 => Ok(*n as u64),
        Value::String(s) => match parse_bytes(s) {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(expected(what, v)),
        },
        _ => Err(expected(what, v)),
    }
}

/// A log level.
pub fn log_level(v: &Value) -> Result<String, String> {
    let what = "one of \"error\", \"warn\", \"info\", \"debug\", \"trace\"";
    match v {
        Value::String(s) if s.parse::<tracing::Level>().is_ok() => Ok(s.to_ascii_lowercase()),
        _ => Err(expected(what, v)),
    }
}

/// An address and port, such as `127.0.0.1:9464` or `[::1]:9464`.
pub fn addr(v: &Value) -> Result<SocketAddr, String> {
    match v {
        Value::String(s) => s
            .parse()
            .map_err(|_| expected("an address and port such as \"127.0.0.1:9464\"", v)),
        _ => Err(expected(
            "an address and port such as \"127.0.0.1:9464\"",
            v,
        )),
    }
}

/// A grant `GROUP:USER` naming a group and a user of this machine.
pub fn grant(v: &Value) -> Result<String, String> {
    match v {
        Value::String(s) => s.parse::<Grant>().map(|_| s.clone()),
        _ => Err(expected("a grant \"GROUP:USER\"", v)),
    }
}

/// A web origin allowed to call the API with grpc-web (CORS):
/// `scheme://host` or `scheme://host:port`, as browsers send it.
pub fn origin(v: &Value) -> Result<String, String> {
    let what = "an origin such as \"https://dash.example.com\" or \"http://localhost:8080\" (scheme, host and port only)";
    let Value::String(s) = v else {
        return Err(expected(what, v));
    };
    let host = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"));
    let ok = host.is_some_and(|h| {
        !h.is_empty()
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b))
    });
    if ok {
        Ok(s.clone())
    } else {
        Err(expected(what, v))
    }
}

/// What callers other than root are shown of kernel frames.
pub fn kernel_frames(v: &Value) -> Result<String, String> {
    let what = crate::kernel_view::VALUES;
    match v {
        Value::String(s) if s.parse::<crate::kernel_view::Setting>().is_ok() => Ok(s.clone()),
        _ => Err(expected(what, v)),
    }
}

fn de_with<'de, D, T>(d: D, check: fn(&Value) -> Result<T, String>) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
{
    let v = Value::deserialize(d)?;
    check(&v).map(Some).map_err(D::Error::custom)
}

fn de_positive<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    de_with(d, positive)
}

fn de_buckets<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    de_with(d, buckets)
}

fn de_frequency<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    de_with(d, frequency)
}

fn de_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    de_with(d, seconds)
}

fn de_ring_pages<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    de_with(d, ring_pages)
}

fn de_days<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    de_with(d, days)
}

fn de_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    de_with(d, bytes)
}

fn de_log_level<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    de_with(d, log_level)
}

fn de_kernel_frames<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    de_with(d, kernel_frames)
}

fn de_addr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    de_with(d, addr)
}

fn de_bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    de_with(d, |v| match v {
        Value::Boolean(b) => Ok(*b),
        _ => Err(expected("true or false", v)),
    })
}

fn de_path<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    de_with(d, |v| match v {
        Value::String(s) if !s.is_empty() => Ok(PathBuf::from(s)),
        _ => Err(expected("a path (a non-empty string)", v)),
    })
}

fn de_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    de_with(d, |v| match v {
        Value::String(s) if !s.is_empty() => Ok(s.clone()),
        _ => Err(expected("a name (a non-empty string)", v)),
    })
}

fn de_origins<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    de_with(d, |v| match v {
        Value::Array(items) => items.iter().map(origin).collect(),
        _ => Err(expected(
            "a list of origins such as [\"https://dash.example.com\"]",
            v,
        )),
    })
}

fn de_grants<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    de_with(d, |v| match v {
        Value::Array(items) => items.iter().map(grant).collect(),
        _ => Err(expected("a list of grants such as [\"GROUP:USER\"]", v)),
    })
}

/// Read a flag's text as the file would read its value (an integer, a
/// float, or else a string) and check it the same way: for clap's
/// `value_parser`.
pub fn flag<T>(text: &str, check: fn(&Value) -> Result<T, String>) -> Result<T, String> {
    let v = if let Ok(n) = text.parse::<i64>() {
        Value::Integer(n)
    } else if let Ok(f) = text.parse::<f64>() {
        Value::Float(f)
    } else {
        Value::String(text.to_string())
    };
    check(&v)
}

// ---------------------------------------------------------------------------
// Reading the file.

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Parse a settings file's text; errors say `PATH: KEY: what is wrong (line N)`.
pub fn parse(path: &Path, text: &str) -> Result<Layer, String> {
    let shown = path.display();
    let de = toml::Deserializer::parse(text).map_err(|e| {
        let line = e
            .span()
            .map(|s| format!(" (line {})", line_of(text, s.start)));
        format!(
            "{shown}: {}{}",
            e.message().trim_end(),
            line.unwrap_or_default()
        )
    })?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        let inner = e.into_inner();
        let line = inner
            .span()
            .map(|s| format!(" (line {})", line_of(text, s.start)))
            .unwrap_or_default();
        let message = inner.message().trim_end().to_string();
        // An unknown key is reported by its table: name the key itself.
        let key = match message
            .strip_prefix("unknown field `")
            .and_then(|m| m.split_once('`'))
        {
            Some((unknown, rest)) => {
                let full = if key == "." || key.is_empty() {
                    unknown.to_string()
                } else if key.ends_with(&format!(".{unknown}")) || key == unknown {
                    key
                } else {
                    format!("{key}.{unknown}")
                };
                let expected = rest.trim_start_matches(", ");
                return format!("{shown}: {full}: unknown key ({expected}){line}");
            }
            None => key,
        };
        if key == "." || key.is_empty() {
            format!("{shown}: {message}{line}")
        } else {
            format!("{shown}: {key}: {message}{line}")
        }
    })
}

/// Read the settings file: `explicit` (`--config`; missing is an error), or
/// the default path (missing is fine: None).
pub fn read(explicit: Option<&Path>) -> Result<Option<(PathBuf, Layer)>, String> {
    let path = explicit.unwrap_or(Path::new(DEFAULT_PATH));
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some((path.to_path_buf(), parse(path, &text)?))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && explicit.is_none() => Ok(None),
        Err(e) => Err(format!(
            "cannot read the config file {}: {e}",
            path.display()
        )),
    }
}

// ---------------------------------------------------------------------------
// Merging and the rules between keys.

impl Layer {
    /// The defaults of every key that has one.
    pub fn defaults() -> Layer {
        let limits = Limits::default();
        let retention = Retention::default();
        let connections = crate::conns::Limits::default();
        Layer {
            socket: Some(PathBuf::from(profd_common::DEFAULT_SOCKET)),
            socket_group: None,
            grants: Some(Vec::new()),
            ring_pages: None,
            log_level: Some("info".into()),
            kernel_frames: Some("auto".into()),
            limits: LimitsLayer {
                max_sessions: Some(limits.max_sessions),
                max_sessions_per_caller: Some(limits.max_sessions_per_caller),
                max_frequency: None,
                max_duration: None,
                max_stacks: Some(limits.max_stacks),
                max_connections: None,
                handshake_timeout: Some(connections.handshake_timeout.as_secs()),
                idle_timeout: Some(connections.idle_timeout.as_secs()),
                max_histogram_buckets: Some(limits.max_histogram_buckets),
                max_concurrent_exports: Some(limits.max_concurrent_exports),
            },
            remote: RemoteLayer::default(),
            state: StateLayer {
                persist: Some(true),
                dir: Some(PathBuf::from(DEFAULT_STATE_DIR)),
                retain_sessions: Some(retention.max_sessions),
                retain_days: Some(retention.max_age.as_secs_f64() / 86400.0),
                retain_bytes: Some(retention.max_bytes),
                checkpoint_interval: Some(DEFAULT_CHECKPOINT_INTERVAL.as_secs()),
            },
            metrics: MetricsLayer::default(),
        }
    }

    /// This layer with every key `top` sets taken from `top`.
    pub fn overlay(self, top: &Layer) -> Layer {
        fn pick<T: Clone>(low: Option<T>, high: &Option<T>) -> Option<T> {
            high.clone().or(low)
        }
        let (l, r, s, t) = (&top.limits, &top.remote, &top.state, &top.metrics);
        Layer {
            socket: pick(self.socket, &top.socket),
            socket_group: pick(self.socket_group, &top.socket_group),
            grants: pick(self.grants, &top.grants),
            ring_pages: pick(self.ring_pages, &top.ring_pages),
            log_level: pick(self.log_level, &top.log_level),
            kernel_frames: pick(self.kernel_frames, &top.kernel_frames),
            limits: LimitsLayer {
                max_sessions: pick(self.limits.max_sessions, &l.max_sessions),
                max_sessions_per_caller: pick(
                    self.limits.max_sessions_per_caller,
                    &l.max_sessions_per_caller,
                ),
                max_frequency: pick(self.limits.max_frequency, &l.max_frequency),
                max_duration: pick(self.limits.max_duration, &l.max_duration),
                max_stacks: pick(self.limits.max_stacks, &l.max_stacks),
                max_connections: pick(self.limits.max_connections, &l.max_connections),
                handshake_timeout: pick(self.limits.handshake_timeout, &l.handshake_timeout),
                idle_timeout: pick(self.limits.idle_timeout, &l.idle_timeout),
                max_histogram_buckets: pick(
                    self.limits.max_histogram_buckets,
                    &l.max_histogram_buckets,
                ),
                max_concurrent_exports: pick(
                    self.limits.max_concurrent_exports,
                    &l.max_concurrent_exports,
                ),
            },
            remote: RemoteLayer {
                listen: pick(self.remote.listen, &r.listen),
                tls_cert: pick(self.remote.tls_cert, &r.tls_cert),
                tls_key: pick(self.remote.tls_key, &r.tls_key),
                tls_client_ca: pick(self.remote.tls_client_ca, &r.tls_client_ca),
                tokens: pick(self.remote.tokens, &r.tokens),
                cors_origins: pick(self.remote.cors_origins, &r.cors_origins),
            },
            state: StateLayer {
                persist: pick(self.state.persist, &s.persist),
                dir: pick(self.state.dir, &s.dir),
                retain_sessions: pick(self.state.retain_sessions, &s.retain_sessions),
                retain_days: pick(self.state.retain_days, &s.retain_days),
                retain_bytes: pick(self.state.retain_bytes, &s.retain_bytes),
                checkpoint_interval: pick(self.state.checkpoint_interval, &s.checkpoint_interval),
            },
            metrics: MetricsLayer {
                listen: pick(self.metrics.listen, &t.listen),
            },
        }
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
    pub config: crate::Config,
    pub log_level: tracing::Level,
}

impl Settings {
    /// The effective settings as a TOML document.
    pub fn to_toml(&self) -> String {
        toml::to_string(&self.effective).unwrap_or_else(|e| format!("# cannot show: {e}\n"))
    }
}

/// Where a key's value came from, for messages naming it.
struct Namer<'a> {
    file: Option<&'a Path>,
    flags: &'a Layer,
}

impl Namer<'_> {
    /// `--flag` when the flag was given (or there is no file), else
    /// `FILE: key`.
    fn name(&self, from_flag: bool, key: &str, flag: &str) -> String {
        match self.file {
            Some(file) if !from_flag => format!("{}: {key}", file.display()),
            _ => flag.to_string(),
        }
    }
}

/// Merge the file's layer (if any) and the flags' layer over the defaults,
/// apply the rules between keys, and build the daemon's `Config`.
pub fn settings(file: Option<(PathBuf, Layer)>, flags: Layer) -> Result<Settings, String> {
    let (path, file_layer) = match file {
        Some((p, l)) => (Some(p), l),
        None => (None, Layer::default()),
    };
    let namer = Namer {
        file: path.as_deref(),
        flags: &flags,
    };
    check_state(&namer, &file_layer)?;
    check_remote(&namer, &file_layer.clone().overlay(&flags))?;
    let merged = Layer::defaults().overlay(&file_layer).overlay(&flags);
    let m = &merged;
    let grants = m
        .grants
        .iter()
        .flatten()
        .map(|g| g.parse::<Grant>())
        .collect::<Result<Vec<_>, _>>()?;
    let mut config = crate::Config::new(m.socket.clone().unwrap_or_default());
    config.socket_group = m.socket_group.clone();
    config.grants = grants;
    config.ring_pages = m.ring_pages;
    let d = Limits::default();
    config.limits = Limits {
        max_sessions: m.limits.max_sessions.unwrap_or(d.max_sessions),
        max_sessions_per_caller: m
            .limits
            .max_sessions_per_caller
            .unwrap_or(d.max_sessions_per_caller),
        max_frequency_hz: m.limits.max_frequency,
        max_duration: m.limits.max_duration.map(Duration::from_secs),
        max_stacks: m.limits.max_stacks.unwrap_or(d.max_stacks),
        max_histogram_buckets: m
            .limits
            .max_histogram_buckets
            .unwrap_or(d.max_histogram_buckets),
        max_concurrent_exports: m
            .limits
            .max_concurrent_exports
            .unwrap_or(d.max_concurrent_exports),
    };
    let c = crate::conns::Limits::default();
    config.connections = crate::conns::Limits {
        max_connections: m.limits.max_connections,
        handshake_timeout: m
            .limits
            .handshake_timeout
            .map_or(c.handshake_timeout, Duration::from_secs),
        idle_timeout: m
            .limits
            .idle_timeout
            .map_or(c.idle_timeout, Duration::from_secs),
    };
    let mut effective = merged.clone();
    if m.state.persist == Some(false) {
        effective.state = StateLayer {
            persist: Some(false),
            ..Default::default()
        };
    } else {
        let r = Retention::default();
        config.persist = Some(Persist {
            dir: m
                .state
                .dir
                .clone()
                .unwrap_or_else(|| DEFAULT_STATE_DIR.into()),
            retention: Retention {
                max_sessions: m.state.retain_sessions.unwrap_or(r.max_sessions),
                max_age: m
                    .state
                    .retain_days
                    .map_or(r.max_age, |d| Duration::from_secs_f64(d * 86400.0)),
                max_bytes: m.state.retain_bytes.unwrap_or(r.max_bytes),
            },
            checkpoint_interval: m
                .state
                .checkpoint_interval
                .map_or(DEFAULT_CHECKPOINT_INTERVAL, Duration::from_secs),
        });
    }
    let r = &m.remote;
    if let (Some(listen), Some(cert), Some(key), Some(tokens)) =
        (r.listen, &r.tls_cert, &r.tls_key, &r.tokens)
    {
        config.remote = Some(crate::Remote {
            listen,
            tls: TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: r.tls_client_ca.clone(),
            },
            tokens: tokens.clone(),
            cors_origins: r.cors_origins.clone().unwrap_or_default(),
        });
    }
    config.metrics = m.metrics.listen;
    config.kernel_frames = m.kernel_frames.as_deref().unwrap_or("auto").parse()?;
    let log_level = m
        .log_level
        .as_deref()
        .unwrap_or("info")
        .parse()
        .map_err(|e| format!("log level: {e}"))?;
    Ok(Settings {
        file: path,
        effective,
        config,
        log_level,
    })
}

/// `state.persist = false` keeps nothing: the file may not also say where
/// or how much. (A state flag given overrides the file's `persist`, and
/// `--no-persist` the file's other state keys.)
fn check_state(namer: &Namer<'_>, file: &Layer) -> Result<(), String> {
    let s = &file.state;
    let f = &namer.flags.state;
    if s.persist != Some(false) || f.persist.is_some() {
        return Ok(());
    }
    let set = [
        ("state.dir", s.dir.is_some()),
        ("state.retain_sessions", s.retain_sessions.is_some()),
        ("state.retain_days", s.retain_days.is_some()),
        ("state.retain_bytes", s.retain_bytes.is_some()),
        ("state.checkpoint_interval", s.checkpoint_interval.is_some()),
    ];
    if let Some((key, _)) = set.iter().find(|(_, on)| *on) {
        return Err(format!(
            "{}: false keeps nothing on disk, but {key} is set too: remove one of them",
            namer.name(false, "state.persist", "--no-persist")
        ));
    }
    Ok(())
}

/// The TLS listener needs its certificate, key and tokens; its other keys
/// mean nothing without it.
fn check_remote(namer: &Namer<'_>, r: &Layer) -> Result<(), String> {
    let flags = &namer.flags.remote;
    let r = &r.remote;
    let keys = [
        (
            "remote.tls_cert",
            "--tls-cert",
            r.tls_cert.is_some(),
            flags.tls_cert.is_some(),
        ),
        (
            "remote.tls_key",
            "--tls-key",
            r.tls_key.is_some(),
            flags.tls_key.is_some(),
        ),
        (
            "remote.tokens",
            "--tokens",
            r.tokens.is_some(),
            flags.tokens.is_some(),
        ),
    ];
    match r.listen {
        Some(_) => {
            let listen_flag = flags.listen.is_some();
            if let Some((key, flag, _, _)) = keys.iter().find(|k| !k.2) {
                return Err(match namer.file {
                    Some(file) if !listen_flag => format!(
                        "{}: {key}: missing: remote.listen needs remote.tls_cert, remote.tls_key and remote.tokens (a tokens file `profd token` writes)",
                        file.display()
                    ),
                    _ => format!(
                        "--listen needs {flag}: the TLS listener needs --tls-cert, --tls-key and --tokens (or their keys under [remote] in the config file)"
                    ),
                });
            }
        }
        None => {
            let all = keys.iter().copied().chain([
                (
                    "remote.tls_client_ca",
                    "--tls-client-ca",
                    r.tls_client_ca.is_some(),
                    flags.tls_client_ca.is_some(),
                ),
                (
                    "remote.cors_origins",
                    "--cors-origin",
                    r.cors_origins.as_ref().is_some_and(|o| !o.is_empty()),
                    flags.cors_origins.is_some(),
                ),
            ]);
            for (key, flag, set, from_flag) in all {
                if set {
                    return Err(format!(
                        "{}: is set but the TLS listener is not: add {} ADDR:PORT, or remove it",
                        namer.name(from_flag, key, flag),
                        if from_flag || namer.file.is_none() {
                            "--listen"
                        } else {
                            "remote.listen ="
                        },
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(Path::new("/etc/profd/profd.toml"), text).unwrap_err()
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
        let flags = Layer {
            limits: LimitsLayer {
                max_sessions: Some(5),
                ..Default::default()
            },
            ..Default::default()
        };
        let s = settings(Some(("f.toml".into(), file)), flags).unwrap();
        assert_eq!(s.config.limits.max_sessions, 5);
        assert_eq!(s.config.limits.max_stacks, 10);
        assert_eq!(s.config.limits.max_sessions_per_caller, 16);
        assert!(s.config.persist.is_none());
        assert_eq!(s.config.socket, Path::new(profd_common::DEFAULT_SOCKET));
        let shown = s.to_toml();
        assert!(shown.contains("max_sessions = 5"), "{shown}");
        assert_eq!(s.config.connections, crate::conns::Limits::default());
        let file = parse(
            Path::new("f.toml"),
            "[limits]\nmax_connections = 32\nhandshake_timeout = 3\nidle_timeout = 60\n",
        )
        .unwrap();
        let s = settings(Some(("f.toml".into(), file)), Layer::default()).unwrap();
        assert_eq!(s.config.connections.max_connections(), 32);
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
        let e = settings(Some(("f.toml".into(), file.clone())), Layer::default()).unwrap_err();
        assert!(e.starts_with("f.toml: remote.tokens: missing"), "{e}");
        let flags = Layer {
            remote: RemoteLayer {
                tokens: Some("t".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let s = settings(Some(("f.toml".into(), file)), flags).unwrap();
        assert_eq!(s.config.remote.unwrap().tokens, Path::new("t"));
        let flags = Layer {
            remote: RemoteLayer {
                tls_key: Some("k".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let e = settings(None, flags).unwrap_err();
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
        let e = settings(Some(("f.toml".into(), file)), Layer::default()).unwrap_err();
        assert!(
            e.starts_with("f.toml: remote.cors_origins: is set but the TLS listener is not"),
            "{e}"
        );
        let flags = Layer {
            remote: RemoteLayer {
                cors_origins: Some(vec!["https://a.example".into()]),
                ..Default::default()
            },
            ..Default::default()
        };
        let e = settings(None, flags).unwrap_err();
        assert!(e.starts_with("--cors-origin: is set but"), "{e}");
    }

    #[test]
    fn persist_false_with_other_state_keys_is_refused() {
        let file = parse(
            Path::new("f.toml"),
            "[state]\npersist = false\ndir = \"/x\"\n",
        )
        .unwrap();
        let e = settings(Some(("f.toml".into(), file)), Layer::default()).unwrap_err();
        assert!(
            e.starts_with("f.toml: state.persist: false keeps nothing"),
            "{e}"
        );
    }

    #[test]
    fn flag_text_is_checked_like_file_values() {
        assert_eq!(flag("4", positive), Ok(4));
        assert_eq!(
            flag("0", positive).unwrap_err(),
            "expected a positive integer, got 0"
        );
        assert_eq!(flag("1.5", days), Ok(1.5));
        assert_eq!(flag("2G", bytes), Ok(2 << 30));
        assert!(flag("6", ring_pages).is_err());
    }
}
