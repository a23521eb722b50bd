//! The session machinery without a client, for continuous profiling: every
//! process's batches counted, unwound and named as a session's are, and
//! handed out window by window, a stack at a time.
use super::spaces::untag;
use super::{Actor, Ingest, Params, Resolved};
use crate::sampler::{Batch, SampleSource, StackTops, EVERY_PROCESS};
use crate::symbolize::Symbolizer;
use crate::sys::perf::EventSpec;
use profd_common::api;
use profd_common::kernel::KernelFrames;
use profd_common::model::{FrameRef, FunctionInfo};
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
            id: u64::MAX,
            pid: EVERY_PROCESS,
            comm: "continuous".into(),
            duration: None,
            owner_uid: 0,
            owner: "root".into(),
            max_stacks,
            recheck: None,
            children: false,
            stats,
        };
        let ingest = Ingest::every(spec.stack_bytes > 0, max_stacks, tops);
        let (actor, _) = Actor::new(params, spec, sampler, symbolizer, ingest);
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
                crate::maps::Backing::File(path) => Some(path.display().to_string()),
                crate::maps::Backing::Special(_) => None,
            })
    }

    /// The process of each thread sampled since the last cut.
    pub fn thread_pids(&self) -> HashMap<u32, u32> {
        let ingest = &self.actor.ingest;
        ingest.thread_pid.iter().map(|(&t, &p)| (t, p)).collect()
    }

    /// Count a batch. Err: a process's files could not be opened for want
    /// of descriptors (its frames go unnamed; counting goes on).
    pub fn apply(&mut self, batch: Batch) -> Result<(), String> {
        self.actor.apply(batch)
    }

    /// Name the stacks counted since the last restart, and hand each to
    /// `each` (with the function table it indexes, its thread and count), in
    /// index order: the profile's other parts are returned (its `stacks`
    /// are empty). Its stacks are never all named at once: they are most of
    /// a window's memory.
    pub async fn name_stacks(
        &mut self,
        each: impl FnMut(&[FunctionInfo], u32, u64, &[FrameRef]),
    ) -> Resolved {
        // No live view reads these counts: only `unsymbolized` is counted.
        self.actor
            .resolve_each(KernelFrames::Full, false, each)
            .await
    }

    /// Stack `index` named as [`Collector::name_stacks`] named it: its
    /// thread and count, its frames written to `frames` (`raw` is scratch).
    pub fn stack(
        &self,
        index: usize,
        raw: &mut Vec<u64>,
        frames: &mut Vec<FrameRef>,
    ) -> Option<(u32, u64)> {
        self.actor.named_stack(index, raw, frames)
    }

    /// The samples of each process since the last restart.
    pub fn processes(&self) -> &[api::ProcessSamples] {
        &self.actor.ingest.processes
    }

    /// Counting starts anew. Address spaces of processes gone are let go of.
    pub fn restart(&mut self) {
        let a = &mut self.actor;
        a.ingest.restart();
        a.started = std::time::Instant::now();
        let spaces = &mut a.ingest.spaces;
        let released: HashSet<usize> = spaces.release_retired().into_iter().collect();
        if spaces.len() > COMPACT_AT {
            spaces.compact();
            a.addr_fn.clear();
            a.unnamed_jit = Default::default();
        } else if !released.is_empty() {
            a.addr_fn
                .retain(|&addr, _| !released.contains(&untag(addr).0));
        }
        // A runtime reuses its code memory for other code: JIT addresses
        // are named anew in each window, from the perf map as it is then.
        let names = &a.names;
        a.addr_fn.retain(|_, at| {
            !at.frames
                .iter()
                .any(|f| names[f.func as usize].module == crate::symbolize::JIT_MODULE)
        });
        if a.names.len() > NAMES_KEPT {
            a.addr_fn.clear();
            a.fn_ids.clear();
            a.names.clear();
            a.files.clear();
            a.kernel.clear();
            a.stamps.clear();
        }
    }
}
