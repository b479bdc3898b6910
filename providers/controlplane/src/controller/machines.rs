//! Reading, creating, adopting, updating and deleting the control-plane Machines of a KubeadmControlPlane
//! and the KubeadmConfig and infrastructure machine each one has.

use kubeadm_api::meta::{
    CERTIFICATES_EXPIRY_ANNOTATION, CLEANUP_HOOK_ANNOTATION, CLONED_FROM_GROUP_KIND_ANNOTATION,
    CLONED_FROM_NAME_ANNOTATION, CONTROL_PLANE_NAME_LABEL, DELETE_MACHINE_ANNOTATION,
    ETCD_RESTORE_SNAPSHOT_ANNOTATION, REMEDIATE_MACHINE_ANNOTATION, REMEDIATION_FOR_ANNOTATION,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::discovery;
use kube::{Resource, ResourceExt};
use kubeadm_api::bootstrap::v1beta2::KubeadmConfig;
use kubeadm_api::cluster::v1beta2::{
    Bootstrap, Cluster, Machine, MachineDeletionSpec, MachineSpec,
};
use kubeadm_api::controlplane::conditions::{machine as condition_types, reasons};
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::meta::{
    CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, ContractVersionedObjectReference,
    MACHINE_GENERATION_LABEL,
};
use serde_json::{Value, json};

use super::machine_cache::Seen;
use super::metrics::METRICS;
use super::{Context, Error, owner_reference};
use crate::desired::{DesiredState, label_value, machine_annotations, machine_labels};
use crate::endpoints::MachinePods;
use crate::machine_conditions::{self, NodeRole};
use crate::machines::{ClonedFrom, ControlPlaneMachine};
use crate::remediation;
use crate::up_to_date::Outdated;

const BOOTSTRAP_GROUP: &str = "bootstrap.cluster.x-k8s.io";

/// The control plane's machines as the decisions see them, and the objects behind them.
pub(super) struct Gathered {
    pub machines: Vec<ControlPlaneMachine>,
    /// Every control-plane Machine of the cluster (owned or not), by name.
    pub all_names: Vec<String>,
    /// Owned Machines, by name.
    pub objects: BTreeMap<String, Machine>,
    pub configs: BTreeMap<String, KubeadmConfig>,
    pub infrastructure: BTreeMap<String, (ApiResource, DynamicObject)>,
    /// What the workload cluster's static pods show per machine (empty until it is reachable).
    pub pods: BTreeMap<String, MachinePods>,
    /// kubeadm's role label and taint on the workload cluster's control-plane Nodes, by Node name;
    /// `None` until the workload cluster answered.
    pub nodes: Option<BTreeMap<String, NodeRole>>,
}

pub(super) fn owned_by(machine: &Machine, kcp: &KubeadmControlPlane) -> bool {
    machine
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == kcp.uid().as_ref())
}

/// No controller owns the Machine and it is not being deleted: a control plane takes it over.
pub(super) fn adoptable(machine: &Machine) -> bool {
    machine.meta().deletion_timestamp.is_none()
        && !machine
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true))
}

/// Lists the cluster's control-plane Machines (from the watch-fed copy, which shows every creation and
/// deletion of ours before the next look; see [`MachineCache`](super::machine_cache::MachineCache)),
/// adopts unowned ones, and reads each one's KubeadmConfig (from the copy where it has it) and
/// infrastructure machine.
pub(super) async fn gather(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    cluster: &str,
) -> Result<Gathered, Error> {
    let namespace = kcp.namespace().unwrap_or_default();
    let machines: Api<Machine> = Api::namespaced(ctx.client.clone(), &namespace);
    let listed = match ctx.machine_cache.machines_of(&namespace, cluster).await {
        Some(cached) => cached,
        None => {
            let selector = format!("{CLUSTER_NAME_LABEL}={cluster},{CONTROL_PLANE_LABEL}");
            machines
                .list(&ListParams::default().labels(&selector))
                .await?
                .items
        }
    };
    let all_names = listed.iter().map(ResourceExt::name_any).collect();
    let mut owned = BTreeMap::new();
    for machine in listed {
        if owned_by(&machine, kcp) {
            owned.insert(machine.name_any(), machine);
        } else if adoptable(&machine) {
            let adopted = adopt(&machines, kcp, machine).await?;
            owned.insert(adopted.name_any(), adopted);
        }
    }

    let configs_api: Api<KubeadmConfig> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut configs = BTreeMap::new();
    let mut infrastructure = BTreeMap::new();
    // Machines whose infrastructure machine's kind is served and the object is not there.
    let mut gone = BTreeSet::new();
    let resources = &ctx.resources;
    for (name, machine) in &owned {
        if let Some(reference) = &machine.spec.bootstrap.config_ref
            && reference.kind == "KubeadmConfig"
        {
            let config = match ctx.machine_cache.config(&namespace, &reference.name) {
                Some(cached) => Some(KubeadmConfig::clone(&cached)),
                None => configs_api.get_opt(&reference.name).await?,
            };
            if let Some(config) = config {
                configs.insert(name.clone(), config);
            }
        }
        let reference = &machine.spec.infrastructure_ref;
        if let Some(resource) = resources
            .get(ctx, &reference.api_group, &reference.kind)
            .await?
        {
            let cached =
                ctx.machine_cache
                    .infrastructure_machine(&resource, &namespace, &reference.name);
            let object = match cached {
                Some(cached) => Some(DynamicObject::clone(&cached)),
                None => {
                    Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &namespace, &resource)
                        .get_opt(&reference.name)
                        .await?
                }
            };
            match object {
                Some(object) => {
                    infrastructure.insert(name.clone(), (resource, object));
                }
                None => {
                    gone.insert(name.clone());
                }
            }
        }
    }
    let machines = owned
        .values()
        .map(|m| {
            view(
                m,
                configs.get(&m.name_any()),
                infrastructure.get(&m.name_any()).map(|(_, o)| o),
                gone.contains(&m.name_any()),
            )
        })
        .collect();
    Ok(Gathered {
        machines,
        all_names,
        objects: owned,
        configs,
        infrastructure,
        pods: BTreeMap::new(),
        nodes: None,
    })
}

/// Takes over a control-plane Machine that no controller owns (created by another KCP-compatible
/// controller, or left behind by a deleted KubeadmControlPlane), as Cluster API does.
async fn adopt(
    api: &Api<Machine>,
    kcp: &KubeadmControlPlane,
    machine: Machine,
) -> Result<Machine, Error> {
    let name = machine.name_any();
    let mut owners = machine.owner_references().to_vec();
    owners.push(owner_reference(kcp));
    let patch = json!({
        "metadata": {
            "resourceVersion": machine.resource_version(),
            "ownerReferences": owners,
        }
    });
    let adopted = api
        .patch(&name, &super::merge_params(), &Patch::Merge(&patch))
        .await?;
    tracing::info!(kcp = %kcp.name_any(), machine = %name, "adopted control-plane Machine");
    Ok(adopted)
}

pub(super) fn view(
    machine: &Machine,
    config: Option<&KubeadmConfig>,
    infra: Option<&DynamicObject>,
    infrastructure_gone: bool,
) -> ControlPlaneMachine {
    let status = machine.status.as_ref();
    let condition_is = |type_: &str, value: &str| {
        status
            .map(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == type_ && c.status == value)
            })
            .unwrap_or(false)
    };
    let condition_true = |type_: &str| condition_is(type_, "True");
    let condition_false = |type_: &str| condition_is(type_, "False");
    let cloned_from = infra.and_then(|infra| {
        let annotations = infra.annotations();
        Some(ClonedFrom {
            name: annotations.get(CLONED_FROM_NAME_ANNOTATION)?.clone(),
            group_kind: annotations.get(CLONED_FROM_GROUP_KIND_ANNOTATION)?.clone(),
        })
    });
    let expiry_annotation = config
        .and_then(|c| c.annotations().get(CERTIFICATES_EXPIRY_ANNOTATION))
        .and_then(|t| t.parse::<Timestamp>().ok());
    ControlPlaneMachine {
        name: machine.name_any(),
        created: machine
            .meta()
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or_default(),
        version: machine.spec.version.clone(),
        failure_domain: machine.spec.failure_domain.clone(),
        deleting: machine.meta().deletion_timestamp.is_some(),
        marked_for_deletion: machine
            .annotations()
            .contains_key(DELETE_MACHINE_ANNOTATION),
        node: status
            .and_then(|s| s.node_ref.as_ref())
            .map(|n| n.name.clone()),
        ready: condition_true("Ready"),
        available: condition_true("Available"),
        generation: machine.labels().get(MACHINE_GENERATION_LABEL).cloned(),
        cloned_from,
        infrastructure_gone,
        kubeadm_config: config.map(|c| c.spec.clone()),
        certificates_expiry: expiry_annotation.or_else(|| {
            status
                .and_then(|s| s.certificates_expiry_date.as_ref())
                .map(|t| t.0)
        }),
        health: Default::default(),
        addresses: status
            .map(|s| s.addresses.iter().map(|a| a.address.clone()).collect())
            .unwrap_or_default(),
        has_cleanup_hook: machine.annotations().contains_key(CLEANUP_HOOK_ANNOTATION),
        restores_etcd: machine
            .annotations()
            .contains_key(ETCD_RESTORE_SNAPSHOT_ANNOTATION),
        draining: machine.meta().deletion_timestamp.is_some()
            && !status.is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.type_ == condition_types::DELETING
                        && c.status == "True"
                        && c.reason == reasons::WAITING_FOR_PRE_TERMINATE_HOOK
                })
            }),
        other_pre_terminate_hooks: crate::machines::other_pre_terminate_hooks(
            machine.annotations().keys(),
        ),
        health_check_failed: condition_false(remediation::HEALTH_CHECK_SUCCEEDED_CONDITION),
        owner_remediation_requested: condition_false(remediation::OWNER_REMEDIATED_CONDITION),
        remediate_annotation: machine
            .annotations()
            .contains_key(REMEDIATE_MACHINE_ANNOTATION),
        remediation_for: machine
            .annotations()
            .get(REMEDIATION_FOR_ANNOTATION)
            .and_then(|value| match remediation::RemediationData::parse(value) {
                Ok(data) => Some(data),
                Err(e) => {
                    tracing::warn!(machine = %machine.name_any(), "{}: {e}", REMEDIATION_FOR_ANNOTATION);
                    None
                }
            }),
    }
}

/// The served resource of `kind` in API `group`, `None` when the group or kind is not served.
pub(super) async fn discover(
    client: &kube::Client,
    group: &str,
    kind: &str,
) -> Result<Option<ApiResource>, kube::Error> {
    match discovery::group(client, group).await {
        Ok(group) => Ok(group.recommended_kind(kind).map(|(resource, _)| resource)),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// How long a discovered API resource is trusted before discovery runs again (a CRD may change its
/// served versions).
const DISCOVERY_TTL: std::time::Duration = std::time::Duration::from_secs(600);

/// API resources of infrastructure kinds, found by discovery and kept for [`DISCOVERY_TTL`]. Kinds that
/// are not served are not remembered, so they are found as soon as their CRD is installed.
#[derive(Default)]
pub(super) struct Resources(
    std::sync::Mutex<HashMap<(String, String), (std::time::Instant, ApiResource)>>,
);

impl Resources {
    async fn get(
        &self,
        ctx: &Context,
        group: &str,
        kind: &str,
    ) -> Result<Option<ApiResource>, Error> {
        let key = (group.to_owned(), kind.to_owned());
        if let Some((found_at, resource)) = self.lock().get(&key)
            && found_at.elapsed() < DISCOVERY_TTL
        {
            return Ok(Some(resource.clone()));
        }
        let found = discover(&ctx.client, group, kind).await?;
        if let Some(resource) = &found {
            self.lock()
                .insert(key, (std::time::Instant::now(), resource.clone()));
        }
        Ok(found)
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(String, String), (std::time::Instant, ApiResource)>>
    {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// How a new machine's node comes up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kubeadm<'a> {
    /// `kubeadm init`: the first machine.
    Init,
    /// `kubeadm join --control-plane`.
    Join,
    /// `kubeadm init` after restoring etcd from the snapshot staged in Secret `secret`.
    RestoreEtcd { secret: &'a str },
}

/// Creates a machine: the infrastructure machine cloned from the template, the KubeadmConfig, then the
/// Machine that points at both. The Machine comes last, so a crash never leaves a Machine without its
/// parts; parts without a Machine are removed by [`clean_leftovers`].
pub(super) async fn create(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    cluster: &Cluster,
    desired: &DesiredState,
    failure_domain: Option<String>,
    kubeadm: Kubeadm<'_>,
    remediation_for: Option<&str>,
) -> Result<String, Error> {
    let init = kubeadm != Kubeadm::Join;
    let namespace = kcp.namespace().unwrap_or_default();
    let cluster_name = cluster.name_any();
    let reference = &kcp.spec.machine_template.spec.infrastructure_ref;
    let resources = &ctx.resources;
    let template_resource = resources
        .get(ctx, &reference.api_group, &reference.kind)
        .await?
        .ok_or_else(|| {
            Error::Infrastructure(format!(
                "spec.machineTemplate.spec.infrastructureRef: kind {} is not served in group {}",
                reference.kind, reference.api_group
            ))
        })?;
    let templates: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &template_resource);
    let template = templates.get_opt(&reference.name).await?.ok_or_else(|| {
        Error::Infrastructure(format!(
            "spec.machineTemplate.spec.infrastructureRef: {} {} not found in namespace {namespace}",
            reference.kind, reference.name
        ))
    })?;
    let Some(machine_kind) = reference
        .kind
        .strip_suffix("Template")
        .filter(|k| !k.is_empty())
    else {
        return Err(Error::Infrastructure(format!(
            "spec.machineTemplate.spec.infrastructureRef: kind {} is not a machine template (…Template)",
            reference.kind
        )));
    };
    let infra_resource = resources
        .get(ctx, &reference.api_group, machine_kind)
        .await?
        .ok_or_else(|| {
            Error::Infrastructure(format!(
                "kind {machine_kind} (what {} {} clones into) is not served in group {}",
                reference.kind, reference.name, reference.api_group
            ))
        })?;

    let labels = machine_labels(kcp, &cluster_name, &desired.generation);
    let mut annotations = machine_annotations(kcp);
    if let Kubeadm::RestoreEtcd { secret } = kubeadm {
        annotations.insert(
            ETCD_RESTORE_SNAPSHOT_ANNOTATION.to_owned(),
            secret.to_owned(),
        );
    }
    let owner = owner_reference(kcp);
    let part_owner = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        controller: None,
        ..owner.clone()
    };
    let name = machine_name(kcp, &cluster_name)?;

    // 1. The infrastructure machine, cloned from the template.
    let template_body = template.data.get("spec").and_then(|s| s.get("template"));
    let template_meta = template_body.and_then(|t| t.get("metadata"));
    let mut infra_labels = string_map(template_meta.and_then(|m| m.get("labels")));
    infra_labels.extend(labels.clone());
    let mut infra_annotations = string_map(template_meta.and_then(|m| m.get("annotations")));
    infra_annotations.extend(annotations.clone());
    infra_annotations.insert(CLONED_FROM_NAME_ANNOTATION.into(), reference.name.clone());
    infra_annotations.insert(
        CLONED_FROM_GROUP_KIND_ANNOTATION.into(),
        format!("{}.{}", reference.kind, reference.api_group),
    );
    let mut infra = DynamicObject::new(&name, &infra_resource).within(&namespace);
    infra.metadata.labels = Some(infra_labels);
    infra.metadata.annotations = Some(infra_annotations);
    infra.metadata.owner_references = Some(vec![part_owner.clone()]);
    infra.data =
        json!({ "spec": template_body.and_then(|t| t.get("spec")).cloned().unwrap_or(json!({})) });
    let infra_api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &infra_resource);
    infra_api.create(&PostParams::default(), &infra).await?;

    // 2. The KubeadmConfig: init for the first machine, join for the others.
    let mut config = KubeadmConfig::new(
        &name,
        if init {
            desired.init.clone()
        } else {
            desired.join.clone()
        },
    );
    config.metadata.namespace = Some(namespace.clone());
    config.metadata.labels = Some(labels.clone());
    config.metadata.annotations = Some(annotations.clone());
    config.metadata.owner_references = Some(vec![part_owner]);
    let configs: Api<KubeadmConfig> = Api::namespaced(ctx.client.clone(), &namespace);
    if let Err(e) = configs.create(&PostParams::default(), &config).await {
        let _ = infra_api.delete(&name, &DeleteParams::default()).await;
        return Err(e.into());
    }

    // 3. The Machine.
    let template_spec = &kcp.spec.machine_template.spec;
    let mut machine = Machine::new(
        &name,
        MachineSpec {
            cluster_name: cluster_name.clone(),
            bootstrap: Bootstrap {
                config_ref: Some(ContractVersionedObjectReference {
                    kind: "KubeadmConfig".into(),
                    name: name.clone(),
                    api_group: BOOTSTRAP_GROUP.into(),
                }),
                data_secret_name: None,
            },
            infrastructure_ref: ContractVersionedObjectReference {
                kind: machine_kind.to_owned(),
                name: name.clone(),
                api_group: reference.api_group.clone(),
            },
            version: Some(desired.version.clone()),
            failure_domain,
            readiness_gates: machine_conditions::readiness_gates(
                &template_spec.readiness_gates,
                desired.external_etcd,
            ),
            deletion: template_spec.deletion.as_ref().map(deletion_spec),
            taints: template_spec.taints.clone(),
            ..Default::default()
        },
    );
    machine.metadata.namespace = Some(namespace.clone());
    machine.metadata.labels = Some(labels);
    let mut machine_annotations = annotations;
    if !desired.external_etcd {
        // Core Cluster API keeps the machine until its etcd member is gone and this hook released.
        machine_annotations.insert(CLEANUP_HOOK_ANNOTATION.to_owned(), String::new());
    }
    if let Some(record) = remediation_for {
        // This machine replaces a remediated one: if it fails too, that counts as a retry.
        machine_annotations.insert(REMEDIATION_FOR_ANNOTATION.to_owned(), record.to_owned());
    }
    machine.metadata.annotations = Some(machine_annotations);
    machine.metadata.owner_references = Some(vec![owner]);
    let machines: Api<Machine> = Api::namespaced(ctx.client.clone(), &namespace);
    if let Err(e) = machines.create(&PostParams::default(), &machine).await {
        let _ = configs.delete(&name, &DeleteParams::default()).await;
        let _ = infra_api.delete(&name, &DeleteParams::default()).await;
        return Err(e.into());
    }
    // The next look at the machines must count this one.
    ctx.machine_cache
        .wait_for(&namespace, &name, Seen::Created)
        .await;
    METRICS
        .machines
        .get_or_create(&[("action", "created")])
        .inc();
    tracing::info!(kcp = %kcp.name_any(), machine = %name, init, "created control-plane Machine");
    Ok(name)
}

fn deletion_spec(
    deletion: &kubeadm_api::controlplane::v1beta2::KubeadmControlPlaneMachineTemplateDeletionSpec,
) -> MachineDeletionSpec {
    MachineDeletionSpec {
        node_drain_timeout_seconds: deletion.node_drain_timeout_seconds,
        node_volume_detach_timeout_seconds: deletion.node_volume_detach_timeout_seconds,
        node_deletion_timeout_seconds: deletion.node_deletion_timeout_seconds,
    }
}

fn string_map(value: Option<&Value>) -> BTreeMap<String, String> {
    value
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// Letters Cluster API uses for random name suffixes (no vowels, no look-alikes).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A new Machine name from `spec.machineNaming.template` (default `{{ .kubeadmControlPlane.name }}-{{ .random }}`).
fn machine_name(kcp: &KubeadmControlPlane, cluster: &str) -> Result<String, Error> {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 5];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Error::Infrastructure("no randomness for a machine name".into()))?;
    let random: String = bytes
        .iter()
        .map(|b| SUFFIX_ALPHABET[usize::from(*b) % SUFFIX_ALPHABET.len()] as char)
        .collect();
    let template = kcp
        .spec
        .machine_naming
        .as_ref()
        .and_then(|n| n.template.as_deref())
        .unwrap_or("{{ .kubeadmControlPlane.name }}-{{ .random }}");
    if !template.contains("{{ .random }}") {
        return Err(Error::Infrastructure(
            "spec.machineNaming.template: must contain {{ .random }}".into(),
        ));
    }
    let name = template
        .replace("{{ .cluster.name }}", cluster)
        .replace("{{ .kubeadmControlPlane.name }}", &kcp.name_any())
        .replace("{{ .random }}", &random);
    if name.len() > 63 {
        // Keep the random part, as Cluster API does when the prefix is too long.
        let keep = 63 - random.len() - 1;
        let prefix: String = name.chars().take(keep).collect();
        return Ok(format!("{}-{random}", prefix.trim_end_matches('-')));
    }
    Ok(name)
}

/// Removes KubeadmConfigs and infrastructure machines this control plane created for a Machine that never
/// came to exist (a crash or a failed create between the steps of [`create`]).
pub(super) async fn clean_leftovers(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    gathered: &Gathered,
) -> Result<(), Error> {
    let namespace = kcp.namespace().unwrap_or_default();
    let grace = k8s_openapi::jiff::SignedDuration::try_from(ctx.settings.leftover_grace)
        .unwrap_or(k8s_openapi::jiff::SignedDuration::MAX);
    let is_leftover = |meta: &kube::api::ObjectMeta| {
        let name = meta.name.clone().unwrap_or_default();
        let ours = meta
            .owner_references
            .iter()
            .flatten()
            .any(|o| Some(&o.uid) == kcp.uid().as_ref());
        let old = meta
            .creation_timestamp
            .as_ref()
            .is_some_and(|t| t.0 + grace < Timestamp::now());
        ours && old && meta.deletion_timestamp.is_none() && !gathered.all_names.contains(&name)
    };
    let kcp_label = label_value(&kcp.name_any());
    let selector = format!("{CONTROL_PLANE_NAME_LABEL}={kcp_label}");
    let configs: Api<KubeadmConfig> = Api::namespaced(ctx.client.clone(), &namespace);
    let config_metas = match ctx.machine_cache.configs_of(&namespace, &kcp_label) {
        Some(cached) => cached.iter().map(|c| c.metadata.clone()).collect(),
        None => metadata_of(&configs, &selector).await?,
    };
    for meta in config_metas {
        if is_leftover(&meta) {
            let name = meta.name.unwrap_or_default();
            tracing::info!(kcp = %kcp.name_any(), config = %name, "removing KubeadmConfig of a Machine that was never created");
            delete_ignoring_missing(&configs, &name).await?;
        }
    }
    let reference = &kcp.spec.machine_template.spec.infrastructure_ref;
    if let Some(kind) = reference.kind.strip_suffix("Template")
        && let Some(resource) = ctx.resources.get(ctx, &reference.api_group, kind).await?
    {
        let infra: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), &namespace, &resource);
        let infra_metas = match ctx
            .machine_cache
            .infrastructure_of(&resource, &namespace, &kcp_label)
        {
            Some(cached) => cached.iter().map(|o| o.metadata.clone()).collect(),
            None => metadata_of(&infra, &selector).await?,
        };
        for meta in infra_metas {
            if is_leftover(&meta) {
                let name = meta.name.unwrap_or_default();
                tracing::info!(kcp = %kcp.name_any(), infra = %name, "removing infrastructure machine of a Machine that was never created");
                delete_ignoring_missing(&infra, &name).await?;
            }
        }
    }
    Ok(())
}

/// The metadata of the objects `selector` picks, read live.
async fn metadata_of<K>(api: &Api<K>, selector: &str) -> Result<Vec<kube::api::ObjectMeta>, Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api
        .list_metadata(&ListParams::default().labels(selector))
        .await?
        .items
        .into_iter()
        .map(|o| o.metadata)
        .collect())
}

pub(super) async fn delete_ignoring_missing<K>(api: &Api<K>, name: &str) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Deletes a control-plane Machine; core Cluster API drains its node and deletes its parts.
pub(super) async fn delete(ctx: &Context, namespace: &str, name: &str) -> Result<(), Error> {
    let machines: Api<Machine> = Api::namespaced(ctx.client.clone(), namespace);
    delete_ignoring_missing(&machines, name).await?;
    // The next look must see it leaving, or it might pick another machine to delete.
    ctx.machine_cache
        .wait_for(namespace, name, Seen::Deleting)
        .await;
    METRICS
        .machines
        .get_or_create(&[("action", "deleted")])
        .inc();
    tracing::info!(machine = %name, "deleting control-plane Machine");
    Ok(())
}

/// Brings `machineTemplate.metadata`, the deletion timeouts and the readiness gates to existing machines
/// without replacing them: labels and annotations on the Machine, its KubeadmConfig and its
/// infrastructure machine, timeouts and gates on the Machine. Server-side apply, and only when something
/// differs.
pub(super) async fn propagate_in_place(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    desired: &DesiredState,
    gathered: &Gathered,
) -> Result<(), Error> {
    let namespace = kcp.namespace().unwrap_or_default();
    let template_meta = kcp
        .spec
        .machine_template
        .metadata
        .clone()
        .unwrap_or_default();
    let deletion = kcp
        .spec
        .machine_template
        .spec
        .deletion
        .as_ref()
        .map(deletion_spec);
    let gates = machine_conditions::readiness_gates(
        &kcp.spec.machine_template.spec.readiness_gates,
        desired.external_etcd,
    );
    let params = PatchParams::apply(crate::FIELD_MANAGER).force();
    for (name, machine) in &gathered.objects {
        if machine.meta().deletion_timestamp.is_some() {
            continue;
        }
        let metadata_current =
            |labels: &BTreeMap<String, String>, annotations: &BTreeMap<String, String>| {
                template_meta
                    .labels
                    .iter()
                    .all(|(k, v)| labels.get(k) == Some(v))
                    && template_meta
                        .annotations
                        .iter()
                        .all(|(k, v)| annotations.get(k) == Some(v))
            };
        let meta_patch = json!({
            "labels": template_meta.labels,
            "annotations": template_meta.annotations,
        });
        let deletion_current = deletion.is_none() || machine.spec.deletion == deletion;
        let gates_current = gates
            .iter()
            .all(|g| machine.spec.readiness_gates.contains(g));
        // With stacked etcd every machine carries the cleanup hook (adopted ones too); it is part of what
        // is applied, so that applying the template's metadata never drops it.
        let hook_missing =
            !desired.external_etcd && !machine.annotations().contains_key(CLEANUP_HOOK_ANNOTATION);
        if !metadata_current(machine.labels(), machine.annotations())
            || !deletion_current
            || !gates_current
            || hook_missing
        {
            let mut machine_meta = meta_patch.clone();
            if !desired.external_etcd {
                machine_meta["annotations"][CLEANUP_HOOK_ANNOTATION] = json!("");
            }
            let mut patch = json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "Machine",
                "metadata": machine_meta,
            });
            patch["spec"] = json!({ "readinessGates": gates });
            if let Some(deletion) = &deletion {
                patch["spec"]["deletion"] = json!(deletion);
            }
            Api::<Machine>::namespaced(ctx.client.clone(), &namespace)
                .patch(name, &params, &Patch::Apply(&patch))
                .await?;
        }
        if let Some(config) = gathered.configs.get(name)
            && !metadata_current(config.labels(), config.annotations())
        {
            let patch = json!({
                "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
                "kind": "KubeadmConfig",
                "metadata": meta_patch.clone(),
            });
            Api::<KubeadmConfig>::namespaced(ctx.client.clone(), &namespace)
                .patch(&config.name_any(), &params, &Patch::Apply(&patch))
                .await?;
        }
        if let Some((resource, infra)) = gathered.infrastructure.get(name)
            && !metadata_current(infra.labels(), infra.annotations())
        {
            let patch = json!({
                "apiVersion": resource.api_version,
                "kind": resource.kind,
                "metadata": meta_patch.clone(),
            });
            Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &namespace, resource)
                .patch(&infra.name_any(), &params, &Patch::Apply(&patch))
                .await?;
        }
    }
    Ok(())
}

/// Writes the conditions Cluster API's control-plane provider reports on each Machine it owns, only when
/// one changed: its pods' health (`APIServerPodHealthy`, …, `EtcdPodHealthy`) and its etcd member's, for
/// machines whose pods were looked at; `NodeKubeadmLabelsAndTaintsSet` once the Node was looked at; and
/// `UpToDate` with the reasons in `outdated` (see [`crate::plan::partition`]).
pub(super) async fn report_health(
    ctx: &Context,
    namespace: &str,
    gathered: &Gathered,
    outdated: &BTreeMap<String, Vec<Outdated>>,
) -> Result<(), Error> {
    use crate::machines::Health;
    use kubeadm_api::controlplane::conditions::reasons;
    use kubeadm_api::meta::{ConditionStatus, set_condition};
    let machines: Api<Machine> = Api::namespaced(ctx.client.clone(), namespace);
    for (name, machine) in &gathered.objects {
        if machine.meta().deletion_timestamp.is_some() {
            continue;
        }
        let mut conditions = machine
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let before = conditions.clone();
        if let Some(view) = gathered.pods.get(name) {
            let member = view
                .member
                .iter()
                .map(|h| (machine_conditions::ETCD_MEMBER_HEALTHY, h));
            let pods = view.components.iter().map(|(c, h)| (c.condition(), h));
            for (condition, health) in pods.chain(member) {
                let (status, reason, message) = match health {
                    Health::Healthy => (ConditionStatus::True, reasons::HEALTHY, ""),
                    Health::Unhealthy(m) => {
                        (ConditionStatus::False, reasons::UNHEALTHY, m.as_str())
                    }
                    Health::Unknown(m) => (
                        ConditionStatus::Unknown,
                        reasons::INSPECTION_FAILED,
                        m.as_str(),
                    ),
                    Health::NotChecked => continue,
                };
                set_condition(&mut conditions, condition, status, reason, message, None);
            }
        }
        let status = machine.status.as_ref();
        if let (Some(node), Some(nodes)) = (
            status.and_then(|s| s.node_ref.as_ref()),
            gathered.nodes.as_ref(),
        ) {
            let expected = machine_conditions::control_plane_taint_expected(
                &machine.spec.taints,
                gathered.configs.get(name).map(|c| &c.spec),
            );
            let value = machine_conditions::labels_and_taints(
                &node.name,
                nodes.get(&node.name).copied(),
                expected,
            );
            set_condition(
                &mut conditions,
                machine_conditions::NODE_KUBEADM_LABELS_AND_TAINTS_SET,
                value.status,
                value.reason,
                &value.message,
                None,
            );
        }
        let kubelet = status
            .and_then(|s| s.node_info.as_ref())
            .map(|i| i.kubelet_version.as_str());
        let value = machine_conditions::up_to_date(
            outdated.get(name).map(Vec::as_slice).unwrap_or_default(),
            kubelet,
            machine.spec.version.as_deref(),
        );
        set_condition(
            &mut conditions,
            machine_conditions::UP_TO_DATE,
            value.status,
            value.reason,
            &value.message,
            None,
        );
        if conditions == before {
            continue;
        }
        let patch = json!({
            "metadata": { "resourceVersion": machine.resource_version() },
            "status": { "conditions": conditions },
        });
        match machines
            .patch_status(name, &super::merge_params(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            // Someone else wrote the Machine meanwhile (or this reconcile deleted it): the next reconcile
            // retries with fresh data.
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
