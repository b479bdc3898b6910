//! The `<cluster>-kubeconfig` Secret: an admin kubeconfig for the workload cluster with a client certificate
//! signed by the cluster CA, which Cluster API tools and users read, and which this provider renews before
//! the certificate expires.

use std::collections::BTreeMap;

use crate::CertPem;
use crate::certificates::{generate_key, signing_key};
use crate::workload::{KUBECONFIG_KEY, kubeconfig_secret_name};
use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kubeadm_api::bootstrap::v1beta2::EncryptionAlgorithmType;
use kubeadm_api::meta::{CLUSTER_NAME_LABEL, CLUSTER_SECRET_TYPE};
use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, Issuer, KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};
use x509_parser::prelude::{FromDer, X509Certificate};

/// Lifetime of the admin client certificate, as kubeadm and Cluster API use.
pub const CLIENT_CERT_VALIDITY: Duration = Duration::days(365);
/// The certificate is renewed when less than this is left (half its lifetime, as Cluster API does).
pub const RENEW_BEFORE: Duration = Duration::days(365 / 2);
/// Backdating of the certificate, so nodes with a lagging clock accept it.
const CLOCK_SKEW: Duration = Duration::minutes(5);

#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    #[error("the cluster CA in secret {secret} cannot sign: {reason}")]
    Ca { secret: String, reason: String },
    #[error("cannot issue the admin client certificate: {0}")]
    Issue(String),
}

/// Builds the kubeconfig Secret for `cluster` with API server `server` (`https://host:port`).
pub fn secret(
    cluster: &str,
    namespace: &str,
    server: &str,
    ca: &CertPem,
    owner: OwnerReference,
    algorithm: EncryptionAlgorithmType,
    now: OffsetDateTime,
) -> Result<Secret, KubeconfigError> {
    let client = issue_admin_certificate(cluster, ca, algorithm, now)?;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let user = format!("{cluster}-admin");
    let context = format!("{user}@{cluster}");
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {cluster}\n  cluster:\n    server: {server}\n    \
         certificate-authority-data: {ca}\ncontexts:\n- name: {context}\n  context:\n    cluster: {cluster}\n    \
         user: {user}\ncurrent-context: {context}\nusers:\n- name: {user}\n  user:\n    \
         client-certificate-data: {cert}\n    client-key-data: {key}\n",
        ca = b64(&ca.cert),
        cert = b64(&client.cert),
        key = b64(&client.key),
    );
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(kubeconfig_secret_name(cluster)),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                CLUSTER_NAME_LABEL.to_owned(),
                cluster.to_owned(),
            )])),
            owner_references: Some(vec![OwnerReference {
                controller: Some(true),
                block_owner_deletion: Some(true),
                ..owner
            }]),
            ..ObjectMeta::default()
        },
        type_: Some(CLUSTER_SECRET_TYPE.to_owned()),
        data: Some(BTreeMap::from([(
            KUBECONFIG_KEY.to_owned(),
            ByteString(kubeconfig.into_bytes()),
        )])),
        ..Secret::default()
    })
}

/// Whether the client certificate in a kubeconfig Secret must be renewed at `now`: it expires within
/// [`RENEW_BEFORE`], or it cannot be read (a broken kubeconfig is replaced rather than kept).
pub fn needs_renewal(secret: &Secret, now: OffsetDateTime) -> bool {
    match client_certificate_expiry(secret) {
        Some(not_after) => not_after - now < RENEW_BEFORE,
        None => true,
    }
}

/// Expiry of the first `client-certificate-data` in the Secret's kubeconfig.
pub fn client_certificate_expiry(secret: &Secret) -> Option<OffsetDateTime> {
    let data = secret.data.as_ref()?.get(KUBECONFIG_KEY)?;
    let text = std::str::from_utf8(&data.0).ok()?;
    let encoded = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("client-certificate-data:"))?
        .trim();
    let pem = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).ok()?;
    let (_, cert) = X509Certificate::from_der(&pem.contents).ok()?;
    Some(cert.validity().not_after.to_datetime())
}

/// The admin client certificate, with a key of the cluster's `encryptionAlgorithm` as Cluster API
/// issues it.
fn issue_admin_certificate(
    cluster: &str,
    ca: &CertPem,
    algorithm: EncryptionAlgorithmType,
    now: OffsetDateTime,
) -> Result<CertPem, KubeconfigError> {
    let ca_error = |reason: String| KubeconfigError::Ca {
        secret: format!("{cluster}-ca"),
        reason,
    };
    let ca_key = signing_key(&ca.key).map_err(ca_error)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert, ca_key)
        .map_err(|e| ca_error(format!("tls.crt: {e}")))?;
    let key = generate_key(algorithm).map_err(KubeconfigError::Issue)?;
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "system:masters");
    name.push(DnType::CommonName, "kubernetes-admin");
    params.distinguished_name = name;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.not_before = now - CLOCK_SKEW;
    params.not_after = now + CLIENT_CERT_VALIDITY;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|e| KubeconfigError::Issue(e.to_string()))?;
    Ok(CertPem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "controlplane.cluster.x-k8s.io/v1beta2".into(),
            kind: "KubeadmControlPlane".into(),
            name: "cp".into(),
            uid: "uid-1".into(),
            ..Default::default()
        }
    }

    use testenv::pki::openssl;

    fn verify_against_ca(secret: &Secret, ca: &CertPem) {
        let text =
            String::from_utf8(secret.data.as_ref().unwrap()[KUBECONFIG_KEY].0.clone()).unwrap();
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).expect("a valid kubeconfig");
        let user = kubeconfig.auth_infos[0].auth_info.as_ref().unwrap();
        let cert = user.client_certificate_data.as_ref().unwrap();
        let cert = base64::engine::general_purpose::STANDARD
            .decode(cert)
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ca_path = dir.path().join("ca.crt");
        std::fs::write(&ca_path, &ca.cert).unwrap();
        let out = openssl(
            &[
                "verify",
                "-CAfile",
                ca_path.to_str().unwrap(),
                "-purpose",
                "sslclient",
            ],
            &cert,
        );
        assert!(String::from_utf8_lossy(&out).contains("OK"));
        let subject = openssl(&["x509", "-noout", "-subject", "-nameopt", "compat"], &cert);
        let subject = String::from_utf8_lossy(&subject);
        assert!(
            subject.contains("O=system:masters") && subject.contains("CN=kubernetes-admin"),
            "{subject}"
        );
    }

    #[test]
    fn admin_kubeconfig_is_signed_by_our_ca() {
        let ca =
            crate::certificates::generate_kind(crate::certificates::CertKind::Ca, 3650).unwrap();
        let now = OffsetDateTime::now_utc();
        let secret = secret(
            "prod",
            "ns",
            "https://10.0.0.1:6443",
            &ca,
            owner(),
            EncryptionAlgorithmType::Rsa2048,
            now,
        )
        .unwrap();
        assert_eq!(secret.metadata.name.as_deref(), Some("prod-kubeconfig"));
        assert_eq!(secret.type_.as_deref(), Some(CLUSTER_SECRET_TYPE));
        verify_against_ca(&secret, &ca);
        let expiry = client_certificate_expiry(&secret).unwrap();
        assert!((expiry - (now + CLIENT_CERT_VALIDITY)).abs() < Duration::seconds(2));
        assert!(!needs_renewal(&secret, now));
        assert!(!needs_renewal(&secret, now + Duration::days(180)));
        assert!(needs_renewal(&secret, now + Duration::days(184)));
    }

    #[test]
    fn rsa_and_sec1_cas_from_other_tools_can_sign() {
        for (genkey, convert) in [
            (vec!["genrsa", "2048"], vec!["rsa", "-traditional"]),
            (
                vec!["ecparam", "-name", "prime256v1", "-genkey", "-noout"],
                vec!["ec"],
            ),
            // A P-384 key in SEC1 form must not be taken for a P-256 one.
            (
                vec!["ecparam", "-name", "secp384r1", "-genkey", "-noout"],
                vec!["ec"],
            ),
            // PKCS#8 of each kind.
            (vec!["genrsa", "2048"], vec!["pkcs8", "-topk8", "-nocrypt"]),
            (
                vec!["ecparam", "-name", "secp384r1", "-genkey", "-noout"],
                vec!["pkcs8", "-topk8", "-nocrypt"],
            ),
        ] {
            let key = openssl(&genkey, b"");
            let key = openssl(&convert, &key);
            let key = String::from_utf8(key).unwrap();
            assert!(key.contains("PRIVATE KEY-----"), "{key}");
            let dir = tempfile::tempdir().unwrap();
            let key_path = dir.path().join("ca.key");
            std::fs::write(&key_path, &key).unwrap();
            let cert = openssl(
                &[
                    "req",
                    "-x509",
                    "-new",
                    "-key",
                    key_path.to_str().unwrap(),
                    "-subj",
                    "/CN=kubernetes",
                    "-days",
                    "10",
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
                ],
                b"",
            );
            let ca = CertPem {
                cert: String::from_utf8(cert).unwrap(),
                key,
            };
            let secret = secret(
                "prod",
                "ns",
                "https://h:6443",
                &ca,
                owner(),
                EncryptionAlgorithmType::EcdsaP256,
                OffsetDateTime::now_utc(),
            )
            .unwrap();
            verify_against_ca(&secret, &ca);
        }
    }

    #[test]
    fn unreadable_kubeconfigs_are_renewed_and_bad_cas_named() {
        let broken = Secret {
            data: Some(BTreeMap::from([(
                KUBECONFIG_KEY.to_owned(),
                ByteString(b"garbage".to_vec()),
            )])),
            ..Secret::default()
        };
        assert!(needs_renewal(&broken, OffsetDateTime::now_utc()));
        let ca = CertPem {
            cert: "x".into(),
            key: "not a key".into(),
        };
        let err = secret(
            "prod",
            "ns",
            "https://h:6443",
            &ca,
            owner(),
            EncryptionAlgorithmType::EcdsaP256,
            OffsetDateTime::now_utc(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("prod-ca"), "{err}");
    }
}
