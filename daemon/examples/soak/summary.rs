//! The soak's closing figures: sessions, workloads, watch streams, resumes,
//! messages, profiles, samples, RPC latency and the daemon's memory,
//! descriptors and CPU, then every failed check and the result line.
use crate::ctx::{Ctx, Findings, CALL_BOUND, LATE_BOUND};
use crate::procs::{mib, ProcSample};
use profd_common::api;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// What the run measured, beyond the shared counters.
pub struct Figures {
    /// `--seconds`.
    pub seconds: u64,
    pub seed: u64,
    /// Sessions by the state they ended in.
    pub by_state: BTreeMap<&'static str, u64>,
    pub max_running: usize,
    /// Sessions attached in all.
    pub sessions: usize,
    /// The sum of the sessions' totals.
    pub sums: api::Totals,
    /// The daemon's Info at the end.
    pub end_info: api::InfoResponse,
    pub baseline: Option<ProcSample>,
    /// When (s) `at_mark` was read.
    pub mark: f64,
    pub at_mark: Option<ProcSample>,
    pub churn_end: Option<ProcSample>,
    pub drained: Option<ProcSample>,
    pub max_rss: u64,
    pub max_rss_mib: u64,
    /// The daemon's exit status on SIGTERM.
    pub exit: String,
    pub warns: Findings,
    pub errors: Findings,
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// Prints the figures and the failed checks; true when any check failed.
pub fn print(ctx: &Ctx, f: &Figures) -> bool {
    let st = &ctx.stats;
    let get = |c: &AtomicU64| c.load(Relaxed);
    let (sums, it) = (&f.sums, f.end_info.totals.unwrap_or_default());
    let mut lat = ctx.latencies.lock().unwrap().clone();
    lat.sort_unstable();
    let states: Vec<String> = f
        .by_state
        .iter()
        .map(|(k, v)| {
            format!(
                "{} {v}",
                k.trim_start_matches("SESSION_STATE_").to_lowercase()
            )
        })
        .collect();
    println!();
    println!("== soak summary ({} s churn, seed {})", f.seconds, f.seed);
    println!(
        "sessions:   {} attached ({} on an already profiled process), {} stopped by us, max {} running at once; ended: {}",
        get(&st.attached),
        get(&st.attached_shared),
        get(&st.stopped),
        f.max_running,
        states.join(", ")
    );
    println!(
        "workloads:  {} started, {} killed (SIGKILL)",
        get(&st.workloads_started),
        get(&st.workloads_killed)
    );
    println!(
        "watch:      {} streams opened, {} ended with final, {} dropped by their watcher, {} aborted mid-read",
        get(&st.streams_opened),
        get(&st.streams_final),
        get(&st.streams_dropped),
        get(&st.streams_aborted)
    );
    println!(
        "resume:     {} asked: {} resumed, {} answered with a snapshot, {} refused",
        get(&st.resumes_asked),
        get(&st.resumes_honored),
        get(&st.resumes_snapshot),
        get(&st.resumes_refused)
    );
    let per = |rows: u64, n: u64| rows as f64 / n.max(1) as f64;
    println!(
        "resume:     rows in a first update: snapshot {:.1}, resumed {:.1} on average",
        per(get(&st.snapshot_rows), get(&st.snapshots)),
        per(get(&st.resumed_rows), get(&st.resumes_honored))
    );
    println!(
        "messages:   {} updates received ({} function rows), every one checked",
        get(&st.messages),
        get(&st.rows),
    );
    let late = ctx.latest_update.lock().unwrap().clone();
    println!(
        "lateness:   max {} ms beyond the interval (bound {} ms): {}",
        late.by.as_millis(),
        LATE_BOUND.as_millis(),
        late.what
    );
    println!(
        "profiles:   {} GetProfile checks, {} folded exports checked",
        get(&st.profile_checks),
        get(&st.folded_checks)
    );
    println!(
        "samples:    sessions attributed {} (discarded {}, lost {}, truncated {}, unsymbolized {}, overflowed {}, throttled {}); Info attributed {} discarded {} lost {}",
        sums.attributed,
        sums.discarded,
        sums.lost,
        sums.truncated,
        sums.unsymbolized,
        sums.overflowed,
        sums.throttled,
        it.attributed,
        it.discarded,
        it.lost
    );
    println!(
        "rpc:        {} unary calls, latency p50 {} ms, p99 {} ms, max {} ms",
        lat.len(),
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or(0)
    );
    let slowest = ctx.slowest_call.lock().unwrap().clone();
    println!(
        "            slowest answer (a call, or a Watch's first update) {} ms (bound {} ms): {}",
        slowest.by.as_millis(),
        CALL_BOUND.as_millis(),
        slowest.what
    );
    let fmt = |s: Option<ProcSample>| {
        s.map(|s| {
            format!(
                "{:.1} MiB (anon {:.1})/{} fds",
                mib(s.rss_kib),
                mib(s.anon_kib),
                s.fds
            )
        })
        .unwrap_or_else(|| "-".into())
    };
    println!(
        "daemon:     RSS/fds at start {}, at {:.0} s {}, end of churn {}, after drain {}; max RSS {:.1} MiB (limit {} MiB)",
        fmt(f.baseline),
        f.mark,
        fmt(f.at_mark),
        fmt(f.churn_end),
        fmt(f.drained),
        mib(f.max_rss),
        f.max_rss_mib
    );
    if let (Some(a), Some(b)) = (f.baseline, f.drained) {
        // /proc counts CPU time in USER_HZ, 100 per second on Linux.
        let cpu = (b.cpu_ticks - a.cpu_ticks) as f64 / 100.0;
        println!(
            "            CPU {cpu:.1} s over {:.0} s ({:.0} % of one CPU); {:.1} fds held per ended session; {} on SIGTERM; log {} WARN, {} ERROR",
            b.at_s,
            100.0 * cpu / b.at_s.max(1.0),
            b.fds.saturating_sub(a.fds) as f64 / f.sessions.max(1) as f64,
            f.exit,
            f.warns.total(),
            f.errors.total()
        );
    }
    f.warns.print("WARN");
    f.errors.print("ERROR");
    ctx.notes.lock().unwrap().print("note");
    let failures = ctx.failures.lock().unwrap();
    failures.print("FAILED");
    if get(&st.repeated_failures) > 0 {
        println!(
            "FAILED: {} more failing updates in watchers that had already reported the same check",
            get(&st.repeated_failures)
        );
    }
    let failed = failures.total() > 0;
    println!(
        "result:     {}",
        if failed {
            format!("FAIL ({} failed checks)", failures.total())
        } else {
            "PASS".into()
        }
    );
    failed
}
