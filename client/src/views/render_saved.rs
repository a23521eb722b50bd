//! How profctl shows what the daemon keeps: whether a session is saved (the
//! sessions table's SAVED cell and its notes, the message of a profile that
//! was not saved) and the retention rule of `profctl info`.
use std::fmt::Write as _;

use profd_common::api::{RetentionStatus, SaveState, Session};

use crate::views::units::bytes_text;

/// The sessions table's SAVED cell: `yes`, `no`, `pending`, `memory`
/// (the daemon keeps no state directory) or `-` (not said).
pub fn save_cell(s: &Session) -> &'static str {
    match s.save_state() {
        SaveState::Saved => "yes",
        SaveState::NotSaved => "no",
        SaveState::Pending => "pending",
        SaveState::MemoryOnly => "memory",
        SaveState::Unspecified => "-",
    }
}

/// The sessions table's notes on sessions not saved: one line each, why,
/// and how to keep a copy.
pub fn not_saved_notes(sessions: &[Session]) -> String {
    let mut out = String::new();
    for s in sessions
        .iter()
        .filter(|s| s.save_state() == SaveState::NotSaved)
    {
        let _ = writeln!(out, "{}", not_saved_line(s));
    }
    out
}

/// That `s` is not saved: why, that the daemon holds it, how to keep a copy.
pub fn not_saved_line(s: &Session) -> String {
    let id = s.id;
    format!(
        "session {id} is not saved in the daemon's state directory: {}; the daemon holds it in \
         memory and writes it again every checkpoint interval (it is lost if the daemon stops \
         first): keep a copy with `profctl export {id} -o FILE`",
        s.save_error.trim_end_matches('.')
    )
}

/// `profctl info`'s retention lines: the limits and shares, then one line
/// per owner shown.
pub fn retention_lines(r: &RetentionStatus) -> Vec<(String, String)> {
    let plural = |n: u64, one: &str| format!("{n} {one}{}", if n == 1 { "" } else { "s" });
    let kept = match r.state_dir.as_str() {
        "" => format!(
            "{} in memory (no state directory)",
            plural(r.sessions, "session")
        ),
        dir => format!(
            "{}, {} in {dir}",
            plural(r.sessions, "session"),
            bytes_text(r.bytes)
        ),
    };
    let mut limits = vec![plural(r.max_sessions, "session")];
    let mut share = vec![plural(r.share_sessions, "session")];
    if r.max_bytes > 0 {
        limits.push(bytes_text(r.max_bytes));
        share.push(bytes_text(r.share_bytes));
    }
    if r.max_age_s > 0 {
        limits.push(format!("{} days", r.max_age_s as f64 / 86400.0));
    }
    let mut lines = vec![(
        "retention".to_string(),
        format!(
            "{kept}; limits {}; fair share: {} each of {} (at least {}), the oldest of \
             the owner most over their share go first",
            limits.join(", "),
            share.join(" and "),
            plural(u64::from(r.owners), "owner"),
            plural(r.min_sessions_per_owner, "session"),
        ),
    )];
    for o in &r.by_owner {
        let name = match o.owner.as_str() {
            "" => o.owner_uid.to_string(),
            name => name.to_string(),
        };
        let mut kept = plural(o.sessions, "session");
        if o.bytes > 0 {
            let _ = write!(kept, ", {}", bytes_text(o.bytes));
        }
        lines.push((
            format!("kept for {name}"),
            format!(
                "{kept}; evicted {} over their share of sessions, {} of bytes, {} for age",
                o.evicted_sessions, o.evicted_bytes, o.expired
            ),
        ));
    }
    lines
}

#[cfg(test)]
#[path = "render_saved_tests.rs"]
mod tests;
