//! `sim` as a process: the CRD check and the start-up errors.

use std::process::Command;

const BINARY: &str = env!("CARGO_BIN_EXE_sim");

#[test]
fn crds_check_passes_on_the_committed_files() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/crd");
    let output = Command::new(BINARY)
        .args(["crds", "--check", dir])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn crds_check_names_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(BINARY)
        .args(["crds", "--check"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("infrastructure.cluster.x-k8s.io_simmachines.yaml is missing"),
        "{stderr}"
    );
}

#[test]
fn run_names_a_missing_kubeconfig() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(BINARY)
        .args(["run", "--kubeconfig", "/nonexistent/kubeconfig", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("read --kubeconfig /nonexistent/kubeconfig"),
        "{stderr}"
    );
}
