//! The files whose contents the daemon trusts (the tokens file, sink
//! credentials and CA files, the TLS listener's certificate, key and client
//! CA) and the places it writes (the state directory, the socket): read or
//! made only where no other user could have steered them.
//!
//! The rules, stated once here and in docs/operations.md:
//! - A symbolic link, on any component of a path, is followed only when
//!   root or the daemon's user owns both the link and the directory it is
//!   in, and no one else may write that directory (group and others have no
//!   write permission, or it has the sticky bit, as /tmp has, so that only
//!   the link's owner may replace it).
//! - A file read is a regular file owned by root or the daemon's user that
//!   group and others may not write.
//!
//! Every refusal names the file and the rule.
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::Read as _;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

/// Most symbolic links followed on one path (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// The rule for files, as refusals state it.
const FILE_RULE: &str =
    "profd trusts a file only when root or its own user owns it and no one else may write it";

/// The rule for links, as refusals state it.
const LINK_RULE: &str = "profd follows a symbolic link only when root or its own user owns \
     it and its directory, and no one else may write that directory (sticky ones such as \
     /tmp excepted)";

/// Why a file or directory is not used: each names the file (and the
/// link or directory at fault) and the rule.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// A system call on `shown` failed.
    #[error("{shown}: {source}")]
    Io {
        shown: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{shown} is not a regular file")]
    NotRegular { shown: String },
    /// A file another user owns (`owner` as [`who`] says it).
    #[error("{shown} is owned by {owner}: {rule}; {advice}", rule = FILE_RULE)]
    Owner {
        shown: String,
        owner: String,
        advice: String,
    },
    #[error("{shown} is writable by group or others (mode {mode:o}): {rule}; chmod go-w it", rule = FILE_RULE)]
    Writable { shown: String, mode: u32 },
    /// A directory another user owns.
    #[error(
        "{shown} is owned by {owner}, who could put files in it: profd keeps its files only in \
         a directory root or its own user owns; {advice}"
    )]
    Directory {
        shown: String,
        owner: String,
        advice: String,
    },
    /// Not the socket the daemon has just made.
    #[error(
        "{shown} was replaced while profd made its socket there: others may write its \
         directory; choose a --socket in a directory only root may write"
    )]
    Replaced { shown: String },
    /// A path that ends in a directory where a file was wanted.
    #[error("{shown}: it is a directory")]
    IsDirectory { shown: String },
    /// A link the rule refuses (`why`: what is wrong with it).
    #[error(
        "{link} is a symbolic link (to {target}) {why}: {rule}; replace the link by what it \
         points to, or fix the owner and mode",
        rule = LINK_RULE
    )]
    Link {
        link: String,
        target: String,
        why: String,
    },
}

/// `shown` and what a system call on it said.
fn io(shown: impl ToString, e: impl Into<std::io::Error>) -> Refused {
    Refused::Io {
        shown: shown.to_string(),
        source: e.into(),
    }
}

/// Whether files of `uid` may be trusted: root's and the daemon's own.
pub fn trusted(uid: u32) -> bool {
    uid == 0 || uid == rustix::process::geteuid().as_raw()
}

/// `uid 1001 (alice)`, or `uid 1001` for a uid without a name.
pub fn who(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(user)) => format!("uid {uid} ({})", user.name),
        _ => format!("uid {uid}"),
    }
}

/// `chown it to root`, and to the daemon's user when that is not root.
fn chown_advice() -> String {
    match rustix::process::geteuid().as_raw() {
        0 => "chown it to root".into(),
        me => format!("chown it to root (or to profd's user, uid {me})"),
    }
}

/// The contents of a file the daemon trusts, checked as the module says.
/// Errors name the file (and the link or directory at fault) and the rule.
pub fn read(path: &Path) -> Result<Vec<u8>, Refused> {
    let r = resolve(path)?;
    let shown = r.describe(path);
    if r.stat.is_none() {
        return Err(io(&shown, Errno::NOENT));
    }
    // Non-blocking: a FIFO in its place must not hang the daemon.
    let fd = rfs::openat(
        &r.dir,
        &r.name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .map_err(|e| io(&shown, e))?;
    let stat = rfs::fstat(&fd).map_err(|e| io(&shown, e))?;
    check_file(&shown, &stat)?;
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .read_to_end(&mut bytes)
        .map_err(|e| io(&shown, e))?;
    Ok(bytes)
}

/// Open `path` to append to it, creating it (mode 0600) when it is not
/// there: a file that is there must be one [`read`] would trust.
pub fn open_append(path: &Path) -> Result<std::fs::File, Refused> {
    let r = resolve(path)?;
    let shown = r.describe(path);
    let fd = rfs::openat(
        &r.dir,
        &r.name,
        OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from(0o600),
    )
    .map_err(|e| io(&shown, e))?;
    let stat = rfs::fstat(&fd).map_err(|e| io(&shown, e))?;
    check_file(&shown, &stat)?;
    Ok(std::fs::File::from(fd))
}

/// Fail unless `stat` is that of a regular file root or the daemon's user
/// owns and no one else may write.
fn check_file(shown: &str, stat: &Stat) -> Result<(), Refused> {
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(Refused::NotRegular {
            shown: shown.into(),
        });
    }
    if !trusted(stat.st_uid) {
        return Err(Refused::Owner {
            shown: shown.into(),
            owner: who(stat.st_uid),
            advice: chown_advice(),
        });
    }
    if stat.st_mode & 0o022 != 0 {
        return Err(Refused::Writable {
            shown: shown.into(),
            mode: stat.st_mode & 0o7777,
        });
    }
    Ok(())
}

/// Fail when the directory `path` (which may not exist yet) is reached
/// through a link the module's rule refuses, or is owned by a user other
/// than root or the daemon's, who could put files in it.
pub fn check_dir(path: &Path) -> Result<(), Refused> {
    let r = resolve(path)?;
    match &r.stat {
        Some(stat)
            if FileType::from_raw_mode(stat.st_mode) == FileType::Directory
                && !trusted(stat.st_uid) =>
        {
            Err(Refused::Directory {
                shown: r.describe(path),
                owner: who(stat.st_uid),
                advice: chown_advice(),
            })
        }
        _ => Ok(()),
    }
}

/// Give the socket the daemon has just bound at `path` the group `gid` and
/// `mode`: the socket itself, found again without following a link on the
/// way that the module's rule refuses, and never a file that took its place.
pub fn own_socket(path: &Path, gid: Option<u32>, mode: u32) -> Result<(), Refused> {
    let r = resolve(path)?;
    let failed = |e: Errno| io(path.display(), e);
    let fd = rfs::openat(
        &r.dir,
        &r.name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(failed)?;
    let stat = rfs::fstat(&fd).map_err(failed)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::Socket
        || stat.st_uid != rustix::process::geteuid().as_raw()
    {
        return Err(Refused::Replaced {
            shown: path.display().to_string(),
        });
    }
    // On the descriptor: an O_PATH one takes fchownat(AT_EMPTY_PATH), and
    // chmod through its /proc/self/fd link reaches this very inode.
    rfs::chownat(
        &fd,
        "",
        None,
        gid.map(rustix::fs::Gid::from_raw),
        AtFlags::EMPTY_PATH,
    )
    .map_err(failed)?;
    let on_fd = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
    rfs::chmodat(rfs::CWD, on_fd.as_str(), Mode::from(mode), AtFlags::empty()).map_err(failed)
}

/// A name for a temporary file beside `name`: `NAME.<16 random hex
/// digits>.tmp`, at most 255 bytes, so that no one can plant anything at
/// it beforehand.
pub fn temp_name(name: &str) -> std::io::Result<String> {
    let mut random = [0u8; 8];
    rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty())?;
    let mut end = name.len().min(200);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{}.{hex}.tmp", &name[..end]))
}

/// A path walked to its last component.
pub struct Resolved {
    /// The directory the last component is in (an `O_PATH` descriptor).
    pub dir: OwnedFd,
    /// The last component's name in `dir`.
    pub name: OsString,
    /// `dir/name` as walked, for messages.
    pub shown: PathBuf,
    /// The last component's own status (`None`: it does not exist).
    pub stat: Option<Stat>,
}

impl Resolved {
    /// `path`, with where its links led when they did.
    fn describe(&self, path: &Path) -> String {
        if self.shown == path {
            path.display().to_string()
        } else {
            format!("{} (the file {})", path.display(), self.shown.display())
        }
    }
}

/// The components of `path` to walk, `.` left out.
fn names(path: &Path) -> Vec<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// The directory a walk of `path` starts from: `/`, or the working
/// directory for a relative path.
fn open_start(path: &Path) -> Result<OwnedFd, Errno> {
    let start = if path.is_absolute() { "/" } else { "." };
    rfs::open(
        start,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Walks `path` one component at a time from `/` (or the working
/// directory), following the symbolic links the module's rule allows and
/// refusing the others. Errors name `path`, and the component at fault
/// when it is another.
pub fn resolve(path: &Path) -> Result<Resolved, Refused> {
    let failed = |e: Errno, at: &Path| {
        if at == path {
            io(path.display(), e)
        } else {
            io(format!("{}: {}", path.display(), at.display()), e)
        }
    };
    let mut dir = open_start(path).map_err(|e| failed(e, path))?;
    let mut here = if path.is_absolute() {
        PathBuf::from("/")
    } else {
        PathBuf::new()
    };
    let mut pending: VecDeque<OsString> = names(path).into();
    let mut links = 0;
    while let Some(name) = pending.pop_front() {
        let last = pending.is_empty();
        let shown = here.join(&name);
        let stat = match rfs::statat(&dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Some(stat),
            Err(Errno::NOENT) => None,
            Err(e) => return Err(failed(e, &shown)),
        };
        match stat.as_ref().map(|s| FileType::from_raw_mode(s.st_mode)) {
            Some(FileType::Symlink) => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(failed(Errno::LOOP, &shown));
                }
                let target =
                    rfs::readlinkat(&dir, &name, Vec::new()).map_err(|e| failed(e, &shown))?;
                let target = PathBuf::from(OsString::from_vec(target.into_bytes()));
                check_link(&dir, &here, &shown, stat.as_ref().expect("a link"), &target)?;
                if target.is_absolute() {
                    dir = open_start(&target).map_err(|e| failed(e, &target))?;
                    here = PathBuf::from("/");
                }
                for n in names(&target).into_iter().rev() {
                    pending.push_front(n);
                }
            }
            _ if last => {
                return Ok(Resolved {
                    dir,
                    name,
                    shown,
                    stat,
                })
            }
            Some(FileType::Directory) => {
                dir = rfs::openat(
                    &dir,
                    &name,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| failed(e, &shown))?;
                here = shown;
            }
            None => return Err(failed(Errno::NOENT, &shown)),
            Some(_) => return Err(failed(Errno::NOTDIR, &shown)),
        }
    }
    Err(Refused::IsDirectory {
        shown: path.display().to_string(),
    })
}

/// Fail unless the link `shown` (in `dir`, shown as `here`) may be
/// followed: see the module's rule.
fn check_link(
    dir: &OwnedFd,
    here: &Path,
    shown: &Path,
    link: &Stat,
    target: &Path,
) -> Result<(), Refused> {
    let parent = rfs::fstat(dir).map_err(|e| io(here.display(), e))?;
    let place = if here.as_os_str().is_empty() {
        Path::new(".")
    } else {
        here
    };
    let why = if !trusted(link.st_uid) {
        format!("owned by {}", who(link.st_uid))
    } else if !trusted(parent.st_uid) {
        format!(
            "in {}, a directory {} owns",
            place.display(),
            who(parent.st_uid)
        )
    } else if parent.st_mode & 0o022 != 0 && parent.st_mode & 0o1000 == 0 {
        format!(
            "in {}, a directory group or others may write (mode {:o})",
            place.display(),
            parent.st_mode & 0o7777
        )
    } else {
        return Ok(());
    };
    Err(Refused::Link {
        link: shown.display().to_string(),
        target: target.display().to_string(),
        why,
    })
}

#[cfg(test)]
#[path = "trusted_files_tests.rs"]
mod tests;
