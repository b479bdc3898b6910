//! The control-plane manager's cluster-wide RBAC rules, one per group of calls it makes on the
//! management cluster; `xtask crdgen` writes them into its ClusterRole. No rule holds a `*`: a verb or
//! a resource missing here shows up as `forbidden` in the RBAC test against a real kube-apiserver.
//! Calls into a workload cluster (`kubeadm-config`, static pods, etcd) go through its admin kubeconfig
//! and need no rule.

use kubeadm_api::rbac::Rule;
use kubeadm_api::{bootstrap, cluster, controlplane};

pub const RULES: &[Rule] = &[
    // Watched by the controller and the webhook cache, read for the remediation record, finalizer and bookkeeping patches.
    Rule {
        groups: &[controlplane::GROUP],
        resources: &["kubeadmcontrolplanes"],
        verbs: &["get", "list", "patch", "watch"],
    },
    // The controller's status patch.
    Rule {
        groups: &[controlplane::GROUP],
        resources: &["kubeadmcontrolplanes/status"],
        verbs: &["patch"],
    },
    // Objects created owned with `blockOwnerDeletion` (OwnerReferencesPermissionEnforcement asks for this).
    Rule {
        groups: &[controlplane::GROUP],
        resources: &["kubeadmcontrolplanes/finalizers"],
        verbs: &["update"],
    },
    // One KubeadmConfig per machine: created, read (from a watch-fed copy), labels applied, removed
    // with leftovers.
    Rule {
        groups: &[bootstrap::GROUP],
        resources: &["kubeadmconfigs"],
        verbs: &["create", "delete", "get", "list", "patch", "watch"],
    },
    // The owning Cluster: watched and read.
    Rule {
        groups: &[cluster::GROUP],
        resources: &["clusters"],
        verbs: &["get", "list", "watch"],
    },
    // Control-plane Machines: watched (a copy), created, adopted, labelled, annotated (pre-terminate hook), deleted.
    Rule {
        groups: &[cluster::GROUP],
        resources: &["machines"],
        verbs: &["create", "delete", "list", "patch", "watch"],
    },
    // Pod-health conditions on each Machine.
    Rule {
        groups: &[cluster::GROUP],
        resources: &["machines/status"],
        verbs: &["patch"],
    },
    // Cluster certificates (create-if-absent, watched by label), the admin kubeconfig (renewed in place), etcd
    // snapshots (oldest deleted).
    Rule {
        groups: &[""],
        resources: &["secrets"],
        verbs: &["create", "delete", "get", "list", "update", "watch"],
    },
    // The conversion webhook reads the contract version of referenced kinds from CRD labels.
    Rule {
        groups: &["apiextensions.k8s.io"],
        resources: &["customresourcedefinitions"],
        verbs: &["list", "watch"],
    },
    // Events the controller records.
    kubeadm_runtime::events::RBAC_RULE,
];

/// What the controller does with infrastructure machines of any provider: creates, lists, watches, labels
/// (server-side apply) and deletes them; given per provider by a ClusterRole the manager aggregates.
pub const INFRASTRUCTURE_MACHINE_VERBS: &[&str] =
    &["create", "delete", "get", "list", "patch", "watch"];
/// It reads the infrastructure machine template it clones.
pub const INFRASTRUCTURE_TEMPLATE_VERBS: &[&str] = &["get"];
