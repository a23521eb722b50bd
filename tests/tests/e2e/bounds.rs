//! End-to-end tests of the daemon's resource bounds: ended sessions give
//! their descriptors back, a `--children` session stays compact however many
//! processes its target forks, histograms and exports are bounded in size and
//! concurrency, and running out of descriptors refuses an attach instead of
//! profiling unsymbolized. Real kernel, real `profd` and `profctl`.
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use profd_common::api::{self, profiler_client::ProfilerClient};
use profd_e2e::{require_root_and_perf, serial, Daemon, Harness, Profile, Workload};

/// Descriptors process `pid` has open.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or_else(|e| panic!("cannot list /proc/{pid}/fd: {e}"))
}

/// Resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// The daemon's descriptors once they are at most `bound` (the connections
/// of profctl commands that have exited close a little later), or after 10 s.
fn settled_fds(pid: u32, bound: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = open_fds(pid);
        if n <= bound || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `profctl attach PID --duration SECS --format json [extra...]`.
fn attach(daemon: &Daemon, pid: u32, secs: &str, extra: &[&str]) -> profd_e2e::CmdOutput {
    let pid = pid.to_string();
    let mut args = vec!["attach", &pid, "--duration", secs, "--format", "json"];
    args.extend_from_slice(extra);
    daemon.profctl(&args)
}

/// Sessions that end close everything they opened: pidfd, rings, /proc
/// entries and the target's mapped files (histograms keep the files' load
/// segments, not the files).
#[test]
fn ended_sessions_give_back_their_descriptors() {
    let h = Harness::start();
    let pid = h.daemon.pid();
    // A first session loads what the daemon keeps for all sessions.
    let w = Workload::start("split", 60.0);
    Profile::parse(&attach(&h.daemon, w.pid(), "0.3", &[]));
    drop(w);
    let baseline = settled_fds(pid, 0);
    let sessions = 6;
    for _ in 0..sessions {
        let w = Workload::start("split", 60.0);
        let p = Profile::parse(&attach(&h.daemon, w.pid(), "0.3", &[]));
        assert!(p.totals.attributed > 0, "nothing sampled:\n{}", p.table());
    }
    let after = settled_fds(pid, baseline + 2);
    eprintln!("daemon fds: {baseline} before, {after} after {sessions} ended sessions");
    assert!(
        after <= baseline + 2,
        "{sessions} ended sessions left {} descriptors open ({baseline} before, {after} after):\n{}",
        after - baseline,
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .flatten()
            .map(|e| format!("{:?}", std::fs::read_link(e.path())))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A shell running `/bin/true` `n` times in a row, after a short pause so
/// that the session is attached first.
fn true_loop(n: u32) -> std::process::Child {
    Command::new("bash")
        .args([
            "-c",
            &format!("sleep 0.5; for i in $(seq 1 {n}); do /bin/true; done"),
        ])
        .stdin(Stdio::null())
        .spawn()
        .expect("start bash")
}

/// `--children` on a shell that runs thousands of short programs: the
/// daemon's descriptors stay bounded while they run (each file is held once
/// per session, each exited process's /proc entry is let go), and its memory
/// grows by a few KiB per process (an exited process keeps its mappings, not
/// its unwinder; the bound leaves room for the symbolizer's caches).
#[test]
fn children_sessions_stay_compact() {
    let h = Harness::start();
    let pid = h.daemon.pid();
    let run = |n: u32| {
        let mut shell = true_loop(n);
        let peak = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (peak, done) = (peak.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    peak.fetch_max(open_fds(pid), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        let out = attach(&h.daemon, shell.id(), "120", &["--children"]);
        done.store(true, Ordering::Relaxed);
        watcher.join().unwrap();
        let _ = shell.wait();
        let p = Profile::parse(&out);
        assert_eq!(p.state, "exited", "{}", p.table());
        (p, peak.load(Ordering::Relaxed))
    };
    // A first run loads the symbols and debug data of bash, true and libc.
    run(200);
    let (fds, rss) = (settled_fds(pid, 0), rss_kib(pid));
    let n = 3000;
    let (p, peak) = run(n);
    let grown = rss_kib(pid).saturating_sub(rss);
    eprintln!(
        "{n} children: {} processes listed, {} attributed; daemon fds {fds} before, peak {peak}; RSS +{grown} KiB ({:.1} KiB a child)",
        p.processes.len(),
        p.totals.attributed,
        grown as f64 / f64::from(n)
    );
    assert!(
        p.processes.len() > n as usize / 2,
        "the session saw {} of {n} children",
        p.processes.len()
    );
    assert!(
        peak <= fds + 32,
        "the daemon held {peak} descriptors while {n} children ran ({fds} before)"
    );
    assert!(
        grown <= 16 * u64::from(n),
        "the daemon's RSS grew by {grown} KiB for {n} children: more than 16 KiB a child"
    );
}

async fn client(socket: &Path) -> ProfilerClient<tonic::transport::Channel> {
    let channel = profctl::requests::connect::unix_channel(socket, None)
        .await
        .expect("connect to profd's socket");
    ProfilerClient::new(channel)
}

/// A session on a spinning `split` workload, running for a minute.
async fn running_session(
    c: &mut ProfilerClient<tonic::transport::Channel>,
    w: &Workload,
) -> api::Session {
    let s = c
        .attach(api::AttachRequest {
            pid: w.pid(),
            duration_ms: 60_000,
            ..Default::default()
        })
        .await
        .expect("attach")
        .into_inner()
        .session
        .expect("a session");
    tokio::time::sleep(Duration::from_millis(500)).await;
    s
}

fn histogram(id: u64, buckets: u32) -> api::GetHistogramRequest {
    api::GetHistogramRequest {
        session_id: id,
        module: "split".into(),
        offset: 0,
        scale: 65536,
        buckets,
    }
}

/// A histogram over `--max-histogram-buckets` is refused, naming the limit;
/// one at the limit is answered.
#[test]
fn histograms_over_the_bucket_limit_are_refused() {
    let _serial = serial();
    require_root_and_perf();
    let daemon = Daemon::start_with(&["--max-histogram-buckets", "4096"]);
    let w = Workload::start("split", 60.0);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = client(daemon.socket()).await;
        let s = running_session(&mut c, &w).await;
        let ok = c.get_histogram(histogram(s.id, 4096)).await.expect("4096");
        assert_eq!(ok.get_ref().counts.len(), 4096);
        let err = c
            .get_histogram(histogram(s.id, 4097))
            .await
            .expect_err("4097 buckets answered");
        assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
        assert!(
            err.message().contains("--max-histogram-buckets (4096)"),
            "{err:?}"
        );
    });
}

/// Histogram and export requests beyond `--max-concurrent-exports` at once
/// are refused with RESOURCE_EXHAUSTED naming the limit; the others are
/// answered.
#[test]
fn concurrent_histograms_and_exports_are_bounded() {
    let _serial = serial();
    require_root_and_perf();
    let daemon = Daemon::start_with(&["--max-concurrent-exports", "1"]);
    let w = Workload::start("split", 60.0);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = client(daemon.socket()).await;
        let s = running_session(&mut c, &w).await;
        let mut calls = Vec::new();
        for i in 0..24 {
            let mut c = c.clone();
            calls.push(tokio::spawn(async move {
                if i % 2 == 0 {
                    c.get_histogram(histogram(s.id, 1 << 20)).await.map(|_| ())
                } else {
                    c.get_profile(api::GetProfileRequest {
                        session_id: s.id,
                        format: api::ExportFormat::Pprof as i32,
                        query: None,
                    })
                    .await
                    .map(|_| ())
                }
            }));
        }
        let (mut answered, mut refused) = (0, 0);
        for call in calls {
            match call.await.unwrap() {
                Ok(()) => answered += 1,
                Err(e) => {
                    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
                    assert!(
                        e.message().contains("--max-concurrent-exports (1)"),
                        "{e:?}"
                    );
                    refused += 1;
                }
            }
        }
        eprintln!("24 at once: {answered} answered, {refused} refused");
        assert!(
            answered >= 1 && refused >= 1,
            "{answered} answered, {refused} refused"
        );
        // Once they are done, the next is answered.
        c.get_histogram(histogram(s.id, 1 << 20))
            .await
            .expect("a histogram after the others");
    });
}

/// Set the soft RLIMIT_NOFILE of process `pid` (the hard limit stays).
fn set_fd_limit(pid: u32, soft: usize) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let hard = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(4))
        .expect("Max open files in /proc/PID/limits")
        .to_string();
    let status = Command::new("prlimit")
        .args([
            "--pid",
            &pid.to_string(),
            &format!("--nofile={soft}:{hard}"),
        ])
        .status()
        .expect("run prlimit");
    assert!(status.success(), "prlimit failed: {status}");
}

/// With few descriptors left, an attach is refused with RESOURCE_EXHAUSTED
/// naming the limit, or it succeeds and its profile is named: never a
/// session that reports OK unsymbolized. With the limit raised again,
/// attaching works.
#[test]
fn running_out_of_descriptors_refuses_the_attach() {
    let h = Harness::start();
    let pid = h.daemon.pid();
    let warm = Workload::start("split", 60.0);
    Profile::parse(&attach(&h.daemon, warm.pid(), "0.3", &[]));
    drop(warm);
    let base = settled_fds(pid, 0);
    let (mut refused, mut named) = (0, 0);
    for spare in (1..=40).step_by(3) {
        let w = Workload::start("split", 60.0);
        set_fd_limit(pid, base + spare);
        let out = attach(&h.daemon, w.pid(), "0.3", &[]);
        set_fd_limit(pid, 4096);
        if out.status.success() {
            let p = Profile::parse(&out);
            let split_named = p
                .functions
                .iter()
                .any(|f| f.module == "split" && !f.name.contains("+0x"));
            eprintln!(
                "{spare} spare: attached, {} attributed, {} unsymbolized",
                p.totals.attributed, p.totals.unsymbolized
            );
            assert!(
                split_named && p.totals.unsymbolized * 10 <= p.totals.attributed,
                "with {spare} descriptors to spare the session ran unsymbolized:\n{}",
                p.table()
            );
            named += 1;
        } else {
            let err = out.stderr.trim_end();
            eprintln!("{spare} spare: {err}");
            assert!(
                err.contains("resource exhausted")
                    && err.contains("file descriptors")
                    && err.contains("RLIMIT_NOFILE"),
                "with {spare} descriptors to spare:\n{}",
                out.describe()
            );
            refused += 1;
        }
        settled_fds(pid, base);
    }
    assert!(refused > 0, "no attach was refused");
    assert!(named > 0, "no attach succeeded");
    let w = Workload::start("split", 60.0);
    let p = Profile::parse(&attach(&h.daemon, w.pid(), "0.3", &[]));
    assert!(p.totals.attributed > 0, "{}", p.table());
}

/// This run's ended sessions obey the retention limits in memory too: with
/// `--retain-sessions 2`, the daemon lists (and holds) only the last two.
#[test]
fn ended_sessions_beyond_retention_leave_memory() {
    let _serial = serial();
    require_root_and_perf();
    let daemon = Daemon::start_with(&["--retain-sessions", "2"]);
    let w = Workload::start("split", 60.0);
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(Profile::parse(&attach(&daemon, w.pid(), "0.2", &[])).session_id);
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let listed = rt.block_on(async {
        let mut c = client(daemon.socket()).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let list = c
                .list_sessions(api::ListSessionsRequest { all: true })
                .await
                .expect("ListSessions")
                .into_inner();
            let listed: Vec<u64> = list.sessions.iter().map(|s| s.id).collect();
            if listed.len() <= 2 || Instant::now() > deadline {
                return listed;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    assert_eq!(
        listed,
        ids[2..],
        "sessions {ids:?} ended with --retain-sessions 2; the daemon still lists {listed:?}"
    );
    let gone = daemon.profctl(&["report", &ids[0].to_string()]);
    assert!(
        !gone.status.success() && gone.stderr.contains("not found"),
        "{}",
        gone.describe()
    );
}
