//! The command lines of `controlplane-manager generate cluster` and `bump-generation`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use clap::Subcommand;

use super::{ClusterOptions, Settings};

#[derive(Subcommand)]
pub enum GenerateCommand {
    /// Print the cluster template with its `${VAR}` variables substituted from the flags, the environment
    /// and the clusterctl configuration file (in that order), like `clusterctl generate cluster`.
    Cluster(GenerateClusterArgs),
}

#[derive(clap::Args)]
pub struct GenerateClusterArgs {
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
pub struct BumpGenerationArgs {
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

/// Prints the rendered template (or its variables) on standard output.
pub fn generate_cluster(args: &GenerateClusterArgs) -> Result<(), String> {
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
        let variables =
            super::list_variables(&template, &template_name).map_err(|error| error.to_string())?;
        super::variables_report(&variables, &settings)
    } else {
        super::generate(&template, &template_name, &settings).map_err(|error| error.to_string())?
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

/// Bumps the chosen counter and prints `FILE:LINE: VARIABLE: OLD -> NEW`.
pub fn bump_generation(args: &BumpGenerationArgs) -> Result<(), String> {
    let variable = if args.control_plane {
        super::CONTROL_PLANE_MACHINE_GEN
    } else {
        super::WORKER_MACHINE_GEN
    };
    let bump = super::bump_file(&args.file, variable).map_err(|error| error.to_string())?;
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
