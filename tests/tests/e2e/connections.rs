//! End-to-end tests of the connection limits: a daemon with 256 file
//! descriptors, flooded on its Unix socket (by a member of the socket group)
//! and on its TLS listener with connections that send nothing or half the
//! HTTP/2 preface, still answers root over the socket, closes the flood once
//! the handshake timeout has passed, serves the TLS listener again, and
//! counts what it refused in `/metrics`; an HTTP/2 client that sends nothing
//! is closed when idle. Clients that reopen what is closed are in [`hogs`].
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use profd_e2e::metrics::{sample, scrape as metrics};
use profd_e2e::tls::{free_port, listen_args, make_tls, new_token, token_file};
use profd_e2e::users::{public_dir, test_users, TEST_GROUP};
use profd_e2e::{path_str, require_root_and_perf, run_profctl, serial, Cmd, Daemon};

mod hogs;

/// The daemon's open-files limit: the flood below is more than it can hold.
const NOFILE: u64 = 256;
/// Connections opened on each listener.
const FLOOD: usize = 150;
/// How long a flooder may take to open its connections.
const CONNECT_BOUND: Duration = Duration::from_secs(60);
/// How long `profctl info` may take while the flood holds its connections
/// (a bound for correctness, far above what it needs).
const CALL_BOUND: Duration = Duration::from_secs(30);
/// How long the flood's connections may stay open: the default handshake
/// timeout (10 s) and ample slack.
const CLOSE_BOUND: Duration = Duration::from_secs(45);

/// Opens N connections to a Unix socket or a TLS port and holds them: odd
/// ones send half the HTTP/2 preface, the others nothing. Prints
/// `connected HELD REFUSED` (REFUSED: the connection or its TLS handshake
/// failed), then `closed SECONDS` for each connection the daemon closes
/// (SECONDS since they were all open), then `open N` when all are closed or
/// the time given ran out.
const FLOODER: &str = r#"
import select, socket, ssl, sys, time
mode, target, n, cafile, limit = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
held, refused = [], 0
for i in range(n):
    try:
        if mode == "unix":
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(5)
            s.connect(target)
        else:
            host, port = target.rsplit(":", 1)
            ctx = ssl.create_default_context(cafile=cafile)
            ctx.set_alpn_protocols(["h2"])
            raw = socket.create_connection((host, int(port)), timeout=5)
            s = ctx.wrap_socket(raw, server_hostname="localhost")
        if i % 2:
            s.sendall(preface[:12])
        s.setblocking(False)
        held.append(s)
    except socket.timeout:
        refused += 1
        print("stalled", i, flush=True)
        break
    except (OSError, ssl.SSLError):
        refused += 1
print("connected", len(held), refused, flush=True)
start = time.monotonic()
open_ = set(held)
while open_ and time.monotonic() - start < limit:
    ready, _, _ = select.select(list(open_), [], [], 0.5)
    for s in ready:
        try:
            data = s.recv(65536)
        except (ssl.SSLWantReadError, BlockingIOError):
            continue
        except (OSError, ssl.SSLError):
            data = b""
        if not data:
            print("closed %.1f" % (time.monotonic() - start), flush=True)
            open_.discard(s)
print("open", len(open_), flush=True)
"#;

/// A running flooder and what it printed.
struct Flood(Cmd);

impl Flood {
    fn lines(&self) -> Vec<String> {
        self.0
            .output_so_far()
            .0
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Waits for `connected HELD REFUSED`.
    fn connected(&self) -> (usize, usize) {
        let deadline = Instant::now() + CONNECT_BOUND;
        loop {
            let found = self.lines().iter().find_map(|l| {
                let mut w = l.strip_prefix("connected ")?.split(' ');
                Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
            });
            if let Some(counts) = found {
                return counts;
            }
            let (out, err) = self.0.output_so_far();
            assert!(
                Instant::now() < deadline,
                "the flooder did not open its connections within {CONNECT_BOUND:?}:\n{out}\n{err}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for the end: the seconds at which connections were closed, and
    /// how many were still open.
    fn finish(self) -> (Vec<f64>, usize) {
        let out = self.0.wait(CLOSE_BOUND + CONNECT_BOUND);
        let closed = out
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix("closed ")?.parse().ok())
            .collect();
        let open = out
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("open ")?.parse().ok())
            .unwrap_or_else(|| panic!("the flooder did not finish:\n{}", out.describe()));
        (closed, open)
    }
}

fn refused(text: &str, listener: &str, reason: &str) -> f64 {
    sample(
        text,
        &format!("profd_connections_refused_total{{listener=\"{listener}\",reason=\"{reason}\"}}"),
    )
}

/// Connections a listener closed at once, whatever the cap.
fn refused_at_once(text: &str, listener: &str) -> f64 {
    ["limit", "per_peer", "unauthenticated"]
        .iter()
        .map(|reason| refused(text, listener, reason))
        .sum()
}

#[test]
fn connections_that_never_finish_their_handshake_are_bounded_and_closed() {
    let _serial = serial();
    require_root_and_perf();
    let users = test_users();
    let dir = public_dir("conns");
    let tls = make_tls(&dir);
    let tokens = dir.join("tokens");
    let token = new_token(&tokens, "op", "read-only", "root");
    let token = token_file(&dir, "op.token", &token);
    let addr = format!("127.0.0.1:{}", free_port());
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let mut args = listen_args(&addr, &tls, &tokens);
    args.extend(["--socket-group", TEST_GROUP, "--metrics", &metrics_addr]);
    let mut d = Daemon::start_with_nofile(&args, NOFILE);

    let script = dir.join("flood.py");
    std::fs::write(&script, FLOODER).unwrap();
    let limit = CLOSE_BOUND.as_secs().to_string();
    let n = FLOOD.to_string();
    let ca = path_str(&tls.ca);
    // The socket flooded by alice, a member of the socket group...
    let mut as_alice = users.alice.setpriv_args();
    as_alice.extend(
        [
            "/usr/bin/python3",
            path_str(&script),
            "unix",
            path_str(d.socket()),
            &n,
            ca,
            &limit,
        ]
        .map(String::from),
    );
    let as_alice: Vec<&str> = as_alice.iter().map(String::as_str).collect();
    let unix = Flood(Cmd::spawn("setpriv", &as_alice));
    let (unix_held, unix_refused) = unix.connected();
    // ...and the TLS listener, by anyone.
    let tcp = Flood(Cmd::spawn(
        "/usr/bin/python3",
        &[path_str(&script), "tls", &addr, &n, ca, &limit],
    ));
    let (tls_held, tls_refused) = tcp.connected();
    eprintln!(
        "flood: unix {unix_held} held, {unix_refused} refused; tls {tls_held} held, {tls_refused} refused"
    );

    // Root still gets an answer over the socket while the flood holds on.
    let info = d.spawn_profctl(&["info"]).wait(CALL_BOUND);
    assert!(
        info.status.success(),
        "`profctl info` failed while the listeners were flooded:\n{}",
        info.describe()
    );

    // Every connection of the flood is closed: at once over the cap, the
    // rest once their handshake timeout has passed.
    let (unix_closed, unix_open) = unix.finish();
    let (tls_closed, tls_open) = tcp.finish();
    eprintln!("closed (s): unix {unix_closed:?}\ntls {tls_closed:?}");
    assert_eq!(
        (unix_open, tls_open),
        (0, 0),
        "connections of the flood (unix, tls) still open after {CLOSE_BOUND:?}"
    );
    assert!(
        unix_held + unix_refused == FLOOD && unix_closed.len() == unix_held,
        "unix: {unix_held} held and {unix_refused} refused of {FLOOD}, {} closed",
        unix_closed.len()
    );

    // The TLS listener serves again.
    let remote = run_profctl(
        &[
            "--connect",
            &format!("https://{addr}"),
            "--tls-ca",
            ca,
            "--token-file",
            path_str(&token),
            "info",
        ],
        &[],
    );
    assert!(
        remote.status.success(),
        "`profctl --connect` failed after the flood:\n{}",
        remote.describe()
    );

    // What was refused is counted, per listener: every connection of the
    // flood, either over the cap (and closed at once) or timed out.
    let m = metrics(&metrics_addr);
    let (unix_limit, unix_late) = (
        refused_at_once(&m, "unix"),
        refused(&m, "unix", "handshake_timeout"),
    );
    assert!(unix_limit > 0.0 && unix_late > 0.0, "{m}");
    assert_eq!(unix_limit + unix_late, FLOOD as f64, "{m}");
    // Closed at once: seen closed at once, or so fast that the flooder's
    // first bytes found it closed.
    let at_once = unix_closed.iter().filter(|&&t| t < 5.0).count() + unix_refused;
    assert_eq!(
        at_once as f64, unix_limit,
        "unix: closed at once {at_once}\n{m}"
    );
    assert!(
        tls_refused > 0,
        "the TLS listener took all {FLOOD} connections"
    );
    assert_eq!(refused_at_once(&m, "tls"), tls_refused as f64, "{m}");
    assert_eq!(
        refused(&m, "tls", "handshake_timeout"),
        tls_held as f64,
        "{m}"
    );
    for listener in ["unix", "tls"] {
        assert_eq!(refused(&m, listener, "idle_timeout"), 0.0, "{m}");
    }
    assert_eq!(
        sample(&m, "profd_connections{listener=\"tls\"}"),
        0.0,
        "{m}"
    );
    d.assert_alive();
}

/// An empty HTTP/2 SETTINGS frame.
const SETTINGS: [u8; 9] = [0, 0, 0, 4, 0, 0, 0, 0, 0];

#[test]
fn a_silent_http2_client_is_closed_when_idle_and_a_live_one_is_not() {
    let _serial = serial();
    require_root_and_perf();
    let idle = Duration::from_secs(3);
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let mut d = Daemon::start_with(&[
        "--idle-timeout",
        &idle.as_secs().to_string(),
        "--metrics",
        &metrics_addr,
    ]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    // A live client: a health Watch stream, which gets nothing after its
    // first update, over a connection whose client answers the pings.
    let socket = d.socket().to_path_buf();
    let mut stream = rt.block_on(async {
        use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
        let ch = profctl::requests::connect::unix_channel(&socket, None)
            .await
            .expect("connect to profd's socket");
        let mut stream = HealthClient::new(ch)
            .watch(HealthCheckRequest::default())
            .await
            .expect("health Watch")
            .into_inner();
        stream.message().await.expect("a health update");
        stream
    });
    // A silent one: the preface and SETTINGS, then nothing, whatever the
    // daemon sends (its SETTINGS, pings).
    let mut silent = UnixStream::connect(d.socket()).expect("connect");
    silent
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .unwrap();
    silent.write_all(&SETTINGS).unwrap();
    silent.set_read_timeout(Some(CLOSE_BOUND)).unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    let end = loop {
        match silent.read(&mut buf) {
            Ok(0) => break "closed",
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break "reset",
            Err(e) => panic!("the silent connection was not closed: {e}"),
        }
    };
    let waited = started.elapsed();
    eprintln!("silent connection {end} after {waited:?}");
    assert!(waited >= idle, "closed after {waited:?}, before {idle:?}");

    // The live client's stream is still open three idle timeouts later.
    let quiet = rt.block_on(async {
        tokio::time::timeout(3 * idle, stream.message())
            .await
            .map(|m| format!("{m:?}"))
    });
    assert!(
        quiet.is_err(),
        "the live client's Watch stream ended: {quiet:?}"
    );
    let m = metrics(&metrics_addr);
    assert_eq!(refused(&m, "unix", "idle_timeout"), 1.0, "{m}");
    assert_eq!(refused(&m, "unix", "handshake_timeout"), 0.0, "{m}");
    drop(stream);
    d.assert_alive();
}
