//! Which processes the kernel samples for a session, and the discarded count
//! of sessions whose rings sample the target alone: the samples the other
//! processes would have had on system-wide rings, derived from time.
use crate::perf::{EventKind, EventSpec};
use profd_common::api;

/// The scope of a session sampling with `spec`, and whether its discarded
/// count is derived (see [`totals`]).
pub fn scope(spec: &EventSpec) -> (api::Scope, bool) {
    match spec.target {
        None => (api::Scope::SystemWide, false),
        Some(_) => (api::Scope::Target, spec.kind == EventKind::CpuClock),
    }
}

/// The totals a session reports. With rings of the target alone and
/// cpu-clock (a timer that, on a system-wide ring, takes `frequency_hz`
/// samples a second on every CPU, idle or busy), the samples the other
/// processes would have had are what the CPUs' time calls for less what
/// the session's rings delivered (attributed, unchecked, and the discarded
/// samples of children it does not follow) and lost:
/// `max(0, round(frequency_hz × elapsed_s × cpus) − (attributed + unchecked + discarded + lost))`,
/// added to `discarded`. Otherwise `delivered` as it is.
pub fn totals(delivered: api::Totals, spec: &EventSpec, elapsed_s: f64, cpus: u32) -> api::Totals {
    if !scope(spec).1 {
        return delivered;
    }
    let expected = (f64::from(spec.frequency_hz) * elapsed_s * f64::from(cpus)).round() as u64;
    let seen = delivered.attributed + delivered.discarded + delivered.lost + delivered.unchecked;
    api::Totals {
        discarded: delivered.discarded + expected.saturating_sub(seen),
        ..delivered
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::Target;

    fn spec(kind: EventKind, target: Option<u32>) -> EventSpec {
        EventSpec {
            kind,
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
    fn target_cpu_clock_derives_the_other_processes_share() {
        let s = spec(EventKind::CpuClock, Some(7));
        assert_eq!(scope(&s), (api::Scope::Target, true));
        // 2 CPUs × 3 s × 1000 Hz = 6000: the target had 2900, its unfollowed
        // children 100 (delivered, discarded), 10 were lost.
        let t = totals(delivered(2900, 100, 10), &s, 3.0, 2);
        assert_eq!(t.discarded, 100 + (6000 - 3010));
        assert_eq!(t.attributed + t.discarded + t.lost, 6000);
        assert_eq!((t.attributed, t.lost, t.truncated), (2900, 10, 3));
    }

    #[test]
    fn more_delivered_than_time_calls_for_adds_nothing() {
        let s = spec(EventKind::CpuClock, Some(7));
        let t = totals(delivered(2100, 5, 0), &s, 1.0, 2);
        assert_eq!(t.discarded, 5);
    }

    #[test]
    fn system_wide_and_cycles_are_as_delivered() {
        let wide = spec(EventKind::CpuClock, None);
        assert_eq!(scope(&wide), (api::Scope::SystemWide, false));
        assert_eq!(totals(delivered(10, 20, 0), &wide, 3.0, 2).discarded, 20);
        let cycles = spec(EventKind::Cycles, Some(7));
        assert_eq!(scope(&cycles), (api::Scope::Target, false));
        assert_eq!(totals(delivered(10, 20, 0), &cycles, 3.0, 2).discarded, 20);
    }
}
