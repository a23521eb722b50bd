//! The gRPC API in-process over a Unix socket, fed by a fake sample source and
//! a fake symbolizer: exact inclusive/exclusive figures, Watch snapshot and
//! deltas, session ends, and the status codes of bad requests.

use crate::support::{serve, sleeper, until_final, Running};
use profd::internals::maps::{Backing, Mapping, ProcessMaps};
use profd::internals::perf::{EventSpec, PerfError};
use profd::internals::sampler::{
    Batch, Children, Counters, Flush, SampleSource, Subscriber, Subscription,
};
use profd::internals::symbolize::{Frame, Symbolizer};
use profd_common::api;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tonic::Code;

/// Delivers whatever the test feeds, as the sampler would.
#[derive(Default)]
struct FakeSource {
    counters: Counters,
    routes: Mutex<Vec<(Subscriber, u32, mpsc::UnboundedSender<Batch>)>>,
}

impl FakeSource {
    /// One drain holding these (pid, stack) samples.
    fn feed(&self, samples: &[(u32, &[u64])]) {
        for (_, pid, tx) in self.routes.lock().unwrap().iter() {
            let mut batch = Batch {
                seen: samples.len() as u64,
                ..Batch::default()
            };
            for (p, stack) in samples {
                if p == pid {
                    batch.push(*p, *p, stack.iter().copied(), None);
                }
            }
            tx.send(batch).unwrap();
        }
    }

    /// One drain holding a new mapping of `pid` and one sample of it.
    fn feed_mapping(&self, pid: u32, mapping: Mapping, stack: &[u64]) {
        for (_, p, tx) in self.routes.lock().unwrap().iter() {
            if *p == pid {
                let mut batch = Batch {
                    seen: 1,
                    ..Batch::default()
                };
                batch.mappings.push((pid, mapping.clone(), 0));
                batch.push(pid, pid, stack.iter().copied(), None);
                tx.send(batch).unwrap();
            }
        }
    }
}

#[tonic::async_trait]
impl SampleSource for FakeSource {
    async fn subscribe(
        &self,
        want: EventSpec,
        session: Subscriber,
        pid: u32,
        _children: Children,
        tx: mpsc::UnboundedSender<Batch>,
    ) -> Result<Subscription, PerfError> {
        self.routes.lock().unwrap().push((session, pid, tx));
        Ok(Subscription {
            since: profd::internals::sampler::monotonic_ns(),
            spec: want,
            tops: None,
        })
    }
    async fn unsubscribe(&self, _: EventSpec, session: Subscriber) {
        self.routes.lock().unwrap().retain(|r| r.0 != session);
    }
    async fn flush(&self, _: EventSpec, _: Flush) {}
    async fn groups(&self) -> Vec<(EventSpec, Vec<Subscriber>)> {
        Vec::new()
    }
    fn counters(&self) -> &Counters {
        &self.counters
    }
    fn cpus(&self) -> u32 {
        1
    }
}

/// Address 0xN00..0xNff is function `fN`; addresses from [`UNNAMED`] up
/// are not named, except those from [`JIT`] up, which the process's perf
/// map names (if it has them).
struct FakeSymbolizer;

const UNNAMED: u64 = 0xf000;
const JIT: u64 = 0x7000_0000;

/// The frame the fake symbolizer names `a` with.
fn fake_frame(a: u64) -> Frame {
    match a {
        UNNAMED.. => Frame::unnamed(format!("fake+{a:#x}"), "fake"),
        _ => Frame::named(format!("f{}", a >> 8), "fake"),
    }
}

impl Symbolizer for FakeSymbolizer {
    fn symbolize(&self, maps: &ProcessMaps, addrs: &[u64]) -> Vec<Vec<Frame>> {
        let perf_map = maps.perf_map();
        addrs
            .iter()
            .map(|&a| {
                let named = (a >= JIT)
                    .then(|| perf_map.as_ref()?.lookup(a).cloned())
                    .flatten();
                vec![named.map_or_else(|| fake_frame(a), |n| Frame::named(&*n, "[jit]"))]
            })
            .collect()
    }
}

async fn start(name: &str) -> (Running, Arc<FakeSource>) {
    start_with(name, profd::internals::registry::Limits::default()).await
}

async fn start_with(
    name: &str,
    limits: profd::internals::registry::Limits,
) -> (Running, Arc<FakeSource>) {
    let source = Arc::new(FakeSource::default());
    let fake = source.clone();
    let running = serve(name, |socket| {
        let mut config = profd::Config::new(socket);
        config.limits = limits;
        profd::Daemon::bind_with(config, fake, Arc::new(FakeSymbolizer))
    })
    .await;
    (running, source)
}

async fn attach(h: &mut Running, pid: u32) -> api::Session {
    let req = api::AttachRequest {
        pid,
        ..Default::default()
    };
    h.client
        .attach(req)
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap()
}

fn find<'a>(fs: &'a [api::Function], name: &str) -> &'a api::Function {
    fs.iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("{name} in {fs:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_figures_snapshot_deltas_and_stop() {
    let (mut h, source) = start("fake-figures").await;
    let mut target = sleeper();
    let pid = target.id();
    let s = attach(&mut h, pid).await;
    assert_eq!(
        (s.pid, s.frequency_hz, s.state),
        (pid, 999, api::SessionState::Running as i32)
    );
    assert_eq!(s.comm, "sleep");

    // f3 = main, f2 calls itself once in the last stack, f1 is the leaf.
    source.feed(&[
        (pid, &[0x100, 0x200, 0x300]),
        (pid, &[0x100, 0x200, 0x300]),
        (pid, &[0x100, 0x200, 0x300]),
        (pid, &[0x200, 0x210, 0x300]),
        (1, &[0x900]),
        (1, &[0x900]),
        (1, &[0x900]),
        (1, &[0x900]),
    ]);
    let mut stream = h.watch(s.id, 100).await;
    let snap = stream.message().await.unwrap().unwrap();
    assert!(snap.snapshot && !snap.resumed && !snap.r#final && snap.seq >= 1);
    let totals = snap.session.as_ref().unwrap().totals.unwrap();
    assert_eq!(
        (totals.attributed, totals.discarded, totals.lost),
        (4, 4, 0)
    );
    let fs = &snap.functions;
    assert_eq!(fs.len(), 3, "no function of the other process: {fs:?}");
    assert_eq!((find(fs, "f3").inclusive, find(fs, "f3").exclusive), (4, 0));
    assert_eq!(
        (find(fs, "f2").inclusive, find(fs, "f2").exclusive),
        (4, 1),
        "recursion counted once"
    );
    assert_eq!((find(fs, "f1").inclusive, find(fs, "f1").exclusive), (3, 3));
    assert_eq!(find(fs, "f1").exclusive_pct, 75.0);
    assert_eq!(find(fs, "f2").inclusive_pct, 100.0);
    assert_eq!(fs[0].inclusive, 4, "sorted by inclusive");

    source.feed(&[(pid, &[0x100, 0x300])]);
    let delta = loop {
        let m = stream.message().await.unwrap().unwrap();
        assert!(!m.snapshot);
        if !m.functions.is_empty() {
            break m;
        }
    };
    assert_eq!(
        delta.session.as_ref().unwrap().totals.unwrap().attributed,
        5
    );
    let mut changed: Vec<_> = delta
        .functions
        .iter()
        .map(|f| (f.id, f.inclusive, f.exclusive, f.name.clone()))
        .collect();
    changed.sort();
    let id = |n: &str| find(&snap.functions, n).id;
    let mut expected = vec![
        (id("f1"), 4, 4, String::new()),
        (id("f3"), 5, 0, String::new()),
    ];
    expected.sort();
    assert_eq!(changed, expected, "only changed rows, names not repeated");

    // The watcher goes away; meanwhile f4 appears and f1 changes. Resumed
    // from the last seq it saw, it gets just those, f4 with its name.
    let last_seq = delta.seq;
    drop(stream);
    source.feed(&[(pid, &[0x100, 0x400, 0x300])]);
    let mut resumed = h
        .client
        .watch(api::WatchRequest {
            session_id: s.id,
            interval_ms: 100,
            resume_after_seq: last_seq,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let first = resumed.message().await.unwrap().unwrap();
    assert!(first.resumed && !first.snapshot && first.seq > last_seq);
    let mut got: Vec<_> = first
        .functions
        .iter()
        .map(|f| (f.inclusive, f.exclusive, f.name.clone()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (1, 0, "f4".to_string()),
            (5, 5, String::new()),
            (6, 0, String::new())
        ],
        "f1 and f3 changed (no names), f4 is new (named), f2 did not change"
    );
    let mut stream = resumed;

    let stopped = h
        .client
        .stop(api::StopRequest { session_id: s.id })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        stopped.session.unwrap().state,
        api::SessionState::Stopped as i32
    );
    let last = until_final(&mut stream).await;
    assert_eq!(
        last.session.unwrap().state,
        api::SessionState::Stopped as i32
    );

    let profile = h.profile(s.id).await;
    assert_eq!(
        find(&profile.functions, "f3").inclusive,
        6,
        "readable after the end"
    );
    let list = h
        .client
        .list_sessions(api::ListSessionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(list.sessions.iter().any(|x| x.id == s.id));

    target.kill();
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_exit_and_duration_end_sessions() {
    let (mut h, _) = start("fake-ends").await;
    let mut target = sleeper();
    let s = attach(&mut h, target.id()).await;
    let mut stream = h.watch(s.id, 0).await;
    target.kill();
    let last = until_final(&mut stream).await;
    assert_eq!(
        last.session.unwrap().state,
        api::SessionState::Exited as i32
    );

    let mut other = sleeper();
    let timed = h
        .client
        .attach(api::AttachRequest {
            pid: other.id(),
            duration_ms: 200,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    let mut stream = h.watch(timed.id, 0).await;
    let last = until_final(&mut stream).await;
    let session = last.session.unwrap();
    assert_eq!(session.state, api::SessionState::DurationElapsed as i32);
    assert!(
        session.duration_s >= 0.2 && session.duration_s < 1.0,
        "{}",
        session.duration_s
    );
    other.kill();
    h.finish().await;
}

/// `AttachRequest` as a client could encode it wrongly: the pid widened to
/// 64 bits on the wire.
#[derive(Clone, PartialEq, prost::Message)]
struct WideAttach {
    #[prost(uint64, tag = "1")]
    pid: u64,
}

/// `AttachRequest` with a string where the pid's varint belongs.
#[derive(Clone, PartialEq, prost::Message)]
struct TextAttach {
    #[prost(string, tag = "1")]
    pid: String,
}

/// Send `msg` as an `Attach` request, however it is encoded.
async fn attach_raw<M: prost::Message + Send + 'static>(h: &Running, msg: M) -> tonic::Status {
    let channel = profctl::requests::connect::unix_channel(&h.dir.join("profd.sock"), None)
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/profd.v1.Profiler/Attach");
    let codec = profd_common::codec::StrictCodec::<M, api::AttachResponse>::default();
    grpc.unary(tonic::Request::new(msg), path, codec)
        .await
        .expect_err("the request is refused")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_and_long_names_get_short_precise_statuses() {
    let (mut h, _) = start("fake-malformed").await;
    // 2^32 + 1 must not be read as pid 1 (init).
    let err = attach_raw(&h, WideAttach { pid: (1 << 32) + 1 }).await;
    assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
    assert!(
        err.message()
            .contains("AttachRequest.pid was sent 4294967297"),
        "{}",
        err.message()
    );
    let err = attach_raw(&h, TextAttach { pid: "1".into() }).await;
    assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
    assert!(
        err.message().contains("not a valid profd.v1.AttachRequest"),
        "{}",
        err.message()
    );

    // A 3 MB function name is not echoed back whole.
    let mut target = sleeper();
    let s = attach(&mut h, target.id()).await;
    let name = "x".repeat(3 << 20);
    let err = h
        .client
        .get_view(api::GetViewRequest {
            session_id: s.id,
            view: Some(api::get_view_request::View::Callers(api::FunctionRef {
                id: 0,
                name,
            })),
            query: None,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{}", err.message());
    assert!(err.message().len() < 400, "{} bytes", err.message().len());
    assert!(
        err.message().contains("(3145728 bytes in all)"),
        "{}",
        err.message()
    );
    assert_eq!(h.info().await.running_sessions, 1, "the session lives on");
    target.kill();
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_precise_statuses_and_the_daemon_lives_on() {
    let (mut h, _) = start("fake-errors").await;
    let max = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .unwrap()
        .trim()
        .to_string();

    let err = h
        .client
        .attach(api::AttachRequest {
            pid: 999_999_999,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("999999999"), "{}", err.message());

    let me = std::process::id();
    for (bad, code) in [
        (0, Code::InvalidArgument),
        (max.parse::<u32>().unwrap() + 1, Code::ResourceExhausted),
    ] {
        let err = h
            .client
            .attach(api::AttachRequest {
                pid: me,
                frequency_hz: Some(bad),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), code, "{}", err.message());
        assert!(
            err.message().contains(&format!("1..={max}")),
            "{}",
            err.message()
        );
    }
    let err = h
        .client
        .attach(api::AttachRequest {
            pid: 0,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    // Modes: an unknown one, and the cycles event (which counts no time)
    // with a time mode, are refused, naming what to ask for.
    for (mode, event, names) in [
        (9, api::Event::CpuClock, "MODE_OFF_CPU"),
        (api::Mode::OffCpu as i32, api::Event::Cycles, "cpu-clock"),
        (api::Mode::Wall as i32, api::Event::Cycles, "cpu-clock"),
    ] {
        let err = h
            .client
            .attach(api::AttachRequest {
                pid: me,
                mode,
                event: event as i32,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
        assert!(err.message().contains(names), "{}", err.message());
    }

    let err = h
        .client
        .get_profile(api::GetProfileRequest {
            session_id: 4242,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("4242"));
    let err = h
        .client
        .stop(api::StopRequest { session_id: 4242 })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = h
        .client
        .watch(api::WatchRequest {
            session_id: 4242,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    let mut target = sleeper();
    let s = attach(&mut h, target.id()).await;
    let err = h
        .client
        .watch(api::WatchRequest {
            session_id: s.id,
            interval_ms: 10,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("50"), "{}", err.message());

    // A profil(3) histogram counts samples: an off-CPU session has none.
    let off = h
        .client
        .attach(api::AttachRequest {
            pid: target.id(),
            mode: api::Mode::OffCpu as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(off.mode(), api::Mode::OffCpu);
    let err = h
        .client
        .get_histogram(api::GetHistogramRequest {
            session_id: off.id,
            module: "sleep".into(),
            offset: 0,
            scale: 65536,
            buckets: 4,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    assert!(err.message().contains("MODE_CPU"), "{}", err.message());

    let info = h.info().await;
    assert_eq!(
        info.running_sessions, 2,
        "the daemon and its sessions survived"
    );
    assert_eq!(info.max_sample_rate.to_string(), max);
    target.kill();
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_exports_and_windows_over_known_stacks() {
    let (mut h, source) = start("fake-views").await;
    let target = sleeper();
    let pid = target.id();
    let s = attach(&mut h, pid).await;
    // main (f3) -> a (f1) x3, main -> b (f2) -> a x1: callers of f1 = {f3: 3, f2: 1}.
    source.feed(&[
        (pid, &[0x100, 0x300]),
        (pid, &[0x100, 0x300]),
        (pid, &[0x100, 0x300]),
        (pid, &[0x100, 0x200, 0x300]),
    ]);
    let view = |v: api::get_view_request::View| api::GetViewRequest {
        session_id: s.id,
        view: Some(v),
        query: None,
        ..Default::default()
    };
    let id_of = |fs: &[api::Function], name: &str| find(fs, name).id;

    let tree = h
        .client
        .get_view(view(api::get_view_request::View::Tree(
            api::TreeRequest::default(),
        )))
        .await
        .unwrap()
        .into_inner();
    let fs = tree.functions.clone();
    let nodes: Vec<_> = tree
        .nodes
        .iter()
        .map(|n| (n.parent, n.depth, n.function_id, n.inclusive, n.exclusive))
        .collect();
    assert_eq!(
        nodes,
        vec![
            (-1, 0, id_of(&fs, "f3"), 4, 0),
            (0, 1, id_of(&fs, "f1"), 3, 3),
            (0, 1, id_of(&fs, "f2"), 1, 0),
            (2, 2, id_of(&fs, "f1"), 1, 1),
        ],
        "top-down tree, children by inclusive"
    );

    let cc = h
        .client
        .get_view(view(api::get_view_request::View::Callers(
            api::FunctionRef {
                name: "f1".into(),
                id: 0,
            },
        )))
        .await
        .unwrap()
        .into_inner()
        .caller_callee
        .unwrap();
    let callers: Vec<_> = cc
        .callers
        .iter()
        .map(|e| (e.function_id, e.inclusive))
        .collect();
    assert_eq!(callers, vec![(id_of(&fs, "f3"), 3), (id_of(&fs, "f2"), 1)]);
    assert!(cc.callees.is_empty());
    let err = h
        .client
        .get_view(view(api::get_view_request::View::Callers(
            api::FunctionRef {
                name: "nope".into(),
                id: 0,
            },
        )))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = h
        .client
        .get_view(api::GetViewRequest {
            session_id: s.id,
            view: None,
            query: None,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    let folded = h.export(s.id, api::ExportFormat::Folded).await.data;
    assert_eq!(String::from_utf8(folded).unwrap(), "f3;f1 3\nf3;f2;f1 1\n");
    let json = h.export(s.id, api::ExportFormat::Json).await.data;
    let json: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(json["totals"]["attributed"], 4);
    assert_eq!(
        json["functions"][0]["name"], "f1",
        "inclusive 4, exclusive 4"
    );
    let err = h
        .client
        .get_profile(api::GetProfileRequest {
            session_id: s.id,
            format: 99,
            query: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    // A window holds only recent samples: all four are recent.
    let mut stream = h
        .client
        .watch(api::WatchRequest {
            session_id: s.id,
            interval_ms: 100,
            window_s: 5,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let snap = stream.message().await.unwrap().unwrap();
    assert_eq!(snap.window_attributed, 4);
    let f1 = find(&snap.functions, "f1");
    assert_eq!((f1.window_inclusive, f1.window_exclusive), (4, 4));
    let err = h
        .client
        .watch(api::WatchRequest {
            session_id: s.id,
            interval_ms: 0,
            window_s: 601,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    let err = h
        .client
        .get_histogram(api::GetHistogramRequest {
            session_id: s.id,
            module: "sleep".into(),
            offset: 0,
            scale: 0,
            buckets: 4,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    drop(target);
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_enforced_and_named() {
    let limits = profd::internals::registry::Limits {
        max_sessions: 2,
        max_sessions_per_caller: 2,
        max_stacks: 2,
        ..Default::default()
    };
    let (mut h, source) = start_with("fake-limits", limits).await;
    let mut a = sleeper();
    let mut b = sleeper();
    let s = attach(&mut h, a.id()).await;
    attach(&mut h, b.id()).await;
    let err = h
        .client
        .attach(api::AttachRequest {
            pid: a.id(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert!(
        err.message().contains("--max-sessions (2)"),
        "{}",
        err.message()
    );

    // Two unique stacks are kept; the third and fourth new ones overflow
    // into `[stack limit reached]`, known stacks still count.
    let pid = a.id();
    source.feed(&[
        (pid, &[0x100, 0x300]),
        (pid, &[0x200, 0x300]),
        (pid, &[0x400, 0x300]),
        (pid, &[0x500]),
        (pid, &[0x100, 0x300]),
    ]);
    h.client
        .stop(api::StopRequest { session_id: s.id })
        .await
        .unwrap();
    let p = h.profile(s.id).await;
    let t = p.session.as_ref().unwrap().totals.unwrap();
    assert_eq!((t.attributed, t.overflowed), (5, 2));
    let fs = &p.functions;
    assert_eq!(find(fs, "[stack limit reached]").exclusive, 2);
    assert_eq!(find(fs, "f1").exclusive, 2);
    assert_eq!(find(fs, "f3").inclusive, 3);
    assert_eq!(fs.iter().map(|f| f.exclusive).sum::<u64>(), t.attributed);

    // A stopped session frees its place.
    attach(&mut h, b.id()).await;
    a.kill();
    b.kill();
    h.finish().await;
}

/// A daemon with a state directory and the fake source.
async fn start_persisting(name: &str, state: &std::path::Path) -> (Running, Arc<FakeSource>) {
    let source = Arc::new(FakeSource::default());
    let fake = source.clone();
    let state = state.to_path_buf();
    let running = serve(name, |socket| {
        let mut config = profd::Config::new(socket);
        config.persist = Some(profd::internals::store::Persist::new(state));
        profd::Daemon::bind_with(config, fake, Arc::new(FakeSymbolizer))
    })
    .await;
    (running, source)
}

async fn list(h: &mut Running, all: bool) -> Vec<api::Session> {
    h.client
        .list_sessions(api::ListSessionsRequest { all })
        .await
        .unwrap()
        .into_inner()
        .sessions
}

/// (name, inclusive, exclusive) of every function.
fn figures(fs: &[api::Function]) -> Vec<(String, u64, u64)> {
    let mut v: Vec<_> = fs
        .iter()
        .map(|f| (f.name.clone(), f.inclusive, f.exclusive))
        .collect();
    v.sort();
    v
}

/// (name, inclusive, exclusive) of each function of `samples` (innermost
/// first), counted from scratch: each function once per sample inclusively.
fn figures_of(samples: &[&[u64]]) -> Vec<(String, u64, u64)> {
    let mut counts = std::collections::BTreeMap::new();
    for stack in samples {
        let mut names: Vec<_> = stack.iter().map(|&a| fake_frame(a).func.name).collect();
        counts.entry(names[0].clone()).or_insert((0, 0)).1 += 1;
        names.sort();
        names.dedup();
        for n in names {
            counts.entry(n).or_insert((0, 0)).0 += 1;
        }
    }
    counts.into_iter().map(|(n, (i, e))| (n, i, e)).collect()
}

/// Each view adds only the samples since the previous one to its figures,
/// which stay exact: with new functions and unnamed frames appearing
/// between views, after an export (which counts every stack itself), and
/// after more samples than the table holds stacks (counted again in full).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_view_adds_the_new_samples_and_stays_exact() {
    let (mut h, source) = start("fake-incremental").await;
    let mut target = sleeper();
    let pid = target.id();
    let s = attach(&mut h, pid).await;
    let a: &[u64] = &[0x100, 0x200, 0x300];
    let recursive: &[u64] = &[0x200, 0x210, 0x300];
    let unnamed: &[u64] = &[UNNAMED, 0x300];
    let new_leaf: &[u64] = &[0x400, 0x100, 0x300];
    let steps: [Vec<&[u64]>; 5] = [
        vec![a, a, recursive],
        vec![unnamed, a, a],
        vec![new_leaf, unnamed, recursive],
        vec![a; 1500],
        vec![recursive, new_leaf, unnamed],
    ];
    let mut fed: Vec<&[u64]> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let samples: Vec<(u32, &[u64])> = step.iter().map(|&stack| (pid, stack)).collect();
        source.feed(&samples);
        fed.extend(step);
        let p = h.profile(s.id).await;
        assert_eq!(figures(&p.functions), figures_of(&fed), "after step {i}");
        let totals = p.session.unwrap().totals.unwrap();
        let unsymbolized = fed.iter().filter(|st| st.contains(&UNNAMED)).count() as u64;
        assert_eq!(
            (totals.attributed, totals.unsymbolized),
            (fed.len() as u64, unsymbolized),
            "after step {i}"
        );
        if i == 1 {
            // A sample between a view and an export: the export counts it,
            // and the next view must not count it again.
            source.feed(&[(pid, unnamed)]);
            fed.push(unnamed);
            let export = h.export(s.id, api::ExportFormat::Folded).await;
            let totals = export.session.unwrap().totals.unwrap();
            assert_eq!(
                totals.unsymbolized,
                unsymbolized + 1,
                "the export's own count"
            );
        }
    }
    target.kill();
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_sessions_survive_a_restart() {
    let state = std::env::temp_dir().join(format!("profd-fake-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let (mut h, source) = start_persisting("fake-persist-1", &state).await;
    let mut a = sleeper();
    let mut b = sleeper();
    let first = attach(&mut h, a.id()).await;
    source.feed(&[
        (a.id(), &[0x100, 0x300]),
        (a.id(), &[0x100, 0x300]),
        (a.id(), &[0x200, 0x300]),
    ]);
    h.client
        .stop(api::StopRequest {
            session_id: first.id,
        })
        .await
        .unwrap();
    let before = h.profile(first.id).await;
    let second = attach(&mut h, b.id()).await;
    source.feed(&[(b.id(), &[0x400])]);
    // Shutdown stops the running session and returns once both are saved.
    h.finish().await;
    for id in [first.id, second.id] {
        for ext in ["session", "pprof"] {
            assert!(state.join(format!("{id}.{ext}")).is_file(), "{id}.{ext}");
        }
    }

    let (mut h, _) = start_persisting("fake-persist-2", &state).await;
    assert!(list(&mut h, false).await.is_empty(), "this run has none");
    let all = list(&mut h, true).await;
    assert_eq!(
        all.iter()
            .map(|s| (s.id, s.state, s.earlier_run))
            .collect::<Vec<_>>(),
        [
            (first.id, api::SessionState::Stopped as i32, true),
            (second.id, api::SessionState::Stopped as i32, true),
        ]
    );
    assert_eq!(all[0].totals, before.session.as_ref().unwrap().totals);
    assert_eq!(all[0].started_unix_ms, first.started_unix_ms);
    let after = h.profile(first.id).await;
    assert_eq!(figures(&after.functions), figures(&before.functions));
    assert_eq!(
        figures(&h.profile(second.id).await.functions),
        [("f4".into(), 1, 1)]
    );

    // Views, exports and Watch work; histograms are not kept.
    let tree = h
        .client
        .get_view(api::GetViewRequest {
            session_id: first.id,
            view: Some(api::get_view_request::View::Tree(
                api::TreeRequest::default(),
            )),
            query: None,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!tree.nodes.is_empty());
    let pprof = h.export(first.id, api::ExportFormat::Pprof).await;
    let decoded = profd_common::export::pprof_decode(&pprof.data).unwrap();
    assert_eq!(decoded.attributed, 3);
    let mut stream = h.watch(first.id, 100).await;
    let last = until_final(&mut stream).await;
    assert!(last.snapshot && last.r#final);
    assert_eq!(figures(&last.functions), figures(&before.functions));
    let err = h
        .client
        .get_histogram(api::GetHistogramRequest {
            session_id: first.id,
            module: "fake".into(),
            scale: 65536,
            buckets: 16,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(err.message().contains("earlier run"), "{}", err.message());
    let stopped = h
        .client
        .stop(api::StopRequest {
            session_id: first.id,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        stopped.session.unwrap().state,
        api::SessionState::Stopped as i32
    );

    // New ids continue after the stored ones.
    let third = attach(&mut h, a.id()).await;
    assert!(third.id > second.id, "{} after {}", third.id, second.id);
    a.kill();
    b.kill();
    h.finish().await;
    let _ = std::fs::remove_dir_all(&state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attaches_are_refused_once_ids_run_out() {
    use profd::internals::store::{MAX_ID, NEXT_ID_FILE};
    let state = std::env::temp_dir().join(format!("profd-fake-ids-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join(NEXT_ID_FILE), format!("{MAX_ID}\n")).unwrap();
    let (mut h, _) = start_persisting("fake-ids", &state).await;
    let mut a = sleeper();
    assert_eq!(attach(&mut h, a.id()).await.id, MAX_ID);
    let err = h
        .client
        .attach(api::AttachRequest {
            pid: a.id(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err}");
    assert!(err.message().contains("--state-dir"), "{}", err.message());
    a.kill();
    h.finish().await;
    let _ = std::fs::remove_dir_all(&state);
}

/// JIT code the perf map did not list when a view named it is named at a
/// later view, once the map lists it; the counts move to the new name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jit_addresses_are_looked_up_again_when_the_perf_map_changes() {
    let (mut h, source) = start("fake-jit").await;
    let mut target = sleeper();
    let pid = target.id();
    let map = std::path::PathBuf::from(format!("/tmp/perf-{pid}.map"));
    std::fs::write(&map, format!("{JIT:x} 10 early\n")).unwrap();
    let s = attach(&mut h, pid).await;
    let code = Mapping::new(JIT, JIT + 0x1000, 0, Backing::Special("[anon]".into()));
    source.feed_mapping(pid, code, &[JIT + 0x20, 0x100]);
    source.feed(&[(pid, &[JIT + 4, 0x100])]);
    let before = loop {
        let p = whole_profile(&h, s.id).await;
        if p.session.as_ref().unwrap().totals.unwrap().attributed == 2 {
            break p;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let unnamed = format!("fake+{:#x}", JIT + 0x20);
    assert_eq!(find(&before.functions, "early").exclusive, 1);
    assert_eq!(find(&before.functions, &unnamed).exclusive, 1);
    assert_eq!(before.session.unwrap().totals.unwrap().unsymbolized, 1);
    let unnamed_id = find(&before.functions, &unnamed).id;
    let mut stream = h.watch(s.id, 100).await;
    let snap = stream.message().await.unwrap().unwrap();
    assert_eq!(find(&snap.functions, &unnamed).inclusive, 1);
    // The runtime compiled more code and rewrote its map.
    std::fs::write(
        &map,
        format!("{JIT:x} 10 early\n{:x} 10 late\n", JIT + 0x20),
    )
    .unwrap();
    let after = whole_profile(&h, s.id).await;
    std::fs::remove_file(&map).unwrap();
    assert_eq!(find(&after.functions, "late").exclusive, 1);
    assert_eq!(find(&after.functions, "f1").inclusive, 2);
    assert!(
        after.functions.iter().all(|f| f.name != unnamed),
        "{:?}",
        after.functions
    );
    assert_eq!(after.session.unwrap().totals.unwrap().unsymbolized, 0);
    // A watcher that saw the unnamed row gets it with no samples left.
    let delta = loop {
        let m = stream.message().await.unwrap().unwrap();
        if !m.functions.is_empty() {
            break m;
        }
    };
    let gone = delta.functions.iter().find(|f| f.id == unnamed_id);
    assert_eq!(
        gone.map(|f| (f.inclusive, f.exclusive)),
        Some((0, 0)),
        "{:?}",
        delta.functions
    );
    assert_eq!(find(&delta.functions, "late").exclusive, 1);
    target.kill();
}

/// Names file addresses from [`DEBUG`] up only once a debug file has
/// arrived (its debug generation is 1); the others as [`FakeSymbolizer`].
#[derive(Default)]
struct DebugSymbolizer {
    generation: std::sync::atomic::AtomicU64,
}

const DEBUG: u64 = 0x5000_0000;

impl Symbolizer for DebugSymbolizer {
    fn symbolize(&self, maps: &ProcessMaps, addrs: &[u64]) -> Vec<Vec<Frame>> {
        let arrived = self.debug_generation() == Some(1);
        let named = FakeSymbolizer.symbolize(maps, addrs);
        addrs
            .iter()
            .zip(named)
            .map(|(&a, frames)| match (a >= DEBUG, arrived) {
                (true, true) => vec![Frame::named("from_debug", "libfake.so")],
                (true, false) => vec![Frame::unnamed(
                    format!("libfake.so+{:#x}", a - DEBUG),
                    "libfake.so",
                )],
                _ => frames,
            })
            .collect()
    }

    fn debug_generation(&self) -> Option<u64> {
        Some(self.generation.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// A file address left unnamed is named at the next view once the
/// symbolizer's debug generation rose (a debug file arrived); the samples
/// counted under the placeholder move to the function.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_addresses_are_looked_up_again_when_a_debug_file_arrives() {
    let source = Arc::new(FakeSource::default());
    let symbolizer = Arc::new(DebugSymbolizer::default());
    let (fake, sym) = (source.clone(), symbolizer.clone());
    let mut h = serve("fake-debug", |socket| {
        let config = profd::Config::new(socket);
        profd::Daemon::bind_with(config, fake, sym)
    })
    .await;
    let mut target = sleeper();
    let pid = target.id();
    let s = attach(&mut h, pid).await;
    let lib = Backing::File(Arc::new("/nonexistent/libfake.so".into()));
    source.feed_mapping(
        pid,
        Mapping::new(DEBUG, DEBUG + 0x1000, 0, lib),
        &[DEBUG + 0x20, 0x100],
    );
    source.feed(&[(pid, &[DEBUG + 0x20, 0x100])]);
    let before = loop {
        let p = whole_profile(&h, s.id).await;
        if p.session.as_ref().unwrap().totals.unwrap().attributed == 2 {
            break p;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(find(&before.functions, "libfake.so+0x20").exclusive, 2);
    assert_eq!(before.session.unwrap().totals.unwrap().unsymbolized, 2);
    symbolizer
        .generation
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let after = whole_profile(&h, s.id).await;
    assert_eq!(find(&after.functions, "from_debug").exclusive, 2);
    assert_eq!(find(&after.functions, "f1").inclusive, 2);
    assert!(
        after.functions.iter().all(|f| f.name != "libfake.so+0x20"),
        "{:?}",
        after.functions
    );
    assert_eq!(after.session.unwrap().totals.unwrap().unsymbolized, 0);
    target.kill();
}

/// Session `id`'s whole profile (GetProfile), as it is now.
async fn whole_profile(h: &Running, id: u64) -> api::GetProfileResponse {
    let mut client = h.client.clone();
    client
        .get_profile(api::GetProfileRequest {
            session_id: id,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}
