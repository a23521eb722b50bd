//! Local test users and running commands as them, for the access-control
//! tests: `profd-t-alice` and `profd-t-bob` (members of the group `profd-t`)
//! and `profd-t-carol` (not a member). They are created once, idempotently,
//! and left in place; users that existed before are never deleted.
//!
//! Other users cannot traverse every directory the tests build in (the target
//! dir may be under /root), so binaries they run are copied into a fresh
//! world-readable directory first (see [`public_copy`]).

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::{path_str, unique_dir};

/// The group whose members are alice and bob.
pub const TEST_GROUP: &str = "profd-t";

/// A local user: name, uid and primary gid (as `id` reports them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// The three test users and the test group.
#[derive(Debug, Clone)]
pub struct Users {
    /// In [`TEST_GROUP`].
    pub alice: User,
    /// In [`TEST_GROUP`].
    pub bob: User,
    /// Not in [`TEST_GROUP`].
    pub carol: User,
    /// The gid of [`TEST_GROUP`].
    pub group_gid: u32,
}

/// Creates (once per test process, idempotently) the group `profd-t` and the
/// users alice and bob in it and carol outside it, and returns them.
pub fn test_users() -> &'static Users {
    static USERS: OnceLock<Users> = OnceLock::new();
    USERS.get_or_init(|| {
        ensure_group(TEST_GROUP);
        let alice = ensure_user("profd-t-alice", true);
        let bob = ensure_user("profd-t-bob", true);
        let carol = ensure_user("profd-t-carol", false);
        let group_gid = group_gid(TEST_GROUP).expect("the test group exists now");
        let users = Users {
            alice,
            bob,
            carol,
            group_gid,
        };
        eprintln!("test users: {users:?}");
        users
    })
}

/// Runs a system administration command and fails the test with its output
/// when it fails.
fn admin(program: &str, args: &[&str]) {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} (install the passwd package): {e}"));
    assert!(
        output.status.success(),
        "`{program} {}` failed ({}):\n{}{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The gid of a group, or `None` when there is no such group.
pub fn group_gid(name: &str) -> Option<u32> {
    let output = Command::new("getent")
        .args(["group", name])
        .output()
        .expect("run getent");
    if !output.status.success() {
        return None;
    }
    let line = String::from_utf8_lossy(&output.stdout);
    line.trim()
        .split(':')
        .nth(2)
        .and_then(|gid| gid.parse().ok())
}

fn ensure_group(name: &str) {
    if group_gid(name).is_none() {
        admin("groupadd", &["--system", name]);
    }
}

/// `id -u`/`id -g`/`id -nG` of a user, or `None` when there is no such user.
fn id(flag: &str, name: &str) -> Option<String> {
    let output = Command::new("id")
        .args([flag, name])
        .output()
        .expect("run id");
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Creates the system user `name` unless it exists, and makes it a member of
/// [`TEST_GROUP`] or not, as `in_group` says.
fn ensure_user(name: &str, in_group: bool) -> User {
    if id("-u", name).is_none() {
        let mut args = vec![
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
        ];
        if in_group {
            args.extend(["--groups", TEST_GROUP]);
        }
        args.push(name);
        admin("useradd", &args);
    }
    let groups = id("-nG", name).expect("the user exists now");
    let member = groups.split_whitespace().any(|g| g == TEST_GROUP);
    match (in_group, member) {
        (true, false) => admin("usermod", &["--append", "--groups", TEST_GROUP, name]),
        (false, true) => admin("gpasswd", &["--delete", name, TEST_GROUP]),
        _ => {}
    }
    let number = |flag| {
        id(flag, name)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("`id {flag} {name}` gave no number"))
    };
    User {
        name: name.to_string(),
        uid: number("-u"),
        gid: number("-g"),
    }
}

impl User {
    /// The `setpriv` arguments that run a command as this user (real,
    /// effective and saved ids, and the user's supplementary groups), up to
    /// and including `--`.
    pub fn setpriv_args(&self) -> Vec<String> {
        vec![
            format!("--reuid={}", self.uid),
            format!("--regid={}", self.gid),
            "--init-groups".to_string(),
            "--".to_string(),
        ]
    }

    /// A `Command` that runs `program` as this user through `setpriv`, which
    /// execs it: the child's pid is the program's.
    pub fn command(&self, program: &Path) -> Command {
        let mut command = Command::new("setpriv");
        command.args(self.setpriv_args()).arg(program);
        command
    }

    pub fn uid_arg(&self) -> String {
        self.uid.to_string()
    }

    pub fn gid_arg(&self) -> String {
        self.gid.to_string()
    }
}

/// Sets a path's permission bits.
pub fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

/// A fresh directory (see [`unique_dir`]) that every user can list and
/// traverse: it and its parent (the test process's temp root) are made 0755,
/// and every directory above must already let others through.
pub fn public_dir(label: &str) -> PathBuf {
    let dir = unique_dir(label);
    chmod(&dir, 0o755);
    let root = dir.parent().expect("unique dirs have a parent");
    chmod(root, 0o755);
    for ancestor in root.ancestors().skip(1) {
        let mode = std::fs::metadata(ancestor)
            .unwrap_or_else(|e| panic!("stat {}: {e}", ancestor.display()))
            .permissions()
            .mode();
        assert!(
            mode & 0o001 != 0,
            "other users cannot traverse {} (mode {mode:o}), which holds the test \
             directories; set TMPDIR to a directory they can reach (e.g. /tmp)",
            ancestor.display()
        );
    }
    dir
}

/// A copy of the executable `exe`, with the same file name (its comm and
/// module), mode 0755, in a directory every user can read: once per test
/// process and file name.
pub fn public_copy(exe: &Path) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    static COPIES: OnceLock<Mutex<HashMap<PathBuf, PathBuf>>> = OnceLock::new();
    let dir = DIR.get_or_init(|| public_dir("public-bin"));
    let mut copies = COPIES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(copy) = copies.get(exe) {
        return copy.clone();
    }
    let name = exe.file_name().expect("an executable has a file name");
    let copy = dir.join(name);
    assert!(
        !copy.exists(),
        "two executables named {} need public copies",
        path_str(Path::new(name))
    );
    std::fs::copy(exe, &copy)
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", exe.display(), copy.display()));
    chmod(&copy, 0o755);
    copies.insert(exe.to_path_buf(), copy.clone());
    copy
}

/// The real, effective, saved and filesystem uids of a process, from
/// `/proc/<pid>/status`.
pub fn process_uids(pid: u32) -> [u32; 4] {
    process_ids(pid, "Uid:")
}

/// The real, effective, saved and filesystem gids of a process.
pub fn process_gids(pid: u32) -> [u32; 4] {
    process_ids(pid, "Gid:")
}

fn process_ids(pid: u32, key: &str) -> [u32; 4] {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/status: {e}"));
    let ids: Vec<u32> = status
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} line in /proc/{pid}/status"))
        .split_whitespace()
        .map(|id| id.parse().expect("numeric id"))
        .collect();
    ids.try_into()
        .unwrap_or_else(|ids| panic!("{key} of {pid} is not 4 ids: {ids:?}"))
}

/// The owner of `/proc/<pid>/stat`. The kernel gives a process's /proc files
/// (other than its directory) to root while the process is not dumpable, and
/// to its effective uid otherwise (`task_dump_owner`): for a process whose
/// effective uid is not root, this tells whether it is dumpable.
pub fn proc_file_owner(pid: u32) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("stat /proc/{pid}/stat: {e}"))
        .uid()
}

/// A test's environment: the global lock, the root/perf preflight and the
/// test users. Declared before a test's daemon, so it is dropped after it.
pub struct Env {
    pub users: &'static Users,
    _serial: MutexGuard<'static, ()>,
}

/// Take the global lock, check root and perf, and make the test users.
pub fn env() -> Env {
    let serial = crate::serial();
    crate::require_root_and_perf();
    Env {
        users: test_users(),
        _serial: serial,
    }
}
