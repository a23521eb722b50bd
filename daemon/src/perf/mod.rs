//! The kernel boundary: perf_event_open, the mmap'd sample rings, pidfds and
//! the pure record parser. This module tree holds ALL of profd's `unsafe` code.
mod event;
mod pidfd;
pub mod record;

pub use event::{
    online_cpus, pmu_available, EventKind, EventSpec, PerfError, PerfEvent, MAX_STACK_BYTES,
};
pub use pidfd::PidFd;
