//! The plain-data view of control-plane Machines that every decision works on.

use k8s_openapi::jiff::Timestamp;
use kubeadm_api::bootstrap::v1beta2::KubeadmConfigSpec;

/// The infrastructure template a machine was cloned from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClonedFrom {
    /// Template name, e.g. `scs-prod-control-plane-genc02`.
    pub name: String,
    /// `Kind.group`, e.g. `OpenStackMachineTemplate.infrastructure.cluster.x-k8s.io`.
    pub group_kind: String,
}

/// Health of one part of a machine, as seen in the workload cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Health {
    Healthy,
    Unhealthy(String),
    /// Could not be determined; blocks like [`Health::Unhealthy`], because acting blind can cost quorum.
    Unknown(String),
    /// No probe covers this part (e.g. etcd is external); never blocks.
    #[default]
    NotChecked,
}

impl Health {
    /// Why this health blocks an operation, if it does.
    pub fn problem(&self) -> Option<&str> {
        match self {
            Health::Unhealthy(why) | Health::Unknown(why) => Some(why),
            Health::Healthy | Health::NotChecked => None,
        }
    }
}

/// Workload-cluster health of a machine: its control-plane components and its etcd member.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineHealth {
    pub components: Health,
    pub etcd: Health,
}

/// What the decisions need to know about one control-plane Machine.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ControlPlaneMachine {
    pub name: String,
    pub created: Timestamp,
    /// `spec.version` of the Machine.
    pub version: Option<String>,
    pub failure_domain: Option<String>,
    /// The Machine has a deletion timestamp.
    pub deleting: bool,
    /// The Machine carries [`DELETE_MACHINE_ANNOTATION`](kubeadm_api::meta::DELETE_MACHINE_ANNOTATION).
    pub marked_for_deletion: bool,
    /// Name of the Node the Machine became (`status.nodeRef`).
    pub node: Option<String>,
    /// The Machine's Ready condition is True.
    pub ready: bool,
    /// The Machine's Available condition is True.
    pub available: bool,
    /// Value of the machine-generation label.
    pub generation: Option<String>,
    /// Where its infrastructure machine was cloned from; `None` when that machine is missing or not annotated.
    pub cloned_from: Option<ClonedFrom>,
    /// Spec of its KubeadmConfig; `None` when the config is missing.
    pub kubeadm_config: Option<KubeadmConfigSpec>,
    /// When the node's certificates expire, when known.
    pub certificates_expiry: Option<Timestamp>,
    pub health: MachineHealth,
    /// Addresses from `status.addresses`.
    pub addresses: Vec<String>,
    /// The Machine carries [`CLEANUP_HOOK_ANNOTATION`](kubeadm_api::meta::CLEANUP_HOOK_ANNOTATION).
    pub has_cleanup_hook: bool,
    /// The Machine restores etcd from a snapshot
    /// ([`ETCD_RESTORE_SNAPSHOT_ANNOTATION`](kubeadm_api::meta::ETCD_RESTORE_SNAPSHOT_ANNOTATION)).
    pub restores_etcd: bool,
    /// Its infrastructure machine is known to be gone: the kind is served and the object is not there.
    pub infrastructure_gone: bool,
    /// Being deleted, and Cluster API's Machine controller has not reached the pre-terminate hooks yet
    /// (its `Deleting` condition does not say `WaitingForPreTerminateHook`).
    pub draining: bool,
    /// Pre-terminate hooks of other controllers on the Machine (annotation names): Cluster API's
    /// provider lets them run first, so that the node's kubelet and etcd still work for them.
    pub other_pre_terminate_hooks: Vec<String>,
    /// A MachineHealthCheck found the machine unhealthy (`HealthCheckSucceeded` False).
    pub health_check_failed: bool,
    /// A MachineHealthCheck left its remediation to the control plane (`OwnerRemediated` False).
    pub owner_remediation_requested: bool,
    /// The Machine carries `cluster.x-k8s.io/remediate-machine`.
    pub remediate_annotation: bool,
    /// The remediation this machine completes, from `controlplane.cluster.x-k8s.io/remediation-for`.
    pub remediation_for: Option<crate::remediation::RemediationData>,
}

impl ControlPlaneMachine {
    /// Being deleted with nothing of the control plane left on it: our pre-terminate hook is released
    /// (so its etcd member is removed, and every other hook and the drain came before) and its
    /// infrastructure machine is gone (no VM, no load-balancer backend). What remains is Cluster API's
    /// deletion of its bootstrap config and its Node object, which holds no next step.
    pub fn only_cleanup_left(&self) -> bool {
        self.deleting && !self.has_cleanup_hook && self.infrastructure_gone
    }
}

/// The pre-terminate hooks of other controllers among a Machine's annotation names (ours excluded).
pub fn other_pre_terminate_hooks<'a>(
    annotations: impl IntoIterator<Item = &'a String>,
) -> Vec<String> {
    use kubeadm_api::meta::{CLEANUP_HOOK_ANNOTATION, PRE_TERMINATE_HOOK_PREFIX};
    annotations
        .into_iter()
        .filter(|k| {
            k.split_once('/')
                .is_some_and(|(prefix, _)| prefix == PRE_TERMINATE_HOOK_PREFIX)
                && k.as_str() != CLEANUP_HOOK_ANNOTATION
        })
        .cloned()
        .collect()
}

/// Other controllers' pre-terminate hooks run before the control plane's from Kubernetes 1.31 on, as
/// with Cluster API's provider (which limits the change to those versions); an unparsable version is
/// taken as new.
pub fn hooks_run_first(version: &str) -> bool {
    use kubeadm_api::version::KubeVersion;
    KubeVersion::parse(version).is_none_or(|v| v >= KubeVersion::new(1, 31, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_controllers_hooks_are_told_from_ours_and_from_look_alikes() {
        let names = [
            "pre-terminate.delete.hook.machine.cluster.x-k8s.io/kcp-cleanup",
            "pre-terminate.delete.hook.machine.cluster.x-k8s.io/backup",
            "pre-drain.delete.hook.machine.cluster.x-k8s.io/drain-guard",
            "example.com/pre-terminate.delete.hook.machine.cluster.x-k8s.io",
            "cluster.x-k8s.io/cluster-name",
        ]
        .map(String::from);
        assert_eq!(
            other_pre_terminate_hooks(&names),
            ["pre-terminate.delete.hook.machine.cluster.x-k8s.io/backup"]
        );
    }

    #[test]
    fn hooks_run_first_from_kubernetes_1_31() {
        assert!(!hooks_run_first("v1.30.14"));
        assert!(hooks_run_first("v1.31.0"));
        assert!(hooks_run_first("v1.34.4"));
        assert!(hooks_run_first("not a version"));
    }
}
