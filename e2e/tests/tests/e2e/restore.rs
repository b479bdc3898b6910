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
    e2e_tests::backup::wait_recorded(env, kcp, "secret/", Duration::from_secs(120)).await
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

/// Every control-plane node of `cluster` (`lost`) goes, etcd with it: quorum and the data are lost; then
/// the restore from `snapshot` is asked for. Returns when it was asked and the restore Secret the
/// controller staged.
async fn lose_everything_and_restore(
    env: &Env,
    cluster: &str,
    kcp: &str,
    lost: &[String],
    snapshot: &str,
) -> (Instant, Secret) {
    for machine in lost {
        assert!(env.sim.lose(NS, machine), "{machine} was not running");
    }
    let asked_at = Instant::now();
    annotate_kcp(
        env,
        kcp,
        serde_json::json!({ ETCD_RESTORE_FROM_ANNOTATION: snapshot }),
    )
    .await;
    let secrets = Api::<Secret>::namespaced(env.client.clone(), NS);
    let staged = format!("{cluster}-etcd-restore");
    wait_for(env, "the snapshot staged", || async {
        secrets.get_opt(&staged).await.unwrap().is_some()
    })
    .await;
    (asked_at, secrets.get(&staged).await.unwrap())
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

    let (asked_at, _) = lose_everything_and_restore(&env, cluster, kcp, &lost, &snapshot).await;
    // Both managers die on the way: after the snapshot was staged, and once the restoring machine
    // exists. The restore carries on from what the API server holds.
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
async fn a_200_mb_etcd_is_backed_up_to_object_storage_and_restored_from_it() {
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
    e2e_tests::api_probe::fill(&env.client, NS, cluster, FILL_COUNT, FILL_BYTES).await;
    let filled = filling.elapsed();
    write_marker(&env, cluster, "in-the-snapshot").await;

    // An older snapshot of this cluster, which the retention of one deletes once a new one is whole.
    let folder = store
        .object_file("backups", &format!("etcd/{NS}/{cluster}"))
        .unwrap();
    std::fs::create_dir_all(&folder).unwrap();
    for old in ["etcd-20200101T000000Z.db", "etcd-20200101T000000Z.json"] {
        std::fs::write(folder.join(old), b"old").unwrap();
    }
    // Plain: the sealed format costs minutes in the unoptimized managers these scenarios run;
    // the restore script's sealed path is checked below, sealing against a real store in the
    // control-plane crate's integration tests.
    let asked_for_snapshot = Instant::now();
    let more = serde_json::json!({ "retention": 1, "s3": { "prefix": "etcd" } });
    e2e_tests::backup::back_up_now(&env.client, NS, kcp, &store, "backups", more).await;
    let snapshot =
        e2e_tests::backup::wait_recorded(&env, kcp, "s3://", Duration::from_secs(300)).await;
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
    assert!(snapshot.ends_with(".db"), "{snapshot}");

    let (asked_at, staged) =
        lose_everything_and_restore(&env, cluster, kcp, &lost, &snapshot).await;
    // The staged restore holds no snapshot, only where and how to fetch it.
    let keys: Vec<String> = staged.data.unwrap_or_default().into_keys().collect();
    assert_eq!(keys, ["download"], "the staged restore Secret");
    let staged = staged.metadata.name.unwrap();
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
         {filled:.1?}; snapshot of {stored_bytes} bytes stored {stored_in:.1?} after it was \
         due; restored {restored:.1?} after it was asked for, 3 voters after {voters_at:.1?} \
         ({:.1?} wall time, {samples} membership samples)",
        started.elapsed()
    );
}

/// The rendered restore script's download part, run as a node runs it (paths under a folder of its
/// own, `kubeadm` and `etcdutl` stand-ins that write etcd's manifest and keep what they are given): a
/// sealed snapshot is fetched (`curl`, a `file://` URL), checked (`sha256sum`), authenticated and
/// opened (`openssl`) into exactly the database that was sealed; an altered byte or a checksum that
/// does not match stops it before etcdutl runs.
#[test]
fn the_restore_script_fetches_checks_and_opens_a_sealed_snapshot() {
    use kubeadm_api::bootstrap::v1beta2::KubeadmConfigSpec;
    use kubeadm_bootstrap::render::etcd_restore::{
        ETCD_RESTORE_DOWNLOAD_PATH, ETCD_RESTORE_SCRIPT_PATH, Form, with_etcd_restore,
    };
    use kubeadm_controlplane::etcd_backup::sealed::{self, HEADER_LEN, Key, ObjectKeys, Sealer};
    use kubeadm_controlplane::restore::Download;

    let root = tempfile::tempdir().unwrap();
    let at = |path: &str| root.path().join(path.trim_start_matches('/'));
    let database: Vec<u8> = (0..3_000_000u32).map(|i| (i * 31 % 251) as u8).collect();
    let key = Key::from_secret_value(b"q83vEjRWeJASNFZ4mrze8BI0VniavN7wEjRWeJq83vA=").unwrap();
    let mut sealer = Sealer::new(&key).unwrap();
    let mut stored = sealer.header().to_vec();
    let mut body = database.clone();
    sealer.seal(&mut body);
    stored.extend_from_slice(&body);
    stored.extend_from_slice(&sealer.finish());
    let mut salt = [0u8; sealed::SALT_LEN];
    salt.copy_from_slice(&stored[sealed::MAGIC.len()..HEADER_LEN]);
    let sha =
        |bytes: &[u8]| sealed::hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref());
    let object = root.path().join("store/etcd-20261207T030000Z.db.sealed");
    std::fs::create_dir_all(object.parent().unwrap()).unwrap();

    let spec = with_etcd_restore(
        &KubeadmConfigSpec::default(),
        "c1-etcd-restore",
        Form::Download,
    );
    let script = spec
        .files
        .iter()
        .find(|f| f.path == ETCD_RESTORE_SCRIPT_PATH)
        .and_then(|f| f.content.clone())
        .unwrap();
    let prefix = root.path().display().to_string();
    let script = script
        .replace("/run/", &format!("{prefix}/run/"))
        .replace("/etc/kubernetes/", &format!("{prefix}/etc/kubernetes/"))
        .replace(
            "data=$(flag data-dir)",
            &format!("data={prefix}$(flag data-dir)"),
        );
    let bin = root.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(at("/run/cluster-api")).unwrap();
    let tools = [
        (
            "kubeadm",
            format!(
                "#!/bin/sh\nmkdir -p {prefix}/etc/kubernetes/manifests\nprintf '    - --name=n1\\n    - --initial-advertise-peer-urls=https://127.0.0.1:2380\\n    - --data-dir=/var/lib/etcd\\n    image: registry.k8s.io/etcd:3.6.6-0\\n' > {prefix}/etc/kubernetes/manifests/etcd.yaml\n"
            ),
        ),
        // Keeps the snapshot it is asked to restore, as the restored database.
        (
            "etcdutl",
            format!(
                "#!/bin/sh\ncase \"$*\" in *--help*) exit 0 ;; esac\ncp \"$3\" {prefix}/restored.db\n"
            ),
        ),
    ];
    for (name, text) in tools {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(bin.join(name), text).unwrap();
        std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let run = |stored: &[u8], stored_sha256: String| {
        std::fs::write(&object, stored).unwrap();
        let _ = std::fs::remove_file(root.path().join("restored.db"));
        let download = Download {
            url: format!("file://{}", object.display()),
            stored_sha256,
            sha256: sha(&database),
            sealed: Some(ObjectKeys::derive(&key, &salt)),
        };
        std::fs::write(at(ETCD_RESTORE_DOWNLOAD_PATH), download.render()).unwrap();
        std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(&script)
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            )
            .output()
            .unwrap()
    };

    let out = run(&stored, sha(&stored));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(root.path().join("restored.db")).unwrap(),
        database
    );
    assert!(
        !at(ETCD_RESTORE_DOWNLOAD_PATH).exists(),
        "the download (a presigned URL) stays on the node"
    );

    // An altered byte whose stored checksum was made to match: the seal catches it.
    let mut altered = stored.clone();
    altered[HEADER_LEN + 1000] ^= 1;
    let out = run(&altered, sha(&altered));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("fails authentication"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!root.path().join("restored.db").exists());
    // A download that is not what the manifest says.
    let out = run(&stored, sha(b"something else"));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not what its manifest says"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!root.path().join("restored.db").exists());
}
