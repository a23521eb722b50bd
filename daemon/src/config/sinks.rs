//! The `[[sink]]` entries of profd.toml, one variant per backend kind:
//! each key checked as the file is read (so errors carry its line), then
//! the files an entry names read into a sink's settings when the daemon
//! starts or `--check-config` runs (`sink_files`).
use super::sink_files::{ca_certificates, Auth, FileError, Layout, Secret};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Value;

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

    /// The keys an entry of this kind takes besides the shared ones: the
    /// fields of its variant's struct.
    fn own_keys(self) -> &'static [&'static str] {
        match self {
            Kind::ClickHouse => ClickHouseEntry::KEYS,
            Kind::Pyroscope => PyroscopeEntry::KEYS,
            Kind::Otlp => OtlpEntry::KEYS,
        }
    }
}

/// Spool of a sink unless `spool_bytes` says otherwise.
pub const DEFAULT_SPOOL_BYTES: u64 = 256 << 20;
/// Longest wait for one request unless `timeout` says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The keys every entry takes, whatever its kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Common {
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
}

impl Common {
    /// Keys of every entry (`kind` is the tag of [`SinkEntry`]).
    const KEYS: &'static [&'static str] = &[
        "kind",
        "name",
        "url",
        "spool_bytes",
        "timeout",
        "max_age",
        "ca_file",
    ];

    /// `name` sending to `url`, every other key at its default.
    pub fn new(name: &str, url: &str) -> Common {
        Common {
            name: name.into(),
            url: url.into(),
            spool_bytes: DEFAULT_SPOOL_BYTES,
            timeout: DEFAULT_TIMEOUT,
            max_age: None,
            ca_file: None,
        }
    }
}

/// A `kind = "clickhouse"` entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClickHouseEntry {
    #[serde(flatten)]
    pub common: Common,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub create_schema: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
}

impl ClickHouseEntry {
    const KEYS: &'static [&'static str] = &["database", "user", "password_file", "create_schema"];
}

/// A `kind = "pyroscope"` entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PyroscopeEntry {
    #[serde(flatten)]
    pub common: Common,
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
}

impl PyroscopeEntry {
    const KEYS: &'static [&'static str] =
        &["tenant", "user", "password_file", "token_file", "labels"];
}

/// A `kind = "otlp"` entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OtlpEntry {
    #[serde(flatten)]
    pub common: Common,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

impl OtlpEntry {
    const KEYS: &'static [&'static str] = &["token_file", "headers"];
}

/// One `[[sink]]` entry as the file gives it, each value checked: one
/// variant per backend, tagged by its `kind` key.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum SinkEntry {
    ClickHouse(ClickHouseEntry),
    Pyroscope(PyroscopeEntry),
    Otlp(OtlpEntry),
}

fn show_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&super::values::show_duration(*d))
}

fn show_opt_secs<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    show_secs(&d.unwrap_or_default(), s)
}

/// What is wrong with a key of an entry.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// A value the entry gives.
    #[error("{0}")]
    Value(String),
    /// A file the entry names.
    #[error(transparent)]
    File(#[from] FileError),
}

/// A key of an entry that is wrong: the key (None: the entry itself) and
/// what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct EntryError {
    pub key: Option<String>,
    #[source]
    pub message: Problem,
}

impl EntryError {
    fn key(key: &str, message: impl Into<String>) -> EntryError {
        EntryError {
            key: Some(key.into()),
            message: Problem::Value(message.into()),
        }
    }

    fn entry(message: impl Into<String>) -> EntryError {
        EntryError {
            key: None,
            message: Problem::Value(message.into()),
        }
    }

    fn file(key: &str, e: FileError) -> EntryError {
        EntryError {
            key: Some(key.into()),
            message: Problem::File(e),
        }
    }
}

fn string(key: &str, v: &Value) -> Result<String, EntryError> {
    match v {
        Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
        _ => Err(EntryError::key(
            key,
            format!("expected a non-empty string, got {v}"),
        )),
    }
}

fn table(key: &str, v: &Value) -> Result<BTreeMap<String, String>, EntryError> {
    let Value::Table(t) = v else {
        return Err(EntryError::key(
            key,
            format!("expected a table of strings such as {{ env = \"prod\" }}, got {v}"),
        ));
    };
    t.iter()
        .map(|(k, v)| Ok((k.clone(), string(&format!("{key}.{k}"), v)?)))
        .collect()
}

/// Read one entry: `keys` are its keys and values in the file's order.
/// `size` and `duration` run a setting's own check on a value.
pub fn read_entry(
    keys: &[(String, Value)],
    size: impl Fn(&Value) -> Result<u64, String>,
    duration: impl Fn(&Value) -> Result<Duration, String>,
) -> Result<SinkEntry, EntryError> {
    let get = |k: &str| keys.iter().find(|(name, _)| name == k).map(|(_, v)| v);
    let kinds = "expected one of \"clickhouse\", \"pyroscope\", \"otlp\"";
    let kind = match get("kind") {
        None => {
            return Err(EntryError::entry(format!(
                "no kind: add kind = … ({kinds})"
            )))
        }
        Some(Value::String(s)) if s == "clickhouse" => Kind::ClickHouse,
        Some(Value::String(s)) if s == "pyroscope" => Kind::Pyroscope,
        Some(Value::String(s)) if s == "otlp" => Kind::Otlp,
        Some(v) => return Err(EntryError::key("kind", format!("{kinds}, got {v}"))),
    };
    for (k, _) in keys {
        if !Common::KEYS.contains(&k.as_str()) && !kind.own_keys().contains(&k.as_str()) {
            let takes: Vec<String> = Common::KEYS
                .iter()
                .chain(kind.own_keys())
                .map(|k| format!("`{k}`"))
                .collect();
            return Err(EntryError::key(
                k,
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
        None => return Err(EntryError::entry("no url: add url = \"http://HOST:PORT\"")),
    };
    let parsed = reqwest::Url::parse(&url)
        .map_err(|e| EntryError::key("url", format!("{url:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(EntryError::key(
            "url",
            format!("{url:?}: use http:// or https://"),
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(EntryError::key(
            "url",
            "has credentials in it: give them with user and password_file (or token_file) instead",
        ));
    }
    let name = match get("name") {
        Some(v) => {
            let n = string("name", v)?;
            if !n
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(EntryError::key(
                    "name",
                    format!("{n:?}: use letters, digits, _ and - (it names the sink's spool directory and metrics)"),
                ));
            }
            n
        }
        None => kind.name().to_string(),
    };
    let path = |k: &str| get(k).map(|v| string(k, v).map(PathBuf::from)).transpose();
    let opt = |k: &str| get(k).map(|v| string(k, v)).transpose();
    let tab = |k: &str| {
        get(k)
            .map(|v| table(k, v))
            .transpose()
            .map(Option::unwrap_or_default)
    };
    let common = Common {
        name,
        url,
        spool_bytes: get("spool_bytes")
            .map(|v| size(v).map_err(|e| EntryError::key("spool_bytes", e)))
            .transpose()?
            .unwrap_or(DEFAULT_SPOOL_BYTES),
        timeout: get("timeout")
            .map(|v| duration(v).map_err(|e| EntryError::key("timeout", e)))
            .transpose()?
            .unwrap_or(DEFAULT_TIMEOUT),
        max_age: get("max_age")
            .map(|v| duration(v).map_err(|e| EntryError::key("max_age", e)))
            .transpose()?,
        ca_file: path("ca_file")?,
    };
    let entry = match kind {
        Kind::ClickHouse => SinkEntry::ClickHouse(ClickHouseEntry {
            common,
            database: opt("database")?,
            create_schema: match get("create_schema") {
                None => None,
                Some(Value::Boolean(b)) => Some(*b),
                Some(v) => {
                    return Err(EntryError::key(
                        "create_schema",
                        format!("expected true or false, got {v}"),
                    ))
                }
            },
            user: opt("user")?,
            password_file: path("password_file")?,
        }),
        Kind::Pyroscope => SinkEntry::Pyroscope(PyroscopeEntry {
            common,
            tenant: opt("tenant")?,
            user: opt("user")?,
            password_file: path("password_file")?,
            token_file: path("token_file")?,
            labels: tab("labels")?,
        }),
        Kind::Otlp => SinkEntry::Otlp(OtlpEntry {
            common,
            token_file: path("token_file")?,
            headers: tab("headers")?,
        }),
    };
    match &entry {
        SinkEntry::Pyroscope(p) => {
            if p.password_file.is_some() && p.user.is_none() {
                return Err(EntryError::key(
                    "password_file",
                    "needs user too (basic auth): add user = \"…\"",
                ));
            }
            if p.token_file.is_some() && p.password_file.is_some() {
                return Err(EntryError::key(
                    "token_file",
                    "and password_file are both set: use one (a bearer token or basic auth)",
                ));
            }
        }
        SinkEntry::ClickHouse(c) => {
            if let Some(db) = &c.database {
                Layout {
                    database: db.clone(),
                    ..Default::default()
                }
                .check()
                .map_err(|e| EntryError::key("database", e.to_string()))?;
            }
        }
        SinkEntry::Otlp(_) => {}
    }
    Ok(entry)
}

/// Two entries with one name: each sink has its own spool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("name {name:?} is also sink[{first}]'s (a {kind} sink is named {kind:?} unless name says otherwise): give each sink its own name", kind = .kind.name())]
pub struct SameName {
    /// The later entry's index.
    pub index: usize,
    /// The earlier entry's index.
    pub first: usize,
    pub name: String,
    pub kind: Kind,
}

/// Entries read: names must differ (each has its own spool).
pub fn check_names(entries: &[SinkEntry]) -> Result<(), SameName> {
    for (i, e) in entries.iter().enumerate() {
        let name = &e.common().name;
        if let Some(j) = entries[..i].iter().position(|o| &o.common().name == name) {
            return Err(SameName {
                index: i,
                first: j,
                name: name.clone(),
                kind: e.kind(),
            });
        }
    }
    Ok(())
}

/// A ClickHouse sink's settings, its files read.
#[derive(Debug, Clone)]
pub struct ClickHouseSettings {
    pub entry: ClickHouseEntry,
    /// `X-ClickHouse-User` / `X-ClickHouse-Key`'s key.
    pub key: Option<Secret>,
}

/// A Pyroscope sink's settings, its files read.
#[derive(Debug, Clone)]
pub struct PyroscopeSettings {
    pub entry: PyroscopeEntry,
    /// Basic or bearer credentials.
    pub auth: Auth,
}

/// An OTLP sink's settings, its files read.
#[derive(Debug, Clone)]
pub struct OtlpSettings {
    pub entry: OtlpEntry,
    /// Bearer credentials.
    pub auth: Auth,
}

/// A sink's settings, its files read: one variant per backend.
#[derive(Debug, Clone)]
pub enum Settings {
    ClickHouse(ClickHouseSettings),
    Pyroscope(PyroscopeSettings),
    Otlp(OtlpSettings),
}

impl Settings {
    /// The keys every sink has.
    pub fn common(&self) -> &Common {
        match self {
            Settings::ClickHouse(s) => &s.entry.common,
            Settings::Pyroscope(s) => &s.entry.common,
            Settings::Otlp(s) => &s.entry.common,
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            Settings::ClickHouse(_) => Kind::ClickHouse,
            Settings::Pyroscope(_) => Kind::Pyroscope,
            Settings::Otlp(_) => Kind::Otlp,
        }
    }
}

/// Read the file `key` names, if given, as a secret.
fn secret(key: &str, p: &Option<PathBuf>) -> Result<Option<Secret>, EntryError> {
    p.as_deref()
        .map(|p| Secret::read(p).map_err(|e| EntryError::file(key, e)))
        .transpose()
}

/// Basic or bearer credentials from the files an entry names.
fn auth(token: Option<Secret>, password: Option<Secret>, user: Option<&String>) -> Auth {
    match (token, password, user) {
        (Some(t), _, _) => Auth::Bearer(t),
        (None, Some(password), Some(user)) => Auth::Basic {
            user: user.clone(),
            password,
        },
        _ => Auth::None,
    }
}

impl SinkEntry {
    /// An entry of `kind` named `name` sending to `url`, every other key
    /// at its default.
    pub fn new(kind: Kind, name: &str, url: &str) -> SinkEntry {
        let common = Common::new(name, url);
        match kind {
            Kind::ClickHouse => SinkEntry::ClickHouse(ClickHouseEntry {
                common,
                database: None,
                create_schema: None,
                user: None,
                password_file: None,
            }),
            Kind::Pyroscope => SinkEntry::Pyroscope(PyroscopeEntry {
                common,
                tenant: None,
                user: None,
                password_file: None,
                token_file: None,
                labels: BTreeMap::new(),
            }),
            Kind::Otlp => SinkEntry::Otlp(OtlpEntry {
                common,
                token_file: None,
                headers: BTreeMap::new(),
            }),
        }
    }

    /// The keys every entry has.
    pub fn common(&self) -> &Common {
        match self {
            SinkEntry::ClickHouse(e) => &e.common,
            SinkEntry::Pyroscope(e) => &e.common,
            SinkEntry::Otlp(e) => &e.common,
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            SinkEntry::ClickHouse(_) => Kind::ClickHouse,
            SinkEntry::Pyroscope(_) => Kind::Pyroscope,
            SinkEntry::Otlp(_) => Kind::Otlp,
        }
    }

    /// Read the files this entry names (credentials, CA). Errors name the
    /// key and the file.
    pub fn settings(&self) -> Result<Settings, EntryError> {
        let settings = match self {
            SinkEntry::ClickHouse(e) => Settings::ClickHouse(ClickHouseSettings {
                key: secret("password_file", &e.password_file)?,
                entry: e.clone(),
            }),
            SinkEntry::Pyroscope(e) => {
                let password = secret("password_file", &e.password_file)?;
                let token = secret("token_file", &e.token_file)?;
                Settings::Pyroscope(PyroscopeSettings {
                    auth: auth(token, password, e.user.as_ref()),
                    entry: e.clone(),
                })
            }
            SinkEntry::Otlp(e) => Settings::Otlp(OtlpSettings {
                auth: auth(secret("token_file", &e.token_file)?, None, None),
                entry: e.clone(),
            }),
        };
        if let Some(ca) = &self.common().ca_file {
            ca_certificates(ca).map_err(|e| EntryError::file("ca_file", e))?;
        }
        Ok(settings)
    }
}

impl Common {
    /// Where this sink's spool lives under the state directory.
    pub fn spool_dir(&self, state: &Path) -> PathBuf {
        state.join("spool").join(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind takes exactly the keys its variant shows: the key lists
    /// and the structs say the same.
    #[test]
    fn each_kind_takes_the_keys_its_variant_has() {
        for kind in [Kind::ClickHouse, Kind::Pyroscope, Kind::Otlp] {
            let mut entry = SinkEntry::new(kind, "s", "http://127.0.0.1:1");
            let some = || Some(PathBuf::from("/f"));
            let one = || BTreeMap::from([("a".to_string(), "b".to_string())]);
            match &mut entry {
                SinkEntry::ClickHouse(e) => {
                    e.database = Some("d".into());
                    e.create_schema = Some(true);
                    e.user = Some("u".into());
                    e.password_file = some();
                }
                SinkEntry::Pyroscope(e) => {
                    e.tenant = Some("t".into());
                    e.user = Some("u".into());
                    e.password_file = some();
                    e.token_file = some();
                    e.labels = one();
                }
                SinkEntry::Otlp(e) => {
                    e.token_file = some();
                    e.headers = one();
                }
            }
            let mut shown = Vec::new();
            let text = toml::to_string(&entry).unwrap();
            let mut in_table = false;
            for line in text.lines().filter(|l| !l.is_empty()) {
                if let Some(table) = line.strip_prefix('[') {
                    in_table = true;
                    shown.push(table.trim_end_matches(']').to_string());
                } else if !in_table {
                    shown.push(line.split(" = ").next().unwrap().to_string());
                }
            }
            let mut declared: Vec<String> = Common::KEYS
                .iter()
                .chain(kind.own_keys())
                .filter(|k| **k != "max_age" && **k != "ca_file")
                .map(|k| k.to_string())
                .collect();
            shown.sort();
            declared.sort();
            assert_eq!(shown, declared, "{}: {text}", kind.name());
        }
    }
}
