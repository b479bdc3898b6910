//! Small types shared by every Cluster API group.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Labels and annotations to put on objects created from a template (Cluster API's `ObjectMeta`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// Map of string keys and values that can be used to organize and categorize objects.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Unstructured key value map stored with a resource that may be set by external tools.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A reference to an object of a provider that follows a Cluster API contract (v1beta2).
/// The version is not stored: it is looked up from the contract label of the CRD.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContractVersionedObjectReference {
    /// Kind of the referent, e.g. `OpenStackMachineTemplate`.
    pub kind: String,
    /// Name of the referent.
    pub name: String,
    /// API group of the referent, e.g. `infrastructure.cluster.x-k8s.io`.
    pub api_group: String,
}

/// A Cluster API v1beta1 condition (v1beta2 objects use `metav1.Condition`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct V1Beta1Condition {
    /// Type of condition in CamelCase or in foo.example.com/CamelCase.
    #[serde(rename = "type")]
    pub type_: String,
    /// Status of the condition, one of True, False, Unknown.
    pub status: String,
    /// How to interpret a False condition: Error, Warning or Info.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    /// Last time the condition transitioned from one status to another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// The reason for the condition's last transition in CamelCase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A human readable message indicating details about the transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Label naming the Cluster an object belongs to.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Label present (empty value) on control-plane Machines.
pub const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";
/// Label on control-plane Machines with the machine generation they were built for; also annotated on
/// their static pods so the control plane can map pods to generations.
pub const MACHINE_GENERATION_LABEL: &str = "controlplane.cluster.x-k8s.io/machine-generation";
/// Annotation that pauses reconciliation of an object (or of a whole Cluster).
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";
/// Label whose value `--watch-filter` selects on.
pub const WATCH_FILTER_LABEL: &str = "cluster.x-k8s.io/watch-filter";

// Labels and annotations the control plane reads or writes.

/// On the KubeadmControlPlane while the machine it names is being replaced.
pub const REMEDIATION_IN_PROGRESS_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/remediation-in-progress";
/// On a replacement Machine: the remediation it completes, so a replacement that fails again counts as a retry.
pub const REMEDIATION_FOR_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/remediation-for";
/// On a KubeadmControlPlane: leave the kube-proxy DaemonSet alone.
pub const SKIP_KUBE_PROXY_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/skip-kube-proxy";
/// On a KubeadmControlPlane: leave CoreDNS alone.
pub const SKIP_COREDNS_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/skip-coredns";
/// Annotation (set by our kubeadm patches) naming the Machine a static pod runs on.
pub const MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/machine";
/// kubeadm's annotation on kube-apiserver pods: `host:port` the API server advertises.
pub const API_SERVER_ENDPOINT_ANNOTATION: &str =
    "kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint";
/// kubeadm's annotation on etcd pods: the member's client URLs, comma separated.
pub const ETCD_CLIENT_URLS_ANNOTATION: &str = "kubeadm.kubernetes.io/etcd.advertise-client-urls";
/// Opt-in (value `"true"`) to run stacked etcd with `--unsafe-no-fsync`: faster on slow cloud disks, at the
/// price of losing the latest writes of a member whose host crashes (the other members still have them).
/// Sovereign Cloud Stack's `ETCD_UNSAFE_FS` setting maps to it.
pub const ETCD_UNSAFE_NO_FSYNC_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/etcd-unsafe-no-fsync";
/// Annotation a user (or MachineHealthCheck remediation) sets to pick the Machine deleted next.
pub const DELETE_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/delete-machine";
/// Annotation on a cloned infrastructure machine naming the template it was cloned from.
pub const CLONED_FROM_NAME_ANNOTATION: &str = "cluster.x-k8s.io/cloned-from-name";
/// Annotation on a cloned infrastructure machine naming the template's `Kind.group`.
pub const CLONED_FROM_GROUP_KIND_ANNOTATION: &str = "cluster.x-k8s.io/cloned-from-groupkind";
/// Label on control-plane Machines naming their KubeadmControlPlane.
pub const CONTROL_PLANE_NAME_LABEL: &str = "cluster.x-k8s.io/control-plane-name";
/// Pre-terminate hook the control plane puts on its Machines when etcd is stacked: core Cluster API keeps
/// the machine until the hook is gone, and the control plane removes it only after the machine's etcd
/// member left the cluster.
pub const CLEANUP_HOOK_ANNOTATION: &str =
    "pre-terminate.delete.hook.machine.cluster.x-k8s.io/kcp-cleanup";
/// Prefix of every pre-terminate hook annotation on a Machine (`<prefix>/<name>`), ours and other
/// controllers'.
pub const PRE_TERMINATE_HOOK_PREFIX: &str = "pre-terminate.delete.hook.machine.cluster.x-k8s.io";
/// Annotation on a KubeadmConfig with the expiry of the node's certificates (RFC 3339).
pub const CERTIFICATES_EXPIRY_ANNOTATION: &str = "machine.cluster.x-k8s.io/certificates-expiry";
/// Annotation the caller sets on the Machine of a removed stuck learner, so that it is replaced.
pub const REMEDIATE_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/remediate-machine";
/// Annotation on the KubeadmControlPlane: daily defragmentation time `HH:MM` (UTC), or `disabled`.
pub const ETCD_DEFRAG_SCHEDULE_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/etcd-defrag-schedule";
/// Annotation on the KubeadmControlPlane: the share of a member's database file that must be free
/// (allocated but unused, and at least 4 MiB) for the scheduled defragmentation to rewrite it, `40%` by
/// default; `0%` defragments every member every time.
pub const ETCD_DEFRAG_MIN_FREE_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/etcd-defrag-min-free";
/// Annotation the controller keeps on the KubeadmControlPlane: when the last defragmentation finished.
pub const ETCD_LAST_DEFRAG_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/etcd-last-defrag";
/// Annotation on the KubeadmControlPlane: daily snapshot time `HH:MM` (UTC), or `disabled`; snapshots are
/// taken only when the manager has a snapshot directory (`--etcd-snapshot-dir`).
pub const ETCD_SNAPSHOT_SCHEDULE_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/etcd-snapshot-schedule";
/// Annotation the controller keeps on the KubeadmControlPlane: when the last snapshot was written, and where.
pub const ETCD_LAST_SNAPSHOT_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/etcd-last-snapshot";
/// Annotation on the KubeadmControlPlane: where scheduled snapshots go, `secret` (a Secret per snapshot
/// in the control plane's namespace) or `dir` (the manager's `--etcd-snapshot-dir`). Unset means `dir`
/// when the manager has a snapshot directory, and no snapshots otherwise.
pub const ETCD_SNAPSHOT_TARGET_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/etcd-snapshot-target";
/// Label on every snapshot Secret (value: the cluster name), so that they can be listed and pruned.
pub const ETCD_SNAPSHOT_LABEL: &str = "controlplane.cluster.x-k8s.io/etcd-snapshot";
/// Annotations on a snapshot Secret: uncompressed bytes, the member it was taken from, its revision.
pub const ETCD_SNAPSHOT_SIZE_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/etcd-snapshot-size";
pub const ETCD_SNAPSHOT_MEMBER_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/etcd-snapshot-member";
pub const ETCD_SNAPSHOT_REVISION_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/etcd-snapshot-revision";
/// Annotation on the KubeadmControlPlane: restore stacked etcd from a snapshot the controller took,
/// `secret/<name>` (a snapshot Secret of this cluster) or `file:<path>` (under the manager's
/// `--etcd-snapshot-dir`). The controller replaces every control-plane machine with one that restores
/// it, then removes the annotation.
pub const ETCD_RESTORE_FROM_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/etcd-restore-from";
/// Annotation the controller keeps on the KubeadmControlPlane after a restore: when it finished, and
/// from what.
pub const ETCD_RESTORED_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/etcd-restored";
/// Annotation on the KubeadmConfig (and Machine) of the machine that restores etcd: the Secret holding
/// the snapshot. The bootstrap provider renders `kubeadm init` for it, with the snapshot restored into
/// etcd's data directory first, even though the cluster was initialized before.
pub const ETCD_RESTORE_SNAPSHOT_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/etcd-restore-snapshot";
/// Key of the restore Secret: the snapshot, gzip-compressed, as base64 text (cloud-init's `gz+b64`).
pub const ETCD_RESTORE_SECRET_KEY: &str = "snapshot.db.gz.b64";
/// Key of the restore Secret when the snapshot is an object in the store of `spec.etcdBackup`, too
/// large for a Secret: where the restoring machine downloads it from (a presigned URL), its checksums,
/// and the keys of that one object when it is encrypted. The Secret holds this key or
/// [`ETCD_RESTORE_SECRET_KEY`].
pub const ETCD_RESTORE_DOWNLOAD_KEY: &str = "download";
/// Type of the Secrets that hold etcd snapshots.
pub const ETCD_SNAPSHOT_SECRET_TYPE: &str = "controlplane.cluster.x-k8s.io/etcd-snapshot";
/// Type of Secrets written by Cluster API providers.
pub const CLUSTER_SECRET_TYPE: &str = "cluster.x-k8s.io/secret";
/// Finalizer on the KubeadmControlPlane, removed once every control-plane Machine is gone.
pub const CONTROL_PLANE_FINALIZER: &str = "kubeadm.controlplane.cluster.x-k8s.io";
/// The label and the `NoSchedule` taint kubeadm puts on control-plane Nodes.
pub const CONTROL_PLANE_NODE_ROLE: &str = "node-role.kubernetes.io/control-plane";
/// Taint (`NoSchedule`) on joining worker Nodes until Cluster API has synced their labels.
pub const UNINITIALIZED_TAINT: &str = "node.cluster.x-k8s.io/uninitialized";
/// The label clusterctl uses to tell which provider an object belongs to.
pub const PROVIDER_LABEL: &str = "cluster.x-k8s.io/provider";
/// Label of ClusterRoles whose rules the control-plane manager gets through its aggregated role. It is
/// the label Cluster API's own control-plane provider selects, so a ClusterRole written for it (e.g.
/// for an infrastructure provider outside `infrastructure.cluster.x-k8s.io`) serves ours unchanged.
pub const CONTROLPLANE_AGGREGATION_LABEL: &str =
    "kubeadm.controlplane.cluster.x-k8s.io/aggregate-to-manager";

/// Status of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl From<bool> for ConditionStatus {
    fn from(ok: bool) -> Self {
        if ok {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

impl PartialEq<ConditionStatus> for String {
    fn eq(&self, other: &ConditionStatus) -> bool {
        self == other.as_str()
    }
}

/// Sets condition `type_` in a v1beta2 condition list (a `metav1.Condition` list), keeping its last
/// transition time when the status does not change.
pub fn set_condition(
    conditions: &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    type_: &str,
    status: impl Into<ConditionStatus>,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    let status = status.into().as_str();
    let now = || Time(k8s_openapi::jiff::Timestamp::now());
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) if c.status == status && c.reason == reason && c.message == message => {
            c.observed_generation = generation;
        }
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now();
            }
            c.status = status.into();
            c.reason = reason.into();
            c.message = message.into();
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: now(),
            observed_generation: generation,
        }),
    }
}

/// The `spec` of a kind's zero value, as Go decodes an object written without `spec` (Cluster API
/// declares `spec` optional; our Rust types always hold one): `{}`, or `{"template": {}}` for templates.
pub fn zero_spec<K: Default + Serialize>() -> serde_json::Value {
    serde_json::to_value(K::default())
        .ok()
        .and_then(|mut value| value.get_mut("spec").map(serde_json::Value::take))
        .unwrap_or_else(|| serde_json::Value::Object(Default::default()))
}
