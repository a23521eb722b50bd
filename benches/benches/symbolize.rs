//! Naming stack addresses. `miss`: addresses a session has not named yet
//! (in this benchmark's binary and libc) through the real symbolizer
//! (blazesym, with its parsed-file caches warm, as for a binary the session
//! has named addresses of before), per address, in wall-clock time since
//! the symbolizer works on a thread of its own. `hit`: a view of a live
//! session whose stacks' addresses are all named already, so each address
//! is found in the session's cache and none goes to the symbolizer: per
//! address occurrence (stacks × frames), in the bench thread's CPU time
//! ([`ThreadCpu`]; the session's task runs on it).
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use profd::internals::maps::ProcessMaps;
use profd::internals::perf::{EventKind, EventSpec, PerfError};
use profd::internals::sampler::{
    Batch, Children, Counters, Flush, SampleSource, Subscriber, Subscription,
};
use profd::internals::session::{self, Params};
use profd::internals::symbolize::{BlazeSymbolizer, Symbolizer};
use profd::internals::sys::PidFd;
use profd::internals::unwind::Unwinder;
use profd_benches::{capture, ThreadCpu};
use profd_common::kernel::KernelFrames;
use std::hint::black_box;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Unique stacks of the session in `hit`, and their depth.
const STACKS: usize = 2_000;
const DEPTH: usize = 32;

/// Real code addresses of this process: the frames of its own stack, and
/// addresses spread over its executable file mappings (this binary, libc).
fn addresses(maps: &ProcessMaps) -> Vec<u64> {
    let mut unwinder = Unwinder::default();
    for m in maps.iter() {
        unwinder.add_mapping(m);
    }
    let copy = capture(16 * 1024);
    let [ip, sp, bp] = copy.regs;
    let mut addrs = Vec::new();
    unwinder.unwind(ip, sp, bp, &copy.stack, &mut addrs);
    let here = addresses as fn(&ProcessMaps) -> Vec<u64> as usize as u64;
    for m in maps.iter().filter(|m| m.file().is_some()) {
        let spread = if (m.start..m.end).contains(&here) {
            64
        } else if m.module().starts_with("libc.so") {
            32
        } else {
            continue;
        };
        let step = (m.end - m.start) / spread;
        addrs.extend((0..spread).map(|i| m.start + i * step + 0x11));
    }
    addrs
}

fn miss(c: &mut Criterion<WallTime>) {
    let maps = ProcessMaps::read(std::process::id()).expect("own /proc/self/maps");
    let addrs = addresses(&maps);
    let symbolizer = BlazeSymbolizer::default();
    let named = symbolizer.symbolize(&maps, &addrs);
    assert!(
        named.iter().filter(|f| f.iter().all(|f| f.named)).count() > addrs.len() / 2,
        "most addresses are named"
    );
    eprintln!("symbolize/miss: {} addresses", addrs.len());
    let mut g = c.benchmark_group("symbolize");
    g.throughput(Throughput::Elements(addrs.len() as u64));
    g.bench_function(BenchmarkId::new("miss", "bench_binary_and_libc"), |b| {
        b.iter(|| black_box(symbolizer.symbolize(&maps, black_box(&addrs))))
    });
    g.finish();
}

/// Hands the session the batches the benchmark makes.
#[derive(Default)]
struct Source {
    counters: Counters,
    sessions: Mutex<Vec<mpsc::UnboundedSender<Batch>>>,
}

#[tonic::async_trait]
impl SampleSource for Source {
    async fn subscribe(
        &self,
        want: EventSpec,
        _session: Subscriber,
        _pid: u32,
        _children: Children,
        tx: mpsc::UnboundedSender<Batch>,
    ) -> Result<Subscription, PerfError> {
        self.sessions.lock().expect("lock").push(tx);
        Ok(Subscription {
            since: profd::internals::sampler::monotonic_ns(),
            spec: want,
            tops: None,
        })
    }
    async fn unsubscribe(&self, _: EventSpec, _: Subscriber) {}
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

fn hit(c: &mut Criterion<ThreadCpu>) {
    let pid = std::process::id();
    let maps = ProcessMaps::read(pid).expect("own /proc/self/maps");
    let addrs = addresses(&maps);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let source = Arc::new(Source::default());
    let params = Params {
        pid,
        comm: "bench".into(),
        duration: None,
        owner_uid: 0,
        owner: "root".into(),
        max_stacks: STACKS * 2,
        recheck: None,
        children: false,
        timeline: false,
        stats: Arc::default(),
    };
    let want = EventSpec {
        held: false,
        mode: Default::default(),
        session: 0,
        kind: EventKind::CpuClock,
        frequency_hz: 999,
        ring_pages: profd::internals::sampler::RING_PAGES,
        stack_bytes: 0,
        target: None,
    };
    let handle = rt.block_on(async {
        let pidfd = PidFd::open(pid).expect("own pidfd");
        let symbolizer: Arc<dyn Symbolizer> = Arc::new(BlazeSymbolizer::default());
        session::start(1, params, want, pidfd, source.clone(), symbolizer)
            .await
            .expect("a session")
    });
    // Stacks of the real addresses, each sampled once.
    let mut batch = Batch::default();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..STACKS {
        let frames = (0..DEPTH).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            addrs[(x % addrs.len() as u64) as usize]
        });
        batch.push(pid, pid, frames, None);
    }
    batch.seen = STACKS as u64;
    for tx in source.sessions.lock().expect("lock").iter() {
        tx.send(std::mem::take(&mut batch))
            .expect("the session is running");
    }
    // The first view after the batch is counted names every address.
    let counted = (0..1000).find_map(|_| {
        let view = rt
            .block_on(handle.profile(0, KernelFrames::Full))
            .expect("a view");
        let totals = view.session.totals.expect("totals");
        (totals.attributed == STACKS as u64).then_some(view)
    });
    let view = counted.expect("the batch is counted");
    assert!(
        view.functions.len() > 10,
        "{} functions",
        view.functions.len()
    );
    let mut g = c.benchmark_group("symbolize");
    g.throughput(Throughput::Elements((STACKS * DEPTH) as u64));
    let name = format!("{STACKS}_stacks_of_{DEPTH}_frames");
    g.bench_function(BenchmarkId::new("hit", name), |b| {
        b.iter(|| {
            black_box(
                rt.block_on(handle.profile(0, KernelFrames::Full))
                    .expect("a view"),
            )
        })
    });
    g.finish();
    rt.block_on(handle.stop()).expect("stopped");
}

criterion_group!(misses, miss);
criterion_group! {
    name = hits;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = hit
}
criterion_main!(misses, hits);
