//! Which processes the kernel samples for a session, and the samples its
//! target's own time called for that no ring took (`unsampled`), measured
//! from the kernel's counts of the target's events.
use crate::os::perf::{EventKind, EventSpec};
use profd_common::api;

/// The scope of a session sampling with `spec`.
pub fn scope(spec: &EventSpec) -> api::Scope {
    match spec.target {
        None => api::Scope::SystemWide,
        Some(_) => api::Scope::Target,
    }
}

/// The nanoseconds between two cpu-clock samples at `frequency_hz`, as the
/// kernel sets them (a fixed period: `NSEC_PER_SEC / frequency`).
fn period_ns(frequency_hz: u32) -> u64 {
    1_000_000_000 / u64::from(frequency_hz.max(1))
}

/// Samples the target's CPU time called for that its rings did not take:
/// with cpu-clock on a target's rings, its events counted `counted_ns` of
/// its tasks' CPU time (the kernel's own count, sampled or not), one
/// sample a period, less every sample the rings took (delivered, then
/// attributed, discarded or unchecked, and lost). Each task inherits the events with
/// a period of its own that starts whole, so a task's last part of a
/// period (at its exit or the session's end) is never sampled, nor the
/// time the kernel throttled sampling. 0 on system-wide rings (one period
/// per CPU runs on across processes) and with `cycles` (no fixed period).
pub fn unsampled(totals: &api::Totals, counted_ns: u64, spec: &EventSpec) -> u64 {
    if spec.target.is_none() || spec.kind != EventKind::CpuClock {
        return 0;
    }
    let called_for = counted_ns / period_ns(spec.frequency_hz);
    called_for.saturating_sub(totals.attributed + totals.discarded + totals.lost + totals.unchecked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::perf::Target;

    fn spec(kind: EventKind, target: Option<u32>) -> EventSpec {
        EventSpec {
            held: false,
            kind,
            mode: Default::default(),
            session: 0,
            frequency_hz: 1000,
            ring_pages: 512,
            stack_bytes: 16384,
            target: target.map(|pid| Target { pid, started: 1 }),
        }
    }

    fn delivered(attributed: u64, discarded: u64, lost: u64) -> api::Totals {
        api::Totals {
            attributed,
            discarded,
            lost,
            truncated: 3,
            ..Default::default()
        }
    }

    #[test]
    fn target_cpu_clock_counts_what_the_targets_time_called_for_and_no_ring_took() {
        let s = spec(EventKind::CpuClock, Some(7));
        assert_eq!(scope(&s), api::Scope::Target);
        // 3.0105 s of the target's CPU time at 1000 Hz: 3010 samples; the
        // rings took 2900 of it, 100 of unfollowed children, 10 lost.
        assert_eq!(unsampled(&delivered(2900, 100, 10), 3_010_500_000, &s), 0);
        assert_eq!(unsampled(&delivered(2000, 100, 10), 3_010_500_000, &s), 900);
        // More taken than counted (the counts are read a little apart from
        // the rings' heads): nothing.
        assert_eq!(unsampled(&delivered(2100, 5, 0), 2_000_000_000, &s), 0);
    }

    #[test]
    fn system_wide_and_cycles_count_nothing_unsampled() {
        let wide = spec(EventKind::CpuClock, None);
        assert_eq!(scope(&wide), api::Scope::SystemWide);
        assert_eq!(unsampled(&delivered(10, 20, 0), 3_000_000_000, &wide), 0);
        let cycles = spec(EventKind::Cycles, Some(7));
        assert_eq!(scope(&cycles), api::Scope::Target);
        assert_eq!(unsampled(&delivered(10, 20, 0), 3_000_000_000, &cycles), 0);
    }

    #[test]
    fn the_period_is_the_kernels() {
        assert_eq!(period_ns(999), 1_001_001);
        assert_eq!(period_ns(1000), 1_000_000);
    }
}
