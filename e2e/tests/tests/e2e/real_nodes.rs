//! Real nodes (`templates/cluster-template-sim-real.yaml`, a SimCluster with `spec.nodes: Real`): every
//! machine is a systemd-nspawn node that boots our bootstrap data with real cloud-init, kubeadm, containerd
//! and kubelet. The cluster becomes ready through Cluster API's own core manager (each Node found by the
//! provider ID our rendered kubelet flags give it); the workload cluster's own parts run: the kubelets'
//! and containerd's versions are the release's, every kube-system pod runs, and a pod on one worker
//! reaches a Service backed by a pod on the other worker by its DNS name, through CoreDNS and kube-proxy.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use e2e_tests::env::{Env, NS, REAL_NODES_TEMPLATE, render_template};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use kubeadm_api::cluster::v1beta2::Machine;

/// CI's: one control-plane node and two workers, for the Service across workers (about 2 minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_nodes_run_the_cluster_and_a_pod_reaches_a_service_by_name() {
    real_cluster("real", 1, 2).await;
}

/// The quickstart's shape on real nodes: three control-plane nodes (two real `kubeadm join`s through
/// etcd's learner path) and two workers (`make e2e-real`, about 6 minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "minutes of real nodes; run by `make e2e-real`"]
async fn real_nodes_in_the_quickstart_shape() {
    real_cluster("realqs", 3, 2).await;
}

async fn real_cluster(name: &str, control_planes: i32, workers: usize) {
    let sysctls_before = sim::nspawn::machine_sysctls();
    let env = Env::start(&[]).await;
    let release = testenv::binaries::ToolModule::KubernetesNode.version();
    let vars = BTreeMap::from([
        ("CLUSTER_NAME", name.to_owned()),
        ("KUBERNETES_VERSION", release.clone()),
        ("CONTROL_PLANE_MACHINE_COUNT", control_planes.to_string()),
        ("WORKER_MACHINE_COUNT", workers.to_string()),
    ]);
    let started = Instant::now();
    env.apply(&render_template(REAL_NODES_TEMPLATE, &vars))
        .await;
    let kcp = format!("{name}-control-plane");
    env.wait_control_plane(&kcp, control_planes, Duration::from_secs(900), "real nodes")
        .await;
    wait_workers(&env, name, workers).await;
    println!(
        "{control_planes} + {workers} real nodes ready in {:.1?}",
        started.elapsed()
    );

    let workload = e2e_tests::api_probe::workload_client(&env.client, NS, name)
        .await
        .unwrap();
    let nodes = Api::<Node>::all(workload.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(nodes.len(), control_planes as usize + workers);
    for node in &nodes {
        let info = node.status.as_ref().and_then(|s| s.node_info.clone());
        let info = info.expect("a registered Node has its node info");
        assert_eq!(info.kubelet_version, release, "{}", node.name_any());
        assert!(
            info.container_runtime_version
                .starts_with("containerd://1."),
            "{}: {}",
            node.name_any(),
            info.container_runtime_version
        );
        // Registered by its kubelet with the provider ID our bootstrap data gave it.
        assert_eq!(
            node.spec.as_ref().and_then(|s| s.provider_id.clone()),
            Some(sim::real_node::instance_id(NS, &node.name_any())),
        );
    }
    wait_system_pods(&workload, control_planes as usize, nodes.len()).await;

    let worker_nodes: Vec<String> = env
        .machines(name)
        .await
        .iter()
        .filter(|m| !m.labels().contains_key("cluster.x-k8s.io/control-plane"))
        .filter_map(|m| m.status.as_ref()?.node_ref.as_ref().map(|n| n.name.clone()))
        .collect();
    a_pod_reaches_a_service_by_name(&workload, &worker_nodes).await;

    let pid = std::process::id();
    let dir = env.plane.dir().to_owned();
    drop(workload);
    drop(env);
    left_nothing_behind(pid, &dir, &sysctls_before);
}

async fn wait_workers(env: &Env, cluster: &str, workers: usize) {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let machines: Vec<Machine> = env
            .machines(cluster)
            .await
            .into_iter()
            .filter(|m| !m.labels().contains_key("cluster.x-k8s.io/control-plane"))
            .collect();
        let with_node = machines
            .iter()
            .filter(|m| m.status.as_ref().is_some_and(|s| s.node_ref.is_some()))
            .count();
        if machines.len() == workers && with_node == workers {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{with_node} of {workers} workers have a Node\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Every kube-system pod runs: the control plane's static pods on each control-plane node, kube-proxy on
/// every node, CoreDNS's two replicas.
async fn wait_system_pods(workload: &kube::Client, control_planes: usize, nodes: usize) {
    let pods = Api::<Pod>::namespaced(workload.clone(), "kube-system");
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let list = pods.list(&ListParams::default()).await.unwrap().items;
        let running = |prefix: &str| {
            list.iter()
                .filter(|p| p.name_any().starts_with(prefix))
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count()
        };
        let all_running = list
            .iter()
            .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        let complete = [
            "etcd-",
            "kube-apiserver-",
            "kube-controller-manager-",
            "kube-scheduler-",
        ]
        .iter()
        .all(|c| running(c) == control_planes)
            && running("kube-proxy-") == nodes
            && running("coredns-") == 2;
        if all_running && complete {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "kube-system: {:#?}",
            phases(&list)
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

fn phases(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .map(|p| {
            let status = p.status.clone().unwrap_or_default();
            format!(
                "{} on {:?}: {:?}",
                p.name_any(),
                p.spec.as_ref().and_then(|s| s.node_name.clone()),
                status.phase
            )
        })
        .collect()
}

/// A key-value store (etcd, from the node image of the release; nothing is pulled) on the first worker
/// behind a Service; on the second worker, etcdctl writes to it by the Service's DNS name: the name
/// resolved by CoreDNS, the ClusterIP translated by kube-proxy, the packets routed between the
/// workers' pod networks.
async fn a_pod_reaches_a_service_by_name(workload: &kube::Client, workers: &[String]) {
    assert!(workers.len() >= 2, "two workers: {workers:?}");
    let image = testenv::images::node_images()
        .unwrap()
        .into_iter()
        .find(|i| i.component() == "etcd")
        .expect("kubeadm lists an etcd image")
        .reference;
    let pods = Api::<Pod>::namespaced(workload.clone(), "default");
    let server: Pod = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "store", "labels": { "app": "store" } },
        "spec": {
            "nodeSelector": { "kubernetes.io/hostname": workers[0] },
            "containers": [{
                "name": "etcd",
                "image": image,
                "imagePullPolicy": "Never",
                "command": [
                    "/usr/local/bin/etcd", "--name=store", "--data-dir=/store",
                    "--listen-client-urls=http://0.0.0.0:2379",
                    "--advertise-client-urls=http://store.default.svc:2379",
                    "--listen-peer-urls=http://127.0.0.1:2380",
                    "--initial-advertise-peer-urls=http://127.0.0.1:2380",
                    "--initial-cluster=store=http://127.0.0.1:2380",
                ],
                "ports": [{ "containerPort": 2379 }],
            }],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &server).await.unwrap();
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "store" },
        "spec": { "selector": { "app": "store" }, "ports": [{ "port": 2379 }] },
    }))
    .unwrap();
    Api::<Service>::namespaced(workload.clone(), "default")
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let client: Pod = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "writer" },
        "spec": {
            "nodeSelector": { "kubernetes.io/hostname": workers[1] },
            // Until the store answers; the pod succeeds once a write went through.
            "restartPolicy": "OnFailure",
            "containers": [{
                "name": "etcdctl",
                "image": image,
                "imagePullPolicy": "Never",
                "command": [
                    "/usr/local/bin/etcdctl",
                    "--endpoints=http://store.default.svc.cluster.local:2379",
                    "--dial-timeout=5s", "put", "greeting", "hello",
                ],
            }],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &client).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let writer = pods.get("writer").await.unwrap();
        let phase = writer.status.as_ref().and_then(|s| s.phase.clone());
        if phase.as_deref() == Some("Succeeded") {
            let log = pods
                .logs("writer", &Default::default())
                .await
                .unwrap_or_default();
            assert!(log.contains("OK"), "etcdctl put said: {log}");
            return;
        }
        if Instant::now() > deadline {
            let log = |name: &'static str| {
                let pods = pods.clone();
                async move {
                    pods.logs(name, &Default::default())
                        .await
                        .unwrap_or_else(|e| e.to_string())
                }
            };
            panic!(
                "the writer did not reach the store by name: {phase:?}\nwriter: {}\nstore: {}\npods: {:#?}",
                log("writer").await,
                log("store").await,
                phases(&pods.list(&ListParams::default()).await.unwrap().items)
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Once the environment is gone: no node's cgroup, mount, network namespace or record of this process
/// is left, and the kernel settings are as before.
fn left_nothing_behind(pid: u32, dir: &Path, sysctls_before: &[String]) {
    let suffix = format!("-{pid}");
    let cgroups: Vec<String> = std::fs::read_dir("/sys/fs/cgroup/pids")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("node-") && n.ends_with(&suffix))
        .collect();
    assert!(cgroups.is_empty(), "cgroups left: {cgroups:?}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.display().to_string();
    let left: Vec<&str> = mounts.lines().filter(|l| l.contains(&dir)).collect();
    assert!(left.is_empty(), "mounts left: {left:#?}");
    let netns = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let netns = String::from_utf8_lossy(&netns.stdout);
    assert!(
        !netns.contains(&format!("-{pid}-")),
        "network namespaces left: {netns}"
    );
    let records = testenv::binaries::cache_root().join("nodes");
    let ours: Vec<String> = std::fs::read_dir(records)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("{pid}-")))
        .collect();
    assert!(ours.is_empty(), "node records left: {ours:?}");
    assert_eq!(
        sim::nspawn::machine_sysctls(),
        sysctls_before,
        "kernel settings"
    );
}
