//! The gRPC service `profd.v1.Profiler`: identifies the caller, validates
//! requests, forwards them to the registry or a session actor, maps errors to
//! statuses, and runs each Watch stream (snapshot, then per-interval deltas,
//! then a final update).
use crate::continuous::history::{History, Want};
use crate::os::sysctl::{kernel_sysctl, max_sample_rate};
use crate::request_error::Error;
use crate::serve::auth::Policy;
use crate::serve::kernel_view::Sysctls;
use crate::sessions::registry::{Listing, Registry};
use crate::sessions::session::{FunctionTable, Handle, Resolved, MAX_WINDOW_S};
use profd_common::api::{self, profiler_server::Profiler};
use profd_common::kernel::KernelFrames;
use profd_common::names::{self, FindError};
use profd_common::{export, views};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

/// Most bytes of a status message. Messages quote what was sent only in
/// part (`profd_common::quoted`); this bounds any that would not.
const MAX_MESSAGE_BYTES: usize = 1024;

/// `msg` within [`MAX_MESSAGE_BYTES`]: its start and its end (which says
/// what to change), with how much was left out between them.
fn capped(msg: String) -> String {
    if msg.len() <= MAX_MESSAGE_BYTES {
        return msg;
    }
    let boundary = |mut i: usize| {
        while !msg.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let head = boundary(MAX_MESSAGE_BYTES * 2 / 3);
    let tail = boundary(msg.len() - MAX_MESSAGE_BYTES / 4);
    format!(
        "{} … ({} bytes left out) … {}",
        &msg[..head],
        tail - head,
        &msg[tail..]
    )
}

impl From<Error> for Status {
    fn from(e: Error) -> Status {
        Status::new(e.code(), capped(e.to_string()))
    }
}

/// Facts about the machine probed once at start.
#[derive(Debug, Clone)]
pub struct Facts {
    pub cpus: u32,
    pub pmu_available: bool,
}

/// The tonic service (one per listener, sharing the registry).
#[derive(Clone)]
pub struct Service {
    registry: Arc<Registry>,
    policy: Arc<Policy>,
    facts: Facts,
    /// Continuous profiling's history, when it is on.
    history: Option<History>,
    /// Where its windows are sent.
    sinks: crate::continuous::sinks::Sinks,
}

/// What continuous profiling's rpcs answer while it is off.
const CONTINUOUS_OFF: &str = "continuous profiling is off in this daemon: start profd with --continuous, or set enabled = true in the [continuous] section of profd.toml";

/// What a profile, view or export is made from: a session, or a query of
/// the continuous history.
enum Source {
    Session(Handle, KernelFrames),
    History(History, api::Query),
}

impl Source {
    /// The whole profile with its summary.
    async fn resolve(&self) -> Result<Resolved, Status> {
        match self {
            Source::Session(handle, shown) => {
                Ok(handle.resolve(*shown).await.map_err(Error::from)?)
            }
            Source::History(history, q) => {
                let m = history.query(q, Want::Stacks).await?;
                Ok(Resolved {
                    session: m.session,
                    profile: m.profile,
                    timeline: None,
                    unknown_ns: Default::default(),
                })
            }
        }
    }

    /// The session and function table alone (no export), without keeping
    /// every stack where the source need not: a session's own table, or
    /// the history's counts taken as its windows are read.
    async fn functions(&self) -> Result<(api::Session, Vec<api::Function>), Status> {
        match self {
            Source::Session(handle, shown) => {
                let view = handle.profile(0, *shown).await.map_err(Error::from)?;
                Ok((view.session, view.functions))
            }
            Source::History(history, q) => {
                let m = history.query(q, Want::Functions).await?;
                let counts = m.counts.unwrap_or_default();
                Ok((m.session, views::function_rows(&m.profile, counts)))
            }
        }
    }

    /// What the source is, for messages: `session 5`, `the history query`.
    fn name(&self, session_id: u64) -> String {
        match self {
            Source::Session(..) => format!("session {session_id}"),
            Source::History(..) => "the history selected by the query".to_string(),
        }
    }
}

impl Service {
    pub fn new(registry: Arc<Registry>, policy: Arc<Policy>, facts: Facts) -> Service {
        Service {
            registry,
            policy,
            facts,
            history: None,
            sinks: Default::default(),
        }
    }

    /// Answer ListWindows and queries from `history` (continuous profiling
    /// is on), and tell of the `sinks` its windows are sent to.
    pub fn with_history(
        mut self,
        history: Option<History>,
        sinks: crate::continuous::sinks::Sinks,
    ) -> Service {
        self.history = history;
        self.sinks = sinks;
        self
    }

    /// The history, when the caller may read it: it covers every process,
    /// so only root (on the Unix socket, or a token whose user is root).
    fn history<T>(&self, req: &Request<T>) -> Result<History, Status> {
        let caller = self.policy.caller(req)?;
        let Some(history) = &self.history else {
            return Err(Status::failed_precondition(CONTINUOUS_OFF));
        };
        if !caller.is_root() {
            return Err(Error::PermissionDenied(format!(
                "{} may not read the continuous history: it covers every process on the host, so only root may (on the Unix socket, or with a token whose user is root)",
                caller.label
            ))
            .into());
        }
        Ok(history.clone())
    }

    /// The source a GetProfile or GetView request names: its session, or
    /// with `query` the history (then session_id must be 0).
    async fn source<T>(
        &self,
        req: &Request<T>,
        session_id: u64,
        query: Option<&api::Query>,
    ) -> Result<Source, Status> {
        match query {
            None => {
                let (handle, shown) = self.session(req, session_id).await?;
                Ok(Source::Session(handle, shown))
            }
            Some(_) if session_id != 0 => Err(Status::invalid_argument(format!(
                "session_id {session_id} and query are both set: set session_id to 0 to query the continuous history, or leave query unset to read the session"
            ))),
            Some(q) => Ok(Source::History(self.history(req)?, q.clone())),
        }
    }

    /// The session a request names, when its caller may read it, and
    /// what the caller is shown of kernel frames: every profile, view and
    /// export it gets is made for it so.
    async fn session<T>(
        &self,
        req: &Request<T>,
        id: u64,
    ) -> Result<(Handle, KernelFrames), Status> {
        let caller = self.policy.caller(req)?;
        let handle = self.registry.get(id, &caller).await?;
        let shown = self
            .policy
            .kernel_frames
            .shown(caller.is_root(), Sysctls::read);
        Ok((handle, shown))
    }
}

impl Service {
    /// GetProfile's answer: the function table and the export asked for.
    /// The table alone, and the JSON report (made of it), keep no stacks.
    async fn profile_answer(
        &self,
        source: &Source,
        format: api::ExportFormat,
        query: Option<&api::Query>,
    ) -> Result<api::GetProfileResponse, Status> {
        let table_only = matches!(
            (format, source),
            (api::ExportFormat::Unspecified, Source::Session(..))
                | (
                    api::ExportFormat::Unspecified | api::ExportFormat::Json,
                    Source::History(..)
                )
        );
        if table_only {
            let _permit = (!matches!(source, Source::Session(..)))
                .then(|| self.registry.export_permit())
                .transpose()?;
            let (session, functions) = source.functions().await?;
            let data = match format {
                api::ExportFormat::Json => {
                    serde_json::to_vec_pretty(&export::json(&session, &functions))
                        .map_err(|e| Status::internal(e.to_string()))?
                }
                _ => Vec::new(),
            };
            return Ok(api::GetProfileResponse {
                session: Some(session),
                functions,
                data,
            });
        }
        let _permit = self.registry.export_permit()?;
        let resolved = source.resolve().await?;
        let functions = views::functions(&resolved.profile);
        let data = match format {
            api::ExportFormat::Unspecified => Vec::new(),
            format => encode(&resolved, &functions, format, query)?,
        };
        Ok(api::GetProfileResponse {
            session: Some(resolved.session),
            functions,
            data,
        })
    }
}

const MIN_INTERVAL_MS: u32 = 50;

fn valid_pct(pct: f64) -> Result<f64, Status> {
    if (0.0..=100.0).contains(&pct) {
        Ok(pct)
    } else {
        Err(Status::invalid_argument(format!(
            "min_pct {pct} is not a percentage: use 0 to 100"
        )))
    }
}

fn watch_interval(ms: u32) -> Result<Duration, Error> {
    match ms {
        0 => Ok(Duration::from_secs(1)),
        ms if ms < MIN_INTERVAL_MS => Err(Error::InvalidArgument(format!(
            "interval {ms} ms is too short: use at least {MIN_INTERVAL_MS} ms (or 0 for 1 s)"
        ))),
        ms => Ok(Duration::from_millis(u64::from(ms))),
    }
}

/// A whole profile in an export format (not UNSPECIFIED): `functions` is
/// its function table; `query` titles a flame graph of the history.
fn encode(
    resolved: &Resolved,
    functions: &[api::Function],
    format: api::ExportFormat,
    query: Option<&api::Query>,
) -> Result<Vec<u8>, Status> {
    let p = &resolved.profile;
    Ok(match format {
        api::ExportFormat::Pprof => export::pprof(p),
        api::ExportFormat::Folded => export::folded(p).into_bytes(),
        api::ExportFormat::Svg => export::svg(p, &svg_title(resolved, query))
            .map_err(|e| Status::internal(format!("flame graph: {e}")))?,
        api::ExportFormat::Speedscope => export::speedscope(p).into_bytes(),
        api::ExportFormat::Firefox => {
            let timeline = timeline_of(resolved, query)?;
            export::firefox(p, timeline, &process_names(resolved))
        }
        api::ExportFormat::Json | api::ExportFormat::Unspecified => {
            serde_json::to_vec_pretty(&export::json(&resolved.session, functions))
                .map_err(|e| Status::internal(e.to_string()))?
        }
    })
}

/// The timeline a Firefox profile is made of, or why there is none.
fn timeline_of<'a>(
    resolved: &'a Resolved,
    query: Option<&api::Query>,
) -> Result<&'a profd_common::model::Timeline, Status> {
    resolved.timeline.as_ref().ok_or_else(|| {
        Status::failed_precondition(match query {
            None => format!(
                "session {} kept no sample times, so it has no timeline: start the session with timeline set (profctl run/attach --timeline)",
                resolved.session.id
            ),
            Some(_) => "the continuous history keeps no sample times, so it has no timeline: export a session started with timeline set (profctl run/attach --timeline)".to_string(),
        })
    })
}

/// The command names of a session's processes, by pid.
fn process_names(resolved: &Resolved) -> HashMap<u32, String> {
    (resolved.session.processes.iter())
        .map(|p| (p.pid, p.comm.clone()))
        .collect()
}

/// The title of a flame graph: the session's, or with `query` what it
/// selected of the history.
fn svg_title(resolved: &Resolved, query: Option<&api::Query>) -> String {
    let p = &resolved.profile;
    match query {
        None => format!(
            "profd session {} — pid {} ({})",
            resolved.session.id, p.pid, p.comm
        ),
        Some(q) => history_title(q, resolved.session.duration_s),
    }
}

/// The title of a flame graph of the history: what the query selected.
fn history_title(q: &api::Query, duration_s: f64) -> String {
    let mut what = Vec::new();
    if !q.services.is_empty() {
        what.push(format!("services {}", q.services.join(", ")));
    }
    if !q.pids.is_empty() {
        let pids: Vec<String> = q.pids.iter().map(u32::to_string).collect();
        what.push(format!("pids {}", pids.join(", ")));
    }
    if !q.namespaces.is_empty() {
        what.push(format!("namespaces {}", q.namespaces.join(", ")));
    }
    if !q.pods.is_empty() {
        what.push(format!("pods {}", q.pods.join(", ")));
    }
    if what.is_empty() {
        what.push("every service".to_string());
    }
    format!(
        "profd continuous profile — {} — {duration_s:.0} s of windows",
        what.join("; ")
    )
}

/// The functions of `view` a client that has seen version `after` lacks:
/// those whose counts changed after it (names only for those it has never
/// seen), those it has seen that lost all their samples after it (as rows
/// of zero counts), and with a window (`windowed`) those whose window counts differ
/// from `window_sent` (updated) — every function the stream has not sent
/// yet, since the client's window figures are unknown. Public for the
/// benchmarks.
pub fn delta(
    view: &FunctionTable,
    after: u64,
    windowed: bool,
    window_sent: &mut HashMap<u64, (u64, u64)>,
) -> Vec<api::Function> {
    let mut out = Vec::new();
    for (f, &(changed, first)) in view.functions.iter().zip(&view.stamps) {
        let window = (f.window_inclusive, f.window_exclusive);
        let window_changed = windowed && window_sent.insert(f.id, window) != Some(window);
        if changed <= after && !window_changed {
            continue;
        }
        if first <= after {
            out.push(api::Function {
                name: String::new(),
                module: String::new(),
                ..f.clone()
            });
        } else {
            out.push(f.clone());
        }
    }
    // Functions the client has seen that have no samples any more.
    for &(id, first, at) in &view.emptied {
        if first <= after && at > after {
            out.push(api::Function {
                id,
                ..Default::default()
            });
        }
    }
    out
}

/// One Watch stream: a snapshot (or, resuming, what changed after
/// `resume_after`), then per-interval deltas, then a final update.
async fn run_watch(
    (handle, shown): (Handle, KernelFrames),
    interval: Duration,
    window_s: u32,
    resume_after: u64,
    tx: mpsc::Sender<Result<api::WatchResponse, Status>>,
) {
    let mut state = handle.state();
    let mut window_sent = HashMap::new();
    let mut after = resume_after;
    let mut first = true;
    loop {
        let view = match handle.profile(window_s, shown).await {
            Ok(view) => view,
            Err(e) => {
                let _ = tx.send(Err(Error::from(e).into())).await;
                return;
            }
        };
        if after >= view.version {
            // Versions from another daemon run: start over with a snapshot.
            after = 0;
        }
        let ended = view.session.state != api::SessionState::Running as i32;
        let functions = delta(&view, after, window_s > 0, &mut window_sent);
        let msg = api::WatchResponse {
            seq: view.version,
            snapshot: first && after == 0,
            resumed: first && after > 0,
            session: Some(view.session),
            functions,
            r#final: ended,
            window_attributed: view.window_attributed,
        };
        after = view.version;
        first = false;
        if tx.send(Ok(msg)).await.is_err() || ended {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = state.changed() => {}
            _ = tx.closed() => return,
        }
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<api::WatchResponse, Status>> + Send>>;
type PieceStream = Pin<Box<dyn Stream<Item = Result<api::ProfilePiece, Status>> + Send>>;

/// Most bytes of export one StreamProfile piece carries.
pub const PIECE_BYTES: usize = 1 << 20;
/// Most functions one StreamProfile piece carries.
pub const PIECE_FUNCTIONS: usize = 4096;
/// Most bytes of export one GetProfile answer carries (clients read
/// messages of 4 MiB by default; profctl takes up to 1 GiB): bigger ones
/// are read with StreamProfile.
pub const MAX_UNARY_DATA: usize = 256 << 20;

/// The export format a request names.
fn export_format(format: i32) -> Result<api::ExportFormat, Status> {
    api::ExportFormat::try_from(format).map_err(|_| {
        Status::invalid_argument(format!(
            "unknown export format {format}: use 1 (pprof), 2 (folded), 3 (svg), 4 (speedscope), 5 (json) or 6 (firefox)"
        ))
    })
}

/// Send `functions` in pieces of [`PIECE_FUNCTIONS`]; false when the
/// client is gone.
fn send_functions(
    tx: &mpsc::Sender<Result<api::ProfilePiece, Status>>,
    mut functions: Vec<api::Function>,
) -> bool {
    while !functions.is_empty() {
        let rest = functions.split_off(functions.len().min(PIECE_FUNCTIONS));
        let piece = api::ProfilePiece {
            functions: std::mem::replace(&mut functions, rest),
            ..Default::default()
        };
        if tx.blocking_send(Ok(piece)).is_err() {
            return false;
        }
    }
    true
}

/// Send one piece of export bytes; false when the client is gone.
fn send_data(tx: &mpsc::Sender<Result<api::ProfilePiece, Status>>, data: Vec<u8>) -> bool {
    let piece = api::ProfilePiece {
        data,
        ..Default::default()
    };
    tx.blocking_send(Ok(piece)).is_ok()
}

#[tonic::async_trait]
impl Profiler for Service {
    async fn info(
        &self,
        req: Request<api::InfoRequest>,
    ) -> Result<Response<api::InfoResponse>, Status> {
        let caller = self.policy.caller(&req)?;
        // A caller is shown the sessions ListSessions would show it, and
        // the rings those use: not another user's target pid.
        let a = self.registry.activity(Some(&caller)).await;
        let groups = a
            .groups
            .into_iter()
            .map(|g| api::SamplerGroup {
                event: api::Event::from(g.spec.kind) as i32,
                frequency_hz: g.spec.frequency_hz,
                sessions: g.sessions,
                target_pid: g.spec.target.map_or(0, |t| t.pid),
                stack_bytes: g.spec.stack_bytes,
                mode: api::Mode::from(g.spec.mode) as i32,
            })
            .collect();
        Ok(Response::new(api::InfoResponse {
            version: env!("CARGO_PKG_VERSION").to_string(),
            cpus: self.facts.cpus,
            pmu_available: self.facts.pmu_available,
            default_event: api::Event::CpuClock as i32,
            perf_event_paranoid: kernel_sysctl("perf_event_paranoid").unwrap_or(2) as i32,
            max_sample_rate: max_sample_rate(),
            groups,
            totals: Some(api::Totals {
                attributed: a.counts.attributed,
                discarded: a.counts.discarded,
                lost: a.counts.lost,
                throttled: a.counts.throttled,
                ..Default::default()
            }),
            running_sessions: a.running as u32,
            continuous: self.history.as_ref().map(History::overview),
            sinks: self.sinks.reports().iter().map(|r| r.to_api()).collect(),
            // The rule and its totals; the rows of other owners for root only.
            retention: Some(
                self.registry
                    .retention()
                    .await
                    .to_api(|uid| caller.is_root() || uid == caller.uid()),
            ),
            memory: Some(
                self.registry.stats().memory.status(
                    self.registry
                        .sampler()
                        .counters()
                        .behind
                        .load(std::sync::atomic::Ordering::Relaxed),
                ),
            ),
            debuginfod: crate::process::symbolize::debuginfod::status().map(|d| {
                api::DebuginfodStatus {
                    urls: d.urls,
                    cache_dir: d.cache_dir.display().to_string(),
                    cache_bytes: d.cache_bytes,
                    cache_limit_bytes: d.cache_limit_bytes,
                    fetched: d.fetched,
                    not_found: d.not_found,
                    failed: d.failed,
                    garbage: d.garbage,
                    last_error: d.last_error,
                    timeout_s: d.timeout.as_secs() as u32,
                }
            }),
            python_frames: match crate::os::bpf::PythonProbe::get() {
                Ok(_) => "read at each sample".to_string(),
                Err(why) => format!("not read: {why}"),
            },
            ruby_frames: match crate::os::bpf::PythonProbe::get() {
                Ok(_) => "read at each sample".to_string(),
                Err(why) => format!("not read: {why}"),
            },
            perl_frames: match crate::os::bpf::PythonProbe::get() {
                Ok(_) => "read at each sample".to_string(),
                Err(why) => format!("not read: {why}"),
            },
            ask_jvm: crate::process::jvm::JVMS.on(),
            ask_jvm_interval_s: crate::process::jvm::JVMS.interval().as_secs() as u32,
            jvm_perfmap_requests: crate::process::jvm::JVMS
                .recent(|uid| caller.is_root() || uid == caller.uid())
                .into_iter()
                .map(|a| api::JvmPerfMapRequest {
                    session_id: a.session,
                    pid: a.pid,
                    asked_unix_ms: a.at_unix_ms,
                    result: a.outcome.label().to_string(),
                    detail: a.detail,
                    asks: a.asks,
                })
                .collect(),
        }))
    }

    async fn attach(
        &self,
        req: Request<api::AttachRequest>,
    ) -> Result<Response<api::AttachResponse>, Status> {
        let caller = self.policy.caller(&req)?;
        caller.require_operator("attach")?;
        let session = self.registry.attach(req.get_ref(), &caller).await?;
        Ok(Response::new(api::AttachResponse {
            session: Some(session),
        }))
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        req: Request<api::WatchRequest>,
    ) -> Result<Response<WatchStream>, Status> {
        let session = self.session(&req, req.get_ref().session_id).await?;
        let req = req.into_inner();
        let interval = watch_interval(req.interval_ms)?;
        if req.window_s > MAX_WINDOW_S {
            return Err(Status::invalid_argument(format!(
                "window_s {} is too long: use at most {MAX_WINDOW_S} seconds (or 0 for none)",
                req.window_s
            )));
        }
        let (tx, rx) = mpsc::channel(4);
        let open = self.registry.stats().watcher();
        let watch = run_watch(session, interval, req.window_s, req.resume_after_seq, tx);
        tokio::spawn(async move {
            watch.await;
            drop(open);
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_profile(
        &self,
        req: Request<api::GetProfileRequest>,
    ) -> Result<Response<api::GetProfileResponse>, Status> {
        let r = req.get_ref();
        let source = self.source(&req, r.session_id, r.query.as_ref()).await?;
        let format = export_format(r.format)?;
        let answer = self
            .profile_answer(&source, format, r.query.as_ref())
            .await?;
        if answer.data.len() > MAX_UNARY_DATA {
            return Err(Status::resource_exhausted(format!(
                "the {} export is {} bytes, above the {MAX_UNARY_DATA} one GetProfile answer may carry: read it with StreamProfile (in pieces of at most {PIECE_BYTES} bytes, as profctl does), or narrow the query (a shorter time range, --service, --pid)",
                format.as_str_name(),
                answer.data.len()
            )));
        }
        Ok(Response::new(answer))
    }

    type StreamProfileStream = PieceStream;

    async fn stream_profile(
        &self,
        req: Request<api::GetProfileRequest>,
    ) -> Result<Response<PieceStream>, Status> {
        let r = req.get_ref();
        let source = self.source(&req, r.session_id, r.query.as_ref()).await?;
        let format = export_format(r.format)?;
        let (tx, rx) = mpsc::channel(2);
        if matches!(
            format,
            api::ExportFormat::Folded
                | api::ExportFormat::Pprof
                | api::ExportFormat::Svg
                | api::ExportFormat::Speedscope
                | api::ExportFormat::Firefox
        ) {
            // Made as they are sent: the text or bytes are never whole here.
            let permit = self.registry.export_permit()?;
            let resolved = source.resolve().await?;
            if format == api::ExportFormat::Firefox {
                // No timeline: said before anything is sent.
                timeline_of(&resolved, r.query.as_ref())?;
            }
            let functions = views::functions(&resolved.profile);
            let title = svg_title(&resolved, r.query.as_ref());
            tokio::task::spawn_blocking(move || {
                let _permit = permit;
                let first = api::ProfilePiece {
                    session: Some(resolved.session.clone()),
                    ..Default::default()
                };
                if tx.blocking_send(Ok(first)).is_err() || !send_functions(&tx, functions) {
                    return;
                }
                let p = &resolved.profile;
                let send = |bytes| send_data(&tx, bytes);
                match format {
                    api::ExportFormat::Pprof => export::pprof_pieces(p, PIECE_BYTES, send),
                    api::ExportFormat::Svg => {
                        if let Err(e) = export::svg_pieces(p, &title, PIECE_BYTES, send) {
                            let _ = tx
                                .blocking_send(Err(Status::internal(format!("flame graph: {e}"))));
                        }
                    }
                    api::ExportFormat::Speedscope => {
                        export::speedscope_pieces(p, PIECE_BYTES, send)
                    }
                    api::ExportFormat::Firefox => {
                        if let Some(timeline) = &resolved.timeline {
                            let names = process_names(&resolved);
                            export::firefox_pieces(p, timeline, &names, PIECE_BYTES, send)
                        }
                    }
                    _ => export::folded_pieces(p, PIECE_BYTES, |text| {
                        send_data(&tx, text.into_bytes())
                    }),
                }
            });
        } else {
            let answer = self
                .profile_answer(&source, format, r.query.as_ref())
                .await?;
            tokio::task::spawn_blocking(move || {
                let first = api::ProfilePiece {
                    session: answer.session,
                    ..Default::default()
                };
                if tx.blocking_send(Ok(first)).is_err() || !send_functions(&tx, answer.functions) {
                    return;
                }
                for piece in answer.data.chunks(PIECE_BYTES) {
                    if !send_data(&tx, piece.to_vec()) {
                        return;
                    }
                }
            });
        }
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn stop(
        &self,
        req: Request<api::StopRequest>,
    ) -> Result<Response<api::StopResponse>, Status> {
        let caller = self.policy.caller(&req)?;
        caller.require_operator("stop sessions")?;
        let handle = self.registry.get(req.get_ref().session_id, &caller).await?;
        let mut session = handle.stop().await.map_err(Error::from)?;
        handle.saving.settle(&mut session).await;
        Ok(Response::new(api::StopResponse {
            session: Some(session),
        }))
    }

    async fn get_view(
        &self,
        req: Request<api::GetViewRequest>,
    ) -> Result<Response<api::GetViewResponse>, Status> {
        use api::get_view_request::View as V;
        let r = req.get_ref();
        let source = self.source(&req, r.session_id, r.query.as_ref()).await?;
        let what = source.name(r.session_id);
        let req = req.into_inner();
        let (r_tids, r_pids) = (req.tids, req.pids);
        let Some(view) = req.view else {
            return Err(Status::invalid_argument(
                "no view selected: set one of tree, callers, hot_path, threads, lines or functions",
            ));
        };
        let _permit = self.registry.export_permit()?;
        let mut resolved = source.resolve().await?;
        views::keep_only(&mut resolved.profile, &r_tids, &r_pids);
        let p = &resolved.profile;
        let find = |r: &api::FunctionRef| {
            names::find_function(p, r).map_err(|e| {
                Status::from(match e {
                    FindError::Ambiguous { .. } => Error::InvalidArgument(format!("{what}: {e}")),
                    FindError::NoId(_) | FindError::NoMatch(_) => {
                        Error::NotFound(format!("{what}: {e}"))
                    }
                })
            })
        };
        let mut out = api::GetViewResponse {
            functions: views::functions(p),
            ..Default::default()
        };
        match view {
            V::Tree(t) => {
                out.nodes = views::call_tree(
                    p,
                    views::Direction::of(t.bottom_up),
                    valid_pct(t.min_pct)?,
                    t.max_depth,
                )
            }
            V::HotPath(t) => {
                out.nodes =
                    views::hot_path(p, views::Direction::of(t.bottom_up), valid_pct(t.min_pct)?)
            }
            V::Callers(r) => out.caller_callee = Some(views::callers_callees(p, find(&r)?)),
            V::Threads(_) => {
                // The time not known of the threads the filter keeps.
                let mut unknown = std::mem::take(&mut resolved.unknown_ns);
                if !r_tids.is_empty() || !r_pids.is_empty() {
                    unknown.retain(|tid, _| {
                        r_tids.contains(tid)
                            || p.thread_pids
                                .get(tid)
                                .is_some_and(|pid| r_pids.contains(pid))
                    });
                }
                out.threads = views::threads(p, &unknown)
            }
            V::Lines(r) => out.lines = views::lines(p, find(&r)?),
            V::Functions(_) => {}
        }
        out.attributed = p.attributed;
        out.session = Some(resolved.session);
        Ok(Response::new(out))
    }

    async fn list_windows(
        &self,
        req: Request<api::ListWindowsRequest>,
    ) -> Result<Response<api::ListWindowsResponse>, Status> {
        let history = self.history(&req)?;
        let r = req.get_ref();
        let list = history.list(r.from_unix_ms, r.to_unix_ms).await?;
        Ok(Response::new(list))
    }

    async fn get_histogram(
        &self,
        req: Request<api::GetHistogramRequest>,
    ) -> Result<Response<api::GetHistogramResponse>, Status> {
        // A histogram counts user code only.
        let (handle, _) = self.session(&req, req.get_ref().session_id).await?;
        let req = req.into_inner();
        if req.scale == 0 || req.buckets == 0 || req.buckets > crate::config::MAX_BUCKETS {
            return Err(Status::invalid_argument(format!(
                "scale must be above 0 (65536 = one bucket per byte) and buckets 1..={}; got scale {} and {} buckets",
                crate::config::MAX_BUCKETS, req.scale, req.buckets
            )));
        }
        if req.module.is_empty() {
            return Err(Status::invalid_argument(
                "module is empty: give the file name of a binary the target maps",
            ));
        }
        let max = self.registry.limits().max_histogram_buckets;
        if req.buckets > max {
            return Err(Status::resource_exhausted(format!(
                "{} buckets are above the daemon's limit --max-histogram-buckets ({max}) \
                 (limits.max_histogram_buckets in profd.toml): ask for fewer (a smaller scale, or \
                 a later offset), or raise the limit",
                req.buckets
            )));
        }
        let session = handle.summary().await.map_err(Error::from)?;
        if !matches!(session.mode(), api::Mode::Cpu | api::Mode::Unspecified) {
            return Err(Status::failed_precondition(format!(
                "session {} measures time ({}), not on-CPU samples, and a profil(3) histogram \
                 counts samples: attach with MODE_CPU for one",
                session.id,
                session.mode().as_str_name()
            )));
        }
        let _permit = self.registry.export_permit()?;
        let histogram = handle.histogram(req).await.map_err(Error::from)?;
        histogram
            .map(Response::new)
            .map_err(|e| Error::NotFound(e.to_string()).into())
    }

    async fn list_sessions(
        &self,
        req: Request<api::ListSessionsRequest>,
    ) -> Result<Response<api::ListSessionsResponse>, Status> {
        let caller = self.policy.caller(&req)?;
        let listing = match req.get_ref().all {
            true => Listing::AllRuns,
            false => Listing::ThisRun,
        };
        let mut sessions = Vec::new();
        for h in self.registry.listed(&caller, listing).await {
            if let Ok(s) = h.summary().await {
                sessions.push(s);
            }
        }
        Ok(Response::new(api::ListSessionsResponse { sessions }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(id: u64, incl: u64, excl: u64) -> api::Function {
        api::Function {
            id,
            name: format!("f{id}"),
            module: "m".into(),
            inclusive: incl,
            exclusive: excl,
            ..Default::default()
        }
    }

    fn view(functions: Vec<api::Function>, version: u64, stamps: Vec<(u64, u64)>) -> FunctionTable {
        FunctionTable {
            window_attributed: 0,
            session: api::Session::default(),
            functions,
            version,
            stamps,
            emptied: Vec::new(),
        }
    }

    #[test]
    fn deltas_carry_changes_after_a_version_and_names_once() {
        let mut w = HashMap::new();
        let v = view(
            vec![f(1, 6, 1), f(2, 3, 3), f(3, 1, 1)],
            5,
            vec![(4, 1), (2, 2), (5, 5)],
        );
        assert_eq!(
            delta(&v, 0, false, &mut w).len(),
            3,
            "a snapshot has everything"
        );
        assert!(
            delta(&v, 5, false, &mut w).is_empty(),
            "nothing changed after 5"
        );
        let d = delta(&v, 3, false, &mut w);
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].id, d[0].inclusive, d[0].name.as_str()), (1, 6, ""));
        assert_eq!((d[1].id, d[1].name.as_str()), (3, "f3"));
    }

    #[test]
    fn functions_that_lost_their_samples_are_sent_as_zero_rows_once() {
        // Function 7 (first seen at 2) lost its samples at 5: its address
        // was named anew as function 1.
        let mut v = view(vec![f(1, 6, 1)], 5, vec![(5, 5)]);
        v.emptied = vec![(7, 2, 5)];
        let mut w = HashMap::new();
        let d = delta(&v, 3, false, &mut w);
        assert_eq!(d.len(), 2);
        assert_eq!((d[1].id, d[1].inclusive, d[1].exclusive), (7, 0, 0));
        assert!(delta(&v, 5, false, &mut w).is_empty(), "sent once");
        // A client that never saw it is not told.
        assert_eq!(delta(&v, 1, false, &mut w).len(), 1);
        assert_eq!(delta(&v, 0, false, &mut w).len(), 1, "nor is a snapshot");
    }

    #[test]
    fn window_changes_are_sent_even_when_totals_stand_still() {
        let mut w = HashMap::new();
        let mut a = f(1, 6, 1);
        a.window_inclusive = 2;
        let v = view(vec![a.clone()], 5, vec![(1, 1)]);
        assert_eq!(delta(&v, 4, true, &mut w).len(), 1);
        assert!(delta(&v, 5, true, &mut w).is_empty());
        a.window_inclusive = 0;
        let v = view(vec![a.clone()], 6, vec![(1, 1)]);
        assert_eq!(delta(&v, 5, true, &mut w)[0].window_inclusive, 0);
        // A resumed stream does not know the client's window figures: it
        // sends every function once, even with all-zero windows.
        let mut fresh = HashMap::new();
        assert_eq!(delta(&v, 6, true, &mut fresh).len(), 1);
        assert!(delta(&v, 6, false, &mut HashMap::new()).is_empty());
    }

    #[test]
    fn long_messages_keep_their_start_and_their_advice() {
        assert_eq!(capped("short".into()), "short");
        let long = format!("no function named {}: give an id", "é".repeat(2_000_000));
        let m = capped(long);
        assert!(m.len() <= MAX_MESSAGE_BYTES, "{} bytes", m.len());
        assert!(m.starts_with("no function named é"), "{m}");
        assert!(m.ends_with("é: give an id"), "{m}");
        assert!(m.contains("bytes left out"), "{m}");
        let status = Status::from(Error::NotFound("x".repeat(3 << 20)));
        assert_eq!(status.code(), tonic::Code::NotFound);
        assert!(status.message().len() <= MAX_MESSAGE_BYTES);
    }

    #[test]
    fn intervals() {
        assert_eq!(watch_interval(0).unwrap(), Duration::from_secs(1));
        assert!(watch_interval(10).is_err());
        assert_eq!(watch_interval(250).unwrap(), Duration::from_millis(250));
    }
}
