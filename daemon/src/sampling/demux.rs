//! Routing a group's records to sessions: which sessions each process is
//! routed to ([`Targets`]), the state kept from drain to drain ([`Demux`]),
//! and which of a session's [`Batch`]es each record goes to. No perf fd, no
//! channels: records come in, batches go to a callback.
use super::batch::{Batch, BatchPool, Mark};
use super::callchain::push_stack;
use super::tops::StackTops;
use super::waits::{self, Switch, Waits};
use crate::os::perf::record::{ParseError, Record};
use crate::os::perf::{Counts, Stacks};
use crate::process::maps::{Backing, Mapping};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

fn mapping_of(start: u64, len: u64, pgoff: u64, filename: &[u8]) -> Mapping {
    let name = String::from_utf8_lossy(filename);
    let backing = if name.is_empty() || name == "//anon" {
        Backing::Special("[anon]".into())
    } else if name.starts_with('/') {
        Backing::File(Arc::new(PathBuf::from(name.into_owned())))
    } else {
        Backing::Special(name.into())
    };
    Mapping::new(start, start.saturating_add(len), pgoff, backing)
}

/// The kernel's callchain depth limit (kernel.perf_event_max_stack), read
/// once: a chain that long was cut.
fn max_stack() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/perf_event_max_stack")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(127)
    })
}

/// Which sessions each process's records go to. Sessions are numbered from
/// 0 in the order they first appear in the routes given to [`Targets::new`];
/// a drain makes one batch per session, however many of its processes are
/// routed. A route of pid [`EVERY_PROCESS`] takes every process's records
/// but the daemon's own and the idle task's (continuous profiling).
#[derive(Debug, Default, Clone)]
pub struct Targets {
    /// Looked up for every record: hashed with foldhash. Per process, its
    /// sessions (those that take every process included). An exited
    /// process keeps its route for a drain: its last records, written
    /// after its exit record and on other CPUs, still come.
    by_pid: foldhash::HashMap<u32, Vec<usize>>,
    /// Per session: whether it follows the processes its processes fork.
    children: Vec<bool>,
    /// The sessions that take every process.
    every: Vec<usize>,
    /// The daemon's own process, never routed to them.
    own: u32,
}

/// The pid of a route that takes every process (the idle task's pid: it is
/// never a target).
pub const EVERY_PROCESS: u32 = 0;

/// Who samples are routed to: a session (by its id), or continuous
/// profiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Subscriber {
    Session(u64),
    Continuous,
}

impl Subscriber {
    /// The session's id; None for continuous profiling.
    pub fn session(self) -> Option<u64> {
        match self {
            Subscriber::Session(id) => Some(id),
            Subscriber::Continuous => None,
        }
    }
}

/// Whether a session also takes the processes its processes fork from now
/// on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Children {
    Followed,
    Ignored,
}

/// One route given to [`Targets::new`]: `pid`'s records go to `session`.
#[derive(Debug, Clone, Copy)]
pub struct RouteTo {
    pub session: Subscriber,
    pub pid: u32,
    pub children: Children,
}

impl Targets {
    /// Targets from routes; a session's first route says whether it follows
    /// children.
    pub fn new(routes: impl IntoIterator<Item = RouteTo>) -> Targets {
        let mut targets = Targets {
            own: std::process::id(),
            ..Targets::default()
        };
        let mut slot: HashMap<Subscriber, usize> = HashMap::new();
        for route in routes {
            let i = *slot.entry(route.session).or_insert_with(|| {
                targets.children.push(route.children == Children::Followed);
                targets.children.len() - 1
            });
            if route.pid == EVERY_PROCESS {
                targets.every.push(i);
                continue;
            }
            targets.by_pid.entry(route.pid).or_default().push(i);
        }
        for sessions in targets.by_pid.values_mut() {
            sessions.extend(targets.every.iter().copied());
            sessions.sort_unstable();
            sessions.dedup();
        }
        targets
    }

    /// Number of sessions.
    pub fn sessions(&self) -> usize {
        self.children.len()
    }

    /// The sessions `pid` is routed to.
    pub fn of(&self, pid: u32) -> Option<&[usize]> {
        self.by_pid
            .get(&pid)
            .map(Vec::as_slice)
            .or_else(|| self.every_for(pid))
    }

    /// The sessions that take every process, for `pid` (none for the idle
    /// task and the daemon itself).
    fn every_for(&self, pid: u32) -> Option<&[usize]> {
        (!self.every.is_empty() && pid != EVERY_PROCESS && pid != self.own)
            .then_some(self.every.as_slice())
    }
}

/// What one drain saw.
#[derive(Debug, Default)]
pub struct Drained {
    /// Samples on the ring.
    pub seen: u64,
    /// Samples of a routed process.
    pub matched: u64,
    /// Samples the kernel lost.
    pub lost: u64,
    /// What the target's events counted (see [`Batch::counted`]).
    pub counted: u64,
    pub throttles: u64,
    /// Records that could not be parsed.
    pub errors: u64,
    /// Processes forked during the drain by processes of sessions that
    /// follow children: child → (perf time of the fork, those sessions).
    /// They need routes.
    pub forked: foldhash::HashMap<u32, (u64, Vec<usize>)>,
    /// Routed processes that exited during the drain, with the perf time
    /// of their exit: their routes go after the next drain.
    pub exited: Vec<(u32, u64)>,
    /// Routed pids that a process not routed took during the drain, with
    /// the perf time of its fork: from then on the pid's records are that
    /// process's, and the routes go now.
    pub reborn: Vec<(u32, u64)>,
}

/// A fork, exit or exec record, read from every ring before any record is
/// routed (see [`Drain::task`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Task {
    Fork { parent: u32 },
    Exit,
    Exec,
}

/// A group's demultiplexing state, kept from drain to drain: the sessions'
/// batches, with buffers that come back to it once applied.
#[derive(Debug)]
pub struct Demux {
    stack_copy: bool,
    max_stack: usize,
    /// One per session; between drains each is empty.
    batches: Vec<Batch>,
    /// Per session, a batch for each exec of its processes in the drain,
    /// with the exec's perf time, in time order: each holds the records
    /// from its exec to the next.
    execs: Vec<Vec<(u64, Batch)>>,
    pool: BatchPool,
    tops: StackTops,
    /// The drain's fork, exit and exec records: (perf time, process, what).
    tasks: Vec<(u64, u32, Task)>,
    counts: Drained,
    /// On rings with switches: their pairing into waits.
    waits: Option<Waits>,
    /// The index of the ring being read.
    ring: usize,
    /// The drain's time accounting (rings with switches), and per thread
    /// its time not known.
    time: Option<profd_common::api::TimeTotals>,
    unknown: Vec<(u32, u64)>,
    /// Per ring, the process and thread of the last exit it recorded: the
    /// kernel gives a thread already unhashed (still on its CPU, in its
    /// last instants) the tid -1 in its samples, which follow its exit in
    /// that CPU's ring.
    exited_last: Vec<(u32, u32)>,
}

impl Demux {
    /// State for a ring whose samples carry their user stacks as `stacks`
    /// says, taking its batches from `pool`.
    pub fn new(stacks: Stacks, pool: BatchPool) -> Demux {
        Demux {
            stack_copy: stacks == Stacks::Copied,
            max_stack: max_stack(),
            batches: Vec::new(),
            execs: Vec::new(),
            pool,
            tops: StackTops::default(),
            tasks: Vec::new(),
            counts: Drained::default(),
            waits: None,
            ring: 0,
            time: None,
            unknown: Vec::new(),
            exited_last: Vec::new(),
        }
    }

    /// Pair the switches of the rings (see [`Waits`]).
    pub fn with_waits(mut self, waits: Waits) -> Demux {
        self.waits = Some(waits);
        self
    }

    /// With stack copies, the stack tops its drains cut copies at, for the
    /// sessions routed to it to raise and drop with their walks.
    pub fn tops(&self) -> Option<StackTops> {
        self.stack_copy.then(|| self.tops.clone())
    }

    /// Start a drain routed by `targets`: the fork, exit and exec records of
    /// every ring go to [`Drain::task`], then [`Drain::resolve`]; then every
    /// record of every ring goes to [`Drain::record`], and [`Drain::finish`]
    /// delivers the batches to `deliver(session, batch)`. The rings are read
    /// one after the other, not in time order: what a record belongs to is
    /// decided by its time against the forks, exits and execs of all rings.
    pub fn begin<'a, F: FnMut(usize, Batch)>(
        &'a mut self,
        targets: &'a Targets,
        deliver: F,
    ) -> Drain<'a, F> {
        let n = targets.sessions();
        self.batches.truncate(n);
        self.batches.resize_with(n, Batch::default);
        for batch in &mut self.batches {
            if batch.ends.capacity() == 0 {
                *batch = self.pool.take();
            }
        }
        self.execs.truncate(n);
        self.execs.resize_with(n, Vec::new);
        self.tasks.clear();
        self.counts = Drained::default();
        self.time = None;
        self.unknown.clear();
        Drain {
            demux: self,
            targets,
            deliver,
        }
    }
}

/// One drain in progress (see [`Demux::begin`]).
pub struct Drain<'a, F: FnMut(usize, Batch)> {
    demux: &'a mut Demux,
    targets: &'a Targets,
    deliver: F,
}

impl<F: FnMut(usize, Batch)> Drain<'_, F> {
    /// Samples lost according to the records read so far.
    pub fn lost_records(&self) -> u64 {
        self.demux.counts.lost
    }

    /// Note a fork, exit or exec record, before any record is routed (parse
    /// errors are counted when the record itself is routed).
    pub fn task(&mut self, record: Result<Record<'_>, ParseError>) {
        let task = match record {
            Ok(Record::Fork(t)) if t.pid != t.ppid => {
                (t.time, t.pid, Task::Fork { parent: t.ppid })
            }
            Ok(Record::Exit(t)) if t.pid == t.tid => (t.time, t.pid, Task::Exit),
            Ok(Record::Comm(c)) if c.exec && c.pid == c.tid => {
                (c.sample_id.time.unwrap_or(0), c.pid, Task::Exec)
            }
            _ => return,
        };
        self.demux.tasks.push(task);
    }

    /// After every ring's [`task`](Self::task) records: in time order, the
    /// processes forked by routed ones that their sessions follow (a child's
    /// own children too), the routed processes that exited and when, and a
    /// batch for each exec of a routed process.
    pub fn resolve(&mut self) {
        let d = &mut *self.demux;
        let c = &mut d.counts;
        let by_pid = self.targets;
        d.tasks.sort_unstable();
        for &(time, pid, task) in &d.tasks {
            match task {
                Task::Fork { parent } => {
                    let follow: Vec<usize> =
                        route(by_pid, &c.forked, &c.reborn, parent, Some(time))
                            .unwrap_or(&[])
                            .iter()
                            .copied()
                            .filter(|&i| self.targets.children[i])
                            .collect();
                    if !follow.is_empty() {
                        // A process that had this pid before is gone.
                        c.exited.retain(|&(p, _)| p != pid);
                        c.forked.insert(pid, (time, follow));
                    } else if routed(by_pid, &c.forked, &c.reborn, pid, Some(time)).is_some() {
                        c.reborn.push((pid, time));
                    }
                }
                Task::Exit => {
                    if routed(by_pid, &c.forked, &c.reborn, pid, Some(time)).is_some() {
                        c.exited.push((pid, time));
                    }
                }
                Task::Exec => {
                    for &i in route(by_pid, &c.forked, &c.reborn, pid, Some(time)).unwrap_or(&[]) {
                        d.execs[i].push((time, d.pool.take()));
                    }
                }
            }
        }
    }

    /// The records that follow are of the ring of this index.
    pub fn ring(&mut self, ring: usize) {
        self.demux.ring = ring;
    }

    /// On rings with switches: the ring was read up to its head, in the
    /// drain begun at `now` (CLOCK_MONOTONIC); `missing`: records after
    /// its last one read may be missing. See [`Waits::ring_read`].
    pub fn ring_read(&mut self, missing: bool, now: u64) {
        let d = &mut *self.demux;
        if let Some(w) = d.waits.as_mut() {
            w.ring_read(d.ring, missing, now.saturating_sub(waits::MARGIN_NS));
        }
    }

    /// Route one record to the batch of its sessions that covers its time.
    pub fn record(&mut self, record: Result<Record<'_>, ParseError>) {
        let d = &mut *self.demux;
        let by_pid = self.targets;
        let c = &mut d.counts;
        let (batches, execs) = (&mut d.batches, &mut d.execs);
        let ring = d.ring;
        if let (Some(w), Some(time)) = (d.waits.as_mut(), record_time(&record)) {
            w.read(ring, time);
        }
        match record {
            Ok(Record::Sample(mut s)) => {
                if s.tid == u32::MAX {
                    s.tid = match d.exited_last.get(ring) {
                        Some(&(pid, tid)) if pid == s.pid => tid,
                        _ => s.tid,
                    };
                }
                let stack_copy = d.stack_copy;
                if let Some(w) = d.waits.as_mut() {
                    // A switch out: its stack waits for the switch back in;
                    // a wall-mode sample, for the switches that time it.
                    // Both are counted once paired (`settle_waits`).
                    if route(by_pid, &c.forked, &c.reborn, s.pid, s.time).is_none() {
                        c.seen += 1;
                        return;
                    }
                    let mut frames = Vec::new();
                    let ip = if stack_copy { None } else { s.ip };
                    let n = push_stack(&mut frames, s.callchain(), ip);
                    let user = user_part(stack_copy, &d.tops, &s).map(|(r, b)| (r, b.to_vec()));
                    let stack = waits::Stack {
                        pid: s.pid,
                        tid: s.tid,
                        time: s.time.unwrap_or(0),
                        frames,
                        user,
                        truncated: !stack_copy && n >= d.max_stack,
                    };
                    let time = s.time.unwrap_or(0);
                    if w.is_switch(s.identifier) {
                        w.switch_out(ring, time, stack);
                    } else {
                        w.sample(ring, time, stack, s.period.unwrap_or(0));
                    }
                    return;
                }
                c.seen += 1;
                if let Some(targets) = route(by_pid, &c.forked, &c.reborn, s.pid, s.time) {
                    c.matched += 1;
                    let user = user_part(stack_copy, &d.tops, &s);
                    let chain = s.callchain();
                    for &i in targets {
                        let b = batch(&mut batches[i], &mut execs[i], s.time);
                        let n =
                            push_stack(&mut b.frames, chain, if stack_copy { None } else { s.ip });
                        b.ends.push(b.frames.len() as u32);
                        b.pids.push(s.pid);
                        b.tids.push(s.tid);
                        b.times.push(s.time.unwrap_or(0));
                        if !stack_copy && n >= d.max_stack {
                            b.truncated.push(s.pid);
                        }
                        if let Some((regs, stack)) = user {
                            b.user_regs.push(regs);
                            b.user_stack.extend_from_slice(stack);
                            b.user_ends.push(b.user_stack.len() as u32);
                        }
                    }
                }
            }
            Ok(Record::Switch(sw)) => {
                let (Some(w), Some(pid), Some(tid), Some(time)) = (
                    d.waits.as_mut(),
                    sw.sample_id.pid,
                    sw.sample_id.tid,
                    sw.sample_id.time,
                ) else {
                    return;
                };
                if route(by_pid, &c.forked, &c.reborn, pid, Some(time)).is_some() {
                    let switch = match (sw.out, sw.preempted) {
                        (false, _) => Switch::In,
                        (true, true) => Switch::Preempted,
                        (true, false) => Switch::Blocked,
                    };
                    w.switch(ring, time, tid, switch);
                }
            }
            Ok(Record::Mmap2(m)) => {
                if let Some(targets) = route(by_pid, &c.forked, &c.reborn, m.pid, m.sample_id.time)
                {
                    let mapping = mapping_of(m.addr, m.len, m.pgoff, m.filename);
                    for &i in targets {
                        batch(&mut batches[i], &mut execs[i], m.sample_id.time)
                            .mappings
                            .push((m.pid, mapping.clone(), m.sample_id.time.unwrap_or(0)));
                    }
                }
            }
            Ok(Record::Comm(cm)) => {
                if cm.exec && d.stack_copy {
                    d.tops.forget(cm.tid);
                }
                if let Some(targets) =
                    route(by_pid, &c.forked, &c.reborn, cm.pid, cm.sample_id.time)
                {
                    let name = String::from_utf8_lossy(cm.comm).into_owned();
                    for &i in targets {
                        // An exec's own batch starts with it (see `resolve`).
                        let b = batch(&mut batches[i], &mut execs[i], cm.sample_id.time);
                        if cm.exec && cm.pid == cm.tid {
                            b.exec = Some((cm.pid, name.clone()));
                            b.exec_time = cm.sample_id.time.unwrap_or(0);
                        }
                        b.comms.push((cm.tid, name.clone()));
                    }
                }
            }
            Ok(Record::Fork(t)) if t.pid != t.ppid => {
                for &i in self.targets.every_for(t.ppid).unwrap_or(&[]) {
                    batch(&mut batches[i], &mut execs[i], Some(t.time))
                        .forks
                        .push((t.pid, t.ppid, t.time));
                }
                if let Some((time, follow)) = c.forked.get(&t.pid) {
                    if *time == t.time {
                        for &i in follow {
                            batch(&mut batches[i], &mut execs[i], Some(t.time))
                                .forks
                                .push((t.pid, t.ppid, t.time));
                        }
                    }
                }
            }
            Ok(Record::Exit(t)) => {
                if d.exited_last.len() <= ring {
                    d.exited_last.resize(ring + 1, (0, 0));
                }
                d.exited_last[ring] = (t.pid, t.tid);
                if d.stack_copy {
                    d.tops.forget(t.tid);
                }
                if let Some(w) = &mut d.waits {
                    w.exit(ring, t.time, t.tid);
                }
                if t.pid != t.tid {
                    return;
                }
                if let Some(targets) = route(by_pid, &c.forked, &c.reborn, t.pid, Some(t.time)) {
                    for &i in targets {
                        batch(&mut batches[i], &mut execs[i], Some(t.time))
                            .exits
                            .push((t.pid, t.time));
                    }
                }
            }
            Ok(Record::Lost(l)) => {
                c.lost += l.lost;
                if let Some(w) = &mut d.waits {
                    w.lost(ring, l.sample_id.time.unwrap_or(0));
                }
            }
            Ok(Record::Throttle(_)) => c.throttles += 1,
            Ok(_) => {}
            Err(err) => {
                c.errors += 1;
                tracing::debug!(%err, "unparsable perf record");
            }
        }
    }

    /// On rings with switches, after every ring's records: pair the
    /// switches up to `now` (CLOCK_MONOTONIC when the drain began, less
    /// [`waits::MARGIN_NS`]), each wait (and wall-mode sample) going to
    /// every session of the group as a stack weighted by its nanoseconds;
    /// with `close` (the session's end, at that time) pair them all and
    /// cut the waits still open there.
    pub fn settle_waits(&mut self, now: u64, close: Option<u64>) {
        let d = &mut *self.demux;
        let Some(w) = d.waits.as_mut() else {
            return;
        };
        let c = &mut d.counts;
        let (batches, execs) = (&mut d.batches, &mut d.execs);
        let sessions = self.targets.sessions();
        let upto = now.saturating_sub(waits::MARGIN_NS);
        let time = w.settle(upto, close, |wait| {
            c.seen += 1;
            c.matched += 1;
            let stack = wait.stack;
            for i in 0..sessions {
                let b = batch(&mut batches[i], &mut execs[i], Some(wait.since));
                let user = stack.user.as_ref().map(|(regs, bytes)| (*regs, &bytes[..]));
                b.push(stack.pid, stack.tid, stack.frames.iter().copied(), user);
                // A wait is timed at its switch out, where its stack (and
                // any interpreter frames read with it) was sampled.
                if let Some(time) = b.times.last_mut() {
                    *time = match wait.mark {
                        Mark::OnCpu => wait.since,
                        _ => stack.time,
                    };
                }
                if stack.truncated {
                    b.truncated.push(stack.pid);
                }
                b.weights.push(wait.ns);
                b.marks.push(wait.mark);
            }
        });
        d.time = Some(time);
        d.unknown.extend(w.take_unknown());
    }

    /// End the drain: every session's batches that hold anything go to
    /// `deliver` in time order (the one before its first exec, then one per
    /// exec), the last with `counts` of the rings since the last drain:
    /// the samples lost (the kernel's own count where it keeps one, else
    /// [`lost_records`](Self::lost_records)) and what the target's events
    /// counted. Returns what the drain saw.
    pub fn finish(mut self, counts: Counts) -> Drained {
        let d = &mut *self.demux;
        let lost = counts.lost;
        d.counts.lost = lost;
        d.counts.counted = counts.counted;
        for (i, (batch, execs)) in d.batches.iter_mut().zip(&mut d.execs).enumerate() {
            let mut seen = d.counts.seen;
            for (_, next) in execs.drain(..) {
                let mut before = std::mem::replace(batch, next);
                // Only the last batch counts the samples of other processes.
                before.seen = before.ends.len() as u64;
                seen -= before.seen;
                before.pool = Some(d.pool.clone());
                if before.is_empty() {
                    before.recycle();
                } else {
                    (self.deliver)(i, before);
                }
            }
            batch.seen = seen;
            batch.lost = lost;
            batch.counted = counts.counted;
            batch.throttled = d.counts.throttles;
            batch.time = d.time;
            batch.unknown.extend_from_slice(&d.unknown);
            if !batch.is_empty() {
                batch.pool = Some(d.pool.clone());
                (self.deliver)(i, std::mem::take(batch));
            }
        }
        std::mem::take(&mut d.counts)
    }
}

/// When a record was written, where it says (a LOST record's time is
/// where its gap ends: not this).
fn record_time(record: &Result<Record<'_>, ParseError>) -> Option<u64> {
    match record.as_ref().ok()? {
        Record::Sample(s) => s.time,
        Record::Mmap2(m) => m.sample_id.time,
        Record::Comm(c) => c.sample_id.time,
        Record::Fork(t) | Record::Exit(t) => Some(t.time),
        Record::Throttle(t) | Record::Unthrottle(t) => Some(t.time),
        Record::Switch(s) => s.sample_id.time,
        Record::Lost(_) | Record::Other { .. } => None,
    }
}

/// The user part of a sample for its batch: with stack copies the user
/// registers (ip, sp, bp) and the copy cut at its thread's top; with frame
/// pointers sp alone and the bytes at sp that find the frames the kernel's
/// walk skips (none in kernel threads).
fn user_part<'s>(
    stack_copy: bool,
    tops: &StackTops,
    s: &crate::os::perf::record::Sample<'s>,
) -> Option<([u64; 3], &'s [u8])> {
    let mut regs = s.regs_user();
    if stack_copy {
        let (bp, sp, ip) = (regs.next(), regs.next(), regs.next());
        let regs = match (ip, sp, bp) {
            (Some(ip), Some(sp), Some(bp)) => [ip, sp, bp],
            _ => [0; 3],
        };
        Some((regs, tops.cut(s.tid, regs[1], s.stack_user)))
    } else {
        Some(([0, regs.next().unwrap_or(0), 0], s.stack_user))
    }
}

/// The batch of a session that covers perf time `time`: the one of its last
/// exec at or before it, else the one before its first exec.
#[inline]
fn batch<'b>(
    first: &'b mut Batch,
    execs: &'b mut [(u64, Batch)],
    time: Option<u64>,
) -> &'b mut Batch {
    let time = time.unwrap_or(0);
    match execs.iter().rposition(|&(at, _)| at <= time) {
        Some(k) => &mut execs[k].1,
        None => first,
    }
}

/// The sessions (batch indices) a process's record of perf time `time` goes
/// to: those of the pid's last fork in this drain up to `time` if a session
/// follows it, none if it was forked otherwise (`reborn`), and with no fork
/// the routes made before this drain; else the sessions that take every
/// process. The records a process writes after its exit record (it is
/// still running its exit) are its own.
#[inline]
fn route<'a>(
    targets: &'a Targets,
    forked: &'a foldhash::HashMap<u32, (u64, Vec<usize>)>,
    reborn: &[(u32, u64)],
    pid: u32,
    time: Option<u64>,
) -> Option<&'a [usize]> {
    routed(targets, forked, reborn, pid, time).or_else(|| targets.every_for(pid))
}

/// [`route`] but for the sessions that take every process.
#[inline]
fn routed<'a>(
    targets: &'a Targets,
    forked: &'a foldhash::HashMap<u32, (u64, Vec<usize>)>,
    reborn: &[(u32, u64)],
    pid: u32,
    time: Option<u64>,
) -> Option<&'a [usize]> {
    let time = time.unwrap_or(0);
    let taken = reborn
        .iter()
        .filter(|&&(p, at)| p == pid && at <= time)
        .map(|&(_, at)| at)
        .max();
    if let Some((at, sessions)) = forked.get(&pid) {
        if *at <= time && taken.is_none_or(|taken| taken < *at) {
            return Some(sessions);
        }
    }
    if taken.is_some() {
        return None;
    }
    targets.by_pid.get(&pid).map(Vec::as_slice)
}

#[cfg(test)]
mod tests {
    use super::Children::{Followed, Ignored};
    use super::*;

    fn to(session: u64, pid: u32, children: Children) -> RouteTo {
        RouteTo {
            session: Subscriber::Session(session),
            pid,
            children,
        }
    }

    /// A process writes records after its exit record while it finishes
    /// exiting (tens of microseconds, seen on 6.18): they are its own until
    /// a fork gives its pid to another process.
    #[test]
    fn a_process_keeps_its_pid_until_a_fork_takes_it() {
        let t = Targets::new([to(7, 10, Ignored), to(7, 11, Ignored)]);
        let none = foldhash::HashMap::default();
        assert_eq!(route(&t, &none, &[], 10, Some(501)), Some(&[0][..]));
        let taken = [(10, 600)];
        assert_eq!(route(&t, &none, &taken, 10, Some(599)), Some(&[0][..]));
        assert_eq!(
            route(&t, &none, &taken, 10, Some(600)),
            None,
            "a later process with its pid"
        );
        assert_eq!(route(&t, &none, &taken, 11, Some(700)), Some(&[0][..]));
        let forked = foldhash::HashMap::from_iter([(12, (600, vec![0]))]);
        assert_eq!(route(&t, &forked, &[], 12, Some(600)), Some(&[0][..]));
        assert_eq!(
            route(&t, &forked, &[], 12, Some(599)),
            None,
            "an earlier process with the pid of a child forked in this drain"
        );
        assert_eq!(
            route(&t, &forked, &[(12, 650)], 12, Some(700)),
            None,
            "the child's pid taken after it"
        );
        assert_eq!(
            route(&t, &forked, &[(12, 550)], 12, Some(700)),
            Some(&[0][..]),
            "the child took a pid taken before"
        );
    }

    type Rec = Result<Record<'static>, ParseError>;

    fn sample(pid: u32, time: u64) -> Rec {
        Ok(Record::Sample(crate::os::perf::record::Sample::at(
            pid,
            time,
            0x1000 + time,
        )))
    }

    fn fork(pid: u32, ppid: u32, time: u64) -> Rec {
        Ok(Record::Fork(crate::os::perf::record::Task {
            pid,
            ppid,
            tid: pid,
            ptid: ppid,
            time,
            sample_id: Default::default(),
        }))
    }

    /// The exit of thread `tid` of process `pid`.
    fn exit(pid: u32, tid: u32, time: u64) -> Rec {
        Ok(Record::Exit(crate::os::perf::record::Task {
            pid,
            ppid: 1,
            tid,
            ptid: 1,
            time,
            sample_id: Default::default(),
        }))
    }

    fn exec(pid: u32, time: u64, name: &'static str) -> Rec {
        Ok(Record::Comm(crate::os::perf::record::Comm {
            pid,
            tid: pid,
            comm: name.as_bytes(),
            exec: true,
            sample_id: crate::os::perf::record::SampleId {
                time: Some(time),
                ..Default::default()
            },
        }))
    }

    /// One drain of `rings` (read one after the other, as the sampler does):
    /// the batches delivered, in order, and what the drain saw.
    fn drain(targets: &Targets, rings: &[Vec<Rec>]) -> (Vec<(usize, Batch)>, Drained) {
        let mut demux = Demux::new(Stacks::FramePointers, BatchPool::default());
        assert!(demux.tops().is_none(), "frame pointers: nothing to cut");
        let mut out = Vec::new();
        let mut drain = demux.begin(targets, |i, batch| out.push((i, batch)));
        for record in rings.iter().flatten() {
            drain.task(record.clone());
        }
        drain.resolve();
        for record in rings.iter().flatten() {
            drain.record(record.clone());
        }
        let d = drain.finish(Counts::default());
        (out, d)
    }

    /// Perf times of a batch's samples (their ips were 0x1000 + time).
    fn times(batch: &Batch) -> Vec<u64> {
        batch.samples().map(|s| s.frames[0] - 0x1000).collect()
    }

    #[test]
    fn a_childs_samples_count_whichever_ring_holds_its_fork() {
        let targets = Targets::new([to(1, 10, Followed)]);
        let rings = [
            // The child ran on this CPU; an earlier process with its pid too.
            vec![sample(11, 50), sample(11, 200), sample(11, 210)],
            // Its parent forked it on this one.
            vec![fork(11, 10, 100), sample(10, 150)],
        ];
        let (out, d) = drain(&targets, &rings);
        assert_eq!(out.len(), 1);
        let batch = &out[0].1;
        assert_eq!(times(batch), [200, 210, 150]);
        assert_eq!(batch.forks, [(11, 10, 100)]);
        assert_eq!((batch.seen, d.seen, d.matched), (4, 4, 3));
        assert_eq!(d.forked.get(&11), Some(&(100, vec![0])));
    }

    #[test]
    fn records_go_to_the_batch_of_the_exec_they_follow_in_time() {
        let targets = Targets::new([to(1, 10, Ignored)]);
        let rings = [
            vec![sample(10, 300), sample(99, 310)],
            vec![sample(10, 100), exec(10, 200, "new"), sample(10, 250)],
        ];
        let (out, _) = drain(&targets, &rings);
        assert_eq!(out.len(), 2, "{out:?}");
        let (before, after) = (&out[0].1, &out[1].1);
        assert_eq!((times(before), before.exec.clone()), (vec![100], None));
        assert_eq!(
            (times(after), after.exec.clone()),
            (vec![300, 250], Some((10, "new".to_string())))
        );
        assert_eq!(after.comms, [(10, "new".to_string())]);
        assert_eq!(
            (before.seen, after.seen),
            (1, 3),
            "the last batch counts the other processes' samples"
        );
    }

    #[test]
    fn stack_copies_are_cut_above_the_top_their_threads_walks_reach() {
        let targets = Targets::new([to(1, 10, Ignored)]);
        let stack: &'static [u8] = Vec::leak(vec![7u8; 4096]);
        let sp = 0x7fff_0000_0000;
        let copied = |tid: u32, time: u64| -> Rec {
            let s = crate::os::perf::record::Sample::at(10, time, 0x1000 + time);
            Ok(Record::Sample(s.copied(tid, sp, stack)))
        };
        let mut demux = Demux::new(Stacks::Copied, BatchPool::default());
        let tops = demux.tops().expect("stack copies come with the tops");
        let shared = tops.clone();
        let mut drain = |records: &[Rec]| -> Vec<usize> {
            let mut out = Vec::new();
            let mut d = demux.begin(&targets, |_, batch| out.push(batch));
            for record in records {
                d.record(record.clone());
            }
            d.finish(Counts::default());
            let batch = out.pop().expect("a batch");
            let lens = batch.samples().map(|s| s.user.unwrap().1.len()).collect();
            // What the session's walks found: thread 10 reads 100 bytes up,
            // thread 11 200; thread 12 was never routed.
            tops.learn(10, sp + 100);
            tops.learn(11, sp + 200);
            tops.learn(12, sp + 300);
            lens
        };
        let margin = StackTops::MARGIN as usize;
        assert_eq!(
            drain(&[copied(10, 1), copied(11, 2)]),
            [4096, 4096],
            "unknown: whole"
        );
        assert_eq!(
            drain(&[copied(10, 3), copied(11, 4), copied(12, 5)]),
            [100 + margin, 200 + margin, 4096]
        );
        // A walk on another stack of thread 10 (a coroutine's, below):
        // its top stays the highest, which bounds both stacks' walks.
        shared.learn(10, sp + 50);
        assert_eq!(drain(&[copied(10, 5)]), [100 + margin]);
        // Thread 11 exits; a thread 11 after it is unknown again.
        assert_eq!(
            drain(&[exit(10, 11, 6), copied(11, 7), copied(10, 8)]),
            [4096, 100 + margin]
        );
        // A walk of thread 10 stopped short: its next copy is whole.
        shared.forget(10);
        assert_eq!(drain(&[copied(10, 9)]), [4096]);
        // A stack pointer above the top (on another stack): nothing cut.
        let above = crate::os::perf::record::Sample::at(10, 10, 0x1000);
        let above: Rec = Ok(Record::Sample(above.copied(10, sp + 0x1000, stack)));
        assert_eq!(drain(&[above, copied(10, 11)]), [4096, 100 + margin]);
    }

    /// A sample the kernel gives tid -1 (a thread unhashed in its last
    /// instants on its CPU) counts for the thread whose exit that CPU's
    /// ring recorded last, if of its process; not for a thread of its own.
    #[test]
    fn a_sample_of_an_exiting_thread_counts_for_that_thread() {
        let targets = Targets::new([to(1, 10, Ignored)]);
        let of = |tid: u32, time: u64| -> Rec {
            let mut s = crate::os::perf::record::Sample::at(10, time, 0x1000 + time);
            s.tid = tid;
            Ok(Record::Sample(s))
        };
        let mut demux = Demux::new(Stacks::FramePointers, BatchPool::default());
        let mut out = Vec::new();
        let mut d = demux.begin(&targets, |_, batch| out.push(batch));
        let rings = [
            vec![of(11, 1), exit(10, 11, 2), of(u32::MAX, 3), of(12, 4)],
            // Another CPU: no exit of the process recorded here.
            vec![of(u32::MAX, 5)],
        ];
        for record in rings.iter().flatten() {
            d.task(record.clone());
        }
        d.resolve();
        for (i, records) in rings.iter().enumerate() {
            d.ring(i);
            for record in records {
                d.record(record.clone());
            }
        }
        d.finish(Counts::default());
        let tids: Vec<u32> = out
            .iter()
            .flat_map(|b| b.samples().map(|s| s.tid))
            .collect();
        assert_eq!(tids, [11, 11, 12, u32::MAX]);
    }

    #[test]
    fn sessions_are_numbered_in_order_and_keep_their_first_routes_children() {
        let t = Targets::new([to(7, 10, Followed), to(3, 10, Ignored), to(7, 11, Ignored)]);
        assert_eq!(t.sessions(), 2);
        assert_eq!(t.of(10), Some(&[0, 1][..]));
        assert_eq!(t.of(11), Some(&[0][..]));
        assert_eq!(t.of(12), None);
        assert_eq!(t.children, vec![true, false]);
    }

    /// A route of every process takes all records but the idle task's and
    /// the daemon's own, beside a session of one target; forks and exits of
    /// every process come with them.
    #[test]
    fn every_process_is_routed_to_continuous_sessions() {
        let own = std::process::id();
        let targets = Targets::new([to(5, EVERY_PROCESS, Ignored), to(9, 10, Ignored)]);
        let rings = [vec![
            sample(10, 1),
            sample(0, 2),
            sample(own, 3),
            fork(20, 10, 4),
            sample(20, 5),
            exit(20, 20, 6),
            sample(30, 7),
        ]];
        let (out, d) = drain(&targets, &rings);
        let every = &out.iter().find(|(i, _)| *i == 0).unwrap().1;
        let target = &out.iter().find(|(i, _)| *i == 1).unwrap().1;
        assert_eq!(times(every), [1, 5, 7]);
        assert_eq!(times(target), [1]);
        assert_eq!(every.forks, [(20, 10, 4)]);
        assert_eq!(every.exits, [(20, 6)]);
        assert!(
            target.forks.is_empty(),
            "the target's session does not follow"
        );
        assert_eq!((d.seen, d.matched), (5, 3));
        assert!(d.exited.is_empty(), "no route of its own ends");
    }

    /// A process routed to several sessions leaves them all when its pid
    /// is taken; continuous profiling is a subscriber apart from every
    /// session.
    #[test]
    fn a_taken_pid_leaves_every_session_and_continuous_is_apart() {
        let continuous = RouteTo {
            session: Subscriber::Continuous,
            ..to(0, EVERY_PROCESS, Ignored)
        };
        let t = Targets::new([
            to(1, 10, Ignored),
            to(2, 10, Ignored),
            to(3, 10, Ignored),
            continuous,
        ]);
        assert_eq!(t.sessions(), 4);
        let none = foldhash::HashMap::default();
        let taken = [(10, 501)];
        assert_eq!(
            route(&t, &none, &taken, 10, Some(500)),
            Some(&[0, 1, 2, 3][..])
        );
        assert_eq!(
            route(&t, &none, &taken, 10, Some(501)),
            Some(&[3][..]),
            "a later process with its pid goes to continuous profiling alone"
        );
    }

    /// A followed child's records after its exit are its own; once a
    /// process not followed forks with its pid, that process's are not.
    #[test]
    fn a_childs_last_records_count_until_its_pid_is_reborn() {
        let targets = Targets::new([to(1, 10, Followed)]);
        let rings = [
            vec![fork(20, 10, 5), exit(20, 20, 10), fork(20, 99, 15)],
            vec![sample(20, 8), sample(20, 12), sample(20, 16)],
        ];
        let (out, d) = drain(&targets, &rings);
        let times: Vec<u64> = out.iter().flat_map(|(_, b)| times(b)).collect();
        assert_eq!(
            times,
            [8, 12],
            "up to its exit and after, not after the fork"
        );
        assert_eq!(d.reborn, [(20, 15)]);
        assert_eq!(d.exited, [(20, 10)]);
        assert_eq!(d.forked.len(), 1);
    }

    #[test]
    fn mmap_names_become_backings() {
        assert!(matches!(
            mapping_of(0, 1, 0, b"/usr/lib/libc.so.6").backing,
            Backing::File(_)
        ));
        assert_eq!(
            mapping_of(0, 1, 0, b"//anon").backing,
            Backing::Special("[anon]".into())
        );
        assert_eq!(
            mapping_of(0, 1, 0, b"[vdso]").backing,
            Backing::Special("[vdso]".into())
        );
    }
}
