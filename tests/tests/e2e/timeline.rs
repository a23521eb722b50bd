//! Timelines: a session that keeps its samples' times, exported in the
//! Firefox Profiler's processed profile format, read back and checked
//! against a workload that changes phase at a moment it measures itself.
use std::path::Path;

use profd_e2e::{build_workload, path_str, Harness, Profile};
use serde_json::Value;

/// How far from the workload's own reading the timeline may put the switch.
const SWITCH_TOLERANCE_MS: f64 = 50.0;

/// One sample of a thread: its time (ms, CLOCK_MONOTONIC) and the names of
/// its frames, outermost first.
struct Sample {
    time: f64,
    frames: Vec<String>,
}

/// One thread of a processed profile: its samples and markers (name, time).
struct Thread {
    tid: String,
    pid: String,
    samples: Vec<Sample>,
    markers: Vec<(String, f64)>,
}

fn index(v: &Value, what: &str) -> usize {
    v.as_u64()
        .unwrap_or_else(|| panic!("{what} is not an index: {v}")) as usize
}

fn column<'a>(table: &'a Value, name: &str) -> &'a Vec<Value> {
    table[name]
        .as_array()
        .unwrap_or_else(|| panic!("no column {name} in {table}"))
}

/// Reads a processed profile, checking the format's invariants (as
/// docs-developer/processed-profile-format.md of the Firefox Profiler
/// states them): every table's columns as long as its `length`, indices
/// within the tables they point into, a stack's prefix before it, sample
/// times in order.
fn read_processed(file: &Path) -> (Value, Vec<Thread>) {
    let text = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let json: Value = serde_json::from_slice(&text).expect("the export is JSON");
    let meta = &json["meta"];
    assert!(
        meta["preprocessedProfileVersion"].as_u64().is_some(),
        "no preprocessedProfileVersion: {meta}"
    );
    assert!(meta["startTime"].as_f64().is_some(), "{meta}");
    assert!(meta["interval"].as_f64().is_some_and(|i| i > 0.0), "{meta}");
    let categories = meta["categories"].as_array().expect("categories").len();
    let mut threads = Vec::new();
    for th in json["threads"].as_array().expect("threads") {
        let strings: Vec<&str> = th["stringArray"]
            .as_array()
            .expect("stringArray")
            .iter()
            .map(|s| s.as_str().expect("strings"))
            .collect();
        let length = |table: &Value, columns: &[&str]| {
            let n = index(&table["length"], "length");
            for c in columns {
                assert_eq!(column(table, c).len(), n, "column {c} of {table}");
            }
            n
        };
        let funcs = length(&th["funcTable"], &["name", "isJS", "resource"]);
        let frames = length(&th["frameTable"], &["func", "category"]);
        let stacks = length(&th["stackTable"], &["frame", "prefix"]);
        for (i, name) in column(&th["funcTable"], "name").iter().enumerate() {
            assert!(index(name, "func name") < strings.len(), "func {i}");
        }
        for (f, c) in column(&th["frameTable"], "func")
            .iter()
            .zip(column(&th["frameTable"], "category"))
        {
            assert!(index(f, "frame func") < funcs);
            assert!(index(c, "frame category") < categories);
        }
        let stack_frame = column(&th["stackTable"], "frame");
        let stack_prefix = column(&th["stackTable"], "prefix");
        for (i, (f, p)) in stack_frame.iter().zip(stack_prefix).enumerate() {
            assert!(index(f, "stack frame") < frames);
            if !p.is_null() {
                assert!(index(p, "prefix") < i, "stack {i}'s prefix comes after it");
            }
        }
        let names_of = |mut stack: usize| {
            let mut names = Vec::new();
            loop {
                let frame = index(&stack_frame[stack], "frame");
                let func = index(&column(&th["frameTable"], "func")[frame], "func");
                let name = index(&column(&th["funcTable"], "name")[func], "name");
                names.push(strings[name].to_string());
                match stack_prefix[stack].as_u64() {
                    Some(p) => stack = p as usize,
                    None => break,
                }
            }
            names.reverse();
            names
        };
        let s = &th["samples"];
        let n = length(s, &["stack", "timeDeltas"]);
        let mut time = 0.0;
        let mut samples = Vec::with_capacity(n);
        for (stack, delta) in column(s, "stack").iter().zip(column(s, "timeDeltas")) {
            let delta = delta.as_f64().expect("a time delta");
            assert!(delta >= 0.0, "samples out of time order");
            time += delta;
            let stack = index(stack, "sample stack");
            assert!(stack < stacks);
            samples.push(Sample {
                time,
                frames: names_of(stack),
            });
        }
        let m = &th["markers"];
        let n = length(m, &["name", "startTime", "phase", "category", "data"]);
        let markers = (0..n)
            .map(|i| {
                let name = index(&column(m, "name")[i], "marker name");
                let time = column(m, "startTime")[i].as_f64().expect("marker time");
                (strings[name].to_string(), time)
            })
            .collect();
        threads.push(Thread {
            tid: th["tid"].to_string().trim_matches('"').to_string(),
            pid: th["pid"].to_string().trim_matches('"').to_string(),
            samples,
            markers,
        });
    }
    (json, threads)
}

/// `phases 1` under `run --timeline -o t.json --output-format firefox`:
/// the exported timeline's samples switch from phase_a to phase_b within
/// 50 ms of the switch the workload measured on CLOCK_MONOTONIC, on the
/// process's own track, between its exec and exit markers.
#[test]
fn a_phase_change_shows_where_it_happened() {
    let h = Harness::start();
    let phases = build_workload("phases");
    let file = profd_e2e::unique_dir("timeline").join("t.json");
    let out = h.daemon.profctl(&[
        "run",
        "--format",
        "json",
        "-o",
        path_str(&file),
        "--output-format",
        "firefox",
        "--",
        path_str(&phases),
        "1",
    ]);
    out.assert_success();
    let p = Profile::parse_run(&out);
    let switch_ms = out
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("phases: switch at "))
        .unwrap_or_else(|| {
            panic!(
                "the workload did not say when it switched:\n{}",
                out.describe()
            )
        })
        .trim()
        .parse::<f64>()
        .expect("nanoseconds")
        / 1e6;
    let (_, threads) = read_processed(&file);
    let pid = p.pid.to_string();
    let main = threads
        .iter()
        .find(|t| t.tid == pid && t.pid == pid)
        .unwrap_or_else(|| panic!("no track for thread {pid}"));
    let in_phase = |s: &Sample, name: &str| s.frames.iter().any(|f| f == name);
    let a: Vec<f64> = (main.samples.iter())
        .filter(|s| in_phase(s, "phase_a"))
        .map(|s| s.time)
        .collect();
    let b: Vec<f64> = (main.samples.iter())
        .filter(|s| in_phase(s, "phase_b"))
        .map(|s| s.time)
        .collect();
    eprintln!(
        "switch at {switch_ms:.3} ms; {} phase_a samples {:.3}..{:.3}, {} phase_b samples {:.3}..{:.3}",
        a.len(),
        a.first().unwrap_or(&0.0),
        a.last().unwrap_or(&0.0),
        b.len(),
        b.first().unwrap_or(&0.0),
        b.last().unwrap_or(&0.0),
    );
    // Each phase spans most of its second: the times are real ones.
    for (name, times) in [("phase_a", &a), ("phase_b", &b)] {
        assert!(times.len() >= 100, "{} samples of {name}", times.len());
        let span = times.last().unwrap() - times.first().unwrap();
        assert!(
            span >= 800.0,
            "{name}'s samples span {span:.0} ms, not about 1 s"
        );
    }
    // Where the dominant function changes: the last phase_a sample and the
    // first phase_b one, both within the tolerance of the switch.
    let (last_a, first_b) = (*a.last().unwrap(), b[0]);
    for (what, t) in [
        ("the last phase_a sample", last_a),
        ("the first phase_b sample", first_b),
    ] {
        assert!(
            (t - switch_ms).abs() <= SWITCH_TOLERANCE_MS,
            "{what} is at {t:.3} ms, {:.1} ms from the switch at {switch_ms:.3} ms",
            t - switch_ms
        );
    }
    // The process's markers: its exec before its samples, its exit after.
    let marker = |name: &str| {
        main.markers
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, t)| t)
            .unwrap_or_else(|| panic!("no {name} marker: {:?}", main.markers))
    };
    assert!(marker("start") <= marker("exec"), "{:?}", main.markers);
    assert!(marker("exec") <= a[0], "{:?}", main.markers);
    assert!(marker("exit") >= *b.last().unwrap(), "{:?}", main.markers);
}

/// A session that kept no times has no timeline: the export fails,
/// saying why and how to get one.
#[test]
fn a_session_without_times_has_no_timeline() {
    let h = Harness::start();
    let split = build_workload("split");
    let out = h
        .daemon
        .profctl(&["run", "--format", "json", "--", path_str(&split), "0.3"]);
    out.assert_success();
    let p = Profile::parse_run(&out);
    let export = h
        .daemon
        .profctl(&["export", &p.session_id.to_string(), "--format", "firefox"]);
    assert!(!export.status.success(), "{}", export.describe());
    profd_e2e::assert_one_line_error(&export, &["kept no sample times", "--timeline"]);
}
