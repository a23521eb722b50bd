//! End-to-end tests of off-CPU and wall-clock profiling (`--mode off-cpu`,
//! `--mode wall`): real kernel, real `profd` and `profctl`, and the
//! `offcpu` workload (tests/workloads/offcpu.c), whose threads wait for
//! known lengths of time in known functions and print the wall-clock time
//! each part took. Every count of these profiles is nanoseconds; shares are
//! checked against the workload's own clock, lengths against the session's
//! duration and the kernel's per-thread CPU time (`/proc/PID/task/TID/schedstat`).

use std::collections::BTreeMap;
use std::process::Command;

use profd_e2e::{build_workload, path_str, Harness, Profile, TimeTotals, Workload};

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
    let p = Profile::parse(&out);
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

/// `actual` lies in `[low, high]`, each widened by `tolerance` (a
/// fraction of it).
fn assert_between(what: &str, actual: f64, low: f64, high: f64, tolerance: f64, p: &Profile) {
    let (low, high) = (low * (1.0 - tolerance), high * (1.0 + tolerance));
    eprintln!("  {what}: {actual:.0}, expected within [{low:.0}, {high:.0}]");
    assert!(
        (low..=high).contains(&actual),
        "{what} is {actual:.0}, expected within [{low:.0}, {high:.0}]:\n{}",
        p.table()
    );
}

/// Off-cpu accounting against the kernel's own figures, on a thread
/// already running when the session attaches: its on-CPU time (switch to
/// switch) is its CPU time by schedstat over the session, and its off-CPU
/// time the rest of the session's duration.
///
/// Schedstat is read before `profctl attach` starts and after it exits,
/// a span longer than the session by the client's start, the session's
/// setup and its end. The thread's CPU time over the session is then at
/// most the CPU time over that span, and at least that less the span's
/// extra wall time (as if the thread ran all of it). A loaded machine
/// widens the span, never moves the truth out of it.
#[test]
fn off_cpu_time_is_the_session_minus_the_cpu_time() {
    let h = Harness::start();
    let exe = build_workload("offcpu");
    let mut command = Command::new(&exe);
    command.args(["split", &LONG.to_string(), "--ready", "--compute"]);
    let target = Workload::start_command(command, "offcpu");
    let pid = target.pid();
    let span_start = std::time::Instant::now();
    let cpu_before = thread_cpu_ns(pid, pid);
    let out = h.daemon.profctl(&[
        "attach",
        &target.pid_arg(),
        "--mode",
        "off-cpu",
        "--duration",
        "3",
        "--format",
        "json",
    ]);
    let span_cpu_ns = thread_cpu_ns(pid, pid) - cpu_before;
    let span_ns = span_start.elapsed().as_nanos() as f64;
    let p = Profile::parse(&out);
    eprintln!("{}", p.table());
    let t = check_time_profile(&p, "off-cpu");
    let duration_ns = p.duration_s * 1e9;
    let extra_ns = (span_ns - duration_ns).max(0.0);
    let (cpu_low, cpu_high) = ((span_cpu_ns - extra_ns).max(0.0), span_cpu_ns);
    eprintln!(
        "  schedstat: {:.3} s of CPU over {:.3} s around the session's {:.3} s",
        span_cpu_ns / 1e9,
        span_ns / 1e9,
        p.duration_s
    );
    assert!(
        cpu_high >= 0.2 * duration_ns,
        "compute_part spins 5 ms of each ~15 ms round, yet the thread ran only \
         {cpu_high:.0} ns over a span of {span_ns:.0} ns around the session's \
         {duration_ns:.0}"
    );
    assert_between(
        "on_cpu_ns",
        t.on_cpu_ns as f64,
        cpu_low,
        cpu_high,
        2.0 * TIME_TOLERANCE,
        &p,
    );
    assert_between(
        "off_cpu_ns",
        t.off_cpu_ns as f64,
        duration_ns - cpu_high,
        duration_ns - cpu_low,
        TIME_TOLERANCE,
        &p,
    );
    assert_near(
        "on_cpu_ns + off_cpu_ns",
        (t.on_cpu_ns + t.off_cpu_ns) as f64,
        duration_ns,
        TIME_TOLERANCE,
        &p,
    );
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
