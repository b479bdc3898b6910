//! `controlplane-manager`: Cluster API control-plane provider for kubeadm: manages control-plane machines of KubeadmControlPlane objects.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kubeadm_controlplane::{controller, webhooks};
use kubeadm_runtime::{Manager, ManagerArgs, exit_code, run_manager_with_webhooks};
use kubeadm_tools::template::command::{
    BumpGenerationArgs, GenerateCommand, bump_generation, generate_cluster,
};
use kubeadm_tools::validate::{ValidateArgs, run_validate};

const MANAGER: Manager = Manager {
    name: "controlplane-manager",
    default_lease: "kubeadm-control-plane-manager-leader-election-capi",
};

#[derive(Parser)]
#[command(
    name = "controlplane-manager",
    version = kubeadm_runtime::VERSION,
    about = "Cluster API control-plane provider for kubeadm: manages control-plane machines of KubeadmControlPlane objects"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the manager against the management cluster until SIGTERM.
    Run(Box<RunArgs>),
    /// Print the CRDs of KubeadmControlPlane and KubeadmControlPlaneTemplate as YAML.
    Crds,
    /// Check KubeadmControlPlane and KubeadmControlPlaneTemplate objects in YAML files against the
    /// admission rules; other kinds are ignored. Prints one line per problem, exits 1 if there is any.
    Validate(ValidateArgs),
    /// Render cluster templates offline, as `clusterctl generate` does.
    #[command(subcommand)]
    Generate(GenerateCommand),
    /// Preview what the controller would do to a KubeadmControlPlane, and why, without doing it: the
    /// outdated machines and their reasons, what blocks now, and the steps in order with their etcd part.
    Plan(PlanArgs),
    /// Count up a generation counter in a clusterctl configuration file (`genc01` → `genc02`), so the
    /// next `generate cluster` names new machine templates and re-applying it rolls that group.
    BumpGeneration(BumpGenerationArgs),
}

#[derive(clap::Args)]
struct PlanArgs {
    /// The KubeadmControlPlane's name.
    name: String,
    /// Its namespace.
    #[arg(short, long, default_value = "default")]
    namespace: String,
    /// kubeconfig of the management cluster; the in-cluster or default one without it.
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
    /// Preview with the spec of the KubeadmControlPlane of this name in a YAML file instead (a changed
    /// manifest or a re-rendered cluster template; `-` reads stdin).
    #[arg(short = 'f', long)]
    filename: Option<std::path::PathBuf>,
}

#[derive(clap::Args)]
struct RunArgs {
    #[command(flatten)]
    manager: ManagerArgs,
    /// Directory for scheduled etcd snapshots (`<dir>/<namespace>/<cluster>/etcd-<time>.db`), e.g. a
    /// mounted volume; without it no snapshots are taken.
    #[arg(long)]
    etcd_snapshot_dir: Option<std::path::PathBuf>,
    /// Snapshots kept per cluster; older ones are deleted.
    #[arg(long, default_value_t = 7)]
    etcd_snapshots_keep: usize,
    /// How to reach the workload clusters' etcd: `port-forward` through the workload API server to each
    /// `kube-system/etcd-<node>` pod (needs only the API server port, as Cluster API does), or `direct` at
    /// the client URLs the etcd pods announce (needs the nodes' etcd port reachable from the manager).
    #[arg(long, value_enum, default_value = "port-forward")]
    etcd_access: kubeadm_controlplane::etcd::EtcdAccess,
    /// A learner still not promoted after this long is removed, e.g. 10m.
    #[arg(long, default_value = "10m", value_parser = kubeadm_runtime::duration::parse_duration)]
    etcd_learner_timeout: std::time::Duration,
    /// A member added but never started is removed after this long, e.g. 5m.
    #[arg(long, default_value = "5m", value_parser = kubeadm_runtime::duration::parse_duration)]
    etcd_unstarted_grace: std::time::Duration,
    /// How often a settled control plane with stacked etcd has its etcd members checked (their status
    /// and alarms raise no Kubernetes event; its pods and Nodes wake it at once, and a control plane
    /// that is changing is looked at every few seconds), e.g. 30s or 5m; the sync period when longer
    /// than that.
    #[arg(long, default_value = "5m", value_parser = kubeadm_runtime::duration::parse_duration)]
    etcd_health_period: std::time::Duration,
    /// KubeadmControlPlanes reconciled at the same time.
    #[arg(long, default_value_t = 100)]
    kubeadmcontrolplane_concurrency: u16,
}

fn signed(d: std::time::Duration) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::try_from(d).unwrap_or(k8s_openapi::jiff::SignedDuration::MAX)
}

fn main() -> ExitCode {
    kubeadm_runtime::memory::block_on(execute(Cli::parse().command))
}

async fn execute(command: Command) -> ExitCode {
    match command {
        Command::Run(run) => {
            let RunArgs {
                manager: args,
                etcd_snapshot_dir,
                etcd_snapshots_keep,
                etcd_access,
                etcd_learner_timeout,
                etcd_unstarted_grace,
                etcd_health_period,
                kubeadmcontrolplane_concurrency,
            } = *run;
            let settings = controller::Settings {
                namespace: args.namespace.clone(),
                watch_filter: args.watch_filter.clone(),
                snapshot_dir: etcd_snapshot_dir,
                snapshots_keep: etcd_snapshots_keep,
                etcd_access,
                learner_timeout: signed(etcd_learner_timeout),
                unstarted_grace: signed(etcd_unstarted_grace),
                concurrency: kubeadmcontrolplane_concurrency,
                sync_period: args.sync_period,
                etcd_health_period,
                ..controller::Settings::default()
            };
            let namespace = args.namespace.clone();
            let result = run_manager_with_webhooks(
                &MANAGER,
                &args,
                |client, webhook, shutdown| async move {
                    webhooks::start(client, &namespace, &webhook, shutdown).await
                },
                |client, readiness, shutdown| async move {
                    controller::preflight(&client)
                        .await
                        .map_err(kubeadm_runtime::manager::Error::Controller)?;
                    readiness.set_ready(true);
                    controller::run(client, settings, shutdown).await;
                    Ok(())
                },
            )
            .await;
            exit_code("controlplane-manager", result)
        }
        Command::Plan(args) => {
            kubeadm_tools::exit_code("controlplane-manager plan", plan(&args).await)
        }
        Command::Validate(args) => run_validate(&args, &[kubeadm_api::controlplane::GROUP]),
        Command::Generate(GenerateCommand::Cluster(args)) => kubeadm_tools::exit_code(
            "controlplane-manager generate cluster",
            generate_cluster(&args),
        ),
        Command::BumpGeneration(args) => kubeadm_tools::exit_code(
            "controlplane-manager bump-generation",
            bump_generation(&args),
        ),
        Command::Crds => {
            for crd in kubeadm_api::crd::controlplane_crds() {
                print!("{}", kubeadm_api::crd::to_yaml(&crd));
            }
            ExitCode::SUCCESS
        }
    }
}

/// Prints the preview of `args.name`.
async fn plan(args: &PlanArgs) -> Result<(), String> {
    use kubeadm_controlplane::controller::preview;
    let changed = match &args.filename {
        Some(path) => {
            let file = path.display().to_string();
            let text = if file == "-" {
                std::io::read_to_string(std::io::stdin())
            } else {
                std::fs::read_to_string(path)
            }
            .map_err(|e| format!("{file}: cannot read: {e}"))?;
            Some(
                preview::control_plane_from_yaml(&file, &text, &args.name)
                    .map_err(|e| e.to_string())?,
            )
        }
        None => None,
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| format!("kubeconfig: {e}"))?,
    };
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    let preview = preview::read(&client, &args.namespace, &args.name, changed)
        .await
        .map_err(|e| e.to_string())?;
    println!("KubeadmControlPlane {}/{}", args.namespace, args.name);
    print!("{preview}");
    Ok(())
}
