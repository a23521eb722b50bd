//! fleet_sim: the fleet's load on ClickHouse, simulated. Replays windows
//! recorded by a real `profd --continuous` as N hosts into two
//! `clickhouse-server` shards under `Distributed` tables (the schema of
//! `profd schema clickhouse --cluster shards`): the first hosts as the
//! sink's rows, more as copies made in ClickHouse. Measures the insert
//! rate (one INSERT per window and table, as the sink sends them, then
//! batched over many windows), the bytes per host-hour (sent, and on disk
//! per table), the latency of `profctl fleet` for one service over an
//! hour across all hosts, and whether the rollups answer as the raw
//! stacks do. Results: docs/fleet.md, "Scale".
//!
//! Run by `benches/fleet.sh`; not part of `cargo test`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use profctl::requests::fleet::{sql, Fleet, Selection};
use profd::internals::continuous::decode;
use profd::internals::sinks::{clickhouse_rows, clickhouse_schema, ClickHouseLayout};
use profd_common::api;
use profd_e2e::clickhouse::Server;

#[derive(Parser)]
#[command(about = "Replay recorded windows as N hosts into two ClickHouse shards")]
struct Args {
    /// A `--state-dir`'s `windows` directory: the recorded `*.window.gz`.
    #[arg(long)]
    windows: PathBuf,
    /// Simulated host counts, one run each. A run of more than
    /// `--real-hosts` measures them, then their rows copied in ClickHouse
    /// as more hosts up to `--raw-hosts`, then the hours table and windows
    /// copied up to its count.
    #[arg(long, value_delimiter = ',', default_value = "10,10000")]
    hosts: Vec<usize>,
    /// Hosts whose windows go through the sink's rows; a run's further
    /// hosts are copies of theirs.
    #[arg(long, default_value_t = 100)]
    real_hosts: usize,
    /// Hosts up to which the raw stacks and windows are copied (the
    /// materialized views filling the rollups); beyond, only the hours
    /// table and windows.
    #[arg(long, default_value_t = 1_000)]
    raw_hosts: usize,
    /// Hosts up to which the rollups' answer is compared with
    /// `--table raw`'s: at 1 000 hosts the raw query of an hour took more
    /// than 23 GB on the server.
    #[arg(long, default_value_t = 100)]
    exact_hosts: usize,
    /// Minutes of windows per host (60: the hour the query reads).
    #[arg(long, default_value_t = 60)]
    minutes: u64,
    /// At most this many windows through the sink's rows per run: fewer
    /// minutes per host when hosts × minutes would be more.
    #[arg(long, default_value_t = 36_000)]
    max_windows: usize,
    /// Seconds of one INSERT per window and table (the sink's way) at the
    /// start of each run; the rest goes batched.
    #[arg(long, default_value_t = 20)]
    per_window_seconds: u64,
    /// Windows per batched INSERT.
    #[arg(long, default_value_t = 200)]
    batch_windows: usize,
    /// Concurrent inserters (hosts or collectors), alternating between the
    /// two servers.
    #[arg(long, default_value_t = 4)]
    inserters: usize,
    /// Timed runs of each query.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// A fleet query whose first run takes longer is timed by that run
    /// alone, and profctl not run.
    #[arg(long, default_value_t = 15.0)]
    slow_query_seconds: f64,
    /// The profctl binary, for `profctl fleet`'s own latency.
    #[arg(long)]
    profctl: Option<PathBuf>,
    /// The service queried (default: the one with the most stack rows in
    /// the recording).
    #[arg(long)]
    service: Option<String>,
}

/// A deterministic 64-bit mix (splitmix64): ids and offsets per host.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The recorded whole windows (those with stacks), in time order, their
/// files' total size, and their span (ns).
fn load(dir: &Path) -> (Vec<api::Window>, u64, u64) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".window.gz"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let raw = std::fs::read(&f).unwrap();
        let w = decode(&raw).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        if w.services.iter().any(|s| !s.stacks.is_empty()) {
            out.push((w, raw.len() as u64));
        }
    }
    assert!(
        !out.is_empty(),
        "no window with stacks in {}",
        dir.display()
    );
    // Whole windows only: the first and last of a recording are cut short.
    let mut lens: Vec<u64> = out
        .iter()
        .map(|(w, _)| w.end_unix_ns - w.start_unix_ns)
        .collect();
    lens.sort();
    let len = lens[lens.len() / 2];
    let mut bytes = 0;
    let out: Vec<api::Window> = out
        .into_iter()
        .filter(|(w, _)| w.end_unix_ns - w.start_unix_ns >= len / 20 * 19)
        .map(|(w, b)| {
            bytes += b;
            w
        })
        .collect();
    (out, bytes, len)
}

/// A recorded window as a simulated host's: its own id, host name,
/// times, and the pids, tids and addresses a host of its own would have
/// (another ASLR layout).
fn as_host(w: &api::Window, v: &Variant) -> api::Window {
    let mut w = w.clone();
    w.id = v.id.clone();
    w.host = v.host.clone();
    w.start_unix_ns = v.start_ns;
    w.end_unix_ns = v.end_ns;
    let pid_shift = v.pid_shift as u32;
    for s in &mut w.services {
        for p in s.processes.iter_mut().filter(|p| p.pid != 0) {
            p.pid += pid_shift;
        }
        for t in &mut s.threads {
            if t.pid != 0 {
                t.pid += pid_shift;
            }
            t.tid += pid_shift;
        }
        for st in &mut s.stacks {
            st.tid += pid_shift;
            for a in &mut st.address {
                if *a != 0 {
                    *a = a.wrapping_add(v.aslr);
                }
            }
        }
    }
    w
}

/// What a simulated host's window changes in a recorded one.
struct Variant {
    id: String,
    host: String,
    start_ns: u64,
    end_ns: u64,
    pid_shift: u64,
    aslr: u64,
}

impl Variant {
    fn new(run: usize, h: usize, i: usize, start_ns: u64, len_ns: u64) -> Variant {
        let key = ((run as u64) << 48) ^ ((h as u64) << 24) ^ i as u64;
        let seed = mix(h as u64);
        Variant {
            id: format!("{:016x}{:016x}", mix(key), mix(!key)),
            host: format!("host-{h:05}.fleet.example"),
            start_ns,
            end_ns: start_ns + len_ns,
            pid_shift: seed % 30_000,
            aslr: (seed >> 20) & 0x7fff_ffff_f000,
        }
    }
}

/// The median and the 99th percentile (nearest rank: of fewer than 100
/// runs, the slowest).
fn median_p99(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let at = |q: f64| s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
    (at(0.5), at(0.99))
}

fn number(s: &Server, sql: &str) -> u64 {
    s.number(sql)
}

struct Run<'a> {
    servers: &'a [Server],
    recorded: &'a [api::Window],
    db: String,
    run: usize,
    hosts: usize,
    first_ns: u64,
    len_ns: u64,
}

impl Run<'_> {
    /// Job `j` in time order (step j / hosts, host j % hosts): the recorded
    /// window it replays, and as what.
    fn job(&self, j: usize) -> (usize, Variant) {
        let (i, h) = (j / self.hosts, j % self.hosts);
        // Neighbouring hosts replay different recorded windows.
        let r = (i + h * 7) % self.recorded.len();
        let start = self.first_ns + i as u64 * self.len_ns;
        (r, Variant::new(self.run, h, i, start, self.len_ns))
    }

    /// Job `j`'s rows as the sink writes them, appended: the frames of
    /// stacks not in `known` (which gets them), its stacks and its totals.
    fn rows(&self, j: usize, known: &mut HashSet<u64>, b: &mut Bodies) {
        let (r, v) = self.job(j);
        let rows = clickhouse_rows(&as_host(&self.recorded[r], &v));
        for (hash, line) in rows.frames {
            if known.insert(hash) {
                b.frames.extend_from_slice(&line);
            }
        }
        b.stacks.extend_from_slice(&rows.stacks);
        b.windows.extend_from_slice(&rows.windows);
    }

    fn insert(&self, server: usize, table: &str, body: &[u8]) {
        self.servers[server % self.servers.len()].query_with(
            &format!("INSERT INTO {table} FORMAT JSONEachRow"),
            &format!("&database={}&insert_distributed_sync=1", self.db),
            body,
        );
    }
}

/// POST `sql` to the server at `url` (http://127.0.0.1:PORT) with
/// `settings`, which must succeed: the length of its answer, read and let
/// go of (an answer may be larger than memory allows keeping).
fn answer_len(url: &str, sql: &str, settings: &str) -> usize {
    use std::io::{Read, Write};
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(1800))).unwrap();
    let target = format!("/?{}", settings.trim_start_matches('&'));
    write!(
        c,
        "POST {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{sql}",
        sql.len()
    )
    .unwrap();
    let mut head = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0;
    loop {
        let n = c.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        if head.len() < 4096 {
            head.extend_from_slice(&buf[..n.min(4096)]);
        }
        total += n;
    }
    let text = String::from_utf8_lossy(&head);
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "{sql}\n→ {}",
        text.chars().take(2000).collect::<String>()
    );
    // The whole answer less its head (chunk sizes counted: a few bytes a MiB).
    total - text.find("\r\n\r\n").map_or(0, |i| i + 4)
}

/// Windows whose rows are also gzip'd, for [`Inserted::gzip_ratio`].
const GZIP_SAMPLE: usize = 50;

/// The length of `b` gzip'd as the sink sends it (the fastest level).
fn gzip_len(b: &[u8]) -> u64 {
    use std::io::Write;
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(b).unwrap();
    z.finish().unwrap().len() as u64
}

/// The rows of a body.
fn lines(b: &[u8]) -> u64 {
    b.iter().filter(|&&c| c == b'\n').count() as u64
}

/// The recorded windows and their span (ns).
struct Recording {
    windows: Vec<api::Window>,
    len_ns: u64,
}

/// Request bodies of each table.
#[derive(Default)]
struct Bodies {
    frames: Vec<u8>,
    stacks: Vec<u8>,
    windows: Vec<u8>,
}

impl Bodies {
    fn clear(&mut self) {
        self.frames.clear();
        self.stacks.clear();
        self.windows.clear();
    }

    fn len(&self) -> usize {
        self.frames.len() + self.stacks.len() + self.windows.len()
    }
}

/// What a run inserted through the sink's rows.
#[derive(Default, Debug)]
struct Inserted {
    hosts: usize,
    minutes_per_host: f64,
    windows: usize,
    stack_rows: u64,
    // One INSERT per window and table.
    pw_windows: usize,
    pw_rows: u64,
    pw_secs: f64,
    // Batched.
    batch_windows: usize,
    batch_rows: u64,
    batch_secs: f64,
    sent_bytes: u64,
    /// gzip'd / raw, over the first windows sent.
    gzip_ratio: f64,
    gen_secs: f64,
    host_hours: f64,
}

/// How a stage's hosts got their rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    /// Every host's rows as the sink sends them.
    Sink,
    /// The sink's rows of the first hosts, copied in ClickHouse as more
    /// hosts into the raw `stacks` and `windows` (the materialized views
    /// fill the rollups).
    Raw,
    /// As `Raw` up to `--raw-hosts`, then only `stacks_hours` and
    /// `windows` copied: the raw and per-minute tables hold fewer hosts.
    Hours,
}

impl How {
    fn text(self) -> &'static str {
        match self {
            How::Sink => "sink rows",
            How::Raw => "raw rows copied in ClickHouse",
            How::Hours => "hours table and windows copied",
        }
    }
}

/// One stage's figures: the tables at so many hosts, and the query.
#[derive(Default, Debug)]
struct Stage {
    hosts: usize,
    how: Option<How>,
    host_hours: f64,
    /// Rows copied in ClickHouse to reach this stage, and the time taken.
    copied_rows: u64,
    copy_secs: f64,
    /// Per table: (name, rows, bytes on disk), both shards.
    tables: Vec<(String, u64, u64)>,
    parts: u64,
    service_hour_rows: u64,
    explain: String,
    sql_ms: Vec<f64>,
    profctl_ms: Vec<f64>,
    raw_ms: Option<f64>,
    /// The rollups' folded profile equals the raw stacks' one.
    exact: Option<bool>,
}

impl Stage {
    fn disk(&self) -> u64 {
        self.tables.iter().map(|t| t.2).sum()
    }
}

/// The host number of a simulated host name (`host-NNNNN.fleet.example`),
/// in SQL.
const HOST_NUMBER: &str = "toUInt32(substring(host, 6, 5))";

/// Copy the rows of hosts `0..from` of `table` in ClickHouse as hosts
/// `from..to` (copy `c` is host `c × from + h`), with their own window ids,
/// through the `Distributed` table so they land on their shards (and the
/// materialized views see them): the rows inserted.
fn copy_hosts(servers: &[Server], db: &str, table: &str, from: usize, to: usize) -> u64 {
    assert!(
        to.is_multiple_of(from),
        "--hosts {to} is not a multiple of {from} (--real-hosts or --raw-hosts)"
    );
    let local = format!("{table}_local");
    let columns: Vec<String> = servers[0]
        .query(
            &format!(
                "SELECT name FROM system.columns WHERE database = '{db}' AND table = '{local}' FORMAT TabSeparated"
            ),
            b"",
        )
        .lines()
        .map(str::to_string)
        .collect();
    let before = number(&servers[0], &format!("SELECT count() FROM {db}.{table}"));
    for c in 1..to / from {
        let exprs: Vec<String> = columns
            .iter()
            .map(|col| match col.as_str() {
                "host" => format!(
                    "concat('host-', substring(toString(100000 + {} + {HOST_NUMBER}), 2), '.fleet.example')",
                    c * from
                ),
                "window_id" => format!("concat(window_id, '.{c}')"),
                other => other.to_string(),
            })
            .collect();
        for s in servers {
            let q = format!(
                "INSERT INTO {db}.{table} ({}) SELECT {} FROM {db}.{local} WHERE {HOST_NUMBER} < {from}",
                columns.join(", "),
                exprs.join(", ")
            );
            answer_len(
                &s.url(),
                &q,
                &format!("&database={db}&insert_distributed_sync=1"),
            );
        }
        wait_for_merges(servers, db);
    }
    number(&servers[0], &format!("SELECT count() FROM {db}.{table}")) - before
}

/// Wait until no partition of `db` has more than 60 active parts on any
/// server (18.16 delays inserts at 150 and refuses them at 300).
fn wait_for_merges(servers: &[Server], db: &str) {
    let deadline = Instant::now() + Duration::from_secs(1800);
    for s in servers {
        loop {
            let most = number(
                s,
                &format!(
                    "SELECT max(c) FROM (SELECT count() AS c FROM system.parts \
                     WHERE database = '{db}' AND active GROUP BY table, partition)"
                ),
            );
            if most <= 60 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{most} active parts in a partition of {db} after 30 min of merging"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// The run's hosts through the sink's rows (the first `--real-hosts` of
/// them), then the stages copied in ClickHouse: its insert figures and
/// each stage's.
fn simulate(
    args: &Args,
    servers: &[Server],
    rec: &Recording,
    run: usize,
    hosts: usize,
    service: &str,
) -> (Inserted, Vec<Stage>) {
    let (recorded, len_ns) = (&rec.windows[..], rec.len_ns);
    let db = format!("sim{hosts}");
    let layout = ClickHouseLayout {
        database: db.clone(),
        cluster: Some("shards".into()),
        replicated: false,
    };
    let script = clickhouse_schema(&layout).unwrap();
    for s in servers {
        s.query(&format!("DROP DATABASE IF EXISTS {db}"), b"");
        for statement in script.split(';').filter(|s| !s.trim().is_empty()) {
            s.query(statement, b"");
        }
    }
    let real = hosts.min(args.real_hosts);
    let wanted = (args.minutes as usize * 60_000_000_000 / len_ns as usize).max(1);
    let steps = wanted.min((args.max_windows / real).max(1));
    // The span ends at a whole hour, so that a full hour is one bucket of
    // `stacks_hours`.
    let end_ns = now_ms() / 3_600_000 * 3_600_000 * 1_000_000;
    let r = Run {
        servers,
        recorded,
        db: db.clone(),
        run,
        hosts: real,
        first_ns: end_ns - steps as u64 * len_ns,
        len_ns,
    };
    let total = real * steps;
    let mut f = Inserted {
        hosts: real,
        minutes_per_host: steps as f64 * len_ns as f64 / 60e9,
        windows: total,
        ..Inserted::default()
    };
    eprintln!(
        "{hosts} hosts: {real} through the sink's rows, {steps} windows each ({:.1} min), {total} windows",
        f.minutes_per_host
    );
    let next = AtomicUsize::new(0);
    let tally = Mutex::new((0usize, 0u64, 0u64, 0f64)); // windows, rows, bytes, gen s
    let gzipped = Mutex::new((0u64, 0u64)); // raw, gzip'd
                                            // One INSERT per window and table, for a while.
    let budget = Duration::from_secs(args.per_window_seconds);
    let t0 = Instant::now();
    std::thread::scope(|scope| {
        for k in 0..args.inserters {
            let (r, next, tally, gzipped) = (&r, &next, &tally, &gzipped);
            scope.spawn(move || {
                // The stacks whose frames this inserter sent: as a sink
                // sends a stack's frames once, for the hosts it stands for.
                let mut known = HashSet::new();
                let mut b = Bodies::default();
                while t0.elapsed() < budget {
                    let j = next.fetch_add(1, Ordering::Relaxed);
                    if j >= total {
                        break;
                    }
                    let g = Instant::now();
                    b.clear();
                    r.rows(j, &mut known, &mut b);
                    let gen = g.elapsed().as_secs_f64();
                    if j < GZIP_SAMPLE {
                        let gz = gzip_len(&b.frames) + gzip_len(&b.stacks) + gzip_len(&b.windows);
                        let mut z = gzipped.lock().unwrap();
                        z.0 += b.len() as u64;
                        z.1 += gz;
                    }
                    // The sink's order: frames, stacks, then the totals.
                    if !b.frames.is_empty() {
                        r.insert(k, "frames", &b.frames);
                    }
                    r.insert(k, "stacks", &b.stacks);
                    r.insert(k, "windows", &b.windows);
                    let mut t = tally.lock().unwrap();
                    t.0 += 1;
                    t.1 += lines(&b.stacks);
                    t.2 += b.len() as u64;
                    t.3 += gen;
                }
            });
        }
    });
    f.pw_secs = t0.elapsed().as_secs_f64();
    let pw = *tally.lock().unwrap();
    f.pw_windows = pw.0;
    f.pw_rows = pw.1;
    let begin = next.load(Ordering::Relaxed).min(total);
    // The rest batched: many windows, of many hosts, in one INSERT a table.
    *tally.lock().unwrap() = (0, 0, 0, 0.0);
    let batches: Vec<(usize, usize)> = (begin..total)
        .step_by(args.batch_windows)
        .map(|a| (a, (a + args.batch_windows).min(total)))
        .collect();
    let next = AtomicUsize::new(0);
    let t1 = Instant::now();
    std::thread::scope(|scope| {
        for k in 0..args.inserters {
            let (r, next, tally, batches) = (&r, &next, &tally, &batches);
            scope.spawn(move || loop {
                let b = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(a, z)) = batches.get(b) else {
                    break;
                };
                let g = Instant::now();
                let mut b = Bodies::default();
                let mut known = HashSet::new();
                for j in a..z {
                    r.rows(j, &mut known, &mut b);
                }
                let gen = g.elapsed().as_secs_f64();
                if !b.frames.is_empty() {
                    r.insert(k, "frames", &b.frames);
                }
                r.insert(k, "stacks", &b.stacks);
                r.insert(k, "windows", &b.windows);
                let mut t = tally.lock().unwrap();
                t.0 += z - a;
                t.1 += lines(&b.stacks);
                t.2 += b.len() as u64;
                t.3 += gen;
            });
        }
    });
    f.batch_secs = t1.elapsed().as_secs_f64();
    let bt = *tally.lock().unwrap();
    f.batch_windows = bt.0;
    f.batch_rows = bt.1;
    f.sent_bytes = pw.2 + bt.2;
    let z = *gzipped.lock().unwrap();
    f.gzip_ratio = z.1 as f64 / z.0.max(1) as f64;
    f.gen_secs = pw.3 + bt.3;
    f.stack_rows = number(&servers[0], &format!("SELECT count() FROM {db}.stacks"));
    let windows_rows = number(&servers[0], &format!("SELECT count() FROM {db}.windows"));
    assert_eq!(
        windows_rows, total as u64,
        "every window's totals row arrived"
    );
    assert_eq!(
        f.stack_rows,
        pw.1 + bt.1,
        "every stack row arrived, through both shards"
    );
    f.host_hours = total as f64 * len_ns as f64 / 3600e9;
    let hour = |n: usize| n as f64 * steps as f64 * len_ns as f64 / 3600e9;
    let (from_s, to_s) = (r.first_ns / 1_000_000_000, end_ns / 1_000_000_000);
    eprintln!("{f:?}");
    let mut stages = Vec::new();
    stages.push(measure(
        args,
        servers,
        &db,
        service,
        (from_s, to_s),
        real,
        How::Sink,
        hour(real),
    ));
    // A stage of copies: `table` and the windows of hosts `0..from` copied
    // as hosts up to `to`, then measured.
    let copies = |table: &str, from: usize, to: usize, how: How| {
        let t = Instant::now();
        let copied = copy_hosts(servers, &db, table, from, to)
            + copy_hosts(servers, &db, "windows", from, to);
        let copy_secs = t.elapsed().as_secs_f64();
        let s = measure(
            args,
            servers,
            &db,
            service,
            (from_s, to_s),
            to,
            how,
            hour(to),
        );
        Stage {
            copied_rows: copied,
            copy_secs,
            ..s
        }
    };
    let raw = hosts.min(args.raw_hosts.max(real));
    if raw > real {
        stages.push(copies("stacks", real, raw, How::Raw));
    }
    if hosts > raw {
        stages.push(copies("stacks_hours", raw, hosts, How::Hours));
    }
    for s in servers {
        s.query(&format!("DROP DATABASE IF EXISTS {db}"), b"");
    }
    (f, stages)
}

/// The tables at `hosts` hosts, and `profctl fleet` for `service` over
/// `from_s..to_s`: timed, the tables it read (`--explain`), and, up to
/// `--exact-hosts` where the raw tables hold every host, whether its
/// folded profile equals the raw stacks' (`--table raw`).
#[allow(clippy::too_many_arguments)]
fn measure(
    args: &Args,
    servers: &[Server],
    db: &str,
    service: &str,
    (from_s, to_s): (u64, u64),
    hosts: usize,
    how: How,
    host_hours: f64,
) -> Stage {
    let mut st = Stage {
        hosts,
        how: Some(how),
        host_hours,
        ..Stage::default()
    };
    let mut tables: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for s in servers {
        let a = s.query(
            &format!(
                "SELECT table, sum(rows), sum(bytes_on_disk), count() FROM system.parts \
                 WHERE database = '{db}' AND active GROUP BY table FORMAT TabSeparated"
            ),
            b"",
        );
        for line in a.lines() {
            let v: Vec<&str> = line.split('\t').collect();
            let t = tables
                .entry(v[0].trim_end_matches("_local").to_string())
                .or_default();
            t.0 += v[1].parse::<u64>().unwrap();
            t.1 += v[2].parse::<u64>().unwrap();
            st.parts += v[3].parse::<u64>().unwrap();
        }
    }
    st.tables = tables.into_iter().map(|(k, (r, b))| (k, r, b)).collect();
    let quoted = service.replace('\'', "\\'");
    st.service_hour_rows = number(
        &servers[0],
        &format!("SELECT count() FROM {db}.stacks_hours WHERE service = '{quoted}'"),
    );
    let sel = Selection {
        services: vec![service.to_string()],
        from_ms: from_s * 1000,
        to_ms: to_s * 1000,
        ..Selection::default()
    };
    let q = sql(&sel, &Fleet::plan(&sel, now_ms()));
    let settings = format!("&database={db}");
    let timed = |q: &str| {
        let t = Instant::now();
        answer_len(&servers[0].url(), q, &settings);
        t.elapsed().as_secs_f64() * 1e3
    };
    let profctl = args
        .profctl
        .as_ref()
        .expect("--profctl names the binary timed");
    let (from, to) = (from_s.to_string(), to_s.to_string());
    let fleet = |extra: &[&str]| {
        let t = Instant::now();
        let out = Command::new(profctl)
            .args(["fleet", "--clickhouse", &servers[0].url(), "--database", db])
            .args(["--service", service, "--from", &from, "--to", &to])
            .args(extra)
            .stdin(Stdio::null())
            .output()
            .expect("profctl runs");
        assert!(
            out.status.success(),
            "profctl fleet {extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (t.elapsed().as_secs_f64() * 1e3, out)
    };
    // One untimed run, which reads from disk into the page cache and says
    // which tables answer.
    let (first, out) = fleet(&["--explain"]);
    st.explain = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if first > args.slow_query_seconds * 1e3 {
        st.profctl_ms.push(first);
        st.sql_ms.push(timed(&q));
    } else {
        for _ in 0..args.runs {
            st.sql_ms.push(timed(&q));
            st.profctl_ms.push(fleet(&[]).0);
        }
    }
    if how != How::Hours && hosts <= args.exact_hosts {
        let folded = |out: &std::process::Output| {
            let mut l: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_string)
                .collect();
            l.sort();
            l
        };
        let (_, auto) = fleet(&["--format", "folded"]);
        let (ms, raw) = fleet(&["--table", "raw", "--format", "folded"]);
        st.raw_ms = Some(ms);
        let (a, b) = (folded(&auto), folded(&raw));
        assert!(!a.is_empty(), "profctl fleet found no samples of {service}");
        st.exact = Some(a == b);
    }
    eprintln!("{st:?}");
    st
}

fn main() {
    let args = Args::parse();
    let (recorded, file_bytes, len_ns) = load(&args.windows);
    let per_hour = 3600e9 / len_ns as f64;
    // The service with the most stacks.
    let mut by_service: std::collections::HashMap<&str, usize> = Default::default();
    let (mut stacks, mut services) = (0usize, 0usize);
    for w in &recorded {
        services += w.services.len();
        for s in &w.services {
            stacks += s.stacks.len();
            *by_service.entry(&s.service).or_default() += s.stacks.len();
        }
    }
    let service = args.service.clone().unwrap_or_else(|| {
        by_service
            .iter()
            .max_by_key(|(_, n)| **n)
            .map(|(s, _)| s.to_string())
            .unwrap()
    });
    let n = recorded.len() as f64;
    println!(
        "recorded: {} windows of {:.1} s, {:.1} services and {:.0} stack rows a window; \
         window files {:.0} KiB a window = {:.1} MiB per host-hour (gzip'd protobuf)",
        recorded.len(),
        len_ns as f64 / 1e9,
        services as f64 / n,
        stacks as f64 / n,
        file_bytes as f64 / n / 1024.0,
        file_bytes as f64 / n * per_hour / (1 << 20) as f64
    );
    let mut listed: Vec<(&&str, &usize)> = by_service.iter().collect();
    listed.sort_by_key(|(_, n)| std::cmp::Reverse(**n));
    for (s, k) in listed {
        println!("  service {s}: {:.0} stack rows a window", *k as f64 / n);
    }
    println!("service queried: {service}");
    let rec = Recording {
        windows: recorded,
        len_ns,
    };
    let ports = Server::ports(2);
    let servers: Vec<Server> = (0..2)
        .map(|i| Server::start(&format!("sim{i}"), ports[i], &ports))
        .collect();
    println!(
        "ClickHouse {} ×2 on loopback (cluster `shards`, one shard each), {} CPUs",
        servers[0].query("SELECT version()", b"").trim(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let (mut inserted, mut stages) = (Vec::new(), Vec::new());
    for (run, &hosts) in args.hosts.iter().enumerate() {
        let (f, s) = simulate(&args, &servers, &rec, run, hosts, &service);
        inserted.push(f);
        stages.extend(s);
        print(&args, &service, &inserted, &stages);
    }
}

/// The tables of the runs so far.
fn print(args: &Args, service: &str, inserted: &[Inserted], stages: &[Stage]) {
    let mib = |b: f64| b / (1 << 20) as f64;
    println!();
    println!(
        "insert, the sink's rows (through the Distributed tables, insert_distributed_sync=1, {} inserters alternating between the servers):",
        args.inserters
    );
    println!(
        "| hosts | min/host | windows | stack rows | 1 INSERT/window/table: windows/s | rows/s | batched ({} windows/INSERT): windows/s | rows/s | generator CPU s | sent MiB/host-h | gzip'd |",
        args.batch_windows
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for f in inserted {
        println!(
            "| {} | {:.1} | {} | {} | {:.1} | {:.0} | {:.1} | {:.0} | {:.1} | {:.2} | {:.3} |",
            f.hosts,
            f.minutes_per_host,
            f.windows,
            f.stack_rows,
            f.pw_windows as f64 / f.pw_secs,
            f.pw_rows as f64 / f.pw_secs,
            f.batch_windows as f64 / f.batch_secs,
            f.batch_rows as f64 / f.batch_secs,
            f.gen_secs,
            mib(f.sent_bytes as f64 / f.host_hours),
            mib(f.sent_bytes as f64 * f.gzip_ratio / f.host_hours),
        );
    }
    println!();
    println!("tables (active parts of both shards; MiB per host-hour where every table holds every host):");
    let names: Vec<&str> = stages
        .first()
        .map(|s| s.tables.iter().map(|t| t.0.as_str()).collect())
        .unwrap_or_default();
    println!(
        "| hosts | rows | copied rows/s | all MiB/host-h | {} | parts |",
        names
            .iter()
            .map(|n| format!("{n}: rows | MiB/host-h"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    println!(
        "|---:|---|---:|---:|{}---:|",
        "---:|---:|".repeat(names.len())
    );
    for s in stages {
        let whole = s.how != Some(How::Hours);
        let per = |b: u64| {
            if whole {
                format!("{:.3}", mib(b as f64 / s.host_hours))
            } else {
                "-".into()
            }
        };
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            s.hosts,
            s.how.map_or("", How::text),
            if s.copy_secs > 0.0 {
                format!("{:.0}", s.copied_rows as f64 / s.copy_secs)
            } else {
                "-".into()
            },
            per(s.disk()),
            s.tables
                .iter()
                .map(|t| format!("{} | {}", t.1, per(t.2)))
                .collect::<Vec<_>>()
                .join(" | "),
            s.parts
        );
    }
    println!();
    println!(
        "query: profctl fleet --service {service} over the hour, all hosts ({} runs after one untimed, p99 by nearest rank):",
        args.runs
    );
    println!("| hosts | rows | tables (--explain) | service rows in stacks_hours | fleet SQL: median ms | p99 ms | profctl fleet: runs | median ms | p99 ms | --table raw: ms | rollups = raw |");
    println!("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for s in stages {
        let (sm, sp) = median_p99(&s.sql_ms);
        let (pm, pp) = median_p99(&s.profctl_ms);
        let tables: Vec<&str> = s
            .explain
            .lines()
            .filter_map(|l| l.split(':').next())
            .collect();
        println!(
            "| {} | {} | {} | {} | {:.0} | {:.0} | {} | {:.0} | {:.0} | {} | {} |",
            s.hosts,
            s.how.map_or("", How::text),
            tables.join(", "),
            s.service_hour_rows,
            sm,
            sp,
            s.profctl_ms.len(),
            pm,
            pp,
            s.raw_ms.map_or("-".into(), |m| format!("{m:.0}")),
            match s.exact {
                Some(true) => "equal",
                Some(false) => "DIFFERENT",
                None => "not checked",
            },
        );
    }
    for s in stages {
        println!("\n{} hosts, --explain:\n{}", s.hosts, s.explain);
    }
}
