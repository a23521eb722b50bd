//! What is wrong with a command line that clap parsed: one variant per
//! mistake, each message saying what to change (clap prints those of its
//! value parsers; the commands return the others as the client's error).
use std::path::PathBuf;

/// The message for a `--connect` URL that is not https.
pub const PLAINTEXT_REFUSED: &str = "plaintext connections are refused: use https://HOST:PORT \
     (profd's TCP listener speaks only TLS)";

/// The message for `profctl run` with `--connect`.
pub const RUN_REFUSED: &str = "profctl run starts COMMAND on this machine; with --connect, \
     start it on the daemon's machine and use profctl attach PID";

/// A value or a combination of flags profctl cannot act on.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum ArgError {
    /// `--token-file` over the Unix socket.
    #[error(
        "--token-file applies only with --connect \
         (over the Unix socket the daemon knows you by your user id)"
    )]
    TokenFileWithoutConnect,
    /// A `--tls-*` flag over the Unix socket.
    #[error("{0} applies only with --connect")]
    TlsWithoutConnect(&'static str),
    /// `profctl run` with `--connect`.
    #[error("{RUN_REFUSED}")]
    RunRemote,
    /// `--connect` without `--tls-ca`.
    #[error(
        "--connect {0} needs --tls-ca FILE: the PEM certificate of the CA \
         that signed the daemon's certificate"
    )]
    NoCa(String),
    /// `--tls-cert` alone.
    #[error("--tls-cert needs --tls-key (its private key)")]
    CertWithoutKey,
    /// `--tls-key` alone.
    #[error("--tls-key needs --tls-cert (its certificate)")]
    KeyWithoutCert,
    /// An empty `--tls-domain`.
    #[error("--tls-domain is empty")]
    EmptyDomain,
    /// A `--connect` URL that is not https.
    #[error("{PLAINTEXT_REFUSED}")]
    Plaintext,
    /// A `--connect` value without `https://`.
    #[error("--connect `{0}` has no scheme; use https://{0}")]
    NoScheme(String),
    /// A `--connect` value that does not parse as a URL.
    #[error("--connect `{0}` is not a URL; use https://HOST:PORT")]
    NotAUrl(String),
    /// A `--connect` URL without a host.
    #[error("--connect `{0}` has no host; use https://HOST:PORT")]
    NoHost(String),
    /// A `--connect` URL with a user name.
    #[error("--connect `{0}`: a user name has no meaning here; use https://HOST:PORT")]
    UserName(String),
    /// A `--connect` URL with a path.
    #[error("--connect `{0}`: a path has no meaning here; use https://HOST:PORT")]
    UrlPath(String),
    /// `-o -` or an empty `-o`.
    #[error("-o takes a file name (the table or JSON goes to stdout)")]
    OutputNotAFile,
    /// An `-o` file whose name says no encoding, without `--output-format`.
    #[error(
        "cannot tell the encoding of {} from its name: give --output-format \
         (pprof, folded, svg, speedscope, json, firefox) or a name ending in \
         .pb.gz, .folded, .svg, .speedscope.json or .json",
        .0.display()
    )]
    UnknownEncoding(PathBuf),
    /// A diff side FROM..TO that ends before it starts.
    #[error("`{0}` ends before it starts: give FROM..TO with FROM first")]
    DiffBackwards(String),
    /// A diff side that is no session, file or range.
    #[error("`{0}` is neither a session id, nor a file, nor FROM..TO of the continuous history")]
    NotADiffSide(String),
    /// `--bottom-up` without a tree view.
    #[error("--bottom-up goes with --tree or --hot-path")]
    BottomUpAlone,
    /// `--callers` and `--callees` naming two functions.
    #[error(
        "--callers {0} and --callees {1} name different functions; \
         give the same one to both for the whole view"
    )]
    CallersCalleesDiffer(String, String),
    /// `-o` without `--format`.
    #[error("-o FILE goes with --format (a view is printed on stdout)")]
    OutputWithoutFormat,
    /// `--format` with a view option.
    #[error(
        "--format writes the whole profile: leave out the view options (--tree, --callers, ...)"
    )]
    FormatWithView,
    /// `--list` with a view option.
    #[error("--list prints the windows and services: leave out the view options")]
    ListWithView,
    /// A range whose end is before its start (after now minus --since, or
    /// after --from).
    #[error("the range starts after it ends: give a --to after {0}")]
    RangeBackwards(&'static str),
    /// A `--since` that is not a duration.
    #[error("`{0}` is not a duration ({1}): use e.g. 30s, 15m, 2h or 1d")]
    NotADuration(String, #[source] humantime::DurationError),
    /// A zero `--since`.
    #[error("`{0}` is no time at all: give a positive duration")]
    ZeroDuration(String),
    /// Unix seconds past what a time can hold.
    #[error("`{0}` is too large for Unix seconds")]
    UnixTooLarge(String),
    /// A time that is neither RFC 3339, Unix seconds nor a time ago.
    #[error(
        "`{0}` is not a time ({1}): use RFC 3339 in UTC (2026-12-02T09:00:00Z), Unix seconds, \
         or a time ago (6m, now-6m)"
    )]
    NotATime(String, #[source] humantime::TimestampError),
    /// `now` followed by something other than `-DURATION`.
    #[error("`{0}` is not a time: after `now`, only `-DURATION` may follow (now-6m, now-2h)")]
    NotAgo(String),
    /// An address or offset that is not a number.
    #[error("`{0}` is not a number (decimal, or hex with 0x)")]
    NotANumber(String),
    /// A percentage that is not a number.
    #[error("`{0}` is not a percentage")]
    NotAPercentage(String),
    /// A percentage outside 0-100.
    #[error("`{0}` is not within 0-100")]
    PercentageRange(String),
    /// Seconds that are not a number.
    #[error("`{0}` is not a number of seconds")]
    NotSeconds(String),
    /// Zero, negative or infinite seconds.
    #[error("`{0}` must be a positive number of seconds")]
    NotPositiveSeconds(String),
    /// Seconds past what a duration can hold.
    #[error("`{0}` seconds is too long")]
    TooManySeconds(String),
    /// A duration under a millisecond.
    #[error("`{0}` is shorter than a millisecond")]
    UnderMillisecond(String),
    /// An interval under the daemon's minimum.
    #[error("`{0}` is shorter than the daemon's minimum, 0.05 s")]
    UnderMinInterval(String),
}
