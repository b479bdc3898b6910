//! The workload cluster as the controller sees it: the static pods and Nodes of the control plane, and the
//! `kubeadm-config` ConfigMap.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch};
use kubeadm_cluster::workload::WorkloadError;

use crate::endpoints::{self, CLUSTER_STATUS_KEY, MachinePods, MachineRef};
use crate::machine_conditions::NodeRole;
use crate::machines::ControlPlaneMachine;

/// Bound on each workload-cluster call: an unreachable cluster must not stall the reconcile.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the workload cluster could not be looked at.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unreachable {
    #[error(transparent)]
    Kubeconfig(#[from] WorkloadError),
    #[error("workload cluster API: {0}")]
    Api(#[from] kube::Error),
    #[error("workload cluster did not answer within {CALL_TIMEOUT:?}")]
    Timeout,
    #[error("workload cluster: {0}")]
    Content(String),
}

async fn bounded<T>(call: impl Future<Output = Result<T, kube::Error>>) -> Result<T, Unreachable> {
    tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .map_err(|_| Unreachable::Timeout)?
        .map_err(Unreachable::from)
}

/// Whether `kubeadm init` has uploaded its configuration: the workload cluster's sign of an initialized
/// control plane.
pub(super) async fn initialized(client: &kube::Client) -> Result<bool, Unreachable> {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    Ok(bounded(config_maps.get_opt("kubeadm-config"))
        .await?
        .is_some())
}

/// The control-plane static pods, mapped to `machines`.
pub(super) async fn machine_pods(
    client: &kube::Client,
    machines: &[ControlPlaneMachine],
) -> Result<BTreeMap<String, MachinePods>, Unreachable> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let listed =
        bounded(pods.list(&ListParams::default().labels(endpoints::CONTROL_PLANE_POD_SELECTOR)))
            .await?;
    let refs: Vec<MachineRef<'_>> = machines
        .iter()
        .map(|m| MachineRef {
            machine: &m.name,
            node: m.node.as_deref(),
        })
        .collect();
    Ok(endpoints::machine_pods(&listed.items, &refs))
}

/// kubeadm's control-plane role label and taint on each Node that carries the label, by Node name (a
/// Node without the label is not listed).
pub(super) async fn control_plane_nodes(
    client: &kube::Client,
) -> Result<BTreeMap<String, NodeRole>, Unreachable> {
    use crate::machine_conditions::CONTROL_PLANE_NODE_ROLE;
    let nodes: Api<Node> = Api::all(client.clone());
    let listed =
        bounded(nodes.list(&ListParams::default().labels(CONTROL_PLANE_NODE_ROLE))).await?;
    Ok(listed
        .items
        .iter()
        .map(|node| {
            let role = NodeRole {
                labelled: node.labels().contains_key(CONTROL_PLANE_NODE_ROLE),
                tainted: node
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|taints| {
                        taints
                            .iter()
                            .any(|t| t.key == CONTROL_PLANE_NODE_ROLE && t.effect == "NoSchedule")
                    }),
            };
            (node.name_any(), role)
        })
        .collect())
}

/// Removes a `ClusterStatus` left in the `kubeadm-config` ConfigMap by an older kubeadm (KEP-2506: endpoints
/// come from the pods now, and a stale list only misleads). True when something was removed.
pub(super) async fn remove_cluster_status(client: &kube::Client) -> Result<bool, Unreachable> {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    let Some(config) = bounded(config_maps.get_opt("kubeadm-config")).await? else {
        return Ok(false);
    };
    let data = config.data.clone().unwrap_or_default();
    if endpoints::without_cluster_status(&data).is_none() {
        return Ok(false);
    }
    let patch = serde_json::json!({
        "metadata": { "resourceVersion": config.resource_version() },
        "data": { CLUSTER_STATUS_KEY: null },
    });
    let params = super::merge_params();
    bounded(config_maps.patch("kubeadm-config", &params, &Patch::Merge(&patch))).await?;
    Ok(true)
}

/// Brings the `kubeadm-config` ClusterConfiguration in line with `desired` (see
/// [`crate::cluster_configuration`]); true when it was written. Nothing to do before `kubeadm init`.
pub(super) async fn update_cluster_configuration(
    client: &kube::Client,
    desired: &str,
) -> Result<bool, Unreachable> {
    use crate::cluster_configuration::{CONFIG_MAP, KEY, updated};
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    let Some(config) = bounded(config_maps.get_opt(CONFIG_MAP)).await? else {
        return Ok(false);
    };
    let current = config
        .data
        .as_ref()
        .and_then(|d| d.get(KEY))
        .cloned()
        .unwrap_or_default();
    let Some(next) = updated(&current, desired).map_err(Unreachable::Content)? else {
        return Ok(false);
    };
    let patch = serde_json::json!({
        "metadata": { "resourceVersion": config.resource_version() },
        "data": { KEY: next },
    });
    let params = super::merge_params();
    bounded(config_maps.patch(CONFIG_MAP, &params, &Patch::Merge(&patch))).await?;
    Ok(true)
}

/// The ClusterRoleBinding that lets kube-apiserver reach the kubelets' API (logs, exec, port-forward),
/// created if missing before a machine joins, as Cluster API does for Kubernetes releases before 1.38
/// (whose kubeadm may leave it to the provider). True when it was created.
pub(super) async fn ensure_kubelet_api_admin_binding(
    client: &kube::Client,
    kubernetes_version: &str,
) -> Result<bool, Unreachable> {
    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
    use kubeadm_api::version::KubeVersion;
    if KubeVersion::parse(kubernetes_version).is_some_and(|v| v >= KubeVersion::new(1, 38, 0)) {
        return Ok(false);
    }
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    if bounded(bindings.get_opt(KUBELET_API_ADMIN_BINDING))
        .await?
        .is_some()
    {
        return Ok(false);
    }
    let binding = ClusterRoleBinding {
        metadata: kube::api::ObjectMeta {
            name: Some(KUBELET_API_ADMIN_BINDING.into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: "system:kubelet-api-admin".into(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: "kube-apiserver-kubelet-client".into(),
            ..Default::default()
        }]),
    };
    match bounded(bindings.create(&Default::default(), &binding)).await {
        Ok(_) => Ok(true),
        Err(Unreachable::Api(kube::Error::Api(e))) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Name kubeadm gives the binding of the API server's kubelet client certificate.
pub(super) const KUBELET_API_ADMIN_BINDING: &str = "kubeadm:apiserver-kubelet-client";
