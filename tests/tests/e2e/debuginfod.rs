//! End-to-end tests of debug files fetched from debuginfod: the `split`
//! workload stripped (as a program, and as a shared library), its DWARF
//! put apart with `objcopy --only-keep-debug` and served by a real
//! `debuginfod` (elfutils) on loopback, named with its known split once
//! profd has fetched the file; and servers that are down, hold requests
//! or answer garbage, which profiling goes on without, each failure
//! counted in `profctl info` and `/metrics`.
//! Real kernel, real `profd`, `profctl` and `debuginfod`.

use profd_e2e::debug_files::{split_off, stripped_split, tool, SplitOff};
use profd_e2e::metrics::{sample, scrape};
use profd_e2e::{
    path_str, require_root_and_perf, serial, unique_dir, wait_until, Cmd, Daemon, Measure, Profile,
    Workload, WORKLOAD_CFLAGS,
};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Long enough for any test: workloads are killed when the test ends.
const LONG: f64 = 60.0;

/// `split.c` built as a shared library, `libsplit.so`, its functions
/// hidden (not in `.dynsym`) but for its `main` (renamed `split_main`),
/// and a program calling that: the library stripped, its debug
/// information put apart. (program, the library's debug files).
fn stripped_split_library() -> (PathBuf, SplitOff) {
    let dir = unique_dir("stripped-lib");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/split.c");
    let library = dir.join("libsplit.so");
    let main = dir.join("splitso.c");
    std::fs::write(
        &main,
        "int split_main(int argc, char **argv);\n\
         int main(int argc, char **argv) { return split_main(argc, argv); }\n",
    )
    .unwrap();
    let program = dir.join("splitso");
    let mut lib_flags: Vec<&str> = WORKLOAD_CFLAGS.to_vec();
    lib_flags.extend([
        "-falign-loops=64",
        "-shared",
        "-fPIC",
        "-fvisibility=hidden",
        "-Dmain=__attribute__((visibility(\"default\"))) split_main",
        "-o",
        path_str(&library),
        path_str(&source),
    ]);
    let rpath = format!("-Wl,-rpath,{}", path_str(&dir));
    let lib_dir = format!("-L{}", path_str(&dir));
    let exe_flags = [
        "-O1",
        "-o",
        path_str(&program),
        path_str(&main),
        &lib_dir,
        "-lsplit",
        &rpath,
    ];
    for flags in [&lib_flags[..], &exe_flags[..]] {
        tool("cc", flags);
    }
    let split = split_off(&library);
    let dynamic = Command::new("readelf")
        .args(["--dyn-syms", path_str(&library)])
        .output()
        .expect("run readelf");
    let dynamic = String::from_utf8_lossy(&dynamic.stdout);
    assert!(
        dynamic.contains("split_main") && !dynamic.contains("leaf_a"),
        "leaf_a exported:\n{dynamic}"
    );
    (program, split)
}

/// A loopback port nothing listens on (bound, then let go of).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
    listener.local_addr().expect("its address").port()
}

/// The HTTP status of `GET path` on `127.0.0.1:port`; None when nothing
/// answers.
fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(conn, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut head = [0u8; 12];
    conn.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// `debuginfod -F` serving the directory of `split` on a free port, once
/// it has indexed its debug file; stopped when dropped.
fn start_debuginfod(split: &SplitOff) -> (Cmd, u16) {
    let port = free_port();
    let db = unique_dir("debuginfod-db").join("index.sqlite");
    let dir = &split.dir;
    let port_arg = port.to_string();
    let server = Cmd::spawn(
        "debuginfod",
        &[
            "-F",
            "-d",
            path_str(&db),
            "-p",
            &port_arg,
            "-t",
            "1",
            path_str(dir),
        ],
    );
    let path = format!("/buildid/{}/debuginfo", split.build_id);
    wait_until(
        "debuginfod serving the split debug file (install the Debian package debuginfod)",
        Duration::from_secs(60),
        || (http_status(port, &path) == Some(200)).then_some(()),
    );
    (server, port)
}

/// The figure `name` (`fetched`, `not found`, `failed`, `garbage`) of the
/// `debuginfod:` line of `profctl info`; None when it is off.
fn debuginfod_figure(daemon: &Daemon, name: &str) -> Option<u64> {
    let out = daemon.profctl(&["info"]);
    out.assert_success();
    let line = out
        .stdout
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("debuginfod:"))?
        .to_string();
    let at = line.find(&format!(" {name} "))? + name.len() + 2;
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The `debuginfod:` line of `profctl info`.
fn debuginfod_line(daemon: &Daemon) -> String {
    let out = daemon.profctl(&["info"]);
    out.stdout
        .lines()
        .find(|l| l.trim_start().starts_with("debuginfod:"))
        .unwrap_or_default()
        .to_string()
}

/// The running session's profile so far (which names its new addresses).
fn export(daemon: &Daemon, id: u64) -> Profile {
    Profile::parse(&daemon.profctl(&["export", &id.to_string(), "--format", "json"]))
}

/// The stripped `split` workload, with no debug information on the host,
/// is named from the debug file a real debuginfod serves: once profd has
/// fetched the file (counted in `profctl info`), the same session names
/// its functions, the samples counted before under placeholders included,
/// with the split of its construction (exclusive leaf_a 25 %, leaf_b 75 %;
/// inclusive mid 75 %, work 100 %) within 2 points.
#[test]
fn a_stripped_program_is_named_from_a_real_debuginfod() {
    let (program, split) = stripped_split("split");
    named_from_debuginfod(&program, &split, "split");
}

/// The same with `split.c`'s functions in a stripped shared library,
/// whose exported symbols name none of them.
#[test]
fn a_stripped_shared_library_is_named_from_a_real_debuginfod() {
    let (program, split) = stripped_split_library();
    named_from_debuginfod(&program, &split, "libsplit.so");
}

/// Profiles `program`, whose `split.c` functions are in `module`, stripped,
/// with profd fetching from a real debuginfod serving its debug file:
/// the functions are named with their split.
fn named_from_debuginfod(program: &Path, split: &SplitOff, module: &str) {
    let _serial = serial();
    require_root_and_perf();
    let (_server, port) = start_debuginfod(split);
    let id = &split.build_id;
    let url = format!("http://127.0.0.1:{port}");
    let metrics = format!("127.0.0.1:{}", free_port());
    let daemon = Daemon::start_with(&["--debuginfod-url", &url, "--metrics", &metrics]);
    assert_eq!(debuginfod_figure(&daemon, "fetched"), Some(0));

    let target = Workload::start_exe(program, LONG);
    let pid = target.pid().to_string();
    let attach = daemon.spawn_profctl(&["attach", &pid, "--duration", "600", "--format", "json"]);
    let session = daemon.wait_for_samples(target.pid(), 200);
    wait_until("the debug file fetched", Duration::from_secs(30), || {
        (debuginfod_figure(&daemon, "fetched")? >= 1).then_some(())
    });
    wait_until("the session naming leaf_a", Duration::from_secs(30), || {
        let p = export(&daemon, session);
        p.functions.iter().any(|f| f.name == "leaf_a").then_some(())
    });
    daemon.wait_for_samples(target.pid(), 3000);
    daemon
        .profctl(&["stop", &session.to_string()])
        .assert_success();
    let p = Profile::parse(&attach.wait(Duration::from_secs(60)));
    eprintln!("{}\n{}", p.table(), debuginfod_line(&daemon));
    assert_eq!(p.state, "stopped");
    for name in ["leaf_a", "leaf_b", "mid", "work"] {
        assert_eq!(p.function(name).module, module, "{}", p.table());
    }
    let placeholders = [format!("{module}+0x"), format!("{module}!0x")];
    assert!(
        !p.functions
            .iter()
            .any(|f| placeholders.iter().any(|x| f.name.starts_with(x))),
        "placeholders left:\n{}",
        p.table()
    );
    p.assert_pct_within("leaf_a", Measure::Exclusive, 25.0, 2.0);
    p.assert_pct_within("leaf_b", Measure::Exclusive, 75.0, 2.0);
    p.assert_pct_within("mid", Measure::Inclusive, 75.0, 2.0);
    p.assert_pct_within("work", Measure::Inclusive, 100.0, 2.0);
    // The file is in the cache under the state directory.
    let cached = daemon
        .state_dir()
        .expect("a state directory")
        .join("debuginfod/.build-id")
        .join(&id[..2])
        .join(format!("{}.debug", &id[2..]));
    assert_eq!(
        std::fs::read(&cached).expect("the cached debug file"),
        std::fs::read(&split.file).expect("the served debug file"),
    );
    // Fetched once, however often the session asked meanwhile.
    assert_eq!(debuginfod_figure(&daemon, "fetched"), Some(1));
    assert_eq!(debuginfod_figure(&daemon, "garbage"), Some(0));
    let m = scrape(&metrics);
    assert_eq!(sample(&m, "profd_debuginfod_fetched_total"), 1.0);
    assert_eq!(sample(&m, "profd_debuginfod_garbage_total"), 0.0);
    assert_eq!(
        sample(&m, "profd_debuginfod_cache_bytes"),
        std::fs::metadata(&cached).unwrap().len() as f64
    );
    assert_eq!(
        sample(&m, "profd_debuginfod_cache_limit_bytes"),
        (1u64 << 30) as f64
    );
}

/// A debuginfod URL where nothing listens: profiling goes on (samples
/// keep coming, the session ends with its profile, the functions left as
/// placeholders) and the refused request is counted and said in `profctl
/// info`.
#[test]
fn a_debuginfod_that_is_down_is_counted_and_profiling_goes_on() {
    let _serial = serial();
    require_root_and_perf();
    let (program, _) = stripped_split("split");
    let url = format!("http://127.0.0.1:{}", free_port());
    let metrics = format!("127.0.0.1:{}", free_port());
    let daemon = Daemon::start_with(&[
        "--debuginfod-url",
        &url,
        "--debuginfod-timeout",
        "2",
        "--metrics",
        &metrics,
    ]);
    let target = Workload::start_exe(&program, LONG);
    let pid = target.pid().to_string();
    let attach = daemon.spawn_profctl(&["attach", &pid, "--duration", "600", "--format", "json"]);
    let session = daemon.wait_for_samples(target.pid(), 200);
    export(&daemon, session);
    wait_until("the failure counted", Duration::from_secs(30), || {
        (debuginfod_figure(&daemon, "failed")? >= 1).then_some(())
    });
    let line = debuginfod_line(&daemon);
    assert!(
        line.contains(&url) && line.contains("fetched 0") && line.contains("last error: "),
        "{line}"
    );
    // Sampling and answers go on.
    let p = sampling_goes_on(&daemon, &target, session, attach, &line);
    assert!(
        p.functions
            .iter()
            .any(|f| f.name.starts_with("split!0x") && f.exclusive > 0),
        "{}",
        p.table()
    );
    let m = scrape(&metrics);
    assert!(sample(&m, "profd_debuginfod_failed_total") >= 1.0, "{m}");
    assert_eq!(sample(&m, "profd_debuginfod_fetched_total"), 0.0);
}

/// A server on loopback that misbehaves: `Hold` reads the request and
/// never answers; `Garbage` answers 200 with bytes that are no ELF file.
enum Misbehaving {
    Hold,
    Garbage,
}

/// Starts a [`Misbehaving`] server on a thread of its own; its URL.
fn misbehaving(kind: Misbehaving) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut request = [0u8; 4096];
            let _ = conn.read(&mut request);
            match kind {
                Misbehaving::Hold => held.push(conn),
                Misbehaving::Garbage => {
                    let body = vec![0x5au8; 64 << 10];
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = conn.write_all(head.as_bytes());
                    let _ = conn.write_all(&body);
                }
            }
        }
    });
    url
}

/// A server that holds every request without answering, and one that
/// answers with garbage: each failure is counted (`failed` past the
/// timeout, `garbage` for the file that is no debug file, which is not
/// kept), and meanwhile sampling goes on and the session answers.
#[test]
fn a_slow_or_garbage_debuginfod_is_counted_and_blocks_nothing() {
    let _serial = serial();
    require_root_and_perf();
    let (program, _) = stripped_split("split");
    let (slow, garbage) = (
        misbehaving(Misbehaving::Hold),
        misbehaving(Misbehaving::Garbage),
    );
    let daemon = Daemon::start_with(&[
        "--debuginfod-url",
        &slow,
        "--debuginfod-url",
        &garbage,
        "--debuginfod-timeout",
        "3",
    ]);
    let target = Workload::start_exe(&program, LONG);
    let pid = target.pid().to_string();
    let attach = daemon.spawn_profctl(&["attach", &pid, "--duration", "600", "--format", "json"]);
    let session = daemon.wait_for_samples(target.pid(), 200);
    // The slow server holds the request: the session answers meanwhile.
    let early = export(&daemon, session);
    assert!(early.totals.attributed >= 200, "{}", early.table());
    wait_until(
        "the slow server's failure and the garbage counted",
        Duration::from_secs(60),
        || {
            let failed = debuginfod_figure(&daemon, "failed")?;
            let garbage = debuginfod_figure(&daemon, "garbage")?;
            (failed >= 1 && garbage >= 1).then_some(())
        },
    );
    let line = debuginfod_line(&daemon);
    assert!(line.contains("fetched 0"), "{line}");
    sampling_goes_on(&daemon, &target, session, attach, &line);
    let cache = daemon
        .state_dir()
        .expect("a state directory")
        .join("debuginfod/.build-id");
    let kept: Vec<_> = walk(&cache);
    assert!(kept.is_empty(), "garbage kept in the cache: {kept:?}");
}

/// The files under `dir`, recursively (none when it does not exist).
fn walk(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .flat_map(|e| match e.path().is_dir() {
            true => walk(&e.path()),
            false => vec![e.path()],
        })
        .collect()
}

/// The session of `target` (its `attach`) takes 500 more samples, and
/// stops when asked: its profile, printed with the `debuginfod:` line.
fn sampling_goes_on(
    daemon: &Daemon,
    target: &Workload,
    session: u64,
    attach: Cmd,
    line: &str,
) -> Profile {
    let before = daemon.running_session(target.pid()).expect("running").1;
    daemon.wait_for_samples(target.pid(), before + 500);
    daemon
        .profctl(&["stop", &session.to_string()])
        .assert_success();
    let p = Profile::parse(&attach.wait(Duration::from_secs(60)));
    eprintln!("{}\n{line}", p.table());
    assert_eq!(p.state, "stopped");
    assert!(p.totals.attributed >= before + 500, "{}", p.table());
    p
}
