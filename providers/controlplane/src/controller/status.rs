//! The KubeadmControlPlane status: replica counts by kind, the version, the selector for the scale
//! subresource, and conditions that say why the controller waits.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kubeadm_api::cluster::v1beta2::StatusVersion;
use kubeadm_api::controlplane::conditions::{reasons, types};
use kubeadm_api::controlplane::v1beta2::{
    KubeadmControlPlane, KubeadmControlPlaneInitializationStatus, KubeadmControlPlaneStatus,
    LastRemediationStatus,
};
use kubeadm_api::meta::{CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, set_condition};
use kubeadm_api::version::KubeVersion;
use serde_json::json;

use super::{Context, Error};
use crate::desired::{DesiredError, DesiredState};
use crate::machines::ControlPlaneMachine;
use crate::plan::{Plan, Purpose, Step};

/// The status being assembled during one reconcile; written once at the end, only if it changed.
pub(super) struct Report {
    status: KubeadmControlPlaneStatus,
    original: Option<KubeadmControlPlaneStatus>,
    generation: Option<i64>,
}

impl Report {
    pub(super) fn new(kcp: &KubeadmControlPlane) -> Self {
        Self {
            status: kcp.status.clone().unwrap_or_default(),
            original: kcp.status.clone(),
            generation: kcp.metadata.generation,
        }
    }

    pub(super) fn initialized(&self) -> bool {
        self.status
            .initialization
            .as_ref()
            .and_then(|i| i.control_plane_initialized)
            == Some(true)
    }

    pub(super) fn invalid_spec(&mut self, error: &DesiredError) {
        self.condition(
            types::SPEC_VALID,
            false,
            reasons::INVALID_SPEC,
            &error.to_string(),
        );
    }

    /// Reports what the Cluster still lacks; true when this is news (the reason changed), so the caller
    /// raises an Event once rather than on every retry.
    pub(super) fn waiting_for_cluster(&mut self, reason: &str, message: &str) -> bool {
        let before = self.reason_of(types::INITIALIZED);
        if !self.initialized() {
            self.condition(types::INITIALIZED, false, reason, message);
        }
        before.as_deref() != Some(reason)
    }

    fn reason_of(&self, type_: &str) -> Option<String> {
        self.status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.reason.clone())
    }

    pub(super) fn certificates(&mut self, ok: bool, message: &str) {
        if ok {
            self.condition(types::CERTIFICATES_AVAILABLE, true, reasons::AVAILABLE, "");
        } else {
            self.condition(
                types::CERTIFICATES_AVAILABLE,
                false,
                reasons::INTERNAL_ERROR,
                message,
            );
        }
    }

    /// Everything the status says about what this reconcile saw: health, etcd membership, counts, version
    /// and the rollout and scale conditions.
    pub(super) fn observe(&mut self, cp: &super::scope::ControlPlane<'_>) {
        let machines = &cp.machines.machines;
        let alarms = cp
            .etcd_view()
            .map(|view| super::etcd::alarms(&view.observation))
            .unwrap_or_default();
        self.health(machines, &alarms, cp.desired.external_etcd);
        self.etcd_membership(cp.etcd.as_ref().map(|e| &e.view), cp.etcd_action());
        self.counts(&cp.desired, machines, &cp.plan, cp.initialized);
    }

    /// Counts, version and conditions from the machines and the plan.
    fn counts(
        &mut self,
        desired: &DesiredState,
        machines: &[ControlPlaneMachine],
        plan: &Plan,
        initialized: bool,
    ) {
        let count = |f: fn(&ControlPlaneMachine) -> bool| {
            i32::try_from(machines.iter().filter(|m| f(m)).count()).unwrap_or(i32::MAX)
        };
        let replicas = i32::try_from(machines.len()).unwrap_or(i32::MAX);
        self.status.replicas = Some(replicas);
        self.status.ready_replicas = Some(count(|m| m.ready));
        self.status.available_replicas = Some(count(|m| m.available));
        self.status.up_to_date_replicas =
            Some(i32::try_from(plan.up_to_date.len()).unwrap_or(i32::MAX));
        self.status.version = lowest_version(machines);
        // Counters v1beta1 clients read (served through conversion from these fields).
        let v1beta1 = self
            .status
            .deprecated
            .get_or_insert_default()
            .v1beta1
            .get_or_insert_default();
        v1beta1.updated_replicas = i32::try_from(plan.up_to_date.len()).unwrap_or(i32::MAX);
        v1beta1.ready_replicas = count(|m| m.ready);
        v1beta1.unavailable_replicas = replicas - count(|m| m.available);
        self.status.versions = versions(machines);
        self.status.observed_generation = self.generation;
        if initialized {
            self.status.initialization = Some(KubeadmControlPlaneInitializationStatus {
                control_plane_initialized: Some(true),
            });
        }
        self.condition(types::SPEC_VALID, true, reasons::VALID, "");
        if initialized {
            self.condition(types::INITIALIZED, true, reasons::INITIALIZED, "");
        } else {
            self.condition(
                types::INITIALIZED,
                false,
                reasons::NOT_INITIALIZED,
                "waiting for the first control-plane machine to run kubeadm init",
            );
        }
        let with_node = machines.iter().any(|m| m.node.is_some() && !m.deleting);
        if initialized && with_node {
            self.condition(types::AVAILABLE, true, reasons::AVAILABLE, "");
        } else {
            self.condition(
                types::AVAILABLE,
                false,
                reasons::NOT_AVAILABLE,
                if initialized {
                    "no control-plane machine has a Node"
                } else {
                    "the control plane is not initialized"
                },
            );
        }

        let blockers = match &plan.step {
            Step::Wait { blockers, .. } => blockers
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
            _ => String::new(),
        };
        let waiting_reason = match &plan.step {
            Step::Wait { blockers, .. } => blockers.first().map(|b| b.reason()),
            _ => None,
        };

        if plan.outdated.is_empty() {
            self.condition(types::MACHINES_UP_TO_DATE, true, reasons::UP_TO_DATE, "");
            self.condition(types::ROLLING_OUT, false, reasons::NOT_ROLLING_OUT, "");
        } else {
            let details: Vec<String> = plan
                .outdated
                .iter()
                .map(|(name, reasons)| {
                    let reasons: Vec<String> = reasons.iter().map(ToString::to_string).collect();
                    format!("{name}: {}", reasons.join(", "))
                })
                .collect();
            self.condition(
                types::MACHINES_UP_TO_DATE,
                false,
                reasons::NOT_UP_TO_DATE,
                &details.join("; "),
            );
            let mut message = format!(
                "rolling out {} generation {}: {} of {} machines left to replace",
                desired.version,
                desired.generation,
                plan.outdated.len(),
                machines.iter().filter(|m| !m.deleting).count()
            );
            if !blockers.is_empty() {
                message.push_str(&format!("; waiting: {blockers}"));
            }
            self.condition(
                types::ROLLING_OUT,
                true,
                waiting_reason.unwrap_or(reasons::ROLLING_OUT),
                &message,
            );
        }

        let scale_message = |direction: &str| {
            let mut message = format!(
                "scaling {direction} from {replicas} to {} replicas",
                desired.replicas
            );
            if !blockers.is_empty() {
                message.push_str(&format!("; waiting: {blockers}"));
            }
            message
        };
        let scaling_up = replicas < desired.replicas
            || matches!(
                plan.step,
                Step::ScaleUp {
                    purpose: Purpose::Scale,
                    ..
                } | Step::Initialize { .. }
            );
        if scaling_up {
            let reason = waiting_reason.unwrap_or(reasons::SCALING_UP);
            self.condition(types::SCALING_UP, true, reason, &scale_message("up"));
        } else {
            self.condition(types::SCALING_UP, false, reasons::NOT_SCALING_UP, "");
        }
        if replicas > desired.replicas && plan.outdated.is_empty() {
            let reason = waiting_reason.unwrap_or(reasons::SCALING_DOWN);
            self.condition(types::SCALING_DOWN, true, reason, &scale_message("down"));
        } else {
            self.condition(types::SCALING_DOWN, false, reasons::NOT_SCALING_DOWN, "");
        }
    }

    /// Whether the last machine creation worked; a failure names the object and what is wrong.
    pub(super) fn machines_created(&mut self, result: Result<(), &String>) {
        match result {
            Ok(()) => self.condition(types::MACHINES_CREATED, true, reasons::CREATED, ""),
            Err(message) => self.condition(
                types::MACHINES_CREATED,
                false,
                reasons::INFRASTRUCTURE_TEMPLATE_CLONING_FAILED,
                message,
            ),
        }
    }

    /// Cluster-level health: `ControlPlaneComponentsHealthy` and `EtcdClusterHealthy`, naming the machines
    /// with problems, and etcd's `alarms` (see [`super::etcd::alarms`]).
    fn health(&mut self, machines: &[ControlPlaneMachine], alarms: &[String], external_etcd: bool) {
        fn problems(
            machines: &[ControlPlaneMachine],
            part: fn(&ControlPlaneMachine) -> &crate::machines::Health,
        ) -> Vec<String> {
            machines
                .iter()
                .filter(|m| m.node.is_some() && !m.deleting)
                .filter_map(|m| part(m).problem().map(|p| format!("{}: {p}", m.name)))
                .collect()
        }
        let components = problems(machines, |m| &m.health.components);
        if components.is_empty() {
            self.condition(
                types::CONTROL_PLANE_COMPONENTS_HEALTHY,
                true,
                reasons::HEALTHY,
                "",
            );
        } else {
            let message = components.join("; ");
            self.condition(
                types::CONTROL_PLANE_COMPONENTS_HEALTHY,
                false,
                reasons::NOT_HEALTHY,
                &message,
            );
        }
        if external_etcd {
            self.condition(
                types::ETCD_CLUSTER_HEALTHY,
                true,
                reasons::EXTERNAL,
                "etcd is external",
            );
            return;
        }
        let mut etcd = problems(machines, |m| &m.health.etcd);
        // An alarm stops writes and membership changes cluster-wide: one that no machine above names (its
        // member's Machine is being deleted, or the member is gone) is reported on its own.
        for alarm in alarms {
            if !etcd.iter().any(|p| p.ends_with(alarm.as_str())) {
                etcd.push(alarm.clone());
            }
        }
        if etcd.is_empty() {
            self.condition(types::ETCD_CLUSTER_HEALTHY, true, reasons::HEALTHY, "");
        } else {
            self.condition(
                types::ETCD_CLUSTER_HEALTHY,
                false,
                reasons::NOT_HEALTHY,
                &etcd.join("; "),
            );
        }
    }

    /// `EtcdMembershipSettled`: whether the etcd membership needs a change, and what it waits for.
    fn etcd_membership(
        &mut self,
        view: Option<&Result<super::etcd::EtcdView, super::etcd::Unobservable>>,
        action: Option<&crate::etcd_membership::Action>,
    ) {
        use crate::etcd_membership::Action;
        match (view, action) {
            (None, _) => {}
            (Some(Err(cause)), _) => {
                self.condition(
                    types::ETCD_MEMBERSHIP_SETTLED,
                    false,
                    cause.reason(),
                    &cause.message,
                );
            }
            (Some(Ok(_)), Some(Action::Nothing) | None) => {
                self.condition(types::ETCD_MEMBERSHIP_SETTLED, true, reasons::SETTLED, "");
            }
            (Some(Ok(_)), Some(Action::Wait(reason))) => {
                self.condition(
                    types::ETCD_MEMBERSHIP_SETTLED,
                    false,
                    reasons::WAITING,
                    &reason.to_string(),
                );
            }
            (Some(Ok(_)), Some(action)) => {
                self.condition(
                    types::ETCD_MEMBERSHIP_SETTLED,
                    false,
                    reasons::CHANGING,
                    &format!("{action:?}"),
                );
            }
        }
    }

    /// `status.lastRemediation`; kept when nothing newer is known.
    pub(super) fn last_remediation(&mut self, data: Option<&crate::remediation::RemediationData>) {
        let Some(data) = data else {
            return;
        };
        self.status.last_remediation = Some(LastRemediationStatus {
            machine: data.machine.clone(),
            time: Time(data.timestamp.unwrap_or_default()),
            retry_count: data.retry_count,
        });
    }

    /// `EtcdSnapshotTaken`: whether the last scheduled snapshot was kept, and why not.
    pub(super) fn etcd_snapshot(&mut self, refused: Option<(&'static str, &str)>) {
        match refused {
            None => self.condition(types::ETCD_SNAPSHOT_TAKEN, true, reasons::TAKEN, ""),
            Some((reason, why)) => self.condition(types::ETCD_SNAPSHOT_TAKEN, false, reason, why),
        }
    }

    /// `EtcdRestored`: the step a requested restore is at, why it is refused, or that it finished.
    /// True when this is news (the message changed), so a refusal raises its Event once.
    pub(super) fn etcd_restore(&mut self, step: &crate::restore::Step, source: &str) -> bool {
        use crate::restore::Step;
        let message = step.describe(source);
        let before = self
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == types::ETCD_RESTORED)
            .map(|c| c.message.clone());
        let (ok, reason) = match step {
            Step::Refuse(_) => (false, reasons::RESTORE_REFUSED),
            Step::Finish { .. } => (true, reasons::RESTORED),
            _ => (false, reasons::RESTORING),
        };
        self.condition(types::ETCD_RESTORED, ok, reason, &message);
        before.as_deref() != Some(message.as_str())
    }

    /// No restore was asked for (or the request was withdrawn): no `EtcdRestored` condition.
    pub(super) fn no_etcd_restore(&mut self) {
        self.status
            .conditions
            .retain(|c| c.type_ != types::ETCD_RESTORED);
    }

    fn condition(&mut self, type_: &str, ok: bool, reason: &str, message: &str) {
        set_condition(
            &mut self.status.conditions,
            type_,
            ok,
            reason,
            message,
            self.generation,
        );
    }

    /// Writes the status with server-side apply, unless nothing changed.
    pub(super) async fn write(
        mut self,
        ctx: &Context,
        kcp: &KubeadmControlPlane,
    ) -> Result<(), Error> {
        let cluster = kcp.labels().get(CLUSTER_NAME_LABEL).cloned().or_else(|| {
            kcp.owner_references()
                .iter()
                .find(|o| o.kind == "Cluster")
                .map(|o| o.name.clone())
        });
        if let Some(cluster) = cluster {
            self.status.selector = Some(format!(
                "{CLUSTER_NAME_LABEL}={cluster},{CONTROL_PLANE_LABEL}"
            ));
        }
        if self.original.as_ref() == Some(&self.status) {
            return Ok(());
        }
        let api: Api<KubeadmControlPlane> =
            Api::namespaced(ctx.client.clone(), &kcp.namespace().unwrap_or_default());
        // `status.etcd` is a record written once per event with a merge patch (see
        // `etcd::record_maintenance`); applying the copy read here, possibly from a stale cache, could
        // bring back an older record.
        self.status.etcd = None;
        let patch = json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
            "kind": "KubeadmControlPlane",
            "status": self.status,
        });
        api.patch_status(
            &kcp.name_any(),
            &PatchParams::apply(crate::FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
        Ok(())
    }
}

/// The oldest Kubernetes version among the machines: what the whole control plane is guaranteed to run.
fn lowest_version(machines: &[ControlPlaneMachine]) -> Option<String> {
    machines
        .iter()
        .filter_map(|m| m.version.as_deref())
        .filter_map(|v| Some((KubeVersion::parse(v)?, v)))
        .min_by_key(|(parsed, _)| *parsed)
        .map(|(_, v)| v.to_owned())
}

fn versions(machines: &[ControlPlaneMachine]) -> Vec<StatusVersion> {
    let mut counts: BTreeMap<&str, i32> = BTreeMap::new();
    for version in machines.iter().filter_map(|m| m.version.as_deref()) {
        *counts.entry(version).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(version, replicas)| StatusVersion {
            version: version.to_owned(),
            replicas: Some(replicas),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machines::{Health, MachineHealth};

    #[test]
    fn the_lowest_version_is_reported() {
        let m = |v: &str| ControlPlaneMachine {
            version: Some(v.into()),
            ..Default::default()
        };
        let machines = [m("v1.33.10"), m("v1.33.9"), m("v1.34.0")];
        assert_eq!(lowest_version(&machines).as_deref(), Some("v1.33.9"));
        assert_eq!(versions(&machines).len(), 3);
        assert_eq!(lowest_version(&[]), None);
    }

    #[test]
    fn an_etcd_alarm_is_reported_whichever_machine_raised_it() {
        let alarm = "etcd alarm NOSPACE on member 2 (node-b)";
        let machine = |name: &str, deleting: bool, etcd: Health| ControlPlaneMachine {
            name: name.into(),
            node: Some(format!("node-{name}")),
            deleting,
            health: MachineHealth {
                etcd,
                ..Default::default()
            },
            ..Default::default()
        };
        let etcd_healthy = |machines: &[ControlPlaneMachine], alarms: &[String]| {
            let mut report = Report {
                status: Default::default(),
                original: None,
                generation: None,
            };
            report.health(machines, alarms, false);
            let c = report
                .status
                .conditions
                .iter()
                .find(|c| c.type_ == types::ETCD_CLUSTER_HEALTHY)
                .unwrap();
            (c.status.clone(), c.message.clone())
        };
        let a = machine("a", false, Health::Healthy);
        let alarms = [alarm.to_owned()];
        assert_eq!(
            etcd_healthy(
                &[
                    a.clone(),
                    machine("b", false, Health::Unhealthy(alarm.into()))
                ],
                &alarms
            ),
            ("False".into(), format!("b: {alarm}")),
            "named once, on its machine"
        );
        // The Machine of the member that raised it is being deleted (or the member is gone): etcd still
        // refuses writes, and its member is not removed until the alarm is cleared.
        assert_eq!(
            etcd_healthy(
                &[
                    a.clone(),
                    machine("b", true, Health::Unhealthy(alarm.into()))
                ],
                &alarms
            ),
            ("False".into(), alarm.into())
        );
        assert_eq!(etcd_healthy(&[a], &[]), ("True".into(), String::new()));
    }

    #[test]
    fn an_unchanged_condition_keeps_its_transition_time() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            "Available",
            false,
            "NotAvailable",
            "x",
            Some(1),
        );
        let first = conditions[0].last_transition_time.clone();
        set_condition(
            &mut conditions,
            "Available",
            false,
            "NotAvailable",
            "y",
            Some(2),
        );
        assert_eq!(conditions[0].last_transition_time, first);
        assert_eq!(conditions[0].message, "y");
        assert_eq!(conditions.len(), 1);
    }
}
