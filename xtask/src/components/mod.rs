//! The clusterctl release artifacts of both providers, built from the Rust types: one components file
//! per provider (`bootstrap-components.yaml`, `control-plane-components.yaml`) and `metadata.yaml`,
//! laid out as a clusterctl local repository (`<provider-label>/<version>/`).
//!
//! A components file holds exactly one Namespace, the provider's CRDs, its service account and RBAC,
//! the manager Deployment, the webhook Service and configurations, and the cert-manager Issuer and
//! Certificate, every object labelled `cluster.x-k8s.io/provider=<label>`. Names and namespaces are
//! those Cluster API's own kubeadm providers use, so clusterctl treats ours as the same providers.
//!
//! The same objects with kubebuilder's base names (no prefix, namespace `system`) are written to
//! `config/rbac/<provider>/` and `config/manager/<provider>/`; `config/default/<provider>/` holds the
//! assembled components.

mod manager;
pub mod rbac;

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubeadm_api::webhook::{
    CA_INJECTION_ANNOTATION, WEBHOOK_SERVICE_NAME, admission_webhooks, mutating_configuration,
    validating_configuration,
};
use kubeadm_api::{bootstrap, controlplane, crd};
use serde::Serialize;
use serde_json::{Value, json};

use crate::generated::{HEADER, documents, kustomization, to_value};
use crate::webhook::{self, ISSUER_NAME, SERVING_CERT_NAME, SERVING_CERT_SECRET};

pub use kubeadm_api::meta::PROVIDER_LABEL;

/// The release version: `v` + the workspace version.
pub fn version() -> String {
    format!("v{}", env!("CARGO_PKG_VERSION"))
}

/// The Cluster API contract this release implements: the newest contract label on our CRDs.
pub fn contract() -> &'static str {
    let (key, _) = crd::CONTRACT_LABELS[crd::CONTRACT_LABELS.len() - 1];
    key.strip_prefix("cluster.x-k8s.io/")
        .expect("contract labels are cluster.x-k8s.io/<contract>")
}

/// One of the two providers this project ships.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Provider {
    Bootstrap,
    ControlPlane,
}

impl Provider {
    pub const ALL: [Provider; 2] = [Provider::Bootstrap, Provider::ControlPlane];

    /// clusterctl's label for the provider, also the folder of its local repository.
    pub fn label(self) -> &'static str {
        match self {
            Provider::Bootstrap => "bootstrap-kubeadm",
            Provider::ControlPlane => "control-plane-kubeadm",
        }
    }

    /// The namespace Cluster API installs the provider into.
    pub fn namespace(self) -> &'static str {
        match self {
            Provider::Bootstrap => "capi-kubeadm-bootstrap-system",
            Provider::ControlPlane => "capi-kubeadm-control-plane-system",
        }
    }

    /// Prefix of every object name, as Cluster API's kustomizations set it.
    pub fn name_prefix(self) -> &'static str {
        match self {
            Provider::Bootstrap => "capi-kubeadm-bootstrap-",
            Provider::ControlPlane => "capi-kubeadm-control-plane-",
        }
    }

    /// The components file name clusterctl looks for.
    pub fn components_file(self) -> &'static str {
        match self {
            Provider::Bootstrap => "bootstrap-components.yaml",
            Provider::ControlPlane => "control-plane-components.yaml",
        }
    }

    /// The folder below `config/rbac`, `config/manager` and `config/default`.
    pub fn config_dir(self) -> &'static str {
        match self {
            Provider::Bootstrap => "bootstrap",
            Provider::ControlPlane => "control-plane",
        }
    }

    /// The API group of the provider's own kinds.
    pub fn api_group(self) -> &'static str {
        match self {
            Provider::Bootstrap => bootstrap::GROUP,
            Provider::ControlPlane => controlplane::GROUP,
        }
    }

    /// The CRDs of the provider's kinds.
    pub fn crds(self) -> Vec<CustomResourceDefinition> {
        match self {
            Provider::Bootstrap => crd::bootstrap_crds(),
            Provider::ControlPlane => crd::controlplane_crds(),
        }
    }

    /// The service account the manager runs as, `(namespace, name)`.
    pub fn service_account(self) -> (String, String) {
        let naming = Naming::of(self);
        (naming.namespace.clone(), naming.name(rbac::SERVICE_ACCOUNT))
    }

    fn naming(self) -> Naming {
        Naming::of(self)
    }
}

/// How objects are named: kubebuilder's base (`system`, no prefix) or a provider's final names.
#[derive(Clone, Debug)]
pub(crate) struct Naming {
    prefix: String,
    namespace: String,
    labels: BTreeMap<String, String>,
}

impl Naming {
    fn base() -> Self {
        Self {
            prefix: String::new(),
            namespace: crd::WEBHOOK_SERVICE_NAMESPACE.into(),
            labels: BTreeMap::new(),
        }
    }

    fn of(provider: Provider) -> Self {
        Self {
            prefix: provider.name_prefix().into(),
            namespace: provider.namespace().into(),
            labels: BTreeMap::from([(PROVIDER_LABEL.to_owned(), provider.label().to_owned())]),
        }
    }

    fn name(&self, base: &str) -> String {
        format!("{}{base}", self.prefix)
    }

    fn labels(&self) -> Option<BTreeMap<String, String>> {
        (!self.labels.is_empty()).then(|| self.labels.clone())
    }

    fn cluster_scoped(&self, base: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(self.name(base)),
            labels: self.labels(),
            ..Default::default()
        }
    }

    fn namespaced(&self, base: &str) -> ObjectMeta {
        ObjectMeta {
            namespace: Some(self.namespace.clone()),
            ..self.cluster_scoped(base)
        }
    }

    /// `<namespace>/<certificate>`, where cert-manager finds the CA to inject.
    fn ca_injection(&self) -> String {
        format!("{}/{}", self.namespace, self.name(SERVING_CERT_NAME))
    }
}

/// Every object of a provider's components, in the order kustomize writes them (Namespace, CRDs,
/// RBAC, Service, Deployment, cert-manager, webhook configurations).
pub fn objects(provider: Provider) -> Vec<Value> {
    let naming = provider.naming();
    let mut objects = vec![to_value(&manager::namespace(&naming))];
    objects.extend(crds(provider, &naming).iter().map(to_value));
    objects.push(to_value(&rbac::service_account(&naming)));
    objects.push(to_value(&rbac::leader_election_role(&naming)));
    objects.extend(rbac::cluster_roles(provider, &naming).iter().map(to_value));
    objects.push(to_value(&rbac::leader_election_role_binding(&naming)));
    objects.extend(
        rbac::cluster_role_bindings(provider, &naming)
            .iter()
            .map(to_value),
    );
    objects.push(to_value(&webhook_service(&naming)));
    objects.push(to_value(&manager::deployment(provider, &naming)));
    objects.extend(cert_manager_objects(&naming));
    objects.extend(webhook_configurations(provider, &naming));
    objects
}

/// The components file of `provider`.
pub fn components_yaml(provider: Provider) -> String {
    let header = format!(
        "# Generated from the Rust types (`make manifests`, `make release-manifests`); do not edit.\n\
         # clusterctl components of the {} provider {}. Variables (`${{NAME:=default}}`) are\n\
         # filled in by `clusterctl init` from the environment or clusterctl.yaml.\n",
        provider.label(),
        version(),
    );
    documents(&header, &objects(provider))
}

/// clusterctl's `metadata.yaml`: which contract each release series implements.
pub fn metadata_yaml() -> String {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Metadata {
        api_version: &'static str,
        kind: &'static str,
        release_series: Vec<ReleaseSeries>,
    }
    #[derive(Serialize)]
    struct ReleaseSeries {
        major: u64,
        minor: u64,
        contract: &'static str,
    }
    let version = env!("CARGO_PKG_VERSION");
    let mut parts = version.split('.').map(|p| {
        p.parse::<u64>()
            .expect("the workspace version is MAJOR.MINOR.PATCH")
    });
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    let metadata = Metadata {
        api_version: "clusterctl.cluster.x-k8s.io/v1alpha3",
        kind: "Metadata",
        release_series: vec![ReleaseSeries {
            major,
            minor,
            contract: contract(),
        }],
    };
    format!(
        "# Generated by `make release-manifests`.\n{}",
        serde_saphyr::to_string(&metadata).expect("metadata serializes")
    )
}

/// The generated files below `config/rbac`, `config/manager` and `config/default`, as `(path from the
/// repository root, content)`.
pub fn config_files() -> Vec<(String, String)> {
    let base = Naming::base();
    let mut files = Vec::new();
    for provider in Provider::ALL {
        let dir = provider.config_dir();
        let rbac_files = [
            (
                "service_account.yaml",
                vec![to_value(&rbac::service_account(&base))],
            ),
            (
                "role.yaml",
                rbac::cluster_roles(provider, &base)
                    .iter()
                    .map(to_value)
                    .collect(),
            ),
            (
                "role_binding.yaml",
                rbac::cluster_role_bindings(provider, &base)
                    .iter()
                    .map(to_value)
                    .collect(),
            ),
            (
                "leader_election_role.yaml",
                vec![to_value(&rbac::leader_election_role(&base))],
            ),
            (
                "leader_election_role_binding.yaml",
                vec![to_value(&rbac::leader_election_role_binding(&base))],
            ),
        ];
        let names: Vec<&str> = rbac_files.iter().map(|(name, _)| *name).collect();
        for (name, objects) in &rbac_files {
            files.push((
                format!("config/rbac/{dir}/{name}"),
                documents(HEADER, objects),
            ));
        }
        files.push((
            format!("config/rbac/{dir}/kustomization.yaml"),
            kustomization(&names, None),
        ));
        files.push((
            format!("config/manager/{dir}/manager.yaml"),
            documents(HEADER, &[to_value(&manager::deployment(provider, &base))]),
        ));
        files.push((
            format!("config/manager/{dir}/kustomization.yaml"),
            kustomization(&["manager.yaml"], None),
        ));
        files.push((
            format!("config/default/{dir}/{}", provider.components_file()),
            components_yaml(provider),
        ));
        files.push((
            format!("config/default/{dir}/kustomization.yaml"),
            kustomization(&[provider.components_file()], None),
        ));
    }
    files
}

/// The CRDs of `provider` as shipped: conversion through the provider's webhook Service, CA from its
/// Certificate, labelled with the provider.
fn crds(provider: Provider, naming: &Naming) -> Vec<CustomResourceDefinition> {
    provider
        .crds()
        .into_iter()
        .map(|mut crd| {
            crd.metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .extend(naming.labels.clone());
            crd.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(CA_INJECTION_ANNOTATION.into(), naming.ca_injection());
            if let Some(service) = crd
                .spec
                .conversion
                .as_mut()
                .and_then(|c| c.webhook.as_mut())
                .and_then(|w| w.client_config.as_mut())
                .and_then(|c| c.service.as_mut())
            {
                service.name = naming.name(WEBHOOK_SERVICE_NAME);
                service.namespace = naming.namespace.clone();
            }
            crd
        })
        .collect()
}

fn webhook_service(naming: &Naming) -> k8s_openapi::api::core::v1::Service {
    let mut service = webhook::service();
    service.metadata = naming.namespaced(WEBHOOK_SERVICE_NAME);
    if let Some(spec) = service.spec.as_mut() {
        spec.selector = Some(manager::pod_labels(naming));
    }
    service
}

/// The Mutating- and ValidatingWebhookConfiguration of the provider's own kinds.
fn webhook_configurations(provider: Provider, naming: &Naming) -> Vec<Value> {
    let webhooks: Vec<_> = admission_webhooks()
        .into_iter()
        .filter(|w| w.group == provider.api_group())
        .collect();
    let fix_up = |metadata: &mut ObjectMeta, base: &str| {
        let annotations = metadata.annotations.take();
        *metadata = naming.cluster_scoped(base);
        metadata.annotations = annotations;
        metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(CA_INJECTION_ANNOTATION.into(), naming.ca_injection());
    };
    let fix_service =
        |service: Option<&mut k8s_openapi::api::admissionregistration::v1::ServiceReference>| {
            if let Some(service) = service {
                service.name = naming.name(WEBHOOK_SERVICE_NAME);
                service.namespace = naming.namespace.clone();
            }
        };
    let mut mutating = mutating_configuration(&webhooks);
    let mut validating = validating_configuration(&webhooks);
    let mutating_name = mutating.metadata.name.clone().unwrap_or_default();
    let validating_name = validating.metadata.name.clone().unwrap_or_default();
    fix_up(&mut mutating.metadata, &mutating_name);
    fix_up(&mut validating.metadata, &validating_name);
    for webhook in mutating.webhooks.iter_mut().flatten() {
        fix_service(webhook.client_config.service.as_mut());
    }
    for webhook in validating.webhooks.iter_mut().flatten() {
        fix_service(webhook.client_config.service.as_mut());
    }
    let mut configurations = Vec::new();
    if mutating.webhooks.as_ref().is_some_and(|w| !w.is_empty()) {
        configurations.push(to_value(&mutating));
    }
    if validating.webhooks.as_ref().is_some_and(|w| !w.is_empty()) {
        configurations.push(to_value(&validating));
    }
    configurations
}

/// The self-signed Issuer and the serving Certificate for the provider's webhook Service.
fn cert_manager_objects(naming: &Naming) -> [Value; 2] {
    let service = naming.name(WEBHOOK_SERVICE_NAME);
    let namespace = &naming.namespace;
    let metadata =
        |base: &str| serde_json::to_value(naming.namespaced(base)).expect("metadata serializes");
    [
        json!({
            "apiVersion": "cert-manager.io/v1",
            "kind": "Issuer",
            "metadata": metadata(ISSUER_NAME),
            "spec": {"selfSigned": {}}
        }),
        json!({
            "apiVersion": "cert-manager.io/v1",
            "kind": "Certificate",
            "metadata": metadata(SERVING_CERT_NAME),
            "spec": {
                "dnsNames": [
                    format!("{service}.{namespace}.svc"),
                    format!("{service}.{namespace}.svc.cluster.local"),
                ],
                "issuerRef": {"kind": "Issuer", "name": naming.name(ISSUER_NAME)},
                "secretName": naming.name(SERVING_CERT_SECRET)
            }
        }),
    ]
}

/// Whether `file_name` is a cluster template clusterctl serves (`cluster-template.yaml`,
/// `cluster-template-<flavor>.yaml`).
pub fn is_cluster_template(file_name: &str) -> bool {
    file_name.starts_with("cluster-template") && file_name.ends_with(".yaml")
}

/// The files of the clusterctl local repository, as `(path below the repository root, content)`:
/// `<provider-label>/<version>/` with the components and `metadata.yaml` of each provider. The cluster
/// `templates` (`(file name, content)`) go with the control-plane provider, for
/// `clusterctl generate cluster --from <that folder>/cluster-template.yaml` (clusterctl itself looks
/// for templates in the infrastructure provider's repository).
pub fn repository_files(templates: &[(String, String)]) -> Vec<(String, String)> {
    let version = version();
    let mut files = Vec::new();
    for provider in Provider::ALL {
        let dir = format!("{}/{version}", provider.label());
        files.push((
            format!("{dir}/{}", provider.components_file()),
            components_yaml(provider),
        ));
        files.push((format!("{dir}/metadata.yaml"), metadata_yaml()));
        if provider == Provider::ControlPlane {
            for (name, content) in templates {
                files.push((format!("{dir}/{name}"), content.clone()));
            }
        }
    }
    files
}
