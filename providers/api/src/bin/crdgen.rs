//! Writes the manifests generated from the Rust types: `config/crd/bases/` (the CRDs we ship),
//! `config/webhook/` and `config/certmanager/` (webhook configurations, Service, serving certificate),
//! `config/rbac/`, `config/manager/` and `config/default/` (per provider: RBAC, manager Deployment,
//! assembled clusterctl components) and `e2e/config/crd/` (the core Cluster API subset tests install).
//!
//! Usage: `crdgen [--check] [REPO_ROOT]` (default: the current folder). `--check` writes nothing and
//! fails when a file on disk differs, naming the file and the command that fixes it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kubeadm_api::webhook::manifests;
use kubeadm_api::{components, crd};

fn main() -> ExitCode {
    let mut check = false;
    let mut root = PathBuf::from(".");
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--check" => check = true,
            "-h" | "--help" => {
                println!("usage: crdgen [--check] [REPO_ROOT]");
                return ExitCode::SUCCESS;
            }
            other => root = PathBuf::from(other),
        }
    }
    let outputs = [
        (root.join("config/crd/bases"), crd::provider_crds()),
        (root.join("e2e/config/crd"), crd::core_crds()),
    ];
    let mut stale = Vec::new();
    for (dir, crds) in outputs {
        let files: Vec<(String, String)> = crds
            .iter()
            .map(|c| (crd::file_name(c), crd::to_yaml(c)))
            .collect();
        if check {
            stale.extend(crd::stale_files(&dir, &files));
        } else if let Err(e) = write_all(&dir, &files) {
            eprintln!("crdgen: {e}");
            return ExitCode::FAILURE;
        }
    }
    let mut config_files = manifests::files();
    config_files.extend(components::config_files());
    if check {
        stale.extend(crd::stale_files(&root, &config_files));
    } else if let Err(e) = write_files(&root, &config_files) {
        eprintln!("crdgen: {e}");
        return ExitCode::FAILURE;
    }
    if stale.is_empty() {
        ExitCode::SUCCESS
    } else {
        for s in stale {
            eprintln!("crdgen: {s}");
        }
        eprintln!("crdgen: manifests are stale; run `make manifests` and commit the result");
        ExitCode::FAILURE
    }
}

fn write_all(dir: &Path, files: &[(String, String)]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, content) in files {
        std::fs::write(dir.join(name), content)?;
    }
    let resources: String = files
        .iter()
        .map(|(name, _)| format!("- {name}\n"))
        .collect();
    std::fs::write(
        dir.join("kustomization.yaml"),
        crd::kustomization(&resources),
    )?;
    Ok(())
}

/// Writes `(path below root, content)` pairs, creating folders as needed.
fn write_files(root: &Path, files: &[(String, String)]) -> std::io::Result<()> {
    for (path, content) in files {
        let path = root.join(path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, content)?;
    }
    Ok(())
}
