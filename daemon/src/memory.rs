//! The daemon's memory ceiling (`memory_limit`): what it uses now (its
//! resident set, and its cgroup's memory when that cgroup has a limit),
//! the caches that can give memory back (a registry: name, bytes, shed,
//! budget), and the governor that sheds load in a stated order as the
//! ceiling nears and restores it when the pressure goes. It does not own
//! the caches nor the continuous profiler: they read its level.
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The ceiling when none is set: room for continuous profiling and a few
/// on-demand sessions on a busy host (see docs/PERFORMANCE.md).
pub const DEFAULT_LIMIT: u64 = 128 << 20;
/// The lowest ceiling accepted: the daemon's code, its rings and its
/// runtime alone take about this much.
pub const MIN_LIMIT: u64 = 32 << 20;
/// How often the governor measures.
pub const TICK: Duration = Duration::from_millis(500);

/// How much a cache lets go of when it is next tidied: what its own rules
/// drop, or all it can (the governor asked the caches to shed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tidy {
    AsUsual,
    Shed,
}

/// What the governor does, in the order it does it. Each level keeps the
/// steps of those below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Level {
    /// Under [`Level::ShedCaches`]'s share of the ceiling: nothing shed.
    Normal = 0,
    /// 1. Caches give back what they hold (names, parsed files, spare
    ///    buffers), and the heap's free memory goes back to the system.
    ShedCaches = 1,
    /// 2. Continuous windows keep at most [`CAPPED_STACKS`] unique stacks:
    ///    the samples of further new stacks are counted under
    ///    `[stack limit reached]` (and in `overflowed`), not dropped.
    CapStacks = 2,
    /// 3. Continuous profiling samples at half its frequency (again at each
    ///    window while the pressure stays, down to a quarter of its setting
    ///    and at least [`MIN_FREQUENCY_HZ`]).
    LowerFrequency = 3,
    /// 4. Continuous profiling takes frame-pointer call chains instead of
    ///    stack copies: no unwind data is read for the processes it sees,
    ///    and what it held is let go of. Stacks of code built without frame
    ///    pointers then miss callers (their innermost frame is still right).
    FramePointers = 4,
}

/// Levels, highest first.
const LEVELS: [Level; 5] = [
    Level::FramePointers,
    Level::LowerFrequency,
    Level::CapStacks,
    Level::ShedCaches,
    Level::Normal,
];

/// Unique stacks a continuous window keeps from [`Level::CapStacks`] on.
pub const CAPPED_STACKS: usize = 20_000;
/// The lowest frequency [`Level::LowerFrequency`] goes down to.
pub const MIN_FREQUENCY_HZ: u32 = 1;

impl Level {
    fn from_u8(n: u8) -> Level {
        match n {
            0 => Level::Normal,
            1 => Level::ShedCaches,
            2 => Level::CapStacks,
            3 => Level::LowerFrequency,
            _ => Level::FramePointers,
        }
    }

    /// The name `info` and the metrics give it.
    pub fn name(self) -> &'static str {
        match self {
            Level::Normal => "normal",
            Level::ShedCaches => "shed-caches",
            Level::CapStacks => "cap-stacks",
            Level::LowerFrequency => "lower-frequency",
            Level::FramePointers => "frame-pointers",
        }
    }

    /// Per mille of the ceiling at which the level is entered.
    fn enter_at(self) -> u64 {
        match self {
            Level::Normal => 0,
            Level::ShedCaches => 700,
            Level::CapStacks => 800,
            Level::LowerFrequency => 900,
            Level::FramePointers => 950,
        }
    }
}

/// Per mille of the ceiling below a level's entry at which it is left: the
/// level does not flap around its threshold.
const HYSTERESIS: u64 = 100;

/// The level for `used` bytes of `ceiling`, from level `now`: up at once
/// to the highest level entered, down one level at a time once under the
/// entry of the level above it less the hysteresis.
pub fn next_level(now: Level, used: u64, ceiling: u64) -> Level {
    if ceiling == 0 {
        return Level::Normal;
    }
    let permille = used.saturating_mul(1000) / ceiling;
    let entered = LEVELS
        .into_iter()
        .find(|l| permille >= l.enter_at())
        .unwrap_or(Level::Normal);
    if entered >= now {
        return entered;
    }
    if permille + HYSTERESIS < now.enter_at() {
        Level::from_u8(now as u8 - 1)
    } else {
        now
    }
}

/// A cache that gives memory back on demand.
struct Cache {
    name: &'static str,
    /// Its share of the ceiling, in per cent: its budget.
    share: u64,
    bytes: Box<dyn Fn() -> u64 + Send + Sync>,
    shed: Box<dyn Fn() -> u64 + Send + Sync>,
    set_budget: Box<dyn Fn(u64) + Send + Sync>,
}

/// What the governor did since the daemon started.
#[derive(Debug, Default)]
pub struct Counts {
    /// Times each level was entered (index: the level).
    pub entered: [AtomicU64; 5],
    /// Times the caches were told to shed, and the bytes they said they
    /// gave back.
    pub sheds: AtomicU64,
    pub shed_bytes: AtomicU64,
    /// Continuous windows cut with their stacks capped, and at a lowered
    /// frequency.
    pub windows_capped: AtomicU64,
    pub windows_lowered: AtomicU64,
}

/// A reading of the daemon's memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Resident set (VmRSS), and its highest (VmHWM).
    pub resident: u64,
    pub peak: u64,
    /// The cgroup's memory other than its page cache, and its limit, when
    /// it has one.
    pub cgroup: Option<(u64, u64)>,
}

impl Usage {
    /// The bytes held against the ceiling: the resident set, or the
    /// cgroup's memory less its page cache (which the kernel reclaims
    /// before it kills) when that is more.
    pub fn used(&self) -> u64 {
        self.resident.max(self.cgroup.map_or(0, |(used, _)| used))
    }
}

/// The memory ceiling, the caches, and the level: shared by the parts that
/// shed and the ones that report.
#[derive(Default)]
pub struct Governor {
    /// `memory_limit`; 0 before the daemon sets it (nothing is shed).
    limit: AtomicU64,
    level: AtomicU8,
    usage: Mutex<Usage>,
    caches: Mutex<Vec<Arc<Cache>>>,
    /// Called every [`RELEASE_EVERY`] readings: parts that map files drop
    /// the pages they touched (see [`Governor::every_few_readings`]).
    hooks: Mutex<Vec<Box<dyn Fn() + Send + Sync>>>,
    /// Readings since the caches were last told to shed, and the readings
    /// the next shed waits for while the pressure stays.
    since_shed: AtomicU64,
    shed_every: AtomicU64,
    /// Readings taken, and the last reading at which each level was in
    /// force (see [`Governor::held`]).
    readings: AtomicU64,
    last_at: [AtomicU64; 5],
    pub counts: Counts,
}

/// Readings a level is held for after the pressure for it went (30 s),
/// once for each time it was entered...
pub const HOLD: u64 = 60;
/// ...up to this many times (an hour).
pub const MAX_HOLDS: u64 = 120;

/// Readings between two calls of the hooks that release mapped pages
/// (2 s): each release costs the faults that bring back what is still
/// read.
const RELEASE_EVERY: u64 = 4;

/// Readings between two releases of the daemon's own code pages (60 s):
/// what runs faults back in, start-up code and that of rare requests stays
/// out of the resident set.
const RELEASE_CODE_EVERY: u64 = 120;

/// Readings between the first two sheds while the pressure stays (the
/// pressure's start sheds at once): 2 s. Each further shed under the same
/// pressure waits twice as long, up to [`MAX_SHED_EVERY`]: when shedding
/// did not end the pressure, what holds the memory is not the caches
/// (on-demand sessions, most often), and dropping caches again and again
/// only parses and faults their files in again.
const SHED_EVERY: u64 = 4;
/// The longest wait between two sheds under one pressure (64 s).
const MAX_SHED_EVERY: u64 = 128;

impl std::fmt::Debug for Governor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Governor")
            .field("limit", &self.limit())
            .field("level", &self.level())
            .finish()
    }
}

impl Governor {
    /// Set the ceiling (and every cache's budget from it).
    pub fn set_limit(&self, bytes: u64) {
        self.limit.store(bytes, Ordering::Relaxed);
        for c in self.caches() {
            (c.set_budget)(bytes / 100 * c.share);
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// The ceiling in force: `memory_limit`, or the cgroup's limit when
    /// lower.
    pub fn ceiling(&self) -> u64 {
        let limit = self.limit();
        match self.usage().cgroup {
            Some((_, max)) if max < limit || limit == 0 => max,
            _ => limit,
        }
    }

    pub fn level(&self) -> Level {
        Level::from_u8(self.level.load(Ordering::Relaxed))
    }

    /// The highest level in force lately: over the last [`HOLD`] readings
    /// times the times it was entered (at most [`MAX_HOLDS`]). What
    /// continuous profiling gives up stays given up that long after the
    /// pressure went, rather than flap with the daemon's memory: what it
    /// gave up is often what the pressure came from.
    pub fn held(&self) -> Level {
        let now = self.readings.load(Ordering::Relaxed);
        LEVELS
            .into_iter()
            .find(|&l| {
                let at = self.last_at[l as usize].load(Ordering::Relaxed);
                let times = self.counts.entered[l as usize].load(Ordering::Relaxed);
                at > 0 && now.saturating_sub(at) < HOLD * times.clamp(1, MAX_HOLDS)
            })
            .unwrap_or(self.level())
    }

    /// The last reading.
    pub fn usage(&self) -> Usage {
        *self.usage.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Add a cache: `bytes` says what it holds, `shed` drops what it can
    /// and says how much, `set_budget` gives it `share` per cent of the
    /// ceiling. One line per cache, where the daemon is put together.
    pub fn register(
        &self,
        name: &'static str,
        share: u64,
        bytes: impl Fn() -> u64 + Send + Sync + 'static,
        shed: impl Fn() -> u64 + Send + Sync + 'static,
        set_budget: impl Fn(u64) + Send + Sync + 'static,
    ) {
        let cache = Arc::new(Cache {
            name,
            share,
            bytes: Box::new(bytes),
            shed: Box::new(shed),
            set_budget: Box::new(set_budget),
        });
        (cache.set_budget)(self.limit() / 100 * share);
        self.caches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(cache);
    }

    fn caches(&self) -> Vec<Arc<Cache>> {
        self.caches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Each cache's name and the bytes it holds now.
    pub fn cache_bytes(&self) -> Vec<(&'static str, u64)> {
        self.caches()
            .iter()
            .map(|c| (c.name, (c.bytes)()))
            .collect()
    }

    /// What `info` shows (`dropped_behind`: the sampler's count of samples
    /// not sent to sessions too far behind).
    pub fn status(&self, dropped_behind: u64) -> profd_common::api::MemoryStatus {
        let u = self.usage();
        let level = self.level();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let c = &self.counts;
        profd_common::api::MemoryStatus {
            limit_bytes: self.limit(),
            ceiling_bytes: self.ceiling(),
            resident_bytes: u.resident,
            peak_bytes: u.peak,
            cgroup_bytes: u.cgroup.map_or(0, |c| c.0),
            cgroup_limit_bytes: u.cgroup.map_or(0, |c| c.1),
            level: level as u32,
            level_name: level.name().to_string(),
            entered: c.entered.iter().map(load).collect(),
            sheds: load(&c.sheds),
            shed_bytes: load(&c.shed_bytes),
            windows_capped: load(&c.windows_capped),
            windows_lowered: load(&c.windows_lowered),
            caches: self
                .cache_bytes()
                .into_iter()
                .map(|(name, bytes)| profd_common::api::MemoryCache {
                    name: name.to_string(),
                    bytes,
                })
                .collect(),
            samples_dropped_behind: dropped_behind,
        }
    }

    /// Tell every cache to shed, the largest first; the bytes they gave
    /// back.
    pub fn shed(&self) -> u64 {
        let mut caches: Vec<_> = self
            .caches()
            .into_iter()
            .map(|c| ((c.bytes)(), c))
            .collect();
        caches.sort_by_key(|(bytes, _)| std::cmp::Reverse(*bytes));
        let freed: u64 = caches.iter().map(|(_, c)| (c.shed)()).sum();
        crate::os::trim_heap();
        self.counts.sheds.fetch_add(1, Ordering::Relaxed);
        self.counts.shed_bytes.fetch_add(freed, Ordering::Relaxed);
        freed
    }

    /// Call `f` before every [`RELEASE_EVERY`]th reading: mapped pages a
    /// part no longer needs resident leave the resident set before it is
    /// read.
    pub fn every_few_readings(&self, f: impl Fn() + Send + Sync + 'static) {
        self.hooks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Box::new(f));
    }

    /// Take a reading and move to the level it calls for (shedding the
    /// caches as the pressure starts, and again at growing intervals while
    /// at [`Level::ShedCaches`] or above: see [`SHED_EVERY`]); the new
    /// level.
    pub fn step(&self, usage: Usage) -> Level {
        *self.usage.lock().unwrap_or_else(|e| e.into_inner()) = usage;
        let before = self.level();
        let level = next_level(before, usage.used(), self.ceiling());
        let n = self.readings.fetch_add(1, Ordering::Relaxed) + 1;
        self.last_at[level as usize].store(n, Ordering::Relaxed);
        if level != before {
            self.level.store(level as u8, Ordering::Relaxed);
            if level > before {
                for l in before as usize + 1..=level as usize {
                    self.counts.entered[l].fetch_add(1, Ordering::Relaxed);
                }
            }
            tracing::debug!(
                from = before.name(),
                to = level.name(),
                used_mib = usage.used() >> 20,
                ceiling_mib = self.ceiling() >> 20,
                "memory pressure"
            );
        }
        let since = self.since_shed.fetch_add(1, Ordering::Relaxed) + 1;
        let every = self.shed_every.load(Ordering::Relaxed).max(SHED_EVERY);
        if level < Level::ShedCaches {
            self.shed_every.store(SHED_EVERY, Ordering::Relaxed);
        } else if before < Level::ShedCaches || since >= every {
            let next = if before < Level::ShedCaches {
                SHED_EVERY
            } else {
                (every * 2).min(MAX_SHED_EVERY)
            };
            self.shed_every.store(next, Ordering::Relaxed);
            self.since_shed.store(0, Ordering::Relaxed);
            let freed = self.shed();
            tracing::debug!(freed, next_in = next, "memory: caches shed");
        }
        level
    }
}

/// Where the daemon's cgroup keeps its memory figures.
#[derive(Debug, Clone)]
enum CgroupFiles {
    /// cgroup2: memory.current, memory.max, memory.stat (`file`).
    V2(PathBuf),
    /// cgroup v1's memory controller: memory.usage_in_bytes,
    /// memory.limit_in_bytes, memory.stat (`total_cache`).
    V1(PathBuf),
}

/// The directory of this process's memory cgroup: the v1 memory
/// controller's where it is mounted, else cgroup2's when it has the memory
/// controller.
fn own_cgroup() -> Option<CgroupFiles> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    let mount_of = |v2: bool| {
        mounts.lines().find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let ok = match (f.get(2), v2) {
                (Some(&"cgroup2"), true) => true,
                (Some(&"cgroup"), false) => f
                    .get(3)
                    .is_some_and(|o| o.split(',').any(|o| o == "memory")),
                _ => false,
            };
            ok.then(|| PathBuf::from(f[1]))
        })
    };
    for line in groups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let path = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "memory") {
            return Some(CgroupFiles::V1(mount_of(false)?.join(path)));
        }
        if controllers.is_empty() {
            let dir = mount_of(true)?.join(path);
            if dir.join("memory.max").exists() {
                return Some(CgroupFiles::V2(dir));
            }
        }
    }
    None
}

fn read_u64(path: PathBuf) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// A key of a memory.stat file.
fn stat_key(dir: &std::path::Path, key: &str) -> u64 {
    std::fs::read_to_string(dir.join("memory.stat"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == key).then(|| v.trim().parse().ok())?
            })
        })
        .unwrap_or(0)
}

impl CgroupFiles {
    /// The group's memory less its page cache, and its limit; None without
    /// a limit.
    fn read(&self) -> Option<(u64, u64)> {
        let (used, max, cache) = match self {
            CgroupFiles::V2(d) => {
                let max = std::fs::read_to_string(d.join("memory.max")).ok()?;
                let max = max.trim().parse().ok()?; // "max": no limit
                (
                    read_u64(d.join("memory.current"))?,
                    max,
                    stat_key(d, "file"),
                )
            }
            CgroupFiles::V1(d) => {
                let max = read_u64(d.join("memory.limit_in_bytes"))?;
                let used = read_u64(d.join("memory.usage_in_bytes"))?;
                (used, max, stat_key(d, "total_cache"))
            }
        };
        // v1 says "no limit" with a number near 2^63.
        (max < 1 << 60).then_some((used.saturating_sub(cache), max))
    }
}

/// This process's resident set and its peak, from /proc/self/status.
fn resident() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (kib("VmRSS:"), kib("VmHWM:"))
}

/// Measure every [`TICK`] and act, until `stop` resolves.
pub async fn run(governor: Arc<Governor>, stop: impl std::future::Future<Output = ()>) {
    let cgroup = own_cgroup();
    tracing::info!(
        limit_mib = governor.limit() >> 20,
        cgroup = ?cgroup,
        "memory governor started"
    );
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = &mut stop => return,
        }
        if governor
            .readings
            .load(Ordering::Relaxed)
            .is_multiple_of(RELEASE_EVERY)
        {
            for hook in governor
                .hooks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
            {
                hook();
            }
        }
        if governor
            .readings
            .load(Ordering::Relaxed)
            .is_multiple_of(RELEASE_CODE_EVERY)
        {
            let bytes = crate::os::release_code_pages();
            tracing::debug!(bytes, "own code pages released");
        }
        let (resident, peak) = resident();
        let usage = Usage {
            resident,
            peak,
            cgroup: cgroup.as_ref().and_then(CgroupFiles::read),
        };
        governor.step(usage);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn levels_rise_at_once_and_fall_one_at_a_time_below_their_entry() {
        use Level::*;
        let c = 100 * MIB;
        assert_eq!(next_level(Normal, 50 * MIB, c), Normal);
        assert_eq!(next_level(Normal, 70 * MIB, c), ShedCaches);
        assert_eq!(next_level(Normal, 92 * MIB, c), LowerFrequency, "at once");
        assert_eq!(next_level(Normal, 95 * MIB, c), FramePointers);
        assert_eq!(next_level(FramePointers, 86 * MIB, c), FramePointers);
        assert_eq!(next_level(FramePointers, 84 * MIB, c), LowerFrequency);
        assert_eq!(next_level(LowerFrequency, 85 * MIB, c), LowerFrequency);
        assert_eq!(next_level(LowerFrequency, 79 * MIB, c), CapStacks);
        assert_eq!(next_level(CapStacks, 20 * MIB, c), ShedCaches, "one step");
        assert_eq!(next_level(ShedCaches, 61 * MIB, c), ShedCaches);
        assert_eq!(next_level(ShedCaches, 59 * MIB, c), Normal);
        assert_eq!(next_level(ShedCaches, 90 * MIB, 0), Normal, "no ceiling");
    }

    #[test]
    fn caches_get_their_share_and_shed_largest_first_counted() {
        use std::sync::atomic::AtomicU64;
        let g = Governor::default();
        let order = Arc::new(Mutex::new(Vec::new()));
        let budgets = Arc::new(Mutex::new(Vec::new()));
        for (name, held) in [("small", 10 * MIB), ("large", 40 * MIB)] {
            let held = Arc::new(AtomicU64::new(held));
            let (h1, h2) = (held.clone(), held.clone());
            let (order, budgets) = (order.clone(), budgets.clone());
            g.register(
                name,
                25,
                move || h1.load(Ordering::Relaxed),
                move || {
                    order.lock().unwrap().push(name);
                    h2.swap(0, Ordering::Relaxed)
                },
                move |b| budgets.lock().unwrap().push((name, b)),
            );
        }
        g.set_limit(100 * MIB);
        assert_eq!(
            budgets.lock().unwrap()[2..],
            [("small", 25 * MIB), ("large", 25 * MIB)]
        );
        assert_eq!(g.cache_bytes(), [("small", 10 * MIB), ("large", 40 * MIB)]);
        let usage = |mib: u64| Usage {
            resident: mib * MIB,
            peak: mib * MIB,
            cgroup: None,
        };
        assert_eq!(g.step(usage(50)), Level::Normal);
        assert_eq!(g.counts.sheds.load(Ordering::Relaxed), 0, "no pressure");
        assert_eq!(g.step(usage(75)), Level::ShedCaches);
        assert_eq!(*order.lock().unwrap(), ["large", "small"]);
        assert_eq!(g.counts.shed_bytes.load(Ordering::Relaxed), 50 * MIB);
        assert_eq!(g.cache_bytes(), [("small", 0), ("large", 0)]);
        assert_eq!(g.step(usage(92)), Level::LowerFrequency);
        let entered: Vec<u64> = g
            .counts
            .entered
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .collect();
        assert_eq!(entered, [0, 1, 1, 1, 0]);
        assert_eq!(g.step(usage(99)), Level::FramePointers);
        // The pressure goes: the level falls a step a reading, the held
        // level stays for HOLD readings.
        for _ in 0..5 {
            g.step(usage(10));
        }
        assert_eq!(g.level(), Level::Normal);
        assert_eq!(g.held(), Level::FramePointers);
        for _ in 0..HOLD {
            g.step(usage(10));
        }
        assert_eq!(g.held(), Level::Normal, "entered once: held HOLD");
        // Entered again: held twice as long.
        g.step(usage(99));
        for _ in 0..HOLD {
            g.step(usage(10));
        }
        assert_eq!(g.held(), Level::FramePointers);
        // (The levels it fell through on its way down were in force a few
        // readings later.)
        for _ in 0..HOLD + 5 {
            g.step(usage(10));
        }
        assert_eq!(g.held(), Level::Normal);
    }

    /// Under a pressure that shedding does not end, the caches shed at once,
    /// then after 2 s, 4 s, 8 s... up to 64 s; the next pressure starts
    /// over.
    #[test]
    fn sheds_under_a_lasting_pressure_come_further_apart() {
        let g = Governor::default();
        g.set_limit(100 * MIB);
        let usage = |mib: u64| Usage {
            resident: mib * MIB,
            peak: mib * MIB,
            cgroup: None,
        };
        let sheds = || g.counts.sheds.load(Ordering::Relaxed);
        let mut at = Vec::new();
        for reading in 0..400 {
            let before = sheds();
            g.step(usage(if reading % 3 == 0 { 96 } else { 85 }));
            if sheds() > before {
                at.push(reading);
            }
        }
        let gaps: Vec<u64> = at.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(at[0], 0, "the pressure's start sheds at once");
        assert_eq!(gaps[..5], [4, 8, 16, 32, 64], "{at:?}");
        assert!(gaps[5..].iter().all(|&g| g == MAX_SHED_EVERY), "{at:?}");
        // The pressure goes, and comes back: it sheds at once, then after
        // 2 s again.
        for _ in 0..10 {
            g.step(usage(10));
        }
        assert_eq!(g.level(), Level::Normal);
        let before = sheds();
        g.step(usage(75));
        assert_eq!(sheds(), before + 1);
        for _ in 0..SHED_EVERY {
            g.step(usage(75));
        }
        assert_eq!(sheds(), before + 2);
    }

    #[test]
    fn a_cgroup_limit_below_the_setting_is_the_ceiling() {
        let g = Governor::default();
        g.set_limit(128 * MIB);
        g.step(Usage {
            resident: 10 * MIB,
            peak: 10 * MIB,
            cgroup: Some((90 * MIB, 100 * MIB)),
        });
        assert_eq!(g.ceiling(), 100 * MIB);
        assert_eq!(g.level(), Level::LowerFrequency, "90 of 100 MiB");
        assert_eq!(g.held(), Level::LowerFrequency);
    }

    #[test]
    fn the_own_resident_set_is_read() {
        let (rss, peak) = resident();
        assert!(rss > MIB && peak >= rss, "{rss} {peak}");
    }
}
