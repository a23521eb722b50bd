//! The soak's resource-bound cases, run on its daemon once the churn has
//! drained: ended sessions hold no descriptors, a `--children` session on
//! a shell running many short programs keeps the daemon's memory and
//! descriptors bounded, histograms are bounded in size and number at once,
//! and an attach with too few descriptors left is refused with
//! RESOURCE_EXHAUSTED naming the limit.
use crate::ctx::{ms, Ctx, Reaped};
use crate::procs::{read_proc, ProcSample};
use profd_common::api::{self, SessionState};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Seconds of the soak's run these cases take (the churn is that much
/// shorter).
pub const SECONDS: u64 = 8;
/// Descriptors the daemon may hold after the drain beyond those at start,
/// whatever the number of sessions: the symbolizer's files (kallsyms, debug
/// files), kept a minute after their last use.
const HELD_FDS: usize = 24;
/// Short programs the `--children` case runs.
const CHILDREN: u32 = 1000;
/// KiB of RSS a child may add to the daemon.
const KIB_A_CHILD: u64 = 16;

/// Run the cases, recording failed checks in `ctx`; `start` and `drained`
/// are the daemon's figures at start and after the drain.
pub async fn check(ctx: &Ctx, pid: u32, start: Option<ProcSample>, drained: Option<ProcSample>) {
    if let (Some(a), Some(b)) = (start, drained) {
        if b.fds > a.fds + HELD_FDS {
            ctx.fail(
                "ended sessions still hold descriptors",
                format!("{} fds at start, {} after the drain", a.fds, b.fds),
            );
        }
    }
    children(ctx, pid).await;
    histograms(ctx).await;
    out_of_fds(ctx, pid).await;
}

/// Attach to `pid` for `secs` seconds.
async fn attach(ctx: &Ctx, pid: u32, children: bool, secs: u64) -> Option<api::Session> {
    let req = api::AttachRequest {
        pid,
        children,
        duration_ms: secs * 1000,
        ..Default::default()
    };
    let client = &mut ctx.client();
    ctx.call("Attach", "bounds", client.attach(req))
        .await?
        .session
}

/// Session `id` once it has ended (or as it is after `within`).
async fn wait_ended(ctx: &Ctx, id: u64, within: Duration) -> Option<api::Session> {
    let deadline = Instant::now() + within;
    loop {
        let req = api::GetProfileRequest {
            session_id: id,
            format: 0,
            query: None,
        };
        let client = &mut ctx.client();
        let s = ctx
            .call("GetProfile", "bounds", client.get_profile(req))
            .await?
            .session?;
        if s.state != SessionState::Running as i32 || Instant::now() > deadline {
            return Some(s);
        }
        tokio::time::sleep(ms(100)).await;
    }
}

async fn children(ctx: &Ctx, pid: u32) {
    let Some(before) = read_proc(pid, 0.0) else {
        return;
    };
    let shell = Command::new("bash")
        .args([
            "-c",
            &format!("sleep 0.3; for i in $(seq 1 {CHILDREN}); do /bin/true; done"),
        ])
        .stdin(Stdio::null())
        .spawn();
    let Ok(shell) = shell else {
        ctx.note("bounds: cannot run bash", String::new());
        return;
    };
    let mut shell = Reaped(shell);
    let Some(s) = attach(ctx, shell.pid(), true, 60).await else {
        return;
    };
    let mut peak = before.fds;
    let deadline = Instant::now() + Duration::from_secs(30);
    while shell.0.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        if let Some(p) = read_proc(pid, 0.0) {
            peak = peak.max(p.fds);
        }
        tokio::time::sleep(ms(50)).await;
    }
    let Some(ended) = wait_ended(ctx, s.id, Duration::from_secs(10)).await else {
        return;
    };
    let Some(after) = read_proc(pid, 0.0) else {
        return;
    };
    let grown = after.rss_kib.saturating_sub(before.rss_kib);
    println!(
        "bounds:     --children on {CHILDREN} runs of /bin/true: {} processes, daemon fds {} -> peak {peak}, RSS +{grown} KiB ({:.1} KiB a child)",
        ended.processes.len(),
        before.fds,
        grown as f64 / f64::from(CHILDREN)
    );
    if peak > before.fds + 32 {
        ctx.fail(
            "a --children session holds descriptors per child",
            format!(
                "{} fds before, {peak} while {CHILDREN} children ran",
                before.fds
            ),
        );
    }
    if grown > KIB_A_CHILD * u64::from(CHILDREN) {
        ctx.fail(
            "a --children session's memory grows per child",
            format!("RSS +{grown} KiB for {CHILDREN} children (limit {KIB_A_CHILD} KiB a child)"),
        );
    }
}

/// A `sleep` for the histogram and descriptor cases.
fn sleeper() -> Option<Reaped> {
    Command::new("sleep")
        .arg("60")
        .stdin(Stdio::null())
        .spawn()
        .ok()
        .map(Reaped)
}

async fn histograms(ctx: &Ctx) {
    let Some(target) = sleeper() else { return };
    let Some(s) = attach(ctx, target.pid(), false, 30).await else {
        return;
    };
    let req = |buckets| api::GetHistogramRequest {
        session_id: s.id,
        module: "sleep".into(),
        offset: 0,
        scale: 65536,
        buckets,
    };
    // Over the default --max-histogram-buckets: refused at once.
    let over = ctx.client().get_histogram(req((1 << 20) + 1)).await;
    match over {
        Err(e)
            if e.code() == tonic::Code::ResourceExhausted
                && e.message().contains("--max-histogram-buckets") => {}
        other => ctx.fail(
            "a histogram over --max-histogram-buckets was not refused",
            format!("{:?}", other.map(|r| r.into_inner().counts.len())),
        ),
    }
    // 24 at once: the default --max-concurrent-exports (4) answer, the
    // others are refused naming it.
    let calls: Vec<_> = (0..24)
        .map(|_| {
            let mut c = ctx.client();
            let r = req(1 << 20);
            tokio::spawn(async move { c.get_histogram(r).await.map(|_| ()) })
        })
        .collect();
    let (mut answered, mut refused) = (0, 0);
    for call in calls {
        match call.await {
            Ok(Ok(())) => answered += 1,
            Ok(Err(e))
                if e.code() == tonic::Code::ResourceExhausted
                    && e.message().contains("--max-concurrent-exports") =>
            {
                refused += 1
            }
            Ok(Err(e)) => ctx.fail("GetHistogram error", format!("{e:?}")),
            Err(e) => ctx.fail("soak histogram task failed", format!("{e}")),
        }
    }
    println!(
        "bounds:     24 histograms of 2^20 buckets at once: {answered} answered, {refused} refused"
    );
    if answered == 0 || refused == 0 {
        ctx.fail(
            "24 histograms at once were not bounded by --max-concurrent-exports",
            format!("{answered} answered, {refused} refused"),
        );
    }
    let client = &mut ctx.client();
    let _ = client.stop(api::StopRequest { session_id: s.id }).await;
}

/// The daemon's limit on open files: (soft, hard), from /proc/PID/limits.
fn fd_limit(pid: u32) -> Option<(Option<u64>, Option<u64>)> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut words = line.split_whitespace().skip(3);
    let mut next = || words.next().map(|w| w.parse().ok());
    Some((next()?, next()?))
}

fn set_fd_limit(pid: u32, soft: Option<u64>, hard: Option<u64>) -> std::io::Result<()> {
    use rustix::process::{prlimit, Pid, Resource, Rlimit};
    let pid = Pid::from_raw(pid as i32);
    let new = Rlimit {
        current: soft,
        maximum: hard,
    };
    prlimit(pid, Resource::Nofile, new)
        .map(|_| ())
        .map_err(Into::into)
}

async fn out_of_fds(ctx: &Ctx, pid: u32) {
    let (Some(target), Some((soft, hard)), Some(now)) =
        (sleeper(), fd_limit(pid), read_proc(pid, 0.0))
    else {
        return;
    };
    if let Err(e) = set_fd_limit(pid, Some(now.fds as u64 + 4), hard) {
        ctx.note(
            "bounds: cannot lower the daemon's RLIMIT_NOFILE",
            e.to_string(),
        );
        return;
    }
    let req = api::AttachRequest {
        pid: target.pid(),
        duration_ms: 1000,
        ..Default::default()
    };
    let r = ctx.client().attach(req).await;
    let restored = set_fd_limit(pid, soft, hard);
    match r {
        Err(e)
            if e.code() == tonic::Code::ResourceExhausted
                && e.message().contains("RLIMIT_NOFILE") =>
        {
            println!(
                "bounds:     attach with 4 descriptors to spare: refused, {}",
                e.message()
            );
        }
        other => ctx.fail(
            "an attach with 4 descriptors to spare was not refused with RESOURCE_EXHAUSTED",
            format!("{other:?}"),
        ),
    }
    if let Err(e) = restored {
        ctx.fail("cannot restore the daemon's RLIMIT_NOFILE", e.to_string());
    }
}
