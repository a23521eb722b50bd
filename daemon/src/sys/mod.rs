//! The daemon's OS layer, the only module allowed `unsafe`: perf events
//! and their rings (`perf`), user namespaces (`userns`), and here process
//! file descriptors, the C allocator's settings, and reading the caller's
//! own registers and stack.
pub mod perf;
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
