//! What a controller of either manager watches: its namespace (or all), objects carrying the
//! `--watch-filter` label value, and kinds that are actually served.

use futures::Stream;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use kubeadm_api::meta::WATCH_FILTER_LABEL;

/// An API for `K` in `namespace`, or in all namespaces when it is empty (`--namespace`).
pub fn scoped_api<K>(client: &kube::Client, namespace: &str) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    if namespace.is_empty() {
        Api::all(client.clone())
    } else {
        Api::namespaced(client.clone(), namespace)
    }
}

/// Watches objects whose `cluster.x-k8s.io/watch-filter` label has this value, or all when it is empty
/// (`--watch-filter`).
pub fn watcher_config(watch_filter: &str) -> watcher::Config {
    if watch_filter.is_empty() {
        watcher::Config::default()
    } else {
        watcher::Config::default().labels(&format!("{WATCH_FILTER_LABEL}={watch_filter}"))
    }
}

/// Fails with a message naming the CRD of `K` and who installs it when `K` is not served; watchers on an
/// unserved kind would otherwise retry forever without saying why.
pub async fn served<K>(client: &kube::Client, installed_by: &str) -> Result<(), String>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match Api::<K>::all(client.clone())
        .list_metadata(&ListParams::default().limit(1))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) => Err(format!(
            "cannot list {}: {e}; is the CRD {}.{} installed ({installed_by})?",
            K::plural(&()),
            K::plural(&()),
            K::group(&())
        )),
    }
}

/// A watch-fed copy of the `K` that `api` and `config` select, without managed fields (no reconcile
/// reads them), and the watch events that fill it: poll them for as long as the copy is used (a
/// controller's trigger stream, or a task of its own).
pub fn copy<K>(
    api: Api<K>,
    config: watcher::Config,
) -> (
    Store<K>,
    impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + use<K>,
)
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let events = reflector::reflector(
        writer,
        watcher(api, config)
            .default_backoff()
            .modify(|object: &mut K| object.managed_fields_mut().clear()),
    );
    (store, events)
}

/// `namespace/name` from `store`, else read live (not listed yet, or outside the watch filter).
pub async fn cached_or_live<K>(
    store: &Store<K>,
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<K>, kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    match store.get(&ObjectRef::new(name).within(namespace)) {
        Some(cached) => Ok(Some(K::clone(&cached))),
        None => {
            Api::<K>::namespaced(client.clone(), namespace)
                .get_opt(name)
                .await
        }
    }
}
