//! A cluster of a ClusterClass, as Sovereign Cloud Stack's cluster-stacks drive Cluster API: the class's
//! control plane is our KubeadmControlPlaneTemplate, its workers use our KubeadmConfigTemplate, and
//! Cluster API's topology controller creates and upgrades everything, its dry-run server-side applies
//! going through our webhooks. Upgrades: a new class version (new template names), then a new Kubernetes
//! version.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use e2e_tests::Env;
use e2e_tests::env::{NS, SIM_CLUSTER_CLASS, SIM_TOPOLOGY_TEMPLATE, render_template, wait_gone};
use e2e_tests::replacements::Replacements;
use kube::api::Api;
use kube::{Resource, ResourceExt};
use kubeadm_api::cluster::v1beta2::{Cluster, Machine};

const CLUSTER: &str = "topo";
const STEP: Duration = Duration::from_secs(420);

fn vars(class_version: &str, kubernetes: &str) -> BTreeMap<&'static str, String> {
    [
        ("CLUSTER_NAME", CLUSTER.to_owned()),
        ("CLUSTER_CLASS_VERSION", class_version.to_owned()),
        ("KUBERNETES_VERSION", kubernetes.to_owned()),
        ("CONTROL_PLANE_MACHINE_COUNT", "1".to_owned()),
        ("WORKER_MACHINE_COUNT", "1".to_owned()),
    ]
    .into()
}

/// The KubeadmControlPlane the topology controller made for the cluster.
async fn control_plane_name(env: &Env) -> String {
    let deadline = Instant::now() + STEP;
    loop {
        let cluster = Api::<Cluster>::namespaced(env.client.clone(), NS)
            .get(CLUSTER)
            .await
            .unwrap();
        if let Some(reference) = cluster.spec.control_plane_ref {
            assert_eq!(reference.kind, "KubeadmControlPlane");
            return reference.name;
        }
        assert!(
            Instant::now() < deadline,
            "the topology controller set no controlPlaneRef\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until the cluster has one control-plane and one worker machine, none of `old`, each Ready with
/// a Node at `version`, and the Cluster's topology reconciled; returns the machines' names.
async fn wait_rolled(
    env: &Env,
    old: &BTreeSet<String>,
    version: &str,
    what: &str,
) -> BTreeSet<String> {
    let deadline = Instant::now() + STEP;
    let mut replacements = Replacements::new();
    loop {
        let machines: Vec<Machine> = env.machines(CLUSTER).await;
        replacements.saw(machines.iter().map(|m| m.name_any()));
        let ready = |m: &Machine| {
            m.meta().deletion_timestamp.is_none()
                && m.spec.version.as_deref() == Some(version)
                && m.status.as_ref().is_some_and(|s| {
                    s.node_ref.is_some()
                        && s.conditions
                            .iter()
                            .any(|c| c.type_ == "Ready" && c.status == "True")
                })
        };
        let names: BTreeSet<String> = machines.iter().map(|m| m.name_any()).collect();
        let reconciled = Api::<Cluster>::namespaced(env.client.clone(), NS)
            .get(CLUSTER)
            .await
            .unwrap()
            .status
            .is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "TopologyReconciled" && c.status == "True")
            });
        if machines.len() == 2 && machines.iter().all(ready) && names.is_disjoint(old) && reconciled
        {
            // Only the old machines went: none this change created was replaced again.
            let now: Vec<String> = names.iter().cloned().collect();
            if let Err(e) = replacements.check(what, &now, |n| old.contains(n)) {
                panic!("{e}\n{}", env.diagnostics().await);
            }
            return names;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not rolled after {STEP:?}; machines {names:?} (old {old:?}), topology reconciled: \
             {reconciled}\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_class_cluster_is_created_and_upgraded_through_our_templates() {
    let started = Instant::now();
    let mut env = Env::start(&[]).await;
    env.apply(&render_template(SIM_CLUSTER_CLASS, &vars("v1", "v1.33.1")))
        .await;
    env.apply(&render_template(
        SIM_TOPOLOGY_TEMPLATE,
        &vars("v1", "v1.33.1"),
    ))
    .await;
    let kcp = control_plane_name(&env).await;
    let created = wait_rolled(&env, &BTreeSet::new(), "v1.33.1", "create").await;
    println!("created from class v1: {:.1?}", started.elapsed());
    let mut pids: BTreeSet<u32> = env.pids().into_iter().collect();

    // The next class version: new template names; the Cluster names the new class.
    let step = Instant::now();
    env.apply(&render_template(SIM_CLUSTER_CLASS, &vars("v2", "v1.33.1")))
        .await;
    env.apply(&render_template(
        SIM_TOPOLOGY_TEMPLATE,
        &vars("v2", "v1.33.1"),
    ))
    .await;
    let on_v2 = wait_rolled(&env, &created, "v1.33.1", "class v1 → v2").await;
    assert_eq!(
        control_plane_name(&env).await,
        kcp,
        "the same control plane"
    );
    println!("class v1 → v2: {:.1?}", step.elapsed());
    pids.extend(env.pids());

    // A Kubernetes version bump through the topology.
    let step = Instant::now();
    env.apply(&render_template(
        SIM_TOPOLOGY_TEMPLATE,
        &vars("v2", "v1.34.4"),
    ))
    .await;
    wait_rolled(&env, &on_v2, "v1.34.4", "v1.33.1 → v1.34.4").await;
    let control_plane = env.kcp(&kcp).await;
    assert_eq!(control_plane.spec.version, "v1.34.4");
    // The topology controller applies the control plane server-side, and its dry-run applies went
    // through our webhooks: the strategy only our defaulting fills in is there, and with the topology
    // reconciled nothing is written again (a defaulting that differed between the dry run and the
    // real apply would make the controller patch forever).
    let strategy = serde_json::to_value(&control_plane.spec.rollout).unwrap();
    assert_eq!(
        strategy.pointer("/strategy/rollingUpdate/maxSurge"),
        Some(&serde_json::json!(1)),
        "defaulted by our webhook: {strategy}"
    );
    let managers: Vec<String> = control_plane
        .meta()
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| f.operation.as_deref() == Some("Apply"))
        .filter_map(|f| f.manager.clone())
        .collect();
    assert!(
        managers.iter().any(|m| m == "capi-topology"),
        "applied by the topology controller: {managers:?}"
    );
    let generation = control_plane.meta().generation;
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(
        env.kcp(&kcp).await.meta().generation,
        generation,
        "the topology controller keeps changing the control plane"
    );
    println!("v1.33.1 → v1.34.4: {:.1?}", step.elapsed());
    env.assert_no_secrets_logged().await;
    pids.extend(env.pids());
    env.assert_no_manager_exited();
    drop(env);
    let pids: Vec<u32> = pids.into_iter().collect();
    let alive = wait_gone(&pids, Duration::from_secs(30)).await;
    assert!(alive.is_empty(), "processes still running: {alive:?}");
    println!(
        "scenario ClusterClass create + class upgrade + version upgrade: {:.1?} wall time",
        started.elapsed()
    );
}
