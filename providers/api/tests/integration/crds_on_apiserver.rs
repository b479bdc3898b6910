//! The generated CRDs on a real kube-apiserver: they install, realistic objects survive a write/read
//! without the server pruning anything, the scale subresource works, and the schema rejects bad input.

use std::path::Path;
use std::process::Command;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubeadm_api::bootstrap::v1beta2::KubeadmConfig;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::crd;
use serde_json::Value;
use testenv::ManagementPlane;
use testenv::binaries::ManagementRelease;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
    .unwrap()
}

fn yaml_to_json(yaml: &str) -> Value {
    serde_saphyr::from_str(yaml).unwrap()
}

/// The management releases each test runs on: the default (the newest built here) and the other end of
/// the matrix (see `testenv::binaries::ManagementRelease`), unless `TESTENV_MANAGEMENT` picked one.
fn releases() -> Vec<Option<ManagementRelease>> {
    match testenv::binaries::management().unwrap().release {
        ManagementRelease::Newest if std::env::var_os("TESTENV_MANAGEMENT").is_none() => {
            vec![None, Some(ManagementRelease::Current)]
        }
        _ => vec![None],
    }
}

async fn plane_with_crds(release: Option<ManagementRelease>) -> ManagementPlane {
    let plane = match release {
        None => ManagementPlane::start().await,
        Some(release) => ManagementPlane::start_on(release).await,
    }
    .expect("management plane starts");
    let mut crds = crd::provider_crds();
    crds.extend(crd::core_crds());
    plane
        .install_crds(&crds)
        .await
        .expect("generated CRDs install and become Established");
    plane
}

fn dynamic(client: &kube::Client, group: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, "v1beta2", kind);
    Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk))
}

fn kubectl(plane: &ManagementPlane, args: &[&str]) -> std::process::Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(plane.kubeconfig_path())
        .args(args)
        .output()
        .expect("kubectl runs (hack/install-testenv.sh installs it)")
}

#[tokio::test]
async fn realistic_objects_round_trip_scale_and_explain() {
    for release in releases() {
        realistic_objects_round_trip_scale_and_explain_on(release).await;
    }
}

async fn realistic_objects_round_trip_scale_and_explain_on(release: Option<ManagementRelease>) {
    let plane = plane_with_crds(release).await;
    let client = plane.client().await.unwrap();

    // KubeadmControlPlane: typed create, then the raw spec read back must equal the raw spec written —
    // a field missing from the schema would be pruned silently by the server.
    let kcp_yaml = fixture("kubeadmcontrolplane-v1beta2.yaml");
    let kcp: KubeadmControlPlane = serde_saphyr::from_str(&kcp_yaml).unwrap();
    let kcps: Api<KubeadmControlPlane> = Api::namespaced(client.clone(), "default");
    kcps.create(&PostParams::default(), &kcp)
        .await
        .expect("KCP accepted");
    let read = kcps.get("prod-a-control-plane").await.unwrap();
    assert_eq!(read.spec, kcp.spec, "typed KCP spec reads back equal");
    let raw = dynamic(
        &client,
        "controlplane.cluster.x-k8s.io",
        "KubeadmControlPlane",
    )
    .get("prod-a-control-plane")
    .await
    .unwrap();
    assert_eq!(
        raw.data["spec"],
        yaml_to_json(&kcp_yaml)["spec"],
        "nothing pruned from the KCP spec"
    );

    let config_yaml = fixture("kubeadmconfig-v1beta2.yaml");
    let config: KubeadmConfig = serde_saphyr::from_str(&config_yaml).unwrap();
    let configs: Api<KubeadmConfig> = Api::namespaced(client.clone(), "default");
    configs
        .create(&PostParams::default(), &config)
        .await
        .expect("KubeadmConfig accepted");
    assert_eq!(
        configs.get("prod-a-md-0-x7k2p").await.unwrap().spec,
        config.spec
    );
    let raw = dynamic(&client, "bootstrap.cluster.x-k8s.io", "KubeadmConfig")
        .get("prod-a-md-0-x7k2p")
        .await
        .unwrap();
    assert_eq!(
        raw.data["spec"],
        yaml_to_json(&config_yaml)["spec"],
        "nothing pruned from the config spec"
    );

    // Status is a subresource: written separately, and carries the selector the scale subresource reads.
    let status = serde_json::json!({ "status": {
        "replicas": 3, "selector": "cluster.x-k8s.io/control-plane-name=prod-a-control-plane",
        "initialization": { "controlPlaneInitialized": true }, "version": "v1.33.1",
    }});
    kcps.patch_status(
        "prod-a-control-plane",
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .expect("status subresource accepts the status");

    // Scale subresource, through kubectl as a user would.
    let out = kubectl(
        &plane,
        &[
            "-n",
            "default",
            "scale",
            "kcp",
            "prod-a-control-plane",
            "--replicas=5",
        ],
    );
    assert!(
        out.status.success(),
        "kubectl scale: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        kcps.get("prod-a-control-plane")
            .await
            .unwrap()
            .spec
            .replicas,
        Some(5)
    );
    let scale = kcps.get_scale("prod-a-control-plane").await.unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(5));
    let scale_status = scale.status.unwrap();
    assert_eq!(scale_status.replicas, 3);
    assert_eq!(
        scale_status.selector.as_deref(),
        Some("cluster.x-k8s.io/control-plane-name=prod-a-control-plane")
    );

    // Printer columns as CAPI shows them.
    let out = kubectl(&plane, &["-n", "default", "get", "kcp"]);
    let table = String::from_utf8_lossy(&out.stdout);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    for column in [
        "CLUSTER",
        "AVAILABLE",
        "DESIRED",
        "CURRENT",
        "READY",
        "UP-TO-DATE",
        "INITIALIZED",
        "VERSION",
    ] {
        assert!(header.contains(&column), "column {column} in {header:?}");
    }
    assert!(
        table.contains("prod-a") && table.contains("v1.33.1"),
        "{table}"
    );

    // Schemas carry descriptions, so users can explain fields. The apiserver publishes CRD schemas to
    // its OpenAPI document a moment after the CRD is established; retry until it has.
    let mut explained = String::new();
    for _ in 0..60 {
        let out = kubectl(&plane, &["explain", "kubeadmcontrolplane.spec.rollout"]);
        explained = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert!(explained.contains("DESCRIPTION"), "{explained}");
    assert!(
        explained.contains("When and how control plane Machines are replaced"),
        "{explained}"
    );
}

#[tokio::test]
async fn schema_rejects_invalid_objects_naming_the_field() {
    for release in releases() {
        schema_rejects_invalid_objects_naming_the_field_on(release).await;
    }
}

async fn schema_rejects_invalid_objects_naming_the_field_on(release: Option<ManagementRelease>) {
    let plane = plane_with_crds(release).await;
    let client = plane.client().await.unwrap();
    let kcps = dynamic(
        &client,
        "controlplane.cluster.x-k8s.io",
        "KubeadmControlPlane",
    );
    let mut bad: DynamicObject =
        serde_saphyr::from_str(&fixture("kubeadmcontrolplane-v1beta2.yaml")).unwrap();
    bad.data["spec"]["replicas"] = Value::from("three");
    let err = kcps
        .create(&PostParams::default(), &bad)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("spec.replicas"),
        "error names the field: {err}"
    );

    let configs = dynamic(&client, "bootstrap.cluster.x-k8s.io", "KubeadmConfig");
    let mut bad: DynamicObject =
        serde_saphyr::from_str(&fixture("kubeadmconfig-v1beta2.yaml")).unwrap();
    bad.data["spec"]["format"] = Value::from("yaml");
    let err = configs
        .create(&PostParams::default(), &bad)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("spec.format") && err.contains("Unsupported value"),
        "{err}"
    );

    // Cluster API declares spec optional: an object without one is accepted.
    let bare: DynamicObject = serde_saphyr::from_str(
        "apiVersion: bootstrap.cluster.x-k8s.io/v1beta2\nkind: KubeadmConfig\nmetadata: {name: bare, namespace: default}\n",
    )
    .unwrap();
    configs
        .create(&PostParams::default(), &bare)
        .await
        .expect("a KubeadmConfig without spec is accepted");

    let machines = dynamic(&client, "cluster.x-k8s.io", "Machine");
    let machine: DynamicObject = serde_saphyr::from_str(
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Machine\nmetadata: {name: m0, namespace: default}\nspec:\n  clusterName: prod-a\n  bootstrap: {}\n  infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: SimMachine}\n",
    )
    .unwrap();
    let err = machines
        .create(&PostParams::default(), &machine)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("spec.infrastructureRef.name"),
        "required field named: {err}"
    );
}
