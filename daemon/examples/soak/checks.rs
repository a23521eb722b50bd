//! The soak's checks once the churn is over: every session ends and every
//! watcher gets its final update, each session ended as its history says
//! and agrees with its final updates and the list, the daemon-wide totals
//! agree, RSS stayed bounded, and the daemon stops cleanly on SIGTERM with
//! no ERROR in its log.
use crate::churn::Controller;
use crate::ctx::{check_profile, ms, state_name, Ctx, Findings};
use crate::procs::{mib, DaemonProc, ProcSample};
use profd_common::api::{self, SessionState};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

/// Drain: slow watchers read on, every session is ended, every watcher
/// must get its final update. Returns the last ListSessions.
pub async fn drain(ctx: &Ctx, c: &mut Controller) -> Vec<api::Session> {
    ctx.draining.send_replace(true);
    for id in c.running() {
        c.stop(id).await;
    }
    let wait_end = Instant::now() + Duration::from_secs(20);
    let last_list = loop {
        let list = c.refresh().await.unwrap_or_default();
        let still: Vec<u64> = list
            .iter()
            .filter(|s| s.state == SessionState::Running as i32)
            .map(|s| s.id)
            .collect();
        if still.is_empty() {
            break list;
        }
        if Instant::now() > wait_end {
            ctx.fail(
                "sessions still running 20 s after being stopped or their target killed",
                format!("{still:?}"),
            );
            break list;
        }
        tokio::time::sleep(ms(200)).await;
    };
    let watch_end = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut stuck = 0;
    for s in c.sessions.values_mut() {
        for mut h in s.watchers.drain(..) {
            match tokio::time::timeout_at(watch_end, &mut h).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) if e.is_panic() => {
                    ctx.fail("soak watcher task panicked", format!("{e}"))
                }
                Ok(Err(_)) => {}
                Err(_) => {
                    h.abort();
                    stuck += 1;
                }
            }
        }
    }
    if stuck > 0 {
        ctx.fail(
            "watchers without a final update 30 s after every session ended",
            format!("{stuck} watchers"),
        );
    }
    c.reap_watchers().await;
    for w in 0..c.workloads.len() {
        if c.workloads[w].killed_at.is_none() {
            if let Some(mut p) = c.workloads[w].proc.take() {
                p.kill();
            }
        }
    }
    last_list
}

/// Every session: ended as its history says, its profile adds up, the
/// watchers' final updates and the list agree with it. Returns the count of
/// sessions by end state and the sum of their totals.
pub async fn sessions(
    ctx: &Ctx,
    c: &Controller,
    last_list: &[api::Session],
    start: Instant,
) -> (BTreeMap<&'static str, u64>, api::Totals) {
    let listed: HashMap<u64, &api::Session> = last_list.iter().map(|s| (s.id, s)).collect();
    let finals = std::mem::take(&mut *ctx.finals.lock().unwrap());
    let mut by_state: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut sums = api::Totals::default();
    let ids: Vec<u64> = c.sessions.keys().copied().collect();
    for id in ids {
        let about = format!("session {id}");
        let client = &mut ctx.client();
        let req = api::GetProfileRequest {
            session_id: id,
            format: 0,
            query: None,
        };
        let Some(p) = ctx
            .call("GetProfile", &about, client.get_profile(req))
            .await
        else {
            continue;
        };
        check_profile(ctx, "final GetProfile", &p);
        let Some(s) = p.session else { continue };
        *by_state.entry(state_name(s.state)).or_default() += 1;
        let t = s.totals.unwrap_or_default();
        sums.attributed += t.attributed;
        sums.discarded += t.discarded;
        sums.lost += t.lost;
        sums.truncated += t.truncated;
        sums.unsymbolized += t.unsymbolized;
        sums.overflowed += t.overflowed;
        sums.throttled += t.throttled;
        let mine = &c.sessions[&id];
        let ok = c.acceptable(mine);
        if SessionState::try_from(s.state).map_or(true, |st| !ok.contains(&st)) {
            let history = format!(
                "attached {:.1} s, duration {:?}, stopped at {:?} s (Stop answered {}), target killed at {:?} s",
                (mine.attached_at - start).as_secs_f64(),
                mine.duration,
                mine.stopped_at.map(|t| (t - start).as_secs_f64()),
                mine.stop_state.map(state_name).unwrap_or("-"),
                c.workloads[mine.workload].killed_at.map(|t| (t - start).as_secs_f64()),
            );
            ctx.fail(
                "session ended in an unexpected state",
                format!(
                    "{about} (pid {}): {} ({}), expected one of {ok:?}; {history}",
                    s.pid,
                    state_name(s.state),
                    s.error
                ),
            );
        }
        if let Some(stop_state) = mine.stop_state {
            if stop_state != s.state {
                ctx.fail(
                    "Stop answered another state than the session kept",
                    format!(
                        "{about}: Stop {}, now {}",
                        state_name(stop_state),
                        state_name(s.state)
                    ),
                );
            }
        }
        for f in finals.get(&id).into_iter().flatten() {
            if f.state != s.state || f.totals != s.totals {
                ctx.fail(
                    "a final Watch update disagrees with the ended session",
                    format!(
                        "{about}: final update {} {:?}, GetProfile {} {:?}",
                        state_name(f.state),
                        f.totals,
                        state_name(s.state),
                        s.totals
                    ),
                );
            }
        }
        match listed.get(&id) {
            None => ctx.fail("session missing from ListSessions", about.clone()),
            Some(l) if l.state != s.state || l.totals != s.totals => ctx.fail(
                "ListSessions disagrees with GetProfile",
                format!(
                    "{about}: list {} {:?}, profile {:?}",
                    state_name(l.state),
                    l.totals,
                    s.totals
                ),
            ),
            Some(_) => {}
        }
    }
    (by_state, sums)
}

/// The daemon-wide totals agree with the sessions' `sums`, nothing runs and
/// no ring is open. Returns the daemon's Info.
pub async fn info(ctx: &Ctx, sums: &api::Totals) -> api::InfoResponse {
    let client = &mut ctx.client();
    let end_info = ctx
        .call("Info", "end", client.info(api::InfoRequest {}))
        .await
        .unwrap_or_default();
    let it = end_info.totals.unwrap_or_default();
    if it.attributed > sums.attributed {
        ctx.fail(
            "Info attributed above the sum over sessions",
            format!("Info {} > sessions {}", it.attributed, sums.attributed),
        );
    }
    if end_info.running_sessions != 0 {
        ctx.fail(
            "Info counts running sessions after all ended",
            format!("{}", end_info.running_sessions),
        );
    }
    if !end_info.groups.is_empty() {
        ctx.fail(
            "sampling rings still open after all sessions ended",
            format!("{:?}", end_info.groups),
        );
    }
    end_info
}

/// The daemon's RSS at the end of the churn is under `--max-rss-mib` and at
/// most twice the one at the mark.
pub fn rss(ctx: &Ctx, at_mark: Option<ProcSample>, end: Option<ProcSample>, max_rss_mib: u64) {
    if let (Some(at_mark), Some(end)) = (at_mark, end) {
        if end.rss_kib > max_rss_mib * 1024 {
            ctx.fail(
                "RSS above --max-rss-mib at the end",
                format!("{:.1} MiB > {} MiB", mib(end.rss_kib), max_rss_mib),
            );
        }
        if end.rss_kib > 2 * at_mark.rss_kib {
            ctx.fail(
                "RSS more than doubled after the first seconds",
                format!(
                    "{:.1} MiB at {:.0} s, {:.1} MiB at the end",
                    mib(at_mark.rss_kib),
                    at_mark.at_s,
                    mib(end.rss_kib)
                ),
            );
        }
    } else {
        ctx.fail("no RSS readings of the daemon", String::new());
    }
}

/// Clean shutdown: SIGTERM, then the daemon exits with success within 15 s.
/// Returns its exit status as text (`?` when it did not exit).
pub async fn shutdown(ctx: &Ctx, daemon: &mut DaemonProc) -> String {
    let mut exit = String::from("?");
    if let Some(pid) = rustix::process::Pid::from_raw(daemon.pid as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match daemon.child.0.try_wait() {
            Ok(Some(status)) => {
                exit = status.to_string();
                if !status.success() {
                    ctx.fail("profd did not exit cleanly on SIGTERM", exit.clone());
                }
                break;
            }
            Ok(None) if Instant::now() < deadline => tokio::time::sleep(ms(100)).await,
            _ => {
                ctx.fail("profd still running 15 s after SIGTERM", String::new());
                break;
            }
        }
    }
    exit
}

/// The daemon log's WARN and ERROR lines (panics count as errors); any
/// error is a failed check.
pub fn daemon_log(ctx: &Ctx, log: &Path) -> (Findings, Findings) {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    let (mut warns, mut errors) = (Findings::default(), Findings::default());
    for line in log.lines() {
        let level = line.split_whitespace().nth(1).unwrap_or("");
        if level == "ERROR" || line.contains("panicked") {
            errors.add("daemon log", line.to_string());
        } else if level == "WARN" {
            warns.add("daemon log", line.to_string());
        }
    }
    if errors.total() > 0 {
        ctx.fail(
            "ERROR lines or panics in the daemon log",
            format!("{} lines", errors.total()),
        );
    }
    (warns, errors)
}
