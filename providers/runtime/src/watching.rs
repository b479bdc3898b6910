//! What a controller of either manager watches: its namespace (or all), objects carrying the
//! `--watch-filter` label value, and kinds that are actually served.

use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::api::{Api, ListParams};
use kube::runtime::Controller;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::{WatchStreamExt, watcher};
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

/// A watch-fed copy of the `K` that `api` and `config` select, slimmed by [`slim_for_copy`], and the
/// watch events that fill it: poll them for as long as the copy is used (a
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
    let events = reflector::reflector(writer, watch_to_copy(api, config));
    (store, events)
}

/// [`watch`], its objects slimmed by [`slim_for_copy`], as a copy keeps them.
pub fn watch_to_copy<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + use<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watch(api, config).modify(slim_for_copy)
}

/// kubectl's copy of what was last applied: the whole object again, as JSON, on everything applied
/// with `kubectl apply` (client side).
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what no reconcile reads before a copy keeps an object: its managed fields (cleared in place
/// their list would keep its allocation, about 1 KiB an object) and kubectl's last-applied
/// annotation (the object once more). Nothing writes a copy back whole (updates are patches of their
/// own fields), so the API server keeps both.
pub fn slim_for_copy<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

/// The watch events of the `K` that `api` and `config` select. Errors are retried after [`backoff`],
/// but a 410 Gone (the API server no longer has the revision the watch resumes from, as after its
/// restart) is followed by the relist at once: waiting would only delay every event.
pub fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + use<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher(api, config)
        .filter(|event| {
            let gone =
                matches!(event, Err(watcher::Error::WatchError(status)) if status.code == 410);
            if gone {
                tracing::debug!(
                    kind = std::any::type_name::<K>(),
                    "watch expired (410); listing again"
                );
            }
            futures::future::ready(!gone)
        })
        .backoff(backoff())
}

/// How one watch retries after an error (e.g. the API server unreachable): from half a second, doubling
/// to 5 s (jittered), forgotten after a minute without errors. After a restart of the management API
/// server every watch is back within seconds, and while it is down each costs one refused connection
/// every few seconds.
pub fn backoff() -> impl Backoff {
    let delays = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(5))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(
        watcher::ExponentialBackoff::from(delays),
        Duration::from_secs(60),
    )
}

/// A controller of the `K` that `api` and `config` select, reconciling from a [`copy`]. Every watch
/// stream a controller merges backs off on its own ([`backoff`]); the merged stream does not, since one
/// backoff over all of them would add up their errors (each watch's 410 after a management API server
/// restart) into one pause of up to a minute for every trigger.
pub fn controller<K>(api: Api<K>, config: watcher::Config) -> Controller<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, events) = copy(api, config);
    Controller::for_stream(events.applied_objects(), store).trigger_backoff(EachWatchBacksOff)
}

/// The merged triggers' backoff: none, each watch has its own.
struct EachWatchBacksOff;

impl Iterator for EachWatchBacksOff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::ZERO)
    }
}

impl Backoff for EachWatchBacksOff {
    fn reset(&mut self) {}
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_retries_from_half_a_second_and_never_waits_more_than_ten() {
        let mut delays = backoff();
        let first = delays.next().expect("never gives up");
        assert!(
            first >= Duration::from_millis(500) && first < Duration::from_secs(1),
            "{first:?}"
        );
        for _ in 0..50 {
            let delay = delays.next().expect("never gives up");
            assert!(delay <= Duration::from_secs(10), "{delay:?}");
        }
        delays.reset();
        assert!(delays.next().expect("never gives up") < Duration::from_secs(1));
    }

    #[test]
    fn a_copy_keeps_neither_managed_fields_nor_the_last_applied_annotation() {
        let mut map = k8s_openapi::api::core::v1::ConfigMap::default();
        map.metadata.managed_fields = Some(vec![Default::default()]);
        map.metadata.annotations = Some(
            [
                (LAST_APPLIED_ANNOTATION.to_owned(), "{}".to_owned()),
                ("kept".to_owned(), "yes".to_owned()),
            ]
            .into(),
        );
        slim_for_copy(&mut map);
        assert_eq!(map.metadata.managed_fields, None);
        assert_eq!(
            map.metadata.annotations,
            Some([("kept".to_owned(), "yes".to_owned())].into())
        );

        let mut applied = k8s_openapi::api::core::v1::ConfigMap::default();
        applied.metadata.annotations =
            Some([(LAST_APPLIED_ANNOTATION.to_owned(), "{}".to_owned())].into());
        slim_for_copy(&mut applied);
        assert_eq!(applied.metadata.annotations, None);
    }

    #[test]
    fn the_merged_triggers_never_wait() {
        let mut merged = EachWatchBacksOff;
        assert_eq!(merged.next(), Some(Duration::ZERO));
    }
}
