//! profd: the sampling profiler daemon (library; `main.rs` is a thin wrapper).
//! `Daemon::bind` probes the kernel and binds the Unix socket; `serve` runs
//! the gRPC API until shutdown, ending every session cleanly.
#![deny(unsafe_code)]

pub mod maps;
#[allow(unsafe_code)]
pub mod perf;
pub mod registry;
pub mod rpc;
pub mod sampler;
pub mod session;
pub mod symbolize;
pub mod unwind;

use profd_common::api::profiler_server::ProfilerServer;
use std::future::Future;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::UnixListener;

/// Validated daemon settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Unix socket the gRPC API is served on.
    pub socket: PathBuf,
}

impl Config {
    /// Settings with defaults and the given socket path.
    pub fn new(socket: PathBuf) -> Config {
        Config { socket }
    }
}

/// Why the daemon cannot start or serve.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot use socket {path}: {reason}")]
    Socket { path: PathBuf, reason: String },
    #[error("cannot read the machine's CPUs: {0}")]
    Cpus(std::io::Error),
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// A daemon whose socket is bound and ready to accept clients.
pub struct Daemon {
    listener: UnixListener,
    socket: PathBuf,
    registry: Arc<registry::Registry>,
    facts: rpc::Facts,
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
        let source = Arc::new(sampler::Sampler::new(cpus));
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
        // Until callers are authorized per process, only root may connect.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| socket_error(&path, e))?;
        let registry = Arc::new(registry::Registry::new(source, symbolizer));
        tracing::info!(socket = %path.display(), "listening");
        Ok(Daemon {
            listener,
            socket: path,
            registry,
            facts,
        })
    }

    /// Serve until `shutdown` resolves; running sessions are stopped first so
    /// their watchers get a final update.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Error> {
        let registry = self.registry.clone();
        let shutdown = async move {
            shutdown.await;
            tracing::info!("shutting down: ending sessions");
            registry.stop_all().await;
        };
        let service = rpc::Service::new(self.registry, self.facts);
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(self.listener);
        let result = tonic::transport::Server::builder()
            .add_service(ProfilerServer::new(service))
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await;
        let _ = std::fs::remove_file(&self.socket);
        result.map_err(Error::from)
    }
}
