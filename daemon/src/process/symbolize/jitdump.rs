//! JIT code from jitdump files (`jit-<pid>.dump`, the format of perf's
//! `jitdump-specification.txt`, written by node `--perf-prof`, CPython
//! `-X perf_jit` and others): the records parsed as the file grows (code
//! loads and moves, the source lines and unwind tables of the next load) into
//! a table of code ranges with their names, lines and eh_frame, and a
//! per-process reader that keeps the file open and reads only what was added.
//! Finding the file belongs to `maps::Target`; unwinding with the tables to
//! `unwind`. What all tables take is counted ([`tables_bytes`]) and each
//! is capped ([`MAX_TABLE_BYTES`]).
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes of every jitdump table held now.
static TABLES_BYTES: AtomicU64 = AtomicU64::new(0);
/// Code loads not kept because their table was at its cap.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// What the jitdump tables held now take in memory.
pub fn tables_bytes() -> u64 {
    TABLES_BYTES.load(Ordering::Relaxed)
}

/// Code loads left out of full tables since start.
pub fn loads_dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Most bytes one process's table takes; later loads are left out.
pub const MAX_TABLE_BYTES: u64 = 32 << 20;
/// A record claiming more is taken for garbage: the reading stops there.
const MAX_RECORD: usize = 64 << 20;
/// What one read takes of the file at most (more for a larger record).
const CHUNK: usize = 4 << 20;
/// How far back `lookup` looks for an older, longer load covering an address.
const OVERLAP_SCAN: usize = 16;

const MAGIC: u32 = 0x4A69_5444;
const HEADER: usize = 40;
const RECORD_HEADER: usize = 16;
const CODE_LOAD: u32 = 0;
const CODE_MOVE: u32 = 1;
const DEBUG_INFO: u32 = 2;
const CODE_CLOSE: u32 = 3;
const UNWINDING_INFO: u32 = 4;

/// A source line from a debug info record: where it starts in the code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// Bytes from the start of the code.
    pub offset: u64,
    pub line: u32,
    pub file: Arc<str>,
}

/// The unwind tables a code load carries: its .eh_frame and
/// .eh_frame_hdr, which perf (genelf) places right after the code, at the
/// code's end rounded up to 8 bytes, the header after the frame table.
#[derive(Debug, PartialEq, Eq)]
pub struct Unwind {
    pub eh_frame: Arc<[u8]>,
    pub eh_frame_hdr: Arc<[u8]>,
}

/// One piece of JIT code: a load (or a move of one).
#[derive(Debug, Clone)]
pub struct Code {
    pub start: u64,
    pub end: u64,
    /// Its place in the file: later ones win where they overlap.
    seq: u64,
    /// The runtime's index of the code (a move names it).
    index: u64,
    pub name: Arc<str>,
    lines: Option<Arc<[Line]>>,
    pub unwind: Option<Arc<Unwind>>,
}

impl Code {
    /// Where its .eh_frame lies in the process (after the code, 8-aligned).
    pub fn eh_frame_address(&self) -> u64 {
        self.start + (self.end - self.start).next_multiple_of(8)
    }

    /// The source file and line of `addr` (in this code), when its load
    /// came with debug info.
    pub fn line(&self, addr: u64) -> Option<(&Arc<str>, u32)> {
        let lines = self.lines.as_ref()?;
        let offset = addr.checked_sub(self.start)?;
        let i = lines.partition_point(|l| l.offset <= offset);
        let l = lines.get(i.checked_sub(1)?)?;
        Some((&l.file, l.line))
    }

    /// Its place among the loads of its file, later ones higher.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    fn bytes(&self) -> u64 {
        let lines = self.lines.as_ref().map_or(0, |l| {
            l.iter().map(|l| l.file.len() as u64 + 48).sum::<u64>()
        });
        let unwind = self
            .unwind
            .as_ref()
            .map_or(0, |u| (u.eh_frame.len() + u.eh_frame_hdr.len() + 64) as u64);
        std::mem::size_of::<Code>() as u64 + self.name.len() as u64 + 16 + lines + unwind
    }
}

/// The code a jitdump file lists, sorted by start address.
#[derive(Debug, Default)]
pub struct JitDumpTable {
    code: Vec<Code>,
    /// What the table takes in memory (counted in [`tables_bytes`]).
    bytes: u64,
}

impl Drop for JitDumpTable {
    fn drop(&mut self) {
        TABLES_BYTES.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

impl JitDumpTable {
    /// This table with `new` code added (in the order read): a load that
    /// covers exactly the range of an older one replaces it; past
    /// [`MAX_TABLE_BYTES`] new loads are left out (counted). None when
    /// every one was.
    fn with(&self, new: Vec<Code>) -> Option<JitDumpTable> {
        let mut code = self.code.clone();
        let mut bytes = self.bytes;
        for c in new {
            let b = c.bytes();
            if bytes + b > MAX_TABLE_BYTES {
                DROPPED.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            bytes += b;
            code.push(c);
        }
        if code.len() == self.code.len() {
            return None;
        }
        code.sort_by_key(|c| (c.start, c.seq));
        let before = code.len();
        // Of loads with one range, the last (highest seq, sorted last) stays.
        code.dedup_by(|later, earlier| {
            let same = later.start == earlier.start && later.end == earlier.end;
            if same {
                std::mem::swap(later, earlier);
            }
            same
        });
        if code.len() != before {
            bytes = code.iter().map(Code::bytes).sum();
        }
        TABLES_BYTES.fetch_add(bytes, Ordering::Relaxed);
        Some(JitDumpTable { code, bytes })
    }

    /// The code containing `addr` (the latest load wins).
    pub fn lookup(&self, addr: u64) -> Option<&Code> {
        let i = self.code.partition_point(|c| c.start <= addr);
        self.code[..i]
            .iter()
            .rev()
            .take(OVERLAP_SCAN)
            .filter(|c| addr < c.end)
            .max_by_key(|c| c.seq)
    }

    /// Every piece of code, by start address.
    pub fn code(&self) -> &[Code] {
        &self.code
    }

    /// Number of pieces of code.
    pub fn len(&self) -> usize {
        self.code.len()
    }

    /// Whether it lists no code.
    pub fn is_empty(&self) -> bool {
        self.code.is_empty()
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The NUL-terminated string at `at` and where what follows it starts.
fn str_at(b: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = b.get(at..)?;
    let len = rest.iter().position(|&c| c == 0)?;
    Some((&rest[..len], at + len + 1))
}

/// How far the reading of a file got.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Stage {
    #[default]
    Header,
    Records,
    /// A CLOSE record, or bytes that are not a jitdump: nothing more is read.
    Done,
}

/// The state of reading one file: what the next code load takes from the
/// records before it.
#[derive(Debug, Default)]
pub struct Parser {
    stage: Stage,
    seq: u64,
    /// Debug info for the load at that address.
    lines: Option<(u64, Arc<[Line]>)>,
    unwind: Option<Arc<Unwind>>,
}

impl Parser {
    /// Parse the whole records at the start of `bytes` (the file from where
    /// the last call stopped), adding their code to `out`. How many bytes
    /// were used: a partial last record is left for the next call. Moves
    /// find the code they move in `out` or `known`, the code read before.
    pub fn feed(&mut self, bytes: &[u8], known: &JitDumpTable, out: &mut Vec<Code>) -> usize {
        let mut at = 0;
        if self.stage == Stage::Header {
            let (Some(magic), Some(size)) = (u32_at(bytes, 0), u32_at(bytes, 8)) else {
                return 0;
            };
            if magic != MAGIC || (size as usize) < HEADER || size as usize > MAX_RECORD {
                tracing::debug!(magic, size, "not a jitdump file");
                self.stage = Stage::Done;
                return 0;
            }
            if bytes.len() < size as usize {
                return 0;
            }
            at = size as usize;
            self.stage = Stage::Records;
        }
        while self.stage == Stage::Records {
            let rest = &bytes[at..];
            let (Some(id), Some(size)) = (u32_at(rest, 0), u32_at(rest, 4)) else {
                break;
            };
            let size = size as usize;
            if !(RECORD_HEADER..=MAX_RECORD).contains(&size) {
                tracing::debug!(id, size, "a jitdump record of a wrong size: reading stops");
                self.stage = Stage::Done;
                break;
            }
            let Some(record) = rest.get(..size) else {
                break;
            };
            self.record(id, &record[RECORD_HEADER..], known, out);
            at += size;
        }
        at
    }

    /// The size of the record (or header) `bytes` starts with, if it says.
    pub fn needs(&self, bytes: &[u8]) -> Option<usize> {
        match self.stage {
            Stage::Header => u32_at(bytes, 8),
            Stage::Records => u32_at(bytes, 4),
            Stage::Done => None,
        }
        .map(|n| (n as usize).min(MAX_RECORD))
    }

    /// Whether the file ended (a CLOSE record) or cannot be read further.
    pub fn done(&self) -> bool {
        self.stage == Stage::Done
    }

    fn record(&mut self, id: u32, body: &[u8], known: &JitDumpTable, out: &mut Vec<Code>) {
        match id {
            CODE_LOAD => out.extend(self.load(body)),
            CODE_MOVE => {
                if let Some(code) = self.moved(body, known, out) {
                    out.push(code);
                }
            }
            DEBUG_INFO => self.lines = debug_info(body),
            UNWINDING_INFO => self.unwind = unwinding_info(body).map(Arc::new),
            CODE_CLOSE => self.stage = Stage::Done,
            _ => {}
        }
    }

    /// pid u32, tid u32, vma u64, code_addr u64, code_size u64, code_index
    /// u64, name (NUL-terminated), then the code.
    fn load(&mut self, body: &[u8]) -> Option<Code> {
        let lines = self.lines.take();
        let unwind = self.unwind.take();
        let start = u64_at(body, 16)?;
        let size = u64_at(body, 24)?;
        let index = u64_at(body, 32)?;
        let (name, _) = str_at(body, 40)?;
        let end = start.checked_add(size).filter(|_| size > 0)?;
        let lines = lines.filter(|(at, _)| *at == start).map(|(_, l)| l);
        self.seq += 1;
        Some(Code {
            start,
            end,
            seq: self.seq,
            index,
            name: Arc::from(String::from_utf8_lossy(name).as_ref()),
            lines,
            unwind,
        })
    }

    /// pid u32, tid u32, vma u64, old_code_addr u64, new_code_addr u64,
    /// code_size u64, code_index u64: the code loaded at the old address,
    /// now (also) at the new one, with its name, lines and unwind tables.
    fn moved(&mut self, body: &[u8], known: &JitDumpTable, out: &[Code]) -> Option<Code> {
        let old = u64_at(body, 16)?;
        let new = u64_at(body, 24)?;
        let size = u64_at(body, 32)?;
        let index = u64_at(body, 40)?;
        let it = |c: &&Code| c.start == old && c.index == index;
        let at = known.code.partition_point(|c| c.start < old);
        let before = known.code[at..].iter().take_while(|c| c.start == old);
        let from = match out.iter().rev().find(it) {
            Some(c) => c,
            None => before.filter(it).max_by_key(|c| c.seq)?,
        };
        self.seq += 1;
        Some(Code {
            start: new,
            end: new.checked_add(size).filter(|_| size > 0)?,
            seq: self.seq,
            ..from.clone()
        })
    }
}

/// code_addr u64, nr_entry u64, then entries: code_addr u64, line u32,
/// discrim u32, file name (NUL-terminated; `"\xff"` for the previous
/// entry's). Entries outside the code's first 16 MiB, or past the record,
/// make the whole record unusable.
fn debug_info(body: &[u8]) -> Option<(u64, Arc<[Line]>)> {
    let code = u64_at(body, 0)?;
    let n = u64_at(body, 8)?;
    let mut at = 16;
    let mut lines: Vec<Line> = Vec::new();
    let mut last: Option<Arc<str>> = None;
    for _ in 0..n {
        let addr = u64_at(body, at)?;
        let line = u32_at(body, at + 8)?;
        let (name, next) = str_at(body, at + 16)?;
        at = next;
        let offset = addr.checked_sub(code).filter(|&o| o < 16 << 20)?;
        let file = match (name, &last) {
            (b"\xff", Some(prev)) => prev.clone(),
            _ => Arc::from(String::from_utf8_lossy(name).as_ref()),
        };
        last = Some(file.clone());
        lines.push(Line { offset, line, file });
    }
    lines.sort_by_key(|l| l.offset);
    Some((code, lines.into()))
}

/// unwinding_size u64, eh_frame_hdr_size u64, mapped_size u64, then
/// unwinding_size bytes: the .eh_frame, then its header. None when it
/// holds no frame table (a header alone: the code has no unwind info).
fn unwinding_info(body: &[u8]) -> Option<Unwind> {
    let size = usize::try_from(u64_at(body, 0)?).ok()?;
    let hdr = usize::try_from(u64_at(body, 8)?).ok()?;
    let data = body.get(24..24usize.checked_add(size)?)?;
    let table = size.checked_sub(hdr)?;
    // A CIE and an FDE take 8 bytes at least each.
    if table < 16 {
        return None;
    }
    Some(Unwind {
        eh_frame: Arc::from(&data[..table]),
        eh_frame_hdr: Arc::from(&data[table..]),
    })
}

#[derive(Default)]
struct State {
    /// The file, kept open so it stays readable after exit.
    file: Option<File>,
    /// Where the next read starts.
    read: u64,
    parser: Parser,
    table: Arc<JitDumpTable>,
}

/// One process's jitdump: the table read so far and the file it comes from.
#[derive(Default)]
pub struct JitDump {
    state: Mutex<State>,
}

impl std::fmt::Debug for JitDump {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("JitDump")
            .field("open", &state.file.is_some())
            .field("read", &state.read)
            .field("code", &state.table.len())
            .finish()
    }
}

impl JitDump {
    /// Whether a jitdump file has been found (and is held open).
    pub fn is_open(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .file
            .is_some()
    }

    /// The current table, with what was added to the file since the last
    /// call read. `open` opens the file when none is held yet.
    pub fn table(&self, open: impl FnOnce() -> Option<File>) -> Arc<JitDumpTable> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.file.is_none() {
            state.file = open();
        }
        let State {
            file,
            read,
            parser,
            table,
        } = &mut *state;
        let Some(file) = file else {
            return table.clone();
        };
        let Ok(len) = file.metadata().map(|m| m.len()) else {
            return table.clone();
        };
        let mut new = Vec::new();
        let mut want = CHUNK;
        while *read < len && !parser.done() {
            let n = usize::try_from(len - *read).unwrap_or(usize::MAX).min(want);
            let mut buf = vec![0; n];
            if let Err(err) = file.read_exact_at(&mut buf, *read) {
                tracing::debug!(%err, "cannot read a jitdump");
                break;
            }
            let used = parser.feed(&buf, table, &mut new);
            *read += used as u64;
            if used == 0 {
                // A record larger than what was read: read it whole, if
                // the file holds it yet.
                match parser.needs(&buf) {
                    Some(size) if size > n && (size as u64) <= len - *read => want = size,
                    _ => break,
                }
            } else {
                want = CHUNK;
            }
        }
        if let Some(grown) = table.with(new) {
            *table = Arc::new(grown);
        }
        table.clone()
    }
}

#[cfg(test)]
#[path = "jitdump_tests.rs"]
pub(crate) mod tests;
