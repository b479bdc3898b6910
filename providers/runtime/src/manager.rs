//! The skeleton every manager runs: connect to the API server, serve health endpoints, start the
//! webhook server (on every replica), become leader if asked to, run the controllers until a
//! shutdown signal, then stop them in order.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use kubeadm_api::webhook::{WEBHOOK_CERT_DIR, WEBHOOK_PORT};

use crate::health::{self, Readiness};
use crate::leader::{self, Leader, LeaderElector};
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
    /// Run the controllers only while holding a Lease, so that of several replicas one acts at a
    /// time. Off by default for a manager started by hand; deployment manifests pass `--leader-elect`.
    #[arg(
        long,
        num_args = 0..=1,
        require_equals = true,
        default_value_t = false,
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        value_name = "BOOL"
    )]
    pub leader_elect: bool,
    /// Namespace of the leader election Lease [default: the pod's namespace in a cluster, else
    /// `default`].
    #[arg(long, value_name = "NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader election Lease [default: Cluster API's name for the same manager, e.g.
    /// `kubeadm-bootstrap-manager-leader-election-capi`, so Go and Rust replicas exclude each other].
    #[arg(long, value_name = "NAME")]
    pub leader_election_id: Option<String>,
    /// Requests per second to the management API server, after a burst (0: no limit).
    #[arg(long, default_value_t = 100.0, value_name = "QPS")]
    pub kube_api_qps: f64,
    /// Requests sent at once before `--kube-api-qps` applies.
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub kube_api_burst: u32,
    /// How often a settled object is looked at again when nothing about it changes, e.g. 10m.
    #[arg(long, default_value = "10m", value_parser = crate::duration::parse_duration)]
    pub sync_period: Duration,
    #[command(flatten)]
    pub webhook: WebhookArgs,
}

/// Options of the admission and conversion webhook server, which every replica runs.
#[derive(Clone, Debug, clap::Args)]
pub struct WebhookArgs {
    /// Port of the HTTPS webhook server; 0 turns it off.
    #[arg(long, default_value_t = WEBHOOK_PORT, value_name = "PORT")]
    pub webhook_port: u16,
    /// Folder holding the serving certificate `tls.crt` and its key `tls.key`; a renewed pair is
    /// picked up without a restart.
    #[arg(long, default_value = WEBHOOK_CERT_DIR, value_name = "DIR")]
    pub webhook_cert_dir: PathBuf,
    /// Address the webhook server listens on.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::UNSPECIFIED), value_name = "IP")]
    pub webhook_bind_address: IpAddr,
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// Cluster API's TLS flags for the webhook server, with Go's names.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct TlsArgs {
    /// Lowest TLS version served: VersionTLS12 (the default) or VersionTLS13.
    #[arg(long, default_value = "VersionTLS12", value_name = "VERSION")]
    pub tls_min_version: String,
    /// TLS 1.2 cipher suites offered, comma-separated Go names (e.g.
    /// TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256); every AEAD ECDHE suite when unset. TLS 1.3's suites are
    /// always offered, as in Go.
    #[arg(long, value_delimiter = ',', value_name = "SUITES")]
    pub tls_cipher_suites: Vec<String>,
    /// Key-exchange groups in order of preference, comma-separated Go names: X25519, CurveP256,
    /// CurveP384; all three when unset.
    #[arg(long, value_delimiter = ',', value_name = "CURVES")]
    pub tls_curve_preferences: Vec<String>,
}

impl WebhookArgs {
    /// Where the webhook server listens, or `None` when `--webhook-port=0` turns it off.
    pub fn addr(&self) -> Option<SocketAddr> {
        (self.webhook_port != 0)
            .then(|| SocketAddr::new(self.webhook_bind_address, self.webhook_port))
    }
}

/// A running webhook server, stopped by the [`Shutdown`] it was started with.
pub type Serving = Pin<Box<dyn Future<Output = ()> + Send>>;

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
    #[error(transparent)]
    LeaderElection(#[from] leader::Error),
    #[error("lost leadership: {0}; stopping so that only the new leader acts")]
    LostLeadership(#[from] leader::Lost),
    #[error("{0}")]
    Controller(String),
    #[error("cannot serve webhooks: {0}")]
    Webhooks(String),
}

/// The release the managers were built as, without the `v`: the crate's version, or
/// `KUBEADM_PROVIDERS_VERSION` when the build sets it (a release built from a tag, or a second build
/// of the same sources under the next version, as `clusterctl upgrade` tests need). `--version`, the
/// User-Agent and the first log line all say it.
pub const VERSION: &str = match option_env!("KUBEADM_PROVIDERS_VERSION") {
    Some(version) => version,
    None => env!("CARGO_PKG_VERSION"),
};

/// The User-Agent of a manager's management-cluster client: `bootstrap-manager/v0.1.0`.
pub fn user_agent(manager: &Manager) -> String {
    format!("{}/v{VERSION}", manager.name)
}

/// Who a manager is: its name (logs, exit messages) and the Lease its replicas compete for by default.
#[derive(Clone, Copy, Debug)]
pub struct Manager {
    pub name: &'static str,
    /// CAPI's own Lease name for the same role, so a Go and a Rust manager of one kind never both lead
    /// while one replaces the other.
    pub default_lease: &'static str,
}

impl ManagerArgs {
    /// The Lease `(namespace, name)` the manager competes for, or `None` without `--leader-elect`.
    pub fn leader_election_lease(&self, manager: &Manager) -> Option<(String, String)> {
        if !self.leader_elect {
            return None;
        }
        let namespace = self
            .leader_election_namespace
            .clone()
            .filter(|namespace| !namespace.is_empty())
            .or_else(leader::pod_namespace)
            .unwrap_or_else(|| "default".into());
        let lease = self
            .leader_election_id
            .clone()
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| manager.default_lease.to_owned());
        Some((namespace, lease))
    }

    /// A client for the management cluster, from `--kubeconfig` or the in-cluster environment, that
    /// names itself `<manager>/v<version>` in its User-Agent (what audit logs and API server metrics
    /// tell clients apart by, as Cluster API's managers name themselves).
    pub async fn client(&self, manager: &Manager) -> Result<kube::Client, Error> {
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
        let mut config = config;
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_str(&user_agent(manager))
                .map_err(|e| invalid(format!("User-Agent: {e}")))?,
        ));
        let url = config.cluster_url.to_string();
        let client = kube::Client::try_from(config).map_err(|e| invalid(e.to_string()))?;
        let client = crate::metrics::count_requests(&client);
        let client = crate::rate_limit::limited(
            &client,
            crate::rate_limit::Limit {
                qps: self.kube_api_qps,
                burst: self.kube_api_burst,
            },
        );
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

/// Runs a manager: logs, connects, serves health, waits for the leader election Lease when
/// `--leader-elect` is on, runs `controllers` until SIGTERM/SIGINT (or until they end), lets them
/// finish, releases the Lease, then shuts the health server down. The webhook flags are ignored; see
/// [`run_manager_with_webhooks`].
///
/// `/healthz` answers while the manager waits for the Lease; `/readyz` is left to the controllers, so a
/// replica that does not lead stays unready. A leader that loses its Lease returns
/// [`Error::LostLeadership`] at once, dropping its controllers mid-work rather than writing next to the
/// new leader.
pub async fn run_manager<F, Fut>(
    manager: &Manager,
    args: &ManagerArgs,
    controllers: F,
) -> Result<(), Error>
where
    F: FnOnce(kube::Client, Readiness, Shutdown) -> Fut,
    Fut: Future<Output = Result<(), Error>>,
{
    run(manager, args, None::<NoWebhooks>, controllers).await
}

type NoWebhooks =
    fn(kube::Client, WebhookArgs, Shutdown) -> std::future::Ready<Result<Serving, Error>>;

/// [`run_manager`] that also serves webhooks on every replica, leader or not, unless
/// `--webhook-port=0`. `webhooks` gets the client, the webhook options and the [`Shutdown`] that
/// stops the server; it returns once the server listens with its certificate loaded (an error, e.g.
/// a missing `tls.crt`, stops the manager before it competes for the Lease) and hands back the
/// serving future, which runs until shutdown. `/readyz` turns ready only once it has returned.
pub async fn run_manager_with_webhooks<W, WFut, F, Fut>(
    manager: &Manager,
    args: &ManagerArgs,
    webhooks: W,
    controllers: F,
) -> Result<(), Error>
where
    W: FnOnce(kube::Client, WebhookArgs, Shutdown) -> WFut,
    WFut: Future<Output = Result<Serving, Error>>,
    F: FnOnce(kube::Client, Readiness, Shutdown) -> Fut,
    Fut: Future<Output = Result<(), Error>>,
{
    run(manager, args, Some(webhooks), controllers).await
}

async fn run<W, WFut, F, Fut>(
    manager: &Manager,
    args: &ManagerArgs,
    webhooks: Option<W>,
    controllers: F,
) -> Result<(), Error>
where
    W: FnOnce(kube::Client, WebhookArgs, Shutdown) -> WFut,
    WFut: Future<Output = Result<Serving, Error>>,
    F: FnOnce(kube::Client, Readiness, Shutdown) -> Fut,
    Fut: Future<Output = Result<(), Error>>,
{
    let name = manager.name;
    telemetry::init(args.log_format);
    tracing::info!(manager = name, version = VERSION, "starting");
    let client = args.client(manager).await?;
    let elector = match args.leader_election_lease(manager) {
        Some((namespace, lease)) => Some(LeaderElector::new(
            client.clone(),
            &namespace,
            &lease,
            leader::default_identity(),
            leader::Timing::default(),
        )?),
        None => None,
    };
    let readiness = Readiness::default();
    let listener = health::bind(args.health_addr).await?;
    // From here on every way out goes through the end of this function, which stops it.
    let give_back = tokio::spawn(crate::memory::give_back());
    tracing::info!(addr = %listener.local_addr()?, "serving /healthz and /readyz");

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let health_stop = Shutdown(stop_rx.clone());
    let health = tokio::spawn(
        axum::serve(listener, health::router(readiness.clone()))
            .with_graceful_shutdown(health_stop.wait())
            .into_future(),
    );

    // One signal listener for every phase, so a signal between them is not missed.
    let signal = crate::shutdown::signalled();
    tokio::pin!(signal);
    let mut webhook_server = None;
    let result = async {
        match (webhooks, args.webhook.addr()) {
            (Some(start), Some(_)) => {
                readiness.webhooks_starting();
                let serving = tokio::select! {
                    serving = start(client.clone(), args.webhook.clone(), Shutdown(stop_rx.clone())) => serving?,
                    _ = &mut signal => return Ok(()),
                };
                webhook_server = Some(tokio::spawn(serving));
                readiness.webhooks_ready();
            }
            (Some(_), None) => tracing::info!("webhook server turned off (--webhook-port=0)"),
            (None, _) => {}
        }
        let start = {
            let readiness = readiness.clone();
            move || {
                readiness.controllers_starting();
                controllers(client, readiness, Shutdown(stop_rx))
            }
        };
        lead_and_run(elector, start, &readiness, &stop_tx, signal).await
    }
    .await;
    readiness.stopping();
    let _ = stop_tx.send(true);
    if let Some(server) = webhook_server
        && let Err(e) = server.await
    {
        tracing::warn!(error = %e, "webhook server task failed");
    }
    match health.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "health server ended with an error"),
        Err(e) => tracing::warn!(error = %e, "health server task failed"),
    }
    give_back.abort();
    tracing::info!(manager = name, "stopped");
    result
}

/// Becomes leader (when `elector` is given), then starts the controllers and drives them to their
/// end, a shutdown signal, or the loss of the Lease.
async fn lead_and_run<Fut>(
    elector: Option<LeaderElector>,
    start: impl FnOnce() -> Fut,
    readiness: &Readiness,
    stop: &tokio::sync::watch::Sender<bool>,
    mut signal: Pin<&mut impl Future<Output = ()>>,
) -> Result<(), Error>
where
    Fut: Future<Output = Result<(), Error>>,
{
    let mut leader = match elector {
        None => None,
        Some(elector) => tokio::select! {
            leader = elector.acquire() => Some(leader),
            _ = &mut signal => return Ok(()),
        },
    };

    let mut controllers = Box::pin(start());
    let result = tokio::select! {
        r = &mut controllers => r,
        lost = lost(&mut leader) => return Err(lost.into()),
        _ = &mut signal => {
            readiness.stopping();
            let _ = stop.send(true);
            tokio::select! {
                r = tokio::time::timeout(SHUTDOWN_GRACE, &mut controllers) => match r {
                    Ok(r) => r,
                    Err(_) => {
                        tracing::warn!(grace = ?SHUTDOWN_GRACE, "controllers did not stop in time");
                        Ok(())
                    }
                },
                lost = lost(&mut leader) => return Err(lost.into()),
            }
        }
    };
    // The controllers are gone before the Lease is: no overlap with the next leader.
    drop(controllers);
    if let Some(leader) = leader {
        leader.step_down().await;
    }
    result
}

/// Resolves when `leader` loses its Lease; never without leader election.
async fn lost(leader: &mut Option<Leader>) -> leader::Lost {
    match leader {
        Some(leader) => leader.lost().await,
        None => std::future::pending().await,
    }
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        manager: ManagerArgs,
    }

    const BOOTSTRAP: Manager = Manager {
        name: "bootstrap-manager",
        default_lease: "kubeadm-bootstrap-manager-leader-election-capi",
    };
    const CONTROL_PLANE: Manager = Manager {
        name: "controlplane-manager",
        default_lease: "kubeadm-control-plane-manager-leader-election-capi",
    };

    fn parse(args: &[&str]) -> ManagerArgs {
        Cli::try_parse_from(std::iter::once("manager").chain(args.iter().copied()))
            .unwrap()
            .manager
    }

    #[test]
    fn each_manager_names_itself_and_its_version_to_the_api_server() {
        let version = VERSION;
        assert_eq!(
            user_agent(&BOOTSTRAP),
            format!("bootstrap-manager/v{version}")
        );
        assert_eq!(
            user_agent(&CONTROL_PLANE),
            format!("controlplane-manager/v{version}")
        );
        assert!(http::HeaderValue::from_str(&user_agent(&CONTROL_PLANE)).is_ok());
    }

    #[test]
    fn leader_election_is_off_unless_asked_for() {
        assert_eq!(parse(&[]).leader_election_lease(&BOOTSTRAP), None);
        assert_eq!(
            parse(&["--leader-elect=false"]).leader_election_lease(&BOOTSTRAP),
            None
        );
    }

    #[test]
    fn the_lease_is_the_one_capi_uses_by_default() {
        let (namespace, lease) = parse(&["--leader-elect"])
            .leader_election_lease(&BOOTSTRAP)
            .unwrap();
        // The pod's namespace in a cluster, `default` elsewhere.
        assert_eq!(
            namespace,
            leader::pod_namespace().unwrap_or_else(|| "default".into())
        );
        assert_eq!(lease, "kubeadm-bootstrap-manager-leader-election-capi");
    }

    #[test]
    fn webhooks_listen_on_9443_with_controller_runtimes_cert_dir_unless_turned_off() {
        let args = parse(&[]).webhook;
        assert_eq!(args.addr(), Some(([0, 0, 0, 0], 9443).into()));
        assert_eq!(
            args.webhook_cert_dir,
            PathBuf::from("/tmp/k8s-webhook-server/serving-certs")
        );
        let args = parse(&[
            "--webhook-port",
            "10443",
            "--webhook-bind-address",
            "127.0.0.1",
            "--webhook-cert-dir",
            "/certs",
        ])
        .webhook;
        assert_eq!(args.addr(), Some(([127, 0, 0, 1], 10443).into()));
        assert_eq!(args.webhook_cert_dir, PathBuf::from("/certs"));
        assert_eq!(parse(&["--webhook-port=0"]).webhook.addr(), None);
    }

    #[test]
    fn namespace_and_name_of_the_lease_can_be_chosen() {
        let args = parse(&[
            "--leader-elect=true",
            "--leader-election-namespace",
            "capi-system",
            "--leader-election-id",
            "kcp-leader",
        ]);
        assert_eq!(
            args.leader_election_lease(&CONTROL_PLANE),
            Some(("capi-system".into(), "kcp-leader".into()))
        );
    }
}
