//! profd: the sampling profiler daemon (library; `main.rs` is a thin wrapper).
//! `Daemon::bind` probes the kernel, reloads the sessions kept in the state
//! directory and binds the Unix socket (and the TLS listener when
//! configured); `serve` runs the gRPC API until shutdown, ending every
//! session cleanly and saving it.
#![deny(unsafe_code)]

pub mod auth;
pub mod maps;
#[allow(unsafe_code)]
pub mod perf;
pub mod registry;
pub mod rpc;
pub mod sampler;
pub mod session;
pub mod store;
pub mod symbolize;
pub mod unwind;

use profd_common::api::profiler_server::ProfilerServer;
use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, UnixListener};
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

/// The group given the socket when none is configured (if it exists).
pub const DEFAULT_SOCKET_GROUP: &str = "profd";

/// Daemon settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Unix socket the gRPC API is served on.
    pub socket: PathBuf,
    /// Group that owns the socket (mode 0660): its members may connect.
    /// None: the default group `profd` when it exists, else root's.
    pub socket_group: Option<String>,
    /// Members of a group may profile a user's processes.
    pub grants: Vec<auth::Grant>,
    pub limits: registry::Limits,
    /// The TLS listener, off unless set.
    pub remote: Option<Remote>,
    /// The state directory ended sessions are kept in across restarts
    /// (`--state-dir`, retention flags). None: nothing is written to disk.
    pub persist: Option<store::Persist>,
    /// Data pages of each CPU ring (a power of two); None: 128, or 512 for
    /// sessions that copy user stacks.
    pub ring_pages: Option<usize>,
}

/// The TCP listener: TLS only, bearer tokens.
#[derive(Debug, Clone)]
pub struct Remote {
    pub listen: SocketAddr,
    pub tls: auth::TlsFiles,
    pub tokens: PathBuf,
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
        }
    }
}

/// Why the daemon cannot start or serve.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot use socket {path}: {reason}")]
    Socket { path: PathBuf, reason: String },
    #[error("cannot read the machine's CPUs: {0}")]
    Cpus(std::io::Error),
    #[error("{0}")]
    Config(String),
    #[error("cannot use the state directory {path}: {reason} (choose another with --state-dir, or --no-persist)")]
    State { path: PathBuf, reason: String },
    #[error("cannot listen on {addr}: {reason}")]
    Listen { addr: SocketAddr, reason: String },
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// A daemon whose socket is bound and ready to accept clients.
pub struct Daemon {
    listener: UnixListener,
    socket: PathBuf,
    remote: Option<(TcpListener, ServerTlsConfig)>,
    registry: Arc<registry::Registry>,
    policy: Arc<auth::Policy>,
    facts: rpc::Facts,
}

/// How long a TLS client may take to finish its handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for ended sessions to be saved.
const SAVE_TIMEOUT: Duration = Duration::from_secs(60);

/// The gid the socket is given, from `--socket-group`.
fn socket_gid(group: Option<&str>) -> Result<Option<u32>, Error> {
    let name = group.unwrap_or(DEFAULT_SOCKET_GROUP);
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(Some(g.gid.as_raw())),
        Ok(None) if group.is_none() => Ok(None),
        Ok(None) => Err(Error::Config(format!(
            "socket group {name:?} does not exist: create it (groupadd {name}) or choose another --socket-group"
        ))),
        Err(e) => Err(Error::Config(format!("cannot look up group {name:?}: {e}"))),
    }
}

fn read_pem(what: &str, path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| Error::Config(format!("{what} {}: {e}", path.display())))
}

/// Load the TLS listener's files and tokens, and bind it.
async fn bind_remote(
    remote: &Remote,
    policy: &mut auth::Policy,
) -> Result<(TcpListener, ServerTlsConfig), Error> {
    let cert = read_pem("--tls-cert", &remote.tls.cert)?;
    let key = read_pem("--tls-key", &remote.tls.key)?;
    let mut tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(cert, key))
        .timeout(TLS_HANDSHAKE_TIMEOUT);
    if let Some(ca) = &remote.tls.client_ca {
        tls = tls.client_ca_root(Certificate::from_pem(read_pem("--tls-client-ca", ca)?));
    }
    policy.tokens = auth::Tokens::load(&remote.tokens).map_err(Error::Config)?;
    if policy.tokens.is_empty() {
        tracing::warn!(tokens = %remote.tokens.display(), "no tokens: every remote call will be refused");
    }
    let listener = TcpListener::bind(remote.listen)
        .await
        .map_err(|e| Error::Listen {
            addr: remote.listen,
            reason: e.to_string(),
        })?;
    tracing::info!(
        addr = %remote.listen,
        mtls = remote.tls.client_ca.is_some(),
        tokens = policy.tokens.len(),
        "listening (TLS)"
    );
    Ok((listener, tls))
}

fn socket_error(path: &Path, reason: impl ToString) -> Error {
    Error::Socket {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// Remove a leftover socket nobody answers on; refuse anything else.
fn clear_stale_socket(path: &Path) -> Result<(), Error> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(socket_error(path, e)),
    };
    if !meta.file_type().is_socket() {
        return Err(socket_error(
            path,
            "it exists and is not a socket; remove it or choose another --socket",
        ));
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(socket_error(path, "another profd is already serving on it"));
    }
    std::fs::remove_file(path).map_err(|e| socket_error(path, e))
}

impl Daemon {
    /// Probe the kernel and bind the socket; clients may connect once this returns.
    pub async fn bind(config: Config) -> Result<Daemon, Error> {
        let cpus = perf::online_cpus().map_err(Error::Cpus)?;
        let mut sampler = sampler::Sampler::new(cpus);
        sampler.ring_pages = config.ring_pages;
        let source = Arc::new(sampler);
        Daemon::bind_with(
            config,
            source,
            Arc::new(symbolize::BlazeSymbolizer::default()),
        )
        .await
    }

    /// `bind` with a given sample source and symbolizer (tests use fakes).
    pub async fn bind_with(
        config: Config,
        source: Arc<dyn sampler::SampleSource>,
        symbolizer: Arc<dyn symbolize::Symbolizer>,
    ) -> Result<Daemon, Error> {
        let cpus = perf::online_cpus().map_err(Error::Cpus)?;
        let facts = rpc::Facts {
            cpus: cpus.len() as u32,
            pmu_available: perf::pmu_available(),
        };
        tracing::info!(
            cpus = facts.cpus,
            pmu = facts.pmu_available,
            paranoid = registry::kernel_sysctl("perf_event_paranoid"),
            max_sample_rate = registry::max_sample_rate(),
            "probed the kernel"
        );
        if !facts.pmu_available {
            tracing::info!("no hardware PMU: sessions asking for cycles use cpu-clock");
        }
        let gid = socket_gid(config.socket_group.as_deref())?;
        let mut policy = auth::Policy {
            grants: config.grants.clone(),
            ..Default::default()
        };
        let remote = match &config.remote {
            Some(remote) => Some(bind_remote(remote, &mut policy).await?),
            None => None,
        };
        // Before the socket: a state directory that cannot be used stops the
        // start; corrupt files in it do not.
        let store = match &config.persist {
            Some(persist) => {
                let p = persist.clone();
                let opened = tokio::task::spawn_blocking(move || store::Store::open(&p))
                    .await
                    .map_err(|e| Error::Config(format!("reading the state directory: {e}")))?;
                Some(opened.map_err(|reason| Error::State {
                    path: persist.dir.clone(),
                    reason,
                })?)
            }
            None => None,
        };
        let path = config.socket;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                std::fs::create_dir_all(dir).map_err(|e| socket_error(&path, e))?;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
                    .map_err(|e| socket_error(&path, e))?;
            }
        }
        clear_stale_socket(&path)?;
        let listener = UnixListener::bind(&path).map_err(|e| socket_error(&path, e))?;
        std::os::unix::fs::chown(&path, None, gid).map_err(|e| socket_error(&path, e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660))
            .map_err(|e| socket_error(&path, e))?;
        let mut registry =
            registry::Registry::new(source, symbolizer, config.limits, config.grants);
        if let Some((store, found)) = store {
            registry.open_store(Arc::new(store), found);
            tracing::info!(
                earlier_sessions = registry.stored_count(),
                next_id = registry.next_id(),
                "sessions of earlier runs reloaded"
            );
        } else {
            tracing::info!("no state directory: ended sessions are not kept across restarts");
        }
        let registry = Arc::new(registry);
        tracing::info!(socket = %path.display(), gid, "listening");
        Ok(Daemon {
            listener,
            socket: path,
            remote,
            registry,
            policy: Arc::new(policy),
            facts,
        })
    }

    /// Serve until `shutdown` resolves; running sessions are stopped first so
    /// their watchers get a final update, and with a state directory, serving
    /// ends once every ended session is saved there.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Error> {
        let registry = self.registry.clone();
        let (done, stopping) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            shutdown.await;
            tracing::info!("shutting down: ending sessions");
            registry.stop_all().await;
            if tokio::time::timeout(SAVE_TIMEOUT, registry.wait_saved())
                .await
                .is_err()
            {
                tracing::warn!(
                    "sessions still being saved after {SAVE_TIMEOUT:?}: stopping without them"
                );
            }
            let _ = done.send(true);
        });
        let stopped = move || {
            let mut stopping = stopping.clone();
            async move {
                let _ = stopping.wait_for(|s| *s).await;
            }
        };
        let service = rpc::Service::new(self.registry, self.policy, self.facts);
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(self.listener);
        let local = tonic::transport::Server::builder()
            .add_service(ProfilerServer::new(service.clone()))
            .serve_with_incoming_shutdown(incoming, stopped());
        let result = match self.remote {
            None => local.await,
            Some((listener, tls)) => {
                let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
                let remote = tonic::transport::Server::builder()
                    .tls_config(tls)?
                    .add_service(ProfilerServer::new(service))
                    .serve_with_incoming_shutdown(incoming, stopped());
                tokio::try_join!(local, remote).map(|_| ())
            }
        };
        let _ = std::fs::remove_file(&self.socket);
        result.map_err(Error::from)
    }
}
