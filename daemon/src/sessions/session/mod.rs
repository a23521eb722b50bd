//! A profiling session as an actor: it owns the target's stack table, maps and
//! totals, applies batches from the sampler, ends on stop / duration / target
//! exit, and answers profile requests (symbolizing only new addresses, and
//! unnamed JIT addresses again once their perf map changed, and unnamed
//! file addresses once a debug file arrived).
mod answers;
mod awaiting_debug;
mod collector;
mod ingest;
mod jvm_asks;
mod libraries;
mod named;
mod python;
mod recent;
mod saving;
mod scope;
pub mod setup_budget;
mod spaces;
pub(crate) mod stored;
mod timeline;
mod unnamed_jit;

pub use answers::NoHistogram;
pub use collector::{Collector, Finished};
pub use ingest::{Ingest, NewAddresses, Recheck, Refused, SYNTHETIC_FRAMES};
pub use recent::MAX_WINDOW_S;
pub use saving::{SaveStatus, Saving};

use crate::os::perf::EventSpec;
use crate::os::PidFd;
use crate::process::maps::ProcessMaps;
use crate::process::symbolize::{Frame, FrameName, Symbolizer};
use crate::request_error::{Error, Gone};
use crate::sampling::{Batch, Children, Flush, SampleSource, Subscriber, Subscription};
use crate::sessions::store::Encoded;
use profd_common::api;
use profd_common::kernel::KernelFrames;
use profd_common::model::{Aggregator, ResolvedProfile, Timeline};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, oneshot, watch};

/// What the session was asked to do.
#[derive(Clone)]
pub struct Params {
    pub pid: u32,
    pub comm: String,
    pub duration: Option<Duration>,
    /// The user the session belongs to.
    pub owner_uid: u32,
    pub owner: String,
    /// Unique stacks kept; samples of further new stacks count under
    /// [`ingest::STACK_LIMIT_FRAME`].
    pub max_stacks: usize,
    /// None for root's sessions.
    pub recheck: Option<Recheck>,
    /// Follow the processes the target forks.
    pub children: bool,
    /// Keep the samples' times (see [`timeline::Times`]).
    pub timeline: bool,
    /// The daemon's counters (symbol cache hits and misses).
    pub stats: Arc<crate::stats::Stats>,
}

/// A session's per-function table at one version: what GetProfile answers
/// and Watch deltas are computed from.
#[derive(Debug, Clone)]
pub struct FunctionTable {
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
    /// Functions an earlier view listed that have no samples any more (JIT
    /// addresses named anew): id, the version at which it first appeared,
    /// and the version at which it lost its samples.
    pub emptied: Vec<(u64, u64, u64)>,
}

/// A session's resolved profile with its summary.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub session: api::Session,
    pub profile: ResolvedProfile,
    /// The samples in time order, when the session keeps their times.
    pub timeline: Option<Timeline>,
    /// Off-CPU and wall sessions: per thread, the nanoseconds no record
    /// tells (`TimeTotals::unknown_ns`).
    pub unknown_ns: HashMap<u32, u64>,
}

/// A function's counts at the last view, and when they changed.
#[derive(Debug, Clone, Copy, Default)]
struct Stamp {
    counts: (u64, u64),
    changed: u64,
    first: u64,
}

enum Command {
    Profile(u32, KernelFrames, oneshot::Sender<FunctionTable>),
    Resolve(KernelFrames, oneshot::Sender<Resolved>),
    Encoded(oneshot::Sender<(api::Session, Encoded)>),
    Histogram(
        api::GetHistogramRequest,
        oneshot::Sender<Result<api::GetHistogramResponse, NoHistogram>>,
    ),
    Summary(oneshot::Sender<api::Session>),
    Stop(oneshot::Sender<api::Session>),
}

/// The rpc layer's handle on a session.
#[derive(Clone)]
pub struct Handle {
    pub id: u64,
    pub owner_uid: u32,
    /// The owner's name.
    pub owner: Arc<str>,
    /// Whether it is written to the state directory (set by the registry).
    pub saving: Saving,
    tx: mpsc::Sender<Command>,
    state: watch::Receiver<api::SessionState>,
}

impl Handle {
    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T, Gone> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(make(tx)).await.map_err(|_| Gone(self.id))?;
        rx.await.map_err(|_| Gone(self.id))
    }

    /// The full profile, symbolized, with kernel frames `shown` as the
    /// caller may see them; with `window_s` > 0 also the counts of the
    /// last `window_s` seconds. Of an ended session, once its end is
    /// written (or has failed to be; see [`saving::SAVE_WAIT`]).
    pub async fn profile(&self, window_s: u32, shown: KernelFrames) -> Result<FunctionTable, Gone> {
        let mut table = self
            .ask(|reply| Command::Profile(window_s, shown, reply))
            .await?;
        self.saving.settle(&mut table.session).await;
        Ok(table)
    }

    /// Every stack with its frames named, and kernel frames `shown` as the
    /// caller may see them: for views and exports (and saves: it does not
    /// wait for one).
    pub async fn resolve(&self, shown: KernelFrames) -> Result<Resolved, Gone> {
        let mut resolved = self.ask(|reply| Command::Resolve(shown, reply)).await?;
        self.saving.stamp(&mut resolved.session);
        Ok(resolved)
    }

    /// The summary and the profile, every frame shown, as the gzip'd pprof
    /// pieces a save writes (encoded as the stacks are named, never whole).
    /// Does not wait for a save.
    pub async fn encoded(&self) -> Result<(api::Session, Encoded), Gone> {
        let (mut session, pieces) = self.ask(Command::Encoded).await?;
        self.saving.stamp(&mut session);
        Ok((session, pieces))
    }

    /// A profil(3)-style histogram of the innermost user PCs in one module.
    pub async fn histogram(
        &self,
        req: api::GetHistogramRequest,
    ) -> Result<Result<api::GetHistogramResponse, NoHistogram>, Gone> {
        self.ask(|reply| Command::Histogram(req, reply)).await
    }

    /// State and totals, without symbolizing.
    pub async fn summary(&self) -> Result<api::Session, Gone> {
        let mut s = self.ask(Command::Summary).await?;
        self.saving.stamp(&mut s);
        Ok(s)
    }

    /// End the session (no-op if it has ended) and return its summary
    /// (`saving.settle` waits for its end to be written).
    pub async fn stop(&self) -> Result<api::Session, Gone> {
        let mut s = self.ask(Command::Stop).await?;
        self.saving.stamp(&mut s);
        Ok(s)
    }

    /// Notified when the state changes (running → ended).
    pub fn state(&self) -> watch::Receiver<api::SessionState> {
        self.state.clone()
    }
}

struct Actor {
    /// Who its batches are routed to.
    id: Subscriber,
    params: Params,
    spec: EventSpec,
    sampler: Arc<dyn SampleSource>,
    symbolizer: Arc<dyn Symbolizer>,
    started: Instant,
    started_unix_ms: u64,
    ended: Option<Instant>,
    state: watch::Sender<api::SessionState>,
    error: String,
    /// The stack table, totals, address spaces, processes and threads that
    /// batches are counted into.
    ingest: Ingest,
    /// What each symbolized address resolved to (set once, except for JIT
    /// addresses a changed perf map names later); looked up for every frame
    /// of the stacks a view adds.
    addr_fn: named::NamedAddrs,
    /// Addresses in JIT code not named yet, looked up again when their
    /// perf map changes.
    unnamed_jit: unnamed_jit::UnnamedJit,
    /// When the JVMs with unnamed JIT code were last looked for (see
    /// `jvm_asks`).
    jvms_checked: Option<Instant>,
    /// Addresses in mapped files not named yet, looked up again when a
    /// debug file arrives.
    awaiting_debug: awaiting_debug::AwaitingDebug,
    /// The functions met, each once: a function's id is its place.
    names: indexmap::IndexSet<FrameName, foldhash::fast::RandomState>,
    /// Source file of each function (by id), where known.
    files: Vec<String>,
    /// Whether each function (by id) was named from a kernel address.
    kernel: Vec<bool>,
    /// Views computed so far, and per function id when its counts changed.
    version: u64,
    stamps: Vec<Stamp>,
    /// See [`FunctionTable::emptied`].
    emptied: Vec<(u64, u64, u64)>,
    /// Inclusive and exclusive samples per function id as of the last view;
    /// each view adds the samples since (see `Ingest::since_view`).
    counted: Aggregator,
    /// With a timeline: the libraries of the named addresses.
    libraries: Option<libraries::Libraries>,
}

/// Why a session could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Perf(#[from] crate::os::perf::PerfError),
    /// The daemon has too few file descriptors left (the message says which
    /// limit to raise).
    #[error(transparent)]
    OutOfFds(#[from] crate::os::fds::OutOfFds),
}

impl From<StartError> for Error {
    fn from(e: StartError) -> Error {
        match e {
            StartError::Perf(e) => e.into(),
            StartError::OutOfFds(e) => e.into(),
        }
    }
}

/// Start session `id`: route the target's samples from the sampler to a
/// new actor. The caller has validated `params` and opened `pidfd`.
pub async fn start(
    id: u64,
    mut params: Params,
    want: EventSpec,
    pidfd: PidFd,
    sampler: Arc<dyn SampleSource>,
    symbolizer: Arc<dyn Symbolizer>,
) -> Result<Handle, StartError> {
    let (batch_tx, batch_rx) = mpsc::unbounded_channel();
    // A CPython, CRuby or Perl target has its frames read from its first sample
    // on: it is registered with the frame reader before its rings open,
    // and the session's target space keeps it.
    let read_first = ProcessMaps::read(params.pid)
        .ok()
        .and_then(|maps| spaces::interpreter_of(params.pid, &maps));
    let children = match params.children {
        true => Children::Followed,
        false => Children::Ignored,
    };
    let Subscription { spec, tops, since } = sampler
        .subscribe(
            want,
            Subscriber::Session(id),
            params.pid,
            children,
            batch_tx,
        )
        .await?;
    // The session samples from its rings' opening: its duration, and the
    // waits of its threads waiting then, count from there.
    let started = Instant::now()
        .checked_sub(Duration::from_nanos(
            crate::sampling::monotonic_ns().saturating_sub(since),
        ))
        .unwrap_or_else(Instant::now);
    // Read after subscribing: later mappings arrive as MMAP2 records, and a
    // later exec or rename as a COMM record (a process attached right after
    // it was spawned may not have had its new name when it was checked).
    // A session whose files cannot be opened would name nothing: it fails
    // now, and so does one that leaves no descriptors to name with.
    let maps =
        ProcessMaps::read_for_session(params.pid, &ProcessMaps::default()).and_then(|maps| {
            crate::os::fds::spare("starting the session", crate::os::fds::SPARE).map(|()| maps)
        });
    let maps = match maps {
        Ok(maps) => maps,
        Err(why) => {
            sampler.unsubscribe(spec, Subscriber::Session(id)).await;
            return Err(why.into());
        }
    };
    if let Ok(comm) = std::fs::read_to_string(format!("/proc/{}/comm", params.pid)) {
        params.comm = comm.trim_end().to_string();
    }
    let mut ingest = Ingest::new(
        params.pid,
        params.comm.clone(),
        maps,
        spec.stacks(),
        params.max_stacks,
        params.recheck.clone(),
        tops,
    );
    ingest.stack_bytes = spec.stack_bytes as usize;
    if let Some(interpreter) = read_first {
        ingest.spaces.read_from_start(interpreter);
    }
    if params.timeline {
        ingest.timeline = Some(timeline::Times::new(params.pid, timeline::MAX_SAMPLES));
    }
    let (tx, cmd_rx) = mpsc::channel(16);
    let owner_uid = params.owner_uid;
    let owner = params.owner.as_str().into();
    let (mut actor, state_rx) = Actor::new(
        Subscriber::Session(id),
        params,
        spec,
        sampler,
        symbolizer,
        ingest,
    );
    actor.started_at(started);
    tokio::spawn(actor.run(batch_rx, cmd_rx, pidfd));
    Ok(Handle {
        id,
        owner_uid,
        owner,
        saving: Saving::default(),
        tx,
        state: state_rx,
    })
}

impl Actor {
    /// An actor counting into `ingest`, running from now.
    fn new(
        id: Subscriber,
        params: Params,
        spec: EventSpec,
        sampler: Arc<dyn SampleSource>,
        symbolizer: Arc<dyn Symbolizer>,
        ingest: Ingest,
    ) -> (Actor, watch::Receiver<api::SessionState>) {
        let (state, state_rx) = watch::channel(api::SessionState::Running);
        let libraries = ingest.timeline.is_some().then(Default::default);
        let actor = Actor {
            id,
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
            ingest,
            addr_fn: Default::default(),
            unnamed_jit: Default::default(),
            jvms_checked: None,
            awaiting_debug: Default::default(),
            names: Default::default(),
            files: Vec::new(),
            kernel: Vec::new(),
            version: 0,
            stamps: Vec::new(),
            emptied: Vec::new(),
            counted: Aggregator::new(0),
            libraries,
        };
        (actor, state_rx)
    }

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
            // The session's end first, when it is due: counting batches
            // already sent (each takes its time) does not push it back.
            tokio::select! {
                biased;
                _ = sleep_until(deadline), if running && deadline.is_some() => {
                    self.end(api::SessionState::DurationElapsed, &mut batches).await;
                }
                _ = exited(pidfd.as_ref()), if running && pidfd.is_some() => {
                    self.end(api::SessionState::Exited, &mut batches).await;
                }
                cmd = commands.recv() => match cmd {
                    None => break,
                    Some(cmd) => {
                        // A view, an export or a histogram counts everything
                        // sampled up to the question: the rings are drained
                        // first (else at their watermark, or up to
                        // the drain interval late). A summary's counts may be late;
                        // a stop drains them exactly in `end`.
                        let reads_samples = matches!(
                            cmd,
                            Command::Profile(..)
                            | Command::Resolve(..)
                            | Command::Encoded(..)
                            | Command::Histogram(..)
                        );
                        if reads_samples && self.running() {
                            self.sampler.flush(self.spec, Flush::Held).await;
                        }
                        // The answer counts every batch delivered before the
                        // question.
                        while self.running() {
                            let Ok(batch) = batches.try_recv() else { break };
                            self.take(batch, &mut batches).await;
                        }
                        self.answer(cmd, &mut batches).await;
                    }
                },
                Some(batch) = batches.recv(), if running => {
                    self.take(batch, &mut batches).await;
                }
            }
        }
        if self.running() {
            self.end(api::SessionState::Stopped, &mut batches).await;
        }
    }

    /// Count a batch; a batch refused ends the session as failed.
    async fn take(&mut self, batch: Batch, batches: &mut mpsc::UnboundedReceiver<Batch>) {
        if let Err(why) = self.apply(batch) {
            self.error = why.to_string();
            self.end(api::SessionState::Failed, batches).await;
        }
    }

    async fn answer(&mut self, cmd: Command, batches: &mut mpsc::UnboundedReceiver<Batch>) {
        match cmd {
            Command::Profile(window_s, shown, reply) => {
                let view = self.view(window_s, shown).await;
                let _ = reply.send(view);
            }
            Command::Resolve(shown, reply) => {
                let resolved = self.resolve(shown).await;
                let _ = reply.send(resolved);
            }
            Command::Encoded(reply) => {
                let _ = reply.send(self.encoded().await);
            }
            Command::Histogram(req, reply) => {
                let _ = reply.send(self.histogram(&req));
            }
            Command::Summary(reply) => {
                let _ = reply.send(self.summary());
            }
            Command::Stop(reply) => {
                if self.running() {
                    self.end(api::SessionState::Stopped, batches).await;
                }
                let _ = reply.send(self.summary());
            }
        }
    }

    /// Collect everything sampled up to now, leave the rings, and record why
    /// (failed, whatever the reason given, when a last batch is refused).
    async fn end(
        &mut self,
        mut state: api::SessionState,
        batches: &mut mpsc::UnboundedReceiver<Batch>,
    ) {
        // It ends now: counting what came before takes what it takes.
        let ended = Instant::now();
        self.sampler.flush(self.spec, Flush::Exact).await;
        self.sampler.unsubscribe(self.spec, self.id).await;
        while let Ok(batch) = batches.try_recv() {
            if !self.error.is_empty() {
                self.ingest.totals.discarded += batch.seen;
                self.ingest.counted += batch.counted;
            } else if let Err(why) = self.apply(batch) {
                self.error = why.to_string();
            }
        }
        if !self.error.is_empty() {
            state = api::SessionState::Failed;
        }
        self.ended = Some(ended);
        tracing::info!(
            session = self.id.session(),
            pid = self.params.pid,
            ?state,
            "session ended"
        );
        if let Some(lag) = self.ingest.python.lag() {
            tracing::info!(
                session = self.id.session(),
                reads = lag.reads,
                median_ns = lag.median_ns,
                p99_ns = lag.p99_ns,
                unreadable = self.ingest.totals.python_unreadable,
                ruby_unreadable = self.ingest.totals.ruby_unreadable,
                perl_unreadable = self.ingest.totals.perl_unreadable,
                "interpreter frames read at their samples"
            );
        }
        let _ = self.state.send(state);
        // Name what is left (JIT code from a perf map written at exit too,
        // or by a JVM asked now), then let go of the processes' files and
        // maps.
        self.ask_jvms_at_end().await;
        self.symbolize_pending().await;
        self.unnamed_jit = Default::default();
        self.awaiting_debug = Default::default();
        self.ingest.spaces.release();
    }

    /// Count a batch; Err when a process of the session exec'd a program
    /// its owner may not profile (the batch is then dropped: its samples are
    /// discarded).
    fn apply(&mut self, batch: Batch) -> Result<(), Refused> {
        // The target's new name, at an exec or a rename of its main thread.
        let comm = batch
            .comms
            .iter()
            .rfind(|(tid, _)| *tid == self.params.pid)
            .map(|(_, comm)| comm.clone());
        if self.params.pid != crate::sampling::EVERY_PROCESS {
            // Continuous windows are capped by their own rule (they start
            // empty at each cut).
            let level = self.params.stats.memory.level();
            self.ingest
                .hold_stacks(level >= crate::memory::Level::CapStacks);
        }
        let addr_fn = &self.addr_fn;
        let new = self.ingest.apply(batch, |a| addr_fn.contains(a))?;
        if let Some(comm) = comm {
            self.params.comm = comm;
        }
        self.ask_jvms();
        if new != NewAddresses::default() {
            use std::sync::atomic::Ordering::Relaxed;
            let stats = &self.params.stats;
            stats.symbol_cache_hits.fetch_add(new.known, Relaxed);
            stats.symbol_cache_misses.fetch_add(new.queued, Relaxed);
        }
        Ok(())
    }

    /// The session began sampling at `started` (before it was set up).
    fn started_at(&mut self, started: Instant) {
        let before = started.elapsed();
        self.started = started;
        self.started_unix_ms = self
            .started_unix_ms
            .saturating_sub(before.as_millis() as u64);
    }

    fn summary(&self) -> api::Session {
        let elapsed = self.ended.unwrap_or_else(Instant::now) - self.started;
        let mut totals = self.ingest.totals;
        // Sampling periods are a cpu-mode figure (time modes count time).
        if self.spec.mode == crate::os::perf::Mode::Cpu {
            totals.unsampled = scope::unsampled(&totals, self.ingest.counted, &self.spec);
        }
        api::Session {
            // Continuous profiling's (never asked for) has no id.
            id: self.id.session().unwrap_or_default(),
            pid: self.params.pid,
            comm: self.params.comm.clone(),
            frequency_hz: self.spec.frequency_hz,
            event: api::Event::from(self.spec.kind) as i32,
            state: *self.state.borrow() as i32,
            started_unix_ms: self.started_unix_ms,
            duration_s: elapsed.as_secs_f64(),
            totals: Some(totals),
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
            processes: self.ingest.processes.clone(),
            earlier_run: false,
            scope: scope::scope(&self.spec) as i32,
            mode: api::Mode::from(self.spec.mode) as i32,
            timeline: self.ingest.timeline.is_some(),
            timeline_dropped: self.ingest.timeline.as_ref().map_or(0, |t| t.dropped()),
            // Stamped by the handle (see `saving`).
            save_state: api::SaveState::Unspecified as i32,
            save_error: String::new(),
        }
    }
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
