//! The client's error type: one variant per way a command can fail, each
//! rendering as one plain line (main.rs prefixes `profctl: `).
use std::io;
use std::path::PathBuf;

/// Everything a `profctl` command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The daemon answered with a gRPC error.
    #[error("{}", status_line(.0))]
    Rpc(#[from] tonic::Status),
    /// Nothing listens on the socket and we may not start a private daemon.
    #[error(
        "no daemon answers at {}; start the service (`systemctl start profd`) or run profctl as root",
        .path.display()
    )]
    NoDaemon {
        /// The socket that was tried.
        path: PathBuf,
    },
    /// The socket exists but connecting to it failed for another reason.
    #[error("cannot connect to {}: {source}", .path.display())]
    Connect {
        /// The socket that was tried.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The gRPC channel could not be set up over a connected socket.
    #[error("cannot talk to the daemon at {}: {source}", .path.display())]
    Transport {
        /// The socket that was tried.
        path: PathBuf,
        /// Why.
        source: tonic::transport::Error,
    },
    /// The in-process private daemon failed.
    #[error("private daemon: {0}")]
    Daemon(#[from] profd::Error),
    /// The command given to `profctl run` could not be started.
    #[error("cannot run {command}: {source}")]
    Spawn {
        /// The program name.
        command: String,
        /// Why.
        source: io::Error,
    },
    /// A local I/O operation failed (temp dir, waiting for a child, ...).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Why.
        source: io::Error,
    },
    /// Writing the output failed (a closed pipe is not reported: see `is_broken_pipe`).
    #[error("cannot write output: {0}")]
    Output(io::Error),
    /// The daemon sent something the API does not allow.
    #[error("unexpected reply from the daemon: {0}")]
    Protocol(String),
    /// The arguments ask for something impossible (clap could not tell).
    #[error("{0}")]
    Usage(String),
    /// A saved profile could not be read or decoded.
    #[error("cannot read {}: {reason}", .path.display())]
    BadFile {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A second Ctrl-C while waiting for a stopped session's last update.
    #[error("interrupted")]
    Interrupted,
}

impl Error {
    /// Writing to stdout failed because the reader went away (`profctl ... | head`):
    /// the command should exit 0 quietly.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, Error::Output(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// `<code description>: <message>`, e.g. `not found: no process with pid 99999`.
pub fn status_line(status: &tonic::Status) -> String {
    let code = code_description(status.code());
    let message = status.message().trim();
    if message.is_empty() {
        code.to_string()
    } else {
        format!("{code}: {message}")
    }
}

/// A gRPC code in plain lower-case words.
pub fn code_description(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::Unknown => "unknown error",
        Code::InvalidArgument => "invalid argument",
        Code::DeadlineExceeded => "deadline exceeded",
        Code::NotFound => "not found",
        Code::AlreadyExists => "already exists",
        Code::PermissionDenied => "permission denied",
        Code::ResourceExhausted => "resource exhausted",
        Code::FailedPrecondition => "failed precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out of range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal error",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_renders_code_and_message() {
        let e = Error::from(tonic::Status::not_found("no process with pid 99999"));
        assert_eq!(e.to_string(), "not found: no process with pid 99999");
        let e = Error::from(tonic::Status::unavailable(""));
        assert_eq!(e.to_string(), "unavailable");
    }

    #[test]
    fn broken_pipe_is_recognised() {
        let e = Error::Output(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(e.is_broken_pipe());
        let e = Error::Output(io::Error::from(io::ErrorKind::Other));
        assert!(!e.is_broken_pipe());
    }

    #[test]
    fn no_daemon_names_the_fix() {
        let e = Error::NoDaemon {
            path: "/run/profd/profd.sock".into(),
        };
        let s = e.to_string();
        assert!(s.contains("/run/profd/profd.sock"));
        assert!(s.contains("systemctl start profd"));
        assert!(s.contains("root"));
    }
}
