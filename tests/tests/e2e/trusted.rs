//! End-to-end tests of the files profd trusts and keeps, against a local
//! user (`profd-t-alice`) who plants symbolic links where root's daemon
//! will read or write: a sink's `password_file`, `token_file` and
//! `ca_file`, the tokens file and TLS key of the remote listener, and the
//! state directory. Every refusal names the setting, the file and the
//! rule; root's own files, also behind root's links, keep working. Real
//! `profd` and `profctl`, a real ClickHouse, real users.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::planted::{
    assert_refused, is_roots_gzip, plant, sticky_dir, users_dir, Victim, PRECIOUS,
};
use profd_e2e::cgroups::Cgroup;
use profd_e2e::clickhouse::{Server, KEYED_PASSWORD, KEYED_USER};
use profd_e2e::tls::{free_port, make_tls, new_token};
use profd_e2e::users::{chmod, env, public_dir};
use profd_e2e::{
    build_workload, path_str, run_profctl, run_profd, unique_dir, wait_until, Daemon, Workload,
};

/// The rules profd states.
const LINK_RULE: &str = "profd follows a symbolic link only when root or its own user owns it";
const FILE_RULE: &str =
    "profd trusts a file only when root or its own user owns it and no one else may write it";
/// How long windows may take to reach ClickHouse.
const DELIVERY: Duration = Duration::from_secs(120);

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

/// The daemon's own places: a state directory alice owns, or one reached
/// through her link, and a tokens file or TLS key she planted as links,
/// stop the daemon at start, naming them and the rule. Alice's directory
/// is left as it was (not made root's 0700), nothing is written through
/// her link.
#[test]
fn daemon_files_others_could_steer_are_refused() {
    let env = env();
    let alice = &env.users.alice;
    let refused = |args: &[&str], needles: &[String]| {
        let socket = unique_dir("trusted-sock").join("profd.sock");
        let mut all = vec!["--socket", path_str(&socket)];
        all.extend_from_slice(args);
        let out = run_profd(&all);
        eprintln!("  {}", out.stderr.lines().last().unwrap_or_default());
        assert_eq!(out.status.code(), Some(1), "{}", out.describe());
        for needle in needles {
            assert!(
                out.stderr.contains(needle.as_str()),
                "the error does not say {needle:?}:\n{}",
                out.describe()
            );
        }
    };
    let who = format!("uid {} ({})", alice.uid, alice.name);

    let hers = users_dir(alice, "state-alice");
    refused(
        &["--state-dir", path_str(&hers)],
        &[format!(
            "{} is owned by {who}, who could put files in it",
            hers.display()
        )],
    );
    let meta = std::fs::metadata(&hers).unwrap();
    assert_eq!(
        (meta.uid(), meta.mode() & 0o7777),
        (alice.uid, 0o755),
        "profd changed alice's directory"
    );

    let tmp = sticky_dir("trusted-tmp");
    let roots = Victim::new("state-root", PRECIOUS, 0o644);
    let via = tmp.join("state");
    plant(alice, &roots.dir, &via);
    refused(
        &["--state-dir", path_str(&via.join("profd"))],
        &[
            format!(
                "{} is a symbolic link (to {}) owned by {who}",
                via.display(),
                roots.dir.display()
            ),
            LINK_RULE.to_string(),
        ],
    );
    roots.assert_untouched("--state-dir through alice's link");

    let dir = unique_dir("trusted-tls");
    let tls = make_tls(&dir);
    let tokens = dir.join("tokens");
    new_token(&tokens, "ops", "operator", "root");
    let (planted_tokens, planted_key) = (tmp.join("tokens"), tmp.join("key.pem"));
    plant(alice, &tokens, &planted_tokens);
    plant(alice, &tls.server_key, &planted_key);
    let addr = format!("127.0.0.1:{}", free_port());
    let cert = path_str(&tls.server_cert);
    for (what, key, toks, link) in [
        (
            "tokens file",
            &tls.server_key,
            &planted_tokens,
            &planted_tokens,
        ),
        ("--tls-key", &planted_key, &tokens, &planted_key),
    ] {
        refused(
            &[
                "--no-persist",
                "--listen",
                &addr,
                "--tls-cert",
                cert,
                "--tls-key",
                path_str(key),
                "--tokens",
                path_str(toks),
            ],
            &[
                format!("{what} {} is a symbolic link", link.display()),
                format!("owned by {who}"),
                LINK_RULE.to_string(),
            ],
        );
    }
}
