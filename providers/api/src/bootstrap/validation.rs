//! Validation of KubeadmConfig and KubeadmConfigTemplate, and of the KubeadmConfigSpec that
//! KubeadmControlPlane embeds.
//!
//! The rules are those of Cluster API v1.14's admission webhooks, plus the few schema rules its CRDs
//! express in CEL (unique extraArgs names, partition types, `layout` xor `diskLayout`), which a
//! Kubernetes 1.20 API server cannot enforce. Ignition is always available (no feature gate).
//! Cluster API allows any change to a KubeadmConfig's spec, so updates are checked like creates.

use std::collections::HashSet;

use super::file_template;
use super::v1beta2::{
    Arg, Encoding, FileContentFormat, Format, KubeadmConfig, KubeadmConfigSpec,
    KubeadmConfigTemplate, PartitionTableType,
};
use crate::validation::{FieldError, FieldErrors, child, index, validate_object_meta};

const CANNOT_USE_WITH_IGNITION: &str = r#"not supported when spec.format is set to: "ignition""#;
const CONFLICTING_FILE_SOURCE: &str =
    "only one of content or contentFrom may be specified for a single file";
const CONFLICTING_USER_SOURCE: &str =
    "only one of passwd or passwdFrom may be specified for a single user";
const MISSING_SECRET_NAME: &str = "secret file source must specify non-empty secret name";
const MISSING_SECRET_KEY: &str = "secret file source must specify non-empty secret key";
const PATH_CONFLICT: &str = "path property must be unique among all files";
const PARTITION_TYPES: [&str; 7] = [
    "Linux",
    "LinuxSwap",
    "LinuxRAID",
    "LVM",
    "Fat32",
    "NTFS",
    "LinuxExtended",
];

/// Checks a KubeadmConfigSpec found at `base_path` (`spec`, `spec.template.spec`,
/// `spec.kubeadmConfigSpec`, ...): files, users, Ignition settings, disk setup, discovery
/// credentials and unique extra arguments. Returns every broken rule.
pub fn validate_config_spec(spec: &KubeadmConfigSpec, base_path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    validate_files(spec, base_path, &mut errors);
    validate_users(spec, base_path, &mut errors);
    validate_ignition(spec, base_path, &mut errors);
    validate_disk_setup(spec, base_path, &mut errors);
    validate_discovery_user(spec, base_path, &mut errors);
    validate_extra_args(spec, base_path, &mut errors);
    errors
}

/// Admission of a new KubeadmConfig.
pub fn validate_kubeadm_config_create(config: &KubeadmConfig) -> Result<(), FieldErrors> {
    FieldErrors::into_result(validate_config_spec(&config.spec, "spec"))
}

/// Admission of a changed KubeadmConfig: the new object must pass the create rules; Cluster API
/// keeps the spec mutable.
pub fn validate_kubeadm_config_update(
    _old: &KubeadmConfig,
    new: &KubeadmConfig,
) -> Result<(), FieldErrors> {
    validate_kubeadm_config_create(new)
}

/// Admission of a new KubeadmConfigTemplate: the template's spec and metadata.
pub fn validate_kubeadm_config_template_create(
    template: &KubeadmConfigTemplate,
) -> Result<(), FieldErrors> {
    let resource = &template.spec.template;
    let mut errors = validate_config_spec(&resource.spec, "spec.template.spec");
    errors.extend(validate_object_meta(
        &resource.metadata,
        "spec.template.metadata",
    ));
    FieldErrors::into_result(errors)
}

/// Admission of a changed KubeadmConfigTemplate: like a create (Cluster API does not freeze it).
pub fn validate_kubeadm_config_template_update(
    _old: &KubeadmConfigTemplate,
    new: &KubeadmConfigTemplate,
) -> Result<(), FieldErrors> {
    validate_kubeadm_config_template_create(new)
}

const WRITTEN_BY_BOOTSTRAP: &str = "is written by the bootstrap provider itself (the kubeadm \
    configuration and script); change it with preKubeadmCommands";

/// Files the bootstrap data writes itself, in both formats: cloud-init's kubeadm configurations and
/// placeholder, Ignition's kubeadm script and configuration. User commands read them at these paths.
pub const BOOTSTRAP_FILE_PATHS: [&str; 5] = [
    "/run/kubeadm/kubeadm.yaml",
    "/run/kubeadm/kubeadm-join-config.yaml",
    "/run/cluster-api/placeholder",
    "/etc/kubeadm.yml",
    "/etc/kubeadm.sh",
];

/// On a control-plane machine that restores etcd: the snapshot (written from the restore Secret) and the
/// script that restores it into etcd's data directory before `kubeadm init`.
pub const ETCD_RESTORE_SNAPSHOT_PATH: &str = "/run/cluster-api/etcd-snapshot.db";
pub const ETCD_RESTORE_SCRIPT_PATH: &str = "/run/cluster-api/etcd-restore.sh";
/// Where it downloads the snapshot from, when it restores one from object storage.
pub const ETCD_RESTORE_DOWNLOAD_PATH: &str = "/run/cluster-api/etcd-snapshot.download";

fn non_empty(value: &Option<String>) -> bool {
    value.as_deref().is_some_and(|v| !v.is_empty())
}

fn validate_files(spec: &KubeadmConfigSpec, base: &str, errors: &mut Vec<FieldError>) {
    let mut known_paths = HashSet::new();
    for (i, file) in spec.files.iter().enumerate() {
        let at = index(&child(base, "files"), i);
        // Contents may be secrets: never echo them.
        if non_empty(&file.content) && file.content_from.is_defined() {
            errors.push(FieldError::invalid_hidden(&at, CONFLICTING_FILE_SOURCE));
        }
        if file.content_from.is_defined() {
            let secret = child(&at, "contentFrom.secret");
            if file.content_from.secret.name.is_empty() {
                errors.push(FieldError::required(
                    child(&secret, "name"),
                    MISSING_SECRET_NAME,
                ));
            }
            if file.content_from.secret.key.is_empty() {
                errors.push(FieldError::required(
                    child(&secret, "key"),
                    MISSING_SECRET_KEY,
                ));
            }
        }
        if file.content_format == Some(FileContentFormat::Template) {
            // Inline contents are checked now; contents from a Secret when the bootstrap data is rendered.
            if let Some(Err(e)) = file.content.as_deref().map(file_template::parse) {
                errors.push(FieldError::invalid_hidden(
                    child(&at, "content"),
                    format!("contentFormat is Template, but the content {e}"),
                ));
            }
        }
        if BOOTSTRAP_FILE_PATHS.contains(&file.path.as_str()) {
            errors.push(FieldError::invalid(
                child(&at, "path"),
                &file.path,
                WRITTEN_BY_BOOTSTRAP,
            ));
        }
        if !known_paths.insert(file.path.as_str()) {
            errors.push(FieldError::duplicate(
                child(&at, "path"),
                &file.path,
                PATH_CONFLICT,
            ));
        }
    }
}

fn validate_users(spec: &KubeadmConfigSpec, base: &str, errors: &mut Vec<FieldError>) {
    for (i, user) in spec.users.iter().enumerate() {
        let at = index(&child(base, "users"), i);
        if non_empty(&user.passwd) && user.passwd_from.is_defined() {
            errors.push(FieldError::invalid_hidden(&at, CONFLICTING_USER_SOURCE));
        }
        if user.passwd_from.is_defined() {
            let secret = child(&at, "passwdFrom.secret");
            if user.passwd_from.secret.name.is_empty() {
                errors.push(FieldError::required(
                    child(&secret, "name"),
                    MISSING_SECRET_NAME,
                ));
            }
            if user.passwd_from.secret.key.is_empty() {
                errors.push(FieldError::required(
                    child(&secret, "key"),
                    MISSING_SECRET_KEY,
                ));
            }
        }
    }
}

fn validate_ignition(spec: &KubeadmConfigSpec, base: &str, errors: &mut Vec<FieldError>) {
    if spec.format != Some(Format::Ignition) {
        if spec.ignition.is_defined() {
            let format = match spec.format {
                Some(Format::CloudConfig) => "cloud-config",
                _ => "",
            };
            errors.push(FieldError::invalid(
                child(base, "format"),
                format,
                r#"must be set to "ignition" if spec.ignition is set"#,
            ));
        }
        return;
    }

    // What the renderer cannot turn into Ignition is refused here, with the same checks.
    for (path, rule) in super::ignition::spec_problems(spec) {
        errors.push(FieldError::invalid_hidden(child(base, &path), rule));
    }
    for (i, user) in spec.users.iter().enumerate() {
        if user.inactive == Some(true) {
            let at = child(&index(&child(base, "users"), i), "inactive");
            errors.push(FieldError::forbidden(at, CANNOT_USE_WITH_IGNITION));
        }
    }
    for (i, file) in spec.files.iter().enumerate() {
        if matches!(file.encoding, Some(Encoding::Gzip | Encoding::GzipBase64)) {
            let at = child(&index(&child(base, "files"), i), "encoding");
            errors.push(FieldError::forbidden(at, CANNOT_USE_WITH_IGNITION));
        }
    }
    if !spec.boot_commands.is_empty() {
        errors.push(FieldError::forbidden(
            child(base, "bootCommands"),
            CANNOT_USE_WITH_IGNITION,
        ));
    }
    let disk_setup = child(base, "diskSetup");
    for (i, partition) in spec.disk_setup.partitions.iter().enumerate() {
        if partition.table_type == Some(PartitionTableType::Mbr) {
            let at = child(&index(&child(&disk_setup, "partitions"), i), "tableType");
            errors.push(FieldError::invalid(
                at,
                "mbr",
                r#"only partition type "gpt" is supported when spec.format is set to "ignition""#,
            ));
        }
    }
    for (i, filesystem) in spec.disk_setup.filesystems.iter().enumerate() {
        let at = index(&child(&disk_setup, "filesystems"), i);
        if non_empty(&filesystem.replace_fs) {
            errors.push(FieldError::forbidden(
                child(&at, "replaceFS"),
                CANNOT_USE_WITH_IGNITION,
            ));
        }
        if non_empty(&filesystem.partition) {
            errors.push(FieldError::forbidden(
                child(&at, "partition"),
                CANNOT_USE_WITH_IGNITION,
            ));
        }
    }
}

fn validate_disk_setup(spec: &KubeadmConfigSpec, base: &str, errors: &mut Vec<FieldError>) {
    let partitions = child(base, "diskSetup.partitions");
    for (i, partition) in spec.disk_setup.partitions.iter().enumerate() {
        let at = index(&partitions, i);
        if partition.layout.is_some() != partition.disk_layout.is_empty() {
            errors.push(FieldError::invalid_hidden(
                &at,
                "exactly one of layout or diskLayout must be set",
            ));
        }
        let layout = child(&at, "diskLayout");
        let mut total = 0i64;
        for (j, part) in partition.disk_layout.iter().enumerate() {
            let part_at = index(&layout, j);
            total += i64::from(part.percentage);
            if !(1..=100).contains(&part.percentage) {
                errors.push(FieldError::invalid(
                    child(&part_at, "percentage"),
                    part.percentage,
                    "must be between 1 and 100",
                ));
            }
            if let Some(kind) = &part.partition_type
                && !is_partition_type(kind)
            {
                errors.push(FieldError::invalid(
                    child(&part_at, "partitionType"),
                    kind,
                    "partitionType must be one of Linux, LinuxSwap, LinuxRAID, LVM, Fat32, NTFS, \
                     LinuxExtended or a full GPT partition GUID",
                ));
            }
        }
        if total > 100 {
            errors.push(FieldError::invalid(
                layout,
                total,
                "the sum of all partition percentages must not be greater than 100",
            ));
        }
    }
}

/// A named cloud-init partition type or a GPT GUID (8-4-4-4-12 hex digits).
fn is_partition_type(kind: &str) -> bool {
    if PARTITION_TYPES.contains(&kind) {
        return true;
    }
    let groups: Vec<&str> = kind.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(group, len)| group.len() == len && group.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn validate_discovery_user(spec: &KubeadmConfigSpec, base: &str, errors: &mut Vec<FieldError>) {
    let user = &spec.join_configuration.discovery.file.kube_config.user;
    if user.auth_provider.is_defined() && user.exec.is_defined() {
        errors.push(FieldError::invalid_hidden(
            child(base, "joinConfiguration.discovery.file.kubeConfig.user"),
            "only one of authProvider or exec must be defined",
        ));
    }
}

fn validate_extra_args(spec: &KubeadmConfigSpec, base: &str, errors: &mut Vec<FieldError>) {
    let cluster = &spec.cluster_configuration;
    let lists: [(&str, &[Arg], &str); 6] = [
        (
            "clusterConfiguration.apiServer.extraArgs",
            &cluster.api_server.extra_args,
            "extraArgs",
        ),
        (
            "clusterConfiguration.controllerManager.extraArgs",
            &cluster.controller_manager.extra_args,
            "extraArgs",
        ),
        (
            "clusterConfiguration.scheduler.extraArgs",
            &cluster.scheduler.extra_args,
            "extraArgs",
        ),
        (
            "clusterConfiguration.etcd.local.extraArgs",
            &cluster.etcd.local.extra_args,
            "extraArgs",
        ),
        (
            "initConfiguration.nodeRegistration.kubeletExtraArgs",
            &spec.init_configuration.node_registration.kubelet_extra_args,
            "kubeletExtraArgs",
        ),
        (
            "joinConfiguration.nodeRegistration.kubeletExtraArgs",
            &spec.join_configuration.node_registration.kubelet_extra_args,
            "kubeletExtraArgs",
        ),
    ];
    for (path, args, what) in lists {
        let mut seen = HashSet::new();
        for (i, arg) in args.iter().enumerate() {
            if !seen.insert(arg.name.as_str()) {
                errors.push(FieldError::duplicate(
                    child(&index(&child(base, path), i), "name"),
                    &arg.name,
                    format!("{what} name must be unique"),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::v1beta2::{
        FileSource, KubeConfigAuthExec, KubeConfigAuthProvider, PartitionSpec, SecretFileSource,
    };

    const SPEC: &str = r#"
clusterConfiguration:
  apiServer:
    extraArgs:
      - {name: cloud-provider, value: external}
      - {name: audit-log-path, value: /var/log/audit.log}
joinConfiguration:
  nodeRegistration:
    kubeletExtraArgs:
      - {name: cloud-provider, value: external}
  discovery:
    file:
      kubeConfigPath: /etc/kubernetes/discovery.conf
      kubeConfig:
        user:
          exec:
            command: /usr/bin/token
files:
  - path: /etc/kubernetes/cloud.conf
    contentFrom:
      secret: {name: cloud-config, key: cloud.conf}
  - path: /etc/motd
    content: aGVsbG8=
    encoding: base64
users:
  - name: capi
    sudo: ALL=(ALL) NOPASSWD:ALL
  - name: admin
    passwdFrom:
      secret: {name: admin-passwd, key: hash}
diskSetup:
  partitions:
    - device: /dev/vdb
      layout: true
    - device: /dev/vdc
      diskLayout:
        - {percentage: 60, partitionType: Linux}
        - {percentage: 40, partitionType: 0FC63DAF-8483-4772-8E79-3D69D8477DE4}
  filesystems:
    - device: /dev/vdb1
      filesystem: ext4
      label: etcd_disk
      partition: auto
bootCommands:
  - echo booted
"#;

    fn spec() -> KubeadmConfigSpec {
        serde_saphyr::from_str(SPEC).expect("fixture parses")
    }

    fn ignition(spec: &mut KubeadmConfigSpec) {
        spec.format = Some(Format::Ignition);
        spec.boot_commands.clear();
        spec.disk_setup.filesystems[0].partition = None;
    }

    type Mutation = fn(&mut KubeadmConfigSpec);
    /// The (path, rule) pairs a case must produce, in order.
    type Expected = &'static [(&'static str, &'static str)];

    /// One broken rule per case: the expected (path, rule) pairs, in order.
    const CASES: &[(&str, Mutation, Expected)] = &[
        ("valid", |_| {}, &[]),
        (
            "content and contentFrom",
            |s| s.files[1].content_from = s.files[0].content_from.clone(),
            &[("spec.files[1]", CONFLICTING_FILE_SOURCE)],
        ),
        (
            "contentFrom without secret name",
            |s| s.files[0].content_from.secret.name.clear(),
            &[("spec.files[0].contentFrom.secret.name", MISSING_SECRET_NAME)],
        ),
        (
            "contentFrom without secret key",
            |s| s.files[0].content_from.secret.key.clear(),
            &[("spec.files[0].contentFrom.secret.key", MISSING_SECRET_KEY)],
        ),
        (
            "duplicate file path",
            |s| s.files[1].path = s.files[0].path.clone(),
            &[("spec.files[1].path", PATH_CONFLICT)],
        ),
        (
            "passwd and passwdFrom",
            |s| s.users[1].passwd = Some("$6$hash".into()),
            &[("spec.users[1]", CONFLICTING_USER_SOURCE)],
        ),
        (
            "passwdFrom without secret name",
            |s| s.users[1].passwd_from.secret.name.clear(),
            &[("spec.users[1].passwdFrom.secret.name", MISSING_SECRET_NAME)],
        ),
        (
            "passwdFrom without secret key",
            |s| s.users[1].passwd_from.secret.key.clear(),
            &[("spec.users[1].passwdFrom.secret.key", MISSING_SECRET_KEY)],
        ),
        // An empty source is the same as no source, as in Cluster API.
        (
            "empty passwdFrom",
            |s| s.users[1].passwd_from = Default::default(),
            &[],
        ),
        (
            "ignition settings without ignition format",
            |s| s.ignition.container_linux_config.strict = Some(true),
            &[(
                "spec.format",
                r#"must be set to "ignition" if spec.ignition is set"#,
            )],
        ),
        ("ignition format", ignition, &[]),
        (
            "ignition: inactive user",
            |s| {
                ignition(s);
                s.users[0].inactive = Some(true);
            },
            &[("spec.users[0].inactive", CANNOT_USE_WITH_IGNITION)],
        ),
        ("a deferred file", |s| s.files[1].defer = Some(true), &[]),
        (
            "ignition: a deferred file",
            |s| {
                ignition(s);
                s.files[1].defer = Some(true);
            },
            &[(
                "spec.files[1].defer",
                "Ignition writes every file before the machine boots further and has no later stage; \
                 write the file from a command (postKubeadmCommands) or use format cloud-config",
            )],
        ),
        // Cluster API's "valid template contentFormat" case.
        (
            "template file content",
            |s| {
                s.files[1].content_format = Some(FileContentFormat::Template);
                s.files[1].content = Some("{{ .controlPlane.version }}".into());
            },
            &[],
        ),
        (
            "template file content that does not parse",
            |s| {
                s.files[1].content_format = Some(FileContentFormat::Template);
                s.files[1].content = Some("v={{ .controlPlane.version ".into());
            },
            &[(
                "spec.files[1].content",
                "contentFormat is Template, but the content is not a Go template: line 1, column 28: \
                 unclosed action",
            )],
        ),
        (
            "a file the bootstrap writes",
            |s| s.files[1].path = "/etc/kubeadm.sh".into(),
            &[("spec.files[1].path", WRITTEN_BY_BOOTSTRAP)],
        ),
        (
            "ignition: bad base64",
            |s| {
                ignition(s);
                s.files[1].content = Some("not base64!".into());
            },
            &[(
                "spec.files[1].content",
                "is not valid base64: Invalid symbol 33, offset 9.",
            )],
        ),
        (
            "ignition: a format Ignition cannot create",
            |s| {
                ignition(s);
                s.disk_setup.filesystems[0].filesystem = "ext3".into();
            },
            &[(
                "spec.diskSetup.filesystems[0].filesystem",
                "\"ext3\" is not a format Ignition creates (ext4, btrfs, xfs, swap, vfat)",
            )],
        ),
        (
            "ignition: additionalConfig that does not transpile",
            |s| {
                ignition(s);
                s.ignition.container_linux_config.additional_config =
                    Some("systemd:\n  units:\n  - name: kubelet\n".into());
            },
            &[(
                "spec.ignition.containerLinuxConfig.additionalConfig",
                "systemd.units[0].name: \"kubelet\" is not a unit name (it must end in one of \
                 .service .socket .device .mount .automount .swap .target .path .timer .snapshot \
                 .slice .scope)",
            )],
        ),
        (
            "ignition: gzip file",
            |s| {
                ignition(s);
                s.files[1].encoding = Some(Encoding::GzipBase64);
            },
            &[("spec.files[1].encoding", CANNOT_USE_WITH_IGNITION)],
        ),
        (
            "ignition: boot commands",
            |s| {
                ignition(s);
                s.boot_commands.push("echo".into());
            },
            &[("spec.bootCommands", CANNOT_USE_WITH_IGNITION)],
        ),
        (
            "ignition: mbr partition table",
            |s| {
                ignition(s);
                s.disk_setup.partitions[0].table_type = Some(PartitionTableType::Mbr);
            },
            &[(
                "spec.diskSetup.partitions[0].tableType",
                r#"only partition type "gpt" is supported when spec.format is set to "ignition""#,
            )],
        ),
        (
            "ignition: replaceFS and partition",
            |s| {
                ignition(s);
                s.disk_setup.filesystems[0].replace_fs = Some("ntfs".into());
                s.disk_setup.filesystems[0].partition = Some("any".into());
            },
            &[
                (
                    "spec.diskSetup.filesystems[0].replaceFS",
                    CANNOT_USE_WITH_IGNITION,
                ),
                (
                    "spec.diskSetup.filesystems[0].partition",
                    CANNOT_USE_WITH_IGNITION,
                ),
            ],
        ),
        (
            "partition percentages above 100",
            |s| s.disk_setup.partitions[1].disk_layout[1].percentage = 41,
            &[(
                "spec.diskSetup.partitions[1].diskLayout",
                "the sum of all partition percentages must not be greater than 100",
            )],
        ),
        (
            "partition percentage out of range",
            |s| s.disk_setup.partitions[1].disk_layout[0].percentage = 0,
            &[(
                "spec.diskSetup.partitions[1].diskLayout[0].percentage",
                "must be between 1 and 100",
            )],
        ),
        (
            "layout and diskLayout",
            |s| {
                s.disk_setup.partitions[0].disk_layout = vec![PartitionSpec {
                    percentage: 100,
                    partition_type: None,
                }]
            },
            &[(
                "spec.diskSetup.partitions[0]",
                "exactly one of layout or diskLayout must be set",
            )],
        ),
        (
            "neither layout nor diskLayout",
            |s| s.disk_setup.partitions[0].layout = None,
            &[(
                "spec.diskSetup.partitions[0]",
                "exactly one of layout or diskLayout must be set",
            )],
        ),
        (
            "unknown partition type",
            |s| s.disk_setup.partitions[1].disk_layout[0].partition_type = Some("ext4".into()),
            &[(
                "spec.diskSetup.partitions[1].diskLayout[0].partitionType",
                "partitionType must be one of Linux, LinuxSwap, LinuxRAID, LVM, Fat32, NTFS, \
                 LinuxExtended or a full GPT partition GUID",
            )],
        ),
        (
            "discovery user with authProvider and exec",
            |s| {
                s.join_configuration
                    .discovery
                    .file
                    .kube_config
                    .user
                    .auth_provider = KubeConfigAuthProvider {
                    name: "oidc".into(),
                    ..Default::default()
                }
            },
            &[(
                "spec.joinConfiguration.discovery.file.kubeConfig.user",
                "only one of authProvider or exec must be defined",
            )],
        ),
        (
            "duplicate apiServer extraArgs",
            |s| {
                let arg = s.cluster_configuration.api_server.extra_args[0].clone();
                s.cluster_configuration.api_server.extra_args.push(arg);
            },
            &[(
                "spec.clusterConfiguration.apiServer.extraArgs[2].name",
                "extraArgs name must be unique",
            )],
        ),
        (
            "duplicate kubeletExtraArgs",
            |s| {
                let args = &mut s.join_configuration.node_registration.kubelet_extra_args;
                args.push(args[0].clone());
            },
            &[(
                "spec.joinConfiguration.nodeRegistration.kubeletExtraArgs[1].name",
                "kubeletExtraArgs name must be unique",
            )],
        ),
    ];

    fn found(errors: &[FieldError]) -> Vec<(&str, &str)> {
        errors
            .iter()
            .map(|e| (e.path.as_str(), e.rule.as_str()))
            .collect()
    }

    #[test]
    fn config_spec_rules() {
        for (name, mutate, expected) in CASES {
            let mut spec = spec();
            mutate(&mut spec);
            let errors = validate_config_spec(&spec, "spec");
            assert_eq!(found(&errors), *expected, "case {name:?}");
        }
    }

    #[test]
    fn paths_follow_the_base_path() {
        let mut spec = spec();
        spec.files[0].content_from.secret.key.clear();
        let errors = validate_config_spec(&spec, "spec.kubeadmConfigSpec");
        assert_eq!(
            errors[0].path,
            "spec.kubeadmConfigSpec.files[0].contentFrom.secret.key"
        );
    }

    #[test]
    fn secrets_are_never_echoed() {
        let mut spec = spec();
        spec.files[1].content = Some("super-secret-content".into());
        spec.files[1].content_from = FileSource {
            secret: SecretFileSource {
                name: "s".into(),
                key: "k".into(),
            },
        };
        spec.users[1].passwd = Some("$6$secret-hash".into());
        let errors = FieldErrors(validate_config_spec(&spec, "spec"));
        let text = format!("{errors} {errors:?}");
        assert!(!text.contains("super-secret-content"), "{text}");
        assert!(!text.contains("secret-hash"), "{text}");
    }

    #[test]
    fn kubeadm_config_create_and_update() {
        let mut config = KubeadmConfig::new("cp-0", spec());
        assert_eq!(validate_kubeadm_config_create(&config), Ok(()));
        let old = config.clone();
        config.spec.files[1].path = config.spec.files[0].path.clone();
        let errors = validate_kubeadm_config_update(&old, &config).unwrap_err();
        assert_eq!(found(&errors.0), [("spec.files[1].path", PATH_CONFLICT)]);
        assert_eq!(
            errors.to_string(),
            format!(r#"spec.files[1].path: {PATH_CONFLICT} (value: "/etc/kubernetes/cloud.conf")"#)
        );
    }

    #[test]
    fn kubeadm_config_template_create_and_update() {
        let mut template = KubeadmConfigTemplate::new("md-0", Default::default());
        template.spec.template.spec = spec();
        template
            .spec
            .template
            .metadata
            .labels
            .insert("environment".into(), "test".into());
        assert_eq!(validate_kubeadm_config_template_create(&template), Ok(()));

        let old = template.clone();
        template
            .spec
            .template
            .spec
            .join_configuration
            .discovery
            .file
            .kube_config
            .user
            .exec = KubeConfigAuthExec::default();
        template.spec.template.spec.files[0]
            .content_from
            .secret
            .name
            .clear();
        template
            .spec
            .template
            .metadata
            .labels
            .insert("bad label".into(), "x".into());
        let errors = validate_kubeadm_config_template_update(&old, &template).unwrap_err();
        let found = found(&errors.0);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(
            found[0],
            (
                "spec.template.spec.files[0].contentFrom.secret.name",
                MISSING_SECRET_NAME
            )
        );
        assert_eq!(found[1].0, "spec.template.metadata.labels");
    }
}
