//! cgroup2 groups for the tests: the hierarchy found (or mounted), groups
//! made under it with processes moved in, and everything in them killed and
//! removed when a group is dropped.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Where the cgroup2 hierarchy is mounted when nothing mounts it (beside the
/// v1 controllers of a hybrid host, as systemd puts it).
pub const FALLBACK_MOUNT: &str = "/sys/fs/cgroup/unified";

/// How long a dropped group waits for its processes to die.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The mount point of the cgroup2 hierarchy, from /proc/mounts; when none is
/// mounted, mounts one at [`FALLBACK_MOUNT`] (creating the directory).
/// Panics, naming what failed, when that cannot be done (not root).
pub fn cgroup2_mount() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/mounts").expect("read /proc/mounts");
    if let Some(dir) = mounts.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(2) == Some(&"cgroup2")).then(|| unescape(fields[1]))
    }) {
        return dir;
    }
    let dir = PathBuf::from(FALLBACK_MOUNT);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {FALLBACK_MOUNT} for cgroup2 (needs root): {e}"));
    let out = Command::new("mount")
        .args(["-t", "cgroup2", "cgroup2", FALLBACK_MOUNT])
        .output()
        .expect("run mount");
    assert!(
        out.status.success(),
        "no cgroup2 hierarchy is mounted, and `mount -t cgroup2 cgroup2 {FALLBACK_MOUNT}` failed (needs root): {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    dir
}

/// A /proc/mounts field with its octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> PathBuf {
    let mut out = Vec::new();
    let bytes = field.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            std::str::from_utf8(d)
                .ok()
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        });
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    PathBuf::from(String::from_utf8_lossy(&out).into_owned())
}

/// A group `<cgroup2 mount>/<name>` (or a path of groups, see
/// [`Cgroup::nested`]). Dropping it kills the processes left in it (and in
/// groups below it) and removes it, and the groups above it that it made.
#[derive(Debug)]
pub struct Cgroup {
    /// Its path below the mount.
    name: String,
    dir: PathBuf,
    /// The groups above it made for it, innermost first.
    made: Vec<PathBuf>,
}

impl Cgroup {
    /// Makes the group `name` directly under the cgroup2 mount. A group of
    /// that name left by an earlier run is emptied and removed first. Give
    /// names unique to the test (the test process's pid, say) when tests may
    /// run at once.
    pub fn new(name: &str) -> Cgroup {
        assert!(
            !name.is_empty() && !name.contains('/') && name != "." && name != "..",
            "a cgroup name is one path component: {name:?}"
        );
        let dir = cgroup2_mount().join(name);
        if dir.exists() {
            remove(&dir, true).unwrap_or_else(|e| panic!("leftover {}: {e}", dir.display()));
        }
        std::fs::create_dir(&dir).unwrap_or_else(|e| {
            panic!("cannot make the cgroup {} (needs root): {e}", dir.display())
        });
        Cgroup {
            name: name.to_string(),
            dir,
            made: Vec::new(),
        }
    }

    /// Makes the group at `path` below the cgroup2 mount (components
    /// separated by `/`), and the groups above it that are missing. Those
    /// that were there already (another test's, or the system's) are left
    /// alone on drop; those it made are removed when empty. The innermost
    /// group is handled as [`Cgroup::new`]'s.
    pub fn nested(path: &str) -> Cgroup {
        let parts: Vec<&str> = path.split('/').collect();
        assert!(
            parts
                .iter()
                .all(|p| !p.is_empty() && *p != "." && *p != ".."),
            "a cgroup path is components separated by /: {path:?}"
        );
        let mount = cgroup2_mount();
        let mut made = Vec::new();
        let mut dir = mount.clone();
        for part in &parts[..parts.len() - 1] {
            dir.push(part);
            if !dir.exists() {
                std::fs::create_dir(&dir).unwrap_or_else(|e| {
                    panic!("cannot make the cgroup {} (needs root): {e}", dir.display())
                });
                made.insert(0, dir.clone());
            }
        }
        let leaf = mount.join(path);
        if leaf.exists() {
            remove(&leaf, true).unwrap_or_else(|e| panic!("leftover {}: {e}", leaf.display()));
        }
        std::fs::create_dir(&leaf).unwrap_or_else(|e| {
            panic!(
                "cannot make the cgroup {} (needs root): {e}",
                leaf.display()
            )
        });
        Cgroup {
            name: path.to_string(),
            dir: leaf,
            made,
        }
    }

    /// Its name: the service label profd gives its processes (the last
    /// component of their cgroup path).
    pub fn name(&self) -> &str {
        self.name.rsplit('/').next().unwrap_or(&self.name)
    }

    /// Its directory under the mount.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its path as /proc/PID/cgroup shows it: `/NAME` (`/A/B/NAME` when
    /// nested).
    pub fn path(&self) -> String {
        format!("/{}", self.name)
    }

    /// Moves process `pid` (all its threads) into the group.
    pub fn add(&self, pid: u32) {
        let procs = self.dir.join("cgroup.procs");
        std::fs::write(&procs, pid.to_string())
            .unwrap_or_else(|e| panic!("cannot move pid {pid} into {}: {e}", procs.display()));
    }

    /// A command that runs `program` already inside the group: a shell that
    /// moves itself in, then execs it, so not one of its samples lands
    /// elsewhere. Add arguments, output and environment as to any command;
    /// [`Cgroup::wait_for`] its pid to know it is in.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(r#"echo 0 > "$0" && exec "$@""#)
            .arg(self.dir.join("cgroup.procs"))
            .arg(program);
        cmd
    }

    /// Waits until process `pid` is in the group (a [`Cgroup::command`]'s
    /// shell has moved itself in); panics after 10 s.
    pub fn wait_for(&self, pid: u32) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.pids().contains(&pid) {
            assert!(
                Instant::now() < deadline,
                "pid {pid} did not join {}: {:?}",
                self.dir.display(),
                std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The processes in the group now (not those of groups below it).
    pub fn pids(&self) -> Vec<u32> {
        pids(&self.dir)
    }

    /// The CPU time its processes have used, exited ones included
    /// (`usage_usec` of its `cpu.stat`, kept by cgroup2 with or without the
    /// cpu controller).
    pub fn cpu_time(&self) -> Duration {
        let path = self.dir.join("cpu.stat");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let usec = text
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec ")?.parse().ok())
            .unwrap_or_else(|| panic!("no usage_usec in {}:\n{text}", path.display()));
        Duration::from_micros(usec)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if let Err(e) = remove(&self.dir, true) {
            eprintln!("cgroups: {e}");
        }
        // Groups made above it: removed unless something else is in them.
        for dir in &self.made {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// The pids listed in a group's cgroup.procs.
fn pids(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Kills everything in a group and the groups below it, then removes them,
/// deepest first; retries while the killed processes exit. With `use_kill`,
/// through cgroup.kill where the kernel has it (5.14 on), else by SIGKILL
/// to each pid of cgroup.procs.
fn remove(dir: &Path, use_kill: bool) -> Result<(), String> {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove(&entry.path(), use_kill)?;
            }
        }
    }
    let kill = dir.join("cgroup.kill");
    let deadline = Instant::now() + REMOVE_TIMEOUT;
    loop {
        if !(use_kill && kill.exists() && std::fs::write(&kill, "1").is_ok()) {
            for pid in pids(dir) {
                if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
        }
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!(
                    "cannot remove {} after {REMOVE_TIMEOUT:?} (processes left: {:?}): {e}",
                    dir.display(),
                    pids(dir)
                ))
            }
            // The killed processes are still exiting.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_fields_are_unescaped() {
        assert_eq!(unescape("/sys/fs/cgroup"), Path::new("/sys/fs/cgroup"));
        assert_eq!(unescape("/mnt/a\\040b"), Path::new("/mnt/a b"));
        assert_eq!(unescape("/x\\"), Path::new("/x\\"));
    }

    /// Needs root: fails otherwise.
    #[test]
    fn a_group_holds_its_processes_and_is_removed_with_them() {
        let name = format!("profd-e2e-cgroups-{}", std::process::id());
        let group = Cgroup::new(&name);
        let dir = group.dir().to_path_buf();
        let mut moved = Command::new("sleep").arg("600").spawn().unwrap();
        group.add(moved.id());
        let mut inside = group.command("sleep").arg("600").spawn().unwrap();
        let cgroup_of = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        let want = format!("0::{}\n", group.path());
        assert!(
            cgroup_of(moved.id()).ends_with(&want),
            "{}",
            cgroup_of(moved.id())
        );
        // The shell moves itself in before it execs.
        group.wait_for(inside.id());
        assert!(cgroup_of(inside.id()).ends_with(&want));
        assert_eq!(group.pids().len(), 2);
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/cgroup.procs"), moved.id().to_string()).unwrap();
        drop(group);
        assert!(!dir.exists());
        assert!(moved.wait().unwrap().code().is_none());
        assert!(inside.wait().unwrap().code().is_none());
        // A leftover of the same name is emptied and replaced.
        let left = Cgroup::new(&name);
        let mut child = left.command("sleep").arg("600").spawn().unwrap();
        left.wait_for(child.id());
        std::mem::forget(left);
        let again = Cgroup::new(&name);
        assert!(child.wait().unwrap().code().is_none());
        assert!(again.pids().is_empty());
    }

    /// Needs root: fails otherwise.
    #[test]
    fn a_nested_group_removes_the_groups_it_made_above_it() {
        let top = format!("profd-e2e-cgroups-nested-{}", std::process::id());
        let kept = Cgroup::new(&top);
        let group = Cgroup::nested(&format!("{top}/a/b/leaf"));
        assert_eq!(group.name(), "leaf");
        assert_eq!(group.path(), format!("/{top}/a/b/leaf"));
        let mut child = group.command("sleep").arg("600").spawn().unwrap();
        group.wait_for(child.id());
        let cgroup = std::fs::read_to_string(format!("/proc/{}/cgroup", child.id())).unwrap();
        assert!(
            cgroup.ends_with(&format!("0::{}\n", group.path())),
            "{cgroup}"
        );
        // Another group beside it keeps `a` (made by the first) in place.
        let beside = Cgroup::nested(&format!("{top}/a/other"));
        drop(group);
        assert!(child.wait().unwrap().code().is_none());
        assert!(!kept.dir().join("a/b").exists());
        assert!(kept.dir().join("a/other").exists());
        drop(beside);
        assert!(kept.dir().exists(), "it was there before");
        drop(kept);
    }

    /// Needs root: fails otherwise.
    #[test]
    fn without_cgroup_kill_each_process_is_killed() {
        let group = Cgroup::new(&format!("profd-e2e-cgroups-sigkill-{}", std::process::id()));
        let mut children: Vec<_> = (0..3)
            .map(|_| {
                let child = Command::new("sleep").arg("600").spawn().unwrap();
                group.add(child.id());
                child
            })
            .collect();
        assert_eq!(group.pids().len(), 3);
        remove(group.dir(), false).unwrap();
        assert!(!group.dir().exists());
        for child in &mut children {
            assert!(child.wait().unwrap().code().is_none());
        }
    }
}
