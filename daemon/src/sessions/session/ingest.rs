//! The session side of the hot path: each batch from the sampler counted
//! into the session's stack table (stack copies unwound, addresses tagged
//! with their address space), with the per-process and per-thread counts,
//! the recent samples of windowed figures, the samples' times when kept,
//! and the addresses of new stacks queued for naming. Owned by the
//! session's actor; no symbols, no views.
use super::python::{
    Merged, PyFrames, PL_UNREADABLE_FRAME, PY_UNREADABLE_FRAME, RB_UNREADABLE_FRAME,
};
use super::recent::Recent;
use super::spaces::{self, Spaces};
use super::timeline::Times;
use crate::memory::CAPPED_STACKS;
use crate::os::fds::OutOfFds;
use crate::os::perf::Stacks;
use crate::process::interpreted::Runtime;
use crate::process::maps::{Mapping, ProcessMaps};
use crate::process::symbolize::is_kernel;
use crate::process::unwind::{Unwinder, Walk};
use crate::sampling::{Batch, Mark, SampleView, StackTops};
use crate::serve::auth::{Check, Denied};
use profd_common::api;
use profd_common::model::{MarkerKind, StackTable};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Why a batch was refused, and its session cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// A process of the session exec'd a program its owner may not profile.
    #[error("stopped after exec of {comm}: {why}")]
    Exec { comm: String, why: Denied },
    /// A process's files could not be opened for want of descriptors.
    #[error(transparent)]
    OutOfFds(#[from] OutOfFds),
}

/// Checks, after a process of the session exec'd, that the owner may still
/// profile it (the program may be set-id).
pub type Recheck = Arc<dyn Fn(u32) -> Check + Send + Sync>;

/// The one frame of the stack that samples over the unique-stack limit are
/// counted under; named `[stack limit reached]`.
pub const STACK_LIMIT_FRAME: u64 = u64::MAX;

/// The outermost frame of a wait's stack: the thread gave the CPU up;
/// named `[off-cpu: blocked]`.
pub const BLOCKED_FRAME: u64 = u64::MAX - 1;

/// The outermost frame of a wait's stack: the thread was preempted, still
/// runnable; named `[off-cpu: runnable]`.
pub const RUNNABLE_FRAME: u64 = u64::MAX - 2;

/// The frames profd adds to stacks, with their names.
pub const SYNTHETIC_FRAMES: [(u64, &str); 7] = [
    (STACK_LIMIT_FRAME, "[stack limit reached]"),
    (BLOCKED_FRAME, "[off-cpu: blocked]"),
    (RUNNABLE_FRAME, "[off-cpu: runnable]"),
    (PY_UNREADABLE_FRAME, "[python: unreadable]"),
    (RB_UNREADABLE_FRAME, "[ruby: unreadable]"),
    (PL_UNREADABLE_FRAME, "[perl: unreadable]"),
    (
        crate::sampling::UNKNOWN_STACK_FRAME,
        "[off-cpu: waiting since before the session, stack unknown]",
    ),
];

/// A session's counts and the state they are made with.
pub struct Ingest {
    /// Unique stacks kept; samples of further new stacks count under
    /// [`STACK_LIMIT_FRAME`].
    max_stacks: usize,
    /// Under memory pressure: no more new stacks than it has, past
    /// [`CAPPED_STACKS`] (see [`Ingest::hold_stacks`]).
    held: bool,
    /// Checks that the owner may still profile a process after its exec.
    recheck: Option<Recheck>,
    /// With stack copies, the sampler's stack tops, told how far each walk
    /// read.
    tops: Option<StackTops>,
    /// Bytes of each stack copy the kernel is asked for: a walk that ran
    /// past a whole copy is counted in `truncated_copy_ended` (one past a
    /// copy cut at its thread's top, or at the stack's end, is not).
    pub stack_bytes: usize,
    /// Processes whose program could not be checked after their exec (they
    /// had exited by then), and their children: their samples count as
    /// `unchecked`, not in the profile.
    unchecked: foldhash::HashSet<u32>,
    pub(super) stacks: StackTable,
    pub(super) totals: api::Totals,
    /// What the target's events counted on its rings (see
    /// [`crate::sampling::Batch::counted`]): the time `unsampled` is
    /// measured against.
    pub(super) counted: u64,
    /// Mappings and unwinders of the target's (and its children's) address
    /// spaces; stack addresses are tagged with their space.
    pub(super) spaces: Spaces,
    /// Samples per process, and where each pid's latest process is in the
    /// list (kept after it exits: another CPU's ring may hold its last
    /// samples, drained after the exit).
    pub(super) processes: Vec<api::ProcessSamples>,
    process_index: HashMap<u32, usize>,
    /// Addresses of new stacks not yet named.
    pub(super) pending: foldhash::HashSet<u64>,
    scratch: Vec<u64>,
    /// The Python frames in the stacks, and a stack with them in place.
    pub(super) python: PyFrames,
    merged: Vec<u64>,
    /// Thread names by tid.
    pub(super) threads: foldhash::HashMap<u32, String>,
    /// The process of each thread sampled.
    pub(super) thread_pid: foldhash::HashMap<u32, u32>,
    /// Stack indices sampled lately, for windowed figures.
    pub(super) recent: Recent,
    /// The stack index of each sample since the last view, which adds only
    /// those stacks to its running counts; `None` before the first view and
    /// once more samples came than the table holds stacks (counting every
    /// stack again is then as cheap).
    pub(super) since_view: Option<Vec<u32>>,
    /// Each sample's time, when the session keeps them.
    pub(super) timeline: Option<Times>,
    /// Off-CPU and wall sessions: per thread, the nanoseconds no record
    /// tells (`TimeTotals::unknown_ns`).
    pub(super) unknown: foldhash::HashMap<u32, u64>,
    /// Continuous profiling: the totals of each process's own samples, so
    /// that a window's services have theirs (see [`PidTotals`]).
    pub(super) pid_totals: Option<foldhash::HashMap<u32, PidTotals>>,
}

/// The totals that belong to one process's samples (of `api::Totals`):
/// stacks truncated, stack copies that ended first, interpreter frames
/// not readable. The others (lost, discarded, throttled, over the stack
/// limit) are the rings' and the table's, of no one process.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PidTotals {
    pub truncated: u64,
    pub truncated_copy_ended: u64,
    pub python_unreadable: u64,
    pub ruby_unreadable: u64,
    pub perl_unreadable: u64,
}

impl PidTotals {
    /// Adds these to `t`.
    pub fn add_to(&self, t: &mut api::Totals) {
        t.truncated += self.truncated;
        t.truncated_copy_ended += self.truncated_copy_ended;
        t.python_unreadable += self.python_unreadable;
        t.ruby_unreadable += self.ruby_unreadable;
        t.perl_unreadable += self.perl_unreadable;
    }
}

/// Samples kept for the next view at least (with fewer stacks than this).
const SINCE_VIEW_MIN: usize = 1024;

/// What counting a batch's samples gave.
#[derive(Default)]
struct Counted {
    /// Samples (or waits) of the batch, whatever their weight.
    stacks: u64,
    /// Their weights, attributed and of unchecked processes.
    attributed: u64,
    unchecked: u64,
    addresses: NewAddresses,
}

/// The addresses of the stacks a batch added to the table.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NewAddresses {
    /// Already named, or already queued for naming.
    pub known: u64,
    /// Queued for naming now.
    pub queued: u64,
}

impl Ingest {
    /// The counts of a session of process `pid` (named `comm`), whose
    /// mappings are `maps` now; `stack_copy`: its samples carry user stacks
    /// to unwind; at most `max_stacks` unique stacks; `recheck` is asked
    /// after each exec of one of its processes; `tops` (from subscribing)
    /// learns how far up its threads' stacks their walks read.
    pub fn new(
        pid: u32,
        comm: String,
        maps: ProcessMaps,
        stacks: Stacks,
        max_stacks: usize,
        recheck: Option<Recheck>,
        tops: Option<StackTops>,
    ) -> Ingest {
        Ingest {
            max_stacks,
            held: false,
            recheck,
            tops,
            stack_bytes: 0,
            unchecked: foldhash::HashSet::default(),
            stacks: StackTable::default(),
            totals: api::Totals::default(),
            counted: 0,
            spaces: Spaces::new(pid, maps, stacks),
            processes: vec![api::ProcessSamples {
                pid,
                comm,
                ..Default::default()
            }],
            process_index: HashMap::from([(pid, 0)]),
            pending: foldhash::HashSet::default(),
            scratch: Vec::new(),
            python: PyFrames::default(),
            merged: Vec::new(),
            threads: foldhash::HashMap::default(),
            thread_pid: foldhash::HashMap::default(),
            recent: Recent::default(),
            since_view: None,
            timeline: None,
            unknown: Default::default(),
            pid_totals: None,
        }
    }

    /// The counts of every process on the host (continuous profiling): no
    /// target, each process's space opened when it is first seen; samples of
    /// the processes marked with [`Ingest::exclude`] count as `unchecked`.
    pub fn every(stacks: Stacks, max_stacks: usize, tops: Option<StackTops>) -> Ingest {
        let mut ingest = Ingest::new(
            0,
            String::new(),
            ProcessMaps::default(),
            stacks,
            max_stacks,
            None,
            tops,
        );
        ingest.spaces = Spaces::every(stacks);
        ingest.processes.clear();
        ingest.process_index.clear();
        ingest.pid_totals = Some(Default::default());
        ingest
    }

    /// Process `pid`'s totals, when they are kept.
    fn of_pid(&mut self, pid: u32) -> Option<&mut PidTotals> {
        Some(self.pid_totals.as_mut()?.entry(pid).or_default())
    }

    /// Leave out `pid` (and the processes it forks from now on): its
    /// samples count as `unchecked`, its mappings are not read.
    pub fn exclude(&mut self, pid: u32) {
        self.unchecked.insert(pid);
    }

    /// Count `pid` again (see [`Ingest::exclude`]).
    pub fn include(&mut self, pid: u32) {
        self.unchecked.remove(&pid);
    }

    /// Start counting anew, keeping the address spaces and thread names
    /// (continuous profiling, at the end of each window); the stacks
    /// counted so far are returned.
    pub fn restart(&mut self) -> StackTable {
        let stacks = std::mem::take(&mut self.stacks);
        self.totals = api::Totals::default();
        self.processes.clear();
        self.process_index.clear();
        self.pending.clear();
        let sampled = &self.thread_pid;
        self.threads.retain(|tid, _| sampled.contains_key(tid));
        self.thread_pid.clear();
        self.recent = Recent::default();
        self.since_view = None;
        stacks
    }

    /// Where `pid` is in the process list; with no target (every process),
    /// a process not listed yet is added.
    fn process_of(&mut self, pid: u32) -> Option<usize> {
        if let Some(&i) = self.process_index.get(&pid) {
            return Some(i);
        }
        self.spaces.of_every_process().then(|| {
            self.process_index.insert(pid, self.processes.len());
            self.processes.push(api::ProcessSamples {
                pid,
                ..Default::default()
            });
            self.processes.len() - 1
        })
    }

    /// Keep at most `max` unique stacks from now on (those kept already
    /// stay); further new stacks count under [`STACK_LIMIT_FRAME`].
    pub fn set_max_stacks(&mut self, max: usize) {
        self.max_stacks = max;
    }

    /// While `held`, keep no more unique stacks than are kept now, or
    /// [`CAPPED_STACKS`] when fewer (as a continuous window): the samples
    /// of further new stacks count under [`STACK_LIMIT_FRAME`] (the daemon
    /// is near its memory ceiling).
    pub fn hold_stacks(&mut self, held: bool) {
        self.held = held;
    }

    /// The sampler's stack tops of a new ring group.
    pub(super) fn set_tops(&mut self, tops: Option<StackTops>) {
        self.tops = tops;
    }

    /// The stack table.
    pub fn stacks(&self) -> &StackTable {
        &self.stacks
    }

    /// The session's totals (`unsymbolized` is the actor's).
    pub fn totals(&self) -> &api::Totals {
        &self.totals
    }

    /// Count a batch; addresses of new stacks that are not `named` are
    /// queued for naming. Err when a process of the session exec'd a
    /// program its owner may not profile (the batch is then dropped: its
    /// samples are discarded). A process gone before its exec could be
    /// checked is no reason to fail: its samples from then on (and its
    /// children's) count as `unchecked`.
    pub fn apply(
        &mut self,
        mut batch: Batch,
        named: impl Fn(u64) -> bool,
    ) -> Result<NewAddresses, Refused> {
        self.counted += batch.counted;
        self.spaces.next_batch();
        if let Some((pid, comm)) = batch.exec.take() {
            if let Err(why) = self.exec(pid, comm, batch.exec_time) {
                self.totals.discarded += batch.seen;
                return Err(why);
            }
        }
        self.threads.extend(batch.comms.drain(..));
        self.forks_and_mappings(&mut batch.forks, &mut batch.mappings);
        if let Some(why) = self.spaces.take_out_of_fds() {
            self.totals.discarded += batch.seen;
            return Err(why.into());
        }
        if let Some(time) = batch.time.take() {
            *self.totals.time.get_or_insert_with(Default::default) += time;
        }
        for (tid, ns) in batch.unknown.drain(..) {
            *self.unknown.entry(tid).or_default() += ns;
        }
        let counted = self.samples(&batch, &named);
        self.exits(batch.exits.drain(..));
        self.totals.attributed += counted.attributed;
        self.totals.unchecked += counted.unchecked;
        self.totals.discarded += batch.seen.saturating_sub(counted.stacks);
        self.totals.lost += batch.lost;
        self.totals.throttled += batch.throttled;
        self.totals.truncated += batch.truncated.len() as u64;
        for &pid in &batch.truncated {
            if let Some(t) = self.of_pid(pid) {
                t.truncated += 1;
            }
        }
        batch.recycle();
        Ok(counted.addresses)
    }

    /// Process `pid` exec'd `comm` at `time`: checked again (Err: its owner
    /// may not profile it), marked, renamed, its address space new.
    fn exec(&mut self, pid: u32, comm: String, time: u64) -> Result<(), Refused> {
        if let Some(recheck) = &self.recheck {
            match recheck(pid) {
                Check::Allowed => {
                    self.unchecked.remove(&pid);
                }
                Check::Gone => {
                    self.unchecked.insert(pid);
                }
                Check::Denied(why) => return Err(Refused::Exec { comm, why }),
            }
        }
        if let Some(t) = &mut self.timeline {
            t.mark(time, pid, MarkerKind::Exec(comm.clone()));
        }
        if let Some(&i) = self.process_index.get(&pid) {
            self.processes[i].comm = comm;
        }
        if !self.unchecked.contains(&pid) {
            self.spaces.exec(pid);
        }
        Ok(())
    }

    /// A batch's forks and new mappings, in the order they happened (the
    /// demux hands them over ring by ring): a child starts with the
    /// mappings its parent made before the fork, such as those of the
    /// program it had just exec'd, and no later ones.
    fn forks_and_mappings(
        &mut self,
        forks: &mut Vec<(u32, u32, u64)>,
        mappings: &mut Vec<(u32, Mapping, u64)>,
    ) {
        forks.sort_by_key(|&(_, _, time)| time);
        mappings.sort_by_key(|&(_, _, time)| time);
        let mut mappings = mappings.drain(..).peekable();
        for (child, parent, time) in forks.drain(..) {
            let before = std::iter::from_fn(|| mappings.next_if(|m| m.2 < time));
            self.mappings(before.map(|(pid, m, _)| (pid, m)));
            self.fork(child, parent);
        }
        self.mappings(mappings.map(|(pid, m, _)| (pid, m)));
    }

    /// A new process `child` of `parent`: it has its parent's address space
    /// and name, or is unchecked as its parent is.
    fn fork(&mut self, child: u32, parent: u32) {
        if self.unchecked.contains(&parent) {
            self.unchecked.insert(child);
            return;
        }
        self.unchecked.remove(&child);
        self.spaces.fork(child, parent);
        let comm = self
            .process_index
            .get(&parent)
            .map(|&i| self.processes[i].comm.clone())
            .unwrap_or_default();
        self.process_index.insert(child, self.processes.len());
        self.processes.push(api::ProcessSamples {
            pid: child,
            ppid: parent,
            comm,
            ..Default::default()
        });
    }

    /// New mappings, by process, added to the address spaces of the
    /// processes that are checked.
    fn mappings(&mut self, mappings: impl Iterator<Item = (u32, Mapping)>) {
        let mut by_pid: HashMap<u32, Vec<Mapping>> = HashMap::new();
        for (pid, m) in mappings {
            if !self.unchecked.contains(&pid) {
                by_pid.entry(pid).or_default().push(m);
            }
        }
        for (pid, mappings) in by_pid {
            self.spaces.insert(pid, mappings.into_iter());
        }
    }

    /// Processes that exited (pid, time): marked, their address spaces let
    /// go of once their last samples are in.
    fn exits(&mut self, exits: impl Iterator<Item = (u32, u64)>) {
        for (pid, time) in exits {
            if let Some(t) = &mut self.timeline {
                t.mark(time, pid, MarkerKind::Exit);
            }
            if let Some(&i) = self.process_index.get(&pid) {
                self.processes[i].exited = true;
            }
            self.spaces.exit(pid);
        }
    }

    /// Count the batch's samples (or waits) into the stack table.
    fn samples(&mut self, batch: &Batch, named: &impl Fn(u64) -> bool) -> Counted {
        let mut counted = Counted::default();
        let weighted = !batch.weights.is_empty();
        if weighted {
            // The running counts add one per stack index since the last
            // view: after weighted stacks they are counted again whole, so
            // no index is kept.
            self.since_view = None;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut merged = std::mem::take(&mut self.merged);
        let mut marked = Vec::new();
        // The samples of a batch were read together: one time for all.
        if !batch.ends.is_empty() {
            self.recent.start(Instant::now());
        }
        // Consecutive samples are mostly of the same process and thread.
        let (mut last_pid, mut space, mut process) = (None, 0, None);
        let (mut last_tid, mut checked) = (None, true);
        // Samples of processes not set up yet (see `setup_budget`).
        let (mut set_up, mut waiting) = (true, 0u64);
        for sample in batch.samples() {
            if last_pid != Some(sample.pid) {
                last_pid = Some(sample.pid);
                checked = !self.unchecked.contains(&sample.pid);
                if checked {
                    space = self.spaces.open(sample.pid);
                    set_up = self.spaces.is_set_up(space);
                    process = self.process_of(sample.pid);
                }
            }
            counted.stacks += 1;
            let weight = sample.weight;
            if !checked {
                counted.unchecked += weight;
                continue;
            }
            counted.attributed += weight;
            if !set_up {
                waiting += 1;
            }
            let stack = self.user_stack(&sample, space, &mut scratch);
            let stack = match self.spaces.interpreter(space, sample.pid) {
                None => stack,
                Some(process) => {
                    let plain = |a| spaces::untag(a).1;
                    let (tid, time) = (sample.tid, sample.time);
                    let record = || {
                        let probe = crate::os::bpf::PythonProbe::get().ok()?;
                        probe.record(tid, time)
                    };
                    let runtime = process.runtime();
                    let python = &mut self.python;
                    match python.merge(process, time, record, stack, plain, &mut merged) {
                        Merged::Native => stack,
                        Merged::Interpreted => &merged[..],
                        Merged::Unreadable => {
                            let (t, own) = (&mut self.totals, self.pid_totals.as_mut());
                            let own = own.map(|m| m.entry(sample.pid).or_default());
                            let (all, one) = match runtime {
                                Runtime::Python => (
                                    &mut t.python_unreadable,
                                    own.map(|o| &mut o.python_unreadable),
                                ),
                                Runtime::Ruby => {
                                    (&mut t.ruby_unreadable, own.map(|o| &mut o.ruby_unreadable))
                                }
                                Runtime::Perl => {
                                    (&mut t.perl_unreadable, own.map(|o| &mut o.perl_unreadable))
                                }
                            };
                            *all += weight;
                            if let Some(one) = one {
                                *one += weight;
                            }
                            &merged[..]
                        }
                    }
                }
            };
            // A wait's stack begins with what kind of wait it was.
            let stack = match sample.mark {
                Mark::OnCpu => stack,
                kind => {
                    marked.clear();
                    marked.extend_from_slice(stack);
                    marked.push(match kind {
                        Mark::Runnable => RUNNABLE_FRAME,
                        _ => BLOCKED_FRAME,
                    });
                    &marked[..]
                }
            };
            let index = self.add(sample.tid, stack, weight, named, &mut counted.addresses);
            self.remember(index, weight, weighted, sample.time);
            if last_tid != Some(sample.tid) {
                last_tid = Some(sample.tid);
                self.name_thread(sample.pid, sample.tid);
            }
            if let Some(i) = process {
                self.processes[i].samples += weight;
            }
        }
        self.scratch = scratch;
        self.merged = merged;
        self.spaces.count_waiting(waiting);
        counted
    }

    /// The stack of a sample in address space `space`, as the table keeps
    /// it. Frame-pointer stacks of the target's first program are used as
    /// they came, but in Go code: there the caller the kernel's walk skips
    /// below a function without a frame is put back, and what it read
    /// above the outermost frame dropped. Others are unwound and/or tagged
    /// with their space in `scratch`.
    fn user_stack<'s>(
        &mut self,
        sample: &SampleView<'s>,
        space: usize,
        scratch: &'s mut Vec<u64>,
    ) -> &'s [u64] {
        let stack_copy = self.spaces.stack_copy;
        let unwinder = match stack_copy {
            true => self.spaces.unwinder(space),
            false => &mut self.spaces.list[space].unwinder,
        };
        let (mut frames, mut skipped) = (sample.frames, None);
        if !stack_copy && unwinder.knows_go(frames) {
            if let Some(len) = unwinder.go_stack_len(frames) {
                frames = &frames[..len];
            }
            if let Some((_, bytes)) = sample.user {
                skipped = go_skipped(frames, unwinder, bytes);
            }
        }
        if !stack_copy && skipped.is_none() && frames.len() == sample.frames.len() && space == 0 {
            return sample.frames;
        }
        scratch.clear();
        scratch.extend_from_slice(frames);
        if let Some((at, caller)) = skipped {
            scratch.insert(at, caller);
        }
        match sample.user {
            Some(([ip, sp, bp], bytes)) if stack_copy && ip != 0 => {
                let walk = unwinder.unwind(ip, sp, bp, bytes, scratch);
                let ended = walk == Walk::CopyEnded && bytes.len() >= self.stack_bytes;
                if walk.truncated() {
                    self.totals.truncated += 1;
                }
                if ended {
                    self.totals.truncated_copy_ended += 1;
                }
                if let Some(t) = self.of_pid(sample.pid) {
                    t.truncated += u64::from(walk.truncated());
                    t.truncated_copy_ended += u64::from(ended);
                }
                if let Some(tops) = &self.tops {
                    match walk {
                        Walk::Complete { reach } => tops.learn(sample.tid, reach),
                        Walk::Truncated | Walk::CopyEnded => tops.forget(sample.tid),
                    }
                }
            }
            _ => {}
        }
        if space != 0 {
            for a in scratch.iter_mut() {
                *a = spaces::tag(space, *a);
            }
        }
        scratch
    }

    /// Add `weight` samples of `stack` (thread `tid`) to the table, within
    /// its unique-stack limit (over it: under [`STACK_LIMIT_FRAME`]); the
    /// addresses of a new stack not yet `named` are queued. Its index.
    fn add(
        &mut self,
        tid: u32,
        stack: &[u64],
        weight: u64,
        named: &impl Fn(u64) -> bool,
        addresses: &mut NewAddresses,
    ) -> u32 {
        let cap = if self.held {
            self.max_stacks.min(self.stacks.len().max(CAPPED_STACKS))
        } else {
            self.max_stacks
        };
        let (stack, (index, new)) = match self.stacks.add_within(tid, stack, weight, cap) {
            Some(added) => (stack, added),
            None => {
                self.totals.overflowed += weight;
                let limit = &[STACK_LIMIT_FRAME][..];
                (limit, self.stacks.add(0, limit, weight))
            }
        };
        if new {
            let before = self.pending.len();
            self.pending
                .extend(stack.iter().copied().filter(|&a| !named(a)));
            let queued = (self.pending.len() - before) as u64;
            addresses.queued += queued;
            addresses.known += stack.len() as u64 - queued;
        }
        index as u32
    }

    /// Keep a sample of stack `index` for windowed figures, the timeline
    /// and the next view's running counts.
    fn remember(&mut self, index: u32, weight: u64, weighted: bool, time: u64) {
        if weighted {
            self.recent.push_weighted(index, weight);
        } else {
            self.recent.push(index);
        }
        if let Some(t) = &mut self.timeline {
            t.push(time, index);
        }
        if let Some(indices) = &mut self.since_view {
            if indices.len() < self.stacks.len().max(SINCE_VIEW_MIN) {
                indices.push(index);
            } else {
                self.since_view = None;
            }
        }
    }

    /// Read the name of a thread not seen before; a thread gone by then
    /// (a short-lived child, forked without exec) has its process's command
    /// name, which a thread or child inherits when no COMM record renames
    /// it.
    fn name_thread(&mut self, pid: u32, tid: u32) {
        self.thread_pid.insert(tid, pid);
        if self.threads.contains_key(&tid) {
            return;
        }
        // A thread gone is not looked up (see `maps::alive`).
        let name = crate::process::maps::alive(tid)
            .then(|| std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).ok())
            .flatten()
            .map(|s| s.trim_end().to_string())
            .or_else(|| {
                let &i = self.process_index.get(&pid)?;
                Some(self.processes[i].comm.clone())
            })
            .unwrap_or_default();
        self.threads.insert(tid, name);
    }
}

/// The caller a frame-pointer stack (`frames`, innermost first) lacks when
/// it was sampled in Go code without a frame: where it goes in `frames`, and
/// the frame (return address minus one), read from the `stack` bytes copied
/// at sp. None when the stack has it.
fn go_skipped(frames: &[u64], unwinder: &mut Unwinder, stack: &[u8]) -> Option<(usize, u64)> {
    let at = frames.iter().position(|&a| !is_kernel(a))?;
    let caller = unwinder.go_return_address(frames[at], stack)? - 1;
    (frames.get(at + 1) != Some(&caller)).then_some((at + 1, caller))
}

#[cfg(test)]
#[path = "ingest_tests.rs"]
mod tests;
