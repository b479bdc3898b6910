//! The admission and conversion webhooks of KubeadmControlPlane and KubeadmControlPlaneTemplate,
//! served on every replica from the rules beside the kinds: defaulting and validation of
//! KubeadmControlPlane, validation of its `scale` subresource and of KubeadmControlPlaneTemplate,
//! and v1beta1 ⇄ v1beta2 conversion.
//!
//! Two rules need more than the request: scaling is checked against the KubeadmControlPlane
//! (stacked or external etcd), and a v1beta2 infrastructure reference gets its v1beta1 apiVersion
//! from the contract label of the referenced kind's CRD. Both are read from watch caches
//! ([`Caches`]), so an admission request never waits for the API server.

use std::future::Future;

use futures::StreamExt;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use kubeadm_api::bootstrap::v1beta2::KubeadmConfigSpec;
use kubeadm_api::controlplane::defaults::default_kcp;
use kubeadm_api::controlplane::v1beta2::{
    KubeadmControlPlane, KubeadmControlPlaneSpec, KubeadmControlPlaneTemplate,
};
use kubeadm_api::controlplane::validation::{
    kcp_update_warnings, validate_kcp_create, validate_kcp_template_create,
    validate_kcp_template_update, validate_kcp_update, validate_scale,
};
use kubeadm_api::conversion::{ContractVersions, convert_object_with};
use kubeadm_runtime::manager::Error as ManagerError;
use kubeadm_runtime::{Serving, Shutdown, WebhookArgs};
use kubeadm_webhook::{
    Admission, AdmissionRequest, CONVERSION_PATH, Change, Denial, Warnings, WebhookServer,
    admission_path, admit,
};

/// The contract labels a provider's CRD carries, newest contract first; each value lists the
/// versions the CRD serves for that contract, joined by `_`.
pub const CONTRACT_LABELS: [&str; 2] = ["cluster.x-k8s.io/v1beta2", "cluster.x-k8s.io/v1beta1"];

/// The webhook server of the control-plane manager.
pub fn server<C>(
    kcps: Store<KubeadmControlPlane>,
    contracts: C,
) -> Result<WebhookServer, kubeadm_webhook::Error>
where
    C: ContractVersions + Send + Sync + 'static,
{
    let scale_path = admission_path(
        &KubeadmControlPlane::group(&()),
        &KubeadmControlPlane::version(&()),
        &KubeadmControlPlane::kind(&()),
        Admission::ValidateScale,
    );
    WebhookServer::builder()
        .defaulter::<KubeadmControlPlane, _>(|kcp| {
            default_kcp(kcp);
            Ok(())
        })
        .validator::<KubeadmControlPlane, _>(|change| match change {
            Change::Create { new } => admit(new, validate_kcp_create(new)),
            Change::Update { old, new } => {
                admit(new, validate_kcp_update(old, new)).map(|mut warnings| {
                    warnings.extend(kcp_update_warnings(old, new));
                    warnings
                })
            }
            Change::Delete { .. } => Ok(Vec::new()),
        })
        .validator::<KubeadmControlPlaneTemplate, _>(|change| match change {
            Change::Create { new } => admit(new, validate_kcp_template_create(new)),
            Change::Update { old, new } => admit(new, validate_kcp_template_update(old, new)),
            Change::Delete { .. } => Ok(Vec::new()),
        })
        .validating(scale_path, move |request| admit_scale(&kcps, request))
        .conversion(CONVERSION_PATH, move |object, desired| {
            convert_object_with(object, desired, &contracts).map_err(|e| e.to_string())
        })
        .build()
}

/// A change of `spec.replicas` through the `scale` subresource; the request carries an
/// autoscaling/v1 Scale, the rule needs the KubeadmControlPlane.
fn admit_scale(
    kcps: &Store<KubeadmControlPlane>,
    request: &AdmissionRequest,
) -> Result<Warnings, Denial> {
    let object = request
        .object
        .as_ref()
        .ok_or_else(|| Denial::bad_request("the scale request carries no Scale object"))?;
    let scale: Scale = serde_json::to_value(object)
        .and_then(serde_json::from_value)
        .map_err(|e| Denial::bad_request(format!("cannot decode the Scale: {e}")))?;
    let replicas = scale.spec.and_then(|spec| spec.replicas).unwrap_or(0);
    let key = ObjectRef::new(&request.name).within(request.namespace.as_deref().unwrap_or(""));
    let Some(kcp) = kcps.get(&key) else {
        // The cache has not seen this KubeadmControlPlane yet (it is moments old, or outside the
        // watched namespace). Refusing would block scaling whenever the cache lags, so it is
        // allowed: the KubeadmControlPlane's own validation still holds its replicas to the
        // etcd rules on every create and update of the object.
        tracing::debug!(namespace = ?request.namespace, name = %request.name, "scaling a KubeadmControlPlane not in the cache; allowed");
        return Ok(Vec::new());
    };
    admit(kcp.as_ref(), validate_scale(replicas, &kcp))
}

/// Keeps of a KubeadmControlPlane what [`admit_scale`] reads: its metadata (slimmed as every copy's
/// is) and whether etcd is external; its replicas and version stay too, a few bytes. The bulk of the
/// spec (files, commands, the machine template) and the status go: one such copy per control plane
/// lives on every replica.
fn slim_for_scale(kcp: &mut KubeadmControlPlane) {
    kubeadm_runtime::watching::slim_for_copy(kcp);
    let external = kcp
        .spec
        .kubeadm_config_spec
        .take()
        .map(|config| config.cluster_configuration.etcd.external);
    let mut kept = KubeadmControlPlaneSpec {
        replicas: kcp.spec.replicas,
        version: std::mem::take(&mut kcp.spec.version),
        ..Default::default()
    };
    if let Some(external) = external {
        let mut config = KubeadmConfigSpec::default();
        config.cluster_configuration.etcd.external = external;
        kept.kubeadm_config_spec = Some(config);
    }
    kcp.spec = kept;
    kcp.status = None;
}

/// The apiVersion an infrastructure kind is referenced with in v1beta1: the version named by the
/// contract label of its CRD (the newest contract's label first; of several versions, the last).
#[derive(Clone)]
pub struct CrdContracts {
    /// One cache per label of [`CONTRACT_LABELS`], in the same order.
    by_label: Vec<(&'static str, Store<CustomResourceDefinition>)>,
}

impl CrdContracts {
    /// A lookup over caches of the CRDs labelled with each of [`CONTRACT_LABELS`], in that order.
    pub fn new(stores: [Store<CustomResourceDefinition>; 2]) -> Self {
        Self {
            by_label: CONTRACT_LABELS.into_iter().zip(stores).collect(),
        }
    }
}

impl ContractVersions for CrdContracts {
    fn api_version(&self, group: &str, kind: &str) -> Option<String> {
        self.by_label.iter().find_map(|(label, store)| {
            let crd = store.find(|crd| crd.spec.group == group && crd.spec.names.kind == kind)?;
            let versions = crd.labels().get(*label)?;
            let version = versions.rsplit('_').next().filter(|v| !v.is_empty())?;
            Some(format!("{group}/{version}"))
        })
    }
}

/// What the webhooks read from the API server, kept current by the future [`watch`] returns.
#[derive(Clone)]
pub struct Caches {
    pub kcps: Store<KubeadmControlPlane>,
    pub contracts: CrdContracts,
    crds: [Store<CustomResourceDefinition>; 2],
}

impl Caches {
    /// Resolves once every cache holds its first full list.
    pub async fn wait_until_ready(&self) {
        let [v1beta2, v1beta1] = &self.crds;
        let _ = futures::join!(
            self.kcps.wait_until_ready(),
            v1beta2.wait_until_ready(),
            v1beta1.wait_until_ready()
        );
    }
}

/// Caches of the KubeadmControlPlanes (in `namespace`, or all when empty) and of the CRDs carrying
/// a contract label, and the future that keeps them current until `shutdown`.
pub fn watch(
    client: &kube::Client,
    namespace: &str,
    shutdown: Shutdown,
) -> (Caches, impl Future<Output = ()> + Send + 'static) {
    let (kcps, kcp_writer) = reflector::store();
    let kcp_events = reflector::reflector(
        kcp_writer,
        kubeadm_runtime::watching::watch(kcp_api(client, namespace), watcher::Config::default())
            .modify(slim_for_scale),
    );
    let mut crds = Vec::new();
    let mut crd_events = Vec::new();
    for label in CONTRACT_LABELS {
        let (store, writer) = reflector::store();
        let events = reflector::reflector(
            writer,
            kubeadm_runtime::watching::watch(
                Api::<CustomResourceDefinition>::all(client.clone()),
                watcher::Config::default().labels(label),
            )
            // Only the group, kind and labels are read: drop the schemas, the bulk of a CRD.
            .modify(|crd| {
                kubeadm_runtime::watching::slim_for_copy(crd);
                crd.annotations_mut().clear();
                for version in &mut crd.spec.versions {
                    version.schema = None;
                }
            }),
        );
        crds.push(store);
        crd_events.push(events.boxed());
    }
    let crds: [Store<CustomResourceDefinition>; 2] = crds.try_into().unwrap_or_else(|_| {
        unreachable!("one store per contract label");
    });
    let caches = Caches {
        kcps,
        contracts: CrdContracts::new(crds.clone()),
        crds,
    };
    let keep_current = async move {
        let events = futures::stream::select(
            kcp_events.map(|event| event.map(drop)),
            futures::stream::select_all(crd_events).map(|event| event.map(drop)),
        );
        let drain = events.for_each(|event| async move {
            if let Err(e) = event {
                tracing::warn!(error = %e, "webhook cache watch failed; retrying");
            }
        });
        tokio::select! {
            () = drain => {}
            () = shutdown.wait() => {}
        }
    };
    (caches, keep_current)
}

/// Starts the webhook server of the control-plane manager: its caches, then the server on the
/// address and with the certificate of `args`. Returns once the caches are filled and the server
/// listens; the returned future serves until `shutdown`.
pub async fn start(
    client: kube::Client,
    namespace: &str,
    args: &WebhookArgs,
    shutdown: Shutdown,
) -> Result<Serving, ManagerError> {
    let (caches, keep_current) = watch(&client, namespace, shutdown.clone());
    let server = server(caches.kcps.clone(), caches.contracts.clone())
        .map_err(|e| ManagerError::Webhooks(e.to_string()))?;
    let serving = kubeadm_webhook::serve_for_manager(server, args, shutdown).await?;
    // A cache whose list fails would never fill: say why now instead of waiting forever.
    listable(
        kcp_api(&client, namespace),
        "is its CRD installed (config/crd)?",
    )
    .await?;
    listable(
        Api::<CustomResourceDefinition>::all(client),
        "the conversion reads contract versions from CRDs",
    )
    .await?;
    let caching = tokio::spawn(keep_current);
    tracing::info!("filling the webhook caches (KubeadmControlPlanes, contract-labelled CRDs)");
    caches.wait_until_ready().await;
    Ok(Box::pin(async move {
        serving.await;
        let _ = caching.await;
    }))
}

fn kcp_api(client: &kube::Client, namespace: &str) -> Api<KubeadmControlPlane> {
    if namespace.is_empty() {
        Api::all(client.clone())
    } else {
        Api::namespaced(client.clone(), namespace)
    }
}

/// Fails naming the resource (`kubeadmcontrolplanes.controlplane.cluster.x-k8s.io`) when it cannot
/// be listed.
async fn listable<K>(api: Api<K>, hint: &str) -> Result<(), ManagerError>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(e) => Err(ManagerError::Webhooks(format!(
            "cannot list {}.{}: {e}; {hint}",
            K::plural(&()),
            K::group(&()),
        ))),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceDefinitionNames, CustomResourceDefinitionSpec,
    };
    use kube::runtime::watcher::Event;
    use kubeadm_webhook::admission_webhooks;

    use super::*;

    fn crd(group: &str, kind: &str, labels: &[(&str, &str)]) -> CustomResourceDefinition {
        let mut crd = CustomResourceDefinition {
            spec: CustomResourceDefinitionSpec {
                group: group.into(),
                names: CustomResourceDefinitionNames {
                    kind: kind.into(),
                    plural: format!("{}s", kind.to_lowercase()),
                    ..Default::default()
                },
                scope: "Namespaced".into(),
                ..Default::default()
            },
            ..Default::default()
        };
        crd.metadata.name = Some(format!("{}s.{group}", kind.to_lowercase()));
        crd.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        crd
    }

    fn crd_stores(crds: &[CustomResourceDefinition]) -> [Store<CustomResourceDefinition>; 2] {
        CONTRACT_LABELS.map(|label| {
            let (store, mut writer) = reflector::store();
            for crd in crds.iter().filter(|c| c.labels().contains_key(label)) {
                writer.apply_watcher_event(&Event::Apply(crd.clone()));
            }
            store
        })
    }

    #[test]
    fn serves_exactly_the_registered_webhooks_of_its_group() {
        let (kcps, _writer) = reflector::store();
        let server = server(kcps, CrdContracts::new(crd_stores(&[]))).unwrap();
        let mut expected: Vec<String> = admission_webhooks()
            .iter()
            .filter(|w| w.group == KubeadmControlPlane::group(&()))
            .map(|w| w.path())
            .chain([CONVERSION_PATH.to_string()])
            .collect();
        expected.sort();
        let served: Vec<&str> = server.paths().collect();
        assert_eq!(served, expected);
    }

    #[test]
    fn contract_versions_come_from_the_newest_contract_label_and_its_last_version() {
        let contracts = CrdContracts::new(crd_stores(&[
            crd(
                "infrastructure.cluster.x-k8s.io",
                "DockerMachineTemplate",
                &[
                    ("cluster.x-k8s.io/v1beta1", "v1beta1"),
                    ("cluster.x-k8s.io/v1beta2", "v1beta1_v1beta2"),
                ],
            ),
            crd(
                "infrastructure.cluster.x-k8s.io",
                "OpenStackMachineTemplate",
                &[("cluster.x-k8s.io/v1beta1", "v1alpha7_v1beta1")],
            ),
        ]));
        assert_eq!(
            contracts.api_version("infrastructure.cluster.x-k8s.io", "DockerMachineTemplate"),
            Some("infrastructure.cluster.x-k8s.io/v1beta2".into())
        );
        assert_eq!(
            contracts.api_version(
                "infrastructure.cluster.x-k8s.io",
                "OpenStackMachineTemplate"
            ),
            Some("infrastructure.cluster.x-k8s.io/v1beta1".into())
        );
        assert_eq!(
            contracts.api_version("infrastructure.cluster.x-k8s.io", "UnknownMachineTemplate"),
            None
        );
        assert_eq!(
            contracts.api_version("other.example.com", "DockerMachineTemplate"),
            None
        );
    }

    fn scale_request(name: &str, replicas: i32) -> AdmissionRequest {
        serde_json::from_value(serde_json::json!({
            "uid": "1",
            "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "resource": {"group": "controlplane.cluster.x-k8s.io", "version": "v1beta2", "resource": "kubeadmcontrolplanes"},
            "subResource": "scale",
            "name": name,
            "namespace": "default",
            "operation": "UPDATE",
            "userInfo": {},
            "object": {
                "apiVersion": "autoscaling/v1",
                "kind": "Scale",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"replicas": replicas}
            },
            "dryRun": false
        }))
        .unwrap()
    }

    #[test]
    fn scaling_is_checked_against_the_cached_control_plane() {
        let (kcps, mut writer) = reflector::store();
        for (name, external) in [("stacked", false), ("external", true)] {
            let mut config = KubeadmConfigSpec {
                files: vec![Default::default(); 3],
                ..Default::default()
            };
            if external {
                config.cluster_configuration.etcd.external.endpoints =
                    vec!["https://etcd:2379".into()];
            }
            let mut kcp = KubeadmControlPlane::new(
                name,
                KubeadmControlPlaneSpec {
                    version: "v1.33.1".into(),
                    replicas: Some(3),
                    kubeadm_config_spec: Some(config),
                    ..Default::default()
                },
            );
            kcp.metadata.namespace = Some("default".into());
            slim_for_scale(&mut kcp);
            let kept = kcp.spec.kubeadm_config_spec.as_ref();
            assert!(kept.is_none_or(|config| config.files.is_empty()), "{name}");
            writer.apply_watcher_event(&Event::Apply(kcp));
        }
        assert_eq!(
            admit_scale(&kcps, &scale_request("external", 2)),
            Ok(vec![])
        );

        let denial = admit_scale(&kcps, &scale_request("stacked", 2)).unwrap_err();
        assert_eq!(denial.code(), 422);
        assert_eq!(denial.field_errors()[0].field, "spec.replicas");
        assert!(
            denial.message().contains("even number"),
            "{}",
            denial.message()
        );
        assert_eq!(admit_scale(&kcps, &scale_request("stacked", 5)), Ok(vec![]));
        // Not cached yet: allowed, see admit_scale.
        assert_eq!(admit_scale(&kcps, &scale_request("unseen", 2)), Ok(vec![]));
    }
}
