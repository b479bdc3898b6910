//! Restoring etcd from a snapshot the controller took, after every control-plane machine was lost.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use e2e_tests::Env;
use e2e_tests::env::NS;
use e2e_tests::etcd_watch::EtcdWatch;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubeadm_api::bootstrap::validation::ETCD_RESTORE_SCRIPT_PATH;
use kubeadm_api::controlplane::conditions::types;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::meta::{
    ETCD_LAST_SNAPSHOT_ANNOTATION, ETCD_RESTORE_FROM_ANNOTATION, ETCD_RESTORE_SNAPSHOT_ANNOTATION,
    ETCD_RESTORED_ANNOTATION, ETCD_SNAPSHOT_SCHEDULE_ANNOTATION, ETCD_SNAPSHOT_TARGET_ANNOTATION,
};

use crate::scenarios::{
    assert_membership_was_safe, control_plane_machine_names, event_notes, step_timeout,
    stop_and_check_nothing_is_left, three_voters_and_their_leader,
};

const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// Creates ConfigMap `name` in the workload cluster's default namespace (a fresh client each time: the
/// API servers behind the endpoint change).
async fn write_marker(env: &Env, cluster: &str, name: &str) {
    let workload = e2e_tests::api_probe::workload_client(&env.client, NS, cluster)
        .await
        .unwrap();
    let marker: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "namespace": "default" },
        "data": { "written": "before the loss" },
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(workload, "default")
        .create(&PostParams::default(), &marker)
        .await
        .unwrap();
}

async fn annotate_kcp(env: &Env, kcp: &str, annotations: serde_json::Value) {
    Api::<KubeadmControlPlane>::namespaced(env.client.clone(), NS)
        .patch(
            kcp,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "metadata": { "annotations": annotations } })),
        )
        .await
        .unwrap();
}

/// Asks for a snapshot into a Secret now (a daily schedule whose last run was long ago) and waits for
/// it; returns `secret/<name>`.
async fn snapshot_now(env: &Env, kcp: &str) -> String {
    annotate_kcp(
        env,
        kcp,
        serde_json::json!({
            ETCD_SNAPSHOT_TARGET_ANNOTATION: "secret",
            ETCD_SNAPSHOT_SCHEDULE_ANNOTATION: "00:00",
            ETCD_LAST_SNAPSHOT_ANNOTATION: "2020-01-02T03:00:00Z",
        }),
    )
    .await;
    wait_for_snapshot(env, kcp, "secret/", Duration::from_secs(120)).await
}

/// Waits until the control plane records a snapshot stored where `kind` says (`secret/`, `s3://`);
/// returns its location.
async fn wait_for_snapshot(env: &Env, kcp: &str, kind: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let record = env
            .kcp(kcp)
            .await
            .annotations()
            .get(ETCD_LAST_SNAPSHOT_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        if let Some(location) = record.split_whitespace().nth(1)
            && location.starts_with(kind)
        {
            return location.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "no snapshot was taken: {record:?}\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until the restore is recorded as finished, the request gone; returns the record.
async fn wait_restored(env: &Env, kcp: &str) -> String {
    let deadline = Instant::now() + step_timeout() * 2;
    loop {
        let now = env.kcp(kcp).await;
        if let Some(record) = now.annotations().get(ETCD_RESTORED_ANNOTATION) {
            assert!(
                !now.annotations().contains_key(ETCD_RESTORE_FROM_ANNOTATION),
                "the request stays after the restore finished"
            );
            return record.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the restore did not finish\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until `check` holds, within a join's time.
async fn wait_for<F, Fut>(env: &Env, what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + step_timeout();
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "no {what}\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Creates `count` ConfigMaps of `bytes` incompressible bytes each in the workload cluster's default
/// namespace: a database of about `count * bytes`.
async fn fill(env: &Env, cluster: &str, count: usize, bytes: usize) {
    let workload = e2e_tests::api_probe::workload_client(&env.client, NS, cluster)
        .await
        .unwrap();
    let config_maps = Api::<ConfigMap>::namespaced(workload, "default");
    // xorshift64*: bytes no compression shrinks, without a random source.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut data = vec![0u8; bytes];
    for i in 0..count {
        for chunk in data.chunks_mut(8) {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let word = state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        let filler = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(format!("fill-{i:04}")),
                ..Default::default()
            },
            binary_data: Some([("data".to_owned(), k8s_openapi::ByteString(data.clone()))].into()),
            ..Default::default()
        };
        config_maps
            .create(&PostParams::default(), &filler)
            .await
            .unwrap();
    }
}

/// Kills manager `index` (0 bootstrap, 1 control plane) and starts it again; returns the new PIDs.
async fn restart(env: &mut Env, index: usize) -> Vec<u32> {
    let name = env.kill_and_restart_manager(index).await.unwrap();
    println!("killed and restarted {name}");
    env.pids()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_is_restored_from_a_snapshot_after_every_control_plane_machine_is_lost() {
    let started = Instant::now();
    let (cluster, kcp) = ("restore", "restore-control-plane");
    let mut env = Env::start(&[]).await;
    let (watch, _) = three_voters_and_their_leader(&env, cluster, kcp).await;
    assert_membership_was_safe(&watch, "create 3");
    drop(watch);
    let lost = control_plane_machine_names(&env, cluster).await;
    let mut pids: BTreeSet<u32> = env.pids().into_iter().collect();

    write_marker(&env, cluster, "in-the-snapshot").await;
    let snapshot = snapshot_now(&env, kcp).await;
    write_marker(&env, cluster, "after-the-snapshot").await;

    // Every control-plane node goes, etcd with it: quorum and the data are lost.
    for machine in &lost {
        assert!(env.sim.lose(NS, machine), "{machine} was not running");
    }
    let asked_at = Instant::now();
    annotate_kcp(
        &env,
        kcp,
        serde_json::json!({ ETCD_RESTORE_FROM_ANNOTATION: snapshot }),
    )
    .await;

    // Both managers die on the way: after the snapshot was staged, and once the restoring machine
    // exists. The restore carries on from what the API server holds.
    let staged = format!("{cluster}-etcd-restore");
    wait_for(&env, "the snapshot staged", || async {
        Api::<Secret>::namespaced(env.client.clone(), NS)
            .get_opt(&staged)
            .await
            .unwrap()
            .is_some()
    })
    .await;
    pids.extend(restart(&mut env, 1).await);
    wait_for(&env, "the restoring machine", || async {
        env.machines(cluster).await.iter().any(|m| {
            m.annotations()
                .contains_key(ETCD_RESTORE_SNAPSHOT_ANNOTATION)
        })
    })
    .await;
    pids.extend(restart(&mut env, 0).await);

    let record = wait_restored(&env, kcp).await;
    let restored = asked_at.elapsed();
    assert!(record.contains(&snapshot), "{record}");
    let machines = control_plane_machine_names(&env, cluster).await;
    assert!(
        machines.iter().all(|m| !lost.contains(m)),
        "a lost machine is still there: {machines:?}"
    );

    // It grows back to 3 voters through learners, as any scale-up.
    let watch = EtcdWatch::start(
        env.client.clone(),
        NS,
        cluster,
        env.sim.view(),
        SAMPLE_EVERY,
    );
    env.wait_control_plane(kcp, 3, step_timeout(), "grown back after the restore")
        .await;
    let names = control_plane_machine_names(&env, cluster).await;
    watch
        .wait_voters(names, Duration::from_secs(60), "grown back")
        .await;
    let voters_at = asked_at.elapsed();
    let samples = assert_membership_was_safe(&watch, "grown back after the restore");

    // The workload API serves the snapshot's objects, and not what was written after it.
    let workload = e2e_tests::api_probe::workload_client(&env.client, NS, cluster)
        .await
        .unwrap();
    // The snapshot's Nodes of the lost machines are gone with them.
    let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(workload.clone());
    for machine in &lost {
        assert!(
            nodes.get_opt(machine).await.unwrap().is_none(),
            "the lost machine {machine} still has a Node"
        );
    }
    let config_maps = Api::<ConfigMap>::namespaced(workload, "default");
    assert!(
        config_maps
            .get_opt("in-the-snapshot")
            .await
            .unwrap()
            .is_some(),
        "the snapshot's ConfigMap is missing after the restore"
    );
    assert!(
        config_maps
            .get_opt("after-the-snapshot")
            .await
            .unwrap()
            .is_none(),
        "a ConfigMap written after the snapshot survived the restore"
    );

    // One kubeadm init since the loss: the restoring machine's, which restored the snapshot.
    // (The lost machines' data Secrets stay: no garbage collector runs on this management plane.)
    let mut inits = env.init_secrets(cluster).await;
    inits.retain(|name, _| !lost.contains(name));
    assert_eq!(inits.len(), 1, "{:?}", inits.keys());
    assert!(
        inits
            .values()
            .all(|data| data.contains(ETCD_RESTORE_SCRIPT_PATH)),
        "the init is not the restoring machine's"
    );

    // The control plane says what happened.
    let status = env.kcp(kcp).await.status.unwrap_or_default();
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == types::ETCD_RESTORED)
        .expect("no EtcdRestored condition");
    assert_eq!(condition.status, "True", "{condition:?}");
    assert!(condition.message.contains(&snapshot), "{condition:?}");
    let notes = event_notes(&env, "EtcdRestore", None).await;
    for step in [
        "staging",
        "deleting the old control-plane machines",
        "creating the machine that restores it",
        "restored",
    ] {
        assert!(
            notes.iter().any(|n| n.contains(step)),
            "no restore Event about {step:?}: {notes:?}"
        );
    }

    pids.extend(env.pids());
    drop(watch);
    stop_and_check_nothing_is_left(env, pids).await;
    println!(
        "scenario etcd restore: restored {restored:.1?} after it was asked for, 3 voters after \
         {voters_at:.1?} ({:.1?} wall time, {samples} membership samples)",
        started.elapsed()
    );
}

/// ConfigMaps of about 1 MiB each that fill the database to 200 MiB.
const FILL_COUNT: usize = 205;
const FILL_BYTES: usize = 1000 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_200_mb_etcd_is_backed_up_sealed_to_object_storage_and_restored_from_it() {
    use kubeadm_api::controlplane::etcd_backup::{ACCESS_KEY_ID_KEY, SECRET_ACCESS_KEY_KEY};
    use testenv::object_store::{ObjectStore, ObjectStoreOptions};
    let started = Instant::now();
    let (cluster, kcp) = ("restore-s3", "restore-s3-control-plane");
    let dir = tempfile::tempdir().unwrap();
    let mut store = ObjectStore::start(&dir.path().join("s3"), ObjectStoreOptions::default())
        .await
        .unwrap();
    store.create_bucket("backups").unwrap();
    let env = Env::start(&[]).await;
    let (watch, _) = three_voters_and_their_leader(&env, cluster, kcp).await;
    drop(watch);
    let lost = control_plane_machine_names(&env, cluster).await;
    let mut pids: BTreeSet<u32> = env.pids().into_iter().collect();

    let filling = Instant::now();
    fill(&env, cluster, FILL_COUNT, FILL_BYTES).await;
    let filled = filling.elapsed();
    write_marker(&env, cluster, "in-the-snapshot").await;

    // An older snapshot of this cluster, which the retention of one deletes once a new one is whole.
    let folder = store
        .object_file("backups", &format!("etcd/{NS}/{cluster}"))
        .unwrap();
    std::fs::create_dir_all(&folder).unwrap();
    for old in [
        "etcd-20200101T000000Z.db.sealed",
        "etcd-20200101T000000Z.json",
    ] {
        std::fs::write(folder.join(old), b"old").unwrap();
    }
    let secrets = Api::<Secret>::namespaced(env.client.clone(), NS);
    for (name, data) in [
        (
            "restore-s3-backup",
            serde_json::json!({
                ACCESS_KEY_ID_KEY: store.access_key(),
                SECRET_ACCESS_KEY_KEY: store.secret_key(),
            }),
        ),
        // 32 bytes, base64 (`openssl rand -base64 32`).
        (
            "restore-s3-backup-key",
            serde_json::json!({ "key": "q83vEjRWeJASNFZ4mrze8BI0VniavN7wEjRWeJq83vA=" }),
        ),
    ] {
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": { "name": name },
            "stringData": data,
        }))
        .unwrap();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
    // Due at once: the last snapshot was long ago.
    annotate_kcp(
        &env,
        kcp,
        serde_json::json!({ ETCD_LAST_SNAPSHOT_ANNOTATION: "2020-01-02T03:00:00Z" }),
    )
    .await;
    Api::<KubeadmControlPlane>::namespaced(env.client.clone(), NS)
        .patch(
            kcp,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": { "etcdBackup": {
                "schedule": "0 3 * * *",
                "retention": 1,
                "s3": {
                    "endpoint": store.endpoint(),
                    "bucket": "backups",
                    "prefix": "etcd",
                    "credentialsSecret": { "name": "restore-s3-backup" },
                },
                "encryption": { "keySecret": { "name": "restore-s3-backup-key" } },
            } } })),
        )
        .await
        .unwrap();
    let asked_for_snapshot = Instant::now();
    let snapshot = wait_for_snapshot(&env, kcp, "s3://", Duration::from_secs(300)).await;
    let stored_in = asked_for_snapshot.elapsed();
    write_marker(&env, cluster, "after-the-snapshot").await;
    // Retention: the new snapshot and its manifest, the old one gone.
    let mut files: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(
        files.iter().all(|f| !f.starts_with("etcd-2020")),
        "{files:?}"
    );
    let object = folder.join(snapshot.rsplit('/').next().unwrap());
    let stored_bytes = std::fs::metadata(&object).unwrap().len();
    assert!(
        stored_bytes > (FILL_COUNT * FILL_BYTES) as u64,
        "the snapshot holds {stored_bytes} bytes"
    );
    assert!(snapshot.ends_with(".db.sealed"), "{snapshot}");
    assert_eq!(
        std::fs::read(&object).unwrap()[..8],
        *b"KPSEAL1\n",
        "stored sealed"
    );

    // Every control-plane node goes, etcd with it: quorum and the data are lost.
    for machine in &lost {
        assert!(env.sim.lose(NS, machine), "{machine} was not running");
    }
    let asked_at = Instant::now();
    annotate_kcp(
        &env,
        kcp,
        serde_json::json!({ ETCD_RESTORE_FROM_ANNOTATION: snapshot }),
    )
    .await;
    // The staged restore holds no snapshot, only where and how to fetch it.
    let staged = format!("{cluster}-etcd-restore");
    wait_for(&env, "the snapshot staged", || async {
        Api::<Secret>::namespaced(env.client.clone(), NS)
            .get_opt(&staged)
            .await
            .unwrap()
            .and_then(|s| s.data)
            .is_some_and(|d| d.contains_key("download"))
    })
    .await;
    let record = wait_restored(&env, kcp).await;
    let restored = asked_at.elapsed();
    assert!(record.contains(&snapshot), "{record}");

    let watch = EtcdWatch::start(
        env.client.clone(),
        NS,
        cluster,
        env.sim.view(),
        SAMPLE_EVERY,
    );
    env.wait_control_plane(kcp, 3, step_timeout() * 2, "grown back after the restore")
        .await;
    let names = control_plane_machine_names(&env, cluster).await;
    watch
        .wait_voters(names, Duration::from_secs(120), "grown back")
        .await;
    let voters_at = asked_at.elapsed();
    let samples = assert_membership_was_safe(&watch, "grown back after the restore");

    // The data is the snapshot's: the filler and the marker before it, not the one after.
    let workload = e2e_tests::api_probe::workload_client(&env.client, NS, cluster)
        .await
        .unwrap();
    let config_maps = Api::<ConfigMap>::namespaced(workload, "default");
    let listed = config_maps
        .list(&kube::api::ListParams::default())
        .await
        .unwrap();
    let fillers = listed
        .items
        .iter()
        .filter(|c| c.name_any().starts_with("fill-"))
        .count();
    assert_eq!(fillers, FILL_COUNT);
    let last = config_maps
        .get(&format!("fill-{:04}", FILL_COUNT - 1))
        .await
        .unwrap();
    assert_eq!(
        last.binary_data.unwrap()["data"].0.len(),
        FILL_BYTES,
        "a restored value"
    );
    assert!(
        config_maps
            .get_opt("in-the-snapshot")
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        config_maps
            .get_opt("after-the-snapshot")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        Api::<Secret>::namespaced(env.client.clone(), NS)
            .get_opt(&staged)
            .await
            .unwrap()
            .is_none(),
        "the staged download (a presigned URL) stays after the restore"
    );

    pids.extend(env.pids());
    drop(watch);
    stop_and_check_nothing_is_left(env, pids).await;
    store.stop();
    println!(
        "scenario etcd restore from object storage: {FILL_COUNT} × {FILL_BYTES} bytes written in \
         {filled:.1?}; sealed snapshot of {stored_bytes} bytes stored {stored_in:.1?} after it was \
         due; restored {restored:.1?} after it was asked for, 3 voters after {voters_at:.1?} \
         ({:.1?} wall time, {samples} membership samples)",
        started.elapsed()
    );
}
