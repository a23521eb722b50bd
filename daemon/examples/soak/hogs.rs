//! The soak's misbehaving-client phase, a few seconds in the middle of the
//! churn: a user other than root (uid 65534, on a thread of its own that
//! takes that uid) tries to hold as many connections as the socket takes,
//! half of them sending nothing and half only HTTP/2 PINGs, reopening each
//! as soon as the daemon closes or refuses it. Meanwhile another user (uid
//! 65533, on a thread of its own too) makes calls on fresh connections,
//! root opens Watch streams on fresh connections, and the churn goes on.
//! Checks that every call of the other user, the churn's calls and the new
//! streams' updates kept their latency bound.
use crate::ctx::{connect, ms, Ctx};
use profd_common::api::{self, SessionState};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The daemon's `--max-connections`: the misbehaving user tries to hold
/// that many.
pub const MAX_CONNECTIONS: usize = 256;
/// How long the phase lasts.
const PHASE: Duration = Duration::from_secs(6);
/// The latency bound of a call, and of a Watch update beyond its interval,
/// while the phase lasts.
const BOUND: Duration = Duration::from_secs(5);
/// The misbehaving user, and the other one.
const HOG_UID: u32 = 65534;
const NEIGHBOUR_UID: u32 = 65533;
/// Watch streams root opens during the phase, and their interval.
const WATCHES: usize = 4;
const WATCH_INTERVAL_MS: u32 = 250;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const SETTINGS: [u8; 9] = [0, 0, 0, 4, 0, 0, 0, 0, 0];
const PING: [u8; 17] = [0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];

/// The misbehaving user's connections.
#[derive(Default)]
struct Hog {
    opened: AtomicU64,
    closed: AtomicU64,
    failed: AtomicU64,
}

/// Runs `work` on a thread of its own with the credentials of `uid` and of
/// the socket's group (Linux credentials are per thread; the soak's other
/// threads stay root), on a runtime of that thread.
fn as_user<T: Send + 'static>(
    uid: u32,
    gid: u32,
    work: impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = T>>> + Send + 'static,
) -> std::thread::JoinHandle<Result<T, String>> {
    std::thread::spawn(move || {
        use rustix::process::{Gid, Uid};
        use rustix::thread::{set_thread_groups, set_thread_res_gid, set_thread_res_uid};
        let gid = Gid::from_raw(gid);
        set_thread_groups(&[])
            .and_then(|()| set_thread_res_gid(gid, gid, gid))
            .and_then(|()| {
                let uid = Uid::from_raw(uid);
                set_thread_res_uid(uid, uid, uid)
            })
            .map_err(|e| format!("cannot take uid {uid}: {e}"))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("a runtime for uid {uid}: {e}"))?;
        Ok(rt.block_on(work()))
    })
}

/// One connection of the misbehaving user, reopened until `stop`.
async fn hold(socket: PathBuf, ping: bool, hog: Arc<Hog>, stop: Arc<AtomicBool>) {
    let mut buf = [0u8; 4096];
    while !stop.load(Relaxed) {
        let Ok(mut s) = tokio::net::UnixStream::connect(&socket).await else {
            hog.failed.fetch_add(1, Relaxed);
            tokio::time::sleep(ms(10)).await;
            continue;
        };
        hog.opened.fetch_add(1, Relaxed);
        if ping && s.write_all(&[PREFACE, &SETTINGS].concat()).await.is_ok() {
            let mut tick = tokio::time::interval(ms(100));
            loop {
                tokio::select! {
                    r = s.read(&mut buf) => if !matches!(r, Ok(n) if n > 0) { break },
                    _ = tick.tick() => if s.write_all(&PING).await.is_err() { break },
                }
            }
        } else {
            while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
        }
        hog.closed.fetch_add(1, Relaxed);
    }
}

/// The other user's calls until `stop`: each on a fresh connection, its
/// latency or what went wrong.
async fn neighbour(socket: PathBuf, stop: Arc<AtomicBool>) -> Vec<Result<Duration, String>> {
    let mut calls = Vec::new();
    while !stop.load(Relaxed) {
        let started = Instant::now();
        let call = async {
            let mut client = connect(&socket)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            client
                .info(api::InfoRequest {})
                .await
                .map_err(|s| format!("Info: {:?}: {}", s.code(), s.message()))
        };
        calls.push(match tokio::time::timeout(2 * BOUND, call).await {
            Ok(Ok(_)) => Ok(started.elapsed()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(format!("no answer in {:?}", 2 * BOUND)),
        });
        tokio::time::sleep(ms(200)).await;
    }
    calls
}

/// Root's Watch stream on a fresh connection for `session`: the largest
/// lateness of an update until `until` (or the stream's end).
async fn watch(
    ctx: Arc<Ctx>,
    session: u64,
    until: tokio::time::Instant,
) -> Result<Duration, String> {
    let mut client = connect(&ctx.socket)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let req = api::WatchRequest {
        session_id: session,
        interval_ms: WATCH_INTERVAL_MS,
        ..Default::default()
    };
    let late = |s: tonic::Status| format!("Watch {:?}: {}", s.code(), s.message());
    let mut stream = client.watch(req).await.map_err(late)?.into_inner();
    let interval = ms(u64::from(WATCH_INTERVAL_MS));
    let (mut last, mut worst) = (Instant::now(), Duration::ZERO);
    loop {
        let next = tokio::select! {
            m = tokio::time::timeout(interval + 2 * BOUND, stream.message()) => m,
            _ = tokio::time::sleep_until(until) => return Ok(worst),
        };
        match next {
            Err(_) => return Err(format!("no update in {:?}", interval + 2 * BOUND)),
            Ok(Err(s)) => return Err(late(s)),
            Ok(Ok(None)) => return Ok(worst),
            Ok(Ok(Some(m))) => {
                worst = worst.max(last.elapsed().saturating_sub(interval));
                last = Instant::now();
                if m.r#final {
                    return Ok(worst);
                }
            }
        }
    }
}

/// Runs the phase `at` into the churn and checks it, recording failures in
/// `ctx`.
pub async fn phase(ctx: Arc<Ctx>, at: Duration) {
    tokio::time::sleep(at).await;
    let socket = ctx.socket.clone();
    let gid = match std::fs::metadata(&socket) {
        Ok(m) => m.gid(),
        Err(e) => return ctx.fail("hogs: cannot stat the socket", e.to_string()),
    };
    // The misbehaving user's sockets are this process's descriptors too.
    let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let _ = rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: nofile.maximum,
            maximum: nofile.maximum,
        },
    );
    let from = ctx.latencies.lock().unwrap().len();
    let stop = Arc::new(AtomicBool::new(false));
    let hog = Arc::new(Hog::default());
    let hogging = {
        let (socket, hog, stop) = (socket.clone(), hog.clone(), stop.clone());
        as_user(HOG_UID, gid, move || {
            Box::pin(async move {
                for i in 0..MAX_CONNECTIONS {
                    tokio::spawn(hold(socket.clone(), i % 2 == 1, hog.clone(), stop.clone()));
                }
                // Then the runtime, dropped, closes every connection.
                while !stop.load(Relaxed) {
                    tokio::time::sleep(ms(50)).await;
                }
            })
        })
    };
    // Once it holds what it can, the others call.
    let started = Instant::now();
    while hog.opened.load(Relaxed) < MAX_CONNECTIONS as u64 / 4 && started.elapsed() < BOUND {
        tokio::time::sleep(ms(50)).await;
    }
    let calling = {
        let (socket, stop) = (socket.clone(), stop.clone());
        as_user(NEIGHBOUR_UID, gid, move || {
            Box::pin(neighbour(socket, stop))
        })
    };
    let until = tokio::time::Instant::now() + PHASE;
    let client = &mut ctx.client();
    let running: Vec<u64> = ctx
        .call(
            "ListSessions",
            "hogs",
            client.list_sessions(api::ListSessionsRequest::default()),
        )
        .await
        .map(|l| l.sessions)
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s.state == SessionState::Running as i32)
        .map(|s| s.id)
        .take(WATCHES)
        .collect();
    let watches: Vec<_> = running
        .iter()
        .map(|&id| tokio::spawn(watch(ctx.clone(), id, until)))
        .collect();
    tokio::time::sleep_until(until).await;
    stop.store(true, Relaxed);
    let mut worst_watch = Duration::ZERO;
    for w in watches {
        match w.await {
            Ok(Ok(late)) => worst_watch = worst_watch.max(late),
            Ok(Err(e)) => ctx.fail("hogs: a Watch stream of root failed during the phase", e),
            Err(e) => ctx.fail("hogs: soak task failed", e.to_string()),
        }
    }
    let joined = tokio::task::spawn_blocking(move || (hogging.join(), calling.join())).await;
    let Ok((Ok(hogged), Ok(called))) = joined else {
        return ctx.fail("hogs: a thread panicked", String::new());
    };
    if let Err(e) = hogged {
        return ctx.fail("hogs: the misbehaving user", e);
    }
    let calls = match called {
        Ok(calls) => calls,
        Err(e) => return ctx.fail("hogs: the other user", e),
    };
    let root_calls: Vec<u32> = ctx.latencies.lock().unwrap()[from..].to_vec();
    let root_worst = root_calls.iter().copied().max().unwrap_or(0);
    let answered: Vec<Duration> = calls
        .iter()
        .filter_map(|c| c.as_ref().ok().copied())
        .collect();
    let worst = answered.iter().max().copied().unwrap_or_default();
    println!(
        "hogs:       uid {HOG_UID} reopened its connections for {PHASE:?} ({} opened, {} closed by the daemon, {} failed); uid {NEIGHBOUR_UID}: {} of {} calls answered, max {} ms; root: {} calls, max {root_worst} ms, {} new Watch streams, max lateness {} ms",
        hog.opened.load(Relaxed),
        hog.closed.load(Relaxed),
        hog.failed.load(Relaxed),
        answered.len(),
        calls.len(),
        worst.as_millis(),
        root_calls.len(),
        running.len(),
        worst_watch.as_millis(),
    );
    for e in calls.iter().filter_map(|c| c.as_ref().err()) {
        ctx.fail(
            "hogs: a call of another user failed while one held the socket",
            e.clone(),
        );
    }
    if answered.is_empty() || worst > BOUND {
        ctx.fail(
            "hogs: calls of another user over the bound while one held the socket",
            format!(
                "{} answered, max {worst:?} (bound {BOUND:?})",
                answered.len()
            ),
        );
    }
    if u64::from(root_worst) > BOUND.as_millis() as u64 || worst_watch > BOUND {
        ctx.fail(
            "hogs: root's calls or Watch updates over the bound while a user held the socket",
            format!("calls max {root_worst} ms, updates late by {worst_watch:?} (bound {BOUND:?})"),
        );
    }
    if hog.closed.load(Relaxed) == 0 {
        ctx.fail(
            "hogs: the misbehaving user was never refused",
            String::new(),
        );
    }
}
