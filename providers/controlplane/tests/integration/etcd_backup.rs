//! etcd snapshots in a real S3 server (versitygw on 127.0.0.1, `testenv::object_store`), streamed from
//! a real etcd member: a database of 200 MB stored plain and sealed, read back and checked, opened by
//! the release's own snapshot checker; retention; and each way the store can fail: down, a wrong key,
//! full, a corrupt object, each a clear error with the snapshots stored before kept.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kubeadm_api::controlplane::etcd_backup::{EtcdBackup, EtcdBackupS3};
use kubeadm_cluster::CertPem;
use kubeadm_controlplane::etcd::{EtcdClientConfig, EtcdClients, WorkloadEtcd, issue_client_cert};
use kubeadm_controlplane::etcd_backup::sealed::Key;
use kubeadm_controlplane::etcd_backup::store::{
    self, Credentials, Destination, Source, StoreError, UploadError,
};
use kubeadm_controlplane::etcd_backup::{self as backup, Manifest};
use object_store::ObjectStore;
use testenv::object_store::{ObjectStore as S3Server, ObjectStoreOptions};
use testenv::{EtcdCluster, EtcdOptions, EtcdRelease};

const BUCKET: &str = "etcd-backups";
/// The database the big snapshots are of: 200 values of 1 MiB of incompressible bytes.
const VALUES: usize = 200;

struct Fixture {
    etcd_cluster: EtcdCluster,
    etcd: WorkloadEtcd,
    _clients: EtcdClients,
    server: S3Server,
    dir: tempfile::TempDir,
}

impl Fixture {
    async fn start(capacity: Option<u64>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let etcd_cluster = EtcdCluster::start(
            &dir.path().join("etcd"),
            EtcdOptions {
                members: 1,
                ..EtcdOptions::on(EtcdRelease::Current).unwrap()
            },
        )
        .await
        .unwrap();
        let tls = etcd_cluster.tls().expect("the cluster serves TLS");
        let ca = CertPem {
            cert: tls.ca_pem.clone(),
            key: tls.ca_key_pem().to_owned(),
        };
        let cert = issue_client_cert("test", &ca, time::OffsetDateTime::now_utc()).unwrap();
        let clients = EtcdClients::new(EtcdClientConfig {
            call_timeout: Duration::from_secs(30),
            ..EtcdClientConfig::default()
        });
        let etcd = clients.workload(Arc::new(cert));
        let server = S3Server::start(
            &dir.path().join("s3"),
            ObjectStoreOptions {
                capacity,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        server.create_bucket(BUCKET).unwrap();
        Self {
            etcd_cluster,
            etcd,
            _clients: clients,
            server,
            dir,
        }
    }

    fn spec(&self) -> EtcdBackup {
        EtcdBackup {
            s3: EtcdBackupS3 {
                endpoint: self.server.endpoint(),
                bucket: BUCKET.into(),
                prefix: Some("etcd".into()),
                ..EtcdBackupS3::default()
            },
            ..EtcdBackup::default()
        }
    }

    fn client(&self, secret_key: Option<&str>) -> Arc<object_store::aws::AmazonS3> {
        store::client(
            &self.spec().s3,
            &Credentials {
                access_key_id: self.server.access_key().into(),
                secret_access_key: secret_key.unwrap_or(self.server.secret_key()).into(),
                ..Credentials::default()
            },
        )
        .unwrap()
    }

    /// Fills etcd with `values` values of 1 MiB of random bytes (etcd's own compression cannot shrink
    /// them, so the database holds about that many MiB).
    async fn fill(&self, values: usize) {
        let mut client = self.etcd_cluster.client().await.unwrap();
        let mut value = vec![0u8; 1024 * 1024];
        for i in 0..values {
            ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut value).unwrap();
            client
                .put(format!("/registry/fill/{i:04}"), value.clone(), None)
                .await
                .unwrap();
        }
    }

    /// A snapshot taken at `at` into `store`, sealed with `key` when given.
    async fn snapshot(
        &self,
        store: &dyn ObjectStore,
        at: Timestamp,
        key: Option<&Key>,
    ) -> Result<Manifest, UploadError<kubeadm_controlplane::etcd::EtcdError>> {
        let folder = backup::folder(&self.spec(), "default", "prod");
        let (object, manifest) = backup::names(&folder, at, key.is_some());
        let source = self.etcd_cluster.client_urls()[0].clone();
        let etcd = &self.etcd;
        store::upload(
            &Destination {
                store,
                object,
                manifest,
                key: key.map(|k| (k, "prod-etcd-backup-key/key".to_owned())),
            },
            Source {
                cluster: "default/prod".into(),
                member: "node-0".into(),
                revision: None,
                time: at,
            },
            |mut pipe| async move { etcd.snapshot(&source, &mut pipe).await },
        )
        .await
    }

    /// Reads the snapshot of `manifest` back into a file and checks it; the file's path.
    async fn read_back(
        &self,
        store: &dyn ObjectStore,
        manifest: &Manifest,
        key: Option<&Key>,
    ) -> Result<std::path::PathBuf, StoreError> {
        use std::io::Write;
        let path = self.dir.path().join("restored.db");
        let mut file = std::fs::File::create(&path).unwrap();
        let keys = store::read_checked(store, manifest, key, |piece| file.write_all(piece)).await?;
        assert_eq!(keys.is_some(), manifest.encryption.is_some());
        Ok(path)
    }
}

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn folder_files(server: &S3Server) -> Vec<String> {
    let dir = server.object_file(BUCKET, "etcd/default/prod").unwrap();
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

fn accepted_by_etcdutl(path: &std::path::Path) {
    let output = EtcdRelease::Current
        .snapshot_status()
        .unwrap()
        .arg(path)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "etcdutl refused the snapshot read back: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_mb_database_is_stored_read_back_and_pruned() {
    let started = std::time::Instant::now();
    let f = Fixture::start(None).await;
    f.fill(VALUES).await;
    println!("etcd filled with {VALUES} MiB in {:.1?}", started.elapsed());
    let client = f.client(None);
    let store = client.as_ref();
    let step = std::time::Instant::now();

    let plain = f
        .snapshot(store, at("2026-12-07T00:00:00Z"), None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        plain.size > VALUES as u64 * 1024 * 1024,
        "the snapshot holds the database: {} bytes",
        plain.size
    );
    assert_eq!(plain.stored_size, plain.size);
    assert_eq!(plain.stored_sha256, plain.sha256);
    println!("{} bytes stored in {:.1?}", plain.size, step.elapsed());
    let step = std::time::Instant::now();
    let restored = f.read_back(store, &plain, None).await.unwrap();
    assert_eq!(std::fs::metadata(&restored).unwrap().len(), plain.size);
    println!("read back and checked in {:.1?}", step.elapsed());
    accepted_by_etcdutl(&restored);

    // Retention: a third snapshot with two kept leaves the two newest and nothing else of ours.
    f.snapshot(store, at("2026-12-07T12:00:00Z"), None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    f.snapshot(store, at("2026-12-08T00:00:00Z"), None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let folder = backup::folder(&f.spec(), "default", "prod");
    let names = store::list(store, &folder).await.unwrap();
    assert_eq!(names.len(), 6, "{names:?}");
    let old = backup::to_prune(&names, 2, None);
    assert_eq!(
        old,
        ["etcd-20261207T000000Z.db", "etcd-20261207T000000Z.json"],
        "{names:?}"
    );
    store::delete(store, &folder, &old).await.unwrap();
    assert_eq!(
        folder_files(&f.server),
        [
            "etcd-20261207T120000Z.db",
            "etcd-20261207T120000Z.json",
            "etcd-20261208T000000Z.db",
            "etcd-20261208T000000Z.json",
        ]
    );
}

/// Sealed with a key: the bytes in the store are not the database's, the key opens them into the
/// snapshot etcd wrote, another key is refused before a byte is used. (A smaller database than the
/// plain test's: AES in the unoptimized test build runs at a few MB/s; `make bench-snapshot` measures
/// the release build.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_snapshot_is_opened_by_its_key_and_refused_to_another() {
    let f = Fixture::start(None).await;
    f.fill(16).await;
    let client = f.client(None);
    let store = client.as_ref();
    let key = Key::from_secret_value(&[7u8; 32]).unwrap();
    let sealed = f
        .snapshot(store, at("2026-12-07T12:00:00Z"), Some(&key))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(sealed.object.ends_with(".db.sealed"), "{}", sealed.object);
    assert_eq!(sealed.stored_size, sealed.size + 72, "header and tag");
    assert_ne!(sealed.stored_sha256, sealed.sha256);
    let encryption = sealed.encryption.as_ref().expect("the manifest says how");
    assert_eq!(encryption.key_secret, "prod-etcd-backup-key/key");
    // The bytes in the store are not the database's.
    let stored = std::fs::read(f.server.object_file(BUCKET, &sealed.object).unwrap()).unwrap();
    assert!(!stored.windows(16).any(|w| w == b"/registry/fill/0"));
    let restored = f.read_back(store, &sealed, Some(&key)).await.unwrap();
    accepted_by_etcdutl(&restored);
    // The manifest as stored reads back the same.
    assert_eq!(
        store::manifest(store, &sealed.object.replace(".db.sealed", ".json"))
            .await
            .unwrap(),
        sealed
    );

    // Another key: refused before a byte is used, naming both fingerprints.
    let other = Key::from_secret_value(&[8u8; 32]).unwrap();
    let refused = f.read_back(store, &sealed, Some(&other)).await.unwrap_err();
    assert!(
        matches!(refused, StoreError::Corrupt(_)) && refused.to_string().contains("fingerprint"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_is_down_refuses_a_wrong_key_or_holds_a_corrupt_object_is_named_and_nothing_is_lost()
 {
    let mut f = Fixture::start(None).await;
    f.fill(4).await;
    let client = f.client(None);
    let kept = f
        .snapshot(client.as_ref(), at("2026-12-07T00:00:00Z"), None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let before = folder_files(&f.server);
    assert_eq!(before.len(), 2);

    // A wrong secret key: the store refuses the signature.
    let wrong = f.client(Some("not-the-secret-key"));
    let denied = f
        .snapshot(wrong.as_ref(), at("2026-12-07T01:00:00Z"), None)
        .await
        .unwrap_err();
    println!("wrong key: {denied}");
    assert!(
        matches!(denied, UploadError::Store(StoreError::Denied(_))),
        "{denied}"
    );
    assert_eq!(folder_files(&f.server), before);

    // A corrupt object: one byte changed in the store is found before anything uses it.
    let file = f.server.object_file(BUCKET, &kept.object).unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let corrupt = f.read_back(client.as_ref(), &kept, None).await.unwrap_err();
    println!("corrupt: {corrupt}");
    assert!(
        matches!(corrupt, StoreError::Corrupt(_))
            && corrupt.to_string().contains("not what its manifest says"),
        "{corrupt}"
    );

    // Down: the connection is refused; the error says which store.
    f.server.stop();
    let down = f
        .snapshot(client.as_ref(), at("2026-12-07T02:00:00Z"), None)
        .await
        .unwrap_err();
    println!("down: {down}");
    assert!(
        matches!(down, UploadError::Store(StoreError::Failed(_))),
        "{down}"
    );
    f.server.restart().await.unwrap();
    assert_eq!(folder_files(&f.server), before, "nothing lost");
    // And back up, the next snapshot is stored.
    f.snapshot(client.as_ref(), at("2026-12-07T03:00:00Z"), None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(folder_files(&f.server).len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_store_aborts_the_upload_writes_no_manifest_and_keeps_the_snapshots_before() {
    // 48 MiB of room: one snapshot of 16 MiB fits, a second of 40 MiB does not.
    let f = Fixture::start(Some(48 * 1024 * 1024)).await;
    f.fill(16).await;
    let client = f.client(None);
    let first = f
        .snapshot(client.as_ref(), at("2026-12-07T00:00:00Z"), None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let before = folder_files(&f.server);
    f.fill(24).await;
    let full = f
        .snapshot(client.as_ref(), at("2026-12-07T12:00:00Z"), None)
        .await
        .unwrap_err();
    println!("full: {full}");
    assert!(
        matches!(full, UploadError::Store(StoreError::Failed(_))),
        "{full}"
    );
    assert_eq!(
        folder_files(&f.server),
        before,
        "no half snapshot, no manifest"
    );
    f.read_back(client.as_ref(), &first, None).await.unwrap();
}

/// The controller with `spec.etcdBackup`: a due snapshot lands in the store with its manifest, the
/// status and condition say where, retention deletes the oldest; with the store down the condition and
/// a Warning Event say so and the snapshots already there stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_takes_scheduled_snapshots_into_the_store_and_reports_a_store_that_is_down()
{
    use crate::common::{self, CLUSTER, CONVERGE, KCP, NS};
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::api::events::v1::Event;
    use kube::ResourceExt;
    use kube::api::{Api, ListParams, Patch, PatchParams};
    use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
    use kubeadm_api::meta::{ETCD_DEFRAG_SCHEDULE_ANNOTATION, ETCD_LAST_SNAPSHOT_ANNOTATION};
    use serde_json::json;
    use std::time::Instant;

    let mut env = common::setup_with(
        1,
        "prod-control-plane-genc01",
        false,
        Some(EtcdRelease::Current),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut server = S3Server::start(dir.path(), ObjectStoreOptions::default())
        .await
        .unwrap();
    server.create_bucket(BUCKET).unwrap();
    // Two older snapshots (one falls out of the two kept) and an object that is not ours.
    let folder = server
        .object_file(BUCKET, &format!("etcd/{NS}/{CLUSTER}"))
        .unwrap();
    std::fs::create_dir_all(&folder).unwrap();
    for name in [
        "etcd-20200101T000000Z.db",
        "etcd-20200101T000000Z.json",
        "etcd-20200102T000000Z.db",
        "etcd-20200102T000000Z.json",
        "README",
    ] {
        std::fs::write(folder.join(name), b"old").unwrap();
    }
    let credentials: Secret = serde_json::from_value(json!({
        "metadata": { "name": "prod-etcd-backup" },
        "stringData": {
            "accessKeyID": server.access_key(),
            "secretAccessKey": server.secret_key(),
        },
    }))
    .unwrap();
    Api::<Secret>::namespaced(env.client.clone(), NS)
        .create(&Default::default(), &credentials)
        .await
        .unwrap();
    let kcps = Api::<KubeadmControlPlane>::namespaced(env.client.clone(), NS);
    let due = json!({
        "metadata": { "annotations": {
            ETCD_DEFRAG_SCHEDULE_ANNOTATION: "disabled",
            ETCD_LAST_SNAPSHOT_ANNOTATION: "2020-01-02T00:00:00Z",
        } },
    });
    kcps.patch(KCP, &PatchParams::default(), &Patch::Merge(&due))
        .await
        .unwrap();
    common::patch_kcp(
        &env.client,
        json!({ "etcdBackup": {
            "schedule": "0 * * * *",
            "retention": 2,
            "s3": {
                "endpoint": server.endpoint(),
                "bucket": BUCKET,
                "prefix": "etcd",
                "credentialsSecret": { "name": "prod-etcd-backup" },
            },
        } }),
    )
    .await;
    env.tasks
        .push(common::start_with(&env.client, common::test_settings()));
    common::wait_converged(&env, 1, "initial").await;

    let deadline = Instant::now() + CONVERGE;
    // `status.etcd` is patched as the snapshot is recorded; the condition comes with the reconcile's
    // status write after it.
    let status = loop {
        let kcp = kcps.get(KCP).await.unwrap();
        let taken =
            common::condition(&kcp, "EtcdSnapshotTaken").is_some_and(|c| c.status == "True");
        if let Some(status) = kcp
            .status
            .and_then(|s| s.etcd)
            .and_then(|e| e.last_snapshot)
            .filter(|_| taken)
        {
            break status;
        }
        assert!(Instant::now() < deadline, "no snapshot in the status");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let object = status
        .location
        .strip_prefix(&format!("s3://{BUCKET}/"))
        .unwrap_or_else(|| panic!("not in the bucket: {status:?}"));
    let stored = std::fs::metadata(server.object_file(BUCKET, object).unwrap()).unwrap();
    assert_eq!(status.size, Some(stored.len() as i64));
    let mut files: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let stamp = object.rsplit('/').next().unwrap().trim_end_matches(".db");
    assert_eq!(
        files,
        [
            "README".to_owned(),
            "etcd-20200102T000000Z.db".to_owned(),
            "etcd-20200102T000000Z.json".to_owned(),
            format!("{stamp}.db"),
            format!("{stamp}.json"),
        ]
    );

    // The store goes down and a snapshot is due again: refused, said so, nothing deleted.
    server.stop();
    kcps.patch(KCP, &PatchParams::default(), &Patch::Merge(&due))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(180);
    let refused = loop {
        let kcp = kcps.get(KCP).await.unwrap();
        if let Some(c) =
            common::condition(&kcp, "EtcdSnapshotTaken").filter(|c| c.status == "False")
        {
            break c.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the failed snapshot was not reported"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(refused.reason, "ObjectStoreFailed", "{refused:?}");
    assert!(
        refused
            .message
            .contains(&server.endpoint().replace("http://", ""))
            || refused.message.contains("onnect"),
        "{refused:?}"
    );
    assert!(refused.message.contains("kept"), "{refused:?}");
    let kcp = kcps.get(KCP).await.unwrap();
    assert_eq!(
        kcp.annotations()[ETCD_LAST_SNAPSHOT_ANNOTATION],
        "2020-01-02T00:00:00Z",
        "a failed snapshot does not move the clock"
    );
    let warned = Api::<Event>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .any(|e| e.reason.as_deref() == Some("EtcdSnapshotRefused"));
    assert!(warned, "no Warning Event");
    server.restart().await.unwrap();
    let after: Vec<String> = {
        let mut files: Vec<String> = std::fs::read_dir(&folder)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        files
    };
    assert_eq!(after, files, "nothing lost");
}
