//! The request error: why a request could not be served, in the terms of
//! what the caller should change; `rpc` maps it to a gRPC status.
use crate::os::perf::PerfError;

/// Why a request could not be served; mapped to a gRPC status by `rpc`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    PermissionDenied(String),
    #[error("{0}")]
    ResourceExhausted(String),
    #[error("{0}")]
    Internal(String),
}

impl From<PerfError> for Error {
    fn from(e: PerfError) -> Error {
        match e {
            PerfError::Permission { .. } | PerfError::Unsupported { .. } => {
                Error::FailedPrecondition(e.to_string())
            }
            PerfError::Io { ref source, .. } if crate::os::fds::exhausted(source) => {
                Error::ResourceExhausted(crate::os::fds::message("opening perf events", source))
            }
            PerfError::Io { .. } => Error::Internal(e.to_string()),
        }
    }
}
