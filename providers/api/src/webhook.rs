//! Which admission webhooks our kinds have, where the webhook server answers for them, and the
//! webhook configurations that register them with the API server. The configurations in `config/`,
//! those the test environment registers and the server in the managers all take their paths from
//! here, so they cannot disagree.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

use crate::bootstrap::v1beta2::{KubeadmConfig, KubeadmConfigTemplate};
use crate::controlplane::v1beta2::{KubeadmControlPlane, KubeadmControlPlaneTemplate};
pub use crate::crd::{
    CA_INJECTION_ANNOTATION, CA_INJECTION_FROM, CONVERSION_PATH, WEBHOOK_SERVICE_NAME,
    WEBHOOK_SERVICE_NAMESPACE,
};

/// The port the managers serve webhooks on; the webhook Service forwards 443 to it.
pub const WEBHOOK_PORT: u16 = 9443;

/// Where the managers read the serving certificate (`tls.crt`, `tls.key`), controller-runtime's
/// default; the Deployments mount the cert-manager Secret there.
pub const WEBHOOK_CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";

/// What an admission webhook does with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Admission {
    /// Defaulting: answers with a patch.
    Mutate,
    /// Validation of the object.
    Validate,
    /// Validation of the `scale` subresource (`kubectl scale`, autoscalers).
    ValidateScale,
}

impl Admission {
    fn prefix(self) -> &'static str {
        match self {
            Admission::Mutate => "mutate",
            Admission::Validate => "validate",
            Admission::ValidateScale => "validate-scale",
        }
    }
}

/// The path kubebuilder projects serve a kind's admission webhook at, e.g.
/// `/mutate-controlplane-cluster-x-k8s-io-v1beta2-kubeadmcontrolplane`: the group with dots turned into
/// dashes, the version, and the kind in lower case.
pub fn admission_path(group: &str, version: &str, kind: &str, admission: Admission) -> String {
    format!(
        "/{}-{}-{}-{}",
        admission.prefix(),
        group.replace('.', "-"),
        version,
        kind.to_lowercase()
    )
}

/// One admission webhook of one of our kinds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmissionWebhook {
    pub group: String,
    pub version: String,
    pub kind: String,
    /// The resource name, e.g. `kubeadmcontrolplanes`.
    pub plural: String,
    pub admission: Admission,
}

impl AdmissionWebhook {
    fn of<K: Resource<DynamicType = ()>>(admission: Admission) -> Self {
        Self {
            group: K::group(&()).into_owned(),
            version: K::version(&()).into_owned(),
            kind: K::kind(&()).into_owned(),
            plural: K::plural(&()).into_owned(),
            admission,
        }
    }

    /// Where the server answers, see [`admission_path`].
    pub fn path(&self) -> String {
        admission_path(&self.group, &self.version, &self.kind, self.admission)
    }

    /// The webhook's name in its configuration, e.g.
    /// `validation-scale.kubeadmcontrolplane.controlplane.cluster.x-k8s.io`.
    pub fn name(&self) -> String {
        let what = match self.admission {
            Admission::Mutate => "default",
            Admission::Validate => "validation",
            Admission::ValidateScale => "validation-scale",
        };
        format!("{what}.{}.{}", self.kind.to_lowercase(), self.group)
    }

    /// The resource (or subresource) the API server sends, e.g. `kubeadmcontrolplanes/scale`.
    pub fn resource(&self) -> String {
        match self.admission {
            Admission::ValidateScale => format!("{}/scale", self.plural),
            Admission::Mutate | Admission::Validate => self.plural.clone(),
        }
    }

    /// The operations the webhook is called for: scaling is an update of the subresource.
    pub fn operations(&self) -> &'static [&'static str] {
        match self.admission {
            Admission::ValidateScale => &["UPDATE"],
            Admission::Mutate | Admission::Validate => &["CREATE", "UPDATE"],
        }
    }
}

/// Every admission webhook of our kinds, as Cluster API v1.14 registers them: defaulting for
/// KubeadmConfigTemplate and KubeadmControlPlane, validation for all four kinds and for scaling a
/// KubeadmControlPlane. A manager serves those of its own group.
pub fn admission_webhooks() -> Vec<AdmissionWebhook> {
    use Admission::{Mutate, Validate, ValidateScale};
    vec![
        AdmissionWebhook::of::<KubeadmConfigTemplate>(Mutate),
        AdmissionWebhook::of::<KubeadmControlPlane>(Mutate),
        AdmissionWebhook::of::<KubeadmConfig>(Validate),
        AdmissionWebhook::of::<KubeadmConfigTemplate>(Validate),
        AdmissionWebhook::of::<KubeadmControlPlane>(Validate),
        AdmissionWebhook::of::<KubeadmControlPlane>(ValidateScale),
        AdmissionWebhook::of::<KubeadmControlPlaneTemplate>(Validate),
    ]
}

const MUTATING_NAME: &str = "mutating-webhook-configuration";
const VALIDATING_NAME: &str = "validating-webhook-configuration";

/// The MutatingWebhookConfiguration of the defaulting webhooks among `webhooks`.
pub fn mutating_configuration(webhooks: &[AdmissionWebhook]) -> MutatingWebhookConfiguration {
    let webhooks = sorted(webhooks, |w| w.admission == Admission::Mutate)
        .map(|webhook| MutatingWebhook {
            admission_review_versions: vec!["v1".into()],
            client_config: client_config(webhook),
            failure_policy: Some("Fail".into()),
            match_policy: Some("Equivalent".into()),
            name: webhook.name(),
            rules: Some(vec![rule(webhook)]),
            side_effects: "None".into(),
            ..Default::default()
        })
        .collect();
    MutatingWebhookConfiguration {
        metadata: annotated(MUTATING_NAME),
        webhooks: Some(webhooks),
    }
}

/// The ValidatingWebhookConfiguration of the validating webhooks among `webhooks`.
pub fn validating_configuration(webhooks: &[AdmissionWebhook]) -> ValidatingWebhookConfiguration {
    let webhooks = sorted(webhooks, |w| w.admission != Admission::Mutate)
        .map(|webhook| ValidatingWebhook {
            admission_review_versions: vec!["v1".into()],
            client_config: client_config(webhook),
            failure_policy: Some("Fail".into()),
            match_policy: Some("Equivalent".into()),
            name: webhook.name(),
            rules: Some(vec![rule(webhook)]),
            side_effects: "None".into(),
            ..Default::default()
        })
        .collect();
    ValidatingWebhookConfiguration {
        metadata: annotated(VALIDATING_NAME),
        webhooks: Some(webhooks),
    }
}

fn sorted(
    webhooks: &[AdmissionWebhook],
    keep: impl Fn(&AdmissionWebhook) -> bool,
) -> impl Iterator<Item = &AdmissionWebhook> {
    let mut kept: Vec<&AdmissionWebhook> = webhooks.iter().filter(|w| keep(w)).collect();
    kept.sort_by_key(|w| w.name());
    kept.into_iter()
}

fn annotated(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        annotations: Some(BTreeMap::from([(
            CA_INJECTION_ANNOTATION.into(),
            CA_INJECTION_FROM.into(),
        )])),
        ..Default::default()
    }
}

fn client_config(webhook: &AdmissionWebhook) -> WebhookClientConfig {
    WebhookClientConfig {
        service: Some(ServiceReference {
            name: WEBHOOK_SERVICE_NAME.into(),
            namespace: WEBHOOK_SERVICE_NAMESPACE.into(),
            path: Some(webhook.path()),
            port: None,
        }),
        ..Default::default()
    }
}

fn rule(webhook: &AdmissionWebhook) -> RuleWithOperations {
    RuleWithOperations {
        api_groups: Some(vec![webhook.group.clone()]),
        api_versions: Some(vec![webhook.version.clone()]),
        operations: Some(webhook.operations().iter().map(|o| o.to_string()).collect()),
        resources: Some(vec![webhook.resource()]),
        scope: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhooks_are_named_and_routed_like_cluster_api() {
        let described: Vec<(String, String, String, &[&str])> = admission_webhooks()
            .iter()
            .map(|w| (w.name(), w.path(), w.resource(), w.operations()))
            .collect();
        let cu: &[&str] = &["CREATE", "UPDATE"];
        let expected = [
            (
                "default.kubeadmconfigtemplate.bootstrap.cluster.x-k8s.io",
                "/mutate-bootstrap-cluster-x-k8s-io-v1beta2-kubeadmconfigtemplate",
                "kubeadmconfigtemplates",
                cu,
            ),
            (
                "default.kubeadmcontrolplane.controlplane.cluster.x-k8s.io",
                "/mutate-controlplane-cluster-x-k8s-io-v1beta2-kubeadmcontrolplane",
                "kubeadmcontrolplanes",
                cu,
            ),
            (
                "validation.kubeadmconfig.bootstrap.cluster.x-k8s.io",
                "/validate-bootstrap-cluster-x-k8s-io-v1beta2-kubeadmconfig",
                "kubeadmconfigs",
                cu,
            ),
            (
                "validation.kubeadmconfigtemplate.bootstrap.cluster.x-k8s.io",
                "/validate-bootstrap-cluster-x-k8s-io-v1beta2-kubeadmconfigtemplate",
                "kubeadmconfigtemplates",
                cu,
            ),
            (
                "validation.kubeadmcontrolplane.controlplane.cluster.x-k8s.io",
                "/validate-controlplane-cluster-x-k8s-io-v1beta2-kubeadmcontrolplane",
                "kubeadmcontrolplanes",
                cu,
            ),
            (
                "validation-scale.kubeadmcontrolplane.controlplane.cluster.x-k8s.io",
                "/validate-scale-controlplane-cluster-x-k8s-io-v1beta2-kubeadmcontrolplane",
                "kubeadmcontrolplanes/scale",
                &["UPDATE"],
            ),
            (
                "validation.kubeadmcontrolplanetemplate.controlplane.cluster.x-k8s.io",
                "/validate-controlplane-cluster-x-k8s-io-v1beta2-kubeadmcontrolplanetemplate",
                "kubeadmcontrolplanetemplates",
                cu,
            ),
        ];
        let expected: Vec<(String, String, String, &[&str])> = expected
            .into_iter()
            .map(|(n, p, r, o)| (n.to_string(), p.to_string(), r.to_string(), o))
            .collect();
        assert_eq!(described, expected);
    }

    #[test]
    fn paths_follow_kubebuilder() {
        assert_eq!(
            admission_path(
                "controlplane.cluster.x-k8s.io",
                "v1beta2",
                "KubeadmControlPlane",
                Admission::Mutate
            ),
            "/mutate-controlplane-cluster-x-k8s-io-v1beta2-kubeadmcontrolplane"
        );
        assert_eq!(
            admission_path(
                "bootstrap.cluster.x-k8s.io",
                "v1beta2",
                "KubeadmConfigTemplate",
                Admission::Validate
            ),
            "/validate-bootstrap-cluster-x-k8s-io-v1beta2-kubeadmconfigtemplate"
        );
        assert_eq!(
            admission_path(
                "controlplane.cluster.x-k8s.io",
                "v1beta2",
                "KubeadmControlPlane",
                Admission::ValidateScale
            ),
            "/validate-scale-controlplane-cluster-x-k8s-io-v1beta2-kubeadmcontrolplane"
        );
        // The core group is empty; kubebuilder keeps both dashes.
        assert_eq!(
            admission_path("", "v1", "Pod", Admission::Mutate),
            "/mutate--v1-pod"
        );
    }

    #[test]
    fn configurations_follow_cluster_api_conventions() {
        let webhooks = admission_webhooks();
        let validating = validating_configuration(&webhooks);
        let names: Vec<&str> = validating
            .webhooks
            .as_ref()
            .unwrap()
            .iter()
            .map(|w| w.name.as_str())
            .collect();
        assert_eq!(
            names,
            // Sorted by name, as controller-gen lists them.
            [
                "validation-scale.kubeadmcontrolplane.controlplane.cluster.x-k8s.io",
                "validation.kubeadmconfig.bootstrap.cluster.x-k8s.io",
                "validation.kubeadmconfigtemplate.bootstrap.cluster.x-k8s.io",
                "validation.kubeadmcontrolplane.controlplane.cluster.x-k8s.io",
                "validation.kubeadmcontrolplanetemplate.controlplane.cluster.x-k8s.io",
            ]
        );
        for webhook in validating.webhooks.as_ref().unwrap() {
            assert_eq!(webhook.side_effects, "None");
            assert_eq!(webhook.admission_review_versions, ["v1"]);
            assert_eq!(webhook.failure_policy.as_deref(), Some("Fail"));
            assert_eq!(webhook.match_policy.as_deref(), Some("Equivalent"));
            let service = webhook.client_config.service.as_ref().unwrap();
            assert_eq!(
                (service.namespace.as_str(), service.name.as_str()),
                ("system", "webhook-service")
            );
        }
        let mutating = mutating_configuration(&webhooks);
        assert_eq!(mutating.webhooks.as_ref().unwrap().len(), 2);
        for metadata in [&mutating.metadata, &validating.metadata] {
            assert_eq!(
                metadata.annotations.as_ref().unwrap()[CA_INJECTION_ANNOTATION],
                "$(CERTIFICATE_NAMESPACE)/$(CERTIFICATE_NAME)"
            );
        }
    }
}
