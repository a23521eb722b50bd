//! End-to-end tests of profd run as a service: the settings file and
//! `--check-config`, `/metrics` scraped while a real session runs, gRPC
//! health and reflection (on the Unix socket and the TLS listener), socket
//! activation with `systemd-socket-activate`, READY=1 and STOPPING=1 on a
//! notify socket, and journal-style log lines.
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use profd_e2e::tls::{free_port, listen_args, make_tls, new_token};
use profd_e2e::{
    path_str, require_root_and_perf, run_profd, serial, unique_dir, CmdOutput, Daemon, Profile,
    Workload,
};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

/// A long-running workload: the tests stop their sessions long before.
const LONG: f64 = 60.0;

/// The example settings file of the repository.
fn example_config() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/profd.toml")
}

/// Writes a settings file into a fresh directory.
fn config_file(label: &str, text: &str) -> PathBuf {
    let path = unique_dir(label).join("profd.toml");
    std::fs::write(&path, text).expect("write the settings file");
    path
}

/// `profd --check-config --config FILE`.
fn check_config(path: &Path, extra: &[&str]) -> CmdOutput {
    let mut args = vec!["--check-config", "--config", path_str(path)];
    args.extend_from_slice(extra);
    run_profd(&args)
}

/// profd refused with exit 1 and an error line naming `needles`.
fn assert_refused(out: &CmdOutput, needles: &[&str]) {
    assert_eq!(
        out.status.code(),
        Some(1),
        "profd did not exit 1:\n{}",
        out.describe()
    );
    for needle in needles {
        assert!(
            out.stderr.contains(needle),
            "the error does not say {needle:?}:\n{}",
            out.describe()
        );
    }
    eprintln!("  {}", out.stderr.trim());
}

#[test]
fn check_config_accepts_the_example_file_which_states_the_defaults() {
    let example = check_config(&example_config(), &[]);
    example.assert_success();
    assert!(
        example.stdout.contains("max_sessions = 64"),
        "the settings in effect are not printed:\n{}",
        example.describe()
    );
    // Every key the example sets is a default: it shows the same settings
    // as an empty file.
    let empty = check_config(&config_file("empty-config", ""), &[]);
    empty.assert_success();
    let body = |out: &CmdOutput| {
        out.stdout
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        body(&example),
        body(&empty),
        "the example's values are not the defaults"
    );
    // A flag shows up over the file.
    let flagged = check_config(&example_config(), &["--max-sessions", "5"]);
    flagged.assert_success();
    assert!(
        flagged.stdout.contains("max_sessions = 5"),
        "--max-sessions does not override the file:\n{}",
        flagged.describe()
    );
}

#[test]
fn check_config_names_the_bad_key() {
    let cases: [(&str, &str, &[&str]); 6] = [
        (
            "unknown key",
            "[limits]\nmax_sessions = 2\nmax_sesions = 3\n",
            &["limits.max_sesions: unknown key", "line 3"],
        ),
        (
            "wrong type",
            "socket = 5\n",
            &["socket: expected a path", "got 5", "line 1"],
        ),
        (
            "bad value",
            "[limits]\nmax_sessions = -1\n",
            &[
                "limits.max_sessions: expected a positive integer, got -1",
                "line 2",
            ],
        ),
        (
            "bad size",
            "[state]\nretain_bytes = \"lots\"\n",
            &["state.retain_bytes: expected a size", "line 2"],
        ),
        (
            "remote without tokens",
            "[remote]\nlisten = \"127.0.0.1:7443\"\ntls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\n",
            &["remote.tokens: missing"],
        ),
        ("not TOML", "[limits\nmax_sessions = 1\n", &["line 1"]),
    ];
    for (what, text, needles) in cases {
        eprintln!("{what}:");
        let path = config_file("bad-config", text);
        let out = check_config(&path, &[]);
        let mut all = vec![path_str(&path)];
        all.extend_from_slice(needles);
        assert_refused(&out, &all);
        assert!(
            out.stdout.is_empty(),
            "settings printed for a bad file:\n{}",
            out.describe()
        );
    }
    // A file named with --config must exist; a flag's bad value is named too.
    let missing = unique_dir("no-config").join("profd.toml");
    assert_refused(&check_config(&missing, &[]), &[path_str(&missing)]);
    let out = run_profd(&["--check-config", "--max-sessions", "0"]);
    assert_refused(
        &out,
        &["--max-sessions", "expected a positive integer, got 0"],
    );
}

/// `[limits] max_sessions = 1` in the file refuses a second session; the
/// flag `--max-sessions 2` overrides it.
#[test]
fn config_file_limits_take_effect_and_flags_override_them() {
    let _serial = serial();
    require_root_and_perf();
    let config = config_file("limits-config", "[limits]\nmax_sessions = 1\n");
    let first = Workload::start("split", LONG);
    let second = Workload::start("spin_other", LONG);
    let (p1, p2) = (first.pid_arg(), second.pid_arg());
    let attach = |d: &Daemon, pid: &str, secs: &str| {
        d.profctl(&["attach", pid, "--duration", secs, "--format", "json"])
    };

    let d = Daemon::start_with(&["--config", path_str(&config)]);
    let bg = d.spawn_profctl(&["attach", &p1, "--duration", "30", "--format", "json"]);
    wait_sessions_running(&d, 1);
    let out = attach(&d, &p2, "1");
    assert!(
        !out.status.success(),
        "a second session was started:\n{}",
        out.describe()
    );
    assert!(
        out.stderr.contains("resource exhausted") && out.stderr.contains("max_sessions"),
        "the refusal is not RESOURCE_EXHAUSTED naming the limit:\n{}",
        out.describe()
    );
    eprintln!("  file limit: {}", out.stderr.trim());
    bg.kill();
    drop(d);

    let d = Daemon::start_with(&["--config", path_str(&config), "--max-sessions", "2"]);
    let bg = d.spawn_profctl(&["attach", &p1, "--duration", "30", "--format", "json"]);
    wait_sessions_running(&d, 1);
    let p = Profile::parse(&attach(&d, &p2, "1"));
    assert_eq!(p.pid, second.pid(), "{}", p.table());
    bg.kill();
}

/// Polls `profctl sessions` until `n` sessions are running.
fn wait_sessions_running(d: &Daemon, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = d.profctl(&["sessions"]);
        if out.stdout.matches("running").count() >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{n} sessions not running:\n{}",
            out.describe()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---------------------------------------------------------------------------
// /metrics

/// `GET path` over HTTP/1.1: the status code, content type and body.
fn http_get(addr: &str, path: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read the HTTP response");
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line:\n{head}"));
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    (status, content_type, body.to_string())
}

/// Scrapes `/metrics`: every sample by name. Each `profd_` family has HELP
/// and TYPE lines.
fn scrape(addr: &str) -> HashMap<String, f64> {
    let (status, content_type, body) = http_get(addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    assert!(content_type.contains("text"), "content type {content_type}");
    let mut values = HashMap::new();
    for line in body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad line {line:?}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}"));
        values.insert(name.to_string(), value);
    }
    for name in values.keys().filter(|n| n.starts_with("profd_")) {
        let family = name.split('{').next().unwrap_or(name);
        let family = family.strip_suffix("_total").unwrap_or(family);
        for kind in ["HELP", "TYPE"] {
            assert!(
                body.contains(&format!("# {kind} {family} ")),
                "no {kind} line for {name}:\n{body}"
            );
        }
    }
    values
}

fn metric(m: &HashMap<String, f64>, name: &str) -> f64 {
    *m.get(name)
        .unwrap_or_else(|| panic!("no metric {name} in {m:#?}"))
}

/// Polls `/metrics` until `ok` holds; returns that scrape.
fn scrape_until(
    addr: &str,
    what: &str,
    ok: impl Fn(&HashMap<String, f64>) -> bool,
) -> HashMap<String, f64> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let m = scrape(addr);
        if ok(&m) {
            return m;
        }
        assert!(Instant::now() < deadline, "{what}: never seen in {m:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn metrics_follow_a_real_session() {
    let _serial = serial();
    require_root_and_perf();
    let addr = format!("127.0.0.1:{}", free_port());
    let d = Daemon::start_with(&["--metrics", &addr]);
    let before = scrape(&addr);
    for name in [
        "profd_samples_total",
        "profd_samples_attributed_total",
        "profd_samples_discarded_total",
        "profd_samples_lost_total",
        "profd_throttled_total",
        "profd_ring_reads_total",
        "profd_ring_read_bytes_total",
        "profd_sessions_started_total",
        "profd_symbol_cache_hits_total",
        "profd_symbol_cache_misses_total",
        "profd_sessions_running",
        "profd_sessions_ended",
        "profd_watchers",
        "profd_ring_groups",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
    ] {
        metric(&before, name);
    }
    assert_eq!(metric(&before, "profd_samples_total"), 0.0);
    assert_eq!(metric(&before, "profd_sessions_started_total"), 0.0);
    assert!(metric(&before, "process_resident_memory_bytes") > 0.0);

    let w = Workload::start("split", LONG);
    let pid = w.pid_arg();
    let (cpu_before, wall_before) = (w.cpu_time(), Instant::now());
    let attach = d.spawn_profctl(&["attach", &pid, "--duration", "3", "--format", "json"]);
    let during = scrape_until(&addr, "a running session with its watcher", |m| {
        metric(m, "profd_sessions_running") == 1.0
            && metric(m, "profd_watchers") >= 1.0
            && metric(m, "profd_ring_groups") == 1.0
            && metric(m, "profd_samples_attributed_total") > 0.0
    });
    eprintln!("during: {during:?}");
    let p = Profile::parse(&attach.wait(Duration::from_secs(40)));
    let (cpu, wall) = (w.cpu_time() - cpu_before, wall_before.elapsed());
    let after = scrape_until(&addr, "the session ended, its rings closed", |m| {
        metric(m, "profd_sessions_running") == 0.0
            && metric(m, "profd_watchers") == 0.0
            && metric(m, "profd_ring_groups") == 0.0
    });
    eprintln!("after: {after:?}");
    let v = |n| metric(&after, n);
    assert_eq!(v("profd_sessions_started_total"), 1.0);
    assert_eq!(v("profd_sessions_ended"), 1.0);
    // The only session's figures are the daemon's: none counted twice,
    // none left out.
    eprintln!("{}", p.table());
    assert_eq!(p.scope, "target", "{}", p.table());
    for (name, session) in [
        ("profd_samples_attributed_total", p.totals.attributed),
        ("profd_samples_lost_total", p.totals.lost),
    ] {
        assert_eq!(
            v(name),
            session as f64,
            "{name}, but the only session counted {session}:\n{}\n{after:?}",
            p.table()
        );
    }
    // The target's rings sample the target alone: what they took is its CPU
    // time × frequency (scaled to the session's share of the wall time
    // measured around it), whatever the daemon made of the samples. A few
    // more come between the session's last drain and the closing of its
    // rings.
    let share = (p.duration_s / wall.as_secs_f64()).min(1.0);
    let expected = cpu.as_secs_f64() * share * f64::from(p.frequency_hz);
    let taken = v("profd_samples_total");
    eprintln!(
        "  split used {:.3} s of CPU in {:.3} s; session {:.3} s → {expected:.0} samples; \
         the daemon took {taken}",
        cpu.as_secs_f64(),
        wall.as_secs_f64(),
        p.duration_s
    );
    assert!(
        expected >= 300.0,
        "split got only {:.3} s of CPU: too little to compare (is the machine overloaded?)",
        cpu.as_secs_f64()
    );
    assert!(
        (taken - expected).abs() <= expected * 0.25,
        "profd_samples_total {taken}, but split's CPU time calls for {expected:.0}:\n{after:?}"
    );
    assert!(
        taken - p.totals.attributed as f64 <= taken * 0.1,
        "profd_samples_total {taken}, of which the only session counted {}:\n{after:?}",
        p.totals.attributed
    );
    assert!(v("profd_ring_reads_total") > 0.0);
    assert!(v("profd_ring_read_bytes_total") > 0.0);
    assert!(v("profd_symbol_cache_misses_total") > 0.0);
    assert!(v("process_cpu_seconds_total") > 0.0);

    let (status, _, body) = http_get(&addr, "/nothing");
    assert_eq!(status, 404, "{body}");
    drop(d);
}

// ---------------------------------------------------------------------------
// gRPC health and reflection

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

async fn unix_channel(path: PathBuf) -> Channel {
    profctl::requests::connect::unix_channel(&path, None)
        .await
        .expect("connect to profd's socket")
}

async fn tls_channel(addr: &str, ca: &Path) -> Channel {
    let ca = std::fs::read(ca).expect("read the CA");
    Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca))
                .domain_name("localhost"),
        )
        .expect("TLS settings")
        .connect()
        .await
        .expect("connect to profd's TLS listener")
}

async fn health(ch: Channel, service: &str) -> Result<i32, tonic::Status> {
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let reply = HealthClient::new(ch)
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await?;
    Ok(reply.into_inner().status)
}

const SERVING: i32 = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
const NOT_SERVING: i32 = tonic_health::pb::health_check_response::ServingStatus::NotServing as i32;

/// Asks a reflection service (v1 or v1alpha) for its services and for the
/// file defining `profd.v1.Profiler`; returns the service names and that
/// file's descriptor.
macro_rules! reflect {
    ($($pb:ident)::+, $channel:expr, $token:expr) => {{
        use $($pb)::+::{
            server_reflection_client::ServerReflectionClient,
            server_reflection_request::MessageRequest,
            server_reflection_response::MessageResponse, ServerReflectionRequest,
        };
        let requests = [
            MessageRequest::ListServices(String::new()),
            MessageRequest::FileContainingSymbol("profd.v1.Profiler".into()),
        ]
        .map(|m| ServerReflectionRequest {
            host: String::new(),
            message_request: Some(m),
        });
        let mut request = tonic::Request::new(tokio_stream::iter(requests));
        if let Some(token) = $token {
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
        }
        let reply = ServerReflectionClient::new($channel)
            .server_reflection_info(request)
            .await;
        match reply {
            Err(status) => Err(status),
            Ok(reply) => {
                let mut stream = reply.into_inner();
                let mut services = Vec::new();
                let mut file = None;
                while let Some(msg) = stream.message().await.expect("a reflection answer") {
                    match msg.message_response.expect("an answer") {
                        MessageResponse::ListServicesResponse(l) => {
                            services.extend(l.service.into_iter().map(|s| s.name))
                        }
                        MessageResponse::FileDescriptorResponse(f) => {
                            file = Some(f.file_descriptor_proto)
                        }
                        other => panic!("unexpected reflection answer {other:?}"),
                    }
                }
                Ok((services, file.expect("no file descriptor answer")))
            }
        }
    }};
}

/// Checks reflection's answers: the services, and a file defining the
/// `Profiler` service of package `profd.v1` with its RPCs.
fn assert_reflected(version: &str, services: &[String], files: &[Vec<u8>]) {
    use prost::Message;
    eprintln!("  {version}: services {services:?}");
    for want in ["profd.v1.Profiler", "grpc.health.v1.Health"] {
        assert!(
            services.iter().any(|s| s == want),
            "{version}: {want} not listed: {services:?}"
        );
    }
    let protos: Vec<prost_types::FileDescriptorProto> = files
        .iter()
        .map(|b| prost_types::FileDescriptorProto::decode(&b[..]).expect("a FileDescriptorProto"))
        .collect();
    let profiler = protos
        .iter()
        .filter(|f| f.package() == "profd.v1")
        .flat_map(|f| &f.service)
        .find(|s| s.name() == "Profiler")
        .unwrap_or_else(|| panic!("{version}: no file defines profd.v1.Profiler"));
    let methods: Vec<&str> = profiler.method.iter().map(|m| m.name()).collect();
    for rpc in ["Info", "Attach", "Watch", "Stop"] {
        assert!(
            methods.contains(&rpc),
            "{version}: Profiler lacks {rpc}: {methods:?}"
        );
    }
}

/// On the Unix socket: health Check and Watch answer SERVING, reflection
/// v1 and v1alpha describe the API; at SIGTERM a health watcher sees
/// NOT_SERVING and its stream ends, and the daemon exits.
#[test]
fn health_and_reflection_on_the_socket() {
    let _serial = serial();
    require_root_and_perf();
    let mut d = Daemon::start_with(&["--no-persist"]);
    let rt = runtime();
    let socket = d.socket().to_path_buf();
    let mut stream = rt.block_on(async {
        let ch = unix_channel(socket).await;
        assert_eq!(health(ch.clone(), "").await.unwrap(), SERVING);
        assert_eq!(
            health(ch.clone(), "profd.v1.Profiler").await.unwrap(),
            SERVING
        );
        let unknown = health(ch.clone(), "no.such.Service").await.unwrap_err();
        assert_eq!(unknown.code(), tonic::Code::NotFound, "{unknown:?}");

        let (services, files) =
            reflect!(tonic_reflection::pb::v1, ch.clone(), None::<&str>).expect("reflection v1");
        assert_reflected("v1", &services, &files);
        let (services, files) = reflect!(tonic_reflection::pb::v1alpha, ch.clone(), None::<&str>)
            .expect("reflection v1alpha");
        assert_reflected("v1alpha", &services, &files);

        use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
        let mut stream = HealthClient::new(ch)
            .watch(HealthCheckRequest {
                service: "profd.v1.Profiler".into(),
            })
            .await
            .expect("health Watch")
            .into_inner();
        let first = stream.message().await.expect("a health update");
        assert_eq!(first.map(|r| r.status), Some(SERVING));
        stream
    });
    let watcher = rt.spawn(async move {
        let mut seen = Vec::new();
        while let Ok(Some(update)) = stream.message().await {
            seen.push(update.status);
        }
        seen
    });
    let status = d.terminate();
    assert!(status.success(), "profd exited with {status}:\n{}", d.log());
    let seen = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), watcher).await })
        .expect("the health Watch stream did not end at shutdown")
        .expect("the watcher task");
    assert_eq!(seen, vec![NOT_SERVING], "health updates during shutdown");
}

/// On the TLS listener, health answers without a token; reflection wants
/// one (a read-only token will do).
#[test]
fn health_is_open_and_reflection_needs_a_token_on_the_tls_listener() {
    let _serial = serial();
    require_root_and_perf();
    let dir = unique_dir("tls-health");
    let tls = make_tls(&dir);
    let tokens = dir.join("tokens");
    let token = new_token(&tokens, "dash", "read-only", "root");
    let addr = format!("127.0.0.1:{}", free_port());
    let _d = Daemon::start_with(&listen_args(&addr, &tls, &tokens));
    runtime().block_on(async {
        let ch = tls_channel(&addr, &tls.ca).await;
        assert_eq!(health(ch.clone(), "").await.unwrap(), SERVING);
        assert_eq!(
            health(ch.clone(), "profd.v1.Profiler").await.unwrap(),
            SERVING
        );
        for bad in [None, Some("not-a-token")] {
            let err = reflect!(tonic_reflection::pb::v1, ch.clone(), bad).unwrap_err();
            assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
            let err = reflect!(tonic_reflection::pb::v1alpha, ch.clone(), bad).unwrap_err();
            assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
        }
        let (services, files) = reflect!(tonic_reflection::pb::v1, ch.clone(), Some(&token))
            .expect("reflection v1 with a token");
        assert_reflected("v1 over TLS", &services, &files);
        let (services, files) = reflect!(tonic_reflection::pb::v1alpha, ch, Some(&token))
            .expect("reflection v1alpha with a token");
        assert_reflected("v1alpha over TLS", &services, &files);
    });
}

// ---------------------------------------------------------------------------
// systemd: socket activation, notify, journal lines

/// `systemd-socket-activate -l LISTEN -E VARS... profd ARGS...`, stderr to
/// `log`; SIGTERM then SIGKILL when dropped.
struct Activated {
    child: Child,
    log: PathBuf,
}

impl Activated {
    fn start(listen: &str, env: &[String], args: &[&str], log: &Path) -> Activated {
        let profd = profd_e2e::bin("profd");
        let mut cmd = Command::new("systemd-socket-activate");
        cmd.args(["-l", listen]);
        for e in env {
            cmd.args(["-E", e]);
        }
        let file = std::fs::File::create(log).expect("create the log");
        let child = cmd
            .arg(&profd)
            .args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("run systemd-socket-activate (Debian package systemd)");
        Activated {
            child,
            log: log.to_path_buf(),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the process to exit; fails the test after 30 s.
    fn wait(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "profd did not exit:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Activated {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            signal(self.child.id(), "TERM");
            std::thread::sleep(Duration::from_millis(500));
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- log ---\n{}", self.log());
        }
    }
}

/// `kill -NAME pid`.
fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid} failed");
}

fn wait_for_path(path: &Path, a: &Activated) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared:\n{}",
            path.display(),
            a.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The datagrams on the notify socket until one contains `want`.
fn notified(sock: &UnixDatagram, want: &str) -> Vec<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.iter().any(|m: &String| m.lines().any(|l| l == want)) {
        match sock.recv(&mut buf) {
            Ok(n) => got.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(e) => panic!("no {want} on the notify socket ({e}); got {got:?}"),
        }
    }
    got
}

/// profd serves the socket systemd passes (and creates none of its own),
/// says READY=1 with a STATUS line once it serves and STOPPING=1 at
/// SIGTERM, leaves the socket to systemd, and logs journal lines when
/// stderr is the journal.
#[test]
fn socket_activation_readiness_and_journal_lines() {
    let _serial = serial();
    require_root_and_perf();
    let dir = unique_dir("activate");
    let socket = dir.join("activated.sock");
    let own = dir.join("own.sock");
    let notify_path = dir.join("notify");
    let notify = UnixDatagram::bind(&notify_path).expect("bind the notify socket");
    notify
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let log = dir.join("profd.log");
    std::fs::write(&log, "").unwrap();
    let meta = std::fs::metadata(&log).unwrap();
    let env = [
        format!("NOTIFY_SOCKET={}", notify_path.display()),
        format!("JOURNAL_STREAM={}:{}", meta.dev(), meta.ino()),
    ];
    let mut a = Activated::start(
        path_str(&socket),
        &env,
        &["--socket", path_str(&own), "--no-persist"],
        &log,
    );
    wait_for_path(&socket, &a);
    // The first connection starts profd, which serves it.
    let info = profd_e2e::run_profctl(&["--socket", path_str(&socket), "info"], &[]);
    info.assert_success();
    assert!(info.stdout.contains("cpus"), "{}", info.describe());
    let ready = notified(&notify, "READY=1");
    eprintln!("notify: {ready:?}");
    let status = format!("STATUS=serving on {}; 0 sessions running", socket.display());
    assert!(
        ready.iter().any(|m| m.lines().any(|l| l == status)),
        "no {status:?} in {ready:?}"
    );
    assert!(
        !own.exists(),
        "profd created --socket although systemd passed one"
    );

    signal(a.child.id(), "TERM");
    let stopping = notified(&notify, "STOPPING=1");
    eprintln!("notify: {stopping:?}");
    let exit = a.wait();
    assert!(exit.success(), "profd exited with {exit}:\n{}", a.log());
    assert!(socket.exists(), "profd removed the socket systemd owns");

    let text = a.log();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with('<')).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("<6>INFO serving on the socket systemd passed")),
        "no journal line for the passed socket:\n{text}"
    );
    for l in &lines {
        assert!(
            !l.contains('\u{1b}'),
            "colour codes in a journal line: {l:?}"
        );
        assert!(
            !l.chars().nth(3).is_some_and(|c| c.is_ascii_digit()),
            "a timestamp in a journal line: {l:?}"
        );
    }
}

/// A TCP socket passed by systemd is refused with a message saying what
/// to use instead.
#[test]
fn a_passed_tcp_socket_is_refused() {
    let _serial = serial();
    require_root_and_perf();
    let dir = unique_dir("activate-tcp");
    let addr = format!("127.0.0.1:{}", free_port());
    let log = dir.join("profd.log");
    let mut a = Activated::start(&addr, &[], &["--no-persist"], &log);
    let deadline = Instant::now() + Duration::from_secs(10);
    let _conn = loop {
        match TcpStream::connect(&addr) {
            Ok(c) => break c,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "{addr} never listened: {e}\n{}",
                    a.log()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    let exit = a.wait();
    assert!(!exit.success(), "profd served a TCP socket:\n{}", a.log());
    assert!(
        a.log().contains("systemd passed a TCP socket"),
        "the refusal does not say why:\n{}",
        a.log()
    );
}
