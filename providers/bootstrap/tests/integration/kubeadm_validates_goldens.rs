//! Real kubeadm (`kubeadm config validate`) reads the kubeadm configuration of every golden as a node
//! would: the current release the v1beta4 goldens, kubeadm 1.30 the v1beta3 ones (written for Kubernetes
//! releases the current kubeadm no longer deploys). A golden it refuses fails the tests. The provider
//! template test validates v1beta4 configurations of every template shape the same way.

use crate::common;

use serde_json::Value;

/// Where the discovery-file golden writes its discovery kubeconfig.
const DISCOVERY_FILE: &str = "/etc/kubernetes/discovery.conf";

/// The kubeadm configuration a golden writes: `/run/kubeadm/*.yaml` of a cloud-config, or
/// `/etc/kubeadm.yml` of an Ignition config (its `data:,` URL decoded).
fn kubeadm_config(name: &str, text: &str) -> String {
    if name.ends_with(".ignition.json") {
        let config: Value = serde_json::from_str(text).unwrap();
        testenv::kubeadm::ignition_file(&config, "/etc/kubeadm.yml")
            .unwrap_or_else(|| panic!("{name}: no /etc/kubeadm.yml"))
    } else {
        cloud_config_file(name, text, |p| p.starts_with("/run/kubeadm/kubeadm"))
            .unwrap_or_else(|| panic!("{name}: no /run/kubeadm configuration"))
    }
}

/// The content of the first `write_files` entry of a cloud-config whose path `wanted` accepts.
fn cloud_config_file(name: &str, text: &str, wanted: impl Fn(&str) -> bool) -> Option<String> {
    let cloud_config = text
        .strip_prefix("## template: jinja\n")
        .unwrap_or_else(|| panic!("{name}: no Jinja header"));
    let config: Value = serde_saphyr::from_str(cloud_config).unwrap();
    config["write_files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().is_some_and(&wanted))
        .map(|f| f["content"].as_str().unwrap().to_owned())
}

#[test]
fn kubeadm_of_each_api_version_accepts_every_golden() {
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(common::golden_dir()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some(api) = ["v1beta3", "v1beta4"]
            .into_iter()
            .find(|v| name.contains(&format!("{v}.")))
        else {
            continue;
        };
        let config = kubeadm_config(&name, &std::fs::read_to_string(&path).unwrap());
        assert!(config.contains(&format!("kubeadm.k8s.io/{api}")), "{name}");
        // The discovery kubeconfig is on the node before kubeadm runs; kubeadm checks it is there.
        let text = std::fs::read_to_string(&path).unwrap();
        let discovery = DISCOVERY_FILE;
        let discovery_content = if name.ends_with(".cloud-config.yaml") {
            cloud_config_file(&name, &text, |p| p == discovery)
        } else {
            None
        };
        let files: Vec<(&str, &str)> = discovery_content
            .as_deref()
            .map(|content| (discovery, content))
            .into_iter()
            .collect();
        if let Err(refusal) = testenv::kubeadm::validate_config_with_files(&config, &files) {
            panic!("{name}: kubeadm refuses its configuration:\n{refusal}\n{config}");
        }
        checked.push(name);
    }
    // Every role in both formats and both API versions, plus the special cases.
    assert!(checked.len() >= 16, "only {checked:?}");
}
