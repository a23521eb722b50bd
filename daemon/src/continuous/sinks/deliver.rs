//! Delivery: every finished window goes into each sink's spool, and one
//! task per sink sends the oldest waiting window until the backend takes
//! it, backing off with jitter while it is down, dropping (and counting)
//! what it will never take.
use super::spool::{Figures, Key, Spool};
use super::SetupError;
use super::{clickhouse, otlp, pyroscope, DropReason, Failure, Secret, Sent};
use crate::config::sinks::{Kind, Settings};
use crate::continuous::decode::decode;
use crate::continuous::decode::mismatch;
use crate::continuous::files::now_ns;
use profd_common::api;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// First wait after a failed attempt; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A failing backend is logged at its first failure and every this many
/// retries after.
const LOG_EVERY: u64 = 10;

/// The backend a sink sends to.
enum Backend {
    ClickHouse(clickhouse::Sink),
    Pyroscope(pyroscope::Pyroscope),
    Otlp(Box<otlp::Otlp>),
}

impl Backend {
    fn new(s: &Settings) -> Result<Backend, SetupError> {
        match s {
            Settings::ClickHouse(s) => Ok(Backend::ClickHouse(clickhouse::Sink::new(s)?)),
            Settings::Pyroscope(s) => Ok(Backend::Pyroscope(pyroscope::Pyroscope::new(
                pyroscope::Config {
                    url: s.entry.common.url.clone(),
                    tenant: s.entry.tenant.clone(),
                    auth: s.auth.clone(),
                    labels: s.entry.labels.clone().into_iter().collect(),
                    timeout: s.entry.common.timeout,
                    ca: s.entry.common.ca_file.clone(),
                },
            )?)),
            Settings::Otlp(s) => Ok(Backend::Otlp(Box::new(otlp::Otlp::new(otlp::Config {
                url: s.entry.common.url.clone(),
                auth: s.auth.clone(),
                headers: s
                    .entry
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), Secret::given(v.clone())))
                    .collect(),
                timeout: s.entry.common.timeout,
                ca: s.entry.common.ca_file.clone(),
            })?))),
        }
    }

    /// `done`: requests of this window the backend took in earlier tries.
    async fn send(&self, w: &api::Window, done: &mut u64) -> Result<Sent, Failure> {
        match self {
            Backend::ClickHouse(s) => s.send(w).await,
            Backend::Pyroscope(s) => s.send(w, done).await,
            Backend::Otlp(s) => s.send(w).await,
        }
    }

    /// Windows older than this are refused by the backend (None: any age).
    fn max_age(&self) -> Option<Duration> {
        match self {
            Backend::ClickHouse(_) => None,
            Backend::Pyroscope(_) => Some(pyroscope::Pyroscope::MAX_AGE),
            Backend::Otlp(_) => None,
        }
    }

    /// A word on the protocol for `info` (a version, experimental or not).
    fn note(&self) -> String {
        match self {
            Backend::ClickHouse(_) => "HTTP interface, JSONEachRow".into(),
            Backend::Pyroscope(_) => "POST /ingest, pprof".into(),
            Backend::Otlp(_) => format!(
                "OTLP profiles {} over gRPC, experimental",
                otlp::PROTO_VERSION
            ),
        }
    }

    /// Check the backend now; Ok: what it said about itself.
    async fn probe(&self) -> Result<String, ProbeError> {
        Ok(match self {
            Backend::ClickHouse(s) => format!("ClickHouse {}", s.probe().await?),
            Backend::Pyroscope(s) => s.probe().await?,
            Backend::Otlp(s) => s.probe().await?,
        })
    }
}

/// Why a sink cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("sink {name}: {source}")]
    Setup {
        name: String,
        #[source]
        source: SetupError,
    },
    #[error("sink {name}: spool: {source}")]
    Spool {
        name: String,
        #[source]
        source: super::spool::SpoolError,
    },
    /// Opening a spool's task ended without answering.
    #[error("{0}")]
    Task(#[source] tokio::task::JoinError),
}

/// Why a sink's backend cannot be used, as a check of it now found.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Its settings make no backend.
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error(transparent)]
    ClickHouse(#[from] clickhouse::ProbeError),
    #[error(transparent)]
    Pyroscope(#[from] pyroscope::ProbeError),
    #[error(transparent)]
    Otlp(#[from] otlp::ProbeError),
}

/// A sink's figures since the daemon started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub windows_sent: u64,
    pub bytes_sent: u64,
    pub requests: u64,
    pub retries: u64,
    pub split: u64,
    pub truncated: u64,
    /// Profiles the backend turned away in a partial success.
    pub rejected: u64,
    /// Windows dropped, by reason.
    pub drops: BTreeMap<DropReason, u64>,
}

struct Sink {
    settings: Settings,
    backend: Backend,
    spool: Spool,
    wake: Notify,
    counts: Mutex<Counts>,
    last_error: Mutex<Option<String>>,
}

impl Sink {
    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn drop_counted(&self, reason: DropReason, n: u64) {
        if n > 0 {
            *self.counts().drops.entry(reason).or_default() += n;
        }
    }

    fn set_error(&self, e: Option<String>) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = e;
    }
}

/// The sinks of the daemon: cheap to clone.
#[derive(Clone, Default)]
pub struct Sinks {
    list: Arc<Vec<Arc<Sink>>>,
    stop: Option<Arc<watch::Sender<bool>>>,
}

/// One sink as `info` and the metrics show it.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub name: String,
    pub kind: Kind,
    pub url: String,
    pub note: String,
    pub counts: Counts,
    pub spool: Figures,
    pub spool_limit: u64,
    pub last_error: Option<String>,
}

impl Report {
    pub fn to_api(&self) -> api::SinkStatus {
        let c = &self.counts;
        api::SinkStatus {
            name: self.name.clone(),
            kind: self.kind.name().into(),
            url: self.url.clone(),
            protocol: self.note.clone(),
            windows_sent: c.windows_sent,
            bytes_sent: c.bytes_sent,
            requests: c.requests,
            retries: c.retries,
            drops: c
                .drops
                .iter()
                .map(|(reason, n)| api::SinkDrop {
                    reason: reason.to_string(),
                    windows: *n,
                })
                .collect(),
            spool_windows: self.spool.windows,
            spool_bytes: self.spool.bytes,
            spool_limit_bytes: self.spool_limit,
            oldest_unsent_age_ms: self
                .spool
                .oldest_end_ns
                .map_or(0, |end| now_ns().saturating_sub(end) / 1_000_000),
            last_error: self.last_error.clone().unwrap_or_default(),
            split: c.split,
            truncated: c.truncated,
            rejected: c.rejected,
        }
    }
}

impl crate::continuous::history::Outlet for Sinks {
    fn offer(&self, w: &api::Window, gz: &[u8]) {
        Sinks::offer(self, w, gz);
    }
}

impl Sinks {
    /// Open each sink's spool (under `state`/spool/NAME, or in memory) and
    /// start its delivery. Err names the sink that cannot start.
    pub async fn start(settings: Vec<Settings>, state: Option<&Path>) -> Result<Sinks, StartError> {
        if settings.is_empty() {
            return Ok(Sinks::default());
        }
        let (stop, stopped) = watch::channel(false);
        let mut list = Vec::new();
        for s in settings {
            let name = s.common().name.clone();
            let backend = Backend::new(&s).map_err(|source| StartError::Setup {
                name: name.clone(),
                source,
            })?;
            let dir = state.map(|d| s.common().spool_dir(d));
            let limit = s.common().spool_bytes;
            let d = dir.clone();
            let spool = tokio::task::spawn_blocking(move || Spool::open(d, limit))
                .await
                .map_err(StartError::Task)?
                .map_err(|source| StartError::Spool {
                    name: name.clone(),
                    source,
                })?;
            let waiting = spool.figures();
            tracing::info!(
                sink = %name,
                kind = s.kind().name(),
                url = %s.common().url,
                spool = %dir.map_or("in memory".into(), |d| d.display().to_string()),
                waiting = waiting.windows,
                "sink ready"
            );
            let sink = Arc::new(Sink {
                settings: s,
                backend,
                spool,
                wake: Notify::new(),
                counts: Mutex::new(Counts::default()),
                last_error: Mutex::new(None),
            });
            sink.drop_counted(DropReason::Damaged, sink.spool.take_damaged());
            list.push(sink.clone());
            tokio::spawn(deliver(sink, stopped.clone()));
        }
        Ok(Sinks {
            list: Arc::new(list),
            stop: Some(Arc::new(stop)),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Spool a finished window for every sink (blocking: call it off the
    /// async runtime). A full spool drops its oldest windows, counted.
    pub fn offer(&self, w: &api::Window, gz: &[u8]) {
        for sink in self.list.iter() {
            match sink.spool.push(w.start_unix_ns, w.end_unix_ns, &w.id, gz) {
                Ok(dropped) => sink.drop_counted(DropReason::SpoolFull, dropped),
                Err(err) => {
                    tracing::warn!(sink = %sink.settings.common().name, %err, "cannot spool a window: dropped");
                    sink.drop_counted(DropReason::SpoolUnwritable, 1);
                }
            }
            sink.wake.notify_one();
        }
    }

    /// Stop delivering; what waits stays spooled.
    pub fn stop(&self) {
        if let Some(stop) = &self.stop {
            let _ = stop.send(true);
        }
    }

    pub fn reports(&self) -> Vec<Report> {
        self.list
            .iter()
            .map(|s| Report {
                name: s.settings.common().name.clone(),
                kind: s.settings.kind(),
                url: s.settings.common().url.clone(),
                note: s.backend.note(),
                counts: s.counts().clone(),
                spool: s.spool.figures(),
                spool_limit: s.settings.common().spool_bytes,
                last_error: s
                    .last_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone(),
            })
            .collect()
    }
}

/// Check each sink's backend now (`--check-config`): the sink's name and
/// what its backend said, or why it cannot be used.
pub async fn probe(settings: &[Settings]) -> Vec<(String, Result<String, ProbeError>)> {
    let mut out = Vec::new();
    for s in settings {
        let said = match Backend::new(s) {
            Ok(b) => b.probe().await,
            Err(e) => Err(e.into()),
        };
        out.push((s.common().name.clone(), said));
    }
    out
}

/// The wait before retry `n` (0-based): doubling from a second to
/// [`MAX_BACKOFF`], a random half of it taken off so that daemons that
/// lost the same backend do not come back in step.
fn backoff(n: u64) -> Duration {
    let full = FIRST_BACKOFF
        .saturating_mul(1u32 << n.min(16))
        .min(MAX_BACKOFF);
    let mut b = [0u8; 8];
    let r = match rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()) {
        Ok(_) => u64::from_le_bytes(b),
        Err(_) => now_ns(),
    };
    let half = full.as_millis() as u64 / 2;
    Duration::from_millis(half + r % (half + 1))
}

/// Send the spool's windows, oldest first, until `stop`.
async fn deliver(sink: Arc<Sink>, mut stop: watch::Receiver<bool>) {
    let name = sink.settings.common().name.clone();
    match sink.backend.probe().await {
        Ok(said) => tracing::info!(sink = %name, backend = %said, "sink connected"),
        Err(err) => {
            tracing::error!(sink = %name, %err, "the sink's backend cannot be used now: windows wait in the spool");
            sink.set_error(Some(err.to_string()));
        }
    }
    // Failed tries of the current window; requests of it already taken.
    let (mut failures, mut done) = (0u64, 0u64);
    let mut current: Option<Key> = None;
    loop {
        if *stop.borrow() {
            return;
        }
        let Some((key, end_ns)) = sink.spool.oldest() else {
            tokio::select! {
                _ = sink.wake.notified() => {}
                _ = stop.changed() => {}
            }
            continue;
        };
        if current.as_ref() != Some(&key) {
            current = Some(key.clone());
            done = 0;
        }
        if let Some(max) = sink.backend.max_age() {
            if now_ns().saturating_sub(end_ns) > max.as_nanos() as u64 {
                tracing::warn!(sink = %name, id = %key.1, "window older than the backend takes: dropped");
                sink.drop_counted(DropReason::TooOld, 1);
                sink.spool.remove(&key);
                continue;
            }
        }
        let window = {
            let spool_key = key.clone();
            let s = sink.clone();
            let read = tokio::task::spawn_blocking(move || {
                let w = s
                    .spool
                    .read(&spool_key)
                    .map_err(|e| e.to_string())
                    .and_then(|b| decode(&b).map_err(|e| e.to_string()))?;
                mismatch(spool_key.0, end_ns, &spool_key.1, &w)
                    .map(|()| w)
                    .map_err(|e| e.to_string())
            })
            .await;
            match read {
                Ok(Ok(w)) => w,
                Ok(Err(err)) => {
                    tracing::warn!(sink = %name, id = %key.1, %err, "cannot read a spooled window: dropped");
                    sink.drop_counted(DropReason::Damaged, 1);
                    sink.spool.remove(&key);
                    continue;
                }
                Err(err) => {
                    tracing::error!(sink = %name, %err, "reading a spooled window failed");
                    return;
                }
            }
        };
        let sent = tokio::select! {
            sent = sink.backend.send(&window, &mut done) => sent,
            _ = stop.changed() => return,
        };
        match sent {
            Ok(sent) => {
                {
                    let mut c = sink.counts();
                    c.windows_sent += 1;
                    c.bytes_sent += sent.bytes;
                    c.requests += sent.requests;
                    c.split += sent.split;
                    c.truncated += sent.truncated;
                    c.rejected += sent.rejected;
                }
                sink.spool.remove(&key);
                if failures > 0 {
                    tracing::info!(sink = %name, retries = failures, "the backend takes windows again");
                    sink.set_error(None);
                }
                failures = 0;
            }
            Err(Failure::Drop { reason, detail }) => {
                tracing::warn!(sink = %name, id = %key.1, %reason, %detail, "the backend refused a window: dropped");
                sink.drop_counted(reason, 1);
                sink.set_error(Some(format!("{reason}: {detail}")));
                sink.spool.remove(&key);
                failures = 0;
            }
            Err(Failure::Retry(why)) => {
                sink.counts().retries += 1;
                if failures.is_multiple_of(LOG_EVERY) {
                    tracing::warn!(sink = %name, retries = failures, waiting = sink.spool.figures().windows, error = %why, "cannot deliver: windows wait in the spool");
                }
                sink.set_error(Some(why));
                let wait = backoff(failures);
                failures += 1;
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.changed() => return,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_doubling_with_jitter_up_to_a_cap() {
        for n in 0..40 {
            let full = FIRST_BACKOFF
                .saturating_mul(1 << n.min(16))
                .min(MAX_BACKOFF);
            let w = backoff(n);
            assert!(w >= full / 2 && w <= full, "{n}: {w:?} of {full:?}");
        }
        let waits: std::collections::HashSet<Duration> = (0..20).map(|_| backoff(10)).collect();
        assert!(waits.len() > 1, "no jitter: {waits:?}");
    }
}
