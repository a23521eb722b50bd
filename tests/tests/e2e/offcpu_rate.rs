//! End-to-end tests of off-CPU and wall-clock time at high context-switch
//! rates and when the kernel loses switch records: the ping-pong of
//! `tests/workloads/offcpu.c` (two threads on one CPU bouncing a byte over
//! pipes) under the real `profd`, its time totals against the threads'
//! lifetimes and the kernel's count of their CPU time (the workload's
//! `cpu_total_s`, CLOCK_PROCESS_CPUTIME_ID: the sum of its threads'
//! /proc/PID/task/TID/schedstat), and the daemon's peak memory.

use crate::offcpu::{assert_near, check_time_profile, printed, run, threads, THREAD_TOLERANCE};
use profd_e2e::{build_workload, path_str, Harness, Profile};

/// The switches a second the high-rate tests ask the ping-pong for.
const RATE: &str = "100000";
/// What the ping-pong must reach of it under the profiler for a run to
/// test that rate (it does at least 95 000 here; every switch's stack is
/// taken in the target's own context, so a loaded machine slows it).
const MIN_RATE: f64 = 75_000.0;
/// How far the on-CPU total may fall short of the threads' CPU time, with
/// the time not known added, besides [`IDLE_PATH_NS`] a pacing sleep (a
/// fraction of the CPU time): the switch from one of the threads straight
/// to the other is counted whole, but the path into a thread from another
/// process (other work on the CPU) is not.
const ON_CPU_BOUND: f64 = 0.05;
/// The kernel's path into a thread from the idle task, which comes before
/// the record that ends its wait and is counted off the CPU: 15 to 25 µs
/// (docs/guide.md, "Off-CPU and wall-clock time"). The ping-pong goes
/// through it once a pacing sleep (`naps`); so short of the CPU time at
/// 7 000 naps and no records lost: 93 to 130 ms of 1.04 to 1.06 s.
const IDLE_PATH_NS: f64 = 25_000.0;
/// How far above the threads' CPU time the on-CPU total may be (a
/// fraction): the kernel's CPU clock and the switch records' clock read
/// the same time a moment apart.
const ON_CPU_OVER: f64 = 0.02;
/// The most the daemon's peak resident memory (VmHWM) may grow over a
/// session at that rate, in MiB: its rings, the batches its session has
/// not counted yet (bounded by the rings' size), and what naming the
/// stacks takes (the kernel's symbols, libc's), whatever the switch rate.
const RSS_GROWTH_MIB: u64 = 64;

/// `counted` (ns) is the time of threads that lived `lifetimes` (s): at
/// least that less [`THREAD_TOLERANCE`], at most that plus
/// [`THREAD_TOLERANCE`] and `after_exit` (s): where the records of a
/// thread's exit were lost, its time from the loss to the session's end
/// is not known, and counted.
fn assert_lifetimes(what: &str, counted: f64, lifetimes: f64, after_exit: f64, p: &Profile) {
    let (low, high) = (
        lifetimes * (1.0 - THREAD_TOLERANCE),
        lifetimes * (1.0 + THREAD_TOLERANCE) + after_exit,
    );
    eprintln!(
        "  {what}: {:.4} s, expected {low:.4} to {high:.4} s",
        counted / 1e9
    );
    assert!(
        counted >= low * 1e9 && counted <= high * 1e9,
        "{what} is {:.4} s, expected {low:.4} to {high:.4} s (lifetimes {lifetimes:.4} s, \
         {after_exit:.4} s after the exits):\n{}",
        counted / 1e9,
        p.table()
    );
}

/// Peak resident memory of process `pid`, in KiB (VmHWM).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmHWM in /proc/PID/status")
}

/// The ping-pong at [`RATE`] for 3 s under `profctl run --mode MODE
/// --unwind UNWIND`. The time totals add up to the two threads'
/// lifetimes (and, where the records of their exits were lost, at most up
/// to the session's end); time is unknown only when records were lost;
/// the on-CPU total is the threads' CPU time within [`ON_CPU_BOUND`] and
/// [`IDLE_PATH_NS`] a nap (less what is unknown), and the off-CPU total
/// the rest. Returns the profile and the workload's figures.
fn at_100_000_switches_a_second(
    h: &Harness,
    mode: &str,
    unwind: &str,
) -> (Profile, std::collections::BTreeMap<String, f64>) {
    let (p, v) = run(h, mode, &["--unwind", unwind], &["pingpong", "3", RATE]);
    let t = check_time_profile(&p, mode);
    let rate = printed(&v, "switches_per_s", &p);
    let seconds = printed(&v, "seconds", &p);
    let cpu = printed(&v, "cpu_total_s", &p) * 1e9;
    let naps = printed(&v, "naps", &p);
    // The main thread lived from its exec, a moment before main(), the
    // ponger the ping-pong. Each may be counted not known up to the
    // session's end (the exit seen) when the records of its exit were
    // lost.
    let lifetime = printed(&v, "lifetime_s", &p);
    let lived = (lifetime + seconds) * 1e9;
    let after_exit = 2.0 * (p.duration_s - lifetime).max(0.0);
    let (on, off, unknown) = (t.on_cpu_ns as f64, t.off_cpu_ns as f64, t.unknown_ns as f64);
    eprintln!(
        "  {mode} --unwind {unwind}: {rate:.0} switches/s, {naps} naps; lost {}, unpaired {}; \
         on {:.4} s, off {:.4} s, unknown {:.4} s; CPU time {:.4} s, lifetimes {:.4} s",
        p.totals.lost,
        t.unpaired,
        on / 1e9,
        off / 1e9,
        unknown / 1e9,
        cpu / 1e9,
        lived / 1e9,
    );
    assert!(
        rate >= MIN_RATE,
        "the ping-pong reached {rate:.0} switches/s, short of {MIN_RATE}:\n{}",
        p.table()
    );
    assert_eq!(
        t.unknown_ns > 0,
        p.totals.lost > 0,
        "time is unknown exactly when records were lost: unknown {} ns, lost {}:\n{}",
        t.unknown_ns,
        p.totals.lost,
        p.table()
    );
    assert_lifetimes(
        "on_cpu_ns + off_cpu_ns + unknown_ns of the two threads",
        on + off + unknown,
        lived / 1e9,
        after_exit,
        &p,
    );
    assert!(
        on <= cpu * (1.0 + ON_CPU_OVER),
        "on-CPU {on:.0} ns, but the threads ran {cpu:.0} ns:\n{}",
        p.table()
    );
    let short = cpu * ON_CPU_BOUND + naps * IDLE_PATH_NS;
    assert!(
        on + unknown >= cpu - short,
        "on-CPU {on:.0} ns (and {unknown:.0} ns not known), but the threads ran {cpu:.0} ns: \
         more than {short:.0} ns short ({:.0} % of it and {IDLE_PATH_NS} ns for each of \
         {naps} naps):\n{}",
        ON_CPU_BOUND * 100.0,
        p.table()
    );
    // Off the CPU: the rest of the lifetimes, give or take what on-CPU
    // may miss.
    let off_cpu = lived - cpu;
    assert!(
        off <= off_cpu + short + lived * THREAD_TOLERANCE + after_exit * 1e9,
        "off-CPU {off:.0} ns, but the threads were off the CPU {off_cpu:.0} ns:\n{}",
        p.table()
    );
    assert!(
        off + unknown >= off_cpu - cpu * ON_CPU_OVER - lived * THREAD_TOLERANCE,
        "off-CPU {off:.0} ns (and {unknown:.0} ns not known), but the threads were off the \
         CPU {off_cpu:.0} ns:\n{}",
        p.table()
    );
    (p, v)
}

/// The daemon's memory at that rate is bounded by what it keeps for the
/// session, not by how far the session falls behind: the ping-pong at
/// [`RATE`], already running, is attached in wall mode with DWARF
/// unwinding (every switch with a 16 KiB stack copy, and the cpu-clock
/// samples) for 3 s, and the daemon's peak resident memory grows by at
/// most [`RSS_GROWTH_MIB`]. (An attach, not `run`: profctl's own frames
/// before its exec would be named too, from its debug information.)
#[test]
fn the_daemon_s_memory_is_bounded_at_100_000_switches_a_second() {
    let h = Harness::start();
    let mut command = std::process::Command::new(build_workload("offcpu"));
    command.args(["pingpong", "60", "--ready", RATE]);
    let target = profd_e2e::Workload::start_command(command, "offcpu");
    let before = peak_rss_kib(h.daemon.pid());
    let out = h.daemon.profctl(&[
        "attach",
        &target.pid_arg(),
        "--mode",
        "wall",
        "--unwind",
        "dwarf",
        "--duration",
        "3",
        "--format",
        "json",
    ]);
    let after = peak_rss_kib(h.daemon.pid());
    let p = Profile::parse(&out);
    let t = check_time_profile(&p, "wall");
    let growth_mib = after.saturating_sub(before) / 1024;
    eprintln!(
        "  lost {}, unknown {:.4} s of {:.4} s; VmHWM {before} -> {after} KiB",
        p.totals.lost,
        t.unknown_ns as f64 / 1e9,
        (t.on_cpu_ns + t.off_cpu_ns + t.unknown_ns) as f64 / 1e9
    );
    assert!(
        growth_mib <= RSS_GROWTH_MIB,
        "the daemon's peak memory grew by {growth_mib} MiB ({before} -> {after} KiB), over \
         {RSS_GROWTH_MIB} MiB:\n{}",
        p.table()
    );
}

#[test]
fn off_cpu_time_at_100_000_switches_a_second_adds_up_frame_pointers() {
    let h = Harness::start();
    at_100_000_switches_a_second(&h, "off-cpu", "fp");
}

#[test]
fn off_cpu_time_at_100_000_switches_a_second_adds_up_dwarf() {
    let h = Harness::start();
    at_100_000_switches_a_second(&h, "off-cpu", "dwarf");
}

/// In wall mode the same, and per thread too: each thread's time in the
/// profile with its time not known is its lifetime.
fn wall_at_100_000_switches_a_second(unwind: &str) {
    let h = Harness::start();
    let (p, v) = at_100_000_switches_a_second(&h, "wall", unwind);
    let rows = threads(&h, p.session_id);
    eprintln!("  threads (tid → name, ns, unknown ns): {rows:?}");
    assert_eq!(rows.len(), 2, "the two threads of the ping-pong: {rows:?}");
    let lifetime = printed(&v, "lifetime_s", &p);
    let after_exit = (p.duration_s - lifetime).max(0.0);
    for (tid, (name, ns, unknown)) in &rows {
        let lifetime_s = if *tid == p.pid {
            lifetime
        } else {
            printed(&v, "seconds", &p)
        };
        assert_lifetimes(
            &format!("wall time of thread {tid} ({name}) with its time not known"),
            (ns + unknown) as f64,
            lifetime_s,
            after_exit,
            &p,
        );
    }
    let t = p.totals.time.expect("checked");
    assert_eq!(
        rows.values().map(|(_, _, unknown)| unknown).sum::<u64>(),
        t.unknown_ns,
        "the threads' time not known is the session's"
    );
}

#[test]
fn wall_time_at_100_000_switches_a_second_adds_up_frame_pointers() {
    wall_at_100_000_switches_a_second("fp");
}

#[test]
fn wall_time_at_100_000_switches_a_second_adds_up_dwarf() {
    wall_at_100_000_switches_a_second("dwarf");
}

/// Wall mode at 20 000 switches a second (the ping-pong of two threads on
/// one CPU): the kernel charges each switch's own path to the thread
/// switched in, before the record that ends its wait; samples weighted by
/// their periods would count that time twice (7 % over at this rate). The
/// two threads' time is their lifetimes.
#[test]
fn wall_time_at_a_high_switch_rate_is_the_threads_lifetimes() {
    let h = Harness::start();
    let (p, v) = run(&h, "wall", &["--unwind", "fp"], &["pingpong", "2", "20000"]);
    let t = p.totals.time.expect("checked");
    assert_eq!(p.totals.lost, 0, "{}", p.table());
    let (switches, seconds) = (printed(&v, "switches", &p), printed(&v, "seconds", &p));
    eprintln!("  {switches} switches in {seconds} s");
    // The main thread lived the session, the ponger the ping-pong.
    assert_near(
        "on_cpu_ns + off_cpu_ns of the two threads",
        (t.on_cpu_ns + t.off_cpu_ns) as f64,
        (p.duration_s + seconds) * 1e9,
        THREAD_TOLERANCE,
        &p,
    );
}

/// Switch records the kernel could not write are counted, and no time is
/// given across them: rings of 16 KiB under a ping-pong of two threads
/// switching as fast as they can, stacks by frame pointers. Records are
/// lost (`lost`), the waits they leave without an end are `unpaired`,
/// fewer waits are timed than the threads made, and from each loss to a
/// thread's next record its time is unknown: on-CPU, off-CPU and unknown
/// time add up to the threads' lifetimes, on-CPU is no more than their CPU
/// time and off-CPU no more than the rest.
#[test]
fn lost_switch_records_are_counted_not_guessed() {
    let _serial = profd_e2e::serial();
    profd_e2e::require_root_and_perf();
    let daemon = profd_e2e::Daemon::start_with(&["--ring-pages", "4"]);
    let out = daemon.profctl(&[
        "run",
        "--mode",
        "off-cpu",
        "--unwind",
        "fp",
        "--format",
        "json",
        "--",
        path_str(&build_workload("offcpu")),
        "pingpong",
        "1.5",
    ]);
    let p = Profile::parse_run(&out);
    let t = check_time_profile(&p, "off-cpu");
    let (switches, seconds) = (out.stderr_figure("switches"), out.stderr_figure("seconds"));
    let cpu = out.stderr_figure("cpu_total_s") * 1e9;
    eprintln!(
        "{}\n  {switches} switches in {seconds} s; waits {}, unpaired {}, lost {}, unknown {} ns",
        p.table(),
        t.waits,
        t.unpaired,
        p.totals.lost,
        t.unknown_ns
    );
    assert!(
        p.totals.lost > 0 && t.unpaired > 0 && t.unknown_ns > 0,
        "{switches} switches into 16 KiB rings lost nothing (lost {}, unpaired {}, unknown \
         {} ns):\n{}",
        p.totals.lost,
        t.unpaired,
        t.unknown_ns,
        p.table()
    );
    assert!(
        (t.waits as f64) < switches,
        "{} waits timed of {switches} switches, some of them lost:\n{}",
        t.waits,
        p.table()
    );
    // The main thread lived from its exec, the ponger the ping-pong; each
    // may be counted not known up to the session's end when the records
    // of its exit were lost. That no time is given across a loss is
    // checked exactly where the records can be chosen (sampler::waits'
    // tests); here the totals add up, and neither on-CPU nor off-CPU time
    // is more than the threads had.
    let lifetime = out.stderr_figure("lifetime_s");
    let lived = (lifetime + seconds) * 1e9;
    let after_exit = 2.0 * (p.duration_s - lifetime).max(0.0);
    let (on, off, unknown) = (t.on_cpu_ns as f64, t.off_cpu_ns as f64, t.unknown_ns as f64);
    assert_lifetimes(
        "on_cpu_ns + off_cpu_ns + unknown_ns of the two threads",
        on + off + unknown,
        lived / 1e9,
        after_exit,
        &p,
    );
    assert!(
        on <= cpu * (1.0 + ON_CPU_OVER),
        "on-CPU {on:.0} ns, but the threads ran {cpu:.0} ns:\n{}",
        p.table()
    );
    assert!(
        off <= (lived - cpu) + cpu * ON_CPU_BOUND + lived * THREAD_TOLERANCE + after_exit * 1e9,
        "off-CPU {off:.0} ns, but the threads were off the CPU {:.0} ns:\n{}",
        lived - cpu,
        p.table()
    );
}
