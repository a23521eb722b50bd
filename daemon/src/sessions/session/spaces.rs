//! A session's address spaces: the target's, a new one at each exec, one per
//! child it forks. Each has its mappings (for names) and unwinder (for stack
//! copies); user addresses of stacks are tagged with their space so that the
//! same address in two programs never means the same code. With every
//! process (continuous profiling), a space is set up (its files opened, its
//! /proc entry read) only once a sample of it comes, within the CPU budget
//! of `setup_budget`.
use super::setup_budget::{Budget, BUDGET};
use crate::os::fds::OutOfFds;
use crate::os::perf::Stacks;
use crate::process::interpreted::Interpreted;
use crate::process::maps::{Mapping, ProcessMaps};
use crate::process::symbolize::is_kernel;
use crate::process::unwind::Unwinder;
use crate::sampling::BAD_USER_FRAME;
use std::collections::HashMap;

/// User addresses are below 2^47; the space is kept in bits 48 to 62.
const TAG_SHIFT: u32 = 48;
const ADDR_MASK: u64 = (1 << TAG_SHIFT) - 1;
/// Spaces beyond this many share the last one's tag (their names may then
/// be those of another program).
const MAX_SPACES: usize = 0x7fff;

/// Batches counted after the one with a process's exit before its space
/// lets go of its unwinder and /proc entry: samples read from other CPUs'
/// rings may still come in the next batch.
const EXIT_GRACE: u64 = 2;

/// Unwinders holding a rule cache (about 16 KiB each) at once: with every
/// process on the host sampled, one cache each would be megabytes; those
/// walked most keep theirs, a process sampled now and then makes one anew.
const MAX_CACHES: usize = 64;

/// When a new space is set up (see [`Space`]'s `set_up`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SetUp {
    Now,
    /// With every process: not before it is sampled.
    WhenSampled,
}

/// One address space.
pub struct Space {
    pub maps: ProcessMaps,
    pub unwinder: Unwinder,
    /// No process runs in it any more (it exited or exec'd).
    retired: bool,
    /// Walked since its cache last had a second chance (see
    /// [`Spaces::unwinder`]).
    walked: bool,
    /// Its files opened and its mappings known to its unwinder. With every
    /// process, not before it is sampled: till then its mappings are only
    /// those forks and MMAP2 records told.
    set_up: bool,
    /// Sampled, and waiting for the budget to be set up.
    waiting: bool,
    /// Whether it runs CPython, CRuby or Perl: once a sample of it asked,
    /// or for the target, before its first sample.
    python: Python,
}

/// Whether a space's process runs an interpreter whose frames profd reads.
enum Python {
    /// Not looked at since its mappings last changed.
    Unknown,
    No,
    Yes(Box<dyn Interpreted + Send>),
}

/// The spaces of a session; space 0 is the target's at attach. A space no
/// process uses any more (its process exec'd or exited) keeps only its
/// mappings, to name its addresses; the files they map are held once per
/// session.
pub struct Spaces {
    pub list: Vec<Space>,
    /// The current space of each process of the session (kept after it
    /// exits: its last samples may come in after the exit).
    by_pid: HashMap<u32, usize>,
    /// The session's samples carry user stacks to unwind (else
    /// frame-pointer callchains, with the few bytes at sp that Go code needs).
    pub stack_copy: bool,
    /// The session's target: its last space is kept when the session ends.
    target: u32,
    /// Batches counted so far, and the spaces of processes that exited at
    /// which batch, to be let go of after [`EXIT_GRACE`] more.
    batches: u64,
    exited: Vec<(usize, u64)>,
    /// Why the session must fail: descriptors ran out opening a process's
    /// files or /proc entry.
    out_of_fds: Option<OutOfFds>,
    /// Spaces of every process (continuous profiling): a process not seen
    /// before gets a space from its mappings then.
    every: bool,
    /// Spaces whose unwinder made a rule cache, oldest first.
    cached: std::collections::VecDeque<usize>,
    /// With every process: the spaces sampled before they could be set up
    /// (the budget was spent), with their process, oldest first.
    waiting: std::collections::VecDeque<(u32, usize)>,
    /// The CPU budget of setting processes up.
    budget: &'static Budget,
    /// The unwind cache's eviction epoch when the unwinders last let go of
    /// the tables it evicted.
    epoch: u64,
}

/// Tag user address `addr` with space `space` (space 0 and kernel addresses
/// are left as they are).
pub fn tag(space: usize, addr: u64) -> u64 {
    if space == 0 || addr == BAD_USER_FRAME || is_kernel(addr) {
        addr
    } else {
        (addr & ADDR_MASK) | ((space.min(MAX_SPACES) as u64) << TAG_SHIFT)
    }
}

/// The space and plain address of a (possibly tagged) address.
pub fn untag(addr: u64) -> (usize, u64) {
    if is_kernel(addr) {
        (0, addr)
    } else {
        ((addr >> TAG_SHIFT) as usize, addr & ADDR_MASK)
    }
}

impl Spaces {
    /// The target's space from its current mappings.
    pub fn new(pid: u32, maps: ProcessMaps, stacks: Stacks) -> Spaces {
        let mut spaces = Spaces {
            list: Vec::new(),
            by_pid: HashMap::new(),
            stack_copy: stacks == Stacks::Copied,
            target: pid,
            batches: 0,
            exited: Vec::new(),
            out_of_fds: None,
            every: false,
            cached: Default::default(),
            waiting: Default::default(),
            budget: &BUDGET,
            epoch: crate::process::unwind::epoch(),
        };
        spaces.add(pid, maps, SetUp::Now);
        spaces
    }

    /// The interpreter the target's space runs, found (and registered with
    /// the sample-time reader) before its first sample.
    pub fn read_from_start(&mut self, interpreter: Box<dyn Interpreted + Send>) {
        if let Some(space) = self.list.first_mut() {
            space.python = Python::Yes(interpreter);
        }
    }

    /// The spaces of every process of the host, each added when first
    /// seen; space 0 is empty (no target).
    pub fn every(stacks: Stacks) -> Spaces {
        Spaces {
            every: true,
            ..Spaces::new(0, ProcessMaps::default(), stacks)
        }
    }

    /// Whether these are the spaces of every process ([`Spaces::every`]).
    pub fn of_every_process(&self) -> bool {
        self.every
    }

    /// The current space of `pid`, for its samples; with [`Spaces::every`],
    /// a process not seen before gets one, and a space not set up yet is
    /// set up now, if the budget allows (else at a later batch).
    pub fn open(&mut self, pid: u32) -> usize {
        match self.by_pid.get(&pid) {
            Some(&i) => {
                if !self.list[i].set_up && !self.list[i].retired {
                    self.set_up(pid, i);
                }
                i
            }
            None if self.every && pid != 0 => {
                let i = self.add(pid, ProcessMaps::default(), SetUp::WhenSampled);
                self.set_up(pid, i);
                i
            }
            None => 0,
        }
    }

    /// Whether space `i` is set up (else its stacks are walked by frame
    /// pointers only).
    pub fn is_set_up(&self, i: usize) -> bool {
        self.list[i].set_up
    }

    /// `n` samples of spaces not set up were counted.
    pub fn count_waiting(&self, n: u64) {
        if n > 0 {
            self.budget.deferred_samples(n);
        }
    }

    /// Set up space `i` of `pid` if the budget allows, else queue it: its
    /// mappings read from /proc (those forks and MMAP2 records told if it
    /// is gone), their files opened, made known to its unwinder.
    fn set_up(&mut self, pid: u32, i: usize) {
        if !self.budget.allows() {
            if !std::mem::replace(&mut self.list[i].waiting, true) {
                self.waiting.push_back((pid, i));
                self.budget.defer();
            }
            return;
        }
        let budget = self.budget;
        let space = &mut self.list[i];
        let why = budget.measure(|| match ProcessMaps::read_for_session(pid, &space.maps) {
            Ok(maps) if !maps.is_empty() => {
                space.maps = maps;
                None
            }
            Ok(_) => {
                space.maps.resolve_new(pid);
                space.maps.short_of_fds(pid)
            }
            Err(why) => Some(why),
        });
        if let Some(why) = why {
            self.out_of_fds.get_or_insert(why);
        }
        for m in space.maps.iter() {
            space.unwinder.add_mapping(m);
        }
        space.set_up = true;
        space.waiting = false;
    }

    /// Spaces in use: those of processes that still run (or exited within
    /// the grace). With [`Spaces::every`], after every address of the
    /// spaces was named: the others are dropped and the rest renumbered
    /// (their addresses' tags change).
    pub fn compact(&mut self) {
        let mut old: Vec<Option<Space>> = std::mem::take(&mut self.list)
            .into_iter()
            .map(Some)
            .collect();
        let mut kept = vec![old[0].take().expect("space 0 is always there")];
        let mut renumbered: HashMap<usize, usize> = HashMap::new();
        let mut by_pid = HashMap::with_capacity(self.by_pid.len());
        for (&pid, &i) in &self.by_pid {
            let j = match (i, renumbered.get(&i)) {
                (0, _) => 0,
                (_, Some(&j)) => j,
                _ => match old[i].take() {
                    Some(space) if !space.retired => {
                        kept.push(space);
                        renumbered.insert(i, kept.len() - 1);
                        kept.len() - 1
                    }
                    _ => continue,
                },
            };
            by_pid.insert(pid, j);
        }
        self.exited = self
            .exited
            .iter()
            .filter_map(|&(i, at)| renumbered.get(&i).map(|&j| (j, at)))
            .collect();
        self.waiting = self
            .waiting
            .iter()
            .filter_map(|&(pid, i)| renumbered.get(&i).map(|&j| (pid, j)))
            .collect();
        self.cached = self
            .cached
            .iter()
            .filter_map(|&i| match i {
                0 => Some(0),
                i => renumbered.get(&i).copied(),
            })
            .collect();
        self.by_pid = by_pid;
        self.list = kept;
    }

    /// Let go of the mappings of spaces no process runs in any more (their
    /// addresses are all named); returns them.
    pub fn release_retired(&mut self) -> Vec<usize> {
        let waiting: std::collections::HashSet<usize> =
            self.exited.iter().map(|&(i, _)| i).collect();
        let mut released = Vec::new();
        for (i, space) in self.list.iter_mut().enumerate().skip(1) {
            if space.retired && !space.maps.is_empty() && !waiting.contains(&i) {
                space.maps = ProcessMaps::default();
                released.push(i);
            }
        }
        released
    }

    /// The unwinder of space `i`, to walk a stack with, within the budget
    /// of [`MAX_CACHES`] rule caches: past it, the oldest cache goes, but
    /// for one walked since it was last looked at, which has a second
    /// chance (the clock algorithm).
    pub fn unwinder(&mut self, i: usize) -> &mut Unwinder {
        if !self.list[i].unwinder.has_cache() && self.cached.back() != Some(&i) {
            self.cached.push_back(i);
        }
        self.list[i].walked = true;
        while self.cached.len() > MAX_CACHES {
            let Some(old) = self.cached.pop_front() else {
                break;
            };
            let Some(space) = self.list.get_mut(old) else {
                continue;
            };
            if !space.unwinder.has_cache() && old != i {
                continue;
            }
            if std::mem::take(&mut space.walked) {
                self.cached.push_back(old);
            } else {
                space.unwinder.drop_cache();
            }
        }
        let space = &mut self.list[i];
        if space.set_up && space.unwinder.jit_due() {
            if let Some(table) = space.maps.jit_dump().filter(|t| !t.is_empty()) {
                space.unwinder.add_jit_code(table);
            }
        }
        &mut self.list[i].unwinder
    }

    /// Spaces held now.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Let go of what space `i` needs only while a process runs in it: its
    /// unwinder and /proc entry (not the last space when spaces overflowed:
    /// processes share it).
    fn retire(&mut self, i: usize) {
        if i + 1 == MAX_SPACES {
            return;
        }
        if let Some(space) = self.list.get_mut(i) {
            space.unwinder = Unwinder::default();
            space.maps.release_process();
            space.retired = true;
            space.python = Python::No;
        }
    }

    /// A new batch is being counted: retire the spaces of processes that
    /// exited [`EXIT_GRACE`] batches ago.
    pub fn next_batch(&mut self) {
        self.batches += 1;
        let now = self.batches;
        let (due, wait): (Vec<_>, Vec<_>) = self
            .exited
            .drain(..)
            .partition(|&(_, at)| at + EXIT_GRACE <= now);
        self.exited = wait;
        for (i, _) in due {
            self.retire(i);
        }
        // Tables the unwind cache evicted while used here are let go of
        // (and read again when a walk needs them).
        let epoch = crate::process::unwind::epoch();
        if epoch != self.epoch {
            self.epoch = epoch;
            for space in &mut self.list {
                space.unwinder.drop_evicted();
            }
        }
        // The spaces sampled before the budget allowed, as far as it does
        // now (those gone or replaced meanwhile are not).
        while !self.waiting.is_empty() && self.budget.allows() {
            let Some((pid, i)) = self.waiting.pop_front() else {
                break;
            };
            let space = &self.list[i];
            if self.by_pid.get(&pid) == Some(&i) && !space.set_up && !space.retired {
                self.set_up(pid, i);
            }
        }
    }

    /// `pid` exited: its space is retired after [`EXIT_GRACE`] batches.
    pub fn exit(&mut self, pid: u32) {
        if let Some(&i) = self.by_pid.get(&pid) {
            self.exited.push((i, self.batches));
        }
    }

    /// Set processes up within `budget` (not the daemon's).
    #[cfg(test)]
    pub fn set_budget(&mut self, budget: &'static Budget) {
        self.budget = budget;
    }

    /// Why the session must fail, once: a process's files or /proc entry
    /// could not be opened for want of descriptors.
    pub fn take_out_of_fds(&mut self) -> Option<OutOfFds> {
        self.out_of_fds.take()
    }

    /// A new space of `pid` with `maps`, set up as `set_up` says.
    fn add(&mut self, pid: u32, maps: ProcessMaps, set_up: SetUp) -> usize {
        let mut unwinder = Unwinder::of_process(pid);
        let set_up = set_up == SetUp::Now;
        if set_up {
            for m in maps.iter() {
                unwinder.add_mapping(m);
            }
        }
        if self.list.len() >= MAX_SPACES {
            let last = self.list.len() - 1;
            self.by_pid.insert(pid, last);
            return last;
        }
        self.list.push(Space {
            maps,
            unwinder,
            retired: false,
            walked: false,
            set_up,
            waiting: false,
            python: Python::Unknown,
        });
        let index = self.list.len() - 1;
        self.by_pid.insert(pid, index);
        index
    }

    /// The interpreter (CPython, CRuby or Perl) that space `i` (of process
    /// `pid`) runs, if any; looked for once its mappings are known, and
    /// again when new ones arrive.
    pub fn interpreter(&mut self, i: usize, pid: u32) -> Option<&mut dyn Interpreted> {
        let space = self.list.get_mut(i)?;
        if matches!(space.python, Python::Unknown) && space.set_up && !space.retired {
            space.python = match interpreter_of(pid, &space.maps) {
                Some(p) => Python::Yes(p),
                None => Python::No,
            };
        }
        match &mut space.python {
            Python::Yes(p) => Some(&mut **p),
            _ => None,
        }
    }

    /// The current space of `pid` (the target's first space if unknown).
    pub fn of(&self, pid: u32) -> usize {
        self.by_pid.get(&pid).copied().unwrap_or(0)
    }

    /// The mappings of space `space` (the last space's for a tag past the
    /// list).
    pub fn maps(&self, space: usize) -> &ProcessMaps {
        &self.list[space.min(self.list.len() - 1)].maps
    }

    /// `child` was forked by `parent`: it starts with a copy of its space
    /// (with every process, set up when it is sampled; nothing when the
    /// parent has no space: it is read when the child is sampled).
    pub fn fork(&mut self, child: u32, parent: u32) {
        if self.every {
            match self.by_pid.get(&parent) {
                Some(&p) => {
                    let maps = self.list[p].maps.forked();
                    self.add(child, maps, SetUp::WhenSampled);
                }
                None => {
                    self.by_pid.remove(&child);
                }
            }
            return;
        }
        let parent = self.open(parent);
        let maps = self.list[parent].maps.forked();
        self.add(child, maps, SetUp::Now);
    }

    /// `pid` exec'd: a new space from its mappings now (later ones arrive as
    /// MMAP2 records); with every process, from the MMAP2 records alone
    /// until it is sampled. The old space stays for the stacks sampled in
    /// it.
    pub fn exec(&mut self, pid: u32) {
        if self.every {
            if let Some(old) = self.by_pid.get(&pid).copied() {
                self.retire(old);
            }
            self.add(pid, ProcessMaps::default(), SetUp::WhenSampled);
            return;
        }
        let old = self.of(pid);
        let maps = ProcessMaps::read_for_session(pid, &self.list[old].maps).unwrap_or_else(|why| {
            self.out_of_fds.get_or_insert(why);
            ProcessMaps::default()
        });
        let known = self.by_pid.contains_key(&pid);
        if self.add(pid, maps, SetUp::Now) != old && known {
            self.retire(old);
        }
    }

    /// The session has ended and its addresses are named: close every file,
    /// keep only the mappings of the target's current space and their files'
    /// load segments (histograms read them).
    pub fn release(&mut self) {
        let keep = self.of(self.target);
        for (i, space) in self.list.iter_mut().enumerate() {
            space.unwinder = Unwinder::default();
            space.python = Python::No;
            if i == keep {
                space.maps.release_files();
            } else {
                space.maps = ProcessMaps::default();
            }
        }
        self.by_pid.retain(|&pid, _| pid == self.target);
    }

    /// New mappings of `pid`, files opened and added to its unwinder (with
    /// every process: only kept until it is set up, and not even that for a
    /// process with no space yet, whose mappings are read when it is
    /// sampled).
    pub fn insert(&mut self, pid: u32, mappings: impl Iterator<Item = Mapping>) {
        let space = match self.by_pid.get(&pid) {
            Some(&i) if self.every => i,
            None if self.every => return,
            _ => self.open(pid),
        };
        let s = &mut self.list[space];
        let mut starts = Vec::new();
        for m in mappings {
            starts.push(m.start);
            s.maps.insert(m);
        }
        if matches!(s.python, Python::No) {
            s.python = Python::Unknown; // libpython, libruby or libperl may have come.
        }
        if !s.set_up {
            return;
        }
        // Opens new mappings' files, and a perf map once JIT code appears.
        s.maps.resolve_new(pid);
        for start in starts {
            if let Some(m) = s.maps.find(start) {
                s.unwinder.add_mapping(m);
            }
        }
        if let Some(why) = self.list[space].maps.short_of_fds(pid) {
            self.out_of_fds.get_or_insert(why);
        }
    }
}

#[cfg(test)]
#[path = "spaces_tests.rs"]
mod tests;

/// The interpreter process `pid` (mappings `maps`) runs, registered with
/// the sample-time reader, if it runs one whose frames profd reads:
/// CPython, CRuby or Perl, looked for in that order.
pub fn interpreter_of(pid: u32, maps: &ProcessMaps) -> Option<Box<dyn Interpreted + Send>> {
    use crate::process::{interpreted::FindError, perl, python, ruby};
    fn registered<P: Interpreted + Send + 'static>(
        pid: u32,
        mut p: P,
        version: impl std::fmt::Display,
        register: impl FnOnce(&mut P) -> Result<(), String>,
    ) -> Box<dyn Interpreted + Send> {
        let runtime = p.runtime();
        match register(&mut p) {
            Ok(()) => tracing::debug!(pid, ?runtime, %version, "interpreter frames read"),
            Err(err) => {
                tracing::warn!(pid, ?runtime, %version, %err, "interpreter frames not read")
            }
        }
        Box::new(p)
    }
    let found = || -> Result<_, FindError> {
        if let Some(p) = python::Process::find(pid, maps)? {
            let version = p.interpreter.version;
            return Ok(Some(registered(pid, p, version, python::Process::register)));
        }
        if let Some(p) = ruby::Process::find(pid, maps)? {
            let version = p.interpreter.version;
            return Ok(Some(registered(pid, p, version, ruby::Process::register)));
        }
        Ok(perl::Process::find(pid, maps)?.map(|p| {
            let version = p.interpreter.version;
            registered(pid, p, version, perl::Process::register)
        }))
    };
    found().unwrap_or_else(|err| {
        tracing::debug!(pid, %err, "interpreter not read");
        None
    })
}
