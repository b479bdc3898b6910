//! Takes the step the plan chose: the first machine, one more (to scale or to replace an outdated one),
//! one fewer, or nothing while a preflight check fails.

use kubeadm_api::controlplane::events;

use super::Next;
use super::unhealthy_machines;
use crate::controller::events::{publish, publish_about};
use crate::controller::scope::ControlPlane;
use crate::controller::status::Report;
use crate::controller::{Context, Error, machines, workload};
use crate::plan::{Purpose, Step};

pub(super) async fn reconcile(
    cp: &ControlPlane<'_>,
    ctx: &Context,
    report: &mut Report,
) -> Result<Option<Next>, Error> {
    let outcome = take_step(cp, ctx).await;
    match &outcome {
        Err(Error::Infrastructure(message)) => {
            report.machines_created(Err(message));
            publish(ctx, cp.kcp, &events::MACHINE_CREATION_FAILED, message).await;
        }
        Err(_) => {}
        Ok(_) => report.machines_created(Ok(())),
    }
    outcome
}

async fn take_step(cp: &ControlPlane<'_>, ctx: &Context) -> Result<Option<Next>, Error> {
    let (event, note, machine) = match &cp.plan.step {
        Step::Idle => return Ok(None),
        Step::Wait { .. } => return Ok(Some(Next::Waiting)),
        Step::Initialize { failure_domain } => {
            let (name, _) = create_machine(cp, ctx, failure_domain.clone(), true).await?;
            let note = format!("created Machine {name} to initialize the control plane");
            (&events::MACHINE_CREATED, note, name)
        }
        Step::ScaleUp {
            failure_domain,
            purpose,
        } => {
            // The joining machine renders its static pods from the workload cluster's copy.
            update_cluster_configuration(cp, ctx).await?;
            let (name, replaces) = create_machine(cp, ctx, failure_domain.clone(), false).await?;
            let why = match (purpose, replaces) {
                (_, true) => "to replace a remediated machine".to_owned(),
                (Purpose::Scale, false) => "to scale up".to_owned(),
                (Purpose::Rollout, false) => {
                    format!("to roll out generation {}", cp.desired.generation)
                }
            };
            (
                &events::MACHINE_CREATED,
                format!("created Machine {name} {why}"),
                name,
            )
        }
        Step::ScaleDown { machine, purpose } => {
            machines::delete(ctx, &cp.namespace, machine).await?;
            let why = match purpose {
                Purpose::Scale => "to scale down",
                Purpose::Rollout => "because it is outdated",
            };
            let note = format!("deleting Machine {machine} {why}");
            (&events::MACHINE_DELETED, note, machine.clone())
        }
    };
    publish_about(ctx, cp.kcp, event, event.action(), &note, Some(&machine)).await;
    Ok(Some(Next::Stepped))
}

/// Creates a machine; one created while a remediation is in progress replaces the remediated machine,
/// records that remediation and ends it (returns true then).
async fn create_machine(
    cp: &ControlPlane<'_>,
    ctx: &Context,
    failure_domain: Option<String>,
    init: bool,
) -> Result<(String, bool), Error> {
    let record = unhealthy_machines::in_progress_record(ctx, cp.kcp).await?;
    let name = machines::create(
        ctx,
        cp.kcp,
        cp.cluster,
        &cp.desired,
        failure_domain,
        if init {
            machines::Kubeadm::Init
        } else {
            machines::Kubeadm::Join
        },
        record.as_deref(),
    )
    .await?;
    if record.is_some() {
        unhealthy_machines::set_in_progress(ctx, cp.kcp, None).await?;
    }
    Ok((name, record.is_some()))
}

/// Before a machine joins: the permissions kubeadm's join relies on, and the workload cluster's
/// `kubeadm-config` ClusterConfiguration in line with the spec (see [`crate::cluster_configuration`]).
async fn update_cluster_configuration(cp: &ControlPlane<'_>, ctx: &Context) -> Result<(), Error> {
    let facts = kubeadm_bootstrap::render::ClusterFacts::of(cp.cluster, &cp.desired.version);
    let document = kubeadm_bootstrap::render::kubeadm::cluster_configuration_document(
        &cp.desired.init,
        &facts,
    )
    .map_err(|e| Error::ClusterConfiguration(e.to_string()))?;
    let client = cp.workload()?;
    if workload::ensure_kubelet_api_admin_binding(client, &cp.desired.version).await? {
        let note = format!(
            "created ClusterRoleBinding {} in the workload cluster",
            workload::KUBELET_API_ADMIN_BINDING
        );
        publish(ctx, cp.kcp, &events::KUBEADM_PERMISSIONS_ENSURED, &note).await;
    }
    if workload::update_cluster_configuration(client, &document).await? {
        let note = format!(
            "updated the ClusterConfiguration in the workload cluster's kubeadm-config for Kubernetes {}",
            cp.desired.version
        );
        publish(ctx, cp.kcp, &events::CLUSTER_CONFIGURATION_UPDATED, &note).await;
    }
    Ok(())
}
