//! The KubeadmControlPlane controller against a real kube-apiserver, with a small stand-in for core Cluster
//! API (see `common`). etcd is external here; `etcd_lifecycle` covers stacked etcd.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use kubeadm_api::bootstrap::v1beta2::KubeadmConfig;
use kubeadm_api::cluster::v1beta2::{Cluster, Machine};
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::meta::MACHINE_GENERATION_LABEL;
use kubeadm_controlplane::controller::{api_writes_total, workload_views};
use serde_json::json;

#[tokio::test]
async fn scale_up_roll_generations_and_versions_scale_down() {
    let env = setup(1, "prod-control-plane-genc01", true).await;

    // 1 machine: the first runs kubeadm init.
    wait_converged(&env, 1, "initial").await;
    let first = machines(&env.client).await.remove(0);
    assert!(first.name_any().starts_with(&format!("{KCP}-")));
    assert_eq!(first.labels()[MACHINE_GENERATION_LABEL], "genc01");
    assert_eq!(first.labels()["team"], "platform");
    assert_eq!(first.labels()["cluster.x-k8s.io/control-plane-name"], KCP);
    let configs: Api<KubeadmConfig> = Api::namespaced(env.client.clone(), NS);
    let init = configs.get(&first.name_any()).await.unwrap();
    assert!(
        init.spec.init_configuration.is_defined()
            || init.spec.join_configuration.control_plane.is_none()
    );
    assert!(
        init.spec.join_configuration.control_plane.is_none(),
        "the first machine inits"
    );
    let kcp_now = kcp(&env.client).await;
    let status = kcp_now.status.clone().unwrap();
    assert_eq!(
        status.initialization.unwrap().control_plane_initialized,
        Some(true)
    );
    assert_eq!(
        status.selector.as_deref(),
        Some("cluster.x-k8s.io/cluster-name=prod,cluster.x-k8s.io/control-plane")
    );
    assert_eq!(status.version.as_deref(), Some("v1.33.1"));
    for kind in ["ca", "etcd", "proxy", "sa", "kubeconfig"] {
        let secret = Api::<Secret>::namespaced(env.client.clone(), NS)
            .get(&format!("{CLUSTER}-{kind}"))
            .await
            .unwrap_or_else(|e| panic!("secret {CLUSTER}-{kind}: {e}"));
        if kind != "ca" {
            assert_eq!(
                secret.owner_references()[0].name,
                KCP,
                "{kind} is owned by the control plane"
            );
        }
    }

    // 1 → 3: joins.
    patch_kcp(&env.client, json!({ "replicas": 3 })).await;
    wait_converged(&env, 3, "scale up").await;
    let names: Vec<String> = machines(&env.client)
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    // Creation times have one-second resolution: find the joins by name, not by position.
    for name in names.iter().filter(|n| **n != first.name_any()) {
        let join = configs.get(name).await.unwrap();
        assert!(
            join.spec.join_configuration.control_plane.is_some(),
            "{name} joins as control plane"
        );
        assert!(!join.spec.init_configuration.is_defined());
    }
    assert_eq!(
        cloned_from(&env).await,
        vec!["prod-control-plane-genc01"; 3]
    );

    // A generation bump: every machine is replaced, oldest first, never fewer than 3 with a Node.
    sim_template(&env.client, "prod-control-plane-genc02").await;
    env.core.observe(|o| o.with_node.clear());
    env.core.observe(|o| o.deleted.clear());
    patch_kcp(&env.client, json!({ "machineTemplate": { "spec": { "infrastructureRef": {
        "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachineTemplate", "name": "prod-control-plane-genc02" } } } })).await;
    let deadline = Instant::now() + CONVERGE;
    let mut saw_rolling_out = false;
    loop {
        let kcp = kcp(&env.client).await;
        if let Some(c) = condition(&kcp, "RollingOut").filter(|c| c.status == "True") {
            assert!(c.message.contains(" generation genc02: "), "{}", c.message);
            saw_rolling_out = true;
        }
        if env.core.observe(|o| o.deleted.len()) >= 3 {
            break;
        }
        assert!(Instant::now() < deadline, "rollout did not finish");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_converged(&env, 3, "generation rollout").await;
    assert!(saw_rolling_out, "RollingOut condition was never True");
    assert_eq!(
        env.core.observe(|o| o.deleted.clone()),
        names,
        "replaced oldest first"
    );
    let fewest = env
        .core
        .observe(|o| o.with_node.iter().copied().min().unwrap());
    assert!(
        fewest >= 3,
        "fell to {fewest} machines with a Node during the rollout"
    );
    assert_eq!(
        cloned_from(&env).await,
        vec!["prod-control-plane-genc02"; 3]
    );
    for machine in machines(&env.client).await {
        assert_eq!(machine.labels()[MACHINE_GENERATION_LABEL], "genc02");
    }

    // A version bump rolls the same way.
    let before: Vec<String> = machines(&env.client)
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    env.core.observe(|o| o.deleted.clear());
    env.core.observe(|o| o.with_node.clear());
    patch_kcp(&env.client, json!({ "version": "v1.33.2" })).await;
    let deadline = Instant::now() + CONVERGE;
    while env.core.observe(|o| o.deleted.len()) < 3 {
        assert!(Instant::now() < deadline, "version rollout did not finish");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_converged(&env, 3, "version rollout").await;
    assert_eq!(env.core.observe(|o| o.deleted.clone()), before);
    assert!(env.core.observe(|o| o.with_node.iter().all(|n| *n >= 3)));
    assert!(
        machines(&env.client)
            .await
            .iter()
            .all(|m| m.spec.version.as_deref() == Some("v1.33.2"))
    );
    assert_eq!(
        kcp(&env.client).await.status.unwrap().version.as_deref(),
        Some("v1.33.2")
    );
    // The joins read their static-pod settings from the workload cluster's kubeadm-config: it was
    // brought to the new version before the first new machine joined.
    let kubeadm_config =
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(env.client.clone(), "kube-system")
            .get("kubeadm-config")
            .await
            .unwrap();
    let cluster_configuration: serde_json::Value =
        serde_saphyr::from_str(&kubeadm_config.data.unwrap()["ClusterConfiguration"]).unwrap();
    assert_eq!(cluster_configuration["kubernetesVersion"], "v1.33.2");
    assert_eq!(
        cluster_configuration["apiVersion"],
        "kubeadm.k8s.io/v1beta4"
    );
    // And the kube-apiserver may reach the kubelets, as kubeadm before 1.38 needs.
    let binding = Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(env.client.clone())
        .get("kubeadm:apiserver-kubelet-client")
        .await
        .unwrap();
    assert_eq!(binding.role_ref.name, "system:kubelet-api-admin");
    assert_eq!(
        binding.subjects.unwrap()[0].name,
        "kube-apiserver-kubelet-client"
    );

    // At rest, re-applying the unchanged control plane writes nothing, and reads nothing from the
    // workload cluster: its watches vouch for the last view.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes = api_writes_total();
    let (read, kept) = workload_views();
    Api::<KubeadmControlPlane>::namespaced(env.client.clone(), NS)
        .patch(
            KCP,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "metadata": { "annotations": { "touched": "1" } } })),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        api_writes_total(),
        writes,
        "a reconcile at rest wrote something"
    );
    let (read_at_rest, kept_at_rest) = workload_views();
    assert_eq!(
        read_at_rest, read,
        "a reconcile at rest read the workload cluster"
    );
    assert!(kept_at_rest > kept, "no reconcile ran on the kept view");
    // A change of a static pod is read afresh.
    let pods =
        Api::<k8s_openapi::api::core::v1::Pod>::namespaced(env.client.clone(), "kube-system");
    let pod = pods
        .list(&ListParams::default().labels("tier=control-plane"))
        .await
        .unwrap()
        .items
        .remove(0);
    pods.patch(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&json!({ "metadata": { "annotations": { "touched": "1" } } })),
    )
    .await
    .unwrap();
    let deadline = Instant::now() + CONVERGE;
    while workload_views().0 == read {
        assert!(Instant::now() < deadline, "the changed pod was not read");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Template metadata reaches existing machines in place, without a rollout.
    let names: Vec<String> = machines(&env.client)
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    patch_kcp(
        &env.client,
        json!({ "machineTemplate": { "metadata": { "labels": { "team": "core" } } } }),
    )
    .await;
    let deadline = Instant::now() + CONVERGE;
    loop {
        let current = machines(&env.client).await;
        if current
            .iter()
            .all(|m| m.labels().get("team").map(String::as_str) == Some("core"))
        {
            let now: Vec<String> = current.iter().map(ResourceExt::name_any).collect();
            assert_eq!(now, names, "a metadata change must not replace machines");
            let config = configs.get(&names[0]).await.unwrap();
            if config.labels().get("team").map(String::as_str) == Some("core") {
                break;
            }
        }
        assert!(Instant::now() < deadline, "labels not propagated");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // 3 → 1.
    patch_kcp(&env.client, json!({ "replicas": 1 })).await;
    wait_converged(&env, 1, "scale down").await;
    drop(env);
}

/// Core Cluster API deletes a released Machine's infrastructure machine, then, in two more of its
/// rate-limited reconciles, its bootstrap config and its Node. A rollout does not wait for those: once
/// an old machine's infrastructure machine is gone (its deletion wakes the control plane), the next
/// machine is created while the old Machine is still there, and the old ones no longer count.
#[tokio::test]
async fn a_rollout_goes_on_while_core_cleans_up_a_machine_whose_infrastructure_is_gone() {
    let env = setup(3, "prod-control-plane-genc01", true).await;
    wait_converged(&env, 3, "initial").await;
    let old: Vec<String> = machines(&env.client)
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    env.core.observe(|o| {
        o.with_node.clear();
        o.keep_after_infrastructure = true;
    });
    sim_template(&env.client, "prod-control-plane-genc02").await;
    patch_kcp(&env.client, json!({ "machineTemplate": { "spec": { "infrastructureRef": {
        "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachineTemplate", "name": "prod-control-plane-genc02" } } } })).await;
    // Every old machine is replaced while every old Machine is still there, held by its finalizer.
    wait_for(
        "the rollout to replace all three while core keeps the old Machines",
        || async {
            let now = machines(&env.client).await;
            let new = now
                .iter()
                .filter(|m| {
                    !old.contains(&m.name_any())
                        && m.status.as_ref().is_some_and(|s| s.node_ref.is_some())
                })
                .count();
            let kept = env.core.observe(|o| o.kept.len());
            new == 3 && kept == 3
        },
    )
    .await;
    let now = machines(&env.client).await;
    for name in &old {
        let machine = now.iter().find(|m| &m.name_any() == name);
        assert!(
            machine.is_some_and(|m| m.metadata.deletion_timestamp.is_some()),
            "{name} is still there, being deleted"
        );
    }
    let sims: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), NS, &sim_resource("SimMachine"));
    for name in &old {
        assert!(
            sims.get_opt(name).await.unwrap().is_none(),
            "{name}'s infrastructure machine is gone"
        );
    }
    assert_eq!(
        now.len(),
        6,
        "three new machines, no fourth, and no second wave of deletions"
    );
    wait_for(
        "the old Machines to count in the status while they are there, as in Cluster API",
        || async { kcp(&env.client).await.status.and_then(|s| s.replicas) == Some(6) },
    )
    .await;

    env.core.observe(|o| o.keep_after_infrastructure = false);
    wait_converged(&env, 3, "generation rollout").await;
    let now: Vec<String> = machines(&env.client)
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert!(now.iter().all(|n| !old.contains(n)), "{now:?}");
    assert!(
        env.core.observe(|o| o.with_node.iter().all(|n| *n >= 3)),
        "never fewer than 3 machines with a Node"
    );
}

#[tokio::test]
async fn missing_endpoint_and_template_are_reported_and_leftovers_are_removed() {
    let env = setup(1, "prod-control-plane-genc01", false).await;
    // A KubeadmConfig left behind by a creation that crashed before its Machine existed, labelled as
    // every part of a control-plane machine is.
    let kcp_object = kcp(&env.client).await;
    let owner = kcp_object.controller_owner_ref(&()).unwrap();
    let mut leftover = KubeadmConfig::new("prod-control-plane-crash", Default::default());
    leftover.metadata.namespace = Some(NS.into());
    leftover.metadata.labels = Some(
        [
            (
                "cluster.x-k8s.io/control-plane-name".to_owned(),
                KCP.to_owned(),
            ),
            ("cluster.x-k8s.io/control-plane".to_owned(), String::new()),
            (
                "cluster.x-k8s.io/cluster-name".to_owned(),
                CLUSTER.to_owned(),
            ),
        ]
        .into(),
    );
    leftover.metadata.owner_references = Some(vec![owner]);
    let configs: Api<KubeadmConfig> = Api::namespaced(env.client.clone(), NS);
    configs
        .create(&PostParams::default(), &leftover)
        .await
        .unwrap();
    // The template the control plane points at does not exist.
    patch_kcp(&env.client, json!({ "machineTemplate": { "spec": { "infrastructureRef": {
        "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachineTemplate", "name": "missing-genc09" } } } })).await;
    // And the Cluster has no endpoint yet.
    let clusters: Api<Cluster> = Api::namespaced(env.client.clone(), NS);
    let endpoint = clusters
        .get(CLUSTER)
        .await
        .unwrap()
        .spec
        .control_plane_endpoint;
    clusters
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "spec": { "controlPlaneEndpoint": null } })),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut env = env;
    env.tasks.push(start(&env.client));

    let deadline = Instant::now() + CONVERGE;
    loop {
        let kcp = kcp(&env.client).await;
        if let Some(c) =
            condition(&kcp, "Initialized").filter(|c| c.reason == "WaitingForControlPlaneEndpoint")
        {
            assert_eq!(
                c.message,
                "Cluster default/prod: spec.controlPlaneEndpoint is not set yet"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no condition about the missing endpoint: {:?}",
            kcp.status
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let events = Api::<Event>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("WaitingForControlPlaneEndpoint"))
    );
    assert!(
        machines(&env.client).await.is_empty(),
        "nothing is created without an endpoint"
    );
    clusters
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "spec": { "controlPlaneEndpoint": endpoint } })),
        )
        .await
        .unwrap();

    let deadline = Instant::now() + CONVERGE;
    loop {
        let kcp = kcp(&env.client).await;
        if let Some(c) = condition(&kcp, "MachinesCreated").filter(|c| c.status == "False") {
            assert!(
                c.message
                    .contains("SimMachineTemplate missing-genc09 not found"),
                "{}",
                c.message
            );
            assert!(
                c.message
                    .contains("spec.machineTemplate.spec.infrastructureRef"),
                "{}",
                c.message
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no MachinesCreated=False condition: {:?}",
            kcp.status
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(machines(&env.client).await.is_empty(), "no partial machine");
    let events = Api::<Event>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(events.items.iter().any(|e| {
        e.reason.as_deref() == Some("MachineCreationFailed")
            && e.note
                .as_deref()
                .is_some_and(|n| n.contains("missing-genc09"))
    }));
    let deadline = Instant::now() + CONVERGE;
    while configs
        .get_opt("prod-control-plane-crash")
        .await
        .unwrap()
        .is_some()
    {
        assert!(
            Instant::now() < deadline,
            "the leftover KubeadmConfig was not removed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Once the template exists, the control plane comes up.
    sim_template(&env.client, "missing-genc09").await;
    wait_converged(&env, 1, "after the template appeared").await;
    let kcp = kcp(&env.client).await;
    assert_eq!(condition(&kcp, "MachinesCreated").unwrap().status, "True");
    let _ = &env.plane;
}

/// A control-plane Machine made by another KCP-compatible controller: same labels, no owner.
async fn foreign_machine(client: &kube::Client, name: &str) {
    let resource = sim_resource("SimMachine");
    let mut infra = DynamicObject::new(name, &resource).within(NS);
    infra.metadata.annotations = Some(
        [
            (
                "cluster.x-k8s.io/cloned-from-name".to_owned(),
                "prod-control-plane-genc01".to_owned(),
            ),
            (
                "cluster.x-k8s.io/cloned-from-groupkind".to_owned(),
                "SimMachineTemplate.infrastructure.cluster.x-k8s.io".to_owned(),
            ),
        ]
        .into(),
    );
    infra.data = json!({ "spec": {} });
    Api::<DynamicObject>::namespaced_with(client.clone(), NS, &resource)
        .create(&PostParams::default(), &infra)
        .await
        .unwrap();
    let config: KubeadmConfig = serde_json::from_value(json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
        "metadata": { "name": name, "namespace": NS },
        "spec": {
            "clusterConfiguration": {
                "apiServer": { "extraArgs": [{ "name": "profiling", "value": "false" }] },
                "etcd": { "external": EXTERNAL_ETCD.clone() },
                "featureGates": { "ControlPlaneKubeletLocalMode": true },
            },
            "initConfiguration": { "nodeRegistration": { "name": "{{ ds.meta_data.local_hostname }}" } },
        },
    }))
    .unwrap();
    Api::<KubeadmConfig>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &config)
        .await
        .unwrap();
    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": { "name": name, "namespace": NS, "labels": {
            "cluster.x-k8s.io/cluster-name": CLUSTER, "cluster.x-k8s.io/control-plane": "" } },
        "spec": {
            "clusterName": CLUSTER,
            "version": "v1.33.1",
            "bootstrap": { "configRef": { "apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name } },
            "infrastructureRef": { "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachine", "name": name },
        },
    }))
    .unwrap();
    Api::<Machine>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &machine)
        .await
        .unwrap();
}

#[tokio::test]
async fn adopts_foreign_machines_honours_pause_and_deletes_in_order() {
    let mut env = setup(1, "prod-control-plane-genc01", false).await;
    foreign_machine(&env.client, "legacy-cp-0").await;
    env.tasks.push(start(&env.client));

    // Adopted, not replaced: it matches the desired state.
    wait_converged(&env, 1, "adoption").await;
    let adopted = machines(&env.client).await.remove(0);
    assert_eq!(adopted.name_any(), "legacy-cp-0");
    let owner = adopted
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .unwrap();
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("KubeadmControlPlane", KCP)
    );

    // Paused: a scale up waits.
    let clusters: Api<Cluster> = Api::namespaced(env.client.clone(), NS);
    clusters
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "spec": { "paused": true } })),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    patch_kcp(&env.client, json!({ "replicas": 3 })).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        machines(&env.client).await.len(),
        1,
        "a paused cluster was scaled"
    );
    clusters
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "spec": { "paused": false } })),
        )
        .await
        .unwrap();
    wait_converged(&env, 3, "after unpausing").await;

    // Deleting the control plane: workers first, then every control-plane machine, then the finalizer.
    let worker: Machine = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": { "name": "worker-0", "namespace": NS, "labels": { "cluster.x-k8s.io/cluster-name": CLUSTER } },
        "spec": {
            "clusterName": CLUSTER,
            "bootstrap": { "dataSecretName": "worker-0" },
            "infrastructureRef": { "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachine", "name": "worker-0" },
        },
    }))
    .unwrap();
    let machine_api: Api<Machine> = Api::namespaced(env.client.clone(), NS);
    machine_api
        .create(&PostParams::default(), &worker)
        .await
        .unwrap();
    let kcps: Api<KubeadmControlPlane> = Api::namespaced(env.client.clone(), NS);
    kcps.delete(KCP, &Default::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let control_planes = |all: &[Machine]| {
        all.iter()
            .filter(|m| m.labels().contains_key("cluster.x-k8s.io/control-plane"))
            .count()
    };
    assert_eq!(
        control_planes(&machines(&env.client).await),
        3,
        "control plane deleted before the workers"
    );
    machine_api
        .delete("worker-0", &Default::default())
        .await
        .unwrap();
    let deadline = Instant::now() + CONVERGE;
    while kcps.get_opt(KCP).await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "the KubeadmControlPlane was not deleted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(machines(&env.client).await.is_empty());
}

/// What a MachineHealthCheck does to a Machine it finds unhealthy and leaves to its owner.
async fn mark_unhealthy(client: &kube::Client, name: &str) {
    let api = Api::<Machine>::namespaced(client.clone(), NS);
    let machine = api.get(name).await.unwrap();
    let mut conditions = machine.status.clone().unwrap_or_default().conditions;
    let now = k8s_openapi::jiff::Timestamp::now();
    for type_ in ["HealthCheckSucceeded", "OwnerRemediated"] {
        conditions.push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: type_.into(),
            status: "False".into(),
            reason: "NodeStartupTimeout".into(),
            message: String::new(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
            observed_generation: None,
        });
    }
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": { "conditions": conditions } })),
    )
    .await
    .unwrap();
}

/// Waits until `victim` is gone and a replacement that records the remediation of `victim` runs;
/// returns the replacement and the retry count it records.
async fn wait_replaced(env: &Env, victim: &str) -> (String, i64) {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let all = machines(&env.client).await;
        let replacement = all.iter().find_map(|m| {
            let record: serde_json::Value = serde_json::from_str(
                m.annotations()
                    .get("controlplane.cluster.x-k8s.io/remediation-for")?,
            )
            .ok()?;
            (record["machine"] == victim).then(|| (m.name_any(), record["retryCount"].as_i64()))
        });
        if !all.iter().any(|m| m.name_any() == victim)
            && let Some((name, Some(retries))) = replacement
        {
            wait_converged(env, 3, "after remediation").await;
            return (name, retries);
        }
        assert!(
            Instant::now() < deadline,
            "{victim} was not replaced: {:?}",
            all.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn unhealthy_machines_are_replaced_retries_counted_and_limited() {
    let env = setup(3, "prod-control-plane-genc01", true).await;
    wait_converged(&env, 3, "initial").await;

    // A machine a health check hands over is deleted and replaced; the replacement records it.
    let first = machines(&env.client).await[0].name_any();
    mark_unhealthy(&env.client, &first).await;
    let (second, retries) = wait_replaced(&env, &first).await;
    assert_eq!(retries, 0, "a first remediation is no retry");
    let status = kcp(&env.client).await;
    assert!(
        !status
            .annotations()
            .contains_key("controlplane.cluster.x-k8s.io/remediation-in-progress"),
        "the in-progress record is removed once the replacement exists"
    );
    let last = status.status.unwrap().last_remediation.unwrap();
    assert_eq!(
        (last.machine.as_str(), last.retry_count),
        (first.as_str(), 0)
    );

    // The replacement failing within the healthy period is a retry.
    mark_unhealthy(&env.client, &second).await;
    let (third, retries) = wait_replaced(&env, &second).await;
    assert_eq!(retries, 1);

    // Retries spent: the machine stays and says why.
    patch_kcp(&env.client, json!({ "remediation": { "maxRetry": 1 } })).await;
    // A reconcile still running on the spec without the limit would remediate once more.
    wait_observed(&env.client).await;
    mark_unhealthy(&env.client, &third).await;
    let machine_api = Api::<Machine>::namespaced(env.client.clone(), NS);
    let deadline = Instant::now() + CONVERGE;
    loop {
        let machine = machine_api.get(&third).await.unwrap();
        let owner = machine
            .status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "OwnerRemediated");
        if let Some(c) = owner.filter(|c| c.reason == "CannotBeRemediated") {
            assert!(c.message.contains("maxRetry"), "{}", c.message);
            break;
        }
        assert!(Instant::now() < deadline, "no CannotBeRemediated condition");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(machine_api.get_opt(&third).await.unwrap().is_some());
    let events = Api::<Event>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap();
    let reasons: Vec<&str> = events
        .items
        .iter()
        .filter_map(|e| e.reason.as_deref())
        .collect();
    assert!(reasons.contains(&"MachineRemediated"), "{reasons:?}");
    assert!(reasons.contains(&"RemediationBlocked"), "{reasons:?}");
}

/// The add-ons kubeadm installs, as a real cluster has them (a second container in kube-proxy's pod
/// shows that only the named container changes).
async fn install_addons(client: &kube::Client) {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
    use k8s_openapi::api::core::v1::ConfigMap;
    let workload = |kind: &str, name: &str, containers: serde_json::Value| {
        json!({
            "apiVersion": "apps/v1", "kind": kind,
            "metadata": { "name": name, "namespace": "kube-system" },
            "spec": {
                "selector": { "matchLabels": { "k8s-app": name } },
                "template": {
                    "metadata": { "labels": { "k8s-app": name } },
                    "spec": { "containers": containers },
                },
            },
        })
    };
    let proxy: DaemonSet = serde_json::from_value(workload(
        "DaemonSet",
        "kube-proxy",
        json!([
            { "name": "kube-proxy", "image": "registry.k8s.io/kube-proxy:v1.32.4" },
            { "name": "log-shipper", "image": "example.org/shipper:1.0" },
        ]),
    ))
    .unwrap();
    let dns: Deployment = serde_json::from_value(workload(
        "Deployment",
        "coredns",
        json!([{ "name": "coredns", "image": "registry.k8s.io/coredns/coredns:v1.11.3" }]),
    ))
    .unwrap();
    let corefile: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "coredns", "namespace": "kube-system" },
        "data": { "Corefile": ".:53 {\n    errors\n    forward . /etc/resolv.conf\n}\n" },
    }))
    .unwrap();
    let pp = PostParams::default();
    Api::<DaemonSet>::namespaced(client.clone(), "kube-system")
        .create(&pp, &proxy)
        .await
        .unwrap();
    Api::<Deployment>::namespaced(client.clone(), "kube-system")
        .create(&pp, &dns)
        .await
        .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
        .create(&pp, &corefile)
        .await
        .unwrap();
}

/// Images of the named object's containers, by container name.
async fn images<K>(client: &kube::Client, name: &str) -> std::collections::BTreeMap<String, String>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    <K as kube::Resource>::DynamicType: Default,
{
    let object = Api::<K>::namespaced(client.clone(), "kube-system")
        .get(name)
        .await
        .unwrap();
    let value = serde_json::to_value(object).unwrap();
    value["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["image"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

async fn wait_for<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + CONVERGE;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn kube_proxy_follows_the_version_and_coredns_the_dns_settings() {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
    let mut env = setup(1, "prod-control-plane-genc01", false).await;
    install_addons(&env.client).await;
    env.tasks.push(start(&env.client));
    wait_converged(&env, 1, "initial").await;

    let client = env.client.clone();
    wait_for("kube-proxy not moved to v1.33.1", || {
        let client = client.clone();
        async move {
            images::<DaemonSet>(&client, "kube-proxy").await["kube-proxy"]
                == "registry.k8s.io/kube-proxy:v1.33.1"
        }
    })
    .await;
    assert_eq!(
        images::<DaemonSet>(&client, "kube-proxy").await["log-shipper"],
        "example.org/shipper:1.0"
    );
    assert_eq!(
        images::<Deployment>(&client, "coredns").await["coredns"],
        "registry.k8s.io/coredns/coredns:v1.11.3",
        "CoreDNS moves only when clusterConfiguration.dns asks"
    );

    patch_kcp(
        &client,
        json!({ "kubeadmConfigSpec": { "clusterConfiguration": { "dns": { "imageTag": "v1.12.0" } } } }),
    )
    .await;
    wait_for("CoreDNS not moved to v1.12.0", || {
        let client = client.clone();
        async move {
            images::<Deployment>(&client, "coredns").await["coredns"]
                == "registry.k8s.io/coredns/coredns:v1.12.0"
        }
    })
    .await;
    let corefile =
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), "kube-system")
            .get("coredns")
            .await
            .unwrap()
            .data
            .unwrap();
    assert_eq!(corefile["Corefile-backup"], corefile["Corefile"]);

    // A downgrade is refused with an Event naming the field.
    patch_kcp(
        &client,
        json!({ "kubeadmConfigSpec": { "clusterConfiguration": { "dns": { "imageTag": "v1.10.1" } } } }),
    )
    .await;
    wait_for("no AddonUpdateFailed Event", || {
        let client = client.clone();
        async move {
            Api::<Event>::namespaced(client, NS)
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("AddonUpdateFailed")
                        && e.note
                            .as_deref()
                            .is_some_and(|n| n.contains("dns.imageTag"))
                })
        }
    })
    .await;
    assert_eq!(
        images::<Deployment>(&client, "coredns").await["coredns"],
        "registry.k8s.io/coredns/coredns:v1.12.0"
    );
}

/// A static pod that stops being ready in the workload cluster wakes the control plane through its
/// watch on the cluster's control-plane pods: the Machine says so long before a settled control plane
/// with external etcd is looked at again (the 10-minute sync period), and again when the pod recovers.
#[tokio::test]
async fn a_static_pod_changing_in_the_workload_cluster_wakes_the_control_plane() {
    use k8s_openapi::api::core::v1::Pod;
    let env = setup(1, "prod-control-plane-genc01", true).await;
    wait_converged(&env, 1, "initial").await;
    let machine = machines(&env.client).await.remove(0);
    let node = machine.status.unwrap().node_ref.unwrap().name;
    let scheduler = format!("kube-scheduler-{node}");
    let machine = machine.metadata.name.unwrap();
    let scheduler_healthy = |status: &'static str| {
        let client = env.client.clone();
        let machine = machine.clone();
        move || {
            let client = client.clone();
            let machine = machine.clone();
            async move {
                let machine = Api::<Machine>::namespaced(client, NS)
                    .get(&machine)
                    .await
                    .unwrap();
                machine
                    .status
                    .unwrap_or_default()
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "SchedulerPodHealthy" && c.status == status)
            }
        }
    };
    wait_for("the scheduler pod is healthy", scheduler_healthy("True")).await;
    wait_observed(&env.client).await;

    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "kube-system");
    let ready = |status: &str| {
        json!({ "status": { "conditions": [
            { "type": "Ready", "status": status, "lastTransitionTime": k8s_openapi::jiff::Timestamp::now() },
        ] } })
    };
    for (ready_now, reported) in [("False", "not ready"), ("True", "ready again")] {
        pods.patch_status(
            &scheduler,
            &PatchParams::default(),
            &Patch::Merge(&ready(ready_now)),
        )
        .await
        .unwrap();
        wait_for(
            &format!("the Machine reports the scheduler pod {reported}"),
            scheduler_healthy(ready_now),
        )
        .await;
    }
}

/// A workload cluster that does not answer (here: its endpoint accepts connections and never speaks) has
/// no watch open to say when it comes back, so the control plane keeps polling it: once it answers, the
/// control plane turns initialized without waiting for the 10-minute sync period.
#[tokio::test]
async fn a_workload_cluster_that_did_not_answer_is_polled_until_it_does() {
    let env = setup(1, "prod-control-plane-silent", false).await;
    let apiserver = env
        .plane
        .apiserver()
        .url()
        .trim_start_matches("https://")
        .to_owned();
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    Api::<Cluster>::namespaced(env.client.clone(), NS)
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "spec": { "controlPlaneEndpoint": { "port": port } } })),
        )
        .await
        .unwrap();
    let controller = start(&env.client);

    let silent_reported = || {
        let client = env.client.clone();
        async move {
            kcp(&client).await.status.is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.status == "False" && c.message.contains("did not answer within"))
            })
        }
    };
    wait_for(
        "the status says the workload cluster did not answer",
        silent_reported,
    )
    .await;
    let booted = || {
        let client = env.client.clone();
        async move {
            machines(&client)
                .await
                .iter()
                .any(|m| m.status.as_ref().is_some_and(|s| s.node_ref.is_some()))
        }
    };
    wait_for("the machine booted", booted).await;
    // Every reconcile woken by the machine's changes has given up on the silent endpoint by now.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(!initialized(&kcp(&env.client).await));

    // The endpoint starts answering: connections are relayed to the API server.
    let relay = tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = silent.accept().await else {
                return;
            };
            let apiserver = apiserver.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(&apiserver).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    wait_for(
        "the control plane is initialized once the workload cluster answers",
        || {
            let client = env.client.clone();
            async move { initialized(&kcp(&client).await) }
        },
    )
    .await;
    relay.abort();
    controller.abort();
}

fn initialized(kcp: &KubeadmControlPlane) -> bool {
    kcp.status
        .as_ref()
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.control_plane_initialized)
        == Some(true)
}
