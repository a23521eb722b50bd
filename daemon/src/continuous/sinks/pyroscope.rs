//! The Grafana Pyroscope sink: each service of a continuous window as a
//! pprof profile POSTed to Pyroscope's documented `/ingest` endpoint, with
//! its series labels, and cut to Pyroscope's default limits.
use super::SetupError;
use super::{http_client, judge, unanswered, Auth, Failure, Sent};
use flate2::{write::GzEncoder, Compression};
use profd_common::api;
use profd_common::export::{cpu_profile, Strings};
use profd_common::pprof_proto as pb;
use prost::Message;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

const NANOS: u64 = 1_000_000_000;

/// The `spyName` profd sends (Pyroscope turns it into the series label
/// `pyroscope_spy`).
pub const SPY_NAME: &str = "profd";

/// Sample labels of each pprof sample. `pid` and `tid` are numeric, which
/// Pyroscope keeps in the samples; string labels (`comm`, and for a
/// process in a Kubernetes pod `namespace`, `pod` and `container`)
/// Pyroscope also adds to the sample's series labels.
pub const PID_LABEL: &str = "pid";
pub const TID_LABEL: &str = "tid";
pub const COMM_LABEL: &str = "comm";
pub const NAMESPACE_LABEL: &str = "namespace";
pub const POD_LABEL: &str = "pod";
pub const CONTAINER_LABEL: &str = "container";

/// Most extra series labels: Pyroscope takes at most 30 label names a
/// series, and adds `__name__`, `__delta__`, `pyroscope_spy`,
/// `service_name` and profd `host` (5 of them) itself.
const MAX_EXTRA_LABELS: usize = 25;

/// A Pyroscope sink as configured.
#[derive(Debug, Clone)]
pub struct Config {
    /// Base URL, e.g. `http://127.0.0.1:4040`; `/ingest` is appended to
    /// its path.
    pub url: String,
    /// Sent as `X-Scope-OrgID`.
    pub tenant: Option<String>,
    pub auth: Auth,
    /// Extra series labels, e.g. `env=prod`.
    pub labels: Vec<(String, String)>,
    pub timeout: Duration,
    /// A PEM file of CA certificates trusted besides the system's.
    pub ca: Option<PathBuf>,
}

/// Pyroscope's default per-tenant limits on one profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `max_profile_size_bytes`: the encoded profile, uncompressed.
    pub max_bytes: usize,
    /// `max_profile_stacktrace_samples`: pprof samples of one profile.
    pub max_samples: usize,
    /// `max_profile_stacktrace_depth`: locations of one stack.
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_bytes: 4 * 1024 * 1024,
            max_samples: 16_000,
            max_depth: 1000,
        }
    }
}

/// One `POST /ingest`: its query parameters and its body (gzip'd pprof).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ingest {
    /// The window's service label, as the window has it.
    pub service: String,
    /// `format`, `name`, `from`, `until`, `sampleRate`, `spyName`, in that
    /// order.
    pub query: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// A Pyroscope sink, ready to send.
#[derive(Debug)]
pub struct Pyroscope {
    client: reqwest::Client,
    url: reqwest::Url,
    tenant: Option<String>,
    auth: Auth,
    labels: Vec<(String, String)>,
}

impl Pyroscope {
    /// Pyroscope rejects data older than this (its default
    /// `reject_older_than`): the delivery loop drops older windows as
    /// "too_old".
    pub const MAX_AGE: Duration = Duration::from_secs(3600);

    /// Checks the config (URL parses and is http/https, tenant characters
    /// per Pyroscope's rules, label names `[A-Za-z0-9_.]` and not reserved)
    /// with an error naming the field and what to change.
    pub fn new(c: Config) -> Result<Pyroscope, SetupError> {
        let url = ingest_url(&c.url)?;
        if let Some(t) = &c.tenant {
            check_tenant(t)?;
        }
        check_labels(&c.labels)?;
        let client = http_client(c.timeout, c.ca.as_deref())?;
        Ok(Pyroscope {
            client,
            url,
            tenant: c.tenant,
            auth: c.auth,
            labels: c.labels,
        })
    }

    /// The URL requests go to (`…/ingest`).
    pub fn url(&self) -> &str {
        self.url.as_str()
    }

    /// Send window `w`, one POST /ingest per service (or more when split).
    /// `done` = how many of this window's requests the backend already
    /// accepted in earlier attempts: skip that many and advance it after
    /// each accepted request, so a retry never sends a part twice.
    ///
    /// Ok: the whole window's figures (every request and body byte, those
    /// accepted in earlier attempts too, and its splits and truncations),
    /// to be counted once.
    pub async fn send(&self, w: &api::Window, done: &mut u64) -> Result<Sent, Failure> {
        let (ingests, sent) = requests(w, &self.labels, &Limits::default());
        let skip = usize::try_from(*done).unwrap_or(usize::MAX);
        for ingest in ingests.into_iter().skip(skip) {
            let mut request = self
                .client
                .post(self.url.clone())
                .query(&ingest.query)
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .body(ingest.body);
            if let Some(tenant) = &self.tenant {
                request = request.header("X-Scope-OrgID", tenant);
            }
            let answer = self.auth.apply(request).send().await.map_err(unanswered)?;
            let status = answer.status();
            let body = answer.text().await.unwrap_or_default();
            judge(status, &body)?;
            *done += 1;
        }
        Ok(sent)
    }

    /// Check the server now: it answers (`GET …/ready`, Pyroscope's
    /// readiness endpoint) and does not refuse the credentials.
    pub async fn probe(&self) -> Result<String, ProbeError> {
        let mut ready = self.url.clone();
        ready.set_path(&self.url.path().replace("/ingest", "/ready"));
        let mut request = self.client.get(ready);
        if let Some(tenant) = &self.tenant {
            request = request.header("X-Scope-OrgID", tenant);
        }
        let answer =
            self.auth
                .apply(request)
                .send()
                .await
                .map_err(|e| ProbeError::Unreachable {
                    url: self.url.to_string(),
                    source: e.without_url(),
                })?;
        match answer.status().as_u16() {
            401 | 403 => Err(ProbeError::Credentials {
                url: self.url.to_string(),
                status: answer.status(),
            }),
            _ => Ok(format!("Pyroscope, /ready answered {}", answer.status())),
        }
    }
}

/// Why a Pyroscope server cannot be used, as a check of it found.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// `source`: without its URL (which may carry what a user put there).
    #[error("cannot reach {url}: {}", super::with_causes(.source))]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{url} refuses the credentials ({status}): check user, password_file or token_file")]
    Credentials {
        url: String,
        status: reqwest::StatusCode,
    },
}

/// `base` with `/ingest` appended to its path; Err naming `url` when it is
/// not a plain http(s) URL.
fn ingest_url(base: &str) -> Result<reqwest::Url, SetupError> {
    let mut url = reqwest::Url::parse(base).map_err(|e| {
        format!(
            "url: {} is not a URL ({e}): write it as http://HOST:PORT, e.g. http://127.0.0.1:4040",
            profd_common::quoted(base)
        )
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(SetupError::Setting(format!(
            "url: scheme {:?} is not supported: use http:// or https://",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(SetupError::Setting(format!(
            "url: {} has no host: write it as http://HOST:PORT",
            profd_common::quoted(base)
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(SetupError::Setting(
            "url: has credentials in it: take them out and set the sink's basic auth \
             (user and password_file) instead"
                .into(),
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(SetupError::Setting(format!(
            "url: {} has a query or fragment: give the base URL only (profd appends /ingest)",
            profd_common::quoted(base)
        )));
    }
    let path = format!("{}/ingest", url.path().trim_end_matches('/'));
    url.set_path(&path);
    Ok(url)
}

/// Pyroscope's tenant ids: at most 150 characters of `[0-9A-Za-z]` and
/// `!-_.*'()`, not `.` nor `..`.
fn check_tenant(t: &str) -> Result<(), SetupError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "!-_.*'()".contains(c);
    if t.is_empty() {
        return Err("tenant: is empty: leave it out or name the tenant".into());
    }
    if t.len() > 150 {
        return Err(SetupError::Setting(format!(
            "tenant: is {} characters long: Pyroscope takes at most 150",
            t.len()
        )));
    }
    if let Some(c) = t.chars().find(|&c| !allowed(c)) {
        return Err(SetupError::Setting(format!(
            "tenant: {} has {c:?}: use letters, digits and !-_.*'() only",
            profd_common::quoted(t)
        )));
    }
    if t == "." || t == ".." {
        return Err(SetupError::Setting(format!(
            "tenant: {t:?} is not a valid tenant id: name it"
        )));
    }
    Ok(())
}

/// Series label names profd sets itself, or Pyroscope does.
fn reserved(name: &str) -> bool {
    name.starts_with("__")
        || matches!(
            name,
            "service_name"
                | "host"
                | "pyroscope_spy"
                | COMM_LABEL
                | NAMESPACE_LABEL
                | POD_LABEL
                | CONTAINER_LABEL
        )
}

/// The extra series labels: names of `[A-Za-z0-9_.]`, not reserved, each
/// once; values non-empty, without `,` or `}` (which would end them in
/// `name`).
fn check_labels(labels: &[(String, String)]) -> Result<(), SetupError> {
    if labels.len() > MAX_EXTRA_LABELS {
        return Err(SetupError::Setting(format!(
            "labels: {} labels: Pyroscope takes 30 label names a series, profd and Pyroscope \
             set 5: give at most {MAX_EXTRA_LABELS}",
            labels.len()
        )));
    }
    for (i, (name, value)) in labels.iter().enumerate() {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        {
            return Err(SetupError::Setting(format!(
                "labels: name {}: use letters, digits, _ and . only",
                profd_common::quoted(name)
            )));
        }
        if reserved(name) {
            return Err(SetupError::Setting(format!(
                "labels: {name:?} is set by profd or Pyroscope: choose another name \
                 (not service_name, host, pyroscope_spy, nor starting with __)"
            )));
        }
        if labels[..i].iter().any(|(n, _)| n == name) {
            return Err(SetupError::Setting(format!(
                "labels: {name:?} is given twice: keep one"
            )));
        }
        if value.trim().is_empty() {
            return Err(SetupError::Setting(format!(
                "labels: {name:?} has an empty value: give it one"
            )));
        }
        if value.contains([',', '}']) {
            return Err(SetupError::Setting(format!(
                "labels: the value of {name:?} has ',' or '}}', which Pyroscope cannot take \
                 in a label: change them"
            )));
        }
    }
    Ok(())
}

/// The app name part of `name`: the service with every character
/// Pyroscope does not take there (outside `[A-Za-z0-9_.-]`) as `_`. The
/// exact service goes in the `service_name` label, which wins over it.
fn app_name(service: &str) -> String {
    let name: String = service
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "profd".into()
    } else {
        name
    }
}

/// A label value as `name` can carry it: `,` and `}` (which end a value,
/// with no escape) as `_`, spaces at the ends (which Pyroscope trims) cut.
fn label_value(value: &str) -> String {
    value.trim().replace([',', '}'], "_")
}

/// Which way a time in whole seconds is rounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    /// For `from`.
    Down,
    /// For `until`.
    Up,
}

/// `from`/`until` as Pyroscope reads them: 19 digits are nanoseconds;
/// otherwise whole seconds, rounded `round`.
fn attime(ns: u64, round: Round) -> String {
    if (1_000_000_000_000_000_000..=9_999_999_999_999_999_999).contains(&ns) {
        ns.to_string()
    } else if round == Round::Up {
        ns.div_ceil(NANOS).to_string()
    } else {
        (ns / NANOS).to_string()
    }
}

/// The `name` parameter: `<app>{service_name=…,host=…,<labels>}`.
fn series_name(service: &str, host: &str, labels: &[(String, String)]) -> String {
    let or_unknown = |v: String| if v.is_empty() { "unknown".into() } else { v };
    let mut name = format!(
        "{}{{service_name={},host={}",
        app_name(service),
        or_unknown(label_value(service)),
        or_unknown(label_value(host))
    );
    for (k, v) in labels {
        let v = label_value(v);
        if !reserved(k) && !v.is_empty() {
            name.push_str(&format!(",{k}={v}"));
        }
    }
    name.push('}');
    name
}

/// Pure: the requests for a window (query params + pprof body), and the
/// split/truncation counts. Each service with samples is one profile,
/// split into as few parts of about equal samples as keep every part
/// within `limits` (all parts with the same `name`, `from` and `until`);
/// `Sent.requests` and `Sent.bytes` are those of every request. Stacks
/// without frames are left out.
pub fn requests(
    w: &api::Window,
    labels: &[(String, String)],
    limits: &Limits,
) -> (Vec<Ingest>, Sent) {
    let mut out = Vec::new();
    let mut sent = Sent::default();
    let from = attime(w.start_unix_ns, Round::Down);
    let until = attime(w.end_unix_ns, Round::Up);
    for s in &w.services {
        let profile = Profile::new(w, s, limits.max_depth);
        sent.truncated += profile.truncated;
        if profile.samples.is_empty() {
            continue;
        }
        let parts = profile.parts(limits);
        if parts.len() > 1 {
            sent.split += 1;
        }
        let query = vec![
            ("format".to_string(), "pprof".to_string()),
            ("name".into(), series_name(&s.service, &w.host, labels)),
            ("from".into(), from.clone()),
            ("until".into(), until.clone()),
            ("sampleRate".into(), w.frequency_hz.to_string()),
            ("spyName".into(), SPY_NAME.into()),
        ];
        for part in parts {
            let body = gzip(&part);
            sent.requests += 1;
            sent.bytes += body.len() as u64;
            out.push(Ingest {
                service: s.service.clone(),
                query: query.clone(),
                body,
            });
        }
    }
    (out, sent)
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::with_capacity(bytes.len() / 4), Compression::fast());
    gz.write_all(bytes)
        .and_then(|()| gz.finish())
        .expect("gzip into memory does not fail")
}

/// A location: one address and its inline chain (innermost first).
struct Location {
    address: u64,
    mapping: usize,
    lines: Vec<(u32, u32)>,
}

/// A module's mapping.
struct Mapping {
    file: String,
    build_id: String,
    start: u64,
    limit: u64,
}

/// A pprof sample to be: locations leaf first, its count and labels.
struct Sample {
    locations: Vec<usize>,
    count: u64,
    tid: u32,
    pid: Option<u32>,
    comm: String,
    /// Its process's Kubernetes pod, when it runs in one.
    pod: Option<api::KubernetesPod>,
}

/// One service's window as pprof parts are cut from it.
struct Profile<'a> {
    window: &'a api::Window,
    service: &'a api::ServiceWindow,
    locations: Vec<Location>,
    mappings: Vec<Mapping>,
    samples: Vec<Sample>,
    /// The mapping of the service's first program, when known.
    main: Option<usize>,
    /// Stacks cut to the depth limit.
    truncated: u64,
}

impl<'a> Profile<'a> {
    fn new(
        window: &'a api::Window,
        service: &'a api::ServiceWindow,
        max_depth: usize,
    ) -> Profile<'a> {
        let mut p = Profile {
            window,
            service,
            locations: Vec::new(),
            mappings: Vec::new(),
            samples: Vec::new(),
            main: None,
            truncated: 0,
        };
        let functions = &service.functions;
        let module_of = |f: u32| functions.get(f as usize).map_or("", |f| f.module.as_str());
        let is_inlined = |f: u32| functions.get(f as usize).is_some_and(|f| f.inlined);
        let basename = |path: &str| path.rsplit('/').next().unwrap_or("").to_string();
        // Build ids: of the processes' executables, and of modules with
        // code their host could not name.
        let mut build_ids: HashMap<String, &str> = service
            .processes
            .iter()
            .filter(|pr| !pr.build_id.is_empty())
            .map(|pr| (basename(&pr.executable), pr.build_id.as_str()))
            .collect();
        for f in functions.iter().filter(|f| !f.build_id.is_empty()) {
            build_ids
                .entry(f.module.clone())
                .or_insert(f.build_id.as_str());
        }
        let mut mapping_of: HashMap<&str, usize> = HashMap::new();
        let mut location_of: HashMap<(u64, Vec<(u32, u32)>), usize> = HashMap::new();
        let threads: HashMap<u32, &api::WindowThread> =
            service.threads.iter().map(|t| (t.tid, t)).collect();
        let processes: HashMap<u32, &api::WindowProcess> =
            service.processes.iter().map(|pr| (pr.pid, pr)).collect();
        for s in &service.stacks {
            let n = s.function.len();
            let line = |i: usize| s.line.get(i).copied().unwrap_or(0);
            let address = |i: usize| s.address.get(i).copied().unwrap_or(0);
            let mut ids = Vec::new();
            let mut i = 0;
            while i < n {
                let start = i;
                while i + 1 < n && is_inlined(s.function[i]) && address(i + 1) == address(i) {
                    i += 1;
                }
                let key = (
                    address(start),
                    (start..=i)
                        .map(|j| (s.function[j], line(j)))
                        .collect::<Vec<_>>(),
                );
                let caller = s.function[i];
                i += 1;
                let next = p.locations.len();
                let id = *location_of.entry(key).or_insert_with_key(|(addr, lines)| {
                    let module = module_of(caller);
                    let m = *mapping_of.entry(module).or_insert_with(|| {
                        p.mappings.push(Mapping {
                            file: module.to_string(),
                            build_id: build_ids.get(module).copied().unwrap_or("").to_string(),
                            start: u64::MAX,
                            limit: 0,
                        });
                        p.mappings.len() - 1
                    });
                    if *addr != 0 {
                        let mp = &mut p.mappings[m];
                        mp.start = mp.start.min(*addr);
                        mp.limit = mp.limit.max(addr.saturating_add(1));
                    }
                    p.locations.push(Location {
                        address: *addr,
                        mapping: m,
                        lines: lines.clone(),
                    });
                    next
                });
                ids.push(id);
            }
            if ids.is_empty() {
                continue;
            }
            if ids.len() > max_depth {
                // Pyroscope keeps the frames nearest the root.
                ids.drain(..ids.len() - max_depth);
                p.truncated += 1;
            }
            let thread = threads.get(&s.tid);
            let pid = thread.map(|t| t.pid);
            let process = pid.and_then(|pid| processes.get(&pid));
            p.samples.push(Sample {
                locations: ids,
                count: s.count,
                tid: s.tid,
                pid,
                comm: process.map_or(String::new(), |pr| pr.comm.clone()),
                pod: process.and_then(|pr| pr.pod.clone()),
            });
        }
        for m in &mut p.mappings {
            if m.start > m.limit {
                m.start = 0;
            }
        }
        let main_file = service
            .processes
            .first()
            .map(|pr| basename(&pr.executable))
            .filter(|f| !f.is_empty());
        p.main = main_file
            .and_then(|f| p.mappings.iter().position(|m| m.file == f))
            .or_else(|| p.mappings.iter().position(|m| !is_library(&m.file)));
        p
    }

    /// The parts, encoded: as few runs of about equal samples as stay
    /// within `max_samples`, each halved again while over `max_bytes`.
    fn parts(&self, limits: &Limits) -> Vec<Vec<u8>> {
        let n = self.samples.len();
        let max = limits.max_samples.max(1);
        let runs = n.div_ceil(max);
        let size = n.div_ceil(runs);
        let all: Vec<usize> = (0..n).collect();
        let mut out = Vec::new();
        for run in all.chunks(size) {
            self.fit(run, limits.max_bytes, &mut out);
        }
        out
    }

    fn fit(&self, samples: &[usize], max_bytes: usize, out: &mut Vec<Vec<u8>>) {
        let bytes = self.encode(samples);
        if bytes.len() > max_bytes && samples.len() > 1 {
            let (a, b) = samples.split_at(samples.len() / 2);
            self.fit(a, max_bytes, out);
            self.fit(b, max_bytes, out);
        } else {
            out.push(bytes);
        }
    }

    /// The pprof `Profile` of these samples, with only the locations,
    /// functions, mappings and strings they use (ids from 1 in order of
    /// use, the main program's mapping first).
    fn encode(&self, samples: &[usize]) -> Vec<u8> {
        let hz = u64::from(self.window.frequency_hz);
        let cpu_ns = |count: u64| {
            (u128::from(count) * u128::from(NANOS))
                .checked_div(u128::from(hz))
                .unwrap_or(0)
                .min(i64::MAX as u128) as i64
        };
        let mut st = Strings::new();
        let mut prof = pb::Profile {
            time_nanos: self.window.start_unix_ns.min(i64::MAX as u64) as i64,
            duration_nanos: self
                .window
                .end_unix_ns
                .saturating_sub(self.window.start_unix_ns)
                .min(i64::MAX as u64) as i64,
            ..cpu_profile(&mut st, self.window.frequency_hz)
        };
        let keys = [st.id(PID_LABEL), st.id(TID_LABEL)];
        st.id(COMM_LABEL);
        // New ids (from 1) of the locations, functions and mappings used.
        let mut location_id = vec![0u64; self.locations.len()];
        let mut function_id = vec![0u64; self.service.functions.len()];
        let mut mapping_id = vec![0u64; self.mappings.len()];
        // The main program's mapping first: pprof takes mapping 1 for it.
        if let Some(m) = self.main {
            if samples.iter().any(|&s| {
                self.samples[s]
                    .locations
                    .iter()
                    .any(|&l| self.locations[l].mapping == m)
            }) {
                mapping_id[m] = 1;
                self.push_mapping(&mut prof, &mut st, m, 1);
            }
        }
        for &s in samples {
            let sample = &self.samples[s];
            let mut ids = Vec::with_capacity(sample.locations.len());
            for &l in &sample.locations {
                if location_id[l] == 0 {
                    let loc = &self.locations[l];
                    if mapping_id[loc.mapping] == 0 {
                        let id = prof.mapping.len() as u64 + 1;
                        mapping_id[loc.mapping] = id;
                        self.push_mapping(&mut prof, &mut st, loc.mapping, id);
                    }
                    let mut lines = Vec::with_capacity(loc.lines.len());
                    for &(f, line) in &loc.lines {
                        let fi = f as usize;
                        let Some(func) = self.service.functions.get(fi) else {
                            continue;
                        };
                        if function_id[fi] == 0 {
                            function_id[fi] = prof.function.len() as u64 + 1;
                            let name = st.id(&func.name);
                            prof.function.push(pb::Function {
                                id: function_id[fi],
                                name,
                                system_name: name,
                                filename: st.id(&func.file),
                                start_line: 0,
                            });
                        }
                        lines.push(pb::Line {
                            function_id: function_id[fi],
                            line: i64::from(line),
                            column: 0,
                        });
                    }
                    location_id[l] = prof.location.len() as u64 + 1;
                    prof.location.push(pb::Location {
                        id: location_id[l],
                        mapping_id: mapping_id[loc.mapping],
                        address: loc.address,
                        line: lines,
                        is_folded: false,
                    });
                }
                ids.push(location_id[l]);
            }
            let mut label = Vec::with_capacity(6);
            if let Some(pid) = sample.pid {
                label.push(pb::Label {
                    key: keys[0],
                    num: i64::from(pid),
                    ..Default::default()
                });
            }
            label.push(pb::Label {
                key: keys[1],
                num: i64::from(sample.tid),
                ..Default::default()
            });
            let pod = sample.pod.as_ref();
            let texts = [
                (COMM_LABEL, sample.comm.as_str()),
                (NAMESPACE_LABEL, pod.map_or("", |p| p.namespace.as_str())),
                (POD_LABEL, pod.map_or("", |p| p.name.as_str())),
                (CONTAINER_LABEL, pod.map_or("", |p| p.container.as_str())),
            ];
            for (key, text) in texts.into_iter().filter(|(_, t)| !t.is_empty()) {
                label.push(pb::Label {
                    key: st.id(key),
                    str: st.id(text),
                    ..Default::default()
                });
            }
            prof.sample.push(pb::Sample {
                location_id: ids,
                value: vec![
                    sample.count.min(i64::MAX as u64) as i64,
                    cpu_ns(sample.count),
                ],
                label,
            });
        }
        prof.string_table = st.table;
        prof.encode_to_vec()
    }

    fn push_mapping(&self, prof: &mut pb::Profile, st: &mut Strings, m: usize, id: u64) {
        let mp = &self.mappings[m];
        prof.mapping.push(pb::Mapping {
            id,
            memory_start: mp.start,
            memory_limit: mp.limit,
            file_offset: 0,
            filename: st.id(&mp.file),
            build_id: st.id(&mp.build_id),
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            has_inline_frames: true,
        });
    }
}

/// Whether `module` looks like a shared library or a pseudo-module
/// (`[kernel]`, `[vdso]`, ...) rather than a program.
fn is_library(module: &str) -> bool {
    module.is_empty()
        || module.starts_with('[')
        || module.ends_with(".so")
        || module.contains(".so.")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    const START_S: u64 = 1_750_000_000;

    fn function(name: &str, module: &str, inlined: bool) -> api::WindowFunction {
        api::WindowFunction {
            name: name.into(),
            module: module.into(),
            file: format!("{name}.c"),
            inlined,
            ..Default::default()
        }
    }

    /// Stacks innermost first; frame addresses 0x1000 + 16 × frame index,
    /// lines 10 + frame index.
    fn stack(tid: u32, function: Vec<u32>, count: u64) -> api::WindowStack {
        let n = function.len() as u64;
        api::WindowStack {
            tid,
            line: (0..n as u32).map(|i| 10 + i).collect(),
            address: (0..n).map(|i| 0x1000 + 16 * i).collect(),
            function,
            count,
        }
    }

    fn service(name: &str, pid: u32, stacks: Vec<api::WindowStack>) -> api::ServiceWindow {
        let samples = stacks.iter().map(|s| s.count).sum();
        api::ServiceWindow {
            service: name.into(),
            samples,
            processes: vec![api::WindowProcess {
                pid,
                comm: "app".into(),
                executable: "/usr/bin/app".into(),
                build_id: "abcd".into(),
                samples,
                ..Default::default()
            }],
            threads: vec![
                api::WindowThread {
                    tid: pid,
                    pid,
                    name: "app".into(),
                    samples: 0,
                },
                api::WindowThread {
                    tid: pid + 1,
                    pid,
                    name: "worker".into(),
                    samples: 0,
                },
            ],
            functions: vec![
                function("leaf", "app", false),
                function("mid", "libc.so.6", false),
                function("main", "app", false),
            ],
            stacks,
            ..Default::default()
        }
    }

    fn window(services: Vec<api::ServiceWindow>) -> api::Window {
        api::Window {
            id: "0123456789abcdef0123456789abcdef".into(),
            start_unix_ns: START_S * NANOS,
            end_unix_ns: (START_S + 10) * NANOS,
            host: "web-1".into(),
            frequency_hz: 100,
            services,
            ..Default::default()
        }
    }

    fn decode(body: &[u8]) -> pb::Profile {
        assert_eq!(&body[..2], &[0x1f, 0x8b], "gzip'd");
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(body)
            .read_to_end(&mut raw)
            .unwrap();
        pb::Profile::decode(raw.as_slice()).unwrap()
    }

    /// A decoded sample: function names leaf first, count, labels.
    type Decoded = (Vec<String>, i64, Vec<(String, String)>);

    /// Each sample of `p`.
    fn samples(p: &pb::Profile) -> Vec<Decoded> {
        let s = |i: i64| p.string_table[i as usize].clone();
        let function = |id: u64| p.function.iter().find(|f| f.id == id).unwrap();
        let location = |id: u64| p.location.iter().find(|l| l.id == id).unwrap();
        p.sample
            .iter()
            .map(|sample| {
                let names = sample
                    .location_id
                    .iter()
                    .flat_map(|&l| location(l).line.iter())
                    .map(|line| s(function(line.function_id).name))
                    .collect();
                let labels = sample
                    .label
                    .iter()
                    .map(|l| {
                        let v = if l.str != 0 {
                            s(l.str)
                        } else {
                            l.num.to_string()
                        };
                        (s(l.key), v)
                    })
                    .collect();
                (names, sample.value[0], labels)
            })
            .collect()
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parameters_carry_the_series_and_the_window_span() {
        let w = window(vec![service(
            "web.service",
            10,
            vec![stack(10, vec![0, 1, 2], 3)],
        )]);
        let labels = vec![("env".to_string(), "prod".to_string())];
        let (ingests, sent) = requests(&w, &labels, &Limits::default());
        assert_eq!(ingests.len(), 1);
        let q: Vec<(&str, &str)> = ingests[0]
            .query
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let from = (START_S * NANOS).to_string();
        let until = ((START_S + 10) * NANOS).to_string();
        assert_eq!(
            q,
            [
                ("format", "pprof"),
                (
                    "name",
                    "web.service{service_name=web.service,host=web-1,env=prod}"
                ),
                ("from", from.as_str()),
                ("until", until.as_str()),
                ("sampleRate", "100"),
                ("spyName", "profd"),
            ]
        );
        assert_eq!(ingests[0].service, "web.service");
        assert_eq!(
            sent,
            Sent {
                bytes: ingests[0].body.len() as u64,
                requests: 1,
                split: 0,
                truncated: 0,
                rejected: 0,
            }
        );
    }

    #[test]
    fn names_pyroscope_cannot_take_are_made_safe() {
        let mut w = window(vec![
            service("[kernel]", 1, vec![stack(1, vec![0], 1)]),
            service("nginx@1.service", 2, vec![stack(2, vec![0], 1)]),
            service("a,b}c", 3, vec![stack(3, vec![0], 1)]),
        ]);
        w.host = " odd,host} ".into();
        let labels = vec![
            ("team".to_string(), "x,y}".to_string()),
            ("host".to_string(), "ignored".to_string()),
        ];
        let (ingests, _) = requests(&w, &labels, &Limits::default());
        let names: Vec<&str> = ingests.iter().map(|i| i.query[1].1.as_str()).collect();
        assert_eq!(
            names,
            [
                "_kernel_{service_name=[kernel],host=odd_host_,team=x_y_}",
                "nginx_1.service{service_name=nginx@1.service,host=odd_host_,team=x_y_}",
                "a_b_c{service_name=a_b_c,host=odd_host_,team=x_y_}",
            ]
        );
        assert_eq!(app_name(""), "profd");
        assert!(series_name("", "", &[]).starts_with("profd{service_name=unknown,host=unknown"));
    }

    #[test]
    fn times_are_nanoseconds_when_pyroscope_reads_them_so() {
        assert_eq!(
            attime(1_750_000_000_123_456_789, Round::Down),
            "1750000000123456789"
        );
        // Before 2001-09-09, 18 digits would be read as seconds: whole
        // seconds are sent, widened to cover the window.
        assert_eq!(attime(999_999_999_500_000_000, Round::Down), "999999999");
        assert_eq!(attime(999_999_999_500_000_000, Round::Up), "1000000000");
        assert_eq!(attime(5 * NANOS, Round::Up), "5");
    }

    #[test]
    fn a_process_in_a_pod_has_its_samples_labelled_with_the_pod() {
        let mut s = service("3f2a9c0d1e2b", 10, vec![stack(10, vec![0, 1, 2], 3)]);
        s.processes[0].pod = Some(api::KubernetesPod {
            namespace: "shop".into(),
            name: "web-7f9".into(),
            uid: "0b6e3a4c-1d2f-4e5a-9b8c-7d6e5f4a3b2c".into(),
            container: "app".into(),
        });
        let (ingests, _) = requests(&window(vec![s]), &[], &Limits::default());
        let p = decode(&ingests[0].body);
        let labels = &samples(&p)[0].2;
        let want: Vec<(String, String)> = [
            ("pid", "10"),
            ("tid", "10"),
            ("comm", "app"),
            ("namespace", "shop"),
            ("pod", "web-7f9"),
            ("container", "app"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(labels, &want);
    }

    #[test]
    fn the_profile_holds_the_window_s_samples_stacks_and_labels() {
        let mut s = service(
            "web.service",
            10,
            vec![
                stack(10, vec![0, 1, 2], 3),
                stack(11, vec![0, 1, 2], 4),
                stack(11, vec![3, 0, 2], 2),
                stack(99, vec![2], 1),
                stack(10, vec![], 5),
            ],
        );
        s.functions.push(function("inl", "app", true));
        // The inlined frame shares its caller's address.
        s.stacks[2].address = vec![0x2000, 0x2000, 0x3000];
        let w = window(vec![s]);
        let (ingests, _) = requests(&w, &[], &Limits::default());
        let p = decode(&ingests[0].body);
        let st = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(st(0), "");
        let types: Vec<(&str, &str)> = p
            .sample_type
            .iter()
            .map(|t| (st(t.r#type), st(t.unit)))
            .collect();
        assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
        let period = p.period_type.unwrap();
        assert_eq!((st(period.r#type), st(period.unit)), ("cpu", "nanoseconds"));
        assert_eq!(p.period, 10_000_000);
        assert_eq!(p.time_nanos as u64, START_S * NANOS);
        assert_eq!(p.duration_nanos as u64, 10 * NANOS);
        let l = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(
            samples(&p),
            [
                (
                    strings(&["leaf", "mid", "main"]),
                    3,
                    l(&[("pid", "10"), ("tid", "10"), ("comm", "app")])
                ),
                (
                    strings(&["leaf", "mid", "main"]),
                    4,
                    l(&[("pid", "10"), ("tid", "11"), ("comm", "app")])
                ),
                (
                    strings(&["inl", "leaf", "main"]),
                    2,
                    l(&[("pid", "10"), ("tid", "11"), ("comm", "app")])
                ),
                // A thread the window does not describe: its tid only.
                (strings(&["main"]), 1, l(&[("tid", "99")])),
            ]
        );
        // cpu = count × period.
        for s in &p.sample {
            assert_eq!(s.value[1], s.value[0] * 10_000_000);
        }
        // The inline chain is one location with two lines, innermost first.
        let inl = &p.sample[2].location_id;
        assert_eq!(inl.len(), 2);
        let loc = p.location.iter().find(|x| x.id == inl[0]).unwrap();
        assert_eq!(loc.address, 0x2000);
        let lines: Vec<(&str, i64)> = loc
            .line
            .iter()
            .map(|line| {
                let f = p
                    .function
                    .iter()
                    .find(|f| f.id == line.function_id)
                    .unwrap();
                (st(f.name), line.line)
            })
            .collect();
        assert_eq!(lines, [("inl", 10), ("leaf", 11)]);
        let leaf = p.function.iter().find(|f| st(f.name) == "leaf").unwrap();
        assert_eq!(st(leaf.filename), "leaf.c");
        // Mapping 1 is the program, with its build id.
        assert_eq!(p.mapping[0].id, 1);
        assert_eq!(st(p.mapping[0].filename), "app");
        assert_eq!(st(p.mapping[0].build_id), "abcd");
        let libc = p.mapping.iter().find(|m| st(m.filename) == "libc.so.6");
        assert_eq!(libc.map(|m| st(m.build_id)), Some(""));
        // Ids are 1.. in order, each once.
        for (i, x) in p.location.iter().enumerate() {
            assert_eq!(x.id, i as u64 + 1);
        }
        for (i, x) in p.function.iter().enumerate() {
            assert_eq!(x.id, i as u64 + 1);
        }
    }

    /// Interpreter frames as the daemon puts them in windows (module
    /// `[python]`, `[ruby]`, `[perl]`, no address, the source file and
    /// line) reach Pyroscope one location each, named and lined as sent,
    /// though they share the address 0.
    #[test]
    fn interpreter_frames_keep_their_names_and_lines() {
        let mut s = service("py.service", 10, Vec::new());
        s.functions = ["py_split.hot_a", "py_split.hot_b", "py_split.outer"]
            .iter()
            .map(|name| api::WindowFunction {
                name: name.to_string(),
                module: "[python]".into(),
                file: "/srv/py_split.py".into(),
                ..Default::default()
            })
            .chain(
                [("block in Work#outer", "[ruby]"), ("Work::hot_a", "[perl]")]
                    .iter()
                    .map(|(name, module)| api::WindowFunction {
                        name: name.to_string(),
                        module: module.to_string(),
                        file: "/srv/work".into(),
                        ..Default::default()
                    }),
            )
            .collect();
        let at = |function: Vec<u32>, line: Vec<u32>, count: u64| api::WindowStack {
            tid: 10,
            address: vec![0; function.len()],
            function,
            line,
            count,
        };
        s.stacks = vec![
            at(vec![0, 2], vec![21, 35], 3),
            at(vec![1, 2], vec![27, 36], 1),
            at(vec![4, 3], vec![5, 9], 2),
        ];
        s.samples = 6;
        let (ingests, _) = requests(&window(vec![s]), &[], &Limits::default());
        let p = decode(&ingests[0].body);
        let st = |i: i64| p.string_table[i as usize].clone();
        let function = |id: u64| p.function.iter().find(|f| f.id == id).unwrap();
        let mut got: Vec<(Vec<(String, i64)>, i64)> = p
            .sample
            .iter()
            .map(|sample| {
                let frames = (sample.location_id.iter())
                    .map(|&l| p.location.iter().find(|x| x.id == l).unwrap())
                    .flat_map(|l| l.line.iter())
                    .map(|line| (st(function(line.function_id).name), line.line))
                    .collect();
                (frames, sample.value[0])
            })
            .collect();
        got.sort();
        let f = |name: &str, line: i64| (name.to_string(), line);
        assert_eq!(
            got,
            [
                (vec![f("Work::hot_a", 5), f("block in Work#outer", 9)], 2),
                (vec![f("py_split.hot_a", 21), f("py_split.outer", 35)], 3),
                (vec![f("py_split.hot_b", 27), f("py_split.outer", 36)], 1),
            ]
        );
        let file = |name: &str| {
            let f = p.function.iter().find(|f| st(f.name) == name).unwrap();
            st(f.filename)
        };
        assert_eq!(file("py_split.hot_a"), "/srv/py_split.py");
    }

    /// A library's mapping carries the build id of its code the host
    /// could not name (`module!0xSTART`), so Pyroscope can name it.
    #[test]
    fn mappings_of_unnamed_code_carry_its_build_id() {
        let mut s = service("web.service", 10, vec![stack(10, vec![3, 1, 2], 3)]);
        s.functions.push(api::WindowFunction {
            name: "liblzma.so.5!0x15ae0".into(),
            module: "liblzma.so.5".into(),
            build_id: "beef".into(),
            address: 0x15ae0,
            ..Default::default()
        });
        let (ingests, _) = requests(&window(vec![s]), &[], &Limits::default());
        let p = decode(&ingests[0].body);
        let st = |i: i64| p.string_table[i as usize].as_str();
        let ids: Vec<(&str, &str)> = p
            .mapping
            .iter()
            .map(|m| (st(m.filename), st(m.build_id)))
            .collect();
        assert!(ids.contains(&("liblzma.so.5", "beef")), "{ids:?}");
        assert!(ids.contains(&("app", "abcd")), "{ids:?}");
        assert!(ids.contains(&("libc.so.6", "")), "{ids:?}");
    }

    #[test]
    fn profiles_over_the_limits_are_split_and_deep_stacks_cut_at_the_leaf() {
        let stacks: Vec<api::WindowStack> = (0..5u32)
            .map(|i| stack(10 + (i % 2), vec![0, 1, 2], u64::from(i) + 1))
            .collect();
        let w = window(vec![
            service("web.service", 10, stacks),
            service("db.service", 20, vec![stack(20, vec![0], 7)]),
        ]);
        let limits = Limits {
            max_samples: 2,
            ..Limits::default()
        };
        let (ingests, sent) = requests(&w, &[], &limits);
        // 5 samples in parts of at most 2: 3 parts; db in one.
        assert_eq!(ingests.len(), 4);
        assert_eq!((sent.requests, sent.split, sent.truncated), (4, 1, 0));
        let body_bytes: usize = ingests.iter().map(|i| i.body.len()).sum();
        assert_eq!(sent.bytes, body_bytes as u64);
        let web: Vec<&Ingest> = ingests
            .iter()
            .filter(|i| i.service == "web.service")
            .collect();
        assert_eq!(web.len(), 3);
        let mut total = 0;
        for part in &web {
            assert_eq!(part.query, web[0].query, "same series and span");
            let p = decode(&part.body);
            assert!(p.sample.len() <= 2);
            total += p.sample.iter().map(|s| s.value[0]).sum::<i64>();
        }
        assert_eq!(total, 1 + 2 + 3 + 4 + 5);

        // By size: each part within max_bytes (but a part of one sample,
        // which cannot be cut), the counts all there.
        let whole = Profile::new(&w, &w.services[0], 1000).encode(&[0, 1, 2, 3, 4]);
        let limits = Limits {
            max_bytes: whole.len() - 1,
            ..Limits::default()
        };
        let (ingests, sent) = requests(&w, &[], &limits);
        assert_eq!(sent.split, 1);
        let mut total = 0;
        for part in ingests.iter().filter(|i| i.service == "web.service") {
            let p = decode(&part.body);
            assert!(p.sample.len() == 1 || p.encode_to_vec().len() <= limits.max_bytes);
            total += p.sample.iter().map(|s| s.value[0]).sum::<i64>();
        }
        assert_eq!(total, 15);

        // Depth: 6 frames cut to the 4 nearest the root.
        let deep = stack(10, vec![0, 1, 0, 1, 0, 2], 3);
        let w = window(vec![service(
            "web.service",
            10,
            vec![deep, stack(10, vec![2], 1)],
        )]);
        let limits = Limits {
            max_depth: 4,
            ..Limits::default()
        };
        let (ingests, sent) = requests(&w, &[], &limits);
        assert_eq!((sent.requests, sent.split, sent.truncated), (1, 0, 1));
        let p = decode(&ingests[0].body);
        assert_eq!(samples(&p)[0].0, strings(&["leaf", "mid", "leaf", "main"]));
        assert_eq!(samples(&p)[0].1, 3);
    }

    #[test]
    fn a_window_without_stacks_sends_nothing() {
        let w = window(vec![service("idle.service", 1, vec![])]);
        let (ingests, sent) = requests(&w, &[], &Limits::default());
        assert!(ingests.is_empty());
        assert_eq!(sent, Sent::default());
    }

    fn config() -> Config {
        Config {
            url: "http://127.0.0.1:4040".into(),
            tenant: Some("team-a".into()),
            auth: Auth::None,
            labels: vec![("env".into(), "prod".into())],
            timeout: Duration::from_secs(5),
            ca: None,
        }
    }

    #[test]
    fn bad_settings_are_named_with_what_to_change() {
        let p = Pyroscope::new(config()).unwrap();
        assert_eq!(p.url(), "http://127.0.0.1:4040/ingest");
        let with_path = Pyroscope::new(Config {
            url: "https://proxy.example/pyroscope/".into(),
            ..config()
        })
        .unwrap();
        assert_eq!(with_path.url(), "https://proxy.example/pyroscope/ingest");
        let err = |c: Config| Pyroscope::new(c).unwrap_err().to_string();
        let cases = [
            (
                Config {
                    url: "127.0.0.1:4040".into(),
                    ..config()
                },
                "url:",
            ),
            (
                Config {
                    url: "ftp://h/".into(),
                    ..config()
                },
                "use http:// or https://",
            ),
            (
                Config {
                    url: "http://u:p@h/".into(),
                    ..config()
                },
                "credentials",
            ),
            (
                Config {
                    url: "http://h/?x=1".into(),
                    ..config()
                },
                "base URL only",
            ),
            (
                Config {
                    tenant: Some("a b".into()),
                    ..config()
                },
                "tenant: \"a b\" has ' '",
            ),
            (
                Config {
                    tenant: Some("..".into()),
                    ..config()
                },
                "tenant:",
            ),
            (
                Config {
                    tenant: Some("x".repeat(151)),
                    ..config()
                },
                "at most 150",
            ),
            (
                Config {
                    tenant: Some(String::new()),
                    ..config()
                },
                "tenant: is empty",
            ),
            (
                Config {
                    labels: vec![("my-label".into(), "v".into())],
                    ..config()
                },
                "labels: name \"my-label\"",
            ),
            (
                Config {
                    labels: vec![("service_name".into(), "v".into())],
                    ..config()
                },
                "set by profd or Pyroscope",
            ),
            (
                Config {
                    labels: vec![("__x".into(), "v".into())],
                    ..config()
                },
                "set by profd or Pyroscope",
            ),
            (
                Config {
                    labels: vec![("a".into(), "v".into()), ("a".into(), "w".into())],
                    ..config()
                },
                "twice",
            ),
            (
                Config {
                    labels: vec![("a".into(), "x,y".into())],
                    ..config()
                },
                "','",
            ),
            (
                Config {
                    labels: vec![("a".into(), " ".into())],
                    ..config()
                },
                "empty value",
            ),
            (
                Config {
                    labels: (0..26).map(|i| (format!("l{i}"), "v".into())).collect(),
                    ..config()
                },
                "at most 25",
            ),
        ];
        for (c, want) in cases {
            let e = err(c);
            assert!(e.contains(want), "{e:?} lacks {want:?}");
        }
        assert!(Pyroscope::new(Config {
            tenant: Some("Org_1.a-b!*'()".into()),
            labels: vec![("k8s.namespace".into(), "x=y {z".into())],
            ..config()
        })
        .is_ok());
    }
}
