//! Real machines: a node is `systemd-nspawn -b`, systemd booting over a copy-on-write view (overlayfs) of
//! this machine's root inside the node's network namespace ([`crate::netns`]), and real cloud-init runs
//! the user-data it is handed **verbatim** from a NoCloud seed, with meta-data (instance id, hostname)
//! from the machine, as a cloud hands bootstrap data to a new VM. The node is bootstrapped when
//! `/run/cluster-api/bootstrap-success.complete` exists (Cluster API's sentinel, which our bootstrap
//! data writes last); it failed when cloud-init finished without it, and cloud-init's own result names
//! what failed.
//!
//! What the recipe needs on a machine of this kind (cgroup v1, no systemd as PID 1, root without
//! `CAP_SYS_RESOURCE`): `--register=no --keep-unit` (no host systemd to register with),
//! `SYSTEMD_NSPAWN_API_VFS_WRITABLE=1` (the kubelet writes `/proc/sys`), every capability, `/dev/kmsg`
//! and the keyring and bpf system calls (containerd and runc). This machine's own enabled services (its
//! etcd, databases, timers, gettys) are disabled in the node's view: a node image runs cloud-init and
//! containerd, not what the machine it was copied from happens to run.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use testenv::process::Process;

use crate::netns::NodeNetns;

/// Cluster API's bootstrap sentinel, written by the last command of the bootstrap data.
pub const SENTINEL: &str = "/run/cluster-api/bootstrap-success.complete";

/// Units this machine enables that a node keeps: the container runtime. cloud-init's units (enabled
/// through `cloud-init.target.wants`) are kept as a whole.
const KEPT_UNITS: [&str; 2] = ["containerd.service", "remote-fs.target"];

/// How long a node gets to shut down after SIGTERM before it is killed with everything in it.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("{what} is needed for real nodes and missing: {hint}")]
    Missing { what: String, hint: String },
    #[error("node {node}: {what}: {detail}")]
    Failed {
        node: String,
        what: String,
        detail: String,
    },
}

/// What a Kubernetes node has installed besides its OS, as a node image would: kubeadm and the kubelet on
/// its PATH, the kubelet as a systemd service with kubeadm's drop-in, containerd configured for the
/// kubelet (cgroupfs driver, the pause image kubeadm names, Debian's CNI plugins) and the container images
/// of the release imported into containerd before the kubelet starts. No registry is reached: every image
/// kubeadm lists is there.
#[derive(Clone, Debug)]
pub struct NodeComponents {
    pub kubeadm: PathBuf,
    pub kubelet: PathBuf,
    /// OCI image layout tarballs ([`testenv::images`]).
    pub images: Vec<PathBuf>,
    /// The pause image's reference, as kubeadm names it: containerd's sandbox image.
    pub sandbox_image: String,
}

impl NodeComponents {
    /// The current release testenv builds (`hack/install-testenv.sh nodes`).
    pub fn current() -> Result<Self, testenv::Error> {
        Self::of_release(&testenv::binaries::ToolModule::KubernetesNode.version())
    }

    /// Kubernetes `version`, one of the releases built here to the patch
    /// ([`testenv::binaries::kubernetes_releases`]; the others' node components come from
    /// `hack/install-testenv.sh nodes node-releases`): its kubeadm and kubelet, and its images.
    pub fn of_release(version: &str) -> Result<Self, testenv::Error> {
        let releases = testenv::binaries::kubernetes_releases();
        if !releases
            .iter()
            .any(|r| r.trim_start_matches('v') == version.trim_start_matches('v'))
        {
            return Err(testenv::Error::MissingBinary {
                name: format!("Kubernetes {version} for real nodes"),
                hint: format!(
                    "real nodes carry the releases built here: {}",
                    releases.join(", ")
                ),
            });
        }
        let images = testenv::images::node_images(version)?;
        let sandbox_image = images
            .iter()
            .find(|i| i.component() == "pause")
            .map(|i| i.reference.clone())
            .ok_or_else(|| testenv::Error::MissingBinary {
                name: "the pause image".into(),
                hint: "kubeadm config images list names none".into(),
            })?;
        Ok(Self {
            kubeadm: testenv::binaries::kubernetes_binary("kubeadm", version)?,
            kubelet: testenv::binaries::node_component_of("kubelet", version)?,
            images: testenv::images::tarballs(&images)?,
            sandbox_image,
        })
    }
}

/// What a node boots with.
pub struct NodeSpec<'a> {
    /// Its hostname (cloud-init's `local-hostname`) and the container's name.
    pub name: &'a str,
    /// cloud-init's `instance-id`: a new one is a new instance, whose modules run again.
    pub instance_id: &'a str,
    /// Where the node keeps its root's upper layer, the merged view and the console log.
    pub dir: &'a Path,
    pub netns: &'a NodeNetns,
    /// The user-data, as the bootstrap data Secret's `value` holds it.
    pub user_data: &'a str,
    /// Set for a Kubernetes node; `None` boots the OS and cloud-init only.
    pub kubernetes: Option<&'a NodeComponents>,
    /// The node's pod network (a /24 of the cluster's pod subnet), which Debian's bridge and host-local CNI
    /// plugins hand out: the pod network of a Kubernetes node. Other nodes reach it through
    /// [`route_pods`].
    pub pod_subnet: Option<&'a str>,
}

/// Where a node's bootstrap stands, as a cloud console shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bootstrap {
    /// cloud-init has not finished yet.
    Running,
    /// The sentinel exists.
    Succeeded,
    /// cloud-init finished without the sentinel, or the node stopped: what cloud-init reported.
    Failed(String),
}

/// A running node. Dropping it stops it (SIGTERM to `systemd-nspawn`, which shuts systemd down; after
/// [`SHUTDOWN_GRACE`], or when systemd-nspawn ended without it, every process left in the node's cgroups
/// is killed: the node's systemd outlives a killed systemd-nspawn, adopted by this machine's init) and
/// unmounts its root.
pub struct NspawnNode {
    name: String,
    dir: PathBuf,
    root: PathBuf,
    nspawn: Option<Process>,
    cgroups: Option<NodeCgroups>,
    /// Whether it counts among the running nodes (see [`MACHINE_SYSCTLS`]).
    counted: bool,
}

impl NspawnNode {
    /// Prepares the node's root and boots it; returns once `systemd-nspawn` runs (cloud-init goes on).
    pub fn boot(spec: &NodeSpec) -> Result<Self, NodeError> {
        which("systemd-nspawn", "Debian's systemd-container")?;
        which("cloud-init", "Debian's cloud-init")?;
        for dir in ["upper", "work", "root"] {
            std::fs::create_dir_all(spec.dir.join(dir))
                .map_err(|e| failed(spec, "create its folders", e.to_string()))?;
        }
        // From here on, dropping the value unmounts the root.
        let mut node = Self {
            name: spec.name.to_owned(),
            dir: spec.dir.to_owned(),
            root: spec.dir.join("root"),
            nspawn: None,
            cgroups: None,
            counted: false,
        };
        node.mount_root(spec)?;
        node.prepare_root(spec)
            .map_err(|e| failed(spec, "prepare its root", e.to_string()))?;
        if let Some(components) = spec.kubernetes {
            node.install_kubernetes(spec, components).map_err(|e| {
                failed(
                    spec,
                    "install kubeadm, the kubelet and containerd's setup",
                    e.to_string(),
                )
            })?;
        }
        node.launch(spec)?;
        Ok(node)
    }

    /// Reboots the node, as `reboot` on a VM: its systemd shuts down as [`NspawnNode::stop`] asks, then
    /// the same disk boots again (its root's upper layer, containerd's store) in the same network
    /// namespace with the same instance id, so cloud-init runs only its per-boot modules and the kubelet
    /// and containerd start from what the node kept. `spec` is the one it first booted with.
    pub fn reboot(&mut self, spec: &NodeSpec) -> Result<(), NodeError> {
        self.stop();
        self.mount_root(spec)?;
        self.launch(spec)?;
        tracing::info!(node = spec.name, "node rebooted");
        Ok(())
    }

    /// Mounts the node's root: an overlay of this machine's `/` with the node's upper layer.
    fn mount_root(&mut self, spec: &NodeSpec) -> Result<(), NodeError> {
        let options = format!(
            "lowerdir=/,upperdir={},workdir={}",
            spec.dir.join("upper").display(),
            spec.dir.join("work").display()
        );
        run(Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &options])
            .arg(&self.root))
        .map_err(|e| failed(spec, "mount its root", e))?;
        Orphans::record(spec.name, &self.root);
        Ok(())
    }

    /// Starts `systemd-nspawn` on the mounted root, in the node's network namespace and cgroups of its own.
    fn launch(&mut self, spec: &NodeSpec) -> Result<(), NodeError> {
        let nspawn = which("systemd-nspawn", "Debian's systemd-container")?;
        // Forwarding is the node's own (per network namespace), as on a VM; bridged traffic already goes
        // through the packet filter in every namespace here.
        run(spec
            .netns
            .command(Path::new("sysctl"))
            .args(["-q", "-w", "net.ipv4.ip_forward=1"]))
        .map_err(|e| failed(spec, "enable forwarding in its network namespace", e))?;
        let cgroups = NodeCgroups::create(spec.name)
            .map_err(|e| failed(spec, "create its cgroups", e.to_string()))?;
        let mut command = Command::new(nspawn);
        command
            .env("SYSTEMD_NSPAWN_API_VFS_WRITABLE", "1")
            .arg("--boot")
            .arg("--directory")
            .arg(&self.root)
            .arg(format!("--machine={}", spec.name))
            .arg(format!(
                "--network-namespace-path={}",
                spec.netns.path().display()
            ))
            .args([
                "--register=no",
                "--keep-unit",
                "--capability=all",
                "--bind=/dev/kmsg",
                "--system-call-filter=@keyring bpf",
                "--console=passive",
                // The node's own, written into its root: not this machine's resolver.
                "--resolv-conf=off",
            ]);
        if let Some(components) = spec.kubernetes {
            let containerd = spec.dir.join("containerd");
            std::fs::create_dir_all(&containerd)
                .map_err(|e| failed(spec, "create containerd's store", e.to_string()))?;
            // overlayfs cannot hold containerd's overlay snapshots: a plain folder of this machine.
            command.arg(format!(
                "--bind={}:/var/lib/containerd",
                containerd.display()
            ));
            command.arg(format!(
                "--bind-ro={}:/usr/bin/kubeadm",
                components.kubeadm.display()
            ));
            command.arg(format!(
                "--bind-ro={}:/usr/bin/kubelet",
                components.kubelet.display()
            ));
            for image in &components.images {
                let name = image.file_name().unwrap_or_default().to_string_lossy();
                command.arg(format!("--bind-ro={}:{IMAGES}/{name}", image.display()));
            }
        }
        cgroups.enter_on_exec(&mut command);
        self.cgroups = Some(cgroups);
        node_started();
        self.counted = true;
        if spec.kubernetes.is_some() {
            let max = kube_proxy_conntrack_max().to_string();
            write_sysctls(&[(CONNTRACK_MAX.to_owned(), max)]);
            raise_inotify_limits();
        }
        let log = spec.dir.join("console.log");
        self.nspawn = Some(
            Process::spawn(&format!("node {}", spec.name), command, &log)
                .map_err(|e| failed(spec, "start systemd-nspawn", e.to_string()))?,
        );
        tracing::info!(node = spec.name, ip = %spec.netns.ip(), "node booting (systemd-nspawn)");
        Ok(())
    }

    /// The node's view of this machine's root, made a fresh instance: its own hostname and machine id,
    /// no cloud-init state, the NoCloud seed, only the units a node runs.
    fn prepare_root(&self, spec: &NodeSpec) -> std::io::Result<()> {
        let at = |path: &str| self.root.join(path.trim_start_matches('/'));
        std::fs::write(at("/etc/hostname"), format!("{}\n", spec.name))?;
        // Empty: systemd makes a new one at boot, as on a first boot.
        std::fs::write(at("/etc/machine-id"), "")?;
        let wants = at("/etc/systemd/system");
        for entry in std::fs::read_dir(&wants)?.flatten() {
            let folder = entry.file_name().to_string_lossy().into_owned();
            if !folder.ends_with(".wants") || folder == "cloud-init.target.wants" {
                continue;
            }
            for unit in std::fs::read_dir(entry.path())?.flatten() {
                let name = unit.file_name().to_string_lossy().into_owned();
                if !KEPT_UNITS.contains(&name.as_str()) {
                    std::fs::remove_file(unit.path())?;
                }
            }
        }
        let cloud = at("/var/lib/cloud");
        if cloud.exists() {
            std::fs::remove_dir_all(&cloud)?;
        }
        let seed = cloud.join("seed/nocloud");
        std::fs::create_dir_all(&seed)?;
        std::fs::write(seed.join("user-data"), spec.user_data)?;
        std::fs::write(
            seed.join("meta-data"),
            format!(
                "instance-id: {}\nlocal-hostname: {}\n",
                spec.instance_id, spec.name
            ),
        )?;
        std::fs::write(
            at("/etc/cloud/cloud.cfg.d/99-node-datasource.cfg"),
            "# The machine's user-data and meta-data are its NoCloud seed.\ndatasource_list: [ NoCloud ]\n",
        )?;
        // No resolver is reachable; the gateway answers nothing on port 53, so lookups fail at once
        // (CoreDNS forwards to what the node uses, and must not find itself there).
        let resolv = at("/etc/resolv.conf");
        if resolv.is_symlink() || resolv.exists() {
            std::fs::remove_file(&resolv)?;
        }
        let gateway = spec.netns.gateway();
        std::fs::write(resolv, format!("nameserver {gateway}\n"))?;
        // systemd-sysctl would write this machine's kernel-wide settings (kernel.*, fs.*) from the
        // node's sysctl.d: a node's settings are its network namespace's, set before it boots.
        symlink(
            "/dev/null",
            &at("/etc/systemd/system/systemd-sysctl.service"),
        )
    }

    /// A node image's Kubernetes parts: the kubelet unit with kubeadm's drop-in (what the kubelet and
    /// kubeadm packages install), containerd's CRI configuration, the image import before the kubelet,
    /// and cgroups the node may write.
    fn install_kubernetes(
        &self,
        spec: &NodeSpec,
        components: &NodeComponents,
    ) -> std::io::Result<()> {
        let at = |path: &str| self.root.join(path.trim_start_matches('/'));
        let units = at("/etc/systemd/system");
        std::fs::create_dir_all(units.join("kubelet.service.d"))?;
        std::fs::create_dir_all(units.join("multi-user.target.wants"))?;
        for (name, text) in [
            ("kubelet.service", KUBELET_UNIT.to_owned()),
            (
                "kubelet.service.d/10-kubeadm.conf",
                KUBELET_DROP_IN.to_owned(),
            ),
            (
                "node-images.service",
                NODE_IMAGES_UNIT.replace("{IMAGES}", IMAGES),
            ),
            ("cgroups-writable.service", CGROUPS_WRITABLE_UNIT.to_owned()),
        ] {
            std::fs::write(units.join(name), text)?;
        }
        for unit in [
            "kubelet.service",
            "node-images.service",
            "cgroups-writable.service",
        ] {
            symlink(
                &format!("/etc/systemd/system/{unit}"),
                &units.join("multi-user.target.wants").join(unit),
            )?;
        }
        if let Some(subnet) = spec.pod_subnet {
            std::fs::create_dir_all(at("/etc/cni/net.d"))?;
            std::fs::write(
                at("/etc/cni/net.d/10-pods.conflist"),
                CNI_CONFIG.replace("{SUBNET}", subnet),
            )?;
        }
        std::fs::create_dir_all(at("/etc/containerd"))?;
        std::fs::write(
            at("/etc/containerd/config.toml"),
            CONTAINERD_CONFIG.replace("{SANDBOX}", &components.sandbox_image),
        )
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// PID of `systemd-nspawn`.
    pub fn pid(&self) -> Option<u32> {
        self.nspawn.as_ref().map(Process::pid)
    }

    /// PID (in this machine's namespace) of the node's systemd, once it runs.
    pub fn init_pid(&self) -> Option<u32> {
        let pid = self.pid()?;
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    /// `path` as the node sees it (its mounts included: `/run` is the node's own tmpfs).
    fn in_node(&self, path: &str) -> Option<PathBuf> {
        let init = self.init_pid()?;
        Some(PathBuf::from(format!("/proc/{init}/root")).join(path.trim_start_matches('/')))
    }

    /// Reads a file as the node sees it.
    pub fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.in_node(path)?).ok()
    }

    /// Runs `args` in the node (every namespace of its systemd).
    pub fn exec(&self, args: &[&str]) -> Result<Output, NodeError> {
        let failed = |detail: String| NodeError::Failed {
            node: self.name.clone(),
            what: format!("run {}", args.join(" ")),
            detail,
        };
        let init = self
            .init_pid()
            .ok_or_else(|| failed("the node is not running".into()))?;
        exec_in(init, args).map_err(|e| failed(e.to_string()))
    }

    /// Where the bootstrap stands: the sentinel, else cloud-init's result once it finished (or the node
    /// stopped).
    pub fn bootstrap(&mut self) -> Bootstrap {
        if let Some(nspawn) = self.nspawn.as_mut()
            && let Some(status) = nspawn.try_exit_status()
        {
            return Bootstrap::Failed(format!(
                "the node stopped ({status}); console:\n{}",
                nspawn.log_tail(20)
            ));
        }
        if self.in_node(SENTINEL).is_some_and(|p| p.exists()) {
            return Bootstrap::Succeeded;
        }
        match self.cloud_init_errors() {
            Some(errors) if errors.is_empty() => Bootstrap::Failed(format!(
                "cloud-init finished without {SENTINEL} and reported no error"
            )),
            Some(errors) => Bootstrap::Failed(format!(
                "cloud-init finished without {SENTINEL}: {}",
                errors.join("; ")
            )),
            None => Bootstrap::Running,
        }
    }

    /// The errors cloud-init reported once it finished all its stages (`/run/cloud-init/result.json`),
    /// each naming the module that failed; `None` while it runs.
    pub fn cloud_init_errors(&self) -> Option<Vec<String>> {
        let result: serde_json::Value =
            serde_json::from_str(&self.read("/run/cloud-init/result.json")?).ok()?;
        Some(
            result["v1"]["errors"]
                .as_array()
                .map(|errors| {
                    errors
                        .iter()
                        .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
        )
    }

    /// Waits until the bootstrap succeeded or failed, at most `limit`.
    pub fn wait_bootstrap(&mut self, limit: Duration) -> Bootstrap {
        let deadline = Instant::now() + limit;
        loop {
            let state = self.bootstrap();
            if state != Bootstrap::Running || Instant::now() > deadline {
                return state;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The tail of the node's console (systemd's and cloud-init's output).
    pub fn console_tail(&self, lines: usize) -> String {
        testenv::process::log_tail(&self.dir.join("console.log"), lines)
    }

    /// Powers the node off as a hypervisor does: every process in it ends at once, nothing shuts down;
    /// then its root is unmounted and its cgroups removed, as [`NspawnNode::stop`] does.
    pub fn power_off(&mut self) {
        if let Some(cgroups) = &self.cgroups {
            cgroups.kill_all(&self.name);
        }
        if let Some(mut nspawn) = self.nspawn.take() {
            nspawn.kill();
        }
        self.stop();
    }

    /// Deletes what the node wrote, as a cloud deletes a VM's disk with the VM: its root's upper layer and
    /// containerd's store (about a gigabyte per node); the console log stays. Stops it first.
    pub fn delete_disk(&mut self) {
        self.stop();
        for dir in ["upper", "work", "containerd", "root"] {
            let path = self.dir.join(dir);
            // Never through a root still mounted: that would be this machine's own files.
            if dir == "root" && mounted(&path) {
                tracing::warn!(node = %self.name, "root still mounted; its folder stays");
                continue;
            }
            match std::fs::remove_dir_all(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    tracing::warn!(node = %self.name, path = %path.display(), error = %e, "could not delete");
                }
                _ => {}
            }
        }
    }

    /// Stops the node and unmounts its root; its folder stays (the upper layer: what the node wrote).
    pub fn stop(&mut self) {
        if let Some(mut nspawn) = self.nspawn.take() {
            // SIGTERM makes systemd-nspawn shut the node's systemd down.
            if nspawn.terminate(SHUTDOWN_GRACE).is_none() {
                tracing::warn!(node = %self.name, "node did not shut down; killing it");
            }
            nspawn.kill();
        }
        if let Some(cgroups) = self.cgroups.take() {
            cgroups.kill_all(&self.name);
            cgroups.remove(&self.name);
        }
        if std::mem::take(&mut self.counted) {
            node_stopped();
        }
        if mounted(&self.root)
            && let Err(e) = run(Command::new("umount").arg(&self.root))
        {
            tracing::warn!(node = %self.name, error = %e, "root still busy; detaching it");
            let _ = run(Command::new("umount").arg("--lazy").arg(&self.root));
        }
        Orphans::forget(&self.name);
    }

    /// What the node uses of this machine's memory; `None` once stopped or without a memory cgroup.
    pub fn memory(&self) -> Option<NodeMemory> {
        self.cgroups.as_ref()?.memory()
    }

    /// The node's root folder (the merged view; mounted while the node exists).
    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for NspawnNode {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A node's step that failed, naming the node.
fn failed(spec: &NodeSpec, what: &str, detail: String) -> NodeError {
    NodeError::Failed {
        node: spec.name.to_owned(),
        what: what.to_owned(),
        detail,
    }
}

/// Runs `args` in every namespace of the process `init` (a node's systemd, [`NspawnNode::init_pid`]).
pub fn exec_in(init: u32, args: &[&str]) -> std::io::Result<Output> {
    Command::new("nsenter")
        .args(["--target", &init.to_string(), "--all", "--"])
        .args(args)
        .output()
}

/// Where a node finds its image tarballs.
const IMAGES: &str = "/opt/node-images";

/// The kubelet's unit, as the kubelet package installs it: restarted until kubeadm has configured it.
const KUBELET_UNIT: &str = "[Unit]
Description=kubelet: The Kubernetes Node Agent
Wants=network-online.target containerd.service node-images.service
After=network-online.target containerd.service node-images.service

StartLimitIntervalSec=0

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
RestartSec=2

[Install]
WantedBy=multi-user.target
";

/// kubeadm's drop-in, as the kubeadm package installs it: the flags kubeadm writes.
const KUBELET_DROP_IN: &str = "[Service]
Environment=\"KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf\"
Environment=\"KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml\"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
";

/// The release's images into containerd's k8s.io namespace (the kubelet's), before the kubelet starts.
const NODE_IMAGES_UNIT: &str = "[Unit]
Description=Import the node's container images
After=containerd.service
Requires=containerd.service
Before=kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'for image in {IMAGES}/*.tar; do ctr --namespace k8s.io images import \"$image\" || exit 1; done'

[Install]
WantedBy=multi-user.target
";

/// systemd-nspawn mounts the cgroup v1 controllers read-only (bind mounts: a plain remount is refused as
/// busy); containerd and the kubelet create cgroups in them (the node's own subtree: it runs in a cgroup
/// namespace rooted there).
const CGROUPS_WRITABLE_UNIT: &str = "[Unit]
Description=Make the node's cgroups writable for containerd and the kubelet
DefaultDependencies=no
Before=containerd.service kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'mount -o remount,rw /sys/fs/cgroup || exit 1; for c in /sys/fs/cgroup/*/; do mount -o remount,bind,rw \"$c\" || exit 1; done'

[Install]
WantedBy=multi-user.target
";

/// containerd's CRI setup for the kubelet: cgroupfs (containerd 1.6 cannot tell the kubelet its driver,
/// and the node's systemd does not own the v1 hierarchies), OOM scores it may not lower (root here lacks
/// CAP_SYS_RESOURCE), kubeadm's pause image, Debian's CNI plugins.
const CONTAINERD_CONFIG: &str = "version = 2

[plugins.\"io.containerd.grpc.v1.cri\"]
  sandbox_image = \"{SANDBOX}\"
  restrict_oom_score_adj = true
  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]
    runtime_type = \"io.containerd.runc.v2\"
    [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]
      SystemdCgroup = false
  [plugins.\"io.containerd.grpc.v1.cri\".cni]
    bin_dir = \"/usr/lib/cni\"
    conf_dir = \"/etc/cni/net.d\"
";

/// The node's pod network: a bridge with the node as gateway, addresses of the node's subnet, traffic
/// leaving the pod network masqueraded, and host ports.
const CNI_CONFIG: &str = r#"{
  "cniVersion": "0.4.0",
  "name": "pods",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "{SUBNET}" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
"#;

/// Routes `subnet` (another node's pod network) through `via` (that node's address) in `netns`: the
/// static routes between nodes of one fabric that a cloud's network would hold.
pub fn route_pods(netns: &NodeNetns, subnet: &str, via: std::net::Ipv4Addr) -> Result<(), String> {
    run(netns
        .command(Path::new("ip"))
        .args(["route", "replace", subnet, "via", &via.to_string()]))
}

/// The cgroup v1 hierarchies a node gets a subtree of: it starts in them, and its systemd, containerd
/// and kubelet create their cgroups below (`kubepods` included), not beside those of this machine or
/// of other nodes.
const CGROUP_HIERARCHIES: [&str; 10] = [
    "blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "memory", "pids", "systemd",
    "unified",
];

/// Settings of this machine's kernel, not of a namespace, that a node's kubelet rewrites when it starts,
/// and those the nodes need set here (kube-proxy's conntrack limit, inotify's limits): recorded before
/// the first node boots, written back when the last one stops ([`SysctlRecord`]).
const MACHINE_SYSCTLS: [&str; 6] = [
    "vm/overcommit_memory",
    "kernel/panic",
    "kernel/panic_on_oops",
    CONNTRACK_MAX,
    INOTIFY_LIMITS[0].0,
    INOTIFY_LIMITS[1].0,
];

/// inotify's limits per user, and what nodes need at least. On a VM they are the node's own; here every
/// node's systemd, journald, containerd and kubelet count against this machine's root user, and
/// containerd's CRI plugin fails to load at all ("failed to create fsnotify watcher: too many open
/// files") once the 128 instances of Debian's default are used up: a few Kubernetes nodes next to the
/// rest of a test run did. Raised, never lowered, while nodes run; restored with the other settings.
const INOTIFY_LIMITS: [(&str, u64); 2] = [
    ("fs/inotify/max_user_instances", 8192),
    ("fs/inotify/max_user_watches", 524_288),
];

fn raise_inotify_limits() {
    let raised: Vec<(String, String)> = INOTIFY_LIMITS
        .iter()
        .filter_map(|(key, least)| {
            let now: u64 = sysctl(key).parse().ok()?;
            (now < *least).then(|| ((*key).to_owned(), least.to_string()))
        })
        .collect();
    write_sysctls(&raised);
}

const CONNTRACK_MAX: &str = "net/netfilter/nf_conntrack_max";

/// The current values of the kernel settings nodes change ([`MACHINE_SYSCTLS`]).
pub fn machine_sysctls() -> Vec<String> {
    MACHINE_SYSCTLS.iter().map(|key| sysctl(key)).collect()
}

/// A kernel setting's current value (`key` below `/proc/sys`), empty when it cannot be read.
fn sysctl(key: &str) -> String {
    std::fs::read_to_string(Path::new("/proc/sys").join(key))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The machine's own values of [`MACHINE_SYSCTLS`], what it goes back to once no node runs: those
/// recorded before the first node of the processes that run nodes now, else the current ones.
pub fn machine_sysctls_without_nodes() -> Vec<String> {
    let mut recorded = None;
    with_sysctl_record(|record| {
        recorded = record
            .as_ref()
            .filter(|r| r.pids.iter().any(|pid| testenv::process::pid_alive(*pid)))
            .map(|r| r.originals.clone());
        record
    });
    match recorded {
        Some(originals) => MACHINE_SYSCTLS
            .iter()
            .map(|key| {
                originals
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            })
            .collect(),
        None => machine_sysctls(),
    }
}

/// Whether another live process runs nodes now (and so holds the machine's settings as nodes need them).
pub fn nodes_run_elsewhere() -> bool {
    let me = std::process::id();
    let mut elsewhere = false;
    with_sysctl_record(|record| {
        elsewhere = record.as_ref().is_some_and(|r| {
            r.pids
                .iter()
                .any(|pid| *pid != me && testenv::process::pid_alive(*pid))
        });
        record
    });
    elsewhere
}

/// The connection-tracking table size kube-proxy sets when it starts, by its defaults: 32768 entries per
/// core, at least 131072. The table is the machine's, and only the machine's first network namespace
/// may resize it: a node's kube-proxy, in the node's namespace, would fail at start where a VM's
/// succeeds. So while Kubernetes nodes run the machine's table has exactly that size (kube-proxy writes
/// it only when it differs), recorded and restored with the settings the kubelet rewrites.
fn kube_proxy_conntrack_max() -> u64 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    (32768 * cores).max(131072)
}

/// Nodes running in this process.
static RUNNING: std::sync::Mutex<usize> = std::sync::Mutex::new(0);

/// The machine's settings from before the first node of any process, and the processes that run nodes
/// now: kept in [`sysctl_record`] while nodes run. Test processes run nodes side by side; the settings
/// go back when the last of them stops its last node, or, if they all died, when the next first node
/// boots.
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct SysctlRecord {
    originals: Vec<(String, String)>,
    pids: Vec<u32>,
}

fn sysctl_record() -> PathBuf {
    testenv::binaries::cache_root().join("machine-sysctls.json")
}

/// Runs `change` on the record under an exclusive lock shared by every process; `None` removes it.
fn with_sysctl_record(change: impl FnOnce(Option<SysctlRecord>) -> Option<SysctlRecord>) {
    let root = testenv::binaries::cache_root();
    let locked = std::fs::create_dir_all(&root)
        .and_then(|()| {
            std::fs::File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(root.join("machine-sysctls.lock"))
        })
        .and_then(|file| file.lock().map(|()| file));
    let _lock = match locked {
        Ok(file) => file,
        Err(e) => {
            tracing::warn!(error = %e, "could not lock the record of the kernel settings");
            return;
        }
    };
    let record = std::fs::read_to_string(sysctl_record())
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok());
    let written = match change(record) {
        Some(record) => std::fs::write(
            sysctl_record(),
            serde_json::to_string(&record).expect("JSON"),
        ),
        None => match std::fs::remove_file(sysctl_record()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
    };
    if let Err(e) = written {
        tracing::warn!(error = %e, "could not record the kernel settings");
    }
}

/// What processes that died with nodes running left: their nodes stopped, the kernel settings they
/// recorded written back. The first node of a process does this; a test that compares the machine's
/// settings before and after its nodes does it first.
pub fn clean_up_after_dead_processes() {
    Orphans::reclaim();
    with_sysctl_record(|record| {
        let mut record = record?;
        record.pids.retain(|pid| testenv::process::pid_alive(*pid));
        if record.pids.is_empty() {
            tracing::warn!(
                "processes that ran nodes died; restoring the kernel settings they recorded"
            );
            write_sysctls(&record.originals);
            return None;
        }
        Some(record)
    });
}

fn node_started() {
    let mut running = RUNNING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if *running == 0 {
        clean_up_after_dead_processes();
        let me = std::process::id();
        with_sysctl_record(|record| {
            // Another process runs nodes: the settings from before its first are the machine's.
            let mut record = record.unwrap_or_else(|| SysctlRecord {
                originals: MACHINE_SYSCTLS
                    .iter()
                    .map(|key| ((*key).to_owned(), sysctl(key)))
                    .filter(|(_, value)| !value.is_empty())
                    .collect(),
                pids: Vec::new(),
            });
            record.pids.push(me);
            Some(record)
        });
    }
    *running += 1;
}

fn write_sysctls(values: &[(String, String)]) {
    for (key, value) in values {
        let path = Path::new("/proc/sys").join(key);
        if std::fs::read_to_string(&path).is_ok_and(|now| now.trim() != value)
            && let Err(e) = std::fs::write(&path, value)
        {
            tracing::warn!(key, value, error = %e, "could not write a kernel setting");
        }
    }
}

fn node_stopped() {
    let mut running = RUNNING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *running -= 1;
    if *running == 0 {
        let me = std::process::id();
        with_sysctl_record(|record| {
            let mut record = record?;
            record
                .pids
                .retain(|pid| *pid != me && testenv::process::pid_alive(*pid));
            if record.pids.is_empty() {
                write_sysctls(&record.originals);
                None
            } else {
                Some(record)
            }
        });
    }
}

/// The cgroup of node `name` in every hierarchy: per process too, so that nodes of the same name in two
/// processes (two test runs) are not one.
fn cgroup_name(name: &str) -> String {
    cgroup_name_of(name, std::process::id())
}

fn cgroup_name_of(name: &str, pid: u32) -> String {
    format!("node-{name}-{pid}")
}

/// Nodes of processes that died without stopping them. A process's systemd-nspawn dies with it, but the
/// node does not: its systemd, containerd, kubelet and containers go on, adopted by this machine's init,
/// in cgroups named after the dead process, over a root still mounted. Each node's root is recorded
/// under its process's PID while it runs; the first node a process boots stops those of dead processes.
struct Orphans;

impl Orphans {
    fn dir() -> PathBuf {
        testenv::binaries::cache_root().join("nodes")
    }

    fn entry(name: &str, pid: u32) -> PathBuf {
        Self::dir().join(format!("{pid}-{name}"))
    }

    fn record(name: &str, root: &Path) {
        let written = std::fs::create_dir_all(Self::dir()).and_then(|()| {
            std::fs::write(
                Self::entry(name, std::process::id()),
                root.as_os_str().as_encoded_bytes(),
            )
        });
        if let Err(e) = written {
            tracing::warn!(node = name, error = %e, "could not record the node's root");
        }
    }

    fn forget(name: &str) {
        let _ = std::fs::remove_file(Self::entry(name, std::process::id()));
    }

    /// Stops the nodes of dead processes: their processes killed, cgroups removed, roots unmounted.
    fn reclaim() {
        for entry in std::fs::read_dir(Self::dir())
            .into_iter()
            .flatten()
            .flatten()
        {
            let file = entry.file_name().to_string_lossy().into_owned();
            let Some((pid, name)) = file
                .split_once('-')
                .and_then(|(pid, name)| Some((pid.parse::<u32>().ok()?, name.to_owned())))
            else {
                continue;
            };
            if testenv::process::pid_alive(pid) {
                continue;
            }
            tracing::warn!(node = %name, pid, "stopping a node a dead process left running");
            let cgroups = NodeCgroups::existing(&cgroup_name_of(&name, pid));
            cgroups.kill_all(&name);
            cgroups.remove(&name);
            let root = PathBuf::from(std::fs::read_to_string(entry.path()).unwrap_or_default());
            if mounted(&root) {
                let _ = run(Command::new("umount").arg("--lazy").arg(&root));
            }
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// A node's use of this machine's memory, in bytes, as its memory cgroup (v1) counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeMemory {
    /// All of it: `memory.usage_in_bytes`.
    pub total: u64,
    /// Processes' own memory (`total_rss`): what stays however much the machine is short of memory.
    pub anonymous: u64,
    /// Files read and written (`total_cache`): the images unpacked, the logs, etcd's data; reclaimable.
    pub page_cache: u64,
}

/// A node's cgroups: [`cgroup_name`] in every hierarchy.
struct NodeCgroups {
    dirs: Vec<PathBuf>,
}

impl NodeCgroups {
    /// The cgroups named `cgroup` that exist, in every hierarchy.
    fn existing(cgroup: &str) -> Self {
        let dirs = CGROUP_HIERARCHIES
            .iter()
            .map(|h| Path::new("/sys/fs/cgroup").join(h).join(cgroup))
            .filter(|d| d.is_dir())
            .collect();
        Self { dirs }
    }

    fn create(name: &str) -> std::io::Result<Self> {
        let mut dirs = Vec::new();
        for hierarchy in CGROUP_HIERARCHIES {
            let base = Path::new("/sys/fs/cgroup").join(hierarchy);
            if !base.is_dir() {
                continue;
            }
            let dir = base.join(cgroup_name(name));
            if !dir.exists() {
                std::fs::create_dir(&dir)?;
            }
            if hierarchy == "cpuset" {
                // A cpuset cgroup takes no task until it has CPUs and memory nodes: its parent's.
                for file in ["cpuset.cpus", "cpuset.mems"] {
                    std::fs::write(dir.join(file), std::fs::read_to_string(base.join(file))?)?;
                }
            }
            dirs.push(dir);
        }
        Ok(Self { dirs })
    }

    /// Moves the process `command` starts into the node's cgroups before it runs.
    fn enter_on_exec(&self, command: &mut Command) {
        use std::os::unix::process::CommandExt;
        let procs: Vec<PathBuf> = self.dirs.iter().map(|d| d.join("cgroup.procs")).collect();
        // SAFETY: only writes of this process's PID to files, between fork and exec.
        unsafe {
            command.pre_exec(move || {
                for file in &procs {
                    std::fs::write(file, b"0")?;
                }
                Ok(())
            });
        }
    }

    /// Kills every process of the node at once: frozen first (v1 freezer), so that none forks past the
    /// kill, then SIGKILL to each, then thawed so that the signals land.
    fn kill_all(&self, name: &str) {
        let freezer = self
            .dirs
            .iter()
            .find(|d| d.starts_with("/sys/fs/cgroup/freezer"));
        let state = freezer.map(|d| d.join("freezer.state"));
        if let Some(state) = &state
            && let Err(e) = std::fs::write(state, "FROZEN")
        {
            tracing::warn!(node = name, error = %e, "could not freeze the node before killing it");
        }
        let Some(dir) = freezer.or(self.dirs.first()) else {
            return;
        };
        for pid in cgroup_pids(dir) {
            testenv::process::kill_pid(pid);
        }
        if let Some(state) = &state {
            let _ = std::fs::write(state, "THAWED");
        }
        for _ in 0..100 {
            if cgroup_pids(dir).is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        tracing::warn!(node = name, "processes of a powered-off node still run");
    }

    /// What the node's processes use of this machine's memory (its memory cgroup, everything below
    /// counted): `None` without a memory hierarchy.
    fn memory(&self) -> Option<NodeMemory> {
        let dir = self
            .dirs
            .iter()
            .find(|d| d.starts_with("/sys/fs/cgroup/memory"))?;
        let stat = std::fs::read_to_string(dir.join("memory.stat")).ok()?;
        let field = |name: &str| {
            stat.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        };
        Some(NodeMemory {
            total: std::fs::read_to_string(dir.join("memory.usage_in_bytes"))
                .ok()?
                .trim()
                .parse()
                .ok()?,
            anonymous: field("total_rss")?,
            page_cache: field("total_cache")?,
        })
    }

    /// Removes the node's cgroups, the ones its systemd, containerd and kubelet made below first.
    fn remove(self, name: &str) {
        for dir in self.dirs {
            if let Err(e) = remove_cgroup(&dir) {
                tracing::warn!(node = name, dir = %dir.display(), error = %e, "cgroup left behind");
            }
        }
    }
}

/// The processes in cgroup `dir` and every cgroup below it.
fn cgroup_pids(dir: &Path) -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            pids.extend(cgroup_pids(&entry.path()));
        }
    }
    pids
}

fn remove_cgroup(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)?.flatten() {
        if entry.file_type()?.is_dir() {
            remove_cgroup(&entry.path())?;
        }
    }
    // Empty once its processes are gone; the kernel may take a moment after the last one exits.
    let mut last = None;
    for _ in 0..50 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(last.expect("tried"))
}

fn symlink(target: &str, link: &Path) -> std::io::Result<()> {
    if link.is_symlink() || link.exists() {
        std::fs::remove_file(link)?;
    }
    std::os::unix::fs::symlink(target, link)
}

/// Whether something is mounted at `path`.
pub fn mounted(path: &Path) -> bool {
    let path = path.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|line| line.split_whitespace().nth(4) == Some(path.as_str()))
}

fn run(command: &mut Command) -> Result<(), String> {
    let output = command.output().map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

fn which(name: &str, package: &str) -> Result<PathBuf, NodeError> {
    testenv::find_program(name).ok_or_else(|| NodeError::Missing {
        what: name.to_owned(),
        hint: format!("install {package} (`hack/install-testenv.sh` does)"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns::Fabric;

    /// Real cloud-init in real nodes: the user-data is run verbatim (a jinja template rendered with the
    /// meta-data the machine gave, files written, commands run in the node's network namespace); the
    /// sentinel makes it a success, its absence after cloud-init finished a failure naming what failed;
    /// only the units a node runs are enabled; nothing is left after the nodes stop.
    #[test]
    fn nodes_run_their_user_data_with_real_cloud_init_and_leave_nothing_behind() {
        let fabric = match Fabric::create() {
            Ok(fabric) => fabric,
            Err(e) => {
                testenv::missing("network namespaces", &e.to_string());
                return;
            }
        };
        let dir = tempfile::tempdir().unwrap();
        let good_netns = fabric.node().unwrap();
        let bad_netns = fabric.node().unwrap();
        let good_data = format!(
            "## template: jinja\n#cloud-config\n\
             bootcmd:\n\
             - [sh, -c, 'mkdir -p /var/lib/node-facts && echo boot >> /var/lib/node-facts/boots']\n\
             write_files:\n\
             - path: /etc/node-facts/hostname\n  content: \"{{{{ ds.meta_data.local_hostname }}}}\"\n\
             runcmd:\n\
             - [sh, -c, 'ip -4 -o addr show dev eth0 > /run/address']\n\
             - [sh, -c, 'echo ran >> /var/lib/node-facts/runcmd']\n\
             - mkdir -p /run/cluster-api\n\
             - touch {SENTINEL}\n"
        );
        // As our bootstrap data ends: the sentinel only when the last command succeeds.
        let bad_data = "#cloud-config\nruncmd:\n- touch /run/not-the-sentinel\n- [sh, -c, 'exit 3 && touch /run/cluster-api/bootstrap-success.complete']\n";
        let boot = |name: &str, netns, user_data| {
            NspawnNode::boot(&NodeSpec {
                name,
                instance_id: &format!("sim://{name}"),
                dir: &dir.path().join(name),
                netns,
                user_data,
                kubernetes: None,
                pod_subnet: None,
            })
        };
        clean_up_after_dead_processes();
        let before = machine_sysctls_without_nodes();
        let mut good = match boot("node-good", &good_netns, &good_data) {
            Ok(node) => node,
            Err(e @ NodeError::Missing { .. }) => {
                testenv::missing("systemd-nspawn or cloud-init", &e.to_string());
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let mut bad = boot("node-bad", &bad_netns, bad_data).unwrap();

        let state = good.wait_bootstrap(Duration::from_secs(120));
        assert_eq!(
            state,
            Bootstrap::Succeeded,
            "console:\n{}",
            good.console_tail(40)
        );
        assert_eq!(
            good.read("/etc/node-facts/hostname").as_deref(),
            Some("node-good")
        );
        let address = good.read("/run/address").unwrap_or_default();
        assert!(
            address.contains(&format!("inet {}/", good_netns.ip())),
            "{address}"
        );
        // The machine's own services are not the node's.
        let enabled = good
            .exec(&["ls", "/etc/systemd/system/multi-user.target.wants"])
            .unwrap();
        for unit in String::from_utf8_lossy(&enabled.stdout).split_whitespace() {
            assert!(KEPT_UNITS.contains(&unit), "the node enables {unit}");
        }

        // A reboot: the same disk and instance, so cloud-init runs its per-boot modules only.
        let first_init = good.init_pid();
        good.reboot(&NodeSpec {
            name: "node-good",
            instance_id: "sim://node-good",
            dir: &dir.path().join("node-good"),
            netns: &good_netns,
            user_data: &good_data,
            kubernetes: None,
            pod_subnet: None,
        })
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        while good.cloud_init_errors().is_none() {
            assert!(
                Instant::now() < deadline,
                "cloud-init did not finish after the reboot; console:\n{}",
                good.console_tail(40)
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        assert_ne!(
            good.init_pid(),
            first_init,
            "the node's systemd is a new one"
        );
        assert_eq!(
            good.read("/var/lib/node-facts/boots").as_deref(),
            Some("boot\nboot\n"),
            "bootcmd runs on every boot"
        );
        assert_eq!(
            good.read("/var/lib/node-facts/runcmd").as_deref(),
            Some("ran\n"),
            "runcmd runs once per instance"
        );
        assert_eq!(
            good.read("/etc/node-facts/hostname").as_deref(),
            Some("node-good")
        );
        assert!(good.read("/run/address").is_none(), "a reboot empties /run");

        match bad.wait_bootstrap(Duration::from_secs(120)) {
            Bootstrap::Failed(why) => assert!(why.contains("scripts-user"), "{why}"),
            other => panic!("{other:?}; console:\n{}", bad.console_tail(40)),
        }
        assert!(bad.read("/run/not-the-sentinel").is_some(), "runcmd ran");

        // Deleted as a cloud deletes a VM: powered off, its disk gone, its console log kept.
        let (bad_pid, bad_dir) = (bad.pid().unwrap(), bad.dir.clone());
        bad.power_off();
        bad.delete_disk();
        assert!(
            !testenv::process::pid_alive(bad_pid),
            "the deleted node runs"
        );
        for gone in ["upper", "work", "root"] {
            assert!(!bad_dir.join(gone).exists(), "{gone} of a deleted node");
        }
        assert!(bad_dir.join("console.log").exists());
        for hierarchy in CGROUP_HIERARCHIES {
            let cgroup = Path::new("/sys/fs/cgroup")
                .join(hierarchy)
                .join(cgroup_name("node-bad"));
            assert!(!cgroup.exists(), "{} left behind", cgroup.display());
        }

        stop_and_check(vec![good], &before);
        drop((good_netns, bad_netns, fabric));
    }

    /// The spec a real node's test cluster uses: what real nodes here need from kubeadm and nothing more,
    /// each with its reason. Preflight's SystemVerification fails on the cgroup v1 of this machine (a
    /// warning since kubeadm 1.31, kept for older releases). The kubelet uses the cgroupfs driver, as
    /// containerd 1.6 here does (kubeadm configures systemd's), runs on cgroup v1 (refused from 1.35 unless
    /// `failCgroupV1: false`), and evicts pods or removes unused images only when the disk is all but
    /// full: every node's file systems are this machine's one disk, whose share free (15 % is the
    /// kubelet's default threshold) says nothing about a node.
    const REAL_NODE_SPEC: &str = "
initConfiguration:
  nodeRegistration:
    ignorePreflightErrors:
    - SystemVerification
  patches:
    directory: /etc/kubernetes/patches
joinConfiguration:
  nodeRegistration:
    ignorePreflightErrors:
    - SystemVerification
  patches:
    directory: /etc/kubernetes/patches
files:
- path: /etc/kubernetes/patches/kubeletconfiguration0+strategic.yaml
  content: |
    cgroupDriver: cgroupfs
    failCgroupV1: false
    imageGCHighThresholdPercent: 100
    imageGCLowThresholdPercent: 99
    evictionHard:
      memory.available: 100Mi
      nodefs.available: 1%
      nodefs.inodesFree: 1%
      imagefs.available: 1%
";

    /// A test cluster of real nodes on one fabric: the facts its bootstrap data is rendered with.
    struct RealCluster {
        components: NodeComponents,
        version: String,
        certificates: kubeadm_cluster::ClusterCertificates,
        spec: kubeadm_api::bootstrap::v1beta2::KubeadmConfigSpec,
        dir: tempfile::TempDir,
        fabric: Fabric,
    }

    impl RealCluster {
        fn new() -> Self {
            Self {
                components: NodeComponents::current().unwrap_or_else(|e| panic!("{e}")),
                version: testenv::binaries::ToolModule::KubernetesNode.version(),
                certificates: kubeadm_cluster::certificates::generate(3650).unwrap(),
                spec: serde_saphyr::from_str(REAL_NODE_SPEC).unwrap(),
                dir: tempfile::tempdir().unwrap(),
                fabric: Fabric::create().unwrap(),
            }
        }

        /// Our bootstrap data for `machine` in `role`, as the bootstrap manager renders it.
        fn user_data(
            &self,
            role: kubeadm_bootstrap::render::Role,
            machine: &str,
            endpoint: &str,
            join: Option<&kubeadm_bootstrap::render::JoinFacts>,
        ) -> String {
            use kubeadm_bootstrap::render::{ClusterFacts, MachineFacts, RenderInput, render};
            let data = render(&RenderInput {
                role,
                spec: &self.spec,
                cluster: &ClusterFacts {
                    name: "real".into(),
                    kubernetes_version: self.version.clone(),
                    control_plane_endpoint: Some(endpoint.to_owned()),
                    service_subnet: Some("198.19.0.0/20".into()),
                    pod_subnet: Some("198.19.128.0/17".into()),
                    dns_domain: None,
                    control_plane_version: None,
                },
                machine: &MachineFacts {
                    name: machine.into(),
                    generation: None,
                },
                certificates: Some(&self.certificates),
                join,
                secrets: &Default::default(),
            })
            .unwrap();
            String::from_utf8(data).unwrap()
        }

        /// Boots `machine` with `user_data` and waits until its bootstrap succeeded, printing what the
        /// node says when it did not.
        fn boot(
            &self,
            machine: &str,
            netns: &NodeNetns,
            pod_subnet: &str,
            user_data: &str,
        ) -> NspawnNode {
            let mut node = NspawnNode::boot(&NodeSpec {
                name: machine,
                instance_id: &format!("sim://default/{machine}"),
                dir: &self.dir.path().join(machine),
                netns,
                user_data,
                kubernetes: Some(&self.components),
                pod_subnet: Some(pod_subnet),
            })
            .unwrap();
            let state = node.wait_bootstrap(Duration::from_secs(300));
            let journal = |unit: &str| {
                node.exec(&["journalctl", "--no-pager", "-n", "30", "-u", unit])
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default()
            };
            assert_eq!(
                state,
                Bootstrap::Succeeded,
                "{machine}: cloud-init output:\n{}\nkubelet:\n{}\ncontainerd:\n{}",
                node.read("/var/log/cloud-init-output.log")
                    .unwrap_or_default(),
                journal("kubelet"),
                journal("containerd")
            );
            node
        }

        /// A bootstrap token in the cluster, as our bootstrap manager creates one for a joining machine,
        /// and what the join data needs to find and trust the cluster with it.
        async fn join_facts(
            &self,
            client: &kube::Client,
            endpoint: &str,
        ) -> kubeadm_bootstrap::render::JoinFacts {
            use k8s_openapi::api::core::v1::Secret;
            let token = kubeadm_bootstrap::tokens::generate();
            let secret = kubeadm_bootstrap::tokens::token_secret(
                &token,
                Duration::from_secs(900),
                std::time::SystemTime::now(),
            );
            kube::Api::<Secret>::namespaced(client.clone(), "kube-system")
                .create(&Default::default(), &secret)
                .await
                .unwrap();
            let ca = self
                .certificates
                .get(kubeadm_cluster::certificates::CertKind::Ca);
            kubeadm_bootstrap::render::JoinFacts {
                token: format!("{}.{}", token.id, token.secret),
                api_server_endpoint: endpoint.to_owned(),
                ca_cert_hashes: kubeadm_cluster::certificates::ca_cert_hashes(&ca.cert).unwrap(),
            }
        }

        async fn admin(&self, endpoint: &str) -> kube::Client {
            let ca = self
                .certificates
                .get(kubeadm_cluster::certificates::CertKind::Ca);
            crate::node::admin_client(&format!("https://{endpoint}"), &ca.cert, &ca.key)
                .await
                .unwrap()
        }
    }

    /// Waits until the control plane's static pods of every machine run as mirror pods.
    async fn wait_control_plane_pods(client: &kube::Client, machines: &[&str]) {
        use k8s_openapi::api::core::v1::Pod;
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let pods = kube::Api::<Pod>::namespaced(client.clone(), "kube-system")
                .list(&Default::default())
                .await
                .unwrap();
            let running: Vec<String> = pods
                .items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            let all = machines.iter().all(|machine| {
                [
                    "etcd",
                    "kube-apiserver",
                    "kube-controller-manager",
                    "kube-scheduler",
                ]
                .iter()
                .all(|c| running.contains(&format!("{c}-{machine}")))
            });
            if all {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "running in kube-system: {running:?}"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Checks that `nodes` left nothing behind once dropped: no process, mount or cgroup, and the kernel
    /// settings the kubelet rewrote as they were.
    fn stop_and_check(nodes: Vec<NspawnNode>, before: &[String]) {
        let left: Vec<(u32, PathBuf, String)> = nodes
            .iter()
            .map(|n| (n.pid().unwrap(), n.root().to_owned(), n.name().to_owned()))
            .collect();
        drop(nodes);
        for (pid, root, name) in left {
            assert!(!testenv::process::pid_alive(pid), "{name} runs");
            assert!(!mounted(&root), "{name}'s root is mounted");
            for hierarchy in CGROUP_HIERARCHIES {
                let dir = Path::new("/sys/fs/cgroup")
                    .join(hierarchy)
                    .join(cgroup_name(&name));
                assert!(!dir.exists(), "{} left behind", dir.display());
            }
        }
        // Written back, unless another process's nodes hold them (its last node writes them back).
        if !nodes_run_elsewhere() {
            assert_eq!(
                machine_sysctls(),
                before,
                "the kernel settings the kubelet rewrote"
            );
        }
    }

    /// What published providers' templates add to the kubeadm config (Cluster API's own e2e templates,
    /// CAPZ's etcd disk): a user with sudo and a key, NTP servers, a file appended to one the image has and
    /// a gzip+base64 one, a command before kubeadm, and a disk to partition, format and mount that this
    /// machine does not have.
    const PROVIDER_SHAPE: &str = "
users:
- name: capi
  shell: /bin/bash
  sudo: ALL=(ALL) NOPASSWD:ALL
  sshAuthorizedKeys:
  - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHkLk3sFZm9rZXk capi@example
ntp:
  enabled: true
  servers:
  - 198.18.0.1
preKubeadmCommands:
- touch /run/provider-pre-kubeadm
diskSetup:
  partitions:
  - device: /dev/disk/azure/scsi1/lun0
    layout: true
    overwrite: false
    tableType: gpt
  filesystems:
  - device: /dev/disk/azure/scsi1/lun0
    partition: '1'
    filesystem: ext4
    label: etcd_disk
mounts:
- - LABEL=etcd_disk
  - /var/lib/etcddisk
";

    /// A published provider's shape on a real node, as a cloud runs it: the user, its key and sudo rule,
    /// the appended and the gzip+base64 files, the NTP server, the command before kubeadm all there,
    /// `kubeadm init` done and the sentinel written. The disk that is not there fails partitioning and
    /// formatting, which cloud-init logs and goes past (its result lists no failed module for it, as on
    /// a cloud), and its mount goes to fstab with `nofail`: a template that needs the disk learns of
    /// its absence from the log or from whatever needs the mount, never from the bootstrap.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs `hack/install-testenv.sh nodes`; run by `make test-nodes`"]
    async fn a_published_provider_shape_runs_and_a_missing_disk_is_only_logged() {
        use base64::Engine;
        use kubeadm_api::bootstrap::v1beta2::{File, KubeadmConfigSpec};
        use kubeadm_bootstrap::render::Role;
        use std::io::Write;
        let mut cluster = RealCluster::new();
        let shape: KubeadmConfigSpec = serde_saphyr::from_str(PROVIDER_SHAPE).unwrap();
        let settings = r#"{"region":"sim","zones":["a","b"]}"#;
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gzip.write_all(settings.as_bytes()).unwrap();
        let gzipped = base64::engine::general_purpose::STANDARD.encode(gzip.finish().unwrap());
        let files: Vec<File> = serde_json::from_value(serde_json::json!([
            { "path": "/etc/motd", "content": "appended by the bootstrap data\n", "append": true },
            { "path": "/etc/provider/settings.json", "encoding": "gzip+base64",
              "content": gzipped, "permissions": "0600" },
        ]))
        .unwrap();
        cluster.spec.files.extend(files);
        cluster.spec.users = shape.users;
        cluster.spec.ntp = shape.ntp;
        cluster.spec.pre_kubeadm_commands = shape.pre_kubeadm_commands;
        cluster.spec.disk_setup = shape.disk_setup;
        cluster.spec.mounts = shape.mounts;
        let netns = cluster.fabric.node().unwrap();
        let endpoint = format!("{}:6443", netns.ip());
        let machine = "real-provider-shape";
        let user_data = cluster.user_data(Role::Init, machine, &endpoint, None);
        clean_up_after_dead_processes();
        let before = machine_sysctls_without_nodes();
        let motd = std::fs::read_to_string("/etc/motd").unwrap_or_default();
        let node = cluster.boot(machine, &netns, "198.19.128.0/24", &user_data);

        let run = |args: &[&str]| {
            let output = node.exec(args).unwrap();
            String::from_utf8_lossy(&output.stdout).into_owned()
        };
        assert!(
            run(&["getent", "passwd", "capi"])
                .trim_end()
                .ends_with(":/bin/bash"),
            "{}",
            run(&["getent", "passwd", "capi"])
        );
        assert!(
            node.read("/home/capi/.ssh/authorized_keys")
                .unwrap_or_default()
                .contains("capi@example")
        );
        let sudoers = run(&["sh", "-c", "cat /etc/sudoers.d/*"]);
        assert!(sudoers.contains("capi ALL=(ALL) NOPASSWD:ALL"), "{sudoers}");
        assert_eq!(
            node.read("/etc/motd").unwrap_or_default(),
            format!("{motd}appended by the bootstrap data\n")
        );
        assert_eq!(
            node.read("/etc/provider/settings.json").unwrap_or_default(),
            settings
        );
        assert_eq!(
            run(&["stat", "-c", "%a", "/etc/provider/settings.json"]).trim(),
            "600"
        );
        assert!(node.read("/run/provider-pre-kubeadm").is_some());
        // cloud-init writes its result after the final stage, whose last command wrote the sentinel.
        let deadline = Instant::now() + Duration::from_secs(60);
        let errors = loop {
            if let Some(errors) = node.cloud_init_errors() {
                break errors;
            }
            assert!(Instant::now() < deadline, "cloud-init did not finish");
            std::thread::sleep(Duration::from_millis(250));
        };
        let failed: Vec<&str> = errors
            .iter()
            .filter_map(|e| e.strip_prefix("('")?.split('\'').next())
            .collect();
        // Only the locale, which cloud-init sets on every boot and this machine's root (the nodes'
        // image) cannot: no en_US.UTF-8.
        assert_eq!(failed, ["locale"], "{errors:?}");
        let log = node.read("/var/log/cloud-init.log").unwrap_or_default();
        let missing = "Device /dev/disk/azure/scsi1/lun0 did not exist";
        assert!(
            log.contains(&format!("RuntimeError: {missing}")),
            "cloud-init's log does not say the disk is missing"
        );
        let fstab = node.read("/etc/fstab").unwrap_or_default();
        assert!(
            fstab
                .lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .any(|f| {
                    f.len() > 3
                        && f[..2] == ["LABEL=etcd_disk", "/var/lib/etcddisk"]
                        && f[3].split(',').any(|o| o == "nofail")
                }),
            "{fstab}"
        );
        let ntp = run(&["sh", "-c", "cat /etc/systemd/timesyncd.conf.d/*"]);
        assert!(ntp.contains("NTP=198.18.0.1"), "{ntp}");
        stop_and_check(vec![node], &before);
    }

    /// Our init bootstrap data on a real node: real cloud-init runs it, real `kubeadm init` brings up the
    /// control plane in containerd through the real kubelet, whose Node registers with the release's
    /// kubelet and containerd versions; the static pods run as mirror pods; the sentinel says so. The
    /// node leaves nothing behind: no mount, no cgroup, the kernel settings the kubelet rewrote restored.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs `hack/install-testenv.sh nodes`; run by `make test-nodes`"]
    async fn kubeadm_init_from_our_bootstrap_data_runs_a_real_control_plane() {
        use k8s_openapi::api::core::v1::Node;
        use kubeadm_bootstrap::render::Role;
        let cluster = RealCluster::new();
        let netns = cluster.fabric.node().unwrap();
        let endpoint = format!("{}:6443", netns.ip());
        let machine = "real-control-plane-0";
        let user_data = cluster.user_data(Role::Init, machine, &endpoint, None);
        clean_up_after_dead_processes();
        let before = machine_sysctls_without_nodes();
        let node = cluster.boot(machine, &netns, "198.19.128.0/24", &user_data);

        let client = cluster.admin(&endpoint).await;
        let nodes = kube::Api::<Node>::all(client.clone())
            .list(&Default::default())
            .await
            .unwrap();
        assert_eq!(nodes.items.len(), 1);
        let info = nodes.items[0]
            .status
            .as_ref()
            .unwrap()
            .node_info
            .as_ref()
            .unwrap();
        assert_eq!(info.kubelet_version, cluster.version);
        assert!(
            info.container_runtime_version
                .starts_with("containerd://1.6"),
            "{}",
            info.container_runtime_version
        );
        // The static pods kubeadm wrote run in containerd, and the kubelet posts their mirror pods.
        wait_control_plane_pods(&client, &[machine]).await;
        stop_and_check(vec![node], &before);
    }

    /// Our control-plane join data on a second real node: real `kubeadm join` finds the cluster by our
    /// bootstrap token (cluster-info signed by the real kube-controller-manager), pins the CA, and adds
    /// its etcd member as a learner, which kubeadm promotes: two voters, two control planes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs `hack/install-testenv.sh nodes`; run by `make test-nodes`"]
    async fn a_control_plane_join_from_our_bootstrap_data_adds_an_etcd_voter() {
        use kubeadm_bootstrap::render::Role;
        let cluster = RealCluster::new();
        let first_netns = cluster.fabric.node().unwrap();
        let second_netns = cluster.fabric.node().unwrap();
        // No load balancer here: the first node is the control-plane endpoint.
        let endpoint = format!("{}:6443", first_netns.ip());
        clean_up_after_dead_processes();
        let before = machine_sysctls_without_nodes();
        let first = cluster.boot(
            "real-cp-a",
            &first_netns,
            "198.19.128.0/24",
            &cluster.user_data(Role::Init, "real-cp-a", &endpoint, None),
        );
        let client = cluster.admin(&endpoint).await;
        let join = cluster.join_facts(&client, &endpoint).await;
        let second = cluster.boot(
            "real-cp-b",
            &second_netns,
            "198.19.129.0/24",
            &cluster.user_data(Role::ControlPlaneJoin, "real-cp-b", &endpoint, Some(&join)),
        );
        wait_control_plane_pods(&client, &["real-cp-a", "real-cp-b"]).await;

        // Two voters, found through the etcd CA of the bootstrap data.
        let etcd_ca = cluster
            .certificates
            .get(kubeadm_cluster::certificates::CertKind::Etcd);
        let access = crate::node::EtcdAccess {
            ca_pem: etcd_ca.cert.clone(),
            client: testenv::pki::Ca::from_pem(&etcd_ca.cert, &etcd_ca.key)
                .unwrap()
                .issue("test-client", None, &[], testenv::pki::Usage::Client)
                .unwrap(),
        };
        let url = format!("https://{}:2379", first_netns.ip());
        let members = access
            .ask(&url, |mut c| async move { c.member_list().await })
            .await
            .unwrap();
        let members: Vec<(String, bool)> = members
            .members()
            .iter()
            .map(|m| (m.name().to_owned(), m.is_learner()))
            .collect();
        assert_eq!(members.len(), 2, "{members:?}");
        assert!(members.iter().all(|(_, learner)| !learner), "{members:?}");
        stop_and_check(vec![second, first], &before);
    }

    /// A worker joins from our worker data; with the pod networks routed between the nodes, both Nodes
    /// are Ready (the real node-lifecycle controller sees their kubelets), and kubeadm's add-ons run:
    /// kube-proxy on each node, CoreDNS on the pod network.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs `hack/install-testenv.sh nodes`; run by `make test-nodes`"]
    async fn a_worker_joins_and_both_nodes_are_ready_with_kube_proxy_and_coredns() {
        use k8s_openapi::api::core::v1::{Node, Pod};
        use kubeadm_bootstrap::render::Role;
        let cluster = RealCluster::new();
        let cp_netns = cluster.fabric.node().unwrap();
        let worker_netns = cluster.fabric.node().unwrap();
        let endpoint = format!("{}:6443", cp_netns.ip());
        let (cp_pods, worker_pods) = ("198.19.128.0/24", "198.19.129.0/24");
        route_pods(&cp_netns, worker_pods, worker_netns.ip()).unwrap();
        route_pods(&worker_netns, cp_pods, cp_netns.ip()).unwrap();
        clean_up_after_dead_processes();
        let before = machine_sysctls_without_nodes();
        let cp = cluster.boot(
            "real-cp",
            &cp_netns,
            cp_pods,
            &cluster.user_data(Role::Init, "real-cp", &endpoint, None),
        );
        let client = cluster.admin(&endpoint).await;
        let join = cluster.join_facts(&client, &endpoint).await;
        let worker = cluster.boot(
            "real-worker",
            &worker_netns,
            worker_pods,
            &cluster.user_data(Role::WorkerJoin, "real-worker", &endpoint, Some(&join)),
        );
        // Our worker data registers the Node with Cluster API's uninitialized taint, which Cluster API's
        // machine controller removes once the Node has its Machine; no Machine here, so as it would.
        // The kubelet registers the Node just after kubeadm join returns.
        let registered = Instant::now() + Duration::from_secs(60);
        let worker_node = loop {
            match kube::Api::<Node>::all(client.clone())
                .get_opt("real-worker")
                .await
                .unwrap()
            {
                Some(node) => break node,
                None if Instant::now() < registered => {
                    tokio::time::sleep(Duration::from_millis(500)).await
                }
                None => panic!("the worker's Node never registered"),
            }
        };
        let taints = worker_node.spec.and_then(|s| s.taints).unwrap_or_default();
        assert!(
            taints
                .iter()
                .any(|t| t.key == "node.cluster.x-k8s.io/uninitialized"),
            "{taints:?}"
        );
        let kept: Vec<_> = taints
            .into_iter()
            .filter(|t| t.key != "node.cluster.x-k8s.io/uninitialized")
            .collect();
        kube::Api::<Node>::all(client.clone())
            .patch(
                "real-worker",
                &Default::default(),
                &kube::api::Patch::Merge(serde_json::json!({ "spec": { "taints": kept } })),
            )
            .await
            .unwrap();

        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let nodes = kube::Api::<Node>::all(client.clone())
                .list(&Default::default())
                .await
                .unwrap();
            let ready: Vec<String> = nodes
                .items
                .iter()
                .filter(|n| {
                    n.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                })
                .filter_map(|n| n.metadata.name.clone())
                .collect();
            let pods = kube::Api::<Pod>::namespaced(client.clone(), "kube-system")
                .list(&Default::default())
                .await
                .unwrap();
            let states: Vec<String> = pods
                .items
                .iter()
                .map(|p| {
                    let status = p.status.as_ref();
                    let waiting = status
                        .and_then(|s| s.container_statuses.as_ref())
                        .and_then(|c| c.first())
                        .and_then(|c| c.state.as_ref())
                        .and_then(|s| s.waiting.as_ref())
                        .and_then(|w| w.reason.clone())
                        .unwrap_or_default();
                    format!(
                        "{} {} {waiting}",
                        p.metadata.name.as_deref().unwrap_or(""),
                        status.and_then(|s| s.phase.as_deref()).unwrap_or("")
                    )
                })
                .collect();
            let running = |prefix: &str, count: usize| {
                states
                    .iter()
                    .filter(|s| s.starts_with(prefix) && s.contains(" Running"))
                    .count()
                    >= count
            };
            if ready.len() == 2 && running("kube-proxy-", 2) && running("coredns-", 2) {
                break;
            }
            if Instant::now() > deadline {
                let unscheduled: Vec<String> = pods
                    .items
                    .iter()
                    .flat_map(|p| p.status.iter().flat_map(|s| s.conditions.iter().flatten()))
                    .filter(|c| c.type_ == "PodScheduled" && c.status != "True")
                    .filter_map(|c| c.message.clone())
                    .collect();
                let proxy_log = |node: &NspawnNode| {
                    node.exec(&[
                        "sh",
                        "-c",
                        "tail -n 15 /var/log/pods/kube-system_kube-proxy-*/kube-proxy/*.log",
                    ])
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default()
                };
                let taints: Vec<String> = nodes
                    .items
                    .iter()
                    .map(|n| {
                        format!(
                            "{}: {:?}",
                            n.metadata.name.as_deref().unwrap_or(""),
                            n.spec
                                .as_ref()
                                .and_then(|s| s.taints.clone())
                                .unwrap_or_default()
                        )
                    })
                    .collect();
                panic!(
                    "ready: {ready:?}; kube-system: {states:#?}\nunscheduled: {unscheduled:?}\n\
                     taints: {taints:#?}\nkube-proxy on the control plane:\n{}",
                    proxy_log(&cp)
                );
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        stop_and_check(vec![worker, cp], &before);
    }
}
