//! Stacked etcd under the control plane, against real etcd members (one per simulated node, joining as
//! learners the way kubeadm joins them) and the real apiserver: learners promoted by the controller, a
//! generation rollout that hands leadership over before a leader's machine goes and removes each member
//! before its machine's hook is released, a member that never started removed, and writes to etcd that
//! keep working throughout. Every test runs on etcd 3.4 and on the current release (`etcd_3_4::…`,
//! `etcd_current::…`).

use crate::common;

use kubeadm_api::meta::{
    CLEANUP_HOOK_ANNOTATION, ETCD_DEFRAG_SCHEDULE_ANNOTATION, ETCD_LAST_DEFRAG_ANNOTATION,
    ETCD_LAST_SNAPSHOT_ANNOTATION, ETCD_SNAPSHOT_LABEL, ETCD_SNAPSHOT_SCHEDULE_ANNOTATION,
    ETCD_SNAPSHOT_TARGET_ANNOTATION,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use kubeadm_controlplane::controller::Settings;
use serde_json::json;
use testenv::EtcdRelease;
use testenv::core_double::connect_running;

/// Members as (name, is learner), sorted by name.
async fn members(env: &Env) -> Vec<(String, bool)> {
    let Some(mut client) = env.core.etcd_client().await else {
        return Vec::new();
    };
    let Ok(list) = client.member_list().await else {
        return Vec::new();
    };
    let mut members: Vec<(String, bool)> = list
        .members()
        .iter()
        .map(|m| (m.name().to_owned(), m.is_learner()))
        .collect();
    members.sort();
    members
}

/// The members the machines should have: one voter per machine, named after its node.
async fn expected_members(env: &Env) -> Vec<(String, bool)> {
    let mut expected: Vec<(String, bool)> = machines(&env.client)
        .await
        .iter()
        .map(|m| (format!("node-{}", m.name_any()), false))
        .collect();
    expected.sort();
    expected
}

async fn wait_members_match_machines(env: &Env, what: &str) {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let (have, want) = (members(env).await, expected_members(env).await);
        if have == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: etcd members {have:?}, machines want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The Machines that membership changes of this kind were made for, one entry per Event series (the
/// recorder aggregates repeats for the same machine), with the first note.
async fn changes(env: &Env, action: &str) -> Vec<(Option<String>, String)> {
    Api::<Event>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("EtcdMembershipChanged"))
        .filter(|e| e.action.as_deref() == Some(action))
        .map(|e| (e.related.and_then(|r| r.name), e.note.unwrap_or_default()))
        .collect()
}

/// Writes to etcd every 100 ms through whichever members run; returns the longest stretch without a
/// successful write. A leadership change and the client finding the new leader take a few seconds on
/// loopback; losing quorum would stop writes for good.
fn keep_writing(env: &Env, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Duration> {
    let core = env.core.etcd_handle();
    let longest = Arc::new(AtomicU64::new(0));
    tokio::spawn(async move {
        let mut last_ok = Instant::now();
        let mut i = 0u64;
        // Kept while it writes: connecting afresh waits for the double's cluster lock, which a member
        // start holds for as long as its learner takes, and that wait is not etcd's.
        let mut client: Option<etcd_client::Client> = None;
        while !stop.load(Ordering::Relaxed) {
            i += 1;
            if client.is_none() {
                client = connect_running(&core).await;
            }
            let ok = match client.as_mut() {
                Some(c) => {
                    let put = c.put(format!("k{}", i % 10), "v", None);
                    matches!(
                        tokio::time::timeout(Duration::from_secs(2), put).await,
                        Ok(Ok(_))
                    )
                }
                None => false,
            };
            if ok {
                last_ok = Instant::now();
            } else {
                client = None;
                let gap = last_ok.elapsed().as_millis() as u64;
                longest.fetch_max(gap, Ordering::Relaxed);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Duration::from_millis(longest.load(Ordering::Relaxed))
    })
}

/// Watches every member's status (every 50 ms) until `stop`; returns, per learner that was promoted, how
/// long it stayed a learner after it was in sync (its applied index within 10 % of the furthest voter's
/// raft index, the rule the controller promotes by).
fn watch_promotions(env: &Env, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Vec<Duration>> {
    let handle = env.core.etcd_handle();
    tokio::spawn(async move {
        let mut in_sync: std::collections::BTreeMap<u64, Instant> = Default::default();
        let mut promoted = Vec::new();
        let mut done: std::collections::BTreeSet<u64> = Default::default();
        while !stop.load(Ordering::Relaxed) {
            let mut statuses = Vec::new();
            {
                let cluster = handle.lock().await;
                if let Some(cluster) = cluster.as_ref() {
                    for m in cluster.members().iter().filter(|m| m.pid().is_some()) {
                        let url = std::slice::from_ref(&m.client_url);
                        let status = async {
                            let mut client = cluster.connect(url).await.ok()?;
                            client.status().await.ok()
                        };
                        if let Ok(Some(status)) =
                            tokio::time::timeout(Duration::from_millis(500), status).await
                        {
                            statuses.push(status);
                        }
                    }
                }
            }
            let furthest = statuses
                .iter()
                .filter(|s| !s.is_learner())
                .map(|s| s.raft_index())
                .max()
                .unwrap_or(0);
            for s in &statuses {
                let id = s.header().map_or(0, |h| h.member_id());
                if s.is_learner() && s.raft_applied_index() * 10 >= furthest * 9 {
                    in_sync.entry(id).or_insert_with(Instant::now);
                } else if !s.is_learner()
                    && let Some(since) = in_sync.get(&id)
                    && done.insert(id)
                {
                    promoted.push(since.elapsed());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        promoted
    })
}

async fn learners_are_promoted_and_a_rollout_moves_leadership_and_members_first(
    release: EtcdRelease,
) {
    let env = setup_with(1, "prod-control-plane-genc01", true, Some(release)).await;
    wait_converged(&env, 1, "initial").await;
    wait_members_match_machines(&env, "initial").await;
    let first = machines(&env.client).await.remove(0);
    assert!(
        first.annotations().contains_key(CLEANUP_HOOK_ANNOTATION),
        "machines carry the cleanup hook"
    );

    // 1 → 3: every join arrives as a learner; the controller promotes it.
    let watching = Arc::new(AtomicBool::new(false));
    let promotions = watch_promotions(&env, watching.clone());
    patch_kcp(&env.client, json!({ "replicas": 3 })).await;
    wait_converged(&env, 3, "scale up").await;
    wait_members_match_machines(&env, "scale up").await;
    watching.store(true, Ordering::Relaxed);
    println!(
        "measured: learner in sync → promoted by the controller: {:?}",
        promotions.await.unwrap()
    );
    let promoted = changes(&env, "PromoteLearner").await;
    assert_eq!(
        promoted.len(),
        2,
        "one promotion per joined machine: {promoted:?}"
    );
    assert!(
        promoted.iter().all(|(machine, _)| machine.is_some()),
        "{promoted:?}"
    );

    // A generation bump replaces all three: each leaving member goes before its machine, the leader's
    // leadership moves first, and etcd keeps taking writes.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = keep_writing(&env, stop.clone());
    sim_template(&env.client, "prod-control-plane-genc02").await;
    env.core.observe(|o| o.deleted.clear());
    patch_kcp(&env.client, json!({ "machineTemplate": { "spec": { "infrastructureRef": {
        "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachineTemplate", "name": "prod-control-plane-genc02" } } } })).await;
    let deadline = Instant::now() + CONVERGE;
    while env.core.observe(|o| o.deleted.len()) < 3 {
        if Instant::now() > deadline {
            let kcp = kcp(&env.client).await;
            let conditions: Vec<String> = kcp
                .status
                .iter()
                .flat_map(|s| &s.conditions)
                .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
                .collect();
            panic!(
                "rollout did not finish: members {:?}, machines {:?}, conditions {conditions:#?}",
                members(&env).await,
                machines(&env.client)
                    .await
                    .iter()
                    .map(|m| (m.name_any(), m.meta().deletion_timestamp.is_some()))
                    .collect::<Vec<_>>()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_converged(&env, 3, "rollout").await;
    wait_members_match_machines(&env, "rollout").await;
    stop.store(true, Ordering::Relaxed);
    let longest_gap = writer.await.unwrap();
    assert!(
        longest_gap < Duration::from_secs(10),
        "etcd took no writes for {longest_gap:?}"
    );
    let removed = changes(&env, "RemoveMember").await;
    assert_eq!(
        removed.len(),
        3,
        "each old machine's member removed: {removed:?}"
    );
    let released = changes(&env, "ReleaseHook").await;
    assert_eq!(
        released.len(),
        3,
        "each old machine's hook released: {released:?}"
    );
    let moved = changes(&env, "MoveLeader").await;
    assert!(
        !moved.is_empty(),
        "the first leader left without handing over"
    );
    println!("longest stretch without an etcd write during the rollout: {longest_gap:?}");
}

async fn a_member_that_never_started_is_removed_while_the_voters_keep_quorum(release: EtcdRelease) {
    let mut env = setup_with(3, "prod-control-plane-genc01", false, Some(release)).await;
    env.tasks.push(start_with(
        &env.client,
        Settings {
            unstarted_grace: k8s_openapi::jiff::SignedDuration::from_secs(3),
            ..test_settings()
        },
    ));
    wait_converged(&env, 3, "initial").await;
    wait_members_match_machines(&env, "initial").await;

    // A join that died after adding its member: etcd lists a learner that never starts.
    let mut client = env.core.etcd_client().await.expect("etcd runs");
    // Right after the last promotion etcd refuses membership changes for a few seconds.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let add = client
            .member_add(
                ["https://127.0.0.1:1"],
                Some(etcd_client::MemberAddOptions::new().with_is_learner()),
            )
            .await;
        match add {
            Ok(_) => break,
            Err(e) if e.to_string().contains("unhealthy cluster") && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("etcd refused the learner: {e}"),
        }
    }
    let added = Instant::now();
    let deadline = Instant::now() + CONVERGE;
    loop {
        let list = client.member_list().await.unwrap();
        if list.members().len() == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the unstarted learner was never removed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "unstarted learner removed {:?} after it was added (grace 3 s)",
        added.elapsed()
    );
    wait_members_match_machines(&env, "after the removal").await;
    client
        .put("still", "writable", None)
        .await
        .expect("quorum kept");
    let removed = changes(&env, "RemoveUnstartedMember").await;
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert!(
        removed[0]
            .1
            .starts_with("removed etcd member that never started"),
        "{removed:?}"
    );
}

/// Database file size of every running member, by member name.
async fn db_sizes(env: &Env) -> std::collections::BTreeMap<String, i64> {
    let handle = env.core.etcd_handle();
    let cluster = handle.lock().await;
    let cluster = cluster.as_ref().expect("etcd runs");
    let mut sizes = std::collections::BTreeMap::new();
    for member in cluster.members().iter().filter(|m| m.pid().is_some()) {
        let mut client = cluster
            .connect(std::slice::from_ref(&member.client_url))
            .await
            .unwrap();
        let status = client.status().await.unwrap();
        sizes.insert(member.name.clone(), status.db_size());
    }
    sizes
}

async fn scheduled_defragmentation_shrinks_every_member_while_writes_continue(
    release: EtcdRelease,
) {
    let env = setup_with(3, "prod-control-plane-genc01", false, Some(release)).await;
    let kcps: Api<kubeadm_api::controlplane::v1beta2::KubeadmControlPlane> =
        Api::namespaced(env.client.clone(), NS);
    let annotate = |schedule: &str, last: &str| json!({ "metadata": { "annotations": { ETCD_DEFRAG_SCHEDULE_ANNOTATION: schedule, ETCD_LAST_DEFRAG_ANNOTATION: last } } });
    kcps.patch(
        KCP,
        &Default::default(),
        &kube::api::Patch::Merge(&annotate("disabled", "2026-01-01T00:00:00Z")),
    )
    .await
    .unwrap();
    // Due now: midnight has passed since a record two days back.
    let due = kube::api::Patch::Merge(annotate("00:00", "2020-01-01T00:00:00Z"));
    let params = kube::api::PatchParams::default();
    let make_due = || kcps.patch(KCP, &params, &due);
    let mut env = env;
    env.tasks.push(start(&env.client));
    wait_converged(&env, 3, "initial").await;
    wait_members_match_machines(&env, "initial").await;

    // Grow the database files, then free the space inside them: only defragmentation returns it.
    let mut client = env.core.etcd_client().await.expect("etcd runs");
    let value = "x".repeat(20_000);
    for i in 0..500 {
        client
            .put(format!("bloat/{i}"), value.clone(), None)
            .await
            .unwrap();
    }
    client
        .delete(
            "bloat/",
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    let before = db_sizes(&env).await;
    assert!(before.values().all(|s| *s > 5_000_000), "{before:?}");

    let stop = Arc::new(AtomicBool::new(false));
    let writer = keep_writing(&env, stop.clone());
    let started = Instant::now();
    make_due().await.unwrap();
    let deadline = Instant::now() + CONVERGE;
    loop {
        let kcp = kcps.get(KCP).await.unwrap();
        let last = kcp
            .annotations()
            .get(ETCD_LAST_DEFRAG_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        if !last.starts_with("2020") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the defragmentation round did not finish"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let longest_gap = writer.await.unwrap();
    let after = db_sizes(&env).await;
    // The status records the round for kubectl: every member, the former leader last, sizes shrunk.
    let record = loop {
        let kcp = kcps.get(KCP).await.unwrap();
        if let Some(record) = kcp
            .status
            .and_then(|s| s.etcd)
            .and_then(|e| e.last_defragmentation)
        {
            break record;
        }
        assert!(
            Instant::now() < deadline,
            "no defragmentation in the status"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut recorded = record.members.clone();
    recorded.sort();
    assert_eq!(recorded, before.keys().cloned().collect::<Vec<_>>());
    let (size_before, size_after) = (
        record.db_size_before.unwrap(),
        record.db_size_after.unwrap(),
    );
    assert!(
        size_after < size_before / 2,
        "{size_before} → {size_after} bytes"
    );
    assert!(
        record.time.0
            > k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_mins(5)
    );
    for (name, size) in &after {
        assert!(
            *size < before[name] / 2,
            "{name}: {} → {size} bytes",
            before[name]
        );
    }
    assert!(
        longest_gap < Duration::from_secs(10),
        "etcd took no writes for {longest_gap:?}"
    );
    println!(
        "defragmented 3 members in {took:?}: {before:?} → {after:?}; longest write gap {longest_gap:?}"
    );

    // Due again with nothing freed since: no file has 40 % of it free, so the round compacts and
    // rewrites none (a member is blocked while it is defragmented, for nothing here).
    make_due().await.unwrap();
    let deadline = Instant::now() + CONVERGE;
    let record = loop {
        let kcp = kcps.get(KCP).await.unwrap();
        let finished = !kcp
            .annotations()
            .get(ETCD_LAST_DEFRAG_ANNOTATION)
            .is_some_and(|last| last.starts_with("2020"));
        if let Some(record) = kcp
            .status
            .and_then(|s| s.etcd)
            .and_then(|e| e.last_defragmentation)
            .filter(|r| finished && r.time.0 > record.time.0)
        {
            break record;
        }
        assert!(Instant::now() < deadline, "the second round did not finish");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(record.members, Vec::<String>::new(), "{record:?}");
    let unchanged = db_sizes(&env).await;
    for (name, size) in &unchanged {
        assert!(
            *size <= after[name] + after[name] / 4,
            "{name}: {} → {size} bytes without a defragmentation",
            after[name]
        );
    }
}

/// A version bump whose kubeadm deploys a newer etcd minor than the members run: on etcd 3.4 members the
/// bump to 1.34 (kubeadm's etcd 3.6.5) waits, naming each member below 3.6's floor (3.5.20), and no
/// machine is created; pinning an etcd image of the members' own minor lets the rollout go. On the
/// current release (3.6 members) the same bump is no new minor and rolls at once.
async fn a_rollout_to_a_newer_etcd_minor_waits_for_members_at_its_upgrade_floor(
    release: EtcdRelease,
) {
    let env = setup_with(3, "prod-control-plane-genc01", true, Some(release)).await;
    wait_converged(&env, 3, "initial").await;
    let before: Vec<String> = machines(&env.client)
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    patch_kcp(&env.client, json!({ "version": "v1.34.4" })).await;
    if release == EtcdRelease::V3_4 {
        let deadline = Instant::now() + CONVERGE;
        let message = loop {
            let kcp = kcp(&env.client).await;
            if let Some(c) = condition(&kcp, "RollingOut")
                && c.reason == "EtcdBelowUpgradeFloor"
            {
                break c.message.clone();
            }
            assert!(
                Instant::now() < deadline,
                "the rollout was not held: {:?}",
                kcp.status.map(|s| s.conditions)
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        assert!(
            message.contains(
                "a new member would run etcd 3.6.5, which may join only members at 3.5.20 or newer"
            ),
            "{message}"
        );
        for name in &before {
            assert!(
                message.contains(&format!("node-{name} (3.4.")),
                "{name}: {message}"
            );
        }
        // Held for a while: no machine was created.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now: Vec<String> = machines(&env.client)
            .await
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        assert_eq!(now, before);
        patch_kcp(
            &env.client,
            json!({ "kubeadmConfigSpec": { "clusterConfiguration": { "etcd": { "local": {
                "imageTag": "3.4.23-0"
            }}}}}),
        )
        .await;
    }
    wait_observed(&env.client).await;
    wait_converged(&env, 3, "rollout to v1.34.4").await;
    let rolled = machines(&env.client).await;
    assert!(
        rolled.iter().all(
            |m| m.spec.version.as_deref() == Some("v1.34.4") && !before.contains(&m.name_any())
        ),
        "{:?}",
        rolled.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
    );
    wait_members_match_machines(&env, "rollout to v1.34.4").await;
}

async fn three_to_five_to_three_keeps_one_voter_per_machine(release: EtcdRelease) {
    let env = setup_with(3, "prod-control-plane-genc01", true, Some(release)).await;
    wait_converged(&env, 3, "initial").await;
    wait_members_match_machines(&env, "initial").await;

    patch_kcp(&env.client, json!({ "replicas": 5 })).await;
    wait_converged(&env, 5, "3 → 5").await;
    wait_members_match_machines(&env, "3 → 5").await;

    let stop = Arc::new(AtomicBool::new(false));
    let writer = keep_writing(&env, stop.clone());
    patch_kcp(&env.client, json!({ "replicas": 3 })).await;
    wait_converged(&env, 3, "5 → 3").await;
    wait_members_match_machines(&env, "5 → 3").await;
    stop.store(true, Ordering::Relaxed);
    let longest_gap = writer.await.unwrap();
    assert!(
        longest_gap < Duration::from_secs(10),
        "etcd took no writes for {longest_gap:?}"
    );
    assert_eq!(changes(&env, "RemoveMember").await.len(), 2);
}

/// Another controller's pre-terminate hook on a leaving machine (a backup, a storage detach) runs before
/// ours: the member stays, and says why, until that hook is gone; then it goes as usual.
async fn a_leaving_machine_keeps_its_member_until_other_pre_terminate_hooks_are_gone(
    release: EtcdRelease,
) {
    const BACKUP_HOOK: &str = "pre-terminate.delete.hook.machine.cluster.x-k8s.io/backup";
    let env = setup_with(3, "prod-control-plane-genc01", true, Some(release)).await;
    wait_converged(&env, 3, "initial").await;
    wait_members_match_machines(&env, "initial").await;

    let api: Api<kubeadm_api::cluster::v1beta2::Machine> = Api::namespaced(env.client.clone(), NS);
    let leaving = machines(&env.client).await[0].name_any();
    let hook = |value: serde_json::Value| {
        kube::api::Patch::Merge(json!({ "metadata": { "annotations": { BACKUP_HOOK: value } } }))
    };
    api.patch(&leaving, &Default::default(), &hook(json!("")))
        .await
        .unwrap();
    api.delete(&leaving, &Default::default()).await.unwrap();

    // The planner says what it waits for, and the member stays meanwhile.
    let deadline = Instant::now() + CONVERGE;
    loop {
        let kcp = kcp(&env.client).await;
        let waiting = condition(&kcp, "EtcdMembershipSettled")
            .is_some_and(|c| c.message.contains("waits for other pre-terminate hooks"));
        if waiting {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no wait for the other hook: {:?}",
            condition(&kcp, "EtcdMembershipSettled")
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let node = format!("node-{leaving}");
    assert!(
        members(&env).await.iter().any(|(name, _)| *name == node),
        "{node} left etcd while another hook held its machine: {:?}",
        members(&env).await
    );
    assert!(changes(&env, "RemoveMember").await.is_empty());

    // The other controller is done: the member goes, then the machine, and a replacement joins.
    api.patch(
        &leaving,
        &Default::default(),
        &hook(serde_json::Value::Null),
    )
    .await
    .unwrap();
    wait_converged(&env, 3, "after the other hook").await;
    wait_members_match_machines(&env, "after the other hook").await;
    let removed = changes(&env, "RemoveMember").await;
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert_eq!(
        removed[0].0.as_deref(),
        Some(leaving.as_str()),
        "{removed:?}"
    );
}

async fn scheduled_snapshots_are_written_kept_and_accepted_by_the_release_tools(
    release: EtcdRelease,
) {
    let env = setup_with(3, "prod-control-plane-genc01", false, Some(release)).await;
    let kcps: Api<kubeadm_api::controlplane::v1beta2::KubeadmControlPlane> =
        Api::namespaced(env.client.clone(), NS);
    let snapshots = tempfile::tempdir().unwrap();
    let dir = snapshots.path().join(NS).join(CLUSTER);
    std::fs::create_dir_all(&dir).unwrap();
    // An older snapshot that falls out of the two kept, and a file that is not ours.
    std::fs::write(dir.join("etcd-20200101T030000Z.db"), b"old").unwrap();
    std::fs::write(dir.join("etcd-20200102T030000Z.db"), b"old").unwrap();
    std::fs::write(dir.join("README"), b"not a snapshot").unwrap();
    kcps.patch(
        KCP,
        &Default::default(),
        &kube::api::Patch::Merge(&json!({ "metadata": { "annotations": {
            ETCD_DEFRAG_SCHEDULE_ANNOTATION: "disabled",
            ETCD_SNAPSHOT_SCHEDULE_ANNOTATION: "00:00",
            ETCD_LAST_SNAPSHOT_ANNOTATION: "2020-01-02T03:00:00Z",
        } } })),
    )
    .await
    .unwrap();
    let mut env = env;
    env.tasks.push(start_with(
        &env.client,
        Settings {
            snapshot_dir: Some(snapshots.path().to_owned()),
            snapshots_keep: 2,
            ..test_settings()
        },
    ));
    wait_converged(&env, 3, "initial").await;

    let deadline = Instant::now() + CONVERGE;
    let record = loop {
        let kcp = kcps.get(KCP).await.unwrap();
        let record = kcp
            .annotations()
            .get(ETCD_LAST_SNAPSHOT_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        if !record.starts_with("2020") {
            break record;
        }
        assert!(Instant::now() < deadline, "no snapshot was taken");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let path = record
        .split_whitespace()
        .nth(1)
        .expect("the record names the file")
        .to_owned();
    let status = loop {
        let kcp = kcps.get(KCP).await.unwrap();
        if let Some(status) = kcp
            .status
            .and_then(|s| s.etcd)
            .and_then(|e| e.last_snapshot)
        {
            break status;
        }
        assert!(Instant::now() < deadline, "no snapshot in the status");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status.location, path);
    let size = std::fs::metadata(&path).unwrap().len();
    assert_eq!(status.size, Some(size as i64));
    assert!(status.revision.is_some_and(|r| r > 0), "{status:?}");
    assert!(
        status
            .member
            .as_ref()
            .is_some_and(|m| m.starts_with("node-")),
        "{status:?}"
    );
    let output = release
        .snapshot_status()
        .unwrap()
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the release's snapshot checker refused {path}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files.len(), 3, "{files:?}");
    assert_eq!(files[0], "README");
    assert_eq!(files[1], "etcd-20200102T030000Z.db");
    assert!(path.ends_with(&files[2]), "{files:?} {path}");
}

async fn scheduled_snapshots_into_secrets_are_pruned_refused_when_too_large_and_accepted_by_the_release_tools(
    release: EtcdRelease,
) {
    use k8s_openapi::api::core::v1::Secret;
    use kubeadm_controlplane::etcd_maintenance::SNAPSHOT_SECRET_KEY;
    use std::io::Read;
    let env = setup_with(1, "prod-control-plane-genc01", false, Some(release)).await;
    let kcps: Api<kubeadm_api::controlplane::v1beta2::KubeadmControlPlane> =
        Api::namespaced(env.client.clone(), NS);
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), NS);
    // Two older snapshots, of which one falls out of the two kept.
    for name in [
        "prod-etcd-snapshot-20200101t030000z",
        "prod-etcd-snapshot-20200102t030000z",
    ] {
        let old: Secret = serde_json::from_value(json!({
            "metadata": { "name": name, "labels": { ETCD_SNAPSHOT_LABEL: CLUSTER } },
            "data": { SNAPSHOT_SECRET_KEY: "" },
        }))
        .unwrap();
        secrets.create(&Default::default(), &old).await.unwrap();
    }
    let due = |last: &str| {
        json!({ "metadata": { "annotations": {
            ETCD_DEFRAG_SCHEDULE_ANNOTATION: "disabled",
            ETCD_SNAPSHOT_SCHEDULE_ANNOTATION: "00:00",
            ETCD_SNAPSHOT_TARGET_ANNOTATION: "secret",
            ETCD_LAST_SNAPSHOT_ANNOTATION: last,
        } } })
    };
    kcps.patch(
        KCP,
        &Default::default(),
        &kube::api::Patch::Merge(&due("2020-01-02T03:00:00Z")),
    )
    .await
    .unwrap();
    let mut env = env;
    env.tasks.push(start_with(
        &env.client,
        Settings {
            snapshots_keep: 2,
            ..test_settings()
        },
    ));
    wait_converged(&env, 1, "initial").await;

    let deadline = Instant::now() + CONVERGE;
    let status = loop {
        let kcp = kcps.get(KCP).await.unwrap();
        if let Some(status) = kcp
            .status
            .and_then(|s| s.etcd)
            .and_then(|e| e.last_snapshot)
        {
            break status;
        }
        assert!(Instant::now() < deadline, "no snapshot in the status");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let name = status
        .location
        .strip_prefix("secret/")
        .unwrap_or_else(|| panic!("not a Secret: {status:?}"));
    let secret = secrets.get(name).await.unwrap();
    assert_eq!(
        secret
            .labels()
            .get("cluster.x-k8s.io/cluster-name")
            .map(String::as_str),
        Some(CLUSTER)
    );
    let owner = &secret.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("KubeadmControlPlane", KCP)
    );
    let compressed = &secret.data.as_ref().unwrap()[SNAPSHOT_SECRET_KEY].0;
    let mut db = Vec::new();
    flate2::read::GzDecoder::new(compressed.as_slice())
        .read_to_end(&mut db)
        .unwrap();
    assert_eq!(Some(db.len() as i64), status.size);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snapshot.db");
    std::fs::write(&path, &db).unwrap();
    let output = release
        .snapshot_status()
        .unwrap()
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the release's snapshot checker refused the snapshot: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    println!(
        "snapshot Secret {name}: {} bytes, {} compressed; snapshot status: {}",
        db.len(),
        compressed.len(),
        String::from_utf8_lossy(&output.stdout).trim()
    );
    let snapshot_names = || async {
        let mut names: Vec<String> = secrets
            .list(&ListParams::default().labels(&format!("{ETCD_SNAPSHOT_LABEL}={CLUSTER}")))
            .await
            .unwrap()
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        snapshot_names().await,
        [
            "prod-etcd-snapshot-20200102t030000z".to_owned(),
            name.to_owned()
        ]
    );

    // Incompressible data past what a Secret holds: the snapshot is refused, visibly, and nothing is lost.
    let mut client = env.core.etcd_client().await.expect("etcd runs");
    let mut noise = vec![0u8; 100_000];
    for i in 0..15 {
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut noise).unwrap();
        client
            .put(format!("noise/{i}"), noise.clone(), None)
            .await
            .unwrap();
    }
    kcps.patch(
        KCP,
        &Default::default(),
        &kube::api::Patch::Merge(&due("2020-01-02T03:00:00Z")),
    )
    .await
    .unwrap();
    let deadline = Instant::now() + CONVERGE;
    let refused = loop {
        let kcp = kcps.get(KCP).await.unwrap();
        if let Some(c) = condition(&kcp, "EtcdSnapshotTaken")
            && c.status == "False"
        {
            break c.clone();
        }
        assert!(Instant::now() < deadline, "the snapshot was not refused");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(refused.reason, "TooLargeForSecret");
    assert!(
        refused.message.contains("more than a Secret holds"),
        "{}",
        refused.message
    );
    let kcp = kcps.get(KCP).await.unwrap();
    assert!(kcp.annotations()[ETCD_LAST_SNAPSHOT_ANNOTATION].ends_with(" refused"));
    assert_eq!(
        snapshot_names().await,
        [
            "prod-etcd-snapshot-20200102t030000z".to_owned(),
            name.to_owned()
        ],
        "a refused snapshot neither adds nor prunes"
    );
    let warned = Api::<Event>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .any(|e| e.reason.as_deref() == Some("EtcdSnapshotRefused"));
    assert!(warned, "no Warning Event");
}

testenv::on_every_etcd_release!(
    learners_are_promoted_and_a_rollout_moves_leadership_and_members_first,
    a_member_that_never_started_is_removed_while_the_voters_keep_quorum,
    scheduled_defragmentation_shrinks_every_member_while_writes_continue,
    three_to_five_to_three_keeps_one_voter_per_machine,
    a_rollout_to_a_newer_etcd_minor_waits_for_members_at_its_upgrade_floor,
    a_leaving_machine_keeps_its_member_until_other_pre_terminate_hooks_are_gone,
    scheduled_snapshots_are_written_kept_and_accepted_by_the_release_tools,
    scheduled_snapshots_into_secrets_are_pruned_refused_when_too_large_and_accepted_by_the_release_tools,
);
