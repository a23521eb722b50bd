//! End-to-end tests of interpreted code named from outside: Debian's real
//! python3 running `tests/workloads/py_split.py`, a workload of known
//! construction, profiled with no flag, restart or help of the program.
//! The Python functions take the place of the interpreter's eval loop in
//! every stack, with the native code they call under them. They fail
//! (never skip) when python3 is missing. `PROFD_TEST_PYTHON` names another
//! CPython to run them on.

use profd_e2e::{Harness, Measure::Inclusive};

use crate::interpreters::{PYTHON, TOLERANCE};

fn py(function: &str) -> String {
    PYTHON.name(function)
}

/// The split under its caller, by inclusive share (the innermost frames
/// are the interpreter's own C code that runs the functions' lines).
#[test]
fn python_functions_split_under_their_caller() {
    let h = Harness::start();
    let (_w, p) = PYTHON.profile(&h.daemon, "split");
    PYTHON.check_read(&p, &py("main"));
    p.assert_pct_within(&py("outer"), Inclusive, 100.0, TOLERANCE);
    PYTHON.assert_split(&p);
}

/// A generator's frames sit between the loop that iterates it and what it
/// calls.
#[test]
fn python_generator_frames_sit_under_their_consumer() {
    let h = Harness::start();
    let (_w, p) = PYTHON.profile(&h.daemon, "generator");
    PYTHON.check_read(&p, &py("main"));
    p.assert_pct_within(&py("consume"), Inclusive, 100.0, TOLERANCE);
    p.assert_pct_within(&py("produce"), Inclusive, 100.0, TOLERANCE);
    p.assert_pct_within(&py("hot_a"), Inclusive, 100.0, TOLERANCE);
}

/// The pprof export carries each Python frame's file and line: `go tool
/// pprof -lines` puts hot_a's time on its lines in py_split.py (its `def`,
/// where a call starts before its first line runs, and the four lines of
/// its body), and nowhere else.
#[test]
fn python_lines_reach_go_pprof() {
    let h = Harness::start();
    let (_w, p) = PYTHON.profile(&h.daemon, "split");
    PYTHON.check_read(&p, &py("main"));
    PYTHON.hot_a_lines_reach_go_pprof(&h.daemon, &p, 4, 1);
}

/// A function recursing five levels deep counts once per sample.
#[test]
fn python_recursion_counts_once() {
    PYTHON.recursion_counts_once(&py("main"));
}

/// Two threads running different functions: each thread's stacks hold
/// its own function only.
#[test]
fn python_threads_keep_their_own_stacks() {
    let h = Harness::start();
    let (_w, p) = PYTHON.profile(&h.daemon, "threads");
    let (left, right) = PYTHON.left_and_right(&p);
    // hot_a runs under left only, hot_b under right only.
    p.assert_pct_within(&py("hot_a"), Inclusive, left, TOLERANCE);
    p.assert_pct_within(&py("hot_b"), Inclusive, right, TOLERANCE);
}

/// A C extension's native frames sit under the Python function that
/// called it.
#[test]
fn python_c_extension_frames_are_under_their_caller() {
    let p = PYTHON.libz_is_under(&py("main"));
    p.assert_pct_within(&py("squeeze"), Inclusive, 100.0, TOLERANCE);
}

/// In off-CPU mode the Python function that sleeps is on the stack of the
/// time asleep.
#[test]
fn python_function_that_sleeps_is_on_its_off_cpu_stack() {
    PYTHON.napper_is_on_its_off_cpu_stack();
}

/// A process that was running before the daemon started is read as well.
#[test]
fn python_started_before_the_daemon_is_read() {
    PYTHON.started_before_the_daemon_is_read(&py("main"));
}

/// A Python service under continuous profiling: its windows, queried by
/// service, hold the Python functions with the split of the construction.
#[test]
fn python_service_windows_hold_its_functions() {
    let p = PYTHON.service_windows(&py("main"));
    p.assert_pct_within(&py("outer"), Inclusive, 100.0, TOLERANCE);
    PYTHON.assert_split(&p);
}
