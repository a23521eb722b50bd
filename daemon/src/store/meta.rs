//! The metadata file `<id>.json`: a session's summary field by field, and
//! the check of one read back. A summary saved while its session ran (a
//! checkpoint) reads back as a failed session: the daemon stopped without
//! saving it.
use profd_common::api;
use serde::{Deserialize, Serialize};

/// The version of the metadata files this daemon writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// The error of a session whose daemon stopped without saving its end.
pub const INTERRUPTED: &str = "the daemon stopped while the session ran (killed or crashed): \
     its profile and totals are those of its last checkpoint";

/// The profile file as the metadata describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct ProfileFile {
    /// `<id>.pprof`, in the state directory.
    pub(super) file: String,
    pub(super) bytes: u64,
    /// Lowercase hex.
    pub(super) sha256: String,
}

/// The metadata file `<id>.json`: the session's summary, field by field.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Meta {
    pub(super) format: u32,
    pub(super) id: u64,
    pid: u32,
    comm: String,
    /// The proto enum's name, e.g. `SESSION_STATE_STOPPED`.
    state: String,
    #[serde(default)]
    error: String,
    started_unix_ms: u64,
    pub(super) ended_unix_ms: u64,
    duration_s: f64,
    duration_limit_ms: u64,
    /// The proto enum's name, e.g. `EVENT_CPU_CLOCK`.
    event: String,
    frequency_hz: u32,
    /// The proto enum's name, e.g. `UNWIND_DWARF`.
    unwind: String,
    stack_bytes: u32,
    owner_uid: u32,
    owner: String,
    #[serde(default)]
    children: bool,
    #[serde(default)]
    processes: Vec<MetaProcess>,
    /// The proto enum's name, e.g. `SCOPE_TARGET` (summaries written before
    /// sessions had a scope were all system-wide).
    #[serde(default = "system_wide")]
    scope: String,
    totals: MetaTotals,
    pub(super) profile: ProfileFile,
}

fn system_wide() -> String {
    api::Scope::SystemWide.as_str_name().to_string()
}

/// One process of the session (`Session.processes`).
#[derive(Debug, Serialize, Deserialize)]
struct MetaProcess {
    pid: u32,
    ppid: u32,
    comm: String,
    samples: u64,
    exited: bool,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct MetaTotals {
    attributed: u64,
    discarded: u64,
    lost: u64,
    truncated: u64,
    unsymbolized: u64,
    overflowed: u64,
    #[serde(default)]
    throttled: u64,
    #[serde(default)]
    unchecked: u64,
    #[serde(default)]
    unsampled: u64,
}

impl Meta {
    pub(super) fn new(s: &api::Session, profile: ProfileFile) -> Meta {
        let t = s.totals.unwrap_or_default();
        Meta {
            format: FORMAT_VERSION,
            id: s.id,
            pid: s.pid,
            comm: s.comm.clone(),
            state: s.state().as_str_name().to_string(),
            error: s.error.clone(),
            started_unix_ms: s.started_unix_ms,
            ended_unix_ms: ended_unix_ms(s),
            duration_s: s.duration_s,
            duration_limit_ms: s.duration_limit_ms,
            event: s.event().as_str_name().to_string(),
            frequency_hz: s.frequency_hz,
            unwind: s.unwind().as_str_name().to_string(),
            stack_bytes: s.stack_bytes,
            owner_uid: s.owner_uid,
            owner: s.owner.clone(),
            children: s.children,
            processes: s
                .processes
                .iter()
                .map(|p| MetaProcess {
                    pid: p.pid,
                    ppid: p.ppid,
                    comm: p.comm.clone(),
                    samples: p.samples,
                    exited: p.exited,
                })
                .collect(),
            scope: s.scope().as_str_name().to_string(),
            totals: MetaTotals {
                attributed: t.attributed,
                discarded: t.discarded,
                lost: t.lost,
                truncated: t.truncated,
                unsymbolized: t.unsymbolized,
                overflowed: t.overflowed,
                throttled: t.throttled,
                unchecked: t.unchecked,
                unsampled: t.unsampled,
            },
            profile,
        }
    }

    /// The summary it holds, checked.
    pub(super) fn session(&self) -> Result<api::Session, String> {
        // A checkpoint of a running session: the daemon stopped (killed,
        // crashed) without saving the session's end.
        let (state, error) = match api::SessionState::from_str_name(&self.state) {
            Some(api::SessionState::Running) => (api::SessionState::Failed, INTERRUPTED.into()),
            Some(api::SessionState::Unspecified) | None => {
                return Err(format!("state {:?} is not a session's state", self.state))
            }
            Some(state) => (state, self.error.clone()),
        };
        let event = api::Event::from_str_name(&self.event)
            .ok_or_else(|| format!("unknown event {:?}", self.event))?;
        let unwind = api::Unwind::from_str_name(&self.unwind)
            .ok_or_else(|| format!("unknown unwind {:?}", self.unwind))?;
        let scope = api::Scope::from_str_name(&self.scope)
            .ok_or_else(|| format!("unknown scope {:?}", self.scope))?;
        if !self.duration_s.is_finite() || self.duration_s < 0.0 {
            return Err(format!("duration_s {} is not a duration", self.duration_s));
        }
        let t = &self.totals;
        Ok(api::Session {
            id: self.id,
            pid: self.pid,
            comm: self.comm.clone(),
            frequency_hz: self.frequency_hz,
            event: event as i32,
            state: state as i32,
            started_unix_ms: self.started_unix_ms,
            duration_s: self.duration_s,
            totals: Some(api::Totals {
                attributed: t.attributed,
                discarded: t.discarded,
                lost: t.lost,
                truncated: t.truncated,
                unsymbolized: t.unsymbolized,
                overflowed: t.overflowed,
                throttled: t.throttled,
                unchecked: t.unchecked,
                unsampled: t.unsampled,
            }),
            duration_limit_ms: self.duration_limit_ms,
            error,
            unwind: unwind as i32,
            stack_bytes: self.stack_bytes,
            owner_uid: self.owner_uid,
            owner: self.owner.clone(),
            earlier_run: true,
            scope: scope as i32,
            children: self.children,
            processes: self
                .processes
                .iter()
                .map(|p| api::ProcessSamples {
                    pid: p.pid,
                    ppid: p.ppid,
                    comm: p.comm.clone(),
                    samples: p.samples,
                    exited: p.exited,
                })
                .collect(),
        })
    }
}

/// When a session ended, from its start and length.
fn ended_unix_ms(s: &api::Session) -> u64 {
    s.started_unix_ms
        .saturating_add((s.duration_s.max(0.0) * 1000.0) as u64)
}
