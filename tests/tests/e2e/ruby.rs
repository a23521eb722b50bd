//! End-to-end tests of Ruby code named from outside: Debian's real ruby
//! running `tests/workloads/rb_split.rb`, a workload of known
//! construction, profiled with no flag, restart or help of the program.
//! The Ruby methods take the place of the VM's loop (`rb_vm_exec`) in
//! every stack, with the native code they call under them. They fail
//! (never skip) when ruby is missing.

use profd_e2e::{Harness, Measure::Inclusive};

use crate::interpreters::{RUBY, TOLERANCE};

/// The name of the workload's method `name`, as profd names Ruby frames.
fn rb(name: &str) -> String {
    RUBY.name(name)
}

/// The split under its caller, by inclusive share; `profctl info` says
/// Ruby frames are read.
#[test]
fn ruby_methods_split_under_their_caller() {
    let h = Harness::start();
    let (_w, p) = RUBY.profile(&h.daemon, "split");
    RUBY.check_read(&p, "<main>");
    RUBY.assert_info_says_read(&h.daemon);
    p.assert_pct_within(&rb("outer"), Inclusive, 100.0, TOLERANCE);
    RUBY.assert_split(&p);
}

/// The pprof export carries each Ruby frame's file and line: `go tool
/// pprof -lines` puts hot_a's time on its lines in rb_split.rb (its `def`
/// and the eight lines of its body, three of them at least: the loop's
/// lines, each a good part of the time), and nowhere else.
#[test]
fn ruby_lines_reach_go_pprof() {
    let h = Harness::start();
    let (_w, p) = RUBY.profile(&h.daemon, "split");
    RUBY.check_read(&p, "<main>");
    RUBY.hot_a_lines_reach_go_pprof(&h.daemon, &p, 8, 3);
}

/// A method recursing five levels deep counts once per sample.
#[test]
fn ruby_recursion_counts_once() {
    RUBY.recursion_counts_once(&rb("recurse"));
}

/// Two threads running different methods: each thread's stacks hold its
/// own method only.
#[test]
fn ruby_threads_keep_their_own_stacks() {
    let h = Harness::start();
    let (_w, p) = RUBY.profile(&h.daemon, "threads");
    RUBY.assert_readable(&p);
    let (left, right) = RUBY.left_and_right(&p);
    // hot_a runs under left only, hot_b under right only (in the block
    // the second thread runs).
    p.assert_pct_within(&rb("hot_a"), Inclusive, left, TOLERANCE);
    p.assert_pct_within(&rb("hot_b"), Inclusive, right, TOLERANCE);
    p.assert_pct_within("block in <main>", Inclusive, right, TOLERANCE);
}

/// A C extension's native frames sit under the Ruby method that called
/// it.
#[test]
fn ruby_c_extension_frames_are_under_their_caller() {
    RUBY.libz_is_under(&rb("squeeze"));
}

/// An external Enumerator runs its block in a Fiber, on a stack of its
/// own: its frames, read from the fiber the thread runs, sit under the
/// Fiber's start, with what the block calls under them.
#[test]
fn ruby_enumerator_fiber_frames_are_read() {
    let h = Harness::start();
    let (_w, p) = RUBY.profile(&h.daemon, "enumerator");
    RUBY.assert_readable(&p);
    let block = p.function("block in Work#produce").pct(Inclusive);
    let hot = p.function(&rb("hot_a")).pct(Inclusive);
    assert!(hot >= 80.0, "hot_a {hot} %:\n{}", p.table());
    assert!((block - hot).abs() <= TOLERANCE, "{}", p.table());
}

/// In off-CPU mode the Ruby method that sleeps is on the stack of the
/// time asleep.
#[test]
fn ruby_method_that_sleeps_is_on_its_off_cpu_stack() {
    RUBY.napper_is_on_its_off_cpu_stack();
}

/// A process that was running before the daemon started is read as well.
#[test]
fn ruby_started_before_the_daemon_is_read() {
    RUBY.started_before_the_daemon_is_read(&rb("outer"));
}

/// A Ruby service under continuous profiling: its windows, queried by
/// service, hold the Ruby methods with the split of the construction.
#[test]
fn ruby_service_windows_hold_its_methods() {
    let p = RUBY.service_windows(&rb("outer"));
    RUBY.assert_split(&p);
}
