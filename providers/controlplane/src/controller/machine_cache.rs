//! Watch-fed copies of the control-plane Machines and KubeadmConfigs a reconcile reads, in place of a
//! live list and one read per machine.
//!
//! A copy may lag behind the API server; acting on a lagging list could create a machine twice or delete
//! a second one. So, as Cluster API's own provider does, every creation and deletion of a Machine waits
//! (briefly) until the copy shows it; should the copy not catch up in time, the namespace's next looks
//! are live for a while. A new leader starts from a fresh list, so a leader change cannot act on another
//! manager's stale view. A KubeadmConfig the copy lacks is read live.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::channel::mpsc;
use futures::{FutureExt, Stream, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use kubeadm_api::bootstrap::v1beta2::KubeadmConfig;
use kubeadm_api::cluster::v1beta2::Machine;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::meta::{CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, CONTROL_PLANE_NAME_LABEL};

use super::grouped::Grouped;

/// How long a creation or deletion waits for the copy to show it.
const CATCH_UP: Duration = Duration::from_secs(10);
/// How long a namespace is read live after the copy did not catch up in time.
const LIVE_FOR: Duration = Duration::from_secs(60);
/// How long a reconcile waits for the first list before it reads live.
const FIRST_LIST: Duration = Duration::from_secs(30);

pub(super) struct MachineCache {
    /// By cluster name.
    machines: Grouped<Machine>,
    /// By control-plane name.
    configs: Grouped<KubeadmConfig>,
    /// The infrastructure machines, one copy per kind, opened the first time a kind is read.
    infrastructure: Mutex<HashMap<(String, String), InfrastructureCopy>>,
    client: kube::Client,
    namespace: String,
    /// Wakes the control plane of a machine whose infrastructure machine is gone.
    wake: mpsc::UnboundedSender<ObjectRef<KubeadmControlPlane>>,
    /// Namespaces read live until the given time.
    live_until: Mutex<HashMap<String, Instant>>,
}

/// The copy of one infrastructure machine kind and the task feeding it (stopped with the cache).
struct InfrastructureCopy {
    /// By control-plane name.
    copy: Arc<Grouped<DynamicObject>>,
    feed: tokio::task::AbortHandle,
}

impl Drop for MachineCache {
    fn drop(&mut self) {
        for copy in self
            .infrastructure
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            copy.feed.abort();
        }
    }
}

/// What a Machine write waits to see in the copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Seen {
    /// The Machine exists.
    Created,
    /// The Machine is being deleted, or gone.
    Deleting,
}

impl Seen {
    fn holds(self, machine: Option<&Machine>) -> bool {
        match self {
            Seen::Created => machine.is_some(),
            Seen::Deleting => machine.is_none_or(|m| m.meta().deletion_timestamp.is_some()),
        }
    }
}

impl MachineCache {
    /// The copies, empty until listed; returns the Machine events (which wake the owning control
    /// planes) and the future feeding the KubeadmConfig copy, to be polled for as long as the copies are
    /// used. The deletion of an infrastructure machine wakes its Machine's control plane through `wake`:
    /// once it is gone, a leaving machine no longer holds the next step (see
    /// [`ControlPlaneMachine::only_cleanup_left`](crate::machines::ControlPlaneMachine::only_cleanup_left)).
    pub(super) fn new(
        client: &kube::Client,
        namespace: &str,
        wake: mpsc::UnboundedSender<ObjectRef<KubeadmControlPlane>>,
    ) -> (
        Self,
        impl Stream<Item = Result<Machine, watcher::Error>> + Send + use<>,
        impl Future<Output = ()> + Send + use<>,
    ) {
        // Every control-plane Machine, whatever the watch filter: a copy missing some would look like a
        // control plane short of machines.
        let (machines, machine_events) = Grouped::new(
            CLUSTER_NAME_LABEL,
            reflector::store::Writer::default(),
            watch(kubeadm_runtime::watching::scoped_api(client, namespace)),
        );
        let machine_events = machine_events.touched_objects();
        let (configs, config_events) = Grouped::new(
            CONTROL_PLANE_NAME_LABEL,
            reflector::store::Writer::default(),
            watch(kubeadm_runtime::watching::scoped_api(client, namespace)),
        );
        let configs_feed = config_events.for_each(|event| async move {
            if let Err(e) = event {
                tracing::debug!(error = %e, "KubeadmConfigs watch failed; retrying");
            }
        });
        let cache = Self {
            machines,
            configs,
            infrastructure: Mutex::default(),
            client: client.clone(),
            namespace: namespace.to_owned(),
            wake,
            live_until: Mutex::default(),
        };
        (cache, machine_events, configs_feed)
    }

    /// The control-plane Machines of `cluster` from the copy, or `None` where they are to be read live
    /// (the copy is not listed yet, or lagged behind a write of ours a moment ago).
    pub(super) async fn machines_of(&self, namespace: &str, cluster: &str) -> Option<Vec<Machine>> {
        if self.read_live(namespace) {
            return None;
        }
        if tokio::time::timeout(FIRST_LIST, self.machines.store().wait_until_ready())
            .await
            .ok()?
            .is_err()
        {
            return None;
        }
        let mut machines: Vec<Machine> = self
            .machines
            .of(namespace, cluster)
            .iter()
            .map(|m| Machine::clone(m))
            .collect();
        machines.sort_by_key(ResourceExt::name_any);
        Some(machines)
    }

    /// The KubeadmConfig from the copy, if it has it.
    pub(super) fn config(&self, namespace: &str, name: &str) -> Option<Arc<KubeadmConfig>> {
        if self.read_live(namespace) {
            return None;
        }
        self.configs
            .store()
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// The KubeadmConfigs of the control plane whose `cluster.x-k8s.io/control-plane-name` label is
    /// `kcp_label`, from the copy (which holds those labelled `cluster.x-k8s.io/control-plane`, as every
    /// part of a machine this controller creates is), or `None` where they are to be read live.
    pub(super) fn configs_of(
        &self,
        namespace: &str,
        kcp_label: &str,
    ) -> Option<Vec<Arc<KubeadmConfig>>> {
        if self.read_live(namespace) || !ready(self.configs.store()) {
            return None;
        }
        Some(self.configs.of(namespace, kcp_label))
    }

    /// The infrastructure machine `namespace/name` of kind `resource`, from the kind's copy (opened by
    /// the first call); `None` when the copy lacks it or is not listed yet: read it live.
    pub(super) fn infrastructure_machine(
        &self,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<DynamicObject>> {
        let copy = self.infrastructure_copy(resource);
        if self.read_live(namespace) || !ready(copy.store()) {
            return None;
        }
        copy.store()
            .get(&ObjectRef::new_with(name, resource.clone()).within(namespace))
    }

    /// The infrastructure machines of kind `resource` of the control plane labelled `kcp_label`, from the
    /// kind's copy, or `None` where they are to be read live.
    pub(super) fn infrastructure_of(
        &self,
        resource: &ApiResource,
        namespace: &str,
        kcp_label: &str,
    ) -> Option<Vec<Arc<DynamicObject>>> {
        let copy = self.infrastructure_copy(resource);
        if self.read_live(namespace) || !ready(copy.store()) {
            return None;
        }
        Some(copy.of(namespace, kcp_label))
    }

    fn infrastructure_copy(&self, resource: &ApiResource) -> Arc<Grouped<DynamicObject>> {
        let key = (resource.group.clone(), resource.plural.clone());
        let mut copies = self
            .infrastructure
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(infrastructure) = copies.get(&key) {
            return infrastructure.copy.clone();
        }
        let api: Api<DynamicObject> = if self.namespace.is_empty() {
            Api::all_with(self.client.clone(), resource)
        } else {
            Api::namespaced_with(self.client.clone(), &self.namespace, resource)
        };
        let kind = resource.kind.clone();
        let (copy, events) = Grouped::new(
            CONTROL_PLANE_NAME_LABEL,
            reflector::store::Writer::new(resource.clone()),
            watch(api),
        );
        let copy = Arc::new(copy);
        let machines = self.machines.store().clone();
        let wake = self.wake.clone();
        let feed = tokio::spawn(events.for_each(move |event| {
            match event {
                Ok(watcher::Event::Delete(gone)) => {
                    if let Some(kcp) = control_plane_of(&machines, &gone) {
                        let _ = wake.unbounded_send(kcp);
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(kind, error = %e, "infrastructure machines watch failed; retrying");
                }
            }
            std::future::ready(())
        }))
        .abort_handle();
        copies.insert(
            key,
            InfrastructureCopy {
                copy: copy.clone(),
                feed,
            },
        );
        copy
    }

    /// Waits until the copy shows what a write of ours did to the Machine; if it does not in time, the
    /// namespace is read live for a while.
    pub(super) async fn wait_for(&self, namespace: &str, name: &str, seen: Seen) {
        let key = ObjectRef::new(name).within(namespace);
        let deadline = Instant::now() + CATCH_UP;
        while !seen.holds(self.machines.store().get(&key).as_deref()) {
            if Instant::now() >= deadline {
                tracing::warn!(machine = %name, ?seen, "the Machine copy did not catch up; reading live for a while");
                self.live_until
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(namespace.to_owned(), Instant::now() + LIVE_FOR);
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn read_live(&self, namespace: &str) -> bool {
        let mut live = self
            .live_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match live.get(namespace) {
            Some(until) if Instant::now() < *until => true,
            Some(_) => {
                live.remove(namespace);
                false
            }
            None => false,
        }
    }
}

/// The control plane that owns the Machine that owns `infrastructure`, from the Machine copy.
fn control_plane_of(
    machines: &Store<Machine>,
    infrastructure: &DynamicObject,
) -> Option<ObjectRef<KubeadmControlPlane>> {
    let namespace = infrastructure.namespace()?;
    let owner = infrastructure
        .owner_references()
        .iter()
        .find(|o| o.kind == "Machine" && o.api_version.starts_with("cluster.x-k8s.io/"))?;
    let machine = machines.get(&ObjectRef::new(&owner.name).within(&namespace))?;
    let kcp = machine.owner_references().iter().find(|o| {
        o.controller == Some(true)
            && o.kind == "KubeadmControlPlane"
            && o.api_version.starts_with("controlplane.cluster.x-k8s.io/")
    })?;
    Some(ObjectRef::new(&kcp.name).within(&namespace))
}

/// The copy has listed once (a reflector's store is never unready again).
fn ready<K>(store: &Store<K>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}

/// The watch of the `K` labelled control-plane, whatever the watch filter (a copy missing some would
/// look like a control plane short of machines).
fn watch<K>(
    api: Api<K>,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + use<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    kubeadm_runtime::watching::watch_to_copy(
        api,
        watcher::Config::default().labels(CONTROL_PLANE_LABEL),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn machine(deleting: bool) -> Machine {
        let mut m = Machine::new("m", Default::default());
        if deleting {
            m.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        }
        m
    }

    #[test]
    fn a_creation_is_seen_once_the_machine_is_there() {
        assert!(!Seen::Created.holds(None));
        assert!(Seen::Created.holds(Some(&machine(false))));
    }

    #[test]
    fn a_deletion_is_seen_once_the_machine_is_deleting_or_gone() {
        assert!(!Seen::Deleting.holds(Some(&machine(false))));
        assert!(Seen::Deleting.holds(Some(&machine(true))));
        assert!(Seen::Deleting.holds(None));
    }

    #[test]
    fn a_gone_infrastructure_machine_leads_to_its_machines_control_plane() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let owner = |api_version: &str, kind: &str, name: &str, controller: bool| OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            controller: Some(controller),
            ..Default::default()
        };
        let mut writer = reflector::store::Writer::<Machine>::default();
        let mut owned = machine(true);
        owned.metadata.namespace = Some("ns".into());
        owned.metadata.owner_references = Some(vec![
            owner("cluster.x-k8s.io/v1beta2", "Cluster", "c", false),
            owner(
                "controlplane.cluster.x-k8s.io/v1beta2",
                "KubeadmControlPlane",
                "cp",
                true,
            ),
        ]);
        let mut stray = Machine::new("stray", Default::default());
        stray.metadata.namespace = Some("ns".into());
        writer.apply_watcher_event(&watcher::Event::Apply(owned));
        writer.apply_watcher_event(&watcher::Event::Apply(stray));
        let machines = writer.as_reader();
        let resource = ApiResource {
            group: "infrastructure.cluster.x-k8s.io".into(),
            version: "v1beta2".into(),
            api_version: "infrastructure.cluster.x-k8s.io/v1beta2".into(),
            kind: "SimMachine".into(),
            plural: "simmachines".into(),
        };
        let infrastructure = |machine: &str| {
            let mut object = DynamicObject::new("sim-1", &resource).within("ns");
            object.metadata.owner_references = Some(vec![owner(
                "cluster.x-k8s.io/v1beta2",
                "Machine",
                machine,
                true,
            )]);
            object
        };
        assert_eq!(
            control_plane_of(&machines, &infrastructure("m")),
            Some(ObjectRef::new("cp").within("ns"))
        );
        assert_eq!(control_plane_of(&machines, &infrastructure("stray")), None);
        assert_eq!(
            control_plane_of(&machines, &infrastructure("unknown")),
            None
        );
    }
}
