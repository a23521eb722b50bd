//! End-to-end tests of JIT code, named by perf maps and jitdumps: a JVM
//! (OpenJDK, `tests/workloads/JitSplit.java`, run with
//! -XX:+PreserveFramePointer, and without it, when HotSpot's code cache
//! gives the frame sizes) and node (`tests/workloads/jit_split.js`, with
//! --perf-basic-prof, and with --perf-prof, which writes a jitdump), each with
//! a known split under known callers. Both unwinding modes must keep the
//! callers of compiled frames; the perf map must be read when it is written
//! while the target runs, when it is rewritten, and when it is written at
//! exit. They fail (never skip) when java, javac, jcmd or node is missing.
//! The JVM asked for its map by the daemon itself is `jvm_ask`'s.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use profd_e2e::{
    java_classes, java_command, node_command, node_command_with, unique_dir, Cmd, Harness,
    Measure::Exclusive, Measure::Inclusive, Profile, Workload, JAVA_FLAGS,
};

/// Long enough for any test: workloads are killed when the test ends.
pub(crate) const LONG: f64 = 60.0;
/// Percentage points a measured share may be off the construction.
pub(crate) const TOLERANCE: f64 = 3.0;
/// Enough samples for ±3 points: at 1000, a 30 % share's binomial
/// standard deviation is 1.4 points.
pub(crate) const MIN_SAMPLES: u64 = 1000;
/// The samples a split is measured over where the session can be ended by
/// count: a 30 % share's standard deviation is then 0.72 points, ±3 points
/// over four of them.
pub(crate) const SPLIT_SAMPLES: u64 = 4000;

pub(crate) const LEAF_A: &str = "void JitSplit.leafA(long)";
pub(crate) const LEAF_B: &str = "void JitSplit.leafB(long)";
pub(crate) const MID: &str = "void JitSplit.mid(long)";
pub(crate) const WORK: &str = "void JitSplit.work(long)";
pub(crate) const LATE_LEAF: &str = "void JitSplit.lateLeaf(long)";
const CALLS: &str = "void JitSplit.calls(long)";
const TINY: &str = "long JitSplit.tiny(long)";

/// Removes a perf map file when dropped (the JVM leaves its own).
pub(crate) struct PerfMapFile(pub(crate) PathBuf);

impl PerfMapFile {
    pub(crate) fn of(pid: u32) -> PerfMapFile {
        PerfMapFile(PathBuf::from(format!("/tmp/perf-{pid}.map")))
    }
}

impl Drop for PerfMapFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `jcmd PID <command>`, which must succeed.
fn jcmd(pid: u32, command: &str) -> String {
    let out = Cmd::run(
        "jcmd",
        &[&pid.to_string(), command],
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "jcmd failed:\n{}", out.describe());
    out.stdout
}

/// The Java workload with these JVM flags and workload arguments, started,
/// ready, and with the methods of its rounds compiled by C2 (their last
/// tier: no newer code replaces them later).
fn start_java(flags: &[&str], extra_args: &[&str]) -> Workload {
    let methods = ["leafA(J)V", "leafB(J)V", "mid(J)V", "work(J)V"];
    start_java_compiling(flags, extra_args, &methods)
}

/// The same, waiting for C2 to compile `methods` only (named with their
/// descriptors, `leafA(J)V`).
fn start_java_compiling(flags: &[&str], extra_args: &[&str], methods: &[&str]) -> Workload {
    let mut args = vec![LONG.to_string(), "--ready".to_string()];
    args.extend(extra_args.iter().map(|a| a.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let target = Workload::start_command(java_command(flags, &args), "java");
    for method in methods {
        wait_for_c2(target.pid(), &format!("JitSplit.{method}"));
    }
    target
}

/// Profiles `target` (`attach`, `extra` added) until the session has
/// [`SPLIT_SAMPLES`] samples; the stopped session's profile, printed.
pub(crate) fn attach(h: &Harness, target: &Workload, extra: &[&str]) -> Profile {
    h.daemon.profile_until(target, SPLIT_SAMPLES, extra)
}

/// Under 1 % of the samples of `p` are in JIT code no map named.
pub(crate) fn assert_jit_named(p: &Profile) {
    let unnamed = unnamed_jit_pct(p);
    assert!(
        unnamed < 1.0,
        "{unnamed:.2} % in unnamed JIT code:\n{}",
        p.table()
    );
}

/// At most `pct` % of the stacks of `p` were cut short.
fn assert_truncated_at_most(p: &Profile, pct: u64) {
    let truncated = p.totals.truncated;
    assert!(
        truncated * 100 <= pct * p.totals.attributed,
        "{truncated} stacks truncated:\n{}",
        p.table()
    );
}

/// The share of samples whose innermost frame is unnamed JIT code.
pub(crate) fn unnamed_jit_pct(p: &Profile) -> f64 {
    p.functions
        .iter()
        .filter(|f| f.name.starts_with("[anon]+0x"))
        .map(|f| f.exclusive_pct)
        .sum()
}

/// The split and its callers by construction (see JitSplit.java).
pub(crate) fn assert_java_split(p: &Profile) {
    p.assert_pct_within(LEAF_A, Exclusive, 30.0, TOLERANCE);
    p.assert_pct_within(LEAF_B, Exclusive, 70.0, TOLERANCE);
    p.assert_pct_within(MID, Inclusive, 70.0, TOLERANCE);
    p.assert_pct_within(WORK, Inclusive, 100.0, TOLERANCE);
}

/// A map written by `jcmd Compiler.perfmap` while the JVM runs names its
/// compiled methods, and the callers of compiled frames are kept: the DWARF
/// unwinder steps through them by frame pointer, as `--unwind fp` does.
#[test]
fn java_split_and_callers_from_a_map_written_while_running() {
    let h = Harness::start();
    let target = start_java(&[], &[]);
    let _map = PerfMapFile::of(target.pid());
    jcmd(target.pid(), "Compiler.perfmap");
    let dwarf = attach(&h, &target, &[]);
    assert_java_split(&dwarf);
    assert_truncated_at_most(&dwarf, 1);
    let fp = attach(&h, &target, &["--unwind", "fp"]);
    assert_java_split(&fp);
}

/// Without -XX:+PreserveFramePointer compiled Java code uses rbp as a
/// general register: the DWARF unwinder steps through compiled frames by
/// their frame sizes in HotSpot's code cache (found through its VMStructs),
/// and the callers are kept.
#[test]
fn java_without_frame_pointers_keeps_the_callers() {
    let h = Harness::start();
    let target = start_java(&["-XX:-PreserveFramePointer"], &[]);
    let _map = PerfMapFile::of(target.pid());
    jcmd(target.pid(), "Compiler.perfmap");
    let p = attach(&h, &target, &[]);
    assert_java_split(&p);
    assert_truncated_at_most(&p, 2);
}

/// The same with `mid` never compiled: compiled `work` calls it in the
/// interpreter, which calls compiled `leafB`. The interpreted frame is
/// stepped by its rbp, and its compiled caller from the sp it saved (the
/// call grew the caller's frame by the arguments).
#[test]
fn java_without_frame_pointers_keeps_the_callers_of_interpreted_frames() {
    let h = Harness::start();
    let target = start_java_compiling(
        &[
            "-XX:-PreserveFramePointer",
            "-XX:CompileCommand=exclude,JitSplit::mid",
        ],
        &[],
        &["leafA(J)V", "leafB(J)V", "work(J)V"],
    );
    let _map = PerfMapFile::of(target.pid());
    jcmd(target.pid(), "Compiler.perfmap");
    let p = attach(&h, &target, &[]);
    p.assert_pct_within(LEAF_A, Exclusive, 30.0, TOLERANCE);
    p.assert_pct_within(LEAF_B, Exclusive, 70.0, TOLERANCE);
    p.assert_pct_within(WORK, Inclusive, 100.0, TOLERANCE);
    assert!(p.rows(MID).is_empty(), "mid was compiled:\n{}", p.table());
    assert_truncated_at_most(&p, 2);
}

/// The same with a method of a few instructions called in a loop: many
/// samples fall in its first and last instructions, where its frame is
/// being built or taken down, and are stepped by the instruction there.
#[test]
fn java_without_frame_pointers_keeps_the_callers_of_tiny_methods() {
    let h = Harness::start();
    let target = start_java_compiling(
        &["-XX:-PreserveFramePointer"],
        &["--calls"],
        &["calls(J)V", "tiny(J)J"],
    );
    let _map = PerfMapFile::of(target.pid());
    jcmd(target.pid(), "Compiler.perfmap");
    let p = attach(&h, &target, &[]);
    p.assert_pct_within(CALLS, Inclusive, 100.0, TOLERANCE);
    let tiny = p.rows(TINY).first().map_or(0.0, |f| f.exclusive_pct);
    assert!(tiny >= 20.0, "tiny has {tiny:.1} %:\n{}", p.table());
    assert_truncated_at_most(&p, 2);
}

/// `-XX:+DumpPerfMapAtExit` writes the map as the JVM exits: `profctl run`'s
/// final profile, and a later export of the ended session, name the frames.
#[test]
fn java_map_written_at_exit_names_the_final_profile() {
    let h = Harness::start();
    let java = java_command(&EXIT_MAP, &["5"]);
    let mut command = vec![java.get_program().to_str().unwrap().to_string()];
    command.extend(java.get_args().map(|a| a.to_str().unwrap().to_string()));
    let p = run_to_exit(&h, &command);
    let map = PerfMapFile::of(p.pid);
    assert!(map.0.exists(), "the JVM wrote no {}", map.0.display());
}

/// The same with the JVM in a mount namespace of its own, with its own
/// /tmp: the map, written there as the JVM exits, is read from that /tmp
/// after the exit (when the namespace and /proc/PID/root are gone).
#[test]
fn java_map_written_at_exit_in_its_own_mount_namespace_is_read() {
    let h = Harness::start();
    let mut args: Vec<String> = EXIT_MAP.iter().map(|a| a.to_string()).collect();
    args.push("5".into());
    let command = in_own_mount_namespace(&args);
    let p = run_to_exit(&h, &command);
    let ours = PerfMapFile::of(p.pid);
    assert!(
        !ours.0.exists(),
        "the JVM wrote {} outside its namespace",
        ours.0.display()
    );
}

/// The command running the Java workload (`JAVA_FLAGS`, then `args`: more
/// flags, `JitSplit`'s arguments after them) in a mount namespace of its
/// own with its own /tmp, in the directory of its classes. The classes are
/// under the daemon's /tmp, hidden once the tmpfs is mounted there: they
/// are copied in from the working directory. A relative path names a file
/// in the classes' directory, seen from both sides.
pub(crate) fn in_own_mount_namespace(args: &[String]) -> Vec<String> {
    let script = r#"set -e
cd "$1"
mount -t tmpfs profd-e2e /tmp
mkdir /tmp/classes
cp ./*.class /tmp/classes/
shift
exec "$@""#;
    let mut command: Vec<String> = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        script,
        "sh",
        java_classes().to_str().unwrap(),
        "java",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    command.extend(JAVA_FLAGS.iter().map(|a| a.to_string()));
    let flags = args.iter().take_while(|a| a.starts_with('-'));
    command.extend(flags.cloned());
    command.extend(["-cp", "/tmp/classes", "JitSplit"].map(String::from));
    command.extend(args.iter().skip_while(|a| a.starts_with('-')).cloned());
    command
}

/// The JVM flags that make it write its perf map as it exits.
const EXIT_MAP: [&str; 2] = ["-XX:+UnlockDiagnosticVMOptions", "-XX:+DumpPerfMapAtExit"];

/// `profctl run --format json -- <command>` of a JVM writing its perf map
/// at exit: its frames are named in the final profile and in a later
/// export of the ended session.
fn run_to_exit(h: &Harness, command: &[String]) -> Profile {
    let mut args = vec!["run", "--format", "json", "--"];
    args.extend(command.iter().map(String::as_str));
    let p = Profile::parse_run(&h.daemon.profctl(&args));
    eprintln!("{}", p.table());
    assert!(
        p.totals.attributed >= MIN_SAMPLES,
        "too few samples:\n{}",
        p.table()
    );
    // The whole run is profiled, JVM start and warm-up included (its
    // interpreted frames are named `Interpreter`): the leaves' ratio holds.
    let (a, b) = (p.function(LEAF_A).exclusive, p.function(LEAF_B).exclusive);
    let b_share = 100.0 * b as f64 / (a + b) as f64;
    eprintln!("  leafB / (leafA + leafB): {b_share:.2} %");
    assert!(
        (b_share - 70.0).abs() <= TOLERANCE,
        "leafB has {b_share:.2} % of the leaves' samples:\n{}",
        p.table()
    );
    assert_jit_named(&p);
    // Every later view of the ended session has the names too.
    let id = p.session_id.to_string();
    let again = Profile::parse(&h.daemon.profctl(&["export", &id, "--format", "json"]));
    assert_eq!(again.function(LEAF_B).exclusive, b, "{}", again.table());
    p
}

/// Code compiled after a first map was written is unnamed until the map is
/// written again; then the same session names it, for the samples taken
/// before the rewrite too. The daemon asks no JVM for its map itself
/// (`--no-ask-jvm`): the test rewrites it when it chooses.
#[test]
fn java_code_compiled_after_the_map_is_named_once_it_is_rewritten() {
    let h = Harness::start_with(&["--no-ask-jvm"]);
    let trigger = unique_dir("late").join("go");
    let target = start_java(&[], &["--late", trigger.to_str().unwrap()]);
    let pid = target.pid();
    let _map = PerfMapFile::of(pid);
    jcmd(pid, "Compiler.perfmap");
    let session = h.daemon.spawn_profctl(&[
        "attach",
        &pid.to_string(),
        "--duration",
        "10",
        "--format",
        "json",
    ]);
    std::fs::write(&trigger, "").expect("create the trigger file");
    wait_for_c2(pid, "JitSplit.lateLeaf(J)V");
    // Samples in lateLeaf's compiled code, before the map names it.
    std::thread::sleep(Duration::from_secs(2));
    let id = session_id(&h, pid);
    let before = Profile::parse(&h.daemon.profctl(&["export", &id, "--format", "json"]));
    eprintln!("before the rewrite:\n{}", before.table());
    assert!(
        before.rows(LATE_LEAF).is_empty(),
        "lateLeaf named before the map listed it:\n{}",
        before.table()
    );
    let unnamed = unnamed_jit_pct(&before);
    assert!(
        unnamed >= 5.0,
        "only {unnamed:.2} % in unnamed JIT code:\n{}",
        before.table()
    );
    jcmd(pid, "Compiler.perfmap");
    let after = Profile::parse(&session.wait(Duration::from_secs(60)));
    eprintln!("after the rewrite:\n{}", after.table());
    assert_jit_named(&after);
    // Named for all its samples: those before the rewrite too.
    let late = after.function(LATE_LEAF).exclusive;
    assert!(
        late > before.totals.attributed * 5 / 100,
        "lateLeaf has {late} samples:\n{}",
        after.table()
    );
}

/// Waits until the JVM lists a C2 (tier 4), non-OSR version of `method`.
fn wait_for_c2(pid: u32, method: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list = jcmd(pid, "Compiler.codelist");
        let compiled = list.lines().any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() > 3 && w[1] == "4" && w[2] == "0" && w[3] == method
        });
        if compiled {
            return;
        }
        assert!(Instant::now() < deadline, "{method} not compiled:\n{list}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The id of the daemon's session of `pid` (waiting for it to start).
fn session_id(h: &Harness, pid: u32) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = h.daemon.profctl(&["sessions"]);
        let pid = pid.to_string();
        let id = out.stdout.lines().find_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() > 1 && w[1] == pid).then(|| w[0].to_string())
        });
        if let Some(id) = id {
            return id;
        }
        assert!(
            Instant::now() < deadline,
            "no session of {pid}:\n{}",
            out.stdout
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// node --perf-basic-prof: the split and its callers, in both modes.
#[test]
fn node_split_and_callers_from_its_perf_map() {
    let h = Harness::start();
    let target = Workload::start_command(node_command(LONG), "node");
    let _map = PerfMapFile::of(target.pid());
    assert!(
        Path::new(&format!("/tmp/perf-{}.map", target.pid())).exists(),
        "node wrote no perf map"
    );
    for extra in [&[][..], &["--unwind", "fp"][..]] {
        let p = attach(&h, &target, extra);
        assert_js_split(&p);
    }
}

/// The split and its callers by construction (see jit_split.js): inclusive
/// shares of `work`, as every iteration runs in `spin`, under leafA or
/// leafB. `work` holds most of the session: the rest is node's start and
/// exit, in a session that covers them (more of it on a busy machine,
/// where the work's fixed time gets less CPU).
fn assert_js_split(p: &Profile) {
    let work = p.js_pct("work", Inclusive);
    eprintln!("  {} work Inclusive: {work:.2} % of the session", p.unwind);
    assert!(work >= 80.0, "work holds {work:.2} %:\n{}", p.table());
    for (name, expected) in [
        ("leafA", 30.0),
        ("leafB", 70.0),
        ("mid", 70.0),
        ("spin", 100.0),
    ] {
        let got = p.js_pct(name, Inclusive) * 100.0 / work;
        eprintln!("  {} {name} Inclusive: {got:.2} % of work", p.unwind);
        assert!(
            (got - expected).abs() <= TOLERANCE,
            "{name} holds {got:.2} % of work's samples, expected {expected} ± {TOLERANCE}:\n{}",
            p.table()
        );
    }
}

/// node --perf-prof writes a jitdump (`jit-<pid>.dump` in its working
/// directory, with each optimized function's unwind tables under
/// --perf-prof-unwinding-info) and no perf map. V8 writes it through a
/// 4 KiB buffer, so the records of the code compiled last reach the file
/// only as the process exits: each session lasts until node exits, and its
/// final profile names every frame from the dump, read as it grew and once
/// more after the exit. The split and its callers hold in both modes; the
/// DWARF unwinder walks the optimized frames with their tables.
#[test]
fn node_split_and_callers_from_its_jitdump() {
    let h = Harness::start();
    for extra in [&[][..], &["--unwind", "fp"][..]] {
        let flags = ["--perf-prof", "--perf-prof-unwinding-info"];
        let command = node_command_with(&flags, 6.0);
        let dir = command.get_current_dir().unwrap().to_path_buf();
        let target = Workload::start_command(command, "node");
        let pid = target.pid_arg();
        let mut args = vec!["attach", &pid, "--format", "json"];
        args.extend_from_slice(extra);
        let p = Profile::parse(&h.daemon.profctl(&args));
        eprintln!("{}", p.table());
        let dump = dir.join(format!("jit-{pid}.dump"));
        assert!(dump.exists(), "node wrote no {}", dump.display());
        let map = PerfMapFile::of(target.pid());
        assert!(!map.0.exists(), "node wrote {}", map.0.display());
        assert!(
            p.totals.attributed >= MIN_SAMPLES,
            "too few samples:\n{}",
            p.table()
        );
        assert_js_split(&p);
        assert_jit_named(&p);
        if p.unwind == "dwarf" {
            assert_truncated_at_most(&p, 1);
        }
    }
}

/// JIT stacks are deep: a node target gets the largest stack copy unless
/// the caller asks for another size, and stacks cut where a smaller copy
/// ended are counted and named in the table, with the flag that helps.
#[test]
fn node_gets_the_largest_stack_copy_and_a_short_copy_is_named() {
    let h = Harness::start();
    let target = Workload::start_command(node_command(LONG), "node");
    let _map = PerfMapFile::of(target.pid());
    let whole = attach(&h, &target, &[]);
    assert_eq!(whole.stack_bytes, 65528, "{}", whole.table());
    assert_eq!(whole.totals.truncated_copy_ended, 0, "{}", whole.table());
    let short = attach(&h, &target, &["--stack-bytes", "2048"]);
    let (ended, all) = (short.totals.truncated_copy_ended, short.totals.attributed);
    assert!(
        ended * 10 >= all * 9 && ended <= short.totals.truncated,
        "{ended} of {all} stacks cut by a 2048-byte copy:\n{}",
        short.table()
    );
    let pid = target.pid_arg();
    let out = h.daemon.profctl(&[
        "attach",
        &pid,
        "--duration",
        "2",
        "--stack-bytes",
        "2048",
        "--no-tui",
    ]);
    out.assert_success();
    assert!(
        out.stdout
            .contains("truncated where the 2048-byte stack copy ended: try --stack-bytes 65528"),
        "{}",
        out.stdout
    );
}

/// CPython 3.13 `-X perf_jit` writes a jitdump (`/tmp/jit-<pid>.dump`): a
/// trampoline per Python function, named `py::<function>:<file>`, with its
/// unwind tables (the trampolines keep no frame pointer). CPython writes
/// the dump through a buffer too, so the session lasts until python exits:
/// the trampolines are named from the dump, and the DWARF unwinder walks
/// through them, so `outer`'s trampoline is on every stack of the split.
/// It needs CPython 3.13 (`PROFD_TEST_PYTHON313`, else `python3.13` on the
/// PATH), which Debian 12 has not: CI does not run it; run it by name with
/// `--ignored` where one is installed. It fails when none is found.
#[test]
#[ignore = "needs CPython 3.13: PROFD_TEST_PYTHON313=/path/to/python3.13, run with --ignored"]
fn python_trampolines_named_and_unwound_from_their_jitdump() {
    let h = Harness::start();
    let python = crate::interpreters::python313();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/py_split.py");
    // The trampolines of outer, hot_a and hot_b are written as they are
    // first called, into CPython's buffer: a thread writes 200 more (of
    // functions run once), which pushes them into the file, then says
    // "ready".
    let wrapper = r#"import runpy, sys, threading, time
def more():
    time.sleep(0.5)
    for i in range(200):
        exec(f"def f{i}(): pass\nf{i}()")
    print("ready", flush=True)
threading.Thread(target=more).start()
sys.argv = [sys.argv[1], "8", "split", "--quiet"]
runpy.run_path(sys.argv[0], run_name="__main__")"#;
    let mut command = std::process::Command::new(&python);
    command.args(["-X", "perf_jit", "-c", wrapper]).arg(&script);
    let target = Workload::start_command(command, "python3.13");
    let pid = target.pid_arg();
    let p = Profile::parse(&h.daemon.profctl(&["attach", &pid, "--format", "json"]));
    eprintln!("{}", p.table());
    let dump = PerfMapFile(PathBuf::from(format!("/tmp/jit-{pid}.dump")));
    assert!(dump.0.exists(), "{python} wrote no {}", dump.0.display());
    assert!(
        p.totals.attributed >= MIN_SAMPLES,
        "too few samples:\n{}",
        p.table()
    );
    let trampoline = |name: &str, measure| -> f64 {
        let prefix = format!("py::{name}:");
        (p.functions.iter())
            .filter(|f| f.name.starts_with(&prefix))
            .map(|f| f.pct(measure))
            .sum()
    };
    for (name, expected) in [("outer", 100.0), ("hot_a", 75.0), ("hot_b", 25.0)] {
        let got = trampoline(name, Inclusive);
        eprintln!("  py::{name} Inclusive: {got:.2} %");
        assert!(
            (got - expected).abs() <= TOLERANCE,
            "py::{name} is on {got:.2} % of the stacks, expected {expected} ± {TOLERANCE}:\n{}",
            p.table()
        );
    }
    assert_jit_named(&p);
}
