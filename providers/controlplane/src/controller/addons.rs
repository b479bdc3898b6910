//! Applies [`crate::addons`] to the workload cluster once the control plane is up to date: the kube-proxy
//! DaemonSet's image follows the Kubernetes version, CoreDNS follows `clusterConfiguration.dns`.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::meta::{SKIP_COREDNS_ANNOTATION, SKIP_KUBE_PROXY_ANNOTATION};
use serde_json::json;

use super::workload::Unreachable;
use crate::addons::{self, COREDNS, COREFILE_BACKUP_KEY, COREFILE_KEY, KUBE_PROXY};
use crate::desired::DesiredState;

/// What changed, one line each; `Err` names what could not be done and why.
pub(super) async fn reconcile(
    client: &kube::Client,
    kcp: &KubeadmControlPlane,
    desired: &DesiredState,
) -> Result<Vec<String>, String> {
    let cluster_configuration = &desired.init.cluster_configuration;
    let image_repository = cluster_configuration.image_repository.as_deref();
    let mut changes = Vec::new();
    if !kcp.annotations().contains_key(SKIP_KUBE_PROXY_ANNOTATION)
        && let Some(change) = kube_proxy(client, &desired.version, image_repository).await?
    {
        changes.push(change);
    }
    if !kcp.annotations().contains_key(SKIP_COREDNS_ANNOTATION)
        && let Some(change) = coredns(
            client,
            cluster_configuration.dns.image_repository.as_deref(),
            cluster_configuration.dns.image_tag.as_deref(),
            image_repository,
        )
        .await?
    {
        changes.push(change);
    }
    Ok(changes)
}

/// A digest of what [`reconcile`] applies: the version, the image repositories and CoreDNS tag, and
/// which addons are skipped.
pub(super) fn inputs(kcp: &KubeadmControlPlane, desired: &DesiredState) -> u64 {
    use std::hash::{Hash, Hasher};
    let cluster_configuration = &desired.init.cluster_configuration;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (
        &desired.version,
        &cluster_configuration.image_repository,
        &cluster_configuration.dns.image_repository,
        &cluster_configuration.dns.image_tag,
        kcp.annotations().contains_key(SKIP_KUBE_PROXY_ANNOTATION),
        kcp.annotations().contains_key(SKIP_COREDNS_ANNOTATION),
    )
        .hash(&mut hasher);
    hasher.finish()
}

fn api_error(what: &str) -> impl Fn(kube::Error) -> String + '_ {
    move |e| format!("{what}: {}", Unreachable::from(e))
}

async fn kube_proxy(
    client: &kube::Client,
    version: &str,
    image_repository: Option<&str>,
) -> Result<Option<String>, String> {
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), "kube-system");
    let what = "DaemonSet kube-system/kube-proxy";
    let found = daemon_sets
        .get_opt(KUBE_PROXY)
        .await
        .map_err(api_error(what))?;
    let pod = found
        .as_ref()
        .and_then(|d| d.spec.as_ref()?.template.spec.as_ref());
    let Some(current) = image_of(pod, KUBE_PROXY) else {
        return Ok(None);
    };
    let target = addons::kube_proxy_image(&current, version, image_repository)
        .map_err(|e| format!("{what}: {e}"))?;
    if target == current {
        return Ok(None);
    }
    set_image(&daemon_sets, KUBE_PROXY, KUBE_PROXY, &target)
        .await
        .map_err(api_error(what))?;
    Ok(Some(format!("{what}: image {current} → {target}")))
}

async fn coredns(
    client: &kube::Client,
    dns_image_repository: Option<&str>,
    dns_image_tag: Option<&str>,
    image_repository: Option<&str>,
) -> Result<Option<String>, String> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "kube-system");
    let what = "Deployment kube-system/coredns";
    let found = deployments
        .get_opt(COREDNS)
        .await
        .map_err(api_error(what))?;
    let pod = found
        .as_ref()
        .and_then(|d| d.spec.as_ref()?.template.spec.as_ref());
    let Some(current) = image_of(pod, COREDNS) else {
        return Ok(None);
    };
    let Some(upgrade) = addons::coredns_upgrade(
        &current,
        dns_image_repository,
        dns_image_tag,
        image_repository,
    )
    .map_err(|e| format!("{what}: {e}"))?
    else {
        return Ok(None);
    };
    // The running Corefile is kept as Corefile-backup, to go back to the old image by hand.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    let config_what = "ConfigMap kube-system/coredns";
    if let Some(config) = config_maps
        .get_opt(COREDNS)
        .await
        .map_err(api_error(config_what))?
        && let Some(corefile) = config.data.as_ref().and_then(|d| d.get(COREFILE_KEY))
    {
        let patch = json!({
            "metadata": { "resourceVersion": config.resource_version() },
            "data": { COREFILE_BACKUP_KEY: corefile },
        });
        config_maps
            .patch(COREDNS, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_error(config_what))?;
    }
    set_image(&deployments, COREDNS, COREDNS, &upgrade.to_image)
        .await
        .map_err(api_error(what))?;
    Ok(Some(format!(
        "{what}: image {} → {}",
        upgrade.from_image, upgrade.to_image
    )))
}

/// The image of the pod template's container named `container`, if the object and container exist.
fn image_of(pod: Option<&k8s_openapi::api::core::v1::PodSpec>, container: &str) -> Option<String> {
    pod?.containers
        .iter()
        .find(|c| c.name == container)?
        .image
        .clone()
}

/// Changes one container's image; the strategic merge keys containers by name, so the others stay.
async fn set_image<K>(api: &Api<K>, object: &str, container: &str, image: &str) -> kube::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({ "spec": { "template": { "spec": {
        "containers": [{ "name": container, "image": image }],
    } } } });
    api.patch(object, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .map(drop)
}
