//! The `profctl` binary against an in-process fake profd (tonic over a Unix
//! socket): Attach/Watch/GetProfile flow, JSON and table output, Ctrl-C,
//! `run`, errors, broken pipes, and the one-shot commands.
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use profd_common::api::profiler_server::{Profiler, ProfilerServer};
use profd_common::api::*;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tonic::{Request, Response, Status};

/// One fake session: a target, its counts, and how it ends.
struct FakeSession {
    session: Session,
    functions: Vec<Function>,
    started: Instant,
    ticks: u64,
}

impl FakeSession {
    /// One interval of sampling: 10 samples in spin (under main under
    /// _start), 2 discarded; from the third tick on, `late` too.
    fn tick(&mut self) -> Vec<u64> {
        self.ticks += 1;
        let mut changed = vec![1, 2, 3];
        for f in &mut self.functions[..3] {
            f.inclusive += 10;
        }
        self.functions[2].exclusive += 10;
        let t = self.session.totals.get_or_insert_with(Default::default);
        t.attributed += 10;
        t.discarded += 2;
        if self.ticks >= 3 {
            if self.functions.len() == 3 {
                self.functions.push(function(4, "late", "liblate.so", 0, 0));
            }
            self.functions[3].inclusive += 1;
            self.functions[3].exclusive += 1;
            self.functions[0].inclusive += 1;
            self.session.totals.as_mut().unwrap().attributed += 1;
            changed.extend([0, 4]);
        }
        self.session.duration_s = self.started.elapsed().as_secs_f64();
        changed
    }

    /// Ends the session when its duration elapsed or its target is gone.
    /// Its time is its sampling intervals (`interval` each), not the
    /// clock's: a loaded machine changes when updates come, not how many.
    fn check_end(&mut self, interval: Duration) {
        if self.session.state() != SessionState::Running {
            return;
        }
        let limit = self.session.duration_limit_ms;
        if limit > 0 && interval * self.ticks as u32 >= Duration::from_millis(limit) {
            self.session.state = SessionState::DurationElapsed as i32;
        } else if !Path::new(&format!("/proc/{}", self.session.pid)).exists() {
            self.session.state = SessionState::Exited as i32;
        }
    }
}

fn function(id: u64, name: &str, module: &str, inclusive: u64, exclusive: u64) -> Function {
    Function {
        id,
        name: name.into(),
        module: module.into(),
        inclusive,
        exclusive,
        inclusive_pct: 0.0,
        exclusive_pct: 0.0,
        inlined: false,
        window_inclusive: 0,
        window_exclusive: 0,
    }
}

#[derive(Clone, Default)]
struct Fake {
    sessions: Arc<Mutex<HashMap<u64, FakeSession>>>,
    /// The queries of the continuous history asked, in order.
    queries: Arc<Mutex<Vec<Query>>>,
}

/// The synthetic session of a history query, as profd answers it.
fn history_session() -> Session {
    Session {
        id: 0,
        pid: 0,
        comm: "continuous".into(),
        frequency_hz: 19,
        event: Event::CpuClock as i32,
        state: SessionState::DurationElapsed as i32,
        started_unix_ms: 1_796_202_000_000,
        duration_s: 20.0,
        scope: Scope::SystemWide as i32,
        totals: Some(Totals {
            attributed: 8,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn history_functions() -> Vec<Function> {
    let mut main = function(1, "main", "web", 8, 0);
    main.inclusive_pct = 100.0;
    let mut serve = function(2, "serve_request", "web", 8, 8);
    serve.inclusive_pct = 100.0;
    serve.exclusive_pct = 100.0;
    vec![main, serve]
}

impl Fake {
    fn add(&self, id: u64, pid: u32, duration_ms: u64, event: i32) -> Session {
        let session = Session {
            id,
            pid,
            comm: "fake".into(),
            frequency_hz: 999,
            event: if event == 0 { 1 } else { event },
            state: SessionState::Running as i32,
            started_unix_ms: 1,
            duration_s: 0.0,
            totals: Some(Totals::default()),
            duration_limit_ms: duration_ms,
            error: String::new(),
            ..Default::default()
        };
        let functions = vec![
            function(1, "_start", "fake", 0, 0),
            function(2, "main", "fake", 0, 0),
            function(3, "spin", "fake", 0, 0),
        ];
        self.sessions.lock().unwrap().insert(
            id,
            FakeSession {
                session: session.clone(),
                functions,
                started: Instant::now(),
                ticks: 0,
            },
        );
        session
    }

    fn state_of(&self, id: u64) -> SessionState {
        self.sessions.lock().unwrap()[&id].session.state()
    }
}

#[tonic::async_trait]
impl Profiler for Fake {
    async fn info(&self, _: Request<InfoRequest>) -> Result<Response<InfoResponse>, Status> {
        Ok(Response::new(InfoResponse {
            version: "9.9.9-fake".into(),
            cpus: 2,
            pmu_available: false,
            default_event: Event::CpuClock as i32,
            perf_event_paranoid: 2,
            max_sample_rate: 100_000,
            groups: vec![],
            totals: Some(Totals::default()),
            running_sessions: 0,
            continuous: None,
            sinks: vec![],
            retention: None,
            memory: None,
            debuginfod: None,
            python_frames: "read at each sample".into(),
            ruby_frames: "read at each sample".into(),
            perl_frames: "read at each sample".into(),
            ask_jvm: true,
            ask_jvm_interval_s: 2,
            jvm_perfmap_requests: vec![],
        }))
    }

    async fn attach(
        &self,
        request: Request<AttachRequest>,
    ) -> Result<Response<AttachResponse>, Status> {
        let r = request.into_inner();
        if r.pid == 99_999 {
            return Err(Status::not_found("no process with pid 99999"));
        }
        let id = self.sessions.lock().unwrap().len() as u64 + 1;
        let session = self.add(id, r.pid, r.duration_ms, r.event);
        Ok(Response::new(AttachResponse {
            session: Some(session),
        }))
    }

    type WatchStream = ReceiverStream<Result<WatchResponse, Status>>;

    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let r = request.into_inner();
        let interval = Duration::from_millis(u64::from(r.interval_ms.max(50)));
        let id = r.session_id;
        let snapshot = {
            let sessions = self.sessions.lock().unwrap();
            let s = sessions
                .get(&id)
                .ok_or_else(|| Status::not_found("no such session"))?;
            WatchResponse {
                seq: 0,
                snapshot: true,
                session: Some(s.session.clone()),
                functions: s.functions.clone(),
                r#final: false,
                ..Default::default()
            }
        };
        let (tx, rx) = mpsc::channel(4);
        let sessions = self.sessions.clone();
        tokio::spawn(async move {
            if tx.send(Ok(snapshot)).await.is_err() {
                return;
            }
            let mut named: Vec<u64> = vec![1, 2, 3];
            for seq in 1.. {
                tokio::time::sleep(interval).await;
                let update = {
                    let mut sessions = sessions.lock().unwrap();
                    let s = sessions.get_mut(&id).unwrap();
                    s.check_end(interval);
                    let running = s.session.state() == SessionState::Running;
                    let changed = if running { s.tick() } else { vec![] };
                    let functions = s
                        .functions
                        .iter()
                        .filter(|f| changed.contains(&f.id))
                        .map(|f| {
                            let mut f = f.clone();
                            if named.contains(&f.id) {
                                f.name.clear();
                                f.module.clear();
                            } else {
                                named.push(f.id);
                            }
                            f.inclusive_pct = 42.0; // stale: the client recomputes
                            f
                        })
                        .collect();
                    WatchResponse {
                        seq,
                        snapshot: false,
                        session: Some(s.session.clone()),
                        functions,
                        r#final: !running,
                        ..Default::default()
                    }
                };
                let last = update.r#final;
                if tx.send(Ok(update)).await.is_err() || last {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn get_profile(
        &self,
        request: Request<GetProfileRequest>,
    ) -> Result<Response<GetProfileResponse>, Status> {
        let request = request.into_inner();
        if let Some(q) = request.query {
            self.queries.lock().unwrap().push(q);
            let data = match ExportFormat::try_from(request.format) {
                Ok(ExportFormat::Folded) => b"main;serve_request 8\n".to_vec(),
                _ => Vec::new(),
            };
            return Ok(Response::new(GetProfileResponse {
                session: Some(history_session()),
                functions: history_functions(),
                data,
            }));
        }
        let sessions = self.sessions.lock().unwrap();
        let s = sessions
            .get(&request.session_id)
            .ok_or_else(|| Status::not_found("no such session"))?;
        Ok(Response::new(GetProfileResponse {
            session: Some(s.session.clone()),
            functions: s.functions.clone(),
            data: Vec::new(),
        }))
    }

    type StreamProfileStream = tokio_stream::Iter<std::vec::IntoIter<Result<ProfilePiece, Status>>>;

    /// GetProfile's answer in pieces: the session, each function, and the
    /// data a few bytes at a time.
    async fn stream_profile(
        &self,
        request: Request<GetProfileRequest>,
    ) -> Result<Response<Self::StreamProfileStream>, Status> {
        let whole = self.get_profile(request).await?.into_inner();
        let mut pieces = vec![Ok(ProfilePiece {
            session: whole.session,
            ..Default::default()
        })];
        for f in whole.functions {
            pieces.push(Ok(ProfilePiece {
                functions: vec![f],
                ..Default::default()
            }));
        }
        for data in whole.data.chunks(5) {
            pieces.push(Ok(ProfilePiece {
                data: data.to_vec(),
                ..Default::default()
            }));
        }
        Ok(Response::new(tokio_stream::iter(pieces)))
    }

    async fn stop(&self, request: Request<StopRequest>) -> Result<Response<StopResponse>, Status> {
        let mut sessions = self.sessions.lock().unwrap();
        let id = request.into_inner().session_id;
        let s = sessions
            .get_mut(&id)
            .ok_or_else(|| Status::not_found(format!("no session {id}")))?;
        if s.session.state() != SessionState::Running {
            return Err(Status::failed_precondition(format!(
                "session {id} already ended"
            )));
        }
        s.session.state = SessionState::Stopped as i32;
        Ok(Response::new(StopResponse {
            session: Some(s.session.clone()),
        }))
    }

    async fn get_view(
        &self,
        request: Request<profd_common::api::GetViewRequest>,
    ) -> Result<Response<profd_common::api::GetViewResponse>, Status> {
        let request = request.into_inner();
        let Some(q) = request.query else {
            return Err(Status::unimplemented("not faked"));
        };
        self.queries.lock().unwrap().push(q);
        let node = |parent, depth, function_id| TreeNode {
            parent,
            depth,
            function_id,
            inclusive: 8,
            exclusive: if depth == 1 { 8 } else { 0 },
        };
        Ok(Response::new(GetViewResponse {
            session: Some(history_session()),
            functions: history_functions(),
            nodes: vec![node(-1, 0, 1), node(0, 1, 2)],
            ..Default::default()
        }))
    }

    async fn get_histogram(
        &self,
        _: Request<profd_common::api::GetHistogramRequest>,
    ) -> Result<Response<profd_common::api::GetHistogramResponse>, Status> {
        Err(Status::unimplemented("not faked"))
    }

    async fn list_windows(
        &self,
        request: Request<profd_common::api::ListWindowsRequest>,
    ) -> Result<Response<profd_common::api::ListWindowsResponse>, Status> {
        let r = request.into_inner();
        self.queries.lock().unwrap().push(Query {
            from_unix_ms: r.from_unix_ms,
            to_unix_ms: r.to_unix_ms,
            ..Default::default()
        });
        let svc = |service: &str, samples| ServiceSamples {
            service: service.into(),
            samples,
        };
        Ok(Response::new(ListWindowsResponse {
            enabled: true,
            frequency_hz: 19,
            window_seconds: 10,
            retention_bytes: 256 << 20,
            retention_s: 7 * 86_400,
            host: "fake-host".into(),
            windows_kept: 1,
            bytes_kept: 900,
            windows: vec![WindowSummary {
                id: "w1".into(),
                start_unix_ns: 1_796_202_000_000_000_000,
                end_unix_ns: 1_796_202_010_000_000_000,
                services: vec![svc("web", 8), svc("db", 2)],
                bytes: 900,
                ..Default::default()
            }],
            services: vec![svc("web", 8), svc("db", 2)],
            ..Default::default()
        }))
    }

    async fn list_sessions(
        &self,
        _: Request<ListSessionsRequest>,
    ) -> Result<Response<ListSessionsResponse>, Status> {
        let sessions = self.sessions.lock().unwrap();
        Ok(Response::new(ListSessionsResponse {
            sessions: sessions.values().map(|s| s.session.clone()).collect(),
        }))
    }
}

/// A fake daemon serving on a socket in a temp dir until dropped.
struct Server {
    fake: Fake,
    socket: PathBuf,
    dir: PathBuf,
    stop: Option<oneshot::Sender<()>>,
}

impl Server {
    async fn start() -> Server {
        let dir = std::env::temp_dir().join(format!(
            "profctl-fake-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let socket = dir.join("fake.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let fake = Fake::default();
        let (stop, stopped) = oneshot::channel::<()>();
        let service = ProfilerServer::new(fake.clone());
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Server {
            fake,
            socket,
            dir,
            stop: Some(stop),
        }
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_profctl"));
        cmd.arg("--socket")
            .arg(&self.socket)
            .args(args)
            .env_remove("PROFD_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    async fn profctl(&self, args: &[&str]) -> (i32, String, String) {
        let out = tokio::time::timeout(Duration::from_secs(30), self.command(args).output())
            .await
            .expect("profctl hung")
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn me() -> String {
    std::process::id().to_string()
}

/// The JSON document among `profctl run`'s stderr lines: from a line `{`
/// to the next line `}`.
fn json_on(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().collect();
    let start = lines
        .iter()
        .position(|l| *l == "{")
        .expect("a JSON document");
    let end = start
        + lines[start..]
            .iter()
            .position(|l| *l == "}")
            .expect("its end");
    lines[start..=end].join("\n")
}

/// Checks the JSON contract and returns the document.
fn check_json(stdout: &str) -> Value {
    let v: Value = serde_json::from_str(stdout).expect("stdout is one JSON document");
    for key in [
        "pid",
        "duration_s",
        "frequency_hz",
        "event",
        "totals",
        "functions",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    let attributed = v["totals"]["attributed"].as_u64().unwrap();
    let functions = v["functions"].as_array().unwrap();
    let mut last = u64::MAX;
    for f in functions {
        let inclusive = f["inclusive"].as_u64().unwrap();
        assert!(inclusive <= last, "not sorted: {v}");
        last = inclusive;
        assert!(!f["name"].as_str().unwrap().is_empty());
        let pct = f["inclusive_pct"].as_f64().unwrap();
        let want = inclusive as f64 * 100.0 / attributed as f64;
        assert!((pct - want).abs() < 1e-9, "{pct} vs {want}");
    }
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn attach_json_until_duration() {
    let server = Server::start().await;
    let (code, stdout, stderr) = server
        .profctl(&[
            "attach",
            &me(),
            "--duration",
            "0.55",
            "--interval",
            "0.1",
            "--format",
            "json",
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let v = check_json(&stdout);
    assert_eq!(v["state"], "duration_elapsed");
    assert_eq!(v["pid"].as_u64().unwrap(), u64::from(std::process::id()));
    assert_eq!(v["event"], "cpu-clock");
    assert_eq!(v["frequency_hz"], 999);
    assert_eq!(v["session_id"], 1);
    assert_eq!(v["comm"], "fake");
    let names: Vec<&str> = v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    // main and spin tie on inclusive; spin has more exclusive samples.
    assert_eq!(names, ["_start", "spin", "main", "late"]);
    assert_eq!(v["functions"][0]["inclusive_pct"], 100.0);
}

/// Into a pipe, the final table alone: no live blocks.
#[tokio::test(flavor = "multi_thread")]
async fn attach_into_a_pipe_prints_the_final_table_alone() {
    let server = Server::start().await;
    let (code, stdout, stderr) = server
        .profctl(&["attach", &me(), "--duration", "0.55", "--interval", "0.1"])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let blocks = stdout.matches("profd session 1 — pid").count();
    assert_eq!(blocks, 1, "expected the final table alone:\n{stdout}");
    let last = stdout.rsplit("profd session 1").next().unwrap();
    assert!(last.contains("— duration_elapsed"), "{last}");
    assert!(last.contains("100.0%"), "{last}");
    // By self samples first (--sort's default): spin, late, then the
    // callers without any.
    let rows: Vec<&str> = last.lines().skip(3).collect();
    assert!(rows[0].ends_with("spin  [fake]"), "{last}");
    assert!(rows[1].ends_with("late  [liblate.so]"), "{last}");
    assert!(rows[2].ends_with("_start  [fake]"), "{last}");
    assert!(
        !stdout.contains('\x1b'),
        "no ANSI codes when not a terminal"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_stops_the_session_and_prints_the_final_table() {
    let server = Server::start().await;
    let child = server
        .command(&["attach", &me(), "--interval", "0.1", "--top", "2"])
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let pid = rustix::process::Pid::from_raw(child.id().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .expect("profctl did not end after Ctrl-C")
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("stopping session 1"), "{stderr}");
    let last = stdout.rsplit("profd session 1").next().unwrap();
    assert!(last.contains("— stopped"), "{last}");
    assert!(
        last.contains("more functions (--top 0 shows all)"),
        "{last}"
    );
    assert_eq!(server.fake.state_of(1), SessionState::Stopped);
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_errors_are_one_line() {
    let server = Server::start().await;
    let (code, stdout, stderr) = server.profctl(&["attach", "99999"]).await;
    assert_eq!(code, 1);
    assert_eq!(stdout, "");
    assert_eq!(stderr, "profctl: not found: no process with pid 99999\n");
    let (code, _, stderr) = server.profctl(&["stop", "5"]).await;
    assert_eq!(code, 1);
    assert_eq!(stderr, "profctl: not found: no session 5\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn run_until_duration_terminates_the_command() {
    let server = Server::start().await;
    let (code, stdout, stderr) = server
        .profctl(&[
            "run",
            "--duration",
            "0.5",
            "--interval",
            "0.1",
            "--format",
            "json",
            "--",
            "sleep",
            "30",
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    // The command keeps stdout; the JSON goes to stderr.
    assert_eq!(stdout, "");
    let v = check_json(&json_on(&stderr));
    assert_eq!(v["state"], "duration_elapsed");
    assert!(
        stderr.contains("profctl: sleep was killed by signal 15 (SIGTERM)"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn run_until_the_command_exits() {
    let server = Server::start().await;
    let (code, stdout, stderr) = server
        .profctl(&[
            "run",
            "--interval",
            "0.1",
            "--format",
            "json",
            "--",
            "sh",
            "-c",
            "sleep 0.4; exit 3",
        ])
        .await;
    assert_eq!(code, 3, "profctl exits with its command's status: {stderr}");
    assert_eq!(stdout, "");
    let v = check_json(&json_on(&stderr));
    assert_eq!(v["state"], "exited");
    assert!(
        stderr.ends_with("profctl: sh exited with status 3\n"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn closed_stdout_exits_quietly_and_stops_the_session() {
    let server = Server::start().await;
    let mut child = server
        .command(&["attach", &me(), "--duration", "20", "--interval", "0.1"])
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader goes away, like `| head -0`
    let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .expect("profctl kept running with a closed stdout")
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    assert_eq!(server.fake.state_of(1), SessionState::Stopped);
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_stop_and_info() {
    let server = Server::start().await;
    server.fake.add(7, 4242, 0, 0);
    let (code, stdout, stderr) = server.profctl(&["sessions"]).await;
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("ID"), "{stdout}");
    assert!(
        lines[1].contains("4242") && lines[1].contains("running"),
        "{stdout}"
    );

    let (code, stdout, stderr) = server.profctl(&["stop", "7"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with("session 7 — pid 4242 (fake) — stopped — "),
        "{stdout}"
    );
    let (code, _, stderr) = server.profctl(&["stop", "7"]).await;
    assert_eq!(code, 1);
    assert_eq!(
        stderr,
        "profctl: failed precondition: session 7 already ended\n"
    );

    let (code, stdout, stderr) = server.profctl(&["info"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("9.9.9-fake"), "{stdout}");
    assert!(stdout.contains("perf_event_paranoid:  2"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread")]
async fn query_reads_the_continuous_history() {
    let server = Server::start().await;
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    let before = now_ms();
    let (code, stdout, stderr) = server.profctl(&["query", "--list", "--since", "1h"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with("profd continuous profiling on fake-host: on, 19 Hz"),
        "{stdout}"
    );
    assert!(stdout.contains("     8  80.0  web\n"), "{stdout}");
    assert!(stdout.contains("2026-12-02T09:00:00Z"), "{stdout}");
    let asked = server.fake.queries.lock().unwrap().pop().unwrap();
    let hour_ago = before - 3_600_000;
    assert!(
        (hour_ago..hour_ago + 60_000).contains(&asked.from_unix_ms),
        "{asked:?}"
    );
    assert_eq!(asked.to_unix_ms, 0);

    let (code, stdout, stderr) = server
        .profctl(&[
            "query",
            "--since",
            "15m",
            "--service",
            "web",
            "--by",
            "process",
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with("profd continuous history — windows from 2026-12-02T09:00:00Z — cpu-clock @ 19 Hz — 20 s of windows\n"),
        "{stdout}"
    );
    assert!(stdout.contains("serve_request"), "{stdout}");
    let asked = server.fake.queries.lock().unwrap().pop().unwrap();
    assert_eq!(asked.services, ["web"]);
    assert_eq!(asked.by, GroupBy::Process as i32);

    let (code, stdout, stderr) = server
        .profctl(&[
            "query",
            "--from",
            "1796202000",
            "--to",
            "1796205600",
            "--pid",
            "42",
            "--tree",
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("call tree, top-down"), "{stdout}");
    assert!(stdout.contains("    serve_request"), "{stdout}");
    let asked = server.fake.queries.lock().unwrap().pop().unwrap();
    assert_eq!(
        (asked.from_unix_ms, asked.to_unix_ms),
        (1_796_202_000_000, 1_796_205_600_000)
    );
    assert_eq!(asked.pids, [42]);

    let (code, stdout, stderr) = server.profctl(&["query", "--format", "folded"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "main;serve_request 8\n");
    let asked = server.fake.queries.lock().unwrap().pop().unwrap();
    assert_eq!(
        (asked.from_unix_ms, asked.to_unix_ms),
        (0, 0),
        "the whole history"
    );

    let (code, _, stderr) = server.profctl(&["query", "--since", "soon"]).await;
    assert_eq!(code, 2, "a usage error: {stderr}");
    assert!(stderr.contains("soon"), "{stderr}");
}
