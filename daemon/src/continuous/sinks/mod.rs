//! Where continuous windows go besides the local history: the backends
//! fleets already run, the form each takes them in, and what every sink
//! shares (credentials, the HTTP client, how an answer is judged).
pub mod clickhouse;
pub mod deliver;
pub mod otlp;
pub mod pyroscope;
pub mod spool;
pub mod stack_hash;

pub use crate::config::sink_files::{Auth, Secret};
pub use deliver::Sinks;

use std::time::Duration;

impl Auth {
    /// `request` with this authorization.
    pub fn apply(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self {
            Auth::None => request,
            Auth::Basic { user, password } => request.basic_auth(user, Some(password.expose())),
            Auth::Bearer(token) => request.bearer_auth(token.expose()),
        }
    }
}

/// What sending one window took.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// Bytes of request bodies, as sent.
    pub bytes: u64,
    /// Requests the backend accepted.
    pub requests: u64,
    /// Profiles split in parts to stay within the backend's limits.
    pub split: u64,
    /// Stacks cut short to the backend's depth limit.
    pub truncated: u64,
    /// Profiles the backend took the request of but rejected (an OTLP
    /// partial success).
    pub rejected: u64,
}

/// Why a window was not delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The backend is down, slow or asks to wait (connection error,
    /// timeout, 408, 429, 5xx): the window stays spooled and is retried.
    Retry(String),
    /// The backend will never take it (another 4xx, a rejected payload):
    /// the window is dropped and counted under `reason`.
    Drop { reason: DropReason, detail: String },
}

/// Why a sink dropped windows. Its label (`spool_full`, `http_400`,
/// `grpc_invalid_argument`, ...) is stable: the metrics, `profctl info`
/// and the log count drops by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DropReason {
    /// The spool was over its byte limit: the oldest windows went.
    SpoolFull,
    /// The window could not be written to the spool.
    SpoolUnwritable,
    /// Older than the backend takes.
    TooOld,
    /// A spooled window that could not be read back.
    Damaged,
    /// The backend answered with this HTTP status (not 408, 429 or 5xx).
    Http(u16),
    /// The backend answered with this gRPC status code.
    Grpc(i32),
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DropReason::SpoolFull => f.write_str("spool_full"),
            DropReason::SpoolUnwritable => f.write_str("spool_unwritable"),
            DropReason::TooOld => f.write_str("too_old"),
            DropReason::Damaged => f.write_str("damaged"),
            DropReason::Http(status) => write!(f, "http_{status}"),
            DropReason::Grpc(code) => {
                let name = format!("{:?}", tonic::Code::from_i32(*code));
                let mut snake = String::from("grpc");
                for c in name.chars() {
                    if c.is_ascii_uppercase() {
                        snake.push('_');
                    }
                    snake.push(c.to_ascii_lowercase());
                }
                f.write_str(&snake)
            }
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Retry(why) => write!(f, "will retry: {why}"),
            Failure::Drop { reason, detail } => write!(f, "dropped ({reason}): {detail}"),
        }
    }
}

/// Most bytes of an error answer kept for the log.
const MAX_DETAIL: usize = 512;

/// An HTTP answer judged: Ok for 2xx; 408, 429 and 5xx are retried; any
/// other status drops the window, counted as `http_<status>`.
pub fn judge(status: reqwest::StatusCode, body: &str) -> Result<(), Failure> {
    if status.is_success() {
        return Ok(());
    }
    let mut detail = format!("{status}: {}", body.trim());
    if detail.len() > MAX_DETAIL {
        let mut end = MAX_DETAIL;
        while !detail.is_char_boundary(end) {
            end -= 1;
        }
        detail.truncate(end);
        detail.push('…');
    }
    let code = status.as_u16();
    if code == 408 || code == 429 || status.is_server_error() {
        Err(Failure::Retry(detail))
    } else {
        Err(Failure::Drop {
            reason: DropReason::Http(code),
            detail,
        })
    }
}

/// A request that got no answer (refused, reset, timed out): retried.
pub fn unanswered(err: reqwest::Error) -> Failure {
    Failure::Retry(error_chain(err))
}

/// An HTTP client error with its causes (`error sending request: client
/// error (Connect): tcp connect error: Connection refused`), without the
/// URL (which may carry what a user put there).
pub fn error_chain(err: reqwest::Error) -> String {
    with_causes(&err.without_url())
}

/// `err` with its causes, each once.
pub fn with_causes(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut cause = std::error::Error::source(err);
    while let Some(c) = cause {
        let shown = c.to_string();
        if !text.contains(&shown) {
            text.push_str(": ");
            text.push_str(&shown);
        }
        cause = c.source();
    }
    text
}

/// Why a sink cannot be set up from its settings.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A setting that is wrong: the message names it and what to change.
    #[error("{0}")]
    Setting(String),
    /// The CA file.
    #[error(transparent)]
    Ca(#[from] crate::config::sink_files::FileError),
    #[error("cannot make an HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

impl From<String> for SetupError {
    fn from(message: String) -> SetupError {
        SetupError::Setting(message)
    }
}

impl From<&str> for SetupError {
    fn from(message: &str) -> SetupError {
        SetupError::Setting(message.into())
    }
}

/// The HTTP client of one sink: each request bounded by `timeout`; TLS
/// through rustls, trusting the system's roots and `ca` (a PEM file) too.
pub fn http_client(
    timeout: Duration,
    ca: Option<&std::path::Path>,
) -> Result<reqwest::Client, SetupError> {
    let mut builder = reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .use_rustls_tls();
    if let Some(ca) = ca {
        for cert in crate::config::sink_files::ca_certificates(ca)? {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder.build().map_err(SetupError::Client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_judged_by_status() {
        let s = |c| reqwest::StatusCode::from_u16(c).unwrap();
        assert_eq!(judge(s(200), ""), Ok(()));
        assert_eq!(judge(s(204), ""), Ok(()));
        for retried in [408, 429, 500, 502, 503] {
            assert!(
                matches!(judge(s(retried), "x"), Err(Failure::Retry(_))),
                "{retried}"
            );
        }
        match judge(s(400), "bad name") {
            Err(Failure::Drop { reason, detail }) => {
                assert_eq!(reason.to_string(), "http_400");
                assert!(detail.contains("bad name"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        let long = "é".repeat(1000);
        match judge(s(422), &long) {
            Err(Failure::Drop { detail, .. }) => assert!(detail.len() <= MAX_DETAIL + 3),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn secrets_come_from_files_and_are_never_printed() {
        let dir = std::env::temp_dir().join(format!("profd-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "s3cret\n").unwrap();
        let secret = Secret::read(&file).unwrap();
        assert_eq!(secret.expose(), "s3cret");
        assert!(!format!("{secret:?}").contains("s3cret"));
        let auth = Auth::Bearer(secret);
        assert!(!format!("{auth:?}").contains("s3cret"));
        std::fs::write(&file, "\n").unwrap();
        assert!(Secret::read(&file)
            .unwrap_err()
            .to_string()
            .contains("is empty"));
        let missing = Secret::read(&dir.join("none")).unwrap_err().to_string();
        assert!(missing.contains("none: No such file"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
