//! The HTTP stack of a workload-cluster client: one connection per API server, HTTP/2 when the server
//! offers it (every kube-apiserver does). kube's own stack speaks HTTP/1.1 only, where every watch holds a
//! TLS connection of its own and a pooled connection keeps the read buffer it grew for the largest
//! response it carried; with a client per workload cluster and two watches on each, connections and their
//! buffers were most of a manager's memory. Over HTTP/2 the watches and calls of one cluster share one
//! connection, kept alive by pings so that a server gone silent is noticed.

use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ConfigExt};

/// How often an HTTP/2 connection is pinged, and how long an answer may take before it is dropped.
const PING_EVERY: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(10);
/// An idle connection (e.g. HTTP/1.1 to a server without HTTP/2) is closed after this long.
const IDLE_FOR: Duration = Duration::from_secs(60);
/// Cap on an HTTP/1.1 connection's read buffer (hyper's default grows to about 400 KiB and stays).
const HTTP1_READ_BUFFER: usize = 64 * 1024;

/// A client for the API server `config` names, over one multiplexed connection where possible. Requests
/// that upgrade the connection (port-forwards, exec), which HTTP/2 cannot carry, go over HTTP/1.1.
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    let mut tls = config.rustls_client_config()?;
    // rustls keeps a cache of 256 session tickets per configuration, about 15 KiB with a client per
    // workload cluster; the connection is long-lived, and a full handshake on the rare reconnect costs
    // less than keeping the tickets.
    tls.resumption = rustls::client::Resumption::disabled();
    let router = Router {
        multiplexed: http_client(&config, tls.clone(), &[b"h2", b"http/1.1"]),
        upgrades: http_client(&config, tls, &[b"http/1.1"]),
    };
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(router);
    Ok(kube::Client::new(service, config.default_namespace))
}

type Https = hyper_rustls::HttpsConnector<HttpConnector>;

fn http_client(
    config: &kube::Config,
    mut tls: rustls::ClientConfig,
    protocols: &[&[u8]],
) -> HttpClient<Https, Body> {
    tls.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_connect_timeout(config.connect_timeout);
    HttpClient::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(IDLE_FOR)
        .pool_max_idle_per_host(1)
        .http1_max_buf_size(HTTP1_READ_BUFFER)
        .http2_keep_alive_interval(PING_EVERY)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .build(hyper_rustls::HttpsConnector::from((tcp, Arc::new(tls))))
}

/// Sends upgrade requests over HTTP/1.1 and everything else over the multiplexed connection.
#[derive(Clone)]
struct Router {
    multiplexed: HttpClient<Https, Body>,
    upgrades: HttpClient<Https, Body>,
}

impl tower::Service<http::Request<Body>> for Router {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = hyper_util::client::legacy::ResponseFuture;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Both clients are always ready: they queue requests until a connection is up.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if upgrades(&request) {
            self.upgrades.request(request)
        } else {
            self.multiplexed.request(request)
        }
    }
}

fn upgrades<B>(request: &http::Request<B>) -> bool {
    request.headers().contains_key(http::header::UPGRADE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_upgrade_requests_take_http1() {
        let plain = http::Request::get("/api/v1/pods").body(()).unwrap();
        let port_forward =
            http::Request::get("/api/v1/namespaces/kube-system/pods/etcd/portforward")
                .header(http::header::UPGRADE, "websocket")
                .body(())
                .unwrap();
        assert!(!upgrades(&plain));
        assert!(upgrades(&port_forward));
    }
}
