//! JIT stubs that neither keep a frame pointer nor carry unwind tables,
//! known by their machine code: CPython 3.12's perf trampolines
//! (`python3.12 -X perf`), through which each Python call enters the eval
//! loop. A stack-copy walk steps through them by their fixed frame; a
//! frame-pointer step there would skip the Python caller's eval loop.
use crate::process::memory::{Memory, ProcessMemory};
use std::collections::HashMap;

/// CPython 3.12's trampoline on x86-64, every copy alike: `sub $8,%rsp;
/// call *%rcx; add $8,%rsp; ret` (Python/asm_trampoline.S).
const CPYTHON_TRAMPOLINE: [u8; 11] = [
    0x48, 0x83, 0xec, 0x08, 0xff, 0xd1, 0x48, 0x83, 0xc4, 0x08, 0xc3,
];
/// Where its call returns to, from its start.
const AFTER_CALL: u64 = 6;
/// Its frame while it calls: the padding of the `sub`, then the return
/// address to its caller.
const FRAME: u64 = 16;
/// Return addresses remembered per process; past it, forgotten and read
/// again (a JIT process has as many as it has functions called through a
/// stub).
const MAX_KNOWN: usize = 1 << 16;

/// The stubs of one process, as its code is read.
#[derive(Default)]
pub struct Stubs {
    /// The process whose code is read (none: nothing is recognised).
    pid: Option<u32>,
    /// Return addresses outside every module, each with whether it is in a
    /// stub.
    known: HashMap<u64, bool>,
}

impl Stubs {
    pub fn of(pid: u32) -> Stubs {
        Stubs {
            pid: Some(pid),
            known: HashMap::new(),
        }
    }

    /// The size of the frame of a stub that returns to `ra` (an address
    /// outside every module), if it is a stub's.
    pub fn frame_returning_to(&mut self, ra: u64) -> Option<u64> {
        let pid = self.pid?;
        let is_stub = match self.known.get(&ra) {
            Some(&known) => known,
            None => {
                let is_stub = read_is_trampoline(pid, ra);
                if self.known.len() >= MAX_KNOWN {
                    self.known.clear();
                }
                self.known.insert(ra, is_stub);
                is_stub
            }
        };
        is_stub.then_some(FRAME)
    }
}

/// Whether `ra` of process `pid` is the return of a CPython trampoline's
/// call. Read once per address; a process gone or unreadable has none.
fn read_is_trampoline(pid: u32, ra: u64) -> bool {
    let Some(start) = ra.checked_sub(AFTER_CALL) else {
        return false;
    };
    let mut code = [0u8; CPYTHON_TRAMPOLINE.len()];
    ProcessMemory::open(pid)
        .and_then(|m| m.read(start, &mut code))
        .is_ok_and(|()| code == CPYTHON_TRAMPOLINE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trampoline_is_known_by_its_code_at_its_return_address() {
        let mut code = vec![0x90u8; 64];
        code[16..27].copy_from_slice(&CPYTHON_TRAMPOLINE);
        let start = code.as_ptr() as u64 + 16;
        let mut stubs = Stubs::of(std::process::id());
        assert_eq!(stubs.frame_returning_to(start + AFTER_CALL), Some(FRAME));
        // Any other place in it, or in other code, is no stub's return.
        for at in [start, start + 5, start + 7, start + 40] {
            assert_eq!(stubs.frame_returning_to(at), None, "{at:#x}");
        }
        // Unreadable memory, and a process not given, are not stubs.
        assert_eq!(stubs.frame_returning_to(8), None);
        assert_eq!(
            Stubs::default().frame_returning_to(start + AFTER_CALL),
            None
        );
        // Known addresses are not read again.
        code[16] = 0;
        std::hint::black_box(&code);
        assert_eq!(stubs.frame_returning_to(start + AFTER_CALL), Some(FRAME));
        assert_eq!(
            Stubs::of(std::process::id()).frame_returning_to(start + AFTER_CALL),
            None
        );
    }
}
