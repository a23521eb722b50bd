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
    /// Its device and inode numbers (`st_dev`, `st_ino`).
    pub fn inode(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    pub fn at(path: &Path) -> Option<FileVersion> {
        std::fs::metadata(path).ok().map(|m| FileVersion::of(&m))
    }
}

/// What was read from files, by file version: read once, shared while
/// used, dropped when the last user lets go (a file rewritten in place is
/// read again). A file that gave nothing is remembered as such (up to
/// [`MAX_NOTHING`] of them), so that it is not read again each time a
/// process maps it.
pub struct SharedReads<T>(OnceLock<Mutex<HashMap<FileVersion, Option<Weak<T>>>>>);

/// Most files remembered as giving nothing; past it they are forgotten.
pub const MAX_NOTHING: usize = 4096;

impl<T> SharedReads<T> {
    pub const fn new() -> SharedReads<T> {
        SharedReads(OnceLock::new())
    }

    /// What `read` makes of the file at `path`, or the copy still in use.
    pub fn get(&self, path: &Path, read: impl FnOnce(&Path) -> Option<T>) -> Option<Arc<T>> {
        let key = FileVersion::at(path)?;
        let cache = self.0.get_or_init(Default::default);
        match cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            Some(None) => return None,
            Some(Some(used)) => {
                if let Some(hit) = used.upgrade() {
                    return Some(hit);
                }
            }
            None => {}
        }
        let value = read(path).map(Arc::new);
        let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.retain(|_, v| v.as_ref().is_none_or(|v| v.strong_count() > 0));
        if value.is_none() && cache.len() >= MAX_NOTHING {
            cache.retain(|_, v| v.is_some());
        }
        cache.insert(key, value.as_ref().map(Arc::downgrade));
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_file_is_read_once_while_used_and_once_when_it_gives_nothing() {
        let dir = std::env::temp_dir().join(format!("profd-shared-reads-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (some, none) = (dir.join("some"), dir.join("none"));
        std::fs::write(&some, "some").unwrap();
        std::fs::write(&none, "").unwrap();
        let reads = Cell::new(0);
        let read = |p: &Path| {
            reads.set(reads.get() + 1);
            Some(std::fs::read_to_string(p).unwrap()).filter(|s| !s.is_empty())
        };
        let cache = SharedReads::new();
        let first = cache.get(&some, read).unwrap();
        let again = cache.get(&some, read).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(reads.get(), 1);
        drop((first, again));
        assert_eq!(
            cache.get(&some, read).as_deref().map(String::as_str),
            Some("some")
        );
        assert_eq!(reads.get(), 2, "read again once no one used it");
        for _ in 0..3 {
            assert_eq!(cache.get(&none, read), None);
        }
        assert_eq!(reads.get(), 3, "a file giving nothing is read once");
        std::fs::write(&none, "now some").unwrap();
        assert!(
            cache.get(&none, read).is_some(),
            "read again once rewritten"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
