//! `bootstrap-manager render` as a process, on the spec fixture.

use crate::common;

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
fn ignition_refuses_the_gzip_files_cloud_config_takes_naming_them() {
    let secrets = secrets_dir();
    let output = run_render("worker", &["--format", "ignition"], Some(secrets.path()));
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("spec.files[3].encoding: gzip encodings are not supported"),
        "{stderr}"
    );
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

fn render_file(yaml: &str, role: &str, version: &str, extra: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input.yaml");
    std::fs::write(&path, yaml).unwrap();
    Command::new(BINARY)
        .arg("render")
        .arg(&path)
        .args(["--role", role, "--kubernetes-version", version])
        .args(["--cluster-name", "c1", "--endpoint", "c1.example.com:6443"])
        .args(extra)
        .output()
        .unwrap()
}

const V1BETA1_KCP: &str = r#"apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata:
  name: c1-control-plane
spec:
  replicas: 3
  version: v1.33.1
  machineTemplate:
    infrastructureRef:
      apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
      kind: OpenStackMachineTemplate
      name: c1-control-plane
  kubeadmConfigSpec:
    clusterConfiguration:
      apiServer:
        timeoutForControlPlane: 20m
        extraArgs:
          cloud-provider: external
    initConfiguration:
      nodeRegistration:
        kubeletExtraArgs:
          cloud-provider: external
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: KubeadmConfigTemplate
metadata:
  name: c1-md-0
spec:
  template:
    spec:
      joinConfiguration:
        discovery:
          timeout: 7m
        nodeRegistration:
          kubeletExtraArgs:
            cloud-provider: external
"#;

#[test]
fn v1beta1_objects_render_through_the_conversion_with_their_v1beta1_only_fields() {
    let init = stdout(&render_file(
        V1BETA1_KCP,
        "init",
        "v1.33.1",
        &["--object", "KubeadmControlPlane/c1-control-plane"],
    ));
    assert!(init.contains("- name: cloud-provider\n"), "{init}");
    // v1beta1's apiServer.timeoutForControlPlane, moved by the conversion into the init timeouts.
    assert!(
        init.contains("controlPlaneComponentHealthCheck: 20m0s"),
        "{init}"
    );

    let worker = stdout(&render_file(
        V1BETA1_KCP,
        "worker",
        "v1.33.1",
        &["--object", "c1-md-0"],
    ));
    // v1beta1's discovery.timeout became the join's TLS bootstrap timeout.
    assert!(worker.contains("tlsBootstrap: 7m0s"), "{worker}");
}

#[test]
fn a_file_with_several_objects_needs_object_and_bad_fields_are_named() {
    let output = render_file(V1BETA1_KCP, "worker", "v1.33.1", &[]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("KubeadmControlPlane/c1-control-plane, KubeadmConfigTemplate/c1-md-0"),
        "{stderr}"
    );

    // A v1beta1 list where v1beta1 has a map: the field and its version are named.
    let bad = "apiVersion: bootstrap.cluster.x-k8s.io/v1beta1\nkind: KubeadmConfig\nmetadata: {name: w}\n\
               spec:\n  joinConfiguration:\n    nodeRegistration:\n      kubeletExtraArgs:\n\
               \x20       - {name: a, value: b}\n";
    let output = render_file(bad, "worker", "v1.33.1", &[]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr
            .contains("KubeadmConfig/w: spec.joinConfiguration.nodeRegistration.kubeletExtraArgs"),
        "{stderr}"
    );
}
