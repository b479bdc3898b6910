//! Prometheus metrics of the process: one registry that every controller registers into, served at
//! `/metrics` on the health listener, so a manager needs no extra wiring or port for it.

use std::sync::{LazyLock, Mutex, PoisonError};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
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

/// Requests sent to the management API server, by verb (`get`, `list`, `watch`, `create`, `update`,
/// `patch`, `delete`) and resource: what a manager costs the API server, at rest and while it works.
static REQUESTS: LazyLock<Family<Vec<(&'static str, String)>, Counter>> = LazyLock::new(|| {
    let family = Family::default();
    with_registry(|registry| {
        registry.register(
            "kubeadm_management_api_requests",
            "Requests sent to the management API server, by verb and resource",
            family.clone(),
        );
    });
    family
});

/// A client that behaves like `client` and counts each request it sends in
/// `kubeadm_management_api_requests_total{verb,resource}`.
pub fn count_requests(client: &kube::Client) -> kube::Client {
    let requests = LazyLock::force(&REQUESTS).clone();
    crate::before_send::before_send(client, move |request| {
        let (verb, resource) = verb_and_resource(request.method(), request.uri());
        requests
            .get_or_create(&vec![("verb", verb.to_owned()), ("resource", resource)])
            .inc();
        std::time::Duration::ZERO
    })
}

/// The verb the API server would log for a request (as in its audit log and `apiserver_request_total`)
/// and the resource it names (`resource/subresource`, or the path for non-resource URLs).
pub fn verb_and_resource(method: &Method, uri: &http::Uri) -> (&'static str, String) {
    let path = uri.path();
    let query = uri.query().unwrap_or_default();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    // /api/v1/... or /apis/group/version/...
    let rest = match parts.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return (method_verb(method), path.to_owned()),
    };
    let rest = match rest {
        ["namespaces", _ns, rest @ ..] if !rest.is_empty() => rest,
        other => other,
    };
    let (resource, named) = match rest {
        [resource] => ((*resource).to_owned(), false),
        [resource, _name] => ((*resource).to_owned(), true),
        [resource, _name, sub, ..] => (format!("{resource}/{sub}"), true),
        [] => return (method_verb(method), path.to_owned()),
    };
    let watching = query
        .split('&')
        .any(|p| p == "watch=true" || p == "watch=1");
    let verb = match *method {
        Method::GET if watching => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => method_verb(method),
    };
    (verb, resource)
}

fn method_verb(method: &Method) -> &'static str {
    match *method {
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "other",
    }
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
    fn requests_are_named_as_the_api_server_names_them() {
        for (method, uri, verb, resource) in [
            (
                Method::GET,
                "/api/v1/namespaces/d/secrets/s",
                "get",
                "secrets",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/d/secrets?labelSelector=a",
                "list",
                "secrets",
            ),
            (
                Method::GET,
                "/apis/cluster.x-k8s.io/v1beta2/machines?watch=true&resourceVersion=1",
                "watch",
                "machines",
            ),
            (
                Method::PATCH,
                "/apis/cluster.x-k8s.io/v1beta2/namespaces/d/machines/m/status",
                "patch",
                "machines/status",
            ),
            (
                Method::POST,
                "/api/v1/namespaces/d/events",
                "create",
                "events",
            ),
            (
                Method::PUT,
                "/api/v1/namespaces/d/secrets/s",
                "update",
                "secrets",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/d/pods/p",
                "delete",
                "pods",
            ),
            (Method::GET, "/api/v1/nodes/n", "get", "nodes"),
            (Method::GET, "/api/v1/namespaces/d", "get", "namespaces"),
            (Method::GET, "/version", "get", "/version"),
        ] {
            let uri: http::Uri = uri.parse().unwrap();
            assert_eq!(
                verb_and_resource(&method, &uri),
                (verb, resource.to_owned()),
                "{method} {uri}"
            );
        }
    }

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
