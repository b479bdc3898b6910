//! The phases of a control-plane reconcile, in the order they run. Each reads the one
//! [`ControlPlane`] view, may take one step, and says whether it did: the first phase that acts ends the
//! chain (one decision per reconcile); the status is written afterwards whatever ran.

mod addons;
mod etcd_maintenance;
mod etcd_membership;
mod restore;
mod rollout_and_scale;
mod sync_machines;
mod unhealthy_machines;

use std::time::Duration;

use super::scope::ControlPlane;
use super::status::Report;
use super::{Context, Error};

/// What a phase that ends the reconcile asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// It took a step (a machine created or deleted, an etcd membership change): a change is in flight,
    /// polled from now on ([`in_flight`](super::in_flight)).
    Stepped,
    /// It made a change that is in place once the call returns and that no watch announces (an etcd
    /// membership change): the next step is due now, not at the next poll
    /// ([`InFlight::again`](super::in_flight::InFlight::again)).
    Again,
    /// A step is due but has to wait (a preflight check fails): the change is still in flight.
    Waiting,
    /// Look again after this long (maintenance goes member by member on a settled control plane).
    After(Duration),
}

/// A phase of the reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// A requested etcd restore, before anything else: while it runs, nothing else acts.
    Restore,
    /// Leftovers of interrupted machine creations removed; labels and annotations propagated in place.
    SyncMachines,
    /// etcd membership changes first: they finish what an earlier step started (a join, a deletion).
    EtcdMembership,
    /// Then unhealthy machines: one replaced at a time, before any other change.
    UnhealthyMachines,
    /// Then the rollout or scale step the plan chose.
    RolloutAndScale,
    /// A settled control plane: kube-proxy and CoreDNS follow the spec.
    Addons,
    /// A settled control plane with settled etcd: compaction, defragmentation and snapshots.
    EtcdMaintenance,
}

/// Every phase, in order.
pub(super) const PHASES: [Phase; 7] = [
    Phase::Restore,
    Phase::SyncMachines,
    Phase::EtcdMembership,
    Phase::UnhealthyMachines,
    Phase::RolloutAndScale,
    Phase::Addons,
    Phase::EtcdMaintenance,
];

impl Phase {
    pub(super) fn name(self) -> &'static str {
        match self {
            Phase::Restore => "restore",
            Phase::SyncMachines => "sync_machines",
            Phase::EtcdMembership => "etcd_membership",
            Phase::UnhealthyMachines => "unhealthy_machines",
            Phase::RolloutAndScale => "rollout_and_scale",
            Phase::Addons => "addons",
            Phase::EtcdMaintenance => "etcd_maintenance",
        }
    }

    /// Runs the phase: `Some(next)` when it acted (or has to wait) and the reconcile ends here.
    pub(super) async fn run(
        self,
        cp: &ControlPlane<'_>,
        ctx: &Context,
        report: &mut Report,
    ) -> Result<Option<Next>, Error> {
        match self {
            Phase::Restore => restore::reconcile(cp, ctx, report).await,
            Phase::SyncMachines => sync_machines::reconcile(cp, ctx).await,
            Phase::EtcdMembership => etcd_membership::reconcile(cp, ctx).await,
            Phase::UnhealthyMachines => unhealthy_machines::reconcile(cp, ctx, report).await,
            Phase::RolloutAndScale => rollout_and_scale::reconcile(cp, ctx, report).await,
            Phase::Addons => addons::reconcile(cp, ctx).await,
            Phase::EtcdMaintenance => etcd_maintenance::reconcile(cp, ctx, report).await,
        }
    }
}
