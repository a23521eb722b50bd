//! The `[[sink]]` entries of profd.toml, one variant per backend kind:
//! read with serde and each value checked as the file is read (errors name
//! the key, so they carry its line), then
//! the files an entry names read into a sink's settings when the daemon
//! starts or `--check-config` runs (`sink_files`).
use super::sink_files::{ca_certificates, Auth, FileError, Layout, NotPlain, Secret};
use super::values::{self, ValueError};
use serde::de::{self, IntoDeserializer};
use serde::{Deserialize, Deserializer, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::de::DeValue;
use toml::{Spanned, Value};

/// The backends a sink sends to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

    /// Whether an entry of this kind takes `key`.
    fn takes(self, key: &str) -> bool {
        Common::KEYS.contains(&key) || self.own_keys().contains(&key)
    }

    /// The keys an entry of this kind takes, as messages list them.
    fn keys_shown(self) -> String {
        let keys: Vec<String> = Common::KEYS
            .iter()
            .chain(self.own_keys())
            .map(|k| format!("`{k}`"))
            .collect();
        keys.join(", ")
    }
}

/// Spool of a sink unless `spool_bytes` says otherwise.
pub const DEFAULT_SPOOL_BYTES: u64 = 256 << 20;
/// Longest wait for one request unless `timeout` says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The keys every entry takes, whatever its kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Common {
    /// Given or not, the name is checked when read; unnamed, an entry is
    /// named after its kind ([`read_entry`]).
    #[serde(default, deserialize_with = "name")]
    pub name: String,
    #[serde(deserialize_with = "url")]
    pub url: String,
    #[serde(default = "default_spool_bytes", deserialize_with = "size")]
    pub spool_bytes: u64,
    #[serde(
        default = "default_timeout",
        serialize_with = "show_secs",
        deserialize_with = "duration"
    )]
    pub timeout: Duration,
    #[serde(
        default,
        serialize_with = "show_opt_secs",
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_duration"
    )]
    pub max_age: Option<Duration>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_path"
    )]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClickHouseEntry {
    #[serde(flatten)]
    pub common: Common,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_text"
    )]
    pub database: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_bool"
    )]
    pub create_schema: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_text"
    )]
    pub user: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_path"
    )]
    pub password_file: Option<PathBuf>,
}

impl ClickHouseEntry {
    const KEYS: &'static [&'static str] = &["database", "user", "password_file", "create_schema"];
}

/// A `kind = "pyroscope"` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PyroscopeEntry {
    #[serde(flatten)]
    pub common: Common,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_text"
    )]
    pub tenant: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_text"
    )]
    pub user: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_path"
    )]
    pub password_file: Option<PathBuf>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_path"
    )]
    pub token_file: Option<PathBuf>,
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "texts"
    )]
    pub labels: BTreeMap<String, String>,
}

impl PyroscopeEntry {
    const KEYS: &'static [&'static str] =
        &["tenant", "user", "password_file", "token_file", "labels"];
}

/// A `kind = "otlp"` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpEntry {
    #[serde(flatten)]
    pub common: Common,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_path"
    )]
    pub token_file: Option<PathBuf>,
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "texts"
    )]
    pub headers: BTreeMap<String, String>,
}

impl OtlpEntry {
    const KEYS: &'static [&'static str] = &["token_file", "headers"];
}

/// One `[[sink]]` entry as the file gives it, each value checked: one
/// variant per backend, tagged by its `kind` key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum SinkEntry {
    ClickHouse(ClickHouseEntry),
    Pyroscope(PyroscopeEntry),
    Otlp(OtlpEntry),
}

fn show_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&values::show_duration(*d))
}

fn show_opt_secs<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    show_secs(&d.unwrap_or_default(), s)
}

// The values of an entry's keys: each read as a TOML value and checked as
// the settings' values are, so their errors read the same.

fn default_spool_bytes() -> u64 {
    DEFAULT_SPOOL_BYTES
}

fn default_timeout() -> Duration {
    DEFAULT_TIMEOUT
}

/// A value `check` takes; its error, serde's.
fn checked<'de, D: Deserializer<'de>, T>(
    d: D,
    check: impl FnOnce(&Value) -> Result<T, ValueError>,
) -> Result<T, D::Error> {
    check(&Value::deserialize(d)?).map_err(de::Error::custom)
}

/// A size: bytes, or a string with K, M, G or T.
fn size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    checked(d, values::BYTES.check)
}

/// A duration such as "30s" or "7d", or whole seconds.
fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    checked(d, values::DURATION.check)
}

fn some_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

fn some_bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    checked(d, values::BOOL.check).map(Some)
}

/// A string with more than blanks in it.
fn non_empty(v: &Value) -> Result<String, ValueError> {
    match v {
        Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
        _ => Err(values::expected("a non-empty string", v)),
    }
}

fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked(d, non_empty)
}

fn some_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    text(d).map(Some)
}

fn some_path<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    text(d).map(|p| Some(p.into()))
}

/// A table of non-empty strings (labels, headers).
fn texts<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    checked(d, |v| match v {
        Value::Table(t) => t
            .iter()
            .map(|(k, v)| Ok((k.clone(), non_empty(v)?)))
            .collect(),
        _ => Err(values::expected(
            "a table of strings such as { env = \"prod\" }",
            v,
        )),
    })
}

/// The name of a sink's spool directory and metrics.
fn name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let n = text(d)?;
    if !n
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(de::Error::custom(format_args!(
            "{n:?}: use letters, digits, _ and - (it names the sink's spool directory and metrics)"
        )));
    }
    Ok(n)
}

/// An http:// or https:// URL without credentials in it.
fn url<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let url = text(d)?;
    let parsed = reqwest::Url::parse(&url)
        .map_err(|e| de::Error::custom(format_args!("{url:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(de::Error::custom(format_args!(
            "{url:?}: use http:// or https://"
        )));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(de::Error::custom(
            "has credentials in it: give them with user and password_file (or token_file) instead",
        ));
    }
    Ok(url)
}

/// What is wrong with an entry, or with one of its keys.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    #[error("no kind: add kind = … ({KINDS})")]
    NoKind,
    #[error("{KINDS}, got {0}")]
    BadKind(Value),
    #[error("no url: add url = \"http://HOST:PORT\"")]
    NoUrl,
    #[error("unknown key for a {} sink (it takes {})", .0.name(), .0.keys_shown())]
    UnknownKey(Kind),
    /// A value the entry gives, as its check says.
    #[error("{}", .0.message())]
    Value(#[source] Box<toml::de::Error>),
    #[error("needs user too (basic auth): add user = \"…\"")]
    PasswordWithoutUser,
    #[error("and password_file are both set: use one (a bearer token or basic auth)")]
    TokenAndPassword,
    #[error(transparent)]
    NotPlain(#[from] NotPlain),
    /// A file the entry names.
    #[error(transparent)]
    File(#[from] FileError),
}

/// The kinds an entry may have, as messages say.
const KINDS: &str = "expected one of \"clickhouse\", \"pyroscope\", \"otlp\"";

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
    fn key(key: impl Into<String>, message: impl Into<Problem>) -> EntryError {
        EntryError {
            key: Some(key.into()),
            message: message.into(),
        }
    }

    fn entry(message: Problem) -> EntryError {
        EntryError { key: None, message }
    }
}

/// The keys of one entry and their values as the file gives them, in the
/// file's order.
pub type Keys<'i> = [(String, Spanned<DeValue<'i>>)];

/// Read one entry with serde. Its kind and url come first, as their
/// absence has a hint of its own; an error names the key it is about.
pub fn read_entry(keys: &Keys<'_>) -> Result<SinkEntry, EntryError> {
    let get = |k: &str| keys.iter().find(|(name, _)| name == k).map(|(_, v)| v);
    let kind = match get("kind") {
        None => return Err(EntryError::entry(Problem::NoKind)),
        Some(v) => match Kind::deserialize(v.clone().into_deserializer()) {
            Ok(kind) => kind,
            Err(_) => {
                let got = Value::deserialize(v.clone().into_deserializer());
                let problem = got.map_or_else(|e| Problem::Value(Box::new(e)), Problem::BadKind);
                return Err(EntryError::key("kind", problem));
            }
        },
    };
    if get("url").is_none() {
        return Err(EntryError::entry(Problem::NoUrl));
    }
    let mut entry = entry_of(keys.iter().cloned()).map_err(|e| blame(kind, keys, e))?;
    let common = entry.common_mut();
    if common.name.is_empty() {
        common.name = kind.name().to_string();
    }
    entry.check()?;
    Ok(entry)
}

/// An entry of these keys, as serde reads it.
fn entry_of<'i>(
    keys: impl IntoIterator<Item = (String, Spanned<DeValue<'i>>)>,
) -> Result<SinkEntry, toml::de::Error> {
    SinkEntry::deserialize(table(keys).into_deserializer())
}

/// A table of these keys.
fn table<'i>(
    keys: impl IntoIterator<Item = (String, Spanned<DeValue<'i>>)>,
) -> Spanned<DeValue<'i>> {
    let keys = keys
        .into_iter()
        .map(|(k, v)| (Spanned::new(v.span(), Cow::Owned(k)), v));
    Spanned::new(0..0, DeValue::Table(keys.collect()))
}

/// The key an error of a whole entry is about: the first, in the file's
/// order, whose value fails alone (in an entry of the kind with a url that
/// passes), or within a table, its first item that does. None fails alone:
/// the error is the entry's.
fn blame(kind: Kind, keys: &Keys<'_>, whole: toml::de::Error) -> EntryError {
    let string = |s: &'static str| Spanned::new(0..0, DeValue::String(Cow::Borrowed(s)));
    let alone = |key: &str, v: Spanned<DeValue<'_>>| {
        entry_of([
            ("kind".to_string(), string(kind.name())),
            ("url".to_string(), string("http://localhost")),
            (key.to_string(), v),
        ])
        .err()
    };
    for (key, v) in keys.iter().filter(|(k, _)| k != "kind") {
        let Some(e) = alone(key, v.clone()) else {
            continue;
        };
        if !kind.takes(key) {
            return EntryError::key(key, Problem::UnknownKey(kind));
        }
        if let DeValue::Table(items) = v.get_ref() {
            for (item, iv) in items {
                let one = table([(item.get_ref().to_string(), iv.clone())]);
                if let Some(e) = alone(key, one) {
                    let key = format!("{key}.{}", item.get_ref());
                    return EntryError::key(key, Problem::Value(Box::new(e)));
                }
            }
        }
        return EntryError::key(key, Problem::Value(Box::new(e)));
    }
    EntryError::entry(Problem::Value(Box::new(whole)))
}

impl SinkEntry {
    /// The rules between an entry's keys.
    fn check(&self) -> Result<(), EntryError> {
        match self {
            SinkEntry::Pyroscope(p) => {
                if p.password_file.is_some() && p.user.is_none() {
                    return Err(EntryError::key(
                        "password_file",
                        Problem::PasswordWithoutUser,
                    ));
                }
                if p.token_file.is_some() && p.password_file.is_some() {
                    return Err(EntryError::key("token_file", Problem::TokenAndPassword));
                }
            }
            SinkEntry::ClickHouse(c) => {
                if let Some(db) = &c.database {
                    Layout {
                        database: db.clone(),
                        ..Default::default()
                    }
                    .check()
                    .map_err(|e| EntryError::key("database", e))?;
                }
            }
            SinkEntry::Otlp(_) => {}
        }
        Ok(())
    }
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
        .map(|p| Secret::read(p).map_err(|e| EntryError::key(key, e)))
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

    fn common_mut(&mut self) -> &mut Common {
        match self {
            SinkEntry::ClickHouse(e) => &mut e.common,
            SinkEntry::Pyroscope(e) => &mut e.common,
            SinkEntry::Otlp(e) => &mut e.common,
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
            ca_certificates(ca).map_err(|e| EntryError::key("ca_file", e))?;
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

    /// An entry of `text`, read as `[[sink]]` entries are.
    fn read(text: &str) -> Result<SinkEntry, EntryError> {
        let table = toml::de::DeTable::parse(text).unwrap().into_inner();
        let mut keys: Vec<_> = table.into_iter().collect();
        keys.sort_by_key(|(k, _)| k.span().start);
        let keys: Vec<_> = keys
            .into_iter()
            .map(|(k, v)| (k.into_inner().into_owned(), v))
            .collect();
        read_entry(&keys)
    }

    #[test]
    fn entries_read_their_values_and_errors_name_the_key() {
        let entry = read(
            "kind = \"pyroscope\"\nurl = \"https://h:4040\"\ntimeout = \"30s\"\n\
             spool_bytes = \"64M\"\nmax_age = \"2h\"\nlabels = { env = \"prod\" }\n",
        )
        .unwrap();
        let SinkEntry::Pyroscope(p) = &entry else {
            panic!("a pyroscope entry: {entry:?}")
        };
        assert_eq!(
            p.common,
            Common {
                spool_bytes: 64 << 20,
                timeout: Duration::from_secs(30),
                max_age: Some(Duration::from_secs(7200)),
                ..Common::new("pyroscope", "https://h:4040")
            }
        );
        assert_eq!(p.labels["env"], "prod");
        let ch = read("kind = \"clickhouse\"\nurl = \"http://h\"\n").unwrap();
        assert_eq!(
            ch,
            SinkEntry::new(Kind::ClickHouse, "clickhouse", "http://h")
        );
        for (text, key, what) in [
            (
                "kind = 1\nurl = \"http://h\"",
                Some("kind"),
                "expected one of \"clickhouse\", \"pyroscope\", \"otlp\", got 1",
            ),
            (
                "kind = \"otlp\"",
                None,
                "no url: add url = \"http://HOST:PORT\"",
            ),
            (
                "kind = \"pyroscope\"\nurl = \"http://h\"\nlabels = { env = \"prod\", team = 3 }",
                Some("labels.team"),
                "expected a non-empty string, got 3",
            ),
            (
                "kind = \"otlp\"\nurl = \"http://h\"\nname = 1979-05-27",
                Some("name"),
                "expected a non-empty string, got 1979-05-27",
            ),
            (
                "kind = \"pyroscope\"\nurl = \"http://h\"\ntenant = \" \"",
                Some("tenant"),
                "expected a non-empty string, got \" \"",
            ),
            (
                "kind = \"clickhouse\"\nurl = \"http://h\"\ncreate_schema = \"yes\"",
                Some("create_schema"),
                "expected true or false, got \"yes\"",
            ),
            (
                "kind = \"otlp\"\nurl = \"http://h\"\ntimeout = \"soon\"",
                Some("timeout"),
                "expected a duration such as \"7d\"",
            ),
            (
                "kind = \"otlp\"\nurl = \"http://h\"\nname = \"a b\"",
                Some("name"),
                "\"a b\": use letters, digits, _ and -",
            ),
            (
                "kind = \"otlp\"\nurl = \"http://h\"\ntenant = \"t\"",
                Some("tenant"),
                "unknown key for a otlp sink (it takes `kind`, `name`, `url`, `spool_bytes`, `timeout`, `max_age`, `ca_file`, `token_file`, `headers`)",
            ),
            (
                "kind = \"pyroscope\"\nurl = \"http://h\"\npassword_file = \"/p\"",
                Some("password_file"),
                "needs user too",
            ),
        ] {
            let e = read(text).unwrap_err();
            assert_eq!(e.key.as_deref(), key, "{text}: {e}");
            assert!(e.to_string().starts_with(what), "{text}: {e}");
        }
    }

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
