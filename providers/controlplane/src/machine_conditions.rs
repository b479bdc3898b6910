//! The conditions the control plane reports on each Machine it owns beyond its pods' health, and the
//! readiness gates that make core Cluster API's `Ready` wait for them, as Cluster API's control-plane
//! provider does: `UpToDate` (why a rollout would replace the machine) and
//! `NodeKubeadmLabelsAndTaintsSet` (kubeadm's control-plane label and taint on the Node).

use kubeadm_api::bootstrap::v1beta2::{JoinConfiguration, KubeadmConfigSpec};
use kubeadm_api::cluster::v1beta2::{MachineReadinessGate, MachineTaint, TaintEffect};

use crate::endpoints::Component;
use crate::up_to_date::Outdated;

pub use kubeadm_api::controlplane::conditions::machine::{
    ETCD_MEMBER_HEALTHY, NODE_KUBEADM_LABELS_AND_TAINTS_SET, UP_TO_DATE,
};
use kubeadm_api::controlplane::conditions::reasons;
pub use kubeadm_api::meta::CONTROL_PLANE_NODE_ROLE;
use kubeadm_api::meta::ConditionStatus::{self, False, True, Unknown};

/// The readiness gates of a control-plane Machine: the conditions this provider reports (the etcd ones
/// only with stacked etcd), then the template's own, each once.
pub fn readiness_gates(
    template: &[MachineReadinessGate],
    external_etcd: bool,
) -> Vec<MachineReadinessGate> {
    let mandatory = [
        NODE_KUBEADM_LABELS_AND_TAINTS_SET,
        Component::ApiServer.condition(),
        Component::ControllerManager.condition(),
        Component::Scheduler.condition(),
    ];
    let etcd = [Component::Etcd.condition(), ETCD_MEMBER_HEALTHY];
    let etcd: &[&str] = if external_etcd { &[] } else { &etcd };
    let mut gates: Vec<MachineReadinessGate> = Vec::new();
    let ours = mandatory
        .iter()
        .chain(etcd)
        .map(|condition_type| MachineReadinessGate {
            condition_type: (*condition_type).to_owned(),
            polarity: None,
        });
    for gate in ours.chain(template.iter().cloned()) {
        if !gates
            .iter()
            .any(|g| g.condition_type == gate.condition_type)
        {
            gates.push(gate);
        }
    }
    gates
}

/// A condition's status, reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionValue {
    pub status: ConditionStatus,
    pub reason: &'static str,
    pub message: String,
}

impl ConditionValue {
    fn new(status: ConditionStatus, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            reason,
            message: message.into(),
        }
    }
}

/// `UpToDate` of a machine: False with one `* reason` line per difference when a rollout would replace
/// it; False (`Updating`) while its kubelet still reports another version than the Machine's; else True.
pub fn up_to_date(
    outdated: &[Outdated],
    kubelet_version: Option<&str>,
    version: Option<&str>,
) -> ConditionValue {
    if !outdated.is_empty() {
        let lines: Vec<String> = outdated.iter().map(|o| format!("* {o}")).collect();
        return ConditionValue::new(False, reasons::NOT_UP_TO_DATE, lines.join("\n"));
    }
    match (kubelet_version, version) {
        (Some(kubelet), Some(version)) if !kubelet.is_empty() && kubelet != version => {
            ConditionValue::new(
                False,
                reasons::UPDATING,
                format!("* Node.status.nodeInfo.kubeletVersion {kubelet}, {version} required"),
            )
        }
        _ => ConditionValue::new(True, reasons::UP_TO_DATE, ""),
    }
}

/// Whether the Node of a machine must carry kubeadm's control-plane `NoSchedule` taint: when the Machine
/// asks for it, or when its kubeadm configuration leaves the taints unset (kubeadm then adds it) or
/// lists it.
pub fn control_plane_taint_expected(
    machine_taints: &[MachineTaint],
    config: Option<&KubeadmConfigSpec>,
) -> bool {
    if machine_taints
        .iter()
        .any(|t| t.key == CONTROL_PLANE_NODE_ROLE && t.effect == TaintEffect::NoSchedule)
    {
        return true;
    }
    let Some(config) = config else {
        return false;
    };
    let registration = if config.join_configuration != JoinConfiguration::default() {
        &config.join_configuration.node_registration
    } else {
        &config.init_configuration.node_registration
    };
    match &registration.taints {
        None => true,
        Some(taints) => taints
            .iter()
            .any(|t| t.key == CONTROL_PLANE_NODE_ROLE && t.effect == "NoSchedule"),
    }
}

/// What the control plane saw of a Node: kubeadm's control-plane label and `NoSchedule` taint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeRole {
    pub labelled: bool,
    pub tainted: bool,
}

/// `NodeKubeadmLabelsAndTaintsSet` for the machine whose Node is `node` (`None`: not among the
/// workload cluster's Nodes).
pub fn labels_and_taints(
    node_name: &str,
    node: Option<NodeRole>,
    taint_expected: bool,
) -> ConditionValue {
    let Some(node) = node else {
        return ConditionValue::new(
            Unknown,
            reasons::INSPECTION_FAILED,
            format!("Node {node_name} does not exist"),
        );
    };
    let taint = format!("{CONTROL_PLANE_NODE_ROLE}:NoSchedule");
    let message = match (node.labelled, taint_expected && !node.tainted) {
        (true, false) => return ConditionValue::new(True, reasons::SET, ""),
        (false, true) => {
            format!(
                "Node {node_name} does not have the {CONTROL_PLANE_NODE_ROLE} label and the {taint} taint"
            )
        }
        (false, false) => {
            format!("Node {node_name} does not have the {CONTROL_PLANE_NODE_ROLE} label")
        }
        (true, true) => format!("Node {node_name} does not have the {taint} taint"),
    };
    ConditionValue::new(False, reasons::NOT_SET, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeadm_api::cluster::v1beta2::MachineTaintPropagation;

    fn gate(condition_type: &str) -> MachineReadinessGate {
        MachineReadinessGate {
            condition_type: condition_type.into(),
            polarity: None,
        }
    }

    fn names(gates: &[MachineReadinessGate]) -> Vec<&str> {
        gates.iter().map(|g| g.condition_type.as_str()).collect()
    }

    #[test]
    fn readiness_gates_are_ours_then_the_templates_each_once() {
        let template = [gate("Foo"), gate("APIServerPodHealthy")];
        assert_eq!(
            names(&readiness_gates(&template, false)),
            [
                "NodeKubeadmLabelsAndTaintsSet",
                "APIServerPodHealthy",
                "ControllerManagerPodHealthy",
                "SchedulerPodHealthy",
                "EtcdPodHealthy",
                "EtcdMemberHealthy",
                "Foo",
            ]
        );
        assert_eq!(
            names(&readiness_gates(&[], true)),
            [
                "NodeKubeadmLabelsAndTaintsSet",
                "APIServerPodHealthy",
                "ControllerManagerPodHealthy",
                "SchedulerPodHealthy",
            ],
            "no etcd gates with external etcd"
        );
    }

    #[test]
    fn up_to_date_lists_every_reason_and_waits_for_the_kubelet() {
        let outdated = [
            Outdated::Version {
                machine: Some("v1.33.1".into()),
                desired: "v1.34.4".into(),
            },
            Outdated::RolloutAfter,
        ];
        let value = up_to_date(&outdated, Some("v1.33.1"), Some("v1.33.1"));
        assert_eq!((value.status, value.reason), (False, "NotUpToDate"));
        assert_eq!(
            value.message,
            "* version v1.33.1, v1.34.4 required\n* spec.rollout.after has passed"
        );
        let updating = up_to_date(&[], Some("v1.33.1"), Some("v1.34.4"));
        assert_eq!((updating.status, updating.reason), (False, "Updating"));
        assert_eq!(
            updating.message,
            "* Node.status.nodeInfo.kubeletVersion v1.33.1, v1.34.4 required"
        );
        assert_eq!(
            up_to_date(&[], None, Some("v1.34.4")).status,
            True,
            "no node yet"
        );
        assert_eq!(
            up_to_date(&[], Some("v1.34.4"), Some("v1.34.4")),
            ConditionValue::new(True, "UpToDate", "")
        );
    }

    fn spec(yaml: &str) -> KubeadmConfigSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn the_default_taint_is_expected_unless_the_configuration_lists_others() {
        let unset = spec("initConfiguration: {nodeRegistration: {name: n}}");
        assert!(control_plane_taint_expected(&[], Some(&unset)));
        let none = spec("initConfiguration: {nodeRegistration: {taints: []}}");
        assert!(!control_plane_taint_expected(&[], Some(&none)));
        let join_none = spec(
            "initConfiguration: {nodeRegistration: {name: n}}\njoinConfiguration: {nodeRegistration: {taints: []}, controlPlane: {}}",
        );
        assert!(
            !control_plane_taint_expected(&[], Some(&join_none)),
            "a join configuration's taints count for a joining machine"
        );
        let listed = spec(
            "joinConfiguration: {nodeRegistration: {taints: [{key: node-role.kubernetes.io/control-plane, effect: NoSchedule}]}}",
        );
        assert!(control_plane_taint_expected(&[], Some(&listed)));
        let machine_taint = MachineTaint {
            key: CONTROL_PLANE_NODE_ROLE.into(),
            value: None,
            effect: TaintEffect::NoSchedule,
            propagation: MachineTaintPropagation::Always,
        };
        assert!(control_plane_taint_expected(&[machine_taint], Some(&none)));
        assert!(!control_plane_taint_expected(&[], None));
    }

    #[test]
    fn labels_and_taints_name_what_the_node_lacks() {
        let both = NodeRole {
            labelled: true,
            tainted: true,
        };
        assert_eq!(labels_and_taints("n1", Some(both), true).status, True);
        let bare = NodeRole::default();
        let value = labels_and_taints("n1", Some(bare), true);
        assert_eq!((value.status, value.reason), (False, "NotSet"));
        assert_eq!(
            value.message,
            "Node n1 does not have the node-role.kubernetes.io/control-plane label and the node-role.kubernetes.io/control-plane:NoSchedule taint"
        );
        let untainted = NodeRole {
            labelled: true,
            tainted: false,
        };
        assert_eq!(
            labels_and_taints("n1", Some(untainted), false).status,
            True,
            "no taint asked for"
        );
        assert_eq!(
            labels_and_taints("n1", Some(untainted), true).message,
            "Node n1 does not have the node-role.kubernetes.io/control-plane:NoSchedule taint"
        );
        let missing = labels_and_taints("n1", None, true);
        assert_eq!(
            (missing.status, missing.reason),
            (Unknown, "InspectionFailed")
        );
    }
}
