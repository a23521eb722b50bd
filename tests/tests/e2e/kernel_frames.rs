//! End-to-end tests of what callers are shown of kernel frames: a member of
//! the socket group whom the kernel itself shows no kernel addresses gets
//! none from profd either, in any answer (the live tables a Watch stream
//! fills, views, every export), while root gets them all; and
//! `--kernel-frames` sets what such callers get instead. Real kernel, real
//! `profd` and `profctl`, run as the test users of `users.rs`; they need
//! root and perf events and fail (never skip) without them.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::MutexGuard;

use profd_common::pprof_proto as pb;
use profd_e2e::users::{chmod, public_copy, public_dir, test_users, User, TEST_GROUP};
use profd_e2e::views::rows;
use profd_e2e::{
    bin, build_workload, path_str, read_sysctl, require_root_and_perf, serial, Cmd, CmdOutput,
    Daemon, Workload, PROFCTL_TIMEOUT,
};
use prost::Message;

/// The kernel's half of the address space.
const KERNEL_HALF: u64 = 0xffff_8000_0000_0000;
/// The frame kernel code is folded into, and its module.
const KERNEL: &str = "[kernel]";
/// Long enough for any test: workloads are killed when the test ends.
const LONG: &str = "60";

struct Env {
    alice: &'static User,
    _serial: MutexGuard<'static, ()>,
}

fn env() -> Env {
    let serial = serial();
    require_root_and_perf();
    Env {
        alice: &test_users().alice,
        _serial: serial,
    }
}

/// profd with its socket open to the test group, and `extra` flags.
fn daemon(extra: &[&str]) -> Daemon {
    let mut args = vec!["--socket-group", TEST_GROUP];
    args.extend_from_slice(extra);
    let mut daemon = Daemon::start_with(&args);
    daemon.assert_alive();
    daemon
}

/// `syscalls` (nearly all its time in the kernel) run by `user`.
fn syscalls(user: &User) -> Workload {
    let exe = public_copy(&build_workload("syscalls"));
    let mut command = user.command(&exe);
    command.args([LONG, "--ready"]);
    Workload::start_command(command, "syscalls")
}

fn ok(out: CmdOutput) -> CmdOutput {
    assert!(out.status.success(), "{}", out.describe());
    out
}

/// profctl as `user`, or as root for None.
fn profctl(daemon: &Daemon, user: Option<&User>, args: &[&str]) -> CmdOutput {
    ok(match user {
        Some(user) => daemon.profctl_as(user, args),
        None => daemon.profctl(args),
    })
}

/// `user` profiles its `pid` for 3 s, with a live table from each Watch
/// update (in a terminal: `script` gives profctl one, as live tables go
/// only to terminals): the session id and what was printed.
fn watched(daemon: &Daemon, user: &User, pid: u32) -> (u64, String) {
    let command = format!(
        "'{}' --socket '{}' attach {pid} --duration 3 --no-tui --interval 0.5",
        path_str(&public_copy(&bin("profctl"))),
        path_str(daemon.socket())
    );
    let mut args = user.setpriv_args();
    args.extend(["script", "-q", "-e", "-c", &command, "/dev/null"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut out = ok(Cmd::spawn("setpriv", &args).wait(PROFCTL_TIMEOUT));
    // The terminal's line ends and the redraws' screen clears.
    out.stdout = out.stdout.replace('\r', "").replace("\x1b[H\x1b[2J", "\n");
    let tables = out.stdout.matches("profd session ").count();
    assert!(
        tables >= 3,
        "live tables and the final one:\n{}",
        out.stdout
    );
    // The first table's `profd session ID`, after the spinner's lines.
    let id = out
        .stdout
        .split("profd session ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("no session id in:\n{}", out.stdout));
    (id, out.stdout)
}

/// What one caller got of a session: every export and the views.
struct Answers {
    pprof: pb::Profile,
    /// JSON, folded stacks, speedscope, SVG, and the views.
    texts: Vec<(String, String)>,
}

impl Answers {
    fn of(daemon: &Daemon, user: Option<&User>, id: u64) -> Answers {
        let dir = public_dir("exports");
        chmod(&dir, 0o777);
        let id = id.to_string();
        let export = |format: &str| {
            let file = dir.join(format!("out.{format}"));
            let path = file.to_str().unwrap();
            profctl(
                daemon,
                user,
                &["export", &id, "--format", format, "-o", path],
            );
            std::fs::read(&file).unwrap()
        };
        let gz = dir.join("out.pprof");
        let pprof_bytes = export("pprof");
        assert!(!pprof_bytes.is_empty());
        let raw = Command::new("gzip").arg("-dc").arg(&gz).output().unwrap();
        assert!(raw.status.success(), "gzip -dc {}", gz.display());
        let pprof = pb::Profile::decode(&raw.stdout[..]).expect("a pprof profile");
        let mut texts = Vec::new();
        for format in ["json", "folded", "speedscope", "svg"] {
            let text = String::from_utf8(export(format)).unwrap();
            texts.push((format.to_string(), text));
        }
        for view in [
            &["report", &id, "--top", "0"][..],
            &["report", &id, "--tree", "--min-pct", "0"],
            &["report", &id, "--tree", "--bottom-up", "--min-pct", "0"],
            &["report", &id, "--hot-path"],
            &["report", &id, "--threads"],
        ] {
            let out = profctl(daemon, user, view);
            texts.push((view.join(" "), out.stdout));
        }
        Answers { pprof, texts }
    }

    /// Names of the functions at kernel addresses, and every kernel
    /// address, of the pprof export.
    fn kernel_in_pprof(&self) -> (BTreeSet<String>, Vec<u64>) {
        let p = &self.pprof;
        let name = |id: u64| {
            let f = p.function.iter().find(|f| f.id == id).unwrap();
            p.string_table[f.name as usize].clone()
        };
        let mut names = BTreeSet::new();
        let mut addresses = Vec::new();
        for l in &p.location {
            if l.address >= KERNEL_HALF {
                addresses.push(l.address);
                names.extend(l.line.iter().map(|line| name(line.function_id)));
            }
        }
        for m in &p.mapping {
            addresses.extend(
                [m.memory_start, m.memory_limit]
                    .into_iter()
                    .filter(|&a| a >= KERNEL_HALF),
            );
        }
        (names, addresses)
    }

    /// Function names of the pprof export, with their module.
    fn pprof_functions(&self) -> BTreeSet<(String, String)> {
        let p = &self.pprof;
        let s = |i: i64| p.string_table[i as usize].clone();
        let mut out = BTreeSet::new();
        for l in &p.location {
            let module = p
                .mapping
                .iter()
                .find(|m| m.id == l.mapping_id)
                .map_or(String::new(), |m| s(m.filename));
            for line in &l.line {
                let f = p
                    .function
                    .iter()
                    .find(|f| f.id == line.function_id)
                    .unwrap();
                out.insert((s(f.name), module.clone()));
            }
        }
        out
    }
}

/// Every `0x...` number in the kernel half in `text`.
fn kernel_hex(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| {
            w.strip_prefix("0x")
                .and_then(|h| u64::from_str_radix(h, 16).ok())
                .is_some_and(|a| a >= KERNEL_HALF)
        })
        .map(str::to_string)
        .collect()
}

/// Rows of the tables in `text` (live or final) whose module is `[kernel]`.
fn kernel_rows(text: &str) -> Vec<String> {
    text.split("profd session ")
        .flat_map(rows)
        .filter(|r| r.module == KERNEL)
        .map(|r| r.name)
        .collect()
}

/// A whole word (name) of `text` among `names`.
fn named(text: &str, names: &BTreeSet<String>) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || ";\"<>,:()".contains(c))
        .filter(|w| names.contains(*w))
        .map(str::to_string)
        .collect()
}

/// Root's answers: kernel functions named, at kernel addresses. Returns
/// their names.
fn root_sees_the_kernel(daemon: &Daemon, id: u64) -> BTreeSet<String> {
    let root = Answers::of(daemon, None, id);
    let (names, addresses) = root.kernel_in_pprof();
    assert!(
        !addresses.is_empty() && names.iter().any(|n| n != KERNEL),
        "root's pprof export has no named kernel frame: {names:?}"
    );
    let flat = &root.texts[4].1;
    assert!(
        kernel_rows(flat).iter().any(|n| n != KERNEL),
        "root's flat view names no kernel function:\n{flat}"
    );
    names
}

/// alice's answers hold no kernel address and name no function of
/// `hidden`; one `[kernel]` frame holds most of the samples (the workload
/// lives in read(2)).
fn assert_folded(alice: &Answers, hidden: &BTreeSet<String>) {
    let (names, addresses) = alice.kernel_in_pprof();
    assert!(
        addresses.is_empty(),
        "alice's pprof export holds kernel addresses {addresses:x?} of {names:?}"
    );
    let functions = alice.pprof_functions();
    let kernel_functions: Vec<_> = functions.iter().filter(|(_, m)| m == KERNEL).collect();
    assert_eq!(
        kernel_functions,
        [&(KERNEL.to_string(), KERNEL.to_string())],
        "alice's pprof export: {functions:?}"
    );
    for (what, text) in &alice.texts {
        assert_eq!(kernel_hex(text), Vec::<String>::new(), "alice's {what}");
        let shown = named(text, hidden);
        assert!(shown.is_empty(), "alice's {what} names {shown:?}:\n{text}");
    }
    let flat = &alice.texts[4].1;
    let kernel_row = rows(flat)
        .into_iter()
        .find(|r| r.name == KERNEL && r.module == KERNEL)
        .unwrap_or_else(|| panic!("no [kernel] row:\n{flat}"));
    assert!(kernel_row.numbers[0] >= 50.0, "{flat}");
}

/// With `perf_event_paranoid` ≥ 2 the kernel would not let alice sample the
/// kernel, and `/proc/kallsyms` shows her zeros: profd folds her kernel
/// frames into one `[kernel]` frame with no address, in the live tables,
/// the views and every export, and so it does for the saved session after
/// a restart. Root, reading the same session, gets every kernel frame with
/// its name and address.
#[test]
fn unprivileged_callers_get_no_kernel_address_by_default() {
    let env = env();
    let paranoid = read_sysctl("/proc/sys/kernel/perf_event_paranoid");
    let kptr_restrict = read_sysctl("/proc/sys/kernel/kptr_restrict");
    eprintln!("perf_event_paranoid {paranoid}, kptr_restrict {kptr_restrict}");
    assert!(
        paranoid >= 2,
        "this test needs kernel.perf_event_paranoid >= 2 (the default), where \
         the kernel shows unprivileged users no kernel frames; it is {paranoid}"
    );
    let mut daemon = daemon(&[]);
    let w = syscalls(env.alice);
    let (id, live) = watched(&daemon, env.alice, w.pid());

    // Watch: the live tables (and the final one).
    let live_kernel = kernel_rows(&live);
    assert!(
        !live_kernel.is_empty() && live_kernel.iter().all(|n| n == KERNEL),
        "alice's live tables show kernel rows {live_kernel:?}:\n{live}"
    );
    assert_eq!(kernel_hex(&live), Vec::<String>::new(), "{live}");

    let kernel_names = root_sees_the_kernel(&daemon, id);
    eprintln!("root sees kernel functions {kernel_names:?}");
    let hidden: BTreeSet<String> = kernel_names.into_iter().filter(|n| n != KERNEL).collect();
    assert_folded(&Answers::of(&daemon, Some(env.alice), id), &hidden);
    // The session saved and read back by the next run of the daemon.
    daemon.restart();
    assert_folded(&Answers::of(&daemon, Some(env.alice), id), &hidden);
    root_sees_the_kernel(&daemon, id);
    drop(w);
}

/// `--kernel-frames names`: alice gets the kernel functions' names, but
/// not one of their addresses.
#[test]
fn names_setting_names_kernel_frames_without_addresses() {
    let env = env();
    let daemon = daemon(&["--kernel-frames", "names"]);
    let w = syscalls(env.alice);
    let (id, live) = watched(&daemon, env.alice, w.pid());
    assert_eq!(kernel_hex(&live), Vec::<String>::new(), "{live}");
    assert!(
        kernel_rows(&live).iter().any(|n| n != KERNEL),
        "alice's live tables name no kernel function:\n{live}"
    );
    let alice = Answers::of(&daemon, Some(env.alice), id);
    let (_, addresses) = alice.kernel_in_pprof();
    assert!(addresses.is_empty(), "kernel addresses {addresses:x?}");
    let named_kernel: Vec<_> = alice
        .pprof_functions()
        .into_iter()
        .filter(|(n, m)| m == KERNEL && n != KERNEL)
        .collect();
    assert!(
        !named_kernel.is_empty(),
        "no kernel function in alice's pprof"
    );
    for (what, text) in &alice.texts {
        assert_eq!(kernel_hex(text), Vec::<String>::new(), "alice's {what}");
    }
    root_sees_the_kernel(&daemon, id);
    drop(w);
}

/// The settings file takes the same values, and says what it takes.
#[test]
fn kernel_frames_setting_is_checked() {
    let dir = profd_e2e::unique_dir("kernel-frames-config");
    let file = dir.join("profd.toml");
    std::fs::write(&file, "kernel_frames = \"hidden\"\n").unwrap();
    let out = profd_e2e::run_profd(&["--check-config", "--config", file.to_str().unwrap()]);
    assert!(!out.status.success(), "{}", out.describe());
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        said.contains("kernel_frames") && said.contains("\"folded\""),
        "{said}"
    );
    std::fs::write(&file, "kernel_frames = \"folded\"\n").unwrap();
    let out = profd_e2e::run_profd(&["--check-config", "--config", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", out.describe());
    assert!(
        out.stdout.contains("kernel_frames = \"folded\""),
        "{}",
        out.stdout
    );
}
