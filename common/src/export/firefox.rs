//! The Firefox Profiler's processed profile format (made with the
//! `fxprof-processed-profile` crate): a profile's timeline, each sample at
//! its time on its thread's track, the processes' start, exec and exit as
//! markers.
use std::collections::HashMap;

use fxprof_processed_profile::{
    CategoryColor, CategoryHandle, CategoryPairHandle, CpuDelta, Frame, FrameFlags, FrameInfo,
    MarkerFieldFlags, MarkerFieldFormat, MarkerTiming, ProcessHandle, Profile, ReferenceTimestamp,
    SamplingInterval, StackHandle, StaticSchemaMarker, StaticSchemaMarkerField, StringHandle,
    ThreadHandle, Timestamp,
};

use super::frame_name;
use super::pieces::PieceWriter;
use crate::kernel::is_kernel_module;
use crate::model::{is_kernel, MarkerKind, ResolvedProfile, Timeline};

/// A process event on the timeline: its name (`start`, `exec`, `exit`)
/// and what it concerns (the command, the process).
struct ProcessMarker {
    name: StringHandle,
    detail: StringHandle,
}

impl StaticSchemaMarker for ProcessMarker {
    const UNIQUE_MARKER_TYPE_NAME: &'static str = "profd-process";
    const CHART_LABEL: Option<&'static str> = Some("{marker.name} {marker.data.detail}");
    const TOOLTIP_LABEL: Option<&'static str> = Some("{marker.name} {marker.data.detail}");
    const TABLE_LABEL: Option<&'static str> = Some("{marker.name} {marker.data.detail}");
    const FIELDS: &'static [StaticSchemaMarkerField] = &[StaticSchemaMarkerField {
        key: "detail",
        label: "Detail",
        format: MarkerFieldFormat::String,
        flags: MarkerFieldFlags::SEARCHABLE,
    }];

    fn name(&self, _: &mut Profile) -> StringHandle {
        self.name
    }

    fn category(&self, _: &mut Profile) -> CategoryHandle {
        CategoryHandle::OTHER
    }

    fn string_field_value(&self, _: u32) -> StringHandle {
        self.detail
    }

    fn number_field_value(&self, _: u32) -> f64 {
        0.0
    }
}

/// The processed profile (JSON) of `p`'s timeline `t`. Times in the file
/// count from CLOCK_MONOTONIC's zero (`meta.startTime` is its Unix time),
/// so a sample's time in milliseconds is the CLOCK_MONOTONIC reading of
/// when it was taken. `names` gives the processes' command names by pid.
pub fn firefox(p: &ResolvedProfile, t: &Timeline, names: &HashMap<u32, String>) -> Vec<u8> {
    let mut out = Vec::new();
    firefox_pieces(p, t, names, usize::MAX, |piece| {
        out = piece;
        true
    });
    out
}

/// [`firefox`] handed to `each` in pieces of `piece_bytes` (the last one
/// shorter) as the JSON is written: the file is never whole, only the
/// profile's tables it is written from. The pieces concatenated are
/// [`firefox`]. `each` returns false to stop.
pub fn firefox_pieces(
    p: &ResolvedProfile,
    t: &Timeline,
    names: &HashMap<u32, String>,
    piece_bytes: usize,
    each: impl FnMut(Vec<u8>) -> bool,
) {
    let profile = processed(p, t, names);
    let mut out = PieceWriter::new(piece_bytes, each);
    // Fails only when the reader is gone: then nothing more is made.
    if serde_json::to_writer(&mut out, &profile).is_ok() {
        out.finish();
    }
}

/// The processed profile of `p`'s timeline `t`, as [`firefox`] writes it.
fn processed(p: &ResolvedProfile, t: &Timeline, names: &HashMap<u32, String>) -> Profile {
    let interval_ns = match p.frequency_hz {
        0 => 1_000_000,
        hz => 1_000_000_000 / u64::from(hz),
    };
    let mut out = Profile::new(
        &format!("profd: {} (pid {})", p.comm, p.pid),
        ReferenceTimestamp::from_millis_since_unix_epoch(t.monotonic_zero_unix_ms),
        SamplingInterval::from_nanos(interval_ns),
    );
    out.set_symbolicated(true);
    let user: CategoryPairHandle = out.add_category("User", CategoryColor::Yellow).into();
    let kernel: CategoryPairHandle = out.add_category("Kernel", CategoryColor::Orange).into();
    let at = Timestamp::from_nanos_since_reference;

    // Each process starts at its first event or sample; each thread at its
    // first sample.
    let pid_of = |tid: u32| p.thread_pids.get(&tid).copied().unwrap_or(p.pid);
    let mut first: HashMap<u32, u64> = HashMap::new();
    let events = t.markers.iter().map(|m| (m.pid, m.time));
    let samples =
        (t.samples.iter()).map(|&(time, stack)| (pid_of(p.stacks[stack as usize].tid), time));
    for (pid, time) in events.chain(samples) {
        let t0 = first.entry(pid).or_insert(time);
        *t0 = (*t0).min(time);
    }
    let mut first: Vec<(u32, u64)> = first.into_iter().collect();
    first.sort_by_key(|&(pid, time)| (time, pid));
    let name_of = |pid: u32| {
        names.get(&pid).cloned().unwrap_or_else(|| {
            if pid == p.pid {
                p.comm.clone()
            } else {
                String::new()
            }
        })
    };
    let mut processes: HashMap<u32, ProcessHandle> = HashMap::new();
    let mut threads: HashMap<u32, ThreadHandle> = HashMap::new();
    for &(pid, start) in &first {
        let process = out.add_process(&name_of(pid), pid, at(start));
        processes.insert(pid, process);
        // The main thread carries the process's markers.
        let main = out.add_thread(process, pid, at(start), true);
        out.set_thread_name(main, &thread_name(p, pid, &name_of(pid)));
        threads.insert(pid, main);
    }
    for m in &t.markers {
        if let (MarkerKind::Exit, Some(&process)) = (&m.kind, processes.get(&m.pid)) {
            out.set_process_end_time(process, at(m.time));
        }
    }

    let mut names_interned: Vec<Option<StringHandle>> = vec![None; p.functions.len()];
    let mut stacks: Vec<Option<Option<StackHandle>>> = vec![None; p.stacks.len()];
    for &(time, index) in &t.samples {
        let stack = &p.stacks[index as usize];
        let thread = match threads.get(&stack.tid) {
            Some(&thread) => thread,
            None => {
                let pid = pid_of(stack.tid);
                let process = processes[&pid];
                let thread = out.add_thread(process, stack.tid, at(time), false);
                out.set_thread_name(thread, &thread_name(p, stack.tid, &name_of(pid)));
                threads.insert(stack.tid, thread);
                thread
            }
        };
        let handle = match stacks[index as usize] {
            Some(handle) => handle,
            None => {
                let frames: Vec<FrameInfo> = stack
                    .frames
                    .iter()
                    .rev()
                    .map(|f| {
                        let i = f.function as usize;
                        let info = &p.functions[i];
                        let name = *names_interned[i]
                            .get_or_insert_with(|| out.intern_string(&frame_name(info)));
                        let in_kernel = is_kernel_module(&info.module) || is_kernel(f.address);
                        FrameInfo {
                            frame: Frame::Label(name),
                            category_pair: if in_kernel { kernel } else { user },
                            flags: FrameFlags::empty(),
                        }
                    })
                    .collect();
                let handle = out.intern_stack_frames(thread, frames.into_iter());
                stacks[index as usize] = Some(handle);
                handle
            }
        };
        out.add_sample(
            thread,
            at(time),
            handle,
            CpuDelta::from_nanos(interval_ns),
            1,
        );
    }

    for m in &t.markers {
        let Some(&thread) = threads.get(&m.pid) else {
            continue;
        };
        let (name, detail) = match &m.kind {
            MarkerKind::Start => ("start", format!("profiling pid {}", m.pid)),
            MarkerKind::Exec(command) => ("exec", command.clone()),
            MarkerKind::Exit => ("exit", format!("pid {}", m.pid)),
        };
        let marker = ProcessMarker {
            name: out.intern_string(name),
            detail: out.intern_string(&detail),
        };
        out.add_marker(thread, MarkerTiming::Instant(at(m.time)), marker);
    }
    if t.dropped > 0 {
        if let (Some(&(time, _)), Some(&thread)) = (t.samples.first(), threads.get(&p.pid)) {
            let marker = ProcessMarker {
                name: out.intern_string("dropped"),
                detail: out.intern_string(&format!(
                    "the times of {} earlier samples were not kept",
                    t.dropped
                )),
            };
            out.add_marker(thread, MarkerTiming::Instant(at(time)), marker);
        }
    }
    out
}

/// A thread's track name: its own name, else its process's command.
fn thread_name(p: &ResolvedProfile, tid: u32, command: &str) -> String {
    match p.threads.get(&tid) {
        Some(name) if !name.is_empty() => name.clone(),
        _ => command.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FrameRef, FunctionInfo, ResolvedStack, TimelineMarker};

    fn function(name: &str, module: &str) -> FunctionInfo {
        FunctionInfo {
            name: name.into(),
            module: module.into(),
            ..Default::default()
        }
    }

    fn frames(ids: &[u32]) -> Vec<FrameRef> {
        ids.iter()
            .map(|&function| FrameRef {
                function,
                line: 0,
                address: 0x1000,
            })
            .collect()
    }

    /// Two threads of process 10, a child process 11 that exec'd, and the
    /// processed profile's own tables read back: samples at their times on
    /// their threads, stacks that end in the sampled function, markers.
    #[test]
    fn samples_land_on_their_threads_at_their_times() {
        let p = ResolvedProfile {
            functions: vec![
                function("main", "app"),
                function("phase_a", "app"),
                function("phase_b", "app"),
                function("child_main", "kid"),
            ],
            stacks: vec![
                ResolvedStack {
                    tid: 10,
                    frames: frames(&[1, 0]),
                    count: 2,
                },
                ResolvedStack {
                    tid: 12,
                    frames: frames(&[2, 0]),
                    count: 1,
                },
                ResolvedStack {
                    tid: 11,
                    frames: frames(&[3]),
                    count: 1,
                },
            ],
            threads: HashMap::from([(12, "worker".to_string())]),
            thread_pids: HashMap::from([(10, 10), (12, 10), (11, 11)]),
            attributed: 4,
            frequency_hz: 1000,
            duration_s: 1.0,
            pid: 10,
            comm: "app".into(),
            mode: crate::api::Mode::Cpu,
        };
        let t = Timeline {
            samples: vec![
                (5_000_000, 0),
                (6_000_000, 0),
                (7_500_000, 1),
                (9_000_000, 2),
            ],
            markers: vec![
                TimelineMarker {
                    time: 4_000_000,
                    pid: 10,
                    kind: MarkerKind::Start,
                },
                TimelineMarker {
                    time: 8_000_000,
                    pid: 11,
                    kind: MarkerKind::Exec("kid".into()),
                },
                TimelineMarker {
                    time: 9_500_000,
                    pid: 11,
                    kind: MarkerKind::Exit,
                },
            ],
            dropped: 0,
            monotonic_zero_unix_ms: 1.7e12,
        };
        let names = HashMap::from([(10, "app".to_string()), (11, "kid".to_string())]);
        let json: serde_json::Value = serde_json::from_slice(&firefox(&p, &t, &names)).unwrap();
        assert_eq!(json["meta"]["startTime"], 1.7e12);
        let threads = json["threads"].as_array().unwrap();
        let by_tid = |tid: &str| {
            threads
                .iter()
                .find(|th| th["tid"] == tid)
                .unwrap_or_else(|| panic!("no thread {tid}: {json}"))
        };
        // Per thread: each sample's time (ms) and the name of its leaf function.
        let samples = |th: &serde_json::Value| -> Vec<(f64, String)> {
            let strings = th["stringArray"].as_array().unwrap();
            let s = &th["samples"];
            let mut time = 0.0;
            let times: Vec<f64> = match s["timeDeltas"].as_array() {
                Some(deltas) => deltas
                    .iter()
                    .map(|d| {
                        time += d.as_f64().unwrap();
                        time
                    })
                    .collect(),
                None => s["time"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap())
                    .collect(),
            };
            s["stack"]
                .as_array()
                .unwrap()
                .iter()
                .zip(times)
                .map(|(stack, time)| {
                    let stack = stack.as_u64().unwrap() as usize;
                    let frame = th["stackTable"]["frame"][stack].as_u64().unwrap() as usize;
                    let func = th["frameTable"]["func"][frame].as_u64().unwrap() as usize;
                    let name = th["funcTable"]["name"][func].as_u64().unwrap() as usize;
                    (time, strings[name].as_str().unwrap().to_string())
                })
                .collect()
        };
        assert_eq!(
            samples(by_tid("10")),
            [(5.0, "phase_a".into()), (6.0, "phase_a".into())]
        );
        assert_eq!(samples(by_tid("12")), [(7.5, "phase_b".into())]);
        assert_eq!(by_tid("12")["name"], "worker");
        assert_eq!(samples(by_tid("11")), [(9.0, "child_main".into())]);
        assert_eq!(by_tid("11")["pid"], "11");
        assert_eq!(by_tid("11")["processName"], "kid");
        // Markers on the processes' main threads.
        let markers = |th: &serde_json::Value| -> Vec<(String, f64)> {
            let strings = th["stringArray"].as_array().unwrap();
            let m = &th["markers"];
            m["name"]
                .as_array()
                .unwrap()
                .iter()
                .zip(m["startTime"].as_array().unwrap())
                .map(|(n, t)| {
                    let n = n.as_u64().unwrap() as usize;
                    (
                        strings[n].as_str().unwrap().to_string(),
                        t.as_f64().unwrap(),
                    )
                })
                .collect()
        };
        assert_eq!(markers(by_tid("10")), [("start".to_string(), 4.0)]);
        assert_eq!(
            markers(by_tid("11")),
            [("exec".to_string(), 8.0), ("exit".to_string(), 9.5)]
        );
    }

    #[test]
    fn firefox_pieces_make_the_file() {
        let p = crate::testdata::known();
        let t = Timeline {
            samples: (0..p.stacks.len() as u32)
                .map(|i| (1_000_000 * u64::from(i + 1), i))
                .collect(),
            markers: vec![TimelineMarker {
                time: 500_000,
                pid: p.pid,
                kind: MarkerKind::Start,
            }],
            dropped: 3,
            monotonic_zero_unix_ms: 1.7e12,
        };
        let names = HashMap::new();
        let whole = firefox(&p, &t, &names);
        assert!(whole.len() > 1000, "{} bytes", whole.len());
        for size in [1, 1000, 1 << 20] {
            let mut pieces = Vec::new();
            firefox_pieces(&p, &t, &names, size, |piece| {
                pieces.push(piece);
                true
            });
            let (last, rest) = pieces.split_last().unwrap();
            assert!(rest.iter().all(|p| p.len() == size) && last.len() <= size);
            assert!(pieces.concat() == whole, "pieces of {size} bytes");
        }
        // Stopped after the first piece, quietly.
        let mut n = 0;
        firefox_pieces(&p, &t, &names, 100, |_| {
            n += 1;
            false
        });
        assert_eq!(n, 1);
    }
}
