//! The kubeadm configuration types embedded in a v1beta1 `KubeadmConfigSpec`.
//!
//! In this version extra arguments are maps (`BTreeMap<String, String>`) and timeouts live next to
//! the things they limit (`apiServer.timeoutForControlPlane`, `discovery.timeout`).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::bootstrap::v1beta2::BootstrapTokenString;

/// An environment variable passed to a control plane component (the core `EnvVar`).
pub type EnvVar = k8s_openapi::api::core::v1::EnvVar;

/// The asymmetric encryption algorithm used for keys and certificates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum EncryptionAlgorithmType {
    /// ECDSA with curve P-256.
    #[serde(rename = "ECDSA-P256")]
    EcdsaP256,
    /// ECDSA with curve P-384 (Kubernetes 1.34 or above).
    #[serde(rename = "ECDSA-P384")]
    EcdsaP384,
    /// RSA with a 2048 bit key (the default).
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

/// When kubeadm pulls images during `init` and `join`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ImagePullPolicy {
    /// Always pull images.
    Always,
    /// Pull images only if they are not present (the default).
    #[default]
    IfNotPresent,
    /// Never pull images.
    Never,
}

/// Runtime settings used only by `kubeadm init`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitConfiguration {
    /// API version of this kubeadm configuration object (TypeMeta).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of this kubeadm configuration object (TypeMeta).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Bootstrap tokens to create at `kubeadm init` time; not uploaded to the kubeadm-config ConfigMap.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bootstrap_tokens: Vec<BootstrapToken>,
    /// Settings for registering the new control plane node; keep consistent with the JoinConfiguration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_registration: Option<NodeRegistrationOptions>,
    /// The address and port the API server on this node advertises (defaults to the default interface).
    #[serde(
        default,
        rename = "localAPIEndpoint",
        skip_serializing_if = "Option::is_none"
    )]
    pub local_api_endpoint: Option<ApiEndpoint>,
    /// Phases of `kubeadm init` to skip (Kubernetes >= 1.22).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip_phases: Vec<String>,
    /// Patches applied to the components kubeadm deploys during `kubeadm init` (Kubernetes >= 1.22).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patches: Option<Patches>,
}

/// Cluster-wide settings of a kubeadm cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterConfiguration {
    /// API version of this kubeadm configuration object (TypeMeta).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of this kubeadm configuration object (TypeMeta).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Etcd settings; defaults to a local (stacked) etcd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd: Option<Etcd>,
    /// Networking topology of the cluster; defaults from the Cluster's `spec.clusterNetwork`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub networking: Option<Networking>,
    /// Target version of the control plane; defaults to the Machine's `spec.version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// Stable IP address or DNS name (with optional port) for the control plane.
    /// Defaults to the Cluster's control plane endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<String>,
    /// Extra settings for the API server.
    #[serde(default, rename = "apiServer", skip_serializing_if = "Option::is_none")]
    pub api_server: Option<ApiServer>,
    /// Extra settings for the controller manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_manager: Option<ControlPlaneComponent>,
    /// Extra settings for the scheduler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<ControlPlaneComponent>,
    /// Options for the DNS add-on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Dns>,
    /// Where certificates are stored; defaults to `/etc/kubernetes/pki`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates_dir: Option<String>,
    /// Container registry to pull control plane images from; defaults to kubeadm's registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_repository: Option<String>,
    /// Feature gates enabled by the user.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub feature_gates: BTreeMap<String, bool>,
    /// Validity in days of non-CA certificates generated by kubeadm (default 365; Kubernetes >= 1.31).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1095))]
    pub certificate_validity_period_days: Option<i32>,
    /// Validity in days of CA certificates generated by Cluster API (default 3650); immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 36500))]
    pub ca_certificate_validity_period_days: Option<i32>,
    /// Key algorithm for keys and certificates; defaults to RSA-2048 (Kubernetes >= 1.31).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_algorithm: Option<EncryptionAlgorithmType>,
    /// Name of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
}

/// Settings common to the control plane components.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneComponent {
    /// Extra flags passed to the component.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_args: BTreeMap<String, String>,
    /// Extra host path volumes mounted into the component.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_volumes: Vec<HostPathMount>,
    /// Extra environment variables for the component; they override the ones kubeadm sets
    /// (Kubernetes >= 1.31).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_envs: Vec<EnvVar>,
}

/// Settings of the API server.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiServer {
    /// Extra flags passed to the API server.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_args: BTreeMap<String, String>,
    /// Extra host path volumes mounted into the API server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_volumes: Vec<HostPathMount>,
    /// Extra environment variables for the API server (Kubernetes >= 1.31).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_envs: Vec<EnvVar>,
    /// Extra Subject Alternative Names for the API server serving certificate.
    #[serde(default, rename = "certSANs", skip_serializing_if = "Vec::is_empty")]
    pub cert_sans: Vec<String>,
    /// How long to wait for the API server to appear, as a duration (e.g. "4m0s").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_for_control_plane: Option<String>,
}

impl ApiServer {
    /// The settings shared with the other control plane components.
    pub fn component(&self) -> ControlPlaneComponent {
        ControlPlaneComponent {
            extra_args: self.extra_args.clone(),
            extra_volumes: self.extra_volumes.clone(),
            extra_envs: self.extra_envs.clone(),
        }
    }
}

/// The DNS add-on installed in the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Dns {
    /// Registry to pull the DNS image from; defaults to the ClusterConfiguration's imageRepository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_repository: Option<String>,
    /// Tag of the DNS image; when set, kubeadm no longer changes it on upgrades.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_tag: Option<String>,
}

/// Customizes the image of a component not released with Kubernetes itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageMeta {
    /// Registry to pull the image from; defaults to the ClusterConfiguration's imageRepository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_repository: Option<String>,
    /// Tag of the image; when set, kubeadm no longer changes it on upgrades.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_tag: Option<String>,
}

/// The API endpoints of a cluster as recorded by old kubeadm versions.
/// Deprecated: only kept for conversion to older kubeadm API versions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// API version of this kubeadm configuration object (TypeMeta).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of this kubeadm configuration object (TypeMeta).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// One endpoint per API server instance, keyed by the IP of the host's default interface.
    #[serde(default, rename = "apiEndpoints")]
    pub api_endpoints: BTreeMap<String, ApiEndpoint>,
}

/// The endpoint of an API server instance on a node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiEndpoint {
    /// IP address the API server advertises.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advertise_address: Option<String>,
    /// Secure port the API server binds to; defaults to 6443.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind_port: Option<i32>,
}

/// Settings for registering a node with the cluster in `kubeadm init` or `kubeadm join`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeRegistrationOptions {
    /// Name of the Node object (and CN of the kubelet client certificate); defaults to the hostname.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// CRI socket of the container runtime, recorded as an annotation on the Node.
    #[serde(default, rename = "criSocket", skip_serializing_if = "Option::is_none")]
    pub cri_socket: Option<String>,
    /// Taints the Node is registered with. Unset means kubeadm's default control plane taint;
    /// an empty list (`taints: []`) means no taints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taints: Option<Vec<Taint>>,
    /// Extra flags passed to the kubelet through the environment file kubeadm writes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kubelet_extra_args: BTreeMap<String, String>,
    /// Pre-flight errors to ignore when registering this node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore_preflight_errors: Vec<String>,
    /// Image pull policy for `kubeadm init` and `join`; defaults to IfNotPresent (Kubernetes >= 1.22).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,
    /// Whether kubeadm pulls images one at a time (default true; Kubernetes >= 1.31).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_serial: Option<bool>,
}

/// The networking topology of the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Networking {
    /// Subnet of Services; defaults from the Cluster's service CIDR blocks, or "10.96.0.0/12".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_subnet: Option<String>,
    /// Subnet of Pods; defaults from the Cluster's pod CIDR blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_subnet: Option<String>,
    /// DNS domain of Services; defaults to "cluster.local".
    #[serde(default, rename = "dnsDomain", skip_serializing_if = "Option::is_none")]
    pub dns_domain: Option<String>,
}

/// A bootstrap token, stored as a Secret in the cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapToken {
    /// The token, in the form `abcdef.0123456789abcdef`, used to join nodes.
    pub token: BootstrapTokenString,
    /// Human-friendly note on why the token exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Time to live of the token as a duration; defaults to 24h. Exclusive with `expires`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
    /// When the token expires; defaults to now + ttl. Exclusive with `ttl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<Time>,
    /// Ways the token can be used (by default authentication and signing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usages: Vec<String>,
    /// Extra groups the token authenticates as.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

/// Etcd settings; `local` and `external` are mutually exclusive.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Etcd {
    /// Settings of the local (stacked) etcd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalEtcd>,
    /// How to connect to an external etcd cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalEtcd>,
}

/// An etcd run by kubeadm as a static pod on each control plane node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalEtcd {
    /// Registry to pull the etcd image from; defaults to the ClusterConfiguration's imageRepository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_repository: Option<String>,
    /// Tag of the etcd image; when set, kubeadm no longer changes it on upgrades.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_tag: Option<String>,
    /// Data directory of etcd; defaults to "/var/lib/etcd".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<String>,
    /// Extra flags passed to etcd.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_args: BTreeMap<String, String>,
    /// Extra environment variables for etcd (Kubernetes >= 1.31).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_envs: Vec<EnvVar>,
    /// Extra Subject Alternative Names for the etcd server certificate.
    #[serde(
        default,
        rename = "serverCertSANs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub server_cert_sans: Vec<String>,
    /// Extra Subject Alternative Names for the etcd peer certificate.
    #[serde(
        default,
        rename = "peerCertSANs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub peer_cert_sans: Vec<String>,
}

impl LocalEtcd {
    /// The image settings of the local etcd.
    pub fn image_meta(&self) -> ImageMeta {
        ImageMeta {
            image_repository: self.image_repository.clone(),
            image_tag: self.image_tag.clone(),
        }
    }
}

/// An external etcd cluster; its client certificate files must already be on the node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalEtcd {
    /// Endpoints of the etcd members.
    pub endpoints: Vec<String>,
    /// CA file used to secure etcd communication.
    #[serde(rename = "caFile")]
    pub ca_file: String,
    /// Client certificate file used to secure etcd communication.
    pub cert_file: String,
    /// Client key file used to secure etcd communication.
    pub key_file: String,
}

/// Settings used by `kubeadm join` for a particular node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JoinConfiguration {
    /// API version of this kubeadm configuration object (TypeMeta).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of this kubeadm configuration object (TypeMeta).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Settings for registering the node; for control plane nodes keep consistent with the InitConfiguration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_registration: Option<NodeRegistrationOptions>,
    /// Path of the cluster CA certificate on the node; defaults to "/etc/kubernetes/pki/ca.crt".
    #[serde(
        default,
        rename = "caCertPath",
        skip_serializing_if = "Option::is_none"
    )]
    pub ca_cert_path: Option<String>,
    /// How the kubelet discovers the cluster during the TLS bootstrap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<Discovery>,
    /// The control plane instance to deploy on the joining node; unset for worker nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<JoinControlPlane>,
    /// Phases of `kubeadm join` to skip (Kubernetes >= 1.22).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip_phases: Vec<String>,
    /// Patches applied to the components kubeadm deploys during `kubeadm join` (Kubernetes >= 1.22).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patches: Option<Patches>,
}

/// The control plane instance deployed on a joining node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JoinControlPlane {
    /// The address and port the API server on this node advertises.
    #[serde(
        default,
        rename = "localAPIEndpoint",
        skip_serializing_if = "Option::is_none"
    )]
    pub local_api_endpoint: Option<ApiEndpoint>,
}

/// How the kubelet discovers the cluster during the TLS bootstrap.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Discovery {
    /// Discovery with a bootstrap token; exclusive with `file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_token: Option<BootstrapTokenDiscovery>,
    /// Discovery with a kubeconfig file or URL; exclusive with `bootstrapToken`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileDiscovery>,
    /// Token used for the TLS bootstrap; defaults to `bootstrapToken.token`.
    /// Required with `file` when the kubeconfig has no other credentials.
    #[serde(
        default,
        rename = "tlsBootstrapToken",
        skip_serializing_if = "Option::is_none"
    )]
    pub tls_bootstrap_token: Option<String>,
    /// Discovery timeout as a duration (e.g. "5m0s").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// Settings of bootstrap token based discovery.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapTokenDiscovery {
    /// Token used to validate the cluster information fetched from the control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// IP or DNS name (with port) of the API server to fetch the cluster information from.
    #[serde(
        default,
        rename = "apiServerEndpoint",
        skip_serializing_if = "Option::is_none"
    )]
    pub api_server_endpoint: Option<String>,
    /// Public key pins (`sha256:<hex>`) the discovered root CA must match; empty disables pinning.
    #[serde(
        default,
        rename = "caCertHashes",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub ca_cert_hashes: Vec<String>,
    /// Allow discovery without pinning the CA through `caCertHashes` (insecure).
    #[serde(
        default,
        rename = "unsafeSkipCAVerification",
        skip_serializing_if = "Option::is_none"
    )]
    pub unsafe_skip_ca_verification: Option<bool>,
}

/// Discovery through a kubeconfig file or URL.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileDiscovery {
    /// Path or URL of the kubeconfig file with the cluster information.
    pub kube_config_path: String,
    /// When set, a kubeconfig is generated at `kubeConfigPath` from these settings, the Cluster's
    /// control plane endpoint and its CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_config: Option<FileDiscoveryKubeConfig>,
}

/// How to generate the discovery kubeconfig.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileDiscoveryKubeConfig {
    /// How to reach the cluster; server and CA data default to the Cluster's endpoint and CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<KubeConfigCluster>,
    /// The identity to authenticate with.
    pub user: KubeConfigUser,
}

/// How to reach a Kubernetes cluster (a subset of a kubeconfig cluster entry).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigCluster {
    /// Address of the API server (https://host:port); defaults to the Cluster's endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Server name used to check the server certificate; defaults to the host of `server`.
    #[serde(
        default,
        rename = "tlsServerName",
        skip_serializing_if = "Option::is_none"
    )]
    pub tls_server_name: Option<String>,
    /// Skip verification of the server certificate (insecure).
    #[serde(
        default,
        rename = "insecureSkipTLSVerify",
        skip_serializing_if = "Option::is_none"
    )]
    pub insecure_skip_tls_verify: Option<bool>,
    /// PEM-encoded CA certificates (base64 in JSON); defaults to the Cluster's CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub certificate_authority_data: Option<ByteString>,
    /// Proxy URL (http, https or socks5) for all requests; defaults to the proxy environment variables.
    #[serde(default, rename = "proxyURL", skip_serializing_if = "Option::is_none")]
    pub proxy_url: Option<String>,
}

/// The identity used to authenticate; either `authProvider` or `exec` must be set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigUser {
    /// A custom authentication plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_provider: Option<KubeConfigAuthProvider>,
    /// An exec-based credential plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<KubeConfigAuthExec>,
}

/// Settings of an authentication provider plugin.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigAuthProvider {
    /// Name of the authentication plugin.
    pub name: String,
    /// Parameters of the authentication plugin.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
}

/// A command run to obtain client credentials (see the client.authentication.k8s.io API group).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigAuthExec {
    /// Command to execute.
    pub command: String,
    /// Arguments of the command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Extra environment variables for the command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<KubeConfigAuthExecEnv>,
    /// Preferred ExecCredential version; defaults to client.authentication.k8s.io/v1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Whether to pass cluster information (possibly large CA data) in KUBERNETES_EXEC_INFO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provide_cluster_info: Option<bool>,
}

/// An environment variable for an exec credential plugin.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigAuthExecEnv {
    /// Name of the variable.
    pub name: String,
    /// Value of the variable.
    pub value: String,
}

/// A host path volume mounted into a control plane component.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostPathMount {
    /// Name of the volume in the pod.
    pub name: String,
    /// Path on the host.
    pub host_path: String,
    /// Path in the pod where the host path is mounted.
    pub mount_path: String,
    /// Mount the volume read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// Type of the host path (e.g. DirectoryOrCreate, File).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_type: Option<String>,
}

/// Patches kubeadm applies to the components it deploys.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Patches {
    /// Directory with patch files named `target[suffix][+patchtype].extension`,
    /// e.g. `kube-apiserver0+merge.yaml`; they can be written there with `files`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cluster_configuration_round_trip() {
        let value = json!({
            "apiVersion": "kubeadm.k8s.io/v1beta3",
            "kind": "ClusterConfiguration",
            "kubernetesVersion": "v1.29.3",
            "clusterName": "prod",
            "controlPlaneEndpoint": "10.0.0.10:6443",
            "networking": {"podSubnet": "192.168.0.0/16", "serviceSubnet": "10.96.0.0/12", "dnsDomain": "cluster.local"},
            "apiServer": {
                "certSANs": ["localhost", "127.0.0.1"],
                "extraArgs": {"cloud-provider": "external", "audit-log-path": "/var/log/audit.log"},
                "extraVolumes": [{"name": "audit", "hostPath": "/var/log", "mountPath": "/var/log", "pathType": "DirectoryOrCreate"}],
                "extraEnvs": [{"name": "HTTP_PROXY", "value": "http://proxy:3128"}],
                "timeoutForControlPlane": "20m0s"
            },
            "controllerManager": {"extraArgs": {"bind-address": "0.0.0.0"}},
            "scheduler": {"extraArgs": {"bind-address": "0.0.0.0"}},
            "dns": {"imageRepository": "registry.k8s.io/coredns", "imageTag": "v1.11.1"},
            "etcd": {"external": {"endpoints": ["https://etcd:2379"], "caFile": "/ca", "certFile": "/crt", "keyFile": "/key"}},
            "featureGates": {"EtcdLearnerMode": true},
            "certificateValidityPeriodDays": 365,
            "caCertificateValidityPeriodDays": 3650,
            "encryptionAlgorithm": "ECDSA-P256",
            "imageRepository": "registry.k8s.io",
            "certificatesDir": "/etc/kubernetes/pki"
        });
        let parsed: ClusterConfiguration = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(
            parsed.encryption_algorithm,
            Some(EncryptionAlgorithmType::EcdsaP256)
        );
        assert_eq!(
            parsed
                .api_server
                .as_ref()
                .unwrap()
                .timeout_for_control_plane
                .as_deref(),
            Some("20m0s")
        );
        assert_eq!(serde_json::to_value(&parsed).unwrap(), value);
    }

    #[test]
    fn empty_taints_are_kept() {
        let value = json!({"taints": []});
        let parsed: NodeRegistrationOptions = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(parsed.taints, Some(vec![]));
        assert_eq!(serde_json::to_value(&parsed).unwrap(), value);
        let unset: NodeRegistrationOptions = serde_json::from_value(json!({})).unwrap();
        assert_eq!(unset.taints, None);
        assert_eq!(serde_json::to_value(&unset).unwrap(), json!({}));
    }

    #[test]
    fn join_with_file_discovery_round_trip() {
        let value = json!({
            "caCertPath": "/etc/kubernetes/pki/ca.crt",
            "discovery": {
                "file": {
                    "kubeConfigPath": "/etc/kubernetes/discovery.conf",
                    "kubeConfig": {
                        "cluster": {"server": "https://10.0.0.10:6443", "certificateAuthorityData": "LS0tLS1CRUdJTg==", "insecureSkipTLSVerify": false, "proxyURL": "socks5://proxy:1080", "tlsServerName": "api"},
                        "user": {"exec": {"command": "/usr/bin/token", "args": ["get"], "env": [{"name": "A", "value": "b"}], "apiVersion": "client.authentication.k8s.io/v1", "provideClusterInfo": true}}
                    }
                },
                "tlsBootstrapToken": "abcdef.0123456789abcdef",
                "timeout": "5m0s"
            },
            "controlPlane": {"localAPIEndpoint": {"advertiseAddress": "10.0.0.11", "bindPort": 6443}},
            "skipPhases": ["preflight"],
            "patches": {"directory": "/etc/kubernetes/patches"}
        });
        let parsed: JoinConfiguration = serde_json::from_value(value.clone()).unwrap();
        let ca = parsed
            .discovery
            .as_ref()
            .unwrap()
            .file
            .as_ref()
            .unwrap()
            .kube_config
            .as_ref()
            .unwrap();
        assert_eq!(
            ca.cluster
                .as_ref()
                .unwrap()
                .certificate_authority_data
                .as_ref()
                .unwrap()
                .0,
            b"-----BEGIN"
        );
        assert_eq!(serde_json::to_value(&parsed).unwrap(), value);
    }
}
