//! Maintenance of settled etcd: one step of compaction, leader-aware defragmentation or a snapshot, when
//! the rollout is idle and the membership needs nothing.

use super::Next;

use kubeadm_api::controlplane::events;

use crate::controller::events::publish;
use crate::controller::scope::ControlPlane;
use crate::controller::status::Report;
use crate::controller::{AFTER_MAINTENANCE, Context, Error, etcd};
use crate::etcd_membership;

pub(super) async fn reconcile(
    cp: &ControlPlane<'_>,
    ctx: &Context,
    report: &mut Report,
) -> Result<Option<Next>, Error> {
    let (Some(view), Some(etcd_membership::Action::Nothing)) = (cp.etcd_view(), cp.etcd_action())
    else {
        return Ok(None);
    };
    let Some(done) = etcd::maintain(ctx, cp.kcp, cp.key(), view, cp.now).await? else {
        return Ok(None);
    };
    tracing::info!("{}", done.note);
    match &done.refused {
        None => publish(ctx, cp.kcp, &events::ETCD_MAINTENANCE, &done.note).await,
        Some(refusal) => {
            publish(
                ctx,
                cp.kcp,
                &events::ETCD_SNAPSHOT_REFUSED,
                &refusal.message,
            )
            .await
        }
    }
    if done.snapshot.is_some() || done.refused.is_some() {
        ctx.etcd.snapshot_outcome(&cp.key(), done.refused.as_ref());
        report.etcd_snapshot(
            done.refused
                .as_ref()
                .map(|r| (r.reason, r.message.as_str())),
        );
    }
    etcd::record_maintenance(ctx, cp.kcp, done.defragmentation, done.snapshot).await?;
    Ok(Some(Next::After(AFTER_MAINTENANCE)))
}
