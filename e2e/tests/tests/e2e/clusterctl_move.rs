//! `clusterctl move` of a running cluster between two management planes, both installed by
//! `clusterctl init` (our providers from the local repository), over one simulated cloud: the target
//! takes the cluster over without re-creating anything (same Machines, same nodes, the one
//! `kubeadm init` data unchanged), then rolls its control plane on a generation bump.

use std::collections::BTreeMap;
use std::time::Duration;

use e2e_tests::Env;
use e2e_tests::env::NS;
use e2e_tests::replacements::Replacements;
use kube::ResourceExt;
use kube::api::Api;
use kubeadm_api::cluster::v1beta2::{Cluster, Machine};
use testenv::capi::ClusterApi;

const CLUSTER: &str = "moved";

fn vars(generation: &str) -> BTreeMap<&'static str, String> {
    [
        ("CLUSTER_NAME", CLUSTER.to_owned()),
        ("CONTROL_PLANE_MACHINE_COUNT", "1".to_owned()),
        ("WORKER_MACHINE_COUNT", "1".to_owned()),
        ("CONTROL_PLANE_MACHINE_GEN", generation.to_owned()),
    ]
    .into()
}

async fn machine_names(env: &Env) -> Vec<String> {
    let mut names: Vec<String> = env
        .machines(CLUSTER)
        .await
        .iter()
        .map(|m| m.name_any())
        .collect();
    names.sort();
    names
}

/// Waits until every Machine of the cluster has its Node and the worker's MachineDeployment is ready.
async fn wait_all_machines_have_nodes(env: &Env, count: usize, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    loop {
        let machines = env.machines(CLUSTER).await;
        let with_node = machines
            .iter()
            .filter(|m| m.status.as_ref().is_some_and(|s| s.node_ref.is_some()))
            .count();
        if machines.len() == count && with_node == count {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: {with_node} of {} Machines have a Node, {count} expected\n{}",
            machines.len(),
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clusterctl_move_hands_a_running_cluster_over_and_the_target_rolls_it() {
    let release = ClusterApi::find().expect("Cluster API built by hack/install-testenv.sh");
    let source = Env::start_installed().await;
    let target = Env::start_installed_sharing(&source).await;

    source.apply_template(&vars("genc01")).await;
    source
        .wait_control_plane(
            &format!("{CLUSTER}-control-plane"),
            1,
            Duration::from_secs(240),
            "created on the source",
        )
        .await;
    wait_all_machines_have_nodes(&source, 2, "created on the source").await;
    let machines_before = machine_names(&source).await;
    let nodes_before: BTreeMap<String, Vec<u32>> = source
        .sim
        .nodes()
        .into_iter()
        .map(|n| (n.machine, n.pids))
        .collect();
    let inits_before = source.init_secrets(CLUSTER).await;
    assert_eq!(inits_before.len(), 1, "{:?}", inits_before.keys());

    let repository = source.clusterctl.as_ref().expect("installed by clusterctl");
    let target_kubeconfig = target.plane.kubeconfig_path().display().to_string();
    let output = repository
        .run(
            &release,
            &source.plane,
            &[
                "move",
                "--to-kubeconfig",
                &target_kubeconfig,
                "--namespace",
                NS,
            ],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    println!("clusterctl move:\n{output}");

    // Nothing stays behind, and the target holds the same Machines.
    assert!(
        Api::<Cluster>::namespaced(source.client.clone(), NS)
            .get_opt(CLUSTER)
            .await
            .unwrap()
            .is_none(),
        "the Cluster left the source"
    );
    assert!(
        Api::<Machine>::namespaced(source.client.clone(), NS)
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "no Machine stays on the source"
    );
    target
        .wait_control_plane(
            &format!("{CLUSTER}-control-plane"),
            1,
            Duration::from_secs(240),
            "taken over by the target",
        )
        .await;
    wait_all_machines_have_nodes(&target, 2, "taken over by the target").await;
    assert_eq!(
        machine_names(&target).await,
        machines_before,
        "the target re-created nothing"
    );
    let nodes_after: BTreeMap<String, Vec<u32>> = target
        .sim
        .nodes()
        .into_iter()
        .map(|n| (n.machine, n.pids))
        .collect();
    assert_eq!(
        nodes_after, nodes_before,
        "the same nodes run, none restarted"
    );
    assert_eq!(
        target.init_secrets(CLUSTER).await,
        inits_before,
        "the one `kubeadm init` moved as it was, rendered no second time"
    );

    // The target rolls the control plane on a generation bump.
    target.apply_template(&vars("genc02")).await;
    let control_plane_before: Vec<String> = machines_before
        .iter()
        .filter(|m| m.contains("control-plane"))
        .cloned()
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    let mut replacements = Replacements::new();
    loop {
        let names = machine_names(&target).await;
        replacements.saw(&names);
        if control_plane_before.iter().all(|m| !names.contains(m)) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the control plane did not roll on the target: {names:?}\n{}",
            target.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    target
        .wait_control_plane(
            &format!("{CLUSTER}-control-plane"),
            1,
            Duration::from_secs(240),
            "rolled on the target",
        )
        .await;
    let now = machine_names(&target).await;
    replacements.saw(&now);
    if let Err(e) = replacements.check("the rollout on the target", &now, |n| {
        control_plane_before.iter().any(|m| m == n)
    }) {
        panic!("{e}\n{}", target.diagnostics().await);
    }
    assert_eq!(
        target.init_secrets(CLUSTER).await.len(),
        1,
        "still exactly one `kubeadm init`"
    );
    drop(target);
    drop(source);
}
