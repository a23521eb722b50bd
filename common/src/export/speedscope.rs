//! speedscope's JSON file format (also imported by the Firefox Profiler):
//! shared frames and one sampled profile per thread, written as it is made.
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

use serde::Serialize;

use super::frame_name;
use super::pieces::PieceWriter;
use crate::model::{is_time, FunctionInfo, ResolvedProfile, ResolvedStack};

const NANOS: u64 = 1_000_000_000;

/// The schema URL speedscope recognises its files by.
pub const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

#[derive(Serialize)]
struct Frame<'a> {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<&'a str>,
}

/// The profile as a speedscope file: `shared.frames` has one frame per
/// function on a stack (`name [inlined]` for inlined ones, with the source
/// file, else the module, as `file`); each thread is a `sampled` profile
/// whose samples list frame indices outermost first, weighted by the
/// counts, distinct stacks in sorted order, in `nanoseconds` (speedscope
/// then shows times): off-CPU and wall-clock counts are nanoseconds, and a
/// CPU sample stands for the period 1e9 / frequency (cpu-clock's period,
/// which the kernel fixes in frequency mode; pprof's `cpu/nanoseconds`).
/// A CPU profile of no known frequency keeps counts, unit `none`.
pub fn speedscope(p: &ResolvedProfile) -> String {
    let mut out = Vec::new();
    speedscope_pieces(p, usize::MAX, |piece| {
        out = piece;
        true
    });
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// [`speedscope`] handed to `each` in pieces of `piece_bytes` (the last
/// one shorter) as it is written: the file is never whole. Only the frames
/// table and, for each thread, its stacks' indices (4 bytes a stack) are
/// held; a thread's stacks are sorted and merged as they are written. The
/// pieces concatenated are [`speedscope`]. `each` returns false to stop.
pub fn speedscope_pieces(
    p: &ResolvedProfile,
    piece_bytes: usize,
    each: impl FnMut(Vec<u8>) -> bool,
) {
    let mut out = PieceWriter::new(piece_bytes, each);
    if write(p, &mut out).is_ok() {
        out.finish();
    }
}

/// Writes the speedscope file of `p` into `out`, as serde_json would write
/// it whole (compact).
fn write(p: &ResolvedProfile, out: &mut impl Write) -> io::Result<()> {
    let kept = |s: &&ResolvedStack| !s.frames.is_empty() && s.count > 0;
    // Frames in order of first use, outermost first; each thread's stacks
    // (indices into `p.stacks`) and the sum of their counts.
    let mut frames: Vec<u32> = Vec::new();
    let mut frame_of: HashMap<u32, u32> = HashMap::new();
    let mut threads: BTreeMap<u32, (u64, Vec<u32>)> = BTreeMap::new();
    for (i, s) in p.stacks.iter().enumerate().filter(|(_, s)| kept(s)) {
        for f in s.frames.iter().rev() {
            frame_of.entry(f.function).or_insert_with(|| {
                frames.push(f.function);
                frames.len() as u32 - 1
            });
        }
        let (sum, stacks) = threads.entry(s.tid).or_default();
        *sum += s.count;
        stacks.push(i as u32);
    }
    let name = if p.comm.is_empty() {
        format!("pid {}", p.pid)
    } else {
        format!("{} (pid {})", p.comm, p.pid)
    };
    out.write_all(b"{\"$schema\":")?;
    serde_json::to_writer(&mut *out, SCHEMA)?;
    out.write_all(b",\"name\":")?;
    serde_json::to_writer(&mut *out, &name)?;
    out.write_all(b",\"exporter\":")?;
    serde_json::to_writer(&mut *out, &format!("profd {}", env!("CARGO_PKG_VERSION")))?;
    out.write_all(b",\"activeProfileIndex\":0,\"shared\":{\"frames\":[")?;
    let unknown = FunctionInfo::default();
    for (k, &id) in frames.iter().enumerate() {
        if k > 0 {
            out.write_all(b",")?;
        }
        let f = p.functions.get(id as usize).unwrap_or(&unknown);
        let file = if f.file.is_empty() {
            &f.module
        } else {
            &f.file
        };
        let frame = Frame {
            name: frame_name(f),
            file: (!file.is_empty()).then_some(file.as_str()),
        };
        serde_json::to_writer(&mut *out, &frame)?;
    }
    out.write_all(b"]},\"profiles\":[")?;
    let (unit, scale) = match (is_time(p.mode), p.frequency_hz) {
        (true, _) => ("nanoseconds", 1),
        (false, 0) => ("none", 1),
        (false, hz) => ("nanoseconds", NANOS / u64::from(hz)),
    };
    let path = |i: u32| {
        p.stacks[i as usize]
            .frames
            .iter()
            .rev()
            .map(|f| frame_of[&f.function])
    };
    for (k, (tid, (sum, mut stacks))) in threads.into_iter().enumerate() {
        if k > 0 {
            out.write_all(b",")?;
        }
        let name = match p.threads.get(&tid) {
            Some(n) if !n.is_empty() => format!("{n} (tid {tid})"),
            _ => format!("tid {tid}"),
        };
        out.write_all(b"{\"type\":\"sampled\",\"name\":")?;
        serde_json::to_writer(&mut *out, &name)?;
        write!(
            out,
            ",\"unit\":\"{unit}\",\"startValue\":0,\"endValue\":{},\"samples\":[",
            sum * scale
        )?;
        // The distinct stacks in the order of their frame indices, each
        // the run of equal paths it merges.
        stacks.sort_unstable_by(|&a, &b| path(a).cmp(path(b)));
        let runs = || stacks.chunk_by(|&a, &b| path(a).eq(path(b)));
        for (j, run) in runs().enumerate() {
            out.write_all(if j == 0 { b"[" } else { b",[" })?;
            for (d, index) in path(run[0]).enumerate() {
                if d > 0 {
                    out.write_all(b",")?;
                }
                write!(out, "{index}")?;
            }
            out.write_all(b"]")?;
        }
        out.write_all(b"],\"weights\":[")?;
        for (j, run) in runs().enumerate() {
            let weight: u64 = run.iter().map(|&i| p.stacks[i as usize].count).sum();
            if j > 0 {
                out.write_all(b",")?;
            }
            write!(out, "{}", weight * scale)?;
        }
        out.write_all(b"]}")?;
    }
    out.write_all(b"]}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::known;
    use serde_json::Value;

    #[test]
    fn speedscope_is_consistent_json() {
        let p = known();
        let v: Value = serde_json::from_str(&speedscope(&p)).unwrap();
        assert_eq!(v["$schema"], SCHEMA);
        assert_eq!(v["name"], "prog (pid 1234)");
        let frames = v["shared"]["frames"].as_array().unwrap();
        let names: Vec<&str> = frames.iter().map(|f| f["name"].as_str().unwrap()).collect();
        assert_eq!(
            names.len(),
            6,
            "one frame per function on a stack: {names:?}"
        );
        assert!(names.contains(&"inl [inlined]"));
        let profiles = v["profiles"].as_array().unwrap();
        assert_eq!(profiles.len(), 2);
        assert_eq!(profiles[0]["name"], "main (tid 10)");
        assert_eq!(profiles[1]["name"], "worker (tid 11)");
        let mut total = 0;
        for prof in profiles {
            assert_eq!(prof["type"], "sampled");
            let samples = prof["samples"].as_array().unwrap();
            let weights = prof["weights"].as_array().unwrap();
            assert_eq!(samples.len(), weights.len());
            let sum: u64 = weights.iter().map(|w| w.as_u64().unwrap()).sum();
            assert_eq!(prof["endValue"].as_u64().unwrap(), sum);
            total += sum;
            for s in samples {
                let s = s.as_array().unwrap();
                assert!(s
                    .iter()
                    .all(|i| (i.as_u64().unwrap() as usize) < frames.len()));
                // Outermost first: every stack starts at main.
                assert_eq!(names[s[0].as_u64().unwrap() as usize], "main");
            }
        }
        // 1000 Hz: a sample is a millisecond.
        assert_eq!(total, p.attributed * 1_000_000);
        // r r r main on tid 11: [main, r, r, r] with weight 4 ms.
        let r = names.iter().position(|n| *n == "r").unwrap() as u64;
        let main = names.iter().position(|n| *n == "main").unwrap() as u64;
        let idx = profiles[1]["samples"]
            .as_array()
            .unwrap()
            .iter()
            .position(|s| *s == serde_json::json!([main, r, r, r]))
            .unwrap();
        assert_eq!(profiles[1]["weights"][idx], 4_000_000);
        assert!(profiles.iter().all(|p| p["unit"] == "nanoseconds"));
        let unknown = ResolvedProfile {
            frequency_hz: 0,
            ..known()
        };
        let v: Value = serde_json::from_str(&speedscope(&unknown)).unwrap();
        assert_eq!(v["profiles"][1]["weights"][idx], 4, "counts");
        assert_eq!(v["profiles"][1]["unit"], "none");
    }

    #[test]
    fn speedscope_pieces_make_the_file() {
        let whole = speedscope(&known());
        for size in [1, 100, 1 << 20] {
            let mut pieces = Vec::new();
            speedscope_pieces(&known(), size, |piece| {
                pieces.push(piece);
                true
            });
            let (last, rest) = pieces.split_last().unwrap();
            assert!(rest.iter().all(|p| p.len() == size) && last.len() <= size);
            assert_eq!(pieces.concat(), whole.as_bytes(), "pieces of {size} bytes");
        }
        let mut n = 0;
        speedscope_pieces(&known(), 10, |_| {
            n += 1;
            false
        });
        assert_eq!(n, 1, "stopped after the first piece");
    }

    #[test]
    fn off_cpu_profiles_are_in_nanoseconds() {
        let v: Value = serde_json::from_str(&speedscope(&crate::testdata::off_cpu())).unwrap();
        let profiles = v["profiles"].as_array().unwrap();
        assert_eq!(profiles.len(), 2);
        for prof in profiles {
            assert_eq!(prof["unit"], "nanoseconds");
        }
        // tid 10: 6 ms in all.
        assert_eq!(profiles[0]["endValue"], 6_000_000);
        let mut wall = crate::testdata::off_cpu();
        wall.mode = crate::api::Mode::Wall;
        let v: Value = serde_json::from_str(&speedscope(&wall)).unwrap();
        assert_eq!(v["profiles"][0]["unit"], "nanoseconds");
    }
}
