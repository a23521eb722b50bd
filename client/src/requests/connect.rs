//! Connecting to profd: the gRPC channel over its Unix socket (with the
//! private daemon started when nothing answers, the user is root and the
//! build has one), or to a remote profd's TLS listener with a bearer token.
//! Knows nothing about commands.
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use profd_common::api::profiler_client::ProfilerClient;
use tokio::net::UnixStream;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity, Uri};

use crate::error::{error_chain, Error, NoPrivate};
#[cfg(feature = "private-daemon")]
use crate::requests::private_daemon::{self, PrivateDaemon};

/// The gRPC client every command uses: a channel to profd whose requests
/// carry the bearer token, if any.
pub type Client = ProfilerClient<InterceptedService<Channel, Auth>>;

/// A client of the daemon's gRPC health service, on the same channel.
pub type HealthClient =
    tonic_health::pb::health_client::HealthClient<InterceptedService<Channel, Auth>>;

/// Where the daemon is, as the command line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The local daemon's Unix socket (identity from SO_PEERCRED, no token).
    Socket(PathBuf),
    /// A remote daemon's TLS listener.
    Remote(Remote),
}

/// A remote profd reached over TLS (`--connect` and its companions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// `https://HOST:PORT`, as used in messages.
    pub url: String,
    /// The name the server's certificate must carry (`--tls-domain`, or the
    /// URL's host).
    pub domain: String,
    /// PEM file of the CA certificate(s) that verify the server (`--tls-ca`).
    pub ca: PathBuf,
    /// Client certificate and key files for mTLS (`--tls-cert`, `--tls-key`).
    pub identity: Option<(PathBuf, PathBuf)>,
    /// `--token-file`, when given on the command line; otherwise the token
    /// comes from `PROFD_TOKEN_FILE` or `PROFD_TOKEN`, if set.
    pub token_file: Option<PathBuf>,
}

/// How long to wait for the TCP connection and the TLS handshake together.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Environment variable naming the token file (when `--token-file` is not given).
pub const TOKEN_FILE_ENV: &str = "PROFD_TOKEN_FILE";
/// Environment variable holding the token itself (when no token file is named).
pub const TOKEN_ENV: &str = "PROFD_TOKEN";

/// A gRPC client of profd, and the private daemon behind it if we started one.
pub struct Connection {
    /// The API client.
    pub client: Client,
    channel: Channel,
    auth: Auth,
    #[cfg(feature = "private-daemon")]
    private: Option<PrivateDaemon>,
}

/// The largest answer taken from the daemon: a profile of a day of
/// continuous history with hundreds of thousands of unique stacks is tens of
/// MiB (gRPC's default limit is 4 MiB).
const MAX_ANSWER_BYTES: usize = 1 << 30;

/// What to do where nothing answers on the daemon's Unix socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Absent {
    /// Start a private daemon in this process (see [`Connection::open`]).
    StartPrivate,
    Fail,
}

impl Connection {
    /// Connects to the daemon `target` names. For a Unix socket where nothing
    /// answers, when we run as root and the build has the `private-daemon`
    /// feature, starts a private daemon in this process instead (the caller
    /// tells the user, see [`Connection::is_private`]); otherwise fails with
    /// [`Error::NoDaemon`]. A remote daemon is never replaced.
    pub async fn open(target: &Target) -> Result<Connection, Error> {
        Connection::open_with(target, Absent::StartPrivate).await
    }

    /// Connects to the daemon `target` names, never starting one.
    pub async fn open_existing(target: &Target) -> Result<Connection, Error> {
        Connection::open_with(target, Absent::Fail).await
    }

    async fn open_with(target: &Target, absent: Absent) -> Result<Connection, Error> {
        match target {
            Target::Socket(socket) => Connection::open_socket(socket, absent).await,
            Target::Remote(remote) => {
                let (channel, auth) = connect_remote(remote).await?;
                Ok(Connection::new(channel, auth))
            }
        }
    }

    fn new(channel: Channel, auth: Auth) -> Connection {
        Connection {
            client: ProfilerClient::with_interceptor(channel.clone(), auth.clone())
                .max_decoding_message_size(MAX_ANSWER_BYTES),
            channel,
            auth,
            #[cfg(feature = "private-daemon")]
            private: None,
        }
    }

    async fn open_socket(socket: &Path, absent: Absent) -> Result<Connection, Error> {
        match connect(socket).await {
            Ok(channel) => Ok(Connection::new(channel, Auth::none())),
            Err(ConnectError::Absent) if absent == Absent::StartPrivate => {
                Connection::open_private(socket).await
            }
            Err(e) => Err(e.into_error(socket.to_path_buf())),
        }
    }

    /// Instead of the daemon at `socket`, which is absent: starts a private
    /// daemon and connects to it, when we run as root.
    #[cfg(feature = "private-daemon")]
    async fn open_private(socket: &Path) -> Result<Connection, Error> {
        if !private_daemon::is_root() {
            return Err(Error::NoDaemon {
                path: socket.to_path_buf(),
                why: NoPrivate::NotRoot,
            });
        }
        let private = PrivateDaemon::start().await?;
        match connect(private.socket()).await {
            Ok(channel) => {
                let mut conn = Connection::new(channel, Auth::none());
                conn.private = Some(private);
                Ok(conn)
            }
            Err(e) => {
                let path = private.socket().to_path_buf();
                private.shutdown().await;
                Err(e.into_error(path))
            }
        }
    }

    /// Instead of the daemon at `socket`, which is absent: this build has no
    /// private daemon, which the error says.
    #[cfg(not(feature = "private-daemon"))]
    async fn open_private(socket: &Path) -> Result<Connection, Error> {
        Err(Error::NoDaemon {
            path: socket.to_path_buf(),
            why: NoPrivate::NotBuilt,
        })
    }

    /// A client of the daemon's health service on this connection.
    pub fn health(&self) -> HealthClient {
        tonic_health::pb::health_client::HealthClient::with_interceptor(
            self.channel.clone(),
            self.auth.clone(),
        )
    }

    /// Whether this connection is to a daemon running inside this process.
    pub fn is_private(&self) -> bool {
        #[cfg(feature = "private-daemon")]
        return self.private.is_some();
        #[cfg(not(feature = "private-daemon"))]
        false
    }

    /// Drops the client and, for a private daemon, shuts it down and removes
    /// its socket directory.
    pub async fn close(self) {
        let Connection {
            client,
            channel,
            #[cfg(feature = "private-daemon")]
            private,
            ..
        } = self;
        drop(client);
        drop(channel);
        #[cfg(feature = "private-daemon")]
        if let Some(private) = private {
            private.shutdown().await;
        }
    }
}

/// Why connecting failed.
enum ConnectError {
    /// No socket file, or nobody listening on it.
    Absent,
    /// Any other socket error (e.g. permission denied).
    Io(io::Error),
    /// The socket connected but the gRPC channel failed.
    Transport(tonic::transport::Error),
}

impl ConnectError {
    fn into_error(self, path: PathBuf) -> Error {
        match self {
            ConnectError::Absent => Error::NoDaemon {
                path,
                why: if cfg!(feature = "private-daemon") {
                    NoPrivate::NotProfiling
                } else {
                    NoPrivate::NotBuilt
                },
            },
            ConnectError::Io(source) if source.kind() == io::ErrorKind::PermissionDenied => {
                match socket_group(&path) {
                    Some(group) => Error::NotInGroup { path, group },
                    None => Error::Connect { path, source },
                }
            }
            ConnectError::Io(source) => Error::Connect { path, source },
            ConnectError::Transport(source) => Error::Transport { path, source },
        }
    }
}

/// The name of the group that owns the socket at `path`, or its number
/// when it has no name; `None` when the socket cannot be looked at.
fn socket_group(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let gid = std::fs::metadata(path).ok()?.gid();
    Some(
        nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid))
            .ok()
            .flatten()
            .map_or_else(|| gid.to_string(), |g| g.name),
    )
}

/// Connects a gRPC channel over the Unix socket at `path`. The first socket
/// is opened here so that "nobody listens" can be told from other failures;
/// reconnects open new sockets.
async fn connect(path: &Path) -> Result<Channel, ConnectError> {
    let first = UnixStream::connect(path)
        .await
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => ConnectError::Absent,
            _ => ConnectError::Io(e),
        })?;
    unix_channel(path, Some(first))
        .await
        .map_err(ConnectError::Transport)
}

/// A gRPC channel to the daemon listening on the Unix socket `path`. `first`,
/// when given, is the stream of its first connection (already dialled by a
/// caller that tells a missing daemon apart); reconnections dial `path`.
pub async fn unix_channel(
    path: &Path,
    first: Option<UnixStream>,
) -> Result<Channel, tonic::transport::Error> {
    let first = std::sync::Mutex::new(first);
    let path = path.to_path_buf();
    // The URI is a placeholder: the connector ignores it and dials the socket.
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let first = first.lock().map(|mut f| f.take()).unwrap_or(None);
            let path = path.clone();
            async move {
                let stream = match first {
                    Some(stream) => stream,
                    None => UnixStream::connect(path).await?,
                };
                Ok::<_, io::Error>(TokioIo::new(stream))
            }
        }))
        .await
}

/// Adds `authorization: Bearer <token>` to every request when it has a token.
#[derive(Clone, Default)]
pub struct Auth {
    header: Option<MetadataValue<Ascii>>,
}

impl Auth {
    /// No token: requests go out as they are (the Unix socket).
    pub fn none() -> Auth {
        Auth { header: None }
    }

    /// Sends `token` as a bearer token. Fails if it cannot be a header value
    /// (only visible ASCII and spaces are allowed).
    pub fn bearer(token: &str) -> Result<Auth, tonic::metadata::errors::InvalidMetadataValue> {
        let mut header = MetadataValue::try_from(format!("Bearer {token}"))?;
        header.set_sensitive(true);
        Ok(Auth {
            header: Some(header),
        })
    }

    /// Whether requests carry a token.
    pub fn has_token(&self) -> bool {
        self.header.is_some()
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the token itself.
        f.debug_struct("Auth")
            .field("bearer", &self.has_token())
            .finish()
    }
}

impl Interceptor for Auth {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(header) = &self.header {
            request
                .metadata_mut()
                .insert("authorization", header.clone());
        }
        Ok(request)
    }
}

/// Connects to a remote daemon's TLS listener, with the token from
/// `--token-file`, `PROFD_TOKEN_FILE` or `PROFD_TOKEN` (in that order).
async fn connect_remote(remote: &Remote) -> Result<(Channel, Auth), Error> {
    let auth = token_auth(
        remote.token_file.as_deref(),
        std::env::var_os(TOKEN_FILE_ENV),
        std::env::var_os(TOKEN_ENV),
    )?;
    let mut tls = ClientTlsConfig::new()
        .domain_name(remote.domain.clone())
        .ca_certificate(Certificate::from_pem(read_pem(
            &remote.ca,
            "--tls-ca",
            "CERTIFICATE",
        )?))
        .timeout(CONNECT_TIMEOUT);
    if let Some((cert, key)) = &remote.identity {
        let cert = read_pem(cert, "--tls-cert", "CERTIFICATE")?;
        let key = read_pem(key, "--tls-key", "PRIVATE KEY")?;
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let endpoint = Endpoint::from_shared(remote.url.clone())
        .map_err(|e| Error::Usage(format!("--connect {}: {}", remote.url, error_chain(&e))))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tls_config(tls)
        .map_err(|e| Error::Tls(error_chain(&e)))?;
    let channel = endpoint.connect().await.map_err(|e| Error::Remote {
        url: remote.url.clone(),
        reason: error_chain(&e),
    })?;
    Ok((channel, auth))
}

/// The bearer token to send: from the `--token-file` flag, else the file the
/// `PROFD_TOKEN_FILE` value names, else the `PROFD_TOKEN` value; none if
/// nothing is set (empty environment values count as unset). Surrounding
/// whitespace is not part of the token.
fn token_auth(
    flag: Option<&Path>,
    env_file: Option<OsString>,
    env_token: Option<OsString>,
) -> Result<Auth, Error> {
    let env_file = env_file.filter(|v| !v.is_empty()).map(PathBuf::from);
    let (token, origin) = match flag.map(Path::to_path_buf).or(env_file) {
        Some(path) => {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| Error::io(format!("cannot read token file {}", path.display()), e))?;
            let origin = format!("token file {}", path.display());
            (text, origin)
        }
        None => match env_token.filter(|v| !v.is_empty()) {
            Some(value) => {
                let text = value
                    .into_string()
                    .map_err(|_| Error::Usage(format!("{TOKEN_ENV} is not valid UTF-8")))?;
                (text, TOKEN_ENV.to_string())
            }
            None => return Ok(Auth::none()),
        },
    };
    let token = token.trim();
    if token.is_empty() {
        return Err(Error::Usage(format!("the {origin} holds no token")));
    }
    Auth::bearer(token).map_err(|_| {
        Error::Usage(format!(
            "the token in {origin} has characters a gRPC header cannot carry (only printable ASCII)"
        ))
    })
}

/// Reads a PEM file given by `flag`, which must hold a `-----BEGIN <kind>`
/// block (a suffix match, so "PRIVATE KEY" also accepts RSA and EC keys).
fn read_pem(path: &Path, flag: &str, kind: &str) -> Result<Vec<u8>, Error> {
    let pem = std::fs::read(path)
        .map_err(|e| Error::io(format!("cannot read {flag} {}", path.display()), e))?;
    let has_block = String::from_utf8_lossy(&pem)
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.trim_end().ends_with(&format!("{kind}-----")));
    if !has_block {
        let what = if kind == "CERTIFICATE" {
            "certificate"
        } else {
            "private key"
        };
        return Err(Error::Usage(format!(
            "{flag} {}: no PEM {what} in the file",
            path.display()
        )));
    }
    Ok(pem)
}

#[cfg(test)]
#[path = "connect_tests.rs"]
mod tests;
