//! Naming raw addresses: the `Symbolizer` trait (so tests can use a fake) and
//! its blazesym implementation, run on its own thread. An address becomes a
//! chain of frames, innermost first: the functions inlined at it, then the
//! function that holds the code, each with its source file and line when
//! known. Code no symbol names is one frame a function, `module!0xSTART`,
//! where its unwind entry (FDE) gives the function; other unnamed frames
//! become `module+0xoffset` or `[unknown] 0xaddr`.
//! What the symbolizer keeps (parsed files, kallsyms, names, PLT tables)
//! stays within a byte budget that the daemon may change at any time
//! ([`set_budget`], [`shed`]); [`stats`] says what it holds. Debug files
//! a binary lacks may be fetched from debuginfod ([`debuginfod`]): the
//! addresses named before one arrived are named again
//! ([`Symbolizer::debug_generation`]).
mod blaze;
mod debug;
pub mod debuginfod;
mod fde;
mod frame;
pub mod jitdump;
pub mod jitnames;
mod kallsyms;
mod kmod;
mod lru;
mod names;
pub mod perfmap;
mod plt;
#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
mod vdso;

use crate::memory::Tidy;
use crate::process::maps::ProcessMaps;
pub use frame::{Frame, FrameName};
pub use jitnames::JIT_MODULE;
pub use profd_common::model::is_kernel;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};

/// The symbolizer's byte budget unless the daemon sets another.
pub const DEFAULT_BUDGET: u64 = 32 << 20;

static BUDGET: AtomicU64 = AtomicU64::new(DEFAULT_BUDGET);
static SHED: AtomicBool = AtomicBool::new(false);

/// The symbolizer's figures: counters since start, and gauges of what it
/// holds now (as of its last request or tick).
#[derive(Default)]
pub struct Stats {
    /// Addresses named from the names kept.
    pub hits: AtomicU64,
    /// Files (and kallsyms) parsed anew.
    pub loads: AtomicU64,
    /// Parsed files (and kallsyms) let go of.
    pub evictions: AtomicU64,
    /// Names of addresses let go of.
    pub name_evictions: AtomicU64,
    /// Bytes held: parsed files, names, PLT tables, vDSO, perf map and
    /// jitdump tables.
    pub bytes: AtomicU64,
    /// Of which parsed (and mapped) files and kallsyms.
    pub parsed_bytes: AtomicU64,
    /// Files (and kallsyms) parsed and held.
    pub parsed: AtomicU64,
    pub names_bytes: AtomicU64,
    /// Addresses whose names are kept.
    pub names: AtomicU64,
    pub plt_bytes: AtomicU64,
    /// Split debug files held open.
    pub debug_files: AtomicU64,
    /// Files named from their symbols alone: their debug information
    /// weighs more than half the budget for parsed files.
    pub symbols_only: AtomicU64,
}

pub(crate) static STATS: Stats = Stats {
    hits: AtomicU64::new(0),
    loads: AtomicU64::new(0),
    evictions: AtomicU64::new(0),
    name_evictions: AtomicU64::new(0),
    bytes: AtomicU64::new(0),
    parsed_bytes: AtomicU64::new(0),
    parsed: AtomicU64::new(0),
    names_bytes: AtomicU64::new(0),
    names: AtomicU64::new(0),
    plt_bytes: AtomicU64::new(0),
    debug_files: AtomicU64::new(0),
    symbols_only: AtomicU64::new(0),
};

/// The symbolizer's figures.
pub fn stats() -> &'static Stats {
    &STATS
}

/// The figures of the symbolizer and of the mapped files held, read at one
/// moment, for `/metrics`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// (name, help, value, whether a counter).
    pub figures: Vec<(&'static str, &'static str, u64, bool)>,
}

impl Figures {
    pub fn read() -> Figures {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (held, shared, not_held) = crate::process::maps::open_file_stats();
        let s = &STATS;
        let d = debuginfod::status().unwrap_or_default();
        Figures {
            figures: vec![
                ("profd_symbolizer_name_hits", "Addresses named from the names the symbolizer keeps, without reading their file", l(&s.hits), true),
                ("profd_symbolizer_loads", "Files (and kallsyms) the symbolizer parsed and mapped anew", l(&s.loads), true),
                ("profd_symbolizer_evictions", "Parsed files (and kallsyms) the symbolizer let go of, for its budget, unused or replaced", l(&s.evictions), true),
                ("profd_symbolizer_name_evictions", "Named addresses the symbolizer let go of, for its budget or unused", l(&s.name_evictions), true),
                ("profd_symbolizer_bytes", "Bytes the symbolizer holds now: parsed and mapped files, kallsyms, names, PLT tables", l(&s.bytes), false),
                ("profd_symbolizer_budget_bytes", "The symbolizer's byte budget", budget(), false),
                ("profd_symbolizer_parsed_bytes", "Bytes of parsed and mapped files and kallsyms the symbolizer holds now (resident estimate)", l(&s.parsed_bytes), false),
                ("profd_symbolizer_parsed_files", "Files (and kallsyms) the symbolizer holds parsed now", l(&s.parsed), false),
                ("profd_symbolizer_names", "Addresses whose names the symbolizer keeps now", l(&s.names), false),
                ("profd_symbolizer_names_bytes", "Bytes of the names the symbolizer keeps now", l(&s.names_bytes), false),
                ("profd_symbolizer_perf_map_bytes", "Bytes of the perf map tables (JIT names) held for processes now", perfmap::tables_bytes(), false),
                ("profd_symbolizer_jitdump_bytes", "Bytes of the jitdump tables (JIT names, lines and unwind tables) held for processes now", jitdump::tables_bytes(), false),
                ("profd_symbolizer_jitdump_loads_dropped", "JIT code loads of jitdump files left out because their process's table was at its cap", jitdump::loads_dropped(), true),
                ("profd_symbolizer_debug_files", "Split debug files the symbolizer holds open now", l(&s.debug_files), false),
                ("profd_symbolizer_symbols_only", "Files parsed for their symbols alone (no inlined frames, no lines): their debug information weighs more than half the symbolizer's budget for parsed files (raise memory_limit to name them fully)", l(&s.symbols_only), true),
                ("profd_debuginfod_fetched", "Requests to debuginfod servers answered with the debug file asked for", d.fetched, true),
                ("profd_debuginfod_not_found", "Requests to debuginfod servers answered 404", d.not_found, true),
                ("profd_debuginfod_failed", "Requests to debuginfod servers that failed: no connection, no answer in time, another HTTP status, a transfer cut, stalled or larger than the cache", d.failed, true),
                ("profd_debuginfod_garbage", "Requests to debuginfod servers answered with something else than the debug file asked for (not ELF, another build id), dropped", d.garbage, true),
                ("profd_debuginfod_cache_bytes", "Bytes of the debug files in the debuginfod cache now", d.cache_bytes, false),
                ("profd_debuginfod_cache_limit_bytes", "The debuginfod cache's bound in bytes (0: not fetching)", d.cache_limit_bytes, false),
                ("profd_mapped_files_open", "Mapped files (executables, libraries) held open now, one per file version however many processes map it", held, false),
                ("profd_mapped_files_shared", "Opens of a mapped file answered with the one already held for another process or session", shared, true),
                ("profd_mapped_files_not_held", "Mapped files not held open because the bound of held files was reached (read by path later)", not_held, true),
            ],
        }
    }
}

/// Set the symbolizer's byte budget (parsed and mapped files, kallsyms,
/// names, PLT tables together); what is over it goes at its next request
/// or tick (within [`TICK`]).
pub fn set_budget(bytes: u64) {
    BUDGET.store(bytes, Ordering::Relaxed);
}

/// The symbolizer's byte budget.
pub fn budget() -> u64 {
    BUDGET.load(Ordering::Relaxed)
}

/// Bytes the symbolizer holds now (as of its last request or tick),
/// including the pages of the files it maps.
pub fn bytes() -> u64 {
    STATS.bytes.load(Ordering::Relaxed)
}

/// Ask the symbolizer to let go of all parsed files and kallsyms, its PLT
/// tables and half its names, at its next request or tick (within
/// [`TICK`]); returns the bytes it holds now, most of which go.
pub fn shed() -> u64 {
    SHED.store(true, Ordering::Relaxed);
    bytes()
}

/// How the budget is shared: names a quarter, PLT tables 1/32, the
/// function tables of stripped code 1/16, parsed files and kallsyms the
/// rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub names: u64,
    pub plt: u64,
    pub fdes: u64,
    pub parsed: u64,
}

impl Budget {
    pub fn of(total: u64) -> Budget {
        let (names, plt, fdes) = (total / 4, total / 32, total / 16);
        Budget {
            names,
            plt,
            fdes,
            parsed: total - names - plt - fdes,
        }
    }
}

/// Names addresses of one process (user ones through `maps`).
pub trait Symbolizer: Send + Sync {
    /// For each address, in order, its frames innermost first: inlined
    /// callees (`inlined: true`), then the function holding the code. One
    /// non-empty `Vec` per address.
    fn symbolize(&self, maps: &ProcessMaps, addrs: &[u64]) -> Vec<Vec<Frame>>;

    /// When debug files may arrive after an address was named (fetched
    /// from debuginfod): a count of their arrivals, raised once the
    /// symbolizer names with them. An address left unnamed when it was
    /// lower may be named now. None: no debug file ever arrives later.
    fn debug_generation(&self) -> Option<u64> {
        None
    }
}

type Request = (
    ProcessMaps,
    Vec<u64>,
    std::sync::mpsc::Sender<Vec<Vec<Frame>>>,
);

/// The blazesym-backed symbolizer, shared by all sessions. blazesym's
/// symbolizer is not `Send`, so it lives on its own thread and serves
/// requests in turn. The data it parsed from a file or from kallsyms (tens
/// of MiB with decompressed debug sections) is released when the budget
/// needs room, least recently used first, and after [`blaze::IDLE`] unused:
/// sessions name only new addresses, which mostly come in bursts (at
/// attach, when new code runs), and names found are kept.
pub struct BlazeSymbolizer {
    requests: Mutex<std::sync::mpsc::Sender<Request>>,
    /// Arrivals of fetched debug files, when it fetches them.
    arrivals: Option<Arc<AtomicU64>>,
}

/// How often the daemon's free heap is given back to the system.
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// How often the symbolizer applies its budget and a shed request when no
/// request comes.
pub const TICK: std::time::Duration = std::time::Duration::from_secs(1);

/// Where the code of mapped files is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Naming {
    /// On the host: from the files' symbols, debug information and
    /// function tables.
    #[default]
    OnHost,
    /// Elsewhere (`symbols.on_host = false`): the host reads no symbols or
    /// debug information; file-backed code is grouped by function and
    /// kept with its binary's build id and address, for `--symbols` or a
    /// backend to name.
    OffHost,
}

/// Where split debug information is looked for by default.
pub const DEBUG_DIRS: [&str; 2] = ["/usr/lib/debug", "/lib/debug"];

impl Default for BlazeSymbolizer {
    fn default() -> Self {
        BlazeSymbolizer::with_debug_dirs(DEBUG_DIRS.iter().map(PathBuf::from).collect())
    }
}

impl BlazeSymbolizer {
    /// A symbolizer looking for split debug files (by build id, debug link
    /// or path) in `debug_dirs`.
    pub fn with_debug_dirs(debug_dirs: Vec<PathBuf>) -> BlazeSymbolizer {
        BlazeSymbolizer::with_debuginfod(debug_dirs, None, Naming::OnHost)
    }

    /// A symbolizer looking for split debug files in `debug_dirs` and, for
    /// binaries with a build id and none there, having `fetcher` fetch them.
    pub fn with_debuginfod(
        debug_dirs: Vec<PathBuf>,
        fetcher: Option<debuginfod::Fetcher>,
        naming: Naming,
    ) -> BlazeSymbolizer {
        let (tx, rx) = std::sync::mpsc::channel::<Request>();
        let arrivals = fetcher.as_ref().map(|_| Arc::new(AtomicU64::new(0)));
        let arrived = arrivals.clone();
        std::thread::Builder::new()
            .name("profd-symbolize".into())
            .spawn(move || {
                let mut worker = blaze::Worker::new(debug_dirs);
                worker.naming = naming;
                if let Some(f) = &fetcher {
                    worker.fetch_with(f.clone());
                }
                let mut trimmed = std::time::Instant::now();
                loop {
                    match rx.recv_timeout(TICK) {
                        Ok((maps, addrs, reply)) => {
                            let _ = reply.send(worker.symbolize(&maps, &addrs));
                        }
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                    if let (Some(f), Some(count)) = (&fetcher, &arrived) {
                        let ids = f.take_arrived();
                        if !ids.is_empty() {
                            worker.debug_arrived(&ids);
                            count.fetch_add(1, Ordering::Release);
                        }
                    }
                    // Memory freed anywhere in the daemon goes back to the
                    // system every TRIM_EVERY, and at once when parsed files
                    // were released.
                    let now = std::time::Instant::now();
                    let tidy = match SHED.swap(false, Ordering::Relaxed) {
                        true => Tidy::Shed,
                        false => Tidy::AsUsual,
                    };
                    if worker.tick(now, tidy) || now.duration_since(trimmed) >= TRIM_EVERY {
                        crate::os::trim_heap();
                        trimmed = now;
                    }
                }
            })
            .expect("spawning the symbolizer thread");
        BlazeSymbolizer {
            requests: Mutex::new(tx),
            arrivals,
        }
    }
}

impl Symbolizer for BlazeSymbolizer {
    fn symbolize(&self, maps: &ProcessMaps, addrs: &[u64]) -> Vec<Vec<Frame>> {
        let (reply, answer) = std::sync::mpsc::channel();
        let sent = {
            let requests = self.requests.lock().unwrap_or_else(|e| e.into_inner());
            requests.send((maps.clone(), addrs.to_vec(), reply)).is_ok()
        };
        match answer.recv() {
            Ok(frames) if sent && frames.len() == addrs.len() => frames,
            _ => addrs.iter().map(|&a| vec![Frame::unknown(a)]).collect(),
        }
    }

    fn debug_generation(&self) -> Option<u64> {
        (self.arrivals.as_ref()).map(|a| a.load(Ordering::Acquire))
    }
}
