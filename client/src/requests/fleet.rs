//! `profctl fleet`'s source: the profile of many hosts merged from the
//! ClickHouse tables profd's sinks fill, each window counted once however
//! often it was inserted, as the `ResolvedProfile` every view and export
//! takes.
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

/// Longest window profd cuts: a window that ends in the range started at
/// most this long before it (lets the query skip older partitions).
const MAX_WINDOW_S: u64 = 3600;
/// Longest wait for the server's answer.
const TIMEOUT: Duration = Duration::from_secs(300);

/// What a fleet query selects.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selection {
    /// Only these services (none: all).
    pub services: Vec<String>,
    /// Only these hosts (none: all).
    pub hosts: Vec<String>,
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
}

/// A ClickHouse server holding profd's tables.
pub struct Fleet {
    client: reqwest::Client,
    url: reqwest::Url,
    database: String,
    user: Option<String>,
    key: Option<String>,
}

/// A string as a ClickHouse literal.
fn quote(s: &str) -> String {
    let mut out = String::from("'");
    for c in s.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The query: the stacks of the windows selected, each (window, service,
/// stack) once, summed per thread and stack.
pub fn sql(sel: &Selection, now_ms: u64) -> String {
    let to_ms = if sel.to_ms == 0 { now_ms } else { sel.to_ms };
    let mut filter = format!(
        "end_ns > {} AND start_ns < {} AND start >= toDateTime({}) AND start < toDateTime({})",
        sel.from_ms.saturating_mul(1_000_000),
        to_ms.saturating_mul(1_000_000),
        (sel.from_ms / 1000).saturating_sub(MAX_WINDOW_S),
        to_ms / 1000 + 1,
    );
    for (column, values) in [("service", &sel.services), ("host", &sel.hosts)] {
        if !values.is_empty() {
            let list: Vec<String> = values.iter().map(|v| quote(v)).collect();
            filter.push_str(&format!(" AND {column} IN ({})", list.join(", ")));
        }
    }
    // The key of a merged stack: its frames, and its service (as a
    // session's views group by service too), host or thread when asked.
    let mut key = vec!["s", "f", "m", "fi", "i", "l", "bi"];
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
        "SELECT {key}, groupUniqArray(h) AS hosts, sum(k) AS count, min(b) AS first_ns, \
         max(e) AS last_ns \
         FROM (SELECT window_id, service AS s, stack, any(host) AS h, any(tid) AS t, \
         any(thread) AS n, any(functions) AS f, any(modules) AS m, any(files) AS fi, \
         any(inlined) AS i, any(lines) AS l, any(build_ids) AS bi, any(count) AS k, \
         any(start_ns) AS b, \
         any(end_ns) AS e FROM stacks WHERE {filter} GROUP BY window_id, service, stack) \
         GROUP BY {key} FORMAT JSONEachRow"
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
    hosts: Vec<String>,
    s: String,
    /// Per thread only.
    #[serde(default)]
    t: Option<Num>,
    #[serde(default)]
    n: String,
    f: Vec<String>,
    m: Vec<String>,
    fi: Vec<String>,
    i: Vec<u8>,
    l: Vec<Num>,
    #[serde(default)]
    bi: Vec<String>,
    count: Num,
    first_ns: Num,
    last_ns: Num,
}

/// Merge the rows (JSONEachRow) into one profile, grouped as `by` says.
pub fn merge(rows: &str, by: Option<FleetGroupArg>) -> Result<Answer, RowError> {
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
        let mut frames = Vec::with_capacity(r.f.len() + 1);
        for (k, name) in r.f.iter().enumerate() {
            let module = r.m.get(k).cloned().unwrap_or_default();
            let build_id = r.bi.get(k).map_or("", String::as_str);
            let info = FunctionInfo {
                origin: Origin::of_grouped(name, &module, build_id),
                name: name.clone(),
                module,
                file: r.fi.get(k).cloned().unwrap_or_default(),
                inlined: r.i.get(k).is_some_and(|&i| i != 0),
            };
            frames.push(FrameRef {
                function: intern(p, info),
                line: r.l.get(k).map(Num::get).transpose()?.unwrap_or(0) as u32,
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
            frames.push(FrameRef {
                function: intern(p, info),
                line: 0,
                address: 0,
            });
        }
        p.attributed += count;
        match stacks.get(&(tid, frames.clone())) {
            Some(&at) => p.stacks[at].count += count,
            None => {
                stacks.insert((tid, frames.clone()), p.stacks.len());
                p.stacks.push(ResolvedStack { tid, frames, count });
            }
        }
        if !r.n.is_empty() {
            p.threads.insert(tid, r.n.clone());
        }
        answer.first_ns = answer.first_ns.min(r.first_ns.get()?);
        answer.last_ns = answer.last_ns.max(r.last_ns.get()?);
        answer.hosts.extend(r.hosts);
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

    /// The merged profile of what `sel` selects.
    pub async fn profile(&self, sel: &Selection, now_ms: u64) -> Result<Answer, Error> {
        let mut url = self.url.clone();
        url.query_pairs_mut()
            .append_pair("database", &self.database)
            .append_pair("readonly", "2");
        let mut request = self.client.post(url).body(sql(sel, now_ms));
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
        Ok(merge(&text, sel.by)?)
    }
}

#[cfg(test)]
#[path = "fleet_tests.rs"]
mod tests;
