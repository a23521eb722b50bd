//! A session's sample times, kept when its Attach asked for a timeline:
//! each sample's CLOCK_MONOTONIC time and stack index (12 bytes), the most
//! recent [`MAX_SAMPLES`] of them, and its processes' start, exec and exit.
use std::collections::VecDeque;

use profd_common::model::{MarkerKind, Timeline, TimelineMarker};

/// Samples whose times a session keeps (24 MiB); older ones are dropped
/// and counted.
pub const MAX_SAMPLES: usize = 1 << 21;
/// Process events a session keeps; later ones are not kept.
const MAX_MARKERS: usize = 1 << 16;

/// The times of a session's most recent samples.
pub struct Times {
    /// Per sample kept, oldest first: its time...
    times: VecDeque<u64>,
    /// ...and its stack's index in the session's stack table.
    stacks: VecDeque<u32>,
    max: usize,
    dropped: u64,
    markers: Vec<TimelineMarker>,
}

impl Times {
    /// Times of at most `max` samples of a session of `pid`, which starts
    /// now.
    pub fn new(pid: u32, max: usize) -> Times {
        Times {
            times: VecDeque::new(),
            stacks: VecDeque::new(),
            max,
            dropped: 0,
            markers: vec![TimelineMarker {
                time: monotonic_ns(),
                pid,
                kind: MarkerKind::Start,
            }],
        }
    }

    /// One sample at `time` (0: the sample had none, and is not kept).
    pub fn push(&mut self, time: u64, stack: u32) {
        if time == 0 {
            return;
        }
        if self.times.len() >= self.max {
            self.times.pop_front();
            self.stacks.pop_front();
            self.dropped += 1;
        }
        self.times.push_back(time);
        self.stacks.push_back(stack);
    }

    /// An event of process `pid` at `time`.
    pub fn mark(&mut self, time: u64, pid: u32, kind: MarkerKind) {
        if self.markers.len() < MAX_MARKERS && time != 0 {
            self.markers.push(TimelineMarker { time, pid, kind });
        }
    }

    /// Samples whose times were dropped to stay within the bound.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The timeline of the samples kept, in time order (rings are drained
    /// one CPU at a time).
    pub fn timeline(&self) -> Timeline {
        let mut samples: Vec<(u64, u32)> = self
            .times
            .iter()
            .copied()
            .zip(self.stacks.iter().copied())
            .collect();
        samples.sort_by_key(|&(time, _)| time);
        let mut markers = self.markers.clone();
        markers.sort_by_key(|m| m.time);
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0);
        Timeline {
            samples,
            markers,
            dropped: self.dropped,
            monotonic_zero_unix_ms: unix_ms - monotonic_ns() as f64 / 1e6,
            ..Default::default()
        }
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds: the clock of the samples' times.
fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_samples_are_dropped_and_counted() {
        let mut t = Times::new(7, 3);
        for (time, stack) in [(50, 0), (10, 1), (0, 9), (30, 2), (40, 3)] {
            t.push(time, stack);
        }
        assert_eq!(t.dropped(), 1);
        t.mark(35, 7, MarkerKind::Exit);
        let timeline = t.timeline();
        // Kept: the last three with a time, sorted by time.
        assert_eq!(timeline.samples, [(10, 1), (30, 2), (40, 3)]);
        assert_eq!(timeline.dropped, 1);
        let kinds: Vec<_> = timeline.markers.iter().map(|m| m.kind.clone()).collect();
        // The session started now, long after time 35 on this clock.
        assert_eq!(kinds, [MarkerKind::Exit, MarkerKind::Start]);
        let now_ms = monotonic_ns() as f64 / 1e6;
        let unix_now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
            * 1000.0;
        assert!((timeline.monotonic_zero_unix_ms + now_ms - unix_now).abs() < 1000.0);
    }

    /// What the bound costs: the bytes the two queues hold once full, and
    /// after more samples than they keep.
    #[test]
    fn a_full_timeline_holds_12_bytes_a_sample() {
        let mut t = Times::new(1, MAX_SAMPLES);
        let held = |t: &Times| t.times.capacity() * 8 + t.stacks.capacity() * 4;
        for i in 0..MAX_SAMPLES as u64 {
            t.push(i + 1, i as u32);
        }
        assert_eq!(held(&t), 12 * MAX_SAMPLES);
        assert_eq!(held(&t), 24 << 20);
        for i in 0..1000u64 {
            t.push(MAX_SAMPLES as u64 + i + 1, 0);
        }
        assert_eq!(held(&t), 24 << 20);
        assert_eq!(t.dropped(), 1000);
    }
}
