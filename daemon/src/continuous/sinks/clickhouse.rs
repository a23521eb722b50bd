//! The ClickHouse form of continuous windows: the schema (`profd schema
//! clickhouse`), one that ClickHouse 18.16 and current releases both take,
//! a window's rows as `JSONEachRow`, and the sink that inserts them over
//! the HTTP interface.
use super::SetupError;
use super::{judge, unanswered, Failure, Secret, Sent};
use crate::config::sink_files::{Layout, NotPlain};
use crate::config::sinks as config;
use profd_common::api;
use serde_json::json;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

/// One row per window and host: the window's totals.
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
    binaries_replaced UInt64";

/// One row per unique stack of a thread in a window: its frames innermost
/// first, as parallel arrays, and its count.
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
    stack UInt32,
    functions Array(String),
    modules Array(String),
    files Array(String),
    lines Array(UInt32),
    inlined Array(UInt8),
    addresses Array(UInt64),
    build_ids Array(String),
    count UInt64";

/// Columns added to `stacks` since it was first made, each after another:
/// a sink adds those a table made before lacks (ClickHouse 18.16 has no
/// `ADD COLUMN IF NOT EXISTS`; a column there already is an error of one
/// of [`COLUMN_EXISTS`]).
/// `build_ids`: per frame, for code its host could not name (a frame
/// `module!0xSTART`, or `module!0xADDRESS` where no unwind entry covers
/// it), its binary's GNU build id, so that `profctl fleet --symbols` names
/// it; empty for named frames.
const ADDED_COLUMNS: [(&str, &str, &str); 1] = [("build_ids", "Array(String)", "addresses")];

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

/// The two tables: name, columns, and sorting key. A window sent twice
/// has the same key on every row (its id, and each stack's place in its
/// service), so `ReplacingMergeTree` keeps one, and queries that group by
/// the key count it once before the merge.
const TABLES: [(&str, &str, &str); 2] = [
    ("windows", WINDOWS_COLUMNS, "(host, start, window_id)"),
    (
        "stacks",
        STACKS_COLUMNS,
        "(service, start, host, window_id, stack)",
    ),
];

/// The statements that create the schema, in order, each without its `;`.
/// Tables are partitioned by day and sorted by service, then time, so that
/// "one service over the last hour on every host" reads a few granules of
/// one or two partitions. With a cluster, each server gets the local tables
/// (`stacks_local`, `windows_local`), and the `Distributed` tables `stacks`
/// and `windows` over them, sharded by host: a window's rows, and its
/// copies, always land on the same shard.
pub fn schema(layout: &Layout) -> Vec<String> {
    let db = &layout.database;
    let mut out = vec![format!("CREATE DATABASE IF NOT EXISTS {db}")];
    for (table, columns, order) in TABLES {
        let local = match &layout.cluster {
            Some(_) => format!("{table}_local"),
            None => table.to_string(),
        };
        let engine = match layout.replicated && layout.cluster.is_some() {
            true => format!(
                "ReplicatedReplacingMergeTree('/clickhouse/tables/{{shard}}/{db}/{local}', '{{replica}}')"
            ),
            false => "ReplacingMergeTree()".into(),
        };
        let mut ddl = format!("CREATE TABLE IF NOT EXISTS {db}.{local} (\n{columns}\n)\n");
        let _ = write!(
            ddl,
            "ENGINE = {engine}\nPARTITION BY toDate(start)\nORDER BY {order}"
        );
        out.push(ddl);
        if let Some(cluster) = &layout.cluster {
            out.push(format!(
                "CREATE TABLE IF NOT EXISTS {db}.{table} AS {db}.{local}\n\
                 ENGINE = Distributed({cluster}, {db}, {local}, cityHash64(host))"
            ));
        }
    }
    out
}

/// The statements that bring a `stacks` table made before to the schema,
/// in order: each adds a column, and fails with an error of
/// [`COLUMN_EXISTS`] where the column is there already.
pub fn upgrades(layout: &Layout) -> Vec<String> {
    let db = &layout.database;
    let tables = match &layout.cluster {
        Some(_) => vec!["stacks_local", "stacks"],
        None => vec!["stacks"],
    };
    let mut out = Vec::new();
    for table in tables {
        for (column, kind, after) in ADDED_COLUMNS {
            out.push(format!(
                "ALTER TABLE {db}.{table} ADD COLUMN {column} {kind} AFTER {after}"
            ));
        }
    }
    out
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

/// A window as rows: `windows` gets one line, `stacks` one per unique
/// stack of every service (JSON objects, one a line, as `INSERT ...
/// FORMAT JSONEachRow` reads them).
pub fn rows(w: &api::Window, windows: &mut Vec<u8>, stacks: &mut Vec<u8>) {
    let t = w.totals.unwrap_or_default();
    // Unix seconds: what both old and current servers read as a DateTime.
    let start = w.start_unix_ns / 1_000_000_000;
    let event = api::Event::try_from(w.event)
        .map(|e| e.as_str_name().to_string())
        .unwrap_or_default();
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
    });
    push_line(windows, &line);
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
            let f = |i: &u32| s.functions.get(*i as usize);
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
                "stack": i,
                "functions": stack.function.iter().map(|i| f(i).map_or("", |f| f.name.as_str())).collect::<Vec<_>>(),
                "modules": stack.function.iter().map(|i| f(i).map_or("", |f| f.module.as_str())).collect::<Vec<_>>(),
                "files": stack.function.iter().map(|i| f(i).map_or("", |f| f.file.as_str())).collect::<Vec<_>>(),
                "lines": stack.line,
                "inlined": stack.function.iter().map(|i| u8::from(f(i).is_some_and(|f| f.inlined))).collect::<Vec<_>>(),
                "addresses": stack.address,
                "build_ids": stack.function.iter().map(|i| f(i).map_or("", |f| f.build_id.as_str())).collect::<Vec<_>>(),
                "count": stack.count,
            });
            push_line(stacks, &line);
        }
    }
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
}

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
    /// bytes sent.
    async fn insert(&self, sql: &str, rows: &[u8]) -> Result<u64, Failure> {
        let body = gzip(rows);
        let sent = body.len() as u64;
        self.post(self.url(Some(sql), Database::Sink), Body::Gzip(body))
            .await?;
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

    /// Create the schema once (when `create_schema`): its statements all
    /// say IF NOT EXISTS.
    async fn ensure_schema(&self) -> Result<(), Failure> {
        if !self.create_schema || self.schema_ready.load(Ordering::Relaxed) {
            return Ok(());
        }
        let layout = Layout {
            database: self.database.clone(),
            ..Layout::default()
        };
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

    /// Insert a window: its stacks, then its totals. Inserting it again is
    /// harmless (the schema's key).
    pub async fn send(&self, w: &api::Window) -> Result<Sent, Failure> {
        self.ensure_schema().await?;
        let (mut windows, mut stacks) = (Vec::new(), Vec::new());
        rows(w, &mut windows, &mut stacks);
        let mut bytes = 0;
        let mut requests = 0;
        if !stacks.is_empty() {
            bytes += self
                .insert("INSERT INTO stacks FORMAT JSONEachRow", &stacks)
                .await?;
            requests += 1;
        }
        bytes += self
            .insert("INSERT INTO windows FORMAT JSONEachRow", &windows)
            .await?;
        Ok(Sent {
            bytes,
            requests: requests + 1,
            ..Sent::default()
        })
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
                "SELECT table, name, type FROM system.columns WHERE database = currentDatabase() AND table IN ('windows', 'stacks') FORMAT TabSeparated",
                Database::Sink,
            )
            .await
            .map_err(failed)?;
        for (table, text, _) in TABLES {
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

    /// Tables an earlier profd made get the columns added since: on one
    /// server `stacks`, on a cluster the local and the Distributed table.
    #[test]
    fn upgrades_add_the_columns_added_since() {
        let plain = upgrades(&Layout::default());
        assert_eq!(
            plain,
            ["ALTER TABLE profd.stacks ADD COLUMN build_ids Array(String) AFTER addresses"]
        );
        let cluster = upgrades(&Layout {
            database: "p".into(),
            cluster: Some("fleet".into()),
            ..Layout::default()
        });
        assert_eq!(cluster.len(), 2);
        assert!(cluster[0].starts_with("ALTER TABLE p.stacks_local ADD COLUMN build_ids"));
        assert!(cluster[1].starts_with("ALTER TABLE p.stacks ADD COLUMN build_ids"));
        // Every column added is in the schema a new table gets.
        for (column, kind, _) in ADDED_COLUMNS {
            assert!(STACKS_COLUMNS.contains(&format!("{column} {kind},")));
        }
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

    #[test]
    fn a_cluster_gets_local_tables_and_distributed_ones_by_host() {
        let plain = schema(&Layout::default());
        assert_eq!(plain.len(), 3);
        assert!(plain[2].starts_with("CREATE TABLE IF NOT EXISTS profd.stacks ("));
        assert!(plain[2].contains("ENGINE = ReplacingMergeTree()"));
        assert!(plain[2].ends_with("ORDER BY (service, start, host, window_id, stack)"));
        let cluster = schema(&Layout {
            database: "p".into(),
            cluster: Some("two".into()),
            replicated: true,
        });
        assert_eq!(cluster.len(), 5);
        assert!(cluster[3].starts_with("CREATE TABLE IF NOT EXISTS p.stacks_local ("));
        assert!(cluster[3].contains(
            "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/p/stacks_local', '{replica}')"
        ));
        assert_eq!(
            cluster[4],
            "CREATE TABLE IF NOT EXISTS p.stacks AS p.stacks_local\n\
             ENGINE = Distributed(two, p, stacks_local, cityHash64(host))"
        );
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
                    ..Default::default()
                }],
                threads: vec![api::WindowThread {
                    tid: 8,
                    pid: 7,
                    name: "worker".into(),
                    samples: 5,
                }],
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
                        function: vec![1],
                        line: vec![4],
                        address: vec![0x20],
                        count: 1,
                    },
                ],
            }],
            ..Default::default()
        };
        let (mut windows, mut stacks) = (Vec::new(), Vec::new());
        rows(&w, &mut windows, &mut stacks);
        let windows: Vec<serde_json::Value> = serde_json::Deserializer::from_slice(&windows)
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(windows.len(), 1);
        assert_eq!(windows[0]["attributed"], 5);
        assert_eq!(windows[0]["lost"], 1);
        let stacks: Vec<serde_json::Value> = String::from_utf8(stacks)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(stacks.len(), 2);
        assert_eq!(stacks[0]["functions"], json!(["leaf", "main"]));
        assert_eq!(stacks[0]["inlined"], json!([1, 0]));
        assert_eq!(stacks[0]["pid"], 7);
        assert_eq!(stacks[0]["comm"], "web");
        assert_eq!(stacks[0]["thread"], "worker");
        assert_eq!(stacks[1]["stack"], 1);
        assert_eq!(stacks[1]["count"], 1);
    }
}
