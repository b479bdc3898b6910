//! Switching a live management plane from Cluster API's own kubeadm managers to ours and back, as a user
//! swapping providers under running clusters does it, with clusterctl (`clusterctl delete --bootstrap
//! kubeadm --control-plane kubeadm`, then `clusterctl init` of the other side's entries, as the how-to
//! says): nothing the other side made may look outdated, no Machine comes or goes, no Secret is
//! rewritten, no etcd member changes, until the user asks for a change; then the new side scales and
//! rolls the other's machines.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use e2e_tests::Env;
use e2e_tests::env::{Kubeadm, NS};
use e2e_tests::etcd_watch::EtcdWatch;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::{Resource, ResourceExt};
use kubeadm_api::bootstrap::v1beta2::KubeadmConfig;
use kubeadm_api::cluster::v1beta2::{Machine, MachineDeployment};
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;

use crate::scenarios::{
    apply_watched, control_plane_machine_names, replaced, step_timeout,
    stop_and_check_nothing_is_left, vars,
};

const CLUSTER: &str = "switch";
const KCP: &str = "switch-control-plane";
const WORKERS: u32 = 2;

/// How long each side watches the other's cluster at rest after a switch (`E2E_SWITCH_SECONDS`, default
/// 60; a cautious user waits longer, e.g. 600). A manager compares every machine as soon as it starts:
/// when the etcd arguments ours added made the Go manager roll, it began within seconds.
fn quiet_window() -> Duration {
    std::env::var("E2E_SWITCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(60))
}

/// What a switch of providers must leave as it was: each object's UID and spec (a Secret's type and
/// data), the etcd members and the workload cluster's bootstrap tokens.
#[derive(Debug, PartialEq)]
struct AtRest {
    /// `Kind/name` → (UID, spec or data).
    objects: BTreeMap<String, (String, serde_json::Value)>,
    /// The etcd member names, and each control-plane node's member ID as it joined.
    members: BTreeSet<String>,
    joined: BTreeMap<String, Option<u64>>,
    /// The bootstrap token Secrets in the workload cluster's `kube-system`.
    tokens: BTreeSet<String>,
    /// What a kubeadm manager writes to a workload cluster (kubeadm's ConfigMaps, Secrets, RBAC,
    /// CoreDNS and kube-proxy), `Kind/namespace/name` → resourceVersion: at rest neither side
    /// writes there.
    workload: BTreeMap<String, String>,
}

/// The workload kinds [`AtRest::workload`] covers, all namespaces: no controller of the simulated
/// nodes writes them at rest (the simulator runs no kube-controller-manager), so any change is a
/// manager's.
fn workload_kinds() -> Vec<ApiResource> {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    vec![
        ApiResource::erase::<ConfigMap>(&()),
        ApiResource::erase::<Secret>(&()),
        ApiResource::erase::<Role>(&()),
        ApiResource::erase::<RoleBinding>(&()),
        ApiResource::erase::<ClusterRole>(&()),
        ApiResource::erase::<ClusterRoleBinding>(&()),
        ApiResource::erase::<Deployment>(&()),
        ApiResource::erase::<DaemonSet>(&()),
    ]
}

impl AtRest {
    async fn look(env: &Env, watch: &EtcdWatch, workload: &kube::Client) -> AtRest {
        let mut objects = BTreeMap::new();
        let labelled =
            ListParams::default().labels(&format!("cluster.x-k8s.io/cluster-name={CLUSTER}"));
        for resource in [
            ApiResource::erase::<Machine>(&()),
            ApiResource::erase::<KubeadmConfig>(&()),
            ApiResource::erase::<KubeadmControlPlane>(&()),
            ApiResource::erase::<MachineDeployment>(&()),
        ] {
            let api: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), NS, &resource);
            let params = if resource.kind == "KubeadmControlPlane" {
                ListParams::default()
            } else {
                labelled.clone()
            };
            for object in api.list(&params).await.unwrap().items {
                objects.insert(
                    format!("{}/{}", resource.kind, object.name_any()),
                    (
                        object.uid().unwrap_or_default(),
                        object.data["spec"].clone(),
                    ),
                );
            }
        }
        for secret in Api::<Secret>::namespaced(env.client.clone(), NS)
            .list(&labelled)
            .await
            .unwrap()
            .items
        {
            let data = serde_json::json!({ "type": secret.type_, "data": secret.data });
            objects.insert(
                format!("Secret/{}", secret.name_any()),
                (secret.uid().unwrap_or_default(), data),
            );
        }
        let members = watch
            .last()
            .filter(|s| s.answered)
            .map(|s| s.members.into_iter().map(|(name, _)| name).collect())
            .unwrap_or_default();
        let joined = env
            .sim
            .nodes()
            .into_iter()
            .filter(|n| n.control_plane && n.namespace == NS)
            .map(|n| (n.machine, n.joined_as_learner))
            .collect();
        let tokens = Api::<Secret>::namespaced(workload.clone(), "kube-system")
            .list(&ListParams::default().fields("type=bootstrap.kubernetes.io/token"))
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|s| s.name_any())
            .collect();
        let mut written: BTreeMap<String, String> = BTreeMap::new();
        for resource in workload_kinds() {
            let api: Api<DynamicObject> = Api::all_with(workload.clone(), &resource);
            for object in api.list(&ListParams::default()).await.unwrap().items {
                written.insert(
                    format!(
                        "{}/{}/{}",
                        resource.kind,
                        object.namespace().unwrap_or_default(),
                        object.name_any()
                    ),
                    object.resource_version().unwrap_or_default(),
                );
            }
        }
        // What kubeadm wrote and the managers keep: the comparison covers the objects that matter.
        for kept in [
            "ConfigMap/kube-system/kubeadm-config",
            "ConfigMap/kube-system/coredns",
            "DaemonSet/kube-system/kube-proxy",
        ] {
            assert!(
                written.contains_key(kept),
                "the workload cluster has no {kept}"
            );
        }
        AtRest {
            objects,
            members,
            joined,
            tokens,
            workload: written,
        }
    }

    /// What differs from `before`, one line per object or set.
    fn changes_since(&self, before: &AtRest) -> Vec<String> {
        let mut changes = Vec::new();
        let names: BTreeSet<&String> = before.objects.keys().chain(self.objects.keys()).collect();
        for name in names {
            match (before.objects.get(name), self.objects.get(name)) {
                (Some(_), None) => changes.push(format!("{name} deleted")),
                (None, Some(_)) => changes.push(format!("{name} created")),
                (Some((uid, _)), Some((now, _))) if uid != now => {
                    changes.push(format!("{name} re-created (UID {uid} → {now})"))
                }
                (Some((_, spec)), Some((_, now))) if spec != now => {
                    changes.push(format!("{name} changed: {spec} → {now}"))
                }
                _ => {}
            }
        }
        if self.members != before.members {
            changes.push(format!(
                "etcd members {:?} → {:?}",
                before.members, self.members
            ));
        }
        if self.joined != before.joined {
            changes.push(format!(
                "control-plane nodes {:?} → {:?}",
                before.joined, self.joined
            ));
        }
        if self.tokens != before.tokens {
            changes.push(format!(
                "bootstrap tokens {:?} → {:?}",
                before.tokens, self.tokens
            ));
        }
        let names: BTreeSet<&String> = before.workload.keys().chain(self.workload.keys()).collect();
        for name in names {
            match (before.workload.get(name), self.workload.get(name)) {
                (Some(_), None) => changes.push(format!("workload {name} deleted")),
                (None, Some(_)) => changes.push(format!("workload {name} created")),
                (Some(old), Some(now)) if old != now => changes.push(format!(
                    "workload {name} written (resourceVersion {old} → {now})"
                )),
                _ => {}
            }
        }
        changes
    }
}

/// Watches the cluster for [`quiet_window`] after a switch to `side`: every few seconds nothing may
/// differ from `before`; `reconciled`, when given, must hold at some point (the new side is at work,
/// not idle).
async fn assert_nothing_changes(
    env: &Env,
    watch: &EtcdWatch,
    workload: &kube::Client,
    before: &AtRest,
    side: &str,
    reconciled_when: Option<fn(&KubeadmControlPlane) -> bool>,
) {
    let started = Instant::now();
    let mut reconciled = reconciled_when.is_none();
    while started.elapsed() < quiet_window() {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now = AtRest::look(env, watch, workload).await;
        let changes = now.changes_since(before);
        assert!(
            changes.is_empty(),
            "{side}: {:.0?} after the switch:\n  {}\n{}",
            started.elapsed(),
            changes.join("\n  "),
            env.diagnostics().await
        );
        if let Some(when) = reconciled_when {
            reconciled |= when(&env.kcp(KCP).await);
        }
    }
    assert!(
        reconciled,
        "{side} never reconciled the control plane in {:?}\n{}",
        quiet_window(),
        env.diagnostics().await
    );
    println!(
        "{side}: nothing changed in {:.0?} ({} management objects, {} workload objects)",
        started.elapsed(),
        before.objects.len(),
        before.workload.len()
    );
}

/// Waits until the workers are ready and every Machine has a Node: a cluster at rest.
async fn wait_workers(env: &Env) {
    let deadline = Instant::now() + step_timeout();
    loop {
        let md = Api::<MachineDeployment>::namespaced(env.client.clone(), NS)
            .get(&format!("{CLUSTER}-md-0"))
            .await
            .unwrap();
        let machines = env.machines(CLUSTER).await;
        let ready = md.status.as_ref().and_then(|s| s.ready_replicas) == Some(WORKERS as i32)
            && machines.iter().all(|m| {
                m.meta().deletion_timestamp.is_none()
                    && m.status.as_ref().is_some_and(|s| s.node_ref.is_some())
            });
        if ready {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "workers not ready: {:?}\n{}",
            md.status,
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn scale(env: &Env, watch: &EtcdWatch, replicas: i32, what: &str) {
    let step = Instant::now();
    env.scale_control_plane(KCP, replicas).await;
    env.wait_control_plane(KCP, replicas, step_timeout(), what)
        .await;
    watch
        .wait_voters(
            control_plane_machine_names(env, CLUSTER).await,
            Duration::from_secs(60),
            what,
        )
        .await;
    println!("{what}: {:.1?}", step.elapsed());
}

/// Our managers' condition on the control plane: they looked at its etcd and found nothing to change.
fn ours_settled_etcd(kcp: &KubeadmControlPlane) -> bool {
    kcp.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "EtcdMembershipSettled" && c.status == "True")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn switching_from_cluster_apis_providers_to_ours_and_back_rolls_nothing() {
    let started = Instant::now();
    let mut env = Env::start_installed_cluster_api().await;
    let watch = apply_watched(&env, CLUSTER, 3, WORKERS).await;
    env.wait_control_plane(KCP, 3, step_timeout(), "Cluster API creates 3")
        .await;
    wait_workers(&env).await;
    let first = control_plane_machine_names(&env, CLUSTER).await;
    watch
        .wait_voters(first.clone(), Duration::from_secs(60), "create 3")
        .await;
    let workload = e2e_tests::api_probe::workload_client(&env.client, NS, CLUSTER)
        .await
        .unwrap();
    let mut pids: BTreeSet<u32> = env.pids().into_iter().collect();
    println!(
        "Cluster API's managers: 3 + {WORKERS} ready after {:.1?}",
        started.elapsed()
    );

    // Go → ours: nothing the Go managers made is outdated for ours.
    let before = AtRest::look(&env, &watch, &workload).await;
    println!("{}", env.switch_with_clusterctl(Kubeadm::Ours).await);
    pids.extend(env.pids());
    assert_nothing_changes(
        &env,
        &watch,
        &workload,
        &before,
        "ours",
        Some(ours_settled_etcd),
    )
    .await;

    // Ours at work on the Go managers' machines: 3 → 5 → 3, then a rollout by generation counter.
    scale(&env, &watch, 5, "ours: 3 → 5").await;
    scale(&env, &watch, 3, "ours: 5 → 3").await;
    let old = control_plane_machine_names(&env, CLUSTER).await;
    let roll = Instant::now();
    let mut bumped = vars(CLUSTER, 3, WORKERS);
    bumped.insert("CONTROL_PLANE_MACHINE_GEN", "genc02".into());
    env.apply_template(&bumped).await;
    let new = replaced(&env, CLUSTER, KCP, &old, step_timeout() * 2).await;
    watch
        .wait_voters(new, Duration::from_secs(60), "ours: rollout")
        .await;
    println!("ours: rollout of 3: {:.1?}", roll.elapsed());
    wait_workers(&env).await;
    pids.extend(env.pids());

    // Ours → Go: what ours wrote (annotations, labels, conditions, conversion data) rolls nothing.
    // Cluster API's control-plane manager leaves no mark of its own on a control plane at rest; it
    // compares every machine as soon as it starts (with an etcd argument ours once added and its
    // spec lacked, it began replacing machines within seconds), and it scales below.
    let before = AtRest::look(&env, &watch, &workload).await;
    println!("{}", env.switch_with_clusterctl(Kubeadm::ClusterApi).await);
    pids.extend(env.pids());
    assert_nothing_changes(&env, &watch, &workload, &before, "Cluster API", None).await;
    scale(&env, &watch, 5, "Cluster API: 3 → 5").await;

    let samples = watch.assert_safe("switch");
    drop(watch);
    stop_and_check_nothing_is_left(env, pids).await;
    println!(
        "scenario switch: {:.1?} wall time, {samples} membership samples",
        started.elapsed()
    );
}
