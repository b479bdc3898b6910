//! `controlplane-manager`: Cluster API control-plane provider for kubeadm: manages control-plane machines of KubeadmControlPlane objects.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kubeadm_api::offline::CONTROLPLANE_GROUP;
use kubeadm_controlplane::cluster_template::{self, ClusterOptions, Settings};
use kubeadm_controlplane::{controller, webhooks};
use kubeadm_runtime::validate::{ValidateArgs, run_validate};
use kubeadm_runtime::{Manager, ManagerArgs, exit_code, run_manager_with_webhooks};

const MANAGER: Manager = Manager {
    name: "controlplane-manager",
    default_lease: "kubeadm-control-plane-manager-leader-election-capi",
};

#[derive(Parser)]
#[command(
    name = "controlplane-manager",
    version,
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
    /// Count up a generation counter in a clusterctl configuration file (`genc01` → `genc02`), so the
    /// next `generate cluster` names new machine templates and re-applying it rolls that group.
    BumpGeneration(BumpGenerationArgs),
}

#[derive(Subcommand)]
enum GenerateCommand {
    /// Print the cluster template with its `${VAR}` variables substituted from the flags, the environment
    /// and the clusterctl configuration file (in that order), like `clusterctl generate cluster`.
    Cluster(GenerateClusterArgs),
}

#[derive(clap::Args)]
struct GenerateClusterArgs {
    /// Name of the cluster: the value of `CLUSTER_NAME`.
    name: String,
    /// The cluster template (`-` reads standard input).
    #[arg(long, value_name = "TEMPLATE")]
    from: PathBuf,
    /// clusterctl configuration file with `KEY: value` settings; without it
    /// `$XDG_CONFIG_HOME/cluster-api/clusterctl.yaml` or `~/.cluster-api/clusterctl.yaml` is read if present.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The value of `NAMESPACE` (default: `default`).
    #[arg(short = 'n', long, value_name = "NS")]
    target_namespace: Option<String>,
    /// The value of `KUBERNETES_VERSION` (else the environment or the configuration file).
    #[arg(long, value_name = "VERSION")]
    kubernetes_version: Option<String>,
    /// The value of `CONTROL_PLANE_MACHINE_COUNT` (else the environment or configuration file, else 1).
    #[arg(long, value_name = "N")]
    control_plane_machine_count: Option<i64>,
    /// The value of `WORKER_MACHINE_COUNT` (else the environment or configuration file, else 0).
    #[arg(long, value_name = "N")]
    worker_machine_count: Option<i64>,
    /// Print the variables the template uses, required and optional, instead of rendering it.
    #[arg(long)]
    list_variables: bool,
}

#[derive(clap::Args)]
#[command(group = clap::ArgGroup::new("counter").required(true).args(["control_plane", "workers"]))]
struct BumpGenerationArgs {
    /// Bump `CONTROL_PLANE_MACHINE_GEN`.
    #[arg(long)]
    control_plane: bool,
    /// Bump `WORKER_MACHINE_GEN`.
    #[arg(long)]
    workers: bool,
    /// The clusterctl configuration file; only the counter's value changes, atomically.
    #[arg(value_name = "CLUSTERCTL_YAML")]
    file: PathBuf,
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
}

fn signed(d: std::time::Duration) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::try_from(d).unwrap_or(k8s_openapi::jiff::SignedDuration::MAX)
}

#[tokio::main]
async fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run(run) => {
            let RunArgs {
                manager: args,
                etcd_snapshot_dir,
                etcd_snapshots_keep,
                etcd_access,
                etcd_learner_timeout,
                etcd_unstarted_grace,
            } = *run;
            let settings = controller::Settings {
                namespace: args.namespace.clone(),
                watch_filter: args.watch_filter.clone(),
                snapshot_dir: etcd_snapshot_dir,
                snapshots_keep: etcd_snapshots_keep,
                etcd_access,
                learner_timeout: signed(etcd_learner_timeout),
                unstarted_grace: signed(etcd_unstarted_grace),
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
        Command::Validate(args) => run_validate(&args, &[CONTROLPLANE_GROUP]),
        Command::Generate(GenerateCommand::Cluster(args)) => {
            report_failure("generate cluster", generate_cluster(&args))
        }
        Command::BumpGeneration(args) => report_failure("bump-generation", bump_generation(&args)),
        Command::Crds => {
            for crd in kubeadm_api::crd::controlplane_crds() {
                print!("{}", kubeadm_api::crd::to_yaml(&crd));
            }
            ExitCode::SUCCESS
        }
    }
}

/// Prints the error (if any) on standard error and turns it into the exit code.
fn report_failure(command: &str, result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("controlplane-manager {command}: {message}");
            ExitCode::FAILURE
        }
    }
}

fn generate_cluster(args: &GenerateClusterArgs) -> Result<(), String> {
    let template_name = args.from.display().to_string();
    let template = if template_name == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map(|_| text)
    } else {
        std::fs::read_to_string(&args.from)
    }
    .map_err(|error| format!("cannot read {template_name}: {error}"))?;
    let config = args.config.clone().or_else(default_clusterctl_config);
    // Variables that are not UTF-8 cannot be substituted into YAML; leave them out rather than panic.
    let env = std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)));
    let settings = Settings::load(config.as_deref(), env)
        .and_then(|settings| {
            settings.for_cluster(&ClusterOptions {
                cluster_name: args.name.clone(),
                target_namespace: args.target_namespace.clone(),
                kubernetes_version: args.kubernetes_version.clone(),
                control_plane_machine_count: args.control_plane_machine_count,
                worker_machine_count: args.worker_machine_count,
            })
        })
        .map_err(|error| error.to_string())?;
    let output = if args.list_variables {
        let variables = cluster_template::list_variables(&template, &template_name)
            .map_err(|error| error.to_string())?;
        cluster_template::variables_report(&variables, &settings)
    } else {
        cluster_template::generate(&template, &template_name, &settings)
            .map_err(|error| error.to_string())?
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(output.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|error| format!("cannot write the output: {error}"))
}

/// The configuration file clusterctl reads when `--config` is not given, if it exists.
fn default_clusterctl_config() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|home| home.join(".config")));
    [
        xdg.map(|folder| folder.join("cluster-api/clusterctl.yaml")),
        home.map(|home| home.join(".cluster-api/clusterctl.yaml")),
    ]
    .into_iter()
    .flatten()
    .find(|path| Path::is_file(path))
}

fn bump_generation(args: &BumpGenerationArgs) -> Result<(), String> {
    let variable = if args.control_plane {
        cluster_template::CONTROL_PLANE_MACHINE_GEN
    } else {
        cluster_template::WORKER_MACHINE_GEN
    };
    let bump =
        cluster_template::bump_file(&args.file, variable).map_err(|error| error.to_string())?;
    println!(
        "{}:{}: {}: {} -> {}",
        args.file.display(),
        bump.line,
        bump.variable,
        bump.old,
        bump.new
    );
    Ok(())
}
