//! DWARF unwinding of one user stack copy, as a session does per sample: a
//! real stack of this process (registers and 16 KiB above the stack
//! pointer, captured as PERF_SAMPLE_REGS_USER and PERF_SAMPLE_STACK_USER
//! would hold them) walked with its own executable mappings' unwind tables,
//! the framehop rule cache warm. Times are the bench thread's CPU time
//! ([`ThreadCpu`]).
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use profd::internals::maps::ProcessMaps;
use profd::internals::unwind::{Unwinder, Walk};
use profd_benches::{capture, ThreadCpu};
use std::hint::black_box;

fn unwind(c: &mut Criterion<ThreadCpu>) {
    let maps = ProcessMaps::read(std::process::id()).expect("own /proc/self/maps");
    let mut unwinder = Unwinder::default();
    for m in maps.iter() {
        unwinder.add_mapping(m);
    }
    let copy = capture(16 * 1024);
    let [ip, sp, bp] = copy.regs;
    let mut frames = Vec::with_capacity(256);
    let walk = unwinder.unwind(ip, sp, bp, &copy.stack, &mut frames);
    assert!(
        matches!(walk, Walk::Complete { .. }),
        "the captured stack unwinds to main: {frames:x?}"
    );
    eprintln!("unwind: the captured stack has {} frames", frames.len());
    let mut g = c.benchmark_group("unwind");
    g.throughput(Throughput::Elements(1));
    g.bench_function("real_stack_16KiB", |b| {
        b.iter(|| {
            frames.clear();
            black_box(unwinder.unwind(ip, sp, bp, black_box(&copy.stack), &mut frames))
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = unwind
}
criterion_main!(benches);
