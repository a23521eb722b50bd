//! `profctl run -o FILE` and `profctl attach -o FILE`: the whole profile
//! written to a file when the session ends, with the system daemon and with
//! the private one `run` starts, read back by the tools of each format.
use std::path::Path;
use std::time::Duration;

use profd_e2e::views::go_pprof_flat;
use profd_e2e::{
    build_workload, path_str, require_root_and_perf, serial, unique_dir, Cmd, CmdOutput, Harness,
    Measure, Profile, Workload,
};

/// Points a measured share may be off the workload's split.
const TOLERANCE: f64 = 3.0;

/// Asserts `go tool pprof` reads `file` as the profile `run` printed (the
/// same exclusive counts) and that it holds split's 25/75 split.
fn assert_pprof_is_the_split(file: &Path, out: &CmdOutput) {
    let p = Profile::parse_run(out);
    eprintln!("{}", p.table());
    p.assert_pct_within("leaf_a", Measure::Exclusive, 25.0, TOLERANCE);
    p.assert_pct_within("leaf_b", Measure::Exclusive, 75.0, TOLERANCE);
    let (flat, text) = go_pprof_flat(file);
    assert_eq!(
        flat,
        p.exclusive_as_pprof_names(),
        "go tool pprof -top of {}:\n{text}\n{}",
        file.display(),
        p.table()
    );
    let total: u64 = flat.values().sum();
    let pct = |name: &str| 100.0 * flat.get(name).copied().unwrap_or(0) as f64 / total as f64;
    for (name, want) in [("leaf_a", 25.0), ("leaf_b", 75.0)] {
        assert!(
            (pct(name) - want).abs() <= TOLERANCE,
            "{name} is {:.1} % of the file's samples, not {want} %:\n{text}",
            pct(name)
        );
    }
}

/// With the system daemon, `run -o x.pb.gz` writes the command's whole
/// profile as pprof before exiting with the command's status.
#[test]
fn run_writes_pprof_with_the_system_daemon() {
    let h = Harness::start();
    let split = build_workload("split");
    let file = unique_dir("record-system").join("x.pb.gz");
    let out = h.daemon.profctl(&[
        "run",
        "--format",
        "json",
        "-o",
        path_str(&file),
        "--",
        path_str(&split),
        "2",
    ]);
    out.assert_success();
    assert!(
        out.stderr.contains(&format!("wrote {}", file.display())),
        "{}",
        out.describe()
    );
    assert_pprof_is_the_split(&file, &out);
}

/// With no daemon on the socket, `run` starts a private one: the profile it
/// writes outlives it, and the file name asks for no `--output-format`.
#[test]
fn run_writes_pprof_with_the_private_daemon() {
    let _serial = serial();
    require_root_and_perf();
    let dir = unique_dir("record-private");
    let socket = dir.join("profd.sock");
    let file = dir.join("x.pb.gz");
    let split = build_workload("split");
    let profctl = profd_e2e::bin("profctl");
    let run = |args: &[&str]| {
        let mut all = vec!["--socket", path_str(&socket), "run"];
        all.extend_from_slice(args);
        Cmd::run(path_str(&profctl), &all, Duration::from_secs(60))
    };
    // A name that says no encoding is refused before anything runs.
    let marker = dir.join("ran");
    let refused = run(&[
        "-o",
        path_str(&dir.join("x.out")),
        "--",
        "touch",
        path_str(&marker),
    ]);
    assert!(!refused.status.success(), "{}", refused.describe());
    assert!(
        refused.stderr.contains("--output-format"),
        "{}",
        refused.describe()
    );
    assert!(!marker.exists(), "the command ran:\n{}", refused.describe());

    let out = run(&[
        "--format",
        "json",
        "-o",
        path_str(&file),
        "--",
        path_str(&split),
        "2",
    ]);
    out.assert_success();
    assert!(
        out.stderr.contains("started a private one"),
        "profctl did not start a private daemon:\n{}",
        out.describe()
    );
    assert_pprof_is_the_split(&file, &out);
    // Only the file is left: no temporary beside it.
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["x.pb.gz"], "{}", dir.display());
}

/// Exclusive samples by leaf frame in folded text.
fn folded_leaves(text: &str) -> std::collections::BTreeMap<String, u64> {
    let mut leaves = std::collections::BTreeMap::new();
    for line in text.lines() {
        let (stack, count) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("not a folded line: {line:?}"));
        let count: u64 = count
            .parse()
            .unwrap_or_else(|e| panic!("folded line {line:?}: {e}"));
        let leaf = stack.rsplit(';').next().unwrap_or(stack);
        // flamegraph.pl's `_[k]`-style annotations are not part of the name.
        let leaf = leaf.split("_[").next().unwrap_or(leaf);
        *leaves.entry(leaf.to_string()).or_insert(0) += count;
    }
    leaves
}

/// `attach -o x.folded` follows the process until it exits and writes its
/// folded stacks: the same exclusive counts the JSON shows, split 25/75.
#[test]
fn attach_writes_folded_stacks() {
    let h = Harness::start();
    let target = Workload::start("split", 2.0);
    let file = unique_dir("record-attach").join("x.folded");
    let out = h.daemon.profctl(&[
        "attach",
        &target.pid_arg(),
        "--format",
        "json",
        "-o",
        path_str(&file),
    ]);
    out.assert_success();
    let p = Profile::parse(&out);
    eprintln!("{}", p.table());
    assert_eq!(p.state, "exited", "{}", p.table());
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", file.display(), out.describe()));
    let leaves = folded_leaves(&text);
    let total: u64 = leaves.values().sum();
    assert_eq!(total, p.totals.attributed, "{text}");
    for (name, want) in [("leaf_a", 25.0), ("leaf_b", 75.0)] {
        let count = leaves.get(name).copied().unwrap_or(0);
        assert_eq!(count, p.function(name).exclusive, "{name}:\n{text}");
        let pct = 100.0 * count as f64 / total as f64;
        assert!(
            (pct - want).abs() <= TOLERANCE,
            "{name} is {pct:.1} % of the folded samples, not {want} %:\n{text}"
        );
    }
}
