//! The ingest path (ring bytes → parse → demultiplex → the session's stack
//! table) allocates nothing per sample once the stacks it sees are
//! interned: batches come back to the ring that filled them, and repeated
//! stacks are looked up, not copied. Counted with a counting global
//! allocator (allocation-counter), on this thread.
use profd_benches::{
    capture, frame_pointer_ring, stack_copy_ring, Pipeline, Ring, COPY_DRAIN_BYTES, FP_DRAIN_BYTES,
};

/// Samples counted into the table while allocations are counted.
const SAMPLES: u64 = 100_000;

/// Drain `ring` until `SAMPLES` of the target's samples are counted, after
/// three drains that intern its stacks; returns (allocations, samples).
fn steady_state_allocations(ring: &Ring, stack_copy: bool) -> (u64, u64) {
    let mut pipeline = Pipeline::new(stack_copy);
    for _ in 0..3 {
        pipeline.drain(ring);
    }
    let stacks = pipeline.ingest().stacks().len();
    let attributed = pipeline.ingest().totals().attributed;
    let drains = SAMPLES.div_ceil(ring.routed);
    let info = allocation_counter::measure(|| {
        for _ in 0..drains {
            pipeline.drain(ring);
        }
    });
    let samples = pipeline.ingest().totals().attributed - attributed;
    assert_eq!(samples, drains * ring.routed, "every target sample counted");
    assert_eq!(pipeline.ingest().stacks().len(), stacks, "no new stack");
    (info.count_total, samples)
}

#[test]
fn frame_pointer_samples_of_interned_stacks_allocate_nothing() {
    let ring = frame_pointer_ring(32, FP_DRAIN_BYTES);
    let (allocations, samples) = steady_state_allocations(&ring, false);
    assert!(
        allocations < samples / 1000,
        "{allocations} allocations for {samples} samples"
    );
}

#[test]
fn unwound_stack_copies_of_interned_stacks_allocate_nothing() {
    let copy = capture(16 * 1024);
    let ring = stack_copy_ring(&copy, 8 * 1024, COPY_DRAIN_BYTES);
    let (allocations, samples) = steady_state_allocations(&ring, true);
    assert!(
        allocations < samples / 1000,
        "{allocations} allocations for {samples} samples"
    );
}
