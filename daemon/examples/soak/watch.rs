//! The soak's Watch streams: one task per watcher (full, dropping,
//! resuming or slow), each rebuilding the profile from the updates and
//! checking every message adds up, that seqs rise, that the first update
//! and (but for slow readers) each next one come within their bounds, and
//! that the stream ends with a final update of an ended session.
use crate::ctx::{bump, connect, ms, state_name, Ctx, Rng, RPC_TIMEOUT, SLOW_PAUSE, STALL};
use profd_common::api::{self, SessionState};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// Reads until the final update.
    Full,
    /// Drops its stream after a while.
    Dropper,
    /// Drops its stream, then resumes with `resume_after_seq`, once or more.
    Resumer,
    /// Sleeps between reads while the churn runs.
    Slow,
}

pub struct WatchSpec {
    pub session: u64,
    pub kind: Kind,
    pub interval_ms: u32,
    pub window_s: u32,
    /// On a connection of its own (closed with the watcher).
    pub dedicated: bool,
    pub rng: Rng,
}

/// A watcher's copy of the profile, rebuilt from the updates.
#[derive(Default)]
pub struct Mirror {
    /// id → (exclusive, window_exclusive)
    pub fns: HashMap<u64, (u64, u64)>,
    /// seq of the last update applied.
    pub last_seq: Option<u64>,
    /// Kinds of failed checks this watcher has reported already.
    pub reported: HashSet<&'static str>,
}

/// Where a message sits in its stream.
pub struct Position {
    pub first: bool,
    pub resume_from: Option<u64>,
    pub prev_seq: Option<u64>,
}

impl Mirror {
    /// A failed check, reported once per watcher and kind; repeats are only
    /// counted.
    pub fn fail(&mut self, ctx: &Ctx, kind: &'static str, detail: String) {
        if self.reported.insert(kind) {
            ctx.fail(kind, detail);
        } else {
            bump(&ctx.stats.repeated_failures);
        }
    }

    pub fn apply(
        &mut self,
        ctx: &Ctx,
        label: &str,
        window_s: u32,
        at: &Position,
        m: &api::WatchResponse,
    ) {
        let Some(s) = &m.session else {
            self.fail(ctx, "watch update without a session", label.to_string());
            return;
        };
        let seq = m.seq;
        if at.first {
            match at.resume_from {
                None if !m.snapshot || m.resumed => self.fail(
                    ctx,
                    "first update of a stream is not a snapshot",
                    format!(
                        "{label}: seq {seq} snapshot {} resumed {}",
                        m.snapshot, m.resumed
                    ),
                ),
                None => {}
                Some(after) if m.resumed => {
                    bump(&ctx.stats.resumes_honored);
                    if m.snapshot {
                        self.fail(ctx, "resumed update is also a snapshot", label.to_string());
                    }
                    if seq < after {
                        self.fail(
                            ctx,
                            "resumed update's seq is below resume_after_seq",
                            format!("{label}: resume_after_seq {after}, got seq {seq}"),
                        );
                    }
                }
                // Every view raises a session's version: a daemon now past
                // `after` could have resumed; only a version from another
                // daemon run (at or past the current one) calls for a snapshot.
                Some(after) if m.snapshot && after < seq => {
                    bump(&ctx.stats.resumes_snapshot);
                    self.fail(
                        ctx,
                        "resume answered with a snapshot though the daemon could resume",
                        format!("{label}: resume_after_seq {after}, got seq {seq}"),
                    );
                }
                Some(after) if m.snapshot => {
                    bump(&ctx.stats.resumes_snapshot);
                    ctx.note(
                        "resume from another daemon run answered with a snapshot",
                        format!("{label}: resume_after_seq {after}, got seq {seq}"),
                    );
                }
                Some(after) => self.fail(
                    ctx,
                    "answer to a resume is neither resumed nor a snapshot",
                    format!("{label}: resume_after_seq {after}, got seq {seq}"),
                ),
            }
        } else {
            if m.snapshot || m.resumed {
                self.fail(
                    ctx,
                    "snapshot or resumed set after the first update",
                    format!("{label}: seq {seq}"),
                );
            }
            if at.prev_seq.is_some_and(|p| seq <= p) {
                self.fail(
                    ctx,
                    "seq did not increase within a stream",
                    format!("{label}: {:?} then {seq}", at.prev_seq),
                );
            }
        }
        let rows = m.functions.len() as u64;
        if at.first && m.snapshot {
            bump(&ctx.stats.snapshots);
            ctx.stats.snapshot_rows.fetch_add(rows, Relaxed);
        }
        if at.first && m.resumed {
            ctx.stats.resumed_rows.fetch_add(rows, Relaxed);
        }
        if m.snapshot {
            self.fns.clear();
        }
        for f in &m.functions {
            if !self.fns.contains_key(&f.id) && f.name.is_empty() {
                self.fail(
                    ctx,
                    "function first seen without a name",
                    format!("{label}: seq {seq}, function id {}", f.id),
                );
            }
            self.fns.insert(f.id, (f.exclusive, f.window_exclusive));
        }
        let t = s.totals.unwrap_or_default();
        let excl: u64 = self.fns.values().map(|v| v.0).sum();
        if excl != t.attributed {
            let kind = if at.resume_from.is_some() {
                "watch (after a resume): sum of exclusive != attributed"
            } else {
                "watch: sum of exclusive != attributed"
            };
            self.fail(
                ctx,
                kind,
                format!(
                    "{label}: seq {seq}: exclusive sum {excl}, attributed {}",
                    t.attributed
                ),
            );
        }
        if window_s > 0 {
            let w: u64 = self.fns.values().map(|v| v.1).sum();
            if w != m.window_attributed {
                let kind = if at.resume_from.is_some() {
                    "watch (after a resume): sum of window exclusive != window_attributed"
                } else {
                    "watch: sum of window exclusive != window_attributed"
                };
                self.fail(
                    ctx,
                    kind,
                    format!(
                        "{label}: seq {seq}: window exclusive sum {w}, window_attributed {}",
                        m.window_attributed
                    ),
                );
            }
        }
        let running = s.state == SessionState::Running as i32;
        if m.r#final == running {
            self.fail(
                ctx,
                "final flag disagrees with the state",
                format!(
                    "{label}: seq {seq}: final {} state {}",
                    m.r#final,
                    state_name(s.state)
                ),
            );
        }
        self.last_seq = Some(seq);
    }
}

pub enum StreamEnd {
    Dropped,
    ResumeRefused,
}

pub async fn watcher(ctx: Arc<Ctx>, mut spec: WatchSpec) {
    let label = format!(
        "session {} {:?} watcher ({} ms, window {} s{})",
        spec.session,
        spec.kind,
        spec.interval_ms,
        spec.window_s,
        if spec.dedicated {
            ", own connection"
        } else {
            ""
        }
    );
    let mut client = if spec.dedicated {
        match connect(&ctx.socket).await {
            Ok(c) => c,
            Err(e) => {
                ctx.fail("connect error", format!("{label}: {e}"));
                return;
            }
        }
    } else {
        ctx.client()
    };
    let mut draining = ctx.draining.subscribe();
    let mut mirror = Mirror::default();
    let mut resumes_left = if spec.kind == Kind::Resumer {
        spec.rng.range(1, 3)
    } else {
        0
    };
    let mut resume_from: Option<u64> = None;
    let interval = ms(u64::from(spec.interval_ms));
    loop {
        bump(&ctx.stats.streams_opened);
        if resume_from.is_some() {
            bump(&ctx.stats.resumes_asked);
        }
        let req = api::WatchRequest {
            session_id: spec.session,
            interval_ms: spec.interval_ms,
            window_s: spec.window_s,
            resume_after_seq: resume_from.unwrap_or(0),
        };
        let opened = Instant::now();
        let mut stream = match tokio::time::timeout(RPC_TIMEOUT, client.watch(req)).await {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(s)) if resume_from.is_some() => {
                bump(&ctx.stats.resumes_refused);
                ctx.note(
                    &format!("resume refused: {:?}", s.code()),
                    format!("{label}: resume_after_seq {resume_from:?}: {}", s.message()),
                );
                resume_from = None;
                mirror = Mirror::default();
                continue;
            }
            Ok(Err(s)) => {
                ctx.fail(
                    &format!("Watch error {:?}", s.code()),
                    format!("{label}: {}", s.message()),
                );
                return;
            }
            Err(_) => {
                ctx.fail("Watch timeout", label.clone());
                return;
            }
        };
        let drop_after = match spec.kind {
            Kind::Dropper => Some(ms(spec.rng.range(300, 8000))),
            Kind::Resumer if resumes_left > 0 => Some(ms(spec.rng.range(300, 5000))),
            _ => None,
        };
        let drop_at = drop_after.map(|d| tokio::time::Instant::now() + d);
        let mut at = Position {
            first: true,
            resume_from,
            prev_seq: None,
        };
        let mut last_msg = Instant::now();
        let outcome = loop {
            if spec.kind == Kind::Slow && !at.first && !*draining.borrow() {
                tokio::select! {
                    _ = tokio::time::sleep(SLOW_PAUSE) => {}
                    _ = draining.wait_for(|d| *d) => {}
                }
            }
            let read = tokio::time::timeout(interval + STALL, stream.message());
            let next = match drop_at {
                Some(when) => tokio::select! {
                    r = read => Some(r),
                    _ = tokio::time::sleep_until(when) => None,
                },
                None => Some(read.await),
            };
            let Some(next) = next else {
                break StreamEnd::Dropped;
            };
            let m = match next {
                Err(_) => {
                    ctx.fail(
                        "watch stalled",
                        format!("{label}: no update in {:?}", interval + STALL),
                    );
                    return;
                }
                Ok(Err(s)) if at.first && resume_from.is_some() => {
                    bump(&ctx.stats.resumes_refused);
                    ctx.note(
                        &format!("resume refused: {:?}", s.code()),
                        format!("{label}: resume_after_seq {resume_from:?}: {}", s.message()),
                    );
                    break StreamEnd::ResumeRefused;
                }
                Ok(Err(s)) => {
                    ctx.fail(
                        &format!("Watch stream error {:?}", s.code()),
                        format!("{label}: {}", s.message()),
                    );
                    return;
                }
                Ok(Ok(None)) => {
                    ctx.fail("watch stream ended without a final update", label.clone());
                    return;
                }
                Ok(Ok(Some(m))) => m,
            };
            bump(&ctx.stats.messages);
            ctx.stats.rows.fetch_add(m.functions.len() as u64, Relaxed);
            if at.first {
                ctx.answered("Watch", &format!("{label}: first update"), opened.elapsed());
            } else if spec.kind != Kind::Slow {
                let gap = last_msg.elapsed();
                ctx.update_late(gap.saturating_sub(interval), || {
                    format!(
                        "{label}: seq {}{} {} ms after seq {}",
                        m.seq,
                        if m.r#final { " (final)" } else { "" },
                        gap.as_millis(),
                        at.prev_seq.unwrap_or_default()
                    )
                });
            }
            last_msg = Instant::now();
            mirror.apply(&ctx, &label, spec.window_s, &at, &m);
            at.first = false;
            at.prev_seq = Some(m.seq);
            if m.r#final {
                match tokio::time::timeout(STALL, stream.message()).await {
                    Ok(Ok(None)) => {}
                    Ok(Ok(Some(extra))) => ctx.fail(
                        "an update after the final one",
                        format!("{label}: seq {} after final seq {}", extra.seq, m.seq),
                    ),
                    Ok(Err(s)) => ctx.fail(
                        "an error after the final update",
                        format!("{label}: {:?}: {}", s.code(), s.message()),
                    ),
                    Err(_) => ctx.fail("stream not closed after the final update", label.clone()),
                }
                bump(&ctx.stats.streams_final);
                if let Some(s) = m.session {
                    ctx.finals
                        .lock()
                        .unwrap()
                        .entry(spec.session)
                        .or_default()
                        .push(s);
                }
                return;
            }
        };
        drop(stream);
        match outcome {
            StreamEnd::Dropped if resumes_left > 0 => {
                resumes_left -= 1;
                tokio::time::sleep(ms(spec.rng.range(0, 1500))).await;
                // seq 0 is the old daemon's snapshot: nothing to resume from.
                resume_from = mirror.last_seq.filter(|&s| s > 0);
                if spec.dedicated {
                    // Resume over a new connection, as a client that lost its own.
                    match connect(&ctx.socket).await {
                        Ok(c) => client = c,
                        Err(e) => {
                            ctx.fail("connect error", format!("{label}: {e}"));
                            return;
                        }
                    }
                }
                if resume_from.is_none() {
                    mirror = Mirror::default();
                }
            }
            StreamEnd::Dropped => {
                bump(&ctx.stats.streams_dropped);
                return;
            }
            StreamEnd::ResumeRefused => {
                resume_from = None;
                mirror = Mirror::default();
            }
        }
    }
}
