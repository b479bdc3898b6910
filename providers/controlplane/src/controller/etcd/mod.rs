//! The workload cluster's stacked etcd as the controller sees and changes it, one file per job:
//! [`observe`] (one observation of the whole membership per reconcile, through the client URLs kubeadm
//! annotates on the etcd pods, KEP-2506, with a client certificate from the cluster's etcd CA),
//! [`membership`] (the one change the planner asks for), [`defrag`] and [`snapshot`] (maintenance).

mod background;
pub(super) mod backup;
mod defrag;
mod membership;
mod observe;
mod snapshot;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch};
use kubeadm_api::controlplane::v1beta2::{
    EtcdDefragmentationStatus, EtcdSnapshotStatus, KubeadmControlPlane,
};
use serde_json::json;

use futures::Stream;
use kube::runtime::reflector::ObjectRef;

pub(super) use defrag::{Maintained, maintain};
pub(super) use membership::execute;
pub(super) use observe::{EtcdView, Unobservable, alarms, member_health, planner_machines};

use super::{Context, Error};
use crate::etcd::{EtcdClientCert, EtcdClients};
use crate::etcd_maintenance;

type ClusterKey = (String, String);

/// Connections, client certificates and learner timers, per workload cluster.
pub(super) struct EtcdSessions {
    clients: EtcdClients,
    /// Port-forward listeners, when etcd is reached through the workload API server.
    pub(super) forwards: crate::etcd::PortForwards,
    certs: Mutex<HashMap<ClusterKey, Arc<EtcdClientCert>>>,
    first_seen: Mutex<HashMap<ClusterKey, BTreeMap<u64, Timestamp>>>,
    /// The client URL of the leader each cluster's last observation found, asked first next time: a
    /// member that was removed or whose machine went may not answer at all until a dial times out.
    leaders: Mutex<HashMap<ClusterKey, String>>,
    /// Defragmentation rounds in progress.
    rounds: Mutex<HashMap<ClusterKey, etcd_maintenance::Round>>,
    /// When each cluster's last snapshot to object storage failed, until one succeeds.
    backup_failures: Mutex<HashMap<ClusterKey, Timestamp>>,
    /// Why each cluster's last due snapshot was not kept, until one is.
    snapshot_refusals: Mutex<HashMap<ClusterKey, defrag::Refusal>>,
    /// Snapshots streaming into object storage, and those finished but not yet recorded.
    uploads: background::Background<backup::Upload>,
    pub(super) learner_timeout: SignedDuration,
    pub(super) unstarted_grace: SignedDuration,
}

impl EtcdSessions {
    /// The sessions (none open yet) and the stream of control planes whose snapshot upload ended.
    pub(super) fn new(
        learner_timeout: SignedDuration,
        unstarted_grace: SignedDuration,
    ) -> (Self, impl Stream<Item = ObjectRef<KubeadmControlPlane>>) {
        let (uploads, uploaded) = background::Background::new();
        let sessions = Self {
            clients: EtcdClients::new(Default::default()),
            forwards: Default::default(),
            certs: Mutex::default(),
            first_seen: Mutex::default(),
            leaders: Mutex::default(),
            rounds: Mutex::default(),
            backup_failures: Mutex::default(),
            snapshot_refusals: Mutex::default(),
            uploads,
            learner_timeout,
            unstarted_grace,
        };
        (sessions, uploaded)
    }

    /// Forgets the maintenance of a cluster that is going: a running upload is stopped.
    pub(super) fn forget(&self, key: &ClusterKey) {
        self.uploads.forget(key);
        lock(&self.rounds).remove(key);
        lock(&self.backup_failures).remove(key);
        lock(&self.snapshot_refusals).remove(key);
    }

    /// Whether a snapshot of `key` to object storage failed less than `wait` before `now`.
    fn backup_failed_recently(
        &self,
        key: &ClusterKey,
        now: Timestamp,
        wait: SignedDuration,
    ) -> bool {
        lock(&self.backup_failures)
            .get(key)
            .is_some_and(|failed| now.duration_since(*failed) < wait)
    }

    fn backup_failed(&self, key: &ClusterKey, now: Timestamp) {
        lock(&self.backup_failures).insert(key.clone(), now);
    }

    fn backup_succeeded(&self, key: &ClusterKey) {
        lock(&self.backup_failures).remove(key);
    }

    /// Records how the last due snapshot of `key` went: kept (`None`) or refused.
    pub(super) fn snapshot_outcome(&self, key: &ClusterKey, refused: Option<&defrag::Refusal>) {
        let mut refusals = lock(&self.snapshot_refusals);
        match refused {
            Some(refusal) => refusals.insert(key.clone(), refusal.clone()),
            None => refusals.remove(key),
        };
    }

    /// Why the last due snapshot of `key` was refused, when it was.
    pub(super) fn snapshot_refused(&self, key: &ClusterKey) -> Option<defrag::Refusal> {
        lock(&self.snapshot_refusals).get(key).cloned()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Records a finished defragmentation round or snapshot in `status.etcd` with a merge patch of its own:
/// the status the reconcile applies leaves `etcd` out, so a stale copy can never overwrite a newer record.
pub(super) async fn record_maintenance(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    defragmentation: Option<EtcdDefragmentationStatus>,
    snapshot: Option<EtcdSnapshotStatus>,
) -> Result<(), Error> {
    use kube::ResourceExt;
    let before = kcp.status.as_ref().and_then(|s| s.etcd.as_ref());
    let mut record = serde_json::Map::new();
    if let Some(defragmentation) = defragmentation {
        let old = before.and_then(|e| e.last_defragmentation.as_ref());
        record.insert(
            "lastDefragmentation".into(),
            replacing(json!(defragmentation), old.map(|o| json!(o))),
        );
    }
    if let Some(snapshot) = snapshot {
        let old = before.and_then(|e| e.last_snapshot.as_ref());
        record.insert(
            "lastSnapshot".into(),
            replacing(json!(snapshot), old.map(|o| json!(o))),
        );
    }
    if record.is_empty() {
        return Ok(());
    }
    let kcps = Api::<KubeadmControlPlane>::namespaced(
        ctx.client.clone(),
        &kcp.namespace().unwrap_or_default(),
    );
    let patch = json!({ "status": { "etcd": record } });
    kcps.patch_status(
        &kcp.name_any(),
        &crate::controller::merge_params(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// A merge patch value that replaces the record `old` with `new` whole: a field `new` leaves out (an
/// empty list, a size not known) is set to null, not kept from the record before.
fn replacing(new: serde_json::Value, old: Option<serde_json::Value>) -> serde_json::Value {
    let (serde_json::Value::Object(mut new), Some(serde_json::Value::Object(old))) =
        (new.clone(), old)
    else {
        return new;
    };
    for key in old.keys() {
        new.entry(key.clone()).or_insert(serde_json::Value::Null);
    }
    serde_json::Value::Object(new)
}

/// Kubernetes keeps whole seconds; recording them avoids a status that differs from its stored self.
fn whole_seconds(at: Timestamp) -> Time {
    Time(Timestamp::from_second(at.as_second()).unwrap_or(at))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_record_replaces_the_one_before_whole() {
        let old =
            json!({ "time": "t1", "members": ["a", "b"], "dbSizeBefore": 10, "dbSizeAfter": 5 });
        let new = json!({ "time": "t2", "dbSizeBefore": 7, "dbSizeAfter": 7 });
        assert_eq!(
            super::replacing(new.clone(), Some(old)),
            json!({ "time": "t2", "members": null, "dbSizeBefore": 7, "dbSizeAfter": 7 })
        );
        assert_eq!(super::replacing(new.clone(), None), new);
    }
}
