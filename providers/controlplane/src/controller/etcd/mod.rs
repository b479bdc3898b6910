//! The workload cluster's stacked etcd as the controller sees and changes it, one file per job:
//! [`observe`] (one observation of the whole membership per reconcile, through the client URLs kubeadm
//! annotates on the etcd pods, KEP-2506, with a client certificate from the cluster's etcd CA),
//! [`membership`] (the one change the planner asks for), [`defrag`] and [`snapshot`] (maintenance).

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
    pub(super) learner_timeout: SignedDuration,
    pub(super) unstarted_grace: SignedDuration,
}

impl EtcdSessions {
    pub(super) fn new(learner_timeout: SignedDuration, unstarted_grace: SignedDuration) -> Self {
        Self {
            clients: EtcdClients::new(Default::default()),
            forwards: Default::default(),
            certs: Mutex::default(),
            first_seen: Mutex::default(),
            leaders: Mutex::default(),
            rounds: Mutex::default(),
            backup_failures: Mutex::default(),
            learner_timeout,
            unstarted_grace,
        }
    }

    fn backup_failures(&self) -> std::sync::MutexGuard<'_, HashMap<ClusterKey, Timestamp>> {
        self.backup_failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a snapshot of `key` to object storage failed less than `wait` before `now`.
    fn backup_failed_recently(
        &self,
        key: &ClusterKey,
        now: Timestamp,
        wait: SignedDuration,
    ) -> bool {
        self.backup_failures()
            .get(key)
            .is_some_and(|failed| now.duration_since(*failed) < wait)
    }

    fn backup_failed(&self, key: &ClusterKey, now: Timestamp) {
        self.backup_failures().insert(key.clone(), now);
    }

    fn backup_succeeded(&self, key: &ClusterKey) {
        self.backup_failures().remove(key);
    }
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
    let mut record = serde_json::Map::new();
    if let Some(defragmentation) = defragmentation {
        record.insert("lastDefragmentation".into(), json!(defragmentation));
    }
    if let Some(snapshot) = snapshot {
        record.insert("lastSnapshot".into(), json!(snapshot));
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

/// Kubernetes keeps whole seconds; recording them avoids a status that differs from its stored self.
fn whole_seconds(at: Timestamp) -> Time {
    Time(Timestamp::from_second(at.as_second()).unwrap_or(at))
}
