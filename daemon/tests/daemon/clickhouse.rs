//! The ClickHouse schema and rows against real `clickhouse-server`s (Debian's
//! package, 18.16) started here on loopback: one server, and two shards
//! under `Distributed` tables; and against a current ClickHouse engine, in
//! process through chdb (Python).
use profd::internals::sinks::{clickhouse_rows, clickhouse_schema, ClickHouseLayout};
use profd_common::api;
use profd_e2e::clickhouse::Server;
use std::io::Write;
use std::process::{Command, Stdio};

/// A window of `host` at `start_s`: two services, stacks with recursion.
fn window(id: &str, host: &str, start_s: u64) -> api::Window {
    let f = |name: &str| api::WindowFunction {
        name: name.into(),
        module: "app".into(),
        ..Default::default()
    };
    let stack = |tid, function: Vec<u32>, count| api::WindowStack {
        tid,
        line: vec![0; function.len()],
        address: (0..function.len() as u64).collect(),
        function,
        count,
    };
    let service = |name: &str, pid: u32, stacks: Vec<api::WindowStack>| api::ServiceWindow {
        totals: None,
        service: name.into(),
        source: api::ServiceSource::Unit as i32,
        samples: stacks.iter().map(|s| s.count).sum(),
        processes: vec![api::WindowProcess {
            pid,
            comm: name.into(),
            // web runs in a Kubernetes pod, db outside one.
            pod: (name == "web.service").then(|| api::KubernetesPod {
                namespace: "shop".into(),
                name: "web-0".into(),
                uid: "0b1c".into(),
                container: "app".into(),
            }),
            ..Default::default()
        }],
        threads: vec![api::WindowThread {
            tid: pid,
            pid,
            name: name.into(),
            samples: stacks.iter().map(|s| s.count).sum(),
        }],
        functions: vec![f("leaf"), f("rec"), f("main")],
        stacks,
    };
    let services = vec![
        service(
            "web.service",
            10,
            vec![stack(10, vec![0, 1, 1, 2], 6), stack(10, vec![1, 2], 3)],
        ),
        service("db.service", 20, vec![stack(20, vec![0, 2], 5)]),
    ];
    api::Window {
        id: id.into(),
        start_unix_ns: start_s * 1_000_000_000,
        end_unix_ns: (start_s + 10) * 1_000_000_000,
        host: host.into(),
        kernel_release: "6.1".into(),
        frequency_hz: 19,
        totals: Some(api::Totals {
            attributed: 14,
            discarded: 3,
            ..Default::default()
        }),
        services,
        ..Default::default()
    }
}

/// The frames, stacks and totals rows of `w`, as the sink sends them.
fn bodies(w: &api::Window) -> [(&'static str, Vec<u8>); 3] {
    let rows = clickhouse_rows(w);
    let frames: Vec<u8> = rows.frames.into_iter().flat_map(|(_, l)| l).collect();
    [
        ("frames", frames),
        ("stacks", rows.stacks),
        ("windows", rows.windows),
    ]
}

/// Insert `w`'s rows; `settings`: URL parameters (`&name=value`).
fn insert(s: &Server, w: &api::Window, settings: &str) {
    for (table, rows) in bodies(w) {
        let sql = format!("INSERT INTO profd.{table} FORMAT JSONEachRow");
        s.query_with(&sql, settings, &rows);
    }
}

/// Samples of `service` on every host since `from_s`, each window's rows
/// counted once however often they were inserted.
fn service_samples(s: &Server, service: &str, from_s: u64) -> u64 {
    s.number(&format!(
        "SELECT sum(count) FROM (SELECT any(count) AS count FROM profd.stacks \
         WHERE service = '{service}' AND start >= toDateTime({from_s}) \
         GROUP BY window_id, service, stack)"
    ))
}

/// Samples whose stack holds `function` (once a sample, recursion or
/// not), its frames from the dictionary.
fn inclusive_sql(function: &str) -> String {
    format!(
        "SELECT sum(count) FROM (SELECT any(count) AS count, any(stack_hash) AS stack_hash \
         FROM profd.stacks GROUP BY window_id, service, stack) AS c \
         ALL INNER JOIN (SELECT stack_hash, any(functions) AS functions FROM profd.frames \
         GROUP BY stack_hash) AS d USING stack_hash WHERE has(functions, '{function}')"
    )
}

fn inclusive(s: &Server, function: &str) -> u64 {
    s.number(&inclusive_sql(function))
}

fn apply(s: &Server, layout: &ClickHouseLayout) {
    let script = clickhouse_schema(layout).unwrap();
    for statement in script.split(";\n").map(str::trim).filter(|t| !t.is_empty()) {
        s.query(statement, b"");
    }
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn the_schema_takes_windows_and_a_window_sent_twice_counts_once() {
    let ports = Server::ports(1);
    let s = Server::start("one", ports[0], &ports);
    let layout = ClickHouseLayout::default();
    apply(&s, &layout);
    // Twice: the statements may run again on an existing schema.
    apply(&s, &layout);
    let t = now_s() - 3600;
    let a = window("0a", "host-a", t);
    insert(&s, &a, "");
    insert(&s, &a, "");
    insert(&s, &window("0b", "host-a", t + 10), "");
    assert_eq!(service_samples(&s, "web.service", t), 18);
    assert_eq!(service_samples(&s, "db.service", t), 10);
    assert_eq!(service_samples(&s, "web.service", t + 10), 9);
    // rec is on web's two stacks (twice on the first): 9 samples a window.
    assert_eq!(inclusive(&s, "rec"), 18);
    assert_eq!(inclusive(&s, "leaf"), 22);
    assert_eq!(
        s.number("SELECT sum(attributed) FROM profd.windows FINAL"),
        28
    );
    let row = s.query(
        "SELECT host, pid, comm, thread, namespace, pod, pod_uid, container, functions, lines, \
         inlined FROM profd.stacks ALL INNER JOIN profd.frames USING stack_hash \
         WHERE window_id = '0a' AND service = 'web.service' AND stack = 0 LIMIT 1 FORMAT TabSeparated",
        b"",
    );
    assert_eq!(
        row,
        "host-a\t10\tweb.service\tweb.service\tshop\tweb-0\t0b1c\tapp\t\
         ['leaf','rec','rec','main']\t[0,0,0,0]\t[0,0,0,0]\n"
    );
    // A process outside a pod: empty pod columns. The schedule of a
    // window without one: on, a fraction of 1.
    let row = s.query(
        "SELECT namespace, pod, pod_uid, container FROM profd.stacks \
         WHERE service = 'db.service' LIMIT 1 FORMAT TabSeparated",
        b"",
    );
    assert_eq!(row, "\t\t\t\n");
    assert_eq!(
        s.query(
            "SELECT DISTINCT schedule_on, schedule_fraction FROM profd.windows FORMAT TabSeparated",
            b""
        ),
        "1\t1\n"
    );
    // The rollups hold what was inserted: window 0a twice (the sink sends
    // a window's stacks once; this test inserted them twice), 0b once.
    for table in ["stacks_minutes", "stacks_hours"] {
        assert_eq!(
            s.number(&format!(
                "SELECT sum(count) FROM profd.{table} WHERE service = 'web.service'"
            )),
            27,
            "{table}"
        );
    }
}

#[test]
fn two_shards_under_distributed_tables_answer_for_every_host() {
    let ports = Server::ports(2);
    let servers: Vec<Server> = (0..2)
        .map(|i| Server::start(&format!("shard{i}"), ports[i], &ports))
        .collect();
    let layout = ClickHouseLayout {
        cluster: Some("shards".into()),
        ..ClickHouseLayout::default()
    };
    for s in &servers {
        apply(s, &layout);
    }
    let t = now_s() - 600;
    let hosts: Vec<String> = (0..8).map(|i| format!("host-{i}")).collect();
    for (i, host) in hosts.iter().enumerate() {
        let w = window(&format!("{i:032x}"), host, t);
        // Sent twice, through either server; each insert returns once the
        // rows are on their shard.
        let sync = "&insert_distributed_sync=1";
        insert(&servers[i % 2], &w, sync);
        insert(&servers[(i + 1) % 2], &w, sync);
    }
    let rows = |s: &Server| s.number("SELECT count() FROM profd.stacks_local");
    let unique = |s: &Server| {
        s.number("SELECT count() FROM (SELECT 1 FROM profd.stacks_local GROUP BY window_id, service, stack)")
    };
    // Both copies arrived (unless a merge already dropped one)...
    assert!(rows(&servers[0]) + rows(&servers[1]) >= unique(&servers[0]) + unique(&servers[1]));
    assert_eq!(
        unique(&servers[0]) + unique(&servers[1]),
        3 * hosts.len() as u64
    );
    // Each host's rows are on one shard, and both shards hold some.
    for s in &servers {
        let n = s.number("SELECT uniqExact(host) FROM profd.stacks_local");
        assert!(n > 0 && n < hosts.len() as u64, "{n} hosts on one shard");
    }
    for s in &servers {
        assert_eq!(service_samples(s, "web.service", t), 9 * hosts.len() as u64);
        assert_eq!(service_samples(s, "db.service", t), 5 * hosts.len() as u64);
    }
}

/// The same statements, rows and queries in a current ClickHouse (chdb's
/// engine): the schema, JSONEachRow as profd writes it, and the counting
/// queries, from the script's standard input as JSON.
const CHDB: &str = r#"
import json, sys, tempfile
from chdb import session
job = json.load(sys.stdin)
s = session.Session(tempfile.mkdtemp())
for statement in job["schema"]:
    s.query(statement)
for table, rows in job["inserts"]:
    s.query(f"INSERT INTO profd.{table} FORMAT JSONEachRow\n" + rows)
print(json.dumps([str(s.query(q, "TabSeparated")).strip() for q in job["queries"]]))
"#;

#[test]
fn the_schema_and_queries_work_on_a_current_clickhouse_too() {
    let script = clickhouse_schema(&ClickHouseLayout::default()).unwrap();
    let schema: Vec<&str> = script
        .split(";\n")
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect();
    let t = now_s() - 3600;
    let mut inserts = Vec::new();
    for w in [
        window("0a", "host-a", t),
        window("0a", "host-a", t),
        window("0b", "host-b", t + 10),
    ] {
        for (table, rows) in bodies(&w) {
            inserts.push((table, String::from_utf8(rows).unwrap()));
        }
    }
    let queries = [
        format!(
            "SELECT sum(count) FROM (SELECT any(count) AS count FROM profd.stacks \
             WHERE service = 'web.service' AND start >= toDateTime({t}) GROUP BY window_id, service, stack)"
        ),
        inclusive_sql("rec"),
        "SELECT sum(attributed) FROM profd.windows FINAL".to_string(),
        "SELECT functions FROM profd.stacks ALL INNER JOIN profd.frames USING stack_hash \
         WHERE window_id = '0b' AND service = 'web.service' AND stack = 0 LIMIT 1"
            .to_string(),
        "SELECT sum(count) FROM profd.stacks_minutes WHERE service = 'web.service'".to_string(),
        "SELECT pod FROM profd.stacks WHERE window_id = '0b' AND service = 'web.service' LIMIT 1"
            .to_string(),
    ];
    let job = serde_json::json!({ "schema": schema, "inserts": inserts, "queries": queries });
    let mut child = Command::new("python3")
        .args(["-c", CHDB])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(job.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "chdb (pip install chdb; .ci/run does): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<String> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        answers,
        [
            "18",
            "18",
            "28",
            "['leaf','rec','rec','main']",
            "27",
            "web-0"
        ],
        "web samples, rec inclusive, attributed, one stack's functions, the minutes \
         (0a inserted twice), the pod"
    );
}
