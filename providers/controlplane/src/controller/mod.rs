//! The KubeadmControlPlane controller: gathers a control plane's state, asks [`crate::plan::next_step`] for
//! the one step to take, takes it, and reports in the status why it waits.

mod addons;
mod etcd;
mod machines;
mod metrics;
mod remediation;
mod status;
mod workload;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use kubeadm_api::bootstrap::v1beta2::EncryptionAlgorithmType;
use kubeadm_api::cluster::v1beta2::{Cluster, Machine};
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::meta::{CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, PAUSED_ANNOTATION};
use kubeadm_bootstrap::certificates::{self, CertError, DEFAULT_CA_VALIDITY_DAYS};
use kubeadm_bootstrap::workload as kubeconfig_secret;
use kubeadm_runtime::Shutdown;
use kubeadm_runtime::watching::{scoped_api, served, watcher_config};

use metrics::{METRICS, counted};
pub use metrics::{api_writes_total, reconcile_time};

use crate::desired::DesiredState;
use crate::endpoints::{self, Component};
use crate::kubeconfig::{self, KubeconfigError};
use crate::machines::{CLEANUP_HOOK_ANNOTATION, Health};
use crate::plan::{self, Observed, Step};
use status::Report;

/// Finalizer on every KubeadmControlPlane, as Cluster API names it.
pub const FINALIZER: &str = "kubeadm.controlplane.cluster.x-k8s.io";

/// How often a settled control plane is looked at again (certificate expiry, kubeconfig renewal).
const RESYNC: Duration = Duration::from_secs(300);
/// How often a settled control plane with stacked etcd is looked at again: etcd changes (a learner that
/// kubeadm left behind, a member that went down) raise no Kubernetes event.
const ETCD_RESYNC: Duration = Duration::from_secs(30);
/// How soon a waiting control plane is looked at again when no watch event arrives first.
const WAIT: Duration = Duration::from_secs(10);
/// Longest retry delay after repeated failures.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// See the bootstrap controller: reconciles are idempotent, so a bounded shutdown is safe.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

#[derive(Clone, Debug)]
pub struct Settings {
    /// Only objects in this namespace (all when empty).
    pub namespace: String,
    /// Only objects whose `cluster.x-k8s.io/watch-filter` label has this value (all when empty).
    pub watch_filter: String,
    /// Parts of an interrupted machine creation younger than this are left alone: the creation may still
    /// be in flight in a controller that is about to lose its lease.
    pub leftover_grace: Duration,
    /// Control planes reconciled at the same time (Cluster API's default is 10).
    pub concurrency: u16,
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
            concurrency: 10,
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
    #[error("etcd: {0}")]
    Etcd(String),
    #[error("{0}")]
    Workload(String),
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
    workload: workload::WorkloadClients,
    /// Discovered infrastructure kinds.
    resources: machines::Resources,
    /// etcd clients and learner timers.
    etcd: etcd::EtcdCare,
    /// Retry delays of control planes whose last reconcile failed; cleared by a success.
    backoff: Mutex<HashMap<ObjectRef<KubeadmControlPlane>, ExponentialBackoff>>,
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
    let machines: Api<Machine> = scoped_api(&client, &settings.namespace);
    let clusters: Api<Cluster> = scoped_api(&client, &settings.namespace);
    let watch = watcher_config(&settings.watch_filter);
    let client = counted(&client);
    let recorder = Recorder::new(client.clone(), Reporter::from(crate::FIELD_MANAGER));
    let etcd = etcd::EtcdCare::new(settings.learner_timeout, settings.unstarted_grace);
    let context = Arc::new(Context {
        client,
        settings,
        recorder,
        workload: Default::default(),
        resources: Default::default(),
        etcd,
        backoff: Mutex::default(),
    });
    let controller = Controller::new(kcps, watch.clone())
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .owns(machines, watch.clone())
        // Cluster changes (infrastructure ready, endpoint set, unpaused) wake its control plane.
        .watches(clusters, watch, |cluster: Cluster| {
            let namespace = cluster.namespace()?;
            let reference = cluster.spec.control_plane_ref.as_ref()?;
            (reference.kind == "KubeadmControlPlane")
                .then(|| ObjectRef::new(&reference.name).within(&namespace))
        })
        .graceful_shutdown_on(shutdown.clone().wait())
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(kcp = %object, "reconciled"),
                Err(e) => tracing::warn!(error = %e, "reconcile failed"),
            }
        });
    tokio::select! {
        () = controller => {}
        () = async { shutdown.wait().await; tokio::time::sleep(SHUTDOWN_GRACE).await } => {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "reconciles did not finish in time; stopping anyway");
        }
    }
}

/// Retries failed reconciles with exponential backoff (2 s doubling to 5 min, jittered), per control plane.
fn error_policy(kcp: Arc<KubeadmControlPlane>, error: &Error, ctx: Arc<Context>) -> Action {
    METRICS
        .reconcile_errors
        .get_or_create(&[("error", error.metric_label())])
        .inc();
    let delay = ctx
        .backoff
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(ObjectRef::from_obj(&*kcp))
        .or_insert_with(|| {
            ExponentialBuilder::new()
                .with_min_delay(Duration::from_secs(2))
                .with_max_delay(MAX_BACKOFF)
                .with_factor(2.0)
                .with_jitter()
                .without_max_times()
                .build()
        })
        .next()
        .unwrap_or(MAX_BACKOFF);
    tracing::warn!(kcp = %kcp.name_any(), kind = error.metric_label(), error = %error, retry_in = ?delay, "will retry");
    Action::requeue(delay)
}

async fn reconcile(kcp: Arc<KubeadmControlPlane>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let key = ObjectRef::from_obj(&*kcp);
    let result = reconcile_kcp(kcp, &ctx).await;
    if result.is_ok() {
        ctx.backoff
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key);
    }
    metrics::observe_reconcile(started.elapsed());
    result
}

async fn reconcile_kcp(kcp: Arc<KubeadmControlPlane>, ctx: &Context) -> Result<Action, Error> {
    let namespace = kcp.namespace().unwrap_or_default();
    let cluster = match owner_cluster(&kcp) {
        Some(name) => {
            Api::<Cluster>::namespaced(ctx.client.clone(), &namespace)
                .get_opt(&name)
                .await?
        }
        None => None,
    };
    if kcp.meta().deletion_timestamp.is_none() {
        let Some(cluster) = &cluster else {
            // Core Cluster API sets the owner reference once the Cluster points at this control plane.
            return Ok(Action::await_change());
        };
        if is_paused(&kcp, cluster) {
            tracing::debug!(kcp = %kcp.name_any(), "paused");
            return Ok(Action::await_change());
        }
    }
    let api: Api<KubeadmControlPlane> = Api::namespaced(ctx.client.clone(), &namespace);
    let has_finalizer = kcp.finalizers().iter().any(|f| f == FINALIZER);
    if kcp.meta().deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Action::await_change());
        }
        return match cleanup(&kcp, ctx).await? {
            Cleanup::Done => {
                set_finalizers(
                    &api,
                    &kcp,
                    kcp.finalizers()
                        .iter()
                        .filter(|f| *f != FINALIZER)
                        .cloned()
                        .collect(),
                )
                .await?;
                Ok(Action::await_change())
            }
            Cleanup::Waiting => Ok(Action::requeue(WAIT)),
        };
    }
    if !has_finalizer {
        let mut finalizers = kcp.finalizers().to_vec();
        finalizers.push(FINALIZER.to_owned());
        // The patch wakes the next reconcile, which then sees the finalizer.
        set_finalizers(&api, &kcp, finalizers).await?;
        return Ok(Action::await_change());
    }
    let cluster = cluster.expect("checked above for live objects");
    apply(&kcp, &cluster, ctx).await
}

/// Merge patches carry our field manager too, so `managedFields` say who wrote what.
fn merge_params() -> kube::api::PatchParams {
    kube::api::PatchParams {
        field_manager: Some(crate::FIELD_MANAGER.to_owned()),
        ..Default::default()
    }
}

/// Replaces the finalizer list, failing if the object changed since it was read.
async fn set_finalizers(
    api: &Api<KubeadmControlPlane>,
    kcp: &KubeadmControlPlane,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    let patch = serde_json::json!({
        "metadata": { "finalizers": finalizers, "resourceVersion": kcp.resource_version() }
    });
    api.patch(
        &kcp.name_any(),
        &merge_params(),
        &kube::api::Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

enum Cleanup {
    Done,
    Waiting,
}

/// Name of the Cluster that owns the control plane.
fn owner_cluster(kcp: &KubeadmControlPlane) -> Option<String> {
    kcp.owner_references()
        .iter()
        .find(|o| o.kind == "Cluster" && o.api_version.starts_with("cluster.x-k8s.io/"))
        .map(|o| o.name.clone())
}

fn is_paused(kcp: &KubeadmControlPlane, cluster: &Cluster) -> bool {
    cluster.spec.paused == Some(true)
        || kcp.annotations().contains_key(PAUSED_ANNOTATION)
        || cluster.annotations().contains_key(PAUSED_ANNOTATION)
}

/// The controller owner reference that objects created for `kcp` carry.
pub(crate) fn owner_reference(kcp: &KubeadmControlPlane) -> OwnerReference {
    let mut owner = kcp
        .controller_owner_ref(&())
        .expect("a KubeadmControlPlane read from the API server has a name and uid");
    owner.block_owner_deletion = Some(true);
    owner
}

async fn apply(
    kcp: &KubeadmControlPlane,
    cluster: &Cluster,
    ctx: &Context,
) -> Result<Action, Error> {
    let namespace = kcp.namespace().unwrap_or_default();
    let cluster_name = cluster.name_any();
    let mut report = Report::new(kcp);

    let desired = match DesiredState::of(kcp) {
        Ok(desired) => desired,
        Err(e) => {
            report.invalid_spec(&e);
            publish(ctx, kcp, EventType::Warning, "InvalidSpec", &e.to_string()).await;
            report.write(ctx, kcp).await?;
            return Ok(Action::await_change());
        }
    };
    let provisioned = cluster
        .status
        .as_ref()
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.infrastructure_provisioned)
        == Some(true);
    let cluster_ref = format!("Cluster {namespace}/{cluster_name}");
    if !provisioned {
        let message = format!("{cluster_ref}: infrastructure is not provisioned yet");
        if report.waiting_for_cluster("WaitingForInfrastructure", &message) {
            publish(
                ctx,
                kcp,
                EventType::Normal,
                "WaitingForInfrastructure",
                &message,
            )
            .await;
        }
        report.write(ctx, kcp).await?;
        return Ok(Action::requeue(WAIT));
    }
    let Some(server) = endpoint_url(cluster) else {
        let message = format!("{cluster_ref}: spec.controlPlaneEndpoint is not set yet");
        if report.waiting_for_cluster("WaitingForControlPlaneEndpoint", &message) {
            publish(
                ctx,
                kcp,
                EventType::Warning,
                "WaitingForControlPlaneEndpoint",
                &message,
            )
            .await;
        }
        report.write(ctx, kcp).await?;
        return Ok(Action::requeue(WAIT));
    };

    let validity = kcp
        .spec
        .kubeadm_config_spec
        .as_ref()
        .and_then(|s| s.cluster_configuration.ca_certificate_validity_period_days)
        .and_then(|d| u32::try_from(d).ok())
        .unwrap_or(DEFAULT_CA_VALIDITY_DAYS);
    let algorithm = key_algorithm(kcp);
    let certs = match certificates::lookup_or_generate_with(
        &ctx.client,
        &namespace,
        &cluster_name,
        Some(owner_reference(kcp)),
        true,
        validity,
        algorithm,
    )
    .await
    {
        Ok(certs) => certs,
        Err(e) => {
            report.certificates(false, &e.to_string());
            publish(
                ctx,
                kcp,
                EventType::Warning,
                "CertificatesUnavailable",
                &e.to_string(),
            )
            .await;
            report.write(ctx, kcp).await?;
            return Err(e.into());
        }
    };
    report.certificates(true, "");
    ensure_kubeconfig(ctx, kcp, &cluster_name, &server, &certs.ca).await?;

    let gathered = machines::gather(ctx, kcp, &cluster_name).await?;
    machines::clean_leftovers(ctx, kcp, &gathered).await?;
    machines::propagate_in_place(ctx, kcp, &desired, &gathered).await?;

    let mut gathered = gathered;
    let initialized = observe_workload(
        ctx,
        kcp,
        &cluster_name,
        &desired,
        &mut gathered,
        &mut report,
    )
    .await;
    let now = k8s_openapi::jiff::Timestamp::now();
    let etcd_view = if desired.external_etcd || !initialized {
        None
    } else {
        Some(observe_etcd(ctx, kcp, &cluster_name, &certs.etcd, &mut gathered, now).await)
    };
    if etcd_view.is_some() {
        // The members' own health (alarms, refused certificates) joins what the etcd pods said.
        report.health(&gathered.machines, desired.external_etcd);
    }
    let (outdated_now, up_to_date_now) = plan::partition(&desired, &gathered.machines, now);
    machines::report_health(ctx, &namespace, &gathered, &outdated_now).await?;

    // Membership changes come first: they finish what an earlier step started (a join, a deletion).
    let etcd_machines = etcd::planner_machines(&gathered.machines, &up_to_date_now);
    let mut etcd_refuses_member = None;
    let mut etcd_action = None;
    let mut etcd_expiry = None;
    match &etcd_view {
        None => {}
        Some(Err(cause)) => etcd_refuses_member = Some(format!("etcd not observable: {cause}")),
        Some(Ok(view)) => {
            let observed = crate::etcd_membership::Observed {
                members: &view.members,
                states: &view.states,
                machines: &etcd_machines,
                first_seen: &view.first_seen,
                now,
                learner_timeout: ctx.etcd.learner_timeout,
                unstarted_grace: ctx.etcd.unstarted_grace,
            };
            etcd_refuses_member = crate::etcd_membership::may_add_member(observed)
                .err()
                .map(|reason| reason.to_string());
            etcd_action = Some(crate::etcd_membership::next_action(observed));
            etcd_expiry = crate::etcd_membership::next_expiry(observed);
        }
    }
    report.etcd_membership(etcd_view.as_ref(), etcd_action.as_ref());
    if let (Some(Ok(view)), Some(action)) = (&etcd_view, &etcd_action)
        && let Some(done) = etcd::execute(ctx, &namespace, view, action, &gathered.machines).await?
    {
        tracing::info!(kcp = %kcp.name_any(), "{}", done.note);
        publish_about(
            ctx,
            kcp,
            EventType::Normal,
            "EtcdMembershipChanged",
            done.action,
            &done.note,
            done.machine.as_deref(),
        )
        .await;
        report.write(ctx, kcp).await?;
        return Ok(Action::requeue(Duration::from_secs(2)));
    }

    // Then unhealthy machines: one replaced at a time, before any other change.
    let inputs = remediation::Inputs {
        initialized,
        external_etcd: desired.external_etcd,
        etcd: etcd_view.as_ref(),
        etcd_machines: &etcd_machines,
        now,
    };
    match remediation::reconcile(ctx, kcp, &gathered, inputs).await? {
        remediation::Outcome::Remediated(data) => {
            report.last_remediation(Some(&data));
            report.write(ctx, kcp).await?;
            return Ok(Action::requeue(WAIT));
        }
        remediation::Outcome::Continue(last) => report.last_remediation(last.as_ref()),
    }

    let failure_domains = control_plane_failure_domains(cluster);
    let plan = plan::next_step(Observed {
        desired: &desired,
        machines: &gathered.machines,
        failure_domains: &failure_domains,
        certificates_available: true,
        now,
        etcd_refuses_member: etcd_refuses_member.as_deref(),
    });
    report.observe(&desired, &gathered.machines, &plan, initialized);
    if plan.step == Step::Idle && initialized {
        update_addons(ctx, kcp, &cluster_name, &desired).await;
    }
    if plan.step == Step::Idle
        && let (Some(Ok(view)), Some(crate::etcd_membership::Action::Nothing)) =
            (&etcd_view, &etcd_action)
    {
        let key = (namespace.clone(), cluster_name.clone());
        if let Some(done) = etcd::maintain(ctx, kcp, key, view, now).await? {
            tracing::info!(kcp = %kcp.name_any(), "{}", done.note);
            match &done.refused {
                None => {
                    let reason = "EtcdMaintenance";
                    publish(ctx, kcp, EventType::Normal, reason, &done.note).await;
                }
                Some(why) => {
                    let reason = "EtcdSnapshotRefused";
                    publish(ctx, kcp, EventType::Warning, reason, why).await;
                }
            }
            if done.snapshot.is_some() || done.refused.is_some() {
                report.etcd_snapshot(done.refused.as_deref());
            }
            etcd::record_maintenance(ctx, kcp, done.defragmentation, done.snapshot).await?;
            report.write(ctx, kcp).await?;
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
    }
    let waiting_on_etcd = matches!(etcd_action, Some(crate::etcd_membership::Action::Wait(_)));
    let outcome = take_step(ctx, kcp, cluster, &desired, plan.step)
        .await
        .map(|action| {
            if waiting_on_etcd {
                // A learner timeout or unstarted grace that runs out sooner is acted on when it does.
                let until_expiry = etcd_expiry.map_or(WAIT, |at| {
                    let left = at.duration_since(now);
                    let left = if left.is_negative() {
                        Duration::ZERO
                    } else {
                        left.unsigned_abs()
                    };
                    left.max(Duration::from_secs(1))
                });
                Action::requeue(WAIT.min(until_expiry))
            } else if !desired.external_etcd && action == Action::requeue(RESYNC) {
                Action::requeue(ETCD_RESYNC)
            } else {
                action
            }
        });
    if let Err(Error::Infrastructure(message)) = &outcome {
        report.machines_created(Err(message));
        publish(
            ctx,
            kcp,
            EventType::Warning,
            "MachineCreationFailed",
            message,
        )
        .await;
    } else if outcome.is_ok() {
        report.machines_created(Ok(()));
    }
    report.write(ctx, kcp).await?;
    outcome
}

/// kube-proxy and CoreDNS follow the spec once every machine is up to date; a failure is an Event and does
/// not hold the rest of the reconcile (etcd care in particular).
async fn update_addons(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    cluster: &str,
    desired: &DesiredState,
) {
    let namespace = kcp.namespace().unwrap_or_default();
    let result = match ctx.workload.get(&ctx.client, &namespace, cluster).await {
        Ok(client) => addons::reconcile(&client, kcp, desired).await,
        Err(e) => Err(e.to_string()),
    };
    match result {
        Ok(changes) => {
            for change in changes {
                tracing::info!(kcp = %kcp.name_any(), "{change}");
                publish(ctx, kcp, EventType::Normal, "AddonUpdated", &change).await;
            }
        }
        Err(e) => {
            tracing::warn!(kcp = %kcp.name_any(), "{e}");
            publish(ctx, kcp, EventType::Warning, "AddonUpdateFailed", &e).await;
        }
    }
}

/// Before a machine joins: the permissions kubeadm's join relies on, and the workload cluster's
/// `kubeadm-config` ClusterConfiguration in line with the spec (see [`crate::cluster_configuration`]).
async fn update_cluster_configuration(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    cluster: &Cluster,
    desired: &DesiredState,
) -> Result<(), Error> {
    let namespace = kcp.namespace().unwrap_or_default();
    let facts = kubeadm_bootstrap::controller::cluster_facts(cluster, &desired.version);
    let document =
        kubeadm_bootstrap::render::kubeadm::cluster_configuration_document(&desired.init, &facts)
            .map_err(|e| Error::Infrastructure(e.to_string()))?;
    let client = ctx
        .workload
        .get(&ctx.client, &namespace, &cluster.name_any())
        .await?;
    if workload::ensure_kubelet_api_admin_binding(&client, &desired.version).await? {
        let note = format!(
            "created ClusterRoleBinding {} in the workload cluster",
            workload::KUBELET_API_ADMIN_BINDING
        );
        publish(
            ctx,
            kcp,
            EventType::Normal,
            "KubeadmPermissionsEnsured",
            &note,
        )
        .await;
    }
    if workload::update_cluster_configuration(&client, &document).await? {
        let note = format!(
            "updated the ClusterConfiguration in the workload cluster's kubeadm-config for Kubernetes {}",
            desired.version
        );
        publish(
            ctx,
            kcp,
            EventType::Normal,
            "ClusterConfigurationUpdated",
            &note,
        )
        .await;
    }
    Ok(())
}

/// Creates a machine; one created while a remediation is in progress replaces the remediated machine,
/// records that remediation and ends it (returns true then).
async fn create_machine(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    cluster: &Cluster,
    desired: &DesiredState,
    failure_domain: Option<String>,
    init: bool,
) -> Result<(String, bool), Error> {
    let record = remediation::in_progress_record(ctx, kcp).await?;
    let name = machines::create(
        ctx,
        kcp,
        cluster,
        desired,
        failure_domain,
        init,
        record.as_deref(),
    )
    .await?;
    if record.is_some() {
        remediation::set_in_progress(ctx, kcp, None).await?;
    }
    Ok((name, record.is_some()))
}

async fn take_step(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    cluster: &Cluster,
    desired: &DesiredState,
    step: Step,
) -> Result<Action, Error> {
    let namespace = kcp.namespace().unwrap_or_default();
    match step {
        Step::Idle => Ok(Action::requeue(RESYNC)),
        Step::Wait { .. } => Ok(Action::requeue(WAIT)),
        Step::Initialize { failure_domain } => {
            let (name, _) =
                create_machine(ctx, kcp, cluster, desired, failure_domain, true).await?;
            let note = format!("created Machine {name} to initialize the control plane");
            publish_about(
                ctx,
                kcp,
                EventType::Normal,
                "MachineCreated",
                "Create",
                &note,
                Some(&name),
            )
            .await;
            Ok(Action::requeue(WAIT))
        }
        Step::ScaleUp {
            failure_domain,
            purpose,
        } => {
            // The joining machine renders its static pods from the workload cluster's copy.
            update_cluster_configuration(ctx, kcp, cluster, desired).await?;
            let (name, replaces) =
                create_machine(ctx, kcp, cluster, desired, failure_domain, false).await?;
            let why = match (purpose, replaces) {
                (_, true) => "to replace a remediated machine".to_owned(),
                (plan::Purpose::Scale, false) => "to scale up".to_owned(),
                (plan::Purpose::Rollout, false) => {
                    format!("to roll out generation {}", desired.generation)
                }
            };
            let note = format!("created Machine {name} {why}");
            publish_about(
                ctx,
                kcp,
                EventType::Normal,
                "MachineCreated",
                "Create",
                &note,
                Some(&name),
            )
            .await;
            Ok(Action::requeue(WAIT))
        }
        Step::ScaleDown { machine, purpose } => {
            machines::delete(ctx, &namespace, &machine).await?;
            let why = match purpose {
                plan::Purpose::Scale => "to scale down",
                plan::Purpose::Rollout => "because it is outdated",
            };
            let note = format!("deleting Machine {machine} {why}");
            publish_about(
                ctx,
                kcp,
                EventType::Normal,
                "MachineDeleted",
                "Delete",
                &note,
                Some(&machine),
            )
            .await;
            Ok(Action::requeue(WAIT))
        }
    }
}

/// Deletion: workers go first (their nodes need the API server to drain), then every control-plane Machine;
/// the finalizer is removed once none is left.
async fn cleanup(kcp: &KubeadmControlPlane, ctx: &Context) -> Result<Cleanup, Error> {
    let namespace = kcp.namespace().unwrap_or_default();
    let Some(cluster_name) = kcp
        .labels()
        .get(CLUSTER_NAME_LABEL)
        .cloned()
        .or_else(|| owner_cluster(kcp))
    else {
        return Ok(Cleanup::Done);
    };
    ctx.etcd
        .forwards
        .forget(&(namespace.clone(), cluster_name.clone()));
    let machines: Api<Machine> = Api::namespaced(ctx.client.clone(), &namespace);
    let all = machines
        .list(&ListParams::default().labels(&format!("{CLUSTER_NAME_LABEL}={cluster_name}")))
        .await?;
    let workers = all
        .items
        .iter()
        .filter(|m| !m.labels().contains_key(CONTROL_PLANE_LABEL))
        .count();
    if workers > 0 {
        tracing::info!(kcp = %kcp.name_any(), workers, "waiting for worker machines to be deleted first");
        return Ok(Cleanup::Waiting);
    }
    let owned: Vec<&Machine> = all
        .items
        .iter()
        .filter(|m| machines::owned_by(m, kcp))
        .collect();
    if owned.is_empty() {
        return Ok(Cleanup::Done);
    }
    for machine in owned {
        let name = machine.name_any();
        // The whole cluster goes, its etcd with it: no member needs to leave first.
        if machine.annotations().contains_key(CLEANUP_HOOK_ANNOTATION) {
            etcd::annotate(ctx, &namespace, &name, CLEANUP_HOOK_ANNOTATION, None).await?;
        }
        if machine.meta().deletion_timestamp.is_none() {
            machines::delete(ctx, &namespace, &name).await?;
        }
    }
    Ok(Cleanup::Waiting)
}

/// `https://host:port` of the Cluster's control-plane endpoint.
fn endpoint_url(cluster: &Cluster) -> Option<String> {
    let endpoint = cluster.spec.control_plane_endpoint.as_ref()?;
    let host = endpoint.host.as_deref().filter(|h| !h.is_empty())?;
    let port = endpoint.port.filter(|p| *p > 0).unwrap_or(6443);
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    Some(format!("https://{host}:{port}"))
}

/// Sorted names of the Cluster's failure domains that may hold control-plane machines.
fn control_plane_failure_domains(cluster: &Cluster) -> Vec<String> {
    let mut names: Vec<String> = cluster
        .status
        .as_ref()
        .map(|s| {
            s.failure_domains
                .iter()
                .filter(|d| d.control_plane == Some(true))
                .map(|d| d.name.clone())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The key algorithm of the cluster's certificates and of the admin kubeconfig's client key.
fn key_algorithm(kcp: &KubeadmControlPlane) -> EncryptionAlgorithmType {
    kcp.spec
        .kubeadm_config_spec
        .as_ref()
        .and_then(|s| s.cluster_configuration.encryption_algorithm)
        .unwrap_or(certificates::DEFAULT_KEY_ALGORITHM)
}

/// Creates the kubeconfig Secret, or renews it when its client certificate nears expiry. A Secret this
/// controller does not own (a user's own) is left alone.
async fn ensure_kubeconfig(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    cluster: &str,
    server: &str,
    ca: &kubeadm_bootstrap::render::CertPem,
) -> Result<(), Error> {
    let namespace = kcp.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let name = kubeconfig_secret::kubeconfig_secret_name(cluster);
    let now = time::OffsetDateTime::now_utc();
    let build = || {
        kubeconfig::secret(
            cluster,
            &namespace,
            server,
            ca,
            owner_reference(kcp),
            key_algorithm(kcp),
            now,
        )
    };
    match secrets.get_opt(&name).await? {
        None => {
            let secret = build()?;
            match secrets.create(&PostParams::default(), &secret).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Some(existing) => {
            let ours = existing
                .owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && Some(&o.uid) == kcp.uid().as_ref());
            if ours && kubeconfig::needs_renewal(&existing, now) {
                let mut secret = build()?;
                secret.metadata.resource_version = existing.resource_version();
                secrets
                    .replace(&name, &PostParams::default(), &secret)
                    .await?;
                publish(
                    ctx,
                    kcp,
                    EventType::Normal,
                    "KubeconfigRenewed",
                    &format!("renewed the client certificate in Secret {name}"),
                )
                .await;
            }
        }
    }
    Ok(())
}

/// Looks at the workload cluster: whether it is initialized (kubeadm uploaded its configuration), and the
/// health of each machine's static pods, which the preflight checks read. An unreachable cluster makes
/// every machine's health unknown, so nothing is changed blind.
async fn observe_workload(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    cluster: &str,
    desired: &DesiredState,
    gathered: &mut machines::Gathered,
    report: &mut Report,
) -> bool {
    let namespace = kcp.namespace().unwrap_or_default();
    let observed = async {
        let client = ctx.workload.get(&ctx.client, &namespace, cluster).await?;
        let initialized = report.initialized() || workload::initialized(&client).await?;
        if !initialized {
            return Ok((false, BTreeMap::new(), None));
        }
        if workload::remove_cluster_status(&client).await? {
            let note = "removed the leftover ClusterStatus from kube-system/kubeadm-config; \
                        endpoints come from the static pods";
            publish(ctx, kcp, EventType::Normal, "ClusterStatusRemoved", note).await;
        }
        let pods = workload::machine_pods(&client, &gathered.machines).await?;
        let nodes = workload::control_plane_nodes(&client).await?;
        Ok::<_, workload::Unreachable>((true, pods, Some(nodes)))
    }
    .await;
    let (initialized, pods, nodes) = match observed {
        Ok(found) => found,
        Err(e) => {
            tracing::debug!(cluster, error = %e, "workload cluster not reachable");
            for m in gathered.machines.iter_mut().filter(|m| m.node.is_some()) {
                let why = Health::Unknown(format!("workload cluster unreachable: {e}"));
                m.health.components = why.clone();
                m.health.etcd = if desired.external_etcd {
                    Health::NotChecked
                } else {
                    why
                };
            }
            report.health(&gathered.machines, desired.external_etcd);
            return report.initialized();
        }
    };
    for m in gathered.machines.iter_mut() {
        let Some(view) = pods.get(&m.name) else {
            continue;
        };
        m.health.components = endpoints::components_health(view);
        m.health.etcd = if desired.external_etcd {
            Health::NotChecked
        } else {
            view.components
                .get(&Component::Etcd)
                .cloned()
                .unwrap_or_else(|| Health::Unknown("no etcd pod seen".into()))
        };
    }
    gathered.pods = pods;
    gathered.nodes = nodes;
    report.health(&gathered.machines, desired.external_etcd);
    initialized
}

/// Observes etcd through the etcd pods' client URLs and folds each member's health into its machine's.
async fn observe_etcd(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    cluster: &str,
    etcd_ca: &kubeadm_bootstrap::render::CertPem,
    gathered: &mut machines::Gathered,
    now: k8s_openapi::jiff::Timestamp,
) -> Result<etcd::EtcdView, etcd::Unobservable> {
    let namespace = kcp.namespace().unwrap_or_default();
    let mut endpoints: Vec<String> = gathered
        .pods
        .values()
        .flat_map(|p| p.etcd_client_urls.iter().cloned())
        .collect();
    endpoints.sort();
    endpoints.dedup();
    let key = (namespace, cluster.to_owned());
    let routes = match ctx.settings.etcd_access {
        crate::etcd::EtcdAccess::Direct => Ok(BTreeMap::new()),
        crate::etcd::EtcdAccess::PortForward => port_forward_routes(ctx, &key, gathered).await,
    };
    let view = match routes {
        Ok(routes) => {
            ctx.etcd
                .observe(key, cluster, etcd_ca, &endpoints, routes, now)
                .await
        }
        Err(cause) => Err(etcd::Unobservable::new(cause)),
    };
    for m in gathered.machines.iter_mut().filter(|m| m.node.is_some()) {
        let member = match &view {
            Ok(view) => etcd::member_health(m, view),
            Err(unobservable) => {
                let endpoints = gathered
                    .pods
                    .get(&m.name)
                    .map(|p| p.etcd_client_urls.as_slice())
                    .unwrap_or_default();
                let node = m.node.as_deref().unwrap_or(&m.name);
                unobservable.member_health(node, endpoints)
            }
        };
        // The pod's own problem comes first; a healthy pod defers to its member.
        if m.health.etcd.problem().is_none() {
            m.health.etcd = member.clone();
        }
        if let Some(view) = gathered.pods.get_mut(&m.name) {
            view.member = Some(member);
        }
    }
    view
}

/// Local listeners that port-forward to each machine's etcd pod through the workload API server.
async fn port_forward_routes(
    ctx: &Context,
    key: &(String, String),
    gathered: &machines::Gathered,
) -> Result<BTreeMap<String, String>, String> {
    let client = ctx
        .workload
        .get(&ctx.client, &key.0, &key.1)
        .await
        .map_err(|e| format!("no port-forward to etcd: {e}"))?;
    let nodes = gathered.machines.iter().filter_map(|m| {
        let pods = gathered.pods.get(&m.name)?;
        Some((m.node.as_deref()?, pods.etcd_client_urls.as_slice()))
    });
    let targets = crate::etcd::port_forward::forward_targets(nodes);
    ctx.etcd
        .forwards
        .routes(key.clone(), &client, &targets)
        .await
}

async fn publish(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    publish_about(ctx, kcp, type_, reason, "Reconcile", note, None).await;
}

/// An Event on the control plane, about `machine` when given. Events of one reason, action and machine
/// are aggregated into a series by the recorder, so each machine gets its own.
async fn publish_about(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    type_: EventType,
    reason: &str,
    action: &str,
    note: &str,
    machine: Option<&str>,
) {
    let secondary = machine.map(|name| k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("cluster.x-k8s.io/v1beta2".into()),
        kind: Some("Machine".into()),
        name: Some(name.to_owned()),
        namespace: kcp.namespace(),
        ..Default::default()
    });
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note.into()),
        action: action.into(),
        secondary,
    };
    if let Err(e) = ctx.recorder.publish(&event, &kcp.object_ref(&())).await {
        tracing::debug!(error = %e, "event not recorded");
    }
}
