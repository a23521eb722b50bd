//! The Prometheus endpoint: a snapshot of every figure at scrape time (the
//! registry's activity, the daemon's counters in `stats`, and this
//! process's CPU and memory, continuous profiling's history), its rendering in the OpenMetrics text format,
//! and the plain-HTTP listener serving it on `/metrics` (every other path is
//! 404).
use crate::continuous::history::{History, Stats as HistoryStats};
use crate::sessions::registry::{Registry, SampleCounts};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The content type of the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every figure `/metrics` shows, read at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// The sampler's counts.
    pub counts: SampleCounts,
    pub ring_groups: u64,
    pub sessions_running: u64,
    pub sessions_ended: u64,
    pub sessions_started: u64,
    pub watchers: u64,
    pub symbol_cache_hits: u64,
    pub symbol_cache_misses: u64,
    /// This process, when /proc could be read.
    pub process: Option<Process>,
    /// Per listener (`unix`, `tls`).
    pub connections: Vec<Connections>,
    /// Continuous profiling's history, when it is on.
    pub history: Option<HistoryStats>,
    /// The sinks windows are sent to.
    pub sinks: Vec<crate::continuous::sinks::deliver::Report>,
    /// Ended sessions kept and evicted, by owner.
    pub retention: crate::sessions::store::share::Report,
    /// The unwind tables' cache, and new processes' setup.
    pub unwind: crate::process::unwind::cache::Counters,
    pub setup: crate::sessions::session::setup_budget::Counters,
    /// The symbolizer's caches and the mapped files held.
    pub symbolizer: crate::process::symbolize::Figures,
    /// The memory ceiling and what was shed.
    pub memory: profd_common::api::MemoryStatus,
    /// JVMs asked for their perf map, per result (see `process::jvm`).
    pub jvm_perfmap_requests: Vec<(&'static str, u64)>,
}

/// One listener's connections.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Connections {
    pub listener: &'static str,
    pub open: u64,
    pub unauthenticated: u64,
    pub refused_limit: u64,
    pub refused_per_peer: u64,
    pub refused_unauthenticated: u64,
    pub handshake_timeouts: u64,
    pub first_request_timeouts: u64,
    pub idle_timeouts: u64,
}

impl Connections {
    fn read(listener: &'static str, s: &crate::serve::conns::ListenerStats) -> Connections {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Connections {
            listener,
            open: load(&s.open),
            unauthenticated: load(&s.unauthenticated),
            refused_limit: load(&s.refused_limit),
            refused_per_peer: load(&s.refused_per_peer),
            refused_unauthenticated: load(&s.refused_unauthenticated),
            handshake_timeouts: load(&s.handshake_timeouts),
            first_request_timeouts: load(&s.first_request_timeouts),
            idle_timeouts: load(&s.idle_timeouts),
        }
    }
}

/// This process's resources.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Process {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub open_fds: u64,
    pub start_time_seconds: u64,
}

impl Process {
    fn read() -> Option<Process> {
        let me = procfs::process::Process::myself().ok()?;
        let stat = me.stat().ok()?;
        let ticks = procfs::ticks_per_second().max(1);
        let boot = procfs::boot_time_secs().unwrap_or(0);
        Some(Process {
            cpu_seconds: (stat.utime + stat.stime) as f64 / ticks as f64,
            resident_bytes: stat.rss * procfs::page_size(),
            open_fds: me.fd_count().map_or(0, |n| n as u64),
            start_time_seconds: boot + stat.starttime / ticks,
        })
    }
}

/// Read every figure now.
pub async fn snapshot(
    registry: &Registry,
    history: Option<&History>,
    sinks: &crate::continuous::sinks::Sinks,
) -> Snapshot {
    let a = registry.activity(None).await;
    let s = registry.stats();
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    Snapshot {
        counts: a.counts,
        ring_groups: a.groups.len() as u64,
        sessions_running: a.running,
        sessions_ended: a.ended,
        sessions_started: load(&s.sessions_started),
        watchers: load(&s.watchers),
        symbol_cache_hits: load(&s.symbol_cache_hits),
        symbol_cache_misses: load(&s.symbol_cache_misses),
        process: Process::read(),
        connections: vec![
            Connections::read("unix", &s.connections.unix),
            Connections::read("tls", &s.connections.tls),
        ],
        history: history.map(History::stats),
        sinks: sinks.reports(),
        retention: registry.retention().await,
        unwind: crate::process::unwind::counters(),
        setup: crate::sessions::session::setup_budget::BUDGET.counters(),
        symbolizer: crate::process::symbolize::Figures::read(),
        memory: s.memory.status(load(&registry.sampler().counters().behind)),
        jvm_perfmap_requests: crate::process::jvm::JVMS
            .counts()
            .iter()
            .map(|(o, n)| (o.label(), *n))
            .collect(),
    }
}

/// The snapshot in the OpenMetrics text format (counters get `_total`).
pub fn render(s: &Snapshot) -> String {
    let mut reg = prometheus_client::registry::Registry::default();
    let counters = [
        (
            "profd_samples",
            "Samples the kernel took on the rings profd reads",
            s.counts.samples,
        ),
        (
            "profd_samples_attributed",
            "Samples of processes a session profiles",
            s.counts.attributed,
        ),
        (
            "profd_samples_discarded",
            "Samples of processes no session profiles, dropped",
            s.counts.discarded,
        ),
        (
            "profd_samples_lost",
            "Samples the kernel lost (ring full), from LOST records and ring counts",
            s.counts.lost,
        ),
        (
            "profd_throttled",
            "Times the kernel throttled sampling (THROTTLE records)",
            s.counts.throttled,
        ),
        (
            "profd_ring_reads",
            "Reads (drains) of the per-CPU sample rings",
            s.counts.ring_reads,
        ),
        (
            "profd_ring_read_bytes",
            "Bytes read from the per-CPU sample rings",
            s.counts.ring_read_bytes,
        ),
        (
            "profd_sessions_started",
            "Sessions started since the daemon started",
            s.sessions_started,
        ),
        (
            "profd_symbol_cache_hits",
            "Stack addresses found already named when a new stack used them",
            s.symbol_cache_hits,
        ),
        (
            "profd_symbol_cache_misses",
            "Stack addresses sent to the symbolizer",
            s.symbol_cache_misses,
        ),
    ];
    for (name, help, v) in counters {
        reg.register(name, help, ConstCounter::new(v));
    }
    let gauges = [
        (
            "profd_sessions_running",
            "Sessions running now",
            s.sessions_running,
        ),
        (
            "profd_sessions_ended",
            "Ended sessions the daemon keeps (this run's and reloaded ones)",
            s.sessions_ended,
        ),
        ("profd_watchers", "Watch streams open now", s.watchers),
        (
            "profd_ring_groups",
            "Open ring groups (one set of per-CPU rings per event and frequency)",
            s.ring_groups,
        ),
    ];
    for (name, help, v) in gauges {
        reg.register(name, help, ConstGauge::new(v as i64));
    }
    for &(name, help, v, counter) in &s.symbolizer.figures {
        match counter {
            true => reg.register(name, help, ConstCounter::new(v)),
            false => reg.register(name, help, ConstGauge::new(v as i64)),
        }
    }
    let open = Family::<Vec<(String, String)>, Gauge>::default();
    let unauthenticated = Family::<Vec<(String, String)>, Gauge>::default();
    let refused = Family::<Vec<(String, String)>, Counter>::default();
    for c in &s.connections {
        let listener = ("listener".to_string(), c.listener.to_string());
        open.get_or_create(&vec![listener.clone()])
            .set(c.open as i64);
        unauthenticated
            .get_or_create(&vec![listener.clone()])
            .set(c.unauthenticated as i64);
        for (reason, n) in [
            ("limit", c.refused_limit),
            ("per_peer", c.refused_per_peer),
            ("unauthenticated", c.refused_unauthenticated),
            ("handshake_timeout", c.handshake_timeouts),
            ("first_request_timeout", c.first_request_timeouts),
            ("idle_timeout", c.idle_timeouts),
        ] {
            refused
                .get_or_create(&vec![listener.clone(), ("reason".into(), reason.into())])
                .inc_by(n);
        }
    }
    reg.register(
        "profd_connections",
        "Connections open now, per listener (TLS handshakes included)",
        open,
    );
    reg.register(
        "profd_connections_unauthenticated",
        "Connections open now that no call has authenticated yet, per listener (on the TLS listener: no call with a valid token)",
        unauthenticated,
    );
    reg.register(
        "profd_connections_refused",
        "Connections closed before or between calls, per listener and reason: limit (the listener was full), per_peer (the peer held max_connections_per_peer), unauthenticated (unauthenticated connections held max_unauthenticated_connections), handshake_timeout (no TLS handshake or HTTP/2 preface in time), first_request_timeout (no call, on the TLS listener with a valid token, in time), idle_timeout (no call open for idle_timeout)",
        refused,
    );
    if let Some(h) = &s.history {
        reg.register(
            "profd_history_windows",
            "Continuous profiling windows kept in the history now",
            ConstGauge::new(h.windows as i64),
        );
        reg.register(
            "profd_history_bytes",
            "Bytes the continuous history's windows take now",
            ConstGauge::new(h.bytes as i64),
        );
        let dropped = Family::<Vec<(String, String)>, Counter>::default();
        for (reason, n) in [("bytes", h.dropped_bytes), ("age", h.dropped_age)] {
            dropped
                .get_or_create(&vec![("reason".into(), reason.into())])
                .inc_by(n);
        }
        reg.register(
            "profd_history_windows_dropped",
            "Windows dropped from the continuous history since the daemon started, per retention limit: bytes (retention_bytes), age (retention_age)",
            dropped,
        );
        reg.register(
            "profd_history_windows_damaged",
            "Windows that could not be written to the history or read back (moved aside as .damaged)",
            ConstCounter::new(h.damaged),
        );
    }
    if !s.sinks.is_empty() {
        sink_metrics(&mut reg, &s.sinks);
    }
    retention_metrics(&mut reg, &s.retention);
    unwind_metrics(&mut reg, s);
    let asked = Family::<Vec<(String, String)>, Counter>::default();
    for (result, n) in &s.jvm_perfmap_requests {
        asked
            .get_or_create(&vec![("result".into(), result.to_string())])
            .inc_by(*n);
    }
    reg.register(
        "profd_jvm_perfmap_requests",
        "JVMs with JIT code met unnamed that were due to be asked for a fresh perf map (jit.ask_jvm), per result: ok (the JVM wrote it), refused (it answered with an error, or closed the connection), attach_disabled (its attach mechanism is off: not signalled), unsure (whether it is on is not known, or it has no socket and SIGQUIT would end it: not signalled), timeout, error",
        asked,
    );
    memory_metrics(&mut reg, &s.memory);
    if let Some(p) = &s.process {
        reg.register(
            "process_cpu_seconds",
            "User and system CPU time of the daemon, in seconds",
            ConstCounter::new(p.cpu_seconds),
        );
        reg.register(
            "process_resident_memory_bytes",
            "Resident memory of the daemon, in bytes",
            ConstGauge::new(p.resident_bytes as i64),
        );
        reg.register(
            "process_open_fds",
            "Open file descriptors of the daemon",
            ConstGauge::new(p.open_fds as i64),
        );
        reg.register(
            "process_start_time_seconds",
            "Start time of the daemon since the Unix epoch, in seconds",
            ConstGauge::new(p.start_time_seconds as i64),
        );
    }
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = encode(&mut out, &reg);
    out
}

/// The unwind tables' cache and new processes' setup.
fn unwind_metrics(reg: &mut prometheus_client::registry::Registry, s: &Snapshot) {
    let (u, p) = (&s.unwind, &s.setup);
    for (name, help, v) in [
        ("profd_unwind_table_loads", "Files whose unwind tables were read (a walk reached their code and the cache had not them)", u.loads),
        ("profd_unwind_table_hits", "Unwind tables a walk needed that the cache held", u.hits),
        ("profd_unwind_table_evictions", "Unwind tables the cache let go of to stay within its budget, or shed", u.evictions),
        ("profd_unwind_table_refused", "Files whose unwind tables alone exceed the cache's budget (their code is walked by frame pointers)", u.refused),
        ("profd_new_processes", "Processes whose address space was set up (maps read, files opened)", p.processes),
        ("profd_new_processes_deferred", "Processes whose setup waited for a later batch: the new-process CPU budget was spent", p.deferred),
        ("profd_new_process_deferred_samples", "Samples of processes waiting to be set up: attributed to their process, user stacks walked by frame pointers only, named once it is set up", p.deferred_samples),
    ] {
        reg.register(name, help, ConstCounter::new(v));
    }
    reg.register(
        "profd_new_process_cpu_seconds",
        "CPU time spent setting up new processes (reading /proc/PID/maps, opening mapped files), in seconds",
        ConstCounter::new(p.seconds),
    );
    reg.register(
        "profd_new_process_cpu_budget_seconds",
        "CPU time a second new processes' setup may take (new_process_cpu), in seconds",
        ConstGauge::new(p.per_second),
    );
    reg.register(
        "profd_unwind_table_bytes",
        "Bytes of unwind tables the cache holds now",
        ConstGauge::new(u.bytes as i64),
    );
    reg.register(
        "profd_unwind_table_budget_bytes",
        "Most bytes of unwind tables the cache holds",
        ConstGauge::new(u.budget as i64),
    );
}

/// The memory ceiling, the level, what each cache holds and what was shed.
fn memory_metrics(
    reg: &mut prometheus_client::registry::Registry,
    m: &profd_common::api::MemoryStatus,
) {
    type Labels = Vec<(String, String)>;
    for (name, help, v) in [
        ("profd_memory_limit_bytes", "The memory ceiling in force: memory_limit, or the cgroup's limit when lower", m.ceiling_bytes),
        ("profd_memory_used_bytes", "The daemon's memory held against the ceiling: its resident set, or its cgroup's memory less page cache when more", m.resident_bytes.max(m.cgroup_bytes)),
        ("profd_memory_level", "Memory pressure level: 0 normal, 1 caches shed, 2 continuous windows' unique stacks capped, 3 continuous frequency lowered, 4 continuous profiling on frame-pointer call chains", u64::from(m.level)),
    ] {
        reg.register(name, help, ConstGauge::new(v as i64));
    }
    let entered = Family::<Labels, Counter>::default();
    for (level, n) in m.entered.iter().enumerate().skip(1) {
        entered
            .get_or_create(&vec![("level".into(), level.to_string())])
            .inc_by(*n);
    }
    reg.register(
        "profd_memory_level_entered",
        "Times each memory pressure level was entered",
        entered,
    );
    let caches = Family::<Labels, Gauge>::default();
    for c in &m.caches {
        caches
            .get_or_create(&vec![("cache".into(), c.name.clone())])
            .set(c.bytes as i64);
    }
    reg.register(
        "profd_memory_cache_bytes",
        "Bytes each cache the memory governor sheds holds now",
        caches,
    );
    for (name, help, v) in [
        ("profd_memory_sheds", "Times the caches were told to shed for memory pressure", m.sheds),
        ("profd_memory_shed_bytes", "Bytes the caches gave back for memory pressure", m.shed_bytes),
        ("profd_memory_windows_capped", "Continuous windows cut with their unique stacks capped for memory pressure", m.windows_capped),
        ("profd_memory_windows_lowered", "Continuous windows sampled below continuous.frequency for memory pressure", m.windows_lowered),
        ("profd_samples_dropped_behind", "Samples not sent to a session whose queue of batches not yet counted was full (counted as lost in its totals)", m.samples_dropped_behind),
    ] {
        reg.register(name, help, ConstCounter::new(v));
    }
}

/// Per sink (label `sink`): windows and bytes sent, requests, retries,
/// drops by reason, the spool, and the oldest unsent window's age.
fn sink_metrics(
    reg: &mut prometheus_client::registry::Registry,
    sinks: &[crate::continuous::sinks::deliver::Report],
) {
    type Labels = Vec<(String, String)>;
    let counter = Family::<Labels, Counter>::default;
    let gauge = Family::<Labels, Gauge>::default;
    let (sent, bytes, requests, retries, dropped) =
        (counter(), counter(), counter(), counter(), counter());
    let (split, truncated) = (counter(), counter());
    let (spool_windows, spool_bytes, spool_limit, oldest) = (gauge(), gauge(), gauge(), gauge());
    let now = crate::continuous::files::now_ns();
    for r in sinks {
        let l = vec![
            ("sink".to_string(), r.name.clone()),
            ("kind".to_string(), r.kind.name().to_string()),
        ];
        let c = &r.counts;
        sent.get_or_create(&l).inc_by(c.windows_sent);
        bytes.get_or_create(&l).inc_by(c.bytes_sent);
        requests.get_or_create(&l).inc_by(c.requests);
        retries.get_or_create(&l).inc_by(c.retries);
        split.get_or_create(&l).inc_by(c.split);
        truncated.get_or_create(&l).inc_by(c.truncated);
        for (reason, n) in &c.drops {
            let mut with = l.clone();
            with.push(("reason".into(), reason.to_string()));
            dropped.get_or_create(&with).inc_by(*n);
        }
        spool_windows.get_or_create(&l).set(r.spool.windows as i64);
        spool_bytes.get_or_create(&l).set(r.spool.bytes as i64);
        spool_limit.get_or_create(&l).set(r.spool_limit as i64);
        let age = r
            .spool
            .oldest_end_ns
            .map_or(0.0, |end| now.saturating_sub(end) as f64 / 1e9);
        oldest.get_or_create(&l).set(age as i64);
    }
    reg.register(
        "profd_sink_windows_sent",
        "Continuous windows the sink's backend took",
        sent,
    );
    reg.register(
        "profd_sink_bytes_sent",
        "Bytes of request bodies the sink's backend took",
        bytes,
    );
    reg.register(
        "profd_sink_requests",
        "Requests the sink's backend took (a window may take several)",
        requests,
    );
    reg.register(
        "profd_sink_retries",
        "Failed tries that are retried: backend down or slow, 408, 429, 5xx",
        retries,
    );
    reg.register("profd_sink_windows_dropped", "Windows the sink dropped, per reason: spool_full, too_old, damaged, spool_unwritable, or the backend's refusal (http_NNN, grpc_CODE)", dropped);
    reg.register(
        "profd_sink_profiles_split",
        "Profiles split in parts to stay within the backend's limits",
        split,
    );
    reg.register(
        "profd_sink_stacks_truncated",
        "Stacks cut to the backend's depth limit",
        truncated,
    );
    reg.register(
        "profd_sink_spool_windows",
        "Windows waiting in the sink's spool now",
        spool_windows,
    );
    reg.register(
        "profd_sink_spool_bytes",
        "Bytes of the windows waiting in the sink's spool now",
        spool_bytes,
    );
    reg.register(
        "profd_sink_spool_limit_bytes",
        "The most bytes the sink's spool holds (spool_bytes)",
        spool_limit,
    );
    reg.register("profd_sink_oldest_unsent_seconds", "Age of the oldest window waiting in the sink's spool, from its end, in seconds (0: none waits)", oldest);
}

/// Per owner (labels `owner`, `uid`): ended sessions kept and evicted by
/// the retention limits; each owner's share.
fn retention_metrics(
    reg: &mut prometheus_client::registry::Registry,
    r: &crate::sessions::store::share::Report,
) {
    type Labels = Vec<(String, String)>;
    let (kept, evicted) = (
        Family::<Labels, Gauge>::default(),
        Family::<Labels, Counter>::default(),
    );
    for (uid, o) in &r.owners {
        let l = vec![
            ("owner".to_string(), o.name.clone()),
            ("uid".to_string(), uid.to_string()),
        ];
        kept.get_or_create(&l).set(o.sessions as i64);
        let e = &o.evicted;
        for (reason, n) in [("sessions", e.sessions), ("bytes", e.bytes), ("age", e.age)] {
            let mut with = l.clone();
            with.push(("reason".into(), reason.into()));
            evicted.get_or_create(&with).inc_by(n);
        }
    }
    reg.register(
        "profd_sessions_kept",
        "Ended sessions kept (in the state directory, or in memory without one), per owner",
        kept,
    );
    reg.register("profd_sessions_evicted", "Sessions the retention limits deleted since the daemon started, per owner and reason: sessions or bytes (the owner was over their share of --retain-sessions or --retain-bytes), age (--retain-days)", evicted);
    reg.register(
        "profd_retention_share_sessions",
        "Sessions each owner keeps whatever the others do: --retain-sessions over the owners with sessions kept",
        ConstGauge::new(r.share_sessions() as i64),
    );
}

/// Serve `/metrics` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    registry: Arc<Registry>,
    history: Option<History>,
    sinks: crate::continuous::sinks::Sinks,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::http::{header, StatusCode};
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let (registry, history, sinks) = (registry.clone(), history.clone(), sinks.clone());
                async move {
                    let body = render(&snapshot(&registry, history.as_ref(), &sinks).await);
                    ([(header::CONTENT_TYPE, CONTENT_TYPE)], body)
                }
            }),
        )
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                "not found: profd serves its metrics on /metrics\n",
            )
        });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_gauges_with_help_and_type() {
        let s = Snapshot {
            counts: SampleCounts {
                samples: 7,
                ..Default::default()
            },
            watchers: 2,
            process: Some(Process {
                cpu_seconds: 1.5,
                ..Default::default()
            }),
            ..Default::default()
        };
        let text = render(&s);
        assert!(
            text.contains("# HELP profd_samples Samples the kernel took"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE profd_samples counter\nprofd_samples_total 7\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE profd_watchers gauge\nprofd_watchers 2\n"),
            "{text}"
        );
        assert!(text.contains("process_cpu_seconds_total 1.5\n"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn renders_jvm_perfmap_requests_per_result() {
        let s = Snapshot {
            jvm_perfmap_requests: vec![("ok", 3), ("attach_disabled", 1)],
            ..Default::default()
        };
        let text = render(&s);
        for line in [
            "profd_jvm_perfmap_requests_total{result=\"ok\"} 3\n",
            "profd_jvm_perfmap_requests_total{result=\"attach_disabled\"} 1\n",
        ] {
            assert!(text.contains(line), "{text}");
        }
    }

    #[test]
    fn renders_connections_per_listener_and_reason() {
        let s = Snapshot {
            connections: vec![Connections {
                listener: "tls",
                open: 3,
                unauthenticated: 2,
                refused_limit: 5,
                refused_per_peer: 7,
                refused_unauthenticated: 4,
                first_request_timeouts: 6,
                idle_timeouts: 1,
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = render(&s);
        for line in [
            "profd_connections{listener=\"tls\"} 3\n",
            "profd_connections_unauthenticated{listener=\"tls\"} 2\n",
            "profd_connections_refused_total{listener=\"tls\",reason=\"limit\"} 5\n",
            "profd_connections_refused_total{listener=\"tls\",reason=\"per_peer\"} 7\n",
            "profd_connections_refused_total{listener=\"tls\",reason=\"unauthenticated\"} 4\n",
            "profd_connections_refused_total{listener=\"tls\",reason=\"handshake_timeout\"} 0\n",
            "profd_connections_refused_total{listener=\"tls\",reason=\"first_request_timeout\"} 6\n",
            "profd_connections_refused_total{listener=\"tls\",reason=\"idle_timeout\"} 1\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
    }

    #[test]
    fn renders_the_history_when_continuous_profiling_is_on() {
        assert!(!render(&Snapshot::default()).contains("profd_history"));
        let s = Snapshot {
            history: Some(HistoryStats {
                windows: 4,
                bytes: 1000,
                dropped_bytes: 2,
                dropped_age: 3,
                damaged: 1,
            }),
            ..Default::default()
        };
        let text = render(&s);
        for line in [
            "profd_history_windows 4\n",
            "profd_history_bytes 1000\n",
            "profd_history_windows_dropped_total{reason=\"bytes\"} 2\n",
            "profd_history_windows_dropped_total{reason=\"age\"} 3\n",
            "profd_history_windows_damaged_total 1\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
    }
}
