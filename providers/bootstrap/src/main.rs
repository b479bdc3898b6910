//! `bootstrap-manager`: Cluster API bootstrap provider for kubeadm: renders node bootstrap data for KubeadmConfig objects.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use kubeadm_api::offline::BOOTSTRAP_GROUP;
use kubeadm_bootstrap::{controller, webhooks};
use kubeadm_runtime::validate::{ValidateArgs, run_validate};
use kubeadm_runtime::{Manager, ManagerArgs, exit_code, run_manager_with_webhooks};

mod render_command;

const MANAGER: Manager = Manager {
    name: "bootstrap-manager",
    default_lease: "kubeadm-bootstrap-manager-leader-election-capi",
};

#[derive(Parser)]
#[command(
    name = "bootstrap-manager",
    version,
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
    Render(render_command::RenderArgs),
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
}

#[tokio::main]
async fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run(args) => {
            let settings = controller::Settings {
                token_ttl: args.bootstrap_token_ttl,
                namespace: args.manager.namespace.clone(),
                watch_filter: args.manager.watch_filter.clone(),
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
        Command::Validate(args) => run_validate(&args, &[BOOTSTRAP_GROUP]),
        Command::Render(args) => match render_command::run(&args) {
            Ok(user_data) => match std::io::stdout().write_all(&user_data) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("error: writing the user data: {error}");
                    ExitCode::FAILURE
                }
            },
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::FAILURE
            }
        },
    }
}
