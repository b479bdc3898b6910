//! `compare` (`make compare`): the same scenarios once with our managers and once with Cluster API's own
//! kubeadm managers (the peer), each on a management plane of its own with Cluster API's core manager and
//! the simulated machines, then one table. A benchmark: it prints, it asserts nothing.
//!
//! Phases: create 1 control-plane machine + 2 workers; scale the control plane 1 → 3; a generation
//! rollout of all 5 machines; a control-plane rollout whose first joiner's etcd never starts (bounded
//! by `COMPARE_FAULT_SECONDS`, default 300); `COMPARE_IDLE_SECONDS` at rest (default 660: one full
//! 10-minute resync of the peer's managers, their `--sync-period`, falls inside).
//! Measured: wall time per phase and per replaced machine; management API requests by client and verb
//! (kube-apiserver's audit log, clients told apart by their User-Agent); writes at rest; peak RSS and
//! CPU seconds of each manager and of kube-apiserver; etcd incidents seen by sampling the member list
//! every 250 ms (most learners at once, samples without quorum, most members).
//!
//! `COMPARE_SIDES=ours,peer` (default both) picks the sides. Our managers run as built: `make compare`
//! builds them in release mode and points `BOOTSTRAP_MANAGER`/`CONTROLPLANE_MANAGER` at them, as the
//! peer's are release builds.

use std::collections::BTreeMap;
use std::io::{BufRead, Seek};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use e2e_tests::Env;
use e2e_tests::env::NS;
use e2e_tests::etcd_watch::EtcdWatch;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use testenv::apiserver::ApiServerOptions;

const CLUSTER: &str = "compare";
const KCP: &str = "compare-control-plane";
/// Our settings that differ from the defaults: etcd through the API server as the peer reaches it, and
/// a member that never starts removed after 60 s (the peer has no such setting).
const OURS_ARGS: &[&str] = &["--etcd-access=port-forward", "--etcd-unstarted-grace=60s"];
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
";
const WRITE_VERBS: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];

fn seconds(name: &str, default: u64) -> Duration {
    Duration::from_secs(
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

/// Who sent a request, from its User-Agent.
fn client_of(user_agent: &str) -> &'static str {
    for (prefix, client) in [
        ("bootstrap-manager/", "bootstrap"),
        ("controlplane-manager/", "control plane"),
        ("capi-kubeadm-bootstrap-manager/", "bootstrap"),
        ("capi-kubeadm-control-plane-manager/", "control plane"),
        ("cluster-api-manager/", "core"),
    ] {
        if user_agent.starts_with(prefix) {
            return client;
        }
    }
    "other"
}

/// Requests in the audit log from byte `from` on: `(client, verb) → count`, and where the log ends.
fn requests_since(log: &Path, from: u64) -> (BTreeMap<(String, String), u64>, u64) {
    let mut counts = BTreeMap::new();
    let Ok(mut file) = std::fs::File::open(log) else {
        return (counts, from);
    };
    let _ = file.seek(std::io::SeekFrom::Start(from));
    let mut reader = std::io::BufReader::new(file);
    let mut end = from;
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap_or(0) > 0 {
        if !line.ends_with('\n') {
            break;
        }
        end += line.len() as u64;
        if let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) {
            let client = client_of(event["userAgent"].as_str().unwrap_or_default());
            let verb = event["verb"].as_str().unwrap_or_default().to_owned();
            *counts.entry((client.to_owned(), verb)).or_default() += 1;
        }
        line.clear();
    }
    (counts, end)
}

/// `(peak RSS in MiB, CPU seconds)` of a running process, from /proc.
fn usage(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let peak_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces): state is the 3rd field, utime the 14th.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15, i.e. 11 and 12 after the state; USER_HZ is 100 on Linux.
    (peak_kib / 1024.0, (ticks(11) + ticks(12)) / 100.0)
}

#[derive(Default)]
struct Report {
    side: &'static str,
    phases: Vec<(String, Option<Duration>, Option<u32>)>,
    requests: BTreeMap<(String, String), u64>,
    idle: Duration,
    idle_requests: BTreeMap<(String, String), u64>,
    processes: Vec<(String, f64, f64)>,
    most_learners: usize,
    samples_without_quorum: usize,
    longest_blind: Duration,
    most_members: usize,
    samples: usize,
}

/// The template's variables; every apply names the control plane's current size, as a user re-applying
/// the template after a scale would.
fn vars(
    control_planes: u32,
    control_plane_gen: &str,
    worker_gen: &str,
) -> BTreeMap<&'static str, String> {
    [
        ("CLUSTER_NAME", CLUSTER.to_owned()),
        ("CONTROL_PLANE_MACHINE_COUNT", control_planes.to_string()),
        ("WORKER_MACHINE_COUNT", "2".to_owned()),
        ("CONTROL_PLANE_MACHINE_GEN", control_plane_gen.to_owned()),
        ("WORKER_MACHINE_GEN", worker_gen.to_owned()),
    ]
    .into()
}

async fn machine_names(env: &Env) -> Vec<String> {
    env.machines(CLUSTER)
        .await
        .iter()
        .map(|m| m.name_any())
        .collect()
}

/// Waits until `count` Machines run with a Node and none of `gone` is left; `None` after `timeout`.
async fn wait_machines(
    env: &Env,
    count: usize,
    gone: &[String],
    timeout: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < timeout {
        let machines = env.machines(CLUSTER).await;
        let settled = machines.len() == count
            && machines.iter().all(|m| {
                m.metadata.deletion_timestamp.is_none()
                    && m.status.as_ref().is_some_and(|s| s.node_ref.is_some())
                    && !gone.contains(&m.name_any())
            });
        let control_plane = env.kcp(KCP).await.status.unwrap_or_default();
        let cp_ready = control_plane.ready_replicas == control_plane.replicas
            && control_plane.replicas > Some(0);
        if settled && cp_ready {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    None
}

async fn run_side(side: &'static str) -> Report {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let policy = dir.path().join("audit-policy.yaml");
    std::fs::write(&policy, AUDIT_POLICY).expect("write the audit policy");
    let log: PathBuf = dir.path().join("audit.log");
    let options = ApiServerOptions {
        extra_args: vec![
            format!("--audit-policy-file={}", policy.display()),
            format!("--audit-log-path={}", log.display()),
            "--audit-log-format=json".into(),
            "--audit-log-maxsize=0".into(),
        ],
        ..Default::default()
    };
    let peer = side == "peer";
    let mut env = Env::start_with_apiserver(peer, OURS_ARGS, options).await;
    let mut report = Report {
        side,
        ..Default::default()
    };
    let (_, mut offset) = requests_since(&log, 0);
    let step = seconds("COMPARE_STEP_SECONDS", 600);

    let started = Instant::now();
    env.apply_template(&vars(1, "genc01", "genw01")).await;
    let watch = EtcdWatch::start(
        env.client.clone(),
        NS,
        CLUSTER,
        env.sim.view(),
        Duration::from_millis(250),
    );
    let created = wait_machines(&env, 3, &[], step)
        .await
        .map(|_| started.elapsed());
    report
        .phases
        .push(("create 1 + 2 workers".into(), created, None));
    println!("[{side}] created: {created:?}");

    let started = Instant::now();
    env.scale_control_plane(KCP, 3).await;
    let scaled = wait_machines(&env, 5, &[], step)
        .await
        .map(|_| started.elapsed());
    report.phases.push(("scale 1 → 3".into(), scaled, None));
    println!("[{side}] scaled: {scaled:?}");

    let before = machine_names(&env).await;
    let started = Instant::now();
    env.apply_template(&vars(3, "genc02", "genw02")).await;
    let rolled = wait_machines(&env, 5, &before, step)
        .await
        .map(|_| started.elapsed());
    report.phases.push((
        "generation rollout, 3 CP + 2 workers".into(),
        rolled,
        Some(5),
    ));
    println!("[{side}] rolled: {rolled:?}");

    let before: Vec<String> = machine_names(&env)
        .await
        .into_iter()
        .filter(|m| m.starts_with(KCP))
        .collect();
    let sim_clusters: Api<kube::api::DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        NS,
        &kube::api::ApiResource::erase::<sim::api::SimCluster>(&()),
    );
    let arm = serde_json::json!({ "metadata": { "annotations": {
        sim::faults::NEXT_JOIN_FAULT_ANNOTATION: "etcd-never-starts" } } });
    sim_clusters
        .patch(CLUSTER, &PatchParams::default(), &Patch::Merge(&arm))
        .await
        .expect("arm the fault");
    let started = Instant::now();
    env.apply_template(&vars(3, "genc03", "genw02")).await;
    let recovered = wait_machines(&env, 5, &before, seconds("COMPARE_FAULT_SECONDS", 300))
        .await
        .map(|_| started.elapsed());
    report.phases.push((
        "CP rollout, first joiner's etcd never starts".into(),
        recovered,
        Some(3),
    ));
    println!("[{side}] faulty joiner: {recovered:?}");

    let (requests, end) = requests_since(&log, offset);
    report.requests = requests;
    offset = end;
    report.idle = seconds("COMPARE_IDLE_SECONDS", 660);
    tokio::time::sleep(report.idle).await;
    let (idle, _) = requests_since(&log, offset);
    report.idle_requests = idle;
    for (client, count) in &report.idle_requests {
        *report.requests.entry(client.clone()).or_default() += count;
    }

    let mut processes: Vec<(String, u32)> = Vec::new();
    for manager in &mut env.managers {
        let name = manager.name();
        processes.push((name, manager.process.process().pid()));
    }
    for manager in &mut env.peer {
        let name = manager.process().name().to_owned();
        processes.push((name, manager.process().pid()));
    }
    processes.push((
        "cluster-api-manager (core)".into(),
        env.core.process().pid(),
    ));
    processes.push(("kube-apiserver".into(), env.plane.apiserver().pid()));
    report.processes = processes
        .into_iter()
        .map(|(name, pid)| {
            let (rss, cpu) = usage(pid);
            (name, rss, cpu)
        })
        .collect();
    let samples = watch.samples();
    report.samples = samples.len();
    report.most_learners = samples.iter().map(|s| s.learners()).max().unwrap_or(0);
    report.most_members = samples.iter().map(|s| s.members.len()).max().unwrap_or(0);
    let summary = e2e_tests::etcd_watch::summarize(&samples);
    report.samples_without_quorum = summary.without_quorum;
    report.longest_blind = summary.longest_blind;
    drop(watch);
    drop(env);
    report
}

fn print(reports: &[Report]) {
    let cell = |d: &Option<Duration>| {
        d.map_or("not within the bound".into(), |d| {
            format!("{:.1} s", d.as_secs_f64())
        })
    };
    println!(
        "\n| phase | {} |",
        reports
            .iter()
            .map(|r| r.side)
            .collect::<Vec<_>>()
            .join(" | ")
    );
    println!("|---|{}", "---|".repeat(reports.len()));
    let phases = reports.first().map(|r| r.phases.len()).unwrap_or(0);
    for i in 0..phases {
        let name = &reports[0].phases[i].0;
        let cells: Vec<String> = reports
            .iter()
            .map(|r| {
                let (_, took, machines) = &r.phases[i];
                match (took, machines) {
                    (Some(d), Some(n)) => format!(
                        "{} ({:.1} s per machine)",
                        cell(took),
                        d.as_secs_f64() / f64::from(*n)
                    ),
                    _ => cell(took),
                }
            })
            .collect();
        println!("| {name} | {} |", cells.join(" | "));
    }
    let clients = ["bootstrap", "control plane", "core"];
    for client in clients {
        let cells: Vec<String> = reports
            .iter()
            .map(|r| {
                let by_verb: Vec<String> = r
                    .requests
                    .iter()
                    .filter(|((c, _), _)| c == client)
                    .map(|((_, verb), n)| format!("{verb} {n}"))
                    .collect();
                by_verb.join(", ")
            })
            .collect();
        println!(
            "| API requests, {client} (whole run) | {} |",
            cells.join(" | ")
        );
    }
    for client in clients {
        let cells: Vec<String> = reports
            .iter()
            .map(|r| {
                let minutes = r.idle.as_secs_f64() / 60.0;
                let count = |writes: bool| -> u64 {
                    r.idle_requests
                        .iter()
                        .filter(|((c, verb), _)| {
                            c == client && WRITE_VERBS.contains(&verb.as_str()) == writes
                        })
                        .map(|(_, n)| n)
                        .sum()
                };
                format!(
                    "{:.1} reads, {:.1} writes per minute",
                    count(false) as f64 / minutes,
                    count(true) as f64 / minutes
                )
            })
            .collect();
        println!("| at rest, {client} | {} |", cells.join(" | "));
    }
    let names: Vec<String> = reports
        .iter()
        .flat_map(|r| r.processes.iter().map(|(n, _, _)| n.clone()))
        .collect();
    for name in names.iter().collect::<std::collections::BTreeSet<_>>() {
        let cells: Vec<String> = reports
            .iter()
            .map(|r| {
                r.processes
                    .iter()
                    .find(|(n, _, _)| n == name)
                    .map_or("–".into(), |(_, rss, cpu)| {
                        format!("{rss:.0} MiB peak, {cpu:.1} CPU s")
                    })
            })
            .collect();
        println!("| {name} | {} |", cells.join(" | "));
    }
    let cells: Vec<String> = reports
        .iter()
        .map(|r| {
            format!(
                "{} samples: at most {} learner(s) and {} members, {} without quorum, longest blind {:.1?}",
                r.samples, r.most_learners, r.most_members, r.samples_without_quorum, r.longest_blind
            )
        })
        .collect();
    println!("| etcd member list every 250 ms | {} |", cells.join(" | "));
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let sides = std::env::var("COMPARE_SIDES").unwrap_or_else(|_| "ours,peer".into());
    let mut reports = Vec::new();
    for side in ["ours", "peer"] {
        if sides.split(',').any(|s| s.trim() == side) {
            reports.push(run_side(side).await);
        }
    }
    print(&reports);
}
