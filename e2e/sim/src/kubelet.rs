//! What the kubelet does with a control-plane node's static pods, as far as the simulator needs it:
//! start etcd and kube-apiserver from the manifests kubeadm wrote (their command, flags, environment),
//! inside the node's network namespace, with every path a volume mount covers mapped to its host path
//! under the node's root folder; and post the mirror pods of all four manifests to the workload cluster,
//! as the manifests say (kubeadm's annotations, the patches' annotations).
//!
//! kube-controller-manager and kube-scheduler are not run: nothing the providers do depends on them,
//! and without kubelets they would mark every Node unreachable. Their mirror pods report them running.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use testenv::process::Process;

use crate::netns::NodeNetns;
use crate::node::{BootError, COMPONENTS};

/// Where kubeadm writes the static pod manifests, inside the node's root folder.
const MANIFESTS: &str = "etc/kubernetes/manifests";
/// The process serving the kubelet's port-forward endpoint, among a node's processes.
pub const KUBELET_API: &str = "kubelet";
/// The kubelet's port, where kube-apiserver sends `pods/portforward` (its default for a Node that
/// reports none).
pub const KUBELET_PORT: u16 = 10250;

/// The static pods of one node.
pub struct StaticPods {
    rootfs: PathBuf,
    logs: PathBuf,
    running: BTreeMap<String, Process>,
}

impl StaticPods {
    pub fn new(rootfs: &Path, logs: &Path) -> Self {
        Self {
            rootfs: rootfs.to_owned(),
            logs: logs.to_owned(),
            running: BTreeMap::new(),
        }
    }

    fn manifest_path(&self, component: &str) -> PathBuf {
        self.rootfs
            .join(MANIFESTS)
            .join(format!("{component}.yaml"))
    }

    /// Whether kubeadm has written the component's manifest.
    pub fn written(&self, component: &str) -> bool {
        self.manifest_path(component).exists()
    }

    /// The component's manifest as kubeadm wrote it.
    pub fn manifest(&self, component: &str) -> Result<Pod, BootError> {
        let path = self.manifest_path(component);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| BootError::Io(format!("{}: {e}", path.display())))?;
        serde_saphyr::from_str(&text)
            .map_err(|e| BootError::Io(format!("{}: not a Pod: {e}", path.display())))
    }

    pub fn is_running(&self, component: &str) -> bool {
        self.running.contains_key(component)
    }

    /// Starts `component` from its manifest inside `netns`, with the build of the release its image names
    /// (`registry.k8s.io/etcd:3.7.0-0` runs etcd 3.7; see [`testenv::binaries::for_image`]).
    pub fn start(&mut self, component: &str, netns: &NodeNetns) -> Result<(), BootError> {
        let pod = self.manifest(component)?;
        let image = pod
            .spec
            .as_ref()
            .and_then(|spec| spec.containers.first())
            .and_then(|container| container.image.clone())
            .ok_or_else(|| BootError::Io(format!("the {component} manifest names no image")))?;
        let binary = testenv::binaries::for_image(&image).map_err(|e| {
            BootError::Io(format!(
                "no build runs {image} of the {component} manifest: {e}"
            ))
        })?;
        let command = container_command(&pod, &self.rootfs)?;
        for dir in directories_to_create(&pod) {
            let dir = under(&self.rootfs, &dir);
            std::fs::create_dir_all(&dir)
                .map_err(|e| BootError::Io(format!("create {}: {e}", dir.display())))?;
        }
        let mut cmd = netns.command(&binary);
        cmd.args(&command.args);
        cmd.envs(command.env);
        let log = self.logs.join(format!("{component}.log"));
        let process = Process::spawn(&format!("{component} (static pod)"), cmd, &log)
            .map_err(|e| BootError::Io(format!("start {component}: {e}")))?;
        tracing::info!(%component, %image, pid = process.pid(), "static pod started from its manifest");
        self.running.insert(component.to_owned(), process);
        Ok(())
    }

    /// Serves the kubelet's port-forward endpoint on the node's address ([`KUBELET_PORT`]) with
    /// `sim-kubelet`, forwarding into the node's network namespace, with a self-signed serving
    /// certificate as a kubelet without a signed one has. Where `sim-kubelet` is not built nothing is
    /// started: `pods/portforward` then fails as it would against a node without a kubelet.
    pub fn serve_kubelet_api(&mut self, netns: &NodeNetns) -> Result<(), BootError> {
        let binary = match testenv::binaries::sim_kubelet() {
            Ok(binary) => binary,
            Err(e) => {
                tracing::info!(error = %e, "no kubelet port-forward endpoint on this node");
                return Ok(());
            }
        };
        let ip = netns.ip().to_string();
        let pki = under(&self.rootfs, "/var/lib/kubelet/pki");
        std::fs::create_dir_all(&pki)
            .map_err(|e| BootError::Io(format!("create {}: {e}", pki.display())))?;
        let ca = testenv::pki::Ca::new(&format!("{ip}-ca"))
            .map_err(|e| BootError::Pki(e.to_string()))?;
        let files = ca
            .issue(&ip, None, &[&ip], testenv::pki::Usage::Server)
            .and_then(|pair| pair.write(&pki, "kubelet"))
            .map_err(|e| BootError::Pki(e.to_string()))?;
        let mut cmd = netns.command(&binary);
        cmd.arg("--listen")
            .arg(format!("{ip}:{KUBELET_PORT}"))
            .arg("--tls-cert-file")
            .arg(&files.cert)
            .arg("--tls-private-key-file")
            .arg(&files.key)
            .args(["--target", "127.0.0.1"]);
        let log = self.logs.join("kubelet.log");
        let process = Process::spawn("sim-kubelet", cmd, &log)
            .map_err(|e| BootError::Io(format!("start sim-kubelet: {e}")))?;
        tracing::info!(pid = process.pid(), "kubelet port-forward endpoint started");
        self.running.insert(KUBELET_API.to_owned(), process);
        Ok(())
    }

    /// The running process of `component`, handed over to the caller.
    pub fn take(&mut self, component: &str) -> Option<Process> {
        self.running.remove(component)
    }

    pub fn process_mut(&mut self, component: &str) -> Option<&mut Process> {
        self.running.get_mut(component)
    }

    /// Posts the mirror pods of every manifest kubeadm wrote, marked running and ready.
    pub async fn register_mirror_pods(
        &self,
        client: &kube::Client,
        node: &str,
    ) -> Result<(), BootError> {
        let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
        for component in COMPONENTS {
            if !self.written(component) {
                continue;
            }
            let mirror = mirror_pod(self.manifest(component)?, node);
            let name = mirror.metadata.name.clone().unwrap_or_default();
            match pods.create(&PostParams::default(), &mirror).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(BootError::Workload(format!("mirror pod {name}: {e}"))),
            }
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let status = json!({ "status": {
                "phase": "Running",
                "conditions": [{ "type": "Ready", "status": "True", "lastTransitionTime": now }],
            } });
            pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .map_err(|e| BootError::Workload(format!("mirror pod {name} status: {e}")))?;
        }
        Ok(())
    }
}

/// What a container runs: its arguments after the program (paths mapped) and its environment.
#[derive(Debug, PartialEq)]
pub struct ContainerCommand {
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

fn the_container(pod: &Pod) -> Result<&Container, BootError> {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .ok_or_else(|| BootError::Io("static pod manifest without a container".into()))
}

/// The container's command and arguments, each absolute path in a flag value moved to where its volume
/// mount's host path is under `rootfs`.
pub fn container_command(pod: &Pod, rootfs: &Path) -> Result<ContainerCommand, BootError> {
    let container = the_container(pod)?;
    let mut argv: Vec<String> = container.command.clone().unwrap_or_default();
    argv.extend(container.args.clone().unwrap_or_default());
    if argv.is_empty() {
        return Err(BootError::Io(format!(
            "static pod container {} has no command",
            container.name
        )));
    }
    let program = argv.remove(0);
    let mounts = host_mounts(pod, container);
    let map_value = |value: &str| -> String {
        value
            .split(',')
            .map(|part| match host_path(&mounts, part) {
                Some(host) => under(rootfs, &host).display().to_string(),
                None => part.to_owned(),
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    let args = argv
        .iter()
        .map(|arg| match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => format!("{flag}={}", map_value(value)),
            _ => arg.clone(),
        })
        .collect();
    let env = container
        .env
        .iter()
        .flatten()
        .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
        .collect();
    Ok(ContainerCommand { program, args, env })
}

/// (mount path, host path) of every hostPath volume the container mounts, longest mount path first.
fn host_mounts(pod: &Pod, container: &Container) -> Vec<(String, String)> {
    let volumes: BTreeMap<&str, &str> = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| Some((v.name.as_str(), v.host_path.as_ref()?.path.as_str())))
        .collect();
    let mut mounts: Vec<(String, String)> = container
        .volume_mounts
        .iter()
        .flatten()
        .filter_map(|m| {
            let host = volumes.get(m.name.as_str())?;
            Some((m.mount_path.clone(), (*host).to_owned()))
        })
        .collect();
    mounts.sort_by_key(|(mount, _)| std::cmp::Reverse(mount.len()));
    mounts
}

/// The host path of `path` as the container sees it, when a mount covers it.
fn host_path(mounts: &[(String, String)], path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    mounts.iter().find_map(|(mount, host)| {
        let rest = path.strip_prefix(mount.trim_end_matches('/'))?;
        (rest.is_empty() || rest.starts_with('/')).then(|| format!("{host}{rest}"))
    })
}

/// The host folders of `DirectoryOrCreate` volumes, which the kubelet creates.
fn directories_to_create(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.host_path.as_ref())
        .filter(|h| h.type_.as_deref() == Some("DirectoryOrCreate"))
        .map(|h| h.path.clone())
        .collect()
}

fn under(rootfs: &Path, host: &str) -> PathBuf {
    rootfs.join(host.trim_start_matches('/'))
}

/// The mirror pod the kubelet posts for a static pod: the manifest, named after it and the node, bound
/// to the node, with the kubelet's own annotations next to the manifest's.
pub fn mirror_pod(mut pod: Pod, node: &str) -> Pod {
    let component = pod.metadata.name.clone().unwrap_or_default();
    pod.metadata.name = Some(format!("{component}-{node}"));
    pod.metadata.namespace = Some("kube-system".into());
    let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for (key, value) in [
        ("kubernetes.io/config.mirror", format!("{component}-{node}")),
        ("kubernetes.io/config.source", "file".to_owned()),
        (
            "kubernetes.io/config.seen",
            k8s_openapi::jiff::Timestamp::now().to_string(),
        ),
    ] {
        annotations.insert(key.to_owned(), value);
    }
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node.to_owned());
    }
    pod.status = None;
    pod
}

#[cfg(test)]
mod tests {
    use super::*;

    const ETCD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  annotations:
    kubeadm.kubernetes.io/etcd.advertise-client-urls: https://198.18.0.2:2379
    example.com/from-a-patch: "yes"
  labels:
    component: etcd
    tier: control-plane
  name: etcd
  namespace: kube-system
spec:
  containers:
  - command:
    - etcd
    - --advertise-client-urls=https://198.18.0.2:2379
    - --cert-file=/etc/kubernetes/pki/etcd/server.crt
    - --data-dir=/var/lib/etcddisk/etcd
    - --listen-client-urls=https://127.0.0.1:2379,https://198.18.0.2:2379
    - --trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt
    - --client-cert-auth=true
    env:
    - name: ETCD_UNSUPPORTED_ARCH
      value: arm64
    image: registry.k8s.io/etcd:3.6.4-0
    name: etcd
    volumeMounts:
    - mountPath: /var/lib/etcddisk/etcd
      name: etcd-data
    - mountPath: /etc/kubernetes/pki/etcd
      name: etcd-certs
  hostNetwork: true
  volumes:
  - hostPath:
      path: /etc/kubernetes/pki/etcd
      type: DirectoryOrCreate
    name: etcd-certs
  - hostPath:
      path: /srv/etcd
      type: DirectoryOrCreate
    name: etcd-data
"#;

    #[test]
    fn paths_move_to_their_host_path_under_the_node_root_and_urls_stay() {
        let pod: Pod = serde_saphyr::from_str(ETCD).unwrap();
        let command = container_command(&pod, Path::new("/nodes/cp-0/rootfs")).unwrap();
        assert_eq!(command.program, "etcd");
        assert_eq!(
            command.args,
            [
                "--advertise-client-urls=https://198.18.0.2:2379",
                "--cert-file=/nodes/cp-0/rootfs/etc/kubernetes/pki/etcd/server.crt",
                // Mounted from another host folder than the path the container sees.
                "--data-dir=/nodes/cp-0/rootfs/srv/etcd",
                "--listen-client-urls=https://127.0.0.1:2379,https://198.18.0.2:2379",
                "--trusted-ca-file=/nodes/cp-0/rootfs/etc/kubernetes/pki/etcd/ca.crt",
                "--client-cert-auth=true",
            ]
        );
        assert_eq!(
            command.env,
            [("ETCD_UNSUPPORTED_ARCH".to_owned(), "arm64".to_owned())]
        );
        assert_eq!(
            directories_to_create(&pod),
            ["/etc/kubernetes/pki/etcd", "/srv/etcd"]
        );
    }

    #[test]
    fn a_path_no_mount_covers_is_the_containers_own() {
        let mounts = vec![(
            "/etc/kubernetes/pki".to_owned(),
            "/etc/kubernetes/pki".to_owned(),
        )];
        assert_eq!(host_path(&mounts, "/etc/kubernetes/pkix/a"), None);
        assert_eq!(host_path(&mounts, "/usr/local/bin/etcd"), None);
        assert_eq!(
            host_path(&mounts, "/etc/kubernetes/pki"),
            Some("/etc/kubernetes/pki".to_owned())
        );
    }

    #[test]
    fn mirror_pods_keep_the_manifests_annotations_and_are_bound_to_the_node() {
        let pod: Pod = serde_saphyr::from_str(ETCD).unwrap();
        let mirror = mirror_pod(pod, "cp-0");
        assert_eq!(mirror.metadata.name.as_deref(), Some("etcd-cp-0"));
        let annotations = mirror.metadata.annotations.unwrap();
        assert_eq!(annotations["example.com/from-a-patch"], "yes");
        assert_eq!(
            annotations["kubeadm.kubernetes.io/etcd.advertise-client-urls"],
            "https://198.18.0.2:2379"
        );
        assert_eq!(annotations["kubernetes.io/config.source"], "file");
        assert_eq!(mirror.spec.unwrap().node_name.as_deref(), Some("cp-0"));
    }
}
