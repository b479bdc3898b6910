use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::super::{v1beta1 as v1, v1beta2 as v2};
use super::strategies::{
    kubeadm_config_template1, kubeadm_config_template2, kubeadm_config1, kubeadm_config2,
};
use crate::conversion::strategies::{check_hub_round_trip, check_spoke_round_trip, config};
use crate::conversion::{
    CONVERSION_DATA_ANNOTATION, ConversionError, DurationError, NoContractVersions,
    V1BETA1_DATA_ANNOTATION, from_hub, to_hub,
};

fn spoke(spec: Value) -> v1::KubeadmConfig {
    serde_json::from_value(json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
        "kind": "KubeadmConfig",
        "metadata": {"name": "worker", "namespace": "default"},
        "spec": spec,
    }))
    .unwrap()
}

fn hub(spec: Value) -> v2::KubeadmConfig {
    serde_json::from_value(json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmConfig",
        "metadata": {"name": "worker", "namespace": "default"},
        "spec": spec,
    }))
    .unwrap()
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a String> {
    meta.annotations.as_ref()?.get(key)
}

fn spec_json<T: serde::Serialize>(object: &T) -> Value {
    serde_json::to_value(object).unwrap()["spec"].clone()
}

#[test]
fn go_durations_become_seconds_in_both_timeouts() {
    let config = spoke(json!({
        "clusterConfiguration": {"apiServer": {"timeoutForControlPlane": "10m0s"}},
        "joinConfiguration": {"discovery": {"timeout": "5m0s"}},
    }));
    let converted = to_hub(config.clone()).unwrap();
    let init = &converted.spec.init_configuration.timeouts;
    let join = &converted.spec.join_configuration.timeouts;
    assert_eq!(init.control_plane_component_health_check_seconds, Some(600));
    assert_eq!(join.control_plane_component_health_check_seconds, Some(600));
    assert_eq!(join.tls_bootstrap_seconds, Some(300));
    // Go's own spelling needs nothing kept aside.
    assert_eq!(converted.metadata.annotations, None);
    assert_eq!(from_hub::<v1::KubeadmConfig>(converted).unwrap(), config);
}

#[test]
fn seconds_become_go_durations() {
    let converted: v1::KubeadmConfig = from_hub(hub(json!({
        "initConfiguration": {
            "timeouts": {"controlPlaneComponentHealthCheckSeconds": 600},
            "bootstrapTokens": [{"token": "abcdef.0123456789abcdef", "ttlSeconds": 86400}],
        },
        "joinConfiguration": {"timeouts": {"tlsBootstrapSeconds": 90}},
    })))
    .unwrap();
    assert_eq!(
        spec_json(&converted),
        json!({
            "clusterConfiguration": {"apiServer": {"timeoutForControlPlane": "10m0s"}},
            "initConfiguration": {
                "bootstrapTokens": [{"token": "abcdef.0123456789abcdef", "ttl": "24h0m0s"}],
            },
            "joinConfiguration": {"discovery": {"timeout": "1m30s"}},
        })
    );
}

#[test]
fn other_duration_spellings_survive_in_the_hub() {
    let config = spoke(json!({
        "clusterConfiguration": {"apiServer": {"timeoutForControlPlane": "10m"}},
        "initConfiguration": {
            "bootstrapTokens": [{"token": "abcdef.0123456789abcdef", "ttl": "1500ms"}],
        },
    }));
    let converted = to_hub(config.clone()).unwrap();
    assert_eq!(
        converted.spec.init_configuration.bootstrap_tokens[0].ttl_seconds,
        Some(1)
    );
    let kept: Value =
        serde_json::from_str(annotation(&converted.metadata, V1BETA1_DATA_ANNOTATION).unwrap())
            .unwrap();
    assert_eq!(
        kept,
        json!([
            {
                "path": "/spec/clusterConfiguration/apiServer/timeoutForControlPlane",
                "expect": "10m0s",
                "value": "10m",
            },
            {
                "path": "/spec/initConfiguration/bootstrapTokens",
                "expect": [{"token": "abcdef.0123456789abcdef", "ttl": "1s"}],
                "value": [{"token": "abcdef.0123456789abcdef", "ttl": "1500ms"}],
            },
        ])
    );
    assert_eq!(from_hub::<v1::KubeadmConfig>(converted).unwrap(), config);
}

#[test]
fn a_timeout_changed_in_the_hub_wins_over_the_kept_spelling() {
    let converted = to_hub(spoke(json!({
        "clusterConfiguration": {"apiServer": {"timeoutForControlPlane": "10m"}},
    })))
    .unwrap();
    let mut edited = converted.clone();
    edited
        .spec
        .init_configuration
        .timeouts
        .control_plane_component_health_check_seconds = Some(300);
    let back: v1::KubeadmConfig = from_hub(edited).unwrap();
    let api_server = back.spec.cluster_configuration.unwrap().api_server.unwrap();
    assert_eq!(
        api_server.timeout_for_control_plane.as_deref(),
        Some("5m0s")
    );
}

#[test]
fn a_bad_duration_names_its_field() {
    let error = to_hub(spoke(json!({
        "initConfiguration": {
            "bootstrapTokens": [
                {"token": "abcdef.0123456789abcdef", "ttl": "24h"},
                {"token": "ghijkl.0123456789abcdef", "ttl": "one day"},
            ],
        },
    })))
    .unwrap_err();
    assert_eq!(
        error,
        ConversionError::InvalidDuration {
            path: "spec.initConfiguration.bootstrapTokens[1].ttl".into(),
            value: "one day".into(),
            reason: DurationError::Syntax,
        }
    );
    let template: v1::KubeadmConfigTemplate = serde_json::from_value(json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
        "kind": "KubeadmConfigTemplate",
        "metadata": {"name": "md-0"},
        "spec": {"template": {"spec": {"joinConfiguration": {"discovery": {"timeout": "5"}}}}},
    }))
    .unwrap();
    let message = to_hub(template).unwrap_err().to_string();
    assert!(
        message.starts_with("spec.template.spec.joinConfiguration.discovery.timeout: \"5\""),
        "{message}"
    );
}

#[test]
fn extra_args_map_to_a_sorted_list() {
    let config = spoke(json!({
        "initConfiguration": {"nodeRegistration": {"kubeletExtraArgs": {"v": "2", "cloud-provider": "external"}}},
    }));
    let converted = to_hub(config.clone()).unwrap();
    assert_eq!(
        converted
            .spec
            .init_configuration
            .node_registration
            .kubelet_extra_args,
        vec![
            v2::Arg::new("cloud-provider", "external"),
            v2::Arg::new("v", "2")
        ]
    );
    assert_eq!(converted.metadata.annotations, None);
    assert_eq!(from_hub::<v1::KubeadmConfig>(converted).unwrap(), config);
}

#[test]
fn repeated_and_unsorted_extra_args_survive_in_v1beta1() {
    let original = hub(json!({
        "clusterConfiguration": {"apiServer": {"extraArgs": [
            {"name": "v", "value": "1"},
            {"name": "audit-log-path", "value": "/a"},
            {"name": "v", "value": "4"},
        ]}},
    }));
    let converted: v1::KubeadmConfig = from_hub(original.clone()).unwrap();
    let api_server = converted
        .spec
        .cluster_configuration
        .clone()
        .unwrap()
        .api_server
        .unwrap();
    // The last value of a name wins, as on a command line.
    assert_eq!(
        api_server.extra_args,
        BTreeMap::from([
            ("audit-log-path".to_owned(), "/a".to_owned()),
            ("v".to_owned(), "4".to_owned())
        ])
    );
    let data: Value =
        serde_json::from_str(annotation(&converted.metadata, CONVERSION_DATA_ANNOTATION).unwrap())
            .unwrap();
    assert_eq!(data["spec"], spec_json(&original));
    assert_eq!(data.get("metadata"), None);
    assert_eq!(to_hub(converted.clone()).unwrap(), original);

    // A v1beta1 client that changes the arguments gets its change, sorted.
    let mut edited = converted;
    edited
        .spec
        .cluster_configuration
        .as_mut()
        .unwrap()
        .api_server
        .as_mut()
        .unwrap()
        .extra_args
        .insert("profiling".into(), "false".into());
    let back = to_hub(edited).unwrap();
    let names: Vec<_> = back
        .spec
        .cluster_configuration
        .api_server
        .extra_args
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    assert_eq!(names, ["audit-log-path", "profiling", "v"]);
    assert_eq!(back.metadata.annotations, None);
}

#[test]
fn hub_only_timeouts_survive_in_v1beta1() {
    let original = hub(json!({
        "initConfiguration": {"timeouts": {"kubeletHealthCheckSeconds": 120, "etcdAPICallSeconds": 30}},
        "joinConfiguration": {"timeouts": {"controlPlaneComponentHealthCheckSeconds": 60}},
    }));
    let converted: v1::KubeadmConfig = from_hub(original.clone()).unwrap();
    // Nothing of it has a v1beta1 field: the v1beta1 spec is empty, the annotation has it all.
    assert_eq!(spec_json(&converted), json!({}));
    assert!(annotation(&converted.metadata, CONVERSION_DATA_ANNOTATION).is_some());
    assert_eq!(to_hub(converted).unwrap(), original);
}

#[test]
fn v1beta1_only_fields_survive_in_the_hub_and_edits_there() {
    let config = spoke(json!({
        "clusterConfiguration": {
            "apiVersion": "kubeadm.k8s.io/v1beta3",
            "kubernetesVersion": "v1.30.2",
            "clusterName": "prod",
            "networking": {"podSubnet": "192.168.0.0/16"},
        },
        "useExperimentalRetryJoin": true,
    }));
    let converted = to_hub(config.clone()).unwrap();
    assert!(!converted.spec.cluster_configuration.is_defined());
    assert_eq!(
        from_hub::<v1::KubeadmConfig>(converted.clone()).unwrap(),
        config
    );

    // A v1beta2 client fills the ClusterConfiguration: the v1beta1 fields join it.
    let mut edited = converted;
    edited.spec.cluster_configuration.image_repository = Some("registry.example.com".into());
    let back: v1::KubeadmConfig = from_hub(edited).unwrap();
    assert_eq!(
        spec_json(&back),
        json!({
            "clusterConfiguration": {
                "apiVersion": "kubeadm.k8s.io/v1beta3",
                "kubernetesVersion": "v1.30.2",
                "clusterName": "prod",
                "networking": {"podSubnet": "192.168.0.0/16"},
                "imageRepository": "registry.example.com",
            },
            "useExperimentalRetryJoin": true,
        })
    );
}

#[test]
fn empty_and_absent_objects_are_told_apart() {
    // An explicitly empty v1beta1 object has no v1beta2 form but comes back.
    let config = spoke(json!({"ntp": {}, "joinConfiguration": {"discovery": {}}}));
    let converted = to_hub(config.clone()).unwrap();
    assert!(!converted.spec.ntp.is_defined());
    assert!(annotation(&converted.metadata, V1BETA1_DATA_ANNOTATION).is_some());
    assert_eq!(from_hub::<v1::KubeadmConfig>(converted).unwrap(), config);

    // `taints: []` (no taints) differs from unset (the default taint) in both versions.
    let config = spoke(json!({"joinConfiguration": {"nodeRegistration": {"taints": []}}}));
    let converted = to_hub(config.clone()).unwrap();
    assert_eq!(
        converted.spec.join_configuration.node_registration.taints,
        Some(vec![])
    );
    assert_eq!(converted.metadata.annotations, None);
    assert_eq!(from_hub::<v1::KubeadmConfig>(converted).unwrap(), config);

    // An empty v1beta2 list of environment variables has no v1beta1 form but comes back.
    let original = hub(json!({"clusterConfiguration": {"scheduler": {"extraEnvs": []}}}));
    let converted: v1::KubeadmConfig = from_hub(original.clone()).unwrap();
    assert!(annotation(&converted.metadata, CONVERSION_DATA_ANNOTATION).is_some());
    assert_eq!(to_hub(converted).unwrap(), original);
}

#[test]
fn status_moves_between_ready_initialization_and_deprecated() {
    let config: v1::KubeadmConfig = serde_json::from_value(json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
        "kind": "KubeadmConfig",
        "metadata": {"name": "worker"},
        "spec": {},
        "status": {
            "ready": true,
            "dataSecretName": "worker",
            "failureReason": "Broken",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"}],
            "v1beta2": {"conditions": [{
                "type": "Ready", "status": "True", "reason": "Ready", "message": "",
                "lastTransitionTime": "2025-01-01T00:00:00Z",
            }]},
        },
    }))
    .unwrap();
    let converted = to_hub(config.clone()).unwrap();
    assert_eq!(
        serde_json::to_value(&converted.status).unwrap(),
        json!({
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "Ready", "message": "",
                "lastTransitionTime": "2025-01-01T00:00:00Z",
            }],
            "initialization": {"dataSecretCreated": true},
            "dataSecretName": "worker",
            "deprecated": {"v1beta1": {
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"}],
                "failureReason": "Broken",
            }},
        })
    );
    assert_eq!(converted.metadata.annotations, None);
    assert_eq!(from_hub::<v1::KubeadmConfig>(converted).unwrap(), config);

    // Explicitly "not created" has no v1beta1 form other than ready: false.
    let mut original = hub(json!({}));
    original.status = Some(v2::KubeadmConfigStatus {
        initialization: v2::KubeadmConfigInitializationStatus {
            data_secret_created: Some(false),
        },
        ..Default::default()
    });
    let converted: v1::KubeadmConfig = from_hub(original.clone()).unwrap();
    assert!(!converted.status.as_ref().unwrap().ready);
    assert_eq!(to_hub(converted).unwrap(), original);
}

#[test]
fn template_metadata_is_optional_in_v1beta1_only() {
    let template: v2::KubeadmConfigTemplate = serde_json::from_value(json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmConfigTemplate",
        "metadata": {"name": "md-0"},
        "spec": {"template": {"spec": {"format": "ignition"}}},
    }))
    .unwrap();
    let converted: v1::KubeadmConfigTemplate = from_hub(template.clone()).unwrap();
    assert_eq!(converted.spec.template.metadata, None);
    assert_eq!(
        converted.spec.template.spec.format,
        Some(v1::Format::Ignition)
    );
    assert_eq!(to_hub(converted).unwrap(), template);
}

#[test]
fn data_written_by_the_go_providers_is_restored() {
    // What Cluster API's webhook writes on a v1beta1 object: the whole hub, without metadata.
    let mut config = spoke(json!({"files": [{"path": "/etc/motd", "content": "hi"}]}));
    config.metadata.annotations = Some(BTreeMap::from([(
        CONVERSION_DATA_ANNOTATION.to_owned(),
        json!({
            "kind": "KubeadmConfig",
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
            "spec": {
                "files": [{"path": "/etc/motd", "content": "hi"}],
                "joinConfiguration": {"timeouts": {"discoverySeconds": 42}},
            },
            "status": {"initialization": {"dataSecretCreated": false}},
        })
        .to_string(),
    )]));
    let converted = to_hub(config).unwrap();
    assert_eq!(converted.metadata.annotations, None);
    assert_eq!(
        converted.spec.join_configuration.timeouts.discovery_seconds,
        Some(42)
    );
    // The status was not part of the v1beta1 object, so its v1beta2 form is not restored on its own.
    assert_eq!(converted.status, None);
}

#[test]
fn unreadable_annotations_say_so() {
    let mut config = spoke(json!({}));
    config.metadata.annotations = Some(BTreeMap::from([(
        CONVERSION_DATA_ANNOTATION.to_owned(),
        "{not json".to_owned(),
    )]));
    let error = to_hub(config).unwrap_err();
    assert!(
        matches!(&error, ConversionError::InvalidAnnotation { annotation, .. } if *annotation == CONVERSION_DATA_ANNOTATION),
        "{error}"
    );
    let mut original = hub(json!({}));
    original.metadata.annotations = Some(BTreeMap::from([(
        V1BETA1_DATA_ANNOTATION.to_owned(),
        r#"{"path": "/spec"}"#.to_owned(),
    )]));
    let error = from_hub::<v1::KubeadmConfig>(original).unwrap_err();
    assert!(error.to_string().starts_with(&format!(
        "annotation {V1BETA1_DATA_ANNOTATION}: not a list of edits"
    )));
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn kubeadm_config_v1beta1_round_trips(config in kubeadm_config1()) {
        check_spoke_round_trip(&config, &NoContractVersions)?;
    }

    #[test]
    fn kubeadm_config_v1beta2_round_trips(config in kubeadm_config2()) {
        check_hub_round_trip::<v1::KubeadmConfig>(&config, &NoContractVersions)?;
    }

    #[test]
    fn kubeadm_config_template_v1beta1_round_trips(template in kubeadm_config_template1()) {
        check_spoke_round_trip(&template, &NoContractVersions)?;
    }

    #[test]
    fn kubeadm_config_template_v1beta2_round_trips(template in kubeadm_config_template2()) {
        check_hub_round_trip::<v1::KubeadmConfigTemplate>(&template, &NoContractVersions)?;
    }
}
