//! The metadata files `<id>.json` of format 1, read (never written): a
//! session's summary as JSON, enums by their proto names, with its profile
//! file's name, size and SHA-256 in hex. A state directory may hold these
//! next to `<id>.session` files; they are read in place.
use super::record::ProfileFile;
use profd_common::api;
use serde::Deserialize;

/// The only format version of these files.
const FORMAT_VERSION: u32 = 1;

/// Why a `<id>.json` file does not hold a session.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unusable {
    #[error("not valid metadata: {0}")]
    Json(#[source] serde_json::Error),
    #[error("format version {0} (this daemon reads {FORMAT_VERSION})")]
    Format(u32),
    /// It names another profile file than `<id>.pprof`.
    #[error("its profile is {named:?}, not {expected:?}")]
    Profile { named: String, expected: String },
    /// An enum field (`what`) with a name that is none of its.
    #[error("unknown {what} {value:?}")]
    Unknown { what: &'static str, value: String },
}

/// The metadata file `<id>.json`.
#[derive(Debug, Deserialize)]
struct Meta {
    format: u32,
    id: u64,
    pid: u32,
    comm: String,
    /// The proto enum's name, e.g. `SESSION_STATE_STOPPED`.
    state: String,
    #[serde(default)]
    error: String,
    started_unix_ms: u64,
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
    processes: Vec<Process>,
    /// The proto enum's name, e.g. `SCOPE_TARGET` (absent: system-wide).
    #[serde(default = "system_wide")]
    scope: String,
    totals: Totals,
    profile: Profile,
}

fn system_wide() -> String {
    api::Scope::SystemWide.as_str_name().to_string()
}

#[derive(Debug, Deserialize)]
struct Process {
    pid: u32,
    ppid: u32,
    comm: String,
    samples: u64,
    exited: bool,
}

#[derive(Debug, Deserialize)]
struct Totals {
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

#[derive(Debug, Deserialize)]
struct Profile {
    file: String,
    bytes: u64,
    /// Lowercase hex.
    sha256: String,
}

/// The session and its profile file `<id>.pprof`, from the text of
/// `<id>.json`.
pub(super) fn decode(
    text: &[u8],
    pprof_name: &str,
) -> Result<(api::Session, ProfileFile), Unusable> {
    let meta: Meta = serde_json::from_slice(text).map_err(Unusable::Json)?;
    if meta.format != FORMAT_VERSION {
        return Err(Unusable::Format(meta.format));
    }
    if meta.profile.file != pprof_name {
        return Err(Unusable::Profile {
            named: meta.profile.file,
            expected: pprof_name.into(),
        });
    }
    let name = |what: &'static str, value: &str, parsed: Option<i32>| {
        parsed.ok_or_else(|| Unusable::Unknown {
            what,
            value: value.into(),
        })
    };
    let state = name(
        "state",
        &meta.state,
        api::SessionState::from_str_name(&meta.state).map(|s| s as i32),
    )?;
    let event = name(
        "event",
        &meta.event,
        api::Event::from_str_name(&meta.event).map(|e| e as i32),
    )?;
    let unwind = name(
        "unwind",
        &meta.unwind,
        api::Unwind::from_str_name(&meta.unwind).map(|u| u as i32),
    )?;
    let scope = name(
        "scope",
        &meta.scope,
        api::Scope::from_str_name(&meta.scope).map(|s| s as i32),
    )?;
    let t = meta.totals;
    let session = api::Session {
        id: meta.id,
        pid: meta.pid,
        comm: meta.comm,
        frequency_hz: meta.frequency_hz,
        event,
        state,
        started_unix_ms: meta.started_unix_ms,
        duration_s: meta.duration_s,
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
            time: None,
            python_unreadable: 0,
            ruby_unreadable: 0,
            perl_unreadable: 0,
            truncated_copy_ended: 0,
        }),
        duration_limit_ms: meta.duration_limit_ms,
        error: meta.error,
        unwind,
        stack_bytes: meta.stack_bytes,
        owner_uid: meta.owner_uid,
        owner: meta.owner,
        earlier_run: false,
        scope,
        mode: api::Mode::Cpu as i32,
        timeline: false,
        timeline_dropped: 0,
        save_state: api::SaveState::Saved as i32,
        save_error: String::new(),
        children: meta.children,
        processes: meta
            .processes
            .into_iter()
            .map(|p| api::ProcessSamples {
                pid: p.pid,
                ppid: p.ppid,
                comm: p.comm,
                samples: p.samples,
                exited: p.exited,
            })
            .collect(),
    };
    let profile = ProfileFile {
        bytes: meta.profile.bytes,
        // A digest that is not hex matches no profile: found when loaded.
        sha256: unhex(&meta.profile.sha256).unwrap_or_default(),
    };
    Ok((session, profile))
}

/// The bytes that hex `s` spells.
fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}
