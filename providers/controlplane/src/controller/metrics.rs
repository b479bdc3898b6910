//! What the KubeadmControlPlane controller counts: reconciles, their errors and durations, machines created
//! and deleted, every write it sends to the management API server, and where its views of the workload
//! clusters came from.

use std::sync::LazyLock;
use std::time::Duration;

use kubeadm_runtime::metrics::prometheus_client::metrics::counter::Counter;
use kubeadm_runtime::metrics::prometheus_client::metrics::family::Family;
use kubeadm_runtime::metrics::prometheus_client::registry::Registry;
use kubeadm_runtime::metrics::{self, Method};

use kubeadm_runtime::controller::{Labels, ReconcileMetrics};

pub(super) struct Metrics {
    pub(super) reconcile: ReconcileMetrics,
    pub(super) machines: Family<Labels, Counter>,
    pub(super) api_writes: Family<Labels, Counter>,
    pub(super) workload_views: Family<Labels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let metrics = Self {
            reconcile: ReconcileMetrics::default(),
            machines: Family::default(),
            api_writes: Family::default(),
            workload_views: Family::default(),
        };
        // Known series start at 0, so they are listed and `rate()` sees their first increase.
        for action in ["created", "deleted"] {
            let _ = metrics.machines.get_or_create(&[("action", action)]);
        }
        for kind in WRITE_KINDS {
            let _ = metrics.api_writes.get_or_create(&[("kind", kind)]);
        }
        for source in ["read", "kept"] {
            let _ = metrics.workload_views.get_or_create(&[("source", source)]);
        }
        metrics
    }
}

impl Metrics {
    fn register(&self, registry: &mut Registry) {
        let prefixed = registry.sub_registry_with_prefix("kubeadm_controlplane");
        self.reconcile.register(prefixed, "KubeadmControlPlane");
        prefixed.register(
            "machines",
            "Control-plane Machines created and deleted",
            self.machines.clone(),
        );
        prefixed.register(
            "api_writes",
            "Write requests sent to the management API server, by what they write",
            self.api_writes.clone(),
        );
        prefixed.register(
            "workload_views",
            "Views of an initialized workload cluster's control-plane pods and Nodes, read or kept from an \
             earlier reconcile while the cluster's watches saw nothing new",
            self.workload_views.clone(),
        );
    }
}

pub(super) static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let metrics = Metrics::default();
    metrics::with_registry(|registry| metrics.register(registry));
    metrics
});

/// Every value [`write_kind`] returns.
pub(super) const WRITE_KINDS: [&str; 14] = [
    "machine_create",
    "machine_patch",
    "machine_status_patch",
    "machine_delete",
    "kubeadm_config_create",
    "kubeadm_config_patch",
    "kubeadm_config_delete",
    "status_patch",
    "spec_patch",
    "secret_create",
    "secret_replace",
    "secret_delete",
    "event",
    "other",
];

/// Names a write by what this controller writes with that request (infrastructure machines, whose kinds
/// vary by provider, count as `other`); the modules doing the writes stay unaware of metrics.
pub(super) fn write_kind(method: &Method, path: &str) -> &'static str {
    match (method.as_str(), metrics::resource_of(path)) {
        ("POST", Some(("machines", None))) => "machine_create",
        ("PATCH", Some(("machines", None))) => "machine_patch",
        ("PATCH", Some(("machines", Some("status")))) => "machine_status_patch",
        ("DELETE", Some(("machines", None))) => "machine_delete",
        ("POST", Some(("kubeadmconfigs", None))) => "kubeadm_config_create",
        ("PATCH", Some(("kubeadmconfigs", None))) => "kubeadm_config_patch",
        ("DELETE", Some(("kubeadmconfigs", None))) => "kubeadm_config_delete",
        ("PATCH", Some(("kubeadmcontrolplanes", Some("status")))) => "status_patch",
        ("PATCH", Some(("kubeadmcontrolplanes", None))) => "spec_patch",
        ("POST", Some(("secrets", None))) => "secret_create",
        ("PUT", Some(("secrets", None))) => "secret_replace",
        ("DELETE", Some(("secrets", None))) => "secret_delete",
        (_, Some(("events", None))) => "event",
        _ => "other",
    }
}

/// A client that counts its writes in `api_writes`.
pub(super) fn counted(client: &kube::Client) -> kube::Client {
    metrics::observe_writes(client, |method, path| {
        METRICS
            .api_writes
            .get_or_create(&[("kind", write_kind(method, path))])
            .inc();
    })
}

/// Writes counted so far (all kinds), for tests and benchmarks.
pub fn api_writes_total() -> u64 {
    WRITE_KINDS
        .iter()
        .map(|kind| METRICS.api_writes.get_or_create(&[("kind", kind)]).get())
        .sum()
}

/// Views of initialized workload clusters so far: (read, kept), for tests and benchmarks.
pub fn workload_views() -> (u64, u64) {
    let count = |source| {
        METRICS
            .workload_views
            .get_or_create(&[("source", source)])
            .get()
    };
    (count("read"), count("kept"))
}

/// Reconciles run so far and their total duration, for benchmarks.
pub fn reconcile_time() -> (u64, Duration) {
    METRICS.reconcile.total()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_named_by_what_they_write() {
        let ns = "/apis/cluster.x-k8s.io/v1beta2/namespaces/default";
        let kcps =
            "/apis/controlplane.cluster.x-k8s.io/v1beta2/namespaces/default/kubeadmcontrolplanes";
        for (method, path, kind) in [
            (Method::POST, format!("{ns}/machines"), "machine_create"),
            (
                Method::PATCH,
                format!("{ns}/machines/m/status"),
                "machine_status_patch",
            ),
            (Method::DELETE, format!("{ns}/machines/m"), "machine_delete"),
            (Method::PATCH, format!("{kcps}/cp/status"), "status_patch"),
            (Method::PATCH, format!("{kcps}/cp"), "spec_patch"),
            (
                Method::PUT,
                "/api/v1/namespaces/default/secrets/c-kubeconfig".into(),
                "secret_replace",
            ),
            (
                Method::POST,
                "/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/default/simmachines"
                    .into(),
                "other",
            ),
        ] {
            assert_eq!(write_kind(&method, &path), kind, "{method} {path}");
            assert!(WRITE_KINDS.contains(&kind), "{kind} is pre-initialized");
        }
    }
}
