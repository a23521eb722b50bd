//! End-to-end tests of Ruby code named from outside: Debian's real ruby
//! running `tests/workloads/rb_split.rb`, a workload of known
//! construction, profiled with no flag, restart or help of the program.
//! The Ruby methods take the place of the VM's loop (`rb_vm_exec`) in
//! every stack, with the native code they call under them. They fail
//! (never skip) when ruby is missing.

use std::path::Path;
use std::process::Command;

use profd_e2e::{Harness, Measure::Exclusive, Measure::Inclusive, Profile, Workload};

/// Debian's interpreter (not another one earlier in PATH).
const RUBY: &str = "/usr/bin/ruby";
/// Long enough for any test: workloads are killed when the test ends.
const LONG: f64 = 60.0;
/// Percentage points a measured share may be off the construction.
const TOLERANCE: f64 = 3.0;
/// Enough samples for ±3 points, as the Python tests take.
const SAMPLES: u64 = 4000;

fn start(mode: &str) -> Workload {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/rb_split.rb");
    let mut command = Command::new(RUBY);
    command.arg(script).arg(LONG.to_string()).arg(mode);
    Workload::start_command(command, "ruby")
}

/// The name of the workload's method `name`, as profd names Ruby frames.
fn rb(name: &str) -> String {
    format!("Work#{name}")
}

/// What a profile of Ruby code must always show: the Ruby methods in the
/// VM's place, its loop nowhere, and (almost) every sample read.
fn check_read(p: &Profile, top: &str) {
    for f in &p.functions {
        assert!(
            !f.name.contains("rb_vm_exec"),
            "a VM frame was left in place:\n{}",
            p.table()
        );
    }
    let unreadable = p.totals.ruby_unreadable;
    assert!(
        unreadable * 50 <= p.totals.attributed,
        "{unreadable} of {} samples unreadable:\n{}",
        p.totals.attributed,
        p.table()
    );
    let top = p.function(top);
    assert!(top.pct(Inclusive) >= 97.0, "{}", p.table());
    assert_eq!(top.module, "[ruby]");
}

/// The split under its caller, by inclusive share; `profctl info` says
/// Ruby frames are read.
#[test]
fn ruby_methods_split_under_their_caller() {
    let h = Harness::start();
    let w = start("split");
    let p = h.daemon.profile_until(&w, SAMPLES, &[]);
    check_read(&p, "<main>");
    let info = h.daemon.profctl(&["info"]);
    info.assert_success();
    assert!(
        (info.stdout.lines()).any(|l| l.trim() == "ruby frames:          read at each sample"),
        "{}",
        info.stdout
    );
    p.assert_pct_within(&rb("outer"), Inclusive, 100.0, TOLERANCE);
    p.assert_pct_within(&rb("hot_a"), Inclusive, 75.0, TOLERANCE);
    p.assert_pct_within(&rb("hot_b"), Inclusive, 25.0, TOLERANCE);
}

/// The pprof export carries each Ruby frame's file and line: `go tool
/// pprof -lines` puts hot_a's time on its lines in rb_split.rb, and
/// nowhere else.
#[test]
fn ruby_lines_reach_go_pprof() {
    let h = Harness::start();
    let w = start("split");
    let p = h.daemon.profile_until(&w, SAMPLES, &[]);
    check_read(&p, "<main>");
    let file = profd_e2e::unique_dir("rb-pprof").join("split.pb.gz");
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
    // hot_a's lines: its `def` and the eight lines of its body.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/rb_split.rb");
    let source = std::fs::read_to_string(&script).unwrap();
    let def = 1 + source
        .lines()
        .position(|l| l.trim_start().starts_with("def hot_a("))
        .expect("rb_split.rb defines hot_a");
    let body = def..=def + 8;
    let total = p.totals.attributed as f64;
    let mut on_body = 0.0;
    let mut lines = std::collections::BTreeSet::new();
    for (_, cum, name) in &rows {
        let Some(at) = name.strip_prefix(&format!("{} ", rb("hot_a"))) else {
            continue;
        };
        let line: usize = (at.rsplit_once(':'))
            .filter(|(file, _)| file.ends_with("rb_split.rb"))
            .and_then(|(_, line)| line.parse().ok())
            .unwrap_or_else(|| panic!("hot_a's row {name:?} has no line of rb_split.rb:\n{text}"));
        assert!(
            body.contains(&line),
            "hot_a at line {line}, outside {body:?}:\n{text}"
        );
        lines.insert(line);
        on_body += cum;
    }
    // The loop's lines, each a good part of the time.
    assert!(lines.len() >= 3, "hot_a's lines {lines:?}:\n{text}");
    let share = 100.0 * on_body / total;
    assert!(
        (share - 75.0).abs() <= TOLERANCE,
        "hot_a's lines hold {share:.1} %:\n{text}"
    );
}

/// A method recursing five levels deep counts once per sample.
#[test]
fn ruby_recursion_counts_once() {
    let h = Harness::start();
    let w = start("recurse");
    let p = h.daemon.profile_until(&w, SAMPLES, &[]);
    check_read(&p, &rb("recurse"));
    p.assert_pct_within(&rb("deep"), Inclusive, 100.0, TOLERANCE);
    p.assert_pct_within(&rb("hot_a"), Inclusive, 100.0, TOLERANCE);
}

/// Two threads running different methods: each thread's stacks hold its
/// own method only.
#[test]
fn ruby_threads_keep_their_own_stacks() {
    let h = Harness::start();
    let w = start("threads");
    let p = h.daemon.profile_until(&w, SAMPLES, &[]);
    let unreadable = p.totals.ruby_unreadable;
    assert!(unreadable * 50 <= p.totals.attributed, "{}", p.table());
    let left = p.function(&rb("left")).pct(Inclusive);
    let right = p.function(&rb("right")).pct(Inclusive);
    assert!((left + right - 100.0).abs() <= TOLERANCE, "{}", p.table());
    assert!(left >= 25.0 && right >= 25.0, "{}", p.table());
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
    let h = Harness::start();
    let w = start("zlib");
    let p = h.daemon.profile_until(&w, SAMPLES, &[]);
    check_read(&p, &rb("squeeze"));
    let libz: f64 = (p.functions.iter())
        .filter(|f| f.module.starts_with("libz.so"))
        .map(|f| f.pct(Exclusive))
        .sum();
    assert!(libz >= 80.0, "libz {libz} % exclusive:\n{}", p.table());
}

/// An external Enumerator runs its block in a Fiber, on a stack of its
/// own: its frames, read from the fiber the thread runs, sit under the
/// Fiber's start, with what the block calls under them.
#[test]
fn ruby_enumerator_fiber_frames_are_read() {
    let h = Harness::start();
    let w = start("enumerator");
    let p = h.daemon.profile_until(&w, SAMPLES, &[]);
    let unreadable = p.totals.ruby_unreadable;
    assert!(unreadable * 50 <= p.totals.attributed, "{}", p.table());
    let block = p.function("block in Work#produce").pct(Inclusive);
    let hot = p.function(&rb("hot_a")).pct(Inclusive);
    assert!(hot >= 80.0, "hot_a {hot} %:\n{}", p.table());
    assert!((block - hot).abs() <= TOLERANCE, "{}", p.table());
}

/// In off-CPU mode the Ruby method that sleeps is on the stack of the
/// time asleep.
#[test]
fn ruby_method_that_sleeps_is_on_its_off_cpu_stack() {
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
    let napper = p.function(&rb("napper")).pct(Inclusive);
    assert!(napper >= 95.0, "napper {napper} %:\n{}", p.table());
    p.assert_pct_within("[off-cpu: blocked]", Inclusive, 100.0, TOLERANCE);
}

/// A process that was running before the daemon started is read as well.
#[test]
fn ruby_started_before_the_daemon_is_read() {
    let _serial = profd_e2e::serial();
    profd_e2e::require_root_and_perf();
    let w = start("split");
    let daemon = profd_e2e::Daemon::start();
    let p = daemon.profile_until(&w, SAMPLES, &[]);
    check_read(&p, &rb("outer"));
    p.assert_pct_within(&rb("hot_a"), Inclusive, 75.0, TOLERANCE);
    p.assert_pct_within(&rb("hot_b"), Inclusive, 25.0, TOLERANCE);
}

/// A Ruby service under continuous profiling: its windows, queried by
/// service, hold the Ruby methods with the split of the construction.
#[test]
fn ruby_service_windows_hold_its_methods() {
    let _serial = profd_e2e::serial();
    profd_e2e::require_root_and_perf();
    let d = crate::continuous::continuous("2", &[]);
    let cg = crate::continuous::group("ruby");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/rb_split.rb");
    let mut command = cg.command(RUBY);
    command.arg(script).arg("9").arg("split");
    let mut w = Workload::start_command(command, "ruby");
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
    check_read(&p, &rb("outer"));
    p.assert_pct_within(&rb("hot_a"), Inclusive, 75.0, TOLERANCE);
    p.assert_pct_within(&rb("hot_b"), Inclusive, 25.0, TOLERANCE);
}
