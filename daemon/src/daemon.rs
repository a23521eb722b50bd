//! A daemon as a whole: `Daemon::bind` probes the kernel, reloads the
//! sessions kept in the state directory and binds the Unix socket (or takes
//! the one systemd passed), the TLS listener and the metrics listener when
//! configured; `serve` runs the gRPC API (with health and reflection; on the
//! TLS listener also as grpc-web, with the web dashboard) until shutdown,
//! telling systemd how it goes, ending every session cleanly and saving it.
use crate::config::Config;
use crate::continuous::history::History;
use crate::daemon_error::Error;
use crate::os::perf;
use crate::os::sysctl;
use crate::process::symbolize;
use crate::sampling;
use crate::serve::{auth, conns, metrics, rpc, tls_listener};
use crate::sessions::{registry, store};
use profd_common::api::profiler_server::ProfilerServer;
use sd_notify::NotifyState;
use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, UnixListener};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo, UdsConnectInfo};
use tonic::Request;
use tower::Layer as _;

/// The group given the socket when none is configured (if it exists).
pub const DEFAULT_SOCKET_GROUP: &str = "profd";

/// A daemon whose socket is bound and ready to accept clients.
pub struct Daemon {
    listener: UnixListener,
    socket: PathBuf,
    /// The socket came from systemd: it is not ours to remove.
    activated: bool,
    remote: Option<tls_listener::Listener>,
    metrics: Option<TcpListener>,
    registry: Arc<registry::Registry>,
    policy: Arc<auth::Policy>,
    facts: rpc::Facts,
    connections: conns::Limits,
    /// Continuous profiling's history (`<state dir>/windows`, or in memory
    /// without a state directory); None when continuous profiling is off.
    history: Option<History>,
    /// Continuous profiling's settings, from the config, for its profiler
    /// (the history was opened with them): Some exactly when `history` is.
    continuous: Option<crate::continuous::Settings>,
    /// Where continuous profiling's windows are sent (none configured: no
    /// sinks).
    sinks: crate::continuous::sinks::Sinks,
}

/// How long connections may take to close once serving ends.
const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// How long shutdown waits for ended sessions to be saved.
const SAVE_TIMEOUT: Duration = Duration::from_secs(60);

/// The gid the socket is given, from `--socket-group`.
fn socket_gid(group: Option<&str>) -> Result<Option<u32>, Error> {
    let name = group.unwrap_or(DEFAULT_SOCKET_GROUP);
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(Some(g.gid.as_raw())),
        Ok(None) if group.is_none() => Ok(None),
        Ok(None) => Err(Error::Config(format!(
            "socket group {name:?} does not exist: create it (groupadd {name}) or choose another --socket-group"
        ))),
        Err(e) => Err(Error::Config(format!("cannot look up group {name:?}: {e}"))),
    }
}

/// Fail when the socket group named does not exist.
pub fn check_socket_group(group: Option<&str>) -> Result<(), Error> {
    socket_gid(group).map(|_| ())
}

fn socket_error(path: &Path, reason: impl ToString) -> Error {
    Error::Socket {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// Remove a leftover socket nobody answers on; refuse anything else.
fn clear_stale_socket(path: &Path) -> Result<(), Error> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(socket_error(path, e)),
    };
    if !meta.file_type().is_socket() {
        return Err(socket_error(
            path,
            "it exists and is not a socket; remove it or choose another --socket",
        ));
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(socket_error(path, "another profd is already serving on it"));
    }
    std::fs::remove_file(path).map_err(|e| socket_error(path, e))
}

/// Create the Unix socket at `path`: mode 0660, group `gid`.
fn bind_socket(path: &Path, gid: Option<u32>) -> Result<UnixListener, Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(|e| socket_error(path, e))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| socket_error(path, e))?;
        }
    }
    clear_stale_socket(path)?;
    // Not through a link another user could have planted on the way.
    crate::trusted_files::resolve(path).map_err(|e| socket_error(path, e))?;
    let listener = UnixListener::bind(path).map_err(|e| socket_error(path, e))?;
    crate::trusted_files::own_socket(path, gid, 0o660).map_err(|e| socket_error(path, e))?;
    Ok(listener)
}

/// Serve on the listening socket systemd passed (its unit set its path,
/// mode and group).
fn adopt_socket(
    passed: &std::os::unix::net::UnixListener,
) -> Result<(UnixListener, PathBuf), Error> {
    let path = passed
        .local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("<socket passed by systemd>"));
    let adopt = || {
        let own = passed.try_clone()?;
        own.set_nonblocking(true)?;
        UnixListener::from_std(own)
    };
    let listener = adopt().map_err(|e| socket_error(&path, e))?;
    Ok((listener, path))
}

/// Tell systemd (when it started us with `Type=notify`) how the daemon is.
fn notify(states: &[NotifyState<'_>]) {
    if let Err(err) = sd_notify::notify(false, states) {
        tracing::debug!(%err, "cannot notify systemd");
    }
}

/// Sessions running now.
async fn running_sessions(registry: &registry::Registry) -> usize {
    let mut n = 0;
    for h in registry.all().await {
        if *h.state().borrow() == profd_common::api::SessionState::Running {
            n += 1;
        }
    }
    n
}

/// Continuous profiling with `settings` into `history` until `stop`; a
/// failure to open the rings is logged, and the daemon serves on without it.
async fn run_continuous(
    registry: Arc<registry::Registry>,
    settings: crate::continuous::Settings,
    history: History,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let run = crate::continuous::profiler::run(
        settings,
        registry.sampler().clone(),
        registry.symbolizer().clone(),
        registry.stats().clone(),
        history,
        stop,
    );
    if let Err(err) = run.await {
        tracing::error!(%err, "continuous profiling stopped");
    }
}

/// The fetcher of debug files from debuginfod, when servers are set: its
/// cache is in the state directory (without one, nothing is fetched: the
/// runtime directory is in memory, too small for debug files).
fn debuginfod_fetcher(config: &Config) -> Option<symbolize::debuginfod::Fetcher> {
    let settings = &config.debuginfod;
    if settings.urls.is_empty() {
        return None;
    }
    let Some(persist) = &config.persist else {
        tracing::warn!(urls = ?settings.urls, "debuginfod: not fetching debug files, as there is no state directory to keep them in");
        return None;
    };
    let dir = persist.dir.join(symbolize::debuginfod::CACHE_DIR);
    match symbolize::debuginfod::Fetcher::start(settings.clone(), dir.clone()) {
        Ok(fetcher) => {
            symbolize::debuginfod::publish(&fetcher);
            Some(fetcher)
        }
        Err(err) => {
            tracing::error!(dir = %dir.display(), %err, "debuginfod: cannot make the cache directory: not fetching debug files");
            None
        }
    }
}

/// How often systemd's STATUS line is brought up to date.
const STATUS_INTERVAL: Duration = Duration::from_secs(5);

/// The gRPC services every listener serves besides the API: health and
/// reflection (v1 and v1alpha, with the API's and health's descriptors).
type HealthServer =
    tonic_health::pb::health_server::HealthServer<tonic_health::server::HealthService>;

fn reflection() -> Result<
    (
        tonic_reflection::server::v1::ServerReflectionServer<
            impl tonic_reflection::server::v1::ServerReflection,
        >,
        tonic_reflection::server::v1alpha::ServerReflectionServer<
            impl tonic_reflection::server::v1alpha::ServerReflection,
        >,
    ),
    Error,
> {
    let builder = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(profd_common::api::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    Ok((builder().build_v1()?, builder().build_v1alpha()?))
}

impl Daemon {
    /// Probe the kernel and bind the socket; clients may connect once this returns.
    pub async fn bind(config: Config) -> Result<Daemon, Error> {
        let cpus = perf::online_cpus().map_err(Error::Cpus)?;
        crate::sessions::session::setup_budget::BUDGET.set(config.new_process_cpu);
        let ask = config.ask_jvm;
        crate::process::jvm::JVMS.set(ask.is_some(), ask.unwrap_or_default());
        let mut sampler = sampling::Sampler::new(cpus);
        sampler.ring_pages = config.ring_pages;
        sampler.drain_every = config.drain_interval;
        let pool = sampler.pool();
        let source = Arc::new(sampler);
        let symbolizer = symbolize::BlazeSymbolizer::with_debuginfod(
            symbolize::DEBUG_DIRS.iter().map(PathBuf::from).collect(),
            debuginfod_fetcher(&config),
            config.naming,
        );
        let daemon = Daemon::bind_with(config, source, Arc::new(symbolizer)).await?;
        // The caches that shed as the memory ceiling nears (crate::memory).
        let (held, shed) = (pool.clone(), pool);
        let memory = &daemon.registry.stats().memory;
        memory.register(
            "spare batches",
            5,
            move || held.bytes(),
            move || shed.shed(),
            |_| {},
        );
        memory.register(
            "unwind tables",
            10,
            crate::process::unwind::bytes,
            crate::process::unwind::shed,
            crate::process::unwind::set_budget,
        );
        memory.every_few_readings(crate::process::unwind::release_pages);
        memory.register(
            "symbolizer",
            30,
            symbolize::bytes,
            symbolize::shed,
            symbolize::set_budget,
        );
        Ok(daemon)
    }

    /// `bind` with a given sample source and symbolizer: the daemon's tests
    /// pass fakes, built from the types in [`crate::internals`].
    #[doc(hidden)]
    pub async fn bind_with(
        config: Config,
        source: Arc<dyn sampling::SampleSource>,
        symbolizer: Arc<dyn symbolize::Symbolizer>,
    ) -> Result<Daemon, Error> {
        let cpus = perf::online_cpus().map_err(Error::Cpus)?;
        let facts = rpc::Facts {
            cpus: cpus.len() as u32,
            pmu_available: perf::pmu_available(),
        };
        tracing::info!(
            cpus = facts.cpus,
            pmu = facts.pmu_available,
            paranoid = sysctl::kernel_sysctl("perf_event_paranoid"),
            max_sample_rate = sysctl::max_sample_rate(),
            "probed the kernel"
        );
        if !facts.pmu_available {
            tracing::info!("no hardware PMU: sessions asking for cycles use cpu-clock");
        }
        // The program that reads Python frames, loaded (or found wanting,
        // and said) before anything is served, not in the middle of it.
        let _ = crate::os::bpf::PythonProbe::get();
        let gid = socket_gid(config.socket_group.as_deref())?;
        let mut policy = auth::Policy {
            kernel_frames: config.kernel_frames,
            ..Default::default()
        };
        let remote = match &config.remote {
            Some(remote) => Some(tls_listener::bind(remote, &mut policy).await?),
            None => None,
        };
        // Before the socket: a state directory that cannot be used stops the
        // start; corrupt files in it do not.
        let store = match &config.persist {
            Some(persist) => {
                let p = persist.clone();
                let opened = tokio::task::spawn_blocking(move || store::Store::open(&p))
                    .await
                    .map_err(|e| Error::Config(format!("reading the state directory: {e}")))?;
                Some(opened.map_err(|reason| Error::State {
                    path: persist.dir.clone(),
                    reason: reason.to_string(),
                })?)
            }
            None => None,
        };
        let mut sinks = crate::continuous::sinks::Sinks::default();
        let history = match &config.continuous {
            Some(settings) => {
                let dir = config.persist.as_ref().map(|p| p.dir.join("windows"));
                let opened = History::start(dir.clone(), settings).await;
                let history = opened.map_err(|reason| Error::State {
                    path: dir.unwrap_or_default(),
                    reason: reason.to_string(),
                })?;
                let state = config.persist.as_ref().map(|p| p.dir.as_path());
                sinks = crate::continuous::sinks::Sinks::start(config.sinks.clone(), state)
                    .await
                    .map_err(|e| Error::Config(e.to_string()))?;
                history.attach(Arc::new(sinks.clone()));
                Some(history)
            }
            None => None,
        };
        let metrics = match config.metrics {
            Some(addr) => Some(TcpListener::bind(addr).await.map_err(|e| Error::Listen {
                addr,
                reason: e.to_string(),
            })?),
            None => None,
        };
        let (listener, path) = match &config.activated {
            Some(passed) => adopt_socket(passed)?,
            None => (bind_socket(&config.socket, gid)?, config.socket.clone()),
        };
        let mut registry =
            registry::Registry::new(source, symbolizer, config.limits, config.grants);
        if let Some((store, found)) = store {
            registry.open_store(Arc::new(store), found);
            tracing::info!(
                earlier_sessions = registry.stored_count(None),
                next_id = registry.next_id(),
                "sessions of earlier runs reloaded"
            );
        } else {
            tracing::info!("no state directory: ended sessions are not kept across restarts");
        }
        let registry = Arc::new(registry);
        registry.stats().memory.set_limit(config.memory_limit);
        if config.activated.is_some() {
            tracing::info!(socket = %path.display(), "serving on the socket systemd passed");
        } else {
            tracing::info!(socket = %path.display(), gid, "listening");
        }
        if let Some(addr) = config.metrics {
            tracing::info!(%addr, "serving metrics on http://{addr}/metrics");
        }
        Ok(Daemon {
            listener,
            socket: path,
            activated: config.activated.is_some(),
            remote,
            metrics,
            registry,
            policy: Arc::new(policy),
            facts,
            connections: config.connections,
            history,
            continuous: config.continuous,
            sinks,
        })
    }

    /// Continuous profiling's history, when it is on: the sampler adds each
    /// finished window to it (`History::add`); ListWindows and queries read it.
    pub fn history(&self) -> Option<&History> {
        self.history.as_ref()
    }

    /// Serve until `shutdown` resolves; running sessions are stopped first so
    /// their watchers get a final update, and with a state directory, serving
    /// ends once every ended session is saved there. Health answers
    /// NOT_SERVING from the moment shutdown begins.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Error> {
        let registry = self.registry.clone();
        let mut reporter = tonic_health::server::HealthReporter::new();
        reporter.set_serving::<ProfilerServer<rpc::Service>>().await;
        let health: HealthServer = tonic_health::pb::health_server::HealthServer::new(
            tonic_health::server::HealthService::from_health_reporter(reporter.clone()),
        );
        let (reflect_v1, reflect_v1alpha) = reflection()?;
        let (done, stopping) = tokio::sync::watch::channel(false);
        let (closing_tx, closing) = tokio::sync::watch::channel(false);
        let on = self.continuous.clone().zip(self.history.clone());
        let continuous = on.map(|(settings, history)| {
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let sinks = self.sinks.clone();
            let task = run_continuous(registry.clone(), settings, history, stopped);
            (stop, tokio::spawn(task), sinks)
        });
        tokio::spawn(async move {
            shutdown.await;
            let _ = closing_tx.send(true);
            tracing::info!("shutting down: ending sessions");
            use tonic_health::ServingStatus::NotServing;
            reporter.set_service_status("", NotServing).await;
            reporter
                .set_not_serving::<ProfilerServer<rpc::Service>>()
                .await;
            notify(&[
                NotifyState::Stopping,
                NotifyState::Status("stopping: ending and saving sessions"),
            ]);
            registry.stop_all().await;
            if let Some((stop, task, sinks)) = continuous {
                // The window under way is cut and kept (and spooled).
                let _ = stop.send(true);
                if tokio::time::timeout(SAVE_TIMEOUT, task).await.is_err() {
                    tracing::warn!(
                        "the last continuous window was not saved within {SAVE_TIMEOUT:?}"
                    );
                }
                sinks.stop();
            }
            if tokio::time::timeout(SAVE_TIMEOUT, registry.wait_saved())
                .await
                .is_err()
            {
                tracing::warn!(
                    "sessions still being saved after {SAVE_TIMEOUT:?}: stopping without them"
                );
            }
            // Health Watch streams never end by themselves: end them (after
            // NOT_SERVING) so that the servers can close.
            let profiler = <ProfilerServer<rpc::Service> as tonic::server::NamedService>::NAME;
            reporter.clear_service_status(profiler).await;
            reporter.clear_service_status("").await;
            let _ = done.send(true);
        });
        let stopped = move || {
            let mut stopping = stopping.clone();
            async move {
                let _ = stopping.wait_for(|s| *s).await;
            }
        };
        tokio::spawn(crate::memory::run(
            self.registry.stats().memory.clone(),
            stopped(),
        ));
        if let Some(listener) = self.metrics {
            let registry = self.registry.clone();
            let until = stopped();
            let (history, sinks) = (self.history.clone(), self.sinks.clone());
            tokio::spawn(async move {
                if let Err(err) = metrics::serve(listener, registry, history, sinks, until).await {
                    tracing::error!(%err, "the metrics listener failed");
                }
            });
        }
        tokio::spawn(report_status(
            self.registry.clone(),
            self.socket.clone(),
            self.remote.as_ref().and_then(|r| r.tcp.local_addr().ok()),
            closing,
        ));
        let limits = self.connections;
        let counts = &self.registry.stats().connections;
        let (unix_gate, tls_gate) = (
            conns::Gate::unix(&limits, counts.unix.clone()),
            conns::Gate::tls(&limits, counts.tls.clone()),
        );
        tracing::info!(
            max_connections = limits.max_connections(),
            max_per_peer = limits.max_per_peer(),
            max_unauthenticated = limits.max_unauthenticated(),
            root_reserve = conns::ROOT_RESERVE,
            handshake_timeout = ?limits.handshake_timeout,
            first_request_timeout = ?limits.first_request_timeout,
            idle_timeout = ?limits.idle_timeout,
            "connection limits of each listener"
        );
        let (keepalive, keepalive_timeout) = limits.keepalive();
        let builder = move || {
            tonic::transport::Server::builder()
                .http2_keepalive_interval(Some(keepalive))
                .http2_keepalive_timeout(Some(keepalive_timeout))
        };
        let service = rpc::Service::new(self.registry, self.policy.clone(), self.facts)
            .with_history(self.history.clone(), self.sinks.clone());
        let incoming = conns::UnixIncoming::new(self.listener, unix_gate);
        let local = builder()
            .layer(conns::CallsLayer::<UdsConnectInfo>::new())
            .add_service(ProfilerServer::new(service.clone()))
            .add_service(health.clone())
            .add_service(reflect_v1.clone())
            .add_service(reflect_v1alpha.clone())
            .serve_with_incoming_shutdown(incoming, stopped());
        // Connections close gracefully, but a client that no longer answers
        // (or keeps a stream open) does not hold the daemon up for long.
        let grace = {
            let stopped = stopped();
            async move {
                stopped.await;
                tokio::time::sleep(CLOSE_GRACE).await;
            }
        };
        let servers = async move {
            match self.remote {
                None => local.await,
                Some(listener) => {
                    // Health is open on the TLS listener (load balancers probe it
                    // without credentials); reflection needs a token, as reading
                    // does. Every service also answers grpc-web (browsers), with
                    // the same TLS and token rules.
                    let policy = self.policy;
                    let token = move |req: Request<()>| {
                        policy.caller(&req)?;
                        Ok(req)
                    };
                    let web = tonic_web::GrpcWebLayer::new();
                    let grpc = tonic::service::Routes::new(web.layer(ProfilerServer::new(service)))
                        .add_service(web.layer(health))
                        .add_service(web.layer(InterceptedService::new(reflect_v1, token.clone())))
                        .add_service(web.layer(InterceptedService::new(reflect_v1alpha, token)));
                    let remote = builder()
                        .accept_http1(true)
                        .layer(conns::CallsLayer::<TlsConnectInfo<TcpConnectInfo>>::new())
                        .layer(listener.cors)
                        .add_routes(tls_listener::routes(grpc))
                        .serve_with_incoming_shutdown(
                            tls_listener::incoming(listener.tcp, listener.tls, tls_gate),
                            stopped(),
                        );
                    tokio::try_join!(local, remote).map(|_| ())
                }
            }
        };
        let result = tokio::select! {
            result = servers => result,
            _ = grace => {
                tracing::warn!("clients still connected {CLOSE_GRACE:?} after shutdown: closing");
                Ok(())
            }
        };
        if !self.activated {
            let _ = std::fs::remove_file(&self.socket);
        }
        result.map_err(Error::from)
    }
}

/// Say READY=1 (the socket accepts), then keep systemd's STATUS line up to
/// date until shutdown begins.
async fn report_status(
    registry: Arc<registry::Registry>,
    socket: PathBuf,
    remote: Option<SocketAddr>,
    mut closing: tokio::sync::watch::Receiver<bool>,
) {
    let mut last = String::new();
    let mut ready = false;
    loop {
        let n = running_sessions(&registry).await;
        let status = match remote {
            Some(addr) => format!(
                "serving on {} and {addr} (TLS); {n} sessions running",
                socket.display()
            ),
            None => format!("serving on {}; {n} sessions running", socket.display()),
        };
        if *closing.borrow() {
            return;
        }
        if !ready {
            notify(&[NotifyState::Ready, NotifyState::Status(&status)]);
            ready = true;
        } else if status != last {
            notify(&[NotifyState::Status(&status)]);
        }
        last = status;
        tokio::select! {
            _ = tokio::time::sleep(STATUS_INTERVAL) => {}
            _ = closing.wait_for(|c| *c) => return,
        }
    }
}
