//! `controlplane.cluster.x-k8s.io/v1beta2`, the storage version: KubeadmControlPlane and
//! KubeadmControlPlaneTemplate.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::bootstrap::v1beta2::KubeadmConfigSpec;
use crate::cluster::v1beta2::{MachineReadinessGate, MachineTaint, StatusVersion};
use crate::meta::{ContractVersionedObjectReference, ObjectMeta, V1Beta1Condition};

/// Desired state of a KubeadmControlPlane.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "controlplane.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "KubeadmControlPlane",
    plural = "kubeadmcontrolplanes",
    shortname = "kcp",
    namespaced,
    status = "KubeadmControlPlaneStatus",
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    doc = "A Kubernetes control plane of Machines bootstrapped with kubeadm.",
    scale = r#"{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas","labelSelectorPath":".status.selector"}"#,
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']","description":"Cluster"}"#,
    printcolumn = r#"{"name":"Available","type":"string","jsonPath":".status.conditions[?(@.type==\"Available\")].status","description":"Cluster pass all availability checks"}"#,
    printcolumn = r#"{"name":"Desired","type":"integer","jsonPath":".spec.replicas","description":"The desired number of machines"}"#,
    printcolumn = r#"{"name":"Current","type":"integer","jsonPath":".status.replicas","description":"The number of machines"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas","description":"The number of machines with Ready condition true"}"#,
    printcolumn = r#"{"name":"Available","type":"integer","jsonPath":".status.availableReplicas","description":"The number of machines with Available condition true"}"#,
    printcolumn = r#"{"name":"Up-to-date","type":"integer","jsonPath":".status.upToDateReplicas","description":"The number of machines with UpToDate condition true"}"#,
    printcolumn = r#"{"name":"Paused","type":"string","jsonPath":".status.conditions[?(@.type==\"Paused\")].status","description":"Reconciliation paused","priority":10}"#,
    printcolumn = r#"{"name":"Initialized","type":"boolean","jsonPath":".status.initialization.controlPlaneInitialized","description":"This denotes whether or not the control plane can accept requests"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"Time duration since creation of KubeadmControlPlane"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version","description":"Kubernetes version associated with this control plane"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneSpec {
    /// Desired number of control plane machines; defaults to 1. Use odd numbers with stacked etcd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Desired Kubernetes version, e.g. `v1.33.1`.
    #[schemars(length(min = 1, max = 256))]
    pub version: String,
    /// How the control plane Machines are shaped.
    pub machine_template: KubeadmControlPlaneMachineTemplate,
    /// kubeadm configuration used to initialize and join the control plane machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeadm_config_spec: Option<KubeadmConfigSpec>,
    /// When and how control plane Machines are replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<KubeadmControlPlaneRolloutSpec>,
    /// How unhealthy control plane Machines are remediated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<KubeadmControlPlaneRemediationSpec>,
    /// Naming pattern of the created Machines (also used for InfraMachines and KubeadmConfigs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_naming: Option<MachineNamingSpec>,
    /// Scheduled snapshots of the stacked etcd to S3-compatible object storage (this provider's
    /// addition: not part of Cluster API's KubeadmControlPlane).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_backup: Option<super::etcd_backup::EtcdBackup>,
}

/// Template of the control plane Machines.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneMachineTemplate {
    /// Labels and annotations of the created Machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// Spec of the created Machines.
    pub spec: KubeadmControlPlaneMachineTemplateSpec,
}

/// Spec of the control plane Machines.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneMachineTemplateSpec {
    /// Reference to the infrastructure machine template to clone for each Machine.
    pub infrastructure_ref: ContractVersionedObjectReference,
    /// Extra conditions to include in the Machines' Ready condition, besides those KCP always adds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readiness_gates: Vec<MachineReadinessGate>,
    /// Options for Machine deletion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<KubeadmControlPlaneMachineTemplateDeletionSpec>,
    /// Node taints managed by Cluster API.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<MachineTaint>,
}

/// Timeouts applied when a control plane Machine is deleted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneMachineTemplateDeletionSpec {
    /// Maximum seconds spent draining the Node; 0 means no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub node_drain_timeout_seconds: Option<i32>,
    /// Maximum seconds spent waiting for volumes to detach; 0 means no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub node_volume_detach_timeout_seconds: Option<i32>,
    /// Maximum seconds spent deleting the Node; 0 retries forever, the Machine default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub node_deletion_timeout_seconds: Option<i32>,
}

/// When and how control plane Machines are replaced.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneRolloutSpec {
    /// Criteria that trigger a rollout when met.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<KubeadmControlPlaneRolloutBeforeSpec>,
    /// Roll out all Machines after this time, even without spec changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Time>,
    /// Strategy used to replace Machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<KubeadmControlPlaneRolloutStrategy>,
}

/// Criteria that trigger a rollout of the control plane Machines.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneRolloutBeforeSpec {
    /// Roll out Machines whose certificates expire within this many days (at least 7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 7))]
    pub certificates_expiry_days: Option<i32>,
}

/// Type of a KubeadmControlPlane rollout strategy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum KubeadmControlPlaneRolloutStrategyType {
    /// Replace Machines one by one, scaling up or down around the desired replicas.
    #[default]
    RollingUpdate,
}

/// How control plane Machines are replaced with new ones.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneRolloutStrategy {
    /// Type of rollout; only RollingUpdate is supported, and the default. Cluster API's defaulting
    /// webhook fills it before the API server checks the schema; templates leave it out.
    #[serde(rename = "type", default)]
    pub type_: KubeadmControlPlaneRolloutStrategyType,
    /// Parameters of a rolling update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<KubeadmControlPlaneRolloutStrategyRollingUpdate>,
}

/// Parameters of a control plane rolling update.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneRolloutStrategyRollingUpdate {
    /// Machines created above (1) or removed below (0) the desired number during a rollout; defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
}

/// How unhealthy control plane Machines are remediated.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneRemediationSpec {
    /// Maximum retries when a replacement Machine fails again; unlimited when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retry: Option<i32>,
    /// Seconds to wait before remediating a replacement Machine (a retry); none when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub retry_period_seconds: Option<i32>,
    /// Seconds after which a new failure is unrelated to the previous remediation; defaults to 3600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_healthy_period_seconds: Option<i32>,
}

/// Naming pattern of the control plane Machines.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineNamingSpec {
    /// Template for Machine names; may use `.cluster.name`, `.kubeadmControlPlane.name` and must use `.random`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub template: Option<String>,
}

/// Observed state of a KubeadmControlPlane.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneStatus {
    /// Observations of the control plane's state (Available, EtcdClusterAvailable, MachinesReady, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Progress of the control plane initialization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<KubeadmControlPlaneInitializationStatus>,
    /// Label selector of the Machines in string form, used by the scale subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Number of non-terminated Machines targeted by this control plane.
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
    /// Kubernetes versions present in the control plane.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<StatusVersion>,
    /// Minimum Kubernetes version of the control plane Machines (deprecated, see versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Latest generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The last remediation performed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_remediation: Option<LastRemediationStatus>,
    /// Maintenance of the stacked etcd (this provider's addition: not part of Cluster API's
    /// KubeadmControlPlane; v1beta1 clients keep it in the conversion-data annotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd: Option<KubeadmControlPlaneEtcdStatus>,
    /// Status fields kept for v1beta1 clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<KubeadmControlPlaneDeprecatedStatus>,
}

/// Progress of the control plane initialization (part of the Cluster API contract).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneInitializationStatus {
    /// True once the control plane can accept requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_initialized: Option<bool>,
}

/// Deprecated KubeadmControlPlane status fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneDeprecatedStatus {
    /// Fields that only exist for v1beta1 clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v1beta1: Option<KubeadmControlPlaneV1Beta1DeprecatedStatus>,
}

/// KubeadmControlPlane status fields of the v1beta1 API.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneV1Beta1DeprecatedStatus {
    /// v1beta1 conditions of the KubeadmControlPlane.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<V1Beta1Condition>,
    /// Machine-readable reason of a terminal reconcile problem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Human-readable message of a terminal reconcile problem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    /// Number of Machines that have the desired template spec.
    #[serde(default)]
    pub updated_replicas: i32,
    /// Number of fully running and ready control plane Machines.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Number of Machines still missing for full available capacity.
    #[serde(default)]
    pub unavailable_replicas: i32,
}

/// The last remediation performed by a KubeadmControlPlane.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastRemediationStatus {
    /// Name of the Machine that was remediated last.
    #[schemars(length(min = 1, max = 253))]
    pub machine: String,
    /// When the last remediation happened.
    pub time: Time,
    /// Retry count of the last remediated Machine.
    #[schemars(range(min = 0))]
    pub retry_count: i32,
}

/// What the controller last did to the stacked etcd.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneEtcdStatus {
    /// The last finished leader-aware defragmentation round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_defragmentation: Option<EtcdDefragmentationStatus>,
    /// The last snapshot written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_snapshot: Option<EtcdSnapshotStatus>,
}

/// A finished defragmentation round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdDefragmentationStatus {
    /// When the round finished.
    pub time: Time,
    /// Names of the defragmented members, in the order they were defragmented (the former leader last).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<String>,
    /// Sum of the members' database file sizes before the round, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub db_size_before: Option<i64>,
    /// Sum of the members' database file sizes after the round, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub db_size_after: Option<i64>,
}

/// A snapshot of the etcd keyspace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdSnapshotStatus {
    /// When the snapshot was taken.
    pub time: Time,
    /// Where it is: a file path in the manager's snapshot directory, or `secret/<name>` for a Secret in
    /// the control plane's namespace.
    #[schemars(length(min = 1))]
    pub location: String,
    /// Size of the snapshot as etcd streamed it (uncompressed), in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub size: Option<i64>,
    /// Key-value store revision of the member the snapshot came from, when it was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// Name of the member the snapshot came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
}

/// Desired state of a KubeadmControlPlaneTemplate.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "controlplane.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "KubeadmControlPlaneTemplate",
    plural = "kubeadmcontrolplanetemplates",
    namespaced,
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    doc = "Template from which KubeadmControlPlanes are created, e.g. by a ClusterClass.",
    printcolumn = r#"{"name":"ClusterClass","type":"string","jsonPath":".metadata.ownerReferences[?(@.kind==\"ClusterClass\")].name","description":"Name of the ClusterClass owning this template"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"Time duration since creation of KubeadmControlPlaneTemplate"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneTemplateSpec {
    /// The KubeadmControlPlane to create.
    pub template: KubeadmControlPlaneTemplateResource,
}

/// A KubeadmControlPlane as described in a template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneTemplateResource {
    /// Labels and annotations of the created KubeadmControlPlane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// Spec of the created KubeadmControlPlane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<KubeadmControlPlaneTemplateResourceSpec>,
}

/// KubeadmControlPlane spec in a template, without replicas and version (set by the topology).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneTemplateResourceSpec {
    /// How the control plane Machines are shaped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_template: Option<KubeadmControlPlaneTemplateMachineTemplate>,
    /// kubeadm configuration used to initialize and join the control plane machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeadm_config_spec: Option<KubeadmConfigSpec>,
    /// When and how control plane Machines are replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<KubeadmControlPlaneRolloutSpec>,
    /// How unhealthy control plane Machines are remediated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<KubeadmControlPlaneRemediationSpec>,
    /// Naming pattern of the created Machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_naming: Option<MachineNamingSpec>,
}

/// Template of the control plane Machines in a KubeadmControlPlaneTemplate (no infrastructureRef).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneTemplateMachineTemplate {
    /// Labels and annotations of the created Machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// Spec of the created Machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<KubeadmControlPlaneTemplateMachineTemplateSpec>,
}

/// Spec of the control plane Machines in a KubeadmControlPlaneTemplate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneTemplateMachineTemplateSpec {
    /// Options for Machine deletion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<KubeadmControlPlaneTemplateMachineTemplateDeletionSpec>,
    /// Node taints managed by Cluster API.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<MachineTaint>,
}

/// Timeouts applied when a control plane Machine created from a template is deleted.
pub type KubeadmControlPlaneTemplateMachineTemplateDeletionSpec =
    KubeadmControlPlaneMachineTemplateDeletionSpec;

#[cfg(test)]
mod tests {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
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

    fn column_names(crd: &CustomResourceDefinition) -> Vec<String> {
        crd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.clone())
            .collect()
    }

    const KCP: &str = r#"
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata:
  name: my-cluster-control-plane
  namespace: default
spec:
  replicas: 3
  version: v1.33.1
  machineTemplate:
    metadata:
      labels:
        environment: test
    spec:
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: DockerMachineTemplate
        name: my-cluster-control-plane
      deletion:
        nodeDrainTimeoutSeconds: 300
  kubeadmConfigSpec:
    clusterConfiguration:
      apiServer:
        certSANs:
        - localhost
        - 127.0.0.1
      controllerManager:
        extraArgs:
        - name: bind-address
          value: 0.0.0.0
    initConfiguration:
      nodeRegistration:
        kubeletExtraArgs:
        - name: eviction-hard
          value: nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%
    joinConfiguration:
      nodeRegistration:
        kubeletExtraArgs:
        - name: eviction-hard
          value: nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%
  rollout:
    before:
      certificatesExpiryDays: 21
    strategy:
      type: RollingUpdate
      rollingUpdate:
        maxSurge: 1
  remediation:
    maxRetry: 5
    retryPeriodSeconds: 120
    minHealthyPeriodSeconds: 3600
  machineNaming:
    template: "{{ .kubeadmControlPlane.name }}-{{ .random }}"
status:
  selector: cluster.x-k8s.io/cluster-name=my-cluster,cluster.x-k8s.io/control-plane
  replicas: 3
  readyReplicas: 3
  availableReplicas: 3
  upToDateReplicas: 3
  version: v1.33.1
  versions:
  - version: v1.33.1
    replicas: 3
  observedGeneration: 1
  initialization:
    controlPlaneInitialized: true
  conditions:
  - type: Available
    status: "True"
    reason: Available
    message: ""
    lastTransitionTime: "2025-06-01T10:00:00Z"
  lastRemediation:
    machine: my-cluster-control-plane-xyz12
    time: "2025-06-01T09:00:00Z"
    retryCount: 0
  deprecated:
    v1beta1:
      updatedReplicas: 3
      readyReplicas: 3
      unavailableReplicas: 0
      conditions:
      - type: Ready
        status: "True"
        lastTransitionTime: "2025-06-01T10:00:00Z"
"#;

    #[test]
    fn kubeadm_control_plane_round_trip() {
        let kcp: KubeadmControlPlane = round_trip(KCP);
        assert_eq!(kcp.spec.replicas, Some(3));
        assert_eq!(kcp.spec.version, "v1.33.1");
        assert_eq!(
            kcp.spec.machine_template.spec.infrastructure_ref.kind,
            "DockerMachineTemplate"
        );
        let rollout = kcp.spec.rollout.as_ref().unwrap();
        assert_eq!(
            rollout.before.as_ref().unwrap().certificates_expiry_days,
            Some(21)
        );
        let strategy = rollout.strategy.as_ref().unwrap();
        assert_eq!(
            strategy.type_,
            KubeadmControlPlaneRolloutStrategyType::RollingUpdate
        );
        assert_eq!(
            strategy.rolling_update.as_ref().unwrap().max_surge,
            Some(IntOrString::Int(1))
        );
        let status = kcp.status.unwrap();
        assert_eq!(
            status.initialization.unwrap().control_plane_initialized,
            Some(true)
        );
        assert_eq!(
            status.deprecated.unwrap().v1beta1.unwrap().updated_replicas,
            3
        );
    }

    #[test]
    fn kubeadm_control_plane_template_round_trip() {
        let template: KubeadmControlPlaneTemplate = round_trip(
            r#"
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlaneTemplate
metadata:
  name: quick-start-control-plane
spec:
  template:
    spec:
      machineTemplate:
        spec:
          deletion:
            nodeDrainTimeoutSeconds: 60
          taints:
          - key: node-role.kubernetes.io/control-plane
            effect: NoSchedule
            propagation: Always
      kubeadmConfigSpec:
        clusterConfiguration:
          apiServer:
            certSANs: [localhost, 127.0.0.1]
        initConfiguration:
          nodeRegistration:
            criSocket: unix:///var/run/containerd/containerd.sock
        joinConfiguration:
          nodeRegistration:
            criSocket: unix:///var/run/containerd/containerd.sock
      rollout:
        strategy:
          type: RollingUpdate
"#,
        );
        let spec = template.spec.template.spec.unwrap();
        assert!(spec.kubeadm_config_spec.is_some());
    }

    #[test]
    fn crd_has_scale_and_printer_columns() {
        let crd = KubeadmControlPlane::crd();
        assert_eq!(crd.spec.names.short_names, Some(vec!["kcp".to_string()]));
        assert_eq!(
            crd.spec.names.categories,
            Some(vec!["cluster-api".to_string()])
        );
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1beta2");
        let subresources = version.subresources.as_ref().unwrap();
        assert!(subresources.status.is_some());
        let scale = subresources.scale.as_ref().unwrap();
        assert_eq!(scale.spec_replicas_path, ".spec.replicas");
        assert_eq!(scale.status_replicas_path, ".status.replicas");
        assert_eq!(
            scale.label_selector_path.as_deref(),
            Some(".status.selector")
        );
        assert_eq!(
            column_names(&crd),
            [
                "Cluster",
                "Available",
                "Desired",
                "Current",
                "Ready",
                "Available",
                "Up-to-date",
                "Paused",
                "Initialized",
                "Age",
                "Version"
            ]
        );

        let template = KubeadmControlPlaneTemplate::crd();
        assert_eq!(column_names(&template), ["ClusterClass", "Age"]);
    }
}
