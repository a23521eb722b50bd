//! The soak's churn: the workloads and sessions it keeps, and each random
//! step (stop, kill, drop a watcher, attach again, check a profile), with
//! the states a session may end in given what was done to it.
use crate::ctx::{bump, check_profile, ms, Ctx, Reaped, Rng};
use crate::procs::Spin;
use crate::watch::{watcher, Kind, WatchSpec};
use profd_common::api::{self, SessionState};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

pub struct Workload {
    pub proc: Option<Reaped>,
    pub pid: u32,
    pub killed_at: Option<Instant>,
}

pub struct Sess {
    pub id: u64,
    pub workload: usize,
    pub duration: Option<Duration>,
    pub attached_at: Instant,
    pub stopped_at: Option<Instant>,
    /// The state the Stop answer gave.
    pub stop_state: Option<i32>,
    /// Ended, as of the last ListSessions.
    pub ended: bool,
    pub watchers: Vec<JoinHandle<()>>,
}

pub struct Controller {
    pub ctx: Arc<Ctx>,
    pub rng: Rng,
    pub spin: Spin,
    pub workloads: Vec<Workload>,
    pub sessions: BTreeMap<u64, Sess>,
    pub freqs: Vec<u32>,
    pub target_sessions: usize,
    pub target_watchers: usize,
    /// Finished watcher tasks whose outcome is not yet collected.
    pub finished: Vec<JoinHandle<()>>,
    pub max_running: usize,
}

impl Controller {
    pub fn live_workloads(&self) -> Vec<usize> {
        (0..self.workloads.len())
            .filter(|&i| self.workloads[i].killed_at.is_none())
            .collect()
    }

    /// Sessions that are running and that nothing we did is ending.
    pub fn running(&self) -> Vec<u64> {
        self.sessions
            .values()
            .filter(|s| {
                !s.ended && s.stopped_at.is_none() && self.workloads[s.workload].killed_at.is_none()
            })
            .map(|s| s.id)
            .collect()
    }

    pub fn sessions_on(&self, w: usize) -> usize {
        self.running()
            .iter()
            .filter(|id| self.sessions[id].workload == w)
            .count()
    }

    pub fn spawn_workload(&mut self) -> Option<usize> {
        match self.spin.start() {
            Ok(p) => {
                bump(&self.ctx.stats.workloads_started);
                self.workloads.push(Workload {
                    pid: p.pid(),
                    proc: Some(p),
                    killed_at: None,
                });
                Some(self.workloads.len() - 1)
            }
            Err(e) => {
                self.ctx.fail("cannot start a workload", e.to_string());
                None
            }
        }
    }

    pub fn kill_workload(&mut self, w: usize) {
        let wl = &mut self.workloads[w];
        if let Some(mut p) = wl.proc.take() {
            p.kill();
        }
        wl.killed_at = Some(Instant::now());
        bump(&self.ctx.stats.workloads_killed);
    }

    pub async fn attach(&mut self, w: usize) -> Option<u64> {
        let pid = self.workloads[w].pid;
        let rng = &mut self.rng;
        let frequency_hz = self.freqs[rng.index(self.freqs.len()).unwrap_or(0)];
        let dwarf = rng.chance(30);
        let req = api::AttachRequest {
            held: false,
            pid,
            frequency_hz: Some(frequency_hz),
            duration_ms: if rng.chance(10) {
                rng.range(2000, 8000)
            } else {
                0
            },
            mode: api::Mode::Cpu as i32,
            event: api::Event::CpuClock as i32,
            unwind: if dwarf {
                api::Unwind::Dwarf
            } else {
                api::Unwind::Fp
            } as i32,
            stack_bytes: if dwarf {
                [4096, 8192, 16384][rng.below(3) as usize]
            } else {
                0
            },
            children: rng.chance(30),
            timeline: rng.chance(20),
        };
        let about = format!("pid {pid} at {frequency_hz} Hz");
        let duration = (req.duration_ms > 0).then(|| ms(req.duration_ms));
        let client = &mut self.ctx.client();
        let resp = self.ctx.call("Attach", &about, client.attach(req)).await?;
        let Some(s) = resp.session else {
            self.ctx.fail("Attach answer without a session", about);
            return None;
        };
        bump(&self.ctx.stats.attached);
        if self.sessions_on(w) > 0 {
            bump(&self.ctx.stats.attached_shared);
        }
        self.sessions.insert(
            s.id,
            Sess {
                id: s.id,
                workload: w,
                duration,
                attached_at: Instant::now(),
                stopped_at: None,
                stop_state: None,
                ended: false,
                watchers: Vec::new(),
            },
        );
        for _ in 0..self.target_watchers {
            self.spawn_watcher(s.id);
        }
        Some(s.id)
    }

    pub fn spawn_watcher(&mut self, session: u64) {
        let rng = &mut self.rng;
        // A few slow readers: the first watcher of 30 % of the sessions.
        let slow = self.sessions[&session].watchers.is_empty() && rng.chance(30);
        let kind = if slow {
            Kind::Slow
        } else {
            match rng.below(100) {
                0..50 => Kind::Full,
                50..75 => Kind::Dropper,
                _ => Kind::Resumer,
            }
        };
        let spec = WatchSpec {
            session,
            kind,
            interval_ms: rng.range(100, 1000) as u32,
            window_s: if rng.chance(30) {
                [2, 5, 10, 30][rng.below(4) as usize]
            } else {
                0
            },
            dedicated: rng.chance(20),
            rng: rng.fork(),
        };
        let handle = tokio::spawn(watcher(self.ctx.clone(), spec));
        self.sessions
            .get_mut(&session)
            .expect("known session")
            .watchers
            .push(handle);
    }

    /// Collect finished watcher tasks (a panic is a failure of this program).
    pub async fn reap_watchers(&mut self) {
        for s in self.sessions.values_mut() {
            let (done, open): (Vec<_>, Vec<_>) =
                s.watchers.drain(..).partition(|h| h.is_finished());
            s.watchers = open;
            self.finished.extend(done);
        }
        for h in self.finished.drain(..) {
            if let Err(e) = h.await {
                if e.is_panic() {
                    self.ctx.fail("soak watcher task panicked", format!("{e}"));
                }
            }
        }
    }

    pub async fn stop(&mut self, id: u64) {
        let client = &mut self.ctx.client();
        let about = format!("session {id}");
        let now = Instant::now();
        self.sessions.get_mut(&id).expect("known").stopped_at = Some(now);
        let resp = self
            .ctx
            .call(
                "Stop",
                &about,
                client.stop(api::StopRequest { session_id: id }),
            )
            .await;
        bump(&self.ctx.stats.stopped);
        if let Some(s) = resp.and_then(|r| r.session) {
            self.sessions.get_mut(&id).expect("known").stop_state = Some(s.state);
            if s.state == SessionState::Running as i32 {
                self.ctx.fail("Stop answered a running session", about);
            }
        }
    }

    /// Refresh which sessions have ended; check each listed session adds up.
    pub async fn refresh(&mut self) -> Option<Vec<api::Session>> {
        let client = &mut self.ctx.client();
        let list = self
            .ctx
            .call(
                "ListSessions",
                "refresh",
                client.list_sessions(api::ListSessionsRequest { all: false }),
            )
            .await?;
        let mut running = 0;
        for s in &list.sessions {
            if s.state == SessionState::Running as i32 {
                running += 1;
            }
            if let Some(mine) = self.sessions.get_mut(&s.id) {
                mine.ended = s.state != SessionState::Running as i32;
            }
        }
        self.max_running = self.max_running.max(running);
        Some(list.sessions)
    }

    pub async fn check_random_profile(&mut self, folded: bool) {
        let ids: Vec<u64> = self.sessions.keys().copied().collect();
        let Some(i) = self.rng.index(ids.len()) else {
            return;
        };
        let id = ids[i];
        let client = &mut self.ctx.client();
        let format = if folded {
            api::ExportFormat::Folded
        } else {
            api::ExportFormat::Unspecified
        };
        let req = api::GetProfileRequest {
            session_id: id,
            format: format as i32,
            query: None,
        };
        let about = format!("session {id}");
        let Some(p) = self
            .ctx
            .call("GetProfile", &about, client.get_profile(req))
            .await
        else {
            return;
        };
        check_profile(&self.ctx, "GetProfile", &p);
        if folded {
            let text = String::from_utf8_lossy(&p.data);
            let mut sum = 0u64;
            for line in text.lines().filter(|l| !l.is_empty()) {
                match line
                    .rsplit_once(' ')
                    .and_then(|(_, n)| n.parse::<u64>().ok())
                {
                    Some(n) => sum += n,
                    None => self.ctx.fail(
                        "folded export line without a count",
                        format!("{about}: {line:?}"),
                    ),
                }
            }
            let attributed = p
                .session
                .and_then(|s| s.totals)
                .unwrap_or_default()
                .attributed;
            if sum != attributed {
                self.ctx.fail(
                    "folded export: sum of counts != attributed",
                    format!("{about}: folded {sum}, attributed {attributed}"),
                );
            }
            bump(&self.ctx.stats.folded_checks);
        }
    }

    /// Keep `target_sessions` running, each with `target_watchers` watchers.
    pub async fn top_up(&mut self) {
        let mut tries = 0;
        while self.running().len() < self.target_sessions && tries < self.target_sessions * 2 {
            tries += 1;
            let live = self.live_workloads();
            let w = if !live.is_empty() && self.rng.chance(35) {
                Some(live[self.rng.index(live.len()).unwrap_or(0)])
            } else {
                self.spawn_workload()
            };
            if let Some(w) = w {
                self.attach(w).await;
            }
        }
        for id in self.running() {
            let n = self.sessions[&id].watchers.len();
            for _ in n..self.target_watchers {
                self.spawn_watcher(id);
            }
        }
    }

    pub async fn tick(&mut self, n: u64) {
        match self.rng.below(100) {
            0..25 => {
                let running = self.running();
                if let Some(i) = self.rng.index(running.len()) {
                    self.stop(running[i]).await;
                }
            }
            25..37 => {
                // A workload with sessions, so they end `exited`.
                let busy: Vec<usize> = self
                    .live_workloads()
                    .into_iter()
                    .filter(|&w| self.sessions_on(w) > 0)
                    .collect();
                if let Some(i) = self.rng.index(busy.len()) {
                    self.kill_workload(busy[i]);
                }
            }
            37..57 => {
                let open: Vec<(u64, usize)> = self
                    .sessions
                    .values()
                    .flat_map(|s| (0..s.watchers.len()).map(move |i| (s.id, i)))
                    .collect();
                if let Some(i) = self.rng.index(open.len()) {
                    let (id, j) = open[i];
                    let h = self
                        .sessions
                        .get_mut(&id)
                        .expect("known")
                        .watchers
                        .remove(j);
                    if !h.is_finished() {
                        h.abort();
                        bump(&self.ctx.stats.streams_aborted);
                    }
                    self.finished.push(h);
                }
            }
            57..67 => {
                // Another session on a process that already has one.
                let busy: Vec<usize> = self
                    .live_workloads()
                    .into_iter()
                    .filter(|&w| self.sessions_on(w) > 0)
                    .collect();
                if let Some(i) = self.rng.index(busy.len()) {
                    self.attach(busy[i]).await;
                }
            }
            67..75 => {
                let idle: Vec<usize> = self
                    .live_workloads()
                    .into_iter()
                    .filter(|&w| self.sessions_on(w) == 0)
                    .collect();
                if idle.len() > 4 {
                    if let Some(i) = self.rng.index(idle.len()) {
                        self.kill_workload(idle[i]);
                    }
                }
            }
            _ => {}
        }
        match n % 4 {
            0 => {
                self.refresh().await;
            }
            1 | 3 => self.check_random_profile(n % 40 == 1).await,
            _ => {
                let client = &mut self.ctx.client();
                self.ctx
                    .call("Info", "during churn", client.info(api::InfoRequest {}))
                    .await;
            }
        }
        self.reap_watchers().await;
        self.top_up().await;
    }

    /// States a session may have ended in, given what we did to it.
    pub fn acceptable(&self, s: &Sess) -> Vec<SessionState> {
        let killed = self.workloads[s.workload].killed_at;
        let deadline = s.duration.map(|d| s.attached_at + d);
        let near = |t: Instant| deadline.is_some_and(|d| t + Duration::from_secs(1) >= d);
        let first = match (s.stopped_at, killed) {
            (Some(st), Some(k)) if k < st => Some((SessionState::Exited, k)),
            (Some(st), _) => Some((SessionState::Stopped, st)),
            (None, Some(k)) => Some((SessionState::Exited, k)),
            (None, None) => None,
        };
        match first {
            Some((state, at)) if near(at) => vec![state, SessionState::DurationElapsed],
            Some((state, _)) => vec![state],
            None if deadline.is_some() => vec![SessionState::DurationElapsed],
            None => Vec::new(),
        }
    }
}
