//! Why the settings cannot be used: the file cannot be read, or the
//! settings merged from it and the flags break a rule between keys. Each
//! names the setting (`FILE: key`, or `--flag` when a flag gave it).
use super::schema::ParseError;
use super::sinks::EntryError;
use super::values::show_duration;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why the settings file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read the config file {}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Parse(#[from] ParseError),
}

/// A rule between settings that the merged settings break. `setting` is
/// `FILE: key`, or `--flag` when a flag gave it (or there is no file).
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("{setting}: false {does}, but {other} is set too: remove one of them")]
    OffWith {
        setting: String,
        /// What the key's false does.
        does: &'static str,
        /// The first other key of its section the file sets.
        other: &'static str,
    },
    #[error(
        "{setting}: {} is shorter than one window (continuous.window: {}s), so no window would be kept: make it at least {}",
        show_duration(*.age),
        .window.as_secs(),
        show_duration(*.window)
    )]
    HistoryShorterThanWindow {
        setting: String,
        age: Duration,
        window: Duration,
    },
    #[error(
        "{setting}: {} is not a whole number of windows (continuous.window: {}s): make it a multiple of it",
        show_duration(*.period),
        .window.as_secs()
    )]
    PeriodNotWholeWindows {
        setting: String,
        period: Duration,
        window: Duration,
    },
    #[error("continuous.select: {0}")]
    Selector(crate::continuous::service::SelectorError),
    #[error(transparent)]
    Grant(crate::serve::auth::GrantError),
    #[error(transparent)]
    KernelFrames(crate::serve::kernel_view::UnknownSetting),
    #[error("log level: {0}")]
    LogLevel(#[source] tracing::metadata::ParseLevelError),
    #[error("{}sink: a sink sends continuous windows, but continuous profiling is off: set enabled = true in [continuous] (or give --continuous)", in_file(.file))]
    SinksWithoutContinuous { file: Option<PathBuf> },
    /// A file a sink entry names cannot be used.
    #[error("{}sink[{index}]{}: {}", in_file(.file), .source.key.as_ref().map(|k| format!(".{k}")).unwrap_or_default(), .source.message)]
    Sink {
        file: Option<PathBuf>,
        index: usize,
        #[source]
        source: Box<EntryError>,
    },
    #[error("{}: {missing}: missing: remote.listen needs remote.tls_cert, remote.tls_key and remote.tokens (a tokens file `profd token` writes)", .file.display())]
    ListenWithoutInFile {
        file: PathBuf,
        missing: &'static str,
    },
    #[error("--listen needs {missing}: the TLS listener needs --tls-cert, --tls-key and --tokens (or their keys under [remote] in the config file)")]
    ListenWithout { missing: String },
    #[error("{setting}: is set but the TLS listener is not: add {add} ADDR:PORT, or remove it")]
    NoListener {
        setting: String,
        /// `--listen`, or `remote.listen =` for the file.
        add: &'static str,
    },
}

/// `FILE: `, or nothing without a file.
fn in_file(file: &Option<PathBuf>) -> String {
    file.as_deref()
        .map(|f: &Path| format!("{}: ", f.display()))
        .unwrap_or_default()
}
