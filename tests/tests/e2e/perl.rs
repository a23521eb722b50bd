//! End-to-end tests of Perl code named from outside: Debian's real perl
//! running `tests/workloads/pl_split.pl`, a workload of known
//! construction, profiled with no flag, restart or help of the program.
//! The Perl subs take the place of the run loop (`Perl_runops_standard`)
//! in every stack, with the native code they call under them. They fail
//! (never skip) when perl is missing.

use std::path::Path;
use std::process::Command;

use profd_e2e::{Harness, Measure::Exclusive, Measure::Inclusive, Profile, Workload};

/// Debian's interpreter (not another one earlier in PATH).
const PERL: &str = "/usr/bin/perl";
/// Long enough for any test: workloads are killed when the test ends.
const LONG: f64 = 60.0;
/// Percentage points a measured share may be off the construction.
const TOLERANCE: f64 = 3.0;
/// Enough samples for ±3 points, as the Python and Ruby tests take.
const SAMPLES: u64 = 4000;

fn script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/pl_split.pl")
}

fn start(mode: &str) -> Workload {
    let mut command = Command::new(PERL);
    command.arg(script()).arg(LONG.to_string()).arg(mode);
    Workload::start_command(command, "perl")
}

/// The name of the workload's sub `name`, as profd names Perl frames.
fn pl(name: &str) -> String {
    format!("Work::{name}")
}

/// What a profile of Perl code must always show: the Perl subs in the run
/// loop's place, the loop nowhere, and (almost) every sample read.
fn check_read(p: &Profile, top: &str) {
    for f in &p.functions {
        assert!(
            !f.name.contains("runops"),
            "a run-loop frame was left in place:\n{}",
            p.table()
        );
    }
    let unreadable = p.totals.perl_unreadable;
    assert!(
        unreadable * 50 <= p.totals.attributed,
        "{unreadable} of {} samples unreadable:\n{}",
        p.totals.attributed,
        p.table()
    );
    let top = p.function(top);
    assert!(top.pct(Inclusive) >= 97.0, "{}", p.table());
    assert_eq!(top.module, "[perl]");
}

/// The split under its caller, by inclusive share; `profctl info` says
/// Perl frames are read.
#[test]
fn perl_subs_split_under_their_caller() {
    let h = Harness::start();
    let w = start("split");
    let p = h.daemon.profile_until(&w, SAMPLES, &[]);
    check_read(&p, "main::RUNTIME");
    let info = h.daemon.profctl(&["info"]);
    info.assert_success();
    assert!(
        (info.stdout.lines()).any(|l| l.trim() == "perl frames:          read at each sample"),
        "{}",
        info.stdout
    );
    p.assert_pct_within(&pl("outer"), Inclusive, 100.0, TOLERANCE);
    p.assert_pct_within(&pl("hot_a"), Inclusive, 75.0, TOLERANCE);
    p.assert_pct_within(&pl("hot_b"), Inclusive, 25.0, TOLERANCE);
}

/// The pprof export carries each Perl frame's file and line: `go tool
/// pprof -lines` puts hot_a's time on its lines in pl_split.pl, and
/// nowhere else.
#[test]
fn perl_lines_reach_go_pprof() {
    let h = Harness::start();
    let w = start("split");
    let p = h.daemon.profile_until(&w, SAMPLES, &[]);
    check_read(&p, "main::RUNTIME");
    let file = profd_e2e::unique_dir("pl-pprof").join("split.pb.gz");
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
    // hot_a's lines: its `sub` and the seven lines of its body.
    let source = std::fs::read_to_string(script()).unwrap();
    let def = 1 + source
        .lines()
        .position(|l| l.starts_with("sub hot_a {"))
        .expect("pl_split.pl defines hot_a");
    let body = def..=def + 7;
    let total = p.totals.attributed as f64;
    let mut on_body = 0.0;
    let mut lines = std::collections::BTreeSet::new();
    for (_, cum, name) in &rows {
        let Some(at) = name.strip_prefix(&format!("{} ", pl("hot_a"))) else {
            continue;
        };
        let line: usize = (at.rsplit_once(':'))
            .filter(|(file, _)| file.ends_with("pl_split.pl"))
            .and_then(|(_, line)| line.parse().ok())
            .unwrap_or_else(|| panic!("hot_a's row {name:?} has no line of pl_split.pl:\n{text}"));
        assert!(
            body.contains(&line),
            "hot_a at line {line}, outside {body:?}:\n{text}"
        );
        lines.insert(line);
        on_body += cum;
    }
    // The loop's lines, each a good part of the time.
    assert!(lines.len() >= 2, "hot_a's lines {lines:?}:\n{text}");
    let share = 100.0 * on_body / total;
    assert!(
        (share - 75.0).abs() <= TOLERANCE,
        "hot_a's lines hold {share:.1} %:\n{text}"
    );
}

/// A sub recursing five levels deep counts once per sample.
#[test]
fn perl_recursion_counts_once() {
    let h = Harness::start();
    let w = start("recurse");
    let p = h.daemon.profile_until(&w, SAMPLES, &[]);
    check_read(&p, &pl("recurse"));
    p.assert_pct_within(&pl("deep"), Inclusive, 100.0, TOLERANCE);
    p.assert_pct_within(&pl("hot_a"), Inclusive, 100.0, TOLERANCE);
}

/// An XS call's native frames (Digest::MD5's, in Debian's stripped
/// `MD5.so`) sit under the Perl sub that called it.
#[test]
fn perl_xs_frames_are_under_their_caller() {
    let h = Harness::start();
    let w = start("xs");
    let p = h.daemon.profile_until(&w, SAMPLES, &[]);
    check_read(&p, &pl("digest"));
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
    let w = start("sort");
    let p = h.daemon.profile_until(&w, SAMPLES, &[]);
    check_read(&p, &pl("sorter"));
    let by_value = p.function(&pl("by_value")).pct(Inclusive);
    assert!(by_value >= 80.0, "by_value {by_value} %:\n{}", p.table());
    p.assert_pct_within("Perl_pp_sort", Inclusive, by_value, TOLERANCE);
    p.assert_pct_within(&pl("hot_a"), Inclusive, by_value, 10.0);
}

/// In off-CPU mode the Perl sub that sleeps is on the stack of the time
/// asleep.
#[test]
fn perl_sub_that_sleeps_is_on_its_off_cpu_stack() {
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
    let napper = p.function(&pl("napper")).pct(Inclusive);
    assert!(napper >= 95.0, "napper {napper} %:\n{}", p.table());
    p.assert_pct_within("[off-cpu: blocked]", Inclusive, 100.0, TOLERANCE);
}

/// A process that was running before the daemon started is read as well.
#[test]
fn perl_started_before_the_daemon_is_read() {
    let _serial = profd_e2e::serial();
    profd_e2e::require_root_and_perf();
    let w = start("split");
    let daemon = profd_e2e::Daemon::start();
    let p = daemon.profile_until(&w, SAMPLES, &[]);
    check_read(&p, &pl("outer"));
    p.assert_pct_within(&pl("hot_a"), Inclusive, 75.0, TOLERANCE);
    p.assert_pct_within(&pl("hot_b"), Inclusive, 25.0, TOLERANCE);
}

/// With ithreads, the second thread runs an interpreter of its own, which
/// profd does not read: its samples are `[perl: unreadable]` and counted,
/// never named from the main interpreter's frames; the main thread's
/// are read.
#[test]
fn perl_ithreads_other_interpreters_are_unreadable_and_counted() {
    let h = Harness::start();
    let w = start("threads");
    let p = h.daemon.profile_until(&w, SAMPLES, &[]);
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
    let _serial = profd_e2e::serial();
    profd_e2e::require_root_and_perf();
    let d = crate::continuous::continuous("2", &[]);
    let cg = crate::continuous::group("perl");
    let mut command = cg.command(PERL);
    command.arg(script()).arg("9").arg("split");
    let mut w = Workload::start_command(command, "perl");
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
    check_read(&p, &pl("outer"));
    p.assert_pct_within(&pl("hot_a"), Inclusive, 75.0, TOLERANCE);
    p.assert_pct_within(&pl("hot_b"), Inclusive, 25.0, TOLERANCE);
}
