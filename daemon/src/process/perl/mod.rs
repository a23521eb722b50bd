//! Perl code named from outside the process: the Perl interpreter a
//! process runs (a `perl` executable, statically linked as Debian's, or a
//! `libperl.so`; its version from `PL_revision`, `PL_version` and
//! `PL_subversion`), where its run loop is, and the Perl frames a
//! sample-time read copied, named from the process's memory with no flag,
//! restart or pause of the program.
mod layout;
mod stack;

pub use layout::Version;
pub use stack::Cvs;

use crate::os::bpf::{PerlConfig, Record, Status};
pub use crate::process::interpreted::FindError;
use crate::process::interpreted::{
    self, in_root, maps_any, Frame, Interpreted, Registration, Runtime,
};
use crate::process::maps::{module_name, Backing, ProcessMaps, Segments};
use crate::process::memory::ProcessMemory;
use object::{Object, ObjectSection, ObjectSymbol};
use std::ops::Range;

/// A Perl interpreter found in a process.
#[derive(Debug, Clone)]
pub struct Interpreter {
    pub version: Version,
    /// Where `PL_curinterp` (the main interpreter) is in the process; None
    /// in a build without MULTIPLICITY, which profd does not read.
    pub curinterp: Option<u64>,
    /// The run loops' code in the process (`Perl_runops_standard`, and
    /// `Perl_runops_debug` when it is there): each of their frames on a
    /// native stack runs one batch of Perl frames.
    pub runops: Vec<Range<u64>>,
    layout: Option<&'static layout::Layout>,
}

/// Whether a mapped file may hold Perl: `perl`, `perl5.36.0`, or
/// `libperl.so.5.36`.
fn may_be_perl(name: &str) -> bool {
    name == "perl" || name.starts_with("perl5") || name.starts_with("libperl.so")
}

impl Interpreter {
    /// The Perl interpreter of process `pid`, whose executable mappings
    /// are `maps`: the first mapped `perl` or libperl with the symbols
    /// `PL_revision`, `PL_version`, `PL_subversion` and
    /// `Perl_runops_standard`. None when it runs none.
    pub fn find(pid: u32, maps: &ProcessMaps) -> Result<Option<Interpreter>, FindError> {
        for m in maps.iter() {
            let Backing::File(path) = &m.backing else {
                continue;
            };
            if !may_be_perl(&module_name(path)) {
                continue;
            }
            let readable = in_root(pid, path);
            let data = std::fs::read(&readable).map_err(|source| FindError::File {
                path: readable.clone(),
                source,
            })?;
            let elf = object::File::parse(&*data).map_err(|source| FindError::Elf {
                path: readable.clone(),
                source,
            })?;
            let Some(found) = Symbols::of(&elf) else {
                continue;
            };
            let Some(vaddr) = Segments::of(&*data).and_then(|s| s.vaddr(m.pgoff)) else {
                continue;
            };
            let bias = m.start.wrapping_sub(vaddr);
            return Ok(Some(Interpreter {
                version: found.version,
                curinterp: found.curinterp.map(|a| bias.wrapping_add(a)),
                runops: (found.runops.iter())
                    .map(|r| bias.wrapping_add(r.start)..bias.wrapping_add(r.end))
                    .collect(),
                layout: layout::of(found.version),
            }));
        }
        Ok(None)
    }

    fn layout(&self) -> Result<&'static layout::Layout, String> {
        self.layout
            .ok_or_else(|| format!("Perl {} is not a version profd reads", self.version))
    }

    /// What the sample-time reader follows in this interpreter.
    pub fn config(&self) -> Result<PerlConfig, String> {
        let l = self.layout()?;
        let interp_ptr = self.curinterp.ok_or_else(|| {
            format!(
                "Perl {} is built without MULTIPLICITY (no PL_curinterp), which profd does not read",
                self.version
            )
        })?;
        Ok(PerlConfig {
            interp_ptr,
            interp_op: l.interp_op,
            interp_curcop: l.interp_curcop,
            interp_stackinfo: l.interp_stackinfo,
            interp_phase: l.interp_phase,
            si_cxstack: l.si_cxstack,
            si_prev: l.si_prev,
            si_cxix: l.si_cxix,
            si_type: l.si_type,
            cx_bytes: l.cx_bytes,
            cx_oldcop: l.cx_oldcop,
            cx_retop: l.cx_retop,
            cx_cv: l.cx_cv,
            cv_start: l.cv_start,
            cv_gv: l.cv_gv,
            cop_line: l.cop_line,
            cop_file: l.cop_file,
        })
    }
}

/// What an ELF file says of the Perl in it (addresses in the file).
struct Symbols {
    version: Version,
    curinterp: Option<u64>,
    runops: Vec<Range<u64>>,
}

impl Symbols {
    fn of(elf: &object::File) -> Option<Symbols> {
        let symbol = |name: &str| {
            (elf.dynamic_symbols().chain(elf.symbols())).find(|s| s.name() == Ok(name))
        };
        let byte = |name: &str| {
            let at = symbol(name)?.address();
            elf.sections()
                .find_map(|s| s.data_range(at, 1).ok().flatten())
                .map(|b| b[0])
        };
        let version = Version {
            revision: byte("PL_revision")?,
            version: byte("PL_version")?,
            subversion: byte("PL_subversion")?,
        };
        let runops = ["Perl_runops_standard", "Perl_runops_debug"]
            .iter()
            .filter_map(|name| symbol(name))
            .map(|s| s.address()..s.address() + s.size())
            .collect::<Vec<_>>();
        if runops.is_empty() {
            return None;
        }
        Some(Symbols {
            version,
            curinterp: symbol("PL_curinterp").map(|s| s.address()),
            runops,
        })
    }
}

/// A process running Perl, as its samples are read: the interpreter, the
/// process's memory and the subs named so far.
pub struct Process {
    pub interpreter: Interpreter,
    reader: Registration,
    memory: ProcessMemory,
    cvs: Cvs,
}

/// Subs and file names a process keeps at most; past it they are read anew.
const MAX_CVS: usize = 4096;

impl Process {
    /// Process `pid` (executable mappings `maps`), when it runs Perl.
    pub fn find(pid: u32, maps: &ProcessMaps) -> Result<Option<Process>, FindError> {
        if !maps_any(maps, may_be_perl) {
            return Ok(None);
        }
        let Some(interpreter) = Interpreter::find(pid, maps)? else {
            return Ok(None);
        };
        let memory = interpreted::memory(pid)?;
        Ok(Some(Process {
            interpreter,
            reader: Registration::new(pid),
            memory,
            cvs: Cvs::default(),
        }))
    }

    /// Have its main thread's frames read at its samples, from now on; why
    /// not when they cannot be.
    pub fn register(&mut self) -> Result<(), String> {
        let config = self.interpreter.config()?;
        (self.reader).register(|probe, pid| probe.register_perl(pid, &config))
    }

    /// Thread `tid`'s frames now, read from user space as the sample-time
    /// reader reads them at a sample.
    #[cfg(test)]
    pub fn record_now(&self, tid: u32) -> Record {
        let read = self
            .interpreter
            .config()
            .map_err(|_| Status::Fault)
            .and_then(|c| stack::chain(&self.memory, &c, self.reader.pid(), tid));
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
        Runtime::Perl
    }

    fn is_eval(&self, addr: u64) -> bool {
        self.interpreter.runops.iter().any(|r| r.contains(&addr))
    }

    fn name(&mut self, record: &Record) -> Result<Vec<Frame>, String> {
        if self.cvs.held() > MAX_CVS {
            self.cvs = Cvs::default();
        }
        let layout = self.interpreter.layout()?;
        match record.status {
            Status::Read => self.cvs.name(&self.memory, layout, &record.frames),
            Status::NoThread => Err(
                "the sampled thread runs no interpreter profd reads (only the main one is)".into(),
            ),
            Status::Truncated => Err("more Perl contexts than the reader follows".into()),
            Status::Fault => Err("a read of the process's memory failed".into()),
        }
    }
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
