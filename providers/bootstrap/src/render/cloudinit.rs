//! cloud-config user data for cloud-init, with the layout, paths and commands Cluster API's kubeadm
//! bootstrap provider uses, so images and tooling built for it keep working. Every document must pass
//! `cloud-init schema` (22.4 and later).

use serde::{Serialize, Serializer};

use kubeadm_api::bootstrap::v1beta2::{
    DiskSetup, Encoding, File, Ntp, Partition, PartitionTableType, User,
};

use super::{Bootstrap, Role};

pub const INIT_CONFIG_PATH: &str = "/run/kubeadm/kubeadm.yaml";
pub const JOIN_CONFIG_PATH: &str = "/run/kubeadm/kubeadm-join-config.yaml";
pub const PLACEHOLDER_PATH: &str = "/run/cluster-api/placeholder";
/// Infrastructure providers wait for this file to tell that the node bootstrapped.
pub const SENTINEL_COMMAND: &str = "echo success > /run/cluster-api/bootstrap-success.complete";

/// Jinja lets users reference instance metadata such as `{{ ds.meta_data.local_hostname }}`.
const HEADER: &str = "## template: jinja\n#cloud-config\n";
// `mkdir -p` does not work on Windows nodes; writing a file creates the directory everywhere.
const PLACEHOLDER_CONTENT: &str = "This placeholder file is used to create the /run/cluster-api sub directory in a way that is compatible with both Linux and Windows (mkdir -p /run/cluster-api does not work with Windows)";

/// The cloud-config document; fields in the order cloud-init users know from Cluster API.
#[derive(Serialize)]
struct CloudConfig<'a> {
    write_files: Vec<WriteFile<'a>>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    bootcmd: &'a [String],
    runcmd: Vec<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ntp: Option<NtpConfig<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    users: Vec<UserConfig<'a>>,
    #[serde(skip_serializing_if = "DiskSetupMap::is_empty")]
    disk_setup: DiskSetupMap<'a>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    fs_setup: Vec<FsSetup<'a>>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    mounts: &'a [Vec<String>],
}

#[derive(Serialize)]
struct WriteFile<'a> {
    path: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    encoding: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<&'a str>,
    /// A string: cloud-init's schema rejects integer modes.
    #[serde(skip_serializing_if = "Option::is_none")]
    permissions: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    append: Option<bool>,
    content: &'a str,
    /// Written by cloud-init's final stage (`write_files_deferred`), after users and mounts.
    #[serde(skip_serializing_if = "Option::is_none")]
    defer: Option<bool>,
}

#[derive(Serialize)]
struct NtpConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    enabled: Option<bool>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    servers: &'a [String],
}

#[derive(Serialize)]
struct UserConfig<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    passwd: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gecos: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    groups: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    homedir: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lock_passwd: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shell: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    primary_group: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sudo: Option<&'a str>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    ssh_authorized_keys: &'a [String],
}

/// `disk_setup` is a map keyed by device; keep the spec's device order.
struct DiskSetupMap<'a>(Vec<(&'a str, DiskConfig)>);

impl DiskSetupMap<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for DiskSetupMap<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(device, disk)| (device, disk)))
    }
}

#[derive(Serialize)]
struct DiskConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    table_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    layout: Option<Layout>,
    #[serde(skip_serializing_if = "Option::is_none")]
    overwrite: Option<bool>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Layout {
    /// true: one partition over the whole device.
    Whole(bool),
    Partitions(Vec<LayoutEntry>),
}

#[derive(Serialize)]
#[serde(untagged)]
enum LayoutEntry {
    /// Percentage of the disk, default partition type.
    Size(i32),
    /// `[percentage, type]`.
    Typed(i32, PartitionTypeCode),
}

#[derive(Serialize)]
#[serde(untagged)]
enum PartitionTypeCode {
    /// cloud-init's schema wants numbers; MBR codes such as 83 read the same either way.
    Number(u32),
    Text(String),
}

#[derive(Serialize)]
struct FsSetup<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<&'a str>,
    filesystem: &'a str,
    device: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    overwrite: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    replace_fs: Option<&'a str>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    extra_opts: &'a [String],
}

/// Renders the `## template: jinja` cloud-config document.
pub(crate) fn render(bootstrap: &Bootstrap) -> Vec<u8> {
    let spec = bootstrap.spec;
    let config_path = match bootstrap.role {
        Role::Init => INIT_CONFIG_PATH,
        Role::ControlPlaneJoin | Role::WorkerJoin => JOIN_CONFIG_PATH,
    };
    let kubeadm = format!(
        "{} && {SENTINEL_COMMAND}",
        bootstrap.kubeadm_command(config_path)
    );

    let mut write_files: Vec<WriteFile> = bootstrap.files.iter().map(write_file).collect();
    write_files.push(generated_file(config_path, &bootstrap.kubeadm_config));
    write_files.push(generated_file(PLACEHOLDER_PATH, PLACEHOLDER_CONTENT));

    let runcmd = (spec.pre_kubeadm_commands.iter().map(String::as_str))
        .chain([kubeadm.as_str()])
        .chain(spec.post_kubeadm_commands.iter().map(String::as_str))
        .collect();

    let document = CloudConfig {
        write_files,
        bootcmd: &spec.boot_commands,
        runcmd,
        ntp: ntp(&spec.ntp),
        users: bootstrap.users.iter().map(user).collect(),
        disk_setup: DiskSetupMap(spec.disk_setup.partitions.iter().map(disk).collect()),
        fs_setup: fs_setup(&spec.disk_setup),
        mounts: &spec.mounts,
    };
    let options = serde_saphyr::ser_options! {
        // Long commands stay on one line instead of being folded.
        folded_wrap_chars: usize::MAX,
        compact_list_indent: false,
    };
    let yaml = serde_saphyr::to_string_with_options(&document, options)
        .expect("plain structs of strings, booleans and numbers always serialize");
    format!("{HEADER}{yaml}").into_bytes()
}

fn write_file(file: &File) -> WriteFile<'_> {
    WriteFile {
        path: &file.path,
        encoding: file.encoding.map(encoding),
        owner: file.owner.as_deref(),
        permissions: file.permissions.as_deref(),
        append: file.append.filter(|append| *append),
        content: file.content.as_deref().unwrap_or_default(),
        defer: file.defer.filter(|defer| *defer),
    }
}

fn generated_file<'a>(path: &'a str, content: &'a str) -> WriteFile<'a> {
    WriteFile {
        path,
        encoding: None,
        owner: Some("root:root"),
        permissions: Some("0640"),
        append: None,
        content,
        defer: None,
    }
}

fn encoding(encoding: Encoding) -> &'static str {
    match encoding {
        Encoding::Base64 => "base64",
        Encoding::Gzip => "gzip",
        Encoding::GzipBase64 => "gzip+base64",
    }
}

fn ntp(ntp: &Ntp) -> Option<NtpConfig<'_>> {
    ntp.is_defined().then_some(NtpConfig {
        enabled: ntp.enabled,
        servers: &ntp.servers,
    })
}

// `inactive` is left out: cloud-init wants a number of days there and ignores a boolean.
fn user(user: &User) -> UserConfig<'_> {
    UserConfig {
        name: &user.name,
        passwd: user.passwd.as_deref(),
        gecos: user.gecos.as_deref(),
        groups: user.groups.as_deref(),
        homedir: user.home_dir.as_deref(),
        lock_passwd: user.lock_password,
        shell: user.shell.as_deref(),
        primary_group: user.primary_group.as_deref(),
        sudo: user.sudo.as_deref(),
        ssh_authorized_keys: &user.ssh_authorized_keys,
    }
}

fn disk(partition: &Partition) -> (&str, DiskConfig) {
    let layout = if partition.disk_layout.is_empty() {
        partition.layout.map(Layout::Whole)
    } else {
        let entries = partition
            .disk_layout
            .iter()
            .map(|p| match &p.partition_type {
                Some(kind) => LayoutEntry::Typed(p.percentage, partition_type_code(kind)),
                None => LayoutEntry::Size(p.percentage),
            });
        Some(Layout::Partitions(entries.collect()))
    };
    let config = DiskConfig {
        table_type: partition.table_type.map(|t| match t {
            PartitionTableType::Mbr => "mbr",
            PartitionTableType::Gpt => "gpt",
        }),
        layout,
        overwrite: partition.overwrite,
    };
    (&partition.device, config)
}

/// Maps the API's partition type names to the codes cloud-init passes to sfdisk; other values pass through.
fn partition_type_code(kind: &str) -> PartitionTypeCode {
    let code = match kind {
        "Linux" => "83",
        "LinuxSwap" => "82",
        "LinuxRAID" => "fd",
        "LVM" => "8e",
        "Fat32" => "0c",
        "NTFS" => "07",
        "LinuxExtended" => "85",
        other => other,
    };
    match code.parse() {
        Ok(number) if code.bytes().all(|b| b.is_ascii_digit()) => PartitionTypeCode::Number(number),
        _ => PartitionTypeCode::Text(code.to_owned()),
    }
}

fn fs_setup(disk_setup: &DiskSetup) -> Vec<FsSetup<'_>> {
    disk_setup
        .filesystems
        .iter()
        .map(|fs| FsSetup {
            label: fs.label.as_deref(),
            filesystem: &fs.filesystem,
            device: &fs.device,
            partition: fs.partition.as_deref(),
            overwrite: fs.overwrite,
            replace_fs: fs.replace_fs.as_deref(),
            extra_opts: &fs.extra_opts,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_types_become_sfdisk_codes() {
        assert!(matches!(
            partition_type_code("Linux"),
            PartitionTypeCode::Number(83)
        ));
        assert!(matches!(
            partition_type_code("NTFS"),
            PartitionTypeCode::Number(7)
        ));
        assert!(matches!(partition_type_code("LVM"), PartitionTypeCode::Text(t) if t == "8e"));
        let guid = "0FC63DAF-8483-4772-8E79-3D69D8477DE4";
        assert!(matches!(partition_type_code(guid), PartitionTypeCode::Text(t) if t == guid));
    }
}
