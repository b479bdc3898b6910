//! The one step a reconcile takes: create the first machine, add one, remove one, wait, or nothing.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;

use crate::desired::DesiredState;
use crate::machines::ControlPlaneMachine;
use crate::preflight::{self, Blocker, Operation};
use crate::selection;
use crate::up_to_date::{self, Outdated};

/// What a reconcile saw.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    pub desired: &'a DesiredState,
    pub machines: &'a [ControlPlaneMachine],
    /// Failure domains of the Cluster that may hold control-plane machines, sorted.
    pub failure_domains: &'a [String],
    /// Why etcd cannot take another member now, if it cannot (see
    /// [`crate::etcd_membership::may_add_member`]).
    pub etcd_refuses_member: Option<&'a Blocker>,
}

/// The machines not being deleted, split by whether they match the desired state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Partition {
    /// Outdated machines and why.
    pub outdated: BTreeMap<String, Vec<Outdated>>,
    /// Names of machines that match the desired state.
    pub up_to_date: Vec<String>,
}

/// Why the control plane changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Fewer or more machines than `spec.replicas`.
    Scale,
    /// Outdated machines are being replaced.
    Rollout,
}

/// The step to take now.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Create the first machine; it runs `kubeadm init`.
    Initialize { failure_domain: Option<String> },
    /// Create a machine that joins the control plane.
    ScaleUp {
        failure_domain: Option<String>,
        purpose: Purpose,
    },
    /// Delete this machine.
    ScaleDown { machine: String, purpose: Purpose },
    /// A scale up or down is due, but these checks fail.
    Wait {
        scale_up: bool,
        purpose: Purpose,
        blockers: Vec<Blocker>,
    },
    /// The control plane matches the desired state.
    Idle,
}

/// The decision and what it was based on (for status and conditions).
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub step: Step,
    /// Outdated machines (not being deleted) and why.
    pub outdated: BTreeMap<String, Vec<Outdated>>,
    /// Names of machines that match the desired state.
    pub up_to_date: Vec<String>,
}

/// Splits the machines not being deleted into outdated ones (with why) and the names of up-to-date ones:
/// computed once per reconcile, the source of truth for every decision that asks.
pub fn partition(
    desired: &DesiredState,
    machines: &[ControlPlaneMachine],
    now: Timestamp,
) -> Partition {
    let mut partition = Partition::default();
    for m in machines.iter().filter(|m| !m.deleting) {
        let reasons = up_to_date::outdated(m, desired, now);
        if reasons.is_empty() {
            partition.up_to_date.push(m.name.clone());
        } else {
            partition.outdated.insert(m.name.clone(), reasons);
        }
    }
    partition
}

/// Decides the next step, as Cluster API's control-plane provider does: replace outdated machines one at a
/// time (create first with maxSurge 1, delete first with maxSurge 0), else scale toward `spec.replicas`, each
/// only when the preflight checks pass.
pub fn next_step(observed: Observed<'_>, partition: Partition) -> Plan {
    let Observed {
        desired,
        machines,
        failure_domains,
        etcd_refuses_member,
    } = observed;
    let Partition {
        outdated,
        up_to_date,
    } = partition;
    // A machine with only Cluster API's cleanup left is gone as far as the count goes: the next
    // machine is created, not a second one deleted, while core deletes its bootstrap config and Node.
    let current = i32::try_from(preflight::standing(machines).count()).unwrap_or(i32::MAX);
    let replicas = desired.replicas;

    let (scale_up, purpose) = if !outdated.is_empty() {
        (current < replicas + desired.max_surge, Purpose::Rollout)
    } else if current < replicas {
        (true, Purpose::Scale)
    } else if current > replicas {
        (false, Purpose::Scale)
    } else {
        return Plan {
            step: Step::Idle,
            outdated,
            up_to_date,
        };
    };

    let step = if scale_up {
        let ups: Vec<&str> = up_to_date.iter().map(String::as_str).collect();
        let failure_domain =
            selection::failure_domain_for_scale_up(failure_domains, machines, &ups);
        if machines.is_empty() {
            Step::Initialize { failure_domain }
        } else {
            let mut blockers = preflight::check(Operation::ScaleUp, machines);
            blockers.extend(etcd_refuses_member.cloned());
            if blockers.is_empty() {
                Step::ScaleUp {
                    failure_domain,
                    purpose,
                }
            } else {
                Step::Wait {
                    scale_up,
                    purpose,
                    blockers,
                }
            }
        }
    } else {
        let olds: Vec<&str> = outdated.keys().map(String::as_str).collect();
        match selection::machine_for_scale_down(machines, &olds) {
            None => {
                // Every machine is already being deleted: wait for that.
                let blockers = preflight::deletions_in_progress(machines);
                Step::Wait {
                    scale_up,
                    purpose,
                    blockers,
                }
            }
            Some(victim) => {
                let blockers = preflight::check(Operation::ScaleDown(&victim.name), machines);
                if blockers.is_empty() {
                    Step::ScaleDown {
                        machine: victim.name.clone(),
                        purpose,
                    }
                } else {
                    Step::Wait {
                        scale_up,
                        purpose,
                        blockers,
                    }
                }
            }
        }
    };
    Plan {
        step,
        outdated,
        up_to_date,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::fixtures::desired;
    use crate::machines::ClonedFrom;

    /// A simulated control plane: machines appear with a Node at once, deletions complete at once.
    struct Sim {
        machines: Vec<ControlPlaneMachine>,
        clock: u32,
        domains: Vec<String>,
    }

    impl Sim {
        fn new(domains: &[&str]) -> Self {
            Self {
                machines: Vec::new(),
                clock: 0,
                domains: domains.iter().map(|d| d.to_string()).collect(),
            }
        }

        fn observe<'a>(&'a self, desired: &'a DesiredState) -> Observed<'a> {
            Observed {
                desired,
                machines: &self.machines,
                failure_domains: &self.domains,
                etcd_refuses_member: None,
            }
        }

        fn create(&mut self, desired: &DesiredState, failure_domain: Option<String>, init: bool) {
            self.clock += 1;
            self.machines.push(ControlPlaneMachine {
                name: format!("m{}", self.clock),
                created: Timestamp::from_second(1_700_000_000 + i64::from(self.clock)).unwrap(),
                version: Some(desired.version.clone()),
                failure_domain,
                node: Some(format!("node{}", self.clock)),
                cloned_from: Some(desired.infrastructure.clone()),
                kubeadm_config: Some(if init {
                    desired.init.clone()
                } else {
                    desired.join.clone()
                }),
                ..Default::default()
            });
        }

        /// Runs reconciles until idle; returns the steps and the fewest machines seen between steps.
        fn converge(&mut self, desired: &DesiredState) -> (Vec<Step>, usize) {
            let mut steps = Vec::new();
            let mut fewest = usize::MAX;
            for _ in 0..50 {
                let plan = next_step(self.observe(desired));
                steps.push(plan.step.clone());
                match plan.step {
                    Step::Idle => return (steps, fewest),
                    Step::Initialize { failure_domain } => {
                        self.create(desired, failure_domain, true)
                    }
                    Step::ScaleUp { failure_domain, .. } => {
                        self.create(desired, failure_domain, false)
                    }
                    Step::ScaleDown { machine, .. } => self.machines.retain(|m| m.name != machine),
                    Step::Wait { blockers, .. } => panic!("unexpected wait: {blockers:?}"),
                }
                fewest = fewest.min(self.machines.len());
            }
            panic!("no convergence: {steps:?}");
        }

        fn names(&self) -> Vec<&str> {
            self.machines.iter().map(|m| m.name.as_str()).collect()
        }
    }

    /// Partitions as the controller does, then decides.
    fn next_step(observed: Observed<'_>) -> Plan {
        let now = "2026-11-01T00:00:00Z".parse().unwrap();
        super::next_step(
            observed,
            partition(observed.desired, observed.machines, now),
        )
    }

    #[test]
    fn scale_one_to_three_to_one() {
        let mut sim = Sim::new(&["az1", "az2", "az3"]);
        let (steps, _) = sim.converge(&desired(1, "cp-genc01", 1));
        assert_eq!(
            steps[0],
            Step::Initialize {
                failure_domain: Some("az1".into())
            }
        );
        assert_eq!(sim.names(), ["m1"]);

        let (steps, _) = sim.converge(&desired(3, "cp-genc01", 1));
        assert_eq!(
            steps,
            [
                Step::ScaleUp {
                    failure_domain: Some("az2".into()),
                    purpose: Purpose::Scale
                },
                Step::ScaleUp {
                    failure_domain: Some("az3".into()),
                    purpose: Purpose::Scale
                },
                Step::Idle
            ]
        );
        let (steps, _) = sim.converge(&desired(1, "cp-genc01", 1));
        // The oldest in a busiest domain goes first: all domains hold one, so the first by name (az1).
        assert_eq!(steps.len(), 3);
        assert_eq!(sim.names(), ["m3"]);
    }

    #[test]
    fn a_generation_bump_replaces_every_machine_oldest_first_never_below_three() {
        let mut sim = Sim::new(&[]);
        sim.converge(&desired(3, "cp-genc01", 1));
        assert_eq!(sim.names(), ["m1", "m2", "m3"]);
        let next = desired(3, "cp-genc02", 1);
        let (steps, fewest) = sim.converge(&next);
        let deleted: Vec<&str> = steps
            .iter()
            .filter_map(|s| match s {
                Step::ScaleDown { machine, purpose } => {
                    assert_eq!(*purpose, Purpose::Rollout);
                    Some(machine.as_str())
                }
                _ => None,
            })
            .collect();
        assert_eq!(deleted, ["m1", "m2", "m3"]);
        assert!(fewest >= 3, "went down to {fewest}");
        assert_eq!(sim.names(), ["m4", "m5", "m6"]);
        assert!(
            sim.machines
                .iter()
                .all(|m| m.cloned_from.as_ref().unwrap().name == "cp-genc02")
        );
        // Alternating: create, delete, create, delete, create, delete.
        assert!(matches!(steps[0], Step::ScaleUp { .. }));
        assert!(matches!(steps[1], Step::ScaleDown { .. }));
    }

    #[test]
    fn max_surge_zero_deletes_first_and_never_exceeds_replicas() {
        let mut sim = Sim::new(&[]);
        sim.converge(&desired(3, "cp-genc01", 0));
        let (steps, fewest) = sim.converge(&desired(3, "cp-genc02", 0));
        assert!(matches!(steps[0], Step::ScaleDown { ref machine, .. } if machine == "m1"));
        assert_eq!(fewest, 2);
        assert_eq!(sim.names(), ["m4", "m5", "m6"]);
    }

    #[test]
    fn a_version_bump_rolls_like_a_template_bump() {
        let mut sim = Sim::new(&[]);
        sim.converge(&desired(3, "cp-genc01", 1));
        let mut next = desired(3, "cp-genc01", 1);
        next.version = "v1.33.2".into();
        let plan = next_step(sim.observe(&next));
        assert_eq!(plan.outdated.len(), 3);
        sim.converge(&next);
        assert!(
            sim.machines
                .iter()
                .all(|m| m.version.as_deref() == Some("v1.33.2"))
        );
    }

    #[test]
    fn scaling_waits_for_preflight_and_says_why() {
        let mut sim = Sim::new(&[]);
        sim.converge(&desired(1, "cp-genc01", 1));
        sim.machines[0].node = None;
        let plan = next_step(sim.observe(&desired(3, "cp-genc01", 1)));
        assert_eq!(
            plan.step,
            Step::Wait {
                scale_up: true,
                purpose: Purpose::Scale,
                blockers: vec![Blocker::MachineWithoutNode("m1".into())]
            }
        );
    }

    #[test]
    fn etcd_that_cannot_take_a_member_holds_a_scale_up() {
        let mut sim = Sim::new(&[]);
        sim.converge(&desired(1, "cp-genc01", 1));
        let next = desired(3, "cp-genc01", 1);
        let mut observed = sim.observe(&next);
        let refusal = Blocker::EtcdMembership(crate::etcd_membership::Reason::LearnerPresent {
            member: crate::etcd_membership::MemberLabel {
                id: 0x8e9e05c52164694d,
                name: "node9".into(),
            },
        });
        observed.etcd_refuses_member = Some(&refusal);
        let plan = next_step(observed);
        let Step::Wait { blockers, .. } = plan.step else {
            panic!("{:?}", plan.step);
        };
        assert_eq!(blockers, [refusal]);
        assert!(
            blockers[0]
                .to_string()
                .starts_with("etcd cannot take a member now: "),
            "{}",
            blockers[0]
        );
        assert_eq!(blockers[0].reason(), "EtcdClusterNotHealthy");
    }

    #[test]
    fn a_deleting_machine_is_neither_outdated_nor_chosen_again() {
        let mut sim = Sim::new(&[]);
        sim.converge(&desired(3, "cp-genc01", 1));
        sim.machines[0].deleting = true;
        sim.machines[0].cloned_from = Some(ClonedFrom {
            name: "old".into(),
            group_kind: "x".into(),
        });
        let plan = next_step(sim.observe(&desired(3, "cp-genc01", 1)));
        assert!(plan.outdated.is_empty());
        assert_eq!(plan.up_to_date, ["m2", "m3"]);
        assert!(matches!(plan.step, Step::Idle));
        let plan = next_step(sim.observe(&desired(2, "cp-genc01", 1)));
        assert!(
            matches!(plan.step, Step::Wait { ref blockers, .. } if blockers == &[Blocker::MachineDeleting("m1".into())])
        );
    }

    #[test]
    fn a_rollout_creates_the_next_machine_once_only_cluster_apis_cleanup_is_left() {
        for max_surge in [1, 0] {
            let mut sim = Sim::new(&["fd1", "fd2", "fd3"]);
            sim.converge(&desired(3, "cp-genc01", 1));
            let new = desired(3, "cp-genc02", max_surge);
            if max_surge == 1 {
                let Step::ScaleUp { failure_domain, .. } = next_step(sim.observe(&new)).step else {
                    panic!("a rollout with maxSurge 1 creates first");
                };
                sim.create(&new, failure_domain, false);
            }
            let plan = next_step(sim.observe(&new));
            let Step::ScaleDown { machine, .. } = plan.step else {
                panic!("{max_surge}: {:?}", plan.step);
            };
            let mut without = Sim::new(&["fd1", "fd2", "fd3"]);
            without.machines = sim.machines.clone();
            without.machines.retain(|m| m.name != machine);
            let Step::ScaleUp { failure_domain, .. } = next_step(without.observe(&new)).step else {
                panic!("{max_surge}: the rollout goes on once the machine is gone");
            };
            let victim = sim.machines.iter_mut().find(|m| m.name == machine).unwrap();
            victim.deleting = true;
            victim.has_cleanup_hook = true;
            // The hook holds the etcd member: nothing else happens, not even a second deletion.
            let held = |sim: &Sim| {
                matches!(next_step(sim.observe(&new)).step,
                    Step::Wait { ref blockers, .. } if blockers == &[Blocker::MachineDeleting(machine.clone())])
            };
            assert!(held(&sim), "{max_surge}");
            let victim = sim.machines.iter_mut().find(|m| m.name == machine).unwrap();
            victim.has_cleanup_hook = false;
            assert!(held(&sim), "{max_surge}: the VM is still there");
            let victim = sim.machines.iter_mut().find(|m| m.name == machine).unwrap();
            victim.infrastructure_gone = true;
            // Only the bootstrap config and the Node object are left: the next machine is created,
            // where it would go were the leaving one gone.
            assert_eq!(
                next_step(sim.observe(&new)).step,
                Step::ScaleUp {
                    failure_domain,
                    purpose: Purpose::Rollout
                },
                "{max_surge}"
            );
        }
    }
}
