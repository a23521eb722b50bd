//! perf events: perf_event_open, the mmap'd sample rings, and the pure
//! record parser. With [`crate::os`], the only module allowed `unsafe`.
mod event;
pub mod record;

pub use event::{
    online_cpus, pmu_available, walk_ring, Counts, EventKind, EventSpec, Flush, Mode, PerfError,
    PerfEvent, Stacks, Target, FP_USER_REGS, MAX_STACK_BYTES, SAMPLE_TYPE, USER_REGS,
};
