//! `make bench-scale`: what both managers cost with many clusters, and what they cost at rest.
//!
//! A light simulation in the spirit of Cluster API's in-memory provider: for each N of `BENCH_SCALE_N`
//! (default `100,300,300:0,1000`; `N:S` scales S control planes instead of `BENCH_SCALE_SCALED`), a fresh management plane (real etcd and kube-apiserver), both managers as
//! processes (the binaries `CONTROLPLANE_MANAGER` and `BOOTSTRAP_MANAGER` name, release builds from
//! `make bench-scale`), and N clusters of one control-plane machine (external etcd) and one worker. The
//! workload side of every cluster is one of a few real kube-apiservers shared by
//! `BENCH_SCALE_PER_WORKLOAD` clusters (default 50), each cluster's Nodes and mirror Pods named apart and
//! labelled with its name. Each cluster reaches its server through a filtering front of its own
//! ([`testenv::front`]) that narrows pod and Node reads to that label, so that a cluster sees only its
//! own objects, as a real one does (`BENCH_SCALE_UNFILTERED=1` connects the clusters to the shared servers
//! directly instead).
//! A small double in this benchmark plays core Cluster API and the machines: it hands each Machine its
//! bootstrap data, a Node and running mirror pods, and marks the Cluster initialized.
//!
//! For each N it prints: the time to create all clusters (every control plane ready, every worker's
//! bootstrap data written and Node there), the time to scale `BENCH_SCALE_SCALED` (default 100) control
//! planes 1 → 3; then, after the clusters settle, over `BENCH_SCALE_REST_SECONDS` (default 600) at rest:
//! management API requests per second by verb from each manager (their own request counters), writes,
//! reconciles per second, CPU seconds of each manager against the management kube-apiserver's, and
//! each manager's peak and current RSS. Two runs with the same N and different numbers of Machines
//! (`300` and `300:0`) tell apart what a manager's RSS at rest grows by per Machine and per cluster.
//! The rows also go to `target/bench-scale.csv` (under
//! `CARGO_TARGET_DIR` when set) for the plot (`hack/plot-scale.py`). Nothing is asserted: it measures.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e_tests::env::manager_binary;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kubeadm_api::bootstrap::v1beta2::KubeadmConfig;
use kubeadm_api::cluster::v1beta2::{Cluster, Machine};
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::meta::{CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL};
use serde_json::json;
use testenv::ManagementPlane;
use testenv::core_double::{kubeadm_init_uploaded_config, start_static_pods};
use testenv::front::Front;
use testenv::manager::ManagerProcess;

const NS: &str = "default";
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(3600);
/// How long nothing may change before the rest window starts.
const SETTLE: Duration = Duration::from_secs(30);
/// Bound on one step of the stand-in for core Cluster API and the machines.
const STEP_TIMEOUT: Duration = Duration::from_secs(20);
/// When the stand-in looks again at a Machine without a Node that no event has woken.
const REVISIT: Duration = Duration::from_secs(30);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let scaled = env_or("BENCH_SCALE_SCALED", 100usize);
    let sizes: Vec<(usize, usize)> = std::env::var("BENCH_SCALE_N")
        .unwrap_or_else(|_| "100,300,300:0,1000".into())
        .split(',')
        .filter_map(|size| match size.trim().split_once(':') {
            Some((n, s)) => Some((n.parse().ok()?, s.parse().ok()?)),
            None => Some((size.trim().parse().ok()?, scaled)),
        })
        .collect();
    let per_workload = env_or("BENCH_SCALE_PER_WORKLOAD", 50usize).max(1);
    let filtered = env_or("BENCH_SCALE_UNFILTERED", 0u8) == 0;
    let rest = Duration::from_secs(env_or("BENCH_SCALE_REST_SECONDS", 600u64));
    // The workspace's target directory, or the one cargo was told to use.
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        std::path::PathBuf::from,
    );
    let csv = target.join("bench-scale.csv");
    let mut rows = Vec::new();
    for &(n, scaled) in &sizes {
        let row = run(n, per_workload, filtered, scaled.min(n), rest).await;
        println!("{}", row.describe());
        rows.push(row);
        // After every N, so a long run that is stopped keeps what it measured.
        println!("\n{}", table(&rows, rest));
        std::fs::write(&csv, csv_of(&rows)).expect("write the CSV");
        println!("rows written to {}", csv.display());
    }
}

/// What one N measured.
struct Row {
    clusters: usize,
    machines: usize,
    workload_apiservers: usize,
    create: Duration,
    scaled: usize,
    scale: Duration,
    /// Per manager: requests per second by verb at rest.
    requests: BTreeMap<String, BTreeMap<String, f64>>,
    /// Per manager: writes at rest.
    writes: BTreeMap<String, u64>,
    /// Per manager: reconciles per second at rest.
    reconciles: BTreeMap<String, f64>,
    /// Per manager and the management kube-apiserver: CPU seconds at rest.
    cpu: BTreeMap<String, f64>,
    /// Per manager: (peak, current) RSS in KiB.
    rss: BTreeMap<String, (u64, u64)>,
}

impl Row {
    fn describe(&self) -> String {
        format!(
            "N={}: {} machines on {} workload API servers; created in {:.0?}, {} scaled 1 → 3 in {:.0?}",
            self.clusters,
            self.machines,
            self.workload_apiservers,
            self.create,
            self.scaled,
            self.scale
        )
    }
}

async fn run(n: usize, per_workload: usize, filtered: bool, scaled: usize, rest: Duration) -> Row {
    let plane = ManagementPlane::start()
        .await
        .expect("management plane starts");
    let client = plane.client().await.unwrap();
    install_crds(&plane).await;
    let workloads = {
        let mut started = Vec::new();
        for _ in 0..n.div_ceil(per_workload) {
            started.push(
                ManagementPlane::start()
                    .await
                    .expect("workload API server starts"),
            );
        }
        started
    };
    let mut workload_clients = Vec::new();
    for workload in &workloads {
        workload_clients.push(workload.client().await.unwrap());
    }

    let logs = plane.dir().join("managers");
    let kubeconfig = plane.apiserver().kubeconfig_path().to_owned();
    let filter = Some("warn");
    let mut managers = [
        ManagerProcess::start_logging(
            &manager_binary("controlplane-manager", "CONTROLPLANE_MANAGER"),
            &kubeconfig,
            &logs,
            &[],
            filter,
        )
        .expect("controlplane-manager starts"),
        ManagerProcess::start_logging(
            &manager_binary("bootstrap-manager", "BOOTSTRAP_MANAGER"),
            &kubeconfig,
            &logs,
            &[],
            filter,
        )
        .expect("bootstrap-manager starts"),
    ];
    for manager in &mut managers {
        manager
            .wait_ready(Duration::from_secs(60))
            .await
            .expect("manager ready");
    }

    let mut clusters = Vec::new();
    let mut fronts = Vec::new();
    for i in 0..n {
        let server = workloads[i / per_workload].apiserver();
        let cluster = format!("c{i:04}");
        let url = if filtered {
            let front = Front::before(server, CLUSTER_NAME_LABEL, &cluster)
                .await
                .expect("front listens");
            let url = format!("https://127.0.0.1:{}", front.port());
            fronts.push(front);
            url
        } else {
            server.url().to_owned()
        };
        clusters.push(Workload {
            cluster,
            index: i / per_workload,
            url,
            ca: (server.ca_pem().to_owned(), server.ca_key_pem().to_owned()),
        });
    }
    let double = tokio::spawn(double(
        client.clone(),
        Arc::new(workload_clients),
        clusters
            .iter()
            .map(|w| (w.cluster.clone(), w.index))
            .collect(),
    ));

    let watched = Watched::start(&client).await;
    let started = Instant::now();
    for workload in &clusters {
        create_cluster(&client, workload).await;
    }
    wait_until(&watched, n, |kcps, machines| {
        kcps.iter().filter(|k| converged(k, 1)).count() == n
            && machines
                .iter()
                .filter(|m| !is_control_plane(m) && has_node(m))
                .count()
                == n
    })
    .await;
    let create = started.elapsed();
    println!("N={n}: all clusters created in {create:.0?}");

    let started = Instant::now();
    for workload in clusters.iter().take(scaled) {
        Api::<KubeadmControlPlane>::namespaced(client.clone(), NS)
            .patch(
                &format!("{}-cp", workload.cluster),
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "replicas": 3 } })),
            )
            .await
            .unwrap();
    }
    wait_until(&watched, n, |kcps, _| {
        kcps.iter().filter(|k| converged(k, 3)).count() == scaled
    })
    .await;
    let scale = started.elapsed();
    println!("N={n}: {scaled} control planes scaled 1 → 3 in {scale:.0?}");
    let machines = n * 2 + scaled * 2;

    settle(&watched).await;
    // The double only acts on change; stopped, it cannot add to the API server's work at rest.
    double.abort();
    drop(watched);

    let apiserver_pid = plane.apiserver().pid();
    let before = Sample::take(&managers, apiserver_pid).await;
    tokio::time::sleep(rest).await;
    let after = Sample::take(&managers, apiserver_pid).await;
    let seconds = rest.as_secs_f64();

    let mut row = Row {
        clusters: n,
        machines,
        workload_apiservers: workloads.len(),
        create,
        scaled,
        scale,
        requests: BTreeMap::new(),
        writes: BTreeMap::new(),
        reconciles: BTreeMap::new(),
        cpu: BTreeMap::new(),
        rss: BTreeMap::new(),
    };
    for manager in &managers {
        let name = manager.name().to_owned();
        let (b, a) = (&before.metrics[&name], &after.metrics[&name]);
        let mut by_verb = BTreeMap::new();
        let mut writes = 0;
        let mut what = Vec::new();
        for ((verb, resource), count) in &a.requests {
            let delta = count
                - b.requests
                    .get(&(verb.clone(), resource.clone()))
                    .copied()
                    .unwrap_or(0);
            if delta == 0 {
                continue;
            }
            what.push(format!("{verb} {resource}: {delta}"));
            if !matches!(verb.as_str(), "get" | "list" | "watch") {
                writes += delta;
            }
            *by_verb.entry(verb.clone()).or_insert(0.0) += delta as f64 / seconds;
        }
        println!(
            "N={n}: {name} at rest sent {}",
            if what.is_empty() {
                "nothing".into()
            } else {
                what.join(", ")
            }
        );
        if a.views != (0, 0) {
            println!(
                "N={n}: {name} at rest read {} views of workload clusters and took {} kept ones",
                a.views.0 - b.views.0,
                a.views.1 - b.views.1
            );
        }
        row.requests.insert(name.clone(), by_verb);
        row.writes.insert(name.clone(), writes);
        row.reconciles
            .insert(name.clone(), (a.reconciles - b.reconciles) as f64 / seconds);
        row.cpu
            .insert(name.clone(), after.cpu[&name] - before.cpu[&name]);
        row.rss.insert(name, after.rss[&manager.name().to_owned()]);
    }
    row.cpu.insert(
        "kube-apiserver".into(),
        after.cpu["kube-apiserver"] - before.cpu["kube-apiserver"],
    );
    for mut manager in managers {
        manager.terminate(Duration::from_secs(10));
    }
    drop(fronts);
    drop(workloads);
    drop(plane);
    row
}

/// A cluster and the workload API server that answers for it.
struct Workload {
    cluster: String,
    index: usize,
    url: String,
    /// The workload API server's CA (certificate, key): the cluster's CA.
    ca: (String, String),
}

async fn install_crds(plane: &ManagementPlane) {
    let mut crds = kubeadm_api::crd::provider_crds();
    crds.extend(kubeadm_api::crd::core_crds());
    let fixture = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../providers/controlplane/tests/fixtures/sim-infrastructure-crds.yaml"
    ))
    .unwrap();
    crds.extend(serde_saphyr::from_multiple::<CustomResourceDefinition>(&fixture).unwrap());
    plane.install_crds(&crds).await.unwrap();
    let client = plane.client().await.unwrap();
    let mut template = DynamicObject::new("cp", &resource("SimMachineTemplate")).within(NS);
    template.data = json!({ "spec": { "template": { "spec": {} } } });
    Api::<DynamicObject>::namespaced_with(client, NS, &resource("SimMachineTemplate"))
        .create(&PostParams::default(), &template)
        .await
        .unwrap();
}

fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "infrastructure.cluster.x-k8s.io",
        "v1beta2",
        kind,
    ))
}

/// The Cluster (infrastructure provisioned), its CA, its control plane of one machine with external
/// etcd, and one worker Machine with its KubeadmConfig, as a MachineDeployment would make it.
async fn create_cluster(client: &kube::Client, workload: &Workload) {
    let name = &workload.cluster;
    let labels = json!({ CLUSTER_NAME_LABEL: name });
    let ca: Secret = serde_json::from_value(json!({
        "metadata": { "name": format!("{name}-ca"), "namespace": NS, "labels": labels },
        "stringData": { "tls.crt": workload.ca.0, "tls.key": workload.ca.1 },
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &ca)
        .await
        .unwrap();
    let (host, port) = workload
        .url
        .trim_start_matches("https://")
        .rsplit_once(':')
        .unwrap();
    let port: i32 = port.parse().unwrap();
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), NS);
    let cluster: Cluster = serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": NS },
        "spec": {
            "controlPlaneEndpoint": { "host": host, "port": port },
            "controlPlaneRef": { "apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": format!("{name}-cp") },
            "infrastructureRef": { "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimCluster", "name": name },
        },
    }))
    .unwrap();
    let cluster = clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    clusters
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                &json!({ "status": { "initialization": { "infrastructureProvisioned": true } } }),
            ),
        )
        .await
        .unwrap();
    let kcp: KubeadmControlPlane = serde_json::from_value(json!({
        "metadata": {
            "name": format!("{name}-cp"), "namespace": NS, "labels": labels,
            "ownerReferences": [{ "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": name, "uid": cluster.uid().unwrap() }],
        },
        "spec": {
            "replicas": 1,
            "version": "v1.33.1",
            "machineTemplate": { "spec": { "infrastructureRef": { "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachineTemplate", "name": "cp" } } },
            // etcd outside the machines: the simulated nodes run none; this measures the managers.
            "kubeadmConfigSpec": { "clusterConfiguration": {
                "etcd": { "external": { "endpoints": ["https://etcd.example:2379"], "caFile": "/ca", "certFile": "/crt", "keyFile": "/key" } },
            } },
        },
    }))
    .unwrap();
    Api::<KubeadmControlPlane>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &kcp)
        .await
        .unwrap();

    let worker = format!("{name}-md-0");
    let mut infra = DynamicObject::new(&worker, &resource("SimMachine")).within(NS);
    infra.metadata.labels = Some([(CLUSTER_NAME_LABEL.to_owned(), name.clone())].into());
    infra.data = json!({ "spec": {} });
    Api::<DynamicObject>::namespaced_with(client.clone(), NS, &resource("SimMachine"))
        .create(&PostParams::default(), &infra)
        .await
        .unwrap();
    let machine: Machine = serde_json::from_value(json!({
        "metadata": { "name": worker, "namespace": NS, "labels": labels },
        "spec": {
            "clusterName": name,
            "version": "v1.33.1",
            "bootstrap": { "configRef": { "apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": worker } },
            "infrastructureRef": { "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachine", "name": worker },
        },
    }))
    .unwrap();
    let machine = Api::<Machine>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &machine)
        .await
        .unwrap();
    let config: KubeadmConfig = serde_json::from_value(json!({
        "metadata": {
            "name": worker, "namespace": NS, "labels": labels,
            "ownerReferences": [{ "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": worker, "uid": machine.uid().unwrap(), "controller": true }],
        },
        "spec": { "joinConfiguration": {} },
    }))
    .unwrap();
    Api::<KubeadmConfig>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &config)
        .await
        .unwrap();
}

/// Core Cluster API and the machines, driven by watches: a Machine gets its finalizer, then the
/// bootstrap data its KubeadmConfig names, then (as if the machine booted and joined) a Node and, on
/// control-plane machines, running mirror pods in its workload API server, a nodeRef and Ready
/// conditions; a control plane that reports itself initialized marks its Cluster so.
///
/// A controller like any other: Machine and KubeadmConfig changes trigger a Machine's step, up to
/// [`DOUBLE_CONCURRENCY`] at once, and each step reads its Machine and KubeadmConfig live, so that a
/// step never repeats a write that changes nothing (which no watch would report) on a stale view.
async fn double(
    client: kube::Client,
    workloads: Arc<Vec<kube::Client>>,
    index: BTreeMap<String, usize>,
) {
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    let configs: Api<KubeadmConfig> = Api::namespaced(client.clone(), NS);
    let initialized = mark_initialized(client.clone());
    let double = Arc::new(Double {
        client,
        workloads,
        index,
    });
    let machines = Controller::new(machines, watcher::Config::default())
        .with_config(controller::Config::default().concurrency(DOUBLE_CONCURRENCY))
        // A KubeadmConfig is named after its Machine.
        .watches(configs, watcher::Config::default(), |config| {
            Some(ObjectRef::new(&config.name_any()).within(NS))
        })
        .run(
            |machine, double| async move { double.step(&machine.name_any()).await },
            |machine, error, _| {
                eprintln!("machine {}: {error}; retried", machine.name_any());
                Action::requeue(Duration::from_secs(5))
            },
            double,
        )
        .for_each(|_| async {});
    futures::future::join(machines, initialized).await;
}

/// Marks each Cluster whose control plane says it is initialized, as core Cluster API does.
async fn mark_initialized(client: kube::Client) {
    let kcps: Api<KubeadmControlPlane> = Api::namespaced(client.clone(), NS);
    let clusters: Api<Cluster> = Api::namespaced(client, NS);
    let mut marked = std::collections::BTreeSet::new();
    let mut events = watcher(kcps, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(event) = events.next().await {
        let kcp = match event {
            Ok(kcp) => kcp,
            Err(e) => {
                eprintln!("watch of KubeadmControlPlanes failed: {e}");
                continue;
            }
        };
        let initialized = kcp
            .status
            .as_ref()
            .and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.control_plane_initialized)
            == Some(true);
        let Some(cluster) = kcp.labels().get(CLUSTER_NAME_LABEL).cloned() else {
            continue;
        };
        if !initialized || marked.contains(&cluster) {
            continue;
        }
        // Bounded like every step: the client has no read timeout of its own.
        let patched = tokio::time::timeout(
            STEP_TIMEOUT,
            clusters.patch_status(
                &cluster,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({ "status": { "initialization": { "controlPlaneInitialized": true } } }),
                ),
            ),
        )
        .await;
        if matches!(patched, Ok(Ok(_))) {
            marked.insert(cluster);
        } else {
            eprintln!("cluster {cluster}: cannot mark it initialized; the next event retries");
        }
    }
}

/// How many Machines the double moves on at once.
const DOUBLE_CONCURRENCY: u16 = 16;

struct Double {
    client: kube::Client,
    workloads: Arc<Vec<kube::Client>>,
    index: BTreeMap<String, usize>,
}

impl Double {
    /// [`boot`] on the live Machine and KubeadmConfig, bounded: one answerless call must not hold a
    /// worker forever. A Machine without a Node yet is looked at again after a while even if no
    /// event comes.
    async fn step(&self, name: &str) -> Result<Action, std::io::Error> {
        let bounded = tokio::time::timeout(STEP_TIMEOUT, async {
            let machine = Api::<Machine>::namespaced(self.client.clone(), NS)
                .get_opt(name)
                .await
                .map_err(std::io::Error::other)?;
            let Some(machine) = machine else {
                return Ok(Action::await_change());
            };
            let config = Api::<KubeadmConfig>::namespaced(self.client.clone(), NS)
                .get_opt(name)
                .await
                .map_err(std::io::Error::other)?;
            boot(
                &self.client,
                &self.workloads,
                &self.index,
                &machine,
                config.as_ref(),
            )
            .await;
            Ok(
                if has_node(&machine) || machine.metadata.deletion_timestamp.is_some() {
                    Action::await_change()
                } else {
                    Action::requeue(REVISIT)
                },
            )
        });
        bounded
            .await
            .map_err(|_| std::io::Error::other("a step timed out"))?
    }
}

/// One step of a Machine's life as core Cluster API and the machine would take it.
async fn boot(
    client: &kube::Client,
    workloads: &[kube::Client],
    index: &BTreeMap<String, usize>,
    machine: &Machine,
    config: Option<&KubeadmConfig>,
) {
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    let name = machine.name_any();
    if machine.metadata.deletion_timestamp.is_some() || has_node(machine) {
        return;
    }
    if machine.finalizers().is_empty() {
        let _ = machines
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({ "metadata": { "finalizers": ["machine.cluster.x-k8s.io"] } }),
                ),
            )
            .await;
        return;
    }
    if let Some(config) = config
        && !config
            .owner_references()
            .iter()
            .any(|o| o.kind == "Machine")
    {
        // Core Cluster API makes the Machine its bootstrap config's controller.
        let mut owners = config.owner_references().to_vec();
        owners.push(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "cluster.x-k8s.io/v1beta2".into(),
                kind: "Machine".into(),
                name: name.clone(),
                uid: machine.uid().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
        );
        let _ = Api::<KubeadmConfig>::namespaced(client.clone(), NS)
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": {
                    "ownerReferences": owners,
                    "resourceVersion": config.resource_version(),
                } })),
            )
            .await;
        return;
    }
    if machine.spec.bootstrap.data_secret_name.is_none() {
        let secret = config
            .and_then(|c| c.status.as_ref())
            .and_then(|s| s.data_secret_name.clone());
        if let Some(secret) = secret
            && let Err(e) = machines
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": { "bootstrap": { "dataSecretName": secret } } })),
                )
                .await
        {
            eprintln!("machine {name}: cannot set its bootstrap data: {e}");
        }
        return;
    }
    let Some(workload) = index
        .get(&machine.spec.cluster_name)
        .map(|i| &workloads[*i])
    else {
        return;
    };
    let node_name = format!("node-{name}");
    let control_plane = is_control_plane(machine);
    let mut labels = BTreeMap::from([(
        CLUSTER_NAME_LABEL.to_owned(),
        machine.spec.cluster_name.clone(),
    )]);
    if control_plane {
        labels.insert(
            "node-role.kubernetes.io/control-plane".into(),
            String::new(),
        );
    }
    let node = Node {
        metadata: kube::api::ObjectMeta {
            name: Some(node_name.clone()),
            labels: Some(labels),
            ..Default::default()
        },
        ..Default::default()
    };
    match Api::<Node>::all(workload.clone())
        .create(&PostParams::default(), &node)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => {
            eprintln!("cannot create Node {node_name}: {e}");
            return;
        }
    }
    if control_plane {
        kubeadm_init_uploaded_config(workload).await;
        start_static_pods(
            workload,
            &name,
            "https://etcd.example:2379",
            &[(CLUSTER_NAME_LABEL, &machine.spec.cluster_name)],
        )
        .await;
    }
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let condition = |type_: &str| json!({ "type": type_, "status": "True", "reason": type_, "message": "", "lastTransitionTime": now });
    let _ = machines
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": {
                "nodeRef": { "name": node_name },
                "initialization": { "infrastructureProvisioned": true, "bootstrapDataSecretCreated": true },
                "conditions": [condition("Ready"), condition("Available")],
            } })),
        )
        .await;
}

fn is_control_plane(machine: &Machine) -> bool {
    machine.labels().contains_key(CONTROL_PLANE_LABEL)
}

fn has_node(machine: &Machine) -> bool {
    machine
        .status
        .as_ref()
        .and_then(|s| s.node_ref.as_ref())
        .is_some()
}

fn converged(kcp: &KubeadmControlPlane, replicas: i32) -> bool {
    let s = kcp.status.clone().unwrap_or_default();
    s.ready_replicas == Some(replicas)
        && s.up_to_date_replicas == Some(replicas)
        && s.replicas == Some(replicas)
}

/// The bench's own view of the control planes and Machines, kept by watches (so that waiting for N
/// clusters does not list them all every few seconds).
struct Watched {
    kcps: Store<KubeadmControlPlane>,
    machines: Store<Machine>,
    tasks: [tokio::task::JoinHandle<()>; 2],
}

impl Watched {
    async fn start(client: &kube::Client) -> Self {
        fn kept<K>(api: Api<K>) -> (Store<K>, tokio::task::JoinHandle<()>)
        where
            K: kube::Resource<DynamicType = ()>
                + Clone
                + std::fmt::Debug
                + for<'de> k8s_openapi::serde::Deserialize<'de>
                + Send
                + Sync
                + 'static,
        {
            let (store, writer) = kube::runtime::reflector::store();
            let stream = kube::runtime::reflector::reflector(
                writer,
                watcher(api, watcher::Config::default()).default_backoff(),
            );
            let task = tokio::spawn(stream.for_each(|event| async move {
                if let Err(e) = event {
                    eprintln!("the bench's watch failed: {e}");
                }
            }));
            (store, task)
        }
        let (kcps, a) = kept(Api::namespaced(client.clone(), NS));
        let (machines, b) = kept(Api::namespaced(client.clone(), NS));
        kcps.wait_until_ready().await.unwrap();
        machines.wait_until_ready().await.unwrap();
        Watched {
            kcps,
            machines,
            tasks: [a, b],
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Waits (looking every 2 s) until `done` holds for the control planes and Machines.
async fn wait_until(
    watched: &Watched,
    n: usize,
    done: impl Fn(&[Arc<KubeadmControlPlane>], &[Arc<Machine>]) -> bool,
) {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let kcps = watched.kcps.state();
        let machines = watched.machines.state();
        if done(&kcps, &machines) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "N={n}: {} of {n} control planes ready, {} Machines with a Node after {CONVERGE_TIMEOUT:?}",
            kcps.iter()
                .filter(|k| k
                    .status
                    .as_ref()
                    .and_then(|s| s.ready_replicas)
                    .unwrap_or(0)
                    > 0)
                .count(),
            machines.iter().filter(|m| has_node(m)).count()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Waits until no Machine or KubeadmControlPlane changed for [`SETTLE`] (at most 10 minutes).
async fn settle(watched: &Watched) {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut last = String::new();
    let mut since = Instant::now();
    while Instant::now() < deadline {
        let now = format!(
            "{}|{}",
            versions(&watched.machines),
            versions(&watched.kcps)
        );
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= SETTLE {
            return;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The resource versions of every object in `store`, in a stable order.
fn versions<K>(store: &Store<K>) -> String
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let mut versions: Vec<String> = store
        .state()
        .iter()
        .map(|o| {
            format!(
                "{}={}",
                o.name_any(),
                o.resource_version().unwrap_or_default()
            )
        })
        .collect();
    versions.sort();
    versions.join(",")
}

/// What each manager and the management kube-apiserver had spent at one moment.
struct Sample {
    metrics: BTreeMap<String, Counters>,
    /// CPU seconds (user + system) so far, by process.
    cpu: BTreeMap<String, f64>,
    /// (peak, current) RSS in KiB, by manager.
    rss: BTreeMap<String, (u64, u64)>,
}

#[derive(Default)]
struct Counters {
    /// Requests by verb and resource.
    requests: BTreeMap<(String, String), u64>,
    reconciles: u64,
    /// Views of the workload clusters (control-plane manager): read, and kept from a reconcile before.
    views: (u64, u64),
}

impl Sample {
    async fn take(managers: &[ManagerProcess], apiserver: u32) -> Self {
        let mut sample = Sample {
            metrics: BTreeMap::new(),
            cpu: BTreeMap::new(),
            rss: BTreeMap::new(),
        };
        for manager in managers {
            let name = manager.name().to_owned();
            let (_, text) = manager.get("/metrics").await.expect("metrics answer");
            sample.metrics.insert(name.clone(), counters(&text));
            let pid = manager.pid();
            sample.cpu.insert(name.clone(), cpu_seconds(pid));
            sample.rss.insert(name, rss_kib(pid));
        }
        sample
            .cpu
            .insert("kube-apiserver".into(), cpu_seconds(apiserver));
        sample
    }
}

/// Request counts by verb, reconciles and workload views from a manager's `/metrics`.
fn counters(text: &str) -> Counters {
    let mut counters = Counters::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let value: f64 = value.parse().unwrap_or(0.0);
        if let Some(labels) = series
            .strip_prefix("kubeadm_management_api_requests_total{")
            .and_then(|l| l.strip_suffix('}'))
        {
            let label = |name: &str| {
                labels
                    .split("\",")
                    .find_map(|l| l.strip_prefix(&format!("{name}=\"")))
                    .map(|v| v.trim_end_matches('"').to_owned())
                    .unwrap_or_default()
            };
            *counters
                .requests
                .entry((label("verb"), label("resource")))
                .or_default() += value as u64;
        } else if series.ends_with("_reconcile_total") {
            counters.reconciles += value as u64;
        } else if let Some(source) = series
            .strip_prefix("kubeadm_controlplane_workload_views_total{source=\"")
            .and_then(|l| l.strip_suffix("\"}"))
        {
            match source {
                "read" => counters.views.0 += value as u64,
                "kept" => counters.views.1 += value as u64,
                _ => {}
            }
        }
    }
    counters
}

/// User and system CPU seconds of `pid` so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) start at field 3.
    let after = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15, i.e. 11 and 12 after the state (field 3).
    (ticks(11) + ticks(12)) / clock_ticks()
}

fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// (peak, current) resident set of `pid` in KiB.
fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

fn table(rows: &[Row], rest: Duration) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| clusters | machines | workload API servers | create | scale 1→3 | manager | requests/s at rest (by verb) | writes at rest | reconciles/s | CPU s at rest (API server's) | peak RSS | RSS |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for row in rows {
        for (name, verbs) in &row.requests {
            let total = verbs.values().fold(0.0, |a, b| a + b);
            let by_verb = verbs
                .iter()
                .filter(|(_, v)| **v > 0.0)
                .map(|(verb, v)| format!("{verb} {v:.3}"))
                .collect::<Vec<_>>()
                .join(", ");
            let (peak, now) = row.rss[name];
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.0?} | {} in {:.0?} | {name} | {total:.3} ({}) | {} | {:.2} | {:.1} ({:.1}) | {} MiB | {} MiB |",
                row.clusters,
                row.machines,
                row.workload_apiservers,
                row.create,
                row.scaled,
                row.scale,
                if by_verb.is_empty() {
                    "none".into()
                } else {
                    by_verb
                },
                row.writes[name],
                row.reconciles[name],
                row.cpu[name],
                row.cpu["kube-apiserver"],
                peak / 1024,
                now / 1024,
            );
        }
    }
    let _ = writeln!(
        out,
        "\nAt rest: {} s after the clusters settled.",
        rest.as_secs()
    );
    if let Some(first) = rows.first() {
        for name in first.rss.keys() {
            if let Some(growth) = Growth::of(rows, name) {
                let _ = writeln!(out, "{name}: {growth}");
            }
        }
    }
    out
}

/// A manager's RSS at the end of the rest window as `base + per_cluster * N + per_machine * Machines`:
/// `per_machine` from runs with the same N and different numbers of Machines, then the rest fit
/// (least squares) over N.
struct Growth {
    base_kib: f64,
    per_cluster_kib: f64,
    per_machine_kib: f64,
    /// Of the peak RSS, fit over N alone (Machines grow with N): KiB per cluster and the base.
    peak_per_cluster_kib: f64,
    peak_base_kib: f64,
}

impl Growth {
    fn of(rows: &[Row], name: &str) -> Option<Self> {
        let rss = |row: &Row, peak: bool| {
            let (p, now) = row.rss[name];
            (if peak { p } else { now }) as f64
        };
        let mut slopes = Vec::new();
        for (i, a) in rows.iter().enumerate() {
            for b in &rows[i + 1..] {
                if a.clusters == b.clusters && a.machines != b.machines {
                    slopes.push(
                        (rss(b, false) - rss(a, false)) / (b.machines as f64 - a.machines as f64),
                    );
                }
            }
        }
        if slopes.is_empty() {
            return None;
        }
        let per_machine_kib = slopes.iter().sum::<f64>() / slopes.len() as f64;
        let points = |peak: bool, per_machine: f64| -> Vec<(f64, f64)> {
            rows.iter()
                .map(|row| {
                    (
                        row.clusters as f64,
                        rss(row, peak) - per_machine * row.machines as f64,
                    )
                })
                .collect()
        };
        let (base_kib, per_cluster_kib) = least_squares(&points(false, per_machine_kib))?;
        let (peak_base_kib, peak_per_cluster_kib) = least_squares(&points(true, 0.0))?;
        Some(Self {
            base_kib,
            per_cluster_kib,
            per_machine_kib,
            peak_per_cluster_kib,
            peak_base_kib,
        })
    }
}

impl std::fmt::Display for Growth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RSS at rest {:.1} MiB + {:.1} KiB per cluster + {:.1} KiB per Machine; peak RSS {:.1} MiB + {:.1} KiB per cluster (its Machines included)",
            self.base_kib / 1024.0,
            self.per_cluster_kib,
            self.per_machine_kib,
            self.peak_base_kib / 1024.0,
            self.peak_per_cluster_kib,
        )
    }
}

/// (intercept, slope) of the line through `points`, or `None` without two distinct x.
fn least_squares(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let slope = sxy / sxx;
    Some((mean_y - slope * mean_x, slope))
}

fn csv_of(rows: &[Row]) -> String {
    let mut out = String::from(
        "clusters,machines,workload_apiservers,manager,create_s,scale_s,requests_per_s,writes,reconciles_per_s,cpu_s,apiserver_cpu_s,peak_rss_kib,rss_kib\n",
    );
    for row in rows {
        for (name, verbs) in &row.requests {
            let (peak, now) = row.rss[name];
            let _ = writeln!(
                out,
                "{},{},{},{name},{:.1},{:.1},{:.4},{},{:.4},{:.2},{:.2},{peak},{now}",
                row.clusters,
                row.machines,
                row.workload_apiservers,
                row.create.as_secs_f64(),
                row.scale.as_secs_f64(),
                verbs.values().fold(0.0, |a, b| a + b),
                row.writes[name],
                row.reconciles[name],
                row.cpu[name],
                row.cpu["kube-apiserver"],
            );
        }
    }
    out
}
