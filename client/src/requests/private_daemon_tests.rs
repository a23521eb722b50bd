//! Unit tests of `private_daemon`.
use super::*;
use std::os::unix::fs::PermissionsExt;

#[test]
fn private_dir_is_0700_and_unique() {
    let a = make_private_dir().unwrap();
    let b = make_private_dir().unwrap();
    assert_ne!(a, b);
    let mode = std::fs::metadata(&a).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    std::fs::remove_dir_all(a).unwrap();
    std::fs::remove_dir_all(b).unwrap();
}
