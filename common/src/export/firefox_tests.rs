//! Tests of the Firefox Profiler export: the processed profile's own
//! tables read back.
use super::*;
use crate::model::{FrameRef, FunctionInfo, LibMapping, Library, ResolvedStack, TimelineMarker};
use serde_json::Value;

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

/// One frame of a sample read back from the file: its function's name,
/// its library's name (None: -1), its address (-1: none), its line, its
/// func's source file, its inline depth and its category's name.
#[derive(Debug, PartialEq)]
struct Read {
    name: String,
    lib: Option<String>,
    address: i64,
    line: Option<u64>,
    file: Option<String>,
    depth: u64,
    category: String,
}

/// The frames of every sample of thread `tid`, outermost first, with the
/// sample's time (ms); checks the tables' lengths and indices on the way.
fn samples(json: &Value, tid: u64) -> Vec<(f64, Vec<Read>)> {
    let shared = &json["shared"];
    let strings = shared["stringArray"].as_array().unwrap();
    let string = |v: &Value| strings[v.as_u64().unwrap() as usize].as_str().unwrap();
    for (table, columns) in [
        ("stackTable", &["frame", "prefixOffset"][..]),
        (
            "frameTable",
            &[
                "address",
                "lib",
                "inlineDepth",
                "category",
                "subcategory",
                "func",
                "nativeSymbol",
                "innerWindowID",
                "line",
                "column",
                "originalLocation",
            ][..],
        ),
        (
            "funcTable",
            &[
                "name",
                "isJS",
                "relevantForJS",
                "resource",
                "source",
                "lineNumber",
                "columnNumber",
                "originalLocation",
            ][..],
        ),
        ("resourceTable", &["name", "host", "type"][..]),
        (
            "sources",
            &[
                "id",
                "filename",
                "startLine",
                "startColumn",
                "sourceMapURL",
                "content",
            ][..],
        ),
    ] {
        let n = shared[table]["length"].as_u64().unwrap() as usize;
        for c in columns {
            let column = shared[table][c].as_array();
            assert_eq!(column.map(Vec::len), Some(n), "{table}.{c}");
        }
    }
    let th = json["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|th| th["tid"] == tid)
        .unwrap_or_else(|| panic!("no thread {tid}: {json}"));
    let (st, fr, fu) = (
        &shared["stackTable"],
        &shared["frameTable"],
        &shared["funcTable"],
    );
    let categories = json["meta"]["categories"].as_array().unwrap();
    let libs = json["libs"].as_array().unwrap();
    let mut time = 0.0;
    let s = &th["samples"];
    s["stack"]
        .as_array()
        .unwrap()
        .iter()
        .zip(s["timeDeltas"].as_array().unwrap())
        .map(|(stack, delta)| {
            time += delta.as_f64().unwrap();
            let mut out = Vec::new();
            let mut at = stack.as_u64().unwrap() as usize;
            loop {
                let frame = st["frame"][at].as_u64().unwrap() as usize;
                let func = fr["func"][frame].as_u64().unwrap() as usize;
                let lib = fr["lib"][frame].as_i64().unwrap();
                let source = &fu["source"][func];
                let category = fr["category"][frame].as_u64().unwrap() as usize;
                out.push(Read {
                    name: string(&fu["name"][func]).to_string(),
                    lib: (lib >= 0).then(|| libs[lib as usize]["name"].to_string()),
                    address: fr["address"][frame].as_i64().unwrap(),
                    line: fr["line"][frame].as_u64(),
                    file: source
                        .as_u64()
                        .map(|i| string(&shared["sources"]["filename"][i as usize]).to_string()),
                    depth: fr["inlineDepth"][frame].as_u64().unwrap(),
                    category: categories[category]["name"].as_str().unwrap().into(),
                });
                match st["prefixOffset"][at].as_u64().unwrap() as usize {
                    0 => break,
                    offset => at -= offset,
                }
            }
            out.reverse();
            (time, out)
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
        monotonic_zero_unix_ms: 1.7e12,
        ..Default::default()
    };
    let names = HashMap::from([(10, "app".to_string()), (11, "kid".to_string())]);
    let json: Value = serde_json::from_slice(&firefox(&p, &t, &names)).unwrap();
    assert_eq!(json["meta"]["startTime"], 1.7e12);
    assert_eq!(
        json["meta"]["preprocessedProfileVersion"],
        PROCESSED_PROFILE_VERSION
    );
    let leaves = |tid| -> Vec<(f64, String)> {
        samples(&json, tid)
            .into_iter()
            .map(|(time, frames)| (time, frames.last().unwrap().name.clone()))
            .collect()
    };
    assert_eq!(
        leaves(10),
        [(5.0, "phase_a".into()), (6.0, "phase_a".into())]
    );
    assert_eq!(leaves(12), [(7.5, "phase_b".into())]);
    assert_eq!(leaves(11), [(9.0, "child_main".into())]);
    let threads = json["threads"].as_array().unwrap();
    let by_tid = |tid: u32| threads.iter().find(|th| th["tid"] == tid).unwrap();
    assert_eq!(by_tid(12)["name"], "worker");
    assert_eq!(by_tid(12)["isMainThread"], false);
    assert_eq!(by_tid(11)["pid"], "11");
    assert_eq!(by_tid(11)["processName"], "kid");
    assert_eq!(by_tid(11)["processShutdownTime"], 9.5);
    // Each process's main thread first, processes in order of start.
    let order: Vec<u64> = threads
        .iter()
        .map(|th| th["tid"].as_u64().unwrap())
        .collect();
    assert_eq!(order, [10, 12, 11]);
    // CPU samples each stand for one period of CPU time.
    assert_eq!(json["meta"]["sampleUnits"]["threadCPUDelta"], "ns");
    assert_eq!(by_tid(10)["samples"]["threadCPUDelta"][0], 1_000_000);
    // Markers on the processes' main threads.
    let strings = json["shared"]["stringArray"].as_array().unwrap();
    let markers = |th: &Value| -> Vec<(String, f64, String)> {
        let m = &th["markers"];
        (0..m["length"].as_u64().unwrap() as usize)
            .map(|i| {
                let n = m["name"][i].as_u64().unwrap() as usize;
                assert_eq!(m["data"][i]["type"], "Text");
                (
                    strings[n].as_str().unwrap().to_string(),
                    m["startTime"][i].as_f64().unwrap(),
                    m["data"][i]["name"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    assert_eq!(
        markers(by_tid(10)),
        [("start".into(), 4.0, "profiling pid 10".into())]
    );
    assert_eq!(
        markers(by_tid(11)),
        [
            ("exec".into(), 8.0, "kid".into()),
            ("exit".into(), 9.5, "pid 11".into())
        ]
    );
    assert_eq!(json["meta"]["markerSchema"][0]["name"], "Text");
}

/// A known build id's Breakpad id: the first 16 bytes as a GUID whose
/// first three fields are swapped, then age 0; a short or missing id is
/// padded with zeros.
#[test]
fn breakpad_ids_swap_the_guid_fields() {
    assert_eq!(
        breakpad_id("b8f0c6b7a3d2e1f00112233445566778899aabbc"),
        "B7C6F0B8D2A3F0E101122334455667780"
    );
    assert_eq!(
        breakpad_id("0102"),
        "00000201".to_string() + &"0".repeat(24) + "0"
    );
    assert_eq!(breakpad_id(""), "0".repeat(33));
    assert_eq!(breakpad_id("zz"), "0".repeat(33));
}

/// Frames of user code in two libraries mapped in two address spaces,
/// kernel, JIT, interpreted and off-CPU frames: each frame's library and
/// library-relative address, source file and line, inline depth and
/// category, and the libraries with their ids.
#[test]
fn frames_have_their_library_address_line_and_category() {
    let f = |name: &str, module: &str, file: &str, inlined: bool| FunctionInfo {
        name: name.into(),
        module: module.into(),
        file: file.into(),
        inlined,
        origin: None,
    };
    let functions = vec![
        f("main", "app", "/src/app.c", false),
        f("helper", "app", "/src/app.c", true),
        f("memcpy", "libc.so.6", "", false),
        f("do_syscall_64", "[kernel]", "", false),
        f("jitted", "[jit]", "", false),
        f("py_work", "[python]", "/src/work.py", false),
        f("[off-cpu: blocked]", "[profd]", "", false),
        f("[stack limit reached]", "[profd]", "", false),
    ];
    let fr = |function, line, address| FrameRef {
        function,
        line,
        address,
    };
    const K: u64 = 0xffff_ffff_8100_1234;
    let stacks = vec![
        // Space 1: kernel, libc, helper inlined into main at one address.
        ResolvedStack {
            tid: 10,
            frames: vec![
                fr(3, 0, K),
                fr(2, 0, 0x7f00_0000_2345),
                fr(1, 12, 0x5555_0000_1100),
                fr(0, 40, 0x5555_0000_1100),
            ],
            count: 1,
        },
        // Space 2 (after an exec): app mapped elsewhere; JIT and Python.
        ResolvedStack {
            tid: 10,
            frames: vec![
                fr(4, 0, 0x7e00_0000_0010),
                fr(5, 7, 0),
                fr(0, 41, 0x6666_0000_2200),
            ],
            count: 1,
        },
        ResolvedStack {
            tid: 10,
            frames: vec![fr(6, 0, 0), fr(7, 0, 0)],
            count: 1,
        },
    ];
    let p = ResolvedProfile {
        functions,
        stacks,
        thread_pids: HashMap::from([(10, 10)]),
        attributed: 3,
        frequency_hz: 100,
        pid: 10,
        comm: "app".into(),
        mode: crate::api::Mode::Wall,
        ..Default::default()
    };
    let lib = |name: &str, path: &str, build_id: &str| Library {
        name: name.into(),
        path: path.into(),
        build_id: build_id.into(),
        arch: "x86_64".into(),
    };
    let t = Timeline {
        samples: vec![(1_000_000, 0), (2_000_000, 1), (3_000_000, 2)],
        libs: vec![
            lib(
                "app",
                "/bin/app",
                "00112233445566778899aabbccddeeff01234567",
            ),
            lib("libc.so.6", "/lib/libc.so.6", ""),
        ],
        lib_maps: vec![
            LibMapping {
                space: 1,
                start: 0x5555_0000_1000,
                end: 0x5555_0000_2000,
                lib: 0,
                base: 0x5555_0000_0000,
            },
            LibMapping {
                space: 1,
                start: 0x7f00_0000_2000,
                end: 0x7f00_0000_3000,
                lib: 1,
                base: 0x7f00_0000_0000,
            },
            LibMapping {
                space: 2,
                start: 0x6666_0000_2000,
                end: 0x6666_0000_3000,
                lib: 0,
                base: 0x6666_0000_0000,
            },
        ],
        stack_spaces: vec![1, 2, 2],
        ..Default::default()
    };
    let json: Value = serde_json::from_slice(&firefox(&p, &t, &HashMap::new())).unwrap();
    let read =
        |name: &str, lib: Option<&str>, address, line, file: Option<&str>, depth, cat: &str| Read {
            name: name.into(),
            lib: lib.map(|l| format!("\"{l}\"")),
            address,
            line,
            file: file.map(Into::into),
            depth,
            category: cat.into(),
        };
    let s = samples(&json, 10);
    assert_eq!(
        s[0].1,
        [
            read(
                "main",
                Some("app"),
                0x1100,
                Some(40),
                Some("/src/app.c"),
                0,
                "User"
            ),
            read(
                "helper [inlined]",
                Some("app"),
                0x1100,
                Some(12),
                Some("/src/app.c"),
                1,
                "User"
            ),
            read("memcpy", Some("libc.so.6"), 0x2345, None, None, 0, "User"),
            read("do_syscall_64", None, -1, None, None, 0, "Kernel"),
        ]
    );
    assert_eq!(
        s[1].1,
        [
            read(
                "main",
                Some("app"),
                0x2200,
                Some(41),
                Some("/src/app.c"),
                0,
                "User"
            ),
            read(
                "py_work",
                None,
                -1,
                Some(7),
                Some("/src/work.py"),
                0,
                "Interpreter"
            ),
            read("jitted", None, -1, None, None, 0, "JIT"),
        ]
    );
    assert_eq!(s[2].1[1].category, "Off-CPU");
    assert_eq!(s[2].1[0].category, "Other");
    // Python's subcategory, and the off-CPU frame's.
    let categories = json["meta"]["categories"].as_array().unwrap();
    let sub = |cat: usize, i: usize| categories[cat]["subcategories"][i].clone();
    let fr = &json["shared"]["frameTable"];
    let subcategory_of = |name: &str| {
        let strings = json["shared"]["stringArray"].as_array().unwrap();
        let i = (0..fr["length"].as_u64().unwrap() as usize)
            .find(|&i| {
                let func = fr["func"][i].as_u64().unwrap() as usize;
                let n = json["shared"]["funcTable"]["name"][func].as_u64().unwrap() as usize;
                strings[n] == name
            })
            .unwrap();
        sub(
            fr["category"][i].as_u64().unwrap() as usize,
            fr["subcategory"][i].as_u64().unwrap() as usize,
        )
    };
    assert_eq!(subcategory_of("py_work"), "Python");
    assert_eq!(subcategory_of("[off-cpu: blocked]"), "Blocked");
    // The first category is the grey default.
    assert_eq!(categories[0]["color"], "grey");
    // Libraries with their ids; the resources of their functions.
    let libs = json["libs"].as_array().unwrap();
    assert_eq!(libs.len(), 2);
    assert_eq!(libs[0]["name"], "app");
    assert_eq!(libs[0]["path"], "/bin/app");
    assert_eq!(libs[0]["debugName"], "app");
    assert_eq!(libs[0]["debugPath"], "/bin/app");
    assert_eq!(
        libs[0]["codeId"],
        "00112233445566778899aabbccddeeff01234567"
    );
    assert_eq!(libs[0]["breakpadId"], "33221100554477668899AABBCCDDEEFF0");
    assert_eq!(libs[0]["arch"], "x86_64");
    assert_eq!(libs[1]["codeId"], Value::Null);
    let res = &json["shared"]["resourceTable"];
    let strings = json["shared"]["stringArray"].as_array().unwrap();
    let kinds: HashMap<String, u64> = (0..res["length"].as_u64().unwrap() as usize)
        .map(|i| {
            let n = res["name"][i].as_u64().unwrap() as usize;
            (
                strings[n].as_str().unwrap().to_string(),
                res["type"][i].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(kinds["app"], 1, "{kinds:?}");
    assert_eq!(kinds["libc.so.6"], 1);
    assert_eq!(kinds["[kernel]"], 0);
    // Not CPU samples: no CPU deltas.
    assert!(json["meta"].get("sampleUnits").is_none());
    assert!(json["threads"][0]["samples"]
        .get("threadCPUDelta")
        .is_none());
}

/// Merged stacks keep their spaces: a remap after kernel frames are
/// folded points the spaces at the stacks they became.
#[test]
fn a_remap_keeps_the_stacks_spaces() {
    let mut t = Timeline {
        samples: vec![(1, 0), (2, 1), (3, 2)],
        stack_spaces: vec![4, 4, 5],
        lib_maps: vec![LibMapping {
            space: 5,
            start: 0x1000,
            end: 0x2000,
            lib: 0,
            base: 0x800,
        }],
        ..Default::default()
    };
    t.remap(&[0, 0, 1]);
    assert_eq!(t.samples, [(1, 0), (2, 0), (3, 1)]);
    assert_eq!(t.stack_spaces, [4, 5]);
    assert_eq!(t.lib_of(1, 0x1800), Some((0, 0x1000)));
    assert_eq!(t.lib_of(0, 0x1800), None, "another space");
    assert_eq!(t.lib_of(1, 0x2000), None, "past the mapping");
    assert_eq!(t.lib_of(1, 0xffff_ffff_8100_0000), None, "kernel");
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
        ..Default::default()
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
