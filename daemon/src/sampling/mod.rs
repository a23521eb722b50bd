//! The sampler: per-CPU perf rings shared by all sessions with the same
//! sampling settings (and, with stack copies and no children followed, the
//! same target: those rings sample the target alone), one task per group draining all its rings
//! together on any ring's watermark wakeup, on a session's demand (a view,
//! the end) and [`DRAIN_EVERY`] after its last drain, demultiplexing samples
//! by process to the sessions that target it (and, for sessions that follow
//! children, the processes it forks) and counting the rest as discarded. No
//! symbols here.
mod batch;
mod callchain;
mod demux;
mod gaps;
mod tops;
mod waits;

pub use batch::{Backlog, Batch, BatchPool, Mark, SampleView};
pub use callchain::BAD_USER_FRAME;
pub use demux::{Children, Demux, Drained, RouteTo, Subscriber, Targets, EVERY_PROCESS};
pub use tops::StackTops;
pub use waits::{Waits, UNKNOWN_STACK_FRAME};

pub use crate::os::perf::Flush;
use crate::os::perf::{Counts, EventKind, EventSpec, PerfError, PerfEvent, Stacks, Target};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, oneshot, watch, Mutex, MutexGuard};
use tokio::task::JoinHandle;

/// Daemon-wide sample accounting.
#[derive(Debug, Default)]
pub struct Counters {
    pub samples: AtomicU64,
    pub attributed: AtomicU64,
    pub discarded: AtomicU64,
    pub lost: AtomicU64,
    pub throttles: AtomicU64,
    pub parse_errors: AtomicU64,
    /// Ring reads (a drain reads each ring of its group), and the bytes
    /// they read.
    pub drains: AtomicU64,
    pub bytes_read: AtomicU64,
    /// Samples not delivered to a session whose batches not yet counted
    /// held more than [`SESSION_QUEUE_BYTES`], or some while all sessions'
    /// held more than that: counted as lost in its
    /// totals.
    pub behind: AtomicU64,
}

#[derive(Clone)]
struct Route {
    session: Subscriber,
    pid: u32,
    /// Follow the processes `pid` forks (each gets a route of its own).
    children: Children,
    /// The perf time of the process's exit once a ring showed it: the
    /// route stays until the next drain, for the samples the other CPUs
    /// took before it.
    exited: Option<u64>,
    tx: mpsc::UnboundedSender<Batch>,
    /// The bytes of batches sent to the session and not counted yet (one
    /// per session, shared by its routes).
    queue: Arc<Backlog>,
}

#[derive(Default)]
struct Routes {
    /// One route per (session, process).
    all: Vec<Route>,
    /// One per session (its first route): each drain makes one batch per
    /// session, however many of its processes are routed.
    sessions: Vec<Route>,
    /// The sessions (indices into `sessions`) each process is routed to.
    targets: Targets,
}

impl Routes {
    fn rebuild(&mut self) {
        self.sessions.clear();
        let mut slot: HashMap<Subscriber, usize> = HashMap::new();
        for r in &self.all {
            slot.entry(r.session).or_insert_with(|| {
                self.sessions.push(r.clone());
                self.sessions.len() - 1
            });
        }
        self.targets = Targets::new(self.all.iter().map(|r| RouteTo {
            session: r.session,
            pid: r.pid,
            children: r.children,
        }));
    }
}

struct Group {
    routes: Arc<RwLock<Routes>>,
    /// With stack copies, the stack tops its drains cut copies at.
    tops: Option<StackTops>,
    /// Drain now (how, and asked at this CLOCK_MONOTONIC time: see
    /// [`drain`]), then acknowledge.
    flush: mpsc::UnboundedSender<(Flush, u64, oneshot::Sender<()>)>,
    /// The task draining the rings.
    task: JoinHandle<()>,
    stop: watch::Sender<bool>,
    /// When its rings opened (and its target's waiting threads were read).
    opened: u64,
}

/// Ring groups keyed by their settings; a group's rings are opened by its
/// first session and closed with its last.
pub struct Sampler {
    cpus: Vec<u32>,
    /// Data pages of each ring, when not the default.
    pub ring_pages: Option<usize>,
    /// How long after its last drain a ring is drained when nothing else
    /// drained it ([`DRAIN_EVERY`] unless set).
    pub drain_every: Duration,
    groups: Mutex<HashMap<EventSpec, Group>>,
    counters: Arc<Counters>,
    /// Spare batches of every ring.
    pool: BatchPool,
    /// What the PMU probe found when the sampler was made: whether a
    /// hardware cycle counter opens here (tests set it either way).
    pmu: bool,
}

/// What a session gets when it subscribes.
#[derive(Debug)]
pub struct Subscription {
    /// The settings in use.
    pub spec: EventSpec,
    /// With stack copies, the stack tops of the rings the session's batches
    /// come from: its walks raise and drop them.
    pub tops: Option<StackTops>,
    /// When the session's samples start (CLOCK_MONOTONIC, ns): its rings
    /// opened, or what a shared group's rings held before was counted.
    pub since: u64,
}

/// The event sampled for a request of `kind`, from the PMU probe: `cycles`
/// only where a hardware cycle counter opened, `cpu-clock` otherwise.
fn sampled_event(kind: EventKind, pmu: bool) -> EventKind {
    match kind {
        EventKind::Cycles if !pmu => EventKind::CpuClock,
        kind => kind,
    }
}

/// Where sessions get their samples from: the perf rings, or a fake in tests.
#[tonic::async_trait]
pub trait SampleSource: Send + Sync {
    /// Route samples of `pid` (with [`Children::Followed`], also of the
    /// processes it forks from now on) to `tx` as `session`;
    /// [`EVERY_PROCESS`]: of every process but the daemon.
    async fn subscribe(
        &self,
        want: EventSpec,
        session: Subscriber,
        pid: u32,
        children: Children,
        tx: mpsc::UnboundedSender<Batch>,
    ) -> Result<Subscription, PerfError>;
    /// Stop routing to `session`.
    async fn unsubscribe(&self, spec: EventSpec, session: Subscriber);
    /// Deliver everything sampled so far (see [`Flush`] for how much);
    /// returns once it is sent.
    async fn flush(&self, spec: EventSpec, how: Flush);
    /// Open groups of shared settings and the sessions using each.
    async fn groups(&self) -> Vec<(EventSpec, Vec<Subscriber>)>;
    /// Daemon-wide accounting.
    fn counters(&self) -> &Counters;
    /// CPUs sampled: each group has a ring on each.
    fn cpus(&self) -> u32;
}

/// A ring not drained at its watermark or on demand is drained this long
/// after its last drain: the bound on how late the daemon-wide counts and a
/// session without viewers are. Views flush the rings first, so this is not
/// how stale a view is; each drain is a wakeup of the daemon, which on an
/// idle ring costs more than the drain. The `drain_interval` setting
/// changes it.
pub const DRAIN_EVERY: Duration = Duration::from_secs(1);

/// Data pages per CPU ring.
pub const RING_PAGES: usize = 128;
/// Data pages per CPU ring with stack copies: room for dozens of the largest
/// records (a ring smaller than one record drops samples without a trace).
pub const STACK_RING_PAGES: usize = 512;
/// Least data pages of a ring sized by its rate: 128 KiB, two of the
/// largest records.
pub const MIN_RING_PAGES: usize = 32;

/// Data pages (of 4 KiB, a power of two, at least [`MIN_RING_PAGES`]) that
/// hold `seconds` of one CPU's samples at `frequency_hz`, each with a
/// `stack_bytes` stack copy and up to 1 KiB of call chain and header. One
/// CPU takes at most `frequency_hz` samples a second whatever runs on it.
pub fn ring_pages_for(frequency_hz: u32, stack_bytes: u32, seconds: u64) -> usize {
    let bytes = u64::from(frequency_hz) * (u64::from(stack_bytes) + 1024) * seconds;
    (bytes.div_ceil(4096) as usize)
        .next_power_of_two()
        .max(MIN_RING_PAGES)
}

/// The bytes of batches a session of a shared ring group may have waiting
/// (sent, not counted yet). Past it, each drain's samples for that session
/// are not sent, and count as lost in its totals: a session that falls
/// behind holds at most this and one drain's batch, however far behind.
/// The group's other sessions are not held up. (A group with switches
/// serves one session and has its rings wait instead: [`Backlog`].)
pub const SESSION_QUEUE_BYTES: usize = 32 << 20;

/// Data pages per CPU ring of switches with stack copies: a stack copy at
/// every switch out fills a ring in bursts a timer's samples never make
/// (8 MiB: about 500 switches of a 16 KiB copy between drains).
pub const SWITCH_STACK_RING_PAGES: usize = 2048;

impl Sampler {
    pub fn new(cpus: Vec<u32>) -> Sampler {
        Sampler {
            cpus,
            ring_pages: None,
            drain_every: DRAIN_EVERY,
            groups: Mutex::new(HashMap::new()),
            counters: Arc::default(),
            pool: BatchPool::default(),
            pmu: crate::os::perf::pmu_available(),
        }
    }

    /// The spare batches of every ring (to shed under memory pressure).
    pub fn pool(&self) -> BatchPool {
        self.pool.clone()
    }

    /// Open the events of `spec` on every CPU, off the runtime: the
    /// kernel may take long (a target with many threads, rings to allocate
    /// on a host short of free memory), and only the session asking waits.
    async fn open_events(&self, spec: EventSpec) -> Result<Opened, PerfError> {
        let cpus = self.cpus.clone();
        let open = move || {
            let events = cpus
                .iter()
                .map(|&cpu| PerfEvent::open(cpu, &spec))
                .collect::<Result<Vec<_>, _>>()?;
            let waiting = match (spec.mode.switches(), spec.target) {
                (true, Some(target)) if !spec.held => {
                    waiting_at_start(target.pid, spec.stack_bytes as usize)
                }
                _ => Vec::new(),
            };
            let at = waiting
                .first()
                .map_or_else(monotonic_ns, |(_, stack)| stack.time);
            Ok(Opened {
                events,
                waiting,
                at,
            })
        };
        match tokio::task::spawn_blocking(open).await {
            Ok(events) => events,
            Err(join) => std::panic::resume_unwind(join.into_panic()),
        }
    }

    /// Start draining the rings of freshly opened `events`.
    fn start_group(&self, spec: EventSpec, opened: Opened) -> Result<Group, PerfError> {
        let Opened {
            events,
            waiting,
            at,
        } = opened;
        tracing::info!(?spec, cpus = events.len(), "opened the sampling rings");
        let rings = events
            .into_iter()
            .map(|event| {
                let cpu = event.cpu();
                event.into_async().map_err(|source| PerfError::Io {
                    what: "registering the ring with epoll",
                    cpu,
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let stacks = match rings.first().is_some_and(|r| r.get_ref().stack_copy()) {
            true => Stacks::Copied,
            false => Stacks::FramePointers,
        };
        let mut demux = Demux::new(stacks, self.pool.clone());
        let mut backlog = None;
        if spec.mode.switches() {
            let ids = rings.iter().flat_map(|r| r.get_ref().switch_ids().to_vec());
            let mut waits = Waits::new(spec.mode, rings.len(), ids);
            for (preempted, stack) in waiting {
                waits.waiting_at_start(preempted, stack);
            }
            demux = demux.with_waits(waits);
            // A switch group serves one session: as much as its rings
            // hold may wait for it.
            let ring_bytes = spec.ring_pages * rustix::param::page_size();
            backlog = Some(Backlog::new(ring_bytes * rings.len()));
        }
        let tops = demux.tops();
        let routes = Arc::new(RwLock::new(Routes::default()));
        let (stop, stop_rx) = watch::channel(false);
        let (flush, flush_rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run_group(
            rings,
            demux,
            routes.clone(),
            self.counters.clone(),
            backlog,
            Orders {
                flush: flush_rx,
                stop: stop_rx,
                drain_every: self.drain_every,
            },
        ));
        Ok(Group {
            routes,
            tops,
            flush,
            task,
            stop,
            opened: at,
        })
    }

    /// The group for `spec`, opened unless it is open already: its settings,
    /// whether it was open already, and the groups, locked. The lock is let
    /// go of while the kernel opens the events (see
    /// [`Sampler::open_events`]); a group another session opened meanwhile
    /// is taken instead. A `cycles` request the kernel refuses although the
    /// probe found a PMU falls back to cpu-clock; rings of a target the
    /// kernel will not open (ptrace access rules, an LSM, the process gone,
    /// too many threads for the fds left) fall back to the system-wide
    /// rings. Both say so in the log.
    async fn ensure_group(
        &self,
        mut spec: EventSpec,
    ) -> Result<(EventSpec, bool, MutexGuard<'_, HashMap<EventSpec, Group>>), PerfError> {
        loop {
            let groups = self.groups.lock().await;
            if groups.contains_key(&spec) {
                return Ok((spec, true, groups));
            }
            drop(groups);
            let opened = self.open_events(spec).await;
            let mut groups = self.groups.lock().await;
            match opened {
                Ok(_) if groups.contains_key(&spec) => return Ok((spec, true, groups)),
                Ok(events) => {
                    groups.insert(spec, self.start_group(spec, events)?);
                    return Ok((spec, false, groups));
                }
                Err(PerfError::Unsupported { event, source }) if spec.kind == EventKind::Cycles => {
                    tracing::info!(%source, "{event} cannot be opened (no hardware PMU); falling back to cpu-clock");
                    spec.kind = EventKind::CpuClock;
                }
                // Switches are opened on the target alone.
                Err(err) if spec.mode.switches() => return Err(err),
                Err(err) => match spec.target.take() {
                    Some(target) => tracing::info!(
                        pid = target.pid,
                        %err,
                        "cannot open sampling events on the target alone; sampling it with the system-wide rings"
                    ),
                    None => return Err(err),
                },
            }
        }
    }
}

#[tonic::async_trait]
impl SampleSource for Sampler {
    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn cpus(&self) -> u32 {
        self.cpus.len() as u32
    }

    /// Route samples of `pid` to `tx` as `session`, opening the rings for
    /// its settings if no session uses them yet: with stack copies, rings
    /// of the target alone (the kernel copies no other process's stack),
    /// shared only by sessions of the same target and settings; with
    /// frame pointers, the system-wide rings all such sessions share. See
    /// [`Sampler::ensure_group`] for the fallbacks.
    async fn subscribe(
        &self,
        want: EventSpec,
        session: Subscriber,
        pid: u32,
        children: Children,
        tx: mpsc::UnboundedSender<Batch>,
    ) -> Result<Subscription, PerfError> {
        // Rings sized by the rate asked, with two seconds of room, but no
        // larger than the defaults.
        let ring_pages = match self.ring_pages {
            Some(pages) => pages,
            None if want.ring_pages > 0 => want.ring_pages,
            None if want.stack_bytes > 0 && want.mode.switches() => SWITCH_STACK_RING_PAGES,
            None if want.mode.switches() => STACK_RING_PAGES,
            None => {
                let max = match want.stack_bytes {
                    0 => RING_PAGES,
                    _ => STACK_RING_PAGES,
                };
                ring_pages_for(want.frequency_hz, want.stack_bytes, 2).min(max)
            }
        };
        // A process or thread the target creates inherits its events, with
        // a sampling period of its own that starts whole: one that runs
        // less than a period on a CPU is never sampled there, and the part
        // of a period left at its exit is dropped. Sessions that follow
        // children (often many short-lived ones) therefore sample on the
        // system-wide rings, whose period runs on across processes.
        // Switches are timed on the target's own events, children followed
        // or not: the system-wide rings would carry every process's.
        let switches = want.mode.switches();
        let want = EventSpec {
            kind: sampled_event(want.kind, self.pmu),
            ..want
        };
        let alone = switches || want.stack_bytes > 0 && children == Children::Ignored;
        let target = if alone && pid != EVERY_PROCESS {
            let target = Target::of(pid);
            if target.is_none() {
                tracing::info!(
                    pid,
                    "the target is gone: sampling it with the system-wide rings"
                );
            }
            target
        } else {
            None
        };
        let spec = EventSpec {
            ring_pages,
            target,
            // A wait is paired and closed for one session; a timeline's
            // events record on CLOCK_MONOTONIC. Continuous profiling takes
            // neither: it shares the rings of its settings.
            session: match session {
                Subscriber::Session(id) if switches || want.session != 0 => id,
                _ => 0,
            },
            ..want
        };
        let (spec, shared, groups) = self.ensure_group(spec).await?;
        let group = groups.get(&spec).expect("group just ensured");
        let mut since = group.opened;
        if shared {
            since = monotonic_ns();
        }
        if shared && spec.target.is_some() {
            // What the target's rings hold and counted so far is the other
            // sessions': the new one counts the target's time from now on.
            let (ack, done) = oneshot::channel();
            if group.flush.send((Flush::Exact, since, ack)).is_ok() {
                let _ = done.await;
            }
        }
        let mut routes = group.routes.write().unwrap_or_else(|e| e.into_inner());
        routes.all.push(Route {
            session,
            pid,
            children,
            exited: None,
            tx,
            queue: Backlog::new(SESSION_QUEUE_BYTES),
        });
        routes.rebuild();
        Ok(Subscription {
            spec,
            tops: group.tops.clone(),
            since,
        })
    }

    /// Stop routing to `session`; close the group's rings when it was the last.
    async fn unsubscribe(&self, spec: EventSpec, session: Subscriber) {
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
            let _ = group.task.await;
            // Spare batches sized for the closed rings' drains would be
            // kept for good (the pool hands out its latest first).
            self.pool.clear();
            tracing::info!(?spec, "closed the sampling rings: no session uses them");
        }
    }

    /// Drain every ring of the group now; returns once all batches are sent.
    async fn flush(&self, spec: EventSpec, how: Flush) {
        let (tx, rx) = oneshot::channel();
        {
            let groups = self.groups.lock().await;
            let Some(group) = groups.get(&spec) else {
                return;
            };
            if group.flush.send((how, monotonic_ns(), tx)).is_err() {
                return;
            }
        }
        let _ = rx.await;
    }

    /// Open groups and their sessions.
    async fn groups(&self) -> Vec<(EventSpec, Vec<Subscriber>)> {
        let groups = self.groups.lock().await;
        groups
            .iter()
            .map(|(spec, g)| {
                let routes = g.routes.read().unwrap_or_else(|e| e.into_inner());
                (*spec, routes.sessions.iter().map(|r| r.session).collect())
            })
            .collect()
    }
}

/// What a group's draining task is told: drain now, stop, and how long
/// after its last drain it drains rings nothing else drained.
struct Orders {
    flush: mpsc::UnboundedReceiver<(Flush, u64, oneshot::Sender<()>)>,
    stop: watch::Receiver<bool>,
    drain_every: Duration,
}

async fn run_group(
    mut rings: Vec<AsyncFd<PerfEvent>>,
    mut demux: Demux,
    routes: Arc<RwLock<Routes>>,
    counters: Arc<Counters>,
    backlog: Option<Arc<Backlog>>,
    orders: Orders,
) {
    let Orders {
        mut flush,
        mut stop,
        drain_every,
    } = orders;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + drain_every, drain_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut heads = Vec::with_capacity(rings.len());
    let backlog = backlog.as_ref();
    loop {
        // Sessions behind on what they were sent: the rings wait (and
        // lose what they cannot hold) until they catch up. A session's
        // flush is answered whatever the backlog: it counts what it is
        // sent before it asks again.
        let behind = backlog.is_some_and(|b| b.over());
        tokio::select! {
            ready = any_readable(&mut rings), if !behind => {
                if let Err(err) = ready {
                    tracing::error!(%err, "polling a sample ring failed");
                    return;
                }
            }
            _ = tick.tick(), if !behind => {}
            _ = async { backlog.expect("behind").counted().await }, if behind => continue,
            Some((how, at, ack)) = flush.recv() => {
                // An exact flush is its session's end, when it was asked.
                let end = (how == Flush::Exact).then_some(at);
                drain(&mut rings, &mut heads, &mut demux, &routes, &counters, backlog, end);
                tick.reset();
                let _ = ack.send(());
                continue;
            }
            _ = stop.changed() => {
                let end = Some(monotonic_ns());
                drain(&mut rings, &mut heads, &mut demux, &routes, &counters, backlog, end);
                return;
            }
        }
        drain(
            &mut rings, &mut heads, &mut demux, &routes, &counters, backlog, None,
        );
        // The timer drains what the rings hold drain_every after the last
        // drain: busy rings are drained at their watermark alone, in even,
        // large drains.
        tick.reset();
    }
}

/// Waits until a ring reached its watermark, and clears its readiness (the
/// drain that follows reads it, and the kernel wakes the ring again for
/// records written after this).
async fn any_readable(rings: &mut [AsyncFd<PerfEvent>]) -> std::io::Result<()> {
    std::future::poll_fn(|cx| {
        for ring in rings.iter_mut() {
            if let std::task::Poll::Ready(ready) = ring.poll_read_ready_mut(cx) {
                ready?.clear_ready();
                return std::task::Poll::Ready(Ok(()));
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// Drain all the rings of a group together: read every ring's head, then
/// every ring's fork, exit and exec records up to it (so that a child's
/// samples on one CPU are routed whichever CPU's ring holds its fork, and
/// records are placed against execs by time), then every record through
/// `demux` to the sessions' channels; then the route changes and the
/// daemon-wide counts. The batches sent count in `backlog` until counted.
/// `end`: the drain is exact, the end at this CLOCK_MONOTONIC time of a
/// group with switches: read the kernel's lost counts whatever it costs
/// (see [`PerfEvent::new_counts`]) and close the waits there.
fn drain(
    rings: &mut [AsyncFd<PerfEvent>],
    heads: &mut Vec<u64>,
    demux: &mut Demux,
    routes: &RwLock<Routes>,
    counters: &Counters,
    backlog: Option<&Arc<Backlog>>,
    end: Option<u64>,
) {
    let flush = match end {
        Some(_) => Flush::Exact,
        None => Flush::Held,
    };
    let guard = routes.read().unwrap_or_else(|e| e.into_inner());
    let exiting = guard.all.iter().any(|r| r.exited.is_some());
    let sessions = &guard.sessions;
    let mut behind = 0;
    let mut drain = demux.begin(&guard.targets, |i, mut batch| {
        match backlog {
            Some(backlog) => backlog.charge(&mut batch),
            None => {
                let queue = &sessions[i].queue;
                if queue.over() {
                    behind += batch.drop_samples();
                }
                queue.charge(&mut batch);
            }
        }
        let _ = sessions[i].tx.send(batch);
    });
    // Switch events' clock: every record before this was written before
    // the heads are read.
    let now = monotonic_ns();
    heads.clear();
    heads.extend(rings.iter().map(|r| r.get_ref().head()));
    // The interpreter frames read at the samples drained here (each copy
    // is written before its sample) are kept apart from the program's
    // ring, which then has room for the next.
    if let Ok(probe) = crate::os::bpf::PythonProbe::get() {
        probe.read_out();
    }
    for (ring, &head) in rings.iter_mut().zip(heads.iter()) {
        ring.get_mut().scan_tasks(head, |record| drain.task(record));
    }
    drain.resolve();
    let (mut bytes_read, mut counts) = (0, Counts::default());
    for (i, (ring, &head)) in rings.iter_mut().zip(heads.iter()).enumerate() {
        let before = drain.lost_records();
        drain.ring(i);
        let bytes = ring.get_mut().drain_to(head, |record| drain.record(record));
        let records = drain.lost_records() - before;
        let new = ring.get_mut().new_counts(records, bytes, flush);
        drain.ring_read(ring.get_ref().may_be_missing(), now);
        counts.lost += new.lost;
        counts.counted += new.counted;
        bytes_read += bytes;
    }
    // An exact drain of a group with switches is its session's end.
    drain.settle_waits(now, end);
    let d = drain.finish(counts);
    drop(guard);
    if !d.forked.is_empty() || !d.exited.is_empty() || !d.reborn.is_empty() || exiting {
        update_routes(routes, d.forked, &d.exited, &d.reborn);
    }
    counters.samples.fetch_add(d.seen, Ordering::Relaxed);
    counters.attributed.fetch_add(d.matched, Ordering::Relaxed);
    counters
        .discarded
        .fetch_add(d.seen - d.matched, Ordering::Relaxed);
    counters.lost.fetch_add(d.lost, Ordering::Relaxed);
    counters.throttles.fetch_add(d.throttles, Ordering::Relaxed);
    counters.parse_errors.fetch_add(d.errors, Ordering::Relaxed);
    counters
        .drains
        .fetch_add(rings.len() as u64, Ordering::Relaxed);
    counters.bytes_read.fetch_add(bytes_read, Ordering::Relaxed);
    if behind > 0 {
        counters.behind.fetch_add(behind, Ordering::Relaxed);
        tracing::debug!(
            samples = behind,
            "a session is behind: its samples of this drain count as lost"
        );
    }
}

/// The events opened for a group and, for an off-CPU or wall group of a
/// target, the target's threads waiting just after they opened: (runnable,
/// the stack the wait is in, timed when it was read).
struct Opened {
    events: Vec<PerfEvent>,
    waiting: Vec<(bool, waits::Stack)>,
    /// When they opened (and the threads were read): CLOCK_MONOTONIC.
    at: u64,
}

/// The threads of process `pid` waiting now (`crate::process::blocked`),
/// each with the stack its wait is in: the kernel's frames by their
/// functions' addresses, and its user stack: with stack copies, a copy of
/// `stack_bytes` of it to unwind; else its instruction pointer alone
/// (truncated: no frame pointer is known to walk from). A thread where
/// `/proc` could say neither gets [`UNKNOWN_STACK_FRAME`].
fn waiting_at_start(pid: u32, stack_bytes: usize) -> Vec<(bool, waits::Stack)> {
    use crate::process::blocked;
    let threads = blocked::waiting_threads(pid);
    let names = threads
        .iter()
        .flat_map(|t| t.kernel.iter().map(|(name, _)| name.as_str()))
        .collect();
    let starts = blocked::kernel_starts(&names);
    // The session starts once its rings are open and this is read: each
    // thread waits from then on.
    let now = monotonic_ns();
    let copy = |sp| blocked::stack_bytes(pid, sp, stack_bytes);
    threads
        .into_iter()
        .map(|t| {
            (
                t.preempted,
                wait_stack(pid, now, &t, &starts, stack_bytes, copy),
            )
        })
        .collect()
}

/// The stack of thread `t` of `pid`, waiting at `now` (see
/// [`waiting_at_start`]): its kernel frames by the `starts` of their
/// functions, and `copy(sp)` of its user stack (`stack_bytes` > 0) or its
/// pc alone.
fn wait_stack(
    pid: u32,
    now: u64,
    t: &crate::process::blocked::Waiting,
    starts: &HashMap<String, u64>,
    stack_bytes: usize,
    copy: impl Fn(u64) -> Vec<u8>,
) -> waits::Stack {
    // Return addresses, less one: in the call, as the callers of a
    // sampled stack are.
    let mut frames: Vec<u64> = t
        .kernel
        .iter()
        .filter_map(|(name, off)| Some(starts.get(name)? + off.saturating_sub(1)))
        .collect();
    let (mut user, mut truncated) = (None, false);
    if let Some((pc, sp)) = t.user {
        if stack_bytes > 0 {
            user = Some(([pc, sp, 0], copy(sp)));
        } else {
            frames.push(pc);
            truncated = true;
        }
    }
    if frames.is_empty() && user.is_none() {
        frames.push(UNKNOWN_STACK_FRAME);
    }
    waits::Stack {
        pid,
        tid: t.tid,
        time: now,
        frames,
        user,
        truncated,
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds: the clock of the switch events.
pub fn monotonic_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (now.tv_sec as u64).saturating_mul(1_000_000_000) + now.tv_nsec as u64
}

/// After a drain: drop the routes ended by an earlier drain, give forked
/// children routes of their own (to the sessions following their parent),
/// and end the routes of exited processes at their exit time. An ended
/// route stays until the next drain: a sample taken before the exit on
/// another CPU may have been written to its ring after this drain read that
/// ring's head. A process that later gets its pid is never taken for it.
fn update_routes(
    routes: &RwLock<Routes>,
    forked: foldhash::HashMap<u32, (u64, Vec<usize>)>,
    exited: &[(u32, u64)],
    reborn: &[(u32, u64)],
) {
    let mut routes = routes.write().unwrap_or_else(|e| e.into_inner());
    let routes = &mut *routes;
    let taken = |pid: u32, after: u64| reborn.iter().any(|&(p, at)| p == pid && at >= after);
    // Ended before this drain began (it read every ring past their exit),
    // or their pid is another process's now.
    routes
        .all
        .retain(|r| r.exited.is_none() && !taken(r.pid, 0));
    let mut add = Vec::new();
    for (pid, (at, indices)) in forked {
        if taken(pid, at) {
            continue;
        }
        for i in indices {
            if let Some(session) = routes.sessions.get(i) {
                add.push(Route {
                    pid,
                    exited: None,
                    ..session.clone()
                });
            }
        }
    }
    routes.all.extend(add);
    for &(pid, at) in exited {
        for r in routes.all.iter_mut().filter(|r| r.pid == pid) {
            r.exited = Some(r.exited.map_or(at, |before| before.min(at)));
        }
    }
    routes.rebuild();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(tx: &mpsc::UnboundedSender<Batch>, session: u64, pid: u32) -> Route {
        Route {
            session: Subscriber::Session(session),
            pid,
            children: Children::Followed,
            exited: None,
            tx: tx.clone(),
            queue: Backlog::new(SESSION_QUEUE_BYTES),
        }
    }

    #[test]
    fn a_session_gets_one_batch_however_many_processes_it_follows() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let mut routes = Routes {
            all: vec![
                route(&tx, 1, 10),
                route(&tx, 2, 10),
                route(&tx, 1, 11),
                route(&tx, 1, 12),
            ],
            ..Routes::default()
        };
        routes.rebuild();
        assert_eq!(routes.sessions.len(), 2);
        assert_eq!(routes.targets.of(10), Some(&[0, 1][..]));
        assert_eq!(routes.targets.of(11), Some(&[0][..]));
        let lock = RwLock::new(routes);
        update_routes(
            &lock,
            foldhash::HashMap::from_iter([(13, (100, vec![1]))]),
            &[],
            &[],
        );
        let routes = lock.into_inner().unwrap();
        assert_eq!(
            routes.targets.of(13),
            Some(&[1][..]),
            "a child joins its parent's session"
        );
        assert_eq!(routes.sessions.len(), 2);
    }

    /// A process that exits may have samples taken before its exit on other
    /// CPUs but written to their rings after the drain read them: its route
    /// stays, marked with its exit time, until the next drain is done; a
    /// route whose pid another process took goes at once.
    #[test]
    fn an_exited_process_keeps_its_route_until_the_next_drain() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let mut routes = Routes {
            all: vec![route(&tx, 1, 10), route(&tx, 1, 11)],
            ..Routes::default()
        };
        routes.rebuild();
        let lock = RwLock::new(routes);
        let until = |lock: &RwLock<Routes>| {
            let r = lock.read().unwrap();
            r.all.iter().find(|r| r.pid == 10).and_then(|r| r.exited)
        };
        // A drain shows pid 10 exiting at perf time 500.
        update_routes(&lock, foldhash::HashMap::default(), &[(10, 500)], &[]);
        assert_eq!(until(&lock), Some(500), "ended at its exit, kept");
        assert_eq!(lock.read().unwrap().targets.of(10), Some(&[0][..]));
        // The next drain.
        update_routes(&lock, foldhash::HashMap::default(), &[], &[]);
        {
            let routes = lock.read().unwrap();
            assert!(routes.targets.of(10).is_none(), "gone after the next drain");
            assert!(routes.all.iter().all(|r| r.exited.is_none()));
            assert_eq!(routes.targets.of(11), Some(&[0][..]), "others untouched");
        }
        // Pid 11 is taken by a process not routed, and a child forked
        // before that with pid 12 is too: both go at once.
        update_routes(
            &lock,
            foldhash::HashMap::from_iter([(12, (100, vec![0]))]),
            &[],
            &[(11, 300), (12, 200)],
        );
        let routes = lock.into_inner().unwrap();
        assert!(routes.targets.of(11).is_none(), "its pid is another's");
        assert!(routes.targets.of(12).is_none(), "taken after its fork");
    }

    #[test]
    fn cycles_are_asked_of_the_kernel_only_where_the_probe_found_a_pmu() {
        use EventKind::{CpuClock, Cycles};
        assert_eq!(sampled_event(Cycles, false), CpuClock);
        assert_eq!(sampled_event(Cycles, true), Cycles);
        assert_eq!(sampled_event(CpuClock, false), CpuClock);
        assert_eq!(sampled_event(CpuClock, true), CpuClock);
    }

    /// A cycles session on the real kernel, with the probe's answer faked
    /// both ways: "no PMU" samples cpu-clock without trying cycles; "a PMU"
    /// opens cycles, or where the kernel refuses them (no PMU after all)
    /// falls back to cpu-clock. Either way the group's settings say which.
    #[tokio::test]
    async fn a_cycles_session_gets_the_event_the_probe_and_kernel_allow() {
        let real_pmu = crate::os::perf::pmu_available();
        for probe in [false, true] {
            let mut sampler = Sampler::new(crate::os::perf::online_cpus().unwrap());
            sampler.pmu = probe;
            let want = EventSpec {
                held: false,
                kind: EventKind::Cycles,
                mode: Default::default(),
                session: 0,
                frequency_hz: 99,
                ring_pages: 8,
                stack_bytes: 0,
                target: None,
            };
            let (tx, _rx) = mpsc::unbounded_channel();
            let sub = sampler
                .subscribe(
                    want,
                    Subscriber::Session(1),
                    std::process::id(),
                    Children::Ignored,
                    tx,
                )
                .await
                .unwrap_or_else(|e| panic!("probe {probe}: subscribe (needs root): {e}"));
            let expected = if probe && real_pmu {
                EventKind::Cycles
            } else {
                EventKind::CpuClock
            };
            assert_eq!(sub.spec.kind, expected, "probe {probe}, PMU {real_pmu}");
            let groups = sampler.groups().await;
            assert_eq!(groups.len(), 1, "probe {probe}: {groups:?}");
            assert_eq!(groups[0].0.kind, expected, "probe {probe}");
            sampler.unsubscribe(sub.spec, Subscriber::Session(1)).await;
        }
    }

    /// A thread waiting at a session's start: its kernel frames by their
    /// functions (return addresses less one), then its user stack: a copy
    /// to unwind, or its pc alone (truncated); with neither known, the
    /// frame saying its stack is unknown.
    #[test]
    fn a_waiting_thread_s_stack_is_what_proc_says_or_unknown() {
        use crate::process::blocked::Waiting;
        let starts = HashMap::from([("do_nanosleep".to_string(), 0xffff_0000)]);
        let thread = |kernel: &[(&str, u64)], user| Waiting {
            tid: 8,
            preempted: false,
            kernel: kernel.iter().map(|&(n, o)| (n.to_string(), o)).collect(),
            user,
        };
        let copy = |sp: u64| sp.to_le_bytes().to_vec();
        let asleep = thread(
            &[("do_nanosleep", 0x20), ("gone", 0x8)],
            Some((0x401000, 0x7ff0)),
        );
        let s = wait_stack(7, 50, &asleep, &starts, 4096, copy);
        assert_eq!((s.pid, s.tid, s.time), (7, 8, 50));
        assert_eq!(s.frames, [0xffff_001f]);
        assert_eq!(s.user, Some(([0x401000, 0x7ff0, 0], copy(0x7ff0))));
        let s = wait_stack(7, 50, &asleep, &starts, 0, copy);
        assert_eq!((s.frames, s.truncated), (vec![0xffff_001f, 0x401000], true));
        let unknown = thread(&[("gone", 0x8)], None);
        let s = wait_stack(7, 50, &unknown, &starts, 4096, copy);
        assert_eq!((s.frames, s.user), (vec![UNKNOWN_STACK_FRAME], None));
    }
}
