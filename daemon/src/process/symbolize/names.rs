//! Names found in files, shared by all sessions: a new session of a program
//! already profiled, or a new process using the same libraries, is named
//! without parsing those files again (their parsed data is released soon;
//! see `super::blaze`). Keyed by the file's version (`FileVersion`), module
//! name and file offset, or a function's range of offsets when its name is
//! all there is (a symbol without line or inlining information): every
//! address in the function is then named without parsing the file again.
//! Each entry's frames weigh their bytes; the entries used longest ago go
//! first when the names weigh more than their budget, and any unused for
//! [`NAMES_IDLE`].
use super::frame::Frame;
use super::lru::Lru;
use crate::os::file_version::FileVersion;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the names of an address no request used are kept.
pub const NAMES_IDLE: Duration = Duration::from_secs(600);

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

/// What one address's frames take in memory, with the entry keeping them.
pub fn weight(frames: &[Frame]) -> u64 {
    let per_entry = 96; // Key, map slot, order slot.
    let frames_bytes: usize = frames
        .iter()
        .map(|f| {
            std::mem::size_of::<Frame>()
                + f.func.name.capacity()
                + f.func.module.capacity()
                + f.file.as_ref().map_or(0, |s| s.len() + 16)
        })
        .sum();
    (per_entry + frames_bytes) as u64
}

/// The names, by file and offset, within a byte budget.
#[derive(Default)]
pub struct Names {
    entries: Lru<(Arc<FileKey>, u64), Vec<Frame>>,
    /// One shared key per file (with the count of its entries).
    keys: std::collections::HashMap<FileKey, (Arc<FileKey>, usize)>,
    /// Per file, the functions kept as ranges: start offset → end.
    ranges: std::collections::HashMap<Arc<FileKey>, std::collections::BTreeMap<u64, u64>>,
    evicted: u64,
}

impl Names {
    /// The frames of `offset` in `file`, if named before.
    pub fn get(&mut self, file: &FileKey, offset: u64, now: Instant) -> Option<&Vec<Frame>> {
        let key = self.keys.get(file)?.0.clone();
        let start = self
            .ranges
            .get(&key)
            .and_then(|r| r.range(..=offset).next_back())
            .filter(|(_, &end)| offset < end)
            .map(|(&start, _)| start);
        if let Some(start) = start {
            if self.entries.peek(&(key.clone(), start)).is_some() {
                return self.entries.get(&(key, start), now);
            }
        }
        self.entries.get(&(key, offset), now)
    }

    /// Keep the frames of the function at offsets `range` of `file`: every
    /// offset in it names the same (see [`Names::insert`]).
    pub fn insert_function(
        &mut self,
        file: &FileKey,
        range: std::ops::Range<u64>,
        frames: Vec<Frame>,
        now: Instant,
        budget: u64,
    ) {
        if range.is_empty() {
            return;
        }
        self.insert(file, range.start, frames, now, budget);
        if let Some((key, _)) = self.keys.get(file) {
            let key = key.clone();
            if self.entries.peek(&(key.clone(), range.start)).is_some() {
                self.ranges
                    .entry(key)
                    .or_default()
                    .insert(range.start, range.end);
            }
        }
    }

    /// Keep the frames `offset` in `file` was named with, then drop the
    /// addresses used longest ago while all weigh more than `budget`.
    pub fn insert(
        &mut self,
        file: &FileKey,
        offset: u64,
        frames: Vec<Frame>,
        now: Instant,
        budget: u64,
    ) {
        let (key, count) = self
            .keys
            .entry(file.clone())
            .or_insert_with(|| (Arc::new(file.clone()), 0));
        let key = (key.clone(), offset);
        if self.entries.peek(&key).is_none() {
            *count += 1;
        }
        let bytes = weight(&frames);
        self.entries.insert(key, frames, bytes, now);
        self.shrink_to(budget);
    }

    /// Forget the names of every address of the file `version`.
    pub fn forget_file(&mut self, version: FileVersion) {
        let files: Vec<Arc<FileKey>> = self
            .keys
            .iter()
            .filter(|(k, _)| k.version == version)
            .map(|(_, (key, _))| key.clone())
            .collect();
        if files.is_empty() {
            return;
        }
        let gone: Vec<(Arc<FileKey>, u64)> = self
            .entries
            .keys()
            .filter(|(file, _)| files.contains(file))
            .cloned()
            .collect();
        for key in gone {
            self.entries.remove(&key);
        }
        for file in files {
            self.ranges.remove(&file);
            self.keys.remove(&*file);
        }
    }

    /// Drop the addresses used longest ago until all weigh at most `budget`.
    pub fn shrink_to(&mut self, budget: u64) {
        let gone = self.entries.shrink_to(budget);
        self.forget(gone.into_iter().map(|(k, _)| k));
    }

    /// Drop the names of addresses unused for [`NAMES_IDLE`].
    pub fn evict_idle(&mut self, now: Instant) {
        let Some(before) = now.checked_sub(NAMES_IDLE) else {
            return;
        };
        let gone = self.entries.drop_unused_since(before);
        self.forget(gone.into_iter().map(|(k, _)| k));
    }

    fn forget(&mut self, gone: impl Iterator<Item = (Arc<FileKey>, u64)>) {
        for (file, offset) in gone {
            self.evicted += 1;
            if let Some(ranges) = self.ranges.get_mut(&file) {
                ranges.remove(&offset);
                if ranges.is_empty() {
                    self.ranges.remove(&file);
                }
            }
            if let Some((_, count)) = self.keys.get_mut(&*file) {
                *count -= 1;
                if *count == 0 {
                    self.keys.remove(&*file);
                }
            }
        }
    }

    /// What the names weigh now.
    pub fn bytes(&self) -> u64 {
        self.entries.bytes() + self.keys.len() as u64 * 128
    }

    /// Addresses named and kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Addresses dropped so far.
    pub fn evicted(&self) -> u64 {
        self.evicted
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

    /// The names never weigh more than their budget: the addresses used
    /// longest ago go first, across files, and the files' keys with them.
    #[test]
    fn the_least_recently_used_addresses_go_beyond_the_budget() {
        let mut names = Names::default();
        let t0 = Instant::now();
        let frames = vec![Frame::named("some_function_name", "m")];
        let each = weight(&frames);
        let budget = each * 100;
        for off in 0..100u64 {
            names.insert(&key(1), off, frames.clone(), t0, budget);
            assert!(names.entries.bytes() <= budget);
        }
        // Offset 0 is used again, so offsets 1 and 2 are the oldest.
        assert!(names.get(&key(1), 0, t0).is_some());
        names.insert(&key(2), 0, frames.clone(), t0, budget);
        names.insert(&key(2), 1, frames.clone(), t0, budget);
        assert!(names.entries.bytes() <= budget);
        assert_eq!(names.len(), 100);
        assert!(names.get(&key(1), 1, t0).is_none());
        assert!(names.get(&key(1), 2, t0).is_none());
        assert!(names.get(&key(1), 0, t0).is_some());
        assert!(names.get(&key(1), 3, t0).is_some());
        assert_eq!(names.get(&key(2), 1, t0), Some(&frames));
        assert_eq!(names.evicted(), 2);
        // A budget lowered later is honoured at once.
        names.shrink_to(each * 10);
        assert!(names.entries.bytes() <= each * 10);
        names.evict_idle(t0 + NAMES_IDLE + Duration::from_secs(1));
        assert_eq!((names.len(), names.keys.len()), (0, 0));
    }

    /// A file's names are forgotten, addresses and ranges, and only its.
    #[test]
    fn a_file_is_forgotten_whole() {
        let mut names = Names::default();
        let t0 = Instant::now();
        let f = vec![Frame::named("f", "m")];
        names.insert_function(&key(1), 0x100..0x180, f.clone(), t0, u64::MAX);
        names.insert(&key(1), 0x200, f.clone(), t0, u64::MAX);
        names.insert(&key(2), 0x200, f.clone(), t0, u64::MAX);
        names.forget_file(key(1).version());
        assert_eq!(names.get(&key(1), 0x140, t0), None);
        assert_eq!(names.get(&key(1), 0x200, t0), None);
        assert_eq!(names.get(&key(2), 0x200, t0), Some(&f));
        assert_eq!((names.len(), names.keys.len()), (1, 1));
        assert!(names.ranges.is_empty());
        assert_eq!(names.bytes(), weight(&f) + 128);
    }

    /// A function kept as a range names every offset in it, and only
    /// those; it goes as one entry.
    #[test]
    fn a_function_names_every_offset_in_its_range() {
        let mut names = Names::default();
        let t0 = Instant::now();
        let f = vec![Frame::named("f", "m")];
        let g = vec![Frame::named("g", "m")];
        names.insert_function(&key(1), 0x100..0x180, f.clone(), t0, u64::MAX);
        names.insert(&key(1), 0x200, g.clone(), t0, u64::MAX);
        for off in [0x100, 0x101, 0x17f] {
            assert_eq!(names.get(&key(1), off, t0), Some(&f), "{off:#x}");
        }
        assert_eq!(names.get(&key(1), 0x180, t0), None);
        assert_eq!(names.get(&key(1), 0xff, t0), None);
        assert_eq!(names.get(&key(2), 0x100, t0), None, "another file");
        assert_eq!(names.get(&key(1), 0x200, t0), Some(&g));
        assert_eq!(names.len(), 2);
        names.shrink_to(0);
        assert_eq!(names.get(&key(1), 0x140, t0), None);
        assert!(names.ranges.is_empty());
    }
}
