//! A file's identity and version, the key of every cache of what was read
//! from a file (load segments, unwind tables, symbol names, perf maps).
use std::os::unix::fs::MetadataExt;
use std::path::Path;

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
