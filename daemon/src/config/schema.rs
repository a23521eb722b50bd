//! What a declared setting is, and what is done with every one alike: its
//! command-line flag, its key read from the settings file (errors name the
//! file, the key and the line), the layers of values merged, and the TOML
//! `--check-config` prints.
use super::sinks::{check_names, read_entry, EntryError, SameName, SinkEntry};
use super::values::{Type, ValueError};
use clap::{Arg, ArgAction, ArgMatches};
use serde::de::IntoDeserializer;
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::de::{DeTable, DeValue};
use toml::{Spanned, Value};

/// The declared settings and the file's sections, in the order they are
/// shown: what everything below works over.
pub struct Schema {
    pub all: &'static [&'static dyn Declared],
    /// The `[section]` tables a file may have.
    pub sections: &'static [&'static str],
}

/// The command-line flag of a setting.
pub enum Flag {
    /// `--LONG VALUE_NAME` (repeated for a list).
    Value {
        long: &'static str,
        value_name: &'static str,
    },
    /// `--LONG` sets this true-or-false key false. It opens its section: the
    /// section's other flags cannot be given with it and set it true.
    Off(&'static str),
    /// `--LONG` sets this true-or-false key true. Unlike `Off`, it alone
    /// turns its section on: the section's other flags may be given without
    /// it (their values are still checked).
    On(&'static str),
}

/// One setting: the file's key, the flag, the help, the value type and the
/// default.
pub struct Setting<T: 'static> {
    /// `name`, or `section.name` for a key of a `[section]` table.
    pub key: &'static str,
    pub flag: Flag,
    /// The flag's help text (`--help`, the man page).
    pub help: &'static str,
    pub ty: Type<T>,
    /// None: the key is unset unless given.
    pub default: Option<fn() -> T>,
}

/// A setting whatever its value type: what the table of settings holds.
pub trait Declared: Sync {
    fn key(&self) -> &'static str;
    fn flag(&self) -> &Flag;
    /// The clap argument of its flag (`all`: the settings it may conflict
    /// with).
    fn arg(&'static self, all: &[&'static dyn Declared]) -> Arg;
    /// Check a value and write it as the file does.
    fn read(&self, v: &Value) -> Result<Value, ValueError>;
    fn list(&self) -> bool;
    fn default_value(&self) -> Option<Value>;
}

impl<T> Declared for Setting<T> {
    fn key(&self) -> &'static str {
        self.key
    }

    fn flag(&self) -> &Flag {
        &self.flag
    }

    fn arg(&'static self, all: &[&'static dyn Declared]) -> Arg {
        let arg = Arg::new(self.key).help(self.help);
        match self.flag {
            Flag::Value { long, value_name } => {
                let ty = &self.ty;
                arg.long(long)
                    .value_name(value_name)
                    .value_hint(ty.hint)
                    .action(if ty.list {
                        ArgAction::Append
                    } else {
                        ArgAction::Set
                    })
                    .value_parser(move |text: &str| ty.flag(text))
            }
            Flag::Off(long) => {
                let section = section_of(self.key);
                let others = all
                    .iter()
                    .filter(|s| s.key() != self.key && section_of(s.key()) == section)
                    .map(|s| s.key());
                arg.long(long)
                    .action(ArgAction::SetTrue)
                    .conflicts_with_all(others)
            }
            Flag::On(long) => arg.long(long).action(ArgAction::SetTrue),
        }
    }

    fn read(&self, v: &Value) -> Result<Value, ValueError> {
        self.ty.read(v)
    }

    fn list(&self) -> bool {
        self.ty.list
    }

    fn default_value(&self) -> Option<Value> {
        self.default.map(|d| (self.ty.show)(&d()))
    }
}

impl<T> Setting<T> {
    /// The flag as messages name it: `--long`.
    pub fn flag_name(&self) -> String {
        match self.flag {
            Flag::Value { long, .. } | Flag::Off(long) | Flag::On(long) => format!("--{long}"),
        }
    }
}

/// The section of a key: "" for the keys at the top of the file.
fn section_of(key: &str) -> &str {
    key.split_once('.').map_or("", |(section, _)| section)
}

impl Schema {
    /// A section's keys in the order they are listed and shown: a key that
    /// turns its section on or off (an `Off` or `On` flag) first, then the
    /// others as declared.
    fn keys_of<'a>(&'a self, section: &'a str) -> impl Iterator<Item = &'static dyn Declared> + 'a {
        let opens = |s: &&&dyn Declared| matches!(s.flag(), Flag::Off(_) | Flag::On(_));
        let of = move |s: &&&dyn Declared| section_of(s.key()) == section;
        let first = self.all.iter().filter(move |s| of(s) && opens(s));
        let rest = self.all.iter().filter(move |s| of(s) && !opens(s));
        first.chain(rest).copied()
    }

    /// The defaults of every key that has one.
    pub fn defaults(&self) -> Layer {
        Layer(
            self.all
                .iter()
                .filter_map(|s| Some((s.key(), s.default_value()?)))
                .collect(),
            Vec::new(),
        )
    }

    /// A layer as a TOML document: the top keys, then a table for each
    /// section that has keys.
    pub fn show(&self, layer: &Layer) -> String {
        toml::to_string(&Shown(self, layer, "")).unwrap_or_else(|e| format!("# cannot show: {e}\n"))
    }

    /// The clap arguments of every flag.
    pub fn args(&self) -> impl Iterator<Item = Arg> + '_ {
        self.all.iter().map(|s| s.arg(self.all))
    }
}

/// One layer of settings (the file's, the flags given, or the defaults):
/// the keys it sets, with checked values.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Layer(BTreeMap<&'static str, Value>, Vec<SinkEntry>);

impl Layer {
    /// The value of a setting, if this layer sets it.
    pub fn get<T>(&self, s: &Setting<T>) -> Option<T> {
        let v = self.0.get(s.key)?;
        Some((s.ty.check)(v).expect("a layer holds checked values"))
    }

    /// The value of a setting, or its default.
    pub fn get_or_default<T>(&self, s: &Setting<T>) -> T {
        self.get(s)
            .or_else(|| s.default.map(|d| d()))
            .expect("a setting with a default")
    }

    /// Whether this layer sets the key.
    pub fn has<T>(&self, s: &Setting<T>) -> bool {
        self.0.contains_key(s.key)
    }

    /// Set a setting.
    #[cfg(test)]
    pub fn set<T>(&mut self, s: &Setting<T>, value: T) {
        self.0.insert(s.key, (s.ty.show)(&value));
    }

    /// Keep only the keys `keep` says.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.0.retain(|k, _| keep(k));
    }

    /// The keys set, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.0.keys().copied()
    }

    /// This layer with every key `top` sets taken from `top` (and its
    /// sinks, when it has any).
    pub fn overlay(mut self, top: &Layer) -> Layer {
        self.0.extend(top.0.iter().map(|(k, v)| (*k, v.clone())));
        if !top.1.is_empty() {
            self.1 = top.1.clone();
        }
        self
    }

    /// The `[[sink]]` entries.
    pub fn sinks(&self) -> &[SinkEntry] {
        &self.1
    }
}

impl Schema {
    /// The flags given.
    pub fn flags_given(&self, m: &ArgMatches) -> Result<Layer, ValueError> {
        let mut layer = Layer::default();
        for s in self.all {
            let key = s.key();
            match s.flag() {
                Flag::Value { .. } => {
                    let mut given = m.get_many::<Value>(key).into_iter().flatten().cloned();
                    let v = if s.list() {
                        let items: Vec<Value> = given.collect();
                        (!items.is_empty()).then_some(Value::Array(items))
                    } else {
                        given.next()
                    };
                    if let Some(v) = v {
                        layer.0.insert(key, s.read(&v)?);
                    }
                }
                Flag::Off(_) => {
                    if m.get_flag(key) {
                        layer.0.insert(key, Value::Boolean(false));
                    }
                }
                Flag::On(_) => {
                    if m.get_flag(key) {
                        layer.0.insert(key, Value::Boolean(true));
                    }
                }
            }
        }
        // A flag of a section an `Off` flag opens turns the section on.
        for s in self.all {
            if let Flag::Off(_) = s.flag() {
                let section = section_of(s.key());
                if !layer.0.contains_key(s.key()) && layer.keys().any(|k| section_of(k) == section)
                {
                    layer.0.insert(s.key(), Value::Boolean(true));
                }
            }
        }
        Ok(layer)
    }
}

/// A layer, or one of its sections, for serde.
struct Shown<'a>(&'a Schema, &'a Layer, &'a str);

impl Serialize for Shown<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let Shown(schema, layer, section) = *self;
        let mut map = ser.serialize_map(None)?;
        for s in schema.keys_of(section) {
            if let Some(v) = layer.0.get(s.key()) {
                let name = s.key().rsplit('.').next().unwrap_or_default();
                map.serialize_entry(name, v)?;
            }
        }
        if section.is_empty() {
            for &name in schema.sections {
                if layer.keys().any(|k| section_of(k) == name) {
                    map.serialize_entry(name, &Shown(schema, layer, name))?;
                }
            }
            if !layer.1.is_empty() {
                map.serialize_entry(SINK, &layer.1)?;
            }
        }
        map.end()
    }
}

/// The flags given on the command line: one for each setting.
#[derive(Debug, Clone, Default)]
pub struct Flags(pub Layer);

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

/// `expected `a``, `expected `a` or `b``, `expected one of `a`, `b`, `c``.
fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.as_slice() {
        [] => "there are no keys".into(),
        [one] => format!("expected {one}"),
        [a, b] => format!("expected {a} or {b}"),
        all => format!("expected one of {}", all.join(", ")),
    }
}

/// Why a settings file cannot be read: it is not TOML, or a key is wrong.
/// Each says `PATH: ...`, and the line when known.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("{}: {}{}", .path.display(), .source.message().trim_end(), line_shown(*.line))]
    Syntax {
        path: PathBuf,
        line: Option<usize>,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("{}: {key}: {problem} (line {line})", .path.display())]
    Key {
        path: PathBuf,
        /// `section.name`, or `sink[N].name` of a sink entry.
        key: String,
        line: usize,
        #[source]
        problem: Box<KeyProblem>,
    },
}

/// ` (line N)`, or nothing when the line is not known.
fn line_shown(line: Option<usize>) -> String {
    line.map(|n| format!(" (line {n})")).unwrap_or_default()
}

/// What is wrong with a key of the file.
#[derive(Debug, thiserror::Error)]
pub enum KeyProblem {
    /// Not a value the setting takes.
    #[error(transparent)]
    Value(#[from] ValueError),
    /// Not a key of its table, which has these.
    #[error("unknown key ({})", one_of(.0))]
    Unknown(Vec<&'static str>),
    #[error("expected a table, got {0}")]
    NotTable(Value),
    #[error("expected [[sink]] tables (an array of tables)")]
    NotSinks,
    #[error("expected a table")]
    SinkNotTable,
    #[error(transparent)]
    Sink(#[from] Box<EntryError>),
    #[error(transparent)]
    SameName(#[from] SameName),
    /// A value TOML reads but not as a plain value.
    #[error("{}", .0.message())]
    NotAValue(#[source] Box<toml::de::Error>),
}

impl Schema {
    /// Parse a settings file's text; errors say `PATH: KEY: what is wrong (line N)`.
    pub fn parse(&self, path: &Path, text: &str) -> Result<Layer, ParseError> {
        let root = DeTable::parse(text).map_err(|source| ParseError::Syntax {
            path: path.into(),
            line: source.span().map(|s| line_of(text, s.start)),
            source: Box::new(source),
        })?;
        let mut layer = Layer::default();
        self.read_table(root.get_ref(), "", &mut layer)
            .map_err(|e| ParseError::Key {
                path: path.into(),
                key: e.key,
                line: line_of(text, e.span.start),
                problem: Box::new(e.problem),
            })?;
        Ok(layer)
    }
}

/// A key the file gets wrong: the key, where, and what is wrong.
struct KeyError {
    key: String,
    span: Range<usize>,
    problem: KeyProblem,
}

impl KeyError {
    fn new(key: impl Into<String>, span: Range<usize>, problem: impl Into<KeyProblem>) -> KeyError {
        KeyError {
            key: key.into(),
            span,
            problem: problem.into(),
        }
    }
}

impl Schema {
    /// Read the keys of one table of the file (the top one: section "").
    fn read_table(
        &self,
        table: &DeTable<'_>,
        section: &str,
        layer: &mut Layer,
    ) -> Result<(), KeyError> {
        let mut entries: Vec<_> = table.iter().collect();
        entries.sort_by_key(|(k, _)| k.span().start);
        for (name, value) in entries {
            let key = match section {
                "" => name.get_ref().to_string(),
                _ => format!("{section}.{}", name.get_ref()),
            };
            let key_span = name.span();
            let name: &str = name.get_ref();
            let fail = |problem: KeyProblem| KeyError::new(key.clone(), value.span(), problem);
            if section.is_empty() && name == SINK {
                layer.1 = read_sinks(value)?;
            } else if section.is_empty() && self.sections.contains(&name) {
                match value.get_ref() {
                    DeValue::Table(t) => self.read_table(t, name, layer)?,
                    _ => return Err(fail(KeyProblem::NotTable(to_value(value).map_err(fail)?))),
                }
            } else if let Some(s) = self.all.iter().find(|s| s.key() == key) {
                let v = s
                    .read(&to_value(value).map_err(fail)?)
                    .map_err(|e| fail(e.into()))?;
                layer.0.insert(s.key(), v);
            } else {
                let mut known: Vec<&'static str> = self
                    .keys_of(section)
                    .map(|s| s.key().rsplit('.').next().unwrap_or_default())
                    .collect();
                if section.is_empty() {
                    known.extend(self.sections);
                    known.push(SINK);
                }
                return Err(KeyError::new(key, key_span, KeyProblem::Unknown(known)));
            }
        }
        Ok(())
    }
}

/// The array of tables each backend a window is sent to has.
const SINK: &str = "sink";

/// The `[[sink]]` entries, each key checked; errors name `sink[N].key`.
fn read_sinks(value: &Spanned<DeValue<'_>>) -> Result<Vec<SinkEntry>, KeyError> {
    let DeValue::Array(items) = value.get_ref() else {
        return Err(KeyError::new(SINK, value.span(), KeyProblem::NotSinks));
    };
    let mut entries = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("{SINK}[{i}]");
        let DeValue::Table(t) = item.get_ref() else {
            return Err(KeyError::new(at, item.span(), KeyProblem::SinkNotTable));
        };
        let mut fields: Vec<_> = t.iter().collect();
        fields.sort_by_key(|(k, _)| k.span().start);
        let spans: Vec<_> = fields.iter().map(|(k, _)| k.span()).collect();
        let keys: Vec<_> = fields
            .into_iter()
            .map(|(k, v)| (k.get_ref().to_string(), v.clone()))
            .collect();
        let entry = read_entry(&keys).map_err(|e| {
            let span = e
                .key
                .as_deref()
                .and_then(|k| {
                    let top = k.split('.').next().unwrap_or(k);
                    keys.iter().position(|(name, _)| name == top)
                })
                .map_or(item.span(), |j| spans[j].clone());
            let shown = match &e.key {
                Some(k) => format!("{at}.{k}"),
                None => at.clone(),
            };
            KeyError::new(shown, span, Box::new(e))
        })?;
        entries.push(entry);
    }
    check_names(&entries).map_err(|e| {
        let i = e.index;
        KeyError::new(format!("{SINK}[{i}].name"), items[i].span(), e)
    })?;
    Ok(entries)
}

/// A value of the file as a plain TOML value.
fn to_value(v: &Spanned<DeValue<'_>>) -> Result<Value, KeyProblem> {
    Value::deserialize(v.clone().into_deserializer())
        .map_err(|e| KeyProblem::NotAValue(Box::new(e)))
}
