//! The profile model: interned raw stacks with counts, and their reduction to
//! per-function inclusive/exclusive counts and percentages. Pure data, no
//! symbols (callers map addresses to function ids).
use hashbrown::HashTable;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasher;

use crate::api;

/// Raw stacks (thread, addresses innermost first) interned with their sample
/// counts. Each unique stack keeps the index it was first given. Adding a
/// stack already seen allocates nothing.
///
/// Stacks are stored as a tree of call paths: a node is one address under
/// its caller's node, shared by every stack that passes through it, and a
/// stack is its innermost node with a thread and a count. A unique stack
/// costs a few dozen bytes plus its frames not shared with others, instead
/// of all its frames.
///
/// A stack that was sampled in the kernel keeps its kernel frames as a path
/// of their own, from the kernel's entry point, joined to its innermost
/// user node by one link node: the few kernel paths (interrupts, system
/// calls) are then shared by every user stack they interrupted, and such a
/// stack costs one node more than its user frames, not one per kernel
/// frame.
#[derive(Debug, Default, Clone)]
pub struct StackTable {
    /// Call-path nodes: an address and its caller's node.
    nodes: Nodes,
    /// Each node by (caller node, address).
    node_index: HashTable<u32>,
    stacks: Vec<Stack>,
    /// Each stack by (thread, addresses).
    stack_index: HashTable<u32>,
    samples: u64,
    state: State,
}

/// No node: the caller of an outermost frame, the innermost node of an
/// empty stack.
const ROOT: u32 = u32::MAX;

/// Set in a link node's caller: the node joins the kernel path whose
/// innermost node is its address to the user node in the other bits.
/// Nodes are numbered below it ([`StackTable::add_within`] keeps them so).
const LINK: u32 = 1 << 31;

/// Kernel text lives in the upper half of the address space.
pub fn is_kernel(addr: u64) -> bool {
    addr >= 0xffff_8000_0000_0000
}

/// The nodes as two arrays (12 bytes a node, not 16).
#[derive(Debug, Default, Clone)]
struct Nodes {
    addrs: Vec<u64>,
    parents: Vec<u32>,
}

impl Nodes {
    /// Node `i`'s address and caller.
    fn get(&self, i: u32) -> Option<(u64, u32)> {
        let addr = *self.addrs.get(i as usize)?;
        Some((addr, self.parents[i as usize]))
    }
}

/// 16 bytes: the index's hashes are computed again from the nodes when it
/// grows, not kept.
#[derive(Debug, Clone, Copy)]
struct Stack {
    leaf: u32,
    tid: u32,
    count: u64,
}
const _: () = assert!(std::mem::size_of::<Stack>() == 16);

fn stack_hash(state: &State, tid: u32, frames: &[u64]) -> u64 {
    state.hash_one((tid, frames))
}

fn node_hash(state: &State, parent: u32, addr: u64) -> u64 {
    state.hash_one((parent, addr))
}

/// foldhash: the table is looked up once per sample.
type State = foldhash::fast::RandomState;

impl StackTable {
    /// Count `n` samples of `frames` (innermost first) on thread `tid`;
    /// returns the stack's index and whether it is new to the table.
    pub fn add(&mut self, tid: u32, frames: &[u64], n: u64) -> (usize, bool) {
        self.samples += n;
        let hash = stack_hash(&self.state, tid, frames);
        if let Some(index) = self.find(hash, tid, frames) {
            self.stacks[index].count += n;
            return (index, false);
        }
        let kernel = frames.iter().take_while(|&&a| is_kernel(a)).count();
        let mut leaf = ROOT;
        for &addr in frames[kernel..].iter().rev() {
            leaf = self.node(leaf, addr);
        }
        if kernel > 0 {
            let mut entry = ROOT;
            for &addr in frames[..kernel].iter().rev() {
                entry = self.node(entry, addr);
            }
            leaf = match leaf {
                ROOT => entry,
                user => self.node(user | LINK, u64::from(entry)),
            };
        }
        let index = self.stacks.len();
        self.stacks.push(Stack {
            leaf,
            tid,
            count: n,
        });
        let (stacks, nodes, state) = (&self.stacks, &self.nodes, &self.state);
        // Growing the index hashes every stack again, from its nodes.
        let frames = RefCell::new(Vec::new());
        self.stack_index.insert_unique(hash, index as u32, |&i| {
            let stack = &stacks[i as usize];
            let mut frames = frames.borrow_mut();
            frames.clear();
            frames.extend(Self::walk(nodes, stack.leaf));
            stack_hash(state, stack.tid, &frames)
        });
        (index, true)
    }

    /// Like [`add`](Self::add), but a stack not yet in the table is added
    /// only while it holds fewer than `cap` stacks (and room for its nodes
    /// below [`LINK`]): None when it is full.
    pub fn add_within(
        &mut self,
        tid: u32,
        frames: &[u64],
        n: u64,
        cap: usize,
    ) -> Option<(usize, bool)> {
        if self.stacks.len() < cap && self.nodes.addrs.len() + frames.len() < LINK as usize - 1 {
            return Some(self.add(tid, frames, n));
        }
        let index = self.find(stack_hash(&self.state, tid, frames), tid, frames)?;
        self.stacks[index].count += n;
        self.samples += n;
        Some((index, false))
    }

    /// The index of a stack already in the table.
    fn find(&self, hash: u64, tid: u32, frames: &[u64]) -> Option<usize> {
        let (stacks, nodes) = (&self.stacks, &self.nodes);
        let same = |&i: &u32| {
            let stack = &stacks[i as usize];
            stack.tid == tid && Self::holds(nodes, stack.leaf, frames)
        };
        self.stack_index.find(hash, same).map(|&i| i as usize)
    }

    /// Whether the stack whose innermost node is `leaf` has these frames.
    /// The nodes a new stack adds are made outermost first, one after the
    /// other, so its frames are mostly runs of consecutive nodes, each the
    /// caller of the one after it: a run is compared as two slices read
    /// side by side, without waiting on each node's link to read the next.
    fn holds(nodes: &Nodes, leaf: u32, frames: &[u64]) -> bool {
        let (mut at, mut then) = Self::start(nodes, leaf);
        let mut rest = frames;
        loop {
            if at == ROOT {
                at = std::mem::replace(&mut then, ROOT);
                if at == ROOT {
                    return rest.is_empty();
                }
            }
            let i = at as usize;
            if i >= nodes.addrs.len() || rest.is_empty() {
                return false;
            }
            // Nodes i, i - 1, ...: the longest run the frames could follow.
            let from = i + 1 - rest.len().min(i + 1);
            let run = nodes.addrs[from..=i]
                .iter()
                .rev()
                .zip(nodes.parents[from..=i].iter().rev());
            let mut matched = 0;
            for ((&addr, &parent), &frame) in run.zip(rest) {
                if addr != frame {
                    return false;
                }
                matched += 1;
                at = parent;
                if parent != (i as u32).wrapping_sub(matched) {
                    break;
                }
            }
            rest = &rest[matched as usize..];
        }
    }

    /// The node of `addr` called from `parent`, made when new.
    fn node(&mut self, parent: u32, addr: u64) -> u32 {
        let hash = node_hash(&self.state, parent, addr);
        let nodes = &self.nodes;
        let found = self
            .node_index
            .find(hash, |&i| nodes.get(i) == Some((addr, parent)));
        if let Some(&i) = found {
            return i;
        }
        let i = self.nodes.addrs.len() as u32;
        self.nodes.addrs.push(addr);
        self.nodes.parents.push(parent);
        let (nodes, state) = (&self.nodes, &self.state);
        self.node_index.insert_unique(hash, i, |&i| {
            let (addr, parent) = nodes.get(i).unwrap_or_default();
            node_hash(state, parent, addr)
        });
        i
    }

    /// Unique stacks.
    pub fn len(&self) -> usize {
        self.stacks.len()
    }

    /// Whether no sample was added.
    pub fn is_empty(&self) -> bool {
        self.stacks.is_empty()
    }

    /// Samples added in all.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Call `f(thread id, frames, count)` for each unique stack, by index.
    pub fn for_each(&self, mut f: impl FnMut(u32, &[u64], u64)) {
        let mut frames = Vec::new();
        for stack in &self.stacks {
            self.frames_into(stack.leaf, &mut frames);
            f(stack.tid, &frames, stack.count);
        }
    }

    /// The stack with this index: its thread id and count, with its frames
    /// written to `frames`.
    pub fn get(&self, index: usize, frames: &mut Vec<u64>) -> Option<(u32, u64)> {
        let stack = self.stacks.get(index)?;
        self.frames_into(stack.leaf, frames);
        Some((stack.tid, stack.count))
    }

    fn frames_into(&self, leaf: u32, frames: &mut Vec<u64>) {
        frames.clear();
        frames.extend(Self::walk(&self.nodes, leaf));
    }

    /// Where the walk of a stack whose innermost node is `leaf` begins, and
    /// the user node it goes on with after a kernel path (ROOT if none): a
    /// link is only ever a stack's innermost node.
    fn start(nodes: &Nodes, leaf: u32) -> (u32, u32) {
        match nodes.get(leaf) {
            Some((entry, parent)) if parent != ROOT && parent & LINK != 0 => {
                (entry as u32, parent & !LINK)
            }
            _ => (leaf, ROOT),
        }
    }

    /// The addresses of the stack whose innermost node is `leaf`, innermost
    /// first.
    fn walk(nodes: &Nodes, leaf: u32) -> impl Iterator<Item = u64> + '_ {
        let (mut at, mut then) = Self::start(nodes, leaf);
        std::iter::from_fn(move || {
            if at == ROOT {
                at = std::mem::replace(&mut then, ROOT);
            }
            let (addr, parent) = nodes.get(at)?;
            at = parent;
            Some(addr)
        })
    }

    /// Bytes held by the table (its buffers' capacity).
    #[cfg(test)]
    fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.nodes.addrs.capacity() * size_of::<u64>()
            + self.nodes.parents.capacity() * size_of::<u32>()
            + self.stacks.capacity() * size_of::<Stack>()
            + (self.node_index.capacity() + self.stack_index.capacity()) * (size_of::<u32>() + 1)
    }
}

/// Inclusive and exclusive samples of one function.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Samples with the function anywhere on the stack (once per sample).
    pub inclusive: u64,
    /// Samples with the function as the innermost frame.
    pub exclusive: u64,
}

/// Reduces stacks of function ids to per-function counts, indexed by id.
///
/// A function that appears several times in one stack (recursion) gets one
/// inclusive count per sample; an empty stack counts for nothing.
#[derive(Debug)]
pub struct Aggregator {
    counts: Vec<Counts>,
    // last[f] = number of the last stack that credited f inclusively.
    last: Vec<u64>,
    stacks: u64,
}

impl Aggregator {
    /// An aggregator for function ids `0..functions`.
    pub fn new(functions: usize) -> Aggregator {
        Aggregator {
            counts: vec![Counts::default(); functions],
            last: vec![0; functions],
            stacks: 0,
        }
    }

    /// Count `n` samples of the stack `ids` (innermost first).
    pub fn add(&mut self, ids: &[u32], n: u64) {
        let Some(&leaf) = ids.first() else { return };
        self.stacks += 1;
        self.counts[leaf as usize].exclusive += n;
        for &id in ids {
            let id = id as usize;
            if self.last[id] != self.stacks {
                self.last[id] = self.stacks;
                self.counts[id].inclusive += n;
            }
        }
    }

    /// Make room for function ids `0..functions`.
    pub fn grow(&mut self, functions: usize) {
        if functions > self.counts.len() {
            self.counts.resize(functions, Counts::default());
            self.last.resize(functions, 0);
        }
    }

    /// The counts so far, indexed by function id.
    pub fn counts(&self) -> &[Counts] {
        &self.counts
    }

    /// The counts, indexed by function id.
    pub fn into_counts(self) -> Vec<Counts> {
        self.counts
    }
}

/// A function of a resolved profile.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FunctionInfo {
    pub name: String,
    /// Binary file name, `[kernel]`, `[jit]`, ...
    pub module: String,
    /// Source file of the function, when known.
    pub file: String,
    /// Inlined into its caller at these frames.
    pub inlined: bool,
    /// For code its host could not name: where it is in its binary, so
    /// that it can be named elsewhere.
    pub origin: Option<Origin>,
}

/// Where a function its host could not name is: the GNU build id of its
/// binary (hex; empty when the binary has none) and its address in the
/// file (the ELF virtual address of its start, or of the instruction
/// when its start is unknown), as `nm` and `addr2line` take it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Origin {
    pub build_id: String,
    pub address: u64,
}

impl Origin {
    /// The origin a function's name gives, when it is that of stripped code
    /// grouped by function (`module!0xSTART`) in a binary with a build id.
    pub fn of_grouped(name: &str, module: &str, build_id: &str) -> Option<Origin> {
        let hex = name.strip_prefix(module)?.strip_prefix("!0x")?;
        let address = u64::from_str_radix(hex, 16).ok()?;
        (!build_id.is_empty()).then(|| Origin {
            build_id: build_id.to_string(),
            address,
        })
    }
}

/// One frame of a resolved stack.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FrameRef {
    /// Index into `ResolvedProfile::functions`.
    pub function: u32,
    /// Source line of the frame's address (0 = unknown).
    pub line: u32,
    /// The address (return addresses minus one), for exports that keep it.
    pub address: u64,
}

/// One unique (thread, stack) of a profile with its sample count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvedStack {
    pub tid: u32,
    /// Innermost first; inlined functions are frames of their own.
    pub frames: Vec<FrameRef>,
    pub count: u64,
}

/// A whole profile with every frame named: what views and exports are
/// computed from.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedProfile {
    /// Indexed by function id (`api::Function::id`).
    pub functions: Vec<FunctionInfo>,
    pub stacks: Vec<ResolvedStack>,
    /// Thread names by tid, where known.
    pub threads: HashMap<u32, String>,
    /// The process of each thread (tid → pid), where known.
    pub thread_pids: HashMap<u32, u32>,
    /// The session's attributed samples (the sum of the stacks' counts).
    pub attributed: u64,
    /// Sampling frequency: each sample stands for 1/frequency_hz seconds.
    pub frequency_hz: u32,
    pub duration_s: f64,
    pub pid: u32,
    pub comm: String,
    /// What the session measured, and so the unit of every count above:
    /// samples (`Mode::Cpu`), or nanoseconds (`Mode::OffCpu`, `Mode::Wall`;
    /// see [`is_time`]).
    pub mode: api::Mode,
}

impl Default for ResolvedProfile {
    /// An empty CPU profile.
    fn default() -> ResolvedProfile {
        ResolvedProfile {
            functions: Vec::new(),
            stacks: Vec::new(),
            threads: HashMap::new(),
            thread_pids: HashMap::new(),
            attributed: 0,
            frequency_hz: 0,
            duration_s: 0.0,
            pid: 0,
            comm: String::new(),
            mode: api::Mode::Cpu,
        }
    }
}

/// The samples of a profile in time order, for a timeline (the Firefox
/// Profiler export). Times are CLOCK_MONOTONIC nanoseconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    /// Each sample kept: its time and its stack (an index into
    /// [`ResolvedProfile::stacks`]), in time order.
    pub samples: Vec<(u64, u32)>,
    /// What happened to the processes, in time order.
    pub markers: Vec<TimelineMarker>,
    /// The oldest samples whose times were not kept (they count in the
    /// stacks all the same).
    pub dropped: u64,
    /// Unix time in milliseconds at CLOCK_MONOTONIC's zero: the time
    /// sample times count from.
    pub monotonic_zero_unix_ms: f64,
    /// The binaries (executables, shared libraries) the stacks' user code
    /// was found in.
    pub libs: Vec<Library>,
    /// Where the libraries were mapped, in each address space, in order of
    /// (space, start), not overlapping within a space.
    pub lib_maps: Vec<LibMapping>,
    /// The address space of each stack (by its index in
    /// [`ResolvedProfile::stacks`]): one program in one process, a new one
    /// at each exec. Empty when not known: no frame is then in a library.
    pub stack_spaces: Vec<u32>,
}

/// A binary file that code of a profile was found in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Library {
    /// The file's name (the functions' module).
    pub name: String,
    /// The path the process mapped.
    pub path: String,
    /// Its GNU build id, in lowercase hex; empty when it has none.
    pub build_id: String,
    /// The machine it was built for, as the Firefox Profiler and Rust name
    /// it (`x86_64`, `aarch64`, ...); empty when not known.
    pub arch: String,
}

/// One executable mapping of a [`Library`] in an address space.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LibMapping {
    /// The address space (see [`Timeline::stack_spaces`]).
    pub space: u32,
    /// The mapped addresses, `[start, end)`.
    pub start: u64,
    pub end: u64,
    /// Index into [`Timeline::libs`].
    pub lib: u32,
    /// The address the library's relative address 0 is at in this space:
    /// relative addresses count from the ELF virtual address of the
    /// file's first load segment, as symbol servers and the Firefox
    /// Profiler take them.
    pub base: u64,
}

/// One event of a process on a timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelineMarker {
    /// CLOCK_MONOTONIC nanoseconds.
    pub time: u64,
    pub pid: u32,
    pub kind: MarkerKind,
}

/// What a [`TimelineMarker`] marks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkerKind {
    /// Profiling of the process began (the session started).
    Start,
    /// The process exec'd this command.
    Exec(String),
    /// The process exited.
    Exit,
}

impl Timeline {
    /// Points the samples at the stacks `map` says their stacks became
    /// (`map[old] = new`, from [`crate::kernel::KernelFrames::apply`]).
    pub fn remap(&mut self, map: &[u32]) {
        for (_, stack) in &mut self.samples {
            *stack = map[*stack as usize];
        }
        if self.stack_spaces.len() == map.len() {
            // Merged stacks have the same user frames, so the same space.
            let mut spaces = vec![0; map.iter().map(|&i| i as usize + 1).max().unwrap_or(0)];
            for (old, &new) in map.iter().enumerate() {
                spaces[new as usize] = self.stack_spaces[old];
            }
            self.stack_spaces = spaces;
        }
    }

    /// The library of the code at `address` in a frame of stack `stack`,
    /// and the address relative to it: None for kernel code, code of no
    /// library (JIT code, anonymous memory) or an unknown space.
    pub fn lib_of(&self, stack: u32, address: u64) -> Option<(u32, u64)> {
        if address == 0 || is_kernel(address) {
            return None;
        }
        let space = *self.stack_spaces.get(stack as usize)?;
        // The mappings are in (space, start) order.
        let at = self
            .lib_maps
            .partition_point(|m| (m.space, m.start) <= (space, address));
        let m = self.lib_maps[..at].last()?;
        (m.space == space && address < m.end).then(|| (m.lib, address.wrapping_sub(m.base)))
    }
}

/// Whether the counts of a profile of `mode` are nanoseconds (off-CPU and
/// wall-clock time) rather than samples (CPU, or unspecified).
pub fn is_time(mode: api::Mode) -> bool {
    matches!(mode, api::Mode::OffCpu | api::Mode::Wall)
}

/// The mode as profctl's `--mode` and the JSON report spell it: `cpu`,
/// `off-cpu` or `wall` (`cpu` when unspecified).
pub fn mode_name(mode: api::Mode) -> &'static str {
    match mode {
        api::Mode::Cpu | api::Mode::Unspecified => "cpu",
        api::Mode::OffCpu => "off-cpu",
        api::Mode::Wall => "wall",
    }
}

/// The unit of the counts of a profile of `mode`: `samples` or
/// `nanoseconds`.
pub fn unit_name(mode: api::Mode) -> &'static str {
    if is_time(mode) {
        "nanoseconds"
    } else {
        "samples"
    }
}

/// `part` as a percentage (0–100) of `whole`; 0 when `whole` is 0.
pub fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_still_counts_known_stacks() {
        let mut t = StackTable::default();
        assert_eq!(t.add_within(1, &[10, 20], 1, 2), Some((0, true)));
        assert_eq!(t.add_within(1, &[11, 20], 1, 2), Some((1, true)));
        assert_eq!(t.add_within(1, &[12, 20], 1, 2), None);
        assert_eq!(t.add_within(1, &[10, 20], 3, 2), Some((0, false)));
        assert_eq!((t.len(), t.samples()), (2, 5));
    }

    #[test]
    fn interning_counts_repeats_per_thread() {
        let mut t = StackTable::default();
        assert_eq!(t.add(7, &[1, 2, 3], 1), (0, true));
        assert_eq!(t.add(7, &[1, 2, 3], 2), (0, false));
        assert_eq!(
            t.add(8, &[1, 2, 3], 1),
            (1, true),
            "another thread, another stack"
        );
        assert_eq!(t.add(7, &[4], 1), (2, true));
        assert_eq!(t.len(), 3);
        assert_eq!(t.samples(), 5);
        let mut all = Vec::new();
        t.for_each(|tid, s, n| all.push((tid, s.to_vec(), n)));
        assert_eq!(
            all,
            vec![
                (7, vec![1, 2, 3], 3),
                (8, vec![1, 2, 3], 1),
                (7, vec![4], 1)
            ]
        );
        let mut frames = Vec::new();
        assert_eq!(t.get(2, &mut frames), Some((7, 1)));
        assert_eq!(frames, [4]);
        assert_eq!(t.get(3, &mut frames), None);
    }

    #[test]
    fn stacks_share_their_common_callers() {
        let mut t = StackTable::default();
        assert_eq!(t.add(1, &[], 1), (0, true), "an empty stack is a stack");
        assert_eq!(t.add(1, &[], 1), (0, false));
        // Every path of a binary tree 14 calls deep, under 3 common frames.
        let path = |i: u64| -> Vec<u64> {
            let mut frames: Vec<u64> = (0..14)
                .map(|level| (level << 8) | ((i >> level) & 1))
                .collect();
            frames.reverse();
            frames.extend([0xa, 0xb, 0xc]);
            frames
        };
        for i in 0..1 << 14 {
            assert_eq!(t.add(1, &path(i), 1), (i as usize + 1, true));
        }
        for i in (0..1 << 14).rev() {
            assert_eq!(t.add(1, &path(i), 2), (i as usize + 1, false));
        }
        // A stack that is a prefix (callers) of others is its own stack.
        assert_eq!(t.add(1, &[0xa, 0xb, 0xc][1..], 1), ((1 << 14) + 1, true));
        let mut frames = Vec::new();
        assert_eq!(t.get(12345 + 1, &mut frames), Some((1, 3)));
        assert_eq!(frames, path(12345));
        let mut total = 0;
        t.for_each(|_, frames, n| {
            assert!(frames.is_empty() || frames.len() == 2 || frames.len() == 17);
            total += n;
        });
        assert_eq!(total, t.samples());
        // 16 384 stacks of 17 frames share about 32 800 nodes: with the
        // buffers' room to grow, less than each stack's own frames would
        // take (17 × 8 = 136 bytes).
        let per_stack = t.heap_bytes() / t.len();
        assert!(per_stack < 136, "{per_stack} bytes per stack");
    }

    #[test]
    fn kernel_paths_are_shared_by_the_user_stacks_they_interrupt() {
        const K: u64 = 0xffff_ffff_8100_0000;
        let mut t = StackTable::default();
        // 1 000 user stacks of 4 frames under a common `main`, each sampled
        // in user code and in 4 kernel paths of 5 frames (two of them share
        // their entry).
        let user = |i: u64| vec![0x1000 + i, 0x2000 + i / 10, 0x3000 + i / 100, 0x4000];
        let kernel = |k: u64| -> Vec<u64> {
            let entry = if k < 2 { K } else { K + k };
            vec![
                K + 0x100 + k,
                K + 0x200 + k,
                K + 0x300 + k,
                K + 0x400 + k,
                entry,
            ]
        };
        let stack = |i: u64, k: Option<u64>| -> Vec<u64> {
            let mut frames = k.map(kernel).unwrap_or_default();
            frames.extend(user(i));
            frames
        };
        let mut all = Vec::new();
        for i in 0..1000 {
            for k in [None, Some(0), Some(1), Some(2), Some(3)] {
                all.push((i % 3) as u32);
                let frames = stack(i, k);
                assert_eq!(t.add((i % 3) as u32, &frames, 1), (all.len() - 1, true));
            }
        }
        let user_nodes = 1000 + 100 + 10 + 1;
        let kernel_nodes = 4 * 5 - 1;
        let links = 4 * 1000;
        assert_eq!(t.nodes.addrs.len(), user_nodes + kernel_nodes + links);
        // Kernel-only stacks, a kernel address after user frames, the
        // table-full frame: each kept as it came.
        let odd = [
            kernel(0),
            kernel(0)[2..].to_vec(),
            vec![u64::MAX],
            vec![0x1000, K + 0x100, 0x4000],
            vec![K + 0x100, 0x1000, K + 0x100, 0x4000],
        ];
        for frames in &odd {
            all.push(9);
            assert_eq!(t.add(9, frames, 1), (all.len() - 1, true), "{frames:x?}");
        }
        // Every stack reads back as it came and is found again.
        let mut frames = Vec::new();
        for (index, &tid) in all.iter().enumerate() {
            let expected = match index.checked_sub(5000) {
                Some(j) => odd[j].clone(),
                None => {
                    let k = [None, Some(0), Some(1), Some(2), Some(3)][index % 5];
                    stack(index as u64 / 5, k)
                }
            };
            assert_eq!(t.get(index, &mut frames), Some((tid, 1)));
            assert_eq!(frames, expected, "stack {index}");
            assert_eq!(t.add(tid, &expected, 1), (index, false), "stack {index}");
        }
        assert!(
            t.add(1, &stack(0, Some(0)), 1).1,
            "another thread's stack is another stack"
        );
        assert!(
            t.add(0, &stack(0, Some(0))[1..], 1).1,
            "a shorter kernel path is another stack"
        );
        let mut seen = 0;
        t.for_each(|_, frames, _| {
            assert!(frames.len() <= 9);
            seen += 1;
        });
        assert_eq!(seen, t.len());
    }

    #[test]
    fn a_stack_holds_exactly_its_own_frames() {
        const K: u64 = 0xffff_ffff_8100_0000;
        // Stacks that share callers, so that their nodes are runs made at
        // different times; some under a kernel path.
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut t = StackTable::default();
        let (mut stacks, mut leaves): (Vec<Vec<u64>>, Vec<u32>) = (Vec::new(), Vec::new());
        for _ in 0..400 {
            let mut frames: Vec<u64> = match stacks.len() {
                0 => Vec::new(),
                n => {
                    // The outer part of an earlier stack, under new frames.
                    let old = &stacks[next(n as u64) as usize];
                    let keep = next(old.len() as u64 + 1) as usize;
                    old[old.len() - keep..].to_vec()
                }
            };
            let new: Vec<u64> = (0..next(12)).map(|_| 0x1000 + next(16)).collect();
            frames.splice(0..0, new);
            if next(3) == 0 {
                let kernel: Vec<u64> = (0..1 + next(4)).map(|_| K + next(8)).collect();
                frames.splice(0..0, kernel);
            }
            let (index, _) = t.add(1, &frames, 1);
            leaves.push(t.stacks[index].leaf);
            stacks.push(frames);
        }
        let (mut checked, mut held) = (0, 0);
        for (leaf, frames) in leaves.iter().zip(&stacks) {
            let mut probes = vec![frames.clone()];
            for i in 0..frames.len() {
                let mut changed = frames.clone();
                changed[i] ^= 1;
                probes.push(changed);
                probes.push([&frames[..i], &frames[i + 1..]].concat());
            }
            probes.push([frames.as_slice(), &[0x1000]].concat());
            probes.push([&[0x1000], frames.as_slice()].concat());
            probes.push(stacks[next(stacks.len() as u64) as usize].clone());
            let walked: Vec<u64> = StackTable::walk(&t.nodes, *leaf).collect();
            for probe in probes {
                let holds = StackTable::holds(&t.nodes, *leaf, &probe);
                assert_eq!(holds, walked == probe, "{walked:x?} against {probe:x?}");
                checked += 1;
                held += usize::from(holds);
            }
        }
        assert!(checked > 4000, "{checked} probes");
        assert!(
            held >= 400,
            "{held} of the probes held: every stack its own"
        );
    }

    fn aggregate(stacks: &[(Vec<u32>, u64)], functions: usize) -> Vec<Counts> {
        let mut agg = Aggregator::new(functions);
        for (ids, n) in stacks {
            agg.add(ids, *n);
        }
        agg.into_counts()
    }

    #[test]
    fn exclusive_is_innermost_inclusive_anywhere() {
        // 0 = main, 1 = a, 2 = b
        let stacks: Vec<(Vec<u32>, u64)> = vec![(vec![1, 0], 3), (vec![2, 1, 0], 1), (vec![0], 1)];
        let c = aggregate(&stacks, 3);
        assert_eq!(
            c[0],
            Counts {
                inclusive: 5,
                exclusive: 1
            }
        );
        assert_eq!(
            c[1],
            Counts {
                inclusive: 4,
                exclusive: 3
            }
        );
        assert_eq!(
            c[2],
            Counts {
                inclusive: 1,
                exclusive: 1
            }
        );
    }

    #[test]
    fn recursion_counts_once_per_sample() {
        // rec -> rec -> rec -> main
        let stacks: Vec<(Vec<u32>, u64)> = vec![(vec![1, 1, 1, 0], 10), (vec![1, 0], 5)];
        let c = aggregate(&stacks, 2);
        assert_eq!(c[1].inclusive, 15, "never more than the samples");
        assert_eq!(c[1].exclusive, 15);
        assert_eq!(c[0].inclusive, 15);
        assert!(c.iter().all(|f| f.inclusive <= 15));
    }

    #[test]
    fn mutual_recursion_counts_each_function_once_per_sample() {
        // 0 = main, 1 = ping, 2 = pong; ping → pong → ping → pong, innermost first.
        let stacks: Vec<(Vec<u32>, u64)> = vec![
            (vec![2, 1, 2, 1, 0], 6),
            (vec![1, 2, 1, 0], 3),
            (vec![2, 1, 0], 1),
        ];
        let c = aggregate(&stacks, 3);
        let ping = Counts {
            inclusive: 10,
            exclusive: 3,
        };
        let pong = Counts {
            inclusive: 10,
            exclusive: 7,
        };
        assert_eq!((c[1], c[2]), (ping, pong), "never more than the 10 samples");
        assert_eq!(c[0].inclusive, 10);
    }

    #[test]
    fn empty_stacks_count_for_nothing() {
        let stacks: Vec<(Vec<u32>, u64)> = vec![(vec![], 4)];
        let c = aggregate(&stacks, 1);
        assert_eq!(c[0], Counts::default());
    }

    #[test]
    fn percentages() {
        assert_eq!(percent(1, 4), 25.0);
        assert_eq!(percent(0, 0), 0.0);
        assert_eq!(percent(7, 7), 100.0);
    }
}
