//! Keeping a target's files readable: `Target` holds the process's /proc
//! directory open (so later look-ups reach this process or fail, never a
//! process that reused its pid) and knows its pid namespace and mount
//! namespace; `ModuleFile` is a mapped file opened through
//! `/proc/PID/map_files` or the target's root and held open while some
//! process's mappings (a session's, or continuous profiling's) use it, so
//! deleted, replaced and container binaries stay readable after the target
//! exits (until the session has ended: then only the files' load segments
//! are kept, which histograms need). `OpenFiles` shares one open file per
//! file version and path across every process and session, up to a bound.
//! Symbolization itself lives in `symbolize`.
use super::segments::Segments;
use crate::os::file_version::FileVersion;
use crate::process::symbolize::jitdump::{JitDump, JitDumpTable};
use crate::process::symbolize::perfmap::{PerfMap, PerfMapTable};
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Mapped files held open now, daemon-wide.
static HELD: AtomicU64 = AtomicU64::new(0);
/// Opens answered with a file already held (for another process or
/// session), and files not held because [`max_open`] were.
static SHARED: AtomicU64 = AtomicU64::new(0);
static NOT_HELD: AtomicU64 = AtomicU64::new(0);

/// The figures of the mapped files held: (held now, opens shared, files not
/// held for the bound).
pub fn open_file_stats() -> (u64, u64, u64) {
    (
        HELD.load(Ordering::Relaxed),
        SHARED.load(Ordering::Relaxed),
        NOT_HELD.load(Ordering::Relaxed),
    )
}

/// Most mapped files held open at once: half the daemon's descriptor limit
/// (the rest is for rings, connections, state files), at most 4096.
pub fn max_open() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        usize::try_from(limit / 2)
            .unwrap_or(usize::MAX)
            .clamp(64, 4096)
    })
}

/// The mapped files held open, by version and path, shared by every
/// process and session: a library mapped by 300 processes is held once,
/// and closed when the last mappings using it are let go of.
pub struct OpenFiles {
    files: Mutex<HashMap<(FileVersion, PathBuf), Weak<ModuleFile>>>,
}

/// The daemon's open mapped files.
pub static OPEN_FILES: std::sync::LazyLock<OpenFiles> = std::sync::LazyLock::new(OpenFiles::new);

impl OpenFiles {
    pub fn new() -> OpenFiles {
        OpenFiles {
            files: Mutex::new(HashMap::new()),
        }
    }

    /// The file `file` (just opened, mapped from `path`) as held: the one
    /// already held for its version and path (`file` is closed), else
    /// `file` held now, unless `max` files are held: then not held, to be
    /// read at `fallback` later.
    pub fn share(
        &self,
        path: &Path,
        file: File,
        fallback: impl FnOnce() -> PathBuf,
        max: usize,
    ) -> Arc<ModuleFile> {
        let Ok(meta) = file.metadata() else {
            return Arc::new(ModuleFile::opened(path.to_path_buf(), file));
        };
        let key = (FileVersion::of(&meta), path.to_path_buf());
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = files.get(&key).and_then(Weak::upgrade) {
            SHARED.fetch_add(1, Ordering::Relaxed);
            return held;
        }
        files.retain(|_, f| f.strong_count() > 0);
        if files.len() >= max {
            NOT_HELD.fetch_add(1, Ordering::Relaxed);
            return Arc::new(ModuleFile::unopened(path.to_path_buf(), fallback()));
        }
        let held = Arc::new(ModuleFile::opened(path.to_path_buf(), file));
        files.insert(key, Arc::downgrade(&held));
        held
    }

    /// Files held open now through this registry.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        let files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        files.values().filter(|f| f.strong_count() > 0).count()
    }
}

/// A mapped file as profd can read it.
#[derive(Debug)]
pub struct ModuleFile {
    /// The path as the target sees it (without a " (deleted)" suffix).
    pub path: PathBuf,
    /// A path profd can open now or later: `/proc/self/fd/N` while `fd` is
    /// held, else the best guess at the file from profd's view.
    pub readable: PathBuf,
    fd: Option<OwnedFd>,
    /// Its load segments, read once when first asked for.
    segments: OnceLock<Option<Segments>>,
}

impl PartialEq for ModuleFile {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path && self.readable == other.readable
    }
}

impl Eq for ModuleFile {}

impl Drop for ModuleFile {
    fn drop(&mut self) {
        if self.fd.is_some() {
            HELD.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl ModuleFile {
    /// A file held open: readable through /proc/self/fd for as long as it lives.
    pub fn opened(path: PathBuf, file: File) -> ModuleFile {
        let fd = OwnedFd::from(file);
        HELD.fetch_add(1, Ordering::Relaxed);
        ModuleFile {
            path,
            readable: PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())),
            fd: Some(fd),
            segments: OnceLock::new(),
        }
    }

    /// A file that could not be opened; `readable` is where to try later.
    pub fn unopened(path: PathBuf, readable: PathBuf) -> ModuleFile {
        ModuleFile {
            path,
            readable,
            fd: None,
            segments: OnceLock::new(),
        }
    }

    /// The file's load segments (None if it is not a readable ELF file).
    pub fn segments(&self) -> Option<&Segments> {
        self.segments
            .get_or_init(|| Segments::read(&self.readable))
            .as_ref()
    }

    /// This file with its load segments read and its descriptor closed: what
    /// an ended session keeps.
    pub fn closed(&self) -> ModuleFile {
        let segments = OnceLock::from(self.segments().cloned());
        ModuleFile {
            path: self.path.clone(),
            readable: self.path.clone(),
            fd: None,
            segments,
        }
    }

    /// Whether profd holds the file open.
    pub fn is_open(&self) -> bool {
        self.fd.is_some()
    }

    /// The file's name, shown as the module of its functions.
    pub fn module(&self) -> String {
        module_name(&self.path)
    }
}

/// The file name of `path`, or the whole path when it has none.
pub fn module_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// A mapped path without the " (deleted)" the kernel appends to unlinked files.
pub fn undeleted(path: &Path) -> PathBuf {
    let s = path.as_os_str().to_string_lossy();
    match s.strip_suffix(" (deleted)") {
        Some(stripped) => PathBuf::from(stripped),
        None => path.to_path_buf(),
    }
}

/// The target process, reachable through its /proc directory while it lives.
#[derive(Debug)]
pub struct Target {
    pub pid: u32,
    /// The pid as the target sees it (its innermost pid namespace).
    pub ns_pid: u32,
    /// Whether the target shares profd's mount namespace (same paths).
    pub same_mounts: bool,
    proc_dir: Option<File>,
    /// The owner of its /proc directory: its effective user (root when it
    /// is not dumpable).
    uid: Option<u32>,
    /// The target's /tmp, opened at its first perf map look-up and held: a
    /// map written as the target exits is read through it once the
    /// target's /proc entry and root are gone.
    tmp_dir: OnceLock<Option<Arc<File>>>,
    perf_map: PerfMap,
    jit_dump: JitDump,
    /// The error (EMFILE or ENFILE) if /proc/PID could not be opened for
    /// want of descriptors.
    pub out_of_fds: Option<i32>,
}

/// `dir` as held: the one already held for the same directory (`dir` is
/// closed), so that the processes of one mount namespace hold their /tmp
/// once.
fn shared_dir(dir: File) -> Option<Arc<File>> {
    type Dirs = Mutex<HashMap<(u64, u64), Weak<File>>>;
    static DIRS: std::sync::LazyLock<Dirs> = std::sync::LazyLock::new(Default::default);
    let meta = dir.metadata().ok()?;
    let key = (meta.dev(), meta.ino());
    let mut dirs = DIRS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(held) = dirs.get(&key).and_then(Weak::upgrade) {
        return Some(held);
    }
    dirs.retain(|_, d| d.strong_count() > 0);
    let held = Arc::new(dir);
    dirs.insert(key, Arc::downgrade(&held));
    Some(held)
}

/// Whether the process or thread `id` still exists (a zombie does), asked
/// of the kernel without looking it up in /proc. A process that has
/// exited has its /proc entries torn down by its exit; a look-up meeting
/// them in that state waits, spinning, until the exit is done, which for a
/// low-priority process on a busy machine takes seconds. The entries of
/// processes seen gone are never looked up.
pub fn alive(id: u32) -> bool {
    let Some(pid) = i32::try_from(id)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    rustix::process::test_kill_process(pid) != Err(rustix::io::Errno::SRCH)
}

fn last_nspid(status: &str) -> Option<u32> {
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line["NSpid:".len()..]
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

impl Target {
    /// Open /proc/PID and note what the target's paths mean to profd.
    pub fn open(pid: u32) -> Target {
        let dir = match alive(pid) {
            true => File::open(format!("/proc/{pid}")),
            false => Err(std::io::Error::from_raw_os_error(
                rustix::io::Errno::SRCH.raw_os_error(),
            )),
        };
        Target::of_dir(pid, dir)
    }

    /// The same process anew (after its exec: its owner may have changed),
    /// through the /proc directory held open, never looking its pid up in
    /// /proc again: a look-up meeting the entries of a process that has
    /// just exited waits, spinning,
    /// until the exit is done (see [`alive`]). None when no directory is
    /// held.
    pub fn reopen(&self) -> Option<Target> {
        let dir = self.proc_dir.as_ref()?;
        let path = format!("/proc/self/fd/{}", dir.as_raw_fd());
        Some(Target::of_dir(self.pid, File::open(path)))
    }

    fn of_dir(pid: u32, proc_dir: std::io::Result<File>) -> Target {
        let mut target = Target {
            pid,
            ns_pid: pid,
            same_mounts: true,
            out_of_fds: proc_dir
                .as_ref()
                .err()
                .filter(|e| crate::os::fds::exhausted(e))
                .and_then(|e| e.raw_os_error()),
            uid: proc_dir
                .as_ref()
                .ok()
                .and_then(|d| d.metadata().ok())
                .map(|m| m.uid()),
            proc_dir: proc_dir.ok(),
            tmp_dir: OnceLock::new(),
            perf_map: PerfMap::default(),
            jit_dump: JitDump::default(),
        };
        if let Some(ns_pid) = std::fs::read_to_string(target.proc_path("status"))
            .ok()
            .as_deref()
            .and_then(last_nspid)
        {
            target.ns_pid = ns_pid;
        }
        let theirs = std::fs::read_link(target.proc_path("ns/mnt"));
        let ours = std::fs::read_link("/proc/self/ns/mnt");
        target.same_mounts = match (theirs, ours) {
            (Ok(a), Ok(b)) => a == b,
            _ => true,
        };
        target
    }

    /// `rel` under this process's /proc directory; fails once it has exited.
    /// Looked up by pid only when descriptors ran out as it was opened: a
    /// process whose directory could not be opened otherwise is gone, and
    /// its path fails at once (see [`alive`]).
    pub fn proc_path(&self, rel: &str) -> PathBuf {
        match &self.proc_dir {
            Some(dir) => PathBuf::from(format!("/proc/self/fd/{}/{rel}", dir.as_raw_fd())),
            None if self.out_of_fds.is_some() => PathBuf::from(format!("/proc/{}/{rel}", self.pid)),
            // No descriptor has this number.
            None => Path::new("/proc/self/fd/-1").join(rel),
        }
    }

    /// `path` (absolute, as the target sees it) through the target's root.
    pub fn in_root(&self, path: &Path) -> PathBuf {
        let rel = path.strip_prefix("/").unwrap_or(path);
        self.proc_path("root").join(rel)
    }

    /// Open the file mapped at `start..end` from `path`: through map_files
    /// (the very file mapped, even if deleted or replaced; needs root), else
    /// through the target's root. The error is the last, unless one said
    /// that descriptors ran out.
    pub fn open_mapped(&self, start: u64, end: u64, path: &Path) -> std::io::Result<File> {
        let mut short = None;
        let mut note = |e: std::io::Error| {
            if crate::os::fds::exhausted(&e) && short.is_none() {
                short = Some(e);
            }
        };
        let dir = self.proc_path("map_files");
        match File::open(dir.join(format!("{start:x}-{end:x}"))) {
            Ok(f) => return Ok(f),
            Err(e) => note(e),
        }
        // The mapping may have been merged or split since: find its entry.
        match std::fs::read_dir(&dir) {
            Err(e) => note(e),
            Ok(entries) => {
                for entry in entries.flatten() {
                    let name = entry.file_name();
                    let Some((a, b)) = name.to_str().and_then(|n| n.split_once('-')) else {
                        continue;
                    };
                    let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16))
                    else {
                        continue;
                    };
                    if a <= start && start < b {
                        match File::open(entry.path()) {
                            Ok(f) => return Ok(f),
                            Err(e) => note(e),
                        }
                    }
                }
            }
        }
        File::open(self.in_root(path)).map_err(|e| short.unwrap_or(e))
    }

    /// Where to look for `path` later if it cannot be held open now.
    pub fn fallback_path(&self, path: &Path) -> PathBuf {
        if self.same_mounts {
            path.to_path_buf()
        } else {
            self.in_root(path)
        }
    }

    /// The target's perf map (`/tmp/perf-<pid>.map` in its mount namespace,
    /// `<pid>` as the target sees it), re-read when it changed; after exit,
    /// the file in the /tmp held since the first look-up, or else the last
    /// file held. As perf does, only a regular file owned by the target's
    /// user or root is read (anyone may create files in /tmp), and not
    /// through a symbolic link.
    pub fn perf_map(&self) -> Arc<PerfMapTable> {
        self.perf_map.table(|| {
            let dir = self
                .tmp_dir
                .get_or_init(|| shared_dir(File::open(self.proc_path("root/tmp")).ok()?))
                .as_ref()?;
            let path = format!("/proc/self/fd/{}/perf-{}.map", dir.as_raw_fd(), self.ns_pid);
            // Non-blocking: a FIFO put in its place must not hang the reader.
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
                .open(path)
                .ok()?;
            let meta = file.metadata().ok()?;
            let owner_ok = meta.uid() == 0 || Some(meta.uid()) == self.uid;
            (meta.is_file() && owner_ok).then_some(file)
        })
    }

    /// The target's jitdump, read as far as it was written: the file its
    /// marker mapping `marker` (start, end, path) maps, opened at the first
    /// call that finds it and held, so that it stays readable after the
    /// target exits. Through map_files (the very file mapped), else through
    /// the target's root and not through a symbolic link; as for the perf
    /// map, only a regular file owned by the target's user or root is read.
    pub fn jit_dump(&self, marker: Option<(u64, u64, &Path)>) -> Arc<JitDumpTable> {
        self.jit_dump.table(|| {
            let (start, end, path) = marker?;
            let open = |path: PathBuf, flags| {
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NONBLOCK | flags)
                    .open(path)
            };
            let mapped = self
                .proc_path("map_files")
                .join(format!("{start:x}-{end:x}"));
            let file = open(mapped, 0)
                .or_else(|_| open(self.in_root(path), libc::O_NOFOLLOW))
                .ok()?;
            let meta = file.metadata().ok()?;
            let owner_ok = meta.uid() == 0 || Some(meta.uid()) == self.uid;
            (meta.is_file() && owner_ok).then_some(file)
        })
    }

    /// Whether a jitdump file is held open.
    pub fn holds_jit_dump(&self) -> bool {
        self.jit_dump.is_open()
    }

    /// Whether a perf map file is held open.
    pub fn holds_perf_map(&self) -> bool {
        self.perf_map.is_open()
    }

    /// Open the perf map file if there is one and none is held yet, so it
    /// stays readable after the target exits.
    pub fn hold_perf_map(&self) {
        if !self.perf_map.is_open() {
            let _ = self.perf_map();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reaped child is gone: its /proc entries are never looked up, and
    /// a target opened for it has paths that fail at once; a live
    /// process's are read through its directory, held open, also after
    /// `reopen`.
    #[test]
    fn gone_processes_are_not_looked_up_in_proc() {
        let me = std::process::id();
        assert!(alive(me));
        let target = Target::open(me);
        assert!(target.proc_path("maps").starts_with("/proc/self/fd/"));
        let again = target.reopen().expect("a held directory");
        assert_eq!(again.pid, me);
        assert!(std::fs::read_to_string(again.proc_path("maps")).is_ok());

        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!alive(pid));
        assert!(!alive(u32::MAX));
        let gone = Target::open(pid);
        assert!(gone.reopen().is_none());
        assert_eq!(gone.proc_path("maps"), Path::new("/proc/self/fd/-1/maps"));
        assert!(std::fs::read_to_string(gone.proc_path("maps")).is_err());
    }

    #[test]
    fn nspid_is_the_innermost() {
        assert_eq!(last_nspid("Name:\tx\nNSpid:\t4242\t7\n"), Some(7));
        assert_eq!(last_nspid("NSpid:\t12\n"), Some(12));
        assert_eq!(last_nspid("Pid:\t12\n"), None);
    }

    #[test]
    fn deleted_suffix_is_dropped() {
        assert_eq!(
            undeleted(Path::new("/tmp/a.out (deleted)")),
            Path::new("/tmp/a.out")
        );
        assert_eq!(undeleted(Path::new("/bin/ls")), Path::new("/bin/ls"));
    }

    #[test]
    fn a_perf_map_written_as_the_target_exits_is_read_after_the_exit() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let target = Target::open(child.id());
        // No map yet: the first look-up opens the target's /tmp.
        assert!(target.perf_map().is_empty());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!target.proc_path("root/tmp").exists(), "its root is gone");
        let path = format!("/tmp/perf-{}.map", child.id());
        std::fs::write(&path, "1000 10 written_at_exit\n").unwrap();
        let table = target.perf_map();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(table.lookup(0x1008).unwrap().as_ref(), "written_at_exit");
    }

    #[test]
    fn a_perf_map_of_another_user_or_behind_a_link_is_not_read() {
        let me = Target::open(std::process::id());
        let path = format!("/tmp/perf-{}.map", std::process::id());
        let other = std::env::temp_dir().join(format!("profd-perfmap-link-{}", std::process::id()));
        std::fs::write(&other, "1000 10 elsewhere\n").unwrap();
        std::os::unix::fs::symlink(&other, &path).unwrap();
        assert!(me.perf_map().is_empty(), "read through a link");
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "1000 10 theirs\n").unwrap();
        std::os::unix::fs::chown(&path, Some(4242), None).expect("chown (run as root)");
        let theirs = me.perf_map();
        std::os::unix::fs::chown(&path, Some(me.uid.unwrap()), None).unwrap();
        std::fs::write(&path, "1000 10 mine\n2000 10 more\n").unwrap();
        let mine = me.perf_map();
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_file(&other).unwrap();
        assert!(theirs.is_empty(), "read a map another user owns");
        assert_eq!(mine.lookup(0x1000).unwrap().as_ref(), "mine");
    }

    /// A jitdump is read where its marker mapping says (here through the
    /// target's root: no such mapping), only if owned by the target's user
    /// or root, and never through a link.
    #[test]
    fn a_jitdump_of_another_user_or_behind_a_link_is_not_read() {
        use crate::process::symbolize::jitdump::tests::{header, load};
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("profd-jitdump-owner-{pid}"));
        std::fs::create_dir_all(&dir).unwrap();
        let (path, other) = (dir.join("jit-1.dump"), dir.join("elsewhere"));
        let mut bytes = header();
        bytes.extend(load(0x1000, 0x10, 1, "mine"));
        std::fs::write(&other, &bytes).unwrap();
        std::os::unix::fs::symlink(&other, &path).unwrap();
        let marker = |p: &Path| Some((1, 2, p.to_path_buf()));
        let read = |p: &Path| {
            let m = marker(p);
            let m = m.as_ref().map(|(a, b, p)| (*a, *b, p.as_path()));
            Target::open(pid).jit_dump(m)
        };
        let linked = read(&path);
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        std::os::unix::fs::chown(&path, Some(4242), None).expect("chown (run as root)");
        let theirs = read(&path);
        std::os::unix::fs::chown(&path, Some(0), None).unwrap();
        let mine = read(&path);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(linked.is_empty(), "read through a link");
        assert!(theirs.is_empty(), "read a jitdump another user owns");
        assert_eq!(&*mine.lookup(0x1008).unwrap().name, "mine");
    }

    #[test]
    fn own_process_paths_resolve_through_the_held_directory() {
        let me = Target::open(std::process::id());
        assert!(me.same_mounts);
        assert_eq!(me.ns_pid, std::process::id());
        assert!(me
            .proc_path("status")
            .to_string_lossy()
            .starts_with("/proc/self/fd/"));
        assert!(me.in_root(Path::new("/proc/self/exe")).exists());
    }
}
