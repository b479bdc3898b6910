//! A watch-fed copy of the cluster Secrets a reconcile reads every time and that rarely change: the
//! certificates (`<cluster>-ca`, `-etcd`, `-proxy`, `-sa`) and the admin kubeconfig. Only Secrets with
//! the `cluster.x-k8s.io/cluster-name` label are watched (what Cluster API's providers put on theirs);
//! one the copy lacks (not listed yet, or without the label, e.g. a CA the user brought) is read live.
//! Other labelled Secrets (bootstrap data, snapshots) are kept without their data.

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
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
            .modify(slim);
        let feed = reflector::reflector(writer, watched).for_each(|event| async move {
            if let Err(e) = event {
                tracing::debug!(error = %e, "cluster Secrets watch failed; retrying");
            }
        });
        (Self(store), feed)
    }

    /// The Secret `namespace/name`, if the copy has it with its data (one kept without, e.g. a
    /// `<cluster>-ca` labelled with another cluster's name, is read live).
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Secret>> {
        self.0
            .get(&ObjectRef::new(name).within(namespace))
            .filter(|secret| secret.data.is_some())
    }
}

/// Keeps of each Secret what a reconcile reads: the data of cluster certificates and kubeconfigs
/// only, and no managed fields.
fn slim(secret: &mut Secret) {
    watching::without_managed_fields(secret);
    let read = secret
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(CLUSTER_NAME_LABEL))
        .zip(secret.metadata.name.as_deref())
        .is_some_and(|(cluster, name)| read_by_reconcile(cluster, name));
    if !read {
        secret.data = None;
        secret.string_data = None;
    }
}

fn read_by_reconcile(cluster: &str, name: &str) -> bool {
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
        secret.metadata.labels = Some([(CLUSTER_NAME_LABEL.to_owned(), cluster.to_owned())].into());
        secret.metadata.managed_fields = Some(vec![Default::default()]);
        secret.data = Some([("value".to_owned(), ByteString(b"x".to_vec()))].into());
        secret
    }

    #[test]
    fn a_secret_kept_without_its_data_is_read_live() {
        let (store, mut writer) = reflector::store();
        for (name, cluster) in [("prod-ca", "prod"), ("prod-etcd", "other")] {
            let mut secret = secret(name, cluster);
            secret.metadata.namespace = Some("ns".into());
            slim(&mut secret);
            writer.apply_watcher_event(&watcher::Event::Apply(secret));
        }
        let cache = SecretCache(store);
        assert!(cache.get("ns", "prod-ca").is_some());
        assert!(
            cache.get("ns", "prod-etcd").is_none(),
            "labelled for another cluster"
        );
        assert!(cache.get("ns", "prod-sa").is_none());
    }

    #[test]
    fn only_certificates_and_kubeconfigs_keep_their_data() {
        for name in [
            "prod-ca",
            "prod-etcd",
            "prod-proxy",
            "prod-sa",
            "prod-kubeconfig",
        ] {
            let mut kept = secret(name, "prod");
            slim(&mut kept);
            assert!(kept.data.is_some(), "{name}");
            assert!(kept.metadata.managed_fields.is_none());
        }
        // Bootstrap data, another cluster's name, a snapshot: metadata only.
        for (name, cluster) in [
            ("prod-control-plane-x7b2k", "prod"),
            ("other-ca", "prod"),
            ("prod-etcd-snapshot-1", "prod"),
        ] {
            let mut slimmed = secret(name, cluster);
            slim(&mut slimmed);
            assert!(slimmed.data.is_none(), "{name}");
        }
    }
}
