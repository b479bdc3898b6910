//! The skeleton every manager runs: connect to the API server, serve health endpoints, run the
//! controllers until a shutdown signal, then stop them in order.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::health::{self, Readiness};
use crate::telemetry::{self, LogFormat};

/// Options shared by `bootstrap-manager run` and `controlplane-manager run`.
#[derive(Clone, Debug, clap::Args)]
pub struct ManagerArgs {
    /// Kubeconfig of the management cluster; without it the in-cluster service account is used.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Address of the `/healthz` and `/readyz` endpoints.
    #[arg(long, default_value = "0.0.0.0:9440")]
    pub health_addr: SocketAddr,
    /// Only watch objects in this namespace (all namespaces when empty).
    #[arg(long, default_value = "")]
    pub namespace: String,
    /// Only reconcile objects whose `cluster.x-k8s.io/watch-filter` label has this value.
    #[arg(long, default_value = "")]
    pub watch_filter: String,
    /// Log output format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// How long to wait for the API server at start-up before giving up.
    #[arg(long, default_value = "30", value_name = "SECONDS")]
    pub connect_timeout: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot load the kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
    #[error("cannot reach the API server at {url} within {timeout:?}: {message}")]
    Unreachable {
        url: String,
        timeout: Duration,
        message: String,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Controller(String),
}

impl ManagerArgs {
    /// A client for the management cluster, from `--kubeconfig` or the in-cluster environment.
    pub async fn client(&self) -> Result<kube::Client, Error> {
        let source = self
            .kubeconfig
            .as_ref()
            .map_or("(in-cluster)".into(), |p| p.display().to_string());
        let invalid = |message: String| Error::Kubeconfig {
            path: source.clone(),
            message,
        };
        let config = match &self.kubeconfig {
            Some(path) => {
                let kubeconfig = kube::config::Kubeconfig::read_from(path)
                    .map_err(|e| invalid(e.to_string()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                    .await
                    .map_err(|e| invalid(e.to_string()))?
            }
            None => kube::Config::infer()
                .await
                .map_err(|e| invalid(e.to_string()))?,
        };
        let url = config.cluster_url.to_string();
        let client = kube::Client::try_from(config).map_err(|e| invalid(e.to_string()))?;
        let timeout = Duration::from_secs(self.connect_timeout);
        let version = tokio::time::timeout(timeout, client.apiserver_version())
            .await
            .map_err(|_| Error::Unreachable {
                url: url.clone(),
                timeout,
                message: "no answer".into(),
            })?
            .map_err(|e| Error::Unreachable {
                url: url.clone(),
                timeout,
                message: e.to_string(),
            })?;
        tracing::info!(%url, version = %version.git_version, "connected to the API server");
        Ok(client)
    }
}

/// Resolves when the manager is asked to stop; handed to the controllers so they can finish in-flight
/// work instead of being dropped mid-reconcile.
#[derive(Clone, Debug)]
pub struct Shutdown(tokio::sync::watch::Receiver<bool>);

impl Shutdown {
    /// A trigger (send `true` to stop) and the `Shutdown` it fires, for running controllers in tests.
    pub fn channel() -> (tokio::sync::watch::Sender<bool>, Shutdown) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (tx, Shutdown(rx))
    }

    pub async fn wait(mut self) {
        let _ = self.0.wait_for(|stop| *stop).await;
    }
}

/// How long controllers get to finish after a shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// Runs a manager: logs, connects, serves health, runs `controllers` until SIGTERM/SIGINT (or until they
/// end), lets them finish, then shuts the health server down.
pub async fn run_manager<F, Fut>(
    name: &str,
    args: &ManagerArgs,
    controllers: F,
) -> Result<(), Error>
where
    F: FnOnce(kube::Client, Readiness, Shutdown) -> Fut,
    Fut: Future<Output = Result<(), Error>>,
{
    telemetry::init(args.log_format);
    tracing::info!(
        manager = name,
        version = env!("CARGO_PKG_VERSION"),
        "starting"
    );
    let client = args.client().await?;
    let readiness = Readiness::default();
    let listener = health::bind(args.health_addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "serving /healthz and /readyz");

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let health_stop = Shutdown(stop_rx.clone());
    let health = tokio::spawn(
        axum::serve(listener, health::router(readiness.clone()))
            .with_graceful_shutdown(health_stop.wait())
            .into_future(),
    );

    let controllers = controllers(client, readiness.clone(), Shutdown(stop_rx));
    tokio::pin!(controllers);
    let result = tokio::select! {
        r = &mut controllers => r,
        _ = crate::shutdown::signalled() => {
            readiness.set_ready(false);
            let _ = stop_tx.send(true);
            match tokio::time::timeout(SHUTDOWN_GRACE, &mut controllers).await {
                Ok(r) => r,
                Err(_) => {
                    tracing::warn!(grace = ?SHUTDOWN_GRACE, "controllers did not stop in time");
                    Ok(())
                }
            }
        }
    };
    readiness.set_ready(false);
    let _ = stop_tx.send(true);
    match health.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "health server ended with an error"),
        Err(e) => tracing::warn!(error = %e, "health server task failed"),
    }
    tracing::info!(manager = name, "stopped");
    result
}

/// Turns a manager's result into the process exit code, logging and printing the error.
pub fn exit_code(name: &str, result: Result<(), Error>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "{name} failed");
            eprintln!("{name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
