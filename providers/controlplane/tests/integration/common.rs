//! What the control-plane integration tests share: a management plane with our CRDs, a Cluster and a
//! KubeadmControlPlane, the core Cluster API stand-in, and waits on the control plane's status. The
//! workload cluster is the management apiserver itself: the tests hand the controller that server's CA as
//! the cluster CA, so the kubeconfig the controller issues works against it.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Resource, ResourceExt};
use kubeadm_api::cluster::v1beta2::{Cluster, Machine};
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_controlplane::controller::{self, Settings};
use kubeadm_runtime::Shutdown;
use serde_json::{Value, json};
use testenv::core_double::{CoreDouble, EtcdSim};
use testenv::{EtcdRelease, ManagementPlane};

pub const NS: &str = "default";
pub static EXTERNAL_ETCD: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
    json!({
        "endpoints": ["https://etcd.example:2379"],
        "caFile": "/etc/etcd/ca.crt", "certFile": "/etc/etcd/client.crt", "keyFile": "/etc/etcd/client.key",
    })
});
pub const CLUSTER: &str = "prod";
pub const KCP: &str = "prod-control-plane";
/// Bound on every wait; a converging control plane needs a few seconds per machine.
pub const CONVERGE: Duration = Duration::from_secs(120);

pub struct Env {
    pub plane: ManagementPlane,
    pub client: kube::Client,
    pub core: CoreDouble,
    pub tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Env {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

pub fn sim_resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "infrastructure.cluster.x-k8s.io",
        "v1beta2",
        kind,
    ))
}

pub async fn setup(replicas: i32, template: &str, start_controller: bool) -> Env {
    setup_with(replicas, template, start_controller, None).await
}

/// Stacked etcd on the control-plane machines: the stand-in starts a real etcd member of `release` per
/// node, with the CA the test gives the controller as `<cluster>-etcd`, and `extra_args` (e.g. a small
/// `--quota-backend-bytes`) on every member.
pub struct StackedEtcd {
    pub release: EtcdRelease,
    pub extra_args: Vec<String>,
}

/// Like [`setup`]; with `stacked_etcd`, the control plane runs etcd of that release on its machines.
pub async fn setup_with(
    replicas: i32,
    template: &str,
    start_controller: bool,
    stacked_etcd: Option<EtcdRelease>,
) -> Env {
    let etcd = stacked_etcd.map(|release| StackedEtcd {
        release,
        extra_args: Vec::new(),
    });
    setup_etcd(replicas, template, start_controller, etcd).await
}

/// Like [`setup_with`], with the whole stacked etcd description.
pub async fn setup_etcd(
    replicas: i32,
    template: &str,
    start_controller: bool,
    etcd: Option<StackedEtcd>,
) -> Env {
    let plane = ManagementPlane::start()
        .await
        .expect("management plane starts");
    let mut crds = kubeadm_api::crd::provider_crds();
    crds.extend(kubeadm_api::crd::core_crds());
    crds.extend(sim_infrastructure_crds());
    plane.install_crds(&crds).await.unwrap();
    setup_on(plane, replicas, template, start_controller, etcd).await
}

/// The CRDs of the simulated infrastructure provider's machine kinds.
pub fn sim_infrastructure_crds() -> Vec<CustomResourceDefinition> {
    let fixture = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/sim-infrastructure-crds.yaml"
    ))
    .unwrap();
    serde_saphyr::from_multiple::<CustomResourceDefinition>(&fixture).unwrap()
}

/// Like [`setup_etcd`] on a running management plane whose CRDs (ours, the core subset, the
/// simulated infrastructure) are installed.
pub async fn setup_on(
    plane: ManagementPlane,
    replicas: i32,
    template: &str,
    start_controller: bool,
    etcd: Option<StackedEtcd>,
) -> Env {
    let stacked_etcd = etcd.is_some();
    let client = plane.client().await.unwrap();

    // The workload cluster is this apiserver: its CA becomes the cluster CA.
    let ca = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{CLUSTER}-ca")),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        type_: Some("cluster.x-k8s.io/secret".into()),
        string_data: Some(
            [
                ("tls.crt".to_owned(), plane.apiserver().ca_pem().to_owned()),
                (
                    "tls.key".to_owned(),
                    plane.apiserver().ca_key_pem().to_owned(),
                ),
            ]
            .into(),
        ),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &ca)
        .await
        .unwrap();

    let etcd_sim = if let Some(etcd) = etcd {
        let ca = testenv::pki::Ca::new("etcd-ca").unwrap();
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(format!("{CLUSTER}-etcd")),
                namespace: Some(NS.into()),
                ..Default::default()
            },
            type_: Some("cluster.x-k8s.io/secret".into()),
            string_data: Some(
                [
                    ("tls.crt".to_owned(), ca.cert_pem().to_owned()),
                    ("tls.key".to_owned(), ca.key_pem().to_owned()),
                ]
                .into(),
            ),
            ..Default::default()
        };
        Api::<Secret>::namespaced(client.clone(), NS)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        Some(EtcdSim {
            dir: plane.dir().join("workload-etcd"),
            ca: (ca.cert_pem().to_owned(), ca.key_pem().to_owned()),
            extra_args: etcd.extra_args,
            release: etcd.release,
        })
    } else {
        None
    };

    sim_template(&client, template).await;
    let url = plane
        .apiserver()
        .url()
        .trim_start_matches("https://")
        .to_owned();
    let (host, port) = url.rsplit_once(':').unwrap();
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": { "name": CLUSTER, "namespace": NS },
        "spec": {
            "controlPlaneEndpoint": { "host": host, "port": port.parse::<i32>().unwrap() },
            "controlPlaneRef": { "apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": KCP },
        },
    }))
    .unwrap();
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), NS);
    let cluster = clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    clusters
        .patch_status(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(
                &json!({ "status": { "initialization": { "infrastructureProvisioned": true } } }),
            ),
        )
        .await
        .unwrap();
    let mut cluster_configuration =
        json!({ "apiServer": { "extraArgs": [{ "name": "profiling", "value": "false" }] } });
    if !stacked_etcd {
        // etcd outside the machines: these tests are about machines; the etcd lifecycle has its own.
        cluster_configuration["etcd"] = json!({ "external": EXTERNAL_ETCD.clone() });
    }
    let kcp: KubeadmControlPlane = serde_json::from_value(json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
        "metadata": {
            "name": KCP, "namespace": NS,
            "labels": { "cluster.x-k8s.io/cluster-name": CLUSTER },
            "ownerReferences": [{ "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": CLUSTER, "uid": cluster.uid().unwrap() }],
        },
        "spec": {
            "replicas": replicas,
            "version": "v1.33.1",
            "machineTemplate": {
                "metadata": { "labels": { "team": "platform" } },
                "spec": { "infrastructureRef": { "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachineTemplate", "name": template } },
            },
            "kubeadmConfigSpec": {
                "clusterConfiguration": cluster_configuration,
                "initConfiguration": { "nodeRegistration": { "name": "{{ ds.meta_data.local_hostname }}" } },
                "joinConfiguration": { "nodeRegistration": { "name": "{{ ds.meta_data.local_hostname }}" } },
            },
        },
    }))
    .unwrap();
    Api::<KubeadmControlPlane>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &kcp)
        .await
        .unwrap();

    let core = CoreDouble::start_with(client.clone(), NS, Duration::from_millis(200), etcd_sim);
    let mut tasks = Vec::new();
    if start_controller {
        tasks.push(start(&client));
    }
    Env {
        plane,
        client,
        core,
        tasks,
    }
}

pub fn start(client: &kube::Client) -> tokio::task::JoinHandle<()> {
    start_with(
        client,
        Settings {
            leftover_grace: Duration::from_secs(1),
            ..test_settings()
        },
    )
}

/// The controller's defaults, except that a settled control plane's etcd is checked every 30 s (not
/// every 5 minutes): the tests that make an etcd-only change (an alarm, a certificate) on a settled
/// control plane wait for it within their timeout.
pub fn test_settings() -> Settings {
    Settings {
        etcd_health_period: Duration::from_secs(30),
        ..Settings::default()
    }
}

/// Starts the controller. The test apiserver has no kubelet to port-forward to, so etcd is always reached
/// directly at the client URLs of the simulated members.
pub fn start_with(client: &kube::Client, settings: Settings) -> tokio::task::JoinHandle<()> {
    let settings = Settings {
        etcd_access: kubeadm_controlplane::etcd::EtcdAccess::Direct,
        ..settings
    };
    let (_trigger, shutdown) = Shutdown::channel();
    let client = client.clone();
    tokio::spawn(async move {
        let _keep = _trigger;
        controller::run(client, settings, shutdown).await;
    })
}

pub async fn sim_template(client: &kube::Client, name: &str) {
    let resource = sim_resource("SimMachineTemplate");
    let mut template = DynamicObject::new(name, &resource).within(NS);
    template.data = json!({ "spec": { "template": {
        "metadata": { "labels": { "sim.example/flavor": "small" } },
        "spec": { "image": format!("node-{name}") },
    } } });
    Api::<DynamicObject>::namespaced_with(client.clone(), NS, &resource)
        .create(&PostParams::default(), &template)
        .await
        .unwrap();
}

pub async fn kcp(client: &kube::Client) -> KubeadmControlPlane {
    Api::<KubeadmControlPlane>::namespaced(client.clone(), NS)
        .get(KCP)
        .await
        .unwrap()
}

pub async fn machines(client: &kube::Client) -> Vec<Machine> {
    let mut items = Api::<Machine>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    items.sort_by_key(|m| m.creation_timestamp().map(|t| t.0));
    items
}

pub fn condition<'a>(
    kcp: &'a KubeadmControlPlane,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    kcp.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// Waits until the control plane has `replicas` machines, all up to date with a Node and none deleting,
/// and the status says so (initialized too, once there is a machine).
pub async fn wait_converged(env: &Env, replicas: usize, what: &str) {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let kcp = kcp(&env.client).await;
        let status = kcp.status.clone().unwrap_or_default();
        let machines = machines(&env.client).await;
        let settled = machines.len() == replicas
            && machines
                .iter()
                .all(|m| m.meta().deletion_timestamp.is_none())
            && status.replicas == Some(replicas as i32)
            && status.up_to_date_replicas == Some(replicas as i32)
            && status.ready_replicas == Some(replicas as i32)
            && condition(&kcp, "MachinesUpToDate").is_some_and(|c| c.status == "True")
            // A Machine can be Ready before `kubeadm init` has uploaded its configuration.
            && (replicas == 0
                || status
                    .initialization
                    .as_ref()
                    .and_then(|i| i.control_plane_initialized)
                    == Some(true));
        if settled {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not converged: status {status:?}, machines {:?}",
            machines
                .iter()
                .map(ResourceExt::name_any)
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

pub async fn patch_kcp(client: &kube::Client, spec: Value) {
    Api::<KubeadmControlPlane>::namespaced(client.clone(), NS)
        .patch(
            KCP,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "spec": spec })),
        )
        .await
        .unwrap();
}

/// Waits until the controller has reconciled the control plane's current spec (its status carries the
/// spec's generation), so that no reconcile still running on the previous spec acts afterwards.
pub async fn wait_observed(client: &kube::Client) {
    let api = Api::<KubeadmControlPlane>::namespaced(client.clone(), NS);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let kcp = api.get(KCP).await.unwrap();
        let observed = kcp.status.as_ref().and_then(|s| s.observed_generation);
        if observed.is_some() && observed == kcp.metadata.generation {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "generation {:?} not observed (status has {observed:?})",
            kcp.metadata.generation
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

pub async fn cloned_from(env: &Env) -> Vec<String> {
    let resource = sim_resource("SimMachine");
    let mut names: Vec<String> =
        Api::<DynamicObject>::namespaced_with(env.client.clone(), NS, &resource)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|o| o.meta().deletion_timestamp.is_none())
            .filter_map(|o| {
                o.annotations()
                    .get("cluster.x-k8s.io/cloned-from-name")
                    .cloned()
            })
            .collect();
    names.sort();
    names
}

/// Builds (or finds up to date) `bootstrap-manager` in the target folder `controlplane_manager` was
/// built into, with the same profile: cargo builds only the binaries of the package under test.
pub fn bootstrap_manager(controlplane_manager: &str) -> std::path::PathBuf {
    let built = std::path::Path::new(controlplane_manager);
    let profile_dir = built.parent().expect("a binary lives in a folder");
    let target_dir = profile_dir
        .parent()
        .expect("a profile folder lives in a target folder");
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev",
        Some(other) => other,
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .args([
            "build",
            "-q",
            "-p",
            "kubeadm-bootstrap",
            "--bin",
            "bootstrap-manager",
        ])
        .arg("--profile")
        .arg(profile)
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("cargo runs");
    assert!(
        status.success(),
        "`cargo build -p kubeadm-bootstrap` failed ({status})"
    );
    profile_dir.join("bootstrap-manager")
}
