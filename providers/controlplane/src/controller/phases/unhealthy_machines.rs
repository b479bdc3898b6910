//! Applies [`crate::remediation::decide`]: deletes the machine to remediate and records the remediation
//! on the control plane, or says on the machine's `OwnerRemediated` condition why it has to wait.

use kubeadm_api::meta::REMEDIATION_IN_PROGRESS_ANNOTATION;
use std::collections::BTreeMap;

use kube::ResourceExt;
use kube::api::{Api, Patch};

use kubeadm_api::cluster::v1beta2::Machine;
use kubeadm_api::controlplane::events;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use serde_json::json;

use super::Next;
use crate::controller::annotations::annotate_object;
use crate::controller::events::publish_about;
use crate::controller::machines::{self, Gathered};
use crate::controller::metrics::METRICS;
use crate::controller::scope::ControlPlane;
use crate::controller::status::Report;
use crate::controller::{Context, Error};
use crate::remediation::{
    self, Decision, HEALTH_CHECK_SUCCEEDED_CONDITION, MACHINE_DELETING_REASON,
    OWNER_REMEDIATED_CONDITION, RemediationData, Settings,
};

pub(super) async fn reconcile(
    cp: &ControlPlane<'_>,
    ctx: &Context,
    report: &mut Report,
) -> Result<Option<Next>, Error> {
    let kcp = cp.kcp;
    let gathered = &cp.machines;
    let namespace = &cp.namespace;
    clear_recovered(ctx, namespace, gathered).await?;

    let in_progress = match kcp.annotations().get(REMEDIATION_IN_PROGRESS_ANNOTATION) {
        None => None,
        Some(value) => match RemediationData::parse(value) {
            Ok(data) if !remediation::is_stale(&data, &gathered.machines) => Some(data),
            Ok(_) => {
                // Its replacement exists: only the cleanup of the record was lost.
                set_in_progress(ctx, kcp, None).await?;
                None
            }
            Err(e) => {
                tracing::warn!("{REMEDIATION_IN_PROGRESS_ANNOTATION}: {e}; removed");
                set_in_progress(ctx, kcp, None).await?;
                None
            }
        },
    };

    let unsafe_to_lose = match &cp.etcd {
        Some(etcd) => match &etcd.view {
            Ok(view) => Ok(remediation::etcd_unsafe_to_lose(
                cp.membership_input(view),
                &gathered.machines,
            )),
            Err(cause) => Err(cause.message.clone()),
        },
        None if cp.desired.external_etcd => Ok(BTreeMap::new()),
        None => Err("the etcd members were not listed".to_owned()),
    };
    let decision = remediation::decide(remediation::Observed {
        machines: &gathered.machines,
        initialized: cp.initialized,
        external_etcd: cp.desired.external_etcd,
        in_progress: in_progress.as_ref(),
        settings: Settings::of(kcp.spec.remediation.as_ref()),
        now: cp.now,
        etcd: unsafe_to_lose.as_ref().map_err(String::as_str),
    });
    let last = || remediation::last(in_progress.as_ref(), &gathered.machines).cloned();
    match decision {
        Decision::Nothing | Decision::Deleting { .. } | Decision::InProgress { .. } => {
            report.last_remediation(last().as_ref());
            Ok(None)
        }
        Decision::Blocked {
            machine,
            reason,
            message,
        } => {
            if set_owner_remediated(ctx, namespace, gathered, &machine, reason, &message).await? {
                publish_about(
                    ctx,
                    kcp,
                    &events::REMEDIATION_BLOCKED,
                    events::REMEDIATION_BLOCKED.action(),
                    &format!("Machine {machine} needs remediation: {message}"),
                    Some(&machine),
                )
                .await;
            }
            report.last_remediation(last().as_ref());
            Ok(None)
        }
        Decision::Remediate { machine, data } => {
            // The record goes first: a restart between the two finds it naming this machine and finishes.
            if in_progress.as_ref() != Some(&data) {
                set_in_progress(ctx, kcp, Some(&data)).await?;
            }
            set_owner_remediated(
                ctx,
                namespace,
                gathered,
                &machine,
                MACHINE_DELETING_REASON,
                "Machine is deleting",
            )
            .await?;
            machines::delete(ctx, namespace, &machine).await?;
            METRICS
                .machines
                .get_or_create(&[("action", "remediated")])
                .inc();
            let retry = match data.retry_count {
                0 => String::new(),
                n => format!(" (retry {n})"),
            };
            publish_about(
                ctx,
                kcp,
                &events::MACHINE_REMEDIATED,
                events::MACHINE_REMEDIATED.action(),
                &format!("deleting unhealthy Machine {machine} to replace it{retry}"),
                Some(&machine),
            )
            .await;
            report.last_remediation(Some(&data));
            Ok(Some(Next::Stepped))
        }
    }
}

/// The record to copy onto the machine created next, read live: the one written by the reconcile that
/// deleted the unhealthy machine may not have reached this controller's cache yet.
pub(in crate::controller) async fn in_progress_record(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
) -> Result<Option<String>, Error> {
    let api: Api<KubeadmControlPlane> =
        Api::namespaced(ctx.client.clone(), &kcp.namespace().unwrap_or_default());
    Ok(api.get_opt(&kcp.name_any()).await?.and_then(|live| {
        live.annotations()
            .get(REMEDIATION_IN_PROGRESS_ANNOTATION)
            .cloned()
    }))
}

/// Sets (`Some`) or removes (`None`) the in-progress record on the control plane.
pub(in crate::controller) async fn set_in_progress(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    data: Option<&RemediationData>,
) -> Result<(), Error> {
    let api: Api<KubeadmControlPlane> =
        Api::namespaced(ctx.client.clone(), &kcp.namespace().unwrap_or_default());
    let value = data.map(RemediationData::to_annotation);
    annotate_object(
        &api,
        &kcp.name_any(),
        REMEDIATION_IN_PROGRESS_ANNOTATION,
        value.as_deref(),
    )
    .await?;
    Ok(())
}

/// Sets `OwnerRemediated` False on a machine; true if that changed it.
async fn set_owner_remediated(
    ctx: &Context,
    namespace: &str,
    gathered: &Gathered,
    machine: &str,
    reason: &str,
    message: &str,
) -> Result<bool, Error> {
    let Some(object) = gathered.objects.get(machine) else {
        return Ok(false);
    };
    let mut conditions = conditions_of(object);
    let before = conditions.clone();
    kubeadm_api::meta::set_condition(
        &mut conditions,
        OWNER_REMEDIATED_CONDITION,
        kubeadm_api::meta::ConditionStatus::False,
        reason,
        message,
        object.metadata.generation,
    );
    if conditions == before {
        return Ok(false);
    }
    write_conditions(ctx, namespace, object, conditions).await?;
    Ok(true)
}

/// Removes `OwnerRemediated` from machines that recovered before they were remediated.
async fn clear_recovered(ctx: &Context, namespace: &str, gathered: &Gathered) -> Result<(), Error> {
    for object in gathered.objects.values() {
        let conditions = conditions_of(object);
        let is = |type_: &str, status: &str| {
            conditions
                .iter()
                .any(|c| c.type_ == type_ && c.status == status)
        };
        if object.metadata.deletion_timestamp.is_some()
            || !is(HEALTH_CHECK_SUCCEEDED_CONDITION, "True")
            || !is(OWNER_REMEDIATED_CONDITION, "False")
        {
            continue;
        }
        let kept = conditions
            .iter()
            .filter(|c| c.type_ != OWNER_REMEDIATED_CONDITION)
            .cloned()
            .collect();
        write_conditions(ctx, namespace, object, kept).await?;
    }
    Ok(())
}

fn conditions_of(
    machine: &Machine,
) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    machine
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default()
}

async fn write_conditions(
    ctx: &Context,
    namespace: &str,
    machine: &Machine,
    conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
) -> Result<(), Error> {
    let api: Api<Machine> = Api::namespaced(ctx.client.clone(), namespace);
    let patch = json!({
        "metadata": { "resourceVersion": machine.resource_version() },
        "status": { "conditions": conditions },
    });
    match api
        .patch_status(
            &machine.name_any(),
            &crate::controller::merge_params(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Changed meanwhile (or gone): the next reconcile decides again with fresh data.
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
