//! Names found in files, shared by all sessions: a new session of a program
//! already profiled, or a new process using the same libraries, is named
//! without parsing those files again (their parsed data, tens of MiB with
//! debug sections, is released when idle; see `super::blaze::IDLE`). Keyed by the
//! file's version (`FileVersion`), module name and file offset; a file's names go when unused for [`NAMES_IDLE`], and the
//! least recently used files' go when more than [`MAX_NAMES`] are kept.
use super::frame::Frame;
use crate::file_version::FileVersion;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long the names of a file no request used are kept.
pub const NAMES_IDLE: Duration = Duration::from_secs(600);

/// Addresses named at most, all files together.
pub const MAX_NAMES: usize = 1 << 16;

/// A file's version and the module name its frames carry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileKey {
    version: FileVersion,
    module: String,
}

impl FileKey {
    /// The file's version.
    pub fn version(&self) -> FileVersion {
        self.version
    }

    /// The key of the file at `path` (followed), named `module`; None when
    /// it cannot be read.
    pub fn of(path: &Path, module: &str) -> Option<FileKey> {
        Some(FileKey {
            version: FileVersion::at(path)?,
            module: module.to_string(),
        })
    }
}

#[derive(Default)]
pub struct Names {
    files: HashMap<FileKey, (Instant, HashMap<u64, Vec<Frame>>)>,
    count: usize,
}

impl Names {
    /// The frames of `offset` in `file`, if named before.
    pub fn get(&mut self, file: &FileKey, offset: u64, now: Instant) -> Option<&Vec<Frame>> {
        let (used, names) = self.files.get_mut(file)?;
        *used = now;
        names.get(&offset)
    }

    /// Keep the frames `offset` in `file` was named with.
    pub fn insert(&mut self, file: &FileKey, offset: u64, frames: Vec<Frame>, now: Instant) {
        let (used, names) = self
            .files
            .entry(file.clone())
            .or_insert_with(|| (now, HashMap::new()));
        *used = now;
        if names.insert(offset, frames).is_none() {
            self.count += 1;
        }
        while self.count > MAX_NAMES {
            let Some(oldest) = self
                .files
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some((_, names)) = self.files.remove(&oldest) {
                self.count -= names.len();
            }
        }
    }

    /// Drop the names of files unused for [`NAMES_IDLE`].
    pub fn evict_idle(&mut self, now: Instant) {
        let count = &mut self.count;
        self.files.retain(|_, (used, names)| {
            let keep = now.saturating_duration_since(*used) < NAMES_IDLE;
            if !keep {
                *count -= names.len();
            }
            keep
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two distinct files.
    fn key(which: u64) -> FileKey {
        let path = match which {
            1 => std::env::current_exe().unwrap(),
            _ => "/bin/true".into(),
        };
        FileKey::of(&path, "m").unwrap()
    }

    #[test]
    fn the_least_recently_used_files_go_beyond_the_bound() {
        let mut names = Names::default();
        let t0 = Instant::now();
        let frames = vec![Frame::named("f", "m")];
        for off in 0..MAX_NAMES as u64 {
            names.insert(&key(1), off, frames.clone(), t0);
        }
        names.insert(&key(2), 0, frames.clone(), t0 + Duration::from_secs(1));
        // File 1 is the least recently used: all its names go.
        assert_eq!(names.count, 1);
        assert!(names.get(&key(1), 0, t0).is_none());
        assert_eq!(names.get(&key(2), 0, t0), Some(&frames));
        names.evict_idle(t0 + Duration::from_secs(1) + NAMES_IDLE);
        assert_eq!((names.count, names.files.len()), (0, 0));
    }
}
