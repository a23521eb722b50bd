//! A Watch stream's delta: the functions of a 10 000-function view that a
//! client at the previous version lacks, with 1 % of them changed (half of
//! those new to the client, so sent with their names), without and with a
//! window (whose figures are compared with those last sent). Throughput is
//! functions examined. Times are the bench thread's CPU time
//! ([`ThreadCpu`]).
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use profd::internals::rpc::delta;
use profd::internals::session::FunctionTable;
use profd_benches::ThreadCpu;
use profd_common::api;
use std::collections::HashMap;
use std::hint::black_box;

const FUNCTIONS: u64 = 10_000;
/// The view's version; the client has seen the one before.
const VERSION: u64 = 50;

fn view() -> FunctionTable {
    let functions: Vec<api::Function> = (0..FUNCTIONS)
        .map(|id| api::Function {
            id,
            name: format!("module::function_{id}"),
            module: "libbench.so".into(),
            inclusive: 1_000_000 / (id + 1),
            exclusive: 1_000 / (id + 1),
            window_inclusive: 100_000 / (id + 1),
            window_exclusive: 100 / (id + 1),
            ..Default::default()
        })
        .collect();
    // Every 100th function changed at this version; every 200th is new.
    let stamps = (0..FUNCTIONS)
        .map(|id| match id % 200 {
            0 => (VERSION, VERSION),
            100 => (VERSION, 1),
            _ => (VERSION - 10, 1),
        })
        .collect();
    FunctionTable {
        session: api::Session::default(),
        functions,
        window_attributed: 0,
        version: VERSION,
        stamps,
        emptied: Vec::new(),
    }
}

fn watch_delta(c: &mut Criterion<ThreadCpu>) {
    let view = view();
    let mut g = c.benchmark_group("watch_delta");
    g.throughput(Throughput::Elements(FUNCTIONS));
    g.bench_function(
        BenchmarkId::from_parameter("10000_functions_1pct_changed"),
        |b| {
            let mut sent = HashMap::new();
            b.iter(|| black_box(delta(black_box(&view), VERSION - 1, false, &mut sent)))
        },
    );
    g.bench_function(
        BenchmarkId::from_parameter("10000_functions_1pct_changed_windowed"),
        |b| {
            // The window figures were sent before: only changed functions go.
            let mut sent = HashMap::new();
            delta(&view, 0, true, &mut sent);
            b.iter(|| black_box(delta(black_box(&view), VERSION - 1, true, &mut sent)))
        },
    );
    let d = delta(&view, VERSION - 1, false, &mut HashMap::new());
    assert_eq!(d.len(), (FUNCTIONS / 100) as usize, "1 % changed");
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = watch_delta
}
criterion_main!(benches);
