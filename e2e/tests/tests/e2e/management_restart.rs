//! The management plane itself fails: its kube-apiserver and etcd are killed mid-rollout, as a power cut of
//! the management node would, and come back from their data. The managers keep running through it: their
//! watches resume, the leader keeps its Lease, and no step of the rollout is taken twice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use e2e_tests::Env;
use e2e_tests::env::NS;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use kubeadm_api::cluster::v1beta2::Machine;

use crate::scenarios::{
    assert_membership_was_safe, control_planes_of, replaced, step_timeout,
    stop_and_check_nothing_is_left, three_voters, vars, wait_for,
};

/// How long the management plane stays down; with its restart (≈ 3 s) the outage stays within the
/// 10 s renew deadline of the managers' Leases, as a quick node restart would.
const DOWN: Duration = Duration::from_secs(2);

/// Where the managers keep their Leases when they run outside a Pod.
const LEASE_NAMESPACE: &str = "default";

/// Each Lease's holder, acquire time and transitions.
async fn leases(client: &kube::Client) -> BTreeMap<String, (Option<String>, String, Option<i32>)> {
    Api::<Lease>::namespaced(client.clone(), LEASE_NAMESPACE)
        .list(&ListParams::default())
        .await
        .expect("list Leases")
        .items
        .into_iter()
        .map(|lease| {
            let spec = lease.spec.clone().unwrap_or_default();
            let acquired = spec
                .acquire_time
                .map(|t| format!("{:?}", t.0))
                .unwrap_or_default();
            (
                lease.name_any(),
                (spec.holder_identity, acquired, spec.lease_transitions),
            )
        })
        .collect()
}

/// Every control-plane Machine name listed while the returned task runs; lists that fail (the
/// management plane is down) are skipped.
fn record_machines(
    client: kube::Client,
    cluster: &str,
) -> (Arc<Mutex<BTreeSet<String>>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let api: Api<Machine> = Api::namespaced(client, NS);
    let params = control_planes_of(cluster);
    let record = seen.clone();
    let task = tokio::spawn(async move {
        loop {
            if let Ok(list) = api.list(&params).await {
                record
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .extend(list.items.iter().map(ResourceExt::name_any));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    (seen, task)
}

/// Kills the management plane once a control-plane Machine matches `moment`; returns once it answers
/// again, with how long it did not.
async fn blackout_when(
    env: &mut Env,
    cluster: &str,
    what: &str,
    moment: impl Fn(&[Machine]) -> bool,
) -> Duration {
    wait_for(env, cluster, what, moment).await;
    let outage = env
        .plane
        .restart(DOWN)
        .await
        .expect("management plane back");
    println!(
        "blackout at {what}: {outage:.1?}, back {:.1?} after the environment started",
        env.started.elapsed()
    );
    outage
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_management_plane_killed_twice_mid_rollout_comes_back_and_the_rollout_finishes_once() {
    let started = Instant::now();
    let (cluster, kcp) = ("blackout", "blackout-control-plane");
    let mut env = Env::start(&[
        "--leader-elect",
        &format!("--leader-election-namespace={LEASE_NAMESPACE}"),
    ])
    .await;
    let (watch, first) = three_voters(&env, cluster, kcp).await;
    let mut pids: BTreeSet<u32> = env.pids().into_iter().collect();
    let managers: Vec<u32> = env
        .managers
        .iter_mut()
        .map(|m| m.process.process().pid())
        .collect();
    let leases_before = leases(&env.client).await;
    assert!(
        !leases_before.is_empty(),
        "the control-plane manager holds no Lease"
    );
    let secrets = env.cluster_secret_uids(cluster).await;
    let inits = env
        .init_secrets(cluster)
        .await
        .into_keys()
        .collect::<Vec<_>>();
    let (seen, recorder) = record_machines(env.client.clone(), cluster);

    let mut bumped = vars(cluster, 3, 0);
    bumped.insert("CONTROL_PLANE_MACHINE_GEN", "genb02".into());
    env.apply_template(&bumped).await;

    // First blackout: right after the rollout created its first machine, while it boots and joins.
    let outage_join = blackout_when(&mut env, cluster, "the first new machine", |machines| {
        machines.iter().any(|m| !first.contains(&m.name_any()))
    })
    .await;
    pids.extend(env.pids());
    // Second: as soon as an old machine is being deleted (its member removed, its deletion hook gone).
    let outage_delete = blackout_when(&mut env, cluster, "an old machine leaving", |machines| {
        first.iter().any(|old| {
            machines
                .iter()
                .find(|m| m.name_any() == *old)
                .is_none_or(|m| m.meta().deletion_timestamp.is_some())
        })
    })
    .await;
    pids.extend(env.pids());

    let rolled = replaced(&env, cluster, kcp, &first, step_timeout() * 3).await;
    watch
        .wait_voters(rolled.clone(), Duration::from_secs(60), "rolled")
        .await;
    let rolled_at = started.elapsed();
    recorder.abort();
    pids.extend(env.pids());

    // The managers ran through both blackouts: same processes, the same Lease holder since the same
    // acquisition.
    for pid in &managers {
        assert!(
            testenv::process::pid_alive(*pid),
            "manager pid {pid} exited while the management plane was down"
        );
    }
    assert_eq!(
        leases(&env.client)
            .await
            .into_iter()
            .filter(|(name, _)| leases_before.contains_key(name))
            .collect::<BTreeMap<_, _>>(),
        leases_before,
        "a Lease changed hands or was acquired again"
    );

    // Nothing was done twice: 3 new machines and no other, 6 etcd members in all, the one init, the
    // same cluster Secrets.
    let seen = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let created: Vec<&String> = seen.iter().filter(|m| !first.contains(m)).collect();
    assert_eq!(
        created.len(),
        3,
        "the rollout created other machines than the 3 it needs: {created:?} (now {rolled:?})"
    );
    let members: BTreeSet<String> = watch
        .samples()
        .iter()
        .flat_map(|s| s.members.iter().map(|(name, _)| name.clone()))
        .filter(|name| !name.is_empty())
        .collect();
    assert_eq!(
        members.len(),
        6,
        "etcd had other members than the 3 old and 3 new: {members:?}"
    );
    assert_eq!(
        env.init_secrets(cluster)
            .await
            .into_keys()
            .collect::<Vec<_>>(),
        inits,
        "kubeadm init rendered again"
    );
    assert_eq!(
        env.cluster_secret_uids(cluster).await,
        secrets,
        "the cluster's Secrets were lost or replaced"
    );
    let counted = assert_membership_was_safe(&watch, "management plane restarted mid-rollout");
    drop(watch);
    stop_and_check_nothing_is_left(env, pids).await;
    println!(
        "scenario management blackout: down {outage_join:.1?} during the first join and {outage_delete:.1?} \
         during the first removal; rollout done at {rolled_at:.1?} ({:.1?} wall, {counted} membership samples)",
        started.elapsed()
    );
}
