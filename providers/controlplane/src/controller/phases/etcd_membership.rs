//! Makes the one etcd membership change the planner asks for (promote a learner, remove a stuck or
//! orphaned member, move leadership, remove a leaving machine's member and release its hook).

use kubeadm_api::controlplane::events;

use super::Next;
use crate::controller::events::publish_about;
use crate::controller::scope::ControlPlane;
use crate::controller::{Context, Error, etcd};
use crate::etcd_membership::Action;

pub(super) async fn reconcile(cp: &ControlPlane<'_>, ctx: &Context) -> Result<Option<Next>, Error> {
    let (Some(view), Some(action)) = (cp.etcd_view(), cp.etcd_action()) else {
        return Ok(None);
    };
    let Some(done) = etcd::execute(ctx, &cp.namespace, view, action, &cp.machines.machines).await?
    else {
        return Ok(None);
    };
    tracing::info!("{}", done.note);
    publish_about(
        ctx,
        cp.kcp,
        &events::ETCD_MEMBERSHIP_CHANGED,
        done.action,
        &done.note,
        done.machine.as_deref(),
    )
    .await;
    Ok(Some(match action {
        // The Machine's annotation changed: its watch brings the next reconcile.
        Action::ReleaseHook { .. } => Next::Stepped,
        // etcd has applied the change when the call returns, and tells no watch about it.
        _ => Next::Again,
    }))
}
