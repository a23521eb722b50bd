//! Unit tests of `generated_docs`.
use super::*;

#[test]
fn man_page_names_every_subcommand_and_has_examples() {
    let mut roff = Vec::new();
    write_man(&mut roff).unwrap();
    let roff = String::from_utf8(roff).unwrap();
    assert!(roff.contains(".TH profctl 1"), "{roff}");
    for sub in ["attach", "run", "sessions", "report", "export", "health"] {
        assert!(
            roff.contains(&format!("profctl\\-{sub}(1)")),
            "{sub}: {roff}"
        );
    }
    assert!(roff.contains("Examples:"), "{roff}");
}

#[test]
fn man_dir_has_a_page_per_subcommand() {
    let dir = std::env::temp_dir().join(format!("profctl-man-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let written = write_man_dir(&dir).unwrap();
    let names: Vec<String> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for name in ["profctl.1", "profctl-attach.1", "profctl-completions.1"] {
        assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
    }
    assert!(!names.iter().any(|n| n == "profctl-help.1"), "{names:?}");
    let attach = std::fs::read_to_string(dir.join("profctl-attach.1")).unwrap();
    assert!(attach.contains("\\-\\-duration"), "{attach}");
    // The SYNOPSIS keeps the placeholders of options that take a value.
    let report = std::fs::read_to_string(dir.join("profctl-report.1")).unwrap();
    let synopsis = report
        .split(".SH SYNOPSIS\n")
        .nth(1)
        .and_then(|s| s.lines().next())
        .unwrap_or_else(|| panic!("no SYNOPSIS: {report}"));
    for part in [
        "[\\fB\\-\\-callers\\fR \\fIFN\\fR]",
        "[\\fB\\-\\-min\\-pct\\fR \\fIP\\fR]",
        "[\\fB\\-\\-tree\\fR]",
        "\\fISESSION|FILE\\fR",
    ] {
        assert!(synopsis.contains(part), "{part} missing from {synopsis}");
    }
    // A directory that is not there is made.
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        write_man_dir(&dir.join("man1")).unwrap().len(),
        written.len()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
