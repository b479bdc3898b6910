//! The admission and conversion webhooks of KubeadmConfig and KubeadmConfigTemplate, served on every
//! replica from the rules beside the kinds: defaulting of KubeadmConfigTemplate (only for the
//! topology controller's dry runs, see `kubeadm_api::bootstrap::defaults`), validation of both
//! kinds, and v1beta1 ⇄ v1beta2 conversion.

use kubeadm_api::bootstrap::defaults::default_kubeadm_config_template;
use kubeadm_api::bootstrap::v1beta2::{KubeadmConfig, KubeadmConfigTemplate};
use kubeadm_api::bootstrap::validation::{
    validate_kubeadm_config_create, validate_kubeadm_config_template_create,
    validate_kubeadm_config_template_update, validate_kubeadm_config_update,
};
use kubeadm_api::conversion::convert_object;
use kubeadm_runtime::manager::Error as ManagerError;
use kubeadm_runtime::{Serving, Shutdown, WebhookArgs};
use kubeadm_webhook::{CONVERSION_PATH, Change, WebhookServer, admit};

/// The webhook server of the bootstrap manager.
pub fn server() -> Result<WebhookServer, kubeadm_webhook::Error> {
    WebhookServer::builder()
        .defaulter_with_request::<KubeadmConfigTemplate, _>(|template, request| {
            default_kubeadm_config_template(template, request.dry_run);
            Ok(())
        })
        .validator::<KubeadmConfig, _>(|change| match change {
            Change::Create { new } => admit(new, validate_kubeadm_config_create(new)),
            Change::Update { old, new } => admit(new, validate_kubeadm_config_update(old, new)),
            Change::Delete { .. } => Ok(Vec::new()),
        })
        .validator::<KubeadmConfigTemplate, _>(|change| match change {
            Change::Create { new } => admit(new, validate_kubeadm_config_template_create(new)),
            Change::Update { old, new } => {
                admit(new, validate_kubeadm_config_template_update(old, new))
            }
            Change::Delete { .. } => Ok(Vec::new()),
        })
        // Bootstrap kinds reference no infrastructure kind: no contract lookup is needed.
        .conversion(CONVERSION_PATH, |object, desired| {
            convert_object(object, desired).map_err(|e| e.to_string())
        })
        .build()
}

/// Starts the webhook server of the bootstrap manager on the address and with the certificate of
/// `args`; the returned future serves until `shutdown`.
pub async fn start(args: &WebhookArgs, shutdown: Shutdown) -> Result<Serving, ManagerError> {
    let server = server().map_err(|e| ManagerError::Webhooks(e.to_string()))?;
    kubeadm_webhook::serve_for_manager(server, args, shutdown).await
}

#[cfg(test)]
mod tests {
    use kube::Resource;
    use kubeadm_webhook::admission_webhooks;

    use super::*;

    #[test]
    fn serves_exactly_the_registered_webhooks_of_its_group() {
        let server = server().unwrap();
        let mut expected: Vec<String> = admission_webhooks()
            .iter()
            .filter(|w| w.group == KubeadmConfig::group(&()))
            .map(|w| w.path())
            .chain([CONVERSION_PATH.to_string()])
            .collect();
        expected.sort();
        let served: Vec<&str> = server.paths().collect();
        assert_eq!(served, expected);
    }
}
