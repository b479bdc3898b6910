//! Control planes at scale against a real kube-apiserver: how long a KubeadmControlPlane reconcile takes
//! with 100 of them (`BENCH_KCPS`), how many API writes creating a control-plane machine costs, and how
//! many a reconcile at rest costs (zero is the goal). Prints numbers; asserts nothing.
//!
//! The management API server also answers as every cluster's workload API server, each cluster through a
//! filtering front of its own ([`testenv::front`]) that shows it only its own mirror pods: without it,
//! each control plane's pod watch would be woken by every other cluster's machines, and reconciles per
//! control plane would grow with the number of clusters, as no real workload cluster makes them.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kubeadm_api::cluster::v1beta2::Cluster;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::meta::CLUSTER_NAME_LABEL;
use kubeadm_controlplane::controller::{self, Settings, api_writes_total, reconcile_time};
use kubeadm_runtime::Shutdown;
use serde_json::json;
use testenv::ManagementPlane;
use testenv::core_double::CoreDouble;
use testenv::front::Front;

const NS: &str = "default";

#[tokio::main]
async fn main() {
    let count: usize = std::env::var("BENCH_KCPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let plane = ManagementPlane::start()
        .await
        .expect("management plane starts");
    let client = plane.client().await.unwrap();
    let mut crds = kubeadm_api::crd::provider_crds();
    crds.extend(kubeadm_api::crd::core_crds());
    let fixture = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/sim-infrastructure-crds.yaml"
    ))
    .unwrap();
    crds.extend(serde_saphyr::from_multiple::<CustomResourceDefinition>(&fixture).unwrap());
    plane.install_crds(&crds).await.unwrap();

    let template = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "infrastructure.cluster.x-k8s.io",
        "v1beta2",
        "SimMachineTemplate",
    ));
    let mut object = DynamicObject::new("cp-genc01", &template).within(NS);
    object.data = json!({ "spec": { "template": { "spec": {} } } });
    Api::<DynamicObject>::namespaced_with(client.clone(), NS, &template)
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    let setup = Instant::now();
    let mut fronts = Vec::with_capacity(count);
    for i in 0..count {
        let name = format!("c{i:03}");
        let front = Front::before(plane.apiserver(), CLUSTER_NAME_LABEL, &name)
            .await
            .expect("front listens");
        create_cluster(&client, &plane, &name, i32::from(front.port())).await;
        fronts.push(front);
    }
    println!("created {count} clusters in {:?}", setup.elapsed());

    let _core = CoreDouble::start(client.clone(), NS, Duration::from_millis(500));
    let (_trigger, shutdown) = Shutdown::channel();
    let settings = Settings::default();
    let controller_client = client.clone();
    tokio::spawn(async move { controller::run(controller_client, settings, shutdown).await });

    let started = Instant::now();
    wait_all(&client, count, 1).await;
    println!(
        "{count} control planes initialized (1 machine each) in {:?}; {} API writes ({:.1} per cluster: certificates, kubeconfig, finalizer, first machine, status)",
        started.elapsed(),
        api_writes_total(),
        api_writes_total() as f64 / count as f64
    );

    // Writes per created control-plane machine: scale every control plane 1 → 3.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes = api_writes_total();
    let started = Instant::now();
    for i in 0..count {
        patch(
            &client,
            &format!("c{i:03}-cp"),
            json!({ "spec": { "replicas": 3 } }),
        )
        .await;
    }
    wait_all(&client, count, 3).await;
    let created = 2 * count;
    println!(
        "scaled {count} control planes 1 → 3 in {:?}; {:.1} API writes per created machine",
        started.elapsed(),
        (api_writes_total() - writes) as f64 / created as f64
    );

    // At rest: every control plane reconciled once more, nothing to do.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes = api_writes_total();
    let (runs, spent) = reconcile_time();
    for i in 0..count {
        patch(
            &client,
            &format!("c{i:03}-cp"),
            json!({ "metadata": { "annotations": { "bench": "touched" } } }),
        )
        .await;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while reconcile_time().0 < runs + count as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (runs_after, spent_after) = reconcile_time();
    let per = (spent_after - spent) / u32::try_from(runs_after - runs).unwrap_or(1).max(1);
    println!(
        "at rest: {} reconciles, {:?} per reconcile ({count} control planes, 3 machines each), {} API writes",
        runs_after - runs,
        per,
        api_writes_total() - writes
    );
    let (total_runs, total_spent) = reconcile_time();
    println!(
        "overall: {total_runs} reconciles ({:.1} per control plane), mean {:?}",
        total_runs as f64 / count as f64,
        total_spent / u32::try_from(total_runs).unwrap_or(1).max(1)
    );
    drop(fronts);
}

async fn patch(client: &kube::Client, name: &str, body: serde_json::Value) {
    Api::<KubeadmControlPlane>::namespaced(client.clone(), NS)
        .patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .unwrap();
}

async fn wait_all(client: &kube::Client, count: usize, replicas: i32) {
    let api: Api<KubeadmControlPlane> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let done = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|k| {
                let s = k.status.clone().unwrap_or_default();
                s.ready_replicas == Some(replicas)
                    && s.up_to_date_replicas == Some(replicas)
                    && s.replicas == Some(replicas)
            })
            .count();
        if done == count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {done} of {count} converged"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn create_cluster(client: &kube::Client, plane: &ManagementPlane, name: &str, port: i32) {
    let ca = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{name}-ca")),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        string_data: Some(
            [
                ("tls.crt".to_owned(), plane.apiserver().ca_pem().to_owned()),
                (
                    "tls.key".to_owned(),
                    plane.apiserver().ca_key_pem().to_owned(),
                ),
            ]
            .into(),
        ),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &ca)
        .await
        .unwrap();
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), NS);
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": { "name": name, "namespace": NS },
        "spec": {
            "controlPlaneEndpoint": { "host": "127.0.0.1", "port": port },
            "controlPlaneRef": { "apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": format!("{name}-cp") },
        },
    }))
    .unwrap();
    let cluster = clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    clusters
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                &json!({ "status": { "initialization": { "infrastructureProvisioned": true } } }),
            ),
        )
        .await
        .unwrap();
    let kcp: KubeadmControlPlane = serde_json::from_value(json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
        "metadata": {
            "name": format!("{name}-cp"), "namespace": NS,
            "labels": { "cluster.x-k8s.io/cluster-name": name },
            "ownerReferences": [{ "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": name, "uid": cluster.uid().unwrap() }],
        },
        "spec": {
            "replicas": 1,
            "version": "v1.33.1",
            "machineTemplate": { "spec": { "infrastructureRef": { "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachineTemplate", "name": "cp-genc01" } } },
            // etcd outside the machines: the stand-in runs no etcd, and this measures the machine work.
            "kubeadmConfigSpec": { "clusterConfiguration": {
                "apiServer": { "extraArgs": [{ "name": "profiling", "value": "false" }] },
                "etcd": { "external": { "endpoints": ["https://etcd.example:2379"], "caFile": "/ca", "certFile": "/crt", "keyFile": "/key" } },
            } },
        },
    }))
    .unwrap();
    Api::<KubeadmControlPlane>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &kcp)
        .await
        .unwrap();
}
