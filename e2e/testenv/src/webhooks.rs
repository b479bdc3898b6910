//! Admission webhook configurations and CRD conversions that call a webhook server on loopback by
//! URL instead of through a Service, trusting a test CA: how a test puts a real kube-apiserver in
//! front of a webhook server it runs itself.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};

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
    let Some(client) = crd
        .spec
        .conversion
        .as_mut()
        .and_then(|c| c.webhook.as_mut())
        .and_then(|w| w.client_config.as_mut())
    else {
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

/// Creates both configurations; the API server calls the webhooks from then on.
pub async fn register(
    client: &kube::Client,
    mutating: &MutatingWebhookConfiguration,
    validating: &ValidatingWebhookConfiguration,
) -> Result<()> {
    let params = PostParams::default();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&params, mutating)
        .await?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&params, validating)
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
