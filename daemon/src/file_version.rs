//! A file's identity and version, the key of every cache of what was read
//! from a file (load segments, unwind tables, symbol names, perf maps).
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// A file's identity and version: (device, inode), and its size and
/// modification time, so that a file rewritten in place counts as another.
/// Keys the caches of what was read from files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileVersion {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
}

impl FileVersion {
    pub fn of(m: &std::fs::Metadata) -> FileVersion {
        FileVersion {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
        }
    }

    /// The version of the file at `path` (followed), if it can be read.
    pub fn at(path: &Path) -> Option<FileVersion> {
        std::fs::metadata(path).ok().map(|m| FileVersion::of(&m))
    }
}

/// What was read from files, by file version: read once, shared while
/// used, dropped when the last user lets go (a file rewritten in place is
/// read again).
pub struct SharedReads<T>(OnceLock<Mutex<HashMap<FileVersion, Weak<T>>>>);

impl<T> SharedReads<T> {
    pub const fn new() -> SharedReads<T> {
        SharedReads(OnceLock::new())
    }

    /// What `read` makes of the file at `path`, or the copy still in use.
    pub fn get(&self, path: &Path, read: impl FnOnce(&Path) -> Option<T>) -> Option<Arc<T>> {
        let key = FileVersion::at(path)?;
        let cache = self.0.get_or_init(Default::default);
        let hit = cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .and_then(Weak::upgrade);
        if hit.is_some() {
            return hit;
        }
        let value = Arc::new(read(path)?);
        let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.retain(|_, v| v.strong_count() > 0);
        cache.insert(key, Arc::downgrade(&value));
        Some(value)
    }
}
