//! Cluster certificate Secrets on a real kube-apiserver: generated once, read back unchanged, one set when
//! two controllers race, and Secrets someone else created (RSA, as the Go providers make them) are used,
//! never replaced.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};
use kubeadm_cluster::certificates::{
    self, CertError, CertKind, DEFAULT_CA_VALIDITY_DAYS, Generation, ca_cert_hash,
    lookup_or_generate, lookup_or_generate_with,
};
use kubeadm_cluster::{CertPem, ClusterCertificates};
use testenv::ManagementPlane;

const NAMESPACE: &str = "default";

fn owner(name: &str) -> OwnerReference {
    OwnerReference {
        api_version: "controlplane.cluster.x-k8s.io/v1beta2".into(),
        kind: "KubeadmControlPlane".into(),
        name: name.into(),
        uid: "6f1c9a52-0000-4000-8000-00000000000a".into(),
        block_owner_deletion: Some(true),
        ..OwnerReference::default()
    }
}

fn pem_of(certs: &ClusterCertificates, kind: CertKind) -> &CertPem {
    match kind {
        CertKind::Ca => &certs.ca,
        CertKind::Etcd => &certs.etcd,
        CertKind::Proxy => &certs.proxy,
        CertKind::Sa => &certs.sa,
    }
}

/// The Secrets of `cluster` as stored, by kind.
async fn stored(client: &kube::Client, cluster: &str) -> BTreeMap<CertKind, Secret> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let mut out = BTreeMap::new();
    for kind in CertKind::ALL {
        if let Some(secret) = secrets.get_opt(&kind.secret_name(cluster)).await.unwrap() {
            out.insert(kind, secret);
        }
    }
    out
}

fn resource_versions(secrets: &BTreeMap<CertKind, Secret>) -> BTreeMap<CertKind, String> {
    secrets
        .iter()
        .map(|(k, s)| (*k, s.metadata.resource_version.clone().unwrap()))
        .collect()
}

fn assert_matches_stored(certs: &ClusterCertificates, secrets: &BTreeMap<CertKind, Secret>) {
    for kind in CertKind::ALL {
        let from_server = certificates::from_secret(kind, &secrets[&kind]).unwrap();
        assert_eq!(&from_server, pem_of(certs, kind), "{kind:?}");
    }
}

#[tokio::test]
async fn generates_the_four_secrets_once_then_reads_them() {
    let plane = ManagementPlane::start().await.expect("management plane");
    let client = plane.client().await.unwrap();

    let err = lookup_or_generate(&client, NAMESPACE, "alpha", None)
        .await
        .unwrap_err();
    match &err {
        CertError::Missing { namespace, secrets } => {
            assert_eq!(namespace, NAMESPACE);
            assert_eq!(
                secrets,
                &["alpha-ca", "alpha-etcd", "alpha-proxy", "alpha-sa"]
            );
        }
        other => panic!("expected Missing, got {other}"),
    }
    assert!(stored(&client, "alpha").await.is_empty(), "nothing created");

    let first = lookup_or_generate(
        &client,
        NAMESPACE,
        "alpha",
        Some(&generation(owner("alpha-cp"), DEFAULT_CA_VALIDITY_DAYS)),
    )
    .await
    .unwrap();
    let secrets = stored(&client, "alpha").await;
    assert_eq!(secrets.len(), 4);
    assert_matches_stored(&first, &secrets);
    for (kind, secret) in &secrets {
        assert_eq!(
            secret.type_.as_deref(),
            Some("cluster.x-k8s.io/secret"),
            "{kind:?}"
        );
        assert_eq!(
            secret.metadata.labels.as_ref().unwrap()["cluster.x-k8s.io/cluster-name"],
            "alpha"
        );
        let owners = secret.metadata.owner_references.as_ref().unwrap();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].name, "alpha-cp");
        assert_eq!(owners[0].controller, Some(true));
    }
    let versions = resource_versions(&secrets);

    let second = lookup_or_generate(
        &client,
        NAMESPACE,
        "alpha",
        Some(&generation(owner("alpha-cp"), 0)),
    )
    .await
    .unwrap();
    assert_eq!(
        second, first,
        "a second call returns the stored certificates"
    );
    let read_only = lookup_or_generate(&client, NAMESPACE, "alpha", None)
        .await
        .unwrap();
    assert_eq!(read_only, first);

    // From a copy (a watch-fed store): what it holds is taken as it is, what it lacks is read.
    let mut copy: BTreeMap<String, std::sync::Arc<Secret>> = BTreeMap::new();
    let mut ca_in_copy = secrets[&CertKind::Etcd].clone();
    ca_in_copy.metadata.name = Some("alpha-ca".into());
    copy.insert("alpha-ca".into(), std::sync::Arc::new(ca_in_copy));
    let mixed = lookup_or_generate_with(
        &client,
        |name| copy.get(name).cloned(),
        NAMESPACE,
        "alpha",
        None,
    )
    .await
    .unwrap();
    assert_eq!(mixed.ca, first.etcd, "the copy's CA, not the server's");
    assert_eq!((&mixed.etcd, &mixed.sa), (&first.etcd, &first.sa));
    let ca = certificates::lookup(&client, NAMESPACE, "alpha", CertKind::Ca)
        .await
        .unwrap();
    assert_eq!(ca, first.ca);
    assert_eq!(
        resource_versions(&stored(&client, "alpha").await),
        versions,
        "no secret was written again"
    );
}

#[tokio::test]
async fn concurrent_calls_end_with_one_set_of_secrets() {
    let plane = ManagementPlane::start().await.expect("management plane");
    let client = plane.client().await.unwrap();

    let calls = (0..4).map(|i| {
        let client = client.clone();
        async move {
            lookup_or_generate(
                &client,
                NAMESPACE,
                "beta",
                Some(&generation(owner(&format!("beta-cp-{i}")), 0)),
            )
            .await
        }
    });
    let results: Vec<_> = futures::future::join_all(calls).await;
    let results: Vec<_> = results.into_iter().map(Result::unwrap).collect();
    for result in &results[1..] {
        assert_eq!(result, &results[0], "every caller got the same set");
    }
    let secrets = stored(&client, "beta").await;
    assert_eq!(secrets.len(), 4);
    assert_matches_stored(&results[0], &secrets);
    for secret in secrets.values() {
        let owners = secret.metadata.owner_references.as_ref().unwrap();
        assert_eq!(owners.len(), 1, "the winner's owner only");
        assert!(owners[0].name.starts_with("beta-cp-"));
    }
}

/// An RSA CA and service-account key pair made with openssl, the way the Go providers store them
/// (`RSA PRIVATE KEY`, PKCS#1).
fn rsa_secrets_by_someone_else(cluster: &str, dir: &Path) -> [(CertKind, Secret); 2] {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&["genrsa", "-traditional", "-out", "ca.key", "2048"]);
    openssl(&[
        "req",
        "-x509",
        "-new",
        "-key",
        "ca.key",
        "-subj",
        "/CN=kubernetes",
        "-days",
        "3650",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign",
        "-out",
        "ca.crt",
    ]);
    openssl(&["genrsa", "-traditional", "-out", "sa.key", "2048"]);
    openssl(&["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"]);
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    let secret = |kind: CertKind, cert: Vec<u8>, key: Vec<u8>| Secret {
        metadata: ObjectMeta {
            name: Some(kind.secret_name(cluster)),
            namespace: Some(NAMESPACE.into()),
            labels: Some(BTreeMap::from([(
                "cluster.x-k8s.io/cluster-name".into(),
                cluster.into(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("cluster.x-k8s.io/secret".into()),
        data: Some(BTreeMap::from([
            ("tls.crt".into(), ByteString(cert)),
            ("tls.key".into(), ByteString(key)),
        ])),
        ..Secret::default()
    };
    [
        (
            CertKind::Ca,
            secret(CertKind::Ca, read("ca.crt"), read("ca.key")),
        ),
        (
            CertKind::Sa,
            secret(CertKind::Sa, read("sa.pub"), read("sa.key")),
        ),
    ]
}

#[tokio::test]
async fn secrets_made_by_someone_else_are_read_not_replaced() {
    let plane = ManagementPlane::start().await.expect("management plane");
    let client = plane.client().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let api: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let theirs = rsa_secrets_by_someone_else("gamma", dir.path());
    for (_, secret) in &theirs {
        api.create(&PostParams::default(), secret).await.unwrap();
    }
    let before = stored(&client, "gamma").await;
    assert_eq!(before.len(), 2);

    let err = lookup_or_generate(&client, NAMESPACE, "gamma", None)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CertError::Missing { secrets, .. } if secrets == &["gamma-etcd", "gamma-proxy"]),
        "{err}"
    );
    assert!(err.to_string().contains("gamma-etcd, gamma-proxy"), "{err}");

    let certs = lookup_or_generate(
        &client,
        NAMESPACE,
        "gamma",
        Some(&generation(owner("gamma-cp"), 0)),
    )
    .await
    .unwrap();
    let after = stored(&client, "gamma").await;
    assert_eq!(
        after.len(),
        4,
        "the missing etcd and proxy CAs were created"
    );
    assert_matches_stored(&certs, &after);
    for (kind, secret) in &theirs {
        let data = secret.data.as_ref().unwrap();
        let pem = pem_of(&certs, *kind);
        assert_eq!(
            pem.cert.as_bytes(),
            data["tls.crt"].0.as_slice(),
            "{kind:?}"
        );
        assert_eq!(pem.key.as_bytes(), data["tls.key"].0.as_slice(), "{kind:?}");
        assert_eq!(
            after[kind].metadata.resource_version, before[kind].metadata.resource_version,
            "{kind:?} not written"
        );
        assert!(
            after[kind].metadata.owner_references.is_none(),
            "{kind:?} keeps its (absent) owner"
        );
    }
    assert!(certs.ca.key.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
    assert!(certs.etcd.key.starts_with("-----BEGIN PRIVATE KEY-----"));

    // The pin of their RSA CA, as kubeadm documents it.
    let pin = Command::new("sh")
        .arg("-c")
        .arg(
            "openssl x509 -pubkey -noout -in ca.crt | openssl pkey -pubin -outform der | sha256sum",
        )
        .current_dir(dir.path())
        .output()
        .unwrap();
    let hex = String::from_utf8(pin.stdout).unwrap();
    let hex = hex.split_whitespace().next().unwrap().to_owned();
    assert_eq!(
        ca_cert_hash(&certs.ca.cert).unwrap(),
        format!("sha256:{hex}")
    );
}

/// Missing Secrets generated with `validity_days`, owned by `owner`.
fn generation(owner: OwnerReference, validity_days: u32) -> Generation {
    Generation {
        owner: Some(owner),
        field_manager: "certificates-test",
        validity_days,
        algorithm: certificates::DEFAULT_KEY_ALGORITHM,
    }
}
