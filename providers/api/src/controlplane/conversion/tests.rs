use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::super::{v1beta1 as v1, v1beta2 as v2};
use super::strategies::{
    kubeadm_control_plane_template1, kubeadm_control_plane_template2, kubeadm_control_plane1,
    kubeadm_control_plane2,
};
use crate::conversion::strategies::{
    check_hub_round_trip, check_spoke_round_trip, config, contract_versions,
};
use crate::conversion::{
    CONVERSION_DATA_ANNOTATION, ConversionError, NoContractVersions, V1BETA1_DATA_ANNOTATION,
    convert_object, convert_object_with, from_hub, from_hub_with, to_hub,
};

/// A v1beta1 KubeadmControlPlane as the Cluster API quick start writes it.
const QUICK_START: &str = r#"
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata:
  name: capi-quickstart-control-plane
  namespace: default
spec:
  kubeadmConfigSpec:
    clusterConfiguration:
      apiServer:
        certSANs:
        - localhost
        - 127.0.0.1
        - 0.0.0.0
        - host.docker.internal
        timeoutForControlPlane: 20m
      controllerManager:
        extraArgs:
          enable-hostpath-provisioner: "true"
    initConfiguration:
      nodeRegistration:
        criSocket: unix:///var/run/containerd/containerd.sock
        kubeletExtraArgs:
          eviction-hard: nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%
    joinConfiguration:
      nodeRegistration:
        criSocket: unix:///var/run/containerd/containerd.sock
        kubeletExtraArgs:
          eviction-hard: nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%
  machineTemplate:
    infrastructureRef:
      apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
      kind: DockerMachineTemplate
      name: capi-quickstart-control-plane
    nodeDrainTimeout: 5m0s
  replicas: 3
  version: v1.32.0
  rolloutBefore:
    certificatesExpiryDays: 21
  rolloutStrategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 1
  remediationStrategy:
    maxRetry: 5
    retryPeriod: 2m0s
    minHealthyPeriod: 2h0m0s
status:
  replicas: 3
  updatedReplicas: 3
  readyReplicas: 2
  unavailableReplicas: 1
  initialized: true
  ready: true
  version: v1.32.0
  selector: cluster.x-k8s.io/cluster-name=capi-quickstart
  v1beta2:
    readyReplicas: 2
    availableReplicas: 2
    upToDateReplicas: 3
"#;

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a String> {
    meta.annotations.as_ref()?.get(key)
}

fn lookup_v1beta1(group: &str, _kind: &str) -> Option<String> {
    Some(format!("{group}/v1beta1"))
}

#[test]
fn quick_start_control_plane_converts_and_back() {
    let input: Value = serde_saphyr::from_str(QUICK_START).unwrap();
    let hub = convert_object(input.clone(), "controlplane.cluster.x-k8s.io/v1beta2").unwrap();
    assert_eq!(hub["apiVersion"], "controlplane.cluster.x-k8s.io/v1beta2");
    let spec = &hub["spec"];
    assert_eq!(
        spec["machineTemplate"],
        json!({"spec": {
            "infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "DockerMachineTemplate",
                "name": "capi-quickstart-control-plane",
            },
            "deletion": {"nodeDrainTimeoutSeconds": 300},
        }})
    );
    assert_eq!(
        spec["rollout"],
        json!({"before": {"certificatesExpiryDays": 21}, "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}})
    );
    assert_eq!(
        spec["remediation"],
        json!({"maxRetry": 5, "retryPeriodSeconds": 120, "minHealthyPeriodSeconds": 7200})
    );
    let config = &spec["kubeadmConfigSpec"];
    assert_eq!(
        config["clusterConfiguration"]["controllerManager"]["extraArgs"],
        json!([{"name": "enable-hostpath-provisioner", "value": "true"}])
    );
    assert_eq!(
        config["initConfiguration"]["timeouts"],
        json!({"controlPlaneComponentHealthCheckSeconds": 1200})
    );
    assert_eq!(
        config["joinConfiguration"]["timeouts"],
        json!({"controlPlaneComponentHealthCheckSeconds": 1200})
    );
    assert_eq!(
        hub["status"],
        json!({
            "initialization": {"controlPlaneInitialized": true},
            "selector": "cluster.x-k8s.io/cluster-name=capi-quickstart",
            "replicas": 3,
            "readyReplicas": 2,
            "availableReplicas": 2,
            "upToDateReplicas": 3,
            "version": "v1.32.0",
            "deprecated": {"v1beta1": {"updatedReplicas": 3, "readyReplicas": 2, "unavailableReplicas": 1}},
        })
    );
    // Kept aside: the spelling `20m`, the reference's version (for conversions without a contract
    // lookup), and that the reference had no namespace (v1beta1 readers get the object's).
    let kept: Value = serde_json::from_str(
        hub["metadata"]["annotations"][V1BETA1_DATA_ANNOTATION]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        kept,
        json!([
            {
                "path": "/spec/kubeadmConfigSpec/clusterConfiguration/apiServer/timeoutForControlPlane",
                "expect": "20m0s",
                "value": "20m",
            },
            {
                "path": "/spec/machineTemplate/infrastructureRef/apiVersion",
                "value": "infrastructure.cluster.x-k8s.io/v1beta1",
            },
            {
                "path": "/spec/machineTemplate/infrastructureRef/namespace",
                "expect": "default",
            },
        ])
    );
    let back = convert_object(hub, "controlplane.cluster.x-k8s.io/v1beta1").unwrap();
    assert_eq!(back, input);

    // With the contract lookup naming the same version, nothing about the version is kept.
    let hub = convert_object_with(
        input.clone(),
        "controlplane.cluster.x-k8s.io/v1beta2",
        &lookup_v1beta1,
    )
    .unwrap();
    let kept = hub["metadata"]["annotations"][V1BETA1_DATA_ANNOTATION]
        .as_str()
        .unwrap();
    assert!(!kept.contains("apiVersion"), "{kept}");
    let back = convert_object_with(
        hub,
        "controlplane.cluster.x-k8s.io/v1beta1",
        &lookup_v1beta1,
    )
    .unwrap();
    assert_eq!(back, input);
}

fn hub_control_plane() -> v2::KubeadmControlPlane {
    serde_json::from_value(json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmControlPlane",
        "metadata": {"name": "cp", "namespace": "prod"},
        "spec": {
            "version": "v1.33.1",
            "machineTemplate": {"spec": {"infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "OpenStackMachineTemplate",
                "name": "cp-gen1",
            }}},
        },
    }))
    .unwrap()
}

#[test]
fn infrastructure_ref_version_comes_from_the_contract_lookup() {
    let hub = hub_control_plane();
    let error = from_hub::<v1::KubeadmControlPlane>(hub.clone()).unwrap_err();
    assert_eq!(
        error,
        ConversionError::UnknownContractVersion {
            path: "spec.machineTemplate.spec.infrastructureRef".into(),
            group: "infrastructure.cluster.x-k8s.io".into(),
            kind: "OpenStackMachineTemplate".into(),
        }
    );
    let spoke: v1::KubeadmControlPlane = from_hub_with(hub.clone(), &lookup_v1beta1).unwrap();
    assert_eq!(
        serde_json::to_value(&spoke.spec.machine_template.infrastructure_ref).unwrap(),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "OpenStackMachineTemplate",
            "name": "cp-gen1",
            "namespace": "prod",
        })
    );
    assert_eq!(spoke.metadata.annotations, None);
}

#[test]
fn a_kept_reference_version_holds_only_while_the_group_is_unchanged() {
    let hub = hub_control_plane();
    let spoke: v1::KubeadmControlPlane = from_hub_with(hub, &lookup_v1beta1).unwrap();
    // Written back through v1beta1 without a lookup, the version is kept aside...
    let stored = to_hub(spoke).unwrap();
    assert!(annotation(&stored.metadata, V1BETA1_DATA_ANNOTATION).is_some());
    let again: v1::KubeadmControlPlane = from_hub(stored.clone()).unwrap();
    assert_eq!(
        again
            .spec
            .machine_template
            .infrastructure_ref
            .api_version
            .as_deref(),
        Some("infrastructure.cluster.x-k8s.io/v1beta1")
    );
    // ...but not for a reference moved to another group since.
    let mut moved = stored;
    moved
        .spec
        .machine_template
        .spec
        .infrastructure_ref
        .api_group = "example.com".into();
    assert!(matches!(
        from_hub::<v1::KubeadmControlPlane>(moved.clone()),
        Err(ConversionError::UnknownContractVersion { group, .. }) if group == "example.com"
    ));
    let with_lookup: v1::KubeadmControlPlane = from_hub_with(moved, &lookup_v1beta1).unwrap();
    assert_eq!(
        with_lookup
            .spec
            .machine_template
            .infrastructure_ref
            .api_version
            .as_deref(),
        Some("example.com/v1beta1")
    );
}

#[test]
fn a_malformed_reference_version_is_rejected() {
    let mut input: Value = serde_saphyr::from_str(QUICK_START).unwrap();
    input["spec"]["machineTemplate"]["infrastructureRef"]["apiVersion"] = json!("a/b/c");
    let error = convert_object(input, "controlplane.cluster.x-k8s.io/v1beta2").unwrap_err();
    assert_eq!(
        error,
        ConversionError::InvalidReferenceApiVersion {
            path: "spec.machineTemplate.infrastructureRef.apiVersion".into(),
            value: "a/b/c".into(),
        }
    );
}

#[test]
fn bad_durations_name_their_fields() {
    let mut input: Value = serde_saphyr::from_str(QUICK_START).unwrap();
    input["spec"]["remediationStrategy"]["retryPeriod"] = json!("2 minutes");
    let message = convert_object(input, "controlplane.cluster.x-k8s.io/v1beta2")
        .unwrap_err()
        .to_string();
    assert!(
        message
            .starts_with("spec.remediationStrategy.retryPeriod: \"2 minutes\" is not a duration"),
        "{message}"
    );
    let template = json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta1",
        "kind": "KubeadmControlPlaneTemplate",
        "metadata": {"name": "cp"},
        "spec": {"template": {"spec": {
            "kubeadmConfigSpec": {},
            "machineTemplate": {"nodeVolumeDetachTimeout": "1d"},
        }}},
    });
    let error = convert_object(template, "controlplane.cluster.x-k8s.io/v1beta2").unwrap_err();
    assert!(matches!(
        error,
        ConversionError::InvalidDuration { ref path, .. }
            if path == "spec.template.spec.machineTemplate.nodeVolumeDetachTimeout"
    ));
}

#[test]
fn status_ready_is_rebuilt_from_ready_replicas() {
    let input: Value = serde_saphyr::from_str(QUICK_START).unwrap();
    let spoke: v1::KubeadmControlPlane = serde_json::from_value(input).unwrap();
    let hub = to_hub(spoke.clone()).unwrap();
    assert!(!hub.metadata.annotations.as_ref().unwrap()[V1BETA1_DATA_ANNOTATION].contains("ready"));

    // A v1beta1 status that says ready without a ready replica keeps its word.
    let mut odd = spoke;
    odd.status.as_mut().unwrap().ready_replicas = 0;
    let hub = to_hub(odd.clone()).unwrap();
    assert!(
        hub.metadata.annotations.as_ref().unwrap()[V1BETA1_DATA_ANNOTATION]
            .contains("/status/ready")
    );
    assert_eq!(from_hub::<v1::KubeadmControlPlane>(hub).unwrap(), odd);
}

#[test]
fn an_unset_strategy_type_is_rolling_update() {
    let mut input: Value = serde_saphyr::from_str(QUICK_START).unwrap();
    input["spec"]["rolloutStrategy"] = json!({"rollingUpdate": {"maxSurge": 0}});
    let hub = convert_object(input.clone(), "controlplane.cluster.x-k8s.io/v1beta2").unwrap();
    assert_eq!(
        hub["spec"]["rollout"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0}})
    );
    let back = convert_object(hub, "controlplane.cluster.x-k8s.io/v1beta1").unwrap();
    assert_eq!(back, input);
}

#[test]
fn hub_only_status_fields_survive_in_v1beta1() {
    let mut hub = hub_control_plane();
    hub.status = Some(v2::KubeadmControlPlaneStatus {
        initialization: Some(v2::KubeadmControlPlaneInitializationStatus {
            control_plane_initialized: Some(false),
        }),
        replicas: None,
        ..Default::default()
    });
    let spoke: v1::KubeadmControlPlane = from_hub_with(hub.clone(), &lookup_v1beta1).unwrap();
    let status = spoke.status.as_ref().unwrap();
    assert!(!status.initialized);
    assert_eq!(status.replicas, 0);
    let data: Value =
        serde_json::from_str(annotation(&spoke.metadata, CONVERSION_DATA_ANNOTATION).unwrap())
            .unwrap();
    assert_eq!(
        data["status"],
        json!({"initialization": {"controlPlaneInitialized": false}})
    );
    assert_eq!(
        crate::conversion::to_hub_with(spoke, &lookup_v1beta1).unwrap(),
        hub
    );
}

#[test]
fn etcd_maintenance_status_survives_in_v1beta1() {
    let mut hub = hub_control_plane();
    let status: v2::KubeadmControlPlaneStatus = serde_json::from_value(json!({
        "replicas": 3,
        "etcd": {
            "lastDefragmentation": {
                "time": "2026-11-30T02:30:41Z",
                "members": ["node-b", "node-c", "node-a"],
                "dbSizeBefore": 30_000_000,
                "dbSizeAfter": 300_000,
            },
            "lastSnapshot": {
                "time": "2026-11-30T03:00:02Z",
                "location": "secret/prod-etcd-snapshot-20261130t030002z",
                "size": 2_101_248,
                "revision": 4711,
                "member": "node-b",
            },
        },
    }))
    .unwrap();
    hub.status = Some(status);
    let spoke: v1::KubeadmControlPlane = from_hub_with(hub.clone(), &lookup_v1beta1).unwrap();
    let data: Value =
        serde_json::from_str(annotation(&spoke.metadata, CONVERSION_DATA_ANNOTATION).unwrap())
            .unwrap();
    assert_eq!(
        data["status"]["etcd"]["lastSnapshot"]["revision"],
        json!(4711)
    );
    assert_eq!(
        crate::conversion::to_hub_with(spoke, &lookup_v1beta1).unwrap(),
        hub
    );
}

#[test]
fn template_without_spec_stays_without_spec() {
    let template: v2::KubeadmControlPlaneTemplate = serde_json::from_value(json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmControlPlaneTemplate",
        "metadata": {"name": "cp", "labels": {"a": "b"}},
        "spec": {"template": {"metadata": {"labels": {"tier": "cp"}}}},
    }))
    .unwrap();
    let spoke: v1::KubeadmControlPlaneTemplate = from_hub(template.clone()).unwrap();
    assert_eq!(
        spoke.spec.template.metadata.as_ref().unwrap().labels,
        BTreeMap::from([("tier".to_owned(), "cp".to_owned())])
    );
    assert_eq!(spoke.metadata.annotations, None);
    assert_eq!(to_hub(spoke).unwrap(), template);
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn kubeadm_control_plane_v1beta1_round_trips(control_plane in kubeadm_control_plane1()) {
        check_spoke_round_trip(&control_plane, &contract_versions)?;
        check_spoke_round_trip(&control_plane, &NoContractVersions)?;
    }

    #[test]
    fn kubeadm_control_plane_v1beta2_round_trips(control_plane in kubeadm_control_plane2()) {
        check_hub_round_trip::<v1::KubeadmControlPlane>(&control_plane, &contract_versions)?;
    }

    #[test]
    fn kubeadm_control_plane_template_v1beta1_round_trips(template in kubeadm_control_plane_template1()) {
        check_spoke_round_trip(&template, &NoContractVersions)?;
    }

    #[test]
    fn kubeadm_control_plane_template_v1beta2_round_trips(template in kubeadm_control_plane_template2()) {
        check_hub_round_trip::<v1::KubeadmControlPlaneTemplate>(&template, &NoContractVersions)?;
    }
}
