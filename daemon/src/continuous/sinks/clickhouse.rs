//! The ClickHouse form of continuous windows: the schema (`profd schema
//! clickhouse`: the stack dictionary, raw rows and their rollups), one that
//! ClickHouse 18.16 and current releases both take, the statements that
//! move tables of the earlier layout to it, a window's rows as
//! `JSONEachRow`, and the sink that inserts them over the HTTP interface,
//! each window's stacks once.
use super::SetupError;
use super::{judge, stack_hash, unanswered, Failure, Secret, Sent};
use crate::config::sink_files::{Layout, NotPlain};
use crate::config::sinks as config;
use profd_common::api;
use profd_common::clickhouse_literal;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// One row per window and host: the window's totals, and its place in the
/// sampling schedule (`schedule_on` 0: the host was there, not
/// profiling).
const WINDOWS_COLUMNS: &str = "    window_id String,
    host String,
    kernel_release String,
    start_ns UInt64,
    end_ns UInt64,
    start DateTime,
    frequency_hz UInt32,
    event String,
    attributed UInt64,
    discarded UInt64,
    lost UInt64,
    throttled UInt64,
    truncated UInt64,
    unsymbolized UInt64,
    overflowed UInt64,
    cgroup_unreadable UInt64,
    processes_exited UInt64,
    binaries_replaced UInt64,
    schedule_on UInt8,
    schedule_fraction Float64,
    schedule_period_s UInt64,
    schedule_slot UInt64";

/// The stack dictionary: one row per distinct stack (per [`PERIOD_S`] in
/// which it was sent), its frames innermost first as parallel arrays, keyed
/// by [`stack_hash`]. `build_ids`: per frame, for code its host could not
/// name, its binary's GNU build id; empty for named frames.
const FRAMES_COLUMNS: &str = "    stack_hash UInt64,
    seen DateTime,
    functions Array(String),
    modules Array(String),
    files Array(String),
    lines Array(UInt32),
    inlined Array(UInt8),
    addresses Array(UInt64),
    build_ids Array(String)";

/// One row per unique stack of a thread in a window: who ran it (process,
/// thread, Kubernetes pod and container, empty outside one), the hash of
/// its frames in `frames`, and its count.
const STACKS_COLUMNS: &str = "    window_id String,
    host String,
    service String,
    start_ns UInt64,
    end_ns UInt64,
    start DateTime,
    pid UInt32,
    comm String,
    executable String,
    build_id String,
    tid UInt32,
    thread String,
    namespace String,
    pod String,
    pod_uid String,
    container String,
    stack UInt32,
    stack_hash UInt64,
    count UInt64";

/// A rollup of `stacks`: samples per service, host, minute and stack.
const MINUTES_COLUMNS: &str = "    service String,
    host String,
    minute DateTime,
    stack_hash UInt64,
    count UInt64";

/// A rollup of `stacks`: samples per service, host, hour and stack.
const HOURS_COLUMNS: &str = "    service String,
    host String,
    hour DateTime,
    stack_hash UInt64,
    count UInt64";

/// The span of a `frames` partition, in seconds (30 days), counted from
/// the Unix epoch whatever the server's time zone: the sink sends a
/// stack's frames once per span, so every span's partition holds the
/// frames of every stack its windows refer to.
pub const PERIOD_S: u64 = 30 * 24 * 3600;

/// Columns added to tables since they were first made, each after another:
/// a sink adds those a table made before lacks (ClickHouse 18.16 has no
/// `ADD COLUMN IF NOT EXISTS`; a column there already is an error of one
/// of [`COLUMN_EXISTS`]). (table, column, type, after.)
/// Windows sent before the schedule was profiling all the time: their
/// rows read as on, a fraction of 1.
const ADDED_COLUMNS: [(&str, &str, &str, &str); 4] = [
    (
        "windows",
        "schedule_on",
        "UInt8 DEFAULT 1",
        "binaries_replaced",
    ),
    (
        "windows",
        "schedule_fraction",
        "Float64 DEFAULT 1",
        "schedule_on",
    ),
    (
        "windows",
        "schedule_period_s",
        "UInt64",
        "schedule_fraction",
    ),
    ("windows", "schedule_slot", "UInt64", "schedule_period_s"),
];

/// The exception codes of `ADD COLUMN` on a column there already: 44
/// (ILLEGAL_COLUMN) on ClickHouse 18.16, 15 (DUPLICATE_COLUMN) on current
/// releases.
const COLUMN_EXISTS: [u32; 2] = [44, 15];

/// The code of the exception an error's text names: `Code: N` in an
/// answer's body (`Code: 44, e.displayText() = …` on 18.16, `Code: 15.
/// DB::Exception: …` since), or `exception N:` from the header
/// [`Sink::post`] reads.
fn exception_code(detail: &str) -> Option<u32> {
    ["Code: ", "exception "].iter().find_map(|tag| {
        let at = detail.find(tag)? + tag.len();
        let digits: String = detail[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    })
}

/// How a table merges rows of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Merge {
    /// Keeps one (a window or a stack sent twice).
    Replacing,
    /// Adds their `count` (the rollups).
    Summing,
}

/// A table of the schema.
pub struct Table {
    pub name: &'static str,
    columns: &'static str,
    merge: Merge,
    pub partition: &'static str,
    order: &'static str,
    /// The `Distributed` table's sharding key.
    shard: &'static str,
}

/// The tables. Raw rows are sharded by host: all of a host's rows, and
/// every copy of a window, land on one shard, with that host's rollups.
/// The dictionary is sharded by the hash: each stack's frames are on one
/// shard, however many hosts ran it.
pub const TABLES: [Table; 5] = [
    Table {
        name: "windows",
        columns: WINDOWS_COLUMNS,
        merge: Merge::Replacing,
        partition: "toDate(start)",
        order: "(host, start, window_id)",
        shard: "cityHash64(host)",
    },
    Table {
        name: "frames",
        columns: FRAMES_COLUMNS,
        merge: Merge::Replacing,
        partition: "intDiv(toUInt32(seen), 2592000)",
        order: "stack_hash",
        shard: "stack_hash",
    },
    Table {
        name: "stacks",
        columns: STACKS_COLUMNS,
        merge: Merge::Replacing,
        partition: "toDate(start)",
        order: "(service, start, host, window_id, stack)",
        shard: "cityHash64(host)",
    },
    Table {
        name: "stacks_minutes",
        columns: MINUTES_COLUMNS,
        merge: Merge::Summing,
        partition: "toDate(minute)",
        order: "(service, minute, host, stack_hash)",
        shard: "cityHash64(host)",
    },
    Table {
        name: "stacks_hours",
        columns: HOURS_COLUMNS,
        merge: Merge::Summing,
        partition: "toYYYYMM(hour)",
        order: "(service, hour, host, stack_hash)",
        shard: "cityHash64(host)",
    },
];

/// The rollups: table, time column, its bucket in seconds. A window's
/// samples go to the bucket its start lies in; buckets are whole minutes
/// and hours of Unix time, whatever the server's time zone.
pub const ROLLUPS: [(&str, &str, u64); 2] = [
    ("stacks_minutes", "minute", 60),
    ("stacks_hours", "hour", 3600),
];

/// A table's name on one server: `NAME_local` on a cluster.
fn local(layout: &Layout, table: &str) -> String {
    match &layout.cluster {
        Some(_) => format!("{table}_local"),
        None => table.to_string(),
    }
}

/// The statements that create the schema, in order, each without its `;`.
/// Raw tables are partitioned by day and sorted by service, then time, so
/// that "one service over the last hour on every host" reads a few
/// granules of one or two partitions. With a cluster, each server gets the
/// local tables (`stacks_local`, …), and the `Distributed` tables over
/// them. The rollups are filled on each server by materialized views of
/// its local `stacks`.
pub fn schema(layout: &Layout) -> Vec<String> {
    let db = &layout.database;
    let mut out = vec![format!("CREATE DATABASE IF NOT EXISTS {db}")];
    for t in &TABLES {
        let local = local(layout, t.name);
        let replicated = layout.replicated && layout.cluster.is_some();
        let path = format!("'/clickhouse/tables/{{shard}}/{db}/{local}', '{{replica}}'");
        let engine = match (t.merge, replicated) {
            (Merge::Replacing, true) => format!("ReplicatedReplacingMergeTree({path})"),
            (Merge::Replacing, false) => "ReplacingMergeTree()".into(),
            (Merge::Summing, true) => format!("ReplicatedSummingMergeTree({path}, (count))"),
            (Merge::Summing, false) => "SummingMergeTree((count))".into(),
        };
        let mut ddl = format!(
            "CREATE TABLE IF NOT EXISTS {db}.{local} (\n{}\n)\n",
            t.columns
        );
        let _ = write!(
            ddl,
            "ENGINE = {engine}\nPARTITION BY {}\nORDER BY {}",
            t.partition, t.order
        );
        out.push(ddl);
        if let Some(cluster) = &layout.cluster {
            out.push(format!(
                "CREATE TABLE IF NOT EXISTS {db}.{} AS {db}.{local}\n\
                 ENGINE = Distributed({cluster}, {db}, {local}, {})",
                t.name, t.shard
            ));
        }
    }
    let stacks = local(layout, "stacks");
    for (table, column, seconds) in ROLLUPS {
        out.push(format!(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.{table}_mv TO {db}.{}\n\
             AS SELECT service, host, toDateTime(intDiv(toUInt32(start), {seconds}) * {seconds}) AS {column}, \
             stack_hash, count FROM {db}.{stacks}",
            local(layout, table)
        ));
    }
    out
}

/// The statements that bring tables made before to the schema, in order:
/// each adds a column, and fails with an error of [`COLUMN_EXISTS`] where
/// the column is there already.
pub fn upgrades(layout: &Layout) -> Vec<String> {
    let db = &layout.database;
    let mut out = Vec::new();
    for (table, column, kind, after) in ADDED_COLUMNS {
        let mut names = vec![local(layout, table)];
        if layout.cluster.is_some() {
            names.push(table.to_string());
        }
        for name in names {
            out.push(format!(
                "ALTER TABLE {db}.{name} ADD COLUMN {column} {kind} AFTER {after}"
            ));
        }
    }
    out
}

/// The columns of the earlier `stacks` table (every row with its frames)
/// that the new one keeps, in the order both name them.
const KEPT_COLUMNS: &str =
    "window_id, host, service, start_ns, end_ns, start, pid, comm, executable, build_id, tid, thread, stack";

/// The statements that move a `stacks` table of the earlier layout (each
/// row with its frames' arrays) to the stack dictionary, in order: the
/// table is renamed `stacks_v1` (`stacks_v1_local` on a cluster) and kept;
/// the new tables are made; `windows` gets its new columns; each distinct
/// stack's frames go to `frames`, once per span of [`PERIOD_S`] it was
/// seen in; every row goes to the new `stacks` with its hash, each
/// (window, service, stack) once (`FINAL`), which fills the rollups. On a
/// cluster, run them on every server: each moves its own rows, and the
/// frames go to their shard through `frames`.
pub fn migrations(layout: &Layout) -> Vec<String> {
    let db = &layout.database;
    let old = local(layout, "stacks_v1");
    let stacks = local(layout, "stacks");
    let mut out = vec![format!("RENAME TABLE {db}.{stacks} TO {db}.{old}")];
    if layout.cluster.is_some() {
        // The Distributed table over the old one: its rows are in the local
        // tables.
        out.push(format!("DROP TABLE IF EXISTS {db}.stacks"));
    }
    out.extend(schema(layout));
    out.extend(upgrades(layout));
    let (hash, addresses) = (stack_hash::SQL, stack_hash::KEPT_ADDRESSES_SQL);
    out.push(format!(
        "INSERT INTO {db}.frames (stack_hash, seen, functions, modules, files, lines, inlined, addresses, build_ids)\n\
         SELECT h, min(t), any(f), any(m), any(fi), any(l), any(i), any(a), any(b) FROM (\n\
         SELECT {hash} AS h, start AS t, functions AS f, modules AS m, files AS fi, lines AS l, \
         inlined AS i, {addresses} AS a, build_ids AS b FROM {db}.{old})\n\
         GROUP BY h, intDiv(toUInt32(t), {PERIOD_S})"
    ));
    out.push(format!(
        "INSERT INTO {db}.{stacks} ({KEPT_COLUMNS}, stack_hash, count)\n\
         SELECT {KEPT_COLUMNS}, {hash}, count FROM {db}.{old} FINAL"
    ));
    out
}

/// The statements of [`migrations`] as a script (`profd schema clickhouse
/// --migrate`).
pub fn migration_script(layout: &Layout) -> Result<String, NotPlain> {
    layout.check()?;
    Ok(script(migrations(layout)))
}

/// The schema as a script: each statement ended by `;`.
pub fn schema_script(layout: &Layout) -> Result<String, NotPlain> {
    layout.check()?;
    Ok(script(schema(layout)))
}

/// The statements of [`upgrades`] as a script (`profd schema clickhouse
/// --upgrade`).
pub fn upgrade_script(layout: &Layout) -> Result<String, NotPlain> {
    layout.check()?;
    Ok(script(upgrades(layout)))
}

fn script(statements: Vec<String>) -> String {
    let mut s = String::new();
    for statement in statements {
        s.push_str(&statement);
        s.push_str(";\n\n");
    }
    s
}

/// A window as rows, each a JSON object on a line (as `INSERT ... FORMAT
/// JSONEachRow` reads them).
#[derive(Debug, Default)]
pub struct Rows {
    /// The `windows` row.
    pub windows: Vec<u8>,
    /// A `stacks` row per unique stack of every service.
    pub stacks: Vec<u8>,
    /// A `frames` row per distinct stack of the window, with its hash.
    pub frames: Vec<(u64, Vec<u8>)>,
}

/// A window as rows.
pub fn rows(w: &api::Window) -> Rows {
    let mut out = Rows::default();
    let t = w.totals.unwrap_or_default();
    // Unix seconds: what both old and current servers read as a DateTime.
    let start = w.start_unix_ns / 1_000_000_000;
    let event = api::Event::try_from(w.event)
        .map(|e| e.as_str_name().to_string())
        .unwrap_or_default();
    // A window without a schedule: its host profiles all the time.
    let schedule = w.schedule.unwrap_or(api::WindowSchedule {
        on: true,
        fraction: 1.0,
        ..Default::default()
    });
    let line = json!({
        "window_id": w.id,
        "host": w.host,
        "kernel_release": w.kernel_release,
        "start": start,
        "start_ns": w.start_unix_ns,
        "end_ns": w.end_unix_ns,
        "frequency_hz": w.frequency_hz,
        "event": event,
        "attributed": t.attributed,
        "discarded": t.discarded,
        "lost": t.lost,
        "throttled": t.throttled,
        "truncated": t.truncated,
        "unsymbolized": t.unsymbolized,
        "overflowed": t.overflowed,
        "cgroup_unreadable": w.cgroup_unreadable,
        "processes_exited": w.processes_exited,
        "binaries_replaced": w.binaries_replaced,
        "schedule_on": u8::from(schedule.on),
        "schedule_fraction": schedule.fraction,
        "schedule_period_s": schedule.period_s,
        "schedule_slot": schedule.slot,
    });
    push_line(&mut out.windows, &line);
    let mut seen = std::collections::HashSet::new();
    for s in &w.services {
        // A service may hold hundreds of processes and threads, and a
        // hundred thousand stacks.
        let threads: HashMap<u32, &api::WindowThread> =
            s.threads.iter().map(|t| (t.tid, t)).collect();
        let processes: HashMap<u32, &api::WindowProcess> =
            s.processes.iter().map(|p| (p.pid, p)).collect();
        for (i, stack) in s.stacks.iter().enumerate() {
            let thread = threads.get(&stack.tid);
            let pid = thread.map_or(0, |t| t.pid);
            let process = processes.get(&pid);
            let pod = process.and_then(|p| p.pod.as_ref());
            let f = |i: &u32| s.functions.get(*i as usize);
            let frames = stack.function.iter().enumerate().map(|(k, i)| {
                let f = f(i);
                stack_hash::Frame {
                    function: f.map_or("", |f| f.name.as_str()),
                    module: f.map_or("", |f| f.module.as_str()),
                    file: f.map_or("", |f| f.file.as_str()),
                    line: stack.line.get(k).copied().unwrap_or(0),
                    inlined: f.is_some_and(|f| f.inlined),
                    address: stack.address.get(k).copied().unwrap_or(0),
                    build_id: f.map_or("", |f| f.build_id.as_str()),
                }
                .kept()
            });
            let hash = stack_hash::of(frames.clone());
            if seen.insert(hash) {
                let frames: Vec<stack_hash::Frame> = frames.collect();
                let line = json!({
                    "stack_hash": hash,
                    "seen": start,
                    "functions": frames.iter().map(|f| f.function).collect::<Vec<_>>(),
                    "modules": frames.iter().map(|f| f.module).collect::<Vec<_>>(),
                    "files": frames.iter().map(|f| f.file).collect::<Vec<_>>(),
                    "lines": frames.iter().map(|f| f.line).collect::<Vec<_>>(),
                    "inlined": frames.iter().map(|f| u8::from(f.inlined)).collect::<Vec<_>>(),
                    "addresses": frames.iter().map(|f| f.address).collect::<Vec<_>>(),
                    "build_ids": frames.iter().map(|f| f.build_id).collect::<Vec<_>>(),
                });
                let mut bytes = Vec::new();
                push_line(&mut bytes, &line);
                out.frames.push((hash, bytes));
            }
            let line = json!({
                "window_id": w.id,
                "host": w.host,
                "service": s.service,
                "start": start,
                "start_ns": w.start_unix_ns,
                "end_ns": w.end_unix_ns,
                "pid": pid,
                "comm": process.map_or("", |p| p.comm.as_str()),
                "executable": process.map_or("", |p| p.executable.as_str()),
                "build_id": process.map_or("", |p| p.build_id.as_str()),
                "tid": stack.tid,
                "thread": thread.map_or("", |t| t.name.as_str()),
                "namespace": pod.map_or("", |p| p.namespace.as_str()),
                "pod": pod.map_or("", |p| p.name.as_str()),
                "pod_uid": pod.map_or("", |p| p.uid.as_str()),
                "container": pod.map_or("", |p| p.container.as_str()),
                "stack": i,
                "stack_hash": hash,
                "count": stack.count,
            });
            push_line(&mut out.stacks, &line);
        }
    }
    out
}

/// The columns of a table's statement: (name, type) in order.
fn columns(text: &str) -> Vec<(&str, &str)> {
    text.lines()
        .filter_map(|l| l.trim().trim_end_matches(',').split_once(' '))
        .collect()
}

/// The database a statement runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Database {
    /// The user's default one: the sink's may not exist yet.
    Default,
    /// The sink's.
    Sink,
}

/// A request's body, and how it is encoded.
enum Body {
    Plain(Vec<u8>),
    Gzip(Vec<u8>),
}

/// A ClickHouse server (or a cluster's `Distributed` tables) over HTTP.
pub struct Sink {
    client: reqwest::Client,
    url: reqwest::Url,
    database: String,
    user: Option<String>,
    key: Option<Secret>,
    create_schema: bool,
    schema_ready: AtomicBool,
    /// When this sink was made (Unix ns): a window that ended before was
    /// cut by an earlier run of the daemon, which may have sent it.
    started_ns: u64,
    /// Windows an attempt was made to send and not acknowledged.
    attempted: Mutex<HashSet<String>>,
    /// The stacks whose frames were sent in a span of [`PERIOD_S`], and
    /// that span.
    known: Mutex<(u64, HashSet<u64>)>,
}

/// At most this many stack hashes are remembered as sent (8 MiB); past
/// it, the frames are sent again.
const KNOWN_MAX: usize = 1 << 20;

impl Sink {
    pub fn new(s: &config::ClickHouseSettings) -> Result<Sink, SetupError> {
        let e = &s.entry;
        Ok(Sink {
            client: super::http_client(e.common.timeout, e.common.ca_file.as_deref())?,
            url: reqwest::Url::parse(&e.common.url).map_err(|err| format!("url: {err}"))?,
            database: e
                .database
                .clone()
                .unwrap_or_else(|| Layout::default().database),
            user: e.user.clone(),
            key: s.key.clone(),
            create_schema: e.create_schema.unwrap_or(true),
            schema_ready: AtomicBool::new(false),
            started_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            attempted: Mutex::default(),
            known: Mutex::default(),
        })
    }

    /// The server's URL with `query`, run in `database`.
    fn url(&self, query: Option<&str>, database: Database) -> reqwest::Url {
        let mut url = self.url.clone();
        if database == Database::Sink {
            url.query_pairs_mut()
                .append_pair("database", &self.database);
        }
        if let Some(q) = query {
            url.query_pairs_mut().append_pair("query", q);
        }
        url
    }

    /// Run statement `sql` in `database`; the answer's text. The statement
    /// travels as the body: a POST needs a length, which an empty body does
    /// not get.
    async fn run(&self, sql: &str, database: Database) -> Result<String, Failure> {
        let body = Body::Plain(sql.as_bytes().to_vec());
        self.post(self.url(None, database), body).await
    }

    /// `INSERT … FORMAT JSONEachRow` of `rows`, gzip'd (JSON rows shrink
    /// about 18 times; every release since 18.16 takes a gzip'd body): the
    /// bytes sent. Into a `Distributed` table it answers once the rows are
    /// on their shard (`insert_distributed_sync`), so that an insert cut
    /// off is either there to be seen or not at all.
    async fn insert(&self, sql: &str, rows: &[u8]) -> Result<u64, Failure> {
        let body = gzip(rows);
        let sent = body.len() as u64;
        let mut url = self.url(Some(sql), Database::Sink);
        url.query_pairs_mut()
            .append_pair("insert_distributed_sync", "1");
        self.post(url, Body::Gzip(body)).await?;
        Ok(sent)
    }

    async fn post(&self, url: reqwest::Url, body: Body) -> Result<String, Failure> {
        let mut request = match body {
            Body::Plain(body) => self.client.post(url).body(body),
            Body::Gzip(body) => self
                .client
                .post(url)
                .header(reqwest::header::CONTENT_ENCODING, "gzip")
                .body(body),
        };
        if let Some(user) = &self.user {
            request = request.header("X-ClickHouse-User", user);
        }
        if let Some(key) = &self.key {
            request = request.header("X-ClickHouse-Key", key.expose());
        }
        let answer = request.send().await.map_err(unanswered)?;
        let status = answer.status();
        // Current servers may answer 200 and name the error in a header.
        let failed = answer.headers().get("X-ClickHouse-Exception-Code").cloned();
        let text = answer.text().await.map_err(unanswered)?;
        judge(status, &text)?;
        match failed {
            Some(code) => Err(Failure::Retry(format!(
                "exception {}: {}",
                code.to_str().unwrap_or("?"),
                text.trim()
            ))),
            None => Ok(text),
        }
    }

    /// Check once that `stacks` is not of the earlier layout (frames in
    /// every row), whose windows wait until it is moved; and create the
    /// schema once (when `create_schema`): its statements all say IF NOT
    /// EXISTS.
    async fn ensure_schema(&self) -> Result<(), Failure> {
        if self.schema_ready.load(Ordering::Relaxed) {
            return Ok(());
        }
        let layout = Layout {
            database: self.database.clone(),
            ..Layout::default()
        };
        let earlier = format!(
            "SELECT count() FROM system.columns WHERE database = {} AND table = 'stacks' \
             AND name = 'functions' FORMAT TabSeparated",
            clickhouse_literal(&self.database)
        );
        if self.run(&earlier, Database::Default).await?.trim() != "0" {
            return Err(Failure::Retry(format!(
                "{}.stacks has the earlier layout (the frames in every row): move it to the \
                 stack dictionary with the statements of `profd schema clickhouse --migrate \
                 --database {}` (docs/fleet.md, \"Migration\")",
                self.database, self.database
            )));
        }
        if !self.create_schema {
            self.schema_ready.store(true, Ordering::Relaxed);
            return Ok(());
        }
        for statement in schema(&layout) {
            // A refused statement is the server's setup to mend: the
            // windows wait meanwhile.
            let run = self.run(&statement, Database::Default);
            run.await.map_err(|f| match f {
                Failure::Drop { detail, .. } => {
                    Failure::Retry(format!("creating the schema: {detail}"))
                }
                retry => retry,
            })?;
        }
        for statement in upgrades(&layout) {
            match self.run(&statement, Database::Default).await {
                Ok(_) => tracing::info!(%statement, "added a column to a table made before"),
                Err(Failure::Drop { detail, .. } | Failure::Retry(detail))
                    if exception_code(&detail).is_some_and(|c| COLUMN_EXISTS.contains(&c)) => {}
                Err(Failure::Drop { detail, .. }) => {
                    return Err(Failure::Retry(format!("upgrading the schema: {detail}")))
                }
                Err(retry) => return Err(retry),
            }
        }
        self.schema_ready.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Insert a window: the frames of its stacks the server may lack, its
    /// stacks, then its totals. The frames and totals are keyed, so
    /// inserting them again is harmless; the stacks feed the rollups, which
    /// would count them twice: a window that may have been sent before (an
    /// attempt of this run, or a window of an earlier run) has its stacks
    /// sent only when the server has none of them. They are one insert,
    /// one block on one shard, so the server has all of them or none.
    pub async fn send(&self, w: &api::Window) -> Result<Sent, Failure> {
        let sent = self.send_rows(w).await;
        // Sent, or dropped: it will not be sent again.
        if !matches!(sent, Err(Failure::Retry(_))) {
            self.attempted().remove(&w.id);
        }
        sent
    }

    async fn send_rows(&self, w: &api::Window) -> Result<Sent, Failure> {
        self.ensure_schema().await?;
        let r = rows(w);
        let retried = w.end_unix_ns <= self.started_ns || !self.attempted().insert(w.id.clone());
        let span = w.start_unix_ns / 1_000_000_000 / PERIOD_S;
        let mut frames = Vec::new();
        let mut hashes = Vec::new();
        {
            let known = self.known();
            for (hash, line) in &r.frames {
                if known.0 != span || !known.1.contains(hash) {
                    frames.extend_from_slice(line);
                    hashes.push(*hash);
                }
            }
        }
        let mut bytes = 0;
        let mut requests = 1;
        if !frames.is_empty() {
            bytes += self
                .insert("INSERT INTO frames FORMAT JSONEachRow", &frames)
                .await?;
            requests += 1;
            let mut known = self.known();
            if span > known.0 || known.1.len() + hashes.len() > KNOWN_MAX {
                *known = (span, HashSet::new());
            }
            if known.0 == span {
                known.1.extend(hashes);
            }
        }
        let there = retried && !r.stacks.is_empty() && self.has_stacks(w).await?;
        if !r.stacks.is_empty() && !there {
            bytes += self
                .insert("INSERT INTO stacks FORMAT JSONEachRow", &r.stacks)
                .await?;
            requests += 1;
        }
        bytes += self
            .insert("INSERT INTO windows FORMAT JSONEachRow", &r.windows)
            .await?;
        Ok(Sent {
            bytes,
            requests,
            ..Sent::default()
        })
    }

    /// Whether the server has the stack rows of window `w`.
    async fn has_stacks(&self, w: &api::Window) -> Result<bool, Failure> {
        let sql = format!(
            "SELECT count() FROM stacks WHERE host = {} AND window_id = {} \
             AND start = toDateTime({}) FORMAT TabSeparated",
            clickhouse_literal(&w.host),
            clickhouse_literal(&w.id),
            w.start_unix_ns / 1_000_000_000
        );
        let answer = self.run(&sql, Database::Sink).await?;
        Ok(answer.trim() != "0")
    }

    fn attempted(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.attempted.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn known(&self) -> std::sync::MutexGuard<'_, (u64, HashSet<u64>)> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Check the server now: reachable, the credentials taken, the tables
    /// there (created when `create_schema`) with the columns profd writes.
    /// Ok: the server's version.
    pub async fn probe(&self) -> Result<String, ProbeError> {
        let shown = |f: Failure| match f {
            Failure::Retry(why) => why,
            Failure::Drop { detail, .. } => detail,
        };
        let version = self
            .run("SELECT version()", Database::Default)
            .await
            .map_err(|f| ProbeError::Unreachable {
                url: self.url.to_string(),
                why: shown(f),
            })?;
        let failed = |f| ProbeError::Failed(shown(f));
        self.ensure_schema().await.map_err(failed)?;
        let found = self
            .run(
                &format!(
                    "SELECT table, name, type FROM system.columns WHERE database = currentDatabase() AND table IN ({}) FORMAT TabSeparated",
                    TABLES.iter().map(|t| clickhouse_literal(t.name)).collect::<Vec<_>>().join(", ")
                ),
                Database::Sink,
            )
            .await
            .map_err(failed)?;
        for Table {
            name: table,
            columns: text,
            ..
        } in TABLES
        {
            let have: Vec<(&str, &str)> = found
                .lines()
                .filter_map(|l| {
                    let mut f = l.splitn(3, '\t');
                    (f.next()? == table).then_some((f.next()?, f.next()?))
                })
                .collect();
            if have.is_empty() {
                return Err(ProbeError::NoTable {
                    database: self.database.clone(),
                    table,
                });
            }
            for (name, ty) in columns(text) {
                match have.iter().find(|(n, _)| *n == name) {
                    Some((_, t)) if *t == ty => {}
                    Some((_, t)) => {
                        return Err(ProbeError::ColumnType {
                            database: self.database.clone(),
                            table,
                            column: name.to_string(),
                            found: t.to_string(),
                            written: ty.to_string(),
                        })
                    }
                    None => {
                        return Err(ProbeError::NoColumn {
                            database: self.database.clone(),
                            table,
                            column: name.to_string(),
                        })
                    }
                }
            }
        }
        Ok(version.trim().to_string())
    }
}

/// Why a ClickHouse server cannot be used, as a check of it found.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// It cannot be reached or refused the first query (`why`).
    #[error("{url}: {why}")]
    Unreachable { url: String, why: String },
    /// A query of the check failed (`0`: why).
    #[error("{0}")]
    Failed(String),
    #[error("no table {database}.{table}: create it with `profd schema clickhouse --database {database}` (or set create_schema = true)")]
    NoTable {
        database: String,
        table: &'static str,
    },
    #[error("{database}.{table}.{column} is {found}, profd writes {written}: the table is not profd's schema (see `profd schema clickhouse`)")]
    ColumnType {
        database: String,
        table: &'static str,
        column: String,
        found: String,
        written: String,
    },
    #[error("{database}.{table} has no column {column}: the table is not profd's schema (see `profd schema clickhouse`)")]
    NoColumn {
        database: String,
        table: &'static str,
        column: String,
    },
}

/// `data` gzip'd (fast: rows are sent every window).
fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    // Writing to a Vec cannot fail.
    let _ = z.write_all(data);
    z.finish().unwrap_or_default()
}

fn push_line(out: &mut Vec<u8>, v: &serde_json::Value) {
    // Writing JSON to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, v);
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tables made before get the columns added since: on one server
    /// `windows`, on a cluster the local and the Distributed table.
    #[test]
    fn upgrades_add_the_columns_added_since() {
        let plain = upgrades(&Layout::default());
        assert_eq!(
            plain[0],
            "ALTER TABLE profd.windows ADD COLUMN schedule_on UInt8 DEFAULT 1 AFTER binaries_replaced"
        );
        assert_eq!(plain.len(), ADDED_COLUMNS.len());
        let cluster = upgrades(&Layout {
            database: "p".into(),
            cluster: Some("fleet".into()),
            ..Layout::default()
        });
        assert_eq!(cluster.len(), 2 * ADDED_COLUMNS.len());
        assert!(cluster[0].starts_with("ALTER TABLE p.windows_local ADD COLUMN schedule_on"));
        assert!(cluster[1].starts_with("ALTER TABLE p.windows ADD COLUMN schedule_on"));
        // Every column added is in the schema a new table gets.
        for (_, column, kind, _) in ADDED_COLUMNS {
            let kind = kind.split(' ').next().unwrap();
            assert!(WINDOWS_COLUMNS.contains(&format!("{column} {kind}")));
        }
    }

    /// A migration renames the earlier table before it makes the new one,
    /// and moves every row from the renamed one.
    #[test]
    fn a_migration_keeps_the_earlier_table_and_reads_it() {
        let plain = migrations(&Layout::default());
        assert_eq!(plain[0], "RENAME TABLE profd.stacks TO profd.stacks_v1");
        assert!(plain[1..].contains(&schema(&Layout::default())[3]));
        let moves = &plain[plain.len() - 2..];
        assert!(moves[0].starts_with("INSERT INTO profd.frames (stack_hash, seen,"));
        assert!(moves[0].contains("FROM profd.stacks_v1)"));
        assert!(moves[1].starts_with("INSERT INTO profd.stacks (window_id,"));
        assert!(moves[1].ends_with("FROM profd.stacks_v1 FINAL"));
        let cluster = migrations(&Layout {
            database: "p".into(),
            cluster: Some("two".into()),
            replicated: false,
        });
        assert_eq!(
            cluster[0],
            "RENAME TABLE p.stacks_local TO p.stacks_v1_local"
        );
        assert_eq!(cluster[1], "DROP TABLE IF EXISTS p.stacks");
        let moves = &cluster[cluster.len() - 2..];
        assert!(moves[0].starts_with("INSERT INTO p.frames ("));
        assert!(moves[0].contains("FROM p.stacks_v1_local)"));
        assert!(moves[1].starts_with("INSERT INTO p.stacks_local ("));
    }

    /// A column there already, as 18.16 and current servers say it, in
    /// the body or the header.
    #[test]
    fn the_code_of_an_exception_is_read_from_either_release() {
        let old = "500 Internal Server Error: Code: 44, e.displayText() = DB::Exception: Cannot add column build_ids: column with this name already exists, e.what() = DB::Exception";
        let current = "400 Bad Request: Code: 15. DB::Exception: Cannot add column `build_ids`: column with this name already exists. (DUPLICATE_COLUMN)";
        assert_eq!(exception_code(old), Some(44));
        assert_eq!(exception_code(current), Some(15));
        assert_eq!(
            exception_code("exception 15: Code: 15. DB::Exception"),
            Some(15)
        );
        assert_eq!(exception_code("Connection refused"), None);
        assert!([old, current]
            .iter()
            .all(|d| exception_code(d).is_some_and(|c| COLUMN_EXISTS.contains(&c))));
        assert!(!COLUMN_EXISTS.contains(&exception_code("Code: 440. x").unwrap()));
    }

    /// One server gets the tables and the rollups' views; a cluster the
    /// local tables, Distributed ones over them (raw rows and rollups by
    /// host, the dictionary by hash), and views of each server's own rows.
    #[test]
    fn a_cluster_gets_local_tables_and_distributed_ones() {
        let plain = schema(&Layout::default());
        assert_eq!(plain.len(), 1 + TABLES.len() + ROLLUPS.len());
        assert!(plain[3].starts_with("CREATE TABLE IF NOT EXISTS profd.stacks ("));
        assert!(plain[3].contains("ENGINE = ReplacingMergeTree()"));
        assert!(plain[3].ends_with("ORDER BY (service, start, host, window_id, stack)"));
        assert!(
            plain[4].contains("ENGINE = SummingMergeTree((count))\nPARTITION BY toDate(minute)")
        );
        assert!(plain[5].contains("PARTITION BY toYYYYMM(hour)"));
        assert_eq!(
            plain[6],
            "CREATE MATERIALIZED VIEW IF NOT EXISTS profd.stacks_minutes_mv TO profd.stacks_minutes\n\
             AS SELECT service, host, toDateTime(intDiv(toUInt32(start), 60) * 60) AS minute, \
             stack_hash, count FROM profd.stacks"
        );
        let cluster = schema(&Layout {
            database: "p".into(),
            cluster: Some("two".into()),
            replicated: true,
        });
        assert_eq!(cluster.len(), 1 + 2 * TABLES.len() + ROLLUPS.len());
        assert!(cluster[3].starts_with("CREATE TABLE IF NOT EXISTS p.frames_local ("));
        assert!(cluster[4].ends_with("ENGINE = Distributed(two, p, frames_local, stack_hash)"));
        assert!(cluster[5].starts_with("CREATE TABLE IF NOT EXISTS p.stacks_local ("));
        assert!(cluster[5].contains(
            "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/p/stacks_local', '{replica}')"
        ));
        assert_eq!(
            cluster[6],
            "CREATE TABLE IF NOT EXISTS p.stacks AS p.stacks_local\n\
             ENGINE = Distributed(two, p, stacks_local, cityHash64(host))"
        );
        assert!(cluster[9].contains(
            "ReplicatedSummingMergeTree('/clickhouse/tables/{shard}/p/stacks_hours_local', '{replica}', (count))"
        ));
        assert!(cluster[12].contains("TO p.stacks_hours_local\n"));
        assert!(cluster[12].ends_with("FROM p.stacks_local"));
    }

    #[test]
    fn names_are_plain_identifiers() {
        let bad = Layout {
            database: "a;DROP".into(),
            ..Layout::default()
        };
        assert!(schema_script(&bad)
            .unwrap_err()
            .to_string()
            .starts_with("database: "));
        let bad = Layout {
            cluster: Some("1x".into()),
            ..Layout::default()
        };
        assert!(schema_script(&bad)
            .unwrap_err()
            .to_string()
            .starts_with("cluster: "));
        assert!(schema_script(&Layout::default()).is_ok());
        assert!(upgrade_script(&bad).is_err());
    }

    #[test]
    fn a_window_is_one_totals_row_and_a_row_per_stack() {
        let w = api::Window {
            id: "ab".into(),
            start_unix_ns: 10_000_000_000,
            end_unix_ns: 20_000_000_000,
            host: "h".into(),
            totals: Some(api::Totals {
                attributed: 5,
                lost: 1,
                ..Default::default()
            }),
            services: vec![api::ServiceWindow {
                service: "web.service".into(),
                totals: None,
                samples: 5,
                source: api::ServiceSource::Unit as i32,
                processes: vec![api::WindowProcess {
                    pid: 7,
                    comm: "web".into(),
                    pod: Some(api::KubernetesPod {
                        namespace: "shop".into(),
                        name: "web-0".into(),
                        uid: "u-1".into(),
                        container: "app".into(),
                    }),
                    ..Default::default()
                }],
                threads: vec![
                    api::WindowThread {
                        tid: 8,
                        pid: 7,
                        name: "worker".into(),
                        samples: 5,
                    },
                    api::WindowThread {
                        tid: 9,
                        pid: 7,
                        name: "worker".into(),
                        samples: 2,
                    },
                ],
                functions: vec![
                    api::WindowFunction {
                        name: "leaf".into(),
                        module: "web".into(),
                        inlined: true,
                        ..Default::default()
                    },
                    api::WindowFunction {
                        name: "main".into(),
                        module: "web".into(),
                        ..Default::default()
                    },
                    api::WindowFunction {
                        name: "[unknown] 0x30".into(),
                        module: "web".into(),
                        build_id: "ab12".into(),
                        ..Default::default()
                    },
                ],
                stacks: vec![
                    api::WindowStack {
                        tid: 8,
                        function: vec![0, 1],
                        line: vec![3, 4],
                        address: vec![0x10, 0x20],
                        count: 4,
                    },
                    api::WindowStack {
                        tid: 8,
                        function: vec![2, 1],
                        line: vec![0, 4],
                        address: vec![0x30, 0x20],
                        count: 1,
                    },
                    api::WindowStack {
                        tid: 9,
                        function: vec![0, 1],
                        line: vec![3, 4],
                        address: vec![0x10, 0x20],
                        count: 2,
                    },
                ],
            }],
            ..Default::default()
        };
        let r = rows(&w);
        let lines = |bytes: &[u8]| -> Vec<serde_json::Value> {
            String::from_utf8(bytes.to_vec())
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        };
        let windows = lines(&r.windows);
        assert_eq!(windows.len(), 1);
        assert_eq!(windows[0]["attributed"], 5);
        assert_eq!(windows[0]["lost"], 1);
        // No schedule: the host profiles all the time.
        assert_eq!(windows[0]["schedule_on"], 1);
        assert_eq!(windows[0]["schedule_fraction"], 1.0);
        let stacks = lines(&r.stacks);
        assert_eq!(stacks.len(), 3);
        assert_eq!(stacks[0]["pid"], 7);
        assert_eq!(stacks[0]["comm"], "web");
        assert_eq!(stacks[0]["thread"], "worker");
        assert_eq!(stacks[0]["namespace"], "shop");
        assert_eq!(stacks[0]["pod"], "web-0");
        assert_eq!(stacks[0]["pod_uid"], "u-1");
        assert_eq!(stacks[0]["container"], "app");
        assert_eq!(stacks[1]["stack"], 1);
        // The same frames in another thread: one dictionary row.
        assert_eq!(stacks[2]["stack_hash"], stacks[0]["stack_hash"]);
        assert_ne!(stacks[1]["stack_hash"], stacks[0]["stack_hash"]);
        assert_eq!(r.frames.len(), 2);
        let frames: Vec<serde_json::Value> = r.frames.iter().flat_map(|(_, l)| lines(l)).collect();
        assert_eq!(frames[0]["stack_hash"], stacks[0]["stack_hash"]);
        assert_eq!(frames[0]["stack_hash"].as_u64(), Some(r.frames[0].0));
        assert_eq!(frames[0]["functions"], json!(["leaf", "main"]));
        assert_eq!(frames[0]["inlined"], json!([1, 0]));
        // Addresses of named frames differ from host to host: kept for
        // frames not named alone.
        assert_eq!(frames[0]["addresses"], json!([0, 0]));
        assert_eq!(frames[1]["addresses"], json!([0x30, 0]));
        assert_eq!(frames[0]["seen"], 10);
        assert_eq!(stacks[1]["count"], 1);
    }
}
