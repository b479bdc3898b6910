//! The CRDs in `e2e/config/crd` are the ones the Rust types generate, and they name the kinds the
//! control-plane tests' fixture installs the same way.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

#[test]
fn generated_crds_are_committed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/crd");
    let stale = kubeadm_api::crd::stale_files(&dir, &sim::api::crd_files());
    assert!(
        stale.is_empty(),
        "{stale:?}: run `cargo run -p sim -- crds` and commit the result"
    );
}

#[test]
fn kinds_match_the_control_plane_fixture() {
    let fixture = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../providers/controlplane/tests/fixtures/sim-infrastructure-crds.yaml"
    ))
    .unwrap();
    let fixture: Vec<CustomResourceDefinition> = serde_saphyr::from_multiple(&fixture).unwrap();
    let ours = sim::api::crds();
    for theirs in fixture {
        let same = ours
            .iter()
            .find(|c| c.metadata.name == theirs.metadata.name)
            .unwrap_or_else(|| panic!("{:?} is not generated", theirs.metadata.name));
        assert_eq!(same.spec.group, theirs.spec.group);
        assert_eq!(same.spec.names.kind, theirs.spec.names.kind);
        assert_eq!(same.spec.names.plural, theirs.spec.names.plural);
        assert_eq!(same.spec.scope, theirs.spec.scope);
        assert_eq!(same.spec.versions[0].name, theirs.spec.versions[0].name);
    }
}
