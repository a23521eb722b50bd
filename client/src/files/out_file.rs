//! The files profctl writes (`-o`, `export -o`, `query -o`, `fleet -o`,
//! `histogram --gmon`, `diff --pprof DIR`, `man --dir`): each put in place
//! whole by renaming a fresh temporary file with an unpredictable name
//! (created `O_EXCL|O_NOFOLLOW`), and reached only through symbolic links
//! no one else could have planted.
//!
//! The rule for links, on every component of the path: a symbolic link is
//! followed only when root or the user running profctl owns both the link
//! and the directory it is in, and no one else may write that directory
//! (group and others have no write permission, or it has the sticky bit, as
//! /tmp has, so that only the link's owner may replace it). Any other link
//! is refused with an error naming it, its owner and this rule.
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io::{self, Write as _};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

/// Most symbolic links followed on one path (the kernel's own limit).
const MAX_LINKS: usize = 40;
/// Tries at a fresh temporary name before giving up.
const TEMP_TRIES: usize = 8;

/// Writes `data` to `path`: a regular file (or none yet) is replaced whole
/// through a temporary file beside it, renamed over it; a FIFO or character
/// device (`/dev/null`) is written into. Links are followed only as the
/// module's rule says; anything else at `path` is refused.
pub fn write_file(path: &Path, data: &[u8]) -> io::Result<()> {
    let r = resolve(path, Dirs::Existing)?;
    match r.stat.as_ref().map(|s| FileType::from_raw_mode(s.st_mode)) {
        None | Some(FileType::RegularFile) => replace(&r, data),
        Some(FileType::Fifo | FileType::CharacterDevice) => {
            let fd = rfs::openat(
                &r.dir,
                &r.name,
                OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            std::fs::File::from(fd).write_all(data)
        }
        Some(FileType::Directory) => Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "it is a directory: give a file name",
        )),
        Some(_) => Err(io::Error::other(
            "it is not a regular file, a FIFO or a character device",
        )),
    }
}

/// What [`write_file`] would refuse at `path` now (a link it may not
/// follow, a directory, a missing directory), so that `run -o` fails
/// before the session rather than after it.
pub fn check_file(path: &Path) -> io::Result<()> {
    let r = resolve(path, Dirs::Existing)?;
    match r.stat.as_ref().map(|s| FileType::from_raw_mode(s.st_mode)) {
        Some(FileType::Directory) => Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "it is a directory: give a file name",
        )),
        Some(FileType::Socket | FileType::BlockDevice | FileType::Unknown) => Err(
            io::Error::other("it is not a regular file, a FIFO or a character device"),
        ),
        _ => Ok(()),
    }
}

/// Creates the directory `path` and its missing parents (`mkdir -p`),
/// following links only as the module's rule says.
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    let r = resolve(path, Dirs::Make)?;
    match r.stat.as_ref().map(|s| FileType::from_raw_mode(s.st_mode)) {
        Some(FileType::Directory) => Ok(()),
        None => match rfs::mkdirat(&r.dir, &r.name, Mode::from(0o777)) {
            Ok(()) | Err(Errno::EXIST) => Ok(()),
            Err(e) => Err(e.into()),
        },
        Some(_) => Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            "it exists and is not a directory",
        )),
    }
}

/// A path walked to its last component.
struct Resolved {
    /// The directory the last component is in (an `O_PATH` descriptor).
    dir: OwnedFd,
    /// The last component's name in `dir`.
    name: OsString,
    /// The last component's own status (`None`: it does not exist).
    stat: Option<Stat>,
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

fn open_dir(at: &OwnedFd, name: &OsStr) -> io::Result<OwnedFd> {
    Ok(rfs::openat(
        at,
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Whether a walk creates the missing directories on its way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dirs {
    Make,
    Existing,
}

/// The directory a walk of `path` starts from: `/`, or the working
/// directory for a relative path.
fn open_start(path: &Path) -> io::Result<OwnedFd> {
    let start = if path.is_absolute() { "/" } else { "." };
    Ok(rfs::open(
        start,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Walks `path` one component at a time from `/` (or the working
/// directory), following the symbolic links the rule allows and refusing
/// the others; with [`Dirs::Make`], missing directories before the last
/// component are created.
fn resolve(path: &Path, dirs: Dirs) -> io::Result<Resolved> {
    let mut dir = open_start(path)?;
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
            Err(e) => return Err(in_path(e.into(), &shown)),
        };
        match stat.as_ref().map(|s| FileType::from_raw_mode(s.st_mode)) {
            Some(FileType::Symlink) => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(in_path(Errno::LOOP.into(), &shown));
                }
                let target = rfs::readlinkat(&dir, &name, Vec::new())
                    .map_err(|e| in_path(e.into(), &shown))?;
                let target = PathBuf::from(OsString::from_vec(target.into_bytes()));
                check_link(&dir, &here, &shown, stat.as_ref().expect("a link"), &target)?;
                if target.is_absolute() {
                    dir = open_start(&target)?;
                    here = PathBuf::from("/");
                }
                for n in names(&target).into_iter().rev() {
                    pending.push_front(n);
                }
            }
            _ if last => return Ok(Resolved { dir, name, stat }),
            Some(FileType::Directory) => {
                dir = open_dir(&dir, &name).map_err(|e| in_path(e, &shown))?;
                here = shown;
            }
            None if dirs == Dirs::Make => {
                match rfs::mkdirat(&dir, &name, Mode::from(0o777)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(in_path(e.into(), &shown)),
                }
                dir = open_dir(&dir, &name).map_err(|e| in_path(e, &shown))?;
                here = shown;
            }
            None => return Err(in_path(Errno::NOENT.into(), &shown)),
            Some(_) => return Err(in_path(Errno::NOTDIR.into(), &shown)),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::IsADirectory,
        "it is a directory: give a file name",
    ))
}

/// `error` about a component of the path other than the one the caller
/// names: say which.
fn in_path(error: io::Error, shown: &Path) -> io::Error {
    io::Error::new(error.kind(), format!("{}: {error}", shown.display()))
}

/// `uid 1001 (alice)`, or `uid 1001` for a uid without a name.
fn who(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(user)) => format!("uid {uid} ({})", user.name),
        _ => format!("uid {uid}"),
    }
}

/// Whether files of `uid` may steer where profctl writes: root's and the
/// caller's own.
fn trusted(uid: u32) -> bool {
    uid == 0 || uid == rustix::process::geteuid().as_raw()
}

/// Fail unless the link `shown` (in `dir`, shown as `here`) may be
/// followed: see the module's rule.
fn check_link(
    dir: &OwnedFd,
    here: &Path,
    shown: &Path,
    link: &Stat,
    target: &Path,
) -> io::Result<()> {
    let parent = rfs::fstat(dir)?;
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
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{} is a symbolic link (to {}) {why}; profctl follows a link only when you or \
             root own it and its directory, and no one else may write that directory \
             (sticky ones such as /tmp excepted): remove the link, or name the file to write",
            shown.display(),
            target.display()
        ),
    ))
}

/// `.NAME.<16 random hex digits>.tmp`, at most 255 bytes.
fn temp_name(name: &OsStr) -> io::Result<OsString> {
    let mut random = [0u8; 8];
    rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty())?;
    let bytes = name.as_bytes();
    let mut temp = b".".to_vec();
    temp.extend_from_slice(&bytes[..bytes.len().min(200)]);
    temp.push(b'.');
    for b in random {
        temp.extend_from_slice(format!("{b:02x}").as_bytes());
    }
    temp.extend_from_slice(b".tmp");
    Ok(OsString::from_vec(temp))
}

/// Write `data` to a new temporary file in `r.dir`, then rename it over
/// `r.name`; the temporary file is removed when anything fails.
fn replace(r: &Resolved, data: &[u8]) -> io::Result<()> {
    let mut tries = 0;
    let (temp, fd) = loop {
        let temp = temp_name(&r.name)?;
        match rfs::openat(
            &r.dir,
            &temp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from(0o666),
        ) {
            Ok(fd) => break (temp, fd),
            Err(Errno::EXIST) if tries + 1 < TEMP_TRIES => tries += 1,
            Err(e) => return Err(e.into()),
        }
    };
    let mut file = std::fs::File::from(fd);
    let mine = rfs::fstat(&file)?;
    // Where others may write the directory, a name may stop being the file
    // written at any time: rename only the file written, and say so unless
    // it is in place when profctl is done.
    let is_mine = |name: &OsStr| -> io::Result<bool> {
        match rfs::statat(&r.dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(now) => Ok((now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)),
            // Gone: someone removed or renamed it meanwhile.
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    };
    let replaced = |name: &OsStr| {
        io::Error::other(format!(
            "{} was replaced while profctl wrote it: others may write that directory; \
             write somewhere only you can",
            Path::new(name).display()
        ))
    };
    let written = (|| {
        file.write_all(data)?;
        file.sync_all()?;
        if !is_mine(&temp)? {
            return Err(replaced(&temp));
        }
        match rfs::renameat(&r.dir, &temp, &r.dir, &r.name) {
            Err(Errno::NOENT) => return Err(replaced(&temp)),
            renamed => renamed?,
        }
        if !is_mine(&r.name)? {
            return Err(replaced(&r.name));
        }
        Ok(())
    })();
    if written.is_err() {
        let _ = rfs::unlinkat(&r.dir, &temp, AtFlags::empty());
    }
    written
}

#[cfg(test)]
#[path = "out_file_tests.rs"]
mod tests;
