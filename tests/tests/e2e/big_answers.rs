//! Answers over a big continuous history: windows of 120 000 distinct
//! stacks planted in a real daemon's state directory, then queried as a
//! user would (`profctl query`, flat table, tree and exports). The daemon's
//! peak memory while it answers (VmHWM, reset before each answer through
//! `/proc/PID/clear_refs`) stays within a bound proportional to the
//! answer, and the streamed export is the one GetProfile gives whole. Real
//! `profd` and `profctl`; root needed.

use std::io::Write as _;
use std::path::Path;

use profd_common::api;
use profd_e2e::{require_root_and_perf, serial, Daemon, Profile};
use prost::Message;

use crate::continuous::{continuous, group, now_ns};

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
            name: format!(
                "big_crate::level_{}::handler_{}::<impl core::ops::Fn<(u64,)>>::call",
                f / PER_LEVEL,
                f % PER_LEVEL
            ),
            module: "/usr/lib/big/libbig.so".into(),
            file: format!("src/level_{}.rs", f / PER_LEVEL),
            inlined: false,
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
    let mut d = continuous(
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
        let channel = profctl::connect::unix_channel(socket, None)
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

/// Answers over 120 000 distinct stacks, each from a daemon that has
/// answered nothing yet: the function table (flat, and the JSON report)
/// keeps no stacks, so the daemon's peak rises by less than 16 MiB
/// whatever their number; a call tree cut at 5 % is built cut, and the
/// folded and pprof exports are made as they are streamed, so their peaks
/// rise by less than twice the merged stacks' frames (16 bytes a frame),
/// never by the tree's every path, the text's size (73 MiB here) or the
/// pprof message's samples. The streamed exports are the ones GetProfile
/// gives whole, and add up to every sample.
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
    let cases: [(&str, Vec<&str>, u64); 5] = [
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
    eprintln!(
        "history: {WINDOWS} windows, {} stacks, {} KiB decoded, frames {frames_kib} KiB; folded {} bytes, pprof {} bytes",
        WINDOWS * STACKS,
        raw >> 10,
        folded_text.len(),
        pprof_bytes.len()
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
    let read = profd_common::export::pprof_decode(&pprof_bytes).expect("a pprof profile");
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
    for (what, rise, bound) in &figures {
        assert!(
            rise < bound,
            "{what}: the daemon's peak rose {rise} KiB answering over {} stacks, above {bound} KiB:\n{}",
            WINDOWS * STACKS,
            d.log()
        );
    }
}
