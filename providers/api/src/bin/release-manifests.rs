//! Writes the clusterctl local repository of this release: `OUT/bootstrap-kubeadm/<version>/` and
//! `OUT/control-plane-kubeadm/<version>/` with the components files, `metadata.yaml` and (with the
//! control plane) a copy of every `templates/cluster-template*.yaml`.
//!
//! Usage: `release-manifests [--out DIR] [REPO_ROOT]` (defaults: `out`, relative to REPO_ROOT, and
//! the current folder).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kubeadm_api::components;

fn main() -> ExitCode {
    let mut root = PathBuf::from(".");
    let mut out = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--out" => match args.next() {
                Some(dir) => out = Some(PathBuf::from(dir)),
                None => {
                    eprintln!("release-manifests: --out needs a folder");
                    return ExitCode::FAILURE;
                }
            },
            "-h" | "--help" => {
                println!("usage: release-manifests [--out DIR] [REPO_ROOT]");
                return ExitCode::SUCCESS;
            }
            other => root = PathBuf::from(other),
        }
    }
    let out = out.unwrap_or_else(|| root.join("out"));
    match run(&root, &out) {
        Ok(written) => {
            for path in written {
                println!("{}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("release-manifests: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(root: &Path, out: &Path) -> Result<Vec<PathBuf>, String> {
    let templates = cluster_templates(&root.join("templates"))?;
    let mut written = Vec::new();
    for (path, content) in components::repository_files(&templates) {
        let path = out.join(path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        std::fs::write(&path, content)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// `(file name, content)` of the cluster templates in `dir`, sorted by name; none when the folder
/// does not exist.
fn cluster_templates(dir: &Path) -> Result<Vec<(String, String)>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", dir.display())),
    };
    let mut templates = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !components::is_cluster_template(&name) {
            continue;
        }
        let content = std::fs::read_to_string(entry.path())
            .map_err(|e| format!("cannot read {}: {e}", entry.path().display()))?;
        templates.push((name, content));
    }
    templates.sort();
    Ok(templates)
}
