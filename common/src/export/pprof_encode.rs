//! The pprof export: a resolved profile to a gzip'd `Profile`, made and
//! handed out in pieces as it is encoded, so that neither its samples nor
//! its bytes are ever whole.
use std::collections::HashMap;
use std::io::Write;

use flate2::{write::GzEncoder, Compression};
use prost::Message;

use super::{cpu_profile, time_profile, time_sample_type, Strings, NANOS};
use super::{THREAD_NAME_LABEL, TID_LABEL};
use crate::api::Mode;
use crate::model::{FrameRef, ResolvedProfile};
use crate::pprof_proto as pb;

/// The profile as a gzip'd pprof `Profile`. A CPU profile has sample types
/// `samples/count` (the default shown) and `cpu/nanoseconds` (count × 1e9 /
/// frequency_hz), period `cpu/nanoseconds` = 1e9 / frequency_hz. An
/// off-CPU profile has the one sample type `off_cpu/nanoseconds` (the
/// counts, which are nanoseconds), period type the same and period 0 (each
/// wait is counted, none sampled); a wall-clock profile likewise
/// `wall/nanoseconds`, period 1e9 / frequency_hz (the on-CPU samples'). The
/// profile has one mapping per module
/// (its address range is that of the profile's frames in it that have an
/// address, [0, 0) when none has), one function per profd function (pprof
/// id = profd id + 1), one location per address
/// and inline chain (consecutive frames at one address whose inner ones are
/// inlined become the lines of one location, innermost first), a numeric
/// `tid` label and a `thread name` label per sample, and comments `pid=N`
/// and `comm=NAME`. Empty stacks are left out.
pub fn pprof(p: &ResolvedProfile) -> Vec<u8> {
    let mut out = Vec::new();
    pprof_pieces(p, usize::MAX, |piece| {
        out = piece;
        true
    });
    out
}

/// [`pprof`] made and handed to `each` in pieces of `piece_bytes` (the
/// last one shorter) as it is encoded and compressed. The message is
/// written a part at a time in the order of its fields (protobuf's
/// encoding of a message is its parts' encodings concatenated): the sample
/// types, each sample as it is made, then the mappings, locations,
/// functions, strings and the other fields. Only the tables the samples
/// refer to are held (a location per address and inline chain, a mapping
/// per module, the strings), never the samples nor the bytes. The pieces
/// concatenated are [`pprof`], the very encoding prost gives the whole
/// message. `each` returns false to stop.
pub fn pprof_pieces(p: &ResolvedProfile, piece_bytes: usize, each: impl FnMut(Vec<u8>) -> bool) {
    let Some(mut encoder) = PprofEncoder::new(p, piece_bytes, each) else {
        return;
    };
    for s in &p.stacks {
        if !encoder.sample(s.tid, s.count, &s.frames) {
            return;
        }
    }
    encoder.finish();
}

/// [`pprof_pieces`] of a profile whose stacks come one at a time: `head`
/// gives everything but the stacks (its own are not read), then each stack
/// is given to [`PprofEncoder::sample`] as it is made, and
/// [`PprofEncoder::finish`] writes the rest. So a profile is encoded
/// without its stacks ever being whole in memory; the pieces are those
/// [`pprof_pieces`] gives for `head` with these stacks.
pub struct PprofEncoder<'p, F> {
    p: &'p ResolvedProfile,
    out: Pieces<F>,
    st: Strings,
    /// The fields written last.
    prof: pb::Profile,
    /// Mappings: one per module, ids from 1 in order of first use.
    mapping_of_module: HashMap<&'p str, usize>,
    /// Locations: one per address and inline chain, ids from 1 in order of
    /// first use.
    location_of: HashMap<Box<[FrameRef]>, u64>,
    pb_function_used: Vec<bool>,
    tid_key: i64,
    name_key: i64,
    time: Option<&'static str>,
    /// The sample being written.
    one: pb::Profile,
}

impl<'p, F: FnMut(Vec<u8>) -> bool> PprofEncoder<'p, F> {
    /// Writes the head (the sample types); None when `each` stopped.
    pub fn new(head: &'p ResolvedProfile, piece_bytes: usize, each: F) -> Option<Self> {
        let p = head;
        let mut out = Pieces {
            gz: GzEncoder::new(Vec::new(), Compression::default()),
            part: Vec::new(),
            piece_bytes: piece_bytes.max(1),
            each,
        };
        let mut st = Strings::new();
        let period_ns = NANOS.checked_div(u64::from(p.frequency_hz)).unwrap_or(0);
        let time = time_sample_type(p.mode);
        let base = match (time, p.mode) {
            (Some(kind), Mode::Wall) => time_profile(&mut st, kind, period_ns),
            (Some(kind), _) => time_profile(&mut st, kind, 0),
            (None, _) => cpu_profile(&mut st, p.frequency_hz),
        };
        // Field 1 first; the rest of `prof` is written last.
        let mut prof = pb::Profile {
            duration_nanos: (p.duration_s.max(0.0) * NANOS as f64) as i64,
            ..base
        };
        let head = pb::Profile {
            sample_type: std::mem::take(&mut prof.sample_type),
            ..Default::default()
        };
        if !out.part(&head) {
            return None;
        }
        prof.comment = vec![
            st.id(&format!("pid={}", p.pid)),
            st.id(&format!("comm={}", p.comm)),
        ];
        let tid_key = st.id(TID_LABEL);
        let name_key = st.id(THREAD_NAME_LABEL);
        Some(PprofEncoder {
            p,
            out,
            st,
            prof,
            mapping_of_module: HashMap::new(),
            location_of: HashMap::new(),
            pb_function_used: vec![false; p.functions.len()],
            tid_key,
            name_key,
            time,
            one: pb::Profile::default(),
        })
    }

    /// The module of a location's frames: its outermost frame's.
    fn module_of(p: &'p ResolvedProfile, group: &[FrameRef]) -> &'p str {
        let caller = group[group.len() - 1].function;
        p.functions
            .get(caller as usize)
            .map_or("", |f| f.module.as_str())
    }

    /// Field 2: one stack (innermost first) with its count, written as it
    /// comes; an empty stack is left out. False when `each` stopped.
    pub fn sample(&mut self, tid: u32, count: u64, fr: &[FrameRef]) -> bool {
        if fr.is_empty() {
            return true;
        }
        let p = self.p;
        let is_inlined = |f: u32| p.functions.get(f as usize).is_some_and(|f| f.inlined);
        let mut ids = Vec::new();
        let mut i = 0;
        while i < fr.len() {
            let start = i;
            while i + 1 < fr.len()
                && is_inlined(fr[i].function)
                && fr[i + 1].address == fr[i].address
            {
                i += 1;
            }
            // One address: the frames are the location.
            let group = &fr[start..=i];
            i += 1;
            let id = match self.location_of.get(group) {
                Some(&id) => id,
                None => {
                    let id = self.location_of.len() as u64 + 1;
                    self.location_of.insert(group.into(), id);
                    self.map(group);
                    id
                }
            };
            for f in group {
                if let Some(u) = self.pb_function_used.get_mut(f.function as usize) {
                    *u = true;
                }
            }
            ids.push(id);
        }
        let mut label = vec![pb::Label {
            key: self.tid_key,
            num: i64::from(tid),
            ..Default::default()
        }];
        if let Some(name) = p.threads.get(&tid).filter(|n| !n.is_empty()) {
            label.push(pb::Label {
                key: self.name_key,
                str: self.st.id(name),
                ..Default::default()
            });
        }
        let cpu_ns = (u128::from(count) * u128::from(NANOS))
            .checked_div(u128::from(p.frequency_hz))
            .unwrap_or(0) as i64;
        self.one.sample = vec![pb::Sample {
            location_id: ids,
            value: match self.time {
                Some(_) => vec![count as i64],
                None => vec![count as i64, cpu_ns],
            },
            label,
        }];
        self.out.part(&self.one)
    }

    /// A new location's mapping: made at its module's first location, its
    /// address range widened to take the location's address.
    fn map(&mut self, group: &[FrameRef]) {
        let module = Self::module_of(self.p, group);
        if module.is_empty() {
            return;
        }
        let n = self.mapping_of_module.len();
        let m = *self.mapping_of_module.entry(module).or_insert(n);
        let prof = &mut self.prof;
        if m == prof.mapping.len() {
            prof.mapping.push(pb::Mapping {
                id: m as u64 + 1,
                memory_start: u64::MAX,
                filename: self.st.id(module),
                has_functions: true,
                has_filenames: true,
                has_line_numbers: true,
                has_inline_frames: true,
                ..Default::default()
            });
        }
        // The binary's build id, from a function the host could not name.
        let origin = group
            .iter()
            .find_map(|f| self.p.functions.get(f.function as usize)?.origin.as_ref());
        if let Some(o) = origin.filter(|o| !o.build_id.is_empty()) {
            if prof.mapping[m].build_id == 0 {
                prof.mapping[m].build_id = self.st.id(&o.build_id);
            }
        }
        // A frame shown without its address (0) widens no range.
        let (mp, address) = (&mut prof.mapping[m], group[0].address);
        if address != 0 {
            mp.memory_start = mp.memory_start.min(address);
            mp.memory_limit = mp.memory_limit.max(address.saturating_add(1));
        }
    }

    /// Writes the mappings, locations, functions, strings and the other
    /// fields, and ends the stream.
    pub fn finish(self) {
        let PprofEncoder {
            p,
            mut out,
            mut st,
            mut prof,
            mapping_of_module,
            location_of,
            pb_function_used,
            mut one,
            ..
        } = self;
        let mut locations: Vec<(u64, Box<[FrameRef]>)> =
            location_of.into_iter().map(|(g, id)| (id, g)).collect();
        locations.sort_unstable_by_key(|&(id, _)| id);
        for m in &mut prof.mapping {
            if m.memory_start > m.memory_limit {
                m.memory_start = 0;
            }
        }
        // pprof takes the first mapping for the main binary ("File:").
        let main = prof.mapping.iter().position(|m| {
            let file = &st.table[m.filename as usize];
            is_main_binary(file, &p.comm)
        });
        if let Some(i) = main.or_else(|| {
            prof.mapping
                .iter()
                .position(|m| !is_library(&st.table[m.filename as usize]))
        }) {
            prof.mapping[..=i].rotate_right(1);
        }
        for (id, f) in p.functions.iter().enumerate() {
            if pb_function_used[id] {
                let name = st.id(&f.name);
                prof.function.push(pb::Function {
                    id: id as u64 + 1,
                    name,
                    system_name: name,
                    filename: st.id(&f.file),
                    start_line: 0,
                });
            }
        }
        prof.string_table = st.table;
        // Fields 3 and 4 (a location at a time), then 5 to 14.
        let mappings = pb::Profile {
            mapping: std::mem::take(&mut prof.mapping),
            ..Default::default()
        };
        if !out.part(&mappings) {
            return;
        }
        for (id, group) in locations {
            let module = Self::module_of(p, &group);
            one.sample.clear();
            one.location = vec![pb::Location {
                id,
                mapping_id: mapping_of_module.get(module).map_or(0, |&m| m as u64 + 1),
                address: group[0].address,
                line: group
                    .iter()
                    .map(|f| pb::Line {
                        function_id: u64::from(f.function) + 1,
                        line: i64::from(f.line),
                        column: 0,
                    })
                    .collect(),
                is_folded: false,
            }];
            if !out.part(&one) {
                return;
            }
        }
        if out.part(&prof) {
            out.finish();
        }
    }
}

/// A gzip'd message under way, handed out in pieces of `piece_bytes`.
struct Pieces<F> {
    gz: GzEncoder<Vec<u8>>,
    /// The encoding of the part being written.
    part: Vec<u8>,
    piece_bytes: usize,
    each: F,
}

impl<F: FnMut(Vec<u8>) -> bool> Pieces<F> {
    /// Writes `part`'s encoding (a `Profile` with only some fields set) and
    /// hands out the whole pieces compressed so far; false when `each`
    /// stopped.
    fn part(&mut self, part: &pb::Profile) -> bool {
        self.part.clear();
        part.encode(&mut self.part)
            .expect("a Vec takes any message");
        self.gz
            .write_all(&self.part)
            .expect("gzip into memory does not fail");
        let out = self.gz.get_mut();
        while out.len() >= self.piece_bytes {
            let rest = out.split_off(self.piece_bytes);
            if !(self.each)(std::mem::replace(out, rest)) {
                return false;
            }
        }
        true
    }

    /// Ends the gzip stream and hands out what is left.
    fn finish(mut self) {
        let mut out = self.gz.finish().expect("gzip into memory does not fail");
        while !out.is_empty() {
            let rest = out.split_off(out.len().min(self.piece_bytes));
            if !(self.each)(std::mem::replace(&mut out, rest)) {
                return;
            }
        }
    }
}

/// Whether `module` is the binary of a process named `comm` (truncated to
/// 15 bytes by the kernel).
pub(super) fn is_main_binary(module: &str, comm: &str) -> bool {
    !comm.is_empty() && (module == comm || (comm.len() >= 15 && module.starts_with(comm)))
}

/// Whether `module` looks like a shared library or a pseudo-module
/// (`[kernel]`, `[vdso]`, ...) rather than a program.
pub(super) fn is_library(module: &str) -> bool {
    module.starts_with('[') || module.ends_with(".so") || module.contains(".so.")
}
