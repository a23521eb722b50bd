//! End-to-end tests of which processes the kernel samples: stack-copy
//! sessions get rings of their target alone (no other process is sampled,
//! nor its stack copied), shared by the sessions of that target;
//! frame-pointer sessions share the system-wide rings, whose totals account
//! for every CPU's time. Real kernel, real `profd` and `profctl`.
use std::time::Duration;

use profd_e2e::{build_workload, children_cpu_time, wait_until, Harness, Info, Profile, Workload};

/// `profctl attach PID --duration SECS --format json [extra...]`.
fn attach_args<'a>(pid: &'a str, secs: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["attach", pid, "--duration", secs, "--format", "json"];
    args.extend_from_slice(extra);
    args
}

/// What cpu-clock takes on system-wide rings over the session: frequency ×
/// duration on every CPU, idle or busy.
fn every_cpu_samples(p: &Profile, cpus: u32) -> f64 {
    f64::from(p.frequency_hz) * p.duration_s * f64::from(cpus)
}

/// attributed + discarded + lost is frequency × duration × CPUs within 5 %.
fn assert_accounts_for_every_cpu(p: &Profile, cpus: u32) {
    let expected = every_cpu_samples(p, cpus);
    let total = p.totals.attributed + p.totals.discarded + p.totals.lost;
    eprintln!(
        "  attributed + discarded + lost = {total}; {} Hz × {:.3} s × {cpus} CPUs = {expected:.0}",
        p.frequency_hz, p.duration_s
    );
    assert!(
        (total as f64 - expected).abs() <= expected * 0.05,
        "attributed + discarded + lost = {total}, but {} Hz × {:.3} s × {cpus} CPUs = \
         {expected:.0}:\n{}",
        p.frequency_hz,
        p.duration_s,
        p.table()
    );
}

fn assert_no_other_process(p: &Profile) {
    assert!(
        p.rows("other_process_spin").is_empty()
            && !p.functions.iter().any(|f| f.module.ends_with("spin_other")),
        "the other process is in the target's profile:\n{}",
        p.table()
    );
}

/// A stack-copy session (the default unwinding) with a second busy process
/// on the machine: its rings sample the target alone, so the daemon's rings
/// deliver the target's samples and nothing else, and nothing is discarded
/// (no count stands for the other process's time).
#[test]
fn stack_copy_sessions_sample_the_target_alone() {
    let h = Harness::start();
    let other = Workload::start("spin_other", 60.0);
    let target = Workload::start("split", 60.0);
    let before = Info::read(&h.daemon);
    let p = Profile::parse(&h.daemon.profctl(&attach_args(&target.pid_arg(), "3", &[])));
    let after = Info::read(&h.daemon);
    eprintln!("{}", p.table());

    assert_eq!(p.unwind, "dwarf", "{}", p.table());
    assert_eq!(p.scope, "target", "{}", p.table());
    assert_no_other_process(&p);
    p.function("leaf_b");
    assert_eq!(
        p.totals.discarded,
        0,
        "spin_other (pid {}) was not sampled, yet samples were discarded:\n{}",
        other.pid(),
        p.table()
    );

    // The kernel sampled the target alone: the rings delivered about its
    // samples only, not spin_other's (a CPU's worth more) nor idle ones.
    let delivered = after.delivered() - before.delivered();
    eprintln!(
        "  daemon-wide: {delivered} samples delivered during the session \
         ({} attributed, {} discarded); the session attributed {}",
        after.attributed - before.attributed,
        after.discarded - before.discarded,
        p.totals.attributed
    );
    assert!(
        delivered >= p.totals.attributed
            && delivered as f64 <= p.totals.attributed as f64 * 1.05 + 50.0,
        "the rings delivered {delivered} samples for a session that attributed {}: \
         other processes were sampled:\n{}",
        p.totals.attributed,
        p.table()
    );
    assert_eq!(after.groups, "none", "the rings close with the session");
}

/// Without --children, the target's children are sampled on its rings (the
/// events are inherited) and their samples discarded; they never reach the
/// profile.
#[test]
fn unfollowed_children_are_delivered_and_discarded() {
    let h = Harness::start();
    let exe = build_workload("lifecycle");
    let mut command = std::process::Command::new(&exe);
    command.args(["fork", "2", "1.5"]);
    let w = Workload::start_command(command, "lifecycle");
    let before = Info::read(&h.daemon);
    let p = Profile::parse(&h.daemon.profctl(&attach_args(&w.pid_arg(), "10", &[])));
    let after = Info::read(&h.daemon);
    eprintln!("{}\nprocesses: {:?}", p.table(), p.processes);

    assert_eq!(p.state, "exited", "{}", p.table());
    assert_eq!(p.scope, "target", "{}", p.table());
    assert!(
        p.rows("child_spin").is_empty(),
        "children profiled without --children:\n{}",
        p.table()
    );
    assert_eq!(p.processes.len(), 1, "{:?}", p.processes);
    p.function("parent_spin");
    let children_discarded = after.discarded - before.discarded;
    // The target has exited and reaped its children; not reaped itself yet,
    // it still shows their CPU time.
    let children_cpu = children_cpu_time(w.pid());
    let expected = children_cpu.as_secs_f64() * f64::from(p.frequency_hz);
    eprintln!(
        "  daemon-wide: {children_discarded} samples of the children discarded; they used \
         {:.3} s of CPU → {expected:.0} samples",
        children_cpu.as_secs_f64()
    );
    assert!(
        expected >= 300.0,
        "the children got only {:.3} s of CPU: too little to compare (is the machine \
         overloaded?)",
        children_cpu.as_secs_f64()
    );
    assert!(
        (children_discarded as f64 - expected).abs() <= expected * 0.15,
        "the children's CPU time calls for {expected:.0} samples on the target's rings, \
         but {children_discarded} were discarded:\n{}",
        p.table()
    );
    assert_eq!(p.totals.discarded, children_discarded, "{}", p.table());
}

/// A frame-pointer session uses the system-wide rings: every CPU is
/// sampled, the other process's samples are delivered and discarded.
#[test]
fn frame_pointer_sessions_use_the_system_wide_rings() {
    let h = Harness::start();
    let _other = Workload::start("spin_other", 60.0);
    let target = Workload::start("split", 60.0);
    let pid = target.pid_arg();
    let before = Info::read(&h.daemon);
    let attach = h
        .daemon
        .spawn_profctl(&attach_args(&pid, "6", &["--unwind", "fp"]));
    let want = "cpu-clock @ 999 Hz fp system-wide (1 session)";
    let during = wait_until("the system-wide group", Duration::from_secs(30), || {
        Some(Info::read(&h.daemon)).filter(|i| i.groups == want)
    });
    let p = Profile::parse(&attach.wait(Duration::from_secs(30)));
    let after = Info::read(&h.daemon);
    eprintln!("{}\ngroups while it ran: {}", p.table(), during.groups);

    assert_eq!(p.scope, "system-wide", "{}", p.table());
    assert_no_other_process(&p);
    assert_accounts_for_every_cpu(&p, after.cpus);
    let delivered = (after.delivered() - before.delivered()) as f64;
    assert!(
        delivered >= every_cpu_samples(&p, after.cpus) * 0.9,
        "system-wide rings delivered only {delivered} samples:\n{}",
        p.table()
    );
}

/// Stack-copy sessions of the same target and settings share its rings;
/// another target gets rings of its own.
#[test]
fn stack_copy_sessions_of_one_target_share_its_rings() {
    let h = Harness::start();
    let other = Workload::start("spin_other", 60.0);
    let target = Workload::start("split", 60.0);
    let (pid, other_pid) = (target.pid_arg(), other.pid_arg());
    let first = h.daemon.spawn_profctl(&attach_args(&pid, "6", &[]));
    let second = h
        .daemon
        .spawn_profctl(&attach_args(&pid, "6", &["--unwind", "dwarf"]));
    let third = h.daemon.spawn_profctl(&attach_args(&other_pid, "6", &[]));
    // While all three run: one group per target.
    let mut expected = [
        format!("cpu-clock @ 999 Hz dwarf pid {pid} (2 sessions)"),
        format!("cpu-clock @ 999 Hz dwarf pid {other_pid} (1 session)"),
    ];
    expected.sort();
    let sorted = |groups: &str| {
        let mut g: Vec<String> = groups.split(", ").map(str::to_string).collect();
        g.sort();
        g
    };
    let during = wait_until("one group per target", Duration::from_secs(30), || {
        Some(Info::read(&h.daemon)).filter(|i| sorted(&i.groups) == expected)
    });
    eprintln!("groups while they ran: {}", during.groups);
    let profiles: Vec<Profile> = [first, second, third]
        .into_iter()
        .map(|cmd| Profile::parse(&cmd.wait(Duration::from_secs(30))))
        .collect();
    for p in &profiles {
        eprintln!("{}", p.table());
        assert_eq!(p.scope, "target", "{}", p.table());
        assert_eq!(p.totals.discarded, 0, "{}", p.table());
    }
    assert_no_other_process(&profiles[0]);
    assert_no_other_process(&profiles[1]);
    assert!(
        profiles[2].rows("leaf_b").is_empty(),
        "split is in spin_other's profile:\n{}",
        profiles[2].table()
    );
    profiles[2].function("other_process_spin");
    assert_eq!(Info::read(&h.daemon).groups, "none");
}
