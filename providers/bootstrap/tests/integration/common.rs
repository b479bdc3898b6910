//! The spec fixture and fixed facts the render tests share.
#![allow(dead_code)] // each test crate uses a different part

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kubeadm_api::bootstrap::v1beta2::{Format, KubeadmConfig, KubeadmConfigSpec};
use kubeadm_bootstrap::render::{
    CertPem, ClusterCertificates, ClusterFacts, JoinFacts, MachineFacts, RenderError, RenderInput,
    Role, render,
};

pub const V1BETA3_VERSION: &str = "v1.30.4";
pub const V1BETA4_VERSION: &str = "v1.33.1";

pub fn fixture_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubeadmconfig.yaml")
}

pub fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// The spec of `tests/fixtures/kubeadmconfig.yaml`.
pub fn fixture_spec() -> KubeadmConfigSpec {
    let text = std::fs::read_to_string(fixture_path()).unwrap();
    let value: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    let config: KubeadmConfig = serde_json::from_value(value).unwrap();
    config.spec
}

pub fn fixture_spec_with_format(format: Format) -> KubeadmConfigSpec {
    let mut spec = KubeadmConfigSpec {
        format: Some(format),
        ..fixture_spec()
    };
    // Cluster API refuses gzip encodings with Ignition; the fixture's gzip file is cloud-init only.
    if format == Format::Ignition {
        spec.files.retain(|f| {
            !matches!(
                f.encoding,
                Some(kubeadm_api::bootstrap::v1beta2::Encoding::Gzip)
                    | Some(kubeadm_api::bootstrap::v1beta2::Encoding::GzipBase64)
            )
        });
    }
    spec
}

fn fake_pem(kind: &str, name: &str) -> String {
    format!("-----BEGIN {kind}-----\nMIIB{name}FakeBase64ForTestsOnly==\n-----END {kind}-----\n")
}

fn pair(name: &str) -> CertPem {
    CertPem {
        cert: fake_pem("CERTIFICATE", name),
        key: fake_pem("RSA PRIVATE KEY", name),
    }
}

pub fn certificates() -> ClusterCertificates {
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

pub fn cluster(kubernetes_version: &str) -> ClusterFacts {
    ClusterFacts {
        name: "prod-eu1".into(),
        kubernetes_version: kubernetes_version.into(),
        control_plane_endpoint: Some("api.prod-eu1.example.com:6443".into()),
        service_subnet: Some("10.96.0.0/12".into()),
        pod_subnet: Some("192.168.0.0/16".into()),
        dns_domain: Some("cluster.local".into()),
        // Ahead of the fixture's machines, as during a control-plane upgrade.
        control_plane_version: Some("v1.36.3".into()),
    }
}

pub fn machine() -> MachineFacts {
    MachineFacts {
        name: "prod-eu1-control-plane-7xkqz".into(),
        generation: Some("3".into()),
    }
}

pub fn join_facts() -> JoinFacts {
    JoinFacts {
        token: "abcdef.0123456789abcdef".into(),
        api_server_endpoint: "api.prod-eu1.example.com:6443".into(),
        ca_cert_hashes: vec![
            "sha256:7c1d0e5e0f2b1f6a7e8d9c0b1a2f3e4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b9a0f".into(),
        ],
    }
}

pub fn secrets() -> BTreeMap<(String, String), String> {
    BTreeMap::from([
        (
            ("prod-eu1-cloud-config".into(), "cloud.conf".into()),
            "[Global]\nauth-url = https://keystone.example.com:5000/v3\nregion = eu1\n".into(),
        ),
        (
            ("prod-eu1-breakglass".into(), "hash".into()),
            "$6$rounds=4096$saltsalt$FakeHashForTestsOnly".into(),
        ),
        (
            ("prod-eu1-fetch-kubeadm".into(), "fetch.sh".into()),
            "#!/bin/bash\nset -euo pipefail\n{{- with .controlPlane }}\n\
             curl -fsSLo /usr/bin/kubeadm https://dl.k8s.io/release/{{ .version }}/bin/linux/amd64/kubeadm\n\
             {{- end }}\n"
                .into(),
        ),
        (
            ("prod-eu1-etcd-restore".into(), "snapshot.db.gz.b64".into()),
            "H4sIAAAAAAACA8vLL1FIVCjOSywozsgvAQDovhXrDgAAAA==".into(),
        ),
        (
            ("prod-eu1-etcd-restore-s3".into(), "download".into()),
            "url https://s3.eu1.example.com/backups/etcd-20261207T030000Z.db.sealed?X-Amz-Signature=00\n\
             stored-sha256 1111111111111111111111111111111111111111111111111111111111111111\n\
             sha256 2222222222222222222222222222222222222222222222222222222222222222\n\
             sealed-header 40\n\
             cipher-key 3333333333333333333333333333333333333333333333333333333333333333\n\
             counter 44444444444444444444444444444444\n\
             mac-key 5555555555555555555555555555555555555555555555555555555555555555\n"
                .into(),
        ),
    ])
}

/// Renders `spec` for `role` with the fixed facts; joins get join facts, every role the certificates.
pub fn render_with(
    spec: &KubeadmConfigSpec,
    role: Role,
    kubernetes_version: &str,
) -> Result<Vec<u8>, RenderError> {
    let cluster = cluster(kubernetes_version);
    let machine = machine();
    let certificates = certificates();
    let join = join_facts();
    let secrets = secrets();
    render(&RenderInput {
        role,
        spec,
        cluster: &cluster,
        machine: &machine,
        // As the controller does: workers get no certificate files, but their CA completes discovery.
        certificates: Some(&certificates),
        join: (role != Role::Init).then_some(&join),
        secrets: &secrets,
    })
}
