//! The controller's etcd client certificate: short-lived, signed by the cluster's etcd CA (the
//! `<cluster>-etcd` Secret), reissued before it expires. It never leaves memory.

use kubeadm_cluster::CertPem;
use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
};
use time::{Duration, OffsetDateTime};

use kubeadm_cluster::certificates::signing_key;

/// Subject common name of the certificate; etcd logs it for every client connection.
pub const CLIENT_COMMON_NAME: &str = "kubeadm-controlplane";
/// Lifetime of a client certificate: short, since it is reissued freely and lives only in memory.
pub const CLIENT_CERT_VALIDITY: Duration = Duration::days(1);
/// A certificate with less than this left is replaced.
pub const RENEW_BEFORE: Duration = Duration::hours(1);
/// Backdating, so members with a lagging clock accept the certificate.
const CLOCK_SKEW: Duration = Duration::minutes(5);

#[derive(Debug, thiserror::Error)]
pub enum EtcdTlsError {
    #[error("the etcd CA in secret {secret} cannot sign client certificates: {reason}")]
    Ca { secret: String, reason: String },
    #[error("cannot issue the etcd client certificate for cluster {cluster}: {reason}")]
    Issue { cluster: String, reason: String },
    #[error(
        "the etcd CA in secret {secret} expired at {expired}: etcd refuses every certificate it signed; \
         renew the CA (and the members' certificates) before the control plane can reach etcd again"
    )]
    CaExpired {
        secret: String,
        expired: OffsetDateTime,
    },
}

impl EtcdTlsError {
    /// Short, bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            EtcdTlsError::Ca { .. } => "etcd_ca_invalid",
            EtcdTlsError::Issue { .. } => "etcd_client_cert_issue",
            EtcdTlsError::CaExpired { .. } => "etcd_ca_expired",
        }
    }
}

/// A client certificate and its key, with the CA that etcd's serving certificates chain to.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdClientCert {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
    pub not_after: OffsetDateTime,
}

// The private key must not reach logs through `{:?}`.
impl std::fmt::Debug for EtcdClientCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClientCert")
            .field("fingerprint", &self.fingerprint())
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

impl EtcdClientCert {
    /// Whether the certificate must be replaced at `now`.
    pub fn needs_renewal(&self, now: OffsetDateTime) -> bool {
        self.not_after - now < RENEW_BEFORE
    }

    /// Whether this cached certificate may still be used at `now` for a cluster whose etcd CA is
    /// `ca_pem`: not expired nor close to it, and issued by that very CA (a rotated CA needs a new one).
    pub fn reusable(&self, ca_pem: &str, now: OffsetDateTime) -> bool {
        !self.needs_renewal(now) && self.ca_pem == ca_pem
    }

    /// SHA-256 (hex) over the CA and the certificate: clients built from other material are not reused.
    pub fn fingerprint(&self) -> String {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(self.ca_pem.as_bytes());
        ctx.update(self.cert_pem.as_bytes());
        ctx.finish()
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// Issues a client certificate (ECDSA P-256, clientAuth) for the controller, signed by `etcd_ca`, the CA of
/// `cluster`'s etcd. CA keys in PKCS#8, PKCS#1 (RSA) or SEC1 (EC) form are accepted.
pub fn issue_client_cert(
    cluster: &str,
    etcd_ca: &CertPem,
    now: OffsetDateTime,
) -> Result<EtcdClientCert, EtcdTlsError> {
    let ca_error = |reason: String| EtcdTlsError::Ca {
        secret: format!("{cluster}-etcd"),
        reason,
    };
    let issue_error = |e: rcgen::Error| EtcdTlsError::Issue {
        cluster: cluster.to_owned(),
        reason: e.to_string(),
    };
    let ca_not_after = ca_expiry(&etcd_ca.cert).map_err(ca_error)?;
    if ca_not_after <= now {
        return Err(EtcdTlsError::CaExpired {
            secret: format!("{cluster}-etcd"),
            expired: ca_not_after,
        });
    }
    let ca_key = signing_key(&etcd_ca.key).map_err(ca_error)?;
    let issuer = Issuer::from_ca_cert_pem(&etcd_ca.cert, ca_key)
        .map_err(|e| ca_error(format!("tls.crt: {e}")))?;
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(issue_error)?;
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, CLIENT_COMMON_NAME);
    params.distinguished_name = name;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    // Never past the CA: a chain with an expired CA fails verification.
    let not_after = (now + CLIENT_CERT_VALIDITY).min(ca_not_after);
    params.not_before = now - CLOCK_SKEW;
    params.not_after = not_after;
    let cert = params.signed_by(&key, &issuer).map_err(issue_error)?;
    Ok(EtcdClientCert {
        ca_pem: etcd_ca.cert.clone(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        // X.509 keeps whole seconds; report what the certificate says.
        not_after: not_after.replace_nanosecond(0).unwrap_or(not_after),
    })
}

/// When the CA certificate (PEM) expires.
fn ca_expiry(cert_pem: &str) -> Result<OffsetDateTime, String> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
        .map_err(|e| format!("tls.crt is not PEM: {e}"))?;
    let (_, cert) = X509Certificate::from_der(&pem.contents)
        .map_err(|e| format!("tls.crt is not an X.509 certificate: {e}"))?;
    Ok(cert.validity().not_after.to_datetime())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn openssl(args: &[&str], stdin: &[u8]) -> String {
        String::from_utf8(testenv::pki::openssl(args, stdin)).expect("openssl prints text")
    }

    fn etcd_ca() -> CertPem {
        kubeadm_cluster::certificates::generate_kind(
            kubeadm_cluster::certificates::CertKind::Etcd,
            3650,
        )
        .unwrap()
    }

    #[test]
    fn client_cert_is_a_p256_client_cert_signed_by_the_etcd_ca() {
        let ca = etcd_ca();
        let now = OffsetDateTime::now_utc();
        let cert = issue_client_cert("prod", &ca, now).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ca_path = dir.path().join("ca.crt");
        std::fs::write(&ca_path, &ca.cert).unwrap();
        let verified = openssl(
            &[
                "verify",
                "-CAfile",
                ca_path.to_str().unwrap(),
                "-purpose",
                "sslclient",
            ],
            cert.cert_pem.as_bytes(),
        );
        assert!(verified.contains("OK"), "{verified}");
        let text = openssl(
            &["x509", "-noout", "-text", "-nameopt", "compat"],
            cert.cert_pem.as_bytes(),
        );
        assert!(text.contains("CN=kubeadm-controlplane"), "{text}");
        assert!(text.contains("prime256v1"), "{text}");
        assert!(text.contains("TLS Web Client Authentication"), "{text}");
        assert!(!text.contains("TLS Web Server Authentication"), "{text}");
        assert!(cert.key_pem.contains("PRIVATE KEY"));
        assert_eq!(cert.ca_pem, ca.cert);
        assert!((cert.not_after - (now + CLIENT_CERT_VALIDITY)).abs() < Duration::seconds(1));
    }

    #[test]
    fn renewal_starts_an_hour_before_expiry() {
        let now = OffsetDateTime::now_utc();
        let cert = issue_client_cert("prod", &etcd_ca(), now).unwrap();
        assert!(!cert.needs_renewal(now));
        assert!(!cert.needs_renewal(now + Duration::hours(22)));
        assert!(cert.needs_renewal(now + Duration::hours(23) + Duration::seconds(1)));
    }

    #[test]
    fn a_cached_certificate_is_replaced_when_expired_near_expiry_or_from_another_ca() {
        let ca = etcd_ca();
        let issued = OffsetDateTime::now_utc() - Duration::days(2);
        let expired = issue_client_cert("prod", &ca, issued).unwrap();
        assert!(!expired.reusable(&ca.cert, OffsetDateTime::now_utc()));
        assert!(expired.reusable(&ca.cert, issued + Duration::hours(1)));
        assert!(!expired.reusable(
            &ca.cert,
            issued + Duration::hours(23) + Duration::minutes(1)
        ));
        assert!(!expired.reusable(&etcd_ca().cert, issued + Duration::hours(1)));
    }

    #[test]
    fn an_expired_etcd_ca_is_refused_and_a_short_lived_one_bounds_the_client_cert() {
        let key = openssl(
            &["ecparam", "-name", "prime256v1", "-genkey", "-noout"],
            b"",
        );
        let key = openssl(&["pkcs8", "-topk8", "-nocrypt"], key.as_bytes());
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
                "/CN=etcd-ca",
                "-days",
                "1",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            ],
            b"",
        );
        let ca = CertPem { cert, key };
        let now = OffsetDateTime::now_utc();
        let client = issue_client_cert("prod", &ca, now + Duration::hours(12)).unwrap();
        assert!(client.not_after <= now + Duration::days(1) + Duration::minutes(1));
        let err = issue_client_cert("prod", &ca, now + Duration::days(2)).unwrap_err();
        assert_eq!(err.metric_label(), "etcd_ca_expired");
        let text = err.to_string();
        assert!(
            text.contains("prod-etcd") && text.contains("expired"),
            "{text}"
        );
    }

    #[test]
    fn fingerprints_differ_per_certificate_and_debug_hides_the_key() {
        let ca = etcd_ca();
        let now = OffsetDateTime::now_utc();
        let a = issue_client_cert("prod", &ca, now).unwrap();
        let b = issue_client_cert("prod", &ca, now).unwrap();
        assert_eq!(a.fingerprint(), a.clone().fingerprint());
        assert_ne!(a.fingerprint(), b.fingerprint());
        let debug = format!("{a:?}");
        assert!(!debug.contains("PRIVATE KEY"), "{debug}");
        assert!(debug.contains(&a.fingerprint()), "{debug}");
    }

    #[test]
    fn sec1_and_pkcs1_etcd_cas_can_sign() {
        for (genkey, convert) in [
            (vec!["genrsa", "2048"], vec!["rsa", "-traditional"]),
            (
                vec!["ecparam", "-name", "prime256v1", "-genkey", "-noout"],
                vec!["ec"],
            ),
        ] {
            let key = openssl(&genkey, b"");
            let key = openssl(&convert, key.as_bytes());
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
                    "/CN=etcd-ca",
                    "-days",
                    "10",
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
                ],
                b"",
            );
            let ca = CertPem { cert, key };
            issue_client_cert("prod", &ca, OffsetDateTime::now_utc()).unwrap();
        }
    }

    #[test]
    fn an_unusable_ca_names_the_etcd_secret() {
        let ca = CertPem {
            cert: "x".into(),
            key: "not a key".into(),
        };
        let err = issue_client_cert("prod", &ca, OffsetDateTime::now_utc()).unwrap_err();
        assert!(err.to_string().contains("prod-etcd"), "{err}");
        assert_eq!(err.metric_label(), "etcd_ca_invalid");
    }
}
