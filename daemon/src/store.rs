//! The state directory: every session that ends is kept there as
//! `<id>.pprof` (its gzip'd pprof export) and `<id>.json` (its summary), so
//! that finished sessions survive daemon restarts. Files are written
//! atomically (temp file, fsync, rename, fsync of the directory), the
//! metadata last: a session is stored once its `.json` exists. At start,
//! files that are corrupt, truncated or orphaned are moved to `corrupt/` with
//! a warning, never fatally. Retention limits (count, age, bytes) delete the
//! oldest sessions first, at start and after each save.
//!
//! Only the metadata is read at start (and the profile's size checked); a
//! profile is decoded, and its SHA-256 checked, when it is first asked for.
use profd_common::api;
use profd_common::export;
use profd_common::model::ResolvedProfile;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where sessions are kept unless `--state-dir` says otherwise.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/profd";
/// The version of the metadata files this daemon writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// The subdirectory corrupt files are moved to.
pub const CORRUPT_DIR: &str = "corrupt";
/// A metadata file larger than this is not one of ours.
const MAX_META_BYTES: u64 = 1 << 20;
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// How much the state directory keeps; the oldest sessions go first.
#[derive(Debug, Clone, PartialEq)]
pub struct Retention {
    /// Most sessions kept (`--retain-sessions`).
    pub max_sessions: usize,
    /// Sessions that ended longer ago are deleted (`--retain-days`).
    pub max_age: Duration,
    /// Most bytes of profiles and metadata kept (`--retain-bytes`).
    pub max_bytes: u64,
}

impl Default for Retention {
    fn default() -> Retention {
        Retention {
            max_sessions: 1000,
            max_age: Duration::from_secs(30 * 24 * 3600),
            max_bytes: 1 << 30,
        }
    }
}

/// Keep ended sessions in `dir` (`--state-dir`), within `retention`.
#[derive(Debug, Clone, PartialEq)]
pub struct Persist {
    pub dir: PathBuf,
    pub retention: Retention,
}

impl Persist {
    /// The default retention in `dir`.
    pub fn new(dir: PathBuf) -> Persist {
        Persist {
            dir,
            retention: Retention::default(),
        }
    }
}

/// A byte count with an optional binary suffix: `1073741824`, `512K`,
/// `100M`, `1G`, `2T` (also `KiB`, `MB`, ...: all powers of 1024).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).map_or(t, |i| &t[..i]);
    let suffix = t[digits.len()..].trim().to_ascii_uppercase();
    let shift = match suffix.trim_end_matches("IB").trim_end_matches('B') {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => {
            return Err(format!(
                "{s:?} is not a size: use bytes, or a number with K, M, G or T"
            ))
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size: use bytes, or a number with K, M, G or T"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// A session found in the state directory.
#[derive(Debug, Clone)]
pub struct Stored {
    /// Its summary, with `earlier_run` set.
    pub session: api::Session,
    profile: ProfileFile,
}

/// What was found in the state directory at start.
#[derive(Debug, Default)]
pub struct Found {
    /// The sessions kept, by id.
    pub sessions: Vec<Stored>,
    /// The largest session id seen in any file name (kept, moved aside or
    /// deleted): new sessions are numbered after it.
    pub max_id: u64,
}

/// Why a stored profile could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Its files are gone (deleted by retention in the meantime).
    #[error("its profile was deleted")]
    Gone,
    /// Its profile file does not hold what the metadata says.
    #[error("{0}")]
    Corrupt(String),
}

/// The profile file as the metadata describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ProfileFile {
    /// `<id>.pprof`, in the state directory.
    file: String,
    bytes: u64,
    /// Lowercase hex.
    sha256: String,
}

/// The metadata file `<id>.json`: the session's summary, field by field.
#[derive(Debug, Serialize, Deserialize)]
struct Meta {
    format: u32,
    id: u64,
    pid: u32,
    comm: String,
    /// The proto enum's name, e.g. `SESSION_STATE_STOPPED`.
    state: String,
    #[serde(default)]
    error: String,
    started_unix_ms: u64,
    ended_unix_ms: u64,
    duration_s: f64,
    duration_limit_ms: u64,
    /// The proto enum's name, e.g. `EVENT_CPU_CLOCK`.
    event: String,
    frequency_hz: u32,
    /// The proto enum's name, e.g. `UNWIND_DWARF`.
    unwind: String,
    stack_bytes: u32,
    owner_uid: u32,
    owner: String,
    #[serde(default)]
    children: bool,
    #[serde(default)]
    processes: Vec<MetaProcess>,
    /// The proto enum's name, e.g. `SCOPE_TARGET` (summaries written before
    /// sessions had a scope were all system-wide).
    #[serde(default = "system_wide")]
    scope: String,
    #[serde(default)]
    discarded_derived: bool,
    totals: MetaTotals,
    profile: ProfileFile,
}

fn system_wide() -> String {
    api::Scope::SystemWide.as_str_name().to_string()
}

/// One process of the session (`Session.processes`).
#[derive(Debug, Serialize, Deserialize)]
struct MetaProcess {
    pid: u32,
    ppid: u32,
    comm: String,
    samples: u64,
    exited: bool,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct MetaTotals {
    attributed: u64,
    discarded: u64,
    lost: u64,
    truncated: u64,
    unsymbolized: u64,
    overflowed: u64,
    #[serde(default)]
    throttled: u64,
}

impl Meta {
    fn new(s: &api::Session, profile: ProfileFile) -> Meta {
        let t = s.totals.unwrap_or_default();
        Meta {
            format: FORMAT_VERSION,
            id: s.id,
            pid: s.pid,
            comm: s.comm.clone(),
            state: s.state().as_str_name().to_string(),
            error: s.error.clone(),
            started_unix_ms: s.started_unix_ms,
            ended_unix_ms: ended_unix_ms(s),
            duration_s: s.duration_s,
            duration_limit_ms: s.duration_limit_ms,
            event: s.event().as_str_name().to_string(),
            frequency_hz: s.frequency_hz,
            unwind: s.unwind().as_str_name().to_string(),
            stack_bytes: s.stack_bytes,
            owner_uid: s.owner_uid,
            owner: s.owner.clone(),
            children: s.children,
            processes: s
                .processes
                .iter()
                .map(|p| MetaProcess {
                    pid: p.pid,
                    ppid: p.ppid,
                    comm: p.comm.clone(),
                    samples: p.samples,
                    exited: p.exited,
                })
                .collect(),
            scope: s.scope().as_str_name().to_string(),
            discarded_derived: s.discarded_derived,
            totals: MetaTotals {
                attributed: t.attributed,
                discarded: t.discarded,
                lost: t.lost,
                truncated: t.truncated,
                unsymbolized: t.unsymbolized,
                overflowed: t.overflowed,
                throttled: t.throttled,
            },
            profile,
        }
    }

    /// The summary it holds, checked.
    fn session(&self) -> Result<api::Session, String> {
        let state = api::SessionState::from_str_name(&self.state)
            .filter(|s| {
                !matches!(
                    s,
                    api::SessionState::Running | api::SessionState::Unspecified
                )
            })
            .ok_or_else(|| {
                format!(
                    "state {:?} is not the state of an ended session",
                    self.state
                )
            })?;
        let event = api::Event::from_str_name(&self.event)
            .ok_or_else(|| format!("unknown event {:?}", self.event))?;
        let unwind = api::Unwind::from_str_name(&self.unwind)
            .ok_or_else(|| format!("unknown unwind {:?}", self.unwind))?;
        let scope = api::Scope::from_str_name(&self.scope)
            .ok_or_else(|| format!("unknown scope {:?}", self.scope))?;
        if !self.duration_s.is_finite() || self.duration_s < 0.0 {
            return Err(format!("duration_s {} is not a duration", self.duration_s));
        }
        let t = &self.totals;
        Ok(api::Session {
            id: self.id,
            pid: self.pid,
            comm: self.comm.clone(),
            frequency_hz: self.frequency_hz,
            event: event as i32,
            state: state as i32,
            started_unix_ms: self.started_unix_ms,
            duration_s: self.duration_s,
            totals: Some(api::Totals {
                attributed: t.attributed,
                discarded: t.discarded,
                lost: t.lost,
                truncated: t.truncated,
                unsymbolized: t.unsymbolized,
                overflowed: t.overflowed,
                throttled: t.throttled,
            }),
            duration_limit_ms: self.duration_limit_ms,
            error: self.error.clone(),
            unwind: unwind as i32,
            stack_bytes: self.stack_bytes,
            owner_uid: self.owner_uid,
            owner: self.owner.clone(),
            earlier_run: true,
            scope: scope as i32,
            discarded_derived: self.discarded_derived,
            children: self.children,
            processes: self
                .processes
                .iter()
                .map(|p| api::ProcessSamples {
                    pid: p.pid,
                    ppid: p.ppid,
                    comm: p.comm.clone(),
                    samples: p.samples,
                    exited: p.exited,
                })
                .collect(),
        })
    }
}

/// When a session ended, from its start and length.
fn ended_unix_ms(s: &api::Session) -> u64 {
    s.started_unix_ms
        .saturating_add((s.duration_s.max(0.0) * 1000.0) as u64)
}

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A session on disk, for retention.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Entry {
    ended_unix_ms: u64,
    /// Both files.
    bytes: u64,
}

/// The sessions to delete so that `entries` are within `r` at `now_ms`:
/// those that ended before the age limit, then the oldest until the count
/// and byte limits hold. Oldest first.
fn victims(entries: &BTreeMap<u64, Entry>, r: &Retention, now_ms: u64) -> Vec<u64> {
    let mut order: Vec<(u64, u64, u64)> = entries
        .iter()
        .map(|(&id, e)| (e.ended_unix_ms, id, e.bytes))
        .collect();
    order.sort_unstable();
    let cutoff = now_ms.saturating_sub(r.max_age.as_millis() as u64);
    let mut count = order.len();
    let mut bytes: u64 = order.iter().map(|e| e.2).sum();
    let mut out = Vec::new();
    for (ended, id, size) in order {
        if ended < cutoff || count > r.max_sessions || bytes > r.max_bytes {
            out.push(id);
            count -= 1;
            bytes -= size;
        }
    }
    out
}

/// The kinds of file the state directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Json,
    Pprof,
}

/// `<id>.json` or `<id>.pprof`.
fn parse_name(name: &str) -> Option<(u64, Kind)> {
    let (stem, ext) = name.rsplit_once('.')?;
    let kind = match ext {
        "json" => Kind::Json,
        "pprof" => Kind::Pprof,
        _ => return None,
    };
    if stem.is_empty() || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((stem.parse().ok()?, kind))
}

fn json_name(id: u64) -> String {
    format!("{id}.json")
}

fn pprof_name(id: u64) -> String {
    format!("{id}.pprof")
}

/// The state directory of a running daemon.
pub struct Store {
    dir: PathBuf,
    retention: Retention,
    /// The sessions on disk; held while the directory is changed.
    entries: Mutex<BTreeMap<u64, Entry>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("dir", &self.dir).finish()
    }
}

impl Store {
    /// Open (creating it, mode 0700) the state directory, move corrupt files
    /// aside, apply the retention limits and return the sessions kept. Fails
    /// only when the directory itself cannot be used.
    pub fn open(persist: &Persist) -> Result<(Store, Found), String> {
        let dir = &persist.dir;
        let cannot = |e: io::Error| format!("{e}");
        match fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => {
                if meta.permissions().mode() & 0o077 != 0 {
                    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(cannot)?;
                    tracing::warn!(
                        dir = %dir.display(),
                        "the state directory was readable by others: made it mode 0700"
                    );
                }
            }
            Ok(_) => return Err("it exists and is not a directory".into()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(cannot)?;
                // The mode is masked by the umask: make sure.
                fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(cannot)?;
            }
            Err(e) => return Err(cannot(e)),
        }
        let store = Store {
            dir: dir.clone(),
            retention: persist.retention.clone(),
            entries: Mutex::new(BTreeMap::new()),
        };
        let found = store.scan().map_err(cannot)?;
        Ok((store, found))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Read every session's metadata, move aside what is not sound, apply
    /// retention.
    fn scan(&self) -> io::Result<Found> {
        let mut found = Found::default();
        let mut files: BTreeMap<u64, Vec<Kind>> = BTreeMap::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                tracing::warn!(file = %entry.path().display(), "not a file profd keeps: left alone");
                continue;
            };
            if name == CORRUPT_DIR {
                continue;
            }
            if name.ends_with(".tmp") {
                self.move_aside(
                    name,
                    "an unfinished write (the daemon stopped while saving)",
                );
                continue;
            }
            match parse_name(name) {
                Some((id, kind)) if entry.file_type()?.is_file() => {
                    found.max_id = found.max_id.max(id);
                    files.entry(id).or_default().push(kind);
                }
                _ => {
                    tracing::warn!(file = %entry.path().display(), "not a file profd keeps: left alone")
                }
            }
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        for (id, kinds) in files {
            let (json, pprof) = (json_name(id), pprof_name(id));
            match (kinds.contains(&Kind::Json), kinds.contains(&Kind::Pprof)) {
                (true, false) => self.move_aside(&json, &format!("its profile {pprof} is missing")),
                (false, true) => self.move_aside(
                    &pprof,
                    &format!("orphaned: its metadata {json} is missing (the daemon stopped while saving)"),
                ),
                (true, true) => match self.check(id) {
                    Ok((stored, entry)) => {
                        entries.insert(id, entry);
                        found.sessions.push(stored);
                    }
                    Err(why) => {
                        self.move_aside(&json, &why);
                        self.move_aside(&pprof, &format!("its metadata {json} is unusable"));
                    }
                },
                (false, false) => {}
            }
        }
        let gone = victims(&entries, &self.retention, now_unix_ms());
        for &id in &gone {
            entries.remove(&id);
            self.delete(id);
        }
        found.sessions.retain(|s| !gone.contains(&s.session.id));
        tracing::info!(
            dir = %self.dir.display(),
            sessions = found.sessions.len(),
            deleted = gone.len(),
            "read the state directory"
        );
        Ok(found)
    }

    /// Check one session's metadata, and its profile's size and header.
    fn check(&self, id: u64) -> Result<(Stored, Entry), String> {
        let json_path = self.dir.join(json_name(id));
        let mut text = String::new();
        File::open(&json_path)
            .and_then(|f| f.take(MAX_META_BYTES + 1).read_to_string(&mut text))
            .map_err(|e| format!("cannot read it: {e}"))?;
        if text.len() as u64 > MAX_META_BYTES {
            return Err(format!("larger than {MAX_META_BYTES} bytes"));
        }
        let meta: Meta =
            serde_json::from_str(&text).map_err(|e| format!("not valid metadata: {e}"))?;
        if meta.format != FORMAT_VERSION {
            return Err(format!(
                "format version {} (this daemon reads {FORMAT_VERSION})",
                meta.format
            ));
        }
        if meta.id != id {
            return Err(format!("it describes session {}, not {id}", meta.id));
        }
        if meta.profile.file != pprof_name(id) {
            return Err(format!(
                "its profile is {:?}, not {:?}",
                meta.profile.file,
                pprof_name(id)
            ));
        }
        let session = meta.session()?;
        let pprof_path = self.dir.join(pprof_name(id));
        let size = fs::metadata(&pprof_path)
            .map_err(|e| format!("cannot read {}: {e}", pprof_name(id)))?
            .len();
        if size != meta.profile.bytes {
            return Err(format!(
                "{} is {size} bytes, {} were written (truncated?)",
                pprof_name(id),
                meta.profile.bytes
            ));
        }
        let mut magic = [0u8; 2];
        File::open(&pprof_path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .map_err(|e| format!("cannot read {}: {e}", pprof_name(id)))?;
        if magic != GZIP_MAGIC {
            return Err(format!("{} is not a gzip'd pprof file", pprof_name(id)));
        }
        let entry = Entry {
            ended_unix_ms: meta.ended_unix_ms,
            bytes: size + text.len() as u64,
        };
        Ok((
            Stored {
                session,
                profile: meta.profile,
            },
            entry,
        ))
    }

    /// Keep an ended session: its profile, then its metadata. Returns the
    /// ids of the sessions the retention limits then deleted (possibly this
    /// one).
    pub fn save(
        &self,
        session: &api::Session,
        profile: &ResolvedProfile,
    ) -> Result<Vec<u64>, String> {
        let id = session.id;
        let bytes = export::pprof(profile);
        let file = ProfileFile {
            file: pprof_name(id),
            bytes: bytes.len() as u64,
            sha256: hex(&Sha256::digest(&bytes)),
        };
        let meta = Meta::new(session, file);
        let mut json = serde_json::to_vec_pretty(&meta).map_err(|e| e.to_string())?;
        json.push(b'\n');
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let fail = |what: &str, e: io::Error| {
            format!("cannot write {what} in {}: {e}", self.dir.display())
        };
        write_atomic(&self.dir, &pprof_name(id), &bytes).map_err(|e| fail(&pprof_name(id), e))?;
        if let Err(e) = write_atomic(&self.dir, &json_name(id), &json) {
            let _ = fs::remove_file(self.dir.join(pprof_name(id)));
            return Err(fail(&json_name(id), e));
        }
        entries.insert(
            id,
            Entry {
                ended_unix_ms: meta.ended_unix_ms,
                bytes: (bytes.len() + json.len()) as u64,
            },
        );
        let gone = victims(&entries, &self.retention, now_unix_ms());
        for &victim in &gone {
            entries.remove(&victim);
            self.delete(victim);
        }
        Ok(gone)
    }

    /// Read, check and decode a stored session's profile.
    pub fn load(&self, stored: &Stored) -> Result<ResolvedProfile, LoadError> {
        let path = self.dir.join(&stored.profile.file);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(LoadError::Gone),
            Err(e) => return Err(LoadError::Corrupt(format!("cannot read it: {e}"))),
        };
        if bytes.len() as u64 != stored.profile.bytes {
            return Err(LoadError::Corrupt(format!(
                "it is {} bytes, {} were written",
                bytes.len(),
                stored.profile.bytes
            )));
        }
        if hex(&Sha256::digest(&bytes)) != stored.profile.sha256 {
            return Err(LoadError::Corrupt(
                "its SHA-256 is not the one written".into(),
            ));
        }
        let mut p = export::pprof_decode(&bytes).map_err(|e| LoadError::Corrupt(e.to_string()))?;
        let s = &stored.session;
        p.attributed = s.totals.unwrap_or_default().attributed;
        p.duration_s = s.duration_s;
        p.frequency_hz = s.frequency_hz;
        p.pid = s.pid;
        p.comm = s.comm.clone();
        Ok(p)
    }

    /// Move a stored session whose profile turned out unreadable aside.
    pub fn discard(&self, id: u64, why: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.remove(&id).is_some() {
            self.move_aside(&pprof_name(id), why);
            self.move_aside(
                &json_name(id),
                &format!("its profile {} is unusable", pprof_name(id)),
            );
        }
    }

    /// Delete a session's files (retention): metadata first, so that it is
    /// never half there.
    fn delete(&self, id: u64) {
        for name in [json_name(id), pprof_name(id)] {
            let path = self.dir.join(&name);
            if let Err(e) = fs::remove_file(&path) {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(file = %path.display(), %e, "cannot delete an old session's file");
                }
            }
        }
        let _ = sync_dir(&self.dir);
        tracing::info!(session = id, dir = %self.dir.display(), "deleted an old session (retention limits)");
    }

    /// Move `name` to `corrupt/` (under a new name if one is there already),
    /// with a warning naming it and saying why. Never fails: a file that
    /// cannot be moved is left where it is.
    fn move_aside(&self, name: &str, why: &str) {
        let from = self.dir.join(name);
        let corrupt = self.dir.join(CORRUPT_DIR);
        let moved = fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&corrupt)
            .and_then(|()| {
                let mut to = corrupt.join(name);
                let mut n = 1;
                while fs::symlink_metadata(&to).is_ok() {
                    to = corrupt.join(format!("{name}.{n}"));
                    n += 1;
                }
                fs::rename(&from, &to)?;
                sync_dir(&self.dir)?;
                Ok(to)
            });
        match moved {
            Ok(to) => tracing::warn!(
                file = %from.display(),
                reason = why,
                moved_to = %to.display(),
                "corrupt state file moved aside"
            ),
            Err(e) => tracing::warn!(
                file = %from.display(),
                reason = why,
                %e,
                "corrupt state file could not be moved aside: left in place"
            ),
        }
    }
}

/// Write `dir/name` so that it is either absent, as before, or whole:
/// `name.tmp` (mode 0600), fsync, rename, fsync of the directory.
fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let written = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, dir.join(name))?;
        sync_dir(dir)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
