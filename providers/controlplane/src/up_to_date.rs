//! Whether a control-plane machine matches the desired state, and if not, why: the reasons a rollout
//! replaces it.

use std::fmt;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kubeadm_api::bootstrap::v1beta2::{
    Discovery, Format, InitConfiguration, JoinConfiguration, JoinControlPlane, KubeadmConfigSpec,
};
use serde_json::Value;

use crate::desired::DesiredState;
use crate::machines::ControlPlaneMachine;

/// Why a machine is outdated.
#[derive(Clone, Debug, PartialEq)]
pub enum Outdated {
    /// Its Kubernetes version differs.
    Version {
        machine: Option<String>,
        desired: String,
    },
    /// Its KubeadmConfig differs; the JSON paths that differ.
    KubeadmConfig(Vec<String>),
    /// It was cloned from another infrastructure template (a generation-counter bump arrives this way).
    InfrastructureTemplate { from: String, to: String },
    /// `spec.rollout.after` has passed and the machine is older.
    RolloutAfter,
    /// Its certificates expire within `spec.rollout.before.certificatesExpiryDays`.
    CertificatesExpiring(Timestamp),
}

impl fmt::Display for Outdated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outdated::Version { machine, desired } => write!(
                f,
                "version {}, {desired} required",
                machine.as_deref().unwrap_or("unset")
            ),
            Outdated::KubeadmConfig(paths) => {
                write!(f, "KubeadmConfig differs at {}", paths.join(", "))
            }
            Outdated::InfrastructureTemplate { from, to } => {
                write!(f, "infrastructure template {from}, {to} required")
            }
            Outdated::RolloutAfter => f.write_str("spec.rollout.after has passed"),
            Outdated::CertificatesExpiring(at) => write!(f, "certificates expire at {at}"),
        }
    }
}

/// Every reason `machine` is outdated at `now`; empty when it is up to date.
pub fn outdated(
    machine: &ControlPlaneMachine,
    desired: &DesiredState,
    now: Timestamp,
) -> Vec<Outdated> {
    let mut reasons = Vec::new();
    if let Some(expiry) = machine.certificates_expiry
        && let Some(days) = desired.certificates_expiry_days
        && now + SignedDuration::from_hours(24 * i64::from(days)) > expiry
    {
        reasons.push(Outdated::CertificatesExpiring(expiry));
    }
    if let Some(after) = desired.rollout_after
        && now > after
        && machine.created < after
    {
        reasons.push(Outdated::RolloutAfter);
    }
    if machine.version.as_deref() != Some(desired.version.as_str()) {
        reasons.push(Outdated::Version {
            machine: machine.version.clone(),
            desired: desired.version.clone(),
        });
    }
    if let Some(current) = &machine.kubeadm_config
        && let Err(paths) = kubeadm_config_matches(current, desired)
    {
        reasons.push(Outdated::KubeadmConfig(paths));
    }
    if let Some(cloned) = &machine.cloned_from
        && *cloned != desired.infrastructure
    {
        reasons.push(Outdated::InfrastructureTemplate {
            from: cloned.name.clone(),
            to: desired.infrastructure.name.clone(),
        });
    }
    reasons
}

/// Compares a machine's KubeadmConfig spec with the desired one, ignoring what legitimately differs between
/// machines of one generation: init versus join, the endpoint and DNS (filled in from the Cluster), the
/// discovery (tokens), and defaults older providers wrote. Returns the differing JSON paths.
pub fn kubeadm_config_matches(
    current: &KubeadmConfigSpec,
    desired: &DesiredState,
) -> Result<(), Vec<String>> {
    let as_join = compare(current, &desired.join, true);
    if as_join.is_empty() {
        return Ok(());
    }
    // The first machine ran `kubeadm init`; it may also match as an init config.
    if is_init(current) && compare(current, &desired.init, false).is_empty() {
        return Ok(());
    }
    Err(as_join)
}

fn is_init(spec: &KubeadmConfigSpec) -> bool {
    spec.join_configuration.control_plane.is_none() && !is_join_without_control_plane(spec)
}

/// A control-plane join written by Cluster API v1.11 or older: its `joinConfiguration` carries the join
/// (node registration, discovery) but no `controlPlane`, and it has no `initConfiguration`. It is a join
/// with kubeadm's defaults for `controlPlane`, not an init config (kubernetes-sigs/cluster-api#14172).
fn is_join_without_control_plane(spec: &KubeadmConfigSpec) -> bool {
    spec.join_configuration.control_plane.is_none()
        && spec.init_configuration == InitConfiguration::default()
        && spec.join_configuration != JoinConfiguration::default()
}

fn compare(current: &KubeadmConfigSpec, desired: &KubeadmConfigSpec, as_join: bool) -> Vec<String> {
    let mut current = current.clone();
    let mut desired = desired.clone();
    if is_join_without_control_plane(&current) {
        current.join_configuration.control_plane = Some(JoinControlPlane::default());
    } else if as_join && is_init(&current) {
        let init = std::mem::take(&mut current.init_configuration);
        let join = &mut current.join_configuration;
        join.timeouts = init.timeouts;
        join.patches = init.patches;
        join.skip_phases = init.skip_phases;
        join.node_registration = init.node_registration;
        join.control_plane = Some(JoinControlPlane {
            local_api_endpoint: init.local_api_endpoint,
        });
        join.ca_cert_path = desired.join_configuration.ca_cert_path.clone();
        current.init_configuration = InitConfiguration::default();
    }
    current.cluster_configuration.control_plane_endpoint =
        desired.cluster_configuration.control_plane_endpoint.clone();
    current.cluster_configuration.dns = desired.cluster_configuration.dns.clone();
    for spec in [&mut current, &mut desired] {
        apply_previous_defaults(spec);
        crate::desired::etcd_defaults(spec);
        spec.join_configuration.discovery = Discovery::default();
        spec.init_configuration
            .timeouts
            .control_plane_component_health_check_seconds = None;
        spec.join_configuration
            .timeouts
            .control_plane_component_health_check_seconds = None;
    }
    let mut paths = Vec::new();
    diff(
        "spec",
        &serde_json::to_value(&current).expect("spec serializes"),
        &serde_json::to_value(&desired).expect("spec serializes"),
        &mut paths,
    );
    paths
}

/// Defaults written by earlier provider versions; applied to both sides so they never cause a rollout.
fn apply_previous_defaults(spec: &mut KubeadmConfigSpec) {
    spec.format.get_or_insert(Format::CloudConfig);
    for registration in [
        &mut spec.init_configuration.node_registration,
        &mut spec.join_configuration.node_registration,
    ] {
        registration
            .image_pull_policy
            .get_or_insert_with(|| "IfNotPresent".to_owned());
    }
}

/// The leaf paths where two JSON values differ (objects are walked; arrays and scalars compared whole).
fn diff(path: &str, current: &Value, desired: &Value, out: &mut Vec<String>) {
    match (current, desired) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let null = Value::Null;
                diff(
                    &format!("{path}.{key}"),
                    a.get(key).unwrap_or(&null),
                    b.get(key).unwrap_or(&null),
                    out,
                );
            }
        }
        (a, b) if a != b => out.push(path.to_owned()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::DesiredState;
    use crate::machines::ClonedFrom;
    use kubeadm_api::bootstrap::v1beta2::{ApiEndpoint, Arg};
    use kubeadm_api::controlplane::v1beta2::{KubeadmControlPlane, KubeadmControlPlaneSpec};
    use kubeadm_api::meta::ContractVersionedObjectReference;

    fn kcp(spec: KubeadmConfigSpec) -> KubeadmControlPlane {
        let mut kcp = KubeadmControlPlane::new(
            "cp",
            KubeadmControlPlaneSpec {
                replicas: Some(3),
                version: "v1.30.4".into(),
                kubeadm_config_spec: Some(spec),
                ..Default::default()
            },
        );
        kcp.spec.machine_template.spec.infrastructure_ref = ContractVersionedObjectReference {
            kind: "SimMachineTemplate".into(),
            name: "cp-genc01".into(),
            api_group: "infrastructure.cluster.x-k8s.io".into(),
        };
        kcp
    }

    fn base() -> KubeadmConfigSpec {
        let mut spec = KubeadmConfigSpec::default();
        spec.cluster_configuration.api_server.extra_args = vec![Arg {
            name: "audit-log-maxage".into(),
            value: "30".into(),
        }];
        spec.init_configuration.node_registration.name =
            Some("{{ ds.meta_data.local_hostname }}".into());
        spec.join_configuration.node_registration.name =
            Some("{{ ds.meta_data.local_hostname }}".into());
        spec.pre_kubeadm_commands = vec!["echo hi".into()];
        spec
    }

    fn machine(desired: &DesiredState, config: KubeadmConfigSpec) -> ControlPlaneMachine {
        ControlPlaneMachine {
            name: "cp-abcde".into(),
            created: "2026-01-01T00:00:00Z".parse().unwrap(),
            version: Some(desired.version.clone()),
            cloned_from: Some(desired.infrastructure.clone()),
            kubeadm_config: Some(config),
            ..Default::default()
        }
    }

    fn now() -> Timestamp {
        "2026-06-01T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn the_init_and_join_machines_of_one_spec_are_up_to_date() {
        let desired = DesiredState::of(&kcp(base())).unwrap();
        for config in [desired.init.clone(), desired.join.clone()] {
            assert_eq!(outdated(&machine(&desired, config), &desired, now()), []);
        }
    }

    #[test]
    fn endpoint_discovery_and_old_defaults_are_ignored() {
        let desired = DesiredState::of(&kcp(base())).unwrap();
        let mut config = desired.join.clone();
        config.cluster_configuration.control_plane_endpoint = Some("10.0.0.1:6443".into());
        config.join_configuration.discovery.bootstrap_token.token =
            Some("abcdef.0123456789abcdef".into());
        config
            .join_configuration
            .discovery
            .bootstrap_token
            .ca_cert_hashes = vec!["sha256:00".into()];
        config.format = Some(Format::CloudConfig);
        config
            .join_configuration
            .node_registration
            .image_pull_policy = Some("IfNotPresent".into());
        assert_eq!(outdated(&machine(&desired, config), &desired, now()), []);
    }

    #[test]
    fn machines_made_with_the_etcd_timing_earlier_versions_added_are_not_rolled() {
        let desired = DesiredState::of(&kcp(base())).unwrap();
        assert!(
            desired
                .join
                .cluster_configuration
                .etcd
                .local
                .extra_args
                .is_empty()
        );
        let arg = |name: &str, value: &str| Arg {
            name: name.into(),
            value: value.into(),
        };
        let mut config = desired.join.clone();
        config.cluster_configuration.etcd.local.extra_args = vec![
            arg("heartbeat-interval", "250"),
            arg("election-timeout", "2500"),
        ];
        assert_eq!(
            outdated(&machine(&desired, config.clone()), &desired, now()),
            []
        );
        // A different value is a real change.
        config.cluster_configuration.etcd.local.extra_args = vec![arg("heartbeat-interval", "100")];
        assert_eq!(
            outdated(&machine(&desired, config), &desired, now()).len(),
            1
        );
    }

    #[test]
    fn a_changed_field_is_named() {
        let desired = DesiredState::of(&kcp(base())).unwrap();
        let mut config = desired.join.clone();
        config.pre_kubeadm_commands.push("echo more".into());
        config.join_configuration.control_plane = Some(JoinControlPlane {
            local_api_endpoint: ApiEndpoint {
                advertise_address: Some("10.0.0.5".into()),
                bind_port: None,
            },
        });
        let reasons = outdated(&machine(&desired, config), &desired, now());
        let [Outdated::KubeadmConfig(paths)] = reasons.as_slice() else {
            panic!("{reasons:?}");
        };
        assert_eq!(
            paths,
            &[
                "spec.joinConfiguration.controlPlane.localAPIEndpoint",
                "spec.preKubeadmCommands"
            ]
        );
    }

    /// Cluster API v1.14.2 (kubernetes-sigs/cluster-api#14172): joins written by Cluster API v1.11 or older
    /// have no `joinConfiguration.controlPlane`; they must not be taken for init configs and rolled.
    #[test]
    fn a_join_written_without_join_configuration_control_plane_is_not_rolled() {
        let desired = DesiredState::of(&kcp(base())).unwrap();
        let mut old_join = desired.join.clone();
        assert_eq!(
            old_join.join_configuration.control_plane,
            Some(JoinControlPlane::default()),
            "the desired join has kubeadm's default controlPlane"
        );
        old_join.join_configuration.control_plane = None;
        assert_ne!(
            old_join.join_configuration,
            JoinConfiguration::default(),
            "the join carries its node registration"
        );
        assert_eq!(
            outdated(&machine(&desired, old_join.clone()), &desired, now()),
            []
        );
        // A real difference in such a config is still found.
        old_join.pre_kubeadm_commands.push("echo more".into());
        assert_eq!(
            outdated(&machine(&desired, old_join), &desired, now()).len(),
            1
        );
        // The init config is still an init config.
        assert_eq!(
            outdated(&machine(&desired, desired.init.clone()), &desired, now()),
            []
        );
    }

    #[test]
    fn an_init_machine_is_compared_as_a_join() {
        let desired = DesiredState::of(&kcp(base())).unwrap();
        let mut changed = base();
        changed.cluster_configuration.api_server.extra_args[0].value = "60".into();
        let newer = DesiredState::of(&kcp(changed)).unwrap();
        let reasons = outdated(&machine(&desired, desired.init.clone()), &newer, now());
        assert!(
            matches!(&reasons[..], [Outdated::KubeadmConfig(p)] if p == &["spec.clusterConfiguration.apiServer.extraArgs"]),
            "{reasons:?}"
        );
    }

    #[test]
    fn version_template_rollout_after_and_certificates() {
        let mut kcp = kcp(base());
        let desired = DesiredState::of(&kcp).unwrap();
        let mut m = machine(&desired, desired.join.clone());

        m.version = Some("v1.29.9".into());
        m.cloned_from = Some(ClonedFrom {
            name: "cp-genc00".into(),
            group_kind: desired.infrastructure.group_kind.clone(),
        });
        let reasons = outdated(&m, &desired, now());
        assert_eq!(reasons.len(), 2, "{reasons:?}");
        assert_eq!(reasons[0].to_string(), "version v1.29.9, v1.30.4 required");
        assert_eq!(
            reasons[1].to_string(),
            "infrastructure template cp-genc00, cp-genc01 required"
        );

        let mut m = machine(&desired, desired.join.clone());
        kcp.spec.rollout = Some(Default::default());
        let rollout = kcp.spec.rollout.as_mut().unwrap();
        rollout.after = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-03-01T00:00:00Z".parse().unwrap(),
        ));
        rollout.before = Some(
            kubeadm_api::controlplane::v1beta2::KubeadmControlPlaneRolloutBeforeSpec {
                certificates_expiry_days: Some(30),
            },
        );
        let desired = DesiredState::of(&kcp).unwrap();
        m.certificates_expiry = Some("2026-06-20T00:00:00Z".parse().unwrap());
        assert_eq!(
            outdated(&m, &desired, now()),
            [
                Outdated::CertificatesExpiring("2026-06-20T00:00:00Z".parse().unwrap()),
                Outdated::RolloutAfter
            ]
        );
        // Created after rollout.after, certificates far from expiry: up to date.
        m.created = "2026-04-01T00:00:00Z".parse().unwrap();
        m.certificates_expiry = Some("2027-06-20T00:00:00Z".parse().unwrap());
        assert_eq!(outdated(&m, &desired, now()), []);
        // rollout.after still in the future.
        m.created = "2026-01-01T00:00:00Z".parse().unwrap();
        assert_eq!(
            outdated(&m, &desired, "2026-02-01T00:00:00Z".parse().unwrap()),
            []
        );
    }

    #[test]
    fn missing_config_or_infrastructure_does_not_force_a_rollout() {
        let desired = DesiredState::of(&kcp(base())).unwrap();
        let mut m = machine(&desired, desired.join.clone());
        m.kubeadm_config = None;
        m.cloned_from = None;
        assert_eq!(outdated(&m, &desired, now()), []);
    }
}
