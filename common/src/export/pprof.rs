//! pprof's profile.proto, both ways: a resolved profile to a gzip'd
//! `Profile` that `go tool pprof` reads, and a pprof file (gzip'd or not)
//! back to a resolved profile for `profctl report FILE`.
use std::collections::HashMap;
use std::io::Read;

use flate2::read::MultiGzDecoder;
use prost::Message;

use super::ExportError;
use crate::api::Mode;
use crate::model::{FrameRef, FunctionInfo, Origin, ResolvedProfile, ResolvedStack};
use crate::pprof_proto as pb;

#[path = "pprof_encode.rs"]
mod encode;
#[cfg(test)]
use encode::{is_library, is_main_binary};
pub use encode::{pprof, pprof_pieces, PprofEncoder};

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
        let mut build_ids: HashMap<u64, String> = HashMap::new();
        for m in &self.prof.mapping {
            let file = self.str(m.filename)?;
            let base = file.rsplit('/').next().unwrap_or(file).to_string();
            mappings.insert(m.id, (base, m.memory_start, m.file_offset));
            build_ids.insert(m.id, self.str(m.build_id)?.to_string());
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
                let build_id = build_ids.get(&loc.mapping_id).map_or("", String::as_str);
                let info = FunctionInfo {
                    name: if name.is_empty() {
                        "[unknown]".into()
                    } else {
                        name.clone()
                    },
                    module: module.clone(),
                    file: file.clone(),
                    inlined: k + 1 < n,
                    origin: Origin::of_grouped(name, &module, build_id),
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
