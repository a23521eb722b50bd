//! The workloads in `tests/workloads/`: compiled once per test process (C with
//! `cc`, C++ with `c++`, Rust with `rustc`, Go with `go build`), and run as child processes
//! killed when dropped.

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

/// Compiles `tests/workloads/<name>.c` (once per test process) with
/// [`WORKLOAD_CFLAGS`] and returns the executable, named `<name>` so that its
/// comm and module are `<name>`.
pub fn build_workload(name: &str) -> PathBuf {
    compile(Lang::C, &format!("{name}.c"), name, WORKLOAD_CFLAGS)
}

/// The language of a workload source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    /// Built with `$CC` (default `cc`).
    C,
    /// Built with `$CXX` (default `c++`).
    Cpp,
    /// Built with `$RUSTC` (default `rustc`), a single-file program.
    Rust,
    /// Built with `$GO build` (default `go`), a single-file program.
    Go,
}

/// One build of a workload source: its own flags and executable name (the
/// name is the process's comm and module, at most 15 characters).
#[derive(Debug, Clone, Copy)]
pub struct Build {
    /// Executable name.
    pub name: &'static str,
    /// Source file in `tests/workloads/`.
    pub source: &'static str,
    pub lang: Lang,
    /// Compiler flags (besides `-o` and the source).
    pub flags: &'static [&'static str],
}

// The C builds below: gcc at -O2 with nothing the tests assert on inlined or
// turned into a tail call (the sources also mark those functions noipa).

/// `stacks.c` with frame pointers, which gcc 12 still leaves out of leaf
/// functions: a frame-pointer walk skips the leaves' callers.
pub const STACKS_FP: Build = Build {
    name: "stacks_fp",
    source: "stacks.c",
    lang: Lang::C,
    flags: &[
        "-O2",
        "-g",
        "-fno-inline-small-functions",
        "-fno-optimize-sibling-calls",
        "-Wall",
        "-fno-omit-frame-pointer",
    ],
};

/// `stacks.c` without frame pointers, as distribution binaries are built.
pub const STACKS_NOFP: Build = Build {
    name: "stacks_nofp",
    source: "stacks.c",
    lang: Lang::C,
    flags: &[
        "-O2",
        "-g",
        "-fno-inline-small-functions",
        "-fno-optimize-sibling-calls",
        "-Wall",
        "-fomit-frame-pointer",
    ],
};

/// `stacks_rs.rs` with frame pointers in every function.
pub const STACKS_RS_FP: Build = Build {
    name: "stacks_rs_fp",
    source: "stacks_rs.rs",
    lang: Lang::Rust,
    flags: &[
        "--edition=2021",
        "-Copt-level=2",
        "-g",
        "-Cforce-frame-pointers=yes",
    ],
};

/// `stacks_rs.rs` without frame pointers, as Rust release builds are.
pub const STACKS_RS_NOFP: Build = Build {
    name: "stacks_rs_nofp",
    source: "stacks_rs.rs",
    lang: Lang::Rust,
    flags: &[
        "--edition=2021",
        "-Copt-level=2",
        "-g",
        "-Cforce-frame-pointers=no",
    ],
};

/// `stacks.c` without asynchronous unwind tables: its functions' CFI is only
/// in `.debug_frame` (with `-g`), while the C runtime's objects still bring
/// an `.eh_frame` covering their own code.
pub const STACKS_DEBUG_FRAME: Build = Build {
    name: "stacks_dbgframe",
    source: "stacks.c",
    lang: Lang::C,
    flags: &[
        "-O2",
        "-g",
        "-fno-inline-small-functions",
        "-fno-optimize-sibling-calls",
        "-Wall",
        "-fomit-frame-pointer",
        "-fno-asynchronous-unwind-tables",
    ],
};

/// `gostacks.go` as `go build` makes it: symbol table and DWARF included.
pub const GOSTACKS: Build = Build {
    name: "gostacks",
    source: "gostacks.go",
    lang: Lang::Go,
    flags: &[],
};

/// `gostacks.go` linked with `-s -w`: no symbol table, no DWARF, only
/// Go's own function table (`.gopclntab`).
pub const GOSTACKS_STRIPPED: Build = Build {
    name: "gostacks_strip",
    source: "gostacks.go",
    lang: Lang::Go,
    flags: &["-ldflags=-s -w"],
};

/// `inlined.c`: an always_inline function inside a noinline one.
pub const INLINED: Build = Build {
    name: "inlined",
    source: "inlined.c",
    lang: Lang::C,
    flags: &[
        "-O2",
        "-g",
        "-fno-inline-small-functions",
        "-fno-optimize-sibling-calls",
        "-Wall",
        "-fno-omit-frame-pointer",
    ],
};

/// `jit.c`: generated code named by `/tmp/perf-<pid>.map`.
pub const JIT: Build = Build {
    name: "jit",
    source: "jit.c",
    lang: Lang::C,
    flags: &["-O2", "-g", "-fno-omit-frame-pointer", "-Wall"],
};

/// `names.cpp`: member functions of a class template with long names.
pub const NAMES_CPP: Build = Build {
    name: "names_cpp",
    source: "names.cpp",
    lang: Lang::Cpp,
    flags: WORKLOAD_CFLAGS,
};

/// `symedges.c`: a thread held in the PLT stub of memcmp (`-fno-builtin`
/// keeps the call, `-z lazy` its lazily bound slot) and the vDSO's
/// clock_gettime.
pub const SYMEDGES: Build = Build {
    name: "symedges",
    source: "symedges.c",
    lang: Lang::C,
    flags: &[
        "-O1",
        "-fno-omit-frame-pointer",
        "-mno-omit-leaf-frame-pointer",
        "-fno-inline",
        "-fno-optimize-sibling-calls",
        "-fno-builtin",
        "-Wl,-z,lazy",
        "-g",
        "-Wall",
    ],
};

impl Build {
    /// Compiles this build (once per test process) and returns the executable.
    pub fn path(&self) -> PathBuf {
        compile(self.lang, self.source, self.name, self.flags)
    }
}

/// The flag that starts every loop on a 64-byte line. The tests expect the
/// time split the workloads' spin loops make by iteration counts, which
/// holds only if the same loop runs at the same speed in every function:
/// where it sits against the instruction fetch lines can change that speed
/// (by up to 2× on an AMD EPYC, where `stacks.c`'s `rec_leaf` took 58 % of
/// the time instead of 40 %).
/// (`go build` has no such flag: `gostacks.go` says why its loops run at the
/// same speed.)
fn align_loops(lang: Lang) -> Option<&'static str> {
    match lang {
        Lang::C | Lang::Cpp => Some("-falign-loops=64"),
        Lang::Rust => Some("-Cllvm-args=-align-loops=64"),
        Lang::Go => None,
    }
}

/// Compiles `tests/workloads/<source>` into an executable named `out_name`,
/// once per test process and output name.
fn compile(lang: Lang, source: &str, out_name: &str, flags: &[&str]) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(path) = built.get(out_name) {
        return path.clone();
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("workloads")
        .join(source);
    assert!(source.is_file(), "no workload source {}", source.display());
    let out = unique_dir("workload").join(out_name);
    let (var, default, install) = match lang {
        Lang::C => ("CC", "cc", "install gcc"),
        Lang::Cpp => ("CXX", "c++", "install g++"),
        Lang::Rust => ("RUSTC", "rustc", "install the Rust toolchain"),
        Lang::Go => ("GO", "go", "install golang-go"),
    };
    let compiler = std::env::var(var).unwrap_or_else(|_| default.to_string());
    let mut command = Command::new(&compiler);
    if lang == Lang::Go {
        // Its build cache and module directory in the scratch directory:
        // the tests' HOME may be anything.
        let dir = unique_dir("go");
        command
            .arg("build")
            .env("GOCACHE", dir.join("cache"))
            .env("GOPATH", dir.join("path"))
            .env("GO111MODULE", "off");
    }
    command
        .args(flags)
        .args(align_loops(lang))
        .arg("-o")
        .arg(&out)
        .arg(&source);
    build(command, &format!("workload {out_name}"), install);
    built.insert(out_name.to_string(), out.clone());
    out
}

/// Runs the compiler `command` building `what`; panics with its errors,
/// or with `install` when the compiler is missing.
fn build(mut command: Command, what: &str, install: &str) {
    let output = command.output().unwrap_or_else(|e| {
        panic!(
            "cannot run the compiler `{}` ({install}): {e}",
            command.get_program().to_string_lossy()
        )
    });
    assert!(
        output.status.success(),
        "building {what} failed ({}): {command:?}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The flags `JitSplit.java` runs with: frame pointers kept in compiled
/// code, and each of its methods a frame of its own (never inlined).
pub const JAVA_FLAGS: &[&str] = &[
    "-XX:+PreserveFramePointer",
    "-XX:CompileCommand=quiet",
    "-XX:CompileCommand=dontinline,JitSplit::*",
];

/// The directory holding `JitSplit.class`, compiled from
/// `tests/workloads/JitSplit.java` by `javac` once per test process (fails
/// when the JDK is missing).
pub fn java_classes() -> &'static Path {
    static CLASSES: OnceLock<PathBuf> = OnceLock::new();
    CLASSES.get_or_init(|| {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/JitSplit.java");
        let out = unique_dir("java");
        let mut javac = Command::new("javac");
        javac.arg("-d").arg(&out).arg(&source);
        build(javac, "JitSplit.java", "install openjdk-17-jdk-headless");
        out
    })
}

/// `java JAVA_FLAGS extra... -cp <java_classes()> JitSplit args...`.
pub fn java_command(extra: &[&str], args: &[&str]) -> Command {
    let mut command = Command::new("java");
    command
        .args(JAVA_FLAGS)
        .args(extra)
        .arg("-cp")
        .arg(java_classes())
        .arg("JitSplit")
        .args(args);
    command
}

/// `node --perf-basic-prof ... jit_split.js SECONDS --ready`: V8 writes its
/// perf map as it compiles; no inlining and no on-stack replacement (whose
/// code runs the same loop at another speed), so the split holds. It runs
/// in a scratch directory, where V8 also writes an `isolate-*-v8.log`.
pub fn node_command(seconds: f64) -> Command {
    node_command_with(&["--perf-basic-prof"], seconds)
}

/// [`node_command`] with `flags` in place of `--perf-basic-prof` (such as
/// `--perf-prof`, with which V8 writes a jitdump, `jit-<pid>.dump`, in the
/// scratch directory).
pub fn node_command_with(flags: &[&str], seconds: f64) -> Command {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/jit_split.js");
    let mut command = Command::new("node");
    command
        .current_dir(unique_dir("node"))
        .args(flags)
        .args(["--no-turbo-inlining", "--no-use-osr"])
        .arg(script)
        .arg(seconds.to_string())
        .arg("--ready");
    command
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
        Workload::start_exe(&build_workload(name), seconds)
    }

    /// Builds `build` and starts it as [`Workload::start`] does.
    pub fn start_build(build: &Build, seconds: f64) -> Workload {
        Workload::start_exe(&build.path(), seconds)
    }

    /// Starts the executable `exe` as `<exe> <seconds> --ready` and waits for
    /// its ready line.
    pub fn start_exe(exe: &Path, seconds: f64) -> Workload {
        let mut command = Command::new(exe);
        command.arg(seconds.to_string()).arg("--ready");
        let name = exe.file_name().map_or_else(
            || exe.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        Workload::start_command(command, &name)
    }

    /// Starts `command`, which must end up (possibly after exec) as a
    /// workload printing its ready line on stdout, and waits for that line.
    /// The process started is the one profiled and killed on drop, so any
    /// wrapper must exec the workload rather than fork it.
    pub fn start_command(mut command: Command, name: &str) -> Workload {
        let what = format!("{command:?}");
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("read the workload's ready line");
        if line.trim() != "ready" {
            let _ = child.kill();
            let status = child.wait().expect("wait");
            panic!("workload {name} did not start ({what} printed {line:?}, {status})");
        }
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
    stat_ticks(pid, 14)
}

/// CPU time of the children `pid` has reaped: cutime + cstime from
/// `/proc/<pid>/stat`. A process that has exited, not yet reaped itself,
/// still shows it.
pub fn children_cpu_time(pid: u32) -> Duration {
    stat_ticks(pid, 16)
}

/// Fields `field` and `field + 1` of `/proc/<pid>/stat` (numbered from 1
/// as in proc(5); clock ticks of 1/100 s) added up.
fn stat_ticks(pid: u32, field: usize) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/stat: {e}"));
    // Fields after the parenthesised comm (field 2): state is field 3.
    let rest = &stat[stat.rfind(')').expect("comm in stat") + 2..];
    let ticks: u64 = rest
        .split_whitespace()
        .skip(field - 3)
        .take(2)
        .map(|f| f.parse::<u64>().expect("numeric CPU time"))
        .sum();
    Duration::from_millis(ticks * 10)
}
