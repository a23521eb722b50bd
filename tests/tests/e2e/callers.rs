//! End-to-end tests of what a caller other than root may profile and see:
//! profd's decision on a target compared with the kernel's own (a
//! `perf_event_open` of every thread of the target, made with the caller's
//! credentials by `perfopen.c`), user namespaces included; `--children`
//! sessions and `profctl run` on
//! programs that exec short-lived children; `profctl info`. Real kernel,
//! real `profd` and `profctl`, run as the test users of `users.rs`.

use std::process::Command;
use std::time::{Duration, Instant};

use profd_e2e::users::{chmod, env, public_copy, public_dir, User, TEST_GROUP};
use profd_e2e::{
    assert_one_line_error, bin, build_workload, path_str, run_document, Cmd, CmdOutput, Daemon,
    Info, Profile, Workload, PROFCTL_TIMEOUT,
};

/// Long enough for any test: workloads are killed when the test ends.
const LONG: f64 = 60.0;

/// profd with its socket open to the test group (alice and bob).
fn group_daemon() -> Daemon {
    let mut daemon = Daemon::start_with(&["--socket-group", TEST_GROUP]);
    daemon.assert_alive();
    daemon
}

/// Starts `privdrop LONG args...` as root.
fn privdrop(args: &[&str]) -> Workload {
    let exe = public_copy(&build_workload("privdrop"));
    let mut command = Command::new(&exe);
    command.arg(LONG.to_string()).args(args);
    Workload::start_command(command, "privdrop")
}

/// Starts `split LONG --ready` as `user` with real, effective and saved gid
/// `gid` (and the user's groups).
fn split_with_gid(user: &User, gid: u32) -> Workload {
    let exe = public_copy(&build_workload("split"));
    let mut command = Command::new("setpriv");
    command
        .arg(format!("--reuid={}", user.uid))
        .arg(format!("--regid={gid}"))
        .args(["--init-groups", "--"])
        .arg(&exe)
        .arg(LONG.to_string())
        .arg("--ready");
    Workload::start_command(command, "split")
}

/// How a caller runs: as itself, in the host's user namespace ...
const ITSELF: &[&str] = &[];
/// ... or in a user namespace it made, root there with every capability
/// there (the kernel's uid is still its own).
const IN_ITS_USERNS: &[&str] = &["unshare", "--user", "--map-root-user", "--"];

/// `user`'s command `program args...`, run through `via` (see [`ITSELF`]).
fn as_user_via(user: &User, via: &[&str], program: &std::path::Path) -> Command {
    match via.split_first() {
        None => user.command(program),
        Some((first, rest)) => {
            let mut command = user.command(std::path::Path::new(first));
            command.args(rest).arg(program);
            command
        }
    }
}

/// The kernel's answer: whether `user` may open a sampling event on every
/// thread of `pid` (`perfopen`'s lines are shown).
fn kernel_allows(user: &User, pid: u32) -> (bool, String) {
    kernel_allows_via(user, ITSELF, pid)
}

/// [`kernel_allows`], with `user` running through `via`.
fn kernel_allows_via(user: &User, via: &[&str], pid: u32) -> (bool, String) {
    let exe = public_copy(&build_workload("perfopen"));
    let out = as_user_via(user, via, &exe)
        .arg(pid.to_string())
        .output()
        .expect("run perfopen");
    let lines = String::from_utf8_lossy(&out.stdout).into_owned();
    let code = out.status.code();
    assert!(
        matches!(code, Some(0 | 3)),
        "perfopen {pid} as {} failed ({:?}): perf events must work for this test\n{lines}{}",
        user.name,
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (code == Some(0), lines)
}

/// profd's answer: whether `user`'s one-second attach to `pid` succeeds
/// (true) or is refused with PERMISSION_DENIED (false).
fn profd_allows(d: &Daemon, user: &User, pid: u32) -> (bool, CmdOutput) {
    profd_allows_via(d, user, ITSELF, pid)
}

/// [`profd_allows`], with `user`'s profctl running through `via`.
fn profd_allows_via(d: &Daemon, user: &User, via: &[&str], pid: u32) -> (bool, CmdOutput) {
    let pid = pid.to_string();
    let args = ["attach", &pid, "--duration", "1", "--format", "json"];
    let out = if via.is_empty() {
        d.profctl_as(user, &args)
    } else {
        let profctl = public_copy(&bin("profctl"));
        let mut full = user.setpriv_args();
        full.extend(via.iter().map(|a| a.to_string()));
        full.extend([
            path_str(&profctl).to_string(),
            "--socket".to_string(),
            path_str(d.socket()).to_string(),
        ]);
        full.extend(args.iter().map(|a| a.to_string()));
        let full: Vec<&str> = full.iter().map(String::as_str).collect();
        Cmd::spawn("setpriv", &full).wait(PROFCTL_TIMEOUT)
    };
    if out.status.success() {
        return (true, out);
    }
    assert_one_line_error(&out, &["permission denied"]);
    (false, out)
}

/// For each target, profd decides as the kernel does: the caller's own
/// process is allowed; a process whose main thread dropped to the caller's
/// ids while another thread stayed root, one running with a group the caller
/// is only a member of, and one of the caller's ids that kept capabilities
/// are refused, by both.
#[test]
fn profd_refuses_what_the_kernel_refuses() {
    let env = env();
    let u = env.users;
    let alice = &u.alice;
    let d = group_daemon();
    let (uid, gid) = (alice.uid.to_string(), alice.gid.to_string());
    let own = split_with_gid(alice, alice.gid);
    let threads = privdrop(&["thread", &uid, &gid]);
    let member_gid = split_with_gid(alice, u.group_gid);
    let keepcaps = privdrop(&["keepcaps", &uid, &gid]);

    for (what, w, kernel_expected) in [
        ("alice's own process", &own, true),
        ("a root thread beside alice's main thread", &threads, false),
        ("gid of a group alice is a member of", &member_gid, false),
        ("alice's ids with capabilities kept", &keepcaps, false),
    ] {
        let (kernel, lines) = kernel_allows(alice, w.pid());
        eprintln!("{what} ({}): kernel allows {kernel}\n{lines}", w.pid());
        assert_eq!(kernel, kernel_expected, "{what}: the premise does not hold");
        let (profd, out) = profd_allows(&d, alice, w.pid());
        eprintln!("  profd allows {profd}: {}", out.stderr.trim());
        assert_eq!(
            profd,
            kernel,
            "{what}: profd decides otherwise than the kernel\n{}",
            out.describe()
        );
    }
    // The mixed case: the kernel opens the main thread, not the root one.
    let (_, lines) = kernel_allows(alice, threads.pid());
    assert!(
        lines.contains(" ok") && lines.contains(" refused"),
        "one thread allowed and one refused:\n{lines}"
    );
    let (_, out) = profd_allows(&d, alice, threads.pid());
    assert!(
        out.stderr
            .contains(&format!("of process {}", threads.pid())),
        "the refusal names the thread:\n{}",
        out.describe()
    );
}

/// Starts `split LONG --ready` as `user` through `via` (see [`ITSELF`]).
fn split_via(user: &User, via: &[&str]) -> Workload {
    let exe = public_copy(&build_workload("split"));
    let mut command = as_user_via(user, via, &exe);
    command.arg(LONG.to_string()).arg("--ready");
    Workload::start_command(command, "split")
}

/// User namespaces, decided as the kernel does: the kernel compares the
/// caller's and the target's namespaces, and a caller reaches into another
/// only with CAP_SYS_PTRACE over it, which its creator holds. With alice's
/// uid, gid and no capability: a process in a namespace root made is
/// refused; one in a namespace alice made (root there, with every
/// capability there) and her plain process are allowed; and alice calling
/// from a namespace of her own may not profile her plain process.
#[test]
fn user_namespaces_are_decided_as_the_kernel_does() {
    let env = env();
    let alice = &env.users.alice;
    let d = group_daemon();
    let (uid, gid) = (alice.uid.to_string(), alice.gid.to_string());
    let plain = split_via(alice, ITSELF);
    let roots = privdrop(&["userns", &uid, &gid]);
    let alices = split_via(alice, IN_ITS_USERNS);
    let ns = |w: &Workload| {
        std::fs::read_link(format!("/proc/{}/ns/user", w.pid()))
            .map(|l| l.display().to_string())
            .unwrap_or_default()
    };
    assert_ne!(ns(&roots), ns(&plain), "privdrop made no user namespace");
    assert_ne!(ns(&alices), ns(&plain), "unshare made no user namespace");

    for (what, w, via, kernel_expected) in [
        ("alice's plain process", &plain, ITSELF, true),
        (
            "alice's ids in a namespace root made",
            &roots,
            ITSELF,
            false,
        ),
        (
            "alice's process in a namespace she made",
            &alices,
            ITSELF,
            true,
        ),
        (
            "her plain process, from a namespace of hers",
            &plain,
            IN_ITS_USERNS,
            false,
        ),
    ] {
        let (kernel, lines) = kernel_allows_via(alice, via, w.pid());
        eprintln!(
            "{what} ({}, {}): kernel allows {kernel}\n{lines}",
            w.pid(),
            ns(w)
        );
        assert_eq!(kernel, kernel_expected, "{what}: the premise does not hold");
        let (profd, out) = profd_allows_via(&d, alice, via, w.pid());
        eprintln!("  profd allows {profd}: {}", out.stderr.trim());
        assert_eq!(
            profd,
            kernel,
            "{what}: profd decides otherwise than the kernel\n{}",
            out.describe()
        );
        if !profd {
            assert!(
                out.stderr.contains("user namespace"),
                "the refusal names the user namespace:\n{}",
                out.describe()
            );
        }
    }
}

/// A shell loop of `alice` running `/bin/true`: its children exec and exit
/// long before the session can check their new program.
fn true_loop(user: &User) -> Workload {
    let mut command = user.command(std::path::Path::new("/bin/bash"));
    command.args(["-c", "echo ready; while :; do /bin/true; done"]);
    Workload::start_command(command, "bash")
}

/// A `--children` session of a caller other than root on a loop of
/// short-lived children runs to its end: the samples of children gone before
/// their exec could be checked count as unchecked, not in the profile.
#[test]
fn children_gone_before_their_check_do_not_fail_a_session() {
    let env = env();
    let alice = &env.users.alice;
    let d = group_daemon();
    let w = true_loop(alice);
    let pid = w.pid_arg();
    let out = d.profctl_as(
        alice,
        &[
            "attach",
            &pid,
            "--children",
            "--unwind",
            "fp",
            "--duration",
            "4",
            "--format",
            "json",
        ],
    );
    let p = Profile::parse(&out);
    eprintln!(
        "state {} error {:?} totals {:?}, {} processes",
        p.state,
        p.error,
        p.totals,
        p.processes.len()
    );
    assert_eq!(
        (p.state.as_str(), p.error.as_str()),
        ("duration_elapsed", ""),
        "the session did not run to its end"
    );
    assert!(p.processes.len() > 10, "the children were not followed");
    assert!(p.totals.attributed > 0, "nothing attributed");
    assert!(
        p.totals.unchecked > 0,
        "no sample of a /bin/true counted as unchecked"
    );
}

/// `profctl run` never ends its command because the session failed or for
/// any reason but `--duration` or a stop: a `--children` run of a loop of
/// short-lived children lasts as the loop does, and a run whose session
/// fails (an exec of a set-user-id program) lets the command finish. Its
/// exit status is the command's.
#[test]
fn run_lets_its_command_finish_and_exits_with_its_status() {
    let env = env();
    let alice = &env.users.alice;
    let d = group_daemon();

    let out = d.profctl_as(
        alice,
        &[
            "run",
            "--children",
            "--format",
            "json",
            "--",
            "/bin/bash",
            "-c",
            "end=$((SECONDS + 3)); while [ $SECONDS -lt $end ]; do /bin/true; done; exit 7",
        ],
    );
    eprintln!("{}", out.describe());
    assert_eq!(out.status.code(), Some(7), "not the command's status");
    assert!(
        out.stderr.contains("/bin/bash exited with status 7"),
        "{}",
        out.describe()
    );
    let json: serde_json::Value = serde_json::from_str(&run_document(&out)).expect("one JSON");
    assert_eq!(json["state"], "exited", "{}", out.describe());

    // A session that fails: the command execs a set-user-id root program.
    let exe = public_copy(&build_workload("privdrop"));
    let suid = public_dir("suid").join("privdrop-suid");
    std::fs::copy(&exe, &suid).expect("copy privdrop");
    chmod(&suid, 0o4755);
    let script = format!(
        "exec {} 1 exec {} 2 nodump >/dev/null",
        path_str(&exe),
        path_str(&suid)
    );
    let out = d.profctl_as(
        alice,
        &["run", "--format", "json", "--", "/bin/sh", "-c", &script],
    );
    eprintln!("{}", out.describe());
    let json: serde_json::Value = serde_json::from_str(&run_document(&out)).expect("one JSON");
    assert_eq!(json["state"], "failed", "{}", out.describe());
    assert!(
        out.stderr.contains("runs on") && out.stderr.contains("/bin/sh exited with status 0"),
        "the command did not finish on its own:\n{}",
        out.describe()
    );
    assert_eq!(out.status.code(), Some(0), "{}", out.describe());
}

/// `profctl info` shows a caller the rings of its own sessions only: bob's
/// stack-copy session on his process (rings of that pid alone) shows its pid
/// to bob and root, not to alice.
#[test]
fn info_shows_only_the_callers_sessions() {
    let env = env();
    let u = env.users;
    let d = group_daemon();
    let exe = public_copy(&build_workload("split"));
    let mut command = u.bob.command(&exe);
    command.arg(LONG.to_string()).arg("--ready");
    let bobs = Workload::start_command(command, "split");
    let pid = bobs.pid_arg();
    let session = d.spawn_profctl_as(
        &u.bob,
        &[
            "attach",
            &pid,
            "--unwind",
            "dwarf",
            "--duration",
            "30",
            "--format",
            "json",
        ],
    );
    let shown = format!("pid {pid}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !Info::read(&d).groups.contains(&shown) {
        assert!(Instant::now() < deadline, "root never sees bob's rings");
        std::thread::sleep(Duration::from_millis(100));
    }
    let info_as = |user: &User| {
        let out = d.profctl_as(user, &["info"]);
        out.assert_success();
        Info::parse(&out.stdout).expect("profctl info")
    };
    let bob = info_as(&u.bob);
    let alice = info_as(&u.alice);
    eprintln!("bob: {}\nalice: {}", bob.groups, alice.groups);
    assert!(bob.groups.contains(&shown), "bob: {}", bob.groups);
    assert!(
        !alice.groups.contains(&pid),
        "alice sees bob's target: {}",
        alice.groups
    );
    drop(session);
}
