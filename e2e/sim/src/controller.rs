//! The simulator's control loop: core Cluster API's Cluster, Machine, MachineSet and MachineDeployment
//! controllers, reduced to what the providers rely on, and the infrastructure provider of the `Sim*`
//! kinds. Each pass lists the objects and takes the next step for each; machines boot in their own tasks.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use kubeadm_api::cluster::v1beta2::{Cluster, Machine, MachineDeployment, MachineSet};
use kubeadm_api::meta::ContractVersionedObjectReference;
use serde_json::{Value, json};

use crate::api::{NodeBackend, SimCluster, SimMachine};
use crate::cloud_config::{self, KubeadmCommand};
use crate::faults::{self, Fault};
use crate::kubeadm_config::{self, InstanceData};
use crate::network::{Addresses, LoadBalancer};
use crate::node::{self, BootError, BootRequest, Node};
use crate::nspawn::{Bootstrap, NodeComponents};
use crate::real_node::{self, RealBoot, RealNode};

pub const MACHINE_FINALIZER: &str = "machine.cluster.x-k8s.io";
/// Held by the infrastructure provider until the node of a deleted SimMachine is stopped.
pub const SIM_MACHINE_FINALIZER: &str = "simmachine.infrastructure.cluster.x-k8s.io";
/// Cluster API's pause annotation (on a Cluster or a Machine), honoured by infrastructure providers.
pub use kubeadm_api::meta::PAUSED_ANNOTATION;
/// What `clusterctl move` puts on each object it deletes from the source plane after copying it: the
/// infrastructure behind it stays.
pub const DELETE_FOR_MOVE_ANNOTATION: &str = "clusterctl.cluster.x-k8s.io/delete-for-move";
pub const MACHINE_SET_FINALIZER: &str = "machineset.cluster.x-k8s.io";
pub const MACHINE_DEPLOYMENT_FINALIZER: &str = "machinedeployment.cluster.x-k8s.io";
pub const PRE_TERMINATE_HOOK_PREFIX: &str = "pre-terminate.delete.hook.machine.cluster.x-k8s.io";
pub use kubeadm_api::meta::{CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL};
pub const SET_NAME_LABEL: &str = "cluster.x-k8s.io/set-name";
pub const DEPLOYMENT_NAME_LABEL: &str = "cluster.x-k8s.io/deployment-name";
pub const TEMPLATE_HASH_LABEL: &str = "machine-template-hash";
/// Bound on every call into a workload cluster, which may be down.
const WORKLOAD_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone, Debug)]
pub struct SimOptions {
    /// Where nodes keep their files, data and logs.
    pub dir: PathBuf,
    /// Only this namespace; all when `None`.
    pub namespace: Option<String>,
    /// Time between passes.
    pub period: Duration,
    /// Who runs core Cluster API's controllers.
    pub core: Core,
}

/// Who runs core Cluster API's Cluster, Machine, MachineSet and MachineDeployment controllers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Core {
    /// The simulator's own reduced stand-in, for fast integration tests without Cluster API's binaries.
    #[default]
    StandIn,
    /// Cluster API's own core manager, running next to the simulator: the simulator is then only the
    /// infrastructure provider of the `Sim*` kinds, following Cluster API's infrastructure contract.
    ClusterApi,
}

/// A running node as tests see it.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub namespace: String,
    pub machine: String,
    pub node: String,
    pub control_plane: bool,
    pub etcd_client_url: Option<String>,
    /// The etcd member ID when the node joined as a learner.
    pub joined_as_learner: Option<u64>,
    pub pids: Vec<u32>,
}

/// A look at a running real node ([`SimView::real_node`]).
#[derive(Clone, Copy, Debug)]
pub struct RealNodeLook {
    pub init_pid: u32,
    pub memory: Option<crate::nspawn::NodeMemory>,
}

/// The running simulator; dropping it stops every process it started.
pub struct Sim {
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.task.abort();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        for (_, runtime) in state.machines.drain() {
            match runtime {
                MachineRuntime::Booting { task, .. } => task.abort(),
                MachineRuntime::Real(node) => node.power_off(),
                other => drop(other),
            }
        }
        state.clusters.clear();
    }
}

impl Sim {
    pub fn start(client: kube::Client, options: SimOptions) -> Self {
        let mut no_fabric = None;
        let fabric = match crate::real_kubeadm::fabric() {
            Ok(fabric) => {
                tracing::info!(gateway = %fabric.gateway(), "nodes boot with real kubeadm in network namespaces");
                Some(Arc::new(fabric))
            }
            Err(why) => {
                // Asked for, imitation is a choice; in CI a missing kubeadm, release or namespace is not.
                let asked = std::env::var("SIM_KUBEADM").is_ok_and(|v| v == "imitate");
                assert!(
                    asked || !testenv::in_ci(),
                    "CI=true: nodes cannot boot with real kubeadm: {why}"
                );
                tracing::info!(%why, "nodes imitate kubeadm on loopback addresses");
                no_fabric = Some(why.to_string());
                None
            }
        };
        let state = Arc::new(Mutex::new(State {
            fabric,
            no_fabric,
            ..State::default()
        }));
        Self::with_state(client, options, state)
    }

    /// A second simulator on another management plane over the same machines, as one cloud serves
    /// two management clusters: it adopts the running nodes of the SimMachines that appear in its plane
    /// (what `clusterctl move` does), while this one lets go of those that leave its plane while their
    /// Cluster is paused or with clusterctl's `delete-for-move` annotation.
    pub fn share_cloud(&self, client: kube::Client, options: SimOptions) -> Self {
        Self::with_state(client, options, self.state.clone())
    }

    fn with_state(client: kube::Client, options: SimOptions, state: Arc<Mutex<State>>) -> Self {
        let controller = Controller {
            client,
            options,
            state: state.clone(),
            written: HashMap::new(),
            mine: HashSet::new(),
            held: HashSet::new(),
        };
        let task = tokio::spawn(controller.run());
        Self { state, task }
    }

    /// Whether nodes run real kubeadm in network namespaces (else they imitate it on loopback addresses).
    pub fn real_kubeadm(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .fabric
            .is_some()
    }

    /// The host's address on the bridge every node's network namespace reaches, when nodes live in
    /// network namespaces: a service the nodes use (an object store, say) listens there.
    pub fn gateway(&self) -> Option<std::net::Ipv4Addr> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.fabric.as_ref().map(|fabric| fabric.gateway())
    }

    /// A view for tasks that outlive a borrow of the simulator.
    pub fn view(&self) -> SimView {
        SimView(self.state.clone())
    }

    /// The nodes that run now.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.view().nodes()
    }

    /// PIDs of every process of every node (booting ones included once they run).
    pub fn pids(&self) -> Vec<u32> {
        self.nodes().into_iter().flat_map(|n| n.pids).collect()
    }

    /// Loses the running node of `namespace/machine` at the simulator's next look, as when its VM dies:
    /// every process stops, its API server leaves the load balancer, its Node is
    /// marked unreachable. Returns whether such a node was running.
    pub fn lose(&self, namespace: &str, machine: &str) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state
            .machines
            .get_mut(&(namespace.to_owned(), machine.to_owned()))
        {
            Some(MachineRuntime::Running { lose_at, .. }) => {
                *lose_at = Some(Instant::now());
                true
            }
            Some(MachineRuntime::Real(node)) if *node.last_seen() == Bootstrap::Succeeded => {
                node.lose_at = Some(Instant::now());
                true
            }
            _ => false,
        }
    }

    /// Reboots the real node of `namespace/machine` that bootstrapped ([`RealNode::reboot`]); blocks while
    /// its systemd shuts down (seconds), the simulator waiting meanwhile. An error says why it could not.
    pub fn reboot(&self, namespace: &str, machine: &str) -> Result<(), String> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state
            .machines
            .get_mut(&(namespace.to_owned(), machine.to_owned()))
        {
            Some(MachineRuntime::Real(node)) if *node.last_seen() == Bootstrap::Succeeded => {
                node.reboot()
            }
            Some(MachineRuntime::Real(_)) => Err(format!("{machine} has not bootstrapped")),
            Some(_) => Err(format!("{machine} is not a real node")),
            None => Err(format!("{namespace}/{machine} does not run")),
        }
    }

    /// Stops the kubelet of the running node of `namespace/machine` (no more port-forwards to its pods)
    /// while its etcd and kube-apiserver keep running; returns whether it had one.
    pub fn stop_kubelet(&self, namespace: &str, machine: &str) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state
            .machines
            .get_mut(&(namespace.to_owned(), machine.to_owned()))
        {
            Some(MachineRuntime::Running { node, .. }) => node.stop_kubelet(),
            Some(MachineRuntime::Real(node)) => node.stop_kubelet(),
            _ => false,
        }
    }

    /// Cuts the running node of `namespace/machine` off the network for `period` (every process keeps
    /// running; nothing reaches it and it reaches nothing), then connects it again; noted in
    /// [`SimView::partitions`]. Returns whether such a node runs in a network namespace of its own.
    pub fn cut_off(&self, namespace: &str, machine: &str, period: Duration) -> bool {
        let (netns, log) = {
            let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            match state
                .machines
                .get(&(namespace.to_owned(), machine.to_owned()))
            {
                Some(MachineRuntime::Running { node, .. }) => match &node.netns {
                    Some(netns) => (netns.clone(), state.partitions.clone()),
                    None => return false,
                },
                Some(MachineRuntime::Real(node)) => (node.netns.clone(), state.partitions.clone()),
                _ => return false,
            }
        };
        if let Err(e) = netns.set_connected(false) {
            tracing::warn!(%machine, error = %e, "could not cut the node off");
            return false;
        }
        tracing::info!(%machine, ?period, "node cut off the network");
        let entry = log.cut(namespace, machine);
        let machine = machine.to_owned();
        tokio::spawn(async move {
            tokio::time::sleep(period).await;
            match netns.set_connected(true) {
                Ok(()) => tracing::info!(%machine, "node connected again"),
                Err(e) => tracing::warn!(%machine, error = %e, "could not connect the node again"),
            }
            log.healed(entry);
        });
        true
    }

    /// The load balancer address of a cluster's control-plane endpoint.
    pub fn endpoint(&self, namespace: &str, sim_cluster: &str) -> Option<std::net::SocketAddr> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .clusters
            .get(&(namespace.to_owned(), sim_cluster.to_owned()))
            .map(|c| c.lb.address())
    }
}

/// Read access to the simulator's nodes.
#[derive(Clone)]
pub struct SimView(Arc<Mutex<State>>);

impl SimView {
    /// The nodes that run now.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        let state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .machines
            .iter()
            .filter_map(|((ns, machine), runtime)| match runtime {
                MachineRuntime::Running { node, .. } => Some(NodeInfo {
                    namespace: ns.clone(),
                    machine: machine.clone(),
                    node: node.name.clone(),
                    control_plane: node.control_plane,
                    etcd_client_url: node.etcd_client_url.clone(),
                    joined_as_learner: node.joined_as_learner,
                    pids: node.pids(),
                }),
                MachineRuntime::Real(node) if *node.last_seen() == Bootstrap::Succeeded => {
                    Some(NodeInfo {
                        namespace: ns.clone(),
                        machine: machine.clone(),
                        node: node.name.clone(),
                        control_plane: node.control_plane,
                        etcd_client_url: node.etcd_client_url(),
                        // kubeadm's learner path is the node's own business here.
                        joined_as_learner: None,
                        pids: node.pid().into_iter().collect(),
                    })
                }
                _ => None,
            })
            .collect()
    }

    /// The real node of `namespace/machine` while it runs: its systemd's PID (to look inside it with
    /// [`crate::nspawn::exec_in`], the simulator not held up meanwhile) and its memory.
    pub fn real_node(&self, namespace: &str, machine: &str) -> Option<RealNodeLook> {
        let state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match state
            .machines
            .get(&(namespace.to_owned(), machine.to_owned()))?
        {
            MachineRuntime::Real(node) => Some(RealNodeLook {
                init_pid: node.init_pid()?,
                memory: node.memory(),
            }),
            _ => None,
        }
    }

    /// Faults applied to booting machines so far, in order: (namespace, machine, fault).
    pub fn applied_faults(&self) -> Vec<(String, String, Fault)> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .applied_faults
            .clone()
    }

    /// Nodes cut off the network so far (partition faults), in order, with when they came back.
    pub fn partitions(&self) -> Vec<faults::Partition> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .partitions
            .all()
    }

    /// What each machine's node is doing, for a failing test to print: booting ones (for how long) with
    /// the tail of every log their boot wrote so far, running, failed and lost ones in a line.
    pub fn describe(&self) -> String {
        let state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        for ((ns, machine), runtime) in &state.machines {
            let line = match runtime {
                MachineRuntime::Booting { ip, dir, since, .. } => {
                    let mut text = format!("booting at {ip} for {:.0?}", since.elapsed());
                    let mut logs: Vec<_> = std::fs::read_dir(dir)
                        .into_iter()
                        .flatten()
                        .flatten()
                        .map(|e| e.path())
                        .filter(|p| p.extension().is_some_and(|x| x == "log"))
                        .collect();
                    logs.sort();
                    for log in logs {
                        let tail = testenv::process::log_tail(&log, 15);
                        text.push_str(&format!(
                            "\n  --- {} ---\n  {}",
                            log.display(),
                            tail.replace('\n', "\n  ")
                        ));
                    }
                    text
                }
                MachineRuntime::Running { node, .. } => format!("running as node {}", node.name),
                MachineRuntime::Real(node) => format!(
                    "real node at {}, {:?} after {:.0?}\n  {}",
                    node.ip(),
                    node.last_seen(),
                    node.since.elapsed(),
                    node.describe().replace('\n', "\n  ")
                ),
                MachineRuntime::Failed {
                    reason, message, ..
                } => format!("failed: {reason}: {message}"),
                MachineRuntime::Lost { node, .. } => format!("lost (node {node})"),
            };
            out.push_str(&format!("machine {ns}/{machine}: {line}\n"));
        }
        out
    }

    /// Boots that failed so far, in order: (namespace, machine, message); kept after the machine goes.
    pub fn failed_boots(&self) -> Vec<(String, String, String)> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .failed_boots
            .clone()
    }
}

type Key = (String, String);

#[derive(Default)]
struct State {
    addresses: Addresses,
    /// Where nodes get their own network namespace and run real kubeadm; `None`: loopback addresses and
    /// kubeadm imitated (see [`crate::real_kubeadm::fabric`]).
    fabric: Option<Arc<crate::netns::Fabric>>,
    /// Why there is no fabric, for clusters of real nodes, which need one.
    no_fabric: Option<String>,
    /// The node images of real nodes, by Kubernetes version, once asked for.
    components: HashMap<String, Arc<NodeComponents>>,
    /// By (namespace, SimCluster name).
    clusters: HashMap<Key, ClusterRuntime>,
    /// By (namespace, Machine name).
    machines: HashMap<Key, MachineRuntime>,
    /// Faults applied to booting machines, in order: (namespace, machine, fault).
    applied_faults: Vec<(String, String, Fault)>,
    /// Nodes cut off the network and healed.
    partitions: faults::PartitionLog,
    /// Boots that failed, in order: (namespace, machine, message).
    failed_boots: Vec<(String, String, String)>,
    /// The (namespace, SimCluster name) of each machine that booted.
    cluster_of: HashMap<Key, Key>,
}

struct ClusterRuntime {
    lb: LoadBalancer,
    workload: Option<kube::Client>,
    /// A fault for the next control-plane join.
    next_join_fault: Option<Fault>,
    /// What its machines are.
    nodes: NodeBackend,
    /// The index of the next real node's pod network ([`real_node::pod_subnet`]); never reused, so that
    /// a route left to a node that went leads nowhere another node is.
    next_pod_subnet: u32,
}

enum MachineRuntime {
    Booting {
        ip: std::net::Ipv4Addr,
        fault: Option<Fault>,
        task: tokio::task::JoinHandle<Result<Node, BootError>>,
        /// Where the boot's logs go, and when it started: what a test names when a boot hangs.
        dir: std::path::PathBuf,
        since: Instant,
    },
    Running {
        node: Box<Node>,
        lose_at: Option<Instant>,
    },
    Failed {
        ip: Option<std::net::Ipv4Addr>,
        reason: String,
        message: String,
    },
    /// A node of the real-node backend, from boot to power-off.
    Real(Box<RealNode>),
    /// The node went away (fault injected); the Machine stays, as it would on a real cloud.
    Lost {
        ip: std::net::Ipv4Addr,
        node: String,
    },
}

struct Controller {
    client: kube::Client,
    options: SimOptions,
    state: Arc<Mutex<State>>,
    /// The last status written per object, to skip writes that change nothing.
    written: HashMap<String, Value>,
    /// The machines this controller booted or adopted: the nodes it answers for.
    mine: HashSet<Key>,
    /// Those of [`Controller::mine`] whose Cluster was paused at the last look: when their objects go
    /// (as `clusterctl move` takes them away), the node is let go, not stopped.
    held: HashSet<Key>,
}

fn resource(group: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1beta2", kind))
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

fn condition(type_: &str, ok: bool, reason: &str, message: &str) -> Value {
    json!({ "type": type_, "status": if ok { "True" } else { "False" }, "reason": reason, "message": message, "lastTransitionTime": now() })
}

/// A Machine's conditions as JSON values, for [`merge_conditions`].
fn conditions_of(machine: &Machine) -> Vec<Value> {
    machine
        .status
        .as_ref()
        .map(|s| {
            s.conditions
                .iter()
                .map(|c| serde_json::to_value(c).expect("serializes"))
                .collect()
        })
        .unwrap_or_default()
}

/// Conditions without their times, to compare desired with written status.
fn without_times(mut status: Value) -> Value {
    if let Some(conditions) = status
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for c in conditions {
            if let Some(o) = c.as_object_mut() {
                o.remove("lastTransitionTime");
            }
        }
    }
    status
}

impl Controller {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn api<K>(&self, ns: &str) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), ns)
    }

    fn list_params(&self) -> ListParams {
        ListParams::default()
    }

    fn all<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        match &self.options.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    async fn run(mut self) {
        // A SimMachine's deletion starts the next pass at once, as an infrastructure provider's
        // controller acts on the watch event: the VM's deletion is a power-off, not a wait for a poll.
        let mut deletions = watcher::watcher(self.all::<SimMachine>(), watcher::Config::default())
            .default_backoff()
            .boxed();
        loop {
            let pass = async {
                self.sim_clusters().await?;
                match self.options.core {
                    Core::StandIn => {
                        self.clusters().await?;
                        self.machine_deployments().await?;
                        self.machine_sets().await?;
                        self.machines().await?;
                    }
                    Core::ClusterApi => self.sim_machines().await?,
                }
                self.workload_clients().await;
                Ok::<(), kube::Error>(())
            };
            if let Err(e) = pass.await {
                tracing::debug!(error = %e, "pass failed; next pass retries");
            }
            let period = tokio::time::sleep(self.options.period);
            tokio::pin!(period);
            loop {
                tokio::select! {
                    () = &mut period => break,
                    event = deletions.next() => match event {
                        Some(Ok(watcher::Event::Apply(sim)))
                            if sim.meta().deletion_timestamp.is_some() => break,
                        Some(_) => {}
                        None => {
                            period.as_mut().await;
                            break;
                        }
                    },
                }
            }
        }
    }

    /// Writes `status` (a `{"status": …}` merge patch) unless the last write was the same.
    async fn write_status(&mut self, api: &Api<DynamicObject>, name: &str, status: Value) {
        let key = format!("{}/{}/{name}", api.resource_url(), name);
        let compared = without_times(status.clone());
        if self.written.get(&key) == Some(&compared) {
            return;
        }
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
        {
            Ok(_) => {
                self.written.insert(key, compared);
            }
            Err(e) => tracing::debug!(object = name, error = %e, "status write failed"),
        }
    }

    fn dynamic(&self, ns: &str, group: &str, kind: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &resource(group, kind))
    }

    // ----------------------------------------------------------------------------------------
    // Infrastructure: SimCluster
    // ----------------------------------------------------------------------------------------

    async fn sim_clusters(&mut self) -> Result<(), kube::Error> {
        let list = self.all::<SimCluster>().list(&self.list_params()).await?;
        for sc in list.items {
            let ns = sc.namespace().unwrap_or_default();
            let name = sc.name_any();
            let key = (ns.clone(), name.clone());
            if !self.lock().clusters.contains_key(&key) {
                let ip = match sc.spec.control_plane_endpoint.as_ref() {
                    Some(e) if !e.host.is_empty() => e.host.parse().ok(),
                    _ => None,
                }
                .unwrap_or_else(|| {
                    let state = self.lock();
                    match &state.fabric {
                        Some(fabric) => fabric.gateway(),
                        None => state.addresses.next(),
                    }
                });
                let port = sc
                    .spec
                    .control_plane_endpoint
                    .as_ref()
                    .map(|e| e.port as u16)
                    .filter(|p| *p > 0)
                    .unwrap_or(6443);
                let lb = match LoadBalancer::start(ip, port).await {
                    Ok(lb) => lb,
                    Err(e) => {
                        tracing::warn!(sim_cluster = %name, error = %e, "cannot start the load balancer");
                        continue;
                    }
                };
                tracing::info!(sim_cluster = %name, endpoint = %lb.address(), "load balancer started");
                self.lock().clusters.insert(
                    key.clone(),
                    ClusterRuntime {
                        lb,
                        workload: None,
                        next_join_fault: None,
                        nodes: sc.spec.nodes,
                        next_pod_subnet: 0,
                    },
                );
            }
            let address = self.lock().clusters[&key].lb.address();
            let api = self.dynamic(&ns, crate::api::GROUP, "SimCluster");
            if sc
                .spec
                .control_plane_endpoint
                .as_ref()
                .is_none_or(|e| e.host.is_empty())
            {
                let patch = json!({ "spec": { "controlPlaneEndpoint": { "host": address.ip().to_string(), "port": address.port() } } });
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
            }
            if let Some(value) = sc.annotations().get(faults::NEXT_JOIN_FAULT_ANNOTATION) {
                let delay = sc
                    .annotations()
                    .get(faults::FAULT_DELAY_ANNOTATION)
                    .map(String::as_str);
                match faults::parse(value, delay) {
                    Ok(fault) => {
                        self.lock()
                            .clusters
                            .get_mut(&key)
                            .expect("inserted above")
                            .next_join_fault = Some(fault);
                        let patch = json!({ "metadata": { "annotations": { faults::NEXT_JOIN_FAULT_ANNOTATION: null } } });
                        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                            .await?;
                        tracing::info!(sim_cluster = %name, ?fault, "fault armed for the next control-plane join");
                    }
                    Err(e) => {
                        tracing::warn!(sim_cluster = %name, error = %e, "ignoring fault annotation")
                    }
                }
            }
            let domains: Vec<Value> = sc
                .spec
                .failure_domains
                .iter()
                .map(|d| json!({ "name": d, "controlPlane": true }))
                .collect();
            let status = json!({ "status": {
                "initialization": { "provisioned": true },
                "ready": true,
                "failureDomains": domains,
            } });
            self.write_status(&api, &name, status).await;
        }
        Ok(())
    }

    /// Once a control-plane node of a cluster runs, the simulator talks to the workload cluster as an
    /// admin (node registration, faults).
    async fn workload_clients(&mut self) {
        let wanted: Vec<(Key, String, (String, String))> = {
            let state = self.lock();
            state
                .clusters
                .iter()
                .filter(|(_, cluster)| cluster.workload.is_none())
                .filter_map(|(cluster_key, cluster)| {
                    let ca = state.machines.iter().find_map(|(key, m)| match m {
                        MachineRuntime::Running { node, .. }
                            if state.cluster_of.get(key) == Some(cluster_key) =>
                        {
                            node.cluster_ca.clone()
                        }
                        MachineRuntime::Real(node)
                            if state.cluster_of.get(key) == Some(cluster_key) =>
                        {
                            node.cluster_ca()
                        }
                        _ => None,
                    })?;
                    let url = format!("https://{}", cluster.lb.address());
                    Some((cluster_key.clone(), url, ca))
                })
                .collect()
        };
        for (cluster_key, url, (cert, key_pem)) in wanted {
            match node::admin_client(&url, &cert, &key_pem).await {
                Ok(client) => {
                    if let Some(c) = self.lock().clusters.get_mut(&cluster_key) {
                        c.workload = Some(client);
                    }
                }
                Err(e) => {
                    tracing::warn!(cluster = %cluster_key.1, error = %e, "no workload client")
                }
            }
        }
    }

    // ----------------------------------------------------------------------------------------
    // Core: Cluster
    // ----------------------------------------------------------------------------------------

    async fn clusters(&mut self) -> Result<(), kube::Error> {
        let list = self.all::<Cluster>().list(&self.list_params()).await?;
        for cluster in list.items {
            let ns = cluster.namespace().unwrap_or_default();
            let name = cluster.name_any();
            let Some(infra) = cluster.spec.infrastructure_ref.clone() else {
                continue;
            };
            if infra.kind != "SimCluster" {
                continue;
            }
            let Some(sc) = self.api::<SimCluster>(&ns).get_opt(&infra.name).await? else {
                continue;
            };
            // The Cluster owns its infrastructure and control plane, as core Cluster API records it.
            let owner = owner_ref(&cluster, "Cluster");
            self.ensure_owner(&ns, crate::api::GROUP, "SimCluster", &infra.name, &owner)
                .await?;
            if let Some(cp) = &cluster.spec.control_plane_ref {
                self.ensure_owner(&ns, &cp.api_group, &cp.kind, &cp.name, &owner)
                    .await?;
            }
            let api = self.dynamic(&ns, "cluster.x-k8s.io", "Cluster");
            let endpoint = sc
                .spec
                .control_plane_endpoint
                .clone()
                .filter(|e| !e.host.is_empty());
            let has_endpoint = cluster
                .spec
                .control_plane_endpoint
                .as_ref()
                .is_some_and(|e| e.host.as_deref().is_some_and(|h| !h.is_empty()));
            if let (false, Some(e)) = (has_endpoint, &endpoint) {
                let patch = json!({ "spec": { "controlPlaneEndpoint": { "host": e.host, "port": e.port } } });
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
            }
            let provisioned = sc
                .status
                .as_ref()
                .and_then(|s| s.initialization.as_ref())
                .and_then(|i| i.provisioned)
                == Some(true);
            let cp_initialized = match &cluster.spec.control_plane_ref {
                Some(r) => self
                    .dynamic(&ns, &r.api_group, &r.kind)
                    .get_opt(&r.name)
                    .await?
                    .and_then(|cp| {
                        cp.data
                            .pointer("/status/initialization/controlPlaneInitialized")
                            .and_then(Value::as_bool)
                    })
                    .unwrap_or(false),
                None => false,
            };
            let domains = sc
                .status
                .as_ref()
                .map(|s| s.failure_domains.clone())
                .unwrap_or_default();
            let phase = if !provisioned {
                "Provisioning"
            } else {
                "Provisioned"
            };
            let status = json!({ "status": {
                "initialization": { "infrastructureProvisioned": provisioned, "controlPlaneInitialized": cp_initialized },
                "failureDomains": domains,
                "phase": phase,
                "conditions": [
                    condition("InfrastructureReady", provisioned, if provisioned { "Ready" } else { "NotReady" }, ""),
                    condition("ControlPlaneInitialized", cp_initialized, if cp_initialized { "Initialized" } else { "NotInitialized" }, ""),
                ],
            } });
            self.write_status(&api, &name, status).await;
        }
        Ok(())
    }

    /// Adds `owner` to the object's owner references unless an owner with that UID is there.
    async fn ensure_owner(
        &self,
        ns: &str,
        group: &str,
        kind: &str,
        name: &str,
        owner: &Value,
    ) -> Result<(), kube::Error> {
        let api = self.dynamic(ns, group, kind);
        let Some(obj) = api.get_opt(name).await? else {
            return Ok(());
        };
        let uid = owner["uid"].as_str().unwrap_or_default();
        if obj.owner_references().iter().any(|o| o.uid == uid) {
            return Ok(());
        }
        let mut owners: Vec<Value> = obj
            .owner_references()
            .iter()
            .map(|o| serde_json::to_value(o).expect("serializes"))
            .collect();
        let mut owner = owner.clone();
        // Only one controller owner is allowed; the Cluster owns without controlling.
        owner["controller"] = json!(false);
        owners.push(owner);
        let patch = json!({ "metadata": { "ownerReferences": owners } });
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop)
    }

    // ----------------------------------------------------------------------------------------
    // Core: MachineDeployment → MachineSets
    // ----------------------------------------------------------------------------------------

    async fn machine_deployments(&mut self) -> Result<(), kube::Error> {
        let list = self
            .all::<MachineDeployment>()
            .list(&self.list_params())
            .await?;
        for md in list.items {
            let ns = md.namespace().unwrap_or_default();
            let name = md.name_any();
            let md_api = self.api::<MachineDeployment>(&ns);
            let set_api = self.api::<MachineSet>(&ns);
            let owned: Vec<MachineSet> = set_api
                .list(&ListParams::default().labels(&format!("{DEPLOYMENT_NAME_LABEL}={name}")))
                .await?
                .items;
            if md.meta().deletion_timestamp.is_some() {
                for set in owned
                    .iter()
                    .filter(|s| s.meta().deletion_timestamp.is_none())
                {
                    set_api
                        .delete(&set.name_any(), &DeleteParams::default())
                        .await?;
                }
                if owned.is_empty() {
                    remove_finalizer(
                        &md_api,
                        &name,
                        md.finalizers(),
                        MACHINE_DEPLOYMENT_FINALIZER,
                    )
                    .await?;
                }
                continue;
            }
            add_finalizer(
                &md_api,
                &name,
                md.finalizers(),
                MACHINE_DEPLOYMENT_FINALIZER,
            )
            .await?;
            let hash = template_hash(
                &md.spec.template.spec.bootstrap.config_ref,
                &md.spec.template.spec.infrastructure_ref,
                md.spec.template.spec.version.as_deref(),
            );
            let desired_name = format!("{name}-{hash}");
            let replicas = md.spec.replicas.unwrap_or(1);
            let current = owned.iter().find(|s| s.name_any() == desired_name);
            match current {
                None => {
                    let mut labels: BTreeMap<String, String> = md
                        .spec
                        .template
                        .metadata
                        .as_ref()
                        .map(|m| m.labels.clone())
                        .unwrap_or_default();
                    labels.insert(CLUSTER_NAME_LABEL.into(), md.spec.cluster_name.clone());
                    labels.insert(DEPLOYMENT_NAME_LABEL.into(), name.clone());
                    labels.insert(TEMPLATE_HASH_LABEL.into(), hash.clone());
                    let mut template = serde_json::to_value(&md.spec.template).expect("serializes");
                    template["metadata"]["labels"] = json!(labels);
                    let set = json!({
                        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
                        "metadata": {
                            "name": desired_name, "namespace": ns, "labels": labels,
                            "ownerReferences": [owner_ref(&md, "MachineDeployment")],
                        },
                        "spec": {
                            "clusterName": md.spec.cluster_name,
                            "replicas": replicas,
                            "selector": { "matchLabels": { DEPLOYMENT_NAME_LABEL: name, TEMPLATE_HASH_LABEL: hash } },
                            "template": template,
                        },
                    });
                    let set: MachineSet = serde_json::from_value(set).expect("a valid MachineSet");
                    tracing::info!(machine_deployment = %name, machine_set = %desired_name, "creating MachineSet");
                    set_api.create(&PostParams::default(), &set).await?;
                }
                Some(set) => {
                    if set.spec.replicas != Some(replicas) {
                        let patch = json!({ "spec": { "replicas": replicas } });
                        set_api
                            .patch(
                                &desired_name,
                                &PatchParams::default(),
                                &Patch::Merge(&patch),
                            )
                            .await?;
                    }
                    // The new set is complete: the old ones go.
                    let ready = set
                        .status
                        .as_ref()
                        .and_then(|s| s.ready_replicas)
                        .unwrap_or(0);
                    if ready >= replicas {
                        for old in owned.iter().filter(|s| {
                            s.name_any() != desired_name && s.meta().deletion_timestamp.is_none()
                        }) {
                            tracing::info!(machine_deployment = %name, machine_set = %old.name_any(), "removing outdated MachineSet");
                            set_api
                                .delete(&old.name_any(), &DeleteParams::default())
                                .await?;
                        }
                    }
                }
            }
            let sum =
                |f: fn(&kubeadm_api::cluster::v1beta2::MachineSetStatus) -> Option<i32>| -> i32 {
                    owned
                        .iter()
                        .filter_map(|s| s.status.as_ref().and_then(f))
                        .sum()
                };
            let up_to_date = current
                .and_then(|s| s.status.as_ref())
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            let total = sum(|s| s.replicas);
            let ready = sum(|s| s.ready_replicas);
            let phase = if owned.len() == 1 && ready == replicas && total == replicas {
                "Running"
            } else {
                "ScalingUp"
            };
            let status = json!({ "status": {
                "replicas": total, "readyReplicas": ready, "availableReplicas": ready, "upToDateReplicas": up_to_date,
                "selector": format!("{DEPLOYMENT_NAME_LABEL}={name}"), "phase": phase,
            } });
            let api = self.dynamic(&ns, "cluster.x-k8s.io", "MachineDeployment");
            self.write_status(&api, &name, status).await;
        }
        Ok(())
    }

    // ----------------------------------------------------------------------------------------
    // Core: MachineSet → Machines
    // ----------------------------------------------------------------------------------------

    async fn machine_sets(&mut self) -> Result<(), kube::Error> {
        let list = self.all::<MachineSet>().list(&self.list_params()).await?;
        for set in list.items {
            let ns = set.namespace().unwrap_or_default();
            let name = set.name_any();
            let set_api = self.api::<MachineSet>(&ns);
            let machine_api = self.api::<Machine>(&ns);
            let mut owned: Vec<Machine> = machine_api
                .list(&ListParams::default().labels(&format!("{SET_NAME_LABEL}={name}")))
                .await?
                .items;
            owned.sort_by_key(|m| m.creation_timestamp().map(|t| t.0));
            if set.meta().deletion_timestamp.is_some() {
                for m in owned
                    .iter()
                    .filter(|m| m.meta().deletion_timestamp.is_none())
                {
                    machine_api
                        .delete(&m.name_any(), &DeleteParams::default())
                        .await?;
                }
                if owned.is_empty() {
                    remove_finalizer(&set_api, &name, set.finalizers(), MACHINE_SET_FINALIZER)
                        .await?;
                }
                continue;
            }
            add_finalizer(&set_api, &name, set.finalizers(), MACHINE_SET_FINALIZER).await?;
            let live: Vec<&Machine> = owned
                .iter()
                .filter(|m| m.meta().deletion_timestamp.is_none())
                .collect();
            let replicas = set.spec.replicas.unwrap_or(1).max(0) as usize;
            if live.len() < replicas {
                self.create_machine(&set).await?;
            } else if live.len() > replicas {
                // Newest first: the oldest machines have served longest without trouble.
                let victim = live.last().expect("more than zero");
                tracing::info!(machine_set = %name, machine = %victim.name_any(), "scaling down");
                machine_api
                    .delete(&victim.name_any(), &DeleteParams::default())
                    .await?;
            }
            let ready = owned
                .iter()
                .filter(|m| m.status.as_ref().is_some_and(|s| s.node_ref.is_some()))
                .count() as i32;
            let status = json!({ "status": {
                "replicas": owned.len(), "readyReplicas": ready, "availableReplicas": ready, "upToDateReplicas": ready,
                "selector": format!("{SET_NAME_LABEL}={name}"),
            } });
            let api = self.dynamic(&ns, "cluster.x-k8s.io", "MachineSet");
            self.write_status(&api, &name, status).await;
        }
        Ok(())
    }

    /// One Machine from the set's template, with its bootstrap config and infrastructure machine cloned
    /// from their templates and owned by the Machine.
    async fn create_machine(&mut self, set: &MachineSet) -> Result<(), kube::Error> {
        let ns = set.namespace().unwrap_or_default();
        let set_name = set.name_any();
        let suffix = random_suffix();
        let name = format!("{set_name}-{suffix}");
        let spec = &set.spec.template.spec;
        let Some(config_template) = spec.bootstrap.config_ref.clone() else {
            tracing::warn!(machine_set = %set_name, "template has no bootstrap.configRef; nothing to create");
            return Ok(());
        };
        let infra_template = spec.infrastructure_ref.clone();
        let bootstrap_tpl = self
            .dynamic(&ns, &config_template.api_group, &config_template.kind)
            .get(&config_template.name)
            .await?;
        let infra_tpl = self
            .dynamic(&ns, &infra_template.api_group, &infra_template.kind)
            .get(&infra_template.name)
            .await?;
        let mut labels: BTreeMap<String, String> = set
            .spec
            .template
            .metadata
            .as_ref()
            .map(|m| m.labels.clone())
            .unwrap_or_default();
        labels.insert(CLUSTER_NAME_LABEL.into(), set.spec.cluster_name.clone());
        labels.insert(SET_NAME_LABEL.into(), set_name.clone());
        let annotations = set
            .spec
            .template
            .metadata
            .as_ref()
            .map(|m| m.annotations.clone())
            .unwrap_or_default();
        let config_kind = config_template.kind.trim_end_matches("Template").to_owned();
        let infra_kind = infra_template.kind.trim_end_matches("Template").to_owned();
        let machine = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {
                "name": name, "namespace": ns, "labels": labels, "annotations": annotations,
                "ownerReferences": [owner_ref(set, "MachineSet")],
            },
            "spec": {
                "clusterName": set.spec.cluster_name,
                "version": spec.version,
                "bootstrap": { "configRef": { "apiGroup": config_template.api_group, "kind": config_kind, "name": name } },
                "infrastructureRef": { "apiGroup": infra_template.api_group, "kind": infra_kind, "name": name },
                "failureDomain": spec.failure_domain,
            },
        });
        let machine: Machine = serde_json::from_value(machine).expect("a valid Machine");
        let created = self
            .api::<Machine>(&ns)
            .create(&PostParams::default(), &machine)
            .await?;
        let owner = owner_ref(&created, "Machine");
        let template_meta = |tpl: &DynamicObject| {
            let mut meta = tpl
                .data
                .pointer("/spec/template/metadata")
                .cloned()
                .unwrap_or(json!({}));
            let mut l: BTreeMap<String, String> = meta
                .get("labels")
                .and_then(|l| serde_json::from_value(l.clone()).ok())
                .unwrap_or_default();
            l.insert(CLUSTER_NAME_LABEL.into(), set.spec.cluster_name.clone());
            meta["labels"] = json!(l);
            meta["name"] = json!(name);
            meta["namespace"] = json!(ns);
            meta["ownerReferences"] = json!([owner]);
            meta
        };
        let config = json!({
            "apiVersion": format!("{}/v1beta2", config_template.api_group), "kind": config_kind,
            "metadata": template_meta(&bootstrap_tpl),
            "spec": bootstrap_tpl.data.pointer("/spec/template/spec").cloned().unwrap_or(json!({})),
        });
        let infra = json!({
            "apiVersion": format!("{}/v1beta2", infra_template.api_group), "kind": infra_kind,
            "metadata": template_meta(&infra_tpl),
            "spec": infra_tpl.data.pointer("/spec/template/spec").cloned().unwrap_or(json!({})),
        });
        let post = |kind: &str, group: &str, value: Value| {
            let api = self.dynamic(&ns, group, kind);
            async move {
                let obj: DynamicObject = serde_json::from_value(value).expect("a valid object");
                api.create(&PostParams::default(), &obj).await
            }
        };
        post(&config_kind, &config_template.api_group, config).await?;
        post(&infra_kind, &infra_template.api_group, infra).await?;
        tracing::info!(machine_set = %set_name, machine = %name, "created Machine");
        Ok(())
    }

    // ----------------------------------------------------------------------------------------
    // Core: Machine, and the SimMachine it boots
    // ----------------------------------------------------------------------------------------

    async fn machines(&mut self) -> Result<(), kube::Error> {
        let list = self.all::<Machine>().list(&self.list_params()).await?;
        let present: HashSet<Key> = list
            .items
            .iter()
            .map(|m| (m.namespace().unwrap_or_default(), m.name_any()))
            .collect();
        // Machines deleted behind our back (finalizer removed by someone else): stop their nodes.
        self.stop_all_but(&present);
        for machine in list.items {
            if let Err(e) = self.machine(&machine).await {
                tracing::debug!(machine = %machine.name_any(), error = %e, "machine pass failed");
            }
        }
        Ok(())
    }

    fn cluster_key(&self, ns: &str, cluster: &Cluster) -> Option<Key> {
        let infra = cluster.spec.infrastructure_ref.as_ref()?;
        (infra.kind == "SimCluster").then(|| (ns.to_owned(), infra.name.clone()))
    }

    async fn machine(&mut self, machine: &Machine) -> Result<(), kube::Error> {
        let ns = machine.namespace().unwrap_or_default();
        let name = machine.name_any();
        let key = (ns.clone(), name.clone());
        let machine_api = self.api::<Machine>(&ns);
        let Some(cluster) = self
            .api::<Cluster>(&ns)
            .get_opt(&machine.spec.cluster_name)
            .await?
        else {
            return Ok(());
        };
        let Some(cluster_key) = self.cluster_key(&ns, &cluster) else {
            return Ok(());
        };
        let infra = &machine.spec.infrastructure_ref;
        let sim_machine = if infra.kind == "SimMachine" {
            self.api::<SimMachine>(&ns).get_opt(&infra.name).await?
        } else {
            None
        };

        if machine.meta().deletion_timestamp.is_some() {
            return self.delete_machine(machine, &cluster_key).await;
        }
        add_finalizer(&machine_api, &name, machine.finalizers(), MACHINE_FINALIZER).await?;
        // The Machine owns its bootstrap config and infrastructure machine, which is how the bootstrap
        // provider finds the Machine of a config.
        let owner = owner_ref(machine, "Machine");
        if let Some(r) = &machine.spec.bootstrap.config_ref {
            self.ensure_owner(&ns, &r.api_group, &r.kind, &r.name, &owner)
                .await?;
        }
        self.ensure_owner(&ns, &infra.api_group, &infra.kind, &infra.name, &owner)
            .await?;

        // Bootstrap data: copied from the bootstrap config's status, as core Cluster API does.
        let mut data_secret = machine.spec.bootstrap.data_secret_name.clone();
        if data_secret.is_none()
            && let Some(config_ref) = &machine.spec.bootstrap.config_ref
            && let Some(config) = self
                .dynamic(&ns, &config_ref.api_group, &config_ref.kind)
                .get_opt(&config_ref.name)
                .await?
            && let Some(secret) = config
                .data
                .pointer("/status/dataSecretName")
                .and_then(Value::as_str)
        {
            let patch = json!({ "spec": { "bootstrap": { "dataSecretName": secret } } });
            machine_api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            data_secret = Some(secret.to_owned());
        }

        let has_runtime = self.lock().machines.contains_key(&key);
        if !has_runtime && let (Some(secret), Some(sim)) = (&data_secret, &sim_machine) {
            self.start_boot(machine, sim, secret, &cluster_key).await?;
        }
        self.settle_boot(&key, &cluster_key);
        self.write_machine_status(machine, sim_machine.as_ref(), data_secret.is_some())
            .await;
        Ok(())
    }

    /// Reads the bootstrap data and starts the node's boot task, or records why it cannot boot.
    async fn start_boot(
        &mut self,
        machine: &Machine,
        sim: &SimMachine,
        secret_name: &str,
        cluster_key: &Key,
    ) -> Result<(), kube::Error> {
        let ns = machine.namespace().unwrap_or_default();
        let name = machine.name_any();
        let key = (ns.clone(), name.clone());
        self.mine.insert(key.clone());
        let Some(secret) = self.api::<Secret>(&ns).get_opt(secret_name).await? else {
            return Ok(());
        };
        let data = secret
            .data
            .as_ref()
            .and_then(|d| d.get("value"))
            .map(|v| String::from_utf8_lossy(&v.0).into_owned());
        let backend = self.lock().clusters.get(cluster_key).map(|c| c.nodes);
        if backend == Some(NodeBackend::Real) {
            return self
                .start_real_boot(machine, sim, secret_name, data, cluster_key)
                .await;
        }
        let Some((endpoint, workload, next_fault)) =
            self.lock().clusters.get(cluster_key).map(|c| {
                (
                    c.lb.address().to_string(),
                    c.workload.clone(),
                    c.next_join_fault,
                )
            })
        else {
            return Ok(());
        };
        let instance = InstanceData {
            local_hostname: name.clone(),
            instance_id: crate::api::provider_id(&ns, &name),
        };
        let plan = data
            .ok_or_else(|| format!("bootstrap data secret {secret_name} has no key `value`"))
            .and_then(|d| {
                kubeadm_config::render_jinja(&format!("secret {secret_name}"), &d, &instance)
                    .map_err(|e| e.to_string())
            })
            .and_then(|d| {
                cloud_config::parse(&d).map_err(|e| format!("secret {secret_name}: {e}"))
            });
        let plan = match plan {
            Ok(plan) => plan,
            Err(message) => {
                tracing::warn!(machine = %name, %message, "invalid bootstrap data");
                self.lock().machines.insert(
                    key,
                    MachineRuntime::Failed {
                        ip: None,
                        reason: "InvalidBootstrapData".into(),
                        message,
                    },
                );
                return Ok(());
            }
        };
        let join = matches!(plan.kubeadm, KubeadmCommand::Join { .. });
        if join && workload.is_none() {
            // kubeadm join retries discovery until the endpoint answers.
            return Ok(());
        }
        let empty = BTreeMap::new();
        let mut fault = match faults::of_machine(&[
            machine.metadata.annotations.as_ref().unwrap_or(&empty),
            sim.metadata.annotations.as_ref().unwrap_or(&empty),
        ]) {
            Ok(f) => f,
            Err(e) => {
                self.lock().machines.insert(
                    key,
                    MachineRuntime::Failed {
                        ip: None,
                        reason: "InvalidFault".into(),
                        message: e.to_string(),
                    },
                );
                return Ok(());
            }
        };
        let control_plane_join = join && machine.labels().contains_key(CONTROL_PLANE_LABEL);
        if fault.is_none() && control_plane_join && next_fault.is_some() {
            fault = next_fault;
            if let Some(c) = self.lock().clusters.get_mut(cluster_key) {
                c.next_join_fault = None;
            }
        }
        let fabric = self.lock().fabric.clone();
        let (ip, netns) = match fabric {
            Some(fabric) => match fabric.node() {
                Ok(netns) => (netns.ip(), Some(Arc::new(netns))),
                Err(e) => {
                    tracing::warn!(machine = %name, error = %e, "no network for the node; next pass retries");
                    return Ok(());
                }
            },
            None => (self.lock().addresses.next(), None),
        };
        let lb = self.lock().clusters.get(cluster_key).map(|c| c.lb.handle());
        if let Some(fault) = fault {
            self.lock()
                .applied_faults
                .push((ns.clone(), name.clone(), fault));
        }
        let request = BootRequest {
            machine: name.clone(),
            version: machine.spec.version.clone(),
            namespace: ns.clone(),
            ip,
            dir: self.options.dir.join(&ns).join(&name),
            fault,
            endpoint,
            workload,
            netns,
            lb,
            partitions: self.lock().partitions.clone(),
        };
        std::fs::create_dir_all(&request.dir).ok();
        let dir = request.dir.clone();
        tracing::info!(machine = %name, %ip, ?fault, command = ?plan.kubeadm, "booting");
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let result = node::boot(&request, &plan).await;
            match &result {
                Ok(_) => {
                    tracing::info!(machine = %request.machine, elapsed = ?started.elapsed(), "node is up")
                }
                Err(e) => tracing::warn!(machine = %request.machine, error = %e, "boot failed"),
            }
            result
        });
        {
            let mut state = self.lock();
            state.cluster_of.insert(key.clone(), cluster_key.clone());
            state.machines.insert(
                key,
                MachineRuntime::Booting {
                    ip,
                    fault,
                    task,
                    dir,
                    since: Instant::now(),
                },
            );
        }
        self.provisioned(&ns, &name, sim).await
    }

    /// The VM exists: the infrastructure machine is provisioned, with its provider ID.
    async fn provisioned(
        &self,
        ns: &str,
        machine: &str,
        sim: &SimMachine,
    ) -> Result<(), kube::Error> {
        let sim_api = self.dynamic(ns, crate::api::GROUP, "SimMachine");
        let patch = json!({ "spec": { "providerID": crate::api::provider_id(ns, machine) } });
        sim_api
            .patch(
                &sim.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        Ok(())
    }

    /// Boots the machine as a real node ([`real_node`]), or records why it cannot.
    async fn start_real_boot(
        &mut self,
        machine: &Machine,
        sim: &SimMachine,
        secret_name: &str,
        data: Option<String>,
        cluster_key: &Key,
    ) -> Result<(), kube::Error> {
        let ns = machine.namespace().unwrap_or_default();
        let name = machine.name_any();
        let key = (ns.clone(), name.clone());
        let cluster = self
            .api::<Cluster>(&ns)
            .get_opt(&machine.spec.cluster_name)
            .await?;
        let pods =
            cluster.and_then(|c| c.spec.cluster_network?.pods?.cidr_blocks.into_iter().next());
        let request = match self
            .real_boot_request(machine, secret_name, data, pods, cluster_key)
            .await
        {
            Ok(Some(request)) => request,
            Ok(None) => return Ok(()),
            Err((reason, message)) => {
                tracing::warn!(machine = %name, reason, %message, "cannot boot a real node");
                self.lock().machines.insert(
                    key,
                    MachineRuntime::Failed {
                        ip: None,
                        reason: reason.into(),
                        message,
                    },
                );
                return Ok(());
            }
        };
        let ip = request.netns.ip();
        tracing::info!(machine = %name, %ip, pod_network = %request.pod_subnet, "booting a real node");
        // On this thread, one of the runtime's, which lives as long as the simulator: the node's
        // systemd-nspawn dies with the thread that started it (testenv::process), and a blocking-pool
        // thread ends after a few idle seconds. The start takes well under a second (mount, files,
        // routes); cloud-init goes on in the node.
        let booted = RealNode::boot(request);
        let runtime = match booted {
            Ok(node) => {
                // In the pool from the start, as a cloud's load balancer has a VM's address: kubeadm
                // init itself reaches its API server through the control-plane endpoint. Until that
                // listens, connections go to the next backend.
                if let (Some(addr), Some(c)) =
                    (node.api_server(), self.lock().clusters.get(cluster_key))
                {
                    c.lb.add_backend(addr);
                }
                MachineRuntime::Real(Box::new(node))
            }
            Err(message) => {
                tracing::warn!(machine = %name, %message, "the real node did not start");
                self.lock()
                    .failed_boots
                    .push((ns.clone(), name.clone(), message.clone()));
                MachineRuntime::Failed {
                    ip: Some(ip),
                    reason: "NodeNotStarted".into(),
                    message,
                }
            }
        };
        {
            let mut state = self.lock();
            state.cluster_of.insert(key.clone(), cluster_key.clone());
            state.machines.insert(key, runtime);
        }
        self.provisioned(&ns, &name, sim).await
    }

    /// What a real node boots with; `Ok(None)` when the next pass should try again, the reason and
    /// message of a machine that cannot boot as a real node otherwise.
    async fn real_boot_request(
        &mut self,
        machine: &Machine,
        secret_name: &str,
        data: Option<String>,
        pods: Option<String>,
        cluster_key: &Key,
    ) -> Result<Option<RealBoot>, (&'static str, String)> {
        let ns = machine.namespace().unwrap_or_default();
        let name = machine.name_any();
        let user_data = data.ok_or_else(|| {
            (
                "InvalidBootstrapData",
                format!("bootstrap data secret {secret_name} has no key `value`"),
            )
        })?;
        let unavailable = |message: String| ("RealNodesUnavailable", message);
        let fabric = {
            let state = self.lock();
            state.fabric.clone().ok_or_else(|| {
                let why = state.no_fabric.clone().unwrap_or_default();
                unavailable(format!("real nodes need network namespaces: {why}"))
            })?
        };
        // The node image of the Machine's release, as a cloud's image of that release: its kubeadm,
        // kubelet and container images.
        let wanted = machine.spec.version.clone().unwrap_or_default();
        let found = self.lock().components.get(&wanted).cloned();
        let components = match found {
            Some(components) => components,
            None => {
                let version = wanted.clone();
                let found =
                    tokio::task::spawn_blocking(move || NodeComponents::of_release(&version))
                        .await
                        .map_err(|e| unavailable(e.to_string()))?
                        .map_err(|e| {
                            (
                                "MachineImageMismatch",
                                format!("Machine {name} asks for Kubernetes {wanted:?}: {e}"),
                            )
                        })?;
                let found = Arc::new(found);
                self.lock().components.insert(wanted, found.clone());
                found
            }
        };
        let cidr = pods.ok_or_else(|| {
            (
                "InvalidPodNetwork",
                "real nodes need the Cluster's spec.clusterNetwork.pods.cidrBlocks: each node routes a /24 of it".to_owned(),
            )
        })?;
        let index = self
            .lock()
            .clusters
            .get(cluster_key)
            .map_or(0, |c| c.next_pod_subnet);
        let pod_subnet =
            real_node::pod_subnet(&cidr, index).map_err(|e| ("InvalidPodNetwork", e))?;
        let netns = match fabric.node() {
            Ok(netns) => Arc::new(netns),
            Err(e) => {
                tracing::warn!(machine = %name, error = %e, "no network for the node; next pass retries");
                return Ok(None);
            }
        };
        let mut state = self.lock();
        if let Some(c) = state.clusters.get_mut(cluster_key) {
            c.next_pod_subnet = index + 1;
        }
        let peers = state
            .machines
            .iter()
            .filter(|(key, _)| state.cluster_of.get(*key) == Some(cluster_key))
            .filter_map(|(_, runtime)| match runtime {
                MachineRuntime::Real(node) => Some((node.netns.clone(), node.pod_subnet.clone())),
                _ => None,
            })
            .collect();
        Ok(Some(RealBoot {
            namespace: ns.clone(),
            machine: name.clone(),
            dir: self.options.dir.join(&ns).join(&name),
            netns,
            user_data,
            components,
            pod_subnet,
            control_plane: machine.labels().contains_key(CONTROL_PLANE_LABEL),
            peers,
        }))
    }

    /// Moves finished boots to Running or Failed; loses nodes whose fault says so.
    fn settle_boot(&mut self, key: &Key, cluster_key: &Key) {
        let mut state = self.lock();
        let State {
            machines,
            clusters,
            failed_boots,
            ..
        } = &mut *state;
        let Some(runtime) = machines.get_mut(key) else {
            return;
        };
        match runtime {
            MachineRuntime::Booting {
                ip, fault, task, ..
            } if task.is_finished() => {
                let (ip, fault) = (*ip, *fault);
                let result = futures::FutureExt::now_or_never(task).expect("finished");
                *runtime = match result {
                    Ok(Ok(node)) => {
                        if let (Some(addr), Some(c)) = (node.api_server, clusters.get(cluster_key))
                        {
                            c.lb.add_backend(addr);
                        }
                        let lose_at = match fault {
                            Some(Fault::LostAfterJoin(after)) => Some(Instant::now() + after),
                            _ => None,
                        };
                        MachineRuntime::Running {
                            node: Box::new(node),
                            lose_at,
                        }
                    }
                    Ok(Err(e)) => MachineRuntime::Failed {
                        ip: Some(ip),
                        reason: e.reason().into(),
                        message: e.to_string(),
                    },
                    Err(e) => MachineRuntime::Failed {
                        ip: Some(ip),
                        reason: "BootPanicked".into(),
                        message: e.to_string(),
                    },
                };
                if let MachineRuntime::Failed { message, .. } = runtime {
                    failed_boots.push((key.0.clone(), key.1.clone(), message.clone()));
                }
            }
            MachineRuntime::Running { node, lose_at }
                if lose_at.is_some_and(|t| Instant::now() >= t) =>
            {
                tracing::info!(node = %node.name, "node lost (fault injected)");
                if let Some(c) = clusters.get(cluster_key) {
                    if let Some(addr) = node.api_server {
                        c.lb.remove_backend(addr);
                    }
                    // Its kubelet stops posting status: what the node lifecycle controller makes of it.
                    if let Some(workload) = c.workload.clone() {
                        let name = node.name.clone();
                        tokio::spawn(async move {
                            let lost = node::mark_unreachable(&workload, &name);
                            if let Err(e) = tokio::time::timeout(WORKLOAD_TIMEOUT, lost).await {
                                tracing::warn!(node = %name, error = %e, "could not mark the lost node");
                            }
                        });
                    }
                }
                let (ip, name) = (node.ip, node.name.clone());
                let old = std::mem::replace(runtime, MachineRuntime::Lost { ip, node: name });
                // Stopped gracefully, not powered off: the Node is marked unreachable through the
                // workload connection, which may still lead to this node's API server.
                tokio::task::spawn_blocking(move || drop(old));
            }
            // A static pod whose process exited (an etcd member removed from its cluster, a crash): its
            // kubelet reports it not ready.
            MachineRuntime::Running { node, .. } => {
                let exited = node.newly_exited();
                let workload = clusters.get(cluster_key).and_then(|c| c.workload.clone());
                if let (false, Some(workload)) = (exited.is_empty(), workload) {
                    let name = node.name.clone();
                    tokio::spawn(async move {
                        for component in exited {
                            let pod = format!("{component}-{name}");
                            let report = node::report_not_ready(&workload, &pod);
                            let _ = tokio::time::timeout(WORKLOAD_TIMEOUT, report).await;
                        }
                    });
                }
            }
            // Powered off (fault injected): its kubelet stops posting status, and the workload cluster's
            // node-lifecycle controller makes of it what it does.
            MachineRuntime::Real(node) if node.lose_at.is_some_and(|t| Instant::now() >= t) => {
                tracing::info!(node = %node.name, "real node powered off (fault injected)");
                if let (Some(addr), Some(c)) = (node.api_server(), clusters.get(cluster_key)) {
                    c.lb.remove_backend(addr);
                }
                let (ip, name) = (node.ip(), node.name.clone());
                let MachineRuntime::Real(node) =
                    std::mem::replace(runtime, MachineRuntime::Lost { ip, node: name })
                else {
                    unreachable!("matched above");
                };
                tokio::task::spawn_blocking(move || node.power_off());
            }
            MachineRuntime::Real(node) if *node.last_seen() == Bootstrap::Running => {
                node.look_at_cloud_init();
                match node.bootstrap().clone() {
                    Bootstrap::Running => {}
                    Bootstrap::Succeeded => {
                        tracing::info!(machine = %key.1, elapsed = ?node.since.elapsed(), "real node bootstrapped");
                    }
                    // The VM keeps running, as a cloud's does; its Machine reports the failure.
                    Bootstrap::Failed(message) => {
                        tracing::warn!(machine = %key.1, %message, "real node's bootstrap failed");
                        failed_boots.push((key.0.clone(), key.1.clone(), message));
                    }
                }
            }
            MachineRuntime::Real(node) => node.look_at_cloud_init(),
            _ => {}
        }
    }

    /// What the machine's node is doing, as the Machine and SimMachine status report it.
    fn observe(&self, key: &Key, bootstrap_ready: bool) -> Observed {
        let state = self.lock();
        let (phase, node, ip, failure) = match state.machines.get(key) {
            None if bootstrap_ready => ("Provisioning", None, None, None),
            None => ("Pending", None, None, None),
            Some(MachineRuntime::Booting { ip, .. }) => ("Provisioned", None, Some(*ip), None),
            Some(MachineRuntime::Running { node, .. }) => {
                ("Running", Some(node.name.clone()), Some(node.ip), None)
            }
            Some(MachineRuntime::Real(node)) => match node.last_seen() {
                Bootstrap::Running => ("Provisioned", None, Some(node.ip()), None),
                Bootstrap::Succeeded => ("Running", Some(node.name.clone()), Some(node.ip()), None),
                Bootstrap::Failed(message) => (
                    "Failed",
                    None,
                    Some(node.ip()),
                    Some(("BootstrapFailed".to_owned(), message.clone())),
                ),
            },
            Some(MachineRuntime::Lost { ip, node }) => (
                "Running",
                Some(node.clone()),
                Some(*ip),
                Some((
                    "NodeLost".to_owned(),
                    format!("node {node} stopped answering"),
                )),
            ),
            Some(MachineRuntime::Failed {
                ip,
                reason,
                message,
            }) => ("Failed", None, *ip, Some((reason.clone(), message.clone()))),
        };
        let addresses = ip
            .map(|ip| {
                vec![
                    json!({ "type": "InternalIP", "address": ip.to_string() }),
                    json!({ "type": "Hostname", "address": key.1 }),
                ]
            })
            .unwrap_or_default();
        let console = match state.machines.get(key) {
            Some(MachineRuntime::Real(node)) => node
                .cloud_init()
                .map(|errors| {
                    let ok = errors.is_empty();
                    let reason = if ok { "Succeeded" } else { "ModulesFailed" };
                    vec![condition(
                        "CloudInitSucceeded",
                        ok,
                        reason,
                        &errors.join("; "),
                    )]
                })
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        Observed {
            console,
            phase,
            node,
            provisioned: ip.is_some(),
            addresses,
            failure,
        }
    }

    /// The SimMachine's status: provisioned once its node has an address (the VM exists).
    async fn write_sim_machine_status(&mut self, sim: &SimMachine, observed: &Observed) {
        let ns = sim.namespace().unwrap_or_default();
        let api = self.dynamic(&ns, crate::api::GROUP, "SimMachine");
        let failure = observed.failure.as_ref();
        let existing: Vec<Value> = sim
            .status
            .iter()
            .flat_map(|s| &s.conditions)
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect();
        let mut status = json!({ "status": {
            "initialization": { "provisioned": observed.provisioned },
            "ready": observed.provisioned,
            "addresses": observed.addresses,
            "failureReason": failure.map(|f| f.0.clone()),
            "failureMessage": failure.map(|f| f.1.clone()),
        } });
        if !observed.console.is_empty() {
            status["status"]["conditions"] =
                json!(merge_conditions(&existing, observed.console.clone()));
        }
        self.write_status(&api, &sim.name_any(), status).await;
    }

    async fn write_machine_status(
        &mut self,
        machine: &Machine,
        sim: Option<&SimMachine>,
        bootstrap_ready: bool,
    ) {
        let ns = machine.namespace().unwrap_or_default();
        let name = machine.name_any();
        let key = (ns.clone(), name.clone());
        let observed = self.observe(&key, bootstrap_ready);
        if let Some(sim) = sim {
            self.write_sim_machine_status(sim, &observed).await;
        }
        let Observed {
            phase,
            node,
            provisioned,
            addresses,
            failure,
            ..
        } = observed;
        if provisioned && machine.spec.provider_id.is_none() {
            let patch = json!({ "spec": { "providerID": crate::api::provider_id(&ns, &name) } });
            let _ = self
                .api::<Machine>(&ns)
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
        }
        let running = node.is_some() && failure.is_none();
        let message = failure.as_ref().map(|f| f.1.clone()).unwrap_or_default();
        let ours = [
            condition(
                "Ready",
                running,
                if running { "Ready" } else { "NotReady" },
                &message,
            ),
            condition(
                "Available",
                running,
                if running { "Available" } else { "NotAvailable" },
                &message,
            ),
            condition(
                "InfrastructureReady",
                provisioned,
                if provisioned { "Ready" } else { "NotReady" },
                "",
            ),
            condition(
                "BootstrapConfigReady",
                bootstrap_ready,
                if bootstrap_ready { "Ready" } else { "NotReady" },
                "",
            ),
        ];
        let conditions = merge_conditions(&conditions_of(machine), ours.to_vec());
        let mut status = json!({ "status": {
            "phase": phase,
            "initialization": { "bootstrapDataSecretCreated": bootstrap_ready, "infrastructureProvisioned": provisioned },
            "addresses": addresses,
            "conditions": conditions,
        } });
        if let Some(node) = node {
            status["status"]["nodeRef"] = json!({ "name": node });
        }
        if let Some((reason, message)) = &failure {
            status["status"]["deprecated"] =
                json!({ "v1beta1": { "failureReason": reason, "failureMessage": message } });
        }
        let api = self.dynamic(&ns, "cluster.x-k8s.io", "Machine");
        self.write_status(&api, &name, status).await;
    }

    /// A deleted Machine goes once no pre-terminate hook holds it: the node stops, leaves the workload
    /// cluster, its bootstrap config and infrastructure machine are deleted, then the finalizer.
    async fn delete_machine(
        &mut self,
        machine: &Machine,
        cluster_key: &Key,
    ) -> Result<(), kube::Error> {
        let ns = machine.namespace().unwrap_or_default();
        let name = machine.name_any();
        let held = machine
            .annotations()
            .keys()
            .any(|k| k.starts_with(PRE_TERMINATE_HOOK_PREFIX));
        let api = self.dynamic(&ns, "cluster.x-k8s.io", "Machine");
        if held {
            // Nothing to drain here: the Machine goes straight to its pre-terminate hooks, and says so
            // as the core manager does.
            use kubeadm_api::controlplane::conditions::{machine, reasons};
            let deleting = condition(
                machine::DELETING,
                true,
                reasons::WAITING_FOR_PRE_TERMINATE_HOOK,
                "Waiting for pre-terminate hooks to succeed",
            );
            let conditions = merge_conditions(&conditions_of(machine), vec![deleting]);
            let status = json!({ "status": { "phase": "Deleting", "conditions": conditions } });
            self.write_status(&api, &name, status).await;
            return Ok(());
        }
        if let Some((workload, node_name)) =
            self.stop_node(&(ns.clone(), name.clone()), cluster_key)
        {
            let _ = tokio::time::timeout(WORKLOAD_TIMEOUT, node::deregister(&workload, &node_name))
                .await;
        }
        if let Some(r) = &machine.spec.bootstrap.config_ref {
            delete_ignoring_missing(&self.dynamic(&ns, &r.api_group, &r.kind), &r.name).await?;
        }
        let infra = &machine.spec.infrastructure_ref;
        delete_ignoring_missing(
            &self.dynamic(&ns, &infra.api_group, &infra.kind),
            &infra.name,
        )
        .await?;
        remove_finalizer(
            &self.api::<Machine>(&ns),
            &name,
            machine.finalizers(),
            MACHINE_FINALIZER,
        )
        .await
    }
}

impl Controller {
    /// Stops the nodes of every machine of ours not in `present` (its object went behind our back),
    /// except those of paused Clusters: their objects moved to another management plane.
    fn stop_all_but(&mut self, present: &HashSet<Key>) {
        let gone: Vec<Key> = self
            .mine
            .iter()
            .filter(|k| !present.contains(*k))
            .cloned()
            .collect();
        for key in gone {
            self.mine.remove(&key);
            if self.held.remove(&key) {
                tracing::info!(machine = %key.1, "let go: its objects left while its Cluster was paused");
                continue;
            }
            let mut state = self.lock();
            state.cluster_of.remove(&key);
            stop_runtime(state.machines.remove(&key));
        }
    }

    /// Stops the machine's node, taking its API server out of the load balancer; returns the workload
    /// client and the Node's name when the node had registered.
    fn stop_node(&mut self, key: &Key, cluster_key: &Key) -> Option<(kube::Client, String)> {
        let mut state = self.lock();
        let runtime = state.machines.remove(key);
        state.cluster_of.remove(key);
        let cluster = state.clusters.get(cluster_key);
        let node_name = match &runtime {
            Some(MachineRuntime::Running { node, .. }) => {
                if let (Some(addr), Some(c)) = (node.api_server, cluster) {
                    c.lb.remove_backend(addr);
                }
                Some(node.name.clone())
            }
            Some(MachineRuntime::Real(node)) => {
                if let (Some(addr), Some(c)) = (node.api_server(), cluster) {
                    c.lb.remove_backend(addr);
                }
                (*node.last_seen() == Bootstrap::Succeeded).then(|| node.name.clone())
            }
            Some(MachineRuntime::Lost { node, .. }) => Some(node.clone()),
            _ => None,
        };
        let workload = cluster.and_then(|c| c.workload.clone());
        drop(state);
        if let Some(MachineRuntime::Booting { .. }) = &runtime {
            // Stopped before it came up (remediated, or deleted): say how far its kubeadm got.
            let log = self
                .options
                .dir
                .join(&key.0)
                .join(&key.1)
                .join("kubeadm.log");
            tracing::warn!(
                machine = %key.1,
                "stopping a node that is still booting; last lines of {}:\n{}",
                log.display(),
                testenv::process::log_tail(&log, 20)
            );
        } else if runtime.is_some() {
            tracing::info!(machine = %key.1, "stopping node");
        }
        stop_runtime(runtime);
        workload.zip(node_name)
    }

    // ----------------------------------------------------------------------------------------
    // Infrastructure: SimMachine, next to Cluster API's own core manager
    // ----------------------------------------------------------------------------------------

    async fn sim_machines(&mut self) -> Result<(), kube::Error> {
        let list = self.all::<SimMachine>().list(&self.list_params()).await?;
        // SimMachines deleted behind our back (finalizer removed by someone else): stop their nodes.
        let present: HashSet<Key> = list
            .items
            .iter()
            .filter_map(|sim| Some((sim.namespace()?, owner_machine(sim)?)))
            .collect();
        self.stop_all_but(&present);
        for sim in list.items {
            if let Err(e) = self.sim_machine(&sim).await {
                tracing::debug!(sim_machine = %sim.name_any(), error = %e, "sim machine pass failed");
            }
        }
        Ok(())
    }

    /// One SimMachine by Cluster API's infrastructure contract: it boots once its owning Machine (set
    /// by the core manager) has bootstrap data, reports `spec.providerID`, addresses and
    /// `status.initialization.provisioned`, and on deletion stops its node before letting go.
    async fn sim_machine(&mut self, sim: &SimMachine) -> Result<(), kube::Error> {
        let ns = sim.namespace().unwrap_or_default();
        let sim_api = self.api::<SimMachine>(&ns);
        let Some(machine_name) = owner_machine(sim) else {
            return Ok(());
        };
        let key = (ns.clone(), machine_name.clone());
        let cluster_name = sim
            .labels()
            .get(CLUSTER_NAME_LABEL)
            .cloned()
            .unwrap_or_default();
        let cluster = self.api::<Cluster>(&ns).get_opt(&cluster_name).await?;
        let cluster_key = cluster.as_ref().and_then(|c| self.cluster_key(&ns, c));
        if sim.meta().deletion_timestamp.is_some() {
            if sim.annotations().contains_key(DELETE_FOR_MOVE_ANNOTATION) {
                // The object moves to another management plane; the VM stays.
                self.mine.remove(&key);
                self.held.remove(&key);
            } else if let Some(cluster_key) = &cluster_key
                && let Some((workload, node_name)) = self.stop_node(&key, cluster_key)
            {
                // The VM goes; its mirror pods go with the Node the core manager deletes next (the
                // pod garbage collector's job, which no controller manager does here). Off the pass:
                // a VM's deletion does not wait for the workload cluster, whose connection may still
                // lead to the API server just stopped.
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(
                        WORKLOAD_TIMEOUT,
                        node::forget_mirror_pods(&workload, &node_name),
                    )
                    .await;
                });
            }
            return remove_finalizer(
                &sim_api,
                &sim.name_any(),
                sim.finalizers(),
                SIM_MACHINE_FINALIZER,
            )
            .await;
        }
        let (Some(cluster), Some(cluster_key)) = (cluster, cluster_key) else {
            return Ok(());
        };
        let paused = |meta: &kube::api::ObjectMeta| {
            meta.annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(PAUSED_ANNOTATION))
        };
        if cluster.spec.paused == Some(true) || paused(cluster.meta()) || paused(sim.meta()) {
            self.held.insert(key);
            return Ok(());
        }
        self.held.remove(&key);
        add_finalizer(
            &sim_api,
            &sim.name_any(),
            sim.finalizers(),
            SIM_MACHINE_FINALIZER,
        )
        .await?;
        let Some(machine) = self.api::<Machine>(&ns).get_opt(&machine_name).await? else {
            return Ok(());
        };
        let data_secret = machine.spec.bootstrap.data_secret_name.clone();
        let has_runtime = self.lock().machines.contains_key(&key);
        if has_runtime && self.mine.insert(key.clone()) {
            tracing::info!(machine = %machine_name, "adopted the running node of a SimMachine new to this plane");
        }
        if !has_runtime && let Some(secret) = &data_secret {
            self.start_boot(&machine, sim, secret, &cluster_key).await?;
        }
        self.settle_boot(&key, &cluster_key);
        let observed = self.observe(&key, data_secret.is_some());
        self.write_sim_machine_status(sim, &observed).await;
        Ok(())
    }
}

/// The Machine that owns an infrastructure machine (the core manager sets this owner reference).
fn owner_machine(sim: &SimMachine) -> Option<String> {
    sim.owner_references()
        .iter()
        .find(|o| o.kind == "Machine" && o.api_version.starts_with("cluster.x-k8s.io/"))
        .map(|o| o.name.clone())
}

/// A machine's node as the simulator sees it.
struct Observed {
    /// What the machine's console shows (real nodes: cloud-init's result), as SimMachine conditions.
    console: Vec<Value>,
    phase: &'static str,
    node: Option<String>,
    provisioned: bool,
    addresses: Vec<Value>,
    failure: Option<(String, String)>,
}

/// Ends a machine's VM, deleted or dead: a booting one's boot is cancelled, a running node is powered
/// off (off the control loop: reaping waits for the processes to exit), a real node's disk deleted with
/// it (each holds about a gigabyte; a rollout chain would otherwise fill this machine's disk). A graceful
/// stop would hold the leaving kube-apiserver, whose etcd member is already gone, for its whole SIGTERM
/// grace while the load balancer's connections to it hang; no cloud waits for that.
fn stop_runtime(runtime: Option<MachineRuntime>) {
    match runtime {
        Some(MachineRuntime::Booting { task, .. }) => task.abort(),
        Some(MachineRuntime::Running { mut node, .. }) => {
            tokio::task::spawn_blocking(move || node.power_off());
        }
        Some(MachineRuntime::Real(node)) => {
            tokio::task::spawn_blocking(move || node.delete());
        }
        _ => {}
    }
}

/// `ours` replace the conditions of the same type, keeping their transition time when the status is
/// unchanged; conditions other controllers set (e.g. `OwnerRemediated`) stay as they are.
fn merge_conditions(existing: &[Value], ours: Vec<Value>) -> Vec<Value> {
    let type_of = |c: &Value| c["type"].as_str().unwrap_or_default().to_owned();
    let mut merged: Vec<Value> = existing
        .iter()
        .filter(|c| !ours.iter().any(|o| type_of(o) == type_of(c)))
        .cloned()
        .collect();
    for mut condition in ours {
        if let Some(old) = existing
            .iter()
            .find(|c| type_of(c) == type_of(&condition) && c["status"] == condition["status"])
        {
            condition["lastTransitionTime"] = old["lastTransitionTime"].clone();
        }
        merged.push(condition);
    }
    merged.sort_by_key(type_of);
    merged
}

async fn delete_ignoring_missing(api: &Api<DynamicObject>, name: &str) -> Result<(), kube::Error> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

async fn add_finalizer<K>(
    api: &Api<K>,
    name: &str,
    current: &[String],
    finalizer: &str,
) -> Result<(), kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if current.iter().any(|f| f == finalizer) {
        return Ok(());
    }
    let mut finalizers = current.to_vec();
    finalizers.push(finalizer.to_owned());
    let patch = json!({ "metadata": { "finalizers": finalizers } });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(drop)
}

async fn remove_finalizer<K>(
    api: &Api<K>,
    name: &str,
    current: &[String],
    finalizer: &str,
) -> Result<(), kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if !current.iter().any(|f| f == finalizer) {
        return Ok(());
    }
    let finalizers: Vec<&String> = current.iter().filter(|f| *f != finalizer).collect();
    let patch = json!({ "metadata": { "finalizers": finalizers } });
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

fn owner_ref<K: Resource<DynamicType = ()>>(obj: &K, kind: &str) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind,
        "name": obj.meta().name, "uid": obj.meta().uid, "controller": true, "blockOwnerDeletion": true,
    })
}

/// A MachineSet per distinct (bootstrap template, infrastructure template, version): a new name of
/// either template rolls the deployment.
pub fn template_hash(
    bootstrap: &Option<ContractVersionedObjectReference>,
    infrastructure: &ContractVersionedObjectReference,
    version: Option<&str>,
) -> String {
    let text = format!(
        "{}/{}|{}/{}|{}",
        bootstrap
            .as_ref()
            .map(|b| b.kind.as_str())
            .unwrap_or_default(),
        bootstrap
            .as_ref()
            .map(|b| b.name.as_str())
            .unwrap_or_default(),
        infrastructure.kind,
        infrastructure.name,
        version.unwrap_or_default()
    );
    // FNV-1a: stable across runs and builds, unlike the std hasher.
    let mut hash: u64 = 0xcbf29ce484222325;
    for b in text.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x100000001b3);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..8)
        .map(|i| ALPHABET[((hash >> (i * 7)) % ALPHABET.len() as u64) as usize] as char)
        .collect()
}

fn random_suffix() -> String {
    use std::hash::{BuildHasher, RandomState};
    let mut n = RandomState::new().hash_one(std::time::SystemTime::now());
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
            n /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(kind: &str, name: &str) -> ContractVersionedObjectReference {
        ContractVersionedObjectReference {
            kind: kind.into(),
            name: name.into(),
            api_group: "x".into(),
        }
    }

    #[test]
    fn a_new_template_name_gives_a_new_machine_set() {
        let bootstrap = Some(reference("KubeadmConfigTemplate", "md-0-genw01"));
        let infra = reference("SimMachineTemplate", "md-0-genw01");
        let a = template_hash(&bootstrap, &infra, Some("v1.33.1"));
        assert_eq!(
            a,
            template_hash(&bootstrap, &infra, Some("v1.33.1")),
            "stable"
        );
        assert_eq!(a.len(), 8);
        assert_ne!(
            a,
            template_hash(
                &bootstrap,
                &reference("SimMachineTemplate", "md-0-genw02"),
                Some("v1.33.1")
            )
        );
        assert_ne!(
            a,
            template_hash(
                &Some(reference("KubeadmConfigTemplate", "md-0-genw02")),
                &infra,
                Some("v1.33.1")
            )
        );
        assert_ne!(a, template_hash(&bootstrap, &infra, Some("v1.34.0")));
    }

    #[test]
    fn other_controllers_conditions_survive_and_unchanged_ones_keep_their_time() {
        let existing = vec![
            json!({ "type": "OwnerRemediated", "status": "False", "reason": "WaitingForRemediation", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z" }),
            json!({ "type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-01-01T00:00:01Z" }),
            json!({ "type": "Available", "status": "False", "reason": "NotAvailable", "message": "", "lastTransitionTime": "2026-01-01T00:00:02Z" }),
        ];
        let merged = merge_conditions(
            &existing,
            vec![
                condition("Ready", true, "Ready", ""),
                condition("Available", true, "Available", ""),
            ],
        );
        let types: Vec<&str> = merged.iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["Available", "OwnerRemediated", "Ready"]);
        assert_eq!(merged[1], existing[0]);
        assert_eq!(merged[2]["lastTransitionTime"], "2026-01-01T00:00:01Z");
        assert_ne!(
            merged[0]["lastTransitionTime"], "2026-01-01T00:00:02Z",
            "a changed status moves its time"
        );
    }

    #[test]
    fn status_comparison_ignores_transition_times() {
        let a = json!({ "status": { "conditions": [condition("Ready", true, "Ready", "")] } });
        std::thread::sleep(Duration::from_millis(2));
        let b = json!({ "status": { "conditions": [condition("Ready", true, "Ready", "")] } });
        assert_eq!(without_times(a), without_times(b));
    }
}
