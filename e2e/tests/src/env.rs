//! One scenario's world: a management plane with every CRD installed, Cluster API's own core manager,
//! `bootstrap-manager` and `controlplane-manager` as processes serving their webhooks through the
//! apiserver, and the simulator as the infrastructure provider. Dropping it stops the nodes, the
//! managers and the management plane, in that order.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use kubeadm_api::cluster::v1beta2::Machine;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use sim::controller::Core;
use sim::{Sim, SimOptions};
use testenv::ManagementPlane;
use testenv::apiserver::ApiServerOptions;
use testenv::manager::ManagerProcess;

pub use crate::installed::Kubeadm;

pub const NS: &str = "default";
/// The cluster template this project ships for simulated infrastructure.
pub const SIM_TEMPLATE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../templates/cluster-template-sim.yaml"
);
/// The same cluster on real nodes of the simulated infrastructure (`spec.nodes: Real`).
pub const REAL_NODES_TEMPLATE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../templates/cluster-template-sim-real.yaml"
);
/// The ClusterClass (with its templates) this project ships for simulated infrastructure.
pub const SIM_CLUSTER_CLASS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../templates/cluster-class-sim.yaml"
);
/// A Cluster of that class.
pub const SIM_TOPOLOGY_TEMPLATE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../templates/cluster-template-topology-sim.yaml"
);
/// The clusterctl settings the templates are rendered with.
pub const CLUSTERCTL_EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../templates/clusterctl.yaml.example"
);

pub struct Env {
    // Field order is drop order: nodes first, then the managers, then the management plane.
    pub sim: Sim,
    /// Cluster API's core manager (Machines, MachineSets, MachineDeployments, MachineHealthChecks).
    pub core: ManagerProcess,
    /// Our managers; empty in the peer's world.
    pub managers: Vec<Manager>,
    /// Cluster API's own kubeadm managers in the peer's world ([`Env::start_peer`],
    /// [`Env::start_installed_cluster_api`]); else empty.
    pub peer: Vec<ManagerProcess>,
    /// Our managers as `clusterctl init` installed them ([`Env::start_installed`]); else empty.
    pub installed: Vec<ManagerProcess>,
    /// Our managers that [`Env::switch_with_clusterctl`] stopped: their logs are still ours to check.
    retired: Vec<ManagerProcess>,
    /// The clusterctl repository and configuration the providers were installed from, if they were.
    pub clusterctl: Option<testenv::clusterctl::Repository>,
    /// Where the installed webhook Services' endpoints point (a bridge address: endpoints refuse
    /// loopback).
    service_network: Option<sim::netns::Fabric>,
    manager_pids: Vec<u32>,
    pub crds: Vec<CustomResourceDefinition>,
    pub plane: ManagementPlane,
    pub client: kube::Client,
    pub started: Instant,
}

/// A manager binary next to the test binary (`target/debug`), or from `$VAR`.
pub fn manager_binary(name: &str, var: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(var) {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the binary has a path");
    // target/debug/quickstart → target/debug/<name>; target/debug/deps/<test> → target/debug/<name>
    let dir = exe.parent().expect("the binary is in a folder");
    let path = [dir.join(name), dir.parent().unwrap_or(dir).join(name)]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| dir.join(name));
    assert!(
        path.is_file(),
        "{} is missing: build it first (`cargo build -p kubeadm-bootstrap -p kubeadm-controlplane`) or set ${var}",
        path.display()
    );
    path
}

/// Our providers' CRDs and the simulated infrastructure's; Cluster API's core CRDs come with its
/// manager ([`start_core`]).
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    let mut crds = kubeadm_api::crd::provider_crds();
    crds.extend(sim::api::crds());
    crds
}

/// The simulator of a scenario: the infrastructure provider next to Cluster API's core manager, in
/// the plane's folder.
fn sim_options(plane: &ManagementPlane) -> SimOptions {
    SimOptions {
        dir: plane.dir().join("sim"),
        namespace: Some(NS.into()),
        period: Duration::from_millis(300),
        core: Core::ClusterApi,
    }
}

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "sim=info".into()),
        )
        .with_test_writer()
        .try_init();
}

/// Whose bootstrap and control-plane managers run.
enum Providers<'a> {
    /// Ours, with these `bootstrap-manager run` and `controlplane-manager run` arguments.
    Ours(&'a [&'a str], &'a [&'a str]),
    /// Cluster API's own (the peer).
    ClusterApi,
}

/// Starts Cluster API's own kubeadm bootstrap and control-plane managers, each with its CRDs and
/// webhooks, against `plane`.
pub async fn start_peer_managers(plane: &ManagementPlane) -> Result<Vec<ManagerProcess>, String> {
    use testenv::capi::Part;
    let release = testenv::capi::ClusterApi::find().map_err(|e| e.to_string())?;
    let mut started = Vec::new();
    for part in [Part::KubeadmBootstrap, Part::KubeadmControlPlane] {
        let manager = testenv::capi::start_manager(plane, &release, part, &[])
            .await
            .map_err(|e| format!("{}: {e}", part.binary()))?;
        started.push(manager);
    }
    Ok(started)
}

/// Installs Cluster API's core CRDs and webhooks and starts its core manager against `plane`, with the
/// arguments in `CORE_MANAGER_ARGS` (space-separated) besides its defaults: how a benchmark measures
/// the core manager as a user may run it, e.g. `--feature-gates=ReconcilerRateLimiting=false`.
pub async fn start_core(plane: &ManagementPlane) -> Result<ManagerProcess, String> {
    let release = testenv::capi::ClusterApi::find_core().map_err(|e| e.to_string())?;
    let extra = std::env::var("CORE_MANAGER_ARGS").unwrap_or_default();
    let extra: Vec<&str> = extra.split_whitespace().collect();
    testenv::capi::start_core(plane, &release, &extra)
        .await
        .map_err(|e| format!("Cluster API's core manager: {e}"))
}

/// Our managers log at debug level in the scenarios (their dependencies at info), so that the scenarios
/// also show that no secret reaches a log line ([`Env::assert_no_secrets_logged`]).
pub const MANAGER_LOG_FILTER: &str = "debug,hyper=info,hyper_util=info,h2=info,tower=info,rustls=info,\
     tonic=info,kube_client=info,kube_runtime=info";

/// Starts `bootstrap-manager` (with `bootstrap_args`) and `controlplane-manager` (with
/// `controlplane_args`) against `plane`, waits until they are ready and routes their webhooks through the
/// apiserver.
pub async fn start_managers(
    plane: &ManagementPlane,
    crds: &[CustomResourceDefinition],
    bootstrap_args: &[&str],
    controlplane_args: &[&str],
) -> Result<Vec<Manager>, String> {
    let mut managers = Vec::new();
    for (name, var, args) in [
        ("bootstrap-manager", "BOOTSTRAP_MANAGER", bootstrap_args),
        (
            "controlplane-manager",
            "CONTROLPLANE_MANAGER",
            controlplane_args,
        ),
    ] {
        let binary = manager_binary(name, var);
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        // The local defaults, unless the scenario chose the flag itself.
        let chosen = |local: &str| {
            let flag = local.split('=').next().unwrap_or(local);
            args.iter().any(|a| a.split('=').next() == Some(flag))
        };
        let local: Vec<String> = testenv::webhooks::local_args(&binary)
            .iter()
            .filter(|a| !chosen(a))
            .map(|a| a.to_string())
            .collect();
        args.extend(local);
        let process = start_manager(plane, crds, &binary, &args).await?;
        managers.push(Manager {
            process,
            binary,
            args,
        });
    }
    Ok(managers)
}

/// A manager process and how it was started, so that it can be started again.
pub struct Manager {
    pub process: ManagerProcess,
    binary: PathBuf,
    args: Vec<String>,
}

impl Manager {
    pub fn name(&self) -> String {
        self.binary
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Kills the process with SIGKILL (no shutdown of any kind, as a node crash or an OOM kill would)
    /// and starts it again with the same arguments; returns the new PID.
    pub async fn kill_and_restart(
        &mut self,
        plane: &ManagementPlane,
        crds: &[CustomResourceDefinition],
    ) -> Result<u32, String> {
        self.kill().await?;
        self.restart(plane, crds).await
    }

    /// Kills the process with SIGKILL and waits until it is gone: it releases nothing.
    pub async fn kill(&mut self) -> Result<(), String> {
        let pid = self.process.process().pid();
        let killed = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .map_err(|e| format!("kill -9 {pid}: {e}"))?;
        if !killed.success() {
            return Err(format!("kill -9 {pid} failed"));
        }
        if !wait_gone(&[pid], Duration::from_secs(10)).await.is_empty() {
            return Err(format!("{} (pid {pid}) survived kill -9", self.name()));
        }
        Ok(())
    }

    /// Starts the manager again with the same arguments (after [`Manager::kill`]); returns the new PID.
    pub async fn restart(
        &mut self,
        plane: &ManagementPlane,
        crds: &[CustomResourceDefinition],
    ) -> Result<u32, String> {
        self.process = start_manager(plane, crds, &self.binary, &self.args).await?;
        Ok(self.process.process().pid())
    }
}

/// Starts one manager, waits until it is ready and routes its webhooks through the apiserver.
async fn start_manager(
    plane: &ManagementPlane,
    crds: &[CustomResourceDefinition],
    binary: &std::path::Path,
    args: &[String],
) -> Result<ManagerProcess, String> {
    let name = binary.display();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut manager = ManagerProcess::start_logging(
        binary,
        plane.kubeconfig_path(),
        plane.dir(),
        &args,
        Some(MANAGER_LOG_FILTER),
    )
    .map_err(|e| format!("{name} starts: {e}"))?;
    manager
        .wait_ready(Duration::from_secs(60))
        .await
        .map_err(|e| format!("{name} ready: {e}"))?;
    let serving = manager
        .webhook()
        .ok_or_else(|| format!("{name} serves no webhooks"))?
        .clone();
    testenv::webhooks::route_group_to(
        plane,
        testenv::webhooks::owned_group(binary),
        crds,
        &serving.url(),
        &serving.ca_pem,
    )
    .await
    .map_err(|e| format!("{name} webhooks: {e}"))?;
    Ok(manager)
}

/// Server-side applies every document of `yaml` (default namespace [`NS`]), as
/// `kubectl apply --server-side` would.
pub async fn apply_yaml(client: &kube::Client, yaml: &str) -> Result<(), String> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(yaml).map_err(|e| format!("not YAML: {e}"))?;
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        let api_version = doc["apiVersion"].as_str().unwrap_or_default().to_owned();
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &kind));
        let obj: DynamicObject = serde_json::from_value(doc).map_err(|e| format!("{kind}: {e}"))?;
        let ns = obj.namespace().unwrap_or_else(|| NS.to_owned());
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
        api.patch(
            &obj.name_any(),
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(&obj),
        )
        .await
        .map_err(|e| format!("apply {kind} {}: {e}", obj.name_any()))?;
    }
    Ok(())
}

impl Env {
    /// Starts everything; `controlplane_args` go to `controlplane-manager run`.
    pub async fn start(controlplane_args: &[&str]) -> Env {
        Self::start_with(Providers::Ours(&[], controlplane_args), Default::default()).await
    }

    /// [`Env::start`] with leader election on in both our managers, their Leases in [`NS`].
    pub async fn start_leader_elected() -> Env {
        let args = ["--leader-elect", "--leader-election-namespace", NS];
        Self::start_with(Providers::Ours(&args, &args), Default::default()).await
    }

    /// The same world with Cluster API's own kubeadm bootstrap and control-plane managers in place of
    /// ours: the peer we measure ourselves against.
    pub async fn start_peer() -> Env {
        Self::start_with(Providers::ClusterApi, Default::default()).await
    }

    /// [`Env::start`] (`peer` false) or [`Env::start_peer`] with kube-apiserver `options`, e.g. an
    /// audit log.
    pub async fn start_with_apiserver(
        peer: bool,
        controlplane_args: &[&str],
        options: ApiServerOptions,
    ) -> Env {
        let providers = if peer {
            Providers::ClusterApi
        } else {
            Providers::Ours(&[], controlplane_args)
        };
        Self::start_with(providers, options).await
    }

    async fn start_with(providers: Providers<'_>, options: ApiServerOptions) -> Env {
        init_tracing();
        let started = Instant::now();
        let plane = ManagementPlane::start_with(options)
            .await
            .expect("management plane starts");
        let crds = match providers {
            Providers::Ours(..) => all_crds(),
            Providers::ClusterApi => sim::api::crds(),
        };
        plane.install_crds(&crds).await.expect("CRDs install");
        let mut core = start_core(&plane).await.unwrap_or_else(|e| panic!("{e}"));
        let (mut managers, mut peer) = match providers {
            Providers::Ours(bootstrap_args, controlplane_args) => (
                start_managers(&plane, &crds, bootstrap_args, controlplane_args)
                    .await
                    .unwrap_or_else(|e| panic!("{e}")),
                Vec::new(),
            ),
            Providers::ClusterApi => (
                Vec::new(),
                start_peer_managers(&plane)
                    .await
                    .unwrap_or_else(|e| panic!("{e}")),
            ),
        };
        let client = plane.client().await.unwrap();
        let sim = Sim::start(client.clone(), sim_options(&plane));
        println!("environment up in {:.1?}", started.elapsed());
        let mut manager_pids: Vec<u32> = managers
            .iter_mut()
            .map(|m| m.process.process().pid())
            .collect();
        manager_pids.extend(peer.iter_mut().map(|m| m.process().pid()));
        manager_pids.push(core.process().pid());
        Env {
            sim,
            core,
            managers,
            peer,
            installed: Vec::new(),
            retired: Vec::new(),
            clusterctl: None,
            service_network: None,
            manager_pids,
            crds,
            plane,
            client,
            started,
        }
    }

    /// A world installed as users install it: `clusterctl init` of Cluster API's core, our providers and
    /// the simulated infrastructure from a local repository, the installed Deployments running as
    /// processes with the installed arguments, identities and webhook Services (see
    /// [`crate::installed`]).
    pub async fn start_installed() -> Env {
        Self::start_installed_with(Vec::new()).await
    }

    /// [`Env::start_installed`] with `more` in the clusterctl repository, not installed.
    pub async fn start_installed_with(more: Vec<testenv::clusterctl::RepositoryProvider>) -> Env {
        Self::install(Sim::start, Kubeadm::Ours, more).await
    }

    /// [`Env::start_installed`] with Cluster API's own kubeadm providers in place of ours (in
    /// [`Env::peer`]), as a user's management cluster is before switching to ours.
    pub async fn start_installed_cluster_api() -> Env {
        Self::install(Sim::start, Kubeadm::ClusterApi, Vec::new()).await
    }

    /// [`Env::start_installed`] on a second management plane whose simulator shares `other`'s cloud:
    /// the target of a `clusterctl move`.
    pub async fn start_installed_sharing(other: &Env) -> Env {
        Self::install(
            |client, options| other.sim.share_cloud(client, options),
            Kubeadm::Ours,
            Vec::new(),
        )
        .await
    }

    async fn install(
        sim: impl FnOnce(kube::Client, SimOptions) -> Sim,
        kubeadm: Kubeadm,
        more: Vec<testenv::clusterctl::RepositoryProvider>,
    ) -> Env {
        init_tracing();
        let started = Instant::now();
        let network = sim::netns::Fabric::create().expect("a bridge for the webhook Services");
        let host = std::net::IpAddr::V4(network.gateway());
        let plane = crate::installed::management_plane().await;
        let installed = crate::installed::install(&plane, host, kubeadm, more)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let client = plane.client().await.unwrap();
        let sim = sim(client.clone(), sim_options(&plane));
        println!(
            "environment installed by clusterctl in {:.1?}",
            started.elapsed()
        );
        let mut managers = installed.managers.into_iter();
        let mut core = managers.next().expect("the core manager");
        let mut kubeadm_managers: Vec<ManagerProcess> = managers.collect();
        let mut manager_pids: Vec<u32> = kubeadm_managers
            .iter_mut()
            .map(|m| m.process().pid())
            .collect();
        manager_pids.push(core.process().pid());
        let (ours, peer) = match kubeadm {
            Kubeadm::Ours => (kubeadm_managers, Vec::new()),
            Kubeadm::ClusterApi => (Vec::new(), kubeadm_managers),
        };
        Env {
            sim,
            core,
            managers: Vec::new(),
            peer,
            installed: ours,
            retired: Vec::new(),
            clusterctl: Some(installed.repository),
            service_network: Some(network),
            manager_pids,
            crds: all_crds(),
            plane,
            client,
            started,
        }
    }

    /// After `clusterctl upgrade` replaced our components: stops our manager processes, does
    /// cert-manager's and the role aggregation controller's work for the re-created objects, and runs
    /// the Deployments as they are now.
    pub async fn rerun_installed(&mut self) {
        for mut manager in self.installed.drain(..) {
            manager.process().stop();
        }
        crate::installed::after_clusterctl(&self.plane)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        self.installed =
            crate::installed::run_kubeadm(&self.plane, self.service_host(), Kubeadm::Ours)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        for manager in &mut self.installed {
            self.manager_pids.push(manager.process().pid());
        }
    }

    /// Where the installed webhook Services' endpoints point.
    fn service_host(&self) -> std::net::IpAddr {
        let network = self
            .service_network
            .as_ref()
            .expect("installed by clusterctl");
        std::net::IpAddr::V4(network.gateway())
    }

    /// Switches the installed kubeadm providers (ours, or Cluster API's in [`Env::peer`]) to `to`'s
    /// with clusterctl, as a user swapping providers under live clusters does (see
    /// [`crate::installed::switch`]): the old managers' processes stop once `clusterctl delete` removed
    /// their Deployments (ours stay in [`Env::retired`] for their logs), and `to`'s run as their new
    /// Deployments say. Returns clusterctl's output.
    pub async fn switch_with_clusterctl(&mut self, to: Kubeadm) -> String {
        let from = self
            .clusterctl
            .take()
            .expect("providers installed by clusterctl");
        let (old_ours, old_peer) = (
            std::mem::take(&mut self.installed),
            std::mem::take(&mut self.peer),
        );
        let retired = &mut self.retired;
        let stop = || {
            for mut manager in old_ours {
                manager.process().stop();
                retired.push(manager);
            }
            for mut manager in old_peer {
                manager.process().stop();
            }
        };
        let (repository, output) = crate::installed::switch(&self.plane, &from, to, stop)
            .await
            .unwrap_or_else(|e| panic!("switch to {} kubeadm providers: {e}", to.who()));
        self.clusterctl = Some(repository);
        let mut started = crate::installed::run_kubeadm(&self.plane, self.service_host(), to)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        for manager in &mut started {
            self.manager_pids.push(manager.process().pid());
        }
        match to {
            Kubeadm::Ours => self.installed = started,
            Kubeadm::ClusterApi => self.peer = started,
        }
        output
    }

    /// Kills manager `index` (0 bootstrap, 1 control plane) with SIGKILL and starts it again.
    pub async fn kill_and_restart_manager(&mut self, index: usize) -> Result<String, String> {
        let manager = &mut self.managers[index];
        let pid = manager.kill_and_restart(&self.plane, &self.crds).await?;
        self.manager_pids.push(pid);
        Ok(manager.name())
    }

    /// Fails when a manager of this environment (ours, Cluster API's core and kubeadm managers, the
    /// installed ones) exited by itself: every manager runs to the end of its scenario unless the
    /// scenario stopped or killed it, and one it killed runs again.
    pub fn assert_no_manager_exited(&mut self) {
        let running = self
            .managers
            .iter_mut()
            .map(|m| &mut m.process)
            .chain(self.peer.iter_mut())
            .chain(self.installed.iter_mut())
            .chain(std::iter::once(&mut self.core));
        let mut exited = Vec::new();
        for manager in running {
            if let Some(status) = manager.process().try_exit_status() {
                let name = manager.name().to_owned();
                let log = manager.process().log_tail(30);
                exited.push(format!("{name} ({status}):\n{log}"));
            }
        }
        assert!(
            exited.is_empty(),
            "managers exited during the scenario:\n{}",
            exited.join("\n")
        );
    }

    /// Peak resident memory (VmHWM, KiB) of each running manager, by name.
    pub fn manager_peak_memory(&mut self) -> Vec<(String, u64)> {
        self.managers
            .iter_mut()
            .map(|m| {
                let pid = m.process.process().pid();
                let status =
                    std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                let kib = status
                    .lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                    .unwrap_or(0);
                (m.name(), kib)
            })
            .collect()
    }

    /// PIDs of every process this environment started that runs now.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = self.plane.pids();
        pids.extend(&self.manager_pids);
        pids.extend(self.sim.pids());
        pids
    }

    /// Renders the simulated-infrastructure cluster template with `vars` and applies every object.
    pub async fn apply_template(&self, vars: &BTreeMap<&str, String>) {
        self.apply(&render_sim_template(vars)).await;
    }

    /// Server-side applies every document of `yaml`, as `kubectl apply --server-side` would.
    pub async fn apply(&self, yaml: &str) {
        apply_yaml(&self.client, yaml)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    pub async fn kcp(&self, name: &str) -> KubeadmControlPlane {
        Api::<KubeadmControlPlane>::namespaced(self.client.clone(), NS)
            .get(name)
            .await
            .unwrap()
    }

    pub async fn scale_control_plane(&self, name: &str, replicas: i32) {
        let patch = serde_json::json!({ "spec": { "replicas": replicas } });
        Api::<KubeadmControlPlane>::namespaced(self.client.clone(), NS)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Arms a simulator fault (`sim::faults`, e.g. `partition-mid-join`) for the next control-plane join
    /// of `cluster`, with its delay in seconds where it takes one; waits until the simulator took it.
    pub async fn arm_next_join(&self, cluster: &str, fault: &str, delay_seconds: Option<u64>) {
        let sim_clusters: Api<sim::api::SimCluster> = Api::namespaced(self.client.clone(), NS);
        let mut annotations = serde_json::json!({ sim::faults::NEXT_JOIN_FAULT_ANNOTATION: fault });
        if let Some(d) = delay_seconds {
            annotations[sim::faults::FAULT_DELAY_ANNOTATION] = serde_json::json!(d.to_string());
        }
        let patch = serde_json::json!({ "metadata": { "annotations": annotations } });
        sim_clusters
            .patch(cluster, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while sim_clusters
            .get(cluster)
            .await
            .unwrap()
            .annotations()
            .contains_key(sim::faults::NEXT_JOIN_FAULT_ANNOTATION)
        {
            assert!(
                Instant::now() < deadline,
                "the simulator never took the {fault} fault"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The cluster's bootstrap data Secrets that run `kubeadm init`, by name, with their data.
    pub async fn init_secrets(&self, cluster: &str) -> BTreeMap<String, String> {
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(self.client.clone(), NS)
            .list(
                &kube::api::ListParams::default()
                    .labels(&format!("cluster.x-k8s.io/cluster-name={cluster}")),
            )
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|s| s.type_.as_deref() == Some("cluster.x-k8s.io/secret"))
            .filter_map(|s| {
                let value = s.data.as_ref()?.get("value")?;
                let value = String::from_utf8_lossy(&value.0).into_owned();
                value
                    .contains("kubeadm init")
                    .then(|| (s.name_any(), value))
            })
            .collect()
    }

    /// The UID of each of the cluster's long-lived Secrets (its CAs, service-account key, kubeconfig),
    /// `None` for one that is missing.
    pub async fn cluster_secret_uids(&self, cluster: &str) -> BTreeMap<String, Option<String>> {
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.client.clone(), NS);
        let mut uids = BTreeMap::new();
        for kind in ["ca", "etcd", "sa", "proxy", "kubeconfig"] {
            let name = format!("{cluster}-{kind}");
            let uid = secrets
                .get_opt(&name)
                .await
                .ok()
                .flatten()
                .and_then(|s| s.uid());
            uids.insert(name, uid);
        }
        uids
    }

    pub async fn machines(&self, cluster: &str) -> Vec<Machine> {
        let mut items = Api::<Machine>::namespaced(self.client.clone(), NS)
            .list(
                &kube::api::ListParams::default()
                    .labels(&format!("cluster.x-k8s.io/cluster-name={cluster}")),
            )
            .await
            .unwrap()
            .items;
        items.sort_by_key(|m| m.creation_timestamp().map(|t| t.0));
        items
    }

    /// Waits until the control plane has `replicas` machines, all up to date and ready with a Node, and
    /// none deleting; panics after `timeout` with what it saw.
    pub async fn wait_control_plane(
        &self,
        kcp: &str,
        replicas: i32,
        timeout: Duration,
        what: &str,
    ) {
        let cluster = kcp.trim_end_matches("-control-plane");
        self.wait_control_plane_of(cluster, kcp, replicas, timeout, what)
            .await
    }

    /// [`Env::wait_control_plane`] for a control plane not named after its cluster (e.g. one the
    /// topology controller created).
    pub async fn wait_control_plane_of(
        &self,
        cluster: &str,
        kcp: &str,
        replicas: i32,
        timeout: Duration,
        what: &str,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            let status = self.kcp(kcp).await.status.unwrap_or_default();
            let machines: Vec<Machine> = self
                .machines(cluster)
                .await
                .into_iter()
                .filter(|m| m.labels().contains_key("cluster.x-k8s.io/control-plane"))
                .collect();
            let settled = machines.len() == replicas as usize
                && machines.iter().all(|m| {
                    m.meta().deletion_timestamp.is_none()
                        && m.status.as_ref().is_some_and(|s| s.node_ref.is_some())
                })
                && status.replicas == Some(replicas)
                && status.ready_replicas == Some(replicas)
                && status.up_to_date_replicas == Some(replicas);
            if settled {
                return;
            }
            if Instant::now() > deadline {
                let conditions: Vec<String> = status
                    .conditions
                    .iter()
                    .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
                    .collect();
                let machines: Vec<String> = machines
                    .iter()
                    .map(|m| {
                        let s = m.status.clone().unwrap_or_default();
                        format!(
                            "{} phase={:?} node={:?} deleting={}",
                            m.name_any(),
                            s.phase,
                            s.node_ref.map(|n| n.name),
                            m.meta().deletion_timestamp.is_some()
                        )
                    })
                    .collect();
                panic!(
                    "{what}: control plane not at {replicas} after {timeout:?}: replicas={:?} ready={:?} upToDate={:?}\nmachines: {machines:#?}\nconditions: {conditions:#?}\n{}",
                    status.replicas,
                    status.ready_replicas,
                    status.up_to_date_replicas,
                    self.diagnostics().await
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

impl Env {
    /// What a failing scenario should show: the Clusters' status and the end of each manager's log.
    /// Fails when a line our managers logged holds key material, a kubeconfig's credentials or the
    /// secret half of a bootstrap token the KubeadmConfigs carry now.
    pub async fn assert_no_secrets_logged(&self) {
        const MARKERS: [&str; 5] = [
            "PRIVATE KEY",
            // `-----BEGIN` in base64, as Secret data and kubeconfig fields hold it.
            "LS0tLS1CRUdJTi",
            "client-key-data",
            "client-certificate-data",
            "token-secret",
        ];
        let configs = Api::<kubeadm_api::bootstrap::v1beta2::KubeadmConfig>::namespaced(
            self.client.clone(),
            NS,
        )
        .list(&Default::default())
        .await
        .expect("KubeadmConfigs listed");
        let token_secrets: Vec<String> = configs
            .items
            .iter()
            .filter_map(|c| {
                let token = c
                    .spec
                    .join_configuration
                    .discovery
                    .bootstrap_token
                    .token
                    .as_ref()?;
                Some(token.split_once('.')?.1.to_owned())
            })
            .filter(|secret| secret.len() >= 16)
            .collect();
        let mut found = Vec::new();
        let ours: Vec<&ManagerProcess> = self
            .managers
            .iter()
            .map(|m| &m.process)
            .chain(&self.installed)
            .chain(&self.retired)
            .collect();
        assert!(!ours.is_empty(), "no managers of ours to check");
        for manager in ours {
            let log = manager.log();
            for (n, line) in log.lines().enumerate() {
                let leaked = MARKERS
                    .iter()
                    .copied()
                    .chain(token_secrets.iter().map(String::as_str))
                    .find(|secret| line.contains(secret));
                if let Some(secret) = leaked {
                    let what = if MARKERS.contains(&secret) {
                        secret
                    } else {
                        "a bootstrap token's secret"
                    };
                    found.push(format!("{} line {}: {what}", manager.name(), n + 1));
                }
            }
        }
        assert!(found.is_empty(), "secrets in the managers' logs: {found:?}");
    }

    pub async fn diagnostics(&self) -> String {
        let clusters =
            Api::<kubeadm_api::cluster::v1beta2::Cluster>::namespaced(self.client.clone(), NS)
                .list(&Default::default())
                .await
                .map(|l| {
                    l.items
                        .iter()
                        .map(|c| {
                            format!(
                                "Cluster {}: spec.controlPlaneEndpoint={:?} status={:?}",
                                c.name_any(),
                                c.spec.control_plane_endpoint,
                                c.status
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_else(|e| e.to_string());
        let logs: Vec<String> = self
            .managers
            .iter()
            .map(|m| &m.process)
            .chain(&self.peer)
            .chain(&self.installed)
            .chain([&self.core])
            .map(|process| {
                let log = process.log();
                let tail: Vec<&str> = log.lines().rev().take(25).collect();
                format!(
                    "--- manager log tail ---\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect();
        format!(
            "{clusters}\n--- simulated machines ---\n{}{}",
            self.sim.view().describe(),
            logs.join("\n")
        )
    }
}

/// `templates/cluster-template-sim.yaml` rendered with the settings of `templates/clusterctl.yaml.example`
/// and `vars` on top, as `controlplane-manager generate cluster --config` renders it.
pub fn render_sim_template(vars: &BTreeMap<&str, String>) -> String {
    render_template(SIM_TEMPLATE, vars)
}

/// A template of `templates/` (its path) rendered like [`render_sim_template`].
pub fn render_template(path: &str, vars: &BTreeMap<&str, String>) -> String {
    use kubeadm_tools::template::{Settings, generate};
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let example = std::fs::read_to_string(CLUSTERCTL_EXAMPLE).unwrap();
    let mut settings =
        Settings::from_clusterctl_yaml("templates/clusterctl.yaml.example", &example).unwrap();
    for (name, value) in vars {
        settings.set(name, value.clone());
    }
    let shown = path.rsplit_once("/../../").map_or(path, |(_, p)| p);
    generate(&text, shown, &settings).unwrap_or_else(|e| panic!("{e}"))
}

/// Waits until none of `pids` runs (bounded), returning those still alive.
pub async fn wait_gone(pids: &[u32], timeout: Duration) -> Vec<u32> {
    let deadline = Instant::now() + timeout;
    loop {
        let alive: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|p| testenv::process::pid_alive(*p))
            .collect();
        if alive.is_empty() || Instant::now() > deadline {
            return alive;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
