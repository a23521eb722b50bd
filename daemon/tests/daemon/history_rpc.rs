//! Continuous profiling's history over the gRPC API: ListWindows, and
//! GetProfile and GetView with a query answered with the same views and
//! exports as sessions, from hand-made windows added before serving; only
//! root may read them.

use crate::support::{serve, Running};
use profd::internals::continuous::{encode, Settings};
use profd_common::api;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tonic::Code;

/// A 10 s window that started `ago_s` seconds ago, with stacks (function
/// names, innermost first) of one process per service.
fn window(id: &str, ago_s: u64, stacks: &[(&str, u32, &[&str], u64)]) -> api::Window {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let start = now.as_nanos() as u64 - ago_s * 1_000_000_000;
    let mut w = api::Window {
        id: id.into(),
        start_unix_ns: start,
        end_unix_ns: start + 10_000_000_000,
        host: "web-1".into(),
        frequency_hz: 19,
        totals: Some(api::Totals::default()),
        ..Default::default()
    };
    for &(service, pid, frames, count) in stacks {
        let mut sw = api::ServiceWindow {
            service: service.into(),
            samples: count,
            ..Default::default()
        };
        sw.processes.push(api::WindowProcess {
            pid,
            comm: service.into(),
            samples: count,
            ..Default::default()
        });
        sw.threads.push(api::WindowThread {
            tid: pid,
            pid,
            name: service.into(),
            samples: count,
        });
        for f in frames {
            sw.functions.push(api::WindowFunction {
                name: f.to_string(),
                module: "app".into(),
                ..Default::default()
            });
        }
        sw.stacks.push(api::WindowStack {
            tid: pid,
            function: (0..frames.len() as u32).collect(),
            line: vec![0; frames.len()],
            address: vec![0; frames.len()],
            count,
        });
        w.services.push(sw);
        // The window's totals count its samples, as the profiler's do.
        if let Some(t) = &mut w.totals {
            t.attributed += count;
        }
    }
    w
}

async fn start(name: &str, continuous: bool) -> Running {
    serve(name, |socket| async move {
        let mut config = profd::Config::new(socket);
        if continuous {
            config.continuous = Some(Settings {
                retention_age: Duration::from_secs(3600),
                ..Settings::default()
            });
        }
        let daemon = profd::Daemon::bind(config).await?;
        if let Some(history) = daemon.history() {
            history
                .add(
                    encode(window(
                        "a1",
                        60,
                        &[
                            ("web", 10, &["read", "main"], 3),
                            ("db", 20, &["scan", "main"], 2),
                        ],
                    ))
                    .unwrap(),
                )
                .await;
            history
                .add(encode(window("a2", 30, &[("web", 10, &["read", "main"], 1)])).unwrap())
                .await;
        }
        Ok(daemon)
    })
    .await
}

fn query(services: &[&str], by: api::GroupBy) -> Option<api::Query> {
    Some(api::Query {
        services: services.iter().map(|s| s.to_string()).collect(),
        by: by as i32,
        ..Default::default()
    })
}

fn tree() -> Option<api::get_view_request::View> {
    Some(api::get_view_request::View::Tree(
        api::TreeRequest::default(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_is_listed_and_queried_like_a_session() {
    let mut h = start("history-rpc", true).await;
    let list = h
        .client
        .list_windows(api::ListWindowsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(list.enabled);
    assert_eq!((list.windows.len(), list.windows_kept), (2, 2));
    assert_eq!(
        (list.frequency_hz, list.window_seconds, list.retention_s),
        (19, 10, 3600)
    );
    let services: Vec<(&str, u64)> = list
        .services
        .iter()
        .map(|s| (s.service.as_str(), s.samples))
        .collect();
    assert_eq!(services, [("web", 4), ("db", 2)]);
    let info = h.info().await;
    let c = info
        .continuous
        .expect("Info tells continuous profiling is on");
    assert_eq!((c.windows_kept, c.windows.len()), (2, 0));

    let view = h
        .client
        .get_view(api::GetViewRequest {
            session_id: 0,
            query: query(&[], api::GroupBy::Service),
            view: tree(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let name = |id: u64| {
        view.functions
            .iter()
            .find(|f| f.id == id)
            .map_or("?", |f| f.name.as_str())
    };
    let roots: Vec<(&str, u64)> = view
        .nodes
        .iter()
        .filter(|n| n.parent == -1)
        .map(|n| (name(n.function_id), n.inclusive))
        .collect();
    assert_eq!(roots, [("[service web]", 4), ("[service db]", 2)]);
    let session = view.session.unwrap();
    assert_eq!((session.id, session.pid, session.duration_s), (0, 0, 20.0));
    assert_eq!(session.scope, api::Scope::SystemWide as i32);

    let folded = h
        .client
        .get_profile(api::GetProfileRequest {
            session_id: 0,
            format: api::ExportFormat::Folded as i32,
            query: query(&["web"], api::GroupBy::Unspecified),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(String::from_utf8(folded.data).unwrap(), "main;read 4\n");
    assert_eq!(folded.functions.len(), 2);
    let svg = h
        .client
        .get_profile(api::GetProfileRequest {
            session_id: 0,
            format: api::ExportFormat::Svg as i32,
            query: query(&["db"], api::GroupBy::Unspecified),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(String::from_utf8_lossy(&svg.data).contains("services db"));

    let err = h
        .client
        .get_view(api::GetViewRequest {
            session_id: 3,
            query: query(&[], api::GroupBy::Unspecified),
            view: tree(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("session_id 3"), "{err:?}");
    let err = h
        .client
        .get_profile(api::GetProfileRequest {
            query: query(&["nginx"], api::GroupBy::Unspecified),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert!(err.message().contains("\"db\", \"web\""), "{err:?}");
    let err = h
        .client
        .list_windows(api::ListWindowsRequest {
            from_unix_ms: 5,
            to_unix_ms: 4,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    h.finish().await;
}

/// StreamProfile's pieces, put together as the API says: the first
/// piece's session, every piece's functions, every piece's data.
async fn streamed(h: &mut Running, req: api::GetProfileRequest) -> api::GetProfileResponse {
    let mut stream = h.client.stream_profile(req).await.unwrap().into_inner();
    let mut whole = api::GetProfileResponse::default();
    let mut pieces = 0;
    while let Some(piece) = stream.message().await.unwrap() {
        if pieces == 0 {
            whole.session = piece.session;
        } else {
            assert!(piece.session.is_none(), "the session comes once");
        }
        assert!(piece.data.len() <= 1 << 20 && piece.functions.len() <= 4096);
        whole.functions.extend(piece.functions);
        whole.data.extend(piece.data);
        pieces += 1;
    }
    whole
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_answers_are_the_whole_ones() {
    let mut h = start("history-stream", true).await;
    for format in [
        api::ExportFormat::Unspecified,
        api::ExportFormat::Pprof,
        api::ExportFormat::Folded,
        api::ExportFormat::Svg,
        api::ExportFormat::Speedscope,
        api::ExportFormat::Json,
    ] {
        let req = api::GetProfileRequest {
            session_id: 0,
            format: format as i32,
            query: query(&[], api::GroupBy::Process),
        };
        let whole = h
            .client
            .get_profile(req.clone())
            .await
            .unwrap()
            .into_inner();
        let pieces = streamed(&mut h, req).await;
        assert_eq!(pieces.session, whole.session, "{format:?}");
        assert_eq!(pieces.functions, whole.functions, "{format:?}");
        assert_eq!(pieces.data, whole.data, "{format:?}");
        assert!(!whole.functions.is_empty());
    }
    // Errors are the stream's status, as GetProfile's.
    let err = h
        .client
        .stream_profile(api::GetProfileRequest {
            query: query(&["nginx"], api::GroupBy::Unspecified),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let err = h
        .client
        .stream_profile(api::GetProfileRequest {
            format: 99,
            query: query(&[], api::GroupBy::Unspecified),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("unknown export format 99"),
        "{err:?}"
    );
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_continuous_profiling_the_history_is_refused() {
    let mut h = start("history-off", false).await;
    assert!(h.info().await.continuous.is_none());
    let err = h
        .client
        .list_windows(api::ListWindowsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(err.message().contains("--continuous"), "{err:?}");
    let err = h
        .client
        .get_profile(api::GetProfileRequest {
            query: query(&[], api::GroupBy::Unspecified),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    h.finish().await;
}

/// A unary call on the daemon's socket as user `nobody` (curl over HTTP/2
/// under setpriv), with an empty request: the reply's headers.
fn call_as_nobody(socket: &std::path::Path, method: &str) -> String {
    let dir = socket.parent().unwrap();
    let frame = dir.join("empty.frame");
    std::fs::write(&frame, [0u8; 5]).unwrap();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(["curl", "-sS", "--http2-prior-knowledge", "--max-time", "30"])
        .arg("--unix-socket")
        .arg(socket)
        .args(["-H", "content-type: application/grpc", "-H", "te: trailers"])
        .arg("--data-binary")
        .arg(format!("@{}", frame.display()))
        .args(["-D", "-", "-o", "/dev/null"])
        .arg(format!("http://localhost/profd.v1.Profiler/{method}"))
        .output()
        .expect("run setpriv and curl (util-linux, curl)");
    assert!(
        out.status.success(),
        "curl as nobody failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_root_reads_the_history() {
    use std::os::unix::fs::PermissionsExt;
    let h = start("history-root", true).await;
    let socket = h.dir.join("profd.sock");
    // Let anyone connect: the daemon, not the socket, must refuse.
    std::fs::set_permissions(&h.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let socket2 = socket.clone();
    let headers = tokio::task::spawn_blocking(move || call_as_nobody(&socket2, "ListWindows"))
        .await
        .unwrap();
    assert!(
        headers.contains("grpc-status: 7"),
        "PERMISSION_DENIED:\n{headers}"
    );
    assert!(
        headers.contains("uid%2065534") && headers.contains("only%20root%20may"),
        "{headers}"
    );
    // Anything else is still served to them.
    let headers = tokio::task::spawn_blocking(move || call_as_nobody(&socket, "ListSessions"))
        .await
        .unwrap();
    assert!(
        headers.starts_with("HTTP/2 200") && !headers.contains("grpc-status: 7"),
        "{headers}"
    );
    h.finish().await;
}
