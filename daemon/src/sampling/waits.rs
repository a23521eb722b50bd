//! Off-CPU time from a target's switches: the switch-out samples (the stack
//! a thread leaves the CPU with) and the switch records of every ring, put
//! in time order and paired per thread into waits, each weighted by the
//! nanoseconds until the thread ran again; in wall mode also the on-CPU
//! samples, each weighted by its thread's on-CPU time since its previous
//! sample, timed by the same switches. Rings are drained one after the
//! other, so a record may reach a drain after later records of other rings:
//! events are held until they are older than the drain's start (less a
//! margin), when no ring can still be writing an earlier one. Where a ring
//! lost records, no time is given across the gap: from its start to each
//! thread's next record, the thread's time is unknown. No perf fd, no
//! sessions: events come in, weighted stacks go to a callback.
use super::batch::Mark;
use super::gaps::Reads;
use crate::os::perf::Mode;
use profd_common::api::TimeTotals;

/// How long after its time a record may still be written to its ring:
/// events are put in order once the drain started this long after them.
pub const MARGIN_NS: u64 = 2_000_000;

/// The longest a switch from one thread straight to another takes on one
/// CPU, from the first's switch-out record to the second's switch-in
/// record (a few microseconds; tens on a loaded machine). A longer interval
/// between them means another task, not profiled, ran in between.
pub const SWITCH_NS: u64 = 20_000;

/// The stack of a thread that was waiting when the session began where
/// `/proc` could not say where: named `[off-cpu: waiting since before the
/// session, stack unknown]`.
pub const UNKNOWN_STACK_FRAME: u64 = u64::MAX - 6;

/// A stack a thread left the CPU with, as the demux copied it out of the
/// ring: frames (kernel and, without stack copies, user), and with stack
/// copies the user registers and bytes to unwind.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stack {
    pub pid: u32,
    pub tid: u32,
    /// When it was sampled (the switch out, for a wait).
    pub time: u64,
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
    /// Records of the event's ring may be missing from here...
    GapStart,
    /// ...up to here (its LOST record).
    GapEnd,
}

#[derive(Debug)]
struct Event {
    time: u64,
    /// Arrival order, for events of one time.
    seq: u64,
    /// The ring it came from (its index in the group).
    ring: usize,
    tid: u32,
    what: What,
}

#[derive(Debug)]
enum Thread {
    /// On the CPU of `ring` since `since`.
    On { since: u64, ring: usize },
    Off {
        since: u64,
        preempted: bool,
        stack: Box<Stack>,
    },
    /// Records it may have had were lost from `since`: what it did up to
    /// its next record is not known.
    Unknown { since: u64 },
}

/// A ring as its events are paired, in time order.
#[derive(Debug, Default, Clone, Copy)]
struct Ring {
    /// Its last event was a switch-out record: (thread, the record's time,
    /// when the thread's wait began).
    out: Option<(u32, u64, u64)>,
    /// Records of it are missing now.
    gap: bool,
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
    /// Per ring (by index), as read and as paired.
    reads: Reads,
    rings: Vec<Ring>,
    /// Rings whose records are missing at the time paired up to.
    gaps: usize,
    /// Events are paired up to here.
    done: u64,
    /// Accounting not yet handed over: totals, and per thread the time
    /// not known.
    totals: TimeTotals,
    unknown_by: foldhash::HashMap<u32, u64>,
}

impl Waits {
    /// Pairing for the `rings` rings of `mode` whose switch samples carry
    /// `ids`.
    pub fn new(mode: Mode, rings: usize, ids: impl IntoIterator<Item = u64>) -> Waits {
        Waits {
            mode,
            ids: ids.into_iter().collect(),
            held: Vec::new(),
            seq: 0,
            threads: foldhash::HashMap::default(),
            exited: foldhash::HashMap::default(),
            unsampled: foldhash::HashMap::default(),
            reads: Reads::new(rings),
            rings: vec![Ring::default(); rings],
            gaps: 0,
            done: 0,
            totals: TimeTotals::default(),
            unknown_by: foldhash::HashMap::default(),
        }
    }

    /// Per thread, the nanoseconds not known (`TimeTotals::unknown_ns`)
    /// since the last call.
    pub fn take_unknown(&mut self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.unknown_by.drain()
    }

    /// Thread `stack.tid` was off the CPU (runnable if `preempted`) at
    /// `stack.time`, the session's start, with `stack`: its wait is counted
    /// from there, to its next switch in, or to the session's end if it
    /// never comes. A thread with a record already is left as it is.
    pub fn waiting_at_start(&mut self, preempted: bool, stack: Stack) {
        self.threads.entry(stack.tid).or_insert(Thread::Off {
            since: stack.time,
            preempted,
            stack: Box::new(stack),
        });
    }

    /// The sample with this id is a switch out.
    pub fn is_switch(&self, id: Option<u64>) -> bool {
        id.is_some_and(|id| self.ids.contains(&id))
    }

    /// A record of `ring` of this time was read (any record: the ring is
    /// complete up to it).
    pub fn read(&mut self, ring: usize, time: u64) {
        self.reads.read(ring, time);
    }

    /// `ring` was read up to its head; `missing`: records after the last
    /// one read may be missing. See [`Reads::ring_read`].
    pub fn ring_read(&mut self, ring: usize, missing: bool, upto: u64) {
        if let Some(gap) = self.reads.ring_read(ring, missing, upto, self.done) {
            self.gap(ring, gap);
        }
    }

    /// The kernel lost records of `ring` before its LOST record at `time`:
    /// since the ring was last known complete, no record of it can be
    /// trusted to be there.
    pub fn lost(&mut self, ring: usize, time: u64) {
        if let Some(gap) = self.reads.lost(ring, time, self.done) {
            self.gap(ring, gap);
        }
    }

    /// Records of `ring` are missing from `start` to `end`.
    fn gap(&mut self, ring: usize, (start, end): (u64, u64)) {
        self.hold(start, ring, 0, What::GapStart);
        self.hold(end, ring, 0, What::GapEnd);
    }

    /// A switch-out sample of a routed thread.
    pub fn switch_out(&mut self, ring: usize, time: u64, stack: Stack) {
        self.hold(time, ring, stack.tid, What::Out(Box::new(stack)));
    }

    /// A switch record of a routed thread.
    pub fn switch(&mut self, ring: usize, time: u64, tid: u32, switch: Switch) {
        let what = match switch {
            Switch::In => What::In,
            Switch::Preempted => What::OutRecord { preempted: true },
            Switch::Blocked => What::OutRecord { preempted: false },
        };
        self.hold(time, ring, tid, what);
    }

    /// A thread's exit record.
    pub fn exit(&mut self, ring: usize, time: u64, tid: u32) {
        self.hold(time, ring, tid, What::Exit);
    }

    /// A wall-mode on-CPU sample of a routed thread, and its period.
    pub fn sample(&mut self, ring: usize, time: u64, stack: Stack, period: u64) {
        self.hold(time, ring, stack.tid, What::Sample(Box::new(stack), period));
    }

    fn hold(&mut self, time: u64, ring: usize, tid: u32, what: What) {
        if !matches!(what, What::GapStart) {
            self.read(ring, time);
        }
        self.seq += 1;
        self.held.push(Event {
            time,
            seq: self.seq,
            ring,
            tid,
            what,
        });
    }

    /// Pair the held events up to `upto` (or less: see [`Reads::horizon`])
    /// in time order, handing each ended wait to `emit`, and the part up to
    /// there of each wait still open (the rest follows at later calls;
    /// `waits` counts it once, at its end); with `close` (the session's
    /// end, at that time) pair every event, then cut the waits still open
    /// there and forget every thread. Returns the accounting since the last
    /// call.
    pub fn settle(
        &mut self,
        upto: u64,
        close: Option<u64>,
        mut emit: impl FnMut(Wait<'_>),
    ) -> TimeTotals {
        let upto = if close.is_some() {
            // Records after a ring's last one read may be missing, with no
            // LOST record to come: from there its threads are not known.
            let missing: Vec<_> = self.reads.missing(self.done).collect();
            for (ring, start) in missing {
                self.hold(start, ring, 0, What::GapStart);
            }
            u64::MAX
        } else {
            self.reads.horizon(upto, self.done)
        };
        self.held.sort_unstable_by_key(|e| (e.time, e.seq));
        let ready = self.held.partition_point(|e| e.time <= upto);
        let events: Vec<Event> = self.held.drain(..ready).collect();
        let mut last = self.done;
        for event in events {
            last = last.max(event.time);
            self.pair(event, &mut emit);
        }
        if let Some(end) = close {
            self.close(end.max(last), &mut emit);
        } else {
            self.count_open(upto, &mut emit);
            self.done = self.done.max(upto);
            // An exit's last switch comes right after it.
            let old = upto.saturating_sub(1_000_000_000);
            self.exited.retain(|_, at| *at >= old);
        }
        std::mem::take(&mut self.totals)
    }

    /// The session's end at `end`: cut every thread's time there.
    fn close(&mut self, end: u64, emit: &mut impl FnMut(Wait<'_>)) {
        for (tid, thread) in std::mem::take(&mut self.threads) {
            match thread {
                // In wall mode the time since its last sample has no
                // stack: less than a period, left out.
                Thread::On { since, .. } => self.ran(tid, since, end),
                Thread::Unknown { since } => self.unknown(tid, end.saturating_sub(since)),
                Thread::Off {
                    since,
                    preempted,
                    stack,
                } => {
                    self.totals.open_at_end += 1;
                    end_wait(&mut self.totals, &stack, since, end, preempted, emit);
                }
            }
        }
        self.exited.clear();
        self.unsampled.clear();
        self.rings.fill(Ring::default());
        self.gaps = 0;
        self.done = end;
    }

    /// Waits still open count up to `upto`, so that live figures show
    /// threads that sleep on; the rest counts as it comes. So does time
    /// not known.
    fn count_open(&mut self, upto: u64, emit: &mut impl FnMut(Wait<'_>)) {
        let (totals, by) = (&mut self.totals, &mut self.unknown_by);
        for (&tid, thread) in self.threads.iter_mut() {
            match thread {
                Thread::Off {
                    since,
                    preempted,
                    stack,
                } if *since < upto => {
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
                Thread::Unknown { since } if *since < upto => {
                    add_unknown(totals, by, tid, upto - *since);
                    *since = upto;
                }
                _ => {}
            }
        }
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

    /// `ns` of thread `tid`'s time that no record tells.
    fn unknown(&mut self, tid: u32, ns: u64) {
        add_unknown(&mut self.totals, &mut self.unknown_by, tid, ns);
    }

    /// Wall mode: the on-CPU time of `tid` not given to a sample yet has
    /// none to go to (the next sample comes after a loss): it is unknown.
    fn unsampled_unknown(&mut self, tid: u32) {
        if let Some(ns) = self.unsampled.remove(&tid) {
            self.unknown(tid, ns);
        }
    }

    fn pair(&mut self, event: Event, emit: &mut impl FnMut(Wait<'_>)) {
        let (time, tid, ring) = (event.time, event.tid, event.ring);
        // Only a switch in right after a switch out on the ring is the
        // switch from one thread straight to the next.
        let out = match self.rings.get_mut(ring) {
            Some(r) => r.out.take(),
            None => None,
        };
        match event.what {
            What::Out(stack) => self.switched_out(time, tid, stack),
            What::OutRecord { preempted } => {
                if let Some(Thread::Off {
                    since,
                    preempted: p,
                    ..
                }) = self.threads.get_mut(&tid)
                {
                    if *since <= time {
                        *p = preempted;
                        if let Some(r) = self.rings.get_mut(ring) {
                            r.out = Some((tid, time, *since));
                        }
                    }
                }
            }
            What::In => self.switched_in(time, tid, ring, out, emit),
            What::Sample(stack, period) => {
                // The thread's on-CPU time since its last sample, as its
                // switches time it; a thread not seen yet has only the
                // kernel's period, and is running here from now on.
                let unsampled = self.unsampled.remove(&tid).unwrap_or(0);
                let ns = match self.threads.remove(&tid) {
                    Some(Thread::On { since, .. }) => unsampled + time.saturating_sub(since),
                    Some(off @ Thread::Off { .. }) => {
                        self.threads.insert(tid, off);
                        unsampled
                    }
                    // Running here now; since when is not known.
                    Some(Thread::Unknown { since }) => {
                        self.unknown(tid, time.saturating_sub(since));
                        unsampled
                    }
                    None => period,
                };
                self.threads
                    .entry(tid)
                    .or_insert(Thread::On { since: time, ring });
                if ns > 0 {
                    self.totals.on_cpu_ns += ns;
                    emit(Wait {
                        stack: &stack,
                        since: time,
                        ns,
                        mark: Mark::OnCpu,
                    });
                }
            }
            What::Exit => {
                match self.threads.remove(&tid) {
                    Some(Thread::On { since, .. }) => self.ran(tid, since, time),
                    // Killed while it waited: the kernel writes no switch
                    // in before the exit; the wait lasted until the exit.
                    Some(Thread::Off {
                        since,
                        preempted,
                        stack,
                    }) => end_wait(&mut self.totals, &stack, since, time, preempted, emit),
                    Some(Thread::Unknown { since }) => {
                        self.unknown(tid, time.saturating_sub(since));
                    }
                    None => {}
                }
                self.exited.insert(tid, time);
                self.unsampled.remove(&tid);
            }
            What::GapStart => self.gap_start(time, ring, emit),
            What::GapEnd => {
                if let Some(r) = self.rings.get_mut(ring).filter(|r| r.gap) {
                    r.gap = false;
                    self.gaps -= 1;
                }
            }
        }
    }

    fn switched_out(&mut self, time: u64, tid: u32, stack: Box<Stack>) {
        match self.threads.remove(&tid) {
            Some(Thread::On { since, .. }) => self.ran(tid, since, time),
            // The switch in was lost: that wait cannot be timed.
            Some(Thread::Off { .. }) => self.totals.unpaired += 1,
            Some(Thread::Unknown { since }) => self.unknown(tid, time.saturating_sub(since)),
            None => {}
        }
        if self.exited.remove(&tid).is_some() {
            return;
        }
        let thread = if self.gaps > 0 {
            // A ring is losing records: the thread may run there unseen
            // before the switch in that would end this wait.
            self.totals.unpaired += 1;
            self.unsampled_unknown(tid);
            Thread::Unknown { since: time }
        } else {
            Thread::Off {
                since: time,
                preempted: false,
                stack,
            }
        };
        self.threads.insert(tid, thread);
    }

    /// A thread switched in at `time` on `ring`; `out`: the ring's event
    /// before was a switch-out record (thread, its time, when its wait
    /// began). A switch straight from another thread is this thread's time
    /// from where the other's wait began: the kernel charges the switch to
    /// the thread switched in (the scheduler, and the sample and records
    /// written there), before the record that says it came in.
    fn switched_in(
        &mut self,
        time: u64,
        tid: u32,
        ring: usize,
        out: Option<(u32, u64, u64)>,
        emit: &mut impl FnMut(Wait<'_>),
    ) {
        let switch = out
            .filter(|&(from, at, _)| from != tid && time.saturating_sub(at) <= SWITCH_NS)
            .map(|(_, _, since)| since);
        let start = match self.threads.remove(&tid) {
            Some(Thread::Off {
                since,
                preempted,
                stack,
            }) => {
                let end = switch.map_or(time, |s| s.clamp(since, time.max(since)));
                end_wait(&mut self.totals, &stack, since, end, preempted, emit);
                end
            }
            Some(Thread::Unknown { since }) => {
                let end = switch.map_or(time, |s| s.clamp(since, time));
                self.unknown(tid, end - since);
                end
            }
            // Off the CPU since before the session (or its switch out was
            // lost), or a switch in twice.
            Some(Thread::On { .. }) | None => {
                self.totals.unpaired += 1;
                time
            }
        };
        self.threads.insert(tid, Thread::On { since: start, ring });
    }

    /// Records of `ring` are missing from `time`: a thread may have run
    /// there, switched, since, unseen. A thread on that CPU, and every
    /// thread off the CPU (it may have come in there), is counted up to
    /// here, then not known until its next record. Threads on other CPUs
    /// stay known: leaving their CPU takes a record of its ring.
    fn gap_start(&mut self, time: u64, ring: usize, emit: &mut impl FnMut(Wait<'_>)) {
        match self.rings.get_mut(ring) {
            Some(r) if !r.gap => r.gap = true,
            _ => return,
        }
        self.gaps += 1;
        let mut hit = Vec::new();
        for (&tid, thread) in &self.threads {
            match thread {
                Thread::On { ring: on, .. } if *on == ring => hit.push(tid),
                Thread::Off { .. } => hit.push(tid),
                _ => {}
            }
        }
        for tid in hit {
            match self.threads.insert(tid, Thread::Unknown { since: time }) {
                Some(Thread::On { since, .. }) => self.ran(tid, since, time),
                Some(Thread::Off {
                    since,
                    preempted,
                    stack,
                }) => {
                    // The wait's part up to here; its end is not known.
                    self.totals.unpaired += 1;
                    let ns = time.saturating_sub(since);
                    if ns > 0 {
                        self.totals.off_cpu_ns += ns;
                        if preempted {
                            self.totals.runnable_ns += ns;
                        }
                        emit(Wait {
                            stack: &stack,
                            since,
                            ns,
                            mark: mark(preempted),
                        });
                    }
                }
                _ => {}
            }
            self.unsampled_unknown(tid);
        }
    }
}

/// What a switch record says of its thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// It was switched in.
    In,
    /// It was switched out while runnable.
    Preempted,
    /// It was switched out to wait.
    Blocked,
}

fn add_unknown(totals: &mut TimeTotals, by: &mut foldhash::HashMap<u32, u64>, tid: u32, ns: u64) {
    if ns > 0 {
        totals.unknown_ns += ns;
        *by.entry(tid).or_default() += ns;
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
#[path = "waits_tests.rs"]
mod tests;
