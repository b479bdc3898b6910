//! Leader election against a real kube-apiserver: one leader among candidates, a fast hand-over on
//! release, a takeover after a leader vanishes, and a leader that notices when it no longer leads.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kubeadm_runtime::leader::{Leader, LeaderElector, Lost, Timing};
use testenv::ManagementPlane;
use tokio::task::JoinHandle;

const NS: &str = "default";
const LEASE: &str = "test-manager-leader";

/// Short enough for tests, in the same proportions as the defaults.
const FAST: Timing = Timing {
    lease_duration: Duration::from_secs(3),
    renew_deadline: Duration::from_secs(2),
    retry_period: Duration::from_millis(250),
};

async fn plane() -> (ManagementPlane, kube::Client) {
    let plane = ManagementPlane::start()
        .await
        .expect("management plane starts");
    let client = plane.client().await.unwrap();
    (plane, client)
}

fn candidate(client: &kube::Client, identity: &str, timing: Timing) -> LeaderElector {
    LeaderElector::new(client.clone(), NS, LEASE, identity.into(), timing).unwrap()
}

fn campaign(client: &kube::Client, identity: &str, timing: Timing) -> JoinHandle<Leader> {
    tokio::spawn(candidate(client, identity, timing).acquire())
}

async fn lease(client: &kube::Client) -> Lease {
    Api::<Lease>::namespaced(client.clone(), NS)
        .get(LEASE)
        .await
        .unwrap()
}

fn holder(lease: &Lease) -> Option<&str> {
    lease.spec.as_ref()?.holder_identity.as_deref()
}

/// Polls every 100 ms until one of `campaigns` has won, for at most `seconds`.
async fn first_leader(campaigns: &mut [JoinHandle<Leader>], seconds: u64) -> (usize, Leader) {
    for _ in 0..seconds * 10 {
        if let Some(i) = campaigns.iter().position(|c| c.is_finished()) {
            return (i, (&mut campaigns[i]).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("nobody became leader within {seconds} s");
}

async fn lost_within(leader: &mut Leader, seconds: u64) -> Lost {
    tokio::time::timeout(Duration::from_secs(seconds), leader.lost())
        .await
        .unwrap_or_else(|_| panic!("the leader did not notice the loss within {seconds} s"))
}

#[tokio::test]
async fn of_two_candidates_exactly_one_leads() {
    let (_plane, client) = plane().await;
    let mut campaigns = [campaign(&client, "a", FAST), campaign(&client, "b", FAST)];

    let (winner, leader) = first_leader(&mut campaigns, 20).await;
    // Twice the lease duration: the winner's renewals must keep the other out past any expiry.
    tokio::time::sleep(FAST.lease_duration * 2).await;
    let loser = &campaigns[1 - winner];
    assert!(!loser.is_finished(), "both candidates became leader");

    let lease = lease(&client).await;
    assert_eq!(holder(&lease), Some(leader.identity()));
    let spec = lease.spec.unwrap();
    assert_eq!(spec.lease_duration_seconds, Some(3));
    assert_eq!(spec.lease_transitions, Some(0));
    assert!(spec.renew_time > spec.acquire_time, "the Lease was renewed");
    loser.abort();
}

#[tokio::test]
async fn a_released_lease_goes_to_the_waiting_candidate_well_before_it_would_expire() {
    let (_plane, client) = plane().await;
    let slow_expiry = Timing {
        retry_period: Duration::from_millis(250),
        ..Timing::default()
    };
    let first = candidate(&client, "first", slow_expiry).acquire().await;
    let mut second = [campaign(&client, "second", slow_expiry)];
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!second[0].is_finished());

    first.step_down().await;
    let released = lease(&client).await;
    assert_eq!(holder(&released), None);
    assert_eq!(released.spec.unwrap().lease_duration_seconds, Some(1));

    // The lease duration is 15 s; the hand-over takes a retry period or two.
    let (_, leader) = first_leader(&mut second, 5).await;
    assert_eq!(leader.identity(), "second");
    let lease = lease(&client).await;
    assert_eq!(holder(&lease), Some("second"));
    assert_eq!(lease.spec.unwrap().lease_transitions, Some(1));
}

#[tokio::test]
async fn a_leader_that_vanished_without_releasing_is_replaced_after_the_lease_expires() {
    let (_plane, client) = plane().await;
    let crashed = candidate(&client, "crashed", FAST).acquire().await;
    // Dropping a Leader stops its renewals and leaves the Lease as a killed process would.
    drop(crashed);
    let mut successor = [campaign(&client, "successor", FAST)];

    let (_, leader) = first_leader(&mut successor, 15).await;
    assert_eq!(leader.identity(), "successor");
    let lease = lease(&client).await;
    assert_eq!(holder(&lease), Some("successor"));
    assert_eq!(lease.spec.unwrap().lease_transitions, Some(1));
}

#[tokio::test]
async fn a_leader_whose_lease_was_taken_reports_the_loss() {
    let (_plane, client) = plane().await;
    let mut leader = candidate(&client, "leader", FAST).acquire().await;

    // Another writer claims the Lease with a fresh renewal, as a replica with a different view would.
    let api = Api::<Lease>::namespaced(client.clone(), NS);
    let mut taken = api.get(LEASE).await.unwrap();
    let spec = taken.spec.as_mut().unwrap();
    spec.holder_identity = Some("intruder".into());
    spec.lease_duration_seconds = Some(15);
    spec.renew_time = Some(MicroTime(Timestamp::now()));
    api.replace(LEASE, &PostParams::default(), &taken)
        .await
        .unwrap();

    let lost = lost_within(&mut leader, 10).await;
    assert_eq!(
        lost,
        Lost::TakenOver {
            lease: format!("{NS}/{LEASE}"),
            holder: "intruder".into(),
        }
    );
    // The loser does not fight back.
    tokio::time::sleep(FAST.retry_period * 4).await;
    assert_eq!(holder(&lease(&client).await), Some("intruder"));
}

#[tokio::test]
async fn a_leader_cut_off_from_the_api_server_gives_up_after_the_renew_deadline() {
    let (plane, client) = plane().await;
    let mut leader = candidate(&client, "leader", FAST).acquire().await;

    drop(plane);
    match lost_within(&mut leader, 15).await {
        Lost::NotRenewed { deadline, .. } => assert_eq!(deadline, FAST.renew_deadline),
        other => panic!("expected a missed renew deadline, got {other:?}"),
    }
}
