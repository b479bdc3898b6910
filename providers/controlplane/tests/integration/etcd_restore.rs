//! Restores of etcd that cannot be done safely, asked for on a running control plane (real apiserver,
//! real etcd members): each is refused with a condition and a Warning Event that say why, and nothing is
//! touched. The restore itself is an end-to-end test (it needs machines that boot from bootstrap data).

use crate::common;
use crate::etcd_faults::wait_condition;

use common::*;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kubeadm_api::controlplane::conditions::{reasons, types};
use kubeadm_api::meta::{
    ETCD_RESTORE_FROM_ANNOTATION, ETCD_SNAPSHOT_LABEL, ETCD_SNAPSHOT_SECRET_TYPE,
};
use kubeadm_controlplane::controller::Settings;
use serde_json::json;
use testenv::EtcdRelease;

async fn ask_for_restore(env: &Env, value: Option<&str>) {
    Api::<kubeadm_api::controlplane::v1beta2::KubeadmControlPlane>::namespaced(
        env.client.clone(),
        NS,
    )
    .patch(
        KCP,
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "annotations": {
            ETCD_RESTORE_FROM_ANNOTATION: value,
        } } })),
    )
    .await
    .unwrap();
}

/// A snapshot etcd would accept: bbolt's magic number where bbolt has it, the SHA-256 appended.
fn snapshot_of(mut database: Vec<u8>) -> Vec<u8> {
    database[16..20].copy_from_slice(&0xED0C_DAEDu32.to_le_bytes());
    let hash = ring::digest::digest(&ring::digest::SHA256, &database);
    database.extend_from_slice(hash.as_ref());
    database
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restores_that_cannot_be_safe_are_refused_and_touch_nothing() {
    let mut env = setup_with(
        3,
        "prod-control-plane-genc01",
        false,
        Some(EtcdRelease::Current),
    )
    .await;
    let snapshots = tempfile::tempdir().unwrap();
    let own = snapshots.path().join(NS).join(CLUSTER);
    std::fs::create_dir_all(&own).unwrap();
    env.tasks.push(start_with(
        &env.client,
        Settings {
            snapshot_dir: Some(snapshots.path().to_owned()),
            ..test_settings()
        },
    ));
    wait_converged(&env, 3, "initial").await;
    let before: Vec<String> = machines(&env.client)
        .await
        .iter()
        .map(|m| m.name_any())
        .collect();

    // A snapshot Secret of another cluster.
    let other = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("other-etcd-snapshot-20261201t030000z".into()),
            labels: Some([(ETCD_SNAPSHOT_LABEL.to_owned(), "other".to_owned())].into()),
            ..Default::default()
        },
        type_: Some(ETCD_SNAPSHOT_SECRET_TYPE.into()),
        data: Some([("snapshot.db.gz".to_owned(), ByteString(Vec::new()))].into()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(env.client.clone(), NS)
        .create(&PostParams::default(), &other)
        .await
        .unwrap();
    // Files: one that is no snapshot, one etcd would take but too large for bootstrap data (random
    // bytes do not compress), one in another cluster's folder.
    let corrupt = own.join("etcd-20261201T030000Z.db");
    std::fs::write(&corrupt, vec![7u8; 4096]).unwrap();
    let large = own.join("etcd-20261202T030000Z.db");
    let mut noise = vec![0u8; 1024 * 1024];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut noise).unwrap();
    std::fs::write(&large, snapshot_of(noise)).unwrap();
    let foreign = snapshots
        .path()
        .join(NS)
        .join("other")
        .join("etcd-20261201T030000Z.db");

    let cases = [
        (
            "secret/prod-etcd-snapshot-missing".to_owned(),
            "does not exist",
        ),
        (
            "secret/other-etcd-snapshot-20261201t030000z".to_owned(),
            "names cluster other",
        ),
        (
            format!("file:{}", corrupt.display()),
            "fails the integrity check",
        ),
        (format!("file:{}", large.display()), "too large to restore"),
        (
            format!("file:{}", foreign.display()),
            "snapshots of default/prod are in",
        ),
        (
            "s3://bucket/ns/c1/etcd-20261207T030000Z.db".to_owned(),
            "restoring from object storage needs spec.etcdBackup",
        ),
    ];
    for (value, why) in &cases {
        ask_for_restore(&env, Some(value)).await;
        let (reason, message) =
            wait_condition(&env, types::ETCD_RESTORED, |m| m.contains(why)).await;
        assert_eq!(reason, reasons::RESTORE_REFUSED, "{value}: {message}");
        assert!(
            message.contains(ETCD_RESTORE_FROM_ANNOTATION),
            "{value}: {message}"
        );
    }

    // Nothing was touched: the same machines, none leaving, no snapshot staged.
    let after = machines(&env.client).await;
    assert_eq!(
        after.iter().map(|m| m.name_any()).collect::<Vec<_>>(),
        before
    );
    assert!(
        after
            .iter()
            .all(|m| m.metadata.deletion_timestamp.is_none())
    );
    let staged = Api::<Secret>::namespaced(env.client.clone(), NS)
        .get_opt(&format!("{CLUSTER}-etcd-restore"))
        .await
        .unwrap();
    assert!(staged.is_none(), "a refused snapshot was staged");
    let refused = Api::<Event>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("EtcdRestoreRefused")
                && e.type_.as_deref() == Some("Warning")
        })
        .count();
    assert!(refused >= 1, "no EtcdRestoreRefused Event");

    // Withdrawn: the condition goes.
    ask_for_restore(&env, None).await;
    let deadline = std::time::Instant::now() + CONVERGE;
    while condition(&kcp(&env.client).await, types::ETCD_RESTORED).is_some() {
        assert!(std::time::Instant::now() < deadline, "EtcdRestored stays");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}
