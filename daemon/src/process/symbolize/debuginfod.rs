//! Split debug files fetched from debuginfod servers by build id, on a
//! thread of their own: the symbolizer asks for a build id without waiting
//! ([`Fetcher::want`]) and takes the ids whose files arrived
//! ([`Fetcher::take_arrived`]); nothing here runs on the sample path or on
//! the symbolizer's thread. Files go to an on-disk cache laid out as a
//! debug directory (`<cache>/.build-id/xx/rest.debug`), written under a
//! temporary name and renamed once checked to be an ELF file with DWARF or
//! symbols and the build id asked for; the cache is kept within its bytes,
//! the files used longest ago (by modification time, which a use sets)
//! going first. Each server is asked in turn; failures are remembered, a
//! build id asked again only after a backoff, and a server that did not
//! answer skipped for a while.
use crate::process::maps::build_id_hex as hex;
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

/// The cache's directory in the state directory.
pub const CACHE_DIR: &str = "debuginfod";
/// How long a server has to connect, to answer, and between two reads of
/// a file, unless set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The cache's bound in MiB unless set.
pub const DEFAULT_CACHE_MIB: u64 = 1024;
/// Requests made at once (each for another build id).
const AT_ONCE: usize = 4;
/// Build ids waiting for a request at most; more are asked for later.
const QUEUE: usize = 256;
/// Wait before a build id whose request failed is asked for again,
/// doubled at each failure up to [`MAX_BACKOFF`]; also how long a server
/// that did not answer is skipped, doubled likewise.
const BACKOFF: Duration = Duration::from_secs(30);
const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// Wait before a build id no server had is asked for again.
const NOT_FOUND_AGAIN: Duration = Duration::from_secs(3600);
/// Wait before a build id whose file arrived is asked for again: until
/// the symbolizer has taken it (within a second), its binary still counts
/// as lacking one; later, the file may have left the cache.
const ARRIVED_AGAIN: Duration = Duration::from_secs(60);
/// Build ids whose outcome is remembered at most.
const MAX_REMEMBERED: usize = 4096;

/// The settings: servers (none: off), timeout and the cache's bound.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Base URLs, asked in this order.
    pub urls: Vec<String>,
    pub timeout: Duration,
    pub cache_bytes: u64,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            urls: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            cache_bytes: DEFAULT_CACHE_MIB << 20,
        }
    }
}

/// The URLs of `DEBUGINFOD_URLS` as elfutils reads it: separated by white
/// space; those that are not http or https URLs are left out.
pub fn urls_in(text: &str) -> Vec<String> {
    text.split_whitespace()
        .filter(|u| is_url(u))
        .map(str::to_string)
        .collect()
}

/// Whether `text` is an http or https URL with a host.
pub fn is_url(text: &str) -> bool {
    reqwest::Url::parse(text)
        .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
}

/// The figures, as `info` and `/metrics` show them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Status {
    pub urls: Vec<String>,
    pub timeout: Duration,
    pub cache_dir: PathBuf,
    pub cache_limit_bytes: u64,
    /// Bytes of the files in the cache now.
    pub cache_bytes: u64,
    /// Requests answered with the file asked for.
    pub fetched: u64,
    /// Requests answered 404.
    pub not_found: u64,
    /// Requests that failed: no connection, no answer in time, another
    /// HTTP status, a transfer cut or stalled, a file over the cache.
    pub failed: u64,
    /// Requests answered with something else than the file asked for.
    pub garbage: u64,
    /// What the last failure was.
    pub last_error: String,
}

#[derive(Default)]
struct Counters {
    fetched: AtomicU64,
    not_found: AtomicU64,
    failed: AtomicU64,
    garbage: AtomicU64,
    cache_bytes: AtomicU64,
}

/// What is known of a build id asked for.
#[derive(Debug, Clone, Copy)]
enum Asked {
    /// Queued or being fetched; `failures` before.
    Pending { failures: u32 },
    /// Not fetched: asked again from `again`.
    Missing { again: Instant, failures: u32 },
}

struct Shared {
    settings: Settings,
    cache_dir: PathBuf,
    counters: Counters,
    asked: Mutex<HashMap<Vec<u8>, Asked>>,
    arrived: Mutex<Vec<Vec<u8>>>,
    last_error: Mutex<String>,
    /// Servers that did not answer: skipped until the instant, and the
    /// wait set then.
    down: Mutex<HashMap<String, (Instant, Duration)>>,
    /// Temporary files made so far (their names).
    temps: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The handle of the fetching thread: cheap to clone. The thread ends
/// when every handle is dropped.
#[derive(Clone)]
pub struct Fetcher {
    shared: Arc<Shared>,
    queue: tokio::sync::mpsc::Sender<Vec<u8>>,
}

/// Where the debug file of `id` goes in the cache at `dir` (ids of two
/// bytes or more).
fn cached_path(dir: &Path, id: &[u8]) -> Option<PathBuf> {
    let hex = hex(id);
    (id.len() >= 2).then(|| {
        dir.join(".build-id")
            .join(&hex[..2])
            .join(format!("{}.debug", &hex[2..]))
    })
}

impl Fetcher {
    /// Start fetching from `settings.urls` into the cache at `cache_dir`
    /// (created, mode 0700); Err when the directory cannot be made.
    pub fn start(settings: Settings, cache_dir: PathBuf) -> std::io::Result<Fetcher> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(cache_dir.join(".build-id"))?;
        let (queue, requests) = tokio::sync::mpsc::channel(QUEUE);
        let shared = Arc::new(Shared {
            settings,
            cache_dir,
            counters: Counters::default(),
            asked: Mutex::default(),
            arrived: Mutex::default(),
            last_error: Mutex::default(),
            down: Mutex::default(),
            temps: AtomicU64::new(0),
        });
        let thread = shared.clone();
        std::thread::Builder::new()
            .name("profd-debuginfod".into())
            .spawn(move || {
                thread.tidy(None, true);
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                match runtime {
                    Ok(rt) => rt.block_on(run(thread, requests)),
                    Err(err) => tracing::error!(%err, "debuginfod: cannot start its runtime"),
                }
            })?;
        tracing::info!(urls = ?shared.settings.urls, cache = %shared.cache_dir.display(), "fetching debug files from debuginfod");
        Ok(Fetcher { shared, queue })
    }

    /// The cache directory: a debug directory for the symbolizer to search.
    pub fn cache_dir(&self) -> &Path {
        &self.shared.cache_dir
    }

    /// Ask for the debug file of build id `id`, without waiting: queued
    /// unless it is queued or being fetched already, or failed less than
    /// its backoff ago (or the queue is full: asked again later).
    pub fn want(&self, id: &[u8]) {
        if id.len() < 2 {
            return;
        }
        let now = Instant::now();
        let mut asked = lock(&self.shared.asked);
        let failures = match asked.get(id) {
            Some(Asked::Pending { .. }) => return,
            Some(Asked::Missing { again, .. }) if *again > now => return,
            Some(Asked::Missing { failures, .. }) => *failures,
            None => 0,
        };
        if self.queue.try_send(id.to_vec()).is_err() {
            return;
        }
        if asked.len() >= MAX_REMEMBERED {
            asked.retain(|_, a| match a {
                Asked::Pending { .. } => true,
                Asked::Missing { again, .. } => *again > now,
            });
        }
        if asked.len() >= MAX_REMEMBERED {
            asked.retain(|_, a| matches!(a, Asked::Pending { .. }));
        }
        asked.insert(id.to_vec(), Asked::Pending { failures });
    }

    /// The build ids whose debug files arrived since the last call.
    pub fn take_arrived(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *lock(&self.shared.arrived))
    }

    /// The debug file at `path` was used: when it is in the cache, it is
    /// marked so, and goes after those used longer ago.
    pub fn used(&self, path: &Path) {
        if path.starts_with(&self.shared.cache_dir) {
            if let Ok(f) = std::fs::File::open(path) {
                let _ = f.set_modified(SystemTime::now());
            }
        }
    }

    /// The settings and counters now.
    pub fn status(&self) -> Status {
        let s = &self.shared;
        let c = &s.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Status {
            urls: s.settings.urls.clone(),
            timeout: s.settings.timeout,
            cache_dir: s.cache_dir.clone(),
            cache_limit_bytes: s.settings.cache_bytes,
            cache_bytes: l(&c.cache_bytes),
            fetched: l(&c.fetched),
            not_found: l(&c.not_found),
            failed: l(&c.failed),
            garbage: l(&c.garbage),
            last_error: lock(&s.last_error).clone(),
        }
    }
}

/// The daemon's fetcher, for `info` and `/metrics`.
static PUBLISHED: Mutex<Option<Fetcher>> = Mutex::new(None);

/// Make `fetcher` the one [`status`] reports.
pub fn publish(fetcher: &Fetcher) {
    *lock(&PUBLISHED) = Some(fetcher.clone());
}

/// The daemon's fetcher's figures; None when it fetches nothing.
pub fn status() -> Option<Status> {
    lock(&PUBLISHED).as_ref().map(Fetcher::status)
}

/// Serve the requests, [`AT_ONCE`] at a time, until every handle is gone.
async fn run(shared: Arc<Shared>, mut requests: tokio::sync::mpsc::Receiver<Vec<u8>>) {
    let client = reqwest::Client::builder()
        .connect_timeout(shared.settings.timeout)
        .user_agent(concat!("profd/", env!("CARGO_PKG_VERSION")))
        .build();
    let client = match client {
        Ok(c) => c,
        Err(err) => {
            tracing::error!(%err, "debuginfod: cannot make an HTTP client");
            return;
        }
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
    let mut tasks = tokio::task::JoinSet::new();
    while let Some(id) = requests.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let (shared, client) = (shared.clone(), client.clone());
        tasks.spawn(async move {
            shared.fetch(&client, &id).await;
            drop(slot);
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
}

/// The outcome of one request.
enum Got {
    /// The file, checked, at its place in the cache.
    File,
    NotFound,
    /// Not the file asked for.
    Garbage(String),
    /// The request failed; true when the server did not answer at all.
    Failed(String, bool),
}

impl Shared {
    /// Ask each server in turn for `id`'s debug file, until one has it.
    async fn fetch(&self, client: &reqwest::Client, id: &[u8]) {
        let (mut failed, mut tried) = (false, false);
        for url in &self.settings.urls {
            let now = Instant::now();
            if lock(&self.down)
                .get(url)
                .is_some_and(|(until, _)| *until > now)
            {
                failed = true;
                continue;
            }
            tried = true;
            let got = self.get(client, url, id).await;
            let c = &self.counters;
            let counter = match &got {
                Got::File => &c.fetched,
                Got::NotFound => &c.not_found,
                Got::Garbage(_) => &c.garbage,
                Got::Failed(..) => &c.failed,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            match got {
                Got::Failed(why, true) => {
                    let mut down = lock(&self.down);
                    let wait = down
                        .get(url)
                        .map_or(BACKOFF, |(_, w)| (*w * 2).min(MAX_BACKOFF));
                    down.insert(url.clone(), (Instant::now() + wait, wait));
                    self.failed(id, why);
                    failed = true;
                    continue;
                }
                Got::Failed(why, false) | Got::Garbage(why) => {
                    self.failed(id, why);
                    failed = true;
                }
                Got::NotFound => {}
                Got::File => {
                    lock(&self.down).remove(url);
                    let again = Instant::now() + ARRIVED_AGAIN;
                    let arrived = Asked::Missing { again, failures: 0 };
                    lock(&self.asked).insert(id.to_vec(), arrived);
                    lock(&self.arrived).push(id.to_vec());
                    tracing::debug!(build_id = hex(id), %url, "debuginfod: debug file fetched");
                    return;
                }
            }
            lock(&self.down).remove(url);
        }
        let mut asked = lock(&self.asked);
        let failures = match asked.get(id) {
            Some(Asked::Pending { failures } | Asked::Missing { failures, .. }) => *failures,
            None => 0,
        };
        let (wait, failures) = match failed || !tried {
            true => (
                BACKOFF
                    .saturating_mul(1 << failures.min(12))
                    .min(MAX_BACKOFF),
                failures + 1,
            ),
            false => (NOT_FOUND_AGAIN, failures),
        };
        asked.insert(
            id.to_vec(),
            Asked::Missing {
                again: Instant::now() + wait,
                failures,
            },
        );
    }

    fn failed(&self, id: &[u8], why: String) {
        tracing::debug!(build_id = hex(id), %why, "debuginfod: no debug file");
        *lock(&self.last_error) = why;
    }

    /// `GET <url>/buildid/<hex>/debuginfo` into the cache.
    async fn get(&self, client: &reqwest::Client, url: &str, id: &[u8]) -> Got {
        let timeout = self.settings.timeout;
        let Some(dest) = cached_path(&self.cache_dir, id) else {
            return Got::NotFound;
        };
        let base = url.trim_end_matches('/');
        let request = format!("{base}/buildid/{}/debuginfo", hex(id));
        let mut answer = match tokio::time::timeout(timeout, client.get(&request).send()).await {
            Err(_) => return Got::Failed(format!("{base}: no answer within {timeout:?}"), true),
            Ok(Err(err)) => {
                let down = err.is_connect() || err.is_timeout();
                return Got::Failed(format!("{base}: {}", error_chain(&err)), down);
            }
            Ok(Ok(answer)) => answer,
        };
        match answer.status() {
            reqwest::StatusCode::NOT_FOUND => return Got::NotFound,
            s if !s.is_success() => return Got::Failed(format!("{base}: HTTP {s}"), false),
            _ => {}
        }
        let limit = self.settings.cache_bytes;
        if answer.content_length().is_some_and(|n| n > limit) {
            return Got::Failed(format!("{base}: a file larger than the cache"), false);
        }
        let n = self.temps.fetch_add(1, Ordering::Relaxed);
        let mut name = dest.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".part-{}-{n}", std::process::id()));
        let temp = dest.with_file_name(name);
        let made = dest.parent().map_or(Ok(()), |dir| {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
        });
        let file = made.and_then(|()| {
            std::fs::File::options()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&temp)
        });
        let mut file = match file {
            Ok(f) => f,
            Err(err) => {
                return Got::Failed(format!("cannot write {}: {err}", temp.display()), false)
            }
        };
        let mut size = 0u64;
        let failure = loop {
            match tokio::time::timeout(timeout, answer.chunk()).await {
                Err(_) => break Some(format!("{base}: the transfer stalled for {timeout:?}")),
                Ok(Err(err)) => break Some(format!("{base}: {}", error_chain(&err))),
                Ok(Ok(None)) => break None,
                Ok(Ok(Some(bytes))) => {
                    size += bytes.len() as u64;
                    if size > limit {
                        break Some(format!("{base}: a file larger than the cache"));
                    }
                    if let Err(err) = file.write_all(&bytes) {
                        break Some(format!("cannot write {}: {err}", temp.display()));
                    }
                }
            }
        };
        drop(file);
        if let Some(why) = failure {
            let _ = std::fs::remove_file(&temp);
            return Got::Failed(why, false);
        }
        let checked = std::fs::File::open(&temp)
            .ok()
            .and_then(|f| crate::process::maps::Sections::debug_elf(&f));
        let problem = match checked {
            None => Some("not an ELF file with DWARF or symbols".to_string()),
            Some(Some(got)) if got == id => None,
            Some(Some(got)) => Some(format!("the file of build id {}", hex(&got))),
            Some(None) => Some("a file without a build id".to_string()),
        };
        if let Some(problem) = problem {
            let _ = std::fs::remove_file(&temp);
            return Got::Garbage(format!("{base}: {problem} for build id {}", hex(id)));
        }
        if let Err(err) = std::fs::rename(&temp, &dest) {
            let _ = std::fs::remove_file(&temp);
            return Got::Failed(format!("cannot write {}: {err}", dest.display()), false);
        }
        self.tidy(Some(&dest), false);
        Got::File
    }

    /// Keep the cache within its bytes, the files used longest ago going
    /// first (`keep` stays); with `start`, also drop the temporary files an
    /// earlier run left. Counts the bytes that stay.
    fn tidy(&self, keep: Option<&Path>, start: bool) {
        let mut files = Vec::new();
        let dirs = std::fs::read_dir(self.cache_dir.join(".build-id"))
            .into_iter()
            .flatten();
        for dir in dirs.flatten() {
            for entry in std::fs::read_dir(dir.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let path = entry.path();
                let Ok(meta) = entry.metadata() else { continue };
                if path.extension().is_some_and(|e| e == "debug") {
                    let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                    files.push((used, meta.len(), path));
                } else if start && meta.is_file() {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        files.sort();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        for (_, size, path) in files {
            if total <= self.settings.cache_bytes {
                break;
            }
            if Some(path.as_path()) == keep {
                continue;
            }
            if std::fs::remove_file(&path).is_ok() {
                tracing::debug!(path = %path.display(), "debuginfod: cached file let go of");
                total -= size;
            }
        }
        self.counters.cache_bytes.store(total, Ordering::Relaxed);
    }
}

/// An error with its causes (reqwest's own message is short).
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
#[path = "debuginfod_tests.rs"]
mod tests;
