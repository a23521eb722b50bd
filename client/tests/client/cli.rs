//! Black-box tests of the `profctl` binary's command line (no daemon needed).
use std::process::Command;

fn profctl(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_profctl"))
        .args(args)
        .env_remove("PROFD_SOCKET")
        .output()
        .expect("run profctl")
}

#[test]
fn help_lists_every_command() {
    let out = profctl(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for cmd in [
        "attach",
        "run",
        "sessions",
        "stop",
        "info",
        "export",
        "report",
        "query",
        "histogram",
    ] {
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(&format!("{cmd} "))),
            "--help does not list {cmd}:\n{text}"
        );
    }
    assert!(text.contains("--socket"));
}

#[test]
fn attach_help_lists_its_options() {
    let out = profctl(&["attach", "--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for opt in [
        "--freq",
        "--duration",
        "--interval",
        "--top",
        "--format",
        "--event",
        "--unwind",
        "--stack-bytes",
        "--window",
        "--no-tui",
    ] {
        assert!(text.contains(opt), "attach --help lacks {opt}:\n{text}");
    }
}

#[test]
fn invalid_frequency_is_a_usage_error() {
    let out = profctl(&["attach", "1", "--freq", "abc"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--freq"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn run_without_a_command_is_a_usage_error() {
    let out = profctl(&["run", "--duration", "1"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn unknown_format_is_a_usage_error() {
    let out = profctl(&["attach", "1", "--format", "xml"]);
    assert_eq!(out.status.code(), Some(2));
}
