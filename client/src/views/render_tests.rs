//! Unit tests of `render`: table layout, the JSON contract, session lines.
use super::*;
use profd_common::api::{Event, Function, SamplerGroup, Scope, Unwind};
use serde_json::Value;

fn func(id: u64, name: &str, module: &str, inclusive: u64, exclusive: u64) -> Function {
    Function {
        id,
        name: name.into(),
        module: module.into(),
        inclusive,
        exclusive,
        inclusive_pct: 0.0,
        exclusive_pct: 0.0,
        inlined: false,
        window_inclusive: 0,
        window_exclusive: 0,
    }
}

fn session(state: SessionState) -> Session {
    Session {
        id: 3,
        pid: 1234,
        comm: "work".into(),
        frequency_hz: 999,
        event: Event::CpuClock as i32,
        state: state as i32,
        started_unix_ms: 1,
        duration_s: 5.0,
        totals: Some(Totals {
            attributed: 9950,
            discarded: 812,
            lost: 0,
            truncated: 12,
            unsymbolized: 3,
            overflowed: 0,
            ..Default::default()
        }),
        duration_limit_ms: 0,
        error: String::new(),
        unwind: Unwind::Dwarf as i32,
        stack_bytes: 16384,
        owner_uid: 0,
        owner: String::new(),
        ..Default::default()
    }
}

fn profile() -> Profile {
    Profile::new(
        session(SessionState::Exited),
        vec![
            func(4, "spin", "work", 9000, 9000),
            func(1, "main", "work", 9950, 0),
            func(2, "__libc_start_main", "libc.so.6", 9950, 0),
            func(3, "leaf", "[kernel]", 950, 950),
        ],
    )
}

/// `func`, marked inlined.
fn inlined(id: u64, name: &str, module: &str, inclusive: u64, exclusive: u64) -> Function {
    Function {
        inlined: true,
        ..func(id, name, module, inclusive, exclusive)
    }
}

#[test]
fn table_matches_the_documented_layout() {
    let text = profile_table(&profile(), TableOptions::default());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "profd session 3 — pid 1234 (work) — cpu-clock @ 999 Hz — unwind dwarf (16384 B) — 5.00 s — exited"
    );
    assert_eq!(
        lines[1],
        "samples: 9950 attributed, 812 discarded, 0 lost; stacks: 12 truncated, 3 unsymbolized"
    );
    assert_eq!(lines[2], " INCL%   INCL   EXCL%   EXCL  FUNCTION  [MODULE]");
    assert_eq!(
        lines[3],
        "100.0%   9950    0.0%      0  __libc_start_main  [libc.so.6]"
    );
    assert_eq!(lines[4], "100.0%   9950    0.0%      0  main  [work]");
    assert_eq!(lines[5], " 90.5%   9000   90.5%   9000  spin  [work]");
    assert_eq!(lines[6], "  9.5%    950    9.5%    950  leaf  [kernel]");
    assert_eq!(lines.len(), 7);
}

#[test]
fn table_header_shows_the_scope_and_the_unsampled_count() {
    let mut s = session(SessionState::Running);
    s.set_scope(Scope::Target);
    s.totals.as_mut().unwrap().unsampled = 41;
    let header = table_header(&s);
    assert!(
        header.contains(" — unwind dwarf (16384 B) — target rings — 5.00 s — running\n"),
        "{header}"
    );
    assert!(
        header.contains("samples: 9950 attributed, 812 discarded, 0 lost, 41 unsampled;"),
        "{header}"
    );
    s.set_scope(Scope::SystemWide);
    s.totals.as_mut().unwrap().unsampled = 0;
    let header = table_header(&s);
    assert!(header.contains(" — system-wide rings — "), "{header}");
    assert!(header.contains(" 812 discarded, 0 lost;"), "{header}");
}

#[test]
fn table_header_shows_the_unwinding() {
    let mut s = session(SessionState::Running);
    s.unwind = Unwind::Fp as i32;
    s.stack_bytes = 0;
    let header = table_header(&s);
    assert!(
        header.contains(" — cpu-clock @ 999 Hz — unwind fp — 5.00 s — running\n"),
        "{header}"
    );
    s.unwind = Unwind::Unspecified as i32;
    assert!(table_header(&s).contains(" — unwind auto — "));
}

#[test]
fn inlined_functions_are_marked() {
    let p = Profile::new(
        session(SessionState::Running),
        vec![
            func(1, "outer", "prog", 100, 25),
            inlined(2, "hot", "prog", 75, 75),
        ],
    );
    let text = profile_table(&p, TableOptions::default());
    let rows: Vec<&str> = text.lines().skip(3).collect();
    assert!(rows[0].ends_with("  outer  [prog]"), "{text}");
    assert!(rows[1].ends_with("  hot [inlined]  [prog]"), "{text}");
    let v: Value = serde_json::from_str(&profile_json(&p, None)).unwrap();
    assert_eq!(v["functions"][0]["inlined"], false);
    assert_eq!(v["functions"][1]["inlined"], true);
    assert_eq!(v["functions"][1]["name"], "hot");
}

#[test]
fn table_columns_widen_for_big_counts() {
    let mut s = session(SessionState::Running);
    s.totals = Some(Totals {
        attributed: 12_345_678,
        ..Default::default()
    });
    let p = Profile::new(s, vec![func(1, "f", "m", 12_345_678, 1)]);
    let text = profile_table(&p, TableOptions::default());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[2],
        " INCL%      INCL   EXCL%      EXCL  FUNCTION  [MODULE]"
    );
    assert_eq!(lines[3], "100.0%  12345678    0.0%         1  f  [m]");
}

#[test]
fn module_cells() {
    let p = Profile::new(
        session(SessionState::Running),
        vec![
            func(1, "a", "", 3, 3),
            func(2, "b", "[unknown]", 2, 2),
            func(3, "c", "libc.so.6", 1, 1),
        ],
    );
    let text = profile_table(&p, TableOptions::default());
    let rows: Vec<&str> = text.lines().skip(3).collect();
    assert!(rows[0].ends_with("  a"), "{text}");
    assert!(rows[1].ends_with("  b  [unknown]"), "{text}");
    assert!(rows[2].ends_with("  c  [libc.so.6]"), "{text}");
}

#[test]
fn table_top_limits_rows_and_says_so() {
    let opts = TableOptions {
        limit: Some(2),
        ..Default::default()
    };
    let text = profile_table(&profile(), opts);
    assert_eq!(text.lines().count(), 3 + 2 + 1);
    assert!(text.ends_with("… 2 more functions (--top 0 shows all)\n"));
    let all = profile_table(
        &profile(),
        TableOptions {
            limit: None,
            ..Default::default()
        },
    );
    assert_eq!(all.lines().count(), 3 + 4);
}

#[test]
fn table_without_functions() {
    let p = Profile::new(session(SessionState::Running), vec![]);
    let text = profile_table(&p, TableOptions::default());
    assert!(text.ends_with("(no samples)\n"));
    assert!(text.contains("— running"));
}

#[test]
fn long_names_are_shortened_in_the_middle() {
    let map = "std::map<int, long, std::less<int>, std::allocator<std::pair<int const, long> > >";
    let index = format!("{map}::operator[](int const&)");
    let lower = format!("{map}::lower_bound(int const&)");
    let p = Profile::new(
        session(SessionState::Running),
        vec![func(7, &index, "m", 2, 2), func(9, &lower, "m", 1, 1)],
    );
    let table = |names: NameStyle| {
        let text = profile_table(&p, TableOptions { limit: None, names });
        text.lines()
            .skip(3)
            .take(2)
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let narrow = NameStyle {
        width: 20,
        ..NameStyle::default()
    };
    let rows = table(narrow);
    assert!(rows[0].ends_with("  std::m…operator[](…)  [m]"), "{rows:?}");
    assert!(rows[1].ends_with("  std::…lower_bound(…)  [m]"), "{rows:?}");
    let rows = table(NameStyle::default());
    assert!(
        rows[0].ends_with("  std::map<…>::operator[](…)  [m]"),
        "{rows:?}"
    );
    let rows = table(NameStyle {
        ids: true,
        ..narrow
    });
    assert!(
        rows[0].ends_with("  #7 std::m…operator[](…)  [m]"),
        "{rows:?}"
    );
    assert!(
        rows[1].ends_with("  #9 std::…lower_bound(…)  [m]"),
        "{rows:?}"
    );
    let rows = table(NameStyle {
        full: true,
        ..narrow
    });
    assert!(rows[0].ends_with(&format!("  {index}  [m]")), "{rows:?}");
    assert_eq!(shorten("héllo wörld", 5), "héll…");
    assert_eq!(shorten("short", 5), "short");
}

#[test]
fn failed_sessions_show_why() {
    let mut s = session(SessionState::Failed);
    s.error = "perf_event_open: permission denied".into();
    assert!(table_header(&s).contains("— failed: perf_event_open: permission denied"));
    assert!(session_line(&s).contains("failed: perf_event_open"));
}

#[test]
fn json_has_the_contract_keys_and_types() {
    let v: Value = serde_json::from_str(&profile_json(&profile(), None)).unwrap();
    let obj = v.as_object().unwrap();
    for key in [
        "pid",
        "duration_s",
        "frequency_hz",
        "event",
        "totals",
        "functions",
        "session_id",
        "comm",
        "state",
        "unwind",
        "stack_bytes",
    ] {
        assert!(obj.contains_key(key), "missing {key}");
    }
    assert!(!obj.contains_key("error"));
    assert_eq!(v["pid"], 1234);
    assert!(v["duration_s"].is_f64());
    assert_eq!(v["frequency_hz"], 999);
    assert_eq!(v["event"], "cpu-clock");
    assert_eq!(v["session_id"], 3);
    assert_eq!(v["comm"], "work");
    assert_eq!(v["state"], "exited");
    assert_eq!(v["unwind"], "dwarf");
    assert_eq!(v["stack_bytes"], 16384);
    let totals = v["totals"].as_object().unwrap();
    assert_eq!(totals.len(), 14);
    assert!(
        v["totals"]["time"].is_null(),
        "no time accounting in cpu mode"
    );
    assert_eq!((&v["mode"], &v["unit"]), (&"cpu".into(), &"samples".into()));
    assert_eq!(v["totals"]["attributed"], 9950);
    assert_eq!(v["totals"]["discarded"], 812);
    assert_eq!(v["totals"]["lost"], 0);
    assert_eq!(v["totals"]["truncated"], 12);
    assert_eq!(v["totals"]["unsymbolized"], 3);
    assert_eq!(v["totals"]["overflowed"], 0);
    assert_eq!(v["totals"]["throttled"], 0);
    assert_eq!(v["totals"]["unchecked"], 0);
    assert_eq!(v["totals"]["unsampled"], 0);
    assert_eq!(v["totals"]["truncated_copy_ended"], 0);
    let functions = v["functions"].as_array().unwrap();
    assert_eq!(functions.len(), 4);
    let mut last = u64::MAX;
    for f in functions {
        let f = f.as_object().unwrap();
        let mut keys: Vec<&str> = f.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "exclusive",
                "exclusive_pct",
                "id",
                "inclusive",
                "inclusive_pct",
                "inlined",
                "module",
                "name"
            ]
        );
        assert!(f["id"].is_u64());
        assert_eq!(f["inlined"], false);
        assert!(f["name"].is_string() && f["module"].is_string());
        let inclusive = f["inclusive"].as_u64().unwrap();
        assert!(f["exclusive"].is_u64());
        assert!(inclusive <= last, "not sorted by inclusive desc");
        last = inclusive;
        for pct in ["inclusive_pct", "exclusive_pct"] {
            assert!(f[pct].is_f64(), "{pct} is not a float");
            let p = f[pct].as_f64().unwrap();
            assert!((0.0..=100.0).contains(&p), "{pct} = {p}");
        }
    }
    assert_eq!(functions[0]["name"], "__libc_start_main");
    assert_eq!(functions[0]["inclusive_pct"], 100.0);
    assert_eq!(functions[2]["name"], "spin");
}

#[test]
fn json_state_names_and_limit() {
    for (state, name) in [
        (SessionState::Running, "running"),
        (SessionState::Stopped, "stopped"),
        (SessionState::DurationElapsed, "duration_elapsed"),
        (SessionState::Exited, "exited"),
        (SessionState::Failed, "failed"),
    ] {
        let p = Profile::new(session(state), vec![]);
        let v: Value = serde_json::from_str(&profile_json(&p, None)).unwrap();
        assert_eq!(v["state"], name);
        assert_eq!(v["functions"], Value::Array(vec![]));
    }
    let v: Value = serde_json::from_str(&profile_json(&profile(), Some(1))).unwrap();
    assert_eq!(v["functions"].as_array().unwrap().len(), 1);
    let mut s = session(SessionState::Running);
    s.event = Event::Cycles as i32;
    let v: Value = serde_json::from_str(&profile_json(&Profile::new(s, vec![]), None)).unwrap();
    assert_eq!(v["event"], "cycles");
    for (unwind, name) in [
        (Unwind::Unspecified, "auto"),
        (Unwind::Auto, "auto"),
        (Unwind::Fp, "fp"),
        (Unwind::Dwarf, "dwarf"),
    ] {
        let mut s = session(SessionState::Running);
        s.unwind = unwind as i32;
        let v: Value = serde_json::from_str(&profile_json(&Profile::new(s, vec![]), None)).unwrap();
        assert_eq!(v["unwind"], name);
    }
}

#[test]
fn session_line_format() {
    assert_eq!(
        session_line(&session(SessionState::Stopped)),
        "session 3 — pid 1234 (work) — stopped — 5.00 s — 9950 attributed, 812 discarded, 0 lost\n"
    );
}

#[test]
fn sessions_table_aligns_columns() {
    let mut b = session(SessionState::Running);
    b.id = 12;
    b.pid = 7;
    b.comm = "a-much-longer-command-name".into();
    let text = sessions_table(&[session(SessionState::Exited), b]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[0].starts_with("ID   PID  COMM "), "{}", lines[0]);
    assert!(lines[1].starts_with(" 3  1234  work "), "{}", lines[1]);
    assert!(
        lines[2].starts_with("12     7  a-much-longer-c… "),
        "{}",
        lines[2]
    );
    assert!(lines[1].ends_with("9950/812/0"));
    // Every row's STATE column starts at the same offset.
    let col = lines[0].find("STATE").unwrap();
    assert_eq!(&lines[1][col..col + 6], "exited");
    assert_eq!(sessions_table(&[]), "no sessions\n");
    assert!(
        !text.contains('*'),
        "no footnote without earlier-run sessions"
    );
}

#[test]
fn sessions_of_earlier_runs_are_marked() {
    let mut old = session(SessionState::Stopped);
    old.earlier_run = true;
    let mut new = session(SessionState::Running);
    new.id = 4;
    let text = sessions_table(&[old, new]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    let col = lines[0].find("STATE").unwrap();
    assert_eq!(&lines[1][col..col + 9], "stopped* ");
    assert_eq!(&lines[2][col..col + 8], "running ");
    assert!(
        lines[3].starts_with("* from an earlier run of the daemon"),
        "{text}"
    );
}

#[test]
fn info_lists_everything() {
    let info = InfoResponse {
        version: "0.1.0".into(),
        cpus: 2,
        pmu_available: false,
        default_event: Event::CpuClock as i32,
        perf_event_paranoid: 2,
        max_sample_rate: 100_000,
        groups: vec![
            SamplerGroup {
                event: Event::CpuClock as i32,
                frequency_hz: 999,
                sessions: 1,
                ..Default::default()
            },
            SamplerGroup {
                event: Event::CpuClock as i32,
                frequency_hz: 999,
                sessions: 2,
                target_pid: 42,
                stack_bytes: 16384,
                mode: Mode::Cpu as i32,
            },
            SamplerGroup {
                event: Event::CpuClock as i32,
                frequency_hz: 999,
                sessions: 1,
                target_pid: 43,
                stack_bytes: 0,
                mode: Mode::OffCpu as i32,
            },
        ],
        totals: Some(Totals {
            attributed: 5,
            discarded: 6,
            lost: 7,
            truncated: 0,
            unsymbolized: 0,
            overflowed: 0,
            throttled: 0,
            unchecked: 0,
            unsampled: 0,
            time: None,
            python_unreadable: 0,
            ruby_unreadable: 0,
            perl_unreadable: 0,
            truncated_copy_ended: 0,
        }),
        running_sessions: 1,
        continuous: None,
        sinks: vec![profd_common::api::SinkStatus {
            name: "ch".into(),
            kind: "clickhouse".into(),
            url: "http://127.0.0.1:8123/".into(),
            protocol: "HTTP interface, JSONEachRow".into(),
            windows_sent: 12,
            bytes_sent: 3 << 20,
            requests: 24,
            retries: 3,
            drops: vec![profd_common::api::SinkDrop {
                reason: "spool_full".into(),
                windows: 2,
            }],
            spool_windows: 4,
            spool_bytes: 1 << 20,
            spool_limit_bytes: 256 << 20,
            oldest_unsent_age_ms: 90_000,
            last_error: "connection refused".into(),
            split: 0,
            truncated: 0,
            rejected: 0,
        }],
        retention: Some(profd_common::api::RetentionStatus {
            max_sessions: 1000,
            min_sessions_per_owner: 1,
            owners: 2,
            share_sessions: 500,
            sessions: 4,
            by_owner: vec![
                profd_common::api::OwnerRetention {
                    owner_uid: 1000,
                    owner: "bob".into(),
                    sessions: 3,
                    ..Default::default()
                },
                profd_common::api::OwnerRetention {
                    owner_uid: 1001,
                    owner: "a-rather-long-name".into(),
                    sessions: 1,
                    ..Default::default()
                },
            ],
            ..Default::default()
        }),
        memory: Some(profd_common::api::MemoryStatus {
            limit_bytes: 96 << 20,
            ceiling_bytes: 96 << 20,
            resident_bytes: 70 << 20,
            peak_bytes: 90 << 20,
            level: 1,
            level_name: "shed-caches".into(),
            entered: vec![0, 3, 1, 0],
            sheds: 5,
            shed_bytes: 12 << 20,
            windows_capped: 2,
            caches: vec![profd_common::api::MemoryCache {
                name: "continuous names".into(),
                bytes: 1 << 20,
            }],
            ..Default::default()
        }),
        debuginfod: Some(profd_common::api::DebuginfodStatus {
            urls: vec!["http://127.0.0.1:8002".into(), "https://d.example".into()],
            cache_dir: "/var/lib/profd/debuginfod".into(),
            cache_bytes: 3 << 20,
            cache_limit_bytes: 1 << 30,
            fetched: 4,
            not_found: 2,
            failed: 1,
            garbage: 0,
            last_error: "http://127.0.0.1:8002: no answer within 10s".into(),
            timeout_s: 10,
        }),
        python_frames: "not read: the kernel refused the BPF program: EPERM".into(),
        ruby_frames: "read at each sample".into(),
        perl_frames: "read at each sample".into(),
        ask_jvm: true,
        ask_jvm_interval_s: 2,
        jvm_perfmap_requests: vec![
            profd_common::api::JvmPerfMapRequest {
                session_id: 3,
                pid: 4242,
                asked_unix_ms: 1_796_202_000_000,
                result: "attach_disabled".into(),
                detail: "its options say -XX:+DisableAttachMechanism".into(),
                asks: 1,
            },
            profd_common::api::JvmPerfMapRequest {
                session_id: 0,
                pid: 77,
                asked_unix_ms: 1_796_202_000_000,
                result: "ok".into(),
                detail: String::new(),
                asks: 2,
            },
        ],
    };
    let text = info_text(&info);
    for needle in [
        "jvm perf maps:        asked of JVMs with unnamed JIT code, each at most every 2 s",
        "jvm pid 4242:         session 3: attach disabled at 2026-12-02T09:00:00Z (1 ask): its options say -XX:+DisableAttachMechanism\n",
        "jvm pid 77:           continuous profiling: ok at 2026-12-02T09:00:00Z (2 asks)\n",
        "python frames:        not read: the kernel refused the BPF program: EPERM",
        "ruby frames:          read at each sample",
        "perl frames:          read at each sample",
        "debuginfod:           http://127.0.0.1:8002 https://d.example; fetched 4, not found 2, failed 1, garbage 0; cache 3.0 MiB of 1024.0 MiB in /var/lib/profd/debuginfod; last error: http://127.0.0.1:8002: no answer within 10s",
        "memory:               70.0 MiB of 96.0 MiB (peak 90.0 MiB), level 1 (shed-caches); entered shed-caches 3, cap-stacks 1, lower-frequency 0, frame-pointers 0; shed 5 times (12.0 MiB); windows capped 2, lowered 0; samples dropped behind 0; caches: continuous names 1.0 MiB",
        "version:",
        "0.1.0",
        "cpus:",
        "not available",
        "default event:",
        "cpu-clock",
        "perf_event_paranoid:  2",
        "100000 Hz",
        "cpu-clock @ 999 Hz fp system-wide (1 session), cpu-clock @ 999 Hz dwarf pid 42 (2 sessions), context switches fp pid 43 (1 session)",
        "5 attributed, 6 discarded, 7 lost",
        "running sessions:     1",
        "retention:            4 sessions in memory (no state directory); limits 1000 sessions; fair share: 500 sessions each of 2 owners (at least 1 session)",
        "kept for bob:         3 sessions; evicted 0 over their share of sessions, 0 of bytes, 0 for age",
        "kept for a-rather-long-name: 1 session;",
        "sink ch:",
        "clickhouse http://127.0.0.1:8123/ (HTTP interface, JSONEachRow); sent 12 windows, 3.0 MiB in 24 requests; 3 retries; dropped 2 spool_full; spool 4 windows, 1.0 MiB of 256.0 MiB, oldest unsent 1 min 30 s; last error: connection refused",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn a_history_query_is_headed_as_the_history() {
    let session = Session {
        id: 0,
        pid: 0,
        comm: "continuous".into(),
        frequency_hz: 19,
        started_unix_ms: 1_796_202_000_000,
        duration_s: 600.0,
        scope: Scope::SystemWide as i32,
        ..Default::default()
    };
    let header = table_header(&session);
    assert!(
        header.starts_with(
            "profd continuous history — windows from 2026-12-02T09:00:00Z — cpu-clock @ 19 Hz — 600 s of windows\n"
        ),
        "{header}"
    );
    assert!(session_line(&session).starts_with("the continuous history — windows from"));
}

#[test]
fn window_listings_show_services_then_windows() {
    use profd_common::api::{ListWindowsResponse, ServiceSamples, WindowSummary};
    let svc = |service: &str, samples| ServiceSamples {
        service: service.into(),
        samples,
    };
    let l = ListWindowsResponse {
        enabled: true,
        frequency_hz: 19,
        window_seconds: 10,
        retention_bytes: 256 << 20,
        retention_s: 7 * 86_400,
        host: "web-1".into(),
        windows_kept: 2,
        bytes_kept: 3 << 10,
        dropped_age: 4,
        windows: vec![WindowSummary {
            id: "a".into(),
            start_unix_ns: 1_796_202_000_000_000_000,
            end_unix_ns: 1_796_202_010_000_000_000,
            services: vec![svc("web", 30), svc("db", 10)],
            bytes: 1500,
            ..Default::default()
        }],
        services: vec![svc("web", 30), svc("db", 10)],
        ..Default::default()
    };
    let text = windows_text(&l);
    for needle in [
        "profd continuous profiling on web-1: on, 19 Hz, windows of 10 s; history 2 windows, 3.0 KiB (keeps 256.0 MiB and 7 days); dropped 0 by bytes, 4 by age; 0 damaged",
        "1 windows from 2026-12-02T09:00:00Z to 2026-12-02T09:00:10Z, 40 samples",
        "     30  75.0  web",
        "2026-12-02T09:00:00Z    10       40  1.5 KiB  web 30, db 10",
    ] {
        assert!(text.contains(needle), "no {needle:?} in\n{text}");
    }
    let info = InfoResponse {
        continuous: Some(l.clone()),
        ..Default::default()
    };
    let text = info_text(&info);
    assert!(
        text.contains("\n  continuous:           on, 19 Hz"),
        "{text}"
    );
    // Continuous profiling's rings are open: not "none".
    assert!(
        text.contains(
            "\n  sampler groups:       continuous profiling's rings on every CPU @ 19 Hz\n"
        ),
        "{text}"
    );
    // A host off in this slot of its schedule has no rings open.
    let off = InfoResponse {
        continuous: Some(ListWindowsResponse {
            schedule: Some(profd_common::api::WindowSchedule {
                fraction: 0.07,
                period_s: 600,
                slot: 3,
                on: false,
            }),
            ..l.clone()
        }),
        ..Default::default()
    };
    let text = info_text(&off);
    for needle in [
        "\n  continuous:           on 7 % of hosts at a time in slots of 600 s (off in this one), 19 Hz, windows of 10 s;",
        "\n  sampler groups:       none (continuous profiling is off in this slot of its schedule)\n",
    ] {
        assert!(text.contains(needle), "no {needle:?} in\n{text}");
    }
    let with_session = InfoResponse {
        groups: vec![profd_common::api::SamplerGroup {
            target_pid: 42,
            frequency_hz: 999,
            sessions: 1,
            ..Default::default()
        }],
        ..info.clone()
    };
    let text = info_text(&with_session);
    assert!(
        text.contains("(1 session), continuous profiling's rings on every CPU @ 19 Hz\n"),
        "{text}"
    );
    let wide = ListWindowsResponse {
        windows_left_out: 5,
        ..l.clone()
    };
    let text = windows_text(&wide);
    assert!(
        text.contains("5 older windows of the range are not listed"),
        "{text}"
    );
    let text = info_text(&InfoResponse::default());
    assert!(text.contains("\n  continuous:           off\n"), "{text}");
    assert!(
        text.contains("\n  jvm perf maps:        never asked (jit.ask_jvm = false)\n"),
        "{text}"
    );
    assert!(text.contains("\n  debuginfod:           off\n"), "{text}");
}

#[test]
fn retention_ages_read_as_words() {
    assert_eq!(age_text(7 * 86_400), "7 days");
    assert_eq!(age_text(86_400 + 6 * 3_600), "1 day 6 h");
    assert_eq!(age_text(86_400 + 60), "1 day");
    assert_eq!(age_text(5_400), "1 h 30 min");
    assert_eq!(age_text(90), "1 min 30 s");
    assert_eq!(age_text(45), "45 s");
    assert_eq!(age_text(0), "0 s");
}

/// An off-CPU session: 2 s of waits in `read_pipe` under `main`, 500 ms in
/// `sleep`, counts in nanoseconds.
fn off_cpu_profile() -> Profile {
    let mut s = session(SessionState::Stopped);
    s.set_mode(profd_common::api::Mode::OffCpu);
    s.totals = Some(Totals {
        attributed: 2_500_000_000,
        discarded: 0,
        lost: 0,
        truncated: 1,
        unsymbolized: 780_000,
        time: Some(profd_common::api::TimeTotals {
            on_cpu_ns: 45_600_000,
            off_cpu_ns: 2_500_000_000,
            runnable_ns: 12_300_000,
            waits: 1234,
            unpaired: 5,
            open_at_end: 2,
            ..Default::default()
        }),
        ..Default::default()
    });
    Profile::new(
        s,
        vec![
            func(1, "[off-cpu: blocked]", "[off-cpu]", 2_500_000_000, 0),
            func(2, "main", "work", 2_500_000_000, 0),
            func(3, "read_pipe", "work", 2_000_000_000, 2_000_000_000),
            func(4, "sleep", "libc.so.6", 500_000_000, 500_000_000),
        ],
    )
}

#[test]
fn off_cpu_table_shows_times_and_the_time_accounting() {
    let text = profile_table(&off_cpu_profile(), TableOptions::default());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "profd session 3 — pid 1234 (work) — off-cpu — unwind dwarf (16384 B) — 5.00 s — stopped",
        "{text}"
    );
    assert_eq!(
        lines[1],
        "time: 2.50 s attributed, 0 discarded, 0 lost; stacks: 1 truncated, 780 µs unsymbolized",
        "{text}"
    );
    assert_eq!(
        lines[2],
        "time: on-CPU 45.6 ms, off-CPU 2.50 s (runnable 12.3 ms); 1234 waits, 5 unpaired, 2 open at end",
        "{text}"
    );
    assert_eq!(
        lines[3], " INCL%  INCL TIME   EXCL%  EXCL TIME  FUNCTION  [MODULE]",
        "{text}"
    );
    assert_eq!(
        lines[4], "100.0%     2.50 s    0.0%       0 ns  [off-cpu: blocked]  [off-cpu]",
        "{text}"
    );
    assert!(
        text.contains(" 80.0%     2.00 s   80.0%     2.00 s  read_pipe  [work]\n"),
        "{text}"
    );
    assert!(
        text.contains(" 20.0%     500 ms   20.0%     500 ms  sleep  [libc.so.6]\n"),
        "{text}"
    );
    let line = session_line(&off_cpu_profile().session);
    assert!(line.contains("— 2.50 s attributed, 0 discarded"), "{line}");
    let table = sessions_table(&[off_cpu_profile().session]);
    assert!(table.contains(" off-cpu "), "{table}");
    assert!(table.contains("2.50 s/0/0"), "{table}");
    // Records lost: the time no record tells is said.
    let mut p = off_cpu_profile();
    let totals = p.session.totals.as_mut().unwrap();
    totals.lost = 40;
    totals.time.as_mut().unwrap().unknown_ns = 300_000_000;
    let text = table_header(&p.session);
    assert!(
        text.contains("5 unpaired, 2 open at end; not known 300 ms (records lost)\n"),
        "{text}"
    );
}

#[test]
fn wall_header_names_the_mode_and_the_event() {
    let mut p = off_cpu_profile();
    p.session.set_mode(profd_common::api::Mode::Wall);
    let text = table_header(&p.session);
    assert!(
        text.starts_with(
            "profd session 3 — pid 1234 (work) — wall (cpu-clock @ 999 Hz) — unwind dwarf"
        ),
        "{text}"
    );
    assert!(text.contains("\ntime: on-CPU 45.6 ms,"), "{text}");
}

#[test]
fn stacks_cut_by_the_stack_copy_are_named_with_the_flag_that_helps() {
    let with = |ended: u64, stack_bytes: u32| {
        let mut s = session(SessionState::Running);
        s.stack_bytes = stack_bytes;
        let t = s.totals.as_mut().unwrap();
        t.truncated = ended + 12;
        t.truncated_copy_ended = ended;
        table_header(&s)
            .lines()
            .nth(2)
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(
        with(6368, 16384),
        "64.0 % of stacks truncated where the 16384-byte stack copy ended: try --stack-bytes 65528"
    );
    assert_eq!(
        with(100, 65528),
        "1.0 % of stacks truncated where the 65528-byte stack copy, the kernel's largest, ended: \
         frame-pointer builds keep their callers with --unwind fp"
    );
    // Under 1 % of the samples: no line (the table's column header follows).
    assert_eq!(with(99, 16384), "");
    assert_eq!(with(0, 16384), "");
    // A query of the continuous history names the daemon's setting.
    let mut h = session(SessionState::DurationElapsed);
    (h.id, h.pid) = (0, 0);
    let t = h.totals.as_mut().unwrap();
    t.truncated_copy_ended = t.attributed / 2;
    let text = table_header(&h);
    assert_eq!(
        text.lines().nth(2),
        Some(
            "50.0 % of stacks truncated where the stack copy ended: raise the daemon's \
             continuous.stack_bytes (--continuous-stack-bytes, up to 65528)"
        ),
        "{text}"
    );
}

/// The processes of a wall or off-CPU session with children show their
/// time, not raw nanoseconds.
#[test]
fn processes_of_a_time_session_show_times() {
    let mut p = off_cpu_profile();
    p.session.set_mode(profd_common::api::Mode::Wall);
    p.session.children = true;
    p.session.processes = vec![
        profd_common::api::ProcessSamples {
            pid: 10,
            comm: "sort".into(),
            samples: 4_962_420_715,
            exited: true,
            ..Default::default()
        },
        profd_common::api::ProcessSamples {
            pid: 11,
            comm: "sh".into(),
            samples: 45_600_000,
            ..Default::default()
        },
    ];
    let text = table_header(&p.session);
    assert!(
        text.contains("processes: 10 sort 4.96 s (exited), 11 sh 45.6 ms\n"),
        "{text}"
    );
    p.session.set_mode(profd_common::api::Mode::Cpu);
    let text = table_header(&p.session);
    assert!(
        text.contains("processes: 10 sort 4962420715 (exited), 11 sh 45600000\n"),
        "{text}"
    );
}
