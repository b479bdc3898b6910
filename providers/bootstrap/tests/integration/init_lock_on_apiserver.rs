//! The init lock against a real kube-apiserver: one winner per Cluster, kept across restarts, taken over only
//! from a Machine that is gone, and compatible with locks the Go provider writes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use kubeadm_api::cluster::v1beta2::{Cluster, ClusterSpec, Machine, MachineSpec};
use kubeadm_api::meta::ContractVersionedObjectReference;
use kubeadm_bootstrap::init_lock::{
    Acquired, LOCK_INFORMATION_KEY, LockError, lock_name, release, try_acquire,
};
use testenv::ManagementPlane;

const NS: &str = "default";

async fn plane() -> (ManagementPlane, kube::Client) {
    let plane = ManagementPlane::start()
        .await
        .expect("management plane starts");
    plane
        .install_crds(&kubeadm_api::crd::core_crds())
        .await
        .expect("core CRDs install");
    let client = plane.client().await.unwrap();
    (plane, client)
}

async fn create_cluster(client: &kube::Client, name: &str) -> Cluster {
    Api::<Cluster>::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &Cluster::new(name, ClusterSpec::default()),
        )
        .await
        .unwrap()
}

async fn create_machine(client: &kube::Client, cluster: &str, name: &str) {
    let spec = MachineSpec {
        cluster_name: cluster.to_owned(),
        infrastructure_ref: ContractVersionedObjectReference {
            kind: "DockerMachine".into(),
            name: name.into(),
            api_group: "infrastructure.cluster.x-k8s.io".into(),
        },
        ..MachineSpec::default()
    };
    Api::<Machine>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &Machine::new(name, spec))
        .await
        .unwrap();
}

async fn delete_machine(client: &kube::Client, name: &str) {
    Api::<Machine>::namespaced(client.clone(), NS)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

async fn lock(client: &kube::Client, cluster: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .get_opt(&lock_name(cluster))
        .await
        .unwrap()
}

/// A lock as another writer (e.g. the Go provider) leaves it.
async fn write_lock(client: &kube::Client, cluster: &str, information: &str) {
    let lock = ConfigMap {
        metadata: ObjectMeta {
            name: Some(lock_name(cluster)),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            LOCK_INFORMATION_KEY.to_owned(),
            information.to_owned(),
        )])),
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &lock)
        .await
        .unwrap();
}

#[tokio::test]
async fn one_of_two_racing_machines_wins_and_keeps_the_lock_until_released() {
    let (_plane, client) = plane().await;
    let cluster = create_cluster(&client, "race").await;
    create_machine(&client, "race", "race-cp-a").await;
    create_machine(&client, "race", "race-cp-b").await;

    let (a, b) = tokio::join!(
        try_acquire(&client, NS, "race", "race-cp-a"),
        try_acquire(&client, NS, "race", "race-cp-b"),
    );
    let (winner, loser) = match (a.unwrap(), b.unwrap()) {
        (Acquired::Yes, Acquired::HeldBy(holder)) => ("race-cp-a", holder),
        (Acquired::HeldBy(holder), Acquired::Yes) => ("race-cp-b", holder),
        other => panic!("exactly one machine must win, got {other:?}"),
    };
    assert_eq!(loser, winner, "the loser is told who holds the lock");

    let stored = lock(&client, "race").await.expect("the lock exists");
    assert_eq!(
        stored.data.unwrap()[LOCK_INFORMATION_KEY],
        format!(r#"{{"machineName":"{winner}"}}"#)
    );
    assert_eq!(
        stored.metadata.labels.unwrap()["cluster.x-k8s.io/cluster-name"],
        "race"
    );
    let owner = &stored.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Cluster", "race")
    );
    assert_eq!(Some(&owner.uid), cluster.metadata.uid.as_ref());

    // A restarted controller asks again: the holder still holds it, the other still waits.
    let other = if winner == "race-cp-a" {
        "race-cp-b"
    } else {
        "race-cp-a"
    };
    assert_eq!(
        try_acquire(&client, NS, "race", winner).await.unwrap(),
        Acquired::Yes
    );
    assert_eq!(
        try_acquire(&client, NS, "race", other).await.unwrap(),
        Acquired::HeldBy(winner.to_owned())
    );

    release(&client, NS, "race").await.unwrap();
    assert!(lock(&client, "race").await.is_none());
    release(&client, NS, "race")
        .await
        .expect("releasing twice is fine");
    assert_eq!(
        try_acquire(&client, NS, "race", other).await.unwrap(),
        Acquired::Yes
    );
}

#[tokio::test]
async fn a_lock_is_taken_over_only_when_its_machine_is_gone() {
    let (_plane, client) = plane().await;
    create_machine(&client, "takeover", "takeover-cp-old").await;
    create_machine(&client, "takeover", "takeover-cp-new").await;
    // Written the way the Go provider writes it, without a Cluster object around.
    write_lock(&client, "takeover", r#"{"machineName":"takeover-cp-old"}"#).await;

    assert_eq!(
        try_acquire(&client, NS, "takeover", "takeover-cp-new")
            .await
            .unwrap(),
        Acquired::HeldBy("takeover-cp-old".to_owned()),
        "a lock of an existing Machine is honoured"
    );
    let before = lock(&client, "takeover").await.unwrap();

    delete_machine(&client, "takeover-cp-old").await;
    assert_eq!(
        try_acquire(&client, NS, "takeover", "takeover-cp-new")
            .await
            .unwrap(),
        Acquired::Yes,
        "the lock of a deleted Machine is taken over"
    );
    let after = lock(&client, "takeover").await.unwrap();
    assert_ne!(after.metadata.uid, before.metadata.uid, "a new lock object");
    assert_eq!(
        after.data.unwrap()[LOCK_INFORMATION_KEY],
        r#"{"machineName":"takeover-cp-new"}"#
    );
}

#[tokio::test]
async fn unreadable_lock_data_is_reported_and_the_lock_kept() {
    let (_plane, client) = plane().await;
    create_machine(&client, "garbled", "garbled-cp").await;
    write_lock(&client, "garbled", "not json").await;

    let error = try_acquire(&client, NS, "garbled", "garbled-cp")
        .await
        .unwrap_err();
    assert!(matches!(error, LockError::Unreadable { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("default/garbled-lock"), "{message}");
    assert!(message.contains("delete the ConfigMap"), "{message}");
    assert_eq!(
        lock(&client, "garbled").await.unwrap().data.unwrap()[LOCK_INFORMATION_KEY],
        "not json",
        "an unreadable lock is never stolen"
    );
}
