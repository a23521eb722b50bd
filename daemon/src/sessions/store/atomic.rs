//! Writing a state file so that it is either as before or whole: staged
//! as a new `NAME.<random>.tmp` (mode 0600, `O_EXCL|O_NOFOLLOW`: never a
//! file or link that was there) and synced, put in place, then the
//! directory synced.
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// What putting a file in place does with a file already of its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Existing {
    /// Replaced (renamed over).
    Replace,
    /// Kept: the put fails with `AlreadyExists`.
    Keep,
}

/// Write `dir/name` so that it is either as before or whole: staged,
/// put in place, fsync of the directory.
pub(crate) fn write_atomic(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    existing: Existing,
) -> io::Result<()> {
    let tmp = stage(dir, name, bytes)?;
    put(dir, &tmp, name, existing)?;
    sync_dir(dir)
}

/// Tries at a fresh temporary name before giving up.
const TEMP_TRIES: usize = 8;

/// Write `bytes` to a new file `dir/name.<random>.tmp` (mode 0600) and
/// fsync it; its path.
pub(crate) fn stage(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<PathBuf> {
    stage_with(dir, name, |f| f.write_all(bytes))
}

/// [`stage`] with the contents written by `write` as they are made.
pub(crate) fn stage_with(
    dir: &Path,
    name: &str,
    write: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<PathBuf> {
    let mut tries = 0;
    let (tmp, mut f) = loop {
        let tmp = dir.join(crate::trusted_files::temp_name(name)?);
        let created = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(0o600)
            .open(&tmp);
        match created {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries + 1 < TEMP_TRIES => {
                tries += 1
            }
            Err(e) => return Err(e),
        }
    };
    let written = write(&mut f).and_then(|()| f.sync_all());
    match written {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Put the staged `tmp` in place as `dir/name`: renamed over it
/// ([`Existing::Replace`]), else hard-linked, which fails with
/// `AlreadyExists` when `name` is there.
pub(crate) fn put(dir: &Path, tmp: &Path, name: &str, existing: Existing) -> io::Result<()> {
    let to = dir.join(name);
    let moved = match existing {
        Existing::Replace => fs::rename(tmp, &to),
        Existing::Keep => fs::hard_link(tmp, &to).and_then(|()| fs::remove_file(tmp)),
    };
    if moved.is_err() {
        let _ = fs::remove_file(tmp);
    }
    moved
}

pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link planted at the old `NAME.tmp` name is neither followed nor
    /// replaced; the file is written whole and nothing else is left.
    #[test]
    fn staging_never_follows_what_is_there() {
        let dir = std::env::temp_dir().join(format!("profd-atomic-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        fs::write(&victim, "precious\n").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("7.session.tmp")).unwrap();
        write_atomic(&dir, "7.session", b"{}", Existing::Replace).unwrap();
        write_atomic(&dir, "7.session", b"{\"v\":2}", Existing::Replace).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
        assert_eq!(fs::read(dir.join("7.session")).unwrap(), b"{\"v\":2}");
        let mut names: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["7.session", "7.session.tmp", "victim"]);
        assert!(write_atomic(&dir, "7.session", b"again", Existing::Keep).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
