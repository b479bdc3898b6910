//! Throw-away certificates for test processes: a CA per trust domain and leaf certificates signed by it.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use crate::Error;

/// A certificate authority that can sign leaf certificates.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    key_pem: String,
}

/// A PEM certificate with its private key.
#[derive(Clone, Debug)]
pub struct CertPair {
    pub cert_pem: String,
    pub key_pem: String,
}

/// Where a certificate pair was written.
#[derive(Clone, Debug)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What a leaf certificate is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    Server,
    Client,
    /// etcd members use one certificate for serving and for peer connections.
    ServerAndClient,
}

impl Ca {
    pub fn new(common_name: &str) -> Result<Self, Error> {
        let key = KeyPair::generate().map_err(pki_error)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common_name, None);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).map_err(pki_error)?;
        Ok(Self {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A CA from an existing certificate and its PKCS#8 key, e.g. one a test also hands to a provider.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, Error> {
        let key = key_pair(key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key).map_err(pki_error)?;
        Ok(Self {
            issuer,
            cert_pem: cert_pem.to_owned(),
            key_pem: key_pem.to_owned(),
        })
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// Signs a leaf certificate. `hosts` become DNS or IP subject alternative names.
    pub fn issue(
        &self,
        common_name: &str,
        organization: Option<&str>,
        hosts: &[&str],
        usage: Usage,
    ) -> Result<CertPair, Error> {
        self.issue_with(
            common_name,
            organization,
            hosts,
            usage,
            CertificateParams::default(),
        )
    }

    /// Like [`issue`](Self::issue), valid only through the year 2000: expired for everyone.
    pub fn issue_expired(
        &self,
        common_name: &str,
        hosts: &[&str],
        usage: Usage,
    ) -> Result<CertPair, Error> {
        let mut params = CertificateParams::default();
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        self.issue_with(common_name, None, hosts, usage, params)
    }

    fn issue_with(
        &self,
        common_name: &str,
        organization: Option<&str>,
        hosts: &[&str],
        usage: Usage,
        mut params: CertificateParams,
    ) -> Result<CertPair, Error> {
        let key = KeyPair::generate().map_err(pki_error)?;
        params.distinguished_name = name(common_name, organization);
        params.subject_alt_names = hosts
            .iter()
            .map(|h| match h.parse::<IpAddr>() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => Ok(SanType::DnsName((*h).try_into().map_err(pki_error)?)),
            })
            .collect::<Result<_, Error>>()?;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = match usage {
            Usage::Server => vec![ExtendedKeyUsagePurpose::ServerAuth],
            Usage::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
            Usage::ServerAndClient => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        };
        let cert = params.signed_by(&key, &self.issuer).map_err(pki_error)?;
        Ok(CertPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Writes `ca.crt` (and `ca.key`) named `<stem>.crt`/`<stem>.key` into `dir`.
    pub fn write(&self, dir: &Path, stem: &str) -> Result<CertFiles, Error> {
        write_pair(dir, stem, &self.cert_pem, &self.key_pem)
    }
}

impl CertPair {
    pub fn write(&self, dir: &Path, stem: &str) -> Result<CertFiles, Error> {
        write_pair(dir, stem, &self.cert_pem, &self.key_pem)
    }
}

/// A private key in PEM: PKCS#8, or PKCS#1 (`RSA PRIVATE KEY`), as Cluster API's own bootstrap provider
/// and kubeadm write RSA keys.
fn key_pair(pem: &str) -> Result<KeyPair, Error> {
    if pem.contains("-----BEGIN RSA PRIVATE KEY-----") {
        use rsa::pkcs1::DecodeRsaPrivateKey;
        use rsa::pkcs8::EncodePrivateKey;
        let key = rsa::RsaPrivateKey::from_pkcs1_pem(pem)
            .map_err(|e| Error::Pki(format!("RSA private key (PKCS#1): {e}")))?;
        let der = key
            .to_pkcs8_der()
            .map_err(|e| Error::Pki(format!("RSA private key to PKCS#8: {e}")))?;
        return KeyPair::try_from(der.as_bytes()).map_err(pki_error);
    }
    KeyPair::from_pem(pem).map_err(pki_error)
}

/// The hosts a process listening on 127.0.0.1 is reached by.
pub const LOOPBACK_HOSTS: &[&str] = &["127.0.0.1", "localhost"];

/// A key pair for signing service-account tokens: (public PEM, private PEM).
pub fn service_account_key() -> Result<(String, String), Error> {
    let key = KeyPair::generate().map_err(pki_error)?;
    Ok((key.public_key_pem(), key.serialize_pem()))
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(org) = organization {
        dn.push(DnType::OrganizationName, org);
    }
    dn
}

fn write_pair(dir: &Path, stem: &str, cert: &str, key: &str) -> Result<CertFiles, Error> {
    let files = CertFiles {
        cert: dir.join(format!("{stem}.crt")),
        key: dir.join(format!("{stem}.key")),
    };
    crate::write_file(&files.cert, cert.as_bytes())?;
    crate::write_private_file(&files.key, key.as_bytes())?;
    Ok(files)
}

fn pki_error(e: rcgen::Error) -> Error {
    Error::Pki(e.to_string())
}

/// Runs `openssl` with `args`, `stdin` on its standard input, and returns what it printed; panics when it
/// fails. For tests that check our certificates with the tool operators use.
pub fn openssl(args: &[&str], stdin: &[u8]) -> Vec<u8> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl runs (Debian package openssl)");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(stdin)
        .expect("openssl reads its input");
    let out = child.wait_with_output().expect("openssl ends");
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A CA whose key is PKCS#1, as Cluster API's bootstrap provider writes it, signs certificates that
    /// openssl accepts.
    #[test]
    fn a_ca_with_a_pkcs1_rsa_key_signs() {
        let dir = tempfile::tempdir().unwrap();
        let (key8, key1, ca) = (
            dir.path().join("key8.pem"),
            dir.path().join("key1.pem"),
            dir.path().join("ca.pem"),
        );
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl").args(args).output().unwrap();
            assert!(out.status.success(), "openssl {args:?}: {out:?}");
        };
        let path = |p: &Path| p.display().to_string();
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=pkcs1-ca",
            "-days",
            "1",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            &path(&key8),
            "-out",
            &path(&ca),
        ]);
        openssl(&[
            "rsa",
            "-in",
            &path(&key8),
            "-traditional",
            "-out",
            &path(&key1),
        ]);
        let key_pem = std::fs::read_to_string(&key1).unwrap();
        assert!(key_pem.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
        let cert_pem = std::fs::read_to_string(&ca).unwrap();
        let ca_ = Ca::from_pem(&cert_pem, &key_pem).expect("a PKCS#1 CA key is read");
        let leaf = ca_
            .issue("leaf", None, &["127.0.0.1"], Usage::Server)
            .unwrap()
            .write(dir.path(), "leaf")
            .unwrap();
        openssl(&["verify", "-CAfile", &path(&ca), &path(&leaf.cert)]);
    }
}
