//! Field mapping of KubeadmControlPlane and KubeadmControlPlaneTemplate between v1beta1 and
//! v1beta2 (the hub). The embedded KubeadmConfigSpec maps as in `crate::bootstrap::conversion`.
//!
//! Mappings that look lossy, and why nothing is lost (see `crate::conversion` for the annotations):
//! - `rolloutBefore`/`rolloutAfter`/`rolloutStrategy` ⇄ `rollout.{before,after,strategy}`;
//!   `remediationStrategy` ⇄ `remediation`, `machineNamingStrategy` ⇄ `machineNaming`.
//! - Durations (`nodeDrainTimeout`, `retryPeriod`, ...) are whole seconds in v1beta2; other spellings
//!   and sub-second parts stay in the v1beta1-data annotation. `retryPeriod: 0s` maps to 0, not to
//!   unset: both mean "no wait", and the value survives without an annotation.
//! - An unset rollout strategy type is RollingUpdate, the only type there is.
//! - `machineTemplate.infrastructureRef`: v1beta2 keeps group, kind and name; the version comes
//!   from the contract lookup (the referenced CRD's contract label) and the namespace is the
//!   object's. A version or namespace that differs, and uid/resourceVersion/fieldPath, stay in the
//!   v1beta1-data annotation; without a lookup the version written through v1beta1 is used.
//! - Status: `initialized` ⇄ `initialization.controlPlaneInitialized` (false ⇄ unset);
//!   `ready` is rebuilt from the v1beta1 ready replicas (true when > 0), as Cluster API does; any
//!   other value stays in the annotation. v1beta1 counters, conditions and failure fields ⇄
//!   `deprecated.v1beta1`; `v1beta2.*` ⇄ the v1beta2 conditions and counters; `lastRemediation.timestamp` ⇄ `time`;
//!   `etcd` (this provider's etcd maintenance record) exists only in v1beta2 and survives in the
//!   conversion-data annotation.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{v1beta1 as v1, v1beta2 as v2};
use crate::bootstrap::conversion::{defined, spec_from_hub, spec_to_hub};
use crate::conversion::sealed::FieldMapping;
use crate::conversion::{ContractVersions, ConversionError, seconds, to_duration};
use crate::meta::ContractVersionedObjectReference;

const INFRASTRUCTURE_REF_PATH: &str = "spec.machineTemplate.infrastructureRef";
const HUB_INFRASTRUCTURE_REF_PATH: &str = "spec.machineTemplate.spec.infrastructureRef";

/// The group of an apiVersion as Kubernetes parses it: `v1` is the core group.
fn group_of(api_version: &str) -> Option<&str> {
    let mut parts = api_version.split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(_version), None, None) => Some(""),
        (Some(group), Some(_version), None) => Some(group),
        _ => None,
    }
}

fn non_empty(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_owned())
}

fn infrastructure_ref_to_hub(
    reference: &ObjectReference,
) -> Result<ContractVersionedObjectReference, ConversionError> {
    let api_group = match reference.api_version.as_deref() {
        None | Some("") => String::new(),
        Some(api_version) => group_of(api_version)
            .ok_or_else(|| ConversionError::InvalidReferenceApiVersion {
                path: format!("{INFRASTRUCTURE_REF_PATH}.apiVersion"),
                value: api_version.to_owned(),
            })?
            .to_owned(),
    };
    Ok(ContractVersionedObjectReference {
        kind: reference.kind.clone().unwrap_or_default(),
        name: reference.name.clone().unwrap_or_default(),
        api_group,
    })
}

fn infrastructure_ref_from_hub(
    reference: &ContractVersionedObjectReference,
    namespace: Option<&String>,
    versions: &dyn ContractVersions,
) -> ObjectReference {
    if !defined(reference) {
        return ObjectReference::default();
    }
    ObjectReference {
        api_version: versions.api_version(&reference.api_group, &reference.kind),
        kind: non_empty(&reference.kind),
        name: non_empty(&reference.name),
        namespace: namespace.cloned(),
        ..ObjectReference::default()
    }
}

/// The three v1beta1 deletion timeouts, at `at` (for error paths).
struct DeletionTimeouts<'a> {
    drain: Option<&'a String>,
    volume_detach: Option<&'a String>,
    deletion: Option<&'a String>,
}

fn deletion_to_hub(
    timeouts: DeletionTimeouts<'_>,
    at: &str,
) -> Result<Option<v2::KubeadmControlPlaneMachineTemplateDeletionSpec>, ConversionError> {
    let deletion = v2::KubeadmControlPlaneMachineTemplateDeletionSpec {
        node_drain_timeout_seconds: seconds(timeouts.drain, || format!("{at}.nodeDrainTimeout"))?,
        node_volume_detach_timeout_seconds: seconds(timeouts.volume_detach, || {
            format!("{at}.nodeVolumeDetachTimeout")
        })?,
        node_deletion_timeout_seconds: seconds(timeouts.deletion, || {
            format!("{at}.nodeDeletionTimeout")
        })?,
    };
    Ok(defined(&deletion).then_some(deletion))
}

type DeletionDurations = (Option<String>, Option<String>, Option<String>);

fn deletion_from_hub(
    deletion: Option<&v2::KubeadmControlPlaneMachineTemplateDeletionSpec>,
) -> DeletionDurations {
    let deletion = deletion.cloned().unwrap_or_default();
    (
        to_duration(deletion.node_drain_timeout_seconds),
        to_duration(deletion.node_volume_detach_timeout_seconds),
        to_duration(deletion.node_deletion_timeout_seconds),
    )
}

fn rollout_to_hub(
    before: Option<&v1::RolloutBefore>,
    after: Option<&Time>,
    strategy: Option<&v1::RolloutStrategy>,
) -> Option<v2::KubeadmControlPlaneRolloutSpec> {
    let rollout = v2::KubeadmControlPlaneRolloutSpec {
        before: before.map(|b| v2::KubeadmControlPlaneRolloutBeforeSpec {
            certificates_expiry_days: b.certificates_expiry_days,
        }),
        after: after.cloned(),
        strategy: strategy.map(|s| v2::KubeadmControlPlaneRolloutStrategy {
            // RollingUpdate is the only strategy, and what an unset type always meant.
            type_: match s.type_ {
                None | Some(v1::RolloutStrategyType::RollingUpdate) => {
                    v2::KubeadmControlPlaneRolloutStrategyType::RollingUpdate
                }
            },
            rolling_update: s.rolling_update.as_ref().map(|r| {
                v2::KubeadmControlPlaneRolloutStrategyRollingUpdate {
                    max_surge: r.max_surge.clone(),
                }
            }),
        }),
    };
    defined(&rollout).then_some(rollout)
}

type RolloutFields = (
    Option<v1::RolloutBefore>,
    Option<Time>,
    Option<v1::RolloutStrategy>,
);

fn rollout_from_hub(rollout: Option<&v2::KubeadmControlPlaneRolloutSpec>) -> RolloutFields {
    let Some(rollout) = rollout else {
        return (None, None, None);
    };
    (
        rollout.before.as_ref().map(|b| v1::RolloutBefore {
            certificates_expiry_days: b.certificates_expiry_days,
        }),
        rollout.after.clone(),
        rollout.strategy.as_ref().map(|s| v1::RolloutStrategy {
            type_: Some(match s.type_ {
                v2::KubeadmControlPlaneRolloutStrategyType::RollingUpdate => {
                    v1::RolloutStrategyType::RollingUpdate
                }
            }),
            rolling_update: s.rolling_update.as_ref().map(|r| v1::RollingUpdate {
                max_surge: r.max_surge.clone(),
            }),
        }),
    )
}

fn remediation_to_hub(
    remediation: &v1::RemediationStrategy,
    at: &str,
) -> Result<v2::KubeadmControlPlaneRemediationSpec, ConversionError> {
    Ok(v2::KubeadmControlPlaneRemediationSpec {
        max_retry: remediation.max_retry,
        retry_period_seconds: seconds(remediation.retry_period.as_ref(), || {
            format!("{at}.retryPeriod")
        })?,
        min_healthy_period_seconds: seconds(remediation.min_healthy_period.as_ref(), || {
            format!("{at}.minHealthyPeriod")
        })?,
    })
}

fn remediation_from_hub(
    remediation: &v2::KubeadmControlPlaneRemediationSpec,
) -> v1::RemediationStrategy {
    v1::RemediationStrategy {
        max_retry: remediation.max_retry,
        retry_period: to_duration(remediation.retry_period_seconds),
        min_healthy_period: to_duration(remediation.min_healthy_period_seconds),
    }
}

fn status_to_hub(status: &v1::KubeadmControlPlaneStatus) -> v2::KubeadmControlPlaneStatus {
    let deprecated = v2::KubeadmControlPlaneV1Beta1DeprecatedStatus {
        conditions: status.conditions.clone(),
        failure_reason: status.failure_reason.clone(),
        failure_message: status.failure_message.clone(),
        updated_replicas: status.updated_replicas,
        ready_replicas: status.ready_replicas,
        unavailable_replicas: status.unavailable_replicas,
    };
    let current = status.v1beta2.clone().unwrap_or_default();
    v2::KubeadmControlPlaneStatus {
        conditions: current.conditions,
        // v1beta1 cannot tell "not yet" from "unknown": false becomes unset.
        initialization: status
            .initialized
            .then_some(v2::KubeadmControlPlaneInitializationStatus {
                control_plane_initialized: Some(true),
            }),
        selector: status.selector.clone(),
        replicas: Some(status.replicas),
        ready_replicas: current.ready_replicas,
        available_replicas: current.available_replicas,
        up_to_date_replicas: current.up_to_date_replicas,
        versions: status.versions.clone(),
        version: status.version.clone(),
        observed_generation: status.observed_generation,
        last_remediation: status
            .last_remediation
            .as_ref()
            .map(|r| v2::LastRemediationStatus {
                machine: r.machine.clone(),
                time: r.timestamp.clone(),
                retry_count: r.retry_count,
            }),
        // Only v1beta2 holds it; the conversion-data annotation carries it through v1beta1.
        etcd: None,
        deprecated: defined(&deprecated).then_some(v2::KubeadmControlPlaneDeprecatedStatus {
            v1beta1: Some(deprecated),
        }),
    }
}

fn status_from_hub(status: &v2::KubeadmControlPlaneStatus) -> v1::KubeadmControlPlaneStatus {
    let deprecated = status
        .deprecated
        .as_ref()
        .and_then(|d| d.v1beta1.clone())
        .unwrap_or_default();
    let current = v1::KubeadmControlPlaneV1Beta2Status {
        conditions: status.conditions.clone(),
        ready_replicas: status.ready_replicas,
        available_replicas: status.available_replicas,
        up_to_date_replicas: status.up_to_date_replicas,
    };
    v1::KubeadmControlPlaneStatus {
        selector: status.selector.clone(),
        replicas: status.replicas.unwrap_or(0),
        version: status.version.clone(),
        updated_replicas: deprecated.updated_replicas,
        ready_replicas: deprecated.ready_replicas,
        unavailable_replicas: deprecated.unavailable_replicas,
        initialized: status
            .initialization
            .as_ref()
            .and_then(|i| i.control_plane_initialized)
            .unwrap_or(false),
        // v1beta2 has no `ready`; like Cluster API, an API server answered once a replica is ready.
        ready: deprecated.ready_replicas > 0,
        failure_reason: deprecated.failure_reason,
        failure_message: deprecated.failure_message,
        observed_generation: status.observed_generation,
        conditions: deprecated.conditions,
        last_remediation: status
            .last_remediation
            .as_ref()
            .map(|r| v1::LastRemediationStatus {
                machine: r.machine.clone(),
                timestamp: r.time.clone(),
                retry_count: r.retry_count,
            }),
        versions: status.versions.clone(),
        v1beta2: defined(&current).then_some(current),
    }
}

impl FieldMapping for v1::KubeadmControlPlane {
    type Hub = v2::KubeadmControlPlane;

    fn to_hub_fields(&self) -> Result<v2::KubeadmControlPlane, ConversionError> {
        let spec = &self.spec;
        let template = &spec.machine_template;
        let timeouts = DeletionTimeouts {
            drain: template.node_drain_timeout.as_ref(),
            volume_detach: template.node_volume_detach_timeout.as_ref(),
            deletion: template.node_deletion_timeout.as_ref(),
        };
        Ok(v2::KubeadmControlPlane {
            metadata: self.metadata.clone(),
            spec: v2::KubeadmControlPlaneSpec {
                replicas: spec.replicas,
                version: spec.version.clone(),
                machine_template: v2::KubeadmControlPlaneMachineTemplate {
                    metadata: template.metadata.clone(),
                    spec: v2::KubeadmControlPlaneMachineTemplateSpec {
                        infrastructure_ref: infrastructure_ref_to_hub(
                            &template.infrastructure_ref,
                        )?,
                        readiness_gates: template.readiness_gates.clone(),
                        deletion: deletion_to_hub(timeouts, "spec.machineTemplate")?,
                        taints: template.taints.clone(),
                    },
                },
                kubeadm_config_spec: Some(spec_to_hub(
                    &spec.kubeadm_config_spec,
                    "spec.kubeadmConfigSpec",
                )?)
                .filter(defined),
                rollout: rollout_to_hub(
                    spec.rollout_before.as_ref(),
                    spec.rollout_after.as_ref(),
                    spec.rollout_strategy.as_ref(),
                ),
                remediation: spec
                    .remediation_strategy
                    .as_ref()
                    .map(|r| remediation_to_hub(r, "spec.remediationStrategy"))
                    .transpose()?,
                machine_naming: spec.machine_naming_strategy.as_ref().map(|m| {
                    v2::MachineNamingSpec {
                        template: m.template.clone(),
                    }
                }),
                etcd_backup: spec.etcd_backup.clone(),
            },
            status: self.status.as_ref().map(status_to_hub),
        })
    }

    fn from_hub_fields(hub: &v2::KubeadmControlPlane, versions: &dyn ContractVersions) -> Self {
        let spec = &hub.spec;
        let template = &spec.machine_template;
        let (drain, volume_detach, deletion) = deletion_from_hub(template.spec.deletion.as_ref());
        let (rollout_before, rollout_after, rollout_strategy) =
            rollout_from_hub(spec.rollout.as_ref());
        v1::KubeadmControlPlane {
            metadata: hub.metadata.clone(),
            spec: v1::KubeadmControlPlaneSpec {
                replicas: spec.replicas,
                version: spec.version.clone(),
                machine_template: v1::KubeadmControlPlaneMachineTemplate {
                    metadata: template.metadata.clone(),
                    infrastructure_ref: infrastructure_ref_from_hub(
                        &template.spec.infrastructure_ref,
                        hub.metadata.namespace.as_ref(),
                        versions,
                    ),
                    readiness_gates: template.spec.readiness_gates.clone(),
                    node_drain_timeout: drain,
                    node_volume_detach_timeout: volume_detach,
                    node_deletion_timeout: deletion,
                    taints: template.spec.taints.clone(),
                },
                kubeadm_config_spec: spec_from_hub(
                    &spec.kubeadm_config_spec.clone().unwrap_or_default(),
                ),
                rollout_before,
                rollout_after,
                rollout_strategy,
                remediation_strategy: spec.remediation.as_ref().map(remediation_from_hub),
                machine_naming_strategy: spec.machine_naming.as_ref().map(|m| {
                    v1::MachineNamingStrategy {
                        template: m.template.clone(),
                    }
                }),
                etcd_backup: spec.etcd_backup.clone(),
            },
            status: hub.status.as_ref().map(status_from_hub),
        }
    }

    fn finish_from_hub(
        &mut self,
        hub: &v2::KubeadmControlPlane,
        versions: &dyn ContractVersions,
    ) -> Result<(), ConversionError> {
        let wanted = &hub.spec.machine_template.spec.infrastructure_ref;
        if wanted.api_group.is_empty() {
            return Ok(());
        }
        let reference = &mut self.spec.machine_template.infrastructure_ref;
        // A version kept from a v1beta1 write is good while the group is unchanged.
        if reference.api_version.as_deref().and_then(group_of) == Some(wanted.api_group.as_str()) {
            return Ok(());
        }
        match versions.api_version(&wanted.api_group, &wanted.kind) {
            Some(api_version) => {
                reference.api_version = Some(api_version);
                Ok(())
            }
            None => Err(ConversionError::UnknownContractVersion {
                path: HUB_INFRASTRUCTURE_REF_PATH.to_owned(),
                group: wanted.api_group.clone(),
                kind: wanted.kind.clone(),
            }),
        }
    }
}

impl FieldMapping for v1::KubeadmControlPlaneTemplate {
    type Hub = v2::KubeadmControlPlaneTemplate;

    fn to_hub_fields(&self) -> Result<v2::KubeadmControlPlaneTemplate, ConversionError> {
        let resource = &self.spec.template.spec;
        let machine_template = resource
            .machine_template
            .as_ref()
            .map(|t| {
                let timeouts = DeletionTimeouts {
                    drain: t.node_drain_timeout.as_ref(),
                    volume_detach: t.node_volume_detach_timeout.as_ref(),
                    deletion: t.node_deletion_timeout.as_ref(),
                };
                let spec = v2::KubeadmControlPlaneTemplateMachineTemplateSpec {
                    deletion: deletion_to_hub(timeouts, "spec.template.spec.machineTemplate")?,
                    taints: t.taints.clone(),
                };
                Ok::<_, ConversionError>(v2::KubeadmControlPlaneTemplateMachineTemplate {
                    metadata: t.metadata.clone(),
                    spec: defined(&spec).then_some(spec),
                })
            })
            .transpose()?;
        let spec = v2::KubeadmControlPlaneTemplateResourceSpec {
            machine_template,
            kubeadm_config_spec: Some(spec_to_hub(
                &resource.kubeadm_config_spec,
                "spec.template.spec.kubeadmConfigSpec",
            )?)
            .filter(defined),
            rollout: rollout_to_hub(
                resource.rollout_before.as_ref(),
                resource.rollout_after.as_ref(),
                resource.rollout_strategy.as_ref(),
            ),
            remediation: resource
                .remediation_strategy
                .as_ref()
                .map(|r| remediation_to_hub(r, "spec.template.spec.remediationStrategy"))
                .transpose()?,
            machine_naming: resource.machine_naming_strategy.as_ref().map(|m| {
                v2::MachineNamingSpec {
                    template: m.template.clone(),
                }
            }),
        };
        Ok(v2::KubeadmControlPlaneTemplate {
            metadata: self.metadata.clone(),
            spec: v2::KubeadmControlPlaneTemplateSpec {
                template: v2::KubeadmControlPlaneTemplateResource {
                    metadata: self.spec.template.metadata.clone(),
                    spec: defined(&spec).then_some(spec),
                },
            },
        })
    }

    fn from_hub_fields(
        hub: &v2::KubeadmControlPlaneTemplate,
        _versions: &dyn ContractVersions,
    ) -> Self {
        let resource = hub.spec.template.spec.clone().unwrap_or_default();
        let (rollout_before, rollout_after, rollout_strategy) =
            rollout_from_hub(resource.rollout.as_ref());
        v1::KubeadmControlPlaneTemplate {
            metadata: hub.metadata.clone(),
            spec: v1::KubeadmControlPlaneTemplateSpec {
                template: v1::KubeadmControlPlaneTemplateResource {
                    metadata: hub.spec.template.metadata.clone(),
                    spec: v1::KubeadmControlPlaneTemplateResourceSpec {
                        machine_template: resource.machine_template.as_ref().map(|t| {
                            let spec = t.spec.clone().unwrap_or_default();
                            let (drain, volume_detach, deletion) =
                                deletion_from_hub(spec.deletion.as_ref());
                            v1::KubeadmControlPlaneTemplateMachineTemplate {
                                metadata: t.metadata.clone(),
                                node_drain_timeout: drain,
                                node_volume_detach_timeout: volume_detach,
                                node_deletion_timeout: deletion,
                                taints: spec.taints,
                            }
                        }),
                        kubeadm_config_spec: spec_from_hub(
                            &resource.kubeadm_config_spec.clone().unwrap_or_default(),
                        ),
                        rollout_before,
                        rollout_after,
                        rollout_strategy,
                        remediation_strategy: resource
                            .remediation
                            .as_ref()
                            .map(remediation_from_hub),
                        machine_naming_strategy: resource.machine_naming.as_ref().map(|m| {
                            v1::MachineNamingStrategy {
                                template: m.template.clone(),
                            }
                        }),
                    },
                },
            },
        }
    }
}

#[cfg(test)]
mod strategies;

#[cfg(test)]
mod tests;
