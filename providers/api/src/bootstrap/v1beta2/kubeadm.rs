//! The kubeadm configuration carried by a KubeadmConfig: ClusterConfiguration, InitConfiguration,
//! JoinConfiguration and their parts.
//!
//! Optional nested structs are plain values that are left out of the JSON when they equal their
//! zero value (`Default`), so an absent object and an empty one are the same thing; use
//! `is_defined()` to ask whether anything is set.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// True when `value` equals the zero value of its type; used to leave empty objects out of the JSON.
pub(crate) fn is_zero<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Adds `is_defined()` to types whose zero value means "not set".
macro_rules! impl_is_defined {
    ($($ty:ty),* $(,)?) => {
        $(
            impl $ty {
                /// Returns true when at least one field is set (the value differs from the zero value).
                pub fn is_defined(&self) -> bool {
                    !is_zero(self)
                }
            }
        )*
    };
}
pub(crate) use impl_is_defined;

/// Asymmetric key algorithm used for keys and certificates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum EncryptionAlgorithmType {
    /// ECDSA with curve P-256.
    #[serde(rename = "ECDSA-P256")]
    EcdsaP256,
    /// ECDSA with curve P-384 (Kubernetes 1.34 or above).
    #[serde(rename = "ECDSA-P384")]
    EcdsaP384,
    /// RSA with a 2048 bit key; the default.
    #[default]
    #[serde(rename = "RSA-2048")]
    Rsa2048,
    /// RSA with a 3072 bit key.
    #[serde(rename = "RSA-3072")]
    Rsa3072,
    /// RSA with a 4096 bit key.
    #[serde(rename = "RSA-4096")]
    Rsa4096,
}

impl EncryptionAlgorithmType {
    /// The value as written in the API (e.g. `RSA-2048`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::EcdsaP256 => "ECDSA-P256",
            Self::EcdsaP384 => "ECDSA-P384",
            Self::Rsa2048 => "RSA-2048",
            Self::Rsa3072 => "RSA-3072",
            Self::Rsa4096 => "RSA-4096",
        }
    }
}

impl fmt::Display for EncryptionAlgorithmType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Settings used only by `kubeadm init`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitConfiguration {
    /// Bootstrap tokens to create at `kubeadm init` time; not uploaded to the kubeadm config map.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bootstrap_tokens: Vec<BootstrapToken>,
    /// How the new control-plane node registers itself; keep it consistent with joinConfiguration.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub node_registration: NodeRegistrationOptions,
    /// Address and port the API server on this node advertises; auto-detected when unset.
    #[serde(rename = "localAPIEndpoint", default, skip_serializing_if = "is_zero")]
    pub local_api_endpoint: ApiEndpoint,
    /// kubeadm init phases to skip (see `kubeadm init --help`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip_phases: Vec<String>,
    /// Patches applied to the components kubeadm deploys during `kubeadm init`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub patches: Patches,
    /// Timeouts used by kubeadm commands.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timeouts: Timeouts,
}

/// Cluster-wide settings of a kubeadm cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterConfiguration {
    /// etcd settings; a local (stacked) etcd when unset.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub etcd: Etcd,
    /// Stable IP address or DNS name (optionally with port) of the control plane.
    /// Defaults to the Cluster's control plane endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<String>,
    /// Extra settings for the API server.
    #[serde(rename = "apiServer", default, skip_serializing_if = "is_zero")]
    pub api_server: ApiServer,
    /// Extra settings for the controller manager.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub controller_manager: ControllerManager,
    /// Extra settings for the scheduler.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub scheduler: Scheduler,
    /// Settings of the DNS add-on.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dns: Dns,
    /// Where certificates are stored; `/etc/kubernetes/pki` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates_dir: Option<String>,
    /// Container registry to pull images from; kubeadm's default (registry.k8s.io) when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_repository: Option<String>,
    /// kubeadm feature gates enabled by the user.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub feature_gates: BTreeMap<String, bool>,
    /// Validity in days of non-CA certificates generated by kubeadm (365 when unset; Kubernetes >= 1.31).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1095))]
    pub certificate_validity_period_days: Option<i32>,
    /// Validity in days of CA certificates generated by the provider (3650 when unset); immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 36500))]
    pub ca_certificate_validity_period_days: Option<i32>,
    /// Key algorithm for keys and certificates; RSA-2048 when unset (Kubernetes >= 1.31).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_algorithm: Option<EncryptionAlgorithmType>,
}

/// Settings of the API server static pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiServer {
    /// Extra command-line flags (name without leading dashes); they override kubeadm's defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<Arg>,
    /// Extra host paths mounted into the pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_volumes: Vec<HostPathMount>,
    /// Extra environment variables; they override the ones kubeadm sets (Kubernetes >= 1.31).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_envs: Option<Vec<EnvVar>>,
    /// Extra Subject Alternative Names for the API server serving certificate.
    #[serde(rename = "certSANs", default, skip_serializing_if = "Vec::is_empty")]
    pub cert_sans: Vec<String>,
}

/// Settings of the controller manager static pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerManager {
    /// Extra command-line flags (name without leading dashes); they override kubeadm's defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<Arg>,
    /// Extra host paths mounted into the pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_volumes: Vec<HostPathMount>,
    /// Extra environment variables; they override the ones kubeadm sets (Kubernetes >= 1.31).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_envs: Option<Vec<EnvVar>>,
}

/// Settings of the scheduler static pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Scheduler {
    /// Extra command-line flags (name without leading dashes); they override kubeadm's defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<Arg>,
    /// Extra host paths mounted into the pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_volumes: Vec<HostPathMount>,
    /// Extra environment variables; they override the ones kubeadm sets (Kubernetes >= 1.31).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_envs: Option<Vec<EnvVar>>,
}

/// The DNS add-on installed in the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Dns {
    /// Registry for the DNS image; the cluster's imageRepository when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_repository: Option<String>,
    /// Image tag; when set, kubeadm no longer changes the version on upgrades.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_tag: Option<String>,
}

/// Address and port of the API server instance on a node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiEndpoint {
    /// IP address the API server advertises.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advertise_address: Option<String>,
    /// Secure port the API server binds to; 6443 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub bind_port: Option<i32>,
}

/// How a node registers with the cluster during `kubeadm init` or `kubeadm join`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeRegistrationOptions {
    /// Name of the Node object (and CN of the kubelet client certificate); the hostname when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// CRI socket of the container runtime, recorded as an annotation on the Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cri_socket: Option<String>,
    /// Taints the Node registers with. Unset means kubeadm's default control-plane taint;
    /// an empty list means no taints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taints: Option<Vec<Taint>>,
    /// Extra kubelet flags (name without leading dashes); they override kubeadm's defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kubelet_extra_args: Vec<Arg>,
    /// Preflight errors to ignore, e.g. `IsPrivilegedUser` or `Swap`; `all` ignores every check.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore_preflight_errors: Vec<String>,
    /// Image pull policy during init and join: Always, IfNotPresent (default) or Never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    /// Whether kubeadm pulls images one at a time (true by default; Kubernetes >= 1.31).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_serial: Option<bool>,
}

/// A bootstrap token, stored as a Secret in the cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapToken {
    /// The token (`abcdef.0123456789abcdef`) used to establish trust between nodes and control plane.
    pub token: BootstrapTokenString,
    /// Human-friendly note on why the token exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Time to live of the token in seconds (24h when unset); exclusive with expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds: Option<i32>,
    /// When the token expires; exclusive with ttlSeconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<Time>,
    /// Ways the token may be used; by default for establishing bidirectional trust.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usages: Vec<String>,
    /// Extra groups the token authenticates as.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

/// Error returned when a string is not a bootstrap token of the form `abcdef.0123456789abcdef`.
/// The rejected text is kept for callers but never printed: it may be a real token with a typo.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("a bootstrap token is not of the form \"[a-z0-9]{{6}}.[a-z0-9]{{16}}\" (value not shown)")]
pub struct InvalidBootstrapToken(pub String);

impl std::fmt::Debug for InvalidBootstrapToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InvalidBootstrapToken(<redacted>)")
    }
}

/// A bootstrap token `<id>.<secret>` (6 and 16 characters of `[a-z0-9]`), written as one string.
/// `Debug` shows only the id, so logging a token never leaks its secret.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct BootstrapTokenString {
    /// The public part of the token (6 characters).
    pub id: String,
    /// The secret part of the token (16 characters).
    pub secret: String,
}

impl std::fmt::Debug for BootstrapTokenString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapTokenString")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl BootstrapTokenString {
    fn is_token_part(part: &str, len: usize) -> bool {
        part.len() == len
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    }
}

impl FromStr for BootstrapTokenString {
    type Err = InvalidBootstrapToken;

    fn from_str(token: &str) -> Result<Self, Self::Err> {
        match token.split_once('.') {
            Some((id, secret)) if Self::is_token_part(id, 6) && Self::is_token_part(secret, 16) => {
                Ok(Self {
                    id: id.to_owned(),
                    secret: secret.to_owned(),
                })
            }
            _ => Err(InvalidBootstrapToken(token.to_owned())),
        }
    }
}

impl fmt::Display for BootstrapTokenString {
    /// Writes `<id>.<secret>`, or nothing when either part is empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.id.is_empty() || self.secret.is_empty() {
            Ok(())
        } else {
            write!(f, "{}.{}", self.id, self.secret)
        }
    }
}

impl Serialize for BootstrapTokenString {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for BootstrapTokenString {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let token = Cow::<'de, str>::deserialize(deserializer)?;
        token.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for BootstrapTokenString {
    fn schema_name() -> Cow<'static, str> {
        "BootstrapTokenString".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A bootstrap token of the form abcdef.0123456789abcdef.",
            "type": "string",
            "minLength": 1,
            "maxLength": 23
        })
    }
}

/// etcd settings: either a local (stacked) etcd or an external cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Etcd {
    /// Settings of the etcd kubeadm runs on the control-plane nodes; exclusive with external.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub local: LocalEtcd,
    /// How to reach an external etcd cluster; exclusive with local.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub external: ExternalEtcd,
}

/// An etcd run by kubeadm on the control-plane nodes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalEtcd {
    /// Registry for the etcd image; the cluster's imageRepository when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_repository: Option<String>,
    /// Image tag; when set, kubeadm no longer changes the version on upgrades.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_tag: Option<String>,
    /// Directory of the etcd data; `/var/lib/etcd` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<String>,
    /// Extra etcd flags (name without leading dashes); they override kubeadm's defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<Arg>,
    /// Extra environment variables for etcd (Kubernetes >= 1.31).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_envs: Option<Vec<EnvVar>>,
    /// Extra Subject Alternative Names for the etcd server certificate.
    #[serde(
        rename = "serverCertSANs",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub server_cert_sans: Vec<String>,
    /// Extra Subject Alternative Names for the etcd peer certificate.
    #[serde(
        rename = "peerCertSANs",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub peer_cert_sans: Vec<String>,
}

/// An external etcd cluster; the certificate files must already be on the machine.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalEtcd {
    /// Endpoints of the etcd members.
    pub endpoints: Vec<String>,
    /// CA certificate file used to secure etcd communication.
    pub ca_file: String,
    /// Client certificate file used to secure etcd communication.
    pub cert_file: String,
    /// Client key file used to secure etcd communication.
    pub key_file: String,
}

/// Settings used only by `kubeadm join`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JoinConfiguration {
    /// How the joining node registers itself; for control-plane nodes keep it consistent with initConfiguration.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub node_registration: NodeRegistrationOptions,
    /// CA certificate used between node and control plane; `/etc/kubernetes/pki/ca.crt` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert_path: Option<String>,
    /// How the kubelet discovers the cluster during TLS bootstrap.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub discovery: Discovery,
    /// Control-plane instance to deploy on the joining node; none when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<JoinControlPlane>,
    /// kubeadm join phases to skip.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip_phases: Vec<String>,
    /// Patches applied to the components kubeadm deploys during `kubeadm join`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub patches: Patches,
    /// Timeouts used by kubeadm commands.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timeouts: Timeouts,
}

/// The control-plane instance deployed on a joining node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JoinControlPlane {
    /// Address and port the API server on this node advertises.
    #[serde(rename = "localAPIEndpoint", default, skip_serializing_if = "is_zero")]
    pub local_api_endpoint: ApiEndpoint,
}

/// How the kubelet finds and trusts the cluster during TLS bootstrap.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Discovery {
    /// Discovery through a bootstrap token; exclusive with file.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub bootstrap_token: BootstrapTokenDiscovery,
    /// Discovery through a kubeconfig file or URL; exclusive with bootstrapToken.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub file: FileDiscovery,
    /// Token for TLS bootstrap; defaults to bootstrapToken.token, and is needed with file
    /// discovery when the kubeconfig has no other credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_bootstrap_token: Option<String>,
}

/// Bootstrap-token based discovery.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapTokenDiscovery {
    /// Token used to validate the cluster information fetched from the control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// IP or domain name of the API server the information is fetched from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server_endpoint: Option<String>,
    /// Public key pins (`sha256:<hex>`) the discovered root CA must match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ca_cert_hashes: Vec<String>,
    /// Allows discovery without pinning the CA through caCertHashes (unsafe).
    #[serde(
        rename = "unsafeSkipCAVerification",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub unsafe_skip_ca_verification: Option<bool>,
}

/// Discovery through a kubeconfig file or URL.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileDiscovery {
    /// Path or URL of the kubeconfig file holding the cluster information.
    pub kube_config_path: String,
    /// When set, a kubeconfig is generated at kubeConfigPath from these settings, the
    /// Cluster's control plane endpoint and its CA.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kube_config: FileDiscoveryKubeConfig,
}

/// How to generate the kubeconfig used for discovery.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileDiscoveryKubeConfig {
    /// How to reach the cluster; server and CA data are filled from the Cluster by default.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cluster: KubeConfigCluster,
    /// The identity used to authenticate to the cluster.
    pub user: KubeConfigUser,
}

/// How to communicate with a Kubernetes cluster (a kubeconfig cluster entry).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigCluster {
    /// Address of the cluster (https://hostname:port); from the control plane endpoint by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Server name used to check the server certificate; the contacted hostname when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_server_name: Option<String>,
    /// Skips verification of the server certificate (insecure).
    #[serde(
        rename = "insecureSkipTLSVerify",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub insecure_skip_tls_verify: Option<bool>,
    /// PEM-encoded CA certificates (base64 in JSON); the Cluster's CA when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub certificate_authority_data: Option<ByteString>,
    /// Proxy URL (http, https or socks5) for all requests; from the proxy environment variables when unset.
    #[serde(rename = "proxyURL", default, skip_serializing_if = "Option::is_none")]
    pub proxy_url: Option<String>,
}

/// Identity used to authenticate to a cluster (a kubeconfig user entry); set authProvider or exec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigUser {
    /// A custom authentication plugin.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub auth_provider: KubeConfigAuthProvider,
    /// An exec-based credential plugin.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub exec: KubeConfigAuthExec,
}

/// Configuration of an authentication provider plugin.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigAuthProvider {
    /// Name of the authentication plugin.
    pub name: String,
    /// Parameters of the authentication plugin.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
}

/// A command run to obtain client credentials (client.authentication.k8s.io exec plugin).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigAuthExec {
    /// Command to execute.
    pub command: String,
    /// Arguments passed to the command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Extra environment variables for the command, added to the host's environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<KubeConfigAuthExecEnv>,
    /// Preferred ExecInfo version; client.authentication.k8s.io/v1 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Whether cluster information is passed to the plugin in KUBERNETES_EXEC_INFO (false by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provide_cluster_info: Option<bool>,
}

/// An environment variable for an exec credential plugin.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigAuthExecEnv {
    /// Name of the environment variable.
    pub name: String,
    /// Value of the environment variable.
    pub value: String,
}

/// A host path mounted into a control-plane component's pod.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostPathMount {
    /// Name of the volume in the pod template.
    pub name: String,
    /// Path on the host to mount.
    pub host_path: String,
    /// Path inside the pod where hostPath is mounted.
    pub mount_path: String,
    /// Whether the volume is mounted read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// Type of the host path (e.g. `DirectoryOrCreate`, `File`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_type: Option<String>,
}

/// Patches applied to the components kubeadm deploys.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Patches {
    /// Directory with patch files named `target[suffix][+patchtype].extension`
    /// (e.g. `kube-apiserver0+merge.yaml`); they can be written there through `files`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
}

/// A command-line argument given as name and value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Arg {
    /// Flag name without leading dashes.
    pub name: String,
    /// Flag value (may be empty).
    pub value: String,
}

impl Arg {
    /// Builds an argument from a name and a value.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            value: value.into(),
        }
    }
}

/// An environment variable of a container (the core/v1 EnvVar).
pub type EnvVar = k8s_openapi::api::core::v1::EnvVar;

/// Timeouts (in seconds) used by kubeadm commands.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Timeouts {
    /// Wait for a control-plane component (e.g. the API server) to be healthy; 240 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub control_plane_component_health_check_seconds: Option<i32>,
    /// Wait for the kubelet to be healthy; 240 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub kubelet_health_check_seconds: Option<i32>,
    /// Wait for a request of kubeadm to the API server; 60 when unset.
    #[serde(
        rename = "kubernetesAPICallSeconds",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0))]
    pub kubernetes_api_call_seconds: Option<i32>,
    /// Wait for a request of kubeadm to etcd; 120 when unset.
    #[serde(
        rename = "etcdAPICallSeconds",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0))]
    pub etcd_api_call_seconds: Option<i32>,
    /// Wait for the kubelet TLS bootstrap of a joining node; 300 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub tls_bootstrap_seconds: Option<i32>,
    /// Wait for kubeadm to validate the API server identity of a joining node; 300 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub discovery_seconds: Option<i32>,
}

impl_is_defined!(
    InitConfiguration,
    ClusterConfiguration,
    ApiServer,
    ControllerManager,
    Scheduler,
    Dns,
    ApiEndpoint,
    NodeRegistrationOptions,
    Etcd,
    LocalEtcd,
    ExternalEtcd,
    JoinConfiguration,
    Discovery,
    BootstrapTokenDiscovery,
    FileDiscovery,
    FileDiscoveryKubeConfig,
    KubeConfigCluster,
    KubeConfigUser,
    KubeConfigAuthProvider,
    KubeConfigAuthExec,
    Patches,
    Timeouts,
);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bootstrap_token_string_parses_and_prints() {
        let token: BootstrapTokenString = "abcdef.0123456789abcdef".parse().unwrap();
        assert_eq!(token.id, "abcdef");
        assert_eq!(token.secret, "0123456789abcdef");
        assert_eq!(
            serde_json::to_value(&token).unwrap(),
            json!("abcdef.0123456789abcdef")
        );
        for bad in [
            "",
            "abcdef",
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdef",
        ] {
            assert!(bad.parse::<BootstrapTokenString>().is_err(), "{bad}");
            assert!(serde_json::from_value::<BootstrapTokenString>(json!(bad)).is_err());
        }
        assert_eq!(BootstrapTokenString::default().to_string(), "");
    }

    #[test]
    fn token_secrets_never_reach_debug_or_error_text() {
        let token: BootstrapTokenString = "abcdef.0123456789abcdef".parse().unwrap();
        let debug = format!("{token:?}");
        assert!(
            debug.contains("abcdef") && !debug.contains("0123456789abcdef"),
            "{debug}"
        );
        let err = "abcdef.0123456789abcdeX"
            .parse::<BootstrapTokenString>()
            .unwrap_err();
        for text in [err.to_string(), format!("{err:?}")] {
            assert!(!text.contains("0123456789abcde"), "{text}");
        }
    }

    #[test]
    fn empty_nested_objects_are_omitted() {
        let parsed: ClusterConfiguration = serde_json::from_value(json!({
            "etcd": {"local": {}},
            "apiServer": {},
            "controlPlaneEndpoint": "cp.example.com:6443"
        }))
        .unwrap();
        assert!(!parsed.etcd.is_defined());
        assert!(!parsed.api_server.is_defined());
        assert!(parsed.is_defined());
        assert_eq!(
            serde_json::to_value(&parsed).unwrap(),
            json!({"controlPlaneEndpoint": "cp.example.com:6443"})
        );
        assert_eq!(
            serde_json::to_value(JoinConfiguration::default()).unwrap(),
            json!({})
        );
    }

    #[test]
    fn nil_and_empty_lists_differ_where_kubeadm_cares() {
        let no_taints: NodeRegistrationOptions = serde_json::from_value(json!({})).unwrap();
        let empty_taints: NodeRegistrationOptions =
            serde_json::from_value(json!({"taints": []})).unwrap();
        assert_eq!(no_taints.taints, None);
        assert_eq!(empty_taints.taints, Some(vec![]));
        assert_eq!(
            serde_json::to_value(&empty_taints).unwrap(),
            json!({"taints": []})
        );
    }

    #[test]
    fn external_etcd_and_file_discovery_round_trip() {
        let value = json!({
            "nodeRegistration": {"name": "worker-0", "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "discovery": {
                "file": {
                    "kubeConfigPath": "/etc/kubernetes/discovery.yaml",
                    "kubeConfig": {
                        "cluster": {
                            "certificateAuthorityData": "LS0tLS1CRUdJTg==",
                            "insecureSkipTLSVerify": false,
                            "proxyURL": "socks5://proxy:1080"
                        },
                        "user": {"exec": {
                            "command": "/usr/bin/token",
                            "args": ["--cluster", "c1"],
                            "env": [{"name": "A", "value": "b"}],
                            "apiVersion": "client.authentication.k8s.io/v1"
                        }}
                    }
                },
                "tlsBootstrapToken": "abcdef.0123456789abcdef"
            },
            "controlPlane": {"localAPIEndpoint": {"advertiseAddress": "10.0.0.4", "bindPort": 6443}},
            "timeouts": {"kubernetesAPICallSeconds": 30, "etcdAPICallSeconds": 60, "tlsBootstrapSeconds": 100}
        });
        let join: JoinConfiguration = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(
            join.discovery
                .file
                .kube_config
                .cluster
                .certificate_authority_data,
            Some(ByteString(b"-----BEGIN".to_vec()))
        );
        assert_eq!(serde_json::to_value(&join).unwrap(), value);

        let etcd = json!({"external": {
            "endpoints": ["https://10.0.0.1:2379"],
            "caFile": "/etc/etcd/ca.crt",
            "certFile": "/etc/etcd/client.crt",
            "keyFile": "/etc/etcd/client.key"
        }});
        let parsed: Etcd = serde_json::from_value(etcd.clone()).unwrap();
        assert!(parsed.external.is_defined() && !parsed.local.is_defined());
        assert_eq!(serde_json::to_value(&parsed).unwrap(), etcd);
    }
}
