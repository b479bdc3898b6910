//! The simulated infrastructure kinds: `SimCluster`, `SimClusterTemplate`, `SimMachine` and
//! `SimMachineTemplate` in
//! `infrastructure.cluster.x-k8s.io/v1beta2`, with the fields the Cluster API infrastructure contract asks
//! for (v1beta2 `status.initialization.provisioned`, and `status.ready` for v1beta1 readers).

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";
pub const VERSION: &str = "v1beta2";

/// A SimMachine's `spec.providerID`, which is also its node's cloud-init `instance-id`: a template that
/// passes `{{ ds.meta_data.instance_id }}` as the kubelet's `provider-id` registers the Node Cluster API
/// looks for.
pub fn provider_id(namespace: &str, machine: &str) -> String {
    format!("sim://{namespace}/{machine}")
}

/// Host and port of an API server endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiEndpoint {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub port: i32,
}

fn is_zero(port: &i32) -> bool {
    *port == 0
}

/// Whether the infrastructure is provisioned (v1beta2 contract).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Initialization {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
}

/// A failure domain the cluster offers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureDomain {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<bool>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
}

/// A simulated cluster: a TCP load balancer on a loopback address in front of the control-plane nodes'
/// API servers.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "SimCluster",
    plural = "simclusters",
    namespaced,
    status = "SimClusterStatus",
    category = "cluster-api",
    doc = "Simulated infrastructure of a cluster (end-to-end tests).",
    printcolumn = r#"{"name":"Endpoint","type":"string","jsonPath":".spec.controlPlaneEndpoint.host"}"#,
    printcolumn = r#"{"name":"Provisioned","type":"boolean","jsonPath":".status.initialization.provisioned"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SimClusterSpec {
    /// Set by the simulator to its load balancer unless given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// Names of the failure domains to offer for control-plane machines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_domains: Vec<String>,
    /// What the cluster's machines are.
    #[serde(default, skip_serializing_if = "NodeBackend::is_simulated")]
    pub nodes: NodeBackend,
}

/// What the machines of a SimCluster are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum NodeBackend {
    /// A node imitated by the simulator: real kubeadm phases, etcd and kube-apiserver as processes, the
    /// Node written by the simulator. Fast; the default.
    #[default]
    Simulated,
    /// A systemd-nspawn node that boots the bootstrap data with real cloud-init, containerd and kubelet
    /// (`hack/install-testenv.sh nodes` builds what it runs).
    Real,
}

impl NodeBackend {
    fn is_simulated(&self) -> bool {
        *self == Self::Simulated
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SimClusterStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    /// v1beta1 contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_domains: Vec<FailureDomain>,
}

/// What a ClusterClass clones SimClusters from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SimClusterTemplateResource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    #[serde(default)]
    pub spec: SimClusterSpec,
}

/// The cluster template a ClusterClass names for its infrastructure.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "SimClusterTemplate",
    plural = "simclustertemplates",
    namespaced,
    category = "cluster-api",
    doc = "A template of simulated clusters, for ClusterClasses (end-to-end tests)."
)]
pub struct SimClusterTemplateSpec {
    pub template: SimClusterTemplateResource,
}

/// A simulated machine: its node runs real etcd and kube-apiserver processes on its own loopback address.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "SimMachine",
    plural = "simmachines",
    namespaced,
    status = "SimMachineStatus",
    category = "cluster-api",
    doc = "A simulated machine (end-to-end tests).",
    printcolumn = r#"{"name":"ProviderID","type":"string","jsonPath":".spec.providerID"}"#,
    printcolumn = r#"{"name":"Provisioned","type":"boolean","jsonPath":".status.initialization.provisioned"}"#,
    printcolumn = r#"{"name":"Failure","type":"string","jsonPath":".status.failureReason"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SimMachineSpec {
    /// `sim://<namespace>/<name>`, set by the simulator.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// A label for the machine image; only shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

/// An address of a machine.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MachineAddress {
    #[serde(rename = "type")]
    pub type_: String,
    pub address: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SimMachineStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    /// v1beta1 contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<MachineAddress>,
    /// Why the machine failed to boot, for machines that will not recover by themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    /// What the machine's console shows: `CloudInitSucceeded` once cloud-init finished on a real node
    /// (False with reason `ModulesFailed` naming each module that failed, whether or not the bootstrap
    /// succeeded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
}

/// Labels and annotations a template gives its machines.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TemplateMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SimMachineTemplateResource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    #[serde(default)]
    pub spec: SimMachineSpec,
}

/// The machine template the control plane and MachineDeployments clone SimMachines from.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "SimMachineTemplate",
    plural = "simmachinetemplates",
    namespaced,
    category = "cluster-api",
    doc = "A template of simulated machines (end-to-end tests)."
)]
pub struct SimMachineTemplateSpec {
    pub template: SimMachineTemplateResource,
}

/// The CRDs of the four kinds, with the Cluster API contract label.
pub fn crds() -> Vec<CustomResourceDefinition> {
    [
        SimCluster::crd(),
        SimClusterTemplate::crd(),
        SimMachine::crd(),
        SimMachineTemplate::crd(),
    ]
    .into_iter()
    .map(|mut crd| {
        crd.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("cluster.x-k8s.io/v1beta2".into(), VERSION.into());
        crd
    })
    .collect()
}

/// `(file name, YAML)` of each CRD, as written to `e2e/config/crd`.
pub fn crd_files() -> Vec<(String, String)> {
    crds()
        .iter()
        .map(|c| (kubeadm_api::crd::file_name(c), kubeadm_api::crd::to_yaml(c)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crds_carry_the_contract_label_and_status_subresources() {
        for crd in crds() {
            let labels = crd.metadata.labels.clone().unwrap_or_default();
            assert_eq!(labels["cluster.x-k8s.io/v1beta2"], "v1beta2");
            assert_eq!(crd.spec.group, GROUP);
            let version = &crd.spec.versions[0];
            assert_eq!(version.name, VERSION);
            let has_status = version
                .subresources
                .as_ref()
                .is_some_and(|s| s.status.is_some());
            // Templates have no status.
            assert_eq!(has_status, !crd.spec.names.kind.ends_with("Template"));
        }
    }

    #[test]
    fn provider_id_uses_the_contract_spelling() {
        let spec = SimMachineSpec {
            provider_id: Some("sim://default/m".into()),
            image: None,
        };
        assert_eq!(
            serde_json::to_value(&spec).unwrap(),
            serde_json::json!({ "providerID": "sim://default/m" })
        );
    }
}
