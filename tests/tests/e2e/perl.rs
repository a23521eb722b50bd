//! End-to-end tests of Perl code named from outside: Debian's real perl
//! running `tests/workloads/pl_split.pl`, a workload of known
//! construction, profiled with no flag, restart or help of the program.
//! The Perl subs take the place of the run loop (`Perl_runops_standard`)
//! in every stack, with the native code they call under them. They fail
//! (never skip) when perl is missing.

use profd_e2e::{Harness, Measure::Exclusive, Measure::Inclusive};

use crate::interpreters::{PERL, TOLERANCE};

/// The name of the workload's sub `name`, as profd names Perl frames.
fn pl(name: &str) -> String {
    PERL.name(name)
}

/// The split under its caller, by inclusive share; `profctl info` says
/// Perl frames are read.
#[test]
fn perl_subs_split_under_their_caller() {
    let h = Harness::start();
    let (_w, p) = PERL.profile(&h.daemon, "split");
    PERL.check_read(&p, "main::RUNTIME");
    PERL.assert_info_says_read(&h.daemon);
    p.assert_pct_within(&pl("outer"), Inclusive, 100.0, TOLERANCE);
    PERL.assert_split(&p);
}

/// The pprof export carries each Perl frame's file and line: `go tool
/// pprof -lines` puts hot_a's time on its lines in pl_split.pl (its `sub`
/// and the seven lines of its body), and nowhere else. Perl moves its
/// current line at statements of the loop's line only (the C-style loop's
/// body runs at line 30), and at the sub's first line for the moment after
/// a call, so one line holds nearly all of hot_a's time: one at least is
/// asked for.
#[test]
fn perl_lines_reach_go_pprof() {
    let h = Harness::start();
    let (_w, p) = PERL.profile(&h.daemon, "split");
    PERL.check_read(&p, "main::RUNTIME");
    PERL.hot_a_lines_reach_go_pprof(&h.daemon, &p, 7, 1);
}

/// A sub recursing five levels deep counts once per sample.
#[test]
fn perl_recursion_counts_once() {
    PERL.recursion_counts_once(&pl("recurse"));
}

/// An XS call's native frames (Digest::MD5's, in Debian's stripped
/// `MD5.so`) sit under the Perl sub that called it.
#[test]
fn perl_xs_frames_are_under_their_caller() {
    let h = Harness::start();
    let (_w, p) = PERL.profile(&h.daemon, "xs");
    PERL.check_read(&p, &pl("digest"));
    let md5: f64 = (p.functions.iter())
        .filter(|f| f.module == "MD5.so")
        .map(|f| f.pct(Exclusive))
        .sum();
    assert!(md5 >= 80.0, "MD5.so {md5} % exclusive:\n{}", p.table());
    // Every MD5.so frame is under digest: none on a stack without it.
    let under = p.function(&pl("digest")).pct(Inclusive);
    assert!(under >= 97.0, "{}", p.table());
}

/// A sort block is run by a run loop of its own, called from C (pp_sort):
/// the sub it calls sits under it, under the sub that sorts, with the
/// sort's native frames between.
#[test]
fn perl_sort_block_frames_are_read() {
    let h = Harness::start();
    let (_w, p) = PERL.profile(&h.daemon, "sort");
    PERL.check_read(&p, &pl("sorter"));
    let by_value = p.function(&pl("by_value")).pct(Inclusive);
    assert!(by_value >= 80.0, "by_value {by_value} %:\n{}", p.table());
    p.assert_pct_within("Perl_pp_sort", Inclusive, by_value, TOLERANCE);
    p.assert_pct_within(&pl("hot_a"), Inclusive, by_value, 10.0);
}

/// In off-CPU mode the Perl sub that sleeps is on the stack of the time
/// asleep.
#[test]
fn perl_sub_that_sleeps_is_on_its_off_cpu_stack() {
    PERL.napper_is_on_its_off_cpu_stack();
}

/// A process that was running before the daemon started is read as well.
#[test]
fn perl_started_before_the_daemon_is_read() {
    PERL.started_before_the_daemon_is_read(&pl("outer"));
}

/// With ithreads, the second thread runs an interpreter of its own, which
/// profd does not read: its samples are `[perl: unreadable]` and counted,
/// never named from the main interpreter's frames; the main thread's
/// are read.
#[test]
fn perl_ithreads_other_interpreters_are_unreadable_and_counted() {
    let h = Harness::start();
    let (_w, p) = PERL.profile(&h.daemon, "threads");
    let left = p.function(&pl("left")).pct(Inclusive);
    let unreadable = p.function("[perl: unreadable]").pct(Inclusive);
    assert!(left >= 25.0 && unreadable >= 25.0, "{}", p.table());
    assert!(
        (left + unreadable - 100.0).abs() <= TOLERANCE,
        "{}",
        p.table()
    );
    let others = [pl("right"), pl("hot_b")];
    assert!(
        (p.functions.iter()).all(|f| !others.contains(&f.name)),
        "{}",
        p.table()
    );
    let counted = 100.0 * p.totals.perl_unreadable as f64 / p.totals.attributed as f64;
    assert!((counted - unreadable).abs() <= 1.0, "{}", p.table());
}

/// A Perl service under continuous profiling: its windows, queried by
/// service, hold the Perl subs with the split of the construction.
#[test]
fn perl_service_windows_hold_its_subs() {
    let p = PERL.service_windows(&pl("outer"));
    PERL.assert_split(&p);
}
