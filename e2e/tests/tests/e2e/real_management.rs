//! The shipped artifact as users run it (`make e2e-real`): a management cluster of real nodes into which
//! `clusterctl init` installs Cluster API's core and our bootstrap and control-plane providers, every
//! manager a pod of an image in the nodes' containerd: ours as `make image` built it (its OCI archive),
//! Cluster API's core manager packed from its Go build under the name its release's components give it.
//! No registry is reachable here, so each image is imported into every node's containerd, as into nodes
//! that cannot pull. That management cluster then creates a workload cluster of simulated machines, is
//! upgraded to our next release under it, has a node rebooted, and hands the workload cluster to a
//! second management cluster of real nodes with `clusterctl move`. cert-manager is the stand-in of
//! `testenv::clusterctl` (its kinds, and the work of its issuer and CA injector done by the test): the Go
//! module proxy serves cert-manager's library module, not the modules of its binaries.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use e2e_tests::env::{
    Env, NS, REAL_NODES_TEMPLATE, apply_yaml, render_sim_template, render_template,
};
use e2e_tests::etcd_watch::EtcdWatch;
use e2e_tests::installed::{init_args, next_version, ours_next};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Resource, ResourceExt};
use kubeadm_api::bootstrap::v1beta2::KubeadmConfig;
use kubeadm_api::cluster::v1beta2::{Cluster, Machine};
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use sim::controller::{Core, Sim, SimOptions};
use testenv::capi::{ClusterApi, Part};
use testenv::clusterctl::{self, Repository, RepositoryProvider};
use xtask::components::Provider;

use crate::real_nodes::{left_nothing_behind, wait_workers};

const CLUSTER: &str = "mgmt";
/// The management cluster `clusterctl move` hands the workload cluster to.
const TARGET: &str = "target";
/// The cluster the management clusters manage: the quickstart's shape on simulated machines.
const WORKLOAD: &str = "work";
const WORKLOAD_CONTROL_PLANES: i32 = 3;
const WORKLOAD_WORKERS: usize = 2;
/// Where `clusterctl init` puts each manager.
const CORE_NAMESPACE: &str = "capi-system";
const OUR_NAMESPACES: [&str; 2] = [
    "capi-kubeadm-bootstrap-system",
    "capi-kubeadm-control-plane-system",
];
/// Our managers' health endpoint, which serves `/metrics` too.
const HEALTH_PORT: u16 = 9440;

/// The OCI archive of our image built as release `version` (`v0.1.0`), as `make e2e-real` writes it
/// first (`make image RELEASE_VERSION=… OCI_ARCHIVE=…`) into `target/images`, or into the folder
/// `KUBEADM_PROVIDERS_IMAGES` names.
fn our_image_archive(version: &str) -> PathBuf {
    let folder = std::env::var_os("KUBEADM_PROVIDERS_IMAGES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/images"));
    let path = folder.join(format!("kubeadm-providers-{version}.tar"));
    assert!(
        path.is_file(),
        "{} is missing: `make image RELEASE_VERSION={} OCI_ARCHIVE={0}` builds it (`make e2e-real` does)",
        path.display(),
        version.trim_start_matches('v'),
    );
    path
}

/// The image of the first container of the first Deployment in `components`.
fn deployment_image(components: &str) -> String {
    components
        .split("\n---")
        .filter(|doc| doc.contains("\nkind: Deployment"))
        .flat_map(|doc| doc.lines())
        .find_map(|line| {
            let line = line.trim_start().trim_start_matches("- ");
            line.strip_prefix("image: ").map(str::to_owned)
        })
        .expect("the components have a Deployment with an image")
}

/// Imports the image archive `tarball` into the containerd of the real node whose systemd is `init`,
/// streamed to `ctr` on its standard input; returns what `ctr` printed (the image's name).
fn import(init: u32, tarball: &Path) -> String {
    let file = std::fs::File::open(tarball).unwrap();
    let out = Command::new("nsenter")
        .args(["--target", &init.to_string(), "--all", "--"])
        .args(["ctr", "--namespace", "k8s.io", "images", "import", "-"])
        .stdin(file)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "import {} into the node: {text}",
        tarball.display()
    );
    text
}

/// The images each node's containerd holds by name (`ctr images list -q`).
fn images_on(init: u32) -> Vec<String> {
    let out = sim::nspawn::exec_in(
        init,
        &["ctr", "--namespace", "k8s.io", "images", "list", "-q"],
    )
    .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// What the pods of `namespace` are doing, for a failure's message.
async fn pods_of(client: &kube::Client, namespace: &str) -> String {
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    pods.iter()
        .map(|p| {
            format!(
                "{namespace}/{}: {:?}",
                p.name_any(),
                p.status.as_ref().map(|s| (
                    s.phase.clone(),
                    s.container_statuses
                        .iter()
                        .flatten()
                        .map(|c| (c.ready, c.restart_count, c.state.clone()))
                        .collect::<Vec<_>>()
                ))
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The pods of `namespace` with the end of their logs, and its Services' endpoints: what a failed call to
/// a webhook Service needs explained.
async fn what_serves(client: &kube::Client, namespace: &str) -> String {
    let mut out = pods_of(client, namespace).await;
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    for pod in pods
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let logs = pods
            .logs(
                &pod.name_any(),
                &kube::api::LogParams {
                    tail_lines: Some(40),
                    ..Default::default()
                },
            )
            .await
            .unwrap_or_else(|e| e.to_string());
        out.push_str(&format!("\nlogs of {}:\n{logs}", pod.name_any()));
    }
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    for slice in slices {
        out.push_str(&format!(
            "\nEndpointSlice {}: ports {:?}, endpoints {:?}",
            slice.name_any(),
            slice.ports,
            slice
                .endpoints
                .iter()
                .map(|e| (&e.addresses, e.conditions.as_ref().and_then(|c| c.ready)))
                .collect::<Vec<_>>()
        ));
    }
    out
}

/// Every container of every pod of `namespace` is ready and never restarted.
async fn assert_running_without_restart(client: &kube::Client, namespace: &str) {
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let fine = !pods.is_empty()
        && pods.iter().all(|p| {
            let statuses = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref());
            statuses.is_some_and(|all| all.iter().all(|c| c.ready && c.restart_count == 0))
        });
    assert!(fine, "{}", what_serves(client, namespace).await);
}

/// What the management clusters are installed from: the images each node gets (ours, ours built as the
/// next release, Cluster API's core) and the clusterctl repository with the references to init.
struct Shipped {
    release: ClusterApi,
    archive: PathBuf,
    next_archive: PathBuf,
    core_image: String,
    core_tarball: PathBuf,
    our_image: String,
    next_image: String,
    repository: Repository,
    /// Core, ours, the simulated infrastructure: this release.
    references: Vec<String>,
    /// The same with our next release.
    next_references: Vec<String>,
}

impl Shipped {
    fn prepare(env: &Env, release: ClusterApi) -> Self {
        let core = RepositoryProvider::core(&release).unwrap();
        let core_image = deployment_image(&core.files[0].1);
        let core_tarball = testenv::images::tarballs(&[testenv::images::Image::of_binary(
            &core_image,
            release.binary(Part::Core.binary()),
            "/manager",
        )])
        .unwrap()
        .remove(0);
        let our_image =
            deployment_image(&xtask::components::components_yaml(Provider::ControlPlane));
        let our_image = our_image
            .split_once(":=")
            .map(|(_, default)| default.trim_end_matches('}').to_owned())
            .unwrap_or(our_image);
        let next_image = our_image.replace(
            &format!(":{}", xtask::components::version()),
            &format!(":{}", next_version()),
        );
        let current = vec![
            core,
            e2e_tests::installed::ours(Provider::Bootstrap),
            e2e_tests::installed::ours(Provider::ControlPlane),
            e2e_tests::installed::sim(),
        ];
        let references: Vec<String> = current.iter().map(RepositoryProvider::reference).collect();
        let next: Vec<RepositoryProvider> = Provider::ALL.into_iter().map(ours_next).collect();
        let mut next_references = references.clone();
        next_references[1] = next[0].reference();
        next_references[2] = next[1].reference();
        let providers: Vec<RepositoryProvider> = current.into_iter().chain(next).collect();
        let repository =
            Repository::create(&env.plane.dir().join("clusterctl-real"), &providers, &[]).unwrap();
        Self {
            release,
            archive: our_image_archive(&xtask::components::version()),
            next_archive: our_image_archive(&next_version()),
            core_image,
            core_tarball,
            our_image,
            next_image,
            repository,
            references,
            next_references,
        }
    }

    /// Imports every image into the containerd of each node of `cluster`, as a node with a registry
    /// would pull them.
    async fn load_into(&self, env: &Env, cluster: &str) {
        for machine in env.machines(cluster).await {
            let look = env
                .sim
                .view()
                .real_node(NS, &machine.name_any())
                .unwrap_or_else(|| panic!("{} is not a running real node", machine.name_any()));
            import(look.init_pid, &self.core_tarball);
            import(look.init_pid, &self.archive);
            import(look.init_pid, &self.next_archive);
            let held = images_on(look.init_pid);
            for image in [&self.core_image, &self.our_image, &self.next_image] {
                assert!(
                    held.contains(image),
                    "{}: {image} not among {held:?}",
                    machine.name_any()
                );
            }
        }
    }

    /// `clusterctl init` with `references` against the management cluster `cluster`, as a user runs it
    /// with its kubeconfig, after cert-manager's stand-in kinds; returns once every manager's Deployment
    /// is available (their serving certificates issued by the stand-in, the kubelet probing their
    /// health endpoints through the pod network): a client of it and its kubeconfig file.
    async fn init(
        &self,
        env: &Env,
        cluster: &str,
        references: &[String],
    ) -> (kube::Client, PathBuf) {
        let kubeconfig = e2e_tests::api_probe::workload_kubeconfig(&env.client, NS, cluster)
            .await
            .unwrap();
        let path = env.plane.dir().join(format!("{cluster}.kubeconfig"));
        std::fs::write(&path, &kubeconfig).unwrap();
        let client = testenv::apiserver::client_from_kubeconfig(&kubeconfig)
            .await
            .unwrap();
        clusterctl::install_cert_manager_crds(&client)
            .await
            .unwrap();
        let text = self
            .repository
            .run_against(&self.release, &path, &init_args(references))
            .unwrap_or_else(|e| panic!("{e}"));
        println!("clusterctl init of {cluster}:\n{text}");
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            clusterctl::issue_certificates(&client).await.unwrap();
            let mut all = true;
            for namespace in std::iter::once(CORE_NAMESPACE).chain(OUR_NAMESPACES) {
                all &= available(&client, namespace).await;
            }
            if all {
                return (client, path);
            }
            if Instant::now() > deadline {
                let mut pods = String::new();
                for namespace in std::iter::once(CORE_NAMESPACE).chain(OUR_NAMESPACES) {
                    pods.push_str(&pods_of(&client, namespace).await);
                    pods.push('\n');
                }
                panic!(
                    "{cluster}: the managers' Deployments are not available after 300 s:\n{pods}"
                );
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}

/// The one pod of `namespace` holds its manager's Lease: the identity is the pod's hostname (its name)
/// and a random suffix.
async fn assert_leads(client: &kube::Client, namespace: &str) {
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let leases = Api::<Lease>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let holders: Vec<String> = leases
        .iter()
        .filter_map(|l| l.spec.as_ref()?.holder_identity.clone())
        .collect();
    assert!(
        pods.len() == 1
            && holders
                .iter()
                .any(|h| h.starts_with(&format!("{}_", pods[0].name_any()))),
        "{namespace}: not one pod holding the Lease: {holders:?}\n{}",
        pods_of(client, namespace).await
    );
}

/// The one pod of `namespace` that is not being deleted (waiting for it while none is), and its
/// containers' restarts.
async fn the_pod(client: &kube::Client, namespace: &str) -> (Pod, i32) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let pods: Vec<Pod> = Api::<Pod>::namespaced(client.clone(), namespace)
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        if let [pod] = pods.as_slice() {
            let restarts = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map_or(0, |all| all.iter().map(|c| c.restart_count).sum());
            return (pod.clone(), restarts);
        }
        assert!(
            Instant::now() < deadline,
            "{namespace}: {} pods\n{}",
            pods.len(),
            pods_of(client, namespace).await
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Each of our managers' pods runs the build of release `version` (`v0.2.0`): the binary's own first
/// log line, read through the kubelet, names the release it was built as (the image tag alone would not
/// tell a re-tagged build from a second one).
async fn assert_runs_release(client: &kube::Client, version: &str) {
    for namespace in OUR_NAMESPACES {
        let (pod, _) = the_pod(client, namespace).await;
        let logs = Api::<Pod>::namespaced(client.clone(), namespace)
            .logs(
                &pod.name_any(),
                &kube::api::LogParams {
                    limit_bytes: Some(64 * 1024),
                    ..Default::default()
                },
            )
            .await
            .unwrap_or_else(|e| panic!("logs of {}: {e}", pod.name_any()));
        // Plain text: a manager writes no terminal colors into a pod's log.
        assert!(
            !logs.contains('\u{1b}'),
            "{}: escape codes in the log\n{logs}",
            pod.name_any()
        );
        let started = logs
            .lines()
            .find(|line| line.contains(" starting ") && line.contains(" version=\""))
            .unwrap_or_else(|| panic!("{}: no \"starting\" line in\n{logs}", pod.name_any()));
        let built_as = started
            .split_once(" version=\"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(version, _)| version)
            .unwrap_or_default();
        assert_eq!(
            format!("v{built_as}"),
            version,
            "{} runs another build: {started}",
            pod.name_any()
        );
    }
}

/// After `what`: the workload cluster is ready with exactly the Machines (names and UIDs) of `before`,
/// and each of our managers' one pod holds its Lease.
async fn assert_unchanged(
    client: &kube::Client,
    before: &BTreeMap<String, Option<String>>,
    timeout: Duration,
    what: &str,
) {
    wait_workload_ready(client, WORKLOAD, timeout).await;
    assert_eq!(
        &machine_uids(client, WORKLOAD).await,
        before,
        "{what} created or deleted a Machine"
    );
    for namespace in OUR_NAMESPACES {
        assert_leads(client, namespace).await;
    }
}

/// The UIDs of `cluster`'s Machines by name.
async fn machine_uids(client: &kube::Client, cluster: &str) -> BTreeMap<String, Option<String>> {
    Api::<Machine>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(&format!("cluster.x-k8s.io/cluster-name={cluster}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|m| (m.name_any(), m.metadata.uid))
        .collect()
}

/// Waits until each of our managers runs as one ready pod of `image` and no other pod is left (the
/// stand-in issuing the serving certificates of re-created Certificates meanwhile).
async fn wait_running(client: &kube::Client, image: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        // The API server may be away a moment (a node rebooting): then this pass counts as not done.
        let issued = clusterctl::issue_certificates(client).await;
        let mut done = issued.is_ok();
        for namespace in OUR_NAMESPACES {
            let pods = Api::<Pod>::namespaced(client.clone(), namespace)
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            done &= pods.len() == 1
                && pods.iter().all(|p| {
                    p.spec.as_ref().map(|s| s.containers[0].image.as_deref()) == Some(Some(image))
                        && p.metadata.deletion_timestamp.is_none()
                        && p.status
                            .as_ref()
                            .and_then(|s| s.container_statuses.as_ref())
                            .is_some_and(|all| all.iter().all(|c| c.ready))
                });
        }
        if done {
            return;
        }
        if Instant::now() > deadline {
            let mut pods = String::new();
            for namespace in OUR_NAMESPACES {
                pods.push_str(&what_serves(client, namespace).await);
                pods.push('\n');
            }
            panic!("our managers do not run {image} after {timeout:?} ({issued:?}):\n{pods}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Waits until `cluster`'s control plane and workers on the management cluster `client` are ready: the
/// control plane's replicas ready and up to date, every Machine with its Node (the quickstart's shape).
async fn wait_workload_ready(client: &kube::Client, cluster: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let kcps = Api::<KubeadmControlPlane>::namespaced(client.clone(), NS);
    let machines = Api::<Machine>::namespaced(client.clone(), NS);
    let of_cluster =
        ListParams::default().labels(&format!("cluster.x-k8s.io/cluster-name={cluster}"));
    loop {
        let status = kcps
            .get_opt(&format!("{cluster}-control-plane"))
            .await
            .ok()
            .flatten()
            .and_then(|k| k.status);
        let listed = machines
            .list(&of_cluster)
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let control_plane_ready = status.as_ref().is_some_and(|s| {
            s.ready_replicas == Some(WORKLOAD_CONTROL_PLANES)
                && s.up_to_date_replicas == Some(WORKLOAD_CONTROL_PLANES)
        });
        let with_nodes = listed
            .iter()
            .filter(|m| m.status.as_ref().is_some_and(|s| s.node_ref.is_some()))
            .count();
        let all = WORKLOAD_CONTROL_PLANES as usize + WORKLOAD_WORKERS;
        if control_plane_ready && listed.len() == all && with_nodes == all {
            return;
        }
        if Instant::now() > deadline {
            let mut explained = format!(
                "{cluster} not ready after {timeout:?}: control plane {:?}; machines {:?}",
                status.map(|s| s.conditions),
                listed
                    .iter()
                    .map(|m| (
                        m.name_any(),
                        m.status.as_ref().map(|s| (&s.phase, &s.conditions))
                    ))
                    .collect::<Vec<_>>()
            );
            for namespace in OUR_NAMESPACES {
                explained.push('\n');
                explained.push_str(&what_serves(client, namespace).await);
            }
            panic!("{explained}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Waits until no Machine of `cluster` is left on the management cluster `client`.
async fn wait_workload_gone(client: &kube::Client, cluster: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let machines = Api::<Machine>::namespaced(client.clone(), NS);
    let of_cluster =
        ListParams::default().labels(&format!("cluster.x-k8s.io/cluster-name={cluster}"));
    loop {
        let left = machines.list(&of_cluster).await.map(|l| l.items.len());
        if left.as_ref().is_ok_and(|n| *n == 0) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{cluster}: {left:?} Machines left after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Whether every Deployment of `namespace` (there is at least one) has all its replicas available and
/// up to date.
async fn available(client: &kube::Client, namespace: &str) -> bool {
    let deployments = Api::<Deployment>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    !deployments.is_empty()
        && deployments.iter().all(|d| {
            let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            d.status.as_ref().is_some_and(|s| {
                s.available_replicas == Some(want) && s.updated_replicas == Some(want)
            })
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "minutes of real nodes and our release image; run by `make e2e-real`"]
async fn clusterctl_installs_our_image_as_pods_into_a_management_cluster_of_real_nodes() {
    sim::nspawn::clean_up_after_dead_processes();
    let sysctls_before = sim::nspawn::machine_sysctls_without_nodes();
    let release = ClusterApi::find().expect("Cluster API built by hack/install-testenv.sh");
    let mut env = Env::start(&[]).await;
    let started = Instant::now();
    // Two management clusters: the first installs, creates, upgrades and reboots; the second takes the
    // workload cluster over by `clusterctl move`.
    for (cluster, workers) in [(CLUSTER, "1"), (TARGET, "0")] {
        let vars = BTreeMap::from([
            ("CLUSTER_NAME", cluster.to_owned()),
            (
                "KUBERNETES_VERSION",
                testenv::binaries::ToolModule::KubernetesNode.version(),
            ),
            ("CONTROL_PLANE_MACHINE_COUNT", "1".to_owned()),
            ("WORKER_MACHINE_COUNT", workers.to_owned()),
        ]);
        env.apply(&render_template(REAL_NODES_TEMPLATE, &vars))
            .await;
    }
    for cluster in [CLUSTER, TARGET] {
        env.wait_control_plane(
            &format!("{cluster}-control-plane"),
            1,
            Duration::from_secs(900),
            "a management cluster's control plane",
        )
        .await;
    }
    wait_workers(&env, CLUSTER, 1).await;
    println!(
        "management clusters of 1 + 1 and 1 real nodes ready in {:.1?}",
        started.elapsed()
    );

    let step = Instant::now();
    let shipped = Shipped::prepare(&env, release);
    for cluster in [CLUSTER, TARGET] {
        shipped.load_into(&env, cluster).await;
    }
    println!(
        "{}, {} and {} imported into every node in {:.1?}",
        shipped.our_image,
        shipped.next_image,
        shipped.core_image,
        step.elapsed()
    );
    let (our_image, next_image) = (shipped.our_image.clone(), shipped.next_image.clone());
    let (release, repository) = (&shipped.release, &shipped.repository);

    let step = Instant::now();
    let (management, kubeconfig_path) = shipped.init(&env, CLUSTER, &shipped.references).await;
    println!(
        "clusterctl init, and every manager's Deployment available, in {:.1?}",
        step.elapsed()
    );

    for namespace in OUR_NAMESPACES {
        let pods = Api::<Pod>::namespaced(management.clone(), namespace)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        assert_eq!(pods.len(), 1, "{}", pods_of(&management, namespace).await);
        let pod = &pods[0];
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(
            spec.containers[0].image.as_deref(),
            Some(our_image.as_str())
        );
        assert!(
            spec.node_name.is_some(),
            "{} is not scheduled",
            pod.name_any()
        );
        assert_running_without_restart(&management, namespace).await;
        assert_leads(&management, namespace).await;
        // Metrics scraped once, through the API server's proxy to the pod.
        let metrics = management
            .request_text(
                http::Request::get(format!(
                    "/api/v1/namespaces/{namespace}/pods/{}:{HEALTH_PORT}/proxy/metrics",
                    pod.name_any()
                ))
                .body(Vec::new())
                .unwrap(),
            )
            .await
            .unwrap();
        assert!(
            metrics.contains("kubeadm_management_api_requests_total"),
            "{namespace}: {metrics}"
        );
    }

    // The webhooks answer through their Services: a refused object names our rule, and an object of
    // the older API version is converted by the pod.
    let configs = Api::<KubeadmConfig>::namespaced(management.clone(), "default");
    let refused: KubeadmConfig = serde_json::from_value(serde_json::json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmConfig",
        "metadata": {"name": "refused"},
        "spec": {"files": [{
            "path": "/etc/example",
            "content": "a",
            "contentFrom": {"secret": {"name": "example", "key": "value"}},
        }]},
    }))
    .unwrap();
    // A Service answers once kube-proxy has programmed its endpoint, shortly after the pod is ready:
    // until then the API server's call is refused at the Service's address.
    let asked = Instant::now();
    let err = loop {
        let err = configs
            .create(&PostParams::default(), &refused)
            .await
            .expect_err("our webhook refuses a file with both content and contentFrom");
        if !err.to_string().contains("connect: connection refused")
            || asked.elapsed() > Duration::from_secs(30)
        {
            break err;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    println!(
        "the validating webhook answered through its Service {:.1?} after the first call",
        asked.elapsed()
    );
    if !err
        .to_string()
        .contains("only one of content or contentFrom")
    {
        panic!(
            "{err}\n{}",
            what_serves(&management, OUR_NAMESPACES[0]).await
        );
    }
    let older = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "bootstrap.cluster.x-k8s.io",
        "v1beta1",
        "KubeadmConfig",
    ));
    let object: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
        "kind": "KubeadmConfig",
        "metadata": {"name": "older", "namespace": "default"},
        "spec": {"files": [{"path": "/etc/example", "content": "a"}]},
    }))
    .unwrap();
    Api::<DynamicObject>::namespaced_with(management.clone(), "default", &older)
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    let converted = configs.get("older").await.unwrap();
    assert_eq!(
        converted.spec.files.first().map(|f| f.path.as_str()),
        Some("/etc/example"),
        "{:?}",
        converted.meta()
    );
    configs
        .delete("older", &DeleteParams::default())
        .await
        .unwrap();
    println!(
        "image, clusterctl init, pods, leases, metrics and webhooks checked in {:.1?}",
        started.elapsed()
    );

    // A workload cluster from the management cluster, on simulated machines: their infrastructure
    // provider (the simulator) runs as a process against the management cluster; our managers and
    // Cluster API's core, as pods, reach its API server and etcd from the pod network.
    let step = Instant::now();
    let workload_sim = Sim::start(
        management.clone(),
        SimOptions {
            dir: env.plane.dir().join("sim-of-the-management-cluster"),
            namespace: Some(NS.into()),
            period: Duration::from_millis(300),
            core: Core::ClusterApi,
        },
    );
    let vars = BTreeMap::from([
        ("CLUSTER_NAME", WORKLOAD.to_owned()),
        (
            "CONTROL_PLANE_MACHINE_COUNT",
            WORKLOAD_CONTROL_PLANES.to_string(),
        ),
        ("WORKER_MACHINE_COUNT", WORKLOAD_WORKERS.to_string()),
    ]);
    apply_yaml(&management, &render_sim_template(&vars))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_workload_ready(&management, WORKLOAD, Duration::from_secs(600)).await;
    println!(
        "workload cluster of {WORKLOAD_CONTROL_PLANES} + {WORKLOAD_WORKERS} simulated machines ready from the management cluster in {:.1?}",
        step.elapsed()
    );
    // Its etcd is watched from here to the move's end: quorum in every sample, at most one learner.
    let watch = EtcdWatch::start(
        management.clone(),
        NS,
        WORKLOAD,
        workload_sim.view(),
        Duration::from_millis(250),
    );
    let voters: Vec<String> = Api::<Machine>::namespaced(management.clone(), NS)
        .list(&ListParams::default().labels(&format!(
            "cluster.x-k8s.io/cluster-name={WORKLOAD},cluster.x-k8s.io/control-plane"
        )))
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    watch
        .wait_voters(voters.clone(), Duration::from_secs(60), "created")
        .await;
    for namespace in OUR_NAMESPACES {
        assert_running_without_restart(&management, namespace).await;
    }
    assert_runs_release(&management, &xtask::components::version()).await;

    // `clusterctl upgrade apply` to the next release, under the running workload cluster.
    let step = Instant::now();
    let machines_before = machine_uids(&management, WORKLOAD).await;
    let next = next_version();
    let applied = repository
        .run_against(
            release,
            &kubeconfig_path,
            &[
                "upgrade",
                "apply",
                "--bootstrap",
                &format!("{}/kubeadm:{next}", Provider::Bootstrap.namespace()),
                "--control-plane",
                &format!("{}/kubeadm:{next}", Provider::ControlPlane.namespace()),
            ],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    println!("clusterctl upgrade apply:\n{applied}");
    wait_running(&management, &next_image, Duration::from_secs(300)).await;
    assert_runs_release(&management, &next).await;
    println!(
        "our managers' pods on {next_image}, built as {next}, in {:.1?}",
        step.elapsed()
    );
    assert_unchanged(
        &management,
        &machines_before,
        Duration::from_secs(120),
        "the upgrade",
    )
    .await;

    // The node our control-plane manager's pod runs on reboots: its pods come back by themselves.
    let step = Instant::now();
    let (pod, restarts) = the_pod(&management, OUR_NAMESPACES[1]).await;
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("a scheduled pod");
    tokio::task::block_in_place(|| env.sim.reboot(NS, &node)).unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let (now, now_restarts) = the_pod(&management, OUR_NAMESPACES[1]).await;
        let ready = now
            .status
            .as_ref()
            .is_some_and(|s| s.container_statuses.iter().flatten().all(|c| c.ready));
        if ready && (now.metadata.uid != pod.metadata.uid || now_restarts > restarts) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "our control-plane manager did not come back after {node} rebooted\n{}",
            what_serves(&management, OUR_NAMESPACES[1]).await
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    wait_running(&management, &next_image, Duration::from_secs(300)).await;
    assert_runs_release(&management, &next).await;
    assert_unchanged(
        &management,
        &machines_before,
        Duration::from_secs(300),
        &format!("the reboot of {node}"),
    )
    .await;
    println!(
        "{node} rebooted; our managers running and leading again in {:.1?}",
        step.elapsed()
    );

    // `clusterctl move` to the second management cluster, installed at our next release: the
    // simulator's cloud is shared, so the nodes stay and the target's managers adopt them.
    let step = Instant::now();
    let (target, target_kubeconfig) = shipped.init(&env, TARGET, &shipped.next_references).await;
    let target_sim = workload_sim.share_cloud(
        target.clone(),
        SimOptions {
            dir: env.plane.dir().join("sim-of-the-target"),
            namespace: Some(NS.into()),
            period: Duration::from_millis(300),
            core: Core::ClusterApi,
        },
    );
    let moved = repository
        .run_against(
            release,
            &kubeconfig_path,
            &[
                "move",
                "--to-kubeconfig",
                &target_kubeconfig.display().to_string(),
                "--namespace",
                NS,
            ],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    println!("clusterctl move:\n{moved}");
    assert!(
        Api::<Cluster>::namespaced(management.clone(), NS)
            .get_opt(WORKLOAD)
            .await
            .unwrap()
            .is_none()
            && machine_uids(&management, WORKLOAD).await.is_empty(),
        "the workload cluster left the first management cluster"
    );
    wait_workload_ready(&target, WORKLOAD, Duration::from_secs(300)).await;
    assert_eq!(
        machine_uids(&target, WORKLOAD)
            .await
            .into_keys()
            .collect::<Vec<_>>(),
        machines_before.keys().cloned().collect::<Vec<_>>(),
        "the target holds the same Machines, none created again"
    );
    wait_running(&target, &next_image, Duration::from_secs(120)).await;
    assert_runs_release(&target, &next).await;
    for namespace in OUR_NAMESPACES {
        assert_leads(&target, namespace).await;
    }
    watch
        .wait_voters(voters, Duration::from_secs(60), "moved")
        .await;
    let samples = watch.assert_safe("upgrade, reboot and move of the management cluster");
    drop(watch);
    println!(
        "installed the target and moved the workload cluster to it in {:.1?}; {samples} etcd samples, all safe",
        step.elapsed()
    );

    Api::<Cluster>::namespaced(target.clone(), NS)
        .delete(WORKLOAD, &DeleteParams::default())
        .await
        .unwrap();
    wait_workload_gone(&target, WORKLOAD, Duration::from_secs(300)).await;
    drop(target_sim);
    drop(workload_sim);

    drop(management);
    env.assert_no_manager_exited();
    let pid = std::process::id();
    let dir = env.plane.dir().to_owned();
    drop(env);
    left_nothing_behind(pid, &dir, &sysctls_before);
}
