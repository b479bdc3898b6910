//! A manager binary (`bootstrap-manager`, `controlplane-manager`) run as a real process against a
//! management plane, with its health endpoint and its webhook server on free loopback ports.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::pki::{Ca, LOOPBACK_HOSTS, Usage};
use crate::process::Process;
use crate::{Error, Result, ports, probe};

pub struct ManagerProcess {
    process: Process,
    health_addr: String,
    webhook: Option<WebhookServing>,
}

/// Where a manager serves its webhooks: a free loopback port and a serving certificate for
/// 127.0.0.1 and localhost from a throw-away CA.
#[derive(Clone, Debug)]
pub struct WebhookServing {
    pub port: u16,
    /// Holds `tls.crt` and `tls.key`, as `--webhook-cert-dir` expects, and the CA as `ca.crt`.
    pub cert_dir: PathBuf,
    /// The CA to put in a webhook configuration's `caBundle`.
    pub ca_pem: String,
}

impl WebhookServing {
    /// Picks a port and writes a serving certificate into `cert_dir` (created if missing).
    pub fn new(cert_dir: &Path) -> Result<Self> {
        let ca = Ca::new("webhook-ca")?;
        let pair = ca.issue("webhook", None, LOOPBACK_HOSTS, Usage::Server)?;
        std::fs::create_dir_all(cert_dir)
            .map_err(|e| Error::io(format!("create {}", cert_dir.display()), e))?;
        pair.write(cert_dir, "tls")?;
        crate::write_file(&cert_dir.join("ca.crt"), ca.cert_pem().as_bytes())?;
        Ok(Self {
            port: ports::free_port()?,
            cert_dir: cert_dir.to_path_buf(),
            ca_pem: ca.cert_pem().to_owned(),
        })
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The manager flags that serve webhooks here.
    pub fn args(&self) -> Vec<String> {
        vec![
            "--webhook-port".into(),
            self.port.to_string(),
            "--webhook-bind-address".into(),
            "127.0.0.1".into(),
            "--webhook-cert-dir".into(),
            self.cert_dir.display().to_string(),
        ]
    }
}

impl ManagerProcess {
    /// Starts `BINARY run --kubeconfig KUBECONFIG --health-addr 127.0.0.1:<free> EXTRA...`, logging
    /// into `log_dir`. Unless `extra_args` hold a `--webhook-*` flag, the manager also serves its
    /// webhooks on a free loopback port with a certificate written into `log_dir` (see
    /// [`ManagerProcess::webhook`]).
    pub fn start(
        binary: &Path,
        kubeconfig: &Path,
        log_dir: &Path,
        extra_args: &[&str],
    ) -> Result<Self> {
        Self::start_logging(binary, kubeconfig, log_dir, extra_args, None)
    }

    /// [`ManagerProcess::start`], logging by the filter `log_filter` (`RUST_LOG`) where given rather
    /// than by the inherited one.
    pub fn start_logging(
        binary: &Path,
        kubeconfig: &Path,
        log_dir: &Path,
        extra_args: &[&str],
        log_filter: Option<&str>,
    ) -> Result<Self> {
        let name = binary
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "manager".into());
        let health_port = ports::free_port()?;
        let health_addr = format!("127.0.0.1:{health_port}");
        let webhook = if extra_args.iter().any(|a| a.starts_with("--webhook-")) {
            None
        } else {
            let certs = log_dir.join(format!("{name}-{health_port}-webhook-certs"));
            Some(WebhookServing::new(&certs)?)
        };
        let mut cmd = Command::new(binary);
        cmd.arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--health-addr")
            .arg(&health_addr)
            .args(webhook.iter().flat_map(WebhookServing::args))
            .args(extra_args);
        if let Some(filter) = log_filter {
            cmd.env("RUST_LOG", filter);
        }
        Self::spawn(cmd, health_addr, webhook, log_dir)
    }

    /// Starts a manager built with controller-runtime (Cluster API's), which takes its flags without a
    /// subcommand: `args` must hold `--health-addr <health_addr>` and the flags serving webhooks with
    /// `webhook`.
    pub fn start_go(
        binary: &Path,
        args: &[String],
        health_addr: String,
        webhook: WebhookServing,
        log_dir: &Path,
    ) -> Result<Self> {
        let mut cmd = Command::new(binary);
        cmd.args(args);
        Self::spawn(cmd, health_addr, Some(webhook), log_dir)
    }

    /// Spawns `command`, a manager answering `/readyz` at `health_addr`, logging into `log_dir`.
    pub fn spawn(
        command: Command,
        health_addr: String,
        webhook: Option<WebhookServing>,
        log_dir: &Path,
    ) -> Result<Self> {
        let name = Path::new(command.get_program())
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "manager".into());
        Self::spawn_named(&name, command, health_addr, webhook, log_dir)
    }

    /// [`ManagerProcess::spawn`] under `name` (its log: `<log_dir>/<name>.log`), for a command whose
    /// program is not the manager itself.
    pub fn spawn_named(
        name: &str,
        command: Command,
        health_addr: String,
        webhook: Option<WebhookServing>,
        log_dir: &Path,
    ) -> Result<Self> {
        std::fs::create_dir_all(log_dir)
            .map_err(|e| Error::io(format!("create {}", log_dir.display()), e))?;
        let process = Process::spawn(name, command, &log_dir.join(format!("{name}.log")))?;
        Ok(Self {
            process,
            health_addr,
            webhook,
        })
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    pub fn name(&self) -> &str {
        self.process.name()
    }

    pub fn health_addr(&self) -> &str {
        &self.health_addr
    }

    /// Where the manager serves webhooks, when [`ManagerProcess::start`] set it up.
    pub fn webhook(&self) -> Option<&WebhookServing> {
        self.webhook.as_ref()
    }

    pub fn process(&mut self) -> &mut Process {
        &mut self.process
    }

    /// GET a path of the health endpoint: (status, body).
    pub async fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        probe::http_get(&self.health_addr, path).await
    }

    /// Waits until `/readyz` answers 200; fails early with the log when the process exits.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut last_error = String::from("no answer yet");
        while Instant::now() < deadline {
            self.process.ensure_running()?;
            match self.get("/readyz").await {
                Ok((200, _)) => return Ok(()),
                Ok((status, body)) => last_error = format!("/readyz answered {status}: {body}"),
                Err(e) => last_error = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(Error::NotReady {
            what: self.process.name().to_owned(),
            timeout,
            last_error,
            log_tail: self.process.log_tail(30),
        })
    }

    /// Sends SIGTERM and returns the exit status if the manager stopped within `grace`.
    pub fn terminate(&mut self, grace: Duration) -> Option<ExitStatus> {
        self.process.terminate(grace)
    }

    /// Waits for the process to exit on its own (e.g. after a start-up error).
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.process.try_exit_status() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.process.log_path()).unwrap_or_default()
    }
}

/// The start-up contract every manager binary meets, checked against a fresh management plane with
/// `crds` installed: it connects, serves `/healthz` + `/readyz` and its webhooks, logs JSON when
/// asked, and exits 0 within 10 s of SIGTERM; without its serving certificate it exits non-zero by
/// itself, naming the file.
pub async fn check_serves_and_stops(
    binary: &Path,
    crds: &[CustomResourceDefinition],
) -> std::result::Result<(), String> {
    let plane = crate::ManagementPlane::start()
        .await
        .map_err(|e| e.to_string())?;
    plane.install_crds(crds).await.map_err(|e| e.to_string())?;
    let mut manager = ManagerProcess::start(
        binary,
        plane.kubeconfig_path(),
        plane.dir(),
        &["--log-format", "json"],
    )
    .map_err(|e| e.to_string())?;
    manager
        .wait_ready(Duration::from_secs(60))
        .await
        .map_err(|e| e.to_string())?;
    let healthz = manager.get("/healthz").await.map_err(|e| e.to_string())?;
    if healthz != (200, "ok".to_string()) {
        return Err(format!("/healthz answered {healthz:?}"));
    }
    let webhook_port = manager.webhook().ok_or("no webhook port was set up")?.port;
    tokio::net::TcpStream::connect(("127.0.0.1", webhook_port))
        .await
        .map_err(|e| {
            format!("ready, but nothing listens on the webhook port {webhook_port}: {e}")
        })?;
    let status = manager
        .terminate(Duration::from_secs(10))
        .ok_or("no exit within 10s of SIGTERM")?;
    let log = manager.log();
    if !status.success() {
        return Err(format!("exit {status} after SIGTERM; log:\n{log}"));
    }
    if !log.contains("connected to the API server")
        || !log.contains("serving webhooks")
        || !log.contains("\"level\":\"INFO\"")
    {
        return Err(format!(
            "expected JSON logs saying it connected and serves webhooks; log:\n{log}"
        ));
    }
    check_fails_fast_without_serving_cert(binary, &plane).await
}

/// A manager whose `--webhook-cert-dir` holds no certificate exits non-zero by itself, naming the
/// missing `tls.crt`.
async fn check_fails_fast_without_serving_cert(
    binary: &Path,
    plane: &crate::ManagementPlane,
) -> std::result::Result<(), String> {
    let empty = plane.dir().join("no-webhook-certs");
    std::fs::create_dir_all(&empty).map_err(|e| e.to_string())?;
    let port = ports::free_port().map_err(|e| e.to_string())?.to_string();
    let cert_dir = empty.display().to_string();
    let mut manager = ManagerProcess::start(
        binary,
        plane.kubeconfig_path(),
        &empty,
        &["--webhook-port", &port, "--webhook-cert-dir", &cert_dir],
    )
    .map_err(|e| e.to_string())?;
    let status = manager
        .wait_exit(Duration::from_secs(20))
        .await
        .ok_or("still running 20s after start without a serving certificate")?;
    let log = manager.log();
    let missing = empty.join("tls.crt").display().to_string();
    if status.success() || !log.contains(&missing) {
        return Err(format!(
            "expected a failing exit naming {missing}, got {status}; log:\n{log}"
        ));
    }
    Ok(())
}

/// A manager started where the CRDs it watches are not installed exits non-zero by itself, naming the
/// first missing CRD.
pub async fn check_fails_fast_without_crds(
    binary: &Path,
    crd: &str,
) -> std::result::Result<(), String> {
    let plane = crate::ManagementPlane::start()
        .await
        .map_err(|e| e.to_string())?;
    let mut manager = ManagerProcess::start(binary, plane.kubeconfig_path(), plane.dir(), &[])
        .map_err(|e| e.to_string())?;
    let status = manager
        .wait_exit(Duration::from_secs(20))
        .await
        .ok_or("still running 20s after start without its CRDs")?;
    let log = manager.log();
    if status.success() || !log.contains(crd) {
        return Err(format!(
            "expected a failing exit naming {crd}, got {status}; log:\n{log}"
        ));
    }
    Ok(())
}

/// A manager given a kubeconfig that does not exist exits non-zero by itself, naming the file.
pub async fn check_fails_fast_on_missing_kubeconfig(
    binary: &Path,
) -> std::result::Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let kubeconfig = dir.path().join("missing.kubeconfig");
    let mut manager =
        ManagerProcess::start(binary, &kubeconfig, dir.path(), &[]).map_err(|e| e.to_string())?;
    let status = manager
        .wait_exit(Duration::from_secs(10))
        .await
        .ok_or("still running 10s after start with a missing kubeconfig")?;
    let log = manager.log();
    if status.success() || !log.contains("missing.kubeconfig") {
        return Err(format!(
            "expected a failing exit naming the kubeconfig, got {status}; log:\n{log}"
        ));
    }
    Ok(())
}
