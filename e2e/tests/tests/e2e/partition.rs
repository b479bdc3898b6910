//! Network partitions: a control-plane node cut off the network (its own namespace's cable pulled, every
//! process still running) while its etcd learner catches up during a rollout.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use e2e_tests::Env;

use crate::scenarios::{
    assert_membership_was_safe, replaced, step_timeout, stop_and_check_nothing_is_left,
    three_voters, vars,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_learner_cut_off_mid_rollout_stays_a_learner_until_it_is_back_and_the_rollout_finishes() {
    let started = Instant::now();
    let (cluster, kcp) = ("cut", "cut-control-plane");
    let env = Env::start(&[]).await;
    assert!(
        env.sim.real_kubeadm(),
        "a partition needs nodes with their own network namespace (root, iproute2 and kubeadm built)"
    );
    let (watch, first) = three_voters(&env, cluster, kcp).await;
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
