//! End-to-end scenarios on simulated infrastructure: the management plane, both managers as processes
//! with their webhooks, and machines that boot real etcd members and kube-apiservers from the bootstrap
//! data the providers render. The cluster comes from `templates/cluster-template-sim.yaml`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use e2e_tests::Env;
use e2e_tests::env::{NS, wait_gone};
use e2e_tests::etcd_watch::EtcdWatch;
use e2e_tests::replacements::Replacements;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use kubeadm_api::cluster::v1beta2::{Machine, MachineDeployment};

/// Bound on one scaling step: each join takes an etcd learner, its promotion and an apiserver start.
/// `E2E_STEP_TIMEOUT` (seconds) stretches or shortens it.
pub(crate) fn step_timeout() -> Duration {
    std::env::var("E2E_STEP_TIMEOUT")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(300))
}
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_millis(250);

pub(crate) fn vars(
    cluster: &str,
    control_planes: u32,
    workers: u32,
) -> BTreeMap<&'static str, String> {
    [
        ("CLUSTER_NAME", cluster.to_owned()),
        ("CONTROL_PLANE_MACHINE_COUNT", control_planes.to_string()),
        ("WORKER_MACHINE_COUNT", workers.to_string()),
    ]
    .into()
}

pub(crate) async fn control_plane_machine_names(env: &Env, cluster: &str) -> Vec<String> {
    env.machines(cluster)
        .await
        .into_iter()
        .filter(|m| m.labels().contains_key("cluster.x-k8s.io/control-plane"))
        .map(|m| m.name_any())
        .collect()
}

/// Selects the control-plane Machines of `cluster`.
pub(crate) fn control_planes_of(cluster: &str) -> ListParams {
    ListParams::default().labels(&format!(
        "cluster.x-k8s.io/cluster-name={cluster},cluster.x-k8s.io/control-plane"
    ))
}

/// Waits until a control-plane Machine matches `moment`, tolerating a management plane that does not
/// answer; panics after the step timeout.
pub(crate) async fn wait_for(
    env: &Env,
    cluster: &str,
    what: &str,
    moment: impl Fn(&[Machine]) -> bool,
) {
    let api: Api<Machine> = Api::namespaced(env.client.clone(), NS);
    let params = control_planes_of(cluster);
    let deadline = Instant::now() + step_timeout();
    loop {
        if let Ok(list) = api.list(&params).await
            && moment(&list.items)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "never saw {what}\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Nodes imitate kubeadm because that was asked for: `SIM_KUBEADM=imitate` or the fallback releases.
fn imitation_asked() -> bool {
    std::env::var("SIM_KUBEADM").is_ok_and(|v| v == "imitate")
        || std::env::var("TESTENV_MANAGEMENT").is_ok_and(|v| v == "legacy")
}

/// Every control-plane node runs etcd and kube-apiserver from the manifests kubeadm wrote: their mirror
/// pods in the workload cluster carry kubeadm's KEP-2506 annotations and our patches' machine annotation,
/// and each running process has the command line of its manifest (paths under the node's root folder).
async fn assert_static_pods_come_from_kubeadm(env: &Env, cluster: &str) {
    use k8s_openapi::api::core::v1::{Pod, Secret};
    use kubeadm_api::meta::MACHINE_ANNOTATION;
    assert!(
        env.sim.real_kubeadm(),
        "the nodes imitate kubeadm: this machine cannot create network namespaces or the current \
         kubeadm is not built (the simulator's log says which)"
    );
    let kubeconfig = Api::<Secret>::namespaced(env.client.clone(), NS)
        .get(&format!("{cluster}-kubeconfig"))
        .await
        .unwrap();
    let kubeconfig = String::from_utf8(kubeconfig.data.unwrap()["value"].0.clone()).unwrap();
    let workload = testenv::apiserver::client_from_kubeconfig(&kubeconfig)
        .await
        .unwrap();
    let pods = Api::<Pod>::namespaced(workload, "kube-system");
    let machines = control_plane_machine_names(env, cluster).await;
    let nodes: Vec<_> = env
        .sim
        .nodes()
        .into_iter()
        .filter(|n| n.control_plane && machines.contains(&n.machine))
        .collect();
    assert_eq!(
        nodes.len(),
        machines.len(),
        "every control-plane machine runs"
    );
    for node in nodes {
        for (component, kubeadm_annotation, flag) in [
            (
                "etcd",
                "kubeadm.kubernetes.io/etcd.advertise-client-urls",
                "--advertise-client-urls",
            ),
            (
                "kube-apiserver",
                "kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint",
                "--advertise-address",
            ),
        ] {
            let pod = pods
                .get(&format!("{component}-{}", node.node))
                .await
                .unwrap();
            let annotations = pod.metadata.annotations.clone().unwrap_or_default();
            let announced = annotations
                .get(kubeadm_annotation)
                .unwrap_or_else(|| panic!("{component} of {}: no {kubeadm_annotation}", node.node));
            assert_eq!(
                annotations.get(MACHINE_ANNOTATION),
                Some(&node.machine),
                "{component} of {}: our patch's annotation",
                node.node
            );
            let command = pod.spec.unwrap().containers[0].command.clone().unwrap();
            assert_eq!(command[0], component, "{component}: kubeadm's command");
            // The process runs the manifest's flags (the advertised address is in both).
            let address = announced
                .trim_start_matches("https://")
                .rsplit_once(':')
                .unwrap()
                .0
                .to_owned();
            let running = node.pids.iter().any(|pid| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                cmdline.contains(&format!("{flag}="))
                    && cmdline.contains(&address)
                    && command
                        .iter()
                        .any(|c| c.starts_with(flag) && cmdline.contains(c.as_str()))
            });
            assert!(
                running,
                "{component} of {} runs its manifest's {flag}",
                node.node
            );
        }
    }
}

/// Every sample had quorum and at most one learner, and the watch was never blind for long (see
/// [`EtcdWatch::check`]); the number of samples.
pub(crate) fn assert_membership_was_safe(watch: &EtcdWatch, what: &str) -> usize {
    watch.assert_safe(what)
}

async fn membership_events(env: &Env, action: &str) -> usize {
    membership_event_notes(env, action).await.len()
}

/// The notes of the etcd membership Events with this action.
async fn membership_event_notes(env: &Env, action: &str) -> Vec<String> {
    event_notes(env, "EtcdMembershipChanged", Some(action)).await
}

/// The notes of the Events with this reason (and action, when given).
pub(crate) async fn event_notes(env: &Env, reason: &str, action: Option<&str>) -> Vec<String> {
    Api::<Event>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && action.is_none_or(|a| e.action.as_deref() == Some(a))
        })
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

pub(crate) async fn stop_and_check_nothing_is_left(mut env: Env, mut pids: BTreeSet<u32>) {
    env.assert_no_manager_exited();
    env.assert_no_secrets_logged().await;
    pids.extend(env.pids());
    drop(env);
    let pids: Vec<u32> = pids.into_iter().collect();
    let alive = wait_gone(&pids, Duration::from_secs(30)).await;
    assert!(
        alive.is_empty(),
        "processes still running after the scenario: {alive:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn control_plane_grows_1_3_5_and_shrinks_to_3_with_one_learner_at_a_time() {
    let started = Instant::now();
    let cluster = "scale";
    let kcp = "scale-control-plane";
    let env = Env::start(&[]).await;
    let watch = apply_watched(&env, cluster, 1, 1).await;
    let mut pids = BTreeSet::new();
    let mut joined_as_learner: BTreeMap<String, Option<u64>> = BTreeMap::new();
    for (replicas, what) in [(1, "create 1"), (3, "1 → 3"), (5, "3 → 5"), (3, "5 → 3")] {
        let step = Instant::now();
        if what != "create 1" {
            env.scale_control_plane(kcp, replicas).await;
        }
        env.wait_control_plane(kcp, replicas, step_timeout(), what)
            .await;
        let names = control_plane_machine_names(&env, cluster).await;
        watch
            .wait_voters(names, Duration::from_secs(60), what)
            .await;
        for node in env.sim.nodes().into_iter().filter(|n| n.control_plane) {
            joined_as_learner.insert(node.machine, node.joined_as_learner);
        }
        pids.extend(env.pids());
        println!("{what}: {:.1?}", step.elapsed());
    }
    let samples = assert_membership_was_safe(&watch, "1 → 3 → 5 → 3");
    assert_machines_ready_through_our_gates(&env, cluster).await;
    if !imitation_asked() {
        assert_static_pods_come_from_kubeadm(&env, cluster).await;
    }
    let learners = joined_as_learner.values().filter(|id| id.is_some()).count();
    assert_eq!(
        joined_as_learner.len(),
        5,
        "five control-plane nodes ran: {joined_as_learner:?}"
    );
    assert_eq!(
        learners, 4,
        "every join but the first node's came in as a learner: {joined_as_learner:?}"
    );
    assert_eq!(
        membership_events(&env, "RemoveMember").await,
        2,
        "5 → 3 removed two members"
    );

    // The worker joined through the control-plane endpoint.
    let md = Api::<MachineDeployment>::namespaced(env.client.clone(), NS)
        .get("scale-md-0")
        .await
        .unwrap();
    let ready = md.status.as_ref().and_then(|s| s.ready_replicas);
    assert_eq!(ready, Some(1), "worker status: {:?}", md.status);

    drop(watch);
    stop_and_check_nothing_is_left(env, pids).await;
    println!(
        "scenario 1 → 3 → 5 → 3: {:.1?} wall time, {samples} membership samples",
        started.elapsed()
    );
}

/// Every control-plane Machine is Ready by Cluster API's core manager, which waits for the readiness
/// gates the control plane set: the conditions it reports itself, `UpToDate` with them.
async fn assert_machines_ready_through_our_gates(env: &Env, cluster: &str) {
    let gates = [
        "NodeKubeadmLabelsAndTaintsSet",
        "APIServerPodHealthy",
        "ControllerManagerPodHealthy",
        "SchedulerPodHealthy",
        "EtcdPodHealthy",
        "EtcdMemberHealthy",
    ];
    let machines = env.machines(cluster).await;
    let control_planes = machines
        .iter()
        .filter(|m| m.labels().contains_key("cluster.x-k8s.io/control-plane"));
    for machine in control_planes {
        let name = machine.name_any();
        let on_machine: Vec<&str> = machine
            .spec
            .readiness_gates
            .iter()
            .map(|g| g.condition_type.as_str())
            .collect();
        assert_eq!(on_machine, gates, "{name}: readiness gates");
        let conditions = &machine.status.as_ref().expect("status").conditions;
        for type_ in gates.iter().chain(&["UpToDate", "Ready"]) {
            let condition = conditions.iter().find(|c| c.type_ == *type_);
            assert!(
                condition.is_some_and(|c| c.status == "True"),
                "{name}: {type_} is {condition:?}"
            );
        }
    }
}

/// Kubernetes 1.30 is the newest release the renderer writes kubeadm API v1beta3 for: every node's
/// configuration is read by kubeadm 1.30 before it boots (a refusal fails the machine), the control
/// plane grows to three members through learners and the worker joins through the endpoint. The
/// controller reaches etcd as it does by default in a real cluster: through `pods/portforward`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kubernetes_1_30_cluster_boots_from_v1beta3_configurations_kubeadm_1_30_accepts() {
    use k8s_openapi::api::core::v1::Secret;
    use kubeadm_api::cluster::v1beta2::Machine;
    let cluster = "old";
    let kcp = "old-control-plane";
    // etcd through the workload API server's pods/portforward and the node's kubelet endpoint, the
    // controller's default, where nodes have one (real kubeadm in network namespaces).
    let access: &[&str] = if imitation_asked() {
        &[]
    } else {
        &["--etcd-access=port-forward"]
    };
    let env = Env::start(access).await;
    let mut vars = vars(cluster, 3, 1);
    vars.insert("KUBERNETES_VERSION", "v1.30.14".into());
    env.apply_template(&vars).await;
    env.wait_control_plane(kcp, 3, step_timeout(), "create 3")
        .await;
    let machines = Api::<Machine>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default().labels(&format!("cluster.x-k8s.io/cluster-name={cluster}")))
        .await
        .unwrap();
    let secrets = Api::<Secret>::namespaced(env.client.clone(), NS);
    let mut kinds = BTreeSet::new();
    for machine in &machines.items {
        let name = machine.spec.bootstrap.data_secret_name.clone();
        let name = name.unwrap_or_else(|| panic!("{}: no bootstrap data", machine.name_any()));
        let secret = secrets.get(&name).await.unwrap();
        let data = String::from_utf8(secret.data.unwrap()["value"].0.clone()).unwrap();
        assert!(
            data.contains("apiVersion: kubeadm.k8s.io/v1beta3")
                && !data.contains("kubeadm.k8s.io/v1beta4"),
            "{name}: the bootstrap data of a 1.30 machine is kubeadm API v1beta3:\n{data}"
        );
        for kind in ["InitConfiguration", "JoinConfiguration"] {
            if data.contains(&format!("kind: {kind}")) {
                kinds.insert(kind);
            }
        }
    }
    assert_eq!(kinds.len(), 2, "an init and joins were rendered: {kinds:?}");
    if !imitation_asked() {
        assert_static_pods_come_from_kubeadm(&env, cluster).await;
    }
    let learners = env
        .sim
        .nodes()
        .into_iter()
        .filter(|n| n.control_plane && n.joined_as_learner.is_some())
        .count();
    assert_eq!(
        learners, 2,
        "every join after the init came in as a learner"
    );
    // The worker joined through the control-plane endpoint.
    let deployments = Api::<MachineDeployment>::namespaced(env.client.clone(), NS);
    let deadline = Instant::now() + step_timeout();
    loop {
        let md = deployments.get("old-md-0").await.unwrap();
        if md.status.as_ref().and_then(|s| s.ready_replicas) == Some(1) {
            break;
        }
        assert!(Instant::now() < deadline, "worker status: {:?}", md.status);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let pids = env.pids().into_iter().collect();
    stop_and_check_nothing_is_left(env, pids).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_learner_that_never_starts_is_removed_and_its_machine_remediated() {
    let started = Instant::now();
    let cluster = "faulty";
    let kcp = "faulty-control-plane";
    let env = Env::start(&["--etcd-unstarted-grace", "20s"]).await;
    let watch = apply_watched(&env, cluster, 1, 0).await;
    env.wait_control_plane(kcp, 1, step_timeout(), "create 1")
        .await;
    let mut pids: BTreeSet<u32> = env.pids().into_iter().collect();

    // The next control-plane join adds its learner, then its etcd never starts.
    let sim_clusters: Api<kube::api::DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        NS,
        &kube::api::ApiResource::erase::<sim::api::SimCluster>(&()),
    );
    let arm = serde_json::json!({ "metadata": { "annotations": { sim::faults::NEXT_JOIN_FAULT_ANNOTATION: "etcd-never-starts" } } });
    sim_clusters
        .patch(cluster, &PatchParams::default(), &Patch::Merge(&arm))
        .await
        .unwrap();
    env.scale_control_plane(kcp, 3).await;

    // The control plane removes the member that never started, marks its Machine and remediates it.
    let remediated = wait_remediated(&env, cluster, &mut pids).await;
    let unstarted_seen = watch.samples().iter().any(|s| {
        s.members
            .iter()
            .any(|(name, learner)| *learner && name.is_empty())
    });
    assert!(
        unstarted_seen,
        "the learner that never started was never seen in the member list"
    );

    env.wait_control_plane(kcp, 3, step_timeout(), "replaced")
        .await;
    let names = control_plane_machine_names(&env, cluster).await;
    assert!(
        remediated.iter().all(|r| !names.contains(r)),
        "{remediated:?} still among {names:?}"
    );
    watch
        .wait_voters(names, Duration::from_secs(60), "replaced")
        .await;
    pids.extend(env.pids());
    let samples = assert_membership_was_safe(&watch, "faulty joiner");
    assert_eq!(membership_events(&env, "RemoveUnstartedMember").await, 1);

    drop(watch);
    stop_and_check_nothing_is_left(env, pids).await;
    println!(
        "scenario faulty joiner: {:.1?} wall time, {samples} membership samples, remediated {remediated:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bumping_the_generation_counters_rolls_both_groups_one_machine_at_a_time() {
    let started = Instant::now();
    let cluster = "roll";
    let kcp = "roll-control-plane";
    let generation_label = "controlplane.cluster.x-k8s.io/machine-generation";
    let mut env = Env::start(&[]).await;
    let watch = apply_watched(&env, cluster, 3, 1).await;
    env.wait_control_plane(kcp, 3, step_timeout(), "create 3")
        .await;
    let first = control_plane_machine_names(&env, cluster).await;
    watch
        .wait_voters(first.clone(), Duration::from_secs(60), "create 3")
        .await;
    let mut pids: BTreeSet<u32> = env.pids().into_iter().collect();
    println!("create 3 + 1 worker: {:.1?}", started.elapsed());

    // Re-applying the template with bumped counters is the whole user action, as with SCS.
    let workload = e2e_tests::api_probe::workload_client(&env.client, NS, cluster)
        .await
        .unwrap();
    let probe = e2e_tests::api_probe::ApiProbe::start(workload, SAMPLE_EVERY);
    // As in production, a machine whose bootstrap fails (kubeadm gives up on an API call that timed
    // out on a loaded machine) is replaced through a health check, not waited on forever; below, every
    // machine it marked must be one whose boot failed. Three minutes: under the whole test suite a join
    // has taken close to one.
    env.apply(&format!(
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: MachineHealthCheck\nmetadata:\n  name: {kcp}\n\
         spec:\n  clusterName: {cluster}\n  selector:\n    matchLabels:\n      cluster.x-k8s.io/control-plane: \"\"\n\
         \x20 checks:\n    nodeStartupTimeoutSeconds: 180\n"
    ))
    .await;
    let mut marked = BTreeSet::new();
    let mut bumped = vars(cluster, 3, 1);
    bumped.insert("CONTROL_PLANE_MACHINE_GEN", "genc02".into());
    bumped.insert("WORKER_MACHINE_GEN", "genw02".into());
    let predicted = preview_rollout(&env, kcp, &bumped, &first);
    let mut deleted_in_order: Vec<String> = Vec::new();
    let before_roll: Vec<String> = env
        .machines(cluster)
        .await
        .iter()
        .map(|m| m.name_any())
        .collect();
    let mut replacements = Replacements::new();
    let roll = Instant::now();
    env.apply_template(&bumped).await;
    let deadline = Instant::now() + step_timeout() * 2;
    loop {
        let machines = env.machines(cluster).await;
        replacements.saw(machines.iter().map(|m| m.name_any()));
        let control_planes: Vec<_> = machines
            .iter()
            .filter(|m| m.labels().contains_key("cluster.x-k8s.io/control-plane"))
            .collect();
        for m in &control_planes {
            let name = m.name_any();
            if m.meta().deletion_timestamp.is_some()
                && first.contains(&name)
                && !deleted_in_order.contains(&name)
            {
                deleted_in_order.push(name);
            }
        }
        // A leaving machine's Node goes before the Machine does, which the health check reports too.
        marked.extend(
            control_planes
                .iter()
                .filter(|m| m.meta().deletion_timestamp.is_none() && health_check_failed(m))
                .map(|m| m.name_any()),
        );
        let rolled = control_planes.len() == 3
            && control_planes.iter().all(|m| {
                m.labels().get(generation_label).map(String::as_str) == Some("genc02")
                    && m.status.as_ref().is_some_and(|s| s.node_ref.is_some())
                    && m.meta().deletion_timestamp.is_none()
            });
        let md = Api::<MachineDeployment>::namespaced(env.client.clone(), NS)
            .get("roll-md-0")
            .await
            .unwrap();
        let workers: Vec<_> = machines
            .iter()
            .filter(|m| !m.labels().contains_key("cluster.x-k8s.io/control-plane"))
            .collect();
        let workers_rolled = workers.len() == 1
            && workers[0].meta().deletion_timestamp.is_none()
            && workers[0]
                .status
                .as_ref()
                .is_some_and(|s| s.node_ref.is_some())
            && md.status.as_ref().and_then(|s| s.up_to_date_replicas) == Some(1)
            && md.status.as_ref().and_then(|s| s.replicas) == Some(1);
        pids.extend(env.pids());
        if rolled && workers_rolled {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "rollout did not finish: {:?}\n{}",
            machines
                .iter()
                .map(|m| (
                    m.name_any(),
                    m.labels().get(generation_label).cloned(),
                    m.meta().deletion_timestamp.is_some()
                ))
                .collect::<Vec<_>>(),
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    env.wait_control_plane(kcp, 3, step_timeout(), "rolled")
        .await;
    let rolled = control_plane_machine_names(&env, cluster).await;
    assert!(
        rolled.iter().all(|m| !first.contains(m)),
        "{first:?} → {rolled:?}"
    );
    watch
        .wait_voters(rolled, Duration::from_secs(60), "rolled")
        .await;
    println!(
        "rollout genc01 → genc02, genw01 → genw02: {:.1?}",
        roll.elapsed()
    );
    assert_eq!(
        deleted_in_order, predicted,
        "the old machines went in another order than `plan` said"
    );
    let samples = assert_membership_was_safe(&watch, "generation rollout");
    let failed_boots = env.sim.view().failed_boots();
    // A joiner that broke after kubeadm added its learner loses that member too.
    let removed = membership_event_notes(&env, "RemoveMember").await;
    assert_eq!(
        removed
            .iter()
            .filter(|note| first.iter().any(|m| note.contains(m.as_str())))
            .count(),
        3,
        "each old member removed before its machine: {removed:?}"
    );
    assert!(
        removed.iter().all(|note| first
            .iter()
            .chain(failed_boots.iter().map(|(_, m, _)| m))
            .any(|m| note.contains(m.as_str()))),
        "a member removed that was neither old nor a broken joiner's: {removed:?}"
    );
    println!(
        "boots failed during the rollout: {failed_boots:?}; replaced by the health check: {marked:?}"
    );
    assert!(
        marked
            .iter()
            .all(|m| failed_boots.iter().any(|(_, failed, _)| failed == m)),
        "the health check marked a machine whose boot did not fail: {marked:?}, failed boots {failed_boots:?}"
    );
    assert!(
        failed_boots.len() <= 1,
        "more than one boot failed: {failed_boots:?}"
    );
    // Only the old machines went, and a joiner whose boot failed (replaced through the health check).
    let now: Vec<String> = env
        .machines(cluster)
        .await
        .iter()
        .map(|m| m.name_any())
        .collect();
    if let Err(e) = replacements.check("generation rollout", &now, |n| {
        before_roll.iter().any(|m| m == n) || failed_boots.iter().any(|(_, m, _)| m == n)
    }) {
        panic!("{e}\n{}", env.diagnostics().await);
    }
    let (answered, failed, outage) = probe.summary();
    println!(
        "workload API during the rollout: {answered} answers, {failed} failures, longest outage {outage:.1?}; {:.1?} per replaced control-plane machine",
        roll.elapsed() / 3
    );
    assert!(
        answered > 0 && outage < Duration::from_secs(5),
        "the workload API server was unreachable for {outage:?} ({failed} failed calls)"
    );
    drop(probe);
    for (manager, kib) in env.manager_peak_memory() {
        println!("peak memory of {manager}: {} MiB", kib / 1024);
    }

    // Re-applying unchanged settings changes nothing. The newest machine's status still settles for a
    // few seconds after it joined (Cluster API's conditions, ours): wait for quiet first.
    let before = settled_machines(&env, cluster).await;
    let kcp_generation = env.kcp(kcp).await.metadata.generation;
    env.apply_template(&bumped).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = env.machines(cluster).await;
    // Controllers keep refining the Machines' status conditions (core Cluster API's among them), so
    // only what a re-apply could change counts: which Machines exist, their metadata and spec.
    let (touched, status_only): (Vec<_>, Vec<_>) = changed_machines(&before, &after)
        .into_iter()
        .partition(|(_, fields)| fields.iter().any(|f| !f.starts_with("status.")));
    if !status_only.is_empty() {
        println!("status updates while re-applying (not counted): {status_only:?}");
    }
    assert!(
        touched.is_empty(),
        "re-applying unchanged settings touched machines: {touched:?}"
    );
    assert_eq!(env.kcp(kcp).await.metadata.generation, kcp_generation);

    drop(watch);
    stop_and_check_nothing_is_left(env, pids).await;
    println!(
        "scenario generation rollout: {:.1?} wall time, {samples} membership samples",
        started.elapsed()
    );
}

/// Runs `controlplane-manager plan -f` on the template rendered with `bumped`, as a user would before
/// applying it, checks what it says about the machines in `first`, and returns the old machines in the
/// order it says they go.
fn preview_rollout(
    env: &Env,
    kcp: &str,
    bumped: &BTreeMap<&str, String>,
    first: &[String],
) -> Vec<String> {
    let file = env.plane.dir().join("bumped-cluster.yaml");
    std::fs::write(&file, e2e_tests::env::render_sim_template(bumped)).unwrap();
    let binary = e2e_tests::env::manager_binary("controlplane-manager", "CONTROLPLANE_MANAGER");
    let output = std::process::Command::new(binary)
        .arg("plan")
        .arg("--kubeconfig")
        .arg(env.plane.kubeconfig_path())
        .args(["-n", NS, kcp, "-f"])
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    println!("{text}");
    assert!(
        output.status.success(),
        "plan failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.contains("Blocked now: nothing"), "{text}");
    assert!(!text.contains("The webhook would"), "{text}");
    for machine in first {
        assert!(
            text.contains(&format!(
                "  {machine}:\n    * infrastructure template roll-control-plane-genc01, \
                 roll-control-plane-genc02 required"
            )),
            "{machine} is not outdated by the template: {text}"
        );
    }
    // `  2. delete <machine> (rollout): …`
    let order: Vec<String> = text
        .lines()
        .filter_map(|line| line.trim_start().split_once(". delete "))
        .filter_map(|(_, rest)| rest.split_once(' ').map(|(name, _)| name.to_owned()))
        .collect();
    assert_eq!(order.len(), first.len(), "{text}");
    order
}

/// Waits until `count` faults were applied to booting machines; returns them.
async fn wait_applied(env: &Env, count: usize) -> Vec<(String, String, sim::faults::Fault)> {
    let deadline = Instant::now() + step_timeout();
    loop {
        let applied = env.sim.view().applied_faults();
        if applied.len() >= count {
            return applied;
        }
        assert!(
            Instant::now() < deadline,
            "only {applied:?} applied\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until a Machine the control plane marked for remediation is gone; returns the names of the
/// marked Machines that went.
async fn wait_remediated(env: &Env, cluster: &str, pids: &mut BTreeSet<u32>) -> Vec<String> {
    let deadline = Instant::now() + step_timeout();
    let mut marked = BTreeSet::new();
    loop {
        let machines = env.machines(cluster).await;
        for m in &machines {
            if m.annotations()
                .contains_key("cluster.x-k8s.io/remediate-machine")
            {
                marked.insert(m.name_any());
            }
        }
        let present: BTreeSet<String> = machines.iter().map(|m| m.name_any()).collect();
        let gone: Vec<String> = marked.difference(&present).cloned().collect();
        pids.extend(env.pids());
        if !gone.is_empty() {
            return gone;
        }
        assert!(
            Instant::now() < deadline,
            "no marked machine was remediated (marked: {marked:?})\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The cluster's Machines once none changed for 3 s (at most a minute).
async fn settled_machines(env: &Env, cluster: &str) -> Vec<kubeadm_api::cluster::v1beta2::Machine> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = env.machines(cluster).await;
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = env.machines(cluster).await;
        let changed = changed_machines(&last, &now);
        if changed.is_empty() {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "machines kept changing: {changed:?}"
        );
        last = now;
    }
}

/// The machines that differ between two listings, each with the fields that changed (`metadata` and
/// `status` one level deep), or that appear in only one.
fn changed_machines(
    before: &[kubeadm_api::cluster::v1beta2::Machine],
    after: &[kubeadm_api::cluster::v1beta2::Machine],
) -> Vec<(String, Vec<String>)> {
    let json = |m: &kubeadm_api::cluster::v1beta2::Machine| {
        let mut v = serde_json::to_value(m).unwrap();
        v["metadata"]["managedFields"] = serde_json::Value::Null;
        v
    };
    let by_name =
        |ms: &[kubeadm_api::cluster::v1beta2::Machine]| -> BTreeMap<String, serde_json::Value> {
            ms.iter().map(|m| (m.name_any(), json(m))).collect()
        };
    let (a, b) = (by_name(before), by_name(after));
    let names: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    names
        .into_iter()
        .filter_map(|name| {
            let (Some(x), Some(y)) = (a.get(name), b.get(name)) else {
                return Some((name.clone(), vec!["(added or removed)".to_owned()]));
            };
            if x["metadata"]["resourceVersion"] == y["metadata"]["resourceVersion"] {
                return None;
            }
            let mut fields = Vec::new();
            for top in ["metadata", "spec", "status"] {
                let keys: BTreeSet<&String> = x[top]
                    .as_object()
                    .into_iter()
                    .chain(y[top].as_object())
                    .flat_map(|o| o.keys())
                    .collect();
                fields.extend(
                    keys.into_iter()
                        .filter(|k| k.as_str() != "resourceVersion" && x[top][k] != y[top][k])
                        .map(|k| format!("{top}.{k}")),
                );
            }
            Some((name.clone(), fields))
        })
        .collect()
}

/// Whether a MachineHealthCheck marked the machine unhealthy (`HealthCheckSucceeded` False).
fn health_check_failed(machine: &kubeadm_api::cluster::v1beta2::Machine) -> bool {
    machine.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "HealthCheckSucceeded" && c.status == "False")
    })
}

/// Waits until a MachineHealthCheck marked `machine` unhealthy (`HealthCheckSucceeded` False) and the
/// Machine is gone.
async fn wait_health_check_remediated(
    env: &Env,
    cluster: &str,
    machine: &str,
    pids: &mut BTreeSet<u32>,
) {
    let deadline = Instant::now() + step_timeout();
    let mut marked = false;
    loop {
        let machines = env.machines(cluster).await;
        let current = machines.iter().find(|m| m.name_any() == machine);
        marked |= current.is_some_and(health_check_failed);
        pids.extend(env.pids());
        if current.is_none() {
            assert!(
                marked,
                "{machine} went without a MachineHealthCheck marking it"
            );
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{machine} was not remediated (marked by the MachineHealthCheck: {marked})\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_crashing_and_lost_joiners_never_cost_quorum_and_a_health_check_replaces_the_lost() {
    let started = Instant::now();
    let cluster = "flaky";
    let kcp = "flaky-control-plane";
    let env = Env::start(&["--etcd-unstarted-grace", "20s"]).await;
    let watch = apply_watched(&env, cluster, 1, 0).await;
    env.wait_control_plane(kcp, 1, step_timeout(), "create 1")
        .await;
    let mut pids: BTreeSet<u32> = env.pids().into_iter().collect();

    // The first join's etcd starts 8 s late: within the grace, so it simply joins late.
    env.arm_next_join(cluster, "etcd-slow-start", Some(8)).await;
    env.scale_control_plane(kcp, 3).await;
    wait_applied(&env, 1).await;
    // The second join crashes right after adding its member.
    env.arm_next_join(cluster, "crash-mid-join", None).await;
    wait_applied(&env, 2).await;
    let crashed = wait_remediated(&env, cluster, &mut pids).await;
    // The replacement joins, then its node disappears 30 s later.
    env.arm_next_join(cluster, "lost-after-join", Some(30))
        .await;
    let applied = wait_applied(&env, 3).await;
    let kinds: Vec<String> = applied.iter().map(|(_, _, f)| format!("{f:?}")).collect();
    assert_eq!(
        kinds,
        ["EtcdSlowStart(8s)", "CrashMidJoin", "LostAfterJoin(30s)"]
    );
    assert_eq!(
        applied[1].1, crashed[0],
        "the crashed machine is the one remediated"
    );
    env.wait_control_plane(kcp, 3, step_timeout(), "after the crash")
        .await;
    let names = control_plane_machine_names(&env, cluster).await;
    assert!(
        crashed.iter().all(|c| !names.contains(c)),
        "{crashed:?} still among {names:?}"
    );
    watch
        .wait_voters(names, Duration::from_secs(60), "after the crash")
        .await;
    pids.extend(env.pids());

    // One node of three goes: the other two keep quorum, the endpoint keeps answering.
    let deadline = Instant::now() + Duration::from_secs(90);
    while env
        .sim
        .nodes()
        .iter()
        .filter(|n| n.namespace == NS && n.control_plane)
        .count()
        == 3
    {
        assert!(Instant::now() < deadline, "no node was lost");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let last = watch.last().expect("etcd sampled");
    assert_eq!(last.voters(), 3, "{last:?}");
    assert_eq!(last.healthy_voters, 2, "{last:?}");
    let kubeconfig = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(env.client.clone(), NS)
        .get("flaky-kubeconfig")
        .await
        .unwrap();
    let yaml = String::from_utf8(kubeconfig.data.unwrap()["value"].0.clone()).unwrap();
    let workload = testenv::apiserver::client_from_kubeconfig(&yaml)
        .await
        .unwrap();
    let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(workload)
        .list(&ListParams::default())
        .await
        .expect("the workload API answers through the endpoint after the loss");
    assert_eq!(nodes.items.len(), 3, "all three nodes still registered");

    // Cluster API's own MachineHealthCheck finds the lost node unhealthy; the control plane remediates
    // the machine (its member goes first), and a new one joins.
    let lost = applied[2].1.clone();
    env.apply(&node_health_check(cluster, kcp)).await;
    wait_health_check_remediated(&env, cluster, &lost, &mut pids).await;
    env.wait_control_plane(kcp, 3, step_timeout(), "after the loss")
        .await;
    let names = control_plane_machine_names(&env, cluster).await;
    assert!(!names.contains(&lost), "{lost} still among {names:?}");
    watch
        .wait_voters(names, Duration::from_secs(60), "after the loss")
        .await;
    pids.extend(env.pids());

    let samples = assert_membership_was_safe(&watch, "flaky joiners");
    assert_eq!(membership_events(&env, "RemoveUnstartedMember").await, 1);
    drop(watch);
    stop_and_check_nothing_is_left(env, pids).await;
    println!(
        "scenario slow, crashing and lost joiners: {:.1?} wall time, {samples} membership samples, remediated {crashed:?}",
        started.elapsed()
    );
}

/// Applies the template of `cluster` with `control_planes` and `workers` machines and watches its etcd.
pub(crate) async fn apply_watched(
    env: &Env,
    cluster: &str,
    control_planes: u32,
    workers: u32,
) -> EtcdWatch {
    env.apply_template(&vars(cluster, control_planes, workers))
        .await;
    EtcdWatch::start(
        env.client.clone(),
        NS,
        cluster,
        env.sim.view(),
        SAMPLE_EVERY,
    )
}

/// A MachineHealthCheck of the control plane `kcp` that marks a machine whose Node is not Ready for 10 s.
fn node_health_check(cluster: &str, kcp: &str) -> String {
    format!(
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: MachineHealthCheck\nmetadata:\n  name: {kcp}\n\
         spec:\n  clusterName: {cluster}\n  selector:\n    matchLabels:\n      cluster.x-k8s.io/control-plane: \"\"\n\
         \x20 checks:\n    nodeStartupTimeoutSeconds: 600\n    unhealthyNodeConditions:\n\
         \x20   - {{type: Ready, status: Unknown, timeoutSeconds: 10}}\n\
         \x20   - {{type: Ready, status: \"False\", timeoutSeconds: 10}}\n"
    )
}

/// Creates `cluster` with 3 control-plane machines and waits until they are its etcd voters; returns
/// the etcd watch and the machines' names.
pub(crate) async fn three_voters(env: &Env, cluster: &str, kcp: &str) -> (EtcdWatch, Vec<String>) {
    let watch = apply_watched(env, cluster, 3, 0).await;
    env.wait_control_plane(kcp, 3, step_timeout(), "create 3")
        .await;
    let first = control_plane_machine_names(env, cluster).await;
    watch
        .wait_voters(first.clone(), Duration::from_secs(60), "create 3")
        .await;
    (watch, first)
}

/// [`three_voters`], and the Machine whose member leads.
pub(crate) async fn three_voters_and_their_leader(
    env: &Env,
    cluster: &str,
    kcp: &str,
) -> (EtcdWatch, String) {
    let (watch, _) = three_voters(env, cluster, kcp).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader = loop {
        if let Some(leader) = watch.last().and_then(|s| s.leader) {
            break leader;
        }
        assert!(Instant::now() < deadline, "no etcd member said it leads");
        tokio::time::sleep(SAMPLE_EVERY).await;
    };
    let machine = env
        .sim
        .nodes()
        .into_iter()
        .find(|n| n.namespace == NS && n.node == leader)
        .map(|n| n.machine)
        .unwrap_or_else(|| panic!("no machine runs the leader {leader}"));
    (watch, machine)
}

/// Waits until none of `old` is a control-plane machine and 3 others are, settled; returns their names.
/// Only `old` go meanwhile: every other control-plane Machine seen while it waits is there at the end
/// (what Cluster API's own e2e asserts of a rollout: no Machine replaced twice for one change).
pub(crate) async fn replaced(
    env: &Env,
    cluster: &str,
    kcp: &str,
    old: &[String],
    timeout: Duration,
) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    let mut seen = Replacements::new();
    loop {
        let names = control_plane_machine_names(env, cluster).await;
        seen.saw(&names);
        if names.iter().all(|n| !old.contains(n)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{old:?} not replaced: {names:?}\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    env.wait_control_plane(kcp, 3, step_timeout(), "replaced")
        .await;
    let names = control_plane_machine_names(env, cluster).await;
    seen.saw(&names);
    if let Err(e) = seen.check(&format!("replacing {old:?}"), &names, |n| {
        old.iter().any(|o| o == n)
    }) {
        panic!("{e}\n{}", env.diagnostics().await);
    }
    names
}

/// Waits until `machine` is gone and 3 others are the control plane and its only etcd voters; checks
/// that its member went through its Machine and quorum held throughout; returns the membership samples.
async fn replaced_without_a_member_left(
    env: &Env,
    watch: &EtcdWatch,
    cluster: &str,
    kcp: &str,
    machine: &str,
) -> usize {
    let names = replaced(env, cluster, kcp, &[machine.to_owned()], step_timeout()).await;
    watch
        .wait_voters(names, Duration::from_secs(60), "replaced")
        .await;
    let removed = membership_event_notes(env, "RemoveMember").await;
    assert!(
        removed.iter().any(|note| note.contains(machine)),
        "the leader's member was not removed through its Machine: {removed:?}"
    );
    assert_membership_was_safe(watch, "leader's machine replaced")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_machine_of_the_etcd_leader_is_replaced_when_its_node_is_lost() {
    let started = Instant::now();
    let (cluster, kcp) = ("lead", "lead-control-plane");
    let env = Env::start(&[]).await;
    let (watch, machine) = three_voters_and_their_leader(&env, cluster, kcp).await;
    let mut pids: BTreeSet<u32> = env.pids().into_iter().collect();

    // The whole node goes, etcd and kube-apiserver with it; a health check watches the control plane.
    env.apply(&node_health_check(cluster, kcp)).await;
    let lost_at = Instant::now();
    assert!(env.sim.lose(NS, &machine), "{machine} was not running");
    wait_health_check_remediated(&env, cluster, &machine, &mut pids).await;
    let samples = replaced_without_a_member_left(&env, &watch, cluster, kcp, &machine).await;
    let replaced = lost_at.elapsed();
    pids.extend(env.pids());
    drop(watch);
    stop_and_check_nothing_is_left(env, pids).await;
    println!(
        "scenario leader's node lost: {machine} replaced {replaced:.1?} after its node went \
         ({:.1?} wall time, {samples} membership samples)",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_only_the_members_reach_is_remediated_without_handing_over() {
    let started = Instant::now();
    let (cluster, kcp) = ("unseen", "unseen-control-plane");
    // etcd is reached through each node's kubelet, as by default.
    let env = Env::start(&["--etcd-access=port-forward"]).await;
    let (watch, machine) = three_voters_and_their_leader(&env, cluster, kcp).await;
    let mut pids: BTreeSet<u32> = env.pids().into_iter().collect();

    // Its kubelet goes: the controller no longer reaches its etcd, which still leads the others.
    assert!(
        env.sim.stop_kubelet(NS, &machine),
        "{machine} has no kubelet (the simulator runs one only with real kubeadm in network namespaces)"
    );
    let cut_at = Instant::now();
    Api::<kubeadm_api::cluster::v1beta2::Machine>::namespaced(env.client.clone(), NS)
        .patch(
            &machine,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "metadata": { "annotations": { "cluster.x-k8s.io/remediate-machine": "" } }
            })),
        )
        .await
        .unwrap();
    let samples = replaced_without_a_member_left(&env, &watch, cluster, kcp, &machine).await;
    let replaced = cut_at.elapsed();
    let moved = membership_event_notes(&env, "MoveLeader").await;
    assert!(
        moved.is_empty(),
        "leadership cannot have been handed over by a leader the controller does not reach: {moved:?}"
    );
    pids.extend(env.pids());
    drop(watch);
    stop_and_check_nothing_is_left(env, pids).await;
    println!(
        "scenario leader cut off from the controller: {machine} replaced {replaced:.1?} after its kubelet \
         went ({:.1?} wall time, {samples} membership samples)",
        started.elapsed()
    );
}
