//! Network partitions: a control-plane node cut off the network (its own namespace's cable pulled, every
//! process still running) while its etcd learner catches up during a rollout, or once it is a voter.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use e2e_tests::Env;
use e2e_tests::env::NS;
use e2e_tests::etcd_watch::EtcdWatch;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use kubeadm_api::cluster::v1beta2::Machine;
use kubeadm_api::controlplane::conditions::machine::ETCD_MEMBER_HEALTHY;
use kubeadm_api::meta::PRE_TERMINATE_HOOK_PREFIX;

use crate::scenarios::{
    assert_membership_was_safe, control_plane_machine_names, event_notes, replaced, step_timeout,
    stop_and_check_nothing_is_left, three_voters, vars, wait_for,
};

/// Long enough for the voters to move on while the learner is away, short enough that kubeadm's own
/// promotion (it retries for two minutes) is still waiting when the node comes back.
const PARTITION_SECONDS: u64 = 20;

/// The first partition the simulator made, once it has healed.
async fn healed_partition(env: &Env) -> sim::faults::Partition {
    let deadline = Instant::now() + step_timeout();
    loop {
        if let Some(p) = env.sim.view().partitions().into_iter().next()
            && p.healed.is_some()
        {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "no partition healed (partitions: {:?}, failed boots: {:?})\n{}",
            env.sim.view().partitions(),
            env.sim.view().failed_boots(),
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// An environment whose nodes can be cut off, and `cluster` with 3 voters; returns the etcd watch and
/// the machines' names.
async fn three_voters_with_their_own_network(
    cluster: &str,
    kcp: &str,
) -> (Env, EtcdWatch, Vec<String>) {
    let env = Env::start(&[]).await;
    assert!(
        env.sim.real_kubeadm(),
        "a partition needs nodes with their own network namespace (root, iproute2 and kubeadm built)"
    );
    let (watch, first) = three_voters(&env, cluster, kcp).await;
    (env, watch, first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_learner_cut_off_mid_rollout_stays_a_learner_until_it_is_back_and_the_rollout_finishes() {
    let started = Instant::now();
    let (cluster, kcp) = ("cut", "cut-control-plane");
    let (env, watch, first) = three_voters_with_their_own_network(cluster, kcp).await;
    let mut pids: BTreeSet<u32> = env.pids().into_iter().collect();

    // The rollout's first join is cut off as soon as its learner runs.
    env.arm_next_join(cluster, "partition-mid-join", Some(PARTITION_SECONDS))
        .await;
    let mut bumped = vars(cluster, 3, 0);
    bumped.insert("CONTROL_PLANE_MACHINE_GEN", "genc02".into());
    env.apply_template(&bumped).await;
    let partition = healed_partition(&env).await;
    let healed = partition.healed.expect("healed");
    pids.extend(env.pids());

    // The rollout finishes: three new machines, the cut one among them, as the only voters.
    let rolled = replaced(&env, cluster, kcp, &first, step_timeout() * 3).await;
    pids.extend(env.pids());
    assert!(
        rolled.contains(&partition.machine),
        "the machine cut off mid-join was replaced instead of waited for: {rolled:?}"
    );
    watch
        .wait_voters(rolled.clone(), Duration::from_secs(60), "rolled")
        .await;
    let rolled_after_cut = partition.cut.elapsed();

    // While it was cut off, its member stayed a learner: neither kubeadm (cut off too) nor the
    // controller (which could not reach it) promoted it, though etcd might have taken it as in sync.
    let node = env
        .sim
        .nodes()
        .into_iter()
        .find(|n| n.machine == partition.machine)
        .map(|n| n.node)
        .unwrap_or_else(|| panic!("{} does not run", partition.machine));
    let samples = watch.samples();
    let during: Vec<_> = samples
        .iter()
        .filter(|s| s.taken > partition.cut && s.taken < healed)
        .filter_map(|s| s.members.iter().find(|(name, _)| *name == node))
        .collect();
    let mut seen = Vec::new();
    for s in samples.iter().filter(|s| s.taken > partition.cut) {
        let view = (s.members.clone(), s.healthy_voters);
        if seen.last() != Some(&view) {
            println!(
                "{:?} after the cut: {:?} healthy {}",
                s.taken - partition.cut,
                view.0,
                view.1
            );
            seen.push(view);
        }
    }
    assert!(
        !during.is_empty(),
        "the learner of {node} was never listed while cut off: the partition tested nothing"
    );
    assert!(
        during.iter().all(|(_, learner)| *learner),
        "{node} became a voter while cut off: {during:?}"
    );
    // Nor did any voter go meanwhile: the rollout held its removals while a member did not answer.
    let window: Vec<_> = samples
        .iter()
        .filter(|s| s.taken > partition.cut && s.taken < healed)
        .collect();
    assert!(
        window.iter().all(|s| s.voters() == first.len()),
        "a voter was removed while {node} was cut off: {:?}",
        window.iter().map(|s| &s.members).collect::<Vec<_>>()
    );
    let counted = assert_membership_was_safe(&watch, "learner cut off mid-rollout");
    drop(watch);
    stop_and_check_nothing_is_left(env, pids).await;
    println!(
        "scenario partition mid-join: {} cut off for {:.1?}, listed as a learner in {} samples meanwhile; \
         rollout done {:.1?} after the cut ({:.1?} wall time, {counted} membership samples)",
        partition.machine,
        healed - partition.cut,
        during.len(),
        rolled_after_cut,
        started.elapsed()
    );
}

/// How long a voter stays cut off: time for the controller to find its member silent, then a window in
/// which a removal would show.
const VOTER_CUT: Duration = Duration::from_secs(40);

/// A pre-terminate hook of the test's own, which holds a deleting Machine's etcd member in place (the
/// controller removes a member only once other controllers' hooks are gone) until the test lets go.
fn test_hook() -> String {
    format!("{PRE_TERMINATE_HOOK_PREFIX}/e2e-hold")
}

async fn set_test_hook(env: &Env, machines: &[String], held: bool) {
    let api: Api<Machine> = Api::namespaced(env.client.clone(), NS);
    let value = held.then_some("");
    for machine in machines {
        let patch = serde_json::json!({"metadata": {"annotations": {test_hook(): value}}});
        match api
            .patch(machine, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            // Gone already: nothing left to hold.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => panic!("hook on {machine}: {e}"),
        }
    }
}

/// Whether the controller reports `machine`'s etcd member as anything but healthy.
async fn member_reported_unhealthy(env: &Env, machine: &str) -> bool {
    let api: Api<Machine> = Api::namespaced(env.client.clone(), NS);
    api.get_opt(machine).await.ok().flatten().is_some_and(|m| {
        m.status.is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == ETCD_MEMBER_HEALTHY && c.status != "True")
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_voter_cut_off_mid_rollout_holds_the_removal_of_a_healthy_one_until_it_is_back() {
    let started = Instant::now();
    let (cluster, kcp) = ("cutv", "cutv-control-plane");
    let (env, watch, first) = three_voters_with_their_own_network(cluster, kcp).await;
    let mut pids: BTreeSet<u32> = env.pids().into_iter().collect();
    set_test_hook(&env, &first, true).await;

    // The rollout's first machine joins and is promoted; then an old one is deleted, its member held by
    // the test's hook.
    let mut bumped = vars(cluster, 3, 0);
    bumped.insert("CONTROL_PLANE_MACHINE_GEN", "genv02".into());
    env.apply_template(&bumped).await;
    wait_for(&env, cluster, "an old machine leaving", |machines| {
        machines
            .iter()
            .any(|m| first.contains(&m.name_any()) && m.meta().deletion_timestamp.is_some())
    })
    .await;
    let new = control_plane_machine_names(&env, cluster)
        .await
        .into_iter()
        .find(|m| !first.contains(m))
        .expect("an old machine leaves only once a new one joined");
    // The simulator notes the node as running a moment after its Machine is ready.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !env.sim.nodes().iter().any(|n| n.machine == new) {
        assert!(Instant::now() < deadline, "{new} does not run");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pids.extend(env.pids());
    let before = watch.last().expect("a membership sample");
    assert_eq!(
        before.voters(),
        4,
        "the new member is not a voter yet: {:?}",
        before.members
    );

    // The new voter is cut off; once the controller finds its member silent, the hook goes and only
    // the controller's own rule holds the healthy old member in place.
    assert!(
        env.sim.cut_off(NS, &new, VOTER_CUT),
        "{} cannot be cut off",
        new
    );
    let deadline = Instant::now() + VOTER_CUT / 2;
    while !member_reported_unhealthy(&env, &new).await {
        assert!(
            Instant::now() < deadline,
            "the controller did not report {}'s member unhealthy within {:?} of the cut\n{}",
            new,
            VOTER_CUT / 2,
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let released = Instant::now();
    set_test_hook(&env, &first, false).await;
    let partition = healed_partition(&env).await;
    let healed = partition.healed.expect("healed");
    pids.extend(env.pids());

    let samples = watch.samples();
    let window: Vec<_> = samples
        .iter()
        .filter(|s| s.taken > released && s.taken < healed)
        .collect();
    assert!(
        window.len() >= 10,
        "only {} membership samples while the hook was gone and {} cut off: the hold tested nothing",
        window.len(),
        new
    );
    assert!(
        window.iter().all(|s| s.voters() == 4),
        "a voter was removed while {} was cut off: {:?}",
        new,
        window.iter().map(|s| &s.members).collect::<Vec<_>>()
    );

    // Back on the network, the held removal goes and the rollout finishes.
    let rolled = replaced(&env, cluster, kcp, &first, step_timeout() * 3).await;
    pids.extend(env.pids());
    watch
        .wait_voters(rolled.clone(), Duration::from_secs(60), "rolled")
        .await;
    assert!(
        rolled.contains(&new),
        "the machine cut off was replaced instead of waited for: {rolled:?}"
    );
    let removals = event_notes(&env, "EtcdMembershipChanged", Some("RemoveMember")).await;
    assert_eq!(
        removals.len(),
        3,
        "one removal per old machine: {removals:?}"
    );
    let rolled_after_heal = healed.elapsed();
    let counted = assert_membership_was_safe(&watch, "voter cut off mid-rollout");
    drop(watch);
    stop_and_check_nothing_is_left(env, pids).await;
    println!(
        "scenario voter partition: {} cut off for {:.1?}, its member reported unhealthy {:.1?} after the cut, \
         {} samples with every removal held; rollout done {:.1?} after it came back ({:.1?} wall time, \
         {counted} membership samples)",
        new,
        healed - partition.cut,
        released - partition.cut,
        window.len(),
        rolled_after_heal,
        started.elapsed()
    );
}
