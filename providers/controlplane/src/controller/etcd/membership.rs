//! Makes the one etcd membership change the planner asks for.

use super::EtcdView;
use crate::controller::annotations::annotate_machine;
use crate::controller::{Context, Error};
use crate::etcd_membership::Action;
use crate::machines::ControlPlaneMachine;
use kubeadm_api::controlplane::events::etcd_actions::{
    MOVE_LEADER, PROMOTE_LEARNER, RELEASE_HOOK, REMOVE_MEMBER, REMOVE_ORPHAN, REMOVE_STUCK_LEARNER,
    REMOVE_UNSTARTED_MEMBER,
};
use kubeadm_api::meta::{CLEANUP_HOOK_ANNOTATION, REMEDIATE_MACHINE_ANNOTATION};

/// A membership change made, for its Event.
pub(in crate::controller) struct Change {
    /// What kind of change (the Event's action).
    pub action: &'static str,
    /// The Machine the changed member belongs to, when known.
    pub machine: Option<String>,
    pub note: String,
}

/// Makes the membership change `action`; returns what was done, or `None` when nothing was to be done.
pub(in crate::controller) async fn execute(
    ctx: &Context,
    namespace: &str,
    view: &EtcdView,
    action: &Action,
    machines: &[ControlPlaneMachine],
) -> Result<Option<Change>, Error> {
    let machine_of = |id: u64| {
        let name = &view.members.iter().find(|m| m.id == id)?.name;
        machines
            .iter()
            .find(|m| m.node.as_ref() == Some(name))
            .map(|m| m.name.clone())
    };
    let label = |id: u64| view.label(id);
    let change = |action: &'static str, machine: Option<String>, note: String| Change {
        action,
        machine,
        note,
    };
    let done = match action {
        Action::Nothing | Action::Wait(_) => return Ok(None),
        Action::Promote { member } => {
            view.etcd.promote(&view.leader()?, *member).await?;
            let note = format!(
                "promoted etcd learner {} to a voting member",
                label(*member)
            );
            change(PROMOTE_LEARNER, machine_of(*member), note)
        }
        Action::RemoveStuckLearner { member, machine }
        | Action::RemoveUnstartedMember { member, machine } => {
            view.etcd.remove(&view.proposer()?, *member).await?;
            let (kind, what) = if matches!(action, Action::RemoveStuckLearner { .. }) {
                (
                    REMOVE_STUCK_LEARNER,
                    "learner that did not catch up in time",
                )
            } else {
                (REMOVE_UNSTARTED_MEMBER, "member that never started")
            };
            let mut note = format!("removed etcd {what} {}", label(*member));
            if let Some(machine) = machine {
                annotate_machine(
                    ctx,
                    namespace,
                    machine,
                    REMEDIATE_MACHINE_ANNOTATION,
                    Some(""),
                )
                .await?;
                note.push_str(&format!(" and marked Machine {machine} for remediation"));
            }
            change(kind, machine.clone(), note)
        }
        Action::MoveLeader { from, to } => {
            view.etcd.move_leader(&view.leader()?, *to).await?;
            let note = format!(
                "moved etcd leadership from {} to {}",
                label(*from),
                label(*to)
            );
            change(MOVE_LEADER, machine_of(*from), note)
        }
        Action::RemoveMember { member, machine } => {
            view.etcd.remove(&view.proposer()?, *member).await?;
            let note = format!(
                "removed etcd member {} of deleting Machine {machine}",
                label(*member)
            );
            change(REMOVE_MEMBER, Some(machine.clone()), note)
        }
        Action::ReleaseHook { machine } => {
            annotate_machine(ctx, namespace, machine, CLEANUP_HOOK_ANNOTATION, None).await?;
            let note = format!(
                "Machine {machine} has no etcd member left; released its pre-terminate hook"
            );
            change(RELEASE_HOOK, Some(machine.clone()), note)
        }
        Action::RemoveOrphan { member } => {
            view.etcd.remove(&view.proposer()?, *member).await?;
            let note = format!(
                "removed etcd member {} that belongs to no Machine",
                label(*member)
            );
            change(REMOVE_ORPHAN, None, note)
        }
    };
    Ok(Some(done))
}
