//! Generators of valid KubeadmConfig and KubeadmConfigTemplate objects in both versions.

use std::fmt::Debug;

use k8s_openapi::ByteString;
use proptest::prelude::*;

use super::super::{v1beta1 as v1, v1beta2 as v2};
use crate::conversion::strategies::{
    condition, env_var, few, go_duration, map_of, object_meta, one_of, opt, seconds, taint,
    template_meta, text, time, v1beta1_condition, word,
};

/// A zero value (left out of v1beta2 JSON) or a generated one.
fn maybe<S>(strategy: S) -> impl Strategy<Value = S::Value>
where
    S: Strategy,
    S::Value: Default + Clone + Debug,
{
    prop_oneof![1 => Just(S::Value::default()), 2 => strategy]
}

fn token() -> impl Strategy<Value = v2::BootstrapTokenString> {
    "[a-z0-9]{6}\\.[a-z0-9]{16}"
        .prop_map(|t| t.parse().expect("valid token"))
        .boxed()
}

fn path() -> impl Strategy<Value = String> {
    word().prop_map(|w| format!("/etc/{w}")).boxed()
}

fn address() -> impl Strategy<Value = String> {
    prop_oneof![
        "10\\.0\\.[0-9]{1,2}\\.[0-9]{1,2}",
        word().prop_map(|w| format!("{w}.example.com"))
    ]
    .boxed()
}

// --- v1beta1 ---------------------------------------------------------------------------------

fn volume1() -> impl Strategy<Value = v1::HostPathMount> {
    (
        word(),
        path(),
        path(),
        opt(any::<bool>()),
        opt(one_of(&["File", "DirectoryOrCreate"])),
    )
        .prop_map(
            |(name, host_path, mount_path, read_only, path_type)| v1::HostPathMount {
                name,
                host_path,
                mount_path,
                read_only,
                path_type,
            },
        )
        .boxed()
}

fn component1() -> impl Strategy<Value = v1::ControlPlaneComponent> {
    (map_of(text()), few(volume1()), few(env_var()))
        .prop_map(
            |(extra_args, extra_volumes, extra_envs)| v1::ControlPlaneComponent {
                extra_args,
                extra_volumes,
                extra_envs,
            },
        )
        .boxed()
}

fn api_server1() -> impl Strategy<Value = v1::ApiServer> {
    (component1(), few(address()), opt(go_duration()))
        .prop_map(
            |(component, cert_sans, timeout_for_control_plane)| v1::ApiServer {
                extra_args: component.extra_args,
                extra_volumes: component.extra_volumes,
                extra_envs: component.extra_envs,
                cert_sans,
                timeout_for_control_plane,
            },
        )
        .boxed()
}

fn etcd1() -> impl Strategy<Value = v1::Etcd> {
    let local = (
        opt(word()),
        opt(word()),
        opt(path()),
        map_of(text()),
        few(env_var()),
        few(address()),
        few(address()),
    )
        .prop_map(
            |(image_repository, image_tag, data_dir, extra_args, extra_envs, server, peer)| {
                v1::LocalEtcd {
                    image_repository,
                    image_tag,
                    data_dir,
                    extra_args,
                    extra_envs,
                    server_cert_sans: server,
                    peer_cert_sans: peer,
                }
            },
        );
    let external = (few(address()), path(), path(), path()).prop_map(
        |(endpoints, ca_file, cert_file, key_file)| v1::ExternalEtcd {
            endpoints,
            ca_file,
            cert_file,
            key_file,
        },
    );
    (opt(local), opt(external))
        .prop_map(|(local, external)| v1::Etcd { local, external })
        .boxed()
}

fn encryption1() -> impl Strategy<Value = v1::EncryptionAlgorithmType> {
    prop_oneof![
        Just(v1::EncryptionAlgorithmType::EcdsaP256),
        Just(v1::EncryptionAlgorithmType::EcdsaP384),
        Just(v1::EncryptionAlgorithmType::Rsa2048),
        Just(v1::EncryptionAlgorithmType::Rsa3072),
        Just(v1::EncryptionAlgorithmType::Rsa4096),
    ]
    .boxed()
}

fn cluster_configuration1() -> impl Strategy<Value = v1::ClusterConfiguration> {
    let networking = (opt(address()), opt(address()), opt(word())).prop_map(
        |(service_subnet, pod_subnet, dns_domain)| v1::Networking {
            service_subnet,
            pod_subnet,
            dns_domain,
        },
    );
    let dns = (opt(word()), opt(word())).prop_map(|(image_repository, image_tag)| v1::Dns {
        image_repository,
        image_tag,
    });
    let first = (
        opt(Just("kubeadm.k8s.io/v1beta3".to_owned())),
        opt(Just("ClusterConfiguration".to_owned())),
        opt(etcd1()),
        opt(networking),
        opt("v1\\.[0-9]{2}\\.[0-9]"),
        opt(address()),
        opt(api_server1()),
        opt(component1()),
    );
    let second = (
        opt(component1()),
        opt(dns),
        opt(path()),
        opt(word()),
        map_of(any::<bool>()),
        opt(1..1095i32),
        opt(1..36500i32),
        opt(encryption1()),
        opt(word()),
    );
    (first, second)
        .prop_map(
            |(
                (api_version, kind, etcd, networking, kubernetes_version, endpoint, api_server, cm),
                (
                    scheduler,
                    dns,
                    certificates_dir,
                    image_repository,
                    feature_gates,
                    days,
                    ca_days,
                    enc,
                    name,
                ),
            )| v1::ClusterConfiguration {
                api_version,
                kind,
                etcd,
                networking,
                kubernetes_version,
                control_plane_endpoint: endpoint,
                api_server,
                controller_manager: cm,
                scheduler,
                dns,
                certificates_dir,
                image_repository,
                feature_gates,
                certificate_validity_period_days: days,
                ca_certificate_validity_period_days: ca_days,
                encryption_algorithm: enc,
                cluster_name: name,
            },
        )
        .boxed()
}

fn node_registration1() -> impl Strategy<Value = v1::NodeRegistrationOptions> {
    let policy = prop_oneof![
        Just(v1::ImagePullPolicy::Always),
        Just(v1::ImagePullPolicy::IfNotPresent),
        Just(v1::ImagePullPolicy::Never),
    ];
    (
        opt(word()),
        opt(path()),
        opt(few(taint())),
        map_of(text()),
        few(word()),
        opt(policy),
        opt(any::<bool>()),
    )
        .prop_map(
            |(name, cri_socket, taints, kubelet_extra_args, ignore, policy, serial)| {
                v1::NodeRegistrationOptions {
                    name,
                    cri_socket,
                    taints,
                    kubelet_extra_args,
                    ignore_preflight_errors: ignore,
                    image_pull_policy: policy,
                    image_pull_serial: serial,
                }
            },
        )
        .boxed()
}

fn endpoint1() -> impl Strategy<Value = v1::ApiEndpoint> {
    (opt(address()), opt(1..65535i32))
        .prop_map(|(advertise_address, bind_port)| v1::ApiEndpoint {
            advertise_address,
            bind_port,
        })
        .boxed()
}

fn patches1() -> impl Strategy<Value = v1::Patches> {
    opt(path())
        .prop_map(|directory| v1::Patches { directory })
        .boxed()
}

fn init_configuration1() -> impl Strategy<Value = v1::InitConfiguration> {
    let bootstrap_token = (
        token(),
        opt(text()),
        opt(go_duration()),
        opt(time()),
        few(word()),
        few(word()),
    )
        .prop_map(
            |(token, description, ttl, expires, usages, groups)| v1::BootstrapToken {
                token,
                description,
                ttl,
                expires,
                usages,
                groups,
            },
        );
    (
        opt(Just("kubeadm.k8s.io/v1beta3".to_owned())),
        opt(Just("InitConfiguration".to_owned())),
        few(bootstrap_token),
        opt(node_registration1()),
        opt(endpoint1()),
        few(word()),
        opt(patches1()),
    )
        .prop_map(
            |(api_version, kind, bootstrap_tokens, node_registration, endpoint, skip, patches)| {
                v1::InitConfiguration {
                    api_version,
                    kind,
                    bootstrap_tokens,
                    node_registration,
                    local_api_endpoint: endpoint,
                    skip_phases: skip,
                    patches,
                }
            },
        )
        .boxed()
}

fn file_discovery1() -> impl Strategy<Value = v1::FileDiscovery> {
    let cluster = (
        opt(address()),
        opt(address()),
        opt(any::<bool>()),
        opt(proptest::collection::vec(any::<u8>(), 0..8).prop_map(ByteString)),
        opt(address()),
    )
        .prop_map(
            |(server, tls_server_name, insecure, ca, proxy_url)| v1::KubeConfigCluster {
                server,
                tls_server_name,
                insecure_skip_tls_verify: insecure,
                certificate_authority_data: ca,
                proxy_url,
            },
        );
    let auth_provider = (word(), map_of(text()))
        .prop_map(|(name, config)| v1::KubeConfigAuthProvider { name, config });
    let env = (word(), text()).prop_map(|(name, value)| v1::KubeConfigAuthExecEnv { name, value });
    let exec = (
        path(),
        few(word()),
        few(env),
        opt(word()),
        opt(any::<bool>()),
    )
        .prop_map(|(command, args, env, api_version, provide_cluster_info)| {
            v1::KubeConfigAuthExec {
                command,
                args,
                env,
                api_version,
                provide_cluster_info,
            }
        });
    let kube_config =
        (opt(cluster), opt(auth_provider), opt(exec)).prop_map(|(cluster, auth_provider, exec)| {
            v1::FileDiscoveryKubeConfig {
                cluster,
                user: v1::KubeConfigUser {
                    auth_provider,
                    exec,
                },
            }
        });
    (path(), opt(kube_config))
        .prop_map(|(kube_config_path, kube_config)| v1::FileDiscovery {
            kube_config_path,
            kube_config,
        })
        .boxed()
}

fn join_configuration1() -> impl Strategy<Value = v1::JoinConfiguration> {
    let bootstrap_token = (opt(word()), opt(address()), few(word()), opt(any::<bool>())).prop_map(
        |(token, api_server_endpoint, ca_cert_hashes, unsafe_skip)| v1::BootstrapTokenDiscovery {
            token,
            api_server_endpoint,
            ca_cert_hashes,
            unsafe_skip_ca_verification: unsafe_skip,
        },
    );
    let discovery = (
        opt(bootstrap_token),
        opt(file_discovery1()),
        opt(word()),
        opt(go_duration()),
    )
        .prop_map(
            |(bootstrap_token, file, tls_bootstrap_token, timeout)| v1::Discovery {
                bootstrap_token,
                file,
                tls_bootstrap_token,
                timeout,
            },
        );
    let control_plane =
        opt(endpoint1()).prop_map(|local_api_endpoint| v1::JoinControlPlane { local_api_endpoint });
    (
        opt(Just("kubeadm.k8s.io/v1beta3".to_owned())),
        opt(Just("JoinConfiguration".to_owned())),
        opt(node_registration1()),
        opt(path()),
        opt(discovery),
        opt(control_plane),
        few(word()),
        opt(patches1()),
    )
        .prop_map(
            |(
                api_version,
                kind,
                node_registration,
                ca,
                discovery,
                control_plane,
                skip,
                patches,
            )| {
                v1::JoinConfiguration {
                    api_version,
                    kind,
                    node_registration,
                    ca_cert_path: ca,
                    discovery,
                    control_plane,
                    skip_phases: skip,
                    patches,
                }
            },
        )
        .boxed()
}

fn file1() -> impl Strategy<Value = v1::File> {
    let encoding = prop_oneof![
        Just(v1::Encoding::Base64),
        Just(v1::Encoding::Gzip),
        Just(v1::Encoding::GzipBase64)
    ];
    let source = (word(), word()).prop_map(|(name, key)| v1::FileSource {
        secret: v1::SecretFileSource { name, key },
    });
    let format = prop_oneof![
        Just(v1::FileContentFormat::Raw),
        Just(v1::FileContentFormat::Template)
    ];
    (
        path(),
        opt(Just("root:root".to_owned())),
        opt(one_of(&["0644", "0600"])),
        opt(encoding),
        opt(any::<bool>()),
        opt(text()),
        opt(source),
        opt(format),
        opt(any::<bool>()),
    )
        .prop_map(
            |(
                path,
                owner,
                permissions,
                encoding,
                append,
                content,
                content_from,
                content_format,
                defer,
            )| {
                v1::File {
                    path,
                    owner,
                    permissions,
                    encoding,
                    append,
                    content,
                    content_from,
                    content_format,
                    defer,
                }
            },
        )
        .boxed()
}

fn disk_setup1() -> impl Strategy<Value = v1::DiskSetup> {
    let table = prop_oneof![
        Just(v1::PartitionTableType::Mbr),
        Just(v1::PartitionTableType::Gpt)
    ];
    let layout = (1..100i32, opt(one_of(&["Linux", "LinuxSwap"]))).prop_map(
        |(percentage, partition_type)| v1::PartitionSpec {
            percentage,
            partition_type,
        },
    );
    let partition = (
        path(),
        any::<bool>(),
        opt(any::<bool>()),
        opt(table),
        few(layout),
    )
        .prop_map(
            |(device, layout, overwrite, table_type, disk_layout)| v1::Partition {
                device,
                layout,
                overwrite,
                table_type,
                disk_layout,
            },
        );
    let filesystem = (
        path(),
        one_of(&["ext4", "xfs"]),
        opt(word()),
        opt(one_of(&["auto", "any", "none", "1"])),
        opt(any::<bool>()),
        opt(word()),
        few(text()),
    )
        .prop_map(
            |(device, filesystem, label, partition, overwrite, replace_fs, extra_opts)| {
                v1::Filesystem {
                    device,
                    filesystem,
                    label,
                    partition,
                    overwrite,
                    replace_fs,
                    extra_opts,
                }
            },
        );
    (few(partition), few(filesystem))
        .prop_map(|(partitions, filesystems)| v1::DiskSetup {
            partitions,
            filesystems,
        })
        .boxed()
}

fn user1() -> impl Strategy<Value = v1::User> {
    let source = (word(), word()).prop_map(|(name, key)| v1::PasswdSource {
        secret: v1::SecretPasswdSource { name, key },
    });
    let first = (
        word(),
        opt(text()),
        opt(word()),
        opt(path()),
        opt(any::<bool>()),
        opt(path()),
    );
    let second = (
        opt(text()),
        opt(source),
        opt(word()),
        opt(any::<bool>()),
        opt(Just("ALL=(ALL) NOPASSWD:ALL".to_owned())),
        few(text()),
    );
    (first, second)
        .prop_map(
            |(
                (name, gecos, groups, home_dir, inactive, shell),
                (passwd, passwd_from, primary_group, lock_password, sudo, ssh_authorized_keys),
            )| v1::User {
                name,
                gecos,
                groups,
                home_dir,
                inactive,
                shell,
                passwd,
                passwd_from,
                primary_group,
                lock_password,
                sudo,
                ssh_authorized_keys,
            },
        )
        .boxed()
}

pub(crate) fn spec1() -> impl Strategy<Value = v1::KubeadmConfigSpec> {
    let ntp = (few(address()), opt(any::<bool>()))
        .prop_map(|(servers, enabled)| v1::Ntp { servers, enabled });
    let format = prop_oneof![Just(v1::Format::CloudConfig), Just(v1::Format::Ignition)];
    let ignition = opt((opt(text()), opt(any::<bool>())).prop_map(
        |(additional_config, strict)| v1::ContainerLinuxConfig {
            additional_config,
            strict,
        },
    ))
    .prop_map(|container_linux_config| v1::IgnitionSpec {
        container_linux_config,
    });
    let first = (
        opt(cluster_configuration1()),
        opt(init_configuration1()),
        opt(join_configuration1()),
        few(file1()),
        opt(disk_setup1()),
        few(few(text())),
    );
    let second = (
        few(text()),
        few(text()),
        few(text()),
        few(user1()),
        opt(ntp),
        opt(format),
        opt(0..10i32),
        opt(any::<bool>()),
        opt(ignition),
    );
    (first, second)
        .prop_map(
            |(
                (cluster, init, join, files, disk_setup, mounts),
                (boot, pre, post, users, ntp, format, verbosity, retry_join, ignition),
            )| v1::KubeadmConfigSpec {
                cluster_configuration: cluster,
                init_configuration: init,
                join_configuration: join,
                files,
                disk_setup,
                mounts,
                boot_commands: boot,
                pre_kubeadm_commands: pre,
                post_kubeadm_commands: post,
                users,
                ntp,
                format,
                verbosity,
                use_experimental_retry_join: retry_join,
                ignition,
            },
        )
        .boxed()
}

fn status1() -> impl Strategy<Value = v1::KubeadmConfigStatus> {
    (
        any::<bool>(),
        opt(word()),
        opt(word()),
        opt(text()),
        opt(1..10i64),
        few(v1beta1_condition()),
        opt(few(condition()).prop_map(|conditions| v1::KubeadmConfigV1Beta2Status { conditions })),
    )
        .prop_map(
            |(
                ready,
                data_secret_name,
                failure_reason,
                failure_message,
                generation,
                conditions,
                v1beta2,
            )| {
                v1::KubeadmConfigStatus {
                    ready,
                    data_secret_name,
                    failure_reason,
                    failure_message,
                    observed_generation: generation,
                    conditions,
                    v1beta2,
                }
            },
        )
        .boxed()
}

pub(crate) fn kubeadm_config1() -> impl Strategy<Value = v1::KubeadmConfig> {
    (object_meta(), spec1(), opt(status1()))
        .prop_map(|(metadata, spec, status)| v1::KubeadmConfig {
            metadata,
            spec,
            status,
        })
        .boxed()
}

pub(crate) fn kubeadm_config_template1() -> impl Strategy<Value = v1::KubeadmConfigTemplate> {
    (object_meta(), opt(template_meta()), spec1())
        .prop_map(
            |(metadata, template_metadata, spec)| v1::KubeadmConfigTemplate {
                metadata,
                spec: v1::KubeadmConfigTemplateSpec {
                    template: v1::KubeadmConfigTemplateResource {
                        metadata: template_metadata,
                        spec,
                    },
                },
            },
        )
        .boxed()
}

// --- v1beta2 ---------------------------------------------------------------------------------

/// Arguments drawn from few names, so lists often repeat a name or are out of order.
fn args2() -> impl Strategy<Value = Vec<v2::Arg>> {
    few((one_of(&["v", "bind-address", "cloud-provider"]), text())
        .prop_map(|(name, value)| v2::Arg { name, value }))
    .boxed()
}

fn volume2() -> impl Strategy<Value = v2::HostPathMount> {
    volume1()
        .prop_map(|v| v2::HostPathMount {
            name: v.name,
            host_path: v.host_path,
            mount_path: v.mount_path,
            read_only: v.read_only,
            path_type: v.path_type,
        })
        .boxed()
}

fn components2() -> impl Strategy<
    Value = (
        Vec<v2::Arg>,
        Vec<v2::HostPathMount>,
        Option<Vec<v2::EnvVar>>,
    ),
> {
    (args2(), few(volume2()), opt(few(env_var()))).boxed()
}

fn etcd2() -> impl Strategy<Value = v2::Etcd> {
    let local = (
        opt(word()),
        opt(word()),
        opt(path()),
        args2(),
        opt(few(env_var())),
        few(address()),
        few(address()),
    )
        .prop_map(
            |(image_repository, image_tag, data_dir, extra_args, extra_envs, server, peer)| {
                v2::LocalEtcd {
                    image_repository,
                    image_tag,
                    data_dir,
                    extra_args,
                    extra_envs,
                    server_cert_sans: server,
                    peer_cert_sans: peer,
                }
            },
        );
    let external = (few(address()), path(), path(), path()).prop_map(
        |(endpoints, ca_file, cert_file, key_file)| v2::ExternalEtcd {
            endpoints,
            ca_file,
            cert_file,
            key_file,
        },
    );
    (maybe(local), maybe(external))
        .prop_map(|(local, external)| v2::Etcd { local, external })
        .boxed()
}

fn cluster_configuration2() -> impl Strategy<Value = v2::ClusterConfiguration> {
    let api_server =
        (components2(), few(address())).prop_map(|((a, v, e), cert_sans)| v2::ApiServer {
            extra_args: a,
            extra_volumes: v,
            extra_envs: e,
            cert_sans,
        });
    let controller_manager = components2().prop_map(|(a, v, e)| v2::ControllerManager {
        extra_args: a,
        extra_volumes: v,
        extra_envs: e,
    });
    let scheduler = components2().prop_map(|(a, v, e)| v2::Scheduler {
        extra_args: a,
        extra_volumes: v,
        extra_envs: e,
    });
    let dns = (opt(word()), opt(word())).prop_map(|(image_repository, image_tag)| v2::Dns {
        image_repository,
        image_tag,
    });
    let encryption = prop_oneof![
        Just(v2::EncryptionAlgorithmType::EcdsaP256),
        Just(v2::EncryptionAlgorithmType::EcdsaP384),
        Just(v2::EncryptionAlgorithmType::Rsa2048),
        Just(v2::EncryptionAlgorithmType::Rsa3072),
        Just(v2::EncryptionAlgorithmType::Rsa4096),
    ];
    let first = (
        maybe(etcd2()),
        opt(address()),
        maybe(api_server),
        maybe(controller_manager),
        maybe(scheduler),
        maybe(dns),
    );
    let second = (
        opt(path()),
        opt(word()),
        map_of(any::<bool>()),
        opt(1..1095i32),
        opt(1..36500i32),
        opt(encryption),
    );
    (first, second)
        .prop_map(
            |(
                (etcd, endpoint, api_server, controller_manager, scheduler, dns),
                (certificates_dir, image_repository, feature_gates, days, ca_days, encryption),
            )| v2::ClusterConfiguration {
                etcd,
                control_plane_endpoint: endpoint,
                api_server,
                controller_manager,
                scheduler,
                dns,
                certificates_dir,
                image_repository,
                feature_gates,
                certificate_validity_period_days: days,
                ca_certificate_validity_period_days: ca_days,
                encryption_algorithm: encryption,
            },
        )
        .boxed()
}

fn node_registration2() -> impl Strategy<Value = v2::NodeRegistrationOptions> {
    (
        opt(word()),
        opt(path()),
        opt(few(taint())),
        args2(),
        few(word()),
        opt(one_of(&["Always", "IfNotPresent", "Never", "Sometimes"])),
        opt(any::<bool>()),
    )
        .prop_map(
            |(name, cri_socket, taints, kubelet_extra_args, ignore, policy, serial)| {
                v2::NodeRegistrationOptions {
                    name,
                    cri_socket,
                    taints,
                    kubelet_extra_args,
                    ignore_preflight_errors: ignore,
                    image_pull_policy: policy,
                    image_pull_serial: serial,
                }
            },
        )
        .boxed()
}

fn endpoint2() -> impl Strategy<Value = v2::ApiEndpoint> {
    endpoint1()
        .prop_map(|e| v2::ApiEndpoint {
            advertise_address: e.advertise_address,
            bind_port: e.bind_port,
        })
        .boxed()
}

fn patches2() -> impl Strategy<Value = v2::Patches> {
    opt(path())
        .prop_map(|directory| v2::Patches { directory })
        .boxed()
}

fn timeouts2() -> impl Strategy<Value = v2::Timeouts> {
    (
        opt(seconds()),
        opt(seconds()),
        opt(seconds()),
        opt(seconds()),
        opt(seconds()),
        opt(seconds()),
    )
        .prop_map(
            |(control_plane, kubelet, api_call, etcd, tls, discovery)| v2::Timeouts {
                control_plane_component_health_check_seconds: control_plane,
                kubelet_health_check_seconds: kubelet,
                kubernetes_api_call_seconds: api_call,
                etcd_api_call_seconds: etcd,
                tls_bootstrap_seconds: tls,
                discovery_seconds: discovery,
            },
        )
        .boxed()
}

fn init_configuration2() -> impl Strategy<Value = v2::InitConfiguration> {
    let bootstrap_token = (
        token(),
        opt(text()),
        opt(seconds()),
        opt(time()),
        few(word()),
        few(word()),
    )
        .prop_map(
            |(token, description, ttl_seconds, expires, usages, groups)| v2::BootstrapToken {
                token,
                description,
                ttl_seconds,
                expires,
                usages,
                groups,
            },
        );
    (
        few(bootstrap_token),
        maybe(node_registration2()),
        maybe(endpoint2()),
        few(word()),
        maybe(patches2()),
        maybe(timeouts2()),
    )
        .prop_map(
            |(bootstrap_tokens, node_registration, endpoint, skip, patches, timeouts)| {
                v2::InitConfiguration {
                    bootstrap_tokens,
                    node_registration,
                    local_api_endpoint: endpoint,
                    skip_phases: skip,
                    patches,
                    timeouts,
                }
            },
        )
        .boxed()
}

fn file_discovery2() -> impl Strategy<Value = v2::FileDiscovery> {
    file_discovery1()
        .prop_map(|f| {
            let kube_config = f.kube_config.unwrap_or_default();
            let cluster = kube_config.cluster.unwrap_or_default();
            let user = kube_config.user;
            v2::FileDiscovery {
                kube_config_path: f.kube_config_path,
                kube_config: v2::FileDiscoveryKubeConfig {
                    cluster: v2::KubeConfigCluster {
                        server: cluster.server,
                        tls_server_name: cluster.tls_server_name,
                        insecure_skip_tls_verify: cluster.insecure_skip_tls_verify,
                        certificate_authority_data: cluster.certificate_authority_data,
                        proxy_url: cluster.proxy_url,
                    },
                    user: v2::KubeConfigUser {
                        auth_provider: user
                            .auth_provider
                            .map(|p| v2::KubeConfigAuthProvider {
                                name: p.name,
                                config: p.config,
                            })
                            .unwrap_or_default(),
                        exec: user
                            .exec
                            .map(|e| v2::KubeConfigAuthExec {
                                command: e.command,
                                args: e.args,
                                env: e
                                    .env
                                    .into_iter()
                                    .map(|v| v2::KubeConfigAuthExecEnv {
                                        name: v.name,
                                        value: v.value,
                                    })
                                    .collect(),
                                api_version: e.api_version,
                                provide_cluster_info: e.provide_cluster_info,
                            })
                            .unwrap_or_default(),
                    },
                },
            }
        })
        .boxed()
}

fn join_configuration2() -> impl Strategy<Value = v2::JoinConfiguration> {
    let bootstrap_token = (opt(word()), opt(address()), few(word()), opt(any::<bool>())).prop_map(
        |(token, api_server_endpoint, ca_cert_hashes, unsafe_skip)| v2::BootstrapTokenDiscovery {
            token,
            api_server_endpoint,
            ca_cert_hashes,
            unsafe_skip_ca_verification: unsafe_skip,
        },
    );
    let discovery = (
        maybe(bootstrap_token),
        maybe(file_discovery2()),
        opt(word()),
    )
        .prop_map(
            |(bootstrap_token, file, tls_bootstrap_token)| v2::Discovery {
                bootstrap_token,
                file,
                tls_bootstrap_token,
            },
        );
    let control_plane = maybe(endpoint2())
        .prop_map(|local_api_endpoint| v2::JoinControlPlane { local_api_endpoint });
    (
        maybe(node_registration2()),
        opt(path()),
        maybe(discovery),
        opt(control_plane),
        few(word()),
        maybe(patches2()),
        maybe(timeouts2()),
    )
        .prop_map(
            |(node_registration, ca, discovery, control_plane, skip, patches, timeouts)| {
                v2::JoinConfiguration {
                    node_registration,
                    ca_cert_path: ca,
                    discovery,
                    control_plane,
                    skip_phases: skip,
                    patches,
                    timeouts,
                }
            },
        )
        .boxed()
}

fn file2() -> impl Strategy<Value = v2::File> {
    file1()
        .prop_map(|f| v2::File {
            path: f.path,
            owner: f.owner,
            permissions: f.permissions,
            encoding: f.encoding.map(|e| match e {
                v1::Encoding::Base64 => v2::Encoding::Base64,
                v1::Encoding::Gzip => v2::Encoding::Gzip,
                v1::Encoding::GzipBase64 => v2::Encoding::GzipBase64,
            }),
            append: f.append,
            content: f.content,
            content_from: f
                .content_from
                .map(|s| v2::FileSource {
                    secret: v2::SecretFileSource {
                        name: s.secret.name,
                        key: s.secret.key,
                    },
                })
                .unwrap_or_default(),
            content_format: f.content_format.map(|c| match c {
                v1::FileContentFormat::Raw => v2::FileContentFormat::Raw,
                v1::FileContentFormat::Template => v2::FileContentFormat::Template,
            }),
            defer: f.defer,
        })
        .boxed()
}

fn disk_setup2() -> impl Strategy<Value = v2::DiskSetup> {
    (disk_setup1(), few(opt(any::<bool>())))
        .prop_map(|(d, layouts)| v2::DiskSetup {
            partitions: d
                .partitions
                .into_iter()
                .zip(layouts.into_iter().chain(std::iter::repeat(None)))
                .map(|(p, layout)| v2::Partition {
                    device: p.device,
                    layout,
                    overwrite: p.overwrite,
                    table_type: p.table_type.map(|t| match t {
                        v1::PartitionTableType::Mbr => v2::PartitionTableType::Mbr,
                        v1::PartitionTableType::Gpt => v2::PartitionTableType::Gpt,
                    }),
                    disk_layout: p
                        .disk_layout
                        .into_iter()
                        .map(|s| v2::PartitionSpec {
                            percentage: s.percentage,
                            partition_type: s.partition_type,
                        })
                        .collect(),
                })
                .collect(),
            filesystems: d
                .filesystems
                .into_iter()
                .map(|f| v2::Filesystem {
                    device: f.device,
                    filesystem: f.filesystem,
                    label: f.label,
                    partition: f.partition,
                    overwrite: f.overwrite,
                    replace_fs: f.replace_fs,
                    extra_opts: f.extra_opts,
                })
                .collect(),
        })
        .boxed()
}

fn user2() -> impl Strategy<Value = v2::User> {
    user1()
        .prop_map(|u| v2::User {
            name: u.name,
            gecos: u.gecos,
            groups: u.groups,
            home_dir: u.home_dir,
            inactive: u.inactive,
            shell: u.shell,
            passwd: u.passwd,
            passwd_from: u
                .passwd_from
                .map(|s| v2::PasswdSource {
                    secret: v2::SecretPasswdSource {
                        name: s.secret.name,
                        key: s.secret.key,
                    },
                })
                .unwrap_or_default(),
            primary_group: u.primary_group,
            lock_password: u.lock_password,
            sudo: u.sudo,
            ssh_authorized_keys: u.ssh_authorized_keys,
        })
        .boxed()
}

pub(crate) fn spec2() -> impl Strategy<Value = v2::KubeadmConfigSpec> {
    let ntp = (few(address()), opt(any::<bool>()))
        .prop_map(|(servers, enabled)| v2::Ntp { servers, enabled });
    let format = prop_oneof![Just(v2::Format::CloudConfig), Just(v2::Format::Ignition)];
    let ignition = maybe((opt(text()), opt(any::<bool>())).prop_map(
        |(additional_config, strict)| v2::ContainerLinuxConfig {
            additional_config,
            strict,
        },
    ))
    .prop_map(|container_linux_config| v2::IgnitionSpec {
        container_linux_config,
    });
    let first = (
        maybe(cluster_configuration2()),
        maybe(init_configuration2()),
        maybe(join_configuration2()),
        few(file2()),
        maybe(disk_setup2()),
        few(few(text())),
    );
    let second = (
        few(text()),
        few(text()),
        few(text()),
        few(user2()),
        maybe(ntp),
        opt(format),
        opt(0..10i32),
        maybe(ignition),
    );
    (first, second)
        .prop_map(
            |(
                (cluster, init, join, files, disk_setup, mounts),
                (boot, pre, post, users, ntp, format, verbosity, ignition),
            )| v2::KubeadmConfigSpec {
                cluster_configuration: cluster,
                init_configuration: init,
                join_configuration: join,
                files,
                disk_setup,
                mounts,
                boot_commands: boot,
                pre_kubeadm_commands: pre,
                post_kubeadm_commands: post,
                users,
                ntp,
                format,
                verbosity,
                ignition,
            },
        )
        .boxed()
}

fn status2() -> impl Strategy<Value = v2::KubeadmConfigStatus> {
    let deprecated = opt(opt(
        (few(v1beta1_condition()), opt(word()), opt(text())).prop_map(
            |(conditions, failure_reason, failure_message)| {
                v2::KubeadmConfigV1Beta1DeprecatedStatus {
                    conditions,
                    failure_reason,
                    failure_message,
                }
            },
        ),
    )
    .prop_map(|v1beta1| v2::KubeadmConfigDeprecatedStatus { v1beta1 }));
    (
        few(condition()),
        opt(any::<bool>()),
        opt(word()),
        opt(1..10i64),
        deprecated,
    )
        .prop_map(
            |(conditions, created, data_secret_name, generation, deprecated)| {
                v2::KubeadmConfigStatus {
                    conditions,
                    initialization: v2::KubeadmConfigInitializationStatus {
                        data_secret_created: created,
                    },
                    data_secret_name,
                    observed_generation: generation,
                    deprecated,
                }
            },
        )
        .boxed()
}

pub(crate) fn kubeadm_config2() -> impl Strategy<Value = v2::KubeadmConfig> {
    (object_meta(), spec2(), opt(status2()))
        .prop_map(|(metadata, spec, status)| v2::KubeadmConfig {
            metadata,
            spec,
            status,
        })
        .boxed()
}

pub(crate) fn kubeadm_config_template2() -> impl Strategy<Value = v2::KubeadmConfigTemplate> {
    (object_meta(), maybe(template_meta()), spec2())
        .prop_map(
            |(metadata, template_metadata, spec)| v2::KubeadmConfigTemplate {
                metadata,
                spec: v2::KubeadmConfigTemplateSpec {
                    template: v2::KubeadmConfigTemplateResource {
                        metadata: template_metadata,
                        spec,
                    },
                },
            },
        )
        .boxed()
}
