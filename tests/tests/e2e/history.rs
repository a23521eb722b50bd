//! Window files planted in a real daemon's continuous history, as a damaged
//! disk or a bug would leave them: gzip bombs, and copies of a window under
//! other names. The daemon reads them back within what a window can hold,
//! moves aside what is not the window its name says, and counts each
//! window once. Real kernel, real `profd` and `profctl`; root needed.

use std::path::{Path, PathBuf};
use std::time::Instant;

use flate2::{Compress, Compression, FlushCompress};
use profd_common::api;
use profd_e2e::cgroups::Cgroup;
use profd_e2e::{build_workload, require_root_and_perf, serial, Daemon, Profile};
use prost::Message;

use crate::continuous::{continuous, group, list, now_ns, start_in, wait_for_window_after};

const SEC: u64 = 1_000_000_000;
const MIB: u64 = 1 << 20;

/// A line of `/proc/PID/status` in KiB (`VmHWM`, `VmRSS`).
fn status_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
}

/// `data` deflated on its own (raw deflate) and ended with a full flush:
/// byte-aligned and referring to nothing before it, so that copies of it
/// one after the other are a deflate stream of `data` repeated.
fn deflate_alone(data: &[u8]) -> Vec<u8> {
    let mut c = Compress::new(Compression::best(), false);
    let mut out = Vec::with_capacity(data.len() / 4 + 4096);
    loop {
        let done = c.total_in() as usize;
        c.compress_vec(&data[done..], &mut out, FlushCompress::Full)
            .expect("deflate");
        if c.total_in() as usize == data.len() && out.len() < out.capacity() {
            return out;
        }
        out.reserve(out.capacity());
    }
}

/// A gzip file of each part's bytes repeated its count of times, written
/// without compressing it all: each part is deflated once. Its trailer's
/// CRC is not the content's (a reader that stops at its bound never gets
/// there).
fn gzip_bomb(path: &Path, parts: &[(&[u8], u64)]) -> u64 {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create bomb"));
    f.write_all(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff])
        .unwrap();
    let mut total = 0u64;
    for (data, times) in parts {
        let block = deflate_alone(data);
        for _ in 0..*times {
            f.write_all(&block).unwrap();
        }
        total += data.len() as u64 * times;
    }
    // A final empty block (fixed Huffman), then CRC-32 and size.
    f.write_all(&[0x03, 0x00]).unwrap();
    f.write_all(&0u32.to_le_bytes()).unwrap();
    f.write_all(&(total as u32).to_le_bytes()).unwrap();
    f.flush().unwrap();
    total
}

/// `profd --continuous` with 1 s windows of the processes of `cg` alone
/// (the others' files are never read: quick on a busy machine).
fn only(cg: &Cgroup) -> Daemon {
    continuous(
        "1",
        &["--continuous-select", &format!("cgroup:{}", cg.path())],
    )
}

fn window_file(dir: &Path, start: u64, end: u64, id: &str) -> PathBuf {
    dir.join(format!("{start:020}-{end:020}-{id}.window.gz"))
}

/// The head of a window of 3 samples, then one service whose stacks go on
/// for `gib` GiB once decompressed.
fn stacks_bomb(path: &Path, start: u64, id: &str, gib: u64) -> u64 {
    let head = api::Window {
        id: id.into(),
        start_unix_ns: start,
        end_unix_ns: start + SEC,
        host: "bomb".into(),
        frequency_hz: 999,
        totals: Some(api::Totals {
            attributed: 3,
            ..Default::default()
        }),
        ..Default::default()
    };
    let stack = api::WindowStack {
        tid: 7,
        function: vec![0; 32],
        line: vec![1; 32],
        address: (0..32).map(|a| 0x40_1000 + a).collect(),
        count: 1,
    };
    let mut one = Vec::new();
    prost::encoding::message::encode(7, &stack, &mut one);
    let chunk = one.repeat((MIB as usize).div_ceil(one.len()));
    let times = gib * 1024;
    let service = api::ServiceWindow {
        service: "bomb".into(),
        samples: 3,
        ..Default::default()
    };
    let mut first = head.encode_to_vec();
    prost::encoding::encode_key(9, prost::encoding::WireType::LengthDelimited, &mut first);
    prost::encoding::encode_varint(
        service.encoded_len() as u64 + chunk.len() as u64 * times,
        &mut first,
    );
    service.encode_raw(&mut first);
    gzip_bomb(path, &[(&first, 1), (&chunk, times)])
}

/// Two gzip bombs of 4 GiB each once decompressed (a few MiB on disk),
/// planted in the history of a daemon, which then restarts: one all zeros,
/// one a window's head of 3 samples whose stacks go on. A query over the
/// history answers from the real windows; the bombs are refused as they are
/// read, moved aside and counted, each named in the log, and the daemon's
/// peak memory grows by less than 64 MiB.
#[test]
fn gzip_bombs_in_the_history_are_refused_within_a_windows_bound() {
    let _serial = serial();
    require_root_and_perf();
    let cg = group("bomb");
    let mut d = only(&cg);
    let w = start_in(&cg, &build_workload("split"), "30");
    wait_for_window_after(&d, now_ns() + 2 * SEC);
    drop(w);
    let dir = d.state_dir().expect("a state dir").join("windows");
    let t = now_ns() - 60 * SEC;
    let zeros = window_file(&dir, t, t + SEC, "b0b0000000000000000000000000000a");
    let total = gzip_bomb(&zeros, &[(&[0; 1 << 20], 4096)]);
    let stacks = window_file(
        &dir,
        t + SEC,
        t + 2 * SEC,
        "b0b0000000000000000000000000000b",
    );
    let total_stacks = stacks_bomb(&stacks, t + SEC, "b0b0000000000000000000000000000b", 4);
    for (path, total) in [(&zeros, total), (&stacks, total_stacks)] {
        let size = std::fs::metadata(path).unwrap().len();
        eprintln!(
            "planted {}: {size} bytes, {} MiB decompressed",
            path.display(),
            total / MIB
        );
        assert!(total >= 4 << 30 && size < 64 * MIB);
    }
    // Indexed by their names at the start, read by the first query.
    d.restart();
    let hwm_before = status_kib(d.pid(), "VmHWM");
    let began = Instant::now();
    let out = d.profctl(&["query", "--format", "json"]);
    let took = began.elapsed();
    let hwm_after = status_kib(d.pid(), "VmHWM");
    let rss_after = status_kib(d.pid(), "VmRSS");
    let after = list(d.socket());
    eprintln!(
        "query took {took:?}; VmHWM {hwm_before} -> {hwm_after} KiB, VmRSS after {rss_after} KiB; damaged {}",
        after.damaged
    );
    let p = Profile::parse(&out);
    assert!(p.totals.attributed > 0, "the real windows answer");
    assert!(
        hwm_after - hwm_before < 64 << 10,
        "the daemon's peak grew by {} KiB reading the bombs:\n{}",
        hwm_after - hwm_before,
        d.log()
    );
    assert_eq!(after.damaged, 2, "both bombs counted as damaged");
    let log = d.log();
    for path in [&zeros, &stacks] {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut aside = path.clone().into_os_string();
        aside.push(".damaged");
        assert!(Path::new(&aside).exists(), "{name} not moved aside");
        assert!(
            log.lines()
                .any(|l| l.contains(&name) && l.contains("damaged window file")),
            "no log line names {name}:\n{log}"
        );
    }
}

/// A real window copied under other names (dated 2100, ending before it
/// starts, an hour earlier) before a restart: the copies are moved aside
/// and counted, the window is listed once, and a query over its service
/// counts its samples once.
#[test]
fn copies_of_a_window_under_other_names_count_once() {
    let _serial = serial();
    require_root_and_perf();
    let cg = group("copies");
    let mut d = only(&cg);
    let service = cg.name().to_string();
    let w = start_in(&cg, &build_workload("split"), "30");
    wait_for_window_after(&d, now_ns() + 2 * SEC);
    drop(w);
    // Every sample of the service is in the windows listed now.
    let l = wait_for_window_after(&d, now_ns() + 2 * SEC);
    let of_service = |s: &api::WindowSummary| {
        s.services
            .iter()
            .filter(|x| x.service == service)
            .map(|x| x.samples)
            .sum::<u64>()
    };
    let expected: u64 = l.windows.iter().map(of_service).sum();
    let orig = l
        .windows
        .iter()
        .max_by_key(|s| of_service(s))
        .expect("a window");
    assert!(of_service(orig) > 0, "no window of {service}: {l:?}");
    let dir = d.state_dir().expect("a state dir").join("windows");
    let (start, end, id) = (orig.start_unix_ns, orig.end_unix_ns, orig.id.as_str());
    let original = window_file(&dir, start, end, id);
    let y2100 = 4_102_444_800 * SEC;
    let copies = [
        window_file(&dir, y2100, y2100 + SEC, id),
        window_file(&dir, end, start, id),
        window_file(&dir, start - 3600 * SEC, end - 3600 * SEC, id),
    ];
    for copy in &copies {
        std::fs::copy(&original, copy).expect("copy a window file");
    }
    d.restart();
    let out = d.profctl(&["query", "--service", &service, "--format", "json"]);
    let p = Profile::parse(&out);
    let after = list(d.socket());
    eprintln!(
        "{service}: {expected} samples in the windows, {} in the window copied, the query counts {}; damaged {}",
        of_service(orig),
        p.totals.attributed,
        after.damaged
    );
    assert_eq!(
        p.totals.attributed, expected,
        "the query counts the window once"
    );
    assert_eq!(
        after.windows.iter().filter(|s| s.id == id).count(),
        1,
        "listed once"
    );
    assert_eq!(after.damaged, 3, "each copy counted as damaged");
    let log = d.log();
    for copy in &copies {
        let name = copy.file_name().unwrap().to_string_lossy().into_owned();
        let mut aside = copy.clone().into_os_string();
        aside.push(".damaged");
        assert!(Path::new(&aside).exists(), "{name} not moved aside");
        assert!(
            log.lines()
                .any(|l| l.contains(&name) && l.contains("moved aside")),
            "no log line names {name}:\n{log}"
        );
    }
    assert!(original.exists(), "the window itself stays");
}
