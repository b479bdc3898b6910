//! The RBAC of the generated clusterctl components is enough, against a real kube-apiserver: both
//! managers run as processes authenticated as the service accounts of their components (tokens from
//! the TokenRequest API, never admin), with leader election on, and drive a Cluster with a
//! one-machine KubeadmControlPlane and a worker Machine to the end. The API server's audit log and the
//! managers' logs must then hold no `forbidden`. What of the components cannot run here (Deployment,
//! webhook Service and configurations: no kubelet, no cert-manager) passes a server-side dry run.
//!
//! The control-plane provider's test folder holds it because it needs that provider's fixtures; the
//! bootstrap manager binary is built next to `controlplane-manager` (cargo builds only the binaries of
//! the package under test).

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use kubeadm_api::bootstrap::v1beta2::KubeadmConfig;
use kubeadm_api::cluster::v1beta2::{Cluster, Machine};
use serde_json::{Value, json};
use testenv::ManagementPlane;
use testenv::apiserver::ApiServerOptions;
use testenv::clusterctl;
use testenv::manager::ManagerProcess;
use xtask::components::{self, Provider, rbac};

use common::{CLUSTER, NS};

const CONTROLPLANE_MANAGER: &str = env!("CARGO_BIN_EXE_controlplane-manager");
const TEMPLATE: &str = "prod-control-plane-genc01";
const WORKER: &str = "prod-md-0";

/// Audit every request with its user and response code, once it completed.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
";

async fn create_namespaced<K>(client: &kube::Client, object: &Value)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let typed: K = serde_json::from_value(object.clone()).unwrap();
    let namespace = typed.meta().namespace.clone().expect("a namespaced object");
    Api::<K>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &typed)
        .await
        .unwrap();
}

async fn create_cluster_scoped<K>(client: &kube::Client, object: &Value)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let typed: K = serde_json::from_value(object.clone()).unwrap();
    Api::<K>::all(client.clone())
        .create(&PostParams::default(), &typed)
        .await
        .unwrap();
}

/// `object` as `clusterctl init` writes it with no variable set: every `${NAME:=default}` replaced
/// by its default.
fn with_variable_defaults(object: &Value) -> Value {
    let mut text = object.to_string();
    while let Some(start) = text.find("${") {
        let end = start + text[start..].find('}').expect("a closed ${...}");
        let (_, default) = text[start + 2..end]
            .split_once(":=")
            .expect("every variable has a default");
        text = format!("{}{default}{}", &text[..start], &text[end + 1..]);
    }
    serde_json::from_str(&text).unwrap()
}

/// Has the API server validate the components it is not given for real (the managers run here as
/// processes, no kubelet, no cert-manager, no webhook Service): a dry-run create of the Deployment,
/// the Service and the webhook configurations, variables at their defaults.
async fn dry_run_the_rest(client: &kube::Client) {
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    for provider in Provider::ALL {
        for object in components::objects(provider) {
            let object = with_variable_defaults(&object);
            let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
            match object["kind"].as_str().unwrap() {
                "Deployment" => {
                    let typed: Deployment = serde_json::from_value(object.clone()).unwrap();
                    Api::<Deployment>::namespaced(client.clone(), namespace)
                        .create(&dry_run, &typed)
                        .await
                        .unwrap();
                }
                "Service" => {
                    let typed: Service = serde_json::from_value(object.clone()).unwrap();
                    Api::<Service>::namespaced(client.clone(), namespace)
                        .create(&dry_run, &typed)
                        .await
                        .unwrap();
                }
                "MutatingWebhookConfiguration" => {
                    let typed: MutatingWebhookConfiguration =
                        serde_json::from_value(object.clone()).unwrap();
                    Api::<MutatingWebhookConfiguration>::all(client.clone())
                        .create(&dry_run, &typed)
                        .await
                        .unwrap();
                }
                "ValidatingWebhookConfiguration" => {
                    let typed: ValidatingWebhookConfiguration =
                        serde_json::from_value(object.clone()).unwrap();
                    Api::<ValidatingWebhookConfiguration>::all(client.clone())
                        .create(&dry_run, &typed)
                        .await
                        .unwrap();
                }
                _ => {}
            }
        }
    }
}

/// Installs what of the components a cluster without kubelet or cert-manager can use: the
/// Namespace, the CRDs and the RBAC. Returns the CRDs to install.
async fn install_rbac(client: &kube::Client) -> Vec<CustomResourceDefinition> {
    let mut crds = Vec::new();
    for provider in Provider::ALL {
        for object in components::objects(provider) {
            match object["kind"].as_str().unwrap() {
                "Namespace" => create_cluster_scoped::<Namespace>(client, &object).await,
                "ServiceAccount" => create_namespaced::<ServiceAccount>(client, &object).await,
                "ClusterRole" => create_cluster_scoped::<ClusterRole>(client, &object).await,
                "ClusterRoleBinding" => {
                    create_cluster_scoped::<ClusterRoleBinding>(client, &object).await
                }
                "Role" => create_namespaced::<Role>(client, &object).await,
                "RoleBinding" => create_namespaced::<RoleBinding>(client, &object).await,
                "CustomResourceDefinition" => crds.push(serde_json::from_value(object).unwrap()),
                // Deployment, Service, webhooks, cert-manager: the managers run here as processes.
                _ => {}
            }
        }
    }
    crds
}

/// A kubeconfig that authenticates as the provider's service account (a TokenRequest token).
async fn service_account_kubeconfig(plane: &ManagementPlane, provider: Provider) -> PathBuf {
    let (namespace, account) = provider.service_account();
    clusterctl::service_account_kubeconfig(plane, &namespace, &account)
        .await
        .unwrap()
}

fn start_manager(
    binary: &Path,
    kubeconfig: &Path,
    dir: &Path,
    provider: Provider,
) -> ManagerProcess {
    let log_dir = dir.join(provider.label());
    std::fs::create_dir_all(&log_dir).unwrap();
    ManagerProcess::start(
        binary,
        kubeconfig,
        &log_dir,
        &[
            "--leader-elect",
            "--leader-election-namespace",
            provider.namespace(),
            "--log-format",
            "json",
        ],
    )
    .unwrap()
}

/// Polls `check` every 250 ms for up to 120 s (a bounded wait, not a timing assertion); a timeout
/// names the requests the API server refused meanwhile, the likely cause.
async fn eventually<F, Fut, T>(what: &str, audit_log: &Path, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..480 {
        if let Some(found) = check().await {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let refused = refused_requests(&std::fs::read_to_string(audit_log).unwrap_or_default());
    panic!(
        "timed out waiting for: {what}; refused requests:\n{}",
        refused.join("\n")
    );
}

async fn data_secret(client: &kube::Client, name: &str) -> Option<Secret> {
    let secret = Api::<Secret>::namespaced(client.clone(), NS)
        .get_opt(name)
        .await
        .unwrap()?;
    (secret.type_.as_deref() == Some("cluster.x-k8s.io/secret")).then_some(secret)
}

/// A worker Machine and its KubeadmConfig, owned by the Machine as core Cluster API sets it up.
async fn worker(client: &kube::Client) {
    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": { "name": WORKER, "namespace": NS, "labels": { "cluster.x-k8s.io/cluster-name": CLUSTER } },
        "spec": {
            "clusterName": CLUSTER,
            "version": "v1.33.1",
            "bootstrap": { "configRef": { "apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": WORKER } },
            "infrastructureRef": { "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachine", "name": WORKER },
        },
    }))
    .unwrap();
    let machine = Api::<Machine>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &machine)
        .await
        .unwrap();
    let config: KubeadmConfig = serde_json::from_value(json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
        "metadata": {
            "name": WORKER, "namespace": NS, "labels": { "cluster.x-k8s.io/cluster-name": CLUSTER },
            "ownerReferences": [{ "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": WORKER, "uid": machine.uid().unwrap() }],
        },
        "spec": {
            "joinConfiguration": { "nodeRegistration": { "name": "{{ ds.meta_data.local_hostname }}" } },
            // Rendered with the KubeadmControlPlane's version, which the bootstrap manager reads.
            "files": [{ "path": "/etc/kubeadm-version", "contentFormat": "Template", "content": "{{ .controlPlane.version }}" }],
        },
    }))
    .unwrap();
    Api::<KubeadmConfig>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &config)
        .await
        .unwrap();
}

/// `(user, verb, URI, code)` of every audited request of a service account that was refused.
fn refused_requests(audit_log: &str) -> Vec<String> {
    audit_log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| {
            event["user"]["username"]
                .as_str()
                .is_some_and(|u| u.starts_with("system:serviceaccount:capi-kubeadm-"))
                && event["responseStatus"]["code"].as_i64() == Some(403)
        })
        .map(|event| {
            format!(
                "{} {} {}: {}",
                event["user"]["username"].as_str().unwrap_or_default(),
                event["verb"].as_str().unwrap_or_default(),
                event["requestURI"].as_str().unwrap_or_default(),
                event["responseStatus"]["message"]
                    .as_str()
                    .unwrap_or_default()
            )
        })
        .collect()
}

/// How many audited requests each user made.
fn requests_by_user(audit_log: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for event in audit_log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
    {
        if let Some(user) = event["user"]["username"].as_str() {
            *counts.entry(user.to_owned()).or_default() += 1;
        }
    }
    counts
}

#[tokio::test]
async fn both_managers_converge_a_cluster_as_their_service_accounts_without_forbidden() {
    let bootstrap_binary = common::bootstrap_manager(CONTROLPLANE_MANAGER);
    let audit = tempfile::tempdir().unwrap();
    let policy = audit.path().join("policy.yaml");
    std::fs::write(&policy, AUDIT_POLICY).unwrap();
    let audit_log = audit.path().join("audit.log");
    let plane = ManagementPlane::start_with(ApiServerOptions {
        extra_args: vec![
            format!("--audit-policy-file={}", policy.display()),
            format!("--audit-log-path={}", audit_log.display()),
            // Owner references with blockOwnerDeletion need the finalizers subresource, as on
            // clusters that enable this plugin.
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement".into(),
        ],
        ..ApiServerOptions::default()
    })
    .await
    .unwrap();
    let admin = plane.client().await.unwrap();

    let mut crds = install_rbac(&admin).await;
    crds.extend(kubeadm_api::crd::core_crds());
    crds.extend(common::sim_infrastructure_crds());
    plane.install_crds(&crds).await.unwrap();
    dry_run_the_rest(&admin).await;
    // An infrastructure provider outside the known list grants its kinds through the aggregation
    // label, as it would for Cluster API's own control-plane provider.
    let sim_role: ClusterRole = serde_json::from_value(json!({
        "metadata": {
            "name": "sim-infrastructure-for-kubeadm-control-plane",
            "labels": { rbac::CONTROLPLANE_AGGREGATION_LABEL: "true" },
        },
        "rules": rbac::infrastructure_rules("infrastructure.cluster.x-k8s.io", &["simmachines"], &["simmachinetemplates"]),
    }))
    .unwrap();
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &sim_role)
        .await
        .unwrap();
    clusterctl::aggregate_cluster_roles(&admin).await.unwrap();

    let bootstrap_kubeconfig = service_account_kubeconfig(&plane, Provider::Bootstrap).await;
    let controlplane_kubeconfig = service_account_kubeconfig(&plane, Provider::ControlPlane).await;

    let env = common::setup_on(plane, 1, TEMPLATE, false, None).await;
    let dir = env.plane.dir().to_path_buf();
    let mut bootstrap = start_manager(
        &bootstrap_binary,
        &bootstrap_kubeconfig,
        &dir,
        Provider::Bootstrap,
    );
    let mut controlplane = start_manager(
        Path::new(CONTROLPLANE_MANAGER),
        &controlplane_kubeconfig,
        &dir,
        Provider::ControlPlane,
    );
    bootstrap.wait_ready(Duration::from_secs(60)).await.unwrap();
    controlplane
        .wait_ready(Duration::from_secs(60))
        .await
        .unwrap();

    // Core Cluster API makes the Machine the owner of its KubeadmConfig; so does the test.
    let client = env.client.clone();
    let (machine, config) = eventually("the control-plane Machine", &audit_log, || async {
        let machine = common::machines(&client).await.into_iter().next()?;
        let config = machine.spec.bootstrap.config_ref.clone()?.name;
        Some((machine, config))
    })
    .await;
    let configs: Api<KubeadmConfig> = Api::namespaced(client.clone(), NS);
    let mut owners = configs
        .get(&config)
        .await
        .unwrap()
        .owner_references()
        .to_vec();
    owners.push(machine.controller_owner_ref(&()).unwrap());
    owners.last_mut().unwrap().controller = None;
    configs
        .patch(
            &config,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "metadata": { "ownerReferences": owners } })),
        )
        .await
        .unwrap();
    common::wait_converged(&env, 1, "one control-plane machine").await;
    eventually("the init bootstrap data", &audit_log, || {
        data_secret(&client, &config)
    })
    .await;

    // Core Cluster API marks the cluster initialized once the control plane says so.
    Api::<Cluster>::namespaced(client.clone(), NS)
        .patch_status(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": { "initialization": {
                "infrastructureProvisioned": true, "controlPlaneInitialized": true,
            } } })),
        )
        .await
        .unwrap();
    worker(&client).await;
    let joined = eventually("the worker's bootstrap data", &audit_log, || {
        data_secret(&client, WORKER)
    })
    .await;
    let user_data = String::from_utf8(joined.data.unwrap()["value"].0.clone()).unwrap();
    assert!(user_data.contains("kubeadm join"), "{user_data}");
    assert!(
        user_data.contains("  - path: /etc/kubeadm-version\n    content: v1.33.1\n"),
        "{user_data}"
    );

    for (provider, lease) in [
        (
            Provider::Bootstrap,
            "kubeadm-bootstrap-manager-leader-election-capi",
        ),
        (
            Provider::ControlPlane,
            "kubeadm-control-plane-manager-leader-election-capi",
        ),
    ] {
        let lease = Api::<Lease>::namespaced(client.clone(), provider.namespace())
            .get(lease)
            .await
            .unwrap();
        let holder = lease
            .spec
            .and_then(|s| s.holder_identity)
            .unwrap_or_default();
        assert!(!holder.is_empty(), "{provider:?}: nobody holds the Lease");
    }
    let events = Api::<Event>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    for (controller, kind) in [
        ("kubeadm-bootstrap", "KubeadmConfig"),
        ("kubeadm-controlplane", "KubeadmControlPlane"),
    ] {
        assert!(
            events.iter().any(|e| {
                e.reporting_controller.as_deref() == Some(controller)
                    && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some(kind)
            }),
            "no Event from {controller} about a {kind}: {:?}",
            events
                .iter()
                .map(|e| (&e.reporting_controller, &e.reason))
                .collect::<Vec<_>>()
        );
    }

    // Stopping releases the Leases: one more write each, also audited.
    assert!(
        bootstrap
            .terminate(Duration::from_secs(15))
            .is_some_and(|s| s.success())
    );
    assert!(
        controlplane
            .terminate(Duration::from_secs(15))
            .is_some_and(|s| s.success())
    );
    let audited = std::fs::read_to_string(&audit_log).unwrap();
    let by_user = requests_by_user(&audited);
    for provider in Provider::ALL {
        let (namespace, account) = provider.service_account();
        let user = format!("system:serviceaccount:{namespace}:{account}");
        assert!(
            by_user.get(&user).copied().unwrap_or(0) > 10,
            "{user} made (almost) no requests: {by_user:?}"
        );
    }
    let refused = refused_requests(&audited);
    assert!(
        refused.is_empty(),
        "refused requests:\n{}",
        refused.join("\n")
    );
    for manager in [&bootstrap, &controlplane] {
        let log = manager.log();
        assert!(
            !log.to_lowercase().contains("forbidden"),
            "a manager log mentions forbidden:\n{log}"
        );
    }
}
