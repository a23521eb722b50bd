//! `profctl fleet`'s source: the profile of many hosts merged from the
//! ClickHouse tables profd's sinks fill, each window counted once however
//! often it was inserted, as the `ResolvedProfile` every view and export
//! takes.
use profd_common::clickhouse_literal;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use profd_common::model::{FrameRef, FunctionInfo, Origin, ResolvedProfile, ResolvedStack};
use serde::Deserialize;

use crate::error::{Error, RowError};

/// How `profctl fleet` splits a profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FleetGroupArg {
    /// By host name.
    Host,
    /// By service label.
    Service,
}

/// Which tables `profctl fleet` reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TableArg {
    /// The coarsest that answers exactly: the hourly and per-minute
    /// rollups for the whole hours and minutes inside the range, the raw
    /// stacks for its edges, and the raw stacks alone for thread, process
    /// or pod detail.
    #[default]
    Auto,
    /// The raw stacks alone.
    Raw,
}

/// Longest window profd cuts: a window that ends in the range started at
/// most this long before it (lets the query skip older partitions).
const MAX_WINDOW_S: u64 = 3600;
/// Longest wait for the server's answer.
const TIMEOUT: Duration = Duration::from_secs(300);
/// Stack hashes asked of `frames` in one query: their list stays within
/// ClickHouse's default `max_query_size` (256 KiB).
const HASHES_A_QUERY: usize = 8000;

/// What a fleet query selects.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selection {
    /// Only these services (none: all).
    pub services: Vec<String>,
    /// Only these hosts (none: all).
    pub hosts: Vec<String>,
    /// Only processes of pods in these Kubernetes namespaces (none: all).
    pub namespaces: Vec<String>,
    /// Only processes of these pods, by name (none: all).
    pub pods: Vec<String>,
    /// Windows that end after `from_ms` and start before `to_ms` (Unix ms;
    /// 0 = now).
    pub from_ms: u64,
    /// See `from_ms`.
    pub to_ms: u64,
    /// The outermost frame each stack gets, if any.
    pub by: Option<FleetGroupArg>,
    /// Keep each thread's stacks apart (the threads view, speedscope's
    /// tracks); else stacks merge across threads, processes and hosts,
    /// which keeps a fleet's answer as small as its distinct stacks.
    pub per_thread: bool,
    /// Which tables may answer.
    pub table: TableArg,
}

impl Selection {
    /// Whether only the raw stacks hold what is asked: thread or pod
    /// detail, or `--table raw`.
    fn raw_only(&self) -> bool {
        self.table == TableArg::Raw
            || self.per_thread
            || !self.namespaces.is_empty()
            || !self.pods.is_empty()
    }
}

/// A rollup that answers a part of a range (the raw `stacks` answer for
/// the rest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `stacks_minutes`, for the windows that start in `[from_s, to_s)`.
    Minutes,
    /// `stacks_hours`, for the windows that start in `[from_s, to_s)`.
    Hours,
}

/// Which table answers which part of a range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The rollups' parts: (table, from_s, to_s), in time order; together
    /// one span `[first from_s, last to_s)` of window starts.
    pub rollups: Vec<(Source, u64, u64)>,
    /// The range asked (Unix ms, `to_ms` resolved).
    pub from_ms: u64,
    /// See `from_ms`.
    pub to_ms: u64,
}

impl Plan {
    /// The span of window starts the rollups answer for, if any.
    pub fn span(&self) -> Option<(u64, u64)> {
        Some((self.rollups.first()?.1, self.rollups.last()?.2))
    }
}

/// A merged fleet profile and what it covers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    /// The merged profile.
    pub profile: ResolvedProfile,
    /// The hosts and services it holds samples of.
    pub hosts: BTreeSet<String>,
    /// See `hosts`.
    pub services: BTreeSet<String>,
    /// Start of the first window and end of the last (Unix ns).
    pub first_ns: u64,
    /// See `first_ns`.
    pub last_ns: u64,
    /// The hosts with windows in the range (of those selected), and those
    /// of them that profiled in it (a window of an off slot of the
    /// sampling schedule says its host was there, not profiling).
    pub coverage: Coverage,
}

/// How many hosts a range saw, and how many of them profiled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Hosts with windows in the range.
    pub hosts: u64,
    /// Hosts with windows of an on slot in the range.
    pub profiled: u64,
}

impl Coverage {
    /// Multiply every stack's count by hosts / profiled (rounded), so the
    /// profile stands for the whole fleet; None when nothing profiled.
    pub fn scale(&self, p: &mut ResolvedProfile) -> Option<f64> {
        if self.profiled == 0 {
            return None;
        }
        let factor = self.hosts as f64 / self.profiled as f64;
        for s in &mut p.stacks {
            s.count = (s.count as f64 * factor).round() as u64;
        }
        p.attributed = p.stacks.iter().map(|s| s.count).sum();
        Some(factor)
    }
}

/// The rows of the windows that end after the plan's `from` and start
/// before its `to` (with `start` bounds that let the server skip older
/// partitions).
fn windows_in(plan: &Plan) -> String {
    format!(
        "end_ns > {} AND start_ns < {} AND start >= {} AND start < {}",
        plan.from_ms.saturating_mul(1_000_000),
        plan.to_ms.saturating_mul(1_000_000),
        time((plan.from_ms / 1000).saturating_sub(MAX_WINDOW_S)),
        time(plan.to_ms / 1000 + 1),
    )
}

/// The query of [`Coverage`]: the hosts of the windows `sel` and `plan`
/// select, and those of them on (TabSeparated: hosts, profiled).
pub fn coverage_sql(sel: &Selection, plan: &Plan) -> String {
    let mut filter = windows_in(plan);
    if !sel.hosts.is_empty() {
        let list: Vec<String> = sel.hosts.iter().map(|v| clickhouse_literal(v)).collect();
        filter.push_str(&format!(" AND host IN ({})", list.join(", ")));
    }
    format!(
        "SELECT uniqExact(host), uniqExactIf(host, schedule_on = 1) FROM windows \
         WHERE {filter} FORMAT TabSeparated"
    )
}

/// [`coverage_sql`]'s answer.
fn read_coverage(text: &str) -> Result<Coverage, RowError> {
    let mut n = text.split_whitespace().map(|v| {
        v.parse::<u64>()
            .map_err(|_| RowError::NotANumber(v.to_string()))
    });
    let mut next = || {
        n.next()
            .unwrap_or(Err(RowError::NotANumber(text.to_string())))
    };
    Ok(Coverage {
        hosts: next()?,
        profiled: next()?,
    })
}

/// A ClickHouse server holding profd's tables.
pub struct Fleet {
    client: reqwest::Client,
    url: reqwest::Url,
    database: String,
    user: Option<String>,
    key: Option<String>,
}

/// Which tables answer the windows that end after `from_ms` and start
/// before `to_ms` (Unix ms). A window whose start lies in a whole minute
/// (or hour) inside the range is one the range selects: it starts at or
/// after `from` and ends after it starts, and it starts before `to`. So
/// the rollups answer for the windows that start in the whole hours inside
/// the range, then the whole minutes inside it, and the raw stacks for
/// every other window the range selects, however windows are cut. None
/// when `rollups` is false.
pub fn plan(from_ms: u64, to_ms: u64, rollups: bool) -> Plan {
    let mut plan = Plan {
        rollups: Vec::new(),
        from_ms,
        to_ms,
    };
    let (a, b) = (from_ms.div_ceil(60_000) * 60, to_ms / 60_000 * 60);
    if !rollups || a >= b {
        return plan;
    }
    let (ha, hb) = (from_ms.div_ceil(3_600_000) * 3600, to_ms / 3_600_000 * 3600);
    if ha < hb {
        if a < ha {
            plan.rollups.push((Source::Minutes, a, ha));
        }
        plan.rollups.push((Source::Hours, ha, hb));
        if hb < b {
            plan.rollups.push((Source::Minutes, hb, b));
        }
    } else {
        plan.rollups.push((Source::Minutes, a, b));
    }
    plan
}

/// Unix seconds as ClickHouse's SQL time: `toDateTime(N)`.
fn time(s: u64) -> String {
    format!("toDateTime({s})")
}

/// `--explain`: which table answered which part of the range.
pub fn explain(plan: &Plan) -> String {
    let t = |s: u64| crate::views::render::unix_ms_text(s * 1000);
    let mut out = String::new();
    let raw = "stacks (raw): windows that end after the start and begin before the end";
    match plan.span() {
        None => out.push_str(&format!(
            "{raw} of {} .. {}\n",
            crate::views::render::unix_ms_text(plan.from_ms),
            crate::views::render::unix_ms_text(plan.to_ms)
        )),
        Some((a, b)) => {
            out.push_str(&format!(
                "{raw} of {} .. {}, but for those that begin in {} .. {}\n",
                crate::views::render::unix_ms_text(plan.from_ms),
                crate::views::render::unix_ms_text(plan.to_ms),
                t(a),
                t(b)
            ));
            for (source, from, to) in &plan.rollups {
                let table = match source {
                    Source::Minutes => "stacks_minutes",
                    Source::Hours => "stacks_hours",
                };
                out.push_str(&format!(
                    "{table}: windows that begin in {} .. {}\n",
                    t(*from),
                    t(*to)
                ));
            }
        }
    }
    out
}

/// The parts of the answer, each a SELECT of (s service, h host, x stack
/// hash, t tid, n thread, k count, b first ns, e last ns): from the raw
/// stacks each (window, service, stack) once, from the rollups their rows.
fn parts(sel: &Selection, plan: &Plan) -> Vec<String> {
    let mut raw = windows_in(plan);
    if let Some((a, b)) = plan.span() {
        raw.push_str(&format!(
            " AND (start < {} OR start >= {})",
            time(a),
            time(b)
        ));
    }
    let mut who = String::new();
    for (column, values) in [
        ("service", &sel.services),
        ("host", &sel.hosts),
        ("namespace", &sel.namespaces),
        ("pod", &sel.pods),
    ] {
        if !values.is_empty() {
            let list: Vec<String> = values.iter().map(|v| clickhouse_literal(v)).collect();
            who.push_str(&format!(" AND {column} IN ({})", list.join(", ")));
        }
    }
    let thread = match sel.per_thread {
        true => "any(tid) AS t, any(thread) AS n",
        false => "toUInt32(0) AS t, '' AS n",
    };
    let mut parts = vec![format!(
        "SELECT service AS s, any(host) AS h, any(stack_hash) AS x, {thread}, \
         any(count) AS k, any(start_ns) AS b, any(end_ns) AS e FROM stacks \
         WHERE {raw}{who} GROUP BY window_id, service, stack"
    )];
    for (source, from, to) in &plan.rollups {
        let (table, column, seconds) = match source {
            Source::Minutes => ("stacks_minutes", "minute", 60),
            Source::Hours => ("stacks_hours", "hour", 3600),
        };
        parts.push(format!(
            "SELECT service AS s, host AS h, stack_hash AS x, toUInt32(0) AS t, '' AS n, \
             count AS k, toUInt64({column}) * 1000000000 AS b, \
             (toUInt64({column}) + {seconds}) * 1000000000 AS e FROM {table} \
             WHERE {column} >= {} AND {column} < {}{who}",
            time(*from),
            time(*to)
        ));
    }
    parts
}

/// The query of each stack's samples: one row per service and stack hash
/// (and host with `--by host` or when thread detail is asked, thread), the
/// [`parts`] summed. The hosts are [`hosts_sql`]'s: a list of hosts on
/// every row would grow with the fleet.
pub fn sql(sel: &Selection, plan: &Plan) -> String {
    let mut key = vec!["s", "x"];
    if sel.by == Some(FleetGroupArg::Host) {
        key.push("h");
    }
    if sel.per_thread {
        key.extend(["t", "n"]);
    }
    let key = key.join(", ");
    // Aliases differ from the columns: ClickHouse lets an alias stand for
    // its column everywhere in a query, WHERE included.
    format!(
        "SELECT {key}, sum(k) AS count, min(b) AS first_ns, max(e) AS last_ns \
         FROM ({}) GROUP BY {key} FORMAT JSONEachRow",
        parts(sel, plan).join(" UNION ALL ")
    )
}

/// The query of the hosts with samples of what `sel` selects, a row each.
pub fn hosts_sql(sel: &Selection, plan: &Plan) -> String {
    format!(
        "SELECT DISTINCT h FROM ({}) FORMAT JSONEachRow",
        parts(sel, plan).join(" UNION ALL ")
    )
}

/// [`hosts_sql`]'s answer.
pub fn read_hosts(rows: &str) -> Result<BTreeSet<String>, RowError> {
    #[derive(Deserialize)]
    struct Host {
        h: String,
    }
    rows.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| Ok(serde_json::from_str::<Host>(l)?.h))
        .collect()
}

/// The query of the frames of `hashes` in the stack dictionary.
pub fn frames_sql(hashes: &[u64]) -> String {
    let list: Vec<String> = hashes.iter().map(u64::to_string).collect();
    format!(
        "SELECT stack_hash AS x, any(functions) AS f, any(modules) AS m, any(files) AS fi, \
         any(inlined) AS i, any(lines) AS l, any(build_ids) AS bi FROM frames \
         WHERE stack_hash IN ({}) GROUP BY stack_hash FORMAT JSONEachRow",
        list.join(", ")
    )
}

/// A number ClickHouse may write as a JSON number or (64-bit) a string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Num {
    N(u64),
    S(String),
}

impl Num {
    fn get(&self) -> Result<u64, RowError> {
        match self {
            Num::N(n) => Ok(*n),
            Num::S(s) => s.parse().map_err(|_| RowError::NotANumber(s.clone())),
        }
    }
}

/// One row of [`sql`]'s answer.
#[derive(Debug, Deserialize)]
struct Row {
    /// With --by host: the host.
    #[serde(default)]
    h: Option<String>,
    s: String,
    /// The stack's hash.
    x: Num,
    /// Per thread only.
    #[serde(default)]
    t: Option<Num>,
    #[serde(default)]
    n: String,
    count: Num,
    first_ns: Num,
    last_ns: Num,
}

/// A stack's frames, innermost first: a row of [`frames_sql`]'s answer.
#[derive(Debug, Deserialize)]
pub struct Frames {
    x: Num,
    f: Vec<String>,
    m: Vec<String>,
    fi: Vec<String>,
    i: Vec<u8>,
    l: Vec<Num>,
    #[serde(default)]
    bi: Vec<String>,
}

/// The stack hashes [`sql`]'s answer refers to, each once.
pub fn hashes(rows: &str) -> Result<Vec<u64>, RowError> {
    let mut out = BTreeSet::new();
    for line in rows.lines().filter(|l| !l.trim().is_empty()) {
        let r: Row = serde_json::from_str(line)?;
        out.insert(r.x.get()?);
    }
    Ok(out.into_iter().collect())
}

/// The rows of [`frames_sql`]'s answer, by hash.
pub fn read_frames(rows: &str, into: &mut HashMap<u64, Frames>) -> Result<(), RowError> {
    for line in rows.lines().filter(|l| !l.trim().is_empty()) {
        let f: Frames = serde_json::from_str(line)?;
        into.insert(f.x.get()?, f);
    }
    Ok(())
}

/// Merge the rows of [`sql`] (JSONEachRow), their frames from `frames`,
/// into one profile, grouped as `by` says.
pub fn merge(
    rows: &str,
    frames: &HashMap<u64, Frames>,
    by: Option<FleetGroupArg>,
) -> Result<Answer, RowError> {
    let mut answer = Answer {
        first_ns: u64::MAX,
        ..Answer::default()
    };
    let p = &mut answer.profile;
    let mut functions: HashMap<FunctionInfo, u32> = HashMap::new();
    let mut stacks: HashMap<(u32, Vec<FrameRef>), usize> = HashMap::new();
    let mut intern = |p: &mut ResolvedProfile, info: FunctionInfo| -> u32 {
        *functions.entry(info).or_insert_with_key(|info| {
            p.functions.push(info.clone());
            (p.functions.len() - 1) as u32
        })
    };
    for line in rows.lines().filter(|l| !l.trim().is_empty()) {
        let r: Row = serde_json::from_str(line)?;
        let count = r.count.get()?;
        let tid = r.t.as_ref().map(Num::get).transpose()?.unwrap_or(0) as u32;
        let hash = r.x.get()?;
        let d = frames.get(&hash).ok_or(RowError::NoFrames(hash))?;
        let mut stack = Vec::with_capacity(d.f.len() + 1);
        for (k, name) in d.f.iter().enumerate() {
            let module = d.m.get(k).cloned().unwrap_or_default();
            let build_id = d.bi.get(k).map_or("", String::as_str);
            let info = FunctionInfo {
                origin: Origin::of_grouped(name, &module, build_id),
                name: name.clone(),
                module,
                file: d.fi.get(k).cloned().unwrap_or_default(),
                inlined: d.i.get(k).is_some_and(|&i| i != 0),
            };
            stack.push(FrameRef {
                function: intern(p, info),
                line: d.l.get(k).map(Num::get).transpose()?.unwrap_or(0) as u32,
                address: 0,
            });
        }
        let group = match by {
            Some(FleetGroupArg::Host) => Some(format!("[host {}]", r.h.as_deref().unwrap_or(""))),
            Some(FleetGroupArg::Service) => Some(format!("[service {}]", r.s)),
            None => None,
        };
        if let Some(name) = group {
            let info = FunctionInfo {
                name,
                module: "[group]".into(),
                ..Default::default()
            };
            stack.push(FrameRef {
                function: intern(p, info),
                line: 0,
                address: 0,
            });
        }
        p.attributed += count;
        match stacks.get(&(tid, stack.clone())) {
            Some(&at) => p.stacks[at].count += count,
            None => {
                stacks.insert((tid, stack.clone()), p.stacks.len());
                p.stacks.push(ResolvedStack {
                    tid,
                    frames: stack,
                    count,
                });
            }
        }
        if !r.n.is_empty() {
            p.threads.insert(tid, r.n.clone());
        }
        answer.first_ns = answer.first_ns.min(r.first_ns.get()?);
        answer.last_ns = answer.last_ns.max(r.last_ns.get()?);
        answer.services.insert(r.s);
    }
    if answer.first_ns == u64::MAX {
        answer.first_ns = 0;
    }
    let p = &mut answer.profile;
    p.duration_s = answer.last_ns.saturating_sub(answer.first_ns) as f64 / 1e9;
    p.comm = "fleet".into();
    Ok(answer)
}

impl Fleet {
    /// A server at `url` (its HTTP interface), credentials from a file.
    pub fn new(
        url: &str,
        database: &str,
        user: Option<String>,
        password_file: Option<&Path>,
    ) -> Result<Fleet, Error> {
        let url = reqwest::Url::parse(url)
            .map_err(|e| Error::Usage(format!("--clickhouse {url:?} is not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Error::Usage(format!(
                "--clickhouse {url}: use http:// or https:// (ClickHouse's HTTP interface)"
            )));
        }
        if database.is_empty()
            || database.starts_with(|c: char| c.is_ascii_digit())
            || !database
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(Error::Usage(format!(
                "--database {database:?} is not a plain name: use letters, digits and _"
            )));
        }
        let key = match password_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
                Some(text.trim_end_matches(['\n', '\r']).to_string())
            }
            None => None,
        };
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .use_rustls_tls()
            .build()
            .map_err(|e| Error::Fleet(format!("cannot make an HTTP client: {e}")))?;
        Ok(Fleet {
            client,
            url,
            database: database.to_string(),
            user,
            key,
        })
    }

    /// The plan of the tables that answer `sel` at `now_ms`.
    pub fn plan(sel: &Selection, now_ms: u64) -> Plan {
        let to_ms = if sel.to_ms == 0 { now_ms } else { sel.to_ms };
        plan(sel.from_ms, to_ms, !sel.raw_only())
    }

    /// The partitions of the database's tables: [`retention::parts_sql`].
    ///
    /// [`retention::parts_sql`]: super::retention::parts_sql
    pub async fn parts(&self) -> Result<String, Error> {
        self.query(super::retention::parts_sql(&self.database))
            .await
    }

    /// The merged profile of what `sel` selects, the tables as `plan`
    /// says: the samples of each stack, then the frames of those stacks.
    pub async fn profile(&self, sel: &Selection, plan: &Plan) -> Result<Answer, Error> {
        let rows = self.query(sql(sel, plan)).await?;
        let hashes = hashes(&rows)?;
        let mut frames = HashMap::with_capacity(hashes.len());
        for chunk in hashes.chunks(HASHES_A_QUERY) {
            read_frames(&self.query(frames_sql(chunk)).await?, &mut frames)?;
        }
        let mut answer = merge(&rows, &frames, sel.by)?;
        answer.hosts = read_hosts(&self.query(hosts_sql(sel, plan)).await?)?;
        answer.coverage = read_coverage(&self.query(coverage_sql(sel, plan)).await?)?;
        Ok(answer)
    }

    /// `sql`'s answer (read only).
    async fn query(&self, sql: String) -> Result<String, Error> {
        self.request(sql, true).await
    }

    /// Run `sql`, which may change the tables: its answer.
    pub async fn run(&self, sql: String) -> Result<String, Error> {
        self.request(sql, false).await
    }

    async fn request(&self, sql: String, readonly: bool) -> Result<String, Error> {
        let mut url = self.url.clone();
        url.query_pairs_mut()
            .append_pair("database", &self.database);
        if readonly {
            url.query_pairs_mut().append_pair("readonly", "2");
        }
        let mut request = self.client.post(url).body(sql);
        if let Some(user) = &self.user {
            request = request.header("X-ClickHouse-User", user);
        }
        if let Some(key) = &self.key {
            request = request.header("X-ClickHouse-Key", key);
        }
        let shown = self.url.as_str();
        let answer = request.send().await.map_err(|e| {
            Error::Fleet(format!(
                "cannot reach ClickHouse at {shown}: {}",
                e.without_url()
            ))
        })?;
        let status = answer.status();
        let text = answer
            .text()
            .await
            .map_err(|e| Error::Fleet(format!("ClickHouse at {shown}: {}", e.without_url())))?;
        if !status.is_success() {
            return Err(Error::Fleet(format!(
                "ClickHouse at {shown} answered {status}: {}",
                text.trim()
            )));
        }
        Ok(text)
    }
}

#[cfg(test)]
#[path = "fleet_tests.rs"]
mod tests;
