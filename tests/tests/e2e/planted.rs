//! End-to-end tests of the files profctl writes, against a local user
//! (`profd-t-alice`) who plants symbolic links where root will write: at
//! the names of `run -o`, `export -o`, `histogram --gmon`, `diff --pprof`
//! and `man --dir` (`fleet -o` is in [`super::trusted`], which has a
//! ClickHouse), and at their temporary names (the old predictable ones, and
//! by racing every new one). The victim is a root-owned file the attacker
//! cannot write; it must stay as it was, and every refusal names the link
//! and the rule. The helpers here (victims, planted links) serve
//! [`super::trusted`] too. Real kernel, real `profd` and `profctl`, real
//! users.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use profd_e2e::users::{chmod, env, public_copy, public_dir, User};
use profd_e2e::{
    assert_one_line_error, build_workload, path_str, run_profctl, unique_dir, wait_until,
    CmdOutput, Daemon, Workload,
};

/// What the victim holds.
pub(crate) const PRECIOUS: &str = "precious: root's own settings\n";
/// The rule profctl states when it refuses a link.
const CLIENT_LINK_RULE: &str = "profctl follows a link only when you or root own it";

/// A root-owned file (mode 0644, or 0600 for a secret) in a directory of
/// root's that the attacker wants overwritten or read.
pub(crate) struct Victim {
    pub dir: PathBuf,
    pub path: PathBuf,
    text: String,
    mode: u32,
}

impl Victim {
    pub fn new(label: &str, text: &str, mode: u32) -> Victim {
        let dir = unique_dir(label);
        let path = dir.join("victim.conf");
        std::fs::write(&path, text).unwrap();
        chmod(&path, mode);
        Victim {
            dir,
            path,
            text: text.to_string(),
            mode,
        }
    }

    /// Fails the test unless the victim is as it was, alone in its
    /// directory (nothing was written beside it either).
    pub fn assert_untouched(&self, after: &str) {
        let meta = std::fs::symlink_metadata(&self.path).expect("the victim is there");
        assert!(
            meta.is_file(),
            "after {after}: the victim is no longer a file"
        );
        let now = std::fs::read(&self.path).unwrap_or_default();
        assert!(
            now == self.text.as_bytes(),
            "after {after}: the victim was overwritten: it holds {} bytes now, {:?}…",
            now.len(),
            String::from_utf8_lossy(&now[..now.len().min(24)])
        );
        assert_eq!(meta.mode() & 0o7777, self.mode, "after {after}: its mode");
        assert_eq!((meta.uid(), meta.gid()), (0, 0), "after {after}: its owner");
        let names: Vec<_> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names.len(),
            1,
            "after {after}: files beside the victim: {names:?}"
        );
    }
}

/// Runs `program args...` as `user`; fails the test unless it succeeds.
fn as_user(user: &User, program: &str, args: &[&str]) {
    let out = user
        .command(Path::new(program))
        .args(args)
        .output()
        .expect("run setpriv");
    assert!(
        out.status.success(),
        "`{program} {}` as {} failed: {}",
        args.join(" "),
        user.name,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `user` makes the symbolic link `link` → `target`.
pub(crate) fn plant(user: &User, target: &Path, link: &Path) {
    as_user(user, "ln", &["-s", path_str(target), path_str(link)]);
}

/// A directory like /tmp: root's, mode 1777.
pub(crate) fn sticky_dir(label: &str) -> PathBuf {
    let dir = public_dir(label);
    chmod(&dir, 0o1777);
    dir
}

/// A directory `user` owns (mode 0755), that root writes into.
pub(crate) fn users_dir(user: &User, label: &str) -> PathBuf {
    let dir = public_dir(label);
    std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid)).unwrap();
    dir
}

/// profctl failed with one line refusing `link`, planted by `user`, and
/// stating the rule.
pub(crate) fn assert_refused(out: &CmdOutput, link: &Path, user: &User) {
    assert_one_line_error(
        out,
        &[
            &format!("{} is a symbolic link", link.display()),
            &format!("owned by uid {} ({})", user.uid, user.name),
            CLIENT_LINK_RULE,
        ],
    );
}

/// Whether `path` is a whole gzip file root wrote (a pprof profile).
pub(crate) fn is_roots_gzip(path: &Path) -> bool {
    let meta = std::fs::symlink_metadata(path).expect("stat the output");
    let bytes = std::fs::read(path).unwrap_or_default();
    meta.is_file() && meta.uid() == 0 && bytes.starts_with(&[0x1f, 0x8b])
}

/// Links alice planted at the names root's profctl writes are refused,
/// naming the link, its owner and the rule: `run -o` before it starts its
/// command, `export -o`, `histogram --gmon`, `diff --pprof DIR` and
/// `man --dir`. Nothing is written to or beside the victims.
#[test]
fn links_planted_at_output_names_are_refused() {
    let env = env();
    let alice = &env.users.alice;
    let victim = Victim::new("victim-file", PRECIOUS, 0o644);
    let victim_dir = Victim::new("victim-dir", PRECIOUS, 0o644);
    let tmp = sticky_dir("planted-out");
    let d = Daemon::start();

    // run -o: refused before the command runs.
    let run_out = tmp.join("prof.pb.gz");
    plant(alice, &victim.path, &run_out);
    let marker = unique_dir("ran").join("ran");
    let touch = format!("touch {}", path_str(&marker));
    let out = d.profctl(&["run", "-o", path_str(&run_out), "--", "sh", "-c", &touch]);
    assert_refused(&out, &run_out, alice);
    assert!(!marker.exists(), "the command ran before -o was refused");
    victim.assert_untouched("run -o");

    // A session to export.
    let split = build_workload("split");
    let target = Workload::start_exe(&split, 60.0);
    let p = d.profile_until(&target, 300, &[]);
    let id = p.session_id.to_string();

    let export = tmp.join("prof.folded");
    plant(alice, &victim.path, &export);
    let out = d.profctl(&["export", &id, "--format", "folded", "-o", path_str(&export)]);
    assert_refused(&out, &export, alice);
    victim.assert_untouched("export -o");

    let gmon = tmp.join("gmon.out");
    plant(alice, &victim.path, &gmon);
    let out = d.profctl(&[
        "histogram",
        &id,
        "--binary",
        path_str(&split),
        "--gmon",
        path_str(&gmon),
    ]);
    assert_refused(&out, &gmon, alice);
    victim.assert_untouched("histogram --gmon");

    let pairs = tmp.join("pairs");
    plant(alice, &victim_dir.dir, &pairs);
    let out = d.profctl(&["diff", &id, &id, "--pprof", path_str(&pairs)]);
    assert_refused(&out, &pairs, alice);
    victim_dir.assert_untouched("diff --pprof");

    let man = tmp.join("man");
    plant(alice, &victim_dir.dir, &man);
    let out = run_profctl(&["man", "--dir", path_str(&man)], &[]);
    assert_refused(&out, &man, alice);
    victim_dir.assert_untouched("man --dir");

    // The same commands write where no one else could interfere.
    let mine = unique_dir("planted-own");
    let own = mine.join("prof.pb.gz");
    d.profctl(&["export", &id, "--format", "pprof", "-o", path_str(&own)])
        .assert_success();
    assert!(is_roots_gzip(&own));
    d.profctl(&["diff", &id, &id, "--pprof", path_str(&mine.join("pairs"))])
        .assert_success();
    assert!(is_roots_gzip(&mine.join("pairs/base.pb.gz")));
}

/// The attack of the report: root's `profctl run -o D/prof.pb.gz` while
/// alice, who can write D, plants links at the temporary name the old
/// profctl used (`.prof.pb.gz.<its pid>.tmp`, the pid read from /proc)
/// and races every new `.`-name in D (inotify), replacing it with a link
/// where she may. In a sticky directory profctl writes its file; in
/// alice's own one it writes it or, when she replaced its temporary file
/// in time, says so. Either way the victim stays as it was.
#[test]
fn run_o_temporary_files_cannot_be_planted_or_raced() {
    let env = env();
    let alice = &env.users.alice;
    let victim = Victim::new("victim-race", PRECIOUS, 0o644);
    let planter = public_copy(&build_workload("planter"));
    let d = Daemon::start();
    for (label, dir, sticky) in [
        ("sticky", sticky_dir("race-sticky"), true),
        ("alice's", users_dir(alice, "race-alice"), false),
    ] {
        let mut attacker = alice.command(&planter);
        attacker.args([
            path_str(&dir),
            path_str(&victim.path),
            "prof.pb.gz",
            "profctl",
        ]);
        let mut attacker = Workload::start_command(attacker, "planter");
        let go = unique_dir("race-go").join("go");
        let wait = format!("while [ ! -e {} ]; do :; done", path_str(&go));
        let output = dir.join("prof.pb.gz");
        let run = d.spawn_profctl(&["run", "-o", path_str(&output), "--", "sh", "-c", &wait]);
        // The attacker has found profctl and planted the old name.
        let old_name = dir.join(format!(".prof.pb.gz.{}.tmp", run.pid()));
        wait_until(
            &format!("alice's link at {}", old_name.display()),
            Duration::from_secs(60),
            || std::fs::symlink_metadata(&old_name).ok().map(|_| ()),
        );
        std::fs::write(&go, "").unwrap();
        let out = run.wait(Duration::from_secs(120));
        std::fs::write(dir.join(".stop"), "").unwrap();
        attacker.wait(Duration::from_secs(60));
        eprintln!("  {label} directory: {}", out.stderr.trim());
        victim.assert_untouched(&format!("run -o in {label} directory"));
        if out.status.success() {
            assert!(is_roots_gzip(&output), "{label}: {}", out.describe());
        } else {
            assert!(
                !sticky,
                "in a sticky directory profctl must write:\n{}",
                out.describe()
            );
            // The command's status line, then why the file was not written.
            let refusal = format!("profctl: cannot write {}: ", output.display());
            assert!(
                out.status.code() == Some(1)
                    && out.stderr.lines().any(|l| l.starts_with(&refusal)
                        && l.contains("was replaced while profctl wrote it")),
                "{label}: {}",
                out.describe()
            );
        }
    }
}
