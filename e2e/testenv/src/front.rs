//! A filtering front for a workload kube-apiserver that several simulated clusters share.
//!
//! `make bench-scale` answers the workload side of many clusters with a few real kube-apiservers. Without
//! a front, each cluster's reads and watches of `kube-system` pods and of Nodes would see the objects of
//! every cluster on its server: lists and watch traffic grow with the clusters per server, which no real
//! cluster does. A front listens on a port of its own for one cluster (TLS with a certificate of that
//! cluster's CA, HTTP/2 or HTTP/1.1, as a kube-apiserver offers), and forwards every request to the shared
//! server, adding the cluster's own label to the label selector of pod and Node collection reads. The
//! simulation labels every Node and mirror pod with its cluster's name.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube::client::Body;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// The collections whose reads a front narrows to its cluster.
const FILTERED: [&str; 2] = ["/api/v1/namespaces/kube-system/pods", "/api/v1/nodes"];

/// Headers that belong to one connection and are not forwarded.
const HOP_BY_HOP: [&str; 6] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "host",
];

/// A running front; it stops (with its connections) when dropped.
pub struct Front {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Front {
    /// Listens on a free loopback port, serving `serving` (a certificate for `127.0.0.1` and its key,
    /// both PEM), and forwards to `upstream`, narrowing pod and Node reads to objects labelled
    /// `label=value`.
    pub async fn start(
        upstream: kube::Client,
        serving: &crate::pki::CertPair,
        label: &str,
        value: &str,
    ) -> std::io::Result<Self> {
        let acceptor = acceptor(serving).map_err(std::io::Error::other)?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let selector: Arc<str> = format!("{label}={value}").into();
        let task = tokio::spawn(accept(listener, acceptor, upstream, selector));
        Ok(Self { addr, task })
    }

    /// A front before `server` (its CA serves as the cluster's), with a connection of its own to the
    /// server, as the cluster's own API server would be.
    pub async fn before(
        server: &crate::KubeApiServer,
        label: &str,
        value: &str,
    ) -> Result<Self, String> {
        let ca = crate::pki::Ca::from_pem(server.ca_pem(), server.ca_key_pem())
            .map_err(|e| e.to_string())?;
        let serving = ca
            .issue(value, None, &["127.0.0.1"], crate::pki::Usage::Server)
            .map_err(|e| e.to_string())?;
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&server.kubeconfig_yaml(false))
            .map_err(|e| e.to_string())?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .map_err(|e| e.to_string())?;
        let upstream = kubeadm_cluster::connection::client(config).map_err(|e| e.to_string())?;
        Self::start(upstream, &serving, label, value)
            .await
            .map_err(|e| e.to_string())
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn acceptor(serving: &crate::pki::CertPair) -> Result<TlsAcceptor, String> {
    let certs = CertificateDer::pem_slice_iter(serving.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("serving certificate: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes())
        .map_err(|e| format!("serving key: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| e.to_string())?
        // The managers present client certificates; the shared server trusts the front's own.
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| e.to_string())?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Accepts connections until the front is dropped; each connection's task ends with it.
async fn accept(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    upstream: kube::Client,
    selector: Arc<str>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let (acceptor, upstream, selector) = (acceptor.clone(), upstream.clone(), selector.clone());
                connections.spawn(async move {
                    let Ok(stream) = acceptor.accept(stream).await else { return };
                    let service = service_fn(move |request| {
                        forward(upstream.clone(), selector.clone(), request)
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// One request, forwarded; an upstream failure answers 502 with the reason.
async fn forward(
    upstream: kube::Client,
    selector: Arc<str>,
    request: http::Request<Incoming>,
) -> Result<http::Response<Body>, Infallible> {
    let (parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let path = if parts.method == http::Method::GET {
        narrowed(&path, &selector)
    } else {
        path
    };
    let body = match body.collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => return Ok(bad_gateway(format!("reading the request: {e}"))),
    };
    let mut forwarded = http::Request::builder().method(parts.method).uri(path);
    for (name, value) in &parts.headers {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            forwarded = forwarded.header(name, value);
        }
    }
    let forwarded = match forwarded.body(Body::from(body)) {
        Ok(request) => request,
        Err(e) => return Ok(bad_gateway(format!("building the request: {e}"))),
    };
    Ok(match upstream.send(forwarded).await {
        Ok(mut response) => {
            for name in HOP_BY_HOP {
                response.headers_mut().remove(name);
            }
            response
        }
        Err(e) => bad_gateway(e.to_string()),
    })
}

fn bad_gateway(reason: String) -> http::Response<Body> {
    let mut response = http::Response::new(Body::from(reason.into_bytes()));
    *response.status_mut() = http::StatusCode::BAD_GATEWAY;
    response
}

/// `path_and_query` with `selector` added to its label selector when it reads one of [`FILTERED`].
fn narrowed(path_and_query: &str, selector: &str) -> String {
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    if !FILTERED.contains(&path) {
        return path_and_query.to_owned();
    }
    let encoded: String = form_urlencoded::byte_serialize(selector.as_bytes()).collect();
    let mut found = false;
    let mut pairs: Vec<String> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| match pair.strip_prefix("labelSelector=") {
            Some(existing) if !existing.is_empty() => {
                found = true;
                format!("labelSelector={existing}%2C{encoded}")
            }
            Some(_) => {
                found = true;
                format!("labelSelector={encoded}")
            }
            None => pair.to_owned(),
        })
        .collect();
    if !found {
        pairs.push(format!("labelSelector={encoded}"));
    }
    format!("{path}?{}", pairs.join("&"))
}

#[cfg(test)]
mod tests {
    use super::narrowed;

    const MINE: &str = "cluster.x-k8s.io/cluster-name=c0001";
    const ENCODED: &str = "cluster.x-k8s.io%2Fcluster-name%3Dc0001";

    #[test]
    fn pod_and_node_reads_are_narrowed_to_the_cluster() {
        assert_eq!(
            narrowed(
                "/api/v1/namespaces/kube-system/pods?labelSelector=tier%3Dcontrol-plane&watch=true",
                MINE
            ),
            format!(
                "/api/v1/namespaces/kube-system/pods?labelSelector=tier%3Dcontrol-plane%2C{ENCODED}&watch=true"
            )
        );
        assert_eq!(
            narrowed("/api/v1/nodes", MINE),
            format!("/api/v1/nodes?labelSelector={ENCODED}")
        );
        assert_eq!(
            narrowed("/api/v1/nodes?labelSelector=&limit=500", MINE),
            format!("/api/v1/nodes?labelSelector={ENCODED}&limit=500")
        );
    }

    #[test]
    fn other_paths_pass_unchanged() {
        for path in [
            "/api/v1/namespaces/kube-system/configmaps/kubeadm-config",
            "/api/v1/nodes/node-a",
            "/api/v1/namespaces/kube-system/pods/etcd-node-a",
            "/api/v1/namespaces/default/pods?labelSelector=a%3Db",
            "/version",
        ] {
            assert_eq!(narrowed(path, MINE), path);
        }
    }
}
