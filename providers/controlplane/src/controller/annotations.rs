//! Single-annotation merge patches, for Machines and the KubeadmControlPlane.

use kube::ResourceExt;
use kube::api::{Api, Patch};
use kubeadm_api::cluster::v1beta2::Machine;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use serde_json::json;

use super::{Context, Error, merge_params};

/// Sets (`Some`) or removes (`None`) an annotation on a Machine; a Machine already gone is fine.
pub(super) async fn annotate_machine(
    ctx: &Context,
    namespace: &str,
    machine: &str,
    key: &str,
    value: Option<&str>,
) -> Result<(), Error> {
    let machines = Api::<Machine>::namespaced(ctx.client.clone(), namespace);
    match annotate_object(&machines, machine, key, value).await {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        other => other.map_err(Error::from),
    }
}

/// Sets (`Some`) or removes (`None`) one annotation of an object with a merge patch.
pub(super) async fn annotate_object<K>(
    api: &Api<K>,
    name: &str,
    key: &str,
    value: Option<&str>,
) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({ "metadata": { "annotations": { key: value } } });
    api.patch(name, &merge_params(), &Patch::Merge(&patch))
        .await
        .map(drop)
}

pub(super) async fn annotate_kcp(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    key: &str,
    value: &str,
) -> Result<(), Error> {
    let kcps = Api::<KubeadmControlPlane>::namespaced(
        ctx.client.clone(),
        &kcp.namespace().unwrap_or_default(),
    );
    Ok(annotate_object(&kcps, &kcp.name_any(), key, Some(value)).await?)
}
