//! Field mapping of KubeadmConfig and KubeadmConfigTemplate between v1beta1 and v1beta2 (the hub).
//!
//! Mappings that look lossy, and why nothing is lost (see `crate::conversion` for the annotations):
//! - `extraArgs`/`kubeletExtraArgs`: v1beta1 maps become lists sorted by name; a v1beta2 list in
//!   another order or with repeated names has no map form, so the conversion-data annotation keeps it
//!   (the map keeps the last value of a name, as kubeadm does).
//! - Timeouts: `apiServer.timeoutForControlPlane` becomes `controlPlaneComponentHealthCheckSeconds`
//!   of both init and join timeouts, `discovery.timeout` becomes join `tlsBootstrapSeconds`, as
//!   Cluster API maps them; the other v1beta2 timeouts have no v1beta1 field and live in the annotation.
//! - Durations are whole seconds in v1beta2; sub-second parts and spellings such as `10m` (for
//!   `10m0s`) stay in the v1beta1-data annotation.
//! - `apiVersion`/`kind` of the kubeadm objects and ClusterConfiguration `networking`,
//!   `kubernetesVersion` and `clusterName` are gone in v1beta2 (the Cluster provides them), and so is
//!   `useExperimentalRetryJoin`: the v1beta1-data annotation keeps them.
//! - Optional objects: v1beta2 leaves empty objects out, so an explicitly empty v1beta1 object
//!   (`ntp: {}`) is kept by the annotation.
//! - `imagePullPolicy` is free text in v1beta2: a value v1beta1's enum lacks stays in the annotation.
//! - Partition `layout` is a plain bool in v1beta1: unset in v1beta2 reads as false.
//! - Status: `ready` ⇄ `initialization.dataSecretCreated` (false ⇄ unset); v1beta1 conditions,
//!   `failureReason` and `failureMessage` ⇄ `deprecated.v1beta1`; `v1beta2.conditions` ⇄ `conditions`.

use std::collections::BTreeMap;

use super::{v1beta1 as v1, v1beta2 as v2};
use crate::conversion::sealed::FieldMapping;
use crate::conversion::{ContractVersions, ConversionError, duration, seconds, to_duration};

/// True when a hub value differs from its zero value (v1beta2 leaves zero values out).
pub(crate) fn defined<T: Default + PartialEq>(value: &T) -> bool {
    *value != T::default()
}

/// The v1beta1 form of a hub value that v1beta2 leaves out when empty.
pub(crate) fn when_defined<H: Default + PartialEq, S>(
    hub: &H,
    convert: impl FnOnce(&H) -> S,
) -> Option<S> {
    defined(hub).then(|| convert(hub))
}

fn args_to_hub(args: &BTreeMap<String, String>) -> Vec<v2::Arg> {
    args.iter()
        .map(|(name, value)| v2::Arg::new(name, value))
        .collect()
}

fn args_from_hub(args: &[v2::Arg]) -> BTreeMap<String, String> {
    // A later argument of the same name wins, as on a command line.
    args.iter()
        .map(|arg| (arg.name.clone(), arg.value.clone()))
        .collect()
}

fn envs_to_hub(envs: &[v1::EnvVar]) -> Option<Vec<v2::EnvVar>> {
    (!envs.is_empty()).then(|| envs.to_vec())
}

fn envs_from_hub(envs: &Option<Vec<v2::EnvVar>>) -> Vec<v1::EnvVar> {
    envs.clone().unwrap_or_default()
}

fn volume_to_hub(volume: &v1::HostPathMount) -> v2::HostPathMount {
    v2::HostPathMount {
        name: volume.name.clone(),
        host_path: volume.host_path.clone(),
        mount_path: volume.mount_path.clone(),
        read_only: volume.read_only,
        path_type: volume.path_type.clone(),
    }
}

fn volume_from_hub(volume: &v2::HostPathMount) -> v1::HostPathMount {
    v1::HostPathMount {
        name: volume.name.clone(),
        host_path: volume.host_path.clone(),
        mount_path: volume.mount_path.clone(),
        read_only: volume.read_only,
        path_type: volume.path_type.clone(),
    }
}

fn encryption_to_hub(algorithm: v1::EncryptionAlgorithmType) -> v2::EncryptionAlgorithmType {
    match algorithm {
        v1::EncryptionAlgorithmType::EcdsaP256 => v2::EncryptionAlgorithmType::EcdsaP256,
        v1::EncryptionAlgorithmType::EcdsaP384 => v2::EncryptionAlgorithmType::EcdsaP384,
        v1::EncryptionAlgorithmType::Rsa2048 => v2::EncryptionAlgorithmType::Rsa2048,
        v1::EncryptionAlgorithmType::Rsa3072 => v2::EncryptionAlgorithmType::Rsa3072,
        v1::EncryptionAlgorithmType::Rsa4096 => v2::EncryptionAlgorithmType::Rsa4096,
    }
}

fn encryption_from_hub(algorithm: v2::EncryptionAlgorithmType) -> v1::EncryptionAlgorithmType {
    match algorithm {
        v2::EncryptionAlgorithmType::EcdsaP256 => v1::EncryptionAlgorithmType::EcdsaP256,
        v2::EncryptionAlgorithmType::EcdsaP384 => v1::EncryptionAlgorithmType::EcdsaP384,
        v2::EncryptionAlgorithmType::Rsa2048 => v1::EncryptionAlgorithmType::Rsa2048,
        v2::EncryptionAlgorithmType::Rsa3072 => v1::EncryptionAlgorithmType::Rsa3072,
        v2::EncryptionAlgorithmType::Rsa4096 => v1::EncryptionAlgorithmType::Rsa4096,
    }
}

fn pull_policy_to_hub(policy: v1::ImagePullPolicy) -> String {
    match policy {
        v1::ImagePullPolicy::Always => "Always",
        v1::ImagePullPolicy::IfNotPresent => "IfNotPresent",
        v1::ImagePullPolicy::Never => "Never",
    }
    .to_owned()
}

fn pull_policy_from_hub(policy: &str) -> Option<v1::ImagePullPolicy> {
    match policy {
        "Always" => Some(v1::ImagePullPolicy::Always),
        "IfNotPresent" => Some(v1::ImagePullPolicy::IfNotPresent),
        "Never" => Some(v1::ImagePullPolicy::Never),
        _ => None,
    }
}

fn cluster_configuration_to_hub(config: &v1::ClusterConfiguration) -> v2::ClusterConfiguration {
    let api_server = config.api_server.as_ref();
    let controller_manager = config.controller_manager.as_ref();
    let scheduler = config.scheduler.as_ref();
    v2::ClusterConfiguration {
        etcd: config.etcd.as_ref().map(etcd_to_hub).unwrap_or_default(),
        control_plane_endpoint: config.control_plane_endpoint.clone(),
        api_server: api_server
            .map(|a| v2::ApiServer {
                extra_args: args_to_hub(&a.extra_args),
                extra_volumes: a.extra_volumes.iter().map(volume_to_hub).collect(),
                extra_envs: envs_to_hub(&a.extra_envs),
                cert_sans: a.cert_sans.clone(),
            })
            .unwrap_or_default(),
        controller_manager: controller_manager
            .map(|c| v2::ControllerManager {
                extra_args: args_to_hub(&c.extra_args),
                extra_volumes: c.extra_volumes.iter().map(volume_to_hub).collect(),
                extra_envs: envs_to_hub(&c.extra_envs),
            })
            .unwrap_or_default(),
        scheduler: scheduler
            .map(|c| v2::Scheduler {
                extra_args: args_to_hub(&c.extra_args),
                extra_volumes: c.extra_volumes.iter().map(volume_to_hub).collect(),
                extra_envs: envs_to_hub(&c.extra_envs),
            })
            .unwrap_or_default(),
        dns: config
            .dns
            .as_ref()
            .map(|d| v2::Dns {
                image_repository: d.image_repository.clone(),
                image_tag: d.image_tag.clone(),
            })
            .unwrap_or_default(),
        certificates_dir: config.certificates_dir.clone(),
        image_repository: config.image_repository.clone(),
        feature_gates: config.feature_gates.clone(),
        certificate_validity_period_days: config.certificate_validity_period_days,
        ca_certificate_validity_period_days: config.ca_certificate_validity_period_days,
        encryption_algorithm: config.encryption_algorithm.map(encryption_to_hub),
    }
}

fn cluster_configuration_from_hub(config: &v2::ClusterConfiguration) -> v1::ClusterConfiguration {
    v1::ClusterConfiguration {
        api_version: None,
        kind: None,
        etcd: when_defined(&config.etcd, etcd_from_hub),
        networking: None,
        kubernetes_version: None,
        control_plane_endpoint: config.control_plane_endpoint.clone(),
        api_server: when_defined(&config.api_server, |a| v1::ApiServer {
            extra_args: args_from_hub(&a.extra_args),
            extra_volumes: a.extra_volumes.iter().map(volume_from_hub).collect(),
            extra_envs: envs_from_hub(&a.extra_envs),
            cert_sans: a.cert_sans.clone(),
            timeout_for_control_plane: None,
        }),
        controller_manager: when_defined(&config.controller_manager, |c| {
            v1::ControlPlaneComponent {
                extra_args: args_from_hub(&c.extra_args),
                extra_volumes: c.extra_volumes.iter().map(volume_from_hub).collect(),
                extra_envs: envs_from_hub(&c.extra_envs),
            }
        }),
        scheduler: when_defined(&config.scheduler, |c| v1::ControlPlaneComponent {
            extra_args: args_from_hub(&c.extra_args),
            extra_volumes: c.extra_volumes.iter().map(volume_from_hub).collect(),
            extra_envs: envs_from_hub(&c.extra_envs),
        }),
        dns: when_defined(&config.dns, |d| v1::Dns {
            image_repository: d.image_repository.clone(),
            image_tag: d.image_tag.clone(),
        }),
        certificates_dir: config.certificates_dir.clone(),
        image_repository: config.image_repository.clone(),
        feature_gates: config.feature_gates.clone(),
        certificate_validity_period_days: config.certificate_validity_period_days,
        ca_certificate_validity_period_days: config.ca_certificate_validity_period_days,
        encryption_algorithm: config.encryption_algorithm.map(encryption_from_hub),
        cluster_name: None,
    }
}

fn etcd_to_hub(etcd: &v1::Etcd) -> v2::Etcd {
    v2::Etcd {
        local: etcd
            .local
            .as_ref()
            .map(|l| v2::LocalEtcd {
                image_repository: l.image_repository.clone(),
                image_tag: l.image_tag.clone(),
                data_dir: l.data_dir.clone(),
                extra_args: args_to_hub(&l.extra_args),
                extra_envs: envs_to_hub(&l.extra_envs),
                server_cert_sans: l.server_cert_sans.clone(),
                peer_cert_sans: l.peer_cert_sans.clone(),
            })
            .unwrap_or_default(),
        external: etcd
            .external
            .as_ref()
            .map(|e| v2::ExternalEtcd {
                endpoints: e.endpoints.clone(),
                ca_file: e.ca_file.clone(),
                cert_file: e.cert_file.clone(),
                key_file: e.key_file.clone(),
            })
            .unwrap_or_default(),
    }
}

fn etcd_from_hub(etcd: &v2::Etcd) -> v1::Etcd {
    v1::Etcd {
        local: when_defined(&etcd.local, |l| v1::LocalEtcd {
            image_repository: l.image_repository.clone(),
            image_tag: l.image_tag.clone(),
            data_dir: l.data_dir.clone(),
            extra_args: args_from_hub(&l.extra_args),
            extra_envs: envs_from_hub(&l.extra_envs),
            server_cert_sans: l.server_cert_sans.clone(),
            peer_cert_sans: l.peer_cert_sans.clone(),
        }),
        external: when_defined(&etcd.external, |e| v1::ExternalEtcd {
            endpoints: e.endpoints.clone(),
            ca_file: e.ca_file.clone(),
            cert_file: e.cert_file.clone(),
            key_file: e.key_file.clone(),
        }),
    }
}

fn endpoint_to_hub(endpoint: &v1::ApiEndpoint) -> v2::ApiEndpoint {
    v2::ApiEndpoint {
        advertise_address: endpoint.advertise_address.clone(),
        bind_port: endpoint.bind_port,
    }
}

fn endpoint_from_hub(endpoint: &v2::ApiEndpoint) -> v1::ApiEndpoint {
    v1::ApiEndpoint {
        advertise_address: endpoint.advertise_address.clone(),
        bind_port: endpoint.bind_port,
    }
}

fn patches_to_hub(patches: &v1::Patches) -> v2::Patches {
    v2::Patches {
        directory: patches.directory.clone(),
    }
}

fn patches_from_hub(patches: &v2::Patches) -> v1::Patches {
    v1::Patches {
        directory: patches.directory.clone(),
    }
}

fn node_registration_to_hub(options: &v1::NodeRegistrationOptions) -> v2::NodeRegistrationOptions {
    v2::NodeRegistrationOptions {
        name: options.name.clone(),
        cri_socket: options.cri_socket.clone(),
        taints: options.taints.clone(),
        kubelet_extra_args: args_to_hub(&options.kubelet_extra_args),
        ignore_preflight_errors: options.ignore_preflight_errors.clone(),
        image_pull_policy: options.image_pull_policy.map(pull_policy_to_hub),
        image_pull_serial: options.image_pull_serial,
    }
}

fn node_registration_from_hub(
    options: &v2::NodeRegistrationOptions,
) -> v1::NodeRegistrationOptions {
    v1::NodeRegistrationOptions {
        name: options.name.clone(),
        cri_socket: options.cri_socket.clone(),
        taints: options.taints.clone(),
        kubelet_extra_args: args_from_hub(&options.kubelet_extra_args),
        ignore_preflight_errors: options.ignore_preflight_errors.clone(),
        image_pull_policy: options
            .image_pull_policy
            .as_deref()
            .and_then(pull_policy_from_hub),
        image_pull_serial: options.image_pull_serial,
    }
}

fn init_configuration_to_hub(
    config: &v1::InitConfiguration,
    at: &str,
) -> Result<v2::InitConfiguration, ConversionError> {
    let bootstrap_tokens = config
        .bootstrap_tokens
        .iter()
        .enumerate()
        .map(|(i, token)| {
            Ok(v2::BootstrapToken {
                token: token.token.clone(),
                description: token.description.clone(),
                ttl_seconds: seconds(token.ttl.as_ref(), || {
                    format!("{at}.initConfiguration.bootstrapTokens[{i}].ttl")
                })?,
                expires: token.expires.clone(),
                usages: token.usages.clone(),
                groups: token.groups.clone(),
            })
        })
        .collect::<Result<_, ConversionError>>()?;
    Ok(v2::InitConfiguration {
        bootstrap_tokens,
        node_registration: config
            .node_registration
            .as_ref()
            .map(node_registration_to_hub)
            .unwrap_or_default(),
        local_api_endpoint: config
            .local_api_endpoint
            .as_ref()
            .map(endpoint_to_hub)
            .unwrap_or_default(),
        skip_phases: config.skip_phases.clone(),
        patches: config
            .patches
            .as_ref()
            .map(patches_to_hub)
            .unwrap_or_default(),
        timeouts: v2::Timeouts::default(),
    })
}

fn init_configuration_from_hub(config: &v2::InitConfiguration) -> v1::InitConfiguration {
    v1::InitConfiguration {
        api_version: None,
        kind: None,
        bootstrap_tokens: config
            .bootstrap_tokens
            .iter()
            .map(|token| v1::BootstrapToken {
                token: token.token.clone(),
                description: token.description.clone(),
                ttl: to_duration(token.ttl_seconds),
                expires: token.expires.clone(),
                usages: token.usages.clone(),
                groups: token.groups.clone(),
            })
            .collect(),
        node_registration: when_defined(&config.node_registration, node_registration_from_hub),
        local_api_endpoint: when_defined(&config.local_api_endpoint, endpoint_from_hub),
        skip_phases: config.skip_phases.clone(),
        patches: when_defined(&config.patches, patches_from_hub),
    }
}

fn file_discovery_to_hub(file: &v1::FileDiscovery) -> v2::FileDiscovery {
    v2::FileDiscovery {
        kube_config_path: file.kube_config_path.clone(),
        kube_config: file
            .kube_config
            .as_ref()
            .map(|k| v2::FileDiscoveryKubeConfig {
                cluster: k
                    .cluster
                    .as_ref()
                    .map(|c| v2::KubeConfigCluster {
                        server: c.server.clone(),
                        tls_server_name: c.tls_server_name.clone(),
                        insecure_skip_tls_verify: c.insecure_skip_tls_verify,
                        certificate_authority_data: c.certificate_authority_data.clone(),
                        proxy_url: c.proxy_url.clone(),
                    })
                    .unwrap_or_default(),
                user: v2::KubeConfigUser {
                    auth_provider: k
                        .user
                        .auth_provider
                        .as_ref()
                        .map(|p| v2::KubeConfigAuthProvider {
                            name: p.name.clone(),
                            config: p.config.clone(),
                        })
                        .unwrap_or_default(),
                    exec: k
                        .user
                        .exec
                        .as_ref()
                        .map(|e| v2::KubeConfigAuthExec {
                            command: e.command.clone(),
                            args: e.args.clone(),
                            env: e
                                .env
                                .iter()
                                .map(|v| v2::KubeConfigAuthExecEnv {
                                    name: v.name.clone(),
                                    value: v.value.clone(),
                                })
                                .collect(),
                            api_version: e.api_version.clone(),
                            provide_cluster_info: e.provide_cluster_info,
                        })
                        .unwrap_or_default(),
                },
            })
            .unwrap_or_default(),
    }
}

fn file_discovery_from_hub(file: &v2::FileDiscovery) -> v1::FileDiscovery {
    v1::FileDiscovery {
        kube_config_path: file.kube_config_path.clone(),
        kube_config: when_defined(&file.kube_config, |k| v1::FileDiscoveryKubeConfig {
            cluster: when_defined(&k.cluster, |c| v1::KubeConfigCluster {
                server: c.server.clone(),
                tls_server_name: c.tls_server_name.clone(),
                insecure_skip_tls_verify: c.insecure_skip_tls_verify,
                certificate_authority_data: c.certificate_authority_data.clone(),
                proxy_url: c.proxy_url.clone(),
            }),
            user: v1::KubeConfigUser {
                auth_provider: when_defined(&k.user.auth_provider, |p| {
                    v1::KubeConfigAuthProvider {
                        name: p.name.clone(),
                        config: p.config.clone(),
                    }
                }),
                exec: when_defined(&k.user.exec, |e| v1::KubeConfigAuthExec {
                    command: e.command.clone(),
                    args: e.args.clone(),
                    env: e
                        .env
                        .iter()
                        .map(|v| v1::KubeConfigAuthExecEnv {
                            name: v.name.clone(),
                            value: v.value.clone(),
                        })
                        .collect(),
                    api_version: e.api_version.clone(),
                    provide_cluster_info: e.provide_cluster_info,
                }),
            },
        }),
    }
}

fn join_configuration_to_hub(config: &v1::JoinConfiguration) -> v2::JoinConfiguration {
    let discovery = config.discovery.as_ref();
    v2::JoinConfiguration {
        node_registration: config
            .node_registration
            .as_ref()
            .map(node_registration_to_hub)
            .unwrap_or_default(),
        ca_cert_path: config.ca_cert_path.clone(),
        discovery: discovery
            .map(|d| v2::Discovery {
                bootstrap_token: d
                    .bootstrap_token
                    .as_ref()
                    .map(|t| v2::BootstrapTokenDiscovery {
                        token: t.token.clone(),
                        api_server_endpoint: t.api_server_endpoint.clone(),
                        ca_cert_hashes: t.ca_cert_hashes.clone(),
                        unsafe_skip_ca_verification: t.unsafe_skip_ca_verification,
                    })
                    .unwrap_or_default(),
                file: d
                    .file
                    .as_ref()
                    .map(file_discovery_to_hub)
                    .unwrap_or_default(),
                tls_bootstrap_token: d.tls_bootstrap_token.clone(),
            })
            .unwrap_or_default(),
        control_plane: config.control_plane.as_ref().map(|c| v2::JoinControlPlane {
            local_api_endpoint: c
                .local_api_endpoint
                .as_ref()
                .map(endpoint_to_hub)
                .unwrap_or_default(),
        }),
        skip_phases: config.skip_phases.clone(),
        patches: config
            .patches
            .as_ref()
            .map(patches_to_hub)
            .unwrap_or_default(),
        timeouts: v2::Timeouts::default(),
    }
}

fn join_configuration_from_hub(config: &v2::JoinConfiguration) -> v1::JoinConfiguration {
    v1::JoinConfiguration {
        api_version: None,
        kind: None,
        node_registration: when_defined(&config.node_registration, node_registration_from_hub),
        ca_cert_path: config.ca_cert_path.clone(),
        discovery: when_defined(&config.discovery, |d| v1::Discovery {
            bootstrap_token: when_defined(&d.bootstrap_token, |t| v1::BootstrapTokenDiscovery {
                token: t.token.clone(),
                api_server_endpoint: t.api_server_endpoint.clone(),
                ca_cert_hashes: t.ca_cert_hashes.clone(),
                unsafe_skip_ca_verification: t.unsafe_skip_ca_verification,
            }),
            file: when_defined(&d.file, file_discovery_from_hub),
            tls_bootstrap_token: d.tls_bootstrap_token.clone(),
            timeout: None,
        }),
        control_plane: config.control_plane.as_ref().map(|c| v1::JoinControlPlane {
            local_api_endpoint: when_defined(&c.local_api_endpoint, endpoint_from_hub),
        }),
        skip_phases: config.skip_phases.clone(),
        patches: when_defined(&config.patches, patches_from_hub),
    }
}

fn file_to_hub(file: &v1::File) -> v2::File {
    v2::File {
        path: file.path.clone(),
        owner: file.owner.clone(),
        permissions: file.permissions.clone(),
        encoding: file.encoding.map(|e| match e {
            v1::Encoding::Base64 => v2::Encoding::Base64,
            v1::Encoding::Gzip => v2::Encoding::Gzip,
            v1::Encoding::GzipBase64 => v2::Encoding::GzipBase64,
        }),
        append: file.append,
        content: file.content.clone(),
        content_from: file
            .content_from
            .as_ref()
            .map(|s| v2::FileSource {
                secret: v2::SecretFileSource {
                    name: s.secret.name.clone(),
                    key: s.secret.key.clone(),
                },
            })
            .unwrap_or_default(),
        content_format: file.content_format.map(|f| match f {
            v1::FileContentFormat::Raw => v2::FileContentFormat::Raw,
            v1::FileContentFormat::Template => v2::FileContentFormat::Template,
        }),
        defer: file.defer,
    }
}

fn file_from_hub(file: &v2::File) -> v1::File {
    v1::File {
        path: file.path.clone(),
        owner: file.owner.clone(),
        permissions: file.permissions.clone(),
        encoding: file.encoding.map(|e| match e {
            v2::Encoding::Base64 => v1::Encoding::Base64,
            v2::Encoding::Gzip => v1::Encoding::Gzip,
            v2::Encoding::GzipBase64 => v1::Encoding::GzipBase64,
        }),
        append: file.append,
        content: file.content.clone(),
        content_from: when_defined(&file.content_from, |s| v1::FileSource {
            secret: v1::SecretFileSource {
                name: s.secret.name.clone(),
                key: s.secret.key.clone(),
            },
        }),
        content_format: file.content_format.map(|f| match f {
            v2::FileContentFormat::Raw => v1::FileContentFormat::Raw,
            v2::FileContentFormat::Template => v1::FileContentFormat::Template,
        }),
        defer: file.defer,
    }
}

fn table_type_to_hub(table: v1::PartitionTableType) -> v2::PartitionTableType {
    match table {
        v1::PartitionTableType::Mbr => v2::PartitionTableType::Mbr,
        v1::PartitionTableType::Gpt => v2::PartitionTableType::Gpt,
    }
}

fn table_type_from_hub(table: v2::PartitionTableType) -> v1::PartitionTableType {
    match table {
        v2::PartitionTableType::Mbr => v1::PartitionTableType::Mbr,
        v2::PartitionTableType::Gpt => v1::PartitionTableType::Gpt,
    }
}

fn disk_setup_to_hub(disks: &v1::DiskSetup) -> v2::DiskSetup {
    v2::DiskSetup {
        partitions: disks
            .partitions
            .iter()
            .map(|p| v2::Partition {
                device: p.device.clone(),
                layout: Some(p.layout),
                overwrite: p.overwrite,
                table_type: p.table_type.map(table_type_to_hub),
                disk_layout: p
                    .disk_layout
                    .iter()
                    .map(|s| v2::PartitionSpec {
                        percentage: s.percentage,
                        partition_type: s.partition_type.clone(),
                    })
                    .collect(),
            })
            .collect(),
        filesystems: disks
            .filesystems
            .iter()
            .map(|f| v2::Filesystem {
                device: f.device.clone(),
                filesystem: f.filesystem.clone(),
                label: f.label.clone(),
                partition: f.partition.clone(),
                overwrite: f.overwrite,
                replace_fs: f.replace_fs.clone(),
                extra_opts: f.extra_opts.clone(),
            })
            .collect(),
    }
}

fn disk_setup_from_hub(disks: &v2::DiskSetup) -> v1::DiskSetup {
    v1::DiskSetup {
        partitions: disks
            .partitions
            .iter()
            .map(|p| v1::Partition {
                device: p.device.clone(),
                layout: p.layout.unwrap_or(false),
                overwrite: p.overwrite,
                table_type: p.table_type.map(table_type_from_hub),
                disk_layout: p
                    .disk_layout
                    .iter()
                    .map(|s| v1::PartitionSpec {
                        percentage: s.percentage,
                        partition_type: s.partition_type.clone(),
                    })
                    .collect(),
            })
            .collect(),
        filesystems: disks
            .filesystems
            .iter()
            .map(|f| v1::Filesystem {
                device: f.device.clone(),
                filesystem: f.filesystem.clone(),
                label: f.label.clone(),
                partition: f.partition.clone(),
                overwrite: f.overwrite,
                replace_fs: f.replace_fs.clone(),
                extra_opts: f.extra_opts.clone(),
            })
            .collect(),
    }
}

fn user_to_hub(user: &v1::User) -> v2::User {
    v2::User {
        name: user.name.clone(),
        gecos: user.gecos.clone(),
        groups: user.groups.clone(),
        home_dir: user.home_dir.clone(),
        inactive: user.inactive,
        shell: user.shell.clone(),
        passwd: user.passwd.clone(),
        passwd_from: user
            .passwd_from
            .as_ref()
            .map(|s| v2::PasswdSource {
                secret: v2::SecretPasswdSource {
                    name: s.secret.name.clone(),
                    key: s.secret.key.clone(),
                },
            })
            .unwrap_or_default(),
        primary_group: user.primary_group.clone(),
        lock_password: user.lock_password,
        sudo: user.sudo.clone(),
        ssh_authorized_keys: user.ssh_authorized_keys.clone(),
    }
}

fn user_from_hub(user: &v2::User) -> v1::User {
    v1::User {
        name: user.name.clone(),
        gecos: user.gecos.clone(),
        groups: user.groups.clone(),
        home_dir: user.home_dir.clone(),
        inactive: user.inactive,
        shell: user.shell.clone(),
        passwd: user.passwd.clone(),
        passwd_from: when_defined(&user.passwd_from, |s| v1::PasswdSource {
            secret: v1::SecretPasswdSource {
                name: s.secret.name.clone(),
                key: s.secret.key.clone(),
            },
        }),
        primary_group: user.primary_group.clone(),
        lock_password: user.lock_password,
        sudo: user.sudo.clone(),
        ssh_authorized_keys: user.ssh_authorized_keys.clone(),
    }
}

/// v1beta1 → v1beta2 of a KubeadmConfigSpec found at `at` (for error paths), e.g. `spec`.
pub(crate) fn spec_to_hub(
    spec: &v1::KubeadmConfigSpec,
    at: &str,
) -> Result<v2::KubeadmConfigSpec, ConversionError> {
    let mut hub = v2::KubeadmConfigSpec {
        cluster_configuration: spec
            .cluster_configuration
            .as_ref()
            .map(cluster_configuration_to_hub)
            .unwrap_or_default(),
        init_configuration: spec
            .init_configuration
            .as_ref()
            .map(|c| init_configuration_to_hub(c, at))
            .transpose()?
            .unwrap_or_default(),
        join_configuration: spec
            .join_configuration
            .as_ref()
            .map(join_configuration_to_hub)
            .unwrap_or_default(),
        files: spec.files.iter().map(file_to_hub).collect(),
        disk_setup: spec
            .disk_setup
            .as_ref()
            .map(disk_setup_to_hub)
            .unwrap_or_default(),
        mounts: spec.mounts.clone(),
        boot_commands: spec.boot_commands.clone(),
        pre_kubeadm_commands: spec.pre_kubeadm_commands.clone(),
        post_kubeadm_commands: spec.post_kubeadm_commands.clone(),
        users: spec.users.iter().map(user_to_hub).collect(),
        ntp: spec
            .ntp
            .as_ref()
            .map(|n| v2::Ntp {
                servers: n.servers.clone(),
                enabled: n.enabled,
            })
            .unwrap_or_default(),
        format: spec.format.map(|f| match f {
            v1::Format::CloudConfig => v2::Format::CloudConfig,
            v1::Format::Ignition => v2::Format::Ignition,
        }),
        verbosity: spec.verbosity,
        ignition: spec
            .ignition
            .as_ref()
            .map(|i| v2::IgnitionSpec {
                container_linux_config: i
                    .container_linux_config
                    .as_ref()
                    .map(|c| v2::ContainerLinuxConfig {
                        additional_config: c.additional_config.clone(),
                        strict: c.strict,
                    })
                    .unwrap_or_default(),
            })
            .unwrap_or_default(),
    };
    // The v1beta1 timeouts sit next to what they limit; v1beta2 gathers them per kubeadm command.
    let control_plane = seconds(
        spec.cluster_configuration
            .as_ref()
            .and_then(|c| c.api_server.as_ref())
            .and_then(|a| a.timeout_for_control_plane.as_ref()),
        || format!("{at}.clusterConfiguration.apiServer.timeoutForControlPlane"),
    )?;
    let tls_bootstrap = seconds(
        spec.join_configuration
            .as_ref()
            .and_then(|j| j.discovery.as_ref())
            .and_then(|d| d.timeout.as_ref()),
        || format!("{at}.joinConfiguration.discovery.timeout"),
    )?;
    if control_plane.is_some() {
        hub.init_configuration
            .timeouts
            .control_plane_component_health_check_seconds = control_plane;
    }
    if control_plane.is_some() || tls_bootstrap.is_some() {
        let timeouts = &mut hub.join_configuration.timeouts;
        timeouts.control_plane_component_health_check_seconds = control_plane;
        timeouts.tls_bootstrap_seconds = tls_bootstrap;
    }
    Ok(hub)
}

/// v1beta2 → v1beta1 of a KubeadmConfigSpec.
pub(crate) fn spec_from_hub(hub: &v2::KubeadmConfigSpec) -> v1::KubeadmConfigSpec {
    let mut spec = v1::KubeadmConfigSpec {
        cluster_configuration: when_defined(
            &hub.cluster_configuration,
            cluster_configuration_from_hub,
        ),
        init_configuration: when_defined(&hub.init_configuration, init_configuration_from_hub),
        join_configuration: when_defined(&hub.join_configuration, join_configuration_from_hub),
        files: hub.files.iter().map(file_from_hub).collect(),
        disk_setup: when_defined(&hub.disk_setup, disk_setup_from_hub),
        mounts: hub.mounts.clone(),
        boot_commands: hub.boot_commands.clone(),
        pre_kubeadm_commands: hub.pre_kubeadm_commands.clone(),
        post_kubeadm_commands: hub.post_kubeadm_commands.clone(),
        users: hub.users.iter().map(user_from_hub).collect(),
        ntp: when_defined(&hub.ntp, |n| v1::Ntp {
            servers: n.servers.clone(),
            enabled: n.enabled,
        }),
        format: hub.format.map(|f| match f {
            v2::Format::CloudConfig => v1::Format::CloudConfig,
            v2::Format::Ignition => v1::Format::Ignition,
        }),
        verbosity: hub.verbosity,
        use_experimental_retry_join: None,
        ignition: when_defined(&hub.ignition, |i| v1::IgnitionSpec {
            container_linux_config: when_defined(&i.container_linux_config, |c| {
                v1::ContainerLinuxConfig {
                    additional_config: c.additional_config.clone(),
                    strict: c.strict,
                }
            }),
        }),
    };
    if let Some(seconds) = hub
        .init_configuration
        .timeouts
        .control_plane_component_health_check_seconds
    {
        spec.cluster_configuration
            .get_or_insert_default()
            .api_server
            .get_or_insert_default()
            .timeout_for_control_plane = Some(duration::from_seconds(seconds));
    }
    if let Some(seconds) = hub.join_configuration.timeouts.tls_bootstrap_seconds {
        spec.join_configuration
            .get_or_insert_default()
            .discovery
            .get_or_insert_default()
            .timeout = Some(duration::from_seconds(seconds));
    }
    // An init or join configuration that held nothing but timeouts has no v1beta1 form.
    if spec
        .init_configuration
        .as_ref()
        .is_some_and(|c| !defined(c))
    {
        spec.init_configuration = None;
    }
    if spec
        .join_configuration
        .as_ref()
        .is_some_and(|c| !defined(c))
    {
        spec.join_configuration = None;
    }
    spec
}

fn status_to_hub(status: &v1::KubeadmConfigStatus) -> v2::KubeadmConfigStatus {
    let deprecated = v2::KubeadmConfigV1Beta1DeprecatedStatus {
        conditions: status.conditions.clone(),
        failure_reason: status.failure_reason.clone(),
        failure_message: status.failure_message.clone(),
    };
    v2::KubeadmConfigStatus {
        conditions: status
            .v1beta2
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default(),
        initialization: v2::KubeadmConfigInitializationStatus {
            // v1beta1 cannot tell "not yet" from "unknown": false becomes unset.
            data_secret_created: status.ready.then_some(true),
        },
        data_secret_name: status.data_secret_name.clone(),
        observed_generation: status.observed_generation,
        deprecated: defined(&deprecated).then_some(v2::KubeadmConfigDeprecatedStatus {
            v1beta1: Some(deprecated),
        }),
    }
}

fn status_from_hub(status: &v2::KubeadmConfigStatus) -> v1::KubeadmConfigStatus {
    let deprecated = status
        .deprecated
        .as_ref()
        .and_then(|d| d.v1beta1.clone())
        .unwrap_or_default();
    v1::KubeadmConfigStatus {
        ready: status.initialization.data_secret_created.unwrap_or(false),
        data_secret_name: status.data_secret_name.clone(),
        failure_reason: deprecated.failure_reason,
        failure_message: deprecated.failure_message,
        observed_generation: status.observed_generation,
        conditions: deprecated.conditions,
        v1beta2: (!status.conditions.is_empty()).then(|| v1::KubeadmConfigV1Beta2Status {
            conditions: status.conditions.clone(),
        }),
    }
}

impl FieldMapping for v1::KubeadmConfig {
    type Hub = v2::KubeadmConfig;

    fn to_hub_fields(&self) -> Result<v2::KubeadmConfig, ConversionError> {
        Ok(v2::KubeadmConfig {
            metadata: self.metadata.clone(),
            spec: spec_to_hub(&self.spec, "spec")?,
            status: self.status.as_ref().map(status_to_hub),
        })
    }

    fn from_hub_fields(hub: &v2::KubeadmConfig, _versions: &dyn ContractVersions) -> Self {
        v1::KubeadmConfig {
            metadata: hub.metadata.clone(),
            spec: spec_from_hub(&hub.spec),
            status: hub.status.as_ref().map(status_from_hub),
        }
    }
}

impl FieldMapping for v1::KubeadmConfigTemplate {
    type Hub = v2::KubeadmConfigTemplate;

    fn to_hub_fields(&self) -> Result<v2::KubeadmConfigTemplate, ConversionError> {
        let template = &self.spec.template;
        Ok(v2::KubeadmConfigTemplate {
            metadata: self.metadata.clone(),
            spec: v2::KubeadmConfigTemplateSpec {
                template: v2::KubeadmConfigTemplateResource {
                    metadata: template.metadata.clone().unwrap_or_default(),
                    spec: spec_to_hub(&template.spec, "spec.template.spec")?,
                },
            },
        })
    }

    fn from_hub_fields(hub: &v2::KubeadmConfigTemplate, _versions: &dyn ContractVersions) -> Self {
        let template = &hub.spec.template;
        v1::KubeadmConfigTemplate {
            metadata: hub.metadata.clone(),
            spec: v1::KubeadmConfigTemplateSpec {
                template: v1::KubeadmConfigTemplateResource {
                    metadata: when_defined(&template.metadata, Clone::clone),
                    spec: spec_from_hub(&template.spec),
                },
            },
        }
    }
}

#[cfg(test)]
pub(crate) mod strategies;

#[cfg(test)]
mod tests;
