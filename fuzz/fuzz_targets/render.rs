//! A KubeadmConfigSpec (JSON or YAML) rendered for every role in both formats. The output must read
//! back: cloud-config as YAML after its `## template: jinja` line, with the user's files, commands
//! and users as written; Ignition as JSON naming the user's files and users. A refusal is a
//! `RenderError` that names a field and a rule.

#![no_main]

use std::collections::BTreeMap;
use std::sync::LazyLock;

use kubeadm_api::bootstrap::v1beta2::{EncryptionAlgorithmType, Format, KubeadmConfigSpec};
use kubeadm_bootstrap::render::{
    ClusterCertificates, ClusterFacts, JoinFacts, MachineFacts, RenderError, RenderInput, Role,
    render,
};
use kubeadm_cluster::certificates::{CertKind, generate_kind_with};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Real CAs, generated once. ECDSA rather than the default RSA, whose key generation takes seconds
/// under the sanitizers; the renderer only copies the PEMs.
static CERTIFICATES: LazyLock<ClusterCertificates> = LazyLock::new(|| {
    let generate = |kind| {
        generate_kind_with(kind, 0, EncryptionAlgorithmType::EcdsaP256)
            .expect("the cluster CAs generate")
    };
    ClusterCertificates {
        ca: generate(CertKind::Ca),
        etcd: generate(CertKind::Etcd),
        proxy: generate(CertKind::Proxy),
        sa: generate(CertKind::Sa),
    }
});

/// The secrets the repository's render fixture reads through `contentFrom` and `passwdFrom`.
static SECRETS: LazyLock<BTreeMap<(String, String), String>> = LazyLock::new(|| {
    BTreeMap::from([
        (
            ("prod-eu1-cloud-config".into(), "cloud.conf".into()),
            "[Global]\nregion = eu1\n".into(),
        ),
        (
            ("prod-eu1-breakglass".into(), "hash".into()),
            "$6$rounds=4096$saltsalt$FakeHash".into(),
        ),
    ])
});

/// kubeadm v1beta3 and v1beta4 configurations.
const VERSIONS: [&str; 2] = ["v1.30.4", "v1.33.1"];

fuzz_target!(|data: &[u8]| {
    let Some(spec) = spec_of(data) else {
        return;
    };
    let cluster = ClusterFacts {
        name: "prod-eu1".into(),
        kubernetes_version: VERSIONS[data.len() % 2].into(),
        control_plane_endpoint: Some("api.prod-eu1.example.com:6443".into()),
        service_subnet: Some("10.96.0.0/12".into()),
        pod_subnet: Some("192.168.0.0/16".into()),
        dns_domain: Some("cluster.local".into()),
        // Template files render with and without a control-plane version.
        control_plane_version: (!data.len().is_multiple_of(3)).then(|| "v1.35.0".into()),
    };
    let machine = MachineFacts {
        name: "prod-eu1-control-plane-7xkqz".into(),
        generation: Some("3".into()),
    };
    let join = JoinFacts {
        token: "abcdef.0123456789abcdef".into(),
        api_server_endpoint: "api.prod-eu1.example.com:6443".into(),
        ca_cert_hashes: vec![
            kubeadm_cluster::certificates::ca_cert_hash(&CERTIFICATES.ca.cert)
                .expect("the generated CA hashes"),
        ],
    };
    for format in [Format::CloudConfig, Format::Ignition] {
        let spec = KubeadmConfigSpec {
            format: Some(format),
            ..spec.clone()
        };
        for role in [Role::Init, Role::ControlPlaneJoin, Role::WorkerJoin] {
            let input = RenderInput {
                role,
                spec: &spec,
                cluster: &cluster,
                machine: &machine,
                certificates: Some(&CERTIFICATES),
                join: (role != Role::Init).then_some(&join),
                secrets: &SECRETS,
            };
            match render(&input) {
                Ok(bytes) if format == Format::CloudConfig => check_cloud_config(&spec, &bytes),
                Ok(bytes) => check_ignition(&spec, &bytes),
                Err(error) => check_error(&error),
            }
        }
    }
});

fn spec_of(data: &[u8]) -> Option<KubeadmConfigSpec> {
    if let Ok(spec) = serde_json::from_slice(data) {
        return Some(spec);
    }
    let value: Value = serde_saphyr::from_str(std::str::from_utf8(data).ok()?).ok()?;
    serde_json::from_value(value).ok()
}

fn check_cloud_config(spec: &KubeadmConfigSpec, bytes: &[u8]) {
    let text = std::str::from_utf8(bytes).expect("cloud-config is UTF-8");
    let (header, document) = text.split_once('\n').expect("a header line");
    assert_eq!(header, "## template: jinja");
    assert!(document.starts_with("#cloud-config\n"), "{text}");
    // cloud-init reads YAML 1.1: `0644` is octal there, and `yes`/`on` are booleans.
    let options = serde_saphyr::options! { legacy_octal_numbers: true };
    let document: Value = serde_saphyr::from_str_with_options(document, options)
        .unwrap_or_else(|e| panic!("cloud-config does not read back as YAML: {e}\n{text}"));

    let strings = |key: &str| -> Vec<String> {
        document[key]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|item| match item {
                        Value::String(s) => s.clone(),
                        other => panic!("{key} holds {other}, not a string\n{text}"),
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let runcmd = strings("runcmd");
    assert_eq!(
        runcmd.len(),
        spec.pre_kubeadm_commands.len() + 1 + spec.post_kubeadm_commands.len()
    );
    assert_eq!(
        runcmd[..spec.pre_kubeadm_commands.len()],
        spec.pre_kubeadm_commands[..]
    );
    assert_eq!(
        runcmd[runcmd.len() - spec.post_kubeadm_commands.len()..],
        spec.post_kubeadm_commands[..]
    );
    assert_eq!(strings("bootcmd"), spec.boot_commands);

    let written = document["write_files"]
        .as_array()
        .expect("write_files is a list");
    for file in &spec.files {
        let Some(content) = &file.content else {
            continue;
        };
        let found = written.iter().any(|w| {
            w["path"].as_str() == Some(file.path.as_str())
                && w["content"].as_str() == Some(content.as_str())
        });
        assert!(
            found,
            "file {:?} with content {content:?} is not written as given\n{text}",
            file.path
        );
    }
    assert_users_named(spec, &document["users"], text);
}

fn check_ignition(spec: &KubeadmConfigSpec, bytes: &[u8]) {
    let config: Value = serde_json::from_slice(bytes).expect("Ignition output is JSON");
    assert_eq!(config["ignition"]["version"], "2.3.0");
    let paths: Vec<&str> = config["storage"]["files"]
        .as_array()
        .expect("storage.files is a list")
        .iter()
        .map(|f| f["path"].as_str().expect("a file has a path"))
        .collect();
    for file in &spec.files {
        assert!(
            paths.contains(&file.path.as_str()),
            "file {:?} is missing",
            file.path
        );
    }
    assert_users_named(spec, &config["passwd"]["users"], "");
}

/// Every user of the spec is in `users` (a list of objects with a `name`) of the output.
fn assert_users_named(spec: &KubeadmConfigSpec, users: &Value, output: &str) {
    let users = users.as_array().map(Vec::as_slice).unwrap_or_default();
    for user in &spec.users {
        let found = users
            .iter()
            .any(|u| u["name"].as_str() == Some(user.name.as_str()));
        assert!(found, "user {:?} is missing\n{output}", user.name);
    }
}

fn check_error(error: &RenderError) {
    assert!(!error.to_string().trim().is_empty());
    match error {
        RenderError::Invalid { field, rule } => {
            assert!(!field.is_empty() && !rule.is_empty(), "{error:?}")
        }
        RenderError::InvalidVersion { field, .. } | RenderError::MissingSecret { field, .. } => {
            assert!(!field.is_empty(), "{error:?}")
        }
        RenderError::LearnerModeUnsupported { reason } => assert!(!reason.is_empty()),
        RenderError::MissingInput { what } => panic!("every input is given, yet: {what}"),
    }
}
