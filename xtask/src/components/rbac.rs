//! The RBAC objects of each manager: its service account, the ClusterRole of the rules its crate
//! declares next to the calls (`controller::rbac::RULES`), leader election's Role, and for the control
//! plane the aggregated role through which infrastructure providers grant their machine kinds. No rule
//! holds a `*`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    AggregationRule, ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef,
    Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kubeadm_api::rbac::Rule;
use kubeadm_controlplane::controller::rbac::{
    INFRASTRUCTURE_MACHINE_VERBS, INFRASTRUCTURE_TEMPLATE_VERBS,
};

use super::{Naming, Provider};

fn policy(rule: &Rule) -> PolicyRule {
    PolicyRule {
        api_groups: Some(strings(rule.groups)),
        resources: Some(strings(rule.resources)),
        verbs: strings(rule.verbs),
        ..Default::default()
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

const INFRASTRUCTURE_GROUP: &str = "infrastructure.cluster.x-k8s.io";

pub use kubeadm_api::meta::CONTROLPLANE_AGGREGATION_LABEL;

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
const INFRASTRUCTURE_ROLE: &str = "infrastructure-role";
const LEADER_ELECTION_ROLE: &str = "leader-election-role";
const LEADER_ELECTION_ROLE_BINDING: &str = "leader-election-rolebinding";

impl Provider {
    /// The manager's cluster-wide rules, as its crate declares them.
    pub fn rules(self) -> &'static [Rule] {
        match self {
            Provider::Bootstrap => kubeadm_bootstrap::controller::rbac::RULES,
            Provider::ControlPlane => kubeadm_controlplane::controller::rbac::RULES,
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
    rules.iter().map(policy).collect()
}

/// ClusterRoles of `provider`, in the order they are written.
/// The names and role references are Cluster API's own, so that each side's components install over
/// what the other left: `clusterctl delete` leaves a provider's ClusterRoles and ClusterRoleBindings
/// behind (it deletes only cluster-scoped objects named after the provider's namespace), and a binding's
/// `roleRef` cannot change. The control plane's manager role is therefore one of those its aggregated
/// role gathers, and the manager is bound to the aggregated role alone, as Cluster API's is.
pub(super) fn cluster_roles(provider: Provider, naming: &Naming) -> Vec<ClusterRole> {
    let mut metadata = naming.cluster_scoped(MANAGER_ROLE);
    if provider == Provider::ControlPlane {
        metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(CONTROLPLANE_AGGREGATION_LABEL.to_owned(), "true".to_owned());
    }
    let mut roles = vec![ClusterRole {
        metadata,
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
    // See [`cluster_roles`]: the roles a manager is bound to are Cluster API's.
    let role = match provider {
        Provider::Bootstrap => MANAGER_ROLE,
        Provider::ControlPlane => AGGREGATED_ROLE,
    };
    vec![ClusterRoleBinding {
        metadata: naming.cluster_scoped(MANAGER_ROLE_BINDING),
        role_ref: role_ref("ClusterRole", naming.name(role)),
        subjects: Some(vec![subject(naming)]),
    }]
}

pub(super) fn leader_election_role(naming: &Naming) -> Role {
    Role {
        metadata: naming.namespaced(LEADER_ELECTION_ROLE),
        rules: Some(policies(kubeadm_runtime::leader::RBAC_RULES)),
    }
}

pub(super) fn leader_election_role_binding(naming: &Naming) -> RoleBinding {
    RoleBinding {
        metadata: naming.namespaced(LEADER_ELECTION_ROLE_BINDING),
        role_ref: role_ref("Role", naming.name(LEADER_ELECTION_ROLE)),
        subjects: Some(vec![subject(naming)]),
    }
}
