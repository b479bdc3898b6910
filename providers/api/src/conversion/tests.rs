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
