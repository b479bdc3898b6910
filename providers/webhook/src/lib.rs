//! HTTPS server for admission (defaulting, validation) and CRD conversion webhooks, shared by both
//! managers. Each manager registers the rules of its own kinds; the rules live beside the kinds.
//!
//! ```no_run
//! # async fn run(shutdown: impl std::future::Future<Output = ()> + Send) -> Result<(), kubeadm_webhook::Error> {
//! use kubeadm_webhook::{CONVERSION_PATH, TlsFiles, WebhookServer};
//!
//! let server = WebhookServer::builder()
//!     .validating("/validate-example-com-v1-thing", |_request| Ok(Vec::new()))
//!     .conversion(CONVERSION_PATH, |object, _desired_api_version| Ok(object))
//!     .build()?;
//! let listener = kubeadm_webhook::bind(([0, 0, 0, 0], kubeadm_webhook::DEFAULT_PORT).into()).await?;
//! server
//!     .serve(listener, TlsFiles::in_dir(kubeadm_webhook::DEFAULT_CERT_DIR), shutdown)
//!     .await
//! # }
//! ```
//!
//! The serving certificate is read from files (what cert-manager mounts) and reloaded when they
//! change, so a renewed certificate is served without a restart.

mod admission;
mod conversion;
mod metrics;
mod review;
mod server;
mod serving_cert;
mod typed;

use std::net::SocketAddr;
use std::path::PathBuf;

pub use admission::{AdmissionRequest, Denial, FieldError, FieldErrorKind, Warnings};
pub use kube_core::DynamicObject;
pub use kube_core::admission::Operation;
pub use kubeadm_api::webhook::{
    Admission, AdmissionWebhook, CONVERSION_PATH, admission_path, admission_webhooks,
};
pub use server::{
    DEFAULT_CERT_RELOAD_INTERVAL, DEFAULT_MAX_BODY_BYTES, DEFAULT_PORT, Listening, WebhookServer,
    WebhookServerBuilder, bind,
};
pub use serving_cert::{DEFAULT_CERT_DIR, TlsFiles};
pub use typed::Change;

/// Why the webhook server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {}: {source}", path.display())]
    ReadFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} holds no usable PEM certificate: {reason}", path.display())]
    InvalidCertificate { path: PathBuf, reason: String },
    #[error("{} holds no usable PEM private key: {reason}", path.display())]
    InvalidKey { path: PathBuf, reason: String },
    #[error("the private key in {} does not belong to the certificate in {}", key.display(), cert.display())]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("TLS setup failed: {0}")]
    Tls(#[from] rustls::Error),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("webhook path {0:?} must start with '/' and hold no '{{', '}}', '*' or ':'")]
    InvalidPath(String),
    #[error("webhook path {0} is registered twice")]
    DuplicatePath(String),
}
