//! Defaulting of KubeadmConfig and KubeadmConfigTemplate.
//!
//! Cluster API v1.14 no longer defaults a KubeadmConfigSpec on admission: `format`, the image pull
//! policies and the exec plugin's `apiVersion` stay unset and are resolved where they are used
//! (the renderer treats a missing format as cloud-config). KubeadmConfig therefore has no defaulting
//! at all. The values older releases wrote are kept as [`apply_previous_defaults`], applied only where
//! an old object and a new one are compared, so that objects written before the change do not look
//! different (and trigger rollouts) merely because a default is missing.

use super::v1beta2::{Format, KubeadmConfigSpec, KubeadmConfigTemplate};

/// Annotation the topology controller puts on objects it sends as dry-run requests.
pub const TOPOLOGY_DRY_RUN_ANNOTATION: &str = "topology.cluster.x-k8s.io/dry-run";

const IMAGE_PULL_POLICY: &str = "IfNotPresent";
const EXEC_API_VERSION: &str = "client.authentication.k8s.io/v1";

/// Fills the defaults Cluster API wrote before v1.11: format `cloud-config`, image pull policy
/// `IfNotPresent` for init and join, and `client.authentication.k8s.io/v1` for a discovery exec
/// plugin. Use it on both sides before comparing two specs; it never runs on admission of a
/// KubeadmConfig. Idempotent.
pub fn apply_previous_defaults(spec: &mut KubeadmConfigSpec) {
    spec.format.get_or_insert(Format::CloudConfig);
    for registration in [
        &mut spec.init_configuration.node_registration,
        &mut spec.join_configuration.node_registration,
    ] {
        if registration
            .image_pull_policy
            .as_deref()
            .unwrap_or("")
            .is_empty()
        {
            registration.image_pull_policy = Some(IMAGE_PULL_POLICY.into());
        }
    }
    let exec = &mut spec.join_configuration.discovery.file.kube_config.user.exec;
    if exec.is_defined() && exec.api_version.as_deref().unwrap_or("").is_empty() {
        exec.api_version = Some(EXEC_API_VERSION.into());
    }
}

/// The mutating admission of a KubeadmConfigTemplate. Only a dry-run request from the topology
/// controller (`request_dry_run` and the [`TOPOLOGY_DRY_RUN_ANNOTATION`] on the object) gets the
/// previous defaults, so templates created before the defaults were dropped still compare equal;
/// every other request is left unchanged. Idempotent.
pub fn default_kubeadm_config_template(
    template: &mut KubeadmConfigTemplate,
    request_dry_run: bool,
) {
    let marked = template
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(TOPOLOGY_DRY_RUN_ANNOTATION));
    if request_dry_run && marked {
        apply_previous_defaults(&mut template.spec.template.spec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::v1beta2::{KubeConfigAuthExec, KubeadmConfigTemplateSpec};

    fn template(annotated: bool) -> KubeadmConfigTemplate {
        let mut template = KubeadmConfigTemplate::new("md-0", KubeadmConfigTemplateSpec::default());
        if annotated {
            template.metadata.annotations =
                Some([(TOPOLOGY_DRY_RUN_ANNOTATION.to_owned(), String::new())].into());
        }
        template
    }

    #[test]
    fn previous_defaults_fill_only_what_is_missing() {
        let mut spec = KubeadmConfigSpec::default();
        spec.join_configuration.node_registration.image_pull_policy = Some("Always".into());
        spec.join_configuration.discovery.file.kube_config.user.exec = KubeConfigAuthExec {
            command: "/bin/token".into(),
            ..Default::default()
        };
        apply_previous_defaults(&mut spec);
        assert_eq!(spec.format, Some(Format::CloudConfig));
        assert_eq!(
            spec.init_configuration
                .node_registration
                .image_pull_policy
                .as_deref(),
            Some("IfNotPresent")
        );
        assert_eq!(
            spec.join_configuration
                .node_registration
                .image_pull_policy
                .as_deref(),
            Some("Always")
        );
        let exec = &spec.join_configuration.discovery.file.kube_config.user.exec;
        assert_eq!(exec.api_version.as_deref(), Some(EXEC_API_VERSION));

        let mut ignition = KubeadmConfigSpec {
            format: Some(Format::Ignition),
            ..Default::default()
        };
        apply_previous_defaults(&mut ignition);
        assert_eq!(ignition.format, Some(Format::Ignition));
        assert!(!ignition.join_configuration.discovery.file.is_defined());
    }

    #[test]
    fn previous_defaults_are_idempotent() {
        let mut once = KubeadmConfigSpec::default();
        apply_previous_defaults(&mut once);
        let mut twice = once.clone();
        apply_previous_defaults(&mut twice);
        assert_eq!(once, twice);
    }

    #[test]
    fn template_defaults_only_for_topology_dry_runs() {
        for (dry_run, annotated) in [(false, false), (true, false), (false, true)] {
            let mut t = template(annotated);
            default_kubeadm_config_template(&mut t, dry_run);
            assert_eq!(
                t,
                template(annotated),
                "dry_run={dry_run} annotated={annotated}"
            );
        }
        let mut once = template(true);
        default_kubeadm_config_template(&mut once, true);
        assert_eq!(once.spec.template.spec.format, Some(Format::CloudConfig));
        let mut twice = once.clone();
        default_kubeadm_config_template(&mut twice, true);
        assert_eq!(once, twice);
    }
}
