//! HTTPS server for admission (defaulting, validation) and CRD conversion webhooks, shared by both
//! managers. Each manager registers the rules of its own kinds; the rules live beside the kinds.
//!
//! ```no_run
//! # async fn run(shutdown: impl std::future::Future<Output = ()> + Send + 'static) -> Result<(), kubeadm_webhook::Error> {
//! use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
//! use kubeadm_webhook::{Change, CONVERSION_PATH, TlsFiles, WebhookServer};
//!
//! let server = WebhookServer::builder()
//!     // At /mutate-controlplane-cluster-x-k8s-io-v1beta2-kubeadmcontrolplane.
//!     .defaulter::<KubeadmControlPlane, _>(|kcp| Ok(()))
//!     // At /validate-controlplane-cluster-x-k8s-io-v1beta2-kubeadmcontrolplane.
//!     .validator::<KubeadmControlPlane, _>(|change| match change {
//!         Change::Create { new } => Ok(Vec::new()),
//!         Change::Update { old, new } => Ok(Vec::new()),
//!         Change::Delete { old } => Ok(Vec::new()),
//!     })
//!     .conversion(CONVERSION_PATH, |object, _desired_api_version| Ok(object))
//!     .build()?;
//! let listener = kubeadm_webhook::bind(([0, 0, 0, 0], kubeadm_webhook::DEFAULT_PORT).into()).await?;
//! // Fails here, naming the file, when the certificate cannot be loaded.
//! let listening = server.listen(listener, TlsFiles::in_dir(kubeadm_webhook::DEFAULT_CERT_DIR))?;
//! tokio::spawn(listening.serve(shutdown));
//! # Ok(())
//! # }
//! ```
//!
//! Raw handlers ([`WebhookServerBuilder::mutating`], [`WebhookServerBuilder::validating`]) take the
//! [`AdmissionRequest`] as the API server sent it, e.g. for the `scale` subresource, whose object is
//! an `autoscaling/v1` Scale. A mutating handler returns the object it wants stored; the server
//! answers with the JSONPatch. [`admission_webhooks`] lists the webhooks the generated
//! configurations register, so a manager can check that it serves each one of its group.
//!
//! The serving certificate is read from files (what cert-manager mounts) and reloaded when they
//! change, so a renewed certificate is served without a restart. Webhooks are served on every
//! replica, leader or not.

mod admission;
mod conversion;
mod metrics;
mod review;
mod server;
mod serving_cert;
mod tls_options;
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
pub use tls_options::{TlsFlags, TlsOptions};
pub use typed::Change;

/// The answer to a validating request for one of our kinds: the denial naming every broken rule, or
/// admission with a warning for each v1beta1-only field the object was converted from and that
/// v1beta2 does not use (e.g. `useExperimentalRetryJoin`), so nothing is dropped silently.
pub fn admit<K: kube_core::Resource<DynamicType = ()>>(
    object: &K,
    verdict: Result<(), kubeadm_api::validation::FieldErrors>,
) -> Result<Warnings, Denial> {
    verdict.map_err(|errors| Denial::from_field_errors(object, errors))?;
    Ok(kubeadm_api::conversion::unused_v1beta1_fields(
        &K::kind(&()),
        object.meta().annotations.as_ref(),
    )
    .into_iter()
    .map(|(path, rule)| format!("{path}: {rule}"))
    .collect())
}

/// Starts `server` the way the managers do: on `--webhook-bind-address` and `--webhook-port`, with
/// the certificate from `--webhook-cert-dir` (failing now, naming the file, when it cannot be
/// loaded). The returned future serves until `shutdown`; the manager runs it on every replica.
pub async fn serve_for_manager(
    server: WebhookServer,
    args: &kubeadm_runtime::WebhookArgs,
    shutdown: kubeadm_runtime::Shutdown,
) -> Result<kubeadm_runtime::Serving, kubeadm_runtime::manager::Error> {
    let failed = |e: Error| kubeadm_runtime::manager::Error::Webhooks(e.to_string());
    let addr = args.addr().ok_or_else(|| {
        kubeadm_runtime::manager::Error::Webhooks("turned off by --webhook-port=0".into())
    })?;
    let tls = TlsOptions::from_flags(&TlsFlags {
        min_version: args.tls.tls_min_version.clone(),
        cipher_suites: args.tls.tls_cipher_suites.clone(),
        curve_preferences: args.tls.tls_curve_preferences.clone(),
    })
    .map_err(kubeadm_runtime::manager::Error::Webhooks)?;
    let listening = server
        .with_tls(tls)
        .listen_at(addr, &args.webhook_cert_dir)
        .await
        .map_err(failed)?;
    Ok(Box::pin(listening.serve(shutdown.wait())))
}

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

#[cfg(test)]
mod admit_tests {
    use kubeadm_api::bootstrap::v1beta2::KubeadmConfig;
    use serde_json::json;

    use super::*;

    #[test]
    fn admitted_v1beta1_objects_are_warned_about_the_fields_v1beta2_does_not_use() {
        let v1beta1 = json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
            "kind": "KubeadmConfig",
            "metadata": {"name": "w", "namespace": "default"},
            "spec": {"useExperimentalRetryJoin": true, "joinConfiguration": {}}
        });
        let hub =
            kubeadm_api::conversion::convert_object(v1beta1, "bootstrap.cluster.x-k8s.io/v1beta2")
                .unwrap();
        let config: KubeadmConfig = serde_json::from_value(hub).unwrap();
        let warnings = admit(&config, Ok(())).unwrap();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("spec.useExperimentalRetryJoin: exists only in v1beta1"),
            "{warnings:?}"
        );
        let plain = KubeadmConfig::new("w", Default::default());
        assert_eq!(admit(&plain, Ok(())).unwrap(), Vec::<String>::new());
    }
}
