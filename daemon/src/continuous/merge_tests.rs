use super::*;
use crate::continuous::decode::{decode, visit_from};
use crate::continuous::encode::encode;
use profd_common::views;
use prost::Message;

/// A window of `stacks` stacks of service `service` on threads 1..=4
/// (process 1 and 2): stack `n` (from `first`) calls down `depth` levels,
/// each choosing among 8 functions, with its own leaf address; every
/// `repeat`th stack is stack 0 again (the same thread and frames).
fn window(id: &str, service: &str, first: u64, stacks: u64, repeat: u64) -> api::Window {
    let depth = 6;
    let functions = (0..depth * 8)
        .map(|f| api::WindowFunction {
            name: format!("f{f}"),
            module: "app.bin".into(),
            ..Default::default()
        })
        .collect();
    let stacks: Vec<api::WindowStack> = (first..first + stacks)
        .map(|n| {
            let n = if repeat > 0 && n % repeat == 0 { 0 } else { n };
            let function: Vec<u32> = (0..depth)
                .rev()
                .map(|l| l * 8 + ((n >> l) ^ ((n * 7) >> (l + 2))) as u32 % 8)
                .collect();
            let address = (0..depth as u64)
                .map(|i| if i == 0 { 0x10_0000 + n } else { 0x1000 + i })
                .collect();
            api::WindowStack {
                tid: 1 + (n % 4) as u32,
                line: function.iter().map(|f| f % 5).collect(),
                function,
                address,
                count: 1 + n % 3,
            }
        })
        .collect();
    let samples = stacks.iter().map(|s| s.count).sum();
    api::Window {
        id: id.into(),
        start_unix_ns: 1_000,
        end_unix_ns: 2_000,
        host: "web-1".into(),
        frequency_hz: 19,
        totals: Some(api::Totals {
            attributed: samples,
            ..Default::default()
        }),
        services: vec![api::ServiceWindow {
            service: service.into(),
            source: api::ServiceSource::Unit as i32,
            samples,
            processes: vec![
                api::WindowProcess {
                    pid: 1,
                    comm: "one".into(),
                    ..Default::default()
                },
                api::WindowProcess {
                    pid: 2,
                    comm: "two".into(),
                    ..Default::default()
                },
            ],
            threads: (1..=4)
                .map(|t| api::WindowThread {
                    tid: t,
                    pid: 1 + (t - 1) / 2,
                    name: format!("t{t}"),
                    samples: 0,
                })
                .collect(),
            functions,
            stacks,
            totals: None,
        }],
        ..Default::default()
    }
}

fn gz(w: &api::Window) -> Vec<u8> {
    encode(w.clone()).unwrap().gz
}

/// The windows merged whole, one after the other.
fn whole(q: &api::Query, want: Want, windows: &[api::Window]) -> Merged {
    let mut m = Merge::new(q, want);
    for w in windows {
        m.add(w.clone());
    }
    m.finish(0, u64::MAX).unwrap()
}

/// The windows merged a stack at a time from their gzip'd bytes.
fn streamed(q: &api::Query, want: Want, windows: &[api::Window]) -> Merged {
    let mut m = Merge::new(q, want);
    for w in windows {
        visit_from(&gz(w)[..], &mut m).unwrap();
    }
    m.finish(0, u64::MAX).unwrap()
}

/// A stack by its thread, its frames by name, line and address, and its
/// count.
type Named = (u32, Vec<(String, u32, u64)>, u64);

fn sorted(p: &ResolvedProfile) -> Vec<Named> {
    let mut out: Vec<_> = p
        .stacks
        .iter()
        .map(|s| {
            let frames = s
                .frames
                .iter()
                .map(|f| {
                    (
                        p.functions[f.function as usize].name.clone(),
                        f.line,
                        f.address,
                    )
                })
                .collect();
            (s.tid, frames, s.count)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_streamed_merge_is_the_whole_one() {
    let windows = [
        window("a", "web", 0, 3000, 0),
        window("b", "web", 2000, 3000, 0),
        window("c", "db", 6000, 500, 0),
    ];
    for by in [
        api::GroupBy::Unspecified,
        api::GroupBy::Service,
        api::GroupBy::Process,
        api::GroupBy::Host,
    ] {
        let q = api::Query {
            by: by as i32,
            ..Default::default()
        };
        let a = whole(&q, Want::Stacks, &windows);
        let b = streamed(&q, Want::Stacks, &windows);
        assert_eq!(a.session, b.session, "{by:?}");
        assert_eq!(a.profile, b.profile, "{by:?}");
        // Stacks 2000..3000 are in windows a and b: merged, not repeated.
        let total: u64 = windows.iter().map(|w| w.totals.unwrap().attributed).sum();
        assert_eq!(b.profile.attributed, total);
        assert_eq!(b.profile.stacks.iter().map(|s| s.count).sum::<u64>(), total);
        if by == api::GroupBy::Unspecified {
            assert_eq!(
                b.profile.stacks.len(),
                5000 + 500,
                "distinct stacks kept once"
            );
        }
        assert_eq!(b.profile.threads.len(), 4);
    }
}

#[test]
fn the_same_stack_is_kept_once_with_its_counts_added() {
    // Every 10th stack is stack 0 (thread 1, the same frames).
    let w = window("a", "web", 0, 1000, 10);
    let q = api::Query::default();
    let m = streamed(&q, Want::Stacks, std::slice::from_ref(&w));
    let zero = w.services[0].stacks[0].clone();
    let zeros: u64 = w.services[0]
        .stacks
        .iter()
        .filter(|s| s.address == zero.address && s.tid == zero.tid)
        .map(|s| s.count)
        .sum();
    assert_eq!(zeros, 100);
    assert_eq!(m.profile.stacks.len(), 901);
    let s = &m.profile.stacks[0];
    assert_eq!((s.tid, s.count), (zero.tid, zeros));
    // The distinct stacks are those of the whole merge, frame for frame.
    let old = whole(&q, Want::Stacks, &[w]);
    assert_eq!(sorted(&m.profile), sorted(&old.profile));
}

#[test]
fn counting_functions_keeps_no_stacks_and_counts_as_the_views_do() {
    let windows = [
        window("a", "web", 0, 2000, 7),
        window("b", "db", 1000, 2000, 0),
    ];
    for services in [vec![], vec!["db".to_string()]] {
        let q = api::Query {
            services,
            ..Default::default()
        };
        let stacks = streamed(&q, Want::Stacks, &windows);
        let counted = streamed(&q, Want::Functions, &windows);
        assert!(counted.profile.stacks.is_empty(), "no stacks kept");
        assert_eq!(counted.session, stacks.session);
        assert_eq!(counted.profile.attributed, stacks.profile.attributed);
        let rows = views::function_rows(&counted.profile, counted.counts.unwrap());
        assert_eq!(rows, views::functions(&stacks.profile));
        assert!(!rows.is_empty());
    }
}

#[test]
fn windows_out_of_profds_order_are_refused_when_streamed() {
    let w = window("a", "web", 0, 10, 0);
    let raw = {
        let mut whole = w.clone();
        whole.services.clear();
        let mut bytes = Vec::new();
        for s in &w.services {
            prost::encoding::message::encode(9, s, &mut bytes);
        }
        // The window's id after its services.
        prost::encoding::string::encode(1, &"a".to_string(), &mut bytes);
        whole.id.clear();
        let mut head = whole.encode_to_vec();
        head.extend(bytes);
        head
    };
    let zipped = {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&raw).unwrap();
        e.finish().unwrap()
    };
    // Decoded whole it is a window (protobuf takes fields in any order)...
    assert_eq!(decode(&zipped).unwrap().id, "a");
    // ...but a stack at a time it is refused, saying why.
    let q = api::Query::default();
    let mut m = Merge::new(&q, Want::Stacks);
    let err = visit_from(&zipped[..], &mut m).unwrap_err().to_string();
    assert!(err.contains("field 1 comes after its services"), "{err}");
}

#[test]
fn a_window_met_twice_is_merged_once() {
    let w = window("a", "web", 0, 100, 0);
    let q = api::Query::default();
    let m = streamed(&q, Want::Stacks, &[w.clone(), w.clone()]);
    assert_eq!(m.profile.attributed, w.totals.unwrap().attributed);
}

/// A service or process the range does not hold is refused with the range
/// in RFC 3339, as people read times, not in Unix milliseconds.
#[test]
fn a_missing_service_names_the_range_in_rfc_3339() {
    let q = api::Query {
        services: vec!["nowhere".into()],
        ..Default::default()
    };
    let mut m = Merge::new(&q, Want::Stacks);
    m.add(window("w1", "svc", 0, 4, 2));
    let from = 1_796_428_410_016 * 1_000_000;
    let err = m.finish(from, u64::MAX).err().expect("refused").to_string();
    assert!(
        err.contains("in the history from 2026-12-04T23:53:30.016Z to now"),
        "{err}"
    );
    let q = api::Query {
        pids: vec![999_999],
        ..Default::default()
    };
    let mut m = Merge::new(&q, Want::Stacks);
    m.add(window("w1", "svc", 0, 4, 2));
    let err = m
        .finish(from, from + 60_000_000_000)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("from 2026-12-04T23:53:30.016Z to 2026-12-04T23:54:30.016Z"),
        "{err}"
    );
}

/// With services selected, the totals of the samples (unsymbolized,
/// truncated, unreadable interpreter frames) are those of the services',
/// streamed or whole; the rings' (lost, discarded) stay the windows'.
/// Without a selection they are the windows' whole.
#[test]
fn the_totals_of_selected_services_are_theirs() {
    let mut w = window("w1", "web", 0, 40, 0);
    let mut db = window("w1", "db", 100, 10, 0).services.remove(0);
    db.totals = Some(api::Totals {
        attributed: db.samples,
        unsymbolized: 2190,
        truncated: 7,
        python_unreadable: 5,
        ..Default::default()
    });
    let web = &mut w.services[0];
    web.totals = Some(api::Totals {
        attributed: web.samples,
        unsymbolized: 3,
        truncated: 1,
        ..Default::default()
    });
    w.services.push(db);
    w.totals = Some(api::Totals {
        attributed: w.services.iter().map(|s| s.samples).sum(),
        unsymbolized: 2193,
        truncated: 8,
        python_unreadable: 5,
        lost: 11,
        discarded: 13,
        ..Default::default()
    });
    let web = api::Query {
        services: vec!["web".into()],
        ..Default::default()
    };
    for m in [
        whole(&web, Want::Stacks, &[w.clone()]),
        streamed(&web, Want::Functions, &[w.clone()]),
    ] {
        let t = m.session.totals.unwrap();
        assert_eq!(t.attributed, w.services[0].samples);
        assert_eq!(
            (t.unsymbolized, t.truncated, t.python_unreadable),
            (3, 1, 0)
        );
        assert_eq!((t.lost, t.discarded), (11, 13), "the rings' stay whole");
    }
    let all = streamed(&api::Query::default(), Want::Stacks, &[w.clone()]);
    let t = all.session.totals.unwrap();
    assert_eq!(
        (t.unsymbolized, t.truncated, t.python_unreadable),
        (2193, 8, 5)
    );
}

/// A query for some processes reports their own totals (each process's
/// in the window), not their service's or the window's.
#[test]
fn the_totals_of_selected_processes_are_theirs() {
    let mut w = window("w1", "web", 0, 40, 0);
    let web = &mut w.services[0];
    for (p, unsymbolized, truncated) in [(0, 2190, 7), (1, 3, 1)] {
        web.processes[p].totals = Some(api::Totals {
            unsymbolized,
            truncated,
            ..Default::default()
        });
    }
    web.totals = Some(api::Totals {
        unsymbolized: 2193,
        truncated: 8,
        ..Default::default()
    });
    let two = api::Query {
        pids: vec![2],
        ..Default::default()
    };
    for m in [
        whole(&two, Want::Stacks, &[w.clone()]),
        streamed(&two, Want::Functions, &[w.clone()]),
    ] {
        let t = m.session.totals.unwrap();
        assert_eq!((t.unsymbolized, t.truncated), (3, 1));
    }
    let both = api::Query {
        pids: vec![1, 2],
        ..Default::default()
    };
    let t = whole(&both, Want::Stacks, &[w]).session.totals.unwrap();
    assert_eq!((t.unsymbolized, t.truncated), (2193, 8));
}

/// `window`'s with process 1 in pod shop/web (container app) and process 2
/// in no pod, and service `db` beside it: process 3 in pod shop/db.
fn in_pods(id: &str) -> api::Window {
    let pod = |name: &str, uid: &str| api::KubernetesPod {
        namespace: "shop".into(),
        name: name.into(),
        uid: uid.into(),
        container: "app".into(),
    };
    let mut w = window(id, "web", 0, 200, 0);
    w.services[0].processes[0].pod = Some(pod("web", "u1"));
    let mut db = window(id, "db", 500, 100, 0).services.remove(0);
    db.processes = vec![api::WindowProcess {
        pid: 3,
        comm: "three".into(),
        pod: Some(pod("db", "u2")),
        totals: Some(api::Totals {
            truncated: 7,
            ..Default::default()
        }),
        ..Default::default()
    }];
    for t in &mut db.threads {
        t.pid = 3;
    }
    db.totals = Some(api::Totals {
        truncated: 7,
        ..Default::default()
    });
    w.services.push(db);
    w
}

/// The samples of each process in a merged profile.
fn per_pid(m: &Merged) -> HashMap<u32, u64> {
    m.session
        .processes
        .iter()
        .map(|p| (p.pid, p.samples))
        .collect()
}

#[test]
fn namespaces_and_pods_select_their_processes_only() {
    let windows = [in_pods("a"), in_pods("b")];
    let all = per_pid(&whole(&api::Query::default(), Want::Stacks, &windows));
    assert_eq!(all.len(), 3);
    let q = |namespaces: &[&str], pods: &[&str]| api::Query {
        namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
        pods: pods.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    let pick = |query: api::Query| per_pid(&whole(&query, Want::Stacks, &windows));
    let only = |pids: &[u32]| -> HashMap<u32, u64> { pids.iter().map(|p| (*p, all[p])).collect() };
    assert_eq!(pick(q(&["shop"], &[])), only(&[1, 3]));
    assert_eq!(pick(q(&[], &["web"])), only(&[1]));
    assert_eq!(pick(q(&[], &["shop/db"])), only(&[3]));
    assert_eq!(pick(q(&["shop"], &["web", "db"])), only(&[1, 3]));
    // The totals are the selected processes' own.
    let m = whole(&q(&[], &["db"]), Want::Stacks, &windows);
    let t = m.session.totals.unwrap();
    assert_eq!((t.attributed, t.truncated), (all[&3], 14));
    let m = whole(&q(&[], &["web"]), Want::Stacks, &windows);
    assert_eq!(m.session.totals.unwrap().truncated, 0);
    // Asked for but not there: NOT_FOUND, naming what is.
    let nope = q(&["nope"], &[]);
    let mut m = Merge::new(&nope, Want::Stacks);
    for w in &windows {
        m.add(w.clone());
    }
    let Err(Error::NotFound(e)) = m.finish(0, u64::MAX) else {
        panic!("found")
    };
    assert!(
        e.starts_with("no namespace \"nope\" in the history from "),
        "{e}"
    );
    assert!(e.ends_with(": the namespaces there are \"shop\""), "{e}");
    let api = q(&[], &["api"]);
    let mut m = Merge::new(&api, Want::Stacks);
    m.add(in_pods("a"));
    let Err(Error::NotFound(e)) = m.finish(0, u64::MAX) else {
        panic!("found")
    };
    assert!(
        e.ends_with(": the pods there are \"shop/db\", \"shop/web\""),
        "{e}"
    );
}

#[test]
fn a_profile_splits_by_pod() {
    let q = api::Query {
        by: api::GroupBy::Pod as i32,
        ..Default::default()
    };
    let m = whole(&q, Want::Stacks, &[in_pods("a")]);
    let mut groups: HashMap<String, u64> = HashMap::new();
    for s in &m.profile.stacks {
        let outer = s.frames.last().unwrap().function as usize;
        *groups
            .entry(m.profile.functions[outer].name.clone())
            .or_default() += s.count;
    }
    let all = per_pid(&whole(
        &api::Query::default(),
        Want::Stacks,
        &[in_pods("a")],
    ));
    assert_eq!(
        groups,
        HashMap::from([
            ("[pod shop/web]".to_string(), all[&1]),
            ("[pod none]".to_string(), all[&2]),
            ("[pod shop/db]".to_string(), all[&3]),
        ])
    );
}
