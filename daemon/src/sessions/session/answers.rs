//! A session's answers to views: naming new addresses, the per-function table
//! (cumulative and over a recent window), the fully resolved profile that
//! views and exports are computed from, and the profil(3) histogram.
use super::libraries::read_mapping;
use super::named::{AddrFrames, FrameLoc};
use super::spaces::untag;
use super::{lookup_fallback, Actor, FunctionTable, Resolved, Stamp};
use crate::process::maps::{is_jit_candidate, Backing};
use crate::process::symbolize::{is_kernel, FrameName};
use crate::sampling::BAD_USER_FRAME;
use crate::sessions::store::{Encoded, PIECE_BYTES};
use profd_common::api;
use profd_common::export::PprofEncoder;
use profd_common::kernel::{self, KernelFrames};
use profd_common::model::{
    percent, Aggregator, FrameRef, FunctionInfo, ResolvedProfile, ResolvedStack,
};
use std::collections::HashMap;
use std::time::Instant;

impl Actor {
    /// Name the addresses of stacks seen since the last view, and look up
    /// again those in JIT code whose perf map or jitdump changed since they
    /// were, and those in files left unnamed before a debug file arrived.
    pub(super) async fn symbolize_pending(&mut self) {
        // The perf maps and jitdumps of the spaces with such addresses, read
        // (when they changed) off the actor's thread.
        let spaces = &self.ingest.spaces;
        let waiting: Vec<_> = self
            .unnamed_jit
            .spaces()
            .map(|space| (space, spaces.maps(space).clone()))
            .collect();
        let now: HashMap<usize, _> = if waiting.is_empty() {
            HashMap::new()
        } else {
            tokio::task::spawn_blocking(move || {
                waiting
                    .into_iter()
                    .map(|(space, maps)| (space, maps.jit_names()))
                    .collect()
            })
            .await
            .unwrap_or_default()
        };
        let mut again = self
            .unnamed_jit
            .due(|space| now.get(&space).cloned().unwrap_or_default());
        if let Some(generation) = self.symbolizer.debug_generation() {
            again.extend(self.awaiting_debug.due(generation));
        }
        if self.ingest.pending.is_empty() && again.is_empty() {
            return;
        }
        let mut addrs: Vec<u64> = self.ingest.pending.drain().collect();
        for (frame, name) in super::SYNTHETIC_FRAMES {
            let Some(i) = addrs.iter().position(|&a| a == frame) else {
                continue;
            };
            addrs.swap_remove(i);
            let func = self.function_id(
                FrameName {
                    name: name.into(),
                    module: "[profd]".into(),
                    inlined: false,
                    origin: None,
                },
                String::new(),
            );
            let frames = Box::new([FrameLoc { func, line: 0 }]);
            self.addr_fn.insert(
                frame,
                AddrFrames {
                    frames,
                    unnamed: false,
                },
            );
        }
        // Interpreter frames are named from the session's own table.
        addrs.retain(|&a| {
            let Some(key) = self.ingest.python.frame(a).cloned() else {
                return true;
            };
            let name = FrameName {
                name: super::python::function_name(&key),
                module: match key.runtime {
                    crate::process::interpreted::Runtime::Python => "[python]".into(),
                    crate::process::interpreted::Runtime::Ruby => "[ruby]".into(),
                    crate::process::interpreted::Runtime::Perl => "[perl]".into(),
                },
                inlined: false,
                origin: None,
            };
            let func = self.function_id(name, key.file.to_string());
            let frames = Box::new([FrameLoc {
                func,
                line: key.line,
            }]);
            let unnamed = false;
            self.addr_fn.insert(a, AddrFrames { frames, unnamed });
            false
        });
        addrs.extend(again);
        // One symbolizer call per address space, with its mappings.
        let mut by_space: HashMap<usize, Vec<u64>> = HashMap::new();
        for a in addrs {
            by_space.entry(untag(a).0).or_default().push(a);
        }
        let mut renamed = false;
        for (space, addrs) in by_space {
            let maps = self.ingest.spaces.maps(space).clone();
            renamed |= self.symbolize_in(space, maps, addrs).await;
        }
        if renamed {
            // Stacks counted under the old names: count them all again.
            self.ingest.since_view = None;
        }
    }

    /// Name (tagged) addresses of one space; true if some address named
    /// before got other frames (a placeholder a name, or a jitdump's name
    /// another).
    async fn symbolize_in(
        &mut self,
        space: usize,
        maps: crate::process::maps::ProcessMaps,
        addrs: Vec<u64>,
    ) -> bool {
        let symbolizer = self.symbolizer.clone();
        let lookup: Vec<u64> = addrs.iter().map(|&a| untag(a).1).collect();
        // Addresses a perf map or jitdump may name: in anonymous executable
        // memory, or in none the session knows of (its mapping record may be
        // lost).
        let in_jit: Vec<bool> = lookup
            .iter()
            .map(|&a| {
                !is_kernel(a)
                    && a != BAD_USER_FRAME
                    && maps.find(a).is_none_or(|m| is_jit_candidate(&m.backing))
            })
            .collect();
        // The debug generation and the JIT tables as they are before naming:
        // an address they do not name is looked up again once they change.
        let generation = symbolizer.debug_generation();
        // Addresses a debug file fetched later may name: in mapped files.
        let in_files: Vec<bool> = lookup
            .iter()
            .map(|&a| {
                generation.is_some()
                    && !is_kernel(a)
                    && maps
                        .find(a)
                        .is_some_and(|m| matches!(m.backing, Backing::File(_)))
            })
            .collect();
        // With a timeline: the mappings of files met for the first time,
        // read with the names while their files are held.
        let mut new_mappings = Vec::new();
        if let Some(libraries) = &mut self.libraries {
            for &a in &lookup {
                if let Some(m) = maps
                    .find(a)
                    .filter(|m| matches!(m.backing, Backing::File(_)))
                {
                    if libraries.first_sight(space as u32, m.start) {
                        new_mappings.push(a);
                    }
                }
            }
        }
        let answer = tokio::task::spawn_blocking(move || {
            let jit_names = maps.jit_names();
            let libraries: Vec<_> = (new_mappings.iter())
                .filter_map(|&a| read_mapping(space as u32, maps.find(a)?))
                .collect();
            (symbolizer.symbolize(&maps, &lookup), jit_names, libraries)
        })
        .await;
        let answer = answer.map(|(frames, jit_names, libraries)| {
            if let Some(known) = &mut self.libraries {
                for (mapping, lib) in libraries {
                    known.add(mapping, lib);
                }
            }
            (frames, jit_names)
        });
        let (resolved, jit_names) = match answer {
            Ok((frames, jit_names)) if frames.len() == addrs.len() => (frames, jit_names),
            Ok((_, jit_names)) => {
                tracing::error!("the symbolizer answered for the wrong number of addresses");
                (lookup_fallback(&addrs), jit_names)
            }
            Err(err) => {
                tracing::error!(%err, "symbolization panicked");
                (lookup_fallback(&addrs), Default::default())
            }
        };
        let mut renamed = false;
        let each = addrs
            .into_iter()
            .zip(resolved)
            .zip(in_jit.into_iter().zip(in_files));
        for ((addr, frames), (in_jit, in_file)) in each {
            let in_kernel = is_kernel(addr);
            let frames = if frames.is_empty() {
                lookup_fallback(&[untag(addr).1]).remove(0)
            } else {
                frames
            };
            let unnamed = frames.iter().any(|f| !f.named);
            // Named by a jitdump: a later load there, not in the file yet
            // (runtimes write it through a buffer), may name it otherwise.
            let in_dump = in_jit
                && (jit_names.jit_dump.as_ref()).is_some_and(|t| t.lookup(untag(addr).1).is_some());
            if (unnamed || in_dump) && in_jit {
                self.unnamed_jit.wait(space, &jit_names, addr);
            } else if let (true, Some(generation)) = (unnamed && in_file, generation) {
                self.awaiting_debug.wait(generation, addr);
            }
            let frames: Box<[FrameLoc]> = frames
                .into_iter()
                .map(|f| {
                    let file = f.file.as_deref().unwrap_or_default().to_string();
                    let func = self.function_id(f.func, file);
                    self.kernel[func as usize] |= in_kernel;
                    FrameLoc { func, line: f.line }
                })
                .collect();
            let changed = in_dump && self.addr_fn.get(addr).is_some_and(|b| b.frames != frames);
            let before = self.addr_fn.insert(addr, AddrFrames { frames, unnamed });
            renamed |= changed || before.is_some_and(|b| b && !unnamed);
        }
        renamed
    }

    /// The id of a function, given one when new.
    fn function_id(&mut self, name: FrameName, file: String) -> u32 {
        let (id, new) = self.names.insert_full(name);
        if new {
            self.files.push(file);
            self.kernel.push(false);
        }
        id as u32
    }

    /// The id of the function kernel frames are folded into, when they are.
    fn folded_id(&mut self, shown: KernelFrames) -> u32 {
        if shown != KernelFrames::Folded {
            return u32::MAX;
        }
        let folded = kernel::folded_function();
        self.function_id(
            FrameName {
                name: folded.name,
                module: folded.module,
                inlined: false,
                origin: None,
            },
            folded.file,
        )
    }

    /// Function ids of a stack, innermost first (inlined frames expanded).
    fn stack_ids(&self, stack: &[u64], ids: &mut Vec<u32>) -> bool {
        ids.clear();
        let mut unnamed = false;
        for a in stack {
            let at = &self.addr_fn[*a];
            unnamed |= at.unnamed;
            ids.extend(at.frames.iter().map(|f| f.func));
        }
        unnamed
    }

    /// [`Self::stack_ids`] of the stack with this index (its addresses go
    /// to `stack`); None when the table has no such stack.
    fn ids_of(&self, index: u32, stack: &mut Vec<u64>, ids: &mut Vec<u32>) -> Option<bool> {
        self.ingest.stacks.get(index as usize, stack)?;
        Some(self.stack_ids(stack, ids))
    }

    /// Add the samples since the last view to the running counts (and to
    /// `unsymbolized`): only their stacks, each once with its number of
    /// samples; or, at the first view and after more samples than the
    /// table holds stacks, every stack again.
    fn count_new_samples(&mut self, ids: &mut Vec<u32>) {
        match self.ingest.since_view.take() {
            Some(mut indices) => {
                self.counted.grow(self.names.len());
                indices.sort_unstable();
                let mut stack = Vec::with_capacity(128);
                for run in indices.chunk_by(|a, b| a == b) {
                    let Some(unnamed) = self.ids_of(run[0], &mut stack, ids) else {
                        continue;
                    };
                    let n = run.len() as u64;
                    if unnamed {
                        self.ingest.totals.unsymbolized += n;
                    }
                    self.counted.add(ids, n);
                }
                indices.clear();
                self.ingest.since_view = Some(indices);
            }
            None => {
                let mut agg = Aggregator::new(self.names.len());
                let mut unsymbolized = 0;
                self.ingest.stacks.for_each(|_, stack, n| {
                    if self.stack_ids(stack, ids) {
                        unsymbolized += n;
                    }
                    agg.add(ids, n);
                });
                self.counted = agg;
                self.ingest.totals.unsymbolized = unsymbolized;
                self.ingest.since_view = Some(Vec::new());
            }
        }
    }

    pub(super) async fn view(&mut self, window_s: u32, shown: KernelFrames) -> FunctionTable {
        self.symbolize_pending().await;
        let folded = self.folded_id(shown);
        let mut ids = Vec::with_capacity(128);
        self.count_new_samples(&mut ids);
        let (mut window, mut window_attributed) = (None, 0);
        if window_s > 0 {
            let mut wagg = Aggregator::new(self.names.len());
            let mut stack = Vec::with_capacity(128);
            for (index, n) in self.ingest.recent.counts(window_s, Instant::now()) {
                if self.ids_of(index, &mut stack, &mut ids).is_some() {
                    wagg.add(&ids, n);
                    window_attributed += n;
                }
            }
            window = Some(wagg.into_counts());
        }
        let total = self.ingest.totals.attributed;
        let mut functions: Vec<api::Function> = self
            .counted
            .counts()
            .iter()
            .enumerate()
            .filter(|(_, c)| c.inclusive > 0)
            .map(|(id, c)| {
                let w = window.as_ref().map(|w| w[id]).unwrap_or_default();
                api::Function {
                    id: id as u64,
                    name: self.names[id].name.clone(),
                    module: self.names[id].module.clone(),
                    inclusive: c.inclusive,
                    exclusive: c.exclusive,
                    inclusive_pct: percent(c.inclusive, total),
                    exclusive_pct: percent(c.exclusive, total),
                    inlined: self.names[id].inlined,
                    window_inclusive: w.inclusive,
                    window_exclusive: w.exclusive,
                }
            })
            .collect();
        functions.sort_by(|a, b| {
            (b.inclusive, b.exclusive)
                .cmp(&(a.inclusive, a.exclusive))
                .then_with(|| a.name.cmp(&b.name))
        });
        let kernel = &self.kernel;
        let is_kernel_fn = |id: u64| kernel.get(id as usize).copied().unwrap_or(false);
        shown.rows(&mut functions, is_kernel_fn, u64::from(folded), total);
        self.version += 1;
        let version = self.version;
        self.stamps.resize(self.names.len(), Stamp::default());
        let stamps = functions
            .iter()
            .map(|f| {
                let st = &mut self.stamps[f.id as usize];
                let counts = (f.inclusive, f.exclusive);
                if st.first == 0 {
                    st.first = version;
                }
                if st.changed == 0 || st.counts != counts {
                    st.counts = counts;
                    st.changed = version;
                }
                (st.changed, st.first)
            })
            .collect();
        // Functions shown with samples before that have none left: their
        // addresses were named anew (see `symbolize_pending`).
        let counts = self.counted.counts();
        let empty = |id: usize| counts.get(id).is_none_or(|c| c.inclusive == 0);
        self.emptied.retain(|&(id, ..)| empty(id as usize));
        for (id, st) in self.stamps.iter_mut().enumerate() {
            if st.counts.0 > 0 && empty(id) {
                st.counts = (0, 0);
                st.changed = version;
                self.emptied.push((id as u64, st.first, version));
            }
        }
        FunctionTable {
            session: self.summary(),
            functions,
            window_attributed,
            version,
            stamps,
            emptied: self.emptied.clone(),
        }
    }

    pub(super) async fn resolve(&mut self, shown: KernelFrames) -> Resolved {
        let mut resolved = self.resolve_head(shown).await;
        let mut stacks = Vec::with_capacity(self.ingest.stacks.len());
        self.each_stack(|tid, count, frames| {
            // Sized exactly: a whole profile's frames are most of its memory.
            stacks.push(ResolvedStack {
                tid,
                count,
                frames: frames.to_vec(),
            })
        });
        resolved.profile.stacks = stacks;
        let mut timeline = (self.ingest.timeline.as_ref()).map(|t| t.timeline());
        if let (Some(t), Some(libraries)) = (&mut timeline, &self.libraries) {
            (t.libs, t.lib_maps) = libraries.snapshot();
            t.stack_spaces = Vec::with_capacity(self.ingest.stacks.len());
            self.ingest.stacks.for_each(|_, stack, _| {
                t.stack_spaces.push(space_of(stack));
            });
        }
        if let (Some(map), Some(t)) = (shown.apply_mapped(&mut resolved.profile), &mut timeline) {
            t.remap(&map);
        }
        resolved.timeline = timeline;
        resolved
    }

    /// The frames of `stack` (addresses, tagged, innermost first) as named
    /// at the last [`Self::resolve_head`], written to `frames`; true when a
    /// frame could not be named.
    pub(super) fn name_stack(&self, stack: &[u64], frames: &mut Vec<FrameRef>) -> bool {
        frames.clear();
        let mut unnamed = false;
        for &a in stack {
            let at = &self.addr_fn[a];
            unnamed |= at.unnamed;
            // The frames profd adds, and Python frames, have no address.
            let synthetic = super::SYNTHETIC_FRAMES.iter().any(|&(f, _)| f == a);
            let address = match synthetic || super::python::PyFrames::is_python(a) {
                true => 0,
                false => untag(a).1,
            };
            frames.extend(at.frames.iter().map(|f| FrameRef {
                function: f.func,
                line: f.line,
                address,
            }));
        }
        unnamed
    }

    /// The profile without its stacks (they come from [`Self::each_stack`]),
    /// its addresses named: `shown` is not applied. The running counts that
    /// views read are brought up to date too.
    pub(super) async fn resolve_head(&mut self, shown: KernelFrames) -> Resolved {
        self.symbolize_pending().await;
        self.folded_id(shown);
        self.count_new_samples(&mut Vec::with_capacity(128));
        let functions: Vec<FunctionInfo> = self
            .names
            .iter()
            .zip(&self.files)
            .map(|(n, file)| FunctionInfo {
                name: n.name.clone(),
                module: n.module.clone(),
                file: file.clone(),
                inlined: n.inlined,
                origin: n.origin.clone(),
            })
            .collect();
        let session = self.summary();
        let profile = ResolvedProfile {
            functions,
            stacks: Vec::new(),
            threads: self
                .ingest
                .threads
                .iter()
                .map(|(&t, n)| (t, n.clone()))
                .collect(),
            thread_pids: self
                .ingest
                .thread_pid
                .iter()
                .map(|(&t, &p)| (t, p))
                .collect(),
            attributed: self.ingest.totals.attributed,
            frequency_hz: session.frequency_hz,
            duration_s: session.duration_s,
            pid: session.pid,
            comm: session.comm.clone(),
            mode: session.mode(),
        };
        Resolved {
            session,
            profile,
            timeline: None,
            unknown_ns: self
                .ingest
                .unknown
                .iter()
                .map(|(&t, &ns)| (t, ns))
                .collect(),
        }
    }

    /// Each stack with its thread and count, its frames as named at the
    /// last [`Self::resolve_head`].
    pub(super) fn each_stack(&self, mut each: impl FnMut(u32, u64, &[FrameRef])) {
        let mut frames = Vec::with_capacity(128);
        self.ingest.stacks.for_each(|tid, stack, count| {
            self.name_stack(stack, &mut frames);
            each(tid, count, &frames);
        });
    }

    /// The session's summary and its profile as gzip'd pprof in pieces of
    /// `piece_bytes`, every frame shown (for saves): encoded stack by
    /// stack as the stacks are named, so the profile is never whole in
    /// memory, only its compressed bytes.
    pub(super) async fn encoded(&mut self) -> (api::Session, Encoded) {
        let resolved = self.resolve_head(KernelFrames::Full).await;
        let mut pieces = Vec::new();
        let encoder = PprofEncoder::new(&resolved.profile, PIECE_BYTES, |mut piece| {
            piece.shrink_to_fit();
            pieces.push(piece);
            true
        });
        if let Some(mut encoder) = encoder {
            self.each_stack(|tid, count, frames| {
                encoder.sample(tid, count, frames);
            });
            encoder.finish();
        }
        (resolved.session, Encoded(pieces))
    }

    /// bucket = (vaddr − offset) × scale / 65536 for each sample's innermost
    /// user PC in the module (vaddr: its ELF virtual address).
    pub(super) fn histogram(
        &self,
        req: &api::GetHistogramRequest,
    ) -> Result<api::GetHistogramResponse, NoHistogram> {
        let mut counts = vec![0u64; req.buckets as usize];
        let (mut out_of_range, mut other, mut matched) = (0, 0, false);
        // The target's current program (after any exec).
        let space = self.ingest.spaces.of(self.params.pid);
        let maps = &self.ingest.spaces.list[space].maps;
        self.ingest.stacks.for_each(|_, stack, n| {
            let Some((pc_space, pc)) = stack
                .iter()
                .find(|&&a| !is_kernel(a) && a != crate::sampling::BAD_USER_FRAME)
                .map(|&a| untag(a))
            else {
                other += n;
                return;
            };
            let Some(m) = maps.find(pc).filter(|_| pc_space == space) else {
                other += n;
                return;
            };
            let path_matches = match &m.backing {
                crate::process::maps::Backing::File(p) => p.as_os_str() == req.module.as_str(),
                crate::process::maps::Backing::Special(_) => false,
            };
            let Some(file) = m
                .file()
                .filter(|_| path_matches || m.module() == req.module)
            else {
                other += n;
                return;
            };
            matched = true;
            let Some(vaddr) = file.segments().and_then(|s| s.vaddr(m.file_offset(pc))) else {
                other += n;
                return;
            };
            let bucket = u128::from(vaddr.wrapping_sub(req.offset)) * u128::from(req.scale) / 65536;
            match usize::try_from(bucket)
                .ok()
                .filter(|&b| vaddr >= req.offset && b < counts.len())
            {
                Some(b) => counts[b] += n,
                None => out_of_range += n,
            }
        });
        if !matched && maps.iter().all(|m| m.module() != req.module) {
            return Err(NoHistogram::NotMapped {
                module: req.module.clone(),
                pid: self.params.pid,
                example: maps
                    .iter()
                    .find(|m| m.file().is_some())
                    .map(|m| m.module())
                    .unwrap_or_default(),
            });
        }
        Ok(api::GetHistogramResponse {
            session: Some(self.summary()),
            counts,
            out_of_range,
            other,
            frequency_hz: self.spec.frequency_hz,
        })
    }
}

/// Why a session has no histogram to answer with.
#[derive(Debug, thiserror::Error)]
pub enum NoHistogram {
    /// The module is not mapped by the session's target (`example`: a
    /// module that is).
    #[error("module {} is not mapped by process {pid}: use a file name from its maps, e.g. {example:?}", profd_common::quoted(.module))]
    NotMapped {
        module: String,
        pid: u32,
        example: String,
    },
    /// The session is one of an earlier run, kept without its samples.
    #[error("session {0} is from an earlier run of the daemon: histograms are not kept across restarts (its profile, views and exports are)")]
    EarlierRun(u64),
}

/// The address space of a stack (tagged addresses, innermost first): that
/// of its first user address in a mapping (profd's own frames and
/// interpreted frames have none); 0 when it has none.
fn space_of(stack: &[u64]) -> u32 {
    let synthetic = |a: u64| super::SYNTHETIC_FRAMES.iter().any(|&(f, _)| f == a);
    stack
        .iter()
        .find(|&&a| {
            !is_kernel(a)
                && a != BAD_USER_FRAME
                && !synthetic(a)
                && !super::python::PyFrames::is_python(a)
        })
        .map_or(0, |&a| untag(a).0 as u32)
}
