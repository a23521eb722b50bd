//! pprof's profile.proto, both ways: a resolved profile to a gzip'd
//! `Profile` that `go tool pprof` reads, and a pprof file (gzip'd or not)
//! back to a resolved profile for `profctl report FILE`.
use std::collections::HashMap;
use std::io::{Read, Write};

use flate2::{read::MultiGzDecoder, write::GzEncoder, Compression};
use prost::Message;

use super::ExportError;
use crate::api::Mode;
use crate::model::{FrameRef, FunctionInfo, ResolvedProfile, ResolvedStack};
use crate::pprof_proto as pb;

/// Numeric sample label holding the thread id.
pub const TID_LABEL: &str = "tid";
/// String sample label holding the thread name, where known.
pub const THREAD_NAME_LABEL: &str = "thread name";
const NANOS: u64 = 1_000_000_000;

/// A pprof string table under construction: "" at index 0, each string
/// once.
pub struct Strings {
    /// The strings by id.
    pub table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Default for Strings {
    fn default() -> Strings {
        Strings::new()
    }
}

impl Strings {
    /// A table holding only "".
    pub fn new() -> Strings {
        Strings {
            table: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }

    /// The id of `s`, added when new.
    pub fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// An empty profile of CPU samples at `frequency_hz`: sample types
/// `samples/count` (the default shown) and `cpu/nanoseconds`, period
/// `cpu/nanoseconds` = 1e9 / frequency_hz.
pub fn cpu_profile(st: &mut Strings, frequency_hz: u32) -> pb::Profile {
    pb::Profile {
        sample_type: vec![
            pb::ValueType {
                r#type: st.id("samples"),
                unit: st.id("count"),
            },
            pb::ValueType {
                r#type: st.id("cpu"),
                unit: st.id("nanoseconds"),
            },
        ],
        period_type: Some(pb::ValueType {
            r#type: st.id("cpu"),
            unit: st.id("nanoseconds"),
        }),
        period: NANOS.checked_div(u64::from(frequency_hz)).unwrap_or(0) as i64,
        default_sample_type: st.id("samples"),
        ..Default::default()
    }
}

/// The pprof sample type of a profile of off-CPU or wall-clock time:
/// `off_cpu` or `wall` (unit `nanoseconds`); None for CPU samples.
pub fn time_sample_type(mode: Mode) -> Option<&'static str> {
    match mode {
        Mode::OffCpu => Some("off_cpu"),
        Mode::Wall => Some("wall"),
        Mode::Cpu | Mode::Unspecified => None,
    }
}

/// An empty profile of time in nanoseconds, of sample type `kind`
/// (`off_cpu` or `wall`, the only one, so the default shown), period type
/// the same, period `period_ns`.
fn time_profile(st: &mut Strings, kind: &str, period_ns: u64) -> pb::Profile {
    let kind = pb::ValueType {
        r#type: st.id(kind),
        unit: st.id("nanoseconds"),
    };
    pb::Profile {
        sample_type: vec![kind],
        period_type: Some(kind),
        period: period_ns as i64,
        default_sample_type: kind.r#type,
        ..Default::default()
    }
}

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
    let mut st = Strings::new();
    let cpu_ns = |count: u64| {
        (u128::from(count) * u128::from(NANOS))
            .checked_div(u128::from(p.frequency_hz))
            .unwrap_or(0) as i64
    };
    let period_ns = NANOS.checked_div(u64::from(p.frequency_hz)).unwrap_or(0);
    let time = time_sample_type(p.mode);
    let base = match (time, p.mode) {
        (Some(kind), Mode::Wall) => time_profile(&mut st, kind, period_ns),
        (Some(kind), _) => time_profile(&mut st, kind, 0),
        (None, _) => cpu_profile(&mut st, p.frequency_hz),
    };
    let mut prof = pb::Profile {
        duration_nanos: (p.duration_s.max(0.0) * NANOS as f64) as i64,
        ..base
    };
    prof.comment = vec![
        st.id(&format!("pid={}", p.pid)),
        st.id(&format!("comm={}", p.comm)),
    ];

    // Mappings: one per module, ids from 1 in order of first use.
    let mut mapping_of_module: HashMap<&str, usize> = HashMap::new();
    let mut pb_function_used = vec![false; p.functions.len()];
    let mut locations: HashMap<(u64, Vec<(u32, u32)>), u64> = HashMap::new();
    let tid_key = st.id(TID_LABEL);
    let name_key = st.id(THREAD_NAME_LABEL);
    let is_inlined = |f: u32| p.functions.get(f as usize).is_some_and(|f| f.inlined);
    for s in p.stacks.iter().filter(|s| !s.frames.is_empty()) {
        let mut ids = Vec::new();
        let fr = &s.frames;
        let mut i = 0;
        while i < fr.len() {
            let start = i;
            while i + 1 < fr.len()
                && is_inlined(fr[i].function)
                && fr[i + 1].address == fr[i].address
            {
                i += 1;
            }
            let group = &fr[start..=i];
            i += 1;
            let key = (
                group[0].address,
                group
                    .iter()
                    .map(|f| (f.function, f.line))
                    .collect::<Vec<_>>(),
            );
            let next_id = locations.len() as u64 + 1;
            let id = *locations.entry(key).or_insert_with(|| {
                let caller = group[group.len() - 1].function;
                let module = p
                    .functions
                    .get(caller as usize)
                    .map_or("", |f| f.module.as_str());
                let mapping_id = if module.is_empty() {
                    0
                } else {
                    let n = mapping_of_module.len();
                    let m = *mapping_of_module.entry(module).or_insert(n);
                    if m == prof.mapping.len() {
                        prof.mapping.push(pb::Mapping {
                            id: m as u64 + 1,
                            memory_start: u64::MAX,
                            filename: st.id(module),
                            has_functions: true,
                            has_filenames: true,
                            has_line_numbers: true,
                            has_inline_frames: true,
                            ..Default::default()
                        });
                    }
                    // A frame shown without its address (0) widens no range.
                    let mp = &mut prof.mapping[m];
                    if group[0].address != 0 {
                        mp.memory_start = mp.memory_start.min(group[0].address);
                        mp.memory_limit = mp.memory_limit.max(group[0].address.saturating_add(1));
                    }
                    m as u64 + 1
                };
                prof.location.push(pb::Location {
                    id: next_id,
                    mapping_id,
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
                });
                next_id
            });
            for f in group {
                if let Some(u) = pb_function_used.get_mut(f.function as usize) {
                    *u = true;
                }
            }
            ids.push(id);
        }
        let mut label = vec![pb::Label {
            key: tid_key,
            num: i64::from(s.tid),
            ..Default::default()
        }];
        if let Some(name) = p.threads.get(&s.tid).filter(|n| !n.is_empty()) {
            label.push(pb::Label {
                key: name_key,
                str: st.id(name),
                ..Default::default()
            });
        }
        prof.sample.push(pb::Sample {
            location_id: ids,
            value: match time {
                Some(_) => vec![s.count as i64],
                None => vec![s.count as i64, cpu_ns(s.count)],
            },
            label,
        });
    }
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
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&prof.encode_to_vec())
        .and_then(|()| gz.finish())
        .expect("gzip into memory does not fail")
}

/// Whether `module` is the binary of a process named `comm` (truncated to
/// 15 bytes by the kernel).
fn is_main_binary(module: &str, comm: &str) -> bool {
    !comm.is_empty() && (module == comm || (comm.len() >= 15 && module.starts_with(comm)))
}

/// Whether `module` looks like a shared library or a pseudo-module
/// (`[kernel]`, `[vdso]`, ...) rather than a program.
fn is_library(module: &str) -> bool {
    module.starts_with('[') || module.ends_with(".so") || module.contains(".so.")
}

/// Reads a pprof file (gzip'd or not) into a resolved profile: counts from
/// the first sample type, and the mode from it (`off_cpu/nanoseconds`:
/// off-CPU, `wall/nanoseconds`: wall-clock, counts in nanoseconds; any
/// other: CPU); frames from the locations, leaf first, each
/// location's lines innermost first (all but its last line are inlined
/// functions); modules from the mappings' file names (basename); tid from a
/// numeric `tid` / `thread id` label (else 0) and thread names from a
/// `thread name` label; frequency from a nanosecond period (none for
/// off-CPU time); pid and comm
/// from profd's comments. Unnamed locations become `module+0xoffset` or
/// `[unknown] 0xaddr`. Identical (tid, stack) samples are merged.
pub fn pprof_decode(bytes: &[u8]) -> Result<ResolvedProfile, ExportError> {
    let inflated;
    let raw = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut v = Vec::new();
        MultiGzDecoder::new(bytes)
            .read_to_end(&mut v)
            .map_err(ExportError::Gzip)?;
        inflated = v;
        &inflated[..]
    } else {
        bytes
    };
    Decoder::new(pb::Profile::decode(raw)?).run()
}

fn invalid(what: String) -> ExportError {
    ExportError::Invalid(what)
}

struct Decoder {
    prof: pb::Profile,
    out: ResolvedProfile,
    function_ids: HashMap<FunctionInfo, u32>,
    /// pprof location id → frames, innermost first.
    frames: HashMap<u64, Vec<FrameRef>>,
}

impl Decoder {
    fn new(prof: pb::Profile) -> Decoder {
        Decoder {
            prof,
            out: ResolvedProfile::default(),
            function_ids: HashMap::new(),
            frames: HashMap::new(),
        }
    }

    fn str(&self, i: i64) -> Result<&str, ExportError> {
        usize::try_from(i)
            .ok()
            .and_then(|i| self.prof.string_table.get(i))
            .map(String::as_str)
            .ok_or_else(|| invalid(format!("string index {i} out of range")))
    }

    fn function_id(&mut self, info: FunctionInfo) -> u32 {
        let next = self.out.functions.len() as u32;
        *self.function_ids.entry(info).or_insert_with_key(|info| {
            self.out.functions.push(info.clone());
            next
        })
    }

    /// Frames of every location, innermost first.
    fn locations(&mut self) -> Result<(), ExportError> {
        let mut mappings: HashMap<u64, (String, u64, u64)> = HashMap::new();
        for m in &self.prof.mapping {
            let file = self.str(m.filename)?;
            let base = file.rsplit('/').next().unwrap_or(file).to_string();
            mappings.insert(m.id, (base, m.memory_start, m.file_offset));
        }
        let mut functions: HashMap<u64, (String, String)> = HashMap::new();
        for f in &self.prof.function {
            let mut name = self.str(f.name)?;
            if name.is_empty() {
                name = self.str(f.system_name)?;
            }
            let file = self.str(f.filename)?.to_string();
            functions.insert(f.id, (name.to_string(), file));
        }
        for loc in std::mem::take(&mut self.prof.location) {
            let mapping = match loc.mapping_id {
                0 => None,
                id => Some(mappings.get(&id).ok_or_else(|| {
                    invalid(format!("location {} has unknown mapping {id}", loc.id))
                })?),
            };
            let module = mapping.map_or(String::new(), |m| m.0.clone());
            let mut frames = Vec::new();
            let n = loc.line.len();
            for (k, line) in loc.line.iter().enumerate() {
                let (name, file) = functions.get(&line.function_id).ok_or_else(|| {
                    invalid(format!(
                        "location {} has unknown function {}",
                        loc.id, line.function_id
                    ))
                })?;
                let info = FunctionInfo {
                    name: if name.is_empty() {
                        "[unknown]".into()
                    } else {
                        name.clone()
                    },
                    module: module.clone(),
                    file: file.clone(),
                    inlined: k + 1 < n,
                };
                frames.push(FrameRef {
                    function: self.function_id(info),
                    line: u32::try_from(line.line).unwrap_or(0),
                    address: loc.address,
                });
            }
            if frames.is_empty() {
                let name = match mapping {
                    Some((base, start, offset)) => match loc.address.checked_sub(*start) {
                        Some(d) => format!("{base}+{:#x}", d.wrapping_add(*offset)),
                        None => format!("[unknown] {:#x}", loc.address),
                    },
                    None => format!("[unknown] {:#x}", loc.address),
                };
                let info = FunctionInfo {
                    name,
                    module,
                    ..Default::default()
                };
                frames.push(FrameRef {
                    function: self.function_id(info),
                    line: 0,
                    address: loc.address,
                });
            }
            self.frames.insert(loc.id, frames);
        }
        Ok(())
    }

    /// The `(tid, thread name)` of a sample's labels.
    fn thread(&self, labels: &[pb::Label]) -> Result<(u32, Option<String>), ExportError> {
        let (mut tid, mut name) = (0, None);
        for l in labels {
            match self.str(l.key)? {
                "tid" | "thread id" | "thread_id" => {
                    let num = if l.str != 0 {
                        self.str(l.str)?.parse().unwrap_or(0)
                    } else {
                        l.num
                    };
                    tid = u32::try_from(num).unwrap_or(0);
                }
                THREAD_NAME_LABEL if l.str != 0 => name = Some(self.str(l.str)?.to_string()),
                _ => {}
            }
        }
        Ok((tid, name))
    }

    /// The mode of the profile's counts, from its first sample type.
    fn mode(&self) -> Result<Mode, ExportError> {
        let Some(first) = self.prof.sample_type.first() else {
            return Ok(Mode::Cpu);
        };
        if self.str(first.unit)? != "nanoseconds" {
            return Ok(Mode::Cpu);
        }
        let kind = self.str(first.r#type)?;
        Ok([Mode::OffCpu, Mode::Wall]
            .into_iter()
            .find(|&m| time_sample_type(m) == Some(kind))
            .unwrap_or(Mode::Cpu))
    }

    fn run(mut self) -> Result<ResolvedProfile, ExportError> {
        self.out.mode = self.mode()?;
        self.locations()?;
        let mut index: HashMap<(u32, Vec<FrameRef>), usize> = HashMap::new();
        for s in std::mem::take(&mut self.prof.sample) {
            let count = s.value.first().copied().unwrap_or(0).max(0) as u64;
            if count == 0 {
                continue;
            }
            let (tid, name) = self.thread(&s.label)?;
            if let Some(name) = name {
                self.out.threads.insert(tid, name);
            }
            let mut frames = Vec::new();
            for id in &s.location_id {
                let f = self
                    .frames
                    .get(id)
                    .ok_or_else(|| invalid(format!("sample refers to unknown location {id}")))?;
                frames.extend_from_slice(f);
            }
            self.out.attributed += count;
            match index.get(&(tid, frames.clone())) {
                Some(&i) => self.out.stacks[i].count += count,
                None => {
                    index.insert((tid, frames.clone()), self.out.stacks.len());
                    self.out.stacks.push(ResolvedStack { tid, frames, count });
                }
            }
        }
        let period_type = self.prof.period_type.unwrap_or_default();
        if self.str(period_type.unit)? == "nanoseconds"
            && self.prof.period > 0
            && self.out.mode != Mode::OffCpu
        {
            self.out.frequency_hz = (NANOS as f64 / self.prof.period as f64).round() as u32;
        }
        self.out.duration_s = self.prof.duration_nanos.max(0) as f64 / NANOS as f64;
        for &c in &self.prof.comment {
            let c = self.str(c)?;
            if let Some(pid) = c.strip_prefix("pid=") {
                self.out.pid = pid.parse().unwrap_or(0);
            } else if let Some(comm) = c.strip_prefix("comm=") {
                self.out.comm = comm.to_string();
            }
        }
        Ok(self.out)
    }
}

#[cfg(test)]
#[path = "pprof_tests.rs"]
mod tests;
