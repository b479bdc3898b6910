//! kubeadm's own configuration file (API v1beta3 or v1beta4, chosen by Kubernetes version), the etcd
//! learner-mode gate (KEP-3614), and the static-pod patches that tie control-plane pods to their Machine
//! (KEP-2506).
//!
//! The KubeadmConfig types follow kubeadm v1beta4; v1beta3 output converts them back the way Cluster API
//! does: extra arguments become maps, two timeouts move to their old places, and fields v1beta3 does not
//! know (extraEnvs, imagePullSerial, encryptionAlgorithm, certificate validity periods, other timeouts)
//! are dropped.

use kubeadm_api::meta::{MACHINE_ANNOTATION, MACHINE_GENERATION_LABEL};
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kubeadm_api::bootstrap::v1beta2::{
    ApiEndpoint, Arg, BootstrapToken, BootstrapTokenDiscovery, Dns, EnvVar, Etcd, ExternalEtcd,
    HostPathMount, JoinControlPlane, KubeadmConfigSpec, LocalEtcd, NodeRegistrationOptions,
    Patches, Timeouts,
};
use serde::Serialize;

use super::version::KubeVersion;
use super::{ClusterFacts, JoinFacts, MachineFacts, RenderError, RenderInput, Role};

/// The kubeadm configuration API version a file is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeadmApi {
    V1Beta3,
    V1Beta4,
}

impl KubeadmApi {
    /// The `apiVersion` of the documents.
    pub fn api_version(self) -> &'static str {
        match self {
            Self::V1Beta3 => "kubeadm.k8s.io/v1beta3",
            Self::V1Beta4 => "kubeadm.k8s.io/v1beta4",
        }
    }
}

/// kubeadm reads v1beta4 from v1.31.0 on (pre-releases count as their release); older ones need v1beta3.
pub fn kubeadm_api_for(version: KubeVersion) -> KubeadmApi {
    if version >= V1BETA4_SINCE {
        KubeadmApi::V1Beta4
    } else {
        KubeadmApi::V1Beta3
    }
}

/// Where our KEP-2506 patches go unless the user set `patches.directory`.
pub const PATCHES_DIR: &str = "/etc/kubernetes/cluster-api/patches";

/// A file to write on the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatchFile {
    pub path: String,
    pub content: String,
}

/// The oldest release with kubeadm API v1beta3.
const OLDEST_SUPPORTED: KubeVersion = KubeVersion::new(1, 22, 0);
const V1BETA4_SINCE: KubeVersion = KubeVersion::new(1, 31, 0);
/// kubeadm's EtcdLearnerMode gate exists from this release...
const LEARNER_GATE_SINCE: KubeVersion = KubeVersion::new(1, 27, 0);
/// ...and is GA (always on) from this one.
const LEARNER_GATE_GA: KubeVersion = KubeVersion::new(1, 32, 0);
const ETCD_LEARNERS_SINCE: KubeVersion = KubeVersion::new(3, 4, 0);
const LEARNER_GATE: &str = "EtcdLearnerMode";

const VERSION_FIELD: &str = "Machine.spec.version";
const ETCD_IMAGE_TAG_FIELD: &str = "spec.clusterConfiguration.etcd.local.imageTag";

/// Cluster API removes this taint once the Node is initialized (labels synced), so workloads never land
/// on a half-initialized Node.
use kubeadm_api::meta::UNINITIALIZED_TAINT as UNINITIALIZED_TAINT_KEY;
const NO_SCHEDULE: &str = "NoSchedule";

/// kubeadm applies the patches of a target in file name order, and the name is `<target><suffix>+<type>`.
/// "zz" sorts after the usual user suffixes ("0", "1", "a"), so our annotations win a conflict.
const PATCH_SUFFIX: &str = "zz-cluster-api";
const STATIC_POD_TARGETS: [&str; 3] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// The kubeadm config file content for the role: ClusterConfiguration + "---" + InitConfiguration for
/// Init, JoinConfiguration for joins (kubeadm join reads only the JoinConfiguration). Runs
/// [`check_learner_mode`] first.
pub fn kubeadm_config(input: &RenderInput) -> Result<String, RenderError> {
    let version = supported_version(input.cluster)?;
    check_learner_mode(input)?;
    let api = kubeadm_api_for(version);
    match input.role {
        Role::Init => {
            let cluster = to_yaml(&cluster_configuration(input, version, api)?);
            let init = to_yaml(&init_configuration(input, api)?);
            Ok(format!("{cluster}---\n{init}"))
        }
        Role::ControlPlaneJoin | Role::WorkerJoin => Ok(to_yaml(&join_configuration(input, api)?)),
    }
}

/// The ClusterConfiguration document alone, for `cluster.kubernetes_version`: what the control plane keeps
/// in the workload cluster's `kube-system/kubeadm-config` ConfigMap, which `kubeadm join --control-plane`
/// reads its static-pod settings from.
pub fn cluster_configuration_document(
    spec: &KubeadmConfigSpec,
    cluster: &ClusterFacts,
) -> Result<String, RenderError> {
    let version = supported_version(cluster)?;
    let input = RenderInput {
        role: Role::Init,
        spec,
        cluster,
        machine: &MachineFacts::default(),
        certificates: None,
        join: None,
        secrets: &BTreeMap::new(),
    };
    let api = kubeadm_api_for(version);
    Ok(to_yaml(&cluster_configuration(&input, version, api)?))
}

/// Strategic-merge patches that annotate the control-plane static pods with their Machine and machine
/// generation, so the control-plane provider can map pods to machines. Empty for workers; no etcd patch
/// with an external etcd.
pub fn machine_annotation_patches(input: &RenderInput) -> Vec<PatchFile> {
    let Some(directory) = control_plane_patches_dir(input) else {
        return Vec::new();
    };
    let directory = directory.trim_end_matches('/');
    let content = annotation_patch(input.machine);
    let etcd = (!uses_external_etcd(input.spec)).then_some("etcd");
    etcd.into_iter()
        .chain(STATIC_POD_TARGETS)
        .map(|target| PatchFile {
            path: format!("{directory}/{target}{PATCH_SUFFIX}+strategic.yaml"),
            content: content.clone(),
        })
        .collect()
}

/// Every new stacked etcd member must join as a learner (KEP-3614). Rejects control-plane machines whose
/// Kubernetes or etcd release cannot do that, and an explicit `EtcdLearnerMode: false`. Workers (no etcd)
/// and external etcd pass.
pub fn check_learner_mode(input: &RenderInput) -> Result<(), RenderError> {
    if input.role == Role::WorkerJoin || uses_external_etcd(input.spec) {
        return Ok(());
    }
    let version = kubernetes_version(input.cluster)?;
    if version < LEARNER_GATE_SINCE {
        return Err(RenderError::LearnerModeUnsupported {
            reason: format!(
                "Kubernetes {version} ({VERSION_FIELD}) cannot add etcd members as learners; \
                 use {LEARNER_GATE_SINCE} or later"
            ),
        });
    }
    let cluster = &input.spec.cluster_configuration;
    if let Some(tag) = non_empty(&cluster.etcd.local.image_tag) {
        check_etcd_image_tag(tag)?;
    }
    if cluster.feature_gates.get(LEARNER_GATE) == Some(&false) {
        return Err(RenderError::Invalid {
            field: format!("spec.clusterConfiguration.featureGates.{LEARNER_GATE}"),
            rule: "must not be false: etcd members join as learners (KEP-3614)".into(),
        });
    }
    Ok(())
}

/// Whether kubeadm `version` needs `EtcdLearnerMode: true` in the ClusterConfiguration to add etcd members
/// as learners: the gate exists from v1.27 (default on from v1.29) and is GA from v1.32.
pub fn learner_mode_gate_needed(version: KubeVersion) -> bool {
    (LEARNER_GATE_SINCE..LEARNER_GATE_GA).contains(&version)
}

fn check_etcd_image_tag(tag: &str) -> Result<(), RenderError> {
    let etcd = KubeVersion::parse(tag).ok_or_else(|| RenderError::InvalidVersion {
        field: ETCD_IMAGE_TAG_FIELD.into(),
        value: tag.into(),
    })?;
    if etcd < ETCD_LEARNERS_SINCE {
        return Err(RenderError::LearnerModeUnsupported {
            reason: format!(
                "{ETCD_IMAGE_TAG_FIELD} {tag:?} is etcd {etcd}, learners need etcd {ETCD_LEARNERS_SINCE} \
                 or later; use a newer tag or remove imageTag to get kubeadm's default"
            ),
        });
    }
    Ok(())
}

fn kubernetes_version(cluster: &ClusterFacts) -> Result<KubeVersion, RenderError> {
    KubeVersion::parse(&cluster.kubernetes_version).ok_or_else(|| RenderError::InvalidVersion {
        field: VERSION_FIELD.into(),
        value: cluster.kubernetes_version.clone(),
    })
}

fn supported_version(cluster: &ClusterFacts) -> Result<KubeVersion, RenderError> {
    let version = kubernetes_version(cluster)?;
    if version < OLDEST_SUPPORTED {
        return Err(RenderError::Invalid {
            field: VERSION_FIELD.into(),
            rule: format!("Kubernetes {version} is not supported; use {OLDEST_SUPPORTED} or later"),
        });
    }
    Ok(version)
}

fn uses_external_etcd(spec: &KubeadmConfigSpec) -> bool {
    spec.cluster_configuration.etcd.external.is_defined()
}

/// The directory our patches go to: the user's `patches.directory` of the role, else ours. Workers run
/// no static pods, so none.
fn control_plane_patches_dir(input: &RenderInput) -> Option<String> {
    let patches = match input.role {
        Role::Init => &input.spec.init_configuration.patches,
        Role::ControlPlaneJoin => &input.spec.join_configuration.patches,
        Role::WorkerJoin => return None,
    };
    Some(
        non_empty(&patches.directory)
            .unwrap_or(PATCHES_DIR)
            .to_owned(),
    )
}

fn annotation_patch(machine: &MachineFacts) -> String {
    let mut annotations = BTreeMap::from([(MACHINE_ANNOTATION, machine.name.as_str())]);
    if let Some(generation) = non_empty(&machine.generation) {
        annotations.insert(MACHINE_GENERATION_LABEL, generation);
    }
    to_yaml(&BTreeMap::from([(
        "metadata",
        BTreeMap::from([("annotations", annotations)]),
    )]))
}

fn cluster_configuration(
    input: &RenderInput,
    version: KubeVersion,
    api: KubeadmApi,
) -> Result<ClusterConfigurationDoc, RenderError> {
    let spec = &input.spec.cluster_configuration;
    let facts = input.cluster;
    let v1beta4 = api == KubeadmApi::V1Beta4;
    let field = "spec.clusterConfiguration";
    let init_health_check = input
        .spec
        .init_configuration
        .timeouts
        .control_plane_component_health_check_seconds;
    Ok(ClusterConfigurationDoc {
        api_version: api.api_version(),
        kind: "ClusterConfiguration",
        etcd: etcd(&spec.etcd, api)?,
        networking: Networking {
            service_subnet: non_empty(&facts.service_subnet).map(str::to_owned),
            pod_subnet: non_empty(&facts.pod_subnet).map(str::to_owned),
            dns_domain: non_empty(&facts.dns_domain).map(str::to_owned),
        },
        kubernetes_version: facts.kubernetes_version.clone(),
        // As in Cluster API, the Cluster's endpoint is only the default.
        control_plane_endpoint: non_empty(&spec.control_plane_endpoint)
            .or(non_empty(&facts.control_plane_endpoint))
            .map(str::to_owned),
        api_server: ApiServerDoc {
            component: component(
                &spec.api_server.extra_args,
                &spec.api_server.extra_volumes,
                &spec.api_server.extra_envs,
                api,
                &format!("{field}.apiServer"),
            )?,
            cert_sans: spec.api_server.cert_sans.clone(),
            // v1beta3 keeps this init timeout in the ClusterConfiguration.
            timeout_for_control_plane: init_health_check.filter(|_| !v1beta4).map(seconds),
        },
        controller_manager: component(
            &spec.controller_manager.extra_args,
            &spec.controller_manager.extra_volumes,
            &spec.controller_manager.extra_envs,
            api,
            &format!("{field}.controllerManager"),
        )?,
        scheduler: component(
            &spec.scheduler.extra_args,
            &spec.scheduler.extra_volumes,
            &spec.scheduler.extra_envs,
            api,
            &format!("{field}.scheduler"),
        )?,
        dns: spec.dns.clone(),
        certificates_dir: spec.certificates_dir.clone(),
        image_repository: spec.image_repository.clone(),
        feature_gates: feature_gates(input.spec, version),
        cluster_name: facts.name.clone(),
        encryption_algorithm: spec
            .encryption_algorithm
            .filter(|_| v1beta4)
            .map(|algorithm| algorithm.as_str()),
        certificate_validity_period: spec
            .certificate_validity_period_days
            .filter(|_| v1beta4)
            .map(days),
        ca_certificate_validity_period: spec
            .ca_certificate_validity_period_days
            .filter(|_| v1beta4)
            .map(days),
    })
}

/// The user's gates, plus `EtcdLearnerMode: true` where kubeadm needs it for a stacked etcd. An explicit
/// user value is kept (`false` never gets here: [`check_learner_mode`] rejects it).
fn feature_gates(spec: &KubeadmConfigSpec, version: KubeVersion) -> BTreeMap<String, bool> {
    let mut gates = spec.cluster_configuration.feature_gates.clone();
    if learner_mode_gate_needed(version) && !uses_external_etcd(spec) {
        gates.entry(LEARNER_GATE.to_owned()).or_insert(true);
    }
    gates
}

fn etcd(etcd: &Etcd, api: KubeadmApi) -> Result<EtcdDoc, RenderError> {
    let local = if etcd.local.is_defined() {
        Some(local_etcd(&etcd.local, api)?)
    } else {
        None
    };
    Ok(EtcdDoc {
        local,
        external: etcd.external.is_defined().then(|| etcd.external.clone()),
    })
}

fn local_etcd(local: &LocalEtcd, api: KubeadmApi) -> Result<LocalEtcdDoc, RenderError> {
    Ok(LocalEtcdDoc {
        image_repository: local.image_repository.clone(),
        image_tag: local.image_tag.clone(),
        data_dir: local.data_dir.clone(),
        extra_args: extra_args(
            &local.extra_args,
            api,
            "spec.clusterConfiguration.etcd.local.extraArgs",
        )?,
        extra_envs: extra_envs(&local.extra_envs, api),
        server_cert_sans: local.server_cert_sans.clone(),
        peer_cert_sans: local.peer_cert_sans.clone(),
    })
}

fn component(
    args: &[Arg],
    volumes: &[HostPathMount],
    envs: &Option<Vec<EnvVar>>,
    api: KubeadmApi,
    field: &str,
) -> Result<ComponentDoc, RenderError> {
    Ok(ComponentDoc {
        extra_args: extra_args(args, api, &format!("{field}.extraArgs"))?,
        extra_volumes: volumes.to_vec(),
        extra_envs: extra_envs(envs, api),
    })
}

/// v1beta4 takes CAPI's `[{name, value}]` list as is (a flag may repeat); v1beta3 takes a map, so a
/// repeated name is an error rather than a silently lost value.
fn extra_args(args: &[Arg], api: KubeadmApi, field: &str) -> Result<ExtraArgs, RenderError> {
    if api == KubeadmApi::V1Beta4 {
        return Ok(ExtraArgs::List(args.to_vec()));
    }
    let mut map = BTreeMap::new();
    for (index, arg) in args.iter().enumerate() {
        if map.insert(arg.name.clone(), arg.value.clone()).is_some() {
            return Err(RenderError::Invalid {
                field: format!("{field}[{index}]"),
                rule: format!(
                    "repeats argument {:?}; kubeadm v1beta3 (Kubernetes before {V1BETA4_SINCE}) \
                     takes each argument once",
                    arg.name
                ),
            });
        }
    }
    Ok(ExtraArgs::Map(map))
}

fn extra_envs(envs: &Option<Vec<EnvVar>>, api: KubeadmApi) -> Vec<EnvVar> {
    match api {
        KubeadmApi::V1Beta4 => envs.clone().unwrap_or_default(),
        KubeadmApi::V1Beta3 => Vec::new(),
    }
}

fn init_configuration(
    input: &RenderInput,
    api: KubeadmApi,
) -> Result<InitConfigurationDoc, RenderError> {
    let init = &input.spec.init_configuration;
    Ok(InitConfigurationDoc {
        api_version: api.api_version(),
        kind: "InitConfiguration",
        bootstrap_tokens: init.bootstrap_tokens.iter().map(bootstrap_token).collect(),
        node_registration: node_registration(
            &init.node_registration,
            api,
            "spec.initConfiguration.nodeRegistration",
        )?,
        local_api_endpoint: init.local_api_endpoint.clone(),
        skip_phases: init.skip_phases.clone(),
        patches: Patches {
            directory: control_plane_patches_dir(input),
        },
        timeouts: timeouts(&init.timeouts, api),
    })
}

fn bootstrap_token(token: &BootstrapToken) -> BootstrapTokenDoc {
    BootstrapTokenDoc {
        token: token.token.to_string(),
        description: token.description.clone(),
        ttl: token.ttl_seconds.map(seconds),
        expires: token.expires.clone(),
        usages: token.usages.clone(),
        groups: token.groups.clone(),
    }
}

fn node_registration(
    options: &NodeRegistrationOptions,
    api: KubeadmApi,
    field: &str,
) -> Result<NodeRegistrationDoc, RenderError> {
    Ok(NodeRegistrationDoc {
        name: options.name.clone(),
        cri_socket: options.cri_socket.clone(),
        taints: options.taints.clone(),
        kubelet_extra_args: extra_args(
            &options.kubelet_extra_args,
            api,
            &format!("{field}.kubeletExtraArgs"),
        )?,
        ignore_preflight_errors: options.ignore_preflight_errors.clone(),
        image_pull_policy: options.image_pull_policy.clone(),
        image_pull_serial: options
            .image_pull_serial
            .filter(|_| api == KubeadmApi::V1Beta4),
    })
}

fn join_configuration(
    input: &RenderInput,
    api: KubeadmApi,
) -> Result<JoinConfigurationDoc, RenderError> {
    let join = &input.spec.join_configuration;
    let control_plane = input.role == Role::ControlPlaneJoin;
    if !control_plane && join.control_plane.is_some() {
        return Err(RenderError::Invalid {
            field: "spec.joinConfiguration.controlPlane".into(),
            rule: "must not be set for a worker machine".into(),
        });
    }
    let mut node_registration = node_registration(
        &join.node_registration,
        api,
        "spec.joinConfiguration.nodeRegistration",
    )?;
    if !control_plane {
        node_registration.taints = Some(with_uninitialized_taint(&join.node_registration.taints));
    }
    Ok(JoinConfigurationDoc {
        api_version: api.api_version(),
        kind: "JoinConfiguration",
        node_registration,
        ca_cert_path: join.ca_cert_path.clone(),
        discovery: discovery(input, api)?,
        // A present (even empty) controlPlane is what makes kubeadm join a control-plane node.
        control_plane: control_plane.then(|| join.control_plane.clone().unwrap_or_default()),
        skip_phases: join.skip_phases.clone(),
        patches: match control_plane_patches_dir(input) {
            Some(directory) => Patches {
                directory: Some(directory),
            },
            None => join.patches.clone(),
        },
        timeouts: timeouts(&join.timeouts, api),
    })
}

/// The user's taints (none if unset: an unset list would give a worker no taints anyway) plus ours.
fn with_uninitialized_taint(taints: &Option<Vec<Taint>>) -> Vec<Taint> {
    let mut taints = taints.clone().unwrap_or_default();
    let present = taints
        .iter()
        .any(|taint| taint.key == UNINITIALIZED_TAINT_KEY && taint.effect == NO_SCHEDULE);
    if !present {
        taints.push(Taint {
            key: UNINITIALIZED_TAINT_KEY.into(),
            effect: NO_SCHEDULE.into(),
            ..Taint::default()
        });
    }
    taints
}

fn discovery(input: &RenderInput, api: KubeadmApi) -> Result<DiscoveryDoc, RenderError> {
    let spec = &input.spec.join_configuration.discovery;
    // Kubeconfig-file discovery is entirely the user's; token discovery is completed from the facts.
    let (bootstrap_token, file) = if spec.file.is_defined() {
        let token = spec.bootstrap_token.is_defined();
        let file = FileDiscoveryDoc {
            kube_config_path: spec.file.kube_config_path.clone(),
        };
        (token.then(|| spec.bootstrap_token.clone()), Some(file))
    } else {
        (
            Some(token_discovery(&spec.bootstrap_token, input.join)?),
            None,
        )
    };
    let tls_bootstrap_seconds = input.spec.join_configuration.timeouts.tls_bootstrap_seconds;
    Ok(DiscoveryDoc {
        bootstrap_token,
        file,
        tls_bootstrap_token: spec.tls_bootstrap_token.clone(),
        // v1beta3's only join timeout; Cluster API fills it from the TLS bootstrap timeout.
        timeout: tls_bootstrap_seconds
            .filter(|_| api == KubeadmApi::V1Beta3)
            .map(seconds),
    })
}

/// Values the user set win; the rest come from the join facts.
fn token_discovery(
    spec: &BootstrapTokenDiscovery,
    join: Option<&JoinFacts>,
) -> Result<BootstrapTokenDiscovery, RenderError> {
    let facts = || {
        join.ok_or_else(|| RenderError::MissingInput {
            what: "join facts (bootstrap token, API server endpoint, CA hashes) for a join".into(),
        })
    };
    let mut discovery = spec.clone();
    if non_empty(&discovery.token).is_none() {
        discovery.token = Some(required(&facts()?.token, "a bootstrap token for the join")?);
    }
    if non_empty(&discovery.api_server_endpoint).is_none() {
        let endpoint = &facts()?.api_server_endpoint;
        discovery.api_server_endpoint =
            Some(required(endpoint, "the API server endpoint for the join")?);
    }
    if discovery.ca_cert_hashes.is_empty() {
        discovery.ca_cert_hashes = join
            .map(|join| join.ca_cert_hashes.clone())
            .unwrap_or_default();
    }
    // kubeadm refuses token discovery without a CA pin unless told to skip it (as Cluster API does).
    if discovery.ca_cert_hashes.is_empty() {
        discovery.unsafe_skip_ca_verification = Some(true);
    }
    Ok(discovery)
}

fn required(value: &str, what: &str) -> Result<String, RenderError> {
    if value.is_empty() {
        return Err(RenderError::MissingInput { what: what.into() });
    }
    Ok(value.to_owned())
}

fn timeouts(timeouts: &Timeouts, api: KubeadmApi) -> TimeoutsDoc {
    if api == KubeadmApi::V1Beta3 {
        return TimeoutsDoc::default();
    }
    TimeoutsDoc {
        control_plane_component_health_check: timeouts
            .control_plane_component_health_check_seconds
            .map(seconds),
        kubelet_health_check: timeouts.kubelet_health_check_seconds.map(seconds),
        kubernetes_api_call: timeouts.kubernetes_api_call_seconds.map(seconds),
        etcd_api_call: timeouts.etcd_api_call_seconds.map(seconds),
        tls_bootstrap: timeouts.tls_bootstrap_seconds.map(seconds),
        discovery: timeouts.discovery_seconds.map(seconds),
    }
}

fn seconds(seconds: i32) -> String {
    go_duration(i64::from(seconds))
}

fn days(days: i32) -> String {
    go_duration(i64::from(days) * 24 * 3600)
}

/// kubeadm reads durations in Go's notation ("4m0s", "8760h0m0s").
fn go_duration(seconds: i64) -> String {
    let sign = if seconds < 0 { "-" } else { "" };
    let total = seconds.unsigned_abs();
    let (hours, minutes, seconds) = (total / 3600, total / 60 % 60, total % 60);
    match (hours, minutes) {
        (0, 0) => format!("{sign}{seconds}s"),
        (0, _) => format!("{sign}{minutes}m{seconds}s"),
        _ => format!("{sign}{hours}h{minutes}m{seconds}s"),
    }
}

fn non_empty(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|value| !value.is_empty())
}

fn to_yaml<T: Serialize>(value: &T) -> String {
    // Plain structs and string-keyed maps: serializing them cannot fail.
    serde_saphyr::to_string(value).expect("kubeadm documents serialize to YAML")
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

// The documents kubeadm reads, in kubeadm's field order. One set of types serves both API versions:
// fields a version lacks stay empty and are left out.

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClusterConfigurationDoc {
    api_version: &'static str,
    kind: &'static str,
    #[serde(skip_serializing_if = "is_default")]
    etcd: EtcdDoc,
    #[serde(skip_serializing_if = "is_default")]
    networking: Networking,
    kubernetes_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    control_plane_endpoint: Option<String>,
    #[serde(skip_serializing_if = "ApiServerDoc::is_empty")]
    api_server: ApiServerDoc,
    #[serde(skip_serializing_if = "ComponentDoc::is_empty")]
    controller_manager: ComponentDoc,
    #[serde(skip_serializing_if = "ComponentDoc::is_empty")]
    scheduler: ComponentDoc,
    #[serde(skip_serializing_if = "is_default")]
    dns: Dns,
    #[serde(skip_serializing_if = "Option::is_none")]
    certificates_dir: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    image_repository: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    feature_gates: BTreeMap<String, bool>,
    #[serde(skip_serializing_if = "String::is_empty")]
    cluster_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    encryption_algorithm: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    certificate_validity_period: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ca_certificate_validity_period: Option<String>,
}

#[derive(Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
struct Networking {
    #[serde(skip_serializing_if = "Option::is_none")]
    service_subnet: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pod_subnet: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dns_domain: Option<String>,
}

#[derive(Default, PartialEq, Serialize)]
struct EtcdDoc {
    #[serde(skip_serializing_if = "Option::is_none")]
    local: Option<LocalEtcdDoc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    external: Option<ExternalEtcd>,
}

#[derive(PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
struct LocalEtcdDoc {
    #[serde(skip_serializing_if = "Option::is_none")]
    image_repository: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    image_tag: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data_dir: Option<String>,
    #[serde(skip_serializing_if = "ExtraArgs::is_empty")]
    extra_args: ExtraArgs,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    extra_envs: Vec<EnvVar>,
    #[serde(rename = "serverCertSANs", skip_serializing_if = "Vec::is_empty")]
    server_cert_sans: Vec<String>,
    #[serde(rename = "peerCertSANs", skip_serializing_if = "Vec::is_empty")]
    peer_cert_sans: Vec<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ApiServerDoc {
    #[serde(flatten)]
    component: ComponentDoc,
    #[serde(rename = "certSANs", skip_serializing_if = "Vec::is_empty")]
    cert_sans: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout_for_control_plane: Option<String>,
}

impl ApiServerDoc {
    fn is_empty(&self) -> bool {
        self.component.is_empty()
            && self.cert_sans.is_empty()
            && self.timeout_for_control_plane.is_none()
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ComponentDoc {
    #[serde(skip_serializing_if = "ExtraArgs::is_empty")]
    extra_args: ExtraArgs,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    extra_volumes: Vec<HostPathMount>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    extra_envs: Vec<EnvVar>,
}

impl ComponentDoc {
    fn is_empty(&self) -> bool {
        self.extra_args.is_empty() && self.extra_volumes.is_empty() && self.extra_envs.is_empty()
    }
}

/// Command-line flags: a map in v1beta3, a list of `{name, value}` in v1beta4.
#[derive(PartialEq, Serialize)]
#[serde(untagged)]
enum ExtraArgs {
    Map(BTreeMap<String, String>),
    List(Vec<Arg>),
}

impl ExtraArgs {
    fn is_empty(&self) -> bool {
        match self {
            Self::Map(map) => map.is_empty(),
            Self::List(list) => list.is_empty(),
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InitConfigurationDoc {
    api_version: &'static str,
    kind: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    bootstrap_tokens: Vec<BootstrapTokenDoc>,
    #[serde(skip_serializing_if = "NodeRegistrationDoc::is_empty")]
    node_registration: NodeRegistrationDoc,
    #[serde(rename = "localAPIEndpoint", skip_serializing_if = "is_default")]
    local_api_endpoint: ApiEndpoint,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    skip_phases: Vec<String>,
    #[serde(skip_serializing_if = "is_default")]
    patches: Patches,
    #[serde(skip_serializing_if = "is_default")]
    timeouts: TimeoutsDoc,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BootstrapTokenDoc {
    token: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires: Option<Time>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    usages: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    groups: Vec<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NodeRegistrationDoc {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cri_socket: Option<String>,
    /// Unset means kubeadm's default (the control-plane taint on control-plane nodes); `[]` means none.
    #[serde(skip_serializing_if = "Option::is_none")]
    taints: Option<Vec<Taint>>,
    #[serde(skip_serializing_if = "ExtraArgs::is_empty")]
    kubelet_extra_args: ExtraArgs,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ignore_preflight_errors: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    image_pull_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    image_pull_serial: Option<bool>,
}

impl NodeRegistrationDoc {
    fn is_empty(&self) -> bool {
        self.name.is_none()
            && self.cri_socket.is_none()
            && self.taints.is_none()
            && self.kubelet_extra_args.is_empty()
            && self.ignore_preflight_errors.is_empty()
            && self.image_pull_policy.is_none()
            && self.image_pull_serial.is_none()
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JoinConfigurationDoc {
    api_version: &'static str,
    kind: &'static str,
    #[serde(skip_serializing_if = "NodeRegistrationDoc::is_empty")]
    node_registration: NodeRegistrationDoc,
    #[serde(skip_serializing_if = "Option::is_none")]
    ca_cert_path: Option<String>,
    discovery: DiscoveryDoc,
    #[serde(skip_serializing_if = "Option::is_none")]
    control_plane: Option<JoinControlPlane>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    skip_phases: Vec<String>,
    #[serde(skip_serializing_if = "is_default")]
    patches: Patches,
    #[serde(skip_serializing_if = "is_default")]
    timeouts: TimeoutsDoc,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DiscoveryDoc {
    #[serde(skip_serializing_if = "Option::is_none")]
    bootstrap_token: Option<BootstrapTokenDiscovery>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<FileDiscoveryDoc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls_bootstrap_token: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout: Option<String>,
}

/// kubeadm's file discovery is only the path; CAPI's `kubeConfig` is written to that path by the caller.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FileDiscoveryDoc {
    kube_config_path: String,
}

#[derive(Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
struct TimeoutsDoc {
    #[serde(skip_serializing_if = "Option::is_none")]
    control_plane_component_health_check: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kubelet_health_check: Option<String>,
    #[serde(rename = "kubernetesAPICall", skip_serializing_if = "Option::is_none")]
    kubernetes_api_call: Option<String>,
    #[serde(rename = "etcdAPICall", skip_serializing_if = "Option::is_none")]
    etcd_api_call: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls_bootstrap: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    discovery: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec, the facts around it and a role: everything a `RenderInput` borrows.
    struct Case {
        spec: KubeadmConfigSpec,
        cluster: ClusterFacts,
        machine: MachineFacts,
        join: Option<JoinFacts>,
        secrets: BTreeMap<(String, String), String>,
    }

    impl Case {
        fn new(version: &str, spec_yaml: &str) -> Self {
            Self {
                spec: serde_saphyr::from_str(spec_yaml).expect("valid KubeadmConfig spec"),
                cluster: ClusterFacts {
                    name: "demo".into(),
                    kubernetes_version: version.into(),
                    control_plane_endpoint: Some("demo.example.com:6443".into()),
                    service_subnet: Some("10.96.0.0/12".into()),
                    pod_subnet: Some("192.168.0.0/16".into()),
                    dns_domain: None,
                    control_plane_version: None,
                },
                machine: MachineFacts {
                    name: "demo-cp-abcde".into(),
                    generation: Some("3".into()),
                },
                join: Some(JoinFacts {
                    token: "abcdef.0123456789abcdef".into(),
                    api_server_endpoint: "demo.example.com:6443".into(),
                    ca_cert_hashes: vec!["sha256:0f1e".into()],
                }),
                secrets: BTreeMap::new(),
            }
        }

        fn input(&self, role: Role) -> RenderInput<'_> {
            RenderInput {
                role,
                spec: &self.spec,
                cluster: &self.cluster,
                machine: &self.machine,
                certificates: None,
                join: self.join.as_ref(),
                secrets: &self.secrets,
            }
        }

        fn config(&self, role: Role) -> Result<String, RenderError> {
            kubeadm_config(&self.input(role))
        }
    }

    const SPEC: &str = r#"
clusterConfiguration:
  apiServer:
    extraArgs:
      - {name: cloud-provider, value: external}
      - {name: audit-log-path, value: /var/log/audit.log}
    extraEnvs:
      - {name: HTTP_PROXY, value: "http://proxy:3128"}
  etcd:
    local:
      imageTag: 3.5.21-0
  certificateValidityPeriodDays: 365
  encryptionAlgorithm: ECDSA-P256
initConfiguration:
  nodeRegistration:
    kubeletExtraArgs:
      - {name: provider-id, value: "demo:///{{ ds.meta_data.instance_id }}"}
    imagePullSerial: false
  timeouts:
    controlPlaneComponentHealthCheckSeconds: 300
joinConfiguration:
  nodeRegistration:
    kubeletExtraArgs:
      - {name: node-labels, value: "tier=web"}
  timeouts:
    tlsBootstrapSeconds: 90
"#;

    fn invalid_field(result: Result<impl std::fmt::Debug, RenderError>) -> String {
        match result {
            Err(RenderError::Invalid { field, .. }) => field,
            other => panic!("expected an Invalid error, got {other:?}"),
        }
    }

    #[test]
    fn api_version_follows_kubernetes_version() {
        let api = |v| kubeadm_api_for(KubeVersion::parse(v).unwrap());
        assert_eq!(api("v1.22.0"), KubeadmApi::V1Beta3);
        assert_eq!(api("v1.30.14"), KubeadmApi::V1Beta3);
        assert_eq!(api("v1.31.0-rc.1"), KubeadmApi::V1Beta4);
        assert_eq!(api("v1.31.0"), KubeadmApi::V1Beta4);
        assert_eq!(api("v1.35.2"), KubeadmApi::V1Beta4);
    }

    #[test]
    fn init_v1beta3() {
        let config = Case::new("v1.30.2", SPEC).config(Role::Init).unwrap();
        // Args become maps (sorted); the init health-check timeout moves to the API server; v1beta4-only
        // fields (extraEnvs, imagePullSerial, encryptionAlgorithm, validity periods) are dropped.
        assert_eq!(
            config,
            r#"apiVersion: kubeadm.k8s.io/v1beta3
kind: ClusterConfiguration
etcd:
  local:
    imageTag: 3.5.21-0
networking:
  serviceSubnet: 10.96.0.0/12
  podSubnet: 192.168.0.0/16
kubernetesVersion: v1.30.2
controlPlaneEndpoint: demo.example.com:6443
apiServer:
  extraArgs:
    audit-log-path: /var/log/audit.log
    cloud-provider: external
  timeoutForControlPlane: 5m0s
featureGates:
  EtcdLearnerMode: true
clusterName: demo
---
apiVersion: kubeadm.k8s.io/v1beta3
kind: InitConfiguration
nodeRegistration:
  kubeletExtraArgs:
    provider-id: demo:///{{ ds.meta_data.instance_id }}
patches:
  directory: /etc/kubernetes/cluster-api/patches
"#
        );
    }

    #[test]
    fn init_v1beta4() {
        let config = Case::new("v1.33.1", SPEC).config(Role::Init).unwrap();
        assert_eq!(
            config,
            r#"apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
etcd:
  local:
    imageTag: 3.5.21-0
networking:
  serviceSubnet: 10.96.0.0/12
  podSubnet: 192.168.0.0/16
kubernetesVersion: v1.33.1
controlPlaneEndpoint: demo.example.com:6443
apiServer:
  extraArgs:
  - name: cloud-provider
    value: external
  - name: audit-log-path
    value: /var/log/audit.log
  extraEnvs:
  - name: HTTP_PROXY
    value: http://proxy:3128
clusterName: demo
encryptionAlgorithm: ECDSA-P256
certificateValidityPeriod: 8760h0m0s
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
nodeRegistration:
  kubeletExtraArgs:
  - name: provider-id
    value: demo:///{{ ds.meta_data.instance_id }}
  imagePullSerial: false
patches:
  directory: /etc/kubernetes/cluster-api/patches
timeouts:
  controlPlaneComponentHealthCheck: 5m0s
"#
        );
    }

    #[test]
    fn worker_join_v1beta4() {
        let config = Case::new("v1.33.1", SPEC).config(Role::WorkerJoin).unwrap();
        // No controlPlane, no patches; the uninitialized taint is added.
        assert_eq!(
            config,
            r#"apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
nodeRegistration:
  taints:
  - effect: NoSchedule
    key: node.cluster.x-k8s.io/uninitialized
  kubeletExtraArgs:
  - name: node-labels
    value: tier=web
discovery:
  bootstrapToken:
    token: abcdef.0123456789abcdef
    apiServerEndpoint: demo.example.com:6443
    caCertHashes:
    - sha256:0f1e
timeouts:
  tlsBootstrap: 1m30s
"#
        );
    }

    #[test]
    fn control_plane_join_v1beta3() {
        let config = Case::new("v1.30.2", SPEC)
            .config(Role::ControlPlaneJoin)
            .unwrap();
        // The TLS bootstrap timeout becomes v1beta3's discovery timeout; controlPlane is present even
        // though the spec has none, and the kubeadm's default control-plane taint is left alone.
        assert_eq!(
            config,
            r#"apiVersion: kubeadm.k8s.io/v1beta3
kind: JoinConfiguration
nodeRegistration:
  kubeletExtraArgs:
    node-labels: tier=web
discovery:
  bootstrapToken:
    token: abcdef.0123456789abcdef
    apiServerEndpoint: demo.example.com:6443
    caCertHashes:
    - sha256:0f1e
  timeout: 1m30s
controlPlane: {}
patches:
  directory: /etc/kubernetes/cluster-api/patches
"#
        );
    }

    #[test]
    fn learner_gate_by_version() {
        let gate = |version| {
            let config = Case::new(version, "{}").config(Role::Init).unwrap();
            config.contains("featureGates:\n  EtcdLearnerMode: true\n")
        };
        assert!(gate("v1.27.0"));
        assert!(gate("v1.29.4"));
        assert!(gate("v1.31.9"));
        assert!(!gate("v1.32.0"));
        assert!(!gate("v1.33.1"));
    }

    #[test]
    fn learner_mode_unsupported_before_1_27() {
        let case = Case::new("v1.26.15", "{}");
        for role in [Role::Init, Role::ControlPlaneJoin] {
            let err = case.config(role).unwrap_err();
            assert!(matches!(err, RenderError::LearnerModeUnsupported { .. }));
            let message = err.to_string();
            assert!(
                message.starts_with("etcd learner mode is not supported by this etcd version: "),
                "{message}"
            );
            assert!(message.contains("v1.26.15"), "{message}");
        }
        // Workers run no etcd.
        assert!(case.config(Role::WorkerJoin).is_ok());
    }

    #[test]
    fn external_etcd_needs_no_learner_mode() {
        let case = Case::new(
            "v1.26.15",
            r#"
clusterConfiguration:
  etcd:
    external:
      endpoints: ["https://10.0.0.1:2379"]
      caFile: /etc/etcd/ca.crt
      certFile: /etc/etcd/client.crt
      keyFile: /etc/etcd/client.key
"#,
        );
        assert!(check_learner_mode(&case.input(Role::Init)).is_ok());
        let config = Case {
            cluster: ClusterFacts {
                kubernetes_version: "v1.30.0".into(),
                ..case.cluster.clone()
            },
            ..case
        }
        .config(Role::Init)
        .unwrap();
        assert!(!config.contains("EtcdLearnerMode"), "{config}");
        assert!(config.contains("  external:\n    endpoints:\n    - https://10.0.0.1:2379\n"));
    }

    #[test]
    fn old_etcd_image_tag_is_rejected() {
        let spec = "clusterConfiguration: {etcd: {local: {imageTag: 3.3.15-0}}}";
        let err = Case::new("v1.30.2", spec)
            .config(Role::ControlPlaneJoin)
            .unwrap_err();
        assert!(matches!(err, RenderError::LearnerModeUnsupported { .. }));
        let message = err.to_string();
        assert!(message.contains("\"3.3.15-0\""), "{message}");
        assert!(message.contains("etcd v3.4.0 or later"), "{message}");

        let spec = "clusterConfiguration: {etcd: {local: {imageTag: latest}}}";
        assert_eq!(
            Case::new("v1.30.2", spec).config(Role::Init),
            Err(RenderError::InvalidVersion {
                field: ETCD_IMAGE_TAG_FIELD.into(),
                value: "latest".into()
            })
        );
        let spec = "clusterConfiguration: {etcd: {local: {imageTag: 3.4.0-0}}}";
        assert!(Case::new("v1.30.2", spec).config(Role::Init).is_ok());
    }

    #[test]
    fn explicit_learner_gate() {
        let disabled = "clusterConfiguration: {featureGates: {EtcdLearnerMode: false}}";
        assert_eq!(
            invalid_field(Case::new("v1.30.2", disabled).config(Role::Init)),
            "spec.clusterConfiguration.featureGates.EtcdLearnerMode"
        );
        // A worker does not care.
        assert!(
            Case::new("v1.30.2", disabled)
                .config(Role::WorkerJoin)
                .is_ok()
        );

        let enabled = "clusterConfiguration: {featureGates: {EtcdLearnerMode: true, Foo: false}}";
        let config = Case::new("v1.33.1", enabled).config(Role::Init).unwrap();
        assert!(config.contains("featureGates:\n  EtcdLearnerMode: true\n  Foo: false\n"));
    }

    #[test]
    fn repeated_extra_args_only_fit_v1beta4() {
        let spec = r#"
clusterConfiguration:
  controllerManager:
    extraArgs:
      - {name: bind-address, value: 0.0.0.0}
      - {name: controllers, value: "*"}
      - {name: controllers, value: "-bootstrapsigner"}
"#;
        assert_eq!(
            invalid_field(Case::new("v1.30.2", spec).config(Role::Init)),
            "spec.clusterConfiguration.controllerManager.extraArgs[2]"
        );
        let config = Case::new("v1.31.0", spec).config(Role::Init).unwrap();
        let cluster: serde_json::Value =
            serde_saphyr::from_str(config.split("---\n").next().unwrap()).unwrap();
        assert_eq!(
            cluster["controllerManager"]["extraArgs"],
            serde_json::json!([
                {"name": "bind-address", "value": "0.0.0.0"},
                {"name": "controllers", "value": "*"},
                {"name": "controllers", "value": "-bootstrapsigner"},
            ])
        );

        let kubelet = r#"
joinConfiguration:
  nodeRegistration:
    kubeletExtraArgs: [{name: v, value: "2"}, {name: v, value: "4"}]
"#;
        assert_eq!(
            invalid_field(Case::new("v1.29.0", kubelet).config(Role::WorkerJoin)),
            "spec.joinConfiguration.nodeRegistration.kubeletExtraArgs[1]"
        );
    }

    #[test]
    fn worker_taints() {
        let taints = |spec: &str| {
            let case = Case::new("v1.33.1", spec);
            let config: serde_json::Value =
                serde_saphyr::from_str(&case.config(Role::WorkerJoin).unwrap()).unwrap();
            config["nodeRegistration"]["taints"].clone()
        };
        let uninitialized = serde_json::json!({"key": "node.cluster.x-k8s.io/uninitialized", "effect": "NoSchedule"});
        assert_eq!(taints("{}"), serde_json::json!([uninitialized]));
        // `taints: []` (no taints) still gets ours, as in Cluster API.
        assert_eq!(
            taints("joinConfiguration: {nodeRegistration: {taints: []}}"),
            serde_json::json!([uninitialized])
        );
        let gpu = serde_json::json!({"key": "gpu", "value": "true", "effect": "NoSchedule"});
        assert_eq!(
            taints(
                "joinConfiguration: {nodeRegistration: {taints: [{key: gpu, value: 'true', effect: NoSchedule}]}}"
            ),
            serde_json::json!([gpu, uninitialized])
        );
        assert_eq!(
            taints(
                "joinConfiguration: {nodeRegistration: {taints: [{key: node.cluster.x-k8s.io/uninitialized, effect: NoSchedule}]}}"
            ),
            serde_json::json!([uninitialized])
        );
    }

    #[test]
    fn worker_must_not_have_control_plane() {
        let spec = "joinConfiguration: {controlPlane: {}}";
        assert_eq!(
            invalid_field(Case::new("v1.33.1", spec).config(Role::WorkerJoin)),
            "spec.joinConfiguration.controlPlane"
        );
        let config = Case::new("v1.33.1", spec)
            .config(Role::ControlPlaneJoin)
            .unwrap();
        assert!(config.contains("\ncontrolPlane: {}\n"), "{config}");
    }

    #[test]
    fn discovery_prefers_the_spec() {
        let spec = r#"
joinConfiguration:
  discovery:
    bootstrapToken:
      token: zyxwvu.9876543210fedcba
      apiServerEndpoint: 10.0.0.10:6443
"#;
        let mut case = Case::new("v1.33.1", spec);
        case.join = None;
        let config = case.config(Role::WorkerJoin).unwrap();
        // Without any CA pin, discovery must be told to skip verification.
        assert!(config.contains(
            "discovery:\n  bootstrapToken:\n    token: zyxwvu.9876543210fedcba\n    apiServerEndpoint: 10.0.0.10:6443\n    unsafeSkipCAVerification: true\n"
        ), "{config}");

        let file = r#"
joinConfiguration:
  discovery:
    file:
      kubeConfigPath: /etc/kubernetes/discovery.conf
      kubeConfig:
        user: {exec: {command: /bin/token}}
    tlsBootstrapToken: abcdef.0123456789abcdef
"#;
        let config = Case::new("v1.33.1", file).config(Role::WorkerJoin).unwrap();
        assert!(config.contains(
            "discovery:\n  file:\n    kubeConfigPath: /etc/kubernetes/discovery.conf\n  tlsBootstrapToken: abcdef.0123456789abcdef\n"
        ), "{config}");

        let mut case = Case::new("v1.33.1", "{}");
        case.join = None;
        assert!(matches!(
            case.config(Role::WorkerJoin),
            Err(RenderError::MissingInput { .. })
        ));
    }

    #[test]
    fn timeouts_v1beta4() {
        let spec = r#"
joinConfiguration:
  timeouts:
    controlPlaneComponentHealthCheckSeconds: 240
    kubeletHealthCheckSeconds: 45
    kubernetesAPICallSeconds: 3600
    etcdAPICallSeconds: 0
    tlsBootstrapSeconds: 300
    discoverySeconds: 3725
"#;
        let config = Case::new("v1.33.1", spec)
            .config(Role::ControlPlaneJoin)
            .unwrap();
        assert!(config.ends_with(
            "timeouts:\n  controlPlaneComponentHealthCheck: 4m0s\n  kubeletHealthCheck: 45s\n  kubernetesAPICall: 1h0m0s\n  etcdAPICall: 0s\n  tlsBootstrap: 5m0s\n  discovery: 1h2m5s\n"
        ), "{config}");
        // v1beta3 only knows the discovery timeout on a join.
        let config = Case::new("v1.30.2", spec)
            .config(Role::ControlPlaneJoin)
            .unwrap();
        assert!(!config.contains("timeouts:"), "{config}");
        assert!(config.contains("  timeout: 5m0s\n"), "{config}");
    }

    #[test]
    fn cluster_facts_and_spec() {
        let spec = r#"
clusterConfiguration:
  controlPlaneEndpoint: api.internal:6443
  imageRepository: registry.example.com
initConfiguration:
  bootstrapTokens:
    - token: abcdef.0123456789abcdef
      ttlSeconds: 900
      usages: [signing, authentication]
  localAPIEndpoint: {advertiseAddress: 10.0.0.10, bindPort: 6443}
  skipPhases: [addon/kube-proxy]
  patches: {directory: /etc/kubernetes/patches}
"#;
        let mut case = Case::new("v1.33.1", spec);
        case.cluster.dns_domain = Some("cluster.example".into());
        let config = case.config(Role::Init).unwrap();
        for expected in [
            "networking:\n  serviceSubnet: 10.96.0.0/12\n  podSubnet: 192.168.0.0/16\n  dnsDomain: cluster.example\n",
            // The spec's endpoint wins over the Cluster's.
            "controlPlaneEndpoint: api.internal:6443\n",
            "imageRepository: registry.example.com\n",
            "bootstrapTokens:\n- token: abcdef.0123456789abcdef\n  ttl: 15m0s\n  usages:\n  - signing\n  - authentication\n",
            "localAPIEndpoint:\n  advertiseAddress: \"10.0.0.10\"\n  bindPort: 6443\n",
            "skipPhases:\n- addon/kube-proxy\n",
            // The user's patches directory is kept; our patches go there.
            "patches:\n  directory: /etc/kubernetes/patches\n",
        ] {
            assert!(
                config.contains(expected),
                "missing {expected:?} in\n{config}"
            );
        }
    }

    #[test]
    fn unsupported_versions() {
        assert_eq!(
            Case::new("1.33", "{}").config(Role::WorkerJoin),
            Err(RenderError::InvalidVersion {
                field: "Machine.spec.version".into(),
                value: "1.33".into()
            })
        );
        assert_eq!(
            invalid_field(Case::new("v1.21.14", "{}").config(Role::WorkerJoin)),
            "Machine.spec.version"
        );
    }

    #[test]
    fn annotation_patches() {
        let case = Case::new("v1.33.1", "{}");
        let patches = machine_annotation_patches(&case.input(Role::Init));
        let paths: Vec<_> = patches.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/etc/kubernetes/cluster-api/patches/etcdzz-cluster-api+strategic.yaml",
                "/etc/kubernetes/cluster-api/patches/kube-apiserverzz-cluster-api+strategic.yaml",
                "/etc/kubernetes/cluster-api/patches/kube-controller-managerzz-cluster-api+strategic.yaml",
                "/etc/kubernetes/cluster-api/patches/kube-schedulerzz-cluster-api+strategic.yaml",
            ]
        );
        for patch in &patches {
            assert_eq!(
                patch.content,
                "metadata:\n  annotations:\n    cluster.x-k8s.io/machine: demo-cp-abcde\n    controlplane.cluster.x-k8s.io/machine-generation: \"3\"\n"
            );
        }
        assert!(machine_annotation_patches(&case.input(Role::WorkerJoin)).is_empty());
    }

    #[test]
    fn annotation_patches_follow_the_user_directory() {
        let spec = "joinConfiguration: {patches: {directory: /etc/kubernetes/patches/}}";
        let mut case = Case::new("v1.33.1", spec);
        case.machine.generation = None;
        let patches = machine_annotation_patches(&case.input(Role::ControlPlaneJoin));
        assert_eq!(
            patches[1].path,
            "/etc/kubernetes/patches/kube-apiserverzz-cluster-api+strategic.yaml"
        );
        assert_eq!(
            patches[1].content,
            "metadata:\n  annotations:\n    cluster.x-k8s.io/machine: demo-cp-abcde\n"
        );
        // The init directory is a different field.
        assert!(
            machine_annotation_patches(&case.input(Role::Init))[0]
                .path
                .starts_with(PATCHES_DIR)
        );
    }

    #[test]
    fn patch_names_match_kubeadm_and_sort_after_user_patches() {
        // kubeadm: `<target><suffix>[+<type>].<json|yaml>`, the suffix free of '.' and '+'; patches of a
        // target apply in file name order.
        for target in ["etcd", "kube-apiserver"] {
            let ours = format!("{target}{PATCH_SUFFIX}+strategic.yaml");
            let suffix = &ours[target.len()..ours.len() - "+strategic.yaml".len()];
            assert!(!suffix.contains(['.', '+']));
            for user in ["", "0", "1+merge", "99+json", "a", "patch", "Z"] {
                assert!(format!("{target}{user}.yaml") < ours, "{user}");
            }
        }
    }

    #[test]
    fn no_etcd_patch_with_external_etcd() {
        let spec = "clusterConfiguration: {etcd: {external: {endpoints: [https://e:2379], caFile: a, certFile: b, keyFile: c}}}";
        let case = Case::new("v1.33.1", spec);
        let patches = machine_annotation_patches(&case.input(Role::Init));
        assert_eq!(patches.len(), 3);
        assert!(patches.iter().all(|p| !p.path.contains("/etcd")));
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(59), "59s");
        assert_eq!(go_duration(60), "1m0s");
        assert_eq!(go_duration(240), "4m0s");
        assert_eq!(go_duration(3600), "1h0m0s");
        assert_eq!(go_duration(-90), "-1m30s");
        assert_eq!(days(365), "8760h0m0s");
    }
}
