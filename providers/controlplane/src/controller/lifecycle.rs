//! The finalizer: added before anything is created, removed once deletion has taken every machine.

use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use kubeadm_api::cluster::v1beta2::Machine;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::meta::CLEANUP_HOOK_ANNOTATION;
use kubeadm_api::meta::{CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL};

use super::annotations::annotate_machine;
use super::{Context, Error, machines, merge_params, owner_cluster};

/// Finalizer on every KubeadmControlPlane, as Cluster API names it.
pub use kubeadm_api::meta::CONTROL_PLANE_FINALIZER as FINALIZER;

pub(super) enum Cleanup {
    Done,
    Waiting,
}

pub(super) fn has_finalizer(kcp: &KubeadmControlPlane) -> bool {
    kcp.finalizers().iter().any(|f| f == FINALIZER)
}

/// Adds the finalizer; the patch wakes the next reconcile, which then sees it.
pub(super) async fn add_finalizer(ctx: &Context, kcp: &KubeadmControlPlane) -> Result<(), Error> {
    let mut finalizers = kcp.finalizers().to_vec();
    finalizers.push(FINALIZER.to_owned());
    set_finalizers(ctx, kcp, finalizers).await
}

pub(super) async fn remove_finalizer(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
) -> Result<(), Error> {
    let kept = kcp
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    set_finalizers(ctx, kcp, kept).await
}

/// Replaces the finalizer list, failing if the object changed since it was read.
async fn set_finalizers(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    let api: Api<KubeadmControlPlane> =
        Api::namespaced(ctx.client.clone(), &kcp.namespace().unwrap_or_default());
    let patch = serde_json::json!({
        "metadata": { "finalizers": finalizers, "resourceVersion": kcp.resource_version() }
    });
    api.patch(
        &kcp.name_any(),
        &merge_params(),
        &kube::api::Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// Deletion: workers go first (their nodes need the API server to drain), then every control-plane Machine;
/// the finalizer is removed once none is left.
pub(super) async fn cleanup(kcp: &KubeadmControlPlane, ctx: &Context) -> Result<Cleanup, Error> {
    let namespace = kcp.namespace().unwrap_or_default();
    let Some(cluster_name) = kcp
        .labels()
        .get(CLUSTER_NAME_LABEL)
        .cloned()
        .or_else(|| owner_cluster(kcp))
    else {
        return Ok(Cleanup::Done);
    };
    ctx.etcd
        .forwards
        .forget(&(namespace.clone(), cluster_name.clone()));
    ctx.etcd.forget(&(namespace.clone(), cluster_name.clone()));
    ctx.workload.forget(&namespace, &cluster_name);
    ctx.api_servers
        .forget(&(namespace.clone(), cluster_name.clone()));
    ctx.watches
        .close(&(namespace.clone(), cluster_name.clone()));
    let machines_api: Api<Machine> = Api::namespaced(ctx.client.clone(), &namespace);
    let all = machines_api
        .list(&ListParams::default().labels(&format!("{CLUSTER_NAME_LABEL}={cluster_name}")))
        .await?;
    let workers = all
        .items
        .iter()
        .filter(|m| !m.labels().contains_key(CONTROL_PLANE_LABEL))
        .count();
    if workers > 0 {
        tracing::info!(workers, "waiting for worker machines to be deleted first");
        return Ok(Cleanup::Waiting);
    }
    let owned: Vec<&Machine> = all
        .items
        .iter()
        .filter(|m| machines::owned_by(m, kcp))
        .collect();
    if owned.is_empty() {
        return Ok(Cleanup::Done);
    }
    for machine in owned {
        let name = machine.name_any();
        // The whole cluster goes, its etcd with it: no member needs to leave first.
        if machine.annotations().contains_key(CLEANUP_HOOK_ANNOTATION) {
            annotate_machine(ctx, &namespace, &name, CLEANUP_HOOK_ANNOTATION, None).await?;
        }
        if machine.meta().deletion_timestamp.is_none() {
            machines::delete(ctx, &namespace, &name).await?;
        }
    }
    Ok(Cleanup::Waiting)
}
