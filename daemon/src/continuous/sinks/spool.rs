//! A sink's spool: the windows it has not delivered yet, oldest first,
//! bounded in bytes, as files under the state directory (so they survive
//! a restart) or in memory without one.
//!
//! Each window is the history's file form, `<start ns>-<end ns>-<id>.window.gz`,
//! written atomically; the spool is rebuilt at start from the listing.
use crate::continuous::files::sort_out;
use crate::continuous::files::{file_name, now_ns, window_files};
use crate::sessions::store::atomic;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// A spooled window: its start (ns) and id.
pub type Key = (u64, String);

pub struct Spool {
    /// None: in memory.
    dir: Option<PathBuf>,
    max_bytes: u64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    windows: BTreeMap<Key, Spooled>,
    bytes: u64,
    /// Files found untrustworthy at open, not yet counted by the sink.
    damaged: u64,
}

struct Spooled {
    end_ns: u64,
    bytes: u64,
    /// In memory: the window's bytes.
    data: Option<Arc<Vec<u8>>>,
}

/// Why the spool cannot be used or cannot give a window back.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// A file system call on `path` (the spool's directory or a window's
    /// file) failed.
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The spool's directory cannot be listed.
    #[error(transparent)]
    Listing(crate::continuous::files::DirError),
    /// The window was taken out meanwhile (delivered or dropped).
    #[error("no longer spooled")]
    Gone,
}

/// `path` and what a file system call on it said.
fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What the spool holds now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Figures {
    pub windows: u64,
    pub bytes: u64,
    /// End (Unix ns) of the oldest window waiting.
    pub oldest_end_ns: Option<u64>,
}

impl Spool {
    /// Open the spool in `dir` (created 0700; the windows found there wait
    /// again), or in memory. Blocking.
    pub fn open(dir: Option<PathBuf>, max_bytes: u64) -> Result<Spool, SpoolError> {
        let mut state = State::default();
        if let Some(dir) = &dir {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(io(dir))?;
            scan(dir, &mut state)?;
        }
        Ok(Spool {
            dir,
            max_bytes,
            state: Mutex::new(state),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn path(&self, key: &Key, end_ns: u64) -> Option<PathBuf> {
        Some(self.dir.as_ref()?.join(file_name(key.0, end_ns, &key.1)))
    }

    /// Spool a window (its gzip'd bytes), dropping the oldest windows while
    /// the spool would hold more than its bytes. Returns how many windows
    /// were dropped (the new one too, when it alone is larger than the
    /// spool or cannot be written). Blocking.
    pub fn push(&self, start_ns: u64, end_ns: u64, id: &str, gz: &[u8]) -> Result<u64, SpoolError> {
        let size = gz.len() as u64;
        if size > self.max_bytes {
            return Ok(1);
        }
        let key = (start_ns, id.to_string());
        if self.lock().windows.contains_key(&key) {
            return Ok(0);
        }
        if let Some(dir) = &self.dir {
            atomic::write_atomic(
                dir,
                &file_name(start_ns, end_ns, id),
                gz,
                atomic::Existing::Keep,
            )
            .map_err(io(dir))?;
        }
        let mut gone = Vec::new();
        {
            let mut st = self.lock();
            st.bytes += size;
            st.windows.insert(
                key,
                Spooled {
                    end_ns,
                    bytes: size,
                    data: self.dir.is_none().then(|| Arc::new(gz.to_vec())),
                },
            );
            while st.bytes > self.max_bytes {
                let Some((k, s)) = st.windows.pop_first() else {
                    break;
                };
                st.bytes -= s.bytes;
                gone.push((k, s.end_ns));
            }
        }
        for (k, end) in &gone {
            self.remove_file(k, *end);
        }
        Ok(gone.len() as u64)
    }

    /// The window files found untrustworthy (and removed) since this was
    /// last asked.
    pub fn take_damaged(&self) -> u64 {
        std::mem::take(&mut self.lock().damaged)
    }

    /// The oldest window waiting: its key and end (Unix ns).
    pub fn oldest(&self) -> Option<(Key, u64)> {
        let st = self.lock();
        let (k, s) = st.windows.first_key_value()?;
        Some((k.clone(), s.end_ns))
    }

    /// A waiting window's bytes. Blocking.
    pub fn read(&self, key: &Key) -> Result<Arc<Vec<u8>>, SpoolError> {
        let (end_ns, data) = {
            let st = self.lock();
            let s = st.windows.get(key).ok_or(SpoolError::Gone)?;
            (s.end_ns, s.data.clone())
        };
        match (data, self.path(key, end_ns)) {
            (Some(data), _) => Ok(data),
            (None, Some(path)) => std::fs::read(&path).map(Arc::new).map_err(io(&path)),
            (None, None) => Err(SpoolError::Gone),
        }
    }

    /// Take a window out (delivered or dropped).
    pub fn remove(&self, key: &Key) {
        let removed = {
            let mut st = self.lock();
            let s = st.windows.remove(key);
            if let Some(s) = &s {
                st.bytes -= s.bytes;
            }
            s
        };
        if let Some(s) = removed {
            self.remove_file(key, s.end_ns);
        }
    }

    fn remove_file(&self, key: &Key, end_ns: u64) {
        if let Some(path) = self.path(key, end_ns) {
            if let Err(err) = std::fs::remove_file(&path) {
                if err.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(path = %path.display(), %err, "cannot remove a spooled window");
                }
            }
        }
    }

    pub fn figures(&self) -> Figures {
        let st = self.lock();
        Figures {
            windows: st.windows.len() as u64,
            bytes: st.bytes,
            oldest_end_ns: st.windows.first_key_value().map(|(_, s)| s.end_ns),
        }
    }
}

/// Index the window files of `dir`; half-written ones (`.tmp`) go.
/// Files whose names fail the checks, and copies of a window under other
/// names, are removed and counted.
fn scan(dir: &Path, st: &mut State) -> Result<(), SpoolError> {
    let found = window_files(dir, |_, _| {}).map_err(SpoolError::Listing)?;
    let (keep, aside) = sort_out(dir, found, now_ns());
    for (f, reason) in aside {
        let path = dir.join(&f.name);
        tracing::warn!(path = %path.display(), reason, "spooled window file not trusted: removed");
        st.damaged += 1;
        if let Err(err) = std::fs::remove_file(&path) {
            tracing::warn!(path = %path.display(), %err, "cannot remove a spooled window");
        }
    }
    for f in keep {
        st.bytes += f.bytes;
        st.windows.insert(
            (f.start, f.id),
            Spooled {
                end_ns: f.end,
                bytes: f.bytes,
                data: None,
            },
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "profd-spool-test-{}-{}",
            std::process::id(),
            crate::continuous::files::random_id()
        ));
        dir
    }

    #[test]
    fn the_spool_keeps_the_newest_within_its_bytes_and_survives_a_reopen() {
        let dir = temp();
        let spool = Spool::open(Some(dir.clone()), 250).unwrap();
        assert_eq!(spool.push(10, 20, "a1", &[1; 100]).unwrap(), 0);
        assert_eq!(spool.push(20, 30, "b2", &[2; 100]).unwrap(), 0);
        // A third window of 100 bytes makes 300 > 250: the oldest goes.
        assert_eq!(spool.push(30, 40, "c3", &[3; 100]).unwrap(), 1);
        // The same window again is spooled once.
        assert_eq!(spool.push(30, 40, "c3", &[3; 100]).unwrap(), 0);
        // Larger than the whole spool: dropped itself, nothing else.
        assert_eq!(spool.push(40, 50, "d4", &[4; 300]).unwrap(), 1);
        let f = spool.figures();
        assert_eq!((f.windows, f.bytes, f.oldest_end_ns), (2, 200, Some(30)));
        assert_eq!(spool.oldest(), Some(((20, "b2".into()), 30)));
        drop(spool);
        std::fs::write(dir.join("x.window.gz.tmp"), b"half").unwrap();
        let again = Spool::open(Some(dir.clone()), 250).unwrap();
        assert_eq!(again.figures(), f);
        assert_eq!(*again.read(&(20, "b2".into())).unwrap(), vec![2; 100]);
        again.remove(&(20, "b2".into()));
        assert_eq!(again.oldest(), Some(((30, "c3".into()), 40)));
        assert!(!dir.join("x.window.gz.tmp").exists());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// At open, files whose names fail the history's checks and a second
    /// file of one window are removed and counted.
    #[test]
    fn untrusted_files_are_removed_at_open_and_counted() {
        let dir = temp();
        let spool = Spool::open(Some(dir.clone()), 1 << 20).unwrap();
        let w = profd_common::api::Window {
            id: "a1".into(),
            start_unix_ns: 10,
            end_unix_ns: 20,
            ..Default::default()
        };
        let gz = crate::continuous::encode::encode(w).unwrap().gz;
        spool.push(10, 20, "a1", &gz).unwrap();
        drop(spool);
        let original = dir.join(file_name(10, 20, "a1"));
        for name in [file_name(5, 15, "a1"), file_name(30, 20, "b2")] {
            std::fs::copy(&original, dir.join(name)).unwrap();
        }
        let again = Spool::open(Some(dir.clone()), 1 << 20).unwrap();
        assert_eq!(again.figures().windows, 1);
        assert_eq!(again.oldest(), Some(((10, "a1".into()), 20)));
        assert_eq!((again.take_damaged(), again.take_damaged()), (2, 0));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn without_a_directory_the_spool_is_in_memory() {
        let spool = Spool::open(None, 1000).unwrap();
        spool.push(1, 2, "m1", b"abc").unwrap();
        assert_eq!(*spool.read(&(1, "m1".into())).unwrap(), b"abc".to_vec());
        spool.remove(&(1, "m1".into()));
        assert_eq!(spool.figures(), Figures::default());
    }
}
