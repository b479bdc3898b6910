//! A control-plane node booted by real kubeadm: its phases run against the node's root folder
//! (`--rootfs`) inside the node's network namespace ([`crate::netns`]), and etcd and kube-apiserver start
//! from the manifests kubeadm wrote ([`crate::kubelet`]), each the build of the release its image names.
//! The kubeadm is the Machine's release where it is built here (the current one and `hack/tools/k8s-1.N`),
//! else the current release's; kubeadm 1.30 for a configuration in kubeadm API v1beta3.
//!
//! `kubeadm init`: `certs`, `kubeconfig`, `etcd local`, `control-plane`; once the API server answers,
//! the load balancer knows it and the Node is registered, `upload-config`, `mark-control-plane` and
//! `bootstrap-token`, in kubeadm's order.
//! A control-plane `kubeadm join`: token discovery and `control-plane-prepare` (certificates,
//! kubeconfigs, manifests), then the etcd join — `etcd-join` (1.33+, `ControlPlaneKubeletLocalMode` on by
//! default), `control-plane-join etcd` before — in which kubeadm adds the member as a learner, writes the
//! etcd manifest, waits for the member to start (the simulator starts it from the manifest, as the
//! kubelet would) and promotes it; then kube-apiserver from its manifest and `control-plane-join
//! mark-control-plane`.
//!
//! What stays simulated, because it needs a kubelet or a container runtime: `preflight`, `kubelet-start`
//! (the simulator registers the Node), `wait-control-plane`, `upload-certs`, the add-ons' pods (kubeadm
//! creates their DaemonSet and Deployment, which nothing runs), the worker's
//! join (only its bootstrap token is checked); because kube-controller-manager is not run, its bootstrap
//! signer ([`sign_cluster_info`]). A configuration that turns `ControlPlaneKubeletLocalMode` off on
//! kubeadm 1.34 is not supported by the simulator (its etcd member would be added by
//! `control-plane-join all` after the kube-apiserver start the simulator waits for).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::cloud_config::BootPlan;
use crate::faults::Fault;
use crate::kubeadm_config::NodeFacts;
use crate::kubelet::StaticPods;
use crate::netns::{Fabric, NodeNetns};
use crate::node::{self, BootError, BootRequest, EtcdAccess, Node};

const ETCD_CLIENT_PORT: u16 = 2379;
const ETCD_PEER_PORT: u16 = 2380;
/// kubeadm's default `localAPIEndpoint.bindPort`.
const API_SERVER_PORT: u16 = 6443;
const KUBELET_SYNC: Duration = Duration::from_millis(100);

/// The network of nodes booted by real kubeadm, or why nodes imitate kubeadm on loopback addresses instead:
/// the management plane runs the fallback releases (kubeadm 1.20 reads no v1beta3/v1beta4), the current
/// kubeadm is not built, this machine does not let us create network namespaces, or `SIM_KUBEADM=imitate`.
pub fn fabric() -> Result<Fabric, String> {
    if std::env::var("SIM_KUBEADM").is_ok_and(|v| v == "imitate") {
        return Err("SIM_KUBEADM=imitate".into());
    }
    let binaries = testenv::binaries::management().map_err(|e| e.to_string())?;
    if binaries.legacy() {
        return Err("the management plane runs the fallback releases; kubeadm 1.20 reads no v1beta3/v1beta4".into());
    }
    binaries.kubeadm().map_err(|e| e.to_string())?;
    Fabric::create().map_err(|e| e.to_string())
}

/// kubeadm of the node's release, run on the node.
struct Kubeadm<'a> {
    binary: PathBuf,
    /// kubeadm 1.30, for a configuration in kubeadm API v1beta3 (Kubernetes < 1.31).
    v1beta3: bool,
    netns: &'a NodeNetns,
    rootfs: &'a Path,
    /// The configuration file, as a path on the node.
    config: &'a str,
    log: PathBuf,
}

impl<'a> Kubeadm<'a> {
    fn new(
        req: &'a BootRequest,
        plan: &'a BootPlan,
        netns: &'a NodeNetns,
        rootfs: &'a Path,
    ) -> Result<Self, BootError> {
        let text = plan.kubeadm_config()?;
        let binary = testenv::kubeadm::kubeadm_for_machine(text, req.version.as_deref())
            .map_err(|e| BootError::Kubeadm(e.to_string()))?;
        Ok(Self {
            binary,
            v1beta3: testenv::kubeadm::is_v1beta3(text),
            netns,
            rootfs,
            config: plan.kubeadm.config_path(),
            log: req.dir.join("kubeadm.log"),
        })
    }

    /// Runs `kubeadm init phase P…` for each phase `P…`, in order.
    async fn init_phases(&self, phases: &[&[&str]]) -> Result<(), BootError> {
        for phase in phases {
            let args: Vec<&str> = ["init", "phase"].iter().chain(*phase).copied().collect();
            self.run(&args).await?;
        }
        Ok(())
    }

    fn command(&self, args: &[&str]) -> Result<tokio::process::Command, BootError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| BootError::Io(format!("{}: {e}", self.log.display())))?;
        let err = log
            .try_clone()
            .map_err(|e| BootError::Io(format!("{}: {e}", self.log.display())))?;
        let mut command = self.netns.command(&self.binary);
        command
            .args(args)
            .arg("--config")
            .arg(self.config)
            .arg("--rootfs")
            .arg(self.rootfs)
            .arg("--v=1")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err);
        let mut command = tokio::process::Command::from(command);
        // A boot that is given up on (the machine deleted) takes its kubeadm with it.
        command.kill_on_drop(true);
        Ok(command)
    }

    /// The phase that adds the etcd member: `etcd-join` where `ControlPlaneKubeletLocalMode` exists and
    /// is on by default (1.33+), the `etcd` step of `control-plane-join` before.
    fn etcd_join_phase(&self) -> &'static [&'static str] {
        if self.v1beta3 {
            &["join", "phase", "control-plane-join", "etcd"]
        } else {
            &["join", "phase", "etcd-join"]
        }
    }

    fn failed(&self, args: &[&str], status: std::process::ExitStatus) -> BootError {
        BootError::Kubeadm(format!(
            "kubeadm {} ({status}); last lines of {}:\n{}",
            args.join(" "),
            self.log.display(),
            testenv::process::log_tail(&self.log, 15)
        ))
    }

    async fn run(&self, args: &[&str]) -> Result<(), BootError> {
        let status = self
            .command(args)?
            .status()
            .await
            .map_err(|e| BootError::Kubeadm(format!("kubeadm {}: {e}", args.join(" "))))?;
        if status.success() {
            Ok(())
        } else {
            Err(self.failed(args, status))
        }
    }
}

/// The cluster CA (certificate, key) from the bootstrap data.
fn cluster_ca(plan: &BootPlan) -> Result<(String, String), BootError> {
    Ok((
        plan.file("/etc/kubernetes/pki/ca.crt")?.to_owned(),
        plan.file("/etc/kubernetes/pki/ca.key")?.to_owned(),
    ))
}

/// `kubeadm init` on the first control-plane node.
pub async fn init(
    req: &BootRequest,
    plan: &BootPlan,
    facts: &NodeFacts,
    netns: &NodeNetns,
    rootfs: &Path,
) -> Result<Node, BootError> {
    let kubeadm = Kubeadm::new(req, plan, netns, rootfs)?;
    let binaries = testenv::binaries::management().map_err(|e| BootError::Etcd(e.to_string()))?;
    kubeadm
        .init_phases(&[&["certs", "all"], &["kubeconfig", "all"]])
        .await?;
    if plan.restores_etcd {
        // The restore script asks this kubeadm, on the node, for the etcd manifest it would write.
        let shim = kubeadm.netns.command(&kubeadm.binary);
        let line: Vec<String> = std::iter::once(shim.get_program())
            .chain(shim.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let shim = format!(
            "#!/bin/sh\nexec {} \"$@\" --rootfs {} --v=1\n",
            line.join(" "),
            rootfs.display()
        );
        node::restore_etcd(req, plan, rootfs, &shim, binaries.legacy())?;
    }
    kubeadm
        .init_phases(&[&["etcd", "local"], &["control-plane", "all"]])
        .await?;
    let mut pods = StaticPods::new(rootfs, &req.dir);
    let ip = netns.ip();
    let access = node::etcd_access(plan)?;
    let client_url = format!("https://{ip}:{ETCD_CLIENT_PORT}");
    pods.start("etcd", netns)?;
    node::wait_etcd_ready(
        &access,
        &client_url,
        pods.process_mut("etcd").expect("started"),
    )
    .await?;

    let (local, api_server) = start_api_server(&mut pods, plan, netns).await?;
    // admin.conf points at the control-plane endpoint: the load balancer must know this node first.
    if let Some(lb) = &req.lb {
        lb.add(api_server);
    }
    // The kubelet registers the Node before `upload-config` (kubeadm 1.30 annotates it there).
    node::register_node(&local, req, &facts.node_name).await?;
    pods.serve_kubelet_api(netns)?;
    kubeadm
        .init_phases(&[
            &["upload-config", "all"],
            &["mark-control-plane"],
            &["bootstrap-token"],
            // kube-proxy's DaemonSet and CoreDNS's Deployment, which the control plane's upgrades update
            // (nothing runs their pods here).
            &["addon", "all"],
        ])
        .await?;
    pods.register_mirror_pods(&local, &facts.node_name).await?;
    finish(req, plan, facts, pods, api_server, client_url, None)
}

/// A control-plane `kubeadm join`.
pub async fn join(
    req: &BootRequest,
    plan: &BootPlan,
    facts: &NodeFacts,
    netns: &NodeNetns,
    rootfs: &Path,
    workload: &kube::Client,
) -> Result<Node, BootError> {
    sign_cluster_info(workload).await?;
    let kubeadm = Kubeadm::new(req, plan, netns, rootfs)?;
    kubeadm
        .run(&["join", "phase", "control-plane-prepare", "all"])
        .await?;
    let mut pods = StaticPods::new(rootfs, &req.dir);
    let ip = netns.ip();
    let access = node::etcd_access(plan)?;
    let peer_url = format!("https://{ip}:{ETCD_PEER_PORT}");
    let client_url = format!("https://{ip}:{ETCD_CLIENT_PORT}");

    // kubeadm adds the learner, writes the manifest and waits for the member; the kubelet starts it.
    let args = kubeadm.etcd_join_phase();
    let mut child = kubeadm
        .command(args)?
        .spawn()
        .map_err(|e| BootError::Kubeadm(format!("kubeadm {}: {e}", args.join(" "))))?;
    let mut learner = None;
    let mut start_at: Option<Instant> = None;
    loop {
        if pods.written("etcd") && !pods.is_running("etcd") {
            if learner.is_none() {
                learner = Some(member_id(&access, workload, &peer_url).await?);
            }
            match req.fault {
                Some(Fault::CrashMidJoin) => return Err(BootError::Crashed),
                Some(Fault::EtcdNeverStarts) => {}
                Some(Fault::EtcdSlowStart(delay)) => {
                    start_at.get_or_insert_with(|| {
                        tracing::info!(node = %facts.node_name, ?delay, "etcd starts late (fault injected)");
                        Instant::now() + delay
                    });
                }
                _ => {
                    start_at.get_or_insert_with(Instant::now);
                }
            }
            if start_at.is_some_and(|at| Instant::now() >= at) {
                pods.start("etcd", netns)?;
                if let Some(Fault::PartitionMidJoin(period)) = req.fault {
                    // Cut off while still a learner: kubeadm is held (as by a slow machine) until the
                    // learner runs and answers, since an etcd cut off before it first reached its peers
                    // exits (the never-starting member, another fault), and kubeadm would promote a
                    // learner in sync within a moment.
                    let kubeadm_pid = child.id().unwrap_or_default();
                    testenv::process::set_paused(kubeadm_pid, true);
                    let etcd = pods.process_mut("etcd").ok_or_else(|| {
                        BootError::Etcd("etcd did not start from its manifest".into())
                    })?;
                    let ready = node::wait_etcd_ready(&access, &client_url, etcd).await;
                    let cut = match ready {
                        Ok(()) => partition_start(req, netns, period),
                        Err(e) => Err(e),
                    };
                    testenv::process::set_paused(kubeadm_pid, false);
                    partition_end(req, netns, cut?).await?;
                }
            }
        }
        if let Some(status) = child
            .try_wait()
            .map_err(|e| BootError::Kubeadm(e.to_string()))?
        {
            if req.fault == Some(Fault::EtcdNeverStarts) {
                tracing::info!(node = %facts.node_name, "etcd never starts (fault injected)");
                // The node stays as it is, as one whose kubeadm gave up does.
                std::future::pending::<()>().await;
            }
            if !status.success() {
                return Err(kubeadm.failed(args, status));
            }
            break;
        }
        tokio::time::sleep(KUBELET_SYNC).await;
    }
    node::wait_etcd_ready(
        &access,
        &client_url,
        pods.process_mut("etcd").ok_or_else(|| {
            BootError::Etcd("kubeadm's etcd-join finished without an etcd manifest".into())
        })?,
    )
    .await?;

    let (local, api_server) = start_api_server(&mut pods, plan, netns).await?;
    node::register_node(&local, req, &facts.node_name).await?;
    pods.serve_kubelet_api(netns)?;
    // The kubelet posts its static pods' mirror pods once its Node is registered, whatever kubeadm is
    // still doing meanwhile.
    tokio::try_join!(
        kubeadm.run(&["join", "phase", "control-plane-join", "mark-control-plane"]),
        pods.register_mirror_pods(&local, &facts.node_name),
    )?;
    finish(req, plan, facts, pods, api_server, client_url, learner)
}

/// Cuts the node off the network; noted in the simulator's partition log. Returns how to heal it.
fn partition_start(
    req: &BootRequest,
    netns: &NodeNetns,
    period: Duration,
) -> Result<(usize, Duration), BootError> {
    set_connected(netns, false)?;
    tracing::info!(machine = %req.machine, ?period, "node cut off the network (fault injected)");
    Ok((req.partitions.cut(&req.namespace, &req.machine), period))
}

/// After the partition's period, connects the node again.
async fn partition_end(
    req: &BootRequest,
    netns: &NodeNetns,
    (entry, period): (usize, Duration),
) -> Result<(), BootError> {
    tokio::time::sleep(period).await;
    set_connected(netns, true)?;
    req.partitions.healed(entry);
    tracing::info!(machine = %req.machine, "node connected again");
    Ok(())
}

fn set_connected(netns: &NodeNetns, connected: bool) -> Result<(), BootError> {
    netns
        .set_connected(connected)
        .map_err(|e| BootError::Io(format!("fault partition-mid-join: {e}")))
}

/// Starts kube-apiserver from its manifest and waits until it is ready; returns an admin client to it
/// and its address.
async fn start_api_server(
    pods: &mut StaticPods,
    plan: &BootPlan,
    netns: &NodeNetns,
) -> Result<(kube::Client, SocketAddr), BootError> {
    pods.start("kube-apiserver", netns)?;
    let address = SocketAddr::from((netns.ip(), API_SERVER_PORT));
    let (ca_cert, ca_key) = cluster_ca(plan)?;
    let client = node::admin_client(&format!("https://{address}"), &ca_cert, &ca_key).await?;
    node::wait_api_server_ready(
        &client,
        pods.process_mut("kube-apiserver").expect("started"),
    )
    .await?;
    Ok((client, address))
}

fn finish(
    req: &BootRequest,
    plan: &BootPlan,
    facts: &NodeFacts,
    mut pods: StaticPods,
    api_server: SocketAddr,
    etcd_client_url: String,
    joined_as_learner: Option<u64>,
) -> Result<Node, BootError> {
    Ok(Node {
        name: facts.node_name.clone(),
        ip: req.ip,
        control_plane: true,
        api_server: Some(api_server),
        etcd_client_url: Some(etcd_client_url),
        joined_as_learner,
        cluster_ca: Some(cluster_ca(plan)?),
        etcd: pods.take("etcd"),
        apiserver: pods.take("kube-apiserver"),
        kubelet: pods.take(crate::kubelet::KUBELET_API),
        reported_exits: Vec::new(),
        netns: req.netns.clone(),
    })
}

/// The ID of the member kubeadm added with `peer_url`, asked of the voters the etcd pods announce.
async fn member_id(
    access: &EtcdAccess,
    workload: &kube::Client,
    peer_url: &str,
) -> Result<u64, BootError> {
    let voters = node::etcd_urls_from_pods(workload).await?;
    let mut last = String::from("no voter answered");
    for url in &voters {
        match access
            .ask(url, |mut c| async move { c.member_list().await })
            .await
        {
            Ok(list) => {
                if let Some(m) = list
                    .members()
                    .iter()
                    .find(|m| m.peer_urls().iter().any(|u| u == peer_url))
                {
                    return Ok(m.id());
                }
                last = format!("no member with peer URL {peer_url}");
            }
            Err(e) => last = e,
        }
    }
    Err(BootError::Etcd(format!(
        "the learner kubeadm added: {last}"
    )))
}

/// kube-controller-manager's bootstrap signer, which the simulator does not run: signs
/// `kube-public/cluster-info` for every bootstrap token that may sign (`jws-kubeconfig-<token id>`), so
/// that kubeadm's token discovery can trust it.
pub async fn sign_cluster_info(workload: &kube::Client) -> Result<(), BootError> {
    let workload_error = |e: kube::Error| BootError::Workload(format!("bootstrap signer: {e}"));
    let config_maps: Api<ConfigMap> = Api::namespaced(workload.clone(), "kube-public");
    let cluster_info = config_maps
        .get_opt("cluster-info")
        .await
        .map_err(workload_error)?
        .ok_or(BootError::Join {
            what: "discovery",
            reason: "kube-public/cluster-info does not exist (kubeadm init's bootstrap-token phase creates it)".into(),
        })?;
    let kubeconfig = cluster_info
        .data
        .as_ref()
        .and_then(|d| d.get("kubeconfig"))
        .cloned()
        .unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(workload.clone(), "kube-system");
    let tokens = secrets
        .list(&ListParams::default().fields("type=bootstrap.kubernetes.io/token"))
        .await
        .map_err(workload_error)?;
    let mut signatures = serde_json::Map::new();
    for secret in tokens.items {
        let data = secret.data.unwrap_or_default();
        let value = |key: &str| {
            data.get(key)
                .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        };
        if value("usage-bootstrap-signing").as_deref() != Some("true") {
            continue;
        }
        let (Some(id), Some(token_secret)) = (value("token-id"), value("token-secret")) else {
            continue;
        };
        signatures.insert(
            format!("jws-kubeconfig-{id}"),
            json!(detached_jws(&kubeconfig, &id, &token_secret)),
        );
    }
    let patch = json!({ "data": signatures });
    config_maps
        .patch(
            "cluster-info",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(workload_error)?;
    Ok(())
}

/// A JWS over `content` with HS256 keyed by the token secret, its payload left out (`header..signature`),
/// as Kubernetes' `cluster-bootstrap/token/jws` computes and checks it.
pub fn detached_jws(content: &str, token_id: &str, token_secret: &str) -> String {
    use base64::Engine;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let header = b64(json!({ "alg": "HS256", "kid": token_id })
        .to_string()
        .as_bytes());
    let payload = b64(content.as_bytes());
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, token_secret.as_bytes());
    let signature = ring::hmac::sign(&key, format!("{header}.{payload}").as_bytes());
    format!("{header}..{}", b64(signature.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_one_kubernetes_computes() {
        // From k8s.io/cluster-bootstrap/token/jws.ComputeDetachedSignature (v0.34.4) on the same input.
        assert_eq!(
            detached_jws(
                "apiVersion: v1\nkind: Config\nclusters: []\n",
                "abcdef",
                "0123456789abcdef"
            ),
            "eyJhbGciOiJIUzI1NiIsImtpZCI6ImFiY2RlZiJ9..6noRUKYc6IcJatsCC4tJjBE6Jx8UClLwzsstr66SXaM"
        );
    }
}
