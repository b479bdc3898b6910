//! Golden outputs: every role × output format × kubeadm API version, rendered from one realistic spec.
//! Review changes as diffs of `tests/golden/`; `UPDATE_GOLDEN=1 cargo test` rewrites the files.

use crate::common;

use kubeadm_api::bootstrap::v1beta2::{Format, KubeadmConfig, KubeadmConfigSpec};
use kubeadm_bootstrap::render::Role;

use common::{V1BETA3_VERSION, V1BETA4_VERSION, fixture_spec_with_format, golden_dir, render_with};

fn check_golden(role: Role, format: Format, kubernetes_version: &str) {
    check_golden_of(
        "",
        &fixture_spec_with_format(format),
        role,
        kubernetes_version,
    );
}

/// Compares the render of `spec` with `tests/golden/<prefix><role>-<api>.<format>`.
fn check_golden_of(prefix: &str, spec: &KubeadmConfigSpec, role: Role, kubernetes_version: &str) {
    let format = spec.format.unwrap_or_default();
    let output = render_with(spec, role, kubernetes_version).unwrap();
    let role_name = match role {
        Role::Init => "init",
        Role::ControlPlaneJoin => "control-plane-join",
        Role::WorkerJoin => "worker-join",
    };
    let api = if kubernetes_version == V1BETA3_VERSION {
        "v1beta3"
    } else {
        "v1beta4"
    };
    let (name, text) = match format {
        Format::CloudConfig => (
            format!("{prefix}{role_name}-{api}.cloud-config.yaml"),
            String::from_utf8(output).unwrap(),
        ),
        // Compact JSON is unreadable in a diff; the golden holds the same document pretty-printed.
        Format::Ignition => {
            let value: serde_json::Value = serde_json::from_slice(&output).unwrap();
            let pretty = serde_json::to_string_pretty(&value).unwrap() + "\n";
            (format!("{prefix}{role_name}-{api}.ignition.json"), pretty)
        }
    };
    let path = golden_dir().join(&name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let golden = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run UPDATE_GOLDEN=1 cargo test", path.display()));
    assert!(
        golden == text,
        "{name} differs from the golden file; if the change is intended, run UPDATE_GOLDEN=1 cargo test \
         and review the diff\n--- rendered ---\n{text}"
    );
}

macro_rules! golden_tests {
    ($($name:ident: $role:expr, $format:expr, $version:expr;)*) => {
        $(
            #[test]
            fn $name() {
                check_golden($role, $format, $version);
            }
        )*
    };
}

golden_tests! {
    init_v1beta3_cloud_config: Role::Init, Format::CloudConfig, V1BETA3_VERSION;
    init_v1beta4_cloud_config: Role::Init, Format::CloudConfig, V1BETA4_VERSION;
    control_plane_join_v1beta3_cloud_config: Role::ControlPlaneJoin, Format::CloudConfig, V1BETA3_VERSION;
    control_plane_join_v1beta4_cloud_config: Role::ControlPlaneJoin, Format::CloudConfig, V1BETA4_VERSION;
    worker_join_v1beta3_cloud_config: Role::WorkerJoin, Format::CloudConfig, V1BETA3_VERSION;
    worker_join_v1beta4_cloud_config: Role::WorkerJoin, Format::CloudConfig, V1BETA4_VERSION;
    init_v1beta3_ignition: Role::Init, Format::Ignition, V1BETA3_VERSION;
    init_v1beta4_ignition: Role::Init, Format::Ignition, V1BETA4_VERSION;
    control_plane_join_v1beta3_ignition: Role::ControlPlaneJoin, Format::Ignition, V1BETA3_VERSION;
    control_plane_join_v1beta4_ignition: Role::ControlPlaneJoin, Format::Ignition, V1BETA4_VERSION;
    worker_join_v1beta3_ignition: Role::WorkerJoin, Format::Ignition, V1BETA3_VERSION;
    worker_join_v1beta4_ignition: Role::WorkerJoin, Format::Ignition, V1BETA4_VERSION;
}

/// Cluster API leaves an empty `spec` out of the object; the CRD defaults it to `{}` (tested on the API
/// server), which renders with every default, as CABPK does.
#[test]
fn config_with_empty_spec_renders_with_defaults() {
    let config: KubeadmConfig = serde_json::from_value(serde_json::json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmConfig",
        "metadata": { "name": "prod-eu1-mp-0", "namespace": "default" },
        "spec": {},
    }))
    .unwrap();
    assert_eq!(config.spec, KubeadmConfigSpec::default());
    check_golden_of("empty-spec-", &config.spec, Role::Init, V1BETA4_VERSION);
    check_golden_of(
        "empty-spec-",
        &config.spec,
        Role::WorkerJoin,
        V1BETA4_VERSION,
    );
}

/// The machine that restores etcd (see `render::etcd_restore`): the snapshot from the restore Secret and
/// the script, run last before `kubeadm init`, with etcd's data directory check ignored.
#[test]
fn etcd_restore_runs_before_kubeadm_init() {
    use kubeadm_bootstrap::render::etcd_restore::{Form, with_etcd_restore};
    let spec = with_etcd_restore(
        &KubeadmConfigSpec::default(),
        "prod-eu1-etcd-restore",
        Form::Inline,
    );
    check_golden_of("etcd-restore-", &spec, Role::Init, V1BETA4_VERSION);
}

/// The same from a snapshot in object storage: the download (URL, checksums, the object's keys) from
/// the restore Secret instead of the snapshot; the script fetches, checks and opens it.
#[test]
fn etcd_restore_from_object_storage_downloads_the_snapshot() {
    use kubeadm_bootstrap::render::etcd_restore::{Form, with_etcd_restore};
    let spec = with_etcd_restore(
        &KubeadmConfigSpec::default(),
        "prod-eu1-etcd-restore-s3",
        Form::Download,
    );
    check_golden_of("etcd-restore-s3-", &spec, Role::Init, V1BETA4_VERSION);
}

/// Kubeconfig-file discovery instead of a bootstrap token: the kubeconfig described in the spec is written
/// to `kubeConfigPath`, its server and CA completed from the Cluster (as CABPK does).
#[test]
fn discovery_kubeconfig_is_written_for_joins() {
    let spec: KubeadmConfigSpec = serde_json::from_value(serde_json::json!({
        "joinConfiguration": {
            "nodeRegistration": { "name": "{{ ds.meta_data.local_hostname }}" },
            "discovery": { "file": {
                "kubeConfigPath": "/etc/kubernetes/discovery.conf",
                "kubeConfig": {
                    "cluster": { "tlsServerName": "api.prod-eu1.internal" },
                    "user": { "exec": {
                        "command": "/usr/local/bin/join-credentials",
                        "args": ["--audience", "kubeadm"],
                        "env": [{ "name": "REGION", "value": "eu1" }],
                    } },
                },
            } },
        },
    }))
    .unwrap();
    check_golden_of("discovery-file-", &spec, Role::WorkerJoin, V1BETA4_VERSION);
}

/// `files[].contentFormat: Template` (Cluster API v1.14): a worker on an older image fetches the kubeadm of
/// the control plane's version (v1.36.3 here, the machine is v1.33.1) before it joins. Inline and Secret
/// contents are rendered; a Raw file is left to cloud-init's jinja.
#[test]
fn template_files_are_rendered_with_the_control_plane_version() {
    for format in [Format::CloudConfig, Format::Ignition] {
        let spec: KubeadmConfigSpec = serde_json::from_value(serde_json::json!({
            "format": format,
            "files": [
                {
                    "path": "/etc/kubeadm-version.env",
                    "contentFormat": "Template",
                    "content": "{{ if .controlPlane }}KUBEADM_VERSION={{ .controlPlane.version }}\n{{ end }}",
                },
                {
                    "path": "/usr/local/bin/fetch-kubeadm.sh",
                    "permissions": "0755",
                    "contentFormat": "Template",
                    "contentFrom": { "secret": { "name": "prod-eu1-fetch-kubeadm", "key": "fetch.sh" } },
                },
                {
                    "path": "/etc/motd",
                    "contentFormat": "Raw",
                    "content": "{{ .controlPlane.version }} is not rendered here\n",
                },
            ],
            "preKubeadmCommands": ["/usr/local/bin/fetch-kubeadm.sh"],
        }))
        .unwrap();
        check_golden_of("template-files-", &spec, Role::WorkerJoin, V1BETA4_VERSION);
    }
}

/// `ignition.containerLinuxConfig.additionalConfig` merged into the Ignition config: new files (octal mode
/// as YAML 1.1 reads it, a verified remote one), an append to a user file, a directory, a link, a drop-in
/// for kubeadm.service and a new unit, a networkd unit, a user and a group.
#[test]
fn ignition_additional_config_is_merged() {
    let mut spec = common::fixture_spec_with_format(Format::Ignition);
    spec.ignition.container_linux_config.additional_config = Some(
        r#"storage:
  files:
    - path: /etc/flatcar/update.conf
      mode: 0644
      contents:
        inline: |
          REBOOT_STRATEGY=off
    - path: /opt/bin/crictl.tar.gz
      mode: 0755
      user: {id: 0}
      contents:
        remote:
          url: https://example.com/crictl.tar.gz
          verification:
            hash: {function: sha512, sum: a4abd4448c49562d828115d13a1fccea927f52b4d5459297f8b43e42da89238bc13626e43dcb38ddb082488927ec904fb42057443983e88585179d50551afe62}
    - path: /etc/motd
      append: true
      contents:
        inline: "Flatcar\n"
  directories:
    - path: /opt/bin
      mode: 0755
  links:
    - path: /etc/systemd/system/multi-user.target.wants/containerd.service
      target: /usr/lib/systemd/system/containerd.service
systemd:
  units:
    - name: kubeadm.service
      dropins:
        - name: 10-flatcar.conf
          contents: |
            [Unit]
            Requires=containerd.service
            After=containerd.service
    - name: locksmithd.service
      mask: true
networkd:
  units:
    - name: 00-eth0.network
      contents: |
        [Match]
        Name=eth0
        [Network]
        DHCP=yes
passwd:
  users:
    - name: core
      ssh_authorized_keys: ["ssh-ed25519 AAAAC3Nza core@example"]
      groups: [sudo]
  groups:
    - name: operators
      gid: 2001
"#
        .into(),
    );
    check_golden_of("additional-config-", &spec, Role::Init, V1BETA4_VERSION);
}
