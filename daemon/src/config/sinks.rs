//! The `[[sink]]` entries of profd.toml: each key checked as the file is
//! read (so errors carry its line), then the files an entry names read
//! into a sink's settings when the daemon starts or `--check-config` runs:
//! the credentials a sink carries and where a ClickHouse schema goes.
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Value;

/// A credential read from a file: never printed, logged or shown.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The file's text without its final line break. Err (naming the file)
    /// when it cannot be read or is empty, or when the daemon may not trust
    /// it ([`crate::trusted_files::read`]: a link another user could have
    /// planted, a file others may write or another user owns).
    pub fn read(path: &Path) -> Result<Secret, String> {
        let bytes = crate::trusted_files::read(path)?;
        let text =
            String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8 text", path.display()))?;
        let text = text.trim_end_matches(['\n', '\r']);
        if text.is_empty() {
            return Err(format!("{} is empty", path.display()));
        }
        Ok(Secret(text.to_string()))
    }

    /// A value given in the settings themselves (a header that is no
    /// credential but is handled as one all the same).
    pub fn given(value: String) -> Secret {
        Secret(value)
    }

    /// The credential itself, for a request header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// How a sink proves who it is to an HTTP backend.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Auth {
    #[default]
    None,
    /// `Authorization: Basic …`.
    Basic { user: String, password: Secret },
    /// `Authorization: Bearer …`.
    Bearer(Secret),
}

/// Where the schema goes: a database, and a cluster when the tables are
/// sharded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub database: String,
    /// The cluster (of the servers' `remote_servers`) the `Distributed`
    /// tables spread over; None: one server, plain tables.
    pub cluster: Option<String>,
    /// With a cluster: local tables replicated through ClickHouse Keeper
    /// or ZooKeeper (the `{shard}` and `{replica}` macros of each server).
    pub replicated: bool,
}

impl Default for Layout {
    fn default() -> Layout {
        Layout {
            database: "profd".into(),
            cluster: None,
            replicated: false,
        }
    }
}

impl Layout {
    /// Err when a name is not a plain identifier (letters, digits and `_`,
    /// not starting with a digit): the statements use them unquoted.
    pub fn check(&self) -> Result<(), String> {
        let plain = |s: &str| {
            s.chars().next().is_some_and(|c| !c.is_ascii_digit())
                && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if !plain(&self.database) {
            return Err(format!(
                "database: {:?} is not a plain name: use letters, digits and _ (not first a digit)",
                self.database
            ));
        }
        match &self.cluster {
            Some(c) if !plain(c) => Err(format!(
                "cluster: {c:?} is not a plain name: use letters, digits and _ (not first a digit)"
            )),
            _ => Ok(()),
        }
    }
}

/// The certificates of a CA file (PEM, one or more), read as a trusted
/// file ([`crate::trusted_files::read`]). Err names the file.
pub fn ca_certificates(ca: &Path) -> Result<Vec<reqwest::Certificate>, String> {
    let pem = crate::trusted_files::read(ca)?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|e| format!("{}: not PEM certificates: {e}", ca.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in it", ca.display()));
    }
    Ok(certs)
}

/// The backends a sink sends to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    ClickHouse,
    Pyroscope,
    Otlp,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::ClickHouse => "clickhouse",
            Kind::Pyroscope => "pyroscope",
            Kind::Otlp => "otlp",
        }
    }

    /// The keys an entry of this kind takes besides the shared ones.
    fn own_keys(self) -> &'static [&'static str] {
        match self {
            Kind::ClickHouse => &["database", "user", "password_file", "create_schema"],
            Kind::Pyroscope => &["tenant", "user", "password_file", "token_file", "labels"],
            Kind::Otlp => &["token_file", "headers"],
        }
    }
}

/// Keys every entry takes.
const SHARED_KEYS: &[&str] = &[
    "kind",
    "name",
    "url",
    "spool_bytes",
    "timeout",
    "max_age",
    "ca_file",
];

/// Spool of a sink unless `spool_bytes` says otherwise.
pub const DEFAULT_SPOOL_BYTES: u64 = 256 << 20;
/// Longest wait for one request unless `timeout` says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// One `[[sink]]` entry as the file gives it, each value checked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    pub kind: Kind,
    pub name: String,
    pub url: String,
    pub spool_bytes: u64,
    #[serde(serialize_with = "show_secs")]
    pub timeout: Duration,
    #[serde(
        serialize_with = "show_opt_secs",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_age: Option<Duration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub create_schema: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

fn show_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&super::values::show_duration(*d))
}

fn show_opt_secs<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    show_secs(&d.unwrap_or_default(), s)
}

/// A key of an entry that is wrong: the key (None: the entry itself) and
/// what is wrong with it.
pub type EntryError = (Option<String>, String);

fn string(key: &str, v: &Value) -> Result<String, EntryError> {
    match v {
        Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
        _ => Err((
            Some(key.into()),
            format!("expected a non-empty string, got {v}"),
        )),
    }
}

fn table(key: &str, v: &Value) -> Result<BTreeMap<String, String>, EntryError> {
    let Value::Table(t) = v else {
        return Err((
            Some(key.into()),
            format!("expected a table of strings such as {{ env = \"prod\" }}, got {v}"),
        ));
    };
    t.iter()
        .map(|(k, v)| Ok((k.clone(), string(&format!("{key}.{k}"), v)?)))
        .collect()
}

/// Read one entry: `keys` are its keys and values in the file's order.
/// `checked` runs a setting's own check (sizes, durations) on a value.
pub fn read_entry(
    keys: &[(String, Value)],
    size: impl Fn(&Value) -> Result<u64, String>,
    duration: impl Fn(&Value) -> Result<Duration, String>,
) -> Result<Entry, EntryError> {
    let get = |k: &str| keys.iter().find(|(name, _)| name == k).map(|(_, v)| v);
    let kinds = "expected one of \"clickhouse\", \"pyroscope\", \"otlp\"";
    let kind = match get("kind") {
        None => return Err((None, format!("no kind: add kind = … ({kinds})"))),
        Some(Value::String(s)) if s == "clickhouse" => Kind::ClickHouse,
        Some(Value::String(s)) if s == "pyroscope" => Kind::Pyroscope,
        Some(Value::String(s)) if s == "otlp" => Kind::Otlp,
        Some(v) => return Err((Some("kind".into()), format!("{kinds}, got {v}"))),
    };
    for (k, _) in keys {
        if !SHARED_KEYS.contains(&k.as_str()) && !kind.own_keys().contains(&k.as_str()) {
            let takes: Vec<String> = SHARED_KEYS
                .iter()
                .chain(kind.own_keys())
                .map(|k| format!("`{k}`"))
                .collect();
            return Err((
                Some(k.clone()),
                format!(
                    "unknown key for a {} sink (it takes {})",
                    kind.name(),
                    takes.join(", ")
                ),
            ));
        }
    }
    let url = match get("url") {
        Some(v) => string("url", v)?,
        None => return Err((None, "no url: add url = \"http://HOST:PORT\"".into())),
    };
    let parsed = reqwest::Url::parse(&url)
        .map_err(|e| (Some("url".into()), format!("{url:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err((
            Some("url".into()),
            format!("{url:?}: use http:// or https://"),
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err((
            Some("url".into()),
            "has credentials in it: give them with user and password_file (or token_file) instead"
                .into(),
        ));
    }
    let name = match get("name") {
        Some(v) => {
            let n = string("name", v)?;
            if !n
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err((
                    Some("name".into()),
                    format!("{n:?}: use letters, digits, _ and - (it names the sink's spool directory and metrics)"),
                ));
            }
            n
        }
        None => kind.name().to_string(),
    };
    let path = |k: &str| get(k).map(|v| string(k, v).map(PathBuf::from)).transpose();
    let opt = |k: &str| get(k).map(|v| string(k, v)).transpose();
    let entry = Entry {
        kind,
        name,
        url,
        spool_bytes: get("spool_bytes")
            .map(|v| size(v).map_err(|e| (Some("spool_bytes".into()), e)))
            .transpose()?
            .unwrap_or(DEFAULT_SPOOL_BYTES),
        timeout: get("timeout")
            .map(|v| duration(v).map_err(|e| (Some("timeout".into()), e)))
            .transpose()?
            .unwrap_or(DEFAULT_TIMEOUT),
        max_age: get("max_age")
            .map(|v| duration(v).map_err(|e| (Some("max_age".into()), e)))
            .transpose()?,
        ca_file: path("ca_file")?,
        database: opt("database")?,
        create_schema: match get("create_schema") {
            None => None,
            Some(Value::Boolean(b)) => Some(*b),
            Some(v) => {
                return Err((
                    Some("create_schema".into()),
                    format!("expected true or false, got {v}"),
                ))
            }
        },
        tenant: opt("tenant")?,
        user: opt("user")?,
        password_file: path("password_file")?,
        token_file: path("token_file")?,
        labels: get("labels")
            .map(|v| table("labels", v))
            .transpose()?
            .unwrap_or_default(),
        headers: get("headers")
            .map(|v| table("headers", v))
            .transpose()?
            .unwrap_or_default(),
    };
    if entry.password_file.is_some() && entry.user.is_none() && kind == Kind::Pyroscope {
        return Err((
            Some("password_file".into()),
            "needs user too (basic auth): add user = \"…\"".into(),
        ));
    }
    if entry.token_file.is_some() && entry.password_file.is_some() {
        return Err((
            Some("token_file".into()),
            "and password_file are both set: use one (a bearer token or basic auth)".into(),
        ));
    }
    if let Some(db) = &entry.database {
        Layout {
            database: db.clone(),
            ..Default::default()
        }
        .check()
        .map_err(|e| (Some("database".into()), e))?;
    }
    Ok(entry)
}

/// Entries read: names must differ (each has its own spool).
pub fn check_names(entries: &[Entry]) -> Result<(), (usize, String)> {
    for (i, e) in entries.iter().enumerate() {
        if let Some(j) = entries[..i].iter().position(|o| o.name == e.name) {
            return Err((
                i,
                format!(
                    "name {:?} is also sink[{j}]'s (a {} sink is named {:?} unless name says otherwise): give each sink its own name",
                    e.name,
                    e.kind.name(),
                    e.kind.name()
                ),
            ));
        }
    }
    Ok(())
}

/// A sink's settings, its files read.
#[derive(Debug, Clone)]
pub struct Settings {
    pub entry: Entry,
    /// Basic or bearer credentials (Pyroscope, OTLP).
    pub auth: Auth,
    /// ClickHouse's `X-ClickHouse-User` / `X-ClickHouse-Key`.
    pub clickhouse_key: Option<Secret>,
}

impl Entry {
    /// An entry of `kind` named `name` sending to `url`, every other key
    /// at its default.
    pub fn new(kind: Kind, name: &str, url: &str) -> Entry {
        Entry {
            kind,
            name: name.into(),
            url: url.into(),
            spool_bytes: DEFAULT_SPOOL_BYTES,
            timeout: DEFAULT_TIMEOUT,
            max_age: None,
            ca_file: None,
            database: None,
            create_schema: None,
            tenant: None,
            user: None,
            password_file: None,
            token_file: None,
            labels: BTreeMap::new(),
            headers: BTreeMap::new(),
        }
    }

    /// Read the files this entry names (credentials, CA). Errors name the
    /// key and the file.
    pub fn settings(&self) -> Result<Settings, EntryError> {
        let secret = |key: &str, p: &Option<PathBuf>| {
            p.as_deref()
                .map(|p| Secret::read(p).map_err(|e| (Some(key.to_string()), e)))
                .transpose()
        };
        let password = secret("password_file", &self.password_file)?;
        let token = secret("token_file", &self.token_file)?;
        if let Some(ca) = &self.ca_file {
            ca_certificates(ca).map_err(|e| (Some("ca_file".into()), e))?;
        }
        let (auth, clickhouse_key) = match self.kind {
            Kind::ClickHouse => (Auth::None, password),
            _ => match (token, password, &self.user) {
                (Some(t), _, _) => (Auth::Bearer(t), None),
                (None, Some(password), Some(user)) => (
                    Auth::Basic {
                        user: user.clone(),
                        password,
                    },
                    None,
                ),
                _ => (Auth::None, None),
            },
        };
        Ok(Settings {
            entry: self.clone(),
            auth,
            clickhouse_key,
        })
    }

    /// Where this sink's spool lives under the state directory.
    pub fn spool_dir(&self, state: &Path) -> PathBuf {
        state.join("spool").join(&self.name)
    }
}
