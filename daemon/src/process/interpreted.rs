//! What the session's merge needs of a process running an interpreter,
//! whichever runtime it is: which native frames run a batch of the
//! interpreter's frames, which belong to its loop and go, and the frames a
//! sample-time read copied, named; and what finding and registering such a
//! process takes, the same for each runtime.
use crate::os::bpf::{PythonProbe, Record};
use crate::process::maps::{module_name, Backing, ProcessMaps};
use crate::process::memory::{Memory, ProcessMemory};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An interpreter frame, as a read names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The function's name as the runtime spells it.
    pub name: Arc<str>,
    /// The source file of its code.
    pub file: Arc<str>,
    /// The function's first line, by which a flame graph groups it.
    pub first_line: u32,
    /// The line running, 0 when the code's table gives none.
    pub line: u32,
    /// The first frame of a call of the interpreter's loop: the frames up
    /// to and including it are those one native loop frame runs.
    pub entry: bool,
}

/// The runtimes whose frames profd reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Runtime {
    Python,
    Ruby,
    Perl,
}

/// A process running an interpreter, as its samples are merged.
pub trait Interpreted {
    fn runtime(&self) -> Runtime;

    /// Whether `addr` is in the native function each of whose frames runs
    /// one batch of interpreter frames (CPython's eval loop, CRuby's
    /// `rb_vm_exec`, Perl's `Perl_runops_standard`): the frame is replaced by them.
    fn is_eval(&self, addr: u64) -> bool;

    /// Whether `addr` is in native code of the interpreter's loop that a
    /// frame of [`Interpreted::is_eval`] calls, and that the interpreter
    /// frames stand for (CRuby's `vm_exec_core`): such frames are dropped.
    fn is_loop(&self, _addr: u64) -> bool {
        false
    }

    /// The interpreter frames a sample-time read copied, innermost first.
    fn name(&mut self, record: &Record) -> Result<Vec<Frame>, String>;
}

/// Why a process's interpreter cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    #[error("cannot read {}: {source}", path.display())]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not an ELF file profd reads: {source}", path.display())]
    Elf {
        path: PathBuf,
        source: object::Error,
    },
    /// CPython 3.11 and later, whose version is read from memory.
    #[error("cannot read the version in the process's memory: {0}")]
    Memory(std::io::Error),
}

/// Whether any of the files `maps` maps has a name `may_be` accepts.
pub fn maps_any(maps: &ProcessMaps, may_be: impl Fn(&str) -> bool) -> bool {
    maps.iter().any(|m| match &m.backing {
        Backing::File(path) => may_be(&module_name(path)),
        Backing::Special(_) => false,
    })
}

/// Where process `pid`'s file `path` can be read from here (through its
/// root, for a process in a container).
pub fn in_root(pid: u32, path: &Path) -> PathBuf {
    Path::new("/proc")
        .join(pid.to_string())
        .join("root")
        .join(path.strip_prefix("/").unwrap_or(path))
}

/// Process `pid`'s memory, opened for reading.
pub fn memory(pid: u32) -> Result<ProcessMemory, FindError> {
    ProcessMemory::open(pid).map_err(|source| FindError::File {
        path: PathBuf::from(format!("/proc/{pid}/mem")),
        source,
    })
}

/// A process as the sample-time reader knows it: registered at most once,
/// and unregistered when dropped.
pub struct Registration {
    pid: u32,
    /// Whether the sample-time reader reads it for this session.
    registered: bool,
}

impl Registration {
    /// Process `pid`, not registered yet.
    pub fn new(pid: u32) -> Registration {
        Registration {
            pid,
            registered: false,
        }
    }

    #[cfg(test)]
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Have the process read at its samples by `register`, unless it is
    /// already; why not when it cannot be.
    pub fn register(
        &mut self,
        register: impl FnOnce(&PythonProbe, u32) -> Result<(), String>,
    ) -> Result<(), String> {
        if !self.registered {
            register(PythonProbe::get()?, self.pid)?;
            self.registered = true;
        }
        Ok(())
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if self.registered {
            if let Ok(probe) = PythonProbe::get() {
                probe.unregister(self.pid);
            }
        }
    }
}

/// `program` run with `args`, its stdin and stdout piped, once it printed
/// its first line; and that line.
#[cfg(test)]
pub fn spawn_ready(program: &str, args: &[&str]) -> (std::process::Child, String) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let mut ready = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    (child, ready)
}

/// `buf.len()` bytes of a process's memory at `addr`; why not, in words.
pub fn read(mem: &impl Memory, addr: u64, buf: &mut [u8]) -> Result<(), String> {
    mem.read(addr, buf)
        .map_err(|e| format!("cannot read the process's memory at {addr:#x}: {e}"))
}

/// The 64-bit word of a process's memory at `addr`.
pub fn word(mem: &impl Memory, addr: u64) -> Result<u64, String> {
    let mut b = [0; 8];
    read(mem, addr, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// The 64-bit field at offset `at` of a struct read into `buf`; 0 past
/// its end.
pub fn field(buf: &[u8], at: u64) -> u64 {
    let at = at as usize;
    buf.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}
