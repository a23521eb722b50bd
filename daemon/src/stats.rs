//! The daemon-wide counters no other part owns: sessions started, Watch
//! streams open, symbol cache hits and misses, and the listeners'
//! connections (counted by `conns`). Kept by the registry, the sessions and
//! the Watch streams; `metrics` renders them.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Counters kept by the registry, the sessions and the Watch streams.
#[derive(Debug, Default)]
pub struct Stats {
    /// Sessions started since the daemon started.
    pub sessions_started: AtomicU64,
    /// Watch streams open now.
    pub watchers: AtomicU64,
    /// Stack addresses already named (or being named) when a new stack
    /// brought them again.
    pub symbol_cache_hits: AtomicU64,
    /// Stack addresses that had to be sent to the symbolizer.
    pub symbol_cache_misses: AtomicU64,
    /// Connections of each listener: open, refused and closed early.
    pub connections: crate::serve::conns::Stats,
    /// The memory ceiling, the caches that shed and what was shed.
    pub memory: Arc<crate::memory::Governor>,
}

/// Counts one open Watch stream while it lives.
pub struct WatcherGuard(Arc<Stats>);

impl Stats {
    /// Count a Watch stream as open until the guard is dropped.
    pub fn watcher(self: &Arc<Self>) -> WatcherGuard {
        self.watchers.fetch_add(1, Ordering::Relaxed);
        WatcherGuard(self.clone())
    }
}

impl Drop for WatcherGuard {
    fn drop(&mut self) {
        self.0.watchers.fetch_sub(1, Ordering::Relaxed);
    }
}
