//! A watch-fed copy with its objects grouped by namespace and a label: a reconcile finds its own control
//! plane's objects without going through the copy of every cluster. The groups are made again on the
//! first read after the copy changed, so at rest (no watch event) every read is a lookup.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::reflector::{Store, store::Writer};
use kube::runtime::watcher;

/// How often the copy changed: odd while a watch event is being applied, even otherwise. A read that
/// finds the same even count before and after grouping saw one state of the copy.
#[derive(Clone, Default)]
struct Changes(Arc<AtomicU64>);

impl Changes {
    fn now(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// The copy, and its objects by (namespace, label value).
pub(super) struct Grouped<K>
where
    K: Resource + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    changes: Changes,
    label: &'static str,
    groups: Mutex<Groups<K>>,
}

struct Groups<K> {
    /// The count of changes the groups were made at.
    at: Option<u64>,
    by_key: HashMap<(String, String), Vec<Arc<K>>>,
}

impl<K> Grouped<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    /// The copy that `writer` keeps and `events` fill, grouped by `label`; the returned stream applies
    /// each event to the copy and must be polled for as long as the copy is used.
    pub(super) fn new<S>(
        label: &'static str,
        mut writer: Writer<K>,
        events: S,
    ) -> (
        Self,
        impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + use<K, S>,
    )
    where
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
        K: Send + Sync,
        K::DynamicType: Send + Sync,
    {
        let changes = Changes::default();
        let grouped = Self {
            store: writer.as_reader(),
            changes: changes.clone(),
            label,
            groups: Mutex::new(Groups {
                at: None,
                by_key: HashMap::new(),
            }),
        };
        let applied = events.map(move |event| {
            if let Ok(event) = &event {
                changes.0.fetch_add(1, Ordering::AcqRel);
                writer.apply_watcher_event(event);
                changes.0.fetch_add(1, Ordering::AcqRel);
            }
            event
        });
        (grouped, applied)
    }

    pub(super) fn store(&self) -> &Store<K> {
        &self.store
    }

    /// The objects in `namespace` whose label is `value`.
    pub(super) fn of(&self, namespace: &str, value: &str) -> Vec<Arc<K>> {
        let key = (namespace.to_owned(), value.to_owned());
        let mut groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        let before = self.changes.now();
        if groups.at == Some(before) {
            return groups.by_key.get(&key).cloned().unwrap_or_default();
        }
        let mut by_key: HashMap<(String, String), Vec<Arc<K>>> = HashMap::new();
        for object in self.store.state() {
            let meta = object.meta();
            if let (Some(namespace), Some(value)) = (
                meta.namespace.clone(),
                meta.labels
                    .as_ref()
                    .and_then(|l| l.get(self.label))
                    .cloned(),
            ) {
                by_key.entry((namespace, value)).or_default().push(object);
            }
        }
        let found = by_key.get(&key).cloned().unwrap_or_default();
        // Kept only when no event was applied meanwhile; otherwise the next read groups again.
        let settled = before.is_multiple_of(2) && self.changes.now() == before;
        *groups = Groups {
            at: settled.then_some(before),
            by_key,
        };
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    const LABEL: &str = "cluster.x-k8s.io/cluster-name";

    fn object(namespace: &str, name: &str, cluster: Option<&str>) -> ConfigMap {
        let mut object = ConfigMap::default();
        object.metadata.namespace = Some(namespace.into());
        object.metadata.name = Some(name.into());
        object.metadata.labels =
            cluster.map(|c| [(LABEL.to_owned(), c.to_owned())].into_iter().collect());
        object
    }

    fn names(objects: &[Arc<ConfigMap>]) -> Vec<String> {
        let mut names: Vec<String> = objects
            .iter()
            .map(|o| o.metadata.name.clone().unwrap_or_default())
            .collect();
        names.sort();
        names
    }

    /// A copy listed with `listed`, and the sender of the events that follow.
    async fn listed(
        listed: Vec<ConfigMap>,
    ) -> (
        Grouped<ConfigMap>,
        futures::channel::mpsc::UnboundedSender<watcher::Event<ConfigMap>>,
        impl Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>>,
    ) {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        tx.unbounded_send(watcher::Event::Init).unwrap();
        for object in listed {
            tx.unbounded_send(watcher::Event::InitApply(object))
                .unwrap();
        }
        tx.unbounded_send(watcher::Event::InitDone).unwrap();
        let (grouped, events) = Grouped::new(LABEL, Writer::default(), rx.map(Ok));
        let mut events = Box::pin(events);
        while let Some(Ok(event)) = events.next().await {
            if matches!(event, watcher::Event::InitDone) {
                break;
            }
        }
        (grouped, tx, events)
    }

    #[tokio::test]
    async fn a_control_plane_finds_only_its_own_objects() {
        let (grouped, _tx, _events) = listed(vec![
            object("a", "one-1", Some("one")),
            object("a", "one-2", Some("one")),
            object("a", "two-1", Some("two")),
            object("b", "one-1", Some("one")),
            object("a", "unlabelled", None),
        ])
        .await;
        assert!(
            matches!(
                futures::FutureExt::now_or_never(grouped.store().wait_until_ready()),
                Some(Ok(()))
            ),
            "the copy is not ready once listed"
        );
        assert_eq!(names(&grouped.of("a", "one")), ["one-1", "one-2"]);
        assert_eq!(names(&grouped.of("a", "two")), ["two-1"]);
        assert_eq!(names(&grouped.of("b", "one")), ["one-1"]);
        assert!(grouped.of("b", "two").is_empty());
    }

    #[tokio::test]
    async fn at_rest_the_groups_are_kept_and_any_event_makes_them_again() {
        let (grouped, tx, mut events) = listed(vec![object("a", "one-1", Some("one"))]).await;
        assert_eq!(names(&grouped.of("a", "one")), ["one-1"]);
        let kept = grouped.groups.lock().unwrap().at;
        assert!(kept.is_some());
        grouped.of("a", "two");
        assert_eq!(grouped.groups.lock().unwrap().at, kept, "regrouped at rest");

        tx.unbounded_send(watcher::Event::Apply(object("a", "one-2", Some("one"))))
            .unwrap();
        events.next().await;
        assert_eq!(names(&grouped.of("a", "one")), ["one-1", "one-2"]);
        tx.unbounded_send(watcher::Event::Delete(object("a", "one-1", Some("one"))))
            .unwrap();
        events.next().await;
        assert_eq!(names(&grouped.of("a", "one")), ["one-2"]);
        // A label changed moves the object to its new group.
        tx.unbounded_send(watcher::Event::Apply(object("a", "one-2", Some("two"))))
            .unwrap();
        events.next().await;
        assert!(grouped.of("a", "one").is_empty());
        assert_eq!(names(&grouped.of("a", "two")), ["one-2"]);
    }

    #[tokio::test]
    async fn groups_made_while_an_event_is_applied_are_not_kept() {
        let (grouped, _tx, _events) = listed(vec![object("a", "one-1", Some("one"))]).await;
        // As between the two counts around an event: the store may or may not hold it yet.
        grouped.changes.0.fetch_add(1, Ordering::AcqRel);
        assert_eq!(names(&grouped.of("a", "one")), ["one-1"]);
        assert_eq!(grouped.groups.lock().unwrap().at, None);
        grouped.changes.0.fetch_add(1, Ordering::AcqRel);
        grouped.of("a", "one");
        assert_eq!(
            grouped.groups.lock().unwrap().at,
            Some(grouped.changes.now())
        );
    }
}
