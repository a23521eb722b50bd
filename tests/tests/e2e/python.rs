//! The Python client example (`examples/python/profd_client.py`, grpcio with
//! stubs generated from `proto/`) run against a live daemon, over the Unix
//! socket and over the TLS listener with a bearer token. Its interpreter is a
//! virtual environment made once under the target directory with the
//! example's requirements (from PyPI).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use profd_e2e::tls::{free_port, listen_args, make_tls, new_token, token_file};
use profd_e2e::{
    path_str, require_root_and_perf, serial, unique_dir, Cmd, CmdOutput, Daemon, Harness, Workload,
};

/// Long enough to outlive every session of these tests.
const LONG: f64 = 60.0;

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/python/profd_client.py")
}

/// The virtual environment's python, with grpcio and grpcio-tools.
fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-venv");
        let python = venv.join("bin/python");
        let ready = |python: &Path| {
            Command::new(python)
                .args(["-c", "import grpc, grpc_tools"])
                .status()
                .is_ok_and(|s| s.success())
        };
        if !ready(&python) {
            let made = Command::new("python3")
                .args(["-m", "venv", path_str(&venv)])
                .status();
            assert!(
                made.is_ok_and(|s| s.success()),
                "`python3 -m venv {}` failed: the Python example needs python3 with venv",
                venv.display()
            );
            let requirements =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/python/requirements.txt");
            let pip = Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", "-r", path_str(&requirements)])
                .status();
            assert!(
                pip.is_ok_and(|s| s.success()),
                "pip could not install {} into {}",
                requirements.display(),
                venv.display()
            );
            assert!(
                ready(&python),
                "grpcio is not importable in {}",
                venv.display()
            );
        }
        python
    })
}

/// `profd_client.py <args...>`, waited for.
fn run(args: &[&str]) -> CmdOutput {
    let example = example();
    let mut all = vec![path_str(&example)];
    all.extend_from_slice(args);
    Cmd::spawn(path_str(python()), &all).wait(std::time::Duration::from_secs(60))
}

/// The rows of the last table printed: (incl %, excl %, function).
fn last_table(out: &str) -> Vec<(f64, f64, String)> {
    let tables: Vec<&str> = out.split("INCL%").collect();
    let last = tables.last().expect("split gives one part");
    last.lines()
        .skip(1)
        .map_while(|line| {
            let mut words = line.split_whitespace();
            let incl = words.next()?.parse().ok()?;
            let excl = words.next()?.parse().ok()?;
            Some((incl, excl, words.next()?.to_string()))
        })
        .collect()
}

fn pct_of(rows: &[(f64, f64, String)], name: &str) -> (f64, f64) {
    rows.iter()
        .find(|r| r.2 == name)
        .map(|r| (r.0, r.1))
        .unwrap_or_else(|| panic!("no row for {name} in {rows:?}"))
}

/// Attach and watch until the end, list, and watch an ended session, all
/// through the Unix socket with the caller's credentials.
#[test]
fn python_client_attaches_lists_and_watches_over_the_socket() {
    let h = Harness::start();
    let target = Workload::start("split", LONG);
    let socket = ["--socket", path_str(h.daemon.socket())];
    let pid = target.pid_arg();
    let mut args = socket.to_vec();
    args.extend(["attach", &pid, "--seconds", "3", "--top", "8"]);
    let out = run(&args);
    out.assert_success();
    eprintln!("{}", out.stdout);
    let stdout = &out.stdout;
    assert!(stdout.contains("(snapshot)"), "no snapshot:\n{stdout}");
    assert!(stdout.contains("(final)"), "no final update:\n{stdout}");
    // `seq N (kind) ...`: the snapshot first, the final last, sequence
    // numbers never going back.
    let updates: Vec<(u64, &str)> = stdout
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.strip_prefix("seq ")?.split_whitespace().collect();
            Some((w.first()?.parse().ok()?, *w.get(1)?))
        })
        .collect();
    let kinds: Vec<&str> = updates.iter().map(|u| u.1).collect();
    assert!(
        kinds.len() >= 2
            && kinds[0] == "(snapshot)"
            && kinds[kinds.len() - 1] == "(final)"
            && kinds[1..kinds.len() - 1].iter().all(|k| *k == "(update)"),
        "{kinds:?}:\n{stdout}"
    );
    assert!(
        updates.windows(2).all(|w| w[0].0 <= w[1].0),
        "seq went back:\n{stdout}"
    );
    // split.c spends 1/4 of its time in leaf_a and 3/4 in leaf_b, both
    // called from mid's or work's frames under main.
    let rows = last_table(stdout);
    let (_, leaf_b) = pct_of(&rows, "leaf_b");
    let (_, leaf_a) = pct_of(&rows, "leaf_a");
    let (main, _) = pct_of(&rows, "main");
    assert!((leaf_b - 75.0).abs() <= 5.0, "leaf_b {leaf_b} %:\n{stdout}");
    assert!((leaf_a - 25.0).abs() <= 5.0, "leaf_a {leaf_a} %:\n{stdout}");
    assert!(main >= 99.0, "main {main} % inclusive:\n{stdout}");
    let id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("session ")?.split_whitespace().next())
        .expect("`session N attached` line")
        .to_string();

    let mut args = socket.to_vec();
    args.push("list");
    let list = run(&args);
    list.assert_success();
    let row = list
        .stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(id.as_str()))
        .unwrap_or_else(|| panic!("session {id} not listed:\n{}", list.stdout));
    assert!(row.contains("duration_elapsed"), "{row}");
    assert!(row.contains(&pid), "{row}");

    // An ended session: one final snapshot.
    let mut args = socket.to_vec();
    args.extend(["watch", &id]);
    let ended = run(&args);
    ended.assert_success();
    let seqs: Vec<&str> = ended
        .stdout
        .lines()
        .filter(|l| l.starts_with("seq "))
        .collect();
    assert_eq!(seqs.len(), 1, "{}", ended.stdout);
    assert!(seqs[0].contains("(snapshot)"), "{}", ended.stdout);
    assert_eq!(
        pct_of(&last_table(&ended.stdout), "leaf_b").1,
        leaf_b,
        "the stored profile is the watched one"
    );

    // An unknown session: the daemon's NOT_FOUND, one line, exit 1.
    let mut args = socket.to_vec();
    args.extend(["watch", "999999"]);
    let missing = run(&args);
    assert_eq!(missing.status.code(), Some(1), "{}", missing.describe());
    assert!(
        missing.stderr.contains("NOT_FOUND") && missing.stderr.contains("999999"),
        "{}",
        missing.describe()
    );
}

/// The same client over the TLS listener: the test CA, a bearer token; a
/// wrong token is refused as UNAUTHENTICATED.
#[test]
fn python_client_works_over_tls_with_a_token() {
    let _serial = serial();
    require_root_and_perf();
    let dir = unique_dir("python-tls");
    let tls = make_tls(&dir);
    let tokens = dir.join("tokens");
    let token = new_token(&tokens, "py", "operator", "root");
    let good = token_file(&dir, "good.token", &token);
    let bad = token_file(&dir, "bad.token", &format!("{token}x"));
    let addr = format!("127.0.0.1:{}", free_port());
    let daemon = Daemon::start_with(&listen_args(&addr, &tls, &tokens));
    let target = Workload::start("split", LONG);
    let pid = target.pid_arg();
    let remote = |token: &Path, args: &[&str]| {
        let mut all = vec![
            "--connect",
            &addr,
            "--tls-ca",
            path_str(&tls.ca),
            "--token-file",
            path_str(token),
        ];
        all.extend_from_slice(args);
        run(&all)
    };

    let out = remote(&good, &["attach", &pid, "--seconds", "2"]);
    out.assert_success();
    eprintln!("{}", out.stdout);
    assert!(out.stdout.contains("(final)"), "{}", out.stdout);
    let (_, leaf_b) = pct_of(&last_table(&out.stdout), "leaf_b");
    assert!((leaf_b - 75.0).abs() <= 5.0, "leaf_b {leaf_b} %");

    let list = remote(&good, &["list"]);
    list.assert_success();
    assert!(list.stdout.contains(&pid), "{}", list.stdout);

    let refused = remote(&bad, &["list"]);
    assert_eq!(refused.status.code(), Some(1), "{}", refused.describe());
    assert!(
        refused.stderr.contains("UNAUTHENTICATED"),
        "{}",
        refused.describe()
    );
    drop(daemon);
}
