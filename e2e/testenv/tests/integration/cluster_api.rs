//! Cluster API's own core manager on a management plane of this test environment: its CRDs, its
//! conversion and admission webhooks and its controllers answer, and it stops by PID.

use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;
use testenv::ManagementPlane;
use testenv::capi::{self, ClusterApi};
use testenv::process::pid_alive;

fn cluster_api(version: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "cluster.x-k8s.io",
        version,
        "Cluster",
    ))
}

#[tokio::test]
async fn core_manager_serves_its_webhooks_and_reconciles_clusters() {
    let release = ClusterApi::find().expect("Cluster API built by hack/install-testenv.sh");
    let version = release.version().unwrap();
    assert!(
        version.starts_with("v1.14."),
        "clusterctl reports the release of hack/tools/capi, got {version:?}"
    );
    let plane = ManagementPlane::start().await.unwrap();
    let mut core = capi::start_core(&plane, &release, &[])
        .await
        .expect("core manager starts and becomes ready");
    let pid = core.process().pid();
    let client = plane.client().await.unwrap();
    // An infrastructure kind of the v1beta2 contract for the Cluster to refer to: converting a Cluster
    // to v1beta1 looks up the referenced kind's CRD for the apiVersion v1beta1 spells out.
    let infra_crd = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {
            "name": "testclusters.infrastructure.cluster.x-k8s.io",
            "labels": { "cluster.x-k8s.io/v1beta2": "v1alpha1" },
        },
        "spec": {
            "group": "infrastructure.cluster.x-k8s.io",
            "names": { "kind": "TestCluster", "plural": "testclusters", "singular": "testcluster", "listKind": "TestClusterList" },
            "scope": "Namespaced",
            "versions": [{ "name": "v1alpha1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } } }],
        },
    }))
    .unwrap();
    plane.install_crds(&[infra_crd]).await.unwrap();
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &cluster_api("v1beta2"));

    let network = json!({ "pods": { "cidrBlocks": ["192.168.0.0/16"] } });
    // The validating webhook: a Cluster with neither references nor a topology is refused by
    // Cluster API's own rule.
    let invalid: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": { "name": "nothing" },
        "spec": { "clusterNetwork": network },
    }))
    .unwrap();
    let refused = clusters
        .create(&PostParams::default(), &invalid)
        .await
        .expect_err("a Cluster without references or topology is invalid");
    assert!(
        refused
            .to_string()
            .contains("validation.cluster.cluster.x-k8s.io")
            && refused.to_string().contains("spec.infrastructureRef"),
        "Cluster API's webhook refuses it, naming the fields: {refused}"
    );

    let cluster: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": { "name": "c1" },
        "spec": {
            "clusterNetwork": network,
            "infrastructureRef": { "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TestCluster", "name": "c1" },
        },
    }))
    .unwrap();
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .expect("a plain Cluster is accepted");

    // The controller: the Cluster gets Cluster API's finalizer and a phase.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let current = clusters.get("c1").await.unwrap();
        let finalized = current
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "cluster.cluster.x-k8s.io");
        let phase = current.data.pointer("/status/phase").cloned();
        if finalized && phase.is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the core manager did not reconcile the Cluster within 60 s: {:?}\nlog tail:\n{}",
            current.data,
            core.process().log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The conversion webhook: the same Cluster read as v1beta1.
    let old: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &cluster_api("v1beta1"));
    let as_v1beta1 = old
        .get("c1")
        .await
        .expect("read through the conversion webhook");
    assert_eq!(
        as_v1beta1.types.unwrap().api_version,
        "cluster.x-k8s.io/v1beta1"
    );
    assert_eq!(
        as_v1beta1
            .data
            .pointer("/spec/infrastructureRef/apiVersion"),
        Some(&json!("infrastructure.cluster.x-k8s.io/v1alpha1")),
        "v1beta1 spells the reference with the version the contract label names"
    );

    drop(core);
    assert!(
        !pid_alive(pid),
        "the core manager is stopped by PID on drop"
    );
}
