//! The daemon's own error: why it cannot start (socket, CPUs, settings,
//! state directory, listeners) or why serving failed.
use std::net::SocketAddr;
use std::path::PathBuf;

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
    #[error("cannot build the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("metrics listener failed: {0}")]
    Metrics(std::io::Error),
}
