//! A target's executable mappings (address range → file and offset), seeded
//! from /proc/PID/maps and kept current from MMAP2 records, so user addresses
//! can be named even after the process is gone.
use std::path::PathBuf;
use std::sync::Arc;

/// What backs a mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    /// A file on disk, symbolized from its ELF data.
    File(Arc<PathBuf>),
    /// A kernel-provided or anonymous region, e.g. `[vdso]` or `[anon]`.
    Special(Arc<str>),
}

/// One executable mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    pub backing: Backing,
}

impl Mapping {
    /// Module name shown to users: the file name, or the special name.
    pub fn module(&self) -> String {
        match &self.backing {
            Backing::File(p) => p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| p.display().to_string()),
            Backing::Special(s) => s.to_string(),
        }
    }

    /// File offset of `addr` (which must lie in the mapping).
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr - self.start + self.pgoff
    }
}

/// The executable mappings of one process, sorted by start address.
#[derive(Debug, Default, Clone)]
pub struct ProcessMaps {
    maps: Vec<Mapping>,
}

impl ProcessMaps {
    /// The executable mappings /proc/PID/maps lists now.
    pub fn read(pid: u32) -> Result<ProcessMaps, procfs::ProcError> {
        use procfs::process::{MMPermissions, MMapPath};
        let mut out = ProcessMaps::default();
        for m in procfs::process::Process::new(pid as i32)?.maps()? {
            if !m.perms.contains(MMPermissions::EXECUTE) {
                continue;
            }
            let backing = match m.pathname {
                MMapPath::Path(p) => Backing::File(Arc::new(p)),
                MMapPath::Vdso => Backing::Special("[vdso]".into()),
                MMapPath::Vsyscall => Backing::Special("[vsyscall]".into()),
                MMapPath::Other(name) => Backing::Special(name.into()),
                _ => Backing::Special("[anon]".into()),
            };
            out.insert(Mapping {
                start: m.address.0,
                end: m.address.1,
                pgoff: m.offset,
                backing,
            });
        }
        Ok(out)
    }

    /// Add a mapping, replacing whatever it overlaps (as mmap does).
    pub fn insert(&mut self, new: Mapping) {
        if new.end <= new.start {
            return;
        }
        let mut kept = Vec::with_capacity(self.maps.len() + 2);
        for m in self.maps.drain(..) {
            if m.end <= new.start || m.start >= new.end {
                kept.push(m);
                continue;
            }
            if m.start < new.start {
                kept.push(Mapping {
                    end: new.start,
                    ..m.clone()
                });
            }
            if m.end > new.end {
                let cut = new.end - m.start;
                kept.push(Mapping {
                    start: new.end,
                    pgoff: m.pgoff + cut,
                    ..m
                });
            }
        }
        kept.push(new);
        kept.sort_by_key(|m| m.start);
        self.maps = kept;
    }

    /// The mapping containing `addr`.
    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        let i = self.maps.partition_point(|m| m.start <= addr);
        let m = self.maps.get(i.checked_sub(1)?)?;
        (addr < m.end).then_some(m)
    }

    /// Number of mappings.
    pub fn len(&self) -> usize {
        self.maps.len()
    }

    /// Whether there are no mappings.
    pub fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(start: u64, end: u64, pgoff: u64, name: &str) -> Mapping {
        Mapping {
            start,
            end,
            pgoff,
            backing: Backing::File(Arc::new(PathBuf::from(name))),
        }
    }

    #[test]
    fn find_and_offsets() {
        let mut maps = ProcessMaps::default();
        maps.insert(file(0x1000, 0x2000, 0x0, "/bin/a"));
        maps.insert(file(0x5000, 0x6000, 0x3000, "/lib/b.so"));
        assert_eq!(maps.find(0x1800).map(|m| m.module()), Some("a".into()));
        assert_eq!(
            maps.find(0x5010).map(|m| m.file_offset(0x5010)),
            Some(0x3010)
        );
        assert!(maps.find(0x2000).is_none());
        assert!(maps.find(0x10).is_none());
    }

    #[test]
    fn overlapping_insert_splits_old_mapping() {
        let mut maps = ProcessMaps::default();
        maps.insert(file(0x1000, 0x4000, 0x0, "/old"));
        maps.insert(file(0x2000, 0x3000, 0x0, "/new"));
        assert_eq!(maps.len(), 3);
        assert_eq!(maps.find(0x1500).map(|m| m.module()), Some("old".into()));
        assert_eq!(maps.find(0x2500).map(|m| m.module()), Some("new".into()));
        let tail = maps.find(0x3500).expect("tail kept");
        assert_eq!(
            (tail.module(), tail.file_offset(0x3500)),
            ("old".into(), 0x2500)
        );
    }

    #[test]
    fn reads_own_maps() {
        let maps = ProcessMaps::read(std::process::id()).expect("own maps");
        let here = reads_own_maps as fn() as usize as u64;
        assert!(matches!(
            maps.find(here).map(|m| &m.backing),
            Some(Backing::File(_))
        ));
    }
}
