//! The Firefox Profiler's processed profile format, version
//! [`PROCESSED_PROFILE_VERSION`] (the shapes of its `src/types/profile.ts`):
//! a profile's timeline, each sample at its time on its thread's track, the
//! processes' start, exec and exit as markers, and each frame with its
//! library, library-relative address, source file and line, and the kind
//! of code it is as its category. The JSON is made here (serde); the
//! layout of the tables lives in `firefox_json.rs`.
use std::collections::HashMap;

use super::frame_name;
use super::pieces::PieceWriter;
use crate::api::Mode;
use crate::kernel::is_kernel_module;
use crate::model::{is_kernel, FunctionInfo, MarkerKind, ResolvedProfile, Timeline};

#[path = "firefox_json.rs"]
mod json;
use json::*;

/// The processed profile format version written: the Firefox Profiler's
/// current one (`PROCESSED_PROFILE_VERSION` in its
/// `src/app-logic/constants.ts`).
pub const PROCESSED_PROFILE_VERSION: u32 = 70;

/// The categories of frames, by index: name, color, subcategories (the
/// first is the category itself). The first grey one, `Other`, is the
/// default.
const CATEGORIES: [(&str, &str, &[&str]); 6] = [
    ("Other", "grey", &["Other"]),
    ("User", "yellow", &["Other"]),
    ("Kernel", "orange", &["Other"]),
    ("JIT", "green", &["Other"]),
    ("Interpreter", "blue", &["Other", "Python", "Ruby", "Perl"]),
    ("Off-CPU", "lightblue", &["Other", "Blocked", "Runnable"]),
];
const OTHER: u32 = 0;
const USER: u32 = 1;
const KERNEL: u32 = 2;
const JIT: u32 = 3;
const INTERPRETER: u32 = 4;
const OFF_CPU: u32 = 5;

/// The category and subcategory of a frame of `f` at `address`: kernel
/// code (by module or address), JIT code (`[jit]`), interpreted code
/// (`[python]`, `[ruby]`, `[perl]`), profd's off-CPU frames, profd's other
/// frames (`[profd]`: stack limit, unreadable interpreter stacks), and
/// native user code (any other module).
pub(crate) fn category(f: &FunctionInfo, address: u64) -> (u32, u32) {
    if is_kernel_module(&f.module) || is_kernel(address) {
        return (KERNEL, 0);
    }
    match f.module.as_str() {
        "[jit]" => (JIT, 0),
        "[python]" => (INTERPRETER, 1),
        "[ruby]" => (INTERPRETER, 2),
        "[perl]" => (INTERPRETER, 3),
        "[profd]" => match f.name.as_str() {
            "[off-cpu: blocked]" => (OFF_CPU, 1),
            "[off-cpu: runnable]" => (OFF_CPU, 2),
            _ => (OTHER, 0),
        },
        _ => (USER, 0),
    }
}

/// The Breakpad id of a binary whose GNU build id is `build_id` (hex): the
/// id's first 16 bytes (padded with zeros when shorter) read as a GUID
/// whose first three fields (4, 2 and 2 bytes) are little-endian, written
/// in uppercase hex, then the age, `0`. An id that is not hex counts as
/// empty.
pub(crate) fn breakpad_id(build_id: &str) -> String {
    let bytes: Vec<u8> = (0..build_id.len() / 2)
        .map_while(|i| u8::from_str_radix(build_id.get(2 * i..2 * i + 2)?, 16).ok())
        .collect();
    let bytes = if bytes.len() * 2 == build_id.len() {
        bytes
    } else {
        Vec::new()
    };
    let mut guid = [0u8; 16];
    let n = bytes.len().min(16);
    guid[..n].copy_from_slice(&bytes[..n]);
    guid[0..4].reverse();
    guid[4..6].reverse();
    guid[6..8].reverse();
    let mut id: String = guid.iter().map(|b| format!("{b:02X}")).collect();
    id.push('0');
    id
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

/// One thread's track under construction.
struct Track {
    pid: u32,
    tid: u32,
    main: bool,
    /// Its first sample's (or for a main thread its process's first
    /// event's) time, ns.
    start: u64,
    samples: Vec<(u64, Option<u32>)>,
    markers: Markers,
}

/// The processed profile of `p`'s timeline `t`, as [`firefox`] writes it.
fn processed(p: &ResolvedProfile, t: &Timeline, names: &HashMap<u32, String>) -> Profile {
    let interval_ns = match p.frequency_hz {
        0 => 1_000_000,
        hz => 1_000_000_000 / u64::from(hz),
    };
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut shared = Shared::default();

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
    let mut ends: HashMap<u32, u64> = HashMap::new();
    for m in &t.markers {
        if m.kind == MarkerKind::Exit {
            ends.insert(m.pid, m.time);
        }
    }
    // The main thread (tid = pid) carries its process's markers.
    let mut tracks: Vec<Track> = Vec::new();
    let mut track_of: HashMap<u32, usize> = HashMap::new();
    for &(pid, start) in &first {
        track_of.insert(pid, tracks.len());
        tracks.push(Track {
            pid,
            tid: pid,
            main: true,
            start,
            samples: Vec::new(),
            markers: Markers::default(),
        });
    }

    let mut stacks: Vec<Option<Option<u32>>> = vec![None; p.stacks.len()];
    for &(time, index) in &t.samples {
        let stack = &p.stacks[index as usize];
        let track = *track_of.entry(stack.tid).or_insert_with(|| {
            tracks.push(Track {
                pid: pid_of(stack.tid),
                tid: stack.tid,
                main: false,
                start: time,
                samples: Vec::new(),
                markers: Markers::default(),
            });
            tracks.len() - 1
        });
        let ours = *stacks[index as usize].get_or_insert_with(|| shared.stack(p, t, index));
        tracks[track].samples.push((time, ours));
    }

    for m in &t.markers {
        let Some(&track) = track_of.get(&m.pid) else {
            continue;
        };
        let (name, detail) = match &m.kind {
            MarkerKind::Start => ("start", format!("profiling pid {}", m.pid)),
            MarkerKind::Exec(command) => ("exec", command.clone()),
            MarkerKind::Exit => ("exit", format!("pid {}", m.pid)),
        };
        let name = shared.string(name);
        tracks[track].markers.push(name, ms(m.time), detail);
    }
    if t.dropped > 0 {
        if let (Some(&(time, _)), Some(&track)) = (t.samples.first(), track_of.get(&p.pid)) {
            let detail = format!("the times of {} earlier samples were not kept", t.dropped);
            let name = shared.string("dropped");
            tracks[track].markers.push(name, ms(time), detail);
        }
    }

    // Tracks by process (in order of start), each process's main thread
    // first, then its other threads as they were first sampled.
    let order: HashMap<u32, usize> = (first.iter().enumerate())
        .map(|(i, &(pid, _))| (pid, i))
        .collect();
    let mut tracks: Vec<(usize, Track)> = tracks.into_iter().enumerate().collect();
    tracks.sort_by_key(|(i, tr)| (order.get(&tr.pid).copied(), !tr.main, *i));
    let cpu = matches!(p.mode, Mode::Cpu | Mode::Unspecified);
    let threads = tracks
        .into_iter()
        .map(|(_, tr)| {
            let command = name_of(tr.pid);
            let name = match p.threads.get(&tr.tid) {
                Some(name) if !name.is_empty() => name.clone(),
                _ => command.clone(),
            };
            let process_start = first
                .iter()
                .find(|&&(pid, _)| pid == tr.pid)
                .map_or(tr.start, |&(_, start)| start);
            let mut last = 0;
            let deltas = (tr.samples.iter())
                .map(|&(time, _)| ms(time - std::mem::replace(&mut last, time)))
                .collect();
            let n = tr.samples.len();
            Thread {
                process_type: "default",
                process_startup_time: ms(process_start),
                process_shutdown_time: ends.get(&tr.pid).map(|&end| ms(end)),
                register_time: ms(tr.start),
                unregister_time: None,
                paused_ranges: [],
                show_markers_in_timeline: true,
                name,
                is_main_thread: tr.main,
                process_name: command,
                pid: tr.pid.to_string(),
                tid: tr.tid,
                samples: Samples {
                    stack: tr.samples.iter().map(|&(_, stack)| stack).collect(),
                    time_deltas: deltas,
                    weight: None,
                    weight_type: "samples",
                    // Each CPU sample stands for one period of CPU time.
                    thread_cpu_delta: cpu.then(|| vec![interval_ns; n]),
                    length: n,
                },
                markers: tr.markers,
            }
        })
        .collect();

    let libs = t
        .libs
        .iter()
        .map(|l| Lib {
            arch: l.arch.clone(),
            name: l.name.clone(),
            path: l.path.clone(),
            debug_name: l.name.clone(),
            debug_path: l.path.clone(),
            breakpad_id: breakpad_id(&l.build_id),
            code_id: (!l.build_id.is_empty()).then(|| l.build_id.clone()),
        })
        .collect();
    Profile {
        meta: Meta {
            interval: ms(interval_ns),
            start_time: t.monotonic_zero_unix_ms,
            process_type: 0,
            product: format!("profd: {} (pid {})", p.comm, p.pid),
            stackwalk: 1,
            version: 24,
            preprocessed_profile_version: PROCESSED_PROFILE_VERSION,
            categories: CATEGORIES
                .iter()
                .map(|&(name, color, subcategories)| Category {
                    name,
                    color,
                    subcategories,
                })
                .collect(),
            marker_schema: [MarkerSchema::text()],
            sample_units: cpu.then_some(SampleUnits {
                time: "ms",
                event_delay: "ms",
                thread_cpu_delta: "ns",
            }),
            symbolicated: true,
            uses_only_one_stack_type: true,
            source_code_is_not_on_searchfox: true,
        },
        libs,
        shared: shared.finish(),
        threads,
    }
}

#[cfg(test)]
#[path = "firefox_tests.rs"]
mod tests;
