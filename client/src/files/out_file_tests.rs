//! Tests of [`super`]: whole files, temporary names, and which symbolic
//! links are followed (files of another user are made with `chown`, so
//! these tests run as root).
use super::*;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};

/// A uid that is neither root nor the tests' own.
const OTHER: u32 = 65534;

/// A fresh directory of this test, mode 0755.
fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("profctl-out-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
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

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn whole_files_replace_old_ones_and_leave_no_temporary() {
    let dir = scratch("whole");
    let path = dir.join("p.folded");
    std::fs::write(&path, b"old contents, longer").unwrap();
    write_file(&path, b"new").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"new");
    write_file(&dir.join("q.folded"), b"fresh").unwrap();
    assert_eq!(entries(&dir), ["p.folded", "q.folded"]);
    let err = write_file(&dir.join("no/such/dir/p.folded"), b"x").unwrap_err();
    assert!(err.to_string().contains("no: No such file"), "{err}");
    let err = write_file(&dir, b"x").unwrap_err();
    assert!(err.to_string().contains("is a directory"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn temporary_names_are_fresh_and_unpredictable() {
    let a = temp_name(OsStr::new("prof.pb.gz")).unwrap();
    let b = temp_name(OsStr::new("prof.pb.gz")).unwrap();
    assert_ne!(a, b);
    let a = a.to_string_lossy().into_owned();
    assert!(
        a.starts_with(".prof.pb.gz.") && a.ends_with(".tmp") && a.len() == 32,
        "{a}"
    );
    let long = "x".repeat(255);
    assert!(temp_name(OsStr::new(&long)).unwrap().len() <= 255);
}

/// A symbolic link planted at the old `.NAME.<pid>.tmp` name is not
/// followed: the victim stays as it was.
#[test]
fn links_at_the_old_temporary_name_are_not_followed() {
    let dir = scratch("oldtemp");
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let path = dir.join("prof.pb.gz");
    plant(
        &victim,
        &dir.join(format!(".prof.pb.gz.{}.tmp", std::process::id())),
        OTHER,
    );
    write_file(&path, b"profile").unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert_eq!(std::fs::read(&path).unwrap(), b"profile");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_link_another_user_planted_is_refused() {
    let dir = scratch("planted");
    chmod(&dir, 0o1777);
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let path = dir.join("prof.pb.gz");
    plant(&victim, &path, OTHER);
    let err = write_file(&path, b"profile").unwrap_err();
    let text = err.to_string();
    assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{text}");
    assert!(
        text.contains(&format!("{} is a symbolic link", path.display()))
            && text.contains(&format!("(to {})", victim.display()))
            && text.contains(&format!("owned by uid {OTHER}"))
            && text.contains("only when you or root own it"),
        "{text}"
    );
    assert!(check_file(&path).is_err());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(std::fs::symlink_metadata(&path).unwrap().is_symlink());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Root's own link in a directory only root may change is followed: the
/// target is replaced, the link stays.
#[test]
fn a_link_only_the_caller_could_make_is_followed() {
    let dir = scratch("trusted");
    let target = dir.join("real.folded");
    std::fs::write(&target, "old").unwrap();
    let link = dir.join("link.folded");
    std::os::unix::fs::symlink("real.folded", &link).unwrap();
    check_file(&link).unwrap();
    write_file(&link, b"new").unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"new");
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    // In a sticky directory (as /tmp) only the link's owner may replace it.
    chmod(&dir, 0o1777);
    write_file(&link, b"newer").unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"newer");
    // Not so where anyone may replace it.
    chmod(&dir, 0o777);
    let err = write_file(&link, b"newest").unwrap_err().to_string();
    assert!(
        err.contains("a directory group or others may write (mode 777)"),
        "{err}"
    );
    chmod(&dir, 0o755);
    // Nor in a directory of another user, who may replace it.
    std::os::unix::fs::chown(&dir, Some(OTHER), None).unwrap();
    let err = write_file(&link, b"newest").unwrap_err().to_string();
    assert!(
        err.contains(&format!("a directory uid {OTHER}")) && err.contains("owns"),
        "{err}"
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"newer");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A directory on the way that is another user's link is refused too.
#[test]
fn links_on_the_way_follow_the_same_rule() {
    let dir = scratch("way");
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    plant(&elsewhere, &dir.join("out"), OTHER);
    let err = write_file(&dir.join("out/prof.pb.gz"), b"x")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("{}/out is a symbolic link", dir.display())),
        "{err}"
    );
    let err = create_dir_all(&dir.join("out/pairs"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("is a symbolic link"), "{err}");
    assert_eq!(entries(&elsewhere), Vec::<String>::new());
    // mkdir -p through directories that are there and those that are not.
    create_dir_all(&dir.join("a/b/c")).unwrap();
    create_dir_all(&dir.join("a/b/c")).unwrap();
    write_file(&dir.join("a/b/c/f"), b"x").unwrap();
    assert_eq!(std::fs::read(dir.join("a/b/c/f")).unwrap(), b"x");
    std::fs::write(dir.join("plain"), "").unwrap();
    assert!(create_dir_all(&dir.join("plain")).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A character device is written into, never replaced by a file.
#[test]
fn devices_are_written_into() {
    write_file(Path::new("/dev/null"), b"discarded").unwrap();
    let meta = std::fs::symlink_metadata("/dev/null").unwrap();
    assert!(meta.file_type().is_char_device() && meta.rdev() != 0);
}

/// A FIFO is written into, never replaced by a file.
#[test]
fn fifos_are_written_into() {
    let dir = scratch("fifo");
    let fifo = dir.join("pipe");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, FileType::Fifo, Mode::from(0o600), 0).unwrap();
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    write_file(&fifo, b"through").unwrap();
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(reader.join().unwrap(), b"through");
    std::fs::remove_dir_all(&dir).unwrap();
}
