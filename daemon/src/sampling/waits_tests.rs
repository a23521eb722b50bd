//! Unit tests of the pairing of switches into waits (`waits.rs`): time
//! order across rings, the switch from one thread straight to another,
//! unpaired switches, exits, the session's end, wall-mode samples, and
//! records lost.
use super::super::gaps::HOLD_NS;
use super::*;
use Switch::{Blocked, In, Preempted};

fn stack(tid: u32, frame: u64) -> Stack {
    Stack {
        time: 0,
        pid: 1,
        tid,
        frames: vec![frame],
        ..Stack::default()
    }
}

fn settle(waits: &mut Waits, upto: u64, close: Option<u64>) -> (Vec<(u64, u64, Mark)>, TimeTotals) {
    let mut out = Vec::new();
    let totals = waits.settle(upto, close, |w| out.push((w.stack.frames[0], w.ns, w.mark)));
    (out, totals)
}

/// The time not known per thread since the last call, by thread.
fn by_thread(waits: &mut Waits) -> Vec<(u32, u64)> {
    let mut by: Vec<_> = waits.take_unknown().collect();
    by.sort_unstable();
    by
}

/// Records of two rings come ring after ring, not in time order; a
/// wait is its switch out's stack weighted by the time to its switch
/// in, whichever ring held either.
#[test]
fn waits_are_paired_in_time_order_across_rings() {
    let mut waits = Waits::new(Mode::OffCpu, 2, [7]);
    // Ring 1: thread 10 comes back at 300 and leaves again at 350.
    waits.switch(1, 300, 10, In);
    waits.switch_out(1, 350, stack(10, 0xb));
    waits.switch(1, 351, 10, Preempted);
    // Ring 0: it left at 100 (the record after the sample), came back
    // at 500.
    waits.switch_out(0, 100, stack(10, 0xa));
    waits.switch(0, 101, 10, Blocked);
    waits.switch(0, 500, 10, In);
    // Events after 400 wait for a later drain; the wait open at 400
    // counts up to there.
    let (out, t) = settle(&mut waits, 400, None);
    assert_eq!(out, [(0xa, 200, Mark::Blocked), (0xb, 50, Mark::Runnable)]);
    assert_eq!(
        (t.waits, t.off_cpu_ns, t.on_cpu_ns, t.unpaired),
        (1, 250, 50, 0)
    );
    let (out, t) = settle(&mut waits, 1000, None);
    assert_eq!(out, [(0xb, 100, Mark::Runnable)]);
    assert_eq!((t.waits, t.off_cpu_ns, t.runnable_ns), (1, 100, 100));
    assert_eq!(t.unknown_ns, 0, "nothing was lost");
}

/// A switch from one thread straight to another on a CPU (the second's
/// switch in right after the first's switch-out record) is the second's
/// time from where the first's wait began: the kernel charges it the
/// switch, with the sample and records written there. When longer than
/// [`SWITCH_NS`] passed between them another task ran: the wait ends at
/// the switch in.
#[test]
fn a_switch_straight_to_another_thread_is_the_next_thread_s_time() {
    let mut waits = Waits::new(Mode::OffCpu, 2, [7]);
    waits.switch(0, 0, 1, In);
    waits.switch(1, 0, 2, In);
    waits.switch_out(1, 5, stack(2, 0xa));
    waits.switch(1, 6, 2, Blocked);
    // On ring 0, thread 1 leaves at 100 (its record at 103), thread 2
    // comes in at 104.
    waits.switch_out(0, 100, stack(1, 0xb));
    waits.switch(0, 103, 1, Blocked);
    waits.switch(0, 104, 2, In);
    // Thread 2 leaves at 200, another task runs, thread 1 comes in.
    waits.switch_out(0, 200, stack(2, 0xc));
    waits.switch(0, 202, 2, Blocked);
    let back = 202 + SWITCH_NS + 1;
    waits.switch(0, back, 1, In);
    // A switch in on ring 1 after ring 0's switch out is no switch
    // between them.
    waits.switch_out(0, back + 100, stack(1, 0xd));
    waits.switch(0, back + 101, 1, Blocked);
    waits.switch(1, back + 102, 2, In);
    let (out, t) = settle(&mut waits, u64::MAX, Some(back + 200));
    assert_eq!(
        out,
        [
            (0xa, 100 - 5, Mark::Blocked),
            (0xb, back - 100, Mark::Blocked),
            (0xc, back + 102 - 200, Mark::Blocked),
            (0xd, 100, Mark::Blocked)
        ]
    );
    // Thread 1: 0..100, back..back+100; thread 2: 0..5, 100..200,
    // back+102..back+200.
    assert_eq!(t.on_cpu_ns, 100 + 100 + 5 + 100 + 98);
    assert_eq!(t.unpaired, 2, "the two threads' first switch in");
    assert_eq!(t.open_at_end, 1);
}

/// A switch in without its switch out (asleep when the session began)
/// is counted unpaired, not guessed; so are the waits open when records
/// were lost, and their time from the loss on is unknown; waits open at
/// the end are cut there and counted.
#[test]
fn unpaired_switches_are_counted_and_open_waits_end_at_the_close() {
    let mut waits = Waits::new(Mode::OffCpu, 1, [7]);
    waits.switch(0, 50, 11, In);
    waits.switch_out(0, 60, stack(11, 0xa));
    waits.switch_out(0, 70, stack(12, 0xb));
    // Records after 70 were lost; the LOST record comes at 80.
    waits.lost(0, 80);
    waits.switch(0, 90, 11, In);
    waits.switch_out(0, 100, stack(11, 0xc));
    let (out, t) = settle(&mut waits, 1000, Some(400));
    assert_eq!(out, [(0xa, 10, Mark::Blocked), (0xc, 300, Mark::Blocked)]);
    // 11's first switch in, then 11's and 12's waits open at the loss.
    assert_eq!(t.unpaired, 3);
    assert_eq!(t.open_at_end, 1);
    assert_eq!(t.on_cpu_ns, 10 + 10);
    // 11: 70..90; 12: from 70 to the end.
    assert_eq!(t.unknown_ns, 20 + 330);
    assert_eq!(by_thread(&mut waits), [(11, 20), (12, 330)]);
}

/// A thread killed while it waits exits without a switch in: its wait
/// lasts until its exit. Its last switch out, after the exit record, is
/// no wait.
#[test]
fn a_wait_ends_at_the_exit_and_the_last_switch_is_no_wait() {
    let mut waits = Waits::new(Mode::Wall, 1, [7]);
    waits.switch(0, 10, 13, In);
    waits.exit(0, 20, 13);
    waits.switch_out(0, 21, stack(13, 0xa));
    waits.switch_out(0, 30, stack(14, 0xb));
    waits.exit(0, 70, 14);
    let (out, t) = settle(&mut waits, 100, Some(100));
    assert_eq!(out, [(0xb, 40, Mark::Blocked)]);
    // The switch in at 10 had no switch out before it.
    assert_eq!((t.open_at_end, t.unpaired, t.on_cpu_ns), (0, 1, 0));
}

/// Records lost on a ring leave a gap no time is given across. Two
/// threads take turns on CPU 0, a third runs on CPU 1. Ring 0 is full
/// when read: nothing after its last record is paired, and the open
/// wait counts only up to it, until the next read tells whether records
/// were lost. They were: from that record to the LOST record, every
/// thread that was off the CPU, or on CPU 0, may have run there unseen.
/// Each is counted up to the gap and not known until its next record;
/// the thread on CPU 1 stays known until it leaves its CPU while the gap
/// lasts. Per thread, on + off + unknown is its lifetime.
#[test]
fn a_lost_gap_is_not_attributed() {
    let mut waits = Waits::new(Mode::OffCpu, 2, [7]);
    // First drain: ring 0 full after its record at 302.
    waits.switch(0, 100, 1, In);
    waits.switch_out(0, 200, stack(1, 0xa));
    waits.switch(0, 201, 1, Blocked);
    waits.switch(0, 202, 2, In);
    waits.switch_out(0, 300, stack(2, 0xb));
    waits.switch(0, 301, 2, Blocked);
    waits.switch(0, 302, 1, In);
    waits.ring_read(0, true, 1000);
    waits.switch(1, 50, 3, In);
    waits.ring_read(1, false, 1000);
    let (out, t) = settle(&mut waits, 1000, None);
    // 1's wait ends where 2's began (a switch straight to it); 2's wait
    // is counted up to the last record of the full ring, not to 1000.
    assert_eq!(out, [(0xa, 100, Mark::Blocked), (0xb, 2, Mark::Blocked)]);
    assert_eq!(
        (t.off_cpu_ns, t.on_cpu_ns, t.unknown_ns),
        (102, 100 + 98, 0)
    );

    // Second drain: ring 0's first record is a LOST record at 5000. On
    // ring 1, thread 3 leaves its CPU at 4000 and comes back at 4500.
    waits.lost(0, 5000);
    waits.switch(0, 5000, 2, In);
    waits.ring_read(0, false, 6000);
    waits.switch_out(1, 4000, stack(3, 0xc));
    waits.switch(1, 4001, 3, Blocked);
    waits.switch(1, 4500, 3, In);
    waits.ring_read(1, false, 6000);
    let (out, t2) = settle(&mut waits, 6000, Some(6000));
    assert_eq!(out, [], "no wait is timed across the gap");
    let mut t = t;
    t += t2;
    // Thread 1: on 100..200 and 300..302; off 200..300; unknown from
    // the gap (302) to the end. Thread 2: on 202..300 and 5000..6000;
    // off 300..302; unknown 302..5000. Thread 3: on 50..4000 and
    // 4500..6000; unknown 4000..4500 (it left its CPU during the gap).
    assert_eq!(
        by_thread(&mut waits),
        [(1, 6000 - 302), (2, 5000 - 302), (3, 500)]
    );
    assert_eq!(t.off_cpu_ns, 100 + 2);
    assert_eq!(t.on_cpu_ns, 100 + 2 + 98 + 1000 + 3950 + 1500);
    let lived = (6000 - 100) + (6000 - 202) + (6000 - 50);
    assert_eq!(t.on_cpu_ns + t.off_cpu_ns + t.unknown_ns, lived);
    // Thread 2's wait cut by the gap, thread 3's wait begun in it, and
    // the first switch in of each thread.
    assert_eq!(t.unpaired, 2 + 3);
}

/// A ring still full when the session ends may have lost records with no
/// LOST record yet: from its last record to the end, the threads it may
/// hold are not known.
#[test]
fn a_ring_full_at_the_end_leaves_its_threads_unknown() {
    let mut waits = Waits::new(Mode::OffCpu, 1, [7]);
    waits.switch(0, 100, 1, In);
    waits.switch_out(0, 200, stack(1, 0xa));
    waits.switch(0, 201, 1, Blocked);
    waits.ring_read(0, true, 900);
    let (out, t) = settle(&mut waits, 900, Some(1000));
    assert_eq!(out, [(0xa, 1, Mark::Blocked)]);
    assert_eq!((t.on_cpu_ns, t.off_cpu_ns, t.unknown_ns), (100, 1, 799));
    assert_eq!(t.open_at_end, 0, "not known to be open");
}

/// A ring that may be missing records, and that nothing writes to any
/// more (its LOST record does not come), holds the pairing back for
/// [`HOLD_NS`] at most: then its span is counted as a gap, and pairing
/// goes on.
#[test]
fn a_ring_that_stays_silent_holds_the_pairing_back_for_a_while_only() {
    let mut waits = Waits::new(Mode::OffCpu, 2, [7]);
    waits.switch(0, 100, 1, In);
    waits.switch_out(0, 200, stack(1, 0xa));
    waits.ring_read(0, true, 1000);
    waits.switch(1, 500, 1, In);
    waits.ring_read(1, false, 1000);
    let (out, t) = settle(&mut waits, 1000, None);
    assert_eq!(
        (out.len(), t.off_cpu_ns),
        (0, 0),
        "held at ring 0's last record"
    );
    let later = 200 + HOLD_NS + 1;
    waits.ring_read(0, true, later);
    waits.ring_read(1, false, later);
    let (out, t) = settle(&mut waits, later, None);
    // Thread 1 waited from 200 and came in on ring 1 at 500, which ring
    // 0's missing records may contradict: not known.
    assert!(out.is_empty(), "{out:?}");
    assert_eq!((t.unknown_ns, t.unpaired), (300, 1));
    // Then it runs on, known: the pairing is no longer held.
    waits.switch_out(1, later + 10, stack(1, 0xb));
    waits.switch(1, later + 20, 1, In);
    waits.ring_read(0, false, later + 100);
    waits.ring_read(1, false, later + 100);
    let (out, _) = settle(&mut waits, later + 100, None);
    assert_eq!(out, [(0xb, 10, Mark::Blocked)]);
}

/// Wall mode: a sample stands for its thread's on-CPU time since its
/// previous sample, timed by the switches, so that a thread's samples
/// and waits never cover the same time; a thread not seen to switch in
/// yet has the kernel's period, and is on the CPU from there. What ran
/// after a thread's last sample has no stack and is left out. Across a
/// loss, the on-CPU time before it no sample took is unknown, and so is
/// the time up to the thread's next record.
#[test]
fn wall_samples_take_the_on_cpu_time_since_the_last() {
    let mut waits = Waits::new(Mode::Wall, 1, [7]);
    let mut out = Vec::new();
    waits.switch(0, 100, 20, In);
    waits.sample(0, 150, stack(20, 0xa), 1000);
    waits.switch_out(0, 180, stack(20, 0xb));
    waits.switch(0, 300, 20, In);
    waits.sample(0, 320, stack(20, 0xc), 1000);
    // Thread 21 runs on, never switching: its samples' periods.
    waits.sample(0, 330, stack(21, 0xd), 1000);
    waits.switch_out(0, 400, stack(20, 0xe));
    waits.switch(0, 401, 20, Blocked);
    waits.lost(0, 450);
    waits.switch(0, 500, 20, In);
    waits.sample(0, 510, stack(20, 0xf), 1000);
    waits.sample(0, 520, stack(21, 0x10), 1000);
    let t = waits.settle(1000, Some(600), |w| {
        out.push((w.stack.frames[0], w.since, w.ns, w.mark))
    });
    assert_eq!(
        out,
        [
            (0xa, 150, 50, Mark::OnCpu),
            (0xb, 180, 120, Mark::Blocked),
            (0xc, 320, 30 + 20, Mark::OnCpu),
            (0xd, 330, 1000, Mark::OnCpu),
            // 20's wait up to the loss after its switch-out record.
            (0xe, 400, 1, Mark::Blocked),
            // The switch in after the loss is known again.
            (0xf, 510, 10, Mark::OnCpu),
        ]
    );
    // 20: 320..400 had no sample before the loss (at 401): unknown, as
    // is 401..500. 21, seen running on the CPU whose records were lost:
    // 330..401 had no sample, and 401..520 is not known; its sample at
    // 520 stands for nothing known. 510..600 and 520..600 had no sample
    // after them: left out.
    assert_eq!((t.on_cpu_ns, t.off_cpu_ns, t.waits), (1110, 121, 1));
    assert_eq!(by_thread(&mut waits), [(20, 80 + 99), (21, 71 + 119)]);
    assert_eq!(t.unpaired, 2);
}

/// Threads waiting when the session began (read from /proc) wait from
/// there: one that never switches is counted up to the session's end, one
/// that comes in ends its wait there and is paired as usual after it; a
/// record before the start (the events opened a moment earlier) ends the
/// wait at nothing; a thread with a record already keeps its own state.
#[test]
fn threads_waiting_at_the_start_wait_from_it() {
    let mut waits = Waits::new(Mode::OffCpu, 1, [7]);
    let at_start = |tid, frame| Stack {
        time: 100,
        ..stack(tid, frame)
    };
    waits.waiting_at_start(false, at_start(10, 0xa));
    waits.waiting_at_start(true, at_start(11, 0xb));
    waits.waiting_at_start(false, at_start(12, 0xc));
    // Thread 11 comes in at 400, leaves at 450 and comes back at 500;
    // thread 12 switched in at 90, before the start was read.
    waits.switch(0, 90, 12, In);
    waits.switch(0, 400, 11, In);
    waits.switch_out(0, 450, stack(11, 0xd));
    waits.switch(0, 451, 11, Blocked);
    waits.switch(0, 500, 11, In);
    let (mut out, t) = settle(&mut waits, 1000, Some(1000));
    out.sort_unstable_by_key(|&(frame, ns, _)| (frame, ns));
    assert_eq!(
        out,
        [
            (0xa, 900, Mark::Blocked),
            (0xb, 300, Mark::Runnable),
            (0xc, 0, Mark::Blocked),
            (0xd, 50, Mark::Blocked),
        ]
    );
    assert_eq!((t.waits, t.open_at_end, t.unpaired), (4, 1, 0));
    assert_eq!(t.off_cpu_ns, 900 + 300 + 50);
    // Thread 11 ran 400..450 and 500..1000, thread 12 from 90.
    assert_eq!(t.on_cpu_ns, 50 + 500 + 910);
}
