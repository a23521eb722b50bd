//! The OTLP profiles sink at the protocol: an in-test collector (tonic's
//! `ProfilesService` of the same `opentelemetry-proto` crate) on loopback
//! takes the export, and the request is checked exactly (path, metadata)
//! and decoded with the crate's types against the window it came from.
use opentelemetry_proto::tonic::collector::profiles::v1development::{
    profiles_service_server::{ProfilesService, ProfilesServiceServer},
    ExportProfilesPartialSuccess, ExportProfilesServiceRequest, ExportProfilesServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use profd::internals::continuous::encode;
use profd::internals::sinks::{
    Auth, Failure, Otlp, OtlpConfig, Secret, SinkEntry, SinkKind, Sinks,
};
use profd_common::api;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use tonic::codegen::http;
use tonic::metadata::MetadataMap;

/// What the collector answers.
#[derive(Clone, Copy)]
pub(crate) enum Answer {
    /// Success, with this many profiles rejected in a partial success.
    Ok(i64),
    Fail(tonic::Code),
}

/// One export the collector got.
pub(crate) struct Got {
    pub(crate) metadata: MetadataMap,
    pub(crate) request: ExportProfilesServiceRequest,
    /// Whether it was answered with success.
    pub(crate) taken: bool,
}

#[derive(Clone)]
struct Receiver {
    got: Arc<Mutex<Vec<Got>>>,
    answer: Arc<Mutex<Answer>>,
}

#[tonic::async_trait]
impl ProfilesService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportProfilesServiceRequest>,
    ) -> Result<tonic::Response<ExportProfilesServiceResponse>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        let answer = *self.answer.lock().unwrap();
        self.got.lock().unwrap().push(Got {
            metadata,
            request,
            taken: matches!(answer, Answer::Ok(_)),
        });
        match answer {
            Answer::Ok(0) => Ok(tonic::Response::new(
                ExportProfilesServiceResponse::default(),
            )),
            Answer::Ok(rejected) => Ok(tonic::Response::new(ExportProfilesServiceResponse {
                partial_success: Some(ExportProfilesPartialSuccess {
                    rejected_profiles: rejected,
                    error_message: "profile too old".into(),
                }),
            })),
            Answer::Fail(code) => Err(tonic::Status::new(code, "told to fail")),
        }
    }
}

/// An in-test collector on a loopback port, stopped when dropped.
pub(crate) struct Collector {
    pub(crate) url: String,
    pub(crate) got: Arc<Mutex<Vec<Got>>>,
    answer: Arc<Mutex<Answer>>,
    /// The HTTP/2 paths requests came to.
    paths: Arc<Mutex<Vec<String>>>,
    stop: Option<oneshot::Sender<()>>,
}

impl Collector {
    pub(crate) async fn start(answer: Answer) -> Collector {
        Collector::serve(answer, None).await
    }

    /// Answer `answer` from now on.
    pub(crate) fn answer(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }

    /// With `tls` (certificate and key PEM), over TLS as `https://localhost`.
    pub(crate) async fn serve(answer: Answer, tls: Option<(String, String)>) -> Collector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let url = match tls {
            Some(_) => format!("https://localhost:{port}"),
            None => format!("http://127.0.0.1:{port}"),
        };
        let got = Arc::new(Mutex::new(Vec::new()));
        let paths = Arc::new(Mutex::new(Vec::new()));
        let seen = paths.clone();
        let record =
            tower::ServiceBuilder::new().map_request(move |r: http::Request<tonic::body::Body>| {
                seen.lock().unwrap().push(r.uri().path().to_string());
                r
            });
        let (stop, stopped) = oneshot::channel::<()>();
        let answer = Arc::new(Mutex::new(answer));
        let receiver = Receiver {
            got: got.clone(),
            answer: answer.clone(),
        };
        let mut server = tonic::transport::Server::builder();
        if let Some((cert, key)) = tls {
            let identity = tonic::transport::Identity::from_pem(cert, key);
            server = server
                .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
                .unwrap();
        }
        tokio::spawn(
            server
                .layer(record)
                .add_service(ProfilesServiceServer::new(receiver))
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    async {
                        let _ = stopped.await;
                    },
                ),
        );
        Collector {
            url,
            got,
            answer,
            paths,
            stop: Some(stop),
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Credential files of a test, removed when dropped.
struct Files(PathBuf);

impl Files {
    fn new(name: &str) -> Files {
        let dir = std::env::temp_dir().join(format!("profd-otlp-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Files(dir)
    }

    fn secret(&self, name: &str, text: &str) -> Secret {
        let path = self.0.join(name);
        std::fs::write(&path, format!("{text}\n")).unwrap();
        Secret::read(&path).unwrap()
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config(url: &str, files: &Files) -> OtlpConfig {
    OtlpConfig {
        url: url.into(),
        auth: Auth::Bearer(files.secret("token", "t0ken")),
        headers: vec![("X-Scope-OrgID".into(), files.secret("tenant", "tenant-1"))],
        timeout: Duration::from_secs(20),
        ca: None,
    }
}

/// A window of two services as the continuous profiler cuts them: several
/// processes and threads, recursion, an inlined function, and the same
/// stack on two threads.
fn window() -> api::Window {
    let f = |name: &str, module: &str, inlined: bool| api::WindowFunction {
        name: name.into(),
        module: module.into(),
        file: format!("/src/{name}.c"),
        inlined,
        ..Default::default()
    };
    let stack = |tid, function: Vec<u32>, address: Vec<u64>, count| api::WindowStack {
        tid,
        line: (1..=function.len() as u32).collect(),
        function,
        address,
        count,
    };
    let process = |pid, comm: &str| api::WindowProcess {
        pid,
        comm: comm.into(),
        executable: format!("/usr/bin/{comm}"),
        build_id: format!("{pid:040x}"),
        cgroup: "/system.slice/x.service".into(),
        ..Default::default()
    };
    let thread = |tid, pid, name: &str| api::WindowThread {
        tid,
        pid,
        name: name.into(),
        samples: 0,
    };
    let web = api::ServiceWindow {
        totals: None,
        service: "web.service".into(),
        source: api::ServiceSource::Unit as i32,
        samples: 0,
        processes: vec![process(100, "web"), process(200, "web")],
        threads: vec![
            thread(100, 100, "web"),
            thread(101, 100, "worker-1"),
            thread(200, 200, "web"),
        ],
        functions: vec![
            f("memcpy", "libc.so.6", false),
            f("parse_inline", "web", true),
            f("handle", "web", false),
            f("recurse", "web", false),
            f("main", "web", false),
        ],
        stacks: vec![
            // memcpy ← parse_inline (inlined into handle) ← handle ← main
            stack(
                100,
                vec![0, 1, 2, 4],
                vec![0x7f00, 0x4010, 0x4010, 0x4100],
                7,
            ),
            stack(
                101,
                vec![3, 3, 3, 4],
                vec![0x4200, 0x4210, 0x4210, 0x4100],
                5,
            ),
            stack(
                101,
                vec![0, 1, 2, 4],
                vec![0x7f00, 0x4010, 0x4010, 0x4100],
                2,
            ),
            stack(200, vec![2, 4], vec![0x4011, 0x4100], 4),
            stack(200, vec![4], vec![0x4101], 1),
        ],
    };
    let db = api::ServiceWindow {
        totals: None,
        service: "db.service".into(),
        source: api::ServiceSource::Unit as i32,
        samples: 0,
        processes: vec![process(300, "db")],
        threads: vec![thread(300, 300, "db"), thread(301, 300, "flush")],
        functions: vec![
            f("write", "libc.so.6", false),
            f("flush", "db", false),
            f("main", "db", false),
        ],
        stacks: vec![
            stack(300, vec![2], vec![0x5000], 3),
            stack(301, vec![0, 1, 2], vec![0x7f10, 0x5100, 0x5000], 6),
        ],
    };
    let mut services = vec![web, db];
    for s in &mut services {
        s.samples = s.stacks.iter().map(|t| t.count).sum();
        for t in &mut s.threads {
            t.samples = s
                .stacks
                .iter()
                .filter(|k| k.tid == t.tid)
                .map(|k| k.count)
                .sum();
        }
        for p in &mut s.processes {
            let tids: Vec<u32> = s
                .threads
                .iter()
                .filter(|t| t.pid == p.pid)
                .map(|t| t.tid)
                .collect();
            p.samples = s
                .stacks
                .iter()
                .filter(|k| tids.contains(&k.tid))
                .map(|k| k.count)
                .sum();
        }
    }
    let attributed = services.iter().map(|s| s.samples).sum();
    api::Window {
        id: "5f0c2d9a4e1b47c68a3f9e2d1c0b7a65".into(),
        start_unix_ns: 1_700_000_000_000_000_000,
        end_unix_ns: 1_700_000_010_000_000_000,
        host: "web-1".into(),
        kernel_release: "6.1.0-test".into(),
        frequency_hz: 99,
        event: api::Event::CpuClock as i32,
        totals: Some(api::Totals {
            attributed,
            discarded: 4,
            ..Default::default()
        }),
        services,
        ..Default::default()
    }
}

/// A sample as the test compares it: frames innermost first, pid, tid and
/// thread name.
type Key = (Vec<String>, i64, i64, String);

/// Per service, the window's samples by key.
fn expected(w: &api::Window) -> BTreeMap<String, BTreeMap<Key, i64>> {
    let mut out: BTreeMap<String, BTreeMap<Key, i64>> = BTreeMap::new();
    for s in &w.services {
        let per = out.entry(s.service.clone()).or_default();
        for k in &s.stacks {
            let t = s.threads.iter().find(|t| t.tid == k.tid).unwrap();
            let frames = k
                .function
                .iter()
                .map(|&f| s.functions[f as usize].name.clone())
                .collect();
            *per.entry((frames, t.pid.into(), t.tid.into(), t.name.clone()))
                .or_default() += k.count as i64;
        }
    }
    out
}

/// Per service, the request's samples by key, read through its dictionary
/// (samples of stacks that differ only in addresses or lines added up).
fn decoded(r: &ExportProfilesServiceRequest) -> BTreeMap<String, BTreeMap<Key, i64>> {
    let d = r.dictionary.as_ref().expect("a dictionary");
    let text = |i: i32| d.string_table[i as usize].clone();
    let mut out: BTreeMap<String, BTreeMap<Key, i64>> = BTreeMap::new();
    for rp in &r.resource_profiles {
        let resource = rp.resource.as_ref().unwrap();
        let attr = |k: &str| {
            resource
                .attributes
                .iter()
                .find(|a| a.key == k)
                .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                    Value::StringValue(s) => Some(s.clone()),
                    _ => None,
                })
        };
        assert_eq!(attr("host.name").as_deref(), Some("web-1"));
        assert_eq!(attr("os.version").as_deref(), Some("6.1.0-test"));
        let service = attr("service.name").expect("service.name");
        assert_eq!(rp.scope_profiles.len(), 1);
        assert_eq!(rp.scope_profiles[0].scope.as_ref().unwrap().name, "profd");
        let per = out.entry(service).or_default();
        for p in &rp.scope_profiles[0].profiles {
            assert_eq!(p.time_unix_nano, 1_700_000_000_000_000_000);
            assert_eq!(p.duration_nano, 10_000_000_000);
            assert_eq!(p.period, 1_000_000_000 / 99);
            let st = p.sample_type.unwrap();
            assert_eq!(
                (text(st.type_strindex), text(st.unit_strindex)),
                ("samples".into(), "count".into())
            );
            for s in &p.samples {
                assert_eq!(s.values.len(), 1);
                assert!(s.timestamps_unix_nano.is_empty());
                let frames = d.stack_table[s.stack_index as usize]
                    .location_indices
                    .iter()
                    .flat_map(|&l| &d.location_table[l as usize].lines)
                    .map(|l| text(d.function_table[l.function_index as usize].name_strindex))
                    .collect();
                let (mut pid, mut tid, mut name) = (-1, -1, String::new());
                for &a in &s.attribute_indices {
                    let a = &d.attribute_table[a as usize];
                    match (
                        text(a.key_strindex).as_str(),
                        a.value.as_ref().unwrap().value.as_ref(),
                    ) {
                        ("process.pid", Some(Value::IntValue(v))) => pid = *v,
                        ("thread.id", Some(Value::IntValue(v))) => tid = *v,
                        ("thread.name", Some(Value::StringValue(v))) => name = v.clone(),
                        _ => {}
                    }
                }
                *per.entry((frames, pid, tid, name)).or_default() += s.values[0];
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_arrives_as_a_profile_per_service_with_its_metadata() {
    let collector = Collector::start(Answer::Ok(0)).await;
    let files = Files::new("ok");
    let otlp = Otlp::new(config(&collector.url, &files)).unwrap();
    let w = window();
    let sent = otlp.send(&w).await.unwrap();
    assert_eq!(sent.requests, 1);
    assert_eq!((sent.split, sent.rejected), (0, 0));
    let got = collector.got.lock().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(
        *collector.paths.lock().unwrap(),
        ["/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"]
    );
    let md = &got[0].metadata;
    assert_eq!(md.get("authorization").unwrap(), "Bearer t0ken");
    assert_eq!(md.get("x-scope-orgid").unwrap(), "tenant-1");
    assert_eq!(md.get("content-type").unwrap(), "application/grpc");
    let r = &got[0].request;
    assert_eq!(sent.bytes, prost::Message::encoded_len(r) as u64);
    assert_eq!(r.resource_profiles.len(), 2);
    let (want, have) = (expected(&w), decoded(r));
    assert_eq!(have, want);
    // A sample per unique stack and thread: none repeats another.
    let samples: usize = r
        .resource_profiles
        .iter()
        .map(|p| p.scope_profiles[0].profiles[0].samples.len())
        .sum();
    assert_eq!(samples, want.values().map(|s| s.len()).sum::<usize>());
    // The recursion and the inlined frame are there as the window has them.
    assert!(have["web.service"].contains_key(&(
        vec![
            "recurse".into(),
            "recurse".into(),
            "recurse".into(),
            "main".into()
        ],
        100,
        101,
        "worker-1".into()
    )));
    assert_eq!(
        have["web.service"][&(
            vec![
                "memcpy".into(),
                "parse_inline".into(),
                "handle".into(),
                "main".into()
            ],
            100,
            100,
            "web".into()
        )],
        7
    );
    let total: i64 = have.values().flat_map(|s| s.values()).sum();
    assert_eq!(total as u64, w.totals.unwrap().attributed);
    for s in &w.services {
        assert_eq!(have[&s.service].values().sum::<i64>() as u64, s.samples);
    }
    // What was sent is `request`, the pure form.
    assert_eq!(*r, profd::internals::sinks::otlp_request(&w));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_answers_retry_drop_or_count_rejections() {
    let files = Files::new("answers");
    let w = window();
    let unavailable = Collector::start(Answer::Fail(tonic::Code::Unavailable)).await;
    let otlp = Otlp::new(config(&unavailable.url, &files)).unwrap();
    match otlp.send(&w).await {
        Err(Failure::Retry(why)) => assert!(why.contains("told to fail"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(unavailable.got.lock().unwrap().len(), 1);

    let invalid = Collector::start(Answer::Fail(tonic::Code::InvalidArgument)).await;
    let otlp = Otlp::new(config(&invalid.url, &files)).unwrap();
    match otlp.send(&w).await {
        Err(Failure::Drop { reason, detail }) => {
            assert_eq!(reason.to_string(), "grpc_invalid_argument");
            assert!(detail.contains("told to fail"), "{detail}");
        }
        other => panic!("{other:?}"),
    }

    let partial = Collector::start(Answer::Ok(1)).await;
    let otlp = Otlp::new(config(&partial.url, &files)).unwrap();
    let sent = otlp.send(&w).await.unwrap();
    assert_eq!((sent.requests, sent.rejected), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_collector_listening_is_retried() {
    // A port that was free a moment ago, with nothing on it now.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let files = Files::new("down");
    let otlp = Otlp::new(config(&format!("http://127.0.0.1:{port}"), &files)).unwrap();
    match otlp.send(&window()).await {
        Err(Failure::Retry(why)) => assert!(why.contains("connect"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// A window bigger than a gRPC server's default 4 MiB message arrives in
/// parts the server takes (tonic's receiver keeps that default), holding
/// every sample once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_window_arrives_in_parts_within_the_default_limit() {
    let collector = Collector::start(Answer::Ok(0)).await;
    let files = Files::new("big");
    let otlp = Otlp::new(config(&collector.url, &files)).unwrap();
    let mut w = window();
    let web = &mut w.services[0];
    let functions = web.functions.len() as u32;
    for i in 0..60_000u64 {
        let depth = 8;
        web.stacks.push(api::WindowStack {
            tid: 100,
            function: (0..depth).map(|k| (i as u32 + k) % functions).collect(),
            line: (0..depth).map(|k| 10 + k).collect(),
            address: (0..depth as u64).map(|k| 0x10_0000 + i * 64 + k).collect(),
            count: 1 + i % 3,
        });
    }
    web.samples = web.stacks.iter().map(|s| s.count).sum();
    let attributed: u64 = w.services.iter().map(|s| s.samples).sum();
    let whole = prost::Message::encoded_len(&profd::internals::sinks::otlp_request(&w));
    assert!(whole > 4 << 20, "the window is {whole} bytes");
    let sent = otlp.send(&w).await.unwrap();
    let got = collector.got.lock().unwrap();
    assert!(got.len() >= 2, "{} requests", got.len());
    assert_eq!(sent.requests, got.len() as u64);
    assert_eq!(sent.split, got.len() as u64 - 1);
    let mut total = 0;
    for g in got.iter() {
        assert!(prost::Message::encoded_len(&g.request) <= 4 << 20);
        total += decoded(&g.request)
            .values()
            .flat_map(|s| s.values())
            .sum::<i64>();
    }
    assert_eq!(total as u64, attributed);
}

/// A CA and a server certificate it signed for `localhost`: (CA PEM,
/// certificate PEM, key PEM).
pub(crate) fn certificates() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca_pem, cert.pem(), key.serialize_pem())
}

/// Over TLS (rustls), the collector's certificate is checked against the
/// CA file given: with it the window arrives, without it the system's
/// roots do not know the collector and the send is retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_trusts_the_ca_file() {
    let (ca, cert, key) = certificates();
    let collector = Collector::serve(Answer::Ok(0), Some((cert, key))).await;
    let files = Files::new("tls");
    let ca_file = files.0.join("ca.pem");
    std::fs::write(&ca_file, ca).unwrap();
    let trusting = Otlp::new(OtlpConfig {
        ca: Some(ca_file),
        ..config(&collector.url, &files)
    })
    .unwrap();
    let sent = trusting.send(&window()).await.unwrap();
    assert_eq!(sent.requests, 1);
    {
        let got = collector.got.lock().unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].metadata.get("authorization").unwrap(),
            "Bearer t0ken"
        );
    }

    let strange = Otlp::new(config(&collector.url, &files)).unwrap();
    match strange.send(&window()).await {
        Err(Failure::Retry(why)) => assert!(why.contains("certificate"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(collector.got.lock().unwrap().len(), 1);
}

/// A `[[sink]]` entry of kind otlp, through the spool: its token file and
/// headers become the call's metadata, the collector is checked with an
/// empty Export first, and the window goes once, counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_otlp_sink_entry_delivers_through_the_spool() {
    let collector = Collector::start(Answer::Ok(0)).await;
    let files = Files::new("entry");
    let token = files.0.join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let SinkEntry::Otlp(mut otlp) = SinkEntry::new(SinkKind::Otlp, "otel", &collector.url) else {
        unreachable!("an otlp entry")
    };
    otlp.token_file = Some(token);
    otlp.headers
        .insert("x-scope-orgid".into(), "tenant-9".into());
    let entry = SinkEntry::Otlp(otlp);
    let sinks = Sinks::start(vec![entry.settings().unwrap()], None)
        .await
        .unwrap();
    let w = window();
    let gz = encode(w.clone()).unwrap().gz;
    sinks.offer(&w, &gz);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let r = loop {
        let r = sinks.reports().remove(0);
        if r.counts.windows_sent == 1 || std::time::Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(r.counts.windows_sent, 1, "{r:?}");
    assert_eq!(r.spool.windows, 0);
    assert_eq!(r.note, "OTLP profiles v1.10.0 over gRPC, experimental");
    let got = collector.got.lock().unwrap();
    // The probe's empty Export, then the window's.
    assert_eq!(got.len(), 2);
    assert!(got[0].request.resource_profiles.is_empty());
    for g in got.iter() {
        assert_eq!(g.metadata.get("authorization").unwrap(), "Bearer s3cret");
        assert_eq!(g.metadata.get("x-scope-orgid").unwrap(), "tenant-9");
    }
    assert_eq!(decoded(&got[1].request), expected(&w));
    assert!(!format!("{r:?}").contains("s3cret"));
    sinks.stop();
}
