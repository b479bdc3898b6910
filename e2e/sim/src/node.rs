//! A simulated node: real kubeadm in the node's network namespace where the simulator has one
//! ([`crate::real_kubeadm`]); otherwise the node does what kubeadm does on it, with real processes on
//! the node's own loopback address: `init` starts a one-member etcd and kube-apiserver and uploads the
//! cluster configuration; a control-plane `join` adds its etcd member as a learner, starts it, promotes
//! it once in sync, then starts its kube-apiserver; every node registers its Node, and control-plane
//! nodes the mirror pods of their static pods with kubeadm's and the patches' annotations. Dropping a
//! [`Node`] stops its processes.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Certificate, ConnectOptions, Identity, MemberAddOptions, TlsOptions};
use k8s_openapi::api::core::v1::{ConfigMap, Node as K8sNode, Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testenv::pki::{Ca, CertPair, Usage};
use testenv::process::Process;

use crate::cloud_config::{BootPlan, KubeadmCommand};
use crate::faults::Fault;
use crate::kubeadm_config::{self, ClusterFacts, InstanceData, NodeFacts};
use crate::netns::NodeNetns;
use crate::network::Backends;

const PKI: &str = "/etc/kubernetes/pki";
/// kubeadm's default when `localAPIEndpoint.bindPort` is not set.
const API_SERVER_PORT: u16 = 6443;
const ETCD_CLIENT_PORT: u16 = 2379;
const ETCD_PEER_PORT: u16 = 2380;
/// kubeadm waits this long for a learner to catch up before giving up on its promotion.
const PROMOTE_TIMEOUT: Duration = Duration::from_secs(60);
/// etcd refuses membership changes for a few seconds after each change ("unhealthy cluster").
const MEMBER_ADD_TIMEOUT: Duration = Duration::from_secs(60);
const ETCD_READY_TIMEOUT: Duration = Duration::from_secs(60);
const API_SERVER_READY_TIMEOUT: Duration = Duration::from_secs(120);
/// The components kubeadm runs as static pods, in the order it starts them.
pub const COMPONENTS: [&str; 4] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error(transparent)]
    Data(#[from] crate::cloud_config::BootDataError),
    #[error(transparent)]
    Config(#[from] kubeadm_config::ConfigError),
    #[error("{0}")]
    Pki(String),
    #[error("{what}: {reason}")]
    Join { what: &'static str, reason: String },
    #[error("etcd: {0}")]
    Etcd(String),
    #[error("kube-apiserver: {0}")]
    ApiServer(String),
    #[error("workload cluster API: {0}")]
    Workload(String),
    #[error("the node crashed during its join (fault injected)")]
    Crashed,
    #[error("kubeadm refuses the configuration: {0}")]
    KubeadmRefused(String),
    #[error("{0}")]
    Kubeadm(String),
    #[error("{0}")]
    Io(String),
}

impl BootError {
    /// A short reason for `status.failureReason`.
    pub fn reason(&self) -> &'static str {
        match self {
            BootError::Data(_) | BootError::Config(_) | BootError::KubeadmRefused(_) => {
                "InvalidBootstrapData"
            }
            BootError::Pki(_) => "InvalidCertificates",
            BootError::Join { .. } => "JoinFailed",
            BootError::Etcd(_) => "EtcdFailed",
            BootError::ApiServer(_) => "APIServerFailed",
            BootError::Workload(_) => "WorkloadClusterUnreachable",
            BootError::Crashed => "NodeCrashed",
            BootError::Kubeadm(_) => "KubeadmFailed",
            BootError::Io(_) => "NodeIOError",
        }
    }
}

/// Where and as what a machine boots.
pub struct BootRequest {
    pub machine: String,
    /// The Kubernetes version the machine's image carries (the Machine's `spec.version`): what its
    /// kubelet reports.
    pub version: Option<String>,
    pub namespace: String,
    pub ip: Ipv4Addr,
    pub dir: PathBuf,
    pub fault: Option<Fault>,
    /// `host:port` of the cluster's control-plane endpoint (the load balancer).
    pub endpoint: String,
    /// A cluster-admin client through the endpoint, once the cluster is initialized.
    pub workload: Option<kube::Client>,
    /// The node's own network namespace (its address is `ip`): the node runs real kubeadm
    /// ([`crate::real_kubeadm`]). Without one, the node lives on a loopback address and imitates kubeadm.
    pub netns: Option<Arc<NodeNetns>>,
    /// The cluster's load balancer, which a first control-plane node joins before kubeadm talks to the
    /// control-plane endpoint.
    pub lb: Option<Backends>,
    /// Where a partition fault notes when it cut the node off and when it healed.
    pub partitions: crate::faults::PartitionLog,
}

impl BootRequest {
    pub fn instance(&self) -> InstanceData {
        InstanceData {
            local_hostname: self.machine.clone(),
            instance_id: self.provider_id(),
        }
    }

    pub fn provider_id(&self) -> String {
        crate::api::provider_id(&self.namespace, &self.machine)
    }
}

/// A booted node and the processes it runs.
pub struct Node {
    pub name: String,
    pub ip: Ipv4Addr,
    pub control_plane: bool,
    /// Where its kube-apiserver listens (control-plane nodes).
    pub api_server: Option<SocketAddr>,
    pub etcd_client_url: Option<String>,
    /// The etcd member ID when the node joined as a learner.
    pub joined_as_learner: Option<u64>,
    /// From the init node: the cluster CA (certificate, key) the simulator mints its admin client from.
    pub cluster_ca: Option<(String, String)>,
    pub(crate) etcd: Option<Process>,
    pub(crate) apiserver: Option<Process>,
    /// The kubelet's port-forward endpoint (`sim-kubelet`), where it is built and the node has a network
    /// namespace.
    pub(crate) kubelet: Option<Process>,
    /// Static pods whose process exited and that were reported not ready, as the kubelet would.
    pub(crate) reported_exits: Vec<&'static str>,
    /// Removed once the processes are stopped (fields drop after [`Drop::drop`]); a partition holds it
    /// too while it lasts.
    pub(crate) netns: Option<Arc<NodeNetns>>,
}

impl Node {
    /// PIDs of the node's processes.
    pub fn pids(&self) -> Vec<u32> {
        self.etcd
            .iter()
            .chain(self.apiserver.iter())
            .chain(self.kubelet.iter())
            .map(Process::pid)
            .collect()
    }

    /// Stops every process of the node (etcd last, as the kubelet would not care either way).
    pub fn stop(&mut self) {
        if let Some(mut p) = self.kubelet.take() {
            p.stop();
        }
        if let Some(mut p) = self.apiserver.take() {
            p.stop();
        }
        if let Some(mut p) = self.etcd.take() {
            p.stop();
        }
    }

    /// Powers the node off: every process is killed at once (SIGKILL), with no chance to finish its
    /// requests or hand over etcd leadership, as a cloud's VM deletion (`nova delete`, `docker rm -f`)
    /// or a dead host does.
    pub fn power_off(&mut self) {
        for p in [&mut self.kubelet, &mut self.apiserver, &mut self.etcd]
            .into_iter()
            .filter_map(Option::as_mut)
        {
            p.kill();
        }
    }

    /// Stops the kubelet's port-forward endpoint alone (etcd and kube-apiserver keep running); returns
    /// whether it ran.
    pub fn stop_kubelet(&mut self) -> bool {
        self.kubelet.take().map(|mut p| p.stop()).is_some()
    }

    /// The static pods (`etcd`, `kube-apiserver`) whose process exited by itself since the last call: the
    /// kubelet reports each not ready once.
    pub fn newly_exited(&mut self) -> Vec<&'static str> {
        let mut exited = Vec::new();
        for (component, process) in [
            ("etcd", self.etcd.as_mut()),
            ("kube-apiserver", self.apiserver.as_mut()),
        ] {
            if process.is_some_and(|p| p.try_exit_status().is_some())
                && !self.reported_exits.contains(&component)
            {
                exited.push(component);
            }
        }
        self.reported_exits.extend(&exited);
        exited
    }

    /// Whether a process of the node has exited by itself (e.g. an etcd member removed from its cluster).
    pub fn exited(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for p in self.etcd.iter_mut().chain(self.apiserver.iter_mut()) {
            if let Some(status) = p.try_exit_status() {
                out.push(format!("{} exited ({status})", p.name()));
            }
        }
        out
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Real kubeadm reads the node's configuration first, as the node's own kubeadm would: the Machine's
/// release (the current one where it names none or one not built here) a v1beta4 configuration, kubeadm
/// 1.30 a v1beta3 one (see `testenv::kubeadm`). A configuration it refuses stops the boot. On the fallback
/// management plane (kubeadm 1.20, which reads neither) nothing is checked.
fn check_with_real_kubeadm(config: &str, version: Option<&str>) -> Result<(), BootError> {
    let legacy = testenv::binaries::management().map_or(true, |b| b.legacy());
    if legacy {
        return Ok(());
    }
    testenv::kubeadm::validate_config_for_machine(config, version)
        .map_err(BootError::KubeadmRefused)
}

/// Boots the node described by `plan`. Cancelling the future stops whatever it started.
pub async fn boot(req: &BootRequest, plan: &BootPlan) -> Result<Node, BootError> {
    let rootfs = req.dir.join("rootfs");
    write_files(&rootfs, &plan.files)?;
    let config_path = plan.kubeadm.config_path().to_owned();
    check_with_real_kubeadm(plan.kubeadm_config()?, req.version.as_deref())?;
    let docs = kubeadm_config::documents(&config_path, plan.kubeadm_config()?)?;
    let init = matches!(plan.kubeadm, KubeadmCommand::Init { .. });
    let facts = kubeadm_config::node_facts(&config_path, &docs, init)?;
    if init && let Some(netns) = req.netns.as_deref() {
        return crate::real_kubeadm::init(req, plan, &facts, netns, &rootfs).await;
    }
    if init {
        let cluster =
            docs.get("ClusterConfiguration")
                .ok_or(kubeadm_config::ConfigError::MissingKind {
                    file: config_path.clone(),
                    kind: "ClusterConfiguration",
                })?;
        let cluster_facts = kubeadm_config::cluster_facts(cluster);
        let raw = docs
            .raw("ClusterConfiguration")
            .unwrap_or_default()
            .to_owned();
        return control_plane(req, plan, &rootfs, &facts, &cluster_facts, Some(raw)).await;
    }
    let workload = req.workload.clone().ok_or(BootError::Join {
        what: "discovery",
        reason: format!(
            "the control-plane endpoint {} does not answer yet",
            req.endpoint
        ),
    })?;
    check_token(&workload, &facts).await?;
    if facts.control_plane
        && let Some(netns) = req.netns.as_deref()
    {
        return crate::real_kubeadm::join(req, plan, &facts, netns, &rootfs, &workload).await;
    }
    if facts.control_plane {
        let raw = uploaded_cluster_configuration(&workload).await?;
        let value: serde_json::Value =
            serde_saphyr::from_str(&raw).map_err(|e| BootError::Join {
                what: "kubeadm-config ConfigMap",
                reason: format!("ClusterConfiguration is not valid YAML: {e}"),
            })?;
        let cluster_facts = kubeadm_config::cluster_facts(&value);
        control_plane(req, plan, &rootfs, &facts, &cluster_facts, None).await
    } else {
        register_node(&workload, req, &facts.node_name).await?;
        Ok(Node {
            name: facts.node_name.clone(),
            ip: req.ip,
            control_plane: false,
            api_server: None,
            etcd_client_url: None,
            joined_as_learner: None,
            cluster_ca: None,
            etcd: None,
            apiserver: None,
            kubelet: None,
            reported_exits: Vec::new(),
            netns: req.netns.clone(),
        })
    }
}

/// `kubeadm init` or a control-plane `kubeadm join`.
async fn control_plane(
    req: &BootRequest,
    plan: &BootPlan,
    rootfs: &Path,
    facts: &NodeFacts,
    cluster: &ClusterFacts,
    upload: Option<String>,
) -> Result<Node, BootError> {
    // What kubeadm's patches would add to the static pods' mirror pods.
    let annotations = match &facts.patches_dir {
        Some(dir) => kubeadm_config::patch_annotations(&plan.files, dir)?,
        None => BTreeMap::new(),
    };
    let pki = rootfs.join(PKI.trim_start_matches('/'));
    let cluster_ca = ca(plan, "ca")?;
    let etcd_ca = ca(plan, "etcd/ca")?;
    let ip = req.ip.to_string();
    let name = &facts.node_name;
    let etcd_hosts = [name.as_str(), ip.as_str(), "localhost", "127.0.0.1"];
    let etcd_server = issue(&etcd_ca, name, None, &etcd_hosts, Usage::ServerAndClient)?;
    write_pair(&pki, "etcd/server", &etcd_server)?;
    write_pair(&pki, "etcd/peer", &etcd_server)?;
    let healthcheck = issue(
        &etcd_ca,
        "kube-etcd-healthcheck-client",
        None,
        &[],
        Usage::Client,
    )?;
    write_pair(&pki, "etcd/healthcheck-client", &healthcheck)?;
    let apiserver_etcd = issue(
        &etcd_ca,
        "kube-apiserver-etcd-client",
        None,
        &[],
        Usage::Client,
    )?;
    write_pair(&pki, "apiserver-etcd-client", &apiserver_etcd)?;
    let etcd_ca_pem = plan.file(&format!("{PKI}/etcd/ca.crt"))?.to_owned();
    let etcd_access = EtcdAccess {
        ca_pem: etcd_ca_pem,
        client: healthcheck,
    };

    let client_port = crate::network::port_on(req.ip, ETCD_CLIENT_PORT).map_err(io)?;
    let peer_port = crate::network::port_on(req.ip, ETCD_PEER_PORT).map_err(io)?;
    let client_url = format!("https://{ip}:{client_port}");
    let peer_url = format!("https://{ip}:{peer_port}");

    let (initial_cluster, state, learner) = match upload {
        Some(_) => (format!("{name}={peer_url}"), "new", None),
        None => {
            let workload = req.workload.as_ref().expect("joins have a workload client");
            let voters = etcd_urls_from_pods(workload).await?;
            let (id, initial) = add_learner(&etcd_access, &voters, name, &peer_url).await?;
            (initial, "existing", Some((id, voters)))
        }
    };
    match req.fault {
        Some(Fault::CrashMidJoin) if learner.is_some() => return Err(BootError::Crashed),
        Some(Fault::PartitionMidJoin(_)) => {
            return Err(BootError::Io(
                "fault partition-mid-join: the node has no network namespace to cut off \
                 (nodes imitate kubeadm on loopback addresses here)"
                    .into(),
            ));
        }
        Some(Fault::EtcdNeverStarts) if learner.is_some() => {
            tracing::info!(node = %name, "etcd never starts (fault injected)");
            // The join hangs, as kubeadm's does waiting for a member that never comes up.
            std::future::pending::<()>().await;
        }
        Some(Fault::EtcdSlowStart(delay)) => {
            tracing::info!(node = %name, ?delay, "etcd starts late (fault injected)");
            tokio::time::sleep(delay).await;
        }
        _ => {}
    }
    let data_dir = req.dir.join("etcd-data");
    // The same releases as the management plane: etcd 3.6 where built, else Debian's 3.4.
    let binaries = testenv::binaries::management().map_err(|e| BootError::Etcd(e.to_string()))?;
    let restores = plan.restores_etcd && upload.is_some();
    let data_dir = if restores {
        // Where the kubeadm manifest below puts it, as kubeadm's would.
        let manifests = rootfs.join("etc/kubernetes/manifests");
        let kubeadm = format!(
            "#!/bin/sh\nmkdir -p {dir}\ncat > {dir}/etcd.yaml <<EOF\nspec:\n  containers:\n  - command:\n    - etcd\n    - --name={name}\n    - --initial-advertise-peer-urls={peer_url}\n    - --data-dir=/var/lib/etcd\n    image: registry.k8s.io/etcd:simulated\nEOF\n",
            dir = manifests.display(),
        );
        restore_etcd(req, plan, rootfs, &kubeadm, binaries.legacy())?;
        rootfs.join("var/lib/etcd")
    } else {
        data_dir
    };
    let mut cmd = Command::new(&binaries.etcd);
    let mut flags: BTreeMap<String, String> = [
        ("name", name.clone()),
        ("data-dir", data_dir.display().to_string()),
        ("listen-client-urls", client_url.clone()),
        ("advertise-client-urls", client_url.clone()),
        ("listen-peer-urls", peer_url.clone()),
        ("initial-advertise-peer-urls", peer_url.clone()),
        ("initial-cluster", initial_cluster),
        ("initial-cluster-state", state.to_owned()),
        (
            "cert-file",
            pki.join("etcd/server.crt").display().to_string(),
        ),
        (
            "key-file",
            pki.join("etcd/server.key").display().to_string(),
        ),
        (
            "trusted-ca-file",
            pki.join("etcd/ca.crt").display().to_string(),
        ),
        ("client-cert-auth", "true".into()),
        (
            "peer-cert-file",
            pki.join("etcd/peer.crt").display().to_string(),
        ),
        (
            "peer-key-file",
            pki.join("etcd/peer.key").display().to_string(),
        ),
        (
            "peer-trusted-ca-file",
            pki.join("etcd/ca.crt").display().to_string(),
        ),
        ("peer-client-cert-auth", "true".into()),
        ("snapshot-count", "10000".into()),
        ("logger", "zap".into()),
        ("log-outputs", "stderr".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    for (flag, value) in &cluster.etcd_extra_args {
        if !LOCAL_ETCD_FLAGS.contains(&flag.as_str()) {
            flags.insert(flag.clone(), value.clone());
        }
    }
    cmd.args(flags.iter().map(|(k, v)| format!("--{k}={v}")));
    let mut etcd = Process::spawn(&format!("etcd {name}"), cmd, &req.dir.join("etcd.log"))
        .map_err(|e| BootError::Etcd(e.to_string()))?;
    wait_etcd_ready(&etcd_access, &client_url, &mut etcd).await?;
    if let Some((id, voters)) = &learner {
        promote(&etcd_access, voters, *id).await?;
    }

    // kube-apiserver, in front of this node's own etcd member as kubeadm's stacked control plane does.
    let port = crate::network::port_on(req.ip, API_SERVER_PORT).map_err(io)?;
    let api_address = SocketAddr::from((req.ip, port));
    let endpoint_host = req
        .endpoint
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(&req.endpoint);
    let mut sans = vec![
        name.as_str(),
        ip.as_str(),
        endpoint_host,
        "127.0.0.1",
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "10.96.0.1",
    ];
    sans.extend(cluster.api_server_cert_sans.iter().map(String::as_str));
    if let Some(endpoint) = &cluster.control_plane_endpoint {
        sans.push(
            endpoint
                .rsplit_once(':')
                .map(|(h, _)| h)
                .unwrap_or(endpoint),
        );
    }
    let serving = issue(&cluster_ca, "kube-apiserver", None, &sans, Usage::Server)?;
    write_pair(&pki, "apiserver", &serving)?;
    plan.file(&format!("{PKI}/sa.key"))?;
    plan.file(&format!("{PKI}/sa.pub"))?;
    // The same release as the management plane: kube-apiserver 1.34 where built, else 1.20.
    let binaries =
        testenv::binaries::management().map_err(|e| BootError::ApiServer(e.to_string()))?;
    let mut cmd = Command::new(&binaries.kube_apiserver);
    if binaries.legacy() {
        cmd.arg("--insecure-port=0");
    }
    let file = |p: &str| pki.join(p).display().to_string();
    cmd.arg(format!("--advertise-address={ip}"))
        .arg(format!("--bind-address={ip}"))
        .arg(format!("--secure-port={port}"))
        .args([
            "--endpoint-reconciler-type=none",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--enable-bootstrap-token-auth=true",
            "--allow-privileged=true",
            "--profiling=false",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--v=1",
        ])
        .arg(format!(
            "--service-cluster-ip-range={}",
            cluster.service_subnet.as_deref().unwrap_or("10.96.0.0/12")
        ))
        .arg(format!("--etcd-servers={client_url}"))
        .arg(format!("--etcd-cafile={}", file("etcd/ca.crt")))
        .arg(format!(
            "--etcd-certfile={}",
            file("apiserver-etcd-client.crt")
        ))
        .arg(format!(
            "--etcd-keyfile={}",
            file("apiserver-etcd-client.key")
        ))
        .arg(format!("--tls-cert-file={}", file("apiserver.crt")))
        .arg(format!("--tls-private-key-file={}", file("apiserver.key")))
        .arg(format!("--client-ca-file={}", file("ca.crt")))
        .arg(format!("--service-account-key-file={}", file("sa.pub")))
        .arg(format!(
            "--service-account-signing-key-file={}",
            file("sa.key")
        ));
    let mut apiserver = Process::spawn(
        &format!("kube-apiserver {name}"),
        cmd,
        &req.dir.join("kube-apiserver.log"),
    )
    .map_err(|e| BootError::ApiServer(e.to_string()))?;
    let ca_cert = plan.file(&format!("{PKI}/ca.crt"))?.to_owned();
    let ca_key = plan.file(&format!("{PKI}/ca.key"))?.to_owned();
    let local = admin_client(&format!("https://{api_address}"), &ca_cert, &ca_key).await?;
    wait_api_server_ready(&local, &mut apiserver).await?;

    if let Some(raw) = upload {
        upload_cluster_configuration(&local, &raw).await?;
    }
    register_node(&local, req, name).await?;
    imitate_mark_control_plane(&local, name).await?;
    let etcd_url_annotation = client_url.clone();
    register_static_pods(
        &local,
        name,
        api_address,
        &etcd_url_annotation,
        &annotations,
    )
    .await?;
    Ok(Node {
        name: name.clone(),
        ip: req.ip,
        control_plane: true,
        api_server: Some(api_address),
        etcd_client_url: Some(client_url),
        joined_as_learner: learner.as_ref().map(|(id, _)| *id),
        cluster_ca: Some((ca_cert, ca_key)),
        etcd: Some(etcd),
        apiserver: Some(apiserver),
        kubelet: None,
        reported_exits: Vec::new(),
        netns: req.netns.clone(),
    })
}

/// Flags the simulator sets itself: where the member listens and keeps its data is the node's.
const LOCAL_ETCD_FLAGS: [&str; 9] = [
    "name",
    "data-dir",
    "listen-client-urls",
    "advertise-client-urls",
    "listen-peer-urls",
    "initial-advertise-peer-urls",
    "initial-cluster",
    "initial-cluster-state",
    "listen-metrics-urls",
];

fn io(e: std::io::Error) -> BootError {
    BootError::Io(e.to_string())
}

/// Runs the bootstrap data's etcd restore script as the node would before `kubeadm init`, with the
/// node's paths under its root folder: `kubeadm` is `kubeadm_shim` (real kubeadm on the node's root, or
/// one that writes the manifest the imitation starts etcd with), `etcdutl` the real one (etcd 3.4:
/// `etcdctl snapshot restore`, which takes the same flags) with absolute paths taken as the node's. The
/// snapshot is the one cloud-init would write, decoded from the bootstrap data.
pub(crate) fn restore_etcd(
    req: &BootRequest,
    plan: &BootPlan,
    rootfs: &Path,
    kubeadm_shim: &str,
    legacy: bool,
) -> Result<(), BootError> {
    use base64::Engine;
    use kubeadm_api::bootstrap::validation::{
        ETCD_RESTORE_DOWNLOAD_PATH, ETCD_RESTORE_SCRIPT_PATH, ETCD_RESTORE_SNAPSHOT_PATH,
    };
    use std::io::Read;
    let failed =
        |what: &str, e: &dyn std::fmt::Display| BootError::Etcd(format!("restore: {what}: {e}"));
    let on_node = |path: &str| rootfs.join(path.trim_start_matches('/'));
    // The snapshot itself, or (one in object storage) where the script downloads it from: the host's
    // network is the node's here, so the node reaches the store as the manager does.
    let what = match plan.file(ETCD_RESTORE_DOWNLOAD_PATH) {
        Ok(download) => {
            std::fs::write(on_node(ETCD_RESTORE_DOWNLOAD_PATH), download)
                .map_err(|e| failed("write the download", &e))?;
            "a download".to_owned()
        }
        Err(_) => {
            let encoded = plan.file(ETCD_RESTORE_SNAPSHOT_PATH)?;
            let compressed = base64::engine::general_purpose::STANDARD
                .decode(encoded.split_whitespace().collect::<String>())
                .map_err(|e| failed("the snapshot is not base64", &e))?;
            let mut snapshot = Vec::new();
            flate2::read::GzDecoder::new(compressed.as_slice())
                .read_to_end(&mut snapshot)
                .map_err(|e| failed("the snapshot is not gzip", &e))?;
            std::fs::write(on_node(ETCD_RESTORE_SNAPSHOT_PATH), &snapshot)
                .map_err(|e| failed("write the snapshot", &e))?;
            format!("{} bytes", snapshot.len())
        }
    };
    let root = rootfs.display().to_string();
    // The files the script reads and writes itself, and etcd's data directory the manifest names;
    // kubeadm's configuration is read by kubeadm.
    let script = plan
        .file(ETCD_RESTORE_SCRIPT_PATH)?
        .replace("/run/cluster-api/", &format!("{root}/run/cluster-api/"))
        .replace(
            "/etc/kubernetes/manifests/",
            &format!("{root}/etc/kubernetes/manifests/"),
        )
        .replace(
            "data=$(flag data-dir)",
            &format!("data={root}$(flag data-dir)"),
        );
    let etcdutl = if legacy {
        let etcdctl = testenv::binaries::etcdctl().map_err(|e| failed("etcdctl", &e))?;
        format!("ETCDCTL_API=3 exec {}", etcdctl.display())
    } else {
        let etcdutl = testenv::binaries::etcdutl_current().map_err(|e| failed("etcdutl", &e))?;
        format!("exec {}", etcdutl.display())
    };
    let etcdutl = format!(
        "#!/bin/sh\nfor arg; do\n  shift\n  case \"$arg\" in\n    {root}/*) ;;\n    /*) arg=\"{root}$arg\" ;;\n  esac\n  set -- \"$@\" \"$arg\"\ndone\n{etcdutl} \"$@\"\n"
    );
    let bin = req.dir.join("restore-bin");
    std::fs::create_dir_all(&bin).map_err(|e| failed("create its PATH", &e))?;
    for (tool, text) in [("kubeadm", kubeadm_shim), ("etcdutl", etcdutl.as_str())] {
        use std::os::unix::fs::PermissionsExt;
        let path = bin.join(tool);
        std::fs::write(&path, text).map_err(|e| failed(tool, &e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| failed(tool, &e))?;
    }
    let script_path = on_node(ETCD_RESTORE_SCRIPT_PATH);
    std::fs::write(&script_path, script).map_err(|e| failed("write the script", &e))?;
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new("/bin/sh")
        .arg(&script_path)
        .env("PATH", path)
        .output()
        .map_err(|e| failed("run the script", &e))?;
    let log = [output.stdout.as_slice(), output.stderr.as_slice()].concat();
    let _ = std::fs::write(req.dir.join("etcd-restore.log"), &log);
    if !output.status.success() {
        return Err(failed(
            &format!("the script exited with {}", output.status),
            &String::from_utf8_lossy(&log),
        ));
    }
    tracing::info!(from = %what, "etcd restored from the snapshot");
    Ok(())
}

fn write_files(rootfs: &Path, files: &BTreeMap<String, String>) -> Result<(), BootError> {
    for (path, content) in files {
        let target = rootfs.join(path.trim_start_matches('/'));
        if let Some(dir) = target.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| BootError::Io(format!("create {}: {e}", dir.display())))?;
        }
        std::fs::write(&target, content)
            .map_err(|e| BootError::Io(format!("write {}: {e}", target.display())))?;
    }
    Ok(())
}

fn ca(plan: &BootPlan, stem: &str) -> Result<Ca, BootError> {
    let cert = plan.file(&format!("{PKI}/{stem}.crt"))?;
    let key = plan.file(&format!("{PKI}/{stem}.key"))?;
    Ca::from_pem(cert, key).map_err(|e| BootError::Pki(format!("{PKI}/{stem}.crt/.key: {e}")))
}

fn issue(
    ca: &Ca,
    cn: &str,
    org: Option<&str>,
    hosts: &[&str],
    usage: Usage,
) -> Result<CertPair, BootError> {
    ca.issue(cn, org, hosts, usage)
        .map_err(|e| BootError::Pki(format!("issue {cn}: {e}")))
}

fn write_pair(pki: &Path, stem: &str, pair: &CertPair) -> Result<(), BootError> {
    let target = pki.join(stem);
    let dir = target.parent().expect("stems have a folder");
    std::fs::create_dir_all(dir).map_err(io)?;
    let name = target
        .file_name()
        .expect("stems have a name")
        .to_string_lossy()
        .into_owned();
    pair.write(dir, &name)
        .map_err(|e| BootError::Io(e.to_string()))?;
    Ok(())
}

/// The simulator's own etcd client: a certificate it signs with the etcd CA of the bootstrap data.
pub(crate) fn etcd_access(plan: &BootPlan) -> Result<EtcdAccess, BootError> {
    let etcd_ca = ca(plan, "etcd/ca")?;
    Ok(EtcdAccess {
        ca_pem: plan.file(&format!("{PKI}/etcd/ca.crt"))?.to_owned(),
        client: issue(&etcd_ca, "sim-etcd-client", None, &[], Usage::Client)?,
    })
}

/// A client certificate signed by the etcd CA, and that CA.
pub struct EtcdAccess {
    pub ca_pem: String,
    pub client: CertPair,
}

/// How long one question to one member may take, connecting included. The gRPC client bounds the TCP
/// connect and a request once sent, but not the TLS handshake nor the wait for a connection: a member
/// that accepts connections and does not serve (etcd answers TLS only once it is ready; a frozen process's
/// kernel still accepts) would hold a caller forever.
const ETCD_CALL_TIMEOUT: Duration = Duration::from_secs(5);

impl EtcdAccess {
    /// Asks the member at `url` one question: connects and runs `call`, within [`ETCD_CALL_TIMEOUT`]
    /// altogether.
    pub async fn ask<T, F, Fut>(&self, url: &str, call: F) -> Result<T, String>
    where
        F: FnOnce(etcd_client::Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let asked = async {
            let client = self.connect(url).await.map_err(|e| e.to_string())?;
            call(client).await.map_err(|e| e.to_string())
        };
        match tokio::time::timeout(ETCD_CALL_TIMEOUT, asked).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("{url} did not answer within {ETCD_CALL_TIMEOUT:?}")),
        }
    }

    async fn connect(&self, url: &str) -> Result<etcd_client::Client, etcd_client::Error> {
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(ETCD_CALL_TIMEOUT)
            .with_tls(
                TlsOptions::new()
                    .ca_certificate(Certificate::from_pem(&self.ca_pem))
                    .identity(Identity::from_pem(
                        &self.client.cert_pem,
                        &self.client.key_pem,
                    ))
                    .domain_name("localhost"),
            );
        etcd_client::Client::connect([url], Some(options)).await
    }
}

/// The client URLs the etcd pods announce (KEP-2506), which is how kubeadm finds the members.
pub(crate) async fn etcd_urls_from_pods(workload: &kube::Client) -> Result<Vec<String>, BootError> {
    let pods: Api<Pod> = Api::namespaced(workload.clone(), "kube-system");
    let list = pods
        .list(&ListParams::default().labels("component=etcd"))
        .await
        .map_err(|e| BootError::Workload(e.to_string()))?;
    let urls: Vec<String> = list
        .items
        .iter()
        .filter_map(|p| {
            p.metadata
                .annotations
                .as_ref()?
                .get("kubeadm.kubernetes.io/etcd.advertise-client-urls")
                .cloned()
        })
        .flat_map(|urls| {
            urls.split(',')
                .map(|u| u.trim().to_owned())
                .collect::<Vec<_>>()
        })
        .filter(|u| !u.is_empty())
        .collect();
    if urls.is_empty() {
        return Err(BootError::Join {
            what: "etcd discovery",
            reason: "no etcd pod announces its client URLs".into(),
        });
    }
    Ok(urls)
}

/// Adds the member as a learner; returns its ID and the `--initial-cluster` value it starts with.
async fn add_learner(
    access: &EtcdAccess,
    voters: &[String],
    name: &str,
    peer_url: &str,
) -> Result<(u64, String), BootError> {
    let deadline = Instant::now() + MEMBER_ADD_TIMEOUT;
    loop {
        let result = async {
            // One endpoint at a time: learners refuse member changes, and a dead member must not stall us.
            let mut last = None;
            for url in voters {
                let added = access
                    .ask(url, |mut c| async move {
                        c.member_add([peer_url], Some(MemberAddOptions::new().with_is_learner()))
                            .await
                    })
                    .await;
                match added {
                    Ok(resp) => return Ok(resp),
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| "no member to ask".into()))
        }
        .await;
        match result {
            Ok(resp) => {
                let id = resp
                    .member()
                    .map(|m| m.id())
                    .ok_or_else(|| BootError::Etcd("member add returned no member".into()))?;
                let initial = resp
                    .member_list()
                    .iter()
                    .filter_map(|m| {
                        let n = if m.id() == id { name } else { m.name() };
                        // A member that never started has no name yet and is left out, as etcd expects.
                        (!n.is_empty()).then(|| {
                            format!("{n}={}", m.peer_urls().first().cloned().unwrap_or_default())
                        })
                    })
                    .collect::<Vec<_>>()
                    .join(",");
                tracing::info!(
                    node = name,
                    id = format!("{id:x}"),
                    "etcd member added as a learner"
                );
                return Ok((id, initial));
            }
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(node = name, error = %e, "member add refused; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(BootError::Etcd(format!("adding {name} as a learner: {e}"))),
        }
    }
}

pub(crate) async fn wait_etcd_ready(
    access: &EtcdAccess,
    url: &str,
    process: &mut Process,
) -> Result<(), BootError> {
    let deadline = Instant::now() + ETCD_READY_TIMEOUT;
    let mut last = String::from("no answer yet");
    while Instant::now() < deadline {
        process
            .ensure_running()
            .map_err(|e| BootError::Etcd(e.to_string()))?;
        match access
            .ask(url, |mut c| async move { c.status().await })
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(BootError::Etcd(format!(
        "member at {url} not ready after {ETCD_READY_TIMEOUT:?}: {last}; log:\n{}",
        process.log_tail(20)
    )))
}

/// Promotes the learner once in sync, retrying like kubeadm 1.29+ does.
async fn promote(access: &EtcdAccess, voters: &[String], id: u64) -> Result<(), BootError> {
    let deadline = Instant::now() + PROMOTE_TIMEOUT;
    let mut last = String::new();
    while Instant::now() < deadline {
        for url in voters {
            match access
                .ask(url, |mut c| async move { c.member_promote(id).await })
                .await
            {
                Ok(_) => {
                    tracing::info!(id = format!("{id:x}"), "etcd learner promoted");
                    return Ok(());
                }
                // Someone (the control-plane provider) promoted it first.
                Err(e) if e.contains("not a learner") => return Ok(()),
                Err(e) => last = e,
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(BootError::Etcd(format!(
        "learner {id:x} not promoted within {PROMOTE_TIMEOUT:?}: {last}"
    )))
}

pub(crate) async fn wait_api_server_ready(
    client: &kube::Client,
    process: &mut Process,
) -> Result<(), BootError> {
    let deadline = Instant::now() + API_SERVER_READY_TIMEOUT;
    let mut last = String::from("no answer yet");
    while Instant::now() < deadline {
        process
            .ensure_running()
            .map_err(|e| BootError::ApiServer(e.to_string()))?;
        let request = http::Request::get("/readyz")
            .body(Vec::new())
            .expect("static request");
        match client.request_text(request).await {
            Ok(body) if body.trim() == "ok" => return Ok(()),
            Ok(body) => last = format!("/readyz answered {body:?}"),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(BootError::ApiServer(format!(
        "not ready after {API_SERVER_READY_TIMEOUT:?}: {last}; log:\n{}",
        process.log_tail(20)
    )))
}

/// A `system:masters` client for `server`, with a certificate from the cluster CA.
pub async fn admin_client(
    server: &str,
    ca_cert: &str,
    ca_key: &str,
) -> Result<kube::Client, BootError> {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let ca =
        Ca::from_pem(ca_cert, ca_key).map_err(|e| BootError::Pki(format!("cluster CA: {e}")))?;
    let admin = issue(&ca, "sim-admin", Some("system:masters"), &[], Usage::Client)?;
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{ "name": "workload", "cluster": { "server": server, "certificate-authority-data": b64(ca_cert) } }],
        "users": [{ "name": "sim-admin", "user": {
            "client-certificate-data": b64(&admin.cert_pem), "client-key-data": b64(&admin.key_pem) } }],
        "contexts": [{ "name": "workload", "context": { "cluster": "workload", "user": "sim-admin" } }],
        "current-context": "workload",
    });
    let yaml = serde_saphyr::to_string(&config).expect("kubeconfig serializes");
    testenv::apiserver::client_from_kubeconfig(&yaml)
        .await
        .map_err(|e| BootError::Workload(e.to_string()))
}

/// kubeadm's discovery: the bootstrap token must exist in the workload cluster, with its secret.
async fn check_token(workload: &kube::Client, facts: &NodeFacts) -> Result<(), BootError> {
    let token = facts.token.as_deref().ok_or(BootError::Join {
        what: "discovery",
        reason: "JoinConfiguration has no discovery.bootstrapToken.token".into(),
    })?;
    let (id, secret) = token.split_once('.').ok_or(BootError::Join {
        what: "discovery",
        reason: "discovery.bootstrapToken.token is not `<id>.<secret>`".into(),
    })?;
    let secrets: Api<Secret> = Api::namespaced(workload.clone(), "kube-system");
    let name = format!("bootstrap-token-{id}");
    let found = secrets
        .get_opt(&name)
        .await
        .map_err(|e| BootError::Workload(e.to_string()))?
        .ok_or(BootError::Join {
            what: "discovery",
            reason: format!(
                "bootstrap token {id} does not exist in the workload cluster (kube-system/{name})"
            ),
        })?;
    let stored = found
        .data
        .as_ref()
        .and_then(|d| d.get("token-secret"))
        .map(|v| String::from_utf8_lossy(&v.0).into_owned());
    if stored.as_deref() != Some(secret) {
        return Err(BootError::Join {
            what: "discovery",
            reason: format!("bootstrap token {id}: the secret does not match kube-system/{name}"),
        });
    }
    Ok(())
}

async fn uploaded_cluster_configuration(workload: &kube::Client) -> Result<String, BootError> {
    let config_maps: Api<ConfigMap> = Api::namespaced(workload.clone(), "kube-system");
    config_maps
        .get_opt("kubeadm-config")
        .await
        .map_err(|e| BootError::Workload(e.to_string()))?
        .and_then(|cm| cm.data?.get("ClusterConfiguration").cloned())
        .ok_or(BootError::Join {
            what: "kubeadm-config ConfigMap",
            reason: "kube-system/kubeadm-config has no ClusterConfiguration".into(),
        })
}

async fn upload_cluster_configuration(client: &kube::Client, raw: &str) -> Result<(), BootError> {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "kubeadm-config", "namespace": "kube-system" },
        "data": { "ClusterConfiguration": raw },
    }))
    .expect("a valid ConfigMap");
    match config_maps.create(&PostParams::default(), &cm).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(BootError::Workload(format!("upload kubeadm-config: {e}"))),
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// What the kubelet reports of a static pod whose container exited: not ready, restarting.
pub async fn report_not_ready(client: &kube::Client, pod: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let status = json!({ "status": { "conditions": [{
        "type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now(),
    }] } });
    match pods
        .patch_status(pod, &PatchParams::default(), &Patch::Merge(&status))
        .await
    {
        Ok(_) => tracing::info!(%pod, "static pod's container exited; reported not ready"),
        Err(e) => tracing::warn!(%pod, error = %e, "could not report the static pod not ready"),
    }
}

/// The kubelet's registration: the Node with its provider ID, Ready.
pub(crate) async fn register_node(
    client: &kube::Client,
    req: &BootRequest,
    name: &str,
) -> Result<(), BootError> {
    let nodes: Api<K8sNode> = Api::all(client.clone());
    let labels = json!({ "kubernetes.io/hostname": name, "kubernetes.io/os": "linux" });
    let node: K8sNode = serde_json::from_value(json!({
        "metadata": { "name": name, "labels": labels },
        "spec": { "providerID": req.provider_id() },
    }))
    .expect("a valid Node");
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(BootError::Workload(format!("register Node {name}: {e}"))),
    }
    set_node_ready(client, name, req.ip, req.version.as_deref(), true).await
}

/// What kubeadm's `mark-control-plane` phase does with the default configuration: the control-plane
/// role label and `NoSchedule` taint on the Node.
async fn imitate_mark_control_plane(client: &kube::Client, name: &str) -> Result<(), BootError> {
    const ROLE: &str = "node-role.kubernetes.io/control-plane";
    let patch = json!({
        "metadata": { "labels": { ROLE: "" } },
        "spec": { "taints": [{ "key": ROLE, "effect": "NoSchedule" }] },
    });
    Api::<K8sNode>::all(client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(drop)
        .map_err(|e| BootError::Workload(format!("mark Node {name} as control plane: {e}")))
}

/// What the node lifecycle controller does to a Node whose kubelet stopped posting status: every
/// condition `Unknown` and the `unreachable` taints.
pub async fn mark_unreachable(client: &kube::Client, name: &str) {
    let nodes: Api<K8sNode> = Api::all(client.clone());
    let status = json!({ "status": { "conditions": node_conditions(false) } });
    if let Err(e) = nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
    {
        tracing::warn!(node = %name, error = %e, "Node status not marked unknown");
    }
    let unreachable = "node.kubernetes.io/unreachable";
    let mut taints: Vec<Value> = match nodes.get(name).await {
        Ok(node) => node
            .spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .iter()
            .filter(|t| t.key != unreachable)
            .map(|t| serde_json::to_value(t).expect("a Taint serializes"))
            .collect(),
        Err(e) => {
            tracing::warn!(node = %name, error = %e, "Node not tainted unreachable");
            return;
        }
    };
    taints.push(json!({ "key": unreachable, "effect": "NoSchedule" }));
    taints.push(json!({ "key": unreachable, "effect": "NoExecute", "timeAdded": now() }));
    let patch = json!({ "spec": { "taints": taints } });
    if let Err(e) = nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::warn!(node = %name, error = %e, "Node not tainted unreachable");
    }
}

/// The conditions a kubelet reports (Ready and the three pressure conditions core Cluster API's
/// `NodeHealthy` waits for), or, for a node that stopped answering, what the node lifecycle controller
/// turns them into: all `Unknown`.
fn node_conditions(ready: bool) -> Value {
    let now = now();
    let condition = |type_: &str, healthy: &str, reason: &str, message: &str| {
        let (status, reason, message) = if ready {
            (healthy, reason, message)
        } else {
            (
                "Unknown",
                "NodeStatusUnknown",
                "Kubelet stopped posting node status.",
            )
        };
        json!({ "type": type_, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": now, "lastTransitionTime": now })
    };
    json!([
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status"
        ),
    ])
}

/// The kubelet's heartbeat, as far as the control plane looks at it.
pub async fn set_node_ready(
    client: &kube::Client,
    name: &str,
    ip: Ipv4Addr,
    version: Option<&str>,
    ready: bool,
) -> Result<(), BootError> {
    let version = version.unwrap_or("v0.0.0");
    let nodes: Api<K8sNode> = Api::all(client.clone());
    let status = json!({ "status": {
        "addresses": [{ "type": "InternalIP", "address": ip.to_string() }, { "type": "Hostname", "address": name }],
        "conditions": node_conditions(ready),
        "nodeInfo": { "kubeletVersion": version, "kubeProxyVersion": version, "machineID": "", "systemUUID": "", "bootID": "",
            "kernelVersion": "", "osImage": "sim", "containerRuntimeVersion": "sim://1", "operatingSystem": "linux", "architecture": "amd64" },
    } });
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map(drop)
        .map_err(|e| BootError::Workload(format!("Node {name} status: {e}")))
}

async fn register_static_pods(
    client: &kube::Client,
    node: &str,
    api_address: SocketAddr,
    etcd_client_url: &str,
    patches: &BTreeMap<&'static str, BTreeMap<String, String>>,
) -> Result<(), BootError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    for component in COMPONENTS {
        let name = format!("{component}-{node}");
        let mut annotations: BTreeMap<String, String> = [
            (
                "kubernetes.io/config.mirror",
                format!("{component}-{node}-sim"),
            ),
            ("kubernetes.io/config.source", "file".to_owned()),
            ("kubernetes.io/config.seen", now()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        match component {
            "kube-apiserver" => {
                annotations.insert(
                    "kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint".into(),
                    api_address.to_string(),
                );
            }
            "etcd" => {
                annotations.insert(
                    "kubeadm.kubernetes.io/etcd.advertise-client-urls".into(),
                    etcd_client_url.to_owned(),
                );
            }
            _ => {}
        }
        if let Some(extra) = patches.get(component) {
            annotations.extend(extra.clone());
        }
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": name, "namespace": "kube-system",
                "labels": { "component": component, "tier": "control-plane" },
                "annotations": annotations,
            },
            "spec": {
                "nodeName": node,
                "priorityClassName": "system-node-critical",
                "containers": [{ "name": component, "image": format!("registry.k8s.io/{component}:sim") }],
            },
        }))
        .expect("a valid pod");
        match pods.create(&PostParams::default(), &pod).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(BootError::Workload(format!("mirror pod {name}: {e}"))),
        }
        let status = json!({ "status": {
            "phase": "Running",
            "conditions": [{ "type": "Ready", "status": "True", "lastTransitionTime": now() }],
        } });
        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(|e| BootError::Workload(format!("mirror pod {name} status: {e}")))?;
    }
    Ok(())
}

/// What core Cluster API and the kubelet leave behind when a node goes: its Node and mirror pods.
pub async fn deregister(client: &kube::Client, node: &str) {
    forget_mirror_pods(client, node).await;
    let _ = Api::<K8sNode>::all(client.clone())
        .delete(node, &delete_now())
        .await;
}

/// Deletes the mirror pods of a node that is gone, as the pod garbage collector of a controller manager
/// would once its Node is deleted.
pub async fn forget_mirror_pods(client: &kube::Client, node: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    for component in COMPONENTS {
        let _ = pods
            .delete(&format!("{component}-{node}"), &delete_now())
            .await;
    }
}

fn delete_now() -> kube::api::DeleteParams {
    kube::api::DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_real_kubeadm_refuses_stops_the_boot() {
        if testenv::binaries::management().unwrap().legacy() {
            // kubeadm 1.20 reads no v1beta4; nothing is checked on the fallback.
            testenv::missing(
                "the current kubeadm",
                "the management plane runs the fallback releases",
            );
            return;
        }
        let valid = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\n\
                     discovery:\n  bootstrapToken:\n    token: abcdef.0123456789abcdef\n\
                     \x20   apiServerEndpoint: 127.0.0.1:6443\n    unsafeSkipCAVerification: true\n";
        // v1beta4 goes to the Machine's kubeadm (the current one for a Machine that names none), v1beta3
        // (Kubernetes < 1.31) to kubeadm 1.30.
        let newest = testenv::binaries::newest_kubernetes();
        for (valid, version) in [
            (valid.to_owned(), None),
            (valid.to_owned(), Some(newest.as_str())),
            (valid.replace("v1beta4", "v1beta3"), Some("v1.30.14")),
        ] {
            check_with_real_kubeadm(&valid, version).unwrap();
            let refused =
                check_with_real_kubeadm(&valid.replace("abcdef.", "not-a-token."), version)
                    .unwrap_err()
                    .to_string();
            assert!(
                refused.starts_with("kubeadm refuses the configuration:")
                    && refused.contains("not-a-token"),
                "{refused}"
            );
        }
        assert_eq!(
            BootError::KubeadmRefused(String::new()).reason(),
            "InvalidBootstrapData"
        );
    }

    /// A member whose kernel accepts connections while etcd does not serve them (still starting, or
    /// frozen) costs one question its bound, not the boot: the gRPC client alone waits for the TLS
    /// handshake forever.
    #[tokio::test]
    async fn a_member_that_accepts_and_never_answers_is_given_up_within_the_bound() {
        let ca = Ca::new("etcd-ca").unwrap();
        let access = EtcdAccess {
            ca_pem: ca.cert_pem().to_owned(),
            client: ca.issue("client", None, &[], Usage::Client).unwrap(),
        };
        // Listening, never accepting: the handshake gets no answer.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("https://{}", silent.local_addr().unwrap());
        let asked = Instant::now();
        let answer = tokio::time::timeout(
            ETCD_CALL_TIMEOUT * 3,
            access.ask(&url, |mut c| async move { c.status().await }),
        )
        .await
        .expect("the question ended by itself");
        let error = answer.unwrap_err();
        assert!(error.contains("did not answer within 5s"), "{error}");
        assert!(error.contains(&url), "{error}");
        assert!(
            asked.elapsed() >= ETCD_CALL_TIMEOUT,
            "{:?}",
            asked.elapsed()
        );
    }
}
