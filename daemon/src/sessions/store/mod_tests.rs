//! Unit tests of `store`: sessions saved, reloaded and exported as before.
use super::*;
use profd_common::model::{FrameRef, FunctionInfo, ResolvedStack};
use profd_common::views;

/// A fresh, empty directory for one test (the state directory is made
/// inside it, so that its creation is tested too).
pub(super) fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("profd-store-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

pub(super) fn persist(dir: &Path, retention: Retention) -> Persist {
    Persist {
        retention,
        ..Persist::new(dir.join("state"))
    }
}

pub(super) fn open(p: &Persist) -> (Store, Found) {
    Store::open(p).expect("the state directory opens")
}

/// main → leaf ×3 and main ×1 on two threads.
pub(super) fn profile() -> ResolvedProfile {
    let f = |name: &str| FunctionInfo {
        name: name.into(),
        module: "prog".into(),
        file: "prog.c".into(),
        inlined: false,
        origin: None,
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
        thread_pids: Default::default(),
        attributed: 4,
        frequency_hz: 999,
        duration_s: 2.0,
        pid: 4242,
        comm: "prog".into(),
        mode: api::Mode::Cpu,
    }
}

pub(super) fn session(id: u64, ended_unix_ms: u64) -> api::Session {
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

pub(super) fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

pub(super) fn ids(found: &Found) -> Vec<u64> {
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
    assert_eq!(names(&p.dir), ["3.pprof", "3.session"], "no temp file left");
    for f in ["3.pprof", "3.session"] {
        let mode = fs::metadata(p.dir.join(f)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{f}");
    }
    drop(store);

    let (store, found) = open(&p);
    assert_eq!(ids(&found), [3]);
    assert_eq!(found.ids.peek(), 4);
    let back = &found.sessions[0];
    let mut expected = original.clone();
    expected.earlier_run = true;
    expected.save_state = api::SaveState::Saved as i32;
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
    fs::write(p.dir.join("1.session"), b"{ not a record").unwrap();
    let pprof2 = p.dir.join("2.pprof");
    let len = fs::metadata(&pprof2).unwrap().len();
    File::options()
        .write(true)
        .open(&pprof2)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    fs::remove_file(p.dir.join("3.session")).unwrap();
    fs::remove_file(p.dir.join("4.pprof")).unwrap();
    fs::write(p.dir.join("7.session.tmp"), b"{").unwrap();
    fs::write(p.dir.join("README"), b"not ours").unwrap();

    let (store, found) = open(&p);
    assert_eq!(ids(&found), [5], "the sound session stays");
    assert_eq!(
        found.ids.peek(),
        6,
        "without a mark, ids continue after every id seen"
    );
    assert_eq!(
        names(&p.dir.join(CORRUPT_DIR)),
        [
            "1.pprof",
            "1.session",
            "2.pprof",
            "2.session",
            "3.pprof",
            "4.session",
            "7.session.tmp"
        ]
    );
    assert_eq!(
        names(&p.dir),
        ["5.pprof", "5.session", "README", CORRUPT_DIR]
    );
    assert!(store.load(&found.sessions[0]).is_ok());

    // The same names again: moved aside under new names, nothing lost.
    drop(store);
    fs::write(p.dir.join("1.session"), b"[]").unwrap();
    fs::write(p.dir.join("1.pprof"), b"").unwrap();
    let (_, found) = open(&p);
    assert_eq!(ids(&found), [5]);
    let corrupt = names(&p.dir.join(CORRUPT_DIR));
    assert!(
        corrupt.contains(&"1.session.1".to_string()) && corrupt.contains(&"1.pprof.1".to_string()),
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
    assert_eq!(names(&p.dir.join(CORRUPT_DIR)), ["1.pprof", "1.session"]);
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
    assert_eq!(
        names(&p.dir),
        ["3.pprof", "3.session", "4.pprof", "4.session"]
    );
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
    assert_eq!(found.ids.peek(), 5);
    assert_eq!(names(&p1.dir), ["4.pprof", "4.session"]);
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
    assert_eq!(
        names(&p.dir),
        ["2.pprof", "2.session", "3.pprof", "3.session"]
    );
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
    let one: u64 = ["1.pprof", "1.session"]
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
    assert_eq!(
        names(&p.dir),
        ["3.pprof", "3.session", "4.pprof", "4.session"]
    );
}

#[test]
fn victims_of_one_owner_are_chosen_oldest_first() {
    let e = |ended_unix_ms, bytes| Entry {
        ended_unix_ms,
        bytes,
        owner_uid: 1001,
        owner: "alice".into(),
    };
    // Ids out of age order: age decides.
    let entries = BTreeMap::from([(1, e(5000, 10)), (2, e(1000, 10)), (3, e(3000, 10))]);
    let r = |max_sessions, max_age_s, max_bytes| Retention {
        max_sessions,
        max_age: Duration::from_secs(max_age_s),
        max_bytes,
    };
    let ids = |r: Retention| -> Vec<u64> {
        victims(&entries, &r, 6000)
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    };
    assert_eq!(ids(r(3, 100, 30)), Vec::<u64>::new());
    assert_eq!(ids(r(2, 100, 30)), [2]);
    assert_eq!(ids(r(3, 100, 15)), [2, 3]);
    assert_eq!(ids(r(3, 4, 30)), [2]);
    assert_eq!(ids(r(3, 0, 30)), [2, 3, 1]);
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

fn read_files(dir: &Path, names: &[&str]) -> Vec<Vec<u8>> {
    names
        .iter()
        .map(|n| fs::read(dir.join(n)).unwrap())
        .collect()
}

fn mark(dir: &Path) -> u64 {
    fs::read_to_string(dir.join(NEXT_ID_FILE))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn ids_are_reserved_in_the_directory_before_use() {
    let p = persist(&scratch("mark"), Retention::default());
    let (_, mut found) = open(&p);
    assert_eq!(found.ids.take().unwrap(), 1);
    assert!(mark(&p.dir) > 1, "reserved before id 1 was handed out");
    let mut last = 1;
    for _ in 0..40 {
        let id = found.ids.take().unwrap();
        assert_eq!(id, last + 1);
        assert!(mark(&p.dir) > id, "id {id} handed out beyond the mark");
        last = id;
    }
    // Killed: nothing saved, nothing given back; no id handed out before
    // comes again.
    drop(found);
    let (_, mut found) = open(&p);
    let id = found.ids.take().unwrap();
    assert!(id > last, "id {id} again after {last}");
    // Stopped cleanly: the ids reserved and not used are given back.
    let next = found.ids.peek();
    found.ids.release().unwrap();
    drop(found);
    let (_, found) = open(&p);
    assert_eq!(found.ids.peek(), next);
}

#[test]
fn ids_end_without_wrapping() {
    let p = persist(&scratch("exhausted"), Retention::default());
    drop(open(&p));
    fs::write(p.dir.join(NEXT_ID_FILE), format!("{MAX_ID}\n")).unwrap();
    let (_, mut found) = open(&p);
    assert_eq!(found.ids.take().unwrap(), MAX_ID);
    for _ in 0..2 {
        let err = found.ids.take().unwrap_err();
        assert!(matches!(err, IdError::Exhausted), "{err}");
        assert!(err.to_string().contains("--state-dir"), "{err}");
    }
    drop(found);
    let (_, mut found) = open(&p);
    assert!(matches!(found.ids.take(), Err(IdError::Exhausted)));

    // A damaged mark is moved aside; ids go on after the sessions found.
    let (store, _) = open(&p);
    store.save(&session(7, now_unix_ms()), &profile()).unwrap();
    fs::write(p.dir.join(NEXT_ID_FILE), b"12x\n").unwrap();
    let (_, found) = open(&p);
    assert_eq!(found.ids.peek(), 8);
    assert_eq!(names(&p.dir.join(CORRUPT_DIR)), [NEXT_ID_FILE]);
}

#[test]
fn files_named_after_ids_never_handed_out_are_moved_aside_and_ignored() {
    let p = persist(&scratch("huge-id"), Retention::default());
    let (store, mut found) = open(&p);
    let id = found.ids.take().unwrap();
    store.save(&session(id, now_unix_ms()), &profile()).unwrap();
    drop((store, found));
    let strays = [
        "0.session",
        "18446744073709551615.pprof",
        "9007199254740992.pprof",
        "99999999999999999999999.json",
    ];
    for with_mark in [true, false] {
        if !with_mark {
            fs::remove_file(p.dir.join(NEXT_ID_FILE)).unwrap();
            fs::remove_dir_all(p.dir.join(CORRUPT_DIR)).unwrap();
        }
        for stray in strays {
            fs::write(p.dir.join(stray), b"stray").unwrap();
        }
        let (_, mut found) = open(&p);
        assert_eq!(ids(&found), [1], "with a mark: {with_mark}");
        assert_eq!(names(&p.dir.join(CORRUPT_DIR)), strays);
        let next = found.ids.take().unwrap();
        assert!(
            (2..=1 + 16).contains(&next),
            "next id {next} (with a mark: {with_mark})"
        );
    }
}

#[test]
fn a_save_never_replaces_another_sessions_files() {
    let p = persist(&scratch("no-replace"), Retention::default());
    let (store, _) = open(&p);
    let now = now_unix_ms();
    store.save(&session(1, now), &profile()).unwrap();
    let files = ["1.pprof", "1.session"];
    let before = read_files(&p.dir, &files);
    // Another store on the directory, as if id 1 were handed out again.
    let (other, _) = open(&p);
    let mut intruder = session(1, now + 5000);
    intruder.owner_uid = 1002;
    intruder.owner = "mallory".into();
    let err = other.save(&intruder, &profile()).unwrap_err().to_string();
    assert!(
        err.contains("1.pprof") && err.contains("not replaced"),
        "{err}"
    );
    assert!(
        read_files(&p.dir, &files) == before,
        "session 1's files replaced"
    );
    assert_eq!(names(&p.dir), files, "no temp file left");
    // Only the metadata there: the profile written is taken back.
    fs::remove_file(p.dir.join("1.pprof")).unwrap();
    let err = other.save(&intruder, &profile()).unwrap_err().to_string();
    assert!(err.contains("1.session"), "{err}");
    assert_eq!(names(&p.dir), ["1.session"]);
    // A session replaces its own files (a checkpoint, then its end).
    store.save(&session(2, now), &profile()).unwrap();
    store.save(&session(2, now + 1000), &profile()).unwrap();
}

#[test]
fn a_checkpoint_comes_back_as_a_failed_session_of_its_owner() {
    let p = persist(&scratch("checkpoint"), Retention::default());
    let (store, _) = open(&p);
    let mut running = session(4, now_unix_ms());
    running.state = api::SessionState::Running as i32;
    running.duration_s = 1.5;
    store.save(&running, &profile()).unwrap();
    // Killed while it ran: it never ended.
    drop(store);
    let (store, found) = open(&p);
    assert_eq!(ids(&found), [4]);
    let back = &found.sessions[0].session;
    assert_eq!(back.state(), api::SessionState::Failed);
    assert!(back.error.contains("last checkpoint"), "{}", back.error);
    assert_eq!((back.owner_uid, back.owner.as_str()), (1001, "alice"));
    assert_eq!(back.duration_s, 1.5);
    assert!(back.earlier_run);
    let loaded = store.load(&found.sessions[0]).unwrap();
    assert_eq!(loaded.stacks.len(), profile().stacks.len());
    assert_eq!(loaded.attributed, 4);
}

/// A state directory written by a daemon that kept summaries as `<id>.json`
/// (format 1): sessions 1-3 ended, 4 checkpointed while it ran and the
/// daemon killed; and the JSON exports (`profctl export N --format json`)
/// that daemon made of them after its restart.
const FORMAT_1: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/state-format-1");
const FORMAT_1_EXPORTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/testdata/state-format-1-exports"
);

#[test]
fn sessions_kept_as_json_summaries_come_back_with_their_figures() {
    let p = persist(
        &scratch("format-1"),
        Retention {
            max_age: Duration::from_secs(100 * 365 * 24 * 3600),
            ..Retention::default()
        },
    );
    fs::create_dir(&p.dir).unwrap();
    for f in fs::read_dir(FORMAT_1).unwrap() {
        let f = f.unwrap();
        fs::copy(f.path(), p.dir.join(f.file_name())).unwrap();
    }
    let files = names(&p.dir);
    let (store, found) = open(&p);
    assert_eq!(ids(&found), [1, 2, 3, 4]);
    assert_eq!(found.ids.peek(), 17, "after the mark");
    assert_eq!(
        names(&p.dir),
        files,
        "read in place: nothing moved or written"
    );
    for stored in &found.sessions {
        let id = stored.session.id;
        assert!(stored.session.earlier_run);
        let profile = store.load(stored).unwrap();
        let mut export = export::json(&stored.session, &views::functions(&profile));
        // That daemon's exports had no function ids, interpreter totals nor
        // walks cut by the copy (keys added since).
        for f in export["functions"].as_array_mut().unwrap() {
            f.as_object_mut().unwrap().shift_remove("id");
        }
        let totals = export["totals"].as_object_mut().unwrap();
        assert_eq!(totals.shift_remove("python_unreadable"), Some(0.into()));
        assert_eq!(totals.shift_remove("ruby_unreadable"), Some(0.into()));
        assert_eq!(totals.shift_remove("perl_unreadable"), Some(0.into()));
        assert_eq!(totals.shift_remove("truncated_copy_ended"), Some(0.into()));
        let expected = fs::read_to_string(format!("{FORMAT_1_EXPORTS}/{id}.json")).unwrap();
        // As text: every digit of every figure.
        assert_eq!(
            serde_json::to_string_pretty(&export).unwrap(),
            expected.trim_end(),
            "session {id}"
        );
    }
    let s = |id: usize| &found.sessions[id - 1].session;
    assert_eq!(s(3).processes.len(), 2, "the target and its child");
    assert_eq!(s(3).totals.unwrap().lost, 488);
    assert_eq!(s(4).state(), api::SessionState::Failed);
    assert!(s(4).error.contains("last checkpoint"), "{}", s(4).error);

    // A new session beside them is kept as `<id>.session`; both kinds come
    // back, and retention deletes either.
    let mut found = found;
    let id = found.ids.take().unwrap();
    store.save(&session(id, now_unix_ms()), &profile()).unwrap();
    drop((store, found));
    let (_, found) = open(&Persist {
        retention: Retention {
            max_sessions: 2,
            ..p.retention.clone()
        },
        ..p.clone()
    });
    assert_eq!(ids(&found), [4, id]);
    assert_eq!(
        names(&p.dir),
        [
            "17.pprof".to_string(),
            "17.session".into(),
            "4.json".into(),
            "4.pprof".into(),
            NEXT_ID_FILE.into()
        ]
    );
}

#[test]
fn off_cpu_sessions_come_back_with_their_mode_and_times() {
    let p = persist(&scratch("offcpu"), Retention::default());
    let (store, _) = open(&p);
    let mut original = session(5, now_unix_ms());
    original.set_mode(api::Mode::OffCpu);
    original.frequency_hz = 0;
    let ms = 1_000_000;
    original.totals = Some(api::Totals {
        attributed: 4 * ms,
        time: Some(api::TimeTotals {
            on_cpu_ns: ms,
            off_cpu_ns: 4 * ms,
            runnable_ns: ms / 2,
            waits: 4,
            unpaired: 1,
            open_at_end: 1,
            unknown_ns: 3 * ms,
        }),
        ..Default::default()
    });
    let mut profile = profile();
    profile.mode = api::Mode::OffCpu;
    profile.frequency_hz = 0;
    profile.attributed = 4 * ms;
    for s in &mut profile.stacks {
        s.count *= ms;
    }
    store.save(&original, &profile).unwrap();
    drop(store);

    let (store, found) = open(&p);
    let back = &found.sessions[0];
    assert_eq!(back.session.mode(), api::Mode::OffCpu);
    assert_eq!(back.session.totals, original.totals, "the time totals too");
    let loaded = store.load(back).unwrap();
    assert_eq!(loaded.mode, api::Mode::OffCpu);
    assert_eq!(loaded.attributed, 4 * ms);
    let main = views::functions(&loaded)
        .into_iter()
        .find(|f| f.name == "main")
        .unwrap();
    assert_eq!((main.inclusive, main.exclusive), (4 * ms, ms));
}

/// A profile of many pieces is written as it is encoded: the file is the
/// very export, and it comes back whole.
#[test]
fn a_profile_of_many_pieces_is_written_whole() {
    let p = persist(&scratch("pieces"), Retention::default());
    let (store, _) = open(&p);
    let mut big = profile();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    big.stacks = (0..40_000u64)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ResolvedStack {
                tid: 10,
                frames: vec![
                    FrameRef {
                        function: 1,
                        line: (x % 5000) as u32,
                        address: x >> 16,
                    },
                    FrameRef {
                        function: 0,
                        line: 7,
                        address: 0x1100,
                    },
                ],
                count: 1 + i % 5,
            }
        })
        .collect();
    big.attributed = big.stacks.iter().map(|s| s.count).sum();
    let whole = export::pprof(&big);
    assert!(whole.len() > 4 * PIECE_BYTES, "{} bytes", whole.len());
    store.save(&session(5, now_unix_ms()), &big).unwrap();
    assert!(fs::read(p.dir.join("5.pprof")).unwrap() == whole);
    drop(store);
    let (store, found) = open(&p);
    let loaded = store.load(&found.sessions[0]).unwrap();
    let samples = |p: &ResolvedProfile| p.stacks.iter().map(|s| s.count).sum::<u64>();
    assert_eq!(samples(&loaded), samples(&big));
    assert_eq!(loaded.stacks.len(), big.stacks.len());
}

/// Saves take turns: a second turn waits until the first is given back.
#[tokio::test]
async fn saves_take_turns() {
    let p = persist(&scratch("turns"), Retention::default());
    let (store, _) = open(&p);
    let first = store.turn().await;
    assert!(
        store.turn.try_acquire().is_err(),
        "a second save could go ahead while one was being made"
    );
    drop(first);
    let _second = store.turn().await;
}
