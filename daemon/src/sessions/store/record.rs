//! The metadata file `<id>.session`: a session's summary as the API's own
//! message (`profd.v1.Session`) with the size and SHA-256 of its profile
//! file, encoded with protobuf; and the check of a summary read back. A
//! summary saved while its session ran (a checkpoint) reads back as a
//! failed session: the daemon stopped without saving it. A session is
//! recorded when it starts too, so that a daemon killed before its first
//! checkpoint leaves it as such a failed session.
use profd_common::api;
use prost::Message;

/// The error of a session whose daemon stopped without saving its end.
pub const INTERRUPTED: &str = "the daemon stopped while the session ran (killed or crashed): \
     its profile and totals are those of its last checkpoint";

/// The error of a session whose daemon stopped before its first checkpoint.
pub const INTERRUPTED_AT_START: &str = "the daemon stopped while the session ran (killed or \
     crashed), before its first checkpoint: its profile and totals are those it had when it \
     started";

/// Why a `<id>.session` file does not hold a session that can be kept.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unusable {
    #[error("not a session record: {0}")]
    Decode(#[source] prost::DecodeError),
    #[error("it holds no session")]
    NoSession,
    #[error("it names no profile")]
    NoProfile,
    #[error("state {0} is not a session's state")]
    State(i32),
    /// An enum field (`what`) with a value that is none of its.
    #[error("unknown {what} {value}")]
    Unknown { what: &'static str, value: i32 },
    #[error("duration_s {0} is not a duration")]
    Duration(f64),
}

/// What `<id>.session` holds.
#[derive(Clone, PartialEq, Message)]
pub(super) struct Record {
    /// The session as the API gives it.
    #[prost(message, optional, tag = "1")]
    pub(super) session: Option<api::Session>,
    /// Its profile file `<id>.pprof`.
    #[prost(message, optional, tag = "2")]
    pub(super) profile: Option<ProfileFile>,
    /// Written when the session started (its profile then), not since.
    #[prost(bool, tag = "3")]
    pub(super) at_start: bool,
}

/// The profile file `<id>.pprof` as written.
#[derive(Clone, PartialEq, Message)]
pub(super) struct ProfileFile {
    /// Its size.
    #[prost(uint64, tag = "1")]
    pub(super) bytes: u64,
    /// The SHA-256 of its bytes (32 bytes).
    #[prost(bytes = "vec", tag = "2")]
    pub(super) sha256: Vec<u8>,
}

impl Record {
    /// The session (as [`checked`] reads it back) and its profile file,
    /// from the bytes of `<id>.session`.
    pub(super) fn decode_parts(bytes: &[u8]) -> Result<(api::Session, ProfileFile), Unusable> {
        let record = Record::decode(bytes).map_err(Unusable::Decode)?;
        match (record.session, record.profile) {
            (Some(session), Some(profile)) => Ok((checked(session, record.at_start)?, profile)),
            (None, _) => Err(Unusable::NoSession),
            (_, None) => Err(Unusable::NoProfile),
        }
    }
}

/// The summary `s` read back, checked, as a session of an earlier run
/// (`at_start`: recorded when it started, not since).
pub(super) fn checked(mut s: api::Session, at_start: bool) -> Result<api::Session, Unusable> {
    match api::SessionState::try_from(s.state) {
        // A checkpoint of a running session: the daemon stopped (killed,
        // crashed) without saving the session's end.
        Ok(api::SessionState::Running) => {
            s.state = api::SessionState::Failed as i32;
            s.error = match at_start {
                true => INTERRUPTED_AT_START,
                false => INTERRUPTED,
            }
            .into();
        }
        Ok(api::SessionState::Unspecified) | Err(_) => return Err(Unusable::State(s.state)),
        Ok(_) => {}
    }
    let unknown = |what, value| move |_| Unusable::Unknown { what, value };
    api::Event::try_from(s.event).map_err(unknown("event", s.event))?;
    api::Unwind::try_from(s.unwind).map_err(unknown("unwind", s.unwind))?;
    api::Scope::try_from(s.scope).map_err(unknown("scope", s.scope))?;
    api::Mode::try_from(s.mode).map_err(unknown("mode", s.mode))?;
    if !s.duration_s.is_finite() || s.duration_s < 0.0 {
        return Err(Unusable::Duration(s.duration_s));
    }
    s.earlier_run = true;
    s.save_state = api::SaveState::Saved as i32;
    s.save_error.clear();
    Ok(s)
}

/// When a session ended, from its start and length.
pub(super) fn ended_unix_ms(s: &api::Session) -> u64 {
    s.started_unix_ms
        .saturating_add((s.duration_s.max(0.0) * 1000.0) as u64)
}
