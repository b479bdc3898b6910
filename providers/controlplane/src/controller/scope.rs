//! One reconcile's view of a control plane: observed once (the machines with their configs and
//! infrastructure, the workload cluster, etcd), the decisions that depend only on it computed once (which
//! machines are up to date, what etcd's membership needs, the rollout step), then read by every phase.

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kubeadm_api::cluster::v1beta2::Cluster;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_cluster::ClusterCertificates;

use super::etcd::{EtcdView, Unobservable};
use super::machines::{self, Gathered};
use super::metrics::METRICS;
use super::observe::{self, Source, Workload};
use super::{Context, Error};
use crate::desired::DesiredState;
use crate::etcd_membership::{self, EtcdMachine};
use crate::plan::{self, Plan};
use crate::preflight::Blocker;

/// Everything a phase reads about one control plane in one reconcile.
pub(super) struct ControlPlane<'a> {
    pub kcp: &'a KubeadmControlPlane,
    pub cluster: &'a Cluster,
    pub namespace: String,
    pub cluster_name: String,
    pub desired: DesiredState,
    pub now: Timestamp,
    /// The control-plane machines, each with the health the workload cluster and etcd showed.
    pub machines: Gathered,
    /// The workload cluster's client, or why there is none.
    pub workload: Result<kube::Client, String>,
    /// `kubeadm init` has run (the status said so before, or the workload cluster shows it).
    pub initialized: bool,
    /// The workload cluster did not answer this reconcile (no watch of it is open to say when it does).
    pub workload_unreachable: bool,
    /// Where the view of the workload cluster came from: read now, or kept from an earlier reconcile.
    pub source: Source,
    /// The addon inputs this reconcile applied without error (see the addons phase).
    pub addons_applied: std::sync::OnceLock<u64>,
    /// Stacked etcd of an initialized control plane; `None` for external etcd or before `kubeadm init`.
    pub etcd: Option<Etcd>,
    /// The machines in the etcd planner's terms.
    pub etcd_machines: Vec<EtcdMachine>,
    /// The rollout or scale step, with which machines are up to date and why the others are not.
    pub plan: Plan,
    learner_timeout: SignedDuration,
    unstarted_grace: SignedDuration,
}

/// How a reconcile reaches the workload cluster.
#[derive(Clone, Copy)]
pub(super) enum Route<'t> {
    /// Through the cluster's endpoint, as its watches do; with `reuse`, a view the watches vouch for
    /// may be taken instead of reading.
    Endpoint { reuse: bool },
    /// Through this one API server (a machine is leaving).
    Through(&'t str),
}

impl<'t> Route<'t> {
    /// `server` if there is one, else the endpoint.
    pub(super) fn of(server: Option<&'t str>, reuse: bool) -> Self {
        server.map_or(Route::Endpoint { reuse }, Route::Through)
    }

    fn through(self) -> Option<&'t str> {
        match self {
            Route::Endpoint { .. } => None,
            Route::Through(server) => Some(server),
        }
    }
}

/// What etcd showed and what its membership needs.
pub(super) struct Etcd {
    pub view: Result<EtcdView, Unobservable>,
    /// The planner's answers; `None` when etcd could not be observed.
    pub membership: Option<Membership>,
}

/// The etcd membership planner's answers for this reconcile.
pub(super) struct Membership {
    pub action: etcd_membership::Action,
    /// When a learner timeout or an unstarted member's grace runs out, if one is running.
    pub next_expiry: Option<Timestamp>,
}

impl<'a> ControlPlane<'a> {
    /// Observes the control plane whose cluster certificates and kubeconfig Secret are in place (etcd is
    /// reached with a client certificate from the cluster's etcd CA). With `reuse`, the workload
    /// cluster's pods and Nodes may come from an earlier reconcile's observation that its watches vouch
    /// for (see [`Route`] and [`Self::needs_fresh_view`]).
    pub(super) async fn observe(
        ctx: &Context,
        kcp: &'a KubeadmControlPlane,
        cluster: &'a Cluster,
        desired: DesiredState,
        certificates: &ClusterCertificates,
        workload: Result<kube::Client, String>,
        route: Route<'_>,
    ) -> Result<ControlPlane<'a>, Error> {
        let through = route.through();
        let namespace = kcp.namespace().unwrap_or_default();
        let cluster_name = cluster.name_any();
        let now = Timestamp::now();
        let mut gathered = machines::gather(ctx, kcp, &cluster_name).await?;
        let was_initialized = kcp
            .status
            .as_ref()
            .and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.control_plane_initialized)
            == Some(true);
        let key = (namespace.clone(), cluster_name.clone());
        let (seen, source) = observe::workload(
            ctx,
            kcp,
            &key,
            &workload,
            was_initialized,
            &gathered,
            match route {
                Route::Endpoint { reuse } => (reuse, true),
                // What is read through one API server is not what the watches, through the
                // endpoint, see.
                Route::Through(_) => (false, false),
            },
        )
        .await;
        let view = match (&seen, &source) {
            (_, Source::Kept { .. }) => Some("kept"),
            (Workload::Seen { nodes: Some(_), .. }, _) => Some("read"),
            _ => None,
        };
        if let Some(view) = view {
            METRICS
                .workload_views
                .get_or_create(&[("source", view)])
                .inc();
        }
        match &seen {
            Workload::Unreachable(_) => {
                // The next reconcile connects afresh, through the cluster's endpoint: a kept connection
                // may lead to an API server that stopped answering (its etcd member was just removed).
                ctx.workload.forget(&namespace, &cluster_name);
                if through.is_none() {
                    ctx.watches.close(&key);
                }
                ctx.api_servers.failed_through(key, through);
            }
            Workload::Seen { pods, .. } => {
                // Watches through the cluster's endpoint, which outlive any one machine.
                if let (Ok(client), None) = (&workload, through) {
                    ctx.watches
                        .ensure(key.clone(), ObjectRef::from_obj(kcp), client);
                }
                let failed = ctx.api_servers.failed(&key);
                let server = super::api_servers::choose(&gathered.machines, pods, &failed);
                let leaving = gathered.machines.iter().any(|m| m.deleting);
                if !leaving {
                    ctx.workload.forget_through(&namespace, &cluster_name);
                }
                ctx.api_servers.chose(key, server, leaving);
            }
        }
        let initialized = was_initialized || seen.initialized();
        let workload_unreachable = matches!(seen, Workload::Unreachable(_));
        let view = match &seen {
            Workload::Seen { .. } if !desired.external_etcd && initialized => Some(
                observe::etcd(
                    ctx,
                    (namespace.clone(), cluster_name.clone()),
                    &certificates.etcd,
                    &workload,
                    &gathered,
                    seen.pods(),
                    now,
                )
                .await,
            ),
            // An unreachable workload cluster hides etcd too: every member's health is unknown.
            Workload::Unreachable(cause) if !desired.external_etcd && initialized => Some(Err(
                Unobservable::new(format!("workload cluster unreachable: {cause}")),
            )),
            _ => None,
        };
        observe::judge_health(&mut gathered, seen, view.as_ref(), desired.external_etcd);

        let partition = plan::partition(&desired, &gathered.machines, now);
        let etcd_machines = super::etcd::planner_machines(
            &gathered.machines,
            &partition.up_to_date,
            crate::machines::hooks_run_first(&desired.version),
        );
        let (learner_timeout, unstarted_grace) =
            (ctx.etcd.learner_timeout, ctx.etcd.unstarted_grace);
        let mut refusal = None;
        let etcd = view.map(|view| {
            let membership = match &view {
                Ok(view) => {
                    let observed = membership_input(
                        view,
                        &etcd_machines,
                        now,
                        learner_timeout,
                        unstarted_grace,
                    );
                    if let Err(reason) = etcd_membership::may_add_member(observed) {
                        refusal = Some(Blocker::EtcdMembership(reason));
                    } else if let Some(below) = crate::etcd_upgrade::check_desired(
                        &desired,
                        &view.members,
                        &view.versions(),
                    ) {
                        refusal = Some(Blocker::EtcdBelowUpgradeFloor(below));
                    }
                    Some(Membership {
                        action: etcd_membership::next_action(observed),
                        next_expiry: etcd_membership::next_expiry(observed),
                    })
                }
                Err(cause) => {
                    refusal = Some(Blocker::EtcdUnobservable(cause.to_string()));
                    None
                }
            };
            Etcd { view, membership }
        });
        let failure_domains = control_plane_failure_domains(cluster);
        let plan = plan::next_step(
            plan::Observed {
                desired: &desired,
                machines: &gathered.machines,
                failure_domains: &failure_domains,
                etcd_refuses_member: refusal.as_ref(),
            },
            partition,
        );
        Ok(ControlPlane {
            kcp,
            cluster,
            namespace,
            cluster_name,
            desired,
            now,
            machines: gathered,
            workload,
            initialized,
            workload_unreachable,
            source,
            addons_applied: Default::default(),
            etcd,
            etcd_machines,
            plan,
            learner_timeout,
            unstarted_grace,
        })
    }

    /// The etcd membership planner's input for this reconcile.
    pub(super) fn membership_input<'v>(
        &'v self,
        view: &'v EtcdView,
    ) -> etcd_membership::Observed<'v> {
        membership_input(
            view,
            &self.etcd_machines,
            self.now,
            self.learner_timeout,
            self.unstarted_grace,
        )
    }

    /// The etcd view, when etcd was observed.
    pub(super) fn etcd_view(&self) -> Option<&EtcdView> {
        self.etcd.as_ref().and_then(|e| e.view.as_ref().ok())
    }

    /// The membership change etcd needs, when etcd was observed.
    pub(super) fn etcd_action(&self) -> Option<&etcd_membership::Action> {
        self.etcd
            .as_ref()
            .and_then(|e| e.membership.as_ref())
            .map(|m| &m.action)
    }

    /// The workload cluster's client, or the error that says why there is none.
    pub(super) fn workload(&self) -> Result<&kube::Client, Error> {
        self.workload
            .as_ref()
            .map_err(|cause| Error::Workload(cause.clone()))
    }

    /// The view of the workload cluster was kept from an earlier reconcile, and this one has something to
    /// do: a step is due, etcd's membership needs a change, a machine leaves or asks for remediation, or
    /// a restore is requested. A step is taken on what the workload cluster shows now, so the reconcile
    /// observes again with `reuse` off.
    pub(super) fn needs_fresh_view(&self, changing: bool) -> bool {
        matches!(self.source, Source::Kept { .. })
            && (changing
                || self
                    .machines
                    .machines
                    .iter()
                    .any(crate::remediation::wants_remediation)
                || self
                    .kcp
                    .annotations()
                    .contains_key(kubeadm_api::meta::ETCD_RESTORE_FROM_ANNOTATION))
    }

    /// Keeps this reconcile's view of the workload cluster for later ones (a settled control plane's
    /// resyncs then read nothing), with the addon inputs it applied.
    pub(super) fn keep_view(self, ctx: &Context) {
        let key = self.key();
        let applied = self.addons_applied.get().copied();
        match self.source {
            Source::Read(Some((epoch, mut observation))) => {
                observation.addons = applied;
                ctx.watches.keep(&key, epoch, observation);
            }
            Source::Kept { epoch, addons } => {
                if let Some(applied) = applied.filter(|a| addons != Some(*a)) {
                    ctx.watches.keep_addons(&key, epoch, applied);
                }
            }
            Source::Read(None) | Source::Nothing => {}
        }
    }

    /// (namespace, cluster), the key of per-cluster state kept between reconciles.
    pub(super) fn key(&self) -> (String, String) {
        (self.namespace.clone(), self.cluster_name.clone())
    }
}

/// The etcd membership planner's input: the one place it is built, for every decision that asks.
fn membership_input<'v>(
    view: &'v EtcdView,
    machines: &'v [EtcdMachine],
    now: Timestamp,
    learner_timeout: SignedDuration,
    unstarted_grace: SignedDuration,
) -> etcd_membership::Observed<'v> {
    etcd_membership::Observed {
        members: &view.members,
        states: &view.states,
        machines,
        first_seen: &view.first_seen,
        agreed_leader: view.observation.leader,
        now,
        learner_timeout,
        unstarted_grace,
    }
}

/// Sorted names of the Cluster's failure domains that may hold control-plane machines.
pub(super) fn control_plane_failure_domains(cluster: &Cluster) -> Vec<String> {
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
