//! Unit tests of `fleet`.
use super::*;

/// 2027-01-15 08:00:00 UTC, a whole hour.
const H: u64 = 1_800_000_000 / 3600 * 3600;

#[test]
fn whole_hours_then_whole_minutes_then_raw_edges() {
    // 07:59:29.5 .. 10:02:10: no whole minute before the hour, hours
    // 08..10, minutes 10:00..10:02, raw for the rest.
    let p = plan((H - 30) * 1000 - 500, (H + 2 * 3600 + 130) * 1000, true);
    assert_eq!(
        p.rollups,
        [
            (Source::Hours, H, H + 7200),
            (Source::Minutes, H + 7200, H + 7320)
        ]
    );
    assert_eq!(p.span(), Some((H, H + 7320)));
    // 07:58:01 .. 09:00:00: minutes 07:59..08:00, the hour 08..09, no
    // minutes after it.
    let p = plan((H - 119) * 1000, (H + 3600) * 1000, true);
    assert_eq!(
        p.rollups,
        [(Source::Minutes, H - 60, H), (Source::Hours, H, H + 3600)]
    );
    // Inside one hour: minutes only, whole ones.
    let p = plan((H + 90) * 1000, (H + 400) * 1000 + 1, true);
    assert_eq!(p.rollups, [(Source::Minutes, H + 120, H + 360)]);
    // Less than a whole minute, or rollups not allowed: raw alone.
    assert_eq!(plan((H + 1) * 1000, (H + 60) * 1000, true).span(), None);
    assert_eq!(plan(H * 1000, (H + 7200) * 1000, false).span(), None);
    // A range of exact bounds is all rollups.
    let p = plan(H * 1000, (H + 3600) * 1000, true);
    assert_eq!(p.rollups, [(Source::Hours, H, H + 3600)]);
}

#[test]
fn thread_or_pod_detail_or_table_raw_reads_raw_only() {
    let sel = Selection {
        from_ms: H * 1000,
        to_ms: (H + 7200) * 1000,
        ..Selection::default()
    };
    assert!(Fleet::plan(&sel, 0).span().is_some());
    for raw in [
        Selection {
            per_thread: true,
            ..sel.clone()
        },
        Selection {
            namespaces: vec!["shop".into()],
            ..sel.clone()
        },
        Selection {
            pods: vec!["web-0".into()],
            ..sel.clone()
        },
        Selection {
            table: TableArg::Raw,
            ..sel.clone()
        },
    ] {
        assert_eq!(Fleet::plan(&raw, 0).span(), None, "{raw:?}");
    }
    // --to now: the plan ends at now.
    let now = Selection { to_ms: 0, ..sel };
    assert_eq!(
        Fleet::plan(&now, (H + 3600) * 1000).span(),
        Some((H, H + 3600))
    );
    let text = explain(&Fleet::plan(&now, (H + 3600) * 1000));
    assert!(
        text.contains("stacks_hours: windows that begin in "),
        "{text}"
    );
}

#[test]
fn the_query_selects_by_range_service_and_host() {
    let sel = Selection {
        services: vec!["api".into(), "o'brien".into()],
        hosts: vec!["web-1".into()],
        from_ms: 1_800_000_000_000,
        to_ms: 0,
        ..Selection::default()
    };
    let raw = plan(1_800_000_000_000, 1_800_000_600_000, false);
    let q = sql(&sel, &raw);
    assert!(
        q.contains("end_ns > 1800000000000000000 AND start_ns < 1800000600000000000"),
        "{q}"
    );
    assert!(q.contains("start >= toDateTime(1799996400)"), "{q}");
    assert!(q.contains("service IN ('api', 'o\\'brien')"), "{q}");
    assert!(q.contains("host IN ('web-1')"), "{q}");
    assert!(q.contains("GROUP BY window_id, service, stack"), "{q}");
    assert!(q.contains("GROUP BY s, x FORMAT"), "{q}");
    assert!(!q.contains("UNION ALL"), "{q}");
    let by_thread = sql(
        &Selection {
            by: Some(FleetGroupArg::Host),
            per_thread: true,
            pods: vec!["web-0".into()],
            ..sel.clone()
        },
        &raw,
    );
    assert!(
        by_thread.contains("GROUP BY s, x, h, t, n FORMAT"),
        "{by_thread}"
    );
    assert!(by_thread.contains("any(tid) AS t"), "{by_thread}");
    assert!(by_thread.contains("pod IN ('web-0')"), "{by_thread}");
    // With rollups: the raw edges leave out the windows they answer for.
    let mixed = plan(1_800_000_000_000, 1_800_007_300_000, true);
    let q = sql(&sel, &mixed);
    let (a, b) = mixed.span().unwrap();
    assert!(
        q.contains(&format!(
            "AND (start < toDateTime({a}) OR start >= toDateTime({b}))"
        )),
        "{q}"
    );
    assert_eq!(q.matches("UNION ALL").count(), mixed.rollups.len(), "{q}");
    assert!(
        q.contains("FROM stacks_hours WHERE hour >= toDateTime("),
        "{q}"
    );
    assert!(
        q.contains("FROM stacks_minutes WHERE minute >= toDateTime("),
        "{q}"
    );
    assert!(frames_sql(&[1, u64::MAX]).contains("WHERE stack_hash IN (1, 18446744073709551615)"));
}

/// The frames of two stacks: `leaf` in `main`, and `rec` thrice in `main`.
fn dictionary() -> HashMap<u64, Frames> {
    let text = r#"{"x":"7","f":["leaf","main"],"m":["w","w"],"fi":["",""],"i":[0,0],"l":[3,9]}
{"x":8,"f":["rec","rec","rec","main"],"m":["db","db","db","db"],"fi":["","","",""],"i":[0,0,0,0],"l":[1,1,1,2]}
"#;
    let mut d = HashMap::new();
    read_frames(text, &mut d).unwrap();
    d
}

#[test]
fn rows_merge_into_one_profile_grouped_as_asked() {
    let rows = r#"{"h":"a","s":"web","x":"7","t":11,"n":"w","count":"5","first_ns":"100","last_ns":"200"}
{"h":"b","s":"web","x":7,"t":11,"n":"w","count":7,"first_ns":"50","last_ns":"150"}
"#;
    assert_eq!(hashes(rows).unwrap(), [7]);
    let d = dictionary();
    let a = merge(rows, &d, None).unwrap();
    assert_eq!(a.profile.attributed, 12);
    assert_eq!(
        a.profile.stacks.len(),
        1,
        "the same thread and stack on two hosts merge"
    );
    assert_eq!((a.first_ns, a.last_ns), (50, 200));
    let by = merge(rows, &d, Some(FleetGroupArg::Host)).unwrap();
    assert_eq!(by.profile.stacks.len(), 2);
    let names: Vec<&str> = by
        .profile
        .functions
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert!(
        names.contains(&"[host a]") && names.contains(&"[host b]"),
        "{names:?}"
    );
    assert!(merge("{\"h\":1}", &d, None).is_err());
    // A stack the dictionary lacks is named, not left out.
    let lost = r#"{"s":"web","x":9,"count":1,"first_ns":1,"last_ns":2}"#;
    let e = merge(lost, &d, None).unwrap_err().to_string();
    assert!(
        e.starts_with("stack 9 has no row in the table frames"),
        "{e}"
    );
}

/// The hosts are a query of their own, over the same parts as the
/// stacks': no row of stacks carries a list of hosts.
#[test]
fn hosts_are_asked_once_not_per_stack() {
    let sel = Selection {
        services: vec!["web".into()],
        ..Selection::default()
    };
    let p = plan(H * 1000, (H + 3600) * 1000, true);
    let stacks = sql(&sel, &p);
    assert!(!stacks.contains("groupUniqArray"), "{stacks}");
    let hosts = hosts_sql(&sel, &p);
    assert!(
        hosts.starts_with("SELECT DISTINCT h FROM (SELECT service AS s, any(host) AS h")
            && hosts.contains("FROM stacks_hours WHERE hour >= ")
            && hosts.contains("AND service IN ('web')"),
        "{hosts}"
    );
    let read = read_hosts("{\"h\":\"b\"}\n{\"h\":\"a\\tx\"}\n").unwrap();
    assert_eq!(read.into_iter().collect::<Vec<_>>(), ["a\tx", "b"]);
    assert!(read_hosts("b\n").is_err());
}

#[test]
fn recursion_counts_once_a_sample_across_hosts() {
    let row = |h: &str, k: u64| {
        format!(r#"{{"h":"{h}","s":"db","x":8,"count":{k},"first_ns":1,"last_ns":2}}"#)
    };
    let rows = format!("{}\n{}\n", row("a", 4), row("b", 6));
    let a = merge(&rows, &dictionary(), None).unwrap();
    let f = profd_common::views::functions(&a.profile);
    let rec = f.iter().find(|f| f.name == "rec").unwrap();
    assert_eq!((rec.inclusive, rec.exclusive), (10, 10));
    let main = f.iter().find(|f| f.name == "main").unwrap();
    assert_eq!((main.inclusive, main.exclusive), (10, 0));
}

#[test]
fn coverage_counts_the_hosts_there_and_those_profiling() {
    let sel = Selection {
        hosts: vec!["web-1".into()],
        ..Selection::default()
    };
    let q = coverage_sql(&sel, &plan(H * 1000, (H + 60) * 1000, true));
    assert!(
        q.contains("uniqExactIf(host, schedule_on = 1) FROM windows"),
        "{q}"
    );
    assert!(
        q.contains(&format!("end_ns > {}", H * 1_000_000_000)),
        "{q}"
    );
    assert!(q.contains("AND host IN ('web-1')"), "{q}");
    let c = read_coverage("1000\t412\n").unwrap();
    assert_eq!((c.hosts, c.profiled), (1000, 412));
    assert!(read_coverage("1000\n").is_err());
    // Scaled to the fleet: each stack times 1000 / 412, rounded.
    let mut a = merge(
        r#"{"s":"db","x":8,"count":412,"first_ns":1,"last_ns":2}"#,
        &dictionary(),
        None,
    )
    .unwrap();
    assert_eq!(c.scale(&mut a.profile), Some(1000.0 / 412.0));
    assert_eq!(a.profile.attributed, 1000);
    assert_eq!(Coverage::default().scale(&mut a.profile), None);
}
