//! Deployment: the systemd units (verified by systemd-analyze, hardening and
//! capability set asserted), sysusers.d and tmpfiles.d entries applied to a
//! scratch root, `deploy/install.sh` into a scratch DESTDIR (files, modes,
//! man pages that render, completions that load), the Kubernetes manifest,
//! and profctl's help, man and completions. `unit_run` runs profd the way
//! the unit does, against the real kernel.
//!
//! Needs systemd (systemd-analyze, systemd-sysusers, systemd-tmpfiles,
//! systemd-socket-activate), man-db and groff-base, strace, util-linux and
//! bash; fails with the package to install when one is missing.

mod unit_run;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use profd_e2e::{bin, bin_dir, path_str, unique_dir, Cmd, CmdOutput};
use yaml_rust2::{Yaml, YamlLoader};

/// The capabilities profd.service grants, as the unit spells them.
pub const UNIT_CAPS: &[&str] = &[
    "CAP_PERFMON",
    "CAP_SYS_PTRACE",
    "CAP_SYSLOG",
    "CAP_DAC_READ_SEARCH",
    "CAP_CHECKPOINT_RESTORE",
    "CAP_BPF",
    "CAP_SETUID",
    "CAP_SETGID",
];

/// The highest `systemd-analyze security` exposure accepted for profd.service
/// (0 = locked down, 10 = unprotected; a daemon that must read every process
/// cannot drop CAP_SYS_PTRACE or see less of /proc).
const MAX_EXPOSURE: f64 = 3.5;

const TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// The repository's top directory.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

pub fn deploy(file: &str) -> PathBuf {
    repo().join("deploy").join(file)
}

/// Fails the test naming the Debian package when `program` is not installed.
pub fn require_tool(program: &str, package: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .expect("run sh")
        .status
        .success();
    assert!(
        found,
        "{program} is missing: install the Debian package {package} (apt-get install {package})"
    );
}

/// Runs a tool to completion; fails the test naming the Debian package when
/// it is not installed.
pub fn tool(program: &str, package: &str, args: &[&str], env: &[(String, String)]) -> CmdOutput {
    require_tool(program, package);
    Cmd::spawn_env(program, args, env).wait(TOOL_TIMEOUT)
}

/// A systemd unit file: (section, key, value) in file order.
pub struct Unit {
    entries: Vec<(String, String, String)>,
}

impl Unit {
    pub fn parse(text: &str) -> Unit {
        let mut section = String::new();
        let mut entries = Vec::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.to_string();
                continue;
            }
            let (key, value) = line
                .split_once('=')
                .unwrap_or_else(|| panic!("unit line without `=`: {line}"));
            entries.push((section.clone(), key.trim().into(), value.trim().into()));
        }
        Unit { entries }
    }

    pub fn load(path: &Path) -> Unit {
        Unit::parse(
            &std::fs::read_to_string(path)
                .unwrap_or_else(|e| panic!("read {}: {e}", path.display())),
        )
    }

    /// Every value of `key` in `section`, in order.
    pub fn all(&self, section: &str, key: &str) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|(s, k, _)| s == section && k == key)
            .map(|(_, _, v)| v.as_str())
            .collect()
    }

    /// The one value of `key` in `section`.
    pub fn one(&self, section: &str, key: &str) -> &str {
        match self.all(section, key).as_slice() {
            [value] => value,
            values => panic!("[{section}] {key}= should be set once, is {values:?}"),
        }
    }

    /// The words of every value of `key`, as a set.
    pub fn words(&self, section: &str, key: &str) -> BTreeSet<String> {
        self.all(section, key)
            .iter()
            .flat_map(|v| v.split_whitespace())
            .map(str::to_string)
            .collect()
    }
}

/// `deploy/install.sh` run once per test process into a scratch DESTDIR
/// with the built binaries (PREFIX=/usr/local); returns the DESTDIR.
fn installed() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let root = unique_dir("install").join("root");
        install(&root, &[]);
        root
    })
}

/// Runs install.sh into `destdir` with `env` added.
fn install(destdir: &Path, env: &[(&str, &str)]) -> CmdOutput {
    bin("profd");
    bin("profctl");
    let mut vars = vec![
        ("BINARIES".to_string(), path_str(&bin_dir()).to_string()),
        ("DESTDIR".to_string(), path_str(destdir).to_string()),
    ];
    vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let script = deploy("install.sh");
    let out = tool("bash", "bash", &[path_str(&script)], &vars);
    out.assert_success();
    out
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{} should exist: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// profd.service and profd.socket as installed, with ExecStart pointing at
/// the installed binary, verified by systemd-analyze with the installed man
/// pages (Documentation=): no message at all.
#[test]
fn units_verify_without_warnings() {
    let root = installed();
    let units = root.join("usr/local/lib/systemd/system");
    let dir = unique_dir("verify");
    let profd = root.join("usr/local/bin/profd");
    let service = std::fs::read_to_string(units.join("profd.service")).unwrap();
    let service = service.replace(
        "ExecStart=/usr/local/bin/profd",
        &format!("ExecStart={}", profd.display()),
    );
    assert!(service.contains(&format!("ExecStart={}", profd.display())));
    std::fs::write(dir.join("profd.service"), service).unwrap();
    std::fs::copy(units.join("profd.socket"), dir.join("profd.socket")).unwrap();
    let manpath = root.join("usr/local/share/man");
    let env = [("MANPATH".to_string(), path_str(&manpath).to_string())];
    let service = dir.join("profd.service");
    let socket = dir.join("profd.socket");
    let out = tool(
        "systemd-analyze",
        "systemd",
        &["verify", path_str(&service), path_str(&socket)],
        &env,
    );
    out.assert_success();
    assert_eq!(
        (out.stdout.trim(), out.stderr.trim()),
        ("", ""),
        "systemd-analyze verify should say nothing:\n{}",
        out.describe()
    );
}

/// Every hardening setting the service promises, and exactly the
/// capabilities it needs.
#[test]
fn service_is_hardened_with_exactly_its_capabilities() {
    let unit = Unit::load(&deploy("profd.service"));
    let s = "Service";
    for (key, value) in [
        ("Type", "notify"),
        ("NotifyAccess", "main"),
        ("ExecStart", "/usr/bin/profd"),
        ("Restart", "on-failure"),
        ("User", "root"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "read-only"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectControlGroups", "yes"),
        ("RestrictNamespaces", "yes"),
        ("LockPersonality", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("RestrictRealtime", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("SystemCallArchitectures", "native"),
        ("SystemCallErrorNumber", "EPERM"),
        ("RuntimeDirectory", "profd"),
        ("RuntimeDirectoryPreserve", "yes"),
        ("StateDirectory", "profd"),
        ("StateDirectoryMode", "0700"),
        ("ConfigurationDirectory", "profd"),
        ("LimitNOFILE", "65536"),
        ("LimitMEMLOCK", "infinity"),
    ] {
        assert_eq!(unit.one(s, key), value, "[Service] {key}=");
    }
    let caps: BTreeSet<String> = UNIT_CAPS.iter().map(|c| c.to_string()).collect();
    assert_eq!(unit.words(s, "CapabilityBoundingSet"), caps);
    assert_eq!(unit.words(s, "AmbientCapabilities"), caps);
    // What would undo the capabilities or hide other processes.
    for key in [
        "ProtectKernelLogs",
        "ProtectProc",
        "ProcSubset",
        "PrivateUsers",
        "DynamicUser",
    ] {
        assert!(
            unit.all(s, key).is_empty(),
            "[Service] {key}= must not be set"
        );
    }
    assert_eq!(
        unit.all(s, "SystemCallFilter"),
        [
            "@system-service perf_event_open",
            "~@privileged @resources",
            "bpf setresuid"
        ]
    );
    assert_eq!(unit.one("Unit", "Requires"), "profd.socket");
    assert!(unit.words("Unit", "After").contains("profd.socket"));
    assert_eq!(unit.one("Install", "Also"), "profd.socket");
}

/// `systemd-analyze security` (offline) rates the service at most
/// [`MAX_EXPOSURE`].
#[test]
fn service_exposure_is_low() {
    let out = tool(
        "systemd-analyze",
        "systemd",
        &[
            "security",
            "--offline=yes",
            "--no-pager",
            path_str(&deploy("profd.service")),
        ],
        &[],
    );
    let line = out
        .stdout
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("no exposure level:\n{}", out.describe()));
    let score: f64 = line
        .split(':')
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number in {line:?}"));
    eprintln!("{line}");
    assert!(score <= MAX_EXPOSURE, "{line}\n{}", out.stdout);
}

/// The socket unit serves the path profd and its settings use, to the
/// group sysusers.d creates, mode 0660.
#[test]
fn socket_unit_matches_the_daemon() {
    let socket = Unit::load(&deploy("profd.socket"));
    let check = profd_e2e::run_profd(&[
        "--check-config",
        "--config",
        path_str(&deploy("profd.toml")),
    ]);
    check.assert_success();
    let configured = format!("socket = \"{}\"", socket.one("Socket", "ListenStream"));
    assert!(
        check.stdout.lines().any(|l| l.trim() == configured),
        "profd's settings should have {configured}:\n{}",
        check.stdout
    );
    assert_eq!(
        socket.one("Socket", "ListenStream"),
        "/run/profd/profd.sock"
    );
    assert_eq!(socket.one("Socket", "SocketMode"), "0660");
    assert_eq!(socket.one("Socket", "SocketGroup"), "profd");
    assert_eq!(socket.one("Socket", "RemoveOnStop"), "yes");
    assert_eq!(socket.one("Install", "WantedBy"), "sockets.target");
    let sysusers = std::fs::read_to_string(deploy("profd.sysusers")).unwrap();
    assert!(
        sysusers
            .lines()
            .any(|l| l.split_whitespace().eq(["g", "profd", "-"])),
        "{sysusers}"
    );
}

/// sysusers.d creates the group, tmpfiles.d the directories with their
/// modes, in a scratch root.
#[test]
fn sysusers_and_tmpfiles_apply_to_a_root() {
    let root = unique_dir("sysroot");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    let root_arg = format!("--root={}", root.display());
    let sysusers = deploy("profd.sysusers");
    let out = tool(
        "systemd-sysusers",
        "systemd",
        &[&root_arg, path_str(&sysusers)],
        &[],
    );
    out.assert_success();
    let group = std::fs::read_to_string(root.join("etc/group")).unwrap();
    assert!(
        group.lines().any(|l| l.starts_with("profd:")),
        "no group profd in {group}"
    );
    let tmpfiles = deploy("profd.tmpfiles");
    let out = tool(
        "systemd-tmpfiles",
        "systemd",
        &["--create", &root_arg, path_str(&tmpfiles)],
        &[],
    );
    out.assert_success();
    for (dir, want) in [
        ("run/profd", 0o755),
        ("var/lib/profd", 0o700),
        ("etc/profd", 0o755),
    ] {
        assert_eq!(mode(&root.join(dir)), want, "/{dir}");
    }
    // The unit asks systemd for the same directories with the same modes.
    let unit = Unit::load(&deploy("profd.service"));
    assert_eq!(unit.one("Service", "RuntimeDirectoryMode"), "0755");
    assert_eq!(unit.one("Service", "StateDirectoryMode"), "0700");
    assert_eq!(unit.one("Service", "ConfigurationDirectoryMode"), "0755");
}

/// The installed tree: binaries, units with the prefix's ExecStart, the
/// settings (kept on reinstall), man pages that render without warnings,
/// and bash completions that load.
#[test]
fn install_sh_installs_a_complete_tree() {
    let root = installed();
    let p = |rel: &str| root.join(rel);
    for (file, want) in [
        ("usr/local/bin/profd", 0o755),
        ("usr/local/bin/profctl", 0o755),
        ("usr/local/lib/systemd/system/profd.service", 0o644),
        ("usr/local/lib/systemd/system/profd.socket", 0o644),
        ("usr/local/lib/sysusers.d/profd.conf", 0o644),
        ("usr/local/lib/tmpfiles.d/profd.conf", 0o644),
        ("etc/profd/profd.toml", 0o644),
        ("usr/local/share/doc/profd/profd.toml.example", 0o644),
        ("usr/local/share/doc/profd/README.md", 0o644),
        ("usr/local/share/doc/profd/CONTRIBUTING.md", 0o644),
        ("usr/local/share/doc/profd/docs/guide.md", 0o644),
        ("usr/local/share/doc/profd/docs/operations.md", 0o644),
        ("usr/local/share/doc/profd/docs/architecture.md", 0o644),
        ("usr/local/share/man/man8/profd.8", 0o644),
        ("usr/local/share/man/man1/profctl.1", 0o644),
        ("usr/local/share/man/man1/profctl-attach.1", 0o644),
        ("usr/local/share/man/man1/profctl-health.1", 0o644),
        ("usr/local/share/bash-completion/completions/profctl", 0o644),
        ("usr/local/share/bash-completion/completions/profd", 0o644),
        ("usr/local/share/zsh/site-functions/_profctl", 0o644),
        (
            "usr/local/share/fish/vendor_completions.d/profctl.fish",
            0o644,
        ),
    ] {
        assert_eq!(mode(&p(file)), want, "{file}");
    }
    let unit = Unit::load(&p("usr/local/lib/systemd/system/profd.service"));
    assert_eq!(unit.one("Service", "ExecStart"), "/usr/local/bin/profd");
    assert_eq!(
        std::fs::read(p("etc/profd/profd.toml")).unwrap(),
        std::fs::read(deploy("profd.toml")).unwrap()
    );

    // Man pages: render cleanly (groff warnings on) and name their command.
    for (page, name) in [
        ("usr/local/share/man/man8/profd.8", "profd"),
        ("usr/local/share/man/man1/profctl.1", "profctl"),
        (
            "usr/local/share/man/man1/profctl-attach.1",
            "profctl-attach",
        ),
    ] {
        let page = p(page);
        let env = [("MANWIDTH".to_string(), "100".to_string())];
        let out = tool("man", "man-db", &["-l", path_str(&page)], &env);
        out.assert_success();
        assert!(out.stdout.contains("NAME"), "{}", out.stdout);
        assert!(out.stdout.contains(name), "{}", out.stdout);
        let out = tool(
            "groff",
            "groff-base",
            &["-man", "-Tutf8", "-ww", "-z", path_str(&page)],
            &[],
        );
        out.assert_success();
        assert_eq!(out.stderr.trim(), "", "groff warns on {}", page.display());
    }
    let profctl_page = tool(
        "man",
        "man-db",
        &["-l", path_str(&p("usr/local/share/man/man1/profctl.1"))],
        &[],
    );
    assert!(profctl_page.stdout.contains("Examples:"));
    assert!(profctl_page.stdout.contains("profctl-attach(1)"));

    // Completions load in bash and complete the commands.
    for name in ["profctl", "profd"] {
        let file = p(&format!(
            "usr/local/share/bash-completion/completions/{name}"
        ));
        let script = format!("source {}; complete -p {name}", file.display());
        let out = tool("bash", "bash", &["-c", &script], &[]);
        out.assert_success();
        assert!(
            out.stdout.starts_with("complete ") && out.stdout.trim_end().ends_with(name),
            "{}",
            out.describe()
        );
    }

    // A second install keeps edited settings.
    std::fs::write(p("etc/profd/profd.toml"), "log_level = \"debug\"\n").unwrap();
    let again = install(root, &[]);
    assert!(
        again.stdout.contains("profd.toml exists: kept"),
        "{}",
        again.stdout
    );
    assert_eq!(
        std::fs::read_to_string(p("etc/profd/profd.toml")).unwrap(),
        "log_level = \"debug\"\n"
    );
    std::fs::write(
        p("etc/profd/profd.toml"),
        std::fs::read(deploy("profd.toml")).unwrap(),
    )
    .unwrap();

    // PREFIX=/usr: the unit as shipped.
    let usr = unique_dir("install-usr").join("root");
    install(&usr, &[("PREFIX", "/usr")]);
    assert_eq!(
        std::fs::read_to_string(usr.join("usr/lib/systemd/system/profd.service")).unwrap(),
        std::fs::read_to_string(deploy("profd.service")).unwrap()
    );
    assert_eq!(mode(&usr.join("usr/bin/profd")), 0o755);
}

/// install.sh refuses a relative PREFIX and missing binaries, saying why.
#[test]
fn install_sh_refuses_bad_settings() {
    let destdir = unique_dir("install-bad");
    let script = deploy("install.sh");
    let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let bins = path_str(&bin_dir()).to_string();
    let out = tool(
        "bash",
        "bash",
        &[path_str(&script)],
        &env(&[
            ("BINARIES", &bins),
            ("DESTDIR", path_str(&destdir)),
            ("PREFIX", "usr"),
        ]),
    );
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("PREFIX must be an absolute path"),
        "{}",
        out.describe()
    );
    let empty = unique_dir("no-binaries");
    let out = tool(
        "bash",
        "bash",
        &[path_str(&script)],
        &env(&[
            ("BINARIES", path_str(&empty)),
            ("DESTDIR", path_str(&destdir)),
        ]),
    );
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("is not an executable"),
        "{}",
        out.describe()
    );
    assert!(!destdir.join("usr").exists(), "nothing is installed");
}

fn yaml_str<'a>(y: &'a Yaml, what: &str) -> &'a str {
    y.as_str()
        .unwrap_or_else(|| panic!("{what} should be a string, is {y:?}"))
}

/// The DaemonSet: host pids, uid 0 with the unit's capabilities (plus
/// IPC_LOCK), the socket and state on the node, settings from the ConfigMap
/// that profd accepts, probes through the gRPC health service.
#[test]
fn kubernetes_manifest_runs_profd_like_the_unit() {
    let path = deploy("kubernetes/profd-daemonset.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let docs = YamlLoader::load_from_str(&text).expect("the manifest is YAML");
    let kind = |k: &str| {
        docs.iter()
            .find(|d| d["kind"].as_str() == Some(k))
            .unwrap_or_else(|| panic!("no {k} in the manifest"))
    };
    let ds = kind("DaemonSet");
    assert_eq!(ds["apiVersion"].as_str(), Some("apps/v1"));
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"].as_bool(), Some(true));
    let container = &pod["containers"][0];
    let sc = &container["securityContext"];
    assert_eq!(sc["runAsUser"].as_i64(), Some(0));
    assert_eq!(sc["privileged"].as_bool(), Some(false));
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    let list = |y: &Yaml| -> BTreeSet<String> {
        y.as_vec()
            .unwrap_or_else(|| panic!("a list, not {y:?}"))
            .iter()
            .map(|c| yaml_str(c, "a capability").to_string())
            .collect()
    };
    assert_eq!(
        list(&sc["capabilities"]["drop"]),
        BTreeSet::from(["ALL".into()])
    );
    let mut want: BTreeSet<String> = UNIT_CAPS
        .iter()
        .map(|c| c.trim_start_matches("CAP_").to_string())
        .collect();
    want.insert("IPC_LOCK".into());
    assert_eq!(list(&sc["capabilities"]["add"]), want);

    // Volumes: the node's /run/profd and /var/lib/profd, the ConfigMap.
    let volumes = pod["volumes"].as_vec().expect("volumes");
    let volume = |name: &str| {
        volumes
            .iter()
            .find(|v| v["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no volume {name}"))
    };
    let mounts = container["volumeMounts"].as_vec().expect("volumeMounts");
    let mount_of = |name: &str| {
        mounts
            .iter()
            .find(|m| m["name"].as_str() == Some(name))
            .map(|m| yaml_str(&m["mountPath"], "mountPath"))
            .unwrap_or_else(|| panic!("volume {name} is not mounted"))
    };
    for (name, path) in [("run", "/run/profd"), ("state", "/var/lib/profd")] {
        assert_eq!(volume(name)["hostPath"]["path"].as_str(), Some(path));
        assert_eq!(mount_of(name), path);
    }
    let config_map = kind("ConfigMap");
    assert_eq!(
        volume("config")["configMap"]["name"].as_str(),
        config_map["metadata"]["name"].as_str()
    );
    assert_eq!(mount_of("config"), "/etc/profd");
    let command: Vec<&str> = container["command"]
        .as_vec()
        .expect("command")
        .iter()
        .map(|c| yaml_str(c, "command"))
        .collect();
    assert_eq!(
        command,
        ["/usr/bin/profd", "--config", "/etc/profd/profd.toml"]
    );

    // The settings: accepted by profd, the socket on the mounted path, the
    // metrics on the port the pod declares.
    let toml = yaml_str(&config_map["data"]["profd.toml"], "profd.toml");
    let file = unique_dir("k8s").join("profd.toml");
    std::fs::write(&file, toml).unwrap();
    let check = profd_e2e::run_profd(&["--check-config", "--config", path_str(&file)]);
    check.assert_success();
    assert!(
        check.stdout.contains("socket = \"/run/profd/profd.sock\""),
        "{}",
        check.stdout
    );
    let port = container["ports"][0]["containerPort"]
        .as_i64()
        .expect("a port");
    assert!(
        check
            .stdout
            .contains(&format!("listen = \"0.0.0.0:{port}\"")),
        "metrics on port {port}:\n{}",
        check.stdout
    );

    // Probes: profctl health over the socket.
    for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
        let argv: Vec<&str> = container[probe]["exec"]["command"]
            .as_vec()
            .unwrap_or_else(|| panic!("{probe} runs a command"))
            .iter()
            .map(|a| yaml_str(a, probe))
            .collect();
        assert_eq!(
            argv[..4],
            [
                "/usr/bin/profctl",
                "--socket",
                "/run/profd/profd.sock",
                "health"
            ],
            "{probe}"
        );
    }
    // Resources: requests sized for the typical 64 MiB, a memory limit of
    // profd's memory_limit and 16 MiB, as the unit's MemoryMax=.
    let resources = &container["resources"];
    assert_eq!(resources["requests"]["memory"].as_str(), Some("64Mi"));
    let config = yaml_str(&kind("ConfigMap")["data"]["profd.toml"], "profd.toml");
    let limit = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("memory_limit = "))
        .expect("the ConfigMap sets memory_limit");
    assert_eq!(limit, "\"128M\"");
    assert_eq!(resources["limits"]["memory"].as_str(), Some("144Mi"));
    let unit = Unit::load(&deploy("profd.service"));
    assert_eq!(unit.one("Service", "MemoryMax"), "144M");
    let example = std::fs::read_to_string(deploy("profd.toml")).unwrap();
    assert!(
        example.lines().any(|l| l == "memory_limit = \"128M\""),
        "deploy/profd.toml shows the default memory_limit"
    );
    assert_eq!(
        pod["terminationGracePeriodSeconds"].as_i64(),
        Some(90),
        "profd may take 60 s to save sessions"
    );
}

/// profctl's help carries examples everywhere; `profctl man` is roff;
/// `profctl completions bash` loads.
#[test]
fn profctl_help_man_and_completions() {
    let run = |args: &[&str]| profd_e2e::run_profctl(args, &[]);
    let help = run(&["--help"]);
    help.assert_success();
    assert!(
        help.stdout.contains("Examples:\n  profctl attach"),
        "{}",
        help.stdout
    );
    for sub in [
        "attach",
        "run",
        "sessions",
        "stop",
        "info",
        "export",
        "report",
        "histogram",
        "health",
        "man",
        "completions",
    ] {
        let out = run(&[sub, "--help"]);
        out.assert_success();
        let examples =
            out.stdout.split("Examples:\n").nth(1).unwrap_or_else(|| {
                panic!("`profctl {sub} --help` has no examples:\n{}", out.stdout)
            });
        assert!(
            examples
                .lines()
                .all(|l| l.is_empty() || l.starts_with("  profctl") || l.starts_with("        ")),
            "{sub}: {examples}"
        );
        assert!(
            examples.contains(&format!("profctl {sub}")) || sub == "info",
            "{sub}: {examples}"
        );
    }
    let man = run(&["man"]);
    man.assert_success();
    assert!(man.stdout.contains(".TH profctl 1"), "{}", man.stdout);
    let dir = unique_dir("man");
    let out = run(&["man", "--dir", path_str(&dir)]);
    out.assert_success();
    assert!(dir.join("profctl-report.1").is_file());
    // A directory that does not exist is made, as mkdir -p would; one that
    // cannot be (under a file) is an error naming it.
    let nested = dir.join("new/man1");
    let out = run(&["man", "--dir", path_str(&nested)]);
    out.assert_success();
    assert!(
        nested.join("profctl-report.1").is_file(),
        "{}",
        out.describe()
    );
    let under_file = dir.join("profctl-report.1/man1");
    let out = run(&["man", "--dir", path_str(&under_file)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        out.stderr.contains("cannot create it"),
        "{}",
        out.describe()
    );

    let completions = run(&["completions", "bash"]);
    completions.assert_success();
    let file = unique_dir("completions").join("profctl.bash");
    std::fs::write(&file, &completions.stdout).unwrap();
    // The script runs the profctl on PATH for the candidates.
    let script = format!(
        "PATH={}:$PATH; source {}; COMP_WORDS=(profctl att); COMP_CWORD=1; \
         _clap_complete_profctl profctl att profctl; echo \"${{COMPREPLY[@]}}\"",
        path_str(bin("profctl").parent().unwrap()),
        file.display()
    );
    let out = tool("bash", "bash", &["-c", &script], &[]);
    out.assert_success();
    assert_eq!(out.stdout.trim(), "attach", "{}", out.describe());
    let bad = run(&["completions", "tcsh"]);
    assert_eq!(bad.status.code(), Some(2), "{}", bad.describe());
}

/// On a terminal, profctl shows a spinner on stderr while it waits for a
/// JSON profile, and clears it before the end; with stderr not a terminal
/// it prints nothing there.
#[test]
fn profctl_spinner_shows_on_a_terminal_and_is_cleared() {
    let harness = profd_e2e::Harness::start();
    let daemon = &harness.daemon;
    let target = Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("start sleep");
    let pid = target.id().to_string();
    let dir = unique_dir("spinner");
    let json = dir.join("profile.json");
    let profctl = bin("profctl");
    let script = format!(
        "{} --socket {} attach {pid} --duration 3 --format json > {}; echo profctl-exit=$?; sleep 60",
        profctl.display(),
        daemon.socket().display(),
        json.display()
    );
    let term = profd_e2e::terminal::Tmux::start(&script, 120, 10);
    let wait = Duration::from_secs(20);
    let screen = term.wait_for("the spinner", wait, |s| {
        s.contains("profiling session") && s.contains("Ctrl-C stops it")
    });
    eprintln!("while waiting:\n{screen}");
    let screen = term.wait_for("the end", wait, |s| s.contains("profctl-exit="));
    assert!(screen.contains("profctl-exit=0"), "{screen}");
    assert!(
        !screen.contains("profiling session"),
        "spinner left on screen:\n{screen}"
    );
    let text = std::fs::read_to_string(&json).unwrap();
    assert!(text.trim_start().starts_with('{'), "{text}");

    // Not a terminal: stderr stays empty.
    let out = daemon.profctl(&["attach", &pid, "--duration", "1", "--format", "json"]);
    out.assert_success();
    assert_eq!(out.stderr, "", "{}", out.describe());
    let mut target = target;
    let _ = target.kill();
    let _ = target.wait();
}
