//! KubeadmConfig and KubeadmConfigTemplate (v1beta1) and the cloud-init/Ignition inputs of their spec.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::kubeadm::{ClusterConfiguration, InitConfiguration, JoinConfiguration};
use crate::meta::{ObjectMeta, V1Beta1Condition};

/// Output format of the bootstrap data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Format {
    /// cloud-config user data for cloud-init (the default).
    #[default]
    #[serde(rename = "cloud-config")]
    CloudConfig,
    /// An Ignition config.
    #[serde(rename = "ignition")]
    Ignition,
}

/// Encoding of a file's content.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Encoding {
    /// The content is base64 encoded.
    #[default]
    #[serde(rename = "base64")]
    Base64,
    /// The content is gzip compressed.
    #[serde(rename = "gzip")]
    Gzip,
    /// The content is gzip compressed, then base64 encoded.
    #[serde(rename = "gzip+base64")]
    GzipBase64,
}

/// How a file's content is interpreted before it is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum FileContentFormat {
    /// The content is written verbatim (the default).
    #[default]
    Raw,
    /// The content is rendered as a Go text/template first.
    Template,
}

/// Type of a partition table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PartitionTableType {
    /// An MS-DOS partition table (the default).
    #[default]
    #[serde(rename = "mbr")]
    Mbr,
    /// A GPT partition table.
    #[serde(rename = "gpt")]
    Gpt,
}

/// Desired state of a KubeadmConfig: either cluster and init configuration (first control plane
/// node) or join configuration (other nodes), plus extra cloud-init/Ignition inputs.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "bootstrap.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "KubeadmConfig",
    plural = "kubeadmconfigs",
    namespaced,
    status = "KubeadmConfigStatus",
    category = "cluster-api",
    deprecated,
    derive = "PartialEq",
    derive = "Default",
    doc = "Bootstrap configuration of a Machine through kubeadm (the kubeadmconfigs API).",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']","description":"Cluster"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"Time duration since creation of KubeadmConfig"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigSpec {
    /// Cluster-wide kubeadm settings, used with `initConfiguration` by `kubeadm init`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_configuration: Option<ClusterConfiguration>,
    /// Settings of `kubeadm init`, used with `clusterConfiguration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_configuration: Option<InitConfiguration>,
    /// Settings of `kubeadm join`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_configuration: Option<JoinConfiguration>,
    /// Extra files written on the machine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<File>,
    /// Partition tables and file systems to create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_setup: Option<DiskSetup>,
    /// Mount points to set up; each entry is a cloud-init mounts line.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<MountPoints>,
    /// Commands run very early on every boot (cloud-init bootcmd); no effect with Ignition.
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ntp: Option<Ntp>,
    /// Output format of the bootstrap data; defaults to cloud-config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
    /// kubeadm log verbosity; overrides `--v` of the kubeadm commands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verbosity: Option<i32>,
    /// Run `kubeadm join` from a script that retries it.
    /// Deprecated: no longer needed and going to be removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_experimental_retry_join: Option<bool>,
    /// Ignition specific settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignition: Option<IgnitionSpec>,
}

/// Ignition specific settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IgnitionSpec {
    /// Container Linux Config specific settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_linux_config: Option<ContainerLinuxConfig>,
}

/// Container Linux Config (CLC) specific settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerLinuxConfig {
    /// Extra CLC merged into the generated Ignition config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_config: Option<String>,
    /// Parse `additionalConfig` strictly, treating warnings as errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// Observed state of a KubeadmConfig.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigStatus {
    /// Whether the bootstrap data is ready to be consumed.
    #[serde(default)]
    pub ready: bool,
    /// Name of the Secret holding the bootstrap data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_secret_name: Option<String>,
    /// Set on non-retryable errors. Deprecated: removed together with v1beta1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Set on non-retryable errors. Deprecated: removed together with v1beta1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    /// Latest generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Current service state of the KubeadmConfig (Cluster API v1beta1 conditions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<V1Beta1Condition>,
    /// Status fields in their v1beta2 shape.
    #[serde(default, rename = "v1beta2", skip_serializing_if = "Option::is_none")]
    pub v1beta2: Option<KubeadmConfigV1Beta2Status>,
}

/// The status fields of a KubeadmConfig that change with v1beta2.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigV1Beta2Status {
    /// Conditions of the KubeadmConfig (Ready, DataSecretAvailable, CertificatesAvailable).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A file written by cloud-init (`write_files`) or Ignition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct File {
    /// Full path of the file on disk.
    pub path: String,
    /// Owner of the file, e.g. "root:root".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Permissions of the file, e.g. "0640".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<String>,
    /// Encoding of the content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<Encoding>,
    /// Append the content to the file if it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append: Option<bool>,
    /// Inline content of the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Where to read the content from instead of `content`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_from: Option<FileSource>,
    /// How to interpret the content: Raw (default) or Template (a Go text/template that can use
    /// `.controlPlane.version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_format: Option<FileContentFormat>,
    /// Write the file in cloud-init's final stage, after users and mounts (cloud-init only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defer: Option<bool>,
}

/// The source of a file's content.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileSource {
    /// A Secret key holding the content.
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

/// The source of a user's password.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PasswdSource {
    /// A Secret key holding the hashed password.
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

/// A user created on the machine.
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
    /// Mark the user as inactive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inactive: Option<bool>,
    /// Login shell of the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    /// Hashed password of the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passwd: Option<String>,
    /// Where to read the hashed password from instead of `passwd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passwd_from: Option<PasswdSource>,
    /// Primary group of the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_group: Option<String>,
    /// Disable password login.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_password: Option<bool>,
    /// Sudo rule of the user, e.g. "ALL=(ALL) NOPASSWD:ALL".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sudo: Option<String>,
    /// SSH authorized keys of the user.
    #[serde(
        default,
        rename = "sshAuthorizedKeys",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub ssh_authorized_keys: Vec<String>,
}

/// NTP settings for cloud-init.
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

/// Partitions and file systems to create (cloud-init `disk_setup` and `fs_setup`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiskSetup {
    /// Partitions to create.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<Partition>,
    /// File systems to create.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filesystems: Vec<Filesystem>,
}

/// How to partition a device.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Partition {
    /// Name of the device.
    pub device: String,
    /// True creates a single partition over the whole device (unless `diskLayout` is set);
    /// false leaves the existing partitioning alone.
    pub layout: bool,
    /// Skip the checks and partition even if a partition or file system exists (dangerous).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    /// Partition table type: mbr (default) or gpt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_type: Option<PartitionTableType>,
    /// Ordered partitions, each with its percentage of the disk (at most 100 in total) and type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disk_layout: Vec<PartitionSpec>,
}

/// Size and type of one partition.
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
    /// Device name.
    pub device: String,
    /// File system type, e.g. ext4.
    pub filesystem: String,
    /// File system label; "None" sets no label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Partition to use: "auto|any", "auto", "any", "none" or a partition number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// Overwrite an existing file system (dangerous).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    /// File system type to replace (Azure specific; needs a label or the 'any' partition).
    #[serde(default, rename = "replaceFS", skip_serializing_if = "Option::is_none")]
    pub replace_fs: Option<String>,
    /// Extra options for the mkfs command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_opts: Vec<String>,
}

/// One cloud-init mounts entry: device, mount point, then optional fstab fields.
pub type MountPoints = Vec<String>;

/// Desired state of a KubeadmConfigTemplate.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "bootstrap.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "KubeadmConfigTemplate",
    plural = "kubeadmconfigtemplates",
    namespaced,
    category = "cluster-api",
    deprecated,
    derive = "PartialEq",
    derive = "Default",
    doc = "Template for the KubeadmConfigs of a group of Machines (the kubeadmconfigtemplates API).",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"Time duration since creation of KubeadmConfigTemplate"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigTemplateSpec {
    /// The KubeadmConfig to create from this template.
    pub template: KubeadmConfigTemplateResource,
}

/// The metadata and spec of the KubeadmConfigs created from a template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigTemplateResource {
    /// Labels and annotations of the created KubeadmConfigs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// Spec of the created KubeadmConfigs.
    #[serde(default)]
    pub spec: KubeadmConfigSpec,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;
    use serde_json::Value;

    const KUBEADM_CONFIG: &str = r#"
apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: KubeadmConfig
metadata:
  name: capi-quickstart-control-plane-x7f2k
  namespace: default
  labels:
    cluster.x-k8s.io/cluster-name: capi-quickstart
spec:
  clusterConfiguration:
    apiServer:
      certSANs:
        - localhost
        - 127.0.0.1
      extraArgs:
        cloud-provider: external
        enable-admission-plugins: NodeRestriction
      timeoutForControlPlane: 20m0s
    controllerManager:
      extraArgs:
        cloud-provider: external
        enable-hostpath-provisioner: "true"
    etcd:
      local:
        dataDir: /var/lib/etcddisk/etcd
        extraArgs:
          quota-backend-bytes: "8589934592"
          listen-metrics-urls: http://0.0.0.0:2381
    networking:
      podSubnet: 192.168.0.0/16
      serviceSubnet: 10.128.0.0/12
      dnsDomain: cluster.local
    kubernetesVersion: v1.28.4
    clusterName: capi-quickstart
    imageRepository: registry.k8s.io
  diskSetup:
    partitions:
      - device: /dev/disk/azure/scsi1/lun0
        layout: true
        overwrite: false
        tableType: gpt
    filesystems:
      - device: /dev/disk/azure/scsi1/lun0
        filesystem: ext4
        label: etcd_disk
        extraOpts:
          - -E
          - lazy_itable_init=1,lazy_journal_init=1
  mounts:
    - - LABEL=etcd_disk
      - /var/lib/etcddisk
  initConfiguration:
    bootstrapTokens:
      - token: abcdef.0123456789abcdef
        description: token for joining workers
        ttl: 24h0m0s
        usages:
          - signing
          - authentication
        groups:
          - system:bootstrappers:kubeadm:default-node-token
    localAPIEndpoint:
      advertiseAddress: 10.0.0.4
      bindPort: 6443
    nodeRegistration:
      name: '{{ ds.meta_data["local_hostname"] }}'
      criSocket: unix:///var/run/containerd/containerd.sock
      kubeletExtraArgs:
        cloud-provider: external
        eviction-hard: nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%
      taints: []
  joinConfiguration:
    nodeRegistration:
      name: '{{ ds.meta_data["local_hostname"] }}'
      kubeletExtraArgs:
        cloud-provider: external
      ignorePreflightErrors:
        - FileAvailable--etc-kubernetes-pki-ca.crt
      imagePullPolicy: IfNotPresent
    discovery:
      bootstrapToken:
        apiServerEndpoint: 10.0.0.4:6443
        token: abcdef.0123456789abcdef
        caCertHashes:
          - sha256:7c3a3a5ed3b6ae38a2e1c2e6ae6e8d1c8d3bd83a3ecd7b3b0e4b5d0bc86f9c02
        unsafeSkipCAVerification: false
      timeout: 5m0s
    controlPlane:
      localAPIEndpoint:
        advertiseAddress: 10.0.0.5
        bindPort: 6443
  files:
    - path: /etc/kubernetes/azure.json
      owner: root:root
      permissions: "0644"
      contentFrom:
        secret:
          name: capi-quickstart-control-plane-azure-json
          key: control-plane-azure.json
    - path: /etc/kubernetes/patches/kube-apiserver0+strategic.yaml
      content: |
        spec:
          containers:
          - name: kube-apiserver
      encoding: base64
      append: false
  preKubeadmCommands:
    - echo "127.0.0.1 localhost" >>/etc/hosts
    - systemctl restart containerd
  postKubeadmCommands:
    - echo done
  users:
    - name: capi
      sudo: ALL=(ALL) NOPASSWD:ALL
      sshAuthorizedKeys:
        - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests capi@example
      lockPassword: true
      passwdFrom:
        secret:
          name: capi-passwd
          key: passwd
  ntp:
    enabled: true
    servers:
      - 0.pool.ntp.org
      - 1.pool.ntp.org
  format: cloud-config
  verbosity: 5
  useExperimentalRetryJoin: true
status:
  ready: true
  dataSecretName: capi-quickstart-control-plane-x7f2k
  observedGeneration: 2
  conditions:
    - type: Ready
      status: "True"
      lastTransitionTime: "2024-01-10T10:00:00Z"
    - type: DataSecretAvailable
      status: "False"
      severity: Warning
      reason: WaitingForClusterInfrastructure
      lastTransitionTime: "2024-01-10T09:58:00Z"
  v1beta2:
    conditions:
      - type: Ready
        status: "True"
        reason: Ready
        message: ""
        lastTransitionTime: "2024-01-10T10:00:00Z"
        observedGeneration: 2
"#;

    const KUBEADM_CONFIG_TEMPLATE: &str = r#"
apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: KubeadmConfigTemplate
metadata:
  name: capi-quickstart-md-0
  namespace: default
spec:
  template:
    metadata:
      labels:
        role: worker
    spec:
      joinConfiguration:
        nodeRegistration:
          kubeletExtraArgs:
            cloud-provider: external
            node-labels: role=worker
      files:
        - path: /etc/ignition-extra.conf
          content: "{{ .controlPlane.version }}"
          contentFormat: Template
      format: ignition
      ignition:
        containerLinuxConfig:
          additionalConfig: |
            storage:
              links: []
          strict: true
"#;

    fn round_trip<T: serde::de::DeserializeOwned + Serialize>(yaml: &str) -> T {
        let input: Value = serde_saphyr::from_str(yaml).unwrap();
        let typed: T = serde_json::from_value(input.clone()).unwrap();
        assert_eq!(serde_json::to_value(&typed).unwrap(), input);
        // The YAML rendering parses back to the same object too.
        let yaml_out = serde_saphyr::to_string(&typed).unwrap();
        let again: Value = serde_saphyr::from_str(&yaml_out).unwrap();
        assert_eq!(again, input);
        typed
    }

    #[test]
    fn kubeadm_config_round_trip() {
        let config: KubeadmConfig = round_trip(KUBEADM_CONFIG);
        let cluster = config.spec.cluster_configuration.as_ref().unwrap();
        assert_eq!(
            cluster.api_server.as_ref().unwrap().extra_args["cloud-provider"],
            "external"
        );
        let local = cluster.etcd.as_ref().unwrap().local.as_ref().unwrap();
        assert_eq!(local.extra_args["quota-backend-bytes"], "8589934592");
        let init = config.spec.init_configuration.as_ref().unwrap();
        assert_eq!(
            init.node_registration.as_ref().unwrap().taints,
            Some(vec![])
        );
        assert_eq!(config.spec.mounts[0][1], "/var/lib/etcddisk");
        assert_eq!(config.spec.use_experimental_retry_join, Some(true));
        let status = config.status.as_ref().unwrap();
        assert!(status.ready);
        assert_eq!(status.conditions[1].severity.as_deref(), Some("Warning"));
        assert_eq!(
            status.v1beta2.as_ref().unwrap().conditions[0].type_,
            "Ready"
        );
    }

    #[test]
    fn kubeadm_config_template_round_trip() {
        let template: KubeadmConfigTemplate = round_trip(KUBEADM_CONFIG_TEMPLATE);
        let spec = &template.spec.template.spec;
        assert_eq!(spec.format, Some(Format::Ignition));
        assert_eq!(
            spec.files[0].content_format,
            Some(FileContentFormat::Template)
        );
    }

    #[test]
    fn ready_is_always_serialized() {
        let status = KubeadmConfigStatus::default();
        assert_eq!(
            serde_json::to_value(&status).unwrap(),
            serde_json::json!({"ready": false})
        );
    }

    fn columns(
        crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    ) -> Vec<(String, String, String)> {
        let version = &crd.spec.versions[0];
        version
            .additional_printer_columns
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| (c.name.clone(), c.type_.clone(), c.json_path.clone()))
            .collect()
    }

    #[test]
    fn kubeadm_config_crd() {
        let crd = KubeadmConfig::crd();
        assert_eq!(crd.spec.group, "bootstrap.cluster.x-k8s.io");
        assert_eq!(crd.spec.names.plural, "kubeadmconfigs");
        assert_eq!(
            crd.spec.names.categories,
            Some(vec!["cluster-api".to_string()])
        );
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1beta1");
        assert_eq!(version.deprecated, Some(true));
        assert!(version.subresources.as_ref().unwrap().status.is_some());
        assert_eq!(
            columns(&crd),
            vec![
                (
                    "Cluster".to_string(),
                    "string".to_string(),
                    ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']".to_string()
                ),
                (
                    "Age".to_string(),
                    "date".to_string(),
                    ".metadata.creationTimestamp".to_string()
                ),
            ]
        );
        // Optional enums become plain nullable string enums (a structural schema).
        let schema = serde_json::to_value(version.schema.as_ref().unwrap()).unwrap();
        let format = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["format"];
        assert_eq!(format["type"], "string");
        assert!(format.get("anyOf").is_none());
        let text = schema.to_string();
        for keyword in [
            "\"$ref\"",
            "\"anyOf\"",
            "\"oneOf\"",
            "\"allOf\"",
            "\"$defs\"",
        ] {
            assert!(!text.contains(keyword), "schema contains {keyword}");
        }
        let status = &schema["openAPIV3Schema"]["properties"]["status"]["properties"];
        assert_eq!(
            status["v1beta2"]["properties"]["conditions"]["x-kubernetes-list-type"],
            "map"
        );
        let spec = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"];
        let taints =
            &spec["initConfiguration"]["properties"]["nodeRegistration"]["properties"]["taints"];
        assert_eq!(taints["type"], "array");
    }

    #[test]
    fn kubeadm_config_template_crd() {
        let crd = KubeadmConfigTemplate::crd();
        assert_eq!(crd.spec.names.plural, "kubeadmconfigtemplates");
        assert_eq!(
            crd.spec.names.categories,
            Some(vec!["cluster-api".to_string()])
        );
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1beta1");
        assert!(version.subresources.is_none());
        assert_eq!(
            columns(&crd),
            vec![(
                "Age".to_string(),
                "date".to_string(),
                ".metadata.creationTimestamp".to_string()
            )]
        );
    }
}
