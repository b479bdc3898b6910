//! Providers installed by Cluster API's own `clusterctl init` from a local repository, then brought to
//! life the way a management cluster would, by the parts of one this environment does not run:
//!
//! - **cert-manager**: [`install_cert_manager_crds`] gives the API server cert-manager's `Issuer` and
//!   `Certificate` kinds, so that clusterctl finds cert-manager answering and installs none;
//!   [`issue_certificates`] then does what cert-manager and its CA injector would: a serving
//!   certificate Secret for every `Certificate`, and the CA in every object annotated
//!   `cert-manager.io/inject-ca-from`.
//! - **kube-controller-manager's ClusterRole aggregation**: [`aggregate_cluster_roles`]; and its
//!   namespace controller for the one namespace clusterctl deletes itself: [`finish_cert_manager_check`].
//! - **the kubelet and the Service network**: [`run_deployment`] starts an installed Deployment's
//!   `manager` container as a local process with the container's command, arguments and environment,
//!   authenticated as the Deployment's ServiceAccount, its serving certificate from the mounted Secret;
//!   only what binds a port moves to free ports. EndpointSlices for the Deployment's Services point at
//!   that process on a non-loopback `host` address (endpoints refuse loopback), and kube-apiserver
//!   reaches the webhooks through the Services when it runs with `--enable-aggregator-routing=true`
//!   ([`APISERVER_ARGS`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Container, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};

use crate::capi::{CLUSTERCTL, ClusterApi, Part};
use crate::manager::{ManagerProcess, WebhookServing};
use crate::pki::{Ca, Usage};
use crate::{Error, ManagementPlane, Result, ports};

/// kube-apiserver flags a plane needs for [`run_deployment`]: webhook Services resolve to their
/// endpoints (there is no kube-proxy for a ClusterIP).
pub const APISERVER_ARGS: &[&str] = &["--enable-aggregator-routing=true"];

/// The annotation cert-manager's CA injector reads: `<namespace>/<Certificate name>`.
const INJECT_CA_FROM: &str = "cert-manager.io/inject-ca-from";
const FIELD_MANAGER: &str = "testenv-clusterctl";

/// One provider of a local repository: `<dir>/<label>/<version>/` holding `files`
/// (`(file name, content)`), the components file among them.
pub struct RepositoryProvider {
    /// The name clusterctl knows it by (`cluster-api`, `kubeadm`, `sim`).
    pub name: String,
    /// `CoreProvider`, `BootstrapProvider`, `ControlPlaneProvider`, `InfrastructureProvider`.
    pub kind: String,
    /// The folder name: clusterctl's label for the provider (`cluster-api`, `bootstrap-kubeadm`, …).
    pub label: String,
    pub version: String,
    pub components_file: String,
    pub files: Vec<(String, String)>,
}

impl RepositoryProvider {
    /// Cluster API's core provider of `release`: `core-components.yaml` and `metadata.yaml`.
    pub fn core(release: &ClusterApi) -> Result<Self> {
        let components_file = "core-components.yaml".to_owned();
        Ok(Self {
            name: "cluster-api".into(),
            kind: "CoreProvider".into(),
            label: "cluster-api".into(),
            version: release.version()?,
            files: vec![
                (components_file.clone(), release.components(Part::Core)?),
                ("metadata.yaml".into(), release.metadata_yaml()?),
            ],
            components_file,
        })
    }

    /// Cluster API's kubeadm bootstrap or control-plane provider of `release` (`part`), named
    /// `kubeadm` as clusterctl's built-in entries are: its components and `metadata.yaml`.
    pub fn kubeadm(release: &ClusterApi, part: Part) -> Result<Self> {
        let (kind, label, components_file) = match part {
            Part::KubeadmBootstrap => (
                "BootstrapProvider",
                "bootstrap-kubeadm",
                "bootstrap-components.yaml",
            ),
            Part::KubeadmControlPlane => (
                "ControlPlaneProvider",
                "control-plane-kubeadm",
                "control-plane-components.yaml",
            ),
            Part::Core => return Self::core(release),
        };
        Ok(Self {
            name: "kubeadm".into(),
            kind: kind.into(),
            label: label.into(),
            version: release.version()?,
            files: vec![
                (components_file.into(), release.components(part)?),
                ("metadata.yaml".into(), release.metadata_yaml()?),
            ],
            components_file: components_file.into(),
        })
    }

    /// `<name>:<version>`, as `clusterctl init --core/--bootstrap/…` takes it.
    pub fn reference(&self) -> String {
        format!("{}:{}", self.name, self.version)
    }
}

/// A clusterctl local repository and the configuration file naming it (`providers:` overrides),
/// with clusterctl's own configuration folder beside them.
pub struct Repository {
    dir: PathBuf,
    config: PathBuf,
}

impl Repository {
    /// Writes `providers` below `dir` and `dir/clusterctl.yaml` pointing clusterctl at them, with
    /// `variables` (e.g. `CLUSTER_TOPOLOGY: "true"`) for the components. Several versions of one
    /// provider are several folders; clusterctl lists them, and its configuration names the first.
    pub fn create(
        dir: &Path,
        providers: &[RepositoryProvider],
        variables: &[(&str, &str)],
    ) -> Result<Self> {
        let mut config = String::from("providers:\n");
        for provider in providers {
            let folder = dir.join(&provider.label).join(&provider.version);
            std::fs::create_dir_all(&folder)
                .map_err(|e| Error::io(format!("create {}", folder.display()), e))?;
            for (name, content) in &provider.files {
                crate::write_file(&folder.join(name), content.as_bytes())?;
            }
            let named_before = providers
                .iter()
                .take_while(|p| !std::ptr::eq(*p, provider))
                .any(|p| p.name == provider.name && p.kind == provider.kind);
            if named_before {
                continue;
            }
            config.push_str(&format!(
                "  - name: {}\n    type: {}\n    url: {}\n",
                provider.name,
                provider.kind,
                folder.join(&provider.components_file).display()
            ));
        }
        for (name, value) in variables {
            config.push_str(&format!("{name}: {}\n", serde_json::Value::from(*value)));
        }
        // clusterctl picks its configuration reader by the file's extension.
        let path = dir.join("clusterctl.yaml");
        crate::write_file(&path, config.as_bytes())?;
        Ok(Self {
            dir: dir.to_path_buf(),
            config: path,
        })
    }

    pub fn config(&self) -> &Path {
        &self.config
    }

    /// `clusterctl ARGS… --config <this repository's configuration>`, with clusterctl's own
    /// configuration and cache in this folder and no look for a newer clusterctl.
    pub fn clusterctl(&self, release: &ClusterApi, args: &[&str]) -> Command {
        let mut command = Command::new(release.binary(CLUSTERCTL));
        command
            .args(args)
            .arg("--config")
            .arg(&self.config)
            .env("XDG_CONFIG_HOME", &self.dir)
            .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true");
        command
    }

    /// Runs `clusterctl ARGS… --kubeconfig <plane>`; its output (stdout, then stderr), or an error
    /// holding it.
    pub fn run(
        &self,
        release: &ClusterApi,
        plane: &ManagementPlane,
        args: &[&str],
    ) -> Result<String> {
        self.run_against(release, plane.kubeconfig_path(), args)
    }

    /// Runs `clusterctl ARGS… --kubeconfig <kubeconfig>` against any cluster (a management cluster of
    /// real nodes, say); its output (stdout, then stderr), or an error holding it.
    pub fn run_against(
        &self,
        release: &ClusterApi,
        kubeconfig: &Path,
        args: &[&str],
    ) -> Result<String> {
        let mut command = self.clusterctl(release, args);
        command.arg("--kubeconfig").arg(kubeconfig);
        let shown = format!("clusterctl {}", args.join(" "));
        let out = command
            .output()
            .map_err(|e| Error::io(format!("run {shown}"), e))?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() {
            Ok(text)
        } else {
            Err(Error::Other(format!(
                "{shown} failed ({}):\n{text}",
                out.status
            )))
        }
    }
}

/// cert-manager's `Issuer` and `Certificate` kinds (`cert-manager.io/v1`), schemaless: enough for
/// clusterctl's check that cert-manager answers, and for the providers' objects of those kinds.
pub async fn install_cert_manager_crds(client: &kube::Client) -> Result<()> {
    let crd = |kind: &str, plural: &str| -> Result<CustomResourceDefinition> {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.cert-manager.io")},
            "spec": {
                "group": "cert-manager.io",
                "scope": "Namespaced",
                "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                          "listKind": format!("{kind}List")},
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": true}}
                }]
            }
        }))
        .map_err(|e| Error::Other(format!("cert-manager CRD {plural}: {e}")))
    };
    crate::management::install_crds(
        client,
        &[
            crd("Issuer", "issuers")?,
            crd("Certificate", "certificates")?,
        ],
    )
    .await
}

/// What cert-manager and its CA injector would do for every `Certificate` in the plane: a
/// `kubernetes.io/tls` Secret named by `spec.secretName` (`tls.crt`, `tls.key`, `ca.crt`) for its
/// `dnsNames`, signed by a CA of its own, unless the Secret exists (as cert-manager keeps a valid
/// certificate); then, in every CRD conversion webhook and admission webhook configuration annotated
/// `cert-manager.io/inject-ca-from: <namespace>/<Certificate>`, the `ca.crt` of that Certificate's
/// Secret as `caBundle`. Idempotent: after `clusterctl upgrade` re-created the configurations, it
/// injects the same CAs again.
pub async fn issue_certificates(client: &kube::Client) -> Result<()> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "cert-manager.io",
        "v1",
        "Certificate",
    ));
    let certificates: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    // The CA of each Certificate, by `<namespace>/<name>`.
    let mut cas: BTreeMap<String, ByteString> = BTreeMap::new();
    for certificate in certificates.list(&ListParams::default()).await? {
        let namespace = certificate.namespace().unwrap_or_default();
        let name = certificate.name_any();
        let spec = &certificate.data["spec"];
        let secret_name = spec["secretName"].as_str().ok_or_else(|| {
            Error::Other(format!(
                "Certificate {namespace}/{name} has no spec.secretName"
            ))
        })?;
        let secrets = Api::<Secret>::namespaced(client.clone(), &namespace);
        let existing = secrets
            .get_opt(secret_name)
            .await?
            .and_then(|s| s.data?.get("ca.crt").cloned());
        let ca_pem = match existing {
            Some(ca) => ca,
            None => {
                let hosts: Vec<&str> = spec["dnsNames"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|n| n.as_str())
                    .collect();
                let ca = Ca::new(&format!("{namespace}/{name}"))?;
                let pair = ca.issue(
                    hosts.first().copied().unwrap_or("serving"),
                    None,
                    &hosts,
                    Usage::Server,
                )?;
                let ca_pem = ByteString(ca.cert_pem().as_bytes().to_vec());
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(secret_name.into()),
                        namespace: Some(namespace.clone()),
                        ..Default::default()
                    },
                    type_: Some("kubernetes.io/tls".into()),
                    data: Some(BTreeMap::from([
                        ("tls.crt".into(), ByteString(pair.cert_pem.into_bytes())),
                        ("tls.key".into(), ByteString(pair.key_pem.into_bytes())),
                        ("ca.crt".into(), ca_pem.clone()),
                    ])),
                    ..Default::default()
                };
                secrets
                    .patch(
                        secret_name,
                        &PatchParams::apply(FIELD_MANAGER).force(),
                        &Patch::Apply(&secret),
                    )
                    .await?;
                ca_pem
            }
        };
        cas.insert(format!("{namespace}/{name}"), ca_pem);
    }
    let injected = |meta: &ObjectMeta| -> Result<Option<ByteString>> {
        let Some(from) = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(INJECT_CA_FROM))
        else {
            return Ok(None);
        };
        cas.get(from).cloned().map(Some).ok_or_else(|| {
            Error::Other(format!(
                "{} asks for the CA of Certificate {from}, which does not exist",
                meta.name.as_deref().unwrap_or_default()
            ))
        })
    };

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for mut crd in crds.list(&ListParams::default()).await? {
        let Some(bundle) = injected(&crd.metadata)? else {
            continue;
        };
        let Some(config) = crate::webhooks::conversion_client(&mut crd) else {
            continue;
        };
        if config.ca_bundle.as_ref() != Some(&bundle) {
            config.ca_bundle = Some(bundle);
            crds.replace(&crd.name_any(), &Default::default(), &crd)
                .await?;
        }
    }
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    for mut config in mutating.list(&ListParams::default()).await? {
        let Some(bundle) = injected(&config.metadata)? else {
            continue;
        };
        for webhook in config.webhooks.iter_mut().flatten() {
            webhook.client_config.ca_bundle = Some(bundle.clone());
        }
        mutating
            .replace(&config.name_any(), &Default::default(), &config)
            .await?;
    }
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    for mut config in validating.list(&ListParams::default()).await? {
        let Some(bundle) = injected(&config.metadata)? else {
            continue;
        };
        for webhook in config.webhooks.iter_mut().flatten() {
            webhook.client_config.ca_bundle = Some(bundle.clone());
        }
        validating
            .replace(&config.name_any(), &Default::default(), &config)
            .await?;
    }
    Ok(())
}

/// The namespace of the test objects clusterctl creates and deletes to see that cert-manager answers.
const CERT_MANAGER_TEST_NAMESPACE: &str = "cert-manager-test";

/// What kube-controller-manager's namespace controller does for the namespace clusterctl deletes after
/// its cert-manager check (`cert-manager-test`, emptied by clusterctl itself): its `kubernetes`
/// finalizer goes, and with it the namespace. Without this, the namespace stays terminating, the next
/// `clusterctl init` cannot create its test objects in it, takes cert-manager for absent and tries to
/// download it.
pub async fn finish_cert_manager_check(client: &kube::Client) -> Result<()> {
    let namespaces = Api::<Namespace>::all(client.clone());
    let Some(mut namespace) = namespaces.get_opt(CERT_MANAGER_TEST_NAMESPACE).await? else {
        return Ok(());
    };
    if namespace.metadata.deletion_timestamp.is_none() {
        return Ok(());
    }
    if let Some(spec) = namespace.spec.as_mut() {
        spec.finalizers = None;
    }
    let body = serde_json::to_vec(&namespace).map_err(|e| Error::Other(e.to_string()))?;
    let request = http::Request::put(format!(
        "/api/v1/namespaces/{CERT_MANAGER_TEST_NAMESPACE}/finalize"
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(body)
    .map_err(|e| Error::Other(e.to_string()))?;
    client.request::<Namespace>(request).await?;
    Ok(())
}

/// What kube-controller-manager's ClusterRole aggregation controller does: every ClusterRole with an
/// aggregation rule gets the rules of the ClusterRoles its selectors match. An aggregated role that
/// matches nothing is an error: a provider's label or selector is wrong.
pub async fn aggregate_cluster_roles(client: &kube::Client) -> Result<()> {
    let api: Api<ClusterRole> = Api::all(client.clone());
    let roles = api.list(&ListParams::default()).await?.items;
    for aggregated in roles.iter().filter(|r| r.aggregation_rule.is_some()) {
        let selectors = aggregated
            .aggregation_rule
            .as_ref()
            .and_then(|a| a.cluster_role_selectors.clone())
            .unwrap_or_default();
        let matches =
            |role: &ClusterRole| {
                selectors.iter().any(|selector| {
                    selector.match_labels.iter().flatten().all(|(k, v)| {
                        role.metadata.labels.as_ref().and_then(|l| l.get(k)) == Some(v)
                    })
                })
            };
        let rules: Vec<_> = roles
            .iter()
            .filter(|r| r.aggregation_rule.is_none() && matches(r))
            .flat_map(|r| r.rules.clone().unwrap_or_default())
            .collect();
        if rules.is_empty() {
            return Err(Error::Other(format!(
                "ClusterRole {} aggregates nothing: no ClusterRole matches its selectors",
                aggregated.name_any()
            )));
        }
        api.patch(
            &aggregated.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({ "rules": rules })),
        )
        .await?;
    }
    Ok(())
}

/// A kubeconfig file in the plane's folder authenticating as `namespace/account`, with a token from
/// the TokenRequest API.
pub async fn service_account_kubeconfig(
    plane: &ManagementPlane,
    namespace: &str,
    account: &str,
) -> Result<PathBuf> {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = Api::<ServiceAccount>::namespaced(plane.client().await?, namespace)
        .create_token_request(account, &Default::default(), &request)
        .await?
        .status
        .ok_or_else(|| Error::Other(format!("no token for {namespace}/{account}")))?
        .token;
    let user = format!("system:serviceaccount:{namespace}:{account}");
    let path = plane
        .dir()
        .join(format!("{namespace}-{account}.kubeconfig"));
    crate::write_file(
        &path,
        plane
            .apiserver()
            .kubeconfig_with_token(&user, &token)
            .as_bytes(),
    )?;
    Ok(path)
}

/// How a manager binary takes the flags that bind ports and name its serving certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flags {
    /// Our managers: `run … --health-addr --webhook-port --webhook-bind-address --webhook-cert-dir`,
    /// the Lease in `--leader-election-namespace`.
    Ours,
    /// Cluster API's controller-runtime managers: `--health-addr --diagnostics-address --webhook-port
    /// --webhook-cert-dir`. They find their leader-election namespace only in a Pod's service account
    /// mount, so `--leader-elect` is dropped (one process runs anyway).
    ControllerRuntime,
}

/// The flags [`run_deployment`] sets itself; the Deployment's own values of them are dropped.
const LOCAL_FLAGS: &[&str] = &[
    "--health-addr",
    "--diagnostics-address",
    "--metrics-bind-addr",
    "--webhook-port",
    "--webhook-bind-address",
    "--webhook-cert-dir",
    "--leader-election-namespace",
];

/// Starts the `manager` container of the Deployment `namespace/name` as a local `binary` (see the
/// module documentation) with its Services' endpoints at `host`; returns once it answers `/readyz`.
pub async fn run_deployment(
    plane: &ManagementPlane,
    namespace: &str,
    name: &str,
    binary: &Path,
    flags: Flags,
    host: IpAddr,
) -> Result<ManagerProcess> {
    let client = plane.client().await?;
    let deployment = Api::<Deployment>::namespaced(client.clone(), namespace)
        .get(name)
        .await?;
    let what = format!("Deployment {namespace}/{name}");
    let pod = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.clone())
        .ok_or_else(|| Error::Other(format!("{what} has no pod template")))?;
    let pod_labels = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let container: &Container = pod
        .containers
        .iter()
        .find(|c| c.name == "manager")
        .ok_or_else(|| Error::Other(format!("{what} has no container named manager")))?;

    // The serving certificate: the Secret volume the container mounts.
    let local = plane.dir().join(format!("{namespace}-{name}"));
    let cert_dir = local.join("serving-certs");
    let secret_name = container
        .volume_mounts
        .iter()
        .flatten()
        .filter_map(|mount| {
            pod.volumes
                .iter()
                .flatten()
                .find(|v| v.name == mount.name)
                .and_then(|v| v.secret.as_ref())
                .and_then(|s| s.secret_name.clone())
        })
        .next()
        .ok_or_else(|| {
            Error::Other(format!(
                "{what} mounts no Secret volume for its webhook certificate"
            ))
        })?;
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get(&secret_name)
        .await?;
    std::fs::create_dir_all(&cert_dir)
        .map_err(|e| Error::io(format!("create {}", cert_dir.display()), e))?;
    for (key, value) in secret.data.iter().flatten() {
        crate::write_file(&cert_dir.join(key), &value.0)?;
    }
    let ca_pem = secret
        .data
        .as_ref()
        .and_then(|d| d.get("ca.crt"))
        .map(|ca| String::from_utf8_lossy(&ca.0).into_owned())
        .unwrap_or_default();

    let account = pod.service_account_name.as_deref().unwrap_or("default");
    let kubeconfig = service_account_kubeconfig(plane, namespace, account).await?;
    let health_addr = format!("127.0.0.1:{}", ports::free_port()?);
    let webhook = WebhookServing {
        port: ports::free_port()?,
        cert_dir: cert_dir.clone(),
        ca_pem,
    };

    let mut args: Vec<String> = container
        .args
        .iter()
        .flatten()
        .filter(|arg| {
            let flag = arg.split('=').next().unwrap_or_default();
            let dropped = LOCAL_FLAGS.contains(&flag)
                || (flags == Flags::ControllerRuntime && flag == "--leader-elect");
            !dropped
        })
        .cloned()
        .collect();
    args.push(format!("--kubeconfig={}", kubeconfig.display()));
    args.push(format!("--health-addr={health_addr}"));
    args.push(format!("--webhook-port={}", webhook.port));
    args.push(format!("--webhook-cert-dir={}", cert_dir.display()));
    match flags {
        Flags::Ours => {
            args.push(format!("--webhook-bind-address={host}"));
            args.push(format!("--leader-election-namespace={namespace}"));
        }
        Flags::ControllerRuntime => {
            args.push(format!(
                "--diagnostics-address=127.0.0.1:{}",
                ports::free_port()?
            ));
        }
    }
    let mut command = Command::new(binary);
    command.args(&args);
    for env in container.env.iter().flatten() {
        let value = match (
            &env.value,
            env.value_from.as_ref().and_then(|v| v.field_ref.as_ref()),
        ) {
            (Some(value), _) => value.clone(),
            (None, Some(field)) => match field.field_path.as_str() {
                "metadata.namespace" => namespace.to_owned(),
                "metadata.name" => format!("{name}-local"),
                "metadata.uid" => format!("local-{}", std::process::id()),
                _ => continue,
            },
            _ => continue,
        };
        command.env(&env.name, value);
    }

    route_services(
        &client,
        namespace,
        &pod_labels,
        container,
        webhook.port,
        host,
    )
    .await?;
    let mut manager = ManagerProcess::spawn(command, health_addr, Some(webhook), &local)?;
    manager
        .wait_ready(crate::timeout_from_env(
            "CAPI_READY_TIMEOUT",
            Duration::from_secs(90),
        ))
        .await?;
    Ok(manager)
}

/// An EndpointSlice for every Service in `namespace` selecting `pod_labels`, as the EndpointSlice
/// controller would write it for a ready Pod: each of the Service's ports whose target is the
/// container's webhook port goes to `webhook_port` at `host`.
async fn route_services(
    client: &kube::Client,
    namespace: &str,
    pod_labels: &BTreeMap<String, String>,
    container: &Container,
    webhook_port: u16,
    host: IpAddr,
) -> Result<()> {
    let container_port = |target: &IntOrString| -> Option<i32> {
        match target {
            IntOrString::Int(port) => Some(*port),
            IntOrString::String(name) => container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name))
                .map(|p| p.container_port),
        }
    };
    let webhook_container_port = container
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("webhook-server"))
        .map(|p| p.container_port)
        .unwrap_or(9443);
    let services = Api::<Service>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await?;
    for service in services {
        let Some(spec) = service.spec.as_ref() else {
            continue;
        };
        let selector = spec.selector.clone().unwrap_or_default();
        if selector.is_empty() || !selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)) {
            continue;
        }
        let ports: Vec<(Option<String>, i32)> = spec
            .ports
            .iter()
            .flatten()
            .filter(|p| {
                p.target_port.as_ref().map_or(Some(p.port), container_port)
                    == Some(webhook_container_port)
            })
            .map(|p| (p.name.clone(), i32::from(webhook_port)))
            .collect();
        if ports.is_empty() {
            continue;
        }
        let service_name = service.name_any();
        let slice = EndpointSlice {
            metadata: ObjectMeta {
                name: Some(format!("{service_name}-local")),
                namespace: Some(namespace.into()),
                labels: Some(BTreeMap::from([
                    ("kubernetes.io/service-name".into(), service_name.clone()),
                    (
                        "endpointslice.kubernetes.io/managed-by".into(),
                        FIELD_MANAGER.into(),
                    ),
                ])),
                ..Default::default()
            },
            address_type: if host.is_ipv4() { "IPv4" } else { "IPv6" }.into(),
            endpoints: vec![Endpoint {
                addresses: vec![host.to_string()],
                conditions: Some(EndpointConditions {
                    ready: Some(true),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ports: Some(
                ports
                    .iter()
                    .map(|(name, port)| EndpointPort {
                        name: name.clone(),
                        port: Some(*port),
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    })
                    .collect(),
            ),
        };
        let params = PatchParams::apply(FIELD_MANAGER).force();
        Api::<EndpointSlice>::namespaced(client.clone(), namespace)
            .patch(&slice.name_any(), &params, &Patch::Apply(&slice))
            .await?;
    }
    Ok(())
}

/// The `clusterctl.cluster.x-k8s.io/v1alpha3` Providers of clusterctl's inventory in the plane, as
/// `(namespace, providerName, type, version)`, sorted.
pub async fn inventory(plane: &ManagementPlane) -> Result<Vec<(String, String, String, String)>> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "clusterctl.cluster.x-k8s.io",
        "v1alpha3",
        "Provider",
    ));
    let providers: Api<DynamicObject> = Api::all_with(plane.client().await?, &resource);
    let field = |p: &DynamicObject, f: &str| p.data[f].as_str().unwrap_or_default().to_owned();
    let mut found: Vec<_> = providers
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|p| {
            (
                p.namespace().unwrap_or_default(),
                field(p, "providerName"),
                field(p, "type"),
                field(p, "version"),
            )
        })
        .collect();
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(name: &str, kind: &str, version: &str) -> RepositoryProvider {
        RepositoryProvider {
            name: name.into(),
            kind: kind.into(),
            label: format!("{}-{name}", kind.to_lowercase()),
            version: version.into(),
            components_file: "components.yaml".into(),
            files: vec![("components.yaml".into(), format!("# {version}\n"))],
        }
    }

    #[test]
    fn a_repository_holds_every_version_and_its_configuration_names_each_provider_once() {
        let dir = tempfile::tempdir().unwrap();
        let repository = Repository::create(
            dir.path(),
            &[
                provider("kubeadm", "BootstrapProvider", "v0.1.0"),
                provider("sim", "InfrastructureProvider", "v0.1.0"),
                provider("kubeadm", "BootstrapProvider", "v0.2.0"),
            ],
            &[("CLUSTER_TOPOLOGY", "true")],
        )
        .unwrap();
        let config = std::fs::read_to_string(repository.config()).unwrap();
        let root = dir.path().display();
        assert_eq!(
            config,
            format!(
                "providers:\n\
                 \x20 - name: kubeadm\n    type: BootstrapProvider\n    \
                 url: {root}/bootstrapprovider-kubeadm/v0.1.0/components.yaml\n\
                 \x20 - name: sim\n    type: InfrastructureProvider\n    \
                 url: {root}/infrastructureprovider-sim/v0.1.0/components.yaml\n\
                 CLUSTER_TOPOLOGY: \"true\"\n"
            )
        );
        let next = dir
            .path()
            .join("bootstrapprovider-kubeadm/v0.2.0/components.yaml");
        assert_eq!(std::fs::read_to_string(next).unwrap(), "# v0.2.0\n");
    }
}
