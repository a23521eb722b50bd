//! The sampler: per-CPU perf rings shared by all sessions with the same
//! sampling settings, one task per CPU draining its ring on watermark wakeups
//! (and every 100 ms), demultiplexing samples by process to the sessions that
//! target it (and, for sessions that follow children, the processes it forks)
//! and counting the rest as discarded. No symbols here.
use crate::maps::{Backing, Mapping};
use crate::perf::record::{is_context_marker, Record, CONTEXT_USER};
use crate::perf::{EventKind, EventSpec, PerfError, PerfEvent};
use crate::symbolize::is_kernel;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, oneshot, watch, Mutex};
use tokio::task::JoinHandle;

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
    /// Times the kernel throttled this ring since the last drain.
    pub throttled: u64,
    /// The target's frame-pointer stacks cut at the kernel's depth limit.
    pub truncated: u64,
    /// New executable mappings of the session's processes: (pid, mapping).
    pub mappings: Vec<(u32, Mapping)>,
    /// A process of the session exec'd: (pid, new command name). A batch
    /// ends at an exec, so the samples of the new program come in the next
    /// batch, which starts with the exec.
    pub exec: Option<(u32, String)>,
    /// Processes of the session that forked a new process: (child, parent).
    pub forks: Vec<(u32, u32)>,
    /// Processes of the session that exited.
    pub exits: Vec<u32>,
    /// Process and thread ids of the stacks, in order.
    pub pids: Vec<u32>,
    pub tids: Vec<u32>,
    /// Names the target's threads took (COMM records): (tid, name).
    pub comms: Vec<(u32, String)>,
    /// With stack copies, per stack: the user registers (ip, sp, bp), zero
    /// when the sample had no user context...
    pub user_regs: Vec<[u64; 3]>,
    /// ...and the copied user stack, flattened; `user_ends[i]` is where
    /// stack `i`'s copy ends in `user_stack`.
    pub user_stack: Vec<u8>,
    pub user_ends: Vec<u32>,
}

/// One sample of a batch: its kernel (or frame-pointer) frames and, with
/// stack copies, the user registers and stack to unwind.
pub struct SampleView<'a> {
    pub pid: u32,
    pub tid: u32,
    pub frames: &'a [u64],
    pub user: Option<([u64; 3], &'a [u8])>,
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
                frames,
                user,
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
        self.frames.extend(frames);
        self.ends.push(self.frames.len() as u32);
        if let Some((regs, stack)) = user {
            self.user_regs.push(regs);
            self.user_stack.extend_from_slice(stack);
            self.user_ends.push(self.user_stack.len() as u32);
        }
    }

    fn is_empty(&self) -> bool {
        self.seen == 0
            && self.lost == 0
            && self.throttled == 0
            && self.mappings.is_empty()
            && self.comms.is_empty()
            && self.exec.is_none()
            && self.forks.is_empty()
            && self.exits.is_empty()
    }
}

/// Daemon-wide sample accounting.
#[derive(Debug, Default)]
pub struct Counters {
    pub samples: AtomicU64,
    pub attributed: AtomicU64,
    pub discarded: AtomicU64,
    pub lost: AtomicU64,
    pub throttles: AtomicU64,
    pub parse_errors: AtomicU64,
}

#[derive(Clone)]
struct Route {
    session: u64,
    pid: u32,
    /// Follow the processes `pid` forks (each gets a route of its own).
    children: bool,
    tx: mpsc::UnboundedSender<Batch>,
}

#[derive(Default)]
struct Routes {
    /// One route per (session, process).
    all: Vec<Route>,
    /// One per session (its first route): each drain makes one batch per
    /// session, however many of its processes are routed.
    sessions: Vec<Route>,
    /// The sessions (indices into `sessions`) each process is routed to.
    by_pid: HashMap<u32, Vec<usize>>,
}

impl Routes {
    fn rebuild(&mut self) {
        self.by_pid.clear();
        self.sessions.clear();
        let mut slot: HashMap<u64, usize> = HashMap::new();
        for r in &self.all {
            let i = *slot.entry(r.session).or_insert_with(|| {
                self.sessions.push(r.clone());
                self.sessions.len() - 1
            });
            self.by_pid.entry(r.pid).or_default().push(i);
        }
    }
}

struct CpuTask {
    flush: mpsc::UnboundedSender<oneshot::Sender<()>>,
    handle: JoinHandle<()>,
}

struct Group {
    routes: Arc<RwLock<Routes>>,
    cpus: Vec<CpuTask>,
    stop: watch::Sender<bool>,
}

/// Ring groups keyed by their settings; a group's rings are opened by its
/// first session and closed with its last.
pub struct Sampler {
    cpus: Vec<u32>,
    /// Data pages of each ring, when not the default.
    pub ring_pages: Option<usize>,
    groups: Mutex<HashMap<EventSpec, Group>>,
    counters: Arc<Counters>,
}

/// Where sessions get their samples from: the perf rings, or a fake in tests.
#[tonic::async_trait]
pub trait SampleSource: Send + Sync {
    /// Route samples of `pid` (with `children`, also of the processes it
    /// forks from now on) to `tx` as `session`; returns the settings in use.
    async fn subscribe(
        &self,
        want: EventSpec,
        session: u64,
        pid: u32,
        children: bool,
        tx: mpsc::UnboundedSender<Batch>,
    ) -> Result<EventSpec, PerfError>;
    /// Stop routing to `session`.
    async fn unsubscribe(&self, spec: EventSpec, session: u64);
    /// Deliver everything sampled so far; returns once it is sent.
    async fn flush(&self, spec: EventSpec);
    /// Open groups of shared settings and how many sessions use each.
    async fn groups(&self) -> Vec<(EventSpec, usize)>;
    /// Daemon-wide accounting.
    fn counters(&self) -> &Counters;
}

/// Data pages per CPU ring.
pub const RING_PAGES: usize = 128;
/// Data pages per CPU ring with stack copies: room for dozens of the largest
/// records (a ring smaller than one record drops samples without a trace).
pub const STACK_RING_PAGES: usize = 512;

impl Sampler {
    pub fn new(cpus: Vec<u32>) -> Sampler {
        Sampler {
            cpus,
            ring_pages: None,
            groups: Mutex::new(HashMap::new()),
            counters: Arc::default(),
        }
    }

    fn open_group(&self, spec: EventSpec) -> Result<Group, PerfError> {
        let events = self
            .cpus
            .iter()
            .map(|&cpu| PerfEvent::open(cpu, &spec))
            .collect::<Result<Vec<_>, _>>()?;
        tracing::info!(?spec, cpus = events.len(), "opened the sampling rings");
        let routes = Arc::new(RwLock::new(Routes::default()));
        let (stop, stop_rx) = watch::channel(false);
        let mut cpus = Vec::with_capacity(events.len());
        for event in events {
            let cpu = event.cpu();
            let afd = event.into_async().map_err(|source| PerfError::Io {
                what: "registering the ring with epoll",
                cpu,
                source,
            })?;
            let (flush, flush_rx) = mpsc::unbounded_channel();
            let handle = tokio::spawn(run_cpu(
                afd,
                routes.clone(),
                self.counters.clone(),
                flush_rx,
                stop_rx.clone(),
            ));
            cpus.push(CpuTask { flush, handle });
        }
        Ok(Group { routes, cpus, stop })
    }
}

#[tonic::async_trait]
impl SampleSource for Sampler {
    fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Route samples of `pid` to `tx` as `session`, opening the rings for
    /// `kind` at `frequency_hz` if no session uses them yet. A `cycles`
    /// request on a machine without a PMU falls back to cpu-clock. Returns
    /// the settings in use.
    async fn subscribe(
        &self,
        want: EventSpec,
        session: u64,
        pid: u32,
        children: bool,
        tx: mpsc::UnboundedSender<Batch>,
    ) -> Result<EventSpec, PerfError> {
        let mut groups = self.groups.lock().await;
        let kind = want.kind;
        let ring_pages = match self.ring_pages {
            Some(pages) => pages,
            None if want.stack_bytes > 0 => STACK_RING_PAGES,
            None => RING_PAGES,
        };
        let mut spec = EventSpec { ring_pages, ..want };
        if let std::collections::hash_map::Entry::Vacant(slot) = groups.entry(spec) {
            match self.open_group(spec) {
                Ok(group) => {
                    slot.insert(group);
                }
                Err(PerfError::Unsupported { event, source }) if kind == EventKind::Cycles => {
                    tracing::info!(%source, "{event} cannot be opened (no hardware PMU); falling back to cpu-clock");
                    spec.kind = EventKind::CpuClock;
                    if let std::collections::hash_map::Entry::Vacant(slot) = groups.entry(spec) {
                        slot.insert(self.open_group(spec)?);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        let group = groups.get(&spec).expect("group just ensured");
        let mut routes = group.routes.write().unwrap_or_else(|e| e.into_inner());
        routes.all.push(Route {
            session,
            pid,
            children,
            tx,
        });
        routes.rebuild();
        Ok(spec)
    }

    /// Stop routing to `session`; close the group's rings when it was the last.
    async fn unsubscribe(&self, spec: EventSpec, session: u64) {
        let mut groups = self.groups.lock().await;
        let Some(group) = groups.get(&spec) else {
            return;
        };
        let empty = {
            let mut routes = group.routes.write().unwrap_or_else(|e| e.into_inner());
            routes.all.retain(|r| r.session != session);
            routes.rebuild();
            routes.all.is_empty()
        };
        if empty {
            let group = groups.remove(&spec).expect("present");
            let _ = group.stop.send(true);
            for cpu in group.cpus {
                let _ = cpu.handle.await;
            }
            tracing::info!(?spec, "closed the sampling rings: no session uses them");
        }
    }

    /// Drain every ring of the group now; returns once all batches are sent.
    async fn flush(&self, spec: EventSpec) {
        let acks: Vec<_> = {
            let groups = self.groups.lock().await;
            let Some(group) = groups.get(&spec) else {
                return;
            };
            group
                .cpus
                .iter()
                .filter_map(|cpu| {
                    let (tx, rx) = oneshot::channel();
                    cpu.flush.send(tx).ok().map(|_| rx)
                })
                .collect()
        };
        for ack in acks {
            let _ = ack.await;
        }
    }

    /// Open groups and their session counts.
    async fn groups(&self) -> Vec<(EventSpec, usize)> {
        let groups = self.groups.lock().await;
        groups
            .iter()
            .map(|(spec, g)| {
                (
                    *spec,
                    g.routes
                        .read()
                        .unwrap_or_else(|e| e.into_inner())
                        .sessions
                        .len(),
                )
            })
            .collect()
    }
}

async fn run_cpu(
    mut ring: AsyncFd<PerfEvent>,
    routes: Arc<RwLock<Routes>>,
    counters: Arc<Counters>,
    mut flush: mpsc::UnboundedReceiver<oneshot::Sender<()>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            ready = ring.readable_mut() => match ready {
                Ok(mut guard) => {
                    drain(guard.get_inner_mut(), &routes, &counters);
                    guard.clear_ready();
                }
                Err(err) => {
                    tracing::error!(%err, "polling a sample ring failed");
                    return;
                }
            },
            _ = tick.tick() => drain(ring.get_mut(), &routes, &counters),
            Some(ack) = flush.recv() => {
                drain(ring.get_mut(), &routes, &counters);
                let _ = ack.send(());
            }
            _ = stop.changed() => {
                drain(ring.get_mut(), &routes, &counters);
                return;
            }
        }
    }
}

/// Append the frames of a perf callchain (context markers dropped, return
/// addresses minus one so they fall inside the call instruction) to `out`;
/// falls back to `ip` when the chain is empty. Returns the frames added.
/// A user-context entry in the kernel half of the address space is not a
/// return address (a frame-pointer walk read garbage); it is kept as a frame
/// with this value, which no symbolizer resolves.
pub const BAD_USER_FRAME: u64 = 0;

pub fn push_stack(out: &mut Vec<u64>, chain: impl Iterator<Item = u64>, ip: Option<u64>) -> usize {
    let before = out.len();
    let mut first = true;
    let mut user = false;
    for v in chain {
        if is_context_marker(v) {
            first = true;
            user = v == CONTEXT_USER;
            continue;
        }
        let addr = if first { v } else { v.wrapping_sub(1) };
        out.push(if user && is_kernel(addr) {
            BAD_USER_FRAME
        } else {
            addr
        });
        first = false;
    }
    if out.len() == before {
        if let Some(ip) = ip {
            out.push(ip);
        }
    }
    out.len() - before
}

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

fn drain(ring: &mut PerfEvent, routes: &RwLock<Routes>, counters: &Counters) {
    let stack_copy = ring.stack_copy();
    let max_stack = max_stack();
    let guard = routes.read().unwrap_or_else(|e| e.into_inner());
    let mut batches: Vec<Batch> = (0..guard.sessions.len())
        .map(|_| Batch::default())
        .collect();
    let (mut seen, mut lost, mut matched, mut throttles, mut errors) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    // Children forked and processes exited in this drain: routes to add and
    // remove once the read lock is released.
    let mut forked: HashMap<u32, Vec<usize>> = HashMap::new();
    let mut exited: Vec<u32> = Vec::new();
    // Samples already sent to each route in a batch cut at an exec.
    let mut sent_early = vec![0u64; guard.sessions.len()];
    ring.drain(|record| {
        let targets = |pid| route(&guard.by_pid, &forked, &exited, pid);
        match record {
            Ok(Record::Sample(s)) => {
                seen += 1;
                if let Some(targets) = targets(s.pid) {
                    matched += 1;
                    let user = stack_copy.then(|| {
                        let mut regs = s.regs_user();
                        let (bp, sp, ip) = (regs.next(), regs.next(), regs.next());
                        let regs = match (ip, sp, bp) {
                            (Some(ip), Some(sp), Some(bp)) => [ip, sp, bp],
                            _ => [0; 3],
                        };
                        (regs, s.stack_user)
                    });
                    for &i in targets {
                        let b = &mut batches[i];
                        let n = push_stack(
                            &mut b.frames,
                            s.callchain(),
                            if stack_copy { None } else { s.ip },
                        );
                        b.ends.push(b.frames.len() as u32);
                        b.pids.push(s.pid);
                        b.tids.push(s.tid);
                        b.truncated += u64::from(!stack_copy && n >= max_stack);
                        if let Some((regs, stack)) = user {
                            b.user_regs.push(regs);
                            b.user_stack.extend_from_slice(stack);
                            b.user_ends.push(b.user_stack.len() as u32);
                        }
                    }
                }
            }
            Ok(Record::Mmap2(m)) => {
                if let Some(targets) = targets(m.pid) {
                    let mapping = mapping_of(m.addr, m.len, m.pgoff, m.filename);
                    for &i in targets {
                        batches[i].mappings.push((m.pid, mapping.clone()));
                    }
                }
            }
            Ok(Record::Comm(c)) => {
                if let Some(targets) = targets(c.pid) {
                    let name = String::from_utf8_lossy(c.comm).into_owned();
                    for &i in targets {
                        if c.exec && c.pid == c.tid {
                            // The samples before the exec go in a batch of
                            // their own: they belong to the old program.
                            let mut before = std::mem::take(&mut batches[i]);
                            before.seen = before.ends.len() as u64;
                            sent_early[i] += before.seen;
                            if !before.is_empty() {
                                let _ = guard.sessions[i].tx.send(before);
                            }
                            batches[i].exec = Some((c.pid, name.clone()));
                        }
                        batches[i].comms.push((c.tid, name.clone()));
                    }
                }
            }
            Ok(Record::Fork(t)) if t.pid != t.ppid => {
                if let Some(targets) = targets(t.ppid) {
                    let follow: Vec<usize> = targets
                        .iter()
                        .copied()
                        .filter(|&i| guard.sessions[i].children)
                        .collect();
                    for &i in &follow {
                        batches[i].forks.push((t.pid, t.ppid));
                    }
                    if !follow.is_empty() {
                        exited.retain(|&p| p != t.pid);
                        forked.insert(t.pid, follow);
                    }
                }
            }
            Ok(Record::Exit(t)) if t.pid == t.tid => {
                if let Some(targets) = targets(t.pid).map(<[usize]>::to_vec) {
                    for i in targets {
                        batches[i].exits.push(t.pid);
                    }
                    forked.remove(&t.pid);
                    exited.push(t.pid);
                }
            }
            Ok(Record::Lost(l)) => lost += l.lost,
            Ok(Record::Throttle(_)) => throttles += 1,
            Ok(_) => {}
            Err(err) => {
                errors += 1;
                tracing::debug!(%err, "unparsable perf record");
            }
        }
    });
    let lost = ring.new_lost(lost);
    for ((route, mut batch), early) in guard.sessions.iter().zip(batches).zip(sent_early) {
        batch.seen = seen - early;
        batch.lost = lost;
        batch.throttled = throttles;
        if !batch.is_empty() {
            let _ = route.tx.send(batch);
        }
    }
    drop(guard);
    if !forked.is_empty() || !exited.is_empty() {
        update_routes(routes, forked, &exited);
    }
    counters.samples.fetch_add(seen, Ordering::Relaxed);
    counters.attributed.fetch_add(matched, Ordering::Relaxed);
    counters
        .discarded
        .fetch_add(seen - matched, Ordering::Relaxed);
    counters.lost.fetch_add(lost, Ordering::Relaxed);
    counters.throttles.fetch_add(throttles, Ordering::Relaxed);
    counters.parse_errors.fetch_add(errors, Ordering::Relaxed);
}

/// The sessions (batch indices) a process's records go to: routed before
/// this drain, or forked during it, and not exited during it.
fn route<'a>(
    by_pid: &'a HashMap<u32, Vec<usize>>,
    forked: &'a HashMap<u32, Vec<usize>>,
    exited: &[u32],
    pid: u32,
) -> Option<&'a [usize]> {
    let targets = by_pid.get(&pid).or_else(|| forked.get(&pid))?;
    (!exited.contains(&pid)).then_some(targets.as_slice())
}

/// Give forked children routes of their own (to the sessions following
/// their parent) and drop the routes of exited processes, so that a process
/// that later gets an exited one's pid is never taken for it.
fn update_routes(routes: &RwLock<Routes>, forked: HashMap<u32, Vec<usize>>, exited: &[u32]) {
    let mut routes = routes.write().unwrap_or_else(|e| e.into_inner());
    let mut add = Vec::new();
    for (pid, indices) in forked {
        for i in indices {
            if let Some(session) = routes.sessions.get(i) {
                add.push(Route {
                    pid,
                    ..session.clone()
                });
            }
        }
    }
    routes.all.retain(|r| !exited.contains(&r.pid));
    routes.all.extend(add);
    routes.rebuild();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_gets_one_batch_however_many_processes_it_follows() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let route = |session, pid| Route {
            session,
            pid,
            children: true,
            tx: tx.clone(),
        };
        let mut routes = Routes {
            all: vec![route(1, 10), route(2, 10), route(1, 11), route(1, 12)],
            ..Routes::default()
        };
        routes.rebuild();
        assert_eq!(routes.sessions.len(), 2);
        assert_eq!(routes.by_pid[&10], vec![0, 1]);
        assert_eq!(routes.by_pid[&11], vec![0]);
        let lock = RwLock::new(routes);
        update_routes(&lock, HashMap::from([(13, vec![1])]), &[11]);
        let routes = lock.into_inner().unwrap();
        assert!(
            !routes.by_pid.contains_key(&11),
            "exited processes are dropped"
        );
        assert_eq!(
            routes.by_pid[&13],
            vec![1],
            "a child joins its parent's session"
        );
        assert_eq!(routes.sessions.len(), 2);
    }

    const KERNEL: u64 = (-128i64) as u64;
    const USER: u64 = (-512i64) as u64;

    #[test]
    fn callchains_drop_markers_and_adjust_return_addresses() {
        let mut out = Vec::new();
        let chain = [
            KERNEL,
            0xffff_ffff_8100_0010,
            0xffff_ffff_8100_0020,
            USER,
            0x401000,
            0x402000,
        ];
        assert_eq!(push_stack(&mut out, chain.into_iter(), Some(1)), 4);
        assert_eq!(
            out,
            vec![
                0xffff_ffff_8100_0010,
                0xffff_ffff_8100_001f,
                0x401000,
                0x401fff
            ]
        );
    }

    #[test]
    fn kernel_addresses_in_the_user_chain_are_not_kernel_frames() {
        let mut out = Vec::new();
        push_stack(
            &mut out,
            [USER, 0x401000, 0xffff_ffff_8100_0010].into_iter(),
            None,
        );
        assert_eq!(out, vec![0x401000, BAD_USER_FRAME]);
    }

    #[test]
    fn empty_callchain_uses_ip() {
        let mut out = vec![7];
        assert_eq!(push_stack(&mut out, [USER].into_iter(), Some(0x1234)), 1);
        assert_eq!(out, vec![7, 0x1234]);
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
