//! The JSON entry point: dispatch, errors, fixtures and partial objects.

use serde_json::{Value, json};

use super::strategies::contract_versions;
use super::{
    CONVERSION_DATA_ANNOTATION, ConversionError, V1BETA1_DATA_ANNOTATION, convert_object,
    convert_object_with,
};

const KUBEADM_CONFIG: &str = include_str!("../../tests/fixtures/kubeadmconfig-v1beta2.yaml");
const KUBEADM_CONTROL_PLANE: &str =
    include_str!("../../tests/fixtures/kubeadmcontrolplane-v1beta2.yaml");

const BOOTSTRAP_V1BETA1: &str = "bootstrap.cluster.x-k8s.io/v1beta1";
const BOOTSTRAP_V1BETA2: &str = "bootstrap.cluster.x-k8s.io/v1beta2";
const CONTROLPLANE_V1BETA1: &str = "controlplane.cluster.x-k8s.io/v1beta1";
const CONTROLPLANE_V1BETA2: &str = "controlplane.cluster.x-k8s.io/v1beta2";

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).unwrap()
}

#[test]
fn fixtures_convert_to_v1beta1_and_back() {
    let config = yaml(KUBEADM_CONFIG);
    let spoke = convert_object(config.clone(), BOOTSTRAP_V1BETA1).unwrap();
    assert_eq!(spoke["apiVersion"], BOOTSTRAP_V1BETA1);
    assert_eq!(spoke["kind"], "KubeadmConfig");
    assert_eq!(convert_object(spoke, BOOTSTRAP_V1BETA2).unwrap(), config);

    let control_plane = yaml(KUBEADM_CONTROL_PLANE);
    let spoke = convert_object_with(
        control_plane.clone(),
        CONTROLPLANE_V1BETA1,
        &contract_versions,
    )
    .unwrap();
    assert_eq!(
        spoke["spec"]["machineTemplate"]["infrastructureRef"]["apiVersion"],
        "infrastructure.cluster.x-k8s.io/v1beta2"
    );
    assert_eq!(spoke["spec"]["machineTemplate"]["nodeDrainTimeout"], "5m0s");
    assert_eq!(spoke["spec"]["remediationStrategy"]["retryPeriod"], "10m0s");
    let back = convert_object_with(spoke, CONTROLPLANE_V1BETA2, &contract_versions).unwrap();
    assert_eq!(back, control_plane);
}

#[test]
fn fixture_args_read_as_v1beta1_maps() {
    let spoke = convert_object(yaml(KUBEADM_CONFIG), BOOTSTRAP_V1BETA1).unwrap();
    let registration = &spoke["spec"]["joinConfiguration"]["nodeRegistration"];
    assert_eq!(
        registration["kubeletExtraArgs"],
        json!({"cloud-provider": "external"})
    );
    // The discovery timeout has no v1beta1 field: it travels in the annotation.
    let data: Value = serde_json::from_str(
        spoke["metadata"]["annotations"][CONVERSION_DATA_ANNOTATION]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        data["spec"]["joinConfiguration"]["timeouts"],
        json!({"discoverySeconds": 300})
    );
}

#[test]
fn the_same_version_is_returned_unchanged() {
    // Not even parsed: the API server asks for no-op conversions too.
    let object =
        json!({"apiVersion": BOOTSTRAP_V1BETA1, "kind": "KubeadmConfig", "spec": {"files": "odd"}});
    assert_eq!(
        convert_object(object.clone(), BOOTSTRAP_V1BETA1).unwrap(),
        object
    );
}

#[test]
fn unknown_kinds_versions_and_groups_are_named() {
    let object = |api_version: &str, kind: &str| json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}, "spec": {}});
    assert_eq!(
        convert_object(
            object(BOOTSTRAP_V1BETA1, "KubeadmControlPlane"),
            BOOTSTRAP_V1BETA2
        ),
        Err(ConversionError::UnknownKind {
            group: "bootstrap.cluster.x-k8s.io".into(),
            kind: "KubeadmControlPlane".into(),
        })
    );
    assert_eq!(
        convert_object(
            object("bootstrap.cluster.x-k8s.io/v1alpha4", "KubeadmConfig"),
            BOOTSTRAP_V1BETA2
        ),
        Err(ConversionError::UnknownVersion {
            kind: "KubeadmConfig".into(),
            version: "v1alpha4".into(),
        })
    );
    assert_eq!(
        convert_object(
            object(BOOTSTRAP_V1BETA2, "KubeadmConfig"),
            "bootstrap.cluster.x-k8s.io/v1beta3"
        ),
        Err(ConversionError::UnknownVersion {
            kind: "KubeadmConfig".into(),
            version: "v1beta3".into(),
        })
    );
    assert_eq!(
        convert_object(
            object(BOOTSTRAP_V1BETA1, "KubeadmConfig"),
            CONTROLPLANE_V1BETA2
        ),
        Err(ConversionError::GroupMismatch {
            kind: "KubeadmConfig".into(),
            from: BOOTSTRAP_V1BETA1.into(),
            to: CONTROLPLANE_V1BETA2.into(),
        })
    );
    assert_eq!(
        convert_object(json!({"kind": "KubeadmConfig"}), BOOTSTRAP_V1BETA2),
        Err(ConversionError::MissingTypeField {
            field: "apiVersion"
        })
    );
    assert_eq!(
        convert_object(object("v1", "KubeadmConfig"), BOOTSTRAP_V1BETA2),
        Err(ConversionError::InvalidApiVersion {
            api_version: "v1".into()
        })
    );
}

#[test]
fn a_malformed_object_names_the_field() {
    let object = json!({
        "apiVersion": CONTROLPLANE_V1BETA1,
        "kind": "KubeadmControlPlane",
        "metadata": {"name": "cp"},
        "spec": {"replicas": "three", "version": "v1.33.0", "kubeadmConfigSpec": {}, "machineTemplate": {"infrastructureRef": {}}},
    });
    let error = convert_object(object, CONTROLPLANE_V1BETA2).unwrap_err();
    let ConversionError::InvalidObject { kind, path, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(kind, "KubeadmControlPlane");
    assert_eq!(path, "spec.replicas");
}

#[test]
fn partial_objects_convert_without_gaining_a_spec() {
    // What the API server sends to convert managed fields: metadata and status only, nulls for leaves.
    let object = json!({
        "apiVersion": CONTROLPLANE_V1BETA2,
        "kind": "KubeadmControlPlane",
        "metadata": {"name": "cp", "annotations": {CONVERSION_DATA_ANNOTATION: ""}},
        "status": {"replicas": 3, "selector": null},
    });
    let spoke = convert_object(object, CONTROLPLANE_V1BETA1).unwrap();
    assert_eq!(spoke.get("spec"), None);
    assert_eq!(spoke["status"]["replicas"], 3);
    let hub = convert_object(spoke, CONTROLPLANE_V1BETA2).unwrap();
    assert_eq!(hub.get("spec"), None);
    assert_eq!(hub["status"]["replicas"], 3);

    let config = json!({
        "apiVersion": BOOTSTRAP_V1BETA1,
        "kind": "KubeadmConfig",
        "metadata": {"name": "worker"},
        "status": {"ready": true},
    });
    let hub = convert_object(config, BOOTSTRAP_V1BETA2).unwrap();
    assert_eq!(hub.get("spec"), None);
    assert_eq!(
        hub["status"],
        json!({"initialization": {"dataSecretCreated": true}})
    );
}

#[test]
fn annotations_other_than_ours_pass_through() {
    let mut config = yaml(KUBEADM_CONFIG);
    config["metadata"]["annotations"] = json!({"example.com/owner": "team-a"});
    let spoke = convert_object(config.clone(), BOOTSTRAP_V1BETA1).unwrap();
    assert_eq!(
        spoke["metadata"]["annotations"]["example.com/owner"],
        "team-a"
    );
    assert!(
        spoke["metadata"]["annotations"]
            .get(V1BETA1_DATA_ANNOTATION)
            .is_none()
    );
    assert_eq!(convert_object(spoke, BOOTSTRAP_V1BETA2).unwrap(), config);
}

/// Cluster API v1.15 (#14075) writes the conversion-data annotation with only the fields its conversion
/// reads back: init/join timeouts, the `*bool` fields whose `false` v1beta1 cannot tell from unset (files
/// by path, extra volumes by host path), and the initialization status. Lists may hold only some entries.
#[test]
fn the_minimal_annotation_of_cluster_api_v1_15_restores_what_it_holds() {
    let minimal = json!({
        "apiVersion": BOOTSTRAP_V1BETA2, "kind": "KubeadmConfig",
        "spec": {
            "files": [{"path": "/b", "append": false}],
            "clusterConfiguration": {"apiServer": {"extraVolumes": [{"hostPath": "/var/log/audit", "readOnly": false}]}},
            "joinConfiguration": {
                "discovery": {"bootstrapToken": {"unsafeSkipCAVerification": false}},
                "timeouts": {"kubeletHealthCheckSeconds": 30},
            },
        },
        "status": {"initialization": {"dataSecretCreated": true}},
    });
    let spoke = json!({
        "apiVersion": BOOTSTRAP_V1BETA1, "kind": "KubeadmConfig",
        "metadata": {"name": "w", "namespace": "default", "annotations": {CONVERSION_DATA_ANNOTATION: minimal.to_string()}},
        "spec": {
            "files": [{"path": "/a", "content": "a"}, {"path": "/b", "content": "b"}],
            "clusterConfiguration": {"apiServer": {"extraVolumes": [
                {"name": "audit", "hostPath": "/var/log/audit", "mountPath": "/var/log/audit"},
            ]}},
            "joinConfiguration": {"discovery": {"bootstrapToken": {"token": "abcdef.0123456789abcdef", "apiServerEndpoint": "10.0.0.1:6443"}}},
        },
        "status": {"ready": true},
    });
    let hub = convert_object(spoke, BOOTSTRAP_V1BETA2).unwrap();
    assert_eq!(
        hub["spec"],
        json!({
            "files": [{"path": "/a", "content": "a"}, {"path": "/b", "content": "b", "append": false}],
            "clusterConfiguration": {"apiServer": {"extraVolumes": [
                {"name": "audit", "hostPath": "/var/log/audit", "mountPath": "/var/log/audit", "readOnly": false},
            ]}},
            "joinConfiguration": {
                "discovery": {"bootstrapToken": {"token": "abcdef.0123456789abcdef", "apiServerEndpoint": "10.0.0.1:6443", "unsafeSkipCAVerification": false}},
                "timeouts": {"kubeletHealthCheckSeconds": 30},
            },
        })
    );
    assert_eq!(
        hub["status"],
        json!({"initialization": {"dataSecretCreated": true}})
    );
    assert!(hub["metadata"].get("annotations").is_none(), "{hub}");
}

/// The same for a KubeadmControlPlane: the retry period, a timeout v1beta1 has no field for and the
/// initialization status come back; everything else is what the v1beta1 object shows.
#[test]
fn the_minimal_annotation_of_a_control_plane_restores_what_it_holds() {
    let minimal = json!({
        "apiVersion": CONTROLPLANE_V1BETA2, "kind": "KubeadmControlPlane",
        "spec": {
            "remediation": {"retryPeriodSeconds": 0},
            "kubeadmConfigSpec": {
                "files": [{"path": "/etc/a", "append": false}],
                "initConfiguration": {"timeouts": {"kubeletHealthCheckSeconds": 120}},
            },
        },
        "status": {"initialization": {"controlPlaneInitialized": true}},
    });
    let spoke = json!({
        "apiVersion": CONTROLPLANE_V1BETA1, "kind": "KubeadmControlPlane",
        "metadata": {"name": "cp", "namespace": "default", "annotations": {CONVERSION_DATA_ANNOTATION: minimal.to_string()}},
        "spec": {
            "replicas": 3,
            "version": "v1.33.1",
            "machineTemplate": {"infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "OpenStackMachineTemplate", "name": "cp-genc02"}},
            "kubeadmConfigSpec": {"files": [{"path": "/etc/a", "content": "a"}]},
            "remediationStrategy": {"maxRetry": 3, "retryPeriod": "0s"},
        },
        "status": {"initialized": true, "replicas": 3},
    });
    let hub = convert_object_with(spoke, CONTROLPLANE_V1BETA2, &contract_versions).unwrap();
    assert_eq!(
        hub["spec"],
        json!({
            "replicas": 3,
            "version": "v1.33.1",
            "machineTemplate": {"spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "OpenStackMachineTemplate", "name": "cp-genc02"}}},
            "kubeadmConfigSpec": {
                "files": [{"path": "/etc/a", "content": "a", "append": false}],
                "initConfiguration": {"timeouts": {"kubeletHealthCheckSeconds": 120}},
            },
            "remediation": {"maxRetry": 3, "retryPeriodSeconds": 0},
        })
    );
    assert_eq!(
        hub["status"]["initialization"],
        json!({"controlPlaneInitialized": true})
    );
}

/// A whole annotation (Cluster API up to v1.14) beside a v1beta1 object whose `false` fields Go left out:
/// the annotation tells them from unset.
#[test]
fn a_false_cluster_api_leaves_out_comes_back_from_the_annotation() {
    let hub = json!({
        "apiVersion": BOOTSTRAP_V1BETA2, "kind": "KubeadmConfig",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {
            "files": [{"path": "/a", "content": "a", "append": false}, {"path": "/b", "content": "b", "append": true}],
            "ignition": {"containerLinuxConfig": {"strict": false}},
            "format": "ignition",
        },
    });
    let mut spoke = convert_object(hub.clone(), BOOTSTRAP_V1BETA1).unwrap();
    // As Cluster API serves it: no `false`, and the whole hub in the annotation.
    spoke["spec"]["files"][0]
        .as_object_mut()
        .unwrap()
        .remove("append");
    spoke["spec"]["ignition"]["containerLinuxConfig"]
        .as_object_mut()
        .unwrap()
        .remove("strict");
    let mut whole = hub.clone();
    whole.as_object_mut().unwrap().remove("metadata");
    spoke["metadata"]["annotations"] = json!({CONVERSION_DATA_ANNOTATION: whole.to_string()});
    assert_eq!(convert_object(spoke, BOOTSTRAP_V1BETA2).unwrap(), hub);
}
