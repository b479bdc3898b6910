//! The desired state of a control plane, computed from its KubeadmControlPlane: what a new Machine, its
//! KubeadmConfig and its infrastructure machine must look like, and the rollout settings.

use kubeadm_api::meta::{CONTROL_PLANE_NAME_LABEL, ETCD_UNSAFE_NO_FSYNC_ANNOTATION};
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kubeadm_api::bootstrap::v1beta2::{InitConfiguration, JoinConfiguration, KubeadmConfigSpec};
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::meta::{CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, MACHINE_GENERATION_LABEL};
use kubeadm_api::version::KubeVersion;
use serde::Serialize;

use crate::generation::machine_generation;
use crate::machines::ClonedFrom;

/// kubeadm's gate that makes the kubelet of a control-plane node talk to its local API server; on by default
/// for the versions that have it, as the Go provider does.
const KUBELET_LOCAL_MODE_GATE: &str = "ControlPlaneKubeletLocalMode";
const KUBELET_LOCAL_MODE_SINCE: KubeVersion = KubeVersion::new(1, 31, 0);
const KUBELET_LOCAL_MODE_DROPPED: KubeVersion = KubeVersion::new(1, 36, 0);

/// Everything the decisions compare machines against.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredState {
    pub replicas: i32,
    pub version: String,
    /// The infrastructure template new machines are cloned from.
    pub infrastructure: ClonedFrom,
    /// KubeadmConfig spec of the first machine (`kubeadm init`).
    pub init: KubeadmConfigSpec,
    /// KubeadmConfig spec of every later machine (`kubeadm join --control-plane`).
    pub join: KubeadmConfigSpec,
    /// The machine generation new machines are labelled with.
    pub generation: String,
    /// RollingUpdate surge: 0 (delete first) or 1 (create first).
    pub max_surge: i32,
    pub rollout_after: Option<Timestamp>,
    pub certificates_expiry_days: Option<i32>,
    /// etcd runs outside the control-plane machines.
    pub external_etcd: bool,
}

/// Why a KubeadmControlPlane has no usable desired state.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DesiredError {
    #[error("spec.version: {0:?} is not a Kubernetes version like v1.33.1")]
    Version(String),
    #[error("spec.rollout.strategy.rollingUpdate.maxSurge: must be 0 or 1, got {0}")]
    MaxSurge(String),
    #[error("spec.machineTemplate.spec.infrastructureRef: kind, name and apiGroup must all be set")]
    InfrastructureRef,
}

/// What the machine generation hashes when the template name carries no counter.
#[derive(Serialize)]
struct GenerationInput<'a> {
    version: &'a str,
    infrastructure: (&'a str, &'a str),
    join: &'a KubeadmConfigSpec,
}

impl DesiredState {
    pub fn of(kcp: &KubeadmControlPlane) -> Result<Self, DesiredError> {
        let spec = &kcp.spec;
        let version = KubeVersion::parse(&spec.version)
            .ok_or_else(|| DesiredError::Version(spec.version.clone()))?;
        let reference = &spec.machine_template.spec.infrastructure_ref;
        if reference.kind.is_empty() || reference.name.is_empty() || reference.api_group.is_empty()
        {
            return Err(DesiredError::InfrastructureRef);
        }
        let infrastructure = ClonedFrom {
            name: reference.name.clone(),
            group_kind: format!("{}.{}", reference.kind, reference.api_group),
        };
        let mut base = spec.kubeadm_config_spec.clone().unwrap_or_default();
        default_feature_gates(&mut base, version);
        if kcp
            .annotations()
            .get(ETCD_UNSAFE_NO_FSYNC_ANNOTATION)
            .map(String::as_str)
            == Some("true")
        {
            set_etcd_arg(&mut base, "unsafe-no-fsync", "true");
        }
        let mut init = base.clone();
        init.join_configuration = JoinConfiguration::default();
        let mut join = base;
        join.init_configuration = InitConfiguration::default();
        join.join_configuration
            .control_plane
            .get_or_insert_default();

        let rollout = spec.rollout.as_ref();
        let max_surge = match rollout
            .and_then(|r| r.strategy.as_ref())
            .and_then(|s| s.rolling_update.as_ref())
            .and_then(|r| r.max_surge.as_ref())
        {
            None => 1,
            Some(IntOrString::Int(n @ 0..=1)) => *n,
            Some(IntOrString::String(s)) if s == "0" || s == "1" => s.parse().unwrap_or(1),
            Some(IntOrString::Int(n)) => return Err(DesiredError::MaxSurge(n.to_string())),
            Some(IntOrString::String(s)) => return Err(DesiredError::MaxSurge(format!("{s:?}"))),
        };
        let generation = machine_generation(
            &infrastructure.name,
            &GenerationInput {
                version: &spec.version,
                infrastructure: (&infrastructure.name, &infrastructure.group_kind),
                join: &join,
            },
        );
        let external_etcd = join.cluster_configuration.etcd.external.is_defined();
        Ok(Self {
            replicas: spec.replicas.unwrap_or(1),
            version: spec.version.clone(),
            infrastructure,
            init,
            join,
            generation,
            max_surge,
            rollout_after: rollout.and_then(|r| r.after.as_ref()).map(|t| t.0),
            certificates_expiry_days: rollout
                .and_then(|r| r.before.as_ref())
                .and_then(|b| b.certificates_expiry_days),
            external_etcd,
        })
    }
}

/// The slow-cloud etcd timing earlier versions added to stacked etcd where the user set none: a 250 ms
/// heartbeat and a 2.5 s election timeout. New machines get what the spec says, nothing more, so that a
/// machine made by one provider is up to date for the other (Cluster API's control-plane manager rolls a
/// machine whose configuration has arguments its KubeadmControlPlane lacks); the templates carry the timing.
pub const ETCD_DEFAULT_ARGS: [(&str, &str); 2] =
    [("heartbeat-interval", "250"), ("election-timeout", "2500")];

/// Adds [`ETCD_DEFAULT_ARGS`] to stacked etcd where the user set none. Applied to both sides when machines
/// are compared, so machines made by the earlier versions are not rolled for it.
pub fn etcd_defaults(spec: &mut KubeadmConfigSpec) {
    if spec.cluster_configuration.etcd.external.is_defined() {
        return;
    }
    for (name, value) in ETCD_DEFAULT_ARGS {
        let args = &spec.cluster_configuration.etcd.local.extra_args;
        if !args.iter().any(|a| a.name == name) {
            set_etcd_arg(spec, name, value);
        }
    }
}

fn set_etcd_arg(spec: &mut KubeadmConfigSpec, name: &str, value: &str) {
    let args = &mut spec.cluster_configuration.etcd.local.extra_args;
    args.retain(|a| a.name != name);
    args.push(kubeadm_api::bootstrap::v1beta2::Arg {
        name: name.to_owned(),
        value: value.to_owned(),
    });
}

/// Turns on [`KUBELET_LOCAL_MODE_GATE`] for the versions that have it, unless the user set it.
fn default_feature_gates(spec: &mut KubeadmConfigSpec, version: KubeVersion) {
    if version < KUBELET_LOCAL_MODE_SINCE || version >= KUBELET_LOCAL_MODE_DROPPED {
        return;
    }
    spec.cluster_configuration
        .feature_gates
        .entry(KUBELET_LOCAL_MODE_GATE.to_owned())
        .or_insert(true);
}

/// Labels of every object created for a control-plane machine: the template's labels plus the cluster, the
/// control-plane role and name, and the machine generation.
pub fn machine_labels(
    kcp: &KubeadmControlPlane,
    cluster: &str,
    generation: &str,
) -> BTreeMap<String, String> {
    let mut labels = kcp
        .spec
        .machine_template
        .metadata
        .as_ref()
        .map(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(CLUSTER_NAME_LABEL.to_owned(), cluster.to_owned());
    labels.insert(CONTROL_PLANE_LABEL.to_owned(), String::new());
    labels.insert(
        CONTROL_PLANE_NAME_LABEL.to_owned(),
        label_value(kcp.metadata.name.as_deref().unwrap_or_default()),
    );
    labels.insert(MACHINE_GENERATION_LABEL.to_owned(), generation.to_owned());
    labels
}

/// Annotations of every object created for a control-plane machine: the template's annotations.
pub fn machine_annotations(kcp: &KubeadmControlPlane) -> BTreeMap<String, String> {
    kcp.spec
        .machine_template
        .metadata
        .as_ref()
        .map(|m| m.annotations.clone())
        .unwrap_or_default()
}

/// A label value for `name`: the name itself when it fits the 63-character limit, else a hash of it in the
/// form Cluster API uses (`hash_<base64url(fnv32a)>_z`), so both providers select the same machines.
pub fn label_value(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_owned();
    }
    let mut hash: u32 = 0x811c_9dc5;
    for byte in name.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::URL_SAFE.encode(hash.to_be_bytes());
    format!("hash_{encoded}_z")
}

/// Desired states for the tests of the decisions.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;
    use kubeadm_api::controlplane::v1beta2::{
        KubeadmControlPlaneRolloutSpec, KubeadmControlPlaneRolloutStrategy,
        KubeadmControlPlaneRolloutStrategyRollingUpdate, KubeadmControlPlaneSpec,
    };
    use kubeadm_api::meta::ContractVersionedObjectReference;

    /// `replicas` machines of v1.33.1 cloned from the SimMachineTemplate `template`, with `max_surge`.
    pub(crate) fn desired(replicas: i32, template: &str, max_surge: i32) -> DesiredState {
        let mut kcp = KubeadmControlPlane::new(
            "cp",
            KubeadmControlPlaneSpec {
                replicas: Some(replicas),
                version: "v1.33.1".into(),
                rollout: Some(KubeadmControlPlaneRolloutSpec {
                    strategy: Some(KubeadmControlPlaneRolloutStrategy {
                        rolling_update: Some(KubeadmControlPlaneRolloutStrategyRollingUpdate {
                            max_surge: Some(IntOrString::Int(max_surge)),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        kcp.spec.machine_template.spec.infrastructure_ref = ContractVersionedObjectReference {
            kind: "SimMachineTemplate".into(),
            name: template.into(),
            api_group: "infrastructure.cluster.x-k8s.io".into(),
        };
        DesiredState::of(&kcp).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeadm_api::controlplane::v1beta2::{
        KubeadmControlPlaneRolloutSpec, KubeadmControlPlaneRolloutStrategy,
        KubeadmControlPlaneRolloutStrategyRollingUpdate, KubeadmControlPlaneSpec,
    };
    use kubeadm_api::meta::ContractVersionedObjectReference;

    pub(crate) fn kcp(version: &str, template: &str) -> KubeadmControlPlane {
        let mut kcp = KubeadmControlPlane::new(
            "prod-control-plane",
            KubeadmControlPlaneSpec {
                replicas: Some(3),
                version: version.to_owned(),
                ..Default::default()
            },
        );
        kcp.spec.machine_template.spec.infrastructure_ref = ContractVersionedObjectReference {
            kind: "SimMachineTemplate".into(),
            name: template.into(),
            api_group: "infrastructure.cluster.x-k8s.io".into(),
        };
        kcp
    }

    #[test]
    fn init_and_join_specs_split_the_kubeadm_config() {
        let mut kcp = kcp("v1.33.1", "cp-genc01");
        let mut spec = KubeadmConfigSpec::default();
        spec.init_configuration.skip_phases = vec!["addon/kube-proxy".into()];
        spec.join_configuration.skip_phases = vec!["preflight".into()];
        kcp.spec.kubeadm_config_spec = Some(spec);
        let desired = DesiredState::of(&kcp).unwrap();
        assert_eq!(
            desired.init.init_configuration.skip_phases,
            ["addon/kube-proxy"]
        );
        assert!(!desired.init.join_configuration.is_defined());
        assert!(!desired.join.init_configuration.is_defined());
        assert_eq!(desired.join.join_configuration.skip_phases, ["preflight"]);
        assert!(desired.join.join_configuration.control_plane.is_some());
        assert_eq!(desired.generation, "genc01");
        assert_eq!(desired.max_surge, 1);
        assert_eq!(desired.replicas, 3);
        assert_eq!(
            desired.infrastructure.group_kind,
            "SimMachineTemplate.infrastructure.cluster.x-k8s.io"
        );
    }

    #[test]
    fn kubelet_local_mode_is_on_from_1_31_to_1_35_unless_set() {
        for (version, expected) in [
            ("v1.30.9", None),
            ("v1.31.0", Some(true)),
            ("v1.35.2", Some(true)),
            ("v1.36.0", None),
        ] {
            let desired = DesiredState::of(&kcp(version, "t")).unwrap();
            let gates = &desired.join.cluster_configuration.feature_gates;
            assert_eq!(
                gates.get(KUBELET_LOCAL_MODE_GATE).copied(),
                expected,
                "{version}"
            );
        }
        let mut off = kcp("v1.33.0", "t");
        let mut spec = KubeadmConfigSpec::default();
        spec.cluster_configuration
            .feature_gates
            .insert(KUBELET_LOCAL_MODE_GATE.into(), false);
        off.spec.kubeadm_config_spec = Some(spec);
        let desired = DesiredState::of(&off).unwrap();
        assert!(!desired.init.cluster_configuration.feature_gates[KUBELET_LOCAL_MODE_GATE]);
    }

    #[test]
    fn stacked_etcd_gets_what_the_spec_says_and_unsafe_fsync_on_request() {
        let args = |d: &DesiredState| {
            d.join
                .cluster_configuration
                .etcd
                .local
                .extra_args
                .iter()
                .map(|a| format!("{}={}", a.name, a.value))
                .collect::<Vec<_>>()
        };
        // Nothing the spec does not say: a machine made here is up to date for Cluster API's own manager.
        let desired = DesiredState::of(&kcp("v1.33.1", "t")).unwrap();
        assert!(args(&desired).is_empty(), "{:?}", args(&desired));

        let mut custom = kcp("v1.33.1", "t");
        let mut spec = KubeadmConfigSpec::default();
        spec.cluster_configuration.etcd.local.extra_args =
            vec![kubeadm_api::bootstrap::v1beta2::Arg {
                name: "election-timeout".into(),
                value: "5000".into(),
            }];
        custom.spec.kubeadm_config_spec = Some(spec);
        custom
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(ETCD_UNSAFE_NO_FSYNC_ANNOTATION.into(), "true".into());
        let desired = DesiredState::of(&custom).unwrap();
        assert_eq!(
            args(&desired),
            ["election-timeout=5000", "unsafe-no-fsync=true"]
        );

        let mut external = kcp("v1.33.1", "t");
        let mut spec = KubeadmConfigSpec::default();
        spec.cluster_configuration.etcd.external.endpoints = vec!["https://e:2379".into()];
        external.spec.kubeadm_config_spec = Some(spec);
        assert!(args(&DesiredState::of(&external).unwrap()).is_empty());
    }

    #[test]
    fn bad_specs_name_the_field() {
        let err = DesiredState::of(&kcp("latest", "t")).unwrap_err();
        assert!(err.to_string().starts_with("spec.version:"), "{err}");
        let mut surge = kcp("v1.33.0", "t");
        surge.spec.rollout = Some(KubeadmControlPlaneRolloutSpec {
            strategy: Some(KubeadmControlPlaneRolloutStrategy {
                rolling_update: Some(KubeadmControlPlaneRolloutStrategyRollingUpdate {
                    max_surge: Some(IntOrString::String("50%".into())),
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let err = DesiredState::of(&surge).unwrap_err();
        assert!(err.to_string().contains("maxSurge"), "{err}");
        let mut no_ref = kcp("v1.33.0", "t");
        no_ref
            .spec
            .machine_template
            .spec
            .infrastructure_ref
            .api_group
            .clear();
        assert_eq!(
            DesiredState::of(&no_ref).unwrap_err(),
            DesiredError::InfrastructureRef
        );
    }

    #[test]
    fn labels_carry_cluster_role_name_and_generation() {
        let kcp = kcp("v1.33.0", "cp-genc04");
        let labels = machine_labels(&kcp, "prod", "genc04");
        assert_eq!(labels[CLUSTER_NAME_LABEL], "prod");
        assert_eq!(labels[CONTROL_PLANE_LABEL], "");
        assert_eq!(labels[CONTROL_PLANE_NAME_LABEL], "prod-control-plane");
        assert_eq!(labels[MACHINE_GENERATION_LABEL], "genc04");
    }

    #[test]
    fn long_names_become_hashed_label_values() {
        let long = "x".repeat(64);
        let value = label_value(&long);
        assert!(value.starts_with("hash_") && value.ends_with("_z") && value.len() <= 63);
        assert_eq!(value, label_value(&long));
        assert_eq!(label_value("short"), "short");
    }
}
