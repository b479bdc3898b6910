//! `bootstrap-manager render`: prints the bootstrap data a KubeadmConfig renders to, for inspecting and
//! debugging specs without a cluster. This module reads what the render needs from the flags and files
//! and makes placeholder certificates; the pure renderer is the bootstrap provider's, handed in by
//! `bootstrap-manager` (the provider runs these tools, so they cannot depend on it).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use kubeadm_api::bootstrap::v1beta2::{Format, KubeadmConfigSpec};
use kubeadm_cluster::certificates::{CertKind, generate_kind};
use kubeadm_cluster::{CertPem, ClusterCertificates};

use crate::validate::read_embedded_spec;

#[derive(Args)]
pub struct RenderArgs {
    /// YAML holding a KubeadmConfig, KubeadmConfigTemplate, KubeadmControlPlane or
    /// KubeadmControlPlaneTemplate (v1beta1 or v1beta2; a v1beta1 object is converted as the API
    /// server converts it), or a bare KubeadmConfigSpec. A whole cluster template works: pick the object
    /// with --object when it holds several.
    file: PathBuf,
    /// The object to render, as Kind/name or name, when the file holds several.
    #[arg(long)]
    object: Option<String>,
    /// apiVersion of a bare KubeadmConfigSpec (a document without kind).
    #[arg(long, value_enum, default_value = "v1beta2")]
    spec_version: SpecVersion,
    #[arg(long, value_enum)]
    role: Role,
    /// The Machine's Kubernetes version, e.g. v1.33.1.
    #[arg(long)]
    kubernetes_version: String,
    /// The control plane's version, as `{{ .controlPlane.version }}` in `contentFormat: Template` files;
    /// --kubernetes-version when unset.
    #[arg(long)]
    control_plane_version: Option<String>,
    /// The Cluster's name (clusterName in the ClusterConfiguration).
    #[arg(long)]
    cluster_name: String,
    /// Control-plane endpoint, host:port.
    #[arg(long)]
    endpoint: String,
    /// Output format; the spec's format when unset.
    #[arg(long, value_enum)]
    format: Option<FormatArg>,
    /// Machine name annotated on the control-plane static pods; the KubeadmConfig's name when unset.
    #[arg(long)]
    machine_name: Option<String>,
    /// Machine generation annotated on the control-plane static pods.
    #[arg(long)]
    machine_generation: Option<String>,
    /// Service CIDR(s), comma-separated.
    #[arg(long)]
    service_subnet: Option<String>,
    /// Pod CIDR(s), comma-separated.
    #[arg(long)]
    pod_subnet: Option<String>,
    /// Bootstrap token for joins.
    #[arg(long, default_value = "abcdef.0123456789abcdef")]
    token: String,
    /// CA public key pin for joins (sha256:<hex>); without one the join skips CA verification.
    #[arg(long)]
    ca_cert_hash: Vec<String>,
    /// Directory with the cluster CAs in kubeadm's layout (ca.crt, ca.key, etcd/ca.*, front-proxy-ca.*,
    /// sa.pub, sa.key); placeholder certificates are generated when unset.
    #[arg(long)]
    pki_dir: Option<PathBuf>,
    /// Directory with the Secrets that contentFrom and passwdFrom refer to, as <secret>/<key> files.
    #[arg(long)]
    secrets_dir: Option<PathBuf>,
}

/// What kubeadm does on the machine: `init`, `join --control-plane` or a worker's `join`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Role {
    Init,
    ControlPlane,
    Worker,
}

#[derive(Clone, Copy, ValueEnum)]
enum SpecVersion {
    V1beta1,
    V1beta2,
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    CloudConfig,
    Ignition,
}

/// Everything the renderer needs, read from the flags and files.
#[derive(Clone, Debug)]
pub struct Inputs {
    pub role: Role,
    /// The spec, in v1beta2, with `--format` applied.
    pub spec: KubeadmConfigSpec,
    pub cluster_name: String,
    pub kubernetes_version: String,
    /// `--control-plane-version`, else `--kubernetes-version`.
    pub control_plane_version: String,
    /// `host:port`, also where joins find the API server.
    pub endpoint: String,
    pub service_subnet: Option<String>,
    pub pod_subnet: Option<String>,
    /// `--machine-name`, else the object's name.
    pub machine_name: String,
    pub machine_generation: Option<String>,
    pub token: String,
    pub ca_cert_hashes: Vec<String>,
    pub certificates: ClusterCertificates,
    /// `(secret name, key) -> value` for the Secrets the spec refers to that `--secrets-dir` holds.
    pub secrets: BTreeMap<(String, String), String>,
}

/// Why the renderer refused the inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A Secret the spec refers to is not there.
    MissingSecret(String),
    /// Anything else, as the renderer words it.
    Invalid(String),
}

/// Reads the inputs `args` name, renders them with `render` and writes the user data to standard
/// output. Problems go to standard error, prefixed `error: `.
pub fn run(
    args: &RenderArgs,
    render: impl FnOnce(&Inputs) -> Result<Vec<u8>, Refusal>,
) -> ExitCode {
    let rendered = read(args).and_then(|inputs| {
        render(&inputs).map_err(|refusal| match refusal {
            Refusal::MissingSecret(error) if args.secrets_dir.is_none() => {
                format!("{error}; pass --secrets-dir with <secret>/<key> files")
            }
            Refusal::MissingSecret(error) | Refusal::Invalid(error) => error,
        })
    });
    match rendered {
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
    }
}

/// What `args` describes, read from its files.
pub fn read(args: &RenderArgs) -> Result<Inputs, String> {
    let (name, mut spec) = read_spec(args)?;
    if let Some(format) = args.format {
        spec.format = Some(match format {
            FormatArg::CloudConfig => Format::CloudConfig,
            FormatArg::Ignition => Format::Ignition,
        });
    }
    let certificates = match &args.pki_dir {
        Some(dir) => read_certificates(dir)?,
        None => placeholder_certificates()?,
    };
    let secrets = match &args.secrets_dir {
        Some(dir) => read_secrets(dir, &spec)?,
        None => BTreeMap::new(),
    };
    Ok(Inputs {
        role: args.role,
        spec,
        cluster_name: args.cluster_name.clone(),
        kubernetes_version: args.kubernetes_version.clone(),
        control_plane_version: args
            .control_plane_version
            .clone()
            .unwrap_or_else(|| args.kubernetes_version.clone()),
        endpoint: args.endpoint.clone(),
        service_subnet: args.service_subnet.clone(),
        pod_subnet: args.pod_subnet.clone(),
        machine_name: args
            .machine_name
            .clone()
            .or(name)
            .unwrap_or_else(|| "machine".into()),
        machine_generation: args.machine_generation.clone(),
        token: args.token.clone(),
        ca_cert_hashes: args.ca_cert_hash.clone(),
        certificates,
        secrets,
    })
}

/// The spec, in v1beta2, and the name of the object it came from. The object must pass the admission
/// rules: what the webhooks refuse is not rendered, and every problem names its field.
fn read_spec(args: &RenderArgs) -> Result<(Option<String>, KubeadmConfigSpec), String> {
    let path = &args.file;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bare_version = match args.spec_version {
        SpecVersion::V1beta1 => "v1beta1",
        SpecVersion::V1beta2 => "v1beta2",
    };
    let file = path.display().to_string();
    read_embedded_spec(&file, &text, args.object.as_deref(), bare_version)
        .map(|found| {
            for warning in &found.warnings {
                eprintln!("warning: {warning}");
            }
            (found.name, found.spec)
        })
        .map_err(|problems| {
            problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        })
}

fn read_certificates(dir: &Path) -> Result<ClusterCertificates, String> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
    };
    let pair = |kind: CertKind| -> Result<CertPem, String> {
        let (cert, key) = kind.pki_files();
        Ok(CertPem {
            cert: read(cert)?,
            key: read(key)?,
        })
    };
    Ok(ClusterCertificates {
        ca: pair(CertKind::Ca)?,
        etcd: pair(CertKind::Etcd)?,
        proxy: pair(CertKind::Proxy)?,
        sa: pair(CertKind::Sa)?,
    })
}

/// Throw-away CAs and service-account key, made as the control plane makes them.
fn placeholder_certificates() -> Result<ClusterCertificates, String> {
    let make = |kind| generate_kind(kind, 365).map_err(|e| e.to_string());
    Ok(ClusterCertificates {
        ca: make(CertKind::Ca)?,
        etcd: make(CertKind::Etcd)?,
        proxy: make(CertKind::Proxy)?,
        sa: make(CertKind::Sa)?,
    })
}

/// Reads `<dir>/<secret>/<key>` for every Secret key the spec refers to; missing files are left to the
/// renderer, whose error names the field.
fn read_secrets(
    dir: &Path,
    spec: &KubeadmConfigSpec,
) -> Result<BTreeMap<(String, String), String>, String> {
    let files = spec
        .files
        .iter()
        .map(|f| &f.content_from.secret)
        .map(|s| (&s.name, &s.key));
    let users = spec
        .users
        .iter()
        .map(|u| &u.passwd_from.secret)
        .map(|s| (&s.name, &s.key));
    let mut secrets = BTreeMap::new();
    for (name, key) in files.chain(users) {
        let path = dir.join(name).join(key);
        if name.is_empty() || key.is_empty() || !path.is_file() {
            continue;
        }
        let value =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        secrets.insert((name.clone(), key.clone()), value);
    }
    Ok(secrets)
}
