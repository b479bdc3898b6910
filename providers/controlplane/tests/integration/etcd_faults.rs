//! Stacked etcd that the controller must not touch, against real etcd (3.4 and the current release) and
//! the real apiserver: members whose database hit its space quota (NOSPACE alarm), on a settled control
//! plane and in the middle of a rollout; members that refuse the controller's client certificate; a
//! member that serves an expired certificate. Each becomes a condition that names the member and the
//! cause, and no membership change or scaling happens until the fault is cleared.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kubeadm_controlplane::controller::Settings;
use serde_json::json;
use testenv::EtcdRelease;

/// Waits until condition `type_` of the control plane is False and its message passes `check`; returns
/// the condition's reason and message.
pub(crate) async fn wait_condition(
    env: &Env,
    type_: &str,
    check: impl Fn(&str) -> bool,
) -> (String, String) {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let kcp = kcp(&env.client).await;
        if let Some(c) = condition(&kcp, type_)
            && c.status == "False"
            && check(&c.message)
        {
            return (c.reason.clone(), c.message.clone());
        }
        assert!(
            Instant::now() < deadline,
            "{type_} never matched: {:?}",
            condition(&kcp, type_)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Membership changes the controller made, as Event actions.
async fn membership_changes(env: &Env) -> Vec<String> {
    Api::<Event>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("EtcdMembershipChanged"))
        .filter_map(|e| e.action)
        .collect()
}

async fn member_count(env: &Env) -> usize {
    let mut client = env.core.etcd_client().await.expect("etcd runs");
    client.member_list().await.unwrap().members().len()
}

/// Adds a learner at a peer URL where nothing listens: a join that died after adding its member.
async fn add_unstarted_learner(client: &mut etcd_client::Client) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let add = client
            .member_add(
                ["https://127.0.0.1:1"],
                Some(etcd_client::MemberAddOptions::new().with_is_learner()),
            )
            .await;
        match add {
            Ok(_) => return,
            Err(e) if e.to_string().contains("unhealthy cluster") && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => panic!("etcd refused the learner: {e}"),
        }
    }
}

/// `replicas` machines whose etcd members have a 2 MiB quota, and the controller with `settings`.
async fn with_small_quota(replicas: i32, release: EtcdRelease, settings: Settings) -> Env {
    let mut env = setup_etcd(
        replicas,
        "prod-control-plane-genc01",
        false,
        Some(StackedEtcd {
            release,
            extra_args: vec!["--quota-backend-bytes=2097152".into()],
        }),
    )
    .await;
    env.tasks.push(start_with(&env.client, settings));
    env
}

/// Writes `count` values of 100 kB under `fill/`, numbered from `from`; the quota's refusal, if any.
/// Other errors (the client picked a learner, or a member that has just gone) are retried.
async fn fill(client: &mut etcd_client::Client, from: usize, count: usize) -> Option<String> {
    let value = "x".repeat(100_000);
    for i in from..from + count {
        let mut attempts = 0;
        while let Err(e) = client.put(format!("fill/{i}"), value.clone(), None).await {
            let e = e.to_string();
            attempts += 1;
            if e.contains("database space exceeded") || attempts == 50 {
                return Some(e);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    None
}

/// Fills the members' 2 MiB quota until etcd raises NOSPACE and refuses writes; returns the IDs of the
/// members that raised the alarm.
async fn fill_to_quota(client: &mut etcd_client::Client) -> Vec<u64> {
    let refused = fill(client, 1000, 100).await;
    let refused = refused.expect("the quota was never reached");
    assert!(refused.contains("database space exceeded"), "{refused}");
    alarms(client)
        .await
        .expect("list alarms")
        .into_iter()
        .map(|(member, _)| member)
        .collect()
}

/// The members' alarms, as (member, alarm type).
async fn alarms(
    client: &mut etcd_client::Client,
) -> Result<Vec<(u64, etcd_client::AlarmType)>, etcd_client::Error> {
    let response = client
        .alarm(
            etcd_client::AlarmAction::Get,
            etcd_client::AlarmType::None,
            None,
        )
        .await?;
    Ok(response
        .alarms()
        .iter()
        .map(|alarm| (alarm.member_id(), alarm.alarm()))
        .collect())
}

/// What an operator does about NOSPACE: free the space, compact, defragment every member, disarm every
/// alarm (`etcdctl alarm disarm`). A member that applied the filling writes late (a learner catching up
/// on a busy machine) may raise its own alarm after the first ones were listed: disarmed as it shows.
/// Once the first alarms are gone the rollout may resume and remove a member, so every round asks the
/// voters of that moment.
async fn free_and_disarm(env: &Env, client: &mut etcd_client::Client) {
    client
        .delete(
            "fill/",
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    let revision = client.status().await.unwrap().header().unwrap().revision();
    client.compact(revision, None).await.unwrap();
    let (urls, options) = env
        .core
        .with_etcd(|etcd| (etcd.running_urls(), etcd.connect_options()))
        .await
        .expect("etcd runs");
    for url in &urls {
        let mut member = etcd_client::Client::connect([url.as_str()], Some(options.clone()))
            .await
            .unwrap();
        // A learner has taken no writes beyond what its leader sends it; it may refuse the request.
        if let Err(e) = member.defragment().await {
            assert!(e.to_string().contains("learner"), "defragment {url}: {e}");
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut quiet = 0;
    let mut last = None;
    while quiet < 3 {
        assert!(
            Instant::now() < deadline,
            "NOSPACE keeps coming back: {last:?}"
        );
        let mut voters = voters_client(env).await;
        let listed = alarms(&mut voters).await;
        quiet = match &listed {
            Ok(none) if none.is_empty() => quiet + 1,
            _ => 0,
        };
        for (member, alarm) in listed.as_ref().map(Vec::as_slice).unwrap_or_default() {
            let mut disarm = etcd_client::AlarmOptions::new();
            disarm.with_member(*member);
            // A member removed between the list and the disarm is the next round's business.
            let _ = voters
                .alarm(etcd_client::AlarmAction::Deactivate, *alarm, Some(disarm))
                .await;
        }
        last = Some(listed);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn a_nospace_alarm_names_the_member_and_holds_every_membership_change(release: EtcdRelease) {
    let grace = Duration::from_secs(2);
    let env = with_small_quota(
        1,
        release,
        Settings {
            unstarted_grace: k8s_openapi::jiff::SignedDuration::try_from(grace).unwrap(),
            ..test_settings()
        },
    )
    .await;
    wait_converged(&env, 1, "initial").await;
    let node = format!("node-{}", machines(&env.client).await[0].name_any());

    let mut client = env.core.etcd_client().await.expect("etcd runs");
    let alarmed = fill_to_quota(&mut client).await;
    assert_eq!(alarmed.len(), 1, "one NOSPACE alarm");

    // A join that died meanwhile: without the alarm, it would be removed after its grace.
    add_unstarted_learner(&mut client).await;
    let added = Instant::now();

    let (reason, message) =
        wait_condition(&env, "EtcdClusterHealthy", |m| m.contains("NOSPACE")).await;
    assert!(message.contains(&node), "names the member: {message}");
    assert_eq!(reason, "NotHealthy");
    let (_, settled) = wait_condition(&env, "EtcdMembershipSettled", |m| {
        m.contains("alarm NOSPACE")
    })
    .await;
    assert!(settled.contains(&node), "{settled}");
    println!("EtcdClusterHealthy: {message}\nEtcdMembershipSettled: {settled}");

    // Several reconciles past the grace, the unstarted learner is still there.
    tokio::time::sleep(grace * 6).await;
    assert_eq!(
        member_count(&env).await,
        2,
        "no membership change under an alarm"
    );
    assert!(
        !membership_changes(&env)
            .await
            .contains(&"RemoveUnstartedMember".to_owned()),
        "the learner was removed under an alarm"
    );

    // The operator's fix: free the space, compact, defragment, disarm. The held change then goes ahead.
    free_and_disarm(&env, &mut client).await;
    let cleared = Instant::now();
    let deadline = Instant::now() + CONVERGE;
    while member_count(&env).await != 1 {
        assert!(
            Instant::now() < deadline,
            "the unstarted learner was never removed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "measured: unstarted learner held {:?} under NOSPACE, removed {:?} after the alarm was cleared",
        cleared - added,
        cleared.elapsed()
    );
    // The Event follows the removal.
    while !membership_changes(&env)
        .await
        .contains(&"RemoveUnstartedMember".to_owned())
    {
        assert!(Instant::now() < deadline, "no Event for the removal");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn replace_etcd_ca(env: &Env, cert: &str, key: &str) {
    let patch = json!({ "stringData": { "tls.crt": cert, "tls.key": key } });
    Api::<Secret>::namespaced(env.client.clone(), NS)
        .patch(
            &format!("{CLUSTER}-etcd"),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
}

async fn members_that_refuse_our_certificate_are_named_and_nothing_scales_until_fixed(
    release: EtcdRelease,
) {
    let env = setup_with(1, "prod-control-plane-genc01", true, Some(release)).await;
    wait_converged(&env, 1, "initial").await;
    let node = format!("node-{}", machines(&env.client).await[0].name_any());
    let secrets = Api::<Secret>::namespaced(env.client.clone(), NS);
    let original = secrets.get(&format!("{CLUSTER}-etcd")).await.unwrap();
    let original =
        |key: &str| String::from_utf8(original.data.as_ref().unwrap()[key].0.clone()).unwrap();
    let (ca_cert, ca_key) = (original("tls.crt"), original("tls.key"));

    // A CA rotation half done: the Secret trusts both CAs but signs with one the members do not trust.
    let rotated = testenv::pki::Ca::new("rotated-etcd-ca").unwrap();
    let bundle = format!("{}{ca_cert}", rotated.cert_pem());
    replace_etcd_ca(&env, &bundle, rotated.key_pem()).await;
    patch_kcp(&env.client, json!({ "replicas": 3 })).await;
    let (reason, message) = wait_condition(&env, "EtcdClusterHealthy", |m| {
        m.contains("rejected our client certificate")
    })
    .await;
    assert!(message.contains(&node), "names the member: {message}");
    assert_eq!(reason, "NotHealthy");
    let (reason, settled) = wait_condition(&env, "EtcdMembershipSettled", |_| true).await;
    assert_eq!(reason, "EtcdCertificateRefused", "{settled}");
    println!("EtcdClusterHealthy: {message}");

    // The members' serving certificate no longer verifies: the other side of the same fault.
    replace_etcd_ca(&env, rotated.cert_pem(), rotated.key_pem()).await;
    let (_, message) = wait_condition(&env, "EtcdClusterHealthy", |m| {
        m.contains("serving certificate is not signed")
    })
    .await;
    assert!(message.contains(&node), "names the member: {message}");
    assert_eq!(
        machines(&env.client).await.len(),
        1,
        "no scale-up while etcd is unobservable"
    );
    assert!(membership_changes(&env).await.is_empty());

    // Fixed: the controller reaches etcd again and scales as asked.
    replace_etcd_ca(&env, &ca_cert, &ca_key).await;
    wait_converged(&env, 3, "after the CA was restored").await;
}

/// Members as (name, is learner), sorted; empty while no member answers (a learner refuses the list:
/// the client is asked a few times, so that it tries another member).
async fn member_roles(env: &Env) -> Vec<(String, bool)> {
    for _ in 0..20 {
        if let Some(mut client) = env.core.etcd_client().await
            && let Ok(list) = client.member_list().await
        {
            let mut roles: Vec<(String, bool)> = list
                .members()
                .iter()
                .map(|m| (m.name().to_owned(), m.is_learner()))
                .collect();
            roles.sort();
            return roles;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Vec::new()
}

/// A client of the voting members only: learners refuse writes, compaction and alarms.
async fn voters_client(env: &Env) -> etcd_client::Client {
    let options = env
        .core
        .with_etcd(|etcd| etcd.connect_options())
        .await
        .expect("etcd runs");
    for _ in 0..50 {
        if let Some(mut client) = env.core.etcd_client().await
            && let Ok(list) = client.member_list().await
        {
            let urls: Vec<String> = list
                .members()
                .iter()
                .filter(|m| !m.is_learner())
                .flat_map(|m| m.client_urls().to_vec())
                .collect();
            if let Ok(voters) = etcd_client::Client::connect(&urls, Some(options.clone())).await {
                return voters;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no voting member answered");
}

async fn a_nospace_alarm_mid_rollout_holds_the_rollout_until_it_is_cleared(release: EtcdRelease) {
    // Health looked at every 2 s, so the alarm is seen whatever step the rollout is at.
    let env = with_small_quota(
        3,
        release,
        Settings {
            etcd_health_period: Duration::from_secs(2),
            ..test_settings()
        },
    )
    .await;
    wait_converged(&env, 3, "initial").await;
    let first: Vec<String> = machines(&env.client)
        .await
        .iter()
        .map(|m| m.name_any())
        .collect();
    // Most of the quota used up front, so that the rest fills within a moment of the rollout's first step.
    let mut client = env.core.etcd_client().await.expect("etcd runs");
    assert_eq!(
        fill(&mut client, 0, 12).await,
        None,
        "the quota was reached too early"
    );

    // A generation rollout; as soon as its first machine is created, the members reach their quota.
    sim_template(&env.client, "prod-control-plane-genc02").await;
    env.core.observe(|o| o.deleted.clear());
    patch_kcp(&env.client, json!({ "machineTemplate": { "spec": { "infrastructureRef": {
        "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachineTemplate", "name": "prod-control-plane-genc02" } } } })).await;
    let deadline = Instant::now() + CONVERGE;
    while machines(&env.client).await.len() == first.len() {
        assert!(
            Instant::now() < deadline,
            "the rollout never created a machine"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut client = voters_client(&env).await;
    let alarmed = fill_to_quota(&mut client).await;
    assert!(!alarmed.is_empty(), "no member raised NOSPACE");
    let (_, message) = wait_condition(&env, "EtcdClusterHealthy", |m| m.contains("NOSPACE")).await;
    let (_, settled) = wait_condition(&env, "EtcdMembershipSettled", |m| {
        m.contains("alarm NOSPACE")
    })
    .await;
    println!("mid-rollout: EtcdClusterHealthy: {message}\nEtcdMembershipSettled: {settled}");

    // From the moment the controller says so, nothing moves: no voter added or removed, no machine
    // created or deleted, no membership Event, over many reconciles.
    let held_at = Instant::now();
    let voters = |roles: &[(String, bool)]| -> Vec<String> {
        roles
            .iter()
            .filter(|(_, learner)| !learner)
            .map(|(name, _)| name.clone())
            .collect()
    };
    let (members, names, deleted, events) = (
        member_roles(&env).await,
        machines(&env.client)
            .await
            .iter()
            .map(|m| m.name_any())
            .collect::<Vec<_>>(),
        env.core.observe(|o| o.deleted.len()),
        membership_changes(&env).await.len(),
    );
    assert!(
        names.iter().any(|m| first.contains(m)) && deleted < first.len(),
        "the rollout was over before the alarm: machines {names:?}, {deleted} deleted"
    );
    assert!(!members.is_empty(), "no member listed the members");
    println!("held with machines {names:?} and members {members:?}");
    while held_at.elapsed() < Duration::from_secs(15) {
        let now = member_roles(&env).await;
        if !now.is_empty() {
            assert_eq!(
                voters(&now),
                voters(&members),
                "a voter changed under NOSPACE"
            );
        }
        let machines_now: Vec<String> = machines(&env.client)
            .await
            .iter()
            .map(|m| m.name_any())
            .collect();
        assert_eq!(
            machines_now, names,
            "a machine was created or deleted under NOSPACE"
        );
        assert_eq!(env.core.observe(|o| o.deleted.len()), deleted);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(
        membership_changes(&env).await.len(),
        events,
        "a membership change was made under NOSPACE"
    );

    // Cleared, the rollout resumes and replaces the rest.
    let mut client = voters_client(&env).await;
    free_and_disarm(&env, &mut client).await;
    let cleared = Instant::now();
    while env.core.observe(|o| o.deleted.len()) < 3 {
        if cleared.elapsed() >= CONVERGE {
            let kcp = kcp(&env.client).await;
            panic!(
                "the rollout did not resume after the alarm was cleared: members {:?}, alarms {:?}, \
                 EtcdMembershipSettled {:?}",
                member_roles(&env).await,
                alarms(&mut voters_client(&env).await).await,
                condition(&kcp, "EtcdMembershipSettled")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_converged(&env, 3, "rollout after NOSPACE").await;
    let rolled: Vec<String> = machines(&env.client)
        .await
        .iter()
        .map(|m| m.name_any())
        .collect();
    assert!(
        rolled.iter().all(|m| !first.contains(m)),
        "{rolled:?} still has an old machine"
    );
    let mut expected: Vec<(String, bool)> = rolled
        .iter()
        .map(|m| (format!("node-{m}"), false))
        .collect();
    expected.sort();
    assert_eq!(member_roles(&env).await, expected, "one voter per machine");
    println!(
        "measured: rollout held {:?} under NOSPACE; done {:?} after the alarm was cleared",
        cleared - held_at,
        cleared.elapsed()
    );
}

async fn a_member_serving_an_expired_certificate_is_named_and_nothing_scales_until_it_is_renewed(
    release: EtcdRelease,
) {
    use testenv::pki::{Ca, LOOPBACK_HOSTS, Usage};
    let env = setup_with(3, "prod-control-plane-genc01", true, Some(release)).await;
    wait_converged(&env, 3, "initial").await;
    let node = format!("node-{}", machines(&env.client).await[1].name_any());

    // One member serves its clients a certificate that expired (its peer certificate is still good).
    let dir = tempfile::tempdir().unwrap();
    let expired = env
        .core
        .with_etcd(|etcd| {
            let tls = etcd.tls().expect("stacked etcd uses TLS");
            Ca::from_pem(&tls.ca_pem, tls.ca_key_pem())?
                .issue_expired("etcd-member", LOOPBACK_HOSTS, Usage::ServerAndClient)?
                .write(dir.path(), "expired")
        })
        .await
        .expect("etcd runs")
        .unwrap();
    env.core
        .with_etcd(|etcd| etcd.serve_with(&node, Some(expired)))
        .await
        .expect("etcd runs")
        .unwrap();
    let (_, message) = wait_condition(&env, "EtcdClusterHealthy", |m| {
        m.contains("serving certificate expired")
    })
    .await;
    assert!(message.contains(&node), "names the member: {message}");
    println!("EtcdClusterHealthy: {message}");

    // Asked to scale, the control plane holds: no machine, no membership change.
    let changes = membership_changes(&env).await.len();
    patch_kcp(&env.client, json!({ "replicas": 5 })).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        machines(&env.client).await.len(),
        3,
        "scaled up while a member could not be checked"
    );
    assert_eq!(membership_changes(&env).await.len(), changes);

    // Renewed, the member answers again and the control plane scales as asked.
    env.core
        .with_etcd(|etcd| etcd.serve_with(&node, None))
        .await
        .expect("etcd runs")
        .unwrap();
    wait_converged(&env, 5, "after the certificate was renewed").await;
}

testenv::on_every_etcd_release!(
    a_nospace_alarm_names_the_member_and_holds_every_membership_change,
    a_nospace_alarm_mid_rollout_holds_the_rollout_until_it_is_cleared,
    members_that_refuse_our_certificate_are_named_and_nothing_scales_until_fixed,
    a_member_serving_an_expired_certificate_is_named_and_nothing_scales_until_it_is_renewed,
);
