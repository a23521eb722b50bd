//! The daemon's sessions: validates attach requests against the kernel's and
//! the daemon's limits, the target's existence and the caller's right to it,
//! starts session actors, looks them up for their owners, and tells what
//! the daemon is doing (`activity`, for Info and `/metrics`). Errors here
//! carry what the caller should change.
use crate::os::perf::{EventKind, EventSpec, Mode, MAX_STACK_BYTES};
use crate::os::sysctl::max_sample_rate;
use crate::os::PidFd;
use crate::process::symbolize::Symbolizer;
use crate::request_error::Error;
use crate::sampling::SampleSource;
use crate::serve::auth::{self, Caller, Check, Grant};
use crate::sessions::session::{self, Handle, Params};
use crate::stats::Stats;
use profd_common::{api, DEFAULT_FREQUENCY_HZ};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

mod persist;
mod retain;

/// The daemon's resource limits (flags `--max-*`).
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Running sessions in all.
    pub max_sessions: usize,
    /// Running sessions of one user.
    pub max_sessions_per_caller: usize,
    /// Highest sampling frequency (None: the kernel's).
    pub max_frequency_hz: Option<u32>,
    /// Longest session (None: unlimited); sessions asking for none get this.
    pub max_duration: Option<Duration>,
    /// Unique stacks one session keeps.
    pub max_stacks: usize,
    /// Buckets one histogram may have.
    pub max_histogram_buckets: u32,
    /// Histogram, export and view requests answered at once.
    pub max_concurrent_exports: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_sessions: 64,
            max_sessions_per_caller: 16,
            max_frequency_hz: None,
            max_duration: None,
            max_stacks: 250_000,
            max_histogram_buckets: 1 << 20,
            max_concurrent_exports: 4,
        }
    }
}

/// Longest duration a request may name at all (a year).
const MAX_DURATION_MS: u64 = 366 * 24 * 3600 * 1000;

/// A validated Attach request.
#[derive(Debug, Clone, PartialEq)]
pub struct AttachPlan {
    pub pid: u32,
    pub spec: EventSpec,
    pub duration: Option<Duration>,
}

/// User stack bytes copied per sample when a session does not say.
pub const DEFAULT_STACK_BYTES: u32 = 16384;

/// Check an Attach request's fields (not the target) against the kernel's
/// `max_rate` and the daemon's `limits`.
pub fn plan_attach(
    req: &api::AttachRequest,
    max_rate: u32,
    limits: &Limits,
) -> Result<AttachPlan, Error> {
    if req.pid == 0 {
        return Err(Error::InvalidArgument(
            "pid must be a process id (1 or above)".into(),
        ));
    }
    let (max_hz, which) = match limits.max_frequency_hz {
        Some(m) if m < max_rate => (m, "the daemon's limit --max-frequency"),
        _ => (
            max_rate,
            "the kernel's limit kernel.perf_event_max_sample_rate",
        ),
    };
    let frequency_hz = match req.frequency_hz {
        None => DEFAULT_FREQUENCY_HZ.min(max_hz),
        Some(0) => {
            return Err(Error::InvalidArgument(format!(
                "frequency 0 Hz cannot sample: use 1..={max_hz} Hz"
            )))
        }
        Some(f) if f > max_hz => {
            return Err(Error::ResourceExhausted(format!(
                "frequency {f} Hz is above {which} ({max_hz} Hz): use 1..={max_hz} Hz"
            )))
        }
        Some(f) => f,
    };
    let kind = EventKind::from(api::Event::try_from(req.event).map_err(|_| {
        Error::InvalidArgument(format!(
            "unknown event {}: use EVENT_CPU_CLOCK (1) or EVENT_CYCLES (2)",
            req.event
        ))
    })?);
    let mode = Mode::from(api::Mode::try_from(req.mode).map_err(|_| {
        Error::InvalidArgument(format!(
            "unknown mode {}: use MODE_CPU (1), MODE_OFF_CPU (2) or MODE_WALL (3)",
            req.mode
        ))
    })?);
    if mode != Mode::Cpu && kind == EventKind::Cycles {
        return Err(Error::InvalidArgument(format!(
            "mode {} weighs stacks by time, which the cycles event does not count: leave event unset (cpu-clock) with this mode",
            api::Mode::from(mode).as_str_name()
        )));
    }
    if req.timeline && mode != Mode::Cpu {
        return Err(Error::InvalidArgument(format!(
            "a timeline keeps the times of on-CPU samples: leave mode unset (MODE_CPU) with timeline, not {}",
            api::Mode::from(mode).as_str_name()
        )));
    }
    if req.duration_ms > MAX_DURATION_MS {
        return Err(Error::InvalidArgument(format!(
            "duration {} ms is over a year: use 0 (until stopped) or at most {MAX_DURATION_MS} ms",
            req.duration_ms
        )));
    }
    let asked = (req.duration_ms > 0).then(|| Duration::from_millis(req.duration_ms));
    let duration = match (asked, limits.max_duration) {
        (Some(d), Some(max)) if d > max => {
            let (d, max) = (d.as_secs_f64(), max.as_secs());
            return Err(Error::ResourceExhausted(format!(
                "duration {d} s is above the daemon's limit --max-duration ({max} s): ask for at most that"
            )));
        }
        (None, max) => max,
        (asked, _) => asked,
    };
    let stack_bytes = match (api::Unwind::try_from(req.unwind), req.stack_bytes) {
        (Ok(api::Unwind::Fp), 0) => 0,
        (Ok(api::Unwind::Fp), n) => {
            return Err(Error::InvalidArgument(format!(
                "stack_bytes {n} applies only to DWARF unwinding: leave it 0 with UNWIND_FP, or ask for UNWIND_DWARF"
            )))
        }
        (Ok(_), 0) => DEFAULT_STACK_BYTES,
        (Ok(_), n) if n % 8 != 0 || n > MAX_STACK_BYTES => {
            return Err(Error::InvalidArgument(format!(
                "stack_bytes {n} cannot be copied: use a multiple of 8 from 8 to {MAX_STACK_BYTES}"
            )))
        }
        (Ok(_), n) => n,
        (Err(_), _) => {
            return Err(Error::InvalidArgument(format!(
                "unknown unwind mode {}: use UNWIND_AUTO (1), UNWIND_FP (2) or UNWIND_DWARF (3)",
                req.unwind
            )))
        }
    };
    let spec = EventSpec {
        kind,
        mode,
        // A timeline needs a group of its own (see EventSpec::session).
        session: u64::from(req.timeline),
        frequency_hz,
        ring_pages: 0,
        stack_bytes,
        // The sampler chooses the scope.
        target: None,
        held: req.held,
    };
    Ok(AttachPlan {
        pid: req.pid,
        spec,
        duration,
    })
}

/// The target's thread group id and command name; NotFound when it is gone.
fn target_process(pid: u32) -> Result<(u32, String), Error> {
    let gone = |err: procfs::ProcError| match crate::os::fds::of_proc(&err) {
        Some(e) => Error::OutOfFds {
            doing: format!("reading /proc/{pid}"),
            // The same errno, owned: procfs keeps its error.
            source: std::io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(libc::EMFILE)),
        },
        None => Error::NotFound(format!("no process with pid {pid}")),
    };
    let proc = procfs::process::Process::new(pid as i32).map_err(gone)?;
    let status = proc.status().map_err(gone)?;
    if status.state.starts_with('Z') || status.state.starts_with('X') {
        return Err(Error::NotFound(format!("process {pid} has already exited")));
    }
    Ok((status.tgid as u32, status.name))
}

/// This run's sessions, by id (the registry's and its saving tasks').
type LiveSessions = Arc<Mutex<BTreeMap<u64, Handle>>>;

/// The sessions of earlier runs, by id; shared with the saving tasks, which
/// drop the ones the retention limits delete.
type StoredSessions = Arc<std::sync::Mutex<BTreeMap<u64, Handle>>>;

/// Whether `seen_by` may see a session owned by `owner_uid`: root sees
/// every session, other callers their own; without a caller, all.
fn sees(seen_by: Option<&Caller>, owner_uid: u32) -> bool {
    seen_by.is_none_or(|c| c.is_root() || owner_uid == c.uid())
}

/// The sampler's daemon-wide counts since the daemon started.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SampleCounts {
    pub samples: u64,
    pub attributed: u64,
    pub discarded: u64,
    pub lost: u64,
    pub throttled: u64,
    /// Ring reads (a drain reads each ring of its group), and the bytes
    /// they read.
    pub ring_reads: u64,
    pub ring_read_bytes: u64,
}

/// An open ring group: its settings and how many sessions use it.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupUse {
    pub spec: EventSpec,
    pub sessions: u32,
}

/// What the daemon is doing, read at one moment, as a caller may see it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Activity {
    pub counts: SampleCounts,
    /// The open ring groups; seen by a caller, only those some session it
    /// may see uses, counting only those sessions.
    pub groups: Vec<GroupUse>,
    /// This run's sessions running now.
    pub running: u64,
    /// Ended sessions kept: this run's and reloaded ones.
    pub ended: u64,
}

/// Which daemon runs' sessions [`Registry::listed`] lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listing {
    /// This run's sessions, running and ended.
    ThisRun,
    /// Also those of earlier runs, found in the state directory.
    AllRuns,
}

/// All sessions of the daemon, running and ended.
pub struct Registry {
    sampler: Arc<dyn SampleSource>,
    symbolizer: Arc<dyn Symbolizer>,
    limits: Limits,
    grants: Arc<[Grant]>,
    sessions: LiveSessions,
    /// Held while a session is checked against the limits and started.
    attaching: Mutex<()>,
    /// Where new sessions' ids come from; reserving them may write to the
    /// state directory.
    ids: Arc<std::sync::Mutex<crate::sessions::store::Ids>>,
    /// The state directory ended sessions are saved to (None: kept in
    /// memory only).
    store: Option<Arc<crate::sessions::store::Store>>,
    /// Sessions of earlier daemon runs, reloaded from the state directory.
    stored: StoredSessions,
    /// Tasks saving sessions when they end.
    saves: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Set at shutdown: no new sessions.
    closing: AtomicBool,
    /// Set at shutdown too: saves that keep failing give up.
    shutdown: tokio::sync::watch::Sender<bool>,
    /// Sessions evicted by the retention limits, by owner.
    ledger: Arc<crate::sessions::store::share::Ledger>,
    /// Counters for `/metrics`.
    stats: Arc<Stats>,
    /// Places for histogram, export and view requests being answered.
    exports: Arc<tokio::sync::Semaphore>,
}

impl Registry {
    pub fn new(
        sampler: Arc<dyn SampleSource>,
        symbolizer: Arc<dyn Symbolizer>,
        limits: Limits,
        grants: Vec<Grant>,
    ) -> Registry {
        Registry {
            sampler,
            symbolizer,
            grants: grants.into(),
            sessions: Default::default(),
            attaching: Mutex::new(()),
            ids: Default::default(),
            store: None,
            stored: Default::default(),
            saves: Default::default(),
            closing: AtomicBool::new(false),
            shutdown: tokio::sync::watch::channel(false).0,
            ledger: Default::default(),
            stats: Default::default(),
            exports: Arc::new(tokio::sync::Semaphore::new(limits.max_concurrent_exports)),
            limits,
        }
    }

    /// The daemon's limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A place among the histogram, export and view requests answered at
    /// once (each holds a session's whole profile or histogram in memory),
    /// held until the reply is made; RESOURCE_EXHAUSTED when none is free.
    pub fn export_permit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, Error> {
        self.exports.clone().try_acquire_owned().map_err(|_| {
            let n = self.limits.max_concurrent_exports;
            Error::ResourceExhausted(format!(
                "{n} histogram, export or view requests are being answered, the daemon's limit \
                 --max-concurrent-exports ({n}) (limits.max_concurrent_exports in profd.toml): \
                 retry once one is done, or raise the limit"
            ))
        })
    }

    /// Where samples come from (continuous profiling subscribes too).
    pub fn sampler(&self) -> &Arc<dyn SampleSource> {
        &self.sampler
    }

    /// The symbolizer sessions name addresses with.
    pub fn symbolizer(&self) -> &Arc<dyn Symbolizer> {
        &self.symbolizer
    }

    /// The counters `/metrics` shows that the registry and its sessions keep.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Fail when another running session would exceed a session limit.
    async fn check_session_limits(&self, caller: &Caller) -> Result<(), Error> {
        let (mut all, mut mine) = (0, 0);
        for h in self.all().await {
            if *h.state().borrow() == api::SessionState::Running {
                all += 1;
                mine += usize::from(h.owner_uid == caller.uid());
            }
        }
        let l = &self.limits;
        if all >= l.max_sessions {
            return Err(Error::ResourceExhausted(format!(
                "{all} sessions are running, the daemon's limit --max-sessions ({}) (limits.max_sessions in profd.toml): stop one first (`profctl stop ID`)",
                l.max_sessions
            )));
        }
        if mine >= l.max_sessions_per_caller {
            return Err(Error::ResourceExhausted(format!(
                "{} has {mine} sessions running, the daemon's limit --max-sessions-per-caller ({}) (limits.max_sessions_per_caller in profd.toml): stop one first (`profctl stop ID`)",
                caller.label, l.max_sessions_per_caller
            )));
        }
        Ok(())
    }

    /// Validate and start a session owned by `caller`.
    pub async fn attach(
        &self,
        req: &api::AttachRequest,
        caller: &Caller,
    ) -> Result<api::Session, Error> {
        let mut plan = plan_attach(req, max_sample_rate(), &self.limits)?;
        let _attaching = self.attaching.lock().await;
        if self.closing.load(Ordering::Relaxed) {
            return Err(Error::FailedPrecondition(
                "the daemon is shutting down: attach again once it has restarted".into(),
            ));
        }
        self.check_session_limits(caller).await?;
        let (tgid, comm) = target_process(plan.pid)?;
        let pidfd = PidFd::open(tgid).map_err(|err| match err.raw_os_error() {
            Some(libc::ESRCH) => Error::NotFound(format!("no process with pid {}", plan.pid)),
            _ if crate::os::fds::exhausted(&err) => Error::OutOfFds {
                doing: format!("opening a pidfd for {tgid}"),
                source: err,
            },
            _ => Error::Io {
                doing: format!("cannot open a pidfd for {tgid}"),
                source: err,
            },
        })?;
        // Read the identity after pinning the process with the pidfd, and
        // make sure it is still alive afterwards: then the pid was not reused
        // in between, and the credentials are that process's.
        let (tgid_again, _) = target_process(tgid)?;
        let exited = || Error::NotFound(format!("process {} exited while attaching", plan.pid));
        let check = auth::check_process(&caller.account, &self.grants, tgid);
        if tgid_again != tgid || pidfd.exited() {
            return Err(exited());
        }
        match check {
            Check::Allowed => {}
            Check::Gone => {
                crate::os::fds::spare(&format!("reading /proc/{tgid}"), 1)?;
                return Err(exited());
            }
            Check::Denied(why) => return Err(Error::PermissionDenied(why.to_string())),
        }
        // Stack copies left to the daemon are as large as the kernel allows
        // for runtimes whose JIT stacks outgrow the default.
        if req.stack_bytes == 0 && plan.spec.stack_bytes > 0 {
            if let Some(runtime) = crate::process::maps::deep_stack_runtime(tgid, &comm) {
                tracing::debug!(
                    pid = tgid,
                    runtime,
                    "the largest stack copies for a runtime"
                );
                plan.spec.stack_bytes = MAX_STACK_BYTES;
            }
        }
        // A process can gain privileges only by exec'ing a set-id program:
        // sessions of ordinary users are checked again at every exec.
        let recheck = (!caller.is_root()).then(|| {
            let account = caller.account.clone();
            let grants = self.grants.clone();
            let check: session::Recheck =
                Arc::new(move |pid| auth::check_process(&account, &grants, pid));
            check
        });
        let id = self.new_id().await?;
        let params = Params {
            pid: tgid,
            comm,
            duration: plan.duration,
            owner_uid: caller.uid(),
            owner: caller.account.name.clone(),
            max_stacks: self.limits.max_stacks,
            recheck,
            children: req.children,
            timeline: req.timeline,
            stats: self.stats.clone(),
        };
        let handle = session::start(
            id,
            params,
            plan.spec,
            pidfd,
            self.sampler.clone(),
            self.symbolizer.clone(),
        )
        .await?;
        // Recorded in the state directory before Attach answers.
        self.save_when_ended(handle.clone()).await;
        let summary = handle.summary().await?;
        tracing::info!(
            session = id,
            pid = tgid,
            hz = plan.spec.frequency_hz,
            caller = %caller.label,
            "session started"
        );
        self.stats.sessions_started.fetch_add(1, Ordering::Relaxed);
        self.sessions.lock().await.insert(id, handle);
        Ok(summary)
    }

    /// The session with this id, when `caller` may use it.
    pub async fn get(&self, id: u64, caller: &Caller) -> Result<Handle, Error> {
        let live = self.sessions.lock().await.get(&id).cloned();
        let handle = live.or_else(|| self.stored_session(id)).ok_or_else(|| {
            Error::NotFound(format!(
                "no session with id {id}; `profctl sessions --all` lists them"
            ))
        })?;
        caller.may_read(id, handle.owner_uid)?;
        Ok(handle)
    }

    /// Every session, oldest first.
    pub async fn all(&self) -> Vec<Handle> {
        self.sessions.lock().await.values().cloned().collect()
    }

    /// The sessions `caller` may see: all for root, else its own.
    pub async fn visible(&self, caller: &Caller) -> Vec<Handle> {
        let mut all = self.all().await;
        all.retain(|h| sees(Some(caller), h.owner_uid));
        all
    }

    /// What the daemon is doing now, as `seen_by` may see it (everything
    /// without a caller): for Info and `/metrics`.
    pub async fn activity(&self, seen_by: Option<&Caller>) -> Activity {
        let c = self.sampler.counters();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let counts = SampleCounts {
            samples: load(&c.samples),
            attributed: load(&c.attributed),
            discarded: load(&c.discarded),
            lost: load(&c.lost),
            throttled: load(&c.throttles),
            ring_reads: load(&c.drains),
            ring_read_bytes: load(&c.bytes_read),
        };
        let mut live = self.all().await;
        live.retain(|h| sees(seen_by, h.owner_uid));
        let ids: HashSet<u64> = live.iter().map(|h| h.id).collect();
        let groups = self
            .sampler
            .groups()
            .await
            .into_iter()
            .filter_map(|(spec, users)| {
                let sessions = users
                    .iter()
                    .filter(|user| user.session().is_some_and(|id| ids.contains(&id)))
                    .count() as u32;
                (seen_by.is_none() || sessions > 0).then_some(GroupUse { spec, sessions })
            })
            .collect();
        let running = live
            .iter()
            .filter(|h| *h.state().borrow() == api::SessionState::Running)
            .count() as u64;
        Activity {
            counts,
            groups,
            running,
            ended: (live.len() as u64 - running) + self.stored_count(seen_by) as u64,
        }
    }

    /// Stop every running session and refuse new ones (daemon shutdown);
    /// `wait_saved` then waits until they are in the state directory.
    pub async fn stop_all(&self) {
        {
            let _attaching = self.attaching.lock().await;
            self.closing.store(true, Ordering::Relaxed);
            self.shutdown.send_replace(true);
            self.release_ids().await;
        }
        for handle in self.all().await {
            let _ = handle.stop().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(pid: u32, freq: Option<u32>) -> api::AttachRequest {
        api::AttachRequest {
            pid,
            frequency_hz: freq,
            ..Default::default()
        }
    }

    #[test]
    fn frequency_defaults_and_bounds() {
        assert_eq!(
            plan_attach(&req(1, None), 5000, &Limits::default())
                .unwrap()
                .spec
                .frequency_hz,
            999
        );
        assert_eq!(
            plan_attach(&req(1, None), 500, &Limits::default())
                .unwrap()
                .spec
                .frequency_hz,
            500
        );
        let msg = plan_attach(&req(1, Some(0)), 5000, &Limits::default())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("1..=5000"), "{msg}");
        let err = plan_attach(&req(1, Some(5001)), 5000, &Limits::default()).unwrap_err();
        assert!(
            matches!(err, Error::ResourceExhausted(ref m) if m.contains("perf_event_max_sample_rate")),
            "{err}"
        );
        assert_eq!(
            plan_attach(&req(1, Some(5000)), 5000, &Limits::default())
                .unwrap()
                .spec
                .frequency_hz,
            5000
        );
    }

    #[test]
    fn daemon_limits_on_frequency_and_duration() {
        let limits = Limits {
            max_frequency_hz: Some(100),
            max_duration: Some(Duration::from_secs(2)),
            ..Limits::default()
        };
        let plan = plan_attach(&req(1, None), 5000, &limits).unwrap();
        assert_eq!(plan.spec.frequency_hz, 100);
        assert_eq!(plan.duration, Some(Duration::from_secs(2)));
        let err = plan_attach(&req(1, Some(200)), 5000, &limits).unwrap_err();
        assert!(
            matches!(err, Error::ResourceExhausted(ref m) if m.contains("--max-frequency")),
            "{err}"
        );
        let long = api::AttachRequest {
            pid: 1,
            duration_ms: 5000,
            ..Default::default()
        };
        let err = plan_attach(&long, 5000, &limits).unwrap_err();
        assert!(
            matches!(err, Error::ResourceExhausted(ref m) if m.contains("--max-duration")),
            "{err}"
        );
        let forever = api::AttachRequest {
            pid: 1,
            duration_ms: u64::MAX,
            ..Default::default()
        };
        assert!(matches!(
            plan_attach(&forever, 5000, &Limits::default()),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn unwind_modes_and_stack_sizes() {
        let with = |unwind: api::Unwind, stack_bytes: u32| {
            let r = api::AttachRequest {
                pid: 1,
                unwind: unwind as i32,
                stack_bytes,
                ..Default::default()
            };
            plan_attach(&r, 5000, &Limits::default()).map(|p| p.spec.stack_bytes)
        };
        assert_eq!(
            with(api::Unwind::Unspecified, 0).unwrap(),
            DEFAULT_STACK_BYTES
        );
        assert_eq!(with(api::Unwind::Auto, 8192).unwrap(), 8192);
        assert_eq!(
            with(api::Unwind::Dwarf, MAX_STACK_BYTES).unwrap(),
            MAX_STACK_BYTES
        );
        assert_eq!(with(api::Unwind::Fp, 0).unwrap(), 0);
        for bad in [
            (api::Unwind::Dwarf, 12),
            (api::Unwind::Dwarf, MAX_STACK_BYTES + 8),
            (api::Unwind::Fp, 8),
        ] {
            let err = with(bad.0, bad.1).unwrap_err().to_string();
            assert!(err.contains("stack_bytes"), "{err}");
        }
    }

    #[test]
    fn pid_zero_and_unknown_event_are_invalid() {
        assert!(matches!(
            plan_attach(&req(0, None), 5000, &Limits::default()),
            Err(Error::InvalidArgument(_))
        ));
        let r = api::AttachRequest {
            pid: 1,
            event: 42,
            ..Default::default()
        };
        assert!(matches!(
            plan_attach(&r, 5000, &Limits::default()),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn missing_process_is_not_found() {
        let err = target_process(u32::MAX - 1).unwrap_err();
        assert!(matches!(err, Error::NotFound(ref m) if m.contains(&(u32::MAX - 1).to_string())));
    }
}
