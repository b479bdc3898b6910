//! The KubeadmConfig controller: gathers the facts a render needs (owner Machine or MachinePool, Cluster,
//! certificates, join token, referenced secrets), renders, and stores the result as the owner's bootstrap
//! data secret.
//!
//! One step per reconcile, never a sleep: when something is not there yet, the reconcile says why in a
//! condition and waits for a watch event or a requeue.
//!
//! Status changes that matter to a person are also recorded as Events on the KubeadmConfig, and the
//! controller's work is counted in the process metrics (`kubeadm_bootstrap_*` at `/metrics`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use kubeadm_api::bootstrap::conditions::{reasons, types};
use kubeadm_api::bootstrap::events as bootstrap_events;
use kubeadm_api::bootstrap::file_template;
use kubeadm_api::bootstrap::v1beta2::{
    FileContentFormat, Format, KubeadmConfig, KubeadmConfigSpec,
};
use kubeadm_api::cluster::v1beta2::{Cluster, Machine, MachinePool};
use kubeadm_api::controlplane::{self, v1beta2::KubeadmControlPlane};
use kubeadm_api::events::EventReason;
use kubeadm_api::meta::{
    CLUSTER_NAME_LABEL, CLUSTER_SECRET_TYPE, CONTROL_PLANE_LABEL, MACHINE_GENERATION_LABEL,
};
use kubeadm_runtime::events::Recorder;
use serde_json::json;

use kubeadm_cluster::SecretCache;
use kubeadm_runtime::Shutdown;
use kubeadm_runtime::controller::{ErrorBackoff, log_outcome, run_until_shutdown};
use kubeadm_runtime::events;
use kubeadm_runtime::watching::{
    self, cached_or_live, controller, copy, scoped_api, served, watcher_config,
};

mod metrics;
pub mod rbac;
use metrics::{ApiServer, METRICS, counted, role_label};

use crate::init_lock::{self, Acquired, LockError};
use crate::render::{self, ClusterFacts, JoinFacts, MachineFacts, RenderError, RenderInput, Role};
use crate::tokens::{self, Consumer, Refresh, TokenError, TokenStep};
use kubeadm_cluster::certificates::{self, CertError, Generation};
use kubeadm_cluster::workload::{WorkloadClients, WorkloadError};

/// How long a worker waits before looking again while the control plane initializes.
const WAIT_FOR_CONTROL_PLANE: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
pub struct Settings {
    /// Lifetime of join tokens; checked every third of it, extended until the Machine has a Node (rotated
    /// for MachinePools).
    pub token_ttl: Duration,
    /// Only objects in this namespace (all when empty).
    pub namespace: String,
    /// Only objects whose `cluster.x-k8s.io/watch-filter` label has this value (all when empty).
    pub watch_filter: String,
    /// KubeadmConfigs reconciled at the same time (Cluster API's default is 100).
    pub concurrency: u16,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            token_ttl: tokens::DEFAULT_TTL,
            namespace: String::new(),
            watch_filter: String::new(),
            concurrency: 100,
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
    Tokens(#[from] TokenError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Workload(#[from] WorkloadError),
}

impl Error {
    /// A short label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Certificates(_) => "certificates",
            Error::Tokens(_) => "tokens",
            Error::Lock(_) => "init_lock",
            Error::Workload(_) => "workload",
        }
    }
}

pub struct Context {
    /// The management cluster, with every write counted in `kubeadm_bootstrap_api_writes_total`.
    pub client: kube::Client,
    pub settings: Settings,
    pub recorder: Recorder,
    /// Retry delays of configs whose last reconcile failed; cleared by a success.
    backoff: ErrorBackoff<ObjectRef<KubeadmConfig>>,
    /// Workload-cluster clients, reused while their kubeconfig Secret is unchanged.
    workload: WorkloadClients,
    /// The Machines and Clusters, fed by the watches that wake their configs: a settled config is
    /// looked at without a read of the API server.
    machines: Store<Machine>,
    clusters: Store<Cluster>,
    /// The cluster certificates and kubeconfigs, fed by a watch of labelled Secrets.
    secrets: SecretCache,
}

/// Fails with a message naming the missing CRD when the kinds this controller watches are not served
/// (the watchers would otherwise retry forever without saying why).
pub async fn preflight(client: &kube::Client) -> Result<(), String> {
    served::<KubeadmConfig>(client, "config/crd").await?;
    served::<Machine>(client, "clusterctl init installs it").await?;
    served::<Cluster>(client, "clusterctl init installs it").await
}

/// Runs the controller until `shutdown` fires.
pub async fn run(client: kube::Client, settings: Settings, shutdown: Shutdown) {
    // Registered up front, so `/metrics` lists every name before the first reconcile.
    std::sync::LazyLock::force(&METRICS);
    let configs: Api<KubeadmConfig> = scoped_api(&client, &settings.namespace);
    let machines: Api<Machine> = scoped_api(&client, &settings.namespace);
    let clusters: Api<Cluster> = scoped_api(&client, &settings.namespace);
    let watch = watcher_config(&settings.watch_filter);
    // MachinePools are optional in Cluster API (a feature gate): watched only where their CRD is served.
    let pools_served = served::<MachinePool>(&client, "").await.is_ok();
    let pools: Api<MachinePool> = scoped_api(&client, &settings.namespace);
    let pool_watch = watch.clone();
    let controller = controller(configs, watch.clone()).with_config(
        kube::runtime::controller::Config::default().concurrency(settings.concurrency),
    );
    let cluster_store = controller.store();
    let (machines_copy, machine_events) = copy(machines, watch.clone());
    let (clusters_copy, cluster_events) = copy(clusters, watch);
    let (machine_events, cluster_events) = (
        machine_events.touched_objects(),
        cluster_events.touched_objects(),
    );
    let client = counted(&client, ApiServer::Management);
    let (secrets, secrets_feed) = SecretCache::new(scoped_api(&client, &settings.namespace));
    let recorder = Recorder::new(client.clone(), Reporter::from(crate::FIELD_MANAGER));
    let context = Arc::new(Context {
        machines: machines_copy,
        clusters: clusters_copy,
        secrets,
        client,
        settings,
        recorder,
        backoff: ErrorBackoff::default(),
        // Token writes only, no watches: a cluster's connection is closed once idle.
        workload: WorkloadClients::for_calls(),
    });
    let mut controller = controller
        // A Machine points at its config; its changes (nodeRef, version) matter to the config.
        .watches_stream(machine_events, |machine: Machine| {
            let namespace = machine.namespace()?;
            let config = machine.spec.bootstrap.config_ref.as_ref()?;
            (config.kind == "KubeadmConfig")
                .then(|| ObjectRef::new(&config.name).within(&namespace))
        })
        // Cluster changes (infrastructure ready, control plane initialized, unpaused) wake its configs.
        .watches_stream(cluster_events, move |cluster: Cluster| {
            let name = cluster.name_any();
            let namespace = cluster.namespace();
            cluster_store
                .state()
                .into_iter()
                .filter(|c| {
                    c.namespace() == namespace && c.labels().get(CLUSTER_NAME_LABEL) == Some(&name)
                })
                .map(|c| ObjectRef::from_obj(&*c))
                .collect::<Vec<_>>()
        });
    if pools_served {
        // A pool's node references decide between refreshing and rotating its token.
        let pool_events = watching::watch(pools, pool_watch).touched_objects();
        controller = controller.watches_stream(pool_events, |pool: MachinePool| {
            let namespace = pool.namespace()?;
            let config = pool.spec.template.spec.bootstrap.config_ref.as_ref()?;
            (config.kind == "KubeadmConfig")
                .then(|| ObjectRef::new(&config.name).within(&namespace))
        });
    } else {
        tracing::info!(
            "MachinePools are not served; KubeadmConfigs owned by MachinePools are not watched"
        );
    }
    let controller = controller
        .graceful_shutdown_on(shutdown.clone().wait())
        .run(reconcile, error_policy, Arc::clone(&context))
        .for_each(|outcome| async move { log_outcome(outcome) });
    let with_caches = async move {
        tokio::select! {
            () = controller => {}
            () = secrets_feed => {}
            () = context.recorder.forget_when_quiet() => {}
        }
    };
    run_until_shutdown(with_caches, shutdown).await;
}

/// Retries failed reconciles with exponential backoff, per config (see [`ErrorBackoff`]).
fn error_policy(config: Arc<KubeadmConfig>, error: &Error, ctx: Arc<Context>) -> Action {
    METRICS.reconcile.failed(error.metric_label());
    let delay = ctx.backoff.next(ObjectRef::from_obj(&*config));
    tracing::warn!(namespace = config.namespace().unwrap_or_default(), config = %config.name_any(), kind = error.metric_label(), error = %error, retry_in = ?delay, "will retry");
    Action::requeue(delay)
}

/// What a reconcile found; everything the render and the status need.
struct Facts {
    config: Arc<KubeadmConfig>,
    namespace: String,
    owner: ConfigOwner,
    cluster: Cluster,
}

/// What a KubeadmConfig bootstraps: one Machine, or every instance of a MachinePool.
enum ConfigOwner {
    Machine(Box<Machine>),
    Pool(Box<MachinePool>),
}

impl ConfigOwner {
    fn name(&self) -> String {
        match self {
            ConfigOwner::Machine(machine) => machine.name_any(),
            ConfigOwner::Pool(pool) => pool.name_any(),
        }
    }

    /// `Machine <name>` or `MachinePool <name>`, for messages.
    fn describe(&self) -> String {
        match self {
            ConfigOwner::Machine(machine) => format!("Machine {}", machine.name_any()),
            ConfigOwner::Pool(pool) => format!("MachinePool {}", pool.name_any()),
        }
    }

    fn cluster_name(&self) -> &str {
        match self {
            ConfigOwner::Machine(machine) => &machine.spec.cluster_name,
            ConfigOwner::Pool(pool) => &pool.spec.cluster_name,
        }
    }

    fn kubernetes_version(&self) -> Option<String> {
        match self {
            ConfigOwner::Machine(machine) => machine.spec.version.clone(),
            ConfigOwner::Pool(pool) => pool.spec.template.spec.version.clone(),
        }
    }

    /// Pools only ever hold workers.
    fn is_control_plane(&self) -> bool {
        match self {
            ConfigOwner::Machine(machine) => machine.labels().contains_key(CONTROL_PLANE_LABEL),
            ConfigOwner::Pool(_) => false,
        }
    }

    fn machine_generation(&self) -> Option<String> {
        match self {
            ConfigOwner::Machine(machine) => {
                machine.labels().get(MACHINE_GENERATION_LABEL).cloned()
            }
            ConfigOwner::Pool(_) => None,
        }
    }

    /// Bootstrap data the owner already has (after a move to another management cluster). Cluster API
    /// reads `spec.bootstrap.dataSecretName`, which only Machines have.
    fn data_secret_name(&self) -> Option<String> {
        match self {
            ConfigOwner::Machine(machine) => machine.spec.bootstrap.data_secret_name.clone(),
            ConfigOwner::Pool(_) => None,
        }
    }

    /// Who joins with the token, and whether all of them have: a Machine once it has a Node, a pool once it
    /// has a Node for each replica (1 when unset).
    fn consumer(&self) -> Consumer {
        match self {
            ConfigOwner::Machine(machine) => Consumer::Machine {
                joined: machine
                    .status
                    .as_ref()
                    .is_some_and(|s| s.node_ref.is_some()),
            },
            ConfigOwner::Pool(pool) => {
                let joined = pool.status.as_ref().map_or(0, |s| s.node_refs.len());
                let replicas = usize::try_from(pool.spec.replicas.unwrap_or(1)).unwrap_or(0);
                Consumer::Pool {
                    all_joined: joined == replicas,
                }
            }
        }
    }
}

async fn reconcile(config: Arc<KubeadmConfig>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = METRICS.reconcile.measure();
    let key = ObjectRef::from_obj(&*config);
    let result = reconcile_config(config, &ctx).await;
    if result.is_ok() {
        ctx.backoff.reset(&key);
    }
    result
}

async fn reconcile_config(config: Arc<KubeadmConfig>, ctx: &Context) -> Result<Action, Error> {
    let namespace = config.namespace().unwrap_or_default();
    let Some((kind, owner_name)) = owner_ref(&config) else {
        // A template's copy waits until core Cluster API sets the owner.
        return Ok(Action::await_change());
    };
    let owner = match kind {
        OwnerKind::Machine => cached_or_live(&ctx.machines, &ctx.client, &namespace, &owner_name)
            .await?
            .map(|machine| ConfigOwner::Machine(Box::new(machine))),
        OwnerKind::Pool => Api::<MachinePool>::namespaced(ctx.client.clone(), &namespace)
            .get_opt(&owner_name)
            .await?
            .map(|pool| ConfigOwner::Pool(Box::new(pool))),
    };
    let Some(owner) = owner else {
        return Ok(Action::await_change());
    };
    let cluster =
        cached_or_live(&ctx.clusters, &ctx.client, &namespace, owner.cluster_name()).await?;
    let Some(cluster) = cluster else {
        return Ok(Action::requeue(WAIT_FOR_CONTROL_PLANE));
    };
    if kubeadm_cluster::paused::is_paused(&cluster, &*config) {
        tracing::debug!(config = %config.name_any(), "paused");
        return Ok(Action::await_change());
    }
    let facts = Facts {
        config,
        namespace,
        owner,
        cluster,
    };

    if data_secret_created(&facts.config) {
        return keep_token_useful(&facts, ctx).await;
    }
    if let Some(name) = facts.owner.data_secret_name() {
        // The Machine already has bootstrap data (e.g. after a move to another management cluster).
        write_status(
            ctx,
            &facts,
            Outcome::Ready {
                secret: name,
                role: None,
            },
        )
        .await?;
        return Ok(Action::await_change());
    }
    if !infrastructure_provisioned(&facts.cluster) {
        write_status(
            ctx,
            &facts,
            Outcome::Waiting(
                reasons::WAITING_FOR_INFRASTRUCTURE,
                "the Cluster's infrastructure is not provisioned yet".into(),
            ),
        )
        .await?;
        return Ok(Action::await_change());
    }

    let control_plane = facts.owner.is_control_plane();
    // The machine that restores etcd runs `kubeadm init` on a cluster that was initialized before.
    let restores_etcd = control_plane && restore_snapshot(&facts.config).is_some();
    let role = if control_plane_initialized(&facts.cluster) && !restores_etcd {
        if control_plane {
            // Initialized: whoever held the init lock is done with it.
            init_lock::release(&ctx.client, &facts.namespace, &facts.cluster.name_any()).await?;
            Role::ControlPlaneJoin
        } else {
            Role::WorkerJoin
        }
    } else if !control_plane {
        write_status(
            ctx,
            &facts,
            Outcome::Waiting(
                reasons::WAITING_FOR_CONTROL_PLANE,
                "workers join once the control plane is initialized".into(),
            ),
        )
        .await?;
        return Ok(Action::requeue(WAIT_FOR_CONTROL_PLANE));
    } else {
        let cluster_name = facts.cluster.name_any();
        match init_lock::try_acquire(
            &ctx.client,
            &facts.namespace,
            &cluster_name,
            &facts.owner.name(),
        )
        .await?
        {
            Acquired::Yes => Role::Init,
            Acquired::HeldBy(holder) => {
                let message = format!("Machine {holder} is initializing the control plane");
                write_status(
                    ctx,
                    &facts,
                    Outcome::Waiting(reasons::WAITING_FOR_CONTROL_PLANE_INIT, message),
                )
                .await?;
                return Ok(Action::requeue(WAIT_FOR_CONTROL_PLANE));
            }
        }
    };
    let outcome = bootstrap(&facts, ctx, role, TokenChoice::Keep).await;
    if role == Role::Init && !matches!(outcome, Ok(Bootstrapped::Written(_))) {
        // Whoever cannot init must not keep the others waiting: hand the lock back.
        init_lock::release(&ctx.client, &facts.namespace, &facts.cluster.name_any()).await?;
    }
    outcome.map(Bootstrapped::action)
}

/// How a bootstrap attempt ended.
enum Bootstrapped {
    /// The data secret was written.
    Written(Action),
    /// Waiting or failed, with the status saying why.
    NotYet(Action),
}

impl Bootstrapped {
    fn action(self) -> Action {
        match self {
            Bootstrapped::Written(action) | Bootstrapped::NotYet(action) => action,
        }
    }
}

/// Whether a join keeps the token in the spec or gets a new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TokenChoice {
    /// The spec's token if it has one, else a new one.
    Keep,
    /// A new token in any case (a MachinePool's token rotation).
    New,
}

/// Renders and stores the bootstrap data for `role`.
async fn bootstrap(
    facts: &Facts,
    ctx: &Context,
    role: Role,
    token_choice: TokenChoice,
) -> Result<Bootstrapped, Error> {
    let cluster_name = facts.cluster.name_any();
    // Before anything is created for it (certificates, a join token): whether its templates can render.
    let control_plane_version =
        match template_control_plane_version(&ctx.client, facts, &facts.config.spec).await? {
            Ok(version) => version,
            Err(message) => {
                write_status(ctx, facts, Outcome::Failed(reasons::INVALID_SPEC, message)).await?;
                return Ok(Bootstrapped::NotYet(Action::await_change()));
            }
        };
    // Without a control-plane provider the bootstrap provider owns the cluster certificates.
    let generation = facts.cluster.spec.control_plane_ref.is_none().then(|| {
        Generation::of(
            &facts.config.spec.cluster_configuration,
            Some(owner_reference(&facts.config)),
            crate::FIELD_MANAGER,
        )
    });
    let certificates = match certificates::lookup_or_generate_with(
        &ctx.client,
        |name| ctx.secrets.get(&facts.namespace, name),
        &facts.namespace,
        &cluster_name,
        generation.as_ref(),
    )
    .await
    {
        Ok(certificates) => certificates,
        Err(e @ CertError::Missing { .. }) => {
            let message = e.to_string();
            write_status(
                ctx,
                facts,
                Outcome::Failed(reasons::CERTIFICATES_UNAVAILABLE, message),
            )
            .await?;
            return Ok(Bootstrapped::NotYet(Action::requeue(
                WAIT_FOR_CONTROL_PLANE,
            )));
        }
        Err(e) => return Err(e.into()),
    };

    let mut spec = match restore_snapshot(&facts.config) {
        Some(secret) if role == Role::Init => {
            // The Secret says whether it holds the snapshot or where to download it; a Secret not
            // there (yet) renders as the snapshot, and the render names the missing Secret.
            let staged = Api::<Secret>::namespaced(ctx.client.clone(), &facts.namespace)
                .get_opt(secret)
                .await?;
            let form = render::etcd_restore::Form::of(
                staged
                    .iter()
                    .flat_map(|s| s.data.iter().flat_map(|d| d.keys()))
                    .map(String::as_str),
            );
            render::etcd_restore::with_etcd_restore(&facts.config.spec, secret, form)
        }
        _ => facts.config.spec.clone(),
    };
    let join = match role {
        Role::Init => None,
        Role::ControlPlaneJoin | Role::WorkerJoin => {
            let Some(endpoint) = kubeadm_cluster::endpoint::control_plane_endpoint(&facts.cluster)
            else {
                write_status(
                    ctx,
                    facts,
                    Outcome::Waiting(
                        reasons::WAITING_FOR_CONTROL_PLANE_ENDPOINT,
                        "the Cluster has no controlPlaneEndpoint yet".into(),
                    ),
                )
                .await?;
                return Ok(Bootstrapped::NotYet(Action::await_change()));
            };
            // Kubeconfig-file discovery authenticates without a bootstrap token, as in Cluster API.
            let token = if spec.join_configuration.discovery.file.is_defined() {
                String::new()
            } else {
                ensure_join_token(facts, ctx, &mut spec, token_choice).await?
            };
            Some(JoinFacts {
                token,
                api_server_endpoint: endpoint,
                ca_cert_hashes: vec![certificates::ca_cert_hash(&certificates.ca.cert)?],
            })
        }
    };

    let version = facts.owner.kubernetes_version().unwrap_or_default();
    let mut cluster_facts = ClusterFacts::of(&facts.cluster, &version);
    cluster_facts.control_plane_version = control_plane_version;
    let machine_facts = MachineFacts {
        name: facts.owner.name(),
        generation: facts.owner.machine_generation(),
    };
    let secrets = referenced_secrets(&ctx.client, &facts.namespace, &spec).await?;
    let input = RenderInput {
        role,
        spec: &spec,
        cluster: &cluster_facts,
        machine: &machine_facts,
        certificates: Some(&certificates),
        join: join.as_ref(),
        secrets: &secrets,
    };
    let data = match render::render(&input) {
        Ok(data) => data,
        Err(e) => {
            // Bad input is the user's to fix: say so and wait for a change, no retry loop.
            write_status(
                ctx,
                facts,
                Outcome::Failed(render_reason(&e), e.to_string()),
            )
            .await?;
            return Ok(Bootstrapped::NotYet(Action::await_change()));
        }
    };
    let secret = data_secret(facts, &cluster_name, data, spec.format.unwrap_or_default());
    let secrets_api: Api<Secret> = Api::namespaced(ctx.client.clone(), &facts.namespace);
    secrets_api
        .patch(
            &facts.config.name_any(),
            &PatchParams::apply(crate::FIELD_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await?;
    METRICS
        .data_secrets_written
        .get_or_create(&[("role", role_label(role))])
        .inc();
    tracing::info!(config = %facts.config.name_any(), role = ?role, "bootstrap data written");
    write_status(
        ctx,
        facts,
        Outcome::Ready {
            secret: facts.config.name_any(),
            role: Some(role),
        },
    )
    .await?;
    Ok(Bootstrapped::Written(match role {
        Role::Init => Action::await_change(),
        _ => Action::requeue(ctx.settings.token_ttl / 3),
    }))
}

/// The join token: the one in the spec if any (set by us earlier, or by the user), else a new one
/// created in the workload cluster and recorded in the spec, as Cluster API does, so a restarted
/// controller refreshes the same token instead of minting another.
async fn ensure_join_token(
    facts: &Facts,
    ctx: &Context,
    spec: &mut KubeadmConfigSpec,
    choice: TokenChoice,
) -> Result<String, Error> {
    if choice == TokenChoice::Keep
        && let Some(token) = spec
            .join_configuration
            .discovery
            .bootstrap_token
            .token
            .clone()
            .filter(|t| !t.is_empty())
    {
        return Ok(token);
    }
    let workload = (ctx.workload)
        .get_cached(
            &ctx.client,
            &ctx.secrets,
            &facts.namespace,
            &facts.cluster.name_any(),
        )
        .await?;
    let workload = counted(&workload, ApiServer::Workload);
    let token = tokens::create(&workload, ctx.settings.token_ttl, SystemTime::now()).await?;
    let value = token.to_string();
    let configs: Api<KubeadmConfig> = Api::namespaced(ctx.client.clone(), &facts.namespace);
    let patch =
        json!({"spec": {"joinConfiguration": {"discovery": {"bootstrapToken": {"token": value}}}}});
    configs
        .patch(
            &facts.config.name_any(),
            &merge_params(),
            &Patch::Merge(&patch),
        )
        .await?;
    spec.join_configuration.discovery.bootstrap_token.token = Some(value.clone());
    Ok(value)
}

/// After the data is written: keep the join token usable for whoever still joins with it (see
/// [`tokens::next_step`]).
async fn keep_token_useful(facts: &Facts, ctx: &Context) -> Result<Action, Error> {
    let consumer = facts.owner.consumer();
    let token = facts
        .config
        .spec
        .join_configuration
        .discovery
        .bootstrap_token
        .token
        .as_deref()
        .and_then(|t| t.parse().ok());
    let (true, Some(token)) = (consumer.needs_token(), token) else {
        return Ok(Action::await_change());
    };
    let workload = (ctx.workload)
        .get_cached(
            &ctx.client,
            &ctx.secrets,
            &facts.namespace,
            &facts.cluster.name_any(),
        )
        .await?;
    let workload = counted(&workload, ApiServer::Workload);
    let ttl = ctx.settings.token_ttl;
    let now = SystemTime::now();
    let mut observed = tokens::observe(&workload, &token).await?;
    let mut step = tokens::next_step(consumer, observed, ttl, now);
    if step == TokenStep::Extend
        && tokens::extend(&workload, &token, ttl, now).await? == Refresh::Missing
    {
        // Deleted between the read and the write: the same as not found.
        observed = tokens::Observed::Missing;
        step = tokens::next_step(consumer, observed, ttl, now);
    }
    match step {
        TokenStep::Wait | TokenStep::Extend => {}
        TokenStep::Rotate => return rotate_token(facts, ctx).await,
    }
    if observed == tokens::Observed::Missing {
        // A Machine's data may already be on the machine: it is not rewritten, the join will fail.
        tracing::warn!(config = %facts.config.name_any(), owner = %facts.owner.describe(), "join token is gone from the workload cluster");
    }
    Ok(Action::requeue(tokens::check_interval(ttl)))
}

/// A MachinePool's new token: created in the workload cluster, recorded in the spec, and the bootstrap
/// data rewritten with it so instances created from now on can join.
async fn rotate_token(facts: &Facts, ctx: &Context) -> Result<Action, Error> {
    tracing::info!(config = %facts.config.name_any(), owner = %facts.owner.describe(), "rotating join token");
    let outcome = bootstrap(facts, ctx, Role::WorkerJoin, TokenChoice::New).await?;
    if let Bootstrapped::Written(_) = outcome {
        let note = format!(
            "{}: new join token, bootstrap data in Secret {} rewritten",
            facts.owner.describe(),
            facts.config.name_any()
        );
        let rotated = &bootstrap_events::BOOTSTRAP_TOKEN_ROTATED;
        let event = events::event(rotated, rotated.action(), note, None);
        publish(ctx, facts, event).await;
    }
    Ok(outcome.action())
}

async fn publish(ctx: &Context, facts: &Facts, event: Event) {
    events::publish(&ctx.recorder, &facts.config.object_ref(&()), event).await;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OwnerKind {
    Machine,
    Pool,
}

/// The owner core Cluster API set: a Machine or a MachinePool of `cluster.x-k8s.io` (any version).
fn owner_ref(config: &KubeadmConfig) -> Option<(OwnerKind, String)> {
    config.owner_references().iter().find_map(|o| {
        let kind = match o.kind.as_str() {
            "Machine" => OwnerKind::Machine,
            "MachinePool" => OwnerKind::Pool,
            _ => return None,
        };
        o.api_version
            .starts_with("cluster.x-k8s.io/")
            .then(|| (kind, o.name.clone()))
    })
}

fn data_secret_created(config: &KubeadmConfig) -> bool {
    config.status.as_ref().is_some_and(|s| {
        s.initialization.data_secret_created == Some(true) && s.data_secret_name.is_some()
    })
}

fn infrastructure_provisioned(cluster: &Cluster) -> bool {
    cluster
        .status
        .as_ref()
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.infrastructure_provisioned)
        == Some(true)
}

/// The Secret with the etcd snapshot a restoring control-plane machine restores, from the control
/// plane's [`ETCD_RESTORE_SNAPSHOT_ANNOTATION`](render::etcd_restore::ETCD_RESTORE_SNAPSHOT_ANNOTATION).
fn restore_snapshot(config: &KubeadmConfig) -> Option<&str> {
    config
        .annotations()
        .get(render::etcd_restore::ETCD_RESTORE_SNAPSHOT_ANNOTATION)
        .map(String::as_str)
        .filter(|name| !name.is_empty())
}

fn control_plane_initialized(cluster: &Cluster) -> bool {
    let Some(status) = cluster.status.as_ref() else {
        return false;
    };
    status
        .initialization
        .as_ref()
        .and_then(|i| i.control_plane_initialized)
        == Some(true)
        || status
            .conditions
            .iter()
            .any(|c| c.type_ == "ControlPlaneInitialized" && c.status == "True")
}

/// Values of the secrets `files[].contentFrom` and `users[].passwdFrom` refer to. A missing secret or
/// key is left out; the render then fails naming the field.
async fn referenced_secrets(
    client: &kube::Client,
    namespace: &str,
    spec: &KubeadmConfigSpec,
) -> Result<BTreeMap<(String, String), String>, Error> {
    let refs = spec
        .files
        .iter()
        .filter(|f| f.content_from.is_defined())
        .map(|f| {
            (
                f.content_from.secret.name.clone(),
                f.content_from.secret.key.clone(),
            )
        })
        .chain(
            spec.users
                .iter()
                .filter(|u| u.passwd_from.is_defined())
                .map(|u| {
                    (
                        u.passwd_from.secret.name.clone(),
                        u.passwd_from.secret.key.clone(),
                    )
                }),
        );
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut values = BTreeMap::new();
    for (name, key) in refs {
        if values.contains_key(&(name.clone(), key.clone())) {
            continue;
        }
        let Some(secret) = api.get_opt(&name).await? else {
            continue;
        };
        let value = secret
            .data
            .as_ref()
            .and_then(|d| d.get(&key))
            .map(|v| String::from_utf8_lossy(&v.0).into_owned());
        if let Some(value) = value {
            values.insert((name, key), value);
        }
    }
    Ok(values)
}

/// `{{ .controlPlane.version }}` of `files[].contentFormat: Template`: the `spec.version` of the Cluster's
/// control plane, read only when a file is a template (Cluster API reads it for every render). `None` when
/// the Cluster has no control plane; `Ok(Err(why))` when the template cannot be given a version.
async fn template_control_plane_version(
    client: &kube::Client,
    facts: &Facts,
    spec: &KubeadmConfigSpec,
) -> Result<Result<Option<String>, String>, Error> {
    let Some(i) = spec
        .files
        .iter()
        .position(|f| f.content_format == Some(FileContentFormat::Template))
    else {
        return Ok(Ok(None));
    };
    let Some(reference) = &facts.cluster.spec.control_plane_ref else {
        return Ok(Ok(None));
    };
    if reference.api_group != controlplane::GROUP
        || reference.kind != KubeadmControlPlane::kind(&())
    {
        return Ok(Err(format!(
            "spec.files[{i}].contentFormat: Template needs the control plane's version, and the bootstrap \
             manager reads it only from a KubeadmControlPlane, not from the Cluster's controlPlaneRef {}/{}",
            reference.kind, reference.name
        )));
    }
    let api: Api<KubeadmControlPlane> = Api::namespaced(client.clone(), &facts.namespace);
    let control_plane = api.get(&reference.name).await?;
    let version = control_plane.spec.version.trim();
    if version.is_empty() {
        return Ok(Ok(None));
    }
    Ok(file_template::control_plane_version(version)
        .map(Some)
        .map_err(|e| {
            format!(
                "spec.files[{i}].contentFormat: Template: KubeadmControlPlane {} has spec.version {e}",
                reference.name
            )
        }))
}

fn owner_reference(config: &KubeadmConfig) -> OwnerReference {
    config
        .controller_owner_ref(&())
        .expect("a stored KubeadmConfig has a name and uid")
}

/// The bootstrap data secret: same name and namespace as the config, owned by it.
fn data_secret(facts: &Facts, cluster_name: &str, data: Vec<u8>, format: Format) -> Secret {
    let format = match format {
        Format::CloudConfig => "cloud-config",
        Format::Ignition => "ignition",
    };
    Secret {
        metadata: ObjectMeta {
            name: Some(facts.config.name_any()),
            namespace: Some(facts.namespace.clone()),
            labels: Some(BTreeMap::from([(
                CLUSTER_NAME_LABEL.to_owned(),
                cluster_name.to_owned(),
            )])),
            owner_references: Some(vec![owner_reference(&facts.config)]),
            ..Default::default()
        },
        type_: Some(CLUSTER_SECRET_TYPE.to_owned()),
        data: Some(BTreeMap::from([
            ("value".to_owned(), ByteString(data)),
            ("format".to_owned(), ByteString(format.as_bytes().to_vec())),
        ])),
        ..Default::default()
    }
}

fn render_reason(error: &RenderError) -> &'static str {
    match error {
        RenderError::LearnerModeUnsupported { .. } => reasons::ETCD_LEARNER_MODE_UNSUPPORTED,
        RenderError::MissingSecret { .. } => reasons::SECRET_MISSING,
        _ => reasons::INVALID_SPEC,
    }
}

/// What the status should say after this reconcile.
enum Outcome {
    /// The data secret exists; `role` is what this reconcile wrote it for (none when it found it).
    Ready { secret: String, role: Option<Role> },
    /// Waiting for something outside the config.
    Waiting(&'static str, String),
    /// The spec or its references are wrong, or certificates are missing.
    Failed(&'static str, String),
}

/// Writes the status unless it already says this, and records the events of a change.
async fn write_status(ctx: &Context, facts: &Facts, outcome: Outcome) -> Result<(), Error> {
    use kubeadm_api::meta::set_condition;
    let events = events(&outcome, &facts.owner.describe(), &facts.cluster.name_any());
    let current = facts.config.status.clone().unwrap_or_default();
    let mut conditions = current.conditions.clone();
    let generation = facts.config.metadata.generation;
    let mut status = json!({ "observedGeneration": generation });
    match outcome {
        Outcome::Ready { secret, .. } => {
            for type_ in [
                types::READY,
                types::DATA_SECRET_AVAILABLE,
                types::CERTIFICATES_AVAILABLE,
            ] {
                set_condition(
                    &mut conditions,
                    type_,
                    true,
                    reasons::AVAILABLE,
                    "",
                    generation,
                );
            }
            status["dataSecretName"] = json!(secret);
            status["initialization"] = json!({ "dataSecretCreated": true });
        }
        Outcome::Waiting(reason, message) | Outcome::Failed(reason, message) => {
            if reason == reasons::CERTIFICATES_UNAVAILABLE {
                set_condition(
                    &mut conditions,
                    types::CERTIFICATES_AVAILABLE,
                    false,
                    reason,
                    &message,
                    generation,
                );
            }
            set_condition(
                &mut conditions,
                types::DATA_SECRET_AVAILABLE,
                false,
                reason,
                &message,
                generation,
            );
            set_condition(
                &mut conditions,
                types::READY,
                false,
                reason,
                &message,
                generation,
            );
        }
    }
    status["conditions"] = serde_json::to_value(&conditions).expect("conditions serialize");
    if current.conditions == conditions
        && status.get("dataSecretName").is_none_or(|s| {
            Some(s.as_str().unwrap_or_default()) == current.data_secret_name.as_deref()
        })
        && current.observed_generation == generation
    {
        return Ok(());
    }
    let api: Api<KubeadmConfig> = Api::namespaced(ctx.client.clone(), &facts.namespace);
    api.patch_status(
        &facts.config.name_any(),
        &merge_params(),
        &Patch::Merge(&json!({ "status": status })),
    )
    .await?;
    for event in events {
        publish(ctx, facts, event).await;
    }
    Ok(())
}

/// The events that announce `outcome`; `owner` is `Machine <name>` or `MachinePool <name>`. Notes carry
/// names and the status message only, never secret or token values.
fn events(outcome: &Outcome, owner: &str, cluster: &str) -> Vec<Event> {
    let event = |reason: &EventReason, note: String| {
        let note = events::truncate(note, events::NOTE_LIMIT);
        events::event(reason, reason.action(), note, None)
    };
    match outcome {
        Outcome::Ready {
            secret,
            role: Some(role),
        } => {
            let written = event(
                &bootstrap_events::BOOTSTRAP_DATA_WRITTEN,
                format!(
                    "{} bootstrap data for {owner} written to Secret {secret}",
                    role_label(*role)
                ),
            );
            if *role == Role::Init {
                let lock = event(
                    &bootstrap_events::INIT_LOCK_ACQUIRED,
                    format!(
                        "{owner} holds the init lock of Cluster {cluster} and runs kubeadm init"
                    ),
                );
                vec![lock, written]
            } else {
                vec![written]
            }
        }
        Outcome::Failed(reason, message) => {
            vec![event(&bootstrap_events::failed(reason), message.clone())]
        }
        Outcome::Ready { role: None, .. } | Outcome::Waiting(..) => Vec::new(),
    }
}

/// Merge patches carry our field manager too, so `managedFields` say who wrote what.
fn merge_params() -> PatchParams {
    kubeadm_runtime::controller::merge_params(crate::FIELD_MANAGER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::events::EventType;

    fn pool(replicas: Option<i32>, nodes: usize) -> ConfigOwner {
        let pool: MachinePool = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
            "metadata": { "name": "mp" },
            "spec": {
                "clusterName": "prod", "replicas": replicas,
                "template": { "spec": { "clusterName": "prod", "bootstrap": {}, "infrastructureRef": { "apiGroup": "x", "kind": "X", "name": "x" } } },
            },
            "status": { "nodeRefs": (0..nodes).map(|i| json!({ "kind": "Node", "name": format!("n{i}") })).collect::<Vec<_>>() },
        }))
        .unwrap();
        ConfigOwner::Pool(Box::new(pool))
    }

    #[test]
    fn a_pool_is_complete_with_a_node_per_replica_one_when_unset() {
        assert_eq!(
            pool(None, 0).consumer(),
            Consumer::Pool { all_joined: false }
        );
        assert_eq!(
            pool(None, 1).consumer(),
            Consumer::Pool { all_joined: true }
        );
        assert_eq!(
            pool(Some(3), 2).consumer(),
            Consumer::Pool { all_joined: false }
        );
        assert_eq!(
            pool(Some(3), 3).consumer(),
            Consumer::Pool { all_joined: true }
        );
        assert_eq!(
            pool(Some(0), 0).consumer(),
            Consumer::Pool { all_joined: true }
        );
        assert!(!pool(None, 0).is_control_plane(), "pools hold workers only");
    }

    #[test]
    fn owners_are_machines_or_machine_pools_of_cluster_api() {
        let config = |kind: &str, api_version: &str| {
            let mut config = KubeadmConfig::default();
            config.metadata.owner_references = Some(vec![OwnerReference {
                api_version: api_version.into(),
                kind: kind.into(),
                name: "owner".into(),
                uid: "1".into(),
                ..OwnerReference::default()
            }]);
            owner_ref(&config)
        };
        assert_eq!(
            config("Machine", "cluster.x-k8s.io/v1beta1"),
            Some((OwnerKind::Machine, "owner".to_owned()))
        );
        assert_eq!(
            config("MachinePool", "cluster.x-k8s.io/v1beta2"),
            Some((OwnerKind::Pool, "owner".to_owned()))
        );
        assert_eq!(config("MachinePool", "infrastructure.example.com/v1"), None);
        assert_eq!(config("MachineSet", "cluster.x-k8s.io/v1beta2"), None);
    }

    #[test]
    fn events_only_for_written_data_and_failures() {
        let ready = |role| Outcome::Ready {
            secret: "prod-cp-0".into(),
            role,
        };
        let reasons = |outcome: &Outcome| {
            events(outcome, "Machine prod-cp-0", "prod")
                .into_iter()
                .map(|e| (e.type_, e.reason))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            reasons(&ready(Some(Role::Init))),
            [
                (EventType::Normal, "InitLockAcquired".to_owned()),
                (EventType::Normal, "BootstrapDataWritten".to_owned())
            ]
        );
        assert_eq!(
            reasons(&ready(Some(Role::WorkerJoin))),
            [(EventType::Normal, "BootstrapDataWritten".to_owned())]
        );
        assert_eq!(reasons(&ready(None)), []);
        assert_eq!(
            reasons(&Outcome::Waiting("WaitingForControlPlane", "later".into())),
            []
        );
        let failed = Outcome::Failed("InvalidSpec", "spec.files[0]: x".repeat(200));
        let [warning] = events(&failed, "m", "c").try_into().ok().unwrap();
        assert_eq!(
            (warning.type_, warning.reason.as_str()),
            (EventType::Warning, "InvalidSpec")
        );
        let note = warning.note.unwrap();
        assert!(
            note.len() <= events::NOTE_LIMIT && note.ends_with('…'),
            "{note}"
        );
    }
}
