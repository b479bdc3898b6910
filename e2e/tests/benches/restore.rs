//! `make bench-snapshot`, its second half: the whole backup and restore through object storage at a
//! production size. A cluster of 3 simulated control-plane machines is filled to `BENCH_RESTORE_MIB`
//! (1,024 by default) of incompressible ConfigMaps; the control-plane manager (the build
//! `CONTROLPLANE_MANAGER` names) takes its scheduled snapshot into versitygw; every control-plane
//! machine is lost, and the restore from the stored snapshot asked for. Printed: how long the snapshot
//! took to land after it was due, how long the restore took until the restored member answered (the
//! request recorded done) and until 3 voters were back, and the managers' peak memory. Numbers only,
//! nothing asserted about time; each wait is bounded.

use std::time::{Duration, Instant};

use e2e_tests::Env;
use e2e_tests::env::NS;
use e2e_tests::etcd_watch::EtcdWatch;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::meta::{
    CONTROL_PLANE_LABEL, ETCD_RESTORE_FROM_ANNOTATION, ETCD_RESTORED_ANNOTATION,
};
use testenv::object_store::{ObjectStore, ObjectStoreOptions};

const CLUSTER: &str = "bench-restore";
const KCP: &str = "bench-restore-control-plane";
const BUCKET: &str = "backups";
/// Bytes per ConfigMap: under etcd's 1.5 MiB request limit with room for the object around them.
const VALUE_BYTES: usize = 1000 * 1024;
/// The bound on each wait: creating, storing, restoring, growing back.
const STEP: Duration = Duration::from_secs(30 * 60);
const POLL: Duration = Duration::from_millis(500);

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let mib: usize = std::env::var("BENCH_RESTORE_MIB")
        .map(|v| v.parse().expect("BENCH_RESTORE_MIB: a size in MiB"))
        .unwrap_or(1024);
    let count = (mib << 20).div_ceil(VALUE_BYTES);
    let dir = tempfile::tempdir().unwrap();
    let mut store = ObjectStore::start(&dir.path().join("s3"), ObjectStoreOptions::default())
        .await
        .unwrap();
    store.create_bucket(BUCKET).unwrap();
    let mut env = Env::start(&[]).await;
    env.apply_template(
        &[
            ("CLUSTER_NAME", CLUSTER.to_owned()),
            ("CONTROL_PLANE_MACHINE_COUNT", "3".to_owned()),
            ("WORKER_MACHINE_COUNT", "0".to_owned()),
        ]
        .into(),
    )
    .await;
    env.wait_control_plane(KCP, 3, STEP, "create 3").await;

    let filling = Instant::now();
    e2e_tests::api_probe::fill(&env.client, NS, CLUSTER, count, VALUE_BYTES).await;
    let filled = filling.elapsed();

    let due_at = Instant::now();
    e2e_tests::backup::back_up_now(&env.client, NS, KCP, &store, BUCKET, Default::default()).await;
    let snapshot = e2e_tests::backup::wait_recorded(&env, KCP, "s3://", STEP).await;
    let stored_in = due_at.elapsed();
    let key = snapshot
        .trim_start_matches("s3://")
        .split_once('/')
        .unwrap()
        .1;
    let stored_bytes = std::fs::metadata(store.object_file(BUCKET, key).unwrap())
        .unwrap()
        .len();

    let machines = control_plane_machines(&env).await;
    for machine in &machines {
        assert!(env.sim.lose(NS, machine), "{machine} was not running");
    }
    let kcps = Api::<KubeadmControlPlane>::namespaced(env.client.clone(), NS);
    let asked_at = Instant::now();
    let restore = serde_json::json!({
        "metadata": { "annotations": { ETCD_RESTORE_FROM_ANNOTATION: snapshot } },
    });
    kcps.patch(KCP, &PatchParams::default(), &Patch::Merge(&restore))
        .await
        .unwrap();
    wait(&env, "the restore recorded", || async {
        let kcp = kcps.get(KCP).await.ok()?;
        kcp.annotations().get(ETCD_RESTORED_ANNOTATION).map(|_| ())
    })
    .await;
    let restored = asked_at.elapsed();
    let watch = EtcdWatch::start(
        env.client.clone(),
        NS,
        CLUSTER,
        env.sim.view(),
        Duration::from_secs(1),
    );
    env.wait_control_plane(KCP, 3, STEP, "grown back after the restore")
        .await;
    let back = control_plane_machines(&env).await;
    watch.wait_voters(back, STEP, "grown back").await;
    let voters = asked_at.elapsed();
    drop(watch);

    let memory: Vec<String> = env
        .manager_peak_memory()
        .into_iter()
        .map(|(name, kib)| format!("{name} {} MiB", kib / 1024))
        .collect();
    println!(
        "\n| database | written in | snapshot stored after due | restored after asked | 3 voters after asked | managers' peak memory |"
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| {count} × {VALUE_BYTES} bytes ({stored_bytes} bytes stored) | {filled:.1?} | {stored_in:.1?} | {restored:.1?} | {voters:.1?} | {} |",
        memory.join(", ")
    );
    store.stop();
}

/// Names of the cluster's control-plane Machines now.
async fn control_plane_machines(env: &Env) -> Vec<String> {
    env.machines(CLUSTER)
        .await
        .into_iter()
        .filter(|m| m.labels().contains_key(CONTROL_PLANE_LABEL))
        .map(|m| m.name_any())
        .collect()
}

/// Polls `check` until it gives a value, within [`STEP`].
async fn wait<T, F, Fut>(env: &Env, what: &str, check: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + STEP;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "no {what} within {STEP:?}\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(POLL).await;
    }
}
