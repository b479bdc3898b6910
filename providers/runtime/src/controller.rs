//! Controller plumbing both managers share: the bounded run until shutdown, per-object retry backoff,
//! reconcile metrics, and merge-patch parameters carrying the field manager.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::Shutdown;

/// What a controller's run stream yields for each reconcile.
pub type Outcome<K, E> = Result<
    (
        kube::runtime::reflector::ObjectRef<K>,
        kube::runtime::controller::Action,
    ),
    kube::runtime::controller::Error<E, kube::runtime::watcher::Error>,
>;

/// Logs one outcome of a controller's run stream: a reconcile that failed as a warning; a wake-up for an
/// object the controller has not listed yet (a related object changed first, e.g. a Cluster created
/// before its control plane) at debug level, since the object's own arrival reconciles it.
pub fn log_outcome<K, E>(outcome: Outcome<K, E>)
where
    K: kube::Resource,
    K::DynamicType: Clone + std::fmt::Debug,
    E: std::error::Error + 'static,
{
    use kube::runtime::controller::Error;
    match outcome {
        Ok((object, _)) => tracing::debug!(%object, "reconciled"),
        Err(Error::ObjectNotFound(object)) => {
            tracing::debug!(%object, "woken for an object not listed yet");
        }
        Err(e) => tracing::warn!(error = %e, "reconcile failed"),
    }
}

/// How long in-flight reconciles get after a shutdown request before they are dropped. Reconciles are
/// idempotent, so dropping one mid-way is safe; the bound also covers a shutdown that arrives before the
/// first list completed, which kube-runtime would otherwise wait out forever.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Runs `controller` (a kube-runtime controller stream driven to its end, with
/// `graceful_shutdown_on(shutdown.wait())`) until it ends, or [`SHUTDOWN_GRACE`] after `shutdown` fires.
pub async fn run_until_shutdown(controller: impl Future<Output = ()>, shutdown: Shutdown) {
    tokio::select! {
        () = controller => {}
        () = async { shutdown.wait().await; tokio::time::sleep(SHUTDOWN_GRACE).await } => {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "reconciles did not finish in time; stopping anyway");
        }
    }
}

/// Merge patches carry the controller's field manager too, so `managedFields` say who wrote what.
pub fn merge_params(field_manager: &str) -> kube::api::PatchParams {
    kube::api::PatchParams {
        field_manager: Some(field_manager.to_owned()),
        ..Default::default()
    }
}

/// Shortest retry delay after a failed reconcile.
pub const MIN_BACKOFF: Duration = Duration::from_secs(2);
/// Longest retry delay after repeated failures.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Retry delays per object: 2 s doubling to 5 min, jittered, so a broken object is retried soon but never
/// hammered, and many failing together do not retry in step. A success forgets the object; so does a
/// failure of any object once the entry has not been used for [`FORGET_AFTER`] (its object was deleted
/// while failing: nothing retries it any more).
pub struct ErrorBackoff<K> {
    delays: Mutex<HashMap<K, (ExponentialBackoff, Instant)>>,
}

/// An object that still fails is retried at least every [`MAX_BACKOFF`] (plus jitter); an entry unused
/// for this long belongs to an object that is gone.
pub const FORGET_AFTER: Duration = Duration::from_secs(3 * MAX_BACKOFF.as_secs());

impl<K: Hash + Eq> Default for ErrorBackoff<K> {
    fn default() -> Self {
        Self {
            delays: Mutex::default(),
        }
    }
}

impl<K: Hash + Eq> ErrorBackoff<K> {
    /// The delay before retrying `key` after another failure.
    pub fn next(&self, key: K) -> Duration {
        self.next_at(key, Instant::now(), FORGET_AFTER)
    }

    fn next_at(&self, key: K, now: Instant, forget_after: Duration) -> Duration {
        let mut delays = self.delays.lock().unwrap_or_else(PoisonError::into_inner);
        delays.retain(|_, (_, used)| now.saturating_duration_since(*used) < forget_after);
        let (delays, used) = delays.entry(key).or_insert_with(|| {
            let delays = ExponentialBuilder::new()
                .with_min_delay(MIN_BACKOFF)
                .with_max_delay(MAX_BACKOFF)
                .with_factor(2.0)
                .with_jitter()
                .without_max_times()
                .build();
            (delays, now)
        });
        *used = now;
        delays.next().unwrap_or(MAX_BACKOFF)
    }

    /// Forgets `key` after a successful reconcile.
    pub fn reset(&self, key: &K) {
        self.delays
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }

    /// How many objects are backing off.
    pub fn len(&self) -> usize {
        self.delays
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One label, e.g. `error="kube"`.
pub type Labels = [(&'static str, &'static str); 1];

/// What every controller counts about its reconciles: how many ran, how long they took, and which failed
/// by error kind.
pub struct ReconcileMetrics {
    reconciles: Counter,
    /// Sum of durations in nanoseconds, beside the histogram, for benchmarks.
    nanos: AtomicU64,
    errors: Family<Labels, Counter>,
    duration: Histogram,
}

impl Default for ReconcileMetrics {
    fn default() -> Self {
        Self {
            reconciles: Counter::default(),
            nanos: AtomicU64::new(0),
            errors: Family::default(),
            // 5 ms .. 10 s: a reconcile is a handful of API calls, plus key generation once per cluster.
            duration: Histogram::new(exponential_buckets(0.005, 2.0, 12)),
        }
    }
}

impl ReconcileMetrics {
    /// Registers `reconcile`, `reconcile_errors` and `reconcile_duration_seconds` under `registry`'s
    /// prefix, described for objects of `kind`.
    pub fn register(&self, registry: &mut Registry, kind: &str) {
        registry.register(
            "reconcile",
            format!("{kind} reconciles run"),
            self.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            format!("{kind} reconciles that failed and will be retried, by error kind"),
            self.errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            format!("How long {kind} reconciles take"),
            self.duration.clone(),
        );
    }

    /// Starts timing a reconcile; the duration is recorded when the returned guard drops, however the
    /// reconcile ends.
    pub fn measure(&self) -> Measurer<'_> {
        Measurer {
            metrics: self,
            started: Instant::now(),
        }
    }

    /// Counts a failed reconcile by its error kind.
    pub fn failed(&self, kind: &'static str) {
        self.errors.get_or_create(&[("error", kind)]).inc();
    }

    /// Reconciles run so far and their total duration.
    pub fn total(&self) -> (u64, Duration) {
        (
            self.reconciles.get(),
            Duration::from_nanos(self.nanos.load(Ordering::Relaxed)),
        )
    }
}

/// Records one reconcile's duration when dropped.
pub struct Measurer<'a> {
    metrics: &'a ReconcileMetrics,
    started: Instant,
}

impl Drop for Measurer<'_> {
    fn drop(&mut self) {
        let elapsed = self.started.elapsed();
        self.metrics.reconciles.inc();
        self.metrics.duration.observe(elapsed.as_secs_f64());
        self.metrics.nanos.fetch_add(
            u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_per_object_and_a_success_forgets_it() {
        let backoff = ErrorBackoff::default();
        let first = backoff.next("a");
        assert!(
            first >= MIN_BACKOFF && first <= MIN_BACKOFF * 2,
            "{first:?}"
        );
        let mut last = first;
        for _ in 0..20 {
            last = backoff.next("a");
        }
        assert!(
            last <= MAX_BACKOFF * 2 && last >= MAX_BACKOFF / 2,
            "{last:?}"
        );
        assert!(
            backoff.next("b") <= MIN_BACKOFF * 2,
            "each object has its own"
        );
        backoff.reset(&"a");
        assert!(backoff.next("a") <= MIN_BACKOFF * 2);
    }

    #[test]
    fn entries_of_objects_no_longer_retried_are_forgotten() {
        let backoff = ErrorBackoff::default();
        let start = Instant::now();
        backoff.next_at("deleted", start, FORGET_AFTER);
        backoff.next_at("failing", start, FORGET_AFTER);
        // "failing" is retried within its backoff; "deleted" never comes back.
        let later = start + MAX_BACKOFF * 2;
        backoff.next_at("failing", later, FORGET_AFTER);
        assert_eq!(backoff.len(), 2);
        let much_later = start + FORGET_AFTER + MAX_BACKOFF;
        backoff.next_at("failing", much_later, FORGET_AFTER);
        assert_eq!(backoff.len(), 1, "the deleted object's entry is gone");
        assert!(
            backoff.next_at("failing", much_later, FORGET_AFTER) > MIN_BACKOFF,
            "an object that keeps failing keeps its growing delay"
        );
    }

    #[test]
    fn every_reconcile_is_counted_and_timed() {
        let metrics = ReconcileMetrics::default();
        let mut registry = Registry::default();
        metrics.register(registry.sub_registry_with_prefix("test"), "Thing");
        {
            let _timer = metrics.measure();
        }
        metrics.failed("kube");
        let text = crate::metrics::encode_registry(&registry);
        for line in [
            "test_reconcile_total 1",
            "test_reconcile_errors_total{error=\"kube\"} 1",
            "test_reconcile_duration_seconds_count 1",
            "# HELP test_reconcile Thing reconciles run.",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert_eq!(metrics.total().0, 1);
    }
}
