//! `make bench-rollout`: how close a control-plane rollout comes to the time its machines take to join.
//!
//! With the managers `make bench-rollout` builds for release (`BOOTSTRAP_MANAGER`, `CONTROLPLANE_MANAGER`;
//! the debug builds otherwise), on simulated machines (real etcd, kube-apiserver and kubeadm, see the
//! end-to-end tests), a cluster of 3 control-plane machines is rolled `BENCH_ROLLOUTS` times (default 5) by
//! bumping its generation counter, then scaled to 5 and rolled once more. For each rollout it prints the
//! wall time, each new machine's join (its `MachineCreated` Event until it has a Node and its etcd member
//! votes), the sum of the joins and the ratio of the two, and the idle gaps between consecutive steps that
//! are not a join, with what the control plane said it waited for (those over `BENCH_GAPS_OVER_MS`, default
//! 1000). The wall time runs until the last old Machine is gone; the part after the control plane's last
//! step (its hook on that Machine released), which is core Cluster API deleting it, is shown apart from
//! the gaps. Nothing is asserted: it measures.
//!
//! With `BENCH_NODES=real` (`make bench-real`) the machines are real nodes (systemd-nspawn, real cloud-init,
//! containerd and kubelet, see `templates/cluster-template-sim-real.yaml`): the quickstart's 3 + 2 shape is
//! created, each node's boot is broken down (see `real.rs`), and the control plane is rolled
//! `BENCH_ROLLOUTS` times (default 1), each new node's boot broken down as well.
//!
//! Steps come from the control plane's own Events (`MachineCreated`, `MachineDeleted`,
//! `EtcdMembershipChanged`, with microsecond times); joins and machines gone from sampling the Machines
//! and the etcd membership every 100 ms.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use e2e_tests::Env;
use e2e_tests::env::{NS, REAL_NODES_TEMPLATE, render_template};
use e2e_tests::etcd_watch::EtcdWatch;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kubeadm_api::controlplane::conditions::types;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::meta::{CONTROL_PLANE_LABEL, MACHINE_GENERATION_LABEL};

#[path = "rollout/real.rs"]
mod real;

const CLUSTER: &str = "bench";
const KCP: &str = "bench-control-plane";
/// Workers of a real cluster: the quickstart's shape.
const REAL_WORKERS: u32 = 2;
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
const ROLLOUT_TIMEOUT: Duration = Duration::from_secs(600);

/// The machines' kind (`BENCH_NODES=real`: systemd-nspawn nodes, `make bench-real`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Nodes {
    Simulated,
    Real,
}

impl Nodes {
    fn from_env() -> Self {
        match std::env::var("BENCH_NODES").as_deref() {
            Ok("real") => Nodes::Real,
            _ => Nodes::Simulated,
        }
    }

    /// Applies the cluster with `control_planes` machines at `target`; real clusters keep
    /// [`REAL_WORKERS`] workers (the quickstart's shape), simulated ones none.
    async fn apply(self, env: &Env, control_planes: u32, target: &Target) {
        let mut vars: BTreeMap<&str, String> = [
            ("CLUSTER_NAME", CLUSTER.to_owned()),
            ("CONTROL_PLANE_MACHINE_COUNT", control_planes.to_string()),
            ("WORKER_MACHINE_COUNT", "0".to_owned()),
        ]
        .into();
        match target {
            Target::Generation(generation) => {
                vars.insert("CONTROL_PLANE_MACHINE_GEN", format!("genc{generation:02}"));
            }
            Target::Version(version) => {
                vars.insert("KUBERNETES_VERSION", version.clone());
            }
        }
        match self {
            Nodes::Simulated => env.apply_template(&vars).await,
            Nodes::Real => {
                vars.insert("WORKER_MACHINE_COUNT", REAL_WORKERS.to_string());
                vars.insert(
                    "KUBERNETES_VERSION",
                    testenv::binaries::ToolModule::KubernetesNode.version(),
                );
                env.apply(&render_template(REAL_NODES_TEMPLATE, &vars))
                    .await;
            }
        }
    }
}

/// What a rollout brings every control-plane machine to.
#[derive(Clone, Debug)]
enum Target {
    /// The generation counter `CONTROL_PLANE_MACHINE_GEN`, `genc<N>`.
    Generation(u32),
    /// `KUBERNETES_VERSION` (`BENCH_UPGRADE=1`, `make bench-upgrade`).
    Version(String),
}

impl Target {
    fn reached_by(&self, machine: &ControlPlaneMachine) -> bool {
        match self {
            Target::Generation(g) => machine.generation.as_deref() == Some(&format!("genc{g:02}")),
            Target::Version(v) => machine.version.as_deref() == Some(v.as_str()),
        }
    }
}

/// A control-plane Machine as a rollout sees it.
#[derive(Debug)]
struct ControlPlaneMachine {
    name: String,
    generation: Option<String>,
    version: Option<String>,
    node: Option<String>,
    deleting: bool,
}

/// A moment in a rollout: a step the control plane took, or something the benchmark saw.
#[derive(Clone, Debug)]
struct Mark {
    at: Timestamp,
    what: String,
}

/// What the control plane said it was doing, sampled.
struct Said {
    at: Timestamp,
    text: String,
}

struct Rollout {
    replicas: u32,
    wall: Duration,
    /// (machine, join time).
    joins: Vec<(String, Duration)>,
    /// (gap, from, to, what the control plane said in the middle of it), between the template applied
    /// and the control plane's last step.
    gaps: Vec<(Duration, String, String, String)>,
    /// After the control plane's last step (its last old machine's hook released): core Cluster API
    /// deleting that Machine, until it is gone.
    after_last_step: Duration,
}

impl Rollout {
    fn joined(&self) -> Duration {
        self.joins.iter().map(|(_, d)| *d).sum()
    }

    fn ratio(&self) -> f64 {
        self.wall.as_secs_f64() / self.joined().as_secs_f64().max(f64::EPSILON)
    }

    fn largest_gap(&self) -> Option<&(Duration, String, String, String)> {
        self.gaps.iter().max_by_key(|g| g.0)
    }
}

fn since(from: Timestamp, to: Timestamp) -> Duration {
    to.duration_since(from).unsigned_abs()
}

/// The Events about this control plane's steps after `from`: `(time, reason/action machine)`.
async fn steps(env: &Env, from: Timestamp) -> Vec<Mark> {
    let events = Api::<Event>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .expect("events list");
    let mut marks = Vec::new();
    for event in events.items {
        if event.regarding.as_ref().and_then(|r| r.name.as_deref()) != Some(KCP) {
            continue;
        }
        let reason = event.reason.clone().unwrap_or_default();
        if !matches!(
            reason.as_str(),
            "MachineCreated" | "MachineDeleted" | "EtcdMembershipChanged"
        ) {
            continue;
        }
        // A series (the same step again) keeps its first time: only single steps are marks.
        let Some(at) = event.event_time.as_ref().map(|t| t.0) else {
            continue;
        };
        if at < from {
            continue;
        }
        let machine = event
            .related
            .as_ref()
            .and_then(|r| r.name.clone())
            .unwrap_or_default();
        let action = event.action.clone().unwrap_or_default();
        marks.push(Mark {
            at,
            what: format!("{reason}/{action} {machine}"),
        });
    }
    marks.sort_by_key(|m| m.at);
    marks
}

async fn control_plane_says(env: &Env) -> String {
    let kcp: KubeadmControlPlane = Api::namespaced(env.client.clone(), NS)
        .get(KCP)
        .await
        .expect("the control plane exists");
    let conditions = kcp.status.map(|s| s.conditions).unwrap_or_default();
    let say = |type_: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == "True")
            .map(|c| format!("{}: {}", c.reason, c.message))
    };
    let settled = conditions
        .iter()
        .find(|c| c.type_ == types::ETCD_MEMBERSHIP_SETTLED && c.status != "True")
        .map(|c| format!("etcd {}: {}", c.reason, c.message));
    [
        say(types::ROLLING_OUT),
        say(types::SCALING_UP),
        say(types::SCALING_DOWN),
        settled,
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join("; ")
}

/// Rolls the control plane to `target` and measures it.
async fn roll(
    env: &Env,
    nodes: Nodes,
    watch: &EtcdWatch,
    replicas: u32,
    target: Target,
) -> Rollout {
    let started = Timestamp::now();
    let clock = Instant::now();
    let before: BTreeSet<String> = control_plane_machines(env)
        .await
        .into_iter()
        .map(|m| m.name)
        .collect();
    nodes.apply(env, replicas, &target).await;
    let mut joined: BTreeMap<String, Timestamp> = BTreeMap::new();
    let mut gone: BTreeMap<String, Timestamp> = BTreeMap::new();
    let mut said: Vec<Said> = Vec::new();
    loop {
        let now = Timestamp::now();
        let machines = control_plane_machines(env).await;
        let voters: BTreeSet<String> = watch
            .last()
            .map(|s| {
                s.members
                    .into_iter()
                    .filter(|(_, learner)| !learner)
                    .map(|(n, _)| n)
                    .collect()
            })
            .unwrap_or_default();
        for m in &machines {
            let new = target.reached_by(m) && !before.contains(&m.name);
            if new && !m.deleting && m.node.is_some() && voters.contains(&m.name) {
                joined.entry(m.name.clone()).or_insert(now);
            }
        }
        let present: BTreeSet<&String> = machines.iter().map(|m| &m.name).collect();
        for old in &before {
            if !present.contains(old) {
                gone.entry(old.clone()).or_insert(now);
            }
        }
        said.push(Said {
            at: now,
            text: control_plane_says(env).await,
        });
        let done = machines.len() == replicas as usize
            && machines.iter().all(|m| {
                target.reached_by(m) && m.node.is_some() && !m.deleting && voters.contains(&m.name)
            })
            && voters.len() == replicas as usize;
        if done {
            break;
        }
        assert!(
            clock.elapsed() < ROLLOUT_TIMEOUT,
            "rollout to {target:?} did not finish: {machines:?}, voters {voters:?}\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    let ended = Timestamp::now();
    let steps = steps(env, started).await;
    let last_step = steps.iter().map(|m| m.at).max().unwrap_or(started);
    let created: BTreeMap<String, Timestamp> = steps
        .iter()
        .filter(|m| m.what.starts_with("MachineCreated/"))
        .filter_map(|m| Some((m.what.rsplit(' ').next()?.to_owned(), m.at)))
        .collect();
    let joins: Vec<(String, Duration)> = joined
        .iter()
        .filter_map(|(name, at)| Some((name.clone(), since(*created.get(name)?, *at))))
        .collect();
    // Every moment, in order; the gaps between consecutive ones that no join covers are idle.
    let mut marks = vec![Mark {
        at: started,
        what: "template applied".into(),
    }];
    marks.extend(steps);
    marks.extend(joined.iter().map(|(name, at)| Mark {
        at: *at,
        what: format!("joined {name}"),
    }));
    marks.extend(gone.iter().map(|(name, at)| Mark {
        at: *at,
        what: format!("gone {name}"),
    }));
    marks.push(Mark {
        at: ended,
        what: "rolled out".into(),
    });
    marks.sort_by_key(|m| m.at);
    let in_join = |from: Timestamp, to: Timestamp| {
        joined.iter().any(|(name, end)| {
            created
                .get(name)
                .is_some_and(|start| *start <= from && to <= *end)
        })
    };
    let gaps = marks
        .windows(2)
        .filter(|pair| pair[1].at <= last_step && !in_join(pair[0].at, pair[1].at))
        .map(|pair| {
            let middle = pair[0].at + since(pair[0].at, pair[1].at) / 2;
            let text = said
                .iter()
                .min_by_key(|s| since(s.at.min(middle), s.at.max(middle)))
                .map(|s| s.text.clone())
                .unwrap_or_default();
            (
                since(pair[0].at, pair[1].at),
                pair[0].what.clone(),
                pair[1].what.clone(),
                text,
            )
        })
        .collect();
    Rollout {
        replicas,
        wall: since(started, ended),
        joins,
        gaps,
        after_last_step: since(last_step, ended),
    }
}

/// Each control-plane Machine of the cluster.
async fn control_plane_machines(env: &Env) -> Vec<ControlPlaneMachine> {
    env.machines(CLUSTER)
        .await
        .into_iter()
        .filter(|m| m.labels().contains_key(CONTROL_PLANE_LABEL))
        .map(|m| ControlPlaneMachine {
            name: m.name_any(),
            generation: m.labels().get(MACHINE_GENERATION_LABEL).cloned(),
            version: m.spec.version.clone(),
            node: m
                .status
                .as_ref()
                .and_then(|s| s.node_ref.as_ref())
                .map(|n| n.name.clone()),
            deleting: m.metadata.deletion_timestamp.is_some(),
        })
        .collect()
}

fn print(rollouts: &[Rollout]) {
    println!();
    println!(
        "| # | machines | wall | joins | sum of joins | ratio | largest idle gap | after the last step |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (i, r) in rollouts.iter().enumerate() {
        let joins: Vec<String> = r
            .joins
            .iter()
            .map(|(_, d)| format!("{:.1}", d.as_secs_f64()))
            .collect();
        let gap = r
            .largest_gap()
            .map_or("—".to_owned(), |(d, from, to, said)| {
                format!("{:.2} s ({from} → {to}; {said})", d.as_secs_f64())
            });
        println!(
            "| {} | {} | {:.1} s | {} s | {:.1} s | {:.2} | {gap} | {:.2} s |",
            i + 1,
            r.replicas,
            r.wall.as_secs_f64(),
            joins.join(", "),
            r.joined().as_secs_f64(),
            r.ratio(),
            r.after_last_step.as_secs_f64(),
        );
    }
    let mut ratios: Vec<f64> = rollouts.iter().map(Rollout::ratio).collect();
    ratios.sort_by(f64::total_cmp);
    let median = ratios.get(ratios.len() / 2).copied().unwrap_or_default();
    let largest = rollouts
        .iter()
        .flat_map(|r| r.gaps.iter())
        .max_by_key(|g| g.0);
    println!();
    println!("median ratio {median:.2}");
    if let Some((d, from, to, said)) = largest {
        println!(
            "largest idle gap {:.2} s: {from} → {to} ({said})",
            d.as_secs_f64()
        );
    }
    let shown = Duration::from_millis(
        std::env::var("BENCH_GAPS_OVER_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000),
    );
    for (i, r) in rollouts.iter().enumerate() {
        let idle: Duration = r.gaps.iter().map(|g| g.0).sum();
        let after_hook: Duration = r
            .gaps
            .iter()
            // Until the next machine is created: once the old one's infrastructure machine is gone
            // (Cluster API's first reconcile after the hook), not waiting for its bootstrap config and
            // Node to be deleted as well.
            .filter(|g| g.1.contains("/ReleaseHook "))
            .map(|g| g.0)
            .sum();
        println!();
        println!(
            "rollout {}: idle {:.2} s in all, {:.2} s of it from a released hook to the next step; gaps over {} ms:",
            i + 1,
            idle.as_secs_f64(),
            after_hook.as_secs_f64(),
            shown.as_millis()
        );
        for (d, from, to, said) in r.gaps.iter().filter(|g| g.0 > shown) {
            println!("  {:.2} s  {from} → {to}  [{said}]", d.as_secs_f64());
        }
    }
}

/// Creates the cluster with 3 control-plane machines at `target`, the etcd watch sampling it from the
/// start; returns once the control plane is ready, with when the watch started.
async fn create_three(env: &Env, nodes: Nodes, target: &Target) -> (EtcdWatch, Timestamp) {
    nodes.apply(env, 3, target).await;
    let watch_started = Timestamp::now();
    let watch = EtcdWatch::start(
        env.client.clone(),
        NS,
        CLUSTER,
        env.sim.view(),
        SAMPLE_EVERY,
    );
    env.wait_control_plane(KCP, 3, ROLLOUT_TIMEOUT, "create 3")
        .await;
    (watch, watch_started)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let rollouts: Option<u32> = std::env::var("BENCH_ROLLOUTS")
        .ok()
        .and_then(|v| v.parse().ok());
    if Nodes::from_env() == Nodes::Real {
        real::run(rollouts.unwrap_or(1)).await;
        return;
    }
    if std::env::var_os("BENCH_UPGRADE").is_some() {
        upgrade().await;
        return;
    }
    let rollouts = rollouts.unwrap_or(5);
    let env = Env::start(&[]).await;
    let (watch, _) = create_three(&env, Nodes::Simulated, &Target::Generation(1)).await;
    let mut results = Vec::new();
    for generation in 2..2 + rollouts {
        let r = roll(
            &env,
            Nodes::Simulated,
            &watch,
            3,
            Target::Generation(generation),
        )
        .await;
        println!(
            "rollout {} of 3 machines: {:.1} s, ratio {:.2}",
            results.len() + 1,
            r.wall.as_secs_f64(),
            r.ratio()
        );
        results.push(r);
    }
    env.scale_control_plane(KCP, 5).await;
    env.wait_control_plane(KCP, 5, ROLLOUT_TIMEOUT, "scale to 5")
        .await;
    let r = roll(
        &env,
        Nodes::Simulated,
        &watch,
        5,
        Target::Generation(2 + rollouts),
    )
    .await;
    println!(
        "rollout of 5 machines: {:.1} s, ratio {:.2}",
        r.wall.as_secs_f64(),
        r.ratio()
    );
    results.push(r);
    print(&results);
}

/// `make bench-upgrade`: 3 control-plane machines created at the current Kubernetes release, then
/// upgraded one minor at a time to each other release built (`hack/tools/k8s-1.N`), every new machine
/// running its release's kubeadm, kube-apiserver and etcd; each step measured as a rollout is, with the
/// longest time the workload API did not answer during it, and the managers' peak memory at the end.
async fn upgrade() {
    let chain = testenv::binaries::kubernetes_releases();
    let mut env = Env::start(&[]).await;
    let (watch, _) = create_three(&env, Nodes::Simulated, &Target::Version(chain[0].clone())).await;
    let workload = e2e_tests::api_probe::workload_client(&env.client, NS, CLUSTER)
        .await
        .expect("the workload cluster's kubeconfig");
    let mut results = Vec::new();
    let mut outages = Vec::new();
    for version in &chain[1..] {
        let probe = e2e_tests::api_probe::ApiProbe::start(workload.clone(), SAMPLE_EVERY);
        let r = roll(
            &env,
            Nodes::Simulated,
            &watch,
            3,
            Target::Version(version.clone()),
        )
        .await;
        let (answered, failed, outage) = probe.summary();
        println!(
            "upgrade to {version}: {:.1} s, ratio {:.2}; workload API {answered} answers, {failed} failures, longest gap {:.2} s",
            r.wall.as_secs_f64(),
            r.ratio(),
            outage.as_secs_f64()
        );
        outages.push((version.clone(), outage));
        results.push(r);
    }
    print(&results);
    println!();
    for (version, outage) in outages {
        println!(
            "longest workload API gap, upgrade to {version}: {:.2} s",
            outage.as_secs_f64()
        );
    }
    for (manager, kib) in env.manager_peak_memory() {
        println!("peak memory of {manager}: {} MiB", kib / 1024);
    }
    watch.assert_safe("upgrade chain");
}
