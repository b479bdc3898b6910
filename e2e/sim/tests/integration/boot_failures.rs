//! Machines whose bootstrap data a node cannot use fail with a reason and a message that says why, on
//! the SimMachine and the Machine; deleting such a Machine removes it and its SimMachine. Runs the
//! simulator against a real apiserver, without the providers (the data secrets are written directly).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Resource, ResourceExt};
use kubeadm_api::cluster::v1beta2::{Cluster, Machine};
use serde_json::json;
use sim::api::{SimCluster, SimMachine};
use sim::{Sim, SimOptions};
use testenv::ManagementPlane;

const NS: &str = "default";

async fn create<K>(client: &kube::Client, value: serde_json::Value)
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(value).unwrap();
    Api::<K>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap();
}

async fn machine_with_data(client: &kube::Client, name: &str, data: &str) {
    create::<Secret>(
        client,
        json!({ "metadata": { "name": name }, "stringData": { "value": data, "format": "cloud-config" } }),
    )
    .await;
    create::<SimMachine>(client, json!({ "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "SimMachine", "metadata": { "name": name }, "spec": {} })).await;
    create::<Machine>(
        client,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": { "name": name, "labels": { "cluster.x-k8s.io/cluster-name": "demo" } },
            "spec": {
                "clusterName": "demo",
                "bootstrap": { "dataSecretName": name },
                "infrastructureRef": { "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachine", "name": name },
            },
        }),
    )
    .await;
}

async fn wait_failure(client: &kube::Client, name: &str) -> (String, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let sim = Api::<SimMachine>::namespaced(client.clone(), NS)
            .get(name)
            .await
            .unwrap();
        let machine = Api::<Machine>::namespaced(client.clone(), NS)
            .get(name)
            .await
            .unwrap();
        let phase = machine.status.as_ref().and_then(|s| s.phase);
        if let Some(status) = sim.status
            && let (Some(reason), Some(message)) = (status.failure_reason, status.failure_message)
            && format!("{phase:?}") == "Some(Failed)"
        {
            return (reason, message);
        }
        assert!(
            Instant::now() < deadline,
            "{name} did not fail: machine phase {phase:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_bootstrap_data_fails_the_machine_with_a_clear_message() {
    let plane = ManagementPlane::start().await.unwrap();
    let mut crds = kubeadm_api::crd::core_crds();
    crds.extend(sim::api::crds());
    plane.install_crds(&crds).await.unwrap();
    let client = plane.client().await.unwrap();
    create::<SimCluster>(&client, json!({ "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "SimCluster", "metadata": { "name": "demo" }, "spec": { "failureDomains": ["fd-a", "fd-b"] } })).await;
    create::<Cluster>(
        &client,
        json!({ "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": { "name": "demo" },
            "spec": { "infrastructureRef": { "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimCluster", "name": "demo" } } }),
    )
    .await;
    machine_with_data(&client, "shell-script", "#!/bin/sh\necho hello\n").await;
    machine_with_data(
        &client,
        "no-kubeadm",
        "## template: jinja\n#cloud-config\nruncmd:\n- echo hello\n",
    )
    .await;
    machine_with_data(&client, "bad-yaml", "#cloud-config\nwrite_files: [\n").await;
    let sim = Sim::start(
        client.clone(),
        SimOptions {
            dir: plane.dir().join("sim"),
            namespace: Some(NS.into()),
            period: Duration::from_millis(200),
            core: sim::controller::Core::StandIn,
        },
    );

    let (reason, message) = wait_failure(&client, "shell-script").await;
    assert_eq!(reason, "InvalidBootstrapData");
    assert!(
        message.contains("secret shell-script") && message.contains("must be `#cloud-config`"),
        "{message}"
    );
    let (_, message) = wait_failure(&client, "no-kubeadm").await;
    assert!(
        message.contains("runcmd has no `kubeadm init` or `kubeadm join` command"),
        "{message}"
    );
    let (_, message) = wait_failure(&client, "bad-yaml").await;
    assert!(message.contains("not valid cloud-config YAML"), "{message}");

    // The cluster side was simulated too: endpoint on the load balancer, infrastructure provisioned,
    // failure domains offered.
    let cluster = Api::<Cluster>::namespaced(client.clone(), NS)
        .get("demo")
        .await
        .unwrap();
    let endpoint = cluster.spec.control_plane_endpoint.clone().unwrap();
    assert_eq!(
        sim.endpoint(NS, "demo").map(|a| a.to_string()),
        Some(format!(
            "{}:{}",
            endpoint.host.unwrap(),
            endpoint.port.unwrap()
        ))
    );
    let status = cluster.status.unwrap_or_default();
    let provisioned = status
        .initialization
        .and_then(|i| i.infrastructure_provisioned);
    assert_eq!(provisioned, Some(true));
    let domains: Vec<(String, Option<bool>)> = status
        .failure_domains
        .iter()
        .map(|d| (d.name.clone(), d.control_plane))
        .collect();
    assert_eq!(
        domains,
        [
            ("fd-a".to_owned(), Some(true)),
            ("fd-b".to_owned(), Some(true))
        ],
        "the SimCluster's failure domains reach the Cluster for control-plane spreading"
    );

    // A deleted failed Machine goes, and takes its SimMachine along.
    let machines = Api::<Machine>::namespaced(client.clone(), NS);
    machines
        .delete("shell-script", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while machines.get_opt("shell-script").await.unwrap().is_some()
        || Api::<SimMachine>::namespaced(client.clone(), NS)
            .get_opt("shell-script")
            .await
            .unwrap()
            .is_some()
    {
        assert!(
            Instant::now() < deadline,
            "the deleted Machine or its SimMachine stayed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let left: Vec<String> = machines
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|m| m.name_any())
        .collect();
    assert_eq!(left, ["bad-yaml", "no-kubeadm"]);
    assert!(sim.pids().is_empty(), "no node ever ran");
}
