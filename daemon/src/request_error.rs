//! The request error: why a request could not be served, in the terms of
//! what the caller should change; `rpc` maps it to a gRPC status.
use crate::os::perf::PerfError;
use crate::sessions::store::IdError;
use std::io;

/// Why a request could not be served; mapped to a gRPC status by `rpc`
/// ([`Error::code`]).
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
    /// Perf events could not be opened: the caller's settings or the
    /// machine's (permission, no such event), or out of descriptors.
    #[error("{}", perf_message(.0))]
    Perf(#[from] PerfError),
    /// `doing` failed for want of file descriptors (the message says which
    /// limit to raise).
    #[error("{}", crate::os::fds::message(.doing, .source))]
    OutOfFds {
        doing: String,
        #[source]
        source: io::Error,
    },
    /// A system call the daemon needed failed.
    #[error("{doing}: {source}")]
    Io {
        doing: String,
        #[source]
        source: io::Error,
    },
    /// A blocking task of the daemon ended without answering.
    #[error("{doing}: {source}")]
    Task {
        doing: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
    /// No session id could be reserved.
    #[error(transparent)]
    SessionId(#[from] IdError),
    /// The session asked for has ended or never was.
    #[error(transparent)]
    Gone(#[from] Gone),
}

impl From<crate::os::fds::OutOfFds> for Error {
    fn from(e: crate::os::fds::OutOfFds) -> Error {
        Error::OutOfFds {
            doing: e.doing,
            source: e.source,
        }
    }
}

/// What a perf error says to the caller.
fn perf_message(e: &PerfError) -> String {
    match e {
        PerfError::Io { source, .. } if crate::os::fds::exhausted(source) => {
            crate::os::fds::message("opening perf events", source)
        }
        _ => e.to_string(),
    }
}

impl Error {
    /// The gRPC status code this error is answered with.
    pub fn code(&self) -> tonic::Code {
        use tonic::Code;
        match self {
            Error::InvalidArgument(_) => Code::InvalidArgument,
            Error::NotFound(_) | Error::Gone(_) => Code::NotFound,
            Error::FailedPrecondition(_) => Code::FailedPrecondition,
            Error::PermissionDenied(_) => Code::PermissionDenied,
            Error::ResourceExhausted(_) | Error::OutOfFds { .. } => Code::ResourceExhausted,
            Error::Internal(_) | Error::Io { .. } | Error::Task { .. } => Code::Internal,
            Error::Perf(PerfError::Permission { .. } | PerfError::Unsupported { .. }) => {
                Code::FailedPrecondition
            }
            Error::Perf(PerfError::Io { source, .. }) if crate::os::fds::exhausted(source) => {
                Code::ResourceExhausted
            }
            Error::Perf(PerfError::Io { .. }) => Code::Internal,
            Error::SessionId(IdError::Exhausted | IdError::Full { .. }) => Code::ResourceExhausted,
            Error::SessionId(IdError::Mark { .. }) => Code::Internal,
        }
    }
}

/// A session's actor task has gone (the daemon is shutting down).
#[derive(Debug, thiserror::Error)]
#[error("session {0} is no longer available")]
pub struct Gone(pub u64);
