//! The object store of `spec.etcdBackup`: its client, a snapshot streamed into it (sealed when
//! encrypted) and its manifest written after it, retention, and a stored snapshot read back and
//! checked before anything relies on it.
//!
//! Memory stays the same whatever the database's size: the snapshot flows through a 1 MiB pipe, 256
//! KiB at a time, into parts of [`PART_SIZE`], at most [`PARTS_IN_FLIGHT`] of them uploading at once.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kubeadm_api::controlplane::etcd_backup::{DEFAULT_REGION, EtcdBackupS3};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};
use ring::digest;
use tokio::io::AsyncReadExt;

use super::sealed::{self, Key, Opener, Sealer};
use super::{MANIFEST_FORMAT, Manifest, ManifestEncryption};

/// Bytes per uploaded part (S3 wants at least 5 MiB for all but the last; 10,000 parts at most, so
/// up to 80 GiB per snapshot).
pub const PART_SIZE: usize = 8 * 1024 * 1024;
/// Parts uploading at once.
pub const PARTS_IN_FLIGHT: usize = 2;
/// Bytes read from the snapshot stream at a time.
const READ_SIZE: usize = 256 * 1024;

/// What went wrong with the store, by what a user does about it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store answered that these credentials may not do this (HTTP 401 or 403).
    #[error("{0}")]
    Denied(String),
    /// The store could not be reached, failed, or refused the data (full, too large, 5xx).
    #[error("{0}")]
    Failed(String),
    /// A stored snapshot is not what its manifest says, or cannot be opened with the key.
    #[error("{0}")]
    Corrupt(String),
    /// No snapshot there.
    #[error("{0}")]
    NotFound(String),
}

impl StoreError {
    fn from_store(what: &str, error: object_store::Error) -> Self {
        let message = format!("{what}: {error}");
        match error {
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => Self::Denied(message),
            object_store::Error::NotFound { .. } => Self::NotFound(message),
            _ => Self::Failed(message),
        }
    }
}

/// What the client needs besides the spec: from the credentials Secret and the CA Secret.
#[derive(Clone, Default)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
    /// PEM CA certificates to trust for the endpoint, besides the system's.
    pub ca: Option<Vec<u8>>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// A client of the bucket `s3` names. Requests are retried a few times within a minute, so a store
/// that is down is reported within about that.
pub fn client(s3: &EtcdBackupS3, credentials: &Credentials) -> Result<Arc<AmazonS3>, String> {
    // reqwest's rustls takes the process's provider: ring, as every other TLS client here. Installing
    // it again is refused harmlessly.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let endpoint = s3.endpoint.trim_end_matches('/');
    let plain_http = endpoint.starts_with("http://");
    if !plain_http && !endpoint.starts_with("https://") {
        return Err(format!(
            "spec.etcdBackup.s3.endpoint: {endpoint:?} must be an http:// or https:// URL"
        ));
    }
    let mut options = ClientOptions::new()
        .with_allow_http(plain_http)
        .with_connect_timeout(Duration::from_secs(10))
        .with_timeout(Duration::from_secs(120));
    if let Some(pem) = &credentials.ca {
        let certificates = object_store::Certificate::from_pem_bundle(pem).map_err(|e| {
            format!("spec.etcdBackup.s3.caSecret: ca.crt is not PEM certificates: {e}")
        })?;
        for certificate in certificates {
            options = options.with_root_certificate(certificate);
        }
    }
    let mut builder = AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_bucket_name(&s3.bucket)
        .with_region(s3.region.as_deref().unwrap_or(DEFAULT_REGION))
        .with_access_key_id(&credentials.access_key_id)
        .with_secret_access_key(&credentials.secret_access_key)
        .with_allow_http(plain_http)
        .with_virtual_hosted_style_request(s3.virtual_hosted_style.unwrap_or(false))
        .with_client_options(options)
        .with_retry(RetryConfig {
            max_retries: 3,
            retry_timeout: Duration::from_secs(60),
            ..RetryConfig::default()
        });
    if let Some(token) = &credentials.session_token {
        builder = builder.with_token(token);
    }
    builder
        .build()
        .map(Arc::new)
        .map_err(|e| format!("spec.etcdBackup.s3: {e}"))
}

/// Where a snapshot goes and how it is sealed.
pub struct Destination<'a> {
    pub store: &'a dyn ObjectStore,
    /// The snapshot object and its manifest ([`super::names`]).
    pub object: String,
    pub manifest: String,
    /// The key and where it came from (`<secret>/<key>`), when encrypting.
    pub key: Option<(&'a Key, String)>,
}

/// What the snapshot was, to go into its manifest.
pub struct Source {
    pub cluster: String,
    pub member: String,
    pub revision: Option<i64>,
    pub time: Timestamp,
}

/// Streams what `snapshot` writes into the pipe it is given to `to.object` (sealed when `to.key` is
/// set), then writes the manifest. The upload is completed only when `snapshot` succeeded and every
/// byte it wrote was stored; otherwise it is aborted and no manifest is written. Returns the manifest.
pub async fn upload<F, Fut, E>(
    to: &Destination<'_>,
    source: Source,
    snapshot: F,
) -> Result<Manifest, UploadError<E>>
where
    F: FnOnce(tokio::io::DuplexStream) -> Fut,
    Fut: std::future::Future<Output = Result<u64, E>>,
{
    let object = Path::from(to.object.as_str());
    let upload = to.store.put_multipart(&object).await.map_err(|e| {
        UploadError::Store(StoreError::from_store(
            &format!("start the upload of {}", to.object),
            e,
        ))
    })?;
    let mut writer = object_store::WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
    let (tx, rx) = tokio::io::duplex(1024 * 1024);
    let sealer = match &to.key {
        Some((key, _)) => {
            Some(Sealer::new(key).map_err(|e| UploadError::Store(StoreError::Failed(e)))?)
        }
        None => None,
    };
    let produced = snapshot(tx);
    // Owns the pipe's reading end: when it stops early, the writing end fails and the snapshot stops.
    let consumed = {
        let writer = &mut writer;
        let (mut rx, mut sealer) = (rx, sealer);
        async move {
            let mut plain = digest::Context::new(&digest::SHA256);
            let mut stored = digest::Context::new(&digest::SHA256);
            let (mut plain_size, mut stored_size) = (0u64, 0u64);
            if let Some(sealer) = &sealer {
                stored.update(sealer.header());
                writer.write(sealer.header());
                stored_size += sealed::HEADER_LEN as u64;
            }
            let mut buffer = vec![0u8; READ_SIZE];
            loop {
                let read = rx
                    .read(&mut buffer)
                    .await
                    .map_err(|e| StoreError::Failed(format!("read the snapshot stream: {e}")))?;
                if read == 0 {
                    break;
                }
                let chunk = &mut buffer[..read];
                plain.update(chunk);
                plain_size += read as u64;
                if let Some(sealer) = &mut sealer {
                    sealer.seal(chunk);
                }
                stored.update(chunk);
                stored_size += read as u64;
                writer
                    .wait_for_capacity(PARTS_IN_FLIGHT)
                    .await
                    .map_err(|e| StoreError::from_store(&format!("upload {}", to.object), e))?;
                writer.write(chunk);
            }
            if let Some(sealer) = sealer.take() {
                let tag = sealer.finish();
                stored.update(&tag);
                writer.write(&tag);
                stored_size += sealed::TAG_LEN as u64;
            }
            Ok::<_, StoreError>((
                plain_size,
                sealed::hex(plain.finish().as_ref()),
                stored_size,
                sealed::hex(stored.finish().as_ref()),
            ))
        }
    };
    let (produced, consumed) = tokio::join!(produced, consumed);
    let (size, sha256, stored_size, stored_sha256) = match (produced, consumed) {
        (Ok(written), Ok(consumed)) if written == consumed.0 => consumed,
        (Ok(written), Ok(consumed)) => {
            let _ = writer.abort().await;
            return Err(UploadError::Store(StoreError::Failed(format!(
                "the snapshot stream gave {written} bytes but {} reached the upload",
                consumed.0
            ))));
        }
        // The store's failure first: it also breaks the pipe the snapshot writes into.
        (_, Err(e)) => {
            let _ = writer.abort().await;
            return Err(UploadError::Store(e));
        }
        (Err(e), Ok(_)) => {
            let _ = writer.abort().await;
            return Err(UploadError::Source(e));
        }
    };
    writer.finish().await.map_err(|e| {
        UploadError::Store(StoreError::from_store(
            &format!("complete the upload of {}", to.object),
            e,
        ))
    })?;
    let manifest = Manifest {
        format: MANIFEST_FORMAT.into(),
        cluster: source.cluster,
        time: source.time.to_string(),
        member: source.member,
        revision: source.revision,
        object: to.object.clone(),
        size,
        sha256,
        stored_size,
        stored_sha256,
        encryption: to.key.as_ref().map(|(key, secret)| ManifestEncryption {
            algorithm: sealed::ALGORITHM.into(),
            key_secret: secret.clone(),
            key_fingerprint: sealed::fingerprint(key),
        }),
    };
    let text = serde_json::to_vec_pretty(&manifest).expect("a manifest serializes");
    to.store
        .put(&Path::from(to.manifest.as_str()), PutPayload::from(text))
        .await
        .map_err(|e| {
            UploadError::Store(StoreError::from_store(
                &format!("write the manifest {}", to.manifest),
                e,
            ))
        })?;
    Ok(manifest)
}

/// Why an upload failed: the snapshot's source (etcd), or the store.
#[derive(Debug, thiserror::Error)]
pub enum UploadError<E> {
    #[error("{0}")]
    Source(E),
    #[error("{0}")]
    Store(StoreError),
}

/// The file names (without the folder) of the objects directly in `folder`.
pub async fn list(store: &dyn ObjectStore, folder: &str) -> Result<Vec<String>, StoreError> {
    let prefix = Path::from(folder);
    let mut listed = store.list(Some(&prefix));
    let mut names = Vec::new();
    while let Some(meta) = listed.next().await {
        let meta = meta.map_err(|e| StoreError::from_store(&format!("list {folder}/"), e))?;
        let parts: Vec<_> = meta
            .location
            .prefix_match(&prefix)
            .into_iter()
            .flatten()
            .collect();
        if let [name] = parts.as_slice() {
            names.push(name.as_ref().to_owned());
        }
    }
    Ok(names)
}

/// Deletes the objects `names` of `folder`; a name already gone is fine.
pub async fn delete(
    store: &dyn ObjectStore,
    folder: &str,
    names: &[String],
) -> Result<(), StoreError> {
    for name in names {
        let path = Path::from(format!("{folder}/{name}"));
        match store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(StoreError::from_store(&format!("delete {path}"), e)),
        }
    }
    Ok(())
}

/// The manifest `manifest` names, read and checked to be one.
pub async fn manifest(store: &dyn ObjectStore, manifest: &str) -> Result<Manifest, StoreError> {
    let bytes = store
        .get(&Path::from(manifest))
        .await
        .map_err(|e| StoreError::from_store(&format!("read {manifest}"), e))?
        .bytes()
        .await
        .map_err(|e| StoreError::from_store(&format!("read {manifest}"), e))?;
    let read: Manifest = serde_json::from_slice(&bytes)
        .map_err(|e| StoreError::Corrupt(format!("{manifest} is not a snapshot manifest: {e}")))?;
    if read.format != MANIFEST_FORMAT {
        return Err(StoreError::Corrupt(format!(
            "{manifest} is of format {:?}, not {MANIFEST_FORMAT:?}",
            read.format
        )));
    }
    Ok(read)
}

/// Reads the snapshot of `manifest` back whole, checking that it is what the manifest says: the
/// stored bytes' size and SHA-256, and when sealed, that `key` opens it (its tag) into the database's
/// size and SHA-256. Each opened piece goes to `sink` (e.g. a file, or nothing); only when this returns
/// `Ok` may what `sink` got be used. Returns the keys of a sealed object.
pub async fn read_checked(
    store: &dyn ObjectStore,
    manifest: &Manifest,
    key: Option<&Key>,
    mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> Result<Option<sealed::ObjectKeys>, StoreError> {
    let object = manifest.object.as_str();
    let mut opener = match (&manifest.encryption, key) {
        (Some(_), None) => {
            return Err(StoreError::Corrupt(format!(
                "{object} is encrypted, and no key is set (spec.etcdBackup.encryption)"
            )));
        }
        (Some(encryption), Some(key)) if encryption.key_fingerprint != sealed::fingerprint(key) => {
            return Err(StoreError::Corrupt(format!(
                "{object} was sealed with the key of fingerprint {} ({}), not with the key set now \
                 (fingerprint {}): set the key it was sealed with",
                encryption.key_fingerprint,
                encryption.key_secret,
                sealed::fingerprint(key)
            )));
        }
        (Some(_), Some(key)) => Some(Opener::new(key)),
        (None, _) => None,
    };
    let got = store
        .get(&Path::from(object))
        .await
        .map_err(|e| StoreError::from_store(&format!("read {object}"), e))?;
    let mut stream = got.into_stream();
    let mut stored = digest::Context::new(&digest::SHA256);
    let mut plain = digest::Context::new(&digest::SHA256);
    let (mut stored_size, mut plain_size) = (0u64, 0u64);
    let write = |e: std::io::Error| StoreError::Failed(format!("keep {object} as it is read: {e}"));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| StoreError::from_store(&format!("read {object}"), e))?;
        stored.update(&chunk);
        stored_size += chunk.len() as u64;
        match &mut opener {
            Some(opener) => {
                let opened = opener
                    .open(&chunk)
                    .map_err(|e| StoreError::Corrupt(format!("{object}: {e}")))?;
                plain.update(&opened);
                plain_size += opened.len() as u64;
                sink(&opened).map_err(write)?;
            }
            None => {
                plain.update(&chunk);
                plain_size += chunk.len() as u64;
                sink(&chunk).map_err(write)?;
            }
        }
    }
    let keys = opener.as_ref().and_then(|o| o.keys().cloned());
    if let Some(opener) = opener {
        opener
            .finish()
            .map_err(|e| StoreError::Corrupt(format!("{object}: {e}")))?;
    }
    let stored_sha256 = sealed::hex(stored.finish().as_ref());
    if stored_size != manifest.stored_size || stored_sha256 != manifest.stored_sha256 {
        return Err(StoreError::Corrupt(format!(
            "{object} is not what its manifest says: {stored_size} bytes of SHA-256 {stored_sha256}, \
             the manifest says {} bytes of SHA-256 {}",
            manifest.stored_size, manifest.stored_sha256
        )));
    }
    let sha256 = sealed::hex(plain.finish().as_ref());
    if plain_size != manifest.size || sha256 != manifest.sha256 {
        return Err(StoreError::Corrupt(format!(
            "{object} opens to {plain_size} bytes of SHA-256 {sha256}, the manifest says {} bytes \
             of SHA-256 {}",
            manifest.size, manifest.sha256
        )));
    }
    Ok(keys)
}

/// A URL that lets whoever holds it read `object` for `valid` without credentials (AWS Signature V4
/// query parameters).
pub async fn presigned_get(
    store: &AmazonS3,
    object: &str,
    valid: Duration,
) -> Result<String, StoreError> {
    use object_store::signer::Signer;
    store
        .signed_url(
            object_store::signer::Method::GET,
            &Path::from(object),
            valid,
        )
        .await
        .map(String::from)
        .map_err(|e| StoreError::from_store(&format!("sign a download of {object}"), e))
}
