//! Real nodes (`templates/cluster-template-sim-real.yaml`, a SimCluster with `spec.nodes: Real`): every
//! machine is a systemd-nspawn node that boots our bootstrap data with real cloud-init, kubeadm, containerd
//! and kubelet. The cluster becomes ready through Cluster API's own core manager (each Node found by the
//! provider ID our rendered kubelet flags give it); the workload cluster's own parts run: the kubelets'
//! and containerd's versions are the release's, every kube-system pod runs, and a pod on one worker
//! reaches a Service backed by a pod on the other worker by its DNS name, through CoreDNS and kube-proxy.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use e2e_tests::api_probe::ApiProbe;
use e2e_tests::env::{Env, NS, REAL_NODES_TEMPLATE, render_template};
use e2e_tests::etcd_watch::EtcdWatch;
use e2e_tests::replacements::Replacements;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::api::{Api, ListParams, PostParams};
use kube::{Resource, ResourceExt};
use kubeadm_api::cluster::v1beta2::Machine;

/// CI's: one control-plane node and two workers, for the Service across workers (about 2 minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_nodes_run_the_cluster_and_a_pod_reaches_a_service_by_name() {
    real_cluster("real", 1, 2).await;
}

/// The quickstart's shape on real nodes: three control-plane nodes (two real `kubeadm join`s through
/// etcd's learner path) and two workers; then a generation rollout of the control plane with the etcd
/// watch and the workload API probed throughout (`make e2e-real`, about 12 minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "minutes of real nodes; run by `make e2e-real`"]
async fn real_nodes_in_the_quickstart_shape() {
    real_cluster("realqs", 3, 2).await;
}

/// The upgrade chain of [`crate::upgrade`] on real nodes: a 3 + 2 cluster created at the oldest release
/// built here and upgraded one minor at a time to the newest, each node booting the kubelet, kubeadm and
/// images of its Machine's release; etcd moves to 3.7 with 1.37 (`make e2e-real`, which builds the other
/// releases' node components; about 25 minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "minutes of real nodes; run by `make e2e-real`"]
async fn real_nodes_upgrade_one_minor_at_a_time() {
    sim::nspawn::clean_up_after_dead_processes();
    let sysctls_before = sim::nspawn::machine_sysctls_without_nodes();
    let pid = std::process::id();
    let dir = crate::upgrade::upgrade_chain(crate::upgrade::Nodes::Real).await;
    left_nothing_behind(pid, &dir, &sysctls_before);
}

/// etcd restored from object storage by a real node: one control-plane node's etcd (a marker and 8 MiB
/// of ConfigMaps) is snapshotted into versitygw on its schedule, the node is lost, and the restore from
/// the stored snapshot asked for. A first restoring node finds the store down: its boot stops at the
/// failed restore (real cloud-init runs `runcmd` without `-e`; our command ends it) and nothing is
/// recorded. With the store back and that machine deleted, the next node's real cloud-init runs our
/// restore script: `curl` fetches the presigned URL across the bridge, `sha256sum` checks it, etcdutl
/// runs from the preloaded etcd image through containerd (no registry answers here), then `kubeadm
/// init`. The data is the snapshot's (`make e2e-real`, about 4 minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "minutes of real nodes; run by `make e2e-real`"]
async fn real_nodes_restore_etcd_from_object_storage() {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::api::{Patch, PatchParams};
    use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
    use kubeadm_api::meta::{ETCD_RESTORE_FROM_ANNOTATION, ETCD_RESTORED_ANNOTATION};
    use testenv::object_store::{ObjectStore, ObjectStoreOptions};
    const FILL: usize = 8;

    sim::nspawn::clean_up_after_dead_processes();
    let sysctls_before = sim::nspawn::machine_sysctls_without_nodes();
    let mut env = Env::start(&[]).await;
    let store_dir = tempfile::tempdir().unwrap();
    // Where the nodes reach the host: the store's presigned URLs name this address.
    let gateway = env
        .sim
        .gateway()
        .expect("real nodes live in network namespaces");
    let mut store = ObjectStore::start(
        store_dir.path(),
        ObjectStoreOptions {
            address: Some(gateway),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    store.create_bucket("backups").unwrap();
    let (name, kcp) = ("realrestore", "realrestore-control-plane");
    let vars = BTreeMap::from([
        ("CLUSTER_NAME", name.to_owned()),
        (
            "KUBERNETES_VERSION",
            testenv::binaries::ToolModule::KubernetesNode.version(),
        ),
        ("CONTROL_PLANE_MACHINE_COUNT", "1".to_owned()),
        ("WORKER_MACHINE_COUNT", "0".to_owned()),
    ]);
    env.apply(&render_template(REAL_NODES_TEMPLATE, &vars))
        .await;
    env.wait_control_plane(kcp, 1, Duration::from_secs(900), "a real node")
        .await;
    let lost = control_plane_names(&env.machines(name).await);

    let workload = e2e_tests::api_probe::workload_client(&env.client, NS, name)
        .await
        .unwrap();
    let marker = |name: &str| -> ConfigMap {
        serde_json::from_value(serde_json::json!({ "metadata": { "name": name } })).unwrap()
    };
    let config_maps = Api::<ConfigMap>::namespaced(workload, "default");
    config_maps
        .create(&PostParams::default(), &marker("in-the-snapshot"))
        .await
        .unwrap();
    e2e_tests::api_probe::fill(&env.client, NS, name, FILL, 1 << 20).await;

    e2e_tests::backup::back_up_now(&env.client, NS, kcp, &store, "backups", Default::default())
        .await;
    let snapshot =
        e2e_tests::backup::wait_recorded(&env, kcp, "s3://", Duration::from_secs(300)).await;
    let kcps = Api::<KubeadmControlPlane>::namespaced(env.client.clone(), NS);
    config_maps
        .create(&PostParams::default(), &marker("after-the-snapshot"))
        .await
        .unwrap();

    // The node goes, etcd with it; the restore is asked for.
    for machine in &lost {
        assert!(env.sim.lose(NS, machine), "{machine} was not running");
    }
    let restore = serde_json::json!({
        "metadata": { "annotations": { ETCD_RESTORE_FROM_ANNOTATION: snapshot } },
    });
    kcps.patch(kcp, &PatchParams::default(), &Patch::Merge(&restore))
        .await
        .unwrap();
    // The first restoring node cannot fetch the snapshot: the store stops once the controller has
    // checked and staged it. The node's boot stops at the failed restore; kubeadm never starts an
    // empty etcd, and the restore is not recorded.
    let staged = format!("{name}-etcd-restore");
    let secrets = Api::<Secret>::namespaced(env.client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(300);
    while secrets.get_opt(&staged).await.unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "nothing staged\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    store.stop();
    let failed = wait_failed_boot(&env, name).await;
    assert!(
        !kcps
            .get(kcp)
            .await
            .unwrap()
            .annotations()
            .contains_key(ETCD_RESTORED_ANNOTATION),
        "a restore whose node failed is recorded"
    );
    // The store is back; the failed machine is deleted, as its owner would, and another restores.
    store.restart().await.unwrap();
    let asked_at = Instant::now();
    Api::<Machine>::namespaced(env.client.clone(), NS)
        .delete(&failed, &Default::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(900);
    while !kcps
        .get(kcp)
        .await
        .unwrap()
        .annotations()
        .contains_key(ETCD_RESTORED_ANNOTATION)
    {
        assert!(
            Instant::now() < deadline,
            "the restore did not finish\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let restored = asked_at.elapsed();
    env.wait_control_plane(kcp, 1, Duration::from_secs(900), "restored on a real node")
        .await;
    let now = control_plane_names(&env.machines(name).await);
    assert!(
        now.iter().all(|m| !lost.contains(m) && *m != failed),
        "{now:?} after {lost:?} and {failed}"
    );

    // The data is the snapshot's, read through the new node's API server.
    let workload = e2e_tests::api_probe::workload_client(&env.client, NS, name)
        .await
        .unwrap();
    let config_maps = Api::<ConfigMap>::namespaced(workload, "default");
    let names: Vec<String> = config_maps
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert!(names.contains(&"in-the-snapshot".to_owned()), "{names:?}");
    assert!(
        !names.contains(&"after-the-snapshot".to_owned()),
        "{names:?}"
    );
    assert_eq!(
        names.iter().filter(|n| n.starts_with("fill-")).count(),
        FILL,
        "{names:?}"
    );
    println!(
        "restored from {snapshot} on a real node {restored:.1?} after the failed machine was deleted"
    );

    env.assert_no_manager_exited();
    let pid = std::process::id();
    let dir = env.plane.dir().to_owned();
    drop(config_maps);
    drop(env);
    store.stop();
    left_nothing_behind(pid, &dir, &sysctls_before);
}

/// Waits until the machine restoring `cluster`'s etcd reports that its boot failed; returns its name.
async fn wait_failed_boot(env: &Env, cluster: &str) -> String {
    use kubeadm_api::meta::ETCD_RESTORE_SNAPSHOT_ANNOTATION;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        for machine in env.machines(cluster).await {
            if !machine
                .annotations()
                .contains_key(ETCD_RESTORE_SNAPSHOT_ANNOTATION)
            {
                continue;
            }
            let infrastructure = &machine.spec.infrastructure_ref.name;
            let status = Api::<sim::api::SimMachine>::namespaced(env.client.clone(), NS)
                .get_opt(infrastructure)
                .await
                .unwrap()
                .and_then(|m| m.status);
            if let Some(status) = status
                && status.failure_reason.as_deref() == Some("BootstrapFailed")
            {
                println!(
                    "{} failed to boot: {}",
                    machine.name_any(),
                    status.failure_message.unwrap_or_default()
                );
                return machine.name_any();
            }
        }
        assert!(
            Instant::now() < deadline,
            "no restoring machine failed to boot\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn real_cluster(name: &str, control_planes: i32, workers: usize) {
    sim::nspawn::clean_up_after_dead_processes();
    let sysctls_before = sim::nspawn::machine_sysctls_without_nodes();
    let mut env = Env::start(&[]).await;
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
            Some(sim::api::provider_id(NS, &node.name_any())),
        );
    }
    wait_system_pods(&workload, control_planes as usize, nodes.len()).await;
    cloud_init_ran_what_we_asked(&env, nodes.len()).await;

    let worker_nodes: Vec<String> = env
        .machines(name)
        .await
        .iter()
        .filter(|m| !m.labels().contains_key("cluster.x-k8s.io/control-plane"))
        .filter_map(|m| m.status.as_ref()?.node_ref.as_ref().map(|n| n.name.clone()))
        .collect();
    a_pod_reaches_a_service_by_name(&workload, &worker_nodes).await;
    if control_planes == 3 {
        let watch = roll_the_control_plane(&env, name, &vars, workload.clone()).await;
        remediate_a_powered_off_node(&env, name, &watch).await;
    }

    env.assert_no_manager_exited();
    let pid = std::process::id();
    let dir = env.plane.dir().to_owned();
    drop(workload);
    drop(env);
    left_nothing_behind(pid, &dir, &sysctls_before);
}

/// Bumps the control plane's generation counter and re-applies the template, as Sovereign Cloud Stack
/// does: three real joins replace the three nodes one at a time. Every etcd sample has quorum and at
/// most one learner, the members are the new nodes at the end, and the workload API answers throughout.
async fn roll_the_control_plane(
    env: &Env,
    cluster: &str,
    vars: &BTreeMap<&str, String>,
    workload: kube::Client,
) -> EtcdWatch {
    let generation = "controlplane.cluster.x-k8s.io/machine-generation";
    let watch = EtcdWatch::start(
        env.client.clone(),
        NS,
        cluster,
        env.sim.view(),
        Duration::from_millis(250),
    );
    let first = control_plane_names(&env.machines(cluster).await);
    watch
        .wait_voters(
            first.clone(),
            Duration::from_secs(120),
            "before the rollout",
        )
        .await;
    let mut replacements = Replacements::new();
    let probe = ApiProbe::start(workload, Duration::from_millis(250));
    let mut bumped = vars.clone();
    bumped.insert("CONTROL_PLANE_MACHINE_GEN", "genc02".into());
    let roll = Instant::now();
    env.apply(&render_template(REAL_NODES_TEMPLATE, &bumped))
        .await;
    let deadline = Instant::now() + Duration::from_secs(900);
    let rolled = loop {
        let machines: Vec<Machine> = env
            .machines(cluster)
            .await
            .into_iter()
            .filter(|m| m.labels().contains_key("cluster.x-k8s.io/control-plane"))
            .collect();
        replacements.saw(machines.iter().map(ResourceExt::name_any));
        let done = machines.len() == 3
            && machines.iter().all(|m| {
                m.labels().get(generation).map(String::as_str) == Some("genc02")
                    && m.status.as_ref().is_some_and(|s| s.node_ref.is_some())
                    && m.meta().deletion_timestamp.is_none()
            });
        if done {
            break control_plane_names(&machines);
        }
        assert!(
            Instant::now() < deadline,
            "the rollout did not finish\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    if let Err(e) = replacements.check("real rollout", &rolled, |n| first.iter().any(|m| m == n)) {
        panic!("{e}\n{}", env.diagnostics().await);
    }
    watch
        .wait_voters(rolled, Duration::from_secs(120), "after the rollout")
        .await;
    let samples = watch.assert_safe("real rollout");
    let (answered, failed, outage) = probe.summary();
    println!(
        "rollout of 3 real control-plane nodes in {:.1?}; {samples} etcd samples; workload API: {answered} answers, {failed} failures, longest outage {outage:.1?}",
        roll.elapsed()
    );
    assert!(
        answered > 0 && outage < Duration::from_secs(5),
        "the workload API was out for {outage:?} ({failed} failures)"
    );
    watch
}

fn control_plane_names(machines: &[Machine]) -> Vec<String> {
    machines
        .iter()
        .filter(|m| m.labels().contains_key("cluster.x-k8s.io/control-plane"))
        .map(ResourceExt::name_any)
        .collect()
}

/// A control-plane node is powered off: the workload cluster's own node-lifecycle controller marks its
/// Node not ready once its kubelet stops posting status, Cluster API's MachineHealthCheck marks the
/// Machine, and our control plane replaces it (its etcd member removed, a new one joined through a
/// learner), with quorum in every sample.
async fn remediate_a_powered_off_node(env: &Env, cluster: &str, watch: &EtcdWatch) {
    let kcp = format!("{cluster}-control-plane");
    env.apply(&format!(
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: MachineHealthCheck\nmetadata:\n  name: {kcp}\n\
         spec:\n  clusterName: {cluster}\n  selector:\n    matchLabels:\n      cluster.x-k8s.io/control-plane: \"\"\n\
         \x20 checks:\n    nodeStartupTimeoutSeconds: 600\n    unhealthyNodeConditions:\n\
         \x20   - {{type: Ready, status: Unknown, timeoutSeconds: 10}}\n\
         \x20   - {{type: Ready, status: \"False\", timeoutSeconds: 10}}\n"
    ))
    .await;
    let before = control_plane_names(&env.machines(cluster).await);
    let lost = before[0].clone();
    let powered_off = Instant::now();
    assert!(env.sim.lose(NS, &lost), "{lost} was not running");
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut replacements = Replacements::new();
    let after = loop {
        let machines = env.machines(cluster).await;
        let names = control_plane_names(&machines);
        replacements.saw(&names);
        let settled = names.len() == 3
            && !names.contains(&lost)
            && machines.iter().all(|m| {
                m.meta().deletion_timestamp.is_none()
                    && m.status.as_ref().is_some_and(|s| s.node_ref.is_some())
            });
        if settled {
            break names;
        }
        assert!(
            Instant::now() < deadline,
            "{lost} was not replaced\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    if let Err(e) = replacements.check("remediation", &after, |n| n == lost) {
        panic!("{e}\n{}", env.diagnostics().await);
    }
    watch
        .wait_voters(after, Duration::from_secs(120), "after the remediation")
        .await;
    let samples = watch.assert_safe("remediation of a powered-off node");
    println!(
        "powered-off {lost} replaced {:.1?} after it went ({samples} etcd samples in all)",
        powered_off.elapsed()
    );
}

/// Each SimMachine shows cloud-init's result as its console would: every module our bootstrap data
/// asks for ran; the only one that fails is `locale`, which cloud-init runs on every boot and this
/// machine's root (the nodes' image) cannot (no en_US.UTF-8 locale).
async fn cloud_init_ran_what_we_asked(env: &Env, machines: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let sims = Api::<sim::api::SimMachine>::namespaced(env.client.clone(), NS)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        let results: Vec<(String, String, String)> = sims
            .iter()
            .filter_map(|m| {
                let c = m
                    .status
                    .as_ref()?
                    .conditions
                    .iter()
                    .find(|c| c.type_ == "CloudInitSucceeded")?;
                Some((m.name_any(), c.status.clone(), c.message.clone()))
            })
            .collect();
        if results.len() == machines {
            for (machine, status, message) in results {
                let failed: Vec<&str> = message
                    .split("('")
                    .skip(1)
                    .filter_map(|e| e.split('\'').next())
                    .collect();
                assert!(
                    status == "True" || failed.iter().all(|m| *m == "locale"),
                    "{machine}: cloud-init modules failed: {message}"
                );
            }
            return;
        }
        assert!(
            Instant::now() < deadline,
            "cloud-init's result on {} of {machines} machines",
            results.len()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

pub(crate) async fn wait_workers(env: &Env, cluster: &str, workers: usize) {
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
pub(crate) async fn wait_system_pods(workload: &kube::Client, control_planes: usize, nodes: usize) {
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
    let image =
        testenv::images::node_images(&testenv::binaries::ToolModule::KubernetesNode.version())
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
/// is left, and the kernel settings are the machine's own again unless another process runs nodes.
pub(crate) fn left_nothing_behind(pid: u32, dir: &Path, sysctls_before: &[String]) {
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
    // Written back, unless another process's nodes hold them (its last node writes them back).
    if !sim::nspawn::nodes_run_elsewhere() {
        assert_eq!(
            sim::nspawn::machine_sysctls(),
            sysctls_before,
            "kernel settings"
        );
    }
}
