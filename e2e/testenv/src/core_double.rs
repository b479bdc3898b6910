//! A stand-in for core Cluster API's Machine controller and for the nodes, for tests of the providers:
//! every Machine gets a Node (`status.nodeRef`), Ready/Available conditions and, in `kube-system`, running
//! mirror pods of the four control-plane static pods with the annotations kubeadm and our patches put on
//! them; the first Node makes the cluster initialized the way `kubeadm init` shows it (the
//! `kube-system/kubeadm-config` ConfigMap). The workload cluster is the same apiserver. It records how many
//! Machines have a Node after each pass and which Machines disappeared, so tests can check that a rollout
//! never went below a count.
//!
//! It works on untyped objects, so it needs only the Machine CRD of `e2e/config/crd`.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::json;

/// What the double saw.
#[derive(Debug, Default)]
pub struct Observations {
    /// Machines with a Node, after each pass.
    pub with_node: Vec<usize>,
    /// Machines that disappeared, in the order they did.
    pub deleted: Vec<String>,
}

/// The running double; stops when dropped.
pub struct CoreDouble {
    observations: Arc<Mutex<Observations>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CoreDouble {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl CoreDouble {
    /// Starts the double for the Machines of `namespace`, passing over them every `period`.
    pub fn start(client: kube::Client, namespace: &str, period: Duration) -> Self {
        let observations = Arc::new(Mutex::new(Observations::default()));
        let task = tokio::spawn(run(
            client,
            namespace.to_owned(),
            period,
            observations.clone(),
        ));
        Self { observations, task }
    }

    /// Runs `f` on the observations so far.
    pub fn observe<T>(&self, f: impl FnOnce(&mut Observations) -> T) -> T {
        f(&mut self
            .observations
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
    }
}

fn machine_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "cluster.x-k8s.io",
        "v1beta2",
        "Machine",
    ))
}

async fn run(
    client: kube::Client,
    namespace: String,
    period: Duration,
    observations: Arc<Mutex<Observations>>,
) {
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &namespace, &machine_resource());
    let mut seen: BTreeSet<String> = BTreeSet::new();
    loop {
        if let Ok(list) = machines.list(&ListParams::default()).await {
            let names: BTreeSet<String> = list.items.iter().map(ResourceExt::name_any).collect();
            let gone: Vec<String> = seen.difference(&names).cloned().collect();
            seen = names;
            let mut with_node = 0;
            for machine in &list.items {
                let has_node = machine
                    .data
                    .pointer("/status/nodeRef/name")
                    .is_some_and(|n| n.is_string());
                if has_node || boot(&client, &machines, machine).await {
                    with_node += 1;
                }
            }
            for name in &gone {
                remove_static_pods(&client, name).await;
            }
            let mut observed = observations.lock().unwrap_or_else(PoisonError::into_inner);
            observed.deleted.extend(gone);
            observed.with_node.push(with_node);
        }
        tokio::time::sleep(period).await;
    }
}

/// Gives a Machine its Node; true when that worked.
async fn boot(
    client: &kube::Client,
    machines: &Api<DynamicObject>,
    machine: &DynamicObject,
) -> bool {
    let name = machine.name_any();
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let condition = |type_: &str| json!({ "type": type_, "status": "True", "reason": type_, "message": "", "lastTransitionTime": now });
    let status = json!({ "status": {
        "nodeRef": { "name": format!("node-{name}") },
        "conditions": [condition("Ready"), condition("Available")],
    } });
    let patched = machines
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .is_ok();
    if patched {
        kubeadm_init_uploaded_config(client).await;
        start_static_pods(client, &name).await;
    }
    patched
}

const COMPONENTS: [&str; 4] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "etcd",
];

/// The mirror pods of a control-plane node's static pods, running and ready.
async fn start_static_pods(client: &kube::Client, machine: &str) {
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
                annotations["kubeadm.kubernetes.io/etcd.advertise-client-urls"] =
                    json!("https://127.0.0.1:2379");
            }
            _ => {}
        }
        let name = format!("{component}-{node}");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": name, "namespace": "kube-system",
                "labels": { "component": component, "tier": "control-plane" },
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
        let _ = pods
            // No kubelet confirms a graceful deletion here.
            .delete(
                &format!("{component}-node-{machine}"),
                &kube::api::DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                },
            )
            .await;
    }
}

async fn kubeadm_init_uploaded_config(client: &kube::Client) {
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
