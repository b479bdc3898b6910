//! The renderer's rules: specs it refuses (one test per rule, each checking that the error names the
//! field), and small behaviours the goldens do not isolate.

use crate::common;

use kubeadm_api::bootstrap::v1beta2::{
    File, FileContentFormat, FileSource, Format, JoinControlPlane, KubeadmConfigSpec,
    PartitionSpec, PasswdSource, SecretFileSource, SecretPasswdSource,
};
use kubeadm_bootstrap::render::{RenderError, RenderInput, Role, render};

use common::{V1BETA4_VERSION, fixture_spec, fixture_spec_with_format, render_with};

fn render_init(spec: &KubeadmConfigSpec) -> Result<Vec<u8>, RenderError> {
    render_with(spec, Role::Init, V1BETA4_VERSION)
}

fn invalid(field: &str, rule_contains: &str, result: Result<Vec<u8>, RenderError>) {
    match result {
        Err(RenderError::Invalid { field: f, rule }) => {
            assert_eq!(f, field, "rule: {rule}");
            assert!(
                rule.contains(rule_contains),
                "rule {rule:?} lacks {rule_contains:?}"
            );
        }
        Err(other) => panic!("expected Invalid for {field}, got {other:?}"),
        Ok(_) => panic!("expected Invalid for {field}, got a render"),
    }
}

fn secret_source(name: &str, key: &str) -> FileSource {
    FileSource {
        secret: SecretFileSource {
            name: name.into(),
            key: key.into(),
        },
    }
}

fn with_file(file: File) -> KubeadmConfigSpec {
    let mut spec = fixture_spec();
    spec.files.push(file);
    spec
}

#[test]
fn content_and_content_from_are_exclusive() {
    let spec = with_file(File {
        path: "/etc/both".into(),
        content: Some("inline".into()),
        content_from: secret_source("prod-eu1-cloud-config", "cloud.conf"),
        ..File::default()
    });
    invalid(
        "spec.files[4]",
        "content and contentFrom are mutually exclusive",
        render_init(&spec),
    );
}

#[test]
fn content_from_needs_name_and_key() {
    let spec = with_file(File {
        path: "/etc/nokey".into(),
        content_from: secret_source("prod-eu1-cloud-config", ""),
        ..File::default()
    });
    invalid(
        "spec.files[4].contentFrom.secret",
        "name and key are required",
        render_init(&spec),
    );
}

#[test]
fn content_from_secret_must_be_resolved() {
    let spec = with_file(File {
        path: "/etc/missing".into(),
        content_from: secret_source("absent", "data"),
        ..File::default()
    });
    let error = render_init(&spec).unwrap_err();
    assert_eq!(
        error,
        RenderError::MissingSecret {
            field: "spec.files[4].contentFrom.secret".into(),
            secret: "absent".into(),
            key: "data".into(),
        }
    );
    assert!(
        error
            .to_string()
            .starts_with("spec.files[4].contentFrom.secret: secret \"absent\"")
    );
}

#[test]
fn duplicate_paths_are_refused_unless_appending() {
    let duplicate = with_file(File {
        path: "/etc/kubernetes/cloud.conf".into(),
        content: Some("again".into()),
        ..File::default()
    });
    invalid(
        "spec.files[4].path",
        "duplicates spec.files[0].path",
        render_init(&duplicate),
    );

    let appending = with_file(File {
        path: "/etc/kubernetes/cloud.conf".into(),
        content: Some("[Extra]\n".into()),
        append: Some(true),
        ..File::default()
    });
    render_init(&appending).unwrap();
    let mut ignition = fixture_spec_with_format(Format::Ignition);
    ignition.files.push(appending.files[4].clone());
    let output: serde_json::Value =
        serde_json::from_slice(&render_init(&ignition).unwrap()).unwrap();
    // Two entries for the path, the second appending, as Ignition 2.3 takes them.
    let entries: Vec<&serde_json::Value> = output["storage"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["path"] == "/etc/kubernetes/cloud.conf")
        .collect();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1]["append"], true);
}

#[test]
fn files_must_not_replace_generated_ones() {
    let spec = with_file(File {
        path: "/etc/kubernetes/pki/ca.key".into(),
        content: Some("mine".into()),
        ..File::default()
    });
    invalid(
        "spec.files[4].path",
        "written by the bootstrap provider",
        render_init(&spec),
    );

    let spec = with_file(File {
        path: "/run/kubeadm/kubeadm-join-config.yaml".into(),
        content: Some("mine".into()),
        ..File::default()
    });
    invalid(
        "spec.files[4].path",
        "written by the bootstrap provider",
        render_with(&spec, Role::WorkerJoin, V1BETA4_VERSION),
    );
}

#[test]
fn ignition_files_must_not_replace_generated_ones() {
    for path in ["/etc/kubeadm.sh", "/etc/kubeadm.yml"] {
        let mut spec = fixture_spec_with_format(Format::Ignition);
        spec.files.push(File {
            path: path.into(),
            content: Some("mine\n".into()),
            ..File::default()
        });
        let at = format!("spec.files[{}].path", spec.files.len() - 1);
        invalid(&at, "written by the bootstrap provider", render_init(&spec));
    }
}

/// `files[].defer` (Cluster API v1.15, kubernetes-sigs/cluster-api#14182): cloud-init writes the file in
/// its final stage, after users and mounts; real cloud-init's schema accepts what is rendered.
#[test]
fn a_deferred_file_is_written_by_cloud_init_after_users_and_mounts() {
    let spec = with_file(File {
        path: "/home/ops/.ssh/config".into(),
        owner: Some("ops:ops".into()),
        content: Some("Host *\n".into()),
        defer: Some(true),
        ..File::default()
    });
    let rendered = String::from_utf8(render_init(&spec).unwrap()).unwrap();
    let document: serde_json::Value = serde_saphyr::from_str(
        rendered
            .strip_prefix("## template: jinja\n")
            .expect("the Jinja header"),
    )
    .unwrap();
    let files = document["write_files"].as_array().unwrap();
    let deferred: Vec<&str> = files
        .iter()
        .filter(|f| f["defer"] == serde_json::Value::Bool(true))
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(deferred, ["/home/ops/.ssh/config"], "{rendered}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("user-data");
    std::fs::write(
        &file,
        rendered.strip_prefix("## template: jinja\n").unwrap(),
    )
    .unwrap();
    let output = std::process::Command::new("cloud-init")
        .args(["schema", "--config-file"])
        .arg(&file)
        .output()
        .expect("cloud-init is installed by hack/install-testenv.sh");
    assert!(
        output.status.success(),
        "cloud-init schema: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn ignition_refuses_a_deferred_file() {
    let mut spec = fixture_spec_with_format(Format::Ignition);
    spec.files.push(File {
        path: "/etc/late".into(),
        content: Some("late\n".into()),
        defer: Some(true),
        ..File::default()
    });
    let at = format!("spec.files[{}].defer", spec.files.len() - 1);
    invalid(&at, "has no later stage", render_init(&spec));
}

#[test]
fn permissions_must_be_an_octal_mode() {
    let spec = with_file(File {
        path: "/etc/mode".into(),
        permissions: Some("rw-r--r--".into()),
        content: Some("x".into()),
        ..File::default()
    });
    invalid(
        "spec.files[4].permissions",
        "octal file mode",
        render_init(&spec),
    );
}

#[test]
fn template_content_that_does_not_execute_names_the_field() {
    let spec = with_file(File {
        path: "/etc/version".into(),
        content: Some("{{ range .controlPlane.version }}{{ end }}".into()),
        content_format: Some(FileContentFormat::Template),
        ..File::default()
    });
    invalid(
        "spec.files[4].content",
        "the Go template does not execute",
        render_init(&spec),
    );
}

#[test]
fn passwd_and_passwd_from_are_exclusive() {
    let mut spec = fixture_spec();
    spec.users[1].passwd = Some("$6$inline".into());
    invalid(
        "spec.users[1]",
        "passwd and passwdFrom are mutually exclusive",
        render_init(&spec),
    );
}

#[test]
fn passwd_from_secret_must_be_resolved() {
    let mut spec = fixture_spec();
    spec.users[1].passwd_from = PasswdSource {
        secret: SecretPasswdSource {
            name: "absent".into(),
            key: "hash".into(),
        },
    };
    assert!(matches!(
        render_init(&spec),
        Err(RenderError::MissingSecret { field, .. }) if field == "spec.users[1].passwdFrom.secret"
    ));
}

#[test]
fn control_plane_roles_need_certificates() {
    let spec = fixture_spec();
    let cluster = common::cluster(V1BETA4_VERSION);
    let machine = common::machine();
    let join = common::join_facts();
    for role in [Role::Init, Role::ControlPlaneJoin] {
        let result = render(&RenderInput {
            role,
            spec: &spec,
            cluster: &cluster,
            machine: &machine,
            certificates: None,
            join: Some(&join),
            secrets: &common::secrets(),
        });
        assert!(
            matches!(&result, Err(RenderError::MissingInput { what }) if what.contains("certificates")),
            "{role:?}: {result:?}"
        );
    }
}

#[test]
fn workers_must_not_set_join_control_plane() {
    let mut spec = fixture_spec();
    spec.join_configuration.control_plane = Some(JoinControlPlane::default());
    invalid(
        "spec.joinConfiguration.controlPlane",
        "must not be set for a worker",
        render_with(&spec, Role::WorkerJoin, V1BETA4_VERSION),
    );
}

fn discovery_file_spec() -> KubeadmConfigSpec {
    let mut spec = fixture_spec();
    spec.join_configuration.discovery.bootstrap_token = Default::default();
    let file = &mut spec.join_configuration.discovery.file;
    file.kube_config_path = "/etc/kubernetes/discovery.conf".into();
    file.kube_config.user.exec.command = "/usr/local/bin/join-credentials".into();
    spec
}

#[test]
fn discovery_kubeconfig_needs_a_path() {
    let mut spec = discovery_file_spec();
    spec.join_configuration.discovery.file.kube_config_path = String::new();
    invalid(
        "spec.joinConfiguration.discovery.file.kubeConfigPath",
        "must be set",
        render_with(&spec, Role::WorkerJoin, V1BETA4_VERSION),
    );
}

#[test]
fn discovery_kubeconfig_path_must_be_a_file_path() {
    let mut spec = discovery_file_spec();
    spec.join_configuration.discovery.file.kube_config_path =
        "https://config.example.com/discovery.conf".into();
    invalid(
        "spec.joinConfiguration.discovery.file.kubeConfigPath",
        "must be an absolute file path when kubeConfig is set",
        render_with(&spec, Role::WorkerJoin, V1BETA4_VERSION),
    );
}

#[test]
fn discovery_kubeconfig_user_has_one_credential_source() {
    let mut spec = discovery_file_spec();
    spec.join_configuration
        .discovery
        .file
        .kube_config
        .user
        .auth_provider
        .name = "oidc".into();
    invalid(
        "spec.joinConfiguration.discovery.file.kubeConfig.user",
        "only one of authProvider or exec",
        render_with(&spec, Role::WorkerJoin, V1BETA4_VERSION),
    );
}

#[test]
fn discovery_kubeconfig_needs_a_server_without_control_plane_endpoint() {
    let spec = discovery_file_spec();
    let mut cluster = common::cluster(V1BETA4_VERSION);
    cluster.control_plane_endpoint = None;
    let result = render(&RenderInput {
        role: Role::WorkerJoin,
        spec: &spec,
        cluster: &cluster,
        machine: &common::machine(),
        certificates: Some(&common::certificates()),
        join: Some(&common::join_facts()),
        secrets: &common::secrets(),
    });
    invalid(
        "spec.joinConfiguration.discovery.file.kubeConfig.cluster.server",
        "must be set when the Cluster has no controlPlaneEndpoint",
        result,
    );
}

#[test]
fn discovery_kubeconfig_needs_the_ca_when_certificates_are_unknown() {
    let spec = discovery_file_spec();
    let result = render(&RenderInput {
        role: Role::WorkerJoin,
        spec: &spec,
        cluster: &common::cluster(V1BETA4_VERSION),
        machine: &common::machine(),
        certificates: None,
        join: Some(&common::join_facts()),
        secrets: &common::secrets(),
    });
    invalid(
        "spec.joinConfiguration.discovery.file.kubeConfig.cluster.certificateAuthorityData",
        "must be set",
        result,
    );
}

#[test]
fn discovery_kubeconfig_exec_needs_a_command() {
    let mut spec = discovery_file_spec();
    let exec = &mut spec.join_configuration.discovery.file.kube_config.user.exec;
    exec.command = String::new();
    exec.args = vec!["--audience=kubeadm".into()];
    invalid(
        "spec.joinConfiguration.discovery.file.kubeConfig.user.exec.command",
        "must be set when exec is",
        render_with(&spec, Role::WorkerJoin, V1BETA4_VERSION),
    );
}

#[test]
fn discovery_kubeconfig_must_not_replace_a_user_file() {
    let mut spec = discovery_file_spec();
    spec.files[0].path = "/etc/kubernetes/discovery.conf".into();
    invalid(
        "spec.files[0].path",
        "is written from spec.joinConfiguration.discovery.file.kubeConfig",
        render_with(&spec, Role::WorkerJoin, V1BETA4_VERSION),
    );
}

#[test]
fn ignition_additional_config_errors_name_the_key_and_the_rule() {
    let field = "spec.ignition.containerLinuxConfig.additionalConfig";
    for (additional, strict, rule) in [
        ("storage: [", false, "is not valid YAML"),
        (
            "storage:\n  filez: []\n",
            true,
            "storage.filez: is not a key of a Container Linux Config",
        ),
        (
            "storage:\n  files:\n  - path: /etc/x\n    mode: 0644\n    contents: {inline: a, remote: {url: https://x}}\n",
            false,
            "storage.files[0].contents: inline, local and remote are mutually exclusive",
        ),
        (
            "storage:\n  files:\n  - path: /etc/x\n    mode: 9999\n",
            false,
            "storage.files[0].mode: 9999 is not a file mode",
        ),
        (
            "storage:\n  files:\n  - path: etc/x\n    mode: 0644\n",
            false,
            "storage.files[0].path: \"etc/x\" is not an absolute path",
        ),
        (
            "storage:\n  files:\n  - path: /x\n    mode: nope\n",
            false,
            "storage.files[0].mode",
        ),
        ("etcd:\n  version: 3.5.0\n", false, "etcd: is not supported"),
        (
            "storage:\n  disks:\n  - device: /dev/sdb\n    partitions: [{size: 1024}]\n",
            false,
            "storage.disks[0].partitions[0].size",
        ),
        (
            "systemd:\n  units:\n  - name: x.service\n    dropins: [{name: a}]\n",
            false,
            "must be a file name ending in .conf",
        ),
        (
            "storage:\n  files:\n  - path: /etc/x\n",
            true,
            "storage.files[0].mode: is unset",
        ),
    ] {
        let mut spec = fixture_spec_with_format(Format::Ignition);
        spec.ignition.container_linux_config.additional_config = Some(additional.into());
        spec.ignition.container_linux_config.strict = Some(strict);
        invalid(field, rule, render_init(&spec));
    }
}

/// Cluster API writes one partition over the whole disk whatever `diskLayout` says; so do we.
#[test]
fn ignition_partitions_a_disk_as_one_partition() {
    let mut spec = fixture_spec_with_format(Format::Ignition);
    spec.disk_setup.partitions[0].layout = Some(true);
    spec.disk_setup.partitions[0].disk_layout = vec![PartitionSpec {
        percentage: 100,
        partition_type: None,
    }];
    let output: serde_json::Value = serde_json::from_slice(&render_init(&spec).unwrap()).unwrap();
    assert_eq!(
        output["storage"]["disks"][0]["partitions"],
        serde_json::json!([{}])
    );
}

#[test]
fn too_old_kubernetes_for_etcd_learners_is_refused() {
    let error = render_with(&fixture_spec(), Role::ControlPlaneJoin, "v1.26.5").unwrap_err();
    assert!(
        matches!(error, RenderError::LearnerModeUnsupported { .. }),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .starts_with("etcd learner mode is not supported by this etcd version")
    );
}

#[test]
fn unparsable_kubernetes_version_is_refused() {
    let error = render_with(&fixture_spec(), Role::WorkerJoin, "latest").unwrap_err();
    assert!(matches!(error, RenderError::InvalidVersion { value, .. } if value == "latest"));
}

#[test]
fn rendering_is_deterministic() {
    let spec = fixture_spec();
    let first = render_init(&spec).unwrap();
    assert_eq!(first, render_init(&spec).unwrap());
}

#[test]
fn kubeadm_runs_without_verbosity_flag_when_unset() {
    let spec = KubeadmConfigSpec {
        verbosity: None,
        ..fixture_spec()
    };
    let output =
        String::from_utf8(render_with(&spec, Role::WorkerJoin, V1BETA4_VERSION).unwrap()).unwrap();
    assert!(output.contains(
        "  - kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml && echo success > /run/cluster-api/bootstrap-success.complete\n"
    ));
}

#[test]
fn workers_get_no_cluster_secrets_or_patches() {
    let output =
        String::from_utf8(render_with(&fixture_spec(), Role::WorkerJoin, V1BETA4_VERSION).unwrap())
            .unwrap();
    assert!(!output.contains("/etc/kubernetes/pki/"));
    assert!(!output.contains("PRIVATE KEY"));
    assert!(!output.contains("strategic.yaml"));
}

#[test]
fn certificates_go_to_the_configured_directory() {
    let mut spec = fixture_spec();
    spec.cluster_configuration.certificates_dir = Some("/var/lib/kubernetes/pki/".into());
    let output = String::from_utf8(render_init(&spec).unwrap()).unwrap();
    assert!(output.contains("  - path: /var/lib/kubernetes/pki/etcd/ca.key\n"));
    assert!(!output.contains("/etc/kubernetes/pki/"));
}

#[test]
fn cloud_config_carries_contents_and_commands_verbatim() {
    let tricky = [
        "  leading spaces\nno trailing newline",
        "trailing blank lines\n\n\n",
        "key: value # not a comment\n- not a list\n",
        "unicode ✓ and \"quotes\" and 'apostrophes'\ttab\n",
        "",
    ];
    let mut spec = fixture_spec();
    for (i, content) in tricky.iter().enumerate() {
        spec.files.push(File {
            path: format!("/etc/tricky/{i}"),
            content: Some((*content).into()),
            ..File::default()
        });
    }
    spec.post_kubeadm_commands = vec![
        "yes".into(),
        "0640".into(),
        "a: b".into(),
        "{{ v1_hostname }}".into(),
    ];
    let output = String::from_utf8(render_init(&spec).unwrap()).unwrap();
    let document: serde_json::Value = serde_saphyr::from_str(&output).unwrap();

    for (i, content) in tricky.iter().enumerate() {
        let path = format!("/etc/tricky/{i}");
        let file = document["write_files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == path.as_str())
            .unwrap();
        assert_eq!(file["content"], *content, "{path}");
    }
    let runcmd = document["runcmd"].as_array().unwrap();
    let tail: Vec<_> = runcmd[runcmd.len() - 4..]
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(tail, ["yes", "0640", "a: b", "{{ v1_hostname }}"]);
}

#[test]
fn the_webhooks_reserve_exactly_the_paths_the_renderer_writes() {
    use kubeadm_bootstrap::render::{cloudinit, ignition};
    let mut written = vec![
        cloudinit::INIT_CONFIG_PATH,
        cloudinit::JOIN_CONFIG_PATH,
        cloudinit::PLACEHOLDER_PATH,
        ignition::KUBEADM_CONFIG_PATH,
        ignition::KUBEADM_SCRIPT_PATH,
    ];
    let mut reserved = kubeadm_api::bootstrap::validation::BOOTSTRAP_FILE_PATHS.to_vec();
    written.sort();
    reserved.sort();
    assert_eq!(written, reserved);
}
