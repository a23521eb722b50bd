//! Unit tests of `render_saved`.
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
