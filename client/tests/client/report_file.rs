//! `profctl report FILE` on a pprof file made by profd's own exporter from a
//! profile with a known call graph (split: main → work → {leaf_a 25 %,
//! mid → leaf_b 75 %}): the flat table, tree, hot path, callers/callees,
//! lines and threads, read without any daemon.
use std::path::{Path, PathBuf};
use std::process::Command;

use profd_common::export;
use profd_common::model::{FrameRef, FunctionInfo, ResolvedProfile, ResolvedStack};

const MAIN: u32 = 0;
const WORK: u32 = 1;
const MID: u32 = 2;
const LEAF_B: u32 = 3;
const LEAF_A: u32 = 4;

fn split_profile() -> ResolvedProfile {
    let f = |name: &str| FunctionInfo {
        name: name.into(),
        module: "split".into(),
        file: "split.c".into(),
        inlined: false,
        origin: None,
    };
    let fr = |function, line, address| FrameRef {
        function,
        line,
        address,
    };
    let stack = |frames, count| ResolvedStack {
        tid: 42,
        frames,
        count,
    };
    ResolvedProfile {
        functions: vec![f("main"), f("work"), f("mid"), f("leaf_b"), f("leaf_a")],
        stacks: vec![
            stack(
                vec![
                    fr(LEAF_B, 24, 0x1200),
                    fr(MID, 29, 0x1240),
                    fr(WORK, 35, 0x1280),
                    fr(MAIN, 43, 0x12c0),
                ],
                50,
            ),
            stack(
                vec![
                    fr(LEAF_B, 25, 0x1208),
                    fr(MID, 29, 0x1240),
                    fr(WORK, 35, 0x1280),
                    fr(MAIN, 43, 0x12c0),
                ],
                25,
            ),
            stack(
                vec![
                    fr(LEAF_A, 19, 0x1100),
                    fr(WORK, 34, 0x1278),
                    fr(MAIN, 43, 0x12c0),
                ],
                25,
            ),
        ],
        threads: [(42, "split".to_string())].into(),
        thread_pids: Default::default(),
        attributed: 100,
        frequency_hz: 999,
        duration_s: 1.0,
        pid: 42,
        comm: "split".into(),
        ..Default::default()
    }
}

fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("profctl-report-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn report(file: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_profctl"))
        .arg("--socket")
        .arg("/nonexistent/profd.sock")
        .arg("report")
        .arg(file)
        .args(args)
        .output()
        .expect("run profctl");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "profctl report {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// (indent, name) of the tree rows: the function column starts under the
/// header's FUNCTION, indented two spaces per level.
fn tree_rows(text: &str) -> Vec<(usize, String)> {
    let header = text
        .lines()
        .find(|l| l.contains("FUNCTION"))
        .expect("header");
    let col = header.find("FUNCTION").unwrap();
    text.lines()
        .skip_while(|l| !l.contains("FUNCTION"))
        .skip(1)
        .filter(|l| l.len() > col)
        .map(|l| {
            let rest = &l[col..];
            let trimmed = rest.trim_start();
            let name = trimmed.split_whitespace().next().unwrap().to_string();
            (rest.len() - trimmed.len(), name)
        })
        .collect()
}

#[test]
fn report_reads_a_saved_pprof_file() {
    let file = temp_file("split.pb.gz", &export::pprof(&split_profile()));

    let flat = report(&file, &["--top", "0"]);
    assert!(
        flat.starts_with(&format!(
            "profile {} — pid 42 (split) — 999 Hz",
            file.display()
        )),
        "{flat}"
    );
    assert!(flat.contains("samples: 100 attributed"), "{flat}");
    for (name, incl, excl) in [
        ("main", 100, 0),
        ("work", 100, 0),
        ("leaf_b", 75, 75),
        ("mid", 75, 0),
        ("leaf_a", 25, 25),
    ] {
        let row = flat
            .lines()
            .find(|l| l.contains(&format!(" {name}  [split]")))
            .unwrap_or_else(|| panic!("no {name} row:\n{flat}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[1], incl.to_string(), "{row}");
        assert_eq!(cols[3], excl.to_string(), "{row}");
    }

    let tree = report(&file, &["--tree"]);
    assert!(tree.contains("call tree, top-down: 100 samples"), "{tree}");
    assert_eq!(
        tree_rows(&tree),
        [
            (0, "main".to_string()),
            (2, "work".to_string()),
            (4, "mid".to_string()),
            (6, "leaf_b".to_string()),
            (4, "leaf_a".to_string()),
        ],
        "{tree}"
    );
    let bottom_up = report(&file, &["--tree", "--bottom-up", "--depth", "1"]);
    let rows = tree_rows(&bottom_up);
    assert_eq!(rows[0], (0, "leaf_b".to_string()), "{bottom_up}");
    assert_eq!(rows[1], (2, "mid".to_string()), "{bottom_up}");
    assert!(
        rows.iter().all(|(indent, _)| *indent <= 2),
        "--depth 1:\n{bottom_up}"
    );

    let hot = report(&file, &["--hot-path"]);
    let names: Vec<String> = tree_rows(&hot).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["main", "work", "mid", "leaf_b"], "{hot}");

    let callees = report(&file, &["--callees", "work"]);
    assert!(callees.contains("called functions:\n 75.0%     75   75.0%    0.0%      0  mid  [split]\n 25.0%     25   25.0%   25.0%     25  leaf_a  [split]\n"), "{callees}");
    assert!(!callees.contains("calling functions:"), "{callees}");
    let callers = report(&file, &["--callers", "leaf_b"]);
    assert!(
        callers
            .contains("calling functions:\n 75.0%     75  100.0%   75.0%     75  mid  [split]\n"),
        "{callers}"
    );

    let lines = report(&file, &["--lines", "leaf_b"]);
    assert!(lines.contains("split.c:24       50   50.0%"), "{lines}");
    assert!(lines.contains("split.c:25       25   25.0%"), "{lines}");

    let threads = report(&file, &["--threads"]);
    assert!(
        threads.lines().any(|l| {
            l.split_whitespace().collect::<Vec<_>>().get(..4)
                == Some(&["42", "split", "100", "100.0%"][..])
        }),
        "{threads}"
    );
}

#[test]
fn report_errors_are_one_line() {
    let file = temp_file("garbage.pb.gz", b"not a profile");
    let out = Command::new(env!("CARGO_BIN_EXE_profctl"))
        .args(["report"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!("profctl: cannot read {}", file.display())),
        "{err}"
    );

    let good = temp_file("split2.pb.gz", &export::pprof(&split_profile()));
    let out = Command::new(env!("CARGO_BIN_EXE_profctl"))
        .args(["report"])
        .arg(&good)
        .args(["--callers", "nosuch"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no function's name is, contains or matches \"nosuch\""),
        "{err}"
    );

    for args in [
        &["--tree", "--threads"][..],
        &["--callers", "a", "--lines", "b"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_profctl"))
            .args(["report"])
            .arg(&good)
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?} conflict");
    }
}
