//! A sink's spool that cannot be written: a running `profd --continuous`
//! whose spool directory is a small tmpfs that fills up, or one remounted
//! read-only under it, keeps profiling and keeps its history, counts every
//! window it could not spool as `spool_unwritable` (in `Info` and
//! `/metrics`), logs why, and spools again once it can. Root needed (it
//! mounts).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::continuous::{info, list, now_ns};
use profd_common::api;
use profd_e2e::cgroups::Cgroup;
use profd_e2e::metrics::{sample, scrape};
use profd_e2e::tls::free_port;
use profd_e2e::{
    build_workload, path_str, require_root_and_perf, run_profd, serial, unique_dir, Daemon,
    Workload,
};

/// How long a step may take on a loaded machine: a deadline only turns a
/// hang into a failure.
const STEP: Duration = Duration::from_secs(120);

/// A tmpfs mounted on a directory, unmounted when dropped.
struct Tmpfs(PathBuf);

/// `mount ARGS`, tried again while it fails (a remount read-only fails
/// while a file is open for writing there) for up to 10 s.
fn mount(args: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = Command::new("mount")
            .args(args)
            .output()
            .expect("run mount");
        if out.status.success() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "mount {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let options = format!("size={size},mode=0700");
        mount(&["-t", "tmpfs", "-o", &options, "tmpfs", path_str(dir)]);
        Tmpfs(dir.to_path_buf())
    }

    /// `mount -o remount,OPTION`.
    fn remount(&self, option: &str) {
        mount(&["-o", &format!("remount,{option}"), path_str(&self.0)]);
    }

    /// The names of the files in it.
    fn names(&self) -> Vec<String> {
        std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A daemon continuous at 99 Hz in windows of 1 s over `cg`, its state in
/// `state`, with a ClickHouse sink `ch` to a port nothing listens on (so
/// that every window waits in the spool), and `/metrics` on `metrics`.
/// Its settings file is `profd.toml` beside `state`.
fn daemon(cg: &Cgroup, state: &Path, metrics: &str) -> Daemon {
    let config = state.with_file_name("profd.toml");
    std::fs::write(
        &config,
        format!(
            "[continuous]\nenabled = true\nfrequency = 99\nwindow = 1\nselect = [\"cgroup:{}\"]\n\n\
             [[sink]]\nkind = \"clickhouse\"\nname = \"ch\"\nurl = \"http://127.0.0.1:{}\"\n",
            cg.path(),
            free_port()
        ),
    )
    .unwrap();
    Daemon::start_with(&[
        "--config",
        path_str(&config),
        "--state-dir",
        path_str(state),
        "--metrics",
        metrics,
    ])
}

fn workload(cg: &Cgroup) -> Workload {
    let mut cmd = cg.command(build_workload("split"));
    cmd.args(["600", "--ready"]);
    Workload::start_command(cmd, "split")
}

/// Windows the sink could not spool.
fn unwritable(s: &api::SinkStatus) -> u64 {
    s.drops
        .iter()
        .filter(|d| d.reason == "spool_unwritable")
        .map(|d| d.windows)
        .sum()
}

/// Polls the daemon's only sink until `ready` holds; the sink then.
fn sink_until(d: &Daemon, what: &str, ready: impl Fn(&api::SinkStatus) -> bool) -> api::SinkStatus {
    let deadline = Instant::now() + STEP;
    loop {
        let sink = info(d.socket()).sinks.swap_remove(0);
        if ready(&sink) {
            return sink;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {STEP:?}: {sink:?}\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Ends the workload, waits until the daemon has cut past its end, and
/// checks the accounting: every window of the history is either waiting
/// in the spool (a file there each) or counted as unwritable, and nothing
/// else was dropped or sent. The sink then.
fn settle(mut d: Daemon, w: Workload, spool: &Tmpfs, metrics: &str) -> api::SinkStatus {
    drop(w);
    let ended = now_ns();
    let deadline = Instant::now() + STEP;
    let history = loop {
        let l = list(d.socket());
        if l.cut_until_unix_ns >= ended {
            break l;
        }
        assert!(Instant::now() < deadline, "no window cut past the end");
        std::thread::sleep(Duration::from_millis(200));
    };
    let sink = info(d.socket()).sinks.swap_remove(0);
    let kept = history.windows.len() as u64;
    assert_eq!(history.windows_left_out, 0);
    assert_eq!(history.damaged, 0, "the history was written: {history:?}");
    assert_eq!(
        sink.spool_windows + unwritable(&sink),
        kept,
        "each of the {kept} windows is spooled or counted: {sink:?}"
    );
    assert_eq!(sink.drops.len(), 1, "only spool_unwritable: {sink:?}");
    assert_eq!(sink.windows_sent, 0);
    let mut files = spool.names();
    files.retain(|n| n.ends_with(".window.gz"));
    assert_eq!(
        (files.len() as u64, spool.names().len()),
        (sink.spool_windows, files.len()),
        "a file per waiting window, nothing half-written left: {:?}",
        spool.names()
    );
    let m = scrape(metrics);
    let labels = "{sink=\"ch\",kind=\"clickhouse\",reason=\"spool_unwritable\"}";
    assert_eq!(
        sample(&m, &format!("profd_sink_windows_dropped_total{labels}")),
        unwritable(&sink) as f64
    );
    d.assert_alive();
    assert!(d.terminate().success(), "{}", d.log());
    sink
}

/// A spool on a 16 KiB tmpfs fills up: the windows after are counted as
/// unwritable, with the reason logged, while the history keeps them all.
#[test]
fn a_full_spool_counts_what_it_cannot_keep_and_profiling_goes_on() {
    let _serial = serial();
    require_root_and_perf();
    let state = unique_dir("spool-full").join("profd");
    let spool = Tmpfs::mount(&state.join("spool").join("ch"), "16k");
    let cg = Cgroup::new(&format!("profd-spool-full-{}", std::process::id()));
    let metrics = format!("127.0.0.1:{}", free_port());
    let d = daemon(&cg, &state, &metrics);
    let w = workload(&cg);
    let full = sink_until(&d, "three windows unwritable", |s| unwritable(s) >= 3);
    assert!(full.spool_windows >= 1, "some windows fit: {full:?}");
    let log = d.log();
    assert!(
        log.contains("cannot spool a window: dropped") && log.contains("No space left on device"),
        "{log}"
    );
    let sink = settle(d, w, &spool, &metrics);
    eprintln!(
        "spool full: {} windows waiting, {} unwritable",
        sink.spool_windows,
        unwritable(&sink)
    );
}

/// A spool remounted read-only: the windows meanwhile are counted as
/// unwritable, with the reason logged; remounted read-write, windows are
/// spooled again. A daemon does not start on a read-only spool.
#[test]
fn a_read_only_spool_counts_what_it_cannot_keep_and_recovers() {
    let _serial = serial();
    require_root_and_perf();
    let state = unique_dir("spool-ro").join("profd");
    let spool = Tmpfs::mount(&state.join("spool").join("ch"), "4m");
    let cg = Cgroup::new(&format!("profd-spool-ro-{}", std::process::id()));
    let metrics = format!("127.0.0.1:{}", free_port());
    let d = daemon(&cg, &state, &metrics);
    let w = workload(&cg);
    let before = sink_until(&d, "two windows spooled", |s| s.spool_windows >= 2);
    spool.remount("ro");
    let stuck = sink_until(&d, "three windows unwritable", |s| unwritable(s) >= 3);
    assert!(
        d.log().contains("Read-only file system"),
        "the reason is logged:\n{}",
        d.log()
    );
    spool.remount("rw");
    let after = sink_until(&d, "windows spooled again", |s| {
        s.spool_windows > stuck.spool_windows
    });
    assert!(before.spool_windows <= stuck.spool_windows);
    let sink = settle(d, w, &spool, &metrics);
    assert!(unwritable(&sink) >= 3 && sink.spool_windows >= after.spool_windows);
    // A spool read-only when the daemon starts: it refuses to start,
    // naming the sink, the directory and the system's error.
    spool.remount("ro");
    let socket = state.with_file_name("again.sock");
    let config = state.with_file_name("profd.toml");
    let out = run_profd(&[
        "--socket",
        path_str(&socket),
        "--config",
        path_str(&config),
        "--state-dir",
        path_str(&state),
    ]);
    assert!(
        !out.status.success()
            && out.stderr.contains(&format!(
                "sink ch: spool: {}: Read-only file system",
                spool.0.display()
            )),
        "{}",
        out.describe()
    );
    eprintln!(
        "read-only spool: {} windows waiting, {} unwritable",
        sink.spool_windows,
        unwritable(&sink)
    );
}
