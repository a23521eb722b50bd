//! Writing a state file so that it is either as before or whole: staged
//! as `NAME.tmp` (mode 0600) and synced, put in place, then the directory
//! synced.
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Write `dir/name` so that it is either as before or whole: staged,
/// put in place, fsync of the directory.
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8], replace: bool) -> io::Result<()> {
    let tmp = stage(dir, name, bytes)?;
    put(dir, &tmp, name, replace)?;
    sync_dir(dir)
}

/// Write `bytes` to `dir/name.tmp` (mode 0600) and fsync it.
pub(crate) fn stage(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<PathBuf> {
    let tmp = dir.join(format!("{name}.tmp"));
    let written = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    })();
    match written {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Put the staged `tmp` in place as `dir/name`: renamed over it with
/// `replace`, else hard-linked, which fails with `AlreadyExists` when
/// `name` is there.
pub(crate) fn put(dir: &Path, tmp: &Path, name: &str, replace: bool) -> io::Result<()> {
    let to = dir.join(name);
    let moved = if replace {
        fs::rename(tmp, &to)
    } else {
        fs::hard_link(tmp, &to).and_then(|()| fs::remove_file(tmp))
    };
    if moved.is_err() {
        let _ = fs::remove_file(tmp);
    }
    moved
}

pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}
