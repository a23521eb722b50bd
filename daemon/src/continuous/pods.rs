//! The Kubernetes pod and container of a process, from what the node has on
//! its disk, with no API server: the pod's namespace and name from the
//! kubelet's pod log directories (`<root>/pods/NAMESPACE_POD_UID/`), the
//! container's name from the links it makes to each container's log
//! (`<root>/containers/POD_NAMESPACE_CONTAINER-ID.log`).
use profd_common::api;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Where the kubelet keeps its logs unless `continuous.kubelet_logs` says.
pub const DEFAULT_ROOT: &str = "/var/log";

/// A pod's namespace and name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pod {
    namespace: String,
    name: String,
}

/// What is known of pods and containers, by pod UID and container id: found
/// once, kept while a process of theirs is.
#[derive(Debug)]
pub struct Pods {
    root: PathBuf,
    pods: HashMap<String, Pod>,
    /// Container names by container id.
    containers: HashMap<String, String>,
}

impl Pods {
    /// Pods named from the kubelet's logs under `root` (`/var/log`).
    pub fn new(root: PathBuf) -> Pods {
        Pods {
            root,
            pods: HashMap::new(),
            containers: HashMap::new(),
        }
    }

    /// Look up what is not known yet of these (pod UID, container id)
    /// pairs: each of the two directories is read once at most, and not
    /// at all when everything is known. What the disk does not hold yet (a
    /// pod whose log directory the kubelet has not made) is looked up again
    /// at the next call.
    pub fn learn<'a>(&mut self, wanted: impl IntoIterator<Item = (&'a str, &'a str)>) {
        let mut uids = HashSet::new();
        let mut ids = HashSet::new();
        for (uid, id) in wanted {
            if uid.is_empty() {
                continue;
            }
            if !self.pods.contains_key(uid) {
                uids.insert(uid);
            }
            if !id.is_empty() && !self.containers.contains_key(id) {
                ids.insert((uid, id));
            }
        }
        if !uids.is_empty() {
            for name in names_in(&self.root.join("pods")) {
                if let Some((uid, pod)) = pod_dir(&name).filter(|(uid, _)| uids.contains(uid)) {
                    self.pods.insert(uid.to_string(), pod);
                }
            }
        }
        ids.retain(|(uid, _)| self.pods.contains_key(*uid));
        if ids.is_empty() {
            return;
        }
        for name in names_in(&self.root.join("containers")) {
            let Some(link) = container_link(&name) else {
                continue;
            };
            for &(uid, id) in &ids {
                let pod = &self.pods[uid];
                // Kubelet cuts a link's name to 255 bytes: the id may be
                // only the start of it.
                if link.pod == pod.name
                    && link.namespace == pod.namespace
                    && id.starts_with(link.id)
                {
                    self.containers
                        .insert(id.to_string(), link.container.to_string());
                }
            }
        }
    }

    /// The pod of a process whose cgroup path names pod `uid` and container
    /// `id`: its names as far as [`Pods::learn`] found them. None outside a
    /// pod.
    pub fn pod(&self, uid: &str, id: &str) -> Option<api::KubernetesPod> {
        if uid.is_empty() {
            return None;
        }
        let pod = self.pods.get(uid);
        Some(api::KubernetesPod {
            namespace: pod.map(|p| p.namespace.clone()).unwrap_or_default(),
            name: pod.map(|p| p.name.clone()).unwrap_or_default(),
            uid: uid.to_string(),
            container: self.containers.get(id).cloned().unwrap_or_default(),
        })
    }

    /// Forget the pods and containers but those of `uids` and `ids` (the
    /// ones processes are still in).
    pub fn retain(&mut self, uids: &HashSet<&str>, ids: &HashSet<&str>) {
        self.pods.retain(|uid, _| uids.contains(uid.as_str()));
        self.containers.retain(|id, _| ids.contains(id.as_str()));
    }
}

/// The names in a directory (none when it cannot be read: not a
/// Kubernetes node, or not yet).
fn names_in(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect()
}

/// A pod log directory's name, `NAMESPACE_POD_UID`: the UID and the pod.
/// Namespaces and pod names are DNS names, without `_`.
fn pod_dir(name: &str) -> Option<(&str, Pod)> {
    let mut parts = name.split('_');
    let (namespace, pod, uid) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || namespace.is_empty() || pod.is_empty() || uid.is_empty() {
        return None;
    }
    Some((
        uid,
        Pod {
            namespace: namespace.to_string(),
            name: pod.to_string(),
        },
    ))
}

/// A container log link's name, `POD_NAMESPACE_CONTAINER-ID.log`, taken
/// apart.
#[derive(Debug, PartialEq, Eq)]
struct Link<'a> {
    pod: &'a str,
    namespace: &'a str,
    container: &'a str,
    id: &'a str,
}

fn container_link(name: &str) -> Option<Link<'_>> {
    let mut parts = name.strip_suffix(".log")?.split('_');
    let (pod, namespace, rest) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    // Container names are DNS labels: the id follows the last `-`.
    let (container, id) = rest.rsplit_once('-')?;
    if container.is_empty() || id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(Link {
        pod,
        namespace,
        container,
        id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0b6e3a4c-1d2f-4e5a-9b8c-7d6e5f4a3b2c";
    const ID: &str = "3f2a9c0d1e2b4a5f6789abcdef0123456789abcdef0123456789abcdef012345";

    #[test]
    fn log_names_are_taken_apart_as_the_kubelet_makes_them() {
        let dir = format!("kube-system_coredns-5d78c9869d-x7k2p_{UID}");
        let (uid, pod) = pod_dir(&dir).unwrap();
        assert_eq!(uid, UID);
        assert_eq!(
            pod,
            Pod {
                namespace: "kube-system".into(),
                name: "coredns-5d78c9869d-x7k2p".into()
            }
        );
        assert_eq!(pod_dir("a_b"), None);
        assert_eq!(pod_dir("a_b_c_d"), None);
        assert_eq!(pod_dir(&format!("_b_{UID}")), None);
        let name = format!("coredns-5d78c9869d-x7k2p_kube-system_core-dns-{ID}.log");
        assert_eq!(
            container_link(&name),
            Some(Link {
                pod: "coredns-5d78c9869d-x7k2p",
                namespace: "kube-system",
                container: "core-dns",
                id: ID
            })
        );
        assert_eq!(container_link(&format!("p_n_c-{ID}")), None, "no .log");
        assert_eq!(container_link("p_n_c-xyz.log"), None, "not hex");
        assert_eq!(container_link(&format!("p_n_{ID}.log")), None, "no name");
    }

    fn layout(root: &Path, namespace: &str, pod: &str, containers: &[(&str, &str)]) {
        let dir = root.join("pods").join(format!("{namespace}_{pod}_{UID}"));
        for (name, id) in containers {
            std::fs::create_dir_all(dir.join(name)).unwrap();
            std::fs::write(dir.join(name).join("0.log"), "").unwrap();
            let links = root.join("containers");
            std::fs::create_dir_all(&links).unwrap();
            std::os::unix::fs::symlink(
                dir.join(name).join("0.log"),
                links.join(format!("{pod}_{namespace}_{name}-{id}.log")),
            )
            .unwrap();
        }
    }

    fn temp_root(what: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("profd-pods-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_pod_is_named_once_its_logs_are_there_and_kept_while_used() {
        let root = temp_root("named");
        let mut pods = Pods::new(root.clone());
        let sidecar = &ID.replace('3', "4");
        // Nothing on the disk yet: the UID only.
        pods.learn([(UID, ID)]);
        let pod = pods.pod(UID, ID).unwrap();
        assert_eq!(
            (
                pod.uid.as_str(),
                pod.namespace.as_str(),
                pod.container.as_str()
            ),
            (UID, "", "")
        );
        // The kubelet makes the directories: the next look finds them.
        layout(&root, "shop", "web-7f9", &[("app", ID), ("proxy", sidecar)]);
        pods.learn([(UID, ID), (UID, sidecar.as_str()), (UID, "")]);
        let pod = pods.pod(UID, ID).unwrap();
        assert_eq!(
            (
                pod.namespace.as_str(),
                pod.name.as_str(),
                pod.container.as_str()
            ),
            ("shop", "web-7f9", "app")
        );
        assert_eq!(pods.pod(UID, sidecar).unwrap().container, "proxy");
        // The pod's sandbox (pause) has no log: no container name.
        let pause = ID.replace('3', "5");
        pods.learn([(UID, pause.as_str())]);
        assert_eq!(pods.pod(UID, &pause).unwrap().container, "");
        assert_eq!(pods.pod(UID, &pause).unwrap().name, "web-7f9");
        assert_eq!(pods.pod("", ID), None, "not in a pod");
        // Known: the disk is not read again.
        std::fs::remove_dir_all(root.join("pods")).unwrap();
        pods.learn([(UID, ID)]);
        assert_eq!(pods.pod(UID, ID).unwrap().name, "web-7f9");
        // Let go of once no process is in it.
        pods.retain(&HashSet::from([UID]), &HashSet::from([sidecar.as_str()]));
        assert_eq!(pods.pod(UID, ID).unwrap().container, "");
        assert_eq!(pods.pod(UID, sidecar).unwrap().container, "proxy");
        pods.retain(&HashSet::new(), &HashSet::new());
        assert_eq!(pods.pod(UID, sidecar).unwrap().name, "");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_link_cut_to_255_bytes_still_names_its_container() {
        let root = temp_root("cut");
        let pod = "p".repeat(200);
        let dir = root.join("pods").join(format!("ns_{pod}_{UID}"));
        std::fs::create_dir_all(dir.join("app")).unwrap();
        std::fs::create_dir_all(root.join("containers")).unwrap();
        // As the kubelet cuts it: 251 bytes, then `.log`.
        let full = format!("{pod}_ns_app-{ID}");
        std::fs::write(
            root.join("containers")
                .join(format!("{}.log", &full[..251])),
            "",
        )
        .unwrap();
        let mut pods = Pods::new(root.clone());
        pods.learn([(UID, ID)]);
        assert_eq!(pods.pod(UID, ID).unwrap().container, "app");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
