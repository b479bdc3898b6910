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

pub fn etcd() -> Result<PathBuf, Error> {
    find("etcd", "ETCD", None)
}

pub fn etcdctl() -> Result<PathBuf, Error> {
    find("etcdctl", "ETCDCTL", None)
}

pub fn kube_apiserver() -> Result<PathBuf, Error> {
    let cached = cache_root()
        .join(format!("kubernetes-{KUBE_VERSION}-{KUBE_RECIPE}"))
        .join("bin/kube-apiserver");
    find("kube-apiserver", "KUBE_APISERVER", Some(&cached))
}

pub fn kubeadm() -> Result<PathBuf, Error> {
    let cached = cache_root()
        .join(format!("kubernetes-{KUBE_VERSION}-{KUBE_RECIPE}"))
        .join("bin/kubeadm");
    find("kubeadm", "KUBEADM", Some(&cached))
}

/// `ignition-check` (`hack/tools/cmd/ignition-check`): transpiles Container Linux Configs and validates
/// Ignition 2.3 configs with the Flatcar libraries Cluster API's kubeadm bootstrap provider uses.
/// `$IGNITION_CHECK` overrides; otherwise the newest `tools-*/bin/ignition-check` under [`cache_root`].
/// `hack/install-testenv.sh` builds one folder per hash of `hack/tools` and touches the current binary on
/// every run, so the newest is the one for the checked-out sources.
pub fn ignition_check() -> Result<PathBuf, Error> {
    const NAME: &str = "ignition-check";
    const ENV: &str = "IGNITION_CHECK";
    if std::env::var_os(ENV).is_some() {
        return find(NAME, ENV, None);
    }
    let root = cache_root();
    newest_cached_tool(&root, NAME).ok_or_else(|| Error::MissingBinary {
        name: NAME.into(),
        hint: format!(
            "no {}/tools-*/bin/{NAME}; run `hack/install-testenv.sh` (builds it from hack/tools with \
             Go >= 1.22), or set ${ENV}",
            root.display()
        ),
    })
}

/// kube-apiserver of the current Kubernetes release, built by `hack/install-testenv.sh` from
/// `hack/tools/k8s` (k8s.io/kubernetes as a Go module; its go.mod is the one place pinning the version).
/// `$KUBE_APISERVER_CURRENT` overrides; otherwise the newest `tools-*/bin/kube-apiserver` under
/// [`cache_root`]. Unlike [`kube_apiserver`], never the Debian-source build nor one on PATH.
pub fn kube_apiserver_current() -> Result<PathBuf, Error> {
    current_tool("kube-apiserver", "KUBE_APISERVER_CURRENT", K8S_CURRENT_FROM)
}

/// kubeadm of the current Kubernetes release, built with [`kube_apiserver_current`].
/// `$KUBEADM_CURRENT` overrides; otherwise the newest `tools-*/bin/kubeadm` under [`cache_root`].
pub fn kubeadm_current() -> Result<PathBuf, Error> {
    current_tool("kubeadm", "KUBEADM_CURRENT", K8S_CURRENT_FROM)
}

/// kubeadm 1.30, the last release that deploys the Kubernetes versions our renderer writes kubeadm API
/// v1beta3 for, built by `hack/install-testenv.sh` from `hack/tools/k8s-v1beta3` (binary
/// `kubeadm-v1beta3`). `$KUBEADM_V1BETA3` overrides.
pub fn kubeadm_v1beta3() -> Result<PathBuf, Error> {
    current_tool(
        "kubeadm-v1beta3",
        "KUBEADM_V1BETA3",
        "kubeadm-v1beta3 from hack/tools/k8s-v1beta3",
    )
}

/// etcd of the current release, built by `hack/install-testenv.sh` from `hack/tools/etcd`
/// (go.etcd.io/etcd/server/v3 as a Go module; its go.mod is the one place pinning the version).
/// `$ETCD_CURRENT` overrides; otherwise the newest `tools-*/bin/etcd` under [`cache_root`]. Unlike
/// [`etcd`], never Debian's etcd on PATH.
pub fn etcd_current() -> Result<PathBuf, Error> {
    current_tool("etcd", "ETCD_CURRENT", ETCD_CURRENT_FROM)
}

/// etcdctl of the same etcd release as [`etcd_current`]. `$ETCDCTL_CURRENT` overrides.
pub fn etcdctl_current() -> Result<PathBuf, Error> {
    current_tool("etcdctl", "ETCDCTL_CURRENT", ETCD_CURRENT_FROM)
}

/// etcdutl (snapshots, defragmentation of a stopped member) of the same etcd release as
/// [`etcd_current`]. `$ETCDUTL_CURRENT` overrides.
pub fn etcdutl_current() -> Result<PathBuf, Error> {
    current_tool("etcdutl", "ETCDUTL_CURRENT", ETCD_CURRENT_FROM)
}

/// `sim-kubelet` (`hack/tools/k8s/cmd/sim-kubelet`): the kubelet's port-forward endpoint for simulated
/// nodes, built with [`kube_apiserver_current`]. `$SIM_KUBELET` overrides.
pub fn sim_kubelet() -> Result<PathBuf, Error> {
    current_tool("sim-kubelet", "SIM_KUBELET", K8S_CURRENT_FROM)
}

/// Cluster API's core manager, built by `hack/install-testenv.sh` from `hack/tools/capi` next to clusterctl
/// and Cluster API's kubeadm managers (see [`crate::capi::ClusterApi`]). `$CLUSTER_API_MANAGER` overrides.
pub fn cluster_api_manager() -> Result<PathBuf, Error> {
    current_tool(
        crate::capi::CORE_MANAGER,
        "CLUSTER_API_MANAGER",
        "Cluster API's managers and clusterctl from hack/tools/capi",
    )
}

/// kustomize, built by `hack/install-testenv.sh` from `hack/tools/kustomize`: builds Cluster API's core
/// components from the release's `config/` (see [`crate::capi::ClusterApi::core_components`]).
/// `$KUSTOMIZE` overrides.
pub fn kustomize() -> Result<PathBuf, Error> {
    current_tool(
        "kustomize",
        "KUSTOMIZE",
        "kustomize from hack/tools/kustomize",
    )
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
    /// Kubernetes 1.20 takes `--insecure-port=0`; the flag is gone from current releases.
    pub legacy: bool,
}

/// The current releases ([`kube_apiserver_current`] on [`etcd_current`]) where both are built, else
/// the fallback ([`kube_apiserver`] 1.20 on Debian's [`etcd`]). `TESTENV_MANAGEMENT=legacy` picks the
/// fallback on purpose, e.g. to compare.
pub fn management() -> Result<ManagementBinaries, Error> {
    let legacy_wanted = std::env::var("TESTENV_MANAGEMENT").is_ok_and(|v| v == "legacy");
    if !legacy_wanted
        && let (Ok(kube_apiserver), Ok(etcd)) = (kube_apiserver_current(), etcd_current())
    {
        return Ok(ManagementBinaries {
            kube_apiserver,
            etcd,
            legacy: false,
        });
    }
    Ok(ManagementBinaries {
        kube_apiserver: kube_apiserver()?,
        etcd: etcd()?,
        legacy: true,
    })
}

const K8S_CURRENT_FROM: &str = "kube-apiserver and kubeadm from hack/tools/k8s";
const ETCD_CURRENT_FROM: &str = "etcd, etcdctl and etcdutl from hack/tools/etcd";

/// `$env` if set (must be executable), else the newest cached `tools-*/bin/<name>`, with a hint naming
/// `hack/install-testenv.sh` when there is none.
fn current_tool(name: &str, env: &str, from: &str) -> Result<PathBuf, Error> {
    if std::env::var_os(env).is_some() {
        return find(name, env, None);
    }
    let root = cache_root();
    newest_cached_tool(&root, name).ok_or_else(|| Error::MissingBinary {
        name: name.into(),
        hint: format!(
            "no {}/tools-*/bin/{name}; run `hack/install-testenv.sh` (builds {from} with the machine's \
             Go; it names any module the Go module proxy does not serve), or set ${env}",
            root.display()
        ),
    })
}

/// The most recently modified executable `<root>/tools-*/bin/<name>` (unfinished `*.tmp` builds skipped).
fn newest_cached_tool(root: &Path, name: &str) -> Option<PathBuf> {
    std::fs::read_dir(root)
        .ok()?
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("tools-") && !n.ends_with(".tmp"))
        })
        .map(|entry| entry.path().join("bin").join(name))
        .filter(|path| is_executable(path))
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
