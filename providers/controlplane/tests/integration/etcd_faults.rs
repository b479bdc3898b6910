//! Stacked etcd that the controller must not touch, against real etcd (3.4 and the current release) and
//! the real apiserver: a member whose database hit its space quota (NOSPACE alarm) and members that refuse
//! the controller's client certificate. Each becomes a condition that names the member and the cause, and
//! no membership change or scaling happens until the fault is cleared.

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

async fn a_nospace_alarm_names_the_member_and_holds_every_membership_change(release: EtcdRelease) {
    let mut env = setup_etcd(
        1,
        "prod-control-plane-genc01",
        false,
        Some(StackedEtcd {
            release,
            extra_args: vec!["--quota-backend-bytes=2097152".into()],
        }),
    )
    .await;
    let grace = Duration::from_secs(2);
    env.tasks.push(start_with(
        &env.client,
        Settings {
            unstarted_grace: k8s_openapi::jiff::SignedDuration::try_from(grace).unwrap(),
            ..test_settings()
        },
    ));
    wait_converged(&env, 1, "initial").await;
    let node = format!("node-{}", machines(&env.client).await[0].name_any());

    // Fill the 2 MiB quota: etcd raises NOSPACE and refuses further writes.
    let mut client = env.core.etcd_client().await.expect("etcd runs");
    let value = "x".repeat(100_000);
    let mut refused = None;
    for i in 0..100 {
        if let Err(e) = client.put(format!("fill/{i}"), value.clone(), None).await {
            refused = Some(e.to_string());
            break;
        }
    }
    let refused = refused.expect("the quota was never reached");
    assert!(refused.contains("database space exceeded"), "{refused}");
    let alarms = client
        .alarm(
            etcd_client::AlarmAction::Get,
            etcd_client::AlarmType::None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(alarms.alarms().len(), 1, "one NOSPACE alarm");

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
    client
        .delete(
            "fill/",
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    let revision = client.status().await.unwrap().header().unwrap().revision();
    client.compact(revision, None).await.unwrap();
    client.defragment().await.unwrap();
    let mut disarm = etcd_client::AlarmOptions::new();
    disarm.with_member(alarms.alarms()[0].member_id());
    client
        .alarm(
            etcd_client::AlarmAction::Deactivate,
            etcd_client::AlarmType::Nospace,
            Some(disarm),
        )
        .await
        .unwrap();
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

testenv::on_every_etcd_release!(
    a_nospace_alarm_names_the_member_and_holds_every_membership_change,
    members_that_refuse_our_certificate_are_named_and_nothing_scales_until_fixed,
);
