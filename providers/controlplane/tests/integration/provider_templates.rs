//! Cluster templates of the shapes infrastructure providers publish (`tests/fixtures/provider-templates`),
//! each taken as a user takes it: `controlplane-manager generate cluster`, the offline validation of both
//! managers, and a render of every role of every object, checked by cloud-init's schema or by Flatcar's
//! Ignition, with its kubeadm configuration validated by the kubeadm of a current release. A v1beta1 object must give the same spec (so the same bootstrap data) as its v1beta2
//! conversion, with its v1beta1-only fields carried over where Cluster API carries them.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kubeadm_api::bootstrap::GROUP as BOOTSTRAP_GROUP;
use kubeadm_api::bootstrap::v1beta2::{Format, KubeadmConfigSpec};
use kubeadm_api::controlplane::GROUP as CONTROLPLANE_GROUP;
use kubeadm_api::conversion::convert_object;
use kubeadm_bootstrap::render::{
    CertPem, ClusterCertificates, ClusterFacts, JoinFacts, MachineFacts, RenderInput, Role, render,
};
use kubeadm_tools::validate::{check_documents, read_embedded_spec};
use serde_json::Value;

const BINARY: &str = env!("CARGO_BIN_EXE_controlplane-manager");
const KUBERNETES_VERSION: &str = "v1.33.1";
/// The last release whose kubeadm reads v1beta3 only.
const V1BETA3_KUBERNETES_VERSION: &str = "v1.30.4";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/provider-templates")
        .join(name)
}

/// `generate cluster demo` with the settings a user would export for these providers.
fn generate(template: &Path) -> String {
    let home = tempfile::tempdir().unwrap();
    let output = Command::new(BINARY)
        .args(["generate", "cluster", "demo", "--from"])
        .arg(template)
        .args(["--kubernetes-version", KUBERNETES_VERSION])
        .args([
            "--control-plane-machine-count",
            "3",
            "--worker-machine-count",
            "2",
        ])
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("CONTROL_PLANE_ENDPOINT_IP", "10.0.0.10")
        .env(
            "VSPHERE_SSH_AUTHORIZED_KEY",
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK0b user@example",
        )
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "generate cluster {}: {}",
        template.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap()
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn is_ours(document: &Value) -> bool {
    let api_version = document["apiVersion"].as_str().unwrap_or_default();
    let group = api_version.split('/').next().unwrap_or_default();
    let kind = document["kind"].as_str().unwrap_or_default();
    (group == BOOTSTRAP_GROUP && kind.starts_with("KubeadmConfig"))
        || (group == CONTROLPLANE_GROUP && kind.starts_with("KubeadmControlPlane"))
}

fn fake_pem(kind: &str, name: &str) -> String {
    format!("-----BEGIN {kind}-----\nMIIB{name}FakeBase64ForTestsOnly==\n-----END {kind}-----\n")
}

fn certificates() -> ClusterCertificates {
    let pair = |name: &str| CertPem {
        cert: fake_pem("CERTIFICATE", name),
        key: fake_pem("RSA PRIVATE KEY", name),
    };
    ClusterCertificates {
        ca: pair("ClusterCA"),
        etcd: pair("EtcdCA"),
        proxy: pair("FrontProxyCA"),
        sa: CertPem {
            cert: fake_pem("PUBLIC KEY", "ServiceAccount"),
            key: fake_pem("RSA PRIVATE KEY", "ServiceAccount"),
        },
    }
}

/// A value for every Secret the spec refers to, as the controller would have read them.
fn secrets(spec: &KubeadmConfigSpec) -> BTreeMap<(String, String), String> {
    let files = spec.files.iter().map(|f| &f.content_from.secret);
    let mut secrets: BTreeMap<(String, String), String> = files
        .filter(|s| !s.name.is_empty())
        .map(|s| {
            (
                (s.name.clone(), s.key.clone()),
                format!("{{\"from\": \"{}\"}}\n", s.name),
            )
        })
        .collect();
    for user in &spec.users {
        let s = &user.passwd_from.secret;
        if !s.name.is_empty() {
            secrets.insert((s.name.clone(), s.key.clone()), "$6$salt$hash".into());
        }
    }
    secrets
}

fn render_role(spec: &KubeadmConfigSpec, role: Role, version: &str) -> Vec<u8> {
    with_input(spec, role, version, |input| {
        render(input).unwrap_or_else(|e| panic!("{role:?} {version}: {e}"))
    })
}

/// The kubeadm configuration file of the role, as the node's kubeadm reads it.
fn kubeadm_config(spec: &KubeadmConfigSpec, role: Role, version: &str) -> String {
    with_input(spec, role, version, |input| {
        kubeadm_bootstrap::render::kubeadm::kubeadm_config(input)
            .unwrap_or_else(|e| panic!("{role:?} {version}: {e}"))
    })
}

fn with_input<T>(
    spec: &KubeadmConfigSpec,
    role: Role,
    version: &str,
    f: impl FnOnce(&RenderInput) -> T,
) -> T {
    let certificates = certificates();
    let secrets = secrets(spec);
    let input = RenderInput {
        role,
        spec,
        cluster: &ClusterFacts {
            name: "demo".into(),
            kubernetes_version: version.into(),
            control_plane_endpoint: Some("demo.example.com:6443".into()),
            service_subnet: Some("10.96.0.0/12".into()),
            pod_subnet: Some("192.168.0.0/16".into()),
            dns_domain: None,
            control_plane_version: None,
        },
        machine: &MachineFacts {
            name: "demo-control-plane-abcde".into(),
            generation: Some("genc01".into()),
        },
        certificates: Some(&certificates),
        join: Some(&JoinFacts {
            token: "abcdef.0123456789abcdef".into(),
            api_server_endpoint: "demo.example.com:6443".into(),
            ca_cert_hashes: vec![format!("sha256:{}", "ab".repeat(32))],
        }),
        secrets: &secrets,
    };
    f(&input)
}

/// Real kubeadm of a current release reads and validates the configuration (`kubeadm config
/// validate`), as it would before `init` or `join`.
fn check_with_kubeadm(what: &str, config: &str) {
    if let Err(refusal) = testenv::kubeadm::validate_config(config) {
        panic!("{what}: kubeadm refuses the configuration:\n{refusal}\n{config}");
    }
}

/// Runs `command` with `input` on stdin: success and what it printed.
fn run(command: &mut Command, input: &[u8]) -> (bool, String) {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{command:?}: {e}; run hack/install-testenv.sh"));
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// cloud-init's schema check of a cloud-config (without the Jinja header, as cloud-init sees it after
/// rendering the template), or Flatcar's Ignition parsing an Ignition config.
fn check_user_data(what: &str, format: Format, data: &[u8]) {
    let (ok, report) = match format {
        Format::CloudConfig => {
            let text = String::from_utf8(data.to_vec()).unwrap();
            let cloud_config = text
                .strip_prefix("## template: jinja\n")
                .unwrap_or_else(|| panic!("{what}: no Jinja header"));
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("user-data.yaml");
            std::fs::write(&file, cloud_config).unwrap();
            run(
                Command::new("cloud-init")
                    .args(["schema", "--config-file"])
                    .arg(&file),
                b"",
            )
        }
        Format::Ignition => run(
            Command::new(testenv::binaries::ignition_check().unwrap_or_else(|e| panic!("{e}")))
                .arg("validate"),
            data,
        ),
    };
    assert!(
        ok,
        "{what}: refused:\n{report}\n{}",
        String::from_utf8_lossy(data)
    );
}

/// The text of a file in an Ignition config (`data:,` URL decoded).
fn ignition_file(config: &Value, path: &str) -> String {
    testenv::kubeadm::ignition_file(config, path).unwrap_or_else(|| panic!("no {path}"))
}

/// Takes `name` through generate, validate and render; returns every rendered user data by
/// `Kind/name role`, with its format.
fn exercise(name: &str) -> BTreeMap<String, (Format, Vec<u8>)> {
    let generated = generate(&fixture(name));
    let report = check_documents(name, &generated, &[BOOTSTRAP_GROUP, CONTROLPLANE_GROUP]);
    assert!(
        report.problems.is_empty(),
        "{name}: validate found problems:\n{}",
        report
            .problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let ours: Vec<Value> = documents(&generated).into_iter().filter(is_ours).collect();
    assert_eq!(
        report.checked,
        ours.len(),
        "{name}: every object is checked"
    );
    assert!(!ours.is_empty(), "{name}: no objects of our kinds");

    // The control-plane manager's own `validate`, as a process, on the generated file.
    let dir = tempfile::tempdir().unwrap();
    let generated_path = dir.path().join(name);
    std::fs::write(&generated_path, &generated).unwrap();
    let (ok, report) = run(
        Command::new(BINARY)
            .args(["validate", "-f"])
            .arg(&generated_path),
        b"",
    );
    assert!(ok, "{name}: controlplane-manager validate: {report}");

    let mut rendered = BTreeMap::new();
    for document in ours {
        let kind = document["kind"].as_str().unwrap().to_owned();
        let object = format!("{kind}/{}", document["metadata"]["name"].as_str().unwrap());
        let found = read_embedded_spec(name, &generated, Some(&object), "v1beta2")
            .unwrap_or_else(|p| panic!("{name}: {object}: {p:?}"));
        let api_version = document["apiVersion"].as_str().unwrap();
        if api_version.ends_with("/v1beta1") {
            let group = api_version.split('/').next().unwrap();
            let hub = convert_object(document.clone(), &format!("{group}/v1beta2")).unwrap();
            let converted =
                read_embedded_spec(name, &serde_json::to_string(&hub).unwrap(), None, "v1beta2")
                    .unwrap_or_else(|p| panic!("{name}: {object} converted: {p:?}"));
            assert_eq!(
                found.spec, converted.spec,
                "{name}: {object} reads differently from its v1beta2 conversion"
            );
        }
        let roles: &[Role] = if kind.starts_with("KubeadmControlPlane") {
            &[Role::Init, Role::ControlPlaneJoin]
        } else {
            &[Role::WorkerJoin]
        };
        let format = found.spec.format.unwrap_or_default();
        for &role in roles {
            let what = format!("{object} {role:?}");
            let data = render_role(&found.spec, role, KUBERNETES_VERSION);
            check_user_data(&format!("{name}: {what}"), format, &data);
            check_with_kubeadm(
                &format!("{name}: {what}"),
                &kubeadm_config(&found.spec, role, KUBERNETES_VERSION),
            );
            // The older kubeadm configuration API renders too (not schema-checked twice).
            render_role(&found.spec, role, V1BETA3_KUBERNETES_VERSION);
            rendered.insert(what, (format, data));
        }
    }
    rendered
}

fn text(rendered: &BTreeMap<String, (Format, Vec<u8>)>, key: &str) -> String {
    String::from_utf8(rendered[key].1.clone()).unwrap()
}

fn ignition(rendered: &BTreeMap<String, (Format, Vec<u8>)>, key: &str) -> Value {
    let (format, data) = &rendered[key];
    assert_eq!(*format, Format::Ignition, "{key}");
    serde_json::from_slice(data).unwrap()
}

#[test]
fn quickstart_v1beta2() {
    let rendered = exercise("quickstart-v1beta2.yaml");
    let worker = text(&rendered, "KubeadmConfigTemplate/demo-md-0 WorkerJoin");
    assert!(worker.contains("kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml"));
    assert!(text(&rendered, "KubeadmConfig/demo-mp-0 WorkerJoin").contains("kubeadm join"));
}

#[test]
fn aws_like_v1beta1() {
    let rendered = exercise("aws-like-v1beta1.yaml");
    let join = text(
        &rendered,
        "KubeadmControlPlane/demo-control-plane ControlPlaneJoin",
    );
    assert!(join.contains("advertiseAddress: \"::\""), "{join}");
    assert!(
        join.contains("name: \"{{ ds.meta_data.local_hostname }}\""),
        "{join}"
    );
}

#[test]
fn azure_like_v1beta1() {
    let rendered = exercise("azure-like-v1beta1.yaml");
    let init = text(&rendered, "KubeadmControlPlane/demo-control-plane Init");
    // v1beta1's apiServer.timeoutForControlPlane reaches kubeadm as Cluster API moves it.
    assert!(
        init.contains("controlPlaneComponentHealthCheck: 20m0s"),
        "{init}"
    );
    assert!(init.contains("dataDir: /var/lib/etcddisk/etcd"), "{init}");
    assert!(init.contains("replace_fs: ntfs"), "{init}");
    assert!(
        init.contains("kubeadm init --config /run/kubeadm/kubeadm.yaml --v 10"),
        "{init}"
    );
    let windows = text(&rendered, "KubeadmConfigTemplate/demo-md-win WorkerJoin");
    assert!(
        windows.contains("npipe:////./pipe/containerd-containerd"),
        "{windows}"
    );
}

#[test]
fn azure_flatcar_v1beta1() {
    let rendered = exercise("azure-flatcar-v1beta1.yaml");
    let init = ignition(&rendered, "KubeadmControlPlane/demo-control-plane Init");
    assert_eq!(init["ignition"]["version"], "2.3.0");
    // The etcd disk partitioned by the additional config, formatted from diskSetup, mounted by label.
    assert_eq!(
        init["storage"]["disks"][0]["device"],
        "/dev/disk/azure/scsi1/lun0"
    );
    assert_eq!(init["storage"]["filesystems"][0]["name"], "etcd_disk");
    let units: Vec<&str> = init["systemd"]["units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        units,
        [
            "kubeadm.service",
            "var-lib-etcddisk.mount",
            "kubeadm.service"
        ]
    );
    let config = ignition_file(&init, "/etc/kubeadm.yml");
    assert!(
        config.contains("controlPlaneComponentHealthCheck: 20m0s"),
        "{config}"
    );
    assert!(config.contains("@@HOSTNAME@@"), "{config}");
}

#[test]
fn openstack_flatcar_v1beta2() {
    let rendered = exercise("openstack-flatcar-v1beta2.yaml");
    let worker = ignition(&rendered, "KubeadmConfigTemplate/demo-md-0 WorkerJoin");
    let config = ignition_file(&worker, "/etc/kubeadm.yml");
    // Left for the node's envsubst, as written.
    assert!(config.contains("${COREOS_OPENSTACK_HOSTNAME}"), "{config}");
    assert!(
        config.contains("openstack:///${COREOS_OPENSTACK_INSTANCE_UUID}"),
        "{config}"
    );
    let init = ignition(&rendered, "KubeadmControlPlane/demo-control-plane Init");
    assert_eq!(
        init["storage"]["links"][0]["path"],
        "/etc/extensions/kubernetes.raw"
    );
}

#[test]
fn vsphere_like_v1beta2() {
    let rendered = exercise("vsphere-like-v1beta2.yaml");
    let init = text(&rendered, "KubeadmControlPlane/demo Init");
    assert!(init.contains("value: 10.0.0.10"), "{init}");
    assert!(
        init.contains("criSocket: /var/run/containerd/containerd.sock"),
        "{init}"
    );
    let flatcar = ignition(
        &rendered,
        "KubeadmConfigTemplate/demo-md-flatcar WorkerJoin",
    );
    let script = ignition_file(&flatcar, "/etc/kubeadm.sh");
    assert!(
        script.contains("kubeadm join --config /etc/kubeadm.yml"),
        "{script}"
    );
    let hostname = ignition_file(&flatcar, "/opt/set-hostname");
    assert!(
        hostname.contains("echo \"${COREOS_CUSTOM_HOSTNAME}\""),
        "{hostname}"
    );
}

#[test]
fn hetzner_like_v1beta2() {
    let rendered = exercise("hetzner-like-v1beta2.yaml");
    let init = text(&rendered, "KubeadmControlPlane/demo-control-plane Init");
    assert!(init.contains("KUBERNETES_VERSION=$(echo v1.33.1"), "{init}");
}

#[test]
fn metal3_like_v1beta2() {
    let rendered = exercise("metal3-like-v1beta2.yaml");
    let join = text(&rendered, "KubeadmControlPlane/demo ControlPlaneJoin");
    assert!(
        join.contains("{{ ds.meta_data.provisioningIP }}/{{ ds.meta_data.provisioningCIDR }}"),
        "{join}"
    );
}

#[test]
fn scs_clusterclass_v1beta1() {
    let rendered = exercise("scs-clusterclass-v1beta1.yaml");
    let init = text(
        &rendered,
        "KubeadmControlPlaneTemplate/demo-control-plane-genc01 Init",
    );
    assert!(init.contains("provider-id"), "{init}");
    assert!(init.contains("openstack:///'{{ instance_id }}'"), "{init}");
    assert!(rendered.contains_key("KubeadmConfigTemplate/demo-md-0-genw01 WorkerJoin"));
}

#[test]
fn gcp_like_v1beta1() {
    let rendered = exercise("gcp-like-v1beta1.yaml");
    let init = text(&rendered, "KubeadmControlPlane/demo-control-plane Init");
    assert!(
        init.contains("{{ ds.meta_data.local_hostname.split(\\\".\\\")[0] }}")
            || init.contains("{{ ds.meta_data.local_hostname.split(\".\")[0] }}"),
        "{init}"
    );
    let join = text(
        &rendered,
        "KubeadmControlPlane/demo-control-plane ControlPlaneJoin",
    );
    // v1beta1's discovery.timeout became the join's TLS bootstrap timeout.
    assert!(join.contains("tlsBootstrap: 10m0s"), "{join}");
}

/// Every fixture has a test above.
#[test]
fn every_fixture_is_exercised() {
    let source = include_str!("provider_templates.rs");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/provider-templates");
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".yaml") {
            assert!(
                source.contains(&format!("exercise(\"{name}\")")),
                "{name} has no test"
            );
        }
    }
}
