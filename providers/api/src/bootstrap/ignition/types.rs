//! Ignition spec 2.3.0, the fields and emptiness rules of its JSON as Go writes it: objects are
//! always written (`"config":{}`), empty lists, strings and `false` are left out, optional numbers
//! and flags only when set. Output of ours and of Cluster API's provider compare equal as JSON.

use serde::Serialize;

fn is_false(value: &bool) -> bool {
    !value
}

fn is_zero(value: &i64) -> bool {
    *value == 0
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Config {
    pub ignition: Ignition,
    pub networkd: Networkd,
    pub passwd: Passwd,
    pub storage: Storage,
    pub systemd: Systemd,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Ignition {
    pub config: IgnitionConfig,
    pub security: Security,
    pub timeouts: Timeouts,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub version: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct IgnitionConfig {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub append: Vec<ConfigReference>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replace: Option<ConfigReference>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ConfigReference {
    pub source: String,
    pub verification: Verification,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Verification {
    /// `<function>-<hex digest>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Security {
    pub tls: Tls,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Tls {
    #[serde(
        rename = "certificateAuthorities",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub certificate_authorities: Vec<ConfigReference>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeouts {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_response_headers: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_total: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Networkd {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<NetworkdUnit>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NetworkdUnit {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub contents: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropins: Vec<Dropin>,
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Passwd {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<PasswdGroup>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<PasswdUser>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PasswdGroup {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gid: Option<i64>,
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub password_hash: String,
    #[serde(skip_serializing_if = "is_false")]
    pub system: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PasswdUser {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub create: Option<UserCreate>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub gecos: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub home_dir: String,
    pub name: String,
    #[serde(skip_serializing_if = "is_false")]
    pub no_create_home: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub no_log_init: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub no_user_group: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_hash: Option<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub primary_group: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ssh_authorized_keys: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub shell: String,
    #[serde(skip_serializing_if = "is_false")]
    pub system: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<i64>,
}

/// The deprecated `create` block of a user (`useradd` options).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UserCreate {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub gecos: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub home_dir: String,
    #[serde(skip_serializing_if = "is_false")]
    pub no_create_home: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub no_log_init: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub no_user_group: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub primary_group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub shell: String,
    #[serde(skip_serializing_if = "is_false")]
    pub system: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Storage {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub directories: Vec<Directory>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<Disk>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<File>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub filesystems: Vec<Filesystem>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<Link>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub raid: Vec<Raid>,
}

/// The owner of a node, by id or name.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NodeOwner {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct File {
    pub filesystem: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<NodeOwner>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<NodeOwner>,
    #[serde(skip_serializing_if = "is_false")]
    pub append: bool,
    pub contents: FileContents,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FileContents {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub compression: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub source: String,
    pub verification: Verification,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Directory {
    pub filesystem: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<NodeOwner>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<NodeOwner>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Link {
    pub filesystem: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<NodeOwner>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<NodeOwner>,
    #[serde(skip_serializing_if = "is_false")]
    pub hard: bool,
    pub target: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Disk {
    pub device: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<Partition>,
    #[serde(skip_serializing_if = "is_false")]
    pub wipe_table: bool,
}

/// A partition; sizes in MiB (the sector-based `size`/`start` of older specs are never written).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Partition {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub guid: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(skip_serializing_if = "is_zero")]
    pub number: i64,
    #[serde(rename = "sizeMiB", skip_serializing_if = "Option::is_none")]
    pub size_mib: Option<i64>,
    #[serde(rename = "startMiB", skip_serializing_if = "Option::is_none")]
    pub start_mib: Option<i64>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub type_guid: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Filesystem {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mount: Option<Mount>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub create: Option<Create>,
    pub device: String,
    pub format: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(skip_serializing_if = "is_false")]
    pub wipe_filesystem: bool,
}

/// The deprecated `create` block of a mount.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Create {
    #[serde(skip_serializing_if = "is_false")]
    pub force: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Raid {
    pub devices: Vec<String>,
    pub level: String,
    pub name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    #[serde(skip_serializing_if = "is_zero")]
    pub spares: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Systemd {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<Unit>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Unit {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub contents: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropins: Vec<Dropin>,
    #[serde(skip_serializing_if = "is_false")]
    pub enable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(skip_serializing_if = "is_false")]
    pub mask: bool,
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Dropin {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub contents: String,
    pub name: String,
}

impl Config {
    /// An empty config of the spec version written.
    pub fn new() -> Self {
        let mut config = Self::default();
        config.ignition.version = super::SPEC_VERSION.to_owned();
        config
    }

    /// Adds `other` after this config as Ignition 2.3's `Append` does: lists are concatenated
    /// (nothing is merged by name or path), `ignition.config` and the timeouts `other` sets are
    /// taken from it, and the version stays.
    pub fn append(&mut self, other: Config) {
        let Config {
            ignition,
            networkd,
            passwd,
            storage,
            systemd,
        } = other;
        self.ignition.config = ignition.config;
        self.ignition
            .security
            .tls
            .certificate_authorities
            .extend(ignition.security.tls.certificate_authorities);
        let timeouts = &mut self.ignition.timeouts;
        timeouts.http_response_headers = ignition
            .timeouts
            .http_response_headers
            .or(timeouts.http_response_headers);
        timeouts.http_total = ignition.timeouts.http_total.or(timeouts.http_total);
        self.networkd.units.extend(networkd.units);
        self.passwd.groups.extend(passwd.groups);
        self.passwd.users.extend(passwd.users);
        let s = &mut self.storage;
        s.directories.extend(storage.directories);
        s.disks.extend(storage.disks);
        s.files.extend(storage.files);
        s.filesystems.extend(storage.filesystems);
        s.links.extend(storage.links);
        s.raid.extend(storage.raid);
        self.systemd.units.extend(systemd.units);
    }
}
