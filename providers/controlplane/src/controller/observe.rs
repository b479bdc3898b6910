//! Looking at the workload cluster and its etcd, and judging each machine's health from what was seen.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use kubeadm_api::controlplane::events;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_cluster::CertPem;

use super::etcd::{self, EtcdView, Unobservable};
use super::events::publish;
use super::machines::Gathered;
use super::{Context, workload};
use crate::endpoints::{self, Component, MachinePods};
use crate::machine_conditions::NodeRole;
use crate::machines::Health;

/// What the workload cluster showed.
pub(super) enum Workload {
    Seen {
        /// kubeadm uploaded its configuration: `kubeadm init` has run.
        initialized: bool,
        /// The control-plane static pods, per machine (empty before `kubeadm init`).
        pods: BTreeMap<String, MachinePods>,
        /// kubeadm's role label and taint on the control-plane Nodes, by Node name.
        nodes: Option<BTreeMap<String, NodeRole>>,
    },
    Unreachable(String),
}

impl Workload {
    pub(super) fn initialized(&self) -> bool {
        matches!(
            self,
            Workload::Seen {
                initialized: true,
                ..
            }
        )
    }

    pub(super) fn pods(&self) -> &BTreeMap<String, MachinePods> {
        static NONE: BTreeMap<String, MachinePods> = BTreeMap::new();
        match self {
            Workload::Seen { pods, .. } => pods,
            Workload::Unreachable(_) => &NONE,
        }
    }
}

/// What a reconcile read of an initialized workload cluster, in a form a later reconcile can take again
/// while the cluster's watches vouch for it (see [`super::workload_watches`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Observation {
    /// The machines the pods were mapped to, with their Nodes, sorted.
    machines: Vec<(String, Option<String>)>,
    pods: BTreeMap<String, MachinePods>,
    nodes: BTreeMap<String, NodeRole>,
    /// The addon inputs last applied without error while this observation held (see
    /// [`super::phases`]' addons phase).
    pub addons: Option<u64>,
}

/// Where a reconcile's view of the workload cluster came from.
pub(super) enum Source {
    /// Read now. With the watches' epoch from before the reads, once they have listed: what later
    /// reconciles may take again.
    Read(Option<(u64, Observation)>),
    /// Taken again from an earlier reconcile: the watches have seen nothing new since `epoch`; with the
    /// addon inputs last applied while it held.
    Kept { epoch: u64, addons: Option<u64> },
    /// Nothing to keep: not initialized, unreachable, or read through a single API server.
    Nothing,
}

/// Whether the workload cluster is initialized (kubeadm uploaded its configuration), and each machine's
/// static pods and Node. A leftover `ClusterStatus` in `kubeadm-config` is removed on the way: endpoints
/// come from the static pods (KEP-2506). With `reuse`, an observation the watches vouch for is taken
/// instead of reading; `keep` says whether what is read may be kept for later reconciles (it is read
/// through the cluster's endpoint, as the watches are).
pub(super) async fn workload(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    key: &(String, String),
    client: &Result<kube::Client, String>,
    was_initialized: bool,
    gathered: &Gathered,
    (reuse, keep): (bool, bool),
) -> (Workload, Source) {
    let mut machines: Vec<(String, Option<String>)> = gathered
        .machines
        .iter()
        .map(|m| (m.name.clone(), m.node.clone()))
        .collect();
    machines.sort();
    let seen = async {
        let client = client.as_ref().map_err(|e| e.clone())?;
        if reuse
            && let Some((epoch, kept)) = ctx.watches.vouched(key)
            && kept.machines == machines
        {
            let Observation {
                pods,
                nodes,
                addons,
                ..
            } = kept;
            let seen = Workload::Seen {
                initialized: true,
                pods,
                nodes: Some(nodes),
            };
            return Ok((seen, Source::Kept { epoch, addons }));
        }
        let epoch = ctx.watches.epoch(key).filter(|_| keep);
        let initialized = was_initialized || workload::initialized(client).await.map_err(text)?;
        if !initialized {
            let seen = Workload::Seen {
                initialized,
                pods: BTreeMap::new(),
                nodes: None,
            };
            return Ok((seen, Source::Nothing));
        }
        if workload::remove_cluster_status(client)
            .await
            .map_err(text)?
        {
            let note = "removed the leftover ClusterStatus from kube-system/kubeadm-config; \
                        endpoints come from the static pods";
            publish(ctx, kcp, &events::CLUSTER_STATUS_REMOVED, note).await;
        }
        let pods = workload::machine_pods(client, &gathered.machines)
            .await
            .map_err(text)?;
        let nodes = workload::control_plane_nodes(client).await.map_err(text)?;
        let source = Source::Read(epoch.map(|epoch| {
            let observation = Observation {
                machines,
                pods: pods.clone(),
                nodes: nodes.clone(),
                addons: None,
            };
            (epoch, observation)
        }));
        let seen = Workload::Seen {
            initialized,
            pods,
            nodes: Some(nodes),
        };
        Ok::<_, String>((seen, source))
    }
    .await;
    seen.unwrap_or_else(|cause| {
        tracing::debug!(error = %cause, "workload cluster not reachable");
        (Workload::Unreachable(cause), Source::Nothing)
    })
}

fn text(e: workload::Unreachable) -> String {
    e.to_string()
}

/// Observes etcd through the etcd pods' client URLs (directly, or through port-forwards of the workload
/// API server).
pub(super) async fn etcd(
    ctx: &Context,
    key: (String, String),
    etcd_ca: &CertPem,
    client: &Result<kube::Client, String>,
    gathered: &Gathered,
    pods: &BTreeMap<String, MachinePods>,
    now: Timestamp,
) -> Result<EtcdView, Unobservable> {
    let mut urls: Vec<String> = pods
        .values()
        .flat_map(|p| p.etcd_client_urls.iter().cloned())
        .collect();
    urls.sort();
    urls.dedup();
    let routes = match ctx.settings.etcd_access {
        crate::etcd::EtcdAccess::Direct => BTreeMap::new(),
        crate::etcd::EtcdAccess::PortForward => {
            let client = client
                .as_ref()
                .map_err(|e| Unobservable::new(format!("no port-forward to etcd: {e}")))?;
            let nodes = gathered.machines.iter().filter_map(|m| {
                let pods = pods.get(&m.name)?;
                Some((m.node.as_deref()?, pods.etcd_client_urls.as_slice()))
            });
            let targets = crate::etcd::port_forward::forward_targets(nodes);
            ctx.etcd
                .forwards
                .routes(key.clone(), client, &targets)
                .await
                .map_err(Unobservable::new)?
        }
    };
    let cluster = key.1.clone();
    ctx.etcd
        .observe(key, &cluster, etcd_ca, &urls, routes, now)
        .await
}

/// Each machine's health from what was seen, in one place. Components: the pods' own health, unknown when
/// the workload cluster did not answer. etcd: a problem of the etcd pod comes first; a healthy pod (or none
/// seen yet) defers to its member's health; external etcd is not checked. Machines without a Node are not
/// judged.
pub(super) fn judge_health(
    gathered: &mut Gathered,
    seen: Workload,
    etcd: Option<&Result<EtcdView, Unobservable>>,
    external_etcd: bool,
) {
    let (mut pods, nodes, unreachable) = match seen {
        Workload::Seen { pods, nodes, .. } => (pods, nodes, None),
        Workload::Unreachable(cause) => (
            BTreeMap::new(),
            None,
            Some(format!("workload cluster unreachable: {cause}")),
        ),
    };
    for m in gathered.machines.iter_mut() {
        let member = match (etcd, &m.node) {
            (Some(Ok(view)), Some(_)) => Some(etcd::member_health(m, view)),
            (Some(Err(unobservable)), Some(node)) => {
                let urls = pods
                    .get(&m.name)
                    .map(|p| p.etcd_client_urls.as_slice())
                    .unwrap_or_default();
                Some(unobservable.member_health(node, urls))
            }
            _ => None,
        };
        if let Some(why) = &unreachable {
            if m.node.is_some() {
                let unknown = Health::Unknown(why.clone());
                m.health.components = unknown.clone();
                m.health.etcd = if external_etcd {
                    Health::NotChecked
                } else {
                    unknown
                };
            }
            continue;
        }
        let Some(view) = pods.get_mut(&m.name) else {
            if let Some(member) = member {
                m.health.etcd = member;
            }
            continue;
        };
        m.health.components = endpoints::components_health(view);
        m.health.etcd = if external_etcd {
            Health::NotChecked
        } else {
            let pod = view
                .components
                .get(&Component::Etcd)
                .cloned()
                .unwrap_or_else(|| Health::Unknown("no etcd pod seen".into()));
            match (&member, pod.problem()) {
                (Some(member), None) => member.clone(),
                _ => pod,
            }
        };
        view.member = member;
    }
    gathered.pods = pods;
    gathered.nodes = nodes;
}
