//! Timelines: a session that keeps its samples' times, exported in the
//! Firefox Profiler's processed profile format, read back and checked
//! against a workload that changes phase at a moment it measures itself.
use std::path::Path;

use profd_e2e::views::FirefoxProfiler;
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

/// Reads a processed profile, checking the format's invariants (as the
/// Firefox Profiler's `src/types/profile.ts` states them): every table's
/// columns as long as its `length`, indices within the tables they point
/// into (libraries, categories and their subcategories, sources,
/// resources, strings), a stack's prefix before it, sample times in order.
fn read_processed(file: &Path) -> (Value, Vec<Thread>) {
    let text = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let json: Value = serde_json::from_slice(&text).expect("the export is JSON");
    let meta = &json["meta"];
    assert_eq!(meta["preprocessedProfileVersion"], 70, "{meta}");
    assert!(meta["startTime"].as_f64().is_some(), "{meta}");
    assert!(meta["interval"].as_f64().is_some_and(|i| i > 0.0), "{meta}");
    let categories = meta["categories"].as_array().expect("categories");
    let libs = json["libs"].as_array().expect("libs").len();
    let shared = &json["shared"];
    let strings: Vec<&str> = column(shared, "stringArray")
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
    let sources = length(&shared["sources"], &["id", "filename", "startLine"]);
    let resources = length(&shared["resourceTable"], &["name", "host", "type"]);
    let (ft, fr, st) = (
        &shared["funcTable"],
        &shared["frameTable"],
        &shared["stackTable"],
    );
    let funcs = length(ft, &["name", "isJS", "resource", "source", "lineNumber"]);
    let frames = length(
        fr,
        &[
            "func",
            "address",
            "lib",
            "inlineDepth",
            "category",
            "subcategory",
            "line",
        ],
    );
    let stacks = length(st, &["frame", "prefixOffset"]);
    for i in 0..funcs {
        assert!(
            index(&column(ft, "name")[i], "func name") < strings.len(),
            "func {i}"
        );
        let resource = column(ft, "resource")[i].as_i64().expect("resource");
        assert!(resource >= -1 && resource < resources as i64, "func {i}");
        if let Some(source) = column(ft, "source")[i].as_u64() {
            assert!((source as usize) < sources, "func {i}");
        }
    }
    for i in 0..frames {
        assert!(index(&column(fr, "func")[i], "frame func") < funcs);
        let category = index(&column(fr, "category")[i], "frame category");
        let subcategories = categories[category]["subcategories"].as_array().unwrap();
        assert!(index(&column(fr, "subcategory")[i], "subcategory") < subcategories.len());
        let lib = column(fr, "lib")[i].as_i64().expect("lib");
        let address = column(fr, "address")[i].as_i64().expect("address");
        assert!(lib >= -1 && lib < libs as i64, "frame {i}");
        assert_eq!(
            lib == -1,
            address == -1,
            "frame {i}: an address in a library"
        );
    }
    let stack_frame = column(st, "frame");
    let stack_prefix = column(st, "prefixOffset");
    for (i, (f, p)) in stack_frame.iter().zip(stack_prefix).enumerate() {
        assert!(index(f, "stack frame") < frames);
        assert!(
            index(p, "prefix offset") <= i,
            "stack {i}'s prefix comes after it"
        );
    }
    let names_of = |mut stack: usize| {
        let mut names = Vec::new();
        loop {
            let frame = index(&stack_frame[stack], "frame");
            let func = index(&column(fr, "func")[frame], "func");
            let name = index(&column(ft, "name")[func], "name");
            names.push(strings[name].to_string());
            match index(&stack_prefix[stack], "prefix offset") {
                0 => break,
                offset => stack -= offset,
            }
        }
        names.reverse();
        names
    };
    let mut threads = Vec::new();
    for th in json["threads"].as_array().expect("threads") {
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
    let (json, threads) = read_processed(&file);
    let errors = profd_e2e::views::firefox_type_errors(&file);
    assert!(
        errors.is_empty(),
        "the export breaks the Firefox Profiler's types:\n{}",
        errors.join("\n")
    );
    frames_are_in_their_library(&json, &phases);
    read_by_the_firefox_profiler(&file, &json, &phases, &p);
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

/// The Firefox Profiler's own loader (a newer format version than the
/// file's, which it upgrades) reads the timeline as profd counted it: the
/// workload's process, phase_a and phase_b in their library with the
/// exclusive counts of the session, and phase_a's library by path and
/// Breakpad id, its samples of category User.
fn read_by_the_firefox_profiler(file: &Path, json: &Value, binary: &Path, p: &Profile) {
    let f = FirefoxProfiler::load(file);
    let info = f.json(&["profile", "info"]);
    let processes = info["processes"].as_array().expect("processes");
    let pid = p.pid.to_string();
    assert!(
        processes.len() == 1 && processes[0]["pid"].as_str() == Some(&pid),
        "{info}"
    );
    let functions = f.json(&["thread", "functions", "--limit", "0"]);
    let row = |name: &str| {
        (functions["functions"].as_array().expect("functions").iter())
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("the Firefox Profiler has no {name}: {functions}"))
    };
    for name in ["phase_a", "phase_b"] {
        let ours = (p.functions.iter())
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("profd has no {name}:\n{}", p.table()));
        let r = row(name);
        assert_eq!(r["library"], "phases", "{r}");
        assert_eq!(r["selfSamples"].as_u64(), Some(ours.exclusive), "{r}");
    }
    let handle = row("phase_a")["functionHandle"]
        .as_str()
        .unwrap()
        .to_string();
    let about = f.json(&["function", "info", &handle]);
    let lib = &about["library"];
    let ours = (json["libs"].as_array().unwrap().iter())
        .find(|l| l["path"] == path_str(binary))
        .expect("the workload's library");
    assert_eq!(lib["path"], path_str(binary), "{about}");
    assert_eq!(lib["breakpadId"], ours["breakpadId"], "{about}");
    let categories = about["categoryBreakdown"]["running"]["categories"]
        .as_array()
        .expect("categories");
    let most = categories
        .iter()
        .max_by_key(|c| c["samples"].as_u64())
        .expect("a category");
    assert_eq!(most["name"], "User", "{about}");
}

/// The frames of phase_a in the export of `phases`' timeline: in the
/// library of the workload's binary (its path, build id as `codeId`,
/// Breakpad id of 33 uppercase hex digits, machine), at addresses within
/// phase_a as `nm` gives it relative to the first load segment
/// (`readelf`), from phases.c at a line, of category User. Then the check
/// of the types is shown to fail on a broken copy of the file: a version
/// that is a string, and the frame table without its `lib` column.
fn frames_are_in_their_library(json: &Value, binary: &Path) {
    let tool = |program: &str, args: &[&str]| -> String {
        let out = std::process::Command::new(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(out.status.success(), "{program} {args:?} failed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let nm = tool("nm", &["-S", "--defined-only", path_str(binary)]);
    let (start, size) = nm
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4 && f[3] == "phase_a").then(|| {
                let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
                (hex(f[0]), hex(f[1]))
            })
        })
        .unwrap_or_else(|| panic!("no phase_a in nm's output:\n{nm}"));
    let readelf = tool("readelf", &["-lW", path_str(binary)]);
    let first_load = readelf
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&"LOAD"))
                .then(|| u64::from_str_radix(f[2].trim_start_matches("0x"), 16).unwrap())
        })
        .expect("a load segment");
    let (start, end) = (start - first_load, start - first_load + size);

    let libs = json["libs"].as_array().unwrap();
    let shared = &json["shared"];
    let strings = shared["stringArray"].as_array().unwrap();
    let (fr, ft) = (&shared["frameTable"], &shared["funcTable"]);
    let mut seen = 0;
    for i in 0..index(&fr["length"], "length") {
        let func = index(&fr["func"][i], "func");
        if strings[index(&ft["name"][func], "name")] != "phase_a" {
            continue;
        }
        seen += 1;
        let lib = &libs[index(&fr["lib"][i], "phase_a's library")];
        assert_eq!(lib["path"], path_str(binary), "{lib}");
        assert_eq!(lib["name"], "phases", "{lib}");
        assert_eq!(lib["debugName"], "phases", "{lib}");
        assert_eq!(lib["arch"], std::env::consts::ARCH, "{lib}");
        let code_id = lib["codeId"].as_str().expect("a build id");
        assert!(
            code_id.len() >= 16 && code_id.chars().all(|c| c.is_ascii_hexdigit()),
            "{lib}"
        );
        let breakpad = lib["breakpadId"].as_str().unwrap();
        assert!(
            breakpad.len() == 33 && !breakpad.chars().any(|c| c.is_ascii_lowercase()),
            "{lib}"
        );
        // The GUID's last 8 bytes are the build id's bytes 8..16 as they are.
        assert_eq!(breakpad[16..32], code_id[16..32].to_uppercase(), "{lib}");
        let address = fr["address"][i].as_u64().expect("an address");
        assert!(
            (start..end).contains(&address),
            "phase_a's frame at {address:#x}, not in {start:#x}..{end:#x}"
        );
        let source = index(&ft["source"][func], "phase_a's source");
        let file = strings[index(&shared["sources"]["filename"][source], "file")]
            .as_str()
            .unwrap();
        assert!(file.ends_with("phases.c"), "{file}");
        assert!(fr["line"][i].as_u64().is_some_and(|l| l > 0), "no line");
        let category = index(&fr["category"][i], "category");
        assert_eq!(json["meta"]["categories"][category]["name"], "User");
    }
    assert!(seen > 0, "no frame of phase_a");

    let mut broken = json.clone();
    broken["meta"]["preprocessedProfileVersion"] = "70".into();
    broken["shared"]["frameTable"]
        .as_object_mut()
        .unwrap()
        .remove("lib");
    let file = profd_e2e::unique_dir("timeline-broken").join("broken.json");
    std::fs::write(&file, serde_json::to_vec(&broken).unwrap()).unwrap();
    let errors = profd_e2e::views::firefox_type_errors(&file);
    let said = |what: &str| errors.iter().any(|e| e.contains(what));
    assert!(
        errors.len() == 2
            && said("Type 'string' is not assignable to type 'number'")
            && said("Property 'lib' is missing"),
        "tsc let a broken file through: {errors:?}"
    );
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
