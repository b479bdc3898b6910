//! `make soak`: seeded crash trials of the long sequence (create 1, scale to 3, 5 with a joiner cut off
//! the network, back to 3, a generation rollout, a node lost to a MachineHealthCheck), both managers
//! killed with SIGKILL at random moments throughout; every invariant of `e2e_tests::chaos` checked after
//! each trial. Bounded in count (`SOAK_TRIALS`, default 50) and time (`SOAK_MINUTES`, default 360: no
//! trial starts after it); `SOAK_SEED` (default 20261201) is the first seed, the next trial takes the
//! next one. Prints a line per trial and a table at the end, writes `target/soak.csv`, and exits 1 when
//! a trial failed, naming the seed that replays it.

use std::time::{Duration, Instant};

use e2e_tests::chaos::{Sequence, TrialReport, trial};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A panic's message, from a trial's task.
fn panic_message(error: tokio::task::JoinError) -> String {
    match error.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "a panic without a message".to_owned()),
        Err(e) => e.to_string(),
    }
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let first_seed = env_number("SOAK_SEED", 20_261_201);
    let trials = env_number("SOAK_TRIALS", 50);
    let budget = Duration::from_secs(env_number("SOAK_MINUTES", 360) * 60);
    let started = Instant::now();
    let mut passed: Vec<TrialReport> = Vec::new();
    let mut failed: Vec<(u64, Duration, String)> = Vec::new();
    let mut csv = String::from(
        "seed,result,seconds,kills,partitions,membership_samples,longest_blind_seconds\n",
    );
    for seed in first_seed..first_seed + trials {
        if started.elapsed() > budget {
            println!("soak: time budget of {budget:?} spent; no further trial");
            break;
        }
        let at = Instant::now();
        match tokio::spawn(trial(seed, Sequence::Soak)).await {
            Ok(report) => {
                csv.push_str(&format!(
                    "{seed},ok,{:.1},{},{},{},{:.2}\n",
                    report.wall.as_secs_f64(),
                    report.kills.len(),
                    report.partitions,
                    report.membership_samples,
                    report.longest_blind.as_secs_f64()
                ));
                passed.push(report);
            }
            Err(e) => {
                let message = panic_message(e);
                let first_line = message.lines().next().unwrap_or_default().to_owned();
                println!("soak: seed {seed} FAILED: {message}");
                csv.push_str(&format!(
                    "{seed},failed,{:.1},,,,\n",
                    at.elapsed().as_secs_f64()
                ));
                failed.push((seed, at.elapsed(), first_line));
            }
        }
    }
    // The workspace's target folder: benchmarks run in their package's folder.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/soak.csv");
    if let Err(e) = std::fs::write(&path, &csv) {
        eprintln!("soak: {}: {e}", path.display());
    }

    println!(
        "\n| seed | result | wall | kills | partitions | samples | longest blind | phases (time, kills) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &passed {
        let phases: Vec<String> = r
            .phases
            .iter()
            .map(|(name, time, kills)| format!("{name} {:.0?} ({kills})", time))
            .collect();
        println!(
            "| {} | ok | {:.0?} | {} | {} | {} | {:.1?} | {} |",
            r.seed,
            r.wall,
            r.kills.len(),
            r.partitions,
            r.membership_samples,
            r.longest_blind,
            phases.join(", ")
        );
    }
    for (seed, wall, why) in &failed {
        println!("| {seed} | FAILED | {wall:.0?} | | | | | {why} |");
    }
    let kills: usize = passed.iter().map(|r| r.kills.len()).sum();
    let partitions: usize = passed.iter().map(|r| r.partitions).sum();
    println!(
        "\nsoak: {} trials, {} passed, {} failed; {kills} manager kills and {partitions} partitions in the \
         passed trials; median trial {:.0?}; {:.0?} in all",
        passed.len() + failed.len(),
        passed.len(),
        failed.len(),
        median(passed.iter().map(|r| r.wall).collect()),
        started.elapsed()
    );
    if !failed.is_empty() {
        for (seed, _, _) in &failed {
            println!("replay: SOAK_SEED={seed} SOAK_TRIALS=1 make soak");
        }
        std::process::exit(1);
    }
}
