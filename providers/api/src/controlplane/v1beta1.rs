//! `controlplane.cluster.x-k8s.io/v1beta1` (deprecated, still served): KubeadmControlPlane and
//! KubeadmControlPlaneTemplate with their v1beta1 field names.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::bootstrap::v1beta1::KubeadmConfigSpec;
use crate::cluster::v1beta2::{MachineReadinessGate, MachineTaint, StatusVersion};
use crate::meta::{ObjectMeta, V1Beta1Condition};

/// Desired state of a KubeadmControlPlane.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "controlplane.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "KubeadmControlPlane",
    plural = "kubeadmcontrolplanes",
    shortname = "kcp",
    namespaced,
    status = "KubeadmControlPlaneStatus",
    category = "cluster-api",
    deprecated,
    derive = "PartialEq",
    derive = "Default",
    doc = "A Kubernetes control plane of Machines bootstrapped with kubeadm.",
    scale = r#"{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas","labelSelectorPath":".status.selector"}"#,
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']","description":"Cluster"}"#,
    printcolumn = r#"{"name":"Initialized","type":"boolean","jsonPath":".status.initialized","description":"This denotes whether or not the control plane has the uploaded kubeadm-config configmap"}"#,
    printcolumn = r#"{"name":"API Server Available","type":"boolean","jsonPath":".status.ready","description":"KubeadmControlPlane API Server is ready to receive requests"}"#,
    printcolumn = r#"{"name":"Desired","type":"integer","jsonPath":".spec.replicas","description":"Total number of machines desired by this control plane","priority":10}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".status.replicas","description":"Total number of non-terminated machines targeted by this control plane"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas","description":"Total number of fully running and ready control plane machines"}"#,
    printcolumn = r#"{"name":"Updated","type":"integer","jsonPath":".status.updatedReplicas","description":"Total number of non-terminated machines targeted by this control plane that have the desired template spec"}"#,
    printcolumn = r#"{"name":"Unavailable","type":"integer","jsonPath":".status.unavailableReplicas","description":"Total number of unavailable machines targeted by this control plane"}"#,
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
    pub kubeadm_config_spec: KubeadmConfigSpec,
    /// Criteria that trigger a rollout when met.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_before: Option<RolloutBefore>,
    /// Roll out all Machines after this time, even without spec changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_after: Option<Time>,
    /// Strategy used to replace control plane Machines; RollingUpdate with maxSurge 1 by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}))]
    pub rollout_strategy: Option<RolloutStrategy>,
    /// How unhealthy control plane Machines are remediated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation_strategy: Option<RemediationStrategy>,
    /// Naming pattern of the created Machines (also used for InfraMachines and KubeadmConfigs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_naming_strategy: Option<MachineNamingStrategy>,
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
    /// Reference to the infrastructure machine template to clone for each Machine.
    pub infrastructure_ref: ObjectReference,
    /// Extra conditions to include in the Machines' Ready condition, besides those KCP always adds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readiness_gates: Vec<MachineReadinessGate>,
    /// Maximum time spent draining a Node, e.g. `5m0s`; no limit when unset or 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_drain_timeout: Option<String>,
    /// Maximum time spent waiting for volumes to detach; no limit when unset or 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_volume_detach_timeout: Option<String>,
    /// Maximum time spent deleting the Node; 0 retries forever, the Machine default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_deletion_timeout: Option<String>,
    /// Node taints managed by Cluster API.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<MachineTaint>,
}

/// Criteria that trigger a rollout of the control plane Machines.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutBefore {
    /// Roll out Machines whose certificates expire within this many days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates_expiry_days: Option<i32>,
}

/// Type of a KubeadmControlPlane rollout strategy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RolloutStrategyType {
    /// Replace Machines one by one, scaling up or down around the desired replicas.
    #[default]
    RollingUpdate,
}

/// How control plane Machines are replaced with new ones.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStrategy {
    /// Type of rollout; only RollingUpdate is supported.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<RolloutStrategyType>,
    /// Parameters of a rolling update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdate>,
}

/// Parameters of a control plane rolling update.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdate {
    /// Machines created above (1) or removed below (0) the desired number during a rollout; defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
}

/// How unhealthy control plane Machines are remediated.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemediationStrategy {
    /// Maximum retries when a replacement Machine fails again; unlimited when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retry: Option<i32>,
    /// Time to wait before remediating a replacement Machine (a retry), e.g. `2m0s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_period: Option<String>,
    /// Time after which a new failure is unrelated to the previous remediation; defaults to 1h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_healthy_period: Option<String>,
}

/// Naming pattern of the control plane Machines.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineNamingStrategy {
    /// Template for Machine names; may use `.cluster.name`, `.kubeadmControlPlane.name` and must use `.random`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub template: Option<String>,
}

/// Observed state of a KubeadmControlPlane.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneStatus {
    /// Label selector of the Machines in string form, used by the scale subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Number of non-terminated Machines targeted by this control plane.
    #[serde(default)]
    pub replicas: i32,
    /// Minimum Kubernetes version of the control plane Machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Number of Machines that have the desired template spec.
    #[serde(default)]
    pub updated_replicas: i32,
    /// Number of fully running and ready control plane Machines.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Number of Machines still missing for full available capacity.
    #[serde(default)]
    pub unavailable_replicas: i32,
    /// True once the control plane API server can accept requests; never reset.
    #[serde(default)]
    pub initialized: bool,
    /// True once the API server became ready during initial provisioning; never reset.
    #[serde(default)]
    pub ready: bool,
    /// Machine-readable reason of a terminal reconcile problem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Human-readable message of a terminal reconcile problem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    /// Latest generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// v1beta1 conditions of the KubeadmControlPlane.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<V1Beta1Condition>,
    /// The last remediation performed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_remediation: Option<LastRemediationStatus>,
    /// Kubernetes versions present in the control plane.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<StatusVersion>,
    /// Status fields introduced with the v1beta2 API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v1beta2: Option<KubeadmControlPlaneV1Beta2Status>,
}

/// KubeadmControlPlane status fields of the v1beta2 API.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneV1Beta2Status {
    /// Observations of the control plane's state (Available, EtcdClusterAvailable, MachinesReady, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Number of Machines whose Ready condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Number of Machines whose Available condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Number of Machines whose UpToDate condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,
}

/// The last remediation performed by a KubeadmControlPlane.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastRemediationStatus {
    /// Name of the Machine that was remediated last.
    #[schemars(length(min = 1, max = 253))]
    pub machine: String,
    /// When the last remediation happened.
    pub timestamp: Time,
    /// Retry count of the last remediated Machine.
    pub retry_count: i32,
}

/// Desired state of a KubeadmControlPlaneTemplate.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "controlplane.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "KubeadmControlPlaneTemplate",
    plural = "kubeadmcontrolplanetemplates",
    namespaced,
    category = "cluster-api",
    deprecated,
    derive = "PartialEq",
    derive = "Default",
    doc = "Template from which KubeadmControlPlanes are created, e.g. by a ClusterClass.",
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
    pub spec: KubeadmControlPlaneTemplateResourceSpec,
}

/// KubeadmControlPlane spec in a template, without replicas and version (set by the topology).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneTemplateResourceSpec {
    /// How the control plane Machines are shaped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_template: Option<KubeadmControlPlaneTemplateMachineTemplate>,
    /// kubeadm configuration used to initialize and join the control plane machines.
    pub kubeadm_config_spec: KubeadmConfigSpec,
    /// Criteria that trigger a rollout when met.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_before: Option<RolloutBefore>,
    /// Roll out all Machines after this time, even without spec changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_after: Option<Time>,
    /// Strategy used to replace control plane Machines; RollingUpdate with maxSurge 1 by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}))]
    pub rollout_strategy: Option<RolloutStrategy>,
    /// How unhealthy control plane Machines are remediated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation_strategy: Option<RemediationStrategy>,
    /// Naming pattern of the created Machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_naming_strategy: Option<MachineNamingStrategy>,
}

/// Template of the control plane Machines in a KubeadmControlPlaneTemplate (no infrastructureRef).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneTemplateMachineTemplate {
    /// Labels and annotations of the created Machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// Maximum time spent draining a Node, e.g. `5m0s`; no limit when unset or 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_drain_timeout: Option<String>,
    /// Maximum time spent waiting for volumes to detach; no limit when unset or 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_volume_detach_timeout: Option<String>,
    /// Maximum time spent deleting the Node; 0 retries forever, the Machine default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_deletion_timeout: Option<String>,
    /// Node taints managed by Cluster API.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<MachineTaint>,
}

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

    #[test]
    fn kubeadm_control_plane_round_trip() {
        let kcp: KubeadmControlPlane = round_trip(
            r#"
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata:
  name: my-cluster-control-plane
  namespace: default
spec:
  replicas: 3
  version: v1.33.1
  machineTemplate:
    metadata: {}
    infrastructureRef:
      apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
      kind: DockerMachineTemplate
      name: my-cluster-control-plane
    nodeDrainTimeout: 5m0s
    nodeDeletionTimeout: 10s
  kubeadmConfigSpec:
    clusterConfiguration:
      apiServer:
        certSANs:
        - localhost
        - 127.0.0.1
      controllerManager:
        extraArgs:
          bind-address: 0.0.0.0
    initConfiguration:
      nodeRegistration:
        kubeletExtraArgs:
          eviction-hard: nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%
    joinConfiguration:
      nodeRegistration:
        kubeletExtraArgs:
          eviction-hard: nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%
  rolloutBefore:
    certificatesExpiryDays: 21
  rolloutStrategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 1
  remediationStrategy:
    maxRetry: 5
    retryPeriod: 2m0s
    minHealthyPeriod: 1h0m0s
status:
  selector: cluster.x-k8s.io/cluster-name=my-cluster,cluster.x-k8s.io/control-plane
  replicas: 3
  version: v1.33.1
  updatedReplicas: 3
  readyReplicas: 3
  unavailableReplicas: 0
  initialized: true
  ready: true
  observedGeneration: 1
  conditions:
  - type: Ready
    status: "True"
    lastTransitionTime: "2025-06-01T10:00:00Z"
  - type: MachinesReady
    status: "False"
    severity: Warning
    reason: Draining
    lastTransitionTime: "2025-06-01T10:00:00Z"
  lastRemediation:
    machine: my-cluster-control-plane-xyz12
    timestamp: "2025-06-01T09:00:00Z"
    retryCount: 1
  v1beta2:
    conditions:
    - type: Available
      status: "True"
      reason: Available
      message: ""
      lastTransitionTime: "2025-06-01T10:00:00Z"
    readyReplicas: 3
    availableReplicas: 3
    upToDateReplicas: 3
"#,
        );
        assert_eq!(
            kcp.spec.machine_template.node_drain_timeout.as_deref(),
            Some("5m0s")
        );
        assert_eq!(
            kcp.spec.machine_template.infrastructure_ref.kind.as_deref(),
            Some("DockerMachineTemplate")
        );
        let status = kcp.status.unwrap();
        assert!(status.initialized && status.ready);
        assert_eq!(status.last_remediation.unwrap().retry_count, 1);
    }

    #[test]
    fn kubeadm_control_plane_template_round_trip() {
        let template: KubeadmControlPlaneTemplate = round_trip(
            r#"
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlaneTemplate
metadata:
  name: quick-start-control-plane
spec:
  template:
    spec:
      machineTemplate:
        nodeDrainTimeout: 1m0s
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
"#,
        );
        assert!(template.spec.template.spec.machine_template.is_some());
    }

    #[test]
    fn crd_has_scale_and_printer_columns() {
        let crd = KubeadmControlPlane::crd();
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1beta1");
        assert_eq!(version.deprecated, Some(true));
        let scale = version
            .subresources
            .as_ref()
            .unwrap()
            .scale
            .as_ref()
            .unwrap();
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
                "Initialized",
                "API Server Available",
                "Desired",
                "Replicas",
                "Ready",
                "Updated",
                "Unavailable",
                "Age",
                "Version"
            ]
        );
        let schema = serde_json::to_value(version.schema.as_ref().unwrap()).unwrap();
        let strategy =
            &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["rolloutStrategy"];
        assert_eq!(strategy["default"]["rollingUpdate"]["maxSurge"], 1);
        assert_eq!(column_names(&KubeadmControlPlaneTemplate::crd()), ["Age"]);
    }
}
