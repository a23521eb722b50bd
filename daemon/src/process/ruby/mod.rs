//! Ruby code named from outside the process, as rbspy reads it: the CRuby
//! interpreter a process runs (libruby or a static `ruby`, and its version
//! from `ruby_version`), where its VM loop is, and the Ruby frames a
//! sample-time read copied, named from the process's memory with no flag,
//! restart or pause of the program.
mod layout;
mod stack;

pub use layout::Version;
pub use stack::Iseqs;

use crate::os::bpf::{Record, RubyConfig, Status};
pub use crate::process::interpreted::FindError;
use crate::process::interpreted::{
    self, in_root, maps_any, Frame, Interpreted, Registration, Runtime,
};
use crate::process::maps::{module_name, Backing, ProcessMaps, Segments};
use crate::process::memory::ProcessMemory;
use object::{Object, ObjectSection, ObjectSymbol};
use std::ops::Range;
use std::os::unix::fs::FileExt;

/// A CRuby interpreter found in a process.
#[derive(Debug, Clone)]
pub struct Interpreter {
    pub version: Version,
    /// Where `ruby_current_vm_ptr` is in the process.
    pub vm_ptr: u64,
    /// `rb_vm_exec`'s code in the process: each of its frames on a native
    /// stack runs one batch of Ruby frames, the last of which has
    /// VM_FRAME_FLAG_FINISH.
    pub exec: Range<u64>,
    /// `vm_exec_core`'s (the loop `rb_vm_exec` calls, a local function),
    /// empty when it is not found.
    pub core: Range<u64>,
    /// Where `rb_cObject` is (classes are named from it).
    pub object: u64,
    layout: Option<&'static layout::Layout>,
}

/// Whether a mapped file may hold CRuby: `libruby-3.1.so.3.1`,
/// `libruby.so.3.1`, or a `ruby` executable.
fn may_be_ruby(name: &str) -> bool {
    name.starts_with("libruby") || name == "ruby" || name.starts_with("ruby3")
}

impl Interpreter {
    /// The CRuby interpreter of process `pid`, whose executable mappings
    /// are `maps`: the first mapped libruby or `ruby` with the symbols
    /// `ruby_version`, `ruby_current_vm_ptr`, `rb_cObject` and
    /// `rb_vm_exec`. None when
    /// it runs none.
    pub fn find(pid: u32, maps: &ProcessMaps) -> Result<Option<Interpreter>, FindError> {
        for m in maps.iter() {
            let Backing::File(path) = &m.backing else {
                continue;
            };
            if !may_be_ruby(&module_name(path)) {
                continue;
            }
            let readable = in_root(pid, path);
            let file_error = |source| FindError::File {
                path: readable.clone(),
                source,
            };
            let file = std::fs::File::open(&readable).map_err(file_error)?;
            let data = symbol_parts(&file).map_err(file_error)?;
            let elf = object::File::parse(&*data).map_err(|source| FindError::Elf {
                path: readable.clone(),
                source,
            })?;
            let Some(found) = Symbols::of(&elf, &file) else {
                continue;
            };
            let Some(vaddr) = Segments::of(&*data).and_then(|s| s.vaddr(m.pgoff)) else {
                continue;
            };
            let bias = m.start.wrapping_sub(vaddr);
            let shift = |r: &Range<u64>| bias.wrapping_add(r.start)..bias.wrapping_add(r.end);
            return Ok(Some(Interpreter {
                version: found.version,
                vm_ptr: bias.wrapping_add(found.vm_ptr),
                exec: shift(&found.exec),
                core: shift(&found.core),
                object: bias.wrapping_add(found.object),
                layout: layout::of(found.version),
            }));
        }
        Ok(None)
    }

    fn layout(&self) -> Result<&'static layout::Layout, String> {
        self.layout
            .ok_or_else(|| format!("Ruby {} is not a version profd reads", self.version))
    }

    /// What the sample-time reader follows in this interpreter.
    pub fn config(&self) -> Result<RubyConfig, String> {
        let l = self.layout()?;
        Ok(RubyConfig {
            vm_ptr: self.vm_ptr,
            vm_main_ractor: l.vm_main_ractor,
            ractor_threads: l.ractor_threads,
            thread_tid: l.thread_tid,
            thread_ec: l.thread_ec,
            cfp_bytes: l.cfp_bytes,
            cfp_pc: l.cfp_pc,
            cfp_iseq: l.cfp_iseq,
            cfp_ep: l.cfp_ep,
            iseq_body: l.iseq_body,
            body_location: l.body_pathobj,
        })
    }
}

/// What an ELF file says of the CRuby in it (addresses in the file).
struct Symbols {
    version: Version,
    vm_ptr: u64,
    exec: Range<u64>,
    core: Range<u64>,
    object: u64,
}

impl Symbols {
    /// Names looked up, in the order of [`Symbols::of`]'s `found`.
    const NAMES: [&'static [u8]; 5] = [
        b"ruby_version",
        b"ruby_current_vm_ptr",
        b"rb_cObject",
        b"rb_vm_exec",
        b"vm_exec_core",
    ];

    /// What `elf` (made by [`symbol_parts`] from `file`) says.
    fn of(elf: &object::File, file: &std::fs::File) -> Option<Symbols> {
        // One pass over the symbols: a session waits for this before its
        // target's first samples can be read.
        let mut found = [None; 5];
        for s in elf.dynamic_symbols().chain(elf.symbols()) {
            let Ok(name) = s.name_bytes() else { continue };
            if let Some(i) = Self::NAMES.iter().position(|&n| n == name) {
                found[i].get_or_insert((s.address(), s.size()));
                if found.iter().all(Option::is_some) {
                    break;
                }
            }
        }
        let [version_at, vm_ptr, object, exec, core] = found;
        let (version_at, (vm_ptr, _), (object, _), (exec, exec_size)) =
            (version_at?.0, vm_ptr?, object?, exec?);
        let exec = exec..exec + exec_size;
        // Bytes at an address, read from the file.
        let bytes = |at: u64, size: u64| {
            let s = (elf.sections())
                .find(|s| s.address() <= at && at + size <= s.address() + s.size())?;
            let (offset, _) = s.file_range()?;
            let mut buf = vec![0; usize::try_from(size).ok()?];
            file.read_exact_at(&mut buf, offset + (at - s.address()))
                .ok()?;
            Some(buf)
        };
        let version = Version::parse(&bytes(version_at, 16)?)?;
        let core = match core {
            Some((at, size)) => at..at + size,
            None => bytes(exec.start, exec.end - exec.start)
                .map_or(0..0, |code| loop_called(exec.start, &code)),
        };
        Some(Symbols {
            version,
            vm_ptr,
            exec,
            core,
            object,
        })
    }
}

/// ELF file `file` as far as its symbols go: a buffer of the file's size
/// with its header, program and section headers and symbol and string
/// tables read in place, zeros elsewhere (libruby is megabytes, and a
/// session's first samples of the process wait for its symbols).
fn symbol_parts(file: &std::fs::File) -> std::io::Result<Vec<u8>> {
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let len = file.metadata()?.len();
    if len > 1 << 30 {
        return Err(invalid("larger than 1 GiB"));
    }
    let mut data = vec![0; len as usize];
    let fill = |data: &mut Vec<u8>, offset: u64, size: u64| {
        let end = offset.checked_add(size).filter(|&e| e <= len);
        let end = end.ok_or_else(|| invalid("a part past the file's end"))?;
        file.read_exact_at(&mut data[offset as usize..end as usize], offset)
    };
    fill(&mut data, 0, 64.min(len))?;
    let u16_at = |d: &[u8], at: usize| u16::from_le_bytes([d[at], d[at + 1]]) as u64;
    let u64_at = |d: &[u8], at: usize| u64::from_le_bytes(d[at..at + 8].try_into().expect("8"));
    // A 64-bit little-endian ELF file (x86-64, aarch64); any other is
    // read whole.
    if len < 64 || data[..4] != *b"\x7fELF" || data[4] != 2 || data[5] != 1 {
        file.read_exact_at(&mut data, 0)?;
        return Ok(data);
    }
    let (phoff, phsize) = (
        u64_at(&data, 0x20),
        u16_at(&data, 0x36) * u16_at(&data, 0x38),
    );
    let (shoff, shentsize, shnum) = (
        u64_at(&data, 0x28),
        u16_at(&data, 0x3a),
        u16_at(&data, 0x3c),
    );
    if shentsize < 64 {
        return Err(invalid("section headers smaller than ELF64's"));
    }
    fill(&mut data, phoff, phsize)?;
    fill(&mut data, shoff, shentsize * shnum)?;
    for i in 0..shnum {
        let header = (shoff + i * shentsize) as usize;
        let kind = u32::from_le_bytes(data[header + 4..header + 8].try_into().expect("4"));
        // SHT_SYMTAB, SHT_STRTAB, SHT_DYNSYM.
        if matches!(kind, 2 | 3 | 11) {
            let (offset, size) = (u64_at(&data, header + 0x18), u64_at(&data, header + 0x20));
            fill(&mut data, offset, size)?;
        }
    }
    Ok(data)
}

/// `vm_exec_core`'s code, when the file has no symbol for it: in vm.c it
/// is defined just before `rb_vm_exec`, which calls it directly, so it
/// begins at the greatest target of a direct call (`e8 rel32`) in
/// `rb_vm_exec`'s code (at `start`) below `start`, and ends at `start`.
/// Empty when there is none of a loop's size.
fn loop_called(start: u64, code: &[u8]) -> Range<u64> {
    let target = (0..code.len().saturating_sub(4))
        .filter(|&i| code[i] == 0xe8)
        .filter_map(|i| {
            let rel = i32::from_le_bytes(code[i + 1..i + 5].try_into().ok()?);
            let next = start + i as u64 + 5;
            Some(next.wrapping_add(rel as i64 as u64))
        })
        .filter(|&t| t < start)
        .max();
    match target {
        // The loop is tens of kilobytes of code.
        Some(t) if start - t >= 4096 => t..start,
        _ => 0..0,
    }
}

/// A process running CRuby, as its samples are read: the interpreter, the
/// process's memory and the iseqs named so far.
pub struct Process {
    pub interpreter: Interpreter,
    reader: Registration,
    memory: ProcessMemory,
    iseqs: Iseqs,
}

/// Iseqs a process keeps named at most; past it they are named anew.
const MAX_ISEQS: usize = 2048;

impl Process {
    /// Process `pid` (executable mappings `maps`), when it runs CRuby.
    pub fn find(pid: u32, maps: &ProcessMaps) -> Result<Option<Process>, FindError> {
        if !maps_any(maps, may_be_ruby) {
            return Ok(None);
        }
        let Some(interpreter) = Interpreter::find(pid, maps)? else {
            return Ok(None);
        };
        let memory = interpreted::memory(pid)?;
        Ok(Some(Process {
            iseqs: Iseqs::new(interpreter.object),
            interpreter,
            reader: Registration::new(pid),
            memory,
        }))
    }

    /// Have its threads' frames read at their samples, from now on; why
    /// not when they cannot be.
    pub fn register(&mut self) -> Result<(), String> {
        let config = self.interpreter.config()?;
        (self.reader).register(|probe, pid| probe.register_ruby(pid, &config))
    }

    /// Thread `tid`'s frames now, read from user space as the sample-time
    /// reader reads them at a sample.
    #[cfg(test)]
    pub fn record_now(&self, tid: u32) -> Record {
        let read = self
            .interpreter
            .layout()
            .map_err(|_| Status::Fault)
            .and_then(|l| stack::chain(&self.memory, l, self.interpreter.vm_ptr, tid));
        let (status, frames) = match read {
            Ok(frames) => (Status::Read, frames),
            Err(status) => (status, Vec::new()),
        };
        Record {
            time: 0,
            status,
            frames,
        }
    }
}

impl Interpreted for Process {
    fn runtime(&self) -> Runtime {
        Runtime::Ruby
    }

    fn is_eval(&self, addr: u64) -> bool {
        self.interpreter.exec.contains(&addr)
    }

    fn is_loop(&self, addr: u64) -> bool {
        self.interpreter.core.contains(&addr)
    }

    fn name(&mut self, record: &Record) -> Result<Vec<Frame>, String> {
        if self.iseqs.held() > MAX_ISEQS {
            self.iseqs = Iseqs::new(self.interpreter.object);
        }
        let layout = self.interpreter.layout()?;
        match record.status {
            Status::Read => self.iseqs.name(&self.memory, layout, &record.frames),
            Status::NoThread => Err("no Ruby thread has the sampled thread's id".into()),
            Status::Truncated => Err("more Ruby frames than the reader follows".into()),
            Status::Fault => Err("a read of the process's memory failed".into()),
        }
    }
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
