//! The C workloads in `tests/workloads/`: compiled once per test process with
//! `cc` and frame pointers, and run as child processes killed when dropped.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::unique_dir;

/// Flags every workload is built with. profd walks user stacks by frame
/// pointer, so every function must keep one (the workloads also make their
/// leaves keep one under gcc 12, see `workload.h`); nothing is inlined or
/// turned into a tail call, so each function is a frame of its own.
pub const WORKLOAD_CFLAGS: &[&str] = &[
    "-O1",
    "-fno-omit-frame-pointer",
    "-mno-omit-leaf-frame-pointer",
    "-fno-inline",
    "-fno-optimize-sibling-calls",
    "-g",
    "-Wall",
];

/// Compiles `tests/workloads/<name>.c` (once per test process) and returns the
/// executable, named `<name>` so that its comm and module are `<name>`.
pub fn build_workload(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(path) = built.get(name) {
        return path.clone();
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("workloads")
        .join(format!("{name}.c"));
    assert!(source.is_file(), "no workload source {}", source.display());
    let out = unique_dir("workload").join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let output = Command::new(&cc)
        .args(WORKLOAD_CFLAGS)
        .arg("-o")
        .arg(&out)
        .arg(&source)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}` (install gcc): {e}"));
    assert!(
        output.status.success(),
        "building workload {name} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    built.insert(name.to_string(), out.clone());
    out
}

/// A running workload process; killed and reaped when dropped.
pub struct Workload {
    child: Child,
    name: String,
}

impl Workload {
    /// Builds and starts `<name> <seconds> --ready`, and returns once it has
    /// printed its ready line (it is then spinning).
    pub fn start(name: &str, seconds: f64) -> Workload {
        let exe = build_workload(name);
        let mut child = Command::new(&exe)
            .arg(seconds.to_string())
            .arg("--ready")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", exe.display()));
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("read the workload's ready line");
        assert_eq!(line.trim(), "ready", "workload {name} did not start");
        Workload {
            child,
            name: name.to_string(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn pid_arg(&self) -> String {
        self.pid().to_string()
    }

    /// CPU time the workload has used so far (all threads).
    pub fn cpu_time(&self) -> Duration {
        cpu_time(self.pid())
    }

    /// Waits for the workload to exit by itself.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "workload {} still running after {timeout:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time a process has used so far: the first field of
/// `/proc/<pid>/schedstat` (nanoseconds on a CPU), or utime + stime from
/// `/proc/<pid>/stat` (clock ticks of 1/100 s) where schedstat is missing.
pub fn cpu_time(pid: u32) -> Duration {
    if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/schedstat")) {
        if let Some(ns) = text.split_whitespace().next().and_then(|f| f.parse().ok()) {
            return Duration::from_nanos(ns);
        }
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/stat: {e}"));
    // Fields after the parenthesised comm: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')').expect("comm in stat") + 2..];
    let fields: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|f| f.parse().expect("numeric utime/stime"))
        .collect();
    Duration::from_millis((fields[0] + fields[1]) * 10)
}
