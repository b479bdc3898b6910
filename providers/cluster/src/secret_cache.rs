//! A watch-fed copy of the cluster Secrets a reconcile reads every time and that rarely change: the
//! certificates (`<cluster>-ca`, `-etcd`, `-proxy`, `-sa`) and the admin kubeconfig. Only Secrets with
//! the `cluster.x-k8s.io/cluster-name` label are watched (what Cluster API's providers put on theirs);
//! one the copy lacks (not listed yet, or without the label, e.g. a CA the user brought) is read live.
//! Other labelled Secrets (bootstrap data, one per Machine; snapshots) are not kept at all.

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kubeadm_api::meta::CLUSTER_NAME_LABEL;
use kubeadm_runtime::watching;

use crate::certificates::CertKind;
use crate::workload::kubeconfig_secret_name;

pub struct SecretCache(Store<Secret>);

impl SecretCache {
    /// The cache of the Secrets `api` lists (one namespace or all), empty until the future (to be polled
    /// for as long as the cache is used) has listed.
    pub fn new(api: Api<Secret>) -> (Self, impl Future<Output = ()> + use<>) {
        let (store, writer) = reflector::store();
        // Slimmed before the store takes them in: the store keeps what the watch hands it.
        let watched = watching::watch(api, watcher::Config::default().labels(CLUSTER_NAME_LABEL))
            .filter_map(|event| std::future::ready(event.map(kept).transpose()));
        let feed = reflector::reflector(writer, watched).for_each(|event| async move {
            if let Err(e) = event {
                tracing::debug!(error = %e, "cluster Secrets watch failed; retrying");
            }
        });
        (Self(store), feed)
    }

    /// The Secret `namespace/name`, if the copy has it (one it does not keep, e.g. a `<cluster>-ca`
    /// labelled with another cluster's name, is read live).
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Secret>> {
        self.0.get(&ObjectRef::new(name).within(namespace))
    }
}

/// The watch event the copy takes in: the cluster certificates and kubeconfigs, slimmed; any other
/// Secret is left out, and one that stopped being read (its label changed) is removed.
fn kept(event: watcher::Event<Secret>) -> Option<watcher::Event<Secret>> {
    match event {
        watcher::Event::Apply(mut secret) => Some(if read_by_reconcile(&secret) {
            watching::slim_for_copy(&mut secret);
            watcher::Event::Apply(secret)
        } else {
            watcher::Event::Delete(secret)
        }),
        watcher::Event::InitApply(mut secret) => read_by_reconcile(&secret).then(|| {
            watching::slim_for_copy(&mut secret);
            watcher::Event::InitApply(secret)
        }),
        other => Some(other),
    }
}

fn read_by_reconcile(secret: &Secret) -> bool {
    secret
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(CLUSTER_NAME_LABEL))
        .zip(secret.metadata.name.as_deref())
        .is_some_and(|(cluster, name)| read_for_cluster(cluster, name))
}

fn read_for_cluster(cluster: &str, name: &str) -> bool {
    name == kubeconfig_secret_name(cluster)
        || CertKind::ALL
            .iter()
            .any(|kind| name == kind.secret_name(cluster))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(name: &str, cluster: &str) -> Secret {
        let mut secret = Secret::default();
        secret.metadata.name = Some(name.into());
        secret.metadata.namespace = Some("ns".into());
        secret.metadata.labels = Some([(CLUSTER_NAME_LABEL.to_owned(), cluster.to_owned())].into());
        secret.metadata.managed_fields = Some(vec![Default::default()]);
        secret.data = Some([("value".to_owned(), ByteString(b"x".to_vec()))].into());
        secret
    }

    fn cache_of(events: Vec<watcher::Event<Secret>>) -> SecretCache {
        let (store, mut writer) = reflector::store();
        for event in events.into_iter().filter_map(kept) {
            writer.apply_watcher_event(&event);
        }
        SecretCache(store)
    }

    #[test]
    fn only_certificates_and_kubeconfigs_are_kept() {
        let listed = [
            ("prod-ca", "prod"),
            ("prod-etcd", "prod"),
            ("prod-proxy", "prod"),
            ("prod-sa", "prod"),
            ("prod-kubeconfig", "prod"),
            // Bootstrap data, another cluster's name, a snapshot: not kept.
            ("prod-control-plane-x7b2k", "prod"),
            ("other-ca", "prod"),
            ("prod-etcd-snapshot-1", "prod"),
        ];
        let mut events = vec![watcher::Event::Init];
        events.extend(
            listed
                .iter()
                .map(|(name, cluster)| watcher::Event::InitApply(secret(name, cluster))),
        );
        events.push(watcher::Event::InitDone);
        events.push(watcher::Event::Apply(secret("prod-md-0-j8s2x", "prod")));
        let cache = cache_of(events);
        for name in [
            "prod-ca",
            "prod-etcd",
            "prod-proxy",
            "prod-sa",
            "prod-kubeconfig",
        ] {
            let kept = cache.get("ns", name).expect(name);
            assert!(kept.data.is_some(), "{name}");
            assert!(kept.metadata.managed_fields.is_none(), "{name}");
        }
        assert_eq!(cache.0.state().len(), 5);
    }

    #[test]
    fn a_secret_that_stops_being_read_leaves_the_copy() {
        // Relabelled for another cluster: its name no longer names one of that cluster's Secrets.
        let cache = cache_of(vec![
            watcher::Event::Apply(secret("prod-ca", "prod")),
            watcher::Event::Apply(secret("prod-etcd", "prod")),
            watcher::Event::Apply(secret("prod-etcd", "other")),
        ]);
        assert!(cache.get("ns", "prod-ca").is_some());
        assert!(cache.get("ns", "prod-etcd").is_none(), "read live instead");
    }
}
