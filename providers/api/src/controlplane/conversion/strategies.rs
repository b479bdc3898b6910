//! Generators of valid KubeadmControlPlane and KubeadmControlPlaneTemplate objects in both versions.

use k8s_openapi::api::core::v1::ObjectReference;
use proptest::prelude::*;

use super::super::{v1beta1 as v1, v1beta2 as v2};
use crate::bootstrap::conversion::strategies::{spec1, spec2};
use crate::conversion::strategies::{
    condition, few, go_duration, int_or_string, machine_taint, object_meta, one_of, opt,
    readiness_gate, seconds, status_version, template_meta, text, time, v1beta1_condition, word,
};
use crate::meta::ContractVersionedObjectReference;

const INFRASTRUCTURE_KINDS: &[&str] = &["OpenStackMachineTemplate", "DockerMachineTemplate"];

fn version() -> impl Strategy<Value = String> {
    "v1\\.3[0-4]\\.[0-9]".boxed()
}

fn naming() -> impl Strategy<Value = Option<String>> {
    opt(one_of(&[
        "{{ .kubeadmControlPlane.name }}-{{ .random }}",
        "{{ .cluster.name }}-cp-{{ .random }}",
    ]))
    .boxed()
}

/// `spec.etcdBackup`, the same type in both versions.
fn etcd_backup() -> impl Strategy<Value = super::super::etcd_backup::EtcdBackup> {
    use super::super::etcd_backup::*;
    let s3 = (
        one_of(&["https://s3.example.com", "http://127.0.0.1:7070"]),
        word(),
        opt(word()),
        opt(one_of(&["eu-central-1", "us-east-1"])),
        word(),
        opt(word()),
        opt(any::<bool>()),
    )
        .prop_map(
            |(endpoint, bucket, prefix, region, credentials, ca, virtual_hosted_style)| {
                EtcdBackupS3 {
                    endpoint,
                    bucket,
                    prefix,
                    region,
                    credentials_secret: EtcdBackupSecretReference { name: credentials },
                    ca_secret: ca.map(|name| EtcdBackupSecretReference { name }),
                    virtual_hosted_style,
                }
            },
        );
    (
        opt(one_of(&["0 */12 * * *", "30 2 * * 1-5"])),
        opt(1..100i32),
        s3,
        opt(
            (word(), opt(word())).prop_map(|(name, key)| EtcdBackupEncryption {
                key_secret: EtcdBackupKeyReference { name, key },
            }),
        ),
    )
        .prop_map(|(schedule, retention, s3, encryption)| EtcdBackup {
            schedule,
            retention,
            s3,
            encryption,
        })
        .boxed()
}

// --- v1beta1 ---------------------------------------------------------------------------------

fn infrastructure_ref1() -> impl Strategy<Value = ObjectReference> {
    (
        opt(one_of(&[
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "infrastructure.cluster.x-k8s.io/v1beta2",
            "infrastructure.cluster.x-k8s.io/v1alpha4",
            "v1",
        ])),
        opt(one_of(INFRASTRUCTURE_KINDS)),
        opt(word()),
        opt(word()),
        opt("[0-9a-f]{8}"),
        opt("[0-9]{1,5}"),
        opt(Just("spec".to_owned())),
    )
        .prop_map(
            |(api_version, kind, name, namespace, uid, resource_version, field_path)| {
                ObjectReference {
                    api_version,
                    kind,
                    name,
                    namespace,
                    uid,
                    resource_version,
                    field_path,
                }
            },
        )
        .boxed()
}

fn rollout1() -> impl Strategy<
    Value = (
        Option<v1::RolloutBefore>,
        Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
        Option<v1::RolloutStrategy>,
    ),
> {
    let before = opt(7..100i32).prop_map(|days| v1::RolloutBefore {
        certificates_expiry_days: days,
    });
    let strategy = (
        opt(Just(v1::RolloutStrategyType::RollingUpdate)),
        opt(opt(int_or_string()).prop_map(|max_surge| v1::RollingUpdate { max_surge })),
    )
        .prop_map(|(type_, rolling_update)| v1::RolloutStrategy {
            type_,
            rolling_update,
        });
    (opt(before), opt(time()), opt(strategy)).boxed()
}

fn remediation1() -> impl Strategy<Value = v1::RemediationStrategy> {
    (opt(0..5i32), opt(go_duration()), opt(go_duration()))
        .prop_map(
            |(max_retry, retry_period, min_healthy_period)| v1::RemediationStrategy {
                max_retry,
                retry_period,
                min_healthy_period,
            },
        )
        .boxed()
}

fn status1() -> impl Strategy<Value = v1::KubeadmControlPlaneStatus> {
    let remediation = (word(), time(), 0..5i32).prop_map(|(machine, timestamp, retry_count)| {
        v1::LastRemediationStatus {
            machine,
            timestamp,
            retry_count,
        }
    });
    let current = (few(condition()), opt(0..5i32), opt(0..5i32), opt(0..5i32)).prop_map(
        |(conditions, ready, available, up_to_date)| v1::KubeadmControlPlaneV1Beta2Status {
            conditions,
            ready_replicas: ready,
            available_replicas: available,
            up_to_date_replicas: up_to_date,
        },
    );
    let counters = (
        0..5i32,
        0..5i32,
        0..5i32,
        0..5i32,
        any::<bool>(),
        any::<bool>(),
    );
    let rest = (
        opt(word()),
        opt(version()),
        opt(word()),
        opt(text()),
        opt(1..10i64),
        few(v1beta1_condition()),
        opt(remediation),
        few(status_version()),
        opt(current),
    );
    (counters, rest)
        .prop_map(
            |(
                (replicas, updated, ready_replicas, unavailable, initialized, ready),
                (
                    selector,
                    version,
                    reason,
                    message,
                    generation,
                    conditions,
                    last,
                    versions,
                    current,
                ),
            )| v1::KubeadmControlPlaneStatus {
                selector,
                replicas,
                version,
                updated_replicas: updated,
                ready_replicas,
                unavailable_replicas: unavailable,
                initialized,
                ready,
                failure_reason: reason,
                failure_message: message,
                observed_generation: generation,
                conditions,
                last_remediation: last,
                versions,
                v1beta2: current,
            },
        )
        .boxed()
}

pub(crate) fn kubeadm_control_plane1() -> impl Strategy<Value = v1::KubeadmControlPlane> {
    let machine_template = (
        opt(template_meta()),
        infrastructure_ref1(),
        few(readiness_gate()),
        opt(go_duration()),
        opt(go_duration()),
        opt(go_duration()),
        few(machine_taint()),
    )
        .prop_map(
            |(metadata, infrastructure_ref, readiness_gates, drain, detach, deletion, taints)| {
                v1::KubeadmControlPlaneMachineTemplate {
                    metadata,
                    infrastructure_ref,
                    readiness_gates,
                    node_drain_timeout: drain,
                    node_volume_detach_timeout: detach,
                    node_deletion_timeout: deletion,
                    taints,
                }
            },
        );
    let spec = (
        opt(1..6i32),
        version(),
        machine_template,
        spec1(),
        rollout1(),
        opt(remediation1()),
        opt(naming().prop_map(|template| v1::MachineNamingStrategy { template })),
        opt(etcd_backup()),
    )
        .prop_map(
            |(
                replicas,
                version,
                machine_template,
                config,
                rollout,
                remediation,
                naming,
                backup,
            )| {
                v1::KubeadmControlPlaneSpec {
                    replicas,
                    version,
                    machine_template,
                    kubeadm_config_spec: config,
                    rollout_before: rollout.0,
                    rollout_after: rollout.1,
                    rollout_strategy: rollout.2,
                    remediation_strategy: remediation,
                    machine_naming_strategy: naming,
                    etcd_backup: backup,
                }
            },
        );
    (object_meta(), spec, opt(status1()))
        .prop_map(|(metadata, spec, status)| v1::KubeadmControlPlane {
            metadata,
            spec,
            status,
        })
        .boxed()
}

pub(crate) fn kubeadm_control_plane_template1()
-> impl Strategy<Value = v1::KubeadmControlPlaneTemplate> {
    let machine_template = (
        opt(template_meta()),
        opt(go_duration()),
        opt(go_duration()),
        opt(go_duration()),
        few(machine_taint()),
    )
        .prop_map(|(metadata, drain, detach, deletion, taints)| {
            v1::KubeadmControlPlaneTemplateMachineTemplate {
                metadata,
                node_drain_timeout: drain,
                node_volume_detach_timeout: detach,
                node_deletion_timeout: deletion,
                taints,
            }
        });
    let spec = (
        opt(machine_template),
        spec1(),
        rollout1(),
        opt(remediation1()),
        opt(naming().prop_map(|template| v1::MachineNamingStrategy { template })),
    )
        .prop_map(|(machine_template, config, rollout, remediation, naming)| {
            v1::KubeadmControlPlaneTemplateResourceSpec {
                machine_template,
                kubeadm_config_spec: config,
                rollout_before: rollout.0,
                rollout_after: rollout.1,
                rollout_strategy: rollout.2,
                remediation_strategy: remediation,
                machine_naming_strategy: naming,
            }
        });
    (object_meta(), opt(template_meta()), spec)
        .prop_map(
            |(metadata, template_metadata, spec)| v1::KubeadmControlPlaneTemplate {
                metadata,
                spec: v1::KubeadmControlPlaneTemplateSpec {
                    template: v1::KubeadmControlPlaneTemplateResource {
                        metadata: template_metadata,
                        spec,
                    },
                },
            },
        )
        .boxed()
}

// --- v1beta2 ---------------------------------------------------------------------------------

fn infrastructure_ref2() -> impl Strategy<Value = ContractVersionedObjectReference> {
    prop_oneof![
        1 => Just(ContractVersionedObjectReference::default()),
        4 => (one_of(INFRASTRUCTURE_KINDS), word(), one_of(&["infrastructure.cluster.x-k8s.io", "example.com"]))
            .prop_map(|(kind, name, api_group)| ContractVersionedObjectReference {
                kind,
                name,
                api_group,
            }),
    ]
    .boxed()
}

fn deletion2() -> impl Strategy<Value = v2::KubeadmControlPlaneMachineTemplateDeletionSpec> {
    (opt(seconds()), opt(seconds()), opt(seconds()))
        .prop_map(
            |(drain, detach, deletion)| v2::KubeadmControlPlaneMachineTemplateDeletionSpec {
                node_drain_timeout_seconds: drain,
                node_volume_detach_timeout_seconds: detach,
                node_deletion_timeout_seconds: deletion,
            },
        )
        .boxed()
}

fn rollout2() -> impl Strategy<Value = v2::KubeadmControlPlaneRolloutSpec> {
    let before = opt(7..100i32).prop_map(|days| v2::KubeadmControlPlaneRolloutBeforeSpec {
        certificates_expiry_days: days,
    });
    let strategy = opt(opt(int_or_string())
        .prop_map(|max_surge| v2::KubeadmControlPlaneRolloutStrategyRollingUpdate { max_surge }))
    .prop_map(|rolling_update| v2::KubeadmControlPlaneRolloutStrategy {
        type_: v2::KubeadmControlPlaneRolloutStrategyType::RollingUpdate,
        rolling_update,
    });
    (opt(before), opt(time()), opt(strategy))
        .prop_map(
            |(before, after, strategy)| v2::KubeadmControlPlaneRolloutSpec {
                before,
                after,
                strategy,
            },
        )
        .boxed()
}

fn remediation2() -> impl Strategy<Value = v2::KubeadmControlPlaneRemediationSpec> {
    (opt(0..5i32), opt(seconds()), opt(seconds()))
        .prop_map(
            |(max_retry, retry, healthy)| v2::KubeadmControlPlaneRemediationSpec {
                max_retry,
                retry_period_seconds: retry,
                min_healthy_period_seconds: healthy,
            },
        )
        .boxed()
}

fn status2() -> impl Strategy<Value = v2::KubeadmControlPlaneStatus> {
    let remediation = (word(), time(), 0..5i32).prop_map(|(machine, time, retry_count)| {
        v2::LastRemediationStatus {
            machine,
            time,
            retry_count,
        }
    });
    let deprecated = opt(opt((
        few(v1beta1_condition()),
        opt(word()),
        opt(text()),
        0..5i32,
        0..5i32,
        0..5i32,
    )
        .prop_map(
            |(conditions, reason, message, updated, ready, unavailable)| {
                v2::KubeadmControlPlaneV1Beta1DeprecatedStatus {
                    conditions,
                    failure_reason: reason,
                    failure_message: message,
                    updated_replicas: updated,
                    ready_replicas: ready,
                    unavailable_replicas: unavailable,
                }
            },
        ))
    .prop_map(|v1beta1| v2::KubeadmControlPlaneDeprecatedStatus { v1beta1 }));
    let etcd = opt((
        opt((
            time(),
            few(word()),
            opt(0..1_000_000i64),
            opt(0..1_000_000i64),
        )
            .prop_map(
                |(time, members, before, after)| v2::EtcdDefragmentationStatus {
                    time,
                    members,
                    db_size_before: before,
                    db_size_after: after,
                },
            )),
        opt((
            time(),
            word(),
            opt(0..1_000_000i64),
            opt(1..1000i64),
            opt(word()),
        )
            .prop_map(
                |(time, location, size, revision, member)| v2::EtcdSnapshotStatus {
                    time,
                    location,
                    size,
                    revision,
                    member,
                },
            )),
    )
        .prop_map(
            |(last_defragmentation, last_snapshot)| v2::KubeadmControlPlaneEtcdStatus {
                last_defragmentation,
                last_snapshot,
            },
        ));
    let first = (
        few(condition()),
        opt(opt(any::<bool>()).prop_map(|initialized| {
            v2::KubeadmControlPlaneInitializationStatus {
                control_plane_initialized: initialized,
            }
        })),
        opt(word()),
        opt(0..5i32),
        opt(0..5i32),
        opt(0..5i32),
    );
    let second = (
        opt(0..5i32),
        few(status_version()),
        opt(version()),
        opt(1..10i64),
        opt(remediation),
        deprecated,
        etcd,
    );
    (first, second)
        .prop_map(
            |(
                (conditions, initialization, selector, replicas, ready, available),
                (up_to_date, versions, version, generation, last, deprecated, etcd),
            )| v2::KubeadmControlPlaneStatus {
                conditions,
                initialization,
                selector,
                replicas,
                ready_replicas: ready,
                available_replicas: available,
                up_to_date_replicas: up_to_date,
                versions,
                version,
                observed_generation: generation,
                last_remediation: last,
                etcd,
                deprecated,
            },
        )
        .boxed()
}

pub(crate) fn kubeadm_control_plane2() -> impl Strategy<Value = v2::KubeadmControlPlane> {
    let machine_template = (
        opt(template_meta()),
        infrastructure_ref2(),
        few(readiness_gate()),
        opt(deletion2()),
        few(machine_taint()),
    )
        .prop_map(
            |(metadata, infrastructure_ref, readiness_gates, deletion, taints)| {
                v2::KubeadmControlPlaneMachineTemplate {
                    metadata,
                    spec: v2::KubeadmControlPlaneMachineTemplateSpec {
                        infrastructure_ref,
                        readiness_gates,
                        deletion,
                        taints,
                    },
                }
            },
        );
    let spec = (
        opt(1..6i32),
        version(),
        machine_template,
        opt(spec2()),
        opt(rollout2()),
        opt(remediation2()),
        opt(naming().prop_map(|template| v2::MachineNamingSpec { template })),
        opt(etcd_backup()),
    )
        .prop_map(
            |(
                replicas,
                version,
                machine_template,
                config,
                rollout,
                remediation,
                naming,
                backup,
            )| {
                v2::KubeadmControlPlaneSpec {
                    replicas,
                    version,
                    machine_template,
                    kubeadm_config_spec: config,
                    rollout,
                    remediation,
                    machine_naming: naming,
                    etcd_backup: backup,
                }
            },
        );
    (object_meta(), spec, opt(status2()))
        .prop_map(|(metadata, spec, status)| v2::KubeadmControlPlane {
            metadata,
            spec,
            status,
        })
        .boxed()
}

pub(crate) fn kubeadm_control_plane_template2()
-> impl Strategy<Value = v2::KubeadmControlPlaneTemplate> {
    let machine_template = (
        opt(template_meta()),
        opt(
            (opt(deletion2()), few(machine_taint())).prop_map(|(deletion, taints)| {
                v2::KubeadmControlPlaneTemplateMachineTemplateSpec { deletion, taints }
            }),
        ),
    )
        .prop_map(
            |(metadata, spec)| v2::KubeadmControlPlaneTemplateMachineTemplate { metadata, spec },
        );
    let spec = (
        opt(machine_template),
        opt(spec2()),
        opt(rollout2()),
        opt(remediation2()),
        opt(naming().prop_map(|template| v2::MachineNamingSpec { template })),
    )
        .prop_map(|(machine_template, config, rollout, remediation, naming)| {
            v2::KubeadmControlPlaneTemplateResourceSpec {
                machine_template,
                kubeadm_config_spec: config,
                rollout,
                remediation,
                machine_naming: naming,
            }
        });
    (object_meta(), opt(template_meta()), opt(spec))
        .prop_map(
            |(metadata, template_metadata, spec)| v2::KubeadmControlPlaneTemplate {
                metadata,
                spec: v2::KubeadmControlPlaneTemplateSpec {
                    template: v2::KubeadmControlPlaneTemplateResource {
                        metadata: template_metadata,
                        spec,
                    },
                },
            },
        )
        .boxed()
}
