//! What the Python, Ruby and Perl end-to-end tests share: each runtime's
//! workload and how profd names its frames, and the checks and tests that
//! are the same for all three. The tests themselves live in
//! `interpreted.rs` (Python), `ruby.rs`, `perl.rs` and `fleet.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;

use profd_e2e::{
    Daemon, Harness, Measure::Exclusive, Measure::Inclusive, Profile, Totals, Workload,
};

/// Long enough for any test: workloads are killed when the test ends.
const LONG: f64 = 60.0;
/// Percentage points a measured share may be off the construction.
pub const TOLERANCE: f64 = 3.0;
/// Enough samples for ±3 points: a binomial standard deviation of 0.7
/// points for a 25 % share, with room for the aliasing of a 1 ms sampling
/// period against the workload's 0.4 ms cycle of calls (at 1 500 samples,
/// Python's hot_b once read 21.9 %).
pub const SAMPLES: u64 = 4000;

/// One interpreter and its workload of known construction
/// (`tests/workloads/*_split.*`).
pub struct Runtime {
    /// Debian's interpreter (not another one earlier in PATH).
    pub binary: &'static str,
    /// A variable that names another interpreter to run the tests on.
    pub binary_var: Option<&'static str>,
    /// The workload, under `tests/workloads`.
    pub script: &'static str,
    /// The workload's process name.
    pub comm: &'static str,
    /// What profd puts before a function's name in the workload.
    pub prefix: &'static str,
    /// The module profd gives the runtime's frames.
    pub module: &'static str,
    /// The native loop the runtime's frames take the place of.
    pub eval_loop: &'static str,
    /// What a left-over frame of that loop is called in a failure.
    pub eval_loop_frame: &'static str,
    /// The start of the line that defines a function in the workload.
    pub def: &'static str,
    /// The runtime's name, as `profctl info` and the tests' cgroups use it.
    pub language: &'static str,
    /// A short name for directories and cgroups.
    pub tag: &'static str,
    /// Samples of the runtime's code that profd could not read.
    pub unreadable: fn(&Totals) -> u64,
}

pub const PYTHON: Runtime = Runtime {
    binary: "/usr/bin/python3",
    binary_var: Some("PROFD_TEST_PYTHON"),
    script: "py_split.py",
    comm: "python3",
    prefix: "py_split.",
    module: "[python]",
    eval_loop: "_PyEval_EvalFrameDefault",
    eval_loop_frame: "an eval-loop frame",
    def: "def ",
    language: "python",
    tag: "py",
    unreadable: |t| t.python_unreadable,
};

pub const RUBY: Runtime = Runtime {
    binary: "/usr/bin/ruby",
    binary_var: None,
    script: "rb_split.rb",
    comm: "ruby",
    prefix: "Work#",
    module: "[ruby]",
    eval_loop: "rb_vm_exec",
    eval_loop_frame: "a VM frame",
    def: "def ",
    language: "ruby",
    tag: "rb",
    unreadable: |t| t.ruby_unreadable,
};

pub const PERL: Runtime = Runtime {
    binary: "/usr/bin/perl",
    binary_var: None,
    script: "pl_split.pl",
    comm: "perl",
    prefix: "Work::",
    module: "[perl]",
    eval_loop: "runops",
    eval_loop_frame: "a run-loop frame",
    def: "sub ",
    language: "perl",
    tag: "pl",
    unreadable: |t| t.perl_unreadable,
};

/// A CPython 3.13 or later, for `-X perf_jit` (Debian 12 has none):
/// `PROFD_TEST_PYTHON313` names it, else `python3.13` on the PATH.
pub fn python313() -> String {
    std::env::var("PROFD_TEST_PYTHON313").unwrap_or_else(|_| "python3.13".into())
}

impl Runtime {
    /// The interpreter these tests run: Debian's, unless `binary_var`
    /// names another.
    pub fn binary(&self) -> String {
        (self.binary_var)
            .and_then(|var| std::env::var(var).ok())
            .unwrap_or_else(|| self.binary.into())
    }

    pub fn script(&self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("workloads")
            .join(self.script)
    }

    /// The workload running `mode` long enough for any test.
    pub fn start(&self, mode: &str) -> Workload {
        let mut command = Command::new(self.binary());
        command.arg(self.script()).arg(LONG.to_string()).arg(mode);
        Workload::start_command(command, self.comm)
    }

    /// The name of the workload's function `name`, as profd names it.
    pub fn name(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// A profile of `mode` run by a fresh workload, with enough samples.
    pub fn profile(&self, daemon: &Daemon, mode: &str) -> (Workload, Profile) {
        let w = self.start(mode);
        let p = daemon.profile_until(&w, SAMPLES, &[]);
        (w, p)
    }

    /// At most one sample in 50 unreadable.
    pub fn assert_readable(&self, p: &Profile) {
        let unreadable = (self.unreadable)(&p.totals);
        assert!(
            unreadable * 50 <= p.totals.attributed,
            "{unreadable} of {} samples unreadable:\n{}",
            p.totals.attributed,
            p.table()
        );
    }

    /// What a profile of the runtime's code must always show: its
    /// functions in the loop's place, the loop nowhere, (almost) every
    /// sample read, and `top` on (almost) every stack.
    pub fn check_read(&self, p: &Profile, top: &str) {
        for f in &p.functions {
            assert!(
                !f.name.contains(self.eval_loop),
                "{} was left in place:\n{}",
                self.eval_loop_frame,
                p.table()
            );
        }
        self.assert_readable(p);
        let top = p.function(top);
        assert!(top.pct(Inclusive) >= 97.0, "{}", p.table());
        assert_eq!(top.module, self.module);
    }

    /// The workload's split: hot_a 75 %, hot_b 25 %.
    pub fn assert_split(&self, p: &Profile) {
        p.assert_pct_within(&self.name("hot_a"), Inclusive, 75.0, TOLERANCE);
        p.assert_pct_within(&self.name("hot_b"), Inclusive, 25.0, TOLERANCE);
    }

    /// The share of the time that two threads running `left` and `right`
    /// each spend there, both well present and together all of it.
    pub fn left_and_right(&self, p: &Profile) -> (f64, f64) {
        let left = p.function(&self.name("left")).pct(Inclusive);
        let right = p.function(&self.name("right")).pct(Inclusive);
        assert!((left + right - 100.0).abs() <= TOLERANCE, "{}", p.table());
        assert!(left >= 25.0 && right >= 25.0, "{}", p.table());
        (left, right)
    }

    /// A function recursing five levels deep counts once per sample.
    pub fn recursion_counts_once(&self, top: &str) {
        let h = Harness::start();
        let (_w, p) = self.profile(&h.daemon, "recurse");
        self.check_read(&p, top);
        p.assert_pct_within(&self.name("deep"), Inclusive, 100.0, TOLERANCE);
        p.assert_pct_within(&self.name("hot_a"), Inclusive, 100.0, TOLERANCE);
    }

    /// The workload's calls of zlib: (almost) all the time in libz, with
    /// `top` on every stack. Returns the profile.
    pub fn libz_is_under(&self, top: &str) -> Profile {
        let h = Harness::start();
        let (_w, p) = self.profile(&h.daemon, "zlib");
        self.check_read(&p, top);
        let libz: f64 = (p.functions.iter())
            .filter(|f| f.module.starts_with("libz.so"))
            .map(|f| f.pct(Exclusive))
            .sum();
        assert!(libz >= 80.0, "libz {libz} % exclusive:\n{}", p.table());
        p
    }

    /// `profctl info` says the runtime's frames are read.
    pub fn assert_info_says_read(&self, daemon: &Daemon) {
        let info = daemon.profctl(&["info"]);
        info.assert_success();
        let line = format!("{} frames:          read at each sample", self.language);
        assert!(
            (info.stdout.lines()).any(|l| l.trim() == line),
            "{}",
            info.stdout
        );
    }

    /// The pprof export of `p` carries each frame's file and line: `go
    /// tool pprof -lines` puts hot_a's time (75 %) on `body` lines after
    /// its definition in the script, on `lines` of them at least, and
    /// nowhere else.
    pub fn hot_a_lines_reach_go_pprof(
        &self,
        daemon: &Daemon,
        p: &Profile,
        body: usize,
        lines: usize,
    ) {
        let file = profd_e2e::unique_dir(&format!("{}-pprof", self.tag)).join("split.pb.gz");
        let session = p.session_id.to_string();
        let out = daemon.profctl(&[
            "export",
            &session,
            "--format",
            "pprof",
            "-o",
            profd_e2e::path_str(&file),
        ]);
        out.assert_success();
        let (rows, text) = profd_e2e::views::go_pprof_lines(&file);
        let script = self.script;
        let source = std::fs::read_to_string(self.script()).unwrap();
        let def = 1 + source
            .lines()
            .position(|l| l.trim_start().starts_with(&format!("{}hot_a", self.def)))
            .unwrap_or_else(|| panic!("{script} defines hot_a"));
        let body = def..=def + body;
        let total = p.totals.attributed as f64;
        let mut on_body = 0.0;
        let mut seen = std::collections::BTreeSet::new();
        for (_, cum, name) in &rows {
            let Some(at) = name.strip_prefix(&format!("{} ", self.name("hot_a"))) else {
                continue;
            };
            let line: usize = (at.rsplit_once(':'))
                .filter(|(file, _)| file.ends_with(script))
                .and_then(|(_, line)| line.parse().ok())
                .unwrap_or_else(|| panic!("hot_a's row {name:?} has no line of {script}:\n{text}"));
            assert!(
                body.contains(&line),
                "hot_a at line {line}, outside {body:?}:\n{text}"
            );
            seen.insert(line);
            on_body += cum;
        }
        assert!(seen.len() >= lines, "hot_a's lines {seen:?}:\n{text}");
        // A sample is at one line of hot_a (cum adds each line's samples).
        let share = 100.0 * on_body / total;
        assert!(
            (share - 75.0).abs() <= TOLERANCE,
            "hot_a's lines hold {share:.1} %:\n{text}"
        );
    }

    /// In off-CPU mode the function that sleeps (napper) is on the stack of
    /// the time asleep, and in wall mode on all its time. Each session ends by its duration while the program
    /// still runs (the time asleep accrues whatever the machine's load):
    /// frames read after the program exited could not be read.
    pub fn napper_is_on_its_off_cpu_stack(&self) {
        let h = Harness::start();
        let w = self.start("sleep");
        let pid = w.pid_arg();
        let out = h.daemon.profctl(&[
            "attach",
            &pid,
            "--mode",
            "off-cpu",
            "--duration",
            "3",
            "--format",
            "json",
        ]);
        let p = Profile::parse(&out);
        eprintln!("{}", p.table());
        let napper = p.function(&self.name("napper")).pct(Inclusive);
        assert!(napper >= 95.0, "napper {napper} %:\n{}", p.table());
        p.assert_pct_within("[off-cpu: blocked]", Inclusive, 100.0, TOLERANCE);
        // In wall mode too: the time asleep and the little on the CPU.
        let out = h.daemon.profctl(&[
            "attach",
            &pid,
            "--mode",
            "wall",
            "--duration",
            "3",
            "--format",
            "json",
        ]);
        let p = Profile::parse(&out);
        eprintln!("{}", p.table());
        let napper = p.function(&self.name("napper")).pct(Inclusive);
        assert!(napper >= 95.0, "wall: napper {napper} %:\n{}", p.table());
    }

    /// A process that was running before the daemon started is read as
    /// well: nothing is set up in it at its start.
    pub fn started_before_the_daemon_is_read(&self, top: &str) {
        let _serial = profd_e2e::serial();
        profd_e2e::require_root_and_perf();
        let w = self.start("split");
        let daemon = Daemon::start();
        let p = daemon.profile_until(&w, SAMPLES, &[]);
        self.check_read(&p, top);
        self.assert_split(&p);
    }

    /// A service of the runtime under continuous profiling: its windows,
    /// queried by service, hold its functions. The daemon meets the
    /// process when it counts its first samples, and reads its frames from
    /// then on: the query starts after the window it was met in (the
    /// samples before are unreadable), and ends once the windows since
    /// hold twice [`SAMPLES`] (over whole windows, so that the split is
    /// within its bound whatever the windows' edges cut). Returns the service's profile, checked with `top`
    /// on every stack.
    pub fn service_windows(&self, top: &str) -> Profile {
        let _serial = profd_e2e::serial();
        profd_e2e::require_root_and_perf();
        let d = crate::continuous::continuous("2", &[]);
        let cg = crate::continuous::group(self.language);
        let mut command = cg.command(self.binary());
        command
            .arg(self.script())
            .arg(LONG.to_string())
            .arg("split");
        let _w = Workload::start_command(command, self.comm);
        let met = profd_e2e::wait_until(
            "a window of the service",
            std::time::Duration::from_secs(60),
            || {
                let l = crate::continuous::list(d.socket());
                let seen = l.services.iter().any(|s| s.service == cg.name());
                seen.then_some(l.cut_until_unix_ns)
            },
        );
        let from = met.div_ceil(1_000_000_000).to_string();
        // The windows cut since, until they hold enough samples (however
        // little CPU the loaded machine gives the program).
        let p = profd_e2e::wait_until(
            "windows of the service with enough samples",
            std::time::Duration::from_secs(LONG as u64),
            || {
                crate::continuous::wait_for_window_after(&d, crate::continuous::now_ns());
                let out = d.profctl(&[
                    "query",
                    "--service",
                    cg.name(),
                    "--from",
                    &from,
                    "--format",
                    "json",
                ]);
                let p = Profile::parse(&out);
                (p.totals.attributed >= 2 * SAMPLES).then_some(p)
            },
        );
        eprintln!("{}", p.table());
        self.check_read(&p, top);
        p
    }
}
