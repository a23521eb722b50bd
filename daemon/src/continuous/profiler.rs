//! The continuous profiler's task: every process's samples from one ring
//! group at a low frequency, each process labelled with its service when
//! first seen (and chosen or left out by the selectors), cut into windows on
//! wall-clock boundaries and handed to the history.
use super::decode::WINDOW_STACKS;
use super::encode::{self, Encoded};
use super::history::{self, History};
use super::pods::Pods;
use super::pressure::Pressure;
use super::service::{self, Label};
use super::Settings;
use crate::memory::Tidy;
use crate::os::perf::{EventKind, EventSpec, PerfError};
use crate::process::symbolize::Symbolizer;
use crate::sampling::{
    ring_pages_for, Batch, Children, Flush, SampleSource, Subscriber, Subscription, EVERY_PROCESS,
    MIN_RING_PAGES, STACK_RING_PAGES,
};
use crate::sessions::session::{Collector, Finished};
use profd_common::api;
use profd_common::model::FrameRef;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, watch};

/// Stacks named or written between two looks for batches (a few
/// milliseconds).
const WRITE_SLICE: usize = 4096;

/// What continuous profiling knows of a process.
#[derive(Debug, Clone, Default)]
struct Process {
    label: Label,
    comm: String,
    ppid: u32,
    exe: String,
    build_id: String,
    selected: bool,
    exited: bool,
    /// It exec'd `comm` and has not been described since: it is, when its
    /// first sample comes (most new programs end before they are sampled).
    stale: bool,
    /// Its /proc entry was gone at a cut before its exit record came.
    gone: bool,
}

impl Process {
    /// Its pod's UID and its container's id ("" outside pods).
    fn in_pod(&self) -> (&str, &str) {
        (&self.label.pod_uid, &self.label.container_id)
    }
}

/// The host's facts every window carries.
#[derive(Debug, Clone)]
struct Host {
    name: String,
    kernel_release: String,
}

/// Events of a window that were handled and are counted in it.
#[derive(Debug, Default, Clone, Copy)]
struct Notes {
    cgroup_unreadable: u64,
    processes_exited: u64,
    binaries_replaced: u64,
}

struct Profiler {
    settings: Settings,
    host: Host,
    spec: EventSpec,
    collector: Collector,
    processes: HashMap<u32, Process>,
    /// Build ids of executables by (device, inode, size, mtime).
    build_ids: HashMap<(u64, u64, u64, i64), String>,
    /// The Kubernetes pods of processes, named at each cut.
    pods: Pods,
    notes: Notes,
    /// What memory pressure has the windows give up.
    pressure: Pressure,
    /// Rings of another kind to open once the window is written (see
    /// [`Profiler::retune`]).
    remake: Option<EventSpec>,
    symbolizer: Arc<dyn Symbolizer>,
    stats: Arc<crate::stats::Stats>,
}

/// Why continuous profiling stopped: its rings could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum CannotSample {
    #[error("continuous profiling cannot sample: {0}")]
    Rings(#[source] PerfError),
    /// Neither the rings asked for nor those used so far could be opened.
    #[error("continuous profiling cannot sample: {next}; {before}")]
    Neither {
        next: PerfError,
        #[source]
        before: PerfError,
    },
}

/// Run continuous profiling with `settings` until `stop`, handing each
/// window to `history`: with a sampling schedule, only in the slots this
/// host is on, and in the others windows without rings or samples. Fails
/// only when the rings cannot be opened.
pub async fn run(
    settings: Settings,
    sampler: Arc<dyn SampleSource>,
    symbolizer: Arc<dyn Symbolizer>,
    stats: Arc<crate::stats::Stats>,
    history: History,
    mut stop: watch::Receiver<bool>,
) -> Result<(), CannotSample> {
    let mut start = SystemTime::now();
    loop {
        if let Some(schedule) = settings.schedule {
            if !schedule.on(&settings.host, start)
                && off_slots(&settings, schedule, &history, &mut start, &mut stop).await
                    == Ended::Stopped
            {
                return Ok(());
            }
        }
        let on = OnSlots {
            sampler: &sampler,
            symbolizer: &symbolizer,
            stats: &stats,
            history: &history,
        };
        if on.run(settings.clone(), &mut start, &mut stop).await? == Ended::Stopped {
            return Ok(());
        }
    }
}

/// Why a run of slots ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// The daemon stops.
    Stopped,
    /// The schedule turns the other way at the next window.
    Slot,
}

/// Windows of the slots this host is off in, from `start` until one it is
/// on in (or `stop`): each window carries the schedule and no samples, so
/// that a fleet knows the host was there; no ring is open.
async fn off_slots(
    settings: &Settings,
    schedule: super::Schedule,
    history: &History,
    start: &mut SystemTime,
    stop: &mut watch::Receiver<bool>,
) -> Ended {
    tracing::info!(
        slot = schedule.slot(*start),
        "continuous profiling is off in this slot of its schedule"
    );
    let kernel_release = history::kernel_release();
    loop {
        let end = next_boundary(*start, settings.window);
        let wait = end
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        let stopped = tokio::select! {
            _ = tokio::time::sleep(wait) => false,
            _ = stop.changed() => true,
        };
        let now = SystemTime::now();
        let head = api::Window {
            id: super::files::random_id(),
            start_unix_ns: unix_ns(*start),
            end_unix_ns: unix_ns(now),
            host: settings.host.clone(),
            kernel_release: kernel_release.clone(),
            configured_frequency_hz: settings.frequency_hz,
            event: api::Event::from(EventKind::CpuClock) as i32,
            totals: Some(api::Totals::default()),
            schedule: Some(schedule.of_window(&settings.host, *start)),
            ..Default::default()
        };
        match encode::encode(head) {
            Ok(window) => history.add(window).await,
            Err(err) => tracing::warn!(%err, "cannot encode a window: not kept"),
        }
        history.cut_until(unix_ns(now));
        *start = now;
        if stopped {
            return Ended::Stopped;
        }
        if schedule.on(&settings.host, now) {
            return Ended::Slot;
        }
    }
}

/// What the slots a host profiles in run with.
struct OnSlots<'a> {
    sampler: &'a Arc<dyn SampleSource>,
    symbolizer: &'a Arc<dyn Symbolizer>,
    stats: &'a Arc<crate::stats::Stats>,
    history: &'a History,
}

impl OnSlots<'_> {
    /// Profile from `start` until `stop`, or the first window of a slot
    /// the schedule has off: the rings are opened, and closed at the end.
    async fn run(
        &self,
        settings: Settings,
        start: &mut SystemTime,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<Ended, CannotSample> {
        let (sampler, history) = (self.sampler, self.history);
        if let Some(schedule) = settings.schedule {
            // Said before the rings open, as "off" is said once they are
            // closed.
            tracing::info!(
                slot = schedule.slot(*start),
                "continuous profiling is on in this slot of its schedule"
            );
        }
        let (tx, mut batches) = mpsc::unbounded_channel();
        let Subscription { spec, tops, .. } = sampler
            .subscribe(
                want(settings.frequency_hz, sampler.cpus(), settings.stack_bytes),
                Subscriber::Continuous,
                EVERY_PROCESS,
                Children::Ignored,
                tx,
            )
            .await
            .map_err(CannotSample::Rings)?;
        let pressure = Pressure::new(
            self.stats.memory.clone(),
            settings.frequency_hz,
            WINDOW_STACKS,
        );
        tracing::info!(
            frequency_hz = spec.frequency_hz,
            window_s = settings.window.as_secs_f64(),
            "continuous profiling started"
        );
        let collector = Collector::new(
            spec,
            tops,
            sampler.clone(),
            self.symbolizer.clone(),
            self.stats.clone(),
            WINDOW_STACKS,
        );
        let mut p = Profiler {
            host: Host {
                name: settings.host.clone(),
                kernel_release: history::kernel_release(),
            },
            pods: Pods::new(settings.kubelet_logs.clone()),
            settings,
            spec,
            collector,
            processes: HashMap::new(),
            build_ids: HashMap::new(),
            notes: Notes::default(),
            pressure,
            remake: None,
            symbolizer: self.symbolizer.clone(),
            stats: self.stats.clone(),
        };
        // The window being written, while batches are counted.
        let mut adding: Option<tokio::task::JoinHandle<()>> = None;
        let mut pressure = tokio::time::interval(crate::memory::TICK);
        loop {
            let end = next_boundary(*start, p.settings.window);
            // The schedule has this host off at `t`: the window cut then is
            // the last (a late cut ends it however late).
            let off_at = |t: SystemTime| {
                p.settings
                    .schedule
                    .is_some_and(|s| !s.on(&p.settings.host, t))
            };
            let wait = end
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO);
            let mut stopping = false;
            let last = tokio::select! {
                Some(batch) = batches.recv() => {
                    p.take(batch);
                    continue;
                }
                _ = tokio::time::sleep(wait) => off_at(end.max(SystemTime::now())),
                // Stack copies are given up at once, not at the window's end:
                // the window is cut now.
                _ = pressure.tick(), if p.pressure.wants_frame_pointers(p.spec.stack_bytes) => {
                    off_at(SystemTime::now())
                }
                _ = stop.changed() => {
                    stopping = true;
                    true
                }
            };
            if !last && p.pressure.wants_frame_pointers(p.spec.stack_bytes) {
                // What waits to be counted is not (its processes' unwind data
                // is what the pressure is about): its samples count as lost.
                sampler.unsubscribe(p.spec, Subscriber::Continuous).await;
                let mut lost = 0;
                while let Ok(batch) = batches.try_recv() {
                    lost += batch.ends.len() as u64 + batch.lost;
                }
                p.collector.count_lost(lost);
            } else {
                // The last window is its session's end.
                let how = if last { Flush::Exact } else { Flush::Held };
                sampler.flush(p.spec, how).await;
            }
            while let Ok(batch) = batches.try_recv() {
                p.take(batch);
            }
            // What the window ran with; the next one's, by the memory pressure.
            let applied = (p.pressure.applied, p.spec.frequency_hz);
            if !last {
                p.retune(sampler, &mut batches).await?;
            }
            // New rings of another kind come with a new collector: this
            // window is written whole first.
            let remake = p.remake.is_some();
            let now = SystemTime::now();
            let mut writing = p.cut(*start, now, applied).await;
            *start = now;
            // While the window is built, the next one's batches are counted
            // (else they wait in the channel, with their stack copies).
            let overlap = !last && !remake && p.collector.counts_while_writing();
            let slice = if overlap { WRITE_SLICE } else { usize::MAX };
            let written = loop {
                match p.build(&mut writing, slice) {
                    Ok(false) => {}
                    Ok(true) => break Ok(()),
                    Err(err) => break Err(err),
                }
                if overlap {
                    while let Ok(batch) = batches.try_recv() {
                        p.take(batch);
                    }
                    tokio::task::yield_now().await;
                }
            };
            let cut = p.finish(writing, written);
            if let Some(next) = p.remake.take() {
                p.remake(next, sampler, &mut batches).await?;
            }
            if let Some(previous) = adding.take() {
                let _ = previous.await;
            }
            let window = match cut {
                Ok(window) => window,
                Err(err) => {
                    tracing::warn!(%err, "cannot encode a window: not kept");
                    continue;
                }
            };
            let end_ns = unix_ns(now);
            if window
                .head
                .totals
                .as_ref()
                .is_some_and(|t| t.attributed > 0)
            {
                let history = history.clone();
                adding = Some(tokio::spawn(async move {
                    history.add(window).await;
                    history.cut_until(end_ns);
                    // The cut's memory, freed, is given back to the system, not
                    // kept for the next cut.
                    crate::os::trim_heap();
                }));
            } else {
                history.cut_until(end_ns);
            }
            if last {
                if let Some(add) = adding.take() {
                    let _ = add.await;
                }
                if !stopping {
                    // Said before the rings close.
                    tracing::info!(
                        "continuous profiling closes its rings: its schedule is off next"
                    );
                }
                sampler.unsubscribe(p.spec, Subscriber::Continuous).await;
                if stopping {
                    tracing::info!("continuous profiling stopped");
                    return Ok(Ended::Stopped);
                }
                return Ok(Ended::Slot);
            }
        }
    }
}

/// The rings continuous profiling asks for at `frequency_hz` on `cpus`,
/// with stack copies of `stack_bytes` (0: frame-pointer call chains).
fn want(frequency_hz: u32, cpus: u32, stack_bytes: u32) -> EventSpec {
    EventSpec {
        held: false,
        mode: Default::default(),
        session: 0,
        kind: EventKind::CpuClock,
        frequency_hz,
        ring_pages: ring_pages(frequency_hz, cpus, stack_bytes),
        stack_bytes,
        target: None,
    }
}

/// The data pages all of continuous profiling's rings hold together at
/// most (32 MiB), however many CPUs: past 64 CPUs at 19 Hz, each ring
/// holds less than a second, and is drained more often.
const RINGS_BYTES: usize = 32 << 20;

/// Data pages of each of `cpus` rings: room for a second of samples with
/// their stack copies (the rings hold every process's, and are drained at
/// a quarter full or each second), within [`RINGS_BYTES`] together, from
/// 128 KiB to 8 MiB each.
fn ring_pages(frequency_hz: u32, cpus: u32, stack_bytes: u32) -> usize {
    let share = (RINGS_BYTES / 4096 / cpus.max(1) as usize + 1).next_power_of_two() / 2;
    ring_pages_for(frequency_hz, stack_bytes, 1)
        .min(4 * STACK_RING_PAGES)
        .min(share)
        .max(MIN_RING_PAGES)
}

/// The first multiple of `window` (in Unix time) after `t`.
fn next_boundary(t: SystemTime, window: Duration) -> SystemTime {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
    let w = window.as_nanos().max(1);
    let next = (since / w + 1) * w;
    UNIX_EPOCH + Duration::from_nanos(next.min(u128::from(u64::MAX)) as u64)
}

fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Profiler {
    /// At a cut: what memory pressure asks of the next window (its unique
    /// stacks, its frequency, its stack copies). Other rings are a ring
    /// group of their own: the old one is drained into this window and
    /// closed first, so no sample is counted twice (none is taken in
    /// between). Rings with stack copies given up or taken back need a new
    /// collector: they are opened once this window is written
    /// ([`Profiler::remake`]).
    async fn retune(
        &mut self,
        sampler: &Arc<dyn SampleSource>,
        batches: &mut mpsc::UnboundedReceiver<Batch>,
    ) -> Result<(), CannotSample> {
        let (level, stacks, hz, copies) = self.pressure.next(self.spec.frequency_hz);
        self.pressure.applied = level;
        self.collector.ingest().set_max_stacks(stacks);
        let stack_bytes = if copies { self.settings.stack_bytes } else { 0 };
        if hz == self.spec.frequency_hz && stack_bytes == self.spec.stack_bytes {
            return Ok(());
        }
        tracing::info!(
            from_hz = self.spec.frequency_hz,
            to_hz = hz,
            stack_bytes,
            level = level.name(),
            "continuous profiling's rings changed for memory pressure"
        );
        sampler.unsubscribe(self.spec, Subscriber::Continuous).await;
        while let Ok(batch) = batches.try_recv() {
            self.take(batch);
        }
        let next = want(hz, sampler.cpus(), stack_bytes);
        if stack_bytes != self.spec.stack_bytes {
            self.remake = Some(next);
            return Ok(());
        }
        let (spec, tops) = self.subscribe(next, sampler, batches).await?;
        self.collector.resample(spec, tops);
        Ok(())
    }

    /// Sample with `next` from now on (with the rings used so far when
    /// those cannot be opened), batches coming to `batches`.
    async fn subscribe(
        &mut self,
        next: EventSpec,
        sampler: &Arc<dyn SampleSource>,
        batches: &mut mpsc::UnboundedReceiver<Batch>,
    ) -> Result<(EventSpec, Option<crate::sampling::StackTops>), CannotSample> {
        let (tx, rx) = mpsc::unbounded_channel();
        let all = EVERY_PROCESS;
        let sub = match sampler
            .subscribe(
                next,
                Subscriber::Continuous,
                all,
                Children::Ignored,
                tx.clone(),
            )
            .await
        {
            Ok(sub) => sub,
            Err(err) => {
                let before = want(
                    self.spec.frequency_hz,
                    sampler.cpus(),
                    self.spec.stack_bytes,
                );
                sampler
                    .subscribe(before, Subscriber::Continuous, all, Children::Ignored, tx)
                    .await
                    .map_err(|before| CannotSample::Neither { next: err, before })?
            }
        };
        self.spec = sub.spec;
        *batches = rx;
        Ok((sub.spec, sub.tops))
    }

    /// After a window was written: the rings `next` (stack copies given up
    /// or taken back) with a new collector; the address spaces, unwinders
    /// and names of the old one are let go of.
    async fn remake(
        &mut self,
        next: EventSpec,
        sampler: &Arc<dyn SampleSource>,
        batches: &mut mpsc::UnboundedReceiver<Batch>,
    ) -> Result<(), CannotSample> {
        let (spec, tops) = self.subscribe(next, sampler, batches).await?;
        let (stacks, symbolizer, stats) = (
            self.pressure.next(spec.frequency_hz).1,
            self.symbolizer.clone(),
            self.stats.clone(),
        );
        self.collector = Collector::new(spec, tops, sampler.clone(), symbolizer, stats, stacks);
        let pids: Vec<u32> = self.processes.keys().copied().collect();
        for pid in pids {
            self.choose(pid);
        }
        crate::os::trim_heap();
        Ok(())
    }

    /// Label the processes a batch brings (new ones, forks, an exec), then
    /// count it.
    fn take(&mut self, batch: Batch) {
        if let Some((pid, comm)) = &batch.exec {
            match self.processes.get_mut(pid) {
                Some(p) if !batch.pids.contains(pid) => {
                    comm.clone_into(&mut p.comm);
                    p.stale = true;
                }
                _ => self.exec(*pid, comm),
            }
        }
        for &(child, parent, _) in &batch.forks {
            self.learn(parent);
            let mut p = self.processes[&parent].clone();
            p.ppid = parent;
            p.exited = false;
            self.processes.insert(child, p);
        }
        for &(tid, ref name) in &batch.comms {
            if let Some(p) = self.processes.get_mut(&tid) {
                p.comm.clone_from(name);
            }
        }
        let mut last = None;
        for &pid in &batch.pids {
            if last != Some(pid) {
                last = Some(pid);
                self.learn(pid);
                if let Some(comm) = self.processes.get(&pid).filter(|p| p.stale) {
                    let comm = comm.comm.clone();
                    self.exec(pid, &comm);
                }
            }
        }
        for (pid, _) in &batch.exits {
            if let Some(p) = self.processes.get_mut(pid) {
                if !p.exited {
                    p.exited = true;
                    self.notes.processes_exited += 1;
                }
            }
        }
        if let Err(why) = self.collector.apply(batch) {
            tracing::warn!(%why, "continuous profiling: a process's files could not be opened");
        }
    }

    /// Label `pid` if it is new.
    fn learn(&mut self, pid: u32) {
        if !self.processes.contains_key(&pid) {
            let p = self.describe(pid, None);
            self.processes.insert(pid, p);
            self.choose(pid);
        }
    }

    /// `pid` exec'd `comm`: a new program (and perhaps a new cgroup, as a
    /// launcher moves itself before its exec), perhaps chosen otherwise.
    fn exec(&mut self, pid: u32, comm: &str) {
        let before = self.processes.remove(&pid);
        let mut p = self.describe(pid, Some(comm));
        if let Some(before) = before {
            p.ppid = before.ppid;
            // Gone already (a short-lived program): it kept the service
            // it had from its parent.
            if p.label.source == api::ServiceSource::Comm && !alive(pid) {
                p.label = before.label;
            }
        }
        self.processes.insert(pid, p);
        self.choose(pid);
    }

    /// What /proc says of `pid` now: its label, command name (`comm` when
    /// known), executable and build id.
    fn describe(&mut self, pid: u32, comm: Option<&str>) -> Process {
        let comm = match comm {
            Some(c) => c.to_string(),
            None => std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .map(|s| s.trim_end().to_string())
                .unwrap_or_default(),
        };
        let label = match service::read_label(pid, &comm) {
            _ if kernel_thread(pid) => Label {
                service: KERNEL_SERVICE.to_string(),
                source: api::ServiceSource::Kernel,
                ..Label::default()
            },
            Ok(label) => label,
            Err((label, why)) => {
                if alive(pid) {
                    self.notes.cgroup_unreadable += 1;
                    tracing::debug!(pid, %why, "cgroup unreadable: labelled by command name");
                }
                label
            }
        };
        let mut p = Process {
            label,
            comm,
            ..Process::default()
        };
        self.read_exe(pid, &mut p);
        p
    }

    /// The executable of `pid` and its build id (read through /proc, so a
    /// binary deleted or replaced since is still the one read).
    fn read_exe(&mut self, pid: u32, p: &mut Process) {
        let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
            return;
        };
        let exe = exe.to_string_lossy().into_owned();
        p.exe = exe.strip_suffix(" (deleted)").unwrap_or(&exe).to_string();
        p.build_id = self.build_id(pid).unwrap_or_default();
    }

    fn build_id(&mut self, pid: u32) -> Option<String> {
        use std::os::unix::fs::MetadataExt;
        let file = std::fs::File::open(format!("/proc/{pid}/exe")).ok()?;
        let m = file.metadata().ok()?;
        let key = (m.dev(), m.ino(), m.size(), m.mtime());
        if let Some(id) = self.build_ids.get(&key) {
            return Some(id.clone());
        }
        let id = elf_build_id(file).unwrap_or_default();
        self.build_ids.insert(key, id.clone());
        Some(id)
    }

    /// Profile `pid` or leave it out, by the selectors.
    fn choose(&mut self, pid: u32) {
        let Some(p) = self.processes.get_mut(&pid) else {
            return;
        };
        p.selected = service::selected(&self.settings.select, &p.label, &p.comm, &p.exe);
        if p.selected {
            self.collector.ingest().include(pid);
        } else {
            self.collector.ingest().exclude(pid);
        }
    }

    /// Cut the window [start, end): its addresses are named and counting
    /// starts anew. The window is then built and written a slice at a time
    /// (see [`Profiler::build`]).
    async fn cut(
        &mut self,
        start: SystemTime,
        end: SystemTime,
        applied: (crate::memory::Level, u32),
    ) -> Writing {
        let began = std::time::Instant::now();
        self.collector.name_pending().await;
        let executables: HashMap<u32, String> = self
            .processes
            .iter()
            .filter(|(_, p)| p.exe.is_empty())
            .filter_map(|(&pid, _)| Some((pid, self.collector.executable(pid)?)))
            .collect();
        let window = self.collector.restart();
        let pids = window.processes.iter().map(|p| p.pid);
        let labels: HashMap<u32, Process> = pids
            .chain(window.thread_pid.values().copied())
            .filter_map(|pid| Some((pid, self.processes.get(&pid)?.clone())))
            .collect();
        // Processes gone are let go of: those that exited, and those whose
        // exit record has not come by the cut after their /proc entry went
        // (lost; until then their last samples may still come, and keep
        // their label).
        let collector = &mut self.collector;
        self.processes.retain(|&pid, p| {
            let keep = !p.exited && (alive(pid) || !std::mem::replace(&mut p.gone, true));
            if !keep {
                collector.ingest().include(pid);
            }
            keep
        });
        // The pods of the window's processes are named (what the node's
        // disk does not say yet is looked for again at the next cut), and
        // those no process is in any more let go of.
        self.pods.learn(labels.values().map(Process::in_pod));
        let (uids, ids) = labels
            .values()
            .chain(self.processes.values())
            .map(Process::in_pod)
            .filter(|(uid, _)| !uid.is_empty())
            .unzip();
        self.pods.retain(&uids, &ids);
        self.pressure.count_window(applied.0, applied.1);
        Writing {
            start,
            end,
            applied,
            window,
            executables,
            notes: std::mem::take(&mut self.notes),
            services: Services {
                labels,
                list: Vec::new(),
                by_name: HashMap::new(),
                of_pid: HashMap::new(),
            },
            thread_samples: HashMap::new(),
            unsymbolized: 0,
            pid_unsymbolized: HashMap::new(),
            next: 0,
            written: None,
            scratch: (Vec::new(), Vec::new(), api::WindowStack::default()),
            began,
            named: Duration::ZERO,
        }
    }

    /// Build the window `w` with up to `budget` more stacks: true once it
    /// is written. Its stacks are named twice, never all held: first to
    /// learn each one's service, each service's functions and the bytes its
    /// stacks take, then service by service as they are written.
    fn build(&self, w: &mut Writing, budget: usize) -> std::io::Result<bool> {
        if w.written.is_some() {
            return self.write_some(w, budget);
        }
        let (raw, frames, _) = &mut w.scratch;
        let end = w.window.unique_stacks().min(w.next.saturating_add(budget));
        for i in w.next..end {
            let Some((tid, count, unnamed)) = self.collector.stack(&w.window, i, raw, frames)
            else {
                continue;
            };
            let pid = w.window.thread_pid.get(&tid).copied().unwrap_or(0);
            let s = w.services.slot(pid);
            if unnamed {
                w.unsymbolized += count;
                w.services.list[s].totals().unsymbolized += count;
                *w.pid_unsymbolized.entry(pid).or_default() += count;
            }
            *w.thread_samples.entry(tid).or_default() += count;
            w.services.list[s].count(i as u32, tid, count, frames, &self.collector);
        }
        w.next = end;
        if end == w.window.unique_stacks() {
            self.head(w);
        }
        Ok(false)
    }

    /// The window's head, once its stacks were all named: its services'
    /// threads and processes, and its totals. The writing begins.
    fn head(&self, w: &mut Writing) {
        let services = &mut w.services;
        for (&tid, &n) in &w.thread_samples {
            let pid = w.window.thread_pid.get(&tid).copied().unwrap_or(0);
            let s = services.slot(pid);
            services.list[s].window.threads.push(api::WindowThread {
                tid,
                pid,
                name: w.window.threads.get(&tid).cloned().unwrap_or_default(),
                samples: n,
            });
        }
        let notes = &mut w.notes;
        for ps in w.window.processes.iter().filter(|p| p.samples > 0) {
            if replaced(ps.pid) {
                notes.binaries_replaced += 1;
            }
            let s = services.slot(ps.pid);
            let mut totals = api::Totals {
                attributed: ps.samples,
                unsymbolized: w.pid_unsymbolized.get(&ps.pid).copied().unwrap_or(0),
                ..Default::default()
            };
            if let Some(own) = w.window.pid_totals.get(&ps.pid) {
                own.add_to(services.list[s].totals());
                own.add_to(&mut totals);
            }
            let mut p = services.labels.get(&ps.pid).cloned().unwrap_or_default();
            let pod = self.pods.pod(&p.label.pod_uid, &p.label.container_id);
            if p.exe.is_empty() {
                // Gone before /proc could say: the program it mapped.
                p.exe = w.executables.get(&ps.pid).cloned().unwrap_or_default();
            }
            services.list[s].window.processes.push(api::WindowProcess {
                pid: ps.pid,
                ppid: p.ppid,
                comm: p.comm,
                executable: p.exe,
                build_id: p.build_id,
                cgroup: p.label.cgroup,
                container_id: p.label.container_id,
                samples: ps.samples,
                exited: p.exited,
                pod,
                totals: Some(totals),
            });
        }
        let services = &mut services.list;
        for s in services.iter_mut() {
            s.finish();
        }
        // Most samples first.
        let mut order: Vec<usize> = (0..services.len()).collect();
        order.sort_by(|&a, &b| {
            let (a, b) = (&services[a].window, &services[b].window);
            b.samples.cmp(&a.samples).then(a.service.cmp(&b.service))
        });
        let mut totals = w.window.totals;
        totals.discarded += totals.unchecked;
        totals.unchecked = 0;
        totals.unsampled = 0;
        totals.unsymbolized = w.unsymbolized;
        let head = api::Window {
            id: super::files::random_id(),
            start_unix_ns: unix_ns(w.start),
            end_unix_ns: unix_ns(w.end),
            host: self.host.name.clone(),
            kernel_release: self.host.kernel_release.clone(),
            frequency_hz: w.applied.1,
            configured_frequency_hz: self.pressure.configured_hz(),
            memory_level: w.applied.0 as u32,
            event: api::Event::from(self.spec.kind) as i32,
            totals: Some(totals),
            services: order.iter().map(|&s| services[s].window.clone()).collect(),
            cgroup_unreadable: notes.cgroup_unreadable,
            processes_exited: notes.processes_exited,
            binaries_replaced: notes.binaries_replaced,
            schedule: self
                .settings
                .schedule
                .map(|s| s.of_window(&self.host.name, w.start)),
        };
        w.named = w.began.elapsed();
        w.written = Some(Written {
            out: encode::Writer::new(&head),
            head,
            order,
            at: (0, 0),
        });
    }

    /// Write up to `budget` more stacks of the window: true once all are.
    /// Each service's fields come first, then its stacks, named again.
    fn write_some(&self, w: &mut Writing, mut budget: usize) -> std::io::Result<bool> {
        let (raw, frames, stack) = &mut w.scratch;
        let Some(o) = &mut w.written else {
            return Ok(false);
        };
        while let Some(&s) = o.order.get(o.at.0) {
            if budget == 0 {
                return Ok(false);
            }
            let b = &w.services.list[s];
            if o.at.1 == 0 {
                o.out.service(&b.window, b.stacks_len)?;
            }
            while let Some(&i) = b.stacks.get(o.at.1) {
                if budget == 0 {
                    return Ok(false);
                }
                budget -= 1;
                o.at.1 += 1;
                let Some((tid, count, _)) =
                    self.collector.stack(&w.window, i as usize, raw, frames)
                else {
                    continue;
                };
                fill(&b.functions, stack, tid, count, frames);
                o.out.stack(stack)?;
            }
            o.at = (o.at.0 + 1, 0);
        }
        Ok(true)
    }

    /// The window written (or not: `built`), its names let go of.
    fn finish(&mut self, w: Writing, built: std::io::Result<()>) -> std::io::Result<Encoded> {
        let stacks = w.window.unique_stacks();
        let tidy = match self.pressure.take_shed() {
            true => Tidy::Shed,
            false => Tidy::AsUsual,
        };
        self.collector.forget(w.window, tidy);
        self.pressure.names_held(self.collector.names_held());
        let Some(o) = w.written else {
            return Err(built
                .err()
                .unwrap_or_else(|| std::io::Error::other("the window was not built")));
        };
        let gz = built.and_then(|()| o.out.finish());
        tracing::debug!(
            stacks,
            services = w.services.list.len(),
            bytes = gz.as_ref().map_or(0, Vec::len),
            named_ms = w.named.as_millis() as u64,
            written_ms = (w.began.elapsed() - w.named).as_millis() as u64,
            "window cut"
        );
        Ok(Encoded {
            head: o.head,
            gz: gz?,
        })
    }
}

/// A window's services as its stacks are counted, each process in the
/// service of its label at the cut.
struct Services {
    /// What was known of the window's processes at the cut.
    labels: HashMap<u32, Process>,
    list: Vec<ServiceBuilder>,
    /// Each service's place in `list` by name, and by pid.
    by_name: HashMap<String, usize>,
    of_pid: HashMap<u32, usize>,
}

impl Services {
    /// The place of process `pid`'s service in `list` (added when new).
    fn slot(&mut self, pid: u32) -> usize {
        let (labels, list, by_name) = (&self.labels, &mut self.list, &mut self.by_name);
        *self.of_pid.entry(pid).or_insert_with(|| {
            let (name, source) = match labels.get(&pid) {
                Some(p) => (p.label.service.clone(), p.label.source),
                None => (String::from("unknown"), api::ServiceSource::Unspecified),
            };
            *by_name.entry(name.clone()).or_insert_with(|| {
                list.push(ServiceBuilder::new(name, source));
                list.len() - 1
            })
        })
    }
}

/// A window cut, being built while the next one is counted.
struct Writing {
    start: SystemTime,
    end: SystemTime,
    /// The memory pressure level and frequency the window was counted at.
    applied: (crate::memory::Level, u32),
    window: Finished,
    /// The programs of the window's processes that had none yet at the cut.
    executables: HashMap<u32, String>,
    notes: Notes,
    services: Services,
    thread_samples: HashMap<u32, u64>,
    unsymbolized: u64,
    /// Per process, its samples with a frame not named.
    pid_unsymbolized: HashMap<u32, u64>,
    /// The next stack to name.
    next: usize,
    /// Once every stack was named: the window being written.
    written: Option<Written>,
    scratch: (Vec<u64>, Vec<FrameRef>, api::WindowStack),
    began: std::time::Instant,
    named: Duration,
}

/// A window's head, and how far its writing is.
struct Written {
    head: api::Window,
    out: encode::Writer,
    /// Services in the order they are written.
    order: Vec<usize>,
    /// The next stack to write: its service's place in `order`, its place
    /// in the service's stacks.
    at: (usize, usize),
}

/// One service's part of a window being built: its own function table,
/// its stacks (their indices in the collector's table) and the bytes they
/// take once encoded.
struct ServiceBuilder {
    window: api::ServiceWindow,
    /// Each function's index in the service's table, by function id: looked
    /// up for every frame, twice.
    functions: foldhash::HashMap<u32, u32>,
    stacks: Vec<u32>,
    stacks_len: usize,
    /// Scratch for measuring a stack.
    scratch: api::WindowStack,
}

impl ServiceBuilder {
    fn new(service: String, source: api::ServiceSource) -> ServiceBuilder {
        ServiceBuilder {
            window: api::ServiceWindow {
                service,
                source: source as i32,
                ..Default::default()
            },
            functions: foldhash::HashMap::default(),
            stacks: Vec::new(),
            stacks_len: 0,
            scratch: api::WindowStack::default(),
        }
    }

    /// Count stack `index` of the service: its functions join the service's
    /// table, its samples and encoded bytes are added up.
    fn count(&mut self, index: u32, tid: u32, count: u64, frames: &[FrameRef], names: &Collector) {
        let w = &mut self.window;
        for f in frames {
            self.functions.entry(f.function).or_insert_with(|| {
                w.functions.push(names.function(f.function));
                w.functions.len() as u32 - 1
            });
        }
        w.samples += count;
        self.stacks.push(index);
        fill(&self.functions, &mut self.scratch, tid, count, frames);
        self.stacks_len += encode::Writer::stack_len(&self.scratch);
    }

    /// The service's totals in the window.
    fn totals(&mut self) -> &mut api::Totals {
        self.window.totals.get_or_insert_with(Default::default)
    }

    fn finish(&mut self) {
        let samples = self.window.samples;
        self.totals().attributed = samples;
        self.window
            .processes
            .sort_by(|a, b| b.samples.cmp(&a.samples).then(a.pid.cmp(&b.pid)));
        self.window
            .threads
            .sort_by(|a, b| b.samples.cmp(&a.samples).then(a.tid.cmp(&b.tid)));
        self.scratch = api::WindowStack::default();
    }
}

/// `out` := a stack as its service's window holds it, by the service's
/// function table `functions` (which has every function of `frames`).
fn fill(
    functions: &foldhash::HashMap<u32, u32>,
    out: &mut api::WindowStack,
    tid: u32,
    count: u64,
    frames: &[FrameRef],
) {
    out.tid = tid;
    out.count = count;
    out.function.clear();
    out.line.clear();
    out.address.clear();
    for f in frames {
        out.function.push(functions[&f.function]);
        out.line.push(f.line);
        out.address.push(f.address);
    }
}

/// The executable process `pid` runs was deleted or replaced since it
/// started (the kernel marks the link `(deleted)`).
fn replaced(pid: u32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .is_ok_and(|exe| exe.to_string_lossy().ends_with(" (deleted)"))
}

/// The service of every kernel thread.
pub const KERNEL_SERVICE: &str = "[kernel]";

/// `pid` is a kernel thread (PF_KTHREAD in its /proc stat flags).
fn kernel_thread(pid: u32) -> bool {
    const PF_KTHREAD: u32 = 0x0020_0000;
    procfs::process::Process::new(pid as i32)
        .and_then(|p| p.stat())
        .is_ok_and(|stat| stat.flags & PF_KTHREAD != 0)
}

/// Process `pid` is still there (its /proc entry is).
fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The GNU build id of an ELF file, in hex.
fn elf_build_id(file: std::fs::File) -> Option<String> {
    use crate::process::maps::{build_id_hex, Sections};
    let cache = object::ReadCache::new(file);
    let id = Sections::of(&cache)?.build_id(&cache)?;
    Some(build_id_hex(&id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_end_on_multiples_of_their_span() {
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_003_250);
        let next = next_boundary(t, Duration::from_secs(10));
        assert_eq!(unix_ns(next), 1_700_000_010_000_000_000);
        assert_eq!(
            unix_ns(next_boundary(next, Duration::from_secs(10))),
            1_700_000_020_000_000_000
        );
    }

    #[test]
    fn rings_hold_about_a_second_of_samples_within_32_mib() {
        let copies =
            |hz, cpus| ring_pages(hz, cpus, crate::sessions::registry::DEFAULT_STACK_BYTES);
        assert_eq!(copies(4, 2), 32, "128 KiB at least");
        assert_eq!(copies(19, 2), 128, "512 KiB: 30 stack copies");
        assert_eq!(copies(99, 2), STACK_RING_PAGES);
        assert_eq!(copies(199, 2), 1024);
        assert_eq!(copies(499, 2), 2048);
        assert_eq!(copies(4999, 2), 2048);
        assert_eq!(copies(4999, 16), 512, "32 MiB over 16 CPUs");
        assert_eq!(copies(4999, 17), 256);
        assert_eq!(copies(19, 64), 128);
        assert_eq!(copies(19, 96), 64);
        assert_eq!(copies(19, 192), 32);
        assert_eq!(copies(19, 1024), MIN_RING_PAGES);
        assert_eq!(ring_pages(19, 2, 0), MIN_RING_PAGES, "frame pointers");
        for cpus in [1, 2, 3, 8, 64, 96, 100, 192, 256] {
            let pages = copies(19, cpus);
            assert!(pages.is_power_of_two(), "{cpus}: {pages}");
            assert!(
                pages * 4096 * cpus as usize <= RINGS_BYTES,
                "{cpus}: {pages}"
            );
        }
    }

    #[test]
    fn kernel_threads_are_told_from_processes() {
        assert!(kernel_thread(2), "kthreadd");
        assert!(!kernel_thread(std::process::id()));
        assert!(!kernel_thread(1));
    }

    #[test]
    fn the_daemons_own_executable_has_a_build_id() {
        let exe = std::fs::File::open("/proc/self/exe").unwrap();
        let id = elf_build_id(exe).expect("rustc links a build id");
        assert!(
            id.len() >= 16 && id.chars().all(|c| c.is_ascii_hexdigit()),
            "{id}"
        );
        // As readelf reads it.
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let out = std::process::Command::new("readelf")
            .arg("-n")
            .arg(&exe)
            .output()
            .expect("readelf (binutils)");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&format!("Build ID: {id}")), "{text}");
    }
}
