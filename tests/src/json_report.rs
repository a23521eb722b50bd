//! The JSON document `profctl ... --format json` prints when a session ends,
//! and the checks the tests make on it.

use std::fmt::Write as _;

use serde::Deserialize;

use crate::command::CmdOutput;

/// How far, in percentage points, a measured percentage may be from the value
/// the workload has by construction.
pub const PCT_TOLERANCE: f64 = 3.0;

/// One session's profile, as printed by `profctl --format json`.
#[derive(Debug, Clone, Deserialize)]
pub struct Profile {
    pub session_id: u64,
    pub pid: u32,
    pub comm: String,
    /// `running`, `stopped`, `duration_elapsed`, `exited` or `failed`.
    pub state: String,
    /// Why a `failed` session failed (absent otherwise).
    #[serde(default)]
    pub error: String,
    pub duration_s: f64,
    pub frequency_hz: u32,
    pub event: serde_json::Value,
    /// `fp` or `dwarf`: the unwinding in use (`auto` reports what it resolved to).
    pub unwind: String,
    /// Bytes of user stack copied per sample (0 without stack copies).
    pub stack_bytes: u32,
    /// `cpu`, `off-cpu` or `wall` (absent from reports of daemons without
    /// modes: `cpu`).
    #[serde(default)]
    pub mode: Option<String>,
    /// The unit of every count: `samples` (cpu) or `nanoseconds` (off-cpu,
    /// wall); absent from reports of daemons without modes.
    #[serde(default)]
    pub unit: Option<String>,
    pub totals: Totals,
    /// Whether the session followed the target's children.
    #[serde(default)]
    pub children: bool,
    /// Samples per process.
    #[serde(default)]
    pub processes: Vec<ProcessRow>,
    /// `target` (the kernel sampled the target alone) or `system-wide`.
    #[serde(default)]
    pub scope: String,
    /// Sorted by inclusive samples, descending.
    pub functions: Vec<FunctionRow>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Totals {
    pub attributed: u64,
    pub discarded: u64,
    pub lost: u64,
    /// Attributed samples whose user stack was not followed to its end.
    pub truncated: u64,
    /// Attributed samples with at least one unnamed frame.
    pub unsymbolized: u64,
    /// Samples counted under `[stack limit reached]` because the session had
    /// reached its unique-stack limit (`profd --max-stacks`); absent from
    /// profiles of daemons that have no such limit.
    #[serde(default)]
    pub overflowed: Option<u64>,
    /// Times the kernel throttled sampling.
    #[serde(default)]
    pub throttled: u64,
    /// Samples of processes that could not be checked after their exec.
    #[serde(default)]
    pub unchecked: u64,
    /// Samples the target's CPU time called for that its rings did not
    /// take (target scope, cpu-clock).
    #[serde(default)]
    pub unsampled: u64,
    /// Samples of CPython processes whose Python frames could not be read.
    #[serde(default)]
    pub python_unreadable: u64,
    /// Samples of CRuby processes whose Ruby frames could not be read.
    #[serde(default)]
    pub ruby_unreadable: u64,
    /// Samples of Perl processes whose Perl frames could not be read.
    #[serde(default)]
    pub perl_unreadable: u64,
    /// Of `truncated`: walks that ran past the end of the stack copy.
    #[serde(default)]
    pub truncated_copy_ended: u64,
    /// Time accounting of off-cpu and wall sessions (absent or null in cpu
    /// mode).
    #[serde(default)]
    pub time: Option<TimeTotals>,
}

/// `totals.time` of an off-cpu or wall session: nanoseconds and counts of
/// the target's switches (proto `TimeTotals`).
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct TimeTotals {
    pub on_cpu_ns: u64,
    pub off_cpu_ns: u64,
    /// Of `off_cpu_ns`: preempted, still runnable.
    pub runnable_ns: u64,
    /// Switches out paired with the switch back in.
    pub waits: u64,
    /// Switches that could not be paired (not counted as time).
    pub unpaired: u64,
    /// Waits still open when the session ended, counted up to its end.
    pub open_at_end: u64,
    /// Time no record tells, because records were lost (neither on nor
    /// off the CPU).
    #[serde(default)]
    pub unknown_ns: u64,
}

/// One process of a session (the target, and its children when followed).
#[derive(Debug, Clone, Deserialize)]
pub struct ProcessRow {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    pub samples: u64,
    pub exited: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct FunctionRow {
    /// The function's id in the session (`#ID`); absent from reports of
    /// daemons that did not print it.
    #[serde(default)]
    pub id: Option<u64>,
    pub name: String,
    pub module: String,
    pub inclusive: u64,
    pub exclusive: u64,
    pub inclusive_pct: f64,
    pub exclusive_pct: f64,
    /// Inlined into its caller at these samples.
    pub inlined: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    Inclusive,
    Exclusive,
}

impl FunctionRow {
    pub fn pct(&self, measure: Measure) -> f64 {
        match measure {
            Measure::Inclusive => self.inclusive_pct,
            Measure::Exclusive => self.exclusive_pct,
        }
    }
}

/// The JSON document `profctl run --format json` wrote to stderr, among
/// its `profctl: ...` lines and the command's own: from a line `{` to the
/// next line `}`. Fails the test when there is none.
pub fn run_document(out: &CmdOutput) -> String {
    let lines: Vec<&str> = out.stderr.lines().collect();
    let start = lines.iter().position(|l| *l == "{");
    let end = start.and_then(|s| lines[s..].iter().position(|l| *l == "}").map(|e| s + e));
    match (start, end) {
        (Some(start), Some(end)) => lines[start..=end].join("\n"),
        _ => panic!("no JSON document on stderr:\n{}", out.describe()),
    }
}

impl Profile {
    /// Parses the stdout of a successful `profctl ... --format json`: exactly
    /// one JSON document. Fails the test, showing the command's output, when
    /// the command failed or printed anything else.
    pub fn parse(out: &CmdOutput) -> Profile {
        out.assert_success();
        let profile: Profile = serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "stdout is not one profile JSON document ({e}):\n{}",
                out.describe()
            )
        });
        profile.check_invariants();
        profile
    }

    /// Parses the stderr of a successful `profctl run ... --format json`,
    /// whose command keeps stdout (see [`run_document`]).
    pub fn parse_run(out: &CmdOutput) -> Profile {
        out.assert_success();
        let profile: Profile = serde_json::from_str(&run_document(out)).unwrap_or_else(|e| {
            panic!(
                "stderr holds no profile JSON document ({e}):\n{}",
                out.describe()
            )
        });
        profile.check_invariants();
        profile
    }

    /// The profile as a readable table, for failure messages and `--nocapture`.
    pub fn table(&self) -> String {
        const MAX_ROWS: usize = 60;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "session {} pid {} comm {:?} state {} duration {:.3}s freq {} Hz event {} \
             unwind {} stack_bytes {} scope {}",
            self.session_id,
            self.pid,
            self.comm,
            self.state,
            self.duration_s,
            self.frequency_hz,
            self.event,
            self.unwind,
            self.stack_bytes,
            self.scope
        );
        let _ = writeln!(
            s,
            "totals: attributed {} discarded {} lost {} unsampled {} truncated {} \
             unsymbolized {}{}",
            self.totals.attributed,
            self.totals.discarded,
            self.totals.lost,
            self.totals.unsampled,
            self.totals.truncated,
            self.totals.unsymbolized,
            self.totals
                .overflowed
                .map_or_else(String::new, |n| format!(" overflowed {n}"))
        );
        if let Some(t) = self.totals.time {
            let _ = writeln!(
                s,
                "mode {}: on_cpu {:.3}s off_cpu {:.3}s (runnable {:.3}s) waits {} unpaired {} \
                 open_at_end {}",
                self.mode.as_deref().unwrap_or("?"),
                t.on_cpu_ns as f64 / 1e9,
                t.off_cpu_ns as f64 / 1e9,
                t.runnable_ns as f64 / 1e9,
                t.waits,
                t.unpaired,
                t.open_at_end
            );
        }
        let _ = writeln!(
            s,
            "{:>8} {:>7} {:>8} {:>7}  FUNCTION  MODULE",
            "INCL", "INCL%", "EXCL", "EXCL%"
        );
        for row in self.functions.iter().take(MAX_ROWS) {
            let _ = writeln!(
                s,
                "{:>8} {:>7.2} {:>8} {:>7.2}  {}{}  {}",
                row.inclusive,
                row.inclusive_pct,
                row.exclusive,
                row.exclusive_pct,
                row.name,
                if row.inlined { " [inlined]" } else { "" },
                row.module
            );
        }
        if self.functions.len() > MAX_ROWS {
            let _ = writeln!(s, "... {} more rows", self.functions.len() - MAX_ROWS);
        }
        s
    }

    /// All rows with this function name.
    pub fn rows(&self, name: &str) -> Vec<&FunctionRow> {
        self.functions
            .iter()
            .filter(|row| row.name == name)
            .collect()
    }

    /// Exclusive samples by function, named as `go tool pprof -top` prints
    /// them: a function inlined into its caller ends in ` (inline)`.
    pub fn exclusive_as_pprof_names(&self) -> std::collections::BTreeMap<String, u64> {
        let mut m = std::collections::BTreeMap::new();
        for f in self.functions.iter().filter(|f| f.exclusive > 0) {
            let name = match f.inlined {
                true => format!("{} (inline)", f.name),
                false => f.name.clone(),
            };
            *m.entry(name).or_insert(0) += f.exclusive;
        }
        m
    }

    /// (name, module, inclusive, exclusive) of every function, sorted.
    pub fn figures(&self) -> Vec<(String, String, u64, u64)> {
        let mut v: Vec<_> = self
            .functions
            .iter()
            .map(|f| (f.name.clone(), f.module.clone(), f.inclusive, f.exclusive))
            .collect();
        v.sort();
        v
    }

    /// The one row named `name`; fails the test when there is none or several.
    pub fn function(&self, name: &str) -> &FunctionRow {
        match self.rows(name).as_slice() {
            [row] => row,
            [] => panic!("no function {name:?} in the profile:\n{}", self.table()),
            rows => panic!(
                "{} rows named {name:?} (a function must be one row):\n{}",
                rows.len(),
                self.table()
            ),
        }
    }

    /// Asserts that `name`'s percentage is `expected` ± [`PCT_TOLERANCE`].
    pub fn assert_pct(&self, name: &str, measure: Measure, expected: f64) {
        let actual = self.function(name).pct(measure);
        eprintln!("  {name} {measure:?}: {actual:.2} % (expected {expected} ± {PCT_TOLERANCE})");
        assert!(
            (actual - expected).abs() <= PCT_TOLERANCE,
            "{measure:?} % of {name} is {actual:.2}, expected {expected} ± {PCT_TOLERANCE}:\n{}",
            self.table()
        );
    }

    /// Asserts that `name`'s percentage is `expected` ± `tolerance` points.
    pub fn assert_pct_within(&self, name: &str, measure: Measure, expected: f64, tolerance: f64) {
        let actual = self.function(name).pct(measure);
        eprintln!("  {name} {measure:?}: {actual:.2} % (expected {expected} ± {tolerance})");
        assert!(
            (actual - expected).abs() <= tolerance,
            "{measure:?} % of {name} is {actual:.2}, expected {expected} ± {tolerance}:\n{}",
            self.table()
        );
    }

    /// The percentage of V8's functions named `name` (`JS:*name ...`,
    /// `JS:^name ...`: each tier's code is a function of the perf map),
    /// summed: the JIT workloads do not recurse, so no sample has two.
    pub fn js_pct(&self, name: &str, measure: Measure) -> f64 {
        self.functions
            .iter()
            .filter(|f| {
                f.name
                    .strip_prefix("JS:")
                    .map(|n| n.trim_start_matches(['*', '^', '~']))
                    .and_then(|n| n.split_once(' '))
                    .is_some_and(|(n, _)| n == name)
            })
            .map(|f| f.pct(measure))
            .sum()
    }

    /// Asserts that `name`'s percentage lies in `lo..=hi`.
    pub fn assert_pct_between(&self, name: &str, measure: Measure, lo: f64, hi: f64) {
        let actual = self.function(name).pct(measure);
        eprintln!("  {name} {measure:?}: {actual:.2} % (expected {lo}..={hi})");
        assert!(
            (lo..=hi).contains(&actual),
            "{measure:?} % of {name} is {actual:.2}, expected within {lo}..={hi}:\n{}",
            self.table()
        );
    }

    /// The rules every profile obeys, whatever the workload: percentages in
    /// 0-100 and consistent with the counts over `attributed`; a function's
    /// exclusive count within its inclusive count, and its inclusive count
    /// within the sample total (counted once per sample); every sample has one
    /// innermost frame and no frame is dropped, so the exclusive counts add up
    /// to the total (the JSON lists every function unless `--top` is given);
    /// rows sorted by inclusive count, descending.
    pub fn check_invariants(&self) {
        let total = self.totals.attributed;
        let fail =
            |what: String| -> ! { panic!("profile breaks a rule: {what}\n{}", self.table()) };
        if total == 0 && !self.functions.is_empty() {
            fail("functions listed with 0 attributed samples".into());
        }
        for row in &self.functions {
            for (label, pct, count) in [
                ("inclusive", row.inclusive_pct, row.inclusive),
                ("exclusive", row.exclusive_pct, row.exclusive),
            ] {
                if !(0.0..=100.0).contains(&pct) {
                    fail(format!("{} {label}_pct {pct} is outside 0..=100", row.name));
                }
                let from_counts = 100.0 * count as f64 / total.max(1) as f64;
                // Allows percentages rounded to one decimal.
                if (pct - from_counts).abs() > 0.051 {
                    fail(format!(
                        "{} {label}_pct {pct} but {count} of {total} samples is {from_counts:.3} %",
                        row.name
                    ));
                }
            }
            if row.exclusive > row.inclusive {
                fail(format!(
                    "{} exclusive {} > inclusive {}",
                    row.name, row.exclusive, row.inclusive
                ));
            }
            if row.inclusive > total {
                fail(format!(
                    "{} inclusive {} > attributed {total}",
                    row.name, row.inclusive
                ));
            }
        }
        if let Some(pair) = self
            .functions
            .windows(2)
            .find(|w| w[0].inclusive < w[1].inclusive)
        {
            fail(format!(
                "rows not sorted by inclusive: {} before {}",
                pair[0].name, pair[1].name
            ));
        }
        let exclusive_sum: u64 = self.functions.iter().map(|row| row.exclusive).sum();
        if exclusive_sum != total {
            fail(format!(
                "exclusive counts add up to {exclusive_sum}, not attributed {total}"
            ));
        }
    }
}
