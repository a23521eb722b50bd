//! End-to-end tests of one peer holding connections as fast as the daemon
//! closes them (`hog.py`): raw TCP connections that never start TLS and TLS
//! connections that only send HTTP/2 PINGs, from one address, while a token
//! holder from another makes every one of its calls; one user's connections
//! on the Unix socket (some of which made a call and then only ping), while
//! another user makes every one of its calls and root gets in. What was
//! refused shows in `/metrics` by reason.
use std::time::{Duration, Instant};

use profd_e2e::metrics::{sample, scrape as metrics};
use profd_e2e::tls::{free_port, listen_args, make_tls, new_token, token_file};
use profd_e2e::users::{public_dir, test_users, TEST_GROUP};
use profd_e2e::{bin, path_str, require_root_and_perf, serial, Cmd, CmdOutput, Daemon};

use super::refused;

/// The attacker: see its docstring.
const HOG: &str = include_str!("hog.py");
/// Each listener's cap in these tests: the attacker opens more than that.
const MAX_CONNECTIONS: usize = 32;
/// The handshake timeout: raw connections are closed (and reopened) often.
const HANDSHAKE_SECS: &str = "2";
/// How long one call of a well-behaved client may take while the attack
/// goes on (a bound for correctness, far above what it needs).
const CALL_BOUND: Duration = Duration::from_secs(30);
/// How long the attack may take to show what the tests wait for.
const EVENT_BOUND: Duration = Duration::from_secs(90);

/// A running `hog.py` and what it printed.
struct Hog(Cmd);

impl Hog {
    fn lines(&self) -> Vec<String> {
        self.0
            .output_so_far()
            .0
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The last `stats` line: (opened, closed, failed, pings).
    fn stats(&self) -> (u64, u64, u64, u64) {
        let lines = self.lines();
        let Some(line) = lines.iter().rev().find(|l| l.starts_with("stats ")) else {
            return (0, 0, 0, 0);
        };
        let get = |key: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
                .unwrap_or(0)
        };
        (get("opened"), get("closed"), get("failed"), get("pings"))
    }

    /// Waits until `ready` holds of the attacker's output, failing the test
    /// after [`EVENT_BOUND`].
    fn wait_for(&self, what: &str, ready: impl Fn(&Hog) -> bool) {
        let deadline = Instant::now() + EVENT_BOUND;
        while !ready(self) {
            let (out, err) = self.0.output_so_far();
            assert!(
                Instant::now() < deadline,
                "the attacker: {what}: not within {EVENT_BOUND:?}\n{out}\n{err}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Starts `hog.py` as `program args...` (`setpriv ... python3` or python3).
fn hog(dir: &std::path::Path, program: &str, args: &[String]) -> Hog {
    let script = dir.join("hog.py");
    std::fs::write(&script, HOG).unwrap();
    let mut full: Vec<&str> = args.iter().map(String::as_str).collect();
    let at = full
        .iter()
        .position(|a| *a == "HOG")
        .expect("HOG in the arguments");
    full[at] = path_str(&script);
    Hog(Cmd::spawn(program, &full))
}

/// Runs `cmd` until it ends or `bound` passes: its output, or what went wrong.
fn within(mut cmd: Cmd, bound: Duration) -> Result<CmdOutput, String> {
    let started = Instant::now();
    while cmd.running() {
        if started.elapsed() > bound {
            cmd.kill();
            return Err(format!("no answer within {bound:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(cmd.wait(Duration::from_secs(5)))
}

/// Makes `n` calls one after the other, each on a connection of its own
/// and each within [`CALL_BOUND`]: how many succeeded, and the failures.
fn calls(n: usize, mut call: impl FnMut() -> Cmd) -> (usize, Vec<String>) {
    let mut failures = Vec::new();
    for i in 0..n {
        let started = Instant::now();
        match within(call(), CALL_BOUND) {
            Ok(out) if out.status.success() => {
                eprintln!("call {i}: answered in {:?}", started.elapsed())
            }
            Ok(out) => failures.push(format!("call {i}: {}", out.describe())),
            Err(e) => failures.push(format!("call {i}: {e}")),
        }
    }
    (n - failures.len(), failures)
}

/// Waits until `/metrics` shows every reason of `reasons` at least once on
/// `listener`: returns the scrape.
fn wait_refused(addr: &str, listener: &str, reasons: &[&str]) -> String {
    let deadline = Instant::now() + EVENT_BOUND;
    loop {
        let m = metrics(addr);
        let missing: Vec<&&str> = reasons
            .iter()
            .filter(|r| refused(&m, listener, r) < 1.0)
            .collect();
        if missing.is_empty() {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "{listener}: no refusal for {missing:?} within {EVENT_BOUND:?}:\n{m}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn print_refused(m: &str, listener: &str) {
    let reasons = [
        "limit",
        "per_peer",
        "unauthenticated",
        "handshake_timeout",
        "first_request_timeout",
        "idle_timeout",
    ];
    let counts: Vec<String> = reasons
        .iter()
        .map(|r| format!("{r} {}", refused(m, listener, r)))
        .collect();
    eprintln!("{listener} refused: {}", counts.join(", "));
}

#[test]
fn a_token_holder_gets_in_while_one_address_holds_the_tls_listener() {
    let _serial = serial();
    require_root_and_perf();
    let dir = public_dir("hog-tls");
    let tls = make_tls(&dir);
    let tokens = dir.join("tokens");
    let token = new_token(&tokens, "op", "read-only", "root");
    let token = token_file(&dir, "op.token", &token);
    let addr = format!("127.0.0.1:{}", free_port());
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let max = MAX_CONNECTIONS.to_string();
    let mut args = listen_args(&addr, &tls, &tokens);
    args.extend([
        "--max-connections",
        &max,
        "--handshake-timeout",
        HANDSHAKE_SECS,
        "--metrics",
        &metrics_addr,
    ]);
    let mut d = Daemon::start_with(&args);

    // The attacker, from 127.0.0.2: PING-only TLS connections first, then
    // as many raw ones as the listener holds, each reopened when closed.
    let ca = path_str(&tls.ca);
    let attacker: Vec<String> = ["HOG", "tls", &addr, "127.0.0.2", "0", "16", &max, ca]
        .map(String::from)
        .to_vec();
    let attacker = hog(&dir, "/usr/bin/python3", &attacker);
    attacker.wait_for("8 connections opened, others refused", |h| {
        let (opened, closed, failed, _) = h.stats();
        opened >= 8 && closed + failed > 0
    });
    eprintln!("attacker before the calls: {:?}", attacker.stats());

    // A token holder, from 127.0.0.1: every call gets through.
    let url = format!("https://{addr}");
    let (ok, failures) = calls(10, || {
        Cmd::spawn(
            path_str(&bin("profctl")),
            &[
                "--connect",
                &url,
                "--tls-ca",
                ca,
                "--token-file",
                path_str(&token),
                "info",
            ],
        )
    });
    let (opened, closed, failed, pings) = attacker.stats();
    eprintln!(
        "token holder: {ok} of 10 calls answered; attacker: {opened} opened, {closed} closed, {failed} failed, {pings} pings"
    );
    assert_eq!(
        ok,
        10,
        "{ok} of 10 calls with a valid token answered while one address held the listener:\n{}",
        failures.join("\n")
    );

    // The attacker was refused at once, its raw connections closed at the
    // handshake deadline and its PING-only ones at the first-request one;
    // and it kept reopening.
    let m = wait_refused(
        &metrics_addr,
        "tls",
        &["per_peer", "handshake_timeout", "first_request_timeout"],
    );
    attacker.wait_for("connections reopened", |h| h.stats().1 > 32);
    print_refused(&m, "tls");
    eprintln!("attacker at the end: {:?}", attacker.stats());
    let per_peer = MAX_CONNECTIONS / 4;
    let held = sample(&m, "profd_connections{listener=\"tls\"}");
    assert!(
        held <= per_peer as f64,
        "the attacker holds {held} connections:\n{m}"
    );
    d.assert_alive();
}

#[test]
fn another_user_and_root_get_in_while_one_user_holds_the_socket() {
    let _serial = serial();
    require_root_and_perf();
    let users = test_users();
    let dir = public_dir("hog-unix");
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let idle = 3.0;
    let max = MAX_CONNECTIONS.to_string();
    let mut d = Daemon::start_with(&[
        "--socket-group",
        TEST_GROUP,
        "--max-connections",
        &max,
        "--handshake-timeout",
        HANDSHAKE_SECS,
        "--idle-timeout",
        "3",
        "--metrics",
        &metrics_addr,
    ]);

    // alice: two connections that make a call and then only ping, eight
    // that only ping, and as many raw ones as the socket holds.
    let mut as_alice = users.alice.setpriv_args();
    as_alice.extend(
        [
            "/usr/bin/python3",
            "HOG",
            "unix",
            path_str(d.socket()),
            "-",
            "2",
            "8",
            &max,
            "-",
        ]
        .map(String::from),
    );
    let attacker = hog(&dir, "setpriv", &as_alice);
    attacker.wait_for("both calls answered and raw connections refused", |h| {
        let answered = h
            .lines()
            .iter()
            .filter(|l| *l == "callping answered")
            .count();
        let (_, closed, _, _) = h.stats();
        answered == 2 && closed > 0
    });

    // bob, another member of the socket group: every call gets through.
    let (ok, failures) = calls(15, || d.spawn_profctl_as(&users.bob, &["info"]));
    let (opened, closed, failed, pings) = attacker.stats();
    eprintln!(
        "bob: {ok} of 15 calls answered; alice: {opened} opened, {closed} closed, {failed} failed, {pings} pings"
    );
    assert_eq!(
        ok,
        15,
        "{ok} of 15 calls of bob answered while alice held the socket:\n{}",
        failures.join("\n")
    );
    // And root.
    let root = within(d.spawn_profctl(&["info"]), CALL_BOUND);
    assert!(
        root.as_ref().is_ok_and(|o| o.status.success()),
        "root's call failed while alice held the socket: {:?}",
        root.map(|o| o.describe())
    );

    // The connections that made a call and then only pinged were closed an
    // idle timeout after their call: pings are not calls.
    attacker.wait_for("both calling connections closed", |h| {
        h.lines()
            .iter()
            .filter(|l| l.starts_with("callping closed"))
            .count()
            == 2
    });
    let after: Vec<f64> = attacker
        .lines()
        .iter()
        .filter_map(|l| l.strip_prefix("callping closed ")?.parse().ok())
        .collect();
    eprintln!("calling connections closed {after:?} s after their answer");
    assert!(
        after.iter().all(|&s| s >= idle - 0.5),
        "closed before the idle timeout ({idle} s): {after:?}"
    );
    let m = wait_refused(
        &metrics_addr,
        "unix",
        &["per_peer", "handshake_timeout", "idle_timeout"],
    );
    attacker.wait_for("connections reopened", |h| h.stats().1 > 32);
    print_refused(&m, "unix");
    eprintln!("alice at the end: {:?}", attacker.stats());
    assert!(refused(&m, "unix", "idle_timeout") >= 2.0, "{m}");
    d.assert_alive();
}
