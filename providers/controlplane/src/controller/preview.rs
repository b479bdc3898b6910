//! `controlplane-manager plan`: the input of [`crate::preview`] read from the management cluster, as a
//! reconcile reads it but without writing anything. Each machine's health is what this controller last
//! reported in the Machine's conditions.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};
use kubeadm_api::bootstrap::v1beta2::KubeadmConfig;
use kubeadm_api::cluster::v1beta2::{Cluster, Machine};
use kubeadm_api::controlplane::conditions::types::{ETCD_CLUSTER_HEALTHY, ETCD_MEMBERSHIP_SETTLED};
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::controlplane::validation::{
    kcp_update_warnings, validate_kcp_create, validate_kcp_update,
};
use kubeadm_api::meta::{
    CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, REMEDIATION_IN_PROGRESS_ANNOTATION,
};

use super::machines::{adoptable, discover, owned_by, view};
use super::owner_cluster;
use crate::desired::{DesiredError, DesiredState};
use crate::endpoints::Component;
use crate::machine_conditions::ETCD_MEMBER_HEALTHY;
use crate::machines::{ControlPlaneMachine, Health, MachineHealth};
use crate::preview::{Preview, preview};

/// Why there is no preview.
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    #[error("KubeadmControlPlane {0} not found")]
    NotFound(String),
    #[error(
        "KubeadmControlPlane {0}: no owning Cluster yet (metadata.ownerReferences) and no \
         cluster.x-k8s.io/cluster-name label"
    )]
    NoCluster(String),
    #[error("KubeadmControlPlane {name}: {error}")]
    Desired { name: String, error: DesiredError },
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{file}: {message}")]
    File { file: String, message: String },
}

/// The KubeadmControlPlane named `name` among the YAML documents of `text` (a manifest, or a whole
/// rendered cluster template), converted to v1beta2 when it is v1beta1.
pub fn control_plane_from_yaml(
    file: &str,
    text: &str,
    name: &str,
) -> Result<KubeadmControlPlane, PreviewError> {
    let error = |message: String| PreviewError::File {
        file: file.to_owned(),
        message,
    };
    let desired = format!("{}/v1beta2", kubeadm_api::controlplane::GROUP);
    for document in kubeadm_tools::yaml::documents(text) {
        let value: serde_json::Value = serde_saphyr::from_str(document.content)
            .map_err(|e| error(format!("document {}: {e}", document.number)))?;
        let is_ours = value["kind"] == "KubeadmControlPlane"
            && value["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with(&format!("{}/", kubeadm_api::controlplane::GROUP)));
        if !is_ours || value["metadata"]["name"] != name {
            continue;
        }
        let converted = kubeadm_api::conversion::convert_object(value, &desired)
            .map_err(|e| error(format!("document {}: {e}", document.number)))?;
        return serde_json::from_value(converted).map_err(|e| {
            error(format!(
                "document {}: not a KubeadmControlPlane: {e}",
                document.number
            ))
        });
    }
    Err(error(format!("no KubeadmControlPlane named {name}")))
}

/// Previews what the controller would do to `namespace/name`, or, with `changed`, what it would do once
/// the KubeadmControlPlane's spec is `changed`'s.
pub async fn read(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    changed: Option<KubeadmControlPlane>,
) -> Result<Preview, PreviewError> {
    let full_name = format!("{namespace}/{name}");
    let live = Api::<KubeadmControlPlane>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await?;
    let mut admission = (Vec::new(), Vec::new());
    let kcp = match (&live, changed) {
        (_, Some(mut changed)) => {
            admission = admission_of(live.as_ref(), &changed);
            // The machines belong to the object in the cluster, whatever the file says.
            if let Some(live) = &live {
                changed.metadata.uid = live.metadata.uid.clone();
                changed.metadata.owner_references = live.metadata.owner_references.clone();
            }
            changed
        }
        (Some(live), None) => live.clone(),
        (None, None) => return Err(PreviewError::NotFound(full_name)),
    };
    let desired = DesiredState::of(&kcp).map_err(|error| PreviewError::Desired {
        name: full_name.clone(),
        error,
    })?;
    let cluster_name = owner_cluster(&kcp)
        .or_else(|| kcp.labels().get(CLUSTER_NAME_LABEL).cloned())
        .ok_or_else(|| PreviewError::NoCluster(full_name.clone()))?;
    let cluster = Api::<Cluster>::namespaced(client.clone(), namespace)
        .get_opt(&cluster_name)
        .await?;
    let failure_domains = cluster
        .as_ref()
        .map(super::scope::control_plane_failure_domains)
        .unwrap_or_default();
    let machines = if live.is_some() {
        machines(
            client,
            namespace,
            &kcp,
            &cluster_name,
            desired.external_etcd,
        )
        .await?
    } else {
        Vec::new()
    };
    let observed = crate::plan::Observed {
        desired: &desired,
        machines: &machines,
        failure_domains: &failure_domains,
        etcd_refuses_member: None,
    };
    let mut preview = preview(observed, Timestamp::now());
    if let Some(live) = &live {
        preview.reported = reported_holds(live, cluster.as_ref());
    }
    (preview.refused, preview.warnings) = admission;
    Ok(preview)
}

/// What the webhook would answer to `changed`: as an update of `live`, or as a create. (refused,
/// warnings), each a rule with its field.
fn admission_of(
    live: Option<&KubeadmControlPlane>,
    changed: &KubeadmControlPlane,
) -> (Vec<String>, Vec<String>) {
    let mut changed = changed.clone();
    kubeadm_api::controlplane::defaults::default_kcp(&mut changed);
    let (verdict, warnings) = match live {
        Some(live) => (
            validate_kcp_update(live, &changed),
            kcp_update_warnings(live, &changed),
        ),
        None => (validate_kcp_create(&changed), Vec::new()),
    };
    let refused = verdict
        .err()
        .map(|errors| errors.0.iter().map(ToString::to_string).collect())
        .unwrap_or_default();
    (refused, warnings)
}

/// What holds the control plane beyond its machines' health, from what the controller last reported:
/// etcd's health and membership (alarms, a learner catching up, a leader that does not answer), a
/// remediation under way, a pause.
fn reported_holds(kcp: &KubeadmControlPlane, cluster: Option<&Cluster>) -> Vec<String> {
    let mut holds = Vec::new();
    if cluster.is_some_and(|c| kubeadm_cluster::paused::is_paused(c, kcp)) {
        holds.push("paused: nothing changes until the pause is lifted".to_owned());
    }
    if let Some(machine) = kcp.annotations().get(REMEDIATION_IN_PROGRESS_ANNOTATION) {
        holds.push(format!("a remediation is under way: {machine}"));
    }
    if let Some(source) = kcp
        .annotations()
        .get(kubeadm_api::meta::ETCD_RESTORE_FROM_ANNOTATION)
    {
        holds.push(format!(
            "an etcd restore from {source} is asked for: it replaces every machine first, and \
             nothing else changes until it is done"
        ));
    }
    let conditions = kcp
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    for type_ in [ETCD_CLUSTER_HEALTHY, ETCD_MEMBERSHIP_SETTLED] {
        if let Some(c) = conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status != "True")
        {
            holds.push(format!(
                "{type_} is {} ({}): {}",
                c.status, c.reason, c.message
            ));
        }
    }
    holds
}

/// The control-plane machines of `kcp` (owned, or unowned ones it would adopt) as the decisions see them.
async fn machines(
    client: &kube::Client,
    namespace: &str,
    kcp: &KubeadmControlPlane,
    cluster: &str,
    external_etcd: bool,
) -> Result<Vec<ControlPlaneMachine>, PreviewError> {
    let selector = format!("{CLUSTER_NAME_LABEL}={cluster},{CONTROL_PLANE_LABEL}");
    let listed = Api::<Machine>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    let configs: Api<KubeadmConfig> = Api::namespaced(client.clone(), namespace);
    let mut resources = BTreeMap::new();
    let mut seen = Vec::new();
    for machine in listed {
        if !owned_by(&machine, kcp) && !adoptable(&machine) {
            continue;
        }
        let config = match &machine.spec.bootstrap.config_ref {
            Some(reference) if reference.kind == "KubeadmConfig" => {
                configs.get_opt(&reference.name).await?
            }
            _ => None,
        };
        let reference = &machine.spec.infrastructure_ref;
        let key = (reference.api_group.clone(), reference.kind.clone());
        if !resources.contains_key(&key) {
            let found = discover(client, &reference.api_group, &reference.kind).await?;
            resources.insert(key.clone(), found);
        }
        let infrastructure = match &resources[&key] {
            Some(resource) => {
                Api::<DynamicObject>::namespaced_with(client.clone(), namespace, resource)
                    .get_opt(&reference.name)
                    .await?
            }
            None => None,
        };
        let gone = resources[&key].is_some() && infrastructure.is_none();
        let mut seen_machine = view(&machine, config.as_ref(), infrastructure.as_ref(), gone);
        seen_machine.health = reported_health(&machine, external_etcd);
        seen.push(seen_machine);
    }
    seen.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(seen)
}

/// A machine's health as this controller last reported it in the Machine's conditions: the worst of its
/// components' pod conditions, and of its etcd pod's and member's (not checked with external etcd). A
/// machine with a Node but no such condition yet is of unknown health, as it is to a reconcile that has not
/// looked yet.
fn reported_health(machine: &Machine, external_etcd: bool) -> MachineHealth {
    let conditions = machine
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let worst = |types: &[&str]| {
        let mut health = Health::Healthy;
        for type_ in types {
            let here = match conditions.iter().find(|c| c.type_ == *type_) {
                Some(c) if c.status == "True" => Health::Healthy,
                Some(c) if c.status == "False" => {
                    Health::Unhealthy(format!("{type_}: {}", c.message))
                }
                Some(c) => Health::Unknown(format!("{type_}: {}", c.message)),
                None => Health::Unknown(format!("{type_} not reported yet")),
            };
            health = match (&health, here) {
                (Health::Unhealthy(_), _) => health,
                (_, here @ Health::Unhealthy(_)) => here,
                (Health::Unknown(_), _) => health,
                (_, here) => here,
            };
        }
        health
    };
    let components = worst(&[
        Component::ApiServer.condition(),
        Component::ControllerManager.condition(),
        Component::Scheduler.condition(),
    ]);
    let etcd = if external_etcd {
        Health::NotChecked
    } else {
        worst(&[Component::Etcd.condition(), ETCD_MEMBER_HEALTHY])
    };
    MachineHealth { components, etcd }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use kubeadm_api::cluster::v1beta2::MachineStatus;

    fn conditions(conditions: &[(&str, &str, &str)]) -> Vec<Condition> {
        conditions
            .iter()
            .map(|(type_, status, message)| Condition {
                type_: (*type_).into(),
                status: (*status).into(),
                message: (*message).into(),
                reason: "Test".into(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    Timestamp::UNIX_EPOCH,
                ),
                observed_generation: None,
            })
            .collect()
    }

    fn machine(reported: &[(&str, &str, &str)]) -> Machine {
        let mut m = Machine::new("m", Default::default());
        m.status = Some(MachineStatus {
            conditions: conditions(reported),
            ..Default::default()
        });
        m
    }

    #[test]
    fn alarms_membership_remediation_restore_and_pause_are_reported_holds() {
        let mut kcp = KubeadmControlPlane::new("cp", Default::default());
        kcp.status = Some(Default::default());
        let settled = conditions(&[
            ("EtcdClusterHealthy", "True", ""),
            ("EtcdMembershipSettled", "True", ""),
        ]);
        kcp.status.as_mut().unwrap().conditions = settled;
        let mut cluster = Cluster::new("prod", Default::default());
        assert!(reported_holds(&kcp, Some(&cluster)).is_empty());

        kcp.status.as_mut().unwrap().conditions = conditions(&[
            (
                "EtcdClusterHealthy",
                "False",
                "alarm NOSPACE on member node-1",
            ),
            ("EtcdMembershipSettled", "True", ""),
        ]);
        kcp.annotations_mut().insert(
            REMEDIATION_IN_PROGRESS_ANNOTATION.into(),
            "{\"machine\":\"cp-abc\"}".into(),
        );
        kcp.annotations_mut().insert(
            kubeadm_api::meta::ETCD_RESTORE_FROM_ANNOTATION.into(),
            "secret/prod-etcd-snapshot-20261201t030000z".into(),
        );
        cluster.spec.paused = Some(true);
        assert_eq!(
            reported_holds(&kcp, Some(&cluster)),
            [
                "paused: nothing changes until the pause is lifted",
                "a remediation is under way: {\"machine\":\"cp-abc\"}",
                "an etcd restore from secret/prod-etcd-snapshot-20261201t030000z is asked for: it \
                 replaces every machine first, and nothing else changes until it is done",
                "EtcdClusterHealthy is False (Test): alarm NOSPACE on member node-1",
            ]
        );
    }

    const ALL_HEALTHY: [(&str, &str, &str); 5] = [
        ("APIServerPodHealthy", "True", ""),
        ("ControllerManagerPodHealthy", "True", ""),
        ("SchedulerPodHealthy", "True", ""),
        ("EtcdPodHealthy", "True", ""),
        ("EtcdMemberHealthy", "True", ""),
    ];

    #[test]
    fn the_named_control_plane_is_found_among_other_documents_and_converted() {
        let text = "\
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {name: prod}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata: {name: other}
spec: {version: v1.32.0}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata: {name: prod-control-plane}
spec:
  replicas: 3
  version: v1.33.1
  machineTemplate:
    infrastructureRef:
      apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
      kind: OpenStackMachineTemplate
      name: prod-control-plane-genc02
  kubeadmConfigSpec: {}
";
        let kcp = control_plane_from_yaml("cluster.yaml", text, "prod-control-plane").unwrap();
        assert_eq!(kcp.spec.version, "v1.33.1");
        let reference = &kcp.spec.machine_template.spec.infrastructure_ref;
        assert_eq!(
            (reference.api_group.as_str(), reference.name.as_str()),
            (
                "infrastructure.cluster.x-k8s.io",
                "prod-control-plane-genc02"
            )
        );
        let missing = control_plane_from_yaml("cluster.yaml", text, "nope").unwrap_err();
        assert_eq!(
            missing.to_string(),
            "cluster.yaml: no KubeadmControlPlane named nope"
        );
    }

    #[test]
    fn every_condition_true_is_healthy() {
        let health = reported_health(&machine(&ALL_HEALTHY), false);
        assert_eq!(health.components, Health::Healthy);
        assert_eq!(health.etcd, Health::Healthy);
    }

    #[test]
    fn a_false_condition_wins_over_an_unknown_one_and_is_named() {
        let mut conditions = ALL_HEALTHY.to_vec();
        conditions[3] = ("EtcdPodHealthy", "Unknown", "inspection failed");
        conditions[4] = ("EtcdMemberHealthy", "False", "alarm NOSPACE");
        let health = reported_health(&machine(&conditions), false);
        assert_eq!(health.components, Health::Healthy);
        assert_eq!(
            health.etcd,
            Health::Unhealthy("EtcdMemberHealthy: alarm NOSPACE".into())
        );
    }

    #[test]
    fn a_condition_not_reported_yet_is_unknown_and_etcd_unchecked_when_external() {
        let health = reported_health(&machine(&ALL_HEALTHY[1..3]), true);
        assert_eq!(
            health.components,
            Health::Unknown("APIServerPodHealthy not reported yet".into())
        );
        assert_eq!(health.etcd, Health::NotChecked);
    }

    fn control_plane(version: &str, etcd_flag: &str) -> KubeadmControlPlane {
        serde_saphyr::from_str(&format!(
            "apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\n\
             metadata: {{name: cp, namespace: default}}\n\
             spec:\n  replicas: 3\n  version: {version}\n\
             \x20 machineTemplate:\n    spec:\n      infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: SimMachineTemplate, name: cp}}\n\
             \x20 kubeadmConfigSpec:\n    clusterConfiguration:\n      etcd:\n        local:\n          extraArgs:\n\
             \x20           - {{name: {etcd_flag}, value: \"true\"}}\n"
        ))
        .expect("fixture parses")
    }

    #[test]
    fn plan_says_what_the_webhook_would_refuse_and_warn() {
        let flag = "experimental-initial-corrupt-check";
        let at_136 = control_plane("v1.36.3", flag);
        let at_137 = control_plane("v1.37.2", flag);
        let (refused, warnings) = admission_of(None, &at_136);
        assert_eq!(
            (refused.len(), warnings.len()),
            (0, 0),
            "{refused:?} {warnings:?}"
        );
        let (refused, warnings) = admission_of(Some(&at_136), &at_137);
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(
            refused[0].contains("etcd.local.extraArgs[0].name")
                && refused[0].contains("--feature-gates=InitialCorruptCheck=true"),
            "{refused:?}"
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        let (refused, warnings) = admission_of(Some(&at_137), &at_137);
        assert!(refused.is_empty(), "{refused:?}");
        assert_eq!(warnings.len(), 1, "{warnings:?}");

        let text = Preview {
            refused: vec!["spec.x: no".into()],
            warnings: vec!["spec.y: careful".into()],
            ..preview_of_nothing()
        }
        .to_string();
        assert!(
            text.starts_with(
                "The webhook would refuse this change:\n  * spec.x: no\nThe webhook would warn:\n  * spec.y: careful\n"
            ),
            "{text}"
        );
    }

    /// The preview of a control plane without machines.
    fn preview_of_nothing() -> Preview {
        let kcp = control_plane("v1.36.3", "heartbeat-interval");
        let desired = DesiredState::of(&kcp).expect("desired state");
        preview(
            crate::plan::Observed {
                desired: &desired,
                machines: &[],
                failure_domains: &[],
                etcd_refuses_member: None,
            },
            Timestamp::now(),
        )
    }
}
