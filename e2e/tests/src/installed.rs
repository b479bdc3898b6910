//! A management plane set up the way users set one up: `clusterctl init` installs Cluster API's core,
//! our bootstrap and control-plane providers and the simulated infrastructure from a local repository
//! (our components as `make release-manifests` writes them), then the installed Deployments run as
//! processes (see `testenv::clusterctl` for what stands in for cert-manager, the kubelet and the
//! Service network).

use std::net::IpAddr;

use testenv::ManagementPlane;
use testenv::apiserver::ApiServerOptions;
use testenv::capi::{ClusterApi, Part};
use testenv::clusterctl::{self, Flags, Repository, RepositoryProvider};
use testenv::manager::ManagerProcess;
use xtask::components::{self, Provider};

use crate::env::manager_binary;

/// The simulated infrastructure's release as clusterctl installs it.
pub const SIM_VERSION: &str = "v0.1.0";
const SIM_NAMESPACE: &str = "sim-system";

/// Our provider of `provider`'s kind in a local repository: its components and `metadata.yaml`.
pub fn ours(provider: Provider) -> RepositoryProvider {
    let kind = match provider {
        Provider::Bootstrap => "BootstrapProvider",
        Provider::ControlPlane => "ControlPlaneProvider",
    };
    RepositoryProvider {
        name: "kubeadm".into(),
        kind: kind.into(),
        label: provider.label().into(),
        version: components::version(),
        components_file: provider.components_file().into(),
        files: vec![
            (
                provider.components_file().into(),
                components::components_yaml(provider),
            ),
            ("metadata.yaml".into(), components::metadata_yaml()),
        ],
    }
}

/// The simulated infrastructure as an infrastructure provider: its Namespace, CRDs and, as every
/// infrastructure provider ships one, a ClusterRole for the kubeadm control-plane manager's aggregated
/// role (cloning and deleting SimMachines); the simulator itself runs in the test process. Release
/// series 0.1 on contract v1beta2.
pub fn sim() -> RepositoryProvider {
    use xtask::components::rbac;
    let mut components =
        format!("---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {SIM_NAMESPACE}\n");
    for (_, crd) in sim::api::crd_files() {
        components.push_str("---\n");
        components.push_str(&crd);
    }
    let role = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": "sim-kubeadm-control-plane-role",
            "labels": {rbac::CONTROLPLANE_AGGREGATION_LABEL: "true"},
        },
        "rules": rbac::infrastructure_rules(
            sim::api::GROUP,
            &["simmachines"],
            &["simmachinetemplates"],
        ),
    });
    components.push_str("---\n");
    components.push_str(&serde_saphyr::to_string(&role).expect("a ClusterRole serializes"));
    let metadata = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\n\
                    releaseSeries:\n- major: 0\n  minor: 1\n  contract: v1beta2\n";
    RepositoryProvider {
        name: "sim".into(),
        kind: "InfrastructureProvider".into(),
        label: "infrastructure-sim".into(),
        version: SIM_VERSION.into(),
        components_file: "infrastructure-components.yaml".into(),
        files: vec![
            ("infrastructure-components.yaml".into(), components),
            ("metadata.yaml".into(), metadata.into()),
        ],
    }
}

/// What `clusterctl init` installed and the processes running its Deployments.
pub struct Installed {
    pub repository: Repository,
    /// `clusterctl init`'s output.
    pub init_output: String,
    /// Cluster API's core manager, then our bootstrap and control-plane managers.
    pub managers: Vec<ManagerProcess>,
}

/// A management plane whose kube-apiserver routes webhook Services to their endpoints.
pub async fn management_plane() -> ManagementPlane {
    ManagementPlane::start_with(ApiServerOptions {
        extra_args: clusterctl::APISERVER_ARGS
            .iter()
            .map(|a| a.to_string())
            .collect(),
        ..Default::default()
    })
    .await
    .expect("management plane starts")
}

/// `clusterctl init --core cluster-api --bootstrap kubeadm --control-plane kubeadm --infrastructure
/// sim` into `plane` (started by [`management_plane`]), then cert-manager's and the role aggregation
/// controller's work, and the three Deployments as processes with their Services' endpoints at `host`.
/// `more` goes into the repository too, not installed (e.g. a next release to upgrade to).
pub async fn install(
    plane: &ManagementPlane,
    host: IpAddr,
    more: Vec<RepositoryProvider>,
) -> Result<Installed, String> {
    let release = ClusterApi::find().map_err(|e| e.to_string())?;
    clusterctl::install_cert_manager_crds(plane)
        .await
        .map_err(|e| e.to_string())?;
    let mut providers = vec![
        RepositoryProvider::core(&release).map_err(|e| e.to_string())?,
        ours(Provider::Bootstrap),
        ours(Provider::ControlPlane),
        sim(),
    ];
    providers.extend(more);
    let references: Vec<String> = providers
        .iter()
        .map(RepositoryProvider::reference)
        .collect();
    let repository = Repository::create(
        &plane.dir().join("clusterctl"),
        &providers,
        &[("CLUSTER_TOPOLOGY", "true")],
    )
    .map_err(|e| e.to_string())?;
    let init_output = repository
        .run(
            &release,
            plane,
            &[
                "init",
                "--core",
                &references[0],
                "--bootstrap",
                &references[1],
                "--control-plane",
                &references[2],
                "--infrastructure",
                &references[3],
            ],
        )
        .map_err(|e| e.to_string())?;
    clusterctl::issue_certificates(plane)
        .await
        .map_err(|e| format!("cert-manager's work: {e}"))?;
    let client = plane.client().await.map_err(|e| e.to_string())?;
    clusterctl::aggregate_cluster_roles(&client)
        .await
        .map_err(|e| e.to_string())?;
    let core = clusterctl::run_deployment(
        plane,
        "capi-system",
        "capi-controller-manager",
        &release.binary(Part::Core.binary()),
        Flags::ControllerRuntime,
        host,
    )
    .await
    .map_err(|e| format!("Cluster API's core manager: {e}"))?;
    let mut managers = vec![core];
    managers.extend(run_ours(plane, host).await?);
    Ok(Installed {
        repository,
        init_output,
        managers,
    })
}

/// Our bootstrap and control-plane managers as processes of their installed Deployments (again after
/// `clusterctl upgrade` changed them).
pub async fn run_ours(
    plane: &ManagementPlane,
    host: IpAddr,
) -> Result<Vec<ManagerProcess>, String> {
    let mut managers = Vec::new();
    for (provider, binary, var) in [
        (
            Provider::Bootstrap,
            "bootstrap-manager",
            "BOOTSTRAP_MANAGER",
        ),
        (
            Provider::ControlPlane,
            "controlplane-manager",
            "CONTROLPLANE_MANAGER",
        ),
    ] {
        let deployment = format!("{}controller-manager", provider.name_prefix());
        let manager = clusterctl::run_deployment(
            plane,
            provider.namespace(),
            &deployment,
            &manager_binary(binary, var),
            Flags::Ours,
            host,
        )
        .await
        .map_err(|e| format!("{binary}: {e}"))?;
        managers.push(manager);
    }
    Ok(managers)
}

/// Our provider of `provider`'s kind as the next minor release would ship it: the same components
/// with the next version's image, and a `metadata.yaml` listing both release series.
pub fn ours_next(provider: Provider) -> RepositoryProvider {
    let current = components::version();
    let next = next_version();
    let mut next_provider = ours(provider);
    next_provider.version = next.clone();
    next_provider.files = vec![
        (
            provider.components_file().into(),
            components::components_yaml(provider)
                .replace(&format!(":{current}"), &format!(":{next}")),
        ),
        ("metadata.yaml".into(), metadata_with_next()),
    ];
    next_provider
}

/// The minor release after ours: `vX.(Y+1).0`.
pub fn next_version() -> String {
    let current = components::version();
    let mut parts = current.trim_start_matches('v').split('.');
    let major = parts.next().unwrap_or("0");
    let minor: u64 = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    format!("v{major}.{}.0", minor + 1)
}

/// Our `metadata.yaml` with the next minor release series on the same contract appended.
fn metadata_with_next() -> String {
    let next = next_version();
    let mut parts = next.trim_start_matches('v').split('.');
    let (major, minor) = (parts.next().unwrap_or("0"), parts.next().unwrap_or("0"));
    format!(
        "{}- major: {major}\n  minor: {minor}\n  contract: {}\n",
        components::metadata_yaml(),
        components::contract()
    )
}
