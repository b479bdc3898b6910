//! The Events the control plane publishes on a KubeadmControlPlane (about one of its Machines when
//! there is one).

use crate::events::EventReason;
use crate::events::Severity::{Normal, Warning};

const RECONCILE: &[&str] = &["Reconcile"];

pub const INVALID_SPEC: EventReason = EventReason {
    reason: super::conditions::reasons::INVALID_SPEC,
    severity: Warning,
    actions: RECONCILE,
    when: "the spec cannot be turned into a desired state",
};
pub const WAITING_FOR_INFRASTRUCTURE: EventReason = EventReason {
    reason: super::conditions::reasons::WAITING_FOR_INFRASTRUCTURE,
    severity: Normal,
    actions: RECONCILE,
    when: "the Cluster's infrastructure is not provisioned (once per wait)",
};
pub const WAITING_FOR_CONTROL_PLANE_ENDPOINT: EventReason = EventReason {
    reason: super::conditions::reasons::WAITING_FOR_CONTROL_PLANE_ENDPOINT,
    severity: Warning,
    actions: RECONCILE,
    when: "the Cluster has no `spec.controlPlaneEndpoint` (once per wait)",
};
pub const CERTIFICATES_UNAVAILABLE: EventReason = EventReason {
    reason: crate::bootstrap::conditions::reasons::CERTIFICATES_UNAVAILABLE,
    severity: Warning,
    actions: RECONCILE,
    when: "the cluster certificates could not be read or made",
};
pub const KUBECONFIG_RENEWED: EventReason = EventReason {
    reason: "KubeconfigRenewed",
    severity: Normal,
    actions: RECONCILE,
    when: "the admin kubeconfig's client certificate was renewed",
};
pub const CLUSTER_STATUS_REMOVED: EventReason = EventReason {
    reason: "ClusterStatusRemoved",
    severity: Normal,
    actions: RECONCILE,
    when: "a leftover `ClusterStatus` was removed from `kube-system/kubeadm-config`",
};
pub const CLUSTER_CONFIGURATION_UPDATED: EventReason = EventReason {
    reason: "ClusterConfigurationUpdated",
    severity: Normal,
    actions: RECONCILE,
    when: "the workload cluster's `kubeadm-config` ClusterConfiguration was brought in line before a join",
};
pub const KUBEADM_PERMISSIONS_ENSURED: EventReason = EventReason {
    reason: "KubeadmPermissionsEnsured",
    severity: Normal,
    actions: RECONCILE,
    when: "the ClusterRoleBinding `kubeadm:apiserver-kubelet-client` was created",
};
pub const MACHINE_CREATED: EventReason = EventReason {
    reason: "MachineCreated",
    severity: Normal,
    actions: &["Create"],
    when: "a Machine was created (to initialize, scale up, roll out, or replace a remediated one)",
};
pub const MACHINE_DELETED: EventReason = EventReason {
    reason: "MachineDeleted",
    severity: Normal,
    actions: &["Delete"],
    when: "a Machine is being deleted (scale down, or outdated)",
};
pub const MACHINE_CREATION_FAILED: EventReason = EventReason {
    reason: "MachineCreationFailed",
    severity: Warning,
    actions: RECONCILE,
    when: "cloning the infrastructure template or creating the objects failed",
};

/// The actions of [`ETCD_MEMBERSHIP_CHANGED`], one per kind of change.
pub mod etcd_actions {
    pub const PROMOTE_LEARNER: &str = "PromoteLearner";
    pub const REMOVE_STUCK_LEARNER: &str = "RemoveStuckLearner";
    pub const REMOVE_UNSTARTED_MEMBER: &str = "RemoveUnstartedMember";
    pub const MOVE_LEADER: &str = "MoveLeader";
    pub const REMOVE_MEMBER: &str = "RemoveMember";
    pub const RELEASE_HOOK: &str = "ReleaseHook";
    pub const REMOVE_ORPHAN: &str = "RemoveOrphan";
}

pub const ETCD_MEMBERSHIP_CHANGED: EventReason = EventReason {
    reason: "EtcdMembershipChanged",
    severity: Normal,
    actions: &[
        etcd_actions::PROMOTE_LEARNER,
        etcd_actions::REMOVE_STUCK_LEARNER,
        etcd_actions::REMOVE_UNSTARTED_MEMBER,
        etcd_actions::MOVE_LEADER,
        etcd_actions::REMOVE_MEMBER,
        etcd_actions::RELEASE_HOOK,
        etcd_actions::REMOVE_ORPHAN,
    ],
    when: "one etcd membership change",
};
pub const ETCD_MAINTENANCE: EventReason = EventReason {
    reason: "EtcdMaintenance",
    severity: Normal,
    actions: RECONCILE,
    when: "a compaction, a member defragmented, leadership moved for it, a round finished, or a snapshot written",
};
pub const ETCD_SNAPSHOT_REFUSED: EventReason = EventReason {
    reason: "EtcdSnapshotRefused",
    severity: Warning,
    actions: RECONCILE,
    when: "a snapshot is too large for a Secret",
};
/// The steps of an etcd restore, each its own Event series.
pub mod restore_actions {
    pub const STAGE_SNAPSHOT: &str = "StageSnapshot";
    pub const DELETE_MACHINES: &str = "DeleteMachines";
    pub const RELEASE_HOOKS: &str = "ReleaseHooks";
    pub const CREATE_MACHINE: &str = "CreateMachine";
    pub const FINISH: &str = "FinishRestore";
}

pub const ETCD_RESTORE: EventReason = EventReason {
    reason: "EtcdRestore",
    severity: Normal,
    actions: &[
        restore_actions::STAGE_SNAPSHOT,
        restore_actions::DELETE_MACHINES,
        restore_actions::RELEASE_HOOKS,
        restore_actions::CREATE_MACHINE,
        restore_actions::FINISH,
    ],
    when: "a step of an etcd restore: the snapshot checked and staged, the old machines deleted, the restoring machine created, the restore finished",
};
pub const ETCD_RESTORE_REFUSED: EventReason = EventReason {
    reason: "EtcdRestoreRefused",
    severity: Warning,
    actions: RECONCILE,
    when: "a requested etcd restore cannot be done safely; the note says why",
};
pub const MACHINE_REMEDIATED: EventReason = EventReason {
    reason: "MachineRemediated",
    severity: Normal,
    actions: &["Remediate"],
    when: "an unhealthy Machine is deleted to be replaced",
};
pub const REMEDIATION_BLOCKED: EventReason = EventReason {
    reason: "RemediationBlocked",
    severity: Warning,
    actions: &["Remediate"],
    when: "a Machine needs remediation but has to wait; the note says why",
};
pub const ADDON_UPDATED: EventReason = EventReason {
    reason: "AddonUpdated",
    severity: Normal,
    actions: RECONCILE,
    when: "kube-proxy's or CoreDNS's image was changed",
};
pub const ADDON_UPDATE_FAILED: EventReason = EventReason {
    reason: "AddonUpdateFailed",
    severity: Warning,
    actions: RECONCILE,
    when: "a kube-proxy or CoreDNS change was refused or failed",
};

/// Every Event the control plane publishes, in the reference's order.
pub const ALL: &[EventReason] = &[
    INVALID_SPEC,
    WAITING_FOR_INFRASTRUCTURE,
    WAITING_FOR_CONTROL_PLANE_ENDPOINT,
    CERTIFICATES_UNAVAILABLE,
    KUBECONFIG_RENEWED,
    CLUSTER_STATUS_REMOVED,
    CLUSTER_CONFIGURATION_UPDATED,
    KUBEADM_PERMISSIONS_ENSURED,
    MACHINE_CREATED,
    MACHINE_DELETED,
    MACHINE_CREATION_FAILED,
    ETCD_MEMBERSHIP_CHANGED,
    ETCD_MAINTENANCE,
    ETCD_SNAPSHOT_REFUSED,
    ETCD_RESTORE,
    ETCD_RESTORE_REFUSED,
    MACHINE_REMEDIATED,
    REMEDIATION_BLOCKED,
    ADDON_UPDATED,
    ADDON_UPDATE_FAILED,
];
