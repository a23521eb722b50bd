//! Process file descriptors (pidfd_open): a handle on one process that becomes
//! readable when it exits, immune to PID reuse.
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// An open pidfd for one process.
#[derive(Debug)]
pub struct PidFd(OwnedFd);

impl PidFd {
    /// Open a pidfd for the thread-group leader `pid`.
    pub fn open(pid: u32) -> io::Result<PidFd> {
        let pid =
            libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
        // SAFETY: pidfd_open takes a pid and a flags word and returns a new fd
        // or -1; it does not touch our memory.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = RawFd::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
        // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
        Ok(PidFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }
}

impl PidFd {
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
