//! Continuous profiling end to end: `profd --continuous` samples every
//! process with no client attached, labels each with its service (here, a
//! cgroup2 group of its own), cuts windows kept in the state directory
//! across restarts within their retention limits, and `profctl query`
//! answers over them as a session would. Real kernel, real `profd` and
//! `profctl`; root needed.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use profd_common::api::{self, profiler_client::ProfilerClient};
use profd_e2e::cgroups::Cgroup;
use profd_e2e::views::{caller_callee, go_pprof_flat};
use profd_e2e::{
    build_workload, path_str, require_root_and_perf, serial, unique_dir, Daemon, Measure, Profile,
    Workload, STACKS_NOFP,
};

/// High enough for ±2 points over a few seconds of each workload (about
/// 6 000 samples: one standard deviation of a share is under 0.7 points).
const FREQ: &str = "999";

/// How long a wait for windows may go without the daemon cutting one,
/// beyond the window's own length: the time a single cut may take to be
/// built and written on a loaded machine (it names the window's new
/// functions). A wait that sees cuts go on waits on.
const STALL: Duration = Duration::from_secs(60);

pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// `profd --continuous` at [`FREQ`] with windows of `window` seconds, and
/// `extra` settings; returns once it samples.
pub(crate) fn continuous(window: &str, extra: &[&str]) -> Daemon {
    let mut args = vec!["--continuous-freq", FREQ];
    args.extend_from_slice(extra);
    continuous_at_default_freq(window, &args)
}

/// `profd --continuous` with windows of `window` seconds and `extra`
/// settings (its default frequency unless they say otherwise); returns
/// once it samples.
pub(crate) fn continuous_at_default_freq(window: &str, extra: &[&str]) -> Daemon {
    let mut args = vec!["--continuous", "--continuous-window", window];
    args.extend_from_slice(extra);
    let d = Daemon::start_with(&args);
    wait_sampling(&d, 1);
    d
}

/// Waits until the daemon's log says continuous profiling started `runs`
/// times (once a start: its rings are open, every sample from then on is
/// counted).
fn wait_sampling(d: &Daemon, runs: usize) {
    profd_e2e::wait_until("continuous profiling started", STALL, || {
        (d.log().matches("continuous profiling started").count() >= runs).then_some(())
    });
}

/// A cgroup2 group for this test process, its own service: `profd-ct-KIND-PID`.
pub(crate) fn group(kind: &str) -> Cgroup {
    Cgroup::new(&format!("profd-ct-{kind}-{}", std::process::id()))
}

/// `exe SECONDS --ready` started in `cg`, once it is ready.
pub(crate) fn start_in(cg: &Cgroup, exe: &Path, seconds: &str) -> Workload {
    let mut cmd = cg.command(exe);
    cmd.args([seconds, "--ready"]);
    let name = exe.file_name().unwrap().to_string_lossy().into_owned();
    Workload::start_command(cmd, &name)
}

/// As [`start_in`], at nice 10: spinning workloads whose samples are
/// counted against their CPU time must not keep the daemon from draining
/// its rings (the samples it loses there are of every process, its
/// workloads' among them). Not 19: beside busy processes at nice 0, a
/// workload at 19 gets about 1 % of a CPU, and the tests wait for its CPU
/// time.
fn start_nice_in(cg: &Cgroup, exe: &Path, seconds: &str) -> Workload {
    let mut cmd = cg.command("nice");
    cmd.args(["-n", "10"]).arg(exe).args([seconds, "--ready"]);
    let name = exe.file_name().unwrap().to_string_lossy().into_owned();
    Workload::start_command(cmd, &name)
}

/// One call to the daemon on `socket`, named `what` where it fails.
fn call<T, F>(
    socket: &Path,
    what: &str,
    ask: impl FnOnce(ProfilerClient<tonic::transport::Channel>) -> F,
) -> T
where
    F: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let channel = profctl::requests::connect::unix_channel(socket, None)
            .await
            .expect("connect to profd");
        ask(ProfilerClient::new(channel))
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .into_inner()
    })
}

/// The daemon's Info.
pub(crate) fn info(socket: &Path) -> api::InfoResponse {
    call(socket, "Info", |mut c| async move {
        c.info(api::InfoRequest::default()).await
    })
}

/// ListWindows over the whole history.
pub(crate) fn list(socket: &Path) -> api::ListWindowsResponse {
    call(socket, "ListWindows", |mut c| async move {
        c.list_windows(api::ListWindowsRequest::default()).await
    })
}

/// Waits until the daemon has cut its windows up to `t_ns` or later: the
/// history holds every sample before it (a window without samples is not
/// kept, so the last window listed may end earlier).
pub(crate) fn wait_for_window_after(d: &Daemon, t_ns: u64) -> api::ListWindowsResponse {
    wait_for_cuts(d, &format!("a window cut up to {t_ns}"), |l| {
        (l.cut_until_unix_ns >= t_ns).then(|| l.clone())
    })
}

/// Polls ListWindows until `ready` gives a value. It waits as long as the
/// daemon keeps cutting windows: it fails, naming `what`, only once no cut
/// came for a window's length and [`STALL`].
pub(crate) fn wait_for_cuts<T>(
    d: &Daemon,
    what: &str,
    mut ready: impl FnMut(&api::ListWindowsResponse) -> Option<T>,
) -> T {
    let mut last_cut = 0;
    let mut since = Instant::now();
    loop {
        let l = list(d.socket());
        if let Some(v) = ready(&l) {
            return v;
        }
        if l.cut_until_unix_ns > last_cut {
            (last_cut, since) = (l.cut_until_unix_ns, Instant::now());
        }
        let limit = STALL + Duration::from_secs(l.window_seconds.into());
        assert!(
            since.elapsed() < limit,
            "{what}: no window cut for {limit:?} (the last cut up to {last_cut}): {l:?}\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Samples the rings lost in the windows listed (of every process).
fn lost_in(l: &api::ListWindowsResponse) -> u64 {
    l.windows
        .iter()
        .map(|w| w.totals.map_or(0, |t| t.lost))
        .sum()
}

/// Asserts that `samples` are what `cpu` (a cgroup's CPU time) calls for
/// at `hz` samples a second on each CPU, N = CPU time × hz. The kernel's
/// cpu-clock timer ticks at a fixed period on each CPU, and each tick is a
/// sample of whatever runs there: a stretch on the CPU gets its length in
/// periods, rounded up or down by where the ticks fall. So the count's mean
/// is N and its variance at most N (a stretch shorter than a period is a
/// Bernoulli trial, longer ones vary by less): it lies within four standard
/// deviations, 4√N, but for one run in 15 000. Samples the rings lost
/// (`lost`, of every process) can only lower it.
fn assert_samples_for_cpu(what: &str, samples: u64, lost: u64, cpu: Duration, hz: &str) {
    let n = cpu.as_secs_f64() * hz.parse::<f64>().expect("a frequency");
    let (low, high) = (n - 4.0 * n.sqrt() - lost as f64, n + 4.0 * n.sqrt());
    eprintln!(
        "  {what}: {samples} samples for {:.3} s of CPU at {hz} Hz: {n:.0} ± {:.0} (lost {lost})",
        cpu.as_secs_f64(),
        4.0 * n.sqrt()
    );
    assert!(
        (low..=high).contains(&(samples as f64)),
        "{what}: {samples} samples, but {:.3} s of CPU at {hz} Hz call for {n:.0}: expected \
         {low:.0} to {high:.0} ({lost} lost)",
        cpu.as_secs_f64()
    );
}

/// `profctl query ARGS --format json`.
fn query(d: &Daemon, args: &[&str]) -> Profile {
    let mut all = vec!["query"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--format", "json"]);
    let p = Profile::parse(&d.profctl(&all));
    eprintln!("{}", p.table());
    p
}

/// The part of service `name` in a `query --by service` table: its samples
/// and its functions' inclusive and exclusive counts by name.
fn service_part(text: &str, name: &str) -> (u64, std::collections::HashMap<String, (u64, u64)>) {
    let head = format!("[service {name}]: ");
    let mut lines = text.lines().skip_while(|l| !l.starts_with(&head));
    let total = lines
        .next()
        .and_then(|l| l.strip_prefix(&head)?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no part for {name}:\n{text}"));
    let rows = lines
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let (incl, excl) = (w.get(1)?.parse().ok()?, w.get(3)?.parse().ok()?);
            Some((w.get(4)?.to_string(), (incl, excl)))
        })
        .collect();
    (total, rows)
}

/// The CPU time each workload of a split check runs for.
const SPLIT_CPU: Duration = Duration::from_secs(8);

/// The modules of a profile's functions.
fn modules(p: &Profile) -> BTreeSet<String> {
    p.functions.iter().map(|f| f.module.clone()).collect()
}

/// Two workloads of known split, each in a cgroup of its own: each is its
/// own service, with its own exclusive split within ±2 points, and neither
/// leaks into the other. Neither the idle task nor profd is in any window.
/// Each runs until its group has used [`SPLIT_CPU`]: 8000 samples at 999
/// Hz, over which a 25 % share's binomial standard deviation is 0.48
/// points (a 45 % share's 0.56), ±2 points over three and a half of them.
#[test]
fn workloads_in_two_cgroups_are_two_services_with_their_own_split() {
    let _serial = serial();
    require_root_and_perf();
    let d = continuous("2", &[]);
    let (a, b) = (group("split"), group("stacks"));
    let w1 = start_nice_in(&a, &build_workload("split"), "600");
    let w2 = start_nice_in(&b, &STACKS_NOFP.path(), "600");
    profd_e2e::wait_until("the groups' CPU time", Duration::from_secs(600), || {
        (a.cpu_time() >= SPLIT_CPU && b.cpu_time() >= SPLIT_CPU).then_some(())
    });
    drop((w1, w2));
    let listed = wait_for_window_after(&d, now_ns());
    let services: HashSet<&str> = listed.services.iter().map(|s| s.service.as_str()).collect();
    assert!(
        services.contains(a.name()) && services.contains(b.name()),
        "services {services:?} lack {} or {}",
        a.name(),
        b.name()
    );
    let pa = query(&d, &["--service", a.name()]);
    let pb = query(&d, &["--service", b.name()]);
    // Each service's samples are its cgroup's CPU time's worth.
    let lost = lost_in(&listed);
    for (p, cg) in [(&pa, &a), (&pb, &b)] {
        assert_samples_for_cpu(cg.name(), p.totals.attributed, lost, cg.cpu_time(), FREQ);
    }
    // split.c: leaf_a 25 %, leaf_b 75 % exclusive by construction.
    pa.assert_pct_within("leaf_a", Measure::Exclusive, 25.0, 2.0);
    pa.assert_pct_within("leaf_b", Measure::Exclusive, 75.0, 2.0);
    // stacks.c, no frame pointers: leaf_a 15, leaf_b 45, rec_leaf 40
    // exclusive; work 60 and rec 40 inclusive need whole DWARF walks.
    pb.assert_pct_within("leaf_a", Measure::Exclusive, 15.0, 2.0);
    pb.assert_pct_within("leaf_b", Measure::Exclusive, 45.0, 2.0);
    pb.assert_pct_within("rec_leaf", Measure::Exclusive, 40.0, 2.0);
    pb.assert_pct_within("work", Measure::Inclusive, 60.0, 2.0);
    pb.assert_pct_within("rec", Measure::Inclusive, 40.0, 2.0);
    assert!(!modules(&pa).contains("stacks_nofp"), "{}", pa.table());
    assert!(!modules(&pb).contains("split"), "{}", pb.table());
    // `--by service` as a table: a part per service, each with its own
    // counts, as the query of that service alone has them (leaf_a and
    // leaf_b are in both).
    let grouped = d.profctl(&["query", "--by", "service", "--top", "0"]);
    grouped.assert_success();
    for (p, cg) in [(&pa, &a), (&pb, &b)] {
        let (total, rows) = service_part(&grouped.stdout, cg.name());
        assert_eq!(total, p.totals.attributed, "{}", grouped.stdout);
        for name in ["leaf_a", "leaf_b"] {
            let f = p.function(name);
            assert_eq!(
                rows.get(name),
                Some(&(f.inclusive, f.exclusive)),
                "{name} in {}'s part:\n{}",
                cg.name(),
                grouped.stdout
            );
        }
    }
    // The views and exports of a session, over the history: callers, and
    // the pprof export as `go tool pprof` reads it.
    let callers = d.profctl(&["query", "--service", a.name(), "--callers", "leaf_b"]);
    callers.assert_success();
    let cc = caller_callee(&callers.stdout);
    assert!(
        cc.callers.iter().any(|r| r.name == "mid"),
        "leaf_b's callers lack mid:\n{}",
        callers.stdout
    );
    // Tab after `--callers` offers the functions of the history the query
    // selects, with the ids its JSON has: service b's are not there.
    let complete = |part: &str| {
        let socket = path_str(d.socket());
        let words = [
            "--",
            "profctl",
            "--socket",
            socket,
            "query",
            "--service",
            a.name(),
        ];
        let mut args = words.to_vec();
        args.extend(["--callers", part]);
        let env = [("COMPLETE".to_string(), "fish".to_string())];
        let out = profd_e2e::run_profctl(&args, &env);
        out.assert_success();
        out.stdout
    };
    let id = |name: &str| pa.function(name).id.expect("JSON id");
    let offered = complete("leaf");
    for name in ["leaf_a", "leaf_b"] {
        let line = format!("{name}\t#{}", id(name));
        assert!(
            offered.lines().any(|l| l == line),
            "no {line:?}:\n{offered}"
        );
    }
    assert_eq!(complete("rec_leaf"), "", "service b's function offered");
    let file = unique_dir("continuous-pprof").join("a.pb.gz");
    d.profctl(&[
        "query",
        "--service",
        a.name(),
        "--format",
        "pprof",
        "-o",
        path_str(&file),
    ])
    .assert_success();
    let (flat, text) = go_pprof_flat(&file);
    let want = pa.exclusive_as_pprof_names();
    assert_eq!(flat, want, "go tool pprof -top:\n{text}\n{}", pa.table());
    // No profd frames anywhere: its own threads are never sampled.
    let all = query(&d, &["--by", "process"]);
    let own = format!("[process {} ", d.pid());
    assert!(
        all.functions.iter().all(|f| !f.name.starts_with(&own)),
        "profd's own process is in the history:\n{}",
        all.table()
    );
}

/// The totals of a query that selects services are those of the
/// services' own samples: `jit` without its perf map (its code
/// unsymbolized) in one group, `split` (named whole) in another. The jit
/// service's samples are mostly unsymbolized, split's hardly any, and the
/// whole history's at least both. (Whole windows' totals gave split the
/// jit's unsymbolized samples.)
#[test]
fn the_totals_of_a_service_are_its_own_samples() {
    let _serial = serial();
    require_root_and_perf();
    let d = continuous("2", &[]);
    let (a, b) = (group("named"), group("anon"));
    let cpu = Duration::from_secs(2);
    let w1 = start_nice_in(&a, &build_workload("split"), "600");
    // No map is ever written: a map removed once the workload is ready
    // may have been read by then.
    let mut jit = b.command("nice");
    jit.env("JIT_NO_MAP", "1")
        .args(["-n", "10"])
        .arg(build_workload("jit"))
        .args(["600", "--ready"]);
    let w2 = Workload::start_command(jit, "jit");
    profd_e2e::wait_until("the groups' CPU time", Duration::from_secs(600), || {
        (a.cpu_time() >= cpu && b.cpu_time() >= cpu).then_some(())
    });
    let pids = (w1.pid_arg(), w2.pid_arg());
    drop((w1, w2));
    wait_for_window_after(&d, now_ns());
    let (named, anon) = (
        query(&d, &["--service", a.name()]),
        query(&d, &["--service", b.name()]),
    );
    // Each process's totals are its own too: here its service's.
    let (split_pid, jit_pid) = (
        query(&d, &["--pid", &pids.0]),
        query(&d, &["--pid", &pids.1]),
    );
    for (process, service) in [(&split_pid, &named), (&jit_pid, &anon)] {
        let (p, s) = (&process.totals, &service.totals);
        assert_eq!(
            (p.attributed, p.unsymbolized),
            (s.attributed, s.unsymbolized),
            "a process's totals against its service's:\n{}",
            process.table()
        );
    }
    let all = query(&d, &[]);
    let (n, j) = (&named.totals, &anon.totals);
    eprintln!(
        "  unsymbolized: named {} of {}, anon {} of {}, all {} of {}",
        n.unsymbolized,
        n.attributed,
        j.unsymbolized,
        j.attributed,
        all.totals.unsymbolized,
        all.totals.attributed
    );
    assert!(
        j.unsymbolized * 2 >= j.attributed,
        "the jit code without a perf map is unsymbolized:\n{}",
        anon.table()
    );
    assert!(
        n.unsymbolized * 100 <= n.attributed,
        "split's totals hold samples of another service: {} unsymbolized of {}:\n{}",
        n.unsymbolized,
        n.attributed,
        named.table()
    );
    assert!(
        all.totals.unsymbolized >= n.unsymbolized + j.unsymbolized,
        "{}",
        all.table()
    );
}

/// Seconds in a `times` figure such as `0m5.120s`.
fn times_s(figure: &str) -> f64 {
    let (m, s) = figure
        .trim_end_matches('s')
        .split_once('m')
        .expect("NmN.NNNs");
    m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
}

/// A shell loop starting short-lived processes (each spins 50 ms): their
/// samples land in the loop's service, as many as the CPU time they used
/// calls for, each process is named, and their frames are named.
#[test]
fn short_lived_processes_are_counted_named_and_symbolized() {
    let _serial = serial();
    require_root_and_perf();
    let d = continuous("2", &[]);
    let cg = group("loop");
    let busy = build_workload("busy");
    let runs = 120;
    let mut sh = cg.command("/bin/sh");
    sh.arg("-c")
        .arg(format!(
            "i=0; while [ $i -lt {runs} ]; do \"$0\" threads 1 0.05 2>/dev/null; i=$((i+1)); done; times"
        ))
        .arg(&busy);
    let out = sh.output().expect("run the loop");
    assert!(out.status.success(), "{out:?}");
    // `times`: the shell's user and system time, then its children's.
    let times = String::from_utf8_lossy(&out.stdout).into_owned();
    let children: f64 = times
        .lines()
        .nth(1)
        .unwrap_or_else(|| panic!("no children's times in {times:?}"))
        .split_whitespace()
        .map(times_s)
        .sum();
    wait_for_window_after(&d, now_ns());
    let p = query(&d, &["--service", cg.name()]);
    let called_for = children * FREQ.parse::<f64>().unwrap();
    let ratio = p.totals.attributed as f64 / called_for;
    eprintln!(
        "{} samples for {children:.2} s of the processes' CPU: {ratio:.2} of {called_for:.0}",
        p.totals.attributed
    );
    assert!((0.85..=1.15).contains(&ratio), "{ratio:.2}:\n{}", p.table());
    p.assert_pct_between("thread_spin", Measure::Exclusive, 70.0, 100.0);
    let unnamed: Vec<&str> = p
        .functions
        .iter()
        .filter(|f| f.module == "busy" && f.name.starts_with("busy+0x"))
        .map(|f| f.name.as_str())
        .collect();
    assert!(
        unnamed.is_empty(),
        "unnamed in busy: {unnamed:?}\n{}",
        p.table()
    );
    let by = query(&d, &["--service", cg.name(), "--by", "process"]);
    let named: HashSet<&str> = by
        .functions
        .iter()
        .filter(|f| f.name.starts_with("[process ") && f.name.ends_with(" busy]"))
        .map(|f| f.name.as_str())
        .collect();
    assert!(
        named.len() >= runs * 9 / 10,
        "{} of {runs} processes named busy:\n{}",
        named.len(),
        by.table()
    );
    let exited: u64 = list(d.socket())
        .windows
        .iter()
        .map(|w| w.processes_exited)
        .sum();
    assert!(
        exited >= runs as u64,
        "{exited} exits counted for {runs} runs"
    );
}

/// Selectors: only the processes of the cgroup chosen are profiled, for
/// its CPU time; the others' samples are discarded, and counted: at least
/// the other cgroup's CPU time's worth (anything else that ran is
/// discarded too).
#[test]
fn a_selector_profiles_only_the_processes_it_chooses() {
    let _serial = serial();
    require_root_and_perf();
    let (a, b) = (group("chosen"), group("other"));
    let select = format!("cgroup:{}", a.path());
    let d = continuous("1", &["--continuous-select", &select]);
    let mut w1 = start_in(&a, &build_workload("split"), "3");
    let mut w2 = start_in(&b, &build_workload("split"), "3");
    w1.wait(Duration::from_secs(30));
    w2.wait(Duration::from_secs(30));
    let l = wait_for_window_after(&d, now_ns());
    let services: Vec<&str> = l.services.iter().map(|s| s.service.as_str()).collect();
    assert_eq!(services, [a.name()], "only the chosen cgroup is profiled");
    let attributed: u64 = l.services.iter().map(|s| s.samples).sum();
    let discarded: u64 = l
        .windows
        .iter()
        .map(|w| w.totals.map_or(0, |t| t.discarded))
        .sum();
    let samples_of = |cg: &Cgroup| cg.cpu_time().as_secs_f64() * FREQ.parse::<f64>().unwrap();
    let (chosen, other) = (samples_of(&a), samples_of(&b));
    eprintln!(
        "  attributed {attributed}, discarded {discarded}; the groups' CPU time calls for \
         {chosen:.0} and {other:.0} samples"
    );
    assert!(
        chosen >= 300.0 && other >= 300.0,
        "too little CPU time to compare (is the machine overloaded?)"
    );
    assert!(
        (attributed as f64 - chosen).abs() <= chosen * 0.15,
        "{attributed} attributed, but the chosen group's CPU time calls for {chosen:.0}"
    );
    assert!(
        discarded as f64 >= other * 0.85,
        "{discarded} discarded, but the other group's CPU time alone calls for {other:.0}"
    );
}

/// A program deleted while it runs: its frames are still named (from the
/// file held open), and the windows count it.
#[test]
fn a_binary_deleted_while_it_runs_is_still_named_and_counted() {
    let _serial = serial();
    require_root_and_perf();
    let d = continuous("1", &[]);
    let cg = group("deleted");
    let copy = unique_dir("continuous-deleted").join("split_copy");
    std::fs::copy(build_workload("split"), &copy).expect("copy the workload");
    let mut w = start_in(&cg, &copy, "4");
    std::fs::remove_file(&copy).expect("delete the running program");
    w.wait(Duration::from_secs(30));
    let l = wait_for_window_after(&d, now_ns());
    let replaced: u64 = l.windows.iter().map(|w| w.binaries_replaced).sum();
    assert!(replaced >= 1, "no window counts the deleted program: {l:?}");
    let p = query(&d, &["--service", cg.name()]);
    p.assert_pct_within("leaf_a", Measure::Exclusive, 25.0, 3.0);
    p.assert_pct_within("leaf_b", Measure::Exclusive, 75.0, 3.0);
}

/// A restart between two windows: the windows before it are still there,
/// unchanged, beside those after it, and a query over all of them counts
/// each sample once.
#[test]
fn windows_survive_a_restart_and_count_once() {
    let _serial = serial();
    require_root_and_perf();
    let mut d = continuous("1", &[]);
    let cg = group("restart");
    let _w = start_in(&cg, &build_workload("split"), "30");
    let before = wait_for_window_after(&d, now_ns() + 2_000_000_000);
    d.restart();
    let after = wait_for_window_after(&d, now_ns() + 2_000_000_000);
    let ids: Vec<&str> = after.windows.iter().map(|w| w.id.as_str()).collect();
    let unique: HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "a window listed twice: {ids:?}");
    for w in &before.windows {
        let kept = after.windows.iter().find(|x| x.id == w.id);
        assert_eq!(
            kept.map(|x| (x.start_unix_ns, x.totals)),
            Some((w.start_unix_ns, w.totals)),
            "window {} changed or went across the restart",
            w.id
        );
    }
    // The window cut at the restart ends before the next one starts.
    for pair in after.windows.windows(2) {
        assert!(pair[0].end_unix_ns <= pair[1].start_unix_ns, "{pair:?}");
    }
    // Up to the end of the last window listed (RFC 3339 to the
    // millisecond): a query takes the windows that start before it, so
    // those listed and none cut since. A window with samples is cut after
    // the listing first, so a `--to` that were not applied would count it.
    let last_end = after.windows.last().unwrap().end_unix_ns;
    wait_for_cuts(&d, "a window with samples after the listing", |l| {
        l.windows
            .iter()
            .any(|w| w.start_unix_ns >= last_end && w.totals.is_some_and(|t| t.attributed > 0))
            .then_some(())
    });
    let end = UNIX_EPOCH + Duration::from_nanos(last_end);
    let to = humantime::format_rfc3339_millis(end).to_string();
    let p = query(&d, &["--from", "0", "--to", &to]);
    let sum: u64 = after
        .windows
        .iter()
        .map(|w| w.totals.map_or(0, |t| t.attributed))
        .sum();
    assert_eq!(p.totals.attributed, sum, "a query counts each window once");
    assert!(after.windows.len() > before.windows.len());
}

/// A retention age shorter than the history: the oldest windows are
/// dropped first, and counted.
#[test]
fn retention_drops_the_oldest_windows_and_counts_them() {
    let _serial = serial();
    require_root_and_perf();
    let d = continuous("1", &["--continuous-retention-age", "3"]);
    let cg = group("keep");
    let _w = start_in(&cg, &build_workload("split"), "30");
    let mut seen: Vec<(u64, String)> = Vec::new();
    let l = wait_for_cuts(&d, "three windows dropped by age", |l| {
        for w in &l.windows {
            if !seen.iter().any(|(_, id)| *id == w.id) {
                seen.push((w.start_unix_ns, w.id.clone()));
            }
        }
        (l.dropped_age >= 3).then(|| l.clone())
    });
    seen.sort();
    let kept: Vec<&str> = l.windows.iter().map(|w| w.id.as_str()).collect();
    let newest: Vec<&str> = seen[seen.len() - kept.len()..]
        .iter()
        .map(|(_, id)| id.as_str())
        .collect();
    assert_eq!(kept, newest, "the windows kept are the newest");
    let oldest = l.windows.first().unwrap().end_unix_ns;
    assert!(
        now_ns().saturating_sub(oldest) <= 5_000_000_000,
        "a window older than 3 s (and a window) kept"
    );
    assert_eq!(l.windows_kept as usize, kept.len());
    // The oldest window's range is no longer answered: an error saying
    // what the history holds, not an empty profile.
    let (gone_ns, gone) = &seen[0];
    assert!(!kept.contains(&gone.as_str()));
    let from = (gone_ns / 1_000_000_000).to_string();
    let to = (gone_ns / 1_000_000_000 + 1).to_string();
    let out = d.profctl(&["query", "--from", &from, "--to", &to]);
    assert!(
        !out.status.success()
            && out.stderr.contains("no windows in the history from")
            && out.stderr.contains("it holds"),
        "{out:?}"
    );
}

/// JIT code is named from its runtime's perf map, as in a session: node's
/// jit_split.js in its service, every sample of its parts named and under
/// their callers. Not its 30/70 split: the history holds the whole run,
/// node's start and the warm-up's short rounds (mostly calls) too.
#[test]
fn jit_frames_are_named_from_the_perf_map() {
    let _serial = serial();
    require_root_and_perf();
    let d = continuous("2", &[]);
    let cg = group("node");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/jit_split.js");
    let mut node = cg.command("node");
    node.current_dir(unique_dir("node"))
        .args(["--perf-basic-prof", "--no-turbo-inlining", "--no-use-osr"])
        .arg(script)
        .args(["6", "--ready"]);
    let mut w = Workload::start_command(node, "node");
    let map = format!("/tmp/perf-{}.map", w.pid());
    w.wait(Duration::from_secs(30));
    let _ = std::fs::remove_file(&map);
    wait_for_window_after(&d, now_ns());
    let p = query(&d, &["--service", cg.name()]);
    // The whole life of the process is in the history, node's start too.
    let (a, b) = (
        p.js_pct("leafA", Measure::Inclusive),
        p.js_pct("leafB", Measure::Inclusive),
    );
    eprintln!("  leafA {a:.2} %, leafB {b:.2} % inclusive");
    assert!(a >= 3.0 && b >= 3.0 && a + b >= 90.0, "{}", p.table());
    let (mid, leaf_b) = (
        p.js_pct("mid", Measure::Inclusive),
        p.js_pct("leafB", Measure::Inclusive),
    );
    assert!(
        (mid - leaf_b).abs() <= 1.0,
        "leafB under mid:\n{}",
        p.table()
    );
    assert!(
        p.js_pct("work", Measure::Inclusive) >= 90.0,
        "{}",
        p.table()
    );
}

/// Continuous profiling copies `continuous.stack_bytes` of each sample's
/// user stack: node's deep stacks are cut where a 2048-byte copy ends, and
/// a query's header says how many, with the setting to raise.
#[test]
fn a_short_continuous_stack_copy_is_named_with_its_setting() {
    let _serial = serial();
    require_root_and_perf();
    let d = continuous("2", &["--continuous-stack-bytes", "2048"]);
    let cg = group("deep");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/jit_split.js");
    let mut node = cg.command("node");
    node.current_dir(unique_dir("deep"))
        .arg(script)
        .args(["3", "--ready"]);
    Workload::start_command(node, "node").wait(Duration::from_secs(30));
    wait_for_window_after(&d, now_ns());
    let p = query(&d, &["--service", cg.name()]);
    let (ended, all) = (p.totals.truncated_copy_ended, p.totals.attributed);
    assert!(
        ended * 2 >= all && ended <= p.totals.truncated,
        "{ended} of {all} stacks cut by a 2048-byte copy:\n{}",
        p.table()
    );
    let out = d.profctl(&["query", "--service", cg.name()]);
    out.assert_success();
    assert!(
        out.stdout.contains(
            "truncated where the stack copy ended: raise the daemon's \
             continuous.stack_bytes (--continuous-stack-bytes, up to 65528)"
        ),
        "{}",
        out.stdout
    );
}

/// `profctl diff` of two time ranges of the history: split 25/75, a pause,
/// then split 50/50 (SPLIT_MID=1) in the same service; over its service,
/// leaf_a's self share grows by 25 points and leaf_b's shrinks by 25.
#[test]
fn diff_of_two_time_ranges_shows_the_change() {
    let _serial = serial();
    require_root_and_perf();
    let d = continuous("1", &[]);
    let cg = group("diff");
    let split = build_workload("split");
    let phase = |mid: &str| {
        let start = now_ns() / 1_000_000_000;
        let mut cmd = cg.command(&split);
        cmd.env("SPLIT_MID", mid).args(["3", "--ready"]);
        Workload::start_command(cmd, "split").wait(Duration::from_secs(30));
        (start, now_ns() / 1_000_000_000 + 1)
    };
    let before = phase("3");
    // Windows of a second: a pause of two keeps the phases apart.
    std::thread::sleep(Duration::from_secs(2));
    let after = phase("1");
    wait_for_window_after(&d, after.1 * 1_000_000_000);
    let range = |(from, to): (u64, u64)| format!("{from}..{to}");
    let out = d.profctl(&[
        "diff",
        &range(before),
        &range(after),
        "--service",
        cg.name(),
    ]);
    out.assert_success();
    eprintln!("{}", out.stdout);
    let table = profd_e2e::views::rows(&out.stdout);
    let change = |name: &str| {
        table
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("no {name}:\n{}", out.stdout))
            .numbers[6]
    };
    for (name, want) in [("leaf_a", 25.0), ("leaf_b", -25.0)] {
        let got = change(name);
        assert!(
            (got - want).abs() <= 4.0,
            "{name} changed {got}, not {want} ± 4:\n{}",
            out.stdout
        );
    }
}

/// Continuous profiling at its default frequency, 19 Hz: a service's
/// samples are its cgroup's CPU time at 19 a second, within the bound of
/// [`assert_samples_for_cpu`]. Two spinning workloads run until the group
/// has used [`DEFAULT_HZ_CPU`] of CPU time (however long the loaded
/// machine takes to give it): about 380 samples, so 4√N is a fifth of N
/// and a count half or twice N fails.
#[test]
fn the_default_frequency_samples_the_cpu_time() {
    let _serial = serial();
    require_root_and_perf();
    let d = continuous_at_default_freq("2", &[]);
    let cg = group("default-hz");
    let split = build_workload("split");
    let workloads = [start_in(&cg, &split, "600"), start_in(&cg, &split, "600")];
    profd_e2e::wait_until("the group's CPU time", Duration::from_secs(600), || {
        (cg.cpu_time() >= DEFAULT_HZ_CPU).then_some(())
    });
    drop(workloads);
    let cpu = cg.cpu_time();
    let l = wait_for_window_after(&d, now_ns());
    assert_eq!(l.frequency_hz, 19, "the default frequency");
    for w in &l.windows {
        assert_eq!(
            (w.frequency_hz, w.configured_frequency_hz),
            (19, 19),
            "window {} ran at another frequency",
            w.id
        );
    }
    let samples = l
        .services
        .iter()
        .find(|s| s.service == cg.name())
        .map_or(0, |s| s.samples);
    assert_samples_for_cpu(cg.name(), samples, lost_in(&l), cpu, "19");
}

/// The CPU time [`the_default_frequency_samples_the_cpu_time`] samples.
const DEFAULT_HZ_CPU: Duration = Duration::from_secs(20);

/// Sends `signal` to process `pid`.
fn send(pid: u32, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(pid as i32).expect("a pid");
    rustix::process::kill_process(pid, signal).expect("send a signal");
}

/// Whether process `pid` is stopped (state `T` in /proc/PID/stat).
fn stopped(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
    stat[stat.rfind(')').expect("comm") + 2..].starts_with('T')
}

/// The samples of `service`, and the samples lost, in the windows that
/// start before `t_ns` and in those that start at or after it.
fn samples_around(l: &api::ListWindowsResponse, service: &str, t_ns: u64) -> [(u64, u64); 2] {
    let mut split = [(0, 0); 2];
    for w in &l.windows {
        let n: u64 = w
            .services
            .iter()
            .filter(|s| s.service == service)
            .map(|s| s.samples)
            .sum();
        let part = &mut split[usize::from(w.start_unix_ns >= t_ns)];
        part.0 += n;
        part.1 += w.totals.map_or(0, |t| t.lost);
    }
    split
}

/// The windows cut as the daemon stops hold their cgroup's CPU time: with
/// windows of an hour, a spinning workload (at nice 10, so that it does
/// not keep the daemon from its rings) runs in its group for 3 s of CPU
/// and is stopped (SIGSTOP); the daemon restarts (SIGTERM: its window is
/// cut as it stops), the workload goes on for 3 s more once the daemon
/// samples again, is killed, and the daemon restarts once more. The
/// windows started before the first restart hold the group's CPU time up
/// to the stop, those after it the rest, each within
/// [`assert_samples_for_cpu`]'s bound, and every window is listed once.
#[test]
fn windows_cut_at_restarts_hold_the_cgroup_s_cpu_time() {
    let _serial = serial();
    require_root_and_perf();
    let mut d = continuous("3600", &[]);
    let cg = group("restart-cpu");
    let w = start_nice_in(&cg, &build_workload("split"), "600");
    let cpu_at = |at: Duration| {
        profd_e2e::wait_until("the group's CPU time", Duration::from_secs(600), || {
            (cg.cpu_time() >= at).then_some(())
        })
    };
    cpu_at(Duration::from_secs(3));
    send(w.pid(), rustix::process::Signal::STOP);
    profd_e2e::wait_until("the workload stopped", Duration::from_secs(60), || {
        stopped(w.pid()).then_some(())
    });
    let before = cg.cpu_time();
    let restart_ns = now_ns();
    d.restart();
    wait_sampling(&d, 2);
    send(w.pid(), rustix::process::Signal::CONT);
    cpu_at(before + Duration::from_secs(3));
    drop(w);
    let all = cg.cpu_time();
    d.restart();
    let l = list(d.socket());
    let ids: HashSet<&str> = l.windows.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(ids.len(), l.windows.len(), "a window listed twice: {l:?}");
    let [(samples, lost), (samples_after, lost_after)] = samples_around(&l, cg.name(), restart_ns);
    assert_samples_for_cpu("before the first restart", samples, lost, before, FREQ);
    assert_samples_for_cpu(
        "after it, cut at the second",
        samples_after,
        lost_after,
        all - before,
        FREQ,
    );
}
