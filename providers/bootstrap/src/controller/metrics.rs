//! What the KubeadmConfig controller counts: reconciles, their errors and durations, data secrets by
//! role, and every write it sends to the management and workload API servers.

use std::sync::LazyLock;

use kubeadm_runtime::metrics::prometheus_client::metrics::counter::Counter;
use kubeadm_runtime::metrics::prometheus_client::metrics::family::Family;
use kubeadm_runtime::metrics::prometheus_client::registry::Registry;
use kubeadm_runtime::metrics::{self, Method};

use crate::render::Role;

use kubeadm_runtime::controller::{Labels, ReconcileMetrics};

/// What the controller counts, registered once per process in the registry `/metrics` serves.
pub(super) struct Metrics {
    pub(super) reconcile: ReconcileMetrics,
    pub(super) data_secrets_written: Family<Labels, Counter>,
    pub(super) api_writes: Family<Labels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let metrics = Self {
            reconcile: ReconcileMetrics::default(),
            data_secrets_written: Family::default(),
            api_writes: Family::default(),
        };
        // Known series start at 0, so they are listed and `rate()` sees their first increase.
        for role in [Role::Init, Role::ControlPlaneJoin, Role::WorkerJoin] {
            let _ = metrics
                .data_secrets_written
                .get_or_create(&[("role", role_label(role))]);
        }
        for kind in WRITE_KINDS {
            let _ = metrics.api_writes.get_or_create(&[("kind", kind)]);
        }
        metrics
    }
}

impl Metrics {
    fn register(&self, registry: &mut Registry) {
        let prefixed = registry.sub_registry_with_prefix("kubeadm_bootstrap");
        self.reconcile.register(prefixed, "KubeadmConfig");
        prefixed.register(
            "data_secrets_written",
            "Bootstrap data secrets written, by the role of the Machine",
            self.data_secrets_written.clone(),
        );
        prefixed.register(
            "api_writes",
            "Write requests sent to the management and workload API servers, by what they write",
            self.api_writes.clone(),
        );
    }
}

/// The controller's metrics in the process registry.
pub(super) static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let metrics = Metrics::default();
    metrics::with_registry(|registry| metrics.register(registry));
    metrics
});

/// The API server a write goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ApiServer {
    Management,
    Workload,
}

/// Every value [`write_kind`] returns.
pub(super) const WRITE_KINDS: [&str; 10] = [
    "data_secret_apply",
    "certificate_secret_create",
    "status_patch",
    "spec_patch",
    "lock_create",
    "lock_delete",
    "event",
    "token_create",
    "token_refresh",
    "other",
];

/// Names a write by what this controller writes with that request; the modules doing the writes stay
/// unaware of metrics.
pub(super) fn write_kind(server: ApiServer, method: &Method, path: &str) -> &'static str {
    use ApiServer::{Management, Workload};
    match (server, method.as_str(), metrics::resource_of(path)) {
        (Management, "PATCH", Some(("secrets", None))) => "data_secret_apply",
        (Management, "POST", Some(("secrets", None))) => "certificate_secret_create",
        (Management, "PATCH", Some(("kubeadmconfigs", Some("status")))) => "status_patch",
        (Management, "PATCH", Some(("kubeadmconfigs", None))) => "spec_patch",
        (Management, "POST", Some(("configmaps", None))) => "lock_create",
        (Management, "DELETE", Some(("configmaps", None))) => "lock_delete",
        (Management, _, Some(("events", None))) => "event",
        (Workload, "POST", Some(("secrets", None))) => "token_create",
        (Workload, "PATCH", Some(("secrets", None))) => "token_refresh",
        _ => "other",
    }
}

/// `client` with its writes counted as writes to `server`.
pub(super) fn counted(client: &kube::Client, server: ApiServer) -> kube::Client {
    metrics::observe_writes(client, move |method, path| {
        METRICS
            .api_writes
            .get_or_create(&[("kind", write_kind(server, method, path))])
            .inc();
    })
}

pub(super) fn role_label(role: Role) -> &'static str {
    match role {
        Role::Init => "init",
        Role::ControlPlaneJoin => "control-plane",
        Role::WorkerJoin => "worker",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_text_names_labels_and_histogram() {
        let metrics = Metrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        drop(metrics.reconcile.measure());
        metrics.reconcile.failed("init_lock");
        metrics
            .data_secrets_written
            .get_or_create(&[("role", role_label(Role::ControlPlaneJoin))])
            .inc();
        metrics
            .api_writes
            .get_or_create(&[("kind", "status_patch")])
            .inc_by(2);

        let text = metrics::encode_registry(&registry);
        for line in [
            "# TYPE kubeadm_bootstrap_reconcile counter",
            "kubeadm_bootstrap_reconcile_total 1",
            "kubeadm_bootstrap_reconcile_errors_total{error=\"init_lock\"} 1",
            "# TYPE kubeadm_bootstrap_reconcile_duration_seconds histogram",
            "kubeadm_bootstrap_reconcile_duration_seconds_bucket{le=\"+Inf\"} 1",
            "kubeadm_bootstrap_reconcile_duration_seconds_count 1",
            "kubeadm_bootstrap_data_secrets_written_total{role=\"control-plane\"} 1",
            "kubeadm_bootstrap_api_writes_total{kind=\"status_patch\"} 2",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "no line {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn writes_are_named_by_what_they_write() {
        use ApiServer::{Management, Workload};
        let ns = "/api/v1/namespaces/default";
        let configs = "/apis/bootstrap.cluster.x-k8s.io/v1beta2/namespaces/default/kubeadmconfigs";
        for (server, method, path, kind) in [
            (
                Management,
                Method::PATCH,
                format!("{ns}/secrets/cp-0"),
                "data_secret_apply",
            ),
            (
                Management,
                Method::POST,
                format!("{ns}/secrets"),
                "certificate_secret_create",
            ),
            (
                Management,
                Method::PATCH,
                format!("{configs}/cp-0/status"),
                "status_patch",
            ),
            (
                Management,
                Method::PATCH,
                format!("{configs}/cp-0"),
                "spec_patch",
            ),
            (
                Management,
                Method::POST,
                format!("{ns}/configmaps"),
                "lock_create",
            ),
            (
                Management,
                Method::DELETE,
                format!("{ns}/configmaps/prod-lock"),
                "lock_delete",
            ),
            (
                Management,
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/default/events".into(),
                "event",
            ),
            (
                Workload,
                Method::POST,
                "/api/v1/namespaces/kube-system/secrets".into(),
                "token_create",
            ),
            (
                Workload,
                Method::PATCH,
                "/api/v1/namespaces/kube-system/secrets/bootstrap-token-abcdef".into(),
                "token_refresh",
            ),
            (
                Workload,
                Method::DELETE,
                format!("{ns}/configmaps/x"),
                "other",
            ),
        ] {
            assert_eq!(write_kind(server, &method, &path), kind, "{method} {path}");
            assert!(WRITE_KINDS.contains(&kind), "{kind} is pre-initialized");
        }
    }
}
