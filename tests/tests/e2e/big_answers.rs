//! Answers over a big continuous history: windows of 120 000 distinct
//! stacks planted in a real daemon's state directory, then queried as a
//! user would (`profctl query`: flat table, tree, views and exports). The daemon's
//! peak memory while it answers (VmHWM, reset before each answer through
//! `/proc/PID/clear_refs`) stays within a bound proportional to the
//! answer, and the streamed export is the one GetProfile gives whole. Real
//! `profd` and `profctl`; root needed.

use std::io::Write as _;
use std::path::Path;

use profd_common::api;
use profd_e2e::{require_root_and_perf, serial, Daemon, Profile};
use prost::Message;

use crate::continuous::{continuous_at_default_freq, group, now_ns};

const SEC: u64 = 1_000_000_000;
/// Windows planted, and distinct stacks in each (none shared).
const WINDOWS: u64 = 3;
const STACKS: u64 = 40_000;
/// Frames of each stack, and functions a level chooses from.
const DEPTH: usize = 24;
const PER_LEVEL: u32 = 64;
/// Threads the stacks are spread over (two a process).
const THREADS: u32 = 8;

/// A line of `/proc/PID/status` in KiB (`VmHWM`, `VmRSS`).
fn status_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
}

/// How far the daemon's resident memory rose above where it stood while
/// `f` ran (KiB): its peak is reset first (`clear_refs` 5).
fn peak_rise<T>(pid: u32, f: impl FnOnce() -> T) -> (u64, T) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset VmHWM");
    let before = status_kib(pid, "VmRSS");
    let out = f();
    let peak = status_kib(pid, "VmHWM");
    (peak.saturating_sub(before), out)
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x
}

/// Stack `n`'s function at `level` (outermost level 0).
fn function_of(n: u64, level: usize) -> u32 {
    level as u32 * PER_LEVEL + (mix(n * 131 + level as u64) % u64::from(PER_LEVEL)) as u32
}

/// The samples of stack `n`.
fn count_of(n: u64) -> u64 {
    1 + n % 3
}

/// Window `w` of the big history: stacks `w*STACKS ..` of one service,
/// each with its own leaf address.
fn big_window(w: u64, start: u64) -> api::Window {
    let functions = (0..DEPTH as u32 * PER_LEVEL)
        .map(|f| api::WindowFunction {
            name: function_name(f),
            module: "/usr/lib/big/libbig.so".into(),
            file: format!("src/level_{}.rs", f / PER_LEVEL),
            ..Default::default()
        })
        .collect();
    let stacks: Vec<api::WindowStack> = (w * STACKS..(w + 1) * STACKS)
        .map(|n| {
            // Innermost first.
            let function: Vec<u32> = (0..DEPTH).rev().map(|l| function_of(n, l)).collect();
            let address = function
                .iter()
                .enumerate()
                .map(|(i, &f)| match i {
                    0 => 0x7f00_0000_0000 + n * 16,
                    _ => 0x40_0000 + u64::from(f) * 0x100 + 0x20,
                })
                .collect();
            api::WindowStack {
                tid: 1000 + (n % u64::from(THREADS)) as u32,
                line: function.iter().map(|f| 10 + f % 50).collect(),
                function,
                address,
                count: count_of(n),
            }
        })
        .collect();
    let samples: u64 = stacks.iter().map(|s| s.count).sum();
    api::Window {
        id: format!("b16{w:029x}"),
        start_unix_ns: start,
        end_unix_ns: start + 10 * SEC,
        host: "big".into(),
        kernel_release: "6.1.0".into(),
        frequency_hz: 19,
        event: api::Event::CpuClock as i32,
        totals: Some(api::Totals {
            attributed: samples,
            ..Default::default()
        }),
        services: vec![api::ServiceWindow {
            service: "big.service".into(),
            totals: None,
            source: api::ServiceSource::Unit as i32,
            samples,
            processes: (0..THREADS / 2)
                .map(|p| api::WindowProcess {
                    pid: 1000 + p * 2,
                    comm: format!("big-{p}"),
                    executable: "/usr/bin/big".into(),
                    ..Default::default()
                })
                .collect(),
            threads: (0..THREADS)
                .map(|t| api::WindowThread {
                    tid: 1000 + t,
                    pid: 1000 + (t / 2) * 2,
                    name: format!("big-worker-{t}"),
                    samples: 0,
                })
                .collect(),
            functions,
            stacks,
        }],
        ..Default::default()
    }
}

/// Plants the big history in `dir`; the bytes of its windows decoded
/// (protobuf, not gzip'd).
fn plant(dir: &Path) -> u64 {
    use std::os::unix::fs::PermissionsExt;
    let start = now_ns() - 600 * SEC;
    let mut raw = 0;
    for w in 0..WINDOWS {
        let window = big_window(w, start + w * 10 * SEC);
        let bytes = window.encode_to_vec();
        raw += bytes.len() as u64;
        let name = format!(
            "{:020}-{:020}-{}.window.gz",
            window.start_unix_ns, window.end_unix_ns, window.id
        );
        let path = dir.join(name);
        let mut gz = flate2::write::GzEncoder::new(
            std::fs::File::create(&path).expect("create a window file"),
            flate2::Compression::fast(),
        );
        gz.write_all(&bytes).expect("write a window");
        gz.finish().expect("finish a window");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    raw
}

/// The big history planted in a daemon that samples nothing of its own
/// (an empty group selected), indexed at its restart.
fn daemon_with_big_history() -> (Daemon, u64) {
    let cg = group("big");
    // At the default 19 Hz: the samples of whatever else runs, which the
    // daemon reads (stack copies and all) before it leaves them out, add
    // little to the peaks measured, however busy the machine.
    let mut d = continuous_at_default_freq(
        "10",
        &["--continuous-select", &format!("cgroup:{}", cg.path())],
    );
    let dir = d.state_dir().expect("a state dir").join("windows");
    let raw = plant(&dir);
    d.restart();
    (d, raw)
}

/// Bytes a merged stack's frames take in the daemon (`FrameRef`: function,
/// line and address).
const FRAME_BYTES: u64 = 16;

/// GetProfile's whole answer to `query --format FORMAT`, read with a
/// client that takes messages as big as it is.
fn whole(socket: &Path, format: api::ExportFormat) -> Vec<u8> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let channel = profctl::requests::connect::unix_channel(socket, None)
            .await
            .expect("connect to profd");
        api::profiler_client::ProfilerClient::new(channel)
            .max_decoding_message_size(1 << 30)
            .get_profile(api::GetProfileRequest {
                format: format as i32,
                query: Some(api::Query::default()),
                ..Default::default()
            })
            .await
            .expect("GetProfile")
            .into_inner()
            .data
    })
}

/// The name of function `f` of the big history.
fn function_name(f: u32) -> String {
    format!(
        "big_crate::level_{}::handler_{}::<impl core::ops::Fn<(u64,)>>::call",
        f / PER_LEVEL,
        f % PER_LEVEL
    )
}

/// `n` with thousands separators, as inferno counts frames.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Checks the streamed SVG flame graph: well-formed XML, every sample
/// counted, and every outermost function drawn with its samples.
fn check_svg(svg: &[u8], expected: u64) {
    let mut reader = quick_xml::Reader::from_reader(svg);
    let mut titles = Vec::new();
    let mut in_title = false;
    let mut total = None;
    let mut buf = Vec::new();
    loop {
        match reader.read_event_into(&mut buf) {
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(quick_xml::events::Event::Start(e)) => {
                in_title = e.name().as_ref() == b"title";
                if in_title {
                    titles.push(String::new());
                }
                if e.name().as_ref() == b"svg" {
                    if let Some(a) = e.try_get_attribute("total_samples").unwrap() {
                        total = Some(String::from_utf8(a.value.to_vec()).unwrap());
                    }
                }
            }
            Ok(quick_xml::events::Event::Text(t)) if in_title => {
                titles.last_mut().unwrap().push_str(&t.decode().unwrap());
            }
            Ok(quick_xml::events::Event::GeneralRef(r)) if in_title => {
                let name = r.decode().unwrap();
                let text = match name.as_ref() {
                    "lt" => "<",
                    "gt" => ">",
                    "amp" => "&",
                    "quot" => "\"",
                    "apos" => "'",
                    other => panic!("entity &{other}; in the flame graph"),
                };
                titles.last_mut().unwrap().push_str(text);
            }
            Ok(quick_xml::events::Event::End(_)) => in_title = false,
            Ok(_) => {}
            Err(e) => panic!(
                "the SVG flame graph is not XML at byte {}: {e}",
                reader.buffer_position()
            ),
        }
        buf.clear();
    }
    assert_eq!(
        total,
        Some(expected.to_string()),
        "the flame graph counts every sample"
    );
    let mut outermost = vec![0u64; PER_LEVEL as usize];
    for n in 0..WINDOWS * STACKS {
        outermost[function_of(n, 0) as usize] += count_of(n);
    }
    for (f, samples) in outermost.into_iter().enumerate() {
        let title = format!(
            "{} ({} samples, ",
            function_name(f as u32),
            thousands(samples)
        );
        assert!(
            titles.iter().any(|t| t.starts_with(&title)),
            "no frame {title}...) in the flame graph"
        );
    }
}

/// Checks the streamed speedscope file: JSON whose threads' weights add
/// up to `expected` nanoseconds, one sample a distinct path of a thread.
fn check_speedscope(bytes: &[u8], expected: u64) {
    let v: serde_json::Value = serde_json::from_slice(bytes).expect("speedscope JSON");
    assert_eq!(
        v["shared"]["frames"].as_array().unwrap().len(),
        DEPTH * PER_LEVEL as usize,
        "a frame a function"
    );
    let profiles = v["profiles"].as_array().unwrap();
    assert_eq!(profiles.len(), THREADS as usize, "a profile a thread");
    let (mut weight, mut samples) = (0, 0);
    for p in profiles {
        let w: u64 = (p["weights"].as_array().unwrap().iter())
            .map(|w| w.as_u64().unwrap())
            .sum();
        assert_eq!(p["endValue"].as_u64(), Some(w));
        weight += w;
        samples += p["samples"].as_array().unwrap().len() as u64;
    }
    assert_eq!(weight, expected, "the speedscope weights add up");
    // Stacks of one thread that differ only in their leaf address merge.
    let distinct: std::collections::HashSet<(u64, Vec<u32>)> = (0..WINDOWS * STACKS)
        .map(|n| {
            let path = (0..DEPTH).map(|l| function_of(n, l)).collect();
            (n % u64::from(THREADS), path)
        })
        .collect();
    assert_eq!(
        samples,
        distinct.len() as u64,
        "one sample a distinct stack of a thread"
    );
}

/// Answers over 120 000 distinct stacks, each from a daemon that has
/// answered nothing yet: the function table (flat, and the JSON report)
/// keeps no stacks, so the daemon's peak rises by less than 16 MiB
/// whatever their number; a call tree cut at 5 % is built cut, and the
/// folded and pprof exports are made as they are streamed, so their peaks
/// rise by less than twice the merged stacks' frames (16 bytes a frame),
/// never by the tree's every path, the text's size (73 MiB here) or the
/// pprof message's samples; the speedscope file is written as it is
/// streamed, holding its frames table and 4 bytes a stack on top of the
/// merged stacks (under twice their frames, as the views: the file is about a
/// quarter of them here, so what it holds alone is measured apart, in
/// benches/tests/alloc.rs, where the machine's load adds nothing); the SVG flame graph is
/// drawn as it is streamed from only the folded lines of the frames
/// inferno draws (under 3/5 of the text here: the rest is narrower than
/// 0.01 % of the samples), held with inferno's frames for them (under
/// twice the merged frames and 1.5 times those lines). The views (callers, hot path, threads, lines) hold the merged
/// stacks and little more (under twice their frames). The streamed exports are the ones GetProfile gives whole, and
/// add up to every sample.
#[test]
fn answers_over_a_big_history_stay_within_their_bound() {
    let _serial = serial();
    require_root_and_perf();
    let (mut d, raw) = daemon_with_big_history();
    let expected: u64 = (0..WINDOWS * STACKS).map(count_of).sum();
    let frames_kib = (WINDOWS * STACKS * DEPTH as u64 * FRAME_BYTES) >> 10;
    let scratch = d.state_dir().unwrap().parent().unwrap().to_path_buf();
    let folded = scratch.join("big.folded");
    let folded_arg = folded.to_str().unwrap();
    let pprof = scratch.join("big.pb.gz");
    let pprof_arg = pprof.to_str().unwrap();
    let svg = scratch.join("big.svg");
    let svg_arg = svg.to_str().unwrap();
    let speedscope = scratch.join("big.speedscope.json");
    let speedscope_arg = speedscope.to_str().unwrap();
    let outermost = function_name(0);
    let leaf = function_name((DEPTH as u32 - 1) * PER_LEVEL);
    let cases: [(&str, Vec<&str>, u64); 11] = [
        ("json", vec!["query", "--format", "json"], 16 << 10),
        ("flat table", vec!["query", "--top", "10"], 16 << 10),
        (
            "tree",
            vec!["query", "--tree", "--min-pct", "5", "--depth", "4"],
            2 * frames_kib,
        ),
        (
            "folded",
            vec!["query", "--format", "folded", "-o", folded_arg],
            2 * frames_kib,
        ),
        (
            "pprof",
            vec!["query", "--format", "pprof", "-o", pprof_arg],
            2 * frames_kib,
        ),
        (
            "svg",
            vec!["query", "--format", "svg", "-o", svg_arg],
            // Set below, from the folded text's size.
            0,
        ),
        (
            "speedscope",
            vec!["query", "--format", "speedscope", "-o", speedscope_arg],
            2 * frames_kib,
        ),
        (
            "callers",
            vec!["query", "--callers", &outermost],
            2 * frames_kib,
        ),
        ("hot path", vec!["query", "--hot-path"], 2 * frames_kib),
        ("threads", vec!["query", "--threads"], 2 * frames_kib),
        ("lines", vec!["query", "--lines", &leaf], 2 * frames_kib),
    ];
    let mut figures = Vec::new();
    for (what, args, bound) in cases {
        d.restart();
        let (rise, out) = peak_rise(d.pid(), || d.profctl(&args));
        out.assert_success();
        if what == "json" {
            let p = Profile::parse(&out);
            assert_eq!(p.totals.attributed, expected, "every sample merged once");
        }
        figures.push((what, rise, bound));
    }
    let folded_text = std::fs::read(&folded).unwrap();
    let pprof_bytes = std::fs::read(&pprof).unwrap();
    // The SVG holds, beside the merged stacks, only the lines of the
    // frames inferno draws (read back from the pprof export: the same
    // stacks and names), and inferno's frames for them: half as much again.
    let read = profd_common::export::pprof_decode(&pprof_bytes).expect("a pprof profile");
    let drawn_text = profd_common::export::svg_text(&read);
    assert!(
        drawn_text.len() < folded_text.len() * 3 / 5,
        "the flame graph's lines ({} bytes) are not cut",
        drawn_text.len()
    );
    let svg_bound = 2 * frames_kib + (drawn_text.len() as u64 >> 10) * 3 / 2;
    for (what, _, bound) in &mut figures {
        if *what == "svg" {
            *bound = svg_bound;
        }
    }
    let svg_bytes = std::fs::read(&svg).unwrap();
    let speedscope_bytes = std::fs::read(&speedscope).unwrap();
    eprintln!(
        "history: {WINDOWS} windows, {} stacks, {} KiB decoded, frames {frames_kib} KiB; folded {} bytes (drawn {}), pprof {} bytes, svg {} bytes, speedscope {} bytes",
        WINDOWS * STACKS,
        raw >> 10,
        folded_text.len(),
        drawn_text.len(),
        pprof_bytes.len(),
        svg_bytes.len(),
        speedscope_bytes.len()
    );
    for (what, rise, bound) in &figures {
        eprintln!("{what}: VmHWM rose {rise} KiB above VmRSS (bound {bound} KiB)");
    }
    let folded_samples: u64 = String::from_utf8_lossy(&folded_text)
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert_eq!(folded_samples, expected, "the folded stacks add up");
    assert!(
        whole(d.socket(), api::ExportFormat::Folded) == folded_text,
        "the streamed folded text differs from GetProfile's"
    );
    assert_eq!(read.attributed, expected, "the pprof samples add up");
    assert_eq!(
        read.stacks.len() as u64,
        WINDOWS * STACKS,
        "one sample a stack"
    );
    assert!(
        whole(d.socket(), api::ExportFormat::Pprof) == pprof_bytes,
        "the streamed pprof export differs from GetProfile's"
    );
    check_svg(&svg_bytes, expected);
    assert!(
        whole(d.socket(), api::ExportFormat::Svg) == svg_bytes,
        "the streamed SVG flame graph differs from GetProfile's"
    );
    // Each 19 Hz sample weighs its period in nanoseconds.
    check_speedscope(&speedscope_bytes, expected * (1_000_000_000 / 19));
    assert!(
        whole(d.socket(), api::ExportFormat::Speedscope) == speedscope_bytes,
        "the streamed speedscope file differs from GetProfile's"
    );
    for (what, rise, bound) in &figures {
        assert!(
            rise < bound,
            "{what}: the daemon's peak rose {rise} KiB answering over {} stacks, above {bound} KiB:\n{}",
            WINDOWS * STACKS,
            d.log()
        );
    }
}
