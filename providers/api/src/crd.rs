//! CustomResourceDefinitions generated from the Rust types.
//!
//! Our four kinds are served in v1beta1 and v1beta2 with v1beta2 stored; objects convert through the
//! webhook server. The contract labels tell clusterctl and the core controllers which version of the
//! Cluster API contract each CRD version implements.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, ServiceReference, WebhookClientConfig,
    WebhookConversion,
};
use kube::CustomResourceExt;
use kube::core::crd::merge_crds;

use crate::{bootstrap, cluster, controlplane};

/// The version every kind is stored in (the conversion hub).
pub const STORAGE_VERSION: &str = "v1beta2";

/// Contract labels carried by every provider CRD: `cluster.x-k8s.io/<contract>: <our version>`.
pub const CONTRACT_LABELS: [(&str, &str); 2] = [
    ("cluster.x-k8s.io/v1beta1", "v1beta1"),
    ("cluster.x-k8s.io/v1beta2", "v1beta2"),
];

/// Placeholder webhook service, replaced per provider when the components are assembled
/// (the same convention kubebuilder projects use: namespace `system`, service `webhook-service`).
pub const WEBHOOK_SERVICE_NAMESPACE: &str = "system";
pub const WEBHOOK_SERVICE_NAME: &str = "webhook-service";
pub const CONVERSION_PATH: &str = "/convert";

/// The annotation that has cert-manager write the serving CA into webhook configurations and CRDs.
pub const CA_INJECTION_ANNOTATION: &str = "cert-manager.io/inject-ca-from";
/// `<namespace>/<name>` of the serving Certificate, filled in per provider.
pub const CA_INJECTION_FROM: &str = "$(CERTIFICATE_NAMESPACE)/$(CERTIFICATE_NAME)";

/// KubeadmConfig and KubeadmConfigTemplate.
pub fn bootstrap_crds() -> Vec<CustomResourceDefinition> {
    vec![
        served_and_converted(
            bootstrap::v1beta1::KubeadmConfig::crd(),
            bootstrap::v1beta2::KubeadmConfig::crd(),
        ),
        served_and_converted(
            bootstrap::v1beta1::KubeadmConfigTemplate::crd(),
            bootstrap::v1beta2::KubeadmConfigTemplate::crd(),
        ),
    ]
}

/// KubeadmControlPlane and KubeadmControlPlaneTemplate.
pub fn controlplane_crds() -> Vec<CustomResourceDefinition> {
    vec![
        served_and_converted(
            controlplane::v1beta1::KubeadmControlPlane::crd(),
            controlplane::v1beta2::KubeadmControlPlane::crd(),
        ),
        served_and_converted(
            controlplane::v1beta1::KubeadmControlPlaneTemplate::crd(),
            controlplane::v1beta2::KubeadmControlPlaneTemplate::crd(),
        ),
    ]
}

/// Every CRD this project ships (written to `config/crd/bases`).
pub fn provider_crds() -> Vec<CustomResourceDefinition> {
    let mut crds = bootstrap_crds();
    crds.extend(controlplane_crds());
    crds
}

/// The core Cluster API kinds our providers use, v1beta2 only. In production they come from
/// `clusterctl init`; tests install these.
pub fn core_crds() -> Vec<CustomResourceDefinition> {
    [
        cluster::v1beta2::Cluster::crd(),
        cluster::v1beta2::Machine::crd(),
        cluster::v1beta2::MachineSet::crd(),
        cluster::v1beta2::MachineDeployment::crd(),
        cluster::v1beta2::MachinePool::crd(),
        cluster::v1beta2::MachineHealthCheck::crd(),
    ]
    .into_iter()
    .map(|mut crd| {
        labels(&mut crd).insert("cluster.x-k8s.io/v1beta2".into(), "v1beta2".into());
        crd
    })
    .collect()
}

/// The file name kubebuilder would use: `<group>_<plural>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// YAML of a CRD as written to `config/crd/bases`.
pub fn to_yaml(crd: &CustomResourceDefinition) -> String {
    let body = serde_saphyr::to_string(crd).expect("a CRD always serializes");
    format!("---\n{body}")
}

/// Which of the expected `(file name, content)` pairs are missing or differ in `dir`.
pub fn stale_files(dir: &std::path::Path, expected: &[(String, String)]) -> Vec<String> {
    expected
        .iter()
        .filter_map(|(name, content)| {
            let path = dir.join(name);
            match std::fs::read_to_string(&path) {
                Ok(on_disk) if &on_disk == content => None,
                Ok(_) => Some(format!("{} differs from the types", path.display())),
                Err(_) => Some(format!("{} is missing", path.display())),
            }
        })
        .collect()
}

fn served_and_converted(
    v1beta1: CustomResourceDefinition,
    v1beta2: CustomResourceDefinition,
) -> CustomResourceDefinition {
    let mut crd = merge_crds(vec![v1beta1, v1beta2], STORAGE_VERSION)
        .expect("both versions describe the same kind");
    for version in &mut crd.spec.versions {
        version.served = true;
        version.storage = version.name == STORAGE_VERSION;
        if version.name != STORAGE_VERSION {
            version.deprecated = Some(true);
        }
    }
    // Cluster API declares `spec` optional (Go drops an empty one when it writes), so the schema must accept
    // objects without it.
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            && let Some(required) = schema.required.take()
        {
            let rest: Vec<String> = required
                .into_iter()
                .filter(|field| field != "spec")
                .collect();
            schema.required = (!rest.is_empty()).then_some(rest);
        }
        // A spec without required fields (KubeadmConfig's) defaults to `{}`: the API server fills it in
        // on write and read, so an object created without one reads like an all-defaults config.
        if let Some(spec) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("spec"))
            && spec.required.as_ref().is_none_or(Vec::is_empty)
        {
            spec.default = Some(
                k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSON(
                    serde_json::json!({}),
                ),
            );
        }
    }
    // Oldest first, as users (and kubebuilder) list them.
    crd.spec.versions.sort_by(|a, b| a.name.cmp(&b.name));
    let contract_labels = labels(&mut crd);
    for (key, value) in CONTRACT_LABELS {
        contract_labels.insert(key.into(), value.into());
    }
    // cert-manager fills in the CA the API server needs to trust the conversion webhook.
    crd.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(CA_INJECTION_ANNOTATION.into(), CA_INJECTION_FROM.into());
    crd.spec.conversion = Some(CustomResourceConversion {
        strategy: "Webhook".into(),
        webhook: Some(WebhookConversion {
            conversion_review_versions: vec!["v1".into()],
            client_config: Some(WebhookClientConfig {
                service: Some(ServiceReference {
                    namespace: WEBHOOK_SERVICE_NAMESPACE.into(),
                    name: WEBHOOK_SERVICE_NAME.into(),
                    path: Some(CONVERSION_PATH.into()),
                    port: Some(443),
                }),
                ..Default::default()
            }),
        }),
    });
    crd
}

fn labels(crd: &mut CustomResourceDefinition) -> &mut BTreeMap<String, String> {
    crd.metadata.labels.get_or_insert_with(BTreeMap::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_crds_serve_both_versions_and_store_v1beta2() {
        for crd in provider_crds() {
            let versions: Vec<(&str, bool, bool)> = crd
                .spec
                .versions
                .iter()
                .map(|v| (v.name.as_str(), v.served, v.storage))
                .collect();
            assert_eq!(
                versions,
                [("v1beta1", true, false), ("v1beta2", true, true)],
                "{}",
                crd.spec.names.kind
            );
            let labels = crd.metadata.labels.as_ref().unwrap();
            assert_eq!(labels["cluster.x-k8s.io/v1beta1"], "v1beta1");
            assert_eq!(labels["cluster.x-k8s.io/v1beta2"], "v1beta2");
            let conversion = crd.spec.conversion.as_ref().unwrap();
            assert_eq!(conversion.strategy, "Webhook");
            assert_eq!(
                crd.metadata.annotations.as_ref().unwrap()["cert-manager.io/inject-ca-from"],
                "$(CERTIFICATE_NAMESPACE)/$(CERTIFICATE_NAME)"
            );
        }
    }

    #[test]
    fn only_a_spec_without_required_fields_defaults_to_empty() {
        let defaulted: Vec<(String, String)> = provider_crds()
            .iter()
            .flat_map(|crd| {
                crd.spec.versions.iter().filter_map(move |v| {
                    let spec = &v
                        .schema
                        .as_ref()?
                        .open_api_v3_schema
                        .as_ref()?
                        .properties
                        .as_ref()?["spec"];
                    let default = spec.default.as_ref()?;
                    assert_eq!(default.0, serde_json::json!({}));
                    Some((crd.spec.names.kind.clone(), v.name.clone()))
                })
            })
            .collect();
        assert_eq!(
            defaulted,
            [
                ("KubeadmConfig".to_owned(), "v1beta1".to_owned()),
                ("KubeadmConfig".to_owned(), "v1beta2".to_owned())
            ]
        );
    }

    #[test]
    fn kcp_has_scale_subresource_in_both_versions() {
        let kcp = controlplane_crds()
            .into_iter()
            .find(|c| c.spec.names.kind == "KubeadmControlPlane")
            .unwrap();
        for version in &kcp.spec.versions {
            let scale = version
                .subresources
                .as_ref()
                .and_then(|s| s.scale.as_ref())
                .unwrap_or_else(|| panic!("{} has no scale subresource", version.name));
            assert_eq!(scale.spec_replicas_path, ".spec.replicas");
            assert_eq!(scale.status_replicas_path, ".status.replicas");
            assert_eq!(
                scale.label_selector_path.as_deref(),
                Some(".status.selector")
            );
        }
    }

    #[test]
    fn file_names_follow_kubebuilder() {
        let names: Vec<String> = provider_crds().iter().map(file_name).collect();
        assert_eq!(
            names,
            [
                "bootstrap.cluster.x-k8s.io_kubeadmconfigs.yaml",
                "bootstrap.cluster.x-k8s.io_kubeadmconfigtemplates.yaml",
                "controlplane.cluster.x-k8s.io_kubeadmcontrolplanes.yaml",
                "controlplane.cluster.x-k8s.io_kubeadmcontrolplanetemplates.yaml",
            ]
        );
    }
}
