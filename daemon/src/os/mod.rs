//! The daemon's OS layer, the only module allowed `unsafe`: perf events
//! and their rings (`perf`), the BPF program reading interpreter frames
//! (`bpf`), user namespaces (`userns`), the kernel's
//! settings (`sysctl`), running out of file descriptors (`fds`), a file's
//! identity and version (`file_version`), and here process file
//! descriptors (and signalling through them), giving a file to a user, the
//! C allocator's settings, and reading the caller's own registers and stack.
pub mod bpf;
pub mod fds;
pub mod file_version;
pub mod perf;
pub mod sysctl;
pub mod userns;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// A process file descriptor (pidfd): a handle on one process that becomes
/// readable when it exits, immune to PID reuse.
#[derive(Debug)]
pub struct PidFd(OwnedFd);

impl PidFd {
    /// Open a pidfd for the thread-group leader `pid`.
    pub fn open(pid: u32) -> io::Result<PidFd> {
        let pid = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
        let fd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())?;
        Ok(PidFd(fd))
    }

    /// Whether the process has exited (the pidfd polls readable), now.
    pub fn exited(&self) -> bool {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(&self.0, PollFlags::IN)];
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        matches!(poll(&mut fds, Some(&now)), Ok(n) if n > 0)
    }

    /// Send the process SIGQUIT (never another process that reused its
    /// pid). Only for a JVM whose attach mechanism is on: SIGQUIT ends
    /// most other programs, and makes a JVM without it print its threads.
    pub fn quit(&self) -> io::Result<()> {
        rustix::process::pidfd_send_signal(&self.0, rustix::process::Signal::QUIT)?;
        Ok(())
    }

    /// Register with tokio's reactor: readable once the process has exited.
    pub fn into_async(self) -> io::Result<tokio::io::unix::AsyncFd<PidFd>> {
        // SAFETY: PidFd owns its fd (an OwnedFd closed only on drop) and
        // `as_raw_fd` always returns that same fd.
        unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(self, tokio::io::Interest::READABLE)
        }
        .map_err(io::Error::from)
    }
}

impl AsRawFd for PidFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Run `f` on a thread of its own whose effective user and group are `uid`
/// and `gid`, so that the kernel checks what it does as it checks that
/// user's own calls. Linux keeps credentials per thread (rustix sets them
/// on the calling thread only, not process-wide as libc's setresuid does):
/// the daemon's other threads keep theirs, and these end with the thread.
/// Needs CAP_SETGID and CAP_SETUID.
pub fn as_user<T: Send>(uid: u32, gid: u32, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    use rustix::thread::{set_thread_res_gid, set_thread_res_uid};
    std::thread::scope(|scope| {
        let thread = scope.spawn(|| {
            set_thread_res_gid(None, rustix::fs::Gid::from_raw(gid), None)?;
            set_thread_res_uid(None, rustix::fs::Uid::from_raw(uid), None)?;
            Ok(f())
        });
        thread.join().unwrap_or_else(|_| {
            Err(io::Error::other(
                "the thread acting as another user panicked",
            ))
        })
    })
}

/// Keep the daemon's heap compact: glibc's malloc raises its mmap threshold
/// each time a large block is freed, after which the batches of stack
/// copies (hundreds of KiB, short-lived) come from the heap and leave holes
/// between the long-lived stack tables; and it keeps up to 8 arenas per CPU.
/// With large blocks always mmap'd and one arena per CPU, a daemon with ten
/// stack-copy sessions holds about 8 MiB less (`benches/overhead.sh`,
/// memory phase). Call before starting threads.
pub fn tune_allocator() {
    #[cfg(target_env = "gnu")]
    {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        // SAFETY: mallopt only sets malloc's parameters; it is called before
        // any other thread exists, with valid parameter numbers and values.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 64 * 1024);
            libc::mallopt(libc::M_ARENA_MAX, cpus.max(1) as i32);
        }
    }
}

/// Give the heap's free memory back to the system (after large caches were
/// dropped, so that it shows in the resident size).
pub fn trim_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free heap pages; it takes malloc's
    // own locks and leaves every allocated block where it is.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Part of a file mapped read-only: its pages are read from the page cache
/// when first touched, count in the resident set only while touched since
/// the last [`Mapped::release`], and are shared with every process that
/// maps the same file.
#[derive(Debug)]
pub struct Mapped {
    at: std::ptr::NonNull<u8>,
    /// The mapping's length, from the page holding `offset`.
    len: usize,
    /// Where the bytes asked for start in it.
    skip: usize,
}

// SAFETY: the mapping is read-only and owned by this value; reading it
// from several threads is reading immutable memory.
unsafe impl Send for Mapped {}
// SAFETY: as above; no method mutates the mapped bytes.
unsafe impl Sync for Mapped {}

impl Mapped {
    /// Map `len` bytes of `file` from `offset`.
    pub fn file(file: &std::fs::File, offset: u64, len: usize) -> io::Result<Mapped> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let page = 4096u64;
        let start = offset & !(page - 1);
        let skip = (offset - start) as usize;
        let total = skip + len;
        let pgoff = libc::off_t::try_from(start)
            .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        // SAFETY: a new private read-only mapping of an open file, at an
        // address the kernel chooses: no existing memory is affected.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                pgoff,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let at = std::ptr::NonNull::new(at.cast::<u8>())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(Mapped {
            at,
            len: total,
            skip,
        })
    }

    /// Drop its pages from the resident set (they stay in the page cache
    /// and are read again when next touched).
    pub fn release(&self) {
        // SAFETY: [at, at + len) is this value's own private read-only file
        // mapping, never written: MADV_DONTNEED drops only page table
        // entries, and later reads see the same bytes.
        unsafe {
            libc::madvise(self.at.as_ptr().cast(), self.len, libc::MADV_DONTNEED);
        }
    }
}

impl std::ops::Deref for Mapped {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes for this value's life
        // (unmapped only in drop), and `skip` < `len`.
        unsafe { std::slice::from_raw_parts(self.at.as_ptr().add(self.skip), self.len - self.skip) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmapping this value's own mapping; no reference to its
        // bytes outlives the value (Deref borrows it).
        unsafe {
            libc::munmap(self.at.as_ptr().cast(), self.len);
        }
    }
}

/// Drop from the resident set the pages this process maps read-only of the
/// files `files` names (by `st_dev` and `st_ino`), except
/// files it also maps executable (its own program and libraries, whose
/// read-only segments may hold relocated data). The pages stay in the page
/// cache and fault back in when read again. Only the thread that maps and
/// unmaps those files may call this, so that none of their mappings is
/// replaced meanwhile. Bytes of mappings dropped.
pub fn release_file_pages(files: &std::collections::HashSet<(u64, u64)>) -> u64 {
    if files.is_empty() {
        return 0;
    }
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return 0;
    };
    // start-end perms offset major:minor inode path
    struct Line {
        start: usize,
        end: usize,
        read_only: bool,
        exec: bool,
        file: (u64, u64),
    }
    let parse = |line: &str| -> Option<Line> {
        let mut f = line.split_ascii_whitespace();
        let (start, end) = f.next()?.split_once('-')?;
        let perms = f.next()?.as_bytes();
        let (major, minor) = f.nth(1)?.split_once(':')?;
        let inode: u64 = f.next()?.parse().ok()?;
        let (major, minor) = (
            u64::from_str_radix(major, 16).ok()?,
            u64::from_str_radix(minor, 16).ok()?,
        );
        let dev = ((major & 0xffff_f000) << 32)
            | ((major & 0xfff) << 8)
            | ((minor & 0xffff_ff00) << 12)
            | (minor & 0xff);
        Some(Line {
            start: usize::from_str_radix(start, 16).ok()?,
            end: usize::from_str_radix(end, 16).ok()?,
            read_only: matches!(perms.get(..4), Some(b"r--p" | b"r--s")),
            exec: perms.get(2) == Some(&b'x'),
            file: (dev, inode),
        })
    };
    let mappings: Vec<Line> = maps.lines().filter_map(parse).collect();
    let loaded: std::collections::HashSet<(u64, u64)> =
        mappings.iter().filter(|m| m.exec).map(|m| m.file).collect();
    let mut released = 0;
    for Line {
        start,
        end,
        read_only,
        file,
        ..
    } in mappings
    {
        if !read_only || end <= start || !files.contains(&file) || loaded.contains(&file) {
            continue;
        }
        // SAFETY: [start, end) is a read-only mapping of a file the caller
        // maps and unmaps on this thread, never written (it is mapped
        // without PROT_WRITE and not one of the loader's segments):
        // MADV_DONTNEED drops only its page table entries, and later reads
        // see the same bytes, faulted in from the file (the page cache)
        // again.
        let r =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        if r == 0 {
            released += (end - start) as u64;
        }
    }
    released
}

/// Drop from the resident set the pages of this process's code: the
/// executable mappings of its program and libraries, which hold start-up
/// code, the code of rare requests and code never run again. They stay in
/// the page cache, and what runs faults back in (a minor fault per 64 KiB
/// read around). A mapping holding a written (copied) page, such as a
/// breakpoint, keeps its pages. Bytes of mappings dropped.
pub fn release_code_pages() -> u64 {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return 0;
    };
    // Each mapping: "start-end perms offset dev inode path", then fields.
    let mut code: Vec<(usize, usize)> = Vec::new();
    let mut current: Option<(usize, usize)> = None;
    for line in smaps.lines() {
        let mut words = line.split_ascii_whitespace();
        let Some(first) = words.next() else { continue };
        if let Some((start, end)) = first.split_once('-') {
            if let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            ) {
                let perms = words.next();
                let inode = words.nth(2);
                current = (perms == Some("r-xp") && inode.is_some_and(|i| i != "0") && end > start)
                    .then_some((start, end));
                continue;
            }
        }
        if first == "Anonymous:" {
            if let Some(range) = current.take() {
                if words.next() == Some("0") {
                    code.push(range);
                }
            }
        }
    }
    let mut released = 0;
    for (start, end) in code {
        // SAFETY: [start, end) is a private, read-only, executable mapping of
        // a file with no page of its own (Anonymous: 0 kB): the code of a
        // loaded object, which the daemon never unmaps (it loads no
        // library at run time), so the range is not another mapping's.
        // MADV_DONTNEED drops its page table entries only, and the code
        // that runs there next faults in the same bytes from the page cache.
        let r =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        if r == 0 {
            released += (end - start) as u64;
        }
    }
    released
}

/// The instruction, stack and frame pointers (ip, sp, bp) here and up to
/// `bytes` of the stack above them (fewer where the stack ends), as a
/// PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER sample of this thread holds
/// them: a real stack for the unwinder's benchmarks and fuzz target. The
/// callers' frames stay as they were while this frame is live.
#[inline(never)]
pub fn own_stack(bytes: usize) -> ([u64; 3], Vec<u8>) {
    use std::os::unix::fs::FileExt;
    let regs = own_registers();
    let mut stack = vec![0; bytes];
    let mut got = 0;
    if let Ok(mem) = std::fs::File::open("/proc/self/mem") {
        while got < bytes {
            match mem.read_at(&mut stack[got..], regs[1] + got as u64) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
    }
    stack.truncate(got);
    (regs, stack)
}

#[inline(always)]
fn own_registers() -> [u64; 3] {
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: reads rip, rsp and rbp into registers; touches no memory and
    // keeps the stack.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    [ip, sp, bp]
}

/// CPU time the calling thread has used, in nanoseconds
/// (CLOCK_THREAD_CPUTIME_ID).
pub fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;

    /// `len` bytes of `file` mapped read-only with `flags`, and a view of them.
    fn map(file: &std::fs::File, len: usize, flags: i32) -> (*mut libc::c_void, &'static [u8]) {
        // SAFETY: a fresh read-only mapping of the file at an address the
        // kernel chooses; the caller unmaps it and drops the view first.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                flags,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED);
        // SAFETY: `len` readable bytes, alive until the caller's munmap.
        (at, unsafe {
            std::slice::from_raw_parts(at as *const u8, len)
        })
    }

    /// Resident KiB of the mapping starting at `start`, from smaps.
    fn rss_kib(start: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let head = format!("{start:x}-");
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&head));
        lines.next().expect("the mapping is listed");
        lines
            .find_map(|l| l.strip_prefix("Rss:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
            .unwrap()
    }

    /// A scratch file `profd-NAME-PID` of `len` bytes counting modulo
    /// `modulo`, its bytes and the file opened.
    fn patterned_file(
        name: &str,
        len: u32,
        modulo: u32,
    ) -> (std::path::PathBuf, Vec<u8>, std::fs::File) {
        let path = std::env::temp_dir().join(format!("profd-{name}-{}", std::process::id()));
        let bytes: Vec<u8> = (0..len).map(|i| (i % modulo) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        (path, bytes, file)
    }

    #[test]
    fn released_file_pages_leave_the_resident_set_and_read_the_same() {
        let (path, bytes, file) = patterned_file("release", 4 << 20, 251);
        let meta = file.metadata().unwrap();
        let len = bytes.len();
        let (at, mapped) = map(&file, len, libc::MAP_PRIVATE);
        assert!(mapped == &bytes[..]);
        assert!(rss_kib(at as usize) >= 4096, "read whole: resident");

        let other: HashSet<(u64, u64)> = [(meta.dev(), meta.ino() + 1)].into();
        assert_eq!(super::release_file_pages(&other), 0, "another file's");
        assert!(rss_kib(at as usize) >= 4096);

        let this: HashSet<(u64, u64)> = [(meta.dev(), meta.ino())].into();
        assert_eq!(super::release_file_pages(&this), len as u64);
        assert_eq!(rss_kib(at as usize), 0, "released");
        assert!(mapped == &bytes[..], "read again, the same bytes");

        // Mapped shared (as blazesym maps the files it parses), the same.
        let (shared, view) = map(&file, len, libc::MAP_SHARED);
        assert!(view == &bytes[..]);
        assert!(rss_kib(shared as usize) >= 4096);
        assert_eq!(super::release_file_pages(&this), 2 * len as u64);
        assert_eq!(rss_kib(shared as usize), 0);
        assert!(view == &bytes[..]);
        // SAFETY: unmapping the shared mapping made above, no longer read.
        unsafe { libc::munmap(shared, len) };

        // The daemon's own program is never released, though named.
        let exe = std::fs::metadata("/proc/self/exe").unwrap();
        let own: HashSet<(u64, u64)> = [(exe.dev(), exe.ino())].into();
        assert_eq!(super::release_file_pages(&own), 0);
        // SAFETY: unmapping the mapping made above, no longer read.
        unsafe { libc::munmap(at, len) };
        std::fs::remove_file(&path).unwrap();
    }

    /// Resident KiB of this process's code: its executable file mappings.
    fn code_rss_kib() -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut code = false;
        let mut kib = 0;
        for line in smaps.lines() {
            let mut words = line.split_ascii_whitespace();
            let first = words.next().unwrap_or("");
            if first.contains('-') && !first.ends_with(':') {
                code = words.next() == Some("r-xp") && words.nth(2).is_some_and(|i| i != "0");
            } else if code && first == "Rss:" {
                kib += words.next().unwrap().parse::<u64>().unwrap();
            }
        }
        kib
    }

    #[test]
    fn code_pages_leave_the_resident_set_and_run_again() {
        let before = code_rss_kib();
        assert!(before >= 512, "the test's code is resident: {before} KiB");
        let released = super::release_code_pages();
        let after = code_rss_kib();
        assert!(released > 0);
        // What ran since (reading smaps, other tests' threads) is back,
        // with the 64 KiB around each fault.
        assert!(
            after * 4 < before * 3,
            "{before} KiB of code resident, {after} KiB after the release"
        );
        // The code runs again, faulted back in.
        assert!(code_rss_kib() > 0);
        assert!(super::thread_cpu_ns() > 0);
    }

    #[test]
    fn code_with_a_written_page_keeps_its_pages() {
        let (path, bytes, file) = patterned_file("written-code", 64 << 10, 249);
        let len = bytes.len();
        // SAFETY: a fresh private writable mapping of the scratch file at an
        // address the kernel chooses, unmapped below.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED);
        // SAFETY: the first byte of the mapping made above, writable; then
        // the mapping made read-only and executable, as a breakpoint leaves
        // code: one copied page, the rest the file's.
        unsafe {
            *(at as *mut u8) = 0xcc;
            assert_eq!(
                libc::mprotect(at, len, libc::PROT_READ | libc::PROT_EXEC),
                0
            );
        }
        // SAFETY: `len` readable bytes, alive until the munmap below.
        let view = unsafe { std::slice::from_raw_parts(at as *const u8, len) };
        assert!(view[1..] == bytes[1..]);
        super::release_code_pages();
        assert_eq!(view[0], 0xcc, "the written byte is kept");
        assert!(rss_kib(at as usize) >= 64, "its pages stay resident");
        // SAFETY: unmapping the mapping made above, no longer read.
        unsafe { libc::munmap(at, len) };
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn mapped_parts_of_a_file_read_its_bytes_and_release_their_pages() {
        let (path, bytes, file) = patterned_file("mapped", 1 << 20, 253);
        // Not page-aligned, to the end.
        let part = super::Mapped::file(&file, 5000, bytes.len() - 5000).unwrap();
        assert!(*part == bytes[5000..]);
        let start = part.at.as_ptr() as usize;
        assert!(rss_kib(start) >= 1000);
        part.release();
        assert_eq!(rss_kib(start), 0);
        assert!(*part == bytes[5000..], "read again");
        assert!(super::Mapped::file(&file, 0, 0).is_err());
        drop(part);
        std::fs::remove_file(&path).unwrap();
    }
}
