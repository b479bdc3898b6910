//! The bootstrap manager's cluster-wide RBAC rules, one per group of calls it makes on the management
//! cluster; `xtask crdgen` writes them into its ClusterRole. No rule holds a `*`: a verb or a resource
//! missing here shows up as `forbidden` in the RBAC test against a real kube-apiserver. Calls into a
//! workload cluster (join tokens) go through its admin kubeconfig and need no rule.

use kubeadm_api::rbac::Rule;
use kubeadm_api::{bootstrap, cluster, controlplane};

pub const RULES: &[Rule] = &[
    // The controller watches KubeadmConfigs (never reads one by name) and patches the join token into a spec.
    Rule {
        groups: &[bootstrap::GROUP],
        resources: &["kubeadmconfigs"],
        verbs: &["list", "patch", "watch"],
    },
    // The controller's status patch.
    Rule {
        groups: &[bootstrap::GROUP],
        resources: &["kubeadmconfigs/status"],
        verbs: &["patch"],
    },
    // Owner Machine or MachinePool and its Cluster: watched and read by the controller and the init lock.
    Rule {
        groups: &[cluster::GROUP],
        resources: &["clusters", "machinepools", "machines"],
        verbs: &["get", "list", "watch"],
    },
    // The control plane's version, for `files[].contentFormat: Template`.
    Rule {
        groups: &[controlplane::GROUP],
        resources: &["kubeadmcontrolplanes"],
        verbs: &["get"],
    },
    // Cluster certificates created when no control plane does, `contentFrom` files, the admin kubeconfig, the data Secret;
    // the labelled ones are watched into a copy.
    Rule {
        groups: &[""],
        resources: &["secrets"],
        verbs: &["create", "get", "list", "patch", "watch"],
    },
    // The init lock: one ConfigMap per cluster, created, read and deleted.
    Rule {
        groups: &[""],
        resources: &["configmaps"],
        verbs: &["create", "delete", "get"],
    },
    // Events the controller records.
    kubeadm_runtime::events::RBAC_RULE,
];
