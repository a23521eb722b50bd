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

/// The speedscope export, streamed in pieces, holds only its frames table,
/// each thread's stack indices (4 bytes a stack, with the vectors' room to
/// grow) and the piece being written: never the file. Measured on this
/// thread alone, so whatever else the machine runs adds nothing (the
/// end-to-end bound in tests/tests/e2e/big_answers.rs is the daemon's
/// whole peak).
#[test]
fn the_streamed_speedscope_file_holds_its_frames_and_four_bytes_a_stack() {
    use profd_common::model::{FrameRef, FunctionInfo, ResolvedProfile, ResolvedStack};
    const STACKS: u32 = 100_000;
    const DEPTH: u32 = 24;
    const PER_LEVEL: u32 = 40;
    const PIECE: usize = 1 << 20;
    let p = ResolvedProfile {
        functions: (0..DEPTH * PER_LEVEL)
            .map(|f| FunctionInfo {
                name: format!("level_{}::function_{f}", f / PER_LEVEL),
                module: "libbig.so".into(),
                ..Default::default()
            })
            .collect(),
        stacks: (0..STACKS)
            .map(|n| ResolvedStack {
                tid: 1 + n % 8,
                frames: (0..DEPTH)
                    .map(|l| FrameRef {
                        function: l * PER_LEVEL
                            + n.wrapping_mul(2_654_435_761).rotate_left(l) % PER_LEVEL,
                        line: 0,
                        address: 0,
                    })
                    .collect(),
                count: 1 + u64::from(n % 3),
            })
            .collect(),
        attributed: (0..STACKS).map(|n| 1 + u64::from(n % 3)).sum(),
        frequency_hz: 999,
        ..Default::default()
    };
    let whole = profd_common::export::speedscope(&p).len();
    let (mut bytes, mut pieces) = (0, 0);
    let info = allocation_counter::measure(|| {
        profd_common::export::speedscope_pieces(&p, PIECE, |piece| {
            bytes += piece.len();
            pieces += 1;
            true
        });
    });
    assert_eq!(bytes, whole, "the pieces make the file");
    assert!(pieces > 1, "{pieces} pieces");
    // Frame table entries are a few dozen bytes each; stack indices 4
    // bytes, twice over for the room a growing vector keeps.
    let bound = (DEPTH * PER_LEVEL) as u64 * 128 + u64::from(STACKS) * 8 + 2 * PIECE as u64;
    eprintln!(
        "speedscope of {STACKS} stacks: {whole} bytes; held at most {} bytes while streamed (bound {bound})",
        info.bytes_max
    );
    assert!(info.bytes_max <= bound, "held {} bytes", info.bytes_max);
    assert!(
        bound < whole as u64 / 2,
        "the bound tells a whole file apart"
    );
}
