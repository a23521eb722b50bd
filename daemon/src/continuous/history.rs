//! Local history: windows kept in the state directory (or in memory without
//! one), bounded by bytes and age, reloaded at start, and the merged profile
//! of a query over them.
//!
//! Each window is one file, `<start ns>-<end ns>-<id>.window.gz` (gzipped
//! protobuf `profd.v1.Window`, mode 0600, written atomically), so the index
//! is rebuilt at start from the directory listing alone (names checked as
//! [`super::files`] says, each window id once). A file that cannot be read
//! back, or holds another window than its name says, is renamed
//! `….damaged`, dropped from the index and counted.
use super::decode::{decode, decode_from, visit_from, Check, DecodeError, Visit};
use super::decode::{mismatch, Mismatch};
use super::encode::Encoded;
#[cfg(test)]
use super::files::random_id;
use super::files::valid_id;
pub(crate) use super::files::{file_name, parse_name, window_files};
use super::files::{now_ns, sort_out, DirError};
use super::merge::Merge;
pub use super::merge::{Merged, Want};
use super::Settings;
use crate::request_error::Error;
use crate::sessions::store::atomic;
use profd_common::api;
use prost::Message;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::UNIX_EPOCH;

/// What a window file that could not be read is renamed with.
const DAMAGED: &str = ".damaged";
/// Most bytes of window summaries in one listing (clients take replies of
/// 4 MiB by default); the oldest windows of a wider range are left out.
const MAX_LISTED_BYTES: usize = 2 << 20;

/// Why the history cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Its directory cannot be made, made private or listed.
    #[error("{}: {source}", dir.display())]
    Dir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Listing(#[from] DirError),
    #[error("reading the continuous history: {0}")]
    Task(#[source] tokio::task::JoinError),
}

/// Why a window of the history could not be read back (it is moved aside).
#[derive(Debug, thiserror::Error)]
enum Unreadable {
    #[error(transparent)]
    Open(std::io::Error),
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error(transparent)]
    Mismatch(#[from] Mismatch),
}

/// The continuous history: cheap to clone, shared by the sampler (which
/// adds windows) and the rpc service (which lists and queries them).
#[derive(Clone)]
pub struct History {
    inner: Arc<Inner>,
}

/// Where finished windows go besides the history (the sinks): offered
/// each window, with its file's bytes, as the history keeps it.
pub trait Outlet: Send + Sync {
    fn offer(&self, w: &api::Window, gz: &[u8]);
}

struct Inner {
    /// None: windows are kept in memory, under the same limits.
    dir: Option<PathBuf>,
    /// Where each window added is sent too.
    outlet: std::sync::OnceLock<Arc<dyn Outlet>>,
    settings: Settings,
    host: String,
    state: Mutex<State>,
}

/// A window's place in the index: its start (ns) and id; oldest first.
type Key = (u64, String);

#[derive(Default)]
struct State {
    windows: BTreeMap<Key, Kept>,
    /// The ids of `windows`: a window is kept once, whatever its start.
    ids: HashSet<String>,
    bytes: u64,
    dropped_bytes: u64,
    dropped_age: u64,
    damaged: u64,
    /// The end (ns) of the last window cut, kept or not.
    cut_until_ns: u64,
}

/// A window of the index.
struct Kept {
    end_ns: u64,
    bytes: u64,
    /// Known once the window was added or read in this run.
    summary: Option<Arc<api::WindowSummary>>,
    /// Without a state directory: the bytes a file would hold.
    data: Option<Arc<Vec<u8>>>,
    /// Read whole once without fault (or written by this run): a query
    /// reads it once, merging as it goes.
    checked: bool,
}

/// The history's figures (for metrics and `profctl info`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Windows and bytes kept now.
    pub windows: u64,
    pub bytes: u64,
    /// Windows dropped since the daemon started, by retention on bytes and
    /// on age.
    pub dropped_bytes: u64,
    pub dropped_age: u64,
    /// Windows that could not be written or read back.
    pub damaged: u64,
}

/// The host's name (`uname -n`), as windows carry it.
pub fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// The kernel's release (`uname -r`), as windows carry it.
pub fn kernel_release() -> String {
    rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned()
}

/// A window's summary: its span, totals and services (most samples first).
fn summarize(w: &api::Window, bytes: u64) -> api::WindowSummary {
    let mut services: Vec<api::ServiceSamples> = w
        .services
        .iter()
        .map(|s| api::ServiceSamples {
            service: s.service.clone(),
            samples: s.samples,
        })
        .collect();
    sort_services(&mut services);
    api::WindowSummary {
        id: w.id.clone(),
        start_unix_ns: w.start_unix_ns,
        end_unix_ns: w.end_unix_ns,
        totals: w.totals,
        services,
        bytes,
        cgroup_unreadable: w.cgroup_unreadable,
        processes_exited: w.processes_exited,
        binaries_replaced: w.binaries_replaced,
        frequency_hz: w.frequency_hz,
        configured_frequency_hz: w.configured_frequency_hz,
        memory_level: w.memory_level,
        schedule: w.schedule,
    }
}

fn sort_services(s: &mut [api::ServiceSamples]) {
    s.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.service.cmp(&b.service)));
}

/// The time range of a listing or query in ns, checked: windows that end
/// after `from` and start before `to`.
fn range(from_ms: u64, to_ms: u64, field: &str) -> Result<(u64, u64), Error> {
    if to_ms != 0 && from_ms > to_ms {
        return Err(Error::InvalidArgument(format!(
            "{field}from_unix_ms {from_ms} is after {field}to_unix_ms {to_ms}: give a from time before the to time (0 = the oldest window, and now)"
        )));
    }
    let to_ns = match to_ms {
        0 => u64::MAX,
        ms => ms.saturating_mul(1_000_000),
    };
    Ok((from_ms.saturating_mul(1_000_000), to_ns))
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere leaves the index consistent (every change is one
        // step): keep using it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn path(&self, key: &Key, end_ns: u64) -> Option<PathBuf> {
        Some(self.dir.as_ref()?.join(file_name(key.0, end_ns, &key.1)))
    }

    /// Drop windows past the limits, oldest first: those that ended more
    /// than the retention age before `now`, then while the bytes kept are
    /// above the limit. Their files are removed.
    fn retain(&self, now: u64) {
        let age = self.settings.retention_age.as_nanos() as u64;
        let cutoff = now.saturating_sub(age);
        let mut gone = Vec::new();
        {
            let mut st = self.lock();
            while let Some(entry) = st.windows.first_entry() {
                if entry.get().end_ns > cutoff {
                    break;
                }
                let (key, kept) = entry.remove_entry();
                st.bytes -= kept.bytes;
                st.dropped_age += 1;
                st.ids.remove(&key.1);
                gone.push((key, kept.end_ns));
            }
            while st.bytes > self.settings.retention_bytes {
                let Some((key, kept)) = st.windows.pop_first() else {
                    break;
                };
                st.bytes -= kept.bytes;
                st.ids.remove(&key.1);
                st.dropped_bytes += 1;
                gone.push((key, kept.end_ns));
            }
        }
        for (key, end_ns) in gone {
            if let Some(path) = self.path(&key, end_ns) {
                if let Err(err) = std::fs::remove_file(&path) {
                    tracing::warn!(path = %path.display(), %err, "cannot remove a window past retention");
                }
            }
        }
    }

    fn add(&self, e: Encoded) {
        let Encoded { head: w, gz: bytes } = e;
        if !valid_id(&w.id) {
            tracing::warn!(id = %w.id, "a window with an id unfit for a file name: not kept");
            self.lock().damaged += 1;
            return;
        }
        if w.end_unix_ns < w.start_unix_ns {
            tracing::warn!(id = %w.id, "a window ending before it starts: not kept");
            self.lock().damaged += 1;
            return;
        }
        if let Some(outlet) = self.outlet.get() {
            outlet.offer(&w, &bytes);
        }
        let key = (w.start_unix_ns, w.id.clone());
        if self.lock().ids.contains(&w.id) {
            tracing::debug!(id = %w.id, "window added twice: kept once");
            return;
        }
        let mut summary = summarize(&w, 0);
        let name = file_name(w.start_unix_ns, w.end_unix_ns, &w.id);
        let end_ns = w.end_unix_ns;
        if let Some(dir) = &self.dir {
            if let Err(err) = atomic::write_atomic(dir, &name, &bytes, atomic::Existing::Keep) {
                tracing::warn!(path = %dir.join(&name).display(), %err, "cannot write a window: not kept");
                self.lock().damaged += 1;
                return;
            }
        }
        let size = bytes.len() as u64;
        summary.bytes = size;
        let kept = Kept {
            end_ns,
            bytes: size,
            summary: Some(Arc::new(summary)),
            data: self.dir.is_none().then(|| Arc::new(bytes)),
            checked: true,
        };
        {
            let mut st = self.lock();
            st.bytes += size;
            st.ids.insert(key.1.clone());
            st.windows.insert(key, kept);
        }
        self.retain(now_ns());
    }

    /// The window `key` read back (a piece at a time, within what a window
    /// can hold); None when it is gone (dropped meanwhile) or damaged, or is
    /// not the window its name says (then moved aside and counted).
    fn read(&self, key: &Key) -> Option<api::Window> {
        let (end_ns, data) = {
            let st = self.lock();
            let kept = st.windows.get(key)?;
            (kept.end_ns, kept.data.clone())
        };
        let decoded = match (data, self.path(key, end_ns)) {
            (Some(data), _) => decode(&data).map_err(Unreadable::from),
            (None, Some(path)) => match open(&path)? {
                Ok(file) => decode_from(file).map_err(Unreadable::from),
                Err(err) => Err(err),
            },
            (None, None) => return None,
        };
        let checked = decoded.and_then(|w| {
            mismatch(key.0, end_ns, &key.1, &w)?;
            Ok(w)
        });
        match checked {
            Ok(w) => Some(w),
            Err(reason) => {
                self.damaged(key, &reason);
                // What was decoded before the refusal is given back.
                crate::os::trim_heap();
                None
            }
        }
    }

    /// Hand window `key` to `v` a stack at a time (checking that it is the
    /// window its name says). None: it is gone (dropped meanwhile), or
    /// cannot be opened now; Some(Err): it could not be read (what was
    /// handed before stays handed).
    fn visit(&self, key: &Key, v: &mut impl Visit) -> Option<Result<(), Unreadable>> {
        struct Named<'a, V> {
            key: &'a Key,
            end_ns: u64,
            v: &'a mut V,
        }
        impl<V: Visit> Visit for Named<'_, V> {
            fn head(&mut self, w: &api::Window) -> Result<bool, Mismatch> {
                mismatch(self.key.0, self.end_ns, &self.key.1, w)?;
                self.v.head(w)
            }
            fn service(&mut self, s: api::ServiceWindow) {
                self.v.service(s)
            }
            fn stack(&mut self, s: api::WindowStack) {
                self.v.stack(s)
            }
            fn service_end(&mut self) {
                self.v.service_end()
            }
        }
        let (end_ns, data) = {
            let st = self.lock();
            let kept = st.windows.get(key)?;
            (kept.end_ns, kept.data.clone())
        };
        let mut named = Named { key, end_ns, v };
        Some(match (data, self.path(key, end_ns)) {
            (Some(data), _) => visit_from(&data[..], &mut named).map_err(Unreadable::from),
            (None, Some(path)) => {
                open(&path)?.and_then(|f| visit_from(f, &mut named).map_err(Unreadable::from))
            }
            (None, None) => return None,
        })
    }

    /// Merge window `key` into `merge`: true when it was. A window not read
    /// whole before in this run is read twice, checked first, so that a
    /// damaged one adds nothing (moved aside and counted); a window that
    /// fails after it was checked fails the query.
    fn merge_window(&self, key: &Key, merge: &mut Merge<'_>) -> Result<bool, Error> {
        if merge.has(&key.1) {
            return Ok(false);
        }
        let checked = match self.lock().windows.get(key) {
            Some(kept) => kept.checked,
            None => return Ok(false),
        };
        if !checked {
            match self.visit(key, &mut Check) {
                None => return Ok(false),
                Some(Err(reason)) => {
                    self.damaged(key, &reason);
                    return Ok(false);
                }
                Some(Ok(())) => {
                    if let Some(kept) = self.lock().windows.get_mut(key) {
                        kept.checked = true;
                    }
                }
            }
        }
        match self.visit(key, merge) {
            None => Ok(false),
            Some(Ok(())) => Ok(true),
            Some(Err(reason)) => {
                self.damaged(key, &reason);
                Err(Error::Internal(format!(
                    "window {} of the history was damaged while this query read it ({reason}): it was moved aside; ask again to be answered without it",
                    key.1
                )))
            }
        }
    }

    /// Take a window that cannot be read out of the index, rename its file
    /// aside and count it.
    fn damaged(&self, key: &Key, reason: &Unreadable) {
        let reason = reason.to_string();
        let reason = reason.as_str();
        let kept = {
            let mut st = self.lock();
            let Some(kept) = st.windows.remove(key) else {
                // Dropped by retention while it was read.
                return;
            };
            st.bytes -= kept.bytes;
            st.damaged += 1;
            st.ids.remove(&key.1);
            kept
        };
        match self.path(key, kept.end_ns) {
            Some(path) => {
                tracing::warn!(path = %path.display(), reason, "damaged window file: moved aside");
                let mut aside = path.clone().into_os_string();
                aside.push(DAMAGED);
                if let Err(err) = std::fs::rename(&path, &aside) {
                    tracing::warn!(path = %path.display(), %err, "cannot move a damaged window aside");
                }
            }
            None => tracing::warn!(id = %key.1, reason, "damaged window in memory: dropped"),
        }
    }

    /// Keys of the windows overlapping [from, to), oldest first.
    fn keys(&self, from_ns: u64, to_ns: u64) -> Vec<Key> {
        self.lock()
            .windows
            .range(..(to_ns, String::new()))
            .filter(|(_, k)| k.end_ns > from_ns)
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Why a query over [from_ns, to_ns) has nothing to answer: the range
    /// the history holds, to choose another.
    fn nothing_in(&self, from_ns: u64, to_ns: u64) -> String {
        let at = |ns: u64| {
            let t = UNIX_EPOCH + std::time::Duration::from_nanos(ns);
            humantime::format_rfc3339_seconds(t).to_string()
        };
        let to = match to_ns {
            u64::MAX => "now".to_string(),
            ns => at(ns),
        };
        let asked = format!("no windows in the history from {} to {to}", at(from_ns));
        let st = self.lock();
        let (Some((first, _)), Some((_, last))) =
            (st.windows.first_key_value(), st.windows.last_key_value())
        else {
            return format!(
                "{asked}: it holds none (continuous profiling writes one each window once \
                 it runs: see profctl info)"
            );
        };
        format!(
            "{asked}: it holds {} from {} to {} (see profctl query --list)",
            st.windows.len(),
            at(first.0),
            at(last.end_ns)
        )
    }

    fn summary(&self, key: &Key) -> Option<Arc<api::WindowSummary>> {
        if let Some(s) = self.lock().windows.get(key)?.summary.clone() {
            return Some(s);
        }
        let w = self.read(key)?;
        let mut st = self.lock();
        let kept = st.windows.get_mut(key)?;
        let s = Arc::new(summarize(&w, kept.bytes));
        kept.summary = Some(s.clone());
        // Read whole without fault: a query needs not check it again.
        kept.checked = true;
        Some(s)
    }

    fn stats(&self) -> Stats {
        let st = self.lock();
        Stats {
            windows: st.windows.len() as u64,
            bytes: st.bytes,
            dropped_bytes: st.dropped_bytes,
            dropped_age: st.dropped_age,
            damaged: st.damaged,
        }
    }

    fn list(&self, from_ns: u64, to_ns: u64) -> api::ListWindowsResponse {
        let mut windows = Vec::new();
        let mut services: HashMap<String, u64> = HashMap::new();
        let (mut listed_bytes, mut left_out) = (0, 0);
        // Newest first, so that those left out are the oldest.
        for key in self.keys(from_ns, to_ns).iter().rev() {
            let Some(s) = self.summary(key) else {
                continue;
            };
            for svc in &s.services {
                *services.entry(svc.service.clone()).or_default() += svc.samples;
            }
            listed_bytes += s.encoded_len();
            if listed_bytes > MAX_LISTED_BYTES {
                left_out += 1;
            } else {
                windows.push(api::WindowSummary::clone(&s));
            }
        }
        windows.reverse();
        let mut services: Vec<api::ServiceSamples> = services
            .into_iter()
            .map(|(service, samples)| api::ServiceSamples { service, samples })
            .collect();
        sort_services(&mut services);
        api::ListWindowsResponse {
            windows,
            services,
            windows_left_out: left_out,
            ..self.overview()
        }
    }

    /// The settings and figures of a listing, without windows or services.
    fn overview(&self) -> api::ListWindowsResponse {
        let stats = self.stats();
        let s = &self.settings;
        api::ListWindowsResponse {
            enabled: true,
            frequency_hz: s.frequency_hz,
            window_seconds: s.window.as_secs() as u32,
            retention_bytes: s.retention_bytes,
            retention_s: s.retention_age.as_secs(),
            host: self.host.clone(),
            windows_kept: stats.windows,
            bytes_kept: stats.bytes,
            dropped_bytes: stats.dropped_bytes,
            dropped_age: stats.dropped_age,
            damaged: stats.damaged,
            windows: Vec::new(),
            services: Vec::new(),
            windows_left_out: 0,
            cut_until_unix_ns: self.lock().cut_until_ns,
            schedule: s
                .schedule
                .map(|sc| sc.of_window(&self.host, std::time::SystemTime::now())),
        }
    }
}

/// Window file `path` opened; None when it cannot be now (out of
/// descriptors: the file is not at fault), logged.
fn open(path: &Path) -> Option<Result<std::fs::File, Unreadable>> {
    match std::fs::File::open(path) {
        Ok(file) => Some(Ok(file)),
        Err(err) if crate::os::fds::exhausted(&err) => {
            tracing::warn!(path = %path.display(), %err, "cannot open a window now: left out of the answer");
            None
        }
        Err(err) => Some(Err(Unreadable::Open(err))),
    }
}

/// Rebuild the index from the directory's names (and sizes); leftovers of
/// interrupted writes, and damaged windows moved aside before `cutoff` (ns),
/// are removed, other files left alone. Files whose names fail the checks,
/// and copies of a window under other names, are moved aside and counted.
fn scan(dir: &Path, st: &mut State, cutoff: u64) -> Result<(), DirError> {
    let found = window_files(dir, |name, path| {
        // A damaged window that ended before the cutoff, or any damaged
        // file moved aside before it: a rename sets the status change time,
        // which no name or content of the file can move (a name dated in
        // the future would keep it forever).
        let ended = name
            .strip_suffix(DAMAGED)
            .and_then(parse_name)
            .is_some_and(|(_, end, _)| end <= cutoff);
        let old_damage = ended
            || name.ends_with(DAMAGED)
                && std::fs::symlink_metadata(path).is_ok_and(|m| {
                    use std::os::unix::fs::MetadataExt;
                    let aside_ns = m.ctime().saturating_mul(1_000_000_000) + m.ctime_nsec();
                    u64::try_from(aside_ns).is_ok_and(|t| t <= cutoff)
                });
        if old_damage {
            let _ = std::fs::remove_file(path);
        } else if !name.ends_with(DAMAGED) {
            tracing::debug!(name, "not a window file: left alone");
        }
    })?;
    let (keep, aside) = sort_out(dir, found, now_ns());
    for (f, reason) in aside {
        let path = dir.join(&f.name);
        tracing::warn!(path = %path.display(), reason, "window file not trusted: moved aside");
        st.damaged += 1;
        let mut damaged = path.clone().into_os_string();
        damaged.push(DAMAGED);
        if let Err(err) = std::fs::rename(&path, &damaged) {
            tracing::warn!(path = %path.display(), %err, "cannot move a window file aside");
        }
    }
    for f in keep {
        st.bytes += f.bytes;
        st.ids.insert(f.id.clone());
        st.windows.insert(
            (f.start, f.id),
            Kept {
                end_ns: f.end,
                bytes: f.bytes,
                summary: None,
                data: None,
                checked: false,
            },
        );
    }
    Ok(())
}

impl History {
    /// Open the history: in `dir` (created 0700; the windows found there are
    /// indexed by name and age retention applied), or in memory when None.
    /// Blocking: call it off the async runtime.
    pub fn open(dir: Option<PathBuf>, settings: &Settings) -> Result<History, OpenError> {
        let mut state = State::default();
        if let Some(dir) = &dir {
            let cannot = |source| OpenError::Dir {
                dir: dir.clone(),
                source,
            };
            std::fs::create_dir_all(dir).map_err(cannot)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(cannot)?;
            let age = settings.retention_age.as_nanos() as u64;
            scan(dir, &mut state, now_ns().saturating_sub(age))?;
        }
        let inner = Inner {
            dir,
            outlet: std::sync::OnceLock::new(),
            settings: settings.clone(),
            host: settings.host.clone(),
            state: Mutex::new(state),
        };
        inner.retain(now_ns());
        Ok(History {
            inner: Arc::new(inner),
        })
    }

    /// [`History::open`] off the async runtime, logging what was found: the
    /// daemon's start.
    pub async fn start(dir: Option<PathBuf>, settings: &Settings) -> Result<History, OpenError> {
        let (d, s) = (dir.clone(), settings.clone());
        let history = tokio::task::spawn_blocking(move || History::open(d, &s))
            .await
            .map_err(OpenError::Task)??;
        let stats = history.stats();
        match &dir {
            Some(dir) => tracing::info!(
                dir = %dir.display(),
                windows = stats.windows,
                bytes = stats.bytes,
                dropped_age = stats.dropped_age,
                "continuous history reloaded"
            ),
            None => tracing::info!("no state directory: the continuous history is kept in memory"),
        }
        Ok(history)
    }

    /// Send every window added from now on to `outlet` as well (once).
    pub fn attach(&self, outlet: Arc<dyn Outlet>) {
        let _ = self.inner.outlet.set(outlet);
    }

    /// Keep a finished window (compressed, written atomically) and spool it
    /// for each sink, then drop
    /// the oldest windows past the limits. A window that cannot be written
    /// is counted as damaged and logged; a window already kept (same start
    /// and id) is kept once.
    pub async fn add(&self, window: Encoded) {
        let inner = self.inner.clone();
        if let Err(err) = tokio::task::spawn_blocking(move || inner.add(window)).await {
            tracing::error!(%err, "adding a window to the history failed");
        }
    }

    /// Note that every sample before `end_ns` is in the history: the
    /// window ending there was kept (or had no samples).
    pub fn cut_until(&self, end_ns: u64) {
        let mut st = self.inner.lock();
        st.cut_until_ns = st.cut_until_ns.max(end_ns);
    }

    /// The settings, the history's figures and the windows and services
    /// overlapping [from, to) (Unix ms; 0 = the oldest, and now).
    pub async fn list(&self, from_ms: u64, to_ms: u64) -> Result<api::ListWindowsResponse, Error> {
        let (from, to) = range(from_ms, to_ms, "")?;
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.list(from, to))
            .await
            .map_err(|source| Error::Task {
                doing: "listing the history",
                source,
            })
    }

    /// The windows overlapping the query's range, of the services and
    /// processes it asks for, merged into one profile (its stacks, or only
    /// its function counts, as `want` says), with its synthetic session (id
    /// 0, pid 0, system-wide). The windows are read one at a time, a stack
    /// at a time.
    pub async fn query(&self, q: &api::Query, want: Want) -> Result<Merged, Error> {
        let (from, to) = range(q.from_unix_ms, q.to_unix_ms, "query.")?;
        if api::GroupBy::try_from(q.by).is_err() {
            return Err(Error::InvalidArgument(format!(
                "query.by {} is not a grouping: use 0 (none), 1 (service), 2 (process), 3 (host) or 4 (pod)",
                q.by
            )));
        }
        let inner = self.inner.clone();
        let q = q.clone();
        tokio::task::spawn_blocking(move || {
            let mut merge = Merge::new(&q, want);
            let mut read = 0;
            for key in inner.keys(from, to) {
                if inner.merge_window(&key, &mut merge)? {
                    read += 1;
                }
            }
            if read == 0 {
                return Err(Error::NotFound(inner.nothing_in(from, to)));
            }
            let answer = merge.finish(from, to);
            // The windows read, freed, are given back to the system.
            crate::os::trim_heap();
            answer
        })
        .await
        .map_err(|source| Error::Task {
            doing: "reading the history",
            source,
        })?
    }

    /// The settings and figures ListWindows gives, without windows or
    /// services (for Info).
    pub fn overview(&self) -> api::ListWindowsResponse {
        self.inner.overview()
    }

    /// Windows and bytes kept, and windows dropped and damaged.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// The host's name, as the listing gives it.
    pub fn host(&self) -> &str {
        &self.inner.host
    }
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
