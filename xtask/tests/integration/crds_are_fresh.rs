//! `config/` and `e2e/config/crd/` must match the Rust types: a changed type, webhook or RBAC rule
//! without `make manifests` fails here.

use std::path::Path;

#[test]
fn generated_manifests_on_disk_match_the_types() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let stale = xtask::crdgen::stale(&root);
    assert!(
        stale.is_empty(),
        "stale manifests (run `make manifests`):\n{}",
        stale.join("\n")
    );
}
