//! Admission webhook configurations and CRD conversions that call a webhook server on loopback by
//! URL instead of through a Service, trusting a test CA: how a test puts a real kube-apiserver in
//! front of a webhook server it runs itself.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;

use crate::{Error, Result};

/// Points every webhook of `config` at `base_url` (e.g. `https://127.0.0.1:9443`) followed by the
/// path of its Service reference, trusting `ca_pem`.
pub fn mutating_at(
    config: &mut MutatingWebhookConfiguration,
    base_url: &str,
    ca_pem: &str,
) -> Result<()> {
    for webhook in config.webhooks.iter_mut().flatten() {
        let client = &mut webhook.client_config;
        let path = service_path(client.service.take(), &webhook.name)?;
        client.url = Some(format!("{base_url}{path}"));
        client.ca_bundle = Some(ByteString(ca_pem.as_bytes().to_vec()));
    }
    Ok(())
}

/// [`mutating_at`] for a validating configuration.
pub fn validating_at(
    config: &mut ValidatingWebhookConfiguration,
    base_url: &str,
    ca_pem: &str,
) -> Result<()> {
    for webhook in config.webhooks.iter_mut().flatten() {
        let client = &mut webhook.client_config;
        let path = service_path(client.service.take(), &webhook.name)?;
        client.url = Some(format!("{base_url}{path}"));
        client.ca_bundle = Some(ByteString(ca_pem.as_bytes().to_vec()));
    }
    Ok(())
}

/// Points the conversion webhook of `crd` at `base_url` followed by the path of its Service
/// reference, trusting `ca_pem`. A CRD without a conversion webhook is left alone.
pub fn conversion_at(
    crd: &mut CustomResourceDefinition,
    base_url: &str,
    ca_pem: &str,
) -> Result<()> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let Some(client) = conversion_client(crd) else {
        return Ok(());
    };
    let path = match client.service.take() {
        Some(service) => service.path.unwrap_or_default(),
        None => {
            return Err(Error::Other(format!(
                "CRD {name}: conversion has no service to replace"
            )));
        }
    };
    client.url = Some(format!("{base_url}{path}"));
    client.ca_bundle = Some(ByteString(ca_pem.as_bytes().to_vec()));
    Ok(())
}

/// Where the API server sends `crd`'s conversion reviews, if a webhook converts it.
pub fn conversion_client(
    crd: &mut CustomResourceDefinition,
) -> Option<
    &mut k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::WebhookClientConfig,
> {
    crd.spec
        .conversion
        .as_mut()
        .and_then(|c| c.webhook.as_mut())
        .and_then(|w| w.client_config.as_mut())
}

/// Creates both configurations; the API server calls the webhooks from then on.
pub async fn register(
    client: &kube::Client,
    mutating: &MutatingWebhookConfiguration,
    validating: &ValidatingWebhookConfiguration,
) -> Result<()> {
    // Applied, not created: a manager started again (a new port, a new certificate) re-registers.
    let params = kube::api::PatchParams::apply("testenv").force();
    let name = |meta: &kube::api::ObjectMeta| meta.name.clone().unwrap_or_default();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(
            &name(&mutating.metadata),
            &params,
            &kube::api::Patch::Apply(mutating),
        )
        .await?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(
            &name(&validating.metadata),
            &params,
            &kube::api::Patch::Apply(validating),
        )
        .await?;
    Ok(())
}

fn service_path(
    service: Option<k8s_openapi::api::admissionregistration::v1::ServiceReference>,
    webhook: &str,
) -> Result<String> {
    service
        .map(|s| s.path.unwrap_or_default())
        .ok_or_else(|| Error::Other(format!("webhook {webhook} has no service to replace")))
}

/// The API group whose kinds a manager binary serves, from its name.
pub fn owned_group(binary: &std::path::Path) -> &'static str {
    if is_bootstrap_manager(binary) {
        "bootstrap.cluster.x-k8s.io"
    } else {
        "controlplane.cluster.x-k8s.io"
    }
}

/// Arguments a manager needs locally: simulated nodes have no kubelet to port-forward through, so the
/// control-plane manager reaches their etcd members at the client URLs the etcd pods announce.
pub fn local_args(binary: &std::path::Path) -> &'static [&'static str] {
    if is_bootstrap_manager(binary) {
        &[]
    } else {
        &["--etcd-access=direct"]
    }
}

fn is_bootstrap_manager(binary: &std::path::Path) -> bool {
    let name = binary
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    name.contains("bootstrap")
}

/// The names of the mutating and validating webhook configurations [`route_group_to`] registers for
/// `group`.
pub fn configurations_of(group: &str) -> [String; 2] {
    [format!("{group}-defaulting"), format!("{group}-validation")]
}

/// Registers the admission webhooks and CRD conversions of `group` with the API server, pointed at a
/// manager's webhook server on loopback instead of the in-cluster Service.
pub async fn route_group_to(
    plane: &crate::ManagementPlane,
    group: &str,
    crds: &[CustomResourceDefinition],
    url: &str,
    ca_pem: &str,
) -> Result<()> {
    use kubeadm_api::webhook::{
        admission_webhooks, mutating_configuration, validating_configuration,
    };
    let client = plane.client().await?;
    let ours: Vec<_> = admission_webhooks()
        .into_iter()
        .filter(|w| w.group == group)
        .collect();
    let mut mutating = mutating_configuration(&ours);
    let mut validating = validating_configuration(&ours);
    let [mutating_name, validating_name] = configurations_of(group);
    mutating.metadata.name = Some(mutating_name);
    validating.metadata.name = Some(validating_name);
    mutating_at(&mut mutating, url, ca_pem)?;
    validating_at(&mut validating, url, ca_pem)?;
    register(&client, &mutating, &validating).await?;
    let mut converted = Vec::new();
    for crd in crds.iter().filter(|c| c.spec.group == group) {
        let mut crd = crd.clone();
        conversion_at(&mut crd, url, ca_pem)?;
        converted.push(crd);
    }
    plane.install_crds(&converted).await
}
