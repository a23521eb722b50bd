//! speedscope's JSON file format (also imported by the Firefox Profiler):
//! shared frames and one sampled profile per thread.
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::frame_name;
use crate::model::{is_time, ResolvedProfile};

/// The schema URL speedscope recognises its files by.
pub const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

#[derive(Serialize)]
struct File {
    #[serde(rename = "$schema")]
    schema: &'static str,
    name: String,
    exporter: String,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: usize,
    shared: Shared,
    profiles: Vec<Profile>,
}

#[derive(Serialize)]
struct Shared {
    frames: Vec<Frame>,
}

#[derive(Serialize)]
struct Frame {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
}

#[derive(Serialize)]
struct Profile {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: u64,
    #[serde(rename = "endValue")]
    end_value: u64,
    samples: Vec<Vec<usize>>,
    weights: Vec<u64>,
}

/// The profile as a speedscope file: `shared.frames` has one frame per
/// function on a stack (`name [inlined]` for inlined ones, with the source
/// file, else the module, as `file`); each thread is a `sampled` profile
/// whose samples list frame indices outermost first, weighted by the
/// counts, distinct stacks in sorted order: unit `none` for samples,
/// `nanoseconds` for off-CPU and wall-clock time (speedscope then shows
/// times).
pub fn speedscope(p: &ResolvedProfile) -> String {
    let mut frames = Vec::new();
    let mut frame_of: HashMap<u32, usize> = HashMap::new();
    let mut frame = |id: u32| -> usize {
        *frame_of.entry(id).or_insert_with(|| {
            let f = p.functions.get(id as usize).cloned().unwrap_or_default();
            let file = if f.file.is_empty() {
                &f.module
            } else {
                &f.file
            };
            frames.push(Frame {
                name: frame_name(&f),
                file: (!file.is_empty()).then(|| file.clone()),
                line: None,
            });
            frames.len() - 1
        })
    };
    // tid → (stack of frame indices, outermost first) → weight.
    let mut threads: BTreeMap<u32, BTreeMap<Vec<usize>, u64>> = BTreeMap::new();
    for s in p
        .stacks
        .iter()
        .filter(|s| !s.frames.is_empty() && s.count > 0)
    {
        let path: Vec<usize> = s.frames.iter().rev().map(|f| frame(f.function)).collect();
        *threads.entry(s.tid).or_default().entry(path).or_default() += s.count;
    }
    let unit = if is_time(p.mode) {
        "nanoseconds"
    } else {
        "none"
    };
    let profiles = threads
        .into_iter()
        .map(|(tid, stacks)| {
            let name = match p.threads.get(&tid) {
                Some(n) if !n.is_empty() => format!("{n} (tid {tid})"),
                _ => format!("tid {tid}"),
            };
            let (samples, weights): (Vec<_>, Vec<_>) = stacks.into_iter().unzip();
            Profile {
                kind: "sampled",
                name,
                unit,
                start_value: 0,
                end_value: weights.iter().sum(),
                samples,
                weights,
            }
        })
        .collect();
    let name = if p.comm.is_empty() {
        format!("pid {}", p.pid)
    } else {
        format!("{} (pid {})", p.comm, p.pid)
    };
    let file = File {
        schema: SCHEMA,
        name,
        exporter: format!("profd {}", env!("CARGO_PKG_VERSION")),
        active_profile_index: 0,
        shared: Shared { frames },
        profiles,
    };
    serde_json::to_string(&file).expect("the speedscope file holds only plain values")
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
        assert_eq!(total, p.attributed);
        // r r r main on tid 11: [main, r, r, r] with weight 4.
        let r = names.iter().position(|n| *n == "r").unwrap() as u64;
        let main = names.iter().position(|n| *n == "main").unwrap() as u64;
        let idx = profiles[1]["samples"]
            .as_array()
            .unwrap()
            .iter()
            .position(|s| *s == serde_json::json!([main, r, r, r]))
            .unwrap();
        assert_eq!(profiles[1]["weights"][idx], 4);
        assert!(profiles.iter().all(|p| p["unit"] == "none"));
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
