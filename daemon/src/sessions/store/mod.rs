//! The state directory: every session that ends is kept there as
//! `<id>.pprof` (its gzip'd pprof export) and `<id>.session` (its summary,
//! see [`record`]), so that finished sessions survive daemon restarts;
//! running sessions are saved there too, at intervals (checkpoints), and the
//! high-water mark of session ids (see [`ids`]). Summaries `<id>.json` (see
//! [`legacy`]) are read as well. Files are written atomically (temp file,
//! fsync, rename, fsync of the directory), the metadata last: a session is
//! stored once its `.session` exists; a session's first save never replaces
//! files that are there already (another session's). At start,
//! files that are corrupt, truncated or orphaned are moved to `corrupt/` with
//! a warning, never fatally. Retention limits (count, age, bytes) are
//! shared fairly between the sessions' owners (see [`share`]), applied at
//! start and after each save. A session is recorded when it starts, so that
//! a daemon killed before its first checkpoint leaves it as a failed one.
//!
//! Only the metadata is read at start (and the profile's size checked); a
//! profile is decoded, and its SHA-256 checked, when it is first asked for.
use profd_common::api;
use profd_common::export;
use profd_common::model::ResolvedProfile;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) mod atomic;
mod ids;
mod legacy;
mod record;
mod retention;
pub mod share;

use atomic::{put, stage, stage_with, sync_dir, Existing};
pub use ids::{IdError, Ids, MAX_ID, NEXT_ID_FILE};
use prost::Message;
use record::{ProfileFile, Record};
#[cfg(test)]
use retention::victims;
use retention::Entry;
use share::Ledger;

/// Where sessions are kept unless `--state-dir` says otherwise.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/profd";
/// The subdirectory corrupt files are moved to.
pub const CORRUPT_DIR: &str = "corrupt";
/// A metadata file larger than this is not one of ours.
const MAX_META_BYTES: u64 = 1 << 20;
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// Bytes of a saved profile handed to its file at a time.
pub const PIECE_BYTES: usize = 64 << 10;

/// How much the state directory keeps, shared fairly between the sessions'
/// owners (see [`share`]).
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

/// How often a running session is saved unless `--checkpoint-interval`
/// says otherwise.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(60);

/// Keep ended sessions in `dir` (`--state-dir`), within `retention`; save
/// running ones every `checkpoint_interval` (`--checkpoint-interval`).
#[derive(Debug, Clone, PartialEq)]
pub struct Persist {
    pub dir: PathBuf,
    pub retention: Retention,
    pub checkpoint_interval: Duration,
}

impl Persist {
    /// The default retention and checkpoints in `dir`.
    pub fn new(dir: PathBuf) -> Persist {
        Persist {
            dir,
            retention: Retention::default(),
            checkpoint_interval: DEFAULT_CHECKPOINT_INTERVAL,
        }
    }
}

/// A byte count with an optional binary suffix: `1073741824`, `512K`,
/// `100M`, `1G`, `2T` (also `KiB`, `MB`, ...: all powers of 1024).
pub fn parse_bytes(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).map_or(t, |i| &t[..i]);
    let suffix = t[digits.len()..].trim().to_ascii_uppercase();
    let shift = match suffix.trim_end_matches("IB").trim_end_matches('B') {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(SizeError::NotASize(s.into())),
    };
    let n: u64 = digits.parse().map_err(|_| SizeError::NotASize(s.into()))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| SizeError::TooLarge(s.into()))
}

/// Why a size ([`parse_bytes`]) is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("{0:?} is not a size: use bytes, or a number with K, M, G or T")]
    NotASize(String),
    #[error("{0:?} is too large")]
    TooLarge(String),
}

/// A profile as the gzip'd pprof pieces a save writes: a session encodes
/// its own as it names its stacks (see `session::Handle::encoded`), so no
/// whole profile is made for a save.
pub struct Encoded(pub Vec<Vec<u8>>);

impl From<&ResolvedProfile> for Encoded {
    fn from(profile: &ResolvedProfile) -> Encoded {
        let mut pieces = Vec::new();
        export::pprof_pieces(profile, PIECE_BYTES, |piece| {
            pieces.push(piece);
            true
        });
        Encoded(pieces)
    }
}

/// A session found in the state directory.
#[derive(Debug, Clone)]
pub struct Stored {
    /// Its summary, with `earlier_run` set.
    pub session: api::Session,
    profile: ProfileFile,
}

/// What was found in the state directory at start.
#[derive(Debug)]
pub struct Found {
    /// The sessions kept, by id.
    pub sessions: Vec<Stored>,
    /// New sessions' ids: after the high-water mark and every session kept
    /// (without a mark, after every id of a file found).
    pub ids: Ids,
}

/// Why the state directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Another user could steer it.
    #[error(transparent)]
    Untrusted(#[from] crate::trusted_files::Refused),
    #[error("it exists and is not a directory")]
    NotADirectory,
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Why a session could not be saved.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// `file` is another session's (its first save never replaces one).
    #[error("{file} is already in {}: not replaced (it is another session's), session {id} is not saved", dir.display())]
    Taken { file: String, dir: PathBuf, id: u64 },
    #[error("cannot write {file} in {}: {source}", dir.display())]
    Write {
        file: String,
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Why a session found in the state directory is not kept (its files are
/// moved aside).
#[derive(Debug, thiserror::Error)]
enum Unusable {
    #[error("cannot read it: {0}")]
    Read(#[source] io::Error),
    #[error("larger than {MAX_META_BYTES} bytes")]
    TooLarge,
    #[error(transparent)]
    Record(#[from] record::Unusable),
    #[error(transparent)]
    Legacy(#[from] legacy::Unusable),
    #[error("it describes session {found}, not {id}")]
    OtherSession { found: u64, id: u64 },
    #[error("cannot read {file}: {source}")]
    ReadProfile {
        file: String,
        #[source]
        source: io::Error,
    },
    /// Its profile file is not as long as the metadata says.
    #[error("{file} is {size} bytes, {written} were written (truncated?)")]
    Truncated {
        file: String,
        size: u64,
        written: u64,
    },
    #[error("{file} is not a gzip'd pprof file")]
    NotGzip { file: String },
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

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The kinds of file the state directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// `<id>.session`, the summary.
    Session,
    /// `<id>.json`, the summary of format 1.
    Json,
    /// `<id>.pprof`, the profile.
    Pprof,
}

impl Kind {
    fn name(self, id: u64) -> String {
        match self {
            Kind::Session => format!("{id}.session"),
            Kind::Json => format!("{id}.json"),
            Kind::Pprof => pprof_name(id),
        }
    }
}

/// `<id>.session`, `<id>.json` or `<id>.pprof`; the id None when it is one
/// profd never hands out (0, or above [`MAX_ID`]).
fn parse_name(name: &str) -> Option<(Option<u64>, Kind)> {
    let (stem, ext) = name.rsplit_once('.')?;
    let kind = match ext {
        "session" => Kind::Session,
        "json" => Kind::Json,
        "pprof" => Kind::Pprof,
        _ => return None,
    };
    if stem.is_empty() || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((ids::parse_id(stem), kind))
}

fn pprof_name(id: u64) -> String {
    format!("{id}.pprof")
}

/// The state directory of a running daemon.
pub struct Store {
    dir: PathBuf,
    retention: Retention,
    checkpoint_interval: Duration,
    /// The sessions on disk; held while the directory is changed.
    entries: Mutex<BTreeMap<u64, Entry>>,
    /// The sessions this run has saved: their files are theirs to replace.
    own: Mutex<BTreeSet<u64>>,
    /// The sessions deleted by the retention limits, by owner.
    ledger: std::sync::Arc<Ledger>,
    /// Held by the save being made (see [`Store::turn`]).
    turn: tokio::sync::Semaphore,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("dir", &self.dir).finish()
    }
}

impl Store {
    /// Open (creating it, mode 0700) the state directory, move corrupt files
    /// aside, apply the retention limits and return the sessions kept. Fails
    /// only when the directory itself cannot be used, or when another user
    /// could steer it ([`crate::trusted_files::check_dir`]).
    pub fn open(persist: &Persist) -> Result<(Store, Found), OpenError> {
        let dir = &persist.dir;
        // No other user may steer where the state goes, or put files in it.
        crate::trusted_files::check_dir(dir)?;
        match fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => {
                if meta.permissions().mode() & 0o077 != 0 {
                    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
                    tracing::warn!(
                        dir = %dir.display(),
                        "the state directory was readable by others: made it mode 0700"
                    );
                }
            }
            Ok(_) => return Err(OpenError::NotADirectory),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)?;
                // The mode is masked by the umask: make sure.
                fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
            }
            Err(e) => return Err(e.into()),
        }
        let store = Store {
            dir: dir.clone(),
            retention: persist.retention.clone(),
            checkpoint_interval: persist.checkpoint_interval,
            entries: Mutex::new(BTreeMap::new()),
            own: Mutex::new(BTreeSet::new()),
            ledger: Default::default(),
            turn: tokio::sync::Semaphore::new(1),
        };
        let found = store.scan()?;
        Ok((store, found))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How often a running session is saved.
    pub fn checkpoint_interval(&self) -> Duration {
        self.checkpoint_interval
    }

    /// Read every session's metadata, move aside what is not sound, apply
    /// retention.
    fn scan(&self) -> io::Result<Found> {
        let mark = self.read_mark()?;
        let mut sessions = Vec::new();
        // The largest id of any session file, and of a session kept.
        let (mut seen, mut kept) = (0, 0);
        let mut files: BTreeMap<u64, Vec<Kind>> = BTreeMap::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                tracing::warn!(file = %entry.path().display(), "not a file profd keeps: left alone");
                continue;
            };
            if name == CORRUPT_DIR
                || name == NEXT_ID_FILE
                || name == crate::process::symbolize::debuginfod::CACHE_DIR
            {
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
                Some((Some(id), kind)) if entry.file_type()?.is_file() => {
                    seen = seen.max(id);
                    files.entry(id).or_default().push(kind);
                }
                Some((None, _)) if entry.file_type()?.is_file() => self.move_aside(
                    name,
                    &format!("not a session of profd's: its ids go from 1 to {MAX_ID}"),
                ),
                _ => {
                    tracing::warn!(file = %entry.path().display(), "not a file profd keeps: left alone")
                }
            }
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        for (id, kinds) in files {
            let pprof = pprof_name(id);
            // Its summary: `.session`, else `.json`.
            let meta = [Kind::Session, Kind::Json]
                .into_iter()
                .find(|k| kinds.contains(k));
            match (meta, kinds.contains(&Kind::Pprof)) {
                (Some(meta), false) => {
                    self.move_aside(&meta.name(id), &format!("its profile {pprof} is missing"))
                }
                (None, true) => self.move_aside(
                    &pprof,
                    &format!(
                        "orphaned: its metadata {} is missing (the daemon stopped while saving)",
                        Kind::Session.name(id)
                    ),
                ),
                (Some(meta), true) => match self.check(id, meta) {
                    Ok((stored, entry)) => {
                        entries.insert(id, entry);
                        kept = id;
                        sessions.push(stored);
                    }
                    Err(why) => {
                        let name = meta.name(id);
                        self.move_aside(&name, &why.to_string());
                        self.move_aside(&pprof, &format!("its metadata {name} is unusable"));
                    }
                },
                (None, false) => {}
            }
        }
        let gone = self.apply_retention(&mut entries);
        sessions.retain(|s| !gone.contains(&s.session.id));
        // Files moved aside or deleted had their ids below the mark; only
        // a directory without one (or with a damaged one) goes by them.
        let next = match mark {
            Some(mark) => mark.max(kept + 1),
            None => seen + 1,
        };
        tracing::info!(
            dir = %self.dir.display(),
            sessions = sessions.len(),
            deleted = gone.len(),
            next_id = next,
            "read the state directory"
        );
        Ok(Found {
            sessions,
            ids: Ids::on_disk(&self.dir, next),
        })
    }

    /// The high-water mark of session ids; None when there is none, or a
    /// damaged one (then moved aside).
    fn read_mark(&self) -> io::Result<Option<u64>> {
        let mut text = String::new();
        match File::open(self.dir.join(NEXT_ID_FILE)) {
            Ok(f) => f.take(64).read_to_string(&mut text)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mark = ids::parse_mark(&text);
        if mark.is_none() {
            self.move_aside(
                NEXT_ID_FILE,
                &format!(
                    "not a high-water mark of session ids (a number from 1 to {}): ids go on \
                     after the sessions found",
                    MAX_ID + 1
                ),
            );
        }
        Ok(mark)
    }

    /// Check one session's metadata (`meta`: which file holds it), and its
    /// profile's size and header.
    fn check(&self, id: u64, meta: Kind) -> Result<(Stored, Entry), Unusable> {
        let mut bytes = Vec::new();
        File::open(self.dir.join(meta.name(id)))
            .and_then(|f| f.take(MAX_META_BYTES + 1).read_to_end(&mut bytes))
            .map_err(Unusable::Read)?;
        if bytes.len() as u64 > MAX_META_BYTES {
            return Err(Unusable::TooLarge);
        }
        let (session, profile) = match meta {
            Kind::Json => {
                let (session, profile) = legacy::decode(&bytes, &pprof_name(id))?;
                (record::checked(session, false)?, profile)
            }
            _ => Record::decode_parts(&bytes)?,
        };
        if session.id != id {
            return Err(Unusable::OtherSession {
                found: session.id,
                id,
            });
        }
        let pprof_path = self.dir.join(pprof_name(id));
        let unreadable = |source| Unusable::ReadProfile {
            file: pprof_name(id),
            source,
        };
        let size = fs::metadata(&pprof_path).map_err(unreadable)?.len();
        if size != profile.bytes {
            return Err(Unusable::Truncated {
                file: pprof_name(id),
                size,
                written: profile.bytes,
            });
        }
        let mut magic = [0u8; 2];
        File::open(&pprof_path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .map_err(unreadable)?;
        if magic != GZIP_MAGIC {
            return Err(Unusable::NotGzip {
                file: pprof_name(id),
            });
        }
        let entry = Entry::of(&session, size + bytes.len() as u64);
        Ok((Stored { session, profile }, entry))
    }

    /// A turn to save a session, one at a time: the saver takes it before
    /// it gathers the session's whole profile and holds it until the files
    /// are written, so sessions whose checkpoints fall due together (ten
    /// sessions started at once) hold one whole profile between them, not
    /// ten.
    pub async fn turn(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.turn
            .acquire()
            .await
            .expect("the save turn is never closed")
    }

    /// Keep a session, ended or (a checkpoint) running: its profile, then
    /// its metadata. Its first save never replaces files of the same names
    /// (another session's); later ones replace its own. Returns the ids of
    /// the sessions the retention limits then deleted (possibly this one).
    pub fn save(
        &self,
        session: &api::Session,
        profile: impl Into<Encoded>,
    ) -> Result<Vec<u64>, SaveError> {
        self.write(session, profile.into(), false)
    }

    /// Record a session as it starts (a running session's first save): a
    /// daemon killed before its first checkpoint leaves it as a failed
    /// session that says so. As [`Store::save`] otherwise.
    pub fn save_start(
        &self,
        session: &api::Session,
        profile: impl Into<Encoded>,
    ) -> Result<Vec<u64>, SaveError> {
        self.write(session, profile.into(), true)
    }

    fn write(
        &self,
        session: &api::Session,
        profile: Encoded,
        at_start: bool,
    ) -> Result<Vec<u64>, SaveError> {
        let id = session.id;
        let fail = |file: &str, source: io::Error| match source.kind() {
            io::ErrorKind::AlreadyExists => SaveError::Taken {
                file: file.into(),
                dir: self.dir.clone(),
                id,
            },
            _ => SaveError::Write {
                file: file.into(),
                dir: self.dir.clone(),
                source,
            },
        };
        let (pprof_file, meta_file) = (pprof_name(id), Kind::Session.name(id));
        // Both written and synced first: a checkpoint replacing the last
        // one leaves the pair mismatched only between the two renames.
        let (mut size, mut sha) = (0u64, Sha256::new());
        let pprof_tmp = stage_with(&self.dir, &pprof_file, |f| {
            for piece in profile.0 {
                size += piece.len() as u64;
                sha.update(&piece);
                f.write_all(&piece)?;
            }
            Ok(())
        })
        .map_err(|e| fail(&pprof_file, e))?;
        let record = Record {
            session: Some(session.clone()),
            profile: Some(ProfileFile {
                bytes: size,
                sha256: sha.finalize().to_vec(),
            }),
            at_start,
        }
        .encode_to_vec();
        let meta_tmp = stage(&self.dir, &meta_file, &record).map_err(|e| {
            let _ = fs::remove_file(&pprof_tmp);
            fail(&meta_file, e)
        })?;
        // The directory is changed under its locks; the files were made
        // without them.
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let mut own = self.own.lock().unwrap_or_else(|p| p.into_inner());
        // Its own files are replaced; another session's never are.
        let existing = match own.contains(&id) {
            true => Existing::Replace,
            false => Existing::Keep,
        };
        if let Err(e) = put(&self.dir, &pprof_tmp, &pprof_file, existing) {
            let _ = fs::remove_file(&meta_tmp);
            return Err(fail(&pprof_file, e));
        }
        if let Err(e) = put(&self.dir, &meta_tmp, &meta_file, existing) {
            let _ = fs::remove_file(self.dir.join(&pprof_file));
            return Err(fail(&meta_file, e));
        }
        sync_dir(&self.dir).map_err(|e| fail(&meta_file, e))?;
        own.insert(id);
        entries.insert(id, Entry::of(session, size + record.len() as u64));
        Ok(self.apply_retention(&mut entries))
    }

    /// Read, check and decode a stored session's profile.
    pub fn load(&self, stored: &Stored) -> Result<ResolvedProfile, LoadError> {
        let path = self.dir.join(pprof_name(stored.session.id));
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
        if Sha256::digest(&bytes).as_slice() != stored.profile.sha256 {
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
        p.mode = s.mode();
        Ok(p)
    }

    /// Move a stored session whose profile turned out unreadable aside.
    pub fn discard(&self, id: u64, why: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.remove(&id).is_some() {
            self.move_aside(&pprof_name(id), why);
            for meta in [Kind::Session, Kind::Json] {
                let name = meta.name(id);
                if fs::symlink_metadata(self.dir.join(&name)).is_ok() {
                    self.move_aside(
                        &name,
                        &format!("its profile {} is unusable", pprof_name(id)),
                    );
                }
            }
        }
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

#[cfg(test)]
#[path = "mod_owners_tests.rs"]
mod owners_tests;
#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
