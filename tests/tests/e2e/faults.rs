//! End-to-end tests of "nothing lost": ring overflow counted as lost, a
//! target killed with SIGKILL, exec, fork with `--children`, pid reuse and a
//! watcher killed mid-stream. Real kernel, real `profd` and `profctl`.
use std::time::{Duration, Instant};

use profd_e2e::{
    build_workload, path_str, require_root_and_perf, serial, Cmd, Daemon, Harness, Info, Profile,
    Workload,
};

/// `profctl attach PID --duration SECS --format json [extra...]`.
fn attach_args<'a>(pid: &'a str, secs: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["attach", pid, "--duration", secs, "--format", "json"];
    args.extend_from_slice(extra);
    args
}

/// Every attributed sample has one innermost frame: exclusive counts add up.
fn assert_exclusive_adds_up(p: &Profile) {
    let sum: u64 = p.functions.iter().map(|f| f.exclusive).sum();
    assert_eq!(
        sum,
        p.totals.attributed,
        "exclusive counts do not add up to attributed:\n{}",
        p.table()
    );
}

/// The figures of session `id` in `profctl sessions`: its SAMPLES cell,
/// `attributed/discarded/lost`.
fn listed_totals(listing: &str, id: u64) -> (u64, u64, u64) {
    let row = listing
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&id.to_string()))
        .unwrap_or_else(|| panic!("session {id} is not listed:\n{listing}"));
    let cell = row.split_whitespace().last().expect("a SAMPLES cell");
    let n: Vec<u64> = cell
        .split('/')
        .map(|n| {
            n.parse()
                .unwrap_or_else(|_| panic!("SAMPLES {cell:?}:\n{listing}"))
        })
        .collect();
    assert_eq!(n.len(), 3, "SAMPLES {cell:?}:\n{listing}");
    (n[0], n[1], n[2])
}

/// Rings too small for the stack copies lose samples: 16 KiB rings, at
/// 4000 samples a second. A 32 KiB copy never fits: every sample is
/// lost, and no LOST record can report it (the kernel's own count does).
/// An 8 KiB copy fits one at a time: what the daemon did not drain
/// before the next sample is lost. Either way, what the kernel took of
/// `busy`'s CPU time is attributed or lost. The same losses show in the
/// sessions, in `profctl sessions`, in `profctl info` and on /metrics,
/// summed over the two sessions and counted once: the targets exit with
/// their sessions, so nothing is sampled after.
#[test]
fn ring_overflow_is_counted_as_lost() {
    let _serial = serial();
    require_root_and_perf();
    let addr = format!("127.0.0.1:{}", profd_e2e::tls::free_port());
    let daemon = Daemon::start_with(&["--ring-pages", "4", "--metrics", &addr]);
    let busy = build_workload("busy");
    let mut profiles = Vec::new();
    for stack_bytes in ["32768", "8192"] {
        let out = daemon.profctl(&[
            "run",
            "--freq",
            "4000",
            "--unwind",
            "dwarf",
            "--stack-bytes",
            stack_bytes,
            "--format",
            "json",
            "--",
            path_str(&busy),
            "threads",
            "1",
            "1.5",
        ]);
        let p = Profile::parse_run(&out);
        let cpu_s = out.stderr_figure("cpu_s");
        let expected = cpu_s * f64::from(p.frequency_hz);
        let t = p.totals;
        eprintln!(
            "{}\n  {stack_bytes}-byte copies: {cpu_s:.3} s of CPU → {expected:.0} samples at \
             {} Hz; attributed {} + lost {} = {}; unsampled {}",
            p.table(),
            p.frequency_hz,
            t.attributed,
            t.lost,
            t.attributed + t.lost,
            t.unsampled
        );
        assert_eq!((p.scope.as_str(), p.frequency_hz), ("target", 4000));
        assert!(
            ((t.attributed + t.lost) as f64 - expected).abs() <= expected * 0.15,
            "{stack_bytes}-byte copies: attributed + lost = {}, but busy's {cpu_s} s of CPU \
             call for {expected:.0} samples (±15 %):\n{}",
            t.attributed + t.lost,
            p.table()
        );
        if stack_bytes == "32768" {
            assert_eq!(t.attributed, 0, "a sample fit in the ring:\n{}", p.table());
        } else {
            assert!(
                t.lost > 0 && t.attributed > 0,
                "8 KiB copies in a 16 KiB ring:\n{}",
                p.table()
            );
            assert_exclusive_adds_up(&p);
        }
        profiles.push(p);
    }

    let listing = daemon.profctl(&["sessions"]);
    listing.assert_success();
    eprintln!("{}", listing.stdout);
    for p in &profiles {
        let t = p.totals;
        assert_eq!(
            listed_totals(&listing.stdout, p.session_id),
            (t.attributed, t.discarded, t.lost),
            "session {}'s figures in `profctl sessions`:\n{}",
            p.session_id,
            listing.stdout
        );
    }
    let sum = |f: fn(&Profile) -> u64| profiles.iter().map(f).sum::<u64>();
    let lost = sum(|p| p.totals.lost);
    let attributed = sum(|p| p.totals.attributed);
    let info = Info::read(&daemon);
    let metrics = profd_e2e::metrics::scrape(&addr);
    let metric = |name| profd_e2e::metrics::sample(&metrics, name);
    eprintln!(
        "  sessions: {attributed} attributed, {lost} lost; info: {info:?}; metrics: {} \
         attributed, {} lost",
        metric("profd_samples_attributed_total"),
        metric("profd_samples_lost_total")
    );
    assert_eq!(
        (info.attributed, info.discarded, info.lost),
        (attributed, 0, lost),
        "`profctl info`'s samples line is the sum of the sessions'"
    );
    assert_eq!(
        (
            metric("profd_samples_attributed_total"),
            metric("profd_samples_discarded_total"),
            metric("profd_samples_lost_total")
        ),
        (attributed as f64, 0.0, lost as f64),
        "/metrics is the sum of the sessions':\n{metrics}"
    );
}

/// SIGKILL of the target ends the session as exited with its profile, and
/// profctl's Watch stream ends cleanly after the final update.
#[test]
fn killed_target_ends_the_session_with_its_profile() {
    let h = Harness::start();
    let w = Workload::start("split", 30.0);
    let pid = w.pid_arg();
    let attach = h.daemon.spawn_profctl(&attach_args(&pid, "30", &[]));
    std::thread::sleep(Duration::from_millis(1500));
    drop(w); // SIGKILL, then reaped
    let out = attach.wait(Duration::from_secs(20));
    let p = Profile::parse(&out);
    assert_eq!(p.state, "exited", "{}", p.table());
    p.function("leaf_b");
    assert_exclusive_adds_up(&p);
}

/// A target that renames itself while it is profiled (prctl PR_SET_NAME,
/// no exec) shows its new name: the session follows the kernel's COMM
/// record, as for an exec.
#[test]
fn a_renamed_target_shows_its_new_name() {
    let h = Harness::start();
    let exe = build_workload("lifecycle");
    let mut command = std::process::Command::new(&exe);
    command.args(["rename", "renamed-tgt", "30"]);
    let w = Workload::start_command(command, "lifecycle");
    let pid = w.pid_arg();
    let p = Profile::parse(&h.daemon.profctl(&attach_args(&pid, "3", &[])));
    assert_eq!(p.comm, "renamed-tgt", "{}", p.table());
    assert!(p.function("before_exec").exclusive > 0, "{}", p.table());
}

/// Frames after an exec resolve against the new program; the session
/// follows the process, with the new command name.
#[test]
fn exec_resolves_frames_against_the_new_program() {
    let h = Harness::start();
    let other = build_workload("spin_other");
    let exe = build_workload("lifecycle");
    let mut command = std::process::Command::new(&exe);
    command.args(["exec", path_str(&other), "30"]);
    let w = Workload::start_command(command, "lifecycle");
    let pid = w.pid_arg();
    let p = Profile::parse(&h.daemon.profctl(&attach_args(&pid, "3", &[])));
    eprintln!("{}", p.table());
    assert_eq!(p.comm, "spin_other", "the exec was not followed");
    let before = p.function("before_exec");
    let after = p.function("other_process_spin");
    assert_eq!(before.module, "lifecycle");
    assert_eq!(after.module, "spin_other");
    assert!(
        before.exclusive > 0 && after.exclusive > 0,
        "both programs sampled:\n{}",
        p.table()
    );
    assert_exclusive_adds_up(&p);
}

/// A child's samples count in every CPU's ring, whichever ring holds its
/// fork and exit records: children that
/// live less than a drain period, each with two busy threads, are sampled
/// for all of their CPU time (within 10 %: this CPU time is not an exact
/// count of periods on a VM), in frame-pointer and stack-copy sessions
/// (both on the system-wide rings, as every session that follows children).
#[test]
fn short_lived_children_are_sampled_on_every_cpu() {
    let h = Harness::start();
    let kids = build_workload("kids");
    for unwind in ["fp", "dwarf"] {
        for run in 0..2 {
            let out = h.daemon.profctl(&[
                "run",
                "--children",
                "--unwind",
                unwind,
                "--format",
                "json",
                "--",
                path_str(&kids),
                "6",
                "0.15",
            ]);
            let p = Profile::parse_run(&out);
            let cpu_s = out.stderr_figure("children_cpu_s");
            assert_eq!(p.processes.len(), 7, "{:?}", p.processes);
            let children: u64 = p.processes[1..].iter().map(|c| c.samples).sum();
            let expected = cpu_s * f64::from(p.frequency_hz);
            assert!(
                children as f64 >= 0.9 * expected,
                "{unwind} run {run}: children's samples {children}, {expected:.0} expected \
                 for {cpu_s} s of CPU at {} Hz: {:?}",
                p.frequency_hz,
                p.processes
            );
            let sum: u64 = p.processes.iter().map(|c| c.samples).sum();
            assert_eq!(
                sum, p.totals.attributed,
                "{unwind} run {run}: per-process samples add up: {:?}",
                p.processes
            );
            let parent = p.processes[0].pid;
            assert!(
                p.processes[1..]
                    .iter()
                    .all(|c| c.exited && c.ppid == parent),
                "{unwind} run {run}: every child forked by {parent} and seen exiting: {:?}",
                p.processes
            );
        }
    }
}

/// With --children the processes the target forks are profiled too, with
/// samples per process; without it they are discarded.
#[test]
fn children_are_followed_only_when_asked() {
    let h = Harness::start();
    let exe = build_workload("lifecycle");
    let run = |extra: &[&str]| {
        let mut command = std::process::Command::new(&exe);
        command.args(["fork", "2", "1.5"]);
        let w = Workload::start_command(command, "lifecycle");
        let pid = w.pid_arg();
        let p = Profile::parse(&h.daemon.profctl(&attach_args(&pid, "10", extra)));
        eprintln!("{}\nprocesses: {:?}", p.table(), p.processes);
        (p, w.pid())
    };
    let (p, pid) = run(&["--children"]);
    assert_eq!(p.state, "exited", "the session ends when the target exits");
    assert!(p.children);
    assert_eq!(
        p.processes.len(),
        3,
        "target and two children: {:?}",
        p.processes
    );
    assert_eq!(p.processes[0].pid, pid);
    for child in &p.processes[1..] {
        assert_eq!(child.ppid, pid);
        assert!(child.exited, "{child:?}");
        assert!(child.samples > 0, "{child:?}");
    }
    let sum: u64 = p.processes.iter().map(|c| c.samples).sum();
    assert_eq!(sum, p.totals.attributed, "per-process samples add up");
    assert!(p.function("child_spin").exclusive > 0);
    assert_exclusive_adds_up(&p);

    let (p, _) = run(&[]);
    assert!(
        p.rows("child_spin").is_empty(),
        "children profiled without --children:\n{}",
        p.table()
    );
    assert_eq!(p.processes.len(), 1);
}

/// Start `spin_other 30` as a process that gets pid `pid` (through
/// ns_last_pid), or None when another process took it first.
fn spawn_with_pid(pid: u32) -> Option<Workload> {
    let exe = build_workload("spin_other");
    for _ in 0..20 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string())
            .expect("write /proc/sys/kernel/ns_last_pid (needs root)");
        let w = Workload::start_exe(&exe, 30.0);
        if w.pid() == pid {
            return Some(w);
        }
    }
    None
}

/// A process that gets the pid of a session's exited process is never
/// mixed into that session: not as the target, not as a child.
#[test]
fn a_reused_pid_is_never_mixed_into_a_session() {
    let h = Harness::start();
    let w = Workload::start("split", 30.0);
    let pid = w.pid();
    let pid_s = pid.to_string();
    let attach = h.daemon.spawn_profctl(&attach_args(&pid_s, "30", &[]));
    std::thread::sleep(Duration::from_millis(1000));
    drop(w); // SIGKILL, then reaped: the pid is free
    let reused = spawn_with_pid(pid).expect("could not get the same pid again");
    std::thread::sleep(Duration::from_millis(1000));
    let p = Profile::parse(&attach.wait(Duration::from_secs(20)));
    assert_eq!(p.state, "exited");
    assert!(
        p.rows("other_process_spin").is_empty(),
        "the new process with pid {pid} was profiled:\n{}",
        p.table()
    );
    drop(reused);

    // A child of a --children session exits; a new process takes its pid.
    let exe = build_workload("lifecycle");
    let mut command = std::process::Command::new(&exe);
    command.args(["fork", "1", "0.5"]);
    let target = Workload::start_command(command, "lifecycle");
    let tpid = target.pid_arg();
    let attach = h
        .daemon
        .spawn_profctl(&attach_args(&tpid, "4", &["--children"]));
    // The child is forked 1 s after start and lives 0.5 s.
    let child = wait_for_child(target.pid(), Duration::from_secs(5)).expect("the child appears");
    while Path::new(&format!("/proc/{child}")).exists() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let reused = spawn_with_pid(child);
    let p = Profile::parse(&attach.wait(Duration::from_secs(20)));
    eprintln!("{}\nprocesses: {:?}", p.table(), p.processes);
    assert!(reused.is_some(), "could not get pid {child} again");
    assert!(
        p.rows("other_process_spin").is_empty(),
        "the new process with the child's pid {child} was profiled:\n{}",
        p.table()
    );
    assert!(p.processes.iter().any(|c| c.pid == child && c.exited));
}

use std::path::Path;

/// The pid of a child of `parent`, once it has one.
fn wait_for_child(parent: u32, timeout: Duration) -> Option<u32> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        let path = format!("/proc/{parent}/task/{parent}/children");
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse().ok()))
        {
            return Some(pid);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// A watcher killed mid-stream affects neither the daemon nor another
/// watcher: the other profctl gets its whole profile.
#[test]
fn a_killed_watcher_harms_nobody() {
    let mut h = Harness::start();
    let w = Workload::start("split", 30.0);
    let pid = w.pid_arg();
    let victim: Cmd = h.daemon.spawn_profctl(&attach_args(&pid, "3", &[]));
    let survivor = h.daemon.spawn_profctl(&attach_args(&pid, "3", &[]));
    std::thread::sleep(Duration::from_millis(1000));
    victim.kill();
    let p = Profile::parse(&survivor.wait(Duration::from_secs(20)));
    assert_eq!(p.state, "duration_elapsed");
    p.function("leaf_b");
    h.daemon.assert_alive();
    let sessions = h.daemon.profctl(&["sessions"]);
    sessions.assert_success();
    eprintln!("{}", sessions.stdout);
    // Both sessions are listed, of the one target; the survivor's with
    // the figures it printed, the victim's sampled too (its session runs
    // on without a watcher).
    let rows: Vec<Vec<&str>> = sessions
        .stdout
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "two sessions:\n{}", sessions.stdout);
    assert!(
        rows.iter().all(|r| r[1] == pid && r[2] == "split"),
        "both of split (pid {pid}):\n{}",
        sessions.stdout
    );
    let t = p.totals;
    assert_eq!(
        listed_totals(&sessions.stdout, p.session_id),
        (t.attributed, t.discarded, t.lost),
        "the survivor's figures:\n{}",
        sessions.stdout
    );
    let victim = rows
        .iter()
        .find(|r| r[0] != p.session_id.to_string())
        .expect("the victim's session");
    let victim_id: u64 = victim[0].parse().expect("a session id");
    let (attributed, _, _) = listed_totals(&sessions.stdout, victim_id);
    assert!(
        attributed > 0,
        "the victim's session sampled nothing:\n{}",
        sessions.stdout
    );
}
