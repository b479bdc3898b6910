//! Watches on each workload cluster's control-plane static pods and Nodes. A mirror pod that appears or
//! turns ready, a Node that registers or gets its control-plane label: each wakes the control plane's
//! reconcile at once, instead of at its next poll. The watches only wake; what a reconcile decides on is
//! still read by the reconcile itself.
//!
//! A cluster's watches are opened by the first reconcile that reaches its API server through the
//! cluster's endpoint, and closed when the control plane goes, when the cluster stops answering (the
//! next reconcile opens them again with a fresh client), or when they fail [`GIVE_UP_AFTER`] times in a
//! row (an expired or replaced kubeconfig, say).

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::channel::mpsc;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::meta::CONTROL_PLANE_NODE_ROLE;

use super::slim_watch::SlimWatch;
use crate::endpoints::CONTROL_PLANE_POD_SELECTOR;

/// Failed watch attempts in a row after which a cluster's watches are closed.
const GIVE_UP_AFTER: u32 = 5;

/// (namespace, cluster).
type ClusterKey = (String, String);

/// The open watches, one task per workload cluster, and the channel their wake-ups go out on.
pub(super) struct WorkloadWatches {
    wake: mpsc::UnboundedSender<ObjectRef<KubeadmControlPlane>>,
    open: Arc<Mutex<HashMap<ClusterKey, Opened>>>,
}

struct Opened {
    /// Tells this task from a later one for the same cluster, when it ends by itself.
    id: u64,
    task: tokio::task::AbortHandle,
}

impl WorkloadWatches {
    /// The watches (none open yet) and the stream of control planes they wake.
    pub(super) fn new() -> (Self, impl Stream<Item = ObjectRef<KubeadmControlPlane>>) {
        let (wake, woken) = mpsc::unbounded();
        let watches = Self {
            wake,
            open: Default::default(),
        };
        (watches, woken)
    }

    /// Opens the watches of `cluster` through `client`, waking `kcp`, unless they are open already.
    pub(super) fn ensure(
        &self,
        cluster: ClusterKey,
        kcp: ObjectRef<KubeadmControlPlane>,
        client: &kube::Client,
    ) {
        let mut open = lock(&self.open);
        if open.contains_key(&cluster) {
            return;
        }
        static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let registry = Arc::clone(&self.open);
        let key = cluster.clone();
        let events = cluster_events(client);
        let wake = self.wake.clone();
        let task = tokio::spawn(async move {
            let why = forward(events, &kcp, &wake).await;
            tracing::debug!(
                namespace = key.0,
                cluster = key.1,
                why,
                "workload watches closed"
            );
            let mut open = lock(&registry);
            if open.get(&key).is_some_and(|opened| opened.id == id) {
                open.remove(&key);
            }
        });
        tracing::debug!(
            namespace = cluster.0,
            cluster = cluster.1,
            "workload watches opened"
        );
        open.insert(
            cluster,
            Opened {
                id,
                task: task.abort_handle(),
            },
        );
    }

    /// Closes the watches of `cluster` (gone, or no longer answering through this client).
    pub(super) fn close(&self, cluster: &ClusterKey) {
        if let Some(opened) = lock(&self.open).remove(cluster) {
            opened.task.abort();
        }
    }

    #[cfg(test)]
    fn is_open(&self, cluster: &ClusterKey) -> bool {
        lock(&self.open).contains_key(cluster)
    }
}

impl Drop for WorkloadWatches {
    fn drop(&mut self) {
        for (_, opened) in lock(&self.open).drain() {
            opened.task.abort();
        }
    }
}

fn lock(open: &Mutex<HashMap<ClusterKey, Opened>>) -> MutexGuard<'_, HashMap<ClusterKey, Opened>> {
    open.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a watch saw of one object: enough to tell whether a reconcile would see something new.
#[derive(Debug, PartialEq)]
pub(super) enum Seen {
    /// The object, by kind and name, with a digest of what the controller reads from it.
    Present(String, u64),
    Gone(String),
    /// A (re)list starts: objects not seen again before [`Seen::Listed`] are gone.
    Listing,
    Listed,
}

/// The control-plane static pods and Nodes of the cluster behind `client`, as [`Seen`] events.
fn cluster_events(
    client: &kube::Client,
) -> impl Stream<Item = Result<Seen, kube::Error>> + Send + use<> {
    let pods = SlimWatch::new(
        client.clone(),
        Api::<Pod>::namespaced(client.clone(), "kube-system").resource_url(),
        CONTROL_PLANE_POD_SELECTOR,
        "pod",
        pod_digest,
    );
    let nodes = SlimWatch::new(
        client.clone(),
        Api::<Node>::all(client.clone()).resource_url(),
        CONTROL_PLANE_NODE_ROLE,
        "node",
        node_digest,
    );
    futures::stream::select(pods.events(), nodes.events())
}

/// Wakes `kcp` whenever the watched objects change in a way a reconcile would see, until the watches
/// fail [`GIVE_UP_AFTER`] times in a row or nobody listens any more; returns why it stopped.
async fn forward(
    events: impl Stream<Item = Result<Seen, kube::Error>>,
    kcp: &ObjectRef<KubeadmControlPlane>,
    wake: &mpsc::UnboundedSender<ObjectRef<KubeadmControlPlane>>,
) -> &'static str {
    let mut known = Known::default();
    let mut failures = 0;
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                failures = 0;
                if known.changed_by(event) && wake.unbounded_send(kcp.clone()).is_err() {
                    return "the controller stopped";
                }
            }
            Err(e) => {
                failures += 1;
                tracing::debug!(kcp = %kcp, error = %e, failures, "workload watch failed");
                if failures >= GIVE_UP_AFTER {
                    return "failed too often";
                }
            }
        }
    }
    "the watches ended"
}

/// The digests last seen per object, to wake only on a change (a resync or a status write that leaves
/// everything the controller reads alone wakes nothing).
#[derive(Default)]
struct Known {
    objects: HashMap<String, u64>,
    /// Objects seen during a (re)list, once one has started.
    listing: Option<HashMap<String, u64>>,
    /// Whether a first list was complete: the reconcile that opened the watches has seen that state.
    listed_once: bool,
}

impl Known {
    /// Takes in one event; true when a reconcile should look again.
    fn changed_by(&mut self, event: Seen) -> bool {
        match event {
            Seen::Listing => {
                self.listing = Some(HashMap::new());
                false
            }
            Seen::Present(name, digest) => {
                if let Some(listing) = &mut self.listing {
                    listing.insert(name, digest);
                    return false;
                }
                self.objects.insert(name, digest) != Some(digest)
            }
            Seen::Gone(name) => self.objects.remove(&name).is_some(),
            Seen::Listed => {
                let listed = self.listing.take().unwrap_or_default();
                let changed = self.listed_once && listed != self.objects;
                self.objects = listed;
                self.listed_once = true;
                changed
            }
        }
    }
}

/// What the controller reads from a static pod: its annotations (owner, generation, endpoints), phase,
/// conditions, container states, and whether it is being deleted.
fn pod_digest(pod: &Pod) -> u64 {
    let mut hasher = DefaultHasher::new();
    let mut annotations: Vec<_> = pod.annotations().iter().collect();
    annotations.sort();
    annotations.hash(&mut hasher);
    pod.metadata.deletion_timestamp.is_some().hash(&mut hasher);
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .hash(&mut hasher);
    if let Some(status) = &pod.status {
        status.phase.hash(&mut hasher);
        for condition in status.conditions.iter().flatten() {
            (&condition.type_, &condition.status).hash(&mut hasher);
        }
        for container in status.container_statuses.iter().flatten() {
            (container.ready, container.restart_count).hash(&mut hasher);
            let state = container.state.as_ref();
            (
                state.is_some_and(|s| s.running.is_some()),
                state.is_some_and(|s| s.waiting.is_some()),
                state.is_some_and(|s| s.terminated.is_some()),
            )
                .hash(&mut hasher);
        }
    }
    hasher.finish()
}

/// What the controller reads from a Node: its labels, taints and Ready condition.
fn node_digest(node: &Node) -> u64 {
    let mut hasher = DefaultHasher::new();
    let mut labels: Vec<_> = node.labels().iter().collect();
    labels.sort();
    labels.hash(&mut hasher);
    if let Some(spec) = &node.spec {
        for taint in spec.taints.iter().flatten() {
            (&taint.key, &taint.value, &taint.effect).hash(&mut hasher);
        }
    }
    for condition in node
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
    {
        if condition.type_ == "Ready" {
            condition.status.hash(&mut hasher);
        }
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn present(name: &str, digest: u64) -> Seen {
        Seen::Present(name.into(), digest)
    }

    #[test]
    fn the_first_list_wakes_nothing_later_changes_do() {
        let mut known = Known::default();
        assert!(!known.changed_by(Seen::Listing));
        assert!(!known.changed_by(present("pod/etcd-a", 1)));
        assert!(!known.changed_by(Seen::Listed));
        // The same state again (a resync) wakes nothing; a change, an arrival and a departure do.
        assert!(!known.changed_by(present("pod/etcd-a", 1)));
        assert!(known.changed_by(present("pod/etcd-a", 2)));
        assert!(known.changed_by(present("node/b", 7)));
        assert!(!known.changed_by(present("node/b", 7)));
        assert!(known.changed_by(Seen::Gone("node/b".into())));
        assert!(!known.changed_by(Seen::Gone("node/b".into())));
    }

    #[test]
    fn a_relist_wakes_only_when_it_differs() {
        let mut known = Known::default();
        for event in [Seen::Listing, present("pod/a", 1), Seen::Listed] {
            known.changed_by(event);
        }
        for event in [Seen::Listing, present("pod/a", 1)] {
            assert!(!known.changed_by(event));
        }
        assert!(!known.changed_by(Seen::Listed), "same objects");
        for event in [Seen::Listing, present("pod/a", 1), present("pod/b", 1)] {
            assert!(!known.changed_by(event));
        }
        assert!(
            known.changed_by(Seen::Listed),
            "pod/b arrived while unwatched"
        );
        for event in [Seen::Listing, present("pod/b", 1)] {
            assert!(!known.changed_by(event));
        }
        assert!(known.changed_by(Seen::Listed), "pod/a left while unwatched");
    }

    #[test]
    fn a_pod_that_turns_ready_or_is_deleted_has_a_new_digest() {
        use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
        let mut pod = Pod::default();
        pod.metadata.name = Some("kube-apiserver-a".into());
        let starting = pod_digest(&pod);
        pod.status = Some(PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let ready = pod_digest(&pod);
        assert_ne!(starting, ready);
        pod.metadata.resource_version = Some("2".into());
        assert_eq!(
            ready,
            pod_digest(&pod),
            "a new resourceVersion alone is no news"
        );
        pod.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_ne!(ready, pod_digest(&pod));
    }

    #[tokio::test]
    async fn wakes_go_out_until_the_watches_fail_too_often() {
        let (tx, mut woken) = mpsc::unbounded();
        let kcp = ObjectRef::<KubeadmControlPlane>::new("cp").within("ns");
        let failure = || {
            Err(kube::Error::ReadEvents(
                std::io::ErrorKind::ConnectionReset.into(),
            ))
        };
        let events = futures::stream::iter(
            [
                Ok(Seen::Listing),
                Ok(Seen::Listed),
                Ok(present("pod/a", 1)),
                failure(),
                Ok(present("pod/a", 2)),
            ]
            .into_iter()
            .chain(std::iter::repeat_with(failure).take(GIVE_UP_AFTER as usize))
            .chain([Ok(present("pod/a", 3))]),
        );
        assert_eq!(forward(events, &kcp, &tx).await, "failed too often");
        drop(tx);
        let wakes: Vec<_> = woken.by_ref().collect().await;
        assert_eq!(wakes, vec![kcp.clone(), kcp]);
    }

    #[tokio::test]
    async fn closing_forgets_the_cluster() {
        let (watches, _woken) = WorkloadWatches::new();
        let key = ("ns".to_owned(), "c".to_owned());
        let config = kube::Config::new("https://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let kcp = ObjectRef::new("cp").within("ns");
        watches.ensure(key.clone(), kcp, &client);
        assert!(watches.is_open(&key));
        watches.close(&key);
        assert!(!watches.is_open(&key));
    }
}
