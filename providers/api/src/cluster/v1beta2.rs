//! `cluster.x-k8s.io/v1beta2`: Cluster, Machine, MachineSet, MachineDeployment, MachinePool and
//! MachineHealthCheck.
//!
//! Only the fields the kubeadm providers and the test infrastructure provider read or write are
//! modelled; managed topologies (`spec.topology`) are not.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSystemInfo, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{ContractVersionedObjectReference, ObjectMeta, V1Beta1Condition};

// ---------------------------------------------------------------------------------------------
// Shared types
// ---------------------------------------------------------------------------------------------

/// Whether a condition is healthy when True (Positive) or when False (Negative).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConditionPolarity {
    /// The normal state of the condition is True.
    #[default]
    Positive,
    /// The normal state of the condition is False.
    Negative,
}

/// Effect of a taint on pods that do not tolerate it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum TaintEffect {
    /// Do not schedule new pods on the node.
    #[default]
    NoSchedule,
    /// Avoid scheduling new pods on the node if possible.
    PreferNoSchedule,
    /// Evict running pods that do not tolerate the taint.
    NoExecute,
}

/// When a Machine taint is propagated to its Node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MachineTaintPropagation {
    /// The taint is continuously reconciled on the Node.
    #[default]
    Always,
    /// The taint is only added when the Node is initialized.
    OnInitialization,
}

/// A Node taint managed by Cluster API, with a propagation policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineTaint {
    /// Taint key to apply to the Node (a qualified name).
    #[schemars(length(min = 1, max = 317))]
    pub key: String,
    /// Taint value (a valid label value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Effect of the taint: NoSchedule, PreferNoSchedule or NoExecute.
    pub effect: TaintEffect,
    /// How the taint is propagated to the Node: Always or OnInitialization.
    pub propagation: MachineTaintPropagation,
}

/// A condition type to be included when computing the Machine's Ready condition.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineReadinessGate {
    /// Type of a condition in the Machine's condition list; a missing condition counts as Unknown.
    #[schemars(length(min = 1, max = 316))]
    pub condition_type: String,
    /// Polarity of the condition; defaults to Positive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub polarity: Option<ConditionPolarity>,
}

/// Kind of a Machine address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MachineAddressType {
    /// The hostname of the machine.
    Hostname,
    /// An externally routable IP address.
    #[serde(rename = "ExternalIP")]
    ExternalIp,
    /// An IP address reachable inside the cluster.
    #[default]
    #[serde(rename = "InternalIP")]
    InternalIp,
    /// An externally resolvable DNS name.
    #[serde(rename = "ExternalDNS")]
    ExternalDns,
    /// A DNS name resolvable inside the cluster.
    #[serde(rename = "InternalDNS")]
    InternalDns,
}

/// An address of a Machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineAddress {
    /// Address type: Hostname, ExternalIP, InternalIP, ExternalDNS or InternalDNS.
    #[serde(rename = "type")]
    pub type_: MachineAddressType,
    /// The address itself.
    #[schemars(length(min = 1, max = 256))]
    pub address: String,
}

/// Number of replicas running one Kubernetes version.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusVersion {
    /// The Kubernetes version.
    pub version: String,
    /// Number of replicas at this version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

/// A Kubernetes version in an upgrade plan.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusUpgradePlanVersion {
    /// The Kubernetes version.
    pub version: String,
}

/// Naming pattern for the Machines created by a MachineSet or MachineDeployment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineNamingSpec {
    /// Template for Machine names; may use `.cluster.name`, `.machineSet.name` and must use `.random`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub template: Option<String>,
}

/// Order in which Machines are deleted when scaling down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MachineSetDeletionOrder {
    /// Delete Machines marked for deletion or unhealthy first, then at random.
    #[default]
    Random,
    /// Delete Machines marked for deletion or unhealthy first, then the newest.
    Newest,
    /// Delete Machines marked for deletion or unhealthy first, then the oldest.
    Oldest,
}

// ---------------------------------------------------------------------------------------------
// Cluster
// ---------------------------------------------------------------------------------------------

/// Desired state of a Cluster.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "Cluster",
    plural = "clusters",
    shortname = "cl",
    namespaced,
    status = "ClusterStatus",
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    doc = "A Kubernetes cluster managed by Cluster API.",
    printcolumn = r#"{"name":"Available","type":"string","jsonPath":".status.conditions[?(@.type==\"Available\")].status","description":"Cluster pass all availability checks"}"#,
    printcolumn = r#"{"name":"CP Desired","type":"integer","jsonPath":".status.controlPlane.desiredReplicas","description":"The desired number of control plane machines"}"#,
    printcolumn = r#"{"name":"CP Current","type":"integer","jsonPath":".status.controlPlane.replicas","description":"The number of control plane machines","priority":10}"#,
    printcolumn = r#"{"name":"CP Ready","type":"integer","jsonPath":".status.controlPlane.readyReplicas","description":"The number of control plane machines with Ready condition true","priority":10}"#,
    printcolumn = r#"{"name":"CP Available","type":"integer","jsonPath":".status.controlPlane.availableReplicas","description":"The number of control plane machines with Available condition true"}"#,
    printcolumn = r#"{"name":"CP Up-to-date","type":"integer","jsonPath":".status.controlPlane.upToDateReplicas","description":"The number of control plane machines with UpToDate condition true"}"#,
    printcolumn = r#"{"name":"W Desired","type":"integer","jsonPath":".status.workers.desiredReplicas","description":"The desired number of worker machines"}"#,
    printcolumn = r#"{"name":"W Current","type":"integer","jsonPath":".status.workers.replicas","description":"The number of worker machines","priority":10}"#,
    printcolumn = r#"{"name":"W Ready","type":"integer","jsonPath":".status.workers.readyReplicas","description":"The number of worker machines with Ready condition true","priority":10}"#,
    printcolumn = r#"{"name":"W Available","type":"integer","jsonPath":".status.workers.availableReplicas","description":"The number of worker machines with Available condition true"}"#,
    printcolumn = r#"{"name":"W Up-to-date","type":"integer","jsonPath":".status.workers.upToDateReplicas","description":"The number of worker machines with UpToDate condition true"}"#,
    printcolumn = r#"{"name":"Paused","type":"string","jsonPath":".status.conditions[?(@.type==\"Paused\")].status","description":"Reconciliation paused","priority":10}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase","description":"Cluster status such as Pending/Provisioning/Provisioned/Deleting/Failed"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"Time duration since creation of Cluster"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Stops controllers from processing the Cluster and all its associated objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// Network configuration of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_network: Option<ClusterNetwork>,
    /// Endpoint used to communicate with the control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// Reference to the provider object that provisions the control plane (e.g. a KubeadmControlPlane).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_ref: Option<ContractVersionedObjectReference>,
    /// Reference to the provider object that provisions the cluster infrastructure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_ref: Option<ContractVersionedObjectReference>,
    /// Additional conditions to include when computing the Cluster's Available condition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub availability_gates: Vec<ClusterAvailabilityGate>,
}

/// A Cluster condition type to be used as an availability gate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAvailabilityGate {
    /// Type of a condition in the Cluster's condition list; a missing condition counts as Unknown.
    #[schemars(length(min = 1, max = 316))]
    pub condition_type: String,
    /// Polarity of the condition; defaults to Positive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub polarity: Option<ConditionPolarity>,
}

/// Network parameters of a cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetwork {
    /// Port the API server binds to; defaults to 6443.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub api_server_port: Option<i32>,
    /// Network ranges from which service VIPs are allocated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<NetworkRanges>,
    /// Network ranges from which pod networks are allocated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<NetworkRanges>,
    /// Domain name for services, e.g. `cluster.local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_domain: Option<String>,
}

/// A list of network address ranges.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkRanges {
    /// CIDR blocks, e.g. `192.168.0.0/16`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cidr_blocks: Vec<String>,
}

/// A reachable Kubernetes API endpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiEndpoint {
    /// Hostname or IP on which the API server is serving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub host: Option<String>,
    /// Port on which the API server is serving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
}

/// Phase of a Cluster's lifecycle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ClusterPhase {
    /// The Cluster was created and is waiting for its infrastructure.
    Pending,
    /// The infrastructure is being provisioned.
    Provisioning,
    /// The infrastructure has been provisioned.
    Provisioned,
    /// The Cluster is being deleted.
    Deleting,
    /// The Cluster is in a state that requires user intervention.
    Failed,
    /// The state of the Cluster cannot be determined.
    #[default]
    Unknown,
}

/// Observed state of a Cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// Observations of the Cluster's state (Available, InfrastructureReady, ControlPlaneInitialized, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Progress of the Cluster's initial provisioning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<ClusterInitializationStatus>,
    /// Replica counters of the control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ClusterControlPlaneStatus>,
    /// Replica counters of the worker machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<WorkersStatus>,
    /// Failure domains reported by the infrastructure provider.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_domains: Vec<FailureDomain>,
    /// Current phase of cluster actuation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ClusterPhase>,
    /// Latest generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Status fields kept for v1beta1 clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<ClusterDeprecatedStatus>,
}

/// Progress of a Cluster's initial provisioning (part of the Cluster API contract).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInitializationStatus {
    /// True once the infrastructure provider reports the cluster infrastructure as provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_provisioned: Option<bool>,
    /// True once the control plane can accept requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_initialized: Option<bool>,
}

/// Deprecated Cluster status fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDeprecatedStatus {
    /// Fields that only exist for v1beta1 clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v1beta1: Option<ClusterV1Beta1DeprecatedStatus>,
}

/// Cluster status fields of the v1beta1 API.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterV1Beta1DeprecatedStatus {
    /// v1beta1 conditions of the Cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<V1Beta1Condition>,
    /// Machine-readable reason of a terminal reconcile problem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Human-readable message of a terminal reconcile problem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
}

/// Replica counters of a Cluster's control plane.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterControlPlaneStatus {
    /// Desired number of control plane machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
    /// Number of control plane machines, including provisioning and deleting ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Number of control plane machines whose UpToDate condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,
    /// Number of control plane machines whose Ready condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Number of control plane machines whose Available condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Kubernetes versions present in the control plane.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<StatusVersion>,
    /// Versions still to be applied to the control plane during a managed upgrade.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upgrade_plan: Vec<StatusUpgradePlanVersion>,
}

/// Replica counters of a Cluster's worker machines.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkersStatus {
    /// Desired number of worker machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
    /// Number of worker machines, including provisioning and deleting ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Number of worker machines whose UpToDate condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,
    /// Number of worker machines whose Ready condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Number of worker machines whose Available condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Kubernetes versions present among the workers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<StatusVersion>,
    /// Versions still to be applied to the workers during a managed upgrade.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upgrade_plan: Vec<StatusUpgradePlanVersion>,
}

/// A failure domain the cluster can span, as reported by the infrastructure provider.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureDomain {
    /// Name of the failure domain.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// Whether the failure domain is suitable for control plane machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<bool>,
    /// Free-form attributes an infrastructure provider might use.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
}

// ---------------------------------------------------------------------------------------------
// Machine
// ---------------------------------------------------------------------------------------------

/// Desired state of a Machine.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "Machine",
    plural = "machines",
    shortname = "ma",
    namespaced,
    status = "MachineStatus",
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    doc = "A host, virtual or physical, that runs a Kubernetes node.",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.clusterName","description":"Cluster"}"#,
    printcolumn = r#"{"name":"Node Name","type":"string","jsonPath":".status.nodeRef.name","description":"Node name associated with this machine"}"#,
    printcolumn = r#"{"name":"Provider ID","type":"string","jsonPath":".spec.providerID","description":"Provider ID","priority":10}"#,
    printcolumn = r#"{"name":"Failure domain","type":"string","jsonPath":".status.failureDomain","description":"The failure domain where the Machine has been scheduled"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status","description":"Machine pass all readiness checks"}"#,
    printcolumn = r#"{"name":"Available","type":"string","jsonPath":".status.conditions[?(@.type==\"Available\")].status","description":"Machine is Ready for at least MinReadySeconds"}"#,
    printcolumn = r#"{"name":"Up-to-date","type":"string","jsonPath":".status.conditions[?(@.type==\"UpToDate\")].status","description":"Machine spec matches the spec of the Machine's owner resource, e.g. MachineDeployment"}"#,
    printcolumn = r#"{"name":"Internal-IP","type":"string","jsonPath":".status.addresses[?(@.type==\"InternalIP\")].address","description":"Internal IP of the machine","priority":10}"#,
    printcolumn = r#"{"name":"External-IP","type":"string","jsonPath":".status.addresses[?(@.type==\"ExternalIP\")].address","description":"External IP of the machine","priority":10}"#,
    printcolumn = r#"{"name":"OS-Image","type":"string","jsonPath":".status.nodeInfo.osImage","description":"OS Image reported by the node","priority":10}"#,
    printcolumn = r#"{"name":"Paused","type":"string","jsonPath":".status.conditions[?(@.type==\"Paused\")].status","description":"Reconciliation paused","priority":10}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase","description":"Machine status such as Terminating/Pending/Running/Failed etc"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"Time duration since creation of Machine"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version","description":"Kubernetes version associated with this Machine"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// Name of the Cluster this object belongs to.
    #[schemars(length(min = 1, max = 63))]
    pub cluster_name: String,
    /// How the Machine is bootstrapped: a bootstrap config reference and/or a data secret name.
    pub bootstrap: Bootstrap,
    /// Reference to the infrastructure provider object backing this Machine.
    pub infrastructure_ref: ContractVersionedObjectReference,
    /// Desired Kubernetes version, e.g. `v1.33.1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Provider ID of the machine; must match the provider ID of the corresponding Node.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// Failure domain to create the machine in; must be listed in the Cluster status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<String>,
    /// Seconds the Machine must be ready before it is considered available; defaults to 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_ready_seconds: Option<i32>,
    /// Additional conditions to include when computing the Machine's Ready condition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readiness_gates: Vec<MachineReadinessGate>,
    /// Options for Machine deletion (drain, volume detach and Node deletion timeouts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<MachineDeletionSpec>,
    /// Node taints managed by Cluster API.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<MachineTaint>,
}

/// How a Machine is bootstrapped.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bootstrap {
    /// Reference to the bootstrap provider object, e.g. a KubeadmConfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_ref: Option<ContractVersionedObjectReference>,
    /// Name of the secret holding the bootstrap data; the Machine stays Pending while unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub data_secret_name: Option<String>,
}

/// Timeouts applied when a Machine is deleted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeletionSpec {
    /// Maximum seconds spent draining the Node; 0 means no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub node_drain_timeout_seconds: Option<i32>,
    /// Maximum seconds spent waiting for volumes to detach; 0 means no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub node_volume_detach_timeout_seconds: Option<i32>,
    /// Maximum seconds spent deleting the Node; 0 retries forever, defaults to 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub node_deletion_timeout_seconds: Option<i32>,
}

/// Phase of a Machine's lifecycle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MachinePhase {
    /// Waiting for bootstrap data and infrastructure.
    Pending,
    /// Bootstrap data is ready and the infrastructure is being provisioned.
    Provisioning,
    /// The infrastructure is provisioned, waiting for the Node.
    Provisioned,
    /// The Node is up and the Machine is running.
    Running,
    /// The Machine is being updated in place.
    Updating,
    /// The Machine is being deleted.
    Deleting,
    /// The Machine and its infrastructure have been deleted.
    Deleted,
    /// The Machine is in a state that requires user intervention.
    Failed,
    /// The state of the Machine cannot be determined.
    #[default]
    Unknown,
}

/// Observed state of a Machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// Observations of the Machine's state (Ready, Available, UpToDate, NodeHealthy, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Progress of the Machine's initial provisioning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<MachineInitializationStatus>,
    /// The Node running on this Machine, once it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ref: Option<MachineNodeReference>,
    /// Identifiers and versions reported by the Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_info: Option<NodeSystemInfo>,
    /// When the phase of the Machine last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,
    /// Addresses of the machine, copied from the infrastructure object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<MachineAddress>,
    /// Failure domain where the Machine has been scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<String>,
    /// Current phase of machine actuation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<MachinePhase>,
    /// Expiry date of the machine certificates (control plane machines only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates_expiry_date: Option<Time>,
    /// Latest generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Progress of the Machine deletion (drain and volume detach start times).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<MachineDeletionStatus>,
    /// Status fields kept for v1beta1 clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<MachineDeprecatedStatus>,
}

/// Reference to the Node running on a Machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineNodeReference {
    /// Name of the Node.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Progress of a Machine's initial provisioning (part of the Cluster API contract).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineInitializationStatus {
    /// True once the infrastructure provider reports the machine as provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_provisioned: Option<bool>,
    /// True once the bootstrap provider has created the bootstrap data secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_data_secret_created: Option<bool>,
}

/// Deprecated Machine status fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeprecatedStatus {
    /// Fields that only exist for v1beta1 clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v1beta1: Option<MachineV1Beta1DeprecatedStatus>,
}

/// Machine status fields of the v1beta1 API.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineV1Beta1DeprecatedStatus {
    /// v1beta1 conditions of the Machine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<V1Beta1Condition>,
    /// Machine-readable reason of a terminal reconcile problem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Human-readable message of a terminal reconcile problem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
}

/// Progress of a Machine's deletion.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeletionStatus {
    /// When draining the Node started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_drain_start_time: Option<Time>,
    /// When waiting for volumes to detach started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_node_volume_detach_start_time: Option<Time>,
    /// When waiting for pre-drain hooks started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_pre_drain_hook_start_time: Option<Time>,
    /// When waiting for pre-terminate hooks started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_pre_terminate_hook_start_time: Option<Time>,
}

/// Template of the Machines created by a MachineSet or MachineDeployment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineTemplateSpec {
    /// Labels and annotations of the created Machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// Spec of the created Machines.
    pub spec: MachineSpec,
}

// ---------------------------------------------------------------------------------------------
// MachineSet
// ---------------------------------------------------------------------------------------------

/// Desired state of a MachineSet.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "MachineSet",
    plural = "machinesets",
    shortname = "ms",
    namespaced,
    status = "MachineSetStatus",
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    doc = "A set of identical Machines kept at the desired number of replicas.",
    scale = r#"{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas","labelSelectorPath":".status.selector"}"#,
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.clusterName","description":"Cluster"}"#,
    printcolumn = r#"{"name":"Desired","type":"integer","jsonPath":".spec.replicas","description":"The desired number of machines"}"#,
    printcolumn = r#"{"name":"Current","type":"integer","jsonPath":".status.replicas","description":"The number of machines"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas","description":"The number of machines with Ready condition true"}"#,
    printcolumn = r#"{"name":"Available","type":"integer","jsonPath":".status.availableReplicas","description":"The number of machines with Available condition true"}"#,
    printcolumn = r#"{"name":"Up-to-date","type":"integer","jsonPath":".status.upToDateReplicas","description":"The number of machines with UpToDate condition true"}"#,
    printcolumn = r#"{"name":"Paused","type":"string","jsonPath":".status.conditions[?(@.type==\"Paused\")].status","description":"Reconciliation paused","priority":10}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"Time duration since creation of MachineSet"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.template.spec.version","description":"Kubernetes version associated with this MachineSet"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetSpec {
    /// Name of the Cluster this object belongs to.
    #[schemars(length(min = 1, max = 63))]
    pub cluster_name: String,
    /// Desired number of Machines; defaults to 1 (or the autoscaler minimum size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Label query over the Machines of this set; must match the template labels.
    pub selector: LabelSelector,
    /// Template of the Machines created when replicas are missing.
    pub template: MachineTemplateSpec,
    /// Naming pattern of the created Machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_naming: Option<MachineNamingSpec>,
    /// Options for MachineSet deletion and scale down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<MachineSetDeletionSpec>,
}

/// Options for MachineSet scale down.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetDeletionSpec {
    /// Order in which Machines are deleted when scaling down; defaults to Random.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<MachineSetDeletionOrder>,
}

/// Observed state of a MachineSet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetStatus {
    /// Observations of the MachineSet's state (MachinesReady, MachinesUpToDate, ScalingUp, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Label selector in string form, used by the scale subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Most recently observed number of replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Number of Machines whose Ready condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Number of Machines whose Available condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Number of Machines whose UpToDate condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,
    /// Kubernetes versions present in this MachineSet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<StatusVersion>,
    /// Latest generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Status fields kept for v1beta1 clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<MachineSetDeprecatedStatus>,
}

/// Deprecated MachineSet status fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetDeprecatedStatus {
    /// Fields that only exist for v1beta1 clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v1beta1: Option<MachineSetV1Beta1DeprecatedStatus>,
}

/// MachineSet status fields of the v1beta1 API.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetV1Beta1DeprecatedStatus {
    /// v1beta1 conditions of the MachineSet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<V1Beta1Condition>,
    /// Machine-readable reason of a terminal reconcile problem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Human-readable message of a terminal reconcile problem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    /// Number of replicas whose labels match the template labels.
    #[serde(default)]
    pub fully_labeled_replicas: i32,
    /// Number of replicas whose Node is Ready.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Number of replicas ready for at least minReadySeconds.
    #[serde(default)]
    pub available_replicas: i32,
}

// ---------------------------------------------------------------------------------------------
// MachineDeployment
// ---------------------------------------------------------------------------------------------

/// Desired state of a MachineDeployment.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "MachineDeployment",
    plural = "machinedeployments",
    shortname = "md",
    namespaced,
    status = "MachineDeploymentStatus",
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    doc = "Declarative updates for a set of Machines, rolled out through MachineSets.",
    scale = r#"{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas","labelSelectorPath":".status.selector"}"#,
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.clusterName","description":"Cluster"}"#,
    printcolumn = r#"{"name":"Available","type":"string","jsonPath":".status.conditions[?(@.type==\"Available\")].status","description":"Cluster pass all availability checks"}"#,
    printcolumn = r#"{"name":"Desired","type":"integer","jsonPath":".spec.replicas","description":"The desired number of machines"}"#,
    printcolumn = r#"{"name":"Current","type":"integer","jsonPath":".status.replicas","description":"The number of machines"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas","description":"The number of machines with Ready condition true"}"#,
    printcolumn = r#"{"name":"Available","type":"integer","jsonPath":".status.availableReplicas","description":"The number of machines with Available condition true"}"#,
    printcolumn = r#"{"name":"Up-to-date","type":"integer","jsonPath":".status.upToDateReplicas","description":"The number of machines with UpToDate condition true"}"#,
    printcolumn = r#"{"name":"Paused","type":"string","jsonPath":".status.conditions[?(@.type==\"Paused\")].status","description":"Reconciliation paused","priority":10}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase","description":"MachineDeployment status such as ScalingUp/ScalingDown/Running/Failed/Unknown"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"Time duration since creation of MachineDeployment"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.template.spec.version","description":"Kubernetes version associated with this MachineDeployment"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentSpec {
    /// Name of the Cluster this object belongs to.
    #[schemars(length(min = 1, max = 63))]
    pub cluster_name: String,
    /// Desired number of Machines; defaults to 1 (or the autoscaler minimum size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// How Machines are replaced during rollouts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<MachineDeploymentRolloutSpec>,
    /// Label query over the Machines of this deployment; must match the template labels.
    pub selector: LabelSelector,
    /// Template of the Machines to create.
    pub template: MachineTemplateSpec,
    /// Naming pattern of the created Machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_naming: Option<MachineNamingSpec>,
    /// How unhealthy Machines are remediated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<MachineDeploymentRemediationSpec>,
    /// Options for MachineDeployment deletion and scale down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<MachineDeploymentDeletionSpec>,
    /// Whether the deployment is paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

/// Rollout behaviour of a MachineDeployment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentRolloutSpec {
    /// Roll out all Machines after this time, even without spec changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Time>,
    /// Strategy used to replace Machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<MachineDeploymentRolloutStrategy>,
}

/// Type of a MachineDeployment rollout strategy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MachineDeploymentRolloutStrategyType {
    /// Gradually scale down the old MachineSet and scale up the new one.
    #[default]
    RollingUpdate,
    /// Replace old Machines only once they have been deleted.
    OnDelete,
}

/// How a MachineDeployment replaces existing Machines with new ones.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentRolloutStrategy {
    /// Type of rollout: RollingUpdate (default) or OnDelete.
    #[serde(rename = "type")]
    pub type_: MachineDeploymentRolloutStrategyType,
    /// Parameters of a rolling update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<MachineDeploymentRolloutStrategyRollingUpdate>,
}

/// Parameters of a MachineDeployment rolling update.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentRolloutStrategyRollingUpdate {
    /// Machines that may be unavailable during the update (number or percentage); defaults to 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Machines that may be created above the desired number (number or percentage); defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
}

/// Remediation settings of a MachineDeployment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentRemediationSpec {
    /// How many remediations may run at the same time (number or percentage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<IntOrString>,
}

/// Options for MachineDeployment scale down.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentDeletionSpec {
    /// Order in which Machines are deleted when scaling down; defaults to Random.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<MachineSetDeletionOrder>,
}

/// Phase of a MachineDeployment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MachineDeploymentPhase {
    /// The deployment is scaling up.
    ScalingUp,
    /// The deployment is scaling down.
    ScalingDown,
    /// Scaling is complete and all Machines are running.
    Running,
    /// Scaling failed; kept for objects converted from v1beta1.
    Failed,
    /// The state cannot be determined.
    #[default]
    Unknown,
}

/// Observed state of a MachineDeployment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentStatus {
    /// Observations of the MachineDeployment's state (Available, MachinesReady, ScalingUp, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Latest generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Label selector in string form, used by the scale subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Number of non-terminated Machines targeted by this deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Number of Machines whose Ready condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Number of Machines whose Available condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Number of Machines whose UpToDate condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,
    /// Kubernetes versions present in this MachineDeployment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<StatusVersion>,
    /// Current phase of the deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<MachineDeploymentPhase>,
    /// Status fields kept for v1beta1 clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<MachineDeploymentDeprecatedStatus>,
}

/// Deprecated MachineDeployment status fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentDeprecatedStatus {
    /// Fields that only exist for v1beta1 clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v1beta1: Option<MachineDeploymentV1Beta1DeprecatedStatus>,
}

/// MachineDeployment status fields of the v1beta1 API.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentV1Beta1DeprecatedStatus {
    /// v1beta1 conditions of the MachineDeployment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<V1Beta1Condition>,
    /// Number of Machines that have the desired template spec.
    #[serde(default)]
    pub updated_replicas: i32,
    /// Number of ready Machines.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Number of Machines ready for at least minReadySeconds.
    #[serde(default)]
    pub available_replicas: i32,
    /// Number of Machines still missing for full available capacity.
    #[serde(default)]
    pub unavailable_replicas: i32,
}

// ---------------------------------------------------------------------------------------------
// MachinePool
// ---------------------------------------------------------------------------------------------

/// Desired state of a MachinePool.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "MachinePool",
    plural = "machinepools",
    shortname = "mp",
    namespaced,
    status = "MachinePoolStatus",
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    doc = "A group of machines the infrastructure provider scales as one (e.g. a cloud scale set); all share one bootstrap configuration.",
    scale = r#"{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas"}"#,
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.clusterName","description":"Cluster"}"#,
    printcolumn = r#"{"name":"Desired","type":"integer","jsonPath":".spec.replicas","description":"The desired number of machines"}"#,
    printcolumn = r#"{"name":"Current","type":"integer","jsonPath":".status.replicas","description":"The number of machines"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas","description":"The number of machines with Ready condition true"}"#,
    printcolumn = r#"{"name":"Available","type":"integer","jsonPath":".status.availableReplicas","description":"The number of machines with Available condition true"}"#,
    printcolumn = r#"{"name":"Up-to-date","type":"integer","jsonPath":".status.upToDateReplicas","description":"The number of machines with UpToDate condition true"}"#,
    printcolumn = r#"{"name":"Paused","type":"string","jsonPath":".status.conditions[?(@.type==\"Paused\")].status","description":"Reconciliation paused","priority":10}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase","description":"MachinePool status such as Terminating/Pending/Provisioning/Running/Failed etc"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"Time duration since creation of MachinePool"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.template.spec.version","description":"Kubernetes version associated with this MachinePool"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MachinePoolSpec {
    /// Name of the Cluster this object belongs to.
    #[schemars(length(min = 1, max = 63))]
    pub cluster_name: String,
    /// Desired number of machines; defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// What every machine of the pool is made from (bootstrap config, infrastructure, version).
    pub template: MachineTemplateSpec,
    /// Provider IDs of the pool's instances, as the infrastructure provider reports them.
    #[serde(
        default,
        rename = "providerIDList",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub provider_id_list: Vec<String>,
    /// Failure domains the pool's machines may be placed in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_domains: Vec<String>,
}

/// Observed state of a MachinePool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachinePoolStatus {
    /// Observations of the MachinePool's state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Progress of the pool's initial provisioning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<MachinePoolInitializationStatus>,
    /// The Nodes of the pool's instances; one per replica once all have joined.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_refs: Vec<ObjectReference>,
    /// Most recently observed number of replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Number of ready replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Number of available replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Number of up-to-date replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,
    /// Kubernetes versions present in this MachinePool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<StatusVersion>,
    /// Current phase: Pending, Provisioning, Provisioned, Running, ScalingUp, ScalingDown, Scaling, Deleting,
    /// Failed or Unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Latest generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Progress of a MachinePool's initial provisioning (part of the Cluster API contract).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachinePoolInitializationStatus {
    /// True once the infrastructure provider reports the pool as provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_provisioned: Option<bool>,
    /// True once the bootstrap provider has created the bootstrap data secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_data_secret_created: Option<bool>,
}

// ---------------------------------------------------------------------------------------------
// MachineHealthCheck
// ---------------------------------------------------------------------------------------------

/// Desired state of a MachineHealthCheck.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "MachineHealthCheck",
    plural = "machinehealthchecks",
    shortname = "mhc",
    shortname = "mhcs",
    namespaced,
    status = "MachineHealthCheckStatus",
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    doc = "Health checks for a set of Machines, triggering remediation of unhealthy ones.",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.clusterName","description":"Cluster"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".status.expectedMachines","description":"Number of machines currently monitored"}"#,
    printcolumn = r#"{"name":"Healthy","type":"integer","jsonPath":".status.currentHealthy","description":"Current observed healthy machines"}"#,
    printcolumn = r#"{"name":"Paused","type":"string","jsonPath":".status.conditions[?(@.type==\"Paused\")].status","description":"Reconciliation paused","priority":10}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"Time duration since creation of MachineHealthCheck"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckSpec {
    /// Name of the Cluster this object belongs to.
    #[schemars(length(min = 1, max = 63))]
    pub cluster_name: String,
    /// Label selector of the Machines to check.
    pub selector: LabelSelector,
    /// Checks deciding whether a Machine is healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<MachineHealthCheckChecks>,
    /// Whether and how remediation is triggered for unhealthy Machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<MachineHealthCheckRemediation>,
}

/// Checks deciding whether a Machine is healthy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckChecks {
    /// Seconds to wait for a Node to appear before the Machine is unhealthy; defaults to 600, 0 disables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub node_startup_timeout_seconds: Option<i32>,
    /// Node conditions that make a Machine unhealthy (any of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unhealthy_node_conditions: Vec<UnhealthyNodeCondition>,
    /// Machine conditions that make a Machine unhealthy (any of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unhealthy_machine_conditions: Vec<UnhealthyMachineCondition>,
}

/// A Node condition that makes the Machine unhealthy once held for the timeout.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnhealthyNodeCondition {
    /// Type of the Node condition, e.g. `Ready`.
    #[serde(rename = "type")]
    #[schemars(length(min = 1))]
    pub type_: String,
    /// Status of the condition: True, False or Unknown.
    #[schemars(length(min = 1))]
    pub status: String,
    /// Seconds the Node must be in this status to be considered unhealthy.
    #[schemars(range(min = 0))]
    pub timeout_seconds: i32,
}

/// Status of a condition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// It is not known whether the condition holds.
    #[default]
    Unknown,
}

/// A Machine condition that makes the Machine unhealthy once held for the timeout.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnhealthyMachineCondition {
    /// Type of the Machine condition.
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 316))]
    pub type_: String,
    /// Status of the condition: True, False or Unknown.
    pub status: ConditionStatus,
    /// Seconds the Machine must be in this status to be considered unhealthy.
    #[schemars(range(min = 0))]
    pub timeout_seconds: i32,
}

/// Whether and how remediation is triggered for unhealthy Machines.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckRemediation {
    /// Conditions under which remediation is triggered; always when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_if: Option<MachineHealthCheckRemediationTriggerIf>,
    /// Remediation template of an external remediation controller; the owner remediates when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_ref: Option<MachineHealthCheckRemediationTemplateReference>,
}

/// Conditions under which remediation is triggered.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckRemediationTriggerIf {
    /// Remediate only if the number of unhealthy Machines is at most this (number or percentage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_less_than_or_equal_to: Option<IntOrString>,
    /// Remediate only if the number of unhealthy Machines is in this range, e.g. `[3-5]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    pub unhealthy_in_range: Option<String>,
}

/// Reference to a remediation template of an infrastructure provider.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckRemediationTemplateReference {
    /// Kind of the remediation template.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Name of the remediation template.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// API version of the remediation template, e.g. `infrastructure.cluster.x-k8s.io/v1beta2`.
    #[schemars(length(min = 1, max = 317))]
    pub api_version: String,
}

/// Observed state of a MachineHealthCheck.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckStatus {
    /// Observations of the MachineHealthCheck's state (RemediationAllowed, Paused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Number of Machines monitored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub expected_machines: Option<i32>,
    /// Number of healthy Machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub current_healthy: Option<i32>,
    /// Number of further remediations allowed before short-circuiting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub remediations_allowed: Option<i32>,
    /// Latest generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Names of the Machines watched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
    /// Status fields kept for v1beta1 clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<MachineHealthCheckDeprecatedStatus>,
}

/// Deprecated MachineHealthCheck status fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckDeprecatedStatus {
    /// Fields that only exist for v1beta1 clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v1beta1: Option<MachineHealthCheckV1Beta1DeprecatedStatus>,
}

/// MachineHealthCheck status fields of the v1beta1 API.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckV1Beta1DeprecatedStatus {
    /// v1beta1 conditions of the MachineHealthCheck.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<V1Beta1Condition>,
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;
    use serde_json::Value;

    use super::*;

    fn round_trip<T: serde::de::DeserializeOwned + Serialize>(yaml: &str) -> T {
        let input: Value = serde_saphyr::from_str(yaml).expect("yaml parses as a value");
        let typed: T = serde_json::from_value(input.clone()).expect("typed object deserializes");
        let output = serde_json::to_value(&typed).expect("typed object serializes");
        assert_eq!(input, output);
        typed
    }

    fn column_names(
        crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    ) -> Vec<String> {
        crd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.clone())
            .collect()
    }

    #[test]
    fn cluster_round_trip() {
        let cluster: Cluster = round_trip(
            r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: my-cluster
  namespace: default
  labels:
    cni: calico
spec:
  clusterNetwork:
    apiServerPort: 6443
    pods:
      cidrBlocks: ["192.168.0.0/16"]
    services:
      cidrBlocks: ["10.128.0.0/12"]
    serviceDomain: cluster.local
  controlPlaneEndpoint:
    host: 10.0.0.10
    port: 6443
  controlPlaneRef:
    apiGroup: controlplane.cluster.x-k8s.io
    kind: KubeadmControlPlane
    name: my-cluster-control-plane
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: DockerCluster
    name: my-cluster
status:
  conditions:
  - type: Available
    status: "True"
    reason: Available
    message: ""
    lastTransitionTime: "2025-06-01T10:00:00Z"
    observedGeneration: 2
  initialization:
    infrastructureProvisioned: true
    controlPlaneInitialized: true
  controlPlane:
    desiredReplicas: 3
    replicas: 3
    readyReplicas: 3
    availableReplicas: 3
    upToDateReplicas: 3
  workers:
    desiredReplicas: 2
    replicas: 2
  failureDomains:
  - name: fd1
    controlPlane: true
    attributes:
      zone: eu-1a
  - name: fd2
  phase: Provisioned
  observedGeneration: 2
"#,
        );
        let spec = &cluster.spec;
        assert_eq!(
            spec.cluster_network.as_ref().unwrap().api_server_port,
            Some(6443)
        );
        assert_eq!(
            spec.control_plane_ref.as_ref().unwrap().kind,
            "KubeadmControlPlane"
        );
        let status = cluster.status.unwrap();
        assert_eq!(status.phase, Some(ClusterPhase::Provisioned));
        assert_eq!(status.failure_domains.len(), 2);
    }

    #[test]
    fn machine_round_trip() {
        let machine: Machine = round_trip(
            r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata:
  name: my-cluster-control-plane-abcde
  namespace: default
  labels:
    cluster.x-k8s.io/cluster-name: my-cluster
    cluster.x-k8s.io/control-plane: ""
spec:
  clusterName: my-cluster
  version: v1.33.1
  bootstrap:
    configRef:
      apiGroup: bootstrap.cluster.x-k8s.io
      kind: KubeadmConfig
      name: my-cluster-control-plane-abcde
    dataSecretName: my-cluster-control-plane-abcde
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: DockerMachine
    name: my-cluster-control-plane-abcde
  providerID: docker:////my-cluster-control-plane-abcde
  failureDomain: fd1
  minReadySeconds: 0
  readinessGates:
  - conditionType: APIServerPodHealthy
  - conditionType: EtcdMemberHealthy
    polarity: Positive
  deletion:
    nodeDrainTimeoutSeconds: 300
    nodeVolumeDetachTimeoutSeconds: 60
    nodeDeletionTimeoutSeconds: 10
  taints:
  - key: node-role.kubernetes.io/control-plane
    effect: NoSchedule
    propagation: Always
status:
  nodeRef:
    name: my-cluster-control-plane-abcde
  initialization:
    infrastructureProvisioned: true
    bootstrapDataSecretCreated: true
  addresses:
  - type: InternalIP
    address: 172.18.0.3
  - type: Hostname
    address: my-cluster-control-plane-abcde
  phase: Running
  certificatesExpiryDate: "2026-06-01T10:00:00Z"
  observedGeneration: 1
  conditions:
  - type: Ready
    status: "True"
    reason: Ready
    message: ""
    lastTransitionTime: "2025-06-01T10:00:00Z"
  deletion:
    nodeDrainStartTime: "2025-06-02T10:00:00Z"
"#,
        );
        assert_eq!(
            machine.spec.provider_id.as_deref(),
            Some("docker:////my-cluster-control-plane-abcde")
        );
        assert_eq!(machine.spec.taints[0].effect, TaintEffect::NoSchedule);
        let status = machine.status.unwrap();
        assert_eq!(status.addresses[0].type_, MachineAddressType::InternalIp);
        assert_eq!(status.phase, Some(MachinePhase::Running));
    }

    #[test]
    fn machine_deployment_and_health_check_round_trip() {
        let md: MachineDeployment = round_trip(
            r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata:
  name: my-cluster-md-0
  namespace: default
spec:
  clusterName: my-cluster
  replicas: 2
  selector:
    matchLabels:
      cluster.x-k8s.io/deployment-name: my-cluster-md-0
  rollout:
    strategy:
      type: RollingUpdate
      rollingUpdate:
        maxSurge: 1
        maxUnavailable: 0
  template:
    metadata:
      labels:
        cluster.x-k8s.io/deployment-name: my-cluster-md-0
    spec:
      clusterName: my-cluster
      version: v1.33.1
      bootstrap:
        configRef:
          apiGroup: bootstrap.cluster.x-k8s.io
          kind: KubeadmConfigTemplate
          name: my-cluster-md-0
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: DockerMachineTemplate
        name: my-cluster-md-0
status:
  selector: cluster.x-k8s.io/deployment-name=my-cluster-md-0
  replicas: 2
  upToDateReplicas: 2
  phase: Running
  deprecated:
    v1beta1:
      updatedReplicas: 2
      readyReplicas: 2
      availableReplicas: 2
      unavailableReplicas: 0
"#,
        );
        assert_eq!(md.spec.replicas, Some(2));

        let mhc: MachineHealthCheck = round_trip(
            r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineHealthCheck
metadata:
  name: my-cluster-kcp-unhealthy
spec:
  clusterName: my-cluster
  selector:
    matchLabels:
      cluster.x-k8s.io/control-plane: ""
  checks:
    nodeStartupTimeoutSeconds: 600
    unhealthyNodeConditions:
    - type: Ready
      status: Unknown
      timeoutSeconds: 300
    - type: Ready
      status: "False"
      timeoutSeconds: 300
  remediation:
    triggerIf:
      unhealthyLessThanOrEqualTo: 100%
status:
  expectedMachines: 3
  currentHealthy: 3
  remediationsAllowed: 3
  targets: [a, b, c]
"#,
        );
        assert_eq!(
            mhc.spec.checks.unwrap().unhealthy_node_conditions[0].timeout_seconds,
            300
        );
    }

    #[test]
    fn machine_pool_round_trip() {
        let pool: MachinePool = round_trip(
            r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachinePool
metadata:
  name: my-cluster-mp-0
  namespace: default
spec:
  clusterName: my-cluster
  replicas: 2
  template:
    spec:
      clusterName: my-cluster
      version: v1.33.1
      bootstrap:
        configRef:
          apiGroup: bootstrap.cluster.x-k8s.io
          kind: KubeadmConfig
          name: my-cluster-mp-0
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: DockerMachinePool
        name: my-cluster-mp-0
  providerIDList: ["docker:////a", "docker:////b"]
  failureDomains: [fd1]
status:
  initialization:
    infrastructureProvisioned: true
    bootstrapDataSecretCreated: true
  nodeRefs:
  - kind: Node
    name: worker-a
  replicas: 2
  readyReplicas: 1
  phase: ScalingUp
"#,
        );
        assert_eq!(pool.spec.replicas, Some(2));
        assert_eq!(
            pool.status.unwrap().node_refs[0].name.as_deref(),
            Some("worker-a")
        );
        let scale = MachinePool::crd().spec.versions[0]
            .subresources
            .as_ref()
            .and_then(|s| s.scale.clone())
            .expect("scale subresource");
        assert_eq!(scale.spec_replicas_path, ".spec.replicas");
    }

    #[test]
    fn crds() {
        let cluster = Cluster::crd();
        assert_eq!(cluster.spec.names.short_names, Some(vec!["cl".to_string()]));
        assert!(column_names(&cluster).contains(&"CP Desired".to_string()));

        let machine = Machine::crd();
        assert_eq!(
            column_names(&machine),
            [
                "Cluster",
                "Node Name",
                "Provider ID",
                "Failure domain",
                "Ready",
                "Available",
                "Up-to-date",
                "Internal-IP",
                "External-IP",
                "OS-Image",
                "Paused",
                "Phase",
                "Age",
                "Version"
            ]
        );

        for crd in [MachineSet::crd(), MachineDeployment::crd()] {
            let scale = crd.spec.versions[0]
                .subresources
                .as_ref()
                .and_then(|s| s.scale.as_ref())
                .expect("scale subresource");
            assert_eq!(scale.spec_replicas_path, ".spec.replicas");
            assert_eq!(scale.status_replicas_path, ".status.replicas");
            assert_eq!(
                scale.label_selector_path.as_deref(),
                Some(".status.selector")
            );
        }

        let mhc = MachineHealthCheck::crd();
        assert_eq!(
            mhc.spec.names.short_names,
            Some(vec!["mhc".to_string(), "mhcs".to_string()])
        );
        assert_eq!(
            mhc.spec.names.categories,
            Some(vec!["cluster-api".to_string()])
        );
    }
}
