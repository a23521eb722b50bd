//! The session machinery without a client, for continuous profiling: every
//! process's batches counted, unwound and named as a session's are, and
//! handed out window by window, a stack at a time.
use super::python::PyFrames;
use super::spaces::untag;
use super::{Actor, Ingest, Params};
use crate::memory::Tidy;
use crate::os::perf::EventSpec;
use crate::process::symbolize::Symbolizer;
use crate::sampling::{Batch, SampleSource, StackTops, Subscriber, EVERY_PROCESS};
use profd_common::api;
use profd_common::model::{FrameRef, StackTable};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Spaces held before they are renumbered (and every address named anew).
const COMPACT_AT: usize = 4096;
/// Function names kept from window to window before they are let go of.
const NAMES_KEPT: usize = 200_000;

/// Counts every process's samples (see [`Ingest::every`]).
pub struct Collector {
    actor: Actor,
}

impl Collector {
    /// Counts of the batches sampled with `spec` (its stack `tops` from
    /// subscribing), at most `max_stacks` unique stacks a window.
    pub fn new(
        spec: EventSpec,
        tops: Option<StackTops>,
        sampler: Arc<dyn SampleSource>,
        symbolizer: Arc<dyn Symbolizer>,
        stats: Arc<crate::stats::Stats>,
        max_stacks: usize,
    ) -> Collector {
        let params = Params {
            pid: EVERY_PROCESS,
            comm: "continuous".into(),
            duration: None,
            owner_uid: 0,
            owner: "root".into(),
            max_stacks,
            recheck: None,
            children: false,
            timeline: false,
            stats,
        };
        let mut ingest = Ingest::every(spec.stacks(), max_stacks, tops);
        ingest.stack_bytes = spec.stack_bytes as usize;
        let (actor, _) = Actor::new(
            Subscriber::Continuous,
            params,
            spec,
            sampler,
            symbolizer,
            ingest,
        );
        Collector { actor }
    }

    /// The counts, to leave processes out and read what they hold.
    pub fn ingest(&mut self) -> &mut Ingest {
        &mut self.actor.ingest
    }

    /// The program process `pid` runs: the file it maps lowest (the
    /// executable, loaded below its libraries).
    pub fn executable(&self, pid: u32) -> Option<String> {
        let spaces = &self.actor.ingest.spaces;
        spaces
            .maps(spaces.of(pid))
            .iter()
            .find_map(|m| match &m.backing {
                crate::process::maps::Backing::File(path) => Some(path.display().to_string()),
                crate::process::maps::Backing::Special(_) => None,
            })
    }

    /// Batches come from now on from the ring group of `spec` (its stack
    /// `tops`): the continuous frequency changed.
    pub fn resample(&mut self, spec: EventSpec, tops: Option<StackTops>) {
        self.actor.spec = spec;
        self.actor.ingest.set_tops(tops);
    }

    /// `samples` of the window were not counted (they waited for counting
    /// when sampling changed for memory pressure): lost.
    pub fn count_lost(&mut self, samples: u64) {
        self.actor.ingest.totals.lost += samples;
    }

    /// Names held from window to window (each a function's name, module
    /// and file, and the addresses that resolve to it).
    pub fn names_held(&self) -> usize {
        self.actor.names.len() + self.actor.addr_fn.len()
    }

    /// Count a batch. Err: a process's files could not be opened for want
    /// of descriptors (its frames go unnamed; counting goes on).
    pub fn apply(&mut self, batch: Batch) -> Result<(), super::Refused> {
        self.actor.apply(batch)
    }

    /// Name the addresses of the stacks counted so far, before a
    /// [`Collector::restart`].
    pub async fn name_pending(&mut self) {
        self.actor.symbolize_pending().await;
    }

    /// The function with id `id` (as stacks are named).
    pub fn function(&self, id: u32) -> api::WindowFunction {
        let a = &self.actor;
        let n = &a.names[id as usize];
        api::WindowFunction {
            name: n.name.clone(),
            module: n.module.clone(),
            file: a.files[id as usize].clone(),
            inlined: n.inlined,
            build_id: n
                .origin
                .as_ref()
                .map(|o| o.build_id.clone())
                .unwrap_or_default(),
            address: n.origin.as_ref().map_or(0, |o| o.address),
        }
    }

    /// Stack `index` of a finished window, named as the addresses were
    /// named before its restart: its thread and count, and whether a frame
    /// has no name; its frames are written to `frames` (`raw` is scratch).
    pub fn stack(
        &self,
        window: &Finished,
        index: usize,
        raw: &mut Vec<u64>,
        frames: &mut Vec<FrameRef>,
    ) -> Option<(u32, u64, bool)> {
        let (tid, count) = window.stacks.get(index, raw)?;
        let unnamed = self.actor.name_stack(raw, frames);
        Some((tid, count, unnamed))
    }

    /// Counting starts anew (after [`Collector::name_pending`]); the window
    /// counted so far is returned, its stacks still named (see
    /// [`Collector::stack`]) until it is handed to [`Collector::forget`].
    /// Batches may be counted meanwhile, unless
    /// [`Collector::counts_while_writing`] says otherwise.
    pub fn restart(&mut self) -> Finished {
        let a = &mut self.actor;
        a.started = std::time::Instant::now();
        let ingest = &mut a.ingest;
        let threads = ingest
            .thread_pid
            .keys()
            .filter_map(|&tid| Some((tid, ingest.threads.get(&tid)?.clone())))
            .collect();
        let thread_pid = ingest.thread_pid.iter().map(|(&t, &p)| (t, p)).collect();
        let processes = std::mem::take(&mut ingest.processes);
        let totals = ingest.totals;
        let pid_totals = ingest
            .pid_totals
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        let stacks = ingest.restart();
        // Processes gone before this instant have no stacks in the next
        // window.
        let released = ingest.spaces.release_retired().into_iter().collect();
        Finished {
            stacks,
            totals,
            pid_totals,
            processes,
            thread_pid,
            threads,
            released,
        }
    }

    /// Whether batches may be counted between [`Collector::restart`] and
    /// [`Collector::forget`]: not when the address spaces are to be
    /// renumbered there, which changes the tags of the addresses counted.
    pub fn counts_while_writing(&self) -> bool {
        self.actor.ingest.spaces.len() <= COMPACT_AT
    }

    /// Let go of the names only `window` needed: those of address spaces
    /// gone, of JIT code, or all of them past [`NAMES_KEPT`]. Addresses of
    /// stacks counted since the restart whose names went are named again
    /// at the next cut.
    /// With [`Tidy::Shed`] (memory pressure), let go of every name, as past
    /// [`NAMES_KEPT`].
    pub fn forget(&mut self, window: Finished, tidy: Tidy) {
        drop(window.stacks);
        let a = &mut self.actor;
        let spaces = &mut a.ingest.spaces;
        if spaces.len() > COMPACT_AT && a.ingest.stacks.is_empty() {
            spaces.compact();
            a.addr_fn.clear();
            a.unnamed_jit = Default::default();
            a.awaiting_debug = Default::default();
        } else if !window.released.is_empty() {
            let released = &window.released;
            a.addr_fn
                .retain(|addr, _| !released.contains(&untag(addr).0));
            a.awaiting_debug
                .retain(|addr| !released.contains(&untag(addr).0));
        }
        // A runtime reuses its code memory for other code: JIT addresses
        // are named anew in each window, from the perf map as it is then.
        let names = &a.names;
        a.addr_fn.retain(|_, at| {
            !at.frames
                .iter()
                .any(|f| names[f.func as usize].module == crate::process::symbolize::JIT_MODULE)
        });
        if tidy == Tidy::Shed || a.names.len() > NAMES_KEPT {
            a.addr_fn.clear();
            a.names.clear();
            a.files.clear();
            a.kernel.clear();
            a.stamps.clear();
        }
        if a.ingest.stacks.is_empty() && a.ingest.python.held() > 0 {
            a.ingest.python.clear();
            a.addr_fn.retain(|addr, _| !PyFrames::is_python(addr));
        }
        let ingest = &mut a.ingest;
        let (addr_fn, pending) = (&a.addr_fn, &mut ingest.pending);
        ingest.stacks.for_each(|_, stack, _| {
            pending.extend(stack.iter().filter(|&&a| !addr_fn.contains(a)));
        });
    }
}

/// A window's counts, after [`Collector::restart`].
pub struct Finished {
    stacks: StackTable,
    /// Its totals (`unsymbolized` is not counted).
    pub totals: api::Totals,
    /// Those of each process's own samples.
    pub pid_totals: foldhash::HashMap<u32, super::ingest::PidTotals>,
    /// The samples of each process.
    pub processes: Vec<api::ProcessSamples>,
    /// The process of each thread sampled...
    pub thread_pid: HashMap<u32, u32>,
    /// ...and the names of those with one.
    pub threads: HashMap<u32, String>,
    /// Address spaces let go of at the restart: their names are kept
    /// until the window is written.
    released: HashSet<usize>,
}

impl Finished {
    /// Unique stacks in the window.
    pub fn unique_stacks(&self) -> usize {
        self.stacks.len()
    }
}
