//! What the webhook server counts: requests by path and outcome, and how long answers take, in the
//! process registry the managers serve at `/metrics`.

use std::sync::LazyLock;
use std::time::Duration;

use kubeadm_runtime::metrics;
use kubeadm_runtime::metrics::prometheus_client::metrics::counter::Counter;
use kubeadm_runtime::metrics::prometheus_client::metrics::family::Family;
use kubeadm_runtime::metrics::prometheus_client::metrics::histogram::{
    Histogram, exponential_buckets,
};
use kubeadm_runtime::metrics::prometheus_client::registry::Registry;

/// Path label for requests to a path no webhook serves (their paths are not labels: unbounded).
pub(crate) const UNMATCHED: &str = "unmatched";

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Admitted without a patch.
    Allowed,
    /// Admitted with a patch.
    Patched,
    /// Refused by a rule.
    Denied,
    /// Every object converted.
    Converted,
    /// The handler failed (conversion error, internal error, panic).
    Failed,
    /// The body is not a review this path answers (HTTP 400).
    BadRequest,
    /// The body is over the limit (HTTP 413).
    TooLarge,
    /// No webhook at that path (HTTP 404).
    NotFound,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Patched => "patched",
            Outcome::Denied => "denied",
            Outcome::Converted => "converted",
            Outcome::Failed => "failed",
            Outcome::BadRequest => "bad_request",
            Outcome::TooLarge => "too_large",
            Outcome::NotFound => "not_found",
        }
    }
}

type RequestLabels = [(&'static str, String); 2];
type PathLabel = [(&'static str, String); 1];

struct Metrics {
    requests: Family<RequestLabels, Counter>,
    duration: Family<PathLabel, Histogram, fn() -> Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            // 0.25 ms .. 4 s: a review is decoded, checked and encoded in well under a millisecond.
            duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.00025, 2.0, 15))
            }),
        }
    }
}

impl Metrics {
    fn register(&self, registry: &mut Registry) {
        let prefixed = registry.sub_registry_with_prefix("kubeadm_webhook");
        prefixed.register(
            "requests",
            "Admission and conversion requests answered, by webhook path and outcome",
            self.requests.clone(),
        );
        prefixed.register(
            "request_duration_seconds",
            "How long answering a webhook request takes, by webhook path",
            self.duration.clone(),
        );
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let metrics = Metrics::default();
    metrics::with_registry(|registry| metrics.register(registry));
    metrics
});

/// Registers the metrics, so they are listed before the first request.
pub(crate) fn init() {
    LazyLock::force(&METRICS);
}

pub(crate) fn observe(path: &str, outcome: Outcome, took: Duration) {
    METRICS
        .requests
        .get_or_create(&[
            ("path", path.to_string()),
            ("outcome", outcome.label().to_string()),
        ])
        .inc();
    METRICS
        .duration
        .get_or_create(&[("path", path.to_string())])
        .observe(took.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_path_and_outcome() {
        let metrics = Metrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        metrics
            .requests
            .get_or_create(&[
                ("path", "/convert".into()),
                ("outcome", Outcome::Converted.label().into()),
            ])
            .inc();
        metrics
            .duration
            .get_or_create(&[("path", "/convert".into())])
            .observe(0.0004);
        let text = metrics::encode_registry(&registry);
        for line in [
            "kubeadm_webhook_requests_total{path=\"/convert\",outcome=\"converted\"} 1",
            "kubeadm_webhook_request_duration_seconds_bucket{le=\"0.0005\",path=\"/convert\"} 1",
            "kubeadm_webhook_request_duration_seconds_count{path=\"/convert\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "no line {line:?} in\n{text}"
            );
        }
    }
}
