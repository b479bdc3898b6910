//! `clusterctl upgrade` of our providers from this release to the next (the same managers, the next
//! release's components) under a running cluster changes no machine: Cluster API's "no rollout after a
//! provider upgrade" gate. The upgraded managers reconcile every object again and create, delete and
//! re-render nothing.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e_tests::Env;
use e2e_tests::installed::{next_version, ours_next};
use kube::ResourceExt;
use testenv::capi::ClusterApi;
use testenv::manager::ManagerProcess;
use xtask::components::Provider;

const CLUSTER: &str = "upgraded";

/// The sum of every series of the metric `name` a manager exposes.
async fn metric(manager: &ManagerProcess, name: &str) -> f64 {
    let (_, text) = manager.get("/metrics").await.unwrap_or_default();
    text.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Machines of the cluster as `name → (uid, generation)`.
async fn machines(env: &Env) -> BTreeMap<String, (String, i64)> {
    env.machines(CLUSTER)
        .await
        .iter()
        .map(|m| {
            (
                m.name_any(),
                (
                    m.uid().unwrap_or_default(),
                    m.metadata.generation.unwrap_or_default(),
                ),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clusterctl_upgrade_to_the_next_release_changes_no_machine() {
    let release = ClusterApi::find().expect("Cluster API built by hack/install-testenv.sh");
    let mut env = Env::start_installed_with(vec![
        ours_next(Provider::Bootstrap),
        ours_next(Provider::ControlPlane),
    ])
    .await;
    let vars: BTreeMap<&str, String> = [
        ("CLUSTER_NAME", CLUSTER.to_owned()),
        ("CONTROL_PLANE_MACHINE_COUNT", "1".to_owned()),
        ("WORKER_MACHINE_COUNT", "1".to_owned()),
    ]
    .into();
    env.apply_template(&vars).await;
    let kcp = format!("{CLUSTER}-control-plane");
    env.wait_control_plane(&kcp, 1, Duration::from_secs(240), "created")
        .await;
    let deadline = Instant::now() + Duration::from_secs(240);
    while env
        .machines(CLUSTER)
        .await
        .iter()
        .filter(|m| m.status.as_ref().is_some_and(|s| s.node_ref.is_some()))
        .count()
        < 2
    {
        assert!(Instant::now() < deadline, "{}", env.diagnostics().await);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let before = machines(&env).await;
    let kcp_generation = env.kcp(&kcp).await.metadata.generation;
    let inits_before = env.init_secrets(CLUSTER).await;

    let repository = env.clusterctl.as_ref().expect("installed by clusterctl");
    let next = next_version();
    let plan = repository
        .run(&release, &env.plane, &["upgrade", "plan"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        plan.contains(&next),
        "clusterctl upgrade plan offers {next}:\n{plan}"
    );
    let bootstrap = format!("{}/kubeadm:{next}", Provider::Bootstrap.namespace());
    let control_plane = format!("{}/kubeadm:{next}", Provider::ControlPlane.namespace());
    let applied = repository
        .run(
            &release,
            &env.plane,
            &[
                "upgrade",
                "apply",
                "--bootstrap",
                &bootstrap,
                "--control-plane",
                &control_plane,
            ],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    println!("clusterctl upgrade apply:\n{applied}");
    let inventory = testenv::clusterctl::inventory(&env.plane).await.unwrap();
    for provider in Provider::ALL {
        assert!(
            inventory
                .iter()
                .any(|(ns, _, _, version)| ns == provider.namespace() && version == &next),
            "{} at {next} in the inventory: {inventory:?}",
            provider.label()
        );
    }

    // The upgraded Deployments run; each manager reconciles everything it owns again.
    env.rerun_installed().await;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let bootstrap = metric(&env.installed[0], "kubeadm_bootstrap_reconcile_total").await;
        let control_plane = metric(&env.installed[1], "kubeadm_controlplane_reconcile_total").await;
        // Two KubeadmConfigs and one KubeadmControlPlane, each reconciled once when the fresh
        // manager lists it; more reconciles follow only if something wakes them.
        if bootstrap >= 2.0 && control_plane >= 1.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the upgraded managers did not reconcile: bootstrap {bootstrap}, control plane {control_plane}\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    env.wait_control_plane(&kcp, 1, Duration::from_secs(120), "after the upgrade")
        .await;
    assert_eq!(
        metric(&env.installed[1], "kubeadm_controlplane_machines_total").await,
        0.0,
        "the upgraded control-plane manager created or deleted no Machine"
    );
    assert_eq!(
        metric(
            &env.installed[0],
            "kubeadm_bootstrap_data_secrets_written_total"
        )
        .await,
        0.0,
        "the upgraded bootstrap manager rendered nothing again"
    );
    assert_eq!(machines(&env).await, before, "no Machine changed");
    assert_eq!(env.kcp(&kcp).await.metadata.generation, kcp_generation);
    assert_eq!(env.init_secrets(CLUSTER).await, inits_before);
}
