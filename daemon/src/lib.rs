//! profd: the sampling profiler daemon (library; `main.rs` is a thin wrapper).
use std::future::Future;
use std::path::PathBuf;

/// Validated daemon settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Unix socket the gRPC API is served on.
    pub socket: PathBuf,
}

/// Daemon errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Other(String),
}

/// A daemon whose socket is bound and ready to accept clients.
pub struct Daemon {}

impl Daemon {
    /// Probe the kernel and bind the socket; clients may connect once this returns.
    pub async fn bind(_config: Config) -> Result<Daemon, Error> {
        todo!()
    }
    /// Serve until `shutdown` resolves; running sessions are stopped first.
    pub async fn serve(self, _shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), Error> {
        todo!()
    }
}
