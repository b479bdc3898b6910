//! `controlplane-manager validate` as a process: checks control-plane kinds only.

use std::io::Write;
use std::process::{Command, Output, Stdio};

const BINARY: &str = env!("CARGO_BIN_EXE_controlplane-manager");
const CLUSTER_TEMPLATE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tools/tests/fixtures/cluster-template.yaml"
);

fn validate(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(BINARY)
        .arg("validate")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn checks_both_control_planes_and_ignores_other_kinds() {
    let output = validate(&["-f", CLUSTER_TEMPLATE], "");
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        text(&output.stdout),
        format!(
            "{CLUSTER_TEMPLATE}:4: KubeadmControlPlane/legacy-control-plane: spec.replicas: \
             cannot be an even number when etcd is stacked\n"
        )
    );
    assert_eq!(text(&output.stderr), "2 documents checked, 1 problem\n");
}

#[test]
fn clusterctl_variables_from_stdin() {
    let template = "\
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata:
  name: ${CLUSTER_NAME}-control-plane
spec:
  replicas: ${CONTROL_PLANE_MACHINE_COUNT}
  version: ${KUBERNETES_VERSION}
  machineTemplate:
    spec:
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: DockerMachineTemplate
        name: ${CLUSTER_NAME}-control-plane
";
    let output = validate(&["-f", "-"], template);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        text(&output.stdout),
        "-:1: KubeadmControlPlane/${CLUSTER_NAME}-control-plane: spec.replicas: holds the \
         unresolved variable \"${CONTROL_PLANE_MACHINE_COUNT}\" where a number is needed; render \
         the template first (e.g. with clusterctl generate cluster)\n"
    );

    let rendered = template
        .replace("${CLUSTER_NAME}", "demo")
        .replace("${CONTROL_PLANE_MACHINE_COUNT}", "3")
        .replace("${KUBERNETES_VERSION}", "v1.33.1");
    let output = validate(&["-f", "-"], &rendered);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stdout));
    assert_eq!(text(&output.stderr), "1 document checked, no problems\n");
}

#[test]
fn an_etcd_flag_the_release_removed_is_named_with_its_replacement() {
    let control_plane = |version: &str| {
        format!(
            "\
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata:
  name: demo-control-plane
spec:
  replicas: 3
  version: {version}
  machineTemplate:
    spec:
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: DockerMachineTemplate
        name: demo-control-plane
  kubeadmConfigSpec:
    clusterConfiguration:
      etcd:
        local:
          extraArgs:
            - name: experimental-watch-progress-notify-interval
              value: 5s
"
        )
    };
    let output = validate(&["-f", "-"], &control_plane("v1.36.3"));
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stdout));
    let output = validate(&["-f", "-"], &control_plane("v1.37.2"));
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        text(&output.stdout),
        "-:1: KubeadmControlPlane/demo-control-plane: \
         spec.kubeadmConfigSpec.clusterConfiguration.etcd.local.extraArgs[0].name: etcd 3.7 (which a \
         control plane at v1.37.2 runs) no longer has this flag and would not start; use \
         --watch-progress-notify-interval instead (value: \"experimental-watch-progress-notify-interval\")\n"
    );
}

#[test]
fn requires_a_file() {
    let output = validate(&[], "");
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("--filename"));
}
