//! Split debug files as distributions make them: a binary's debug
//! information put apart with `objcopy --only-keep-debug` into a directory
//! laid out by build id (`DIR/.build-id/xx/rest.debug`, as `/usr/lib/debug`
//! and what `debuginfod -F` serves), and the binary stripped.
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{build_workload, path_str, unique_dir};

/// A binary's debug information, put apart.
pub struct SplitOff {
    /// The directory laid out by build id.
    pub dir: PathBuf,
    /// The debug file in it.
    pub file: PathBuf,
    /// The binary's GNU build id, in hex.
    pub build_id: String,
}

/// Runs `program args`; fails the test unless it succeeds.
pub fn tool(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} (install binutils, gcc): {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Puts the debug information of the ELF file `binary` apart, in a fresh
/// directory laid out by build id, and strips `binary` (checked: no symbol
/// table, no DWARF left).
pub fn split_off(binary: &Path) -> SplitOff {
    let readelf = |flag: &str| {
        let out = Command::new("readelf")
            .args([flag, path_str(binary)])
            .output()
            .expect("run readelf (install binutils)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let notes = readelf("-n");
    let build_id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("{} has no build id:\n{notes}", binary.display()))
        .to_string();
    let dir = unique_dir("debug-files");
    let at = dir.join(".build-id").join(&build_id[..2]);
    std::fs::create_dir_all(&at).unwrap();
    let file = at.join(format!("{}.debug", &build_id[2..]));
    tool(
        "objcopy",
        &["--only-keep-debug", path_str(binary), path_str(&file)],
    );
    tool("strip", &["--strip-all", path_str(binary)]);
    let sections = readelf("-S");
    assert!(
        !sections.contains(".symtab") && !sections.contains(".debug_info"),
        "not stripped:\n{sections}"
    );
    SplitOff {
        dir,
        file,
        build_id,
    }
}

/// A copy of the `split` workload named `name`, stripped, and its debug
/// information put apart.
pub fn stripped_split(name: &str) -> (PathBuf, SplitOff) {
    let program = unique_dir("stripped").join(name);
    std::fs::copy(build_workload("split"), &program).expect("copy the split workload");
    let split = split_off(&program);
    (program, split)
}
