//! Where the real binaries are. Each can be overridden by an environment variable.

use std::path::{Path, PathBuf};

use crate::Error;

/// The Kubernetes version `hack/install-testenv.sh` builds.
pub const KUBE_VERSION: &str = "v1.20.2";
/// The build recipe revision of `hack/install-testenv.sh` (part of the cache folder name).
pub const KUBE_RECIPE: &str = "r3";

const INSTALL_HINT: &str =
    "run `hack/install-testenv.sh` (installs Debian's etcd and builds kube-apiserver)";

/// The cache folder `hack/install-testenv.sh` builds kube-apiserver, ignition-check and the `*_current`
/// binaries into.
pub fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("KUBEADM_PROVIDERS_CACHE") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join("kubeadm-providers")
}

/// Debian's etcd 3.4 (or `$ETCD`), the old end of the matrix.
pub fn etcd() -> Result<PathBuf, Error> {
    fallback("etcd", "ETCD", None, &["--version"], "etcd Version: 3.4.")
}

/// Debian's etcdctl 3.4 (or `$ETCDCTL`).
pub fn etcdctl() -> Result<PathBuf, Error> {
    fallback(
        "etcdctl",
        "ETCDCTL",
        None,
        &["version"],
        "etcdctl version: 3.4.",
    )
}

/// kube-apiserver 1.20 built from Debian's source package (or `$KUBE_APISERVER`).
pub fn kube_apiserver() -> Result<PathBuf, Error> {
    let cached = fallback_dir().join("bin/kube-apiserver");
    let says = format!("Kubernetes {KUBE_VERSION}");
    fallback(
        "kube-apiserver",
        "KUBE_APISERVER",
        Some(&cached),
        &["--version"],
        &says,
    )
}

/// kubeadm 1.20 built from Debian's source package (or `$KUBEADM`).
pub fn kubeadm() -> Result<PathBuf, Error> {
    let cached = fallback_dir().join("bin/kubeadm");
    fallback(
        "kubeadm",
        "KUBEADM",
        Some(&cached),
        &["version", "-o", "short"],
        KUBE_VERSION,
    )
}

fn fallback_dir() -> PathBuf {
    cache_root().join(format!("kubernetes-{KUBE_VERSION}-{KUBE_RECIPE}"))
}

/// A binary of the fallback releases, found as [`find`] finds it, that answers `args` with a line
/// starting with `says` (unless `$env` chose it: then its answer is only named).
fn fallback(
    name: &str,
    env: &'static str,
    cached: Option<&Path>,
    args: &[&str],
    says_prefix: &str,
) -> Result<PathBuf, Error> {
    if let Some(path) = chosen(env) {
        return Ok(path);
    }
    let path = find(name, env, cached)?;
    let said = says(&path, args, says_prefix);
    if std::env::var_os(env).is_none() && !said.starts_with(says_prefix) {
        return Err(Error::MissingBinary {
            name: name.into(),
            hint: format!(
                "{} says '{said}', not '{says_prefix}…'; {INSTALL_HINT}, or set ${env}",
                path.display()
            ),
        });
    }
    remember(env, name, &said, &path);
    Ok(path)
}

/// `ignition-check` (`hack/tools/cmd/ignition-check`): transpiles Container Linux Configs and validates
/// Ignition 2.3 configs with the Flatcar libraries Cluster API's kubeadm bootstrap provider uses.
/// `$IGNITION_CHECK` overrides; otherwise the newest `tools-*/bin/ignition-check` under [`cache_root`].
/// `hack/install-testenv.sh` builds one folder per hash of `hack/tools` and touches the current binary on
/// every run, so the newest is the one for the checked-out sources.
pub fn ignition_check() -> Result<PathBuf, Error> {
    cached_check_tool("ignition-check", "IGNITION_CHECK")
}

/// `go-template` (`hack/tools/cmd/go-template`): renders a file template with Go's own text/template, the
/// way Cluster API renders `files[].contentFormat: Template`. `$GO_TEMPLATE` overrides; otherwise the newest
/// `tools-*/bin/go-template` under [`cache_root`], built beside ignition-check.
pub fn go_template() -> Result<PathBuf, Error> {
    cached_check_tool("go-template", "GO_TEMPLATE")
}

/// `$ENV`, else the newest `tools-*/bin/<NAME>` (hack/tools, one folder per hash of its sources).
fn cached_check_tool(name: &str, env: &str) -> Result<PathBuf, Error> {
    if std::env::var_os(env).is_some() {
        return find(name, env, None);
    }
    let root = cache_root();
    newest_cached_tool(&root, name).ok_or_else(|| Error::MissingBinary {
        name: name.into(),
        hint: format!(
            "no {}/tools-*/bin/{name}; run `hack/install-testenv.sh` (builds it from hack/tools with \
             Go >= 1.22), or set ${env}",
            root.display()
        ),
    })
}

/// kube-apiserver of the current Kubernetes release, built by `hack/install-testenv.sh` from
/// `hack/tools/k8s` (k8s.io/kubernetes as a Go module; its go.mod is the one place pinning the version).
/// `$KUBE_APISERVER_CURRENT` overrides; otherwise the `tools-*/bin/kube-apiserver` of that version under
/// [`cache_root`]. Unlike [`kube_apiserver`], never the Debian-source build nor one on PATH.
pub fn kube_apiserver_current() -> Result<PathBuf, Error> {
    current_tool(
        "kube-apiserver",
        "KUBE_APISERVER_CURRENT",
        ToolModule::Kubernetes,
    )
}

/// kubeadm of the current Kubernetes release, built with [`kube_apiserver_current`].
/// `$KUBEADM_CURRENT` overrides; otherwise the `tools-*/bin/kubeadm` of that version under [`cache_root`].
pub fn kubeadm_current() -> Result<PathBuf, Error> {
    current_tool("kubeadm", "KUBEADM_CURRENT", ToolModule::Kubernetes)
}

/// kubeadm 1.30, the last release that deploys the Kubernetes versions our renderer writes kubeadm API
/// v1beta3 for, built by `hack/install-testenv.sh` from `hack/tools/k8s-v1beta3` (binary
/// `kubeadm-v1beta3`). `$KUBEADM_V1BETA3` overrides.
pub fn kubeadm_v1beta3() -> Result<PathBuf, Error> {
    current_tool(
        "kubeadm-v1beta3",
        "KUBEADM_V1BETA3",
        ToolModule::KubeadmV1beta3,
    )
}

/// etcd of the current release, built by `hack/install-testenv.sh` from `hack/tools/etcd`
/// (go.etcd.io/etcd/server/v3 as a Go module; its go.mod is the one place pinning the version).
/// `$ETCD_CURRENT` overrides; otherwise the `tools-*/bin/etcd` of that version under [`cache_root`]. Unlike
/// [`etcd`], never Debian's etcd on PATH.
pub fn etcd_current() -> Result<PathBuf, Error> {
    current_tool("etcd", "ETCD_CURRENT", ToolModule::Etcd)
}

/// etcdctl of the same etcd release as [`etcd_current`]. `$ETCDCTL_CURRENT` overrides.
pub fn etcdctl_current() -> Result<PathBuf, Error> {
    current_tool("etcdctl", "ETCDCTL_CURRENT", ToolModule::Etcd)
}

/// etcdutl (snapshots, defragmentation of a stopped member) of the same etcd release as
/// [`etcd_current`]. `$ETCDUTL_CURRENT` overrides.
pub fn etcdutl_current() -> Result<PathBuf, Error> {
    current_tool("etcdutl", "ETCDUTL_CURRENT", ToolModule::Etcd)
}

/// `sim-kubelet` (`hack/tools/k8s/cmd/sim-kubelet`): the kubelet's port-forward endpoint for simulated
/// nodes, built with [`kube_apiserver_current`]. `$SIM_KUBELET` overrides.
pub fn sim_kubelet() -> Result<PathBuf, Error> {
    current_tool("sim-kubelet", "SIM_KUBELET", ToolModule::Kubernetes)
}

/// Cluster API's core manager, built by `hack/install-testenv.sh` from `hack/tools/capi` next to clusterctl
/// and Cluster API's kubeadm managers (see [`crate::capi::ClusterApi`]). `$CLUSTER_API_MANAGER` overrides.
pub fn cluster_api_manager() -> Result<PathBuf, Error> {
    current_tool(
        crate::capi::CORE_MANAGER,
        "CLUSTER_API_MANAGER",
        ToolModule::ClusterApi,
    )
}

/// kustomize, built by `hack/install-testenv.sh` from `hack/tools/kustomize`: builds Cluster API's core
/// components from the release's `config/` (see [`crate::capi::ClusterApi::components`]).
/// `$KUSTOMIZE` overrides.
pub fn kustomize() -> Result<PathBuf, Error> {
    current_tool("kustomize", "KUSTOMIZE", ToolModule::Kustomize)
}

/// `clusterctl-envsubst` (`hack/tools/envsubst`): clusterctl's own simple template processor, of the
/// Cluster API version that module pins, answering for templates given on stdin (see its main).
/// `$CLUSTERCTL_ENVSUBST` overrides.
pub fn clusterctl_envsubst() -> Result<PathBuf, Error> {
    current_tool(
        "clusterctl-envsubst",
        "CLUSTERCTL_ENVSUBST",
        ToolModule::ClusterctlEnvsubst,
    )
}

/// versitygw (`hack/tools/versitygw`): the S3-compatible object store the etcd snapshot tests write to
/// (see [`crate::object_store`]). `$VERSITYGW` overrides.
pub fn versitygw() -> Result<PathBuf, Error> {
    current_tool("versitygw", "VERSITYGW", ToolModule::Versitygw)
}

/// A component of real nodes built by `hack/install-testenv.sh nodes` from `hack/tools/k8s-node` (`kubelet`,
/// `kube-controller-manager`, `kube-scheduler`, `kube-proxy`, `pause`) or `hack/tools/coredns` (`coredns`),
/// of the version its go.mod pins. `$NODE_<NAME>` (upper case, `-` as `_`) overrides.
pub fn node_component(name: &'static str) -> Result<PathBuf, Error> {
    let (env, module) = match name {
        "kubelet" => ("NODE_KUBELET", ToolModule::KubernetesNode),
        "kube-controller-manager" => ("NODE_KUBE_CONTROLLER_MANAGER", ToolModule::KubernetesNode),
        "kube-scheduler" => ("NODE_KUBE_SCHEDULER", ToolModule::KubernetesNode),
        "kube-proxy" => ("NODE_KUBE_PROXY", ToolModule::KubernetesNode),
        "pause" => ("NODE_PAUSE", ToolModule::KubernetesNode),
        "coredns" => ("NODE_COREDNS", ToolModule::Coredns),
        other => panic!("{other} is not a node component"),
    };
    current_tool(name, env, module)
}

/// A release besides the current one that a simulated node runs when its Machine says so: a
/// `hack/tools/k8s-1.N` (kube-apiserver, kubeadm) or `hack/tools/etcd-3.N` (etcd, etcdctl, etcdutl) module.
#[derive(Debug)]
pub struct OtherRelease {
    /// The minor version N.
    pub minor: u32,
    dir: &'static str,
    go_mod: &'static str,
    /// `$<NAME>_<major>_<minor>` for each binary, which overrides the build (e.g. `KUBEADM_1_37`).
    envs: &'static [(&'static str, &'static str)],
}

/// Kubernetes releases besides the current one (`hack/tools/k8s`), oldest first.
pub const KUBERNETES_RELEASES: &[OtherRelease] = &[
    OtherRelease {
        minor: 35,
        dir: "hack/tools/k8s-1.35",
        go_mod: include_str!("../../../hack/tools/k8s-1.35/go.mod"),
        envs: &[
            ("kubeadm", "KUBEADM_1_35"),
            ("kube-apiserver", "KUBE_APISERVER_1_35"),
        ],
    },
    OtherRelease {
        minor: 36,
        dir: "hack/tools/k8s-1.36",
        go_mod: include_str!("../../../hack/tools/k8s-1.36/go.mod"),
        envs: &[
            ("kubeadm", "KUBEADM_1_36"),
            ("kube-apiserver", "KUBE_APISERVER_1_36"),
        ],
    },
    OtherRelease {
        minor: 37,
        dir: "hack/tools/k8s-1.37",
        go_mod: include_str!("../../../hack/tools/k8s-1.37/go.mod"),
        envs: &[
            ("kubeadm", "KUBEADM_1_37"),
            ("kube-apiserver", "KUBE_APISERVER_1_37"),
        ],
    },
];

/// etcd releases besides the current one (`hack/tools/etcd`), oldest first.
pub const ETCD_RELEASES: &[OtherRelease] = &[OtherRelease {
    minor: 7,
    dir: "hack/tools/etcd-3.7",
    go_mod: include_str!("../../../hack/tools/etcd-3.7/go.mod"),
    envs: &[
        ("etcd", "ETCD_3_7"),
        ("etcdctl", "ETCDCTL_3_7"),
        ("etcdutl", "ETCDUTL_3_7"),
    ],
}];

/// The node components of the releases in [`KUBERNETES_RELEASES`] (`hack/tools/k8s-node-1.N`: kubelet,
/// kube-controller-manager, kube-scheduler, kube-proxy), for real nodes whose Machine runs one of them;
/// `hack/install-testenv.sh nodes node-releases` builds them.
pub const KUBERNETES_NODE_RELEASES: &[OtherRelease] = &[
    OtherRelease {
        minor: 35,
        dir: "hack/tools/k8s-node-1.35",
        go_mod: include_str!("../../../hack/tools/k8s-node-1.35/go.mod"),
        envs: &[
            ("kubelet", "NODE_KUBELET_1_35"),
            (
                "kube-controller-manager",
                "NODE_KUBE_CONTROLLER_MANAGER_1_35",
            ),
            ("kube-scheduler", "NODE_KUBE_SCHEDULER_1_35"),
            ("kube-proxy", "NODE_KUBE_PROXY_1_35"),
        ],
    },
    OtherRelease {
        minor: 36,
        dir: "hack/tools/k8s-node-1.36",
        go_mod: include_str!("../../../hack/tools/k8s-node-1.36/go.mod"),
        envs: &[
            ("kubelet", "NODE_KUBELET_1_36"),
            (
                "kube-controller-manager",
                "NODE_KUBE_CONTROLLER_MANAGER_1_36",
            ),
            ("kube-scheduler", "NODE_KUBE_SCHEDULER_1_36"),
            ("kube-proxy", "NODE_KUBE_PROXY_1_36"),
        ],
    },
    OtherRelease {
        minor: 37,
        dir: "hack/tools/k8s-node-1.37",
        go_mod: include_str!("../../../hack/tools/k8s-node-1.37/go.mod"),
        envs: &[
            ("kubelet", "NODE_KUBELET_1_37"),
            (
                "kube-controller-manager",
                "NODE_KUBE_CONTROLLER_MANAGER_1_37",
            ),
            ("kube-scheduler", "NODE_KUBE_SCHEDULER_1_37"),
            ("kube-proxy", "NODE_KUBE_PROXY_1_37"),
        ],
    },
];

/// CoreDNS of the releases in [`KUBERNETES_RELEASES`] (`hack/tools/coredns-1.N`: the version kubeadm 1.N
/// deploys), for real nodes of a cluster created at one of them; `hack/install-testenv.sh nodes
/// node-releases` builds them.
pub const COREDNS_RELEASES: &[OtherRelease] = &[
    OtherRelease {
        minor: 35,
        dir: "hack/tools/coredns-1.35",
        go_mod: include_str!("../../../hack/tools/coredns-1.35/go.mod"),
        envs: &[("coredns", "NODE_COREDNS_1_35")],
    },
    OtherRelease {
        minor: 36,
        dir: "hack/tools/coredns-1.36",
        go_mod: include_str!("../../../hack/tools/coredns-1.36/go.mod"),
        envs: &[("coredns", "NODE_COREDNS_1_36")],
    },
    OtherRelease {
        minor: 37,
        dir: "hack/tools/coredns-1.37",
        go_mod: include_str!("../../../hack/tools/coredns-1.37/go.mod"),
        envs: &[("coredns", "NODE_COREDNS_1_37")],
    },
];

/// The CoreDNS versions built here, by the Kubernetes release whose kubeadm deploys each, oldest first
/// (`v1.12.1`, ...).
pub fn coredns_releases() -> Vec<String> {
    std::iter::once(ToolModule::Coredns.version())
        .chain(
            COREDNS_RELEASES
                .iter()
                .map(|r| ToolModule::CorednsRelease(r.minor).version()),
        )
        .collect()
}

/// CoreDNS `version` (`v1.14.6`, as its image tag says): the build of `hack/tools/coredns` when that
/// module pins it, else of the `hack/tools/coredns-1.N` that does.
pub fn coredns(version: &str) -> Result<PathBuf, Error> {
    if version == ToolModule::Coredns.version() {
        return node_component("coredns");
    }
    match COREDNS_RELEASES
        .iter()
        .find(|r| ToolModule::CorednsRelease(r.minor).version() == version)
    {
        Some(release) => release_tool(
            "coredns",
            release,
            ToolModule::CorednsRelease(release.minor),
        ),
        None => Err(Error::MissingBinary {
            name: format!("CoreDNS {version}"),
            hint: format!(
                "no hack/tools/coredns* module pins it (built here: {})",
                coredns_releases().join(", ")
            ),
        }),
    }
}

/// The Kubernetes releases nodes run here: the current one, then every other release built, oldest first.
pub fn kubernetes_releases() -> Vec<String> {
    std::iter::once(ToolModule::Kubernetes.version())
        .chain(
            KUBERNETES_RELEASES
                .iter()
                .map(|r| ToolModule::KubernetesRelease(r.minor).version()),
        )
        .collect()
}

/// The minor version N of `1.N.P`, `v1.N.P`, `3.N.P-0` and the like.
fn minor_of(version: &str) -> Option<u32> {
    version
        .trim_start_matches('v')
        .split('.')
        .nth(1)?
        .parse()
        .ok()
}

/// `kubeadm` or `kube-apiserver` of the Kubernetes release `version` (`v1.37.2`; the patch is not
/// looked at): the build of `hack/tools/k8s-1.N` where there is one, else of the current release (as for
/// any minor not built here).
pub fn kubernetes_binary(name: &'static str, version: &str) -> Result<PathBuf, Error> {
    let minor = minor_of(version);
    match KUBERNETES_RELEASES.iter().find(|r| Some(r.minor) == minor) {
        Some(release) => release_tool(name, release, ToolModule::KubernetesRelease(release.minor)),
        None => match name {
            "kubeadm" => kubeadm_current(),
            "kube-apiserver" => kube_apiserver_current(),
            other => panic!("{other} is not built per Kubernetes release"),
        },
    }
}

/// A node component of real nodes (`kubelet`, `kube-controller-manager`, `kube-scheduler`, `kube-proxy`) of
/// the Kubernetes release `version` (`v1.36.3`; the patch is not looked at): [`node_component`] for the
/// current release, the build of `hack/tools/k8s-node-1.N` for another; an error for a minor not built here
/// (a real node never runs another release's kubelet in its stead).
pub fn node_component_of(name: &'static str, version: &str) -> Result<PathBuf, Error> {
    let minor = minor_of(version);
    if minor == minor_of(&ToolModule::KubernetesNode.version()) {
        return node_component(name);
    }
    match KUBERNETES_NODE_RELEASES
        .iter()
        .find(|r| Some(r.minor) == minor)
    {
        Some(release) => release_tool(
            name,
            release,
            ToolModule::KubernetesNodeRelease(release.minor),
        ),
        None => Err(Error::MissingBinary {
            name: format!("{name} of Kubernetes {version}"),
            hint: format!(
                "real nodes run the releases {}; no hack/tools/k8s-node-1.N builds this one",
                kubernetes_releases().join(", ")
            ),
        }),
    }
}

/// `etcd`, `etcdctl` or `etcdutl` of the etcd release `version` (`3.7.0-0`, an image tag, will do): the
/// build of `hack/tools/etcd-3.N` where there is one, else the current release's.
pub fn etcd_binary(name: &'static str, version: &str) -> Result<PathBuf, Error> {
    let minor = minor_of(version);
    match ETCD_RELEASES.iter().find(|r| Some(r.minor) == minor) {
        Some(release) => release_tool(name, release, ToolModule::EtcdRelease(release.minor)),
        None => match name {
            "etcd" => etcd_current(),
            "etcdctl" => etcdctl_current(),
            "etcdutl" => etcdutl_current(),
            other => panic!("{other} is not built per etcd release"),
        },
    }
}

/// The binary a static pod's `image` runs on a simulated node: kube-apiserver of the image's Kubernetes
/// release, etcd of its etcd release ([`kubernetes_binary`], [`etcd_binary`]).
pub fn for_image(image: &str) -> Result<PathBuf, Error> {
    let (repository, tag) = image.rsplit_once(':').unwrap_or((image, ""));
    match repository.rsplit('/').next().unwrap_or(repository) {
        "kube-apiserver" => kubernetes_binary("kube-apiserver", tag),
        "etcd" => etcd_binary("etcd", tag),
        other => Err(Error::MissingBinary {
            name: other.to_owned(),
            hint: format!("no build runs the image {image} on a simulated node"),
        }),
    }
}

fn release_tool(
    name: &'static str,
    release: &OtherRelease,
    module: ToolModule,
) -> Result<PathBuf, Error> {
    let env = release
        .envs
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, env)| *env)
        .unwrap_or_else(|| panic!("{} builds no {name}", release.dir));
    current_tool(name, env, module)
}

/// The etcd releases the etcd integration tests run on: Debian's 3.4 (the old end, what kubeadm 1.20
/// deployed) and the current release built from `hack/tools/etcd` (what kubeadm 1.34 deploys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtcdRelease {
    V3_4,
    Current,
}

impl EtcdRelease {
    pub const ALL: [EtcdRelease; 2] = [EtcdRelease::V3_4, EtcdRelease::Current];

    /// The `etcd` binary of the release.
    pub fn etcd(self) -> Result<PathBuf, Error> {
        match self {
            EtcdRelease::V3_4 => etcd(),
            EtcdRelease::Current => etcd_current(),
        }
    }

    /// `etcdctl` of the release.
    pub fn etcdctl(self) -> Result<PathBuf, Error> {
        match self {
            EtcdRelease::V3_4 => etcdctl(),
            EtcdRelease::Current => etcdctl_current(),
        }
    }

    /// The command that checks a snapshot file offline, ready for the file's path: `etcdctl snapshot
    /// status` up to 3.4, `etcdutl snapshot status` from 3.5 on (3.6 removed the etcdctl one).
    pub fn snapshot_status(self) -> Result<std::process::Command, Error> {
        let binary = match self {
            EtcdRelease::V3_4 => etcdctl()?,
            EtcdRelease::Current => etcdutl_current()?,
        };
        let mut command = std::process::Command::new(binary);
        command.args(["snapshot", "status", "--write-out=json"]);
        if self == EtcdRelease::V3_4 {
            command.env("ETCDCTL_API", "3");
        }
        Ok(command)
    }
}

/// Which kube-apiserver and etcd a management plane runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagementBinaries {
    pub kube_apiserver: PathBuf,
    pub etcd: PathBuf,
    /// The releases they are.
    pub release: ManagementRelease,
}

impl ManagementBinaries {
    /// Whether they are the fallback: Kubernetes 1.20 takes `--insecure-port=0`, a flag gone from
    /// current releases, and its kubeadm reads neither v1beta3 nor v1beta4.
    pub fn legacy(&self) -> bool {
        self.release == ManagementRelease::Legacy
    }

    /// kubeadm of the management plane's Kubernetes release: what tells whether nodes can run real kubeadm.
    pub fn kubeadm(&self) -> Result<PathBuf, Error> {
        match self.release {
            ManagementRelease::Legacy => kubeadm(),
            ManagementRelease::Current => kubeadm_current(),
            ManagementRelease::Newest => kubernetes_binary("kubeadm", &newest_kubernetes()),
        }
    }
}

/// The releases a management plane runs, as `$TESTENV_MANAGEMENT` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManagementRelease {
    /// The newest release built here, the default: kube-apiserver of the last of [`KUBERNETES_RELEASES`]
    /// (1.37) on etcd of the last of [`ETCD_RELEASES`] (3.7), what Kubernetes 1.37 deploys.
    Newest,
    /// The release of `hack/tools/k8s` on `hack/tools/etcd` (1.34 on 3.6), the other end of the matrix of
    /// releases a management cluster runs; what workload machines run unless their Machine names another.
    Current,
    /// kube-apiserver 1.20 built from Debian's source package on Debian's etcd 3.4: the fallback.
    Legacy,
}

impl ManagementRelease {
    /// `$TESTENV_MANAGEMENT`: unset for [`ManagementRelease::Newest`], else the Kubernetes minor (`1.37`,
    /// `1.34`) or `legacy`.
    pub fn from_env() -> Result<Option<Self>, Error> {
        let Ok(asked) = std::env::var("TESTENV_MANAGEMENT") else {
            return Ok(None);
        };
        let minor = |version: &str| minor_of(version).map(|m| format!("1.{m}"));
        let newest = minor(&newest_kubernetes());
        let current = minor(&ToolModule::Kubernetes.version());
        match asked.as_str() {
            "legacy" => Ok(Some(Self::Legacy)),
            a if Some(a) == newest.as_deref() => Ok(Some(Self::Newest)),
            a if Some(a) == current.as_deref() => Ok(Some(Self::Current)),
            other => Err(Error::MissingBinary {
                name: format!("the management plane of TESTENV_MANAGEMENT={other}"),
                hint: format!(
                    "TESTENV_MANAGEMENT takes {} (the default), {} or legacy (1.20 on etcd 3.4)",
                    newest.unwrap_or_default(),
                    current.unwrap_or_default()
                ),
            }),
        }
    }

    /// Its kube-apiserver and etcd, as built here.
    pub fn binaries(self) -> Result<ManagementBinaries, Error> {
        let (kube_apiserver, etcd) = match self {
            Self::Newest => (
                kubernetes_binary("kube-apiserver", &newest_kubernetes())?,
                etcd_binary("etcd", &newest_etcd())?,
            ),
            Self::Current => (kube_apiserver_current()?, etcd_current()?),
            Self::Legacy => (kube_apiserver()?, etcd()?),
        };
        Ok(ManagementBinaries {
            kube_apiserver,
            etcd,
            release: self,
        })
    }

    /// The Kubernetes version its kube-apiserver says (`v1.37.2`).
    pub fn kubernetes_version(self) -> String {
        match self {
            Self::Newest => newest_kubernetes(),
            Self::Current => ToolModule::Kubernetes.version(),
            Self::Legacy => KUBE_VERSION.to_owned(),
        }
    }

    /// The etcd version its etcd says, without the `v` (`3.7.3`); for the fallback only the minor (`3.4.`).
    pub fn etcd_version(self) -> String {
        match self {
            Self::Newest => newest_etcd().trim_start_matches('v').to_owned(),
            Self::Current => ToolModule::Etcd
                .version()
                .trim_start_matches('v')
                .to_owned(),
            Self::Legacy => "3.4.".to_owned(),
        }
    }
}

/// The newest Kubernetes release built here (`v1.37.2`).
pub fn newest_kubernetes() -> String {
    KUBERNETES_RELEASES.last().map_or_else(
        || ToolModule::Kubernetes.version(),
        |r| ToolModule::KubernetesRelease(r.minor).version(),
    )
}

/// The newest etcd release built here (`v3.7.3`).
fn newest_etcd() -> String {
    ETCD_RELEASES.last().map_or_else(
        || ToolModule::Etcd.version(),
        |r| ToolModule::EtcdRelease(r.minor).version(),
    )
}

/// The releases `$TESTENV_MANAGEMENT` asks for (see [`ManagementRelease`]), by default the newest built
/// here (kube-apiserver 1.37 on etcd 3.7). Outside CI, when the default is not built, the fallback
/// ([`kube_apiserver`] 1.20 on Debian's [`etcd`]) runs instead, and says so; in CI (`CI=true`) a missing
/// build is an error, never a quiet fall back to the old end of the matrix.
pub fn management() -> Result<ManagementBinaries, Error> {
    if let Some(asked) = ManagementRelease::from_env()? {
        return asked.binaries();
    }
    match ManagementRelease::Newest.binaries() {
        Ok(binaries) => Ok(binaries),
        Err(e) if crate::in_ci() => Err(Error::MissingBinary {
            name: "the newest releases".into(),
            hint: format!(
                "CI=true needs them, not the fallback (set TESTENV_MANAGEMENT=legacy to ask for that): {e}"
            ),
        }),
        Err(e) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| eprintln!("testenv: management plane on the fallback releases: {e}"));
            ManagementRelease::Legacy.binaries()
        }
    }
}

/// A Go module of `hack/tools` that `hack/install-testenv.sh` builds binaries from, with the version of
/// the module its go.mod pins (read from the go.mod of this checkout, so a bump is seen at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolModule {
    /// `hack/tools/k8s`: kube-apiserver, kubeadm, sim-kubelet.
    Kubernetes,
    /// `hack/tools/k8s-v1beta3`: kubeadm 1.30 as `kubeadm-v1beta3`.
    KubeadmV1beta3,
    /// `hack/tools/etcd`: etcd, etcdctl, etcdutl.
    Etcd,
    /// `hack/tools/capi`: Cluster API's managers and clusterctl.
    ClusterApi,
    /// `hack/tools/kustomize`.
    Kustomize,
    /// `hack/tools/envsubst`: clusterctl's template processor as `clusterctl-envsubst`.
    ClusterctlEnvsubst,
    /// `hack/tools/versitygw`: an S3 server over a folder.
    Versitygw,
    /// `hack/tools/k8s-node`: kubelet, kube-controller-manager, kube-scheduler, kube-proxy and pause, of
    /// the Kubernetes release [`ToolModule::Kubernetes`] pins.
    KubernetesNode,
    /// `hack/tools/coredns`: CoreDNS, at the version kubeadm of that release deploys.
    Coredns,
    /// `hack/tools/k8s-1.N` of [`KUBERNETES_RELEASES`], by N.
    KubernetesRelease(u32),
    /// `hack/tools/etcd-3.N` of [`ETCD_RELEASES`], by N.
    EtcdRelease(u32),
    /// `hack/tools/k8s-node-1.N` of [`KUBERNETES_NODE_RELEASES`], by N.
    KubernetesNodeRelease(u32),
    /// `hack/tools/coredns-1.N` of [`COREDNS_RELEASES`], by N.
    CorednsRelease(u32),
}

impl ToolModule {
    fn go_mod(self) -> (&'static str, &'static str) {
        match self {
            Self::Kubernetes => (
                "hack/tools/k8s",
                include_str!("../../../hack/tools/k8s/go.mod"),
            ),
            Self::KubeadmV1beta3 => (
                "hack/tools/k8s-v1beta3",
                include_str!("../../../hack/tools/k8s-v1beta3/go.mod"),
            ),
            Self::Etcd => (
                "hack/tools/etcd",
                include_str!("../../../hack/tools/etcd/go.mod"),
            ),
            Self::ClusterApi => (
                "hack/tools/capi",
                include_str!("../../../hack/tools/capi/go.mod"),
            ),
            Self::Kustomize => (
                "hack/tools/kustomize",
                include_str!("../../../hack/tools/kustomize/go.mod"),
            ),
            Self::ClusterctlEnvsubst => (
                "hack/tools/envsubst",
                include_str!("../../../hack/tools/envsubst/go.mod"),
            ),
            Self::Versitygw => (
                "hack/tools/versitygw",
                include_str!("../../../hack/tools/versitygw/go.mod"),
            ),
            Self::KubernetesNode => (
                "hack/tools/k8s-node",
                include_str!("../../../hack/tools/k8s-node/go.mod"),
            ),
            Self::Coredns => (
                "hack/tools/coredns",
                include_str!("../../../hack/tools/coredns/go.mod"),
            ),
            Self::KubernetesRelease(minor) => other_release(KUBERNETES_RELEASES, minor),
            Self::EtcdRelease(minor) => other_release(ETCD_RELEASES, minor),
            Self::KubernetesNodeRelease(minor) => other_release(KUBERNETES_NODE_RELEASES, minor),
            Self::CorednsRelease(minor) => other_release(COREDNS_RELEASES, minor),
        }
    }

    /// The module whose version names the release.
    fn module(self) -> &'static str {
        match self {
            Self::Kubernetes
            | Self::KubeadmV1beta3
            | Self::KubernetesNode
            | Self::KubernetesRelease(_)
            | Self::KubernetesNodeRelease(_) => "k8s.io/kubernetes",
            Self::Coredns | Self::CorednsRelease(_) => "github.com/coredns/coredns",
            Self::Etcd | Self::EtcdRelease(_) => "go.etcd.io/etcd/server/v3",
            Self::ClusterApi | Self::ClusterctlEnvsubst => "sigs.k8s.io/cluster-api",
            Self::Kustomize => "sigs.k8s.io/kustomize/kustomize/v5",
            Self::Versitygw => "github.com/versity/versitygw",
        }
    }

    /// The pinned version, as go.mod writes it (`v1.34.4`, `v3.6.16`).
    pub fn version(self) -> String {
        let (dir, go_mod) = self.go_mod();
        required_version(go_mod, self.module())
            .unwrap_or_else(|| panic!("{dir}/go.mod does not require {}", self.module()))
    }
}

fn other_release(releases: &[OtherRelease], minor: u32) -> (&'static str, &'static str) {
    let release = releases
        .iter()
        .find(|r| r.minor == minor)
        .unwrap_or_else(|| panic!("no release module of minor {minor}"));
    (release.dir, release.go_mod)
}

/// The version `go_mod` requires `module` at: a `require M V` line or a line `M V` of a require block.
fn required_version(go_mod: &str, module: &str) -> Option<String> {
    go_mod.lines().find_map(|line| {
        let mut words = line
            .trim()
            .trim_start_matches("require ")
            .split_whitespace();
        (words.next() == Some(module))
            .then(|| words.next())
            .flatten()
            .filter(|v| v.starts_with('v'))
            .map(str::to_owned)
    })
}

/// How to ask `name`, built at `version`, for its version: the binary to ask (itself, or for Cluster API's
/// core manager, which has no version flag, the clusterctl built beside it from the same module), the
/// arguments, and the line it must answer.
fn version_question(
    name: &str,
    version: &str,
) -> (Option<&'static str>, &'static [&'static str], String) {
    let bare = version.trim_start_matches('v');
    match name {
        "kube-apiserver"
        | "kubelet"
        | "kube-controller-manager"
        | "kube-scheduler"
        | "kube-proxy" => (None, &["--version"], format!("Kubernetes {version}")),
        "pause" => (None, &["-v"], "pause".into()),
        "coredns" => (None, &["-version"], format!("CoreDNS-{bare}")),
        "kubeadm" | "kubeadm-v1beta3" => (None, &["version", "-o", "short"], version.into()),
        "sim-kubelet" => (None, &["--version"], version.into()),
        "etcd" => (None, &["--version"], format!("etcd Version: {bare}")),
        "etcdctl" | "etcdutl" => (None, &["version"], format!("{name} version: {bare}")),
        crate::capi::CORE_MANAGER => (
            Some("clusterctl"),
            &["version", "-o", "short"],
            version.into(),
        ),
        "kustomize" => (None, &["version"], version.into()),
        "clusterctl-envsubst" => (None, &["--version"], version.into()),
        "versitygw" => (None, &["--version"], format!("Version  : {version}")),
        other => panic!("no version question for {other}"),
    }
}

/// The binary that answers for `path` (see [`version_question`]).
fn asked(path: &Path, instead: Option<&str>) -> PathBuf {
    instead.map_or_else(|| path.to_owned(), |other| path.with_file_name(other))
}

/// What `binary` says its version is: the line of its answer (stdout and stderr together) that is the
/// expected one, else its first line.
fn says(binary: &Path, args: &[&str], expected: &str) -> String {
    match std::process::Command::new(binary).args(args).output() {
        Ok(out) => {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let lines: Vec<&str> = text.lines().map(str::trim).collect();
            lines
                .iter()
                .find(|l| l.starts_with(expected))
                .or(lines.first())
                .map_or_else(String::new, |l| (*l).to_owned())
        }
        Err(e) => format!("could not run: {e}"),
    }
}

/// The binaries chosen so far in this process by the variable that overrides each; each is named once,
/// with its version, when first chosen, so a test's output says what it ran against.
static CHOSEN: std::sync::Mutex<Vec<(&'static str, PathBuf)>> = std::sync::Mutex::new(Vec::new());

fn remember(env: &'static str, name: &str, version: &str, path: &Path) {
    let mut chosen = CHOSEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !chosen.iter().any(|(e, _)| *e == env) {
        // "etcd Version: 3.4.23" names itself; "v1.34.4" does not.
        let what = if version.starts_with(name) {
            version.to_owned()
        } else {
            format!("{name} {version}")
        };
        eprintln!("testenv: {what} at {}", path.display());
        chosen.push((env, path.to_owned()));
    }
}

fn chosen(env: &str) -> Option<PathBuf> {
    CHOSEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .find(|(e, _)| *e == env)
        .map(|(_, p)| p.clone())
}

/// `$env` if set (must be executable; its version is named, not checked), else the cached
/// `tools-*/bin/<name>` that says it is the version `module`'s go.mod pins (the newest such build, when
/// earlier checkouts left several), with a hint naming `hack/install-testenv.sh` when there is none.
fn current_tool(name: &str, env: &'static str, module: ToolModule) -> Result<PathBuf, Error> {
    if let Some(path) = chosen(env) {
        return Ok(path);
    }
    let (dir, _) = module.go_mod();
    let version = module.version();
    if std::env::var_os(env).is_some() {
        let path = find(name, env, None)?;
        let (instead, args, expected) = version_question(name, &version);
        remember(
            env,
            name,
            &says(&asked(&path, instead), args, &expected),
            &path,
        );
        return Ok(path);
    }
    let root = cache_root();
    match build_of_version(&root, name, &version) {
        Ok(path) => {
            remember(env, name, &version, &path);
            Ok(path)
        }
        Err(others) => Err(Error::MissingBinary {
            name: format!("{name} {version}"),
            hint: format!(
                "no {}/tools-*/bin/{name} of the version {dir}/go.mod pins{}; run `hack/install-testenv.sh{}` \
                 (builds it with the machine's Go; it names any module the Go module proxy does not \
                 serve), or set ${env}",
                root.display(),
                if others.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", others.join(", "))
                },
                match module {
                    ToolModule::KubernetesNode | ToolModule::Coredns => " nodes",
                    ToolModule::KubernetesNodeRelease(_) | ToolModule::CorednsRelease(_) => {
                        " nodes node-releases"
                    }
                    _ => "",
                }
            ),
        }),
    }
}

/// The newest `<root>/tools-*/bin/<name>` that says it is `version`, or what each other build said.
fn build_of_version(root: &Path, name: &str, version: &str) -> Result<PathBuf, Vec<String>> {
    let (instead, args, expected) = version_question(name, version);
    let mut others = Vec::new();
    let mut matching = Vec::new();
    for path in cached_tools(root, name) {
        let said = says(&asked(&path, instead), args, &expected);
        if said == expected {
            matching.push(path);
        } else {
            others.push(format!("{} says '{said}'", path.display()));
        }
    }
    matching
        .into_iter()
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p)
        .ok_or(others)
}

/// The executables `<root>/tools-*/bin/<name>` (unfinished `*.tmp` builds skipped).
fn cached_tools(root: &Path, name: &str) -> Vec<PathBuf> {
    std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("tools-") && !n.ends_with(".tmp"))
        })
        .map(|entry| entry.path().join("bin").join(name))
        .filter(|path| is_executable(path))
        .collect()
}

/// The most recently modified executable `<root>/tools-*/bin/<name>`: for ignition-check, whose folder is
/// named by a hash of its sources and which `hack/install-testenv.sh` touches on every run.
fn newest_cached_tool(root: &Path, name: &str) -> Option<PathBuf> {
    cached_tools(root, name)
        .into_iter()
        .filter_map(|path| Some((path.metadata().ok()?.modified().ok()?, path)))
        .max()
        .map(|(_, path)| path)
}

fn find(name: &str, env: &str, cached: Option<&Path>) -> Result<PathBuf, Error> {
    if let Some(path) = std::env::var_os(env) {
        let path = PathBuf::from(path);
        return if is_executable(&path) {
            Ok(path)
        } else {
            Err(Error::MissingBinary {
                name: name.into(),
                hint: format!(
                    "${env} points at {} which is not an executable file",
                    path.display()
                ),
            })
        };
    }
    if let Some(path) = cached.filter(|p| is_executable(p)) {
        return Ok(path.to_owned());
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p));
    on_path.ok_or_else(|| Error::MissingBinary {
        name: name.into(),
        hint: match cached {
            Some(c) => format!(
                "not at {} nor on PATH; {INSTALL_HINT}, or set ${env}",
                c.display()
            ),
            None => format!("not on PATH; {INSTALL_HINT}, or set ${env}"),
        },
    })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn versions_and_image_tags_name_their_minor() {
        assert_eq!(minor_of("v1.37.2"), Some(37));
        assert_eq!(minor_of("1.35.4"), Some(35));
        assert_eq!(minor_of("3.7.0-0"), Some(7));
        assert_eq!(minor_of("latest"), None);
    }

    /// Each other release's go.mod pins the minor its entry says, and none repeats the current release.
    #[test]
    fn release_modules_pin_the_minor_they_are_listed_under() {
        let current = minor_of(&ToolModule::Kubernetes.version());
        for release in KUBERNETES_RELEASES {
            let pinned = ToolModule::KubernetesRelease(release.minor).version();
            assert_eq!(minor_of(&pinned), Some(release.minor), "{}", release.dir);
            assert_ne!(
                Some(release.minor),
                current,
                "{} is the current release",
                release.dir
            );
        }
        // A real node runs the kubelet of the release its kubeadm and kube-apiserver are, to the patch.
        for node in KUBERNETES_NODE_RELEASES {
            assert_eq!(
                ToolModule::KubernetesNodeRelease(node.minor).version(),
                ToolModule::KubernetesRelease(node.minor).version(),
                "{} and hack/tools/k8s-1.{} pin different patches",
                node.dir,
                node.minor
            );
        }
        assert_eq!(
            KUBERNETES_NODE_RELEASES
                .iter()
                .map(|r| r.minor)
                .collect::<Vec<_>>(),
            KUBERNETES_RELEASES
                .iter()
                .map(|r| r.minor)
                .collect::<Vec<_>>(),
            "every release simulated nodes run has the node components of real nodes"
        );
        assert_eq!(
            COREDNS_RELEASES.iter().map(|r| r.minor).collect::<Vec<_>>(),
            KUBERNETES_RELEASES
                .iter()
                .map(|r| r.minor)
                .collect::<Vec<_>>(),
            "every release simulated nodes run has the CoreDNS its kubeadm deploys"
        );
        let current_etcd = minor_of(&ToolModule::Etcd.version());
        for release in ETCD_RELEASES {
            let pinned = ToolModule::EtcdRelease(release.minor).version();
            assert_eq!(minor_of(&pinned), Some(release.minor), "{}", release.dir);
            assert_ne!(
                Some(release.minor),
                current_etcd,
                "{} is the current release",
                release.dir
            );
        }
    }

    #[test]
    fn every_tool_module_pins_a_version() {
        for module in [
            ToolModule::Kubernetes,
            ToolModule::KubeadmV1beta3,
            ToolModule::Etcd,
            ToolModule::ClusterApi,
            ToolModule::Kustomize,
            ToolModule::ClusterctlEnvsubst,
            ToolModule::Versitygw,
        ] {
            let version = module.version();
            assert!(
                version.starts_with('v') && version.matches('.').count() == 2,
                "{module:?}: {version}"
            );
        }
        let go_mod = "module x\nrequire k8s.io/kubernetes v1.30.14\nrequire (\n\tgo.etcd.io/etcd/server/v3 v3.6.16 // indirect\n)\n";
        assert_eq!(
            required_version(go_mod, "k8s.io/kubernetes").as_deref(),
            Some("v1.30.14")
        );
        assert_eq!(
            required_version(go_mod, "go.etcd.io/etcd/server/v3").as_deref(),
            Some("v3.6.16")
        );
        assert_eq!(required_version(go_mod, "k8s.io/api"), None);
    }

    /// A build of another version is never taken, however new; the newest of the right version is.
    #[test]
    fn a_cached_build_is_chosen_by_the_version_it_says_not_by_its_age() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let build = |dir: &str, says: &str| {
            let bin = root.path().join(dir).join("bin");
            std::fs::create_dir_all(&bin).unwrap();
            let path = bin.join("kubeadm");
            std::fs::write(&path, format!("#!/bin/sh\necho {says}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            path
        };
        let right = build("tools-k8s-aaaa", "v1.34.4");
        std::thread::sleep(Duration::from_millis(20));
        build("tools-k8s-bbbb", "v1.35.0");
        build("tools-k8s-cccc.tmp", "v1.34.4");
        assert_eq!(
            build_of_version(root.path(), "kubeadm", "v1.34.4").unwrap(),
            right
        );
        let others = build_of_version(root.path(), "kubeadm", "v1.36.1").unwrap_err();
        assert_eq!(others.len(), 2, "{others:?}");
        assert!(
            others.iter().any(|o| o.ends_with("says 'v1.35.0'")),
            "{others:?}"
        );
    }
}
