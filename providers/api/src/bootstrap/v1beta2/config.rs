//! KubeadmConfig and KubeadmConfigTemplate, and the cloud-init/Ignition settings of their spec.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::kubeadm::{
    ClusterConfiguration, InitConfiguration, JoinConfiguration, impl_is_defined, is_zero,
};
use crate::meta::{ObjectMeta, V1Beta1Condition};

/// Output format of the bootstrap data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Format {
    /// cloud-config user data for cloud-init; the default.
    #[default]
    #[serde(rename = "cloud-config")]
    CloudConfig,
    /// An Ignition config.
    #[serde(rename = "ignition")]
    Ignition,
}

/// Desired state of a KubeadmConfig: the kubeadm configuration (cluster and init, or join) plus
/// the files, users, commands and disks to set up on the machine.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "bootstrap.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "KubeadmConfig",
    plural = "kubeadmconfigs",
    namespaced,
    status = "KubeadmConfigStatus",
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    doc = "Bootstrap configuration of one Machine with kubeadm.",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']","description":"Cluster"}"#,
    printcolumn = r#"{"name":"Paused","type":"string","jsonPath":".status.conditions[?(@.type==\"Paused\")].status","description":"Reconciliation paused","priority":10}"#,
    printcolumn = r#"{"name":"Data secret created","type":"string","jsonPath":".status.initialization.dataSecretCreated","description":"Boostrap secret is created"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"Time duration since creation of KubeadmConfig"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigSpec {
    /// Cluster-wide kubeadm settings; used with initConfiguration for `kubeadm init`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cluster_configuration: ClusterConfiguration,
    /// Settings for `kubeadm init`; used with clusterConfiguration.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub init_configuration: InitConfiguration,
    /// Settings for `kubeadm join`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub join_configuration: JoinConfiguration,
    /// Extra files written on the machine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<File>,
    /// Partition tables and file systems to create.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub disk_setup: DiskSetup,
    /// Mount points to set up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<MountPoints>,
    /// Commands run very early on every boot (cloud-init bootcmd); ignored with Ignition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub boot_commands: Vec<String>,
    /// Commands run before kubeadm.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_kubeadm_commands: Vec<String>,
    /// Commands run after kubeadm.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_kubeadm_commands: Vec<String>,
    /// Extra users to add.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<User>,
    /// NTP settings.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ntp: Ntp,
    /// Output format of the bootstrap data; cloud-config when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
    /// kubeadm log verbosity (overrides `--v`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verbosity: Option<i32>,
    /// Ignition specific settings.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ignition: IgnitionSpec,
}

/// Ignition specific settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IgnitionSpec {
    /// Container Linux Config specific settings.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub container_linux_config: ContainerLinuxConfig,
}

/// Container Linux Config (CLC) specific settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerLinuxConfig {
    /// Extra CLC configuration merged into the generated Ignition config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_config: Option<String>,
    /// Whether additionalConfig is parsed strictly (warnings become errors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// Observed state of a KubeadmConfig.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigStatus {
    /// Current state of the KubeadmConfig; known types are Ready, DataSecretAvailable and CertificatesAvailable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Progress of the initialization, part of the Cluster API bootstrap contract.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub initialization: KubeadmConfigInitializationStatus,
    /// Name of the Secret holding the bootstrap data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_secret_name: Option<String>,
    /// Latest generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Status fields kept for v1beta1 clients only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<KubeadmConfigDeprecatedStatus>,
}

/// Progress of the KubeadmConfig initialization.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigInitializationStatus {
    /// True once the Machine's bootstrap data Secret has been created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_secret_created: Option<bool>,
}

/// Deprecated status fields, to be removed with the versions that use them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigDeprecatedStatus {
    /// Status fields kept for v1beta1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v1beta1: Option<KubeadmConfigV1Beta1DeprecatedStatus>,
}

/// Status fields of v1beta1, kept until v1beta1 is no longer served.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigV1Beta1DeprecatedStatus {
    /// v1beta1 conditions of the KubeadmConfig (deprecated).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<V1Beta1Condition>,
    /// Reason of a non-retryable error (deprecated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Message of a non-retryable error (deprecated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
}

/// Encoding of a file's content.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Encoding {
    /// Base64 encoded.
    #[serde(rename = "base64")]
    Base64,
    /// Gzip compressed.
    #[serde(rename = "gzip")]
    Gzip,
    /// Gzip compressed, then base64 encoded.
    #[serde(rename = "gzip+base64")]
    GzipBase64,
}

/// How a file's content is interpreted before it is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum FileContentFormat {
    /// The content is written verbatim; the default.
    #[default]
    Raw,
    /// The content is a Go text/template rendered with e.g. `.controlPlane.version`.
    Template,
}

/// A file written on the machine (cloud-init write_files).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct File {
    /// Full path of the file on disk.
    pub path: String,
    /// Owner of the file, e.g. `root:root`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Permissions of the file, e.g. `0640`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<String>,
    /// Encoding of the content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<Encoding>,
    /// Whether the content is appended to an existing file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append: Option<bool>,
    /// Inline content of the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Secret the content is read from, instead of inline content.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub content_from: FileSource,
    /// How the resolved content is interpreted: Raw (default) or Template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_format: Option<FileContentFormat>,
    /// Written in cloud-init's final stage, after users and mounts exist (cloud-init
    /// `write_files[].defer`, Cluster API v1.15); Ignition has no such stage and refuses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defer: Option<bool>,
}

/// External source of a file's content.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileSource {
    /// Secret key holding the content.
    pub secret: SecretFileSource,
}

/// A key of a Secret in the KubeadmConfig's namespace holding a file's content.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretFileSource {
    /// Name of the Secret.
    pub name: String,
    /// Key in the Secret's data.
    pub key: String,
}

/// External source of a user's password.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PasswdSource {
    /// Secret key holding the hashed password.
    pub secret: SecretPasswdSource,
}

/// A key of a Secret in the KubeadmConfig's namespace holding a hashed password.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretPasswdSource {
    /// Name of the Secret.
    pub name: String,
    /// Key in the Secret's data.
    pub key: String,
}

/// A user created on the machine (cloud-init users).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct User {
    /// User name.
    pub name: String,
    /// GECOS field of the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gecos: Option<String>,
    /// Additional groups of the user (comma separated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<String>,
    /// Home directory of the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home_dir: Option<String>,
    /// Whether the user is marked inactive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inactive: Option<bool>,
    /// Login shell of the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    /// Hashed password of the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passwd: Option<String>,
    /// Secret the hashed password is read from.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub passwd_from: PasswdSource,
    /// Primary group of the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_group: Option<String>,
    /// Whether password login is disabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_password: Option<bool>,
    /// Sudo rule of the user, e.g. `ALL=(ALL) NOPASSWD:ALL`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sudo: Option<String>,
    /// SSH public keys authorized for the user.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_authorized_keys: Vec<String>,
}

/// NTP settings (cloud-init ntp).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Ntp {
    /// NTP servers to use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<String>,
    /// Whether NTP is enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// Partitions and file systems to create (cloud-init disk_setup and fs_setup).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiskSetup {
    /// Partitions to set up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<Partition>,
    /// File systems to set up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filesystems: Vec<Filesystem>,
}

/// Type of a partition table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PartitionTableType {
    /// MS-DOS partition table; the default.
    #[default]
    #[serde(rename = "mbr")]
    Mbr,
    /// GPT partition table.
    #[serde(rename = "gpt")]
    Gpt,
}

/// How a device is partitioned; set exactly one of layout and diskLayout.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Partition {
    /// Name of the device.
    pub device: String,
    /// True creates one partition over the whole device; false leaves partitioning alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<bool>,
    /// Whether to partition even if a partition or file system exists (use with caution).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    /// Partition table type: mbr (default) or gpt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_type: Option<PartitionTableType>,
    /// Ordered partitions with their share of the disk (sum at most 100%).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disk_layout: Vec<PartitionSpec>,
}

/// Size and type of one partition of a disk layout.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartitionSpec {
    /// Percentage of the disk the partition takes (1-100).
    #[schemars(range(min = 1, max = 100))]
    pub percentage: i32,
    /// Partition type: Linux, LinuxSwap, LinuxRAID, LVM, Fat32, NTFS, LinuxExtended or a GPT GUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_type: Option<String>,
}

/// A file system to create.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Filesystem {
    /// Name of the device.
    pub device: String,
    /// File system type, e.g. ext4.
    pub filesystem: String,
    /// File system label; `None` means no label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Partition to use: `auto|any`, `auto`, `any`, `none` or a partition number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// Whether an existing file system is destroyed (use with caution).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    /// File system type to replace (Azure specific); needs the `any` partition unless a label is set.
    #[serde(rename = "replaceFS", default, skip_serializing_if = "Option::is_none")]
    pub replace_fs: Option<String>,
    /// Extra options for the file system creation command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_opts: Vec<String>,
}

/// One cloud-init mounts entry: device, mount point, and optionally type, options, dump and pass.
pub type MountPoints = Vec<String>;

/// Desired state of a KubeadmConfigTemplate.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "bootstrap.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "KubeadmConfigTemplate",
    plural = "kubeadmconfigtemplates",
    namespaced,
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    doc = "Template from which KubeadmConfigs are created, e.g. for MachineDeployments.",
    printcolumn = r#"{"name":"ClusterClass","type":"string","jsonPath":".metadata.ownerReferences[?(@.kind==\"ClusterClass\")].name","description":"Name of the ClusterClass owning this template"}"#,
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".metadata.ownerReferences[?(@.kind==\"Cluster\")].name","description":"Name of the Cluster owning this template"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"Time duration since creation of KubeadmConfigTemplate"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigTemplateSpec {
    /// The KubeadmConfig created from this template.
    pub template: KubeadmConfigTemplateResource,
}

/// Metadata and spec of the KubeadmConfigs created from a template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigTemplateResource {
    /// Labels and annotations of the created KubeadmConfigs.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub metadata: ObjectMeta,
    /// Spec of the created KubeadmConfigs.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub spec: KubeadmConfigSpec,
}

impl_is_defined!(
    KubeadmConfigSpec,
    IgnitionSpec,
    ContainerLinuxConfig,
    KubeadmConfigInitializationStatus,
    FileSource,
    PasswdSource,
    Ntp,
    DiskSetup,
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::v1beta2::{Arg, EncryptionAlgorithmType};
    use kube::{CustomResourceExt, Resource};
    use serde_json::{Value, json};

    const CONTROL_PLANE_CONFIG: &str = r#"
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfig
metadata:
  name: my-cluster-control-plane-x7k2p
  namespace: default
  labels:
    cluster.x-k8s.io/cluster-name: my-cluster
    cluster.x-k8s.io/control-plane: ""
spec:
  clusterConfiguration:
    controlPlaneEndpoint: my-cluster.example.com:6443
    imageRepository: registry.k8s.io
    certificateValidityPeriodDays: 365
    encryptionAlgorithm: ECDSA-P256
    featureGates:
      ControlPlaneKubeletLocalMode: true
    apiServer:
      certSANs:
        - localhost
        - 127.0.0.1
      extraArgs:
        - name: cloud-provider
          value: external
        - name: audit-log-path
          value: /var/log/kubernetes/audit.log
      extraVolumes:
        - name: audit-logs
          hostPath: /var/log/kubernetes
          mountPath: /var/log/kubernetes
          pathType: DirectoryOrCreate
      extraEnvs:
        - name: HTTP_PROXY
          value: http://proxy.example.com:3128
    controllerManager:
      extraArgs:
        - name: cloud-provider
          value: external
        - name: bind-address
          value: 0.0.0.0
    scheduler:
      extraArgs:
        - name: bind-address
          value: 0.0.0.0
    etcd:
      local:
        dataDir: /var/lib/etcddisk/etcd
        extraArgs:
          - name: heartbeat-interval
            value: "500"
          - name: election-timeout
            value: "5000"
        serverCertSANs:
          - etcd.example.com
    dns:
      imageRepository: registry.k8s.io/coredns
      imageTag: v1.11.3
  initConfiguration:
    bootstrapTokens:
      - token: abcdef.0123456789abcdef
        ttlSeconds: 900
        usages: [signing, authentication]
    nodeRegistration:
      name: '{{ ds.meta_data.local_hostname }}'
      criSocket: unix:///var/run/containerd/containerd.sock
      imagePullPolicy: IfNotPresent
      kubeletExtraArgs:
        - name: cloud-provider
          value: external
        - name: provider-id
          value: 'openstack:///{{ instance_id }}'
      taints: []
    localAPIEndpoint:
      advertiseAddress: 10.0.0.10
      bindPort: 6443
    skipPhases:
      - addon/kube-proxy
    patches:
      directory: /etc/kubernetes/patches
    timeouts:
      controlPlaneComponentHealthCheckSeconds: 300
      kubeletHealthCheckSeconds: 120
  joinConfiguration:
    nodeRegistration:
      name: '{{ ds.meta_data.local_hostname }}'
      kubeletExtraArgs:
        - name: cloud-provider
          value: external
      ignorePreflightErrors:
        - DirAvailable--etc-kubernetes-manifests
    controlPlane:
      localAPIEndpoint:
        bindPort: 6443
    discovery:
      bootstrapToken:
        apiServerEndpoint: my-cluster.example.com:6443
        token: abcdef.0123456789abcdef
        caCertHashes:
          - sha256:7c1d0e5e0f2b1f6a7e8d9c0b1a2f3e4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b9a0f
    patches:
      directory: /etc/kubernetes/patches
  files:
    - path: /etc/kubernetes/cloud.conf
      owner: root:root
      permissions: "0600"
      contentFrom:
        secret:
          name: my-cluster-cloud-config
          key: cloud.conf
    - path: /etc/kubernetes/patches/kubeletconfiguration0+strategic.json
      owner: root:root
      permissions: "0644"
      content: |
        {"kind": "KubeletConfiguration", "serializeImagePulls": false}
    - path: /etc/motd
      content: SGVsbG8=
      encoding: base64
      append: true
    - path: /etc/kubeadm-version
      content: '{{ .controlPlane.version }}'
      contentFormat: Template
  diskSetup:
    partitions:
      - device: /dev/vdb
        layout: true
        overwrite: false
        tableType: gpt
    filesystems:
      - device: /dev/vdb1
        filesystem: ext4
        label: etcd_disk
        extraOpts: ["-E", "lazy_itable_init=1"]
  mounts:
    - - LABEL=etcd_disk
      - /var/lib/etcddisk
  bootCommands:
    - echo booted > /tmp/boot
  preKubeadmCommands:
    - swapoff -a
    - systemctl restart containerd
  postKubeadmCommands:
    - echo done
  users:
    - name: capi
      sudo: ALL=(ALL) NOPASSWD:ALL
      shell: /bin/bash
      lockPassword: true
      sshAuthorizedKeys:
        - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleKey capi@example.com
    - name: admin
      passwdFrom:
        secret:
          name: admin-passwd
          key: hash
  ntp:
    enabled: true
    servers:
      - 0.pool.ntp.org
      - 1.pool.ntp.org
  format: cloud-config
  verbosity: 5
status:
  observedGeneration: 2
  dataSecretName: my-cluster-control-plane-x7k2p
  initialization:
    dataSecretCreated: true
  conditions:
    - type: Ready
      status: "True"
      reason: Ready
      message: ""
      lastTransitionTime: "2025-06-01T10:00:00Z"
      observedGeneration: 2
  deprecated:
    v1beta1:
      conditions:
        - type: Ready
          status: "True"
          lastTransitionTime: "2025-06-01T10:00:00Z"
      failureReason: NotReady
"#;

    /// Parses YAML into a JSON value, then asserts the value survives a trip through `T`.
    fn assert_round_trip<T: serde::de::DeserializeOwned + Serialize>(yaml: &str) -> T {
        let value: Value = serde_saphyr::from_str(yaml).expect("valid YAML");
        let typed: T = serde_json::from_value(value.clone()).expect("deserializes");
        assert_eq!(serde_json::to_value(&typed).unwrap(), value);
        typed
    }

    #[test]
    fn control_plane_config_round_trips() {
        let config: KubeadmConfig = assert_round_trip(CONTROL_PLANE_CONFIG);
        let spec = &config.spec;
        assert_eq!(
            spec.cluster_configuration.api_server.extra_args[0],
            Arg::new("cloud-provider", "external")
        );
        assert_eq!(
            spec.cluster_configuration.etcd.local.extra_args,
            vec![
                Arg::new("heartbeat-interval", "500"),
                Arg::new("election-timeout", "5000")
            ]
        );
        assert_eq!(
            spec.cluster_configuration.encryption_algorithm,
            Some(EncryptionAlgorithmType::EcdsaP256)
        );
        assert_eq!(
            spec.init_configuration.node_registration.kubelet_extra_args[1].name,
            "provider-id"
        );
        assert_eq!(
            spec.init_configuration.node_registration.taints,
            Some(vec![])
        );
        assert_eq!(
            spec.init_configuration.bootstrap_tokens[0].token.id,
            "abcdef"
        );
        assert!(spec.join_configuration.control_plane.is_some());
        assert_eq!(spec.files[0].content_from.secret.key, "cloud.conf");
        assert!(!spec.files[1].content_from.is_defined());
        assert_eq!(spec.files[2].encoding, Some(Encoding::Base64));
        assert_eq!(
            spec.files[3].content_format,
            Some(FileContentFormat::Template)
        );
        assert_eq!(spec.users[1].passwd_from.secret.name, "admin-passwd");
        assert_eq!(spec.format, Some(Format::CloudConfig));
        assert_eq!(
            spec.disk_setup.partitions[0].table_type,
            Some(PartitionTableType::Gpt)
        );
        let status = config.status.as_ref().unwrap();
        assert_eq!(status.initialization.data_secret_created, Some(true));
        assert_eq!(
            status
                .deprecated
                .as_ref()
                .unwrap()
                .v1beta1
                .as_ref()
                .unwrap()
                .conditions[0]
                .type_,
            "Ready"
        );
    }

    #[test]
    fn worker_template_round_trips() {
        let template: KubeadmConfigTemplate = assert_round_trip(
            r#"
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfigTemplate
metadata:
  name: my-cluster-md-0
  namespace: default
spec:
  template:
    metadata:
      labels:
        environment: test
    spec:
      joinConfiguration:
        nodeRegistration:
          name: '{{ local_hostname }}'
          kubeletExtraArgs:
            - name: eviction-hard
              value: nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%
      ignition:
        containerLinuxConfig:
          additionalConfig: |
            storage:
              files: []
          strict: true
      format: ignition
"#,
        );
        let spec = &template.spec.template.spec;
        assert_eq!(spec.format, Some(Format::Ignition));
        assert!(spec.ignition.is_defined());
        assert!(!spec.cluster_configuration.is_defined());
        assert_eq!(
            template.spec.template.metadata.labels["environment"],
            "test"
        );
    }

    #[test]
    fn empty_spec_serializes_to_empty_object() {
        assert_eq!(
            serde_json::to_value(KubeadmConfigSpec::default()).unwrap(),
            json!({})
        );
        let resource = KubeadmConfigTemplateResource::default();
        assert_eq!(serde_json::to_value(resource).unwrap(), json!({}));
    }

    fn printer_columns(crd: &Value) -> Vec<(String, String, Option<i64>)> {
        crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().to_owned(),
                    c["jsonPath"].as_str().unwrap().to_owned(),
                    c["priority"].as_i64(),
                )
            })
            .collect()
    }

    #[test]
    fn kubeadm_config_crd() {
        let crd = serde_json::to_value(KubeadmConfig::crd()).unwrap();
        assert_eq!(
            crd["metadata"]["name"],
            "kubeadmconfigs.bootstrap.cluster.x-k8s.io"
        );
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        assert_eq!(crd["spec"]["names"]["categories"], json!(["cluster-api"]));
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], "v1beta2");
        assert_eq!(version["subresources"]["status"], json!({}));
        assert_eq!(
            printer_columns(&crd),
            vec![
                (
                    "Cluster".into(),
                    ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']".into(),
                    None
                ),
                (
                    "Paused".into(),
                    ".status.conditions[?(@.type==\"Paused\")].status".into(),
                    Some(10)
                ),
                (
                    "Data secret created".into(),
                    ".status.initialization.dataSecretCreated".into(),
                    None
                ),
                ("Age".into(), ".metadata.creationTimestamp".into(), None),
            ]
        );
        let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        let cluster = &spec["clusterConfiguration"]["properties"];
        assert_eq!(
            cluster["apiServer"]["properties"]["extraArgs"]["items"]["required"],
            json!(["name", "value"])
        );
        assert_eq!(
            cluster["encryptionAlgorithm"]["enum"],
            json!([
                "ECDSA-P256",
                "ECDSA-P384",
                "RSA-2048",
                "RSA-3072",
                "RSA-4096"
            ])
        );
        assert_eq!(spec["format"]["enum"], json!(["cloud-config", "ignition"]));
        let token = &spec["initConfiguration"]["properties"]["bootstrapTokens"]["items"];
        assert_eq!(token["properties"]["token"]["type"], "string");
        // No defaults leak into the schema: the API server would otherwise add them to objects.
        assert!(!serde_json::to_string(&crd).unwrap().contains("\"default\""));
    }

    #[test]
    fn kubeadm_config_template_crd() {
        assert_eq!(KubeadmConfigTemplate::kind(&()), "KubeadmConfigTemplate");
        let crd = serde_json::to_value(KubeadmConfigTemplate::crd()).unwrap();
        assert_eq!(
            crd["metadata"]["name"],
            "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io"
        );
        assert_eq!(crd["spec"]["names"]["categories"], json!(["cluster-api"]));
        assert!(crd["spec"]["versions"][0]["subresources"].is_null());
        let names: Vec<_> = printer_columns(&crd).into_iter().map(|c| c.0).collect();
        assert_eq!(names, ["ClusterClass", "Cluster", "Age"]);
        let template = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["template"]["properties"];
        assert!(template["spec"]["properties"]["joinConfiguration"].is_object());
        assert!(template["metadata"]["properties"]["labels"].is_object());
    }
}
