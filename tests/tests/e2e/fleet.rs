//! The fleet end to end: two `profd --continuous` daemons with host names
//! of their own push their windows through ClickHouse sinks into two real
//! `clickhouse-server` shards under `Distributed` tables (the schema as
//! `profd schema clickhouse --cluster` prints it), and `profctl fleet`
//! answers across both; through an outage of both servers and a daemon
//! restart, every window arrives, is inserted at most twice and counts
//! once; the same sink and `profctl fleet` work against a current
//! ClickHouse engine (chdb's, behind `tests/chdb_front.py`); stripped code
//! sent unnamed is named at query time from debug files (`--symbols`); a
//! Python service's functions and a Ruby service's methods reach the fleet
//! as their daemon names them. Root needed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::continuous::{info, list};
use crate::interpreters::{Runtime, PYTHON, RUBY};
use profd_common::api;
use profd_e2e::cgroups::Cgroup;
use profd_e2e::clickhouse::{Chdb, Server};
use profd_e2e::metrics::{sample, scrape};
use profd_e2e::views::go_pprof_flat;
use profd_e2e::{
    build_workload, path_str, require_root_and_perf, run_profctl, run_profd, serial, unique_dir,
    Daemon, Measure, Profile, Workload,
};

/// High enough for ±2 points over a few seconds of the workload.
const FREQ: &str = "999";
/// How long windows may take to reach ClickHouse once it answers (the
/// sinks back off up to 30 s between tries).
const DELIVERY: Duration = Duration::from_secs(120);

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Two shards, each with the local tables and the `Distributed` ones over
/// them, as `profd schema clickhouse --cluster shards` prints them.
fn two_shards() -> Vec<Server> {
    let ports = Server::ports(2);
    let servers: Vec<Server> = (0..2)
        .map(|i| Server::start(&format!("fleet{i}"), ports[i], &ports))
        .collect();
    let schema = run_profd(&["schema", "clickhouse", "--cluster", "shards"]);
    schema.assert_success();
    for s in &servers {
        for statement in schema.stdout.split(';').filter(|s| !s.trim().is_empty()) {
            s.query(statement, b"");
        }
    }
    servers
}

/// A daemon named `host`, continuous at [`FREQ`] in windows of 2 s over
/// the processes of `cg`, with a ClickHouse sink to `url` that makes the
/// schema if `create_schema` (else the cluster's is there).
fn daemon(host: &str, cg: &Cgroup, url: &str, create_schema: bool) -> Daemon {
    let config = unique_dir("fleet-config").join("profd.toml");
    std::fs::write(
        &config,
        format!(
            "[continuous]\nenabled = true\nfrequency = {FREQ}\nwindow = 2\nhost = \"{host}\"\n\
             select = [\"cgroup:{}\"]\n\n\
             [[sink]]\nkind = \"clickhouse\"\nname = \"shards\"\nurl = \"{url}\"\ncreate_schema = {create_schema}\n",
            cg.path(),
        ),
    )
    .unwrap();
    Daemon::start_with(&["--config", path_str(&config)])
}

/// Waits until `d` has cut its windows up to `t_s` (every sample before
/// it is in the history: a window without samples is not kept, so the
/// last window kept may end earlier) and its sink has nothing left to send.
fn wait_delivered(d: &Daemon, t_s: u64) -> api::SinkStatus {
    let deadline = Instant::now() + DELIVERY;
    loop {
        let windows = list(d.socket());
        let i = info(d.socket());
        let sink = i.sinks.first().cloned().expect("the daemon has its sink");
        let cut = windows.cut_until_unix_ns >= t_s * 1_000_000_000;
        if cut && sink.spool_windows == 0 && sink.windows_sent > 0 {
            return sink;
        }
        assert!(
            Instant::now() < deadline,
            "windows not delivered within {DELIVERY:?}: {sink:?}\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// `profctl query --from FROM --to TO ARGS --format json` on `d`.
fn query(d: &Daemon, range: (u64, u64), args: &[&str]) -> Profile {
    let (from, to) = (range.0.to_string(), range.1.to_string());
    let mut all = vec!["query", "--from", &from, "--to", &to];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--format", "json"]);
    let p = Profile::parse(&d.profctl(&all));
    eprintln!("{}", p.table());
    p
}

/// `profctl fleet --clickhouse URL --from FROM --to TO ARGS`.
fn fleet_text(url: &str, range: (u64, u64), args: &[&str]) -> profd_e2e::CmdOutput {
    let (from, to) = (range.0.to_string(), range.1.to_string());
    let mut all = vec!["fleet", "--clickhouse", url, "--from", &from, "--to", &to];
    all.extend_from_slice(args);
    run_profctl(&all, &[])
}

/// As [`fleet_text`], the profile as JSON.
fn fleet(url: &str, range: (u64, u64), args: &[&str]) -> Profile {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--format", "json"]);
    let p = Profile::parse(&fleet_text(url, range, &all));
    eprintln!("{}", p.table());
    p
}

/// Waits until the fleet's attributed samples over `range` reach `want`
/// (a Distributed insert reaches the other shard a moment later): the
/// fleet profile then.
fn fleet_when(url: &str, range: (u64, u64), want: u64) -> Profile {
    let deadline = Instant::now() + DELIVERY;
    loop {
        let p = fleet(url, range, &[]);
        if p.totals.attributed >= want || Instant::now() > deadline {
            return p;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// (name, inclusive, exclusive) of every function: what a table shows.
fn rows(p: &Profile) -> BTreeSet<(String, String, u64, u64)> {
    p.functions
        .iter()
        .map(|f| (f.name.clone(), f.module.clone(), f.inclusive, f.exclusive))
        .collect()
}

fn workload(cg: &Cgroup, seconds: &str) -> Workload {
    let mut cmd = cg.command(build_workload("split"));
    cmd.args([seconds, "--ready"]);
    Workload::start_command(cmd, "split")
}

/// The CPU time a split is measured over: at 999 Hz, 8000 samples, over
/// which a 25 % share's binomial standard deviation is 0.48 points, ±2
/// points over four of them, however loaded the machine.
const SPLIT_CPU: Duration = Duration::from_secs(8);

/// Runs `program` (a split workload) in `cg` until the group has used
/// [`SPLIT_CPU`] of CPU, then kills it.
fn run_for_split(cg: &Cgroup, program: &Path) {
    let mut cmd = cg.command(program);
    cmd.args(["600", "--ready"]);
    let name = program
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("split");
    let w = Workload::start_command(cmd, name);
    profd_e2e::wait_until("the group's CPU time", Duration::from_secs(600), || {
        (cg.cpu_time() >= SPLIT_CPU).then_some(())
    });
    drop(w);
}

/// The host-named window ids ClickHouse holds.
fn ids_in(server: &Server, host: &str) -> BTreeSet<String> {
    server
        .query(
            &format!("SELECT DISTINCT window_id FROM profd.windows WHERE host = '{host}' FORMAT TabSeparated"),
            b"",
        )
        .lines()
        .map(str::to_string)
        .collect()
}

/// Two daemons, two shards: the fleet's samples are exactly the sum of
/// the daemons' own, one host's fleet answer is that host's query, and
/// the workload's split holds across the fleet.
#[test]
fn two_daemons_into_two_shards_add_up_exactly() {
    let _serial = serial();
    require_root_and_perf();
    let servers = two_shards();
    let cg = Cgroup::new(&format!("profd-fleet-{}", std::process::id()));
    let a = daemon("fleet-a", &cg, &servers[0].url(), false);
    let b = daemon("fleet-b", &cg, &servers[1].url(), false);
    let from = now_s() - 1;
    run_for_split(&cg, &build_workload("split"));
    let to = now_s() + 1;
    wait_delivered(&a, to);
    wait_delivered(&b, to);
    let range = (from, to);
    let pa = query(&a, range, &[]);
    let pb = query(&b, range, &[]);
    let want = pa.totals.attributed + pb.totals.attributed;
    assert!(pa.totals.attributed > 999 * 2 && pb.totals.attributed > 999 * 2);
    let all = fleet_when(&servers[0].url(), range, want);
    assert_eq!(
        all.totals.attributed, want,
        "the fleet counts each daemon's samples once"
    );
    // Either server answers the same through its Distributed tables.
    let other = fleet(&servers[1].url(), range, &[]);
    assert_eq!(rows(&other), rows(&all));
    all.assert_pct_within("leaf_a", Measure::Exclusive, 25.0, 2.0);
    all.assert_pct_within("leaf_b", Measure::Exclusive, 75.0, 2.0);
    // One host's fleet answer is that host's own query.
    let only_a = fleet(&servers[1].url(), range, &["--host", "fleet-a"]);
    assert_eq!(only_a.totals.attributed, pa.totals.attributed);
    assert_eq!(rows(&only_a), rows(&pa));
    // Grouped by host: one outermost frame per daemon, with its samples.
    let by = fleet(&servers[0].url(), range, &["--by", "host"]);
    for (host, p) in [("fleet-a", &pa), ("fleet-b", &pb)] {
        let g = by.function(&format!("[host {host}]"));
        assert_eq!(g.inclusive, p.totals.attributed, "{host}");
    }
    // The table view and the caller view, as a session's.
    let table = fleet_text(&servers[0].url(), range, &["--service", cg.name()]);
    table.assert_success();
    assert!(
        table
            .stdout
            .starts_with("profd fleet — 2 hosts (fleet-a, fleet-b) — 1 service"),
        "{}",
        table.stdout
    );
    let callers = fleet_text(&servers[0].url(), range, &["--callers", "leaf_b"]);
    callers.assert_success();
    assert!(callers.stdout.contains("mid"), "{}", callers.stdout);
    // Exports as a session's: pprof as `go tool pprof` reads it, folded
    // stacks that add up to the samples.
    let file = unique_dir("fleet-pprof").join("fleet.pb.gz");
    fleet_text(
        &servers[0].url(),
        range,
        &["--format", "pprof", "-o", path_str(&file)],
    )
    .assert_success();
    let (flat, text) = go_pprof_flat(&file);
    assert_eq!(
        flat,
        all.exclusive_as_pprof_names(),
        "go tool pprof -top:\n{text}"
    );
    let folded = fleet_text(&servers[0].url(), range, &["--format", "folded"]);
    folded.assert_success();
    let summed: u64 = folded
        .stdout
        .lines()
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    assert_eq!(summed, want);
    // profctl info shows the sink's figures.
    let shown = a.profctl(&["info"]);
    assert!(
        shown.stdout.contains("sink shards:")
            && shown.stdout.contains("clickhouse http://127.0.0.1:"),
        "{}",
        shown.stdout
    );
}

/// Materialized views on `s` that keep a row for every row inserted into
/// its Distributed tables `windows` and `stacks`, in plain MergeTree
/// tables that merge nothing away: the rows as the sinks sent them there,
/// before they are forwarded to their shard (ClickHouse's own forwarding)
/// and before `ReplacingMergeTree` drops copies.
fn log_inserts(s: &Server) {
    for (table, columns) in [
        ("windows", "window_id, host"),
        ("stacks", "window_id, host, service, stack"),
    ] {
        s.query(
            &format!(
                "CREATE MATERIALIZED VIEW profd.{table}_inserts ENGINE = MergeTree() \
                 ORDER BY window_id AS SELECT {columns} FROM profd.{table}"
            ),
            b"",
        );
    }
}

/// How often each window of `host` was inserted into `s` ([`log_inserts`]),
/// by id: the copies of its totals row, and of its stacks (the most of any
/// one of them: the stacks are one insert).
fn inserted(s: &Server, host: &str) -> BTreeMap<String, (u64, u64)> {
    let mut copies: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let counts = |sql: String| -> Vec<(String, u64)> {
        s.query(&sql, b"")
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(id, n)| (id.to_string(), n.parse().unwrap()))
            .collect()
    };
    for (id, n) in counts(format!(
        "SELECT window_id, count() FROM profd.windows_inserts WHERE host = '{host}' \
         GROUP BY window_id FORMAT TabSeparated"
    )) {
        copies.entry(id).or_default().0 = n;
    }
    for (id, n) in counts(format!(
        "SELECT window_id, max(c) FROM (SELECT window_id, count() AS c \
         FROM profd.stacks_inserts WHERE host = '{host}' GROUP BY window_id, service, stack) \
         GROUP BY window_id FORMAT TabSeparated"
    )) {
        copies.entry(id).or_default().1 = n;
    }
    copies
}

/// Both servers down for 60 s while the daemons keep profiling, and one
/// daemon restarted meanwhile: once the servers are back, every window of
/// each daemon's history is in ClickHouse, and none counts twice in the
/// fleet's answer.
///
/// What reached each server is counted too, row by row ([`inserted`]),
/// against what the sink guarantees (`daemon/src/continuous/sinks/`): it
/// sends one window at a time, oldest first, as two inserts (the stacks,
/// then the totals), and takes the window out of its spool only once the
/// server has acknowledged both. A window is inserted again only when an
/// attempt was cut off after the server took some of it: the server killed
/// before its answer arrived, the request timed out (10 s), or the daemon
/// stopped mid-request (the window stays spooled and is sent after the
/// restart). While its server is down nothing of a window arrives. Here
/// each daemon's server is killed once, and `outage-b` restarts while the
/// servers are down; so every window of each daemon arrived at least once,
/// none more than twice, and at most one — the one in flight at the kill —
/// twice.
#[test]
fn an_outage_and_a_restart_lose_no_window_and_count_none_twice() {
    let _serial = serial();
    require_root_and_perf();
    let mut servers = two_shards();
    for s in &servers {
        log_inserts(s);
    }
    let cg = Cgroup::new(&format!("profd-outage-{}", std::process::id()));
    let a = daemon("outage-a", &cg, &servers[0].url(), false);
    let mut b = daemon("outage-b", &cg, &servers[1].url(), false);
    let from = now_s() - 1;
    let mut w = workload(&cg, "75");
    wait_delivered(&a, now_s() + 2);
    for s in &mut servers {
        s.stop();
    }
    let down = Instant::now();
    std::thread::sleep(Duration::from_secs(20));
    b.restart();
    while down.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_secs(1));
    }
    let waiting = info(a.socket()).sinks[0].clone();
    assert!(
        waiting.spool_windows > 0 && waiting.retries > 0 && !waiting.last_error.is_empty(),
        "windows wait while the servers are down: {waiting:?}"
    );
    for s in &mut servers {
        s.resume();
    }
    w.wait(Duration::from_secs(60));
    let to = now_s() + 1;
    let sa = wait_delivered(&a, to);
    wait_delivered(&b, to);
    assert!(sa.drops.is_empty(), "nothing dropped: {sa:?}");
    // A minute more on each side: the range holds whole minutes, which the
    // rollups answer for.
    let range = (from - 61, to + 61);
    let mut want = 0;
    for (d, host, server) in [(&a, "outage-a", &servers[0]), (&b, "outage-b", &servers[1])] {
        let kept: BTreeSet<String> = list(d.socket())
            .windows
            .iter()
            .map(|w| w.id.clone())
            .collect();
        let deadline = Instant::now() + DELIVERY;
        let mut there = ids_in(&servers[0], host);
        while !kept.is_subset(&there) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
            there = ids_in(&servers[0], host);
        }
        let missing: Vec<&String> = kept.difference(&there).collect();
        assert!(
            missing.is_empty(),
            "{host}: windows not in ClickHouse: {missing:?}"
        );
        let copies = inserted(server, host);
        let again: Vec<_> = copies.iter().filter(|(_, c)| c.0 > 1 || c.1 > 1).collect();
        eprintln!(
            "{host}: {} windows kept, {} inserted, {} of them again: {again:?}",
            kept.len(),
            copies.len(),
            again.len()
        );
        assert!(
            kept.iter()
                .all(|id| copies.get(id).is_some_and(|c| c.0 >= 1 && c.1 >= 1)),
            "{host}: every window kept was inserted, its totals and its stacks: {copies:?}"
        );
        assert!(
            again.len() <= 1 && again.iter().all(|(_, c)| c.0 <= 2 && c.1 <= 2),
            "{host}: windows inserted more than once (id, (totals rows, stacks copies)) — \
             only the one in flight when its server was killed may be, and once: {again:?}"
        );
        want += query(d, range, &[]).totals.attributed;
    }
    let all = fleet_when(&servers[1].url(), range, want);
    assert_eq!(all.totals.attributed, want, "every window once");
    all.assert_pct_within("leaf_a", Measure::Exclusive, 25.0, 2.0);
    // The rollups answered for the whole minutes, and count every window
    // once too: the answer is the raw stacks' alone, whole and split.
    let explained = fleet_text(
        &servers[1].url(),
        range,
        &["--explain", "--format", "folded"],
    );
    explained.assert_success();
    assert!(
        explained
            .stderr
            .contains("stacks_minutes: windows that begin in "),
        "{}",
        explained.stderr
    );
    rollups_answer_as_raw(&servers[0].url(), range, &[]);
}

/// `profctl fleet` over `range` from the rollups and raw edges (`--table
/// auto`) answers as the raw stacks alone (`--table raw`): the whole
/// profile, and split by host and by service.
fn rollups_answer_as_raw(url: &str, range: (u64, u64), args: &[&str]) {
    for by in [&[][..], &["--by", "host"], &["--by", "service"]] {
        let mut auto = args.to_vec();
        auto.extend_from_slice(by);
        let mut raw = auto.clone();
        raw.extend_from_slice(&["--table", "raw"]);
        let (auto, raw) = (fleet(url, range, &auto), fleet(url, range, &raw));
        assert_eq!(auto.totals.attributed, raw.totals.attributed, "{by:?}");
        assert_eq!(rows(&auto), rows(&raw), "{by:?}");
    }
}

/// The real `profctl fleet` and a daemon's real sink against a current
/// ClickHouse engine (chdb's, behind `tests/chdb_front.py`), as the tests
/// above run them against 18.16: `--check-config` finds it usable, the
/// sink makes the schema there and inserts its windows, and `profctl
/// fleet`'s answer is the daemon's own query, whole, by host, for one host,
/// for one service and per thread, from the raw stacks and from the
/// rollups. With every row inserted a second time (merges stopped, so both
/// copies stay) the raw stacks' answer is the same.
#[test]
fn the_fleet_query_runs_on_a_current_clickhouse() {
    let _serial = serial();
    require_root_and_perf();
    let ch = Chdb::start("fleet");
    let url = ch.url();
    let out = check(&sink_config(&url, ""));
    out.assert_success();
    assert!(
        out.stdout.contains("# sink ch: reachable (ClickHouse ")
            && !out.stdout.contains("(ClickHouse 18."),
        "{}",
        out.stdout
    );
    let cg = Cgroup::new(&format!("profd-current-{}", std::process::id()));
    let d = daemon("current", &cg, &url, true);
    let from = now_s() - 1;
    let mut w = workload(&cg, "6");
    w.wait(Duration::from_secs(30));
    let to = now_s() + 1;
    wait_delivered(&d, to);
    let range = (from, to);
    let own = query(&d, range, &[]);
    // Several windows of samples, whatever the machine's load.
    assert!(own.totals.attributed >= 500, "{}", own.table());
    let answers = |when: &str| {
        let all = fleet(&url, range, &["--table", "raw"]);
        assert_eq!(all.totals.attributed, own.totals.attributed, "{when}");
        assert_eq!(rows(&all), rows(&own), "{when}");
        let by = fleet(&url, range, &["--by", "host", "--table", "raw"]);
        let g = by.function("[host current]");
        assert_eq!(g.inclusive, own.totals.attributed, "{when}");
        let host = fleet(&url, range, &["--host", "current", "--table", "raw"]);
        assert_eq!(rows(&host), rows(&own), "{when}");
        let nobody = fleet_text(&url, range, &["--host", "nobody", "--table", "raw"]);
        assert!(
            !nobody.status.success() && nobody.stderr.contains("no samples"),
            "{when}: {nobody:?}"
        );
        let service = fleet(&url, range, &["--service", cg.name(), "--table", "raw"]);
        let own_service = query(&d, range, &["--service", cg.name()]);
        assert_eq!(rows(&service), rows(&own_service), "{when}");
        let threads = fleet_text(&url, range, &["--threads"]);
        threads.assert_success();
        let (f, t) = (from.to_string(), to.to_string());
        let own_threads = d.profctl(&["query", "--from", &f, "--to", &t, "--threads"]);
        own_threads.assert_success();
        let body = |text: &str| -> BTreeSet<String> {
            text.lines()
                .filter(|l| l.contains("split"))
                .map(str::to_string)
                .collect()
        };
        assert!(!body(&threads.stdout).is_empty(), "{}", threads.stdout);
        assert_eq!(
            body(&threads.stdout),
            body(&own_threads.stdout),
            "{when}:\n{}\n{}",
            threads.stdout,
            own_threads.stdout
        );
    };
    answers("inserted once");
    // A minute more on each side: whole minutes, which the rollups answer.
    let wide = (from - 61, to + 61);
    let explained = fleet_text(&url, wide, &["--explain", "--format", "folded"]);
    explained.assert_success();
    assert!(
        explained
            .stderr
            .contains("stacks_minutes: windows that begin in "),
        "{}",
        explained.stderr
    );
    rollups_answer_as_raw(&url, wide, &[]);
    // Every row twice: the raw stacks still count each (window, service,
    // stack) once (the rollups, filled at each insert, count what was
    // inserted: the sink sends a window's stacks once).
    for table in ["frames", "stacks", "windows"] {
        ch.query(&format!("SYSTEM STOP MERGES profd.{table}"), b"");
        let before = ch.number(&format!("SELECT count() FROM profd.{table}"));
        ch.query(
            &format!("INSERT INTO profd.{table} SELECT * FROM profd.{table}"),
            b"",
        );
        let after = ch.number(&format!("SELECT count() FROM profd.{table}"));
        assert_eq!(after, 2 * before, "{table}: every row twice");
    }
    answers("every row inserted twice");
}

/// `profd --config FILE --check-config`, FILE holding `text`.
fn check(text: &str) -> profd_e2e::CmdOutput {
    let config = unique_dir("fleet-check").join("profd.toml");
    std::fs::write(&config, text).unwrap();
    run_profd(&["--config", path_str(&config), "--check-config"])
}

/// A sink entry to `url`, continuous on, with `extra` keys.
fn sink_config(url: &str, extra: &str) -> String {
    format!(
        "[continuous]\nenabled = true\n\n[[sink]]\nkind = \"clickhouse\"\nname = \"ch\"\nurl = \"{url}\"\n{extra}"
    )
}

/// What is wrong with a sink is named at --check-config: a malformed
/// entry, a server that does not answer, credentials it refuses, tables
/// that are not profd's. A daemon whose backend is down starts, says so,
/// and keeps profiling, its windows spooled.
#[test]
fn bad_sink_settings_are_named_and_a_daemon_keeps_profiling() {
    let _serial = serial();
    require_root_and_perf();
    let ports = Server::ports(1);
    let server = Server::start("check", ports[0], &ports);
    let out = check(&sink_config(&server.url(), "kind2 = 1\n"));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains("sink[0].kind2: unknown key for a clickhouse sink")
            && out.stderr.contains("(line 8)"),
        "{}",
        out.stderr
    );
    // Nothing listens on this port (the server's native one speaks no HTTP:
    // take a fresh one).
    let closed = Server::ports(1)[0].0;
    let out = check(&sink_config(&format!("http://127.0.0.1:{closed}"), ""));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        out.stdout.contains("# sink ch: cannot be used:")
            && out.stderr.contains("Connection refused"),
        "{out:?}"
    );
    let secrets = unique_dir("fleet-secret");
    let key = secrets.join("ch.key");
    std::fs::write(&key, "not-the-password\n").unwrap();
    let out = check(&sink_config(
        &server.url(),
        &format!(
            "user = \"default\"\npassword_file = \"{}\"\n",
            key.display()
        ),
    ));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stderr.contains("password"), "{}", out.stderr);
    assert!(!out.stderr.contains("not-the-password") && !out.stdout.contains("not-the-password"));
    // Tables of another shape.
    server.query("CREATE DATABASE other", b"");
    server.query(
        "CREATE TABLE other.windows (window_id String, host UInt32) ENGINE = Memory",
        b"",
    );
    server.query(
        "CREATE TABLE other.stacks (window_id String) ENGINE = Memory",
        b"",
    );
    let out = check(&sink_config(
        &server.url(),
        "database = \"other\"\ncreate_schema = false\n",
    ));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains("other.windows.host is UInt32, profd writes String"),
        "{}",
        out.stderr
    );
    // The schema profd creates passes.
    let out = check(&sink_config(&server.url(), ""));
    out.assert_success();
    assert!(
        out.stdout
            .contains("# sink ch: reachable (ClickHouse 18.16"),
        "{}",
        out.stdout
    );
    // A running daemon whose backend is down keeps profiling.
    let cg = Cgroup::new(&format!("profd-down-{}", std::process::id()));
    let config = unique_dir("fleet-down").join("profd.toml");
    std::fs::write(
        &config,
        format!(
            "[continuous]\nenabled = true\nfrequency = {FREQ}\nwindow = 1\nselect = [\"cgroup:{}\"]\n\n\
             [[sink]]\nkind = \"clickhouse\"\nname = \"ch\"\nurl = \"http://127.0.0.1:{closed}\"\n",
            cg.path()
        ),
    )
    .unwrap();
    let scrape_at = format!("127.0.0.1:{}", Server::ports(1)[0].0);
    let d = Daemon::start_with(&["--config", path_str(&config), "--metrics", &scrape_at]);
    let mut w = workload(&cg, "3");
    w.wait(Duration::from_secs(30));
    let deadline = Instant::now() + Duration::from_secs(30);
    let sink = loop {
        let sink = info(d.socket()).sinks[0].clone();
        if sink.spool_windows >= 2 || Instant::now() > deadline {
            break sink;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        sink.spool_windows >= 2 && sink.windows_sent == 0,
        "{sink:?}"
    );
    assert!(sink.last_error.contains("Connection refused"), "{sink:?}");
    assert!(
        d.log().contains("the sink's backend cannot be used now"),
        "{}",
        d.log()
    );
    let p = Profile::parse(&d.profctl(&["query", "--format", "json"]));
    p.assert_pct_within("leaf_b", Measure::Exclusive, 75.0, 4.0);
    // The metrics say the same, per sink.
    let m = scrape(&scrape_at);
    let labels = "{sink=\"ch\",kind=\"clickhouse\"}";
    let waiting = sample(&m, &format!("profd_sink_spool_windows{labels}"));
    assert!(waiting >= 2.0, "{m}");
    assert!(
        sample(&m, &format!("profd_sink_retries_total{labels}")) >= 1.0,
        "{m}"
    );
    assert_eq!(
        sample(&m, &format!("profd_sink_windows_sent_total{labels}")),
        0.0
    );
    assert!(
        sample(&m, &format!("profd_sink_spool_bytes{labels}")) > 0.0,
        "{m}"
    );
}

/// A stripped program profiled continuously into a ClickHouse whose
/// `windows` table an earlier profd made (without the schedule's columns):
/// the sink adds the columns, the windows carry the build id of the program's
/// unnamed code, and `profctl fleet --symbols DIR` names it at query time
/// from the debug file there, with the workload's split; without
/// `--symbols` the same rows are the program's functions by address.
#[test]
fn stripped_code_is_named_at_query_time_from_debug_files() {
    let _serial = serial();
    require_root_and_perf();
    let (exe, split) = profd_e2e::debug_files::stripped_split("split_strip");
    let debug = split.dir;
    let ports = Server::ports(1);
    let server = Server::start("symbols", ports[0], &ports);
    let schema = run_profd(&["schema", "clickhouse"]);
    schema.assert_success();
    let earlier = schema.stdout.replace(
        "    binaries_replaced UInt64,\n    schedule_on UInt8,\n    schedule_fraction Float64,\n    \
         schedule_period_s UInt64,\n    schedule_slot UInt64\n",
        "    binaries_replaced UInt64\n",
    );
    assert_ne!(
        earlier, schema.stdout,
        "the schema has the schedule's columns"
    );
    for statement in earlier.split(';').filter(|s| !s.trim().is_empty()) {
        server.query(statement, b"");
    }
    let cg = Cgroup::new(&format!("profd-symbols-{}", std::process::id()));
    let config = unique_dir("symbols-config").join("profd.toml");
    std::fs::write(
        &config,
        format!(
            "[continuous]\nenabled = true\nfrequency = {FREQ}\nwindow = 2\nhost = \"stripped\"\n\
             select = [\"cgroup:{}\"]\n\n\
             [[sink]]\nkind = \"clickhouse\"\nname = \"ch\"\nurl = \"{}\"\n",
            cg.path(),
            server.url()
        ),
    )
    .unwrap();
    let d = Daemon::start_with(&["--config", path_str(&config)]);
    let from = now_s() - 1;
    run_for_split(&cg, &exe);
    let to = now_s() + 1;
    wait_delivered(&d, to);
    let range = (from, to);
    let own = query(&d, range, &[]);
    let unnamed = fleet_when(&server.url(), range, own.totals.attributed);
    assert_eq!(unnamed.totals.attributed, own.totals.attributed);
    assert!(
        unnamed
            .functions
            .iter()
            .any(|f| f.name.starts_with("split_strip!0x")),
        "the stripped program's functions by address:\n{}",
        unnamed.table()
    );
    assert!(unnamed.rows("leaf_a").is_empty(), "{}", unnamed.table());
    let added = server.number(
        "SELECT count() FROM system.columns WHERE database = 'profd' AND table = 'windows' \
         AND name LIKE 'schedule_%'",
    );
    assert_eq!(added, 4, "the sink added the schedule's columns");
    let named = fleet(&server.url(), range, &["--symbols", path_str(&debug)]);
    assert_eq!(named.totals.attributed, own.totals.attributed);
    named.assert_pct_within("leaf_a", Measure::Exclusive, 25.0, 2.0);
    named.assert_pct_within("leaf_b", Measure::Exclusive, 75.0, 2.0);
    named.assert_pct_within("mid", Measure::Inclusive, 75.0, 2.0);
    assert!(
        !named
            .functions
            .iter()
            .any(|f| f.name.starts_with("split_strip!")),
        "{}",
        named.table()
    );
    // A directory without the debug file names nothing, and says so.
    let empty = unique_dir("no-debug");
    let out = fleet_text(&server.url(), range, &["--symbols", path_str(&empty)]);
    out.assert_success();
    assert!(
        out.stderr.contains("no debug file for build id"),
        "{}",
        out.stderr
    );
}

/// A Python service's windows reach ClickHouse with its Python functions
/// in place of the interpreter's eval loop: `profctl fleet` answers the
/// daemon's own query exactly, with the split of the construction. The
/// range starts after the window the daemon met the process in (its
/// samples before are `[python: unreadable]`).
#[test]
fn python_functions_reach_the_fleet() {
    functions_reach_the_fleet(&PYTHON);
}

/// A Ruby service's windows reach ClickHouse with its Ruby methods in
/// place of the VM's loop, as the Python service's do.
#[test]
fn ruby_methods_reach_the_fleet() {
    functions_reach_the_fleet(&RUBY);
}

/// A service of `runtime` (Debian's interpreter) running its split
/// workload: its windows reach ClickHouse with the runtime's functions in
/// place of its loop, and `profctl fleet` answers as the daemon does.
fn functions_reach_the_fleet(runtime: &Runtime) {
    let _serial = serial();
    require_root_and_perf();
    let servers = two_shards();
    let tag = runtime.tag;
    let cg = Cgroup::new(&format!("profd-fleet-{tag}-{}", std::process::id()));
    let d = daemon(&format!("fleet-{tag}"), &cg, &servers[0].url(), false);
    let mut cmd = cg.command(runtime.binary);
    cmd.arg(runtime.script()).arg("8").arg("split");
    let mut w = Workload::start_command(cmd, runtime.comm);
    let met = profd_e2e::wait_until("a window of the service", DELIVERY, || {
        let l = list(d.socket());
        let seen = l.services.iter().any(|s| s.service == cg.name());
        seen.then_some(l.cut_until_unix_ns)
    });
    let from = met.div_ceil(1_000_000_000);
    w.wait(Duration::from_secs(60));
    let to = now_s() + 1;
    wait_delivered(&d, to);
    let range = (from, to);
    let own = query(&d, range, &["--service", cg.name()]);
    assert!(own.totals.attributed >= 2000, "{}", own.table());
    let all = fleet_when(&servers[0].url(), range, own.totals.attributed);
    assert_eq!(all.totals.attributed, own.totals.attributed);
    assert_eq!(rows(&all), rows(&own));
    for (function, share) in [("outer", 100.0), ("hot_a", 75.0), ("hot_b", 25.0)] {
        all.assert_pct_within(&runtime.name(function), Measure::Inclusive, share, 3.0);
    }
    assert_eq!(all.function(&runtime.name("hot_a")).module, runtime.module);
    assert!(
        (all.functions.iter()).all(|f| !f.name.contains(runtime.eval_loop)),
        "{}",
        all.table()
    );
}

/// The tables of database `db` as profd made them before the stack
/// dictionary, on a cluster `shards`: every stack row with its frames'
/// arrays, and windows without the schedule.
fn earlier_schema(db: &str) -> Vec<String> {
    let windows = "window_id String, host String, kernel_release String, start_ns UInt64, \
        end_ns UInt64, start DateTime, frequency_hz UInt32, event String, attributed UInt64, \
        discarded UInt64, lost UInt64, throttled UInt64, truncated UInt64, unsymbolized UInt64, \
        overflowed UInt64, cgroup_unreadable UInt64, processes_exited UInt64, binaries_replaced UInt64";
    let stacks = "window_id String, host String, service String, start_ns UInt64, end_ns UInt64, \
        start DateTime, pid UInt32, comm String, executable String, build_id String, tid UInt32, \
        thread String, stack UInt32, functions Array(String), modules Array(String), \
        files Array(String), lines Array(UInt32), inlined Array(UInt8), addresses Array(UInt64), \
        build_ids Array(String), count UInt64";
    let mut out = vec![format!("CREATE DATABASE {db}")];
    for (table, columns, order) in [
        ("windows", windows, "(host, start, window_id)"),
        ("stacks", stacks, "(service, start, host, window_id, stack)"),
    ] {
        out.push(format!(
            "CREATE TABLE {db}.{table}_local ({columns}) ENGINE = ReplacingMergeTree() \
             PARTITION BY toDate(start) ORDER BY {order}"
        ));
        out.push(format!(
            "CREATE TABLE {db}.{table} AS {db}.{table}_local \
             ENGINE = Distributed(shards, {db}, {table}_local, cityHash64(host))"
        ));
    }
    out
}

/// Tables of the earlier layout on two shards, filled the earlier way
/// (each stack row with its frames, and the addresses of named frames, as
/// hosts of other address layouts gave them) with a daemon's windows moved
/// 1, 2 and 3 hours on, as three hosts, the first copy inserted twice (a retried
/// window), which a sink refuses to write into, naming the migration;
/// then the statements of `profd schema clickhouse --migrate`.
/// Nothing is lost: each hour answers as the daemon's own query, the three
/// hours together (whole hours from `stacks_hours`, minutes and raw
/// edges) answer as the raw stacks do and add up to three times the
/// daemon's samples; the frames' hashes computed by the server are the
/// sink's; the earlier rows are kept.
#[test]
fn a_migration_from_the_earlier_layout_loses_nothing() {
    let _serial = serial();
    require_root_and_perf();
    let servers = two_shards();
    let cg = Cgroup::new(&format!("profd-migrate-{}", std::process::id()));
    let d = daemon("migrate", &cg, &servers[0].url(), false);
    let from = now_s() - 1;
    let mut w = workload(&cg, "4");
    w.wait(Duration::from_secs(30));
    let to = now_s() + 1;
    wait_delivered(&d, to);
    let own = query(&d, (from, to), &[]);
    assert!(own.totals.attributed >= 500, "{}", own.table());
    let sync = "&insert_distributed_sync=1";
    for s in &servers {
        for statement in earlier_schema("early") {
            s.query(&statement, b"");
        }
    }
    let frames = "SELECT stack_hash, any(functions) AS fs, any(modules) AS ms, any(files) AS fis, \
        any(lines) AS ls, any(inlined) AS ins, any(addresses) AS ads, any(build_ids) AS bis \
        FROM profd.frames GROUP BY stack_hash";
    for k in [1u64, 1, 2, 3] {
        let ns = k * 3600 * 1_000_000_000;
        servers[0].query_with(
            &format!(
                "INSERT INTO early.stacks SELECT concat(window_id, '-{k}'), concat(host, '-{k}'), \
                 service, start_ns + {ns}, end_ns + {ns}, start + {s}, pid, comm, executable, \
                 build_id, tid, thread, stack, fs, ms, fis, ls, ins, \
                 arrayMap((a, b) -> if(b = '', a + 4096, a), ads, bis), bis, count \
                 FROM (SELECT * FROM profd.stacks WHERE host = 'migrate') \
                 ALL INNER JOIN ({frames}) USING stack_hash",
                s = k * 3600
            ),
            sync,
            b"",
        );
        servers[0].query_with(
            &format!(
                "INSERT INTO early.windows SELECT concat(window_id, '-{k}'), concat(host, '-{k}'), \
                 kernel_release, start_ns + {ns}, end_ns + {ns}, start + {s}, frequency_hz, event, \
                 attributed, discarded, lost, throttled, truncated, unsymbolized, overflowed, \
                 cgroup_unreadable, processes_exited, binaries_replaced \
                 FROM profd.windows WHERE host = 'migrate'",
                s = k * 3600
            ),
            sync,
            b"",
        );
    }
    let earlier_rows = servers[0].number("SELECT count() FROM early.stacks");
    // A sink will not write into the earlier layout: it names the way on.
    for create in ["true", "false"] {
        let out = check(&sink_config(
            &servers[0].url(),
            &format!("database = \"early\"\ncreate_schema = {create}\n"),
        ));
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(
            out.stderr.contains("early.stacks has the earlier layout")
                && out
                    .stderr
                    .contains("profd schema clickhouse --migrate --database early"),
            "{}",
            out.stderr
        );
    }
    let migrate = run_profd(&[
        "schema",
        "clickhouse",
        "--migrate",
        "--cluster",
        "shards",
        "--database",
        "early",
    ]);
    migrate.assert_success();
    // Each statement on every server before the next: the frames go to
    // their shard through the Distributed table, which needs its local
    // table on every server.
    for statement in migrate.stdout.split(";\n").filter(|s| !s.trim().is_empty()) {
        for s in &servers {
            s.query_with(statement, sync, b"");
        }
    }
    let url = servers[1].url();
    let db = ["--database", "early"];
    for k in 1..=3 {
        let hour = (from + k * 3600, to + k * 3600);
        let p = fleet(&url, hour, &["--database", "early", "--table", "raw"]);
        assert_eq!(p.totals.attributed, own.totals.attributed, "hour {k}");
        assert_eq!(rows(&p), rows(&own), "hour {k}");
    }
    let hours = (from + 3600 - 1, to + 3 * 3600 + 1);
    let explained = fleet_text(&url, hours, &["--database", "early", "--explain"]);
    explained.assert_success();
    assert!(
        explained
            .stderr
            .contains("stacks_hours: windows that begin in "),
        "{}",
        explained.stderr
    );
    let all = fleet(&url, hours, &db);
    assert_eq!(all.totals.attributed, 3 * own.totals.attributed);
    let by = fleet(&url, hours, &["--database", "early", "--by", "host"]);
    for k in 1..=3 {
        let g = by.function(&format!("[host migrate-{k}]"));
        assert_eq!(g.inclusive, own.totals.attributed, "host migrate-{k}");
    }
    rollups_answer_as_raw(&url, hours, &db);
    // The server's hash of the earlier rows' frames is the sink's.
    let hashes = |database: &str| {
        servers[0].query(
            &format!("SELECT DISTINCT stack_hash FROM {database}.frames ORDER BY stack_hash"),
            b"",
        )
    };
    assert_eq!(hashes("early"), hashes("profd"));
    // The earlier rows are kept, and the windows have their new columns.
    let kept: u64 = servers
        .iter()
        .map(|s| s.number("SELECT count() FROM early.stacks_v1_local"))
        .sum();
    assert!(
        kept >= earlier_rows && earlier_rows > 0,
        "{kept} {earlier_rows}"
    );
    assert_eq!(
        servers[0]
            .number("SELECT countIf(schedule_on = 1 AND schedule_fraction = 1) FROM early.windows"),
        servers[0].number("SELECT count() FROM early.windows"),
        "windows of the earlier layout were profiled all the time"
    );
}

/// A stack row: window id, host, start (Unix s), service, namespace, pod,
/// stack hash, count.
type StackRow<'a> = (&'a str, &'a str, u64, &'a str, &'a str, &'a str, u64, u64);

/// Rows of the sink's shape in a real 18.16 server (one `windows` row
/// each: `(id, host, start_s, on)`), with stacks `(id, host, start_s,
/// service, namespace, pod, hash, count)` and their frames.
fn insert_rows(s: &Server, windows: &[(&str, &str, u64, bool)], stacks: &[StackRow]) {
    let mut body = String::new();
    for (id, host, start, on) in windows {
        body.push_str(
            &serde_json::json!({
                "window_id": id, "host": host, "start": start,
                "start_ns": start * 1_000_000_000, "end_ns": (start + 10) * 1_000_000_000,
                "frequency_hz": 19, "schedule_on": u8::from(*on), "schedule_fraction": 0.5,
                "schedule_period_s": 600, "schedule_slot": start / 600,
            })
            .to_string(),
        );
        body.push('\n');
    }
    s.query(
        "INSERT INTO profd.windows FORMAT JSONEachRow",
        body.as_bytes(),
    );
    let (mut rows, mut frames) = (String::new(), String::new());
    for (k, (id, host, start, service, namespace, pod, hash, count)) in stacks.iter().enumerate() {
        rows.push_str(
            &serde_json::json!({
                "window_id": id, "host": host, "service": service, "start": start,
                "start_ns": start * 1_000_000_000, "end_ns": (start + 10) * 1_000_000_000,
                "pid": 10, "tid": 10, "namespace": namespace, "pod": pod,
                "pod_uid": if pod.is_empty() { "" } else { "u-1" },
                "container": if pod.is_empty() { "" } else { "app" },
                "stack": k, "stack_hash": hash, "count": count,
            })
            .to_string(),
        );
        rows.push('\n');
        let leaf = if *hash == 1 { "web_leaf" } else { "db_leaf" };
        frames.push_str(
            &serde_json::json!({
                "stack_hash": hash, "seen": start, "functions": [leaf, "main"],
                "modules": ["app", "app"], "files": ["", ""], "lines": [0, 0],
                "inlined": [0, 0], "addresses": [0, 0], "build_ids": ["", ""],
            })
            .to_string(),
        );
        frames.push('\n');
    }
    s.query(
        "INSERT INTO profd.frames FORMAT JSONEachRow",
        frames.as_bytes(),
    );
    s.query(
        "INSERT INTO profd.stacks FORMAT JSONEachRow",
        rows.as_bytes(),
    );
}

/// `--namespace` and `--pod` select a pod's stacks (from the raw rows);
/// the header counts the hosts that profiled of those with windows (a
/// window of an off slot says its host was there), and
/// `--scale-to-fleet` scales the counts by them; `profctl retention`
/// drops the partitions past each table's keep, and only those.
#[test]
fn pods_select_coverage_scales_and_old_partitions_go() {
    let _serial = serial();
    let ports = Server::ports(1);
    let server = Server::start("pods", ports[0], &ports);
    let schema = run_profd(&["schema", "clickhouse"]);
    schema.assert_success();
    for statement in schema.stdout.split(';').filter(|s| !s.trim().is_empty()) {
        server.query(statement, b"");
    }
    let t = now_s() / 3600 * 3600 - 7200;
    let old = t - 40 * 24 * 3600;
    insert_rows(
        &server,
        &[
            ("a", "host-a", t, true),
            ("b", "host-b", t, true),
            ("c", "host-c", t, false),
            ("o", "host-a", old, true),
        ],
        &[
            ("a", "host-a", t, "web.service", "shop", "web-0", 1, 6),
            ("a", "host-a", t, "db.service", "", "", 2, 5),
            ("b", "host-b", t, "web.service", "shop", "web-1", 1, 4),
            ("o", "host-a", old, "web.service", "shop", "web-0", 1, 9),
        ],
    );
    let url = server.url();
    let range = (t, t + 3600);
    let shop = fleet(&url, range, &["--namespace", "shop"]);
    assert_eq!(shop.totals.attributed, 10);
    assert_eq!(shop.function("web_leaf").inclusive, 10);
    let pod = fleet(&url, range, &["--pod", "web-0", "--explain"]);
    assert_eq!(pod.totals.attributed, 6);
    let none = fleet_text(&url, range, &["--namespace", "nobody"]);
    assert!(
        !none.status.success() && none.stderr.contains("namespaces nobody"),
        "{none:?}"
    );
    let table = fleet_text(&url, range, &[]);
    table.assert_success();
    assert!(
        table
            .stdout
            .contains("\nsamples: 15 attributed\n2 of 3 hosts profiled over the range\n"),
        "{}",
        table.stdout
    );
    // 10 and 5 samples, times 3 hosts / 2 that profiled.
    let scaled = fleet(&url, range, &["--scale-to-fleet"]);
    assert_eq!(scaled.function("web_leaf").inclusive, 15);
    assert_eq!(scaled.function("db_leaf").inclusive, 8);
    // Retention: the raw rows and minutes 40 days old go, the hours and
    // the frames (kept a year) stay.
    let parts = |table: &str| {
        server.number(&format!(
            "SELECT uniqExact(partition) FROM system.parts WHERE database = 'profd' \
             AND table = '{table}' AND active"
        ))
    };
    let tables = || -> Vec<u64> {
        [
            "stacks",
            "windows",
            "stacks_minutes",
            "stacks_hours",
            "frames",
        ]
        .iter()
        .map(|t| parts(t))
        .collect()
    };
    let before = tables();
    assert!(before[..3].iter().all(|&n| n == 2), "{before:?}");
    let printed = run_profctl(&["retention", "--clickhouse", &url], &[]);
    printed.assert_success();
    let day = server.query(
        &format!("SELECT toDate(toDateTime({old})) FORMAT TabSeparated"),
        b"",
    );
    for table in ["stacks", "windows", "stacks_minutes"] {
        assert!(
            printed.stdout.contains(&format!(
                "ALTER TABLE profd.{table} DROP PARTITION '{}';",
                day.trim()
            )),
            "{}",
            printed.stdout
        );
    }
    assert_eq!(printed.stdout.lines().count(), 3, "{}", printed.stdout);
    assert_eq!(parts("stacks"), 2, "printing drops nothing");
    run_profctl(&["retention", "--clickhouse", &url, "--run"], &[]).assert_success();
    let after = tables();
    assert_eq!(after, [1, 1, 1, before[3], before[4]]);
    assert_eq!(fleet(&url, range, &[]).totals.attributed, 15);
}

/// A real daemon's Kubernetes labels and sampling schedule reach the rows:
/// a `split` workload in a kubepods cgroup (its pod named by a kubelet log
/// layout the test makes), profiled by a daemon with half the hosts on in
/// slots of 2 s and a ClickHouse sink:
/// - the stack rows carry the pod's namespace, name, UID and container;
/// - the window rows carry the schedule: each window's slot is its start's,
///   `schedule_on` is the documented draw for its host and slot, and the
///   windows of off slots have no samples;
/// - `profctl fleet --namespace --pod` answers exactly what the daemon's
///   own `profctl query --pod` does over the same range, and the header
///   says the one host profiled.
#[test]
fn a_daemon_s_pods_and_schedule_reach_the_rows() {
    use crate::kubernetes::{lay_out_pod_logs, link_container_log, CONTAINER, NAMESPACE, POD};
    let _serial = serial();
    require_root_and_perf();
    let ports = Server::ports(1);
    let server = Server::start("k8s", ports[0], &ports);
    let pid = std::process::id();
    let uid = format!("{pid:08x}-5e1f-4c2d-8b7a-6f5e4d3c2b1a");
    let id = format!("{pid:032x}{:032x}", now_s());
    let in_pod = Cgroup::nested(&format!("kubepods/besteffort/pod{uid}/{id}"));
    let logs = unique_dir("fleet-k8s-logs");
    let log = lay_out_pod_logs(&logs, &uid);
    link_container_log(&logs, &log, &id);
    let host = format!("k8s-{pid}");
    let config = unique_dir("fleet-config").join("profd.toml");
    std::fs::write(
        &config,
        format!(
            "[continuous]\nenabled = true\nfrequency = {FREQ}\nwindow = 1\nhost = \"{host}\"\n\
             select = [\"cgroup:{}\"]\nschedule = 0.5\nschedule_period = \"2s\"\n\
             kubelet_logs = \"{}\"\n\n\
             [[sink]]\nkind = \"clickhouse\"\nname = \"ch\"\nurl = \"{}\"\n",
            in_pod.path(),
            logs.display(),
            server.url(),
        ),
    )
    .unwrap();
    let from = now_s();
    let d = Daemon::start_with(&["--config", path_str(&config)]);
    let w = Workload::start_command(
        {
            let mut cmd = in_pod.command(build_workload("split"));
            cmd.args(["600", "--ready"]);
            cmd
        },
        "split",
    );
    let count = |sql: String| server.number(&sql);
    profd_e2e::wait_until(
        "windows of on and off slots and the pod's stacks in ClickHouse",
        DELIVERY * 3,
        || {
            let on = count(format!(
                "SELECT count() FROM profd.windows WHERE host = '{host}' AND schedule_on = 1"
            ));
            let off = count(format!(
                "SELECT count() FROM profd.windows WHERE host = '{host}' AND schedule_on = 0"
            ));
            let pod = count(format!(
                "SELECT count() FROM profd.stacks WHERE host = '{host}' AND namespace = '{NAMESPACE}' \
                 AND pod = '{POD}' AND pod_uid = '{uid}' AND container = '{CONTAINER}'"
            ));
            (on >= 2 && off >= 2 && pod > 0).then_some(())
        },
    );
    drop(w);
    let to = now_s() + 1;
    wait_delivered(&d, to);
    // Every stack row of the workload's pid carries the pod.
    let unlabelled = count(format!(
        "SELECT count() FROM profd.stacks WHERE host = '{host}' AND pod != '{POD}'"
    ));
    assert_eq!(unlabelled, 0, "stack rows of {host} without the pod");
    // Each window row's schedule.
    let rows = server.query(
        &format!(
            "SELECT toUInt64(start), schedule_slot, schedule_on, schedule_period_s, attributed \
             FROM profd.windows WHERE host = '{host}' FORMAT TSV"
        ),
        b"",
    );
    let mut kinds = BTreeMap::new();
    for line in rows.lines() {
        let v: Vec<u64> = line.split('\t').map(|x| x.parse().unwrap()).collect();
        let (start, slot, on, period, attributed) = (v[0], v[1], v[2], v[3], v[4]);
        assert_eq!(
            (slot, on == 1, period),
            (
                start / 2,
                profd_common::schedule::is_on(&host, start / 2, 0.5),
                2
            ),
            "window row {line}"
        );
        if on == 0 {
            assert_eq!(attributed, 0, "an off window with samples: {line}");
        }
        *kinds.entry(on).or_insert(0) += 1;
    }
    eprintln!("  window rows by schedule_on: {kinds:?}");
    let range = (from, to);
    let own = query(&d, range, &["--pod", POD]);
    let rows = fleet_when(&server.url(), range, own.totals.attributed);
    let by_pod = fleet(
        &server.url(),
        range,
        &["--namespace", NAMESPACE, "--pod", POD],
    );
    assert!(own.totals.attributed > 0);
    assert_eq!(rows.totals.attributed, own.totals.attributed);
    assert_eq!(by_pod.totals.attributed, own.totals.attributed);
    for f in ["leaf_a", "leaf_b"] {
        assert_eq!(
            (by_pod.function(f).exclusive, by_pod.function(f).inclusive),
            (own.function(f).exclusive, own.function(f).inclusive),
            "{f}"
        );
    }
    let text = fleet_text(&server.url(), range, &[]);
    text.assert_success();
    assert!(
        text.stdout
            .contains("\n1 of 1 hosts profiled over the range\n"),
        "{}",
        text.stdout
    );
}
