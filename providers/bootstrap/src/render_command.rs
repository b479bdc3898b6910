//! `bootstrap-manager render`: prints the bootstrap data a KubeadmConfig renders to, for inspecting and
//! debugging specs without a cluster. Not the pure renderer: it reads files and makes placeholder
//! certificates.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use kubeadm_api::bootstrap::v1beta2::{Format, KubeadmConfigSpec};
use kubeadm_api::offline::read_embedded_spec;
use kubeadm_bootstrap::render::{
    CertPem, ClusterCertificates, ClusterFacts, JoinFacts, MachineFacts, RenderError, RenderInput,
    Role, render,
};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};

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
    role: RoleArg,
    /// The Machine's Kubernetes version, e.g. v1.33.1.
    #[arg(long)]
    kubernetes_version: String,
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

#[derive(Clone, Copy, ValueEnum)]
enum RoleArg {
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

/// Renders the user data described by `args`.
pub fn run(args: &RenderArgs) -> Result<Vec<u8>, String> {
    let (name, mut spec) = read_spec(args)?;
    if let Some(format) = args.format {
        spec.format = Some(match format {
            FormatArg::CloudConfig => Format::CloudConfig,
            FormatArg::Ignition => Format::Ignition,
        });
    }
    let role = match args.role {
        RoleArg::Init => Role::Init,
        RoleArg::ControlPlane => Role::ControlPlaneJoin,
        RoleArg::Worker => Role::WorkerJoin,
    };
    let cluster = ClusterFacts {
        name: args.cluster_name.clone(),
        kubernetes_version: args.kubernetes_version.clone(),
        control_plane_endpoint: Some(args.endpoint.clone()),
        service_subnet: args.service_subnet.clone(),
        pod_subnet: args.pod_subnet.clone(),
        dns_domain: None,
    };
    let machine = MachineFacts {
        name: args
            .machine_name
            .clone()
            .or(name)
            .unwrap_or_else(|| "machine".into()),
        generation: args.machine_generation.clone(),
    };
    let join = JoinFacts {
        token: args.token.clone(),
        api_server_endpoint: args.endpoint.clone(),
        ca_cert_hashes: args.ca_cert_hash.clone(),
    };
    let certificates = match &args.pki_dir {
        Some(dir) => read_certificates(dir)?,
        None => placeholder_certificates()?,
    };
    let secrets = match &args.secrets_dir {
        Some(dir) => read_secrets(dir, &spec)?,
        None => BTreeMap::new(),
    };
    render(&RenderInput {
        role,
        spec: &spec,
        cluster: &cluster,
        machine: &machine,
        certificates: Some(&certificates),
        join: Some(&join),
        secrets: &secrets,
    })
    .map_err(|error| match error {
        RenderError::MissingSecret { .. } if args.secrets_dir.is_none() => {
            format!("{error}; pass --secrets-dir with <secret>/<key> files")
        }
        error => error.to_string(),
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
    let pair = |cert: &str, key: &str| -> Result<CertPem, String> {
        Ok(CertPem {
            cert: read(cert)?,
            key: read(key)?,
        })
    };
    Ok(ClusterCertificates {
        ca: pair("ca.crt", "ca.key")?,
        etcd: pair("etcd/ca.crt", "etcd/ca.key")?,
        proxy: pair("front-proxy-ca.crt", "front-proxy-ca.key")?,
        sa: pair("sa.pub", "sa.key")?,
    })
}

fn placeholder_certificates() -> Result<ClusterCertificates, String> {
    let service_account = KeyPair::generate().map_err(|e| e.to_string())?;
    Ok(ClusterCertificates {
        ca: placeholder_ca("kubernetes")?,
        etcd: placeholder_ca("etcd-ca")?,
        proxy: placeholder_ca("front-proxy-ca")?,
        sa: CertPem {
            cert: service_account.public_key_pem(),
            key: service_account.serialize_pem(),
        },
    })
}

fn placeholder_ca(common_name: &str) -> Result<CertPem, String> {
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    Ok(CertPem {
        cert: cert.pem(),
        key: key.serialize_pem(),
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
