//! The kernel boundary: perf_event_open, the mmap'd sample rings, pidfds,
//! the pure record parser, and reading the caller's own registers (what a
//! user-register sample holds, for the unwinder's fuzz target). This module
//! tree holds ALL of profd's `unsafe` code.
mod event;
mod pidfd;
pub mod record;

pub use event::{
    online_cpus, pmu_available, walk_ring, EventKind, EventSpec, PerfError, PerfEvent, Target,
    MAX_STACK_BYTES, SAMPLE_TYPE, USER_REGS,
};
pub use pidfd::PidFd;

/// The instruction, stack and frame pointers (ip, sp, bp) at the point this
/// is inlined into: the registers a PERF_SAMPLE_REGS_USER sample carries.
#[inline(always)]
pub fn own_registers() -> [u64; 3] {
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: reads rip, rsp and rbp into registers; touches no memory and
    // keeps the stack.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    [ip, sp, bp]
}
