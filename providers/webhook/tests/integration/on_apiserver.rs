//! The webhook server called by a real kube-apiserver: the generated webhook configurations and
//! CRDs, pointed at the server by URL instead of through a Service, admit, default, refuse scaling
//! and convert as the API server sees it.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::crd;
use kubeadm_api::webhook::{mutating_configuration, validating_configuration};
use kubeadm_webhook::{
    Admission, AdmissionRequest, CONVERSION_PATH, Change, Denial, FieldError, WebhookServer,
    admission_webhooks,
};
use serde_json::{Value, json};
use support::{CertDir, Pki, Running};
use testenv::ManagementPlane;

const FAIL_CONVERSION: &str = "example.com/fail-conversion";

/// Test rules (the real ones live beside the kinds): KCP replicas must be odd, a KCP gets a label,
/// scaling to an even number is refused, and conversion only swaps `apiVersion`.
fn server(conversions: Arc<AtomicUsize>) -> WebhookServer {
    let scale_path = kubeadm_webhook::admission_path(
        "controlplane.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmControlPlane",
        Admission::ValidateScale,
    );
    WebhookServer::builder()
        .defaulter::<KubeadmControlPlane, _>(|kcp| {
            kcp.metadata
                .labels
                .get_or_insert_default()
                .insert("example.com/defaulted".into(), "true".into());
            Ok(())
        })
        .validator::<KubeadmControlPlane, _>(|change| {
            let kcp = match change {
                Change::Create { new } | Change::Update { new, .. } => new,
                Change::Delete { .. } => return Ok(Vec::new()),
            };
            match kcp.spec.replicas {
                Some(replicas) if replicas % 2 == 0 => Err(Denial::invalid_object(
                    kcp,
                    vec![FieldError::invalid(
                        "spec.replicas",
                        replicas,
                        "must be odd to keep etcd quorum",
                    )],
                )),
                _ => Ok(Vec::new()),
            }
        })
        .validating(scale_path, |request: &AdmissionRequest| {
            let scale = request
                .object
                .as_ref()
                .expect("a scale update has an object");
            match scale.data["spec"]["replicas"].as_i64() {
                Some(replicas) if replicas % 2 == 0 => Err(Denial::forbidden(format!(
                    "cannot scale {} to {replicas} replicas: must be odd",
                    request.name
                ))),
                _ => Ok(Vec::new()),
            }
        })
        .conversion(CONVERSION_PATH, move |mut object: Value, desired: &str| {
            conversions.fetch_add(1, Ordering::SeqCst);
            if object["metadata"]["labels"][FAIL_CONVERSION] == "true" {
                return Err("this object refuses to convert".into());
            }
            object["apiVersion"] = desired.into();
            Ok(object)
        })
        .build()
        .unwrap()
}

/// The generated configurations, limited to the webhooks the test server serves, calling it by URL.
async fn register_webhooks(client: &kube::Client, base: &str, ca: &str) {
    let served: Vec<_> = admission_webhooks()
        .into_iter()
        .filter(|w| w.kind == "KubeadmControlPlane")
        .collect();
    assert_eq!(served.len(), 3);
    let mut mutating = mutating_configuration(&served);
    testenv::webhooks::mutating_at(&mut mutating, base, ca).unwrap();
    let mut validating = validating_configuration(&served);
    testenv::webhooks::validating_at(&mut validating, base, ca).unwrap();
    testenv::webhooks::register(client, &mutating, &validating)
        .await
        .unwrap();
}

fn crds_converting_at(base: &str, ca: &str) -> Vec<apiextensions::CustomResourceDefinition> {
    let mut crds = crd::provider_crds();
    for crd in &mut crds {
        testenv::webhooks::conversion_at(crd, base, ca).unwrap();
        let url = crd
            .spec
            .conversion
            .as_ref()
            .unwrap()
            .webhook
            .as_ref()
            .unwrap();
        let url = url.client_config.as_ref().unwrap().url.as_deref().unwrap();
        assert_eq!(url, format!("{base}{CONVERSION_PATH}"));
    }
    crds
}

fn dynamic(client: &kube::Client, group: &str, version: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, version, kind);
    Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk))
}

fn kcp(name: &str, replicas: i64) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmControlPlane",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "version": "v1.33.1",
            "machineTemplate": {"spec": {"infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "DockerMachineTemplate",
                "name": name
            }}}
        }
    }))
    .unwrap()
}

fn api_error(result: Result<impl std::fmt::Debug, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn the_api_server_admits_defaults_refuses_and_converts_through_the_server() {
    let plane = ManagementPlane::start()
        .await
        .expect("management plane starts");
    let client = plane.client().await.unwrap();

    let pki = Pki::new("webhook CA");
    let dir = CertDir::new(&pki.cert_pem, &pki.key_pem);
    let conversions = Arc::new(AtomicUsize::new(0));
    let running = Running::start(server(conversions.clone()), dir.files()).await;
    let base = format!("https://127.0.0.1:{}", running.addr.port());
    let ca = pki.ca_pem.as_str();

    plane
        .install_crds(&crds_converting_at(&base, ca))
        .await
        .unwrap();
    register_webhooks(&client, &base, ca).await;

    let kcps = dynamic(
        &client,
        "controlplane.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmControlPlane",
    );
    let params = PostParams::default();

    // Refused with the field cause, through the API server.
    let refused = api_error(kcps.create(&params, &kcp("even", 2)).await);
    assert_eq!(refused.code, 422, "{refused:?}");
    assert_eq!(refused.reason, "Invalid");
    assert_eq!(
        refused.message,
        "admission webhook \"validation.kubeadmcontrolplane.controlplane.cluster.x-k8s.io\" denied the request: \
         KubeadmControlPlane.controlplane.cluster.x-k8s.io \"even\" is invalid: \
         spec.replicas: Invalid value: 2: must be odd to keep etcd quorum"
    );
    let causes = &refused.details.as_ref().unwrap().causes;
    assert_eq!(causes[0].field, "spec.replicas");
    assert_eq!(causes[0].reason, "FieldValueInvalid");

    // Admitted, with the default applied from the server's patch.
    let created = kcps.create(&params, &kcp("odd", 3)).await.unwrap();
    assert_eq!(
        created.metadata.labels.as_ref().unwrap()["example.com/defaulted"],
        "true"
    );
    assert_eq!(created.data["spec"]["replicas"], 3);

    // The scale subresource has its own webhook.
    let refused = api_error(
        kcps.patch_scale(
            "odd",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await,
    );
    assert_eq!(refused.code, 403, "{refused:?}");
    assert!(
        refused
            .message
            .ends_with("denied the request: cannot scale odd to 4 replicas: must be odd"),
        "{}",
        refused.message
    );
    kcps.patch_scale(
        "odd",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 5}})),
    )
    .await
    .unwrap();
    assert_eq!(kcps.get("odd").await.unwrap().data["spec"]["replicas"], 5);

    // Reading the stored v1beta2 object as v1beta1 goes through the conversion webhook.
    let configs_v1beta2 = dynamic(
        &client,
        "bootstrap.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmConfig",
    );
    let configs_v1beta1 = dynamic(
        &client,
        "bootstrap.cluster.x-k8s.io",
        "v1beta1",
        "KubeadmConfig",
    );
    let config = |name: &str, fail: bool| -> DynamicObject {
        let labels = if fail {
            json!({FAIL_CONVERSION: "true"})
        } else {
            json!({})
        };
        serde_json::from_value(json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
            "kind": "KubeadmConfig",
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {}
        }))
        .unwrap()
    };
    configs_v1beta2
        .create(&params, &config("plain", false))
        .await
        .unwrap();
    configs_v1beta2
        .create(&params, &config("stubborn", true))
        .await
        .unwrap();
    let before = conversions.load(Ordering::SeqCst);
    let read = configs_v1beta1.get("plain").await.unwrap();
    assert_eq!(
        read.types.unwrap().api_version,
        "bootstrap.cluster.x-k8s.io/v1beta1"
    );
    assert!(conversions.load(Ordering::SeqCst) > before);
    let failed = api_error(configs_v1beta1.get("stubborn").await);
    assert!(
        failed.message.contains("this object refuses to convert"),
        "{}",
        failed.message
    );

    running.stop().await;
}
