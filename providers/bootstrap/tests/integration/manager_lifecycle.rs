//! `bootstrap-manager run` as a real process against a real management plane.

use std::path::Path;
use std::time::Duration;

const BINARY: &str = env!("CARGO_BIN_EXE_bootstrap-manager");

#[tokio::test]
async fn connects_serves_health_and_stops_on_sigterm() {
    let mut crds = kubeadm_api::crd::bootstrap_crds();
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
        "kubeadmconfigs.bootstrap.cluster.x-k8s.io",
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn serves_the_controller_metrics() {
    let plane = testenv::ManagementPlane::start().await.unwrap();
    let mut crds = kubeadm_api::crd::bootstrap_crds();
    crds.extend(kubeadm_api::crd::core_crds());
    plane.install_crds(&crds).await.unwrap();
    let mut manager = testenv::manager::ManagerProcess::start(
        Path::new(BINARY),
        plane.kubeconfig_path(),
        plane.dir(),
        &[],
    )
    .unwrap();
    manager.wait_ready(Duration::from_secs(60)).await.unwrap();

    let (status, body) = manager.get("/metrics").await.unwrap();
    assert_eq!(status, 200, "{body}");
    // Error counts appear with the first failure; the other series exist from the start.
    for line in [
        "# TYPE kubeadm_bootstrap_reconcile counter",
        "# TYPE kubeadm_bootstrap_reconcile_duration_seconds histogram",
        "kubeadm_bootstrap_data_secrets_written_total{role=\"init\"} 0",
        "kubeadm_bootstrap_api_writes_total{kind=\"status_patch\"} 0",
    ] {
        assert!(body.lines().any(|l| l == line), "no {line:?} in\n{body}");
    }
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert!(manager.terminate(Duration::from_secs(10)).is_some());
}
