//! Unit tests of `share`: who loses sessions when a limit is exceeded.
use super::*;

const ALICE: u32 = 1001;
const BOB: u32 = 1002;
const CAROL: u32 = 1003;

fn k(id: u64, owner_uid: u32, ended_unix_ms: u64, bytes: u64) -> Kept {
    Kept {
        id,
        owner_uid,
        ended_unix_ms,
        bytes,
    }
}

fn r(max_sessions: usize, max_age_s: u64, max_bytes: u64) -> Retention {
    Retention {
        max_sessions,
        max_age: Duration::from_secs(max_age_s),
        max_bytes,
    }
}

fn ids(v: &[Victim]) -> Vec<u64> {
    v.iter().map(|v| v.id).collect()
}

#[test]
fn one_owner_loses_its_oldest_first() {
    // Ids out of age order: age decides.
    let kept = [
        k(1, ALICE, 5000, 10),
        k(2, ALICE, 1000, 10),
        k(3, ALICE, 3000, 10),
    ];
    assert_eq!(
        ids(&victims(&kept, &r(3, 100, 30), 6000)),
        Vec::<u64>::new()
    );
    assert_eq!(ids(&victims(&kept, &r(2, 100, 30), 6000)), [2]);
    assert_eq!(ids(&victims(&kept, &r(3, 100, 15), 6000)), [2, 3]);
    assert_eq!(ids(&victims(&kept, &r(3, 4, 30), 6000)), [2]);
    assert_eq!(ids(&victims(&kept, &r(3, 0, 30), 6000)), [2, 3, 1]);
}

#[test]
fn an_owner_within_their_share_loses_nothing_to_another() {
    // Alice's one session is the oldest; bob saves 30 after it.
    let mut kept = vec![k(1, ALICE, 1000, 10)];
    kept.extend((2..=31).map(|id| k(id, BOB, 1000 + id * 10, 10)));
    let v = victims(&kept, &r(25, 1_000_000, u64::MAX), 2000);
    assert_eq!(v.len(), 6, "31 kept, 25 allowed");
    assert!(v.iter().all(|v| v.owner_uid == BOB), "{v:?}");
    assert!(v.iter().all(|v| v.reason == Reason::Sessions), "{v:?}");
    assert_eq!(ids(&v), [2, 3, 4, 5, 6, 7], "bob's oldest first");
    // And by bytes: bob's 30 sessions of 10 bytes against 100 bytes.
    let v = victims(&kept, &r(1000, 1_000_000, 100), 2000);
    assert!(v.iter().all(|v| v.owner_uid == BOB), "{v:?}");
    assert!(v.iter().all(|v| v.reason == Reason::Bytes), "{v:?}");
    assert_eq!(v.len(), 21, "310 bytes kept, 100 allowed: 90 left to bob");
}

#[test]
fn the_owner_most_over_their_share_goes_first() {
    // Share 4 each of 12: bob holds 7 (3 over), carol 5 (1 over), alice 2.
    let mut kept = Vec::new();
    let mut id = 0;
    for (owner, n) in [(ALICE, 2), (BOB, 7), (CAROL, 5)] {
        for _ in 0..n {
            id += 1;
            kept.push(k(id, owner, 100 + id, 1));
        }
    }
    let v = victims(&kept, &r(12, 1_000_000, u64::MAX), 1000);
    let owners: Vec<u32> = v.iter().map(|v| v.owner_uid).collect();
    assert_eq!(
        owners,
        [BOB, BOB],
        "14 kept, 12 allowed: bob is 3 over, carol 1"
    );
    assert_eq!(ids(&v), [3, 4]);
    let v = victims(&kept, &r(10, 1_000_000, u64::MAX), 1000);
    let owners: Vec<u32> = v.iter().map(|v| v.owner_uid).collect();
    // Share 3: bob 4 over, carol 2; at 2 and 2 the tie goes to the owner
    // with the older session (bob).
    assert_eq!(owners, [BOB, BOB, BOB, CAROL]);
}

#[test]
fn more_owners_than_sessions_keep_one_each() {
    let kept = [
        k(1, ALICE, 100, 1),
        k(2, BOB, 200, 1),
        k(3, CAROL, 300, 1),
        k(4, CAROL, 400, 1),
    ];
    let v = victims(&kept, &r(2, 1_000_000, u64::MAX), 1000);
    assert_eq!(ids(&v), [3], "carol keeps her newest, the others theirs");
}

#[test]
fn age_applies_to_every_owner() {
    let kept = [k(1, ALICE, 100, 1), k(2, BOB, 5000, 1)];
    let v = victims(&kept, &r(10, 1, u64::MAX), 5500);
    assert_eq!(
        v,
        [Victim {
            id: 1,
            owner_uid: ALICE,
            reason: Reason::Age
        }]
    );
    assert!(victims(&kept, &in_memory(10), u64::MAX).is_empty());
}

#[test]
fn the_report_shows_shares_and_evictions_by_owner() {
    let ledger = Ledger::default();
    ledger.count(BOB, "bob", Reason::Sessions);
    ledger.count(BOB, "bob", Reason::Sessions);
    ledger.count(CAROL, "carol", Reason::Age);
    let kept = [
        (ALICE, "alice".to_string(), 100),
        (BOB, "bob".to_string(), 10),
        (BOB, "bob".to_string(), 10),
    ];
    let report = Report::new(None, r(25, 86400, 1000), kept, &ledger);
    assert_eq!(report.present(), 2, "carol keeps nothing now");
    let api = report.to_api(|_| true);
    assert_eq!((api.share_sessions, api.share_bytes), (12, 500));
    assert_eq!((api.sessions, api.bytes, api.owners), (3, 120, 2));
    let bob = api.by_owner.iter().find(|o| o.owner_uid == BOB).unwrap();
    assert_eq!((bob.sessions, bob.evicted_sessions), (2, 2));
    let carol = api.by_owner.iter().find(|o| o.owner_uid == CAROL).unwrap();
    assert_eq!((carol.owner.as_str(), carol.expired), ("carol", 1));
    let own = report.to_api(|uid| uid == ALICE);
    assert_eq!(own.by_owner.len(), 1, "a user sees their own row");
    assert_eq!(own.sessions, 3, "and the totals");
}
