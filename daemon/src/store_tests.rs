use super::*;
use profd_common::model::{FrameRef, FunctionInfo, ResolvedStack};
use profd_common::views;

/// A fresh, empty directory for one test (the state directory is made
/// inside it, so that its creation is tested too).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("profd-store-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn persist(dir: &Path, retention: Retention) -> Persist {
    Persist {
        dir: dir.join("state"),
        retention,
    }
}

fn open(p: &Persist) -> (Store, Found) {
    Store::open(p).expect("the state directory opens")
}

/// main → leaf ×3 and main ×1 on two threads.
fn profile() -> ResolvedProfile {
    let f = |name: &str| FunctionInfo {
        name: name.into(),
        module: "prog".into(),
        file: "prog.c".into(),
        inlined: false,
    };
    let fr = |function, address| FrameRef {
        function,
        line: 7,
        address,
    };
    ResolvedProfile {
        functions: vec![f("main"), f("leaf")],
        stacks: vec![
            ResolvedStack {
                tid: 10,
                frames: vec![fr(1, 0x1010), fr(0, 0x1100)],
                count: 3,
            },
            ResolvedStack {
                tid: 11,
                frames: vec![fr(0, 0x1104)],
                count: 1,
            },
        ],
        threads: [(10, "prog".to_string()), (11, "worker".to_string())].into(),
        attributed: 4,
        frequency_hz: 999,
        duration_s: 2.0,
        pid: 4242,
        comm: "prog".into(),
    }
}

fn session(id: u64, ended_unix_ms: u64) -> api::Session {
    api::Session {
        id,
        pid: 4242,
        comm: "prog".into(),
        frequency_hz: 999,
        event: api::Event::CpuClock as i32,
        state: api::SessionState::DurationElapsed as i32,
        started_unix_ms: ended_unix_ms - 2000,
        duration_s: 2.0,
        totals: Some(api::Totals {
            attributed: 4,
            discarded: 9,
            lost: 1,
            truncated: 2,
            unsymbolized: 0,
            overflowed: 0,
            ..Default::default()
        }),
        duration_limit_ms: 2000,
        error: String::new(),
        unwind: api::Unwind::Dwarf as i32,
        stack_bytes: 16384,
        owner_uid: 1001,
        owner: "alice".into(),
        ..Default::default()
    }
}

/// Sessions 1..=n, ended a second apart, the last one now.
fn save_n(store: &Store, n: u64) -> Vec<Vec<u64>> {
    let now = now_unix_ms();
    (1..=n)
        .map(|id| {
            store
                .save(&session(id, now - (n - id) * 1000), &profile())
                .unwrap()
        })
        .collect()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

fn ids(found: &Found) -> Vec<u64> {
    found.sessions.iter().map(|s| s.session.id).collect()
}

#[test]
fn saved_sessions_come_back_with_their_figures() {
    let p = persist(&scratch("roundtrip"), Retention::default());
    let (store, found) = open(&p);
    assert!(found.sessions.is_empty());
    assert_eq!(
        fs::metadata(&p.dir).unwrap().permissions().mode() & 0o777,
        0o700,
        "only root reads the profiles"
    );
    let original = session(3, now_unix_ms());
    assert!(store.save(&original, &profile()).unwrap().is_empty());
    assert_eq!(names(&p.dir), ["3.json", "3.pprof"], "no temp file left");
    for f in ["3.json", "3.pprof"] {
        let mode = fs::metadata(p.dir.join(f)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{f}");
    }
    drop(store);

    let (store, found) = open(&p);
    assert_eq!(ids(&found), [3]);
    assert_eq!(found.max_id, 3);
    let back = &found.sessions[0];
    let mut expected = original.clone();
    expected.earlier_run = true;
    assert_eq!(back.session, expected, "the summary, field by field");
    let loaded = store.load(back).unwrap();
    // Function ids are renumbered; everything else is as saved.
    let figures = |p: &ResolvedProfile| {
        views::functions(p)
            .into_iter()
            .map(|f| (f.name, f.module, f.inclusive, f.exclusive, f.exclusive_pct))
            .collect::<Vec<_>>()
    };
    assert_eq!(figures(&loaded), figures(&profile()));
    assert_eq!(loaded.threads, profile().threads);
    assert_eq!(loaded.attributed, 4);
}

#[test]
fn corrupt_truncated_and_orphaned_files_are_moved_aside() {
    let p = persist(&scratch("corrupt"), Retention::default());
    let (store, _) = open(&p);
    save_n(&store, 5);
    drop(store);
    fs::write(p.dir.join("1.json"), b"{ not json").unwrap();
    let pprof2 = p.dir.join("2.pprof");
    let len = fs::metadata(&pprof2).unwrap().len();
    File::options()
        .write(true)
        .open(&pprof2)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    fs::remove_file(p.dir.join("3.json")).unwrap();
    fs::remove_file(p.dir.join("4.pprof")).unwrap();
    fs::write(p.dir.join("7.json.tmp"), b"{").unwrap();
    fs::write(p.dir.join("README"), b"not ours").unwrap();

    let (store, found) = open(&p);
    assert_eq!(ids(&found), [5], "the sound session stays");
    assert_eq!(found.max_id, 5, "ids continue after every id seen");
    assert_eq!(
        names(&p.dir.join(CORRUPT_DIR)),
        [
            "1.json",
            "1.pprof",
            "2.json",
            "2.pprof",
            "3.pprof",
            "4.json",
            "7.json.tmp"
        ]
    );
    assert_eq!(names(&p.dir), ["5.json", "5.pprof", "README", CORRUPT_DIR]);
    assert!(store.load(&found.sessions[0]).is_ok());

    // The same names again: moved aside under new names, nothing lost.
    drop(store);
    fs::write(p.dir.join("1.json"), b"[]").unwrap();
    fs::write(p.dir.join("1.pprof"), b"").unwrap();
    let (_, found) = open(&p);
    assert_eq!(ids(&found), [5]);
    let corrupt = names(&p.dir.join(CORRUPT_DIR));
    assert!(
        corrupt.contains(&"1.json.1".to_string()) && corrupt.contains(&"1.pprof.1".to_string()),
        "{corrupt:?}"
    );
}

#[test]
fn a_profile_damaged_after_start_is_found_when_loaded() {
    let p = persist(&scratch("damaged"), Retention::default());
    let (store, _) = open(&p);
    save_n(&store, 2);
    drop(store);
    let (store, found) = open(&p);
    // Same size and gzip header, other bytes: only the checksum tells.
    let path = p.dir.join("1.pprof");
    let mut bytes = fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    fs::write(&path, bytes).unwrap();
    let err = store.load(&found.sessions[0]).unwrap_err();
    assert!(
        matches!(err, LoadError::Corrupt(ref m) if m.contains("SHA-256")),
        "{err}"
    );
    store.discard(1, &err.to_string());
    assert_eq!(names(&p.dir.join(CORRUPT_DIR)), ["1.json", "1.pprof"]);
    fs::remove_file(p.dir.join("2.pprof")).unwrap();
    assert!(matches!(
        store.load(&found.sessions[1]),
        Err(LoadError::Gone)
    ));
}

#[test]
fn retention_by_count_deletes_the_oldest() {
    let retention = Retention {
        max_sessions: 2,
        ..Retention::default()
    };
    let p = persist(&scratch("count"), retention);
    let (store, _) = open(&p);
    let deleted = save_n(&store, 4);
    assert_eq!(deleted, [vec![], vec![], vec![1], vec![2]]);
    assert_eq!(names(&p.dir), ["3.json", "3.pprof", "4.json", "4.pprof"]);
    drop(store);

    // At start too, with a lower limit.
    let p1 = Persist {
        retention: Retention {
            max_sessions: 1,
            ..Retention::default()
        },
        ..p
    };
    let (_, found) = open(&p1);
    assert_eq!(ids(&found), [4]);
    assert_eq!(found.max_id, 4);
    assert_eq!(names(&p1.dir), ["4.json", "4.pprof"]);
}

#[test]
fn retention_by_age_deletes_sessions_that_ended_long_ago() {
    let p = persist(&scratch("age"), Retention::default());
    let (store, _) = open(&p);
    let day = 24 * 3600 * 1000;
    let now = now_unix_ms();
    let deleted = store.save(&session(1, now - 40 * day), &profile()).unwrap();
    assert_eq!(deleted, [1], "older than 30 days: deleted at once");
    assert!(store
        .save(&session(2, now - 10 * day), &profile())
        .unwrap()
        .is_empty());
    assert!(store.save(&session(3, now), &profile()).unwrap().is_empty());
    assert_eq!(names(&p.dir), ["2.json", "2.pprof", "3.json", "3.pprof"]);
    drop(store);
    let p = Persist {
        retention: Retention {
            max_age: Duration::from_secs(5 * 24 * 3600),
            ..Retention::default()
        },
        ..p
    };
    let (_, found) = open(&p);
    assert_eq!(ids(&found), [3]);
}

#[test]
fn retention_by_bytes_deletes_the_oldest() {
    let p = persist(&scratch("bytes"), Retention::default());
    let (store, _) = open(&p);
    save_n(&store, 1);
    let one: u64 = ["1.json", "1.pprof"]
        .iter()
        .map(|f| fs::metadata(p.dir.join(f)).unwrap().len())
        .sum();
    drop(store);
    let p = Persist {
        retention: Retention {
            max_bytes: one * 5 / 2,
            ..Retention::default()
        },
        ..p
    };
    let (store, found) = open(&p);
    assert_eq!(ids(&found), [1]);
    let now = now_unix_ms();
    for id in 2..=4 {
        store
            .save(&session(id, now + id * 1000), &profile())
            .unwrap();
    }
    assert_eq!(names(&p.dir), ["3.json", "3.pprof", "4.json", "4.pprof"]);
}

#[test]
fn victims_are_chosen_oldest_first() {
    let e = |ended_unix_ms, bytes| Entry {
        ended_unix_ms,
        bytes,
    };
    // Ids out of age order: age decides.
    let entries = BTreeMap::from([(1, e(5000, 10)), (2, e(1000, 10)), (3, e(3000, 10))]);
    let r = |max_sessions, max_age_s, max_bytes| Retention {
        max_sessions,
        max_age: Duration::from_secs(max_age_s),
        max_bytes,
    };
    assert_eq!(victims(&entries, &r(3, 100, 30), 6000), Vec::<u64>::new());
    assert_eq!(victims(&entries, &r(2, 100, 30), 6000), [2]);
    assert_eq!(victims(&entries, &r(3, 100, 15), 6000), [2, 3]);
    assert_eq!(victims(&entries, &r(3, 4, 30), 6000), [2]);
    assert_eq!(victims(&entries, &r(3, 0, 30), 6000), [2, 3, 1]);
}

#[test]
fn sizes_take_binary_suffixes() {
    assert_eq!(parse_bytes("1073741824"), Ok(1 << 30));
    assert_eq!(parse_bytes("512K"), Ok(512 << 10));
    assert_eq!(parse_bytes("100M"), Ok(100 << 20));
    assert_eq!(parse_bytes("1G"), Ok(1 << 30));
    assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
    assert_eq!(parse_bytes("3gb"), Ok(3 << 30));
    assert!(parse_bytes("1.5G").is_err());
    assert!(parse_bytes("G").is_err());
    assert!(parse_bytes("12X").is_err());
    assert!(parse_bytes("99999999999T").is_err());
}
