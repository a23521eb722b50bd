//! Unit tests of `store`: the retention shared between owners, and the
//! record of a session as it starts.
use super::tests::{ids, names, open, persist, profile, scratch, session};
use super::*;

/// Session `id` of `owner` (uid, name), ended at `ended_unix_ms`.
fn of(id: u64, ended_unix_ms: u64, (uid, name): (u32, &str)) -> api::Session {
    api::Session {
        owner_uid: uid,
        owner: name.into(),
        ..session(id, ended_unix_ms)
    }
}

const ALICE: (u32, &str) = (1001, "alice");
const BOB: (u32, &str) = (1002, "bob");

#[test]
fn another_owners_saves_never_delete_an_owners_only_session() {
    let p = persist(
        &scratch("owners"),
        Retention {
            max_sessions: 5,
            ..Retention::default()
        },
    );
    let (store, _) = open(&p);
    let now = now_unix_ms();
    store.save(&of(1, now - 60_000, ALICE), &profile()).unwrap();
    let mut deleted = Vec::new();
    for id in 2..=20 {
        deleted.extend(
            store
                .save(&of(id, now - 60_000 + id * 1000, BOB), &profile())
                .unwrap(),
        );
    }
    assert_eq!(deleted, (2..=16).collect::<Vec<u64>>(), "bob's oldest");
    assert!(names(&p.dir).contains(&"1.session".to_string()));
    let report = store.report();
    assert_eq!(report.share_sessions(), 2, "5 between 2 owners");
    let bob = &report.owners[&BOB.0];
    assert_eq!((bob.sessions, bob.evicted.sessions), (4, 15));
    assert_eq!(report.owners[&ALICE.0].sessions, 1);
    assert_eq!(report.owners[&ALICE.0].evicted, share::Evicted::default());
    drop(store);

    // At start too: bob's go, alice's stays.
    let p = Persist {
        retention: Retention {
            max_sessions: 2,
            ..Retention::default()
        },
        ..p
    };
    let (store, found) = open(&p);
    assert_eq!(ids(&found), [1, 20]);
    assert_eq!(store.report().owners[&BOB.0].evicted.sessions, 3);
}

#[test]
fn a_session_recorded_as_it_started_comes_back_failed_saying_so() {
    let p = persist(&scratch("start-record"), Retention::default());
    let (store, _) = open(&p);
    let mut running = session(6, now_unix_ms());
    running.state = api::SessionState::Running as i32;
    running.duration_s = 0.0;
    store
        .save_start(&running, &ResolvedProfile::default())
        .unwrap();
    let mut later = session(7, now_unix_ms());
    later.state = api::SessionState::Running as i32;
    store
        .save_start(&later, &ResolvedProfile::default())
        .unwrap();
    // A checkpoint replaces the start record.
    later.duration_s = 1.0;
    store.save(&later, &profile()).unwrap();
    drop(store); // killed: 6 before its first checkpoint, 7 after
    let (store, found) = open(&p);
    assert_eq!(ids(&found), [6, 7]);
    let (six, seven) = (&found.sessions[0].session, &found.sessions[1].session);
    assert_eq!(six.state(), api::SessionState::Failed);
    assert!(
        six.error.contains("before its first checkpoint"),
        "{}",
        six.error
    );
    assert_eq!(six.save_state(), api::SaveState::Saved);
    assert!(store.load(&found.sessions[0]).unwrap().stacks.is_empty());
    assert_eq!(seven.state(), api::SessionState::Failed);
    assert!(
        seven.error.contains("its last checkpoint"),
        "{}",
        seven.error
    );
    assert_eq!(store.load(&found.sessions[1]).unwrap().stacks.len(), 2);
}
