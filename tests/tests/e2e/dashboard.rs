//! End-to-end tests of the TLS listener's browser side: grpc-web requests
//! (raw `application/grpc-web+proto` POSTs with curl, over HTTP/1.1 and
//! HTTP/2, with and without a token), CORS preflights from listed and
//! unlisted origins, and the web dashboard driven in real headless Chromium
//! (tests/dashboard/dashboard.mjs with playwright-core) against a live
//! session of the `split` workload and the continuous history of its cgroup. They need root, perf events, curl,
//! Node.js and Chromium (Debian's `chromium`); without them they fail.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use profd_common::api;
use profd_e2e::cgroups::Cgroup;
use profd_e2e::tls::{free_port, listen_args, make_tls, new_token, TlsFiles};
use profd_e2e::{
    build_workload, path_str, require_root_and_perf, serial, unique_dir, words, Cmd, Daemon,
    Profile, Workload,
};
use prost::Message;

mod http;
use http::{frames, grpc_status, messages, Reply};

/// Where the dashboard test expects Chromium (Debian's `chromium` package).
const CHROMIUM: &str = "/usr/bin/chromium";
/// The origin the CORS tests allow.
const ALLOWED_ORIGIN: &str = "https://dash.example.test:8443";
const UNAUTHENTICATED: u32 = 16;
const SERVING: i32 = 1;

/// A daemon with its TLS listener, and a token of root with a role.
struct Remote {
    daemon: Daemon,
    /// `https://localhost:PORT`
    url: String,
    tls: TlsFiles,
    token: String,
    dir: PathBuf,
}

impl Remote {
    fn curl(&self, http: &str, path: &str, args: &[&str]) -> Reply {
        http::curl(&self.url, &self.tls.ca, http, path, args)
    }

    fn grpc_web(
        &self,
        http: &str,
        method: &str,
        token: Option<&str>,
        message: &[u8],
        extra: &[&str],
    ) -> Reply {
        http::grpc_web(&self.url, &self.tls.ca, http, method, token, message, extra)
    }
}

fn remote(role: &str, extra: &[&str]) -> Remote {
    let dir = unique_dir("dashboard");
    let tls = make_tls(&dir);
    let tokens = dir.join("tokens");
    let token = new_token(&tokens, "dash", role, "root");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut args = listen_args(&listen, &tls, &tokens);
    args.extend_from_slice(extra);
    let daemon = Daemon::start_with(&args);
    Remote {
        daemon,
        url: format!("https://localhost:{port}"),
        tls,
        token,
        dir,
    }
}

/// Profiles the split workload for `seconds` over the Unix socket and
/// returns the ended session's profile.
fn split_session(d: &Daemon, seconds: &str) -> (Workload, Profile) {
    let workload = Workload::start("split", 60.0);
    let out = d.profctl(&[
        "attach",
        &workload.pid_arg(),
        "--duration",
        seconds,
        "--format",
        "json",
    ]);
    let profile = Profile::parse(&out);
    (workload, profile)
}

/// Function (name, module, inlined) → (inclusive, exclusive).
type Counts = BTreeMap<(String, String, bool), (u64, u64)>;

fn api_counts(functions: &[api::Function]) -> Counts {
    functions
        .iter()
        .map(|f| {
            (
                (f.name.clone(), f.module.clone(), f.inlined),
                (f.inclusive, f.exclusive),
            )
        })
        .collect()
}

fn profile_counts(p: &Profile) -> Counts {
    p.functions
        .iter()
        .map(|f| {
            (
                (f.name.clone(), f.module.clone(), f.inlined),
                (f.inclusive, f.exclusive),
            )
        })
        .collect()
}

/// The page, scripts and API over HTTP/1.1 and HTTP/2 on the TLS port:
/// grpc-web calls without a token, or with an unknown one, are
/// UNAUTHENTICATED as gRPC calls are; with the token they answer what the
/// Unix socket does; health stays open; plain gRPC still works there.
#[test]
fn grpc_web_and_the_dashboard_follow_the_tls_listeners_rules() {
    let _serial = serial();
    require_root_and_perf();
    let r = remote("read-only", &[]);
    let (_workload, profile) = split_session(&r.daemon, "2");
    let list = api::ListSessionsRequest { all: false }.encode_to_vec();
    let watch = api::WatchRequest {
        session_id: profile.session_id,
        ..Default::default()
    }
    .encode_to_vec();
    for (http, version) in [("--http1.1", "1.1"), ("--http2", "2")] {
        eprintln!("== {http}");
        let page = r.curl(http, "/", &[]);
        assert_eq!(page.version, version, "ALPN: {}", page.describe());
        assert_eq!(page.status, 200, "{}", page.describe());
        assert_eq!(
            page.header("content-type"),
            Some("text/html; charset=utf-8")
        );
        let html = String::from_utf8_lossy(&page.body);
        assert!(
            html.contains(r#"<script type="module" src="/assets/app.js">"#),
            "{}",
            page.describe()
        );
        let csp = page.header("content-security-policy").unwrap_or_default();
        assert!(
            csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"),
            "{}",
            page.describe()
        );
        for (asset, kind) in [
            ("/assets/app.js", "text/javascript"),
            ("/assets/api.js", "text/javascript"),
            ("/assets/app.css", "text/css"),
        ] {
            let reply = r.curl(http, asset, &[]);
            assert_eq!(reply.status, 200, "{}", reply.describe());
            assert!(
                reply
                    .header("content-type")
                    .unwrap_or_default()
                    .starts_with(kind),
                "{}",
                reply.describe()
            );
        }
        let missing = r.curl(http, "/assets/nothing.js", &[]);
        assert_eq!(missing.status, 404, "{}", missing.describe());

        let method = "profd.v1.Profiler/ListSessions";
        for (token, why) in [
            (None, "no bearer token"),
            (Some("not-a-token"), "unknown token"),
        ] {
            let reply = r.grpc_web(http, method, token, &list, &[]);
            assert_eq!(reply.status, 200, "{}", reply.describe());
            let (code, message) = grpc_status(&reply);
            eprintln!("{token:?}: {code} {message}");
            assert_eq!(code, UNAUTHENTICATED, "{}", reply.describe());
            assert!(message.contains(why), "{}", reply.describe());
            assert!(
                frames(&reply).iter().all(|(flags, _)| flags & 0x80 != 0),
                "a message without a token:\n{}",
                reply.describe()
            );
        }
        let reply = r.grpc_web(http, method, Some(&r.token), &list, &[]);
        let sessions: Vec<api::ListSessionsResponse> = messages(&reply);
        assert_eq!(sessions.len(), 1, "{}", reply.describe());
        let ids: Vec<u64> = sessions[0].sessions.iter().map(|s| s.id).collect();
        assert_eq!(ids, [profile.session_id], "{}", reply.describe());

        // Watch on an ended session: one final snapshot, then the status.
        let reply = r.grpc_web(http, "profd.v1.Profiler/Watch", Some(&r.token), &watch, &[]);
        let updates: Vec<api::WatchResponse> = messages(&reply);
        assert_eq!(updates.len(), 1, "{}", reply.describe());
        let u = &updates[0];
        assert!(u.snapshot && u.r#final, "{u:?}");
        let totals = u.session.as_ref().and_then(|s| s.totals).unwrap();
        assert_eq!(totals.attributed, profile.totals.attributed);
        assert_eq!(api_counts(&u.functions), profile_counts(&profile));

        // Health is open on the listener, over grpc-web too.
        let health = tonic_health::pb::HealthCheckRequest {
            service: "profd.v1.Profiler".into(),
        }
        .encode_to_vec();
        let reply = r.grpc_web(http, "grpc.health.v1.Health/Check", None, &health, &[]);
        let status: Vec<tonic_health::pb::HealthCheckResponse> = messages(&reply);
        assert_eq!(status[0].status, SERVING, "{}", reply.describe());
    }

    // Plain gRPC on the same port.
    let token_file = r.dir.join("token");
    std::fs::write(&token_file, &r.token).expect("write the token file");
    let out = profd_e2e::run_profctl(
        &[
            "--connect",
            &r.url,
            "--tls-ca",
            path_str(&r.tls.ca),
            "--token-file",
            path_str(&token_file),
            "sessions",
        ],
        &[],
    );
    out.assert_success();
    assert!(
        out.stdout
            .lines()
            .any(|l| words(l).first() == Some(&profile.session_id.to_string().as_str())),
        "{}",
        out.describe()
    );
}

/// CORS: a preflight from a listed origin is allowed to send the grpc-web
/// headers and the token, and replies to it expose the gRPC status; other
/// origins get no allowance; without --cors-origin none does.
#[test]
fn cors_preflights_allow_only_the_listed_origins() {
    let _serial = serial();
    require_root_and_perf();
    let preflight = |r: &Remote, origin: &str| {
        r.curl("--http1.1",
            "/profd.v1.Profiler/ListSessions",
            &[
                "-X",
                "OPTIONS",
                "-H",
                &format!("origin: {origin}"),
                "-H",
                "access-control-request-method: POST",
                "-H",
                "access-control-request-headers: authorization,content-type,x-grpc-web,x-user-agent",
            ],
        )
    };
    let list = api::ListSessionsRequest { all: false }.encode_to_vec();
    let r = remote("read-only", &["--cors-origin", ALLOWED_ORIGIN]);

    let ok = preflight(&r, ALLOWED_ORIGIN);
    eprintln!("{}", ok.describe());
    assert!(ok.status / 100 == 2, "{}", ok.describe());
    assert_eq!(
        ok.header("access-control-allow-origin"),
        Some(ALLOWED_ORIGIN),
        "{}",
        ok.describe()
    );
    let allowed = ok
        .header("access-control-allow-headers")
        .unwrap_or_default()
        .to_ascii_lowercase();
    for h in [
        "authorization",
        "content-type",
        "x-grpc-web",
        "x-user-agent",
    ] {
        assert!(allowed.contains(h), "{h} not allowed:\n{}", ok.describe());
    }
    assert!(
        ok.header("access-control-allow-methods")
            .unwrap_or_default()
            .contains("POST"),
        "{}",
        ok.describe()
    );

    let origin = format!("origin: {ALLOWED_ORIGIN}");
    let call = r.grpc_web(
        "--http1.1",
        "profd.v1.Profiler/ListSessions",
        Some(&r.token),
        &list,
        &["-H", &origin],
    );
    let _: Vec<api::ListSessionsResponse> = messages(&call);
    assert_eq!(
        call.header("access-control-allow-origin"),
        Some(ALLOWED_ORIGIN)
    );
    let exposed = call
        .header("access-control-expose-headers")
        .unwrap_or_default();
    assert!(
        exposed.contains("grpc-status") && exposed.contains("grpc-message"),
        "{}",
        call.describe()
    );

    for other in ["https://evil.example.test", "https://dash.example.test"] {
        let no = preflight(&r, other);
        eprintln!("{}", no.describe());
        assert_eq!(
            no.header("access-control-allow-origin"),
            None,
            "{other} allowed:\n{}",
            no.describe()
        );
    }
    drop(r);

    let same_origin_only = remote("read-only", &[]);
    let no = preflight(&same_origin_only, ALLOWED_ORIGIN);
    assert_eq!(
        no.header("access-control-allow-origin"),
        None,
        "an origin allowed without --cors-origin:\n{}",
        no.describe()
    );
}

// ---------------------------------------------------------------------------
// The dashboard in Chromium

/// The Node script's directory, with playwright-core installed (`npm ci`
/// when node_modules is missing). Fails the test, saying what to install,
/// when Node.js, npm or Chromium is missing.
pub(crate) fn dashboard_driver() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboard");
    assert!(
        Path::new(CHROMIUM).is_file(),
        "{CHROMIUM} not found: the dashboard test drives Debian's Chromium; \
         install it (apt-get install chromium)"
    );
    let node = Command::new("node").arg("--version").output();
    match node {
        Ok(out) if out.status.success() => {
            eprintln!("node {}", String::from_utf8_lossy(&out.stdout).trim())
        }
        other => panic!(
            "Node.js (node, version 20 or later) is needed to drive the dashboard test: \
             install Debian's nodejs and npm ({other:?})"
        ),
    }
    if !dir
        .join("node_modules/playwright-core/package.json")
        .is_file()
    {
        profd_e2e::views::npm_ci(&dir);
    }
    dir
}

/// Run the Node script `script` against `r`'s dashboard with `env`; what
/// it saw (its `RESULT` line's JSON). Fails with its output and the
/// daemon's log when it fails.
fn drive(r: &Remote, script: &Path, env: &[(String, String)]) -> serde_json::Value {
    let out = Cmd::spawn_env("node", &[path_str(script)], env).wait(Duration::from_secs(200));
    assert!(
        out.status.success(),
        "the dashboard run failed:\n{}\n--- profd log ---\n{}",
        out.describe(),
        r.daemon.log()
    );
    let line = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT line:\n{}", out.describe()));
    serde_json::from_str(line).expect("the RESULT JSON")
}

/// The id of the running session of `pid`, from `profctl sessions`.
fn session_of(d: &Daemon, pid: u32) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = d.profctl(&["sessions"]);
        out.assert_success();
        let found = out.stdout.lines().find_map(|l| {
            let w = words(l);
            (w.get(1) == Some(&pid.to_string().as_str()) && w.contains(&"running"))
                .then(|| w[0].parse().ok())
                .flatten()
        });
        if let Some(id) = found {
            return id;
        }
        assert!(
            Instant::now() < deadline,
            "no running session of pid {pid}:\n{}",
            out.describe()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn json_rows(v: &serde_json::Value) -> Vec<serde_json::Value> {
    v.as_array().cloned().unwrap_or_default()
}

fn row_counts(rows: &[serde_json::Value]) -> Counts {
    rows.iter()
        .map(|r| {
            (
                (
                    r["name"].as_str().unwrap_or_default().to_string(),
                    r["module"].as_str().unwrap_or_default().to_string(),
                    r["inlined"].as_bool().unwrap_or_default(),
                ),
                (
                    r["inclusive"].as_u64().unwrap_or_default(),
                    r["exclusive"].as_u64().unwrap_or_default(),
                ),
            )
        })
        .collect()
}

fn names(rows: &[serde_json::Value]) -> Vec<&str> {
    rows.iter().filter_map(|r| r["name"].as_str()).collect()
}

/// A total as the page shows it (`12,345`).
fn shown_total(totals: &serde_json::Value, key: &str) -> u64 {
    let text = totals[key].as_str().unwrap_or_default().replace(',', "");
    text.parse()
        .unwrap_or_else(|_| panic!("total {key} shows {:?}", totals[key]))
}

/// A person's visit: a wrong token is refused with UNAUTHENTICATED; with the
/// token the continuous profiling panel lists the workload's service, whose
/// merged table and flame graph open on a click; a custom time range from
/// before the daemon started shows no windows, one of three seconds of the
/// history shows exactly `profctl query`'s table over it; the session list shows
/// the running session; its table fills with
/// the workload's functions and grows from one Watch stream; clicking
/// leaf_b shows its caller mid; the flame graph nests leaf_b on mid on
/// work; discarded and lost are shown; once Stop is clicked the table
/// built from the stream's deltas is exactly the final profile, and a
/// reload (a fresh snapshot) shows the same.
#[test]
fn dashboard_in_headless_chromium_follows_a_live_session() {
    let _serial = serial();
    require_root_and_perf();
    let driver = dashboard_driver();
    let r = remote(
        "operator",
        &[
            "--continuous",
            "--continuous-freq",
            "999",
            "--continuous-window",
            "1",
        ],
    );
    let cg = Cgroup::new(&format!("profd-dash-{}", std::process::id()));
    let mut split = cg.command(build_workload("split"));
    split.args(["300", "--ready"]);
    let workload = Workload::start_command(split, "split");
    // The continuous panel lists the workload's service once a window has it.
    // The first windows name every process's code, this test binary's (a
    // debug build with tens of MB of DWARF) among them: on a loaded
    // machine that takes a debug profd well over 30 s.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !r
        .daemon
        .profctl(&["query", "--list"])
        .stdout
        .contains(cg.name())
    {
        assert!(
            Instant::now() < deadline,
            "no window of {} within 120 s:\n{}",
            cg.name(),
            r.daemon.profctl(&["info"]).describe()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Enough of its leaves for the split to show within 3 points (the first
    // window may hold a few dozen samples).
    let leaves = |p: &Profile| {
        ["leaf_a", "leaf_b"].map(|n| p.rows(n).iter().map(|f| f.exclusive).sum::<u64>())
    };
    loop {
        let p = Profile::parse(&r.daemon.profctl(&[
            "query",
            "--service",
            cg.name(),
            "--format",
            "json",
        ]));
        if leaves(&p).iter().sum::<u64>() >= 2000 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "fewer than 2000 leaf samples of {} within 120 s:\n{}",
            cg.name(),
            p.table()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // A custom range of whole seconds the history holds all of (its windows
    // are cut), and one from before the daemon started.
    let to = crate::continuous::now_ns() / 1_000_000_000 - 1;
    let from = to - 2;
    crate::continuous::wait_for_window_after(&r.daemon, (to + 1) * 1_000_000_000);
    let range = format!("{from}..{to}");
    let empty_range = format!("{}..{}", from - 7200, from - 3600);
    // The page stops the session; the duration only bounds a failed run.
    let attach = r.daemon.spawn_profctl(&[
        "attach",
        &workload.pid_arg(),
        "--duration",
        "240",
        "--format",
        "json",
    ]);
    let session = session_of(&r.daemon, workload.pid());
    let screenshot = r.dir.join("dashboard.png");
    let env = [
        ("PROFD_URL", format!("{}/", r.url)),
        ("PROFD_TOKEN", r.token.clone()),
        ("PROFD_SESSION", session.to_string()),
        (
            "PROFD_SERVER_CERT",
            path_str(&r.tls.server_cert).to_string(),
        ),
        ("PROFD_FOCUS", "leaf_b".to_string()),
        ("PROFD_SERVICE", cg.name().to_string()),
        ("PROFD_RANGE", range.clone()),
        ("PROFD_EMPTY_RANGE", empty_range),
        ("PROFD_SCREENSHOT", path_str(&screenshot).to_string()),
        ("CHROMIUM", CHROMIUM.to_string()),
    ]
    .map(|(k, v)| (k.to_string(), v));
    let seen = drive(&r, &driver.join("dashboard.mjs"), &env);
    let profile = Profile::parse(&attach.wait(Duration::from_secs(60)));
    assert_eq!(profile.state, "stopped", "{}", profile.table());
    eprintln!("screenshot: {}", screenshot.display());
    let show = |what: &str| format!("{what}:\n{}", serde_json::to_string_pretty(&seen).unwrap());

    assert_eq!(seen["pageStatus"], 200, "{}", show("the page"));
    assert_eq!(
        seen["problems"],
        serde_json::json!([]),
        "{}",
        show("errors in the page")
    );

    // Signing in.
    let refused = seen["wrongTokenError"].as_str().unwrap_or_default();
    assert!(
        refused.contains("UNAUTHENTICATED") && refused.contains("unknown token"),
        "{}",
        show("the wrong token's message")
    );
    assert!(
        seen["storedAfterWrongToken"].is_null(),
        "{}",
        show("a wrong token kept")
    );
    assert_eq!(
        seen["tokenStorage"]["session"],
        true,
        "{}",
        show("the token is not kept for the tab")
    );
    assert_eq!(
        seen["tokenStorage"]["local"],
        0,
        "{}",
        show("localStorage used")
    );
    assert!(
        seen["storedAfterSignOut"].is_null(),
        "{}",
        show("the token kept after signing out")
    );
    // The continuous profiling panel: the workload's service, its merged
    // table (split.c: leaf_a 25 %, leaf_b 75 % of the leaves) and flame graph.
    let services = json_rows(&seen["services"]);
    assert!(
        services.iter().any(|s| s == cg.name()) && services.iter().any(|s| s == ""),
        "{}",
        show("the services listed (and all of them)")
    );
    let title = seen["continuous"]["title"].as_str().unwrap_or_default();
    assert!(
        title.contains(cg.name()),
        "{}",
        show("the continuous title")
    );
    let merged = row_counts(&json_rows(&seen["continuous"]["rows"]));
    let exclusive = |name: &str| {
        merged
            .iter()
            .find(|((n, ..), _)| n == name)
            .map_or(0, |(_, (_, e))| *e) as f64
    };
    let share = 100.0 * exclusive("leaf_a") / (exclusive("leaf_a") + exclusive("leaf_b"));
    assert!(
        (share - 25.0).abs() <= 3.0,
        "leaf_a {share:.1} %: {}",
        show("the continuous table")
    );
    let flame = json_rows(&seen["continuous"]["flame"]);
    assert!(
        ["work", "mid", "leaf_b"]
            .iter()
            .all(|n| flame.iter().any(|f| f == n)),
        "{}",
        show("the continuous flame graph")
    );
    // The range picker: a range before the daemon started shows no windows;
    // over a custom range the service's samples and merged table are
    // exactly `profctl query`'s over the same seconds.
    assert_eq!(
        seen["emptyRange"]["servicesShown"],
        false,
        "{}",
        show("services of an empty range")
    );
    let (from, to) = range.split_once("..").unwrap();
    let over_range = Profile::parse(&r.daemon.profctl(&[
        "query",
        "--from",
        from,
        "--to",
        to,
        "--service",
        cg.name(),
        "--format",
        "json",
    ]));
    assert_eq!(
        row_counts(&json_rows(&seen["range"]["rows"])),
        profile_counts(&over_range),
        "{}\n{}",
        show("the range's table"),
        over_range.table()
    );
    assert_eq!(
        seen["range"]["samples"]
            .as_str()
            .unwrap_or_default()
            .replace(',', ""),
        over_range.totals.attributed.to_string(),
        "{}",
        show("the range's samples")
    );
    let row = seen["sessionRow"].as_str().unwrap_or_default();
    assert!(
        row.contains("split") && row.contains("running"),
        "{}",
        show("the session row")
    );

    // The live table: the workload's functions, growing between two reads.
    let first = json_rows(&seen["first"]["rows"]);
    let second = json_rows(&seen["second"]["rows"]);
    for name in ["main", "work", "mid", "leaf_a", "leaf_b"] {
        assert!(
            names(&first).contains(&name),
            "{}",
            show(&format!("{name} missing"))
        );
    }
    let count = |rows: &[serde_json::Value], name: &str| {
        rows.iter()
            .find(|r| r["name"] == name)
            .and_then(|r| r["inclusive"].as_u64())
            .unwrap_or_else(|| panic!("{}", show(&format!("no {name} row"))))
    };
    assert!(
        count(&second, "leaf_b") > count(&first, "leaf_b"),
        "{}",
        show("leaf_b did not grow")
    );
    assert!(
        shown_total(&seen["second"]["totals"], "attributed")
            > shown_total(&seen["first"]["totals"], "attributed"),
        "{}",
        show("the attributed total did not grow")
    );
    assert!(
        seen["status"]
            .as_str()
            .unwrap_or_default()
            .starts_with("live"),
        "{}",
        show("the status line")
    );
    for key in ["discarded", "lost"] {
        shown_total(&seen["second"]["totals"], key);
    }
    assert_eq!(seen["watchStreams"], 1, "{}", show("not one Watch stream"));

    // Callers and callees.
    assert!(
        seen["callersTitle"]
            .as_str()
            .unwrap_or_default()
            .starts_with("leaf_b:"),
        "{}",
        show("the callers title")
    );
    assert_eq!(
        names(&json_rows(&seen["callers"])),
        ["mid"],
        "{}",
        show("leaf_b's callers")
    );
    assert_eq!(
        names(&json_rows(&seen["workCallers"])),
        ["main"],
        "{}",
        show("work's callers")
    );
    let work_callees = json_rows(&seen["workCallees"]);
    for name in ["mid", "leaf_a"] {
        assert!(
            names(&work_callees).contains(&name),
            "{}",
            show("work's callees")
        );
    }

    // The flame graph: leaf_b on mid on work, each within its caller.
    let flame = json_rows(&seen["flame"]);
    let frame = |name: &str| {
        flame
            .iter()
            .filter(|f| f["name"] == name)
            .max_by(|a, b| {
                a["width"]
                    .as_f64()
                    .partial_cmp(&b["width"].as_f64())
                    .unwrap()
            })
            .unwrap_or_else(|| panic!("{}", show(&format!("no {name} frame"))))
    };
    let (work, mid, leaf_b) = (frame("work"), frame("mid"), frame("leaf_b"));
    let depth = |f: &serde_json::Value| f["depth"].as_u64().unwrap();
    let span = |f: &serde_json::Value| {
        let x = f["x"].as_f64().unwrap();
        (x, x + f["width"].as_f64().unwrap())
    };
    assert_eq!(
        depth(mid),
        depth(work) + 1,
        "{}",
        show("mid is not on work")
    );
    assert_eq!(
        depth(leaf_b),
        depth(mid) + 1,
        "{}",
        show("leaf_b is not on mid")
    );
    let within =
        |inner: (f64, f64), outer: (f64, f64)| inner.0 >= outer.0 - 0.5 && inner.1 <= outer.1 + 0.5;
    assert!(
        within(span(leaf_b), span(mid)),
        "{}",
        show("leaf_b outside mid")
    );
    assert!(
        within(span(mid), span(work)),
        "{}",
        show("mid outside work")
    );
    assert!(
        frame("leaf_a")["width"].as_f64() < mid["width"].as_f64(),
        "{}",
        show("widths")
    );

    // Once ended: the deltas add up to the final profile exactly.
    let fin = &seen["final"];
    assert!(
        fin["status"]
            .as_str()
            .unwrap_or_default()
            .starts_with("ended"),
        "{}",
        show("the final status")
    );
    assert!(
        fin["title"]
            .as_str()
            .unwrap_or_default()
            .contains("stopped"),
        "{}",
        show("the session is not shown stopped")
    );
    assert_eq!(fin["moreRows"], false, "{}", show("rows left out"));
    let want = profile_counts(&profile);
    assert_eq!(
        row_counts(&json_rows(&fin["rows"])),
        want,
        "{}\n--- final profile ---\n{}",
        show("the table differs from the final profile"),
        profile.table()
    );
    for (key, value) in [
        ("attributed", profile.totals.attributed),
        ("discarded", profile.totals.discarded),
        ("lost", profile.totals.lost),
        ("truncated", profile.totals.truncated),
        ("unsymbolized", profile.totals.unsymbolized),
        ("throttled", profile.totals.throttled),
        ("unsampled", profile.totals.unsampled),
    ] {
        assert_eq!(shown_total(&fin["totals"], key), value, "{}", show(key));
    }
    assert_eq!(
        row_counts(&json_rows(&seen["afterReload"]["rows"])),
        want,
        "{}",
        show("the table after a reload")
    );
    drop(workload);
}

/// An off-CPU session started from the dashboard's attach form: the live
/// table fills with the workload's waiting functions, shown as times (the
/// cell text is a time; the counts behind it nanoseconds, sleep_part about
/// 70 % of the waiting and pipe_part 30 %); the totals, the time totals
/// line and the flame graph's titles speak of time, and the session's row
/// its total as a time.
#[test]
fn dashboard_shows_an_off_cpu_session_in_time() {
    let _serial = serial();
    require_root_and_perf();
    let driver = dashboard_driver();
    let r = remote("operator", &[]);
    let mut command = Command::new(build_workload("offcpu"));
    command.args(["split", "300", "--ready"]);
    let workload = Workload::start_command(command, "offcpu");
    let env = [
        ("PROFD_URL", format!("{}/", r.url)),
        ("PROFD_TOKEN", r.token.clone()),
        ("PROFD_PID", workload.pid().to_string()),
        ("PROFD_SECONDS", "4".to_string()),
        (
            "PROFD_SERVER_CERT",
            path_str(&r.tls.server_cert).to_string(),
        ),
        ("CHROMIUM", CHROMIUM.to_string()),
    ]
    .map(|(k, v)| (k.to_string(), v));
    let seen = drive(&r, &driver.join("offcpu.mjs"), &env);
    let show = |what: &str| format!("{what}:\n{}", serde_json::to_string_pretty(&seen).unwrap());
    assert_eq!(
        seen["problems"],
        serde_json::json!([]),
        "{}",
        show("errors")
    );
    assert!(
        seen["title"]
            .as_str()
            .unwrap_or_default()
            .contains("off-CPU time"),
        "{}",
        show("the title")
    );
    let rows = json_rows(&seen["final"]);
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{}", show(&format!("no row {name}"))))
    };
    // A time: a number and a unit, never a bare count.
    let is_time = |text: &str| {
        let (n, unit) = text.split_once(' ').unwrap_or(("", ""));
        n.parse::<f64>().is_ok() && ["s", "ms", "µs", "ns"].contains(&unit)
    };
    let (sleep, pipe) = (row("sleep_part"), row("pipe_part"));
    for r in [sleep, pipe] {
        assert!(
            is_time(r["shown"].as_str().unwrap_or_default()),
            "{}",
            show("a row's inclusive cell")
        );
    }
    let (s, p) = (
        sleep["inclusive"].as_f64().unwrap_or_default(),
        pipe["inclusive"].as_f64().unwrap_or_default(),
    );
    let share = 100.0 * s / (s + p);
    assert!(
        (share - 70.0).abs() <= 5.0,
        "sleep_part {share:.1} % of the waiting: {}",
        show("the final table")
    );
    assert!(
        is_time(seen["attributed"].as_str().unwrap_or_default()),
        "{}",
        show("the attributed total")
    );
    let time_totals = seen["timeTotals"].as_str().unwrap_or_default();
    assert!(
        time_totals.starts_with("on-CPU ") && time_totals.contains(" waits"),
        "{}",
        show("the time totals")
    );
    let titles = json_rows(&seen["flameTitles"]);
    assert!(
        titles
            .iter()
            .filter_map(|t| t.as_str())
            .any(|t| t.starts_with("sleep_part: ") && t.contains(" ms (")),
        "{}",
        show("the flame graph's titles")
    );
    let session_row = seen["sessionRow"].as_str().unwrap_or_default();
    assert!(
        [" s", " ms"].iter().any(|u| session_row.contains(u)),
        "{}",
        show("the session row")
    );
}

/// The dashboard's tools in headless Chromium (tests/dashboard/tools.mjs):
/// a session of an earlier daemon run (split, 25/75) is listed as such and
/// opens with its counts; a session of this run (split with SPLIT_MID=1,
/// 50/50) opens sorted by exclusive, sorts by each heading, filters by
/// name, zooms into `mid` (leaf_b
/// then spans the graph, leaf_a is gone) and back, searches `leaf_b`
/// (marked, its share matched); every export downloads and reads as its
/// format (the pprof through `go tool pprof` with the session's counts);
/// and comparing the two shows each function's samples in both and their
/// change, as the sessions count them, biggest change first, with leaf_a's
/// share grown by 25 points (red) and leaf_b's shrunk by 25 (blue).
#[test]
fn dashboard_tools_sort_filter_zoom_search_download_and_compare() {
    let _serial = serial();
    require_root_and_perf();
    let driver = dashboard_driver();
    let mut r = remote("operator", &[]);
    let (_before, base) = split_session(&r.daemon, "3");
    r.daemon.restart();
    let mut command = Command::new(build_workload("split"));
    command.env("SPLIT_MID", "1").args(["60", "--ready"]);
    let after = Workload::start_command(command, "split");
    let new = Profile::parse(&r.daemon.profctl(&[
        "attach",
        &after.pid_arg(),
        "--duration",
        "3",
        "--format",
        "json",
    ]));
    let downloads = unique_dir("dashboard-downloads");
    let shot = r.dir.join("tools.png");
    let env = [
        ("PROFD_URL", format!("{}/", r.url)),
        ("PROFD_TOKEN", r.token.clone()),
        ("PROFD_BASE", base.session_id.to_string()),
        ("PROFD_NEW", new.session_id.to_string()),
        ("PROFD_DOWNLOADS", path_str(&downloads).to_string()),
        (
            "PROFD_SERVER_CERT",
            path_str(&r.tls.server_cert).to_string(),
        ),
        ("PROFD_SCREENSHOT", path_str(&shot).to_string()),
        ("CHROMIUM", CHROMIUM.to_string()),
    ]
    .map(|(k, v)| (k.to_string(), v));
    let seen = drive(&r, &driver.join("tools.mjs"), &env);
    let show = |what: &str| format!("{what}:\n{}", serde_json::to_string_pretty(&seen).unwrap());
    assert_eq!(
        seen["problems"],
        serde_json::json!([]),
        "{}",
        show("errors")
    );

    // The earlier run's session: marked, and its table is its profile's.
    assert_eq!(seen["baseRow"]["earlier"], "true", "{}", show("the row"));
    assert!(
        seen["baseRow"]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("(earlier run)"),
        "{}",
        show("the row")
    );
    assert_eq!(
        row_counts(&json_rows(&seen["baseRows"])),
        profile_counts(&base)
    );
    assert_eq!(
        row_counts(&json_rows(&seen["newRows"])),
        profile_counts(&new)
    );

    // Sorted by exclusive at first, as every table of profctl; by
    // inclusive; by exclusive, most first, then least first; by name;
    // filtered.
    let column = |v: &serde_json::Value, key: &str| -> Vec<u64> {
        json_rows(v)
            .iter()
            .map(|r| r[key].as_u64().unwrap_or_default())
            .collect()
    };
    let excl = |v: &serde_json::Value| column(v, "exclusive");
    for (rows, key) in [
        ("newRows", "exclusive"),
        ("byInclusive", "inclusive"),
        ("byExclusive", "exclusive"),
    ] {
        let down = column(&seen[rows], key);
        assert!(
            down.len() > 2 && down.windows(2).all(|w| w[0] >= w[1]),
            "{}",
            show(&format!("{rows}: by {key}, most first"))
        );
    }
    let up = excl(&seen["byExclusiveAscending"]);
    assert!(up.windows(2).all(|w| w[0] <= w[1]), "{}", show("ascending"));
    let by_name: Vec<String> = json_rows(&seen["byName"])
        .iter()
        .map(|n| n.as_str().unwrap_or_default().to_string())
        .collect();
    let mut sorted = by_name.clone();
    sorted.sort();
    assert_eq!(by_name, sorted, "{}", show("by name"));
    let mut filtered: Vec<String> = json_rows(&seen["filtered"])
        .iter()
        .map(|n| n.as_str().unwrap_or_default().to_string())
        .collect();
    filtered.sort();
    assert_eq!(filtered, ["leaf_a", "leaf_b"], "{}", show("the filter"));

    // Zoomed into mid: mid and leaf_b span the graph, leaf_a is not drawn.
    let width = seen["flameWidth"].as_f64().unwrap_or_default();
    let frame = |set: &str, name: &str| {
        json_rows(&seen[set])
            .into_iter()
            .find(|f| f["name"] == name)
    };
    for name in ["mid", "leaf_b"] {
        let f = frame("zoomed", name).unwrap_or_else(|| panic!("{}", show("zoomed")));
        assert!(
            f["x"].as_f64().unwrap_or(1e9) < 1.0
                && f["width"].as_f64().unwrap_or_default() > width * 0.98,
            "{name} spans the graph: {}",
            show("zoomed")
        );
    }
    assert!(frame("zoomed", "leaf_a").is_none(), "{}", show("zoomed"));
    assert!(
        seen["callersAfterZoom"]
            .as_str()
            .unwrap_or_default()
            .starts_with("mid:"),
        "{}",
        show("the click also selects")
    );
    let b = frame("beforeZoom", "leaf_b").unwrap();
    assert!(
        b["width"].as_f64().unwrap_or_default() < width * 0.7,
        "{}",
        show("before")
    );
    assert!(frame("afterReset", "leaf_a").is_some(), "{}", show("reset"));

    // Searched: leaf_b marked, the others dimmed, its share matched.
    for f in json_rows(&seen["searched"]) {
        let hit = f["name"] == "leaf_b";
        assert_eq!(f["match"].as_bool(), Some(hit), "{}", show("search"));
        assert_eq!(f["dim"].as_bool(), Some(!hit), "{}", show("search"));
    }
    let leaf_b = new.function("leaf_b").pct(profd_e2e::Measure::Inclusive);
    let matched: f64 = seen["matched"]
        .as_str()
        .unwrap_or_default()
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(-1.0);
    assert!(
        (matched - leaf_b).abs() < 0.2,
        "{matched} vs {leaf_b}: {}",
        show("matched")
    );

    // Downloads, each read as its format.
    let file = |format: &str| {
        PathBuf::from(
            seen["downloads"][format]["path"]
                .as_str()
                .unwrap_or_default(),
        )
    };
    let (flat, text) = profd_e2e::views::go_pprof_flat(&file("pprof"));
    for name in ["leaf_a", "leaf_b"] {
        assert_eq!(
            flat.get(name).copied().unwrap_or(0),
            new.function(name).exclusive,
            "{name} in the downloaded pprof:\n{text}"
        );
    }
    let folded = std::fs::read_to_string(file("folded")).unwrap();
    let sum: u64 = folded
        .lines()
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, n)| n.parse::<u64>().ok()))
        .sum();
    assert_eq!(sum, new.totals.attributed, "folded stacks add up");
    assert!(std::fs::read_to_string(file("svg"))
        .unwrap()
        .contains("<svg"));
    let speedscope: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file("speedscope")).unwrap()).unwrap();
    assert!(speedscope["$schema"]
        .as_str()
        .unwrap_or_default()
        .contains("speedscope"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file("json")).unwrap()).unwrap();
    assert_eq!(json["session_id"].as_u64(), Some(new.session_id));
    assert_eq!(
        seen["downloads"]["pprof"]["file"],
        format!("session-{}-profile.pb.gz", new.session_id)
    );

    // The comparison: each function's samples in both sessions (per
    // second when their durations differ) and the change, as the sessions
    // count them; leaf_a's share grew 25 points (red), leaf_b's shrank 25
    // (blue); biggest change first; no warning for two runs of one program.
    let diff_rows = json_rows(&seen["diffRows"]);
    let row = |name: &str| {
        diff_rows
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{}", show("the diff table")))
    };
    let rates = seen["diffRates"] == "true";
    let per = |n: u64, p: &Profile| match rates {
        true => n as f64 / p.duration_s,
        false => n as f64,
    };
    for name in ["leaf_a", "leaf_b"] {
        let r = row(name);
        let (b, n) = (base.function(name), new.function(name));
        for (field, want) in [
            ("baseExclusive", per(b.exclusive, &base)),
            ("newExclusive", per(n.exclusive, &new)),
            ("baseInclusive", per(b.inclusive, &base)),
            ("newInclusive", per(n.inclusive, &new)),
            ("change", per(n.exclusive, &new) - per(b.exclusive, &base)),
        ] {
            let seen_value = r[field].as_f64().unwrap_or(f64::NAN);
            assert!(
                (seen_value - want).abs() < 0.01,
                "{name}'s {field} is {seen_value}, the sessions say {want} (rates {rates}): {}",
                show("the diff table")
            );
        }
    }
    let changes: Vec<f64> = diff_rows
        .iter()
        .map(|r| r["change"].as_f64().unwrap_or_default().abs())
        .collect();
    assert!(
        changes.windows(2).all(|w| w[0] >= w[1]),
        "{}",
        show("biggest change first")
    );
    let share = |name: &str| row(name)["share"].as_f64().unwrap_or_default();
    assert!(
        (share("leaf_a") - 25.0).abs() <= 6.0,
        "{}",
        show("leaf_a's change")
    );
    assert!(
        (share("leaf_b") + 25.0).abs() <= 6.0,
        "{}",
        show("leaf_b's change")
    );
    assert_eq!(row("leaf_a")["class"], "grew", "{}", show("leaf_a grew"));
    assert_eq!(
        row("leaf_b")["class"],
        "shrank",
        "{}",
        show("leaf_b shrank")
    );
    assert_eq!(
        seen["diffWarnings"],
        serde_json::json!([]),
        "{}",
        show("warnings")
    );
    let diff_frame = |name: &str| {
        json_rows(&seen["diffFlame"])
            .into_iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("{}", show("the diff flame graph")))
    };
    let (a, b) = (diff_frame("leaf_a"), diff_frame("leaf_b"));
    assert!(
        a["fill"].as_str().unwrap_or_default().starts_with("hsl(0,"),
        "{}",
        show("red")
    );
    assert!(
        b["fill"]
            .as_str()
            .unwrap_or_default()
            .starts_with("hsl(215,"),
        "{}",
        show("blue")
    );
    assert!((a["change"].as_f64().unwrap_or_default() - 25.0).abs() <= 6.0);
    assert!(
        std::fs::metadata(&shot).is_ok_and(|m| m.len() > 10_000),
        "a screenshot"
    );
}
