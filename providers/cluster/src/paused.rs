//! Cluster API's pause: a paused Cluster (`spec.paused`) or the `cluster.x-k8s.io/paused` annotation on the
//! Cluster or on the object itself stops every controller from changing it.

use kube::ResourceExt;
use kubeadm_api::cluster::v1beta2::Cluster;
use kubeadm_api::meta::PAUSED_ANNOTATION;

/// Whether `object` of `cluster` is paused.
pub fn is_paused(cluster: &Cluster, object: &impl ResourceExt) -> bool {
    cluster.spec.paused == Some(true)
        || cluster.annotations().contains_key(PAUSED_ANNOTATION)
        || object.annotations().contains_key(PAUSED_ANNOTATION)
}
