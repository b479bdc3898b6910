//! Validation of KubeadmControlPlane (create, update, scale) and KubeadmControlPlaneTemplate.
//!
//! The rules follow Cluster API v1.14's webhooks, with these differences:
//! - Learner mode (KEP-3614) is always used for stacked etcd, so Kubernetes older than v1.27, an etcd
//!   image older than 3.4 and `featureGates.EtcdLearnerMode: false` are rejected.
//! - Bounds that Cluster API's CRD schema enforces (certificate validity days, `certificatesExpiryDays`
//!   of at least 7) are checked here too, for offline validation; `certificatesExpiryDays` must also
//!   stay below kubeadm's default validity (365 days) when `certificateValidityPeriodDays` is unset,
//!   and the certificate checks run even when no rollout strategy is set.
//! - `maxSurge` accepts 0 and 1 as numbers or strings; anything else (e.g. "50%") is rejected.
//! - Error paths are the JSON paths of the fields (Cluster API names `machineTemplate.infrastructure.*`).
//! - A CoreDNS upgrade is checked as Cluster API checks it, against the releases its Corefile migration
//!   library (v1.0.35) knows; the annotation `controlplane.cluster.x-k8s.io/skip-coredns` skips it.
//! - Machine naming templates may use `.cluster.name`, `.kubeadmControlPlane.name` and `.random` only.
//! - `etcd.local.extraArgs` naming a flag the control plane's etcd removed (etcd 3.7, which Kubernetes
//!   1.37's kubeadm deploys, has none of the `--experimental-*` flags) are refused on create, on an update
//!   that changes the etcd release and when an update adds one, naming the replacement; one the control
//!   plane already had, its etcd unchanged, is a warning.

use crate::meta::SKIP_COREDNS_ANNOTATION;
use serde_json::{Map, Value};

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::v1beta2::{
    KubeadmControlPlane, KubeadmControlPlaneRolloutSpec, KubeadmControlPlaneSpec,
    KubeadmControlPlaneTemplate, KubeadmControlPlaneTemplateResourceSpec, MachineNamingSpec,
};
use crate::bootstrap::defaults::apply_previous_defaults;
use crate::bootstrap::v1beta2::{ClusterConfiguration, KubeadmConfigSpec};
use crate::bootstrap::validation::validate_config_spec;
use crate::etcd_release::{etcd_release, removed_flag, removed_flag_rule};
use crate::validation::{
    FieldError, FieldErrors, child, dns1123_subdomain_problem, validate_machine_taints,
    validate_object_meta,
};
use crate::version::Semver;

/// The rule text for a Kubernetes or etcd release that cannot add etcd members as learners.
pub const LEARNER_MODE_UNSUPPORTED: &str =
    "etcd learner mode is not supported by this etcd version";

/// Certificate validity kubeadm uses when `certificateValidityPeriodDays` is unset.
const DEFAULT_CERTIFICATE_VALIDITY_DAYS: i32 = 365;
const CERTIFICATE_VALIDITY_DAYS: std::ops::RangeInclusive<i32> = 1..=1095;
const CA_CERTIFICATE_VALIDITY_DAYS: std::ops::RangeInclusive<i32> = 1..=36500;
const MIN_CERTIFICATES_EXPIRY_DAYS: i32 = 7;
const LEARNERS_SINCE_KUBERNETES: Semver = Semver::new(1, 27, 0);
const LEARNERS_SINCE_ETCD: Semver = Semver::new(3, 4, 0);
const LEARNER_GATE: &str = "EtcdLearnerMode";

const SPEC_CONFIG: &str = "spec.kubeadmConfigSpec";
const SPEC_CLUSTER_CONFIGURATION: &str = "spec.kubeadmConfigSpec.clusterConfiguration";
const TEMPLATE_SPEC: &str = "spec.template.spec";

/// Paths of a KubeadmControlPlane that may change after creation; a trailing `*` allows everything
/// below that point. Everything else (e.g. `controlPlaneEndpoint`, `certificatesDir`,
/// `caCertificateValidityPeriodDays`, `clusterName`) is fixed once the control plane exists.
const MUTABLE_PATHS: &[&[&str]] = &[
    &["metadata", "*"],
    &["spec", "kubeadmConfigSpec", "clusterConfiguration", "etcd"],
    &[
        "spec",
        "kubeadmConfigSpec",
        "clusterConfiguration",
        "etcd",
        "*",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "clusterConfiguration",
        "etcd",
        "local",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "clusterConfiguration",
        "etcd",
        "local",
        "*",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "clusterConfiguration",
        "etcd",
        "external",
        "*",
    ],
    &["spec", "kubeadmConfigSpec", "clusterConfiguration", "dns"],
    &[
        "spec",
        "kubeadmConfigSpec",
        "clusterConfiguration",
        "dns",
        "*",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "clusterConfiguration",
        "imageRepository",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "clusterConfiguration",
        "featureGates",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "clusterConfiguration",
        "featureGates",
        "*",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "clusterConfiguration",
        "apiServer",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "clusterConfiguration",
        "apiServer",
        "*",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "clusterConfiguration",
        "controllerManager",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "clusterConfiguration",
        "controllerManager",
        "*",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "clusterConfiguration",
        "scheduler",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "clusterConfiguration",
        "scheduler",
        "*",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "clusterConfiguration",
        "certificateValidityPeriodDays",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "clusterConfiguration",
        "encryptionAlgorithm",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "initConfiguration",
        "nodeRegistration",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "initConfiguration",
        "nodeRegistration",
        "*",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "initConfiguration",
        "patches",
        "directory",
    ],
    &["spec", "kubeadmConfigSpec", "initConfiguration", "patches"],
    &[
        "spec",
        "kubeadmConfigSpec",
        "initConfiguration",
        "skipPhases",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "initConfiguration",
        "bootstrapTokens",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "initConfiguration",
        "localAPIEndpoint",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "initConfiguration",
        "localAPIEndpoint",
        "*",
    ],
    &["spec", "kubeadmConfigSpec", "initConfiguration", "timeouts"],
    &[
        "spec",
        "kubeadmConfigSpec",
        "initConfiguration",
        "timeouts",
        "*",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "joinConfiguration",
        "nodeRegistration",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "joinConfiguration",
        "nodeRegistration",
        "*",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "joinConfiguration",
        "patches",
        "directory",
    ],
    &["spec", "kubeadmConfigSpec", "joinConfiguration", "patches"],
    &[
        "spec",
        "kubeadmConfigSpec",
        "joinConfiguration",
        "skipPhases",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "joinConfiguration",
        "caCertPath",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "joinConfiguration",
        "controlPlane",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "joinConfiguration",
        "controlPlane",
        "*",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "joinConfiguration",
        "discovery",
    ],
    &[
        "spec",
        "kubeadmConfigSpec",
        "joinConfiguration",
        "discovery",
        "*",
    ],
    &["spec", "kubeadmConfigSpec", "joinConfiguration", "timeouts"],
    &[
        "spec",
        "kubeadmConfigSpec",
        "joinConfiguration",
        "timeouts",
        "*",
    ],
    &["spec", "kubeadmConfigSpec", "bootCommands"],
    &["spec", "kubeadmConfigSpec", "preKubeadmCommands"],
    &["spec", "kubeadmConfigSpec", "postKubeadmCommands"],
    &["spec", "kubeadmConfigSpec", "files"],
    &["spec", "kubeadmConfigSpec", "verbosity"],
    &["spec", "kubeadmConfigSpec", "users"],
    &["spec", "kubeadmConfigSpec", "ntp"],
    &["spec", "kubeadmConfigSpec", "ntp", "*"],
    &["spec", "kubeadmConfigSpec", "ignition"],
    &["spec", "kubeadmConfigSpec", "ignition", "*"],
    &["spec", "kubeadmConfigSpec", "diskSetup"],
    &["spec", "kubeadmConfigSpec", "diskSetup", "*"],
    &["spec", "kubeadmConfigSpec", "format"],
    &["spec", "kubeadmConfigSpec", "mounts"],
    &["spec", "machineTemplate", "metadata"],
    &["spec", "machineTemplate", "metadata", "*"],
    &["spec", "machineTemplate", "spec"],
    &["spec", "machineTemplate", "spec", "*"],
    &["spec", "replicas"],
    &["spec", "version"],
    &["spec", "remediation"],
    &["spec", "remediation", "*"],
    &["spec", "machineNaming"],
    &["spec", "machineNaming", "*"],
    &["spec", "rollout"],
    &["spec", "rollout", "*"],
    &["spec", "etcdBackup"],
    &["spec", "etcdBackup", "*"],
];

/// Admission of a new KubeadmControlPlane (after defaulting).
pub fn validate_kcp_create(kcp: &KubeadmControlPlane) -> Result<(), FieldErrors> {
    let mut errors = create_errors(kcp);
    errors.extend(removed_etcd_flags(kcp).into_iter().map(|f| f.error));
    FieldErrors::into_result(errors)
}

/// An `etcd.local.extraArgs` entry naming a flag the control plane's etcd no longer has.
struct RemovedEtcdFlag {
    flag: String,
    error: FieldError,
}

/// The `etcd.local.extraArgs` of `kcp` that its etcd release ([`etcd_release`]: the image tag, else what
/// kubeadm of `spec.version` deploys) removed, each naming its replacement.
fn removed_etcd_flags(kcp: &KubeadmControlPlane) -> Vec<RemovedEtcdFlag> {
    let (Some(config), Some(release)) =
        (kcp.spec.kubeadm_config_spec.as_ref(), kcp_etcd_release(kcp))
    else {
        return Vec::new();
    };
    config
        .cluster_configuration
        .etcd
        .local
        .extra_args
        .iter()
        .enumerate()
        .filter_map(|(i, arg)| {
            let replacement = removed_flag(&arg.name, &release)?;
            Some(RemovedEtcdFlag {
                flag: arg.name.clone(),
                error: FieldError::invalid(
                    format!("{SPEC_CLUSTER_CONFIGURATION}.etcd.local.extraArgs[{i}].name"),
                    &arg.name,
                    removed_flag_rule(&kcp.spec.version, &release, replacement),
                ),
            })
        })
        .collect()
}

/// The etcd release `kcp` runs, when its etcd is stacked and the release is known.
fn kcp_etcd_release(kcp: &KubeadmControlPlane) -> Option<Semver> {
    let etcd = &kcp
        .spec
        .kubeadm_config_spec
        .as_ref()?
        .cluster_configuration
        .etcd;
    if etcd.external.is_defined() {
        return None;
    }
    etcd_release(&kcp.spec.version, etcd.local.image_tag.as_deref())
}

/// The removed etcd flags of an update, (refused, warned): all are refused when the update changes the
/// etcd release (a version bump to 1.37, a new image tag), else those it adds. A flag that was there
/// before, its etcd unchanged, is only warned about, so that the object stays editable.
fn removed_etcd_flags_of_update(
    old: &KubeadmControlPlane,
    new: &KubeadmControlPlane,
) -> (Vec<FieldError>, Vec<FieldError>) {
    let same_etcd = kcp_etcd_release(old) == kcp_etcd_release(new);
    let before: Vec<String> = removed_etcd_flags(old)
        .into_iter()
        .map(|f| f.flag)
        .collect();
    let (warned, refused): (Vec<RemovedEtcdFlag>, Vec<RemovedEtcdFlag>) = removed_etcd_flags(new)
        .into_iter()
        .partition(|f| same_etcd && before.contains(&f.flag));
    (
        refused.into_iter().map(|f| f.error).collect(),
        warned.into_iter().map(|f| f.error).collect(),
    )
}

/// Warnings for an admitted update: each removed etcd flag the control plane already had (its etcd
/// unchanged), which the next machine's etcd would not start with.
pub fn kcp_update_warnings(old: &KubeadmControlPlane, new: &KubeadmControlPlane) -> Vec<String> {
    removed_etcd_flags_of_update(old, new)
        .1
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// Admission of a changed KubeadmControlPlane: the new object must pass the create rules, only
/// mutable paths may change, etcd may not switch between local and external, the Kubernetes version
/// may move up at most one minor release (downgrades are allowed, as in Cluster API), and CoreDNS
/// may not go backwards.
pub fn validate_kcp_update(
    old: &KubeadmControlPlane,
    new: &KubeadmControlPlane,
) -> Result<(), FieldErrors> {
    let mut errors = create_errors(new);
    errors.extend(immutable_field_errors(&old.spec, &new.spec));
    let default_config = KubeadmConfigSpec::default();
    let old_config = old
        .spec
        .kubeadm_config_spec
        .as_ref()
        .unwrap_or(&default_config);
    let new_config = new
        .spec
        .kubeadm_config_spec
        .as_ref()
        .unwrap_or(&default_config);
    if old_config.cluster_configuration.etcd.external.is_defined()
        != new_config.cluster_configuration.etcd.external.is_defined()
    {
        errors.push(FieldError::forbidden(
            child(SPEC_CLUSTER_CONFIGURATION, "etcd.external"),
            "cannot change between external and local etcd",
        ));
    }
    errors.extend(version_skew_errors(&old.spec.version, &new.spec.version));
    errors.extend(removed_etcd_flags_of_update(old, new).0);
    if !new
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(SKIP_COREDNS_ANNOTATION))
    {
        errors.extend(coredns_upgrade_errors(
            &old_config.cluster_configuration,
            &new_config.cluster_configuration,
        ));
    }
    FieldErrors::into_result(errors)
}

/// Admission of a change of `spec.replicas` through the scale subresource.
pub fn validate_scale(new_replicas: i32, kcp: &KubeadmControlPlane) -> Result<(), FieldErrors> {
    let mut errors = Vec::new();
    if new_replicas <= 0 {
        errors.push(FieldError::invalid(
            "spec.replicas",
            new_replicas,
            "replicas should be greater than zero",
        ));
    } else if new_replicas % 2 == 0 && !uses_external_etcd(kcp.spec.kubeadm_config_spec.as_ref()) {
        errors.push(FieldError::invalid(
            "spec.replicas",
            new_replicas,
            "replicas cannot be an even number when etcd is stacked",
        ));
    }
    FieldErrors::into_result(errors)
}

/// Admission of a new KubeadmControlPlaneTemplate.
pub fn validate_kcp_template_create(
    template: &KubeadmControlPlaneTemplate,
) -> Result<(), FieldErrors> {
    let default_spec = KubeadmControlPlaneTemplateResourceSpec::default();
    let resource = &template.spec.template;
    let spec = resource.spec.as_ref().unwrap_or(&default_spec);
    let default_config = KubeadmConfigSpec::default();
    let config = spec.kubeadm_config_spec.as_ref().unwrap_or(&default_config);
    let config_path = child(TEMPLATE_SPEC, "kubeadmConfigSpec");
    let cluster_path = child(&config_path, "clusterConfiguration");

    let mut errors = Vec::new();
    rollout_and_certificate_errors(
        spec.rollout.as_ref(),
        &config.cluster_configuration,
        None,
        TEMPLATE_SPEC,
        &mut errors,
    );
    errors.extend(naming_errors(spec.machine_naming.as_ref(), TEMPLATE_SPEC));
    if let Some(machine_template) = &spec.machine_template {
        let path = child(TEMPLATE_SPEC, "machineTemplate");
        if let Some(machine_spec) = &machine_template.spec {
            errors.extend(validate_machine_taints(
                &machine_spec.taints,
                &child(&path, "spec.taints"),
            ));
        }
        if let Some(metadata) = &machine_template.metadata {
            errors.extend(validate_object_meta(metadata, &child(&path, "metadata")));
        }
    }
    errors.extend(cluster_configuration_errors(
        &config.cluster_configuration,
        &cluster_path,
    ));
    errors.extend(etcd_learner_errors(
        &config.cluster_configuration,
        &cluster_path,
    ));
    errors.extend(validate_config_spec(config, &config_path));
    errors.extend(timeout_consistency_errors(config, &config_path));
    if let Some(metadata) = &resource.metadata {
        errors.extend(validate_object_meta(metadata, "spec.template.metadata"));
    }
    FieldErrors::into_result(errors)
}

/// Admission of a changed KubeadmControlPlaneTemplate: `spec.template.spec` is immutable. Defaults
/// written by older releases do not count as a change, nor does dropping the formerly defaulted
/// rollout strategy (RollingUpdate with maxSurge 1).
pub fn validate_kcp_template_update(
    old: &KubeadmControlPlaneTemplate,
    new: &KubeadmControlPlaneTemplate,
) -> Result<(), FieldErrors> {
    let comparable = |template: &KubeadmControlPlaneTemplate| {
        let mut spec = template.spec.template.spec.clone().unwrap_or_default();
        apply_previous_defaults(spec.kubeadm_config_spec.get_or_insert_default());
        spec
    };
    let old_spec = comparable(old);
    let mut new_spec = comparable(new);
    let new_strategy_unset = new_spec
        .rollout
        .as_ref()
        .is_none_or(|r| r.strategy.is_none());
    if new_strategy_unset && is_previous_default_strategy(old_spec.rollout.as_ref()) {
        new_spec.rollout.get_or_insert_default().strategy =
            old_spec.rollout.as_ref().and_then(|r| r.strategy.clone());
    }
    let mut changed = Vec::new();
    diff_paths(
        &to_json(&old_spec),
        &to_json(&new_spec),
        &mut vec![],
        &mut changed,
    );
    if changed.is_empty() {
        return Ok(());
    }
    let mut changed: Vec<String> = changed
        .iter()
        .map(|path| child(TEMPLATE_SPEC, &path.join(".")))
        .collect();
    changed.sort();
    Err(FieldErrors(vec![FieldError::invalid_hidden(
        TEMPLATE_SPEC,
        format!(
            "KubeadmControlPlaneTemplate spec.template.spec field is immutable. Please create new \
             resource instead. Changed: {}",
            changed.join(", ")
        ),
    )]))
}

fn create_errors(kcp: &KubeadmControlPlane) -> Vec<FieldError> {
    let spec = &kcp.spec;
    let default_config = KubeadmConfigSpec::default();
    let config = spec.kubeadm_config_spec.as_ref().unwrap_or(&default_config);
    let mut errors = spec_errors(spec, config);
    errors.extend(cluster_configuration_errors(
        &config.cluster_configuration,
        SPEC_CLUSTER_CONFIGURATION,
    ));
    errors.extend(validate_config_spec(config, SPEC_CONFIG));
    errors.extend(timeout_consistency_errors(config, SPEC_CONFIG));
    if let Some(backup) = &spec.etcd_backup {
        errors.extend(super::etcd_backup::errors(backup, "spec.etcdBackup"));
        if config.cluster_configuration.etcd.external.is_defined() {
            errors.push(FieldError::forbidden(
                "spec.etcdBackup",
                "snapshots are of stacked etcd; an external etcd is backed up where it runs",
            ));
        }
    }
    errors
}

fn spec_errors(spec: &KubeadmControlPlaneSpec, config: &KubeadmConfigSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let external_etcd = config.cluster_configuration.etcd.external.is_defined();
    match spec.replicas {
        None => errors.push(FieldError::required("spec.replicas", "is required")),
        Some(replicas) if replicas <= 0 => errors.push(FieldError::forbidden(
            "spec.replicas",
            "cannot be less than or equal to 0",
        )),
        Some(replicas) if replicas % 2 == 0 && !external_etcd => {
            errors.push(FieldError::forbidden(
                "spec.replicas",
                "cannot be an even number when etcd is stacked",
            ))
        }
        Some(_) => {}
    }

    let machine = &spec.machine_template;
    let reference = &machine.spec.infrastructure_ref;
    for (field, value) in [
        ("apiGroup", &reference.api_group),
        ("kind", &reference.kind),
        ("name", &reference.name),
    ] {
        if value.is_empty() {
            errors.push(FieldError::required(
                format!("spec.machineTemplate.spec.infrastructureRef.{field}"),
                "cannot be empty",
            ));
        }
    }
    errors.extend(validate_machine_taints(
        &machine.spec.taints,
        "spec.machineTemplate.spec.taints",
    ));
    if let Some(metadata) = &machine.metadata {
        errors.extend(validate_object_meta(
            metadata,
            "spec.machineTemplate.metadata",
        ));
    }

    let version = spec.version.as_str();
    if !version.starts_with('v') {
        errors.push(FieldError::invalid(
            "spec.version",
            version,
            "must start with v",
        ));
    }
    let parsed = Semver::parse(version.strip_prefix('v').unwrap_or(version));
    if parsed.is_err() {
        errors.push(FieldError::invalid(
            "spec.version",
            version,
            "must be a valid semantic version",
        ));
    }

    rollout_and_certificate_errors(
        spec.rollout.as_ref(),
        &config.cluster_configuration,
        spec.replicas,
        "spec",
        &mut errors,
    );
    errors.extend(naming_errors(spec.machine_naming.as_ref(), "spec"));

    if !external_etcd {
        if let Ok(kubernetes) = parsed
            && kubernetes < LEARNERS_SINCE_KUBERNETES
        {
            errors.push(FieldError::invalid(
                "spec.version",
                version,
                LEARNER_MODE_UNSUPPORTED,
            ));
        }
        errors.extend(etcd_learner_errors(
            &config.cluster_configuration,
            SPEC_CLUSTER_CONFIGURATION,
        ));
    }
    errors
}

/// The etcd image and feature gates must allow new members to join as learners (stacked etcd only).
fn etcd_learner_errors(cluster: &ClusterConfiguration, cluster_path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if cluster.etcd.external.is_defined() {
        return errors;
    }
    if let Some(tag) = cluster
        .etcd
        .local
        .image_tag
        .as_deref()
        .filter(|t| !t.is_empty())
        && is_valid_image_tag(tag)
    {
        let path = child(cluster_path, "etcd.local.imageTag");
        match Semver::parse_image_tag(tag) {
            Ok(etcd) if etcd < LEARNERS_SINCE_ETCD => {
                errors.push(FieldError::invalid(path, tag, LEARNER_MODE_UNSUPPORTED));
            }
            Ok(_) => {}
            Err(_) => errors.push(FieldError::invalid(
                path,
                tag,
                "must be an etcd release such as 3.5.21-0, so that learner mode support can be checked",
            )),
        }
    }
    if cluster.feature_gates.get(LEARNER_GATE) == Some(&false) {
        errors.push(FieldError::forbidden(
            child(cluster_path, &format!("featureGates.{LEARNER_GATE}")),
            "must not be false: new etcd members always join as learners",
        ));
    }
    errors
}

fn rollout_and_certificate_errors(
    rollout: Option<&KubeadmControlPlaneRolloutSpec>,
    cluster: &ClusterConfiguration,
    replicas: Option<i32>,
    base: &str,
    errors: &mut Vec<FieldError>,
) {
    let max_surge = rollout
        .and_then(|r| r.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref())
        .and_then(|u| u.max_surge.as_ref());
    if let Some(max_surge) = max_surge {
        let path = child(base, "rollout.strategy.rollingUpdate.maxSurge");
        match surge_value(max_surge) {
            Some(0) if replicas.is_some_and(|r| r < 3) => errors.push(FieldError::invalid(
                path,
                0,
                "when KubeadmControlPlane is configured to scale-in, replica count needs to be at least 3",
            )),
            Some(0 | 1) => {}
            _ => errors.push(FieldError::invalid(
                path,
                surge_text(max_surge),
                "value must be 1 or 0",
            )),
        }
    }

    let cluster_path = child(base, "kubeadmConfigSpec.clusterConfiguration");
    let ca_days = cluster.ca_certificate_validity_period_days;
    if let Some(days) = ca_days
        && !CA_CERTIFICATE_VALIDITY_DAYS.contains(&days)
    {
        errors.push(FieldError::invalid(
            child(&cluster_path, "caCertificateValidityPeriodDays"),
            days,
            "must be between 1 and 36500",
        ));
    }
    let mut certificate_days = None;
    if let Some(days) = cluster.certificate_validity_period_days {
        let path = child(&cluster_path, "certificateValidityPeriodDays");
        if !CERTIFICATE_VALIDITY_DAYS.contains(&days) {
            errors.push(FieldError::invalid(
                path,
                days,
                "must be between 1 and 1095",
            ));
        } else {
            certificate_days = Some(days);
            // Within its bounds it never exceeds the default CA validity (3650 days).
            if let Some(ca) = ca_days.filter(|ca| CA_CERTIFICATE_VALIDITY_DAYS.contains(ca))
                && days > ca
            {
                errors.push(FieldError::invalid(
                    path,
                    days,
                    format!("must be less than or equal to caCertificateValidityPeriodDays ({ca})"),
                ));
            }
        }
    }

    let expiry = rollout
        .and_then(|r| r.before.as_ref())
        .and_then(|b| b.certificates_expiry_days);
    if let Some(expiry) = expiry {
        let path = child(base, "rollout.before.certificatesExpiryDays");
        if expiry < MIN_CERTIFICATES_EXPIRY_DAYS {
            errors.push(FieldError::invalid(
                path,
                expiry,
                format!("must be greater than or equal to {MIN_CERTIFICATES_EXPIRY_DAYS}"),
            ));
        } else if let Some(days) = certificate_days {
            if expiry >= days {
                errors.push(FieldError::invalid(
                    path,
                    expiry,
                    format!("must be less than certificateValidityPeriodDays ({days})"),
                ));
            }
        } else if cluster.certificate_validity_period_days.is_none()
            && expiry >= DEFAULT_CERTIFICATE_VALIDITY_DAYS
        {
            errors.push(FieldError::invalid(
                path,
                expiry,
                format!(
                    "must be less than the default certificateValidityPeriodDays \
                     ({DEFAULT_CERTIFICATE_VALIDITY_DAYS})"
                ),
            ));
        }
    }
}

fn surge_value(value: &IntOrString) -> Option<i32> {
    match value {
        IntOrString::Int(n) => Some(*n),
        IntOrString::String(s) => s.parse().ok(),
    }
}

fn surge_text(value: &IntOrString) -> String {
    match value {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::String(s) => s.clone(),
    }
}

fn is_previous_default_strategy(rollout: Option<&KubeadmControlPlaneRolloutSpec>) -> bool {
    rollout
        .and_then(|r| r.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref())
        .is_some_and(|u| u.max_surge == Some(IntOrString::Int(1)))
}

/// Rules of the etcd and DNS settings in a ClusterConfiguration (create and update).
fn cluster_configuration_errors(cluster: &ClusterConfiguration, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(tag) = cluster.dns.image_tag.as_deref().filter(|t| !t.is_empty()) {
        let tag_path = child(path, "dns.imageTag");
        if !is_valid_image_tag(tag) {
            errors.push(FieldError::forbidden(
                tag_path,
                format!("tag {tag} is invalid"),
            ));
        } else if let Err(problem) = Semver::parse_image_tag(tag) {
            errors.push(FieldError::invalid(
                tag_path,
                tag,
                format!("failed to parse CoreDNS version: {problem}"),
            ));
        }
    }
    let etcd = &cluster.etcd;
    if let Some(tag) = etcd.local.image_tag.as_deref()
        && !is_valid_image_tag(tag)
    {
        errors.push(FieldError::forbidden(
            child(path, "etcd.local.imageTag"),
            format!("tag {tag} is invalid"),
        ));
    }
    if etcd.local.is_defined() && etcd.external.is_defined() {
        errors.push(FieldError::forbidden(
            child(path, "etcd.local"),
            "cannot have both external and local etcd",
        ));
    }
    errors
}

/// An OCI image tag may only contain letters, digits, `_`, `.` and `-`.
fn is_valid_image_tag(tag: &str) -> bool {
    tag.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// kubeadm init and join must wait equally long for the control-plane components, since a
/// KubeadmControlPlane's machines use both.
fn timeout_consistency_errors(config: &KubeadmConfigSpec, path: &str) -> Vec<FieldError> {
    let shown = |value: Option<i32>| value.map_or_else(|| "unset".to_owned(), |v| v.to_string());
    let init = config
        .init_configuration
        .timeouts
        .control_plane_component_health_check_seconds;
    let join = config
        .join_configuration
        .timeouts
        .control_plane_component_health_check_seconds;
    if init == join {
        return Vec::new();
    }
    let (init, join) = (shown(init), shown(join));
    let rule = format!(
        "controlPlaneComponentHealthCheckSeconds must be set to the same value both in \
         initConfiguration.timeouts ({init}) and in joinConfiguration.timeouts ({join})"
    );
    vec![
        FieldError::invalid(
            child(
                path,
                "initConfiguration.timeouts.controlPlaneComponentHealthCheckSeconds",
            ),
            &init,
            &rule,
        ),
        FieldError::invalid(
            child(
                path,
                "joinConfiguration.timeouts.controlPlaneComponentHealthCheckSeconds",
            ),
            &join,
            rule,
        ),
    ]
}

const RANDOM_PLACEHOLDER: &str = "{{ .random }}";
const MAX_NAME_LENGTH: usize = 63;
const RANDOM_LENGTH: usize = 5;

fn naming_errors(naming: Option<&MachineNamingSpec>, base: &str) -> Vec<FieldError> {
    let Some(template) = naming
        .and_then(|n| n.template.as_deref())
        .filter(|t| !t.is_empty())
    else {
        return Vec::new();
    };
    let path = child(base, "machineNaming.template");
    let mut errors = Vec::new();
    if !template.contains(RANDOM_PLACEHOLDER) {
        errors.push(FieldError::invalid(
            &path,
            template,
            "invalid template, {{ .random }} is missing",
        ));
    }
    match render_machine_name(template, "cluster", "kubeadmcontrolplane", "x2b4z") {
        Err(problem) => errors.push(FieldError::invalid(
            &path,
            template,
            format!("invalid template: {problem}"),
        )),
        Ok(name) => {
            if let Some(problem) = dns1123_subdomain_problem(&name) {
                errors.push(FieldError::invalid(
                    &path,
                    template,
                    format!(
                        "invalid template, generated names would not be valid Kubernetes object \
                         names: {problem}"
                    ),
                ));
            }
        }
    }
    errors
}

/// Renders a machine naming template (`{{ .cluster.name }}`, `{{ .kubeadmControlPlane.name }}`,
/// `{{ .random }}`, with optional `{{-`/`-}}` whitespace trimming). Names longer than 63 characters
/// are cut to 58 and get the random suffix, as Cluster API's name generator does.
pub fn render_machine_name(
    template: &str,
    cluster: &str,
    control_plane: &str,
    random: &str,
) -> Result<String, String> {
    let mut name = String::new();
    let mut rest = template;
    let mut trim_next = false;
    while let Some(start) = rest.find("{{") {
        let text = &rest[..start];
        name.push_str(if trim_next { text.trim_start() } else { text });
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| format!("unclosed action in {template:?}"))?;
        let mut action = &after[..end];
        if let Some(inner) = action
            .strip_prefix('-')
            .filter(|a| a.starts_with(char::is_whitespace))
        {
            name.truncate(name.trim_end().len());
            action = inner;
        }
        trim_next = false;
        if let Some(inner) = action
            .strip_suffix('-')
            .filter(|a| a.ends_with(char::is_whitespace))
        {
            trim_next = true;
            action = inner;
        }
        let value = match action.trim() {
            ".cluster.name" => cluster,
            ".kubeadmControlPlane.name" => control_plane,
            ".random" => random,
            other => {
                return Err(format!(
                    "unsupported action \"{{{{ {other} }}}}\"; use .cluster.name, \
                     .kubeadmControlPlane.name or .random"
                ));
            }
        };
        name.push_str(value);
        rest = &after[end + 2..];
    }
    name.push_str(if trim_next { rest.trim_start() } else { rest });
    if name.len() > MAX_NAME_LENGTH {
        let mut cut = MAX_NAME_LENGTH - RANDOM_LENGTH;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
        name.push_str(random);
    }
    Ok(name)
}

fn version_skew_errors(old: &str, new: &str) -> Vec<FieldError> {
    let from = match Semver::parse_tolerant(old) {
        Ok(from) => from,
        Err(problem) => {
            return vec![FieldError::invalid(
                "spec.version",
                old,
                format!("failed to parse current kubeadmcontrolplane version: {problem}"),
            )];
        }
    };
    // An unparsable new version is already reported by the create rules.
    let Ok(to) = Semver::parse_tolerant(new) else {
        return Vec::new();
    };
    let ceiling = Semver::new(from.major, from.minor + 2, 0);
    if to >= ceiling {
        return vec![FieldError::forbidden(
            "spec.version",
            format!("cannot update Kubernetes version from {old} to {new}"),
        )];
    }
    Vec::new()
}

/// The CoreDNS releases Cluster API's Corefile migration (github.com/coredns/corefile-migration v1.0.35,
/// the version Cluster API v1.14.1 uses) can migrate between, oldest first: an upgrade must start from one
/// of them and end at a later one.
const COREDNS_MIGRATIONS: [&str; 58] = [
    "1.1.3", "1.1.4", "1.2.0", "1.2.1", "1.2.2", "1.2.3", "1.2.4", "1.2.5", "1.2.6", "1.3.0",
    "1.3.1", "1.4.0", "1.5.0", "1.5.1", "1.5.2", "1.6.0", "1.6.1", "1.6.2", "1.6.3", "1.6.4",
    "1.6.5", "1.6.6", "1.6.7", "1.6.9", "1.7.0", "1.7.1", "1.8.0", "1.8.3", "1.8.4", "1.8.5",
    "1.8.6", "1.8.7", "1.9.0", "1.9.1", "1.9.2", "1.9.3", "1.9.4", "1.10.0", "1.10.1", "1.11.0",
    "1.11.1", "1.11.3", "1.11.4", "1.12.0", "1.12.1", "1.12.2", "1.12.3", "1.12.4", "1.13.0",
    "1.13.1", "1.13.2", "1.14.0", "1.14.1", "1.14.2", "1.14.3", "1.14.4", "1.14.6", "1.14.7",
];

/// Whether the Corefile migration goes up from `from` to `to` (both `major.minor.patch`), with its
/// own wording when it cannot.
fn coredns_up_migration(from: &str, to: &str) -> Result<(), String> {
    let Some(start) = COREDNS_MIGRATIONS.iter().position(|v| *v == from) else {
        return Err(format!("start version '{from}' not supported"));
    };
    if COREDNS_MIGRATIONS[start + 1..].contains(&to) {
        Ok(())
    } else {
        Err(format!("cannot migrate up to '{to}' from '{from}'"))
    }
}

fn coredns_upgrade_errors(
    old: &ClusterConfiguration,
    new: &ClusterConfiguration,
) -> Vec<FieldError> {
    let (Some(from_tag), Some(to_tag)) = (
        old.dns.image_tag.as_deref().filter(|t| !t.is_empty()),
        new.dns.image_tag.as_deref().filter(|t| !t.is_empty()),
    ) else {
        return Vec::new();
    };
    let path = child(SPEC_CLUSTER_CONFIGURATION, "dns.imageTag");
    let from = match Semver::parse_image_tag(from_tag) {
        Ok(from) => from,
        Err(problem) => {
            return vec![FieldError::invalid(
                path,
                from_tag,
                format!("failed to parse current CoreDNS version: {problem}"),
            )];
        }
    };
    // An unparsable target is already reported by the create rules.
    let Ok(to) = Semver::parse_image_tag(to_tag) else {
        return Vec::new();
    };
    // The same release is fine even when the migration does not know it (as in Cluster API).
    if to == from {
        return Vec::new();
    }
    let plain = |v: &Semver| format!("{}.{}.{}", v.major, v.minor, v.patch);
    match coredns_up_migration(&plain(&from), &plain(&to)) {
        Ok(()) => Vec::new(),
        Err(why) => vec![FieldError::forbidden(
            path,
            format!(
                "cannot migrate CoreDNS up to '{}' from '{}': {why}",
                plain(&to),
                plain(&from)
            ),
        )],
    }
}

fn uses_external_etcd(config: Option<&KubeadmConfigSpec>) -> bool {
    config.is_some_and(|c| c.cluster_configuration.etcd.external.is_defined())
}

/// Changed paths outside [`MUTABLE_PATHS`], as errors. Status is not compared (it has its own
/// subresource) and metadata is always mutable.
fn immutable_field_errors(
    old: &KubeadmControlPlaneSpec,
    new: &KubeadmControlPlaneSpec,
) -> Vec<FieldError> {
    let mut changed = Vec::new();
    diff_paths(
        &to_json(old),
        &to_json(new),
        &mut vec!["spec".to_owned()],
        &mut changed,
    );
    changed.sort();
    changed
        .into_iter()
        .filter(|path| {
            !MUTABLE_PATHS
                .iter()
                .any(|allowed| path_allowed(allowed, path))
        })
        .map(|path| FieldError::forbidden(path.join("."), "cannot be modified"))
        .collect()
}

fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The leaf paths of the JSON merge patch from `old` to `new`: changed or removed keys, and every
/// leaf of an added object. Lists count as leaves.
fn diff_paths(old: &Value, new: &Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let (Value::Object(old), Value::Object(new)) = (old, new) else {
        if old != new {
            out.push(path.clone());
        }
        return;
    };
    for (key, new_value) in new {
        path.push(key.clone());
        match (old.get(key), new_value) {
            (Some(old_value), _) if old_value == new_value => {}
            (Some(old_value @ Value::Object(_)), Value::Object(_)) => {
                diff_paths(old_value, new_value, path, out)
            }
            (_, Value::Object(added)) => leaf_paths(added, path, out),
            _ => out.push(path.clone()),
        }
        path.pop();
    }
    for key in old.keys().filter(|key| !new.contains_key(*key)) {
        path.push(key.clone());
        out.push(path.clone());
        path.pop();
    }
}

fn leaf_paths(object: &Map<String, Value>, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    for (key, value) in object {
        path.push(key.clone());
        match value {
            Value::Object(inner) => leaf_paths(inner, path, out),
            _ => out.push(path.clone()),
        }
        path.pop();
    }
}

/// Whether `path` is covered by `allowed`: equal to it, or below a `*` in it.
fn path_allowed(allowed: &[&str], path: &[String]) -> bool {
    for (i, segment) in path.iter().enumerate() {
        match allowed.get(i) {
            None => return false,
            Some(&"*") => return true,
            Some(expected) if segment != expected => return false,
            Some(_) => {}
        }
    }
    path.len() == allowed.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::v1beta2::{ExternalEtcd, Format};
    use crate::cluster::v1beta2::MachineTaint;
    use crate::controlplane::defaults::default_kcp;

    const KCP: &str = r#"
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata:
  name: my-cluster-control-plane
  namespace: default
spec:
  replicas: 3
  version: v1.33.1
  machineTemplate:
    metadata:
      labels:
        environment: test
    spec:
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: OpenStackMachineTemplate
        name: my-cluster-control-plane-1
      taints:
        - key: example.com/dedicated
          effect: NoSchedule
          propagation: Always
  kubeadmConfigSpec:
    clusterConfiguration:
      controlPlaneEndpoint: my-cluster.example.com:6443
      certificatesDir: /etc/kubernetes/pki
      certificateValidityPeriodDays: 365
      caCertificateValidityPeriodDays: 3650
      apiServer:
        certSANs: [localhost]
      etcd:
        local:
          imageTag: 3.5.21-0
          extraArgs:
            - {name: heartbeat-interval, value: "250"}
      dns:
        imageTag: v1.11.3
    initConfiguration:
      nodeRegistration:
        kubeletExtraArgs:
          - {name: cloud-provider, value: external}
      timeouts:
        controlPlaneComponentHealthCheckSeconds: 300
    joinConfiguration:
      nodeRegistration:
        kubeletExtraArgs:
          - {name: cloud-provider, value: external}
      timeouts:
        controlPlaneComponentHealthCheckSeconds: 300
    files:
      - path: /etc/kubernetes/cloud.conf
        contentFrom:
          secret: {name: cloud-config, key: cloud.conf}
  rollout:
    before:
      certificatesExpiryDays: 21
    strategy:
      type: RollingUpdate
      rollingUpdate:
        maxSurge: 1
  machineNaming:
    template: "{{ .kubeadmControlPlane.name }}-{{ .random }}"
"#;

    fn kcp() -> KubeadmControlPlane {
        let mut kcp: KubeadmControlPlane = serde_saphyr::from_str(KCP).expect("fixture parses");
        default_kcp(&mut kcp);
        kcp
    }

    fn config(kcp: &mut KubeadmControlPlane) -> &mut KubeadmConfigSpec {
        kcp.spec.kubeadm_config_spec.as_mut().unwrap()
    }

    fn cluster(kcp: &mut KubeadmControlPlane) -> &mut ClusterConfiguration {
        &mut config(kcp).cluster_configuration
    }

    fn rollout(kcp: &mut KubeadmControlPlane) -> &mut KubeadmControlPlaneRolloutSpec {
        kcp.spec.rollout.as_mut().unwrap()
    }

    fn set_max_surge(kcp: &mut KubeadmControlPlane, value: IntOrString) {
        let strategy = rollout(kcp).strategy.as_mut().unwrap();
        strategy.rolling_update.as_mut().unwrap().max_surge = Some(value);
    }

    fn set_naming(kcp: &mut KubeadmControlPlane, template: &str) {
        kcp.spec.machine_naming = Some(MachineNamingSpec {
            template: Some(template.into()),
        });
    }

    fn external_etcd() -> ExternalEtcd {
        ExternalEtcd {
            endpoints: vec!["https://etcd.example.com:2379".into()],
            ca_file: "/etc/etcd/ca.crt".into(),
            cert_file: "/etc/etcd/client.crt".into(),
            key_file: "/etc/etcd/client.key".into(),
        }
    }

    fn use_external_etcd(kcp: &mut KubeadmControlPlane) {
        let etcd = &mut cluster(kcp).etcd;
        etcd.local = Default::default();
        etcd.external = external_etcd();
    }

    fn found(errors: Result<(), FieldErrors>) -> Vec<(String, String)> {
        errors
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.path, e.rule))
            .collect()
    }

    fn expect(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(p, r)| (p.to_string(), r.to_string()))
            .collect()
    }

    type Mutation = fn(&mut KubeadmControlPlane);
    /// The (path, rule) pairs a case must produce.
    type Expected = &'static [(&'static str, &'static str)];

    const LEARNER: &str = LEARNER_MODE_UNSUPPORTED;
    const CC: &str = "spec.kubeadmConfigSpec.clusterConfiguration";

    const CREATE_CASES: &[(&str, Mutation, Expected)] = &[
        ("valid", |_| {}, &[]),
        (
            "replicas unset",
            |k| k.spec.replicas = None,
            &[("spec.replicas", "is required")],
        ),
        (
            "zero replicas",
            |k| k.spec.replicas = Some(0),
            &[("spec.replicas", "cannot be less than or equal to 0")],
        ),
        (
            "negative replicas",
            |k| k.spec.replicas = Some(-1),
            &[("spec.replicas", "cannot be less than or equal to 0")],
        ),
        (
            "even replicas with stacked etcd",
            |k| k.spec.replicas = Some(4),
            &[(
                "spec.replicas",
                "cannot be an even number when etcd is stacked",
            )],
        ),
        (
            "even replicas with external etcd",
            |k| {
                k.spec.replicas = Some(2);
                use_external_etcd(k);
            },
            &[],
        ),
        (
            "infrastructureRef without apiGroup",
            |k| {
                k.spec
                    .machine_template
                    .spec
                    .infrastructure_ref
                    .api_group
                    .clear()
            },
            &[(
                "spec.machineTemplate.spec.infrastructureRef.apiGroup",
                "cannot be empty",
            )],
        ),
        (
            "infrastructureRef without kind and name",
            |k| {
                let reference = &mut k.spec.machine_template.spec.infrastructure_ref;
                reference.kind.clear();
                reference.name.clear();
            },
            &[
                (
                    "spec.machineTemplate.spec.infrastructureRef.kind",
                    "cannot be empty",
                ),
                (
                    "spec.machineTemplate.spec.infrastructureRef.name",
                    "cannot be empty",
                ),
            ],
        ),
        (
            "reserved taint",
            |k| {
                k.spec.machine_template.spec.taints.push(MachineTaint {
                    key: "node.cluster.x-k8s.io/uninitialized".into(),
                    ..Default::default()
                })
            },
            &[(
                "spec.machineTemplate.spec.taints[1].key",
                "taint key is not allowed",
            )],
        ),
        (
            "version without v",
            |k| k.spec.version = "1.33.1".into(),
            &[("spec.version", "must start with v")],
        ),
        (
            "version not semver",
            |k| k.spec.version = "v1.33".into(),
            &[("spec.version", "must be a valid semantic version")],
        ),
        (
            "Kubernetes without learner mode",
            |k| k.spec.version = "v1.26.15".into(),
            &[("spec.version", LEARNER)],
        ),
        (
            "old Kubernetes with external etcd",
            |k| {
                k.spec.version = "v1.26.15".into();
                use_external_etcd(k);
            },
            &[],
        ),
        (
            "etcd without learner support",
            |k| cluster(k).etcd.local.image_tag = Some("3.3.15-0".into()),
            &[(
                "spec.kubeadmConfigSpec.clusterConfiguration.etcd.local.imageTag",
                LEARNER,
            )],
        ),
        (
            "etcd tag that is no release",
            |k| cluster(k).etcd.local.image_tag = Some("latest".into()),
            &[(
                "spec.kubeadmConfigSpec.clusterConfiguration.etcd.local.imageTag",
                "must be an etcd release such as 3.5.21-0, so that learner mode support can be checked",
            )],
        ),
        (
            "etcd tag with invalid characters",
            |k| cluster(k).etcd.local.image_tag = Some("3.5.21:0".into()),
            &[(
                "spec.kubeadmConfigSpec.clusterConfiguration.etcd.local.imageTag",
                "tag 3.5.21:0 is invalid",
            )],
        ),
        (
            "learner gate switched off",
            |k| {
                cluster(k)
                    .feature_gates
                    .insert("EtcdLearnerMode".into(), false);
            },
            &[(
                "spec.kubeadmConfigSpec.clusterConfiguration.featureGates.EtcdLearnerMode",
                "must not be false: new etcd members always join as learners",
            )],
        ),
        (
            "local and external etcd",
            |k| cluster(k).etcd.external = external_etcd(),
            &[(
                "spec.kubeadmConfigSpec.clusterConfiguration.etcd.local",
                "cannot have both external and local etcd",
            )],
        ),
        (
            "maxSurge 2",
            |k| set_max_surge(k, IntOrString::Int(2)),
            &[(
                "spec.rollout.strategy.rollingUpdate.maxSurge",
                "value must be 1 or 0",
            )],
        ),
        (
            "maxSurge percentage",
            |k| set_max_surge(k, IntOrString::String("50%".into())),
            &[(
                "spec.rollout.strategy.rollingUpdate.maxSurge",
                "value must be 1 or 0",
            )],
        ),
        (
            "maxSurge \"0\" with 3 replicas",
            |k| set_max_surge(k, IntOrString::String("0".into())),
            &[],
        ),
        (
            "maxSurge 0 with 1 replica",
            |k| {
                k.spec.replicas = Some(1);
                set_max_surge(k, IntOrString::Int(0));
            },
            &[(
                "spec.rollout.strategy.rollingUpdate.maxSurge",
                "when KubeadmControlPlane is configured to scale-in, replica count needs to be at least 3",
            )],
        ),
        (
            "certificate validity above its bound",
            |k| cluster(k).certificate_validity_period_days = Some(1096),
            &[(
                "spec.kubeadmConfigSpec.clusterConfiguration.certificateValidityPeriodDays",
                "must be between 1 and 1095",
            )],
        ),
        (
            "certificate validity above CA validity",
            |k| {
                cluster(k).ca_certificate_validity_period_days = Some(300);
                rollout(k).before = None;
            },
            &[(
                "spec.kubeadmConfigSpec.clusterConfiguration.certificateValidityPeriodDays",
                "must be less than or equal to caCertificateValidityPeriodDays (300)",
            )],
        ),
        (
            "CA validity out of bounds",
            |k| cluster(k).ca_certificate_validity_period_days = Some(0),
            &[(
                "spec.kubeadmConfigSpec.clusterConfiguration.caCertificateValidityPeriodDays",
                "must be between 1 and 36500",
            )],
        ),
        (
            "certificatesExpiryDays below 7",
            |k| rollout(k).before.as_mut().unwrap().certificates_expiry_days = Some(6),
            &[(
                "spec.rollout.before.certificatesExpiryDays",
                "must be greater than or equal to 7",
            )],
        ),
        (
            "certificatesExpiryDays not below the validity",
            |k| rollout(k).before.as_mut().unwrap().certificates_expiry_days = Some(365),
            &[(
                "spec.rollout.before.certificatesExpiryDays",
                "must be less than certificateValidityPeriodDays (365)",
            )],
        ),
        (
            "certificatesExpiryDays not below the default validity",
            |k| {
                cluster(k).certificate_validity_period_days = None;
                rollout(k).before.as_mut().unwrap().certificates_expiry_days = Some(400);
            },
            &[(
                "spec.rollout.before.certificatesExpiryDays",
                "must be less than the default certificateValidityPeriodDays (365)",
            )],
        ),
        (
            "naming template without random",
            |k| set_naming(k, "{{ .cluster.name }}-cp"),
            &[(
                "spec.machineNaming.template",
                "invalid template, {{ .random }} is missing",
            )],
        ),
        (
            "naming template with unknown field",
            |k| set_naming(k, "{{ .cluster.namespace }}-{{ .random }}"),
            &[(
                "spec.machineNaming.template",
                "invalid template: unsupported action \"{{ .cluster.namespace }}\"; use \
                 .cluster.name, .kubeadmControlPlane.name or .random",
            )],
        ),
        (
            "naming template giving invalid names",
            |k| set_naming(k, "CP_{{ .random }}"),
            &[(
                "spec.machineNaming.template",
                "invalid template, generated names would not be valid Kubernetes object names: a \
                 lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
                 '-' or '.', and must start and end with an alphanumeric character",
            )],
        ),
        (
            "machine template label",
            |k| {
                k.spec
                    .machine_template
                    .metadata
                    .as_mut()
                    .unwrap()
                    .labels
                    .insert("environment".into(), "not valid".into());
            },
            &[(
                "spec.machineTemplate.metadata.labels",
                "a label value must be empty or at most 63 characters of alphanumerics, '-', '_' \
                 or '.', starting and ending with an alphanumeric character",
            )],
        ),
        (
            "CoreDNS tag with invalid characters",
            |k| cluster(k).dns.image_tag = Some("v1.11.3@sha".into()),
            &[(
                "spec.kubeadmConfigSpec.clusterConfiguration.dns.imageTag",
                "tag v1.11.3@sha is invalid",
            )],
        ),
        (
            "CoreDNS tag that is no version",
            |k| cluster(k).dns.image_tag = Some("latest".into()),
            &[(
                "spec.kubeadmConfigSpec.clusterConfiguration.dns.imageTag",
                "failed to parse CoreDNS version: \"latest\" is not a number",
            )],
        ),
        (
            "health check timeouts differ",
            |k| {
                config(k)
                    .join_configuration
                    .timeouts
                    .control_plane_component_health_check_seconds = None
            },
            &[
                (
                    "spec.kubeadmConfigSpec.initConfiguration.timeouts.controlPlaneComponentHealthCheckSeconds",
                    "controlPlaneComponentHealthCheckSeconds must be set to the same value both in \
                     initConfiguration.timeouts (300) and in joinConfiguration.timeouts (unset)",
                ),
                (
                    "spec.kubeadmConfigSpec.joinConfiguration.timeouts.controlPlaneComponentHealthCheckSeconds",
                    "controlPlaneComponentHealthCheckSeconds must be set to the same value both in \
                     initConfiguration.timeouts (300) and in joinConfiguration.timeouts (unset)",
                ),
            ],
        ),
        (
            "KubeadmConfigSpec rule",
            |k| config(k).files[0].content_from.secret.key.clear(),
            &[(
                "spec.kubeadmConfigSpec.files[0].contentFrom.secret.key",
                "secret file source must specify non-empty secret key",
            )],
        ),
    ];

    #[test]
    fn create_rules() {
        for (name, mutate, expected) in CREATE_CASES {
            let mut object = kcp();
            mutate(&mut object);
            assert_eq!(
                found(validate_kcp_create(&object)),
                expect(expected),
                "case {name:?}"
            );
        }
    }

    const UPDATE_CASES: &[(&str, Mutation, Expected)] = &[
        ("unchanged", |_| {}, &[]),
        (
            "mutable fields",
            |k| {
                k.spec.replicas = Some(5);
                k.spec.version = "v1.34.2".into();
                k.spec.machine_template.spec.infrastructure_ref.name =
                    "my-cluster-control-plane-2".into();
                k.metadata.labels = Some([("team".to_owned(), "a".to_owned())].into());
                let c = cluster(k);
                c.api_server.cert_sans.push("10.0.0.1".into());
                c.certificate_validity_period_days = Some(300);
                c.etcd.local.image_tag = Some("3.5.22-0".into());
                c.dns.image_tag = Some("v1.12.0".into());
                c.feature_gates
                    .insert("ControlPlaneKubeletLocalMode".into(), true);
                let s = config(k);
                s.pre_kubeadm_commands.push("swapoff -a".into());
                s.format = Some(Format::CloudConfig);
                s.join_configuration.discovery.tls_bootstrap_token =
                    Some("abcdef.0123456789abcdef".into());
                rollout(k).before = None;
                k.spec.machine_naming = None;
            },
            &[],
        ),
        ("downgrade", |k| k.spec.version = "v1.32.4".into(), &[]),
        (
            "version skips a minor release",
            |k| k.spec.version = "v1.35.0".into(),
            &[(
                "spec.version",
                "cannot update Kubernetes version from v1.33.1 to v1.35.0",
            )],
        ),
        (
            "control plane endpoint",
            |k| cluster(k).control_plane_endpoint = Some("other.example.com:6443".into()),
            &[(
                "spec.kubeadmConfigSpec.clusterConfiguration.controlPlaneEndpoint",
                "cannot be modified",
            )],
        ),
        (
            "certificates dir and CA validity",
            |k| {
                let c = cluster(k);
                c.certificates_dir = None;
                c.ca_certificate_validity_period_days = Some(7300);
            },
            &[
                (
                    "spec.kubeadmConfigSpec.clusterConfiguration.caCertificateValidityPeriodDays",
                    "cannot be modified",
                ),
                (
                    "spec.kubeadmConfigSpec.clusterConfiguration.certificatesDir",
                    "cannot be modified",
                ),
            ],
        ),
        (
            "local to external etcd",
            use_external_etcd,
            &[(
                "spec.kubeadmConfigSpec.clusterConfiguration.etcd.external",
                "cannot change between external and local etcd",
            )],
        ),
        (
            "CoreDNS downgrade",
            |k| cluster(k).dns.image_tag = Some("v1.10.1".into()),
            &[(
                "spec.kubeadmConfigSpec.clusterConfiguration.dns.imageTag",
                "cannot migrate CoreDNS up to '1.10.1' from '1.11.3': cannot migrate up to '1.10.1' from '1.11.3'",
            )],
        ),
        (
            "CoreDNS upgrade the Corefile migration knows",
            |k| cluster(k).dns.image_tag = Some("v1.12.1".into()),
            &[],
        ),
        (
            // Cluster API's webhook test "should fail when upgrading to an unsupported version"
            // (kubernetes-sigs/cluster-api#14117 moved the migration to v1.0.35).
            "CoreDNS upgrade to a version the Corefile migration does not know",
            |k| cluster(k).dns.image_tag = Some("v99.99.99".into()),
            &[(
                "spec.kubeadmConfigSpec.clusterConfiguration.dns.imageTag",
                "cannot migrate CoreDNS up to '99.99.99' from '1.11.3': cannot migrate up to '99.99.99' from '1.11.3'",
            )],
        ),
        (
            "CoreDNS upgrade to the newest release v1.0.35 knows",
            |k| cluster(k).dns.image_tag = Some("1.14.7".into()),
            &[],
        ),
        (
            "CoreDNS downgrade when CoreDNS is not managed",
            |k| {
                cluster(k).dns.image_tag = Some("v1.10.1".into());
                k.metadata.annotations =
                    Some([(SKIP_COREDNS_ANNOTATION.to_owned(), String::new())].into());
            },
            &[],
        ),
        (
            "create rules apply",
            |k| k.spec.replicas = Some(2),
            &[(
                "spec.replicas",
                "cannot be an even number when etcd is stacked",
            )],
        ),
    ];

    #[test]
    fn a_coredns_upgrade_from_a_release_the_migration_does_not_know_is_refused_unless_unchanged() {
        let mut old = kcp();
        cluster(&mut old).dns.image_tag = Some("v1.11.2".into());
        let mut new = old.clone();
        cluster(&mut new).dns.image_tag = Some("v1.12.1".into());
        assert_eq!(
            found(validate_kcp_update(&old, &new)),
            expect(&[(
                "spec.kubeadmConfigSpec.clusterConfiguration.dns.imageTag",
                "cannot migrate CoreDNS up to '1.12.1' from '1.11.2': start version '1.11.2' not supported",
            )])
        );
        // The same release (another spelling) is no migration at all.
        cluster(&mut new).dns.image_tag = Some("1.11.2".into());
        assert_eq!(found(validate_kcp_update(&old, &new)), vec![]);
    }

    #[test]
    fn etcd_backup_is_checked_field_by_field_and_may_change_at_any_time() {
        use super::super::etcd_backup::{EtcdBackup, EtcdBackupS3};
        let good = EtcdBackup {
            schedule: Some("30 2 * * *".into()),
            s3: EtcdBackupS3 {
                endpoint: "https://s3.eu-central-1.amazonaws.com".into(),
                bucket: "etcd-backups".into(),
                prefix: Some("clusters/eu".into()),
                ..EtcdBackupS3::default()
            },
            ..EtcdBackup::default()
        };
        let old = kcp();
        let mut new = old.clone();
        new.spec.etcd_backup = Some(good.clone());
        assert_eq!(found(validate_kcp_create(&new)), vec![]);
        assert_eq!(found(validate_kcp_update(&old, &new)), vec![], "added");
        let mut changed = new.clone();
        changed.spec.etcd_backup.as_mut().unwrap().retention = Some(9);
        assert_eq!(
            found(validate_kcp_update(&new, &changed)),
            vec![],
            "changed"
        );
        assert_eq!(found(validate_kcp_update(&new, &old)), vec![], "removed");

        let mut bad = new.clone();
        let backup = bad.spec.etcd_backup.as_mut().unwrap();
        backup.schedule = Some("every day".into());
        backup.s3.endpoint = "s3.example.com".into();
        backup.s3.bucket = "Etcd_Backups".into();
        backup.s3.prefix = Some("a/../b".into());
        let errors = found(validate_kcp_create(&bad));
        let paths: Vec<&str> = errors.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.etcdBackup.schedule",
                "spec.etcdBackup.s3.endpoint",
                "spec.etcdBackup.s3.bucket",
                "spec.etcdBackup.s3.prefix",
            ],
            "{errors:?}"
        );
        assert!(errors[0].1.contains("has 2 fields"), "{errors:?}");
        assert!(errors[1].1.contains("https://"), "{errors:?}");

        let mut external = new.clone();
        cluster(&mut external).etcd.external = external_etcd();
        assert!(
            found(validate_kcp_create(&external))
                .iter()
                .any(|(path, rule)| path == "spec.etcdBackup" && rule.contains("stacked")),
        );
    }

    #[test]
    fn update_rules() {
        for (name, mutate, expected) in UPDATE_CASES {
            let old = kcp();
            let mut new = old.clone();
            mutate(&mut new);
            let mut got = found(validate_kcp_update(&old, &new));
            got.sort();
            let mut want = expect(expected);
            want.sort();
            assert_eq!(got, want, "case {name:?}");
        }
    }

    /// A control plane at `version` on kubeadm's etcd, with `flags` in `etcd.local.extraArgs`.
    fn with_etcd_flags(version: &str, flags: &[&str]) -> KubeadmControlPlane {
        let mut k = kcp();
        k.spec.version = version.into();
        let local = &mut cluster(&mut k).etcd.local;
        local.image_tag = None;
        local.extra_args = flags
            .iter()
            .map(|f| crate::bootstrap::v1beta2::Arg::new(*f, "true"))
            .collect();
        k
    }

    #[test]
    fn a_flag_etcd_3_7_removed_is_refused_at_1_37_naming_its_replacement() {
        const PATH: &str =
            "spec.kubeadmConfigSpec.clusterConfiguration.etcd.local.extraArgs[1].name";
        let corrupt = "experimental-initial-corrupt-check";
        // Kubernetes 1.36's kubeadm deploys etcd 3.6.8, which still has the flag (deprecated).
        let at_136 = with_etcd_flags("v1.36.3", &["heartbeat-interval", corrupt]);
        assert_eq!(found(validate_kcp_create(&at_136)), vec![]);

        let at_137 = with_etcd_flags("v1.37.2", &["heartbeat-interval", corrupt]);
        let refused = validate_kcp_create(&at_137).unwrap_err().to_string();
        assert!(
            refused.contains(PATH)
                && refused.contains(corrupt)
                && refused.contains(
                    "etcd 3.7 (which a control plane at v1.37.2 runs) no longer has this flag"
                )
                && refused.contains("use --feature-gates=InitialCorruptCheck=true instead"),
            "{refused}"
        );
        // A bump from 1.36 to 1.37 is refused the same way.
        let bump = found(validate_kcp_update(&at_136, &at_137));
        assert_eq!(bump.len(), 1, "{bump:?}");
        assert_eq!(bump[0].0, PATH);
        assert!(kcp_update_warnings(&at_136, &at_137).is_empty());

        // Pinning etcd 3.6 keeps the flag usable at 1.37.
        let mut pinned = at_137.clone();
        cluster(&mut pinned).etcd.local.image_tag = Some("3.6.16-0".into());
        assert_eq!(found(validate_kcp_create(&pinned)), vec![]);
        // ... and moving that pin to 3.7 is a change of etcd: refused.
        let mut unpinned = pinned.clone();
        cluster(&mut unpinned).etcd.local.image_tag = Some("3.7.3-0".into());
        assert_eq!(found(validate_kcp_update(&pinned, &unpinned)).len(), 1);

        // Already there at 1.37 and etcd unchanged: admitted with a warning, so other edits go through.
        let mut edited = at_137.clone();
        edited.spec.replicas = Some(5);
        assert_eq!(found(validate_kcp_update(&at_137, &edited)), vec![]);
        let warnings = kcp_update_warnings(&at_137, &edited);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with(PATH) && warnings[0].contains("InitialCorruptCheck"),
            "{warnings:?}"
        );

        // Adding another one at 1.37 is refused.
        let added = with_etcd_flags(
            "v1.37.2",
            &[
                "heartbeat-interval",
                corrupt,
                "experimental-watch-progress-notify-interval",
            ],
        );
        let errors = found(validate_kcp_update(&at_137, &added));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].0.ends_with("extraArgs[2].name")
                && errors[0].1.contains("--watch-progress-notify-interval")
        );

        // External etcd is not kubeadm's to start.
        let mut external = at_137.clone();
        use_external_etcd(&mut external);
        assert!(removed_etcd_flags(&external).is_empty());
    }

    #[test]
    fn external_to_local_etcd_is_refused_too() {
        let mut old = kcp();
        use_external_etcd(&mut old);
        let mut new = old.clone();
        cluster(&mut new).etcd = Default::default();
        let errors = found(validate_kcp_update(&old, &new));
        assert!(
            errors.contains(&(
                format!("{CC}.etcd.external"),
                "cannot change between external and local etcd".to_owned()
            )),
            "{errors:?}"
        );
    }

    #[test]
    fn scale_rules() {
        let stacked = kcp();
        let mut external = kcp();
        use_external_etcd(&mut external);
        let cases: [(i32, &KubeadmControlPlane, Expected); 6] = [
            (3, &stacked, &[]),
            (5, &stacked, &[]),
            (2, &external, &[]),
            (
                0,
                &stacked,
                &[("spec.replicas", "replicas should be greater than zero")],
            ),
            (
                -1,
                &external,
                &[("spec.replicas", "replicas should be greater than zero")],
            ),
            (
                4,
                &stacked,
                &[(
                    "spec.replicas",
                    "replicas cannot be an even number when etcd is stacked",
                )],
            ),
        ];
        for (replicas, object, expected) in cases {
            assert_eq!(
                found(validate_scale(replicas, object)),
                expect(expected),
                "replicas {replicas}"
            );
        }
    }

    const TEMPLATE: &str = r#"
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlaneTemplate
metadata:
  name: quick-start-control-plane
spec:
  template:
    metadata:
      labels: {environment: test}
    spec:
      machineTemplate:
        metadata:
          labels: {role: control-plane}
        spec:
          taints:
            - {key: example.com/dedicated, effect: NoSchedule, propagation: Always}
      kubeadmConfigSpec:
        clusterConfiguration:
          certificateValidityPeriodDays: 365
          etcd:
            local:
              imageTag: 3.5.21-0
        files:
          - path: /etc/motd
            content: hello
      rollout:
        before:
          certificatesExpiryDays: 30
        strategy:
          type: RollingUpdate
          rollingUpdate:
            maxSurge: 1
      machineNaming:
        template: "{{ .cluster.name }}-cp-{{ .random }}"
"#;

    fn template() -> KubeadmControlPlaneTemplate {
        serde_saphyr::from_str(TEMPLATE).expect("template fixture parses")
    }

    fn template_spec(
        t: &mut KubeadmControlPlaneTemplate,
    ) -> &mut KubeadmControlPlaneTemplateResourceSpec {
        t.spec.template.spec.as_mut().unwrap()
    }

    fn template_config(t: &mut KubeadmControlPlaneTemplate) -> &mut KubeadmConfigSpec {
        template_spec(t).kubeadm_config_spec.as_mut().unwrap()
    }

    type TemplateMutation = fn(&mut KubeadmControlPlaneTemplate);

    const TEMPLATE_CASES: &[(&str, TemplateMutation, Expected)] = &[
        ("valid", |_| {}, &[]),
        (
            "empty template",
            |t| t.spec.template = Default::default(),
            &[],
        ),
        (
            "maxSurge 0 needs no replicas in a template",
            |t| {
                let strategy = template_spec(t)
                    .rollout
                    .as_mut()
                    .unwrap()
                    .strategy
                    .as_mut()
                    .unwrap();
                strategy.rolling_update.as_mut().unwrap().max_surge = Some(IntOrString::Int(0));
            },
            &[],
        ),
        (
            "maxSurge 3",
            |t| {
                let strategy = template_spec(t)
                    .rollout
                    .as_mut()
                    .unwrap()
                    .strategy
                    .as_mut()
                    .unwrap();
                strategy.rolling_update.as_mut().unwrap().max_surge = Some(IntOrString::Int(3));
            },
            &[(
                "spec.template.spec.rollout.strategy.rollingUpdate.maxSurge",
                "value must be 1 or 0",
            )],
        ),
        (
            "certificatesExpiryDays",
            |t| {
                template_spec(t)
                    .rollout
                    .as_mut()
                    .unwrap()
                    .before
                    .as_mut()
                    .unwrap()
                    .certificates_expiry_days = Some(3)
            },
            &[(
                "spec.template.spec.rollout.before.certificatesExpiryDays",
                "must be greater than or equal to 7",
            )],
        ),
        (
            "naming",
            |t| {
                template_spec(t).machine_naming.as_mut().unwrap().template =
                    Some("{{ .cluster.name }}".into())
            },
            &[(
                "spec.template.spec.machineNaming.template",
                "invalid template, {{ .random }} is missing",
            )],
        ),
        (
            "taint",
            |t| {
                let machine = template_spec(t).machine_template.as_mut().unwrap();
                machine.spec.as_mut().unwrap().taints[0].key =
                    "node-role.kubernetes.io/master".into();
            },
            &[(
                "spec.template.spec.machineTemplate.spec.taints[0].key",
                "taint is deprecated since 1.24 and should not be used anymore",
            )],
        ),
        (
            "machine template label",
            |t| {
                let machine = template_spec(t).machine_template.as_mut().unwrap();
                machine
                    .metadata
                    .as_mut()
                    .unwrap()
                    .labels
                    .insert("-bad".into(), String::new());
            },
            &[(
                "spec.template.spec.machineTemplate.metadata.labels",
                "name part must be 1-63 characters of alphanumerics, '-', '_' or '.', starting and \
                 ending with an alphanumeric character (e.g. 'MyName', 'my.name' or '123-abc')",
            )],
        ),
        (
            "template label",
            |t| {
                t.spec
                    .template
                    .metadata
                    .as_mut()
                    .unwrap()
                    .labels
                    .insert("-bad".into(), String::new());
            },
            &[(
                "spec.template.metadata.labels",
                "name part must be 1-63 characters of alphanumerics, '-', '_' or '.', starting and \
                 ending with an alphanumeric character (e.g. 'MyName', 'my.name' or '123-abc')",
            )],
        ),
        (
            "etcd without learner support",
            |t| {
                template_config(t)
                    .cluster_configuration
                    .etcd
                    .local
                    .image_tag = Some("3.3.10".into())
            },
            &[(
                "spec.template.spec.kubeadmConfigSpec.clusterConfiguration.etcd.local.imageTag",
                LEARNER,
            )],
        ),
        (
            "KubeadmConfigSpec rule",
            |t| {
                let files = &mut template_config(t).files;
                files.push(files[0].clone());
            },
            &[(
                "spec.template.spec.kubeadmConfigSpec.files[1].path",
                "path property must be unique among all files",
            )],
        ),
        (
            "health check timeouts differ",
            |t| {
                template_config(t)
                    .init_configuration
                    .timeouts
                    .control_plane_component_health_check_seconds = Some(60)
            },
            &[
                (
                    "spec.template.spec.kubeadmConfigSpec.initConfiguration.timeouts.controlPlaneComponentHealthCheckSeconds",
                    "controlPlaneComponentHealthCheckSeconds must be set to the same value both in \
                     initConfiguration.timeouts (60) and in joinConfiguration.timeouts (unset)",
                ),
                (
                    "spec.template.spec.kubeadmConfigSpec.joinConfiguration.timeouts.controlPlaneComponentHealthCheckSeconds",
                    "controlPlaneComponentHealthCheckSeconds must be set to the same value both in \
                     initConfiguration.timeouts (60) and in joinConfiguration.timeouts (unset)",
                ),
            ],
        ),
    ];

    #[test]
    fn template_create_rules() {
        for (name, mutate, expected) in TEMPLATE_CASES {
            let mut object = template();
            mutate(&mut object);
            assert_eq!(
                found(validate_kcp_template_create(&object)),
                expect(expected),
                "case {name:?}"
            );
        }
    }

    #[test]
    fn template_spec_is_immutable() {
        let old = template();
        assert_eq!(validate_kcp_template_update(&old, &old.clone()), Ok(()));

        // Metadata of the template itself may change.
        let mut relabeled = old.clone();
        relabeled.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
        assert_eq!(validate_kcp_template_update(&old, &relabeled), Ok(()));

        // A spec written with the old defaults equals one without them.
        let mut defaulted = old.clone();
        apply_previous_defaults(template_config(&mut defaulted));
        assert_eq!(validate_kcp_template_update(&old, &defaulted), Ok(()));
        assert_eq!(validate_kcp_template_update(&defaulted, &old), Ok(()));

        // Dropping the formerly defaulted strategy is no change.
        let mut dropped = old.clone();
        template_spec(&mut dropped)
            .rollout
            .as_mut()
            .unwrap()
            .strategy = None;
        assert_eq!(validate_kcp_template_update(&old, &dropped), Ok(()));

        let mut changed = old.clone();
        template_spec(&mut changed).rollout.as_mut().unwrap().before = None;
        template_config(&mut changed).files[0].path = "/etc/issue".into();
        let errors = validate_kcp_template_update(&old, &changed).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors.0[0].path, "spec.template.spec");
        assert_eq!(
            errors.0[0].rule,
            "KubeadmControlPlaneTemplate spec.template.spec field is immutable. Please create new \
             resource instead. Changed: spec.template.spec.kubeadmConfigSpec.files, \
             spec.template.spec.rollout.before"
        );
    }

    #[test]
    fn machine_names() {
        let render = |t: &str| render_machine_name(t, "c1", "c1-cp", "x2b4z");
        assert_eq!(
            render("{{ .kubeadmControlPlane.name }}-{{ .random }}").unwrap(),
            "c1-cp-x2b4z"
        );
        assert_eq!(
            render("{{.cluster.name}}-  {{- .random -}} \n").unwrap(),
            "c1-x2b4z"
        );
        assert_eq!(
            render(&"a".repeat(70)).unwrap(),
            format!("{}x2b4z", "a".repeat(58))
        );
        assert!(
            render("{{ .random ")
                .unwrap_err()
                .starts_with("unclosed action")
        );
    }

    #[test]
    fn mutable_path_matching() {
        let path = |p: &str| p.split('.').map(str::to_owned).collect::<Vec<_>>();
        let etcd_external: &[&str] = &[
            "spec",
            "kubeadmConfigSpec",
            "clusterConfiguration",
            "etcd",
            "external",
            "*",
        ];
        assert!(path_allowed(
            etcd_external,
            &path("spec.kubeadmConfigSpec.clusterConfiguration.etcd.external.caFile")
        ));
        assert!(!path_allowed(
            etcd_external,
            &path("spec.kubeadmConfigSpec.clusterConfiguration.etcd.external")
        ));
        assert!(path_allowed(&["spec", "replicas"], &path("spec.replicas")));
        assert!(!path_allowed(
            &["spec", "replicas"],
            &path("spec.replicas.x")
        ));
        assert!(!path_allowed(&["spec", "rollout", "*"], &path("spec")));
    }
}
