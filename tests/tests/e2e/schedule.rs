//! The sampling schedule end to end: a `profd --continuous` with
//! `--continuous-schedule` profiles only in the slots its host name draws,
//! with no rings open in the others, and every window says where in the
//! schedule it lies. Real kernel, real `profd`; root needed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use profd_common::schedule;
use profd_e2e::{require_root_and_perf, serial, Daemon, Workload};

use crate::continuous::wait_for_cuts;

/// The daemon's open perf events (its sampling rings, one per CPU and
/// group, and any other).
fn perf_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the daemon's descriptors")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy() == "anon_inode:[perf_event]")
        .count()
}

/// Where the log says the schedule is: how often it said "on" and "off",
/// and whether it is off ("off" said last, once the rings closed) or on
/// (its rings opened since it said "on", and not yet said to close), or
/// None between the two.
fn turns(log: &str) -> (usize, usize, Option<bool>) {
    let on = "continuous profiling is on in this slot of its schedule";
    let off = "continuous profiling is off in this slot of its schedule";
    let at = |s: &str| log.rfind(s).map_or(-1, |i| i as i64);
    let (started, closing) = (
        at("continuous profiling started"),
        at("continuous profiling closes its rings: its schedule is off next"),
    );
    let state = match (at(on), at(off)) {
        (on, off) if off > on => Some(false),
        (on, off) if on > off && started > on && closing < on => Some(true),
        _ => None,
    };
    (log.matches(on).count(), log.matches(off).count(), state)
}

/// The number of distinct slots among looks (slot's turn, perf events).
fn slots(looks: &[(usize, usize)]) -> usize {
    looks.iter().map(|(n, _)| *n).collect::<BTreeSet<_>>().len()
}

/// Half the hosts on, in slots of 3 s, windows of 1 s, with a process
/// spinning all along:
/// - while the log's last word is "off" (said once the rings are closed,
///   as "on" is said before they open), the daemon has no perf event
///   open; once it said it started in an on slot, it has its rings;
/// - each window carries the schedule, the slot it starts in, and whether
///   its host is on there, as the documented draw says;
/// - windows of on slots hold samples (the spinner's at least); windows
///   of off slots hold no sample of any kind and say the host was there.
#[test]
fn a_schedule_samples_only_in_the_slots_its_host_draws() {
    let _serial = serial();
    require_root_and_perf();
    let host = format!("schedule-{}", std::process::id());
    let d = Daemon::start_with(&[
        "--continuous",
        "--continuous-window",
        "1",
        "--continuous-freq",
        "99",
        "--continuous-schedule",
        "50%",
        "--continuous-schedule-period",
        "3s",
        "--continuous-host",
        &host,
    ]);
    let spinner = Workload::start("spin_other", 600.0);
    // Perf events seen while the daemon was off, and while it was on,
    // until looks in two off slots and two on slots.
    let (mut off_looks, mut on_looks) = (Vec::new(), Vec::new());
    profd_e2e::wait_until(
        "looks at the rings in two off and two on slots",
        Duration::from_secs(600),
        || {
            let before = turns(&d.log());
            let fds = perf_fds(d.pid());
            let after = turns(&d.log());
            match before {
                (_, off, Some(false)) if before == after => off_looks.push((off, fds)),
                (on, _, Some(true)) if before == after => on_looks.push((on, fds)),
                _ => {}
            }
            (slots(&off_looks) >= 2 && slots(&on_looks) >= 2).then_some(())
        },
    );
    let log = d.log();
    assert!(
        off_looks.iter().all(|(_, fds)| *fds == 0),
        "perf events open in off slots (turn, events): {off_looks:?}\n{log}"
    );
    assert!(
        on_looks.iter().all(|(_, fds)| *fds >= 2),
        "no rings in on slots (turn, events): {on_looks:?}\n{log}"
    );
    // Two windows of on slots and two of off slots, at least.
    let l = wait_for_cuts(&d, "windows of on and off slots", |l| {
        let on = l
            .windows
            .iter()
            .filter(|w| w.schedule.is_some_and(|s| s.on));
        let off = l
            .windows
            .iter()
            .filter(|w| w.schedule.is_some_and(|s| !s.on));
        (on.count() >= 2 && off.count() >= 2).then(|| l.clone())
    });
    drop(spinner);
    for w in &l.windows {
        eprintln!(
            "  window {:.3}..{:.3} slot {:?} attributed {}",
            w.start_unix_ns as f64 / 1e9,
            w.end_unix_ns as f64 / 1e9,
            w.schedule.map(|s| (s.slot, s.on)),
            w.totals.unwrap_or_default().attributed
        );
    }
    let mut kinds = BTreeMap::new();
    for w in &l.windows {
        let s = w
            .schedule
            .unwrap_or_else(|| panic!("a window without its schedule: {w:?}"));
        let slot = w.start_unix_ns / 1_000_000_000 / 3;
        assert_eq!(
            (s.fraction, s.period_s, s.slot, s.on),
            (0.5, 3, slot, schedule::is_on(&host, slot, 0.5)),
            "window {w:?}"
        );
        let t = w.totals.unwrap_or_default();
        if s.on {
            assert!(
                t.attributed > 0 && !w.services.is_empty() && w.frequency_hz == 99,
                "an on window without samples: {w:?}"
            );
        } else {
            assert_eq!(
                (t, w.services.len(), w.frequency_hz),
                (Default::default(), 0, 0),
                "an off window with samples: {w:?}"
            );
        }
        *kinds.entry(s.on).or_insert(0) += 1;
    }
    eprintln!(
        "  windows by on/off: {kinds:?}; looks in off slots {}, in on slots {}",
        off_looks.len(),
        on_looks.len()
    );
}
