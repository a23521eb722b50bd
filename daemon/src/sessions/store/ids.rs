//! Session ids: handed out in increasing order, never twice and never
//! wrapping, across restarts and crashes. With a state directory its
//! `next-id` file holds a high-water mark, written and synced before any id
//! below it is handed out; ids are reserved a block at a time, so a crash
//! skips the rest of a block and never reuses one.
use super::atomic::{write_atomic, Existing};
use std::path::{Path, PathBuf};

/// The largest id handed out: 2^53 − 1, the largest integer a JSON number
/// (and so a browser) holds exactly. Files named after larger ids are not
/// ours.
pub const MAX_ID: u64 = (1 << 53) - 1;
/// The high-water mark in the state directory: no id at or above the
/// number it holds has been handed out.
pub const NEXT_ID_FILE: &str = "next-id";
/// Ids reserved by one write of the mark.
const BLOCK: u64 = 16;

/// Why no id could be handed out.
#[derive(Debug, thiserror::Error)]
pub enum IdError {
    #[error(
        "every session id up to {MAX_ID} has been handed out, and ids are never reused: \
         start the daemon on a new state directory (--state-dir)"
    )]
    Exhausted,
    #[error("cannot reserve a session id: cannot write {path}: {source}")]
    Mark {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "cannot reserve a session id: {path}'s file system is full: \
         free space there (or set a smaller --retain-bytes) and attach again"
    )]
    Full { path: PathBuf },
}

/// Where the next id comes from.
#[derive(Debug)]
pub struct Ids {
    /// The next id to hand out (`MAX_ID + 1`: none left).
    next: u64,
    /// Ids below this are covered by the mark on disk.
    reserved: u64,
    /// The state directory (None: ids are kept in memory only).
    dir: Option<PathBuf>,
}

/// Ids from 1, for a daemon that keeps nothing on disk.
impl Default for Ids {
    fn default() -> Ids {
        Ids {
            next: 1,
            reserved: MAX_ID + 1,
            dir: None,
        }
    }
}

impl Ids {
    /// Ids from `next` (at least 1), reserved in `dir` before use.
    pub(super) fn on_disk(dir: &Path, next: u64) -> Ids {
        let next = next.max(1);
        Ids {
            next,
            reserved: next,
            dir: Some(dir.to_path_buf()),
        }
    }

    /// The id the next session gets (`MAX_ID + 1` when none is left).
    pub fn peek(&self) -> u64 {
        self.next
    }

    /// Hand out the next id, writing a new mark first when the reserved
    /// block is used up.
    pub fn take(&mut self) -> Result<u64, IdError> {
        if self.next > MAX_ID {
            return Err(IdError::Exhausted);
        }
        if self.next >= self.reserved {
            let mark = self.next.saturating_add(BLOCK).min(MAX_ID + 1);
            self.write(mark)?;
            self.reserved = mark;
        }
        let id = self.next;
        self.next += 1;
        Ok(id)
    }

    /// Give back the ids reserved and not handed out (at shutdown, once no
    /// more are taken), so that the next run goes on from the next one.
    pub fn release(&mut self) -> Result<(), IdError> {
        if self.dir.is_some() && self.reserved > self.next {
            self.write(self.next)?;
            self.reserved = self.next;
        }
        Ok(())
    }

    fn write(&self, mark: u64) -> Result<(), IdError> {
        let Some(dir) = &self.dir else { return Ok(()) };
        write_atomic(
            dir,
            NEXT_ID_FILE,
            format!("{mark}\n").as_bytes(),
            Existing::Replace,
        )
        .map_err(|e| {
            let path = dir.join(NEXT_ID_FILE);
            match e.kind() {
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                    IdError::Full { path }
                }
                _ => IdError::Mark { path, source: e },
            }
        })
    }
}

/// The mark `text` holds, if it is one (1 to `MAX_ID + 1`).
pub(super) fn parse_mark(text: &str) -> Option<u64> {
    let t = text.trim_end_matches('\n');
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok().filter(|n| (1..=MAX_ID + 1).contains(n))
}

/// The id a session file's digits name, if profd could have handed it out.
pub(super) fn parse_id(digits: &str) -> Option<u64> {
    digits.parse().ok().filter(|n| (1..=MAX_ID).contains(n))
}
