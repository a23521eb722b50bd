//! End-to-end tests of Go programs: real kernel, real `profd` and `profctl`,
//! and `tests/workloads/gostacks.go` built with Debian's `go` (the tests fail
//! when it is missing), as it comes and linked with `-s -w`. Its hot leaves
//! have no frame; their callers must be on the stacks under DWARF unwinding
//! (from `.gopclntab`) and under `--unwind fp` alike, within ±2 points of the
//! construction (callers as heavy as their leaves; see the note on the
//! leaves' split below), with names as Go prints them.

use profd_e2e::{
    Build, Harness, Measure::Exclusive, Measure::Inclusive, Profile, Workload, GOSTACKS,
    GOSTACKS_STRIPPED,
};

/// Long enough for any test: workloads are killed when the test ends.
const LONG: f64 = 60.0;
/// Percentage points a measured share may be off the construction.
const TOLERANCE: f64 = 2.0;
/// Sampling frequency. At 999 Hz over 4 s the shares of these rounds spread
/// by about 1 point from run to run, so ±2 points failed now and then; with
/// five times the samples they spread by under half a point.
const FREQ: &str = "4999";
/// The samples a session lasts for: a 30 % share's binomial standard
/// deviation is then 0.37 points, ±2 points over five of them.
const SAMPLES: u64 = 15000;

/// `gostacks.go` by construction: (function, measure, %).
const GO_SPLIT: &[(&str, profd_e2e::Measure, f64)] = &[
    ("main.leafA", Exclusive, 30.0),
    ("main.leafB", Exclusive, 70.0),
    ("main.makeMid.func1", Inclusive, 70.0),
    ("main.(*Worker).Work", Inclusive, 100.0),
    ("main.run", Inclusive, 100.0),
];

/// Profiles `build` for [`SAMPLES`] samples with `extra` options and checks
/// the split, the names and that stacks are complete.
fn go_profile_matches_construction(build: &Build, extra: &[&str], unwind: &str) -> Profile {
    let h = Harness::start();
    let target = Workload::start_build(build, LONG);
    let mut args = vec!["--freq", FREQ];
    args.extend_from_slice(extra);
    let p = h.daemon.profile_until(&target, SAMPLES, &args);
    eprintln!(
        "  unwind {}; attributed {}, truncated {}, unsymbolized {}",
        p.unwind, p.totals.attributed, p.totals.truncated, p.totals.unsymbolized
    );
    assert_eq!(p.unwind, unwind, "{}", p.table());
    // Names as Go prints them, from the program itself.
    for &(name, _, _) in GO_SPLIT {
        assert_eq!(
            p.function(name).module,
            build.name,
            "{name} is not from {}:\n{}",
            build.name,
            p.table()
        );
    }
    let unnamed: Vec<&str> = p
        .functions
        .iter()
        .filter(|f| f.module == build.name)
        .filter(|f| f.name.contains("+0x") || f.name.starts_with("[unknown]"))
        .map(|f| f.name.as_str())
        .collect();
    assert!(
        unnamed.is_empty(),
        "frames of {} left unnamed: {unnamed:?}\n{}",
        build.name,
        p.table()
    );
    // The leaves hold the samples and their callers are on every stack: an
    // unwinder that lost the caller of a frameless leaf would leave
    // makeMid.func1 short of leafB's share and Work short of 100 %. (The
    // leaves split 30/70 by iterations, but on some CPUs an iteration of
    // one of the two identical loops takes longer than one of the other:
    // on this AMD EPYC `perf record` measures leafA at 38 % as profd does.
    // So the split itself is not checked.)
    // The leaves' inclusive shares: a leaf's samples include those whose
    // innermost frames are the kernel's (interrupts, preemption), which a
    // loaded machine makes more of.
    let pct = |name: &str, m| p.function(name).pct(m);
    let (a, b) = (pct("main.leafA", Inclusive), pct("main.leafB", Inclusive));
    assert!(
        a + b >= 100.0 - TOLERANCE && a >= 15.0 && b >= 45.0,
        "leafA {a:.1} % and leafB {b:.1} % inclusive:\n{}",
        p.table()
    );
    p.assert_pct_within("main.makeMid.func1", Inclusive, b, TOLERANCE);
    for &(name, measure, pct) in GO_SPLIT.iter().filter(|s| s.2 == 100.0) {
        p.assert_pct_within(name, measure, pct, TOLERANCE);
    }
    // Goroutine stacks end at runtime.goexit: complete, not truncated, and
    // nothing unnamed above it.
    let one_pct = p.totals.attributed / 100;
    assert!(
        p.totals.truncated <= one_pct,
        "{} of {} samples truncated (expected ≤ 1 %):\n{}",
        p.totals.truncated,
        p.totals.attributed,
        p.table()
    );
    assert!(
        p.totals.unsymbolized <= one_pct,
        "{} of {} samples have an unnamed frame (expected ≤ 1 %):\n{}",
        p.totals.unsymbolized,
        p.totals.attributed,
        p.table()
    );
    p
}

#[test]
fn default_unwinding_finds_the_callers_of_frameless_go_functions() {
    go_profile_matches_construction(&GOSTACKS, &[], "dwarf");
}

#[test]
fn fp_unwinding_finds_the_callers_of_frameless_go_functions() {
    go_profile_matches_construction(&GOSTACKS, &["--unwind", "fp"], "fp");
}

/// Without symbols or DWARF, `.gopclntab` names and unwinds the code.
#[test]
fn a_stripped_go_program_unwinds_and_is_named_with_dwarf_unwinding() {
    go_profile_matches_construction(&GOSTACKS_STRIPPED, &["--unwind", "dwarf"], "dwarf");
}

#[test]
fn a_stripped_go_program_unwinds_and_is_named_with_fp_unwinding() {
    go_profile_matches_construction(&GOSTACKS_STRIPPED, &["--unwind", "fp"], "fp");
}
