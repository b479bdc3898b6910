//! Real kubeadm (built by `hack/install-testenv.sh`) as a judge of the kubeadm configurations our
//! bootstrap data carries, and the files an Ignition config writes, as text. A configuration is read by
//! the kubeadm of the nodes it is written for: kubeadm API v1beta3 is what the renderer writes for
//! Kubernetes < 1.31, so kubeadm 1.30 ([`binaries::kubeadm_v1beta3`]) reads it; v1beta4 the current
//! release ([`binaries::kubeadm_current`]), which deploys no Kubernetes older than its previous minor.

use std::process::Command;

use crate::binaries;

/// What cloud-init's Jinja, or a pre command's envsubst or sed, fills in on the node before kubeadm
/// reads its configuration: `{{ … }}`, `${…}` and `@@HOSTNAME@@` become `node-0`.
pub fn as_on_the_node(config: &str) -> String {
    let mut out = String::with_capacity(config.len());
    let mut rest = config;
    loop {
        let next = [("{{", "}}"), ("${", "}"), ("@@", "@@")]
            .into_iter()
            .filter_map(|(open, close)| rest.find(open).map(|at| (at, open, close)))
            .min_by_key(|(at, _, _)| *at);
        let Some((at, open, close)) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..at]);
        let after = &rest[at + open.len()..];
        match after.find(close) {
            Some(end) => {
                out.push_str("node-0");
                rest = &after[end + close.len()..];
            }
            None => {
                out.push_str(open);
                rest = after;
            }
        }
    }
}

/// Whether `config` is in kubeadm API v1beta3 (written for Kubernetes < 1.31).
pub fn is_v1beta3(config: &str) -> bool {
    config.contains("kubeadm.k8s.io/v1beta3")
}

/// The kubeadm that reads `config`: kubeadm 1.30 for v1beta3, the current release otherwise.
pub fn kubeadm_for(config: &str) -> Result<std::path::PathBuf, crate::Error> {
    if is_v1beta3(config) {
        binaries::kubeadm_v1beta3()
    } else {
        binaries::kubeadm_current()
    }
}

/// The kubeadm a node whose Machine runs `machine_version` boots `config` with: kubeadm 1.30 for v1beta3,
/// else the Machine's release where it is built ([`binaries::kubernetes_binary`]).
pub fn kubeadm_for_machine(
    config: &str,
    machine_version: Option<&str>,
) -> Result<std::path::PathBuf, crate::Error> {
    match machine_version {
        Some(version) if !is_v1beta3(config) => binaries::kubernetes_binary("kubeadm", version),
        _ => kubeadm_for(config),
    }
}

/// Runs `kubeadm config validate` on `config` (after [`as_on_the_node`]) with the kubeadm of its API
/// version (see the module documentation): `Err` with kubeadm's answer when it refuses the configuration.
pub fn validate_config(config: &str) -> Result<(), String> {
    validate_config_with_files(config, &[])
}

/// [`validate_config`] where the node already holds `files` (path, content), as the bootstrap data
/// writes them before kubeadm runs: kubeadm checks that a discovery kubeconfig exists, for one. They
/// are written into a scratch folder and their paths in `config` pointed there.
pub fn validate_config_with_files(config: &str, files: &[(&str, &str)]) -> Result<(), String> {
    run_validate(
        &kubeadm_for(config).map_err(|e| e.to_string())?,
        config,
        files,
    )
}

/// [`validate_config`] with the kubeadm a node whose Machine runs `machine_version` boots with
/// ([`kubeadm_for_machine`]).
pub fn validate_config_for_machine(
    config: &str,
    machine_version: Option<&str>,
) -> Result<(), String> {
    let kubeadm = kubeadm_for_machine(config, machine_version).map_err(|e| e.to_string())?;
    run_validate(&kubeadm, config, &[])
}

fn run_validate(
    kubeadm: &std::path::Path,
    config: &str,
    files: &[(&str, &str)],
) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut config = as_on_the_node(config);
    for (i, (path, content)) in files.iter().enumerate() {
        let local = dir.path().join(format!("node-file-{i}"));
        std::fs::write(&local, content).map_err(|e| e.to_string())?;
        config = config.replace(path, &local.display().to_string());
    }
    let file = dir.path().join("kubeadm.yaml");
    std::fs::write(&file, config).map_err(|e| e.to_string())?;
    let out = Command::new(kubeadm)
        .args(["config", "validate", "--config"])
        .arg(&file)
        .output()
        .map_err(|e| format!("{}: {e}", kubeadm.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The text of the file at `path` in an Ignition config, its `data:,` URL decoded; `None` when the
/// config writes no such file from a data URL.
pub fn ignition_file(config: &serde_json::Value, path: &str) -> Option<String> {
    let source = config["storage"]["files"]
        .as_array()?
        .iter()
        .find(|f| f["path"] == path)?["contents"]["source"]
        .as_str()?
        .strip_prefix("data:,")?;
    let mut bytes = Vec::with_capacity(source.len());
    let mut rest = source.as_bytes();
    while let Some((&first, tail)) = rest.split_first() {
        if first == b'%' && tail.len() >= 2 {
            let hex = std::str::from_utf8(&tail[..2]).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(first);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_side_placeholders_are_filled_like_the_node_fills_them() {
        assert_eq!(
            as_on_the_node(
                "name: \"{{ ds.meta_data[\"x\"] }}\"\nid: a:///${UUID}-@@HOSTNAME@@ {{ open"
            ),
            "name: \"node-0\"\nid: a:///node-0-node-0 {{ open"
        );
    }
}
