//! The client's error type: one variant per way a command can fail, each
//! rendering as one plain line (main.rs prefixes `profctl: `).
use std::io;
use std::path::PathBuf;

mod args;
mod fleet_rows;
mod layout;

pub use args::{ArgError, PLAINTEXT_REFUSED, RUN_REFUSED};
pub use fleet_rows::RowError;
pub use layout::LayoutError;

/// Everything a `profctl` command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The daemon answered with a gRPC error.
    #[error("{}", status_line(.0))]
    Rpc(#[from] tonic::Status),
    /// Nothing listens on the socket, and no private daemon was started:
    /// `why` says which and what to do.
    #[error(
        "no daemon is running at {}; start the service (`systemctl start profd`){}",
        .path.display(),
        .why.hint()
    )]
    NoDaemon {
        /// The socket that was tried.
        path: PathBuf,
        /// Why no private daemon stands in.
        why: NoPrivate,
    },
    /// The socket refused us: we are not in its group.
    #[error(
        "cannot connect to {}: permission denied; only root and members of the group {group} \
         may connect: ask an administrator to add you (`usermod --append --groups {group} \
         $USER`, then log in again), or run profctl as root",
        .path.display()
    )]
    NotInGroup {
        /// The socket that was tried.
        path: PathBuf,
        /// The socket's group.
        group: String,
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
    /// A remote daemon (`--connect`) could not be reached, or the TLS
    /// handshake with it failed.
    #[error("cannot connect to {url}: {reason}")]
    Remote {
        /// `https://HOST:PORT`.
        url: String,
        /// Why, with the TLS reason when there is one.
        reason: String,
    },
    /// The TLS settings (CA, client certificate and key, server name) are unusable.
    #[error("cannot set up TLS: {0}")]
    Tls(String),
    /// The in-process private daemon failed.
    #[cfg(feature = "private-daemon")]
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
    /// The command line asks for something impossible (clap could not tell).
    #[error(transparent)]
    Args(#[from] ArgError),
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
    /// A fleet backend (ClickHouse) could not answer.
    #[error("{0}")]
    Fleet(String),
    /// A fleet backend (ClickHouse) answered rows profctl cannot read.
    #[error(transparent)]
    FleetRows(#[from] RowError),
    /// The histogram's flags give no layout.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// The health service answered, with anything but SERVING.
    #[error("{0}")]
    Unhealthy(String),
    /// The session's profile could not be written to the daemon's state
    /// directory (the daemon holds it in memory; the message says how to
    /// keep a copy).
    #[error("{0}")]
    NotSaved(String),
}

/// Why no private daemon stood in for an absent one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoPrivate {
    /// Only commands that profile (attach, run, histogram) start one; the
    /// others need the daemon that holds sessions and history.
    NotProfiling,
    /// The command profiles, but only root may start one.
    NotRoot,
    /// This profctl is built without a private daemon.
    NotBuilt,
}

impl NoPrivate {
    /// The rest of the no-daemon line: what else can be done.
    fn hint(self) -> &'static str {
        match self {
            NoPrivate::NotProfiling => {
                "; only the commands that profile (attach, run, histogram) start a \
                 private daemon of their own"
            }
            NoPrivate::NotRoot => {
                ", or run profctl as root: it then starts a private daemon for this command"
            }
            NoPrivate::NotBuilt => {
                ", or point profctl at a running profd with --socket PATH or \
                 --connect https://HOST:PORT; this profctl is built without a private daemon"
            }
        }
    }
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
/// A status made on this side from a failed connection (which has a source
/// error) also gets the reason, e.g. the TLS alert the daemon sent.
pub fn status_line(status: &tonic::Status) -> String {
    use std::error::Error as _;
    let code = code_description(status.code());
    let mut message = status.message().trim().to_string();
    if let Some(source) = status.source() {
        let reason = error_chain(source);
        if message == "transport error" {
            message = reason;
        } else if !message.contains(&reason) {
            if !message.is_empty() {
                message.push_str(": ");
            }
            message.push_str(&reason);
        }
    }
    if message.is_empty() {
        code.to_string()
    } else {
        format!("{code}: {message}")
    }
}

/// An error and its sources as one line, leaving out the generic wrappers
/// ("transport error") and messages that merely repeat their source's.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut messages: Vec<String> = Vec::new();
    let mut next = Some(error);
    while let Some(e) = next {
        let message = e.to_string();
        next = e.source();
        if message.is_empty() || message == "transport error" {
            continue;
        }
        if let Some(last) = messages.last() {
            if last.contains(&message) {
                continue;
            }
            if message.contains(last.as_str()) {
                messages.pop();
            }
        }
        messages.push(message);
    }
    if messages.is_empty() {
        return error.to_string();
    }
    messages.join(": ")
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
#[path = "mod_tests.rs"]
mod tests;
