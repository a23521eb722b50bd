//! A profiling session as an actor: it owns the target's stack table, maps and
//! totals, applies batches from the sampler, ends on stop / duration / target
//! exit, and answers profile requests (symbolizing only new addresses).
mod profile;
mod spaces;
mod stored;

pub use profile::{Resolved, MAX_WINDOW_S};
pub use stored::open_stored;

use crate::maps::ProcessMaps;
use crate::perf::{EventKind, EventSpec, PidFd};
use crate::sampler::{Batch, SampleSource};
use crate::symbolize::{Frame, FrameName, Symbolizer};
use crate::unwind::Walk;
use profd_common::api;
use profd_common::model::StackTable;
use spaces::Spaces;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, oneshot, watch};

/// Checks, after the target exec'd, that the owner may still profile it
/// (the program may be set-id); Err says why not.
pub type Recheck = Arc<dyn Fn(u32) -> Result<(), String> + Send + Sync>;

/// What the session was asked to do.
#[derive(Clone)]
pub struct Params {
    pub id: u64,
    pub pid: u32,
    pub comm: String,
    pub duration: Option<Duration>,
    /// The user the session belongs to.
    pub owner_uid: u32,
    pub owner: String,
    /// Unique stacks kept; samples of further new stacks count under
    /// [`STACK_LIMIT_FRAME`].
    pub max_stacks: usize,
    /// None for root's sessions.
    pub recheck: Option<Recheck>,
    /// Follow the processes the target forks.
    pub children: bool,
}

/// The one frame of the stack that samples over the unique-stack limit are
/// counted under; named `[stack limit reached]`.
pub const STACK_LIMIT_FRAME: u64 = u64::MAX;

/// A session's full current profile.
#[derive(Debug, Clone)]
pub struct View {
    pub session: api::Session,
    /// Sorted by inclusive, then exclusive, descending.
    pub functions: Vec<api::Function>,
    /// Attributed samples in the window asked for (0 without one).
    pub window_attributed: u64,
    /// The profile's version: one more at every view.
    pub version: u64,
    /// Per function (same order): the version at which its counts last
    /// changed, and the version at which it first appeared.
    pub stamps: Vec<(u64, u64)>,
}

/// A function's counts at the last view, and when they changed.
#[derive(Debug, Clone, Copy, Default)]
struct Stamp {
    counts: (u64, u64),
    changed: u64,
    first: u64,
}

enum Command {
    Profile(u32, oneshot::Sender<View>),
    Resolve(oneshot::Sender<Resolved>),
    Histogram(
        api::GetHistogramRequest,
        oneshot::Sender<Result<api::GetHistogramResponse, String>>,
    ),
    Summary(oneshot::Sender<api::Session>),
    Stop(oneshot::Sender<api::Session>),
}

/// The rpc layer's handle on a session.
#[derive(Clone)]
pub struct Handle {
    pub id: u64,
    pub owner_uid: u32,
    tx: mpsc::Sender<Command>,
    state: watch::Receiver<api::SessionState>,
}

/// The session's actor task has gone (the daemon is shutting down).
#[derive(Debug, thiserror::Error)]
#[error("session {0} is no longer available")]
pub struct Gone(pub u64);

impl Handle {
    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T, Gone> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(make(tx)).await.map_err(|_| Gone(self.id))?;
        rx.await.map_err(|_| Gone(self.id))
    }

    /// The full profile, symbolized; with `window_s` > 0 also the counts
    /// of the last `window_s` seconds.
    pub async fn profile(&self, window_s: u32) -> Result<View, Gone> {
        self.ask(|reply| Command::Profile(window_s, reply)).await
    }

    /// Every stack with its frames named: for views and exports.
    pub async fn resolve(&self) -> Result<Resolved, Gone> {
        self.ask(Command::Resolve).await
    }

    /// A profil(3)-style histogram of the innermost user PCs in one module.
    pub async fn histogram(
        &self,
        req: api::GetHistogramRequest,
    ) -> Result<Result<api::GetHistogramResponse, String>, Gone> {
        self.ask(|reply| Command::Histogram(req, reply)).await
    }

    /// State and totals, without symbolizing.
    pub async fn summary(&self) -> Result<api::Session, Gone> {
        self.ask(Command::Summary).await
    }

    /// End the session (no-op if it has ended) and return its summary.
    pub async fn stop(&self) -> Result<api::Session, Gone> {
        self.ask(Command::Stop).await
    }

    /// Notified when the state changes (running → ended).
    pub fn state(&self) -> watch::Receiver<api::SessionState> {
        self.state.clone()
    }
}

struct Actor {
    params: Params,
    spec: EventSpec,
    sampler: Arc<dyn SampleSource>,
    symbolizer: Arc<dyn Symbolizer>,
    started: Instant,
    started_unix_ms: u64,
    ended: Option<Instant>,
    state: watch::Sender<api::SessionState>,
    error: String,
    stacks: StackTable,
    totals: api::Totals,
    /// Mappings and unwinders of the target's (and its children's) address
    /// spaces; stack addresses are tagged with their space.
    spaces: Spaces,
    /// Samples per process, and where each live pid is in the list.
    processes: Vec<api::ProcessSamples>,
    process_index: HashMap<u32, usize>,
    /// Addresses of new stacks not yet symbolized.
    pending: HashSet<u64>,
    scratch: Vec<u64>,
    /// What each symbolized address resolved to.
    addr_fn: HashMap<u64, AddrFrames>,
    fn_ids: HashMap<FrameName, u32>,
    names: Vec<FrameName>,
    /// Source file of each function (by id), where known.
    files: Vec<String>,
    /// Thread names by tid.
    threads: HashMap<u32, String>,
    /// Stack indices sampled, in one bucket per second, for windowed figures.
    recent: VecDeque<(Instant, Vec<u32>)>,
    /// Views computed so far, and per function id when its counts changed.
    version: u64,
    stamps: Vec<Stamp>,
}

/// Start a session: route the target's samples from the sampler to a new
/// actor. The caller has validated `params` and opened `pidfd`.
pub async fn start(
    params: Params,
    want: EventSpec,
    pidfd: PidFd,
    sampler: Arc<dyn SampleSource>,
    symbolizer: Arc<dyn Symbolizer>,
) -> Result<Handle, crate::perf::PerfError> {
    let (batch_tx, batch_rx) = mpsc::unbounded_channel();
    let spec = sampler
        .subscribe(want, params.id, params.pid, params.children, batch_tx)
        .await?;
    // Read after subscribing: later mappings arrive as MMAP2 records.
    let maps = ProcessMaps::read(params.pid).unwrap_or_default();
    let spaces = Spaces::new(params.pid, maps, spec.stack_bytes > 0);
    let processes = vec![api::ProcessSamples {
        pid: params.pid,
        comm: params.comm.clone(),
        ..Default::default()
    }];
    let process_index = HashMap::from([(params.pid, 0)]);
    let (state, state_rx) = watch::channel(api::SessionState::Running);
    let (tx, cmd_rx) = mpsc::channel(16);
    let id = params.id;
    let owner_uid = params.owner_uid;
    let actor = Actor {
        params,
        spec,
        sampler,
        symbolizer,
        started: Instant::now(),
        started_unix_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        ended: None,
        state,
        error: String::new(),
        stacks: StackTable::default(),
        totals: api::Totals::default(),
        spaces,
        processes,
        process_index,
        scratch: Vec::new(),
        pending: HashSet::new(),
        addr_fn: HashMap::new(),
        fn_ids: HashMap::new(),
        names: Vec::new(),
        files: Vec::new(),
        threads: HashMap::new(),
        recent: VecDeque::new(),
        version: 0,
        stamps: Vec::new(),
    };
    tokio::spawn(actor.run(batch_rx, cmd_rx, pidfd));
    Ok(Handle {
        id,
        owner_uid,
        tx,
        state: state_rx,
    })
}

impl Actor {
    fn running(&self) -> bool {
        self.ended.is_none()
    }

    async fn run(
        mut self,
        mut batches: mpsc::UnboundedReceiver<Batch>,
        mut commands: mpsc::Receiver<Command>,
        pidfd: PidFd,
    ) {
        let mut pidfd = match pidfd.into_async() {
            Ok(fd) => Some(fd),
            Err(err) => {
                tracing::warn!(%err, "cannot watch the target for exit");
                None
            }
        };
        let deadline = self
            .params
            .duration
            .map(|d| tokio::time::Instant::from_std(self.started + d));
        loop {
            let running = self.running();
            if !running {
                // Ended: the target's pidfd is of no more use.
                pidfd = None;
            }
            tokio::select! {
                Some(batch) = batches.recv(), if running => {
                    if let Err(why) = self.apply(batch) {
                        self.error = why;
                        self.end(api::SessionState::Failed, &mut batches).await;
                    }
                }
                cmd = commands.recv() => match cmd {
                    None => break,
                    Some(Command::Profile(window_s, reply)) => {
                        let view = self.view(window_s).await;
                        let _ = reply.send(view);
                    }
                    Some(Command::Resolve(reply)) => {
                        let resolved = self.resolve().await;
                        let _ = reply.send(resolved);
                    }
                    Some(Command::Histogram(req, reply)) => {
                        let _ = reply.send(self.histogram(&req));
                    }
                    Some(Command::Summary(reply)) => {
                        let _ = reply.send(self.summary());
                    }
                    Some(Command::Stop(reply)) => {
                        if self.running() {
                            self.end(api::SessionState::Stopped, &mut batches).await;
                        }
                        let _ = reply.send(self.summary());
                    }
                },
                _ = sleep_until(deadline), if running && deadline.is_some() => {
                    self.end(api::SessionState::DurationElapsed, &mut batches).await;
                }
                _ = exited(pidfd.as_ref()), if running && pidfd.is_some() => {
                    self.end(api::SessionState::Exited, &mut batches).await;
                }
            }
        }
        if self.running() {
            self.end(api::SessionState::Stopped, &mut batches).await;
        }
    }

    /// Collect everything sampled up to now, leave the rings, and record why
    /// (failed, whatever the reason given, when a last batch is refused).
    async fn end(
        &mut self,
        mut state: api::SessionState,
        batches: &mut mpsc::UnboundedReceiver<Batch>,
    ) {
        self.sampler.flush(self.spec).await;
        self.sampler.unsubscribe(self.spec, self.params.id).await;
        while let Ok(batch) = batches.try_recv() {
            if !self.error.is_empty() {
                self.totals.discarded += batch.seen;
            } else if let Err(why) = self.apply(batch) {
                self.error = why;
            }
        }
        if !self.error.is_empty() {
            state = api::SessionState::Failed;
        }
        self.ended = Some(Instant::now());
        tracing::info!(
            session = self.params.id,
            pid = self.params.pid,
            ?state,
            "session ended"
        );
        let _ = self.state.send(state);
        // Name what is left, then let go of the processes' files.
        self.symbolize_pending().await;
        self.spaces.release();
    }

    /// Count a batch; Err when a process of the session exec'd a program
    /// its owner may not profile (the batch is then dropped: its samples are
    /// discarded).
    fn apply(&mut self, mut batch: Batch) -> Result<(), String> {
        if let Some((pid, comm)) = batch.exec.take() {
            if let Some(recheck) = &self.params.recheck {
                if let Err(why) = recheck(pid) {
                    self.totals.discarded += batch.seen;
                    return Err(format!("stopped after exec of {comm}: {why}"));
                }
            }
            if pid == self.params.pid {
                self.params.comm = comm.clone();
            }
            if let Some(&i) = self.process_index.get(&pid) {
                self.processes[i].comm = comm;
            }
            self.spaces.exec(pid);
        }
        for (child, parent) in batch.forks.drain(..) {
            self.spaces.fork(child, parent);
            let comm = self
                .process_index
                .get(&parent)
                .map(|&i| self.processes[i].comm.clone())
                .unwrap_or_default();
            self.process_index.insert(child, self.processes.len());
            self.processes.push(api::ProcessSamples {
                pid: child,
                ppid: parent,
                comm,
                ..Default::default()
            });
        }
        for (tid, name) in batch.comms.drain(..) {
            self.threads.insert(tid, name);
        }
        let mut by_pid: HashMap<u32, Vec<crate::maps::Mapping>> = HashMap::new();
        for (pid, m) in batch.mappings.drain(..) {
            by_pid.entry(pid).or_default().push(m);
        }
        for (pid, mappings) in by_pid {
            self.spaces.insert(pid, mappings.into_iter());
        }
        let mut attributed = 0u64;
        let mut scratch = std::mem::take(&mut self.scratch);
        for sample in batch.samples() {
            attributed += 1;
            let space = self.spaces.of(sample.pid);
            // Frame-pointer stacks of the target's first program are used as
            // they came; others are unwound and/or tagged in `scratch`.
            let stack = if sample.user.is_none() && space == 0 {
                sample.frames
            } else {
                scratch.clear();
                scratch.extend_from_slice(sample.frames);
                if let Some(([ip, sp, bp], bytes)) = sample.user {
                    let unwinder = &mut self.spaces.list[space].unwinder;
                    if ip != 0
                        && unwinder.unwind(ip, sp, bp, bytes, &mut scratch) == Walk::Truncated
                    {
                        self.totals.truncated += 1;
                    }
                }
                if space != 0 {
                    for a in scratch.iter_mut() {
                        *a = spaces::tag(space, *a);
                    }
                }
                &scratch[..]
            };
            let cap = self.params.max_stacks;
            let (stack, (index, new)) = match self.stacks.add_within(sample.tid, stack, 1, cap) {
                Some(added) => (stack, added),
                None => {
                    self.totals.overflowed += 1;
                    let limit = &[STACK_LIMIT_FRAME][..];
                    (limit, self.stacks.add(0, limit, 1))
                }
            };
            if new {
                self.pending
                    .extend(stack.iter().filter(|a| !self.addr_fn.contains_key(a)));
            }
            self.note_sample(sample.tid, index as u32);
            if let Some(&i) = self.process_index.get(&sample.pid) {
                self.processes[i].samples += 1;
            }
        }
        self.scratch = scratch;
        for pid in batch.exits.drain(..) {
            self.spaces.exit(pid);
            if let Some(i) = self.process_index.remove(&pid) {
                self.processes[i].exited = true;
            }
        }
        self.totals.attributed += attributed;
        self.totals.discarded += batch.seen.saturating_sub(attributed);
        self.totals.lost += batch.lost;
        self.totals.throttled += batch.throttled;
        self.totals.truncated += batch.truncated;
        Ok(())
    }

    fn summary(&self) -> api::Session {
        let elapsed = self.ended.unwrap_or_else(Instant::now) - self.started;
        let event = match self.spec.kind {
            EventKind::CpuClock => api::Event::CpuClock,
            EventKind::Cycles => api::Event::Cycles,
        };
        api::Session {
            id: self.params.id,
            pid: self.params.pid,
            comm: self.params.comm.clone(),
            frequency_hz: self.spec.frequency_hz,
            event: event as i32,
            state: *self.state.borrow() as i32,
            started_unix_ms: self.started_unix_ms,
            duration_s: elapsed.as_secs_f64(),
            totals: Some(self.totals),
            duration_limit_ms: self
                .params
                .duration
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            error: self.error.clone(),
            unwind: if self.spec.stack_bytes > 0 {
                api::Unwind::Dwarf
            } else {
                api::Unwind::Fp
            } as i32,
            stack_bytes: self.spec.stack_bytes,
            owner_uid: self.params.owner_uid,
            owner: self.params.owner.clone(),
            children: self.params.children,
            processes: self.processes.clone(),
            earlier_run: false,
        }
    }
}

/// An address's frames, innermost first (inlined callees, then the function).
struct AddrFrames {
    frames: Box<[FrameLoc]>,
    /// Some frame is a placeholder (`module+0x..`, `[unknown] 0x..`).
    unnamed: bool,
}

/// One frame of an address: function id, and source position for per-line views.
struct FrameLoc {
    func: u32,
    line: u32,
}

fn lookup_fallback(addrs: &[u64]) -> Vec<Vec<Frame>> {
    addrs.iter().map(|&a| vec![Frame::unknown(a)]).collect()
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

async fn exited(pidfd: Option<&AsyncFd<PidFd>>) {
    match pidfd {
        Some(fd) => {
            let _ = fd.readable().await;
        }
        None => std::future::pending().await,
    }
}
