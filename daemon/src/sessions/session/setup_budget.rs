//! The CPU spent setting up new processes' address spaces (reading
//! /proc/PID/maps, opening the files they map), measured daemon-wide, and
//! the per-second budget continuous profiling keeps it within: past it, a
//! new process's setup waits for a later batch, counted, its samples still
//! counted for it.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// CPU a second for setting up new processes: half a percent of a core.
pub const DEFAULT_PER_SECOND: Duration = Duration::from_millis(5);

/// The daemon's budget.
pub static BUDGET: Budget = Budget::new(DEFAULT_PER_SECOND);

/// The counts since the daemon started.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Counters {
    /// Processes set up, and the CPU seconds that took.
    pub processes: u64,
    pub seconds: f64,
    /// Processes whose setup waited for a later batch (the budget was
    /// spent)...
    pub deferred: u64,
    /// ...and their samples counted meanwhile: attributed to their process,
    /// their user stacks walked by frame pointers only, their addresses
    /// named from the mappings read once it is set up.
    pub deferred_samples: u64,
    /// The budget: CPU seconds a second.
    pub per_second: f64,
}

/// A token bucket of CPU time: refilled at `per_second` a second, holding
/// at most one second's worth; setup is allowed while it holds some, and
/// charged what it took (the bucket may go below zero: a long setup is
/// paid for by the seconds after it).
pub struct Budget {
    per_second_ns: AtomicU64,
    /// The last refill and the nanoseconds held then.
    bucket: Mutex<Option<(Instant, i64)>>,
    processes: AtomicU64,
    spent_ns: AtomicU64,
    deferred: AtomicU64,
    deferred_samples: AtomicU64,
}

impl Budget {
    pub const fn new(per_second: Duration) -> Budget {
        Budget {
            per_second_ns: AtomicU64::new(per_second.as_nanos() as u64),
            bucket: Mutex::new(None),
            processes: AtomicU64::new(0),
            spent_ns: AtomicU64::new(0),
            deferred: AtomicU64::new(0),
            deferred_samples: AtomicU64::new(0),
        }
    }

    /// Allow `per_second` of CPU a second from now on.
    pub fn set(&self, per_second: Duration) {
        let ns = u64::try_from(per_second.as_nanos()).unwrap_or(u64::MAX);
        self.per_second_ns.store(ns, Ordering::Relaxed);
    }

    /// Refill the bucket, then change what it holds by `delta` ns; what it
    /// holds now.
    fn bucket(&self, delta: i64) -> i64 {
        let rate = self.per_second_ns.load(Ordering::Relaxed);
        let cap = i64::try_from(rate).unwrap_or(i64::MAX);
        let now = Instant::now();
        let mut b = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let (last, held) = b.get_or_insert((now, cap));
        let earned = (now - *last).as_nanos().saturating_mul(u128::from(rate)) / 1_000_000_000;
        let earned = i64::try_from(earned).unwrap_or(i64::MAX);
        *held = held.saturating_add(earned).min(cap).saturating_add(delta);
        *last = now;
        *held
    }

    /// Whether a process may be set up now.
    pub fn allows(&self) -> bool {
        self.bucket(0) > 0
    }

    /// Set up a process with `setup`, counting it and the CPU it took.
    pub fn measure<R>(&self, setup: impl FnOnce() -> R) -> R {
        let start = crate::os::thread_cpu_ns();
        let r = setup();
        let took = crate::os::thread_cpu_ns().saturating_sub(start);
        self.bucket(-i64::try_from(took).unwrap_or(i64::MAX));
        self.processes.fetch_add(1, Ordering::Relaxed);
        self.spent_ns.fetch_add(took, Ordering::Relaxed);
        r
    }

    /// A process's setup waits for a later batch.
    pub fn defer(&self) {
        self.deferred.fetch_add(1, Ordering::Relaxed);
    }

    /// Samples of processes waiting to be set up were counted.
    pub fn deferred_samples(&self, n: u64) {
        self.deferred_samples.fetch_add(n, Ordering::Relaxed);
    }

    pub fn counters(&self) -> Counters {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Counters {
            processes: load(&self.processes),
            seconds: load(&self.spent_ns) as f64 / 1e9,
            deferred: load(&self.deferred),
            deferred_samples: load(&self.deferred_samples),
            per_second: load(&self.per_second_ns) as f64 / 1e9,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setup_is_allowed_until_the_seconds_budget_is_spent() {
        let b = Budget::new(Duration::from_millis(20));
        assert!(b.allows());
        // Burn 30 ms of CPU in a "setup": more than a second's budget.
        b.measure(|| {
            let start = crate::os::thread_cpu_ns();
            while crate::os::thread_cpu_ns() - start < 30_000_000 {
                std::hint::black_box(0);
            }
        });
        assert!(!b.allows(), "spent");
        let c = b.counters();
        assert_eq!(c.processes, 1);
        assert!(c.seconds >= 0.03, "{c:?}");
        b.defer();
        b.deferred_samples(3);
        let c = b.counters();
        assert_eq!((c.deferred, c.deferred_samples), (1, 3));
        // Refilled as time passes (20 ms a second: the 10 ms of debt in
        // half a second and more).
        std::thread::sleep(Duration::from_millis(700));
        assert!(b.allows(), "refilled");
        // No budget: nothing is allowed.
        let none = Budget::new(Duration::ZERO);
        assert!(!none.allows());
    }
}
