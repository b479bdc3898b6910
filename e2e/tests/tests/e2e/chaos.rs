//! Both managers killed with SIGKILL at random (seeded) moments while a control plane is created, scaled
//! and rolled: every run must converge, with exactly one `kubeadm init`, no etcd member left without a
//! machine, and never fewer than a quorum of voters answering.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e_tests::Env;
use e2e_tests::env::NS;
use e2e_tests::etcd_watch::EtcdWatch;
use kube::{Resource, ResourceExt};

/// Kills per phase, at most; with the seed this makes a run repeatable in its choices. Each trial is a
/// fresh environment with the next seed.
const KILLS_PER_PHASE: usize = 3;
const PHASE_TIMEOUT: Duration = Duration::from_secs(600);

/// A small deterministic generator (SplitMix64): the same seed, the same kill schedule.
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Three control-plane machines of `generation`, each with a Node, none deleting, and the status
/// agreeing.
async fn settled(env: &Env, cluster: &str, generation: &str) -> bool {
    let kcp = env.kcp(&format!("{cluster}-control-plane")).await;
    let status = kcp.status.unwrap_or_default();
    let machines: Vec<_> = env
        .machines(cluster)
        .await
        .into_iter()
        .filter(|m| m.labels().contains_key("cluster.x-k8s.io/control-plane"))
        .collect();
    machines.len() == 3
        && machines.iter().all(|m| {
            m.meta().deletion_timestamp.is_none()
                && m.status.as_ref().is_some_and(|s| s.node_ref.is_some())
                && m.labels()
                    .get("controlplane.cluster.x-k8s.io/machine-generation")
                    .map(String::as_str)
                    == Some(generation)
        })
        && status.ready_replicas == Some(3)
        && status.up_to_date_replicas == Some(3)
}

/// Until the control plane settles on `generation`: now and then (seeded) one manager is killed and
/// restarted at once. Returns the kills made.
async fn converge_under_kills(
    env: &mut Env,
    dice: &mut Dice,
    cluster: &str,
    generation: &str,
    what: &str,
) -> Vec<String> {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let mut kills = Vec::new();
    let mut next_kill = Instant::now() + Duration::from_millis(1000 + dice.below(6000));
    loop {
        if settled(env, cluster, generation).await {
            return kills;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not settled on {generation} after {PHASE_TIMEOUT:?} (kills: {kills:?})\n{}",
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn managers_killed_at_random_moments_still_converge_safely() {
    let env_number = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let first_seed = env_number("E2E_CHAOS_SEED", 20_261_201);
    let trials = env_number("E2E_CHAOS_TRIALS", 2);
    for seed in first_seed..first_seed + trials {
        trial(seed).await;
    }
}

/// One run with its own management plane, managers and cluster.
async fn trial(seed: u64) {
    println!("chaos seed {seed} (E2E_CHAOS_SEED={seed} E2E_CHAOS_TRIALS=1 repeats this run)");
    let mut dice = Dice(seed);
    let started = Instant::now();
    let cluster = "chaos";
    let mut env = Env::start(&[]).await;
    let vars = |generation: &str| -> BTreeMap<&'static str, String> {
        [
            ("CLUSTER_NAME", cluster.to_owned()),
            ("CONTROL_PLANE_MACHINE_COUNT", "3".to_owned()),
            ("WORKER_MACHINE_COUNT", "0".to_owned()),
            ("CONTROL_PLANE_MACHINE_GEN", generation.to_owned()),
        ]
        .into()
    };
    env.apply_template(&vars("genc01")).await;
    let watch = EtcdWatch::start(
        env.client.clone(),
        NS,
        cluster,
        env.sim.view(),
        Duration::from_millis(250),
    );

    // Creation: init, then two joins, with managers dying on the way.
    let created = converge_under_kills(&mut env, &mut dice, cluster, "genc01", "create 3").await;
    println!(
        "create 3 under {} kills: {:.1?}",
        created.len(),
        started.elapsed()
    );

    // A generation bump rolls every machine, with managers dying on the way.
    let roll = Instant::now();
    env.apply_template(&vars("genc02")).await;
    let rolled = converge_under_kills(&mut env, &mut dice, cluster, "genc02", "roll").await;
    println!(
        "rollout under {} kills: {:.1?}",
        rolled.len(),
        roll.elapsed()
    );

    // Exactly one init, no member without a machine, never below quorum, at most one learner.
    let inits: Vec<String> = env.init_secrets(cluster).await.into_keys().collect();
    assert_eq!(
        inits.len(),
        1,
        "kubeadm init rendered more than once: {inits:?}"
    );
    let names: Vec<String> = env
        .machines(cluster)
        .await
        .into_iter()
        .filter(|m| m.labels().contains_key("cluster.x-k8s.io/control-plane"))
        .map(|m| m.name_any())
        .collect();
    watch
        .wait_voters(names, Duration::from_secs(60), "after the chaos")
        .await;
    let samples = watch.samples();
    assert!(!samples.is_empty());
    for s in &samples {
        assert!(s.has_quorum(), "quorum lost at {:?}: {:?}", s.at, s.members);
        assert!(
            s.learners() <= 1,
            "two learners at {:?}: {:?}",
            s.at,
            s.members
        );
    }
    assert!(
        created.len() + rolled.len() > 0,
        "no manager was killed: the scenario tested nothing"
    );
    drop(watch);
    env.assert_no_secrets_logged().await;
    let pids = env.pids();
    drop(env);
    let alive = e2e_tests::env::wait_gone(&pids, Duration::from_secs(30)).await;
    assert!(alive.is_empty(), "processes left running: {alive:?}");
    println!(
        "scenario chaos (seed {seed}): {:.1?} wall time, {} kills, {} membership samples",
        started.elapsed(),
        created.len() + rolled.len(),
        samples.len()
    );
}
