//! What a simulated node takes from its bootstrap data: the files cloud-init would write and the kubeadm
//! command it would run. Pure: bootstrap data in, [`BootPlan`] out, with errors that say what is wrong.

use std::collections::BTreeMap;

use base64::Engine;
use serde::Deserialize;

/// The first line of cloud-init data rendered as a jinja template; cloud-init strips it.
pub const JINJA_HEADER: &str = "## template: jinja";

/// What kubeadm is asked to do on the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KubeadmCommand {
    /// `kubeadm init --config PATH`.
    Init { config: String },
    /// `kubeadm join --config PATH`; whether it joins the control plane is in the config.
    Join { config: String },
}

impl KubeadmCommand {
    pub fn config_path(&self) -> &str {
        match self {
            KubeadmCommand::Init { config } | KubeadmCommand::Join { config } => config,
        }
    }
}

/// The files and the kubeadm command of one node's bootstrap data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootPlan {
    /// Path on the node → content (decoded).
    pub files: BTreeMap<String, String>,
    pub kubeadm: KubeadmCommand,
    /// A command before kubeadm runs the etcd restore script
    /// ([`ETCD_RESTORE_SCRIPT_PATH`](kubeadm_api::bootstrap::validation::ETCD_RESTORE_SCRIPT_PATH)).
    pub restores_etcd: bool,
}

impl BootPlan {
    /// The content of the kubeadm config file the command reads.
    pub fn kubeadm_config(&self) -> Result<&str, BootDataError> {
        let path = self.kubeadm.config_path();
        self.files
            .get(path)
            .map(String::as_str)
            .ok_or_else(|| BootDataError::MissingFile(path.to_owned()))
    }

    pub fn file(&self, path: &str) -> Result<&str, BootDataError> {
        self.files
            .get(path)
            .map(String::as_str)
            .ok_or_else(|| BootDataError::MissingFile(path.to_owned()))
    }
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum BootDataError {
    #[error(
        "bootstrap data is not cloud-config: the first line after `{JINJA_HEADER}` must be `#cloud-config`"
    )]
    NotCloudConfig,
    #[error("bootstrap data is not valid cloud-config YAML: {0}")]
    Yaml(String),
    #[error(
        "write_files[{index}] ({path}): unsupported encoding {encoding:?} (b64, base64, gzip+base64 and plain text are known)"
    )]
    Encoding {
        index: usize,
        path: String,
        encoding: String,
    },
    #[error("write_files[{index}] ({path}): content is not valid {encoding}: {reason}")]
    Content {
        index: usize,
        path: String,
        encoding: String,
        reason: String,
    },
    #[error("runcmd has no `kubeadm init` or `kubeadm join` command")]
    NoKubeadmCommand,
    #[error("runcmd: `{0}` has no `--config FILE`")]
    NoConfigFlag(String),
    #[error("the bootstrap data does not write {0}, which the node needs")]
    MissingFile(String),
}

#[derive(Deserialize)]
struct CloudConfig {
    #[serde(default)]
    write_files: Vec<WriteFile>,
    #[serde(default)]
    runcmd: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct WriteFile {
    path: String,
    #[serde(default)]
    content: String,
    #[serde(default)]
    encoding: Option<String>,
}

/// Parses cloud-init user data as the node would see it.
pub fn parse(data: &str) -> Result<BootPlan, BootDataError> {
    let body = data
        .strip_prefix(JINJA_HEADER)
        .map(|rest| rest.trim_start_matches(['\r', '\n']))
        .unwrap_or(data);
    if !body.starts_with("#cloud-config") {
        return Err(BootDataError::NotCloudConfig);
    }
    let config: CloudConfig =
        serde_saphyr::from_str(body).map_err(|e| BootDataError::Yaml(e.to_string()))?;
    let mut files = BTreeMap::new();
    for (index, file) in config.write_files.into_iter().enumerate() {
        let content = decode(index, &file)?;
        files.insert(file.path, content);
    }
    let kubeadm = config
        .runcmd
        .iter()
        .filter_map(command_line)
        .find_map(|line| kubeadm_command(&line).transpose())
        .transpose()?
        .ok_or(BootDataError::NoKubeadmCommand)?;
    let restores_etcd = config
        .runcmd
        .iter()
        .filter_map(command_line)
        .take_while(|line| kubeadm_command(line).ok().flatten().is_none())
        .any(|line| line.contains(kubeadm_api::bootstrap::validation::ETCD_RESTORE_SCRIPT_PATH));
    Ok(BootPlan {
        files,
        kubeadm,
        restores_etcd,
    })
}

/// A runcmd entry as one command line: a string, or a list of arguments.
fn command_line(entry: &serde_json::Value) -> Option<String> {
    match entry {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Array(args) => Some(
            args.iter()
                .filter_map(|a| a.as_str())
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    }
}

fn kubeadm_command(line: &str) -> Result<Option<KubeadmCommand>, BootDataError> {
    // Only the first command of a `a && b` chain is kubeadm's.
    let words: Vec<&str> = line
        .split("&&")
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let Some(pos) = words
        .iter()
        .position(|w| *w == "kubeadm" || w.ends_with("/kubeadm"))
    else {
        return Ok(None);
    };
    let sub = words.get(pos + 1).copied();
    if !matches!(sub, Some("init" | "join")) {
        return Ok(None);
    }
    let config = words
        .windows(2)
        .find(|w| w[0] == "--config")
        .map(|w| w[1].to_owned())
        .or_else(|| {
            words
                .iter()
                .find_map(|w| w.strip_prefix("--config=").map(str::to_owned))
        })
        .ok_or_else(|| BootDataError::NoConfigFlag(line.trim().to_owned()))?;
    Ok(Some(match sub {
        Some("init") => KubeadmCommand::Init { config },
        _ => KubeadmCommand::Join { config },
    }))
}

fn decode(index: usize, file: &WriteFile) -> Result<String, BootDataError> {
    let encoding = file.encoding.as_deref().unwrap_or("text/plain");
    let failed = |reason: String| BootDataError::Content {
        index,
        path: file.path.clone(),
        encoding: encoding.to_owned(),
        reason,
    };
    match encoding {
        "text/plain" => Ok(file.content.clone()),
        "b64" | "base64" => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(file.content.trim())
                .map_err(|e| failed(e.to_string()))?;
            String::from_utf8(bytes).map_err(|e| failed(e.to_string()))
        }
        // Compressed files are user payloads the simulated node never reads: kept as written.
        "gz+base64" | "gzip+base64" | "gz+b64" | "gzip+b64" => Ok(file.content.clone()),
        other => Err(BootDataError::Encoding {
            index,
            path: file.path.clone(),
            encoding: other.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INIT: &str = "## template: jinja\n#cloud-config\nwrite_files:\n- path: /etc/kubernetes/pki/ca.crt\n  content: |\n    CERT\n- path: /run/kubeadm/kubeadm.yaml\n  content: |\n    kind: ClusterConfiguration\n- path: /etc/motd\n  encoding: base64\n  content: aGVsbG8=\nruncmd:\n- swapoff -a\n- kubeadm init --config /run/kubeadm/kubeadm.yaml --v 5 && echo success > /run/cluster-api/bootstrap-success.complete\n";

    #[test]
    fn init_data_gives_files_and_the_init_command() {
        let plan = parse(INIT).unwrap();
        assert_eq!(
            plan.kubeadm,
            KubeadmCommand::Init {
                config: "/run/kubeadm/kubeadm.yaml".into()
            }
        );
        assert_eq!(plan.file("/etc/kubernetes/pki/ca.crt").unwrap(), "CERT\n");
        assert_eq!(plan.file("/etc/motd").unwrap(), "hello");
        assert_eq!(
            plan.kubeadm_config().unwrap(),
            "kind: ClusterConfiguration\n"
        );
    }

    #[test]
    fn join_is_found_in_a_list_form_command() {
        let data = "#cloud-config\nruncmd:\n- [kubeadm, join, --config, /run/kubeadm/kubeadm-join-config.yaml]\n";
        assert_eq!(
            parse(data).unwrap().kubeadm,
            KubeadmCommand::Join {
                config: "/run/kubeadm/kubeadm-join-config.yaml".into()
            }
        );
    }

    #[test]
    fn the_etcd_restore_is_one_of_the_commands_before_kubeadm() {
        let restore = "- /bin/sh /run/cluster-api/etcd-restore.sh\n";
        let init = "- kubeadm init --config /run/kubeadm/kubeadm.yaml\n";
        let before = format!("#cloud-config\nruncmd:\n- swapoff -a\n{restore}{init}");
        assert!(parse(&before).unwrap().restores_etcd);
        let after = format!("#cloud-config\nruncmd:\n{init}{restore}");
        assert!(!parse(&after).unwrap().restores_etcd);
        assert!(!parse(INIT).unwrap().restores_etcd);
    }

    #[test]
    fn bad_data_is_named() {
        assert_eq!(
            parse("#!/bin/sh\necho hi\n"),
            Err(BootDataError::NotCloudConfig)
        );
        assert!(matches!(
            parse("#cloud-config\nwrite_files: [\n"),
            Err(BootDataError::Yaml(_))
        ));
        assert_eq!(
            parse("#cloud-config\nruncmd:\n- echo hi\n"),
            Err(BootDataError::NoKubeadmCommand)
        );
        assert_eq!(
            parse("#cloud-config\nruncmd:\n- kubeadm join 1.2.3.4:6443\n"),
            Err(BootDataError::NoConfigFlag(
                "kubeadm join 1.2.3.4:6443".into()
            ))
        );
        let err =
            parse("#cloud-config\nwrite_files:\n- path: /x\n  encoding: rot13\n  content: a\n")
                .unwrap_err();
        assert!(err.to_string().contains("write_files[0] (/x)"), "{err}");
        let plan = parse(INIT).unwrap();
        assert_eq!(
            plan.file("/etc/kubernetes/pki/sa.key")
                .unwrap_err()
                .to_string(),
            "the bootstrap data does not write /etc/kubernetes/pki/sa.key, which the node needs"
        );
    }
}
