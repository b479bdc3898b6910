//! `bootstrap-manager`: Cluster API bootstrap provider for kubeadm: renders node bootstrap data for KubeadmConfig objects.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use kubeadm_api::bootstrap::file_template;
use kubeadm_bootstrap::render::{
    ClusterFacts, JoinFacts, MachineFacts, RenderError, RenderInput, Role, render,
};
use kubeadm_bootstrap::{controller, webhooks};
use kubeadm_runtime::{Manager, ManagerArgs, exit_code, run_manager_with_webhooks};
use kubeadm_tools::render::{self as offline, Inputs, Refusal, RenderArgs};
use kubeadm_tools::validate::{ValidateArgs, run_validate};

const MANAGER: Manager = Manager {
    name: "bootstrap-manager",
    default_lease: "kubeadm-bootstrap-manager-leader-election-capi",
};

#[derive(Parser)]
#[command(
    name = "bootstrap-manager",
    version = kubeadm_runtime::VERSION,
    about = "Cluster API bootstrap provider for kubeadm: renders node bootstrap data for KubeadmConfig objects"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the manager against the management cluster until SIGTERM.
    Run(RunArgs),
    /// Print the CRDs of KubeadmConfig and KubeadmConfigTemplate as YAML.
    Crds,
    /// Print the bootstrap data (cloud-config or Ignition) a KubeadmConfig renders to.
    Render(RenderArgs),
    /// Check KubeadmConfig and KubeadmConfigTemplate objects in YAML files against the admission
    /// rules; other kinds are ignored. Prints one line per problem, exits 1 if there is any.
    Validate(ValidateArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    #[command(flatten)]
    manager: ManagerArgs,
    /// Lifetime of join tokens, e.g. 15m or 900s; refreshed until the Machine has a Node.
    #[arg(long, default_value = "15m", value_parser = kubeadm_runtime::duration::parse_duration)]
    bootstrap_token_ttl: Duration,
    /// KubeadmConfigs reconciled at the same time.
    #[arg(long, default_value_t = 100)]
    kubeadmconfig_concurrency: u16,
}

fn main() -> ExitCode {
    kubeadm_runtime::memory::block_on(execute(Cli::parse().command))
}

async fn execute(command: Command) -> ExitCode {
    match command {
        Command::Run(args) => {
            let settings = controller::Settings {
                token_ttl: args.bootstrap_token_ttl,
                namespace: args.manager.namespace.clone(),
                watch_filter: args.manager.watch_filter.clone(),
                concurrency: args.kubeadmconfig_concurrency,
            };
            let result =
                run_manager_with_webhooks(
                    &MANAGER,
                    &args.manager,
                    |_client, webhook, shutdown| async move {
                        webhooks::start(&webhook, shutdown).await
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
            exit_code("bootstrap-manager", result)
        }
        Command::Crds => {
            for crd in kubeadm_api::crd::bootstrap_crds() {
                print!("{}", kubeadm_api::crd::to_yaml(&crd));
            }
            ExitCode::SUCCESS
        }
        Command::Validate(args) => run_validate(&args, &[kubeadm_api::bootstrap::GROUP]),
        Command::Render(args) => offline::run(&args, render_offline),
    }
}

/// The pure renderer on what `render` read from the flags and files.
fn render_offline(inputs: &Inputs) -> Result<Vec<u8>, Refusal> {
    let control_plane_version = file_template::control_plane_version(&inputs.control_plane_version)
        .map_err(|e| Refusal::Invalid(format!("--control-plane-version: {e}")))?;
    render(&RenderInput {
        role: match inputs.role {
            offline::Role::Init => Role::Init,
            offline::Role::ControlPlane => Role::ControlPlaneJoin,
            offline::Role::Worker => Role::WorkerJoin,
        },
        spec: &inputs.spec,
        cluster: &ClusterFacts {
            name: inputs.cluster_name.clone(),
            kubernetes_version: inputs.kubernetes_version.clone(),
            control_plane_endpoint: Some(inputs.endpoint.clone()),
            service_subnet: inputs.service_subnet.clone(),
            pod_subnet: inputs.pod_subnet.clone(),
            dns_domain: None,
            control_plane_version: Some(control_plane_version),
        },
        machine: &MachineFacts {
            name: inputs.machine_name.clone(),
            generation: inputs.machine_generation.clone(),
        },
        certificates: Some(&inputs.certificates),
        join: Some(&JoinFacts {
            token: inputs.token.clone(),
            api_server_endpoint: inputs.endpoint.clone(),
            ca_cert_hashes: inputs.ca_cert_hashes.clone(),
        }),
        secrets: &inputs.secrets,
    })
    .map_err(|error| match error {
        RenderError::MissingSecret { .. } => Refusal::MissingSecret(error.to_string()),
        error => Refusal::Invalid(error.to_string()),
    })
}
