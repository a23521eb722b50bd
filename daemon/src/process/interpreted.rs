//! What the session's merge needs of a process running an interpreter,
//! whichever runtime it is: which native frames run a batch of the
//! interpreter's frames, which belong to its loop and go, and the frames a
//! sample-time read copied, named.
use crate::os::bpf::Record;

pub use super::python::PyFrame as Frame;

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

impl Interpreted for super::python::Process {
    fn runtime(&self) -> Runtime {
        Runtime::Python
    }

    fn is_eval(&self, addr: u64) -> bool {
        super::python::Process::is_eval(self, addr)
    }

    fn name(&mut self, record: &Record) -> Result<Vec<Frame>, String> {
        super::python::Process::name(self, record).map_err(|e| e.to_string())
    }
}
