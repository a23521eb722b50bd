//! A cache of what is read from files, by file version (the daemon's one
//! holds unwind tables: `elf::UNWIND_DATA`): each version read once, shared
//! by every unwinder of every session, within a byte budget (least
//! recently used first out; an entry evicted while unwinders use it is let
//! go of by them at their next batch and read again when needed).
use crate::os::file_version::FileVersion;
use std::collections::HashMap;
use std::ops::Deref;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The default budget: the tables of a rustc (librustc_driver and libLLVM,
/// about 16 MiB without their code), a C compiler and the usual runtimes.
pub const DEFAULT_BUDGET: u64 = 32 << 20;

/// Most files remembered as giving no unwind data (or too big for the
/// budget), so that they are not read again each time a process maps them.
const MAX_NOTHING: usize = 4096;

/// What the cache holds: a value and what it weighs in bytes.
pub trait Weigh {
    fn weight(&self) -> u64;
}

/// An entry as its users hold it: the value, whether the cache let go of
/// it (its users drop it at their next batch), and when it was last used.
#[derive(Debug)]
pub struct Held<T> {
    value: T,
    evicted: AtomicBool,
    used: AtomicU64,
}

impl<T> Deref for Held<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> Held<T> {
    /// The cache let go of it: drop it, and read it again when needed.
    pub fn evicted(&self) -> bool {
        self.evicted.load(Ordering::Relaxed)
    }
}

/// Counts since the daemon started, and bytes held now.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Files read (misses).
    pub loads: u64,
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Entries let go of to stay within the budget, or shed.
    pub evictions: u64,
    /// Files whose tables alone exceed the budget: not held (frame
    /// pointers there).
    pub refused: u64,
    /// Bytes held now, and the budget.
    pub bytes: u64,
    pub budget: u64,
}

struct State<T> {
    entries: HashMap<FileVersion, Arc<Held<T>>>,
    /// Files that gave nothing, with the weight of those refused as too big
    /// (read again once the budget allows them).
    nothing: HashMap<FileVersion, u64>,
    counters: Counters,
}

/// Which entries an eviction may take.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Victims {
    /// Only those no unwinder holds.
    Unused,
    /// Those in use too (marked evicted for their holders).
    Any,
}

/// A budgeted cache of what was read from files, by file version.
pub struct Cache<T> {
    state: OnceLock<Mutex<State<T>>>,
    /// Rises at each use, so that entries are ordered by last use.
    clock: AtomicU64,
    /// Rises whenever an entry in use is evicted: unwinders compare it with
    /// the value they last saw to know when to look for evicted entries.
    epoch: AtomicU64,
    initial_budget: u64,
}

impl<T: Weigh> Cache<T> {
    pub const fn new(budget: u64) -> Cache<T> {
        Cache {
            state: OnceLock::new(),
            clock: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            initial_budget: budget,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state
            .get_or_init(|| {
                Mutex::new(State {
                    entries: HashMap::new(),
                    nothing: HashMap::new(),
                    counters: Counters {
                        budget: self.initial_budget,
                        ..Counters::default()
                    },
                })
            })
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Mark `held` as used now.
    pub fn touch(&self, held: &Held<T>) {
        let now = self.clock.fetch_add(1, Ordering::Relaxed) + 1;
        held.used.store(now, Ordering::Relaxed);
    }

    /// Rises whenever an entry some unwinder holds is evicted.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }

    /// What `read` makes of the file at `path`, read once per file version
    /// and held within the budget. None: the file gives nothing, or its
    /// data alone exceeds the budget.
    pub fn get(&self, path: &Path, read: impl FnOnce(&Path) -> Option<T>) -> Option<Arc<Held<T>>> {
        let key = FileVersion::at(path)?;
        {
            let mut state = self.lock();
            if let Some(hit) = state.entries.get(&key).cloned() {
                state.counters.hits += 1;
                drop(state);
                self.touch(&hit);
                return Some(hit);
            }
            let budget = state.counters.budget;
            if let Some(&weight) = state.nothing.get(&key) {
                if weight == 0 || weight > budget {
                    return None;
                }
            }
        }
        let value = read(path);
        let mut state = self.lock();
        state.counters.loads += 1;
        let Some(value) = value else {
            remember_nothing(&mut state, key, 0);
            return None;
        };
        let weight = value.weight();
        if weight > state.counters.budget {
            state.counters.refused += 1;
            remember_nothing(&mut state, key, weight);
            return None;
        }
        if let Some(raced) = state.entries.get(&key).cloned() {
            return Some(raced);
        }
        let budget = state.counters.budget - weight;
        self.evict_to(&mut state, budget);
        let held = Arc::new(Held {
            value,
            evicted: AtomicBool::new(false),
            used: AtomicU64::new(0),
        });
        self.touch(&held);
        state.nothing.remove(&key);
        state.entries.insert(key, held.clone());
        state.counters.bytes += weight;
        Some(held)
    }

    /// Evict entries of `which` kind, least recently used first, until at
    /// most `budget` bytes are held.
    fn evict(&self, state: &mut State<T>, budget: u64, which: Victims) -> u64 {
        let mut freed = 0;
        while state.counters.bytes > budget {
            let victim = state
                .entries
                .iter()
                .filter(|(_, h)| which == Victims::Any || Arc::strong_count(h) == 1)
                .min_by_key(|(_, h)| h.used.load(Ordering::Relaxed))
                .map(|(k, _)| *k);
            let Some(key) = victim else { break };
            let held = state.entries.remove(&key).expect("the victim is held");
            let weight = held.value.weight();
            if Arc::strong_count(&held) > 1 {
                held.evicted.store(true, Ordering::Relaxed);
                self.epoch.fetch_add(1, Ordering::Relaxed);
            }
            state.counters.bytes -= weight;
            state.counters.evictions += 1;
            freed += weight;
        }
        freed
    }

    /// Evict down to `budget`: unused entries first, then those in use.
    fn evict_to(&self, state: &mut State<T>, budget: u64) {
        self.evict(state, budget, Victims::Unused);
        self.evict(state, budget, Victims::Any);
    }

    /// Hold at most `bytes` from now on (evicting what is over it now).
    pub fn set_budget(&self, bytes: u64) {
        let mut state = self.lock();
        state.counters.budget = bytes;
        self.evict_to(&mut state, bytes);
    }

    /// Drop every entry no unwinder holds; the bytes freed.
    pub fn shed(&self) -> u64 {
        let mut state = self.lock();
        self.evict(&mut state, 0, Victims::Unused)
    }

    /// Call `f` on every value held.
    pub fn for_each(&self, f: impl Fn(&T)) {
        self.lock().entries.values().for_each(|h| f(&h.value));
    }

    /// The counts, and the bytes held now.
    pub fn counters(&self) -> Counters {
        self.lock().counters
    }
}

#[cfg(test)]
impl<T: Weigh> Cache<T> {
    /// Whether the file at `path` (its version now) is held.
    pub fn holds(&self, path: &Path) -> bool {
        FileVersion::at(path).is_some_and(|k| self.lock().entries.contains_key(&k))
    }

    /// Evict the file at `path`, as the budget would.
    pub fn evict_file(&self, path: &Path) {
        let key = FileVersion::at(path).expect("the file is there");
        let mut state = self.lock();
        if let Some(held) = state.entries.remove(&key) {
            state.counters.bytes -= held.value.weight();
            state.counters.evictions += 1;
            held.evicted.store(true, Ordering::Relaxed);
            self.epoch.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn remember_nothing<T>(state: &mut State<T>, key: FileVersion, weight: u64) {
    if state.nothing.len() >= MAX_NOTHING {
        state.nothing.clear();
    }
    state.nothing.insert(key, weight);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    impl Weigh for Vec<u8> {
        fn weight(&self) -> u64 {
            self.len() as u64
        }
    }

    /// Files of `sizes` bytes in a scratch directory.
    fn files(name: &str, sizes: &[usize]) -> (std::path::PathBuf, Vec<std::path::PathBuf>) {
        let dir = std::env::temp_dir().join(format!("profd-cache-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let paths = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let p = dir.join(i.to_string());
                std::fs::write(&p, vec![i as u8; n]).unwrap();
                p
            })
            .collect();
        (dir, paths)
    }

    #[test]
    fn bytes_stay_within_the_budget_least_recently_used_out() {
        let (dir, p) = files("lru", &[400, 300, 300, 500, 2000]);
        let cache: Cache<Vec<u8>> = Cache::new(1000);
        let reads = Cell::new(0);
        let read = |p: &Path| {
            reads.set(reads.get() + 1);
            std::fs::read(p).ok()
        };
        let get = |i: usize| cache.get(&p[i], read).map(|h| h.len());
        assert_eq!(get(0), Some(400));
        assert_eq!(get(1), Some(300));
        assert_eq!(get(2), Some(300));
        assert_eq!(cache.counters().bytes, 1000);
        // 0 is used again: 1 is now the least recently used.
        assert_eq!(get(0), Some(400));
        assert_eq!(reads.get(), 3, "a hit is not read");
        assert_eq!(get(3), Some(500));
        let c = cache.counters();
        assert!(c.bytes <= 1000, "{c:?}");
        assert_eq!((c.loads, c.hits, c.evictions), (4, 1, 2));
        // 1 and 2 went (the oldest), 0 stayed.
        assert_eq!(get(0), Some(400));
        assert_eq!(reads.get(), 4);
        assert_eq!(get(1), Some(300));
        assert_eq!(reads.get(), 5, "read again after its eviction");
        assert!(cache.counters().bytes <= 1000);
        // Too big for the budget alone: not held, and not read again...
        assert_eq!(get(4), None);
        assert_eq!(get(4), None);
        assert_eq!(reads.get(), 6);
        assert_eq!(cache.counters().refused, 1);
        // ...until the budget allows it.
        cache.set_budget(4000);
        assert_eq!(get(4), Some(2000));
        assert_eq!(reads.get(), 7);
        cache.set_budget(600);
        let c = cache.counters();
        assert!(c.bytes <= 600, "{c:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn one_copy_is_shared_and_evicted_in_use_is_marked_for_its_users() {
        let (dir, p) = files("shared", &[600, 600]);
        let cache: Cache<Vec<u8>> = Cache::new(1000);
        let read = |p: &Path| std::fs::read(p).ok();
        let first = cache.get(&p[0], read).unwrap();
        let second = cache.get(&p[0], read).unwrap();
        assert!(Arc::ptr_eq(&first, &second), "two users, one copy");
        assert_eq!(cache.counters().bytes, 600);
        // Shedding keeps what is in use.
        assert_eq!(cache.shed(), 0);
        let epoch = cache.epoch();
        // Another file needs the room: the one in use is evicted, marked,
        // and its users told by the epoch.
        let other = cache.get(&p[1], read).unwrap();
        assert!(first.evicted() && !other.evicted());
        assert_ne!(cache.epoch(), epoch);
        assert_eq!(cache.counters().bytes, 600);
        drop((first, second));
        // Unused entries are shed whole.
        drop(other);
        assert_eq!(cache.shed(), 600);
        assert_eq!(cache.counters().bytes, 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
