//! The serving certificate: read from files at start, then re-read every few seconds so that a
//! renewed pair (cert-manager swaps the mounted files through a symlink) is served without a restart.
//! A new pair that does not load is refused with a warning and the previous one stays.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::Error;

/// Where controller-runtime webhook servers (and the Deployments that mount their certificate)
/// look for `tls.crt` and `tls.key`.
pub const DEFAULT_CERT_DIR: &str = kubeadm_api::webhook::WEBHOOK_CERT_DIR;

/// The PEM files of the serving certificate (with its chain) and its private key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    /// `tls.crt` and `tls.key` in `dir`, as a mounted `kubernetes.io/tls` Secret has them.
    pub fn in_dir(dir: impl AsRef<Path>) -> Self {
        let dir = dir.as_ref();
        Self {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        }
    }
}

/// The file contents a certificate was (or failed to be) loaded from.
#[derive(PartialEq, Eq)]
struct Contents {
    cert: Vec<u8>,
    key: Vec<u8>,
}

/// Sizes only: the key must not reach a log through `{:?}`.
impl std::fmt::Debug for Contents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Contents")
            .field("cert_bytes", &self.cert.len())
            .field("key_bytes", &self.key.len())
            .finish()
    }
}

/// Hands rustls whatever pair is current; [`ServingCert::keep_fresh`] replaces it.
#[derive(Debug)]
pub(crate) struct ServingCert {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    /// What `current` was loaded from; the reload task compares against it.
    loaded: std::sync::Mutex<Option<Contents>>,
}

impl ServingCert {
    /// Loads the pair, failing with an error that names the file at fault.
    pub(crate) fn load(files: TlsFiles, provider: Arc<CryptoProvider>) -> Result<Self, Error> {
        let contents = Contents {
            cert: read(&files.cert)?,
            key: read(&files.key)?,
        };
        let key = parse(&files, &contents, &provider)?;
        Ok(Self {
            files,
            provider,
            current: RwLock::new(Arc::new(key)),
            loaded: std::sync::Mutex::new(Some(contents)),
        })
    }

    pub(crate) fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Re-reads the files every `interval` and serves a changed pair once it loads. Runs until
    /// dropped.
    pub(crate) async fn keep_fresh(self: Arc<Self>, interval: Duration) {
        let mut seen = self
            .loaded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .expect("one reload task per serving certificate");
        let mut last_problem: Option<String> = None;
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            ticker.tick().await;
            let contents = match (read(&self.files.cert), read(&self.files.key)) {
                (Ok(cert), Ok(key)) => Contents { cert, key },
                (Err(e), _) | (_, Err(e)) => {
                    report(&mut last_problem, e.to_string());
                    continue;
                }
            };
            if contents == seen {
                continue;
            }
            match parse(&self.files, &contents, &self.provider) {
                Ok(key) => {
                    *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(key);
                    last_problem = None;
                    tracing::info!(
                        cert = %self.files.cert.display(),
                        "serving certificate reloaded"
                    );
                }
                // Also what a reader sees halfway through a swap (new certificate, old key); the
                // next read finds the whole new pair.
                Err(e) => report(&mut last_problem, e.to_string()),
            }
            seen = contents;
        }
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// Warns once per distinct problem, not on every poll.
fn report(last: &mut Option<String>, problem: String) {
    if last.as_deref() != Some(problem.as_str()) {
        tracing::warn!(
            error = %problem,
            "cannot load the new serving certificate; still serving the previous one"
        );
        *last = Some(problem);
    }
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|source| Error::ReadFile {
        path: path.to_path_buf(),
        source,
    })
}

fn parse(
    files: &TlsFiles,
    contents: &Contents,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, Error> {
    let bad_cert = |reason: String| Error::InvalidCertificate {
        path: files.cert.clone(),
        reason,
    };
    let chain = CertificateDer::pem_slice_iter(&contents.cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad_cert(e.to_string()))?;
    let Some(leaf) = chain.first() else {
        return Err(bad_cert("no CERTIFICATE block".into()));
    };
    rustls::server::ParsedCertificate::try_from(leaf).map_err(|e| bad_cert(e.to_string()))?;
    let bad_key = |reason: String| Error::InvalidKey {
        path: files.key.clone(),
        reason,
    };
    let key = PrivateKeyDer::from_pem_slice(&contents.key).map_err(|e| bad_key(e.to_string()))?;
    let key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| bad_key(e.to_string()))?;
    let certified = CertifiedKey::new(chain, key);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(certified)
        }
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(Error::KeyMismatch {
                cert: files.cert.clone(),
                key: files.key.clone(),
            })
        }
        Err(e) => Err(bad_cert(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, KeyPair};

    use super::*;

    fn pair() -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn files(dir: &Path, cert: &str, key: &str) -> TlsFiles {
        let files = TlsFiles::in_dir(dir);
        std::fs::write(&files.cert, cert).unwrap();
        std::fs::write(&files.key, key).unwrap();
        files
    }

    fn load(files: &TlsFiles) -> Result<ServingCert, Error> {
        ServingCert::load(
            files.clone(),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
    }

    #[test]
    fn loads_a_matching_pair() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair();
        let serving = load(&files(dir.path(), &cert, &key)).unwrap();
        assert_eq!(serving.current().cert.len(), 1);
    }

    #[test]
    fn errors_name_the_file_at_fault() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair();
        let (_, other_key) = pair();
        let path = |name: &str| dir.path().join(name).display().to_string();

        let missing = load(&TlsFiles::in_dir(dir.path())).unwrap_err().to_string();
        assert!(
            missing.starts_with(&format!("cannot read {}: ", path("tls.crt"))),
            "{missing}"
        );

        let no_cert = load(&files(dir.path(), "garbage", &key)).unwrap_err();
        assert_eq!(
            no_cert.to_string(),
            format!(
                "{} holds no usable PEM certificate: no CERTIFICATE block",
                path("tls.crt")
            )
        );

        let no_key = load(&files(dir.path(), &cert, &cert))
            .unwrap_err()
            .to_string();
        assert!(
            no_key.starts_with(&format!(
                "{} holds no usable PEM private key: ",
                path("tls.key")
            )),
            "{no_key}"
        );

        let mismatch = load(&files(dir.path(), &cert, &other_key)).unwrap_err();
        assert_eq!(
            mismatch.to_string(),
            format!(
                "the private key in {} does not belong to the certificate in {}",
                path("tls.key"),
                path("tls.crt")
            )
        );
    }
}
