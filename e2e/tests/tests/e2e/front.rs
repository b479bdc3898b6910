//! The filtering front of `make bench-scale` before a real kube-apiserver shared by two clusters: through
//! its front, a cluster lists and watches only its own control-plane pods and Nodes, over HTTP/2 as a
//! manager's workload client talks, and every other request passes unchanged.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher;
use kubeadm_api::meta::CLUSTER_NAME_LABEL;
use testenv::ManagementPlane;
use testenv::core_double::{kubeadm_init_uploaded_config, start_static_pods};
use testenv::front::Front;

const ETCD: &str = "https://etcd.example:2379";

async fn node(client: &kube::Client, machine: &str, cluster: &str) {
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("node-{machine}"),
            "labels": { CLUSTER_NAME_LABEL: cluster, "node-role.kubernetes.io/control-plane": "" },
        },
    }))
    .unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
}

async fn machine(client: &kube::Client, machine: &str, cluster: &str) {
    node(client, machine, cluster).await;
    start_static_pods(client, machine, ETCD, &[(CLUSTER_NAME_LABEL, cluster)]).await;
}

fn names<K: ResourceExt>(objects: &[K]) -> Vec<String> {
    let mut names: Vec<String> = objects.iter().map(ResourceExt::name_any).collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_cluster_sees_only_its_own_pods_and_nodes_through_its_front() {
    let server = ManagementPlane::start().await.unwrap();
    let admin = server.client().await.unwrap();
    machine(&admin, "a-1", "a").await;
    machine(&admin, "b-1", "b").await;
    kubeadm_init_uploaded_config(&admin).await;

    let apiserver = server.apiserver();
    let front = Front::before(apiserver, CLUSTER_NAME_LABEL, "a")
        .await
        .unwrap();
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(&apiserver.kubeconfig_yaml(false)).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    // The cluster as a manager reaches it: its CA, the front's address, HTTP/2.
    let mut through_front = config;
    through_front.cluster_url = format!("https://127.0.0.1:{}", front.port())
        .parse()
        .unwrap();
    let cluster_a = kubeadm_cluster::connection::client(through_front).unwrap();

    let pods: Api<Pod> = Api::namespaced(cluster_a.clone(), "kube-system");
    let control_plane = ListParams::default().labels("tier=control-plane");
    assert_eq!(
        names(&pods.list(&control_plane).await.unwrap().items),
        [
            "etcd-node-a-1",
            "kube-apiserver-node-a-1",
            "kube-controller-manager-node-a-1",
            "kube-scheduler-node-a-1",
        ]
    );
    let nodes: Api<Node> = Api::all(cluster_a.clone());
    assert_eq!(
        names(&nodes.list(&ListParams::default()).await.unwrap().items),
        ["node-a-1"]
    );
    // Single objects and other kinds pass unchanged, whoever they belong to.
    assert!(nodes.get_opt("node-b-1").await.unwrap().is_some());
    assert!(
        Api::<ConfigMap>::namespaced(cluster_a.clone(), "kube-system")
            .get_opt("kubeadm-config")
            .await
            .unwrap()
            .is_some()
    );

    // A watch (a long-lived stream through the front) sees only this cluster's new pods.
    let mut events = watcher(
        pods,
        watcher::Config::default().labels("tier=control-plane"),
    )
    .boxed();
    let mut listed = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .expect("the watch lists within 30 s")
            .expect("the watch goes on")
            .unwrap()
        {
            watcher::Event::InitApply(pod) => listed.push(pod),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(listed.len(), 4, "{:?}", names(&listed));
    machine(&admin, "b-2", "b").await;
    machine(&admin, "a-2", "a").await;
    let watch_started = tokio::time::Instant::now();
    let mut applied = Vec::new();
    while applied.len() < 4 {
        let event = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .unwrap_or_else(|_| panic!("only {applied:?} after {:?}", watch_started.elapsed()))
            .expect("the watch goes on")
            .unwrap();
        if let watcher::Event::Apply(pod) = event {
            let name = pod.name_any();
            assert!(name.ends_with("node-a-2"), "cluster a saw {name}");
            if !applied.contains(&name) {
                applied.push(name);
            }
        }
    }
}
