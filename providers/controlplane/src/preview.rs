//! What a rollout would do, before it runs: the controller's own decisions ([`plan::partition`] and
//! [`plan::next_step`]) applied to a simulated control plane in which every new machine joins and stays
//! healthy and every deletion completes, until nothing is left to do.
//!
//! The first step is decided on the machines as they are (their health included), so it shows what blocks
//! the controller now; the steps after it assume the blockers clear.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::jiff::Timestamp;

use crate::desired::DesiredState;
use crate::machines::{ControlPlaneMachine, Health, MachineHealth};
use crate::plan::{self, Observed, Purpose, Step};
use crate::preflight::Blocker;
use crate::up_to_date::Outdated;

/// One step of the rollout.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// A machine is created; `name` is a placeholder (`new-1`, …) for the name the controller gives it.
    Create {
        name: String,
        failure_domain: Option<String>,
        /// It runs `kubeadm init` (the control plane has no machine yet).
        initialize: bool,
        purpose: Purpose,
    },
    /// A machine is deleted, for these reasons (none when it goes only because there are too many).
    Delete {
        machine: String,
        purpose: Purpose,
        reasons: Vec<Outdated>,
    },
}

/// The preview of a control plane.
#[derive(Clone, Debug, PartialEq)]
pub struct Preview {
    pub replicas: i32,
    pub max_surge: i32,
    pub external_etcd: bool,
    /// Outdated machines (not being deleted) and why.
    pub outdated: BTreeMap<String, Vec<Outdated>>,
    pub up_to_date: Vec<String>,
    /// Machines already being deleted; the preview assumes they go first.
    pub deleting: Vec<String>,
    /// What keeps the controller from taking the first step now (empty when nothing does).
    pub blocked_now: Vec<Blocker>,
    /// What else holds the control plane, as the controller last reported it (etcd alarms and
    /// membership, a remediation under way, a pause); filled in by whoever read the objects.
    pub reported: Vec<String>,
    /// What the webhook would refuse in the changed spec (`plan -f`): each rule broken, with its field.
    pub refused: Vec<String>,
    /// What it would admit with a warning.
    pub warnings: Vec<String>,
    /// The steps in order.
    pub steps: Vec<Action>,
    /// Where the simulation stopped short of the desired state, and why.
    pub stops: Option<Vec<Blocker>>,
}

/// The most steps a preview runs: far more than any rollout of a control plane needs.
const MAX_STEPS: usize = 64;

/// Previews the steps the controller takes from what it `observed` at `now` to the desired state.
pub fn preview(observed: Observed<'_>, now: Timestamp) -> Preview {
    let Observed {
        desired,
        machines,
        failure_domains,
        ..
    } = observed;
    let partition = plan::partition(desired, machines, now);
    let now_plan = plan::next_step(observed, partition.clone());
    let blocked_now = match now_plan.step {
        Step::Wait { blockers, .. } => blockers,
        _ => Vec::new(),
    };

    // From here on: deletions under way have completed, and every machine is healthy.
    let mut simulated: Vec<ControlPlaneMachine> = machines
        .iter()
        .filter(|m| !m.deleting)
        .cloned()
        .map(|m| healthy(m, desired.external_etcd))
        .collect();
    let mut steps = Vec::new();
    let mut stops = None;
    let mut created = 0;
    while steps.len() < MAX_STEPS {
        let partition = plan::partition(desired, &simulated, now);
        let plan = plan::next_step(
            Observed {
                desired,
                machines: &simulated,
                failure_domains,
                etcd_refuses_member: None,
            },
            partition,
        );
        let (failure_domain, purpose) = match plan.step {
            Step::Idle => break,
            Step::Initialize { failure_domain } => (failure_domain, None),
            Step::ScaleUp {
                failure_domain,
                purpose,
            } => (failure_domain, Some(purpose)),
            Step::ScaleDown { machine, purpose } => {
                simulated.retain(|m| m.name != machine);
                let reasons = plan.outdated.get(&machine).cloned().unwrap_or_default();
                steps.push(Action::Delete {
                    machine,
                    purpose,
                    reasons,
                });
                continue;
            }
            Step::Wait { blockers, .. } => {
                stops = Some(blockers);
                break;
            }
        };
        created += 1;
        let new = Arrival {
            number: created,
            failure_domain,
            purpose,
        };
        steps.push(create(&mut simulated, desired, now, new));
    }
    Preview {
        replicas: desired.replicas,
        max_surge: desired.max_surge,
        external_etcd: desired.external_etcd,
        outdated: partition.outdated,
        up_to_date: partition.up_to_date,
        deleting: machines
            .iter()
            .filter(|m| m.deleting)
            .map(|m| m.name.clone())
            .collect(),
        blocked_now,
        reported: Vec::new(),
        refused: Vec::new(),
        warnings: Vec::new(),
        steps,
        stops,
    }
}

/// `machine` as it is once whatever ails it has cleared.
fn healthy(mut machine: ControlPlaneMachine, external_etcd: bool) -> ControlPlaneMachine {
    machine.health = MachineHealth {
        components: Health::Healthy,
        etcd: if external_etcd {
            Health::NotChecked
        } else {
            Health::Healthy
        },
    };
    machine.node.get_or_insert_with(|| machine.name.clone());
    machine.ready = true;
    machine.available = true;
    machine
}

/// The `number`th machine the preview creates; without a purpose it is the first (`kubeadm init`).
struct Arrival {
    number: usize,
    failure_domain: Option<String>,
    purpose: Option<Purpose>,
}

/// Adds a new machine, built as the controller builds it, already joined.
fn create(
    machines: &mut Vec<ControlPlaneMachine>,
    desired: &DesiredState,
    now: Timestamp,
    Arrival {
        number,
        failure_domain,
        purpose,
    }: Arrival,
) -> Action {
    let name = format!("new-{number}");
    let initialize = purpose.is_none();
    machines.push(healthy(
        ControlPlaneMachine {
            name: name.clone(),
            created: now,
            version: Some(desired.version.clone()),
            failure_domain: failure_domain.clone(),
            generation: Some(desired.generation.clone()),
            cloned_from: Some(desired.infrastructure.clone()),
            kubeadm_config: Some(if initialize {
                desired.init.clone()
            } else {
                desired.join.clone()
            }),
            ..Default::default()
        },
        desired.external_etcd,
    ));
    Action::Create {
        name,
        failure_domain,
        initialize,
        purpose: purpose.unwrap_or(Purpose::Scale),
    }
}

impl fmt::Display for Purpose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Purpose::Scale => "scale",
            Purpose::Rollout => "rollout",
        })
    }
}

impl Preview {
    /// The etcd membership steps that go with `action`.
    fn etcd_steps(&self, action: &Action) -> Option<&'static str> {
        if self.external_etcd {
            return None;
        }
        Some(match action {
            Action::Create {
                initialize: true, ..
            } => "etcd: `kubeadm init` starts the first member",
            Action::Create { .. } => {
                "etcd: joins as a learner (one at a time), promoted to voter once in sync"
            }
            Action::Delete { .. } => {
                "etcd: quorum checked without it; if it leads, leadership moves to a healthy voter on a \
                 machine that stays; its member is removed before the Machine's pre-terminate hook is released"
            }
        })
    }
}

impl fmt::Display for Preview {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let strategy = if self.max_surge == 0 {
            "delete first (maxSurge 0)"
        } else {
            "create first (maxSurge 1)"
        };
        if !self.refused.is_empty() {
            writeln!(f, "The webhook would refuse this change:")?;
            for rule in &self.refused {
                writeln!(f, "  * {rule}")?;
            }
        }
        if !self.warnings.is_empty() {
            writeln!(f, "The webhook would warn:")?;
            for warning in &self.warnings {
                writeln!(f, "  * {warning}")?;
            }
        }
        writeln!(f, "{} replicas, rolling update: {strategy}", self.replicas)?;
        if self.outdated.is_empty() {
            writeln!(f, "Outdated machines: none")?;
        } else {
            writeln!(f, "Outdated machines:")?;
            for (machine, reasons) in &self.outdated {
                writeln!(f, "  {machine}:")?;
                for reason in reasons {
                    writeln!(f, "    * {reason}")?;
                }
            }
        }
        if !self.up_to_date.is_empty() {
            writeln!(f, "Up to date: {}", self.up_to_date.join(", "))?;
        }
        if !self.deleting.is_empty() {
            writeln!(f, "Being deleted: {}", self.deleting.join(", "))?;
        }
        if self.blocked_now.is_empty() {
            writeln!(f, "Blocked now: nothing")?;
        } else {
            writeln!(f, "Blocked now (the first step waits until these clear):")?;
            for blocker in &self.blocked_now {
                writeln!(f, "  * {blocker}")?;
            }
        }
        if !self.reported.is_empty() {
            writeln!(f, "Reported by the controller:")?;
            for line in &self.reported {
                writeln!(f, "  * {line}")?;
            }
        }
        if self.steps.is_empty() && self.stops.is_none() {
            return writeln!(f, "Steps: none, the control plane matches its spec");
        }
        writeln!(
            f,
            "Steps (one per reconcile, each once the one before has finished):"
        )?;
        for (i, action) in self.steps.iter().enumerate() {
            match action {
                Action::Create {
                    name,
                    failure_domain,
                    initialize,
                    purpose,
                } => {
                    let what = if *initialize {
                        "create the first machine (kubeadm init)".to_owned()
                    } else {
                        format!("create a machine ({purpose})")
                    };
                    let domain = failure_domain
                        .as_ref()
                        .map(|d| format!(" in failure domain {d}"))
                        .unwrap_or_default();
                    writeln!(f, "  {}. {what}{domain}, called {name} below", i + 1)?;
                }
                Action::Delete {
                    machine,
                    purpose,
                    reasons,
                } => {
                    let why = if reasons.is_empty() {
                        String::new()
                    } else {
                        let reasons: Vec<String> = reasons.iter().map(|r| r.to_string()).collect();
                        format!(": {}", reasons.join("; "))
                    };
                    writeln!(f, "  {}. delete {machine} ({purpose}){why}", i + 1)?;
                }
            }
            if let Some(etcd) = self.etcd_steps(action) {
                writeln!(f, "     {etcd}")?;
            }
        }
        if let Some(blockers) = &self.stops {
            writeln!(f, "  then stops:")?;
            for blocker in blockers {
                writeln!(f, "  * {blocker}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
