//! The container image: `deploy/container/build.sh` builds it from this
//! build's profd and profctl, podman runs it as
//! `deploy/kubernetes/profd-daemonset.yaml` runs it (options read from the
//! manifest), and profctl on the host, through the socket on a host
//! directory, profiles a workload of the host: its functions named, its
//! pid, command name and service label right.
//!
//! Needs podman, buildah, mmdebstrap and runc (fails naming the Debian
//! package when one is missing), and a Debian mirror on the network.
//!
//! Three options differ from podman's defaults, for what these machines
//! and podman 4.3 are:
//! - runc, not crun: crun 1.8 refuses a host whose cgroup2 hierarchy holds
//!   a controller beside v1 ones (`crun: cgroups in hybrid mode not
//!   supported, drop all controllers from cgroupv2`; hugetlb is there);
//! - explicit limits: podman asks for a root container's nofile and nproc
//!   at their maximum, which root here may not set (no CAP_SYS_RESOURCE in
//!   its bounding set: `setrlimit RLIMIT_NOFILE: Operation not
//!   permitted`); the container gets the unit's LimitNOFILE, capped at
//!   this process's hard limit;
//! - the seccomp profile: podman 4.3's default allows `perf_event_open`
//!   and `bpf` only with CAP_SYS_ADMIN, where Docker's current one (the
//!   runtimes' RuntimeDefault the DaemonSet asks for) allows them with
//!   CAP_PERFMON and CAP_BPF; the test runs podman's with those two rules
//!   as Docker has them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use profd_e2e::cgroups::Cgroup;
use profd_e2e::{
    bin_dir, build_workload, path_str, require_root_and_perf, run_profctl, serial, unique_dir,
    wait_until, Cmd, CmdOutput, Measure, Profile, Workload,
};
use yaml_rust2::{Yaml, YamlLoader};

use crate::continuous::{list, now_ns};
use crate::deploy::{deploy, require_tool};

/// How long building the image may take: packages downloaded, binaries
/// copied twice (the tree, the layer).
const BUILD_TIMEOUT: Duration = Duration::from_secs(900);
const PODMAN_TIMEOUT: Duration = Duration::from_secs(120);
/// How long profd in the container may take to answer, and a window to
/// be cut.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Podman's default seccomp profile (Debian package golang-github-containers-common).
const PODMAN_SECCOMP: &str = "/usr/share/containers/seccomp.json";
/// The calls Docker's default profile allows with a capability of their
/// own, which podman 4.3's allows only with CAP_SYS_ADMIN.
const OWN_CAPABILITY: &[(&str, &str)] = &[("perf_event_open", "CAP_PERFMON"), ("bpf", "CAP_BPF")];

/// The unit's LimitNOFILE.
const NOFILE: u64 = 65536;

fn podman(args: &[&str]) -> CmdOutput {
    let all: Vec<&str> = ["--runtime", "runc"].iter().chain(args).copied().collect();
    Cmd::spawn("podman", &all).wait(PODMAN_TIMEOUT)
}

fn yaml_str<'a>(y: &'a Yaml, what: &str) -> &'a str {
    y.as_str()
        .unwrap_or_else(|| panic!("{what} should be a string, is {y:?}"))
}

fn yaml_strs<'a>(y: &'a Yaml, what: &str) -> Vec<&'a str> {
    y.as_vec()
        .unwrap_or_else(|| panic!("{what} should be a list, is {y:?}"))
        .iter()
        .map(|v| yaml_str(v, what))
        .collect()
}

/// The manifest's documents.
fn manifest() -> Vec<Yaml> {
    let path = deploy("kubernetes/profd-daemonset.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    YamlLoader::load_from_str(&text).expect("the manifest is YAML")
}

fn kind<'a>(docs: &'a [Yaml], k: &str) -> &'a Yaml {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(k))
        .unwrap_or_else(|| panic!("no {k} in the manifest"))
}

/// Podman's default seccomp profile with `perf_event_open` and `bpf`
/// allowed to holders of CAP_PERFMON and CAP_BPF, written into `dir`.
fn runtime_default_seccomp(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(PODMAN_SECCOMP).unwrap_or_else(|e| {
        panic!("{PODMAN_SECCOMP}: {e} (install the Debian package golang-github-containers-common)")
    });
    let mut profile: serde_json::Value = serde_json::from_str(&text).expect("a seccomp profile");
    let rules = profile["syscalls"]
        .as_array_mut()
        .expect("the profile's syscalls");
    for rule in rules.iter_mut() {
        if rule["action"] != "SCMP_ACT_ALLOW" {
            let names = rule["names"].as_array_mut().expect("a rule's names");
            names.retain(|n| !OWN_CAPABILITY.iter().any(|(call, _)| n == call));
        }
    }
    for (call, cap) in OWN_CAPABILITY {
        rules.push(serde_json::json!({
            "names": [call],
            "action": "SCMP_ACT_ALLOW",
            "includes": { "caps": [cap] },
        }));
    }
    let path = dir.join("seccomp.json");
    std::fs::write(&path, profile.to_string()).unwrap();
    path
}

/// `podman run` options that give a container what the DaemonSet's pod
/// gives profd: its namespaces, identity, capabilities, security options
/// and volumes. Each hostPath volume is the directory `dir/NAME`, the
/// ConfigMap's files are written to `dir/NAME/`.
fn pod_options(docs: &[Yaml], dir: &Path) -> Vec<String> {
    let pod = &kind(docs, "DaemonSet")["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let sc = &container["securityContext"];
    let mut o: Vec<String> = Vec::new();
    assert_eq!(pod["hostPID"].as_bool(), Some(true));
    o.push("--pid=host".into());
    // The pod's network is not the node's: the metrics listener stays in
    // the container's.
    o.push("--network=none".into());
    // Kubernetes on cgroup2 gives each container a cgroup namespace of its
    // own: the node's groups are seen from below the pod's.
    o.push("--cgroupns=private".into());
    o.push(format!(
        "--user={}:{}",
        sc["runAsUser"].as_i64().expect("runAsUser"),
        sc["runAsGroup"].as_i64().expect("runAsGroup")
    ));
    assert_eq!(sc["privileged"].as_bool(), Some(false));
    for cap in yaml_strs(&sc["capabilities"]["drop"], "capabilities.drop") {
        o.push(format!("--cap-drop={}", cap.to_lowercase()));
    }
    for cap in yaml_strs(&sc["capabilities"]["add"], "capabilities.add") {
        o.push(format!("--cap-add={cap}"));
    }
    if sc["allowPrivilegeEscalation"].as_bool() == Some(false) {
        o.push("--security-opt=no-new-privileges".into());
    }
    if sc["readOnlyRootFilesystem"].as_bool() == Some(true) {
        o.push("--read-only".into());
    }
    assert_eq!(
        sc["seccompProfile"]["type"].as_str(),
        Some("RuntimeDefault")
    );
    o.push(format!(
        "--security-opt=seccomp={}",
        runtime_default_seccomp(dir).display()
    ));
    assert_eq!(sc["appArmorProfile"]["type"].as_str(), Some("Unconfined"));
    o.push("--security-opt=apparmor=unconfined".into());

    let volumes = pod["volumes"].as_vec().expect("volumes");
    for mount in container["volumeMounts"].as_vec().expect("volumeMounts") {
        let name = yaml_str(&mount["name"], "a mount's name");
        let path = yaml_str(&mount["mountPath"], "mountPath");
        let ro = if mount["readOnly"].as_bool() == Some(true) {
            ":ro"
        } else {
            ""
        };
        let volume = volumes
            .iter()
            .find(|v| v["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no volume {name}"));
        let host = dir.join(name);
        if !volume["hostPath"].is_badvalue() {
            std::fs::create_dir_all(&host).unwrap();
            o.push(format!("--volume={}:{path}{ro}", host.display()));
        } else if !volume["configMap"].is_badvalue() {
            let map_name = yaml_str(&volume["configMap"]["name"], "configMap.name");
            let map = docs
                .iter()
                .find(|d| {
                    d["kind"].as_str() == Some("ConfigMap")
                        && d["metadata"]["name"].as_str() == Some(map_name)
                })
                .unwrap_or_else(|| panic!("no ConfigMap {map_name}"));
            std::fs::create_dir_all(&host).unwrap();
            for (key, value) in map["data"].as_hash().expect("the ConfigMap's data") {
                let key = yaml_str(key, "a ConfigMap key");
                std::fs::write(host.join(key), yaml_str(value, key)).unwrap();
            }
            o.push(format!("--volume={}:{path}{ro}", host.display()));
        } else if !volume["emptyDir"].is_badvalue() {
            assert_eq!(volume["emptyDir"]["medium"].as_str(), Some("Memory"));
            let size = yaml_str(&volume["emptyDir"]["sizeLimit"], "sizeLimit");
            let mib = size
                .strip_suffix("Mi")
                .unwrap_or_else(|| panic!("sizeLimit {size}: the test reads Mi"));
            o.push(format!("--tmpfs={path}:size={mib}m"));
        } else {
            panic!("volume {name}: {volume:?} is of a kind the test does not map");
        }
    }
    o
}

/// This process's hard limit of open files.
fn hard_nofile() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no open files limit in {limits}"))
}

/// The image and the container of one run, removed when dropped (the
/// container's log printed first when the test failed).
struct Run {
    tag: String,
    name: String,
}

impl Run {
    fn logs(&self) -> String {
        let out = podman(&["logs", &self.name]);
        format!("{}{}", out.stdout, out.stderr)
    }

    fn running(&self) -> bool {
        podman(&["inspect", "--format", "{{.State.Running}}", &self.name])
            .stdout
            .trim()
            == "true"
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- podman logs {} ---\n{}", self.name, self.logs());
        }
        podman(&["rm", "--force", "--ignore", "--time", "10", &self.name]);
        podman(&["rmi", "--force", "--ignore", &self.tag]);
    }
}

/// Builds the image `tag` from this build's binaries; returns its id.
fn build(tag: &str) -> String {
    let out = Cmd::spawn(
        "bash",
        &[
            path_str(&deploy("container/build.sh")),
            "--binaries",
            path_str(&bin_dir()),
            "--tag",
            tag,
        ],
    )
    .wait(BUILD_TIMEOUT);
    out.assert_success();
    eprintln!("{}", out.stdout);
    out.stdout
        .lines()
        .last()
        .and_then(|l| l.strip_prefix(&format!("{tag}: image ")))
        .unwrap_or_else(|| panic!("no `{tag}: image ID` line:\n{}", out.describe()))
        .to_string()
}

/// The image holds profd, profctl, their man pages and the CA bundle, and
/// no other program (no shell); its entrypoint and arguments are the
/// DaemonSet's command.
fn check_image(tag: &str, command: &[&str]) {
    let inspect = podman(&[
        "image",
        "inspect",
        "--format",
        "{{json .Config.Entrypoint}}\n{{json .Config.Cmd}}",
        tag,
    ]);
    inspect.assert_success();
    let argv: Vec<String> = inspect
        .stdout
        .lines()
        .flat_map(|l| serde_json::from_str::<Vec<String>>(l).expect("a JSON list"))
        .collect();
    assert_eq!(argv, command, "the image's entrypoint and arguments");

    let mount = podman(&["image", "mount", tag]);
    mount.assert_success();
    let root = PathBuf::from(mount.stdout.trim());
    let programs: BTreeSet<String> = std::fs::read_dir(root.join("usr/bin"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let absent: Vec<&str> = ["bin", "sbin", "usr/sbin", "usr/bin/apt", "usr/bin/dpkg"]
        .into_iter()
        .filter(|p| root.join(p).exists())
        .collect();
    let pages = [
        "usr/share/man/man8/profd.8",
        "usr/share/man/man1/profctl.1",
        "usr/share/man/man1/profctl-attach.1",
    ];
    let missing: Vec<&str> = pages
        .into_iter()
        .filter(|p| !root.join(p).is_file())
        .collect();
    let bundle =
        std::fs::read_to_string(root.join("etc/ssl/certs/ca-certificates.crt")).unwrap_or_default();
    podman(&["image", "unmount", tag]);
    assert_eq!(
        programs,
        BTreeSet::from(["profctl".into(), "profd".into()]),
        "the image's programs"
    );
    assert!(absent.is_empty(), "the image holds {absent:?}");
    assert!(missing.is_empty(), "the image lacks {missing:?}");
    assert!(
        bundle.matches("BEGIN CERTIFICATE").count() > 50,
        "the image's CA bundle holds {} certificates",
        bundle.matches("BEGIN CERTIFICATE").count()
    );
}

/// build.sh builds the image from this build's binaries, the same image
/// twice; podman runs it with the DaemonSet's pod options, continuous
/// profiling on; profctl on the host attaches, through the socket, to
/// `split` running in a cgroup of its own on the host: the profile is of
/// that pid and command, with split's own exclusive split (leaf_a 25 %,
/// leaf_b 75 %). The windows label split's samples with its group's unit,
/// every one of them of its pid and command, and no service is named
/// after a `..` of the cgroup namespace.
#[test]
fn the_image_profiles_a_host_process_as_the_daemonset_runs_it() {
    let _serial = serial();
    require_root_and_perf();
    for (program, package) in [
        ("podman", "podman"),
        ("buildah", "buildah"),
        ("mmdebstrap", "mmdebstrap"),
        ("runc", "runc"),
    ] {
        require_tool(program, package);
    }
    let docs = manifest();
    let container = &kind(&docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0];
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        container["image"].as_str(),
        Some(format!("profd:{version}").as_str()),
        "the DaemonSet runs the image build.sh tags by default"
    );
    let command = yaml_strs(&container["command"], "command");

    let run = Run {
        tag: format!("localhost/profd-e2e-{}:{version}", std::process::id()),
        name: format!("profd-e2e-{}", std::process::id()),
    };
    let first = build(&run.tag);
    check_image(&run.tag, &command);
    // Reproducible: built again, the same image.
    assert_eq!(build(&run.tag), first, "the image id of a second build");

    let dir = unique_dir("image");
    let mut args: Vec<String> = ["run", "--detach", "--name", run.name.as_str()]
        .map(String::from)
        .to_vec();
    args.extend(pod_options(&docs, &dir));
    let nofile = NOFILE.min(hard_nofile());
    args.push(format!("--ulimit=nofile={nofile}:{nofile}"));
    args.push("--ulimit=nproc=4096:4096".into());
    args.push(run.tag.clone());
    // The image's own arguments, and continuous profiling in windows of 1 s.
    args.extend(command[1..].iter().map(|a| a.to_string()));
    args.extend(
        [
            "--continuous",
            "--continuous-window",
            "1",
            "--continuous-freq",
            "99",
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    podman(&args).assert_success();

    let socket = dir.join("run/profd.sock");
    let socket = path_str(&socket);
    let profctl = |args: &[&str]| {
        let all: Vec<&str> = ["--socket", socket].iter().chain(args).copied().collect();
        run_profctl(&all, &[])
    };
    wait_until("profd in the container answering", START_TIMEOUT, || {
        assert!(run.running(), "the container stopped:\n{}", run.logs());
        profctl(&["health"]).status.success().then_some(())
    });

    let cg = Cgroup::new(&format!("profd-image-{}.service", std::process::id()));
    let mut cmd = cg.command(build_workload("split"));
    cmd.args(["4", "--ready"]);
    let mut w = Workload::start_command(cmd, "split");
    let pid = w.pid().to_string();
    let out = profctl(&["attach", &pid, "--duration", "3", "--format", "json"]);
    out.assert_success();
    let p = Profile::parse(&out);
    eprintln!("{}", p.table());
    assert_eq!((p.pid, p.comm.as_str()), (w.pid(), "split"));
    assert_eq!(p.state, "duration_elapsed");
    p.assert_pct("leaf_a", Measure::Exclusive, 25.0);
    p.assert_pct("leaf_b", Measure::Exclusive, 75.0);
    w.wait(Duration::from_secs(30));

    let ended = now_ns();
    let l = wait_until("a window cut after the workload", START_TIMEOUT, || {
        let l = list(Path::new(socket));
        (l.cut_until_unix_ns >= ended).then_some(l)
    });
    let services: Vec<&str> = l.services.iter().map(|s| s.service.as_str()).collect();
    assert!(
        services.contains(&cg.name()),
        "no service {}: {services:?}",
        cg.name()
    );
    let dotted: Vec<&&str> = services.iter().filter(|s| s.contains("..")).collect();
    assert!(dotted.is_empty(), "services named by `..`: {dotted:?}");
    let by = profctl(&[
        "query",
        "--service",
        cg.name(),
        "--by",
        "process",
        "--format",
        "json",
    ]);
    by.assert_success();
    let q = Profile::parse(&by);
    eprintln!("{}", q.table());
    let own = q.function(&format!("[process {pid} split]"));
    assert_eq!(
        own.inclusive,
        q.totals.attributed,
        "every sample of the service is split's:\n{}",
        q.table()
    );
    for name in ["leaf_a", "leaf_b", "mid", "work"] {
        q.function(name);
    }
}
