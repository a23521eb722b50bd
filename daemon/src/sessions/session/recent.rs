//! The stack indices a session sampled over the last [`MAX_WINDOW_S`]
//! seconds, for windowed figures: one bucket per [`BUCKET`] of batches read,
//! the newest as pushed, older ones sorted and delta-encoded (LEB128) with a
//! count for each index sampled more than once: one or two bytes a sample
//! instead of four, and a few bytes a stack however often it was sampled in
//! the bucket.
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Longest window of recent samples kept, in seconds.
pub const MAX_WINDOW_S: u32 = 600;

/// The time one bucket covers at most: a window of W seconds counts the
/// batches read in the last W seconds and, at most, this much before them.
pub const BUCKET: Duration = Duration::from_millis(100);

/// A bucket's samples: when its first and last batches were read.
struct Bucket<T> {
    first: Instant,
    last: Instant,
    samples: T,
}

#[derive(Default)]
pub struct Recent {
    /// Closed buckets, oldest first, their indices encoded.
    sealed: VecDeque<Bucket<Box<[u8]>>>,
    /// The bucket samples go to now.
    open: Option<Bucket<Vec<u32>>>,
    /// The open bucket's weighted stacks (off-CPU and wall sessions: a
    /// stack index and the nanoseconds it stands for).
    weighted: Vec<(u32, u64)>,
}

impl Recent {
    /// A batch read at `now` begins: its samples go to the open bucket, or
    /// to a new one when the open one began [`BUCKET`] or more before (the
    /// open one is sealed). Buckets past the longest window are dropped.
    pub fn start(&mut self, now: Instant) {
        let longest = Duration::from_secs(u64::from(MAX_WINDOW_S));
        let old = |last: Instant| now.saturating_duration_since(last) > longest;
        while self.sealed.front().is_some_and(|b| old(b.last)) {
            self.sealed.pop_front();
        }
        let samples = match self.open.take() {
            Some(mut b) if now.saturating_duration_since(b.first) < BUCKET => {
                b.last = now;
                self.open = Some(b);
                return;
            }
            Some(mut b) => {
                if !old(b.last) {
                    let samples = seal(&mut b.samples, &mut self.weighted);
                    self.sealed.push_back(Bucket {
                        first: b.first,
                        last: b.last,
                        samples,
                    });
                }
                b.samples.clear();
                self.weighted.clear();
                b.samples
            }
            None => Vec::new(),
        };
        self.open = Some(Bucket {
            first: now,
            last: now,
            samples,
        });
    }

    /// Count a sample of stack `index` in the open bucket (if one was
    /// started).
    pub fn push(&mut self, index: u32) {
        if let Some(b) = &mut self.open {
            b.samples.push(index);
        }
    }

    /// Count `weight` (nanoseconds) of stack `index` in the open bucket (if
    /// one was started).
    pub fn push_weighted(&mut self, index: u32, weight: u64) {
        if self.open.is_some() && weight > 0 {
            self.weighted.push((index, weight));
        }
    }

    /// Samples (or weights) per stack index in the buckets with a batch read
    /// less than `window_s` seconds before `now`: the last `window_s`
    /// seconds, and at most [`BUCKET`] more.
    pub fn counts(&self, window_s: u32, now: Instant) -> HashMap<u32, u64> {
        let window = Duration::from_secs(u64::from(window_s));
        let within = |last: Instant| now.saturating_duration_since(last) < window;
        let mut counts = HashMap::new();
        if let Some(b) = &self.open {
            if !within(b.last) {
                return counts;
            }
            for &i in &b.samples {
                *counts.entry(i).or_insert(0) += 1;
            }
            for &(i, w) in &self.weighted {
                *counts.entry(i).or_insert(0) += w;
            }
        }
        for b in self.sealed.iter().rev().take_while(|b| within(b.last)) {
            decode(&b.samples, |i, n| *counts.entry(i).or_insert(0) += n);
        }
        counts
    }

    /// Bytes held by the closed buckets' indices.
    #[cfg(test)]
    fn sealed_bytes(&self) -> usize {
        self.sealed.iter().map(|b| b.samples.len()).sum()
    }
}

/// `bucket` sorted, each index once, as the LEB128 difference of index + 1
/// from the previous index + 1 (never 0); an index sampled n > 1 times is
/// followed by a 0 and n - 1.
fn seal(bucket: &mut [u32], weighted: &mut [(u32, u64)]) -> Box<[u8]> {
    bucket.sort_unstable();
    weighted.sort_unstable_by_key(|&(i, _)| i);
    let mut runs = bucket
        .chunk_by(|a, b| a == b)
        .map(|run| (run[0], run.len() as u64))
        .peekable();
    let mut sums = weighted
        .chunk_by(|a, b| a.0 == b.0)
        .map(|run| (run[0].0, run.iter().map(|&(_, w)| w).sum::<u64>()))
        .peekable();
    let mut out = Vec::with_capacity(bucket.len() + bucket.len() / 2 + weighted.len() * 4);
    let mut last = 0;
    loop {
        // The two sorted lists merged, an index in both summed.
        let (index, n) = match (runs.peek(), sums.peek()) {
            (Some(&(a, _)), Some(&(b, _))) if a == b => {
                let (_, n) = runs.next().unwrap_or_default();
                let (_, w) = sums.next().unwrap_or_default();
                (a, n + w)
            }
            (Some(&(a, _)), Some(&(b, _))) if b < a => sums.next().unwrap_or_default(),
            (Some(_), _) => runs.next().unwrap_or_default(),
            (None, Some(_)) => sums.next().unwrap_or_default(),
            (None, None) => break,
        };
        let next = u64::from(index) + 1;
        leb128(&mut out, next - last);
        last = next;
        if n > 1 {
            out.push(0);
            leb128(&mut out, n - 1);
        }
    }
    out.into_boxed_slice()
}

/// Append `v` as LEB128.
fn leb128(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Each index of a sealed bucket, in order, with its count.
fn decode(bytes: &[u8], mut each: impl FnMut(u32, u64)) {
    let mut values = bytes
        .split_inclusive(|b| b & 0x80 == 0)
        .map(|v| {
            v.iter()
                .rev()
                .fold(0u64, |acc, &b| acc << 7 | u64::from(b & 0x7f))
        })
        .peekable();
    let mut last = 0u64;
    while let Some(delta) = values.next() {
        last += delta;
        let n = match values.next_if_eq(&0) {
            Some(_) => values.next().unwrap_or(0) + 1,
            None => 1,
        };
        each(last.wrapping_sub(1) as u32, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_buckets_keep_every_index_and_its_count() {
        let indices = [7, 0, u32::MAX, 7, 128, 127, 16_384, 3, 7, 1 << 28, 0];
        let mut bucket = indices.to_vec();
        let mut out = Vec::new();
        decode(&seal(&mut bucket, &mut []), |i, n| out.push((i, n)));
        let mut counts = std::collections::BTreeMap::new();
        for i in indices {
            *counts.entry(i).or_insert(0) += 1;
        }
        assert_eq!(out, counts.into_iter().collect::<Vec<_>>());
    }

    /// Weighted stacks (off-CPU time) count their nanoseconds, in the
    /// open bucket and once sealed, summed with the same index's samples.
    #[test]
    fn weighted_stacks_count_their_weight() {
        let t0 = Instant::now();
        let mut recent = Recent::default();
        recent.start(t0);
        recent.push(4);
        recent.push_weighted(4, 1_000_000);
        recent.push_weighted(2, 7_000_000);
        recent.push_weighted(2, 3);
        let open = recent.counts(2, t0 + Duration::from_millis(500));
        assert_eq!(open, HashMap::from([(4, 1_000_001), (2, 7_000_003)]));
        recent.start(t0 + Duration::from_secs(1));
        recent.push_weighted(9, 5);
        let both = recent.counts(2, t0 + Duration::from_millis(1500));
        assert_eq!(
            both,
            HashMap::from([(4, 1_000_001), (2, 7_000_003), (9, 5)])
        );
    }

    #[test]
    fn a_stack_sampled_often_takes_a_few_bytes_a_bucket() {
        let mut bucket = [vec![5; 100_000], vec![9; 300], vec![70_000]].concat();
        let bytes = seal(&mut bucket, &mut []);
        // Difference, 0, count - 1: 5 in 1 + 1 + 3 bytes, 9 in 1 + 1 + 2;
        // 70 000, sampled once, in 3.
        assert_eq!(bytes.len(), 5 + 4 + 3);
        let mut out = Vec::new();
        decode(&bytes, |i, n| out.push((i, n)));
        assert_eq!(out, [(5, 100_000), (9, 300), (70_000, 1)]);
        // And through a window: the sealed bucket's counts, then the open one's.
        let t0 = Instant::now();
        let mut recent = Recent::default();
        recent.start(t0);
        [5, 9, 5, 5].into_iter().for_each(|i| recent.push(i));
        recent.start(t0 + Duration::from_secs(1));
        [5, 2].into_iter().for_each(|i| recent.push(i));
        let now = t0 + Duration::from_millis(1100);
        assert_eq!(
            recent.counts(2, now),
            HashMap::from([(5, 4), (9, 1), (2, 1)])
        );
    }

    #[test]
    fn windows_count_the_batches_read_within_them() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut recent = Recent::default();
        recent.push(99); // before any batch: not counted
                         // A batch every 50 ms for 5 s, one sample of index `second` each;
                         // buckets of two batches (0 and 50 ms, 100 and 150 ms, ...).
        for k in 0..100u64 {
            recent.start(ms(50 * k));
            recent.push((k / 20) as u32);
        }
        let now = ms(4960);
        // The last second: batches read from 4.0 s on, second 4's twenty.
        assert_eq!(recent.counts(1, now), HashMap::from([(4, 20)]));
        assert_eq!(recent.counts(2, now), HashMap::from([(3, 20), (4, 20)]));
        // 60 ms later the batch read at 4.0 s is 1.02 s old, but its
        // bucket's other batch (4.05 s) is not: the window takes at most a
        // bucket more.
        assert_eq!(recent.counts(1, ms(5020)), HashMap::from([(4, 20)]));
        assert_eq!(recent.counts(1, ms(5060)), HashMap::from([(4, 18)]));
        let all = recent.counts(MAX_WINDOW_S, now);
        assert_eq!(all.values().sum::<u64>(), 100);
        assert!(!all.contains_key(&99));
        // With no batch for a second, a window of one second is empty.
        assert!(recent.counts(1, ms(6000)).is_empty());
        // 600 s after 2.5 s, the buckets whose last batch is older are
        // dropped: those read from 2.5 s on stay (index 2's last ten and
        // all of 3 and 4).
        let later = ms(2500 + 1000 * u64::from(MAX_WINDOW_S));
        recent.start(later);
        assert_eq!(
            recent.counts(MAX_WINDOW_S, later),
            HashMap::from([(2, 10), (3, 20), (4, 20)])
        );
    }

    #[test]
    fn a_sample_takes_under_two_bytes() {
        // 200 samples a second among 20 000 stacks, for 60 s.
        let t0 = Instant::now();
        let mut recent = Recent::default();
        let mut x = 1u32;
        for s in 0..=60 {
            recent.start(t0 + Duration::from_secs(s));
            for _ in 0..200 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                recent.push(x % 20_000);
            }
        }
        let bytes = recent.sealed_bytes();
        assert!(bytes < 2 * 200 * 60, "{bytes} bytes for 12 000 samples");
    }
}
