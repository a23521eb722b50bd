//! The profile model: interned raw stacks with counts, and their reduction to
//! per-function inclusive/exclusive counts and percentages. Pure data, no
//! symbols (callers map addresses to function ids).
use indexmap::IndexMap;
use std::collections::HashMap;

/// Raw stacks (thread, addresses innermost first) interned with their sample
/// counts. Each unique stack keeps the index it was first given. Adding a
/// stack already seen allocates nothing.
#[derive(Debug, Default, Clone)]
pub struct StackTable {
    /// Key: the thread id, then the addresses. Hashed with foldhash: the
    /// table is looked up once per sample, and keys are long.
    counts: IndexMap<Box<[u64]>, u64, foldhash::fast::RandomState>,
    samples: u64,
    key: Vec<u64>,
}

impl StackTable {
    /// Count `n` samples of `frames` (innermost first) on thread `tid`;
    /// returns the stack's index and whether it is new to the table.
    pub fn add(&mut self, tid: u32, frames: &[u64], n: u64) -> (usize, bool) {
        self.samples += n;
        self.key.clear();
        self.key.push(u64::from(tid));
        self.key.extend_from_slice(frames);
        if let Some((index, _, count)) = self.counts.get_full_mut(&self.key[..]) {
            *count += n;
            (index, false)
        } else {
            let (index, _) = self.counts.insert_full(self.key.as_slice().into(), n);
            (index, true)
        }
    }

    /// Like [`add`](Self::add), but a stack not yet in the table is added
    /// only while it holds fewer than `cap` stacks: None when it is full.
    pub fn add_within(
        &mut self,
        tid: u32,
        frames: &[u64],
        n: u64,
        cap: usize,
    ) -> Option<(usize, bool)> {
        if self.counts.len() < cap {
            return Some(self.add(tid, frames, n));
        }
        self.key.clear();
        self.key.push(u64::from(tid));
        self.key.extend_from_slice(frames);
        let (index, _, count) = self.counts.get_full_mut(&self.key[..])?;
        *count += n;
        self.samples += n;
        Some((index, false))
    }

    /// Unique stacks.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// Whether no sample was added.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Samples added in all.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Each unique stack, by index: (thread id, frames, count).
    pub fn iter(&self) -> impl Iterator<Item = (u32, &[u64], u64)> {
        self.counts.iter().map(|(k, v)| (k[0] as u32, &k[1..], *v))
    }

    /// The stack with this index: (thread id, frames).
    pub fn get(&self, index: usize) -> Option<(u32, &[u64])> {
        self.counts
            .get_index(index)
            .map(|(k, _)| (k[0] as u32, &k[1..]))
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
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResolvedProfile {
    /// Indexed by function id (`api::Function::id`).
    pub functions: Vec<FunctionInfo>,
    pub stacks: Vec<ResolvedStack>,
    /// Thread names by tid, where known.
    pub threads: HashMap<u32, String>,
    /// The session's attributed samples (the sum of the stacks' counts).
    pub attributed: u64,
    /// Sampling frequency: each sample stands for 1/frequency_hz seconds.
    pub frequency_hz: u32,
    pub duration_s: f64,
    pub pid: u32,
    pub comm: String,
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
        let all: Vec<_> = t.iter().map(|(tid, s, n)| (tid, s.to_vec(), n)).collect();
        assert_eq!(
            all,
            vec![
                (7, vec![1, 2, 3], 3),
                (8, vec![1, 2, 3], 1),
                (7, vec![4], 1)
            ]
        );
        assert_eq!(t.get(2), Some((7, &[4][..])));
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
