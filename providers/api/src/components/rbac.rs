//! The permissions each manager needs on the management cluster, rule by rule, taken from the calls
//! its controllers, webhook server and leader election make. No rule holds a `*`: a verb or a resource
//! missing here shows up as `forbidden` in the RBAC test against a real kube-apiserver.
//!
//! Workload-cluster calls (join tokens, `kubeadm-config`, static pods) go through the cluster's admin
//! kubeconfig Secret, not through this service account, so they need no rule here.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    AggregationRule, ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef,
    Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::{Naming, Provider};

/// One RBAC rule as a table row: API groups, resources, verbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub groups: &'static [&'static str],
    pub resources: &'static [&'static str],
    pub verbs: &'static [&'static str],
}

impl Rule {
    fn policy(&self) -> PolicyRule {
        PolicyRule {
            api_groups: Some(strings(self.groups)),
            resources: Some(strings(self.resources)),
            verbs: strings(self.verbs),
            ..Default::default()
        }
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

const BOOTSTRAP_GROUP: &str = "bootstrap.cluster.x-k8s.io";
const CONTROLPLANE_GROUP: &str = "controlplane.cluster.x-k8s.io";
const CLUSTER_GROUP: &str = "cluster.x-k8s.io";
const INFRASTRUCTURE_GROUP: &str = "infrastructure.cluster.x-k8s.io";

/// The bootstrap manager's cluster-wide rules.
pub const BOOTSTRAP_RULES: &[Rule] = &[
    // The controller watches KubeadmConfigs (never reads one by name) and records the join token it
    // created in the spec.
    Rule {
        groups: &[BOOTSTRAP_GROUP],
        resources: &["kubeadmconfigs"],
        verbs: &["list", "patch", "watch"],
    },
    Rule {
        groups: &[BOOTSTRAP_GROUP],
        resources: &["kubeadmconfigs/status"],
        verbs: &["patch"],
    },
    // Owner Machine or MachinePool and its Cluster: watched, read, never written.
    Rule {
        groups: &[CLUSTER_GROUP],
        resources: &["clusters", "machinepools", "machines"],
        verbs: &["get", "list", "watch"],
    },
    // Cluster certificates (created when no control-plane provider does), `contentFrom` files, the
    // admin kubeconfig, and the bootstrap data Secret (server-side apply).
    Rule {
        groups: &[""],
        resources: &["secrets"],
        verbs: &["create", "get", "patch"],
    },
    // The init lock: one ConfigMap per cluster, created, read and deleted.
    Rule {
        groups: &[""],
        resources: &["configmaps"],
        verbs: &["create", "delete", "get"],
    },
    EVENTS,
];

/// The control-plane manager's cluster-wide rules.
pub const CONTROLPLANE_RULES: &[Rule] = &[
    // Watched by the controller and the webhook cache; read live for the remediation record before a
    // machine is created; the finalizer, etcd and remediation bookkeeping annotations are merge patches.
    Rule {
        groups: &[CONTROLPLANE_GROUP],
        resources: &["kubeadmcontrolplanes"],
        verbs: &["get", "list", "patch", "watch"],
    },
    Rule {
        groups: &[CONTROLPLANE_GROUP],
        resources: &["kubeadmcontrolplanes/status"],
        verbs: &["patch"],
    },
    // Objects created with the control plane as owner set `blockOwnerDeletion`; with the
    // OwnerReferencesPermissionEnforcement admission plugin that needs this.
    Rule {
        groups: &[CONTROLPLANE_GROUP],
        resources: &["kubeadmcontrolplanes/finalizers"],
        verbs: &["update"],
    },
    // One KubeadmConfig per machine: created, read, labels applied, removed with leftovers.
    Rule {
        groups: &[BOOTSTRAP_GROUP],
        resources: &["kubeadmconfigs"],
        verbs: &["create", "delete", "get", "list", "patch"],
    },
    Rule {
        groups: &[CLUSTER_GROUP],
        resources: &["clusters"],
        verbs: &["get", "list", "watch"],
    },
    // Control-plane Machines: listed live (never read one by one), created, adopted, labelled,
    // annotated (pre-terminate hook), deleted.
    Rule {
        groups: &[CLUSTER_GROUP],
        resources: &["machines"],
        verbs: &["create", "delete", "list", "patch", "watch"],
    },
    // Pod-health conditions on each Machine.
    Rule {
        groups: &[CLUSTER_GROUP],
        resources: &["machines/status"],
        verbs: &["patch"],
    },
    // Cluster certificates (create-if-absent), the admin kubeconfig (created, renewed in place), and
    // etcd snapshots kept in Secrets (created, listed, the oldest deleted).
    Rule {
        groups: &[""],
        resources: &["secrets"],
        verbs: &["create", "delete", "get", "list", "update"],
    },
    // The conversion webhook reads the contract version of referenced kinds from CRD labels.
    Rule {
        groups: &["apiextensions.k8s.io"],
        resources: &["customresourcedefinitions"],
        verbs: &["list", "watch"],
    },
    EVENTS,
];

/// Events are written with the events.k8s.io API (kube-runtime's recorder): created, then patched
/// when they repeat.
const EVENTS: Rule = Rule {
    groups: &["events.k8s.io"],
    resources: &["events"],
    verbs: &["create", "patch"],
};

/// Leader election in the manager's own namespace: the Lease is read, created, and renewed with an
/// update that carries the read `resourceVersion`.
pub const LEADER_ELECTION_RULES: &[Rule] = &[Rule {
    groups: &["coordination.k8s.io"],
    resources: &["leases"],
    verbs: &["create", "get", "update"],
}];

/// What the control-plane manager does with infrastructure machines: reads the template it clones,
/// creates, lists, labels (server-side apply) and deletes the machines.
pub const INFRASTRUCTURE_MACHINE_VERBS: &[&str] = &["create", "delete", "get", "list", "patch"];
pub const INFRASTRUCTURE_TEMPLATE_VERBS: &[&str] = &["get"];

/// Label of ClusterRoles whose rules the control-plane manager gets through its aggregated role. It is
/// the label Cluster API's own control-plane provider selects, so a ClusterRole written for it (e.g.
/// for an infrastructure provider outside `infrastructure.cluster.x-k8s.io`) serves ours unchanged.
pub const CONTROLPLANE_AGGREGATION_LABEL: &str =
    "kubeadm.controlplane.cluster.x-k8s.io/aggregate-to-manager";

/// `(machine resource, template resource)` of infrastructure providers in the
/// `infrastructure.cluster.x-k8s.io` group that clusterctl installs by name. Infrastructure kinds are
/// not known when these manifests are built and a wildcard is not allowed: other providers add a
/// ClusterRole with [`CONTROLPLANE_AGGREGATION_LABEL`].
pub const KNOWN_INFRASTRUCTURE: &[(&str, &str)] = &[
    ("awsmachines", "awsmachinetemplates"),
    ("azuremachines", "azuremachinetemplates"),
    ("dockermachines", "dockermachinetemplates"),
    ("gcpmachines", "gcpmachinetemplates"),
    ("hcloudmachines", "hcloudmachinetemplates"),
    ("metal3machines", "metal3machinetemplates"),
    ("openstackmachines", "openstackmachinetemplates"),
    ("vspheremachines", "vspheremachinetemplates"),
];

/// The rules a control-plane manager needs on one infrastructure provider's machine kinds.
pub fn infrastructure_rules(group: &str, machines: &[&str], templates: &[&str]) -> Vec<PolicyRule> {
    let rule = |resources: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(strings(resources)),
        verbs: strings(verbs),
        ..Default::default()
    };
    vec![
        rule(machines, INFRASTRUCTURE_MACHINE_VERBS),
        rule(templates, INFRASTRUCTURE_TEMPLATE_VERBS),
    ]
}

pub(super) const SERVICE_ACCOUNT: &str = "manager";
const MANAGER_ROLE: &str = "manager-role";
const MANAGER_ROLE_BINDING: &str = "manager-rolebinding";
const AGGREGATED_ROLE: &str = "aggregated-manager-role";
const AGGREGATED_ROLE_BINDING: &str = "aggregated-manager-rolebinding";
const INFRASTRUCTURE_ROLE: &str = "infrastructure-role";
const LEADER_ELECTION_ROLE: &str = "leader-election-role";
const LEADER_ELECTION_ROLE_BINDING: &str = "leader-election-rolebinding";

impl Provider {
    /// The manager's cluster-wide rules.
    pub fn rules(self) -> &'static [Rule] {
        match self {
            Provider::Bootstrap => BOOTSTRAP_RULES,
            Provider::ControlPlane => CONTROLPLANE_RULES,
        }
    }
}

pub(super) fn service_account(naming: &Naming) -> ServiceAccount {
    ServiceAccount {
        metadata: naming.namespaced(SERVICE_ACCOUNT),
        ..Default::default()
    }
}

fn subject(naming: &Naming) -> Subject {
    Subject {
        kind: "ServiceAccount".into(),
        name: naming.name(SERVICE_ACCOUNT),
        namespace: Some(naming.namespace.clone()),
        ..Default::default()
    }
}

fn role_ref(kind: &str, name: String) -> RoleRef {
    RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: kind.into(),
        name,
    }
}

fn policies(rules: &[Rule]) -> Vec<PolicyRule> {
    rules.iter().map(Rule::policy).collect()
}

/// ClusterRoles of `provider`, in the order they are written.
pub(super) fn cluster_roles(provider: Provider, naming: &Naming) -> Vec<ClusterRole> {
    let mut roles = vec![ClusterRole {
        metadata: naming.cluster_scoped(MANAGER_ROLE),
        rules: Some(policies(provider.rules())),
        ..Default::default()
    }];
    if provider == Provider::ControlPlane {
        roles.push(ClusterRole {
            metadata: naming.cluster_scoped(AGGREGATED_ROLE),
            aggregation_rule: Some(AggregationRule {
                cluster_role_selectors: Some(vec![LabelSelector {
                    match_labels: Some(BTreeMap::from([(
                        CONTROLPLANE_AGGREGATION_LABEL.to_owned(),
                        "true".to_owned(),
                    )])),
                    ..Default::default()
                }]),
            }),
            // Filled in by the cluster's role aggregation controller.
            rules: None,
        });
        let (machines, templates): (Vec<&str>, Vec<&str>) =
            KNOWN_INFRASTRUCTURE.iter().copied().unzip();
        let mut metadata = naming.cluster_scoped(INFRASTRUCTURE_ROLE);
        metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(CONTROLPLANE_AGGREGATION_LABEL.to_owned(), "true".to_owned());
        roles.push(ClusterRole {
            metadata,
            rules: Some(infrastructure_rules(
                INFRASTRUCTURE_GROUP,
                &machines,
                &templates,
            )),
            ..Default::default()
        });
    }
    roles
}

pub(super) fn cluster_role_bindings(
    provider: Provider,
    naming: &Naming,
) -> Vec<ClusterRoleBinding> {
    let mut bound = vec![(MANAGER_ROLE_BINDING, MANAGER_ROLE)];
    if provider == Provider::ControlPlane {
        bound.push((AGGREGATED_ROLE_BINDING, AGGREGATED_ROLE));
    }
    bound
        .into_iter()
        .map(|(binding, role)| ClusterRoleBinding {
            metadata: naming.cluster_scoped(binding),
            role_ref: role_ref("ClusterRole", naming.name(role)),
            subjects: Some(vec![subject(naming)]),
        })
        .collect()
}

pub(super) fn leader_election_role(naming: &Naming) -> Role {
    Role {
        metadata: naming.namespaced(LEADER_ELECTION_ROLE),
        rules: Some(policies(LEADER_ELECTION_RULES)),
    }
}

pub(super) fn leader_election_role_binding(naming: &Naming) -> RoleBinding {
    RoleBinding {
        metadata: naming.namespaced(LEADER_ELECTION_ROLE_BINDING),
        role_ref: role_ref("Role", naming.name(LEADER_ELECTION_ROLE)),
        subjects: Some(vec![subject(naming)]),
    }
}
