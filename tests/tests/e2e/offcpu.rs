//! End-to-end tests of off-CPU and wall-clock profiling (`--mode off-cpu`,
//! `--mode wall`): real kernel, real `profd` and `profctl`, and the
//! `offcpu` workload (tests/workloads/offcpu.c), whose threads wait for
//! known lengths of time in known functions and print the wall-clock time
//! each part took. Every count of these profiles is nanoseconds; shares are
//! checked against the workload's own clock, lengths against the session's
//! duration, the threads' and forked children's own clocks, and the
//! kernel's per-thread CPU time (`/proc/PID/task/TID/schedstat`).

use std::collections::BTreeMap;
use std::process::Command;

use profd_e2e::{build_workload, path_str, Harness, Profile, TimeTotals};

/// Percentage points a share may be off the workload's own measurement.
const PCT_TOLERANCE: f64 = 3.0;
/// How far a length of time may be off the time it must account for (a
/// fraction of the latter). The kernel's timestamps are exact; what is
/// missed is the wait a thread was in when an attach began (its switch out
/// was not seen: `unpaired`, ≤ 7 ms here) and the time between the
/// daemon's and the test's readings of the clocks.
const TIME_TOLERANCE: f64 = 0.05;
/// How far a thread's time may be off its lifetime (a fraction): a waiter
/// starts a moment after main, and the session ends a moment after the
/// exit.
pub(crate) const THREAD_TOLERANCE: f64 = 0.02;
/// Long enough for any attach test: workloads are killed when the test ends.
const LONG: f64 = 60.0;

/// `profctl run --mode MODE [extra...] --format json -- offcpu ARGS...`:
/// the profile and the `key value` lines the workload printed on stderr.
pub(crate) fn run(
    h: &Harness,
    mode: &str,
    extra: &[&str],
    args: &[&str],
) -> (Profile, BTreeMap<String, f64>) {
    let exe = build_workload("offcpu");
    let mut argv = vec!["run", "--mode", mode];
    argv.extend_from_slice(extra);
    argv.extend(["--format", "json", "--", path_str(&exe)]);
    argv.extend_from_slice(args);
    let out = h.daemon.profctl(&argv);
    let p = Profile::parse_run(&out);
    let printed: BTreeMap<String, f64> = out
        .stderr
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
        .collect();
    eprintln!("{}\n  offcpu {args:?} printed {printed:?}", p.table());
    check_time_profile(&p, mode);
    (p, printed)
}

/// A value the workload printed (`sleep_s`, `lifetime_s`, ...).
pub(crate) fn printed(values: &BTreeMap<String, f64>, key: &str, p: &Profile) -> f64 {
    *values
        .get(key)
        .unwrap_or_else(|| panic!("the workload printed no `{key}` line:\n{}", p.table()))
}

/// What every off-cpu or wall profile obeys: the mode is reported, the
/// time totals are present and the profile's total is their off-CPU time
/// (off-cpu) or on-CPU plus off-CPU time (wall).
pub(crate) fn check_time_profile(p: &Profile, mode: &str) -> TimeTotals {
    assert_eq!(p.mode.as_deref(), Some(mode), "mode:\n{}", p.table());
    assert_eq!(
        p.unit.as_deref(),
        Some("nanoseconds"),
        "unit:\n{}",
        p.table()
    );
    let t = p
        .totals
        .time
        .unwrap_or_else(|| panic!("no totals.time in a {mode} profile:\n{}", p.table()));
    assert!(
        t.runnable_ns <= t.off_cpu_ns,
        "runnable_ns is part of off_cpu_ns:\n{}",
        p.table()
    );
    let expected = match mode {
        "off-cpu" => t.off_cpu_ns,
        _ => t.on_cpu_ns + t.off_cpu_ns,
    };
    assert_near(
        "attributed (ns)",
        p.totals.attributed as f64,
        expected as f64,
        0.01,
        p,
    );
    t
}

/// `actual` is `expected` within `tolerance` (a fraction of `expected`).
pub(crate) fn assert_near(what: &str, actual: f64, expected: f64, tolerance: f64, p: &Profile) {
    eprintln!(
        "  {what}: {actual:.0}, expected {expected:.0} ± {:.1} %",
        tolerance * 100.0
    );
    assert!(
        (actual - expected).abs() <= expected * tolerance,
        "{what} is {actual:.0}, expected {expected:.0} ± {:.1} %:\n{}",
        tolerance * 100.0,
        p.table()
    );
}

/// Asserts `name`'s inclusive share of the profile is `expected` ±
/// [`PCT_TOLERANCE`] points.
fn assert_share(p: &Profile, name: &str, expected: f64) {
    p.assert_pct_within(name, profd_e2e::Measure::Inclusive, expected, PCT_TOLERANCE);
}

/// The folded stacks of session `id` (`profctl export ID --format
/// folded`): frames outermost first, and the nanoseconds of each stack.
fn folded(h: &Harness, id: u64) -> Vec<(Vec<String>, u64)> {
    let out = h
        .daemon
        .profctl(&["export", &id.to_string(), "--format", "folded"]);
    out.assert_success();
    out.stdout
        .lines()
        .map(|l| {
            let (stack, count) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("not a folded line: {l:?}"));
            let count = count
                .parse()
                .unwrap_or_else(|e| panic!("folded line {l:?}: {e}"));
            (stack.split(';').map(str::to_string).collect(), count)
        })
        .collect()
}

/// The main thread sleeps 7 ms in sleep_part and waits about 3 ms for a
/// pipe in pipe_part each round: one switch out in each, so a profile
/// that counted switches (as a sampled `context-switches` event or a
/// count of `sched_switch` records does) would give 50/50. Weighted by
/// time it is 70/30, or the split the workload measured with its own
/// clock (each wait also takes the kernel's wake-up latency, which a busy
/// machine lengthens).
#[test]
fn off_cpu_time_splits_by_wait_length_not_by_switch_count() {
    let h = Harness::start();
    let (p, v) = run(&h, "off-cpu", &[], &["split", "4"]);
    let t = p.totals.time.expect("checked");
    let (sleep_s, pipe_s) = (printed(&v, "sleep_s", &p), printed(&v, "pipe_s", &p));
    let rounds = printed(&v, "rounds", &p);
    let sleep_pct = 100.0 * sleep_s / (sleep_s + pipe_s);
    eprintln!(
        "  the workload measured sleep {sleep_pct:.1} % / pipe {:.1} % over {rounds} rounds \
         (by construction 70/30)",
        100.0 - sleep_pct
    );
    assert!(
        sleep_pct >= 60.0,
        "the workload's own clock gives sleep_part only {sleep_pct:.1} % (70 % by \
         construction): the machine is too busy to tell 70/30 from 50/50"
    );
    // One switch out in each part a round: a count would be 50/50.
    assert!(
        t.waits as f64 >= 2.0 * rounds && t.waits as f64 <= 2.0 * rounds * 1.2 + 50.0,
        "{} waits for {rounds} rounds of two waits each:\n{}",
        t.waits,
        p.table()
    );
    assert_share(&p, "sleep_part", sleep_pct);
    assert_share(&p, "pipe_part", 100.0 - sleep_pct);
    assert_share(&p, "[off-cpu: blocked]", 100.0);
    assert_eq!(p.state, "exited", "{}", p.table());
}

/// With 5 ms of spinning added to each round, wall mode gives each part
/// its share of the thread's wall-clock time: sleep 7/15, pipe 3/15,
/// compute 5/15 (47/20/33 %), or as the workload measured them. The
/// thread's whole lifetime is accounted for: the profile's total (on-CPU
/// samples weighted by their period, plus the waits) is the session's
/// duration.
#[test]
fn wall_time_splits_by_wall_clock_time() {
    let h = Harness::start();
    let (p, v) = run(&h, "wall", &[], &["split", "4", "--compute"]);
    let parts = ["sleep", "pipe", "compute"].map(|part| printed(&v, &format!("{part}_s"), &p));
    let sum: f64 = parts.iter().sum();
    eprintln!(
        "  the workload measured sleep {:.1} % / pipe {:.1} % / compute {:.1} % \
         (by construction 47/20/33)",
        100.0 * parts[0] / sum,
        100.0 * parts[1] / sum,
        100.0 * parts[2] / sum
    );
    for (name, secs) in ["sleep_part", "pipe_part", "compute_part"]
        .iter()
        .zip(parts)
    {
        assert_share(&p, name, 100.0 * secs / sum);
    }
    // One thread: its wall-clock time is the session's.
    assert_near(
        "attributed (ns) of the one thread",
        p.totals.attributed as f64,
        p.duration_s * 1e9,
        TIME_TOLERANCE,
        &p,
    );
}

/// Waiters blocked on a contended pthread mutex: their off-CPU stacks go
/// through the lock (pthread_mutex_lock, `___pthread_mutex_lock` in
/// glibc's own symbols) to wait_for_lock, its caller, and begin with
/// `[off-cpu: blocked]`. Two waiters spend most of their time there, the
/// holder (the main thread) in hold_lock's 4 ms sleeps.
#[test]
fn mutex_waits_show_the_lock_caller() {
    let h = Harness::start();
    let (p, _) = run(&h, "off-cpu", &[], &["mutex", "3"]);
    let stacks = folded(&h, p.session_id);
    let mut lock_callers: BTreeMap<String, u64> = BTreeMap::new();
    let (mut in_wait_for_lock, mut blocked) = (0, 0);
    for (frames, ns) in &stacks {
        if let Some(i) = frames.iter().position(|f| f.contains("pthread_mutex_lock")) {
            let caller = if i == 0 { "(none)" } else { &frames[i - 1] };
            *lock_callers.entry(caller.to_string()).or_default() += ns;
        }
        if frames.iter().any(|f| f == "wait_for_lock") {
            in_wait_for_lock += ns;
            if frames[0] == "[off-cpu: blocked]" {
                blocked += ns;
            }
        }
    }
    // A waiter woken in the instant it went to sleep leaves the CPU still
    // runnable (the kernel marks that switch preempted): rare, short.
    assert!(
        blocked as f64 >= 0.9 * in_wait_for_lock as f64,
        "waiters for a mutex gave the CPU up: only {blocked} of {in_wait_for_lock} ns \
         under wait_for_lock begin with [off-cpu: blocked]\n{}",
        p.table()
    );
    eprintln!("  callers of pthread_mutex_lock (ns): {lock_callers:?}");
    let lock_total: u64 = lock_callers.values().sum();
    let from_waiters = lock_callers.get("wait_for_lock").copied().unwrap_or(0);
    let known = from_waiters + lock_callers.get("hold_lock").copied().unwrap_or(0);
    assert!(
        lock_total > 0 && known as f64 >= 0.95 * lock_total as f64,
        "the mutex's waits must show its callers (wait_for_lock, hold_lock) on \
         ≥ 95 % of their time: {lock_callers:?}\n{}",
        p.table()
    );
    assert!(
        from_waiters as f64 >= 0.5 * lock_total as f64,
        "wait_for_lock has only {from_waiters} of the mutex's {lock_total} ns: \
         {lock_callers:?}\n{}",
        p.table()
    );
    let share = 100.0 * in_wait_for_lock as f64 / p.totals.attributed as f64;
    eprintln!("  wait_for_lock: {share:.1} % of the off-CPU time");
    assert!(
        share >= 30.0,
        "wait_for_lock has only {share:.1} % of the off-CPU time (two of three \
         threads wait there most of the time):\n{}",
        p.table()
    );
    assert_eq!(
        p.function("wait_for_lock").inclusive,
        in_wait_for_lock,
        "JSON and folded stacks differ"
    );
}

/// A thread asleep when its process exits (the main thread returns after
/// 1.5 s while long_sleep sleeps on): the session ends with the target, and
/// the wait is counted up to the exit, so long_sleep's time is the
/// process's lifetime.
#[test]
fn a_wait_ended_by_the_exit_is_counted_up_to_it() {
    let h = Harness::start();
    let (p, v) = run(&h, "off-cpu", &[], &["exit", "1.5"]);
    assert_eq!(p.state, "exited", "{}", p.table());
    let asleep_s = printed(&v, "lifetime_s", &p) - printed(&v, "sleeper_start_s", &p);
    assert_near(
        "long_sleep (ns)",
        p.function("long_sleep").inclusive as f64,
        asleep_s * 1e9,
        TIME_TOLERANCE,
        &p,
    );
}

/// A session that stops (its duration elapsed) while a thread sleeps: the
/// wait is open at the end, counted up to the session's end, and said so
/// in `open_at_end`. long_sleep went to sleep right after the target
/// started, under the session (`profctl run`), so its time is the
/// session's duration.
#[test]
fn waits_open_at_the_stop_are_counted_up_to_it() {
    let h = Harness::start();
    let (p, v) = run(
        &h,
        "off-cpu",
        &["--duration", "2"],
        &["split", &LONG.to_string(), "--sleeper"],
    );
    let asleep_s = p.duration_s - printed(&v, "sleeper_start_s", &p);
    assert_eq!(p.state, "duration_elapsed", "{}", p.table());
    let t = p.totals.time.expect("checked");
    assert!(
        t.open_at_end >= 1,
        "long_sleep was asleep at the stop, yet open_at_end is {}:\n{}",
        t.open_at_end,
        p.table()
    );
    assert_near(
        "long_sleep (ns)",
        p.function("long_sleep").inclusive as f64,
        asleep_s * 1e9,
        TIME_TOLERANCE,
        &p,
    );
}

/// A thread's CPU time so far, from `/proc/PID/task/TID/schedstat` (its
/// first field: nanoseconds on a CPU).
fn thread_cpu_ns(pid: u32, tid: u32) -> f64 {
    let path = format!("/proc/{pid}/task/{tid}/schedstat");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    text.split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .unwrap_or_else(|| panic!("{path} holds {text:?}"))
}

/// How far below a thread's CPU time its on-CPU time may be, per wait
/// timed: the kernel's path into a thread that comes from the idle task or
/// another process runs before the record of its switch in, and is counted
/// off the CPU ([`crate::offcpu_rate`] bounds the same at 100 000
/// switches a second; a few microseconds each here, [`SWITCH_PATH_NS`] on
/// a loaded machine).
const SWITCH_PATH_NS: f64 = 20_000.0;
/// What a gated thread may run, or be counted as running, outside the
/// schedstat readings around its rounds: leaving its last round for its
/// wait, and the process's exit (its perf events torn down with it). A few
/// microseconds each on a quiet machine; with two busy CPUs beside, three
/// threads ran 4.6-4.7 ms in all past their last readings.
const EDGE_CPU_NS: f64 = 2_000_000.0;

/// The `offcpu gated` workload, its stdin and stdout held by the test:
/// its threads wait, blocked, until [`Gated::go_and_wait`] sends a byte, run their rounds for
/// the seconds asked, and wait again, blocked, until [`Gated::finish`]
/// ends the process. Killed when dropped.
struct Gated {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

/// What one thread of `offcpu gated` printed: its time in sleep_part and
/// its CPU time over its rounds.
#[derive(Debug, Clone, Copy)]
struct GatedThread {
    nap_s: f64,
    cpu_s: f64,
}

impl Gated {
    fn start(seconds: &str, threads: usize) -> Gated {
        use std::io::BufRead;
        use std::process::Stdio;
        let mut child = Command::new(build_workload("offcpu"))
            .args(["gated", seconds, "--ready", &threads.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start offcpu gated");
        let stdin = child.stdin.take();
        let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read the ready line");
        assert_eq!(line.trim(), "ready", "offcpu gated did not start");
        Gated {
            child,
            stdin,
            stdout,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its threads' CPU time now, by schedstat: tid → ns.
    fn cpu_ns(&self) -> BTreeMap<u32, f64> {
        let pid = self.pid();
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .expect("the workload's threads")
            .map(|e| e.unwrap().file_name().to_string_lossy().parse().unwrap())
            .map(|tid| (tid, thread_cpu_ns(pid, tid)))
            .collect()
    }

    /// Returns once its `threads` threads exist and are all asleep (the
    /// workers are created after the ready line).
    fn wait_all_asleep(&self, threads: usize) {
        let pid = self.pid();
        let asleep = || -> Option<()> {
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
            let states: Vec<char> = tasks
                .filter_map(|e| {
                    let tid = e.ok()?.file_name();
                    let stat = std::fs::read_to_string(format!(
                        "/proc/{pid}/task/{}/stat",
                        tid.to_string_lossy()
                    ))
                    .ok()?;
                    stat.rsplit_once(") ")?.1.chars().next()
                })
                .collect();
            (states.len() == threads && states.iter().all(|&s| s == 'S')).then_some(())
        };
        profd_e2e::wait_until(
            "the threads asleep",
            std::time::Duration::from_secs(60),
            asleep,
        );
    }

    /// Sends the first byte, and returns once every thread is done with
    /// its rounds (the main thread says `done`: it and every other thread
    /// are then waiting, or about to).
    fn go_and_wait(&mut self) {
        use std::io::{BufRead, Write};
        let stdin = self.stdin.as_mut().expect("stdin");
        stdin.write_all(b"g").expect("write the go byte");
        stdin.flush().expect("flush");
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("read the done line");
        assert_eq!(
            line.trim(),
            "done",
            "offcpu gated did not finish its rounds"
        );
    }

    /// Closes its stdin: the process exits. Returns what it printed:
    /// its `key value` lines, and each thread's figures by tid.
    fn finish(mut self) -> (BTreeMap<String, f64>, BTreeMap<u32, GatedThread>) {
        use std::io::Read;
        drop(self.stdin.take());
        let status = self.child.wait().expect("wait for offcpu gated");
        let mut err = String::new();
        self.child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut err)
            .expect("read its stderr");
        assert!(status.success(), "offcpu gated: {status}\n{err}");
        let mut values = BTreeMap::new();
        let mut threads = BTreeMap::new();
        for line in err.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.as_slice() {
                ["thread", tid, "start_s", _, "nap_s", nap, "cpu_s", cpu] => {
                    let f = |v: &str| v.parse::<f64>().expect("a figure");
                    threads.insert(
                        tid.parse().expect("a tid"),
                        GatedThread {
                            nap_s: f(nap),
                            cpu_s: f(cpu),
                        },
                    );
                }
                [key, value] => {
                    if let Ok(v) = value.parse() {
                        values.insert(key.to_string(), v);
                    }
                }
                _ => {}
            }
        }
        eprintln!("  offcpu gated printed {values:?}\n  threads {threads:?}");
        (values, threads)
    }
}

impl Drop for Gated {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A session of `offcpu gated` with `threads` threads: `profctl attach
/// --mode MODE` while every thread waits, blocked; once the session runs,
/// the threads' CPU time (schedstat) is read, the rounds run, the CPU
/// time is read again while every thread waits, and the process exits,
/// which ends the session. A thread blocked on both sides of its rounds
/// uses no CPU there, so the two readings bracket exactly what it ran over
/// the session, however late the test reads them on a loaded machine.
struct GatedRun {
    p: Profile,
    /// Each thread's CPU time between the readings (ns).
    cpu: BTreeMap<u32, f64>,
    /// The machine's steal time over the run, all CPUs (ns, to 10 ms):
    /// time a thread is on a CPU by its switches while the hypervisor ran
    /// something else, which schedstat leaves out (paravirt steal
    /// accounting).
    steal: f64,
    /// The workload's `key value` figures and its threads'.
    printed: BTreeMap<String, f64>,
    threads: BTreeMap<u32, GatedThread>,
}

fn gated_run(h: &Harness, mode: &str, threads: usize) -> GatedRun {
    let mut w = Gated::start("3", threads);
    let pid = w.pid();
    let attach = h.daemon.spawn_profctl(&[
        "attach",
        &pid.to_string(),
        "--mode",
        mode,
        "--format",
        "json",
    ]);
    // The session's line in `profctl sessions`: `ID PID COMM running ...`.
    profd_e2e::wait_until(
        "the session running",
        std::time::Duration::from_secs(60),
        || {
            let out = h.daemon.profctl(&["sessions"]);
            out.assert_success();
            out.stdout
                .lines()
                .map(profd_e2e::words)
                .any(|w| w.get(1) == Some(&pid.to_string().as_str()) && w.contains(&"running"))
                .then_some(())
        },
    );
    let steal_before = steal_ns();
    let before = w.cpu_ns();
    w.go_and_wait();
    let after = w.cpu_ns();
    let (printed, figures) = w.finish();
    let steal = steal_ns() - steal_before;
    let p = Profile::parse(&attach.wait(profd_e2e::PROFCTL_TIMEOUT));
    eprintln!("{}", p.table());
    check_time_profile(&p, mode);
    assert_eq!(p.state, "exited", "{}", p.table());
    assert_eq!(before.len(), threads, "threads before: {before:?}");
    let cpu = before
        .iter()
        .map(|(tid, ns)| (*tid, after[tid] - ns))
        .collect();
    eprintln!("  schedstat over the rounds (ns): {cpu:?}; steal {steal:.0} ns");
    GatedRun {
        p,
        cpu,
        steal,
        printed,
        threads: figures,
    }
}

/// The machine's steal time so far, all CPUs: the `cpu` line of
/// /proc/stat, in USER_HZ (100 a second) ticks.
fn steal_ns() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").expect("read /proc/stat");
    let ticks: f64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("cpu "))
        .and_then(|l| l.split_whitespace().nth(7))
        .and_then(|v| v.parse().ok())
        .expect("steal in /proc/stat");
    ticks * 10_000_000.0
}

/// Off-cpu accounting against the kernel's own figures, for one thread
/// attached while it waits: its on-CPU time (switch to switch) is its CPU
/// time by schedstat, read while it waits before and after its rounds; and
/// over the session (its wait when the session begins counted from there,
/// to its exit), what it did not run is off-CPU time.
///
/// Bounds, from the mechanism: on-CPU time may be short of the CPU time
/// by [`SWITCH_PATH_NS`] a wait, and over it by [`EDGE_CPU_NS`] and the
/// steal time of a virtual machine (switch to switch counts it, schedstat
/// does not); the thread's time is the session's, less the moment from its
/// exit to the session's end (within [`THREAD_TOLERANCE`]).
#[test]
fn off_cpu_time_is_the_session_minus_the_cpu_time() {
    let h = Harness::start();
    let run = gated_run(&h, "off-cpu", 1);
    let (p, pid) = (&run.p, run.p.pid);
    let t = p.totals.time.expect("checked");
    let cpu = run.cpu[&pid];
    let gated = printed(&run.printed, "gated_s", p) * 1e9;
    let session = p.duration_s * 1e9;
    eprintln!(
        "  schedstat: {:.4} s of CPU; the thread lived {:.4} s from the go; {} waits",
        cpu / 1e9,
        gated / 1e9,
        t.waits
    );
    assert!(
        cpu >= 0.2 * gated,
        "compute_part spins 5 ms of each ~12 ms round, yet the thread ran only {cpu:.0} ns \
         of {gated:.0}"
    );
    let (on, off) = (t.on_cpu_ns as f64, t.off_cpu_ns as f64);
    let switch_path = t.waits as f64 * SWITCH_PATH_NS;
    let high = cpu + EDGE_CPU_NS + run.steal;
    assert_within("on_cpu_ns", on, cpu - switch_path, high, p);
    let lived = (
        session * (1.0 - THREAD_TOLERANCE) - EDGE_CPU_NS,
        session * (1.0 + THREAD_TOLERANCE),
    );
    assert_within("on_cpu_ns + off_cpu_ns", on + off, lived.0, lived.1, p);
    assert_within(
        "off_cpu_ns",
        off,
        lived.0 - cpu - EDGE_CPU_NS - run.steal,
        lived.1 - cpu + switch_path,
        p,
    );
}

/// Threads that wait the whole session never switch, yet each is counted
/// waiting for the whole of it, where it waits: `offcpu gated`'s three
/// threads before its first byte (the main thread in read(2) on stdin
/// under read_byte, two workers in pthread_barrier_wait under
/// gated_worker), attached in wall mode with DWARF and off-cpu mode with
/// frame pointers. Their schedstat shows they did not run over the
/// session; no time is on the CPU, each thread's is the session's
/// (within [`THREAD_TOLERANCE`]), and the stacks are those /proc showed
/// when the session began: with DWARF the workload's frames under the C
/// library's, with frame pointers the C library's function alone under
/// the kernel's (the stacks said truncated).
#[test]
fn threads_waiting_the_whole_session_are_counted_where_they_wait() {
    use profd_e2e::Measure::Inclusive;
    let h = Harness::start();
    for (mode, unwind) in [("wall", "dwarf"), ("off-cpu", "fp")] {
        let w = Gated::start("3", 3);
        w.wait_all_asleep(3);
        let before = w.cpu_ns();
        let out = h.daemon.profctl(&[
            "attach",
            &w.pid().to_string(),
            "--mode",
            mode,
            "--unwind",
            unwind,
            "--duration",
            "1",
            "--format",
            "json",
        ]);
        let after = w.cpu_ns();
        let p = Profile::parse(&out);
        eprintln!("{}", p.table());
        let t = check_time_profile(&p, mode);
        assert_eq!(
            before, after,
            "the threads ran: schedstat {before:?} -> {after:?}"
        );
        let session = p.duration_s * 1e9;
        assert_eq!(t.on_cpu_ns, 0, "{}", p.table());
        assert_eq!((t.waits, t.open_at_end), (3, 3), "{}", p.table());
        assert_within(
            "off_cpu_ns of the three threads",
            t.off_cpu_ns as f64,
            3.0 * session * (1.0 - THREAD_TOLERANCE),
            3.0 * session * (1.0 + THREAD_TOLERANCE),
            &p,
        );
        let rows = threads(&h, p.session_id);
        assert_eq!(rows.len(), 3, "three threads: {rows:?}");
        for (tid, (name, ns, _)) in &rows {
            assert_within(
                &format!("the time of thread {tid} ({name})"),
                *ns as f64,
                session * (1.0 - THREAD_TOLERANCE),
                session * (1.0 + THREAD_TOLERANCE),
                &p,
            );
        }
        let (reader, workers) = match unwind {
            "dwarf" => ("read_byte", "gated_worker"),
            _ => ("ksys_read", "___pthread_barrier_wait"),
        };
        p.assert_pct_within(reader, Inclusive, 100.0 / 3.0, 1.0);
        p.assert_pct_within(workers, Inclusive, 200.0 / 3.0, 1.0);
        p.assert_pct_within("[off-cpu: blocked]", Inclusive, 100.0, 0.1);
        if unwind == "fp" {
            assert!(p.totals.truncated >= 3, "{}", p.table());
        }
    }
}

/// `actual` lies in `[low, high]`.
fn assert_within(what: &str, actual: f64, low: f64, high: f64, p: &Profile) {
    eprintln!("  {what}: {actual:.0}, expected within [{low:.0}, {high:.0}]");
    assert!(
        (low..=high).contains(&actual),
        "{what} is {actual:.0}, expected within [{low:.0}, {high:.0}]:\n{}",
        p.table()
    );
}

/// Off-cpu accounting per thread, against each thread's schedstat: three
/// threads attached while they wait, each running rounds of 7 ms asleep and
/// 5 ms spinning. The session's on-CPU time is the three threads' CPU time
/// by schedstat (read while all wait, before and after their rounds), and
/// each thread's off-CPU time (the threads view) is the session's time
/// less its CPU time, with the bounds of
/// [`off_cpu_time_is_the_session_minus_the_cpu_time`]; its time in
/// sleep_part, by its own clock, is within that.
#[test]
fn each_thread_s_off_cpu_time_is_its_lifetime_minus_its_schedstat() {
    let h = Harness::start();
    let run = gated_run(&h, "off-cpu", 3);
    let p = &run.p;
    let t = p.totals.time.expect("checked");
    let cpu: f64 = run.cpu.values().sum();
    let switch_path = t.waits as f64 * SWITCH_PATH_NS;
    assert_within(
        "on_cpu_ns of the three threads",
        t.on_cpu_ns as f64,
        cpu - switch_path,
        cpu + 3.0 * EDGE_CPU_NS + run.steal,
        p,
    );
    let rows = threads(&h, p.session_id);
    eprintln!("  threads (tid → name, ns, unknown ns): {rows:?}");
    assert_eq!(rows.len(), 3, "three threads: {rows:?}");
    let session = p.duration_s * 1e9;
    for (tid, (name, off, _)) in &rows {
        let figures = run
            .threads
            .get(tid)
            .unwrap_or_else(|| panic!("thread {tid} printed nothing: {:?}", run.threads));
        let cpu = run.cpu[tid];
        // Its own figure of its CPU time is the kernel's too.
        assert!(
            (figures.cpu_s * 1e9 - cpu).abs() <= EDGE_CPU_NS,
            "thread {tid}: {} s of CPU by its clock, {cpu:.0} ns by schedstat",
            figures.cpu_s
        );
        let (low, high) = (
            session * (1.0 - THREAD_TOLERANCE) - EDGE_CPU_NS - cpu - EDGE_CPU_NS - run.steal,
            session * (1.0 + THREAD_TOLERANCE) - cpu + switch_path,
        );
        assert_within(
            &format!("off-CPU ns of thread {tid} ({name})"),
            *off as f64,
            low,
            high,
            p,
        );
        assert!(
            figures.nap_s * 1e9 <= *off as f64,
            "thread {tid} slept {} s in sleep_part, more than its off-CPU {off} ns",
            figures.nap_s
        );
    }
}

/// A target that forks children which sleep and spin (`offcpu kids`: two
/// children at once, each 7 ms asleep in kid_nap and 5 ms spinning a round
/// for 2 s), profiled with `--children`: in off-cpu mode each child's time
/// is its lifetime by its own clock less its CPU time (the kernel's count,
/// CLOCK_PROCESS_CPUTIME_ID), and kid_nap holds the children's sleeps; in
/// wall mode each child's time is its lifetime. A child's time runs from
/// its first switch in (just before its clock starts) to its exit (just
/// after its clock's last reading): within [`THREAD_TOLERANCE`] of its
/// lifetime, as a thread's in [`every_thread_s_time_is_its_lifetime`].
#[test]
fn children_s_off_cpu_and_wall_time_is_theirs() {
    let h = Harness::start();
    for mode in ["off-cpu", "wall"] {
        let exe = build_workload("offcpu");
        let out = h.daemon.profctl(&[
            "run",
            "--mode",
            mode,
            "--children",
            "--format",
            "json",
            "--",
            path_str(&exe),
            "kids",
            "2",
            "2",
        ]);
        let p = Profile::parse_run(&out);
        eprintln!("{}", p.table());
        check_time_profile(&p, mode);
        // `kid PID lifetime_s L cpu_s C nap_s N`: pid → (L, C, N).
        let out_kids: BTreeMap<u32, (f64, f64, f64)> = out
            .stderr
            .lines()
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                match w.as_slice() {
                    ["kid", pid, "lifetime_s", l, "cpu_s", c, "nap_s", n] => Some((
                        pid.parse().ok()?,
                        (l.parse().ok()?, c.parse().ok()?, n.parse().ok()?),
                    )),
                    _ => None,
                }
            })
            .collect();
        eprintln!("  the children printed (lifetime, cpu, nap s): {out_kids:?}");
        assert_eq!(out_kids.len(), 2, "two children: {out_kids:?}");
        let mut naps = 0.0;
        for (pid, (lifetime, cpu, nap)) in &out_kids {
            let row = p
                .processes
                .iter()
                .find(|r| r.pid == *pid)
                .unwrap_or_else(|| panic!("child {pid} not in {:?}\n{}", p.processes, p.table()));
            let (expected, slack) = match mode {
                "off-cpu" => (lifetime - cpu, lifetime * THREAD_TOLERANCE),
                _ => (*lifetime, lifetime * THREAD_TOLERANCE),
            };
            assert_within(
                &format!("{mode} ns of child {pid}"),
                row.samples as f64,
                (expected - slack) * 1e9,
                (expected + slack) * 1e9,
                &p,
            );
            naps += nap;
        }
        // kid_nap's waits are the children's sleeps by their clocks, less
        // the CPU time in kid_nap around each (entering and leaving the
        // system call: microseconds of each 7 ms).
        if mode == "off-cpu" {
            let kid_nap = p.function("kid_nap").inclusive as f64;
            assert_within(
                "kid_nap (ns)",
                kid_nap,
                naps * 1e9 * 0.95,
                naps * 1e9 * 1.01,
                &p,
            );
        }
    }
}
/// The exports of an off-CPU session carry nanoseconds to the tools that
/// read them: `go tool pprof` reads sample type `off_cpu` and gives each
/// function the session's inclusive time to the nanosecond; `profctl
/// report FILE` prints the live table; the folded stacks, speedscope's
/// weights (valid against its schema, unit `nanoseconds`) and the SVG's
/// frames (laid out by Chromium) add up to the session's time.
#[test]
fn exports_of_an_off_cpu_session_carry_its_time_to_their_readers() {
    let h = Harness::start();
    let (p, _) = run(&h, "off-cpu", &[], &["split", "2"]);
    let id = p.session_id.to_string();
    let dir = profd_e2e::unique_dir("offcpu-exports");
    let export = |format: &str, file: &str| {
        let path = dir.join(file);
        h.daemon
            .profctl(&["export", &id, "--format", format, "-o", path_str(&path)])
            .assert_success();
        path
    };

    // pprof, read by go tool pprof: cum is the inclusive time, flat the
    // exclusive, in nanoseconds; the total is the session's.
    let pprof = export("pprof", "offcpu.pb.gz");
    let (times, text) = profd_e2e::views::go_pprof_time(&pprof, "off_cpu");
    eprintln!("go tool pprof -top:\n{text}");
    assert!(text.contains("Type: off_cpu"), "{text}");
    assert!(
        text.contains(&format!("of {}ns total", p.totals.attributed)),
        "go tool pprof's total is not the session's {} ns:\n{text}",
        p.totals.attributed
    );
    for name in ["sleep_part", "pipe_part", "[off-cpu: blocked]"] {
        let f = p.function(name);
        assert_eq!(
            times.get(name).copied(),
            Some((f.exclusive, f.inclusive)),
            "{name} in go tool pprof (flat, cum ns) and in the session:\n{text}\n{}",
            p.table()
        );
    }
    assert_eq!(
        times.values().map(|t| t.0).sum::<u64>(),
        p.totals.attributed,
        "flat times:\n{text}"
    );

    // profctl report on the file: the live session's table, in time.
    let table = |out: profd_e2e::CmdOutput| -> Vec<String> {
        out.assert_success();
        let lines: Vec<String> = out
            .stdout
            .lines()
            .skip_while(|l| !l.contains("INCL TIME"))
            .map(str::to_string)
            .collect();
        assert!(lines.len() > 3, "no time table:\n{}", out.stdout);
        lines
    };
    let live = table(h.daemon.profctl(&["report", &id, "--top", "0"]));
    let saved = table(
        h.daemon
            .profctl(&["report", path_str(&pprof), "--top", "0"]),
    );
    assert_eq!(live, saved, "report FILE differs from the live table");

    // Folded: nanoseconds adding up to the session's time.
    let stacks = folded(&h, p.session_id);
    assert_eq!(
        stacks.iter().map(|(_, ns)| ns).sum::<u64>(),
        p.totals.attributed,
        "folded nanoseconds"
    );

    // speedscope: valid, in nanoseconds, weights adding up.
    let speedscope = export("speedscope", "offcpu.speedscope.json");
    let errors =
        profd_e2e::views::json_schema_errors(&speedscope, "speedscope-file-format-schema.json");
    assert!(
        errors.is_empty(),
        "speedscope's schema:\n{}",
        errors.join("\n")
    );
    let ss: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&speedscope).expect("read speedscope")).unwrap();
    let mut weight = 0.0;
    for prof in ss["profiles"].as_array().expect("profiles") {
        assert_eq!(prof["unit"], "nanoseconds", "{prof}");
        weight += prof["weights"]
            .as_array()
            .expect("weights")
            .iter()
            .filter_map(|w| w.as_f64())
            .sum::<f64>();
    }
    assert_eq!(weight as u64, p.totals.attributed, "speedscope weights");

    // SVG in Chromium: frames as wide as their time, the details in ns.
    let svg = export("svg", "offcpu.svg");
    let seen = crate::views::svg_in_chromium(&svg, "pipe_part", "sleep_part");
    let frames = crate::views::svg_frames(&seen["frames"]);
    let all = crate::views::svg_width(&frames, "all");
    // A function has a frame under each of `[off-cpu: blocked]` and
    // `[off-cpu: runnable]` that is wide enough to draw.
    let width = |name: &str| -> f64 {
        frames
            .iter()
            .filter(|f| f.name == name)
            .map(|f| f.width)
            .sum()
    };
    for name in ["sleep_part", "pipe_part"] {
        let share = 100.0 * width(name) / all;
        let expected = 100.0 * p.function(name).inclusive as f64 / p.totals.attributed as f64;
        eprintln!("  {name}: {share:.2} % of the SVG's width, {expected:.2} % of the time");
        assert!(
            (share - expected).abs() <= 0.2,
            "{name} is {share:.2} % of the SVG's width, {expected:.2} % of the time: {frames:#?}"
        );
    }
    // The frame under the pointer is pipe_part's under `[off-cpu: blocked]`
    // or, when wide enough to draw, its frame under `[off-cpu: runnable]`.
    let under = |mark: &str| -> u64 {
        stacks
            .iter()
            .filter(|(frames, _)| frames[0] == mark && frames.iter().any(|f| f == "pipe_part"))
            .map(|(_, ns)| ns)
            .sum()
    };
    let parts = [under("[off-cpu: blocked]"), under("[off-cpu: runnable]")];
    assert_eq!(parts[0] + parts[1], p.function("pipe_part").inclusive);
    let details = seen["details"].as_str().unwrap_or_default();
    let ns = details
        .strip_prefix("Function: pipe_part (")
        .and_then(|rest| rest.split_once(" ns, "))
        .and_then(|(n, _)| n.replace(',', "").parse::<u64>().ok());
    assert!(
        ns.is_some_and(|ns| parts.contains(&ns)),
        "the details line over pipe_part: {details:?}, but its waits are {parts:?} ns \
         (blocked, runnable)"
    );
}

/// The threads of a session, from GetView (`profctl report --threads`
/// shows the same rows): tid → (name, count, nanoseconds not known).
pub(crate) fn threads(h: &Harness, id: u64) -> BTreeMap<u32, (String, u64, u64)> {
    use profd_common::api::{self, get_view_request::View, profiler_client::ProfilerClient};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let reply = rt.block_on(async {
        let channel = profctl::requests::connect::unix_channel(h.daemon.socket(), None)
            .await
            .expect("connect to profd");
        ProfilerClient::new(channel)
            .get_view(api::GetViewRequest {
                session_id: id,
                view: Some(View::Threads(api::ThreadsRequest {})),
                ..Default::default()
            })
            .await
            .expect("GetView threads")
            .into_inner()
    });
    reply
        .threads
        .into_iter()
        .map(|t| (t.tid, (t.name, t.samples, t.unknown_ns)))
        .collect()
}

/// Per thread, on-CPU plus off-CPU time is the time the thread was seen:
/// three threads (a lock holder, and two waiters created as main begins
/// and killed by the process's exit) each show, in wall mode, their
/// lifetime within [`THREAD_TOLERANCE`]: the main thread's is the
/// session's (`run` starts it before the exec), the waiters' the time from
/// main to the exit. In off-cpu mode the session's on-CPU and off-CPU times
/// add up to the three lifetimes.
#[test]
fn every_thread_s_time_is_its_lifetime() {
    let h = Harness::start();
    let (p, v) = run(&h, "wall", &[], &["mutex", "2"]);
    let rows = threads(&h, p.session_id);
    eprintln!("  threads (tid → name, ns, unknown ns): {rows:?}");
    assert_eq!(rows.len(), 3, "a holder and two waiters: {rows:?}");
    for (tid, (name, ns, _)) in &rows {
        // The main thread lived the session, from before its exec; the
        // waiters from just after main began.
        let lifetime_s = if *tid == p.pid {
            p.duration_s
        } else {
            printed(&v, "lifetime_s", &p)
        };
        assert_near(
            &format!("wall time of thread {tid} ({name})"),
            *ns as f64,
            lifetime_s * 1e9,
            THREAD_TOLERANCE,
            &p,
        );
    }
    assert_eq!(
        rows.values().map(|(_, ns, _)| ns).sum::<u64>(),
        p.totals.attributed
    );

    let (p, v) = run(&h, "off-cpu", &[], &["mutex", "2"]);
    let t = p.totals.time.expect("checked");
    assert_near(
        "on_cpu_ns + off_cpu_ns of the three threads",
        (t.on_cpu_ns + t.off_cpu_ns) as f64,
        (p.duration_s + 2.0 * printed(&v, "lifetime_s", &p)) * 1e9,
        THREAD_TOLERANCE,
        &p,
    );
}
