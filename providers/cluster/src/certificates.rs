//! Cluster certificates: the three CAs and the service-account key pair that every control-plane node of a
//! Cluster shares, kept in the management cluster as the Secrets `<cluster>-ca`, `<cluster>-etcd`,
//! `<cluster>-proxy` and `<cluster>-sa`.
//!
//! Names, type, label and data keys are those of Cluster API's Go providers, so certificates created by
//! either provider are used by the other. An existing Secret is never replaced: replacing a CA would cut
//! every node of a running cluster off from it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};
use kubeadm_api::bootstrap::v1beta2::{ClusterConfiguration, EncryptionAlgorithmType};
use kubeadm_api::meta::{CLUSTER_NAME_LABEL, CLUSTER_SECRET_TYPE};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
    PKCS_ECDSA_P256_SHA256, PKCS_ECDSA_P384_SHA384, PKCS_RSA_SHA256,
};
use rsa::pkcs8::{EncodePrivateKey, LineEnding};
use time::OffsetDateTime;
use x509_parser::pem::Pem;
use x509_parser::prelude::{FromDer, SubjectPublicKeyInfo, X509Certificate};

/// A PEM certificate and its PEM private key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertPem {
    pub cert: String,
    pub key: String,
}

/// The cluster CAs and the service-account key pair (`sa.cert` holds the public key PEM).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterCertificates {
    pub ca: CertPem,
    pub etcd: CertPem,
    pub proxy: CertPem,
    pub sa: CertPem,
}

impl ClusterCertificates {
    /// The pair of one kind.
    pub fn get(&self, kind: CertKind) -> &CertPem {
        match kind {
            CertKind::Ca => &self.ca,
            CertKind::Etcd => &self.etcd,
            CertKind::Proxy => &self.proxy,
            CertKind::Sa => &self.sa,
        }
    }
}

/// Secret data key of the certificate (for [`CertKind::Sa`]: the public key).
pub const TLS_CRT_KEY: &str = "tls.crt";
/// Secret data key of the private key.
pub const TLS_KEY_KEY: &str = "tls.key";

/// CA lifetime when none is configured (`caCertificateValidityPeriodDays`), as in Cluster API.
pub const DEFAULT_CA_VALIDITY_DAYS: u32 = 3650;

/// A fresh CA is valid from a few minutes in the past, so a node whose clock lags a little accepts it.
const CLOCK_SKEW: time::Duration = time::Duration::minutes(5);

/// Private key PEM blocks kubeadm and kube-apiserver read (PKCS#8, PKCS#1, SEC1).
const PRIVATE_KEY_LABELS: [&str; 3] = ["PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"];

/// One of the cluster-wide key pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CertKind {
    /// The cluster CA (`ca.crt`/`ca.key`).
    Ca,
    /// The etcd CA (`etcd/ca.crt`/`etcd/ca.key`).
    Etcd,
    /// The front-proxy CA (`front-proxy-ca.crt`/`front-proxy-ca.key`).
    Proxy,
    /// The service-account signing key pair (`sa.pub`/`sa.key`); no certificate, `tls.crt` holds the public key.
    Sa,
}

impl CertKind {
    pub const ALL: [CertKind; 4] = [CertKind::Ca, CertKind::Etcd, CertKind::Proxy, CertKind::Sa];

    /// Suffix of the Secret name, as in Cluster API.
    pub fn suffix(self) -> &'static str {
        match self {
            CertKind::Ca => "ca",
            CertKind::Etcd => "etcd",
            CertKind::Proxy => "proxy",
            CertKind::Sa => "sa",
        }
    }

    /// `<cluster>-<suffix>`.
    pub fn secret_name(self, cluster: &str) -> String {
        format!("{cluster}-{}", self.suffix())
    }

    /// kubeadm's file names for the certificate (the public key for [`CertKind::Sa`]) and the key, below
    /// its certificates directory.
    pub fn pki_files(self) -> (&'static str, &'static str) {
        match self {
            CertKind::Ca => ("ca.crt", "ca.key"),
            CertKind::Etcd => ("etcd/ca.crt", "etcd/ca.key"),
            CertKind::Proxy => ("front-proxy-ca.crt", "front-proxy-ca.key"),
            CertKind::Sa => ("sa.pub", "sa.key"),
        }
    }

    /// Subject common name of a generated CA (kubeadm's names); `None` for the service-account key pair.
    pub fn common_name(self) -> Option<&'static str> {
        match self {
            CertKind::Ca => Some("kubernetes"),
            CertKind::Etcd => Some("etcd-ca"),
            CertKind::Proxy => Some("front-proxy-ca"),
            CertKind::Sa => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error(
        "cluster certificate secrets not found in namespace {namespace}: {}; the control-plane provider \
         creates them (this provider does only for a Cluster without controlPlaneRef)",
        secrets.join(", ")
    )]
    Missing {
        namespace: String,
        secrets: Vec<String>,
    },
    #[error("secret {secret} has no key {key}")]
    MissingKey { secret: String, key: &'static str },
    #[error("{what} is not PEM: {reason}")]
    NotPem { what: String, reason: String },
    #[error(
        "{what} is not a CA certificate (basicConstraints CA:TRUE is missing); kubeadm signs with it"
    )]
    NotCa { what: String },
    #[error("{what}: {reason}")]
    Invalid { what: String, reason: String },
    #[error("cannot generate the {what}: {reason}")]
    Generate { what: String, reason: String },
    #[error("secret {namespace}/{name} kept appearing and disappearing while creating it; retry")]
    Contended { namespace: String, name: String },
    #[error("cannot {action} secret {namespace}/{name}: {source}")]
    Kube {
        action: &'static str,
        namespace: String,
        name: String,
        // Boxed: kube::Error is large and this enum is returned by small, hot functions.
        #[source]
        source: Box<kube::Error>,
    },
}

impl CertError {
    /// Short, bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            CertError::Missing { .. } => "certificates_missing",
            CertError::MissingKey { .. }
            | CertError::NotPem { .. }
            | CertError::NotCa { .. }
            | CertError::Invalid { .. } => "certificates_corrupted",
            CertError::Generate { .. } => "certificates_generate",
            CertError::Contended { .. } => "certificates_contended",
            CertError::Kube { .. } => "certificates_api",
        }
    }
}

/// Fresh CAs (kubernetes, etcd-ca, front-proxy-ca) and a service-account key pair.
///
/// `validity_days` 0 means [`DEFAULT_CA_VALIDITY_DAYS`].
pub fn generate(validity_days: u32) -> Result<ClusterCertificates, CertError> {
    Ok(ClusterCertificates {
        ca: generate_kind(CertKind::Ca, validity_days)?,
        etcd: generate_kind(CertKind::Etcd, validity_days)?,
        proxy: generate_kind(CertKind::Proxy, validity_days)?,
        sa: generate_kind(CertKind::Sa, validity_days)?,
    })
}

/// Key algorithm when `clusterConfiguration.encryptionAlgorithm` is unset: RSA-2048, the default of
/// kubeadm and Cluster API, so clusters look the same whichever provider created them.
pub const DEFAULT_KEY_ALGORITHM: EncryptionAlgorithmType = EncryptionAlgorithmType::Rsa2048;

/// A fresh key pair of one kind with [`DEFAULT_KEY_ALGORITHM`]; see [`generate_kind_with`].
pub fn generate_kind(kind: CertKind, validity_days: u32) -> Result<CertPem, CertError> {
    generate_kind_with(kind, validity_days, DEFAULT_KEY_ALGORITHM)
}

/// A fresh key pair of one kind: a self-signed CA, or for [`CertKind::Sa`] a bare key pair, with the key
/// algorithm kubeadm calls `encryptionAlgorithm`. Private keys are PKCS#8 PEM.
pub fn generate_kind_with(
    kind: CertKind,
    validity_days: u32,
    algorithm: EncryptionAlgorithmType,
) -> Result<CertPem, CertError> {
    let failed = |reason: String| CertError::Generate {
        what: describe(kind).to_owned(),
        reason,
    };
    let key = generate_key(algorithm).map_err(|e| failed(format!("{algorithm} key: {e}")))?;
    let Some(common_name) = kind.common_name() else {
        return Ok(CertPem {
            cert: key.public_key_pem(),
            key: key.serialize_pem(),
        });
    };

    let days = if validity_days == 0 {
        DEFAULT_CA_VALIDITY_DAYS
    } else {
        validity_days
    };
    let now = OffsetDateTime::now_utc();
    let not_after = now
        .checked_add(time::Duration::days(i64::from(days)))
        .filter(|t| t.year() <= 9999)
        .ok_or_else(|| {
            failed(format!(
                "a validity of {days} days ends after the year 9999"
            ))
        })?;

    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    // Path length 0 as in Cluster API: these CAs sign only leaf certificates.
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    // No keyEncipherment: RFC 5480 forbids it for EC keys (and a CA never encrypts with its RSA key).
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = now - CLOCK_SKEW;
    params.not_after = not_after;
    let cert = params
        .self_signed(&key)
        .map_err(|e| failed(e.to_string()))?;
    Ok(CertPem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A new private key. ring generates the ECDSA keys; it cannot generate RSA keys (only sign with them), so
/// those come from the `rsa` crate and are handed to ring as PKCS#8.
pub fn generate_key(algorithm: EncryptionAlgorithmType) -> Result<KeyPair, String> {
    let bits = match algorithm {
        EncryptionAlgorithmType::EcdsaP256 => {
            return KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(|e| e.to_string());
        }
        EncryptionAlgorithmType::EcdsaP384 => {
            return KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384).map_err(|e| e.to_string());
        }
        EncryptionAlgorithmType::Rsa2048 => 2048,
        EncryptionAlgorithmType::Rsa3072 => 3072,
        EncryptionAlgorithmType::Rsa4096 => 4096,
    };
    let key =
        rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, bits).map_err(|e| e.to_string())?;
    let pem = key
        .to_pkcs8_pem(LineEnding::LF)
        .map_err(|e| e.to_string())?;
    KeyPair::from_pem_and_sign_algo(&pem, &PKCS_RSA_SHA256).map_err(|e| e.to_string())
}

/// The Secret CAPI stores a certificate in: name `<cluster>-<kind>`, type `cluster.x-k8s.io/secret`, label
/// `cluster.x-k8s.io/cluster-name`, data `tls.crt`/`tls.key`, `owner` as its one controller reference.
pub fn to_secret(
    cluster: &str,
    namespace: &str,
    kind: CertKind,
    pem: &CertPem,
    owner: OwnerReference,
) -> Secret {
    secret(cluster, namespace, kind, pem, Some(owner))
}

fn secret(
    cluster: &str,
    namespace: &str,
    kind: CertKind,
    pem: &CertPem,
    owner: Option<OwnerReference>,
) -> Secret {
    let owner_references = owner.map(|owner| {
        vec![OwnerReference {
            controller: Some(true),
            ..owner
        }]
    });
    Secret {
        metadata: ObjectMeta {
            name: Some(kind.secret_name(cluster)),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                CLUSTER_NAME_LABEL.to_owned(),
                cluster.to_owned(),
            )])),
            owner_references,
            ..ObjectMeta::default()
        },
        type_: Some(CLUSTER_SECRET_TYPE.to_owned()),
        data: Some(BTreeMap::from([
            (
                TLS_CRT_KEY.to_owned(),
                ByteString(pem.cert.clone().into_bytes()),
            ),
            (
                TLS_KEY_KEY.to_owned(),
                ByteString(pem.key.clone().into_bytes()),
            ),
        ])),
        ..Secret::default()
    }
}

/// Reads and checks a certificate Secret: `tls.crt` must be a CA certificate (for [`CertKind::Sa`] a
/// `PUBLIC KEY`), `tls.key` an unencrypted private key. The Secret's type is not checked: users may supply
/// their own CAs.
pub fn from_secret(kind: CertKind, secret: &Secret) -> Result<CertPem, CertError> {
    let name = secret_display_name(secret);
    let cert = secret_text(secret, &name, TLS_CRT_KEY)?;
    let key = secret_text(secret, &name, TLS_KEY_KEY)?;
    let what = |key: &str| format!("secret {name} key {key}");
    match kind {
        CertKind::Sa => check_public_key(&cert, &what(TLS_CRT_KEY))?,
        CertKind::Ca | CertKind::Etcd | CertKind::Proxy => {
            check_ca_certificate(&cert, &what(TLS_CRT_KEY))?
        }
    }
    check_private_key(&key, &what(TLS_KEY_KEY))?;
    Ok(CertPem { cert, key })
}

/// kubeadm's discovery pin of a CA: `sha256:` + hex(SHA-256 of the certificate's DER SubjectPublicKeyInfo),
/// for the first certificate of the PEM.
pub fn ca_cert_hash(ca_cert_pem: &str) -> Result<String, CertError> {
    let what = "CA certificate";
    let der = certificate_blocks(ca_cert_pem, what)?
        .into_iter()
        .next()
        .expect("certificate_blocks returns at least one block");
    spki_hash(&der, what)
}

/// [`ca_cert_hash`] of every certificate in a PEM bundle, in order — what `caCertHashes` lists when a CA is
/// being rotated.
pub fn ca_cert_hashes(ca_cert_pem: &str) -> Result<Vec<String>, CertError> {
    let what = "CA certificate";
    certificate_blocks(ca_cert_pem, what)?
        .iter()
        .map(|der| spki_hash(der, what))
        .collect()
}

/// Reads one certificate Secret of `cluster`; [`CertError::Missing`] if it does not exist.
pub async fn lookup(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    kind: CertKind,
) -> Result<CertPem, CertError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    read(&secrets, namespace, cluster, kind)
        .await?
        .ok_or_else(|| CertError::Missing {
            namespace: namespace.to_owned(),
            secrets: vec![kind.secret_name(cluster)],
        })
}

/// How missing certificate Secrets are made: the CA validity and key algorithm the `clusterConfiguration`
/// asks for, and who creates them (the owner reference and field manager they carry).
#[derive(Clone, Debug)]
pub struct Generation {
    pub owner: Option<OwnerReference>,
    pub field_manager: &'static str,
    pub validity_days: u32,
    pub algorithm: EncryptionAlgorithmType,
}

impl Generation {
    /// As `clusterConfiguration` asks (`caCertificateValidityPeriodDays`, `encryptionAlgorithm`), with
    /// Cluster API's defaults.
    pub fn of(
        settings: &ClusterConfiguration,
        owner: Option<OwnerReference>,
        field_manager: &'static str,
    ) -> Self {
        Self {
            owner,
            field_manager,
            validity_days: settings
                .ca_certificate_validity_period_days
                .and_then(|days| u32::try_from(days).ok())
                .unwrap_or(DEFAULT_CA_VALIDITY_DAYS),
            algorithm: settings
                .encryption_algorithm
                .unwrap_or(DEFAULT_KEY_ALGORITHM),
        }
    }
}

/// Reads the four secrets; when some are missing and `generate` is given, creates the missing ones as it
/// says and returns the full set. Creating is create-if-absent: when another controller created a Secret
/// first, its content is read and used, and an existing Secret is never overwritten. Without `generate`,
/// any missing one is a [`CertError::Missing`] naming them. Existing Secrets are used whatever their key
/// algorithm.
pub async fn lookup_or_generate(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    generate: Option<&Generation>,
) -> Result<ClusterCertificates, CertError> {
    lookup_or_generate_with(client, |_| None, namespace, cluster, generate).await
}

/// [`lookup_or_generate`], taking each Secret from `cached` (by name, e.g. a watch-fed store) when it
/// has it and reading it live otherwise.
pub async fn lookup_or_generate_with(
    client: &kube::Client,
    cached: impl Fn(&str) -> Option<std::sync::Arc<Secret>>,
    namespace: &str,
    cluster: &str,
    generate: Option<&Generation>,
) -> Result<ClusterCertificates, CertError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut found = BTreeMap::new();
    let mut missing = Vec::new();
    for kind in CertKind::ALL {
        let pem = match cached(&kind.secret_name(cluster)) {
            Some(secret) => Some(from_secret(kind, &secret)?),
            None => read(&secrets, namespace, cluster, kind).await?,
        };
        match pem {
            Some(pem) => {
                found.insert(kind, pem);
            }
            None => missing.push(kind),
        }
    }
    if !missing.is_empty() {
        let Some(generation) = generate else {
            return Err(CertError::Missing {
                namespace: namespace.to_owned(),
                secrets: missing.iter().map(|k| k.secret_name(cluster)).collect(),
            });
        };
        for kind in missing {
            let (validity_days, algorithm) = (generation.validity_days, generation.algorithm);
            // RSA keys take up to seconds: off the async workers.
            let pem = tokio::task::spawn_blocking(move || {
                generate_kind_with(kind, validity_days, algorithm)
            })
            .await
            .map_err(|e| CertError::Generate {
                what: describe(kind).to_owned(),
                reason: e.to_string(),
            })??;
            let wanted = secret(cluster, namespace, kind, &pem, generation.owner.clone());
            let manager = generation.field_manager;
            let stored =
                create_or_read(&secrets, manager, namespace, cluster, kind, &wanted, pem).await?;
            found.insert(kind, stored);
        }
    }

    let mut take = |kind| found.remove(&kind).expect("every kind was read or created");
    Ok(ClusterCertificates {
        ca: take(CertKind::Ca),
        etcd: take(CertKind::Etcd),
        proxy: take(CertKind::Proxy),
        sa: take(CertKind::Sa),
    })
}

/// Creates `wanted` unless the Secret exists; returns what the Secret holds afterwards.
async fn create_or_read(
    secrets: &Api<Secret>,
    field_manager: &str,
    namespace: &str,
    cluster: &str,
    kind: CertKind,
    wanted: &Secret,
    pem: CertPem,
) -> Result<CertPem, CertError> {
    let name = kind.secret_name(cluster);
    let params = PostParams {
        field_manager: Some(field_manager.to_owned()),
        ..PostParams::default()
    };
    // A Secret deleted between our failed create and our read is created on the next attempt.
    for _ in 0..3 {
        match secrets.create(&params, wanted).await {
            Ok(_) => {
                tracing::info!(%namespace, secret = %name, "created cluster certificate secret");
                return Ok(pem);
            }
            Err(kube::Error::Api(status)) if status.is_already_exists() => {}
            Err(source) => {
                return Err(CertError::Kube {
                    action: "create",
                    namespace: namespace.to_owned(),
                    name,
                    source: Box::new(source),
                });
            }
        }
        // Created by someone else since we looked: theirs is the one every node gets.
        if let Some(existing) = read(secrets, namespace, cluster, kind).await? {
            tracing::info!(%namespace, secret = %name, "cluster certificate secret was created concurrently; using it");
            return Ok(existing);
        }
    }
    Err(CertError::Contended {
        namespace: namespace.to_owned(),
        name,
    })
}

async fn read(
    secrets: &Api<Secret>,
    namespace: &str,
    cluster: &str,
    kind: CertKind,
) -> Result<Option<CertPem>, CertError> {
    let name = kind.secret_name(cluster);
    let secret = secrets
        .get_opt(&name)
        .await
        .map_err(|source| CertError::Kube {
            action: "read",
            namespace: namespace.to_owned(),
            name,
            source: Box::new(source),
        })?;
    secret.map(|s| from_secret(kind, &s)).transpose()
}

fn describe(kind: CertKind) -> &'static str {
    match kind {
        CertKind::Ca => "cluster CA",
        CertKind::Etcd => "etcd CA",
        CertKind::Proxy => "front-proxy CA",
        CertKind::Sa => "service-account key pair",
    }
}

fn secret_display_name(secret: &Secret) -> String {
    let name = secret.metadata.name.as_deref().unwrap_or("<unnamed>");
    match secret.metadata.namespace.as_deref() {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    }
}

fn secret_text(secret: &Secret, name: &str, key: &'static str) -> Result<String, CertError> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .filter(|value| !value.0.is_empty())
        .ok_or_else(|| CertError::MissingKey {
            secret: name.to_owned(),
            key,
        })?;
    String::from_utf8(bytes.0.clone()).map_err(|_| CertError::NotPem {
        what: format!("secret {name} key {key}"),
        reason: "not UTF-8 text".to_owned(),
    })
}

/// The PEM blocks of `text`; at least one.
fn pem_blocks(text: &str, what: &str) -> Result<Vec<Pem>, CertError> {
    let blocks = Pem::iter_from_buffer(text.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CertError::NotPem {
            what: what.to_owned(),
            reason: e.to_string(),
        })?;
    if blocks.is_empty() {
        return Err(CertError::NotPem {
            what: what.to_owned(),
            reason: "no -----BEGIN block".to_owned(),
        });
    }
    Ok(blocks)
}

/// DER of every `CERTIFICATE` block (other blocks are skipped, as kubeadm does); at least one.
fn certificate_blocks(text: &str, what: &str) -> Result<Vec<Vec<u8>>, CertError> {
    let certificates: Vec<_> = pem_blocks(text, what)?
        .into_iter()
        .filter(|b| b.label == "CERTIFICATE")
        .map(|b| b.contents)
        .collect();
    if certificates.is_empty() {
        return Err(CertError::Invalid {
            what: what.to_owned(),
            reason: "holds no CERTIFICATE block".to_owned(),
        });
    }
    Ok(certificates)
}

fn parse_certificate<'a>(der: &'a [u8], what: &str) -> Result<X509Certificate<'a>, CertError> {
    X509Certificate::from_der(der)
        .map(|(_, cert)| cert)
        .map_err(|e| CertError::Invalid {
            what: what.to_owned(),
            reason: format!("not a valid X.509 certificate: {e}"),
        })
}

fn spki_hash(der: &[u8], what: &str) -> Result<String, CertError> {
    let cert = parse_certificate(der, what)?;
    let digest = ring::digest::digest(&ring::digest::SHA256, cert.public_key().raw);
    let mut hash = String::from("sha256:");
    for byte in digest.as_ref() {
        write!(hash, "{byte:02x}").expect("writing to a String cannot fail");
    }
    Ok(hash)
}

/// The first certificate is the one the private key belongs to; it must be a CA.
fn check_ca_certificate(text: &str, what: &str) -> Result<(), CertError> {
    let blocks = certificate_blocks(text, what)?;
    let cert = parse_certificate(&blocks[0], what)?;
    if !cert.is_ca() {
        return Err(CertError::NotCa {
            what: what.to_owned(),
        });
    }
    Ok(())
}

fn check_public_key(text: &str, what: &str) -> Result<(), CertError> {
    let block = pem_blocks(text, what)?.remove(0);
    if block.label != "PUBLIC KEY" {
        return Err(CertError::Invalid {
            what: what.to_owned(),
            reason: format!(
                "holds a {} PEM block, expected the service-account PUBLIC KEY",
                block.label
            ),
        });
    }
    SubjectPublicKeyInfo::from_der(&block.contents).map_err(|e| CertError::Invalid {
        what: what.to_owned(),
        reason: format!("not a valid public key: {e}"),
    })?;
    Ok(())
}

fn check_private_key(text: &str, what: &str) -> Result<(), CertError> {
    let block = pem_blocks(text, what)?.remove(0);
    if !PRIVATE_KEY_LABELS.contains(&block.label.as_str()) {
        return Err(CertError::Invalid {
            what: what.to_owned(),
            reason: format!(
                "holds a {} PEM block, expected an unencrypted private key ({})",
                block.label,
                PRIVATE_KEY_LABELS.join(", ")
            ),
        });
    }
    Ok(())
}

/// The CA's private key as a signing key. ring reads PKCS#8 only; the PKCS#1 (RSA) and SEC1 (EC) keys that
/// other tools write are wrapped into PKCS#8 first.
pub fn signing_key(pem_text: &str) -> Result<KeyPair, String> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem_text.as_bytes())
        .map_err(|e| format!("tls.key is not PEM: {e}"))?;
    let pkcs8 = match pem.label.as_str() {
        "PRIVATE KEY" => pem.contents.clone(),
        "RSA PRIVATE KEY" => pkcs8_wrap(RSA_ALGORITHM, &pem.contents),
        "EC PRIVATE KEY" => pkcs8_wrap(sec1_algorithm(&pem.contents)?, &pem.contents),
        other => {
            return Err(format!(
                "tls.key holds a {other:?} block, not a private key"
            ));
        }
    };
    let der = rustls_pki_types::PrivatePkcs8KeyDer::from(pkcs8);
    let algorithm = [
        &rcgen::PKCS_ECDSA_P256_SHA256,
        &rcgen::PKCS_ECDSA_P384_SHA384,
        &rcgen::PKCS_RSA_SHA256,
        &rcgen::PKCS_ED25519,
    ];
    algorithm
        .into_iter()
        .find_map(|alg| KeyPair::from_pkcs8_der_and_sign_algo(&der, alg).ok())
        .ok_or_else(|| "tls.key is not an ECDSA P-256/P-384, RSA or Ed25519 key".to_owned())
}

/// DER of AlgorithmIdentifier { rsaEncryption, NULL }.
const RSA_ALGORITHM: &[u8] = &[
    0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
];
/// DER of AlgorithmIdentifier { id-ecPublicKey, prime256v1 }.
const P256_ALGORITHM: &[u8] = &[
    0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48,
    0xce, 0x3d, 0x03, 0x01, 0x07,
];

/// DER of AlgorithmIdentifier { id-ecPublicKey, secp384r1 }.
const P384_ALGORITHM: &[u8] = &[
    0x30, 0x10, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x05, 0x2b, 0x81, 0x04,
    0x00, 0x22,
];
/// OID contents of prime256v1 and secp384r1.
const P256_OID: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const P384_OID: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];

/// The PKCS#8 algorithm of a SEC1 `ECPrivateKey`: its curve is named in the optional `[0] parameters`,
/// else told by the length of the private key (32 bytes P-256, 48 bytes P-384).
fn sec1_algorithm(der: &[u8]) -> Result<&'static [u8], String> {
    let unreadable =
        || "tls.key is an EC PRIVATE KEY block that is not a SEC1 ECPrivateKey".to_owned();
    let (tag, body, _) = der_item(der).ok_or_else(unreadable)?;
    if tag != 0x30 {
        return Err(unreadable());
    }
    let mut rest = body;
    let mut private_len = None;
    while !rest.is_empty() {
        let (tag, content, next) = der_item(rest).ok_or_else(unreadable)?;
        match tag {
            0x04 => private_len = Some(content.len()),
            0xa0 => {
                let (oid_tag, oid, _) = der_item(content).ok_or_else(unreadable)?;
                return match (oid_tag, oid) {
                    (0x06, P256_OID) => Ok(P256_ALGORITHM),
                    (0x06, P384_OID) => Ok(P384_ALGORITHM),
                    _ => Err("tls.key is an EC key on a curve other than P-256 or P-384".into()),
                };
            }
            _ => {}
        }
        rest = next;
    }
    match private_len {
        Some(32) => Ok(P256_ALGORITHM),
        Some(48) => Ok(P384_ALGORITHM),
        _ => Err("tls.key is an EC key on a curve other than P-256 or P-384".into()),
    }
}

/// One DER item: tag, contents and the bytes after it.
fn der_item(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let len = rest[..count]
            .iter()
            .fold(0usize, |len, &b| (len << 8) | usize::from(b));
        (len, &rest[count..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// PrivateKeyInfo { version 0, algorithm, OCTET STRING key }.
fn pkcs8_wrap(algorithm: &[u8], key: &[u8]) -> Vec<u8> {
    let mut body = vec![0x02, 0x01, 0x00];
    body.extend_from_slice(algorithm);
    body.push(0x04);
    der_length(key.len(), &mut body);
    body.extend_from_slice(key);
    let mut out = vec![0x30];
    der_length(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}

fn der_length(len: usize, out: &mut Vec<u8>) {
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend_from_slice(&bytes);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::process::{Command, Stdio};

    use x509_parser::prelude::X509Certificate;

    use super::*;

    fn openssl(args: &[&str], stdin: &[u8]) -> Vec<u8> {
        run("openssl", args, stdin)
    }

    fn run(program: &str, args: &[&str], stdin: &[u8]) -> Vec<u8> {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{program} runs: {e}"));
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    fn der_of(pem: &str) -> Vec<u8> {
        Pem::iter_from_buffer(pem.as_bytes())
            .next()
            .unwrap()
            .unwrap()
            .contents
    }

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "bootstrap.cluster.x-k8s.io/v1beta2".into(),
            kind: "KubeadmConfig".into(),
            name: "cp-0".into(),
            uid: "2b6a4f1e-0000-4000-8000-000000000001".into(),
            ..OwnerReference::default()
        }
    }

    fn leaf_certificate() -> CertPem {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(vec!["node-0".to_owned()]).unwrap();
        CertPem {
            cert: params.self_signed(&key).unwrap().pem(),
            key: key.serialize_pem(),
        }
    }

    #[test]
    fn secret_names_follow_cluster_api() {
        let names: Vec<_> = CertKind::ALL
            .iter()
            .map(|k| k.secret_name("prod-a"))
            .collect();
        assert_eq!(
            names,
            ["prod-a-ca", "prod-a-etcd", "prod-a-proxy", "prod-a-sa"]
        );
    }

    #[test]
    fn generated_cas_are_rsa_ca_certificates_with_kubeadm_names() {
        let before = OffsetDateTime::now_utc().unix_timestamp();
        let certs = generate(DEFAULT_CA_VALIDITY_DAYS).unwrap();
        let after = OffsetDateTime::now_utc().unix_timestamp();
        for (pem, cn) in [
            (&certs.ca, "kubernetes"),
            (&certs.etcd, "etcd-ca"),
            (&certs.proxy, "front-proxy-ca"),
        ] {
            let der = der_of(&pem.cert);
            let (_, cert) = X509Certificate::from_der(&der).unwrap();
            let names: Vec<_> = cert
                .subject()
                .iter_common_name()
                .map(|n| n.as_str().unwrap())
                .collect();
            assert_eq!(names, [cn]);
            assert_eq!(cert.subject(), cert.issuer(), "{cn} is self-signed");
            let constraints = cert.basic_constraints().unwrap().unwrap().value;
            assert!(constraints.ca, "{cn} has CA:TRUE");
            assert_eq!(constraints.path_len_constraint, Some(0));
            let usage = cert.key_usage().unwrap().unwrap().value;
            assert!(usage.key_cert_sign() && usage.digital_signature());
            assert!(!usage.key_encipherment());
            assert_eq!(
                cert.public_key().algorithm.algorithm.to_id_string(),
                "1.2.840.113549.1.1.1",
                "{cn} has an RSA key"
            );

            let not_before = cert.validity().not_before.timestamp();
            let not_after = cert.validity().not_after.timestamp();
            assert!(not_before <= before && not_before >= before - 5 * 60 - 1);
            let ten_years = i64::from(DEFAULT_CA_VALIDITY_DAYS) * 86_400;
            assert!(not_after >= before + ten_years && not_after <= after + ten_years);

            let key = der_of(&pem.key);
            assert!(pem.key.starts_with("-----BEGIN PRIVATE KEY-----"));
            assert!(!key.is_empty());
        }
        assert_ne!(certs.ca.cert, certs.etcd.cert, "each CA has its own key");
    }

    #[test]
    fn openssl_accepts_generated_cas_as_strict_trust_anchors_with_their_keys() {
        let certs = generate(30).unwrap();
        let dir = tempfile::tempdir().unwrap();
        for (name, pem) in [
            ("ca", &certs.ca),
            ("etcd", &certs.etcd),
            ("proxy", &certs.proxy),
        ] {
            let path = dir.path().join(format!("{name}.crt"));
            std::fs::write(&path, &pem.cert).unwrap();
            let path = path.to_str().unwrap();
            let verified = openssl(&["verify", "-x509_strict", "-CAfile", path, path], b"");
            assert!(String::from_utf8_lossy(&verified).contains(": OK"));
            let cert_key = openssl(&["x509", "-pubkey", "-noout"], pem.cert.as_bytes());
            let private_key_pub = openssl(&["pkey", "-pubout"], pem.key.as_bytes());
            assert_eq!(
                cert_key, private_key_pub,
                "{name}: key belongs to the certificate"
            );
        }
    }

    #[test]
    fn every_encryption_algorithm_gives_a_ca_openssl_verifies_with_that_key() {
        use EncryptionAlgorithmType::*;
        for (algorithm, openssl_says) in [
            (EcdsaP256, "256 bit"),
            (EcdsaP384, "384 bit"),
            (Rsa2048, "2048 bit"),
            (Rsa3072, "3072 bit"),
            (Rsa4096, "4096 bit"),
        ] {
            let ca = generate_kind_with(CertKind::Ca, 30, algorithm).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("ca.crt");
            std::fs::write(&path, &ca.cert).unwrap();
            let path = path.to_str().unwrap();
            let verified = openssl(&["verify", "-x509_strict", "-CAfile", path, path], b"");
            assert!(
                String::from_utf8_lossy(&verified).contains(": OK"),
                "{algorithm}"
            );
            let text = openssl(&["x509", "-noout", "-text"], ca.cert.as_bytes());
            let text = String::from_utf8_lossy(&text);
            assert!(text.contains(openssl_says), "{algorithm}: {text}");
            let rsa = matches!(algorithm, Rsa2048 | Rsa3072 | Rsa4096);
            assert_eq!(text.contains("rsaEncryption"), rsa, "{algorithm}: {text}");
            let cert_key = openssl(&["x509", "-pubkey", "-noout"], ca.cert.as_bytes());
            let private_key_pub = openssl(&["pkey", "-pubout"], ca.key.as_bytes());
            assert_eq!(
                cert_key, private_key_pub,
                "{algorithm}: key belongs to the certificate"
            );
            assert!(
                ca.key.starts_with("-----BEGIN PRIVATE KEY-----"),
                "{algorithm}"
            );

            let sa = generate_kind_with(CertKind::Sa, 0, algorithm).unwrap();
            let derived = openssl(&["pkey", "-pubout"], sa.key.as_bytes());
            assert_eq!(String::from_utf8(derived).unwrap(), sa.cert, "{algorithm}");
        }
    }

    #[test]
    fn without_encryption_algorithm_keys_are_rsa_2048_as_kubeadm_makes_them() {
        let ca = generate_kind(CertKind::Ca, 30).unwrap();
        let text = openssl(&["x509", "-noout", "-text"], ca.cert.as_bytes());
        let text = String::from_utf8_lossy(&text);
        assert!(
            text.contains("rsaEncryption") && text.contains("2048 bit"),
            "{text}"
        );
    }

    #[test]
    fn validity_days_set_not_after_and_zero_means_default() {
        let now = OffsetDateTime::now_utc().unix_timestamp();
        for (days, expected) in [(30, 30), (0, DEFAULT_CA_VALIDITY_DAYS)] {
            let pem = generate_kind(CertKind::Ca, days).unwrap();
            let der = der_of(&pem.cert);
            let (_, cert) = X509Certificate::from_der(&der).unwrap();
            let not_after = cert.validity().not_after.timestamp();
            let wanted = now + i64::from(expected) * 86_400;
            assert!((not_after - wanted).abs() < 60, "{days} days");
        }
        let too_long = generate_kind(CertKind::Ca, u32::MAX).unwrap_err();
        assert!(too_long.to_string().contains("year 9999"), "{too_long}");
    }

    #[test]
    fn service_account_pair_is_a_public_key_and_its_private_key() {
        let sa = generate_kind(CertKind::Sa, 0).unwrap();
        assert!(sa.cert.starts_with("-----BEGIN PUBLIC KEY-----"));
        let derived = openssl(&["pkey", "-pubout"], sa.key.as_bytes());
        assert_eq!(String::from_utf8(derived).unwrap(), sa.cert);
    }

    #[test]
    fn secret_round_trip() {
        let certs = generate(0).unwrap();
        for (kind, pem) in [
            (CertKind::Ca, &certs.ca),
            (CertKind::Etcd, &certs.etcd),
            (CertKind::Proxy, &certs.proxy),
            (CertKind::Sa, &certs.sa),
        ] {
            let secret = to_secret("prod-a", "team-a", kind, pem, owner());
            assert_eq!(
                secret.metadata.name.as_deref(),
                Some(kind.secret_name("prod-a").as_str())
            );
            assert_eq!(secret.metadata.namespace.as_deref(), Some("team-a"));
            assert_eq!(secret.type_.as_deref(), Some("cluster.x-k8s.io/secret"));
            assert_eq!(
                secret.metadata.labels.as_ref().unwrap()["cluster.x-k8s.io/cluster-name"],
                "prod-a"
            );
            let owners = secret.metadata.owner_references.as_ref().unwrap();
            assert_eq!(owners.len(), 1);
            assert_eq!(owners[0].controller, Some(true));
            assert_eq!(owners[0].name, "cp-0");
            let keys: Vec<_> = secret.data.as_ref().unwrap().keys().collect();
            assert_eq!(keys, ["tls.crt", "tls.key"]);
            assert_eq!(&from_secret(kind, &secret).unwrap(), pem);
        }
    }

    fn with_data(cert: Option<&str>, key: Option<&str>) -> Secret {
        let mut secret = to_secret(
            "prod-a",
            "team-a",
            CertKind::Ca,
            &generate_kind(CertKind::Ca, 0).unwrap(),
            owner(),
        );
        let data = secret.data.as_mut().unwrap();
        for (name, value) in [(TLS_CRT_KEY, cert), (TLS_KEY_KEY, key)] {
            match value {
                Some(v) => {
                    data.insert(name.to_owned(), ByteString(v.as_bytes().to_vec()));
                }
                None => {
                    data.remove(name);
                }
            }
        }
        secret
    }

    #[test]
    fn from_secret_errors_name_the_secret_and_what_is_wrong() {
        let ca = generate_kind(CertKind::Ca, 0).unwrap();
        let leaf = leaf_certificate();
        let sa = generate_kind(CertKind::Sa, 0).unwrap();
        let encrypted =
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n";
        let cases = [
            (
                CertKind::Ca,
                None,
                Some(ca.key.as_str()),
                "secret team-a/prod-a-ca has no key tls.crt",
            ),
            (
                CertKind::Ca,
                Some(ca.cert.as_str()),
                None,
                "secret team-a/prod-a-ca has no key tls.key",
            ),
            (
                CertKind::Ca,
                Some(ca.cert.as_str()),
                Some(""),
                "secret team-a/prod-a-ca has no key tls.key",
            ),
            (
                CertKind::Ca,
                Some("hello"),
                Some(ca.key.as_str()),
                "secret team-a/prod-a-ca key tls.crt is not PEM: no -----BEGIN block",
            ),
            (
                CertKind::Ca,
                Some(leaf.cert.as_str()),
                Some(leaf.key.as_str()),
                "secret team-a/prod-a-ca key tls.crt is not a CA certificate",
            ),
            (
                CertKind::Ca,
                Some(ca.key.as_str()),
                Some(ca.key.as_str()),
                "secret team-a/prod-a-ca key tls.crt: holds no CERTIFICATE block",
            ),
            (
                CertKind::Ca,
                Some(ca.cert.as_str()),
                Some(encrypted),
                "secret team-a/prod-a-ca key tls.key: holds a ENCRYPTED PRIVATE KEY PEM block",
            ),
            (
                CertKind::Sa,
                Some(ca.cert.as_str()),
                Some(sa.key.as_str()),
                "secret team-a/prod-a-ca key tls.crt: holds a CERTIFICATE PEM block, expected the service-account PUBLIC KEY",
            ),
        ];
        for (kind, cert, key, expected) in cases {
            let err = from_secret(kind, &with_data(cert, key)).unwrap_err();
            assert!(
                err.to_string().starts_with(expected),
                "expected {expected:?}, got {err}"
            );
            assert_eq!(err.metric_label(), "certificates_corrupted");
        }
    }

    #[test]
    fn from_secret_accepts_a_bundle_whose_first_certificate_is_the_ca() {
        let ca = generate_kind(CertKind::Ca, 0).unwrap();
        let old = generate_kind(CertKind::Ca, 0).unwrap();
        let bundle = format!("{}{}", ca.cert, old.cert);
        let secret = with_data(Some(&bundle), Some(&ca.key));
        assert_eq!(from_secret(CertKind::Ca, &secret).unwrap().cert, bundle);
    }

    #[test]
    fn ca_cert_hash_is_the_spki_pin_openssl_computes() {
        let ca = generate_kind(CertKind::Ca, 0).unwrap();
        let public_key = openssl(&["x509", "-pubkey", "-noout"], ca.cert.as_bytes());
        let spki = openssl(&["pkey", "-pubin", "-outform", "der"], &public_key);
        let digest = run("sha256sum", &[], &spki);
        let hex = String::from_utf8(digest).unwrap();
        let hex = hex.split_whitespace().next().unwrap();
        assert_eq!(hex.len(), 64);
        assert_eq!(ca_cert_hash(&ca.cert).unwrap(), format!("sha256:{hex}"));
    }

    #[test]
    fn ca_cert_hashes_cover_every_certificate_of_a_bundle() {
        let new = generate_kind(CertKind::Ca, 0).unwrap();
        let old = generate_kind(CertKind::Ca, 0).unwrap();
        let hashes = ca_cert_hashes(&format!("{}{}", new.cert, old.cert)).unwrap();
        assert_eq!(
            hashes,
            [
                ca_cert_hash(&new.cert).unwrap(),
                ca_cert_hash(&old.cert).unwrap()
            ]
        );
        let err = ca_cert_hash("not a certificate").unwrap_err();
        assert_eq!(
            err.to_string(),
            "CA certificate is not PEM: no -----BEGIN block"
        );
    }

    #[test]
    fn missing_error_names_the_secrets() {
        let err = CertError::Missing {
            namespace: "team-a".into(),
            secrets: vec!["prod-a-etcd".into(), "prod-a-sa".into()],
        };
        assert!(
            err.to_string().starts_with(
                "cluster certificate secrets not found in namespace team-a: prod-a-etcd, prod-a-sa;"
            ),
            "{err}"
        );
    }
}
