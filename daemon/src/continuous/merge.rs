//! The merged profile of a history query, built a stack at a time as each
//! window is read ([`super::decode::Visit`]): no window is held whole, each
//! merged stack's frames are held once, and an answer that needs only the
//! function table keeps no stacks at all. Which windows are read, and the
//! errors a query answers, are [`super::history`]'s.
use super::decode::Mismatch;
use super::decode::Visit;
use crate::request_error::Error;
use profd_common::api;
use profd_common::model::ResolvedStack;
use profd_common::model::{Aggregator, Counts, FrameRef, FunctionInfo, Origin, ResolvedProfile};
use std::collections::hash_map::RandomState;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::BuildHasher;

/// Most service names quoted in a NOT_FOUND message.
const MAX_NAMED: usize = 20;
/// No stack after it in a chain of [`Merge::chain`].
const END: u32 = u32::MAX;

/// What a query's answer needs of the merged windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Every distinct stack (views, exports).
    Stacks,
    /// Per-function counts only (the flat table, the JSON report): the
    /// stacks are counted as they come and not kept.
    Functions,
}

/// A merged query: the session, the profile (without stacks for
/// [`Want::Functions`]) and, for that, the per-function counts.
pub struct Merged {
    pub session: api::Session,
    pub profile: ResolvedProfile,
    pub counts: Option<Vec<Counts>>,
}

/// The service being read, while its stacks come.
#[derive(Default)]
struct Current {
    /// Not asked for: its stacks are passed over.
    skip: bool,
    /// Its functions, and the merged id of each once met.
    functions: Vec<api::WindowFunction>,
    ids: Vec<Option<u32>>,
    pid_of: HashMap<u32, u32>,
    processes: HashMap<u32, api::WindowProcess>,
    threads: Vec<api::WindowThread>,
    service: Option<FrameRef>,
    groups: HashMap<u32, FrameRef>,
    used: HashSet<u32>,
}

/// The merged profile of a query, built window by window.
pub struct Merge<'q> {
    q: &'q api::Query,
    by: api::GroupBy,
    want: Want,
    p: ResolvedProfile,
    functions: HashMap<FunctionInfo, u32>,
    /// Distinct stacks by the hash of (tid, frames): the first of a chain
    /// of `p.stacks` indices, linked through `chain`. The frames are held
    /// once, in `p.stacks`.
    heads: HashMap<u64, u32>,
    chain: Vec<u32>,
    hasher: RandomState,
    /// With [`Want::Functions`]: the counts so far.
    agg: Aggregator,
    /// Scratch: a stack's frames, and its function ids.
    frames: Vec<FrameRef>,
    ids: Vec<u32>,
    /// Per process: its entry of Session.processes (index by pid).
    processes: Vec<api::ProcessSamples>,
    process_at: HashMap<u32, usize>,
    totals: api::Totals,
    /// The totals of the services selected's own samples (see
    /// `ServiceWindow.totals`), or of the processes selected's
    /// (`WindowProcess.totals`), which stand for the windows' when services
    /// or processes are selected.
    selected: api::Totals,
    first_start_ns: Option<u64>,
    covered_ns: u64,
    event: i32,
    /// Services and processes in the range (of the services selected).
    services_seen: BTreeSet<String>,
    /// Namespaces and pods (`NAMESPACE/NAME`) in the range, of every
    /// service.
    namespaces_seen: BTreeSet<String>,
    pods_seen: BTreeSet<String>,
    /// The ids of the windows merged: each counts once.
    window_ids: HashSet<String>,
    pids_seen: BTreeSet<u32>,
    host: Option<FrameRef>,
    cur: Current,
}

impl<'q> Merge<'q> {
    pub fn new(q: &'q api::Query, want: Want) -> Merge<'q> {
        Merge {
            q,
            by: api::GroupBy::try_from(q.by).unwrap_or_default(),
            want,
            p: ResolvedProfile {
                pid: 0,
                comm: "continuous".into(),
                ..Default::default()
            },
            functions: HashMap::new(),
            heads: HashMap::new(),
            chain: Vec::new(),
            hasher: RandomState::new(),
            agg: Aggregator::new(0),
            frames: Vec::with_capacity(128),
            ids: Vec::with_capacity(128),
            processes: Vec::new(),
            process_at: HashMap::new(),
            totals: api::Totals::default(),
            selected: api::Totals::default(),
            first_start_ns: None,
            covered_ns: 0,
            event: 0,
            services_seen: BTreeSet::new(),
            namespaces_seen: BTreeSet::new(),
            pods_seen: BTreeSet::new(),
            window_ids: HashSet::new(),
            pids_seen: BTreeSet::new(),
            host: None,
            cur: Current::default(),
        }
    }

    /// Whether window `id` was merged already.
    pub fn has(&self, id: &str) -> bool {
        self.window_ids.contains(id)
    }

    /// Merge a whole window (as [`Visit`] is handed it).
    #[cfg(test)]
    pub fn add(&mut self, mut w: api::Window) {
        let services = std::mem::take(&mut w.services);
        if !self.head(&w).unwrap_or(false) {
            return;
        }
        for mut s in services {
            let stacks = std::mem::take(&mut s.stacks);
            self.service(s);
            for stack in stacks {
                self.stack(stack);
            }
            self.service_end();
        }
    }

    fn function(&mut self, info: FunctionInfo) -> u32 {
        if let Some(&id) = self.functions.get(&info) {
            return id;
        }
        let id = self.p.functions.len() as u32;
        self.p.functions.push(info.clone());
        self.functions.insert(info, id);
        id
    }

    fn group(&mut self, name: String) -> FrameRef {
        FrameRef {
            function: self.function(FunctionInfo {
                name,
                module: "[group]".into(),
                ..Default::default()
            }),
            line: 0,
            address: 0,
        }
    }

    /// The merged id of function `f` of the current service.
    fn function_of(&mut self, f: u32) -> u32 {
        match self.cur.ids.get(f as usize) {
            Some(Some(id)) => *id,
            Some(None) => {
                let wf = &self.cur.functions[f as usize];
                let info = FunctionInfo {
                    name: wf.name.clone(),
                    module: wf.module.clone(),
                    file: wf.file.clone(),
                    inlined: wf.inlined,
                    origin: (!wf.build_id.is_empty()).then(|| Origin {
                        build_id: wf.build_id.clone(),
                        address: wf.address,
                    }),
                };
                let id = self.function(info);
                self.cur.ids[f as usize] = Some(id);
                id
            }
            // An index past the window's functions: unnamed.
            None => self.function(FunctionInfo {
                name: "[unknown]".into(),
                ..Default::default()
            }),
        }
    }

    /// Count `count` samples of thread `tid` on `self.frames`: added to its
    /// stack (kept once), or to the function counts.
    fn count(&mut self, tid: u32, count: u64) {
        if self.want == Want::Functions {
            self.ids.clear();
            self.ids.extend(self.frames.iter().map(|f| f.function));
            self.agg.grow(self.p.functions.len());
            self.agg.add(&self.ids, count);
            return;
        }
        let hash = self.hasher.hash_one((tid, &self.frames[..]));
        let mut at = self.heads.get(&hash).copied().unwrap_or(END);
        while at != END {
            let s = &mut self.p.stacks[at as usize];
            if s.tid == tid && s.frames == self.frames {
                s.count += count;
                return;
            }
            at = self.chain[at as usize];
        }
        let new = self.p.stacks.len() as u32;
        let next = self.heads.insert(hash, new).unwrap_or(END);
        self.chain.push(next);
        // Sized exactly: a big answer's frames are most of its memory.
        self.p.stacks.push(ResolvedStack {
            tid,
            frames: self.frames.to_vec(),
            count,
        });
    }

    /// The profile and its session, or NOT_FOUND when a service or process
    /// asked for is in none of the windows.
    pub fn finish(mut self, from_ns: u64, to_ns: u64) -> Result<Merged, Error> {
        let span = || {
            let at = |ns: u64| {
                let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns);
                humantime::format_rfc3339_millis(t).to_string()
            };
            let to = match to_ns {
                u64::MAX => "now".to_string(),
                ns => at(ns),
            };
            format!("from {} to {to}", at(from_ns))
        };
        let missing: Vec<&String> = self
            .q
            .services
            .iter()
            .filter(|s| !self.services_seen.contains(*s))
            .collect();
        if !missing.is_empty() {
            let there = if self.services_seen.is_empty() {
                "there are no windows in that range".to_string()
            } else {
                format!("the services there are {}", listed(&self.services_seen))
            };
            let missing: Vec<String> = missing.iter().map(|s| profd_common::quoted(s)).collect();
            return Err(Error::NotFound(format!(
                "no service {} in the history {}: {there} (see profctl query --list)",
                missing.join(", "),
                span()
            )));
        }
        for (asked, seen, what, flag) in [
            (
                &self.q.namespaces,
                &self.namespaces_seen,
                "namespace",
                "namespaces",
            ),
            (&self.q.pods, &self.pods_seen, "pod", "pods"),
        ] {
            let missing: Vec<String> = asked
                .iter()
                .filter(|a| !seen.contains(*a) && !seen.iter().any(|s| pod_name(s) == *a))
                .map(|s| profd_common::quoted(s))
                .collect();
            if !missing.is_empty() {
                let there = if seen.is_empty() {
                    "no process there ran in a Kubernetes pod the node named".to_string()
                } else {
                    format!("the {flag} there are {}", listed(seen))
                };
                return Err(Error::NotFound(format!(
                    "no {what} {} in the history {}: {there}",
                    missing.join(", "),
                    span()
                )));
            }
        }
        let missing: Vec<String> = self
            .q
            .pids
            .iter()
            .filter(|p| !self.pids_seen.contains(*p))
            .map(u32::to_string)
            .collect();
        if !missing.is_empty() {
            return Err(Error::NotFound(format!(
                "no process {} in the history {}{}: give the pid of a process sampled then",
                missing.join(", "),
                span(),
                if self.q.services.is_empty() {
                    String::new()
                } else {
                    " of the services asked for".to_string()
                }
            )));
        }
        self.p.duration_s = self.covered_ns as f64 / 1e9;
        self.totals.attributed = self.p.attributed;
        if !self.q.services.is_empty() || self.by_process() {
            // The samples' totals are the services' or processes'; the
            // rest the rings'.
            let t = self.totals;
            self.totals = api::Totals {
                attributed: t.attributed,
                discarded: t.discarded,
                lost: t.lost,
                overflowed: t.overflowed,
                throttled: t.throttled,
                unchecked: t.unchecked,
                unsampled: t.unsampled,
                time: t.time,
                ..self.selected
            };
        }
        let session = api::Session {
            id: 0,
            pid: 0,
            comm: self.p.comm.clone(),
            frequency_hz: self.p.frequency_hz,
            event: self.event,
            state: api::SessionState::DurationElapsed as i32,
            started_unix_ms: self.first_start_ns.unwrap_or(0) / 1_000_000,
            duration_s: self.p.duration_s,
            totals: Some(self.totals),
            scope: api::Scope::SystemWide as i32,
            processes: self.processes,
            ..Default::default()
        };
        let counts = (self.want == Want::Functions).then(|| {
            self.agg.grow(self.p.functions.len());
            self.agg.into_counts()
        });
        Ok(Merged {
            session,
            profile: self.p,
            counts,
        })
    }
}

/// Names quoted and listed, [`MAX_NAMED`] at most.
fn listed(names: &BTreeSet<String>) -> String {
    let mut list: Vec<String> = names
        .iter()
        .take(MAX_NAMED)
        .map(|s| profd_common::quoted(s))
        .collect();
    if names.len() > MAX_NAMED {
        list.push(format!("and {} more", names.len() - MAX_NAMED));
    }
    list.join(", ")
}

/// The name of a pod written `NAMESPACE/NAME`.
fn pod_name(pod: &str) -> &str {
    pod.split_once('/').map_or(pod, |(_, name)| name)
}

impl Merge<'_> {
    /// The query selects processes by their pod.
    fn by_pod(&self) -> bool {
        !self.q.namespaces.is_empty() || !self.q.pods.is_empty()
    }

    /// The query selects processes, by pid or by their pod.
    fn by_process(&self) -> bool {
        !self.q.pids.is_empty() || self.by_pod()
    }

    /// The query selects process `pid` (`p` as its window has it): by its
    /// pid and by its pod.
    fn process_selected(&self, pid: u32, p: Option<&api::WindowProcess>) -> bool {
        (self.q.pids.is_empty() || self.q.pids.contains(&pid)) && self.pod_selected(p)
    }

    /// Process `p` is in a pod the query selects (any process, when it
    /// selects none). A pod is asked for by its name or as `NAMESPACE/NAME`.
    fn pod_selected(&self, p: Option<&api::WindowProcess>) -> bool {
        if !self.by_pod() {
            return true;
        }
        let Some(pod) = p.and_then(|p| p.pod.as_ref()) else {
            return false;
        };
        let full = format!("{}/{}", pod.namespace, pod.name);
        (self.q.namespaces.is_empty() || self.q.namespaces.contains(&pod.namespace))
            && (self.q.pods.is_empty() || self.q.pods.iter().any(|a| *a == pod.name || *a == full))
    }
}

/// `from`'s counts added to `to` (but `attributed`, which a merge counts
/// itself, and time, which windows do not have).
fn add_totals(to: &mut api::Totals, from: &api::Totals) {
    to.discarded += from.discarded;
    to.lost += from.lost;
    to.truncated += from.truncated;
    to.unsymbolized += from.unsymbolized;
    to.overflowed += from.overflowed;
    to.throttled += from.throttled;
    to.unchecked += from.unchecked;
    to.unsampled += from.unsampled;
    to.python_unreadable += from.python_unreadable;
    to.ruby_unreadable += from.ruby_unreadable;
    to.perl_unreadable += from.perl_unreadable;
    to.truncated_copy_ended += from.truncated_copy_ended;
}

impl Visit for Merge<'_> {
    fn head(&mut self, w: &api::Window) -> Result<bool, Mismatch> {
        if !self.window_ids.insert(w.id.clone()) {
            tracing::warn!(id = %w.id, "a window met twice in one query: counted once");
            return Ok(false);
        }
        self.first_start_ns = Some(
            self.first_start_ns
                .map_or(w.start_unix_ns, |s| s.min(w.start_unix_ns)),
        );
        self.covered_ns += w.end_unix_ns.saturating_sub(w.start_unix_ns);
        if w.frequency_hz != 0 {
            self.p.frequency_hz = w.frequency_hz;
            self.event = w.event;
        }
        if let Some(t) = &w.totals {
            add_totals(&mut self.totals, t);
        }
        self.host =
            (self.by == api::GroupBy::Host).then(|| self.group(format!("[host {}]", w.host)));
        Ok(true)
    }

    fn service(&mut self, sw: api::ServiceWindow) {
        self.services_seen.insert(sw.service.clone());
        for pod in sw.processes.iter().filter_map(|p| p.pod.as_ref()) {
            if !pod.name.is_empty() {
                self.namespaces_seen.insert(pod.namespace.clone());
                self.pods_seen
                    .insert(format!("{}/{}", pod.namespace, pod.name));
            }
        }
        let unasked = !self.q.services.is_empty() && !self.q.services.contains(&sw.service);
        let no_pod = self.by_pod() && !sw.processes.iter().any(|p| self.pod_selected(Some(p)));
        if unasked || no_pod {
            self.cur = Current {
                skip: true,
                ..Default::default()
            };
            return;
        }
        self.pids_seen.extend(sw.processes.iter().map(|p| p.pid));
        if self.by_process() {
            let mut selected = self.selected;
            for p in sw
                .processes
                .iter()
                .filter(|p| self.process_selected(p.pid, Some(p)))
            {
                if let Some(t) = &p.totals {
                    add_totals(&mut selected, t);
                }
            }
            self.selected = selected;
        } else if let Some(t) = &sw.totals {
            add_totals(&mut self.selected, t);
        }
        let service = (self.by == api::GroupBy::Service)
            .then(|| self.group(format!("[service {}]", sw.service)));
        self.cur = Current {
            skip: false,
            ids: vec![None; sw.functions.len()],
            functions: sw.functions,
            pid_of: sw.threads.iter().map(|t| (t.tid, t.pid)).collect(),
            processes: sw.processes.into_iter().map(|p| (p.pid, p)).collect(),
            threads: sw.threads,
            service,
            groups: HashMap::new(),
            used: HashSet::new(),
        };
    }

    fn stack(&mut self, s: api::WindowStack) {
        if self.cur.skip {
            return;
        }
        let pid = self.cur.pid_of.get(&s.tid).copied().unwrap_or(0);
        if !self.process_selected(pid, self.cur.processes.get(&pid)) {
            return;
        }
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        for (i, &f) in s.function.iter().enumerate() {
            frames.push(FrameRef {
                function: self.function_of(f),
                line: s.line.get(i).copied().unwrap_or(0),
                address: s.address.get(i).copied().unwrap_or(0),
            });
        }
        let group = match self.by {
            api::GroupBy::Service => self.cur.service,
            api::GroupBy::Host => self.host,
            api::GroupBy::Process => Some(match self.cur.groups.get(&pid) {
                Some(g) => *g,
                None => {
                    let comm = self.cur.processes.get(&pid).map_or("", |p| p.comm.as_str());
                    let g = self.group(format!("[process {pid} {comm}]"));
                    self.cur.groups.insert(pid, g);
                    g
                }
            }),
            api::GroupBy::Pod => Some(match self.cur.groups.get(&pid) {
                Some(g) => *g,
                None => {
                    let pod = self.cur.processes.get(&pid).and_then(|p| p.pod.as_ref());
                    let name = match pod {
                        Some(p) if !p.name.is_empty() => format!("{}/{}", p.namespace, p.name),
                        Some(p) => format!("uid {}", p.uid),
                        None => "none".to_string(),
                    };
                    let g = self.group(format!("[pod {name}]"));
                    self.cur.groups.insert(pid, g);
                    g
                }
            }),
            api::GroupBy::Unspecified => None,
        };
        frames.extend(group);
        self.frames = frames;
        self.cur.used.insert(s.tid);
        self.p.attributed += s.count;
        self.count(s.tid, s.count);
        let at = match self.process_at.get(&pid) {
            Some(&at) => at,
            None => {
                self.processes.push(api::ProcessSamples {
                    pid,
                    ..Default::default()
                });
                self.process_at.insert(pid, self.processes.len() - 1);
                self.processes.len() - 1
            }
        };
        let entry = &mut self.processes[at];
        entry.samples += s.count;
        if let Some(wp) = self.cur.processes.get(&pid) {
            if entry.comm != wp.comm {
                entry.comm = wp.comm.clone();
            }
            entry.ppid = wp.ppid;
        }
    }

    fn service_end(&mut self) {
        let cur = std::mem::take(&mut self.cur);
        for t in cur.threads {
            if !t.name.is_empty() && cur.used.contains(&t.tid) {
                self.p.threads.insert(t.tid, t.name);
            }
        }
    }
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;
