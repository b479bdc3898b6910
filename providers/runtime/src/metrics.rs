//! Prometheus metrics of the process: one registry that every controller registers into, served at
//! `/metrics` on the health listener, so a manager needs no extra wiring or port for it.

use std::sync::{LazyLock, Mutex, PoisonError};

use prometheus_client::registry::Registry;

pub use http::Method;
pub use prometheus_client;

/// Content type of [`encode`]'s output (OpenMetrics text, which Prometheus scrapes natively).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Default::default);

/// Runs `register` on the process registry; call it once per set of metrics (a second registration
/// of a name shows it twice).
pub fn with_registry(register: impl FnOnce(&mut Registry)) {
    register(&mut REGISTRY.lock().unwrap_or_else(PoisonError::into_inner));
}

/// Everything registered so far, as OpenMetrics text.
pub fn encode() -> String {
    encode_registry(&REGISTRY.lock().unwrap_or_else(PoisonError::into_inner))
}

pub fn encode_registry(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry)
        .expect("encoding into a String does not fail");
    text
}

/// A client that behaves like `client` and calls `on_write(method, path)` before sending each request
/// that is not a read. It counts attempts, refused ones (already exists, not found) included: each is
/// work for the API server.
pub fn observe_writes<F>(client: &kube::Client, on_write: F) -> kube::Client
where
    F: Fn(&Method, &str) + Send + Sync + 'static,
{
    crate::before_send::before_send(client, move |request| {
        if !matches!(
            *request.method(),
            Method::GET | Method::HEAD | Method::OPTIONS
        ) {
            on_write(request.method(), request.uri().path());
        }
        std::time::Duration::ZERO
    })
}

/// The resource and subresource a namespaced API path names, e.g.
/// `/apis/g/v1/namespaces/ns/things/name/status` → `("things", Some("status"))`.
pub fn resource_of(path: &str) -> Option<(&str, Option<&str>)> {
    let mut rest = path.split_once("/namespaces/")?.1.split('/').skip(1);
    let resource = rest.next().filter(|r| !r.is_empty())?;
    Some((resource, rest.nth(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_of_namespaced_paths() {
        assert_eq!(
            resource_of("/api/v1/namespaces/default/secrets"),
            Some(("secrets", None))
        );
        assert_eq!(
            resource_of("/api/v1/namespaces/default/configmaps/prod-lock"),
            Some(("configmaps", None))
        );
        assert_eq!(
            resource_of(
                "/apis/bootstrap.cluster.x-k8s.io/v1beta2/namespaces/ns/kubeadmconfigs/a/status"
            ),
            Some(("kubeadmconfigs", Some("status")))
        );
        assert_eq!(resource_of("/api/v1/namespaces/default"), None);
        assert_eq!(resource_of("/api/v1/nodes/n"), None);
    }

    #[test]
    fn encodes_a_counter_family_as_openmetrics() {
        use prometheus_client::metrics::counter::Counter;
        use prometheus_client::metrics::family::Family;
        let mut registry = Registry::default();
        let writes = Family::<[(&str, &str); 1], Counter>::default();
        registry.register("example_writes", "Writes.", writes.clone());
        writes.get_or_create(&[("kind", "lock_create")]).inc();
        let text = encode_registry(&registry);
        assert!(text.contains("# TYPE example_writes counter\n"), "{text}");
        assert!(
            text.contains("example_writes_total{kind=\"lock_create\"} 1\n"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
