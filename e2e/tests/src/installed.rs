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

/// Whose kubeadm bootstrap and control-plane providers a repository offers under the name `kubeadm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kubeadm {
    Ours,
    /// Cluster API's own, of the release its core comes from.
    ClusterApi,
}

impl Kubeadm {
    /// Who they are, in test output.
    pub fn who(self) -> &'static str {
        match self {
            Kubeadm::Ours => "ours",
            Kubeadm::ClusterApi => "Cluster API's",
        }
    }
}

/// What `clusterctl init` installed and the processes running its Deployments.
pub struct Installed {
    pub repository: Repository,
    /// `clusterctl init`'s output.
    pub init_output: String,
    /// Cluster API's core manager, then the kubeadm bootstrap and control-plane managers.
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

/// The local repository of `kubeadm`'s providers (named `kubeadm`), Cluster API's core and the simulated
/// infrastructure, with `more` beside them, in a folder of its own below `plane`'s; and the references
/// (`name:version`) of the core, bootstrap, control-plane and infrastructure providers to install.
pub fn repository(
    plane: &ManagementPlane,
    kubeadm: Kubeadm,
    more: Vec<RepositoryProvider>,
) -> Result<(Repository, Vec<String>), String> {
    let release = ClusterApi::find().map_err(|e| e.to_string())?;
    let mut providers = vec![RepositoryProvider::core(&release).map_err(|e| e.to_string())?];
    match kubeadm {
        Kubeadm::Ours => {
            providers.push(ours(Provider::Bootstrap));
            providers.push(ours(Provider::ControlPlane));
        }
        Kubeadm::ClusterApi => {
            for part in [Part::KubeadmBootstrap, Part::KubeadmControlPlane] {
                providers
                    .push(RepositoryProvider::kubeadm(&release, part).map_err(|e| e.to_string())?);
            }
        }
    }
    providers.push(sim());
    let references = providers
        .iter()
        .map(RepositoryProvider::reference)
        .collect();
    providers.extend(more);
    let folder = match kubeadm {
        Kubeadm::Ours => "clusterctl",
        Kubeadm::ClusterApi => "clusterctl-cluster-api",
    };
    let repository = Repository::create(
        &plane.dir().join(folder),
        &providers,
        &[("CLUSTER_TOPOLOGY", "true")],
    )
    .map_err(|e| e.to_string())?;
    Ok((repository, references))
}

/// `clusterctl init` with `references` in order: the core, bootstrap and control-plane providers, and
/// the infrastructure provider when there is a fourth.
pub fn init_args(references: &[String]) -> Vec<&str> {
    let flags = [
        "--core",
        "--bootstrap",
        "--control-plane",
        "--infrastructure",
    ];
    let mut args = vec!["init"];
    for (flag, reference) in flags.into_iter().zip(references) {
        args.extend([flag, reference.as_str()]);
    }
    args
}

/// `clusterctl init --core cluster-api --bootstrap kubeadm --control-plane kubeadm --infrastructure
/// sim` into `plane` (started by [`management_plane`]) with `kubeadm`'s providers, then cert-manager's
/// and the role aggregation controller's work, and the three Deployments as processes with their
/// Services' endpoints at `host`. `more` goes into the repository too, not installed (e.g. a next
/// release to upgrade to).
pub async fn install(
    plane: &ManagementPlane,
    host: IpAddr,
    kubeadm: Kubeadm,
    more: Vec<RepositoryProvider>,
) -> Result<Installed, String> {
    let release = ClusterApi::find().map_err(|e| e.to_string())?;
    let client = plane.client().await.map_err(|e| e.to_string())?;
    clusterctl::install_cert_manager_crds(&client)
        .await
        .map_err(|e| e.to_string())?;
    let (repository, references) = repository(plane, kubeadm, more)?;
    let init_output = repository
        .run(&release, plane, &init_args(&references))
        .map_err(|e| e.to_string())?;
    after_clusterctl(plane).await?;
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
    managers.extend(run_kubeadm(plane, host, kubeadm).await?);
    Ok(Installed {
        repository,
        init_output,
        managers,
    })
}

/// What cert-manager and kube-controller-manager do after clusterctl created or changed components:
/// serving certificates issued and injected, aggregated ClusterRoles filled, the namespace of
/// clusterctl's cert-manager check gone.
pub async fn after_clusterctl(plane: &ManagementPlane) -> Result<(), String> {
    let client = plane.client().await.map_err(|e| e.to_string())?;
    clusterctl::issue_certificates(&client)
        .await
        .map_err(|e| format!("cert-manager's work: {e}"))?;
    clusterctl::finish_cert_manager_check(&client)
        .await
        .map_err(|e| format!("the namespace of clusterctl's cert-manager check: {e}"))?;
    clusterctl::aggregate_cluster_roles(&client)
        .await
        .map_err(|e| e.to_string())
}

/// The kubeadm bootstrap and control-plane managers of `kubeadm` as processes of their installed
/// Deployments.
pub async fn run_kubeadm(
    plane: &ManagementPlane,
    host: IpAddr,
    kubeadm: Kubeadm,
) -> Result<Vec<ManagerProcess>, String> {
    match kubeadm {
        Kubeadm::Ours => run_ours(plane, host).await,
        Kubeadm::ClusterApi => {
            let release = ClusterApi::find().map_err(|e| e.to_string())?;
            let mut managers = Vec::new();
            for (part, namespace) in [
                (Part::KubeadmBootstrap, "capi-kubeadm-bootstrap-system"),
                (
                    Part::KubeadmControlPlane,
                    "capi-kubeadm-control-plane-system",
                ),
            ] {
                let deployment =
                    format!("{}controller-manager", namespace.trim_end_matches("system"));
                let manager = clusterctl::run_deployment(
                    plane,
                    namespace,
                    &deployment,
                    &release.binary(part.binary()),
                    Flags::ControllerRuntime,
                    host,
                )
                .await
                .map_err(|e| format!("{}: {e}", part.binary()))?;
                managers.push(manager);
            }
            Ok(managers)
        }
    }
}

/// Switches `plane`'s kubeadm providers to `to`, as a user does with clusterctl: `clusterctl delete
/// --bootstrap kubeadm --control-plane kubeadm` with the configuration they were installed from
/// (`from`: their Deployments, RBAC and webhooks go; the CRDs and every object stay), then `stopped`
/// (the old managers' pods end with their Deployments), then `clusterctl init --bootstrap kubeadm
/// --control-plane kubeadm` from `to`'s repository, and cert-manager's work for what it created.
/// Returns that repository and both commands' output; the new managers run with [`run_kubeadm`].
pub async fn switch(
    plane: &ManagementPlane,
    from: &Repository,
    to: Kubeadm,
    stopped: impl FnOnce(),
) -> Result<(Repository, String), String> {
    let release = ClusterApi::find().map_err(|e| e.to_string())?;
    let kinds = ["--bootstrap", "kubeadm", "--control-plane", "kubeadm"];
    let mut output = from
        .run(&release, plane, &[&["delete"][..], &kinds].concat())
        .map_err(|e| e.to_string())?;
    stopped();
    let (repository, _) = repository(plane, to, Vec::new())?;
    output += &repository
        .run(&release, plane, &[&["init"][..], &kinds].concat())
        .map_err(|e| e.to_string())?;
    after_clusterctl(plane).await?;
    Ok((repository, output))
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
