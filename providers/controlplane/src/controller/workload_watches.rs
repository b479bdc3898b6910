//! Watches on each workload cluster's control-plane static pods and Nodes. A mirror pod that appears or
//! turns ready, a Node that registers or gets its control-plane label: each wakes the control plane's
//! reconcile at once, instead of at its next poll.
//!
//! The watches also vouch for what a reconcile read: each cluster's watches keep an epoch, renewed
//! whenever they see a change a reconcile would read differently. An observation read live while the
//! epoch stayed the same is still what a live read would show, and a later reconcile takes it instead
//! of reading again ([`WorkloadWatches::vouched`]): a settled cluster costs no workload call. A failure
//! withdraws the epoch until the watches list again or see a change: a list compares against what was
//! known before the failure, and would miss a change that came and went while a reconcile read.
//!
//! A cluster's watches are opened by the first reconcile that reaches its API server through the
//! cluster's endpoint, and closed when the control plane goes, when the cluster stops answering (the
//! next reconcile opens them again with a fresh client), or when they fail [`GIVE_UP_AFTER`] times in a
//! row (an expired or replaced kubeconfig, say).

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::channel::mpsc;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::meta::CONTROL_PLANE_NODE_ROLE;

use super::observe::Observation;
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
    /// 0 until both watches have listed, and after a failure until they list again or see a change;
    /// else a new value whenever they see a change.
    epoch: Arc<AtomicU64>,
    /// The last observation read live while the epoch was the one kept with it.
    kept: Option<(u64, Observation)>,
}

/// Epochs are drawn from one counter, so that a cluster's watches opened again never repeat one.
static EPOCHS: AtomicU64 = AtomicU64::new(1);

/// A new epoch once the watches have listed, else 0 (nothing to vouch for yet).
fn renew(epoch: &AtomicU64, known: &Known) {
    let next = if known.complete() {
        EPOCHS.fetch_add(1, Ordering::Relaxed)
    } else {
        0
    };
    epoch.store(next, Ordering::Release);
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
        let epoch = Arc::new(AtomicU64::new(0));
        let renewed = Arc::clone(&epoch);
        let task = tokio::spawn(async move {
            let why = forward(events, &kcp, &wake, &renewed).await;
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
                epoch,
                kept: None,
            },
        );
    }

    /// The epoch of `cluster`'s watches: `None` unless they are open and have listed. Read it before
    /// reading the workload cluster, to [`keep`](Self::keep) what was read.
    pub(super) fn epoch(&self, cluster: &ClusterKey) -> Option<u64> {
        let open = lock(&self.open);
        let epoch = open.get(cluster)?.epoch.load(Ordering::Acquire);
        (epoch != 0).then_some(epoch)
    }

    /// Keeps `observation`, read live after the watches' epoch was `epoch`, for later reconciles.
    pub(super) fn keep(&self, cluster: &ClusterKey, epoch: u64, observation: Observation) {
        if let Some(opened) = lock(&self.open).get_mut(cluster) {
            opened.kept = Some((epoch, observation));
        }
    }

    /// Records the addon inputs applied while the observation kept at `epoch` held (none when another
    /// was kept since).
    pub(super) fn keep_addons(&self, cluster: &ClusterKey, epoch: u64, addons: u64) {
        if let Some(opened) = lock(&self.open).get_mut(cluster)
            && let Some((kept_epoch, observation)) = opened.kept.as_mut()
            && *kept_epoch == epoch
        {
            observation.addons = Some(addons);
        }
    }

    /// Forgets the kept observation of `cluster`: the control plane has something to do, and until it
    /// settles again each reconcile reads afresh.
    pub(super) fn discard(&self, cluster: &ClusterKey) {
        if let Some(opened) = lock(&self.open).get_mut(cluster) {
            opened.kept = None;
        }
    }

    /// The kept observation of `cluster` and its epoch, if the watches have seen nothing new since it
    /// was read.
    pub(super) fn vouched(&self, cluster: &ClusterKey) -> Option<(u64, Observation)> {
        let open = lock(&self.open);
        let opened = open.get(cluster)?;
        let (epoch, observation) = opened.kept.as_ref()?;
        (*epoch == opened.epoch.load(Ordering::Acquire)).then(|| (*epoch, observation.clone()))
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
    /// A (re)list of one kind starts: its objects not seen again before [`Seen::Listed`] are gone.
    Listing(&'static str),
    Listed(&'static str),
}

/// The kinds a cluster's watches list, each named as in [`Seen::Present`] (`kind/name`).
const KINDS: [&str; 2] = ["pod", "node"];

/// The control-plane static pods and Nodes of the cluster behind `client`, as [`Seen`] events.
fn cluster_events(
    client: &kube::Client,
) -> impl Stream<Item = Result<Seen, kube::Error>> + Send + use<> {
    let pods = SlimWatch::new(
        client.clone(),
        Api::<Pod>::namespaced(client.clone(), "kube-system").resource_url(),
        CONTROL_PLANE_POD_SELECTOR,
        KINDS[0],
        pod_digest,
    );
    let nodes = SlimWatch::new(
        client.clone(),
        Api::<Node>::all(client.clone()).resource_url(),
        CONTROL_PLANE_NODE_ROLE,
        KINDS[1],
        node_digest,
    );
    futures::stream::select(pods.events(), nodes.events())
}

/// Wakes `kcp` whenever the watched objects change in a way a reconcile would see, until the watches
/// fail [`GIVE_UP_AFTER`] times in a row or nobody listens any more; returns why it stopped. The
/// `epoch` is renewed before each wake and by a list that completes while it is 0 (the first, or the
/// first after a failure, which sets it to 0).
async fn forward(
    events: impl Stream<Item = Result<Seen, kube::Error>>,
    kcp: &ObjectRef<KubeadmControlPlane>,
    wake: &mpsc::UnboundedSender<ObjectRef<KubeadmControlPlane>>,
    epoch: &AtomicU64,
) -> &'static str {
    let mut known = Known::default();
    let mut failures = 0;
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                failures = 0;
                let listed = matches!(event, Seen::Listed(_));
                let changed = known.changed_by(event);
                if changed || (listed && epoch.load(Ordering::Acquire) == 0) {
                    renew(epoch, &known);
                }
                if changed && wake.unbounded_send(kcp.clone()).is_err() {
                    return "the controller stopped";
                }
            }
            Err(e) => {
                epoch.store(0, Ordering::Release);
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
    /// By `kind/name`.
    objects: HashMap<String, u64>,
    /// Per kind, the objects seen during its (re)list, while one runs.
    listing: HashMap<&'static str, HashMap<String, u64>>,
    /// The kinds whose first list was complete: the reconcile that opened the watches has seen that
    /// state.
    listed: HashSet<&'static str>,
}

impl Known {
    /// Takes in one event; true when a reconcile should look again.
    fn changed_by(&mut self, event: Seen) -> bool {
        match event {
            Seen::Listing(kind) => {
                self.listing.insert(kind, HashMap::new());
                false
            }
            Seen::Present(name, digest) => {
                if let Some(listing) = self.listing.get_mut(kind_of(&name)) {
                    listing.insert(name, digest);
                    return false;
                }
                self.objects.insert(name, digest) != Some(digest)
            }
            Seen::Gone(name) => self.objects.remove(&name).is_some(),
            Seen::Listed(kind) => {
                let listed = self.listing.remove(kind).unwrap_or_default();
                let before: HashMap<String, u64> = self
                    .objects
                    .extract_if(|name, _| kind_of(name) == kind)
                    .collect();
                let first = self.listed.insert(kind);
                let changed = !first && listed != before;
                self.objects.extend(listed);
                changed
            }
        }
    }

    /// Every kind has been listed once.
    fn complete(&self) -> bool {
        KINDS.iter().all(|kind| self.listed.contains(kind))
    }
}

fn kind_of(name: &str) -> &str {
    name.split_once('/').map_or(name, |(kind, _)| kind)
}

/// What the controller reads from a static pod: its labels (component), annotations (owner,
/// generation, endpoints), Node, phase, conditions, container states and why one waits, and whether it
/// is being deleted.
fn pod_digest(pod: &Pod) -> u64 {
    let mut hasher = DefaultHasher::new();
    let mut labels: Vec<_> = pod.labels().iter().collect();
    labels.sort();
    labels.hash(&mut hasher);
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
                state
                    .and_then(|s| s.waiting.as_ref())
                    .and_then(|w| w.reason.as_ref()),
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
        assert!(!known.changed_by(Seen::Listing("pod")));
        assert!(!known.changed_by(present("pod/etcd-a", 1)));
        assert!(!known.changed_by(Seen::Listed("pod")));
        assert!(!known.complete(), "the Nodes are not listed yet");
        for event in [Seen::Listing("node"), Seen::Listed("node")] {
            assert!(!known.changed_by(event));
        }
        assert!(known.complete());
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
        for event in [
            Seen::Listing("pod"),
            present("pod/a", 1),
            Seen::Listed("pod"),
        ] {
            known.changed_by(event);
        }
        for event in [Seen::Listing("pod"), present("pod/a", 1)] {
            assert!(!known.changed_by(event));
        }
        assert!(!known.changed_by(Seen::Listed("pod")), "same objects");
        for event in [
            Seen::Listing("pod"),
            present("pod/a", 1),
            present("pod/b", 1),
        ] {
            assert!(!known.changed_by(event));
        }
        assert!(
            known.changed_by(Seen::Listed("pod")),
            "pod/b arrived while unwatched"
        );
        for event in [Seen::Listing("pod"), present("pod/b", 1)] {
            assert!(!known.changed_by(event));
        }
        assert!(
            known.changed_by(Seen::Listed("pod")),
            "pod/a left while unwatched"
        );
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
                Ok(Seen::Listing("pod")),
                Ok(Seen::Listed("pod")),
                Ok(present("pod/a", 1)),
                failure(),
                Ok(present("pod/a", 2)),
            ]
            .into_iter()
            .chain(std::iter::repeat_with(failure).take(GIVE_UP_AFTER as usize))
            .chain([Ok(present("pod/a", 3))]),
        );
        let epoch = AtomicU64::new(0);
        assert_eq!(forward(events, &kcp, &tx, &epoch).await, "failed too often");
        drop(tx);
        let wakes: Vec<_> = woken.by_ref().collect().await;
        assert_eq!(wakes, vec![kcp.clone(), kcp]);
        assert_eq!(
            epoch.load(Ordering::Acquire),
            0,
            "the Nodes were never listed"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_epoch_moves_with_every_change_and_a_failure_withdraws_it_until_a_list() {
        let (events, stream) = mpsc::unbounded();
        let (wake, mut woken) = mpsc::unbounded();
        let epoch = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn({
            let epoch = Arc::clone(&epoch);
            async move {
                let kcp = ObjectRef::<KubeadmControlPlane>::new("cp").within("ns");
                forward(stream, &kcp, &wake, &epoch).await
            }
        });
        let step = async |event: Result<Seen, kube::Error>| {
            events.unbounded_send(event).unwrap();
            tokio::task::yield_now().await;
            epoch.load(Ordering::Acquire)
        };
        // The two lists interleave; neither loses the other's objects.
        assert_eq!(step(Ok(Seen::Listing("pod"))).await, 0);
        assert_eq!(step(Ok(Seen::Listing("node"))).await, 0);
        assert_eq!(step(Ok(present("pod/etcd-a", 1))).await, 0);
        assert_eq!(step(Ok(present("node/a", 1))).await, 0);
        assert_eq!(step(Ok(Seen::Listed("pod"))).await, 0);
        let listed = step(Ok(Seen::Listed("node"))).await;
        assert_ne!(listed, 0, "both kinds listed");
        assert!(woken.try_recv().is_err(), "the first lists wake nothing");
        // A relist of the pods that finds them as they were: same epoch, no wake.
        for event in [Seen::Listing("pod"), present("pod/etcd-a", 1)] {
            assert_eq!(step(Ok(event)).await, listed);
        }
        assert_eq!(step(Ok(Seen::Listed("pod"))).await, listed);
        assert_eq!(step(Ok(present("node/a", 1))).await, listed, "no news");
        let changed = step(Ok(present("pod/etcd-a", 2))).await;
        assert_ne!(changed, listed);
        assert!(woken.try_recv().is_ok(), "a change wakes");
        let failed = step(Err(kube::Error::ReadEvents(
            std::io::ErrorKind::ConnectionReset.into(),
        )))
        .await;
        assert_eq!(failed, 0, "a failure may hide a change");
        assert!(woken.try_recv().is_err(), "a failure alone wakes nothing");
        // The Nodes list again as they were: what was read meanwhile may have been a passing state.
        for event in [Seen::Listing("node"), present("node/a", 1)] {
            assert_eq!(step(Ok(event)).await, 0);
        }
        let relisted = step(Ok(Seen::Listed("node"))).await;
        assert!(relisted != 0 && relisted != changed);
        assert!(woken.try_recv().is_err(), "nothing changed");
        // While the epoch holds, a list that finds nothing new keeps it.
        for event in [
            Seen::Listing("pod"),
            present("pod/etcd-a", 2),
            Seen::Listed("pod"),
        ] {
            assert_eq!(step(Ok(event)).await, relisted);
        }
        task.abort();
    }

    #[tokio::test]
    async fn a_kept_observation_is_vouched_for_until_the_epoch_moves() {
        let (watches, _woken) = WorkloadWatches::new();
        let key = ("ns".to_owned(), "c".to_owned());
        let config = kube::Config::new("https://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        watches.ensure(key.clone(), ObjectRef::new("cp").within("ns"), &client);
        let epoch = {
            let open = lock(&watches.open);
            let opened = &open[&key];
            // Nothing answers there; the epoch is driven by hand from here on.
            opened.task.abort();
            Arc::clone(&opened.epoch)
        };
        assert_eq!(watches.epoch(&key), None, "not listed yet");
        epoch.store(7, Ordering::Release);
        assert_eq!(watches.epoch(&key), Some(7));
        assert!(watches.vouched(&key).is_none(), "nothing kept yet");
        let observation = Observation::default();
        watches.keep(&key, 7, observation.clone());
        assert_eq!(watches.vouched(&key), Some((7, observation.clone())));
        epoch.store(8, Ordering::Release);
        assert!(watches.vouched(&key).is_none(), "the watches saw something");
        watches.keep(&key, 7, observation.clone());
        assert!(
            watches.vouched(&key).is_none(),
            "read before the change was seen"
        );
        watches.keep(&key, 8, observation);
        assert!(watches.vouched(&key).is_some());
        watches.keep_addons(&key, 7, 42);
        assert_eq!(
            watches.vouched(&key).unwrap().1.addons,
            None,
            "applied while an older observation held"
        );
        watches.keep_addons(&key, 8, 42);
        assert_eq!(watches.vouched(&key).unwrap().1.addons, Some(42));
        watches.discard(&key);
        assert!(watches.vouched(&key).is_none());
        watches.close(&key);
        assert_eq!(watches.epoch(&key), None);
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
