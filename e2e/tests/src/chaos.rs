//! Seeded crash trials: both managers killed with SIGKILL at random moments while a control plane is
//! created, scaled, rolled and remediated, optionally with a joining node cut off the network. After each
//! trial: exactly one `kubeadm init`, every etcd member owned by a Machine, never fewer than a quorum of
//! voters answering, at most one learner, the cluster's Secrets the same objects as after creation,
//! nothing logged that is secret, no process left behind. The end-to-end test runs two short trials;
//! `make soak` runs the full sequence many times.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::{Resource, ResourceExt};

use crate::Env;
use crate::env::NS;
use crate::etcd_watch::EtcdWatch;

/// Kills per phase, at most; with the seed this makes a run repeatable in its choices.
const KILLS_PER_PHASE: usize = 3;
/// How long one phase may take to converge, kills included.
pub const PHASE_TIMEOUT: Duration = Duration::from_secs(600);
const CLUSTER: &str = "chaos";
const KCP: &str = "chaos-control-plane";
/// How long a partitioned joiner stays cut off.
const PARTITION_SECONDS: u64 = 10;
/// The Secrets of a cluster that must outlive every trial unchanged (same object, same UID).
/// A small deterministic generator (SplitMix64): the same seed, the same kill schedule.
pub struct Dice(u64);

impl Dice {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Which steps a trial goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sequence {
    /// Create 3, roll the generation.
    Short,
    /// Create 1, scale to 3, 5 (one join cut off the network, where nodes have namespaces) and back
    /// to 3, roll the generation, then lose a node to a MachineHealthCheck.
    Soak,
}

/// What a phase converges to: `replicas` control-plane machines of `generation`, none of `without`,
/// each with a Node, none deleting, and the status agreeing.
struct Target<'a> {
    replicas: usize,
    generation: &'a str,
    without: &'a [String],
}

/// How one trial went.
#[derive(Clone, Debug, Default)]
pub struct TrialReport {
    pub seed: u64,
    pub wall: Duration,
    /// Managers killed, by name, in order.
    pub kills: Vec<String>,
    /// Each phase's name, time to converge and kills.
    pub phases: Vec<(&'static str, Duration, usize)>,
    /// Nodes cut off the network during the trial.
    pub partitions: usize,
    pub membership_samples: usize,
    /// Samples looked at again because the first look found no quorum (a trial that completes has none).
    pub rechecked_samples: usize,
    /// The longest time without a membership sample showing quorum.
    pub longest_blind: Duration,
}

async fn control_planes(env: &Env) -> Vec<kubeadm_api::cluster::v1beta2::Machine> {
    env.machines(CLUSTER)
        .await
        .into_iter()
        .filter(|m| m.labels().contains_key("cluster.x-k8s.io/control-plane"))
        .collect()
}

async fn settled(env: &Env, target: &Target<'_>) -> bool {
    let status = env.kcp(KCP).await.status.unwrap_or_default();
    let machines = control_planes(env).await;
    let replicas = i32::try_from(target.replicas).unwrap_or(i32::MAX);
    machines.len() == target.replicas
        && machines.iter().all(|m| {
            m.meta().deletion_timestamp.is_none()
                && !target.without.contains(&m.name_any())
                && m.status.as_ref().is_some_and(|s| s.node_ref.is_some())
                && m.labels()
                    .get("controlplane.cluster.x-k8s.io/machine-generation")
                    .map(String::as_str)
                    == Some(target.generation)
        })
        && status.replicas == Some(replicas)
        && status.ready_replicas == Some(replicas)
        && status.up_to_date_replicas == Some(replicas)
}

/// Until the control plane reaches `target`: now and then (seeded) one manager is killed and restarted
/// at once. Returns the kills made.
async fn converge_under_kills(
    env: &mut Env,
    dice: &mut Dice,
    target: &Target<'_>,
    what: &str,
) -> Vec<String> {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let mut kills = Vec::new();
    let mut next_kill = Instant::now() + Duration::from_millis(1000 + dice.below(6000));
    loop {
        if settled(env, target).await {
            return kills;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not settled on {} x {} after {PHASE_TIMEOUT:?} (kills: {kills:?})\n{}",
            target.replicas,
            target.generation,
            env.diagnostics().await
        );
        if kills.len() < KILLS_PER_PHASE && Instant::now() >= next_kill {
            let index = usize::try_from(dice.below(2)).unwrap_or(0);
            let name = env
                .kill_and_restart_manager(index)
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            println!("{what}: killed and restarted {name}");
            kills.push(name);
            next_kill = Instant::now() + Duration::from_millis(2000 + dice.below(8000));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn vars(control_planes: usize, generation: &str) -> BTreeMap<&'static str, String> {
    [
        ("CLUSTER_NAME", CLUSTER.to_owned()),
        ("CONTROL_PLANE_MACHINE_COUNT", control_planes.to_string()),
        ("WORKER_MACHINE_COUNT", "0".to_owned()),
        ("CONTROL_PLANE_MACHINE_GEN", generation.to_owned()),
    ]
    .into()
}

/// A MachineHealthCheck of the control plane that marks a machine whose Node is not Ready for 10 s.
fn node_health_check() -> String {
    format!(
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: MachineHealthCheck\nmetadata:\n  name: {KCP}\n\
         spec:\n  clusterName: {CLUSTER}\n  selector:\n    matchLabels:\n      cluster.x-k8s.io/control-plane: \"\"\n\
         \x20 checks:\n    nodeStartupTimeoutSeconds: 600\n    unhealthyNodeConditions:\n\
         \x20   - {{type: Ready, status: Unknown, timeoutSeconds: 10}}\n\
         \x20   - {{type: Ready, status: \"False\", timeoutSeconds: 10}}\n"
    )
}

/// Converges on `target` under kills; notes the phase in `report`.
async fn phase(
    env: &mut Env,
    dice: &mut Dice,
    report: &mut TrialReport,
    name: &'static str,
    target: Target<'_>,
) {
    let at = Instant::now();
    let kills = converge_under_kills(env, dice, &target, name).await;
    println!(
        "seed {}: {name} under {} kills: {:.1?}",
        report.seed,
        kills.len(),
        at.elapsed()
    );
    report.phases.push((name, at.elapsed(), kills.len()));
    report.kills.extend(kills);
}

/// One trial with its own management plane, managers and cluster; panics with what went wrong, the
/// seed first, when an invariant does not hold.
pub async fn trial(seed: u64, sequence: Sequence) -> TrialReport {
    println!("chaos seed {seed} ({sequence:?})");
    let mut dice = Dice::new(seed);
    let started = Instant::now();
    let mut report = TrialReport {
        seed,
        ..TrialReport::default()
    };
    let mut env = Env::start(&[]).await;
    let first: usize = if sequence == Sequence::Short { 3 } else { 1 };
    env.apply_template(&vars(first, "genc01")).await;
    let watch = EtcdWatch::start(
        env.client.clone(),
        NS,
        CLUSTER,
        env.sim.view(),
        Duration::from_millis(250),
    );
    let to = |replicas: usize, generation: &'static str| Target {
        replicas,
        generation,
        without: &[],
    };
    phase(
        &mut env,
        &mut dice,
        &mut report,
        "create",
        to(first, "genc01"),
    )
    .await;
    let secrets = env.cluster_secret_uids(CLUSTER).await;
    if sequence == Sequence::Soak {
        env.scale_control_plane(KCP, 3).await;
        phase(
            &mut env,
            &mut dice,
            &mut report,
            "scale 1 to 3",
            to(3, "genc01"),
        )
        .await;
        if env.sim.real_kubeadm() {
            env.arm_next_join(CLUSTER, "partition-mid-join", Some(PARTITION_SECONDS))
                .await;
        }
        env.scale_control_plane(KCP, 5).await;
        phase(
            &mut env,
            &mut dice,
            &mut report,
            "scale 3 to 5",
            to(5, "genc01"),
        )
        .await;
        env.scale_control_plane(KCP, 3).await;
        phase(
            &mut env,
            &mut dice,
            &mut report,
            "scale 5 to 3",
            to(3, "genc01"),
        )
        .await;
    }
    // A generation bump rolls every machine.
    env.apply_template(&vars(3, "genc02")).await;
    phase(&mut env, &mut dice, &mut report, "roll", to(3, "genc02")).await;
    if sequence == Sequence::Soak {
        // A node goes; Cluster API's health check marks it and the control plane replaces it.
        env.apply(&node_health_check()).await;
        let machines = control_planes(&env).await;
        let index = usize::try_from(dice.below(machines.len() as u64)).unwrap_or(0);
        let lost = vec![machines[index].name_any()];
        assert!(env.sim.lose(NS, &lost[0]), "{} was not running", lost[0]);
        let target = Target {
            replicas: 3,
            generation: "genc02",
            without: &lost,
        };
        phase(&mut env, &mut dice, &mut report, "remediate", target).await;
    }

    // Exactly one init, no member without a machine, never below quorum, at most one learner.
    let inits: Vec<String> = env.init_secrets(CLUSTER).await.into_keys().collect();
    assert_eq!(
        inits.len(),
        1,
        "seed {seed}: kubeadm init rendered more than once: {inits:?}"
    );
    let names: Vec<String> = control_planes(&env)
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    watch
        .wait_voters(names, Duration::from_secs(60), "after the chaos")
        .await;
    let summary = watch
        .check()
        .unwrap_or_else(|broken| panic!("seed {seed}: etcd membership: {broken}"));
    let now = env.cluster_secret_uids(CLUSTER).await;
    assert_eq!(
        now, secrets,
        "seed {seed}: the cluster's Secrets were lost or replaced"
    );
    assert!(
        !report.kills.is_empty(),
        "seed {seed}: no manager was killed: the trial tested nothing"
    );
    report.partitions = env.sim.view().partitions().len();
    report.membership_samples = summary.samples;
    report.rechecked_samples = summary.rechecked;
    report.longest_blind = summary.longest_blind;
    drop(watch);
    env.assert_no_secrets_logged().await;
    env.assert_no_manager_exited();
    let pids = env.pids();
    drop(env);
    let alive = crate::env::wait_gone(&pids, Duration::from_secs(30)).await;
    assert!(
        alive.is_empty(),
        "seed {seed}: processes left running: {alive:?}"
    );
    report.wall = started.elapsed();
    println!(
        "chaos seed {seed}: {:.1?} wall time, {} kills, {} partitions, {} membership samples, \
         longest blind {:.1?}",
        report.wall,
        report.kills.len(),
        report.partitions,
        report.membership_samples,
        report.longest_blind
    );
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let roll = |seed| {
            let mut dice = Dice::new(seed);
            (0..8).map(|_| dice.below(10_000)).collect::<Vec<_>>()
        };
        assert_eq!(roll(20_261_201), roll(20_261_201));
        assert_ne!(roll(20_261_201), roll(20_261_202));
        assert!(roll(7).iter().all(|&v| v < 10_000));
    }
}
