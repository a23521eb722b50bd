//! What the daemon keeps of its users' sessions, tested as its users (and
//! a user out to crowd the others out) act: the retention limits shared
//! fairly between owners, a save that fails on a full state directory
//! (told to the client, held in memory, written once there is room), and a
//! session recorded as it starts, so that `kill -9` before its first
//! checkpoint leaves it listed as failed. Real kernel, real `profd` and
//! `profctl`, a real tmpfs; root needed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use profd_e2e::users::{public_copy, test_users, User, TEST_GROUP};
use profd_e2e::{
    assert_one_line_error, build_workload, metrics, require_root_and_perf, serial, unique_dir,
    wait_until, words, CmdOutput, Daemon, Profile, Workload,
};

/// Long enough for any test: workloads are killed when the test ends.
const LONG: f64 = 120.0;

/// Starts `name` as `user` from a copy every user can read.
fn start_as(user: &User, name: &str) -> Workload {
    let exe = public_copy(&build_workload(name));
    let mut command = user.command(&exe);
    command.arg(LONG.to_string()).arg("--ready");
    Workload::start_command(command, name)
}

/// The line of a `profctl sessions` table whose first word is `id`.
fn session_line(table: &str, id: u64) -> Option<String> {
    let id = id.to_string();
    table
        .lines()
        .find(|line| words(line).first() == Some(&id.as_str()))
        .map(str::to_string)
}

/// The SAVED cell of session `id` in a `profctl sessions` table (the
/// column after STATE).
fn saved_cell(table: &str, id: u64) -> Option<String> {
    let line = session_line(table, id)?;
    line.split_whitespace().nth(4).map(str::to_string)
}

/// The value of `profctl info`'s line `key:`.
fn info_line(info: &str, key: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.trim_start().strip_prefix(&format!("{key}:")))
        .map(|v| v.trim().to_string())
}

/// One short session of `pid` by `user` (`attach --duration 0.2`); its id.
fn short_session(d: &Daemon, user: &User, pid: &str) -> u64 {
    Profile::parse(&d.profctl_as(
        user,
        &["attach", pid, "--duration", "0.2", "--format", "json"],
    ))
    .session_id
}

/// Alice saves one profile; bob then saves 12 short sessions against
/// `--retain-sessions 6`. Alice's profile stays (on disk, listed, readable,
/// across a restart): the 7 sessions over the limit are all bob's oldest.
/// `profctl info` and `/metrics` count them as bob's, and show the rule.
#[test]
fn another_users_sessions_do_not_evict_a_users_only_profile() {
    let _serial = serial();
    require_root_and_perf();
    let users = test_users();
    let (alice, bob) = (&users.alice, &users.bob);
    let metrics_addr = format!("127.0.0.1:{}", profd_e2e::tls::free_port());
    let mut d = Daemon::start_with(&[
        "--socket-group",
        TEST_GROUP,
        "--retain-sessions",
        "6",
        "--metrics",
        &metrics_addr,
    ]);
    let state = d.state_dir().expect("a state directory").to_path_buf();
    let alices = start_as(alice, "split");
    let bobs = start_as(bob, "split");
    let hers = short_session(&d, alice, &alices.pid_arg());
    let his: Vec<u64> = (0..12)
        .map(|_| short_session(&d, bob, &bobs.pid_arg()))
        .collect();
    let theirs = d.profctl_as(alice, &["sessions"]);
    theirs.assert_success();
    eprintln!("alice's sessions:\n{}", theirs.stdout);
    assert!(
        state.join(format!("{hers}.session")).is_file(),
        "alice's only saved profile {hers} was deleted by bob's {} sessions; state dir: {:?}",
        his.len(),
        names(&state)
    );
    assert!(
        session_line(&theirs.stdout, hers).is_some(),
        "alice's session {hers} is gone from memory too:\n{}",
        theirs.describe()
    );
    let mut kept = names(&state);
    kept.retain(|n| n.ends_with(".session"));
    let mut expected: Vec<String> = std::iter::once(hers)
        .chain(his[7..].iter().copied())
        .map(|id| format!("{id}.session"))
        .collect();
    kept.sort();
    expected.sort();
    assert_eq!(kept, expected, "alice's one and bob's newest 5");

    let info = d.profctl(&["info"]);
    info.assert_success();
    eprintln!("{}", info.stdout);
    let rule = info_line(&info.stdout, "retention").expect("a retention line");
    assert!(
        rule.contains("limits 6 sessions") && rule.contains("3 sessions and"),
        "the limit and the share (6 between 2 owners): {rule}"
    );
    assert!(rule.contains("each of 2 owners"), "{rule}");
    let bob_line = info_line(&info.stdout, &format!("kept for {}", bob.name))
        .unwrap_or_else(|| panic!("no line for bob:\n{}", info.stdout));
    assert!(
        bob_line.starts_with("5 sessions") && bob_line.contains("evicted 7 over their share"),
        "{bob_line}"
    );
    let alice_line = info_line(&info.stdout, &format!("kept for {}", alice.name))
        .unwrap_or_else(|| panic!("no line for alice:\n{}", info.stdout));
    assert!(
        alice_line.starts_with("1 session,") && alice_line.contains("evicted 0 over"),
        "{alice_line}"
    );
    // Alice is shown her own figures and the rule, not bob's.
    let own = d.profctl_as(alice, &["info"]);
    own.assert_success();
    assert!(
        info_line(&own.stdout, &format!("kept for {}", bob.name)).is_none(),
        "{}",
        own.stdout
    );
    assert!(info_line(&own.stdout, &format!("kept for {}", alice.name)).is_some());

    let scrape = metrics::scrape(&metrics_addr);
    let evicted = |user: &User, reason: &str| {
        metrics::sample(
            &scrape,
            &format!(
                "profd_sessions_evicted_total{{owner=\"{}\",uid=\"{}\",reason=\"{reason}\"}}",
                user.name, user.uid
            ),
        )
    };
    assert_eq!(evicted(bob, "sessions"), 7.0);
    assert_eq!(evicted(alice, "sessions"), 0.0);
    assert_eq!(evicted(bob, "age"), 0.0);
    assert_eq!(
        metrics::sample(
            &scrape,
            &format!(
                "profd_sessions_kept{{owner=\"{}\",uid=\"{}\"}}",
                alice.name, alice.uid
            )
        ),
        1.0
    );
    assert_eq!(
        metrics::sample(&scrape, "profd_retention_share_sessions"),
        3.0
    );

    d.restart();
    let back = d.profctl_as(alice, &["export", &hers.to_string(), "--format", "json"]);
    let back = Profile::parse(&back);
    assert_eq!(back.session_id, hers);
    assert!(back.totals.attributed > 0, "{}", back.table());
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

/// A tmpfs of `size` mounted on a new directory, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = unique_dir("tmpfs").join("state");
        std::fs::create_dir_all(&dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700")])
            .arg("tmpfs")
            .arg(&dir)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "cannot mount a tmpfs on {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir)
    }

    /// Writes `filler` until the file system is full.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).expect("create the filler");
        let block = vec![0xa5u8; 64 << 10];
        loop {
            if let Err(e) = f.write_all(&block).and_then(|()| f.sync_all()) {
                assert_eq!(
                    e.raw_os_error(),
                    Some(libc_enospc()),
                    "filling {}: {e}",
                    path.display()
                );
                break;
            }
        }
        // Down to the last byte the pages leave.
        while f.write_all(&[0]).is_ok() && f.sync_all().is_ok() {}
        path
    }
}

/// ENOSPC on Linux.
fn libc_enospc() -> i32 {
    28
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// `profctl attach PID --duration 2` on a full state directory (a small
/// tmpfs, filled): profctl prints the profile, then exits non-zero saying
/// it was not saved, why, and how to keep a copy; `profctl sessions` lists
/// it as not saved. Once there is room again it is written (at the next
/// checkpoint interval), and it comes back after a restart with the
/// session saved before the disk filled.
#[test]
fn a_save_on_a_full_state_dir_is_told_held_and_written_later() {
    let _serial = serial();
    require_root_and_perf();
    let tmpfs = Tmpfs::mount("4m");
    let state = tmpfs.0.clone();
    let mut d = Daemon::start_with(&[
        "--state-dir",
        state.to_str().unwrap(),
        "--checkpoint-interval",
        "1",
    ]);
    let target = Workload::start("split", LONG);
    let pid = target.pid_arg();
    let first =
        Profile::parse(&d.profctl(&["attach", &pid, "--duration", "0.5", "--format", "json"]));
    assert!(state
        .join(format!("{}.session", first.session_id))
        .is_file());

    let filler = tmpfs.fill();
    let out: CmdOutput = d.profctl(&["attach", &pid, "--duration", "2", "--format", "json"]);
    eprintln!("{}", out.describe());
    assert!(
        !out.status.success(),
        "profctl exited 0 although the profile could not be saved:\n{}",
        out.describe()
    );
    let p: Profile = serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("no profile printed ({e}):\n{}", out.describe()));
    let id = p.session_id;
    assert!(p.totals.attributed > 0, "{}", p.table());
    let err = out.stderr.trim();
    assert_eq!(err.lines().count(), 1, "one line:\n{err}");
    for part in [
        format!("profctl: session {id} is not saved in the daemon's state directory"),
        "No space left on device".to_string(),
        "holds it in memory".to_string(),
        format!("profctl export {id} -o FILE"),
    ] {
        assert!(err.contains(&part), "no {part:?} in {err:?}");
    }

    let listed = d.profctl(&["sessions"]);
    listed.assert_success();
    eprintln!("{}", listed.stdout);
    assert_eq!(saved_cell(&listed.stdout, id).as_deref(), Some("no"));
    assert_eq!(
        saved_cell(&listed.stdout, first.session_id).as_deref(),
        Some("yes")
    );
    assert!(
        listed.stdout.contains(&format!(
            "session {id} is not saved in the daemon's state directory"
        )),
        "{}",
        listed.stdout
    );
    // Held in memory: readable as it was.
    let held = Profile::parse(&d.profctl(&["export", &id.to_string(), "--format", "json"]));
    assert_eq!(held.figures(), p.figures());

    std::fs::remove_file(&filler).unwrap();
    wait_until(
        &format!("session {id} saved once there is room"),
        Duration::from_secs(60),
        || {
            let out = d.profctl(&["sessions"]);
            (saved_cell(&out.stdout, id).as_deref() == Some("yes")).then_some(())
        },
    );
    assert!(state.join(format!("{id}.session")).is_file());

    d.restart();
    let all = d.profctl(&["sessions", "--all"]);
    all.assert_success();
    eprintln!("{}", all.stdout);
    for s in [first.session_id, id] {
        let line = session_line(&all.stdout, s)
            .unwrap_or_else(|| panic!("session {s} lost in the restart:\n{}", all.describe()));
        assert!(line.contains("duration_elapsed*"), "{line}");
    }
    let back = Profile::parse(&d.profctl(&["export", &id.to_string(), "--format", "json"]));
    assert_eq!(back.figures(), p.figures());
    drop(d);
}

/// An attach on a state directory that is full before the daemon could
/// reserve an id is refused as out of resources, saying what to free; once
/// there is room again the same attach starts.
#[test]
fn an_attach_on_a_full_state_dir_is_refused_saying_to_free_space() {
    let _serial = serial();
    require_root_and_perf();
    let tmpfs = Tmpfs::mount("1m");
    let state = tmpfs.0.clone();
    let d = Daemon::start_with(&["--state-dir", state.to_str().unwrap()]);
    let target = Workload::start("split", LONG);
    let pid = target.pid_arg();
    let filler = tmpfs.fill();
    let out = d.profctl(&["attach", &pid, "--duration", "0.5", "--format", "json"]);
    assert_one_line_error(
        &out,
        &[
            "resource exhausted",
            "file system is full",
            "free space there",
        ],
    );
    std::fs::remove_file(&filler).unwrap();
    let p = Profile::parse(&d.profctl(&["attach", &pid, "--duration", "0.5", "--format", "json"]));
    assert!(state.join(format!("{}.session", p.session_id)).is_file());
}

/// The daemon killed (`kill -9`) while a session runs, before its first
/// checkpoint (`--checkpoint-interval 600`): after the restart the session
/// is listed by `profctl sessions --all` as failed, its error saying the
/// daemon stopped before its first checkpoint.
#[test]
fn kill_9_before_the_first_checkpoint_leaves_a_failed_session() {
    let _serial = serial();
    require_root_and_perf();
    let mut d = Daemon::start_with(&["--checkpoint-interval", "600"]);
    let target = Workload::start("split", LONG);
    let pid = target.pid_arg();
    let running = d.spawn_profctl(&["attach", &pid, "--duration", "100", "--format", "json"]);
    let id = d.wait_for_samples(target.pid(), 50);

    d.kill_and_restart();
    drop(running);
    let all = d.profctl(&["sessions", "--all"]);
    all.assert_success();
    eprintln!("{}", all.stdout);
    let line = session_line(&all.stdout, id).unwrap_or_else(|| {
        panic!(
            "session {id}, running when the daemon was killed, is not listed:\n{}",
            all.describe()
        )
    });
    assert!(line.contains("failed*"), "{line}");
    let p = Profile::parse(&d.profctl(&["export", &id.to_string(), "--format", "json"]));
    assert_eq!((p.session_id, p.state.as_str()), (id, "failed"));
    assert!(
        p.error.contains("before its first checkpoint"),
        "{}",
        p.error
    );
    let next =
        Profile::parse(&d.profctl(&["attach", &pid, "--duration", "0.2", "--format", "json"]));
    assert!(next.session_id > id);
}
