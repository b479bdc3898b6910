//! What the KubeadmControlPlane controller counts: reconciles, their errors and durations, machines created
//! and deleted, and every write it sends to the management API server.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kubeadm_runtime::metrics::prometheus_client::metrics::counter::Counter;
use kubeadm_runtime::metrics::prometheus_client::metrics::family::Family;
use kubeadm_runtime::metrics::prometheus_client::metrics::histogram::{
    Histogram, exponential_buckets,
};
use kubeadm_runtime::metrics::prometheus_client::registry::Registry;
use kubeadm_runtime::metrics::{self, Method};

pub(super) type Labels = [(&'static str, &'static str); 1];

pub(super) struct Metrics {
    pub(super) reconciles: Counter,
    /// Sum of reconcile durations in nanoseconds, beside the histogram, for [`reconcile_time`].
    pub(super) reconcile_nanos: AtomicU64,
    pub(super) reconcile_errors: Family<Labels, Counter>,
    pub(super) reconcile_duration: Histogram,
    pub(super) machines: Family<Labels, Counter>,
    pub(super) api_writes: Family<Labels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let metrics = Self {
            reconciles: Counter::default(),
            reconcile_nanos: AtomicU64::new(0),
            reconcile_errors: Family::default(),
            reconcile_duration: Histogram::new(exponential_buckets(0.005, 2.0, 12)),
            machines: Family::default(),
            api_writes: Family::default(),
        };
        for action in ["created", "deleted"] {
            let _ = metrics.machines.get_or_create(&[("action", action)]);
        }
        metrics
    }
}

impl Metrics {
    fn register(&self, registry: &mut Registry) {
        let prefixed = registry.sub_registry_with_prefix("kubeadm_controlplane");
        prefixed.register(
            "reconcile",
            "KubeadmControlPlane reconciles run",
            self.reconciles.clone(),
        );
        prefixed.register(
            "reconcile_errors",
            "KubeadmControlPlane reconciles that failed and will be retried, by error kind",
            self.reconcile_errors.clone(),
        );
        prefixed.register(
            "reconcile_duration_seconds",
            "How long KubeadmControlPlane reconciles take",
            self.reconcile_duration.clone(),
        );
        prefixed.register(
            "machines",
            "Control-plane Machines created and deleted",
            self.machines.clone(),
        );
        prefixed.register(
            "api_writes",
            "Write requests sent to the management API server, by verb",
            self.api_writes.clone(),
        );
    }
}

pub(super) static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let metrics = Metrics::default();
    metrics::with_registry(|registry| metrics.register(registry));
    metrics
});

/// A client that counts its writes in `api_writes`.
pub(super) fn counted(client: &kube::Client) -> kube::Client {
    metrics::observe_writes(client, |method, _path| {
        let verb = match *method {
            Method::POST => "create",
            Method::PUT => "replace",
            Method::PATCH => "patch",
            Method::DELETE => "delete",
            _ => "other",
        };
        METRICS.api_writes.get_or_create(&[("verb", verb)]).inc();
    })
}

/// Writes counted so far (all verbs), for tests and benchmarks.
pub fn api_writes_total() -> u64 {
    ["create", "replace", "patch", "delete", "other"]
        .iter()
        .map(|verb| METRICS.api_writes.get_or_create(&[("verb", verb)]).get())
        .sum()
}

/// Reconciles run so far and their total duration, for benchmarks.
pub fn reconcile_time() -> (u64, Duration) {
    (
        METRICS.reconciles.get(),
        Duration::from_nanos(METRICS.reconcile_nanos.load(Ordering::Relaxed)),
    )
}

/// Adds one reconcile's duration.
pub(super) fn observe_reconcile(elapsed: Duration) {
    METRICS.reconciles.inc();
    METRICS.reconcile_duration.observe(elapsed.as_secs_f64());
    METRICS.reconcile_nanos.fetch_add(
        u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
}
