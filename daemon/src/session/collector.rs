//! The session machinery without a client, for continuous profiling: every
//! process's batches counted, unwound and named as a session's are, and
//! handed out window by window as a resolved profile.
use super::spaces::untag;
use super::{Actor, Ingest, Params, Resolved};
use crate::sampler::{Batch, SampleSource, StackTops, EVERY_PROCESS};
use crate::symbolize::Symbolizer;
use crate::sys::perf::EventSpec;
use profd_common::api;
use profd_common::kernel::KernelFrames;
use profd_common::model::Aggregator;
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

/// One window's samples: the profile (stacks per thread) and which process
/// each thread and each process's samples belong to.
pub struct Collected {
    pub resolved: Resolved,
    pub thread_pid: HashMap<u32, u32>,
    pub processes: Vec<api::ProcessSamples>,
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

    /// Count a batch. Err: a process's files could not be opened for want
    /// of descriptors (its frames go unnamed; counting goes on).
    pub fn apply(&mut self, batch: Batch) -> Result<(), String> {
        self.actor.apply(batch)
    }

    /// The window so far, named, and counting starts anew. Address spaces
    /// of processes gone are let go of.
    pub async fn cut(&mut self) -> Collected {
        let resolved = self.actor.resolve(KernelFrames::Full).await;
        let a = &mut self.actor;
        let thread_pid = a.ingest.thread_pid.iter().map(|(&t, &p)| (t, p)).collect();
        let processes = std::mem::take(&mut a.ingest.processes);
        a.ingest.restart();
        a.counted = Aggregator::new(0);
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
        Collected {
            resolved,
            thread_pid,
            processes,
        }
    }
}
