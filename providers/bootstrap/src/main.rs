//! `bootstrap-manager`: Cluster API bootstrap provider for kubeadm: renders node bootstrap data for KubeadmConfig objects.

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kubeadm_runtime::{ManagerArgs, exit_code, run_manager};

mod render_command;

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
    Run(ManagerArgs),
    /// Print the CRDs of KubeadmConfig and KubeadmConfigTemplate as YAML.
    Crds,
    /// Print the bootstrap data (cloud-config or Ignition) a KubeadmConfig renders to.
    Render(render_command::RenderArgs),
}

#[tokio::main]
async fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run(args) => {
            // Controllers arrive with their issues; until then the manager only proves it can run.
            let result = run_manager(
                "bootstrap-manager",
                &args,
                |_client, readiness| async move {
                    readiness.set_ready(true);
                    std::future::pending::<()>().await;
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
