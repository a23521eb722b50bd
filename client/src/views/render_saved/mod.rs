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
mod tests {
    use super::*;
    use profd_common::api::OwnerRetention;

    #[test]
    fn retention_names_the_rule_and_each_owner() {
        let r = RetentionStatus {
            state_dir: "/var/lib/profd".into(),
            max_sessions: 25,
            max_bytes: 1 << 30,
            max_age_s: 30 * 86400,
            min_sessions_per_owner: 1,
            owners: 2,
            share_sessions: 12,
            share_bytes: 1 << 29,
            sessions: 25,
            bytes: 2048,
            by_owner: vec![OwnerRetention {
                owner_uid: 1002,
                owner: "bob".into(),
                sessions: 24,
                bytes: 2000,
                evicted_sessions: 6,
                evicted_bytes: 0,
                expired: 0,
            }],
        };
        let lines = retention_lines(&r);
        assert_eq!(
            lines[0].1,
            "25 sessions, 2.0 KiB in /var/lib/profd; limits 25 sessions, 1.0 GiB, 30 days; \
             fair share: 12 sessions and 512.0 MiB each of 2 owners (at least 1 session), the \
             oldest of the owner most over their share go first"
        );
        assert_eq!(
            lines[1],
            (
                "kept for bob".to_string(),
                "24 sessions, 2.0 KiB; evicted 6 over their share of sessions, 0 of bytes, 0 \
                 for age"
                    .to_string()
            )
        );
    }

    #[test]
    fn sessions_not_saved_say_why_and_how_to_keep_them() {
        let s = Session {
            id: 7,
            save_state: SaveState::NotSaved as i32,
            save_error: "cannot write 7.pprof in /s: No space left on device (os error 28)".into(),
            ..Default::default()
        };
        assert_eq!(save_cell(&s), "no");
        let notes = not_saved_notes(&[s, Session::default()]);
        assert_eq!(notes.lines().count(), 1);
        assert!(
            notes.starts_with(
                "session 7 is not saved in the daemon's state directory: cannot write 7.pprof"
            ),
            "{notes}"
        );
        assert!(notes.contains("`profctl export 7 -o FILE`"), "{notes}");
    }
}
