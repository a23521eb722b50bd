//! End-to-end tests of "only the right callers profile the right processes":
//! the socket's mode and group, caller identity from SO_PEERCRED, which
//! processes a caller may profile, who owns a session, `--grant`, limits, the
//! TLS + token remote listener with and without client certificates, and
//! garbage on the socket. Real kernel, real `profd` and `profctl`.
//!
//! The tests create (idempotently) the local users `profd-t-alice` and
//! `profd-t-bob`, members of the group `profd-t`, and `profd-t-carol`, not a
//! member, and run workloads and profctl as them through `setpriv`. They need
//! root and perf events; without them they fail (never skip).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use profd_e2e::tls::{free_port, make_tls, new_token, sha256_hex, token_file, TlsFiles};
use profd_e2e::users::{
    chmod, env, group_gid, proc_file_owner, process_gids, process_uids, public_copy, public_dir,
    User, TEST_GROUP,
};
use profd_e2e::{
    assert_one_line_error, build_workload, path_str, run_profctl, run_profd, unique_dir, Cmd,
    CmdOutput, Daemon, Profile, Workload,
};

/// Long enough for any test: workloads are killed when the test ends.
const LONG: f64 = 60.0;
/// The function `privdrop.c` spins in.
const PRIVDROP_SPIN: &str = "privdrop_spin";
/// The name profd gives the samples beyond `--max-stacks`.
const STACK_LIMIT: &str = "[stack limit reached]";

/// Starts `profd args...` on a fresh socket every user can reach and checks
/// that it answers `profctl info` (as root).
fn daemon(args: &[&str]) -> Daemon {
    let mut daemon = Daemon::start_with(args);
    daemon.assert_alive();
    daemon
}

/// profd with its socket open to the test group (alice and bob).
fn group_daemon(extra: &[&str]) -> Daemon {
    let mut args = vec!["--socket-group", TEST_GROUP];
    args.extend_from_slice(extra);
    daemon(&args)
}

/// Starts the C workload `name` (from a copy every user can read) as `user`
/// and checks that all its uids and gids are the user's.
fn start_as(user: &User, name: &str) -> Workload {
    let exe = public_copy(&build_workload(name));
    let mut command = user.command(&exe);
    command.arg(LONG.to_string()).arg("--ready");
    let w = Workload::start_command(command, name);
    assert_eq!(
        process_uids(w.pid()),
        [user.uid; 4],
        "{name} started as {} has other uids",
        user.name
    );
    assert_eq!(
        process_gids(w.pid()),
        [user.gid; 4],
        "{name} started as {} has other gids",
        user.name
    );
    w
}

/// Starts `privdrop LONG args...`, as `user` or (None) as root.
fn privdrop(user: Option<&User>, args: &[&str]) -> Workload {
    let exe = public_copy(&build_workload("privdrop"));
    let mut command = match user {
        Some(user) => user.command(&exe),
        None => Command::new(&exe),
    };
    command.arg(LONG.to_string()).args(args);
    Workload::start_command(command, "privdrop")
}

/// Runs profctl against `daemon` as `user`, or as root for `None`.
fn profctl(daemon: &Daemon, user: Option<&User>, args: &[&str]) -> CmdOutput {
    match user {
        Some(user) => daemon.profctl_as(user, args),
        None => daemon.profctl(args),
    }
}

/// `profctl attach <pid> --duration <secs> --format json` as `user` (None = root).
fn attach(daemon: &Daemon, user: Option<&User>, pid: u32, secs: &str) -> CmdOutput {
    let pid = pid.to_string();
    profctl(
        daemon,
        user,
        &["attach", &pid, "--duration", secs, "--format", "json"],
    )
}

/// Parses a profile of `pid` and checks that it names `function`.
fn profile_of(out: &CmdOutput, pid: u32, function: &str) -> Profile {
    let p = Profile::parse(out);
    eprintln!("{}", p.table());
    assert_eq!(p.pid, pid, "profile of another pid:\n{}", p.table());
    p.function(function);
    p
}

/// profctl failed with exit 1 and one line `profctl: permission denied: ...`.
fn assert_denied(out: &CmdOutput) {
    assert_one_line_error(out, &["permission denied"]);
    let line = out.stderr.trim();
    assert!(
        line.starts_with("profctl: permission denied"),
        "the error is not a permission-denied status:\n{}",
        out.describe()
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "exit status:\n{}",
        out.describe()
    );
}

/// profctl failed with one line `profctl: resource exhausted: ...` naming `flag`.
fn assert_exhausted(out: &CmdOutput, flag: &str) {
    assert_one_line_error(out, &["resource exhausted", flag]);
    assert!(
        out.stderr.trim().starts_with("profctl: resource exhausted"),
        "the error is not a resource-exhausted status:\n{}",
        out.describe()
    );
}

/// What profd printed on stderr besides its log lines (which start with a
/// timestamp, possibly coloured): the reason it gave for exiting.
fn error_text(out: &CmdOutput) -> String {
    out.stderr
        .lines()
        .filter(|line| !line.trim().is_empty() && !log_line(line))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether a line is one of profd's log lines: `<timestamp> <LEVEL> ...`,
/// possibly with ANSI colours.
fn log_line(line: &str) -> bool {
    let mut plain = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // Skip a CSI sequence: ESC [ ... final letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    let mut words = plain.split_whitespace();
    let stamp = words.next().unwrap_or("");
    let level = words.next().unwrap_or("");
    stamp.len() >= 20
        && stamp.as_bytes()[4] == b'-'
        && stamp.contains('T')
        && ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&level)
}

/// One row of `profctl sessions`: ID, PID and the whole line.
#[derive(Debug, Clone)]
struct Listed {
    id: u64,
    pid: u32,
    line: String,
}

/// The rows of a successful `profctl sessions` (lines starting with two numbers).
fn listed(out: &CmdOutput) -> Vec<Listed> {
    out.assert_success();
    out.stdout
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let id = fields.next()?.parse().ok()?;
            let pid = fields.next()?.parse().ok()?;
            Some(Listed {
                id,
                pid,
                line: line.to_string(),
            })
        })
        .collect()
}

/// `profctl sessions` as `user` (None = root).
fn sessions(daemon: &Daemon, user: Option<&User>) -> (Vec<Listed>, CmdOutput) {
    let out = profctl(daemon, user, &["sessions"]);
    (listed(&out), out)
}

/// Polls `list` until it shows a running session of `pid`; returns its id.
fn wait_running(what: &str, mut list: impl FnMut() -> (Vec<Listed>, CmdOutput), pid: u32) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (rows, out) = list();
        if let Some(row) = rows
            .iter()
            .find(|r| r.pid == pid && r.line.contains("running"))
        {
            eprintln!("  {what}: {}", row.line);
            return row.id;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: no running session of pid {pid} listed:\n{}",
            out.describe()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits for a background `profctl attach` to end and parses its profile.
fn finish(attach: Cmd, pid: u32) -> Profile {
    let out = attach.wait(Duration::from_secs(40));
    let p = Profile::parse(&out);
    eprintln!("{}", p.table());
    assert_eq!(p.pid, pid, "{}", p.table());
    p
}

/// Panics unless `text` contains `own` and none of `foreign`.
fn assert_only_own(what: &str, text: &str, own: &str, foreign: &[&str]) {
    assert!(
        text.contains(own),
        "{what} does not name {own:?}, its own workload's function:\n{text}"
    );
    for name in foreign {
        assert!(
            !text.contains(name),
            "{what} names {name:?}, a function of another caller's process:\n{text}"
        );
    }
    eprintln!("  {what}: names {own}, none of {foreign:?}");
}

// ---------------------------------------------------------------------------
// The socket
// ---------------------------------------------------------------------------

/// The socket is 0660 with the `--socket-group` group (its directory, made by
/// profd, 0755): a member connects, a non-member cannot; without the flag the
/// group is `profd`'s or else root's; a missing group and a non-socket at the
/// path make profd refuse to start.
#[test]
fn socket_is_group_only_and_never_replaces_other_files() {
    let env = env();
    let users = env.users;

    let dir = public_dir("socket");
    let run = dir.join("run");
    let socket = run.join("profd.sock");
    let mut d = Daemon::start_at(&socket, &["--socket-group", TEST_GROUP]);
    d.assert_alive();
    let meta = std::fs::symlink_metadata(&socket).expect("stat the socket");
    eprintln!(
        "  socket {}: mode {:o} uid {} gid {}",
        socket.display(),
        meta.mode() & 0o7777,
        meta.uid(),
        meta.gid()
    );
    assert!(meta.file_type().is_socket(), "not a socket: {meta:?}");
    assert_eq!(meta.mode() & 0o7777, 0o660, "socket mode");
    assert_eq!(meta.uid(), 0, "socket owner");
    assert_eq!(
        meta.gid(),
        users.group_gid,
        "socket group (--socket-group {TEST_GROUP})"
    );
    let run_mode = std::fs::metadata(&run).expect("stat the socket dir").mode() & 0o7777;
    assert_eq!(run_mode, 0o755, "mode of the socket directory profd made");

    let alice = d.profctl_as(&users.alice, &["info"]);
    alice.assert_success();
    let carol = d.profctl_as(&users.carol, &["info"]);
    assert_one_line_error(&carol, &[]);
    let line = carol.stderr.to_lowercase();
    assert!(
        line.contains("permission denied") || line.contains("cannot connect"),
        "carol's error does not say that she may not connect:\n{}",
        carol.describe()
    );
    assert!(
        carol
            .stderr
            .contains(&format!("usermod --append --groups {TEST_GROUP}")),
        "carol's error does not name the group {TEST_GROUP} to join:\n{}",
        carol.describe()
    );
    d.assert_alive();
    drop(d);

    // Without --socket-group: the group `profd`, or root's when there is none.
    let default_group = group_gid("profd");
    let d = daemon(&[]);
    let meta = std::fs::symlink_metadata(d.socket()).expect("stat the socket");
    eprintln!(
        "  default: mode {:o} gid {} (group profd: {default_group:?})",
        meta.mode() & 0o7777,
        meta.gid()
    );
    assert_eq!(meta.mode() & 0o7777, 0o660, "socket mode");
    assert_eq!(
        meta.gid(),
        default_group.unwrap_or(0),
        "default socket group (profd, else root's)"
    );
    drop(d);

    // A named group that does not exist.
    let missing = "profd-t-nosuchgroup";
    assert_eq!(group_gid(missing), None, "group {missing} exists here");
    let path = unique_dir("nogroup").join("profd.sock");
    let out = run_profd(&["--socket", path_str(&path), "--socket-group", missing]);
    let error = error_text(&out);
    eprintln!("  {error}");
    assert!(!out.status.success(), "profd started:\n{}", out.describe());
    assert!(
        error.contains(missing),
        "the error does not name the group {missing}:\n{}",
        out.describe()
    );

    // A regular file at the socket path is neither used nor removed.
    let path = unique_dir("notsock").join("profd.sock");
    std::fs::write(&path, "precious\n").expect("write a regular file");
    let out = run_profd(&["--socket", path_str(&path)]);
    let error = error_text(&out);
    eprintln!("  {error}");
    assert!(!out.status.success(), "profd started:\n{}", out.describe());
    assert!(
        error.to_lowercase().contains("not a socket"),
        "the error does not say the path is not a socket:\n{}",
        out.describe()
    );
    assert_eq!(
        std::fs::read_to_string(&path).ok().as_deref(),
        Some("precious\n"),
        "profd changed or removed the file at the socket path"
    );
}

// ---------------------------------------------------------------------------
// Which processes a caller may profile
// ---------------------------------------------------------------------------

/// A caller profiles its own process (the profile names its functions), but
/// not root's, another user's, or a user's in its group without a grant.
#[test]
fn caller_profiles_only_its_own_processes() {
    let env = env();
    let u = env.users;
    let d = group_daemon(&[]);
    let own = start_as(&u.alice, "split");
    let roots = Workload::start("spin_other", LONG);
    let bobs = start_as(&u.bob, "spin_other");
    let carols = start_as(&u.carol, "spin_other");

    let p = profile_of(
        &attach(&d, Some(&u.alice), own.pid(), "1"),
        own.pid(),
        "leaf_b",
    );
    p.function("leaf_a");
    assert!(p.totals.attributed > 0, "{}", p.table());

    for (whose, target) in [("root's", &roots), ("bob's", &bobs), ("carol's", &carols)] {
        eprintln!("alice → {whose} process {}", target.pid());
        assert_denied(&attach(&d, Some(&u.alice), target.pid(), "1"));
    }
    eprintln!("bob → alice's process {}", own.pid());
    assert_denied(&attach(&d, Some(&u.bob), own.pid(), "1"));
    // Root may profile anyone.
    profile_of(
        &attach(&d, None, bobs.pid(), "1"),
        bobs.pid(),
        "other_process_spin",
    );
}

/// Processes with the caller's uid that the kernel keeps from it (not
/// dumpable; dropped from root; a changed effective uid only) are refused to
/// the caller, and root profiles all three.
#[test]
fn undumpable_and_mixed_credential_processes_are_refused() {
    let env = env();
    let u = env.users;
    let alice = &u.alice;
    let d = group_daemon(&[]);

    let nodump = privdrop(Some(alice), &["nodump"]);
    let dropped = privdrop(None, &["drop", &alice.uid_arg(), &alice.gid_arg()]);
    let seteuid = privdrop(None, &["seteuid", &alice.uid_arg()]);

    // The premises: whose each process is, and that the first two are not dumpable.
    let a = alice.uid;
    assert_eq!(process_uids(nodump.pid()), [a; 4], "nodump uids");
    assert_eq!(process_uids(dropped.pid()), [a; 4], "drop uids");
    assert_eq!(process_gids(dropped.pid()), [alice.gid; 4], "drop gids");
    assert_eq!(process_uids(seteuid.pid()), [0, a, 0, a], "seteuid uids");
    for (what, w) in [("nodump", &nodump), ("drop", &dropped)] {
        assert_eq!(
            proc_file_owner(w.pid()),
            0,
            "{what}: /proc/{}/stat is not root's, so the process is dumpable",
            w.pid()
        );
    }

    for (what, w) in [
        ("nodump", &nodump),
        ("drop", &dropped),
        ("seteuid", &seteuid),
    ] {
        eprintln!("alice → {what} ({})", w.pid());
        assert_denied(&attach(&d, Some(alice), w.pid(), "1"));
    }
    for (what, w) in [
        ("nodump", &nodump),
        ("drop", &dropped),
        ("seteuid", &seteuid),
    ] {
        eprintln!("root → {what} ({})", w.pid());
        profile_of(&attach(&d, None, w.pid(), "1"), w.pid(), PRIVDROP_SPIN);
    }
}

/// A process can gain privileges only by exec'ing a set-id program: alice's
/// session on her own process ends `failed` when it execs a set-user-id root
/// program, while root's session on the same sequence carries on.
#[test]
fn exec_of_a_set_uid_program_ends_a_callers_session() {
    let env = env();
    let alice = &env.users.alice;
    let d = group_daemon(&[]);
    let exe = public_copy(&build_workload("privdrop"));
    let suid = public_dir("suid").join("privdrop-suid");
    std::fs::copy(&exe, &suid).expect("copy privdrop");
    chmod(&suid, 0o4755);
    let run = |who: Option<&User>| {
        let mut command = alice.command(&exe);
        command.args(["1.5", "exec", path_str(&suid), "60", "nodump"]);
        let w = Workload::start_command(command, "privdrop");
        let out = attach(&d, who, w.pid(), "4");
        (Profile::parse(&out), w)
    };
    let (p, _w) = run(Some(alice));
    eprintln!(
        "alice: state {} error {:?}\n{}",
        p.state,
        p.error,
        p.table()
    );
    assert_eq!(p.state, "failed", "alice's session went on after the exec");
    assert!(
        p.error.contains("exec") && p.error.contains("privdrop-suid"),
        "the error does not name the exec: {:?}",
        p.error
    );
    assert!(p.totals.attributed > 0, "nothing sampled before the exec");
    let (p, _w) = run(None);
    eprintln!("root: state {} error {:?}", p.state, p.error);
    assert_eq!(p.state, "duration_elapsed", "root's session ended early");
    assert_eq!(
        p.comm, "privdrop-suid",
        "root's session did not follow the exec"
    );
}

/// `--grant profd-t:profd-t-carol` lets alice (in profd-t) profile carol's
/// processes, under the same rules: not carol's undumpable ones, not root's.
#[test]
fn grant_lets_group_members_profile_a_users_processes() {
    let env = env();
    let u = env.users;
    let grant = format!("{TEST_GROUP}:{}", u.carol.name);
    let d = group_daemon(&["--grant", &grant]);
    let carols = start_as(&u.carol, "split");
    let carols_nodump = privdrop(Some(&u.carol), &["nodump"]);
    let roots = Workload::start("spin_other", LONG);

    let p = profile_of(
        &attach(&d, Some(&u.alice), carols.pid(), "1"),
        carols.pid(),
        "leaf_b",
    );
    p.function("leaf_a");
    eprintln!("alice → carol's undumpable process");
    assert_denied(&attach(&d, Some(&u.alice), carols_nodump.pid(), "1"));
    eprintln!("alice → root's process");
    assert_denied(&attach(&d, Some(&u.alice), roots.pid(), "1"));
}

// ---------------------------------------------------------------------------
// Sessions belong to their callers
// ---------------------------------------------------------------------------

/// Only a session's owner or root lists, reads, exports or stops it: alice
/// sees none of bob's session and is refused every read and stop of it,
/// running or ended; root sees both; bob stops his own.
#[test]
fn sessions_belong_to_their_caller() {
    let env = env();
    let u = env.users;
    let d = group_daemon(&[]);
    let bobs = start_as(&u.bob, "spin_other");
    let alices = start_as(&u.alice, "split");
    let long = ["--duration", "30", "--format", "json"];
    let bob_pid = bobs.pid_arg();
    let alice_pid = alices.pid_arg();
    let bob_attach = d.spawn_profctl_as(&u.bob, &[&["attach", &bob_pid][..], &long].concat());
    let alice_attach = d.spawn_profctl_as(&u.alice, &[&["attach", &alice_pid][..], &long].concat());
    let bob_id = wait_running("root lists bob's", || sessions(&d, None), bobs.pid());
    let alice_id = wait_running("root lists alice's", || sessions(&d, None), alices.pid());

    let (rows, out) = sessions(&d, Some(&u.alice));
    eprintln!("alice's `profctl sessions`:\n{}", out.stdout);
    assert!(
        rows.iter().any(|r| r.id == alice_id),
        "alice does not see her own session {alice_id}:\n{}",
        out.describe()
    );
    assert!(
        rows.iter().all(|r| r.id != bob_id && r.pid != bobs.pid()),
        "alice sees bob's session {bob_id}:\n{}",
        out.describe()
    );
    let (rows, out) = sessions(&d, Some(&u.bob));
    assert!(
        rows.iter().any(|r| r.id == bob_id)
            && rows
                .iter()
                .all(|r| r.id != alice_id && r.pid != alices.pid()),
        "bob should see his session {bob_id} and not alice's {alice_id}:\n{}",
        out.describe()
    );

    let bob_id_arg = bob_id.to_string();
    let spin_other = public_copy(&build_workload("spin_other"));
    let reads: [&[&str]; 4] = [
        &["report", &bob_id_arg],
        &["export", &bob_id_arg, "--format", "json"],
        &["export", &bob_id_arg, "--format", "folded"],
        &["histogram", &bob_id_arg, "--binary", path_str(&spin_other)],
    ];
    for args in reads {
        eprintln!("alice: profctl {} (running session)", args.join(" "));
        assert_denied(&profctl(&d, Some(&u.alice), args));
    }
    eprintln!("alice: profctl stop {bob_id}");
    assert_denied(&profctl(&d, Some(&u.alice), &["stop", &bob_id_arg]));
    wait_running("bob's still runs", || sessions(&d, None), bobs.pid());

    // Bob stops his own; root stops alice's.
    profctl(&d, Some(&u.bob), &["stop", &bob_id_arg]).assert_success();
    let p = finish(bob_attach, bobs.pid());
    assert_eq!((p.session_id, p.state.as_str()), (bob_id, "stopped"));
    profctl(&d, None, &["stop", &alice_id.to_string()]).assert_success();
    let p = finish(alice_attach, alices.pid());
    assert_eq!((p.session_id, p.state.as_str()), (alice_id, "stopped"));

    // Ended, bob's session is still his alone; root reads it.
    for args in reads {
        eprintln!("alice: profctl {} (ended session)", args.join(" "));
        assert_denied(&profctl(&d, Some(&u.alice), args));
    }
    let (rows, out) = sessions(&d, None);
    assert!(
        rows.iter().any(|r| r.id == bob_id) && rows.iter().any(|r| r.id == alice_id),
        "root does not list both sessions:\n{}",
        out.describe()
    );
    let root_export = profctl(&d, None, &["export", &bob_id_arg, "--format", "folded"]);
    root_export.assert_success();
    assert!(
        root_export.stdout.contains("other_process_spin"),
        "{}",
        root_export.describe()
    );
}

/// Two callers' concurrent sessions on different workloads: nothing of one
/// reaches the other's profile, views or exports in any format.
#[test]
fn concurrent_sessions_of_two_callers_do_not_leak() {
    let env = env();
    let u = env.users;
    let d = group_daemon(&[]);
    let alices = start_as(&u.alice, "split");
    let bobs = start_as(&u.bob, "spin_other");

    let a_pid = alices.pid_arg();
    let b_pid = bobs.pid_arg();
    let json = ["--duration", "3", "--format", "json"];
    let a_attach = d.spawn_profctl_as(&u.alice, &[&["attach", &a_pid][..], &json].concat());
    let b_attach = d.spawn_profctl_as(&u.bob, &[&["attach", &b_pid][..], &json].concat());
    let a = finish(a_attach, alices.pid());
    let b = finish(b_attach, bobs.pid());

    // (user, session, own function, the other's names)
    let cases: [(&User, &Profile, &str, &[&str]); 2] = [
        (
            &u.alice,
            &a,
            "leaf_b",
            &["other_process_spin", "spin_other"],
        ),
        (&u.bob, &b, "other_process_spin", &["leaf_a", "leaf_b"]),
    ];
    for (user, p, own, foreign) in cases {
        let who = &user.name;
        let id = p.session_id.to_string();
        let names: String = p
            .functions
            .iter()
            .map(|f| format!("{} {}\n", f.name, f.module))
            .collect();
        assert_only_own(&format!("{who}'s attach profile"), &names, own, foreign);
        for format in ["json", "folded", "svg", "speedscope"] {
            let out = profctl(&d, Some(user), &["export", &id, "--format", format]);
            out.assert_success();
            assert_only_own(
                &format!("{who}'s {format} export"),
                &out.stdout,
                own,
                foreign,
            );
        }
        for view in [&["--top", "0"][..], &["--tree", "--min-pct", "0"]] {
            let out = profctl(
                &d,
                Some(user),
                &[&["report", id.as_str()][..], view].concat(),
            );
            out.assert_success();
            assert_only_own(
                &format!("{who}'s report {view:?}"),
                &out.stdout,
                own,
                foreign,
            );
        }

        // pprof: written by the user into a directory of theirs, then read
        // both raw (gunzipped) and through `profctl report FILE`.
        let dir = public_dir("pprof");
        std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid)).expect("chown");
        chmod(&dir, 0o700);
        let file = dir.join("profile.pb.gz");
        profctl(
            &d,
            Some(user),
            &["export", &id, "--format", "pprof", "-o", path_str(&file)],
        )
        .assert_success();
        let raw = gunzip(&file);
        assert_only_own(
            &format!("{who}'s pprof export (decompressed)"),
            &String::from_utf8_lossy(&raw),
            own,
            foreign,
        );
        let out = profctl(&d, Some(user), &["report", path_str(&file), "--top", "0"]);
        out.assert_success();
        assert_only_own(
            &format!("{who}'s report of the pprof file"),
            &out.stdout,
            own,
            foreign,
        );
    }
}

fn gunzip(file: &Path) -> Vec<u8> {
    let out = Command::new("gzip")
        .arg("-dc")
        .arg(file)
        .output()
        .expect("run gzip");
    assert!(
        out.status.success(),
        "gzip -dc {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

// ---------------------------------------------------------------------------
// Limits
// ---------------------------------------------------------------------------

/// `--max-sessions 1`: a second running session is refused naming the flag;
/// once the first has ended, a new one is accepted.
#[test]
fn max_sessions_limits_running_sessions() {
    let _env = env();
    let d = daemon(&["--max-sessions", "1"]);
    let first = Workload::start("split", LONG);
    let second = Workload::start("spin_other", LONG);
    let first_pid = first.pid_arg();
    let bg = d.spawn_profctl(&["attach", &first_pid, "--duration", "20", "--format", "json"]);
    let id = wait_running("first session", || sessions(&d, None), first.pid());

    assert_exhausted(&attach(&d, None, second.pid(), "1"), "max-sessions");
    d.profctl(&["stop", &id.to_string()]).assert_success();
    finish(bg, first.pid());
    profile_of(
        &attach(&d, None, second.pid(), "1"),
        second.pid(),
        "other_process_spin",
    );
}

/// `--max-sessions-per-caller 1`: alice's second running session is refused
/// naming the flag, while bob can still start one.
#[test]
fn max_sessions_per_caller_limits_each_caller() {
    let env = env();
    let u = env.users;
    let d = group_daemon(&["--max-sessions-per-caller", "1"]);
    let a1 = start_as(&u.alice, "split");
    let a2 = start_as(&u.alice, "spin_other");
    let b1 = start_as(&u.bob, "spin_other");
    let a1_pid = a1.pid_arg();
    let bg = d.spawn_profctl_as(
        &u.alice,
        &["attach", &a1_pid, "--duration", "20", "--format", "json"],
    );
    let id = wait_running("alice's first session", || sessions(&d, None), a1.pid());

    assert_exhausted(
        &attach(&d, Some(&u.alice), a2.pid(), "1"),
        "max-sessions-per-caller",
    );
    profile_of(
        &attach(&d, Some(&u.bob), b1.pid(), "1"),
        b1.pid(),
        "other_process_spin",
    );
    d.profctl_as(&u.alice, &["stop", &id.to_string()])
        .assert_success();
    finish(bg, a1.pid());
}

/// `--max-frequency 100` and `--max-duration 2`: asking for more is refused
/// naming the flag; asking for exactly the limits is accepted.
#[test]
fn max_frequency_and_duration_are_enforced() {
    let _env = env();
    let d = daemon(&["--max-frequency", "100", "--max-duration", "2"]);
    let w = Workload::start("split", LONG);
    let pid = w.pid_arg();
    let attach_with = |freq: &str, secs: &str| {
        d.profctl(&[
            "attach",
            &pid,
            "--freq",
            freq,
            "--duration",
            secs,
            "--format",
            "json",
        ])
    };

    assert_exhausted(&attach_with("200", "1"), "max-frequency");
    assert_exhausted(&attach_with("100", "5"), "max-duration");
    let p = profile_of(&attach_with("100", "2"), w.pid(), "leaf_b");
    assert_eq!(p.frequency_hz, 100, "{}", p.table());
    assert_eq!(p.state, "duration_elapsed", "{}", p.table());
}

/// `--max-stacks 1` on a workload with several stacks: samples beyond the
/// first stack are counted under `[stack limit reached]`, totals report them
/// as overflowed, and the exclusive counts still add up to attributed.
#[test]
fn max_stacks_counts_the_overflow() {
    let _env = env();
    let d = daemon(&["--max-stacks", "1"]);
    let w = Workload::start("split", LONG);
    let p = Profile::parse(&attach(&d, None, w.pid(), "2"));
    eprintln!("{}", p.table());
    let overflowed = p
        .totals
        .overflowed
        .unwrap_or_else(|| panic!("the profile's totals have no `overflowed`:\n{}", p.table()));
    let marker = p.function(STACK_LIMIT);
    assert!(overflowed > 0, "nothing overflowed:\n{}", p.table());
    assert_eq!(
        marker.exclusive,
        overflowed,
        "{STACK_LIMIT} has {} exclusive samples but totals say {overflowed} overflowed:\n{}",
        marker.exclusive,
        p.table()
    );
    let exclusive_sum: u64 = p.functions.iter().map(|f| f.exclusive).sum();
    assert_eq!(exclusive_sum, p.totals.attributed, "{}", p.table());
    // One stack kept: at most one innermost function besides the marker.
    let leaves: Vec<&str> = p
        .functions
        .iter()
        .filter(|f| f.exclusive > 0 && f.name != STACK_LIMIT)
        .map(|f| f.name.as_str())
        .collect();
    assert!(
        leaves.len() <= 1,
        "{} innermost functions with --max-stacks 1: {leaves:?}\n{}",
        leaves.len(),
        p.table()
    );
}

// ---------------------------------------------------------------------------
// Garbage on the socket
// ---------------------------------------------------------------------------

/// Random bytes, half handshakes and an idle connection on the socket do not
/// crash or block the daemon: `profctl info` and an attach still work.
#[test]
fn garbage_on_the_socket_is_survived() {
    let _env = env();
    let mut d = daemon(&[]);
    let mut random = vec![0u8; 4096];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut random))
        .expect("read /dev/urandom");
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    for i in 0..20 {
        let mut s = UnixStream::connect(d.socket()).expect("connect");
        let chunk = &random[(i * 97) % 2048..][..2048];
        let _ = s.write_all(chunk);
        drop(s);
    }
    for cut in [1, 8, PREFACE.len() - 1] {
        let mut s = UnixStream::connect(d.socket()).expect("connect");
        let _ = s.write_all(&PREFACE[..cut]);
        let _ = s.shutdown(Shutdown::Both);
    }
    // A full preface followed by a garbage frame.
    let mut s = UnixStream::connect(d.socket()).expect("connect");
    let _ = s.write_all(PREFACE);
    let _ = s.write_all(&random[..512]);
    drop(s);
    // An idle half-open connection held while others are served.
    let mut idle = UnixStream::connect(d.socket()).expect("connect");
    let _ = idle.write_all(&PREFACE[..10]);

    d.assert_alive();
    let w = Workload::start("split", LONG);
    profile_of(&attach(&d, None, w.pid(), "1"), w.pid(), "leaf_b");
    drop(idle);
    d.assert_alive();
}

// ---------------------------------------------------------------------------
// Remote access: TLS and tokens
// ---------------------------------------------------------------------------

/// `attach <pid> --duration 1 --format json`.
fn attach1(pid: &str) -> Vec<&str> {
    vec!["attach", pid, "--duration", "1", "--format", "json"]
}

/// A remote daemon and the client flags that reach it.
struct Remote {
    daemon: Daemon,
    url: String,
    tls: TlsFiles,
}

impl Remote {
    /// `profctl --connect <url> --tls-ca <ca> <flags...> <args...>` as root.
    fn profctl(&self, flags: &[&str], args: &[&str]) -> CmdOutput {
        self.profctl_env(flags, args, &[])
    }

    fn profctl_env(&self, flags: &[&str], args: &[&str], env: &[(String, String)]) -> CmdOutput {
        let mut full = vec!["--connect", &self.url, "--tls-ca", path_str(&self.tls.ca)];
        full.extend_from_slice(flags);
        full.extend_from_slice(args);
        run_profctl(&full, env)
    }
}

/// Starts profd listening on a free 127.0.0.1 port with the test's TLS
/// material and tokens file, plus `extra` flags.
fn remote_daemon(tls: TlsFiles, tokens: &Path, extra: &[&str]) -> Remote {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut args = vec![
        "--socket-group",
        TEST_GROUP,
        "--listen",
        &addr,
        "--tls-cert",
        path_str(&tls.server_cert),
        "--tls-key",
        path_str(&tls.server_key),
        "--tokens",
        path_str(tokens),
    ];
    args.extend_from_slice(extra);
    let daemon = daemon(&args);
    Remote {
        daemon,
        url: format!("https://{addr}"),
        tls,
    }
}

/// What a plain-TCP listener received while `f` ran: (connections, bytes).
fn capture_plain_tcp(f: impl FnOnce(u16)) -> (usize, Vec<u8>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    listener.set_nonblocking(true).expect("nonblocking");
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = Arc::clone(&stop);
    let thread = std::thread::spawn(move || {
        let (mut count, mut bytes) = (0, Vec::new());
        while !stop2.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((mut s, _)) => {
                    count += 1;
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut buf = [0u8; 4096];
                    while let Ok(n @ 1..) = s.read(&mut buf) {
                        bytes.extend_from_slice(&buf[..n]);
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        (count, bytes)
    });
    f(port);
    stop.store(true, Ordering::Relaxed);
    thread.join().expect("listener thread")
}

/// Remote access with TLS and tokens: an operator token attaches and reads;
/// no token or a wrong one is unauthenticated; a read-only token lists but
/// may not attach or stop; a token acting as alice has alice's rights; the
/// server certificate is verified; profctl never speaks plaintext, and the
/// listener never answers plaintext HTTP/2.
#[test]
fn remote_access_needs_tls_and_a_token() {
    let env = env();
    let u = env.users;
    let dir = unique_dir("remote");
    let tokens = dir.join("tokens");
    let op = new_token(&tokens, "ops", "operator", "root");
    let viewer = new_token(&tokens, "viewer", "read-only", "root");
    let as_alice = new_token(&tokens, "alice", "operator", &u.alice.name);
    assert!(
        op != viewer && op != as_alice && viewer != as_alice,
        "tokens repeat"
    );
    let op_file = token_file(&dir, "op.token", &op);
    let viewer_file = token_file(&dir, "viewer.token", &viewer);
    let alice_file = token_file(&dir, "alice.token", &as_alice);
    let r = remote_daemon(make_tls(&dir), &tokens, &[]);
    let op_flags = ["--token-file", path_str(&op_file)];
    let viewer_flags = ["--token-file", path_str(&viewer_file)];
    let alice_flags = ["--token-file", path_str(&alice_file)];

    let roots = Workload::start("split", LONG);
    let alices = start_as(&u.alice, "spin_other");
    let root_pid = roots.pid_arg();

    // The operator acting as root attaches and reads.
    let p = profile_of(
        &r.profctl(&op_flags, &attach1(&root_pid)),
        roots.pid(),
        "leaf_b",
    );
    let id = p.session_id.to_string();
    let listed_ = listed(&r.profctl(&op_flags, &["sessions"]));
    assert!(listed_.iter().any(|l| l.id == p.session_id), "{listed_:?}");
    let export = r.profctl(&op_flags, &["export", &id, "--format", "folded"]);
    export.assert_success();
    assert!(export.stdout.contains("leaf_b"), "{}", export.describe());
    r.profctl(&op_flags, &["report", &id]).assert_success();
    // PROFD_TOKEN instead of --token-file.
    let env_token = [("PROFD_TOKEN".to_string(), op.clone())];
    r.profctl_env(&[], &["sessions"], &env_token)
        .assert_success();

    // No token, a wrong token, or what the tokens file holds.
    let hash = sha256_hex(&op);
    let wrong_file = token_file(&dir, "wrong.token", &format!("{op}x"));
    let hash_file = token_file(&dir, "hash.token", &hash);
    let prefixed_file = token_file(&dir, "prefixed.token", &format!("sha256:{hash}"));
    for (what, flags) in [
        ("no token", vec![]),
        ("wrong token", vec!["--token-file", path_str(&wrong_file)]),
        ("the hash", vec!["--token-file", path_str(&hash_file)]),
        (
            "sha256:hash",
            vec!["--token-file", path_str(&prefixed_file)],
        ),
    ] {
        for args in [vec!["sessions"], attach1(&root_pid)] {
            eprintln!("{what}: profctl {}", args.join(" "));
            assert_one_line_error(&r.profctl(&flags, &args), &["unauthenticated"]);
        }
    }

    // Read-only: lists and reads, may not attach or stop.
    eprintln!("read-only: attach");
    assert_denied(&r.profctl(&viewer_flags, &attach1(&root_pid)));
    let bg_args = ["attach", &root_pid, "--duration", "20", "--format", "json"];
    let mut full = vec!["--connect", &r.url, "--tls-ca", path_str(&r.tls.ca)];
    full.extend_from_slice(&op_flags);
    full.extend_from_slice(&bg_args);
    let profctl_bin = profd_e2e::bin("profctl");
    let bg = Cmd::spawn(path_str(&profctl_bin), &full);
    let running = wait_running(
        "the operator's background session",
        || sessions(&r.daemon, None),
        roots.pid(),
    );
    let rows = listed(&r.profctl(&viewer_flags, &["sessions"]));
    assert!(
        rows.iter().any(|l| l.id == running) && rows.iter().any(|l| l.id == p.session_id),
        "the read-only token (acting as root) does not list every session: {rows:?}"
    );
    r.profctl(&viewer_flags, &["export", &id, "--format", "json"])
        .assert_success();
    eprintln!("read-only: stop");
    assert_denied(&r.profctl(&viewer_flags, &["stop", &running.to_string()]));
    wait_running("still running", || sessions(&r.daemon, None), roots.pid());
    r.profctl(&op_flags, &["stop", &running.to_string()])
        .assert_success();
    finish(bg, roots.pid());

    // A token acting as alice: her process, not root's, and only her sessions.
    let alice_pid = alices.pid_arg();
    let pa = profile_of(
        &r.profctl(&alice_flags, &attach1(&alice_pid)),
        alices.pid(),
        "other_process_spin",
    );
    eprintln!("alice's token: attach root's process");
    assert_denied(&r.profctl(&alice_flags, &attach1(&root_pid)));
    let rows = listed(&r.profctl(&alice_flags, &["sessions"]));
    assert!(
        rows.iter().any(|l| l.id == pa.session_id) && rows.iter().all(|l| l.id != p.session_id),
        "alice's token should list her session {} and not root's {}: {rows:?}",
        pa.session_id,
        p.session_id
    );
    assert_denied(&r.profctl(&alice_flags, &["export", &id, "--format", "json"]));

    // The server is verified: the wrong CA or name is refused.
    let rogue_ca = path_str(&r.tls.rogue_ca);
    let mut full = vec!["--connect", &r.url, "--tls-ca", rogue_ca];
    full.extend_from_slice(&op_flags);
    full.push("sessions");
    eprintln!("a CA that did not sign the server's certificate");
    assert_one_line_error(&run_profctl(&full, &[]), &[]);
    eprintln!("--tls-domain localhost");
    r.profctl(
        &[&op_flags[..], &["--tls-domain", "localhost"]].concat(),
        &["sessions"],
    )
    .assert_success();
    eprintln!("--tls-domain not-the-server.invalid");
    assert_one_line_error(
        &r.profctl(
            &[&op_flags[..], &["--tls-domain", "not-the-server.invalid"]].concat(),
            &["sessions"],
        ),
        &[],
    );

    // profctl refuses http:// and sends the token nowhere.
    let (connections, received) = capture_plain_tcp(|port| {
        let url = format!("http://127.0.0.1:{port}");
        let out = run_profctl(
            &[
                "--connect",
                &url,
                "--tls-ca",
                path_str(&r.tls.ca),
                "--token-file",
                path_str(&op_file),
                "sessions",
            ],
            &[],
        );
        eprintln!("--connect {url}");
        assert_one_line_error(&out, &["http"]);
    });
    eprintln!(
        "  a plaintext listener got {connections} connection(s), {} bytes",
        received.len()
    );
    assert!(
        !String::from_utf8_lossy(&received).contains(&op),
        "profctl sent the token in plaintext"
    );

    // A plaintext HTTP/2 client gets no HTTP/2 back.
    let port = r.url.rsplit(':').next().expect("port");
    let reply = plaintext_h2(&format!("127.0.0.1:{port}"));
    eprintln!(
        "  plaintext HTTP/2 preface got {} bytes: {:02x?}",
        reply.len(),
        &reply[..reply.len().min(16)]
    );
    assert!(
        !(reply.len() >= 9 && reply[3] == 0x04),
        "the TLS port answered a plaintext HTTP/2 preface with a SETTINGS frame: {reply:02x?}"
    );
    let mut d = r.daemon;
    d.assert_alive();
}

/// Sends an HTTP/2 client preface and an empty SETTINGS frame in plaintext;
/// returns what came back within 5 s (nothing on close or reset).
fn plaintext_h2(addr: &str) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).expect("connect to the listener");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend_from_slice(&[0, 0, 0, 0x04, 0, 0, 0, 0, 0]);
    let _ = s.write_all(&hello);
    let mut reply = Vec::new();
    let mut buf = [0u8; 1024];
    while let Ok(n @ 1..) = s.read(&mut buf) {
        reply.extend_from_slice(&buf[..n]);
        if reply.len() > 64 * 1024 {
            break;
        }
    }
    reply
}

/// With `--tls-client-ca`, a client without a certificate, or with one from
/// another CA, is refused; with a certificate from that CA it works.
#[test]
fn mutual_tls_requires_a_client_certificate() {
    let _env = env();
    let dir = unique_dir("mtls");
    let tokens = dir.join("tokens");
    let op = new_token(&tokens, "ops", "operator", "root");
    let op_file = token_file(&dir, "op.token", &op);
    let tls = make_tls(&dir);
    let client_ca = tls.ca.clone();
    let r = remote_daemon(tls, &tokens, &["--tls-client-ca", path_str(&client_ca)]);
    let token = ["--token-file", path_str(&op_file)];
    let good = [
        &token[..],
        &[
            "--tls-cert",
            path_str(&r.tls.client_cert),
            "--tls-key",
            path_str(&r.tls.client_key),
        ],
    ]
    .concat();
    let rogue = [
        &token[..],
        &[
            "--tls-cert",
            path_str(&r.tls.rogue_client_cert),
            "--tls-key",
            path_str(&r.tls.rogue_client_key),
        ],
    ]
    .concat();

    eprintln!("no client certificate");
    assert_one_line_error(&r.profctl(&token, &["sessions"]), &[]);
    eprintln!("a client certificate from another CA");
    assert_one_line_error(&r.profctl(&rogue, &["sessions"]), &[]);
    eprintln!("the client certificate");
    r.profctl(&good, &["sessions"]).assert_success();
    let w = Workload::start("split", LONG);
    let pid = w.pid_arg();
    profile_of(
        &r.profctl(
            &good,
            &["attach", &pid, "--duration", "1", "--format", "json"],
        ),
        w.pid(),
        "leaf_b",
    );
    let mut d = r.daemon;
    d.assert_alive();
}

/// profd refuses to listen without its TLS files or tokens file, and with a
/// tokens file others can write.
#[test]
fn remote_listener_refuses_unsafe_configurations() {
    let _env = env();
    let dir = unique_dir("remote-refuse");
    let tls = make_tls(&dir);
    let tokens = dir.join("tokens");
    new_token(&tokens, "ops", "operator", "root");
    let addr = format!("127.0.0.1:{}", free_port());
    let socket = dir.join("profd.sock");
    let (cert, key, toks) = (
        path_str(&tls.server_cert),
        path_str(&tls.server_key),
        path_str(&tokens),
    );
    let base = ["--socket", path_str(&socket), "--listen", &addr];
    let cases: [(&str, Vec<&str>); 3] = [
        ("--tls-cert", vec!["--tls-key", key, "--tokens", toks]),
        ("--tls-key", vec!["--tls-cert", cert, "--tokens", toks]),
        ("--tokens", vec!["--tls-cert", cert, "--tls-key", key]),
    ];
    for (missing, rest) in cases {
        let out = run_profd(&[&base[..], &rest].concat());
        let error = error_text(&out);
        eprintln!("without {missing}: {error}");
        assert!(!out.status.success(), "profd started:\n{}", out.describe());
        assert!(
            error.contains(missing),
            "the error does not name {missing}:\n{}",
            out.describe()
        );
    }
    for mode in [0o620, 0o602, 0o666] {
        chmod(&tokens, mode);
        let out = run_profd(
            &[
                &base[..],
                &["--tls-cert", cert, "--tls-key", key, "--tokens", toks],
            ]
            .concat(),
        );
        let error = error_text(&out);
        eprintln!("tokens file mode {mode:o}: {error}");
        assert!(
            !out.status.success(),
            "profd started with a tokens file of mode {mode:o}:\n{}",
            out.describe()
        );
        assert!(
            error.contains(path_str(&tokens)),
            "the error does not name the tokens file:\n{}",
            out.describe()
        );
    }
}
