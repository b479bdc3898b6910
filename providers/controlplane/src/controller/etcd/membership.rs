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
            view.etcd
                .remove(&view.proposers_without(*member)?, *member)
                .await?;
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
        Action::MoveLeader { from, to, then } => {
            let leader = view.leader()?;
            let candidates = std::iter::once(*to).chain(then.iter().copied());
            let (to, refused) =
                hand_over(candidates, |to| view.etcd.move_leader(&leader, to)).await?;
            let mut note = format!(
                "moved etcd leadership from {} to {}",
                label(*from),
                label(to)
            );
            for (candidate, error) in refused {
                note.push_str(&format!("; {} refused: {error}", label(candidate)));
            }
            change(MOVE_LEADER, machine_of(*from), note)
        }
        Action::RemoveMember { member, machine } => {
            view.etcd
                .remove(&view.proposers_without(*member)?, *member)
                .await?;
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
            view.etcd
                .remove(&view.proposers_without(*member)?, *member)
                .await?;
            let note = format!(
                "removed etcd member {} that belongs to no Machine",
                label(*member)
            );
            change(REMOVE_ORPHAN, None, note)
        }
    };
    Ok(Some(done))
}

/// Asks for leadership to move to each candidate in turn until one takes it: returns that one and the
/// candidates that refused before it, with why; when all refuse, the first refusal.
async fn hand_over<E, F, Fut>(
    candidates: impl IntoIterator<Item = u64>,
    mut move_to: F,
) -> Result<(u64, Vec<(u64, E)>), E>
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = Result<(), E>>,
{
    let mut refused = Vec::new();
    for candidate in candidates {
        match move_to(candidate).await {
            Ok(()) => return Ok((candidate, refused)),
            Err(error) => {
                tracing::info!(
                    candidate,
                    "etcd leadership not taken; trying the next candidate"
                );
                refused.push((candidate, error));
            }
        }
    }
    Err(refused
        .into_iter()
        .next()
        .map(|(_, error)| error)
        .expect("a move has at least one candidate"))
}

#[cfg(test)]
mod tests {
    use super::hand_over;

    #[tokio::test]
    async fn leadership_goes_to_the_first_candidate_that_takes_it() {
        let refusing = [2u64, 3];
        let moved = hand_over([2, 3, 4], |to| async move {
            if refusing.contains(&to) {
                Err(format!("member {to} is not reachable from the leader"))
            } else {
                Ok(())
            }
        })
        .await
        .unwrap();
        assert_eq!(moved.0, 4);
        assert_eq!(
            moved.1.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            [2, 3]
        );

        let none = hand_over([2, 3], |to| async move { Err::<(), _>(to) }).await;
        assert_eq!(none, Err(2), "the first refusal is the error");
        assert_eq!(
            hand_over([5], |_| async { Ok::<(), ()>(()) }).await,
            Ok((5, Vec::new()))
        );
    }
}
