//! A target's executable mappings (address range → file and offset), seeded
//! from /proc/PID/maps and kept current from MMAP2 records, with each mapped
//! file opened once and held (see `files`), so user addresses can be named
//! even after the process is gone or its binaries were deleted.
mod files;
mod sections;
mod segments;

use crate::os::fds::OutOfFds;
use crate::process::symbolize::jitdump::JitDumpTable;
use crate::process::symbolize::jitnames::JitNames;
use crate::process::symbolize::perfmap::PerfMapTable;
pub use files::{alive, module_name, open_file_stats, undeleted, ModuleFile, Target, OPEN_FILES};
pub use sections::{build_id_hex, gnu_build_id, Section, Sections};
pub use segments::{Load, Segments};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What backs a mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    /// A file on disk, symbolized from its ELF data (the path as the target
    /// sees it).
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
    /// The opened file, once `ProcessMaps::resolve_new` has run.
    file: Option<Arc<ModuleFile>>,
}

impl Mapping {
    /// A mapping of `backing` (not yet opened).
    pub fn new(start: u64, end: u64, pgoff: u64, backing: Backing) -> Mapping {
        Mapping {
            start,
            end,
            pgoff,
            backing,
            file: None,
        }
    }

    /// Module name shown to users: the file name, or the special name.
    pub fn module(&self) -> String {
        match &self.backing {
            Backing::File(p) => module_name(p),
            Backing::Special(s) => s.to_string(),
        }
    }

    /// File offset of `addr` (which must lie in the mapping).
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr - self.start + self.pgoff
    }

    /// The mapped file as profd holds it (None for special mappings and
    /// before `ProcessMaps::resolve_new`).
    pub fn file(&self) -> Option<&Arc<ModuleFile>> {
        self.file.as_ref()
    }
}

/// Whether code in a mapping of `backing` may be JIT output named by a perf
/// map: anonymous memory and other special regions, but not the kernel's own.
pub fn is_jit_candidate(backing: &Backing) -> bool {
    matches!(backing, Backing::Special(name) if !matches!(name.as_ref(), "[vdso]" | "[vsyscall]" | "[vvar]"))
}

/// The runtime a process runs whose stacks outgrow the default stack copy
/// (JIT frames are large, and deep): a JVM (libjvm.so mapped, or the `java`
/// launcher's name) or node (its name, or libnode.so mapped). `comm` is the
/// process's name; `profctl run` gives its held command the program's name
/// before it attaches.
pub fn deep_stack_runtime(pid: u32, comm: &str) -> Option<&'static str> {
    match comm {
        "java" => return Some("a JVM"),
        "node" | "nodejs" => return Some("node"),
        _ => {}
    }
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    maps.lines().find_map(|line| {
        let name = line.rsplit('/').next()?;
        match name {
            "libjvm.so" => Some("a JVM"),
            _ if name.starts_with("libnode.so") => Some("node"),
            _ => None,
        }
    })
}

/// How often `resolve_new` looks for a perf map that has not appeared yet.
const PERF_MAP_RETRY: Duration = Duration::from_millis(200);

/// The executable mappings of one process, sorted by start address.
#[derive(Debug, Default, Clone)]
pub struct ProcessMaps {
    maps: Vec<Mapping>,
    target: Option<Arc<Target>>,
    /// Files that would not open (or were not held, see
    /// [`files::max_open`]), by path; those opened are shared daemon-wide
    /// ([`OPEN_FILES`]).
    unopened: HashMap<PathBuf, Arc<ModuleFile>>,
    /// Whether some mapping has not been through `resolve_new`.
    unresolved: bool,
    perf_map_tried: Option<Instant>,
    /// The perf map as last read before the target was let go of (see
    /// `release_process`).
    perf_map_kept: Option<Arc<PerfMapTable>>,
    /// The jitdump as last read before the target was let go of.
    jit_dump_kept: Option<Arc<JitDumpTable>>,
    /// EMFILE or ENFILE, if a file could not be opened for want of
    /// descriptors.
    out_of_fds: Option<i32>,
}

impl ProcessMaps {
    /// The executable mappings /proc/PID/maps lists now, their files opened.
    pub fn read(pid: u32) -> Result<ProcessMaps, procfs::ProcError> {
        ProcessMaps::read_sharing(pid, &ProcessMaps::default())
    }

    /// As [`ProcessMaps::read`], reusing the files `known` holds (and
    /// sharing those opened now with it).
    pub fn read_sharing(pid: u32, known: &ProcessMaps) -> Result<ProcessMaps, procfs::ProcError> {
        use procfs::process::{MMPermissions, MMapPath};
        use procfs::FromRead;
        let mut out = ProcessMaps::default();
        // After an exec, the process's own /proc directory, held open.
        let target = known.target.as_ref().filter(|t| t.pid == pid);
        out.target = target.and_then(|t| t.reopen()).map(Arc::new);
        let maps = match &out.target {
            Some(t) => procfs::process::MemoryMaps::from_file(t.proc_path("maps"))?,
            None if !files::alive(pid) => return Err(procfs::ProcError::NotFound(None)),
            None => procfs::process::Process::new(pid as i32)?.maps()?,
        };
        for m in maps {
            if !m.perms.contains(MMPermissions::EXECUTE) {
                continue;
            }
            let backing = match m.pathname {
                MMapPath::Path(p) => Backing::File(Arc::new(undeleted(&p))),
                MMapPath::Vdso => Backing::Special("[vdso]".into()),
                MMapPath::Vsyscall => Backing::Special("[vsyscall]".into()),
                MMapPath::Other(name) => Backing::Special(name.into()),
                _ => Backing::Special("[anon]".into()),
            };
            out.insert(Mapping::new(m.address.0, m.address.1, m.offset, backing));
        }
        out.resolve_new(pid);
        Ok(out)
    }

    /// These mappings as a process forked from this one starts with: the
    /// same files, its own /proc entry (opened by the next `resolve_new`).
    pub fn forked(&self) -> ProcessMaps {
        ProcessMaps {
            target: None,
            perf_map_tried: None,
            perf_map_kept: None,
            jit_dump_kept: None,
            out_of_fds: None,
            ..self.clone()
        }
    }

    /// [`ProcessMaps::read_sharing`] for a session: Err, saying which limit
    /// to raise, when descriptors ran out reading the maps or opening their
    /// files (the session would name nothing); maps that cannot be read for
    /// another reason (the process is gone) are empty.
    pub fn read_for_session(pid: u32, known: &ProcessMaps) -> Result<ProcessMaps, OutOfFds> {
        match ProcessMaps::read_sharing(pid, known) {
            Ok(maps) => maps.short_of_fds(pid).map_or(Ok(maps), Err),
            Err(procfs::ProcError::Io(source, _)) if crate::os::fds::exhausted(&source) => {
                Err(OutOfFds {
                    doing: format!("reading /proc/{pid}/maps"),
                    source,
                })
            }
            Err(_) => Ok(ProcessMaps::default()),
        }
    }

    /// Why some file of process `pid` (or its /proc entry) could not be
    /// opened, if it was because the daemon or the system ran out of
    /// descriptors: the message says which limit to raise.
    pub fn short_of_fds(&self, pid: u32) -> Option<OutOfFds> {
        let errno = self
            .out_of_fds
            .or_else(|| self.target.as_ref().and_then(|t| t.out_of_fds))?;
        Some(OutOfFds {
            doing: format!("opening the files process {pid} maps"),
            source: std::io::Error::from_raw_os_error(errno),
        })
    }

    /// Close the process's /proc entry, perf map and jitdump, reading them a
    /// last time (a runtime may write them as it exits) and keeping their
    /// tables; the mapped files stay open. For processes that have exited.
    pub fn release_process(&mut self) {
        if let Some(target) = self.target.take() {
            if self.has_jit_code() {
                self.perf_map_kept = Some(target.perf_map()).filter(|t| !t.is_empty());
            }
            let dump = target.jit_dump(self.jit_marker());
            self.jit_dump_kept = Some(dump).filter(|t| !t.is_empty());
        }
    }

    /// The mapping a runtime writing a jitdump makes of it (its marker,
    /// which names the file: `jit-<pid>.dump`): the one of the target's own
    /// pid first.
    fn jit_marker(&self) -> Option<(u64, u64, &Path)> {
        let ns_pid = self.target.as_ref().map(|t| t.ns_pid);
        let mut markers = self.maps.iter().filter_map(|m| {
            let Backing::File(path) = &m.backing else {
                return None;
            };
            let name = path.file_name()?.to_str()?;
            let pid: u32 = name
                .strip_prefix("jit-")?
                .strip_suffix(".dump")?
                .parse()
                .ok()?;
            Some((pid, (m.start, m.end, path.as_path())))
        });
        let first = markers.next()?;
        let own = std::iter::once(first)
            .chain(markers)
            .find(|(pid, _)| Some(*pid) == ns_pid);
        Some(own.unwrap_or(first).1)
    }

    /// The jitdump naming (and giving unwind tables for) the process's JIT
    /// code: as it is now while the process is held, else as last read.
    pub fn jit_dump(&self) -> Option<Arc<JitDumpTable>> {
        match &self.target {
            Some(target) => Some(target.jit_dump(self.jit_marker())),
            None => self.jit_dump_kept.clone(),
        }
    }

    /// What names the process's JIT code: its perf map and its jitdump.
    pub fn jit_names(&self) -> JitNames {
        JitNames {
            perf_map: self.perf_map(),
            jit_dump: self.jit_dump(),
        }
    }

    /// The perf map naming the process's JIT code: as it is now while the
    /// process is held (see `resolve_new`), else as last read.
    pub fn perf_map(&self) -> Option<Arc<PerfMapTable>> {
        match &self.target {
            Some(target) => Some(target.perf_map()),
            None => self.perf_map_kept.clone(),
        }
    }

    fn has_jit_code(&self) -> bool {
        self.maps.iter().any(|m| is_jit_candidate(&m.backing))
    }

    /// Close the process's /proc entry and every mapped file, keeping the
    /// files' load segments (histograms read them). For ended sessions,
    /// whose addresses are all named.
    pub fn release_files(&mut self) {
        self.target = None;
        self.perf_map_kept = None;
        self.jit_dump_kept = None;
        self.unopened.clear();
        let mut closed: HashMap<*const ModuleFile, Arc<ModuleFile>> = HashMap::new();
        for m in &mut self.maps {
            if let Some(file) = &mut m.file {
                let key = Arc::as_ptr(file);
                *file = closed
                    .entry(key)
                    .or_insert_with(|| Arc::new(file.closed()))
                    .clone();
            }
        }
    }

    /// The target process these mappings belong to (after `read` or
    /// `resolve_new`).
    pub fn target(&self) -> Option<&Arc<Target>> {
        self.target.as_ref()
    }

    /// Open the files of mappings added since the last call (each file
    /// version held once daemon-wide, while some maps use it), and the target's perf map while it
    /// has anonymous executable memory. Call it in the session actor after
    /// inserting new mappings; it is cheap when there is nothing new.
    pub fn resolve_new(&mut self, pid: u32) {
        let needs_perf_map = self.target.as_ref().is_some_and(|t| !t.holds_perf_map())
            && self
                .perf_map_tried
                .is_none_or(|t| t.elapsed() >= PERF_MAP_RETRY)
            && self.has_jit_code();
        if !self.unresolved && self.target.is_some() && !needs_perf_map {
            return;
        }
        let target = self
            .target
            .get_or_insert_with(|| Arc::new(Target::open(pid)))
            .clone();
        if self.unresolved {
            self.unresolved = false;
            let mut maps = std::mem::take(&mut self.maps);
            for m in maps.iter_mut().filter(|m| m.file.is_none()) {
                if let Backing::File(path) = &m.backing {
                    m.file = Some(self.open(&target, m.start, m.end, path));
                }
            }
            self.maps = maps;
        }
        if self.has_jit_code() && !target.holds_perf_map() {
            self.perf_map_tried = Some(Instant::now());
            target.hold_perf_map();
        }
        if !target.holds_jit_dump() {
            if let Some(marker) = self.jit_marker() {
                target.jit_dump(Some(marker));
            }
        }
    }

    fn open(&mut self, target: &Target, start: u64, end: u64, path: &Path) -> Arc<ModuleFile> {
        let opened = target.open_mapped(start, end, path);
        if let Err(e) = &opened {
            if crate::os::fds::exhausted(e) {
                self.out_of_fds = e.raw_os_error();
            }
        }
        if let Ok(file) = opened {
            return OPEN_FILES.share(path, file, || target.fallback_path(path), files::max_open());
        }
        self.unopened
            .entry(path.to_path_buf())
            .or_insert_with(|| {
                tracing::debug!(path = %path.display(), pid = target.pid, "cannot open a mapped file");
                Arc::new(ModuleFile::unopened(
                    path.to_path_buf(),
                    target.fallback_path(path),
                ))
            })
            .clone()
    }

    /// Add a mapping, replacing whatever it overlaps (as mmap does).
    pub fn insert(&mut self, mut new: Mapping) {
        if new.end <= new.start {
            return;
        }
        if let Backing::File(path) = &new.backing {
            if path.as_os_str().to_string_lossy().ends_with(" (deleted)") {
                new.backing = Backing::File(Arc::new(undeleted(path)));
            }
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
        if new.file.is_none() && matches!(new.backing, Backing::File(_)) {
            self.unresolved = true;
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

    /// The mappings, by start address.
    pub fn iter(&self) -> impl Iterator<Item = &Mapping> {
        self.maps.iter()
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
    use super::files::OpenFiles;
    use super::*;

    fn file(start: u64, end: u64, pgoff: u64, name: &str) -> Mapping {
        Mapping::new(
            start,
            end,
            pgoff,
            Backing::File(Arc::new(PathBuf::from(name))),
        )
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
    fn reads_own_maps_and_holds_each_file_once() {
        use std::os::unix::fs::MetadataExt;
        let maps = ProcessMaps::read(std::process::id()).expect("own maps");
        let here = reads_own_maps_and_holds_each_file_once as fn() as usize as u64;
        let m = maps.find(here).expect("own code is mapped");
        assert!(matches!(&m.backing, Backing::File(_)));
        let file = m.file().expect("opened");
        assert!(file.is_open());
        assert!(file.readable.starts_with("/proc/self/fd/"), "{file:?}");
        let (held, exe) = (
            std::fs::metadata(&file.readable).unwrap(),
            std::fs::metadata("/proc/self/exe").unwrap(),
        );
        assert_eq!((held.dev(), held.ino()), (exe.dev(), exe.ino()));
        assert_eq!(file.path, std::env::current_exe().unwrap());
        // Every mapping of a file shares the one opened file.
        for other in maps.iter().filter(|o| o.backing == m.backing) {
            assert!(Arc::ptr_eq(other.file().unwrap(), file));
        }
        // map_files is found by containment when the exact range differs.
        let target = maps.target().unwrap();
        assert!(target
            .open_mapped(m.start + 4096, m.end, Path::new("/nonexistent"))
            .is_ok());
    }

    #[test]
    fn maps_read_sharing_hold_each_file_once() {
        let me = std::process::id();
        let first = ProcessMaps::read(me).unwrap();
        let again = ProcessMaps::read_sharing(me, &first).unwrap();
        let mut files = 0;
        for m in again
            .iter()
            .filter(|m| m.file().is_some_and(|f| f.is_open()))
        {
            let theirs = first.find(m.start).and_then(|f| f.file()).unwrap();
            assert!(Arc::ptr_eq(m.file().unwrap(), theirs), "{m:?}");
            files += 1;
        }
        assert!(files > 0);
    }

    /// Two processes of one program hold its files once: the same open
    /// file, one descriptor.
    #[test]
    fn processes_of_one_program_share_one_open_file() {
        let mut a = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let mut b = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        // Once each has exec'd sleep and the loader has mapped libc.
        let read = |pid: u32| loop {
            let maps = ProcessMaps::read(pid).unwrap();
            let mapped = |name: &str| maps.iter().any(|m| m.module().starts_with(name));
            if mapped("sleep") && mapped("libc.so") {
                break maps;
            }
            std::thread::yield_now();
        };
        let (ma, mb) = (read(a.id()), read(b.id()));
        let mut shared = 0;
        for m in ma.iter().filter(|m| m.file().is_some_and(|f| f.is_open())) {
            let theirs = mb
                .iter()
                .find(|o| o.backing == m.backing && o.file().is_some())
                .and_then(|o| o.file())
                .unwrap_or_else(|| panic!("{m:?} not in the other process"));
            assert!(Arc::ptr_eq(m.file().unwrap(), theirs), "{m:?}");
            shared += 1;
        }
        assert!(shared >= 2, "sleep and libc at least: {shared}");
        for c in [&mut a, &mut b] {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// At most `max` files are held; one held is shared and closed when
    /// the last maps using it let go; then another may be held.
    #[test]
    fn open_files_are_bounded_and_closed_when_unused() {
        let files = OpenFiles::new();
        let open = |p: &str| std::fs::File::open(p).unwrap();
        let fallback = || PathBuf::from("/nonexistent");
        let ls = files.share(Path::new("/bin/ls"), open("/bin/ls"), fallback, 1);
        assert!(ls.is_open());
        let again = files.share(Path::new("/bin/ls"), open("/bin/ls"), fallback, 1);
        assert!(Arc::ptr_eq(&ls, &again));
        assert_eq!(files.held(), 1);
        let cat = files.share(Path::new("/bin/cat"), open("/bin/cat"), fallback, 1);
        assert!(!cat.is_open(), "over the bound");
        assert_eq!(cat.readable, Path::new("/nonexistent"));
        drop((ls, again));
        assert_eq!(files.held(), 0, "closed with its last user");
        let cat = files.share(Path::new("/bin/cat"), open("/bin/cat"), fallback, 1);
        assert!(cat.is_open());
    }

    #[test]
    fn released_files_are_closed_and_keep_their_segments() {
        let mut maps = ProcessMaps::read(std::process::id()).unwrap();
        let here = released_files_are_closed_and_keep_their_segments as fn() as usize as u64;
        let offset = maps.find(here).unwrap().file_offset(here);
        let held = maps.find(here).unwrap().file().unwrap().clone();
        let vaddr = held.segments().unwrap().vaddr(offset);
        assert!(vaddr.is_some());
        maps.release_files();
        assert!(maps.target().is_none());
        for m in maps.iter() {
            assert!(m.file().is_none_or(|f| !f.is_open()), "{m:?} still open");
        }
        let closed = maps.find(here).unwrap().file().unwrap();
        assert_eq!(closed.segments().unwrap().vaddr(offset), vaddr);
        drop(held);
    }

    #[test]
    fn the_jitdump_marker_is_found_by_its_name() {
        let mut maps = ProcessMaps::default();
        maps.insert(file(0x1000, 0x2000, 0, "/bin/node"));
        maps.insert(file(0x3000, 0x4000, 0, "/tmp/jit-x.dump"));
        assert!(maps.jit_marker().is_none());
        maps.insert(file(0x5000, 0x6000, 0, "/work/jit-77.dump"));
        let marker = maps.jit_marker().map(|(a, b, p)| (a, b, p.to_path_buf()));
        assert_eq!(marker, Some((0x5000, 0x6000, "/work/jit-77.dump".into())));
    }

    #[test]
    fn deleted_files_keep_their_path_and_new_ones_await_opening() {
        let mut maps = ProcessMaps::default();
        maps.insert(file(0x1000, 0x2000, 0, "/tmp/a.out (deleted)"));
        let m = maps.find(0x1000).unwrap();
        assert_eq!(m.backing, Backing::File(Arc::new("/tmp/a.out".into())));
        assert_eq!(m.module(), "a.out");
        assert!(m.file().is_none());
    }
}
