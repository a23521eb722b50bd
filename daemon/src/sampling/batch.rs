//! The batch one drain of a ring delivers to one session: its layout
//! (samples flattened into a few buffers), the pool its buffers go back
//! to once the session has counted it, and the bound on the bytes of
//! batches a group's sessions have not counted yet.
use crate::process::maps::Mapping;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What one drain of one ring delivers to one session.
#[derive(Debug, Default)]
pub struct Batch {
    /// The target's stacks, innermost first, flattened; `ends[i]` is where
    /// stack `i` ends in `frames`. Return addresses are already minus one.
    pub frames: Vec<u64>,
    pub ends: Vec<u32>,
    /// Every sample the ring held in this drain, the target's or not.
    pub seen: u64,
    /// Samples the kernel lost on this ring since the last drain.
    pub lost: u64,
    /// On a target's rings, what its events counted since the last reading
    /// (for cpu-clock, nanoseconds its tasks ran, sampled or not): see
    /// [`crate::os::perf::Counts`].
    pub counted: u64,
    /// Times the kernel throttled this ring since the last drain.
    pub throttled: u64,
    /// The process of each of the target's frame-pointer stacks cut at the
    /// kernel's depth limit.
    pub truncated: Vec<u32>,
    /// New executable mappings of the session's processes: (pid, mapping,
    /// perf time).
    pub mappings: Vec<(u32, Mapping, u64)>,
    /// A process of the session exec'd: (pid, new command name). A batch
    /// ends at an exec, so the samples of the new program come in the next
    /// batch, which starts with the exec.
    pub exec: Option<(u32, String)>,
    /// The exec's time (CLOCK_MONOTONIC nanoseconds).
    pub exec_time: u64,
    /// Processes of the session that forked a new process: (child, parent,
    /// perf time).
    pub forks: Vec<(u32, u32, u64)>,
    /// Processes of the session that exited, and when (CLOCK_MONOTONIC
    /// nanoseconds).
    pub exits: Vec<(u32, u64)>,
    /// Process and thread ids of the stacks, in order.
    pub pids: Vec<u32>,
    pub tids: Vec<u32>,
    /// Per stack, the sample's time (CLOCK_MONOTONIC nanoseconds; 0 for a
    /// wait).
    pub times: Vec<u64>,
    /// Names the target's threads took (COMM records): (tid, name).
    pub comms: Vec<(u32, String)>,
    /// Per stack (when the ring's samples carry them): the user registers
    /// (ip, sp, bp; frame-pointer samples only sp), zero when the sample had
    /// no user context...
    pub user_regs: Vec<[u64; 3]>,
    /// ...and the copied user stack (frame-pointer samples: a few bytes),
    /// flattened; `user_ends[i]` is where
    /// stack `i`'s copy ends in `user_stack`.
    pub user_stack: Vec<u8>,
    pub user_ends: Vec<u32>,
    /// Per stack, on rings with switches (empty elsewhere, where each
    /// stack is one sample): the nanoseconds it stands for (a wait, or an
    /// on-CPU sample's period)...
    pub weights: Vec<u64>,
    /// ...and what it is: [`Mark::OnCpu`], or the kind of wait.
    pub marks: Vec<Mark>,
    /// On rings with switches: the time accounting of this drain...
    pub time: Option<profd_common::api::TimeTotals>,
    /// ...and per thread, the nanoseconds of its `unknown_ns`.
    pub unknown: Vec<(u32, u64)>,
    /// The ring the batch came from, to give its buffers back to (see
    /// [`Batch::recycle`]).
    pub pool: Option<BatchPool>,
    /// The bytes it holds, counted in its group's backlog until it is
    /// counted (or dropped).
    pub ticket: Option<Ticket>,
}

/// The bytes of batches sent to a group's sessions and not counted yet,
/// and how many it may hold: a group over it leaves its rings alone until
/// its sessions catch up (the kernel then drops records, and says so),
/// rather than queue without bound what a session cannot count as fast as
/// the rings fill.
#[derive(Debug)]
pub struct Backlog {
    bytes: AtomicUsize,
    max: usize,
    all: &'static Queued,
    /// Told at each batch counted.
    counted: tokio::sync::Notify,
}

/// Bytes of batches waiting in a set of backlogs, and the most they may
/// hold together: a backlog holding some is over its bound too when all of
/// them together are over this one.
#[derive(Debug)]
pub struct Queued {
    bytes: AtomicUsize,
    max: usize,
}

/// Every backlog of the daemon: ten sessions behind hold no more than one.
pub static QUEUED: Queued = Queued {
    bytes: AtomicUsize::new(0),
    max: 32 << 20,
};

impl Backlog {
    pub fn new(max: usize) -> Arc<Backlog> {
        Backlog::within(max, &QUEUED)
    }

    /// A backlog of at most `max` bytes, in the set `all`.
    pub fn within(max: usize, all: &'static Queued) -> Arc<Backlog> {
        Arc::new(Backlog {
            bytes: AtomicUsize::new(0),
            max,
            all,
            counted: tokio::sync::Notify::new(),
        })
    }

    /// The batches in flight hold more than the bound.
    pub fn over(&self) -> bool {
        let own = self.bytes.load(Ordering::Acquire);
        // Only one holding batches waits for all: a batch of its own
        // counted tells it when to look again.
        own > self.max || (own > 0 && self.all.bytes.load(Ordering::Acquire) > self.all.max)
    }

    /// Resolves after a batch in flight was counted (or at once, when one
    /// was since the last call).
    pub async fn counted(&self) {
        self.counted.notified().await
    }

    /// Count `batch` in the backlog until it is counted or dropped.
    pub fn charge(self: &Arc<Backlog>, batch: &mut Batch) {
        let bytes = batch.bytes().1 + std::mem::size_of::<Batch>();
        self.bytes.fetch_add(bytes, Ordering::AcqRel);
        self.all.bytes.fetch_add(bytes, Ordering::AcqRel);
        batch.ticket = Some(Ticket {
            bytes,
            backlog: self.clone(),
        });
    }
}

/// A batch's place in its group's [`Backlog`], given back when dropped.
#[derive(Debug)]
pub struct Ticket {
    bytes: usize,
    backlog: Arc<Backlog>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.backlog.bytes.fetch_sub(self.bytes, Ordering::AcqRel);
        self.backlog
            .all
            .bytes
            .fetch_sub(self.bytes, Ordering::AcqRel);
        self.backlog.counted.notify_one();
    }
}

/// What a weighted stack stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// An on-CPU sample.
    OnCpu,
    /// A wait of a thread that gave the CPU up (sleep, I/O, a lock).
    Blocked,
    /// A wait of a preempted thread, runnable but not running.
    Runnable,
}

/// Emptied batches on their way back to the rings, so that the next drains
/// reuse their buffers instead of allocating new ones. One pool serves all
/// the rings of a sampler, and keeps at most a given number of batches and
/// bytes: rings that copy stacks fill batches of hundreds of KiB, and a
/// daemon with many targets has many such rings.
#[derive(Clone)]
pub struct BatchPool(Arc<Mutex<Spare>>);

struct Spare {
    batches: Vec<Batch>,
    /// Bytes the kept batches' buffers hold.
    bytes: usize,
    /// The most bytes a recycled batch used lately (see [`BatchPool::put`]).
    peak: usize,
    max_batches: usize,
    max_bytes: usize,
}

impl std::fmt::Debug for BatchPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BatchPool")
    }
}

impl Default for BatchPool {
    /// Room for the batches of a few drains of every CPU, and 4 MiB.
    fn default() -> BatchPool {
        BatchPool::new(64, 4 << 20)
    }
}

impl BatchPool {
    /// A pool that keeps at most `max_batches` batches holding at most
    /// `max_bytes` in all.
    pub fn new(max_batches: usize, max_bytes: usize) -> BatchPool {
        BatchPool(Arc::new(Mutex::new(Spare {
            batches: Vec::new(),
            bytes: 0,
            peak: 0,
            max_batches,
            max_bytes,
        })))
    }

    /// Drop the kept batches (when rings close: theirs would stay unused).
    pub fn clear(&self) {
        let mut spare = self.lock();
        spare.batches.clear();
        spare.bytes = 0;
    }

    /// Bytes the kept batches hold.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes as u64
    }

    /// Drop the kept batches (memory pressure); the bytes they held.
    pub fn shed(&self) -> u64 {
        let held = self.bytes();
        self.clear();
        held
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Spare> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn take(&self) -> Batch {
        let mut spare = self.lock();
        match spare.batches.pop() {
            Some(mut batch) => {
                spare.bytes -= batch.bytes().1;
                batch
            }
            None => Batch::default(),
        }
    }

    /// Keep `batch` for a next drain. Its buffers are shrunk first when
    /// they hold over four times the pool's recent peak use: a burst does
    /// not leave every pooled batch that large, while batches whose drains
    /// vary in size (a watermark wakeup, then a short timer drain) keep
    /// their room instead of being shrunk and grown again each time.
    fn put(&self, mut batch: Batch) {
        let (used, room) = batch.bytes();
        let peak = {
            let mut spare = self.lock();
            // Decays by 1/64 a use: after a burst, a few seconds of drains.
            spare.peak = used.max(spare.peak - spare.peak / 64);
            spare.peak
        };
        if room > 4 * peak {
            for buffer in batch.buffers() {
                buffer.fit();
            }
        }
        batch.clear();
        let bytes = batch.bytes().1;
        let mut spare = self.lock();
        if spare.batches.len() < spare.max_batches && spare.bytes + bytes <= spare.max_bytes {
            spare.bytes += bytes;
            spare.batches.push(batch);
        }
    }
}

/// A buffer of a batch's samples, as recycling handles it.
trait SampleBuffer {
    /// Bytes in use and bytes held.
    fn bytes(&self) -> (usize, usize);
    /// Shrink to twice the use when holding four times more.
    fn fit(&mut self);
    fn clear(&mut self);
}

impl<T> SampleBuffer for Vec<T> {
    fn bytes(&self) -> (usize, usize) {
        let size = std::mem::size_of::<T>();
        (self.len() * size, self.capacity() * size)
    }

    fn fit(&mut self) {
        if self.capacity() > 4 * self.len() {
            self.shrink_to(2 * self.len());
        }
    }

    fn clear(&mut self) {
        Vec::clear(self);
    }
}

/// One sample of a batch: its kernel (or frame-pointer) frames and the user
/// registers and stack bytes copied with it.
pub struct SampleView<'a> {
    pub pid: u32,
    pub tid: u32,
    /// CLOCK_MONOTONIC nanoseconds (0 for a wait).
    pub time: u64,
    pub frames: &'a [u64],
    pub user: Option<([u64; 3], &'a [u8])>,
    /// Nanoseconds on rings with switches, else 1 (one sample).
    pub weight: u64,
    pub mark: Mark,
}

impl Batch {
    /// The samples in this batch.
    pub fn samples(&self) -> impl Iterator<Item = SampleView<'_>> {
        let (mut start, mut ustart) = (0usize, 0usize);
        self.ends.iter().enumerate().map(move |(i, &end)| {
            let frames = &self.frames[start..end as usize];
            start = end as usize;
            let user = self.user_regs.get(i).map(|&regs| {
                let uend = self.user_ends[i] as usize;
                let stack = &self.user_stack[ustart..uend];
                ustart = uend;
                (regs, stack)
            });
            SampleView {
                pid: self.pids.get(i).copied().unwrap_or(0),
                tid: self.tids.get(i).copied().unwrap_or(0),
                time: self.times.get(i).copied().unwrap_or(0),
                frames,
                user,
                weight: self.weights.get(i).copied().unwrap_or(1),
                mark: self.marks.get(i).copied().unwrap_or(Mark::OnCpu),
            }
        })
    }

    /// Add one sample (see the fields).
    pub fn push(
        &mut self,
        pid: u32,
        tid: u32,
        frames: impl Iterator<Item = u64>,
        user: Option<([u64; 3], &[u8])>,
    ) {
        self.pids.push(pid);
        self.tids.push(tid);
        self.times.push(0);
        self.frames.extend(frames);
        self.ends.push(self.frames.len() as u32);
        if let Some((regs, stack)) = user {
            self.user_regs.push(regs);
            self.user_stack.extend_from_slice(stack);
            self.user_ends.push(self.user_stack.len() as u32);
        }
    }

    /// Take the samples out (their session is too far behind) and free
    /// their buffers, keeping the rest (mappings, forks, exits, names):
    /// they count as lost, not as seen. The samples taken out.
    pub fn drop_samples(&mut self) -> u64 {
        let n = self.ends.len() as u64;
        // Their room goes too: the batch waits with what it holds.
        for buffer in self.buffers() {
            buffer.clear();
            buffer.fit();
        }
        self.seen = self.seen.saturating_sub(n);
        self.lost += n;
        n
    }

    /// Give the batch's buffers back to the ring that filled it, for its
    /// next drains (a batch made elsewhere is just dropped).
    pub fn recycle(mut self) {
        if let Some(pool) = self.pool.take() {
            pool.put(self);
        }
    }

    /// The buffers that carry samples.
    fn buffers(&mut self) -> [&mut dyn SampleBuffer; 11] {
        [
            &mut self.weights,
            &mut self.marks,
            &mut self.frames,
            &mut self.ends,
            &mut self.pids,
            &mut self.tids,
            &mut self.times,
            &mut self.user_regs,
            &mut self.user_stack,
            &mut self.user_ends,
            &mut self.truncated,
        ]
    }

    /// Bytes the buffers of samples use and hold.
    fn bytes(&mut self) -> (usize, usize) {
        self.buffers().iter().fold((0, 0), |(used, room), b| {
            let (u, r) = b.bytes();
            (used + u, room + r)
        })
    }

    /// Empty the batch, keeping its buffers.
    fn clear(&mut self) {
        for buffer in self.buffers() {
            buffer.clear();
        }
        self.seen = 0;
        self.lost = 0;
        self.counted = 0;
        self.throttled = 0;
        self.mappings.clear();
        self.exec = None;
        self.exec_time = 0;
        self.forks.clear();
        self.exits.clear();
        self.comms.clear();
        self.time = None;
        self.unknown.clear();
        self.ticket = None;
    }

    pub(super) fn is_empty(&self) -> bool {
        self.seen == 0
            && self.lost == 0
            && self.counted == 0
            && self.throttled == 0
            && self.mappings.is_empty()
            && self.comms.is_empty()
            && self.exec.is_none()
            && self.forks.is_empty()
            && self.exits.is_empty()
            && self.time.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_behind_holds_one_batch_past_its_bound_its_samples_lost() {
        let queue = Backlog::new(100_000);
        let mut kept = Vec::new();
        let (mut delivered, mut lost) = (0, 0);
        for _ in 0..50 {
            let mut b = Batch {
                seen: 12,
                ..Batch::default()
            };
            for _ in 0..10 {
                b.push(
                    1,
                    2,
                    [1, 2].into_iter(),
                    Some(([4, 5, 6], &[7u8; 4096][..])),
                );
            }
            b.exits.push((3, 9));
            if queue.over() {
                assert_eq!(b.drop_samples(), 10);
                assert_eq!((b.seen, b.lost, b.samples().count()), (2, 10, 0));
                assert_eq!(b.exits, [(3, 9)], "the rest is kept");
            }
            queue.charge(&mut b);
            delivered += b.samples().count();
            lost += b.lost;
            kept.push(b); // never counted: the session is stuck
        }
        let bytes = queue.bytes.load(Ordering::Relaxed);
        // The bound, the one batch that passed it (its buffers' room: 64
        // KiB of stack copies and the rest), and every batch's own struct.
        let bound = 100_000 + 70_000 + 50 * std::mem::size_of::<Batch>();
        assert!(bytes < bound, "bounded: {bytes} of {bound}");
        assert_eq!(
            delivered as u64 + lost,
            500,
            "every sample delivered or lost"
        );
        assert!(lost >= 400, "{lost}");
        drop(kept);
        assert_eq!(queue.bytes.load(Ordering::Relaxed), 0);
        assert!(!queue.over());
    }

    /// Backlogs under their own bound are over it when all of them
    /// together hold more than theirs, if they hold some.
    #[test]
    fn all_backlogs_together_are_bounded() {
        const ALL_QUEUES_BYTES: usize = 1 << 20;
        static ALL: Queued = Queued {
            bytes: AtomicUsize::new(0),
            max: ALL_QUEUES_BYTES,
        };
        let a = Backlog::within(usize::MAX, &ALL);
        let b = Backlog::within(usize::MAX, &ALL);
        let big = |n| {
            let mut batch = Batch::default();
            batch.push(1, 1, [1].into_iter(), Some(([0; 3], &vec![0u8; n][..])));
            batch
        };
        let mut first = big(ALL_QUEUES_BYTES / 2);
        a.charge(&mut first);
        assert!(!a.over() && !b.over());
        let mut second = big(ALL_QUEUES_BYTES / 2 + 4096);
        a.charge(&mut second);
        assert!(a.over(), "all together over");
        assert!(!b.over(), "nothing held: nothing to wait for");
        let mut third = big(16);
        b.charge(&mut third);
        assert!(b.over());
        drop((first, second));
        assert!(!a.over() && !b.over());
    }

    #[test]
    fn batch_samples_keep_frames_and_stack_copies_apart() {
        let mut b = Batch::default();
        b.push(
            1,
            5,
            [1, 2].into_iter(),
            Some(([10, 20, 30], &[7u8; 16][..])),
        );
        b.push(1, 6, [3, 4, 5].into_iter(), Some(([0; 3], &[][..])));
        b.push(1, 5, [6].into_iter(), Some(([11, 21, 31], &[9u8; 8][..])));
        let samples: Vec<_> = b
            .samples()
            .map(|s| (s.frames.to_vec(), s.user.map(|(r, st)| (r, st.to_vec()))))
            .collect();
        assert_eq!(
            samples[0],
            (vec![1, 2], Some(([10, 20, 30], vec![7u8; 16])))
        );
        assert_eq!(samples[1], (vec![3, 4, 5], Some(([0; 3], vec![]))));
        assert_eq!(samples[2], (vec![6], Some(([11, 21, 31], vec![9u8; 8]))));
        let mut fp = Batch::default();
        fp.push(1, 1, [1].into_iter(), None);
        assert!(fp.samples().all(|s| s.user.is_none()));
    }

    #[test]
    fn a_batch_filled_far_below_its_room_comes_back_smaller() {
        let pool = BatchPool::new(4, usize::MAX);
        let mut b = Batch {
            pool: Some(pool.clone()),
            ..Batch::default()
        };
        b.user_stack.reserve(1 << 20); // after one large drain
        b.frames.reserve(4096);
        b.push(
            1,
            2,
            [1, 2].into_iter(),
            Some(([4, 5, 6], &[7u8; 1000][..])),
        );
        b.recycle();
        let again = pool.take();
        assert!(again.user_stack.capacity() >= 1000 && again.user_stack.capacity() <= 2000);
        assert!(again.frames.capacity() <= 4, "{}", again.frames.capacity());
    }

    #[test]
    fn batches_keep_their_room_while_drains_that_large_are_recent() {
        let pool = BatchPool::new(4, usize::MAX);
        let used = |n: usize| {
            let mut b = Batch {
                pool: Some(pool.clone()),
                ..Batch::default()
            };
            b.user_stack.reserve_exact(1 << 20);
            b.push(1, 2, [1].into_iter(), Some(([4, 5, 6], &vec![7u8; n][..])));
            b
        };
        // A watermark drain of 512 KiB, then a short timer drain.
        used(512 << 10).recycle();
        pool.take();
        used(8 << 10).recycle();
        assert!(pool.take().user_stack.capacity() >= 1 << 20, "kept");
        // Once only small drains are recent, the room goes.
        for _ in 0..200 {
            used(8 << 10).recycle();
            pool.take();
        }
        used(8 << 10).recycle();
        assert!(pool.take().user_stack.capacity() <= 16 << 10, "shrunk");
    }

    #[test]
    fn recycled_batches_come_back_empty_with_their_buffers() {
        let pool = BatchPool::new(1, usize::MAX);
        let filled = || {
            let mut b = Batch {
                seen: 5,
                exec: Some((1, "x".into())),
                pool: Some(pool.clone()),
                ..Batch::default()
            };
            b.push(
                1,
                2,
                [1, 2, 3].into_iter(),
                Some(([4, 5, 6], &[7u8; 64][..])),
            );
            b
        };
        let (a, b) = (filled(), filled());
        let room = (a.frames.capacity(), a.user_stack.capacity());
        a.recycle();
        b.recycle();
        assert_eq!(pool.lock().batches.len(), 1, "no more than it keeps");
        let again = pool.take();
        assert_eq!((again.frames.capacity(), again.user_stack.capacity()), room);
        assert_eq!(again.samples().count(), 0);
        assert!(again.is_empty() && again.pool.is_none());
        assert_eq!(pool.take().frames.capacity(), 0, "then new ones");
        assert_eq!(pool.lock().bytes, 0);
        filled().recycle();
        pool.clear();
        let spare = pool.lock();
        assert_eq!((spare.batches.len(), spare.bytes), (0, 0));
        drop(spare);
        // A batch from elsewhere has no pool to go back to.
        Batch::default().recycle();
        // Nor are batches kept beyond the pool's bytes.
        let small = BatchPool::new(8, 100);
        let mut b = Batch {
            pool: Some(small.clone()),
            ..Batch::default()
        };
        b.push(1, 2, [1].into_iter(), Some(([4, 5, 6], &[7u8; 64][..])));
        b.recycle();
        assert!(small.lock().batches.is_empty(), "over 100 bytes");
    }
}
