//! Ignition config (spec 3.3.0, JSON) for Flatcar and Fedora CoreOS. Ignition runs once, before the
//! system starts, so kubeadm runs later from the `kubeadm.service` unit: it executes `/etc/kubeadm.sh`
//! (pre commands, kubeadm, sentinel, post commands) while `/etc/kubeadm.yml` exists, then moves that
//! file away so the unit never runs again. Spec 3.3.0 is the newest version every supported Flatcar
//! and Fedora CoreOS release reads, and needs nothing newer.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Serialize;

use kubeadm_api::bootstrap::v1beta2::{Encoding, File, KubeadmConfigSpec, User};

use super::clc::{self, FIELD as ADDITIONAL_CONFIG};
use super::{Bootstrap, RenderError, invalid, parse_mode, root_file};

pub const KUBEADM_CONFIG_PATH: &str = "/etc/kubeadm.yml";
pub const KUBEADM_SCRIPT_PATH: &str = "/etc/kubeadm.sh";
const SPEC_VERSION: &str = "3.3.0";

const KUBEADM_UNIT: &str = "[Unit]
Description=kubeadm
# Run only once. After successful run, this file is moved to /tmp/.
ConditionPathExists=/etc/kubeadm.yml
After=network.target
[Service]
# To not restart the unit when it exits, as it is expected.
Type=oneshot
ExecStart=/bin/bash /etc/kubeadm.sh
[Install]
WantedBy=multi-user.target
";

const SENTINEL: &str =
    "mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete";

#[derive(Serialize)]
struct Config {
    ignition: IgnitionVersion,
    #[serde(skip_serializing_if = "Passwd::is_empty")]
    passwd: Passwd,
    storage: Storage,
    systemd: Systemd,
}

#[derive(Serialize)]
struct IgnitionVersion {
    version: &'static str,
}

#[derive(Serialize)]
struct Passwd {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    users: Vec<PasswdUser>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    groups: Vec<PasswdGroup>,
}

impl Passwd {
    fn is_empty(&self) -> bool {
        self.users.is_empty() && self.groups.is_empty()
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PasswdGroup {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    gid: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    password_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<bool>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PasswdUser {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    gecos: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    groups: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    home_dir: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shell: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    password_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    primary_group: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ssh_authorized_keys: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uid: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    no_create_home: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    no_user_group: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    no_log_init: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<bool>,
}

#[derive(Serialize)]
struct Storage {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    disks: Vec<Disk>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    filesystems: Vec<Filesystem>,
    files: Vec<FileNode>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    directories: Vec<DirectoryNode>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    links: Vec<LinkNode>,
}

#[derive(Serialize)]
struct DirectoryNode {
    path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    overwrite: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<Name>,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<Name>,
}

#[derive(Serialize)]
struct LinkNode {
    path: String,
    target: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    hard: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    overwrite: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<Name>,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<Name>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Disk {
    device: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    wipe_table: Option<bool>,
    /// One empty partition: number and size chosen by Ignition, i.e. the whole disk.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    partitions: Vec<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Filesystem {
    device: String,
    format: String,
    wipe_filesystem: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    options: Vec<String>,
}

#[derive(Serialize)]
struct FileNode {
    path: String,
    /// Ignition 3 refuses to replace an existing file unless told to.
    #[serde(skip_serializing_if = "Option::is_none")]
    overwrite: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<Name>,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<Name>,
    #[serde(skip_serializing_if = "Option::is_none")]
    contents: Option<Resource>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    append: Vec<Resource>,
}

/// A user or group, by id or name.
#[derive(Serialize)]
struct Name {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
}

#[derive(Serialize)]
struct Resource {
    source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    compression: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    verification: Option<Verification>,
}

#[derive(Serialize)]
struct Verification {
    /// `<function>-<hex digest>`.
    hash: String,
}

#[derive(Serialize)]
struct Systemd {
    units: Vec<Unit>,
}

#[derive(Serialize)]
struct Unit {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mask: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    contents: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    dropins: Vec<Dropin>,
}

#[derive(Serialize)]
struct Dropin {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    contents: Option<String>,
}

/// Renders the Ignition config as compact JSON.
pub(crate) fn render(bootstrap: &Bootstrap) -> Result<Vec<u8>, RenderError> {
    let spec = bootstrap.spec;
    check_supported(spec)?;
    // Parsed before anything else, so a bad one fails the render whatever else it holds.
    let additional = spec
        .ignition
        .container_linux_config
        .additional_config
        .as_deref()
        .filter(|text| !text.trim().is_empty())
        .map(clc::parse)
        .transpose()?;
    let mut config = Config {
        ignition: IgnitionVersion {
            version: SPEC_VERSION,
        },
        passwd: Passwd {
            users: bootstrap.users.iter().map(passwd_user).collect(),
            groups: Vec::new(),
        },
        storage: Storage {
            disks: disks(spec),
            filesystems: filesystems(spec),
            files: file_nodes(&all_files(bootstrap)?),
            directories: Vec::new(),
            links: Vec::new(),
        },
        systemd: Systemd { units: units(spec) },
    };
    if let Some(additional) = additional {
        merge(&mut config, additional)?;
    }
    Ok(serde_json::to_vec(&config).expect("plain structs always serialize"))
}

/// Adds the additional Container Linux Config. Ignition 3 refuses two entries for one path or unit, so:
/// a file may only append to a path written here (`append: true`); a unit of the same name gets its
/// drop-ins added and its `enabled`, `mask` and `contents` replaced where set; everything else must be new.
fn merge(config: &mut Config, additional: clc::Config) -> Result<(), RenderError> {
    let taken = |key: String, path: &str| {
        invalid(
            ADDITIONAL_CONFIG,
            format!(
                "{key}.path: {path:?} is already written by the bootstrap provider or spec.files"
            ),
        )
    };
    for (i, file) in additional.storage.files.into_iter().enumerate() {
        let key = format!("storage.files[{i}]");
        let resource = clc_resource(&file.contents);
        match config
            .storage
            .files
            .iter_mut()
            .find(|n| n.path == file.path)
        {
            Some(node) if file.append == Some(true) => node.append.push(resource),
            Some(_) => return Err(taken(key, &file.path)),
            None => {
                let append = file.append == Some(true);
                config.storage.files.push(FileNode {
                    path: file.path,
                    // Ignition 3 keeps an existing file unless told otherwise; Container Linux Configs replaced it.
                    overwrite: if append {
                        file.overwrite
                    } else {
                        Some(file.overwrite.unwrap_or(true))
                    },
                    mode: file.mode,
                    user: file.user.map(clc_name),
                    group: file.group.map(clc_name),
                    contents: (!append).then_some(resource),
                    append: Vec::new(),
                });
                if append {
                    let node = config.storage.files.last_mut().expect("just pushed");
                    node.append.push(clc_resource(&file.contents));
                }
            }
        }
    }
    for (i, directory) in additional.storage.directories.into_iter().enumerate() {
        if config
            .storage
            .files
            .iter()
            .any(|f| f.path == directory.path)
        {
            return Err(taken(format!("storage.directories[{i}]"), &directory.path));
        }
        config.storage.directories.push(DirectoryNode {
            path: directory.path,
            overwrite: directory.overwrite,
            mode: directory.mode,
            user: directory.user.map(clc_name),
            group: directory.group.map(clc_name),
        });
    }
    for (i, link) in additional.storage.links.into_iter().enumerate() {
        if config.storage.files.iter().any(|f| f.path == link.path) {
            return Err(taken(format!("storage.links[{i}]"), &link.path));
        }
        config.storage.links.push(LinkNode {
            path: link.path,
            target: link.target,
            hard: link.hard,
            overwrite: link.overwrite,
            user: link.user.map(clc_name),
            group: link.group.map(clc_name),
        });
    }
    for (i, unit) in additional.systemd.units.into_iter().enumerate() {
        let key = format!("systemd.units[{i}]");
        let dropins = unit.dropins.into_iter().map(|d| Dropin {
            name: d.name,
            contents: d.contents,
        });
        let enabled = unit.enabled.or(unit.enable);
        match config
            .systemd
            .units
            .iter_mut()
            .find(|u| u.name == unit.name)
        {
            Some(existing) => {
                for dropin in dropins {
                    if existing.dropins.iter().any(|d| d.name == dropin.name) {
                        return Err(invalid(
                            ADDITIONAL_CONFIG,
                            format!(
                                "{key}.dropins: {} already has a drop-in {:?}",
                                unit.name, dropin.name
                            ),
                        ));
                    }
                    existing.dropins.push(dropin);
                }
                existing.enabled = enabled.or(existing.enabled);
                existing.mask = unit.mask.or(existing.mask);
                existing.contents = unit.contents.or(existing.contents.take());
            }
            None => config.systemd.units.push(Unit {
                name: unit.name,
                enabled,
                mask: unit.mask,
                contents: unit.contents,
                dropins: dropins.collect(),
            }),
        }
    }
    // systemd-networkd reads its units from /etc/systemd/network.
    for (i, unit) in additional.networkd.units.into_iter().enumerate() {
        let dir = "/etc/systemd/network";
        let mut files = Vec::new();
        if let Some(contents) = &unit.contents {
            files.push((format!("{dir}/{}", unit.name), contents.clone()));
        }
        for dropin in &unit.dropins {
            let contents = dropin.contents.clone().unwrap_or_default();
            files.push((format!("{dir}/{}.d/{}", unit.name, dropin.name), contents));
        }
        for (path, contents) in files {
            if config.storage.files.iter().any(|f| f.path == path) {
                return Err(taken(format!("networkd.units[{i}]"), &path));
            }
            config.storage.files.push(FileNode {
                path,
                overwrite: Some(true),
                mode: Some(0o644),
                user: None,
                group: None,
                contents: Some(Resource {
                    source: format!("data:,{}", percent_encode(&contents)),
                    compression: None,
                    verification: None,
                }),
                append: Vec::new(),
            });
        }
    }
    for (i, user) in additional.passwd.users.into_iter().enumerate() {
        if config.passwd.users.iter().any(|u| u.name == user.name) {
            return Err(invalid(
                ADDITIONAL_CONFIG,
                format!(
                    "passwd.users[{i}].name: {:?} is already a user of spec.users",
                    user.name
                ),
            ));
        }
        config.passwd.users.push(PasswdUser {
            name: user.name,
            gecos: user.gecos,
            groups: user.groups,
            home_dir: user.home_dir,
            shell: user.shell,
            password_hash: user.password_hash,
            primary_group: user.primary_group,
            ssh_authorized_keys: user.ssh_authorized_keys,
            uid: user.uid,
            no_create_home: user.no_create_home,
            no_user_group: user.no_user_group,
            no_log_init: user.no_log_init,
            system: user.system,
        });
    }
    config
        .passwd
        .groups
        .extend(additional.passwd.groups.into_iter().map(|g| PasswdGroup {
            name: g.name,
            gid: g.gid,
            password_hash: g.password_hash,
            system: g.system,
        }));
    Ok(())
}

fn clc_name(owner: clc::Owner) -> Name {
    Name {
        id: owner.id,
        name: owner.name.filter(|n| !n.is_empty()),
    }
}

/// Inline text as a data URL; a remote source as its URL, with its compression and hash.
fn clc_resource(contents: &clc::Contents) -> Resource {
    match &contents.remote {
        Some(remote) => Resource {
            source: remote.url.clone(),
            compression: remote
                .compression
                .as_deref()
                .filter(|c| *c == "gzip")
                .map(|_| "gzip"),
            verification: remote.verification.as_ref().map(|v| Verification {
                hash: format!("{}-{}", v.hash.function, v.hash.sum),
            }),
        },
        None => Resource {
            source: format!(
                "data:,{}",
                percent_encode(contents.inline.as_deref().unwrap_or_default())
            ),
            compression: None,
            verification: None,
        },
    }
}

fn check_supported(spec: &KubeadmConfigSpec) -> Result<(), RenderError> {
    for (i, partition) in spec.disk_setup.partitions.iter().enumerate() {
        if !partition.disk_layout.is_empty() {
            // Ignition sizes partitions in MiB; percentages have no equivalent.
            return Err(invalid(
                format!("spec.diskSetup.partitions[{i}].diskLayout"),
                "is not supported with format ignition; use layout: true",
            ));
        }
    }
    Ok(())
}

/// Sudo rules and sshd settings for users, then the bootstrap's files, the kubeadm script, its config
/// and the NTP configuration.
fn all_files(bootstrap: &Bootstrap) -> Result<Vec<File>, RenderError> {
    let spec = bootstrap.spec;
    let mut generated = Vec::new();
    for user in &bootstrap.users {
        if let Some(sudo) = &user.sudo {
            let rule = format!("{} {sudo}\n", user.name);
            generated.push(mode_file(
                format!("/etc/sudoers.d/{}", user.name),
                "0600",
                &rule,
            ));
        }
    }
    if let Some(sshd_config) = sshd_config(&bootstrap.users) {
        generated.push(mode_file("/etc/ssh/sshd_config", "0600", &sshd_config));
    }
    let user_files_start = generated.len();
    generated.push(mode_file(
        KUBEADM_SCRIPT_PATH,
        "0700",
        &kubeadm_script(bootstrap),
    ));
    generated.push(mode_file(
        KUBEADM_CONFIG_PATH,
        "0600",
        &bootstrap.kubeadm_config,
    ));
    if spec.ntp.enabled == Some(true) && !spec.ntp.servers.is_empty() {
        generated.push(mode_file(
            "/etc/ntp.conf",
            "0644",
            &ntp_conf(&spec.ntp.servers),
        ));
    }
    check_generated_paths(spec, &generated)?;

    let mut files = generated;
    files.splice(
        user_files_start..user_files_start,
        bootstrap.files.iter().cloned(),
    );
    Ok(files)
}

/// Same-path entries merge into one node, so a user file must not meet a file written here.
fn check_generated_paths(spec: &KubeadmConfigSpec, generated: &[File]) -> Result<(), RenderError> {
    for (i, file) in spec.files.iter().enumerate() {
        if generated.iter().any(|g| g.path == file.path) {
            return Err(invalid(
                format!("spec.files[{i}].path"),
                format!("{:?} is written by the bootstrap provider", file.path),
            ));
        }
    }
    Ok(())
}

/// A file with only a mode; Ignition writes it as root.
fn mode_file(path: impl Into<String>, permissions: &str, content: &str) -> File {
    File {
        owner: None,
        ..root_file(path, permissions, content)
    }
}

fn kubeadm_script(bootstrap: &Bootstrap) -> String {
    let spec = bootstrap.spec;
    let mut script = String::from("#!/bin/bash\nset -e\n");
    if !spec.pre_kubeadm_commands.is_empty() {
        script.push('\n');
        script.push_str(&lines(&spec.pre_kubeadm_commands));
    }
    script.push('\n');
    script.push_str(&bootstrap.kubeadm_command(KUBEADM_CONFIG_PATH));
    script.push('\n');
    script.push_str(SENTINEL);
    // Moving the config away keeps the unit from running kubeadm again after a reboot.
    script.push_str(&format!("\nmv {KUBEADM_CONFIG_PATH} /tmp/\n"));
    if !spec.post_kubeadm_commands.is_empty() {
        script.push('\n');
        script.push_str(&lines(&spec.post_kubeadm_commands));
    }
    script
}

fn lines(commands: &[String]) -> String {
    commands.iter().map(|c| format!("{c}\n")).collect()
}

/// Users with `lockPassword: false` get password login over SSH, which Flatcar disables by default.
fn sshd_config(users: &[User]) -> Option<String> {
    let names: Vec<&str> = users
        .iter()
        .filter(|u| u.lock_password == Some(false))
        .map(|u| u.name.as_str())
        .collect();
    if names.is_empty() {
        return None;
    }
    Some(format!(
        "# Use most defaults for sshd configuration.
Subsystem sftp internal-sftp
ClientAliveInterval 180
UseDNS no
UsePAM yes
PrintLastLog no # handled by PAM
PrintMotd no # handled by PAM

Match User {}
  PasswordAuthentication yes
",
        names.join(",")
    ))
}

fn ntp_conf(servers: &[String]) -> String {
    let servers: String = servers.iter().map(|s| format!("server {s}\n")).collect();
    format!(
        "# Common pool
{servers}
# Warning: Using default NTP settings will leave your NTP
# server accessible to all hosts on the Internet.

# If you want to deny all machines (including your own)
# from accessing the NTP server, uncomment:
#restrict default ignore

# Default configuration:
# - Allow only time queries, at a limited rate, sending KoD when in excess.
# - Allow all local queries (IPv4, IPv6)
restrict default nomodify nopeer noquery notrap limited kod
restrict 127.0.0.1
restrict [::1]
"
    )
}

/// One node per path: Ignition rejects duplicate paths, so `append: true` entries join the first one.
fn file_nodes(files: &[File]) -> Vec<FileNode> {
    let mut nodes: Vec<FileNode> = Vec::new();
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for file in files {
        let resource = resource(file);
        match index.get(file.path.as_str()) {
            Some(&i) => nodes[i].append.push(resource),
            None => {
                index.insert(&file.path, nodes.len());
                nodes.push(file_node(file, resource));
            }
        }
    }
    nodes
}

fn file_node(file: &File, resource: Resource) -> FileNode {
    let (user, group) = owner(file.owner.as_deref());
    let (overwrite, contents, append) = if file.append == Some(true) {
        (None, None, vec![resource])
    } else {
        (Some(true), Some(resource), Vec::new())
    };
    FileNode {
        path: file.path.clone(),
        overwrite,
        // Validated when the bootstrap was resolved.
        mode: file.permissions.as_deref().and_then(parse_mode),
        user,
        group,
        contents,
        append,
    }
}

/// `user:group` as in cloud-init.
fn owner(owner: Option<&str>) -> (Option<Name>, Option<Name>) {
    let name = |s: &str| {
        let s = s.trim();
        (!s.is_empty()).then(|| Name {
            id: None,
            name: Some(s.to_owned()),
        })
    };
    match owner.map(|o| o.split_once(':')) {
        None => (None, None),
        Some(None) => (owner.and_then(name), None),
        Some(Some((user, group))) => (name(user), name(group)),
    }
}

/// A data URL with the file's bytes; encoded content is handed to Ignition without decoding it here.
fn resource(file: &File) -> Resource {
    let content = file.content.as_deref().unwrap_or_default();
    let base64_payload = || content.split_ascii_whitespace().collect::<String>();
    match file.encoding {
        None => Resource {
            source: format!("data:,{}", percent_encode(content)),
            compression: None,
            verification: None,
        },
        Some(Encoding::Base64) => Resource {
            source: format!("data:;base64,{}", base64_payload()),
            compression: None,
            verification: None,
        },
        Some(Encoding::GzipBase64) => Resource {
            source: format!("data:;base64,{}", base64_payload()),
            compression: Some("gzip"),
            verification: None,
        },
        Some(Encoding::Gzip) => Resource {
            source: format!("data:;base64,{}", BASE64.encode(content)),
            compression: Some("gzip"),
            verification: None,
        },
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters and `/`, which keeps paths readable.
fn percent_encode(content: &str) -> String {
    let mut out = String::with_capacity(content.len() * 3 / 2);
    for byte in content.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~/".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn passwd_user(user: &User) -> PasswdUser {
    let groups = user.groups.as_deref().unwrap_or_default();
    PasswdUser {
        name: user.name.clone(),
        gecos: user.gecos.clone(),
        groups: groups
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(str::to_owned)
            .collect(),
        home_dir: user.home_dir.clone(),
        shell: user.shell.clone(),
        password_hash: user.passwd.clone(),
        primary_group: user.primary_group.clone(),
        ssh_authorized_keys: user.ssh_authorized_keys.clone(),
        uid: None,
        no_create_home: None,
        no_user_group: None,
        no_log_init: None,
        system: None,
    }
}

fn disks(spec: &KubeadmConfigSpec) -> Vec<Disk> {
    spec.disk_setup
        .partitions
        .iter()
        .map(|p| Disk {
            device: p.device.clone(),
            wipe_table: p.overwrite,
            partitions: if p.layout == Some(true) {
                vec![serde_json::Map::new()]
            } else {
                Vec::new()
            },
        })
        .collect()
}

fn filesystems(spec: &KubeadmConfigSpec) -> Vec<Filesystem> {
    spec.disk_setup
        .filesystems
        .iter()
        .map(|fs| Filesystem {
            device: fs.device.clone(),
            format: fs.filesystem.clone(),
            wipe_filesystem: fs.overwrite == Some(true),
            label: fs.label.clone(),
            options: fs.extra_opts.clone(),
        })
        .collect()
}

fn units(spec: &KubeadmConfigSpec) -> Vec<Unit> {
    let mut units = vec![Unit {
        name: "kubeadm.service".into(),
        enabled: Some(true),
        mask: None,
        contents: Some(KUBEADM_UNIT.into()),
        dropins: Vec::new(),
    }];
    if spec.ntp.enabled == Some(true) {
        units.push(Unit {
            name: "ntpd.service".into(),
            enabled: Some(true),
            mask: None,
            contents: None,
            dropins: Vec::new(),
        });
    }
    units.extend(spec.mounts.iter().filter_map(|m| mount_unit(spec, m)));
    units
}

/// A systemd mount unit for a cloud-init style `[what, where, type, options, ...]` entry.
fn mount_unit(spec: &KubeadmConfigSpec, mount: &[String]) -> Option<Unit> {
    let (what, place) = (mount.first()?, mount.get(1)?);
    let mut contents = format!(
        "[Unit]\nDescription = Mount {what}\n\n[Mount]\nWhat={}\nWhere={place}\n",
        mount_device(spec, what)
    );
    if let Some(kind) = mount.get(2).filter(|t| !t.is_empty() && *t != "auto") {
        contents.push_str(&format!("Type={kind}\n"));
    }
    if let Some(options) = mount.get(3).filter(|o| !o.is_empty()) {
        contents.push_str(&format!("Options={options}\n"));
    }
    contents.push_str("\n[Install]\nWantedBy=multi-user.target\n");
    Some(Unit {
        name: format!("{}.mount", systemd_escape_path(place)),
        enabled: Some(true),
        mask: None,
        contents: Some(contents),
        dropins: Vec::new(),
    })
}

/// A filesystem label from `diskSetup` names its device; `LABEL=x` becomes the by-label link.
fn mount_device(spec: &KubeadmConfigSpec, what: &str) -> String {
    let label = what.strip_prefix("LABEL=").unwrap_or(what);
    let by_label = spec
        .disk_setup
        .filesystems
        .iter()
        .find(|fs| fs.label.as_deref() == Some(label));
    match (by_label, what.strip_prefix("LABEL=")) {
        (Some(fs), _) => fs.device.clone(),
        (None, Some(label)) => format!("/dev/disk/by-label/{label}"),
        (None, None) => what.to_owned(),
    }
}

/// `systemd-escape --path`: the unit name of a mount point.
fn systemd_escape_path(path: &str) -> String {
    let trimmed = path.trim_matches('/');
    if trimmed.is_empty() {
        return "-".into();
    }
    let mut out = String::new();
    for (i, byte) in trimmed.bytes().enumerate() {
        match byte {
            b'/' => out.push('-'),
            b'.' if i == 0 => out.push_str("\\x2e"),
            b if b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b':' => {
                out.push(b as char)
            }
            b => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_mount_points_like_systemd() {
        assert_eq!(systemd_escape_path("/var/lib/etcddisk"), "var-lib-etcddisk");
        assert_eq!(systemd_escape_path("/mnt/my-data/"), "mnt-my\\x2ddata");
        assert_eq!(systemd_escape_path("/"), "-");
    }

    #[test]
    fn percent_encodes_all_but_unreserved() {
        assert_eq!(percent_encode("a b/c\n%"), "a%20b/c%0A%25");
    }

    #[test]
    fn splits_owner() {
        let (user, group) = owner(Some("root:wheel"));
        assert_eq!(user.unwrap().name.as_deref(), Some("root"));
        assert_eq!(group.unwrap().name.as_deref(), Some("wheel"));
        let (user, group) = owner(Some("core"));
        assert_eq!(user.unwrap().name.as_deref(), Some("core"));
        assert!(group.is_none());
    }
}
