//! End-to-end test support: locating the built `profd` and `profctl`, building
//! the C and Rust workloads, running daemons and commands, and checking profiles.
//!
//! It does not talk gRPC itself: everything goes through the `profctl` command
//! line, exactly as a user would. The tests need root and a kernel with
//! `perf_event_open`; without them they fail (see [`preflight`]), never skip.

#![forbid(unsafe_code)]

pub mod cgroups;
pub mod clickhouse;
mod command;
mod daemon;
pub mod debug_files;
mod info;
mod json_report;
pub mod metrics;
pub mod proxy;
pub mod terminal;
pub mod tls;
pub mod users;
pub mod views;
mod workload;

pub use command::{assert_one_line_error, Cmd, CmdOutput};
pub use daemon::{run_profctl, run_profd, Daemon, PROFCTL_TIMEOUT};
pub use info::Info;
pub use json_report::{
    run_document, FunctionRow, Measure, ProcessRow, Profile, TimeTotals, Totals, PCT_TOLERANCE,
};
pub use workload::{
    build_workload, children_cpu_time, cpu_time, java_classes, java_command, node_command,
    node_command_with, Build, Lang, Workload, GOSTACKS, GOSTACKS_STRIPPED, INLINED, JAVA_FLAGS,
    JIT, NAMES_CPP, STACKS_DEBUG_FRAME, STACKS_FP, STACKS_NOFP, STACKS_RS_FP, STACKS_RS_NOFP,
    SYMEDGES, WORKLOAD_CFLAGS,
};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The machine has few CPUs and the tests measure time splits: tests that run
/// workloads hold this lock so they never overlap.
static SERIAL: Mutex<()> = Mutex::new(());

/// Takes the global test lock (a test that panicked while holding it does not
/// poison it for the others).
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The directory holding the workspace's built binaries: the test binary runs
/// from `target/<profile>/deps/`, the binaries sit in `target/<profile>/`.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary has a directory");
    if deps.file_name().is_some_and(|name| name == "deps") {
        deps.parent().expect("deps has a parent").to_path_buf()
    } else {
        deps.to_path_buf()
    }
}

/// The path of a workspace binary (`profd`, `profctl`); panics when it has not
/// been built.
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.is_file(),
        "{name} not found at {}: run `cargo build --workspace` first \
         (`cargo test --workspace` builds it before running the tests)",
        path.display()
    );
    path
}

/// A fresh, empty directory under the system temp dir, unique to this test
/// process and call.
pub fn unique_dir(label: &str) -> PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let root = ROOT.get_or_init(|| {
        remove_stale_dirs();
        std::env::temp_dir().join(format!("profd-e2e-{}", std::process::id()))
    });
    let dir = root.join(format!("{label}-{}", NEXT.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// Removes the temp dirs of earlier test processes that have ended (they are
/// kept until then so that failures can be looked into), and a leftover of a
/// process that had this pid.
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("profd-e2e-"))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A path as a `&str` (all paths the tests make are UTF-8).
pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("test paths are UTF-8")
}

/// Reads a number from a `/proc/sys` file.
pub fn read_sysctl(path: &str) -> i64 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!("cannot read {path}: {e}; this kernel has no perf events (CONFIG_PERF_EVENTS)")
    });
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{path} holds {text:?}: {e}"))
}

/// `/proc/sys/kernel/perf_event_max_sample_rate`: the highest frequency.
pub fn max_sample_rate() -> u64 {
    read_sysctl("/proc/sys/kernel/perf_event_max_sample_rate") as u64
}

/// The effective uid of this process, from `/proc/self/status`.
pub fn euid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .and_then(|id| id.parse().ok())
        .expect("Uid line in /proc/self/status")
}

/// Fails the test unless this process can profile the whole system: root (or
/// the daemon could not open system-wide perf events) and a kernel with perf
/// events. Prints the kernel facts.
pub fn require_root_and_perf() {
    let paranoid = read_sysctl("/proc/sys/kernel/perf_event_paranoid");
    let max_rate = max_sample_rate();
    let uid = euid();
    eprintln!("preflight: euid {uid}, perf_event_paranoid {paranoid}, perf_event_max_sample_rate {max_rate}");
    assert!(
        uid == 0,
        "the end-to-end tests need root: profd opens system-wide perf events on \
         every CPU (perf_event_paranoid is {paranoid}); run them as root"
    );
}

/// A test's environment: the global lock and a running daemon that passed the
/// preflight checks. The daemon stops before the lock is released.
pub struct Harness {
    pub daemon: Daemon,
    _serial: MutexGuard<'static, ()>,
}

impl Harness {
    /// Takes the lock, checks root and perf, starts `profd` on a fresh socket
    /// and checks that `profctl info` answers.
    pub fn start() -> Harness {
        let serial = serial();
        let daemon = preflight();
        Harness {
            daemon,
            _serial: serial,
        }
    }

    /// As [`Harness::start`], the daemon started with `args`
    /// ([`Daemon::start_with`]).
    pub fn start_with(args: &[&str]) -> Harness {
        let serial = serial();
        require_root_and_perf();
        Harness {
            daemon: Daemon::start_with(args),
            _serial: serial,
        }
    }
}

/// Fails the test with a clear message when profiling cannot work here: not
/// root, no perf events, the daemon does not start, or `profctl info` fails.
/// Returns the running daemon.
pub fn preflight() -> Daemon {
    require_root_and_perf();
    let daemon = Daemon::start();
    let info = daemon.profctl(&["info"]);
    assert!(
        info.status.success(),
        "preflight: `profctl info` failed, so perf_event_open or the daemon is \
         unusable here:\n{}\n--- profd log ---\n{}",
        info.describe(),
        daemon.log()
    );
    eprintln!("preflight: profctl info:\n{}", info.stdout.trim_end());
    daemon
}

/// Polls `ready` every 100 ms until it gives a value; fails the test
/// naming `what` after `timeout` (a deadline only turns a hang into a failure).
pub fn wait_until<T>(
    what: &str,
    timeout: std::time::Duration,
    mut ready: impl FnMut() -> Option<T>,
) -> T {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = ready() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {timeout:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Splits text into alphanumeric words (`pid=42,` gives `pid` and `42`).
pub fn words(line: &str) -> Vec<&str> {
    line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect()
}
