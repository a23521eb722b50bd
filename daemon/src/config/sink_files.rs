//! What a `[[sink]]` entry's files become once read: the credentials a
//! sink carries (never shown), its CA certificates, and where a ClickHouse
//! schema goes; with why a file cannot be used.
use std::path::{Path, PathBuf};

/// Why a file a sink entry names cannot be used; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error(transparent)]
    Refused(#[from] crate::trusted_files::Refused),
    #[error("{}: not UTF-8 text", .path.display())]
    NotText {
        path: PathBuf,
        #[source]
        source: std::string::FromUtf8Error,
    },
    #[error("{} is empty", .0.display())]
    Empty(PathBuf),
    #[error("{}: not PEM certificates: {source}", .path.display())]
    NotPem {
        path: PathBuf,
        #[source]
        source: reqwest::Error,
    },
    #[error("{}: no certificate in it", .0.display())]
    NoCertificate(PathBuf),
}

/// A credential read from a file: never printed, logged or shown.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The file's text without its final line break. Err (naming the file)
    /// when it cannot be read or is empty, or when the daemon may not trust
    /// it ([`crate::trusted_files::read`]: a link another user could have
    /// planted, a file others may write or another user owns).
    pub fn read(path: &Path) -> Result<Secret, FileError> {
        let bytes = crate::trusted_files::read(path)?;
        let text = String::from_utf8(bytes).map_err(|source| FileError::NotText {
            path: path.into(),
            source,
        })?;
        let text = text.trim_end_matches(['\n', '\r']);
        if text.is_empty() {
            return Err(FileError::Empty(path.into()));
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

/// A name of a [`Layout`] the statements cannot use unquoted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {name:?} is not a plain name: use letters, digits and _ (not first a digit)")]
pub struct NotPlain {
    /// `database` or `cluster`.
    pub key: &'static str,
    pub name: String,
}

impl Layout {
    /// Err when a name is not a plain identifier (letters, digits and `_`,
    /// not starting with a digit): the statements use them unquoted.
    pub fn check(&self) -> Result<(), NotPlain> {
        let plain = |s: &str| {
            s.chars().next().is_some_and(|c| !c.is_ascii_digit())
                && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if !plain(&self.database) {
            return Err(NotPlain {
                key: "database",
                name: self.database.clone(),
            });
        }
        match &self.cluster {
            Some(c) if !plain(c) => Err(NotPlain {
                key: "cluster",
                name: c.clone(),
            }),
            _ => Ok(()),
        }
    }
}

/// The certificates of a CA file (PEM, one or more), read as a trusted
/// file ([`crate::trusted_files::read`]). Err names the file.
pub fn ca_certificates(ca: &Path) -> Result<Vec<reqwest::Certificate>, FileError> {
    let pem = crate::trusted_files::read(ca)?;
    let certs =
        reqwest::Certificate::from_pem_bundle(&pem).map_err(|source| FileError::NotPem {
            path: ca.into(),
            source,
        })?;
    if certs.is_empty() {
        return Err(FileError::NoCertificate(ca.into()));
    }
    Ok(certs)
}
