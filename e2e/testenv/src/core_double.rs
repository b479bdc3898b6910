//! A stand-in for core Cluster API's Machine controller and for the nodes, for tests of the providers:
//! every Machine gets a finalizer, a Node (`status.nodeRef`), Ready/Available conditions and, in
//! `kube-system`, running mirror pods of the four control-plane static pods with the annotations kubeadm
//! and our patches put on them; the first Node makes the cluster initialized the way `kubeadm init` shows
//! it (the `kube-system/kubeadm-config` ConfigMap). The workload cluster is the same apiserver; the mirror
//! pods carry their cluster's name label, so a [`crate::front::Front`] can narrow them to one cluster.
//!
//! A deleted Machine goes only once no pre-terminate hook annotation is left, as core Cluster API does.
//! With [`EtcdSim`], each control-plane node also runs a real etcd member: the first starts the cluster, the
//! next ones join as learners through the etcd API (and stay learners: promoting them is the control
//! plane's job), and the etcd pod announces the member's client URL. A deleted machine's etcd process stops.
//!
//! It records how many Machines have a Node after each pass and which Machines disappeared, so tests can
//! check that a rollout never went below a count. It works on untyped objects, so it needs only the Machine
//! CRD of `e2e/config/crd`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kubeadm_api::meta::{CLUSTER_NAME_LABEL, PRE_TERMINATE_HOOK_PREFIX};
use serde_json::json;

use crate::etcd::{EtcdCluster, EtcdOptions};

/// The finalizer core Cluster API puts on Machines.
const MACHINE_FINALIZER: &str = "machine.cluster.x-k8s.io";

/// Real etcd members for control-plane nodes.
#[derive(Clone, Debug)]
pub struct EtcdSim {
    /// Where the members keep their data.
    pub dir: PathBuf,
    /// The cluster's etcd CA (certificate, PKCS#8 key): hand the same to the provider as `<cluster>-etcd`.
    pub ca: (String, String),
    /// More etcd flags for every member (see [`EtcdOptions::extra_args`]).
    pub extra_args: Vec<String>,
    /// Which etcd release the members run.
    pub release: crate::EtcdRelease,
}

/// What the double saw.
#[derive(Debug, Default)]
pub struct Observations {
    /// Machines with a Node, after each pass.
    pub with_node: Vec<usize>,
    /// Machines that disappeared, in the order they did.
    pub deleted: Vec<String>,
    /// Core Cluster API deletes a released Machine's infrastructure machine first, then, in later
    /// reconciles, its bootstrap config and Node: while this is set, a released Machine's infrastructure
    /// machine is deleted and the Machine keeps its finalizer.
    pub keep_after_infrastructure: bool,
    /// The Machines kept so (see [`Observations::keep_after_infrastructure`]) whose infrastructure
    /// machine is gone.
    pub kept: BTreeSet<String>,
}

/// The running double; stops (with its etcd members) when dropped.
pub struct CoreDouble {
    observations: Arc<Mutex<Observations>>,
    etcd: Arc<tokio::sync::Mutex<Option<EtcdCluster>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CoreDouble {
    fn drop(&mut self) {
        self.task.abort();
        if let Ok(mut etcd) = self.etcd.try_lock()
            && let Some(cluster) = etcd.as_mut()
        {
            cluster.stop();
        }
    }
}

struct Double {
    client: kube::Client,
    machines: Api<DynamicObject>,
    period: Duration,
    observations: Arc<Mutex<Observations>>,
    etcd_sim: Option<EtcdSim>,
    etcd: Arc<tokio::sync::Mutex<Option<EtcdCluster>>>,
    /// Client URL of each node's etcd member.
    etcd_urls: BTreeMap<String, String>,
}

impl CoreDouble {
    /// Starts the double for the Machines of `namespace`, passing over them every `period`.
    pub fn start(client: kube::Client, namespace: &str, period: Duration) -> Self {
        Self::start_with(client, namespace, period, None)
    }

    /// Like [`CoreDouble::start`], with real etcd members when `etcd` is given.
    pub fn start_with(
        client: kube::Client,
        namespace: &str,
        period: Duration,
        etcd: Option<EtcdSim>,
    ) -> Self {
        let observations = Arc::new(Mutex::new(Observations::default()));
        let cluster = Arc::new(tokio::sync::Mutex::new(None));
        let double = Double {
            machines: Api::namespaced_with(client.clone(), namespace, &machine_resource()),
            client,
            period,
            observations: observations.clone(),
            etcd_sim: etcd,
            etcd: cluster.clone(),
            etcd_urls: BTreeMap::new(),
        };
        let task = tokio::spawn(double.run());
        Self {
            observations,
            etcd: cluster,
            task,
        }
    }

    /// Runs `f` on the observations so far.
    pub fn observe<T>(&self, f: impl FnOnce(&mut Observations) -> T) -> T {
        f(&mut self
            .observations
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
    }

    /// Runs `f` on the simulated etcd cluster, once the first control-plane node started it.
    pub async fn with_etcd<T>(&self, f: impl FnOnce(&mut EtcdCluster) -> T) -> Option<T> {
        self.etcd.lock().await.as_mut().map(f)
    }

    /// A client of the simulated etcd cluster through its running members (bounded: `None` after 2 s).
    pub async fn etcd_client(&self) -> Option<etcd_client::Client> {
        connect_running(&self.etcd).await
    }

    /// The simulated etcd cluster, for tasks that outlive a borrow of the double.
    pub fn etcd_handle(&self) -> Arc<tokio::sync::Mutex<Option<EtcdCluster>>> {
        self.etcd.clone()
    }
}

/// Deletes the Machine's infrastructure machine (`spec.infrastructureRef`); true once it is gone.
async fn delete_infrastructure(client: &kube::Client, machine: &DynamicObject) -> bool {
    let reference = |field: &str| {
        machine
            .data
            .pointer(&format!("/spec/infrastructureRef/{field}"))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    let (Some(group), Some(kind), Some(name), Some(namespace)) = (
        reference("apiGroup"),
        reference("kind"),
        reference("name"),
        machine.namespace(),
    ) else {
        return false;
    };
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(&group, "v1beta2", &kind));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource);
    let _ = api.delete(&name, &DeleteParams::default()).await;
    matches!(api.get_opt(&name).await, Ok(None))
}

fn machine_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "cluster.x-k8s.io",
        "v1beta2",
        "Machine",
    ))
}

impl Double {
    async fn run(mut self) {
        let mut seen: BTreeSet<String> = BTreeSet::new();
        loop {
            if let Ok(list) = self.machines.list(&ListParams::default()).await {
                let names: BTreeSet<String> =
                    list.items.iter().map(ResourceExt::name_any).collect();
                let gone: Vec<String> = seen.difference(&names).cloned().collect();
                seen = names;
                let mut with_node = 0;
                for machine in &list.items {
                    if machine.metadata.deletion_timestamp.is_some() {
                        self.terminate(machine).await;
                    }
                    let has_node = machine
                        .data
                        .pointer("/status/nodeRef/name")
                        .is_some_and(|n| n.is_string());
                    if has_node || self.boot(machine).await {
                        with_node += 1;
                    }
                }
                for name in &gone {
                    remove_static_pods(&self.client, name).await;
                }
                let mut observed = self
                    .observations
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                observed.deleted.extend(gone);
                observed.with_node.push(with_node);
            }
            tokio::time::sleep(self.period).await;
        }
    }

    /// Gives a Machine its finalizer, its etcd member (control planes, with [`EtcdSim`]) and its Node; true
    /// when the Node is there.
    async fn boot(&mut self, machine: &DynamicObject) -> bool {
        if machine.metadata.deletion_timestamp.is_some() {
            return false;
        }
        let name = machine.name_any();
        let node = format!("node-{name}");
        let finalizers = json!({ "metadata": { "finalizers": [MACHINE_FINALIZER] } });
        if self
            .machines
            .patch(&name, &PatchParams::default(), &Patch::Merge(&finalizers))
            .await
            .is_err()
        {
            return false;
        }
        let control_plane = machine
            .labels()
            .contains_key("cluster.x-k8s.io/control-plane");
        if control_plane && self.etcd_sim.is_some() && !self.etcd_urls.contains_key(&node) {
            match self.start_member(&node).await {
                Ok(url) => {
                    self.etcd_urls.insert(node.clone(), url);
                }
                Err(e) => {
                    tracing::warn!(node, error = %e, "etcd member did not start");
                    return false;
                }
            }
        }
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let condition = |type_: &str| json!({ "type": type_, "status": "True", "reason": type_, "message": "", "lastTransitionTime": now });
        let status = json!({ "status": {
            "nodeRef": { "name": node },
            "conditions": [condition("Ready"), condition("Available")],
        } });
        let patched = self
            .machines
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .is_ok();
        if patched {
            kubeadm_init_uploaded_config(&self.client).await;
            if control_plane {
                let etcd_url = self
                    .etcd_urls
                    .get(&node)
                    .cloned()
                    .unwrap_or_else(|| "https://127.0.0.1:2379".to_owned());
                // Labelled with the cluster's name, so that a filtering front can show each cluster
                // only its own pods when several share this server.
                let cluster = machine
                    .labels()
                    .get(CLUSTER_NAME_LABEL)
                    .cloned()
                    .unwrap_or_default();
                start_static_pods(
                    &self.client,
                    &name,
                    &etcd_url,
                    &[(CLUSTER_NAME_LABEL, &cluster)],
                )
                .await;
            }
        }
        patched
    }

    /// The first member starts the cluster; later ones join as learners, as kubeadm joins them.
    async fn start_member(&self, node: &str) -> crate::Result<String> {
        let sim = self.etcd_sim.as_ref().expect("called with an etcd sim");
        let mut cluster = self.etcd.lock().await;
        match cluster.as_mut() {
            None => {
                let started = EtcdCluster::start(
                    &sim.dir,
                    EtcdOptions {
                        members: 1,
                        names: vec![node.to_owned()],
                        ca: Some(sim.ca.clone()),
                        extra_args: sim.extra_args.clone(),
                        ..EtcdOptions::on(sim.release)?
                    },
                )
                .await?;
                let url = started.members()[0].client_url.clone();
                *cluster = Some(started);
                Ok(url)
            }
            Some(cluster) => {
                cluster.add_learner(node).await?;
                let member = cluster
                    .members()
                    .iter()
                    .find(|m| m.name == node)
                    .expect("the learner was just added");
                Ok(member.client_url.clone())
            }
        }
    }

    /// A deleted Machine goes once no pre-terminate hook holds it: its etcd process stops, its finalizer
    /// is removed.
    async fn terminate(&mut self, machine: &DynamicObject) {
        let held = machine
            .annotations()
            .keys()
            .any(|k| k.starts_with(PRE_TERMINATE_HOOK_PREFIX));
        if held {
            self.wait_for_pre_terminate_hooks(machine).await;
            return;
        }
        let keep = self
            .observations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keep_after_infrastructure;
        if keep {
            if delete_infrastructure(&self.client, machine).await {
                self.observations
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .kept
                    .insert(machine.name_any());
            }
            return;
        }
        let node = format!("node-{}", machine.name_any());
        if self.etcd_urls.remove(&node).is_some()
            && let Some(cluster) = self.etcd.lock().await.as_mut()
            && let Some(member) = cluster.member_mut(&node)
        {
            member.stop();
        }
        let patch = json!({ "metadata": { "finalizers": null } });
        let _ = self
            .machines
            .patch(
                &machine.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await;
    }
}

impl Double {
    /// Nothing to drain here: a held Machine says at once, as core Cluster API does once the node is
    /// drained, that only its pre-terminate hooks hold it.
    async fn wait_for_pre_terminate_hooks(&self, machine: &DynamicObject) {
        use kubeadm_api::controlplane::conditions::machine::DELETING;
        use kubeadm_api::controlplane::conditions::reasons::WAITING_FOR_PRE_TERMINATE_HOOK;
        let conditions = machine.data["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if conditions
            .iter()
            .any(|c| c["type"] == DELETING && c["reason"] == WAITING_FOR_PRE_TERMINATE_HOOK)
        {
            return;
        }
        let mut conditions: Vec<_> = conditions
            .into_iter()
            .filter(|c| c["type"] != DELETING)
            .collect();
        conditions.push(json!({
            "type": DELETING, "status": "True", "reason": WAITING_FOR_PRE_TERMINATE_HOOK,
            "message": "Waiting for pre-terminate hooks to succeed",
            "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        }));
        let status = json!({ "status": { "conditions": conditions } });
        let _ = self
            .machines
            .patch_status(
                &machine.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&status),
            )
            .await;
    }
}

const COMPONENTS: [&str; 4] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "etcd",
];

/// The mirror pods of a control-plane node's static pods (node `node-<machine>`), running and ready, with
/// `labels` beside kubeadm's own.
pub async fn start_static_pods(
    client: &kube::Client,
    machine: &str,
    etcd_url: &str,
    labels: &[(&str, &str)],
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let node = format!("node-{machine}");
    for component in COMPONENTS {
        // Mirror pods are how the API shows static pods (and need no service account).
        let mut annotations = json!({
            "cluster.x-k8s.io/machine": machine,
            "kubernetes.io/config.mirror": format!("{component}-{machine}"),
        });
        match component {
            "kube-apiserver" => {
                annotations["kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint"] =
                    json!("127.0.0.1:6443");
            }
            "etcd" => {
                annotations["kubeadm.kubernetes.io/etcd.advertise-client-urls"] = json!(etcd_url);
            }
            _ => {}
        }
        let name = format!("{component}-{node}");
        let mut pod_labels = json!({ "component": component, "tier": "control-plane" });
        for (key, value) in labels {
            pod_labels[*key] = json!(value);
        }
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": name, "namespace": "kube-system",
                "labels": pod_labels,
                "annotations": annotations,
            },
            "spec": {
                "nodeName": node,
                "containers": [{ "name": component, "image": format!("registry.k8s.io/{component}:sim") }],
            },
        }))
        .expect("a valid pod");
        match pods.create(&PostParams::default(), &pod).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => tracing::warn!(pod = %name, error = %e, "cannot create mirror pod"),
        }
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let status = json!({ "status": {
            "phase": "Running",
            "conditions": [{ "type": "Ready", "status": "True", "lastTransitionTime": now }],
        } });
        let _ = pods
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await;
    }
}

async fn remove_static_pods(client: &kube::Client, machine: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    for component in COMPONENTS {
        // No kubelet confirms a graceful deletion here.
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        let _ = pods
            .delete(&format!("{component}-node-{machine}"), &now)
            .await;
    }
}

/// The `kube-system/kubeadm-config` ConfigMap that `kubeadm init` uploads (once per workload cluster).
pub async fn kubeadm_init_uploaded_config(client: &kube::Client) {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    let config = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("kubeadm-config".into()),
            ..Default::default()
        },
        data: Some(
            [(
                "ClusterConfiguration".to_owned(),
                "kind: ClusterConfiguration\n".to_owned(),
            )]
            .into(),
        ),
        ..Default::default()
    };
    // Already there after the first machine: kubeadm uploads it once.
    let _ = config_maps.create(&PostParams::default(), &config).await;
}

/// A client through the running members of `etcd` (bounded: `None` after 2 s).
pub async fn connect_running(
    etcd: &tokio::sync::Mutex<Option<EtcdCluster>>,
) -> Option<etcd_client::Client> {
    // Not held while connecting: a member start holds the cluster for as long as the learner takes.
    let (urls, options) = {
        let cluster = etcd.lock().await;
        let cluster = cluster.as_ref()?;
        (cluster.running_urls(), cluster.connect_options())
    };
    tokio::time::timeout(
        Duration::from_secs(2),
        etcd_client::Client::connect(&urls, Some(options)),
    )
    .await
    .ok()?
    .ok()
}
