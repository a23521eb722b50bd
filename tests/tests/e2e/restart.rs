//! Sessions across daemon restarts: ended sessions are saved in the state
//! directory (`--state-dir`) when they end and at SIGTERM, come back after a
//! restart under their ids and owners, listed by `profctl sessions --all`
//! and readable as before; corrupt state files are moved aside at start.
//! Real kernel, real `profd` and `profctl`; root needed.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use profd_e2e::users::{public_copy, test_users, User, TEST_GROUP};
use profd_e2e::{
    assert_one_line_error, build_workload, require_root_and_perf, serial, words, Daemon, Harness,
    Profile, Workload,
};

/// Long enough for any test: workloads are killed when the test ends.
const LONG: f64 = 60.0;

/// `profctl export ID --format json`: the daemon's whole profile of a session.
fn export_json(d: &Daemon, id: u64) -> Profile {
    let p = Profile::parse(&d.profctl(&["export", &id.to_string(), "--format", "json"]));
    eprintln!("{}", p.table());
    p
}

/// The lines of a `profctl sessions` table whose first word is `id`.
fn session_line(table: &str, id: u64) -> Option<String> {
    let id = id.to_string();
    table
        .lines()
        .find(|line| words(line).first() == Some(&id.as_str()))
        .map(str::to_string)
}

/// Waits until `path` exists.
fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.is_file() {
        assert!(
            Instant::now() < deadline,
            "{} was not written within 10 s",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The file names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn state_dir(d: &Daemon) -> PathBuf {
    d.state_dir()
        .expect("the test daemon has a state directory")
        .to_path_buf()
}

/// Profile `split` for 2 s to the end, start a second long session, SIGTERM
/// the daemon and start it again on the same state directory: this run lists
/// nothing, `--all` lists both (the second stopped), the first reads exactly
/// as before, and new sessions get larger ids.
#[test]
fn sigterm_then_restart_keeps_sessions() {
    let mut h = Harness::start();
    let target = Workload::start("split", LONG);
    let pid = target.pid_arg();
    let p1 =
        Profile::parse(
            &h.daemon
                .profctl(&["attach", &pid, "--duration", "2", "--format", "json"]),
        );
    eprintln!("{}", p1.table());
    assert_eq!(p1.state, "duration_elapsed", "{}", p1.table());
    let id1 = p1.session_id;
    let state = state_dir(&h.daemon);
    // Saved when it ends, not only at shutdown.
    wait_for_file(&state.join(format!("{id1}.session")));
    let before = export_json(&h.daemon, id1);
    assert_eq!(
        before.figures(),
        p1.figures(),
        "export = attach's final profile"
    );

    let attach2 = h
        .daemon
        .spawn_profctl(&["attach", &pid, "--duration", "60", "--format", "json"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let id2 = loop {
        let out = h.daemon.profctl(&["sessions"]);
        out.assert_success();
        let running = out
            .stdout
            .lines()
            .filter(|l| l.contains("running"))
            .find_map(|l| words(l).first().and_then(|w| w.parse::<u64>().ok()));
        if let Some(id) = running {
            break id;
        }
        assert!(Instant::now() < deadline, "the second session never ran");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(id2 > id1);
    std::thread::sleep(Duration::from_secs(1));

    let status = h.daemon.terminate();
    assert!(
        status.success(),
        "profd on SIGTERM: {status}\n{}",
        h.daemon.log()
    );
    let p2 = Profile::parse(&attach2.wait(Duration::from_secs(20)));
    assert_eq!(
        (p2.session_id, p2.state.as_str()),
        (id2, "stopped"),
        "{}",
        p2.table()
    );
    assert!(p2.totals.attributed > 0, "{}", p2.table());
    let files = names(&state);
    for id in [id1, id2] {
        for ext in ["session", "pprof"] {
            let name = format!("{id}.{ext}");
            assert!(files.contains(&name), "{name} not in {files:?}");
        }
    }
    assert!(
        !files.iter().any(|f| f.ends_with(".tmp")),
        "temp files left: {files:?}"
    );
    let mode = std::fs::metadata(&state).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the state directory is root's only");

    h.daemon.restart();
    let now = h.daemon.profctl(&["sessions"]);
    now.assert_success();
    assert_eq!(
        now.stdout.trim(),
        "no sessions",
        "without --all, only this run's sessions:\n{}",
        now.describe()
    );
    let all = h.daemon.profctl(&["sessions", "--all"]);
    all.assert_success();
    eprintln!("{}", all.stdout);
    let line1 = session_line(&all.stdout, id1)
        .unwrap_or_else(|| panic!("session {id1} not listed:\n{}", all.describe()));
    let line2 = session_line(&all.stdout, id2)
        .unwrap_or_else(|| panic!("session {id2} not listed:\n{}", all.describe()));
    assert!(line1.contains("duration_elapsed*"), "{line1}");
    assert!(line2.contains("stopped*"), "{line2}");
    assert!(
        all.stdout.contains("* from an earlier run of the daemon"),
        "{}",
        all.describe()
    );

    let after = export_json(&h.daemon, id1);
    assert_eq!(
        (
            after.session_id,
            after.pid,
            after.comm.as_str(),
            after.state.as_str()
        ),
        (id1, p1.pid, "split", "duration_elapsed")
    );
    assert_eq!(after.totals.attributed, before.totals.attributed);
    assert_eq!(after.totals.discarded, before.totals.discarded);
    assert_eq!(after.frequency_hz, before.frequency_hz);
    assert_eq!(after.duration_s, before.duration_s);
    for leaf in ["leaf_a", "leaf_b"] {
        assert_eq!(
            after.function(leaf).exclusive,
            before.function(leaf).exclusive,
            "{leaf}"
        );
    }
    assert_eq!(
        after.figures(),
        before.figures(),
        "every function as before"
    );

    let report = h.daemon.profctl(&["report", &id1.to_string()]);
    report.assert_success();
    assert!(report.stdout.contains("leaf_b"), "{}", report.describe());
    let tree = h.daemon.profctl(&["report", &id1.to_string(), "--tree"]);
    tree.assert_success();
    assert!(tree.stdout.contains("leaf_b"), "{}", tree.describe());
    let histogram = h.daemon.profctl(&[
        "histogram",
        &id1.to_string(),
        "--module",
        "split",
        "--offset",
        "0",
        "--scale",
        "65536",
        "--buckets",
        "16",
    ]);
    assert_one_line_error(&histogram, &["earlier run"]);

    let p3 = Profile::parse(&h.daemon.profctl(&[
        "attach",
        &pid,
        "--duration",
        "0.5",
        "--format",
        "json",
    ]));
    assert!(
        p3.session_id > id2,
        "new session {} after {id1} and {id2}",
        p3.session_id
    );
    let now = h.daemon.profctl(&["sessions"]);
    assert!(
        session_line(&now.stdout, p3.session_id).is_some(),
        "{}",
        now.describe()
    );
    assert!(
        session_line(&now.stdout, id1).is_none(),
        "{}",
        now.describe()
    );
}

/// Garbage in one session's metadata and a truncated profile of another:
/// the daemon starts anyway, names both files in a warning, moves them (and
/// their partners) to `corrupt/` and lists the session that is sound.
#[test]
fn corrupt_state_files_are_moved_aside() {
    let _serial = serial();
    require_root_and_perf();
    let mut d = Daemon::start();
    let target = Workload::start("split", LONG);
    let pid = target.pid_arg();
    let ids: Vec<u64> = (0..3)
        .map(|_| {
            Profile::parse(&d.profctl(&["attach", &pid, "--duration", "0.5", "--format", "json"]))
                .session_id
        })
        .collect();
    let status = d.terminate();
    assert!(status.success(), "profd on SIGTERM: {status}\n{}", d.log());
    let state = state_dir(&d);
    let garbage = state.join(format!("{}.session", ids[0]));
    std::fs::write(&garbage, "{\"format\": 1, \"id\": gar").unwrap();
    let truncated = state.join(format!("{}.pprof", ids[1]));
    let len = std::fs::metadata(&truncated).unwrap().len();
    std::fs::File::options()
        .write(true)
        .open(&truncated)
        .unwrap()
        .set_len(len / 2)
        .unwrap();

    d.restart();
    d.assert_alive();
    let log = d.log();
    for file in [&garbage, &truncated] {
        let named = log
            .lines()
            .any(|l| l.contains("WARN") && l.contains(&file.display().to_string()));
        assert!(named, "no warning names {}:\n{log}", file.display());
    }
    let corrupt = names(&state.join("corrupt"));
    let mut expected: Vec<String> = ids[..2]
        .iter()
        .flat_map(|id| [format!("{id}.session"), format!("{id}.pprof")])
        .collect();
    expected.sort();
    assert_eq!(corrupt, expected);

    let all = d.profctl(&["sessions", "--all"]);
    all.assert_success();
    eprintln!("{}", all.stdout);
    assert!(
        session_line(&all.stdout, ids[2]).is_some(),
        "{}",
        all.describe()
    );
    for id in &ids[..2] {
        assert!(
            session_line(&all.stdout, *id).is_none(),
            "{}",
            all.describe()
        );
    }
    let p = export_json(&d, ids[2]);
    assert!(p.function("leaf_b").exclusive > 0, "{}", p.table());
    let gone = d.profctl(&["export", &ids[0].to_string(), "--format", "json"]);
    assert_one_line_error(&gone, &["not found"]);
}

/// Starts `name` as `user` from a copy every user can read.
fn start_as(user: &User, name: &str) -> Workload {
    let exe = public_copy(&build_workload(name));
    let mut command = user.command(&exe);
    command.arg(LONG.to_string()).arg("--ready");
    Workload::start_command(command, name)
}

/// A session of alice's from before a restart is still hers: she lists and
/// reads it; bob sees nothing and may not read it.
#[test]
fn stored_sessions_keep_their_owner() {
    let _serial = serial();
    require_root_and_perf();
    let users = test_users();
    let (alice, bob) = (&users.alice, &users.bob);
    let mut d = Daemon::start_with(&["--socket-group", TEST_GROUP]);
    let target = start_as(alice, "split");
    let pid = target.pid_arg();
    let p = Profile::parse(&d.profctl_as(
        alice,
        &["attach", &pid, "--duration", "1", "--format", "json"],
    ));
    let id = p.session_id.to_string();
    d.restart();

    let mine = d.profctl_as(alice, &["sessions", "--all"]);
    mine.assert_success();
    assert!(
        session_line(&mine.stdout, p.session_id).is_some(),
        "{}",
        mine.describe()
    );
    let back = Profile::parse(&d.profctl_as(alice, &["export", &id, "--format", "json"]));
    assert_eq!(back.figures(), p.figures());

    let theirs = d.profctl_as(bob, &["sessions", "--all"]);
    theirs.assert_success();
    assert_eq!(theirs.stdout.trim(), "no sessions", "{}", theirs.describe());
    let denied = d.profctl_as(bob, &["export", &id, "--format", "json"]);
    assert_one_line_error(&denied, &["permission denied"]);
    let root = d.profctl(&["sessions", "--all"]);
    assert!(
        session_line(&root.stdout, p.session_id).is_some(),
        "{}",
        root.describe()
    );
}

/// The ids in a `profctl sessions` table, in its order.
fn listed_ids(table: &str) -> Vec<u64> {
    table
        .lines()
        .filter_map(|line| words(line).first().and_then(|w| w.parse().ok()))
        .collect()
}

/// Fails unless `table` lists no id twice.
fn assert_ids_once(table: &str) {
    let mut ids = listed_ids(table);
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), before, "an id listed twice:\n{table}");
}

/// The id of the one running session `table` lists, if any.
fn running_id(table: &str) -> Option<u64> {
    table
        .lines()
        .filter(|l| words(l).get(3) == Some(&"running"))
        .find_map(|l| words(l).first().and_then(|w| w.parse().ok()))
}

/// A stray `18446744073709551615.pprof` (the largest u64) in the state
/// directory is moved aside and its id ignored: the next session does not
/// get id 1 again, session 1's files stay as they were, and `sessions
/// --all` lists every id once.
#[test]
fn a_stray_file_with_a_huge_id_reuses_no_id() {
    let _serial = serial();
    require_root_and_perf();
    let mut d = Daemon::start();
    let target = Workload::start("split", LONG);
    let pid = target.pid_arg();
    let attach = |d: &Daemon| {
        Profile::parse(&d.profctl(&["attach", &pid, "--duration", "0.5", "--format", "json"]))
    };
    let first = attach(&d);
    assert_eq!(first.session_id, 1, "a new state directory's first session");
    let state = state_dir(&d);
    let files1 = [state.join("1.session"), state.join("1.pprof")];
    wait_for_file(&files1[0]);
    let read = |path: &PathBuf| std::fs::read(path).unwrap();
    let before: Vec<Vec<u8>> = files1.iter().map(read).collect();
    let stray = "18446744073709551615.pprof";
    std::fs::write(state.join(stray), b"not a profile").unwrap();

    d.restart();
    let second = attach(&d);
    eprintln!("after the restart: session {}", second.session_id);
    assert!(
        second.session_id > first.session_id,
        "the new session got id {} after session {}",
        second.session_id,
        first.session_id
    );
    wait_for_file(&state.join(format!("{}.session", second.session_id)));
    let after: Vec<Vec<u8>> = files1.iter().map(read).collect();
    assert!(after == before, "session 1's files were replaced");
    assert!(
        names(&state.join("corrupt")).contains(&stray.to_string()),
        "{stray} not moved aside"
    );
    assert!(!names(&state).contains(&stray.to_string()));

    let all = d.profctl(&["sessions", "--all"]);
    all.assert_success();
    eprintln!("{}", all.stdout);
    assert_ids_once(&all.stdout);
    assert_eq!(listed_ids(&all.stdout), [1, second.session_id]);
    let back = export_json(&d, 1);
    assert_eq!(
        (back.state.as_str(), back.figures()),
        ("duration_elapsed", first.figures()),
        "session 1 reads as before"
    );
}

/// The daemon killed with SIGKILL while a session of alice's runs (saved
/// every second) once it has been saved: at the next start no id is given out again, and the
/// session is listed as failed, still alice's only, with its profile up to
/// its last checkpoint.
#[test]
fn kill_9_reuses_no_id_and_keeps_the_running_session() {
    let _serial = serial();
    require_root_and_perf();
    let users = test_users();
    let (alice, bob) = (&users.alice, &users.bob);
    let mut d = Daemon::start_with(&["--socket-group", TEST_GROUP, "--checkpoint-interval", "1"]);
    let target = start_as(alice, "split");
    let pid = target.pid_arg();
    let attach = |d: &Daemon, secs: &str| {
        Profile::parse(&d.profctl_as(
            alice,
            &["attach", &pid, "--duration", secs, "--format", "json"],
        ))
    };
    let ended = attach(&d, "0.5");
    let running = d.spawn_profctl_as(alice, &["attach", &pid, "--duration", "60"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let id = loop {
        let out = d.profctl(&["sessions"]);
        out.assert_success();
        if let Some(id) = running_id(&out.stdout) {
            break id;
        }
        assert!(Instant::now() < deadline, "the session never ran");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(id > ended.session_id);
    // Recorded as it started, then replaced by its first checkpoint a
    // second in (a new file renamed over it).
    let record = state_dir(&d).join(format!("{id}.session"));
    wait_for_file(&record);
    let inode = |p: &Path| std::fs::metadata(p).map(|m| m.ino()).ok();
    let started = inode(&record);
    profd_e2e::wait_until(
        &format!("session {id}'s first checkpoint"),
        Duration::from_secs(30),
        || (inode(&record) != started).then_some(()),
    );

    d.kill_and_restart();
    drop(running);
    let next = attach(&d, "0.5");
    assert!(
        next.session_id > id,
        "after a kill -9 a new session got id {}, not above {id} (running when killed)",
        next.session_id
    );
    let mine = d.profctl_as(alice, &["sessions", "--all"]);
    mine.assert_success();
    eprintln!("{}", mine.stdout);
    assert_ids_once(&mine.stdout);
    let line = session_line(&mine.stdout, id)
        .unwrap_or_else(|| panic!("session {id} not listed:\n{}", mine.describe()));
    assert!(line.contains("failed*"), "{line}");

    let p = Profile::parse(&d.profctl_as(alice, &["export", &id.to_string(), "--format", "json"]));
    eprintln!("{}", p.table());
    assert_eq!((p.session_id, p.state.as_str()), (id, "failed"));
    assert!(p.error.contains("checkpoint"), "{}", p.error);
    assert!(p.duration_s >= 1.0, "{}", p.table());
    assert!(p.totals.attributed > 0, "{}", p.table());
    assert!(p.function("leaf_b").exclusive > 0, "{}", p.table());

    let theirs = d.profctl_as(bob, &["sessions", "--all"]);
    theirs.assert_success();
    assert!(
        session_line(&theirs.stdout, id).is_none(),
        "{}",
        theirs.describe()
    );
    let denied = d.profctl_as(bob, &["export", &id.to_string(), "--format", "json"]);
    assert_one_line_error(&denied, &["permission denied"]);
}

/// A state directory written by a daemon that kept session summaries as
/// `<id>.json` (daemon/testdata/state-format-1: sessions 1-3 ended, 4
/// checkpointed and that daemon killed) lists and exports its sessions as
/// that daemon did after its restart, and keeps its files as they are.
#[test]
fn sessions_kept_as_json_summaries_read_as_before() {
    let _serial = serial();
    require_root_and_perf();
    let testdata = Path::new(env!("CARGO_MANIFEST_DIR")).join("../daemon/testdata");
    let state = profd_e2e::unique_dir("state").join("profd");
    std::fs::create_dir_all(&state).unwrap();
    for f in std::fs::read_dir(testdata.join("state-format-1")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), state.join(f.file_name())).unwrap();
    }
    let files = names(&state);
    let state_arg = state.display().to_string();
    // The sessions ended in 2026: kept whatever the date.
    let d = Daemon::start_with(&["--state-dir", &state_arg, "--retain-days", "36500"]);
    let all = d.profctl(&["sessions", "--all"]);
    all.assert_success();
    eprintln!("{}", all.stdout);
    // As that daemon listed them, and saved (SAVED yes).
    for (id, line) in [
        (
            1,
            "1 13515 timeout exited* yes cpu-clock 999 Hz 1.54 s 2/413/0",
        ),
        (
            2,
            "2 13582 busy duration_elapsed* yes cpu-clock 999 Hz 1.03 s 254/1754/0",
        ),
        (
            3,
            "3 13688 timeout exited* yes cpu-clock 999 Hz 1.24 s 310/2379/488",
        ),
        (
            4,
            "4 13717 busy failed* yes cpu-clock 999 Hz 3.01 s 879/0/0",
        ),
    ] {
        let listed = session_line(&all.stdout, id).unwrap_or_default();
        let listed: Vec<&str> = listed.split_whitespace().collect();
        assert_eq!(listed.join(" "), line, "session {id}");
        let export = d.profctl(&["export", &id.to_string(), "--format", "json"]);
        export.assert_success();
        let expected =
            std::fs::read_to_string(testdata.join(format!("state-format-1-exports/{id}.json")))
                .unwrap();
        // The exports were written before functions carried their ids and
        // totals counted unreadable interpreter frames and walks cut by the
        // stack copy (none here).
        let mut now: serde_json::Value = serde_json::from_str(&export.stdout).unwrap();
        for f in now["functions"].as_array_mut().into_iter().flatten() {
            f.as_object_mut().map(|f| f.remove("id"));
        }
        let totals = now["totals"].as_object_mut().expect("totals");
        assert_eq!(totals.remove("python_unreadable"), Some(0.into()));
        assert_eq!(totals.remove("ruby_unreadable"), Some(0.into()));
        assert_eq!(totals.remove("perl_unreadable"), Some(0.into()));
        assert_eq!(totals.remove("truncated_copy_ended"), Some(0.into()));
        let then: serde_json::Value = serde_json::from_str(&expected).unwrap();
        assert_eq!(now, then, "session {id}");
    }
    assert_eq!(names(&state), files, "read in place");
}
