//! May the control plane change now? The checks that make a scale up or down wait, each with the reason
//! the KubeadmControlPlane's conditions show.

use std::fmt;

use kubeadm_api::controlplane::conditions::reasons;

use crate::etcd_membership::Reason;
use crate::etcd_upgrade::BelowFloor;
use crate::machines::ControlPlaneMachine;

/// One reason an operation has to wait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blocker {
    /// A machine is being deleted; one operation at a time (see [`deletions_in_progress`]).
    MachineDeleting(String),
    /// A machine has no Node yet (still provisioning or bootstrapping).
    MachineWithoutNode(String),
    /// A machine's control-plane components are not healthy.
    ComponentsUnhealthy { machine: String, reason: String },
    /// A machine's etcd member is not healthy.
    EtcdUnhealthy { machine: String, reason: String },
    /// etcd as a whole cannot take another member now (a learner is catching up, a member is down, …).
    EtcdMembership(Reason),
    /// etcd could not be looked at, so whether it can take another member is unknown.
    EtcdUnobservable(String),
    /// The new member would run a newer etcd minor than members below its upgrade floor.
    EtcdBelowUpgradeFloor(BelowFloor),
}

impl Blocker {
    /// The condition reason a blocker is reported with.
    pub fn reason(&self) -> &'static str {
        match self {
            Blocker::MachineDeleting(_) => reasons::WAITING_FOR_MACHINE_DELETION,
            Blocker::MachineWithoutNode(_) => reasons::WAITING_FOR_MACHINE_PROVISIONING,
            Blocker::ComponentsUnhealthy { .. } => reasons::CONTROL_PLANE_COMPONENTS_NOT_HEALTHY,
            Blocker::EtcdUnhealthy { .. }
            | Blocker::EtcdMembership(_)
            | Blocker::EtcdUnobservable(_) => reasons::ETCD_CLUSTER_NOT_HEALTHY,
            Blocker::EtcdBelowUpgradeFloor(_) => reasons::ETCD_BELOW_UPGRADE_FLOOR,
        }
    }
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocker::MachineDeleting(m) => write!(f, "Machine {m} is being deleted"),
            Blocker::MachineWithoutNode(m) => {
                write!(f, "Machine {m} has no Node yet (status.nodeRef not set)")
            }
            Blocker::ComponentsUnhealthy { machine, reason } => {
                write!(
                    f,
                    "Machine {machine}: control-plane components not healthy: {reason}"
                )
            }
            Blocker::EtcdUnhealthy { machine, reason } => {
                write!(f, "Machine {machine}: etcd member not healthy: {reason}")
            }
            Blocker::EtcdMembership(reason) => write!(f, "etcd cannot take a member now: {reason}"),
            Blocker::EtcdUnobservable(cause) => write!(f, "etcd not observable: {cause}"),
            Blocker::EtcdBelowUpgradeFloor(BelowFloor {
                target,
                floor,
                members,
            }) => write!(
                f,
                "a new member would run etcd {target}, which may join only members at {floor} or newer: \
                 {} below it; roll the control plane to an etcd of {floor} or newer first \
                 (etcd.local.imageTag), then to the new release",
                members.join(", ")
            ),
        }
    }
}

/// The operation being checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation<'a> {
    ScaleUp,
    /// Scaling down by deleting the named machine, whose own health does not matter.
    ScaleDown(&'a str),
}

/// Everything that makes `operation` wait now; empty when it may go ahead.
pub fn check(operation: Operation<'_>, machines: &[ControlPlaneMachine]) -> Vec<Blocker> {
    let blockers = deletions_in_progress(machines);
    if !blockers.is_empty() || machines.is_empty() {
        return blockers;
    }
    let mut blockers = blockers;
    let excluded = match operation {
        Operation::ScaleDown(name) => Some(name),
        Operation::ScaleUp => None,
    };
    for m in machines
        .iter()
        .filter(|m| Some(m.name.as_str()) != excluded && !m.only_cleanup_left())
    {
        if m.node.is_none() {
            blockers.push(Blocker::MachineWithoutNode(m.name.clone()));
            continue;
        }
        if let Some(reason) = m.health.components.problem() {
            blockers.push(Blocker::ComponentsUnhealthy {
                machine: m.name.clone(),
                reason: reason.to_owned(),
            });
        }
        if let Some(reason) = m.health.etcd.problem() {
            blockers.push(Blocker::EtcdUnhealthy {
                machine: m.name.clone(),
                reason: reason.to_owned(),
            });
        }
    }
    blockers
}

/// One operation at a time: a machine being deleted holds the next change until nothing of the control
/// plane is left on it ([`ControlPlaneMachine::only_cleanup_left`]: etcd member removed, infrastructure
/// gone), and, when no other machine stands, until it is gone altogether.
pub fn deletions_in_progress(machines: &[ControlPlaneMachine]) -> Vec<Blocker> {
    let none_stands = machines.iter().all(|m| m.deleting);
    machines
        .iter()
        .filter(|m| m.deleting && (none_stands || !m.only_cleanup_left()))
        .map(|m| Blocker::MachineDeleting(m.name.clone()))
        .collect()
}

/// The machines that count: all but those with [only Cluster API's cleanup left](ControlPlaneMachine::only_cleanup_left).
pub fn standing(machines: &[ControlPlaneMachine]) -> impl Iterator<Item = &ControlPlaneMachine> {
    machines.iter().filter(|m| !m.only_cleanup_left())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machines::{Health, MachineHealth};

    fn ready(name: &str) -> ControlPlaneMachine {
        ControlPlaneMachine {
            name: name.into(),
            node: Some(format!("node-{name}")),
            ..Default::default()
        }
    }

    #[test]
    fn a_healthy_control_plane_may_change() {
        let machines = [ready("a"), ready("b"), ready("c")];
        assert_eq!(check(Operation::ScaleUp, &machines), []);
        assert_eq!(check(Operation::ScaleDown("a"), &machines), []);
        assert_eq!(
            check(Operation::ScaleUp, &[]),
            [],
            "the first machine has nothing to wait for"
        );
    }

    #[test]
    fn one_operation_at_a_time() {
        let mut deleting = ready("b");
        deleting.deleting = true;
        let blockers = check(Operation::ScaleUp, &[ready("a"), deleting]);
        assert_eq!(blockers, [Blocker::MachineDeleting("b".into())]);
        assert_eq!(blockers[0].reason(), reasons::WAITING_FOR_MACHINE_DELETION);
    }

    #[test]
    fn a_deletion_holds_until_only_cluster_apis_cleanup_is_left() {
        let leaving = |hook: bool, infrastructure_gone: bool| {
            let mut m = ready("b");
            m.deleting = true;
            m.has_cleanup_hook = hook;
            m.infrastructure_gone = infrastructure_gone;
            // Its VM is gone, so its pods are not running.
            m.health.components = Health::Unhealthy("kube-apiserver pod is not running".into());
            m
        };
        let held = [Blocker::MachineDeleting("b".into())];
        // The etcd member may still be there: our hook is not released.
        assert_eq!(
            check(Operation::ScaleUp, &[ready("a"), leaving(true, true)]),
            held
        );
        // The VM, and with it a load-balancer backend, may still be there.
        assert_eq!(
            check(Operation::ScaleUp, &[ready("a"), leaving(false, false)]),
            held
        );
        // Only the bootstrap config and the Node object are left to delete: neither holds anything,
        // and the machine's own health no longer counts.
        let done = leaving(false, true);
        assert!(done.only_cleanup_left());
        assert_eq!(check(Operation::ScaleUp, &[ready("a"), done.clone()]), []);
        assert_eq!(
            check(
                Operation::ScaleDown("a"),
                &[ready("a"), ready("c"), done.clone()]
            ),
            []
        );
        // With no other machine standing, the next one would be the first: wait until it is gone.
        assert_eq!(check(Operation::ScaleUp, std::slice::from_ref(&done)), held);
        let mut other = leaving(true, false);
        other.name = "c".into();
        assert_eq!(
            check(Operation::ScaleUp, &[done, other]),
            [
                Blocker::MachineDeleting("b".into()),
                Blocker::MachineDeleting("c".into())
            ]
        );
    }

    #[test]
    fn provisioning_and_unhealthy_machines_block_except_the_one_leaving() {
        let mut provisioning = ready("b");
        provisioning.node = None;
        let mut sick = ready("c");
        sick.health = MachineHealth {
            components: Health::Unhealthy("kube-apiserver pod is CrashLoopBackOff".into()),
            etcd: Health::Unknown("member list failed".into()),
        };
        let machines = [ready("a"), provisioning, sick];
        let blockers = check(Operation::ScaleUp, &machines);
        assert_eq!(blockers.len(), 3, "{blockers:?}");
        assert_eq!(
            blockers[0].to_string(),
            "Machine b has no Node yet (status.nodeRef not set)"
        );
        assert_eq!(
            blockers[1].to_string(),
            "Machine c: control-plane components not healthy: kube-apiserver pod is CrashLoopBackOff"
        );
        assert_eq!(blockers[2].reason(), "EtcdClusterNotHealthy");
        assert_eq!(check(Operation::ScaleDown("c"), &machines).len(), 1);
    }
}
