//! Ignition config (spec 2.3.0, JSON) as Cluster API's kubeadm bootstrap provider writes it for
//! Flatcar: the bootstrap's files, users, disks and mounts, and a `kubeadm.service` unit that runs
//! `/etc/kubeadm.sh` (pre commands, kubeadm, sentinel, post commands) while `/etc/kubeadm.yml`
//! exists, then moves that file away so the unit never runs again. The transpiled
//! `additionalConfig` is appended as Cluster API appends it: lists concatenated, nothing merged.
//!
//! Where Cluster API's output is a side effect of templating, the intent is written instead: mount
//! units are named and typed as systemd requires, `append: true` appends, and a file without
//! permissions gets 0644 rather than failing the render.

use kubeadm_api::bootstrap::ignition::{self, Config, data_url, decode_base64, types};
use kubeadm_api::bootstrap::v1beta2::{Encoding, File, KubeadmConfigSpec, User};

use super::{Bootstrap, RenderError, invalid, parse_mode, root_file};

pub const KUBEADM_CONFIG_PATH: &str = "/etc/kubeadm.yml";
pub const KUBEADM_SCRIPT_PATH: &str = "/etc/kubeadm.sh";
const ADDITIONAL_CONFIG: &str = "spec.ignition.containerLinuxConfig.additionalConfig";

// `/bin/bash` runs the script even where /etc is mounted noexec (Cluster API made the same change
// after v1.14).
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

/// Renders the Ignition config as compact JSON.
pub(crate) fn render(bootstrap: &Bootstrap) -> Result<Vec<u8>, RenderError> {
    let spec = bootstrap.spec;
    // The admission webhooks refuse all of these; checked again so nothing half-rendered leaves.
    if let Some((path, rule)) = ignition::spec_problems(spec).into_iter().next() {
        return Err(invalid(format!("spec.{path}"), rule));
    }
    for (i, file) in spec.files.iter().enumerate() {
        if matches!(file.encoding, Some(Encoding::Gzip | Encoding::GzipBase64)) {
            return Err(invalid(
                format!("spec.files[{i}].encoding"),
                "gzip encodings are not supported with format ignition",
            ));
        }
    }
    let mut config = Config::new();
    config.passwd.users = bootstrap.users.iter().map(passwd_user).collect();
    config.storage.files = all_files(bootstrap)?
        .iter()
        .map(file_node)
        .collect::<Result<_, _>>()?;
    config.storage.disks = disks(spec);
    config.storage.filesystems = filesystems(spec);
    config.systemd.units = units(spec);
    let clc = &spec.ignition.container_linux_config;
    if let Some(text) = clc.additional_config.as_deref() {
        let additional = ignition::transpile(text, clc.strict == Some(true))
            .map_err(|e| invalid(ADDITIONAL_CONFIG, e.to_string()))?;
        config.append(additional.config);
    }
    Ok(serde_json::to_vec(&config).expect("plain structs always serialize"))
}

/// Sudo rules and sshd settings for users, then the bootstrap's files, the kubeadm script, its config
/// and the NTP configuration, in Cluster API's order.
fn all_files(bootstrap: &Bootstrap) -> Result<Vec<File>, RenderError> {
    let spec = bootstrap.spec;
    let mut files = Vec::new();
    for user in &bootstrap.users {
        if let Some(sudo) = &user.sudo {
            files.push(mode_file(
                format!("/etc/sudoers.d/{}", user.name),
                "0600",
                &format!("{} {sudo}\n", user.name),
            ));
        }
    }
    if let Some(sshd_config) = sshd_config(&bootstrap.users) {
        files.push(mode_file("/etc/ssh/sshd_config", "0600", &sshd_config));
    }
    files.extend(bootstrap.files.iter().cloned());
    files.push(mode_file(
        KUBEADM_SCRIPT_PATH,
        "0700",
        &kubeadm_script(bootstrap),
    ));
    files.push(mode_file(
        KUBEADM_CONFIG_PATH,
        "0600",
        &format!("---\n{}", bootstrap.kubeadm_config),
    ));
    if spec.ntp.enabled == Some(true) && !spec.ntp.servers.is_empty() {
        files.push(mode_file(
            "/etc/ntp.conf",
            "0644",
            &ntp_conf(&spec.ntp.servers),
        ));
    }
    Ok(files)
}

/// A file with only a mode; Ignition writes it as root.
fn mode_file(path: impl Into<String>, permissions: &str, content: &str) -> File {
    File {
        owner: None,
        ..root_file(path, permissions, content)
    }
}

/// `/etc/kubeadm.sh`, line by line as Cluster API writes it.
fn kubeadm_script(bootstrap: &Bootstrap) -> String {
    let spec = bootstrap.spec;
    let mut lines = vec!["#!/bin/bash".to_owned(), "set -e".to_owned(), String::new()];
    lines.extend(spec.pre_kubeadm_commands.iter().cloned());
    lines.push(String::new());
    lines.push(bootstrap.kubeadm_command(KUBEADM_CONFIG_PATH));
    lines.push(SENTINEL.to_owned());
    // Moving the config away keeps the unit from running kubeadm again after a reboot.
    lines.push(format!("mv {KUBEADM_CONFIG_PATH} /tmp/"));
    lines.push(String::new());
    lines.extend(spec.post_kubeadm_commands.iter().cloned());
    lines.join("\n")
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

/// Text as Cluster API's templating leaves it: LF line ends and exactly one final line break.
fn text_content(content: &str) -> String {
    let text = content.replace("\r\n", "\n");
    let text = text.trim_end_matches('\n');
    if text.is_empty() {
        String::new()
    } else {
        format!("{text}\n")
    }
}

fn file_node(file: &File) -> Result<types::File, RenderError> {
    let content = file.content.as_deref().unwrap_or_default();
    let bytes = match file.encoding {
        None => text_content(content).into_bytes(),
        Some(Encoding::Base64) => decode_base64(content)
            .map_err(|rule| invalid(format!("file {}: content", file.path), rule))?,
        // Refused above (and at admission), as Cluster API does.
        Some(Encoding::Gzip | Encoding::GzipBase64) => {
            return Err(invalid(
                format!("file {}: encoding", file.path),
                "gzip encodings are not supported with format ignition",
            ));
        }
    };
    let (user, group) = owner(file.owner.as_deref());
    Ok(types::File {
        filesystem: "root".into(),
        path: file.path.clone(),
        user,
        group,
        append: file.append == Some(true),
        // Validated when the bootstrap was resolved; the transpiler's default otherwise.
        mode: Some(i64::from(
            file.permissions
                .as_deref()
                .and_then(parse_mode)
                .unwrap_or(0o644),
        )),
        contents: types::FileContents {
            source: data_url(&bytes),
            ..Default::default()
        },
        overwrite: None,
    })
}

/// `user:group` as in cloud-init, by name.
fn owner(owner: Option<&str>) -> (Option<types::NodeOwner>, Option<types::NodeOwner>) {
    let name = |s: &str| {
        let s = s.trim();
        (!s.is_empty()).then(|| types::NodeOwner {
            id: None,
            name: s.to_owned(),
        })
    };
    match owner.map(|o| o.split_once(':')) {
        None => (None, None),
        Some(None) => (owner.and_then(name), None),
        Some(Some((user, group))) => (name(user), name(group)),
    }
}

fn passwd_user(user: &User) -> types::PasswdUser {
    types::PasswdUser {
        name: user.name.clone(),
        gecos: user.gecos.clone().unwrap_or_default(),
        groups: user
            .groups
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(str::to_owned)
            .collect(),
        home_dir: user.home_dir.clone().unwrap_or_default(),
        shell: user.shell.clone().unwrap_or_default(),
        password_hash: user.passwd.clone(),
        primary_group: user.primary_group.clone().unwrap_or_default(),
        ssh_authorized_keys: user.ssh_authorized_keys.clone(),
        ..Default::default()
    }
}

/// One disk per partition entry; with `layout: true` one partition over the whole disk (Cluster
/// API writes the same whatever `diskLayout` says).
fn disks(spec: &KubeadmConfigSpec) -> Vec<types::Disk> {
    spec.disk_setup
        .partitions
        .iter()
        .map(|p| types::Disk {
            device: p.device.clone(),
            wipe_table: p.overwrite == Some(true),
            partitions: if p.layout == Some(true) {
                vec![types::Partition::default()]
            } else {
                Vec::new()
            },
        })
        .collect()
}

fn filesystems(spec: &KubeadmConfigSpec) -> Vec<types::Filesystem> {
    spec.disk_setup
        .filesystems
        .iter()
        .map(|fs| types::Filesystem {
            name: fs.label.clone().unwrap_or_default(),
            mount: Some(types::Mount {
                device: fs.device.clone(),
                format: fs.filesystem.clone(),
                wipe_filesystem: fs.overwrite == Some(true),
                label: fs.label.clone(),
                options: fs.extra_opts.clone(),
                ..Default::default()
            }),
            path: None,
        })
        .collect()
}

fn units(spec: &KubeadmConfigSpec) -> Vec<types::Unit> {
    let mut units = vec![types::Unit {
        name: "kubeadm.service".into(),
        enabled: Some(true),
        contents: KUBEADM_UNIT.into(),
        ..Default::default()
    }];
    if spec.ntp.enabled == Some(true) {
        units.push(types::Unit {
            name: "ntpd.service".into(),
            enabled: Some(true),
            ..Default::default()
        });
    }
    units.extend(spec.mounts.iter().filter_map(|m| mount_unit(spec, m)));
    units
}

/// A systemd mount unit for a cloud-init style `[what, where, type, options, ...]` entry.
fn mount_unit(spec: &KubeadmConfigSpec, mount: &[String]) -> Option<types::Unit> {
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
    Some(types::Unit {
        name: format!("{}.mount", systemd_escape_path(place)),
        enabled: Some(true),
        contents,
        ..Default::default()
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
    fn text_gets_one_final_line_break_as_in_cluster_api() {
        assert_eq!(text_content("hello"), "hello\n");
        assert_eq!(text_content("a\r\nb\n\n\n"), "a\nb\n");
        assert_eq!(text_content(""), "");
    }

    #[test]
    fn splits_owner() {
        let (user, group) = owner(Some("root:wheel"));
        assert_eq!(user.unwrap().name, "root");
        assert_eq!(group.unwrap().name, "wheel");
        let (user, group) = owner(Some("core"));
        assert_eq!(user.unwrap().name, "core");
        assert!(group.is_none());
    }
}
