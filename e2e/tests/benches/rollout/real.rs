//! `make bench-real`: where a real node's boot goes, and a control-plane rollout on real nodes.
//!
//! The quickstart's shape (3 control-plane machines, [`super::REAL_WORKERS`] workers) is created on real
//! nodes. Every 200 ms the benchmark notes when each Machine appeared and when its Node became Ready in
//! the workload cluster; once all are Ready and have settled for [`SETTLE`], it reads each node's memory
//! (its memory cgroup) and its own record of the boot (cloud-init's stage times, the journal of the image
//! import and of cloud-final, whose output is kubeadm's: see `e2e_tests::boot_timeline`), and the etcd
//! watch's view of each control-plane member's way in (added as a learner, started, promoted). Then the
//! control plane is rolled as `make bench-rollout` rolls it, and each new node's boot is broken down too.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use e2e_tests::Env;
use e2e_tests::boot_timeline::{self, Boot, BootRecord, JOURNAL_UNITS, Role};
use e2e_tests::env::NS;
use e2e_tests::etcd_watch::{EtcdWatch, member_timeline};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kubeadm_api::cluster::v1beta2::Machine;
use kubeadm_api::meta::CONTROL_PLANE_LABEL;
use sim::SimView;

use super::{CLUSTER, Nodes, ROLLOUT_TIMEOUT, Target, create_three, print, roll};

/// How long the nodes run after the last one is Ready before their memory is read.
const SETTLE: Duration = Duration::from_secs(30);
const LOOK_EVERY: Duration = Duration::from_millis(200);
const MIB: f64 = 1024.0 * 1024.0;

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// What the benchmark saw from outside, with unix times.
#[derive(Default)]
struct Seen {
    /// Machine → when it first appeared.
    created: BTreeMap<String, f64>,
    /// Node → when it was first Ready.
    ready: BTreeMap<String, f64>,
}

/// Looks at the Machines and the workload cluster's Nodes every [`LOOK_EVERY`] until dropped.
struct Looker {
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Looker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Looker {
    fn start(client: kube::Client) -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let shared = seen.clone();
        let task = tokio::spawn(async move {
            let machines = Api::<Machine>::namespaced(client.clone(), NS);
            let selector =
                ListParams::default().labels(&format!("cluster.x-k8s.io/cluster-name={CLUSTER}"));
            let mut workload: Option<kube::Client> = None;
            loop {
                let now = unix_now();
                if let Ok(list) = machines.list(&selector).await {
                    let mut seen = shared.lock().unwrap_or_else(PoisonError::into_inner);
                    for m in list.items {
                        seen.created.entry(m.name_any()).or_insert(now);
                    }
                }
                if workload.is_none() {
                    workload = e2e_tests::api_probe::workload_client(&client, NS, CLUSTER)
                        .await
                        .ok();
                }
                if let Some(workload) = &workload
                    && let Ok(nodes) = Api::<Node>::all(workload.clone())
                        .list(&ListParams::default())
                        .await
                {
                    let mut seen = shared.lock().unwrap_or_else(PoisonError::into_inner);
                    for node in nodes.items.iter().filter(|n| ready(n)) {
                        seen.ready.entry(node.name_any()).or_insert(now);
                    }
                }
                tokio::time::sleep(LOOK_EVERY).await;
            }
        });
        Self { seen, task }
    }

    fn created(&self, machine: &str) -> Option<f64> {
        self.lock().created.get(machine).copied()
    }

    fn ready(&self, node: &str) -> Option<f64> {
        self.lock().ready.get(node).copied()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until every one of `machines` has a Ready Node (a real node's Node is named after its
    /// Machine).
    async fn wait_ready(&self, env: &Env, machines: &[String]) {
        let deadline = Instant::now() + ROLLOUT_TIMEOUT;
        while machines.iter().any(|m| self.ready(m).is_none()) {
            assert!(
                Instant::now() < deadline,
                "not every Node of {machines:?} became Ready\n{}",
                env.diagnostics().await
            );
            tokio::time::sleep(LOOK_EVERY).await;
        }
    }
}

fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// When process `pid` started (unix seconds): its start in clock ticks after boot (`/proc/<pid>/stat`,
/// in USER_HZ, 100 on Linux) plus the boot time (`/proc/stat`).
fn process_start(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command's closing parenthesis start at field 3; the start time is field 22.
    let ticks: f64 = stat
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()?;
    let btime: f64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())?;
    Some(btime + ticks / 100.0)
}

/// A node's boot as it recorded it.
fn boot_of(view: &SimView, machine: &str, created: f64) -> Result<Boot, String> {
    let look = view
        .real_node(NS, machine)
        .ok_or_else(|| format!("{machine}: no real node runs"))?;
    let booted = process_start(look.init_pid).ok_or_else(|| format!("{machine}: no start time"))?;
    let run = |args: &[&str]| {
        tokio::task::block_in_place(|| sim::nspawn::exec_in(look.init_pid, args))
            .map_err(|e| format!("{machine}: {}: {e}", args.join(" ")))
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let mut journal = vec!["journalctl", "--no-pager", "-o", "short-unix"];
    for unit in JOURNAL_UNITS {
        journal.extend(["-u", unit]);
    }
    let journal = run(&journal)?;
    let status = run(&["cat", "/run/cloud-init/status.json"])?;
    boot_timeline::steps(&BootRecord {
        created,
        booted,
        status_json: &status,
        journal: &journal,
    })
    .map_err(|e| format!("{machine}: {e}"))
}

/// Prints each of `machines`' boot, and the median of each step per role.
fn print_boots(
    view: &SimView,
    looker: &Looker,
    watch: &EtcdWatch,
    watch_started: f64,
    machines: &[String],
) {
    let samples = watch.samples();
    let mut boots: Vec<(String, Boot)> = Vec::new();
    for machine in machines {
        let Some(created) = looker.created(machine) else {
            println!("{machine}: never seen appearing");
            continue;
        };
        let boot = match boot_of(view, machine, created) {
            Ok(boot) => boot,
            Err(e) => {
                println!("{e}");
                continue;
            }
        };
        let ready = looker.ready(machine).map(|r| r - created);
        println!();
        println!(
            "{machine} ({}): Node Ready {} after its Machine appeared; cloud-init done at {:.1} s; image import {}",
            boot.role.describe(),
            ready.map_or("never".into(), |r| format!("{r:.1} s")),
            boot.total(),
            boot.images.map_or("—".into(), |s| format!("{s:.1} s")),
        );
        for step in &boot.steps {
            println!("  {:>6.1} s  {}", step.seconds, step.what);
        }
        let member = member_timeline(&samples, machine);
        let at = |d: Option<Duration>| {
            d.map_or("—".to_owned(), |d| {
                format!("{:.1} s", watch_started + d.as_secs_f64() - created)
            })
        };
        if boot.role != Role::WorkerJoin {
            println!(
                "  etcd member (after the Machine appeared): added as a learner {}, started {}, promoted {}",
                at(member.added),
                at(member.started),
                at(member.promoted)
            );
        }
        boots.push((machine.clone(), boot));
    }
    let roles: BTreeSet<Role> = boots.iter().map(|(_, b)| b.role).collect();
    for role in roles {
        let of_role: Vec<&Boot> = boots
            .iter()
            .filter(|(_, b)| b.role == role)
            .map(|(_, b)| b)
            .collect();
        println!();
        println!("| {} (median of {}) | s |", role.describe(), of_role.len());
        println!("|---|---|");
        for step in boot_timeline::medians(&of_role) {
            println!("| {} | {:.1} |", step.what, step.seconds);
        }
    }
}

/// Each running node's memory, once settled.
fn print_memory(view: &SimView, machines: &[String]) {
    println!();
    println!("| node | memory | of it anonymous | of it page cache |");
    println!("|---|---|---|---|");
    for machine in machines {
        let Some(memory) = view.real_node(NS, machine).and_then(|l| l.memory) else {
            println!("| {machine} | — | — | — |");
            continue;
        };
        println!(
            "| {machine} | {:.0} MiB | {:.0} MiB | {:.0} MiB |",
            memory.total as f64 / MIB,
            memory.anonymous as f64 / MIB,
            memory.page_cache as f64 / MIB
        );
    }
}

async fn machine_names(env: &Env) -> Vec<String> {
    let mut machines: Vec<Machine> = env.machines(CLUSTER).await;
    // Control-plane machines first, each kind in the order it appeared.
    machines.sort_by_key(|m| {
        (
            !m.labels().contains_key(CONTROL_PLANE_LABEL),
            m.creation_timestamp().map(|t| t.0),
        )
    });
    machines.iter().map(ResourceExt::name_any).collect()
}

pub async fn run(rollouts: u32) {
    sim::nspawn::clean_up_after_dead_processes();
    let env = Env::start(&[]).await;
    let looker = Looker::start(env.client.clone());
    let started = Instant::now();
    let (watch, watch_started) = create_three(&env, Nodes::Real, &Target::Generation(1)).await;
    let watch_started = watch_started.as_duration().as_secs_f64();
    let deadline = Instant::now() + ROLLOUT_TIMEOUT;
    let machines = loop {
        let machines = machine_names(&env).await;
        if machines.len() == 3 + super::REAL_WORKERS as usize {
            break machines;
        }
        assert!(Instant::now() < deadline, "machines: {machines:?}");
        tokio::time::sleep(LOOK_EVERY).await;
    };
    looker.wait_ready(&env, &machines).await;
    println!(
        "3 + {} real nodes Ready in {:.1} s",
        super::REAL_WORKERS,
        started.elapsed().as_secs_f64()
    );
    tokio::time::sleep(SETTLE).await;
    let view = env.sim.view();
    print_memory(&view, &machines);
    print_boots(&view, &looker, &watch, watch_started, &machines);

    let mut results = Vec::new();
    let mut before: BTreeSet<String> = machines.into_iter().collect();
    for generation in 2..2 + rollouts {
        let r = roll(&env, Nodes::Real, &watch, 3, Target::Generation(generation)).await;
        println!(
            "\nrollout {} of 3 real control-plane nodes: {:.1} s, ratio {:.2}",
            results.len() + 1,
            r.wall.as_secs_f64(),
            r.ratio()
        );
        let now = machine_names(&env).await;
        let new: Vec<String> = now
            .iter()
            .filter(|m| !before.contains(*m))
            .cloned()
            .collect();
        looker.wait_ready(&env, &new).await;
        print_boots(&view, &looker, &watch, watch_started, &new);
        before = now.into_iter().collect();
        results.push(r);
    }
    print(&results);
    watch.assert_safe("bench-real");
}
