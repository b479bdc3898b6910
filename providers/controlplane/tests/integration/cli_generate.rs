//! `controlplane-manager generate cluster` and `bump-generation` as processes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BINARY: &str = env!("CARGO_BIN_EXE_controlplane-manager");

fn templates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates")
}

fn template() -> String {
    templates_dir()
        .join("cluster-template.yaml")
        .display()
        .to_string()
}

fn example() -> String {
    templates_dir()
        .join("clusterctl.yaml.example")
        .display()
        .to_string()
}

/// Runs the binary with a clean environment of settings: an empty home (no clusterctl.yaml found by
/// default) and only the variables given.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let home = tempfile::tempdir().unwrap();
    let mut command = Command::new(BINARY);
    command
        .args(args)
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn generate_cluster_prints_the_rendered_template() {
    let output = run(
        &[
            "generate",
            "cluster",
            "prod",
            "--from",
            &template(),
            "--config",
            &example(),
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(text(&output.stderr), "");
    let rendered = text(&output.stdout);
    assert!(
        rendered.contains("  name: capi-prod-control-plane-genc01\n"),
        "{rendered}"
    );
    assert!(rendered.contains("  namespace: default\n"));
    assert!(rendered.contains("  replicas: 3\n"));
    assert!(!rendered.contains("${"));

    // The same settings render the same bytes.
    let again = run(
        &[
            "generate",
            "cluster",
            "prod",
            "--from",
            &template(),
            "--config",
            &example(),
        ],
        &[],
    );
    assert_eq!(again.stdout, output.stdout);
}

#[test]
fn the_template_can_come_from_standard_input() {
    use std::io::Write;
    let home = tempfile::tempdir().unwrap();
    let mut child = Command::new(BINARY)
        .args(["generate", "cluster", "prod", "--from", "-"])
        .env_clear()
        .env("HOME", home.path())
        .env("GREETING", "hello")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"name: ${CLUSTER_NAME}\nmessage: ${GREETING} $$HOME ${MISSING:=none}\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        "name: prod\nmessage: hello $HOME none\n"
    );
}

#[test]
fn objects_without_a_namespace_go_to_the_target_namespace() {
    let folder = tempfile::tempdir().unwrap();
    let template = folder.path().join("cluster-template.yaml");
    std::fs::write(
        &template,
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata:\n  name: ${CLUSTER_NAME}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: ${CLUSTER_NAME}-reader\n",
    )
    .unwrap();
    let output = run(
        &[
            "generate",
            "cluster",
            "prod",
            "--from",
            template.to_str().unwrap(),
            "--target-namespace",
            "team-a",
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata:\n  namespace: team-a\n  name: prod\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: prod-reader\n"
    );
}

#[test]
fn flags_win_over_the_environment_which_wins_over_the_file() {
    let output = run(
        &[
            "generate",
            "cluster",
            "prod",
            "--from",
            &template(),
            "--config",
            &example(),
            "--target-namespace",
            "team-a",
            "--kubernetes-version",
            "v1.34.2",
            "--control-plane-machine-count",
            "5",
            "--worker-machine-count",
            "0",
        ],
        &[
            ("KUBERNETES_VERSION", "v1.30.0"),
            ("WORKER_MACHINE_GEN", "genw42"),
            ("CONTROL_PLANE_MACHINE_COUNT", "1"),
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let rendered = text(&output.stdout);
    assert!(rendered.contains("  namespace: team-a\n"));
    assert!(rendered.contains("  version: v1.34.2\n"));
    assert!(!rendered.contains("v1.30.0"));
    assert!(rendered.contains("  replicas: 5\n"));
    assert!(rendered.contains("  replicas: 0\n"));
    assert!(rendered.contains("  name: capi-prod-md-0-genw42\n"));
}

#[test]
fn missing_variables_print_nothing_and_name_every_one() {
    let settings = tempfile::tempdir().unwrap();
    let config = settings.path().join("clusterctl.yaml");
    std::fs::write(&config, "PREFIX: capi\nKUBERNETES_VERSION: v1.33.1\n").unwrap();
    let output = run(
        &[
            "generate",
            "cluster",
            "prod",
            "--from",
            &template(),
            "--config",
            config.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(text(&output.stdout), "");
    let message = text(&output.stderr);
    let template_text = std::fs::read_to_string(template()).unwrap();
    let first_line = |name: &str| {
        template_text
            .lines()
            .position(|line| line.contains(&format!("${{{name}}}")))
            .unwrap()
            + 1
    };
    assert!(
        message.starts_with(&format!(
            "controlplane-manager generate cluster: {}: no value for ",
            template()
        )),
        "{message}"
    );
    for name in [
        "OPENSTACK_CLOUD_YAML_B64",
        "OPENSTACK_CLOUD",
        "OPENSTACK_EXTERNAL_NETWORK_ID",
        "OPENSTACK_DNS_NAMESERVERS",
        "CONTROL_PLANE_MACHINE_GEN",
        "OPENSTACK_CONTROL_PLANE_MACHINE_FLAVOR",
        "OPENSTACK_SSH_KEY_NAME",
        "WORKER_MACHINE_GEN",
        "OPENSTACK_NODE_MACHINE_FLAVOR",
    ] {
        let entry = format!("\n  {}:{}: {name}\n", template(), first_line(name));
        assert!(message.contains(&entry), "{message} lacks {entry:?}");
    }
}

#[test]
fn a_malformed_config_names_file_and_line() {
    let settings = tempfile::tempdir().unwrap();
    let config = settings.path().join("clusterctl.yaml");
    std::fs::write(
        &config,
        "PREFIX: capi\nKUBERNETES_VERSION: [v1.33.1\nWORKER_MACHINE_GEN: genw01\n",
    )
    .unwrap();
    let output = run(
        &[
            "generate",
            "cluster",
            "prod",
            "--from",
            &template(),
            "--config",
            config.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(text(&output.stdout), "");
    let message = text(&output.stderr);
    let prefix = format!(
        "controlplane-manager generate cluster: {}:",
        config.display()
    );
    assert!(message.starts_with(&prefix), "{message}");
    let line: usize = message[prefix.len()..]
        .split(':')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("{message}"));
    assert!((2..=3).contains(&line), "{message}");
}

#[test]
fn bad_cluster_names_are_refused() {
    let output = run(
        &[
            "generate",
            "cluster",
            "Prod_1",
            "--from",
            &template(),
            "--config",
            &example(),
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(text(&output.stdout), "");
    assert!(
        text(&output.stderr).starts_with(
            "controlplane-manager generate cluster: CLUSTER_NAME \"Prod_1\": must be a DNS-1123 subdomain"
        ),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn list_variables_shows_required_and_optional_ones() {
    let output = run(
        &[
            "generate",
            "cluster",
            "prod",
            "--from",
            &template(),
            "--list-variables",
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let listed = text(&output.stdout);
    assert!(
        listed.starts_with("Required Variables:\n  - CONTROL_PLANE_MACHINE_GEN\n"),
        "{listed}"
    );
    assert!(listed.contains("\nOptional Variables:\n"), "{listed}");
    assert!(listed.contains("  - CLUSTER_NAME "), "{listed}");
    assert!(listed.contains("(defaults to \"prod\")"), "{listed}");
    assert!(
        listed.contains("(defaults to \"ubuntu-capi-image-${KUBERNETES_VERSION}\")"),
        "{listed}"
    );
}

#[test]
fn the_default_config_is_read_from_home() {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".cluster-api")).unwrap();
    std::fs::copy(example(), home.path().join(".cluster-api/clusterctl.yaml")).unwrap();
    let output = Command::new(BINARY)
        .args(["generate", "cluster", "prod", "--from", &template()])
        .env_clear()
        .env("HOME", home.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("capi-prod-md-0-genw01"));
}

#[test]
fn bump_generation_counts_up_and_keeps_every_other_byte() {
    let folder = tempfile::tempdir().unwrap();
    let config = folder.path().join("clusterctl.yaml");
    let original = std::fs::read_to_string(example()).unwrap();
    std::fs::write(&config, &original).unwrap();
    let line = |name: &str| {
        original
            .lines()
            .position(|line| line.starts_with(&format!("{name}:")))
            .unwrap()
            + 1
    };

    let output = run(
        &[
            "bump-generation",
            "--control-plane",
            config.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        format!(
            "{}:{}: CONTROL_PLANE_MACHINE_GEN: genc01 -> genc02\n",
            config.display(),
            line("CONTROL_PLANE_MACHINE_GEN")
        )
    );
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        original.replace(
            "CONTROL_PLANE_MACHINE_GEN: genc01",
            "CONTROL_PLANE_MACHINE_GEN: genc02"
        )
    );

    let output = run(
        &["bump-generation", "--workers", config.to_str().unwrap()],
        &[],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(text(&output.stdout).ends_with("WORKER_MACHINE_GEN: genw01 -> genw02\n"));
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        original
            .replace(
                "CONTROL_PLANE_MACHINE_GEN: genc01",
                "CONTROL_PLANE_MACHINE_GEN: genc02"
            )
            .replace("WORKER_MACHINE_GEN: genw01", "WORKER_MACHINE_GEN: genw02")
    );
    // Only the settings file is left in the folder: no temporary file stays behind.
    assert_eq!(std::fs::read_dir(folder.path()).unwrap().count(), 1);

    // The bumped file renders new template names for the workers only.
    let output = run(
        &[
            "generate",
            "cluster",
            "prod",
            "--from",
            &template(),
            "--config",
            config.to_str().unwrap(),
        ],
        &[],
    );
    let rendered = text(&output.stdout);
    assert!(rendered.contains("capi-prod-control-plane-genc02"));
    assert!(rendered.contains("capi-prod-md-0-genw02"));
}

#[test]
fn bump_generation_refuses_a_counter_without_digits_and_writes_nothing() {
    let folder = tempfile::tempdir().unwrap();
    let config = folder.path().join("clusterctl.yaml");
    let original = "# settings\nPREFIX: capi\nWORKER_MACHINE_GEN: genw   # no number\n";
    std::fs::write(&config, original).unwrap();
    let modified = std::fs::metadata(&config).unwrap().modified().unwrap();

    let output = run(
        &["bump-generation", "--workers", config.to_str().unwrap()],
        &[],
    );
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(text(&output.stdout), "");
    assert_eq!(
        text(&output.stderr),
        format!(
            "controlplane-manager bump-generation: {}:3: WORKER_MACHINE_GEN: \"genw\" does not end in \
             digits; a generation counter looks like genc01 or genw01\n",
            config.display()
        )
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), original);
    assert_eq!(
        std::fs::metadata(&config).unwrap().modified().unwrap(),
        modified
    );
    assert_eq!(std::fs::read_dir(folder.path()).unwrap().count(), 1);

    let output = run(
        &[
            "bump-generation",
            "--control-plane",
            config.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stderr).contains("CONTROL_PLANE_MACHINE_GEN is not set"),
        "{}",
        text(&output.stderr)
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), original);

    let output = run(&["bump-generation", config.to_str().unwrap()], &[]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "one of --control-plane and --workers is required"
    );
    let output = run(
        &[
            "bump-generation",
            "--control-plane",
            "--workers",
            config.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(2), "only one of them at a time");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), original);
}
