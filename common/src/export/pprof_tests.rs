//! Unit tests of the pprof export and reader: structure of the encoded
//! profile, round trips, and files as Go writes them.
use std::collections::BTreeMap;

use super::*;
use crate::api::Mode;
use crate::testdata::known;
use crate::views;

fn raw(p: &ResolvedProfile) -> pb::Profile {
    let bytes = pprof(p);
    assert_eq!(&bytes[..2], &[0x1f, 0x8b], "gzip'd");
    let mut v = Vec::new();
    MultiGzDecoder::new(&bytes[..]).read_to_end(&mut v).unwrap();
    pb::Profile::decode(&v[..]).unwrap()
}

/// (function name, inlined, line, address) of a frame.
type Frame = (String, bool, u32, u64);

/// name (with ` [inlined]`) → (module, inclusive, exclusive).
fn figures(p: &ResolvedProfile) -> BTreeMap<String, (String, u64, u64)> {
    views::functions(p)
        .into_iter()
        .map(|f| {
            let name = if f.inlined {
                format!("{} [inlined]", f.name)
            } else {
                f.name
            };
            (name, (f.module, f.inclusive, f.exclusive))
        })
        .collect()
}

#[test]
fn encoded_structure() {
    let p = known();
    let prof = raw(&p);
    let s = |i: i64| prof.string_table[i as usize].as_str();
    assert_eq!(s(0), "");
    let types: Vec<(&str, &str)> = prof
        .sample_type
        .iter()
        .map(|t| (s(t.r#type), s(t.unit)))
        .collect();
    assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
    let pt = prof.period_type.unwrap();
    assert_eq!(
        (s(pt.r#type), s(pt.unit), prof.period),
        ("cpu", "nanoseconds", 1_000_000)
    );
    assert_eq!(s(prof.default_sample_type), "samples");
    assert_eq!(prof.duration_nanos, 2_500_000_000);
    assert_eq!(prof.sample.len(), 5);
    for (sample, stack) in prof.sample.iter().zip(&p.stacks) {
        assert_eq!(
            sample.value,
            [stack.count as i64, stack.count as i64 * 1_000_000]
        );
        assert_eq!(s(sample.label[0].key), "tid");
        assert_eq!(sample.label[0].num, i64::from(stack.tid));
    }
    // inl [inlined] b at one address: one location with two lines, inner first.
    let inl_sample = &prof.sample[4];
    assert_eq!(inl_sample.location_id.len(), 2);
    let loc = &prof.location[(inl_sample.location_id[0] - 1) as usize];
    assert_eq!(loc.id, inl_sample.location_id[0]);
    let lines: Vec<(u64, i64)> = loc.line.iter().map(|l| (l.function_id, l.line)).collect();
    assert_eq!(lines, [(6, 50), (3, 21)]);
    // r r r main: repeated frames at one address reuse a location.
    let r = &prof.sample[3].location_id;
    assert_eq!(r.len(), 4);
    assert_eq!(r[1], r[2]);
    // Mappings per module with the frames' address range, the program first.
    let maps: Vec<(&str, u64, u64)> = prof
        .mapping
        .iter()
        .map(|m| (s(m.filename), m.memory_start, m.memory_limit))
        .collect();
    assert_eq!(maps, [("prog", 0x50, 0x402), ("libc.so.6", 0x7f00, 0x7f02)]);
    // Functions: only those on stacks, id = profd id + 1.
    let f: Vec<(u64, &str, &str)> = prof
        .function
        .iter()
        .map(|f| (f.id, s(f.name), s(f.filename)))
        .collect();
    assert_eq!(f.len(), 6);
    assert_eq!(f[3], (4, "c", "c.c"));
}

#[test]
fn round_trip_keeps_figures_and_inline_flags() {
    let p = known();
    let back = pprof_decode(&pprof(&p)).unwrap();
    assert_eq!(figures(&back), figures(&p));
    assert_eq!(back.attributed, 12);
    assert_eq!(back.frequency_hz, 1000);
    assert_eq!(back.duration_s, 2.5);
    assert_eq!((back.pid, back.comm.as_str()), (1234, "prog"));
    assert_eq!(back.threads, p.threads);
    // The same stacks, frame for frame (names, lines, addresses, threads).
    let show = |q: &ResolvedProfile| {
        let mut v: Vec<(u32, Vec<Frame>, u64)> = q
            .stacks
            .iter()
            .map(|s| {
                let frames = s
                    .frames
                    .iter()
                    .map(|f| {
                        let info = &q.functions[f.function as usize];
                        (info.name.clone(), info.inlined, f.line, f.address)
                    })
                    .collect();
                (s.tid, frames, s.count)
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(show(&back), show(&p));
    let inl = back.functions.iter().find(|f| f.name == "inl").unwrap();
    assert!(inl.inlined);
    assert_eq!(inl.file, "inl.h");
    let b: Vec<_> = back.functions.iter().filter(|f| f.name == "b").collect();
    assert_eq!(b.len(), 1, "b is a caller both times, not inlined");
    assert!(!b[0].inlined);
    // Views agree too.
    let tree = |q: &ResolvedProfile| {
        views::call_tree(q, views::Direction::TopDown, 0.0, 0)
            .iter()
            .map(|n| {
                (
                    q.functions[n.function_id as usize].name.clone(),
                    n.depth,
                    n.inclusive,
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(tree(&back), tree(&p));
}

#[test]
fn reads_plain_and_odd_frequencies() {
    let mut p = known();
    p.frequency_hz = 999;
    let bytes = pprof(&p);
    let mut plain = Vec::new();
    MultiGzDecoder::new(&bytes[..])
        .read_to_end(&mut plain)
        .unwrap();
    let back = pprof_decode(&plain).unwrap();
    assert_eq!(back.frequency_hz, 999);
    assert_eq!(figures(&back), figures(&p));
    let prof = raw(&p);
    assert_eq!(prof.sample[0].value[1], 3_000_000_000 / 999);
}

#[test]
fn empty_profile_round_trips() {
    let back = pprof_decode(&pprof(&ResolvedProfile::default())).unwrap();
    assert!(back.stacks.is_empty() && back.functions.is_empty());
    assert_eq!(back.attributed, 0);
}

#[test]
fn go_style_profile() {
    // As Go writes CPU profiles: no tid label, Line[0] inlined into Line[1],
    // an unsymbolized location, a mapping with a path, 10 ms period.
    let strings = [
        "",
        "samples",
        "count",
        "cpu",
        "nanoseconds",
        "main.main",
        "main.inner",
        "/usr/bin/app",
        "app.go",
    ];
    let prof = pb::Profile {
        sample_type: vec![
            pb::ValueType { r#type: 1, unit: 2 },
            pb::ValueType { r#type: 3, unit: 4 },
        ],
        sample: vec![
            pb::Sample {
                location_id: vec![2, 1],
                value: vec![7, 70_000_000],
                label: vec![],
            },
            pb::Sample {
                location_id: vec![1],
                value: vec![3, 30_000_000],
                label: vec![],
            },
            pb::Sample {
                location_id: vec![1],
                value: vec![0, 0],
                label: vec![],
            },
        ],
        mapping: vec![pb::Mapping {
            id: 1,
            memory_start: 0x400000,
            memory_limit: 0x500000,
            file_offset: 0x1000,
            filename: 7,
            ..Default::default()
        }],
        location: vec![
            pb::Location {
                id: 1,
                mapping_id: 1,
                address: 0x400100,
                line: vec![],
                is_folded: false,
            },
            pb::Location {
                id: 2,
                mapping_id: 1,
                address: 0x400200,
                line: vec![
                    pb::Line {
                        function_id: 2,
                        line: 9,
                        column: 0,
                    },
                    pb::Line {
                        function_id: 1,
                        line: 4,
                        column: 0,
                    },
                ],
                is_folded: false,
            },
        ],
        function: vec![
            pb::Function {
                id: 1,
                name: 5,
                system_name: 5,
                filename: 8,
                start_line: 1,
            },
            pb::Function {
                id: 2,
                name: 6,
                system_name: 6,
                filename: 8,
                start_line: 8,
            },
        ],
        string_table: strings.iter().map(|s| s.to_string()).collect(),
        period_type: Some(pb::ValueType { r#type: 3, unit: 4 }),
        period: 10_000_000,
        ..Default::default()
    };
    let p = pprof_decode(&prof.encode_to_vec()).unwrap();
    assert_eq!(p.frequency_hz, 100);
    assert_eq!(p.attributed, 10);
    let f = figures(&p);
    assert_eq!(f["main.inner [inlined]"], ("app".to_string(), 7, 7));
    assert_eq!(f["main.main"], ("app".to_string(), 7, 0));
    assert_eq!(f["app+0x1100"], ("app".to_string(), 10, 3));
    assert!(p.stacks.iter().all(|s| s.tid == 0));

    let mut bad = prof.clone();
    bad.sample[0].location_id = vec![9];
    assert!(matches!(
        pprof_decode(&bad.encode_to_vec()),
        Err(ExportError::Invalid(_))
    ));
    let mut bad = prof;
    bad.function[0].name = 99;
    assert!(matches!(
        pprof_decode(&bad.encode_to_vec()),
        Err(ExportError::Invalid(_))
    ));
    assert!(matches!(
        pprof_decode(b"\x1f\x8bnot gzip"),
        Err(ExportError::Gzip(_))
    ));
    assert!(matches!(
        pprof_decode(b"\xff\xff\xff"),
        Err(ExportError::Decode(_))
    ));
}

#[test]
fn program_mapping_first() {
    let mut p = known();
    p.comm.clear();
    p.functions[0].module = "[kernel]".into();
    let prof = raw(&p);
    let s = |i: i64| prof.string_table[i as usize].as_str();
    let files: Vec<&str> = prof.mapping.iter().map(|m| s(m.filename)).collect();
    // Neither [kernel] nor libc.so.6: the first module that looks like a program.
    assert_eq!(files[0], "prog");
    assert!(is_library("libc.so.6") && is_library("[vdso]") && !is_library("prog"));
    assert!(is_main_binary(
        "a_very_long_program_name",
        "a_very_long_pro"
    ));
    assert!(!is_main_binary("prog2", "prog") && !is_main_binary("x", ""));
}

#[test]
fn off_cpu_and_wall_profiles_are_nanoseconds_and_round_trip_their_mode() {
    let p = crate::testdata::off_cpu();
    let prof = raw(&p);
    let s = |i: i64| prof.string_table[i as usize].as_str();
    let types: Vec<(&str, &str)> = prof
        .sample_type
        .iter()
        .map(|t| (s(t.r#type), s(t.unit)))
        .collect();
    assert_eq!(types, [("off_cpu", "nanoseconds")]);
    let pt = prof.period_type.unwrap();
    assert_eq!(
        (s(pt.r#type), s(pt.unit), prof.period),
        ("off_cpu", "nanoseconds", 0)
    );
    assert_eq!(s(prof.default_sample_type), "off_cpu");
    for (sample, stack) in prof.sample.iter().zip(&p.stacks) {
        assert_eq!(sample.value, [stack.count as i64]);
    }
    let back = pprof_decode(&pprof(&p)).unwrap();
    assert_eq!(back.mode, Mode::OffCpu);
    assert_eq!(back.attributed, 12_000_000);
    assert_eq!(back.frequency_hz, 0, "no sampling period");
    assert_eq!(figures(&back), figures(&p));

    let mut wall = p.clone();
    wall.mode = Mode::Wall;
    let prof = raw(&wall);
    let s = |i: i64| prof.string_table[i as usize].as_str();
    let t = &prof.sample_type;
    assert_eq!(
        (t.len(), s(t[0].r#type), s(t[0].unit)),
        (1, "wall", "nanoseconds")
    );
    assert_eq!(prof.period, 1_000_000, "the on-CPU samples' period");
    let back = pprof_decode(&pprof(&wall)).unwrap();
    assert_eq!((back.mode, back.frequency_hz), (Mode::Wall, 1000));
    assert_eq!(figures(&back), figures(&wall));

    // CPU profiles stay samples; files of other tools are read as such.
    assert_eq!(pprof_decode(&pprof(&known())).unwrap().mode, Mode::Cpu);
    assert_eq!(
        pprof(&known()),
        pprof(&ResolvedProfile {
            mode: Mode::Unspecified,
            ..known()
        })
    );
}

/// `go tool pprof ARGS FILE` with a go cache of its own; fails (does not
/// skip) when go is missing.
fn go_pprof(file: &std::path::Path, args: &[&str]) -> String {
    let home = std::env::temp_dir().join(format!("profd-common-go-{}", std::process::id()));
    let out = std::process::Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        .env("HOME", &home)
        .env("GOCACHE", home.join("cache"))
        .env("GOPATH", home.join("path"))
        .env("GOTOOLCHAIN", "local")
        .output()
        .expect("go runs (CI installs Debian's golang-go)");
    assert!(
        out.status.success(),
        "go tool pprof failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn go_tool_pprof_reads_off_cpu_time() {
    let dir = std::env::temp_dir().join(format!("profd-common-pprof-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("off-cpu.pb.gz");
    std::fs::write(&file, pprof(&crate::testdata::off_cpu())).unwrap();
    let top = go_pprof(
        &file,
        &["-top", "-nodefraction=0", "-symbolize=none", "-unit=ms"],
    );
    assert!(top.contains("Type: off_cpu"), "{top}");
    assert!(top.contains("of 12ms total"), "{top}");
    // Flat: c 3 + 2 ms, r 4 ms, inl 2 ms, a 1 ms; cum of the wait frame 12 ms.
    let flat = |name: &str| {
        top.lines()
            .find(|l| l.split_whitespace().nth(5) == Some(name))
            .map(|l| l.split_whitespace().next().unwrap().to_string())
    };
    assert_eq!(flat("c").as_deref(), Some("5ms"), "{top}");
    assert_eq!(flat("r").as_deref(), Some("4ms"), "{top}");
    assert_eq!(flat("a").as_deref(), Some("1ms"), "{top}");
    let raw = go_pprof(&file, &["-raw", "-symbolize=none"]);
    assert!(raw.contains("PeriodType: off_cpu nanoseconds"), "{raw}");
    assert!(raw.contains("off_cpu/nanoseconds"), "{raw}");
    assert!(raw.contains("4000000: "), "r r r main, 4 ms: {raw}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// [`known`] with `n` more stacks of its first one's frames (c a main),
/// each with a leaf address of its own (so a location of its own).
fn with_stacks(n: u64) -> ResolvedProfile {
    let mut p = known();
    let first = p.stacks[0].clone();
    for k in 0..n {
        let mut s = first.clone();
        s.frames[0].address = 0x10_0000 + k * 16;
        s.tid = 10 + (k % 3) as u32;
        s.count = 1 + k % 5;
        p.attributed += s.count;
        p.stacks.push(s);
    }
    p
}

#[test]
fn streamed_pieces_make_the_export() {
    let p = with_stacks(5000);
    let whole = pprof(&p);
    let mut inflated = Vec::new();
    MultiGzDecoder::new(&whole[..])
        .read_to_end(&mut inflated)
        .unwrap();
    let prof = pb::Profile::decode(&inflated[..]).unwrap();
    // Each field once and in order: the bytes prost gives the message whole.
    assert!(prof.encode_to_vec() == inflated, "not prost's encoding");
    assert_eq!(prof.sample.len(), p.stacks.len());
    for (sample, stack) in prof.sample.iter().zip(&p.stacks) {
        assert_eq!(sample.value[0], stack.count as i64);
        assert_eq!(sample.label[0].num, i64::from(stack.tid));
    }
    for (k, sample) in prof.sample[5..].iter().enumerate() {
        let leaf = &prof.location[sample.location_id[0] as usize - 1];
        assert_eq!(leaf.address, 0x10_0000 + k as u64 * 16);
        assert_eq!(sample.location_id[1..], prof.sample[0].location_id[1..]);
    }
    // known's 11 (inl and b at one address are one) and a leaf a stack.
    assert_eq!(prof.location.len(), 11 + 5000);
    assert_eq!(pprof_decode(&whole).unwrap().attributed, p.attributed);
    for size in [1, 100, 4096, whole.len(), usize::MAX] {
        let mut pieces = Vec::new();
        pprof_pieces(&p, size, |piece| {
            pieces.push(piece);
            true
        });
        let (last, full) = pieces.split_last().unwrap();
        assert!(full.iter().all(|piece| piece.len() == size));
        assert!(!last.is_empty() && last.len() <= size);
        assert!(pieces.concat() == whole, "pieces of {size} bytes");
        if size == 100 {
            assert!(pieces.len() > 10, "{} pieces", pieces.len());
        }
    }
    // Stopped after the first piece.
    let mut n = 0;
    pprof_pieces(&p, 100, |_| {
        n += 1;
        false
    });
    assert_eq!(n, 1);
}

/// A profile encoded from its head and its stacks given one at a time (as
/// a session saves itself) is the export of the whole profile, whatever
/// stacks the head holds.
#[test]
fn a_profile_encoded_stack_by_stack_is_the_export() {
    let p = with_stacks(300);
    let whole = pprof(&p);
    let head = ResolvedProfile {
        stacks: vec![p.stacks[1].clone()],
        ..p.clone()
    };
    let mut pieces = Vec::new();
    let mut encoder = PprofEncoder::new(&head, 512, |piece| {
        pieces.push(piece);
        true
    })
    .unwrap();
    for s in &p.stacks {
        assert!(encoder.sample(s.tid, s.count, &s.frames));
    }
    encoder.finish();
    assert!(pieces.len() > 2, "{} pieces", pieces.len());
    assert!(pieces.concat() == whole, "not the whole profile's export");
}

/// Stripped code's origin travels in the pprof file: its mapping carries
/// the binary's build id, and the reader gives a function named
/// `module!0xSTART` of that mapping its build id and START again; other
/// functions of the mapping get none.
#[test]
fn the_origin_of_stripped_code_survives_a_pprof_file() {
    let mut p = known();
    let origin = Origin {
        build_id: "3a944ed47df50edda4d6f79c6347fca1f777eed6".into(),
        address: 0x1355,
    };
    let module = p.functions[p.stacks[0].frames[0].function as usize]
        .module
        .clone();
    let leaf = p.stacks[0].frames[0].function as usize;
    p.functions[leaf].name = format!("{module}!0x1355");
    p.functions[leaf].origin = Some(origin.clone());
    let back = pprof_decode(&pprof(&p)).unwrap();
    let named = |q: &ResolvedProfile, name: &str| -> Option<Origin> {
        let f = q.functions.iter().find(|f| f.name == name).unwrap();
        f.origin.clone()
    };
    assert_eq!(named(&back, &format!("{module}!0x1355")), Some(origin));
    for f in &back.functions {
        if !f.name.contains('!') {
            assert_eq!(f.origin, None, "{f:?}");
        }
    }
    let raw = raw(&p);
    let ids: Vec<&str> = raw
        .mapping
        .iter()
        .map(|m| raw.string_table[m.build_id as usize].as_str())
        .collect();
    assert!(
        ids.contains(&"3a944ed47df50edda4d6f79c6347fca1f777eed6"),
        "{ids:?}"
    );
}

#[test]
fn only_grouped_names_with_a_build_id_give_an_origin() {
    let o = |name, module, id| Origin::of_grouped(name, module, id);
    assert_eq!(
        o("liblzma.so.5!0x15ae0", "liblzma.so.5", "ab"),
        Some(Origin {
            build_id: "ab".into(),
            address: 0x15ae0
        })
    );
    assert_eq!(o("liblzma.so.5!0x15ae0", "liblzma.so.5", ""), None);
    assert_eq!(o("liblzma.so.5+0x15ae0", "liblzma.so.5", "ab"), None);
    assert_eq!(o("lzma_code", "liblzma.so.5", "ab"), None);
    assert_eq!(o("other!0x10", "liblzma.so.5", "ab"), None);
    assert_eq!(o("liblzma.so.5!0xzz", "liblzma.so.5", "ab"), None);
}
