//! The control-plane manager's webhooks behind a real kube-apiserver: the generated webhook
//! configurations and CRDs call the server built by `webhooks::server` by URL, and the real rules
//! default, refuse and convert KubeadmControlPlanes as a user sees it through the API server.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::ObjectRef;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::crd;
use kubeadm_api::webhook::{admission_webhooks, mutating_configuration, validating_configuration};
use kubeadm_controlplane::webhooks;
use kubeadm_runtime::{Shutdown, WebhookArgs};
use serde_json::{Value, json};
use testenv::ManagementPlane;
use testenv::manager::WebhookServing;

const GROUP: &str = "controlplane.cluster.x-k8s.io";
const INFRA_GROUP: &str = "infrastructure.cluster.x-k8s.io";

/// An infrastructure machine template kind whose CRD serves two versions and names both in its
/// contract label: the last one is what v1beta1 references use.
fn infrastructure_crd() -> CustomResourceDefinition {
    let versions = ["v1alpha1", "v1beta1"].map(|name| {
        json!({
            "name": name,
            "served": true,
            "storage": name == "v1beta1",
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
        })
    });
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": "testmachinetemplates.infrastructure.cluster.x-k8s.io",
            "labels": {"cluster.x-k8s.io/v1beta2": "v1alpha1_v1beta1"}
        },
        "spec": {
            "group": INFRA_GROUP,
            "scope": "Namespaced",
            "names": {"kind": "TestMachineTemplate", "plural": "testmachinetemplates", "singular": "testmachinetemplate", "listKind": "TestMachineTemplateList"},
            "versions": versions
        }
    }))
    .unwrap()
}

fn api(client: &kube::Client, version: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, version, kind);
    Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk))
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap()
}

/// A v1beta2 KubeadmControlPlane with stacked etcd; `spec` is merged over the required fields.
fn kcp(name: &str, spec: Value) -> DynamicObject {
    let mut full = json!({
        "version": "v1.33.1",
        "machineTemplate": {"spec": {"infrastructureRef": {
            "apiGroup": INFRA_GROUP, "kind": "TestMachineTemplate", "name": name
        }}}
    });
    for (key, value) in spec.as_object().unwrap() {
        full[key] = value.clone();
    }
    object(json!({
        "apiVersion": format!("{GROUP}/v1beta2"),
        "kind": "KubeadmControlPlane",
        "metadata": {"name": name, "namespace": "default"},
        "spec": full
    }))
}

fn api_error(result: Result<impl std::fmt::Debug, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// The names of the fields a refusal blames.
fn blamed(status: &kube::core::Status) -> Vec<&str> {
    status
        .details
        .as_ref()
        .map(|d| d.causes.iter().map(|c| c.field.as_str()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_real_rules_default_refuse_and_convert_through_the_api_server() {
    let plane = ManagementPlane::start()
        .await
        .expect("management plane starts");
    let client = plane.client().await.unwrap();

    // The server: certificates from a test CA, listening on loopback.
    let serving = WebhookServing::new(&plane.dir().join("webhook-certs")).unwrap();
    let base = serving.url();
    let mut crds = crd::controlplane_crds();
    for crd in &mut crds {
        testenv::webhooks::conversion_at(crd, &base, &serving.ca_pem).unwrap();
    }
    crds.push(infrastructure_crd());
    plane.install_crds(&crds).await.unwrap();

    let (stop, shutdown) = Shutdown::channel();
    let (caches, keep_current) = webhooks::watch(&client, "", shutdown.clone());
    let caching = tokio::spawn(keep_current);
    caches.wait_until_ready().await;
    let server = webhooks::server(caches.kcps.clone(), caches.contracts.clone()).unwrap();
    let args = WebhookArgs {
        webhook_port: serving.port,
        webhook_cert_dir: serving.cert_dir.clone(),
        webhook_bind_address: [127, 0, 0, 1].into(),
        tls: Default::default(),
    };
    let server = tokio::spawn(
        kubeadm_webhook::serve_for_manager(server, &args, shutdown)
            .await
            .unwrap(),
    );

    let ours: Vec<_> = admission_webhooks()
        .into_iter()
        .filter(|w| w.group == GROUP)
        .collect();
    let mut mutating = mutating_configuration(&ours);
    testenv::webhooks::mutating_at(&mut mutating, &base, &serving.ca_pem).unwrap();
    let mut validating = validating_configuration(&ours);
    testenv::webhooks::validating_at(&mut validating, &base, &serving.ca_pem).unwrap();
    testenv::webhooks::register(&client, &mutating, &validating)
        .await
        .unwrap();

    let kcps = api(&client, "v1beta2", "KubeadmControlPlane");
    let kcps_v1beta1 = api(&client, "v1beta1", "KubeadmControlPlane");
    let params = PostParams::default();

    // An even number of stacked etcd members is refused, naming the field.
    let refused = api_error(
        kcps.create(&params, &kcp("even", json!({"replicas": 2})))
            .await,
    );
    assert_eq!(refused.code, 422, "{refused:?}");
    assert_eq!(blamed(&refused), ["spec.replicas"], "{refused:?}");
    assert!(
        refused
            .message
            .contains("spec.replicas: Forbidden: cannot be an even number when etcd is stacked"),
        "{}",
        refused.message
    );

    // Defaults: the `v` prefix, one replica, RollingUpdate with maxSurge 1.
    let mut bare = kcp("bare", json!({}));
    bare.data["spec"]["version"] = json!("1.33.1");
    let created = kcps.create(&params, &bare).await.unwrap();
    let spec = &created.data["spec"];
    assert_eq!(spec["version"], "v1.33.1");
    assert_eq!(spec["replicas"], 1);
    assert_eq!(
        spec["rollout"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}})
    );

    // A strategy with only its rolling-update parameters, as bare-metal templates write it: the type
    // is the default.
    let mut surge_only = kcp("surge-only", json!({"replicas": 3}));
    surge_only.data["spec"]["rollout"] = json!({"strategy": {"rollingUpdate": {"maxSurge": 0}}});
    let created = kcps.create(&params, &surge_only).await.unwrap();
    assert_eq!(
        created.data["spec"]["rollout"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0}})
    );

    // Immutable fields and the etcd topology cannot change.
    let refused = api_error(
        kcps.patch(
            "bare",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"kubeadmConfigSpec": {"clusterConfiguration": {
                    "certificatesDir": "/etc/other-pki"
                }}}}),
            ),
        )
        .await,
    );
    assert_eq!(refused.code, 422, "{refused:?}");
    assert!(
        blamed(&refused).contains(&"spec.kubeadmConfigSpec.clusterConfiguration.certificatesDir"),
        "{refused:?}"
    );
    let refused = api_error(
        kcps.patch(
            "bare",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"kubeadmConfigSpec": {"clusterConfiguration": {
                    "etcd": {"external": {
                        "endpoints": ["https://10.0.0.1:2379"],
                        "caFile": "/etc/etcd/ca.crt",
                        "certFile": "/etc/etcd/client.crt",
                        "keyFile": "/etc/etcd/client.key"
                    }}
                }}}}),
            ),
        )
        .await,
    );
    assert_eq!(refused.code, 422, "{refused:?}");
    assert!(
        refused.message.contains("external and local etcd"),
        "{}",
        refused.message
    );

    // An etcd flag etcd 3.7 removed: fine at 1.36 (kubeadm deploys etcd 3.6.8), refused on the bump to
    // 1.37 and on a create at 1.37, naming the field and the replacement.
    let corrupt_check = json!({"kubeadmConfigSpec": {"clusterConfiguration": {"etcd": {"local": {
        "extraArgs": [{"name": "experimental-initial-corrupt-check", "value": "true"}]
    }}}}});
    let mut at_136 = kcp("etcd-flags", corrupt_check.clone());
    at_136.data["spec"]["version"] = json!("v1.36.3");
    at_136.data["spec"]["replicas"] = json!(3);
    kcps.create(&params, &at_136).await.unwrap();
    let removed_flag = "spec.kubeadmConfigSpec.clusterConfiguration.etcd.local.extraArgs[0].name";
    let refused = api_error(
        kcps.patch(
            "etcd-flags",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"version": "v1.37.2"}})),
        )
        .await,
    );
    assert_eq!(refused.code, 422, "{refused:?}");
    assert_eq!(blamed(&refused), [removed_flag], "{refused:?}");
    assert!(
        refused
            .message
            .contains("use --feature-gates=InitialCorruptCheck=true instead"),
        "{}",
        refused.message
    );
    let mut at_137 = kcp("etcd-flags-137", corrupt_check);
    at_137.data["spec"]["version"] = json!("v1.37.2");
    let refused = api_error(kcps.create(&params, &at_137).await);
    assert_eq!(blamed(&refused), [removed_flag], "{refused:?}");

    // Scaling stacked etcd to an even size is refused, once the webhook has seen the object.
    let key = ObjectRef::<KubeadmControlPlane>::new("bare").within("default");
    for _ in 0..100 {
        if caches.kcps.get(&key).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let scale = |replicas: i32| {
        let kcps = kcps.clone();
        async move {
            kcps.patch_scale(
                "bare",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
        }
    };
    let refused = api_error(scale(2).await);
    assert_eq!(refused.code, 422, "{refused:?}");
    assert_eq!(blamed(&refused), ["spec.replicas"], "{refused:?}");
    assert!(
        refused.message.contains("even number"),
        "{}",
        refused.message
    );
    scale(3).await.unwrap();
    assert_eq!(kcps.get("bare").await.unwrap().data["spec"]["replicas"], 3);

    // A v1beta1 object is stored as v1beta2 and reads back unchanged in either version.
    let v1beta1_spec = json!({
        "replicas": 3,
        "version": "v1.32.4",
        "machineTemplate": {"infrastructureRef": {
            "apiVersion": format!("{INFRA_GROUP}/v1beta1"),
            "kind": "TestMachineTemplate",
            "name": "old",
            "namespace": "default"
        }},
        "kubeadmConfigSpec": {
            "clusterConfiguration": {
                "apiServer": {"extraArgs": {"cloud-provider": "external"}},
                "controllerManager": {"extraArgs": {"cloud-provider": "external"}}
            },
            "initConfiguration": {"nodeRegistration": {
                "name": "{{ ds.meta_data.local_hostname }}",
                "kubeletExtraArgs": {"cloud-provider": "external"}
            }},
            "joinConfiguration": {"nodeRegistration": {
                "name": "{{ ds.meta_data.local_hostname }}",
                "kubeletExtraArgs": {"cloud-provider": "external"}
            }}
        },
        "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}
    });
    let old = object(json!({
        "apiVersion": format!("{GROUP}/v1beta1"),
        "kind": "KubeadmControlPlane",
        "metadata": {"name": "old", "namespace": "default"},
        "spec": v1beta1_spec
    }));
    kcps_v1beta1.create(&params, &old).await.unwrap();
    let hub = kcps.get("old").await.unwrap();
    assert_eq!(
        hub.data["spec"]["machineTemplate"]["spec"]["infrastructureRef"],
        json!({"apiGroup": INFRA_GROUP, "kind": "TestMachineTemplate", "name": "old"})
    );
    assert_eq!(
        hub.data["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["apiServer"]["extraArgs"],
        json!([{"name": "cloud-provider", "value": "external"}])
    );
    let spoke = kcps_v1beta1.get("old").await.unwrap();
    assert_eq!(spoke.data["spec"], v1beta1_spec);

    // A v1beta2 reference gets its v1beta1 apiVersion from the contract label of the CRD...
    let as_v1beta1 = kcps_v1beta1.get("bare").await.unwrap();
    assert_eq!(
        as_v1beta1.data["spec"]["machineTemplate"]["infrastructureRef"]["apiVersion"],
        format!("{INFRA_GROUP}/v1beta1")
    );
    // ... and a kind without such a CRD cannot be converted.
    kcps.create(
        &params,
        &kcp(
            "unknown",
            json!({"machineTemplate": {"spec": {"infrastructureRef": {
                "apiGroup": INFRA_GROUP, "kind": "UnknownMachineTemplate", "name": "unknown"
            }}}}),
        ),
    )
    .await
    .unwrap();
    let failed = api_error(kcps_v1beta1.get("unknown").await);
    assert!(
        failed.message.contains("UnknownMachineTemplate"),
        "{}",
        failed.message
    );

    // KubeadmControlPlaneTemplate has its own validation.
    let templates = api(&client, "v1beta2", "KubeadmControlPlaneTemplate");
    let refused = api_error(
        templates
            .create(
                &params,
                &object(json!({
                    "apiVersion": format!("{GROUP}/v1beta2"),
                    "kind": "KubeadmControlPlaneTemplate",
                    "metadata": {"name": "t", "namespace": "default"},
                    "spec": {"template": {"spec": {"kubeadmConfigSpec": {"files": [
                        {"path": "/etc/a", "content": "a", "contentFrom": {"secret": {"name": "s", "key": "k"}}}
                    ]}}}}
                })),
            )
            .await,
    );
    assert_eq!(refused.code, 422, "{refused:?}");
    assert_eq!(
        blamed(&refused),
        ["spec.template.spec.kubeadmConfigSpec.files[0]"],
        "{refused:?}"
    );

    stop.send(true).unwrap();
    server.await.unwrap();
    caching.await.unwrap();
}
