//! What the server tests and the benchmark share: a throwaway PKI, certificate files laid out as the
//! kubelet mounts a Secret, a running server, and an HTTPS client over one keep-alive connection.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::StatusCode;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use kubeadm_webhook::{TlsFiles, WebhookServer};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ProtocolVersion, RootCertStore, SupportedProtocolVersion};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// A CA and a serving certificate it signed for `localhost` and 127.0.0.1.
pub struct Pki {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
    pub cert_der: CertificateDer<'static>,
}

impl Pki {
    pub fn new(ca_name: &str) -> Self {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, ca_name);
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();

        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        Self {
            ca_pem: ca.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().clone(),
        }
    }
}

/// A certificate directory as the kubelet maintains a mounted Secret: `tls.crt` and `tls.key` are
/// symlinks through `..data`, which is swapped atomically to a new timestamped folder.
pub struct CertDir {
    pub dir: tempfile::TempDir,
    generation: usize,
}

impl CertDir {
    pub fn new(cert_pem: &str, key_pem: &str) -> Self {
        let mut dir = Self {
            dir: tempfile::tempdir().unwrap(),
            generation: 0,
        };
        dir.swap_in(cert_pem, key_pem);
        for name in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(Path::new("..data").join(name), dir.path().join(name))
                .unwrap();
        }
        dir
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn files(&self) -> TlsFiles {
        TlsFiles::in_dir(self.path())
    }

    /// Writes a new pair into a fresh folder and points `..data` at it in one rename.
    pub fn swap_in(&mut self, cert_pem: &str, key_pem: &str) {
        self.generation += 1;
        let folder = format!("..gen_{}", self.generation);
        let target: PathBuf = self.path().join(&folder);
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("tls.crt"), cert_pem).unwrap();
        std::fs::write(target.join("tls.key"), key_pem).unwrap();
        let tmp = self.path().join("..data_tmp");
        std::os::unix::fs::symlink(&folder, &tmp).unwrap();
        std::fs::rename(&tmp, self.path().join("..data")).unwrap();
    }
}

/// A server on a free loopback port, stopped (and awaited) by [`Running::stop`].
pub struct Running {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    pub async fn start(server: WebhookServer, files: TlsFiles) -> Self {
        let listener = kubeadm_webhook::bind(([127, 0, 0, 1], 0).into())
            .await
            .unwrap();
        let listening = server.listen(listener, files).unwrap();
        let addr = listening.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(listening.serve(async {
            let _ = stopped.await;
        }));
        Self {
            addr,
            stop: Some(stop),
            task,
        }
    }

    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap();
    }
}

/// An HTTPS client on one keep-alive connection, trusting only the CA it was given.
pub struct Client {
    sender: SendRequest<Full<Bytes>>,
    /// The certificate the server presented.
    pub peer_cert: CertificateDer<'static>,
    pub version: ProtocolVersion,
}

impl Client {
    pub async fn connect(addr: SocketAddr, ca_pem: &str) -> Result<Self, String> {
        Self::connect_with(addr, ca_pem, rustls::ALL_VERSIONS).await
    }

    pub async fn connect_with(
        addr: SocketAddr,
        ca_pem: &str,
        versions: &[&'static SupportedProtocolVersion],
    ) -> Result<Self, String> {
        Self::connect_offering(
            addr,
            ca_pem,
            versions,
            rustls::crypto::ring::default_provider(),
        )
        .await
    }

    /// Connects offering only `provider`'s suites and key-exchange groups.
    pub async fn connect_offering(
        addr: SocketAddr,
        ca_pem: &str,
        versions: &[&'static SupportedProtocolVersion],
        provider: rustls::crypto::CryptoProvider,
    ) -> Result<Self, String> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let config = ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        tcp.set_nodelay(true).unwrap();
        let tls = TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .map_err(|e| format!("TLS handshake: {e}"))?;
        let (_, session) = tls.get_ref();
        let peer_cert = session.peer_certificates().unwrap()[0].clone().into_owned();
        let version = session.protocol_version().unwrap();
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        Ok(Self {
            sender,
            peer_cert,
            version,
        })
    }

    pub async fn post(&mut self, path: &str, body: impl Into<Bytes>) -> (StatusCode, Bytes) {
        self.send(hyper::Method::POST, path, body).await
    }

    pub async fn send(
        &mut self,
        method: hyper::Method,
        path: &str,
        body: impl Into<Bytes>,
    ) -> (StatusCode, Bytes) {
        self.sender.ready().await.unwrap();
        let request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(body.into()))
            .unwrap();
        let response = self.sender.send_request(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, body)
    }

    pub async fn post_json(&mut self, path: &str, body: &serde_json::Value) -> serde_json::Value {
        let (status, body) = self.post(path, serde_json::to_vec(body).unwrap()).await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).unwrap()
    }
}

/// An AdmissionReview v1 for `object` of kind `Thing`.
pub fn admission_review(
    uid: &str,
    operation: &str,
    object: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "example.com", "version": "v1", "kind": "Thing"},
            "resource": {"group": "example.com", "version": "v1", "resource": "things"},
            "name": object["metadata"]["name"],
            "namespace": "default",
            "operation": operation,
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
            "object": object,
            "oldObject": null,
            "dryRun": false
        }
    })
}
