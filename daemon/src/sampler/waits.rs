//! Off-CPU time from a target's switches: the switch-out samples (the stack
//! a thread leaves the CPU with) and the switch records of every ring, put
//! in time order and paired per thread into waits, each weighted by the
//! nanoseconds until the thread ran again; in wall mode also the on-CPU
//! samples, each weighted by its thread's on-CPU time since its previous
//! sample, timed by the same switches. Rings are drained one after the
//! other, so a record may reach a drain after later records of other rings:
//! events are held until they are older than the drain's start (less a
//! margin), when no ring can still be writing an earlier one. No perf fd,
//! no sessions: events come in, weighted stacks go to a callback.
use super::batch::Mark;
use crate::sys::perf::Mode;
use profd_common::api::TimeTotals;

/// How long after its time a record may still be written to its ring:
/// events are put in order once the drain started this long after them.
pub const MARGIN_NS: u64 = 2_000_000;

/// A stack a thread left the CPU with, as the demux copied it out of the
/// ring: frames (kernel and, without stack copies, user), and with stack
/// copies the user registers and bytes to unwind.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stack {
    pub pid: u32,
    pub tid: u32,
    pub frames: Vec<u64>,
    pub user: Option<([u64; 3], Vec<u8>)>,
    /// The kernel cut the frame-pointer chain at its depth limit.
    pub truncated: bool,
}

#[derive(Debug)]
enum What {
    Out(Box<Stack>),
    /// A wall-mode on-CPU sample, with its period (the CPU time the kernel
    /// says it stands for).
    Sample(Box<Stack>, u64),
    OutRecord {
        preempted: bool,
    },
    In,
    Exit,
    Lost,
}

#[derive(Debug)]
struct Event {
    time: u64,
    /// Arrival order, for events of one time.
    seq: u64,
    tid: u32,
    what: What,
}

#[derive(Debug)]
enum Thread {
    On {
        since: u64,
    },
    Off {
        since: u64,
        preempted: bool,
        stack: Box<Stack>,
    },
    /// Records were lost while it was known: its next switch is not
    /// counted unpaired again.
    Dropped,
}

/// A wait ended (or cut at the session's end): its stack, when it began,
/// how long it lasted and what kind it was; or, marked on-CPU, a wall-mode
/// sample, its time and the on-CPU nanoseconds it stands for.
#[derive(Debug)]
pub struct Wait<'a> {
    pub stack: &'a Stack,
    pub since: u64,
    pub ns: u64,
    pub mark: Mark,
}

/// The pairing state of one group's switches, kept from drain to drain.
#[derive(Debug)]
pub struct Waits {
    mode: Mode,
    /// The ids of the switch events' samples.
    ids: foldhash::HashSet<u64>,
    held: Vec<Event>,
    seq: u64,
    threads: foldhash::HashMap<u32, Thread>,
    /// Threads whose exit was seen, with its time: a switch out after it
    /// is the thread's last, not a wait.
    exited: foldhash::HashMap<u32, u64>,
    /// Wall mode: per thread, the on-CPU nanoseconds (switch to switch) not
    /// yet given to a sample.
    unsampled: foldhash::HashMap<u32, u64>,
    /// Accounting not yet handed over.
    totals: TimeTotals,
}

impl Waits {
    /// Pairing for rings of `mode` whose switch samples carry `ids`.
    pub fn new(mode: Mode, ids: impl IntoIterator<Item = u64>) -> Waits {
        Waits {
            mode,
            ids: ids.into_iter().collect(),
            held: Vec::new(),
            seq: 0,
            threads: foldhash::HashMap::default(),
            exited: foldhash::HashMap::default(),
            unsampled: foldhash::HashMap::default(),
            totals: TimeTotals::default(),
        }
    }

    /// The sample with this id is a switch out.
    pub fn is_switch(&self, id: Option<u64>) -> bool {
        id.is_some_and(|id| self.ids.contains(&id))
    }

    /// The end at `time` of a thread's stretch on the CPU begun at `since`:
    /// on-CPU time in off-CPU mode; in wall mode, time for its next sample.
    fn ran(&mut self, tid: u32, since: u64, time: u64) {
        let ns = time.saturating_sub(since);
        if self.mode.on_cpu() {
            *self.unsampled.entry(tid).or_default() += ns;
        } else {
            self.totals.on_cpu_ns += ns;
        }
    }

    fn hold(&mut self, time: u64, tid: u32, what: What) {
        self.seq += 1;
        self.held.push(Event {
            time,
            seq: self.seq,
            tid,
            what,
        });
    }

    /// A switch-out sample of a routed thread.
    pub fn switch_out(&mut self, time: u64, stack: Stack) {
        self.hold(time, stack.tid, What::Out(Box::new(stack)));
    }

    /// A switch record of a routed thread.
    pub fn switch(&mut self, time: u64, tid: u32, out: bool, preempted: bool) {
        let what = if out {
            What::OutRecord { preempted }
        } else {
            What::In
        };
        self.hold(time, tid, what);
    }

    /// A thread's exit record.
    pub fn exit(&mut self, time: u64, tid: u32) {
        self.hold(time, tid, What::Exit);
    }

    /// The kernel lost records of the ring at `time`: the waits open then
    /// cannot be trusted to pair.
    pub fn lost(&mut self, time: u64) {
        self.hold(time, 0, What::Lost);
    }

    /// A wall-mode on-CPU sample of a routed thread, and its period.
    pub fn sample(&mut self, time: u64, stack: Stack, period: u64) {
        self.hold(time, stack.tid, What::Sample(Box::new(stack), period));
    }

    /// Pair the held events up to `upto` in time order, handing each ended
    /// wait to `emit`, and the part up to `upto` of each wait still open
    /// (the rest follows at later calls; `waits` counts it once, at its
    /// end); with `close` (the session's end, at that time) pair
    /// every event, then cut the waits still open there and forget every
    /// thread. Returns the accounting since the last call.
    pub fn settle(
        &mut self,
        upto: u64,
        close: Option<u64>,
        mut emit: impl FnMut(Wait<'_>),
    ) -> TimeTotals {
        let upto = if close.is_some() { u64::MAX } else { upto };
        self.held.sort_unstable_by_key(|e| (e.time, e.seq));
        let ready = self.held.partition_point(|e| e.time <= upto);
        let events: Vec<Event> = self.held.drain(..ready).collect();
        let mut last = 0;
        for event in events {
            last = event.time;
            self.pair(event, &mut emit);
        }
        if let Some(end) = close {
            let end = end.max(last);
            for (tid, thread) in std::mem::take(&mut self.threads) {
                match thread {
                    // In wall mode the time since its last sample has no
                    // stack: less than a period, left out.
                    Thread::On { since } => self.ran(tid, since, end),
                    Thread::Dropped => {}
                    Thread::Off {
                        since,
                        preempted,
                        stack,
                    } => {
                        self.totals.open_at_end += 1;
                        end_wait(&mut self.totals, &stack, since, end, preempted, &mut emit);
                    }
                }
            }
            self.exited.clear();
            self.unsampled.clear();
        } else {
            // Waits still open count up to here, so that live figures show
            // threads that sleep on; the rest counts as it comes.
            let totals = &mut self.totals;
            for thread in self.threads.values_mut() {
                if let Thread::Off {
                    since,
                    preempted,
                    stack,
                } = thread
                {
                    if *since < upto {
                        let ns = upto - *since;
                        totals.off_cpu_ns += ns;
                        if *preempted {
                            totals.runnable_ns += ns;
                        }
                        emit(Wait {
                            stack,
                            since: *since,
                            ns,
                            mark: mark(*preempted),
                        });
                        *since = upto;
                    }
                }
            }
            // An exit's last switch comes right after it.
            let old = upto.saturating_sub(1_000_000_000);
            self.exited.retain(|_, at| *at >= old);
        }
        std::mem::take(&mut self.totals)
    }

    fn pair(&mut self, event: Event, emit: &mut impl FnMut(Wait<'_>)) {
        let (time, tid) = (event.time, event.tid);
        match event.what {
            What::Out(stack) => {
                match self.threads.remove(&tid) {
                    Some(Thread::On { since }) => self.ran(tid, since, time),
                    // The switch in was lost: that wait cannot be timed.
                    Some(Thread::Off { .. }) => self.totals.unpaired += 1,
                    _ => {}
                }
                if self.exited.remove(&tid).is_some() {
                    return;
                }
                self.threads.insert(
                    tid,
                    Thread::Off {
                        since: time,
                        preempted: false,
                        stack,
                    },
                );
            }
            What::OutRecord { preempted } => {
                if let Some(Thread::Off {
                    since,
                    preempted: p,
                    ..
                }) = self.threads.get_mut(&tid)
                {
                    if *since <= time {
                        *p = preempted;
                    }
                }
            }
            What::In => {
                match self.threads.remove(&tid) {
                    Some(Thread::Off {
                        since,
                        preempted,
                        stack,
                    }) => end_wait(&mut self.totals, &stack, since, time, preempted, emit),
                    // Off the CPU since before the session (or its switch
                    // out was lost), or a switch in twice.
                    Some(Thread::On { .. }) | None => self.totals.unpaired += 1,
                    Some(Thread::Dropped) => {}
                }
                self.threads.insert(tid, Thread::On { since: time });
            }
            What::Sample(stack, period) => {
                // The thread's on-CPU time since its last sample, as its
                // switches time it; a thread not seen to switch yet (or
                // since records were lost) has only the kernel's period.
                let unsampled = self.unsampled.remove(&tid).unwrap_or(0);
                let ns = match self.threads.get_mut(&tid) {
                    Some(Thread::On { since }) => {
                        let ns = unsampled + time.saturating_sub(*since);
                        *since = time;
                        ns
                    }
                    Some(Thread::Off { .. }) => unsampled,
                    Some(Thread::Dropped) | None => period,
                };
                self.totals.on_cpu_ns += ns;
                emit(Wait {
                    stack: &stack,
                    since: time,
                    ns,
                    mark: Mark::OnCpu,
                });
            }
            What::Exit => {
                match self.threads.remove(&tid) {
                    Some(Thread::On { since }) => self.ran(tid, since, time),
                    // Killed while it waited: the kernel writes no switch
                    // in before the exit; the wait lasted until the exit.
                    Some(Thread::Off {
                        since,
                        preempted,
                        stack,
                    }) => end_wait(&mut self.totals, &stack, since, time, preempted, emit),
                    _ => {}
                }
                self.exited.insert(tid, time);
                self.unsampled.remove(&tid);
            }
            What::Lost => {
                let open = self
                    .threads
                    .values()
                    .filter(|t| matches!(t, Thread::Off { .. }))
                    .count();
                self.totals.unpaired += open as u64;
                for thread in self.threads.values_mut() {
                    *thread = Thread::Dropped;
                }
                self.unsampled.clear();
            }
        }
    }
}

fn mark(preempted: bool) -> Mark {
    if preempted {
        Mark::Runnable
    } else {
        Mark::Blocked
    }
}

/// A wait of `stack` from `since` ends at `end`: counted, and handed to
/// `emit`.
fn end_wait(
    totals: &mut TimeTotals,
    stack: &Stack,
    since: u64,
    end: u64,
    preempted: bool,
    emit: &mut impl FnMut(Wait<'_>),
) {
    let ns = end.saturating_sub(since);
    totals.waits += 1;
    totals.off_cpu_ns += ns;
    if preempted {
        totals.runnable_ns += ns;
    }
    emit(Wait {
        stack,
        since,
        ns,
        mark: mark(preempted),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(tid: u32, frame: u64) -> Stack {
        Stack {
            pid: 1,
            tid,
            frames: vec![frame],
            ..Stack::default()
        }
    }

    fn settle(
        waits: &mut Waits,
        upto: u64,
        close: Option<u64>,
    ) -> (Vec<(u64, u64, Mark)>, TimeTotals) {
        let mut out = Vec::new();
        let totals = waits.settle(upto, close, |w| out.push((w.stack.frames[0], w.ns, w.mark)));
        (out, totals)
    }

    /// Records of two rings come ring after ring, not in time order; a
    /// wait is its switch out's stack weighted by the time to its switch
    /// in, whichever ring held either.
    #[test]
    fn waits_are_paired_in_time_order_across_rings() {
        let mut waits = Waits::new(Mode::OffCpu, [7]);
        // Ring 1: thread 10 comes back at 300 and leaves again at 350.
        waits.switch(300, 10, false, false);
        waits.switch_out(350, stack(10, 0xb));
        waits.switch(351, 10, true, true);
        // Ring 0: it left at 100 (the record after the sample), came back
        // at 500.
        waits.switch_out(100, stack(10, 0xa));
        waits.switch(101, 10, true, false);
        waits.switch(500, 10, false, false);
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
    }

    /// A switch in without its switch out (asleep when the session began)
    /// is counted unpaired, not guessed; so are the waits open when records
    /// were lost; waits open at the end are cut there and counted.
    #[test]
    fn unpaired_switches_are_counted_and_open_waits_end_at_the_close() {
        let mut waits = Waits::new(Mode::OffCpu, [7]);
        waits.switch(50, 11, false, false);
        waits.switch_out(60, stack(11, 0xa));
        waits.switch_out(70, stack(12, 0xb));
        waits.lost(80);
        waits.switch(90, 11, false, false);
        waits.switch_out(100, stack(11, 0xc));
        let (out, t) = settle(&mut waits, 1000, Some(400));
        assert_eq!(out, [(0xc, 300, Mark::Blocked)]);
        // 11's first switch in, then 11's and 12's waits open at the loss.
        assert_eq!(t.unpaired, 3);
        assert_eq!(t.open_at_end, 1);
        assert_eq!(t.on_cpu_ns, 10 + 10);
    }

    /// A thread killed while it waits exits without a switch in: its wait
    /// lasts until its exit. Its last switch out, after the exit record, is
    /// no wait.
    #[test]
    fn a_wait_ends_at_the_exit_and_the_last_switch_is_no_wait() {
        let mut waits = Waits::new(Mode::Wall, [7]);
        waits.switch(10, 13, false, false);
        waits.exit(20, 13);
        waits.switch_out(21, stack(13, 0xa));
        waits.switch_out(30, stack(14, 0xb));
        waits.exit(70, 14);
        let (out, t) = settle(&mut waits, 100, Some(100));
        assert_eq!(out, [(0xb, 40, Mark::Blocked)]);
        // The switch in at 10 had no switch out before it.
        assert_eq!((t.open_at_end, t.unpaired, t.on_cpu_ns), (0, 1, 0));
    }

    /// Wall mode: a sample stands for its thread's on-CPU time since its
    /// previous sample, timed by the switches, so that a thread's samples
    /// and waits never cover the same time; a thread not seen to switch in
    /// yet, or since records were lost, has the kernel's period. What ran after
    /// a thread's last sample has no stack and is left out.
    #[test]
    fn wall_samples_take_the_on_cpu_time_since_the_last() {
        let mut waits = Waits::new(Mode::Wall, [7]);
        let mut out = Vec::new();
        waits.switch(100, 20, false, false);
        waits.sample(150, stack(20, 0xa), 1000);
        waits.switch_out(180, stack(20, 0xb));
        waits.switch(300, 20, false, false);
        waits.sample(320, stack(20, 0xc), 1000);
        // Thread 21 runs on, never switching: its samples' periods.
        waits.sample(330, stack(21, 0xd), 1000);
        waits.switch_out(400, stack(20, 0xe));
        waits.lost(450);
        waits.switch(500, 20, false, false);
        waits.sample(510, stack(20, 0xf), 1000);
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
                // The switch in after the loss is known again.
                (0xf, 510, 10, Mark::OnCpu),
            ]
        );
        // 320..400 had no sample after it: left out. The first switch in
        // and the wait open at the loss are unpaired.
        assert_eq!((t.on_cpu_ns, t.off_cpu_ns, t.waits), (1110, 120, 1));
        assert_eq!(t.unpaired, 2);
    }
}
