//! A real kube-apiserver on 127.0.0.1 in front of a TLS etcd, with RBAC on, client-certificate and token
//! authentication, and an admin kubeconfig.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::etcd::EtcdTls;
use crate::pki::{self, Ca, Usage};
use crate::process::Process;
use crate::{Error, Result, binaries, ports};

const START_ATTEMPTS: usize = 3;

pub struct ApiServerOptions {
    pub ready_timeout: Duration,
    /// Extra `--flag=value` arguments (e.g. admission plugins) appended last.
    pub extra_args: Vec<String>,
    /// The kube-apiserver to run and whether it is the 1.20 build (which takes `--insecure-port=0`);
    /// the 1.20 build ([`binaries::kube_apiserver`]) when unset.
    pub binary: Option<(PathBuf, bool)>,
}

impl Default for ApiServerOptions {
    fn default() -> Self {
        Self {
            ready_timeout: crate::timeout_from_env(
                "TESTENV_APISERVER_READY_TIMEOUT",
                Duration::from_secs(90),
            ),
            extra_args: Vec::new(),
            binary: None,
        }
    }
}

pub struct KubeApiServer {
    process: Process,
    /// The binary and its flags, to start it again the same way.
    command: (PathBuf, Vec<String>),
    dir: PathBuf,
    ready_timeout: Duration,
    restarts: usize,
    url: String,
    ca_pem: String,
    ca_key_pem: String,
    admin_cert_pem: String,
    admin_key_pem: String,
    admin_token: String,
    kubeconfig: PathBuf,
    token_kubeconfig: PathBuf,
}

impl KubeApiServer {
    /// Starts kube-apiserver with its state in `dir`, talking to etcd at `etcd_urls`, and waits for `/readyz`.
    pub async fn start(
        dir: &Path,
        etcd_urls: &[String],
        etcd_tls: &EtcdTls,
        options: ApiServerOptions,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
        let (binary, legacy) = match &options.binary {
            Some((binary, legacy)) => (binary.clone(), *legacy),
            None => (binaries::kube_apiserver()?, true),
        };
        let ca = Ca::new("kubernetes-ca")?;
        let ca_file = ca.write(dir, "ca")?.cert;
        let serving = ca
            .issue(
                "kube-apiserver",
                None,
                &[
                    "127.0.0.1",
                    "localhost",
                    "kubernetes",
                    "kubernetes.default",
                    "kubernetes.default.svc",
                    "10.96.0.1",
                ],
                Usage::Server,
            )?
            .write(dir, "apiserver")?;
        let admin = ca.issue("testenv-admin", Some("system:masters"), &[], Usage::Client)?;
        let (sa_pub, sa_key) = pki::service_account_key()?;
        let sa_pub_file = dir.join("sa.pub");
        let sa_key_file = dir.join("sa.key");
        crate::write_file(&sa_pub_file, sa_pub.as_bytes())?;
        crate::write_private_file(&sa_key_file, sa_key.as_bytes())?;
        let admin_token = format!("testenv-admin-{:016x}", rand_u64());
        let tokens = dir.join("tokens.csv");
        crate::write_private_file(
            &tokens,
            format!("{admin_token},testenv-admin,testenv-admin-uid,\"system:masters\"\n")
                .as_bytes(),
        )?;

        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = ports::free_port()?;
            let url = format!("https://127.0.0.1:{port}");
            let mut args: Vec<String> = Vec::new();
            if legacy {
                args.push("--insecure-port=0".into());
            }
            args.extend(
                [
                    "--advertise-address=127.0.0.1",
                    "--bind-address=127.0.0.1",
                    "--endpoint-reconciler-type=none",
                    "--authorization-mode=Node,RBAC",
                    "--allow-privileged=true",
                    "--enable-admission-plugins=NodeRestriction",
                    "--profiling=false",
                    "--service-cluster-ip-range=10.96.0.0/12",
                    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                    "--v=1",
                ]
                .map(String::from),
            );
            args.extend([
                format!("--secure-port={port}"),
                format!("--etcd-servers={}", etcd_urls.join(",")),
                format!("--etcd-cafile={}", etcd_tls.ca_file.display()),
                format!("--etcd-certfile={}", etcd_tls.client.cert.display()),
                format!("--etcd-keyfile={}", etcd_tls.client.key.display()),
                format!("--tls-cert-file={}", serving.cert.display()),
                format!("--tls-private-key-file={}", serving.key.display()),
                format!("--client-ca-file={}", ca_file.display()),
                format!("--token-auth-file={}", tokens.display()),
                format!("--service-account-key-file={}", sa_pub_file.display()),
                format!(
                    "--service-account-signing-key-file={}",
                    sa_key_file.display()
                ),
            ]);
            args.extend(options.extra_args.iter().cloned());
            let command = (binary.clone(), args);
            let process = spawn(dir, &command, &format!("{attempt}"))?;
            let kubeconfig = dir.join("admin.kubeconfig");
            let token_kubeconfig = dir.join("admin-token.kubeconfig");
            let mut server = Self {
                process,
                command,
                dir: dir.to_owned(),
                ready_timeout: options.ready_timeout,
                restarts: 0,
                url: url.clone(),
                ca_pem: ca.cert_pem().to_owned(),
                ca_key_pem: ca.key_pem().to_owned(),
                admin_cert_pem: admin.cert_pem.clone(),
                admin_key_pem: admin.key_pem.clone(),
                admin_token: admin_token.clone(),
                kubeconfig,
                token_kubeconfig,
            };
            crate::write_private_file(
                &server.kubeconfig,
                server.kubeconfig_yaml(false).as_bytes(),
            )?;
            crate::write_private_file(
                &server.token_kubeconfig,
                server.kubeconfig_yaml(true).as_bytes(),
            )?;
            match server.wait_ready().await {
                Ok(()) => return Ok(server),
                Err(Error::PortInUse { .. }) if attempt < START_ATTEMPTS => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Kills the process with SIGKILL.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts the process again with the same flags, on the same port and certificates (after
    /// [`kill`](Self::kill) or a crash), and waits for `/readyz`.
    pub async fn start_again(&mut self) -> Result<()> {
        self.process.kill();
        self.restarts += 1;
        self.process = spawn(
            &self.dir,
            &self.command,
            &format!("restart-{}", self.restarts),
        )?;
        self.wait_ready().await
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let timeout = self.ready_timeout;
        let started = Instant::now();
        let client = self.client().await?;
        let mut last_error = String::from("no answer yet");
        while started.elapsed() < timeout {
            if let Err(e) = self.process.ensure_running() {
                return Err(match e {
                    Error::Exited { what, log_tail, .. }
                        if log_tail.contains("address already in use") =>
                    {
                        Error::PortInUse { what, log_tail }
                    }
                    other => other,
                });
            }
            let request = http::Request::get("/readyz")
                .body(Vec::new())
                .expect("static request");
            // `/readyz` can answer before the system namespaces controller has created `default`,
            // where most tests start writing: ready means both.
            let default_namespace = http::Request::get("/api/v1/namespaces/default")
                .body(Vec::new())
                .expect("static request");
            match client.request_text(request).await {
                Ok(body) if body.trim() == "ok" => {
                    match client.request_text(default_namespace).await {
                        Ok(_) => {
                            tracing::info!(url = %self.url, elapsed = ?started.elapsed(), "kube-apiserver ready");
                            return Ok(());
                        }
                        Err(e) => last_error = format!("namespace default not there yet: {e}"),
                    }
                }
                Ok(body) => last_error = format!("/readyz answered {body:?}"),
                Err(e) => last_error = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Err(Error::NotReady {
            what: format!("kube-apiserver at {}", self.url),
            timeout,
            last_error,
            log_tail: self.process.log_tail(30),
        })
    }

    /// A kubeconfig for the admin user (`system:masters`), with a client certificate or a bearer token.
    pub fn kubeconfig_yaml(&self, token: bool) -> String {
        let user = if token {
            serde_json::json!({ "token": self.admin_token })
        } else {
            serde_json::json!({
                "client-certificate-data": b64(&self.admin_cert_pem),
                "client-key-data": b64(&self.admin_key_pem),
            })
        };
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{ "name": "testenv", "cluster": {
                "server": self.url,
                "certificate-authority-data": b64(&self.ca_pem),
            }}],
            "users": [{ "name": "testenv-admin", "user": user }],
            "contexts": [{ "name": "testenv", "context": { "cluster": "testenv", "user": "testenv-admin" }}],
            "current-context": "testenv",
        });
        serde_saphyr::to_string(&config).expect("kubeconfig serializes")
    }

    /// A kubeconfig that authenticates with a bearer `token` issued by this server (e.g. a service
    /// account token from the TokenRequest API), as `user`.
    pub fn kubeconfig_with_token(&self, user: &str, token: &str) -> String {
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{ "name": "testenv", "cluster": {
                "server": self.url,
                "certificate-authority-data": b64(&self.ca_pem),
            }}],
            "users": [{ "name": user, "user": { "token": token } }],
            "contexts": [{ "name": "testenv", "context": { "cluster": "testenv", "user": user }}],
            "current-context": "testenv",
        });
        serde_saphyr::to_string(&config).expect("kubeconfig serializes")
    }

    /// A client authenticated with the admin client certificate.
    pub async fn client(&self) -> Result<kube::Client> {
        client_from_kubeconfig(&self.kubeconfig_yaml(false)).await
    }

    /// A client authenticated with the admin bearer token.
    pub async fn token_client(&self) -> Result<kube::Client> {
        client_from_kubeconfig(&self.kubeconfig_yaml(true)).await
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The key of the CA that signs both the serving and the client certificates: a test can hand it to a
    /// provider as a cluster CA, so that the kubeconfig the provider issues works against this server.
    pub fn ca_key_pem(&self) -> &str {
        &self.ca_key_pem
    }

    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn token_kubeconfig_path(&self) -> &Path {
        &self.token_kubeconfig
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    pub fn stop(&mut self) {
        self.process.stop();
    }
}

/// Starts `command` with its output in `dir/kube-apiserver-{suffix}.log`.
fn spawn(dir: &Path, command: &(PathBuf, Vec<String>), suffix: &str) -> Result<Process> {
    let mut cmd = Command::new(&command.0);
    cmd.args(&command.1);
    let log = dir.join(format!("kube-apiserver-{suffix}.log"));
    Process::spawn("kube-apiserver", cmd, &log)
}

pub async fn client_from_kubeconfig(yaml: &str) -> Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(yaml)
        .map_err(|e| Error::Other(format!("parse kubeconfig: {e}")))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| Error::Other(format!("load kubeconfig: {e}")))?;
    Ok(kube::Client::try_from(config)?)
}

fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}
