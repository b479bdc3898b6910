//! The conversion API as other crates (webhook server, offline tools) use it.

use kubeadm_api::bootstrap::{v1beta1 as bootstrap_v1beta1, v1beta2 as bootstrap_v1beta2};
use kubeadm_api::controlplane::{v1beta1 as controlplane_v1beta1, v1beta2 as controlplane_v1beta2};
use kubeadm_api::conversion::{
    ContractVersions, ConversionError, convert_object, convert_object_with, from_hub,
    from_hub_with, to_hub,
};
use serde_json::{Value, json};

/// What a webhook server would back with a cache of CRD contract labels.
struct Contracts;

impl ContractVersions for Contracts {
    fn api_version(&self, group: &str, kind: &str) -> Option<String> {
        (group == "infrastructure.cluster.x-k8s.io" && kind == "OpenStackMachineTemplate")
            .then(|| format!("{group}/v1beta1"))
    }
}

fn worker_config() -> bootstrap_v1beta1::KubeadmConfig {
    serde_json::from_value(json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
        "kind": "KubeadmConfig",
        "metadata": {"name": "md-0-abcde", "namespace": "default"},
        "spec": {
            "joinConfiguration": {
                "nodeRegistration": {"kubeletExtraArgs": {"cloud-provider": "external"}},
                "discovery": {"timeout": "5m"},
            },
        },
    }))
    .unwrap()
}

#[test]
fn typed_conversions() {
    let config = worker_config();
    let hub: bootstrap_v1beta2::KubeadmConfig = config.clone().try_into().unwrap();
    assert_eq!(
        hub.spec.join_configuration.timeouts.tls_bootstrap_seconds,
        Some(300)
    );
    assert_eq!(
        bootstrap_v1beta1::KubeadmConfig::try_from(hub.clone()).unwrap(),
        config
    );
    let back: bootstrap_v1beta1::KubeadmConfig = from_hub(hub).unwrap();
    assert_eq!(back, config);
    let hub = to_hub(back).unwrap();
    assert_eq!(
        hub.spec
            .join_configuration
            .node_registration
            .kubelet_extra_args
            .len(),
        1
    );
}

#[test]
fn json_conversions_with_a_contract_lookup() {
    let control_plane = json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmControlPlane",
        "metadata": {"name": "cp", "namespace": "default"},
        "spec": {
            "version": "v1.33.1",
            "machineTemplate": {"spec": {"infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "OpenStackMachineTemplate",
                "name": "cp-1",
            }}},
        },
    });
    assert!(matches!(
        convert_object(
            control_plane.clone(),
            "controlplane.cluster.x-k8s.io/v1beta1"
        ),
        Err(ConversionError::UnknownContractVersion { .. })
    ));
    let spoke = convert_object_with(
        control_plane.clone(),
        "controlplane.cluster.x-k8s.io/v1beta1",
        &Contracts,
    )
    .unwrap();
    assert_eq!(
        spoke["spec"]["machineTemplate"]["infrastructureRef"],
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "OpenStackMachineTemplate",
            "name": "cp-1",
            "namespace": "default",
        })
    );
    let hub: Value =
        convert_object_with(spoke, "controlplane.cluster.x-k8s.io/v1beta2", &Contracts).unwrap();
    assert_eq!(hub, control_plane);

    // Closures work as lookups too.
    let typed: controlplane_v1beta2::KubeadmControlPlane =
        serde_json::from_value(control_plane).unwrap();
    let spoke: controlplane_v1beta1::KubeadmControlPlane =
        from_hub_with(typed, &|group: &str, _kind: &str| {
            Some(format!("{group}/v1beta2"))
        })
        .unwrap();
    assert_eq!(
        spoke
            .spec
            .machine_template
            .infrastructure_ref
            .api_version
            .as_deref(),
        Some("infrastructure.cluster.x-k8s.io/v1beta2")
    );
}
