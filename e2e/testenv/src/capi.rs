//! Cluster API's own release as `hack/install-testenv.sh` builds it from `hack/tools/capi`: the core
//! manager, clusterctl, the kubeadm bootstrap and control-plane managers, and each manager's CRDs,
//! webhook manifests and kustomization (its release components) copied from the same module. [`start_core`] runs the core manager against a
//! management plane the way its release manifests would, minus the Pod: its CRDs with their conversion
//! webhook, its admission webhooks, and the process serving both on loopback.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, WebhookClientConfig, WebhookConversion,
};
use kube::Resource;

use crate::manager::{ManagerProcess, WebhookServing};
use crate::{Error, ManagementPlane, Result};

/// The manager binaries of a Cluster API release.
pub const CORE_MANAGER: &str = "cluster-api-manager";
pub const CLUSTERCTL: &str = "clusterctl";
pub const KUBEADM_BOOTSTRAP_MANAGER: &str = "capi-kubeadm-bootstrap-manager";
pub const KUBEADM_CONTROL_PLANE_MANAGER: &str = "capi-kubeadm-control-plane-manager";

/// Which manager's manifests: `config/<part>/{crd,webhook}` of the cached release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Core,
    KubeadmBootstrap,
    KubeadmControlPlane,
}

impl Part {
    /// The manager binary of this part.
    pub fn binary(self) -> &'static str {
        match self {
            Part::Core => CORE_MANAGER,
            Part::KubeadmBootstrap => KUBEADM_BOOTSTRAP_MANAGER,
            Part::KubeadmControlPlane => KUBEADM_CONTROL_PLANE_MANAGER,
        }
    }

    /// The names of this manager's mutating and validating webhook configurations, as
    /// [`ClusterApi::webhooks`] registers them.
    pub fn webhook_configurations(self) -> [String; 2] {
        let prefix = format!("capi-{}", self.folder());
        [
            format!("{prefix}-mutating-webhook-configuration"),
            format!("{prefix}-validating-webhook-configuration"),
        ]
    }

    fn folder(self) -> &'static str {
        match self {
            Part::Core => "core",
            Part::KubeadmBootstrap => "bootstrap",
            Part::KubeadmControlPlane => "controlplane",
        }
    }
}

/// A cached Cluster API release: `<dir>/bin/*` and `<dir>/config/*`.
#[derive(Clone, Debug)]
pub struct ClusterApi {
    dir: PathBuf,
}

impl ClusterApi {
    /// The release of [`crate::binaries::cluster_api_manager`] (`$CLUSTER_API_MANAGER`, else the cached
    /// build of the version `hack/tools/capi` pins), with clusterctl and Cluster API's kubeadm managers
    /// next to it.
    pub fn find() -> Result<Self> {
        let release = Self::find_core()?;
        let core = release.binary(CORE_MANAGER);
        for bin in [
            CLUSTERCTL,
            KUBEADM_BOOTSTRAP_MANAGER,
            KUBEADM_CONTROL_PLANE_MANAGER,
        ] {
            let path = release.binary(bin);
            if !path.is_file() {
                return Err(Error::MissingBinary {
                    name: bin.into(),
                    hint: format!(
                        "{} is missing next to {}; run `hack/install-testenv.sh`",
                        path.display(),
                        core.display()
                    ),
                });
            }
        }
        Ok(release)
    }

    /// [`ClusterApi::find`] for what runs only the core manager ([`start_core`], `make quickstart`):
    /// `hack/install-testenv.sh quickstart` builds no kubeadm managers of Cluster API.
    pub fn find_core() -> Result<Self> {
        let core = crate::binaries::cluster_api_manager()?;
        let dir = core
            .parent()
            .and_then(Path::parent)
            .expect("a binary under <dir>/bin")
            .to_path_buf();
        Ok(Self { dir })
    }

    pub fn binary(&self, name: &str) -> PathBuf {
        self.dir.join("bin").join(name)
    }

    /// The release's version as clusterctl reports it (e.g. `v1.14.2`).
    pub fn version(&self) -> Result<String> {
        let out = std::process::Command::new(self.binary(CLUSTERCTL))
            .args(["version", "-o", "short"])
            .output()
            .map_err(|e| Error::io("clusterctl version", e))?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// A provider's components as its release ships them (`core-components.yaml`,
    /// `bootstrap-components.yaml`, `control-plane-components.yaml`): what `kustomize build` makes of
    /// the module's `<part>/config/default`, clusterctl variables unfilled, with the image and pull
    /// policy its release sets ([`as_released`]).
    pub fn components(&self, part: Part) -> Result<String> {
        let kustomize = crate::binaries::kustomize()?;
        let folder = self
            .dir
            .join("config")
            .join(part.folder())
            .join("kustomize/default");
        if !folder.is_dir() {
            return Err(Error::Other(format!(
                "{} is missing: the release was cached before its kustomizations were copied; run \
                 `hack/install-testenv.sh`",
                folder.display()
            )));
        }
        let out = std::process::Command::new(&kustomize)
            .arg("build")
            .arg(&folder)
            .output()
            .map_err(|e| Error::io(format!("run {}", kustomize.display()), e))?;
        if !out.status.success() {
            return Err(Error::Other(format!(
                "kustomize build {}: {}",
                folder.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let built = String::from_utf8(out.stdout)
            .map_err(|e| Error::Other(format!("kustomize build {}: {e}", folder.display())))?;
        Ok(as_released(&built, &self.version()?))
    }

    /// The release's `metadata.yaml` (its release series and their contracts), as clusterctl reads it
    /// next to the components.
    pub fn metadata_yaml(&self) -> Result<String> {
        let file = self.dir.join("config/metadata.yaml");
        std::fs::read_to_string(&file).map_err(|e| Error::io(format!("read {}", file.display()), e))
    }

    /// The CRDs of one manager as its release ships them: generated, with the labels of the CRDs'
    /// kustomization (the contract labels); no conversion webhook yet (see [`with_conversion_at`]).
    pub fn crds(&self, part: Part) -> Result<Vec<CustomResourceDefinition>> {
        let labels = self.crd_labels(part)?;
        let folder = self.dir.join("config").join(part.folder()).join("crd");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&folder)
            .map_err(|e| Error::io(format!("read {}", folder.display()), e))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        files
            .iter()
            .map(|file| {
                let mut crd: CustomResourceDefinition = read_yaml(file)?;
                crd.meta_mut()
                    .labels
                    .get_or_insert_with(Default::default)
                    .extend(labels.clone());
                Ok(crd)
            })
            .collect()
    }

    /// The `labels[].pairs` of the kustomization of one manager's CRDs.
    fn crd_labels(&self, part: Part) -> Result<std::collections::BTreeMap<String, String>> {
        let file = self
            .dir
            .join("config")
            .join(part.folder())
            .join("crd-kustomization.yaml");
        let kustomization: serde_json::Value = read_yaml(&file)?;
        let mut labels = std::collections::BTreeMap::new();
        for entry in kustomization["labels"].as_array().into_iter().flatten() {
            for (key, value) in entry["pairs"].as_object().into_iter().flatten() {
                let value = value.as_str().ok_or_else(|| {
                    Error::Other(format!("{}: label {key} is not a string", file.display()))
                })?;
                labels.insert(key.clone(), value.to_owned());
            }
        }
        Ok(labels)
    }

    /// The admission webhooks of one manager, each pointed at `serving` and named after the manager
    /// so that they sit next to other managers' configurations.
    pub fn webhooks(
        &self,
        part: Part,
        serving: &WebhookServing,
    ) -> Result<(MutatingWebhookConfiguration, ValidatingWebhookConfiguration)> {
        let file = self
            .dir
            .join("config")
            .join(part.folder())
            .join("webhook/manifests.yaml");
        let text = std::fs::read_to_string(&file)
            .map_err(|e| Error::io(format!("read {}", file.display()), e))?;
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text)
            .map_err(|e| Error::Other(format!("{}: {e}", file.display())))?;
        let mut mutating = None;
        let mut validating = None;
        for doc in docs.into_iter().filter(|d| !d.is_null()) {
            match doc["kind"].as_str() {
                Some("MutatingWebhookConfiguration") => {
                    mutating = Some(from_value::<MutatingWebhookConfiguration>(doc, &file)?)
                }
                Some("ValidatingWebhookConfiguration") => {
                    validating = Some(from_value::<ValidatingWebhookConfiguration>(doc, &file)?)
                }
                other => {
                    return Err(Error::Other(format!(
                        "{}: unexpected document of kind {other:?}",
                        file.display()
                    )));
                }
            }
        }
        let (Some(mut mutating), Some(mut validating)) = (mutating, validating) else {
            return Err(Error::Other(format!(
                "{}: expected one mutating and one validating configuration",
                file.display()
            )));
        };
        let [mutating_name, validating_name] = part.webhook_configurations();
        mutating.meta_mut().name = Some(mutating_name);
        validating.meta_mut().name = Some(validating_name);
        crate::webhooks::mutating_at(&mut mutating, &serving.url(), &serving.ca_pem)?;
        crate::webhooks::validating_at(&mut validating, &serving.url(), &serving.ca_pem)?;
        Ok((mutating, validating))
    }
}

/// The CRD with its versions converted by the webhook at `serving` (`/convert`), as the release's
/// kustomize patches configure every CRD serving more than one version.
pub fn with_conversion_at(
    mut crd: CustomResourceDefinition,
    serving: &WebhookServing,
) -> Result<CustomResourceDefinition> {
    if crd.spec.versions.len() > 1 {
        crd.spec.conversion = Some(CustomResourceConversion {
            strategy: "Webhook".into(),
            webhook: Some(WebhookConversion {
                conversion_review_versions: vec!["v1".into()],
                client_config: Some(WebhookClientConfig {
                    url: Some(format!("{}/convert", serving.url())),
                    ca_bundle: Some(ByteString(serving.ca_pem.as_bytes().to_vec())),
                    service: None,
                }),
            }),
        });
    }
    Ok(crd)
}

/// Installs Cluster API's core CRDs (conversion through the manager), registers its admission webhooks
/// and starts `cluster-api-manager` with `extra_args`, logging into the plane's folder; returns once
/// it answers `/readyz`. The topology controller (`ClusterTopology`) is on, as clusterctl users enable
/// it for ClusterClass.
pub async fn start_core(
    plane: &ManagementPlane,
    release: &ClusterApi,
    extra_args: &[&str],
) -> Result<ManagerProcess> {
    let mut args = vec!["--feature-gates=ClusterTopology=true"];
    args.extend_from_slice(extra_args);
    start_manager(plane, release, Part::Core, &args).await
}

/// Like [`start_core`] for any of the release's managers: its CRDs (conversion through it), its
/// admission webhooks, and the process (`capi-kubeadm-bootstrap-manager` and
/// `capi-kubeadm-control-plane-manager` are the peer of ours).
pub async fn start_manager(
    plane: &ManagementPlane,
    release: &ClusterApi,
    part: Part,
    extra_args: &[&str],
) -> Result<ManagerProcess> {
    let binary = present_binary(release, part)?;
    let serving = serving_for(plane, part)?;
    let crds = release
        .crds(part)?
        .into_iter()
        .map(|crd| with_conversion_at(crd, &serving))
        .collect::<Result<Vec<_>>>()?;
    plane.install_crds(&crds).await?;
    let (mutating, validating) = release.webhooks(part, &serving)?;
    crate::webhooks::register(&plane.client().await?, &mutating, &validating).await?;
    launch(plane, &binary, serving, extra_args, None).await
}

/// A replica of one of the release's managers with leader election on, next to a manager that already
/// serves the kinds (its CRDs, conversion and webhooks stay as they are): it reconciles only while it
/// holds the Lease in `namespace`. controller-runtime takes a Lease's namespace only from the file a
/// Pod's service account mounts, so the replica runs in a mount namespace of its own where a fresh
/// `/run` holds that file; the host's `/run` is not touched, and the mount goes with the process.
pub async fn start_replica(
    plane: &ManagementPlane,
    release: &ClusterApi,
    part: Part,
    namespace: &str,
    extra_args: &[&str],
) -> Result<ManagerProcess> {
    let binary = present_binary(release, part)?;
    let serving = serving_for(plane, part)?;
    let mut args = vec!["--leader-elect"];
    args.extend_from_slice(extra_args);
    launch(plane, &binary, serving, &args, Some(namespace)).await
}

/// Where a pod finds its namespace, and so where controller-runtime looks for it.
const POD_NAMESPACE_FILE: &str = "/run/secrets/kubernetes.io/serviceaccount/namespace";

fn present_binary(release: &ClusterApi, part: Part) -> Result<PathBuf> {
    let binary = release.binary(part.binary());
    if !binary.is_file() {
        return Err(Error::MissingBinary {
            name: part.binary().into(),
            hint: format!(
                "{} is missing (`hack/install-testenv.sh quickstart` builds only the core manager and \
                 clusterctl); run `hack/install-testenv.sh`",
                binary.display()
            ),
        });
    }
    Ok(binary)
}

fn serving_for(plane: &ManagementPlane, part: Part) -> Result<WebhookServing> {
    // A port of its own names the certificate folder, so that replicas of one manager never share it.
    let port = crate::ports::free_port()?;
    WebhookServing::new(&plane.dir().join(format!("{}-{port}-certs", part.binary())))
}

/// Starts the manager `binary` with the flags that point it at `plane` and serve its webhooks with
/// `serving`, then `extra_args`; in a mount namespace whose pod namespace file says `pod_namespace`
/// when given. Returns once it answers `/readyz`.
async fn launch(
    plane: &ManagementPlane,
    binary: &Path,
    serving: WebhookServing,
    extra_args: &[&str],
    pod_namespace: Option<&str>,
) -> Result<ManagerProcess> {
    let health_port = crate::ports::free_port()?;
    let diagnostics_port = crate::ports::free_port()?;
    let mut args: Vec<String> = vec![
        "--kubeconfig".into(),
        plane.kubeconfig_path().display().to_string(),
        "--health-addr".into(),
        format!("127.0.0.1:{health_port}"),
        "--diagnostics-address".into(),
        format!("127.0.0.1:{diagnostics_port}"),
        "--insecure-diagnostics".into(),
        "--webhook-port".into(),
        serving.port.to_string(),
        "--webhook-cert-dir".into(),
        serving.cert_dir.display().to_string(),
    ];
    args.extend(extra_args.iter().map(|a| a.to_string()));
    let health_addr = format!("127.0.0.1:{health_port}");
    let mut manager = match pod_namespace {
        None => ManagerProcess::start_go(binary, &args, health_addr, serving, plane.dir())?,
        Some(namespace) => {
            let dir = Path::new(POD_NAMESPACE_FILE)
                .parent()
                .expect("a file in a folder");
            // unshare execs the shell, which execs the manager: the PID is the manager's.
            let script = format!(
                "mount -t tmpfs -o size=1m,mode=0755 run /run && mkdir -p {dir} && printf %s \"$1\" > {file} \
                 && shift && exec \"$@\"",
                dir = dir.display(),
                file = POD_NAMESPACE_FILE,
            );
            let mut command = std::process::Command::new("unshare");
            command
                .args([
                    "--mount",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    &script,
                    "sh",
                ])
                .arg(namespace)
                .arg(binary)
                .args(&args);
            let name = binary
                .file_name()
                .map(|n| format!("{}-replica", n.to_string_lossy()))
                .unwrap_or_else(|| "replica".into());
            ManagerProcess::spawn_named(&name, command, health_addr, Some(serving), plane.dir())?
        }
    };
    let timeout = crate::timeout_from_env("CAPI_READY_TIMEOUT", Duration::from_secs(90));
    manager.wait_ready(timeout).await?;
    Ok(manager)
}

fn read_yaml<T: serde::de::DeserializeOwned>(file: &Path) -> Result<T> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Error::io(format!("read {}", file.display()), e))?;
    serde_saphyr::from_str(&text).map_err(|e| Error::Other(format!("{}: {e}", file.display())))
}

fn from_value<T: serde::de::DeserializeOwned>(value: serde_json::Value, file: &Path) -> Result<T> {
    serde_json::from_value(value).map_err(|e| Error::Other(format!("{}: {e}", file.display())))
}

/// Where the module's kustomizations point a manager's image (a development build) and where a release
/// points it: Cluster API's `make release-manifests` sets the production registry and the release tag,
/// and the pull policy `IfNotPresent`, so that a node holding the image never asks a registry for it.
const DEVELOPMENT_REGISTRY: &str = "gcr.io/k8s-staging-cluster-api/";
const RELEASE_REGISTRY: &str = "registry.k8s.io/cluster-api/";

/// `components` (kustomize's output) as `version`'s release ships them: each manager image
/// `gcr.io/k8s-staging-cluster-api/<name>:main` becomes `registry.k8s.io/cluster-api/<name>:<version>`,
/// and `imagePullPolicy: Always` becomes `IfNotPresent`.
pub fn as_released(components: &str, version: &str) -> String {
    components
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            let indent = &line[..line.len() - trimmed.len()];
            let (dash, rest) = match trimmed.strip_prefix("- ") {
                Some(rest) => ("- ", rest),
                None => ("", trimmed),
            };
            if let Some(image) = rest.strip_prefix("image: ")
                && let Some(name) = image
                    .strip_prefix(DEVELOPMENT_REGISTRY)
                    .and_then(|i| i.strip_suffix(":main"))
            {
                format!("{indent}{dash}image: {RELEASE_REGISTRY}{name}:{version}")
            } else if rest == "imagePullPolicy: Always" {
                format!("{indent}{dash}imagePullPolicy: IfNotPresent")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[cfg(test)]
mod release_tests {
    use super::as_released;

    #[test]
    fn a_development_image_becomes_the_release_image_pulled_only_when_missing() {
        let built = "spec:\n  containers:\n  - args:\n    - --leader-elect\n    \
                     image: gcr.io/k8s-staging-cluster-api/cluster-api-controller:main\n    \
                     imagePullPolicy: Always\n    name: manager\n  \
                     - image: gcr.io/k8s-staging-cluster-api/kubeadm-control-plane-controller:main\n";
        assert_eq!(
            as_released(built, "v1.14.2"),
            "spec:\n  containers:\n  - args:\n    - --leader-elect\n    \
             image: registry.k8s.io/cluster-api/cluster-api-controller:v1.14.2\n    \
             imagePullPolicy: IfNotPresent\n    name: manager\n  \
             - image: registry.k8s.io/cluster-api/kubeadm-control-plane-controller:v1.14.2\n"
        );
    }

    #[test]
    fn other_images_and_policies_stay() {
        let built = "image: example.org/other:main\nimagePullPolicy: Never\nname: Always\n";
        assert_eq!(as_released(built, "v1.14.2"), built);
    }
}
