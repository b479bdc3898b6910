//! Minor upgrades one release at a time, 1.34 → 1.35 → 1.36 → 1.37, on simulated nodes that run their
//! Machine's release: each new control-plane machine runs the kubeadm of its version, and the
//! kube-apiserver and etcd its manifests name (etcd 3.6 up to 1.36, 3.7 from 1.37), beside the older
//! machines it replaces. Bumping `KUBERNETES_VERSION` and re-applying the template is the whole user
//! action (the KubeadmControlPlane and the MachineDeployment both carry it). The same chain runs on real
//! nodes in `make e2e-real` ([`crate::real_nodes`]): each node then boots the kubelet, kubeadm and images of
//! its Machine's release.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use e2e_tests::Env;
use e2e_tests::env::{NS, REAL_NODES_TEMPLATE, render_template};
use e2e_tests::etcd_watch::EtcdWatch;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use kubeadm_api::cluster::v1beta2::{Machine, MachineDeployment};
use testenv::binaries::ToolModule;

use crate::scenarios::{
    SAMPLE_EVERY, assert_membership_was_safe, step_timeout, stop_and_check_nothing_is_left, vars,
};

const WORKERS: usize = 2;

/// The machines the chain runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Nodes {
    /// Simulated nodes (`templates/cluster-template-sim.yaml`).
    Simulated,
    /// systemd-nspawn nodes with real cloud-init, kubelet and containerd
    /// (`templates/cluster-template-sim-real.yaml`).
    Real,
}

impl Nodes {
    fn cluster(self) -> &'static str {
        match self {
            Self::Simulated => "chain",
            Self::Real => "rchain",
        }
    }

    async fn apply(self, env: &Env, settings: &BTreeMap<&str, String>) {
        match self {
            Self::Simulated => env.apply_template(settings).await,
            Self::Real => {
                env.apply(&render_template(REAL_NODES_TEMPLATE, settings))
                    .await
            }
        }
    }

    /// How long one upgrade may take: 3 control-plane and 2 worker machines replaced one at a time.
    fn upgrade_timeout(self) -> Duration {
        match self {
            Self::Simulated => step_timeout() * 3,
            // A real control-plane join takes about a minute to its Node Ready (make bench-real).
            Self::Real => Duration::from_secs(1200),
        }
    }
}

fn is_control_plane(machine: &Machine) -> bool {
    machine
        .labels()
        .contains_key("cluster.x-k8s.io/control-plane")
}

/// Whether `machine` runs `version`, has its Node and is not leaving.
fn settled_at(machine: &Machine, version: &str) -> bool {
    machine.spec.version.as_deref() == Some(version)
        && machine.meta().deletion_timestamp.is_none()
        && machine
            .status
            .as_ref()
            .is_some_and(|s| s.node_ref.is_some())
}

/// Waits until every machine runs `version` (3 control-plane machines, [`WORKERS`] workers); returns the
/// names of every control-plane machine seen meanwhile.
async fn wait_upgraded(
    env: &Env,
    cluster: &str,
    version: &str,
    timeout: Duration,
) -> BTreeSet<String> {
    let deadline = Instant::now() + timeout;
    let mut seen = BTreeSet::new();
    loop {
        let machines = env.machines(cluster).await;
        seen.extend(
            machines
                .iter()
                .filter(|m| is_control_plane(m))
                .map(ResourceExt::name_any),
        );
        let (control_planes, workers): (Vec<&Machine>, Vec<&Machine>) =
            machines.iter().partition(|m| is_control_plane(m));
        let md = Api::<MachineDeployment>::namespaced(env.client.clone(), NS)
            .get(&format!("{cluster}-md-0"))
            .await
            .unwrap();
        let md_done = md.status.as_ref().and_then(|s| s.up_to_date_replicas)
            == Some(WORKERS as i32)
            && md.status.as_ref().and_then(|s| s.replicas) == Some(WORKERS as i32);
        if control_planes.len() == 3
            && control_planes.iter().all(|m| settled_at(m, version))
            && workers.len() == WORKERS
            && workers.iter().all(|m| settled_at(m, version))
            && md_done
        {
            return seen;
        }
        assert!(
            Instant::now() < deadline,
            "not every machine at {version} after {timeout:?}: {:?}\n{}",
            machines
                .iter()
                .map(|m| (
                    m.name_any(),
                    m.spec.version.clone(),
                    m.status
                        .as_ref()
                        .and_then(|s| s.node_ref.as_ref().map(|n| n.name.clone())),
                    m.meta().deletion_timestamp.is_some()
                ))
                .collect::<Vec<_>>(),
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The etcd release kubeadm of `version` deploys here: 3.7 from Kubernetes 1.37, 3.6 before.
fn etcd_build_of(version: &str) -> String {
    let minor: u32 = version.split('.').nth(1).unwrap().parse().unwrap();
    let module = if minor >= 37 {
        ToolModule::EtcdRelease(7)
    } else {
        ToolModule::Etcd
    };
    module.version().trim_start_matches('v').to_owned()
}

/// Waits until every voter of the last sample runs `want`; returns the versions seen.
async fn wait_etcd_versions(watch: &EtcdWatch, want: &str) -> Vec<(String, String)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(sample) = watch.last() {
            if sample.versions.len() == 3 && sample.versions.iter().all(|(_, v)| v == want) {
                return sample.versions;
            }
            assert!(
                Instant::now() < deadline,
                "etcd voters run {:?}, not all {want}",
                sample.versions
            );
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_upgrades_one_minor_at_a_time_on_the_releases_its_machines_run() {
    upgrade_chain(Nodes::Simulated).await;
}

/// Creates a 3 + [`WORKERS`] cluster at the oldest release built here and upgrades it one minor at a time
/// to the newest, with the etcd watch and the workload API probed throughout; on real nodes every Node's
/// kubelet runs the release and every kube-system pod runs after each step. Returns the environment's
/// folder once the environment is stopped and its processes are gone.
pub(crate) async fn upgrade_chain(nodes: Nodes) -> std::path::PathBuf {
    let cluster = nodes.cluster();
    let kcp = format!("{cluster}-control-plane");
    let started = Instant::now();
    let chain = testenv::binaries::kubernetes_releases();
    assert!(chain.len() >= 2, "no release to upgrade to: {chain:?}");
    let env = Env::start(&[]).await;
    let mut settings = vars(cluster, 3, WORKERS as u32);
    settings.insert("KUBERNETES_VERSION", chain[0].clone());
    nodes.apply(&env, &settings).await;
    let watch = EtcdWatch::start(
        env.client.clone(),
        NS,
        cluster,
        env.sim.view(),
        SAMPLE_EVERY,
    );
    env.wait_control_plane(&kcp, 3, nodes.upgrade_timeout(), "create 3")
        .await;
    let mut control_planes = wait_upgraded(&env, cluster, &chain[0], nodes.upgrade_timeout()).await;
    watch
        .wait_voters(
            control_planes.iter().cloned().collect(),
            Duration::from_secs(60),
            "create 3",
        )
        .await;
    wait_etcd_versions(&watch, &etcd_build_of(&chain[0])).await;
    let mut pids: BTreeSet<u32> = env.pids().into_iter().collect();
    println!(
        "create 3 + {WORKERS} workers at {}: {:.1?}",
        chain[0],
        started.elapsed()
    );

    let workload = e2e_tests::api_probe::workload_client(&env.client, NS, cluster)
        .await
        .unwrap();
    if nodes == Nodes::Real {
        real_nodes_run(&workload, &chain[0]).await;
    }
    let probe = e2e_tests::api_probe::ApiProbe::start(workload.clone(), SAMPLE_EVERY);
    for version in &chain[1..] {
        let step = Instant::now();
        let before = control_planes.clone();
        settings.insert("KUBERNETES_VERSION", version.clone());
        nodes.apply(&env, &settings).await;
        let seen = wait_upgraded(&env, cluster, version, nodes.upgrade_timeout()).await;
        env.wait_control_plane(&kcp, 3, step_timeout(), version)
            .await;
        control_planes = env
            .machines(cluster)
            .await
            .iter()
            .filter(|m| is_control_plane(m))
            .map(ResourceExt::name_any)
            .collect();
        // Each old machine replaced once: a feature gate kubeadm flips between releases
        // (ControlPlaneKubeletLocalMode until 1.36) must not roll the new ones again.
        let created: BTreeSet<&String> = seen.difference(&before).collect();
        assert_eq!(
            created.len(),
            3,
            "{version}: control-plane machines created {created:?}, for the 3 of {before:?}"
        );
        assert!(
            control_planes.is_disjoint(&before),
            "{version}: {before:?} → {control_planes:?}"
        );
        watch
            .wait_voters(
                control_planes.iter().cloned().collect(),
                Duration::from_secs(60),
                version,
            )
            .await;
        let etcd = wait_etcd_versions(&watch, &etcd_build_of(version)).await;

        // The cluster's own record follows the release: kubeadm's ClusterConfiguration, kube-proxy.
        let kubeadm_config = Api::<ConfigMap>::namespaced(workload.clone(), "kube-system")
            .get("kubeadm-config")
            .await
            .unwrap();
        let cluster_configuration = kubeadm_config
            .data
            .unwrap_or_default()
            .remove("ClusterConfiguration")
            .unwrap_or_default();
        assert!(
            cluster_configuration.contains(&format!("kubernetesVersion: {version}\n")),
            "{version}: kubeadm-config holds {cluster_configuration}"
        );
        let kube_proxy = Api::<DaemonSet>::namespaced(workload.clone(), "kube-system")
            .get("kube-proxy")
            .await
            .unwrap();
        let image = kube_proxy
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|s| s.containers.first().and_then(|c| c.image.clone()))
            .unwrap_or_default();
        assert!(
            image.ends_with(&format!("/kube-proxy:{version}")),
            "{version}: kube-proxy runs {image}"
        );
        if nodes == Nodes::Real {
            real_nodes_run(&workload, version).await;
        }
        pids.extend(env.pids());
        println!(
            "upgrade to {version}: {:.1?} (control plane {:?}, etcd {etcd:?})",
            step.elapsed(),
            control_planes
        );
    }

    // Nothing rolls once the last release is reached.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after: BTreeSet<String> = env
        .machines(cluster)
        .await
        .iter()
        .filter(|m| is_control_plane(m) && m.meta().deletion_timestamp.is_none())
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(
        after, control_planes,
        "a machine rolled after the last upgrade"
    );

    let samples = assert_membership_was_safe(&watch, "upgrade chain");
    let (answered, failed, outage) = probe.summary();
    println!(
        "workload API during the upgrades: {answered} answers, {failed} failures, longest outage {outage:.1?}"
    );
    assert!(
        answered > 0 && outage < Duration::from_secs(5),
        "the workload API server was unreachable for {outage:?} ({failed} failed calls)"
    );
    drop(probe);
    drop(watch);
    drop(workload);
    let dir = env.plane.dir().to_owned();
    stop_and_check_nothing_is_left(env, pids).await;
    println!(
        "scenario upgrade chain {} on {nodes:?} nodes: {:.1?} wall time, {samples} membership samples",
        chain.join(" → "),
        started.elapsed()
    );
    dir
}

/// On real nodes after a step: every Node's kubelet is `version`'s, and every kube-system pod runs.
async fn real_nodes_run(workload: &kube::Client, version: &str) {
    let all = 3 + WORKERS;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let kubelets: Vec<(String, String)> = Api::<Node>::all(workload.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|n| {
                let info = n.status.as_ref().and_then(|s| s.node_info.as_ref());
                (
                    n.name_any(),
                    info.map(|i| i.kubelet_version.clone()).unwrap_or_default(),
                )
            })
            .collect();
        // The Nodes of deleted machines go with them (Cluster API deletes them after the drain).
        if kubelets.len() == all && kubelets.iter().all(|(_, v)| v == version) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{version}: Nodes and their kubelets: {kubelets:?}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    crate::real_nodes::wait_system_pods(workload, 3, all).await;
}
