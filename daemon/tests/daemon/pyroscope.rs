//! The Pyroscope sink at the protocol: an in-test HTTP receiver implements
//! Pyroscope's documented `POST /ingest` (no Pyroscope server can be
//! installed here), checks every request exactly, and the bodies are read
//! back with the real pprof reader, `go tool pprof -raw`.
use axum::extract::{Request, State};
use axum::http::StatusCode;
use profd::internals::continuous::encode;
use profd::internals::sinks::{
    http_client, pyroscope_requests, Auth, DropReason, Failure, Pyroscope, PyroscopeConfig,
    PyroscopeLimits, Secret, SinkEntry, SinkKind, SinkReport, Sinks,
};
use profd_common::api;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A request as the receiver got it.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    method: String,
    path: String,
    pub(crate) query: Vec<(String, String)>,
    pub(crate) headers: axum::http::HeaderMap,
    pub(crate) body: Vec<u8>,
    /// The status answered.
    pub(crate) status: u16,
}

#[derive(Default)]
struct Shared {
    got: Mutex<Vec<Received>>,
    /// Statuses to answer with, in turn, before 200s (when the request is
    /// well formed).
    answers: Mutex<VecDeque<u16>>,
}

/// The receiver: Pyroscope's `/ingest` as documented, on loopback.
pub(crate) struct Receiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub(crate) async fn start() -> Receiver {
        Receiver::start_on("127.0.0.1:0".parse().unwrap()).await
    }

    async fn start_on(addr: SocketAddr) -> Receiver {
        let shared = Arc::new(Shared::default());
        let app = axum::Router::new()
            .route("/ingest", axum::routing::any(ingest))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver { addr, shared, task }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn answer(&self, statuses: &[u16]) {
        self.shared.answers.lock().unwrap().extend(statuses);
    }

    /// Answer 200 to well-formed requests from now on (the statuses not
    /// yet answered are forgotten).
    pub(crate) fn accept(&self) {
        self.shared.answers.lock().unwrap().clear();
    }

    /// The requests got so far, taken.
    pub(crate) fn take(&self) -> Vec<Received> {
        std::mem::take(&mut self.shared.got.lock().unwrap())
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Pyroscope's error body.
fn error(code: &str, message: &str) -> String {
    serde_json::json!({ "code": code, "message": message }).to_string()
}

/// Pyroscope's `name` as its ingest handler parses it: the app name
/// (`[A-Za-z0-9_./-]`, not empty), then `{k=v,...}` with names of
/// `[A-Za-z0-9_.]`; a value ends at `,` or `}`.
pub(crate) fn parse_name(name: &str) -> Result<(String, BTreeMap<String, String>), String> {
    let (app, rest) = name.split_once('{').unwrap_or((name, "}"));
    let app = app.trim();
    if app.is_empty()
        || !app
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c))
    {
        return Err(format!("invalid app name {app:?}"));
    }
    let body = rest
        .strip_suffix('}')
        .ok_or_else(|| format!("labels of {name:?} do not end with }}"))?;
    let mut labels = BTreeMap::new();
    for pair in body.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("label {pair:?} has no ="))?;
        let k = k.trim();
        if k.is_empty()
            || !k
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        {
            return Err(format!("invalid label name {k:?}"));
        }
        if labels.insert(k.to_string(), v.trim().to_string()).is_some() {
            return Err(format!("duplicate label {k:?}"));
        }
    }
    Ok((app.to_string(), labels))
}

/// The checks of Pyroscope's handler on the metadata and the body.
fn well_formed(query: &[(String, String)], body: &[u8]) -> Result<(), String> {
    let get = |k: &str| query.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    if get("format") != Some("pprof") {
        return Err("format is not pprof".into());
    }
    parse_name(get("name").ok_or("no name")?)?;
    for k in ["from", "until", "sampleRate"] {
        let v = get(k).ok_or(format!("no {k}"))?;
        v.parse::<u64>()
            .map_err(|_| format!("{k}={v:?} is not a number"))?;
    }
    if body.is_empty() {
        return Err("empty body".into());
    }
    Ok(())
}

async fn ingest(State(shared): State<Arc<Shared>>, request: Request) -> (StatusCode, String) {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap()
        .to_vec();
    let url = reqwest::Url::parse(&format!("http://x{}", parts.uri)).unwrap();
    let query: Vec<(String, String)> = url.query_pairs().into_owned().collect();
    let (status, text) = match well_formed(&query, &body) {
        Err(e) => (
            400,
            error(
                "invalid_argument",
                &format!("failed to parse request metadata: {e}"),
            ),
        ),
        Ok(()) => match shared.answers.lock().unwrap().pop_front() {
            Some(s) => (s, error("unavailable", "answered by the test")),
            None => (200, String::new()),
        },
    };
    shared.got.lock().unwrap().push(Received {
        method: parts.method.to_string(),
        path: url.path().to_string(),
        query,
        headers: parts.headers,
        body,
        status,
    });
    (StatusCode::from_u16(status).unwrap(), text)
}

/// A window that ended a moment ago, as the continuous profiler writes
/// them: three services, threads of one process each, kernel and library
/// frames, an inlined function, recursion; `batch.service` with `batch`
/// unique stacks (more than Pyroscope's 16000 samples a profile: it is
/// split).
fn window(batch: u32) -> api::Window {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let start_s = now.as_secs() - 20;
    let f = |name: &str, module: &str, file: &str, inlined: bool| api::WindowFunction {
        name: name.into(),
        module: module.into(),
        file: file.into(),
        inlined,
        ..Default::default()
    };
    let stack = |tid, function: Vec<u32>, address: Vec<u64>, count| api::WindowStack {
        tid,
        line: function.iter().map(|&f| 100 + f).collect(),
        function,
        address,
        count,
    };
    let process = |pid, comm: &str, exe: &str, samples| api::WindowProcess {
        pid,
        ppid: 1,
        comm: comm.into(),
        executable: exe.into(),
        build_id: "4f1e2d3c4b5a69788796a5b4c3d2e1f001234567".into(),
        cgroup: "/system.slice/x.service".into(),
        samples,
        ..Default::default()
    };
    let thread = |tid, pid, name: &str, samples| api::WindowThread {
        tid,
        pid,
        name: name.into(),
        samples,
    };
    let web = api::ServiceWindow {
        totals: None,
        service: "web.service".into(),
        source: api::ServiceSource::Unit as i32,
        samples: 21,
        processes: vec![process(4100, "web", "/usr/bin/web", 21)],
        threads: vec![
            thread(4100, 4100, "web", 9),
            thread(4101, 4100, "web-worker", 12),
        ],
        functions: vec![
            f("handle_request", "web", "src/server.rs", false),
            f("parse_header", "web", "src/http.rs", true),
            f("memcpy", "libc.so.6", "", false),
            f("main", "web", "src/main.rs", false),
            f("do_syscall_64", "[kernel]", "", false),
            f("walk", "web", "src/tree.rs", false),
        ],
        stacks: vec![
            // parse_header inlined into handle_request (one address).
            stack(
                4100,
                vec![1, 0, 3],
                vec![0x5000_1000, 0x5000_1000, 0x5000_0100],
                5,
            ),
            stack(
                4100,
                vec![2, 0, 3],
                vec![0x7f00_0000_2000, 0x5000_1010, 0x5000_0100],
                4,
            ),
            stack(
                4101,
                vec![4, 2, 0, 3],
                vec![
                    0xffff_ffff_8100_0000,
                    0x7f00_0000_2000,
                    0x5000_1010,
                    0x5000_0100,
                ],
                7,
            ),
            // Recursion.
            stack(
                4101,
                vec![5, 5, 5, 3],
                vec![0x5000_2000, 0x5000_2010, 0x5000_2010, 0x5000_0100],
                5,
            ),
        ],
    };
    let nginx = api::ServiceWindow {
        totals: None,
        service: "nginx@1.service".into(),
        source: api::ServiceSource::Unit as i32,
        samples: 3,
        processes: vec![process(5200, "nginx", "/usr/sbin/nginx", 3)],
        threads: vec![thread(5200, 5200, "nginx", 3)],
        functions: vec![
            f("ngx_process_events", "nginx", "", false),
            f("main", "nginx", "", false),
        ],
        stacks: vec![stack(5200, vec![0, 1], vec![0x40_1000, 0x40_0100], 3)],
    };
    let stacks: Vec<api::WindowStack> = (0..batch)
        .map(|i| {
            stack(
                6000 + i % 4,
                vec![0, 1, 2],
                vec![0x60_0000 + u64::from(i) * 16, 0x50_0000, 0x40_0000],
                u64::from(i % 7 + 1),
            )
        })
        .collect();
    let batch_samples = stacks.iter().map(|s| s.count).sum();
    let batch = api::ServiceWindow {
        totals: None,
        service: "batch.service".into(),
        source: api::ServiceSource::Unit as i32,
        samples: batch_samples,
        processes: vec![process(
            6000,
            "batch",
            "/opt/batch/bin/batch",
            batch_samples,
        )],
        threads: (0..4)
            .map(|i| thread(6000 + i, 6000, &format!("batch-{i}"), 0))
            .collect(),
        functions: vec![
            f("crunch", "batch", "crunch.c", false),
            f("run", "batch", "run.c", false),
            f("main", "batch", "main.c", false),
        ],
        stacks,
    };
    let services = vec![web, nginx, batch];
    let attributed = services.iter().map(|s| s.samples).sum();
    api::Window {
        id: "5e1f0c2a9b8d47e6a3c1f2e4d5b6a798".into(),
        start_unix_ns: start_s * 1_000_000_000,
        end_unix_ns: (start_s + 10) * 1_000_000_000,
        host: "web-1.example".into(),
        kernel_release: "6.1.0-18-amd64".into(),
        frequency_hz: 99,
        event: api::Event::CpuClock as i32,
        totals: Some(api::Totals {
            attributed,
            ..Default::default()
        }),
        services,
        ..Default::default()
    }
}

/// A sample as compared: function names leaf first, count, labels sorted.
type Sample = (Vec<String>, u64, Vec<(String, String)>);

/// The samples `w`'s `service` should arrive as.
fn expected(w: &api::Window, service: &str) -> Vec<Sample> {
    let s = w.services.iter().find(|s| s.service == service).unwrap();
    let mut out: Vec<Sample> = s
        .stacks
        .iter()
        .map(|st| {
            let names = st
                .function
                .iter()
                .map(|&f| s.functions[f as usize].name.clone())
                .collect();
            let t = s.threads.iter().find(|t| t.tid == st.tid).unwrap();
            let p = s.processes.iter().find(|p| p.pid == t.pid).unwrap();
            let mut labels = vec![
                ("comm".to_string(), p.comm.clone()),
                ("pid".to_string(), t.pid.to_string()),
                ("tid".to_string(), st.tid.to_string()),
            ];
            labels.sort();
            (names, st.count, labels)
        })
        .collect();
    out.sort();
    out
}

/// A temp dir set up as HOME and GOCACHE for the go tool.
fn go_home() -> PathBuf {
    let d = std::env::temp_dir().join(format!("profd-pyro-go-{}", std::process::id()));
    std::fs::create_dir_all(d.join("cache")).unwrap();
    d
}

/// What `go tool pprof -raw` reads in `body`: the samples, and the header
/// lines (period, time, duration, sample types).
fn go_pprof_raw(body: &[u8], name: &str) -> (Vec<Sample>, String) {
    let home = go_home();
    let file = home.join(format!("{name}.pb.gz"));
    std::fs::write(&file, body).unwrap();
    let out = std::process::Command::new("go")
        .args(["tool", "pprof", "-raw", "-symbolize=none"])
        .arg(&file)
        .env("HOME", &home)
        .env("GOCACHE", home.join("cache"))
        .env("GOTOOLCHAIN", "local")
        .env("PPROF_TMPDIR", &home)
        .output()
        .expect("go runs (CI installs Debian's golang-go)");
    let _ = std::fs::remove_file(&file);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "`go tool pprof -raw` failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    (parse_raw(&text), text)
}

/// `-raw`'s Samples and Locations sections: each sample's values, location
/// ids and labels (`key:[value]` lines under it), each location's function
/// names (first the line with its id, then its further inline lines).
fn parse_raw(text: &str) -> Vec<Sample> {
    let mut section = "";
    // Location ids, count, labels.
    type Raw = (Vec<u64>, u64, Vec<(String, String)>);
    let mut samples: Vec<Raw> = Vec::new();
    let mut locations: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut last_location = 0;
    for line in text.lines() {
        match line.trim_end() {
            "Samples:" | "Locations" | "Mappings" => {
                section = line.trim_end();
                continue;
            }
            _ => {}
        }
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        match section {
            "Samples:" if t.contains(": ") || t.ends_with(':') => {
                // "     3   30303030: 1 2 3 "
                let (values, ids) = t.split_once(':').unwrap();
                let Ok(count) = values.split_whitespace().next().unwrap().parse() else {
                    continue; // the sample types line
                };
                let ids = ids.split_whitespace().map(|i| i.parse().unwrap()).collect();
                samples.push((ids, count, Vec::new()));
            }
            "Samples:" if t.contains(":[") => {
                // "comm:[web]" or "pid:[4100] tid:[4101]"
                let s = samples.last_mut().expect("labels follow a sample");
                for pair in t.split("] ").map(|p| p.trim_end_matches(']')) {
                    let (k, v) = pair.split_once(":[").unwrap();
                    s.2.push((k.to_string(), v.to_string()));
                }
            }
            "Locations" => {
                // "     1: 0x50001000 M=1 parse_header src/http.rs:101 s=0"
                // "             handle_request src/server.rs:100 s=0"
                let rest = match t.split_once(": 0x") {
                    Some((id, rest))
                        if line.starts_with(' ') && id.trim().parse::<u64>().is_ok() =>
                    {
                        last_location = id.trim().parse().unwrap();
                        let mut words = rest.split_whitespace().skip(1);
                        let mut w = words.next().unwrap_or("");
                        if w.starts_with("M=") {
                            w = words.next().unwrap_or("");
                        }
                        w.to_string()
                    }
                    _ => t.split_whitespace().next().unwrap().to_string(),
                };
                locations.entry(last_location).or_default().push(rest);
            }
            _ => {}
        }
    }
    let mut out: Vec<Sample> = samples
        .into_iter()
        .map(|(ids, count, mut labels)| {
            let names = ids
                .iter()
                .flat_map(|id| locations[id].iter().cloned())
                .collect();
            labels.sort();
            (names, count, labels)
        })
        .collect();
    out.sort();
    out
}

fn secret(name: &str, text: &str) -> Secret {
    let dir = go_home();
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    let secret = Secret::read(&file).unwrap();
    std::fs::remove_file(&file).unwrap();
    secret
}

fn sink(url: String, tenant: Option<&str>, auth: Auth) -> Pyroscope {
    Pyroscope::new(PyroscopeConfig {
        url,
        tenant: tenant.map(str::to_string),
        auth,
        labels: vec![
            ("env".into(), "prod".into()),
            ("region".into(), "eu-west.1".into()),
        ],
        timeout: Duration::from_secs(30),
        ca: None,
    })
    .unwrap()
}

fn header<'a>(r: &'a Received, name: &str) -> Option<&'a str> {
    r.headers.get(name).map(|v| v.to_str().unwrap())
}

/// Check each request of `got` exactly, read its body with `go tool
/// pprof`, and compare every service's samples with `w`'s.
fn check(w: &api::Window, got: &[Received], tenant: Option<&str>, authorization: &str) {
    let series = |app: &str, service: &str| {
        format!("{app}{{service_name={service},host=web-1.example,env=prod,region=eu-west.1}}")
    };
    let from = w.start_unix_ns.to_string();
    let until = w.end_unix_ns.to_string();
    let mut by_service: BTreeMap<String, (usize, Vec<Sample>)> = BTreeMap::new();
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/ingest");
        assert_eq!(r.status, 200);
        let name = &r.query[1].1;
        let service = parse_name(name).unwrap().1["service_name"].clone();
        let app = match service.as_str() {
            "nginx@1.service" => "nginx_1.service",
            s => s,
        };
        let want: Vec<(String, String)> = [
            ("format", "pprof".to_string()),
            ("name", series(app, &service)),
            ("from", from.clone()),
            ("until", until.clone()),
            ("sampleRate", "99".to_string()),
            ("spyName", "profd".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(r.query, want);
        assert_eq!(header(r, "x-scope-orgid"), tenant);
        assert_eq!(header(r, "authorization"), Some(authorization));
        assert_eq!(header(r, "content-type"), Some("application/octet-stream"));
        assert_eq!(header(r, "content-encoding"), None);
        let (samples, text) = go_pprof_raw(&r.body, &format!("part{i}"));
        assert!(text.contains("PeriodType: cpu nanoseconds"), "{text:.600}");
        assert!(text.contains("Period: 10101010"), "{text:.600}");
        assert!(text.contains("Duration: 10s"), "{text:.600}");
        assert!(
            text.contains("samples/count[dflt] cpu/nanoseconds"),
            "{text:.600}"
        );
        // Pyroscope's limits: samples a part, frames a stack.
        assert!(samples.len() <= 16_000, "{}", samples.len());
        let e = by_service.entry(service).or_default();
        e.0 += 1;
        e.1.extend(samples);
    }
    let services: Vec<&str> = by_service.keys().map(String::as_str).collect();
    assert_eq!(
        services,
        ["batch.service", "nginx@1.service", "web.service"]
    );
    for (service, (parts, mut samples)) in by_service {
        samples.sort();
        let want = expected(w, &service);
        let total: u64 = samples.iter().map(|s| s.1).sum();
        let window_total = w
            .services
            .iter()
            .find(|s| s.service == service)
            .unwrap()
            .samples;
        assert_eq!(total, window_total, "{service}");
        assert_eq!(samples.len(), want.len(), "{service}");
        assert!(
            samples == want,
            "{service}: {:?}…\n≠ {:?}…",
            &samples[..3.min(samples.len())],
            &want[..3.min(want.len())]
        );
        let want_parts = if service == "batch.service" { 2 } else { 1 };
        assert_eq!(parts, want_parts, "{service}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_arrive_as_documented_ingest_requests_that_pprof_reads_back() {
    let r = Receiver::start().await;
    let w = window(20_000);
    let basic = Auth::Basic {
        user: "stack-7".into(),
        password: secret("password", "s3cret-token\n"),
    };
    let p = sink(r.url(), Some("team-a"), basic);
    let mut done = 0;
    let sent = p.send(&w, &mut done).await.unwrap();
    let got = r.take();
    assert_eq!(got.len(), 4, "web, nginx, batch in two parts");
    assert_eq!(done, 4);
    assert_eq!(sent.requests, 4);
    assert_eq!(sent.split, 1);
    assert_eq!(sent.truncated, 0);
    let bytes: usize = got.iter().map(|g| g.body.len()).sum();
    assert_eq!(sent.bytes, bytes as u64);
    check(
        &w,
        &got,
        Some("team-a"),
        "Basic c3RhY2stNzpzM2NyZXQtdG9rZW4=",
    );

    // Bearer, no tenant.
    let p = sink(r.url(), None, Auth::Bearer(secret("token", "tok-123")));
    let mut done = 0;
    p.send(&w, &mut done).await.unwrap();
    check(&w, &r.take(), None, "Bearer tok-123");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_retried_without_sending_a_part_twice_or_dropped() {
    let r = Receiver::start().await;
    let w = window(20_000);
    let p = sink(r.url(), Some("team-a"), Auth::None);
    let (parts, _) = pyroscope_requests(
        &w,
        &[
            ("env".into(), "prod".into()),
            ("region".into(), "eu-west.1".into()),
        ],
        &PyroscopeLimits::default(),
    );
    assert_eq!(parts.len(), 4);

    for status in [429, 503] {
        // Two parts accepted, the third refused.
        r.answer(&[200, 200, status]);
        let mut done = 0;
        match p.send(&w, &mut done).await {
            Err(Failure::Retry(why)) => assert!(why.contains(&status.to_string()), "{why}"),
            other => panic!("{status}: {other:?}"),
        }
        assert_eq!(done, 2, "{status}");
        let first = r.take();
        assert_eq!(first.len(), 3);
        // The retry sends the parts not yet accepted, and only those.
        let sent = p.send(&w, &mut done).await.unwrap();
        assert_eq!(done, 4);
        assert_eq!(sent.requests, 4);
        let second = r.take();
        assert_eq!(second.len(), 2);
        let accepted: Vec<&Received> = first
            .iter()
            .chain(&second)
            .filter(|g| g.status == 200)
            .collect();
        assert_eq!(accepted.len(), parts.len());
        for (a, part) in accepted.iter().zip(&parts) {
            assert_eq!(a.body, part.body, "each part accepted once, in order");
            assert_eq!(a.query, part.query);
        }
        // A retry after everything was accepted sends nothing.
        p.send(&w, &mut done).await.unwrap();
        assert!(r.take().is_empty());
    }

    // 400: dropped, counted as http_400.
    r.answer(&[400]);
    let mut done = 0;
    match p.send(&w, &mut done).await {
        Err(Failure::Drop { reason, detail }) => {
            assert_eq!(reason.to_string(), "http_400");
            assert!(detail.contains("answered by the test"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(done, 0);
    assert_eq!(r.take().len(), 1);

    // A name the receiver cannot parse is Pyroscope's 400 too: not one
    // profd sends, whatever the service is called (checked above), so
    // the receiver itself is checked here.
    assert!(parse_name("a b{x=1}").is_err());
    assert!(parse_name("nginx@1.service{x=1}").is_err());
    assert!(parse_name("a{x-y=1}").is_err());

    // Nobody listening: retried.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let p = sink(format!("http://127.0.0.1:{port}"), None, Auth::None);
    let mut done = 0;
    match p.send(&w, &mut done).await {
        Err(Failure::Retry(_)) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(done, 0);
}

#[test]
fn the_go_reader_is_parsed_as_it_prints() {
    // A guard on parse_raw itself, on go's own text.
    let w = window(0);
    let (parts, _) = pyroscope_requests(&w, &[], &PyroscopeLimits::default());
    let web = parts.iter().find(|p| p.service == "web.service").unwrap();
    let (samples, text) = go_pprof_raw(&web.body, "guard");
    assert_eq!(samples, expected(&w, "web.service"), "{text}");
}

/// Waits until `sinks`' only sink shows what `done` asks for.
async fn until(sinks: &Sinks, done: impl Fn(&SinkReport) -> bool) -> SinkReport {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = sinks.reports().remove(0);
        if done(&r) {
            return r;
        }
        assert!(std::time::Instant::now() < deadline, "{r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `w` moved `by` seconds into the past, with its own id.
fn aged(mut w: api::Window, id: &str, by: u64) -> api::Window {
    w.id = id.into();
    w.start_unix_ns -= by * 1_000_000_000;
    w.end_unix_ns -= by * 1_000_000_000;
    w
}

/// Windows go through the spool: one too old for Pyroscope is dropped
/// unsent, one answered 503 is retried until taken, one answered 400 is
/// dropped; every drop counted by reason. What waits while the backend is
/// down stays on disk across a restart of the sinks, and goes once it is up.
#[tokio::test]
async fn the_spool_retries_drops_by_reason_and_survives_a_restart() {
    let state = std::env::temp_dir().join(format!("profd-delivery-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let receiver = Receiver::start().await;
    let settings = |url: &str| {
        SinkEntry::new(SinkKind::Pyroscope, "pyro", url)
            .settings()
            .unwrap()
    };
    let sinks = Sinks::start(vec![settings(&receiver.url())], Some(&state))
        .await
        .unwrap();
    let offer = |sinks: &Sinks, w: api::Window| {
        let gz = encode(w.clone()).unwrap().gz;
        sinks.offer(&w, &gz);
    };
    let base = window(10);
    offer(&sinks, aged(base.clone(), "old", 2 * 3600));
    let r = until(&sinks, |r| r.counts.drops.contains_key(&DropReason::TooOld)).await;
    assert_eq!(r.counts.windows_sent, 0);
    assert!(receiver.take().is_empty(), "a window too old is not sent");
    // Three services, one request each; the second is refused twice.
    receiver.answer(&[200, 503, 503]);
    offer(&sinks, aged(base.clone(), "retried", 0));
    let r = until(&sinks, |r| r.counts.windows_sent == 1).await;
    assert_eq!(r.counts.retries, 2);
    let got = receiver.take();
    let statuses: Vec<u16> = got.iter().map(|g| g.status).collect();
    assert_eq!(
        statuses,
        [200, 503, 503, 200, 200],
        "the part taken is not sent again"
    );
    receiver.answer(&[400]);
    offer(&sinks, aged(base.clone(), "refused", 0));
    let r = until(&sinks, |r| {
        r.counts.drops.contains_key(&DropReason::Http(400))
    })
    .await;
    assert_eq!(r.counts.windows_sent, 1);
    assert_eq!(r.spool.windows, 0);
    assert!(
        r.last_error
            .as_deref()
            .is_some_and(|e| e.starts_with("http_400")),
        "{r:?}"
    );
    let shown = r.clone();
    assert_eq!(
        shown.counts.drops,
        BTreeMap::from([(DropReason::TooOld, 1), (DropReason::Http(400), 1)])
    );
    sinks.stop();
    // The backend goes away; a window waits, on disk, across a restart.
    let addr = receiver.addr;
    drop(receiver);
    let sinks = Sinks::start(vec![settings(&format!("http://{addr}"))], Some(&state))
        .await
        .unwrap();
    offer(&sinks, aged(base.clone(), "waited", 0));
    let r = until(&sinks, |r| r.counts.retries > 0).await;
    assert_eq!(r.spool.windows, 1);
    assert!(r.spool.oldest_end_ns.is_some());
    sinks.stop();
    let receiver = Receiver::start_on(addr).await;
    let sinks = Sinks::start(vec![settings(&receiver.url())], Some(&state))
        .await
        .unwrap();
    let r = until(&sinks, |r| r.counts.windows_sent == 1).await;
    assert_eq!(r.spool.windows, 0);
    assert_eq!(receiver.take().len(), 3, "the waiting window, once");
    sinks.stop();
    std::fs::remove_dir_all(&state).unwrap();
}

/// The HTTP sinks' client speaks TLS with rustls: a server whose
/// certificate the sink's `ca_file` vouches for is reached, and without
/// that file (the system's roots do not know it) the request fails.
#[tokio::test]
async fn https_trusts_the_ca_file_and_only_it() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    let (ca, cert, key) = super::otlp::certificates();
    let config = tokio_rustls::rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = [0u8; 4096];
                let _ = tls.read(&mut buf).await;
                let _ = tls
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    )
                    .await;
                let _ = tls.shutdown().await;
            });
        }
    });
    let dir = std::env::temp_dir().join(format!("profd-https-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca).unwrap();
    let url = format!("https://localhost:{port}/");
    let trusted = http_client(Duration::from_secs(10), Some(&ca_file)).unwrap();
    let answer = trusted.get(&url).send().await.unwrap();
    assert_eq!(answer.text().await.unwrap(), "ok");
    let untrusted = http_client(Duration::from_secs(10), None).unwrap();
    let err = untrusted.get(&url).send().await.unwrap_err();
    let chain = profd::internals::sinks::error_chain(err);
    assert!(chain.contains("UnknownIssuer"), "{chain}");
    std::fs::write(&ca_file, "not a certificate").unwrap();
    let e = http_client(Duration::from_secs(10), Some(&ca_file))
        .unwrap_err()
        .to_string();
    assert!(e.contains("ca.pem"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
