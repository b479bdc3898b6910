//! Both managers killed with SIGKILL at random (seeded) moments while a control plane is created and
//! rolled: every run must converge, with exactly one `kubeadm init`, no etcd member left without a
//! machine, and never fewer than a quorum of voters answering (see `e2e_tests::chaos`; `make soak` runs
//! the long sequence many times).

use e2e_tests::chaos::{Sequence, trial};

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
        println!("E2E_CHAOS_SEED={seed} E2E_CHAOS_TRIALS=1 repeats this run");
        trial(seed, Sequence::Short).await;
    }
}
