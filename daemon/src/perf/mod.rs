//! The kernel boundary: perf_event_open, the mmap'd sample rings, pidfds and
//! the pure record parser. This module tree holds ALL of profd's `unsafe` code.
mod event;
mod pidfd;
pub mod record;

pub use event::{
    online_cpus, pmu_available, walk_ring, EventKind, EventSpec, PerfError, PerfEvent,
    MAX_STACK_BYTES, SAMPLE_TYPE, USER_REGS,
};
pub use pidfd::PidFd;
