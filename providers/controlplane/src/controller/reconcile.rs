//! The reconcile of a live KubeadmControlPlane: check what the Cluster has to give, put the credentials in
//! place, observe once into a [`ControlPlane`], run the phases until one acts, then write the status once,
//! whatever path ran.

use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kubeadm_api::cluster::v1beta2::Cluster;
use kubeadm_api::controlplane::events;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;

use super::events::publish;
use super::in_flight::InFlight;
use super::phases::{Next, PHASES};
use super::scope::{ControlPlane, Route};
use super::status::Report;
use super::{Context, Error, WAIT, credentials, machines};
use crate::desired::DesiredState;
use crate::etcd_membership;
use crate::plan::Step;

pub(super) async fn reconcile_live(
    kcp: &KubeadmControlPlane,
    cluster: &Cluster,
    ctx: &Context,
) -> Result<Action, Error> {
    let mut report = Report::new(kcp);
    let outcome = run(kcp, cluster, ctx, &mut report).await;
    let written = report.write(ctx, kcp).await;
    let action = outcome?;
    written?;
    Ok(action)
}

async fn run(
    kcp: &KubeadmControlPlane,
    cluster: &Cluster,
    ctx: &Context,
    report: &mut Report,
) -> Result<Action, Error> {
    let desired = match DesiredState::of(kcp) {
        Ok(desired) => desired,
        Err(e) => {
            report.invalid_spec(&e);
            publish(ctx, kcp, &events::INVALID_SPEC, &e.to_string()).await;
            return Ok(Action::await_change());
        }
    };
    let Some(server) = cluster_ready(ctx, kcp, cluster, report).await else {
        return Ok(Action::requeue(WAIT));
    };
    let certificates = credentials::certificates(ctx, kcp, cluster, report).await?;
    let pinned = ctx
        .api_servers
        .pinned(&(kcp.namespace().unwrap_or_default(), cluster.name_any()));
    let workload = credentials::kubeconfig(
        ctx,
        kcp,
        &cluster.name_any(),
        &server,
        &certificates.ca,
        pinned.as_deref(),
    )
    .await?;

    let observe = |desired, workload, reuse| {
        ControlPlane::observe(
            ctx,
            kcp,
            cluster,
            desired,
            &certificates,
            workload,
            Route::of(pinned.as_deref(), reuse),
        )
    };
    let mut cp = observe(desired, workload, true).await?;
    if cp.needs_fresh_view(changing(&cp)) {
        tracing::debug!("something to do: the workload cluster is read again");
        ctx.watches.discard(&cp.key());
        cp = observe(cp.desired, cp.workload, false).await?;
    }
    let mut acted = None;
    let mut failed = None;
    for phase in PHASES {
        match phase.run(&cp, ctx, report).await {
            Ok(None) => {}
            Ok(Some(action)) => {
                tracing::debug!(phase = phase.name(), "acted");
                acted = Some(action);
                break;
            }
            Err(e) => {
                tracing::debug!(phase = phase.name(), error = %e, "failed");
                failed = Some(e);
                break;
            }
        }
    }
    // The status says what this reconcile saw, whichever phase ended it.
    report.observe(&cp);
    snapshot_taken(kcp, ctx, &cp.key(), report);
    let reported =
        machines::report_health(ctx, &cp.namespace, &cp.machines, &cp.plan.outdated).await;
    if let Some(e) = failed {
        return Err(e);
    }
    reported?;
    let quiet = !changing(&cp) && !cp.workload_unreachable;
    let settled = if cp.desired.external_etcd {
        ctx.settings.sync_period
    } else {
        ctx.settings
            .etcd_health_period
            .min(ctx.settings.sync_period)
    };
    let after = requeue(&cp, acted, &ctx.in_flight, settled);
    if quiet {
        cp.keep_view(ctx);
    }
    Ok(Action::requeue(after))
}

/// `EtcdSnapshotTaken` said again every reconcile from what outlives a status written from an older
/// copy of the control plane (which would drop a condition set only when a snapshot is due): the
/// refusal of the last due snapshot, kept in memory until one is kept, else the last snapshot the
/// clock annotation names. After a manager restart a refusal is found again at the next attempt.
fn snapshot_taken(
    kcp: &KubeadmControlPlane,
    ctx: &Context,
    key: &(String, String),
    report: &mut Report,
) {
    use kubeadm_api::meta::ETCD_LAST_SNAPSHOT_ANNOTATION;
    if let Some(refusal) = ctx.etcd.snapshot_refused(key) {
        report.etcd_snapshot(Some((refusal.reason, &refusal.message)));
    } else if kcp
        .annotations()
        .get(ETCD_LAST_SNAPSHOT_ANNOTATION)
        .is_some_and(|record| record.split_whitespace().nth(1).is_some())
    {
        report.etcd_snapshot(None);
    }
}

/// When to look again: soon while a change is in flight (see [`InFlight`]), when the acting phase asks,
/// or after `settled` (the sync period; with stacked etcd at most the etcd health period); never later than a
/// running etcd learner timeout or unstarted grace (the lowest wins).
fn requeue(
    cp: &ControlPlane<'_>,
    acted: Option<Next>,
    in_flight: &InFlight,
    settled: Duration,
) -> Duration {
    let key = ObjectRef::from_obj(cp.kcp);
    let after = match acted {
        Some(Next::Stepped) => in_flight.poll(key, true),
        Some(Next::Again) => in_flight.again(key),
        Some(Next::Waiting) => in_flight.poll(key, false),
        Some(Next::After(after)) => after,
        None if changing(cp) => in_flight.poll(key, false),
        // No watch is open on a workload cluster that does not answer to say when it does.
        None if cp.workload_unreachable => settled.min(WAIT),
        None => {
            in_flight.settled(&key);
            settled
        }
    };
    match cp.etcd.as_ref().and_then(|e| e.membership.as_ref()) {
        Some(membership) if matches!(membership.action, etcd_membership::Action::Wait(_)) => {
            let until_expiry = membership.next_expiry.map_or(WAIT, |at| {
                let left = at.duration_since(cp.now);
                let left = if left.is_negative() {
                    Duration::ZERO
                } else {
                    left.unsigned_abs()
                };
                left.max(Duration::from_secs(1))
            });
            after.min(WAIT).min(until_expiry)
        }
        _ => after,
    }
}

/// Something is under way: a step is due (or waits), etcd's membership needs a change (or waits for a
/// learner), or a machine is being deleted. A control plane that waits for `kubeadm init` is not polled:
/// the workload cluster's watches see the first machine's Node labelled control plane, which kubeadm
/// does after uploading its configuration.
fn changing(cp: &ControlPlane<'_>) -> bool {
    cp.plan.step != Step::Idle
        || cp
            .etcd_action()
            .is_some_and(|action| *action != etcd_membership::Action::Nothing)
        || cp.machines.machines.iter().any(|m| m.deleting)
}

/// The Cluster's infrastructure is provisioned and its control-plane endpoint set: returns the endpoint as
/// `https://host:port`, or says in the status (and, when that is news, an Event) what is missing.
async fn cluster_ready(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    cluster: &Cluster,
    report: &mut Report,
) -> Option<String> {
    let provisioned = cluster
        .status
        .as_ref()
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.infrastructure_provisioned)
        == Some(true);
    let cluster_ref = format!(
        "Cluster {}/{}",
        cluster.namespace().unwrap_or_default(),
        cluster.name_any()
    );
    let (event, message) = if !provisioned {
        let message = format!("{cluster_ref}: infrastructure is not provisioned yet");
        (&events::WAITING_FOR_INFRASTRUCTURE, message)
    } else if let Some(server) = kubeadm_cluster::endpoint::server_url(cluster) {
        return Some(server);
    } else {
        let message = format!("{cluster_ref}: spec.controlPlaneEndpoint is not set yet");
        (&events::WAITING_FOR_CONTROL_PLANE_ENDPOINT, message)
    };
    if report.waiting_for_cluster(event.reason, &message) {
        publish(ctx, kcp, event, &message).await;
    }
    None
}
