//! Unit tests of `run`.
use super::*;

#[test]
fn exit_codes_are_a_shells() {
    assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
    assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
    assert_eq!(exit_code(ExitStatus::from_raw(15)), 128 + 15);
}

#[test]
fn exit_descriptions() {
    assert_eq!(
        describe_exit("sh", ExitStatus::from_raw(0)),
        "sh exited with status 0"
    );
    assert_eq!(
        describe_exit("sh", ExitStatus::from_raw(3 << 8)),
        "sh exited with status 3"
    );
    assert_eq!(
        describe_exit("sh", ExitStatus::from_raw(15)),
        "sh was killed by signal 15 (SIGTERM)"
    );
}
