//! `config/` must match the Rust types: a changed type or webhook without `make manifests` fails here.

use std::path::Path;

use kubeadm_api::webhook::manifests;
use kubeadm_api::{components, crd};

#[test]
fn generated_crds_on_disk_match_the_types() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut stale = Vec::new();
    for (dir, crds) in [
        (root.join("config/crd/bases"), crd::provider_crds()),
        (root.join("e2e/config/crd"), crd::core_crds()),
    ] {
        let files: Vec<(String, String)> = crds
            .iter()
            .map(|c| (crd::file_name(c), crd::to_yaml(c)))
            .collect();
        stale.extend(crd::stale_files(&dir, &files));
    }
    stale.extend(crd::stale_files(&root, &manifests::files()));
    stale.extend(crd::stale_files(&root, &components::config_files()));
    assert!(
        stale.is_empty(),
        "stale manifests (run `make manifests`):\n{}",
        stale.join("\n")
    );
}
