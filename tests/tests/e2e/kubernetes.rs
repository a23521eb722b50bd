//! Kubernetes labels end to end: a workload in a cgroup of the kubelet's
//! kubepods form (cgroupfs driver: `kubepods/burstable/pod<UID>/<container
//! id>`, made under the cgroup2 mount), the kubelet's log directories laid
//! out in a directory given to the daemon (`--continuous-kubelet-logs`):
//! the windows' processes carry the pod's namespace, name and UID and the
//! container's name, and `profctl query --namespace/--pod` select exactly
//! that workload's samples. Real kernel, real `profd` and `profctl`; root
//! needed.

use std::io::Read;
use std::path::Path;

use profd_common::api;
use profd_e2e::cgroups::Cgroup;
use profd_e2e::{
    assert_one_line_error, build_workload, path_str, require_root_and_perf, serial, unique_dir,
    Daemon,
};
use prost::Message;

use crate::continuous::{
    continuous, group, now_ns, start_in, wait_for_cuts, wait_for_window_after,
};

pub(crate) const NAMESPACE: &str = "shop";
pub(crate) const POD: &str = "web-7f9c4d";
pub(crate) const CONTAINER: &str = "app";

/// The windows the daemon has written to its state directory, decoded.
fn windows(d: &Daemon) -> Vec<api::Window> {
    let dir = d.state_dir().expect("a state dir").join("windows");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("read the windows directory") {
        let path = entry.expect("a directory entry").path();
        if !path.to_string_lossy().ends_with(".window.gz") {
            continue;
        }
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&path).expect("open a window"))
            .read_to_end(&mut raw)
            .unwrap_or_else(|e| panic!("gunzip {}: {e}", path.display()));
        out.push(
            api::Window::decode(raw.as_slice())
                .unwrap_or_else(|e| panic!("decode {}: {e}", path.display())),
        );
    }
    out
}

/// Waits for a window whose process `pid` is as `ready` wants; returns it.
fn wait_for_process(
    d: &Daemon,
    pid: u32,
    what: &str,
    ready: impl Fn(&api::WindowProcess) -> bool,
) -> api::WindowProcess {
    wait_for_cuts(d, what, |_| {
        windows(d)
            .into_iter()
            .flat_map(|w| w.services)
            .flat_map(|s| s.processes)
            .find(|p| p.pid == pid && ready(p))
    })
}

/// The kubelet's log directory of a pod with one container, as it makes it
/// under `root` when it starts the pod's sandbox, before its containers.
pub(crate) fn lay_out_pod_logs(root: &Path, uid: &str) -> std::path::PathBuf {
    let dir = root
        .join("pods")
        .join(format!("{NAMESPACE}_{POD}_{uid}"))
        .join(CONTAINER);
    std::fs::create_dir_all(&dir).expect("make the pod's log directory");
    std::fs::write(dir.join("0.log"), "").expect("write the container's log");
    dir.join("0.log")
}

/// The link the kubelet makes to a container's log once it started it,
/// named by pod, namespace, container and container id.
pub(crate) fn link_container_log(root: &Path, log: &Path, id: &str) {
    let links = root.join("containers");
    std::fs::create_dir_all(&links).expect("make the containers' log directory");
    std::os::unix::fs::symlink(
        log,
        links.join(format!("{POD}_{NAMESPACE}_{CONTAINER}-{id}.log")),
    )
    .expect("link the container's log");
}

/// `profctl query ARGS --format json`'s samples of each process, and its
/// function table, as a sorted text.
fn selected(d: &Daemon, args: &[&str]) -> (Vec<(u32, u64)>, u64, String) {
    let mut all = vec!["query"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--format", "json"]);
    let p = profd_e2e::Profile::parse(&d.profctl(&all));
    let mut processes: Vec<(u32, u64)> = p.processes.iter().map(|r| (r.pid, r.samples)).collect();
    processes.sort();
    let mut functions: Vec<String> = p
        .functions
        .iter()
        .map(|f| format!("{} {} {}", f.name, f.inclusive, f.exclusive))
        .collect();
    functions.sort();
    (processes, p.totals.attributed, functions.join("\n"))
}

/// A workload in a pod's container cgroup is labelled with the pod: its
/// namespace, name and UID from the pod's log directory, then its
/// container's name too once the kubelet's link to the container's log is
/// there (looked up again at a later window). A workload outside kubepods has no pod. `--namespace`,
/// `--pod` (by name and as NAMESPACE/NAME) select exactly the pod's
/// workload: its processes, samples and functions are those `--pid` gives
/// for it. `--by pod` splits by pod, and a namespace not there is refused
/// naming the ones there are.
#[test]
fn a_process_in_a_pod_is_labelled_with_it_and_selected_by_it() {
    let _serial = serial();
    require_root_and_perf();
    let uid = format!("{:08x}-1d2f-4e5a-9b8c-7d6e5f4a3b2c", std::process::id());
    let id = format!("{:032x}{:032x}", std::process::id(), now_ns());
    let in_pod = Cgroup::nested(&format!("kubepods/burstable/pod{uid}/{id}"));
    let outside = group("k8s-outside");
    let logs = unique_dir("k8s-logs");
    let log = lay_out_pod_logs(&logs, &uid);
    let d = continuous("1", &["--continuous-kubelet-logs", path_str(&logs)]);
    let split = build_workload("split");
    let a = start_in(&in_pod, &split, "600");
    let b = start_in(&outside, &split, "600");

    let unnamed = wait_for_process(&d, a.pid(), "the pod's process sampled", |p| p.samples > 0);
    assert_eq!(unnamed.cgroup, in_pod.path());
    assert_eq!(unnamed.container_id, id);
    let pod = api::KubernetesPod {
        namespace: NAMESPACE.into(),
        name: POD.into(),
        uid: uid.clone(),
        container: String::new(),
    };
    assert_eq!(unnamed.pod, Some(pod.clone()), "no container link yet");
    link_container_log(&logs, &log, &id);
    let named = wait_for_process(&d, a.pid(), "the container named from its link", |p| {
        p.pod.as_ref().is_some_and(|pod| !pod.container.is_empty())
    });
    assert_eq!(
        named.pod,
        Some(api::KubernetesPod {
            container: CONTAINER.into(),
            ..pod
        })
    );
    let other = wait_for_process(&d, b.pid(), "the other process sampled", |p| p.samples > 0);
    assert_eq!(other.pod, None, "not in a pod");
    let (a_pid, b_pid) = (a.pid(), b.pid());
    drop((a, b));
    wait_for_window_after(&d, now_ns());

    // The workload's start (a shell forked from this test, moved into the
    // group before it execs the workload) is labelled as this test's
    // process: the query compared is over the windows after the last one
    // holding it.
    // Once in the pod, the workload is in it in every window, to its
    // last samples, taken as it was killed.
    let mut held: Vec<(u64, Option<api::KubernetesPod>)> = windows(&d)
        .into_iter()
        .flat_map(|w| {
            let start = w.start_unix_ns;
            w.services
                .into_iter()
                .flat_map(|s| s.processes)
                .filter(|p| p.pid == a_pid)
                .map(move |p| (start, p.pod))
        })
        .collect();
    held.sort_by_key(|(start, _)| *start);
    let first = held.iter().position(|(_, pod)| pod.is_some());
    assert!(
        first.is_some_and(|i| held[i..].iter().all(|(_, pod)| pod.is_some())),
        "{held:?}"
    );
    let forked = windows(&d)
        .iter()
        .filter(|w| {
            w.services
                .iter()
                .flat_map(|s| &s.processes)
                .any(|p| p.pid == a_pid && p.pod.is_none())
        })
        .map(|w| w.end_unix_ns)
        .max();
    let from = forked.map(|end| {
        let after = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(end + 1_000_000);
        humantime::format_rfc3339_millis(after).to_string()
    });
    let from: Vec<&str> = from.iter().flat_map(|f| ["--from", f.as_str()]).collect();
    let pid = a_pid.to_string();
    let own = selected(&d, &[&["--pid", &pid][..], &from].concat());
    assert_eq!(own.0.len(), 1, "{:?}", own.0);
    assert!(own.1 > 0);
    let whole_pod = format!("{NAMESPACE}/{POD}");
    for args in [
        &["--namespace", NAMESPACE][..],
        &["--pod", POD],
        &["--pod", &whole_pod],
        &["--namespace", NAMESPACE, "--pod", POD],
    ] {
        assert_eq!(selected(&d, &[args, &from].concat()), own, "{args:?}");
        // Over the whole history: that process alone.
        let all = selected(&d, args);
        assert_eq!(all.0.len(), 1, "{args:?}: {:?}", all.0);
        assert_eq!(all.0[0].0, a_pid);
    }
    // Nothing of the pod's in the other's samples, and the other is in
    // the history.
    let b_own = selected(&d, &["--pid", &b_pid.to_string()]);
    assert!(b_own.1 > 0);

    let split_by = d.profctl(&["query", "--by", "pod", "--top", "0"]);
    split_by.assert_success();
    let text = &split_by.stdout;
    let whole = selected(&d, &["--pod", POD]);
    let head = format!("[pod {NAMESPACE}/{POD}]: {} ", whole.1);
    assert!(
        text.lines().any(|l| l.starts_with(&head)),
        "no part {head:?}:\n{text}"
    );
    assert!(text.contains("[pod none]: "), "{text}");

    let refused = d.profctl(&["query", "--namespace", "nope"]);
    assert_one_line_error(
        &refused,
        &[
            "no namespace \"nope\" in the history",
            &format!("the namespaces there are \"{NAMESPACE}\""),
        ],
    );
    drop(in_pod);
    assert!(
        !profd_e2e::cgroups::cgroup2_mount()
            .join(format!("kubepods/burstable/pod{uid}"))
            .exists(),
        "the pod's group is removed"
    );
}
