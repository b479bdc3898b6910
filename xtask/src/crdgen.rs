//! `xtask crdgen`: the manifests generated from the Rust types: `config/crd/bases/` (the CRDs we
//! ship), `config/webhook/` and `config/certmanager/` (webhook configurations, Service, serving
//! certificate), `config/rbac/`, `config/manager/` and `config/default/` (per provider: RBAC, manager
//! Deployment, assembled clusterctl components), `e2e/config/crd/` (the core Cluster API subset
//! tests install) and the reference pages on labels, annotations, conditions and Events
//! (`docs/src/reference/`, from `xtask/reference/` and the constants).

use std::path::Path;

use kubeadm_api::crd;

use crate::generated::kustomization;
use crate::{components, reference, webhook};

/// Every generated file, as `(path from the repository root, content)`.
pub fn files() -> Vec<(String, String)> {
    let mut files = Vec::new();
    for (dir, crds) in [
        ("config/crd/bases", crd::provider_crds()),
        ("e2e/config/crd", crd::core_crds()),
    ] {
        let names: Vec<String> = crds.iter().map(crd::file_name).collect();
        for (name, crd) in names.iter().zip(&crds) {
            files.push((format!("{dir}/{name}"), crd::to_yaml(crd)));
        }
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        files.push((
            format!("{dir}/kustomization.yaml"),
            kustomization(&names, None),
        ));
    }
    files.extend(webhook::files());
    files.extend(components::config_files());
    files.extend(reference::files());
    files
}

/// Writes every generated file below `root`, creating folders as needed.
pub fn write(root: &Path) -> std::io::Result<()> {
    for (path, content) in files() {
        let path = root.join(path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, content)?;
    }
    Ok(())
}

/// The generated files below `root` that are missing or differ from what the types give.
pub fn stale(root: &Path) -> Vec<String> {
    crd::stale_files(root, &files())
}
