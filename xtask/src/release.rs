//! `xtask release-manifests`: the clusterctl local repository of this release,
//! `OUT/bootstrap-kubeadm/<version>/` and `OUT/control-plane-kubeadm/<version>/` with the components
//! files, `metadata.yaml` and (with the control plane) a copy of every `templates/cluster-template*.yaml`.

use std::path::{Path, PathBuf};

use crate::components;

/// Writes the repository below `out`, taking the templates from `root/templates`; returns the paths
/// written.
pub fn write(root: &Path, out: &Path) -> Result<Vec<PathBuf>, String> {
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
