//! Naming raw addresses: the `Symbolizer` trait (so tests can use a fake) and
//! its blazesym implementation, run on its own thread. An address becomes a
//! chain of frames, innermost first: the functions inlined at it, then the
//! function that holds the code, each with its source file and line when
//! known. Unnamed frames become `module+0xoffset` or `[unknown] 0xaddr`.
mod blaze;
mod debug;
mod frame;
mod names;
pub mod perfmap;
mod plt;
#[cfg(test)]
mod tests;
mod vdso;

use crate::maps::ProcessMaps;
pub use blaze::JIT_MODULE;
pub use frame::{Frame, FrameName};
pub use profd_common::model::is_kernel;
use std::path::PathBuf;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Mutex;

/// Names addresses of one process (user ones through `maps`).
pub trait Symbolizer: Send + Sync {
    /// For each address, in order, its frames innermost first: inlined
    /// callees (`inlined: true`), then the function holding the code. One
    /// non-empty `Vec` per address.
    fn symbolize(&self, maps: &ProcessMaps, addrs: &[u64]) -> Vec<Vec<Frame>>;
}

type Request = (
    ProcessMaps,
    Vec<u64>,
    std::sync::mpsc::Sender<Vec<Vec<Frame>>>,
);

/// The blazesym-backed symbolizer, shared by all sessions. blazesym's
/// symbolizer is not `Send`, so it lives on its own thread and serves
/// requests in turn. The data it parsed from a file or from kallsyms (tens
/// of MiB with decompressed debug sections) is released after
/// [`blaze::IDLE`] unused: sessions name only new addresses, which mostly come in bursts
/// (at attach, when new code runs).
pub struct BlazeSymbolizer {
    requests: Mutex<std::sync::mpsc::Sender<Request>>,
}

/// How often the daemon's free heap is given back to the system.
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

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
        let (tx, rx) = std::sync::mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("profd-symbolize".into())
            .spawn(move || {
                let mut worker = blaze::Worker::new(debug_dirs);
                let mut trimmed = std::time::Instant::now();
                loop {
                    match rx.recv_timeout(TRIM_EVERY) {
                        Ok((maps, addrs, reply)) => {
                            let _ = reply.send(worker.symbolize(&maps, &addrs));
                        }
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                    // Memory freed anywhere in the daemon goes back to the
                    // system every TRIM_EVERY, and at once when parsed files
                    // were released.
                    let now = std::time::Instant::now();
                    if worker.evict_idle(now) || now.duration_since(trimmed) >= TRIM_EVERY {
                        crate::sys::trim_heap();
                        trimmed = now;
                    }
                }
            })
            .expect("spawning the symbolizer thread");
        BlazeSymbolizer {
            requests: Mutex::new(tx),
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
}
