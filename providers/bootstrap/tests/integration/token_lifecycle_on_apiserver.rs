//! What the KubeadmConfig controller does with a join token after the bootstrap data is written, against
//! real apiservers (management, and a second one standing in for the workload cluster): a worker
//! Machine's token is extended until the Machine has a Node; a MachinePool's token is extended while
//! the pool waits for nodes and rotated (new token, new bootstrap data) once it would expire.
//!
//! A short `--bootstrap-token-ttl` (6 s, checked every 2 s) makes each of these visible in seconds.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use kubeadm_api::bootstrap::v1beta2::KubeadmConfig;
use kubeadm_api::cluster::v1beta2::{Cluster, Machine, MachinePool};
use kubeadm_bootstrap::controller::{self, Settings};
use kubeadm_runtime::Shutdown;
use serde_json::{Value, json};
use testenv::ManagementPlane;

const NS: &str = "default";
const TTL: Duration = Duration::from_secs(6);

/// A management plane with an initialized Cluster `prod` whose kubeconfig Secret points at a second
/// apiserver (the workload cluster), and the controller running with [`TTL`].
struct Setup {
    management: ManagementPlane,
    workload: ManagementPlane,
    client: kube::Client,
    stop: tokio::sync::watch::Sender<bool>,
    running: tokio::task::JoinHandle<()>,
}

impl Setup {
    async fn start() -> Self {
        let management = ManagementPlane::start().await.unwrap();
        let workload = ManagementPlane::start().await.unwrap();
        let mut crds = kubeadm_api::crd::bootstrap_crds();
        crds.extend(kubeadm_api::crd::core_crds());
        management.install_crds(&crds).await.unwrap();
        let client = management.client().await.unwrap();

        create::<Cluster>(
            &client,
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": { "name": "prod", "namespace": NS },
                "spec": { "controlPlaneEndpoint": { "host": "10.0.0.10", "port": 6443 } },
            }),
        )
        .await;
        Api::<Cluster>::namespaced(client.clone(), NS)
            .patch_status(
                "prod",
                &PatchParams::default(),
                &Patch::Merge(&json!({ "status": { "initialization": {
                    "infrastructureProvisioned": true, "controlPlaneInitialized": true } } })),
            )
            .await
            .unwrap();
        let kubeconfig = std::fs::read_to_string(workload.kubeconfig_path()).unwrap();
        let secret: Secret = serde_json::from_value(json!({
            "metadata": { "name": "prod-kubeconfig", "namespace": NS },
            "stringData": { "value": kubeconfig },
        }))
        .unwrap();
        Api::<Secret>::namespaced(client.clone(), NS)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();

        let (stop, shutdown) = Shutdown::channel();
        let settings = Settings {
            token_ttl: TTL,
            ..Settings::default()
        };
        let running = tokio::spawn(controller::run(client.clone(), settings, shutdown));
        Setup {
            management,
            workload,
            client,
            stop,
            running,
        }
    }

    async fn stop(self) {
        self.stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(20), self.running)
            .await
            .expect("controller stops on shutdown")
            .unwrap();
        drop((self.management, self.workload));
    }

    async fn workload_secrets(&self) -> Api<Secret> {
        Api::namespaced(self.workload.client().await.unwrap(), "kube-system")
    }

    /// The join token recorded in the KubeadmConfig `name`.
    async fn token(&self, name: &str) -> Option<String> {
        Api::<KubeadmConfig>::namespaced(self.client.clone(), NS)
            .get(name)
            .await
            .unwrap()
            .spec
            .join_configuration
            .discovery
            .bootstrap_token
            .token
    }

    /// The `expiration` of the token's Secret in the workload cluster, `None` if there is no Secret.
    async fn expiration(&self, token: &str) -> Option<String> {
        let id = token.split('.').next().unwrap();
        let secret = self
            .workload_secrets()
            .await
            .get_opt(&format!("bootstrap-token-{id}"))
            .await
            .unwrap()?;
        let value = secret.data.unwrap().remove("expiration").unwrap();
        Some(String::from_utf8(value.0).unwrap())
    }

    async fn user_data(&self, name: &str) -> Option<String> {
        let secret = Api::<Secret>::namespaced(self.client.clone(), NS)
            .get_opt(name)
            .await
            .unwrap()?;
        let value = secret.data?.remove("value")?;
        Some(String::from_utf8(value.0).unwrap())
    }

    /// Reasons of the Events about the KubeadmConfig `name`.
    async fn event_reasons(&self, name: &str) -> Vec<String> {
        Api::<Event>::namespaced(self.client.clone(), NS)
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.regarding
                    .as_ref()
                    .is_some_and(|r| r.name.as_deref() == Some(name))
            })
            .filter_map(|e| e.reason)
            .collect()
    }
}

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

/// `openssl x509 -noout -text` of a PEM certificate.
fn openssl_text(pem: &[u8]) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-text"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("openssl runs");
    child.stdin.take().unwrap().write_all(pem).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test]
async fn worker_token_is_extended_until_the_machine_has_a_node() {
    let setup = Setup::start().await;
    let client = setup.client.clone();
    let machine: Machine = create(
        &client,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": { "name": "prod-md-0", "namespace": NS, "labels": { "cluster.x-k8s.io/cluster-name": "prod" } },
            "spec": {
                "clusterName": "prod",
                "version": "v1.30.4",
                "bootstrap": { "configRef": { "apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": "prod-md-0" } },
                "infrastructureRef": { "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachine", "name": "prod-md-0" },
            },
        }),
    )
    .await;
    create::<KubeadmConfig>(
        &client,
        json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
            "metadata": {
                "name": "prod-md-0", "namespace": NS, "labels": { "cluster.x-k8s.io/cluster-name": "prod" },
                "ownerReferences": [{ "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "prod-md-0", "uid": machine.uid().unwrap() }],
            },
            "spec": {
                // The first config of a Cluster without controlPlaneRef has the certificates generated.
                "clusterConfiguration": { "encryptionAlgorithm": "RSA-2048" },
                "joinConfiguration": { "nodeRegistration": { "name": "{{ ds.meta_data.local_hostname }}" } },
            },
        }),
    )
    .await;

    eventually("the worker gets join data", || async {
        setup.user_data("prod-md-0").await.is_some()
    })
    .await;
    let token = setup.token("prod-md-0").await.expect("token recorded");
    assert!(setup.user_data("prod-md-0").await.unwrap().contains(&token));
    let ca = Api::<Secret>::namespaced(client.clone(), NS)
        .get("prod-ca")
        .await
        .unwrap();
    let ca_text = openssl_text(&ca.data.unwrap()["tls.crt"].0);
    assert!(
        ca_text.contains("rsaEncryption") && ca_text.contains("2048 bit"),
        "encryptionAlgorithm honoured: {ca_text}"
    );
    let created = setup
        .expiration(&token)
        .await
        .expect("token in the workload cluster");
    eventually("the controller extends the unused token", || async {
        setup.expiration(&token).await.as_ref() > Some(&created)
    })
    .await;

    // The node joined: nothing consumes the token any more, so it is left to expire.
    Api::<Machine>::namespaced(client.clone(), NS)
        .patch_status(
            "prod-md-0",
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": { "nodeRef": { "name": "prod-md-0" } } })),
        )
        .await
        .unwrap();
    // Long enough for the watch event; a refresh already in flight lands within it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let last = setup.expiration(&token).await;
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(
        setup.expiration(&token).await,
        last,
        "no refresh once the Machine has a Node"
    );
    assert_eq!(setup.token("prod-md-0").await, Some(token), "never rotated");

    // A spec the renderer refuses: a condition and a Warning Event name the key and the rule, and no
    // data secret is written.
    let machine: Machine = create(
        &client,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": { "name": "prod-md-1", "namespace": NS, "labels": { "cluster.x-k8s.io/cluster-name": "prod" } },
            "spec": {
                "clusterName": "prod",
                "version": "v1.30.4",
                "bootstrap": { "configRef": { "apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": "prod-md-1" } },
                "infrastructureRef": { "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachine", "name": "prod-md-1" },
            },
        }),
    )
    .await;
    create::<KubeadmConfig>(
        &client,
        json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
            "metadata": {
                "name": "prod-md-1", "namespace": NS, "labels": { "cluster.x-k8s.io/cluster-name": "prod" },
                "ownerReferences": [{ "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "prod-md-1", "uid": machine.uid().unwrap() }],
            },
            "spec": {
                "format": "ignition",
                "ignition": { "containerLinuxConfig": { "additionalConfig": "storage:\n  files:\n  - path: /etc/x\n    mode: 9999\n" } },
            },
        }),
    )
    .await;
    let configs = Api::<KubeadmConfig>::namespaced(client.clone(), NS);
    eventually("the refused spec is reported", || async {
        let config = configs.get("prod-md-1").await.unwrap();
        config.status.is_some_and(|s| {
            s.conditions.iter().any(|c| {
                c.type_ == "DataSecretAvailable"
                    && c.status == "False"
                    && c.reason == "InvalidSpec"
                    && c.message.contains(
                        "spec.ignition.containerLinuxConfig.additionalConfig: storage.files[0].mode: 9999 is not a file mode",
                    )
            })
        })
    })
    .await;
    eventually("a Warning Event says so", || async {
        setup
            .event_reasons("prod-md-1")
            .await
            .contains(&"InvalidSpec".to_owned())
    })
    .await;
    assert!(
        setup.user_data("prod-md-1").await.is_none(),
        "no data secret"
    );
    setup.stop().await;
}

#[tokio::test]
async fn machine_pool_config_without_spec_gets_worker_data_and_its_token_rotated() {
    let setup = Setup::start().await;
    let client = setup.client.clone();
    let pool: MachinePool = create(
        &client,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
            "metadata": { "name": "prod-mp-0", "namespace": NS, "labels": { "cluster.x-k8s.io/cluster-name": "prod" } },
            "spec": {
                "clusterName": "prod",
                "replicas": 2,
                "template": { "spec": {
                    "clusterName": "prod",
                    "version": "v1.33.1",
                    "bootstrap": { "configRef": { "apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": "prod-mp-0" } },
                    "infrastructureRef": { "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachinePool", "name": "prod-mp-0" },
                } },
            },
        }),
    )
    .await;
    // Written as Go clients write an empty spec: not at all.
    let configs = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::erase::<KubeadmConfig>(&()),
    );
    let config: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
        "metadata": {
            "name": "prod-mp-0", "namespace": NS, "labels": { "cluster.x-k8s.io/cluster-name": "prod" },
            "ownerReferences": [{ "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool", "name": "prod-mp-0", "uid": pool.uid().unwrap() }],
        },
    }))
    .unwrap();
    let stored = configs
        .create(&PostParams::default(), &config)
        .await
        .unwrap();
    assert_eq!(
        stored.data.get("spec"),
        Some(&json!({})),
        "the CRD defaults the spec"
    );

    eventually("the pool gets worker join data", || async {
        setup.user_data("prod-mp-0").await.is_some()
    })
    .await;
    let data = setup.user_data("prod-mp-0").await.unwrap();
    assert!(
        data.contains("kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml"),
        "{data}"
    );
    assert!(
        data.contains("apiVersion: kubeadm.k8s.io/v1beta4"),
        "{data}"
    );
    let first = setup.token("prod-mp-0").await.expect("token recorded");
    assert!(data.contains(&first), "{data}");

    // No node yet: the token is extended like a Machine's.
    let created = setup
        .expiration(&first)
        .await
        .expect("token in the workload cluster");
    eventually(
        "the pool's token is extended while nodes are missing",
        || async { setup.expiration(&first).await.as_ref() > Some(&created) },
    )
    .await;

    // The token disappears while instances still have to join: a new one replaces it.
    setup
        .workload_secrets()
        .await
        .delete(
            &format!("bootstrap-token-{}", first.split('.').next().unwrap()),
            &DeleteParams::default(),
        )
        .await
        .unwrap();
    eventually("a lost token is replaced", || async {
        setup.token("prod-mp-0").await.is_some_and(|t| t != first)
    })
    .await;
    let second = setup.token("prod-mp-0").await.unwrap();
    eventually("the data holds the new token", || async {
        setup
            .user_data("prod-mp-0")
            .await
            .unwrap()
            .contains(&second)
    })
    .await;
    assert!(setup.expiration(&second).await.is_some());

    // Every replica has a Node: no more extensions; the token is rotated once it would expire.
    Api::<MachinePool>::namespaced(client.clone(), NS)
        .patch_status(
            "prod-mp-0",
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": { "replicas": 2, "nodeRefs": [
                { "kind": "Node", "name": "prod-mp-0-a" }, { "kind": "Node", "name": "prod-mp-0-b" } ] } })),
        )
        .await
        .unwrap();
    // Rotations repeat every few seconds with this TTL: compare the token and the data read together.
    eventually(
        "the complete pool's token is rotated into its data",
        || async {
            let Some(current) = setup.token("prod-mp-0").await else {
                return false;
            };
            current != first
                && current != second
                && setup
                    .user_data("prod-mp-0")
                    .await
                    .unwrap()
                    .contains(&current)
                && setup.expiration(&current).await.is_some()
        },
    )
    .await;
    assert!(
        setup.expiration(&second).await.is_some(),
        "the old token is left to expire, not deleted (an instance may be joining with it)"
    );
    eventually("rotations are announced", || async {
        setup
            .event_reasons("prod-mp-0")
            .await
            .iter()
            .filter(|r| *r == "BootstrapTokenRotated")
            .count()
            >= 1
    })
    .await;
    setup.stop().await;
}
