//! Continuous profiling: every selected process on the host sampled at a low
//! frequency with no client attached, cut into windows labelled by service,
//! kept as local history, answered by queries and sent to the backends
//! fleets run (`sinks`).
pub mod decode;
pub mod encode;
pub mod files;
pub mod history;
pub mod merge;
pub mod pods;
pub mod pressure;
pub mod profiler;
pub mod service;
pub mod sinks;

use std::time::Duration;

/// The `[continuous]` settings, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The host name windows carry.
    pub host: String,
    /// Samples per second on each CPU.
    pub frequency_hz: u32,
    /// Bytes of user stack each sample copies (0: frame-pointer call
    /// chains); memory pressure may drop the copies for a while.
    pub stack_bytes: u32,
    /// The span of one window.
    pub window: Duration,
    /// History kept: at most this many bytes, and windows at most this old.
    pub retention_bytes: u64,
    pub retention_age: Duration,
    /// The sampling schedule; None: always on.
    pub schedule: Option<Schedule>,
    /// Which processes are profiled; none = every process.
    pub select: Vec<service::Selector>,
    /// Where the kubelet's `pods/` and `containers/` log directories are,
    /// which name the pods processes run in.
    pub kubelet_logs: std::path::PathBuf,
}

/// The sampling schedule (`continuous.schedule`): in slots of `period`,
/// this host profiles when its draw for the slot is below `fraction` (see
/// [`profd_common::schedule`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// The share of hosts on in a slot, in (0, 1).
    pub fraction: f64,
    /// The length of a slot, whole windows.
    pub period: Duration,
}

impl Schedule {
    /// The slot `t` lies in.
    pub fn slot(&self, t: std::time::SystemTime) -> u64 {
        let unix_s = t
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        profd_common::schedule::slot_of(unix_s, self.period.as_secs())
    }

    /// Whether `host` profiles in the slot `t` lies in.
    pub fn on(&self, host: &str, t: std::time::SystemTime) -> bool {
        profd_common::schedule::is_on(host, self.slot(t), self.fraction)
    }

    /// What a window starting at `start` says of the schedule.
    pub fn of_window(
        &self,
        host: &str,
        start: std::time::SystemTime,
    ) -> profd_common::api::WindowSchedule {
        profd_common::api::WindowSchedule {
            fraction: self.fraction,
            period_s: self.period.as_secs(),
            slot: self.slot(start),
            on: self.on(host, start),
        }
    }
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            host: history::host_name(),
            frequency_hz: DEFAULT_FREQUENCY_HZ,
            stack_bytes: crate::sessions::registry::DEFAULT_STACK_BYTES,
            window: Duration::from_secs(10),
            retention_bytes: 256 << 20,
            retention_age: Duration::from_secs(7 * 24 * 3600),
            schedule: None,
            select: Vec::new(),
            kubelet_logs: pods::DEFAULT_ROOT.into(),
        }
    }
}

/// 19 Hz: prime, so the timer does not beat with periodic work on a round
/// period, and low enough to leave on everywhere (see docs/continuous.md).
pub const DEFAULT_FREQUENCY_HZ: u32 = 19;
