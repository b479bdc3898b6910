//! The peer on the same ground: Cluster API's own kubeadm bootstrap and control-plane managers (v1.14,
//! built from `hack/tools/capi`) in place of ours, with the same core manager, simulated machines and
//! template. What runs here is what `make compare` measures against our managers.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e_tests::Env;
use e2e_tests::env::wait_gone;

fn vars(cluster: &str, control_planes: u32) -> BTreeMap<&'static str, String> {
    [
        ("CLUSTER_NAME", cluster.to_owned()),
        ("CONTROL_PLANE_MACHINE_COUNT", control_planes.to_string()),
        ("WORKER_MACHINE_COUNT", "1".to_owned()),
    ]
    .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_apis_own_providers_create_and_scale_a_cluster_on_the_simulated_machines() {
    let started = Instant::now();
    let env = Env::start_peer().await;
    env.apply_template(&vars("peer", 1)).await;
    env.wait_control_plane(
        "peer-control-plane",
        1,
        Duration::from_secs(300),
        "create 1",
    )
    .await;
    println!("peer: create 1: {:.1?}", started.elapsed());
    let step = Instant::now();
    env.scale_control_plane("peer-control-plane", 3).await;
    env.wait_control_plane("peer-control-plane", 3, Duration::from_secs(420), "1 → 3")
        .await;
    println!("peer: 1 → 3: {:.1?}", step.elapsed());

    let pids = env.pids();
    drop(env);
    let alive = wait_gone(&pids, Duration::from_secs(30)).await;
    assert!(alive.is_empty(), "processes still running: {alive:?}");
}
