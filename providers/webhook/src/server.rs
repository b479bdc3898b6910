//! The HTTPS server: handlers registered by path, one axum router, and an accept loop that does the
//! TLS handshake off the loop, serves HTTP/1.1 with keep-alive and drains connections on shutdown.

use std::any::Any;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::extract::rejection::BytesRejection;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use kube_core::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::admission::{self, AdmissionRequest, Denial, MutateFn, ValidateFn, Warnings};
use crate::conversion::{self, ConvertFn};
use crate::metrics::{self, Outcome};
use crate::review::BadReview;
use crate::serving_cert::{ServingCert, TlsFiles};
use crate::tls_options::TlsOptions;
use crate::typed::{self, Change};
use crate::{Admission, Error};

/// The port controller-runtime webhook servers listen on; the webhook Service targets it.
pub const DEFAULT_PORT: u16 = kubeadm_api::webhook::WEBHOOK_PORT;
/// Largest request body answered; the API server's own objects stay far below it.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// How often the certificate files are checked for a new pair.
pub const DEFAULT_CERT_RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// A client that opens a connection and never finishes the handshake holds a task, not the loop.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Also closes keep-alive connections idle for that long.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long in-flight requests get to finish once shutdown is asked for.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

enum Endpoint {
    Mutating(Box<MutateFn>),
    Validating(Box<ValidateFn>),
    Conversion(Box<ConvertFn>),
}

impl Endpoint {
    fn answer(&self, body: &[u8]) -> Result<(Value, Outcome), BadReview> {
        match self {
            Endpoint::Mutating(handler) => admission::mutate(handler.as_ref(), body),
            Endpoint::Validating(handler) => admission::validate(handler.as_ref(), body),
            Endpoint::Conversion(handler) => conversion::convert(handler.as_ref(), body),
        }
    }
}

/// Collects the webhooks a manager serves; see [`WebhookServer::builder`].
pub struct WebhookServerBuilder {
    endpoints: Vec<(String, Endpoint)>,
    max_body_bytes: usize,
    cert_reload_interval: Duration,
}

impl WebhookServerBuilder {
    /// A mutating (defaulting) webhook at `path`. The handler returns the object as it should be
    /// stored, or `None` to leave it as is; the server answers with the JSONPatch between the two.
    pub fn mutating<F>(mut self, path: impl Into<String>, handler: F) -> Self
    where
        F: Fn(&AdmissionRequest) -> Result<Option<Value>, Denial> + Send + Sync + 'static,
    {
        self.endpoints
            .push((path.into(), Endpoint::Mutating(Box::new(handler))));
        self
    }

    /// A validating webhook at `path`: `Ok` admits (with warnings for the client), `Err` refuses.
    pub fn validating<F>(mut self, path: impl Into<String>, handler: F) -> Self
    where
        F: Fn(&AdmissionRequest) -> Result<Warnings, Denial> + Send + Sync + 'static,
    {
        self.endpoints
            .push((path.into(), Endpoint::Validating(Box::new(handler))));
        self
    }

    /// A conversion webhook at `path` (usually [`crate::CONVERSION_PATH`]). The handler gets each
    /// object and the desired `apiVersion` (`group/version`) and returns the converted object.
    pub fn conversion<F>(mut self, path: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Value, &str) -> Result<Value, String> + Send + Sync + 'static,
    {
        self.endpoints
            .push((path.into(), Endpoint::Conversion(Box::new(handler))));
        self
    }

    /// Defaulting for kind `K` at its kubebuilder path (`/mutate-<group>-<version>-<kind>`), run
    /// on CREATE and UPDATE.
    pub fn defaulter<K, F>(self, default: F) -> Self
    where
        K: Resource<DynamicType = ()> + DeserializeOwned + Serialize + Default,
        F: Fn(&mut K) -> Result<(), Denial> + Send + Sync + 'static,
    {
        self.defaulter_with_request::<K, _>(move |object, _| default(object))
    }

    /// [`WebhookServerBuilder::defaulter`] for rules that also depend on the request, e.g. defaults
    /// applied only to dry runs.
    pub fn defaulter_with_request<K, F>(self, default: F) -> Self
    where
        K: Resource<DynamicType = ()> + DeserializeOwned + Serialize + Default,
        F: Fn(&mut K, &AdmissionRequest) -> Result<(), Denial> + Send + Sync + 'static,
    {
        let path = typed::path_of::<K>(Admission::Mutate);
        self.mutating(path, typed::defaulting(default))
    }

    /// Validation for kind `K` at its kubebuilder path (`/validate-<group>-<version>-<kind>`).
    pub fn validator<K, F>(self, validate: F) -> Self
    where
        K: Resource<DynamicType = ()> + DeserializeOwned + Serialize + Default,
        F: Fn(Change<'_, K>) -> Result<Warnings, Denial> + Send + Sync + 'static,
    {
        let path = typed::path_of::<K>(Admission::Validate);
        self.validating(path, typed::validating(validate))
    }

    /// Largest request body answered; larger ones get HTTP 413.
    pub fn max_body_bytes(mut self, limit: usize) -> Self {
        self.max_body_bytes = limit;
        self
    }

    /// How often the certificate files are checked for a new pair.
    pub fn cert_reload_interval(mut self, interval: Duration) -> Self {
        self.cert_reload_interval = interval;
        self
    }

    /// Fails on a path registered twice or one the router cannot take literally.
    pub fn build(self) -> Result<WebhookServer, Error> {
        let mut endpoints = BTreeMap::new();
        for (path, endpoint) in self.endpoints {
            if !path.starts_with('/') || path.contains(['{', '}', '*', ':']) {
                return Err(Error::InvalidPath(path));
            }
            if endpoints.contains_key(&path) {
                return Err(Error::DuplicatePath(path));
            }
            endpoints.insert(path, Arc::new(endpoint));
        }
        Ok(WebhookServer {
            endpoints,
            max_body_bytes: self.max_body_bytes,
            cert_reload_interval: self.cert_reload_interval,
            tls: TlsOptions::defaults(),
        })
    }
}

/// Serves the registered admission and conversion webhooks over HTTPS.
pub struct WebhookServer {
    endpoints: BTreeMap<String, Arc<Endpoint>>,
    max_body_bytes: usize,
    cert_reload_interval: Duration,
    tls: TlsOptions,
}

impl WebhookServer {
    pub fn builder() -> WebhookServerBuilder {
        WebhookServerBuilder {
            endpoints: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            cert_reload_interval: DEFAULT_CERT_RELOAD_INTERVAL,
        }
    }

    /// Serves with these TLS versions, suites and key-exchange groups (`--tls-*` flags) instead of
    /// rustls's defaults.
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = tls;
        self
    }

    /// The registered paths, sorted.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.endpoints.keys().map(String::as_str)
    }

    /// The plain-HTTP router behind the TLS layer: `POST` on each registered path, 404 elsewhere.
    pub fn router(&self) -> Router {
        let limit = self.max_body_bytes;
        let mut router = Router::new();
        for (path, endpoint) in &self.endpoints {
            let label: Arc<str> = path.as_str().into();
            let endpoint = Arc::clone(endpoint);
            router = router.route(
                path,
                post(move |body: Result<Bytes, BytesRejection>| {
                    let (label, endpoint) = (Arc::clone(&label), Arc::clone(&endpoint));
                    async move { respond(&label, &endpoint, body, limit) }
                }),
            );
        }
        router
            .fallback(unmatched)
            .layer(DefaultBodyLimit::max(limit))
    }

    /// Loads the serving certificate and readies TLS on `listener`; fails at once, naming the file,
    /// when the certificate or key cannot be loaded. Nothing is accepted before
    /// [`Listening::serve`].
    pub fn listen(self, listener: TcpListener, tls: TlsFiles) -> Result<Listening, Error> {
        let provider = Arc::clone(&self.tls.provider);
        let cert = Arc::new(ServingCert::load(tls, Arc::clone(&provider))?);
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(self.tls.versions)?
            .with_no_client_auth()
            .with_cert_resolver(cert.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Listening {
            router: self.router(),
            paths: self.endpoints.into_keys().collect(),
            cert_reload_interval: self.cert_reload_interval,
            listener,
            acceptor: TlsAcceptor::from(Arc::new(config)),
            cert,
        })
    }

    /// Binds `addr` and loads the serving certificate from `tls.crt` and `tls.key` in `cert_dir`,
    /// as a manager starts its webhook server; fails naming the address or the file.
    pub async fn listen_at(self, addr: SocketAddr, cert_dir: &Path) -> Result<Listening, Error> {
        let listener = bind(addr).await?;
        self.listen(listener, TlsFiles::in_dir(cert_dir))
    }

    /// [`WebhookServer::listen`], then [`Listening::serve`].
    pub async fn serve<S>(
        self,
        listener: TcpListener,
        tls: TlsFiles,
        shutdown: S,
    ) -> Result<(), Error>
    where
        S: Future<Output = ()> + Send,
    {
        self.listen(listener, tls)?.serve(shutdown).await;
        Ok(())
    }
}

/// A webhook server with its certificate loaded, ready to accept connections.
pub struct Listening {
    router: Router,
    paths: Vec<String>,
    cert_reload_interval: Duration,
    listener: TcpListener,
    acceptor: TlsAcceptor,
    cert: Arc<ServingCert>,
}

impl Listening {
    /// Where the server listens (the port chosen when bound to port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` resolves, then lets in-flight requests finish (for a bounded time).
    /// Meanwhile the certificate files are re-read every
    /// [`WebhookServerBuilder::cert_reload_interval`] and a new pair is served as soon as it loads.
    pub async fn serve<S>(self, shutdown: S)
    where
        S: Future<Output = ()> + Send,
    {
        let Listening {
            router,
            paths,
            cert_reload_interval,
            listener,
            acceptor,
            cert,
        } = self;
        let _reload = AbortOnDrop(tokio::spawn(cert.keep_fresh(cert_reload_interval)));
        metrics::init();
        tracing::info!(addr = ?listener.local_addr().ok(), ?paths, "serving webhooks");
        let graceful = GracefulShutdown::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let connection = connection(
                            stream,
                            peer,
                            acceptor.clone(),
                            router.clone(),
                            graceful.watcher(),
                        );
                        tokio::spawn(connection);
                    }
                    Err(e) => {
                        // Out of file descriptors and the like: wait for it to pass without spinning.
                        tracing::warn!(error = %e, "cannot accept a webhook connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
            }
        }
        drop(listener);
        tracing::info!("webhook server stopping");
        if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!(
                grace = ?SHUTDOWN_GRACE,
                "webhook connections still open after the grace period; closing them"
            );
        }
    }
}

/// Listens on `addr` (port 0 picks a free port; `local_addr()` tells which).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    acceptor: TlsAcceptor,
    router: Router,
    watcher: Watcher,
) {
    // Answers are one small write; waiting for more to coalesce only adds latency.
    let _ = stream.set_nodelay(true);
    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            return;
        }
    };
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(router));
    if let Err(e) = watcher.watch(connection).await {
        tracing::debug!(%peer, error = %e, "webhook connection ended with an error");
    }
}

fn respond(
    path: &str,
    endpoint: &Endpoint,
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Response {
    let started = Instant::now();
    let (outcome, response) = match body {
        Ok(body) => match endpoint.answer(&body) {
            Ok((review, outcome)) => (outcome, Json(review).into_response()),
            Err(bad) => {
                tracing::debug!(path, error = %bad, "refused a malformed review");
                (
                    Outcome::BadRequest,
                    (StatusCode::BAD_REQUEST, bad.to_string()).into_response(),
                )
            }
        },
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => (
            Outcome::TooLarge,
            (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is larger than {limit} bytes"),
            )
                .into_response(),
        ),
        Err(rejection) => (Outcome::BadRequest, rejection.into_response()),
    };
    metrics::observe(path, outcome, started.elapsed());
    response
}

async fn unmatched(uri: Uri) -> (StatusCode, String) {
    metrics::observe(metrics::UNMATCHED, Outcome::NotFound, Duration::ZERO);
    (
        StatusCode::NOT_FOUND,
        format!("no webhook is served at {}", uri.path()),
    )
}

/// The message of a caught panic, for the log.
pub(crate) fn panic_text(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a non-text panic")
}

/// Stops the certificate reload task with the server, however `serve` ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_paths_the_router_would_misread_or_that_repeat() {
        let allow = |_: &AdmissionRequest| Ok(Vec::new());
        for bad in ["validate-x", "/validate/{kind}", "/*rest", "/:kind"] {
            let err = WebhookServer::builder()
                .validating(bad, allow)
                .build()
                .err()
                .unwrap();
            assert!(
                matches!(err, Error::InvalidPath(ref p) if p == bad),
                "{err}"
            );
        }
        let err = WebhookServer::builder()
            .validating("/validate-x", allow)
            .mutating("/validate-x", |_| Ok(None))
            .build()
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            "webhook path /validate-x is registered twice"
        );
    }
}
