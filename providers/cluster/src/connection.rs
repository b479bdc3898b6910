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

/// How long an HTTP/2 connection may carry nothing before it is pinged, and how long the answer may
/// take before the connection is dropped: a server gone silent is noticed within 70 s. A settled
/// cluster's watches carry nothing for their half hour, so pings are most of what its connection costs
/// at rest: pinging every 60 s instead of 30 s (client-go's) took a quarter off the control-plane
/// manager's CPU at rest in `make bench-scale`.
const PING_EVERY: Duration = Duration::from_secs(60);
const PING_TIMEOUT: Duration = Duration::from_secs(10);
/// What a client's multiplexed connection carries, which decides how long it stays idle in the pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Traffic {
    /// Long-running watches beside calls: the connection stays while it lives.
    #[default]
    Watches,
    /// Calls only, now and then: an idle connection is closed after a minute rather than kept and pinged.
    Calls,
}

/// How long an idle connection stays in a client's pool. The multiplexed connection of a client with
/// watches stays while it lives:
/// hyper-util's pool marks a shared HTTP/2 connection idle when it is checked out and never again while
/// its streams run, so any timeout would drop the connection a cluster's watches still use and make the
/// next call (a watch renewal every few minutes) open a new one with a full TLS handshake. Pings notice a
/// dead server, and the client goes with its cluster. An upgrade takes its HTTP/1.1 connection for good;
/// an idle one is closed after a minute.
const WATCHES_IDLE: Option<Duration> = None;
const CALLS_IDLE: Option<Duration> = Some(Duration::from_secs(60));
const UPGRADES_IDLE: Option<Duration> = CALLS_IDLE;
/// The HPACK table the server may fill with the response headers it has sent before, on a connection
/// that stays for the cluster's lifetime: none. An API server's response headers are a few hundred
/// bytes, mostly values that change every time (audit ID, date), while the table took about 4 KiB
/// on each connection.
const HEADER_TABLE_SIZE: u32 = 0;
/// Cap on an HTTP/1.1 connection's read buffer (hyper's default grows to about 400 KiB and stays).
const HTTP1_READ_BUFFER: usize = 64 * 1024;

/// A client for the API server `config` names, over one multiplexed connection where possible. Requests
/// that upgrade the connection (port-forwards, exec), which HTTP/2 cannot carry, go over HTTP/1.1.
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    client_for(config, Traffic::Watches)
}

/// [`client`], for `traffic`.
pub fn client_for(config: kube::Config, traffic: Traffic) -> Result<kube::Client, kube::Error> {
    client_idling(
        config,
        match traffic {
            Traffic::Watches => WATCHES_IDLE,
            Traffic::Calls => CALLS_IDLE,
        },
    )
}

fn client_idling(
    config: kube::Config,
    multiplexed_idle: Option<Duration>,
) -> Result<kube::Client, kube::Error> {
    let mut tls = config.rustls_client_config()?;
    // rustls keeps a cache of 256 session tickets per configuration, about 15 KiB with a client per
    // workload cluster; the connection is long-lived, and a full handshake on the rare reconnect costs
    // less than keeping the tickets.
    tls.resumption = rustls::client::Resumption::disabled();
    let router = Router {
        multiplexed: http_client(
            &config,
            tls.clone(),
            &[b"h2", b"http/1.1"],
            multiplexed_idle,
        ),
        upgrades: http_client(&config, tls, &[b"http/1.1"], UPGRADES_IDLE),
    };
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(router);
    Ok(kube::Client::new(service, config.default_namespace))
}

type Https = Bounded<hyper_rustls::HttpsConnector<HttpConnector>>;

fn http_client(
    config: &kube::Config,
    mut tls: rustls::ClientConfig,
    protocols: &[&[u8]],
    idle: Option<Duration>,
) -> HttpClient<Https, Body> {
    tls.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    let https = hyper_rustls::HttpsConnector::from((tcp, Arc::new(tls)));
    HttpClient::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(idle)
        .pool_max_idle_per_host(1)
        .http1_max_buf_size(HTTP1_READ_BUFFER)
        .http2_keep_alive_interval(PING_EVERY)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .http2_header_table_size(HEADER_TABLE_SIZE)
        .build(Bounded {
            connect: https,
            within: config.connect_timeout,
        })
}

/// A connector whose connections are up, TLS handshake included, within `within` or not at all. A
/// bound on the TCP connection alone let a server that accepts and then says nothing (a frozen
/// machine behind a load balancer) hold the request that opened the connection, and everything
/// queued behind it, for good.
#[derive(Clone)]
struct Bounded<C> {
    connect: C,
    within: Option<Duration>,
}

impl<C> tower::Service<http::Uri> for Bounded<C>
where
    C: tower::Service<http::Uri>,
    C::Error: Into<tower::BoxError>,
    C::Future: Send + 'static,
{
    type Response = C::Response;
    type Error = tower::BoxError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<C::Response, tower::BoxError>> + Send>,
    >;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.connect.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connecting = self.connect.call(uri.clone());
        let within = self.within;
        Box::pin(async move {
            let Some(within) = within else {
                return connecting.await.map_err(Into::into);
            };
            match tokio::time::timeout(within, connecting).await {
                Ok(connected) => connected.map_err(Into::into),
                Err(_) => Err(format!(
                    "no connection to {uri} within {within:?} (TCP and TLS handshake)"
                )
                .into()),
            }
        })
    }
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
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::AsyncBufReadExt;
    use http_body_util::{BodyExt, Full, StreamBody};
    use hyper::body::{Bytes, Frame};
    use hyper_util::rt::TokioIo;
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    use tokio::net::TcpListener;

    use super::*;

    /// An HTTP/2 API server over TLS on loopback that counts the connections it accepts. `/watch`
    /// answers with one line and then keeps its stream open, like a watch with nothing to report;
    /// anything else answers `{}`.
    struct Server {
        url: String,
        ca: CertificateDer<'static>,
        accepted: Arc<AtomicUsize>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Server {
        async fn start() -> Self {
            let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
            ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
                .unwrap()
                .signed_by(&key, &ca)
                .unwrap();
            let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap();
            tls.alpn_protocols = vec![b"h2".to_vec()];
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("https://{}", listener.local_addr().unwrap());
            let accepted = Arc::new(AtomicUsize::new(0));
            let counted = Arc::clone(&accepted);
            let task = tokio::spawn(async move {
                let mut connections = tokio::task::JoinSet::new();
                while let Ok((tcp, _)) = listener.accept().await {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let acceptor = acceptor.clone();
                    connections.spawn(async move {
                        let Ok(stream) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                            .serve_connection(
                                TokioIo::new(stream),
                                hyper::service::service_fn(answer),
                            )
                            .await;
                    });
                }
            });
            Self {
                url,
                ca: ca.der().clone(),
                accepted,
                task,
            }
        }

        fn client(&self, multiplexed_idle: Option<Duration>) -> kube::Client {
            let mut config = kube::Config::new(self.url.parse().unwrap());
            config.root_cert = Some(vec![self.ca.to_vec()]);
            client_idling(config, multiplexed_idle).unwrap()
        }

        fn accepted(&self) -> usize {
            self.accepted.load(Ordering::SeqCst)
        }
    }

    impl Drop for Server {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    type AnswerBody = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

    async fn answer(
        request: http::Request<hyper::body::Incoming>,
    ) -> Result<http::Response<AnswerBody>, std::convert::Infallible> {
        let body = if request.uri().path() == "/watch" {
            let line = futures::stream::once(async { Ok(Frame::data(Bytes::from("{}\n"))) });
            StreamBody::new(futures::StreamExt::chain(line, futures::stream::pending())).boxed()
        } else {
            Full::new(Bytes::from("{}")).boxed()
        };
        Ok(http::Response::new(body))
    }

    /// Opens a watch, waits `idle_for` and makes two calls; returns the connections the server accepted.
    async fn connections_for_a_watch_and_calls(
        server: &Server,
        multiplexed_idle: Option<Duration>,
        idle_for: Duration,
    ) -> usize {
        let client = server.client(multiplexed_idle);
        let get = |path: &str| http::Request::get(path).body(Vec::new()).unwrap();
        let mut watch = Box::pin(client.request_stream(get("/watch")).await.unwrap());
        let mut line = String::new();
        watch.read_line(&mut line).await.unwrap();
        assert_eq!(line, "{}\n", "the watch's first line");
        tokio::time::sleep(idle_for).await;
        for _ in 0..2 {
            assert_eq!(client.request_text(get("/api")).await.unwrap(), "{}");
        }
        server.accepted()
    }

    #[tokio::test]
    async fn a_watch_and_the_calls_beside_it_share_one_connection_however_long_it_runs() {
        let server = Server::start().await;
        let accepted =
            connections_for_a_watch_and_calls(&server, WATCHES_IDLE, Duration::from_millis(600))
                .await;
        assert_eq!(
            accepted, 1,
            "connections accepted for one watch and two calls"
        );
    }

    /// Why the multiplexed pool keeps no idle timeout: hyper-util drops the shared connection once the
    /// timeout has passed since its last checkout, although the watch still runs on it. Should this
    /// start to fail, hyper-util keeps busy HTTP/2 connections and a timeout could come back.
    #[tokio::test]
    async fn an_idle_timeout_would_drop_the_connection_a_watch_still_uses() {
        let server = Server::start().await;
        let accepted = connections_for_a_watch_and_calls(
            &server,
            Some(Duration::from_millis(200)),
            Duration::from_millis(600),
        )
        .await;
        assert_eq!(
            accepted, 2,
            "connections accepted for one watch and two calls"
        );
    }

    #[tokio::test]
    async fn a_server_that_accepts_and_never_answers_fails_the_call_within_the_connect_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        // Accepts, keeps the connection, never speaks TLS.
        let silent = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((tcp, _)) = listener.accept().await {
                held.push(tcp);
            }
        });
        let mut config = kube::Config::new(url.parse().unwrap());
        config.connect_timeout = Some(Duration::from_millis(300));
        let client = client(config).unwrap();
        let call = client.request_text(http::Request::get("/api").body(Vec::new()).unwrap());
        let failed = tokio::time::timeout(Duration::from_secs(20), call)
            .await
            .expect("the call ends")
            .expect_err("nothing answered");
        silent.abort();
        let chain =
            std::iter::successors(Some(&failed as &(dyn std::error::Error + 'static)), |e| {
                e.source()
            })
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(": ");
        assert!(chain.contains("TLS handshake"), "{chain}");
    }

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
