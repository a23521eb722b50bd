//! One thread's Python frames, read from its process's memory: from
//! `_PyRuntime` to the thread state with the thread's native id, then
//! through the interpreter's chain of frames, each named from its code
//! object. Code objects are kept by address and checked to be the same
//! object at each read (code objects are freed and their addresses reused).
#[cfg(test)]
use super::layout::{Current, ThreadId};
use super::layout::{Entry, Instr, Layout};
use super::lines;
use crate::process::memory::Memory;
use std::sync::Arc;

use crate::os::bpf::RawFrame;

/// A Python frame, as a stack read gives it: its name is the function's
/// qualified name (`Class.method`; `<module>` for a module's own code).
pub use crate::process::interpreted::Frame as PyFrame;

/// Why a thread's Python frames could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read the process's memory at {addr:#x}: {source}")]
    Fault { addr: u64, source: std::io::Error },
    #[error("no Python thread state has the native thread id {0}")]
    NoThread(u32),
    #[error("more than {MAX_FRAMES} frames or {MAX_THREADS} threads: the chain loops or changed under the read")]
    TooLong,
    #[error("the object at {0:#x} is not a compact string or bytes of a sane size")]
    NotText(u64),
    #[error("the code object at {0:#x} changed since the sample")]
    Changed(u64),
    #[error("the threads' native ids cannot be found: {0}")]
    NoThreadIds(String),
    #[error("CPython {0} is not a version profd reads")]
    Unsupported(super::Version),
}

/// `_PyInterpreterFrame.owner` of 3.12's and 3.13's entry shims
/// (`FRAME_OWNED_BY_CSTACK`).
const OWNED_BY_C_STACK: u8 = 3;

/// Bounds on what is followed, against a chain that changes under the read.
pub const MAX_FRAMES: usize = 1024;
pub const MAX_THREADS: usize = 4096;
const MAX_STRING: u64 = 4096;
const MAX_TABLE: u64 = 1 << 20;

fn read(mem: &impl Memory, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
    mem.read(addr, buf)
        .map_err(|source| ReadError::Fault { addr, source })
}

fn word(mem: &impl Memory, addr: u64) -> Result<u64, ReadError> {
    let mut b = [0; 8];
    read(mem, addr, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn field<const N: usize>(buf: &[u8], at: u64) -> [u8; N] {
    let at = at as usize;
    buf.get(at..at + N)
        .and_then(|b| b.try_into().ok())
        .unwrap_or([0; N])
}

/// The threads of the interpreters at `runtime` (`_PyRuntime`'s address):
/// (native thread id, thread state's address). `pthread_tid`: where
/// glibc's `struct pthread` keeps the native id, for a layout whose thread
/// states name their threads by `pthread_t`.
#[cfg(test)]
pub fn threads(
    mem: &impl Memory,
    layout: &Layout,
    runtime: u64,
    pthread_tid: Option<u64>,
) -> Result<Vec<(u32, u64)>, ReadError> {
    let mut out = Vec::new();
    let mut interp = word(mem, runtime + layout.runtime_interpreters)?;
    while interp != 0 {
        let mut thread = word(mem, interp + layout.interp_threads)?;
        while thread != 0 {
            if out.len() >= MAX_THREADS {
                return Err(ReadError::TooLong);
            }
            let id = match (&layout.thread_id, pthread_tid) {
                (ThreadId::Native(at), _) => word(mem, thread + at)?,
                (ThreadId::Pthread(at), Some(tid)) => {
                    word(mem, word(mem, thread + at)? + tid)? & u64::from(u32::MAX)
                }
                (ThreadId::Pthread(_), None) => return Err(ReadError::NoThread(0)),
            };
            out.push((id as u32, thread));
            thread = word(mem, thread + layout.thread_next)?;
        }
        interp = word(mem, interp + layout.interp_next)?;
    }
    Ok(out)
}

/// What names each frame of the thread whose state is at `thread`,
/// innermost first: in user space, what the sample-time reader copies in
/// the kernel.
#[cfg(test)]
pub fn chain(mem: &impl Memory, layout: &Layout, thread: u64) -> Result<Vec<RawFrame>, ReadError> {
    let mut frame = match layout.current {
        Current::CFrame {
            thread_cframe,
            current,
        } => match word(mem, thread + thread_cframe)? {
            0 => 0,
            cframe => word(mem, cframe + current)?,
        },
        Current::Thread(at) => word(mem, thread + at)?,
    };
    let mut raw = Vec::new();
    while frame != 0 {
        if raw.len() >= MAX_FRAMES {
            return Err(ReadError::TooLong);
        }
        let mut buf = vec![0; layout.frame_bytes() as usize];
        read(mem, frame, &mut buf)?;
        frame = u64::from_le_bytes(field(&buf, layout.frame_previous));
        let code = u64::from_le_bytes(field(&buf, layout.frame_code));
        let owner = layout.frame_owner.map_or(0, |at| field::<1>(&buf, at)[0]);
        let mut identity = [0; 4];
        if owner != OWNED_BY_C_STACK {
            for (i, slot) in identity.iter_mut().enumerate() {
                *slot = word(mem, code + layout.code_file + 8 * i as u64)?;
            }
        }
        raw.push(RawFrame {
            code,
            identity,
            instr: u64::from_le_bytes(field(&buf, layout.frame_instr)),
            owner,
            entry: match layout.entry {
                Entry::Flag(at) => field::<1>(&buf, at)[0],
                Entry::Shim | Entry::Every => 0,
            },
        });
    }
    Ok(raw)
}

/// What identifies a code object at an address: the addresses of its file
/// name, qualified name and line table.
type Identity = (u64, u64, u64);

struct Code {
    identity: Identity,
    first_line: u32,
    name: Arc<str>,
    file: Arc<str>,
    table: Arc<[u8]>,
    /// The lines of the instructions met so far, by address (3.11 on) or
    /// index: a table is decoded from its start at each look-up.
    lines: foldhash::HashMap<u64, u32>,
}

/// Code objects named before, by address.
#[derive(Default)]
pub struct Codes(foldhash::HashMap<u64, Code>);

impl Codes {
    /// Code objects held.
    pub fn held(&self) -> usize {
        self.0.len()
    }

    /// The frames of the thread whose state is at `thread`, innermost
    /// first, read from user space as the sample-time reader reads them.
    #[cfg(test)]
    pub fn stack(
        &mut self,
        mem: &impl Memory,
        layout: &Layout,
        thread: u64,
    ) -> Result<Vec<PyFrame>, ReadError> {
        let raw = chain(mem, layout, thread)?;
        self.name(mem, layout, &raw)
    }

    /// The frames `raw`, innermost first, named from their code objects in
    /// `mem`.
    pub fn name(
        &mut self,
        mem: &impl Memory,
        layout: &Layout,
        raw: &[RawFrame],
    ) -> Result<Vec<PyFrame>, ReadError> {
        let mut out: Vec<PyFrame> = Vec::with_capacity(raw.len());
        for f in raw {
            if f.owner == OWNED_BY_C_STACK {
                // An entry shim: no code of its own; the frame before it
                // was the first its eval-loop call ran.
                if let (Entry::Shim, Some(last)) = (&layout.entry, out.last_mut()) {
                    last.entry = true;
                }
            } else {
                let mut read = self.frame(mem, layout, f)?;
                read.entry = match layout.entry {
                    Entry::Flag(_) => f.entry != 0,
                    Entry::Every => true,
                    Entry::Shim => false,
                };
                out.push(read);
            }
        }
        Ok(out)
    }

    /// The frame `f` runs: its code object's names and the line of its
    /// instruction.
    fn frame(
        &mut self,
        mem: &impl Memory,
        layout: &Layout,
        f: &RawFrame,
    ) -> Result<PyFrame, ReadError> {
        let known = self.code(mem, layout, f)?;
        let line = match known.lines.get(&f.instr) {
            Some(&line) => line,
            None => {
                let line = line_of(layout, known, f);
                known.lines.insert(f.instr, line);
                line
            }
        };
        Ok(PyFrame {
            name: known.name.clone(),
            file: known.file.clone(),
            first_line: known.first_line,
            line,
            entry: false,
        })
    }

    /// The code object of frame `f`, named from `mem` unless it is known
    /// by the identity the sample-time read copied; an object that changed
    /// since that read is an error.
    fn code(
        &mut self,
        mem: &impl Memory,
        layout: &Layout,
        f: &RawFrame,
    ) -> Result<&mut Code, ReadError> {
        let at = |offset: u64| {
            let i = offset.checked_sub(layout.code_file)? / 8;
            f.identity.get(i as usize).copied()
        };
        let identity = (
            at(layout.code_file),
            at(layout.code_qualname),
            at(layout.code_lines),
        );
        let (Some(file), Some(name), Some(table)) = identity else {
            return Err(ReadError::Changed(f.code));
        };
        let identity = (file, name, table);
        match self.0.get(&f.code) {
            Some(c) if c.identity == identity => {}
            _ => {
                let mut head = vec![0; layout.code_bytes() as usize];
                read(mem, f.code, &mut head)?;
                let now = (
                    u64::from_le_bytes(field(&head, layout.code_file)),
                    u64::from_le_bytes(field(&head, layout.code_qualname)),
                    u64::from_le_bytes(field(&head, layout.code_lines)),
                );
                if now != identity {
                    return Err(ReadError::Changed(f.code));
                }
                let read = Code {
                    identity,
                    first_line: u32::from_le_bytes(field(&head, layout.code_first_line)),
                    name: string(mem, layout, name)?,
                    file: string(mem, layout, file)?,
                    table: bytes(mem, layout, table)?,
                    lines: Default::default(),
                };
                self.0.insert(f.code, read);
            }
        }
        Ok(self.0.get_mut(&f.code).expect("just checked or inserted"))
    }
}

/// The line frame `f` of code object `code` is on; 0 where the code's
/// table gives none.
fn line_of(layout: &Layout, code: &Code, f: &RawFrame) -> u32 {
    // The instruction's offset in bytes. A frame that has not run one yet
    // points just before the first (3.11 on), or has an index of -1
    // (before), and is on its first line.
    let offset = match layout.instr {
        Instr::Pointer { code_units } => Some(f.instr.saturating_sub(f.code + code_units)),
        Instr::Index { unit_bytes } => u64::try_from(f.instr as u32 as i32)
            .ok()
            .map(|i| i * unit_bytes),
    };
    let line = match offset {
        Some(at) => lines::line(layout.lines, &code.table, code.first_line, at as usize),
        None => Some(code.first_line),
    };
    line.unwrap_or(0)
}

/// The compact string object at `addr`.
fn string(mem: &impl Memory, layout: &Layout, addr: u64) -> Result<Arc<str>, ReadError> {
    let mut head = vec![0; layout.str_state as usize + 4];
    read(mem, addr, &mut head)?;
    let length = u64::from_le_bytes(field(&head, layout.str_length));
    let state = u32::from_le_bytes(field(&head, layout.str_state));
    // Bits: interned (2), kind (3), compact (1), ascii (1).
    let (kind, compact, ascii) = ((state >> 2) & 7, state >> 5 & 1 == 1, state >> 6 & 1 == 1);
    if !compact || length > MAX_STRING || !matches!(kind, 1 | 2 | 4) {
        return Err(ReadError::NotText(addr));
    }
    if ascii {
        let mut text = vec![0; length as usize];
        read(mem, addr + layout.str_ascii_data, &mut text)?;
        return Ok(Arc::from(String::from_utf8_lossy(&text).as_ref()));
    }
    let width = kind as usize;
    let mut raw = vec![0; length as usize * width];
    read(mem, addr + layout.str_compact_data, &mut raw)?;
    let text: String = raw
        .chunks(width)
        .map(|c| {
            let mut b = [0; 4];
            b[..width].copy_from_slice(c);
            char::from_u32(u32::from_le_bytes(b)).unwrap_or(char::REPLACEMENT_CHARACTER)
        })
        .collect();
    Ok(Arc::from(text))
}

/// The bytes object at `addr`.
fn bytes(mem: &impl Memory, layout: &Layout, addr: u64) -> Result<Arc<[u8]>, ReadError> {
    let size = word(mem, addr + layout.var_size)?;
    if size > MAX_TABLE {
        return Err(ReadError::NotText(addr));
    }
    let mut data = vec![0; size as usize];
    read(mem, addr + layout.bytes_data, &mut data)?;
    Ok(Arc::from(data))
}
