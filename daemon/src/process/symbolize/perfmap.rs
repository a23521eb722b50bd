//! JIT names from perf map files (`/tmp/perf-<pid>.map`, lines `START SIZE
//! name` in hex): parsing, and a per-process cache that re-reads the file when
//! it changes and keeps its last table (and the open file) after the target
//! exits. Finding the file belongs to `maps::Target`. A table lives as
//! long as its process's mappings; what all tables take is counted
//! ([`tables_bytes`]).
use crate::os::file_version::FileVersion;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes of every perf map table held now.
static TABLES_BYTES: AtomicU64 = AtomicU64::new(0);

/// What the perf map tables held now take in memory.
pub fn tables_bytes() -> u64 {
    TABLES_BYTES.load(Ordering::Relaxed)
}

/// The functions a perf map file lists, sorted by start address.
#[derive(Debug, Default)]
pub struct PerfMapTable {
    /// (start, end, line number, name); later lines win where ranges overlap.
    entries: Vec<(u64, u64, usize, Arc<str>)>,
    /// What the table takes in memory (counted in [`tables_bytes`]).
    bytes: u64,
}

impl Drop for PerfMapTable {
    fn drop(&mut self) {
        TABLES_BYTES.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// How far back `lookup` looks for an older, longer entry covering an address.
const OVERLAP_SCAN: usize = 16;

fn hex(field: &str) -> Option<u64> {
    let digits = field
        .strip_prefix("0x")
        .or_else(|| field.strip_prefix("0X"))
        .unwrap_or(field);
    u64::from_str_radix(digits, 16).ok()
}

impl PerfMapTable {
    /// Parse a perf map file; malformed lines are skipped.
    pub fn parse(text: &str) -> PerfMapTable {
        let mut entries: Vec<(u64, u64, usize, Arc<str>)> = Vec::new();
        for (line_no, line) in text.lines().enumerate() {
            let Some((start, rest)) = line.trim().split_once(char::is_whitespace) else {
                continue;
            };
            let Some((size, name)) = rest.trim_start().split_once(char::is_whitespace) else {
                continue;
            };
            let (Some(start), Some(size)) = (hex(start), hex(size)) else {
                continue;
            };
            let name = name.trim();
            let Some(end) = start.checked_add(size) else {
                continue;
            };
            if size == 0 || name.is_empty() {
                continue;
            }
            entries.push((start, end, line_no, Arc::from(name)));
        }
        entries.sort_by_key(|e| (e.0, e.2));
        let names: usize = entries.iter().map(|e| e.3.len() + 16).sum();
        let bytes = (names
            + entries.capacity() * std::mem::size_of::<(u64, u64, usize, Arc<str>)>())
            as u64;
        TABLES_BYTES.fetch_add(bytes, Ordering::Relaxed);
        PerfMapTable { entries, bytes }
    }

    /// The name of the JIT function containing `addr` (the latest line wins).
    pub fn lookup(&self, addr: u64) -> Option<&Arc<str>> {
        let i = self.entries.partition_point(|e| e.0 <= addr);
        self.entries[..i]
            .iter()
            .rev()
            .take(OVERLAP_SCAN)
            .filter(|e| addr < e.1)
            .max_by_key(|e| e.2)
            .map(|e| &e.3)
    }

    /// Number of functions.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table lists no function.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The version of a file, to notice changes.
fn stamp(file: &File) -> Option<FileVersion> {
    file.metadata().ok().map(|m| FileVersion::of(&m))
}

#[derive(Default)]
struct State {
    /// The file last read, kept open so it stays readable after exit.
    file: Option<File>,
    stamp: Option<FileVersion>,
    table: Arc<PerfMapTable>,
}

/// One process's perf map: the last table read and the file it came from.
#[derive(Default)]
pub struct PerfMap {
    state: Mutex<State>,
}

impl std::fmt::Debug for PerfMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("PerfMap")
            .field("open", &state.file.is_some())
            .field("functions", &state.table.len())
            .finish()
    }
}

impl PerfMap {
    /// Whether a perf map file has been found (and is held open).
    pub fn is_open(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .file
            .is_some()
    }

    /// The current table. `open` opens the file as the target sees it now
    /// (None once the target is gone or when it has no perf map); without it,
    /// the file held from an earlier read is re-read if it changed.
    pub fn table(&self, open: impl FnOnce() -> Option<File>) -> Arc<PerfMapTable> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(file) = open() {
            let now = stamp(&file);
            if now.is_none() || now != state.stamp {
                state.file = Some(file);
            }
        }
        let State {
            file,
            stamp: seen,
            table,
        } = &mut *state;
        if let Some(file) = file {
            let now = stamp(file);
            if now.is_none() || now != *seen {
                let mut text = String::new();
                let read = file
                    .seek(SeekFrom::Start(0))
                    .and_then(|_| file.read_to_string(&mut text));
                match read {
                    Ok(_) => {
                        *table = Arc::new(PerfMapTable::parse(&text));
                        *seen = now;
                    }
                    Err(err) => tracing::debug!(%err, "cannot read a perf map"),
                }
            }
        }
        state.table.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn parses_lines_and_skips_malformed_ones() {
        let table = PerfMapTable::parse(
            "7f0000001000 20 jit_add\n\
             garbage\n\
             7f0000002000 zz bad_size\n\
             0x7f0000003000 0x10 LazyCompile:*foo bar.js:12\n\
             7f0000004000 10\n\
             7f0000005000 0 empty\n\
             ffffffffffffffff 10 overflow\n\
             \n  7f0000006000   8   indented  \n",
        );
        assert_eq!(table.len(), 3);
        let name = |a| table.lookup(a).map(|n| n.to_string());
        assert_eq!(name(0x7f00_0000_1000), Some("jit_add".into()));
        assert_eq!(name(0x7f00_0000_101f), Some("jit_add".into()));
        assert_eq!(name(0x7f00_0000_1020), None);
        assert_eq!(
            name(0x7f00_0000_3008),
            Some("LazyCompile:*foo bar.js:12".into())
        );
        assert_eq!(name(0x7f00_0000_6004), Some("indented".into()));
        assert_eq!(name(0x7f00_0000_5000), None);
        assert_eq!(name(0x10), None);
    }

    #[test]
    fn later_lines_win_where_code_was_replaced() {
        let table = PerfMapTable::parse("1000 100 old_long\n1010 10 new_short\n1000 8 newest\n");
        let name = |a| table.lookup(a).map(|n| n.to_string());
        assert_eq!(name(0x1004), Some("newest".into()));
        assert_eq!(name(0x1012), Some("new_short".into()));
        assert_eq!(name(0x1050), Some("old_long".into()));
    }

    #[test]
    fn rereads_a_changed_file_and_keeps_it_after_it_is_gone() {
        let dir = std::env::temp_dir().join(format!("profd-perfmap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("perf-1.map");
        std::fs::write(&path, "1000 10 first\n").unwrap();
        let map = PerfMap::default();
        let open = || File::open(&path).ok();
        assert_eq!(map.table(open).lookup(0x1000).unwrap().as_ref(), "first");
        assert!(map.is_open());
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        writeln!(f, "2000 10 second").unwrap();
        drop(f);
        let table = map.table(open);
        assert_eq!(table.lookup(0x2000).unwrap().as_ref(), "second");
        // The target is gone: its path no longer opens, the held file serves.
        std::fs::remove_file(&path).unwrap();
        let table = map.table(|| None);
        assert_eq!(table.len(), 2);
        assert_eq!(table.lookup(0x1008).unwrap().as_ref(), "first");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
