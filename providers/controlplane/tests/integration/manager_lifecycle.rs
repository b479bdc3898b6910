//! `controlplane-manager run` as a real process against a real management plane.

use std::path::Path;

const BINARY: &str = env!("CARGO_BIN_EXE_controlplane-manager");

#[tokio::test]
async fn connects_serves_health_and_stops_on_sigterm() {
    // The control plane creates KubeadmConfigs, so it needs the bootstrap CRDs too.
    let mut crds = kubeadm_api::crd::provider_crds();
    crds.extend(kubeadm_api::crd::core_crds());
    testenv::manager::check_serves_and_stops(Path::new(BINARY), &crds)
        .await
        .unwrap();
}

#[tokio::test]
async fn missing_kubeconfig_fails_fast_naming_the_file() {
    testenv::manager::check_fails_fast_on_missing_kubeconfig(Path::new(BINARY))
        .await
        .unwrap();
}

#[tokio::test]
async fn missing_crds_fail_fast_naming_the_crd() {
    testenv::manager::check_fails_fast_without_crds(
        Path::new(BINARY),
        "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
    )
    .await
    .unwrap();
}
