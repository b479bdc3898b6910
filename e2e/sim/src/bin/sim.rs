//! `sim`: the simulated infrastructure provider and core Cluster API stand-in as a process.
//!
//! `sim run --kubeconfig FILE --dir DIR [--namespace NS] [--core cluster-api|stand-in]` runs until Ctrl-C
//! or SIGTERM, then stops every node process. With `--core cluster-api` (what `make dev` runs it with)
//! it is only the infrastructure provider, next to Cluster API's own core manager; with `stand-in` it
//! also runs its reduced core controllers. `sim crds [--check] [DIR]` writes (or checks) the CRDs of the Sim kinds in DIR
//! (default `e2e/config/crd`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use sim::{Sim, SimOptions};

#[derive(Parser)]
#[command(
    name = "sim",
    version,
    about = "Simulated infrastructure provider and core Cluster API stand-in for end-to-end tests"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Reconcile Sim* infrastructure and core Cluster API objects; boot machines as local processes.
    Run {
        #[arg(long)]
        kubeconfig: PathBuf,
        /// Where nodes keep their files, data and logs.
        #[arg(long)]
        dir: PathBuf,
        /// Only this namespace (default: all).
        #[arg(long)]
        namespace: Option<String>,
        /// Who runs core Cluster API's controllers: Cluster API's own core manager, running beside
        /// (`cluster-api`), or the simulator's reduced stand-in (`stand-in`).
        #[arg(long, value_enum, default_value = "stand-in")]
        core: CoreArg,
    },
    /// Write the CRDs of SimCluster, SimClusterTemplate, SimMachine and SimMachineTemplate.
    Crds {
        /// Write nothing; fail when a file differs.
        #[arg(long)]
        check: bool,
        #[arg(default_value = "e2e/config/crd")]
        dir: PathBuf,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum CoreArg {
    ClusterApi,
    StandIn,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "sim=info".into()),
        )
        .init();
    match Cli::parse().command {
        Command::Crds { check, dir } => crds(check, &dir),
        Command::Run {
            kubeconfig,
            dir,
            namespace,
            core,
        } => match run(kubeconfig, dir, namespace, core).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("sim: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

fn crds(check: bool, dir: &std::path::Path) -> ExitCode {
    let files = sim::api::crd_files();
    if check {
        let stale = kubeadm_api::crd::stale_files(dir, &files);
        for s in &stale {
            eprintln!("sim: {s}; run `cargo run -p sim -- crds` and commit the result");
        }
        return if stale.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    for (name, content) in files {
        let path = dir.join(&name);
        if let Err(e) = std::fs::write(&path, content) {
            eprintln!("sim: write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

async fn run(
    kubeconfig: PathBuf,
    dir: PathBuf,
    namespace: Option<String>,
    core: CoreArg,
) -> Result<(), String> {
    let yaml = std::fs::read_to_string(&kubeconfig)
        .map_err(|e| format!("read --kubeconfig {}: {e}", kubeconfig.display()))?;
    let client = testenv::apiserver::client_from_kubeconfig(&yaml)
        .await
        .map_err(|e| format!("--kubeconfig {}: {e}", kubeconfig.display()))?;
    std::fs::create_dir_all(&dir).map_err(|e| format!("create --dir {}: {e}", dir.display()))?;
    let sim = Sim::start(
        client,
        SimOptions {
            dir,
            namespace,
            period: Duration::from_millis(500),
            core: match core {
                CoreArg::ClusterApi => sim::controller::Core::ClusterApi,
                CoreArg::StandIn => sim::controller::Core::StandIn,
            },
        },
    );
    tracing::info!("simulating machines; Ctrl-C stops every node");
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    drop(sim);
    Ok(())
}
