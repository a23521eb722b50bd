//! User namespaces as the kernel shows them to the daemon: the one a
//! process runs in, who created it and the ones above it (nsfs's
//! `NS_GET_OWNER_UID` and `NS_GET_PARENT`), for the ptrace rule. No rule here.
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::MetadataExt;

/// `_IO(0xb7, 2)`: a new descriptor of the namespace's parent.
const NS_GET_PARENT: libc::c_ulong = 0xb702;
/// `_IO(0xb7, 4)`: the uid that created a user namespace, as seen from the
/// caller's own.
const NS_GET_OWNER_UID: libc::c_ulong = 0xb704;
/// The kernel nests user namespaces 32 deep at most.
const MAX_DEPTH: usize = 33;

/// A namespace's identity: its nsfs device and inode (`user:[INODE]` in
/// `readlink /proc/PID/ns/user`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NsId {
    pub dev: u64,
    pub ino: u64,
}

/// A user namespace: its identity and the uid that created it (its owner,
/// who holds every capability in it), in the daemon's view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserNs {
    pub id: NsId,
    pub owner: u32,
}

fn id_of(ns: &File) -> io::Result<NsId> {
    let meta = ns.metadata()?;
    Ok(NsId {
        dev: meta.dev(),
        ino: meta.ino(),
    })
}

/// The identity of the namespace `path` names (`/proc/PID/ns/user`).
pub fn ns_id(path: &str) -> io::Result<NsId> {
    id_of(&File::open(path)?)
}

fn owner_uid(ns: &File) -> io::Result<u32> {
    let mut uid: libc::uid_t = 0;
    // SAFETY: NS_GET_OWNER_UID writes one uid_t through its argument, which
    // points at `uid`, alive for the call; `ns` keeps the descriptor open.
    let r = unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_OWNER_UID as _, &mut uid) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(uid)
}

/// The parent of user namespace `ns`; None at the top the daemon may see
/// (its own namespace's ancestors are hidden from it: EPERM).
fn parent(ns: &File) -> io::Result<Option<File>> {
    // SAFETY: NS_GET_PARENT takes no argument and returns a new descriptor
    // (or -1); `ns` keeps the descriptor it is asked on open.
    let fd = unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_PARENT as _) };
    if fd < 0 {
        let err = io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::EPERM) => Ok(None),
            _ => Err(err),
        };
    }
    // SAFETY: the ioctl returned a descriptor that nothing else owns.
    Ok(Some(unsafe { File::from_raw_fd(fd) }))
}

/// The user namespace `path` names (`/proc/PID/task/TID/ns/user`) and each
/// of its parents up to the outermost the daemon sees: innermost first.
pub fn user_ns_chain(path: &str) -> io::Result<Vec<UserNs>> {
    let mut ns = File::open(path)?;
    let mut chain = Vec::new();
    loop {
        chain.push(UserNs {
            id: id_of(&ns)?,
            owner: owner_uid(&ns)?,
        });
        if chain.len() >= MAX_DEPTH {
            break;
        }
        match parent(&ns)? {
            Some(p) => ns = p,
            None => break,
        }
    }
    Ok(chain)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The daemon's own namespace is the top of its own chain; a namespace
    /// made below it has it as parent and the maker as owner.
    #[test]
    fn own_namespace_and_a_child() {
        let own = user_ns_chain("/proc/self/ns/user").unwrap();
        assert_eq!(own.len(), 1, "{own:?}");
        assert_eq!(own[0].id, ns_id("/proc/self/ns/user").unwrap());
        let me = rustix::process::geteuid().as_raw();
        // A shell in a new user namespace says so, then waits on its input.
        let mut child = std::process::Command::new("unshare")
            .args(["--user", "sh", "-c", "echo in; exec cat"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("unshare");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line, "in\n");
        let chain = user_ns_chain(&format!("/proc/{}/ns/user", child.id())).unwrap();
        drop(child.stdin.take());
        let _ = child.wait();
        assert_eq!(chain.len(), 2, "{chain:?}");
        assert_eq!(chain[1], own[0]);
        assert_eq!(chain[0].owner, me);
        assert_ne!(chain[0].id, own[0].id);
    }
}
