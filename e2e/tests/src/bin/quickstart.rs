//! `quickstart`: a whole Cluster API setup on this machine. A local management plane (etcd +
//! kube-apiserver), both managers with their webhooks, the simulated infrastructure, and a cluster from
//! `templates/cluster-template-sim.yaml` (3 control-plane machines, 2 workers by default) whose machines
//! run real etcd members and kube-apiservers. Shows the progress until the cluster is ready, then how to
//! look at it, roll it by bumping a generation counter, and tear it down (Ctrl-C). With `--nodes real` the
//! machines are real nodes instead (`templates/cluster-template-sim-real.yaml`): systemd-nspawn machines
//! that boot the bootstrap data with real cloud-init, containerd and kubelet.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use e2e_tests::env::{
    NS, REAL_NODES_TEMPLATE, SIM_TEMPLATE, all_crds, apply_yaml, start_core, start_managers,
};
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use kubeadm_api::cluster::v1beta2::Machine;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_tools::template::{ClusterOptions, Settings, generate};
use sim::{Sim, SimOptions};
use testenv::ManagementPlane;

#[derive(Parser)]
#[command(
    name = "quickstart",
    about = "Start a local management plane with both managers and simulated machines, create a cluster from templates/cluster-template-sim.yaml and wait until it is ready"
)]
struct Args {
    /// Folder for the management plane, the nodes and the settings (a new subfolder per run).
    #[arg(long, default_value = ".quickstart")]
    dir: PathBuf,
    /// Name of the cluster.
    #[arg(long, default_value = "demo")]
    name: String,
    #[arg(long, default_value_t = 3)]
    control_plane_machine_count: i64,
    #[arg(long, default_value_t = 2)]
    worker_machine_count: i64,
    /// Give up waiting for the cluster after this many seconds.
    #[arg(long, default_value_t = 900)]
    timeout_seconds: u64,
    /// Stop everything once the cluster is ready instead of waiting for Ctrl-C.
    #[arg(long)]
    exit_when_ready: bool,
    /// What the machines are: simulated (fast), or real systemd-nspawn nodes booting with real
    /// cloud-init, containerd and kubelet (`hack/install-testenv.sh quickstart nodes` builds them).
    #[arg(long, value_enum, default_value_t = Nodes::Simulated)]
    nodes: Nodes,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Nodes {
    Simulated,
    Real,
}

impl Nodes {
    /// The template's path, and its name as the user sees it.
    fn template(self) -> (&'static str, &'static str) {
        match self {
            Nodes::Simulated => (SIM_TEMPLATE, "templates/cluster-template-sim.yaml"),
            Nodes::Real => (
                REAL_NODES_TEMPLATE,
                "templates/cluster-template-sim-real.yaml",
            ),
        }
    }

    /// The Kubernetes release the machines run: simulated ones the newest built here, which the
    /// management plane runs too (one build for both); real nodes the one `hack/tools/k8s-node` builds.
    fn kubernetes_version(self) -> String {
        match self {
            Nodes::Simulated => testenv::binaries::newest_kubernetes(),
            Nodes::Real => testenv::binaries::ToolModule::KubernetesNode.version(),
        }
    }
}

/// The settings the template is rendered with, written where the user can bump them.
fn settings(nodes: Nodes) -> String {
    format!(
        "\
# Settings for {} (see templates/clusterctl.yaml.example).
# Bump a counter and re-apply the rendered template to roll that group of machines.
CONTROL_PLANE_MACHINE_GEN: genc01
WORKER_MACHINE_GEN: genw01
KUBERNETES_VERSION: {}
",
        nodes.template().1,
        nodes.kubernetes_version()
    )
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickstart: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<(), String> {
    let started = Instant::now();
    if args.nodes == Nodes::Real {
        // Said before anything starts: what is missing, and what builds it.
        sim::nspawn::NodeComponents::current().map_err(|e| {
            format!(
                "real nodes: {e}\n(`make quickstart QUICKSTART_ARGS='--nodes real'` installs and builds what they run)"
            )
        })?;
    }
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| format!("create {}: {e}", args.dir.display()))?;
    let run_dir = tempfile::Builder::new()
        .prefix("run-")
        .tempdir_in(&args.dir)
        .map_err(|e| format!("create a folder in {}: {e}", args.dir.display()))?;
    let workdir = run_dir.path().to_path_buf();

    step(
        started,
        "starting etcd and kube-apiserver (the management plane) on 127.0.0.1",
    );
    let plane = ManagementPlane::start_in(run_dir)
        .await
        .map_err(|e| format!("management plane: {e}"))?;
    let crds = all_crds();
    plane
        .install_crds(&crds)
        .await
        .map_err(|e| format!("installing CRDs: {e}"))?;
    step(
        started,
        "starting bootstrap-manager and controlplane-manager with their webhooks",
    );
    step(started, "starting Cluster API's core manager");
    let _core = start_core(&plane).await?;
    let _managers = start_managers(&plane, &crds, &[], &[]).await?;
    let client = plane
        .client()
        .await
        .map_err(|e| format!("management client: {e}"))?;
    step(
        started,
        match args.nodes {
            Nodes::Simulated => "starting the simulated infrastructure",
            Nodes::Real => {
                "starting the simulated infrastructure with real nodes (systemd-nspawn, cloud-init, containerd, kubelet)"
            }
        },
    );
    let sim = Sim::start(
        client.clone(),
        SimOptions {
            dir: workdir.join("nodes"),
            namespace: Some(NS.into()),
            period: Duration::from_millis(300),
            core: sim::controller::Core::ClusterApi,
        },
    );

    let settings_path = workdir.join("clusterctl.yaml");
    std::fs::write(&settings_path, settings(args.nodes))
        .map_err(|e| format!("write {}: {e}", settings_path.display()))?;
    let rendered = render(args, &settings_path)?;
    let cluster_yaml = workdir.join("cluster.yaml");
    std::fs::write(&cluster_yaml, &rendered)
        .map_err(|e| format!("write {}: {e}", cluster_yaml.display()))?;
    step(
        started,
        &format!(
            "applying {} ({} control-plane machines, {} workers)",
            cluster_yaml.display(),
            args.control_plane_machine_count,
            args.worker_machine_count
        ),
    );
    apply_yaml(&client, &rendered).await?;

    let deadline = Instant::now() + Duration::from_secs(args.timeout_seconds);
    let mut last = String::new();
    let stop = stop_signal();
    tokio::pin!(stop);
    loop {
        let progress = Progress::read(&client, &args.name).await;
        let line = progress.line();
        if line != last {
            step(started, &line);
            last = line;
        }
        if progress.ready(args) {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the cluster was not ready after {} s; the managers' logs are in {}",
                args.timeout_seconds,
                workdir.display()
            ));
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = &mut stop => {
                // Everything this command started stops as the values holding it drop.
                println!("stopping before the cluster was ready ...");
                return Ok(());
            }
        }
    }

    let workload_kubeconfig = workdir.join("workload.kubeconfig");
    write_workload_kubeconfig(&client, &args.name, &workload_kubeconfig).await?;
    step(started, "the cluster is ready");
    print_next_steps(args, &plane, &workdir, &workload_kubeconfig);
    if args.exit_when_ready {
        println!("stopping (--exit-when-ready)");
    } else {
        println!(
            "\nPress Ctrl-C to stop every process and remove {}",
            workdir.display()
        );
        stop.await;
        println!("stopping ...");
    }
    drop(sim);
    Ok(())
}

/// Ctrl-C, or SIGTERM: either stops every process and node this command started.
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn step(started: Instant, what: &str) {
    println!("[{:>4}s] {what}", started.elapsed().as_secs());
}

fn render(args: &Args, settings_path: &Path) -> Result<String, String> {
    let (path, name) = args.nodes.template();
    let template = std::fs::read_to_string(path).map_err(|e| format!("read {path}: {e}"))?;
    let settings = Settings::load(Some(settings_path), std::env::vars())
        .and_then(|s| {
            s.for_cluster(&ClusterOptions {
                cluster_name: args.name.clone(),
                target_namespace: Some(NS.into()),
                kubernetes_version: None,
                control_plane_machine_count: Some(args.control_plane_machine_count),
                worker_machine_count: Some(args.worker_machine_count),
            })
        })
        .map_err(|e| e.to_string())?;
    generate(&template, name, &settings).map_err(|e| e.to_string())
}

/// What the progress line shows.
#[derive(Default)]
struct Progress {
    control_plane: Option<(i32, i32, i32, i32)>,
    rolling: Option<String>,
    workers: usize,
    workers_with_node: usize,
    machines: BTreeMap<String, usize>,
}

impl Progress {
    async fn read(client: &kube::Client, cluster: &str) -> Progress {
        let mut progress = Progress::default();
        let kcps: Api<KubeadmControlPlane> = Api::namespaced(client.clone(), NS);
        if let Ok(Some(kcp)) = kcps.get_opt(&format!("{cluster}-control-plane")).await {
            let status = kcp.status.unwrap_or_default();
            progress.control_plane = Some((
                kcp.spec.replicas.unwrap_or(1),
                status.replicas.unwrap_or(0),
                status.ready_replicas.unwrap_or(0),
                status.up_to_date_replicas.unwrap_or(0),
            ));
            progress.rolling = status
                .conditions
                .iter()
                .find(|c| c.type_ == "RollingOut" && c.status == "True")
                .map(|c| c.message.clone());
        }
        let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
        let selector = format!("cluster.x-k8s.io/cluster-name={cluster}");
        if let Ok(list) = machines
            .list(&ListParams::default().labels(&selector))
            .await
        {
            for m in &list.items {
                let status = m.status.clone().unwrap_or_default();
                let phase = if m.meta().deletion_timestamp.is_some() {
                    "Deleting".to_owned()
                } else {
                    format!("{:?}", status.phase.unwrap_or_default())
                };
                *progress.machines.entry(phase).or_default() += 1;
                if !m.labels().contains_key("cluster.x-k8s.io/control-plane") {
                    progress.workers += 1;
                    if status.node_ref.is_some() {
                        progress.workers_with_node += 1;
                    }
                }
            }
        }
        progress
    }

    fn line(&self) -> String {
        let control_plane = match self.control_plane {
            Some((want, have, ready, up_to_date)) => format!(
                "control plane: {ready}/{want} ready ({have} machines, {up_to_date} up to date)"
            ),
            None => "control plane: not created yet".into(),
        };
        let phases: Vec<String> = self
            .machines
            .iter()
            .map(|(phase, n)| format!("{n} {phase}"))
            .collect();
        let mut line = format!(
            "{control_plane} · workers: {}/{} with a Node · machines: {}",
            self.workers_with_node,
            self.workers,
            if phases.is_empty() {
                "none yet".into()
            } else {
                phases.join(", ")
            }
        );
        if let Some(rolling) = &self.rolling {
            line.push_str(&format!(" · {rolling}"));
        }
        line
    }

    fn ready(&self, args: &Args) -> bool {
        let want = i32::try_from(args.control_plane_machine_count).unwrap_or(i32::MAX);
        self.control_plane
            .is_some_and(|(_, have, ready, up)| have == want && ready == want && up == want)
            && self.workers_with_node == usize::try_from(args.worker_machine_count).unwrap_or(0)
            && self.workers == self.workers_with_node
    }
}

async fn write_workload_kubeconfig(
    client: &kube::Client,
    cluster: &str,
    path: &Path,
) -> Result<(), String> {
    let kubeconfig = e2e_tests::api_probe::workload_kubeconfig(client, NS, cluster).await?;
    std::fs::write(path, kubeconfig).map_err(|e| format!("write {}: {e}", path.display()))
}

fn print_next_steps(args: &Args, plane: &ManagementPlane, workdir: &Path, workload: &Path) {
    let management = plane.kubeconfig_path().display();
    let settings = workdir.join("clusterctl.yaml");
    let settings = settings.display();
    let name = &args.name;
    let workload = workload.display();
    println!(
        "
Look at it (kubectl comes with Debian's kubernetes-client package):
  export KUBECONFIG={management}
  kubectl get cluster,kcp,machinedeployments,machines
  kubectl get machines -L controlplane.cluster.x-k8s.io/machine-generation
  kubectl --kubeconfig {workload} get nodes -o wide
  kubectl --kubeconfig {workload} -n kube-system get pods

Roll every control-plane machine to a new generation (one at a time, etcd never below quorum):
  target/debug/controlplane-manager bump-generation --control-plane {settings}
  target/debug/controlplane-manager generate cluster {name} --from {template} \\
      --config {settings} --control-plane-machine-count {cp} --worker-machine-count {workers} \\
    | kubectl apply --server-side --force-conflicts --field-manager e2e -f -
  kubectl get kcp {name}-control-plane -w
(--workers instead of --control-plane rolls the workers through a new MachineSet.)

Tear it down: Ctrl-C here stops every process this command started.",
        template = args.nodes.template().1,
        cp = args.control_plane_machine_count,
        workers = args.worker_machine_count,
    );
}
