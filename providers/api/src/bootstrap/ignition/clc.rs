//! The Container Linux Config (the YAML of Flatcar's `ct`) of
//! `ignition.containerLinuxConfig.additionalConfig`, transpiled to Ignition 2.3 as Cluster API does:
//! every section the transpiler knows (ignition config merging and TLS, storage disks, RAID, file
//! systems, files, directories and links, systemd and networkd units, users and groups, `docker`,
//! `update`, `locksmith`), unknown keys dropped, and with `strict: true` any warning (an unknown
//! key, a file without mode, an empty config…) refused. Errors name the key path inside the config.
//!
//! Not supported: `etcd` and `flannel`, which configure Container Linux's own etcd and flannel
//! services (kubeadm runs etcd, and the CNI is installed into the cluster), and `contents.local`,
//! which needs files next to the transpiler.

use std::fmt;

use serde::Deserialize;
use serde_json::Value;

use super::data_url;
use super::types::{self, Config};

/// A Container Linux Config that cannot be transpiled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", path.as_deref().map(|p| format!("{p}: ")).unwrap_or_default())]
pub struct ClcError {
    /// Key path inside the config, e.g. `storage.disks[0].partitions[1].size`.
    pub path: Option<String>,
    /// What is wrong.
    pub message: String,
}

/// A transpiled config and the warnings a non-strict transpile let through.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Transpiled {
    pub config: Config,
    pub warnings: Vec<ClcError>,
}

/// Transpiles `text`. With `strict`, a warning is an error.
pub fn transpile(text: &str, strict: bool) -> Result<Transpiled, ClcError> {
    let (input, mut warnings) = parse(text)?;
    let config = convert(&input, &mut warnings)?;
    if strict && let Some(first) = warnings.first() {
        return Err(ClcError {
            path: first.path.clone(),
            message: format!("{} (strict: true refuses every warning)", first.message),
        });
    }
    Ok(Transpiled { config, warnings })
}

fn error(path: impl fmt::Display, message: impl Into<String>) -> ClcError {
    ClcError {
        path: Some(path.to_string()),
        message: message.into(),
    }
}

fn parse(text: &str) -> Result<(Input, Vec<ClcError>), ClcError> {
    let yaml_error = |e: serde_saphyr::Error| ClcError {
        path: None,
        message: format!("is not valid YAML: {e}"),
    };
    let value: Value = serde_saphyr::from_str(text).map_err(yaml_error)?;
    let mut warnings = Vec::new();
    if value.is_null() || value.as_object().is_some_and(|o| o.is_empty()) {
        warnings.push(ClcError {
            path: None,
            message: "the configuration is empty".into(),
        });
        return Ok((Input::default(), warnings));
    }
    // Read into the typed input directly, as `ct` does: a text field keeps `off` as text, a number
    // field reads `0644` as octal (YAML 1.1), a flag takes `yes`/`no`.
    let options = serde_saphyr::options! { legacy_octal_numbers: true };
    let mut unknown = Vec::new();
    let mut typed = None;
    let read = serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
        let mut collect =
            |path: serde_ignored::Path| unknown.push(bracket_indexes(&path.to_string()));
        typed = Some(
            serde_path_to_error::deserialize::<_, Input>(serde_ignored::Deserializer::new(
                de,
                &mut collect,
            ))
            .map_err(|e| {
                let path = e.path().to_string();
                ClcError {
                    path: (path != ".").then_some(path),
                    message: e.into_inner().to_string(),
                }
            }),
        );
        Ok(())
    });
    // A field error stops the reading midway; it is the error to report, not what the reader
    // says about the unread rest.
    let input = match (typed, read) {
        (Some(Err(error)), _) => return Err(error),
        (_, Err(error)) => return Err(yaml_error(error)),
        (Some(Ok(input)), Ok(())) => input,
        (None, Ok(())) => Input::default(),
    };
    warnings.extend(unknown.into_iter().map(|path| ClcError {
        message: "is not a key of a Container Linux Config; it is ignored".into(),
        path: Some(path),
    }));
    Ok((input, warnings))
}

/// `a.0.b` as `a[0].b`, the way the other errors write paths.
fn bracket_indexes(path: &str) -> String {
    let mut out = String::new();
    for part in path.split('.') {
        if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{part}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(part);
        }
    }
    out
}

/// An integer written as a YAML number (`0644` octal), not as quoted text, as `ct` reads it.
fn yaml_integer<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<i64>, D::Error> {
    struct Integer;
    impl serde::de::Visitor<'_> for Integer {
        type Value = Option<i64>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an integer")
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            i64::try_from(v).map(Some).map_err(E::custom)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    de.deserialize_any(Integer)
}

// The input, with `ct`'s key names. Unknown keys are collected, not refused.

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Input {
    version: i64,
    ignition: InIgnition,
    storage: InStorage,
    systemd: InSystemd,
    networkd: InNetworkd,
    passwd: InPasswd,
    etcd: Option<Value>,
    flannel: Option<Value>,
    docker: Option<InDocker>,
    update: Option<InUpdate>,
    locksmith: Option<InLocksmith>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InIgnition {
    config: InIgnitionConfig,
    timeouts: InTimeouts,
    security: InSecurity,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InIgnitionConfig {
    append: Vec<InReference>,
    replace: Option<InReference>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InReference {
    source: String,
    verification: InVerification,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InVerification {
    hash: InHash,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InHash {
    function: String,
    sum: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InTimeouts {
    http_response_headers: Option<i64>,
    http_total: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InSecurity {
    tls: InTls,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InTls {
    certificate_authorities: Vec<InReference>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InStorage {
    disks: Vec<InDisk>,
    raid: Vec<InRaid>,
    filesystems: Vec<InFilesystem>,
    files: Vec<InFile>,
    directories: Vec<InDirectory>,
    links: Vec<InLink>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InDisk {
    device: String,
    wipe_table: bool,
    partitions: Vec<InPartition>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InPartition {
    label: Option<String>,
    number: i64,
    size: Dimension,
    start: Dimension,
    guid: String,
    type_guid: String,
}

/// A partition size or offset: `10GiB`, `512MiB`, `0`; YAML may give a bare number too.
#[derive(Debug, Default, Deserialize)]
#[serde(untagged)]
enum Dimension {
    #[default]
    Unset,
    Text(String),
    Number(i64),
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InRaid {
    name: String,
    level: String,
    devices: Vec<String>,
    spares: i64,
    options: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InFilesystem {
    name: String,
    mount: Option<InMount>,
    path: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InMount {
    device: String,
    format: String,
    create: Option<InCreate>,
    wipe_filesystem: bool,
    label: Option<String>,
    uuid: Option<String>,
    options: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InCreate {
    force: bool,
    options: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InOwner {
    id: Option<i64>,
    name: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InFile {
    filesystem: String,
    path: String,
    user: Option<InOwner>,
    group: Option<InOwner>,
    #[serde(deserialize_with = "yaml_integer")]
    mode: Option<i64>,
    contents: InContents,
    overwrite: Option<bool>,
    append: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InContents {
    remote: InRemote,
    inline: String,
    local: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InRemote {
    url: String,
    compression: String,
    verification: InVerification,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InDirectory {
    filesystem: String,
    path: String,
    user: Option<InOwner>,
    group: Option<InOwner>,
    #[serde(deserialize_with = "yaml_integer")]
    mode: Option<i64>,
    overwrite: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InLink {
    filesystem: String,
    path: String,
    user: Option<InOwner>,
    group: Option<InOwner>,
    hard: bool,
    target: String,
    overwrite: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InSystemd {
    units: Vec<InUnit>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InUnit {
    name: String,
    enable: bool,
    enabled: Option<bool>,
    mask: bool,
    contents: String,
    dropins: Vec<InDropin>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InDropin {
    name: String,
    contents: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InNetworkd {
    units: Vec<InNetworkdUnit>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InNetworkdUnit {
    name: String,
    contents: String,
    dropins: Vec<InDropin>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InPasswd {
    users: Vec<InUser>,
    groups: Vec<InGroup>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InUser {
    name: String,
    password_hash: Option<String>,
    ssh_authorized_keys: Vec<String>,
    create: Option<InUserCreate>,
    uid: Option<i64>,
    gecos: String,
    home_dir: String,
    no_create_home: bool,
    primary_group: String,
    groups: Vec<String>,
    no_user_group: bool,
    system: bool,
    no_log_init: bool,
    shell: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InUserCreate {
    uid: Option<i64>,
    gecos: String,
    home_dir: String,
    no_create_home: bool,
    primary_group: String,
    groups: Vec<String>,
    no_user_group: bool,
    system: bool,
    no_log_init: bool,
    shell: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InGroup {
    name: String,
    gid: Option<i64>,
    password_hash: String,
    system: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InDocker {
    flags: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InUpdate {
    group: String,
    server: String,
    pcr_policy_server: String,
    download_user: String,
    download_password: String,
    machine_alias: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InLocksmith {
    reboot_strategy: Option<String>,
    window_start: Option<String>,
    window_length: Option<String>,
    group: Option<String>,
    etcd_endpoints: Option<String>,
    etcd_cafile: Option<String>,
    etcd_certfile: Option<String>,
    etcd_keyfile: Option<String>,
}

const DEFAULT_FILE_MODE: i64 = 0o644;
const DEFAULT_DIRECTORY_MODE: i64 = 0o755;
const MIB: i64 = 1024 * 1024;
const FILESYSTEM_FORMATS: [&str; 5] = ["ext4", "btrfs", "xfs", "swap", "vfat"];
const UNIT_SUFFIXES: [&str; 12] = [
    ".service",
    ".socket",
    ".device",
    ".mount",
    ".automount",
    ".swap",
    ".target",
    ".path",
    ".timer",
    ".snapshot",
    ".slice",
    ".scope",
];
const NETWORKD_SUFFIXES: [&str; 3] = [".link", ".netdev", ".network"];

fn convert(input: &Input, warnings: &mut Vec<ClcError>) -> Result<Config, ClcError> {
    if input.version != 0 {
        return Err(error("version", "only version 0 is supported"));
    }
    for (key, present, why) in [
        (
            "etcd",
            input.etcd.is_some(),
            "configures Container Linux's etcd-member service, which Flatcar no longer ships; \
             kubeadm runs etcd",
        ),
        (
            "flannel",
            input.flannel.is_some(),
            "configures Container Linux's flanneld service, which Flatcar no longer ships; \
             install the CNI into the cluster",
        ),
    ] {
        if present {
            return Err(error(key, format!("is not supported: it {why}")));
        }
    }
    let mut out = Config::new();
    ignition(&input.ignition, &mut out.ignition)?;
    storage(&input.storage, &mut out.storage, warnings)?;
    systemd(&input.systemd, &mut out.systemd, warnings)?;
    networkd(&input.networkd, &mut out.networkd)?;
    passwd(&input.passwd, &mut out.passwd);
    if let Some(docker) = &input.docker {
        out.systemd.units.push(types::Unit {
            name: "docker.service".into(),
            enable: true,
            dropins: vec![types::Dropin {
                name: "20-clct-docker.conf".into(),
                contents: format!(
                    "[Service]\nEnvironment=\"DOCKER_OPTS={}\"",
                    docker.flags.join(" ")
                ),
            }],
            ..Default::default()
        });
    }
    update_conf(input, &mut out.storage, warnings);
    Ok(out)
}

/// `<function>-<sum>`; Ignition 2.3 verifies with SHA-512 only, so the sum is 128 hex digits.
fn verification(at: &str, input: &InVerification) -> Result<types::Verification, ClcError> {
    let hash = &input.hash;
    if hash.function.is_empty() || hash.sum.is_empty() {
        return Ok(types::Verification::default());
    }
    if hash.function != "sha512" {
        return Err(error(
            format!("{at}.verification.hash.function"),
            format!(
                "{:?} is not supported by Ignition 2.3; use sha512",
                hash.function
            ),
        ));
    }
    if hash.sum.len() != 128 || !hash.sum.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(error(
            format!("{at}.verification.hash.sum"),
            "incorrect size for hash sum: a SHA-512 sum is 128 hex digits",
        ));
    }
    Ok(types::Verification {
        hash: Some(format!("{}-{}", hash.function, hash.sum)),
    })
}

fn references(at: &str, input: &[InReference]) -> Result<Vec<types::ConfigReference>, ClcError> {
    input
        .iter()
        .enumerate()
        .map(|(i, r)| reference(&format!("{at}[{i}]"), r))
        .collect()
}

fn reference(at: &str, input: &InReference) -> Result<types::ConfigReference, ClcError> {
    Ok(types::ConfigReference {
        source: input.source.clone(),
        verification: verification(at, &input.verification)?,
    })
}

fn ignition(input: &InIgnition, out: &mut types::Ignition) -> Result<(), ClcError> {
    out.config.append = references("ignition.config.append", &input.config.append)?;
    out.config.replace = input
        .config
        .replace
        .as_ref()
        .map(|r| reference("ignition.config.replace", r))
        .transpose()?;
    out.timeouts.http_response_headers = input.timeouts.http_response_headers;
    out.timeouts.http_total = input.timeouts.http_total;
    out.security.tls.certificate_authorities = references(
        "ignition.security.tls.certificate_authorities",
        &input.security.tls.certificate_authorities,
    )?;
    Ok(())
}

fn owner(input: &Option<InOwner>) -> Option<types::NodeOwner> {
    input.as_ref().map(|o| types::NodeOwner {
        id: o.id,
        name: o.name.clone(),
    })
}

fn filesystem_name(name: &str) -> String {
    if name.is_empty() { "root" } else { name }.to_owned()
}

fn absolute(path: String, value: &str) -> Result<(), ClcError> {
    if value.starts_with('/') {
        Ok(())
    } else {
        Err(error(path, format!("{value:?} is not an absolute path")))
    }
}

fn mode(path: String, mode: Option<i64>) -> Result<(), ClcError> {
    match mode {
        Some(m) if !(0..=0o7777).contains(&m) => Err(error(
            path,
            format!("{m} is not a file mode; write it in octal, e.g. 0644"),
        )),
        _ => Ok(()),
    }
}

/// Bytes of a size like `10GiB`, `1.5GiB`, `512MiB`, `1GiB512MiB` or `0`, in MiB: `KB` and
/// `KiB` alike are 1024 bytes, and only whole MiB are allowed.
fn dimension(path: String, value: &Dimension) -> Result<Option<i64>, ClcError> {
    let text = match value {
        Dimension::Unset => return Ok(None),
        Dimension::Text(text) if text.is_empty() => return Ok(None),
        Dimension::Text(text) => text.clone(),
        Dimension::Number(n) => n.to_string(),
    };
    let bytes = base2_bytes(&text).map_err(|why| error(&path, why))?;
    if bytes < 0 {
        return Err(error(
            path,
            format!("invalid dimension (negative): {text:?}"),
        ));
    }
    if bytes % MIB != 0 {
        return Err(error(
            path,
            format!("{text:?}: invalid dimension (finest granularity is 1MiB)"),
        ));
    }
    Ok(Some(bytes / MIB))
}

fn base2_bytes(text: &str) -> Result<i64, String> {
    if text == "0" {
        return Ok(0);
    }
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let mut total = 0f64;
    if rest.is_empty() {
        return Err(format!("{text:?} is not a size such as 10GiB"));
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_len]
            .parse()
            .map_err(|_| format!("{text:?} is not a size such as 10GiB"))?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor: f64 = match &rest[..unit_len] {
            "B" => 1.0,
            "KB" | "KiB" => 1024.0,
            "MB" | "MiB" => 1024f64.powi(2),
            "GB" | "GiB" => 1024f64.powi(3),
            "TB" | "TiB" => 1024f64.powi(4),
            "PB" | "PiB" => 1024f64.powi(5),
            "EB" | "EiB" => 1024f64.powi(6),
            unit => {
                return Err(format!(
                    "{text:?}: unknown unit {unit:?}; write a size such as 10GiB or 512MiB"
                ));
            }
        };
        rest = &rest[unit_len..];
        total += number * factor;
    }
    let bytes = total.round() as i64;
    Ok(if negative { -bytes } else { bytes })
}

fn partition_type(alias: &str) -> String {
    match alias {
        "raid_containing_root" => "be9067b9-ea49-4f15-b4f6-f36f8c9e1818",
        "linux_filesystem_data" => "0fc63daf-8483-4772-8e79-3d69d8477de4",
        "swap_partition" => "0657fd6d-a4ab-43c4-84e5-0933c84b4f4f",
        "raid_partition" => "a19d880f-05fc-4d3b-a006-743f0f84911e",
        other => other,
    }
    .to_owned()
}

fn storage(
    input: &InStorage,
    out: &mut types::Storage,
    warnings: &mut Vec<ClcError>,
) -> Result<(), ClcError> {
    for (i, disk) in input.disks.iter().enumerate() {
        let at = format!("storage.disks[{i}]");
        absolute(format!("{at}.device"), &disk.device)?;
        let mut partitions = Vec::new();
        for (j, partition) in disk.partitions.iter().enumerate() {
            let at = format!("{at}.partitions[{j}]");
            if let Some(label) = &partition.label {
                if label.chars().count() > 36 {
                    return Err(error(format!("{at}.label"), "is longer than 36 characters"));
                }
                if label.contains(':') {
                    warnings.push(error(
                        format!("{at}.label"),
                        "will be truncated to the text before the colon",
                    ));
                }
            }
            partitions.push(types::Partition {
                label: partition.label.clone(),
                number: partition.number,
                size_mib: dimension(format!("{at}.size"), &partition.size)?,
                start_mib: dimension(format!("{at}.start"), &partition.start)?,
                guid: partition.guid.clone(),
                type_guid: partition_type(&partition.type_guid),
            });
        }
        out.disks.push(types::Disk {
            device: disk.device.clone(),
            wipe_table: disk.wipe_table,
            partitions,
        });
    }
    for (i, raid) in input.raid.iter().enumerate() {
        let at = format!("storage.raid[{i}]");
        if raid.name.is_empty() {
            return Err(error(format!("{at}.name"), "must be set"));
        }
        for (j, device) in raid.devices.iter().enumerate() {
            absolute(format!("{at}.devices[{j}]"), device)?;
        }
        out.raid.push(types::Raid {
            name: raid.name.clone(),
            level: raid.level.clone(),
            devices: raid.devices.clone(),
            spares: raid.spares,
            options: raid.options.clone(),
        });
    }
    for (i, filesystem) in input.filesystems.iter().enumerate() {
        let at = format!("storage.filesystems[{i}]");
        if filesystem.name == "root" {
            warnings.push(error(
                format!("{at}.name"),
                "\"root\" shadows the root file system",
            ));
        }
        let mount = match (&filesystem.mount, &filesystem.path) {
            (Some(_), Some(_)) => {
                return Err(error(&at, "mount and path are mutually exclusive"));
            }
            (None, None) => return Err(error(&at, "one of mount or path must be set")),
            (None, Some(path)) => {
                absolute(format!("{at}.path"), path)?;
                None
            }
            (Some(mount), None) => Some(filesystem_mount(&format!("{at}.mount"), mount, warnings)?),
        };
        out.filesystems.push(types::Filesystem {
            name: filesystem.name.clone(),
            mount,
            path: filesystem.path.clone(),
        });
    }
    for (i, file) in input.files.iter().enumerate() {
        let at = format!("storage.files[{i}]");
        absolute(format!("{at}.path"), &file.path)?;
        mode(format!("{at}.mode"), file.mode)?;
        if file.mode.is_none() {
            warnings.push(error(format!("{at}.mode"), "is unset; the file gets 0644"));
        }
        if file.append && file.overwrite == Some(true) {
            return Err(error(&at, "append and overwrite are mutually exclusive"));
        }
        let contents = &file.contents;
        let sources = [
            !contents.inline.is_empty(),
            !contents.local.is_empty(),
            !contents.remote.url.is_empty(),
        ];
        if sources.iter().filter(|s| **s).count() > 1 {
            return Err(error(
                format!("{at}.contents"),
                "inline, local and remote are mutually exclusive",
            ));
        }
        if !contents.local.is_empty() {
            return Err(error(
                format!("{at}.contents.local"),
                "needs the transpiler's --files-dir, which the bootstrap provider has not; \
                 use inline or remote",
            ));
        }
        if !matches!(contents.remote.compression.as_str(), "" | "gzip") {
            return Err(error(
                format!("{at}.contents.remote.compression"),
                format!(
                    "{:?} is not supported; use gzip",
                    contents.remote.compression
                ),
            ));
        }
        let verification = verification(
            &format!("{at}.contents.remote"),
            &contents.remote.verification,
        )?;
        let source = if contents.inline.is_empty() {
            contents.remote.url.clone()
        } else {
            data_url(contents.inline.as_bytes())
        };
        out.files.push(types::File {
            filesystem: filesystem_name(&file.filesystem),
            path: file.path.clone(),
            overwrite: file.overwrite,
            user: owner(&file.user),
            group: owner(&file.group),
            append: file.append,
            mode: Some(file.mode.unwrap_or(DEFAULT_FILE_MODE)),
            contents: types::FileContents {
                source,
                compression: contents.remote.compression.clone(),
                verification,
            },
        });
    }
    for (i, directory) in input.directories.iter().enumerate() {
        let at = format!("storage.directories[{i}]");
        absolute(format!("{at}.path"), &directory.path)?;
        mode(format!("{at}.mode"), directory.mode)?;
        if directory.mode.is_none() {
            warnings.push(error(
                format!("{at}.mode"),
                "is unset; the directory gets 0755",
            ));
        }
        out.directories.push(types::Directory {
            filesystem: filesystem_name(&directory.filesystem),
            path: directory.path.clone(),
            overwrite: directory.overwrite,
            user: owner(&directory.user),
            group: owner(&directory.group),
            mode: Some(directory.mode.unwrap_or(DEFAULT_DIRECTORY_MODE)),
        });
    }
    for (i, link) in input.links.iter().enumerate() {
        let at = format!("storage.links[{i}]");
        absolute(format!("{at}.path"), &link.path)?;
        if link.target.is_empty() {
            return Err(error(format!("{at}.target"), "must be set"));
        }
        out.links.push(types::Link {
            filesystem: filesystem_name(&link.filesystem),
            path: link.path.clone(),
            overwrite: link.overwrite,
            user: owner(&link.user),
            group: owner(&link.group),
            hard: link.hard,
            target: link.target.clone(),
        });
    }
    Ok(())
}

fn filesystem_mount(
    at: &str,
    mount: &InMount,
    warnings: &mut Vec<ClcError>,
) -> Result<types::Mount, ClcError> {
    absolute(format!("{at}.device"), &mount.device)?;
    if !FILESYSTEM_FORMATS.contains(&mount.format.as_str()) {
        return Err(error(
            format!("{at}.format"),
            format!(
                "{:?} is not a supported format ({})",
                mount.format,
                FILESYSTEM_FORMATS.join(", ")
            ),
        ));
    }
    if let Some(label) = &mount.label {
        let limit = match mount.format.as_str() {
            "ext4" => 16,
            "xfs" => 12,
            "vfat" => 11,
            "swap" => 15,
            _ => 256,
        };
        if label.chars().count() > limit {
            return Err(error(
                format!("{at}.label"),
                format!(
                    "is longer than {limit} characters, the limit of {}",
                    mount.format
                ),
            ));
        }
    }
    if mount.create.is_some() {
        if mount.wipe_filesystem || !mount.options.is_empty() {
            return Err(error(
                format!("{at}.create"),
                "cannot be combined with wipe_filesystem or options",
            ));
        }
        warnings.push(error(
            format!("{at}.create"),
            "is deprecated; use wipe_filesystem and options",
        ));
    }
    Ok(types::Mount {
        device: mount.device.clone(),
        format: mount.format.clone(),
        create: mount.create.as_ref().map(|c| types::Create {
            force: c.force,
            options: c.options.clone(),
        }),
        wipe_filesystem: mount.wipe_filesystem,
        label: mount.label.clone(),
        uuid: mount.uuid.clone(),
        options: mount.options.clone(),
    })
}

fn dropins(at: &str, input: &[InDropin]) -> Result<Vec<types::Dropin>, ClcError> {
    input
        .iter()
        .enumerate()
        .map(|(j, dropin)| {
            if !dropin.name.ends_with(".conf") || dropin.name.contains('/') {
                return Err(error(
                    format!("{at}.dropins[{j}].name"),
                    format!("{:?} must be a file name ending in .conf", dropin.name),
                ));
            }
            Ok(types::Dropin {
                name: dropin.name.clone(),
                contents: dropin.contents.clone(),
            })
        })
        .collect()
}

fn systemd(
    input: &InSystemd,
    out: &mut types::Systemd,
    warnings: &mut Vec<ClcError>,
) -> Result<(), ClcError> {
    for (i, unit) in input.units.iter().enumerate() {
        let at = format!("systemd.units[{i}]");
        if !UNIT_SUFFIXES.iter().any(|s| unit.name.ends_with(s)) || unit.name.contains('/') {
            return Err(error(
                format!("{at}.name"),
                format!(
                    "{:?} is not a unit name (it must end in one of {})",
                    unit.name,
                    UNIT_SUFFIXES.join(" ")
                ),
            ));
        }
        let enabled = unit.enable || unit.enabled == Some(true);
        if enabled && !unit.contents.is_empty() && !unit.contents.contains("[Install]") {
            warnings.push(error(
                format!("{at}.contents"),
                format!(
                    "unit {:?} is enabled, but has no install section so enable does nothing",
                    unit.name
                ),
            ));
        }
        out.units.push(types::Unit {
            name: unit.name.clone(),
            enable: unit.enable,
            enabled: unit.enabled,
            mask: unit.mask,
            contents: unit.contents.clone(),
            dropins: dropins(&at, &unit.dropins)?,
        });
    }
    Ok(())
}

fn networkd(input: &InNetworkd, out: &mut types::Networkd) -> Result<(), ClcError> {
    for (i, unit) in input.units.iter().enumerate() {
        let at = format!("networkd.units[{i}]");
        if !NETWORKD_SUFFIXES.iter().any(|s| unit.name.ends_with(s)) || unit.name.contains('/') {
            return Err(error(
                format!("{at}.name"),
                format!(
                    "{:?} is not a networkd unit name (it must end in .link, .netdev or .network)",
                    unit.name
                ),
            ));
        }
        out.units.push(types::NetworkdUnit {
            name: unit.name.clone(),
            contents: unit.contents.clone(),
            dropins: dropins(&at, &unit.dropins)?,
        });
    }
    Ok(())
}

fn passwd(input: &InPasswd, out: &mut types::Passwd) {
    out.users = input
        .users
        .iter()
        .map(|u| types::PasswdUser {
            name: u.name.clone(),
            password_hash: u.password_hash.clone(),
            ssh_authorized_keys: u.ssh_authorized_keys.clone(),
            uid: u.uid,
            gecos: u.gecos.clone(),
            home_dir: u.home_dir.clone(),
            no_create_home: u.no_create_home,
            primary_group: u.primary_group.clone(),
            groups: u.groups.clone(),
            no_user_group: u.no_user_group,
            system: u.system,
            no_log_init: u.no_log_init,
            shell: u.shell.clone(),
            create: u.create.as_ref().map(|c| types::UserCreate {
                uid: c.uid,
                gecos: c.gecos.clone(),
                home_dir: c.home_dir.clone(),
                no_create_home: c.no_create_home,
                primary_group: c.primary_group.clone(),
                groups: c.groups.clone(),
                no_user_group: c.no_user_group,
                system: c.system,
                no_log_init: c.no_log_init,
                shell: c.shell.clone(),
            }),
        })
        .collect();
    out.groups = input
        .groups
        .iter()
        .map(|g| types::PasswdGroup {
            name: g.name.clone(),
            gid: g.gid,
            password_hash: g.password_hash.clone(),
            system: g.system,
        })
        .collect();
}

/// `update` and `locksmith` become `/etc/coreos/update.conf`, as `ct` writes it.
fn update_conf(input: &Input, out: &mut types::Storage, warnings: &mut Vec<ClcError>) {
    let mut contents = String::new();
    if let Some(update) = &input.update {
        let group = update.group.to_lowercase();
        if !matches!(group.as_str(), "stable" | "beta" | "alpha") && update.server.is_empty() {
            warnings.push(error(
                "update.group",
                format!("{:?} is an unknown update group", update.group),
            ));
        }
        if !group.is_empty() {
            contents.push_str(&format!("GROUP={group}"));
        }
        for (key, value) in [
            ("SERVER", &update.server),
            ("PCR_POLICY_SERVER", &update.pcr_policy_server),
            ("DOWNLOAD_USER", &update.download_user),
            ("DOWNLOAD_PASSWORD", &update.download_password),
            ("MACHINE_ALIAS", &update.machine_alias),
        ] {
            if !value.is_empty() {
                contents.push_str(&format!("\n{key}={value}"));
            }
        }
    }
    if let Some(locksmith) = &input.locksmith {
        let lines: Vec<String> = [
            ("REBOOT_STRATEGY", &locksmith.reboot_strategy),
            ("LOCKSMITHD_REBOOT_WINDOW_START", &locksmith.window_start),
            ("LOCKSMITHD_REBOOT_WINDOW_LENGTH", &locksmith.window_length),
            ("LOCKSMITHD_GROUP", &locksmith.group),
            ("LOCKSMITHD_ENDPOINT", &locksmith.etcd_endpoints),
            ("LOCKSMITHD_ETCD_CAFILE", &locksmith.etcd_cafile),
            ("LOCKSMITHD_ETCD_CERTFILE", &locksmith.etcd_certfile),
            ("LOCKSMITHD_ETCD_KEYFILE", &locksmith.etcd_keyfile),
        ]
        .into_iter()
        .filter_map(|(key, value)| {
            value
                .as_ref()
                .filter(|v| !v.is_empty())
                .map(|v| format!("{key}={}", go_quote(v)))
        })
        .collect();
        if !lines.is_empty() {
            contents.push('\n');
            contents.push_str(&lines.join("\n"));
        }
    }
    if !contents.is_empty() {
        out.files.push(types::File {
            filesystem: "root".into(),
            path: "/etc/coreos/update.conf".into(),
            mode: Some(DEFAULT_FILE_MODE),
            contents: types::FileContents {
                source: data_url(contents.as_bytes()),
                ..Default::default()
            },
            ..Default::default()
        });
    }
}

/// A double-quoted string as Go's `%q` writes printable text.
fn go_quote(value: &str) -> String {
    let mut out = String::from("\"");
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests;
