//! End-to-end tests of a session's life and figures: the time split of C
//! workloads known by construction (see `tests/workloads/`), recursion,
//! `attach`, `run`, `stop`, `sessions`, a view, Ctrl-C, the table format,
//! the errors of bad requests and the private daemon. Real kernel, real
//! `profd` and `profctl`; they need root and perf events and fail (never
//! skip) without them.

use std::time::{Duration, Instant};

use profd_e2e::{
    assert_one_line_error, bin, build_workload, max_sample_rate, path_str, require_root_and_perf,
    serial, unique_dir, words, Daemon, Harness, Measure::Exclusive, Measure::Inclusive, Profile,
    Workload, PCT_TOLERANCE,
};

/// Long enough for any test: workloads are killed when the test ends.
const LONG: f64 = 60.0;

fn attach_json(daemon: &Daemon, target: &Workload, duration: &str) -> Profile {
    attach_measured(daemon, target, duration).0
}

/// Attaches for `duration` seconds and returns the profile and the number of
/// samples the target's CPU time calls for: the CPU time it used while
/// profctl ran, scaled to the session's share of that wall time, × frequency.
fn attach_measured(daemon: &Daemon, target: &Workload, duration: &str) -> (Profile, f64) {
    let pid = target.pid_arg();
    let (cpu_before, wall_before) = (target.cpu_time(), Instant::now());
    let out = daemon.profctl(&["attach", &pid, "--duration", duration, "--format", "json"]);
    let (cpu, wall) = (target.cpu_time() - cpu_before, wall_before.elapsed());
    let profile = Profile::parse(&out);
    eprintln!("{}", profile.table());
    assert_eq!(profile.pid, target.pid(), "pid:\n{}", profile.table());
    let session_share = (profile.duration_s / wall.as_secs_f64()).min(1.0);
    let expected = cpu.as_secs_f64() * session_share * f64::from(profile.frequency_hz);
    eprintln!(
        "  target used {:.3} s of CPU in {:.3} s ({:.0} % of a CPU); session {:.3} s \
         → about {expected:.0} samples at {} Hz",
        cpu.as_secs_f64(),
        wall.as_secs_f64(),
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
        profile.duration_s,
        profile.frequency_hz
    );
    (profile, expected)
}

/// Asserts that `attributed` matches the target's CPU time over the session
/// (each sample stands for 1/frequency s of CPU) within 25 %, that a
/// single-threaded target got at most one CPU's worth (duration × frequency),
/// and that there are enough samples for the percentage checks.
fn assert_samples_match_cpu_time(profile: &Profile, expected: f64) {
    let actual = profile.totals.attributed as f64;
    let one_cpu = profile.duration_s * f64::from(profile.frequency_hz);
    eprintln!("  attributed {actual}: expected {expected:.0} from CPU time, at most {one_cpu:.0}");
    assert!(
        actual >= 300.0,
        "only {actual} samples: too few to check percentages to ±3 points \
         (the target got little CPU; is the machine overloaded?):\n{}",
        profile.table()
    );
    assert!(
        (expected * 0.75..=expected * 1.25).contains(&actual),
        "attributed {actual}, but the target's CPU time calls for about {expected:.0}:\n{}",
        profile.table()
    );
    assert!(
        actual <= one_cpu * 1.05,
        "attributed {actual} exceeds one CPU's samples over {} s at {} Hz:\n{}",
        profile.duration_s,
        profile.frequency_hz,
        profile.table()
    );
}

/// split: leaf_a runs N iterations and mid → leaf_b 3N per round, so leaf_a has
/// a quarter of the samples and leaf_b (under mid) three quarters; every sample
/// is under work and main.
#[test]
fn split_percentages_match_construction() {
    let h = Harness::start();
    let target = Workload::start("split", LONG);
    let (p, expected) = attach_measured(&h.daemon, &target, "3");

    assert_eq!(p.state, "duration_elapsed", "{}", p.table());
    assert_eq!(p.comm, "split", "{}", p.table());
    assert_eq!(p.frequency_hz, 999, "default frequency:\n{}", p.table());
    assert!(
        p.duration_s >= 2.99,
        "duration_s {} for --duration 3: ended early:\n{}",
        p.duration_s,
        p.table()
    );
    assert_samples_match_cpu_time(&p, expected);

    p.assert_pct("leaf_a", Exclusive, 25.0);
    p.assert_pct("leaf_a", Inclusive, 25.0);
    p.assert_pct("leaf_b", Exclusive, 75.0);
    p.assert_pct("leaf_b", Inclusive, 75.0);
    p.assert_pct("mid", Inclusive, 75.0);
    p.assert_pct("mid", Exclusive, 0.0);
    p.assert_pct("work", Inclusive, 100.0);
    p.assert_pct("work", Exclusive, 0.0);
    p.assert_pct("main", Inclusive, 100.0);
}

/// recurse: rec is on the stack up to 5 times in every sample; inclusive counts
/// it once per sample, and all its levels are one function.
#[test]
fn recursion_is_counted_once_per_sample() {
    let h = Harness::start();
    let target = Workload::start("recurse", LONG);
    let (p, expected) = attach_measured(&h.daemon, &target, "3");

    assert_eq!(p.state, "duration_elapsed", "{}", p.table());
    assert_samples_match_cpu_time(&p, expected);
    let rec = p.function("rec");
    assert!(
        rec.inclusive <= p.totals.attributed,
        "rec inclusive {} > attributed {}:\n{}",
        rec.inclusive,
        p.totals.attributed,
        p.table()
    );
    p.assert_pct_between("rec", Inclusive, 97.0, 100.0);
    p.assert_pct_between("rec", Exclusive, 97.0, 100.0);
    p.assert_pct("main", Inclusive, 100.0);
    // check_invariants (in parse) has checked every row's inclusive ≤ attributed.
}

/// mutual: ping and pong call each other, each up to 4 times on one stack,
/// and every sample has both on it; inclusive counts each once per sample,
/// and their exclusive samples split 25/75 as constructed.
#[test]
fn mutual_recursion_is_counted_once_per_sample_for_each_function() {
    let h = Harness::start();
    let target = Workload::start("mutual", LONG);
    let (p, expected) = attach_measured(&h.daemon, &target, "3");

    assert_eq!(p.state, "duration_elapsed", "{}", p.table());
    assert_samples_match_cpu_time(&p, expected);
    for name in ["ping", "pong"] {
        let f = p.function(name);
        assert!(
            f.inclusive <= p.totals.attributed,
            "{name} inclusive {} > attributed {}:\n{}",
            f.inclusive,
            p.totals.attributed,
            p.table()
        );
        p.assert_pct_between(name, Inclusive, 97.0, 100.0);
    }
    // Of the samples in ping or pong themselves (kernel frames on top of
    // them, more of them on a loaded machine, take the rest).
    let (ping, pong) = (p.function("ping").exclusive, p.function("pong").exclusive);
    let share = 100.0 * ping as f64 / (ping + pong) as f64;
    eprintln!("  ping's share of the exclusive samples of ping and pong: {share:.2} %");
    assert!(
        (share - 25.0).abs() <= PCT_TOLERANCE,
        "ping has {share:.2} % of ping's and pong's exclusive samples, expected 25 ± {PCT_TOLERANCE}:\n{}",
        p.table()
    );
    p.assert_pct("main", Inclusive, 100.0);
}

/// Whether the kernel lists a hardware PMU with a CPU cycle event in sysfs
/// (x86 `cpu/events/cpu-cycles`, Arm `armv8_pmuv3_0/events/cpu_cycles`,
/// hybrid `cpu_core/...`): the machine's own answer, not profd's probe.
fn sysfs_lists_a_cycle_counter() -> bool {
    let Ok(pmus) = std::fs::read_dir("/sys/bus/event_source/devices") else {
        return false;
    };
    pmus.flatten().any(|pmu| {
        ["cpu-cycles", "cpu_cycles", "cycles"]
            .iter()
            .any(|event| pmu.path().join("events").join(event).exists())
    })
}

/// `--event cycles`: where the machine has no cycle counter (as here: a VM
/// without a PMU) the daemon says at start that cycles sessions use
/// cpu-clock, `profctl info` says the PMU is not available, and the session
/// samples the workload with cpu-clock and says so; where it has one, all
/// three say cycles. Either way the split is measured.
#[test]
fn cycles_sessions_use_the_counter_the_machine_has_and_say_which() {
    let h = Harness::start();
    let pmu = sysfs_lists_a_cycle_counter();
    let info = h.daemon.profctl(&["info"]);
    info.assert_success();
    let pmu_line = info
        .stdout
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("pmu:"))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no pmu line in `profctl info`:\n{}", info.stdout));
    let log = h.daemon.log();
    let fallback_note = "no hardware PMU: sessions asking for cycles use cpu-clock";
    eprintln!("  sysfs lists a cycle counter: {pmu}; profctl info: pmu {pmu_line}");
    if pmu {
        assert_eq!(pmu_line, "available (cycles can be sampled)");
        assert!(!log.contains(fallback_note), "{log}");
    } else {
        assert_eq!(pmu_line, "not available (cycles falls back to cpu-clock)");
        assert!(
            log.contains(fallback_note),
            "the daemon's log does not say cycles fall back:\n{log}"
        );
    }

    let target = Workload::start("split", LONG);
    let pid = target.pid_arg();
    let out = h.daemon.profctl(&[
        "attach",
        &pid,
        "--event",
        "cycles",
        "--duration",
        "3",
        "--format",
        "json",
    ]);
    let p = Profile::parse(&out);
    eprintln!("{}", p.table());
    let used = if pmu { "cycles" } else { "cpu-clock" };
    assert_eq!(p.event, used, "the session's event:\n{}", p.table());
    assert!(
        p.totals.attributed >= 300,
        "too few samples to check the split:\n{}",
        p.table()
    );
    p.assert_pct("leaf_a", Inclusive, 25.0);
    p.assert_pct("leaf_b", Inclusive, 75.0);
}

/// A second busy process during a session on the system-wide rings: its
/// samples count as discarded, at least its CPU time's worth, and none of
/// its functions reach the target's profile; the target's samples are its
/// own CPU time's worth.
#[test]
fn other_process_samples_are_discarded() {
    let h = Harness::start();
    let other = Workload::start("spin_other", LONG);
    let target = Workload::start("split", LONG);
    let pid = target.pid_arg();
    let (other_before, target_before, wall_before) =
        (other.cpu_time(), target.cpu_time(), Instant::now());
    let out = h.daemon.profctl(&[
        "attach",
        &pid,
        "--duration",
        "3",
        "--format",
        "json",
        "--unwind",
        "fp",
    ]);
    let (other_cpu, target_cpu, wall) = (
        other.cpu_time() - other_before,
        target.cpu_time() - target_before,
        wall_before.elapsed(),
    );
    let p = Profile::parse(&out);
    eprintln!("{}", p.table());
    assert_eq!(p.scope, "system-wide", "{}", p.table());

    // Each sample stands for 1/frequency s of a CPU; the CPU times are
    // scaled to the session's share of the wall time measured around it.
    let share = (p.duration_s / wall.as_secs_f64()).min(1.0);
    let samples_of = |cpu: Duration| cpu.as_secs_f64() * share * f64::from(p.frequency_hz);
    let other_expected = samples_of(other_cpu);
    eprintln!(
        "  discarded {}: spin_other (pid {}) used {:.3} s of CPU in {:.3} s → about \
         {other_expected:.0} samples",
        p.totals.discarded,
        other.pid(),
        other_cpu.as_secs_f64(),
        wall.as_secs_f64()
    );
    assert!(
        other_expected >= 300.0,
        "spin_other got only {:.3} s of CPU: too little to compare (is the machine \
         overloaded?)",
        other_cpu.as_secs_f64()
    );
    // Anything else that ran (the daemon, idle CPUs) is discarded too:
    // spin_other's share is a lower bound.
    assert!(
        p.totals.discarded as f64 >= other_expected * 0.75,
        "discarded {}, but spin_other's CPU time alone calls for about \
         {other_expected:.0}:\n{}",
        p.totals.discarded,
        p.table()
    );
    assert_samples_match_cpu_time(&p, samples_of(target_cpu));
    assert!(
        p.rows("other_process_spin").is_empty(),
        "the other process's function is in the target's profile:\n{}",
        p.table()
    );
    assert!(
        !p.functions
            .iter()
            .any(|row| row.module.ends_with("spin_other")),
        "a function of the spin_other binary is in the target's profile:\n{}",
        p.table()
    );
    p.function("leaf_b");
}

/// `profctl run` profiles a command it spawns until it exits.
#[test]
fn run_ends_with_exited_state() {
    let h = Harness::start();
    let split = build_workload("split");
    let out = h
        .daemon
        .profctl(&["run", "--format", "json", "--", path_str(&split), "1.5"]);
    let p = Profile::parse_run(&out);
    eprintln!("{}", p.table());
    assert_eq!(p.state, "exited", "{}", p.table());
    assert_eq!(p.comm, "split", "{}", p.table());
    assert!(!p.functions.is_empty(), "no functions:\n{}", p.table());
    assert!(
        p.totals.attributed > 0,
        "no attributed samples:\n{}",
        p.table()
    );
    p.function("leaf_a");
    p.function("leaf_b");
}

/// `profctl run` holds the command until its session is attached: when the
/// command's first line runs, `profctl sessions` already lists a running
/// session on it under the command's name, and the hold leaves nothing in
/// its environment. A command that cannot run gets no session: profctl
/// says why and exits as a shell would, 127 when it is not found, 126 when
/// it may not be executed; a command that fails gives profctl its status.
#[test]
fn run_attaches_before_the_command_starts() {
    let h = Harness::start();
    let out = unique_dir("run-hold").join("first-line");
    let script = r#"
        "$0" --socket "$1" sessions > "$2"
        echo "self $$" >> "$2"
        echo "hold $(env | grep -c PROFCTL_RUN_HOLD_FD)" >> "$2""#;
    let profctl = bin("profctl");
    let run = h.daemon.profctl(&[
        "run",
        "--format",
        "json",
        "--",
        "sh",
        "-c",
        script,
        path_str(&profctl),
        path_str(h.daemon.socket()),
        path_str(&out),
    ]);
    assert!(run.status.success(), "{}", run.describe());
    let seen = std::fs::read_to_string(&out).expect("the command ran");
    let pid = seen
        .lines()
        .find_map(|l| l.strip_prefix("self "))
        .expect("the command's pid");
    let session = seen
        .lines()
        .take_while(|l| !l.starts_with("self "))
        .map(words)
        .find(|w| w.get(1) == Some(&pid))
        .unwrap_or_else(|| panic!("no session on {pid} when the command began:\n{seen}"));
    assert_eq!(session.get(2..4), Some(&["sh", "running"][..]), "{seen}");
    assert!(seen.contains("hold 0"), "{seen}");
    assert_eq!(Profile::parse_run(&run).comm, "sh");

    let sessions = || h.daemon.profctl(&["sessions"]).stdout.lines().count();
    let before = sessions();
    let not_executable = unique_dir("run-noexec").join("script");
    std::fs::write(&not_executable, "#!/bin/sh\nexit 0\n").expect("write a script");
    for (command, code, why) in [
        ("/nonexistent/command", 127, "No such file or directory"),
        ("no-such-command-in-path", 127, "No such file or directory"),
        (path_str(&not_executable), 126, "Permission denied"),
    ] {
        let out = h.daemon.profctl(&["run", "--", command]);
        assert_eq!(out.status.code(), Some(code), "{}", out.describe());
        assert!(
            out.stderr.contains(&format!("cannot run {command}: {why}"))
                && !out.stderr.contains("exited with status"),
            "{}",
            out.describe()
        );
    }
    assert_eq!(
        sessions(),
        before,
        "a command that could not run left a session"
    );
    // A command that runs and fails: profctl exits with its status.
    let failing = h.daemon.profctl(&["run", "--", "sh", "-c", "exit 3"]);
    assert_eq!(failing.status.code(), Some(3), "{}", failing.describe());
}

/// `run`'s command keeps stdout: profctl's JSON or tables go to stderr,
/// and into a pipe only the final one (no live blocks). `attach` into a
/// pipe writes its final table alone too.
#[test]
fn run_leaves_stdout_to_its_command_and_pipes_get_the_final_table() {
    let h = Harness::start();
    let split = build_workload("split");
    let script = format!("printf 'data\\n'; exec {} 2.5", path_str(&split));
    let json = h
        .daemon
        .profctl(&["run", "--format", "json", "--", "sh", "-c", &script]);
    assert_eq!(json.stdout, "data\n", "{}", json.describe());
    let p = Profile::parse_run(&json);
    assert_eq!(p.comm, "split", "{}", p.table());
    p.assert_pct("leaf_b", Exclusive, 75.0);
    let tables = |text: &str| text.matches(" INCL%").count();
    let table = h
        .daemon
        .profctl(&["run", "--interval", "0.2", "--", "sh", "-c", &script]);
    table.assert_success();
    assert_eq!(table.stdout, "data\n", "{}", table.describe());
    assert_eq!(tables(&table.stderr), 1, "{}", table.describe());
    assert!(
        !table.stderr.contains("(no samples)"),
        "{}",
        table.describe()
    );
    let target = Workload::start("split", LONG);
    let attach = h.daemon.profctl(&[
        "attach",
        &target.pid_arg(),
        "--duration",
        "2",
        "--interval",
        "0.2",
    ]);
    attach.assert_success();
    assert_eq!(tables(&attach.stdout), 1, "{}", attach.describe());
    assert!(attach.stdout.contains("leaf_b"), "{}", attach.describe());
}

/// Attaching for longer than the target lives: the session ends when the
/// target exits, before its duration.
#[test]
fn attach_ends_when_target_exits() {
    let h = Harness::start();
    let mut target = Workload::start("split", 1.5);
    let p = attach_json(&h.daemon, &target, "20");
    target.wait(Duration::from_secs(5));
    assert_eq!(p.state, "exited", "{}", p.table());
    assert!(!p.functions.is_empty(), "no functions:\n{}", p.table());
    assert!(
        p.duration_s < 20.0,
        "session lasted its whole --duration ({} s) for a target living 1.5 s:\n{}",
        p.duration_s,
        p.table()
    );
}

/// A pid no process has: counting down from the kernel's pid_max.
fn unused_pid() -> u32 {
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(32768);
    (2..pid_max)
        .rev()
        .find(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
        .expect("a free pid")
}

#[test]
fn attach_to_missing_pid_is_not_found() {
    let mut h = Harness::start();
    let pid = unused_pid().to_string();
    let out = h
        .daemon
        .profctl(&["attach", &pid, "--duration", "1", "--format", "json"]);
    assert_one_line_error(&out, &["not found", &pid]);
    h.daemon.assert_alive();
}

#[test]
fn frequency_zero_is_invalid() {
    let mut h = Harness::start();
    let max = max_sample_rate().to_string();
    let me = std::process::id().to_string();
    let out = h.daemon.profctl(&[
        "attach",
        &me,
        "--freq",
        "0",
        "--duration",
        "1",
        "--format",
        "json",
    ]);
    assert_one_line_error(&out, &["invalid argument", &max]);
    h.daemon.assert_alive();
}

#[test]
fn frequency_above_kernel_max_is_a_named_limit() {
    let mut h = Harness::start();
    let max = max_sample_rate();
    let too_high = (max + 1).to_string();
    let me = std::process::id().to_string();
    let out = h.daemon.profctl(&[
        "attach",
        &me,
        "--freq",
        &too_high,
        "--duration",
        "1",
        "--format",
        "json",
    ]);
    assert_one_line_error(
        &out,
        &[
            "resource exhausted",
            "perf_event_max_sample_rate",
            &max.to_string(),
        ],
    );
    h.daemon.assert_alive();
}

#[test]
fn stopping_unknown_session_is_not_found() {
    let mut h = Harness::start();
    let out = h.daemon.profctl(&["stop", "999999"]);
    assert_one_line_error(&out, &["not found"]);
    h.daemon.assert_alive();
}

/// The line of `profctl sessions` that lists a session of `pid`, if any.
fn sessions_line(daemon: &Daemon, pid: u32) -> Option<String> {
    let out = daemon.profctl(&["sessions"]);
    out.assert_success();
    let pid = pid.to_string();
    out.stdout
        .lines()
        .find(|line| words(line).contains(&pid.as_str()))
        .map(str::to_string)
}

/// Polls `profctl sessions` until it lists a session of `pid`.
fn wait_for_session(daemon: &Daemon, pid: u32) -> String {
    profd_e2e::wait_until(
        &format!("`profctl sessions` listing pid {pid}"),
        Duration::from_secs(10),
        || sessions_line(daemon, pid),
    )
}

#[test]
fn sessions_lists_an_ended_session() {
    let h = Harness::start();
    let target = Workload::start("split", LONG);
    let p = attach_json(&h.daemon, &target, "1");
    let out = h.daemon.profctl(&["sessions"]);
    out.assert_success();
    eprintln!("{}", out.stdout);
    let (id, pid) = (p.session_id.to_string(), p.pid.to_string());
    assert!(
        out.stdout.lines().any(|line| {
            let w = words(line);
            w.contains(&id.as_str()) && w.contains(&pid.as_str())
        }),
        "no line of `profctl sessions` has session {id} and pid {pid}:\n{}",
        out.describe()
    );
}

/// `profctl stop <ID>` of a running session ends it as stopped; the attached
/// client then prints the final profile.
#[test]
fn stop_ends_a_running_session() {
    let h = Harness::start();
    let target = Workload::start("split", LONG);
    let pid = target.pid_arg();
    let attach = h
        .daemon
        .spawn_profctl(&["attach", &pid, "--duration", "30", "--format", "json"]);
    let stopped = h.daemon.wait_for_samples(target.pid(), 100).to_string();
    h.daemon.profctl(&["stop", &stopped]).assert_success();
    let out = attach.wait(Duration::from_secs(20));
    let p = Profile::parse(&out);
    eprintln!("{}", p.table());
    assert_eq!(p.session_id.to_string(), stopped, "{}", p.table());
    assert_eq!(p.state, "stopped", "{}", p.table());
    assert!(p.duration_s < 30.0, "{}", p.table());
    assert!(p.totals.attributed > 0, "{}", p.table());
}

/// A view counts what was sampled up to the moment it is asked for, not what
/// the rings' last timed drain delivered: with the timed drain held off (an
/// hour apart), an export of the session already holds the samples of the
/// target's CPU time just before the question, which only the drain the
/// export itself asks for can have delivered.
#[test]
fn a_view_counts_samples_up_to_the_question() {
    let h = Harness::start_with(&["--drain-interval", "3600"]);
    let target = Workload::start("split", LONG);
    let pid = target.pid_arg();
    // A watch that asks for nothing during the test (its first view is at
    // attach, its next one 10 s later), on the rings shared by frame-pointer
    // sessions, whose watermark a second of one target's samples is far
    // from (stack copies fill theirs in a few dozen samples).
    let _attach = h.daemon.spawn_profctl(&[
        "attach",
        &pid,
        "--unwind",
        "fp",
        "--duration",
        "30",
        "--interval",
        "10",
        "--format",
        "json",
    ]);
    let line = wait_for_session(&h.daemon, target.pid());
    let cpu_before = target.cpu_time();
    std::thread::sleep(Duration::from_millis(300));
    let cpu = (target.cpu_time() - cpu_before).as_secs_f64();
    let out = words(&line)
        .into_iter()
        .filter(|w| *w != pid && w.chars().all(|c| c.is_ascii_digit()))
        .map(|id| h.daemon.profctl(&["export", id, "--format", "json"]))
        .find(|out| out.status.success())
        .unwrap_or_else(|| panic!("`profctl export` accepted no number of {line:?}"));
    let p = Profile::parse(&out);
    eprintln!("{}", p.table());
    assert_eq!(p.pid, target.pid(), "{}", p.table());
    // At least the samples of the CPU time the target had in the 0.3 s
    // before the question (its session began earlier).
    let expected = cpu * f64::from(p.frequency_hz);
    assert!(
        p.totals.attributed as f64 >= expected * 0.8,
        "{} samples {} s into the session, but {cpu:.3} s of CPU just before \
         the question calls for {expected:.0}:\n{}",
        p.totals.attributed,
        p.duration_s,
        p.table()
    );
}

/// Ctrl-C on `profctl attach` stops the session and prints the final profile.
#[test]
fn interrupt_stops_the_session_and_prints_the_profile() {
    let h = Harness::start();
    let target = Workload::start("split", LONG);
    let pid = target.pid_arg();
    let attach = h
        .daemon
        .spawn_profctl(&["attach", &pid, "--duration", "30", "--format", "json"]);
    h.daemon.wait_for_samples(target.pid(), 200);
    attach.interrupt();
    let out = attach.wait(Duration::from_secs(20));
    let p: Profile = serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("no profile JSON after Ctrl-C ({e}):\n{}", out.describe()));
    p.check_invariants();
    eprintln!("{}", p.table());
    assert_eq!(p.state, "stopped", "{}", p.table());
    assert!(p.totals.attributed > 0, "{}", p.table());
    p.function("leaf_b");
}

/// The default table format ends with a table of INCL/EXCL columns that names
/// the workload's functions.
#[test]
fn table_format_prints_a_final_table() {
    let h = Harness::start();
    let target = Workload::start("split", LONG);
    let pid = target.pid_arg();
    let out = h
        .daemon
        .profctl(&["attach", &pid, "--duration", "2", "--format", "table"]);
    out.assert_success();
    eprintln!("{}", out.stdout);
    let last = out
        .stdout
        .rfind("INCL")
        .unwrap_or_else(|| panic!("no INCL header:\n{}", out.describe()));
    let table = &out.stdout[last..];
    for needle in ["EXCL", "leaf_a", "leaf_b", "mid", "work"] {
        assert!(
            table.contains(needle),
            "the final table lacks {needle:?}:\n{}",
            out.describe()
        );
    }
}

/// With nothing listening on the socket, profctl (as root) runs a private
/// daemon for the command.
#[test]
fn profctl_starts_a_private_daemon() {
    let _serial = serial();
    require_root_and_perf();
    let socket = unique_dir("private").join("profd.sock");
    assert!(!socket.exists());
    let split = build_workload("split");
    let profctl = bin("profctl");
    let out = profd_e2e::Cmd::run(
        path_str(&profctl),
        &[
            "--socket",
            path_str(&socket),
            "run",
            "--duration",
            "3",
            "--freq",
            "2999",
            "--format",
            "json",
            "--",
            path_str(&split),
            "10",
        ],
        Duration::from_secs(60),
    );
    eprintln!("  stderr: {}", out.stderr.trim_end());
    let p = Profile::parse_run(&out);
    let said = format!(
        "profctl: no profd at {}; started a private one for this command",
        socket.display()
    );
    assert!(
        out.stderr.lines().any(|l| l == said),
        "profctl did not say that it started a private daemon at the socket:\n{}",
        out.describe()
    );
    eprintln!("{}", p.table());
    assert_eq!(p.state, "duration_elapsed", "{}", p.table());
    assert_eq!(p.comm, "split", "{}", p.table());
    assert!(
        p.totals.attributed >= 300,
        "too few samples to check the split:\n{}",
        p.table()
    );
    p.assert_pct("leaf_a", Exclusive, 25.0);
    p.assert_pct("leaf_b", Exclusive, 75.0);
    p.assert_pct("mid", Inclusive, 75.0);
    p.assert_pct("work", Inclusive, 100.0);
}

/// With nothing listening on the socket, only the commands that profile
/// start a private daemon: the others say that no daemon runs there and
/// what to do, and a command line that is wrong starts nothing at all.
#[test]
fn only_profiling_commands_start_a_private_daemon() {
    let dir = unique_dir("no-daemon");
    let socket = dir.join("profd.sock");
    let profctl = bin("profctl");
    let profctl = |args: &[&str]| {
        let mut all = vec!["--socket", path_str(&socket)];
        all.extend_from_slice(args);
        profd_e2e::Cmd::run(path_str(&profctl), &all, Duration::from_secs(60))
    };
    let started = "started a private one";
    for args in [
        &["sessions"][..],
        &["query"],
        &["info"],
        &["health"],
        &["stop", "1"],
        &["export", "1", "--format", "folded"],
        &["report", "1"],
    ] {
        let out = profctl(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", out.describe());
        assert_one_line_error(&out, &[]);
        assert_eq!(
            out.stderr.trim_end(),
            format!(
                "profctl: no daemon is running at {}; start the service (`systemctl start \
                 profd`); only the commands that profile (attach, run, histogram) start a \
                 private daemon of their own",
                socket.display()
            ),
            "{args:?}"
        );
    }
    // An unknown option before the command is a usage error (clap's, exit
    // 2): neither a daemon nor the command is started.
    let touched = dir.join("touched");
    for bad in ["--bogus", "--frequency"] {
        let out = profctl(&["run", bad, "99", "--", "touch", path_str(&touched)]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", out.describe());
        assert!(
            out.stderr.contains(&format!("unexpected argument '{bad}'")),
            "{}",
            out.describe()
        );
        assert!(!out.stderr.contains(started), "{}", out.describe());
        assert!(!touched.exists(), "run {bad} ran its command");
    }
    // A command that cannot run: a shell's status, and nothing started.
    for (command, code) in [("profd-no-such-command", 127), ("/etc/passwd", 126)] {
        let out = profctl(&["run", "--", command]);
        assert_eq!(out.status.code(), Some(code), "{}", out.describe());
        assert!(!out.stderr.contains(started), "{}", out.describe());
        assert!(out.stderr.contains(&format!("cannot run {command}")));
    }
    // After the options, the command's own options are its own.
    let out = profctl(&["run", "--duration", "5", "touch", "-c", path_str(&touched)]);
    out.assert_success();
    assert!(out.stderr.contains(started), "{}", out.describe());
    assert!(!touched.exists(), "touch -c created its file");
}

/// The connection under a live `attach` is cut (profctl talks through a
/// relay): profctl says so, resumes the Watch stream after the last update
/// it applied, the daemon answers with what changed since (not the whole
/// profile again), and the final profile equals the session's export
/// exactly: nothing lost, nothing counted twice.
#[test]
fn a_broken_stream_resumes_where_it_was() {
    let h = Harness::start();
    let target = Workload::start("split", LONG);
    let relay = profd_e2e::proxy::Relay::start(h.daemon.socket());
    let pid = target.pid_arg();
    let attach = profd_e2e::Cmd::spawn(
        path_str(&profd_e2e::bin("profctl")),
        &[
            "--socket",
            path_str(relay.path()),
            "attach",
            &pid,
            "--duration",
            "600",
            "--interval",
            "0.2",
            "--format",
            "json",
        ],
    );
    let id = h.daemon.wait_for_samples(target.pid(), 500);
    assert!(relay.cut() >= 1, "no connection went through the relay");
    let resumed = profd_e2e::wait_until("profctl resuming", Duration::from_secs(60), || {
        let (_, stderr) = attach.output_so_far();
        stderr
            .contains(&format!("resumed session {id}"))
            .then_some(stderr)
    });
    h.daemon.wait_for_samples(target.pid(), 1500);
    h.daemon
        .profctl(&["stop", &id.to_string()])
        .assert_success();
    let out = attach.wait(Duration::from_secs(60));
    out.assert_success();
    eprintln!("{}", out.stderr);
    assert!(
        resumed.contains(&format!("the stream of session {id} broke")),
        "{}",
        out.describe()
    );
    assert!(
        !out.stderr.contains("sent whole again"),
        "{}",
        out.describe()
    );
    let live = Profile::parse(&out);
    let export = h
        .daemon
        .profctl(&["export", &id.to_string(), "--format", "json"]);
    let saved = Profile::parse(&export);
    assert_eq!(
        live.totals.attributed,
        saved.totals.attributed,
        "{}",
        live.table()
    );
    assert_eq!(
        live.figures(),
        saved.figures(),
        "{}\n{}",
        live.table(),
        saved.table()
    );
}
