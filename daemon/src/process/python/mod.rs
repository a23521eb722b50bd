//! Python code named from outside the process, as py-spy reads it: the
//! CPython interpreter a process runs (its binary or libpython, and its
//! version), and each thread's Python frames read from the process's
//! memory, with no flag, restart or pause of the program.
mod layout;
mod lines;
mod stack;

pub use layout::Version;
pub use stack::{Codes, PyFrame, ReadError};

use crate::process::memory::{Memory, ProcessMemory};

use crate::os::bpf::{Config, Record, Status};
pub use crate::process::interpreted::FindError;
use crate::process::interpreted::{self, in_root, maps_any, Interpreted, Registration, Runtime};
use crate::process::maps::{module_name, Backing, ProcessMaps, Segments};
use object::{Object, ObjectSymbol};

/// A CPython interpreter found in a process.
#[derive(Debug, Clone)]
pub struct Interpreter {
    pub version: Version,
    /// Where `_PyRuntime` is in the process.
    pub runtime: u64,
    /// Where the eval loop's code (`_PyEval_EvalFrameDefault`) is in the
    /// process: each of its frames on a native stack runs Python frames.
    pub eval: std::ops::Range<u64>,
    /// None for a version profd does not read.
    layout: Option<&'static layout::Layout>,
    /// Where glibc keeps a thread's native id in its `struct pthread`,
    /// for a version whose thread states name threads by `pthread_t`; why
    /// it is not known, when it is not.
    pthread_tid: Result<u64, String>,
}

impl Interpreter {
    /// The CPython interpreter of process `pid`, whose executable mappings
    /// are `maps`: the first mapped `python3.N` or `libpython3.N` file
    /// with a `_PyRuntime`; its version from `Py_Version` in memory (3.11
    /// and later), else from the file's name. None when it runs none.
    pub fn find(
        pid: u32,
        maps: &ProcessMaps,
        mem: &impl Memory,
    ) -> Result<Option<Interpreter>, FindError> {
        for m in maps.iter() {
            let Backing::File(path) = &m.backing else {
                continue;
            };
            let Some(named) = Version::of_file_name(&module_name(path)) else {
                continue;
            };
            let readable = in_root(pid, path);
            let file = std::fs::File::open(&readable).map_err(|source| FindError::File {
                path: readable.clone(),
                source,
            })?;
            let data = object::ReadCache::new(file);
            let elf = object::File::parse(&data).map_err(|source| FindError::Elf {
                path: readable.clone(),
                source,
            })?;
            let symbol = |name: &str| {
                (elf.dynamic_symbols().chain(elf.symbols()))
                    .find(|s| s.name() == Ok(name))
                    .map(|s| s.address())
            };
            let Some(runtime) = symbol("_PyRuntime") else {
                continue;
            };
            let eval = (elf.dynamic_symbols().chain(elf.symbols()))
                .find(|s| s.name() == Ok("_PyEval_EvalFrameDefault"))
                .map_or(0..0, |s| s.address()..s.address() + s.size());
            let Some(vaddr) = Segments::of(&data).and_then(|s| s.vaddr(m.pgoff)) else {
                continue;
            };
            let bias = m.start.wrapping_sub(vaddr);
            let version = match symbol("Py_Version") {
                Some(at) => Version::of_hex(
                    mem.u32_at(bias.wrapping_add(at))
                        .map_err(FindError::Memory)?,
                ),
                None => named,
            };
            let layout = layout::of(version);
            let pthread_tid = match layout.map(|l| &l.thread_id) {
                Some(layout::ThreadId::Pthread(_)) => {
                    crate::process::pthread::tid_offset(pid, maps)
                }
                _ => Err("not needed".into()),
            };
            return Ok(Some(Interpreter {
                version,
                runtime: bias.wrapping_add(runtime),
                eval: bias.wrapping_add(eval.start)..bias.wrapping_add(eval.end),
                layout,
                pthread_tid,
            }));
        }
        Ok(None)
    }

    fn layout(&self) -> Result<&'static layout::Layout, ReadError> {
        self.layout.ok_or(ReadError::Unsupported(self.version))
    }

    /// What the sample-time reader follows in this interpreter.
    pub fn config(&self) -> Result<Config, ReadError> {
        let layout = self.layout()?;
        let (thread_current, cframe_current) = match layout.current {
            layout::Current::CFrame {
                thread_cframe,
                current,
            } => (thread_cframe, Some(current)),
            layout::Current::Thread(at) => (at, None),
        };
        let (thread_id, pthread_tid) = match layout.thread_id {
            layout::ThreadId::Native(at) => (at, None),
            layout::ThreadId::Pthread(at) => {
                let tid = (self.pthread_tid.clone()).map_err(ReadError::NoThreadIds)?;
                (at, Some(tid))
            }
        };
        Ok(Config {
            runtime: self.runtime,
            interpreters: layout.runtime_interpreters,
            interp_next: layout.interp_next,
            interp_threads: layout.interp_threads,
            thread_next: layout.thread_next,
            thread_id,
            pthread_tid,
            thread_current,
            cframe_current,
            frame_previous: layout.frame_previous,
            frame_code: layout.frame_code,
            frame_instr: layout.frame_instr,
            frame_owner: layout.frame_owner,
            frame_entry: match layout.entry {
                layout::Entry::Flag(at) => Some(at),
                layout::Entry::Shim | layout::Entry::Every => None,
            },
            code_identity: layout.code_file,
            frame_bytes: layout.frame_bytes(),
        })
    }

    /// The interpreter's threads: (native thread id, thread state).
    /// Read from user space as the sample-time reader reads them, for the
    /// tests against memory images.
    #[cfg(test)]
    pub fn threads(&self, mem: &impl Memory) -> Result<Vec<(u32, u64)>, ReadError> {
        stack::threads(
            mem,
            self.layout()?,
            self.runtime,
            self.pthread_tid.as_ref().ok().copied(),
        )
    }

    /// The Python frames of thread `tid`, innermost first, named through
    /// `codes`; from user space, as [`Interpreter::threads`].
    #[cfg(test)]
    pub fn stack(
        &self,
        mem: &impl Memory,
        codes: &mut Codes,
        tid: u32,
    ) -> Result<Vec<PyFrame>, ReadError> {
        let threads = self.threads(mem)?;
        let (_, thread) = (threads.iter())
            .find(|(id, _)| *id == tid)
            .ok_or(ReadError::NoThread(tid))?;
        codes.stack(mem, self.layout()?, *thread)
    }
}

/// A process running CPython, as its samples are read: the interpreter,
/// the process's memory and the code objects named so far.
pub struct Process {
    pub interpreter: Interpreter,
    reader: Registration,
    memory: ProcessMemory,
    codes: Codes,
}

/// Code objects a process keeps named at most (a few hundred bytes each);
/// past it they are named anew.
const MAX_CODES: usize = 2048;

impl Process {
    /// Process `pid` (executable mappings `maps`), when it runs CPython.
    pub fn find(pid: u32, maps: &ProcessMaps) -> Result<Option<Process>, FindError> {
        if !maps_any(maps, |name| Version::of_file_name(name).is_some()) {
            return Ok(None);
        }
        let memory = interpreted::memory(pid)?;
        Ok(
            Interpreter::find(pid, maps, &memory)?.map(|interpreter| Process {
                interpreter,
                reader: Registration::new(pid),
                memory,
                codes: Codes::default(),
            }),
        )
    }

    /// Have its threads' frames read at their samples, from now on; why
    /// not when they cannot be.
    pub fn register(&mut self) -> Result<(), String> {
        let config = self.interpreter.config().map_err(|e| e.to_string())?;
        (self.reader).register(|probe, pid| probe.register(pid, &config))
    }

    /// Whether `addr` is in the eval loop's code.
    pub fn is_eval(&self, addr: u64) -> bool {
        self.interpreter.eval.contains(&addr)
    }

    /// The Python frames a sample-time read copied, innermost first.
    pub fn name(&mut self, record: &Record) -> Result<Vec<PyFrame>, ReadError> {
        if self.codes.held() > MAX_CODES {
            self.codes = Codes::default();
        }
        let layout = self.interpreter.layout()?;
        match record.status {
            Status::Read => self.codes.name(&self.memory, layout, &record.frames),
            Status::NoThread => Err(ReadError::NoThread(0)),
            Status::Truncated => Err(ReadError::TooLong),
            Status::Fault => Err(ReadError::Fault {
                addr: 0,
                source: std::io::Error::from_raw_os_error(libc::EFAULT),
            }),
        }
    }
}

impl Interpreted for Process {
    fn runtime(&self) -> Runtime {
        Runtime::Python
    }

    fn is_eval(&self, addr: u64) -> bool {
        Process::is_eval(self, addr)
    }

    fn name(&mut self, record: &Record) -> Result<Vec<PyFrame>, String> {
        Process::name(self, record).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
impl Process {
    /// Thread `tid`'s frames now, read from user space as the sample-time
    /// reader reads them at a sample.
    pub fn record_now(&self, tid: u32) -> Record {
        let read = || {
            let layout = self.interpreter.layout()?;
            let threads = self.interpreter.threads(&self.memory)?;
            let (_, thread) = (threads.iter())
                .find(|(id, _)| *id == tid)
                .ok_or(ReadError::NoThread(tid))?;
            stack::chain(&self.memory, layout, *thread)
        };
        let (status, frames) = match read() {
            Ok(frames) => (Status::Read, frames),
            Err(ReadError::NoThread(_)) => (Status::NoThread, Vec::new()),
            Err(_) => (Status::Fault, Vec::new()),
        };
        Record {
            time: 0,
            status,
            frames,
        }
    }
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
