//! Ingest throughput in samples per second: one drain's worth of synthetic
//! ring bytes in profd's record layout walked, parsed, demultiplexed by
//! process (the target's samples kept, three other processes' discarded)
//! and counted into the session's stack table, whose stacks are already
//! interned (a steady state). Frame-pointer samples of 8, 32 and 128
//! frames; stack-copy samples of 8 and 16 KiB, unwound with the target's
//! DWARF unwind tables (`unwound`) or not (`copied`: zero registers, as
//! samples without user context carry, so only the copy is paid for).
//! Times are the bench thread's CPU time ([`ThreadCpu`]).
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use profd_benches::{
    capture, frame_pointer_ring, stack_copy_ring, Pipeline, Ring, ThreadCpu, COPY_DRAIN_BYTES,
    FP_DRAIN_BYTES,
};
use std::hint::black_box;

/// Benchmark draining `ring`; its target's stacks are at least `depth` deep.
fn run(
    c: &mut Criterion<ThreadCpu>,
    group: &str,
    name: &str,
    ring: &Ring,
    stack_copy: bool,
    depth: usize,
) {
    let mut pipeline = Pipeline::new(stack_copy);
    // Intern every stack first.
    for _ in 0..3 {
        pipeline.drain(ring);
    }
    let stacks = pipeline.ingest().stacks().len();
    let d = pipeline.drain(ring);
    assert_eq!((d.seen, d.matched), (ring.samples, ring.routed));
    assert_eq!(pipeline.ingest().stacks().len(), stacks, "all interned");
    let mut shallowest = None;
    pipeline.ingest().stacks().for_each(|_, s, _| {
        shallowest = Some(shallowest.map_or(s.len(), |m: usize| m.min(s.len())));
    });
    assert!(
        shallowest >= Some(depth),
        "{name}: stacks of {shallowest:?} frames"
    );
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(ring.samples));
    g.bench_function(BenchmarkId::from_parameter(name), |b| {
        b.iter(|| black_box(pipeline.drain(black_box(ring))))
    });
    g.finish();
}

fn frame_pointers(c: &mut Criterion<ThreadCpu>) {
    for frames in [8, 32, 128] {
        let ring = frame_pointer_ring(frames, FP_DRAIN_BYTES);
        run(
            c,
            "ingest/fp",
            &format!("{frames}_frames"),
            &ring,
            false,
            frames,
        );
    }
}

fn stack_copies(c: &mut Criterion<ThreadCpu>) {
    let copy = capture(16 * 1024);
    for kib in [8, 16] {
        let ring = stack_copy_ring(&copy, kib * 1024, COPY_DRAIN_BYTES);
        // The captured stack unwinds through main.
        run(
            c,
            "ingest/stack_copy",
            &format!("{kib}KiB_unwound"),
            &ring,
            true,
            6,
        );
        let zeroed = profd_benches::Captured {
            regs: [0; 3],
            ..copy.clone()
        };
        let ring = stack_copy_ring(&zeroed, kib * 1024, COPY_DRAIN_BYTES);
        run(
            c,
            "ingest/stack_copy",
            &format!("{kib}KiB_copied"),
            &ring,
            true,
            0,
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = frame_pointers, stack_copies
}
criterion_main!(benches);
