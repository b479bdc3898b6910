//! A manager binary (`bootstrap-manager`, `controlplane-manager`) run as a real process against a
//! management plane, with its health endpoint on a free loopback port.

use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::process::Process;
use crate::{Error, Result, ports, probe};

pub struct ManagerProcess {
    process: Process,
    health_addr: String,
}

impl ManagerProcess {
    /// Starts `BINARY run --kubeconfig KUBECONFIG --health-addr 127.0.0.1:<free> EXTRA...`, logging
    /// into `log_dir`.
    pub fn start(
        binary: &Path,
        kubeconfig: &Path,
        log_dir: &Path,
        extra_args: &[&str],
    ) -> Result<Self> {
        let name = binary
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "manager".into());
        let health_addr = format!("127.0.0.1:{}", ports::free_port()?);
        let mut cmd = Command::new(binary);
        cmd.arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--health-addr")
            .arg(&health_addr)
            .args(extra_args);
        let process = Process::spawn(&name, cmd, &log_dir.join(format!("{name}.log")))?;
        Ok(Self {
            process,
            health_addr,
        })
    }

    pub fn health_addr(&self) -> &str {
        &self.health_addr
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
/// `crds` installed: it connects, serves `/healthz` + `/readyz`, logs JSON when asked, and exits 0 within
/// 10 s of SIGTERM.
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
    let status = manager
        .terminate(Duration::from_secs(10))
        .ok_or("no exit within 10s of SIGTERM")?;
    let log = manager.log();
    if !status.success() {
        return Err(format!("exit {status} after SIGTERM; log:\n{log}"));
    }
    if !log.contains("connected to the API server") || !log.contains("\"level\":\"INFO\"") {
        return Err(format!(
            "expected JSON logs saying it connected; log:\n{log}"
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
