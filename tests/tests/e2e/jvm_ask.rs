//! End-to-end tests of the daemon asking JVMs for their perf map itself
//! (`jcmd PID Compiler.perfmap` through HotSpot's attach mechanism, with no
//! jcmd run): a JVM whose code is compiled during the attach is named with
//! its split and callers, in profd's mount namespace and in one of its own;
//! a JVM with its attach mechanism off is never signalled (no thread dump)
//! and `info` and the metrics say so, nor is one run with -Xrs (SIGQUIT
//! would end it); `jit.ask_jvm = false` asks nothing.
//! The workload is `tests/workloads/JitSplit.java` (see `jit`). They fail
//! (never skip) when java or javac is missing.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::jit::{
    assert_java_split, assert_jit_named, attach, in_own_mount_namespace, unnamed_jit_pct,
    PerfMapFile, LATE_LEAF, LEAF_A, LEAF_B, LONG, MID, MIN_SAMPLES, TOLERANCE, WORK,
};
use profd_e2e::{
    java_classes, java_command, metrics, require_root_and_perf, serial, tls::free_port, unique_dir,
    wait_until, Daemon, Harness, Profile, Workload,
};

/// The `profctl info` line of the daemon's last ask of JVM `pid`, if any.
fn asked(daemon: &Daemon, pid: u32) -> Option<String> {
    let out = daemon.profctl(&["info"]);
    out.assert_success();
    let head = format!("jvm pid {pid}:");
    out.stdout.lines().find_map(|l| {
        l.trim_start()
            .strip_prefix(&head)
            .map(|r| r.trim().to_string())
    })
}

/// The perf map file of `pid` as the process sees it (its own /tmp).
fn its_map(pid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/root/tmp/perf-{pid}.map"))
}

/// A share of `of`, in percent.
fn pct(n: u64, of: u64) -> f64 {
    100.0 * n as f64 / of.max(1) as f64
}

/// Attach to the JVM `target` (started with `--late FILE`, its rounds
/// compiled by now or soon), wait for the daemon to have asked it for its
/// map, then create `late`: from then on each round also runs `late` →
/// `lateLeaf`, code interpreted, then compiled (and compiled again) during
/// the attach, after the first map. The final profile names it all, with
/// the split of `work` and its callers as by construction.
fn named_over_a_recompilation(h: &Harness, target: &Workload, late: &Path) {
    let pid = target.pid();
    assert!(
        !its_map(pid).exists(),
        "a perf map before anything asked for one"
    );
    let session = h.daemon.spawn_profctl(&[
        "attach",
        &pid.to_string(),
        "--duration",
        "12",
        "--format",
        "json",
    ]);
    let first = wait_until("the daemon asking the JVM", Duration::from_secs(30), || {
        asked(&h.daemon, pid)
    });
    assert!(first.contains(": ok at "), "the first ask: {first}");
    assert!(its_map(pid).exists(), "the JVM wrote no map: {first}");
    std::fs::write(late, "").expect("create the trigger file");
    let p = Profile::parse(&session.wait(Duration::from_secs(60)));
    eprintln!("{}", p.table());
    let total = p.totals.attributed;
    assert!(total >= MIN_SAMPLES, "too few samples:\n{}", p.table());
    assert_jit_named(&p);
    // The late code: named, for a good part of the time (its caller, run
    // a few hundred times a second, is interpreted for a while).
    let late_leaf = p.function(LATE_LEAF).exclusive;
    eprintln!("  lateLeaf {:.2} %", pct(late_leaf, total));
    assert!(pct(late_leaf, total) >= 10.0, "{}", p.table());
    // The rest is `work`'s, with its split.
    let rest = total - late_leaf;
    let share = |name: &str, incl: bool| {
        let f = p.function(name);
        pct(if incl { f.inclusive } else { f.exclusive }, rest)
    };
    let work = share(WORK, true);
    eprintln!(
        "  of the rest: work {work:.2} % inclusive, leafA {:.2} %, leafB {:.2} %, mid {:.2} %",
        share(LEAF_A, false),
        share(LEAF_B, false),
        share(MID, true)
    );
    assert!(work >= 97.0, "work {work:.2} % inclusive:\n{}", p.table());
    for (name, incl, expected) in [
        (LEAF_A, false, 30.0),
        (LEAF_B, false, 70.0),
        (MID, true, 70.0),
    ] {
        let got = share(name, incl);
        assert!(
            (got - expected).abs() <= TOLERANCE,
            "{name}: {got:.2} % of work's samples, expected {expected} ± {TOLERANCE}:\n{}",
            p.table()
        );
    }
    let last = asked(&h.daemon, pid).expect("the ask is listed");
    eprintln!("  info: {last}");
    assert!(last.contains(": ok at "), "{last}");
    assert!(!last.contains("(1 ask)"), "asked once only: {last}");
}

/// A JVM that no one asked for a map is asked by the daemon, again as its
/// code is compiled during the attach; no jcmd is run.
#[test]
fn java_asked_for_its_map_is_named_over_a_recompilation() {
    let h = Harness::start();
    let late = unique_dir("late").join("go");
    let target = Workload::start_command(
        java_command(
            &[],
            &[
                &LONG.to_string(),
                "--ready",
                "--late",
                late.to_str().unwrap(),
            ],
        ),
        "java",
    );
    let _map = PerfMapFile::of(target.pid());
    named_over_a_recompilation(&h, &target, &late);
}

/// The same with the JVM in a mount namespace of its own: its hsperfdata,
/// socket and map are in its own /tmp, reached through /proc/PID/root.
#[test]
fn java_in_its_own_mount_namespace_is_asked_for_its_map() {
    let h = Harness::start();
    // In the classes' directory (the test process's own), the JVM's
    // working directory.
    let name = "late-ns-go";
    let late = java_classes().join(name);
    let args: Vec<String> = [&LONG.to_string(), "--ready", "--late", name]
        .iter()
        .map(|a| a.to_string())
        .collect();
    let command = in_own_mount_namespace(&args);
    let mut java = Command::new(&command[0]);
    java.args(&command[1..]);
    let target = Workload::start_command(java, "java");
    assert!(
        !PerfMapFile::of(target.pid()).0.exists(),
        "a map in profd's /tmp"
    );
    named_over_a_recompilation(&h, &target, &late);
    let ours = PerfMapFile::of(target.pid());
    assert!(
        !ours.0.exists(),
        "the JVM wrote {} outside its namespace",
        ours.0.display()
    );
    let _ = std::fs::remove_file(&late);
}

/// A JVM started with these flags and environment, its output (a thread
/// dump included) in a file; killed when dropped.
struct Jvm {
    child: Child,
    out: PathBuf,
}

impl Jvm {
    fn start(flags: &[&str], env: &[(&str, &str)]) -> Jvm {
        let out = unique_dir("jvm").join("out");
        let file = std::fs::File::create(&out).unwrap();
        let mut command = java_command(flags, &[&LONG.to_string(), "--ready"]);
        command
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file);
        let child = command.spawn().expect("start java");
        let jvm = Jvm { child, out };
        // Left by a JVM that had this pid before and was killed (pids come
        // round in a long run): this one has not been asked for anything.
        jvm.remove_attach_files();
        wait_until("the JVM ready", Duration::from_secs(60), || {
            jvm.output().contains("ready").then_some(())
        });
        jvm
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// The attach files of the JVM's pid in /tmp: its socket and a trigger
    /// file.
    fn remove_attach_files(&self) {
        let pid = self.child.id();
        for name in [format!(".java_pid{pid}"), format!(".attach_pid{pid}")] {
            let _ = std::fs::remove_file(Path::new("/tmp").join(name));
        }
    }
}

impl Drop for Jvm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(format!("/tmp/perf-{}.map", self.child.id()));
        self.remove_attach_files();
    }
}

/// Whether the JVM `pid` was sent SIGQUIT: it made the attach trigger file
/// or opened its socket, or printed a thread dump.
fn signalled(jvm: &Jvm) -> Option<String> {
    let pid = jvm.child.id();
    let out = jvm.output();
    for path in [
        format!("/tmp/.attach_pid{pid}"),
        format!("/proc/{pid}/cwd/.attach_pid{pid}"),
        format!("/tmp/.java_pid{pid}"),
    ] {
        if Path::new(&path).exists() {
            return Some(format!("{path} exists"));
        }
    }
    out.contains("Full thread dump")
        .then(|| format!("it printed a thread dump:\n{out}"))
}

/// A JVM with its attach mechanism off, known from its hsperfdata, or from
/// its options when it keeps none: the session ends as asked, the JVM is
/// not signalled (no thread dump), and info and the metrics say why.
#[test]
fn java_with_attach_off_is_never_signalled_and_said_so() {
    let _serial = serial();
    require_root_and_perf();
    let addr = format!("127.0.0.1:{}", free_port());
    let daemon = Daemon::start_with(&["--metrics", &addr]);
    let off = [
        (vec!["-XX:+DisableAttachMechanism"], vec![], "hsperfdata"),
        (
            vec!["-XX:-UsePerfData"],
            vec![("JAVA_TOOL_OPTIONS", "-XX:+DisableAttachMechanism")],
            "options",
        ),
    ];
    for (n, (flags, env, known_by)) in off.iter().enumerate() {
        let jvm = Jvm::start(flags, env);
        let pid = jvm.child.id();
        let run = daemon.profctl(&[
            "attach",
            &pid.to_string(),
            "--duration",
            "4",
            "--format",
            "json",
        ]);
        let p = Profile::parse(&run);
        assert_eq!(p.state, "duration_elapsed", "{}", p.table());
        let said = asked(&daemon, pid).expect("the JVM is listed in info");
        eprintln!("  {flags:?} {env:?}: {said}");
        assert!(said.contains(": attach disabled at "), "{said}");
        assert!(said.contains(known_by), "{said}");
        // A thread dump is printed at once: a moment for one to show.
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(signalled(&jvm), None);
        let text = metrics::scrape(&addr);
        let refused = metrics::sample(
            &text,
            "profd_jvm_perfmap_requests_total{result=\"attach_disabled\"}",
        );
        assert!(refused > n as f64, "{text}");
        assert_eq!(
            metrics::sample(&text, "profd_jvm_perfmap_requests_total{result=\"ok\"}"),
            0.0
        );
    }
}

/// `jit.ask_jvm = false` in the settings file: no JVM is asked (no trigger
/// file, no socket, no map), its code stays unnamed, and info says so.
#[test]
fn java_is_not_asked_with_ask_jvm_off() {
    let _serial = serial();
    require_root_and_perf();
    let config = unique_dir("ask-off").join("profd.toml");
    std::fs::write(&config, "[jit]\nask_jvm = false\n").unwrap();
    let daemon = Daemon::start_with(&["--config", config.to_str().unwrap()]);
    let jvm = Jvm::start(&[], &[]);
    let pid = jvm.child.id();
    let p = Profile::parse(&daemon.profctl(&[
        "attach",
        &pid.to_string(),
        "--duration",
        "4",
        "--format",
        "json",
    ]));
    eprintln!("{}", p.table());
    let unnamed = unnamed_jit_pct(&p);
    assert!(unnamed >= 50.0, "{unnamed:.2} % unnamed:\n{}", p.table());
    assert_eq!(signalled(&jvm), None);
    assert!(!its_map(pid).exists(), "the JVM wrote a map");
    assert_eq!(asked(&daemon, pid), None);
    let info = daemon.profctl(&["info"]).stdout;
    assert!(
        info.contains("jvm perf maps:        never asked (jit.ask_jvm = false)"),
        "{info}"
    );
}

/// The split and callers of a JVM attached right after its warm-up (C2
/// compiling its methods about then), its map asked for by the daemon.
#[test]
fn java_attached_after_its_warm_up_is_named_without_jcmd() {
    let h = Harness::start();
    let target =
        Workload::start_command(java_command(&[], &[&LONG.to_string(), "--ready"]), "java");
    let _map = PerfMapFile::of(target.pid());
    let p = attach(&h, &target, &[]);
    assert_java_split(&p);
    assert_jit_named(&p);
}

/// A JVM run with -Xrs leaves SIGQUIT to its default action, ending it: it
/// opens its socket as it starts, and is asked through it; once the socket
/// is gone it is not signalled to open another (it lives on, unnamed), and
/// info says why.
#[test]
fn java_with_reduced_signal_usage_is_asked_only_through_its_socket() {
    let h = Harness::start();
    let with_socket = Jvm::start(&["-Xrs"], &[]);
    let without = Jvm::start(&["-Xrs"], &[]);
    let gone = format!("/tmp/.java_pid{}", without.child.id());
    std::fs::remove_file(&gone).unwrap_or_else(|e| panic!("{gone}: {e}"));
    for (jvm, result) in [(&with_socket, ": ok at "), (&without, ": unsure at ")] {
        let pid = jvm.child.id();
        let run = h.daemon.profctl(&[
            "attach",
            &pid.to_string(),
            "--duration",
            "3",
            "--format",
            "json",
        ]);
        let p = Profile::parse(&run);
        let said = asked(&h.daemon, pid).expect("the JVM is listed in info");
        eprintln!("  {pid}: {said}");
        assert!(said.contains(result), "{said}");
        assert_eq!(its_map(pid).exists(), result == ": ok at ", "{said}");
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "the JVM ended:\n{}",
            p.table()
        );
    }
    assert!(!Path::new(&gone).exists(), "it opened its socket again");
}
