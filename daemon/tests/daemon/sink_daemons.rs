//! The Pyroscope and OTLP sinks through running `profd --continuous`
//! daemons (the built binary, on the real kernel), into the in-test
//! receivers of `pyroscope.rs` and `otlp.rs`, over two restarts and a
//! refusal; what the receivers took is compared with the daemon's own
//! history, window by window and service by service. Root needed.
//!
//! What a restart may send twice, from the delivery loop
//! (`continuous/sinks/deliver.rs`): a window leaves the spool only once its
//! send returned Ok; a stop ends the send under way and keeps the window
//! spooled, and the requests of it already taken (Pyroscope's `done`) are
//! remembered in memory only. So the window being sent when the daemon
//! stopped is sent whole again after the restart: at most one window per
//! sink per restart arrives twice, and no other window more than once.

use super::otlp::{Answer, Collector};
use super::pyroscope::{parse_name, Receiver};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use profd_common::api::{self, profiler_client::ProfilerClient};
use profd_e2e::cgroups::Cgroup;
use profd_e2e::{build_workload, path_str, require_root_and_perf, serial, unique_dir};
use profd_e2e::{Daemon, Workload};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::runtime::Runtime;

/// A window's part as both sides name it: its start and end (Unix ns) and
/// a service.
pub(crate) type Slot = (u64, u64, String);

/// How long a step may take on a loaded machine (the sinks back off up
/// to 30 s between tries): a deadline only turns a hang into a failure.
pub(crate) const STEP: Duration = Duration::from_secs(120);

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

async fn client(socket: &Path) -> ProfilerClient<tonic::transport::Channel> {
    let channel = profctl::requests::connect::unix_channel(socket, None)
        .await
        .expect("connect to profd");
    ProfilerClient::new(channel)
}

/// The daemon's `Info`.
pub(crate) fn info(rt: &Runtime, d: &Daemon) -> api::InfoResponse {
    rt.block_on(async {
        let mut c = client(d.socket()).await;
        c.info(api::InfoRequest {})
            .await
            .expect("Info")
            .into_inner()
    })
}

/// The daemon's whole history (`ListWindows` over every time).
pub(crate) fn history(rt: &Runtime, d: &Daemon) -> api::ListWindowsResponse {
    rt.block_on(async {
        let mut c = client(d.socket()).await;
        c.list_windows(api::ListWindowsRequest::default())
            .await
            .expect("ListWindows")
            .into_inner()
    })
}

/// Polls `ready` on the daemon's only sink until it holds; the sink then.
pub(crate) fn sink_until(
    rt: &Runtime,
    d: &Daemon,
    what: &str,
    ready: impl Fn(&api::SinkStatus) -> bool,
) -> api::SinkStatus {
    let deadline = Instant::now() + STEP;
    loop {
        let sink = info(rt, d).sinks.swap_remove(0);
        if ready(&sink) {
            return sink;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {STEP:?}: {sink:?}\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A daemon continuous at 99 Hz in windows of 1 s over `cg`, with one
/// sink of `kind` to `url` (and the entry's `extra` lines).
pub(crate) fn daemon(cg: &Cgroup, kind: &str, url: &str, extra: &str, args: &[&str]) -> Daemon {
    let config = unique_dir("sink-daemon").join("profd.toml");
    std::fs::write(
        &config,
        format!(
            "[continuous]\nenabled = true\nfrequency = 99\nwindow = 1\nselect = [\"cgroup:{}\"]\n\n\
             [[sink]]\nkind = \"{kind}\"\nname = \"{kind}\"\nurl = \"{url}\"\n{extra}",
            cg.path()
        ),
    )
    .unwrap();
    let mut all = vec!["--config", path_str(&config)];
    all.extend_from_slice(args);
    Daemon::start_with(&all)
}

/// The split workload in `cg` until dropped.
pub(crate) fn workload(cg: &Cgroup) -> Workload {
    let mut cmd = cg.command(build_workload("split"));
    cmd.args(["600", "--ready"]);
    Workload::start_command(cmd, "split")
}

/// A receiver as the tests drive it.
trait Backend {
    fn refuse(&self);
    fn accept(&self);
    /// Requests refused so far.
    fn refused(&mut self) -> usize;
    /// Every slot taken so far, with its samples, once per time taken.
    fn taken(&mut self) -> Vec<(Slot, u64)>;
}

struct Pyro {
    r: Receiver,
    /// Every request got so far (the receiver hands them over once).
    got: Vec<super::pyroscope::Received>,
}

impl Pyro {
    fn pull(&mut self) {
        self.got.extend(self.r.take());
    }
}

impl Backend for Pyro {
    fn refuse(&self) {
        self.r.answer(&[503; 100_000]);
    }
    fn accept(&self) {
        self.r.accept();
    }
    fn refused(&mut self) -> usize {
        self.pull();
        self.got.iter().filter(|g| g.status != 200).count()
    }
    fn taken(&mut self) -> Vec<(Slot, u64)> {
        self.pull();
        let mut out = Vec::new();
        for g in self.got.iter().filter(|g| g.status == 200) {
            let q = |k: &str| {
                g.query
                    .iter()
                    .find(|(n, _)| n == k)
                    .map(|(_, v)| v.clone())
                    .unwrap()
            };
            let (_, labels) = parse_name(&q("name")).unwrap();
            let slot = (
                q("from").parse().unwrap(),
                q("until").parse().unwrap(),
                labels["service_name"].clone(),
            );
            let mut pprof = Vec::new();
            flate2::read::GzDecoder::new(&g.body[..])
                .read_to_end(&mut pprof)
                .expect("a gzip'd body");
            let p: profd_common::pprof_proto::Profile =
                prost::Message::decode(&pprof[..]).expect("a pprof profile");
            out.push((slot, p.sample.iter().map(|s| s.value[0] as u64).sum()));
        }
        out
    }
}

impl Backend for Collector {
    fn refuse(&self) {
        self.answer(Answer::Fail(tonic::Code::Unavailable));
    }
    fn accept(&self) {
        self.answer(Answer::Ok(0));
    }
    fn refused(&mut self) -> usize {
        self.got.lock().unwrap().iter().filter(|g| !g.taken).count()
    }
    fn taken(&mut self) -> Vec<(Slot, u64)> {
        let mut out = Vec::new();
        for g in self.got.lock().unwrap().iter().filter(|g| g.taken) {
            for rp in &g.request.resource_profiles {
                let service = rp
                    .resource
                    .as_ref()
                    .unwrap()
                    .attributes
                    .iter()
                    .find(|a| a.key == "service.name")
                    .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                        Value::StringValue(s) => Some(s.clone()),
                        _ => None,
                    })
                    .expect("service.name");
                for p in rp.scope_profiles.iter().flat_map(|s| &s.profiles) {
                    let slot = (
                        p.time_unix_nano,
                        p.time_unix_nano + p.duration_nano,
                        service.clone(),
                    );
                    out.push((slot, p.samples.iter().map(|s| s.values[0] as u64).sum()));
                }
            }
        }
        out
    }
}

/// Every window of the history: its slots and their samples.
fn kept(rt: &Runtime, d: &Daemon) -> BTreeMap<Slot, u64> {
    let h = history(rt, d);
    assert_eq!(h.windows_left_out, 0, "the whole history is listed");
    let mut out = BTreeMap::new();
    for w in &h.windows {
        for s in &w.services {
            out.insert(
                (w.start_unix_ns, w.end_unix_ns, s.service.clone()),
                s.samples,
            );
        }
    }
    out
}

/// Windows are delivered, the daemon is restarted while they are, the
/// backend refuses for a while (windows wait in the spool) and the daemon
/// is restarted again meanwhile; once it takes them again, every window
/// of the history has reached the backend with its samples, and at most
/// one window per restart more than once.
fn through_restarts_and_a_refusal(kind: &str, url: &str, backend: &mut dyn Backend, rt: &Runtime) {
    let cg = Cgroup::new(&format!("profd-sink-{kind}-{}", std::process::id()));
    let mut d = daemon(&cg, kind, url, "", &[]);
    let w = workload(&cg);
    sink_until(rt, &d, "two windows delivered", |s| s.windows_sent >= 2);
    d.restart();
    sink_until(rt, &d, "two windows delivered after a restart", |s| {
        s.windows_sent >= 2
    });
    backend.refuse();
    let waiting = sink_until(rt, &d, "three windows waiting while refused", |s| {
        s.spool_windows >= 3 && s.retries >= 1
    });
    assert!(!waiting.last_error.is_empty(), "{waiting:?}");
    assert!(waiting.drops.is_empty(), "{waiting:?}");
    // The spooled windows wait on disk across a restart.
    d.restart();
    let again = sink_until(rt, &d, "windows still waiting after a restart", |s| {
        s.spool_windows >= waiting.spool_windows && s.retries >= 1
    });
    assert_eq!(again.windows_sent, 0, "{again:?}");
    backend.accept();
    drop(w);
    let ended = now_ns();
    let deadline = Instant::now() + STEP;
    while history(rt, &d).cut_until_unix_ns < ended {
        assert!(
            Instant::now() < deadline,
            "no window cut past the workload's end"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let sink = sink_until(rt, &d, "the spool emptied", |s| s.spool_windows == 0);
    assert!(sink.drops.is_empty(), "nothing dropped: {sink:?}");
    let want = kept(rt, &d);
    // The three that waited, and windows delivered before and between.
    assert!(want.len() >= 5, "{want:?}");
    let taken = backend.taken();
    let mut got: BTreeMap<Slot, Vec<u64>> = BTreeMap::new();
    for (slot, samples) in taken {
        got.entry(slot).or_default().push(samples);
    }
    let missing: Vec<&Slot> = want.keys().filter(|k| !got.contains_key(k)).collect();
    assert!(missing.is_empty(), "windows never taken: {missing:?}");
    let unknown: Vec<&Slot> = got.keys().filter(|k| !want.contains_key(k)).collect();
    assert!(unknown.is_empty(), "taken, not in the history: {unknown:?}");
    for (slot, samples) in &got {
        assert!(
            samples.iter().all(|n| *n == want[slot]),
            "{slot:?}: taken with {samples:?} samples, the history has {}",
            want[slot]
        );
    }
    let twice: Vec<(&Slot, usize)> = got
        .iter()
        .filter(|(_, s)| s.len() > 1)
        .map(|(k, s)| (k, s.len()))
        .collect();
    let windows_twice: std::collections::BTreeSet<(u64, u64)> =
        twice.iter().map(|((a, b, _), _)| (*a, *b)).collect();
    assert!(
        twice.iter().all(|(_, n)| *n == 2) && windows_twice.len() <= 2,
        "at most one window per restart (2) taken twice: {twice:?}"
    );
    let refused = backend.refused();
    assert!(refused >= 1, "the backend refused while told to");
    eprintln!(
        "{kind}: {} windows × services in the history, each taken; {} windows taken twice; {refused} refusals",
        want.len(),
        windows_twice.len(),
    );
}

#[test]
fn pyroscope_takes_every_window_over_restarts_and_a_refusal() {
    let _serial = serial();
    require_root_and_perf();
    let rt = Runtime::new().unwrap();
    let r = rt.block_on(Receiver::start());
    let url = r.url();
    let mut b = Pyro { r, got: Vec::new() };
    through_restarts_and_a_refusal("pyroscope", &url, &mut b, &rt);
}

#[test]
fn otlp_takes_every_window_over_restarts_and_a_refusal() {
    let _serial = serial();
    require_root_and_perf();
    let rt = Runtime::new().unwrap();
    let mut c = rt.block_on(Collector::start(Answer::Ok(0)));
    let url = c.url.clone();
    through_restarts_and_a_refusal("otlp", &url, &mut c, &rt);
}
