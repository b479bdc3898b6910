//! The real-node backend: the machines of a SimCluster with `spec.nodes: Real` are systemd-nspawn nodes
//! ([`crate::nspawn`]) in the fabric's network namespaces. The bootstrap data Secret's `value` is the
//! node's NoCloud user-data as it is; real cloud-init runs it, real `kubeadm init`/`join` brings up the
//! kubelet, containerd and the static pods; the kubelet registers the Node. Nothing of what the node does
//! is imitated: the simulator only watches for Cluster API's sentinel or cloud-init's verdict, as a
//! cloud's console shows them, and routes each node's pod network to the others.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crate::netns::NodeNetns;
use crate::nspawn::{Bootstrap, NodeComponents, NodeMemory, NodeSpec, NspawnNode, route_pods};

/// kube-apiserver's port, as kubeadm binds it unless told otherwise.
const API_SERVER_PORT: u16 = 6443;
/// etcd's client port in kubeadm's stacked etcd.
const ETCD_CLIENT_PORT: u16 = 2379;

/// What a real node boots with.
pub struct RealBoot {
    pub namespace: String,
    pub machine: String,
    /// Where the node keeps its root's upper layer, containerd's store and its console log.
    pub dir: PathBuf,
    pub netns: Arc<NodeNetns>,
    /// The bootstrap data, verbatim.
    pub user_data: String,
    pub components: Arc<NodeComponents>,
    /// This node's pod network: a /24 of the cluster's ([`pod_subnet`]).
    pub pod_subnet: String,
    pub control_plane: bool,
    /// The other nodes of the cluster: (network namespace, pod network); routes to and from each are
    /// set before the node boots.
    pub peers: Vec<(Arc<NodeNetns>, String)>,
}

/// A machine of the real-node backend.
pub struct RealNode {
    pub name: String,
    /// cloud-init's instance id (the provider ID), the same across reboots.
    instance_id: String,
    components: Arc<NodeComponents>,
    pub netns: Arc<NodeNetns>,
    pub control_plane: bool,
    pub pod_subnet: String,
    pub dir: PathBuf,
    pub since: Instant,
    /// When to power the node off (fault injected, [`crate::Sim::lose`]).
    pub lose_at: Option<Instant>,
    node: NspawnNode,
    bootstrap: Bootstrap,
    /// The errors cloud-init reported once it finished (each names its module).
    cloud_init: Option<Vec<String>>,
}

impl RealNode {
    /// Routes the pod networks, prepares the node's root and starts it; cloud-init goes on in the node.
    pub fn boot(request: RealBoot) -> Result<Self, String> {
        let ip = request.netns.ip();
        for (peer, peer_subnet) in &request.peers {
            route_pods(peer, &request.pod_subnet, ip)?;
            route_pods(&request.netns, peer_subnet, peer.ip())?;
        }
        let instance_id = crate::api::provider_id(&request.namespace, &request.machine);
        let node = NspawnNode::boot(&NodeSpec {
            name: &request.machine,
            instance_id: &instance_id,
            dir: &request.dir,
            netns: &request.netns,
            user_data: &request.user_data,
            kubernetes: Some(&request.components),
            pod_subnet: Some(&request.pod_subnet),
        })
        .map_err(|e| e.to_string())?;
        Ok(Self {
            name: request.machine,
            instance_id,
            components: request.components,
            netns: request.netns,
            control_plane: request.control_plane,
            pod_subnet: request.pod_subnet,
            dir: request.dir,
            since: Instant::now(),
            lose_at: None,
            node,
            bootstrap: Bootstrap::Running,
            cloud_init: None,
        })
    }

    pub fn ip(&self) -> Ipv4Addr {
        self.netns.ip()
    }

    /// Where the bootstrap stands; looked at again only while cloud-init runs.
    pub fn bootstrap(&mut self) -> &Bootstrap {
        if self.bootstrap == Bootstrap::Running {
            self.bootstrap = self.node.bootstrap();
        }
        &self.bootstrap
    }

    /// Looks again whether cloud-init finished (it writes its result after the bootstrap's last
    /// command), until it has.
    pub fn look_at_cloud_init(&mut self) {
        if self.cloud_init.is_none() {
            self.cloud_init = self.node.cloud_init_errors();
        }
    }

    /// The errors cloud-init reported, once it finished.
    pub fn cloud_init(&self) -> Option<&[String]> {
        self.cloud_init.as_deref()
    }

    /// The bootstrap's state as last seen.
    pub fn last_seen(&self) -> &Bootstrap {
        &self.bootstrap
    }

    /// Its API server, for a control-plane node.
    pub fn api_server(&self) -> Option<SocketAddr> {
        self.control_plane
            .then(|| SocketAddr::from((self.ip(), API_SERVER_PORT)))
    }

    /// Its etcd member's client URL, for a control-plane node.
    pub fn etcd_client_url(&self) -> Option<String> {
        self.control_plane
            .then(|| format!("https://{}:{ETCD_CLIENT_PORT}", self.ip()))
    }

    /// The cluster CA (certificate, key) as kubeadm left it on a control-plane node that bootstrapped.
    pub fn cluster_ca(&self) -> Option<(String, String)> {
        if !self.control_plane || self.bootstrap != Bootstrap::Succeeded {
            return None;
        }
        Some((
            self.node.read("/etc/kubernetes/pki/ca.crt")?,
            self.node.read("/etc/kubernetes/pki/ca.key")?,
        ))
    }

    /// PID of the node's systemd (in this machine's namespace), once it runs.
    pub fn init_pid(&self) -> Option<u32> {
        self.node.init_pid()
    }

    /// What the node uses of this machine's memory.
    pub fn memory(&self) -> Option<NodeMemory> {
        self.node.memory()
    }

    /// PID of the node's `systemd-nspawn`.
    pub fn pid(&self) -> Option<u32> {
        self.node.pid()
    }

    /// Stops the kubelet (the node's systemd stops the unit); false when it could not be asked.
    pub fn stop_kubelet(&self) -> bool {
        self.node
            .exec(&["systemctl", "stop", "kubelet.service"])
            .is_ok_and(|o| o.status.success())
    }

    /// The end of the node's console and of cloud-init's output: what a test prints when a boot hangs.
    pub fn describe(&self) -> String {
        let output = self
            .node
            .exec(&["tail", "-n", "15", "/var/log/cloud-init-output.log"])
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        format!(
            "console:\n{}\ncloud-init output:\n{output}",
            self.node.console_tail(10)
        )
    }

    /// Reboots the node ([`NspawnNode::reboot`]): the same disk, network and instance; blocks while its
    /// systemd shuts down.
    pub fn reboot(&mut self) -> Result<(), String> {
        self.node
            .reboot(&NodeSpec {
                name: &self.name,
                instance_id: &self.instance_id,
                dir: &self.dir,
                netns: &self.netns,
                // Read only when a root is prepared for a first boot, which a reboot is not.
                user_data: "",
                kubernetes: Some(&self.components),
                pod_subnet: Some(&self.pod_subnet),
            })
            .map_err(|e| e.to_string())
    }

    /// Powers the node off: everything in it ends at once, nothing shuts down.
    pub fn power_off(mut self) {
        self.node.power_off();
    }

    /// Deletes the machine's VM: powered off, and its disk deleted with it.
    pub fn delete(mut self) {
        self.node.power_off();
        self.node.delete_disk();
    }
}

/// The `index`th /24 of the cluster's pod network `cidr` (IPv4, a prefix of /8 to /23): each node's
/// bridge CNI hands out addresses of its own /24, as a cloud's pod network would route them.
pub fn pod_subnet(cidr: &str, index: u32) -> Result<String, String> {
    let invalid = |why: &str| format!("pod network {cidr:?}: {why}");
    let (address, prefix) = cidr
        .split_once('/')
        .ok_or_else(|| invalid("not an IPv4 CIDR block"))?;
    let address: Ipv4Addr = address
        .parse()
        .map_err(|_| invalid("not an IPv4 CIDR block"))?;
    let prefix: u32 = prefix
        .parse()
        .map_err(|_| invalid("not an IPv4 CIDR block"))?;
    if !(8..=23).contains(&prefix) {
        return Err(invalid(
            "real nodes need a prefix of /8 to /23 (a /24 per node)",
        ));
    }
    let blocks = 1u32 << (24 - prefix);
    if index >= blocks {
        return Err(invalid(&format!(
            "has {blocks} node networks (/24), all used"
        )));
    }
    let base = u32::from(address) & (u32::MAX << (32 - prefix));
    Ok(format!("{}/24", Ipv4Addr::from(base + (index << 8))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_node_gets_the_next_24_of_the_pod_network() {
        assert_eq!(pod_subnet("192.168.0.0/16", 0).unwrap(), "192.168.0.0/24");
        assert_eq!(pod_subnet("192.168.0.0/16", 3).unwrap(), "192.168.3.0/24");
        assert_eq!(pod_subnet("10.244.0.0/16", 255).unwrap(), "10.244.255.0/24");
        // Host bits of the block are ignored, as Kubernetes does.
        assert_eq!(pod_subnet("198.19.130.7/17", 1).unwrap(), "198.19.129.0/24");
        assert_eq!(pod_subnet("10.0.0.0/8", 256).unwrap(), "10.1.0.0/24");
    }

    #[test]
    fn a_pod_network_without_room_for_a_node_is_refused_by_name() {
        let full = pod_subnet("192.168.0.0/23", 2).unwrap_err();
        assert!(
            full.contains("\"192.168.0.0/23\"") && full.contains("2 node networks"),
            "{full}"
        );
        let small = pod_subnet("192.168.0.0/25", 0).unwrap_err();
        assert!(small.contains("/8 to /23"), "{small}");
        let v6 = pod_subnet("fd00::/64", 0).unwrap_err();
        assert!(v6.contains("not an IPv4 CIDR block"), "{v6}");
    }
}
