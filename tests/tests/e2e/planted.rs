//! End-to-end tests of the files profctl writes and the files profd
//! trusts, against a local user (`profd-t-alice`) who plants symbolic
//! links where root will write or read: at the names of `run -o`,
//! `export -o`, `histogram --gmon`, `diff --pprof`, `man --dir` and
//! `fleet -o`, at their temporary names (the old predictable ones, and by
//! racing every new one), and at a sink's `password_file`, `token_file` and
//! `ca_file`. The victim is a root-owned file the attacker cannot write
//! or read; it must stay as it was, and every refusal names the file and
//! the rule. Real kernel, real `profd` and `profctl`, real users.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use profd_e2e::cgroups::Cgroup;
use profd_e2e::clickhouse::{Server, KEYED_PASSWORD, KEYED_USER};
use profd_e2e::users::{chmod, env, public_copy, public_dir, User};
use profd_e2e::{
    assert_one_line_error, build_workload, path_str, run_profctl, run_profd, unique_dir,
    wait_until, CmdOutput, Daemon, Workload,
};

/// What the victim holds.
const PRECIOUS: &str = "precious: root's own settings\n";
/// The rule profctl states when it refuses a link.
const CLIENT_LINK_RULE: &str = "profctl follows a link only when you or root own it";
/// The rules profd states.
const LINK_RULE: &str = "profd follows a symbolic link only when root or its own user owns it";
const FILE_RULE: &str =
    "profd trusts a file only when root or its own user owns it and no one else may write it";
/// How long windows may take to reach ClickHouse.
const DELIVERY: Duration = Duration::from_secs(120);

/// A root-owned file (mode 0644, or 0600 for a secret) in a directory of
/// root's that the attacker wants overwritten or read.
struct Victim {
    dir: PathBuf,
    path: PathBuf,
    text: String,
    mode: u32,
}

impl Victim {
    fn new(label: &str, text: &str, mode: u32) -> Victim {
        let dir = unique_dir(label);
        let path = dir.join("victim.conf");
        std::fs::write(&path, text).unwrap();
        chmod(&path, mode);
        Victim {
            dir,
            path,
            text: text.to_string(),
            mode,
        }
    }

    /// Fails the test unless the victim is as it was, alone in its
    /// directory (nothing was written beside it either).
    fn assert_untouched(&self, after: &str) {
        let meta = std::fs::symlink_metadata(&self.path).expect("the victim is there");
        assert!(
            meta.is_file(),
            "after {after}: the victim is no longer a file"
        );
        let now = std::fs::read(&self.path).unwrap_or_default();
        assert!(
            now == self.text.as_bytes(),
            "after {after}: the victim was overwritten: it holds {} bytes now, {:?}…",
            now.len(),
            String::from_utf8_lossy(&now[..now.len().min(24)])
        );
        assert_eq!(meta.mode() & 0o7777, self.mode, "after {after}: its mode");
        assert_eq!((meta.uid(), meta.gid()), (0, 0), "after {after}: its owner");
        let names: Vec<_> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names.len(),
            1,
            "after {after}: files beside the victim: {names:?}"
        );
    }
}

/// Runs `program args...` as `user`; fails the test unless it succeeds.
fn as_user(user: &User, program: &str, args: &[&str]) {
    let out = user
        .command(Path::new(program))
        .args(args)
        .output()
        .expect("run setpriv");
    assert!(
        out.status.success(),
        "`{program} {}` as {} failed: {}",
        args.join(" "),
        user.name,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `user` makes the symbolic link `link` → `target`.
fn plant(user: &User, target: &Path, link: &Path) {
    as_user(user, "ln", &["-s", path_str(target), path_str(link)]);
}

/// A directory like /tmp: root's, mode 1777.
fn sticky_dir(label: &str) -> PathBuf {
    let dir = public_dir(label);
    chmod(&dir, 0o1777);
    dir
}

/// A directory `user` owns (mode 0755), that root writes into.
fn users_dir(user: &User, label: &str) -> PathBuf {
    let dir = public_dir(label);
    std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid)).unwrap();
    dir
}

/// profctl failed with one line refusing `link`, planted by `user`, and
/// stating the rule.
fn assert_refused(out: &CmdOutput, link: &Path, user: &User) {
    assert_one_line_error(
        out,
        &[
            &format!("{} is a symbolic link", link.display()),
            &format!("owned by uid {} ({})", user.uid, user.name),
            CLIENT_LINK_RULE,
        ],
    );
}

/// Whether `path` is a whole gzip file root wrote (a pprof profile).
fn is_roots_gzip(path: &Path) -> bool {
    let meta = std::fs::symlink_metadata(path).expect("stat the output");
    let bytes = std::fs::read(path).unwrap_or_default();
    meta.is_file() && meta.uid() == 0 && bytes.starts_with(&[0x1f, 0x8b])
}

/// Links alice planted at the names root's profctl writes are refused,
/// naming the link, its owner and the rule: `run -o` before it starts its
/// command, `export -o`, `histogram --gmon`, `diff --pprof DIR` and
/// `man --dir`. Nothing is written to or beside the victims.
#[test]
fn links_planted_at_output_names_are_refused() {
    let env = env();
    let alice = &env.users.alice;
    let victim = Victim::new("victim-file", PRECIOUS, 0o644);
    let victim_dir = Victim::new("victim-dir", PRECIOUS, 0o644);
    let tmp = sticky_dir("planted-out");
    let d = Daemon::start();

    // run -o: refused before the command runs.
    let run_out = tmp.join("prof.pb.gz");
    plant(alice, &victim.path, &run_out);
    let marker = unique_dir("ran").join("ran");
    let touch = format!("touch {}", path_str(&marker));
    let out = d.profctl(&["run", "-o", path_str(&run_out), "--", "sh", "-c", &touch]);
    assert_refused(&out, &run_out, alice);
    assert!(!marker.exists(), "the command ran before -o was refused");
    victim.assert_untouched("run -o");

    // A session to export.
    let split = build_workload("split");
    let target = Workload::start_exe(&split, 60.0);
    let p = d.profile_until(&target, 300, &[]);
    let id = p.session_id.to_string();

    let export = tmp.join("prof.folded");
    plant(alice, &victim.path, &export);
    let out = d.profctl(&["export", &id, "--format", "folded", "-o", path_str(&export)]);
    assert_refused(&out, &export, alice);
    victim.assert_untouched("export -o");

    let gmon = tmp.join("gmon.out");
    plant(alice, &victim.path, &gmon);
    let out = d.profctl(&[
        "histogram",
        &id,
        "--binary",
        path_str(&split),
        "--gmon",
        path_str(&gmon),
    ]);
    assert_refused(&out, &gmon, alice);
    victim.assert_untouched("histogram --gmon");

    let pairs = tmp.join("pairs");
    plant(alice, &victim_dir.dir, &pairs);
    let out = d.profctl(&["diff", &id, &id, "--pprof", path_str(&pairs)]);
    assert_refused(&out, &pairs, alice);
    victim_dir.assert_untouched("diff --pprof");

    let man = tmp.join("man");
    plant(alice, &victim_dir.dir, &man);
    let out = run_profctl(&["man", "--dir", path_str(&man)], &[]);
    assert_refused(&out, &man, alice);
    victim_dir.assert_untouched("man --dir");

    // The same commands write where no one else could interfere.
    let mine = unique_dir("planted-own");
    let own = mine.join("prof.pb.gz");
    d.profctl(&["export", &id, "--format", "pprof", "-o", path_str(&own)])
        .assert_success();
    assert!(is_roots_gzip(&own));
    d.profctl(&["diff", &id, &id, "--pprof", path_str(&mine.join("pairs"))])
        .assert_success();
    assert!(is_roots_gzip(&mine.join("pairs/base.pb.gz")));
}

/// The attack of the report: root's `profctl run -o D/prof.pb.gz` while
/// alice, who can write D, plants links at the temporary name the old
/// profctl used (`.prof.pb.gz.<its pid>.tmp`, the pid read from /proc)
/// and races every new `.`-name in D (inotify), replacing it with a link
/// where she may. In a sticky directory profctl writes its file; in
/// alice's own one it writes it or, when she replaced its temporary file
/// in time, says so. Either way the victim stays as it was.
#[test]
fn run_o_temporary_files_cannot_be_planted_or_raced() {
    let env = env();
    let alice = &env.users.alice;
    let victim = Victim::new("victim-race", PRECIOUS, 0o644);
    let planter = public_copy(&build_workload("planter"));
    let d = Daemon::start();
    for (label, dir, sticky) in [
        ("sticky", sticky_dir("race-sticky"), true),
        ("alice's", users_dir(alice, "race-alice"), false),
    ] {
        let mut attacker = alice.command(&planter);
        attacker.args([
            path_str(&dir),
            path_str(&victim.path),
            "prof.pb.gz",
            "profctl",
        ]);
        let mut attacker = Workload::start_command(attacker, "planter");
        let go = unique_dir("race-go").join("go");
        let wait = format!("while [ ! -e {} ]; do :; done", path_str(&go));
        let output = dir.join("prof.pb.gz");
        let run = d.spawn_profctl(&["run", "-o", path_str(&output), "--", "sh", "-c", &wait]);
        // The attacker has found profctl and planted the old name.
        let old_name = dir.join(format!(".prof.pb.gz.{}.tmp", run.pid()));
        wait_until(
            &format!("alice's link at {}", old_name.display()),
            Duration::from_secs(60),
            || std::fs::symlink_metadata(&old_name).ok().map(|_| ()),
        );
        std::fs::write(&go, "").unwrap();
        let out = run.wait(Duration::from_secs(120));
        std::fs::write(dir.join(".stop"), "").unwrap();
        attacker.wait(Duration::from_secs(60));
        eprintln!("  {label} directory: {}", out.stderr.trim());
        victim.assert_untouched(&format!("run -o in {label} directory"));
        if out.status.success() {
            assert!(is_roots_gzip(&output), "{label}: {}", out.describe());
        } else {
            assert!(
                !sticky,
                "in a sticky directory profctl must write:\n{}",
                out.describe()
            );
            // The command's status line, then why the file was not written.
            let refusal = format!("profctl: cannot write {}: ", output.display());
            assert!(
                out.status.code() == Some(1)
                    && out.stderr.lines().any(|l| l.starts_with(&refusal)
                        && l.contains("was replaced while profctl wrote it")),
                "{label}: {}",
                out.describe()
            );
        }
    }
}

/// An HTTP listener standing for a sink's backend: it keeps the header
/// block of every request and answers 500.
struct Backend {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl Backend {
    fn start() -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (kept, stopped) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut conn) = conn else { continue };
                let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                kept.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head).into_owned());
                let _ = conn.write_all(
                    b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\nConnection: close\r\n\r\nnope",
                );
            }
        });
        Backend { port, seen, stop }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// A profd.toml with continuous profiling on and one sink.
fn sink_config(sink: &str) -> PathBuf {
    let config = unique_dir("planted-config").join("profd.toml");
    std::fs::write(
        &config,
        format!("[continuous]\nenabled = true\n\n[[sink]]\n{sink}"),
    )
    .unwrap();
    config
}

/// Point 4 of the report: a sink's secret file that alice planted as a
/// link to a file only root may read, one others may write, or one alice
/// owns, is refused by `profd --check-config` and by a daemon starting,
/// naming the key, the file and the rule; nothing of root's file reaches
/// the backend. The same for `token_file` and `ca_file`.
#[test]
fn sink_secret_files_others_could_steer_are_refused() {
    let env = env();
    let alice = &env.users.alice;
    let secret_text = format!("root-only-secret-{}\n", std::process::id());
    let secret = Victim::new("victim-secret", &secret_text, 0o600);
    chmod(&secret.dir, 0o700);
    let backend = Backend::start();
    let url = backend.url();
    let tmp = sticky_dir("secrets-tmp");
    let hers = users_dir(alice, "secrets-alice");

    let in_tmp = tmp.join("ch.key");
    plant(alice, &secret.path, &in_tmp);
    let in_hers = hers.join("ch.key");
    plant(alice, &secret.path, &in_hers);
    let writable = unique_dir("secrets-writable").join("ch.key");
    std::fs::write(&writable, "k3y\n").unwrap();
    chmod(&writable, 0o666);
    let owned = hers.join("own.key");
    std::fs::write(&owned, "k3y\n").unwrap();
    chmod(&owned, 0o600);
    std::os::unix::fs::chown(&owned, Some(alice.uid), Some(alice.gid)).unwrap();
    let token = tmp.join("otlp.token");
    plant(alice, &secret.path, &token);
    let ca = tmp.join("ca.pem");
    plant(alice, &secret.path, &ca);

    let link = |p: &Path| {
        vec![
            format!(
                "{} is a symbolic link (to {}) owned by uid {} ({})",
                p.display(),
                secret.path.display(),
                alice.uid,
                alice.name
            ),
            LINK_RULE.to_string(),
        ]
    };
    let clickhouse = |key: &str, p: &Path| {
        format!(
            "kind = \"clickhouse\"\nname = \"ch\"\nurl = \"{url}\"\nuser = \"default\"\n{key} = \"{}\"\n",
            p.display()
        )
    };
    let cases: Vec<(&str, String, Vec<String>)> = vec![
        (
            "password_file",
            clickhouse("password_file", &in_tmp),
            link(&in_tmp),
        ),
        (
            "password_file",
            clickhouse("password_file", &in_hers),
            link(&in_hers),
        ),
        (
            "password_file",
            clickhouse("password_file", &writable),
            vec![
                format!(
                    "{} is writable by group or others (mode 666)",
                    writable.display()
                ),
                FILE_RULE.to_string(),
            ],
        ),
        (
            "password_file",
            clickhouse("password_file", &owned),
            vec![
                format!(
                    "{} is owned by uid {} ({})",
                    owned.display(),
                    alice.uid,
                    alice.name
                ),
                FILE_RULE.to_string(),
            ],
        ),
        (
            "token_file",
            format!(
                "kind = \"otlp\"\nurl = \"{url}\"\ntoken_file = \"{}\"\n",
                token.display()
            ),
            link(&token),
        ),
        ("ca_file", clickhouse("ca_file", &ca), link(&ca)),
    ];
    for (key, sink, needles) in &cases {
        let config = sink_config(sink);
        let socket = unique_dir("planted-sock").join("profd.sock");
        for args in [
            vec!["--config", path_str(&config), "--check-config"],
            vec![
                "--config",
                path_str(&config),
                "--socket",
                path_str(&socket),
                "--no-persist",
            ],
        ] {
            let out = run_profd(&args);
            eprintln!("  {}", out.stderr.trim());
            let requests = backend.requests();
            assert!(
                !requests.iter().any(|r| r.contains(secret_text.trim())),
                "{key}: root's secret reached the backend: {requests:#?}"
            );
            assert_eq!(out.status.code(), Some(1), "{}", out.describe());
            assert!(
                out.stderr.contains(&format!("sink[0].{key}: ")),
                "the error does not name sink[0].{key}:\n{}",
                out.describe()
            );
            for needle in needles {
                assert!(
                    out.stderr.contains(needle.as_str()),
                    "the error does not say {needle:?}:\n{}",
                    out.describe()
                );
            }
            assert!(
                !out.stderr.contains(secret_text.trim())
                    && !out.stdout.contains(secret_text.trim()),
                "root's secret was shown:\n{}",
                out.describe()
            );
        }
    }
    let requests = backend.requests();
    assert!(
        !requests.iter().any(|r| r.contains(secret_text.trim())),
        "root's secret reached the backend: {requests:#?}"
    );
    secret.assert_untouched("the sink checks");
}

/// A key file only root controls still works, as a file or through root's
/// own links (a Kubernetes secret volume's layout): `--check-config` logs
/// in to a real ClickHouse as a user that needs the password, and a
/// daemon sends its windows with it. `profctl fleet -o` then refuses a
/// link alice planted at its name and writes a name of root's.
#[test]
fn sink_key_files_only_root_controls_are_used() {
    let env = env();
    let alice = &env.users.alice;
    let ports = Server::ports(1);
    let server = Server::start("keyed", ports[0], &ports);
    let keys = unique_dir("keyed");
    let key = keys.join("ch.key");
    std::fs::write(&key, format!("{KEYED_PASSWORD}\n")).unwrap();
    chmod(&key, 0o600);
    let volume = public_dir("keyed-volume");
    chmod(&volume, 0o1777);
    let dated = volume.join("..2024_01_01_00_00_00.1");
    std::fs::create_dir(&dated).unwrap();
    std::fs::write(dated.join("password"), KEYED_PASSWORD).unwrap();
    std::os::unix::fs::symlink("..2024_01_01_00_00_00.1", volume.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/password", volume.join("password")).unwrap();
    let wrong = keys.join("wrong.key");
    std::fs::write(&wrong, "not-the-password\n").unwrap();
    chmod(&wrong, 0o600);
    let sink = |key: &Path| {
        format!(
            "kind = \"clickhouse\"\nname = \"ch\"\nurl = \"{}\"\nuser = \"{KEYED_USER}\"\npassword_file = \"{}\"\n",
            server.url(),
            key.display()
        )
    };
    for file in [&key, &volume.join("password")] {
        let out = run_profd(&[
            "--config",
            path_str(&sink_config(&sink(file))),
            "--check-config",
        ]);
        eprintln!("  {}", out.stdout.lines().last().unwrap_or_default());
        out.assert_success();
        assert!(
            out.stdout.contains("# sink ch: reachable (ClickHouse"),
            "{}",
            out.describe()
        );
    }
    // The server does check the password.
    let out = run_profd(&[
        "--config",
        path_str(&sink_config(&sink(&wrong))),
        "--check-config",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", out.describe());

    // A daemon sends its windows with the key.
    let cg = Cgroup::new(&format!("profd-keyed-{}", std::process::id()));
    let config = unique_dir("keyed-daemon").join("profd.toml");
    std::fs::write(
        &config,
        format!(
            "[continuous]\nenabled = true\nfrequency = 999\nwindow = 1\nselect = [\"cgroup:{}\"]\n\n[[sink]]\n{}",
            cg.path(),
            sink(&key)
        ),
    )
    .unwrap();
    let _d = Daemon::start_with(&["--config", path_str(&config)]);
    let mut cmd = cg.command(build_workload("split"));
    cmd.args(["3", "--ready"]);
    let mut w = Workload::start_command(cmd, "split");
    let windows = wait_until("windows in ClickHouse", DELIVERY, || {
        let n = server.number("SELECT count() FROM profd.windows");
        (n > 0).then_some(n)
    });
    eprintln!("  {windows} windows sent as {KEYED_USER}");
    w.wait(Duration::from_secs(60));

    // fleet -o: alice's link refused, root's own name written.
    let victim = Victim::new("victim-fleet", PRECIOUS, 0o644);
    let tmp = sticky_dir("fleet-out");
    let planted = tmp.join("fleet.pb.gz");
    plant(alice, &victim.path, &planted);
    let fleet = |out: &Path| {
        run_profctl(
            &[
                "fleet",
                "--clickhouse",
                &server.url(),
                "--since",
                "1h",
                "--format",
                "pprof",
                "-o",
                path_str(out),
            ],
            &[],
        )
    };
    assert_refused(&fleet(&planted), &planted, alice);
    victim.assert_untouched("fleet -o");
    let own = unique_dir("fleet-own").join("fleet.pb.gz");
    fleet(&own).assert_success();
    assert!(is_roots_gzip(&own));
}
