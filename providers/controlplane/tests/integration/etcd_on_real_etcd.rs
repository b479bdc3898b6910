//! The etcd access layer against real etcd clusters (three TLS members on 127.0.0.1), with a client
//! certificate issued by `etcd::tls` from the cluster's etcd CA. Every test runs on Debian's etcd 3.4 and
//! on the current release (`etcd_3_4::…`, `etcd_current::…`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kubeadm_cluster::CertPem;
use kubeadm_controlplane::etcd::{
    EtcdClientConfig, EtcdClients, EtcdError, WorkloadEtcd, issue_client_cert,
};
use testenv::{EtcdCluster, EtcdOptions, EtcdRelease};
use time::OffsetDateTime;

struct Fixture {
    cluster: EtcdCluster,
    clients: EtcdClients,
    etcd: WorkloadEtcd,
    _dir: tempfile::TempDir,
}

fn config() -> EtcdClientConfig {
    EtcdClientConfig {
        call_timeout: Duration::from_secs(5),
        dial_timeout: Duration::from_secs(2),
        ..EtcdClientConfig::default()
    }
}

async fn three_members(release: EtcdRelease) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let cluster = EtcdCluster::start(
        dir.path(),
        EtcdOptions {
            members: 3,
            ..EtcdOptions::on(release).unwrap()
        },
    )
    .await
    .unwrap();
    let clients = EtcdClients::new(config());
    let etcd = clients.workload(Arc::new(client_cert(&cluster)));
    Fixture {
        cluster,
        clients,
        etcd,
        _dir: dir,
    }
}

fn client_cert(cluster: &EtcdCluster) -> kubeadm_controlplane::etcd::EtcdClientCert {
    let tls = cluster.tls().expect("the cluster serves TLS");
    let ca = CertPem {
        cert: tls.ca_pem.clone(),
        key: tls.ca_key_pem().to_owned(),
    };
    issue_client_cert("test", &ca, OffsetDateTime::now_utc()).unwrap()
}

fn urls(cluster: &EtcdCluster) -> Vec<String> {
    cluster.client_urls()
}

/// Quorum check: a linearizable write and read through the harness's own client.
async fn put_and_get(cluster: &EtcdCluster, key: &str) {
    let mut client = cluster.client().await.unwrap();
    client.put(key, "v", None).await.unwrap();
    let got = client.get(key, None).await.unwrap();
    assert_eq!(got.kvs().len(), 1, "{key} was written");
}

async fn voters_are_listed_with_status_and_no_alarms(release: EtcdRelease) {
    let f = three_members(release).await;
    let endpoints = urls(&f.cluster);
    let members = f.etcd.member_list(&endpoints[0]).await.unwrap();
    assert_eq!(members.len(), 3);
    for m in f.cluster.members() {
        let listed = members.iter().find(|l| l.name == m.name).unwrap();
        assert_eq!(listed.client_urls, vec![m.client_url.clone()]);
        assert_eq!(listed.peer_urls, vec![m.peer_url.clone()]);
        assert!(!listed.is_learner && listed.is_started());
    }
    let mut leaders = Vec::new();
    for (url, m) in endpoints.iter().zip(f.cluster.members()) {
        let status = f.etcd.status(url).await.unwrap();
        let listed = members.iter().find(|l| l.name == m.name).unwrap();
        assert_eq!(status.id, listed.id, "status at {url} names its own member");
        assert!(!status.is_learner);
        assert!(status.raft_term > 0 && status.raft_index > 0);
        assert!(
            status.raft_applied_index > 0,
            "3.4 reports the applied index"
        );
        assert!(status.revision >= 1);
        assert!(status.db_size > 0 && status.db_size_in_use > 0);
        assert!(status.version.starts_with("3."), "{}", status.version);
        assert!(status.errors.is_empty(), "{:?}", status.errors);
        leaders.push(status.leader);
    }
    leaders.dedup();
    assert_eq!(leaders.len(), 1, "every member follows the same leader");
    assert!(f.etcd.alarms(&endpoints[1]).await.unwrap().is_empty());

    let observed = f.etcd.observe(&endpoints).await.unwrap();
    assert_eq!(observed.members.len(), 3);
    assert_eq!(observed.states.len(), 3);
    assert!(observed.states.values().all(Result::is_ok));
    assert_eq!(observed.leader, Some(leaders[0]));
    assert!(observed.alarms.is_empty());
    let leader_url = observed.leader_endpoint().unwrap();
    assert!(endpoints.iter().any(|u| u == leader_url));

    // Connections are reused across calls; a new certificate gets its own, and idle ones are closed.
    assert_eq!(f.clients.cached(), 3);
    let rotated = f.clients.workload(Arc::new(client_cert(&f.cluster)));
    let again = rotated.observe(&endpoints).await.unwrap();
    assert_eq!(again.members, observed.members);
    rotated.observe(&endpoints).await.unwrap();
    assert_eq!(f.clients.cached(), 6);
}

/// The upgrade floor against the server versions real members report: Debian's 3.4 is below 3.6's floor
/// (3.5.20) and, an older minor, below 3.7's (3.6.11); the current 3.6 release is above 3.7's.
async fn the_upgrade_floor_reads_the_versions_real_members_report(release: EtcdRelease) {
    let f = three_members(release).await;
    let observed = f.etcd.observe(&urls(&f.cluster)).await.unwrap();
    let versions: std::collections::BTreeMap<u64, String> = observed
        .states
        .iter()
        .map(|(id, s)| (*id, s.as_ref().unwrap().version.clone()))
        .collect();
    let check = |version: &str, tag: Option<&str>| {
        kubeadm_controlplane::etcd_upgrade::check(version, tag, &observed.members, &versions)
    };
    let running = versions.values().next().unwrap().clone();
    match release {
        EtcdRelease::V3_4 => {
            assert!(running.starts_with("3.4."), "{running}");
            for (version, floor) in [("v1.34.4", "3.5.20"), ("v1.37.2", "3.6.11")] {
                let held = check(version, None).unwrap_or_else(|| panic!("{version} not held"));
                assert_eq!(held.floor, floor);
                assert_eq!(held.members.len(), 3, "{held:?}");
                assert!(
                    held.members
                        .iter()
                        .all(|m| m.ends_with(&format!("({running})")))
                );
            }
        }
        EtcdRelease::Current => {
            assert!(running.starts_with("3.6."), "{running}");
            assert_eq!(check("v1.37.2", None), None);
            // An image older than the members' is not an upgrade: not held here.
            assert_eq!(check("v1.37.2", Some("3.5.24-0")), None);
        }
    }
    // Pinned to the members' own minor, nothing is held.
    assert_eq!(check("v1.37.2", Some(&format!("{running}-0"))), None);
}

async fn idle_connections_are_closed(release: EtcdRelease) {
    let f = three_members(release).await;
    let endpoints = urls(&f.cluster);
    let clients = EtcdClients::new(EtcdClientConfig {
        idle_client_ttl: Duration::from_millis(500),
        ..config()
    });
    let etcd = clients.workload(Arc::new(client_cert(&f.cluster)));
    etcd.observe(&endpoints).await.unwrap();
    assert_eq!(clients.cached(), 3);
    tokio::time::sleep(Duration::from_millis(600)).await;
    etcd.status(&endpoints[0]).await.unwrap();
    assert_eq!(clients.cached(), 1);
}

async fn an_unstarted_learner_is_listed_without_status_and_removed(release: EtcdRelease) {
    let f = three_members(release).await;
    let endpoints = urls(&f.cluster);
    let peer_url = format!("https://127.0.0.1:{}", testenv::ports::free_port().unwrap());
    let started = Instant::now();
    let added = f.etcd.add_learner(&endpoints[0], &peer_url).await.unwrap();
    // A fresh cluster refuses membership changes ("unhealthy cluster") for its first seconds; retried.
    println!(
        "measured: adding a learner to a fresh cluster took {:?}",
        started.elapsed()
    );
    assert!(added.is_learner);
    assert_eq!(added.peer_urls, vec![peer_url.clone()]);

    let observed = f.etcd.observe(&endpoints).await.unwrap();
    let learner = observed.member(added.id).expect("the learner is listed");
    assert!(learner.is_learner && !learner.is_started(), "{learner:?}");
    assert!(learner.name.is_empty() && learner.client_urls.is_empty());
    assert!(
        !observed.states.contains_key(&added.id),
        "no client URL, so no status"
    );
    assert_eq!(observed.states.len(), 3);

    // etcd allows one learner at a time.
    let other_peer = format!("https://127.0.0.1:{}", testenv::ports::free_port().unwrap());
    let err = f
        .etcd
        .add_learner(&endpoints[1], &other_peer)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("too many learner"), "{err}");

    // A learner that never started is never in sync: promotion gives up after its bound.
    let impatient = EtcdClients::new(EtcdClientConfig {
        promote_retry_for: Duration::from_secs(2),
        ..config()
    })
    .workload(Arc::new(client_cert(&f.cluster)));
    let started = Instant::now();
    let err = impatient
        .promote(&endpoints[0], added.id)
        .await
        .unwrap_err();
    let gave_up = started.elapsed();
    assert!(matches!(err, EtcdError::GaveUp { .. }), "{err:?}");
    assert!(err.to_string().contains("in sync with leader"), "{err}");
    assert!(err.to_string().contains(&endpoints[0]), "{err}");
    assert!(
        gave_up >= Duration::from_secs(2) && gave_up < Duration::from_secs(4),
        "{gave_up:?}"
    );

    let started = Instant::now();
    f.etcd.remove(&[&endpoints[1]], added.id).await.unwrap();
    let removal = started.elapsed();
    println!("measured: removing an unstarted learner took {removal:?}");
    // etcd 3.4 answers the member list from the member's own state: a follower may list the removed
    // learner until it applied the change.
    let deadline = Instant::now() + Duration::from_secs(10);
    let members = loop {
        let members = f.etcd.member_list(&endpoints[2]).await.unwrap();
        if members.len() == 3 || Instant::now() > deadline {
            break members;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(members.len(), 3);
    assert!(members.iter().all(|m| m.id != added.id));
    // Removing it again succeeds: an earlier answer may have been lost.
    f.etcd.remove(&[&endpoints[2]], added.id).await.unwrap();
    put_and_get(&f.cluster, "after-learner-removal").await;
}

/// Promotes the first learner that appears in the member list as soon as etcd allows (retrying while it
/// catches up), then optionally removes `then_remove` at once. Returns the learner's ID and how long the
/// promotion and the removal took.
fn promote_when_listed(
    etcd: WorkloadEtcd,
    voter: String,
    then_remove: Option<u64>,
) -> tokio::task::JoinHandle<(u64, Duration, Option<Duration>)> {
    tokio::spawn(async move {
        let learner = loop {
            let members = etcd.member_list(&voter).await.unwrap();
            if let Some(learner) = members.into_iter().find(|m| m.is_learner) {
                break learner;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let started = Instant::now();
        etcd.promote(&voter, learner.id).await.unwrap();
        let promoted = started.elapsed();
        let mut removed = None;
        if let Some(id) = then_remove {
            let started = Instant::now();
            etcd.remove(&[&voter], id).await.unwrap();
            removed = Some(started.elapsed());
        }
        (learner.id, promoted, removed)
    })
}

async fn a_joining_learner_is_promoted_as_soon_as_it_is_in_sync(release: EtcdRelease) {
    let mut f = three_members(release).await;
    let voters = urls(&f.cluster);
    let promoter = promote_when_listed(f.etcd.clone(), voters[0].clone(), None);
    let learner_id = f.cluster.add_learner("learner").await.unwrap();
    let (promoted_id, promoted_after, _) = promoter.await.unwrap();
    assert_eq!(promoted_id, learner_id);
    println!("measured: 3 voters + learner: learner listed → promoted in {promoted_after:?}");

    // The promotion is committed by the voters; the member itself applies it a moment later.
    let learner_url = client_url_of(&f.cluster, learner_id);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        let status = f.etcd.status(&learner_url).await.unwrap();
        if !status.is_learner || Instant::now() > deadline {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!status.is_learner, "the member applies its own promotion");
    assert_eq!(status.id, learner_id);
    let members = f.etcd.member_list(&learner_url).await.unwrap();
    assert_eq!(members.len(), 4);
    assert!(members.iter().all(|m| !m.is_learner && m.is_started()));
    // Promoting again is a no-op: it is a voter already.
    f.etcd.promote(&voters[1], learner_id).await.unwrap();
    put_and_get(&f.cluster, "after-promotion").await;
}

/// The one-member rollout: join a learner, promote it, remove the old member at once. etcd refuses the
/// removal ("unhealthy cluster") until the new voter has been connected for a few seconds; remove retries.
async fn the_old_member_is_removed_right_after_promoting_its_replacement(release: EtcdRelease) {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = EtcdCluster::start(dir.path(), EtcdOptions::on(release).unwrap())
        .await
        .unwrap();
    let etcd = EtcdClients::new(config()).workload(Arc::new(client_cert(&cluster)));
    let old_url = cluster.members()[0].client_url.clone();
    let old_id = etcd.status(&old_url).await.unwrap().id;

    let promoter = promote_when_listed(etcd.clone(), old_url.clone(), Some(old_id));
    let new_id = cluster.add_learner("replacement").await.unwrap();
    let (promoted_id, promoted_after, removed_after) = promoter.await.unwrap();
    assert_eq!(promoted_id, new_id);
    let removed_after = removed_after.unwrap();
    println!(
        "measured: 1 voter + learner: learner listed → promoted in {promoted_after:?}; old member removed \
         {removed_after:?} after the promotion"
    );

    let new_url = client_url_of(&cluster, new_id);
    let members = etcd.member_list(&new_url).await.unwrap();
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].id, new_id);
    assert!(!members[0].is_learner);
    let deadline = Instant::now() + Duration::from_secs(10);
    while etcd.status(&new_url).await.unwrap().leader != new_id {
        assert!(
            Instant::now() < deadline,
            "the new member did not take the lead"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut client = cluster
        .connect(std::slice::from_ref(&new_url))
        .await
        .unwrap();
    client.put("after-rollout", "v", None).await.unwrap();
    cluster.stop();
}

/// A rollout's hand-over: a new member joins, is promoted and takes the lead, and the old leader is
/// removed at once. The new leader refuses the removal ("unhealthy cluster") until its own connections
/// to the others are 5 s old; asked in turn (the leader first, never the member that leaves), a voter of
/// longer standing takes it in the same round.
async fn a_removal_right_after_a_hand_over_is_taken_by_an_older_voter(release: EtcdRelease) {
    let mut f = three_members(release).await;
    // etcd counts a peer as connected once it has been for 5 s: the first three settle first.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let voters = urls(&f.cluster);
    let before = f.etcd.observe(&voters).await.unwrap();
    let old_leader = before.leader.unwrap();
    let old_leader_url = before.leader_endpoint().unwrap().to_owned();
    let promoter = promote_when_listed(f.etcd.clone(), voters[0].clone(), None);
    let new_id = f.cluster.add_learner("replacement").await.unwrap();
    assert_eq!(promoter.await.unwrap().0, new_id);
    let new_url = client_url_of(&f.cluster, new_id);
    f.etcd.move_leader(&old_leader_url, new_id).await.unwrap();

    let endpoints = urls(&f.cluster);
    let deadline = Instant::now() + Duration::from_secs(10);
    let observed = loop {
        let observed = f.etcd.observe(&endpoints).await.unwrap();
        let agreed = observed
            .states
            .values()
            .all(|s| s.as_ref().is_ok_and(|s| s.leader == new_id));
        if agreed {
            break observed;
        }
        assert!(
            Instant::now() < deadline,
            "leadership did not move: {observed:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let proposers = observed.proposer_endpoints(Some(old_leader));
    assert_eq!(proposers.len(), 3, "{proposers:?}");
    assert_eq!(proposers[0], new_url, "the leader first");
    assert!(!proposers.contains(&old_leader_url.as_str()));

    // One round, no pause: only a member that takes the removal at once can make it succeed.
    let once = EtcdClients::new(EtcdClientConfig {
        membership_retry_for: Duration::ZERO,
        ..config()
    })
    .workload(Arc::new(client_cert(&f.cluster)));
    match once.remove(&proposers[..1], old_leader).await {
        Ok(()) => println!("measured: the new leader took the removal itself (it was up for 5 s)"),
        Err(e) => {
            assert!(matches!(e, EtcdError::GaveUp { .. }), "{e:?}");
            assert!(e.to_string().contains("unhealthy cluster"), "{e}");
            println!("measured: the new leader refused the removal: {e}");
        }
    }
    once.remove(&proposers, old_leader).await.unwrap();
    let members = f.etcd.member_list(&new_url).await.unwrap();
    assert_eq!(members.len(), 3, "{members:?}");
    assert!(members.iter().all(|m| m.id != old_leader));
    let mut client = f
        .cluster
        .connect(std::slice::from_ref(&new_url))
        .await
        .unwrap();
    client.put("after-hand-over", "v", None).await.unwrap();
}

fn client_url_of(cluster: &EtcdCluster, id: u64) -> String {
    cluster
        .members()
        .iter()
        .find(|m| m.learner_id == Some(id))
        .expect("a member this harness added as a learner")
        .client_url
        .clone()
}

async fn a_started_learner_answers_status_but_not_the_member_list(release: EtcdRelease) {
    let mut f = three_members(release).await;
    let voters = urls(&f.cluster);
    let learner_id = f.cluster.add_learner("learner").await.unwrap();
    let learner_url = client_url_of(&f.cluster, learner_id);

    let status = f.etcd.status(&learner_url).await.unwrap();
    assert!(status.is_learner);
    assert_eq!(status.id, learner_id);
    assert_ne!(status.leader, 0, "a learner knows the leader");
    for refused in [
        f.etcd.member_list(&learner_url).await.unwrap_err(),
        f.etcd.alarms(&learner_url).await.unwrap_err(),
    ] {
        println!("at a learner: {refused}");
        assert!(
            matches!(refused, EtcdError::LearnerRefused { .. }),
            "{refused:?}"
        );
    }

    // With the learner first, observe skips it and reads the list from a voter.
    let mut endpoints = vec![learner_url.clone()];
    endpoints.extend(voters.iter().cloned());
    let observed = f.etcd.observe(&endpoints).await.unwrap();
    assert_eq!(observed.members.len(), 4);
    assert!(observed.member(learner_id).unwrap().is_learner);
    assert!(observed.states[&learner_id].as_ref().unwrap().is_learner);
    assert_eq!(observed.states.len(), 4);
}

async fn leadership_moves_to_the_chosen_member(release: EtcdRelease) {
    let f = three_members(release).await;
    let endpoints = urls(&f.cluster);
    let observed = f.etcd.observe(&endpoints).await.unwrap();
    let leader = observed.leader.unwrap();
    let leader_url = observed.leader_endpoint().unwrap().to_owned();
    let target = observed.members.iter().find(|m| m.id != leader).unwrap();
    let follower_url = target.client_urls[0].clone();

    let err = f
        .etcd
        .move_leader(&follower_url, target.id)
        .await
        .unwrap_err();
    assert!(matches!(err, EtcdError::NotLeader { .. }), "{err:?}");
    assert!(err.to_string().contains(&follower_url), "{err}");

    f.etcd.move_leader(&leader_url, target.id).await.unwrap();
    // MoveLeader returns once the target has taken over; every member follows it shortly after.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let observed = f.etcd.observe(&endpoints).await.unwrap();
        let agreed = observed
            .states
            .values()
            .all(|s| s.as_ref().is_ok_and(|s| s.leader == target.id));
        if agreed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "leadership did not move: {observed:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = f.etcd.status(&follower_url).await.unwrap();
    assert_eq!(status.leader, status.id);
}

async fn compaction_and_defragmentation_on_every_member(release: EtcdRelease) {
    let f = three_members(release).await;
    let endpoints = urls(&f.cluster);
    let mut client = f.cluster.client().await.unwrap();
    for i in 0..200 {
        client
            .put("churn", format!("value-{i}-{}", "x".repeat(1024)), None)
            .await
            .unwrap();
    }
    let before = f.etcd.status(&endpoints[0]).await.unwrap();
    f.etcd
        .compact(&endpoints[0], before.revision)
        .await
        .unwrap();
    // Compacting to the same revision again is refused by etcd; the error names endpoint and operation.
    let again = f
        .etcd
        .compact(&endpoints[1], before.revision)
        .await
        .unwrap_err();
    assert!(
        again.to_string().contains(&endpoints[1]) && again.to_string().contains("compact"),
        "{again}"
    );
    for url in &endpoints {
        f.etcd.defragment(url).await.unwrap();
        let after = f.etcd.status(url).await.unwrap();
        assert!(after.db_size_in_use <= after.db_size, "{after:?}");
    }
    let after = f.etcd.status(&endpoints[0]).await.unwrap();
    assert!(
        after.db_size < before.db_size,
        "defragmentation shrank the file: {} → {}",
        before.db_size,
        after.db_size
    );
    put_and_get(&f.cluster, "after-defrag").await;
}

async fn a_snapshot_is_accepted_by_the_release_tools(release: EtcdRelease) {
    let f = three_members(release).await;
    let endpoints = urls(&f.cluster);
    put_and_get(&f.cluster, "in-the-snapshot").await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("etcd.snapshot");
    let mut file = tokio::fs::File::create(&path).await.unwrap();
    let written = f.etcd.snapshot(&endpoints[1], &mut file).await.unwrap();
    file.sync_all().await.unwrap();
    drop(file);
    assert_eq!(written, std::fs::metadata(&path).unwrap().len());
    let out = release
        .snapshot_status()
        .unwrap()
        .arg(&path)
        .output()
        .expect("the release's snapshot checker runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "snapshot status: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(status["revision"].as_i64().unwrap() >= 2, "{status}");
    assert!(status["totalKey"].as_i64().unwrap() >= 1, "{status}");
}

async fn a_stopped_member_is_unreachable_within_the_timeout(release: EtcdRelease) {
    let mut f = three_members(release).await;
    let endpoints = urls(&f.cluster);
    // Connect while it is up, so the cached connection has to notice the member going away.
    f.etcd.status(&endpoints[0]).await.unwrap();
    let name = f.cluster.members()[0].name.clone();
    f.cluster.member_mut(&name).unwrap().stop();

    let timeout = config().call_timeout;
    for _ in 0..2 {
        let started = Instant::now();
        let err = f.etcd.status(&endpoints[0]).await.unwrap_err();
        let took = started.elapsed();
        println!("status of a stopped member: {err} after {took:?}");
        assert!(matches!(err, EtcdError::Unreachable { .. }), "{err:?}");
        assert_eq!(err.endpoint(), Some(endpoints[0].as_str()));
        assert!(err.to_string().contains(&endpoints[0]), "{err}");
        assert!(took < timeout + Duration::from_secs(1), "took {took:?}");
    }

    // The stopped member's endpoint first: observe falls back to the next and reports it unreachable.
    let observed = f.etcd.observe(&endpoints).await.unwrap();
    assert_eq!(observed.members.len(), 3);
    let stopped = observed.members.iter().find(|m| m.name == name).unwrap();
    let state = observed.states[&stopped.id].as_ref().unwrap_err();
    assert!(state.is_unreachable(), "{state:?}");
    assert_eq!(observed.states.values().filter(|s| s.is_ok()).count(), 2);
    assert!(observed.leader.is_some());

    // Nothing answers at all: the error lists every endpoint tried.
    let nowhere = vec![endpoints[0].clone()];
    let err = f.etcd.observe(&nowhere).await.unwrap_err();
    assert!(matches!(err, EtcdError::NoMemberList { .. }), "{err:?}");
    assert!(err.to_string().contains(&endpoints[0]), "{err}");
}

/// Each side refusing the other's certificate is told apart from an outage, with the member's URL.
async fn certificate_refusals_name_the_endpoint_and_the_side_that_refused(release: EtcdRelease) {
    use kubeadm_controlplane::etcd::TlsProblem;
    let f = three_members(release).await;
    let endpoint = urls(&f.cluster)[0].clone();
    let tls = f.cluster.tls().unwrap();
    let cluster_ca = CertPem {
        cert: tls.ca_pem.clone(),
        key: tls.ca_key_pem().to_owned(),
    };
    let other = testenv::pki::Ca::new("other-etcd-ca").unwrap();
    let other_ca = CertPem {
        cert: other.cert_pem().to_owned(),
        key: other.key_pem().to_owned(),
    };
    let now = OffsetDateTime::now_utc();
    let refusal = |cert: kubeadm_controlplane::etcd::EtcdClientCert| {
        let etcd = EtcdClients::new(config()).workload(Arc::new(cert));
        let endpoint = endpoint.clone();
        async move { etcd.status(&endpoint).await.unwrap_err() }
    };

    // Signed by a CA the members do not trust (while trusting theirs): the member refuses us.
    let mut foreign = issue_client_cert("test", &other_ca, now).unwrap();
    foreign.ca_pem = cluster_ca.cert.clone();
    let err = refusal(foreign).await;
    println!("client certificate from another CA: {err}");
    assert_eq!(
        err.tls_problem(),
        Some(TlsProblem::ClientCertRejected),
        "{err:?}"
    );
    assert!(err.to_string().contains(&endpoint), "{err}");

    // Expired: issued two days ago with a one-day lifetime.
    let expired = issue_client_cert("test", &cluster_ca, now - time::Duration::days(2)).unwrap();
    let err = refusal(expired).await;
    println!("expired client certificate: {err}");
    assert_eq!(
        err.tls_problem(),
        Some(TlsProblem::ClientCertRejected),
        "{err:?}"
    );

    // We trust another CA than the one that signed the members' serving certificate.
    let untrusting = issue_client_cert("test", &other_ca, now).unwrap();
    let err = refusal(untrusting).await;
    println!("serving certificate from an untrusted CA: {err}");
    assert_eq!(
        err.tls_problem(),
        Some(TlsProblem::ServerUntrusted),
        "{err:?}"
    );
    assert!(!err.is_unreachable());

    // The whole observation fails the same way, one attempt per endpoint.
    let mut foreign = issue_client_cert("test", &other_ca, now).unwrap();
    foreign.ca_pem = cluster_ca.cert.clone();
    let etcd = EtcdClients::new(config()).workload(Arc::new(foreign));
    let Err(EtcdError::NoMemberList { attempts }) = etcd.observe(&urls(&f.cluster)).await else {
        panic!("observing with a refused certificate must fail");
    };
    assert_eq!(attempts.len(), 3);
    assert!(
        attempts
            .iter()
            .all(|a| a.tls_problem() == Some(TlsProblem::ClientCertRejected)),
        "{attempts:?}"
    );
}

/// Routed access (how port-forwarding plugs in): every member's client URL maps to a local listener that
/// only relays bytes, here a plain TCP relay; TLS still runs end to end and errors name the member's URL.
async fn routed_members_are_reached_through_local_relays(release: EtcdRelease) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let f = three_members(release).await;
    let relayed = Arc::new(AtomicUsize::new(0));
    let mut routes = std::collections::BTreeMap::new();
    let (mut relays, mut tasks) = (Vec::new(), Vec::new());
    for url in urls(&f.cluster) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let local = listener.local_addr().unwrap();
        let upstream = url.trim_start_matches("https://").to_owned();
        let relayed = relayed.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let (mut conn, _) = listener.accept().await.unwrap();
                relayed.fetch_add(1, Ordering::Relaxed);
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let mut member = tokio::net::TcpStream::connect(upstream).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut conn, &mut member).await;
                });
            }
        }));
        routes.insert(url.clone(), format!("https://{local}"));
        relays.push(url);
    }
    let etcd = EtcdClients::new(config())
        .workload(Arc::new(client_cert(&f.cluster)))
        .routed(routes.clone());
    let observed = etcd.observe(&urls(&f.cluster)).await.unwrap();
    assert_eq!(observed.members.len(), 3);
    assert!(observed.states.values().all(Result::is_ok));
    assert!(
        relayed.load(Ordering::Relaxed) >= 3,
        "every member was reached through its relay"
    );

    // A relay whose far end is gone: the error names the member's own URL, not the relay's.
    let first = &relays[0];
    tasks[0].abort();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let fresh = EtcdClients::new(config())
        .workload(Arc::new(client_cert(&f.cluster)))
        .routed(routes.clone());
    let err = fresh.status(first).await.unwrap_err();
    assert!(err.is_unreachable(), "{err}");
    assert_eq!(err.endpoint(), Some(first.as_str()));
}

testenv::on_every_etcd_release!(
    voters_are_listed_with_status_and_no_alarms,
    the_upgrade_floor_reads_the_versions_real_members_report,
    idle_connections_are_closed,
    an_unstarted_learner_is_listed_without_status_and_removed,
    a_joining_learner_is_promoted_as_soon_as_it_is_in_sync,
    the_old_member_is_removed_right_after_promoting_its_replacement,
    a_removal_right_after_a_hand_over_is_taken_by_an_older_voter,
    a_started_learner_answers_status_but_not_the_member_list,
    leadership_moves_to_the_chosen_member,
    compaction_and_defragmentation_on_every_member,
    a_snapshot_is_accepted_by_the_release_tools,
    a_stopped_member_is_unreachable_within_the_timeout,
    certificate_refusals_name_the_endpoint_and_the_side_that_refused,
    routed_members_are_reached_through_local_relays,
);
