//! A session's address spaces: the target's, a new one at each exec, one per
//! child it forks. Each has its mappings (for names) and unwinder (for stack
//! copies); user addresses of stacks are tagged with their space so that the
//! same address in two programs never means the same code.
use crate::maps::{Mapping, ProcessMaps};
use crate::sampler::BAD_USER_FRAME;
use crate::symbolize::is_kernel;
use crate::unwind::Unwinder;
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

/// One address space.
pub struct Space {
    pub maps: ProcessMaps,
    pub unwinder: Unwinder,
    /// No process runs in it any more (it exited or exec'd).
    retired: bool,
    /// Walked since its cache last had a second chance (see
    /// [`Spaces::unwinder`]).
    walked: bool,
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
    out_of_fds: Option<String>,
    /// Spaces of every process (continuous profiling): a process not seen
    /// before gets a space from its mappings then.
    every: bool,
    /// Spaces whose unwinder made a rule cache, oldest first.
    cached: std::collections::VecDeque<usize>,
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
    pub fn new(pid: u32, maps: ProcessMaps, stack_copy: bool) -> Spaces {
        let mut spaces = Spaces {
            list: Vec::new(),
            by_pid: HashMap::new(),
            stack_copy,
            target: pid,
            batches: 0,
            exited: Vec::new(),
            out_of_fds: None,
            every: false,
            cached: Default::default(),
        };
        spaces.add(pid, maps);
        spaces
    }

    /// The spaces of every process of the host, each added when first
    /// seen; space 0 is empty (no target).
    pub fn every(stack_copy: bool) -> Spaces {
        Spaces {
            every: true,
            ..Spaces::new(0, ProcessMaps::default(), stack_copy)
        }
    }

    /// Whether these are the spaces of every process ([`Spaces::every`]).
    pub fn of_every_process(&self) -> bool {
        self.every
    }

    /// The current space of `pid`; with [`Spaces::every`], a process not
    /// seen before gets one from its mappings now.
    pub fn open(&mut self, pid: u32) -> usize {
        match self.by_pid.get(&pid) {
            Some(&i) => i,
            None if self.every && pid != 0 => {
                let maps = ProcessMaps::read_for_session(pid, &ProcessMaps::default())
                    .unwrap_or_else(|why| {
                        self.out_of_fds.get_or_insert(why);
                        ProcessMaps::default()
                    });
                self.add(pid, maps)
            }
            None => 0,
        }
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
    }

    /// `pid` exited: its space is retired after [`EXIT_GRACE`] batches.
    pub fn exit(&mut self, pid: u32) {
        if let Some(&i) = self.by_pid.get(&pid) {
            self.exited.push((i, self.batches));
        }
    }

    /// Why the session must fail, once: a process's files or /proc entry
    /// could not be opened for want of descriptors.
    pub fn take_out_of_fds(&mut self) -> Option<String> {
        self.out_of_fds.take()
    }

    fn add(&mut self, pid: u32, maps: ProcessMaps) -> usize {
        let mut unwinder = Unwinder::default();
        for m in maps.iter() {
            if self.stack_copy {
                unwinder.add_mapping(m);
            } else {
                unwinder.add_go_mapping(m);
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
        });
        let index = self.list.len() - 1;
        self.by_pid.insert(pid, index);
        index
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

    /// `child` was forked by `parent`: it starts with a copy of its space.
    pub fn fork(&mut self, child: u32, parent: u32) {
        let parent = self.open(parent);
        let maps = self.list[parent].maps.forked();
        self.add(child, maps);
    }

    /// `pid` exec'd: a new space from its mappings now (later ones arrive as
    /// MMAP2 records). The old space stays for the stacks sampled in it.
    pub fn exec(&mut self, pid: u32) {
        let old = self.of(pid);
        let maps = ProcessMaps::read_for_session(pid, &self.list[old].maps).unwrap_or_else(|why| {
            self.out_of_fds.get_or_insert(why);
            ProcessMaps::default()
        });
        let known = self.by_pid.contains_key(&pid);
        if self.add(pid, maps) != old && known {
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
            if i == keep {
                space.maps.release_files();
            } else {
                space.maps = ProcessMaps::default();
            }
        }
        self.by_pid.retain(|&pid, _| pid == self.target);
    }

    /// New mappings of `pid`, files opened and added to its unwinder.
    pub fn insert(&mut self, pid: u32, mappings: impl Iterator<Item = Mapping>) {
        let space = self.open(pid);
        let s = &mut self.list[space];
        let mut starts = Vec::new();
        for m in mappings {
            starts.push(m.start);
            s.maps.insert(m);
        }
        // Opens new mappings' files, and a perf map once JIT code appears.
        s.maps.resolve_new(pid);
        for start in starts {
            if let Some(m) = s.maps.find(start) {
                if self.stack_copy {
                    s.unwinder.add_mapping(m);
                } else {
                    s.unwinder.add_go_mapping(m);
                }
            }
        }
        if let Some(why) = self.list[space].maps.short_of_fds(pid) {
            self.out_of_fds.get_or_insert(why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_keep_kernel_and_space_zero_addresses() {
        assert_eq!(tag(0, 0x401000), 0x401000);
        assert_eq!(tag(3, 0xffff_ffff_8100_0000), 0xffff_ffff_8100_0000);
        assert_eq!(tag(3, BAD_USER_FRAME), BAD_USER_FRAME);
        let t = tag(3, 0x7fff_1234_5678);
        assert_ne!(t, 0x7fff_1234_5678);
        assert!(!is_kernel(t));
        assert_eq!(untag(t), (3, 0x7fff_1234_5678));
        assert_eq!(untag(0x401000), (0, 0x401000));
        assert_eq!(untag(0xffff_ffff_8100_0000), (0, 0xffff_ffff_8100_0000));
    }

    /// Every process gets a space when first seen; compacting drops the
    /// spaces of processes gone and keeps the others with their mappings.
    #[test]
    fn spaces_of_every_process_open_when_seen_and_compact_when_gone() {
        let me = std::process::id();
        let mut spaces = Spaces::every(true);
        assert_eq!(spaces.open(0), 0, "the idle task has none");
        let mine = spaces.open(me);
        assert_ne!(mine, 0);
        assert!(!spaces.maps(mine).is_empty(), "read from /proc");
        assert_eq!(spaces.open(me), mine, "opened once");
        let (child, other) = (u32::MAX - 7, u32::MAX - 8);
        spaces.fork(child, me);
        spaces.fork(other, me);
        spaces.exit(child);
        for _ in 0..EXIT_GRACE + 1 {
            spaces.next_batch();
        }
        assert_eq!(spaces.len(), 4);
        spaces.compact();
        assert_eq!(spaces.len(), 3, "the exited child's space is dropped");
        assert_eq!(spaces.of(child), 0);
        let (m, o) = (spaces.of(me), spaces.of(other));
        assert!(m != 0 && o != 0 && m != o);
        assert_eq!(spaces.maps(m).len(), spaces.maps(o).len());
        assert!(!spaces.list[o].unwinder.is_empty());
    }

    /// With more processes walked than rule caches allowed, the oldest
    /// caches go, but for those walked since they were last looked at.
    #[test]
    fn rule_caches_are_kept_within_their_budget() {
        let me = std::process::id();
        let mut spaces = Spaces::new(me, ProcessMaps::read(me).unwrap(), true);
        let stack = [0u8; 64];
        let walk = |spaces: &mut Spaces, i: usize| {
            let sp = 0x7ffd_0000_0000;
            spaces
                .unwinder(i)
                .unwind(0x1234, sp, sp, &stack, &mut Vec::new());
        };
        let kids: Vec<usize> = (0..3 * MAX_CACHES as u32)
            .map(|k| {
                spaces.fork(u32::MAX - k, me);
                spaces.of(u32::MAX - k)
            })
            .collect();
        let caches = |spaces: &Spaces| {
            spaces
                .list
                .iter()
                .filter(|s| s.unwinder.has_cache())
                .count()
        };
        walk(&mut spaces, 0);
        for (n, &i) in kids.iter().enumerate() {
            walk(&mut spaces, i);
            // The target is walked all along: it keeps its cache.
            if n % 4 == 0 {
                walk(&mut spaces, 0);
            }
            assert!(
                caches(&spaces) <= MAX_CACHES + 1,
                "{} caches",
                caches(&spaces)
            );
        }
        assert!(
            spaces.list[0].unwinder.has_cache(),
            "the busy space keeps its cache"
        );
        assert!(
            !spaces.list[kids[0]].unwinder.has_cache(),
            "the oldest went"
        );
        assert!(spaces.list[*kids.last().unwrap()].unwinder.has_cache());
        assert!(
            caches(&spaces) >= MAX_CACHES / 2,
            "{} caches",
            caches(&spaces)
        );
        // Renumbered spaces keep their place.
        spaces.compact();
        walk(&mut spaces, 1);
        assert!(caches(&spaces) <= MAX_CACHES + 1);
    }

    #[test]
    fn an_exited_process_keeps_only_its_mappings_after_the_grace() {
        let me = std::process::id();
        let mut spaces = Spaces::new(me, ProcessMaps::read(me).unwrap(), true);
        let child = u32::MAX - 7;
        spaces.next_batch();
        spaces.fork(child, me);
        let space = spaces.of(child);
        assert_ne!(space, 0);
        assert!(!spaces.list[space].unwinder.is_empty());
        spaces.exit(child);
        for _ in 0..EXIT_GRACE - 1 {
            spaces.next_batch();
            assert!(
                !spaces.list[space].unwinder.is_empty(),
                "retired within the grace"
            );
        }
        spaces.next_batch();
        assert!(spaces.list[space].unwinder.is_empty());
        assert_eq!(spaces.list[space].maps.len(), spaces.list[0].maps.len());
        assert!(!spaces.list[0].unwinder.is_empty(), "the target's stays");
    }
}
