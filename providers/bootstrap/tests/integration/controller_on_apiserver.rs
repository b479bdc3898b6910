//! The KubeadmConfig controller against real apiservers: a management cluster holding Cluster, Machines
//! and KubeadmConfigs, and a second apiserver standing in for the workload cluster that receives the
//! join tokens.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use kubeadm_api::bootstrap::v1beta2::KubeadmConfig;
use kubeadm_api::cluster::v1beta2::{Cluster, Machine};
use kubeadm_bootstrap::controller::{self, Settings};
use kubeadm_runtime::Shutdown;
use serde_json::{Value, json};
use testenv::ManagementPlane;

const NS: &str = "default";

async fn create<K>(client: &kube::Client, object: Value) -> K
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let typed: K = serde_json::from_value(object).unwrap();
    Api::<K>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &typed)
        .await
        .unwrap()
}

async fn cluster(client: &kube::Client, name: &str, paused: bool) {
    create::<Cluster>(
        client,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": { "name": name, "namespace": NS },
            "spec": {
                "paused": paused,
                "controlPlaneEndpoint": { "host": "10.0.0.10", "port": 6443 },
                "clusterNetwork": { "services": { "cidrBlocks": ["10.96.0.0/12"] }, "pods": { "cidrBlocks": ["192.168.0.0/16"] } },
            },
        }),
    )
    .await;
    set_cluster_status(
        client,
        name,
        json!({ "initialization": { "infrastructureProvisioned": true } }),
    )
    .await;
}

async fn set_cluster_status(client: &kube::Client, name: &str, status: Value) {
    Api::<Cluster>::namespaced(client.clone(), NS)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await
        .unwrap();
}

fn default_spec() -> Value {
    json!({
        "clusterConfiguration": { "apiServer": { "extraArgs": [{ "name": "profiling", "value": "false" }] } },
        "initConfiguration": { "nodeRegistration": { "name": "{{ ds.meta_data.local_hostname }}" } },
        "joinConfiguration": { "nodeRegistration": { "name": "{{ ds.meta_data.local_hostname }}" } },
        "preKubeadmCommands": ["swapoff -a"],
    })
}

/// A Machine and its KubeadmConfig with the default spec.
async fn machine_with_config(
    client: &kube::Client,
    cluster: &str,
    name: &str,
    control_plane: bool,
) {
    machine_with_spec(client, cluster, name, control_plane, default_spec()).await;
}

/// A Machine and its KubeadmConfig, owned by the Machine as core Cluster API sets it up.
async fn machine_with_spec(
    client: &kube::Client,
    cluster: &str,
    name: &str,
    control_plane: bool,
    spec: Value,
) {
    let mut labels = json!({ "cluster.x-k8s.io/cluster-name": cluster });
    if control_plane {
        labels["cluster.x-k8s.io/control-plane"] = json!("");
        labels["controlplane.cluster.x-k8s.io/machine-generation"] = json!("genc01");
    }
    let machine: Machine = create(
        client,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": { "name": name, "namespace": NS, "labels": labels },
            "spec": {
                "clusterName": cluster,
                "version": "v1.30.4",
                "bootstrap": { "configRef": { "apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name } },
                "infrastructureRef": { "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachine", "name": name },
            },
        }),
    )
    .await;
    create::<KubeadmConfig>(
        client,
        json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
            "metadata": {
                "name": name, "namespace": NS, "labels": { "cluster.x-k8s.io/cluster-name": cluster },
                "ownerReferences": [{ "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": name, "uid": machine.uid().unwrap() }],
            },
            "spec": spec,
        }),
    )
    .await;
}

async fn user_data(client: &kube::Client, name: &str) -> Option<String> {
    let secret = Api::<Secret>::namespaced(client.clone(), NS)
        .get_opt(name)
        .await
        .unwrap()?;
    let data = secret.data.unwrap_or_default();
    Some(String::from_utf8(data.get("value")?.0.clone()).unwrap())
}

async fn condition_reason(client: &kube::Client, name: &str, type_: &str) -> Option<String> {
    let config = Api::<KubeadmConfig>::namespaced(client.clone(), NS)
        .get(name)
        .await
        .unwrap();
    config
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.reason)
}

/// `(type, reason)` of the events.k8s.io/v1 Events about the KubeadmConfig `name`.
async fn events_about(client: &kube::Client, name: &str) -> Vec<(String, String)> {
    Api::<Event>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("KubeadmConfig") && r.name.as_deref() == Some(name)
            })
        })
        .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default()))
        .collect()
}

/// `kubeadm_bootstrap_api_writes_total` by kind, read from this process's `/metrics` text.
fn api_writes() -> BTreeMap<String, u64> {
    const PREFIX: &str = "kubeadm_bootstrap_api_writes_total{kind=\"";
    kubeadm_runtime::metrics::encode()
        .lines()
        .filter_map(|line| {
            let (kind, value) = line.strip_prefix(PREFIX)?.split_once("\"} ")?;
            Some((kind.to_owned(), value.parse().unwrap()))
        })
        .collect()
}

/// Secret GETs the controller sent so far, from `kubeadm_management_api_requests_total`.
fn secret_gets_sent() -> u64 {
    const SERIES: &str =
        "kubeadm_management_api_requests_total{verb=\"get\",resource=\"secrets\"} ";
    kubeadm_runtime::metrics::encode()
        .lines()
        .find_map(|line| line.strip_prefix(SERIES)?.parse().ok())
        .unwrap_or(0)
}

/// Counts in `after` that grew since `before`.
fn grown(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(kind, n)| (kind.clone(), n - before.get(kind).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Waits until the write counters stayed the same for a second (bounded), so a snapshot holds all the
/// writes of the reconciles a change triggered.
async fn writes_settled() -> BTreeMap<String, u64> {
    let mut last = api_writes();
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = api_writes();
        if now == last {
            return now;
        }
        last = now;
    }
    last
}

/// Polls `check` every 200 ms for up to 60 s (a bounded wait, not a timing assertion).
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..300 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("timed out waiting for: {what}");
}

#[tokio::test]
async fn one_init_then_joins_with_tokens_in_the_workload_cluster() {
    let management = ManagementPlane::start().await.unwrap();
    let workload = ManagementPlane::start().await.unwrap();
    let mut crds = kubeadm_api::crd::bootstrap_crds();
    crds.extend(kubeadm_api::crd::core_crds());
    management.install_crds(&crds).await.unwrap();
    let client = management.client().await.unwrap();

    cluster(&client, "prod", false).await;
    cluster(&client, "frozen", true).await;
    let kubeconfig = std::fs::read_to_string(workload.kubeconfig_path()).unwrap();
    let kubeconfig_secret: Secret = serde_json::from_value(json!({
        "metadata": { "name": "prod-kubeconfig", "namespace": NS },
        "stringData": { "value": kubeconfig },
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &kubeconfig_secret)
        .await
        .unwrap();
    for (name, control_plane) in [
        ("prod-cp-0", true),
        ("prod-cp-1", true),
        ("prod-md-0", false),
    ] {
        machine_with_config(&client, "prod", name, control_plane).await;
    }
    machine_with_config(&client, "frozen", "frozen-cp-0", true).await;
    // A spec the renderer refuses: the machine must not keep the init lock it cannot use.
    cluster(&client, "broken", false).await;
    let mut broken = default_spec();
    broken["files"] = json!([{ "path": "/etc/x", "content": "a", "contentFrom": { "secret": { "name": "s", "key": "k" } } }]);
    machine_with_spec(&client, "broken", "broken-cp-0", true, broken).await;
    // A template file needs the control plane's version, which is read only from a KubeadmControlPlane.
    create::<Cluster>(
        &client,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": { "name": "foreign", "namespace": NS },
            "spec": {
                "controlPlaneEndpoint": { "host": "10.0.0.11", "port": 6443 },
                "controlPlaneRef": { "apiGroup": "controlplane.cluster.x-k8s.io", "kind": "TalosControlPlane", "name": "foreign" },
            },
        }),
    )
    .await;
    set_cluster_status(&client, "foreign", json!({ "initialization": { "infrastructureProvisioned": true, "controlPlaneInitialized": true } })).await;
    let mut templated = default_spec();
    templated["files"] = json!([{ "path": "/etc/kubeadm-version", "contentFormat": "Template", "content": "{{ .controlPlane.version }}" }]);
    machine_with_spec(&client, "foreign", "foreign-md-0", false, templated.clone()).await;
    // Without a control plane the key is left out, and a template can test for it.
    templated["files"][0]["content"] =
        json!("{{ if .controlPlane }}{{ .controlPlane.version }}{{ else }}none{{ end }}");
    machine_with_spec(&client, "prod", "prod-md-1", false, templated).await;
    // A controller that crashed earlier had given the init lock to prod-cp-1: it must keep it.
    let lock: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "prod-lock", "namespace": NS, "labels": { "cluster.x-k8s.io/cluster-name": "prod" } },
        "data": { "lock-information": "{\"machineName\":\"prod-cp-1\"}" },
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &lock)
        .await
        .unwrap();

    let (stop, shutdown) = Shutdown::channel();
    let settings = Settings {
        token_ttl: Duration::from_secs(900),
        ..Settings::default()
    };
    // Requests counted as the manager counts them, to see which reads the Secret copy saves.
    let counted = kubeadm_runtime::metrics::count_requests(&client);
    let running = tokio::spawn(controller::run(counted, settings, shutdown));

    eventually("the lock holder gets the init data", || async {
        user_data(&client, "prod-cp-1").await.is_some()
    })
    .await;
    let init = user_data(&client, "prod-cp-1").await.unwrap();
    assert!(
        init.starts_with("## template: jinja\n#cloud-config\n"),
        "{init}"
    );
    assert!(
        init.contains("kubeadm init --config /run/kubeadm/kubeadm.yaml"),
        "{init}"
    );
    assert!(
        init.contains("EtcdLearnerMode: true"),
        "1.30 enables learner mode: {init}"
    );
    assert!(
        init.contains("controlplane.cluster.x-k8s.io/machine-generation: genc01"),
        "{init}"
    );
    eventually("an event says the init data was written", || async {
        events_about(&client, "prod-cp-1")
            .await
            .contains(&("Normal".into(), "BootstrapDataWritten".into()))
    })
    .await;
    eventually(
        "the other control-plane machine waits for the lock",
        || async {
            condition_reason(&client, "prod-cp-0", "DataSecretAvailable")
                .await
                .as_deref()
                == Some("WaitingForControlPlaneInit")
        },
    )
    .await;
    eventually("the worker waits for the control plane", || async {
        condition_reason(&client, "prod-md-0", "DataSecretAvailable")
            .await
            .as_deref()
            == Some("WaitingForControlPlane")
    })
    .await;
    assert!(
        user_data(&client, "prod-cp-0").await.is_none(),
        "exactly one kubeadm init"
    );
    let certs = Api::<Secret>::namespaced(client.clone(), NS);
    for suffix in ["ca", "etcd", "proxy", "sa"] {
        assert!(
            certs
                .get_opt(&format!("prod-{suffix}"))
                .await
                .unwrap()
                .is_some(),
            "prod-{suffix} generated"
        );
    }

    // The control plane comes up (core Cluster API reports it on the Cluster).
    set_cluster_status(&client, "prod", json!({ "initialization": { "infrastructureProvisioned": true, "controlPlaneInitialized": true } })).await;
    eventually("control-plane join and worker join data", || async {
        user_data(&client, "prod-cp-0").await.is_some()
            && user_data(&client, "prod-md-0").await.is_some()
    })
    .await;
    let cp_join = user_data(&client, "prod-cp-0").await.unwrap();
    assert!(
        cp_join.contains("kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml"),
        "{cp_join}"
    );
    assert!(
        cp_join.contains("controlPlane:"),
        "control-plane join: {cp_join}"
    );
    let worker = user_data(&client, "prod-md-0").await.unwrap();
    assert!(
        worker.contains("node.cluster.x-k8s.io/uninitialized"),
        "{worker}"
    );
    assert!(
        worker.contains("caCertHashes:\n") && worker.contains("sha256:"),
        "{worker}"
    );

    // Each join token exists in the workload cluster.
    let configs = Api::<KubeadmConfig>::namespaced(client.clone(), NS);
    let workload_secrets =
        Api::<Secret>::namespaced(workload.client().await.unwrap(), "kube-system");
    for name in ["prod-cp-0", "prod-md-0"] {
        let token = configs
            .get(name)
            .await
            .unwrap()
            .spec
            .join_configuration
            .discovery
            .bootstrap_token
            .token;
        let token = token.unwrap_or_else(|| panic!("{name} records its join token"));
        let id = token.split('.').next().unwrap();
        assert!(user_data(&client, name).await.unwrap().contains(&token));
        assert!(
            workload_secrets
                .get_opt(&format!("bootstrap-token-{id}"))
                .await
                .unwrap()
                .is_some(),
            "token of {name} in the workload cluster"
        );
    }
    eventually("the init lock is released once initialized", || async {
        Api::<ConfigMap>::namespaced(client.clone(), NS)
            .get_opt("prod-lock")
            .await
            .unwrap()
            .is_none()
    })
    .await;

    // The broken spec is reported naming the field, and its init lock handed back.
    eventually("the broken spec is reported", || async {
        condition_reason(&client, "broken-cp-0", "DataSecretAvailable")
            .await
            .as_deref()
            == Some("InvalidSpec")
    })
    .await;
    let config = configs.get("broken-cp-0").await.unwrap();
    let condition = config
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "DataSecretAvailable")
        .unwrap();
    assert!(
        condition.message.contains("spec.files[0]"),
        "{}",
        condition.message
    );
    assert!(user_data(&client, "broken-cp-0").await.is_none());
    eventually("a warning event says the spec is invalid", || async {
        events_about(&client, "broken-cp-0")
            .await
            .contains(&("Warning".into(), "InvalidSpec".into()))
    })
    .await;
    // The lock goes back after the failure is reported (a restart in between renders and hands it
    // back again).
    eventually("the broken cluster's init lock is handed back", || async {
        Api::<ConfigMap>::namespaced(client.clone(), NS)
            .get_opt("broken-lock")
            .await
            .unwrap()
            .is_none()
    })
    .await;

    // The templates: one rendered without a control plane, one refused naming the file and the kind.
    eventually("the template without a control plane renders", || async {
        user_data(&client, "prod-md-1").await.is_some()
    })
    .await;
    let templated = user_data(&client, "prod-md-1").await.unwrap();
    assert!(
        templated.contains("  - path: /etc/kubeadm-version\n    content: none\n"),
        "{templated}"
    );
    eventually(
        "the template of a foreign control plane is refused",
        || async {
            condition_reason(&client, "foreign-md-0", "DataSecretAvailable")
                .await
                .as_deref()
                == Some("InvalidSpec")
        },
    )
    .await;
    let refused = configs.get("foreign-md-0").await.unwrap();
    let condition = refused
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "DataSecretAvailable")
        .unwrap();
    assert!(
        condition.message.contains("spec.files[0].contentFormat")
            && condition.message.contains("TalosControlPlane/foreign"),
        "{}",
        condition.message
    );
    // Refused before the certificates are looked up (they would be missing: CertificatesUnavailable).
    assert!(user_data(&client, "foreign-md-0").await.is_none());

    // The paused cluster was left alone the whole time.
    assert!(user_data(&client, "frozen-cp-0").await.is_none());
    assert!(configs.get("frozen-cp-0").await.unwrap().status.is_none());
    assert!(events_about(&client, "frozen-cp-0").await.is_empty());

    // One Machine at a time in a fresh cluster, to read the API writes each kind of Machine costs.
    // Its kubeconfig Secret is labelled as Cluster API labels it, so it is read from the copy.
    cluster(&client, "solo", false).await;
    let solo_kubeconfig: Secret = serde_json::from_value(json!({
        "metadata": { "name": "solo-kubeconfig", "namespace": NS, "labels": { "cluster.x-k8s.io/cluster-name": "solo" } },
        "stringData": { "value": kubeconfig },
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &solo_kubeconfig)
        .await
        .unwrap();
    let mut before = writes_settled().await;
    let mut per_machine = Vec::new();
    let mut secret_gets = Vec::new();
    for (name, control_plane) in [
        ("solo-cp-0", true),
        ("solo-cp-1", true),
        ("solo-md-0", false),
    ] {
        let gets_before = secret_gets_sent();
        machine_with_config(&client, "solo", name, control_plane).await;
        eventually(&format!("{name} gets its data"), || async {
            condition_reason(&client, name, "DataSecretAvailable")
                .await
                .as_deref()
                == Some("Available")
        })
        .await;
        let after = writes_settled().await;
        let writes = grown(&before, &after);
        println!(
            "API writes for {name}: {} {writes:?}",
            writes.values().sum::<u64>()
        );
        per_machine.push(writes);
        secret_gets.push((name, secret_gets_sent() - gets_before));
        before = after;
        if name == "solo-cp-0" {
            set_cluster_status(&client, "solo", json!({ "initialization": { "infrastructureProvisioned": true, "controlPlaneInitialized": true } })).await;
            before = writes_settled().await;
        }
    }
    for writes in &per_machine {
        assert!(writes.get("data_secret_apply") > Some(&0), "{writes:?}");
        assert!(writes.get("status_patch") > Some(&0), "{writes:?}");
    }
    println!("API writes in this test: {:?}", api_writes());
    // The first machine's reconciles look for certificates that do not exist yet (then generate them);
    // later ones find the certificates and the kubeconfig in the copy.
    println!("Secret reads per machine: {secret_gets:?}");
    for (name, gets) in &secret_gets[1..] {
        assert_eq!(*gets, 0, "{name} read no Secret live: {secret_gets:?}");
    }

    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(20), running)
        .await
        .expect("controller stops on shutdown")
        .unwrap();
}
