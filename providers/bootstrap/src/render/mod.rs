//! Rendering of bootstrap user data: a pure function from a KubeadmConfig spec and facts about the Cluster
//! and Machine to the bytes a node boots with (cloud-init or Ignition). No I/O, clock or randomness: the
//! controller resolves secrets and certificates first and passes them in.

use std::collections::BTreeMap;

use kubeadm_api::bootstrap::file_template;
use kubeadm_api::bootstrap::v1beta2::{File, FileContentFormat, Format, KubeadmConfigSpec, User};
use kubeadm_api::cluster::v1beta2::{Cluster, NetworkRanges};

pub mod cloudinit;
mod discovery;
pub mod etcd_restore;
pub mod ignition;
pub mod kubeadm;
pub mod version;

/// What kubeadm does on the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The first control-plane machine: `kubeadm init`.
    Init,
    /// Another control-plane machine: `kubeadm join --control-plane`.
    ControlPlaneJoin,
    /// A worker: `kubeadm join`.
    WorkerJoin,
}

/// Facts from the Cluster and Machine that the spec does not hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterFacts {
    /// `clusterName` in the ClusterConfiguration.
    pub name: String,
    /// The Machine's Kubernetes version, e.g. `v1.33.1`.
    pub kubernetes_version: String,
    /// `host:port` of the control-plane endpoint.
    pub control_plane_endpoint: Option<String>,
    /// Service CIDRs, comma-separated when several.
    pub service_subnet: Option<String>,
    /// Pod CIDRs, comma-separated when several.
    pub pod_subnet: Option<String>,
    pub dns_domain: Option<String>,
    /// `v` + the semver of the control plane's `spec.version`, for `files[].contentFormat: Template`;
    /// `None` when the Cluster has no control plane or it has no version (see
    /// [`kubeadm_api::bootstrap::file_template`]).
    pub control_plane_version: Option<String>,
}

impl ClusterFacts {
    /// What the kubeadm configuration takes from the Cluster, for a machine running `kubernetes_version`.
    pub fn of(cluster: &Cluster, kubernetes_version: &str) -> Self {
        let network = cluster.spec.cluster_network.as_ref();
        let join = |ranges: Option<&NetworkRanges>| {
            ranges
                .filter(|r| !r.cidr_blocks.is_empty())
                .map(|r| r.cidr_blocks.join(","))
        };
        Self {
            name: cluster.metadata.name.clone().unwrap_or_default(),
            kubernetes_version: kubernetes_version.to_owned(),
            control_plane_endpoint: kubeadm_cluster::endpoint::control_plane_endpoint(cluster),
            service_subnet: join(network.and_then(|n| n.services.as_ref())),
            pod_subnet: join(network.and_then(|n| n.pods.as_ref())),
            dns_domain: network.and_then(|n| n.service_domain.clone()),
            control_plane_version: None,
        }
    }
}

/// The Machine the user data is for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineFacts {
    /// Annotated on the control-plane static pods as `cluster.x-k8s.io/machine`.
    pub name: String,
    /// The machine generation it was built for; annotated as `controlplane.cluster.x-k8s.io/machine-generation`.
    pub generation: Option<String>,
}

use kubeadm_cluster::certificates::CertKind;
/// The cluster's certificates, as the renderer writes them onto nodes.
pub use kubeadm_cluster::{CertPem, ClusterCertificates};

/// How a joining node finds and trusts the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinFacts {
    /// Empty with kubeconfig-file discovery, which needs none.
    pub token: String,
    pub api_server_endpoint: String,
    pub ca_cert_hashes: Vec<String>,
}

/// Everything a render needs.
#[derive(Clone, Copy, Debug)]
pub struct RenderInput<'a> {
    pub role: Role,
    pub spec: &'a KubeadmConfigSpec,
    pub cluster: &'a ClusterFacts,
    pub machine: &'a MachineFacts,
    /// Required for control-plane roles.
    pub certificates: Option<&'a ClusterCertificates>,
    /// Required for joins.
    pub join: Option<&'a JoinFacts>,
    /// Values of `files[].contentFrom.secret` and `users[].passwdFrom.secret`: (secret name, key) -> value.
    pub secrets: &'a BTreeMap<(String, String), String>,
}

/// Why a spec cannot be rendered. Messages name the field and the rule.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RenderError {
    #[error("etcd learner mode is not supported by this etcd version: {reason}")]
    LearnerModeUnsupported { reason: String },
    #[error("{field}: {value:?} is not a valid version")]
    InvalidVersion { field: String, value: String },
    #[error("{field}: {rule}")]
    Invalid { field: String, rule: String },
    #[error("{field}: secret {secret:?} has no key {key:?} (or the secret does not exist)")]
    MissingSecret {
        field: String,
        secret: String,
        key: String,
    },
    #[error("missing input: {what}")]
    MissingInput { what: String },
}

/// Renders the user data for `input.spec.format`.
pub fn render(input: &RenderInput) -> Result<Vec<u8>, RenderError> {
    let bootstrap = Bootstrap::resolve(input)?;
    match input.spec.format.unwrap_or_default() {
        Format::CloudConfig => Ok(cloudinit::render(&bootstrap)),
        Format::Ignition => ignition::render(&bootstrap),
    }
}

/// Where kubeadm finds the cluster CAs unless `clusterConfiguration.certificatesDir` says otherwise.
const DEFAULT_CERTIFICATES_DIR: &str = "/etc/kubernetes/pki";

/// Paths the output formats write themselves; a user file there would silently replace them. The
/// admission webhooks refuse them with the same list.
const RESERVED_PATHS: [&str; 5] = kubeadm_api::bootstrap::validation::BOOTSTRAP_FILE_PATHS;

/// What both output formats write, validated and with secrets resolved.
pub(crate) struct Bootstrap<'a> {
    pub role: Role,
    pub spec: &'a KubeadmConfigSpec,
    /// Certificates, kubeadm patches, the user's files (content resolved), then the discovery kubeconfig,
    /// in write order.
    pub files: Vec<File>,
    /// The user's users with `passwdFrom` resolved into `passwd`.
    pub users: Vec<User>,
    /// Content of the kubeadm configuration file for the role.
    pub kubeadm_config: String,
}

impl<'a> Bootstrap<'a> {
    fn resolve(input: &RenderInput<'a>) -> Result<Self, RenderError> {
        check_role_inputs(input)?;
        let kubeadm_config = kubeadm::kubeadm_config(input)?;

        let mut files = certificate_files(input);
        files.extend(patch_files(input));
        let user_files = resolve_files(
            &input.spec.files,
            input.secrets,
            input.cluster.control_plane_version.as_deref(),
        )?;
        check_file_paths(&user_files, &files)?;
        if let Some(kubeconfig) = discovery::kubeconfig_file(input)? {
            check_discovery_path(&user_files, &kubeconfig.path)?;
            files.extend(user_files);
            files.push(kubeconfig);
        } else {
            files.extend(user_files);
        }

        Ok(Bootstrap {
            role: input.role,
            spec: input.spec,
            files,
            users: resolve_users(&input.spec.users, input.secrets)?,
            kubeadm_config,
        })
    }

    /// `kubeadm init|join --config <path> [--v N]`.
    pub fn kubeadm_command(&self, config_path: &str) -> String {
        let subcommand = match self.role {
            Role::Init => "init",
            Role::ControlPlaneJoin | Role::WorkerJoin => "join",
        };
        let mut command = format!("kubeadm {subcommand} --config {config_path}");
        if let Some(level) = self.spec.verbosity {
            command.push_str(&format!(" --v {level}"));
        }
        command
    }
}

fn invalid(field: impl Into<String>, rule: impl Into<String>) -> RenderError {
    RenderError::Invalid {
        field: field.into(),
        rule: rule.into(),
    }
}

fn check_role_inputs(input: &RenderInput) -> Result<(), RenderError> {
    let control_plane = input.role != Role::WorkerJoin;
    if control_plane && input.certificates.is_none() {
        return Err(RenderError::MissingInput {
            what: format!("cluster certificates (required for role {:?})", input.role),
        });
    }
    // kubeadm would turn a worker into a control-plane member.
    if !control_plane && input.spec.join_configuration.control_plane.is_some() {
        return Err(invalid(
            "spec.joinConfiguration.controlPlane",
            "must not be set for a worker machine",
        ));
    }
    Ok(())
}

fn certificate_files(input: &RenderInput) -> Vec<File> {
    let Some(certs) = input
        .certificates
        .filter(|_| input.role != Role::WorkerJoin)
    else {
        return Vec::new();
    };
    let dir = input
        .spec
        .cluster_configuration
        .certificates_dir
        .as_deref()
        .unwrap_or(DEFAULT_CERTIFICATES_DIR)
        .trim_end_matches('/');
    let mut files = Vec::new();
    for kind in CertKind::ALL {
        let (pem, (cert_name, key_name)) = (certs.get(kind), kind.pki_files());
        // An external etcd CA comes without its key; write only what exists.
        if !pem.cert.is_empty() {
            files.push(root_file(format!("{dir}/{cert_name}"), "0640", &pem.cert));
        }
        if !pem.key.is_empty() {
            files.push(root_file(format!("{dir}/{key_name}"), "0600", &pem.key));
        }
    }
    files
}

fn patch_files(input: &RenderInput) -> Vec<File> {
    kubeadm::machine_annotation_patches(input)
        .into_iter()
        .map(|patch| root_file(patch.path, "0640", &patch.content))
        .collect()
}

/// A file owned by root:root, as kubeadm expects its inputs.
pub(crate) fn root_file(path: impl Into<String>, permissions: &str, content: &str) -> File {
    File {
        path: path.into(),
        owner: Some("root:root".into()),
        permissions: Some(permissions.into()),
        content: Some(content.into()),
        ..File::default()
    }
}

fn resolve_files(
    files: &[File],
    secrets: &BTreeMap<(String, String), String>,
    control_plane_version: Option<&str>,
) -> Result<Vec<File>, RenderError> {
    files
        .iter()
        .enumerate()
        .map(|(i, file)| {
            resolve_file(
                &format!("spec.files[{i}]"),
                file,
                secrets,
                control_plane_version,
            )
        })
        .collect()
}

/// The file as it is written: content from its secret, rendered when it is a template.
fn resolve_file(
    field: &str,
    file: &File,
    secrets: &BTreeMap<(String, String), String>,
    control_plane_version: Option<&str>,
) -> Result<File, RenderError> {
    if file.path.is_empty() {
        return Err(invalid(format!("{field}.path"), "must not be empty"));
    }
    if let Some(permissions) = &file.permissions {
        parse_mode(permissions).ok_or_else(|| {
            invalid(
                format!("{field}.permissions"),
                format!("{permissions:?} is not an octal file mode like \"0640\""),
            )
        })?;
    }
    let mut resolved = file.clone();
    if file.content_from.is_defined() {
        if file.content.is_some() {
            return Err(invalid(
                field,
                "content and contentFrom are mutually exclusive",
            ));
        }
        let source = &file.content_from.secret;
        let value = secret_value(
            &format!("{field}.contentFrom.secret"),
            &source.name,
            &source.key,
            secrets,
        )?;
        resolved.content = Some(value);
        resolved.content_from = Default::default();
    }
    if resolved.content_format.take() == Some(FileContentFormat::Template) {
        let content = resolved.content.as_deref().unwrap_or_default();
        let rendered = file_template::render(content, control_plane_version)
            .map_err(|e| invalid(format!("{field}.content"), e.to_string()))?;
        resolved.content = Some(rendered);
    }
    Ok(resolved)
}

fn resolve_users(
    users: &[User],
    secrets: &BTreeMap<(String, String), String>,
) -> Result<Vec<User>, RenderError> {
    let mut resolved = Vec::with_capacity(users.len());
    for (i, user) in users.iter().enumerate() {
        let field = format!("spec.users[{i}]");
        if user.name.is_empty() {
            return Err(invalid(format!("{field}.name"), "must not be empty"));
        }
        let mut user = user.clone();
        if user.passwd_from.is_defined() {
            if user.passwd.is_some() {
                return Err(invalid(
                    field,
                    "passwd and passwdFrom are mutually exclusive",
                ));
            }
            let source = &user.passwd_from.secret;
            let value = secret_value(
                &format!("{field}.passwdFrom.secret"),
                &source.name,
                &source.key,
                secrets,
            )?;
            user.passwd = Some(value);
            user.passwd_from = Default::default();
        }
        resolved.push(user);
    }
    Ok(resolved)
}

fn secret_value(
    field: &str,
    name: &str,
    key: &str,
    secrets: &BTreeMap<(String, String), String>,
) -> Result<String, RenderError> {
    if name.is_empty() || key.is_empty() {
        return Err(invalid(field, "name and key are required"));
    }
    secrets
        .get(&(name.to_owned(), key.to_owned()))
        .cloned()
        .ok_or_else(|| RenderError::MissingSecret {
            field: field.to_owned(),
            secret: name.to_owned(),
            key: key.to_owned(),
        })
}

/// A user file must not replace a generated one, and may repeat an earlier user path only to append to it.
fn check_file_paths(user_files: &[File], generated: &[File]) -> Result<(), RenderError> {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, file) in user_files.iter().enumerate() {
        let path = file.path.as_str();
        if RESERVED_PATHS.contains(&path) || generated.iter().any(|g| g.path == path) {
            return Err(invalid(
                format!("spec.files[{i}].path"),
                format!("{path:?} is written by the bootstrap provider"),
            ));
        }
        match seen.get(path) {
            Some(first) if file.append != Some(true) => {
                return Err(invalid(
                    format!("spec.files[{i}].path"),
                    format!(
                        "duplicates spec.files[{first}].path; only entries with append: true may repeat a path"
                    ),
                ));
            }
            Some(_) => {}
            None => {
                seen.insert(path, i);
            }
        }
    }
    Ok(())
}

/// The generated discovery kubeconfig must not meet a user file.
fn check_discovery_path(user_files: &[File], path: &str) -> Result<(), RenderError> {
    match user_files.iter().position(|f| f.path == path) {
        Some(i) => Err(invalid(
            format!("spec.files[{i}].path"),
            format!(
                "{path:?} is written from spec.joinConfiguration.discovery.file.kubeConfig; \
                 remove one of them"
            ),
        )),
        None => Ok(()),
    }
}

/// Parses a file mode such as "0640" or "644".
pub(crate) fn parse_mode(permissions: &str) -> Option<u32> {
    let digits = permissions.strip_prefix("0o").unwrap_or(permissions);
    let octal = digits.bytes().all(|b| (b'0'..=b'7').contains(&b));
    if !octal || !(3..=4).contains(&digits.len()) {
        return None;
    }
    u32::from_str_radix(digits, 8).ok()
}
