//! Where the webhook server answers for our kinds. The webhook configurations in `config/` and the
//! server in the managers both take their paths from here, so the two cannot disagree.

pub use crate::crd::{CONVERSION_PATH, WEBHOOK_SERVICE_NAME, WEBHOOK_SERVICE_NAMESPACE};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
