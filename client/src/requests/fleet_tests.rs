//! Unit tests of `fleet`.
use super::*;

#[test]
fn the_query_selects_by_range_service_and_host() {
    let sel = Selection {
        services: vec!["api".into(), "o'brien".into()],
        hosts: vec!["web-1".into()],
        from_ms: 1_800_000_000_000,
        to_ms: 0,
        by: None,
        per_thread: false,
    };
    let q = sql(&sel, 1_800_000_600_000);
    assert!(
        q.contains("end_ns > 1800000000000000000 AND start_ns < 1800000600000000000"),
        "{q}"
    );
    assert!(q.contains("start >= toDateTime(1799996400)"), "{q}");
    assert!(q.contains("service IN ('api', 'o\\'brien')"), "{q}");
    assert!(q.contains("host IN ('web-1')"), "{q}");
    assert!(q.contains("GROUP BY window_id, service, stack"), "{q}");
    assert!(q.contains("GROUP BY s, f, m, fi, i, l, bi FORMAT"), "{q}");
    let by_thread = sql(
        &Selection {
            by: Some(FleetGroupArg::Host),
            per_thread: true,
            ..sel
        },
        1_800_000_600_000,
    );
    assert!(
        by_thread.contains("GROUP BY s, f, m, fi, i, l, bi, h, t, n FORMAT"),
        "{by_thread}"
    );
}

#[test]
fn rows_merge_into_one_profile_grouped_as_asked() {
    let rows = r#"{"h":"a","hosts":["a"],"s":"web","t":11,"n":"w","f":["leaf","main"],"m":["w","w"],"fi":["",""],"i":[0,0],"l":[3,9],"count":"5","first_ns":"100","last_ns":"200"}
{"h":"b","hosts":["b"],"s":"web","t":11,"n":"w","f":["leaf","main"],"m":["w","w"],"fi":["",""],"i":[0,0],"l":[3,9],"count":7,"first_ns":"50","last_ns":"150"}
"#;
    let a = merge(rows, None).unwrap();
    assert_eq!(a.profile.attributed, 12);
    assert_eq!(
        a.profile.stacks.len(),
        1,
        "the same thread and stack on two hosts merge"
    );
    assert_eq!((a.first_ns, a.last_ns), (50, 200));
    assert_eq!(a.hosts.len(), 2);
    let by = merge(rows, Some(FleetGroupArg::Host)).unwrap();
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
    assert!(merge("{\"h\":1}", None).is_err());
}

#[test]
fn recursion_counts_once_a_sample_across_hosts() {
    let row = |h: &str, k: u64| {
        format!(
            r#"{{"hosts":["{h}"],"s":"db","f":["rec","rec","rec","main"],"m":["db","db","db","db"],"fi":["","","",""],"i":[0,0,0,0],"l":[1,1,1,2],"count":{k},"first_ns":1,"last_ns":2}}"#
        )
    };
    let rows = format!("{}\n{}\n", row("a", 4), row("b", 6));
    let a = merge(&rows, None).unwrap();
    let f = profd_common::views::functions(&a.profile);
    let rec = f.iter().find(|f| f.name == "rec").unwrap();
    assert_eq!((rec.inclusive, rec.exclusive), (10, 10));
    let main = f.iter().find(|f| f.name == "main").unwrap();
    assert_eq!((main.inclusive, main.exclusive), (10, 0));
}
