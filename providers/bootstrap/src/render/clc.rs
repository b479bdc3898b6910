//! `ignition.containerLinuxConfig.additionalConfig`: a Container Linux Config (the YAML Flatcar's `ct`
//! reads) whose files, directories, links, systemd and networkd units, users and groups are merged into
//! the Ignition config the bootstrap provider writes, as Cluster API does.
//!
//! Parsed strictly: a key this module does not know is an error naming it, never silently dropped. The
//! Flatcar service sections (`etcd`, `flannel`, `docker`, `update`, `locksmith`), `ignition` (config
//! merging), and disks, RAID and file systems (`spec.diskSetup` describes those) are refused by name.
//! YAML 1.1 octal modes (`mode: 0644`) read as octal, as `ct` reads them.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{RenderError, invalid};

pub(crate) const FIELD: &str = "spec.ignition.containerLinuxConfig.additionalConfig";

/// The supported part of a Container Linux Config.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    #[serde(default)]
    pub storage: Storage,
    #[serde(default)]
    pub systemd: Systemd,
    #[serde(default)]
    pub networkd: Networkd,
    #[serde(default)]
    pub passwd: Passwd,
    // Known sections this provider refuses with a reason (see `check_refused`).
    #[serde(default)]
    ignition: Option<serde_json::Value>,
    #[serde(default)]
    etcd: Option<serde_json::Value>,
    #[serde(default)]
    flannel: Option<serde_json::Value>,
    #[serde(default)]
    docker: Option<serde_json::Value>,
    #[serde(default)]
    update: Option<serde_json::Value>,
    #[serde(default)]
    locksmith: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Storage {
    #[serde(default)]
    pub files: Vec<FileEntry>,
    #[serde(default)]
    pub directories: Vec<Directory>,
    #[serde(default)]
    pub links: Vec<Link>,
    #[serde(default)]
    disks: Option<serde_json::Value>,
    #[serde(default)]
    raid: Option<serde_json::Value>,
    #[serde(default)]
    filesystems: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileEntry {
    #[serde(default)]
    pub filesystem: Option<String>,
    pub path: String,
    #[serde(default)]
    pub contents: Contents,
    #[serde(default)]
    pub mode: Option<u32>,
    #[serde(default)]
    pub user: Option<Owner>,
    #[serde(default)]
    pub group: Option<Owner>,
    #[serde(default)]
    pub overwrite: Option<bool>,
    #[serde(default)]
    pub append: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Contents {
    #[serde(default)]
    pub inline: Option<String>,
    #[serde(default)]
    pub remote: Option<Remote>,
    #[serde(default)]
    local: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Remote {
    pub url: String,
    #[serde(default)]
    pub compression: Option<String>,
    #[serde(default)]
    pub verification: Option<Verification>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Verification {
    pub hash: Hash,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Hash {
    pub function: String,
    pub sum: String,
}

/// A user or group by id or name.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Owner {
    #[serde(default)]
    pub id: Option<i64>,
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Directory {
    #[serde(default)]
    pub filesystem: Option<String>,
    pub path: String,
    #[serde(default)]
    pub mode: Option<u32>,
    #[serde(default)]
    pub user: Option<Owner>,
    #[serde(default)]
    pub group: Option<Owner>,
    #[serde(default)]
    pub overwrite: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Link {
    #[serde(default)]
    pub filesystem: Option<String>,
    pub path: String,
    pub target: String,
    #[serde(default)]
    pub hard: Option<bool>,
    #[serde(default)]
    pub user: Option<Owner>,
    #[serde(default)]
    pub group: Option<Owner>,
    #[serde(default)]
    pub overwrite: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Systemd {
    #[serde(default)]
    pub units: Vec<SystemdUnit>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SystemdUnit {
    pub name: String,
    #[serde(default)]
    pub enabled: Option<bool>,
    /// `ct`'s older spelling of `enabled`.
    #[serde(default)]
    pub enable: Option<bool>,
    #[serde(default)]
    pub mask: Option<bool>,
    #[serde(default)]
    pub contents: Option<String>,
    #[serde(default)]
    pub dropins: Vec<Dropin>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Dropin {
    pub name: String,
    #[serde(default)]
    pub contents: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Networkd {
    #[serde(default)]
    pub units: Vec<NetworkdUnit>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NetworkdUnit {
    pub name: String,
    #[serde(default)]
    pub contents: Option<String>,
    #[serde(default)]
    pub dropins: Vec<Dropin>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Passwd {
    #[serde(default)]
    pub users: Vec<PasswdUser>,
    #[serde(default)]
    pub groups: Vec<PasswdGroup>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PasswdUser {
    pub name: String,
    #[serde(default)]
    pub password_hash: Option<String>,
    #[serde(default)]
    pub ssh_authorized_keys: Vec<String>,
    #[serde(default)]
    pub uid: Option<i64>,
    #[serde(default)]
    pub gecos: Option<String>,
    #[serde(default)]
    pub home_dir: Option<String>,
    #[serde(default)]
    pub no_create_home: Option<bool>,
    #[serde(default)]
    pub primary_group: Option<String>,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub no_user_group: Option<bool>,
    #[serde(default)]
    pub no_log_init: Option<bool>,
    #[serde(default)]
    pub shell: Option<String>,
    #[serde(default)]
    pub system: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PasswdGroup {
    pub name: String,
    #[serde(default)]
    pub gid: Option<i64>,
    #[serde(default)]
    pub password_hash: Option<String>,
    #[serde(default)]
    pub system: Option<bool>,
}

/// Parses and checks `additionalConfig`; errors name the key path inside it (and the line for YAML
/// errors).
pub(crate) fn parse(text: &str) -> Result<Config, RenderError> {
    // `ct` reads YAML 1.1, where `0644` is octal.
    let options = serde_saphyr::options! { legacy_octal_numbers: true };
    let value: serde_json::Value = serde_saphyr::from_str_with_options(text, options)
        .map_err(|e| invalid(FIELD, format!("is not valid YAML: {e}")))?;
    if value.is_null() {
        return Ok(Config::default());
    }
    let config: Config = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        invalid(
            FIELD,
            format!(
                "{}: {} (a Container Linux Config)",
                if path == "." { "(top level)" } else { &path },
                e.inner()
            ),
        )
    })?;
    check(&config)?;
    Ok(config)
}

fn check(config: &Config) -> Result<(), RenderError> {
    let refused = [
        (
            config.ignition.is_some(),
            "ignition",
            "merging other Ignition configs is not supported",
        ),
        (
            config.etcd.is_some(),
            "etcd",
            "is not supported; run etcd through kubeadm",
        ),
        (
            config.flannel.is_some(),
            "flannel",
            "is not supported; install a CNI after the cluster is up",
        ),
        (
            config.docker.is_some(),
            "docker",
            "is not supported; configure the runtime with a systemd.units drop-in",
        ),
        (
            config.update.is_some(),
            "update",
            "is not supported; write /etc/flatcar/update.conf with storage.files",
        ),
        (
            config.locksmith.is_some(),
            "locksmith",
            "is not supported; write /etc/flatcar/update.conf with storage.files",
        ),
        (
            config.storage.disks.is_some(),
            "storage.disks",
            "is not supported here; use spec.diskSetup.partitions",
        ),
        (
            config.storage.raid.is_some(),
            "storage.raid",
            "is not supported",
        ),
        (
            config.storage.filesystems.is_some(),
            "storage.filesystems",
            "is not supported here; use spec.diskSetup.filesystems",
        ),
    ];
    if let Some((_, key, rule)) = refused.into_iter().find(|(present, _, _)| *present) {
        return Err(invalid(FIELD, format!("{key}: {rule}")));
    }
    let root_only = |key: String, filesystem: &Option<String>| match filesystem.as_deref() {
        None | Some("root") => Ok(()),
        Some(other) => Err(invalid(
            FIELD,
            format!(
                "{key}.filesystem: {other:?} is not supported; only \"root\" (paths are absolute)"
            ),
        )),
    };
    let absolute = |key: String, path: &str| {
        if path.starts_with('/') {
            Ok(())
        } else {
            Err(invalid(
                FIELD,
                format!("{key}.path: {path:?} must be an absolute path"),
            ))
        }
    };
    for (i, file) in config.storage.files.iter().enumerate() {
        let key = format!("storage.files[{i}]");
        root_only(key.clone(), &file.filesystem)?;
        absolute(key.clone(), &file.path)?;
        check_mode(&key, file.mode)?;
        let contents = &file.contents;
        if contents.local.is_some() {
            return Err(invalid(
                FIELD,
                format!(
                    "{key}.contents.local: is not supported (it needs ct's --files-dir); use inline"
                ),
            ));
        }
        if contents.inline.is_some() && contents.remote.is_some() {
            return Err(invalid(
                FIELD,
                format!("{key}.contents: inline and remote are mutually exclusive"),
            ));
        }
        if let Some(remote) = &contents.remote {
            if remote.url.is_empty() {
                return Err(invalid(
                    FIELD,
                    format!("{key}.contents.remote.url: must be set"),
                ));
            }
            if let Some(compression) = remote.compression.as_deref()
                && !compression.is_empty()
                && compression != "gzip"
            {
                return Err(invalid(
                    FIELD,
                    format!(
                        "{key}.contents.remote.compression: {compression:?} is not supported; use gzip"
                    ),
                ));
            }
            if let Some(verification) = &remote.verification
                && !matches!(verification.hash.function.as_str(), "sha512" | "sha256")
            {
                return Err(invalid(
                    FIELD,
                    format!(
                        "{key}.contents.remote.verification.hash.function: {:?} is not supported; use sha512 or sha256",
                        verification.hash.function
                    ),
                ));
            }
        }
    }
    for (i, directory) in config.storage.directories.iter().enumerate() {
        let key = format!("storage.directories[{i}]");
        root_only(key.clone(), &directory.filesystem)?;
        absolute(key.clone(), &directory.path)?;
        check_mode(&key, directory.mode)?;
    }
    for (i, link) in config.storage.links.iter().enumerate() {
        let key = format!("storage.links[{i}]");
        root_only(key.clone(), &link.filesystem)?;
        absolute(key.clone(), &link.path)?;
        if link.target.is_empty() {
            return Err(invalid(FIELD, format!("{key}.target: must be set")));
        }
    }
    for (i, unit) in config.systemd.units.iter().enumerate() {
        check_unit(&format!("systemd.units[{i}]"), &unit.name, &unit.dropins)?;
    }
    for (i, unit) in config.networkd.units.iter().enumerate() {
        check_unit(&format!("networkd.units[{i}]"), &unit.name, &unit.dropins)?;
    }
    for (i, user) in config.passwd.users.iter().enumerate() {
        if user.name.is_empty() {
            return Err(invalid(
                FIELD,
                format!("passwd.users[{i}].name: must be set"),
            ));
        }
    }
    for (i, group) in config.passwd.groups.iter().enumerate() {
        if group.name.is_empty() {
            return Err(invalid(
                FIELD,
                format!("passwd.groups[{i}].name: must be set"),
            ));
        }
    }
    Ok(())
}

fn check_mode(key: &str, mode: Option<u32>) -> Result<(), RenderError> {
    match mode {
        Some(mode) if mode > 0o7777 => Err(invalid(
            FIELD,
            format!("{key}.mode: {mode} is not a file mode (write it in octal, e.g. 0644)"),
        )),
        _ => Ok(()),
    }
}

fn check_unit(key: &str, name: &str, dropins: &[Dropin]) -> Result<(), RenderError> {
    if name.is_empty() || name.contains('/') {
        return Err(invalid(
            FIELD,
            format!("{key}.name: {name:?} must be a unit file name such as kubelet.service"),
        ));
    }
    let mut seen = BTreeMap::new();
    for (j, dropin) in dropins.iter().enumerate() {
        if !dropin.name.ends_with(".conf") || dropin.name.contains('/') {
            return Err(invalid(
                FIELD,
                format!(
                    "{key}.dropins[{j}].name: {:?} must be a file name ending in .conf",
                    dropin.name
                ),
            ));
        }
        if let Some(first) = seen.insert(dropin.name.as_str(), j) {
            return Err(invalid(
                FIELD,
                format!("{key}.dropins[{j}].name: duplicates {key}.dropins[{first}].name"),
            ));
        }
    }
    Ok(())
}
