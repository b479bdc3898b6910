//! The KubeadmControlPlane controller: the run loop, its retry policy, and the way in of each reconcile
//! (pause, finalizer, deletion). A live control plane is reconciled as phases over one view (see
//! [`reconcile`]): observe once, take at most one step, write the status once.

mod addons;
mod annotations;
mod api_servers;
mod credentials;
mod etcd;
mod events;
mod grouped;
mod in_flight;
mod lifecycle;
mod machine_cache;
mod machines;
mod metrics;
mod observe;
mod phases;
pub mod preview;
pub mod rbac;
mod reconcile;
mod scope;
mod slim_watch;
mod status;
mod workload;
mod workload_watches;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::Action;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ObjectRef};
use kube::{Resource, ResourceExt};
use kubeadm_api::cluster::v1beta2::{Cluster, Machine};
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_cluster::certificates::CertError;
use kubeadm_runtime::Shutdown;
use kubeadm_runtime::controller::{ErrorBackoff, log_outcome, run_until_shutdown};
use kubeadm_runtime::events::Recorder;
use kubeadm_runtime::watching::{
    cached_or_live, controller, copy, scoped_api, served, watcher_config,
};

use metrics::{METRICS, counted};
pub use metrics::{api_writes_total, reconcile_time, workload_views};

use kubeadm_cluster::kubeconfig::KubeconfigError;

pub use lifecycle::FINALIZER;

/// How soon a control plane that waits for something outside it (a deletion, a blocked remediation)
/// is looked at again when no watch event arrives first; a change in flight is polled sooner
/// ([`in_flight`]).
const WAIT: Duration = Duration::from_secs(10);
/// How soon after an etcd maintenance step: a defragmentation round goes member by member.
const AFTER_MAINTENANCE: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
pub struct Settings {
    /// Only objects in this namespace (all when empty).
    pub namespace: String,
    /// Only objects whose `cluster.x-k8s.io/watch-filter` label has this value (all when empty).
    pub watch_filter: String,
    /// Parts of an interrupted machine creation younger than this are left alone: the creation may still
    /// be in flight in a controller that is about to lose its lease.
    pub leftover_grace: Duration,
    /// Control planes reconciled at the same time (Cluster API's default is 100).
    pub concurrency: u16,
    /// How often a settled control plane is looked at again (certificate expiry, kubeconfig renewal).
    pub sync_period: Duration,
    /// How often a settled control plane with stacked etcd is looked at again when shorter than the
    /// sync period: etcd's own changes (an alarm, a member that went down while its pod still shows
    /// running) raise no Kubernetes event. 5 minutes by default: with many clusters, every check calls
    /// each workload cluster and its etcd.
    pub etcd_health_period: Duration,
    /// How long an etcd learner may take to catch up before it is removed.
    pub learner_timeout: k8s_openapi::jiff::SignedDuration,
    /// How long an added etcd member may take to start before it is removed.
    pub unstarted_grace: k8s_openapi::jiff::SignedDuration,
    /// Where scheduled etcd snapshots go (`<dir>/<namespace>/<cluster>/`); none are taken without it.
    pub snapshot_dir: Option<std::path::PathBuf>,
    /// How many snapshots to keep per cluster.
    pub snapshots_keep: usize,
    /// How etcd is reached: the workload API server's port-forward, or the members' client URLs.
    pub etcd_access: crate::etcd::EtcdAccess,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            namespace: String::new(),
            watch_filter: String::new(),
            leftover_grace: Duration::from_secs(60),
            concurrency: 100,
            sync_period: Duration::from_secs(600),
            etcd_health_period: Duration::from_secs(300),
            learner_timeout: crate::etcd_membership::DEFAULT_LEARNER_TIMEOUT,
            unstarted_grace: crate::etcd_membership::DEFAULT_UNSTARTED_GRACE,
            snapshot_dir: None,
            snapshots_keep: 7,
            etcd_access: crate::etcd::EtcdAccess::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Certificates(#[from] CertError),
    #[error(transparent)]
    Kubeconfig(#[from] KubeconfigError),
    #[error("{0}")]
    Infrastructure(String),
    #[error("ClusterConfiguration for the workload cluster: {0}")]
    ClusterConfiguration(String),
    #[error("etcd: {0}")]
    Etcd(String),
    #[error("{0}")]
    Workload(String),
}

impl From<crate::etcd::EtcdError> for Error {
    fn from(e: crate::etcd::EtcdError) -> Self {
        Error::Etcd(e.to_string())
    }
}

impl From<workload::Unreachable> for Error {
    fn from(e: workload::Unreachable) -> Self {
        Error::Workload(e.to_string())
    }
}

impl Error {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Certificates(e) => e.metric_label(),
            Error::Kubeconfig(_) => "kubeconfig",
            Error::Infrastructure(_) => "infrastructure",
            Error::ClusterConfiguration(_) => "cluster_configuration",
            Error::Etcd(_) => "etcd",
            Error::Workload(_) => "workload",
        }
    }
}

pub struct Context {
    pub client: kube::Client,
    pub settings: Settings,
    pub recorder: Recorder,
    /// Cached workload-cluster clients.
    workload: kubeadm_cluster::workload::WorkloadClients,
    /// Discovered infrastructure kinds.
    resources: machines::Resources,
    /// etcd clients and learner timers.
    etcd: etcd::EtcdSessions,
    /// Retry delays of control planes whose last reconcile failed; cleared by a success.
    backoff: ErrorBackoff<ObjectRef<KubeadmControlPlane>>,
    /// When the control planes with a change in flight took their last step.
    in_flight: in_flight::InFlight,
    /// The API servers of staying machines, for clusters with a machine leaving.
    api_servers: api_servers::ApiServers,
    /// Watches on the workload clusters' control-plane pods and Nodes, which wake their control planes.
    watches: workload_watches::WorkloadWatches,
    /// The cluster certificates and kubeconfigs, fed by a watch.
    secrets: kubeadm_cluster::SecretCache,
    /// The control-plane Machines and KubeadmConfigs, fed by watches.
    machine_cache: machine_cache::MachineCache,
    /// The Clusters, fed by the watch that wakes their control planes.
    clusters: reflector::Store<Cluster>,
}

/// Fails with a message naming the missing CRD when a kind this controller needs is not served.
pub async fn preflight(client: &kube::Client) -> Result<(), String> {
    served::<KubeadmControlPlane>(client, "config/crd").await?;
    served::<kubeadm_api::bootstrap::v1beta2::KubeadmConfig>(client, "the bootstrap provider")
        .await?;
    served::<Machine>(client, "clusterctl init installs it").await?;
    served::<Cluster>(client, "clusterctl init installs it").await
}

/// Runs the controller until `shutdown` fires.
pub async fn run(client: kube::Client, settings: Settings, shutdown: Shutdown) {
    std::sync::LazyLock::force(&METRICS);
    let concurrency = settings.concurrency;
    let kcps: Api<KubeadmControlPlane> = scoped_api(&client, &settings.namespace);
    let clusters: Api<Cluster> = scoped_api(&client, &settings.namespace);
    let watch = watcher_config(&settings.watch_filter);
    let client = counted(&client);
    let recorder = Recorder::new(client.clone(), Reporter::from(crate::FIELD_MANAGER));
    let (etcd, uploaded) =
        etcd::EtcdSessions::new(settings.learner_timeout, settings.unstarted_grace);
    let (watches, woken) = workload_watches::WorkloadWatches::new();
    let (secrets, secrets_feed) =
        kubeadm_cluster::SecretCache::new(scoped_api(&client, &settings.namespace));
    let (infrastructure_gone, infrastructure_woken) = futures::channel::mpsc::unbounded();
    let (machine_cache, machine_events, configs_feed) =
        machine_cache::MachineCache::new(&client, &settings.namespace, infrastructure_gone);
    let (clusters_copy, cluster_events) = copy(clusters, watch.clone());
    let cluster_events = cluster_events.touched_objects();
    let context = Arc::new(Context {
        clusters: clusters_copy,
        client,
        settings,
        recorder,
        workload: Default::default(),
        resources: Default::default(),
        etcd,
        backoff: ErrorBackoff::default(),
        in_flight: Default::default(),
        api_servers: Default::default(),
        watches,
        secrets,
        machine_cache,
    });
    let controller = controller(kcps, watch.clone())
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .owns_stream(machine_events)
        .reconcile_on(woken)
        // A leaving machine's infrastructure gone: the next step need not wait for the Machine.
        .reconcile_on(infrastructure_woken)
        // A snapshot upload ended: its outcome is recorded now, not at the next poll.
        .reconcile_on(uploaded)
        // Cluster changes (infrastructure ready, endpoint set, unpaused) wake its control plane.
        .watches_stream(cluster_events, |cluster: Cluster| {
            let namespace = cluster.namespace()?;
            let reference = cluster.spec.control_plane_ref.as_ref()?;
            (reference.kind == "KubeadmControlPlane")
                .then(|| ObjectRef::new(&reference.name).within(&namespace))
        })
        .graceful_shutdown_on(shutdown.clone().wait())
        .run(reconcile, error_policy, Arc::clone(&context))
        .for_each(|outcome| async move { log_outcome(outcome) });
    let with_caches = async move {
        tokio::select! {
            () = controller => {}
            () = secrets_feed => {}
            () = configs_feed => {}
            () = context.recorder.forget_when_quiet() => {}
        }
    };
    run_until_shutdown(with_caches, shutdown).await;
}

/// Retries failed reconciles with exponential backoff, per control plane (see [`ErrorBackoff`]).
fn error_policy(kcp: Arc<KubeadmControlPlane>, error: &Error, ctx: Arc<Context>) -> Action {
    METRICS.reconcile.failed(error.metric_label());
    let delay = ctx.backoff.next(ObjectRef::from_obj(&*kcp));
    tracing::warn!(namespace = kcp.namespace().unwrap_or_default(), kcp = %kcp.name_any(), kind = error.metric_label(), error = %error, retry_in = ?delay, "will retry");
    Action::requeue(delay)
}

async fn reconcile(kcp: Arc<KubeadmControlPlane>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = METRICS.reconcile.measure();
    let key = ObjectRef::from_obj(&*kcp);
    let result = reconcile_kcp(kcp, &ctx).await;
    if result.is_ok() {
        ctx.backoff.reset(&key);
    }
    result
}

#[tracing::instrument(skip_all, fields(namespace = kcp.namespace().unwrap_or_default(), kcp = kcp.name_any()))]
async fn reconcile_kcp(kcp: Arc<KubeadmControlPlane>, ctx: &Context) -> Result<Action, Error> {
    let namespace = kcp.namespace().unwrap_or_default();
    let cluster = match owner_cluster(&kcp) {
        Some(name) => cached_or_live(&ctx.clusters, &ctx.client, &namespace, &name).await?,
        None => None,
    };
    if kcp.meta().deletion_timestamp.is_some() {
        if !lifecycle::has_finalizer(&kcp) {
            return Ok(Action::await_change());
        }
        return match lifecycle::cleanup(&kcp, ctx).await? {
            lifecycle::Cleanup::Done => {
                lifecycle::remove_finalizer(ctx, &kcp).await?;
                Ok(Action::await_change())
            }
            lifecycle::Cleanup::Waiting => Ok(Action::requeue(WAIT)),
        };
    }
    let Some(cluster) = &cluster else {
        // Core Cluster API sets the owner reference once the Cluster points at this control plane.
        return Ok(Action::await_change());
    };
    if kubeadm_cluster::paused::is_paused(cluster, &*kcp) {
        tracing::debug!("paused");
        return Ok(Action::await_change());
    }
    if !lifecycle::has_finalizer(&kcp) {
        lifecycle::add_finalizer(ctx, &kcp).await?;
        return Ok(Action::await_change());
    }
    reconcile::reconcile_live(&kcp, cluster, ctx).await
}

fn merge_params() -> kube::api::PatchParams {
    kubeadm_runtime::controller::merge_params(crate::FIELD_MANAGER)
}

/// Name of the Cluster that owns the control plane.
pub(super) fn owner_cluster(kcp: &KubeadmControlPlane) -> Option<String> {
    kcp.owner_references()
        .iter()
        .find(|o| o.kind == "Cluster" && o.api_version.starts_with("cluster.x-k8s.io/"))
        .map(|o| o.name.clone())
}

/// The controller owner reference that objects created for `kcp` carry.
pub(crate) fn owner_reference(kcp: &KubeadmControlPlane) -> OwnerReference {
    let mut owner = kcp
        .controller_owner_ref(&())
        .expect("a KubeadmControlPlane read from the API server has a name and uid");
    owner.block_owner_deletion = Some(true);
    owner
}
