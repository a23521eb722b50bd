//! Tests of [`super`]: which files and links the daemon trusts, the
//! socket's mode set on the socket only, fresh temporary names. Files of
//! another user are made with `chown`, so these tests run as root.
use super::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// A uid that is neither root nor the tests' own.
const OTHER: u32 = 65534;

/// A fresh directory of this test, mode 0755.
fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("profd-trust-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    chmod(&dir, 0o755);
    dir
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `link` → `target`, owned by `uid`.
fn plant(target: &Path, link: &Path, uid: u32) {
    std::os::unix::fs::symlink(target, link).unwrap();
    std::os::unix::fs::lchown(link, Some(uid), None).expect("lchown (run as root)");
}

/// A file with `text`, mode `mode`.
fn file(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    chmod(path, mode);
}

#[test]
fn files_others_could_change_are_refused_naming_the_rule() {
    let dir = scratch("files");
    let key = dir.join("ch.key");
    file(&key, "s3cret\n", 0o600);
    assert_eq!(read(&key).unwrap(), b"s3cret\n");
    // Readable by others is the owner's business; writable is not.
    chmod(&key, 0o644);
    assert!(read(&key).is_ok());
    chmod(&key, 0o666);
    let err = read(&key).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!(
            "{} is writable by group or others (mode 666)",
            key.display()
        )) && err.contains(FILE_RULE)
            && err.contains("chmod go-w it"),
        "{err}"
    );
    chmod(&key, 0o620);
    assert!(read(&key).unwrap_err().to_string().contains("mode 620"));
    chmod(&key, 0o600);
    std::os::unix::fs::chown(&key, Some(OTHER), None).unwrap();
    let err = read(&key).unwrap_err().to_string();
    assert!(
        err.contains(&format!("{} is owned by uid {OTHER}", key.display()))
            && err.contains(FILE_RULE)
            && err.contains("chown it to root"),
        "{err}"
    );
    let err = read(&dir.join("none")).unwrap_err().to_string();
    assert!(err.contains("none: No such file"), "{err}");
    // A FIFO in its place neither hangs nor is read.
    let fifo = dir.join("fifo");
    rfs::mknodat(rfs::CWD, &fifo, FileType::Fifo, Mode::from(0o600), 0).unwrap();
    assert!(read(&fifo)
        .unwrap_err()
        .to_string()
        .contains("is not a regular file"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The attack: a user plants a link at the configured name, to a file
/// only root may read. It is refused, and nothing of the file is returned.
#[test]
fn a_link_another_user_planted_is_refused() {
    let dir = scratch("planted");
    chmod(&dir, 0o1777);
    let victim = dir.join("root-only");
    file(&victim, "root's secret\n", 0o600);
    let key = dir.join("ch.key");
    plant(&victim, &key, OTHER);
    let err = read(&key).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!(
            "{} is a symbolic link (to {}) owned by uid {OTHER}",
            key.display(),
            victim.display()
        )) && err.contains(LINK_RULE),
        "{err}"
    );
    assert!(!err.contains("root's secret"));
    // A link of root's in a directory another user owns: they could
    // replace it.
    let theirs = dir.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::symlink(&victim, theirs.join("ch.key")).unwrap();
    std::os::unix::fs::chown(&theirs, Some(OTHER), None).unwrap();
    let err = read(&theirs.join("ch.key")).unwrap_err().to_string();
    assert!(
        err.contains(&format!("in {}, a directory uid {OTHER}", theirs.display())),
        "{err}"
    );
    // A directory on the way that is their link.
    let real = dir.join("real");
    std::fs::create_dir(&real).unwrap();
    file(&real.join("ch.key"), "k", 0o600);
    plant(&real, &dir.join("conf"), OTHER);
    let err = read(&dir.join("conf/ch.key")).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("{}/conf is a symbolic link", dir.display())),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Links root made where only root may change them are followed, as a
/// Kubernetes secret volume lays them out (`key` → `..data/key`, `..data`
/// → a dated directory, in a sticky directory).
#[test]
fn links_only_root_could_make_are_followed() {
    let dir = scratch("k8s");
    chmod(&dir, 0o1777);
    let dated = dir.join("..2024_01_01_00_00_00.1");
    std::fs::create_dir(&dated).unwrap();
    file(&dated.join("password"), "k3y\n", 0o644);
    std::os::unix::fs::symlink("..2024_01_01_00_00_00.1", dir.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/password", dir.join("password")).unwrap();
    assert_eq!(read(&dir.join("password")).unwrap(), b"k3y\n");
    // Where group or others may replace the link, it is not.
    chmod(&dir, 0o777);
    let err = read(&dir.join("password")).unwrap_err().to_string();
    assert!(
        err.contains("a directory group or others may write (mode 777)"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn appending_creates_private_files_and_refuses_others() {
    let dir = scratch("append");
    let tokens = dir.join("tokens");
    std::io::Write::write_all(&mut open_append(&tokens).unwrap(), b"one\n").unwrap();
    std::io::Write::write_all(&mut open_append(&tokens).unwrap(), b"two\n").unwrap();
    assert_eq!(std::fs::read_to_string(&tokens).unwrap(), "one\ntwo\n");
    assert_eq!(std::fs::metadata(&tokens).unwrap().mode() & 0o777, 0o600);
    chmod(&tokens, 0o666);
    assert!(open_append(&tokens)
        .unwrap_err()
        .to_string()
        .contains("mode 666"));
    let victim = dir.join("victim");
    file(&victim, "precious\n", 0o600);
    let planted = dir.join("planted");
    plant(&victim, &planted, OTHER);
    assert!(open_append(&planted)
        .unwrap_err()
        .to_string()
        .contains("is a symbolic link"));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn directories_of_other_users_are_refused() {
    let dir = scratch("dirs");
    let state = dir.join("state");
    check_dir(&state).unwrap();
    std::fs::create_dir(&state).unwrap();
    check_dir(&state).unwrap();
    std::os::unix::fs::chown(&state, Some(OTHER), None).unwrap();
    let err = check_dir(&state).unwrap_err().to_string();
    assert!(
        err.contains(&format!("{} is owned by uid {OTHER}", state.display())),
        "{err}"
    );
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    plant(&elsewhere, &dir.join("linked"), OTHER);
    assert!(check_dir(&dir.join("linked/state"))
        .unwrap_err()
        .to_string()
        .contains("is a symbolic link"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The socket's group and mode go to the socket, not to a file a link at
/// its name points to.
#[test]
fn the_socket_mode_is_set_on_the_socket_only() {
    let dir = scratch("socket");
    let path = dir.join("profd.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    own_socket(&path, Some(OTHER), 0o660).unwrap();
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert_eq!((meta.mode() & 0o7777, meta.gid()), (0o660, OTHER));
    drop(listener);
    // Swapped for a link (root's own, so that it is followed) to a file.
    std::fs::remove_file(&path).unwrap();
    let victim = dir.join("victim");
    file(&victim, "precious\n", 0o600);
    std::os::unix::fs::symlink(&victim, &path).unwrap();
    let err = own_socket(&path, Some(OTHER), 0o666)
        .unwrap_err()
        .to_string();
    assert!(err.contains("was replaced"), "{err}");
    let meta = std::fs::metadata(&victim).unwrap();
    assert_eq!((meta.mode() & 0o7777, meta.gid()), (0o600, 0));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn temporary_names_are_fresh() {
    let a = temp_name("7.session").unwrap();
    let b = temp_name("7.session").unwrap();
    assert_ne!(a, b);
    assert!(
        a.starts_with("7.session.") && a.ends_with(".tmp") && a.len() == 30,
        "{a}"
    );
    assert!(temp_name(&"é".repeat(200)).unwrap().len() <= 255);
}
