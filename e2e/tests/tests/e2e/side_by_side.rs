//! A replica of Cluster API's own kubeadm manager next to ours, for both managers, as during a switch
//! made by rolling a Deployment's image: both take the same Lease (Cluster API's name, one namespace),
//! exactly one leads at a time, a leader that dies is followed by the other within the Lease's
//! duration, and every step of the control plane makes one Machine.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use e2e_tests::Env;
use e2e_tests::env::NS;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kubeadm_api::cluster::v1beta2::Machine;
use testenv::capi::Part;

use crate::scenarios::{step_timeout, stop_and_check_nothing_is_left, vars};

const CLUSTER: &str = "pair";
const KCP: &str = "pair-control-plane";
/// Cluster API's Lease names, which ours take too.
const LEASES: [&str; 2] = [
    "kubeadm-bootstrap-manager-leader-election-capi",
    "kubeadm-control-plane-manager-leader-election-capi",
];
/// One side's leader-election timing: the claim it writes into the Lease, how often its leader renews
/// it, and how often a candidate looks at it (client-go adds up to a fifth to its 5 s).
struct Timing {
    lease: Duration,
    renew_every: Duration,
    look_every: Duration,
}

const OURS: Timing = Timing {
    lease: Duration::from_secs(15),
    renew_every: Duration::from_secs(2),
    look_every: Duration::from_secs(2),
};
const THEIRS: Timing = Timing {
    lease: Duration::from_secs(60),
    renew_every: Duration::from_secs(5),
    look_every: Duration::from_secs(6),
};

/// The longest a candidate of `follower`'s kind may take to follow a leader of `dead`'s kind killed
/// without a word: the dead leader renewed up to one interval before it died, the candidate saw that
/// renewal up to one look later, waits the claim out, and takes the Lease at its next look; plus 5 s
/// for API calls on a loaded machine.
fn takeover_bound(dead: &Timing, follower: &Timing) -> Duration {
    dead.renew_every
        + follower.look_every
        + dead.lease
        + follower.look_every
        + Duration::from_secs(5)
}

/// The holder of each of [`LEASES`] (`None` for a Lease not there or held by nobody).
async fn holders(client: &kube::Client) -> [Option<String>; 2] {
    let api: Api<Lease> = Api::namespaced(client.clone(), NS);
    let mut holders = [None, None];
    for (holder, name) in holders.iter_mut().zip(LEASES) {
        *holder = api
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty());
    }
    holders
}

/// Every holder each Lease had while the returned task runs, in order, and every Machine of the
/// cluster listed: (name, whether it is a control-plane machine).
#[derive(Default)]
struct Record {
    holders: [Vec<String>; 2],
    machines: BTreeSet<(String, bool)>,
}

fn record(client: kube::Client) -> (Arc<Mutex<Record>>, tokio::task::JoinHandle<()>) {
    let record = Arc::new(Mutex::new(Record::default()));
    let shared = record.clone();
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    let params = ListParams::default().labels(&format!("cluster.x-k8s.io/cluster-name={CLUSTER}"));
    let task = tokio::spawn(async move {
        loop {
            let now = holders(&client).await;
            let listed = machines.list(&params).await;
            {
                let mut record = shared.lock().unwrap_or_else(PoisonError::into_inner);
                for (seen, holder) in record.holders.iter_mut().zip(now) {
                    if let Some(holder) = holder
                        && seen.last() != Some(&holder)
                    {
                        seen.push(holder);
                    }
                }
                if let Ok(list) = listed {
                    record.machines.extend(list.items.iter().map(|m| {
                        let control_plane =
                            m.labels().contains_key("cluster.x-k8s.io/control-plane");
                        (m.name_any(), control_plane)
                    }));
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    (record, task)
}

/// Waits until neither Lease is held by anyone in `old`; returns the new holders and how long it took.
async fn wait_taken_over(
    env: &Env,
    old: &[Option<String>; 2],
    within: Duration,
) -> ([String; 2], Duration) {
    let started = Instant::now();
    loop {
        let now = holders(&env.client).await;
        if let [Some(bootstrap), Some(controlplane)] = &now
            && Some(bootstrap) != old[0].as_ref()
            && Some(controlplane) != old[1].as_ref()
        {
            return ([bootstrap.clone(), controlplane.clone()], started.elapsed());
        }
        assert!(
            started.elapsed() < within,
            "the Leases were not taken over within {within:?}: {old:?} → {now:?}\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Whether a Cluster API manager's log says it took its Lease.
fn go_led(log: &str) -> bool {
    log.to_lowercase().contains("successfully acquired lease")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn go_and_rust_replicas_of_each_manager_lead_one_at_a_time_and_follow_a_dead_leader() {
    let started = Instant::now();
    let mut env = Env::start_leader_elected().await;
    let ours = wait_taken_over(&env, &[None, None], Duration::from_secs(30))
        .await
        .0;
    let release = testenv::capi::ClusterApi::find().unwrap_or_else(|e| panic!("{e}"));
    let mut go = Vec::new();
    for part in [Part::KubeadmBootstrap, Part::KubeadmControlPlane] {
        go.push(
            testenv::capi::start_replica(&env.plane, &release, part, NS, &[])
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", part.binary())),
        );
    }
    let mut pids: BTreeSet<u32> = env.pids().into_iter().collect();
    pids.extend(go.iter().map(|m| m.pid()));
    let (seen, recorder) = record(env.client.clone());

    // Ours lead: a cluster of 1 + 1, then 3 control-plane machines.
    env.apply_template(&vars(CLUSTER, 1, 1)).await;
    env.wait_control_plane(KCP, 1, step_timeout(), "ours: create 1")
        .await;
    env.scale_control_plane(KCP, 3).await;
    env.wait_control_plane(KCP, 3, step_timeout(), "ours: 1 → 3")
        .await;
    for replica in &go {
        assert!(
            !go_led(&replica.log()),
            "{} led while ours held the Lease",
            replica.name()
        );
    }
    println!("ours led create 1 and 1 → 3: {:.1?}", started.elapsed());

    // Ours die without a word: Cluster API's replicas follow once our claims run out; ours come back
    // as Deployments bring them back, and wait.
    for manager in &mut env.managers {
        manager.kill().await.unwrap_or_else(|e| panic!("{e}"));
    }
    let old = ours.clone().map(Some);
    let (theirs, took) = wait_taken_over(&env, &old, takeover_bound(&OURS, &THEIRS)).await;
    println!("Cluster API's replicas took over {took:.1?} after ours died");
    let crds = env.crds.clone();
    // A manager's log goes on in the same file when it starts again: what it logs from here on.
    let logged_before: Vec<usize> = env.managers.iter().map(|m| m.process.log().len()).collect();
    for manager in &mut env.managers {
        pids.insert(
            manager
                .restart(&env.plane, &crds)
                .await
                .unwrap_or_else(|e| panic!("{e}")),
        );
    }
    env.scale_control_plane(KCP, 5).await;
    env.wait_control_plane(KCP, 5, step_timeout(), "Cluster API: 3 → 5")
        .await;
    for (manager, before) in env.managers.iter().zip(logged_before) {
        let log = manager.process.log().split_off(before);
        assert!(
            !log.contains("became leader"),
            "{} led while Cluster API's replica held the Lease:\n{log}",
            manager.name()
        );
    }

    // Theirs die: ours follow within Cluster API's Lease duration and scale back to 3.
    for replica in &mut go {
        replica.process().kill();
    }
    let old = theirs.clone().map(Some);
    let (again, took) = wait_taken_over(&env, &old, takeover_bound(&THEIRS, &OURS)).await;
    println!("ours took over {took:.1?} after Cluster API's replicas died");
    env.scale_control_plane(KCP, 3).await;
    env.wait_control_plane(KCP, 3, step_timeout(), "ours: 5 → 3")
        .await;

    recorder.abort();
    let record = std::mem::take(&mut *seen.lock().unwrap_or_else(PoisonError::into_inner));
    for (index, lease) in LEASES.iter().enumerate() {
        assert_eq!(
            record.holders[index],
            [
                ours[index].clone(),
                theirs[index].clone(),
                again[index].clone()
            ],
            "{lease} changed hands other than ours → theirs → ours"
        );
    }
    // One Machine per step: 1, then 2 more, then 2 more control-plane machines, and the worker.
    let control_planes = record.machines.iter().filter(|(_, cp)| *cp).count();
    assert_eq!(
        (control_planes, record.machines.len()),
        (5, 6),
        "Machines: {:?}",
        record.machines
    );
    drop(go);
    stop_and_check_nothing_is_left(env, pids).await;
    println!(
        "scenario Go and Rust replicas side by side: {:.1?} wall time",
        started.elapsed()
    );
}
