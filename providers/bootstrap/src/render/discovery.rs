//! `joinConfiguration.discovery.file.kubeConfig`: instead of a bootstrap token, a joining node finds and
//! trusts the cluster through a kubeconfig file. The spec describes it; this writes it to
//! `discovery.file.kubeConfigPath`, completed as Cluster API does: the server defaults to the Cluster's
//! control-plane endpoint and the CA to the cluster CA.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Serialize;

use kubeadm_api::bootstrap::v1beta2::{FileDiscovery, KubeConfigAuthExec, KubeConfigUser};

use super::{RenderError, RenderInput, Role, invalid, root_file};
use kubeadm_api::bootstrap::v1beta2::File;

const FIELD: &str = "spec.joinConfiguration.discovery.file";
/// The version kubectl and kubeadm assume for exec plugins that name none.
const DEFAULT_EXEC_API_VERSION: &str = "client.authentication.k8s.io/v1";
/// Every entry of the generated kubeconfig has this name.
const NAME: &str = "default";

/// The discovery kubeconfig file for a join whose spec describes one, `None` otherwise.
pub(crate) fn kubeconfig_file(input: &RenderInput) -> Result<Option<File>, RenderError> {
    let discovery = &input.spec.join_configuration.discovery.file;
    if input.role == Role::Init || !discovery.kube_config.is_defined() {
        return Ok(None);
    }
    let content = kubeconfig(input, discovery)?;
    Ok(Some(root_file(
        discovery.kube_config_path.clone(),
        "0640",
        &content,
    )))
}

fn kubeconfig(input: &RenderInput, discovery: &FileDiscovery) -> Result<String, RenderError> {
    if discovery.kube_config_path.trim().is_empty() {
        return Err(invalid(
            format!("{FIELD}.kubeConfigPath"),
            "must be set: the kubeconfig from discovery.file.kubeConfig is written to that path",
        ));
    }
    if !discovery.kube_config_path.starts_with('/') {
        return Err(invalid(
            format!("{FIELD}.kubeConfigPath"),
            format!(
                "{:?} must be an absolute file path when kubeConfig is set (it is written there); \
                 a URL is only for a kubeconfig served elsewhere",
                discovery.kube_config_path
            ),
        ));
    }
    let spec = &discovery.kube_config.cluster;
    let server = match spec.server.as_deref().filter(|s| !s.is_empty()) {
        Some(server) => server.to_owned(),
        None => match input.cluster.control_plane_endpoint.as_deref() {
            Some(endpoint) => format!("https://{endpoint}"),
            None => {
                return Err(invalid(
                    format!("{FIELD}.kubeConfig.cluster.server"),
                    "must be set when the Cluster has no controlPlaneEndpoint",
                ));
            }
        },
    };
    let ca_data = match spec
        .certificate_authority_data
        .as_ref()
        .filter(|d| !d.0.is_empty())
    {
        Some(data) => BASE64.encode(&data.0),
        None => match input.certificates.filter(|c| !c.ca.cert.is_empty()) {
            Some(certificates) => BASE64.encode(&certificates.ca.cert),
            None => {
                return Err(invalid(
                    format!("{FIELD}.kubeConfig.cluster.certificateAuthorityData"),
                    "must be set when the cluster CA is not known",
                ));
            }
        },
    };
    let config = Kubeconfig {
        api_version: "v1",
        kind: "Config",
        clusters: vec![NamedCluster {
            name: NAME,
            cluster: Cluster {
                server,
                certificate_authority_data: ca_data,
                tls_server_name: spec.tls_server_name.clone().filter(|s| !s.is_empty()),
                insecure_skip_tls_verify: spec.insecure_skip_tls_verify.filter(|&skip| skip),
                proxy_url: spec.proxy_url.clone().filter(|s| !s.is_empty()),
            },
        }],
        contexts: vec![NamedContext {
            name: NAME,
            context: Context {
                cluster: NAME,
                user: NAME,
            },
        }],
        current_context: NAME,
        users: vec![NamedUser {
            name: NAME,
            user: user(&discovery.kube_config.user)?,
        }],
    };
    Ok(serde_saphyr::to_string(&config).expect("a kubeconfig serializes to YAML"))
}

fn user(spec: &KubeConfigUser) -> Result<User, RenderError> {
    if spec.auth_provider.is_defined() && spec.exec.is_defined() {
        return Err(invalid(
            format!("{FIELD}.kubeConfig.user"),
            "only one of authProvider or exec may be set",
        ));
    }
    let auth_provider = if spec.auth_provider.is_defined() {
        if spec.auth_provider.name.is_empty() {
            return Err(invalid(
                format!("{FIELD}.kubeConfig.user.authProvider.name"),
                "must be set when authProvider is",
            ));
        }
        Some(AuthProvider {
            name: spec.auth_provider.name.clone(),
            config: spec.auth_provider.config.clone(),
        })
    } else {
        None
    };
    let exec = if spec.exec.is_defined() {
        Some(exec(&spec.exec)?)
    } else {
        None
    };
    Ok(User {
        auth_provider,
        exec,
    })
}

fn exec(spec: &KubeConfigAuthExec) -> Result<Exec, RenderError> {
    if spec.command.is_empty() {
        return Err(invalid(
            format!("{FIELD}.kubeConfig.user.exec.command"),
            "must be set when exec is",
        ));
    }
    Ok(Exec {
        command: spec.command.clone(),
        args: spec.args.clone(),
        env: spec
            .env
            .iter()
            .map(|e| EnvVar {
                name: e.name.clone(),
                value: e.value.clone(),
            })
            .collect(),
        api_version: spec
            .api_version
            .clone()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| DEFAULT_EXEC_API_VERSION.to_owned()),
        provide_cluster_info: spec.provide_cluster_info == Some(true),
        // Nobody is there to answer a prompt during a join.
        interactive_mode: "Never",
    })
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct Kubeconfig {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    clusters: Vec<NamedCluster>,
    contexts: Vec<NamedContext>,
    current_context: &'static str,
    users: Vec<NamedUser>,
}

#[derive(Serialize)]
struct NamedCluster {
    name: &'static str,
    cluster: Cluster,
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    server: String,
    certificate_authority_data: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls_server_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    insecure_skip_tls_verify: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    proxy_url: Option<String>,
}

#[derive(Serialize)]
struct NamedContext {
    name: &'static str,
    context: Context,
}

#[derive(Serialize)]
struct Context {
    cluster: &'static str,
    user: &'static str,
}

#[derive(Serialize)]
struct NamedUser {
    name: &'static str,
    user: User,
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct User {
    #[serde(skip_serializing_if = "Option::is_none")]
    auth_provider: Option<AuthProvider>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exec: Option<Exec>,
}

#[derive(Serialize)]
struct AuthProvider {
    name: String,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    config: std::collections::BTreeMap<String, String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Exec {
    command: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    args: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    env: Vec<EnvVar>,
    api_version: String,
    provide_cluster_info: bool,
    interactive_mode: &'static str,
}

#[derive(Serialize)]
struct EnvVar {
    name: String,
    value: String,
}
