//! A process's service label from its cgroup path (systemd unit, container
//! id, last path component) or its command name, and the selectors that
//! choose which processes continuous profiling samples.
use profd_common::api;
use std::fmt;
use std::str::FromStr;

pub use glob::Pattern;

/// The service a process belongs to, and what it was found from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Label {
    /// The label: a unit (`nginx.service`), the first 12 hex digits of a
    /// container id, a cgroup's name, or the command name.
    pub service: String,
    pub source: api::ServiceSource,
    /// The cgroup path the label was read from (the cgroup2 hierarchy's, or
    /// else systemd's v1 `name=systemd` one); "" when neither is listed.
    pub cgroup: String,
    /// The full container id (64 hex digits) found in any hierarchy; "" for
    /// none.
    pub container_id: String,
    /// The innermost systemd unit of `cgroup`; "" for none.
    pub unit: String,
    /// The UID of the Kubernetes pod a kubepods path names (in any
    /// hierarchy, as the container id); "" for none.
    pub pod_uid: String,
}

/// Digits of a container id its label keeps (as `docker ps` shows them).
pub const CONTAINER_LABEL_DIGITS: usize = 12;

/// Suffixes of systemd unit names that hold processes.
const UNIT_SUFFIXES: &[&str] = &[".service", ".scope", ".socket", ".mount", ".swap"];

/// Prefixes container runtimes put before the id in a cgroup's name:
/// `docker-ID.scope` (Docker with the systemd driver), `cri-containerd-ID`,
/// `crio-ID`, `libpod-ID` (Podman).
const CONTAINER_PREFIXES: &[&str] = &["docker-", "cri-containerd-", "crio-", "libpod-"];

/// What one component of a cgroup path names.
enum Component<'a> {
    Unit(&'a str),
    Container(&'a str),
    Other,
}

/// A 64-hex-digit container id.
fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn component(name: &str) -> Component<'_> {
    if is_container_id(name) {
        return Component::Container(name);
    }
    let bare = name.strip_suffix(".scope").unwrap_or(name);
    for prefix in CONTAINER_PREFIXES {
        if let Some(id) = bare.strip_prefix(prefix) {
            if is_container_id(id) {
                return Component::Container(id);
            }
        }
    }
    let unit = UNIT_SUFFIXES
        .iter()
        .any(|s| name.len() > s.len() && name.ends_with(s));
    if unit {
        Component::Unit(name)
    } else {
        Component::Other
    }
}

/// The components of a cgroup path, innermost first. A reader in a cgroup
/// namespace of its own (profd in a container) sees the groups outside its
/// namespace's root through `..` components (`/../../system.slice/x.service`);
/// those name no group and are skipped.
fn innermost_first(path: &str) -> impl Iterator<Item = &str> {
    path.rsplit('/').filter(|c| !c.is_empty() && *c != "..")
}

/// The innermost unit or container of a path, whichever is deeper.
fn innermost(path: &str) -> Option<Component<'_>> {
    innermost_first(path)
        .map(component)
        .find(|c| !matches!(c, Component::Other))
}

/// The innermost container id of a path.
fn container_in(path: &str) -> Option<&str> {
    innermost_first(path).find_map(|c| match component(c) {
        Component::Container(id) => Some(id),
        _ => None,
    })
}

/// Hex digits of a pod UID: a UUID's (`0b6e3a4c-1d2f-…`), or the 32 bare
/// ones of a static pod's hash.
const POD_UID_DIGITS: usize = 32;

/// A pod UID as the kubelet writes it: 32 hex digits, perhaps between `-`.
fn is_pod_uid(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
        && s.bytes().filter(u8::is_ascii_hexdigit).count() == POD_UID_DIGITS
        && !s.starts_with('-')
}

/// The pod UID of a kubepods path, in the kubelet's two forms:
/// - the cgroupfs driver: a `pod<UID>` component below a `kubepods` one
///   (`/kubepods/burstable/pod<UID>/<id>`, `/kubepods/pod<UID>/<id>` for
///   guaranteed pods);
/// - the systemd driver: a slice `kubepods[-QOS]-pod<UID>.slice` with the
///   UID's `-` written `_`
///   (`/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID>.slice/cri-containerd-<id>.scope`).
///
/// Either may lie below other groups (a kubelet given a cgroup root, a
/// node in a container).
pub fn pod_uid_in(path: &str) -> Option<String> {
    let mut below_kubepods = false;
    for c in path.split('/').filter(|c| !c.is_empty()) {
        if let Some((qos, uid)) = c
            .strip_suffix(".slice")
            .and_then(|slice| slice.rsplit_once("-pod"))
        {
            let uid = uid.replace('_', "-");
            if qos.contains("kubepods") && is_pod_uid(&uid) {
                return Some(uid);
            }
        }
        if let Some(uid) = c.strip_prefix("pod").filter(|_| below_kubepods) {
            if is_pod_uid(uid) {
                return Some(uid.to_string());
            }
        }
        below_kubepods |= c.contains("kubepods");
    }
    None
}

/// The innermost unit of a path.
fn unit_in(path: &str) -> Option<&str> {
    innermost_first(path).find_map(|c| match component(c) {
        Component::Unit(u) => Some(u),
        _ => None,
    })
}

/// The label of a process whose cgroup path gives none and whose command
/// name could not be read either (it exited before profd looked): never an
/// empty label.
pub const UNKNOWN_SERVICE: &str = "[unknown]";

/// The label of a process from the text of its `/proc/PID/cgroup` and its
/// command name.
///
/// The path labelled is the cgroup2 hierarchy's (`0::PATH`), or, when that
/// is the root or missing, systemd's v1 `name=systemd` one (hybrid hosts
/// with an unused cgroup2 mount). The other v1 hierarchies are arranged per
/// controller, so they are searched for container ids only. Then, in order:
/// the innermost systemd unit of the path; a container id (the innermost
/// one of the path, else of any hierarchy; a container below a unit, as
/// rootless Podman's under `user@UID.service`, counts before the unit); the
/// path's last component; the command name.
pub fn label_of(cgroup_file: &str, comm: &str) -> Label {
    let mut v2 = None;
    let mut systemd = None;
    let mut others = Vec::new();
    for line in cgroup_file.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            v2 = Some(path);
        } else if controllers.split(',').any(|c| c == "name=systemd") {
            systemd = Some(path);
        } else {
            others.push(path);
        }
    }
    fn non_root(p: Option<&str>) -> Option<&str> {
        p.filter(|p| innermost_first(p).next().is_some())
    }
    let path = non_root(v2)
        .or(non_root(systemd))
        .or(v2)
        .or(systemd)
        .unwrap_or("");
    // The path's own first, else any hierarchy's.
    let all: Vec<&str> = v2.into_iter().chain(systemd).chain(others).collect();
    let container_id = container_in(path)
        .or_else(|| all.iter().find_map(|p| container_in(p)))
        .unwrap_or("")
        .to_string();
    let unit = unit_in(path).unwrap_or("").to_string();
    let pod_uid = pod_uid_in(path)
        .or_else(|| all.iter().find_map(|p| pod_uid_in(p)))
        .unwrap_or_default();
    let (service, source) = match innermost(path) {
        Some(Component::Unit(u)) => (u.to_string(), api::ServiceSource::Unit),
        _ if !container_id.is_empty() => (
            container_id[..CONTAINER_LABEL_DIGITS].to_string(),
            api::ServiceSource::Container,
        ),
        _ => match innermost_first(path).next() {
            Some(last) => (last.to_string(), api::ServiceSource::Cgroup),
            None if comm.is_empty() => (UNKNOWN_SERVICE.to_string(), api::ServiceSource::Comm),
            None => (comm.to_string(), api::ServiceSource::Comm),
        },
    };
    Label {
        service,
        source,
        cgroup: path.to_string(),
        container_id,
        unit,
        pod_uid,
    }
}

/// The label of process `pid` from `/proc/PID/cgroup`. When that cannot be
/// read (the process exited, or /proc hides it): the label by command name,
/// and why, for the caller to count.
#[allow(clippy::result_large_err)] // both ways give a whole label, boxing only adds an allocation
pub fn read_label(pid: u32, comm: &str) -> Result<Label, (Label, String)> {
    let path = format!("/proc/{pid}/cgroup");
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(label_of(&text, comm)),
        Err(e) => Err((label_of("", comm), format!("{path}: {e}"))),
    }
}

// ---------------------------------------------------------------------------
// Selectors.

/// One selector of `[continuous] select` (a process is profiled when the
/// list is empty or any selector matches it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// `unit:NAME`: the process's innermost systemd unit is NAME (a NAME
    /// without a unit suffix means `NAME.service`, as systemctl reads it).
    Unit(String),
    /// `cgroup:/PATH`: its cgroup path is PATH or below it.
    Cgroup(String),
    /// `container:ID`: its container id starts with ID (hex digits).
    Container(String),
    /// `comm:GLOB`: its command name (at most 15 bytes) matches.
    Comm(Pattern),
    /// `exe:GLOB`: its executable's absolute path matches (`*` stops at
    /// `/`; `**` is any number of directories).
    Exe(Pattern),
}

/// The forms a selector takes, for error messages.
pub const SELECTOR_FORMS: &str = "unit:NAME (unit:nginx.service), cgroup:/PATH (cgroup:/system.slice/foo), container:ID (container:3f2a9c, a prefix of the hex id), comm:GLOB (comm:postgres*), exe:GLOB (exe:/usr/bin/*)";

const PATH_GLOB: glob::MatchOptions = glob::MatchOptions {
    case_sensitive: true,
    require_literal_separator: true,
    require_literal_leading_dot: false,
};

/// Why a selector's text is not a selector: the text, and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("bad selector {text:?}: {why}")]
pub struct SelectorError {
    pub text: String,
    pub why: SelectorProblem,
}

/// What is wrong with a selector.
#[derive(Debug, thiserror::Error)]
pub enum SelectorProblem {
    #[error("expected one of {SELECTOR_FORMS}")]
    NoKind,
    #[error("nothing after `{0}:`")]
    Empty(String),
    #[error("a unit name has no `/` or spaces (unit:nginx.service)")]
    UnitName,
    #[error(
        "a cgroup path starts with `/`, as /proc/PID/cgroup shows it (cgroup:/system.slice/foo)"
    )]
    CgroupPath,
    #[error("a container id is up to 64 hex digits; give its start (container:3f2a9c)")]
    ContainerId,
    #[error("an executable is matched by its absolute path (exe:/usr/bin/* or exe:/**/python3*)")]
    ExeNotAbsolute,
    #[error("{what} is not a glob pattern: {source}")]
    Glob {
        what: &'static str,
        #[source]
        source: glob::PatternError,
    },
    #[error("unknown kind `{0}`: expected one of {SELECTOR_FORMS}")]
    UnknownKind(String),
}

impl FromStr for Selector {
    type Err = SelectorError;

    fn from_str(text: &str) -> Result<Selector, SelectorError> {
        let bad = |why| SelectorError {
            text: text.to_string(),
            why,
        };
        let Some((kind, value)) = text.split_once(':') else {
            return Err(bad(SelectorProblem::NoKind));
        };
        if value.is_empty() {
            return Err(bad(SelectorProblem::Empty(kind.to_string())));
        }
        let pattern = |what| {
            Pattern::new(value).map_err(|source| bad(SelectorProblem::Glob { what, source }))
        };
        match kind {
            "unit" => {
                if value.contains('/') || value.chars().any(char::is_whitespace) {
                    return Err(bad(SelectorProblem::UnitName));
                }
                Ok(Selector::Unit(value.to_string()))
            }
            "cgroup" => {
                if !value.starts_with('/') {
                    return Err(bad(SelectorProblem::CgroupPath));
                }
                let trimmed = value.trim_end_matches('/');
                Ok(Selector::Cgroup(if trimmed.is_empty() {
                    "/".into()
                } else {
                    trimmed.to_string()
                }))
            }
            "container" => {
                if value.len() > 64 || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(bad(SelectorProblem::ContainerId));
                }
                Ok(Selector::Container(value.to_ascii_lowercase()))
            }
            "comm" => Ok(Selector::Comm(pattern("the command name")?)),
            "exe" => {
                if !value.starts_with('/') {
                    return Err(bad(SelectorProblem::ExeNotAbsolute));
                }
                Ok(Selector::Exe(pattern("the executable")?))
            }
            _ => Err(bad(SelectorProblem::UnknownKind(kind.to_string()))),
        }
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selector::Unit(u) => write!(f, "unit:{u}"),
            Selector::Cgroup(p) => write!(f, "cgroup:{p}"),
            Selector::Container(id) => write!(f, "container:{id}"),
            Selector::Comm(p) => write!(f, "comm:{}", p.as_str()),
            Selector::Exe(p) => write!(f, "exe:{}", p.as_str()),
        }
    }
}

impl Selector {
    /// Whether the process with this label, command name and executable
    /// path is selected.
    pub fn matches(&self, label: &Label, comm: &str, exe: &str) -> bool {
        match self {
            Selector::Unit(u) => {
                label.unit == *u
                    || (!UNIT_SUFFIXES.iter().any(|s| u.ends_with(s))
                        && label.unit.strip_suffix(".service") == Some(u.as_str()))
            }
            Selector::Cgroup(prefix) => {
                prefix == "/"
                    || label
                        .cgroup
                        .strip_prefix(prefix.as_str())
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            }
            Selector::Container(id) => {
                !label.container_id.is_empty() && label.container_id.starts_with(id.as_str())
            }
            Selector::Comm(p) => p.matches(comm),
            Selector::Exe(p) => p.matches_with(exe, PATH_GLOB),
        }
    }
}

/// Whether a process is profiled: no selectors, or any of them matches.
pub fn selected(selectors: &[Selector], label: &Label, comm: &str, exe: &str) -> bool {
    selectors.is_empty() || selectors.iter().any(|s| s.matches(label, comm, exe))
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::ServiceSource::{Cgroup, Comm, Container, Unit};

    const ID: &str = "3f2a9c0d1e2b4a5f6789abcdef0123456789abcdef0123456789abcdef012345";

    fn label(text: &str) -> (String, api::ServiceSource) {
        let l = label_of(text, "worker");
        (l.service, l.source)
    }

    /// A process gone before its name was read, in the root cgroup: a
    /// label that says so, never an empty one.
    #[test]
    fn no_cgroup_and_no_name_is_unknown_not_empty() {
        let l = label_of("0::/\n", "");
        assert_eq!((l.service.as_str(), l.source), (UNKNOWN_SERVICE, Comm));
        let l = label_of("", "");
        assert_eq!(l.service, UNKNOWN_SERVICE);
        assert_eq!(label("0::/\n"), ("worker".into(), Comm));
    }

    /// Read from a cgroup namespace of its own (profd in a container): the
    /// groups outside it seen through `..`, labelled by their own names;
    /// the node's root group, all `..`, by the command name.
    #[test]
    fn paths_above_the_cgroup_namespace_label_by_their_own_names() {
        assert_eq!(
            label("0::/../../system.slice/nginx.service\n"),
            ("nginx.service".into(), Unit)
        );
        assert_eq!(
            label("0::/../../batch/nightly\n"),
            ("nightly".into(), Cgroup)
        );
        assert_eq!(
            label("4:memory:/../..\n1:name=systemd:/../..\n0::/../..\n"),
            ("worker".into(), Comm)
        );
    }

    #[test]
    fn a_pure_cgroup2_systemd_host_labels_by_unit() {
        let l = label_of("0::/system.slice/nginx.service\n", "nginx");
        assert_eq!(l.service, "nginx.service");
        assert_eq!(l.source, Unit);
        assert_eq!(l.cgroup, "/system.slice/nginx.service");
        assert_eq!(l.unit, "nginx.service");
        assert_eq!(l.container_id, "");
        // A subgroup a service made under its delegated cgroup.
        assert_eq!(
            label("0::/system.slice/postgresql@15-main.service/workers\n"),
            ("postgresql@15-main.service".into(), Unit)
        );
        // User sessions and user services.
        assert_eq!(
            label("0::/user.slice/user-1000.slice/session-3.scope\n"),
            ("session-3.scope".into(), Unit)
        );
        assert_eq!(
            label("0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-firefox.scope\n"),
            ("app-firefox.scope".into(), Unit)
        );
        assert_eq!(label("0::/init.scope\n"), ("init.scope".into(), Unit));
        assert_eq!(
            label("0::/system.slice/var-lib-x.mount\n"),
            ("var-lib-x.mount".into(), Unit)
        );
        assert_eq!(
            label("0::/system.slice/dev-sda2.swap\n"),
            ("dev-sda2.swap".into(), Unit)
        );
        assert_eq!(
            label("0::/system.slice/sshd.socket\n"),
            ("sshd.socket".into(), Unit)
        );
        // A slice is not a unit that holds processes: its last component.
        assert_eq!(
            label("0::/machine.slice/custom\n"),
            ("custom".into(), Cgroup)
        );
    }

    #[test]
    fn a_hybrid_host_labels_by_the_systemd_hierarchy() {
        let text = "12:pids:/system.slice/cron.service\n\
                    11:memory:/system.slice/cron.service\n\
                    4:cpu,cpuacct:/system.slice/cron.service\n\
                    1:name=systemd:/system.slice/cron.service\n\
                    0::/system.slice/cron.service\n";
        let l = label_of(text, "cron");
        assert_eq!((l.service.as_str(), l.source), ("cron.service", Unit));
        // cgroup2 mounted but unused: name=systemd has the path.
        let text = "5:memory:/\n1:name=systemd:/system.slice/ssh.service\n0::/\n";
        assert_eq!(label(text), ("ssh.service".into(), Unit));
        // A group of its own under the cgroup2 mount wins over name=systemd.
        let text = "5:memory:/\n1:name=systemd:/system.slice/ssh.service\n0::/held\n";
        let l = label_of(text, "sh");
        assert_eq!((l.service.as_str(), l.source), ("held", Cgroup));
        assert_eq!(l.cgroup, "/held");
        // Controllers' hierarchies do not give units or last components.
        let text = "5:memory:/system.slice/foo.service\n4:cpu:/batch\n0::/\n";
        let l = label_of(text, "worker");
        assert_eq!((l.service.as_str(), l.source), ("worker", Comm));
        assert_eq!(l.cgroup, "/");
        // Pure v1 without name=systemd: only the command name.
        assert_eq!(label("3:cpu:/batch/jobs\n"), ("worker".into(), Comm));
    }

    #[test]
    fn this_machines_layout_labels_by_command_name() {
        // /proc/self/cgroup here: v1 controllers, name=systemd and cgroup2
        // all at the root, memory in a per-process group (32 hex digits, not
        // a container id).
        let text = "9:name=systemd:/\n8:pids:/\n7:blkio:/\n6:freezer:/\n5:devices:/\n\
                    4:memory:/process_api/a21b1424bec3fc6be36f786acc50d502\n\
                    3:cpuset:/\n2:cpuacct:/\n1:cpu:/\n0::/\n";
        let l = label_of(text, "bash");
        assert_eq!((l.service.as_str(), l.source), ("bash", Comm));
        assert_eq!((l.cgroup.as_str(), l.container_id.as_str()), ("/", ""));
        let mine = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let l = label_of(&mine, "me");
        assert!(l.source != Unit || l.unit == l.service, "{l:?}");
    }

    #[test]
    fn docker_v1_labels_by_the_short_container_id() {
        let text = format!(
            "12:memory:/docker/{ID}\n3:cpu,cpuacct:/docker/{ID}\n1:name=systemd:/docker/{ID}\n0::/\n"
        );
        let l = label_of(&text, "nginx");
        assert_eq!(l.service, "3f2a9c0d1e2b");
        assert_eq!(l.source, Container);
        assert_eq!(l.container_id, ID);
        assert_eq!(l.cgroup, format!("/docker/{ID}"));
        // Docker with the systemd driver: a transient scope, not a unit.
        let l = label_of(&format!("0::/system.slice/docker-{ID}.scope\n"), "x");
        assert_eq!((l.service.as_str(), l.source), ("3f2a9c0d1e2b", Container));
        assert_eq!(l.unit, "");
        // Only the memory hierarchy has it: still found.
        let l = label_of(
            &format!("4:memory:/docker/{ID}\n1:name=systemd:/\n0::/\n"),
            "x",
        );
        assert_eq!((l.service.as_str(), l.source), ("3f2a9c0d1e2b", Container));
        // Podman, CRI-O and containerd forms.
        for form in [
            format!("libpod-{ID}.scope"),
            format!("crio-{ID}.scope"),
            format!("crio-{ID}"),
            format!("cri-containerd-{ID}.scope"),
        ] {
            let l = label_of(&format!("0::/machine.slice/{form}\n"), "x");
            assert_eq!(
                (l.source, l.container_id.as_str()),
                (Container, ID),
                "{form}"
            );
        }
        // A 63-digit name is not an id.
        assert_eq!(
            label(&format!("0::/docker/{}\n", &ID[1..])),
            (ID[1..].to_string(), Cgroup)
        );
    }

    #[test]
    fn kubepods_label_by_container() {
        // cgroup v2 with the systemd driver.
        let text = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/\
             kubepods-burstable-pod0b6e3a4c_1d2f_4e5a_9b8c_7d6e5f4a3b2c.slice/cri-containerd-{ID}.scope\n"
        );
        let l = label_of(&text, "app");
        assert_eq!((l.service.as_str(), l.source), ("3f2a9c0d1e2b", Container));
        // cgroupfs driver (v1).
        let text = format!(
            "11:memory:/kubepods/burstable/pod0b6e3a4c-1d2f-4e5a-9b8c-7d6e5f4a3b2c/{ID}\n\
             1:name=systemd:/kubepods/burstable/pod0b6e3a4c-1d2f-4e5a-9b8c-7d6e5f4a3b2c/{ID}\n"
        );
        let l = label_of(&text, "app");
        assert_eq!((l.source, l.container_id.as_str()), (Container, ID));
        // Rootless Podman under a user's manager: the container, not the
        // manager unit.
        let l = label_of(
            &format!("0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container\n"),
            "app",
        );
        assert_eq!((l.service.as_str(), l.source), ("3f2a9c0d1e2b", Container));
        assert_eq!(l.unit, "user@1000.service");
    }

    const UID: &str = "0b6e3a4c-1d2f-4e5a-9b8c-7d6e5f4a3b2c";

    /// Every form the kubelet gives a pod's cgroup: its UID and container
    /// id, whichever driver, QoS class and runtime.
    #[test]
    fn kubepods_paths_give_the_pod_uid_and_container_id() {
        let sys = UID.replace('-', "_");
        for path in [
            // cgroupfs driver: burstable, best-effort, guaranteed.
            format!("/kubepods/burstable/pod{UID}/{ID}"),
            format!("/kubepods/besteffort/pod{UID}/{ID}"),
            format!("/kubepods/pod{UID}/{ID}"),
            // systemd driver, each runtime's scope.
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{sys}.slice/cri-containerd-{ID}.scope"),
            format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{sys}.slice/crio-{ID}.scope"),
            format!("/kubepods.slice/kubepods-pod{sys}.slice/docker-{ID}.scope"),
            // Below other groups: a kubelet in a container (kind).
            format!("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod{sys}.slice/cri-containerd-{ID}.scope"),
            format!("/docker/{ID}/kubepods/besteffort/pod{UID}/{ID}"),
        ] {
            let l = label_of(&format!("0::{path}\n"), "app");
            assert_eq!(
                (l.pod_uid.as_str(), l.container_id.as_str(), l.source),
                (UID, ID, Container),
                "{path}"
            );
            // The same in systemd's v1 hierarchy (cgroup2 unused), and in a
            // controller's only (cgroupfs on v1 puts it in each).
            let l = label_of(&format!("3:name=systemd:{path}\n0::/\n"), "app");
            assert_eq!((l.pod_uid.as_str(), l.container_id.as_str()), (UID, ID));
            let l = label_of(&format!("4:memory:{path}\n0::/\n"), "app");
            assert_eq!((l.pod_uid.as_str(), l.container_id.as_str()), (UID, ID));
        }
        // A static pod's UID is its manifest's hash: 32 bare digits.
        let hash = "33d556edd3ae8ef21980288cef77ae8b";
        let l = label_of(&format!("0::/kubepods/burstable/pod{hash}/{ID}\n"), "x");
        assert_eq!(l.pod_uid, hash);
        // The pod's own group (its pause process sits in a container).
        assert_eq!(
            label_of(&format!("0::/kubepods/pod{UID}\n"), "x").pod_uid,
            UID
        );
        // Not pods: a `pod` group outside kubepods, a UID too short or with
        // `_` in the cgroupfs form, a slice of some other kind.
        for path in [
            format!("/batch/pod{UID}/{ID}"),
            format!("/kubepods/burstable/pod{}/{ID}", &UID[1..]),
            format!("/kubepods/burstable/pod{sys}/{ID}"),
            format!("/system.slice/system-pod{sys}.slice"),
            "/kubepods/burstable/podx".to_string(),
            "/kubepods.slice/kubepods-pod.slice".to_string(),
        ] {
            let l = label_of(&format!("0::{path}\n"), "x");
            assert_eq!(l.pod_uid, "", "{path}");
        }
        assert_eq!(label_of("0::/system.slice/ssh.service\n", "x").pod_uid, "");
    }

    #[test]
    fn no_cgroup_text_labels_by_command_name() {
        let l = label_of("", "postgres");
        assert_eq!((l.service.as_str(), l.source), ("postgres", Comm));
        assert_eq!(l.cgroup, "");
        assert_eq!(label("garbage\n\n"), ("worker".into(), Comm));
        // A path holding `:` is read whole.
        assert_eq!(label("0::/a:b\n"), ("a:b".into(), Cgroup));
    }

    #[test]
    fn an_unreadable_cgroup_file_gives_the_command_name_and_why() {
        // Pid numbers never reach u32::MAX (the kernel's limit is 2^22).
        let (l, why) = read_label(u32::MAX, "gone").unwrap_err();
        assert_eq!((l.service.as_str(), l.source), ("gone", Comm));
        assert!(
            why.starts_with(&format!("/proc/{}/cgroup: ", u32::MAX)),
            "{why}"
        );
        let l = read_label(std::process::id(), "me").unwrap();
        assert_eq!(
            l,
            label_of(&std::fs::read_to_string("/proc/self/cgroup").unwrap(), "me")
        );
    }

    /// A cgroup made under the cgroup2 mount (mounted at
    /// /sys/fs/cgroup/unified when none is), removed on drop with anything
    /// left in it.
    struct TestGroup(std::path::PathBuf);

    impl Drop for TestGroup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }

    fn cgroup2_mount() -> std::path::PathBuf {
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
        if let Some(dir) = mounts.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| f[1].to_string())
        }) {
            return dir.into();
        }
        let dir = std::path::PathBuf::from("/sys/fs/cgroup/unified");
        std::fs::create_dir_all(&dir).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "cgroup2", "cgroup2"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "mount cgroup2: {out:?}");
        dir
    }

    #[test]
    fn a_process_in_a_cgroup2_group_of_its_own_is_labelled_by_its_name() {
        assert!(
            rustix::process::geteuid().is_root(),
            "this test makes a cgroup: run it as root"
        );
        let name = format!("profd-label-{}", std::process::id());
        let group = TestGroup(cgroup2_mount().join(&name));
        std::fs::create_dir(&group.0).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let moved = std::fs::write(group.0.join("cgroup.procs"), child.id().to_string());
        let label = read_label(child.id(), "sleep");
        let _ = child.kill();
        let _ = child.wait();
        moved.unwrap();
        let label = label.unwrap();
        assert_eq!(label.service, name);
        assert_eq!(label.source, Cgroup);
        assert_eq!(label.cgroup, format!("/{name}"));
        drop(group);
        assert!(!cgroup2_mount().join(&name).exists());
    }

    fn sel(text: &str) -> Selector {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn selectors_parse_and_show_as_written() {
        for text in [
            "unit:nginx.service",
            "cgroup:/system.slice/foo",
            "container:3f2a9c",
            "comm:postgres*",
            "exe:/usr/bin/*",
        ] {
            assert_eq!(sel(text).to_string(), text);
        }
        assert_eq!(sel("cgroup:/a/b/"), Selector::Cgroup("/a/b".into()));
        assert_eq!(sel("cgroup:/"), Selector::Cgroup("/".into()));
        assert_eq!(sel("container:3F2A"), Selector::Container("3f2a".into()));
    }

    #[test]
    fn bad_selectors_say_what_is_wrong() {
        let e = "nginx".parse::<Selector>().unwrap_err().to_string();
        assert!(
            e.starts_with("bad selector \"nginx\": expected one of unit:NAME"),
            "{e}"
        );
        assert!(e.contains("exe:GLOB"), "{e}");
        let e = "pid:3".parse::<Selector>().unwrap_err().to_string();
        assert!(
            e.starts_with("bad selector \"pid:3\": unknown kind `pid`"),
            "{e}"
        );
        let e = "comm:".parse::<Selector>().unwrap_err().to_string();
        assert_eq!(e, "bad selector \"comm:\": nothing after `comm:`");
        let e = "comm:[x".parse::<Selector>().unwrap_err().to_string();
        assert!(e.contains("is not a glob pattern"), "{e}");
        let e = "container:xyz".parse::<Selector>().unwrap_err().to_string();
        assert!(e.contains("hex digits"), "{e}");
        let e = "cgroup:system.slice"
            .parse::<Selector>()
            .unwrap_err()
            .to_string();
        assert!(e.contains("starts with `/`"), "{e}");
        let e = "exe:bin/sh".parse::<Selector>().unwrap_err().to_string();
        assert!(e.contains("absolute path"), "{e}");
        let e = "unit:a/b".parse::<Selector>().unwrap_err().to_string();
        assert!(e.contains("unit name"), "{e}");
    }

    #[test]
    fn selectors_match_what_they_name() {
        let nginx = label_of("0::/system.slice/nginx.service/workers\n", "nginx");
        let docker = label_of(&format!("0::/system.slice/docker-{ID}.scope\n"), "app");
        let bare = label_of("", "postgres: walwriter");
        let m = |s: &str, l: &Label, comm: &str, exe: &str| sel(s).matches(l, comm, exe);
        assert!(m("unit:nginx.service", &nginx, "nginx", "/usr/sbin/nginx"));
        assert!(m("unit:nginx", &nginx, "nginx", "/usr/sbin/nginx"));
        assert!(!m("unit:nginx.scope", &nginx, "nginx", ""));
        assert!(!m("unit:ngin", &nginx, "nginx", ""));
        assert!(!m("unit:nginx.service", &docker, "nginx", ""));
        assert!(m("cgroup:/system.slice", &nginx, "", ""));
        assert!(m("cgroup:/system.slice/nginx.service", &nginx, "", ""));
        assert!(m(
            "cgroup:/system.slice/nginx.service/workers",
            &nginx,
            "",
            ""
        ));
        assert!(!m("cgroup:/system.slice/nginx", &nginx, "", ""));
        assert!(!m("cgroup:/system", &nginx, "", ""));
        assert!(m("cgroup:/", &bare, "", ""));
        assert!(!m("cgroup:/system.slice", &bare, "", ""));
        assert!(m("container:3f2a9c", &docker, "", ""));
        assert!(m(&format!("container:{ID}"), &docker, "", ""));
        assert!(!m("container:3f2a9d", &docker, "", ""));
        assert!(!m("container:3f2a9c", &nginx, "", ""));
        assert!(m("comm:postgres*", &bare, "postgres: walwriter", ""));
        assert!(!m("comm:postgres", &bare, "postgres: walwriter", ""));
        assert!(m("comm:post?res*", &bare, "postgres: walwriter", ""));
        assert!(m("exe:/usr/bin/*", &bare, "", "/usr/bin/python3.11"));
        assert!(!m("exe:/usr/bin/*", &bare, "", "/usr/bin/x/y"));
        assert!(m(
            "exe:/usr/**/python*",
            &bare,
            "",
            "/usr/local/bin/python3"
        ));
        assert!(m("exe:/**/python3*", &bare, "", "/usr/bin/python3.11"));
        assert!(!m("exe:/**/python3*", &bare, "", "/usr/bin/perl"));
        assert!(!m("exe:/usr/bin/*", &bare, "", "/opt/usr/bin/x"));
    }

    #[test]
    fn no_selectors_select_everything_and_any_one_suffices() {
        let l = label_of("0::/system.slice/cron.service\n", "cron");
        assert!(selected(&[], &l, "cron", "/usr/sbin/cron"));
        let s = [sel("unit:nginx.service"), sel("comm:cr*")];
        assert!(selected(&s, &l, "cron", "/usr/sbin/cron"));
        assert!(!selected(&s, &l, "anacron", "/usr/sbin/anacron"));
    }
}
