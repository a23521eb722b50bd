//! Who is calling and what they may do: caller identity (SO_PEERCRED on the
//! Unix socket, bearer tokens on the TLS listener), roles, and the tokens
//! file; accounts and grants are in [`account`], the rule deciding which
//! processes a caller may profile is in [`ptrace`].
use crate::request_error::Error;
use crate::trusted_files;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo, UdsConnectInfo};
use tonic::{Request, Status};

mod account;
mod ptrace;

pub use account::{Account, Grant, GrantError, LookupError};
pub use ptrace::{check_process, Check, Denied};

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// List, watch, read and export sessions.
    ReadOnly,
    /// Also attach and stop.
    Operator,
}

impl Role {
    fn parse(s: &str) -> Option<Role> {
        match s {
            "read-only" => Some(Role::ReadOnly),
            "operator" => Some(Role::Operator),
            _ => None,
        }
    }
}

/// An authenticated caller.
#[derive(Debug, Clone)]
pub struct Caller {
    pub account: Account,
    pub role: Role,
    /// `uid 1000 (alice)` locally, `token dash (as alice)` remotely: for
    /// messages and logs.
    pub label: String,
}

impl Caller {
    /// Root may profile and read everything.
    pub fn is_root(&self) -> bool {
        self.account.uid == 0
    }

    pub fn uid(&self) -> u32 {
        self.account.uid
    }

    /// Fail unless the caller may attach and stop.
    pub fn require_operator(&self, what: &str) -> Result<(), Status> {
        match self.role {
            Role::Operator => Ok(()),
            Role::ReadOnly => Err(Status::permission_denied(format!(
                "{} is read-only and may not {what}: use an operator token",
                self.label
            ))),
        }
    }

    /// Fail unless the caller may read a session owned by `owner_uid`.
    pub fn may_read(&self, session: u64, owner_uid: u32) -> Result<(), Error> {
        if self.is_root() || self.uid() == owner_uid {
            Ok(())
        } else {
            Err(Error::PermissionDenied(format!(
                "session {session} belongs to uid {owner_uid}; only its owner or root may use it"
            )))
        }
    }
}

/// One line of the tokens file.
#[derive(Debug, Clone)]
struct TokenEntry {
    name: String,
    role: Role,
    account: Account,
}

/// Bearer tokens accepted on the TLS listener, by SHA-256 of the token.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    by_hash: HashMap<[u8; 32], TokenEntry>,
}

fn sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Why a tokens file could not be read, or a token made.
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    /// The file is not one profd trusts, or cannot be opened.
    #[error("tokens file {0}")]
    File(#[source] trusted_files::Refused),
    #[error("tokens file {}: not UTF-8 text", .0.display())]
    NotText(PathBuf),
    #[error("tokens file {}: {source}", path.display())]
    Line {
        path: PathBuf,
        #[source]
        source: LineError,
    },
    #[error("token name {0:?} must be one word")]
    Name(String),
    #[error("role {0:?} is not read-only or operator")]
    Role(String),
    #[error(transparent)]
    User(#[from] LookupError),
    #[error("no randomness: {0}")]
    Random(#[source] rustix::io::Errno),
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What is wrong with line `line` of a tokens file.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {fault}")]
pub struct LineError {
    line: usize,
    #[source]
    fault: LineFault,
}

/// What is wrong with a line of a tokens file.
#[derive(Debug, thiserror::Error)]
pub enum LineFault {
    #[error("expected `sha256:<hex> NAME ROLE USER`")]
    Form,
    #[error("the hash must be sha256: and 64 hex digits")]
    Hash,
    #[error("role {0:?} is not read-only or operator")]
    Role(String),
    #[error(transparent)]
    User(LookupError),
    #[error("the same token is listed twice")]
    Twice,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl Tokens {
    /// Read a tokens file: lines `sha256:<hex> NAME ROLE USER`, `#` comments.
    /// Refused as [`trusted_files::read`] says: unless root or the daemon's
    /// user owns it, when group or others may write it, or when it is
    /// reached through a link another user could have planted.
    pub fn load(path: &Path) -> Result<Tokens, TokensError> {
        let bytes = trusted_files::read(path).map_err(TokensError::File)?;
        let text = String::from_utf8(bytes).map_err(|_| TokensError::NotText(path.into()))?;
        Tokens::parse(&text).map_err(|source| TokensError::Line {
            path: path.into(),
            source,
        })
    }

    fn parse(text: &str) -> Result<Tokens, LineError> {
        let mut by_hash = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |fault| LineError { line: n + 1, fault };
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [hash, name, role, user] = fields[..] else {
                return Err(bad(LineFault::Form));
            };
            let hash = hash
                .strip_prefix("sha256:")
                .and_then(unhex)
                .ok_or_else(|| bad(LineFault::Hash))?;
            let role = Role::parse(role).ok_or_else(|| bad(LineFault::Role(role.into())))?;
            let account = Account::lookup(user).map_err(|e| bad(LineFault::User(e)))?;
            let entry = TokenEntry {
                name: name.to_string(),
                role,
                account,
            };
            if by_hash.insert(hash, entry).is_some() {
                return Err(bad(LineFault::Twice));
            }
        }
        Ok(Tokens { by_hash })
    }

    /// The caller a presented token stands for.
    fn caller(&self, token: &str) -> Option<Caller> {
        let e = self.by_hash.get(&sha256(token))?;
        Some(Caller {
            account: e.account.clone(),
            role: e.role,
            label: format!("token {} (as {})", e.name, e.account.name),
        })
    }

    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}

/// Make a new random token, append its line to `path` (created 0600) and
/// return the token.
pub fn new_token(path: &Path, name: &str, role: &str, user: &str) -> Result<String, TokensError> {
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(TokensError::Name(name.into()));
    }
    Role::parse(role).ok_or_else(|| TokensError::Role(role.into()))?;
    let account = Account::lookup(user)?;
    let mut random = [0u8; 32];
    rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty())
        .map_err(TokensError::Random)?;
    let token = hex(&random);
    let line = format!(
        "sha256:{} {name} {role} {}\n",
        hex(&sha256(&token)),
        account.name
    );
    let mut file = trusted_files::open_append(path).map_err(TokensError::File)?;
    std::io::Write::write_all(&mut file, line.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|source| TokensError::Write {
            path: path.into(),
            source,
        })?;
    Ok(token)
}

/// How callers are identified and what kernel frames they are shown.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Tokens of the TLS listener (empty without one).
    pub tokens: Tokens,
    /// What callers other than root are shown of kernel frames.
    pub kernel_frames: crate::serve::kernel_view::Setting,
}

/// Where the TLS listener's files are.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Clients must present a certificate signed by this CA (mTLS).
    pub client_ca: Option<PathBuf>,
}

impl Policy {
    /// Identify the caller of a request: its Unix socket peer, or its bearer
    /// token on the TLS listener (a valid one also marks the connection
    /// authenticated, for the connection limits).
    pub fn caller<T>(&self, req: &Request<T>) -> Result<Caller, Status> {
        if let Some(uds) = req.extensions().get::<UdsConnectInfo>() {
            let cred = uds.peer_cred.ok_or_else(|| {
                Status::unauthenticated("the socket peer's credentials are unavailable")
            })?;
            let account = Account::of_peer(cred.uid(), cred.gid(), cred.pid());
            let label = format!("uid {} ({})", account.uid, account.name);
            return Ok(Caller {
                account,
                role: Role::Operator,
                label,
            });
        }
        if req
            .extensions()
            .get::<TlsConnectInfo<TcpConnectInfo>>()
            .is_none()
        {
            return Err(Status::unauthenticated(
                "connections are accepted only on the Unix socket and the TLS listener",
            ));
        }
        let header = req.metadata().get("authorization").ok_or_else(|| {
            Status::unauthenticated(
                "no bearer token: send `authorization: Bearer <token>` (profctl --token-file)",
            )
        })?;
        let token = header
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| {
                Status::unauthenticated("the authorization header must be `Bearer <token>`")
            })?;
        let caller = self.tokens.caller(token).ok_or_else(|| {
            Status::unauthenticated(
                "unknown token: ask the daemon's administrator for one (`profd token`)",
            )
        })?;
        if let Some(connection) = req.extensions().get::<crate::serve::conns::Connection>() {
            connection.authenticated();
        }
        Ok(caller)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn tokens_file_lines() {
        let hash = hex(&sha256("secret"));
        let t =
            Tokens::parse(&format!("# comment\n\nsha256:{hash} dash read-only root\n")).unwrap();
        assert_eq!(t.len(), 1);
        let c = t.caller("secret").unwrap();
        assert_eq!((c.role, c.account.uid), (Role::ReadOnly, 0));
        assert_eq!(c.label, "token dash (as root)");
        assert!(t.caller("wrong").is_none());
        for (bad, why) in [
            ("sha256:abc dash operator root", "64 hex"),
            (&format!("{hash} dash operator root"), "sha256:"),
            (&format!("sha256:{hash} dash admin root"), "role"),
            (&format!("sha256:{hash} dash operator"), "expected"),
            (
                &format!("sha256:{hash} dash operator no-such-user-here"),
                "no user",
            ),
        ] {
            let err = Tokens::parse(bad).unwrap_err().to_string();
            assert!(err.contains("line 1") && err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn new_tokens_are_appended_and_accepted() {
        let dir = std::env::temp_dir().join(format!("profd-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokens");
        let _ = std::fs::remove_file(&path);
        let a = new_token(&path, "one", "operator", "root").unwrap();
        let b = new_token(&path, "two", "read-only", "0").unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let t = Tokens::load(&path).unwrap();
        assert_eq!(t.caller(&a).unwrap().role, Role::Operator);
        assert_eq!(t.caller(&b).unwrap().role, Role::ReadOnly);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(Tokens::load(&path)
            .unwrap_err()
            .to_string()
            .contains("chmod go-w it"));
        assert!(new_token(&path, "two words", "operator", "root").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Whoever owns the tokens file decides who gets in: only root or the
    /// daemon's own user may.
    #[test]
    fn tokens_file_of_another_user_is_refused() {
        let dir = std::env::temp_dir().join(format!("profd-owner-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokens");
        let _ = std::fs::remove_file(&path);
        new_token(&path, "one", "operator", "root").unwrap();
        assert!(Tokens::load(&path).is_ok());
        let other = 65534;
        assert_ne!(rustix::process::geteuid().as_raw(), other);
        std::os::unix::fs::chown(&path, Some(other), None).expect("chown (run as root)");
        let err = Tokens::load(&path).unwrap_err().to_string();
        assert!(
            err.starts_with("tokens file ")
                && err.contains("owned by uid 65534")
                && err.contains("chown it to root"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
