//! The `config/` files that deploy the webhook server: the webhook configurations and their Service
//! (`config/webhook/`), and the cert-manager Issuer and Certificate that give the server its serving
//! certificate and the API server the CA to trust it (`config/certmanager/`).
//!
//! Names follow the kubebuilder base layout (namespace `system`, Service `webhook-service`,
//! Certificate `serving-cert`); `$(SERVICE_NAME)`, `$(SERVICE_NAMESPACE)`, `$(CERTIFICATE_NAME)` and
//! `$(CERTIFICATE_NAMESPACE)` are replaced when a provider's components are assembled with its name
//! prefix and namespace.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kubeadm_api::webhook::{
    WEBHOOK_PORT, WEBHOOK_SERVICE_NAME, WEBHOOK_SERVICE_NAMESPACE, admission_webhooks,
    mutating_configuration, validating_configuration,
};
use serde_json::{Value, json};

use crate::generated::{HEADER, documents, kustomization, to_value};

pub const SERVING_CERT_NAME: &str = "serving-cert";
/// The Secret cert-manager writes the pair to; the manager mounts it as `tls.crt`/`tls.key`.
pub const SERVING_CERT_SECRET: &str = "webhook-service-cert";
pub const ISSUER_NAME: &str = "selfsigned-issuer";

/// The Service in front of the manager's webhook port.
pub fn service() -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(WEBHOOK_SERVICE_NAME.into()),
            namespace: Some(WEBHOOK_SERVICE_NAMESPACE.into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                port: 443,
                target_port: Some(IntOrString::Int(WEBHOOK_PORT.into())),
                ..Default::default()
            }]),
            // The manager Deployment's pods (see `components`).
            selector: Some(BTreeMap::from([(
                "control-plane".to_owned(),
                "controller-manager".to_owned(),
            )])),
            ..Default::default()
        }),
        status: None,
    }
}

/// A self-signed Issuer and the serving Certificate for the webhook Service's DNS names.
pub fn cert_manager_objects() -> [Value; 2] {
    // Keys in alphabetical order, so the output is the same whether or not serde_json keeps insertion
    // order.
    let issuer = json!({
        "apiVersion": "cert-manager.io/v1",
        "kind": "Issuer",
        "metadata": {"name": ISSUER_NAME, "namespace": WEBHOOK_SERVICE_NAMESPACE},
        "spec": {"selfSigned": {}}
    });
    let certificate = json!({
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": {"name": SERVING_CERT_NAME, "namespace": WEBHOOK_SERVICE_NAMESPACE},
        "spec": {
            "dnsNames": [
                "$(SERVICE_NAME).$(SERVICE_NAMESPACE).svc",
                "$(SERVICE_NAME).$(SERVICE_NAMESPACE).svc.cluster.local"
            ],
            "issuerRef": {"kind": "Issuer", "name": ISSUER_NAME},
            "secretName": SERVING_CERT_SECRET
        }
    });
    [issuer, certificate]
}

/// Every generated file under `config/webhook` and `config/certmanager`, as `(path from the
/// repository root, content)`.
pub fn files() -> Vec<(String, String)> {
    let webhooks = admission_webhooks();
    let admission_config = vec![json!({
        "fieldSpecs": [
            {"group": "admissionregistration.k8s.io", "kind": "MutatingWebhookConfiguration", "path": "webhooks/clientConfig/service/name"},
            {"group": "admissionregistration.k8s.io", "kind": "ValidatingWebhookConfiguration", "path": "webhooks/clientConfig/service/name"}
        ],
        "kind": "Service",
        "version": "v1"
    })];
    let namespaces = vec![
        json!({"create": true, "group": "admissionregistration.k8s.io", "kind": "MutatingWebhookConfiguration", "path": "webhooks/clientConfig/service/namespace"}),
        json!({"create": true, "group": "admissionregistration.k8s.io", "kind": "ValidatingWebhookConfiguration", "path": "webhooks/clientConfig/service/namespace"}),
    ];
    let issuer_reference = vec![json!({
        "fieldSpecs": [{"group": "cert-manager.io", "kind": "Certificate", "path": "spec/issuerRef/name"}],
        "group": "cert-manager.io",
        "kind": "Issuer"
    })];
    vec![
        (
            "config/webhook/manifests.yaml".into(),
            documents(
                HEADER,
                &[
                    to_value(&mutating_configuration(&webhooks)),
                    to_value(&validating_configuration(&webhooks)),
                ],
            ),
        ),
        (
            "config/webhook/service.yaml".into(),
            documents(HEADER, &[to_value(&service())]),
        ),
        (
            "config/webhook/kustomizeconfig.yaml".into(),
            documents(
                HEADER,
                &[json!({"nameReference": admission_config, "namespace": namespaces})],
            ),
        ),
        (
            "config/webhook/kustomization.yaml".into(),
            kustomization(
                &["manifests.yaml", "service.yaml"],
                Some("kustomizeconfig.yaml"),
            ),
        ),
        (
            "config/certmanager/certificate.yaml".into(),
            documents(HEADER, &cert_manager_objects()),
        ),
        (
            "config/certmanager/kustomizeconfig.yaml".into(),
            documents(HEADER, &[json!({"nameReference": issuer_reference})]),
        ),
        (
            "config/certmanager/kustomization.yaml".into(),
            kustomization(&["certificate.yaml"], Some("kustomizeconfig.yaml")),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use kube::Resource;
    use kubeadm_api::bootstrap::v1beta2::{KubeadmConfig, KubeadmConfigTemplate};
    use kubeadm_api::controlplane::v1beta2::{KubeadmControlPlane, KubeadmControlPlaneTemplate};
    use kubeadm_api::webhook::{Admission, admission_path};

    use super::*;

    /// Every path the server can be asked to serve for our kinds.
    fn servable_paths() -> BTreeSet<String> {
        fn of<K: Resource<DynamicType = ()>>() -> [String; 3] {
            [
                Admission::Mutate,
                Admission::Validate,
                Admission::ValidateScale,
            ]
            .map(|a| admission_path(&K::group(&()), &K::version(&()), &K::kind(&()), a))
        }
        [
            of::<KubeadmConfig>(),
            of::<KubeadmConfigTemplate>(),
            of::<KubeadmControlPlane>(),
            of::<KubeadmControlPlaneTemplate>(),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// `(path, group, version, resource)` of every webhook in the generated `manifests.yaml`.
    fn configured() -> Vec<(String, String, String, String)> {
        let (_, manifests) = files()
            .into_iter()
            .find(|(path, _)| path == "config/webhook/manifests.yaml")
            .unwrap();
        let mut found = Vec::new();
        for document in manifests.split("\n---\n").skip(1) {
            let object: Value = serde_saphyr::from_str(document).unwrap();
            for webhook in object["webhooks"].as_array().unwrap() {
                let rule = &webhook["rules"][0];
                found.push((
                    webhook["clientConfig"]["service"]["path"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                    rule["apiGroups"][0].as_str().unwrap().to_string(),
                    rule["apiVersions"][0].as_str().unwrap().to_string(),
                    rule["resources"][0].as_str().unwrap().to_string(),
                ));
            }
        }
        found
    }

    #[test]
    fn every_configured_path_is_one_admission_path_produces_for_the_rules_kind() {
        let servable = servable_paths();
        let configured = configured();
        assert_eq!(configured.len(), 7);
        for (path, group, version, resource) in configured {
            assert!(servable.contains(&path), "{path} is not an admission_path");
            // The path names the very kind the rule matches (a scale rule, the kind it scales).
            let plural = resource.trim_end_matches("/scale");
            let kind = [
                KubeadmConfig::kind(&()),
                KubeadmConfigTemplate::kind(&()),
                KubeadmControlPlane::kind(&()),
                KubeadmControlPlaneTemplate::kind(&()),
            ]
            .into_iter()
            .find(|kind| format!("{}s", kind.to_lowercase()) == plural)
            .unwrap();
            let admission = match (path.split('-').next(), resource.ends_with("/scale")) {
                (Some("/mutate"), false) => Admission::Mutate,
                (Some("/validate"), false) => Admission::Validate,
                (Some("/validate"), true) => Admission::ValidateScale,
                other => panic!("{path}: {other:?}"),
            };
            assert_eq!(path, admission_path(&group, &version, &kind, admission));
        }
    }

    #[test]
    fn the_service_forwards_443_to_the_webhook_port() {
        let port = &service().spec.unwrap().ports.unwrap()[0];
        assert_eq!(
            (port.port, port.target_port.clone()),
            (443, Some(IntOrString::Int(9443)))
        );
    }
}
