//! `bootstrap-manager render` as a process, on the spec fixture.

mod common;

use std::path::Path;
use std::process::{Command, Output};

const BINARY: &str = env!("CARGO_BIN_EXE_bootstrap-manager");

/// Writes the fixture's Secrets as `<dir>/<secret>/<key>` files.
fn secrets_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for ((name, key), value) in common::secrets() {
        std::fs::create_dir_all(dir.path().join(&name)).unwrap();
        std::fs::write(dir.path().join(&name).join(&key), value).unwrap();
    }
    dir
}

fn run_render(role: &str, extra: &[&str], secrets: Option<&Path>) -> Output {
    let mut command = Command::new(BINARY);
    command
        .arg("render")
        .arg(common::fixture_path())
        .args(["--role", role, "--kubernetes-version", "v1.33.1"])
        .args([
            "--cluster-name",
            "prod-eu1",
            "--endpoint",
            "api.prod-eu1.example.com:6443",
        ])
        .args(extra);
    if let Some(dir) = secrets {
        command.arg("--secrets-dir").arg(dir);
    }
    command.output().unwrap()
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "render failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn renders_init_cloud_config_with_placeholder_certificates() {
    let secrets = secrets_dir();
    let output = stdout(&run_render(
        "init",
        &["--machine-generation", "2"],
        Some(secrets.path()),
    ));
    assert!(output.starts_with("## template: jinja\n#cloud-config\n"));
    assert!(output.contains("  - path: /etc/kubernetes/pki/ca.key\n"));
    assert!(output.contains("-----BEGIN CERTIFICATE-----"));
    assert!(output.contains("auth-url = https://keystone.example.com:5000/v3"));
    assert!(output.contains("cluster.x-k8s.io/machine: prod-eu1-control-plane-7xkqz"));
    assert!(output.contains("kubeadm init --config /run/kubeadm/kubeadm.yaml --v 5 && "));
}

#[test]
fn renders_worker_ignition_on_request() {
    let secrets = secrets_dir();
    let output = stdout(&run_render(
        "worker",
        &["--format", "ignition"],
        Some(secrets.path()),
    ));
    let config: serde_json::Value = serde_json::from_str(&output).unwrap();
    assert_eq!(config["ignition"]["version"], "3.3.0");
    assert_eq!(config["systemd"]["units"][0]["name"], "kubeadm.service");
}

#[test]
fn fails_naming_the_field_of_a_missing_secret() {
    let output = run_render("worker", &[], None);
    assert!(!output.status.success());
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("spec.files[0].contentFrom.secret") && stderr.contains("--secrets-dir"),
        "{stderr}"
    );
}

#[test]
fn renders_a_kubeadm_config_without_spec() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-spec.yaml");
    std::fs::write(
        &path,
        "apiVersion: bootstrap.cluster.x-k8s.io/v1beta2\nkind: KubeadmConfig\nmetadata:\n  name: prod-eu1-mp-0\n",
    )
    .unwrap();
    let output = Command::new(BINARY)
        .arg("render")
        .arg(&path)
        .args(["--role", "worker", "--kubernetes-version", "v1.33.1"])
        .args([
            "--cluster-name",
            "prod-eu1",
            "--endpoint",
            "api.prod-eu1.example.com:6443",
        ])
        .output()
        .unwrap();
    let output = stdout(&output);
    assert!(
        output.contains("kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml"),
        "{output}"
    );
}
