//! profd run the way profd.service runs it, on the real kernel: the socket
//! passed by systemd-socket-activate (LISTEN_FDS), NOTIFY_SOCKET for
//! READY=1 and STOPPING=1, a mount namespace of
//! its own in which the targets' directories are hidden (as PrivateTmp hides
//! /tmp), and only the unit's capabilities (setpriv, no new privileges).
//! With all of them, profd names the functions of another user's private
//! binary, of a deleted binary, of the kernel and of a Python script, and
//! asks another user's JVM for its perf map; without any one of them,
//! something it must do fails. Under strace, every system call it makes is
//! one the unit's SystemCallFilter allows.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use profd_e2e::users::{chmod, public_dir, test_users, User};
use profd_e2e::{
    bin, build_workload, java_classes, path_str, read_sysctl, require_root_and_perf, serial,
    unique_dir, CmdOutput, Profile, Workload, JAVA_FLAGS,
};

use super::{deploy, tool, Unit, UNIT_CAPS};

/// How long profd may take to say READY=1 after its first connection.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// profd started as the unit starts it.
struct UnitDaemon {
    child: Child,
    /// Whether `child` is strace (profd is then its child).
    traced: bool,
    socket: PathBuf,
    log: PathBuf,
    notify: UnixDatagram,
}

impl UnitDaemon {
    /// Starts it with the capabilities `caps` (`CAP_...`), `hidden` made an
    /// empty directory in its mount namespace, and the whole process tree
    /// under strace writing to `trace` when given. profd itself starts on
    /// the first connection to the socket.
    fn start(caps: &[&str], hidden: &Path, trace: Option<&Path>) -> UnitDaemon {
        let dir = unique_dir("unit");
        let socket = dir.join("profd.sock");
        let log = dir.join("profd.log");
        let notify_path = dir.join("notify.sock");
        let notify = UnixDatagram::bind(&notify_path).expect("bind the notify socket");
        notify
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let bounding = std::iter::once("-all".to_string())
            .chain(
                caps.iter()
                    .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase())),
            )
            .collect::<Vec<_>>()
            .join(",");
        let profd = bin("profd");
        let state = dir.join("state");
        let mut argv: Vec<String> = Vec::new();
        if let Some(trace) = trace {
            argv.extend(["strace", "-f", "-qq", "-o", path_str(trace), "--"].map(String::from));
        }
        argv.extend(
            [
                "systemd-socket-activate",
                "-l",
                path_str(&socket),
                // It passes on only the variables it is told to.
                "-E",
                "NOTIFY_SOCKET",
                "--",
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                "mount -t tmpfs -o size=1m,mode=0755 profd-hidden \"$0\" && exec \"$@\"",
                path_str(hidden),
                "setpriv",
                "--no-new-privs",
                "--inh-caps=-all",
                "--ambient-caps=-all",
                &format!("--bounding-set={bounding}"),
                "--",
                path_str(&profd),
                "--config",
                path_str(&deploy("profd.toml")),
                "--state-dir",
                path_str(&state),
            ]
            .map(|s| s.to_string()),
        );
        let log_file = std::fs::File::create(&log).unwrap();
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .env("NOTIFY_SOCKET", &notify_path)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} (install systemd, util-linux, strace): {e}",
                    argv[0]
                )
            });
        let daemon = UnitDaemon {
            child,
            traced: trace.is_some(),
            socket,
            log,
            notify,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !daemon.socket.exists() {
            assert!(
                Instant::now() < deadline,
                "systemd-socket-activate made no socket:\n{}",
                daemon.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        daemon
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn profctl(&self, args: &[&str]) -> CmdOutput {
        let mut all = vec!["--socket", path_str(&self.socket)];
        all.extend_from_slice(args);
        profd_e2e::run_profctl(&all, &[])
    }

    /// Connects (which starts profd), asks for health and waits for
    /// READY=1 on the notify socket; returns the notifications.
    fn wait_ready(&self) -> String {
        let health = self.profctl(&["health"]);
        assert!(
            health.status.success() && health.stdout.contains("SERVING"),
            "profd under the unit's settings does not serve:\n{}\n--- log ---\n{}",
            health.describe(),
            self.log()
        );
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut said = String::new();
        let mut buf = [0u8; 4096];
        while !said.lines().any(|l| l == "READY=1") {
            assert!(
                Instant::now() < deadline,
                "no READY=1 on NOTIFY_SOCKET (got {said:?}):\n{}",
                self.log()
            );
            if let Ok(n) = self.notify.recv(&mut buf) {
                said.push_str(&String::from_utf8_lossy(&buf[..n]));
                said.push('\n');
            }
        }
        said
    }

    /// A 1.5 s JSON profile of `pid`.
    fn profile(&self, pid: u32) -> Result<Profile, String> {
        let pid = pid.to_string();
        let out = self.profctl(&["attach", &pid, "--duration", "1.5", "--format", "json"]);
        if !out.status.success() {
            return Err(out.stderr.trim().to_string());
        }
        Ok(Profile::parse(&out))
    }

    /// SIGTERM, and its exit status (0 expected), with STOPPING=1 said.
    fn stop(mut self) -> String {
        // The command execs down to profd: its pid, or strace's child.
        let pid = if self.traced {
            let id = self.child.id();
            let children = std::fs::read_to_string(format!("/proc/{id}/task/{id}/children"))
                .expect("read strace's children");
            children
                .split_whitespace()
                .next()
                .expect("strace has a child")
                .to_string()
        } else {
            self.child.id().to_string()
        };
        let kill = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(kill.success(), "kill -TERM {pid}");
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "profd did not stop:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            status.success(),
            "profd exited with {status}:\n{}",
            self.log()
        );
        let mut said = String::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = self.notify.recv(&mut buf) {
            said.push_str(&String::from_utf8_lossy(&buf[..n]));
            said.push('\n');
        }
        said
    }
}

impl Drop for UnitDaemon {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- profd log ---\n{}", self.log());
        }
    }
}

/// The targets: `spin_other` run by alice from a directory only she may
/// enter (hidden in profd's mount namespace), and from a file deleted after
/// it started; `dd` by alice, which spends its time in the kernel.
struct Targets {
    /// The directory hidden from profd.
    hidden: PathBuf,
    private: Workload,
    deleted: Workload,
    kernel: Workload,
    /// Debian's python3 running tests/workloads/py_split.py.
    python: Workload,
    /// A JVM of alice's running tests/workloads/JitSplit.java, with no
    /// perf map but what profd has it write (removed at the end).
    jvm: Workload,
    _jvm_map: crate::jit::PerfMapFile,
}

impl Targets {
    fn start(alice: &User) -> Targets {
        let exe = build_workload("spin_other");
        let hidden = public_dir("hidden");
        let private_dir = hidden.join("alice");
        std::fs::create_dir(&private_dir).unwrap();
        let private_exe = private_dir.join("spin_other");
        std::fs::copy(&exe, &private_exe).unwrap();
        chown(&private_dir, alice);
        chown(&private_exe, alice);
        chmod(&private_exe, 0o700);
        chmod(&private_dir, 0o700);
        let mut command = alice.command(&private_exe);
        command.args(["120", "--ready"]);
        let private = Workload::start_command(command, "spin_other");

        let public = public_dir("deleted");
        let deleted_exe = public.join("spin_other");
        std::fs::copy(&exe, &deleted_exe).unwrap();
        chmod(&deleted_exe, 0o755);
        let mut command = alice.command(&deleted_exe);
        command.args(["120", "--ready"]);
        let deleted = Workload::start_command(command, "spin_other");
        std::fs::remove_file(&deleted_exe).unwrap();

        let mut command = alice.command(Path::new("/bin/sh"));
        command.args([
            "-c",
            "echo ready; exec dd if=/dev/zero of=/dev/null bs=1M count=100000000",
        ]);
        let kernel = Workload::start_command(command, "dd");

        let script = public.join("py_split.py");
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/py_split.py");
        std::fs::copy(source, &script).unwrap();
        chmod(&script, 0o644);
        let mut command = alice.command(Path::new("/usr/bin/python3"));
        command.arg(&script).args(["120", "split"]);
        let python = Workload::start_command(command, "python3");

        let classes = public_dir("java");
        std::fs::copy(
            java_classes().join("JitSplit.class"),
            classes.join("JitSplit.class"),
        )
        .unwrap();
        chmod(&classes.join("JitSplit.class"), 0o644);
        let mut command = alice.command(Path::new("/usr/bin/java"));
        command
            .current_dir(&classes)
            .args(JAVA_FLAGS)
            .arg("-cp")
            .arg(&classes)
            .args(["JitSplit", "120", "--ready"]);
        let jvm = Workload::start_command(command, "java");
        let _jvm_map = crate::jit::PerfMapFile::of(jvm.pid());
        Targets {
            hidden,
            private,
            deleted,
            kernel,
            python,
            jvm,
            _jvm_map,
        }
    }
}

fn chown(path: &Path, user: &User) {
    std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid))
        .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
}

/// Samples whose function profd named in the target's own code.
fn named_spin(profile: &Profile) -> u64 {
    profile
        .functions
        .iter()
        .filter(|f| f.name == "other_process_spin")
        .map(|f| f.exclusive)
        .sum()
}

/// Exclusive samples in kernel functions: (named, unnamed).
fn kernel_samples(profile: &Profile) -> (u64, u64) {
    let kernel = profile.functions.iter().filter(|f| f.module == "[kernel]");
    let (named, unnamed): (Vec<_>, Vec<_>) = kernel.partition(|f| !f.name.contains("0x"));
    (
        named.iter().map(|f| f.exclusive).sum(),
        unnamed.iter().map(|f| f.exclusive).sum(),
    )
}

/// What each scenario needs; the scenarios a missing capability breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Scenario {
    /// Any session at all.
    Sampling,
    /// alice's binary in a 0700 directory profd's namespace does not show.
    PrivateBinary,
    /// A binary deleted after its process started.
    DeletedBinary,
    /// Kernel function names.
    KernelNames,
    /// Python functions, read at each sample.
    PythonFrames,
    /// A JVM of another user asked for its perf map.
    JvmAsked,
}

/// Runs the scenarios against a daemon; returns which worked, with the
/// reason of each failure.
fn run_scenarios(
    daemon: &UnitDaemon,
    targets: &Targets,
    scenarios: &[Scenario],
) -> BTreeMap<Scenario, Result<(), String>> {
    let mut results = BTreeMap::new();
    for &scenario in scenarios {
        let result = match scenario {
            Scenario::Sampling => daemon.profile(targets.private.pid()).and_then(|p| {
                (p.totals.attributed > 0)
                    .then_some(())
                    .ok_or_else(|| format!("no samples:\n{}", p.table()))
            }),
            Scenario::PrivateBinary | Scenario::DeletedBinary => {
                let target = match scenario {
                    Scenario::PrivateBinary => &targets.private,
                    _ => &targets.deleted,
                };
                daemon.profile(target.pid()).and_then(|p| {
                    let named = named_spin(&p);
                    (named * 2 > p.totals.attributed)
                        .then_some(())
                        .ok_or_else(|| format!("other_process_spin unnamed:\n{}", p.table()))
                })
            }
            Scenario::KernelNames => daemon.profile(targets.kernel.pid()).and_then(|p| {
                let (named, unnamed) = kernel_samples(&p);
                (named > 0 && named >= unnamed * 4)
                    .then_some(())
                    .ok_or_else(|| {
                        format!(
                            "kernel samples {named} named, {unnamed} not:\n{}",
                            p.table()
                        )
                    })
            }),
            Scenario::PythonFrames => daemon.profile(targets.python.pid()).and_then(|p| {
                let unreadable = p.totals.python_unreadable;
                let named = p.functions.iter().any(|f| f.name == "py_split.outer");
                // profctl info says why frames are not read.
                let info = daemon.profctl(&["info"]).stdout;
                let said = info
                    .lines()
                    .find(|l| l.trim_start().starts_with("python frames:"))
                    .unwrap_or("no python frames line in profctl info")
                    .trim()
                    .to_string();
                (named && unreadable * 10 < p.totals.attributed)
                    .then_some(())
                    .ok_or_else(|| {
                        format!(
                            "{said}; {unreadable} of {} samples unreadable:\n{}",
                            p.totals.attributed,
                            p.table()
                        )
                    })
            }),
            Scenario::JvmAsked => {
                // The map an earlier daemon had written would name the
                // code: this daemon must ask for its own.
                let map = format!("/tmp/perf-{}.map", targets.jvm.pid());
                let _ = std::fs::remove_file(map);
                daemon
                    .profile(targets.jvm.pid())
                    .and_then(|_| jvm_asked(daemon, targets.jvm.pid()))
            }
        };
        results.insert(scenario, result);
    }
    results
}

/// What `profctl info` says of the daemon's ask of JVM `pid` for its perf
/// map, once the ask has an answer (the session asks it off its thread:
/// info is read again until it lists the JVM, for 20 s at most); Err
/// unless the JVM wrote its map.
fn jvm_asked(daemon: &UnitDaemon, pid: u32) -> Result<(), String> {
    let prefix = format!("jvm pid {pid}:");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info = daemon.profctl(&["info"]).stdout;
        let line = info.lines().map(str::trim).find(|l| l.starts_with(&prefix));
        match line {
            Some(l) if l.contains(": ok at") => return Ok(()),
            Some(l) => return Err(l.to_string()),
            None if Instant::now() > deadline => {
                return Err(format!("the JVM was not asked:\n{info}"))
            }
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// The unit's capability set is what profd.service says, and it is enough:
/// every scenario works, READY=1 and STOPPING=1 are said. Without any one
/// of its capabilities, the scenario that capability serves fails.
#[test]
fn unit_capabilities_are_enough_and_each_is_needed() {
    let _serial = serial();
    require_root_and_perf();
    let unit = Unit::load(&deploy("profd.service"));
    let caps: BTreeSet<String> = unit.words("Service", "CapabilityBoundingSet");
    let want: BTreeSet<String> = UNIT_CAPS.iter().map(|c| c.to_string()).collect();
    assert_eq!(caps, want);
    let alice = &test_users().alice;
    let targets = Targets::start(alice);
    // Kernel names need CAP_SYSLOG unless kallsyms shows addresses to all
    // (kptr_restrict 0 with perf_event_paranoid <= 1); with kptr_restrict 2
    // nobody sees them.
    let kptr_restrict = read_sysctl("/proc/sys/kernel/kptr_restrict");
    let paranoid = read_sysctl("/proc/sys/kernel/perf_event_paranoid");
    let kernel_names_testable = kptr_restrict < 2;
    let syslog_needed = !(kptr_restrict == 0 && paranoid <= 1);
    eprintln!("kptr_restrict {kptr_restrict}, perf_event_paranoid {paranoid}");

    let all = [
        Scenario::Sampling,
        Scenario::PrivateBinary,
        Scenario::DeletedBinary,
        Scenario::KernelNames,
        Scenario::PythonFrames,
        Scenario::JvmAsked,
    ];
    let scenarios: Vec<Scenario> = all
        .into_iter()
        .filter(|s| *s != Scenario::KernelNames || kernel_names_testable)
        .collect();
    let daemon = UnitDaemon::start(UNIT_CAPS, &targets.hidden, None);
    let said = daemon.wait_ready();
    assert!(said.contains("STATUS="), "{said}");
    for (scenario, result) in run_scenarios(&daemon, &targets, &scenarios) {
        if let Err(reason) = result {
            panic!("{scenario:?} fails with the unit's capabilities: {reason}");
        }
    }
    let said = daemon.stop();
    assert!(
        said.lines().any(|l| l == "STOPPING=1"),
        "no STOPPING=1: {said:?}"
    );

    for (missing, breaks) in [
        ("CAP_PERFMON", Scenario::Sampling),
        ("CAP_SYS_PTRACE", Scenario::PrivateBinary),
        ("CAP_DAC_READ_SEARCH", Scenario::PrivateBinary),
        ("CAP_CHECKPOINT_RESTORE", Scenario::DeletedBinary),
        ("CAP_SYSLOG", Scenario::KernelNames),
        ("CAP_BPF", Scenario::PythonFrames),
        ("CAP_SETUID", Scenario::JvmAsked),
        ("CAP_SETGID", Scenario::JvmAsked),
    ] {
        if breaks == Scenario::KernelNames && !(kernel_names_testable && syslog_needed) {
            eprintln!("{missing}: kernel addresses are shown to all here, not checked");
            continue;
        }
        let caps: Vec<&str> = UNIT_CAPS
            .iter()
            .copied()
            .filter(|c| *c != missing)
            .collect();
        let daemon = UnitDaemon::start(&caps, &targets.hidden, None);
        daemon.wait_ready();
        let results = run_scenarios(&daemon, &targets, &[breaks]);
        if breaks == Scenario::PythonFrames {
            let reason = results[&breaks].as_ref().err().cloned().unwrap_or_default();
            assert!(
                reason.starts_with("python frames:        not read: the kernel refused")
                    && reason.contains("Operation not permitted"),
                "without {missing}, profctl info does not say why Python frames are not read: {reason}"
            );
        }
        match &results[&breaks] {
            Ok(()) => panic!("without {missing}, {breaks:?} still works: it is not needed"),
            Err(reason) => eprintln!(
                "without {missing}, {breaks:?} fails: {}",
                first_line(reason)
            ),
        }
        drop(daemon);
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// The system calls of `systemd-analyze syscall-filter`'s groups, expanded.
fn syscall_groups() -> BTreeMap<String, Vec<String>> {
    let out = tool(
        "systemd-analyze",
        "systemd",
        &["syscall-filter", "--no-pager"],
        &[],
    );
    out.assert_success();
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current = None;
    for line in out.stdout.lines() {
        let word = line.trim();
        if word.is_empty() || word.starts_with('#') {
            continue;
        }
        if !line.starts_with(' ') {
            current = Some(word.to_string());
            groups.entry(word.to_string()).or_default();
        } else if let Some(group) = &current {
            groups.get_mut(group).unwrap().push(word.to_string());
        }
    }
    groups
}

fn expand(groups: &BTreeMap<String, Vec<String>>, item: &str, out: &mut BTreeSet<String>) {
    match item.strip_prefix('@') {
        Some(_) => {
            for member in groups
                .get(item)
                .unwrap_or_else(|| panic!("systemd knows no group {item}"))
            {
                expand(groups, member, out);
            }
        }
        None => {
            out.insert(item.to_string());
        }
    }
}

/// The system calls the unit's SystemCallFilter= lines allow: the first
/// (an allow list) sets them, later `~` lines take some away, later plain
/// lines add.
fn allowed_syscalls(unit: &Unit) -> BTreeSet<String> {
    let groups = syscall_groups();
    let mut allowed = BTreeSet::new();
    for line in unit.all("Service", "SystemCallFilter") {
        let (deny, items) = match line.strip_prefix('~') {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        let mut set = BTreeSet::new();
        for item in items.split_whitespace() {
            expand(&groups, item, &mut set);
        }
        if deny {
            allowed.retain(|s| !set.contains(s));
        } else {
            allowed.extend(set);
        }
    }
    allowed
}

/// The system calls in a strace log after profd's execve.
fn traced_syscalls(trace: &Path, profd: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(trace).expect("read the strace log");
    let exec = format!("execve(\"{}\"", profd.display());
    let start = text
        .lines()
        .position(|l| l.contains(&exec) && l.trim_end().ends_with("= 0"))
        .unwrap_or_else(|| panic!("profd's execve is not in the strace log"));
    text.lines()
        .skip(start + 1)
        .filter_map(|line| {
            let rest = line.split_once(' ').map_or(line, |(_, r)| r).trim_start();
            let rest = rest.strip_prefix("<... ").unwrap_or(rest);
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let is_call =
                rest[name.len()..].starts_with('(') || rest[name.len()..].starts_with(" resumed");
            (!name.is_empty() && is_call).then_some(name)
        })
        .collect()
}

/// Every system call profd makes while serving sessions, views and exports
/// is allowed by the unit's SystemCallFilter=.
#[test]
fn unit_syscall_filter_allows_every_call_profd_makes() {
    let _serial = serial();
    require_root_and_perf();
    let unit = Unit::load(&deploy("profd.service"));
    let allowed = allowed_syscalls(&unit);
    assert!(allowed.contains("perf_event_open") && allowed.contains("pidfd_open"));
    assert!(!allowed.contains("ptrace") && !allowed.contains("mount"));

    let alice = &test_users().alice;
    let targets = Targets::start(alice);
    let trace = unique_dir("strace").join("profd.trace");
    let daemon = UnitDaemon::start(UNIT_CAPS, &targets.hidden, Some(&trace));
    daemon.wait_ready();
    let results = run_scenarios(
        &daemon,
        &targets,
        &[
            Scenario::PrivateBinary,
            Scenario::DeletedBinary,
            Scenario::JvmAsked,
        ],
    );
    for (scenario, result) in results {
        result.unwrap_or_else(|reason| panic!("{scenario:?} under strace: {reason}"));
    }
    for args in [
        vec!["sessions", "--all"],
        vec!["report", "1", "--tree"],
        vec!["export", "2", "--format", "pprof", "-o"],
        vec!["info"],
    ] {
        let mut args = args;
        let out_file = unique_dir("export").join("p.pb.gz");
        if args.last() == Some(&"-o") {
            args.push(path_str(&out_file));
        }
        daemon.profctl(&args).assert_success();
    }
    daemon.stop();
    let used = traced_syscalls(&trace, &bin("profd"));
    assert!(used.contains("perf_event_open"), "{used:?}");
    let refused: Vec<&String> = used.iter().filter(|s| !allowed.contains(*s)).collect();
    assert!(
        refused.is_empty(),
        "profd calls {refused:?}, which profd.service's SystemCallFilter= refuses \
         (EPERM); it made {} kinds of calls: {used:?}",
        used.len()
    );
    eprintln!(
        "profd made {} kinds of system calls, all allowed",
        used.len()
    );
    drop(targets);
}
