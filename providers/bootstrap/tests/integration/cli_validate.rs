//! `bootstrap-manager validate` as a process: checks bootstrap kinds only.

use std::io::Write;
use std::process::{Command, Output, Stdio};

const BINARY: &str = env!("CARGO_BIN_EXE_bootstrap-manager");
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
fn reports_the_invalid_template_and_ignores_other_kinds() {
    let output = validate(&["-f", CLUSTER_TEMPLATE], "");
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        text(&output.stdout),
        format!(
            "{CLUSTER_TEMPLATE}:3: KubeadmConfigTemplate/demo-md-0-1: \
             spec.template.spec.files[1].path: path property must be unique among all files \
             (value: \"/etc/motd\")\n"
        )
    );
    assert_eq!(text(&output.stderr), "1 document checked, 1 problem\n");
}

#[test]
fn valid_input_from_stdin() {
    let config = "apiVersion: bootstrap.cluster.x-k8s.io/v1beta2\nkind: KubeadmConfig\n\
                  metadata: {name: worker-0}\nspec:\n  format: cloud-config\n";
    let output = validate(&["-f", "-"], config);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stdout));
    assert_eq!(text(&output.stdout), "");
    assert_eq!(text(&output.stderr), "1 document checked, no problems\n");
}

#[test]
fn several_files_at_once() {
    let config = "apiVersion: bootstrap.cluster.x-k8s.io/v1beta2\nkind: KubeadmConfig\n\
                  metadata: {name: worker-0}\n";
    let output = validate(&["-f", CLUSTER_TEMPLATE, "-"], config);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(text(&output.stdout).lines().count(), 1);
    assert_eq!(text(&output.stderr), "2 documents checked, 1 problem\n");
}

#[test]
fn unreadable_file_is_a_problem() {
    let output = validate(&["-f", "/nonexistent/cluster.yaml"], "");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stdout).starts_with("/nonexistent/cluster.yaml: cannot read: "),
        "{}",
        text(&output.stdout)
    );
}
