//! Applies [`crate::remediation::decide`]: deletes the machine to remediate and records the remediation
//! on the control plane, or says on the machine's `OwnerRemediated` condition why it has to wait.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch};
use kube::runtime::events::EventType;
use kubeadm_api::cluster::v1beta2::Machine;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use serde_json::json;

use super::etcd::{EtcdView, annotate_object};
use super::machines::{self, Gathered};
use super::metrics::METRICS;
use super::{Context, Error, publish_about};
use crate::etcd_membership::{self, EtcdMachine, Member};
use crate::remediation::{
    self, Decision, HEALTH_CHECK_SUCCEEDED_CONDITION, IN_PROGRESS_ANNOTATION,
    MACHINE_DELETING_REASON, OWNER_REMEDIATED_CONDITION, RemediationData, Settings,
};

/// What the remediation step did.
pub(super) enum Outcome {
    /// Nothing that ends this reconcile; the remediation shown as `status.lastRemediation`.
    Continue(Option<RemediationData>),
    /// A machine is being deleted to be replaced.
    Remediated(RemediationData),
}

/// Inputs besides the gathered machines.
pub(super) struct Inputs<'a> {
    pub initialized: bool,
    pub external_etcd: bool,
    /// The etcd view of this reconcile (stacked etcd, initialized control plane).
    pub etcd: Option<&'a Result<EtcdView, String>>,
    pub etcd_machines: &'a [EtcdMachine],
    pub now: Timestamp,
}

pub(super) async fn reconcile(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    gathered: &Gathered,
    inputs: Inputs<'_>,
) -> Result<Outcome, Error> {
    let namespace = kcp.namespace().unwrap_or_default();
    clear_recovered(ctx, &namespace, gathered).await?;

    let in_progress = match kcp.annotations().get(IN_PROGRESS_ANNOTATION) {
        None => None,
        Some(value) => match RemediationData::parse(value) {
            Ok(data) if !remediation::is_stale(&data, &gathered.machines) => Some(data),
            Ok(_) => {
                // Its replacement exists: only the cleanup of the record was lost.
                set_in_progress(ctx, kcp, None).await?;
                None
            }
            Err(e) => {
                tracing::warn!(kcp = %kcp.name_any(), "{IN_PROGRESS_ANNOTATION}: {e}; removed");
                set_in_progress(ctx, kcp, None).await?;
                None
            }
        },
    };

    let unsafe_to_lose = match inputs.etcd {
        Some(Ok(view)) => Ok(etcd_unsafe_to_lose(
            view,
            &gathered.machines,
            inputs.etcd_machines,
            ctx,
            inputs.now,
        )),
        Some(Err(cause)) => Err(cause.clone()),
        None if inputs.external_etcd => Ok(BTreeMap::new()),
        None => Err("the etcd members were not listed".to_owned()),
    };
    let decision = remediation::decide(remediation::Observed {
        machines: &gathered.machines,
        initialized: inputs.initialized,
        external_etcd: inputs.external_etcd,
        in_progress: in_progress.as_ref(),
        settings: Settings::of(kcp.spec.remediation.as_ref()),
        now: inputs.now,
        etcd: unsafe_to_lose.as_ref().map_err(String::as_str),
    });
    let last = || remediation::last(in_progress.as_ref(), &gathered.machines).cloned();
    match decision {
        Decision::Nothing | Decision::Deleting { .. } | Decision::InProgress { .. } => {
            Ok(Outcome::Continue(last()))
        }
        Decision::Blocked {
            machine,
            reason,
            message,
        } => {
            if set_owner_remediated(ctx, &namespace, gathered, &machine, reason, &message).await? {
                publish_about(
                    ctx,
                    kcp,
                    EventType::Warning,
                    "RemediationBlocked",
                    "Remediate",
                    &format!("Machine {machine} needs remediation: {message}"),
                    Some(&machine),
                )
                .await;
            }
            Ok(Outcome::Continue(last()))
        }
        Decision::Remediate { machine, data } => {
            // The record goes first: a restart between the two finds it naming this machine and finishes.
            if in_progress.as_ref() != Some(&data) {
                set_in_progress(ctx, kcp, Some(&data)).await?;
            }
            set_owner_remediated(
                ctx,
                &namespace,
                gathered,
                &machine,
                MACHINE_DELETING_REASON,
                "Machine is deleting",
            )
            .await?;
            machines::delete(ctx, &namespace, &machine).await?;
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
                EventType::Normal,
                "MachineRemediated",
                "Remediate",
                &format!("deleting unhealthy Machine {machine} to replace it{retry}"),
                Some(&machine),
            )
            .await;
            Ok(Outcome::Remediated(data))
        }
    }
}

/// The record to copy onto the machine created next, read live: the one written by the reconcile that
/// deleted the unhealthy machine may not have reached this controller's cache yet.
pub(super) async fn in_progress_record(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
) -> Result<Option<String>, Error> {
    let api: Api<KubeadmControlPlane> =
        Api::namespaced(ctx.client.clone(), &kcp.namespace().unwrap_or_default());
    Ok(api
        .get_opt(&kcp.name_any())
        .await?
        .and_then(|live| live.annotations().get(IN_PROGRESS_ANNOTATION).cloned()))
}

/// Sets (`Some`) or removes (`None`) the in-progress record on the control plane.
pub(super) async fn set_in_progress(
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
        IN_PROGRESS_ANNOTATION,
        value.as_deref(),
    )
    .await?;
    Ok(())
}

/// Per machine asking for remediation: why losing its etcd member now would cost quorum. Like Cluster
/// API, a control plane with a learner or a member still starting waits until that settles.
fn etcd_unsafe_to_lose(
    view: &EtcdView,
    machines: &[crate::machines::ControlPlaneMachine],
    etcd_machines: &[EtcdMachine],
    ctx: &Context,
    now: Timestamp,
) -> BTreeMap<String, String> {
    let observed = etcd_membership::Observed {
        members: &view.members,
        states: &view.states,
        machines: etcd_machines,
        first_seen: &view.first_seen,
        now,
        learner_timeout: ctx.etcd.learner_timeout,
        unstarted_grace: ctx.etcd.unstarted_grace,
    };
    let settling = view
        .members
        .iter()
        .find(|m| m.is_learner || !m.is_started())
        .map(|m: &Member| {
            let name = if m.name.is_empty() {
                format!("{:x}", m.id)
            } else {
                m.name.clone()
            };
            format!("etcd member {name} is still joining (learner or not started)")
        });
    machines
        .iter()
        .filter(|m| remediation::wants_remediation(m))
        .filter_map(|m| {
            if let Some(why) = &settling {
                return Some((m.name.clone(), why.clone()));
            }
            let member = view.members.iter().find(|member| {
                etcd_membership::member_machine(member, etcd_machines)
                    .is_some_and(|owner| owner.name == m.name)
            })?;
            etcd_membership::is_quorum_safe_without(member.id, observed)
                .err()
                .map(|reason| (m.name.clone(), reason.to_string()))
        })
        .collect()
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
        "False",
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
            &super::merge_params(),
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
