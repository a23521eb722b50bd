//! End-to-end tests of interpreted code named from outside: Debian's real
//! python3 running `tests/workloads/py_split.py`, a workload of known
//! construction, profiled with no flag, restart or help of the program.
//! The Python functions take the place of the interpreter's eval loop in
//! every stack, with the native code they call under them. They fail
//! (never skip) when python3 is missing.

use std::path::Path;
use std::process::Command;

use profd_e2e::{Harness, Measure::Exclusive, Measure::Inclusive, Profile, Workload};

/// Debian's interpreter (not another one earlier in PATH), unless
/// `PROFD_TEST_PYTHON` names another CPython to run these tests on.
fn python() -> String {
    std::env::var("PROFD_TEST_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".into())
}
/// Long enough for any test: workloads are killed when the test ends.
const LONG: f64 = 60.0;
/// Percentage points a measured share may be off the construction.
const TOLERANCE: f64 = 3.0;
/// Enough samples for ±3 points: a binomial standard deviation of 0.7
/// points for a 25 % share, with room for the aliasing of a 1 ms sampling
/// period against the workload's 0.4 ms cycle of calls (at 1 500 samples,
/// hot_b once read 21.9 %).
const SAMPLES: u64 = 4000;

fn start(mode: &str) -> Workload {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/py_split.py");
    let mut command = Command::new(python());
    command.arg(script).arg(LONG.to_string()).arg(mode);
    Workload::start_command(command, "python3")
}

fn py(function: &str) -> String {
    format!("py_split.{function}")
}

/// What a profile of Python code must always show: the Python functions
/// in the interpreter's place, its eval loop nowhere, and (almost) every
/// sample read.
fn check_read(p: &Profile) {
    for f in &p.functions {
        assert!(
            !f.name.contains("_PyEval_EvalFrameDefault"),
            "an eval-loop frame was left in place:\n{}",
            p.table()
        );
    }
    let unreadable = p.totals.python_unreadable;
    assert!(
        unreadable * 50 <= p.totals.attributed,
        "{unreadable} of {} samples unreadable:\n{}",
        p.totals.attributed,
        p.table()
    );
    let main = p.function(&py("main"));
    assert!(main.pct(Inclusive) >= 97.0, "{}", p.table());
    assert_eq!(main.module, "[python]");
}

/// The split under its caller, by inclusive share (the innermost frames
/// are the interpreter's own C code that runs the functions' lines).
#[test]
fn python_functions_split_under_their_caller() {
    let h = Harness::start();
    let w = start("split");
    let p = h.daemon.profile_until(&w, SAMPLES, &[]);
    check_read(&p);
    p.assert_pct_within(&py("outer"), Inclusive, 100.0, TOLERANCE);
    p.assert_pct_within(&py("hot_a"), Inclusive, 75.0, TOLERANCE);
    p.assert_pct_within(&py("hot_b"), Inclusive, 25.0, TOLERANCE);
}

/// A generator's frames sit between the loop that iterates it and what it
/// calls.
#[test]
fn python_generator_frames_sit_under_their_consumer() {
    let h = Harness::start();
    let w = start("generator");
    let p = h.daemon.profile_until(&w, SAMPLES, &[]);
    check_read(&p);
    p.assert_pct_within(&py("consume"), Inclusive, 100.0, TOLERANCE);
    p.assert_pct_within(&py("produce"), Inclusive, 100.0, TOLERANCE);
    p.assert_pct_within(&py("hot_a"), Inclusive, 100.0, TOLERANCE);
}

/// The pprof export carries each Python frame's file and line: `go tool
/// pprof -lines` puts hot_a's time on its lines in py_split.py, and
/// nowhere else.
#[test]
fn python_lines_reach_go_pprof() {
    let h = Harness::start();
    let w = start("split");
    let p = h.daemon.profile_until(&w, SAMPLES, &[]);
    check_read(&p);
    let file = profd_e2e::unique_dir("py-pprof").join("split.pb.gz");
    let session = p.session_id.to_string();
    let out = h.daemon.profctl(&[
        "export",
        &session,
        "--format",
        "pprof",
        "-o",
        profd_e2e::path_str(&file),
    ]);
    out.assert_success();
    let (rows, text) = profd_e2e::views::go_pprof_lines(&file);
    // hot_a's lines: its `def` (where a call starts, before its first
    // line runs) and the four lines of its body.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/py_split.py");
    let source = std::fs::read_to_string(&script).unwrap();
    let def = 1 + source
        .lines()
        .position(|l| l.starts_with("def hot_a("))
        .expect("py_split.py defines hot_a");
    let body = def..=def + 4;
    let total = p.totals.attributed as f64;
    let mut on_body = 0.0;
    for (_, cum, name) in &rows {
        let Some(at) = name.strip_prefix(&format!("{} ", py("hot_a"))) else {
            continue;
        };
        let line: usize = (at.rsplit_once(':'))
            .filter(|(file, _)| file.ends_with("py_split.py"))
            .and_then(|(_, line)| line.parse().ok())
            .unwrap_or_else(|| panic!("hot_a's row {name:?} has no line of py_split.py:\n{text}"));
        assert!(
            body.contains(&line),
            "hot_a at line {line}, outside {body:?}:\n{text}"
        );
        on_body += cum;
    }
    // A sample is at one line of hot_a (cum adds each line's samples).
    let share = 100.0 * on_body / total;
    assert!(
        (share - 75.0).abs() <= TOLERANCE,
        "hot_a's lines hold {share:.1} %:\n{text}"
    );
}

/// A function recursing five levels deep counts once per sample.
#[test]
fn python_recursion_counts_once() {
    let h = Harness::start();
    let w = start("recurse");
    let p = h.daemon.profile_until(&w, SAMPLES, &[]);
    check_read(&p);
    p.assert_pct_within(&py("deep"), Inclusive, 100.0, TOLERANCE);
    p.assert_pct_within(&py("hot_a"), Inclusive, 100.0, TOLERANCE);
}

/// Two threads running different functions: each thread's stacks hold
/// its own function only.
#[test]
fn python_threads_keep_their_own_stacks() {
    let h = Harness::start();
    let w = start("threads");
    let p = h.daemon.profile_until(&w, SAMPLES, &[]);
    let left = p.function(&py("left")).pct(Inclusive);
    let right = p.function(&py("right")).pct(Inclusive);
    assert!((left + right - 100.0).abs() <= TOLERANCE, "{}", p.table());
    assert!(left >= 25.0 && right >= 25.0, "{}", p.table());
    // hot_a runs under left only, hot_b under right only.
    p.assert_pct_within(&py("hot_a"), Inclusive, left, TOLERANCE);
    p.assert_pct_within(&py("hot_b"), Inclusive, right, TOLERANCE);
}

/// A C extension's native frames sit under the Python function that
/// called it.
#[test]
fn python_c_extension_frames_are_under_their_caller() {
    let h = Harness::start();
    let w = start("zlib");
    let p = h.daemon.profile_until(&w, SAMPLES, &[]);
    check_read(&p);
    p.assert_pct_within(&py("squeeze"), Inclusive, 100.0, TOLERANCE);
    let libz: f64 = (p.functions.iter())
        .filter(|f| f.module.starts_with("libz.so"))
        .map(|f| f.pct(Exclusive))
        .sum();
    assert!(libz >= 80.0, "libz {libz} % exclusive:\n{}", p.table());
}

/// In off-CPU mode the Python function that sleeps is on the stack of the
/// time asleep. The session ends by its duration while the program still
/// runs (the time asleep accrues whatever the machine's load): frames read
/// after the program exited could not be read.
#[test]
fn python_function_that_sleeps_is_on_its_off_cpu_stack() {
    let h = Harness::start();
    let w = start("sleep");
    let pid = w.pid_arg();
    let out = h.daemon.profctl(&[
        "attach",
        &pid,
        "--mode",
        "off-cpu",
        "--duration",
        "3",
        "--format",
        "json",
    ]);
    let p = Profile::parse(&out);
    eprintln!("{}", p.table());
    let napper = p.function(&py("napper")).pct(Inclusive);
    assert!(napper >= 95.0, "napper {napper} %:\n{}", p.table());
    p.assert_pct_within("[off-cpu: blocked]", Inclusive, 100.0, TOLERANCE);
}

/// A process that was running before the daemon started is read as well:
/// nothing is set up in it at its start.
#[test]
fn python_started_before_the_daemon_is_read() {
    let _serial = profd_e2e::serial();
    profd_e2e::require_root_and_perf();
    let w = start("split");
    let daemon = profd_e2e::Daemon::start();
    let p = daemon.profile_until(&w, SAMPLES, &[]);
    check_read(&p);
    p.assert_pct_within(&py("hot_a"), Inclusive, 75.0, TOLERANCE);
    p.assert_pct_within(&py("hot_b"), Inclusive, 25.0, TOLERANCE);
}

/// A Python service under continuous profiling: its windows, queried by
/// service, hold the Python functions with the split of the construction.
/// The daemon meets the process when it counts its first samples, and reads
/// its frames from then on: the query starts after the window it was met
/// in (the samples before have `[python: unreadable]`).
#[test]
fn python_service_windows_hold_its_functions() {
    let _serial = profd_e2e::serial();
    profd_e2e::require_root_and_perf();
    let d = crate::continuous::continuous("2", &[]);
    let cg = crate::continuous::group("python");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/py_split.py");
    let mut command = cg.command(python());
    command.arg(script).arg("9").arg("split");
    let mut w = Workload::start_command(command, "python3");
    let met = profd_e2e::wait_until(
        "a window of the service",
        std::time::Duration::from_secs(60),
        || {
            let l = crate::continuous::list(d.socket());
            let seen = l.services.iter().any(|s| s.service == cg.name());
            seen.then_some(l.cut_until_unix_ns)
        },
    );
    let from = met.div_ceil(1_000_000_000).to_string();
    w.wait(std::time::Duration::from_secs(60));
    crate::continuous::wait_for_window_after(&d, crate::continuous::now_ns());
    let out = d.profctl(&[
        "query",
        "--service",
        cg.name(),
        "--from",
        &from,
        "--format",
        "json",
    ]);
    let p = Profile::parse(&out);
    eprintln!("{}", p.table());
    assert!(p.totals.attributed >= SAMPLES, "{}", p.table());
    check_read(&p);
    p.assert_pct_within(&py("outer"), Inclusive, 100.0, TOLERANCE);
    p.assert_pct_within(&py("hot_a"), Inclusive, 75.0, TOLERANCE);
    p.assert_pct_within(&py("hot_b"), Inclusive, 25.0, TOLERANCE);
}
