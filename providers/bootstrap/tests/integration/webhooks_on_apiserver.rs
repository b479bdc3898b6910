//! The bootstrap manager's webhooks behind a real kube-apiserver: the generated webhook
//! configurations and CRDs call the server built by `webhooks::server` by URL, and the real rules
//! refuse, default and convert KubeadmConfigs and KubeadmConfigTemplates as a user sees it.

use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubeadm_api::crd;
use kubeadm_api::webhook::{admission_webhooks, mutating_configuration, validating_configuration};
use kubeadm_bootstrap::webhooks;
use kubeadm_runtime::{Shutdown, WebhookArgs};
use serde_json::{Value, json};
use testenv::ManagementPlane;
use testenv::manager::WebhookServing;

const GROUP: &str = "bootstrap.cluster.x-k8s.io";

fn api(client: &kube::Client, version: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, version, kind);
    Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk))
}

fn object(version: &str, kind: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/{version}"),
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec
    }))
    .unwrap()
}

fn api_error(result: Result<impl std::fmt::Debug, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn blamed(status: &kube::core::Status) -> Vec<&str> {
    status
        .details
        .as_ref()
        .map(|d| d.causes.iter().map(|c| c.field.as_str()).collect())
        .unwrap_or_default()
}

/// A file with both inline content and content from a secret.
fn conflicting_file() -> Value {
    json!({
        "path": "/etc/kubernetes/cloud.conf",
        "content": "[Global]",
        "contentFrom": {"secret": {"name": "cloud-config", "key": "cloud.conf"}}
    })
}

#[tokio::test]
async fn the_real_rules_refuse_default_and_convert_through_the_api_server() {
    let plane = ManagementPlane::start()
        .await
        .expect("management plane starts");
    let client = plane.client().await.unwrap();

    let serving = WebhookServing::new(&plane.dir().join("webhook-certs")).unwrap();
    let base = serving.url();
    let mut crds = crd::bootstrap_crds();
    for crd in &mut crds {
        testenv::webhooks::conversion_at(crd, &base, &serving.ca_pem).unwrap();
    }
    plane.install_crds(&crds).await.unwrap();

    let (stop, shutdown) = Shutdown::channel();
    let args = WebhookArgs {
        webhook_port: serving.port,
        webhook_cert_dir: serving.cert_dir.clone(),
        webhook_bind_address: [127, 0, 0, 1].into(),
        tls: Default::default(),
    };
    let server = tokio::spawn(webhooks::start(&args, shutdown).await.unwrap());

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

    let configs = api(&client, "v1beta2", "KubeadmConfig");
    let configs_v1beta1 = api(&client, "v1beta1", "KubeadmConfig");
    let templates = api(&client, "v1beta2", "KubeadmConfigTemplate");
    let params = PostParams::default();

    // A file with two sources is refused, naming the file, without echoing its content.
    let refused = api_error(
        configs
            .create(
                &params,
                &object(
                    "v1beta2",
                    "KubeadmConfig",
                    "two-sources",
                    json!({"files": [conflicting_file()]}),
                ),
            )
            .await,
    );
    assert_eq!(refused.code, 422, "{refused:?}");
    assert_eq!(blamed(&refused), ["spec.files[0]"], "{refused:?}");
    assert!(!refused.message.contains("[Global]"), "{}", refused.message);

    // The same rule on an update.
    configs
        .create(
            &params,
            &object("v1beta2", "KubeadmConfig", "plain", json!({})),
        )
        .await
        .unwrap();
    let mut changed = configs.get("plain").await.unwrap();
    changed.data["spec"]["files"] = json!([conflicting_file()]);
    let refused = api_error(configs.replace("plain", &params, &changed).await);
    assert_eq!(blamed(&refused), ["spec.files[0]"], "{refused:?}");

    // Cluster API's "valid template contentFormat" case is admitted; a template Go cannot parse is refused
    // at admission (Cluster API finds out when it renders), naming the file's content.
    configs
        .create(
            &params,
            &object(
                "v1beta2",
                "KubeadmConfig",
                "template",
                json!({"files": [{"path": "/x", "content": "{{ .controlPlane.version }}", "contentFormat": "Template"}]}),
            ),
        )
        .await
        .unwrap();
    let refused = api_error(
        configs
            .create(
                &params,
                &object(
                    "v1beta2",
                    "KubeadmConfig",
                    "broken-template",
                    json!({"files": [{"path": "/x", "content": "{{ if .controlPlane }}v", "contentFormat": "Template"}]}),
                ),
            )
            .await,
    );
    assert_eq!(blamed(&refused), ["spec.files[0].content"], "{refused:?}");
    assert!(
        refused.message.contains(
            "contentFormat is Template, but the content is not a Go template: \
             unexpected EOF"
        ),
        "{}",
        refused.message
    );

    // A v1beta1 object is stored as v1beta2 and reads back unchanged in either version.
    let v1beta1_spec = json!({
        "clusterConfiguration": {
            "apiServer": {"extraArgs": {"cloud-provider": "external"}, "timeoutForControlPlane": "10m"}
        },
        "joinConfiguration": {
            "discovery": {"timeout": "5m"},
            "nodeRegistration": {"kubeletExtraArgs": {"cloud-provider": "external", "node-labels": "tier=worker"}}
        },
        "files": [{"path": "/etc/motd", "content": "hello", "owner": "root:root", "permissions": "0644"}],
        "preKubeadmCommands": ["echo pre"],
        "useExperimentalRetryJoin": true
    });
    configs_v1beta1
        .create(
            &params,
            &object("v1beta1", "KubeadmConfig", "worker", v1beta1_spec.clone()),
        )
        .await
        .unwrap();
    let hub = configs.get("worker").await.unwrap();
    assert_eq!(
        hub.data["spec"]["joinConfiguration"]["nodeRegistration"]["kubeletExtraArgs"],
        json!([
            {"name": "cloud-provider", "value": "external"},
            {"name": "node-labels", "value": "tier=worker"}
        ])
    );
    assert_eq!(
        hub.data["spec"]["joinConfiguration"]["timeouts"]["tlsBootstrapSeconds"],
        300
    );
    let spoke = configs_v1beta1.get("worker").await.unwrap();
    assert_eq!(spoke.data["spec"], v1beta1_spec);

    // KubeadmConfigTemplate: validated, and defaulted only for the topology controller's dry runs.
    let refused = api_error(
        templates
            .create(
                &params,
                &object(
                    "v1beta2",
                    "KubeadmConfigTemplate",
                    "bad",
                    json!({"template": {"spec": {"files": [conflicting_file()]}}}),
                ),
            )
            .await,
    );
    assert_eq!(
        blamed(&refused),
        ["spec.template.spec.files[0]"],
        "{refused:?}"
    );
    let mut marked = object(
        "v1beta2",
        "KubeadmConfigTemplate",
        "md-0",
        json!({"template": {"spec": {}}}),
    );
    marked.metadata.annotations = Some(
        [(
            "topology.cluster.x-k8s.io/dry-run".to_string(),
            String::new(),
        )]
        .into_iter()
        .collect(),
    );
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let defaulted = templates.create(&dry_run, &marked).await.unwrap();
    assert_eq!(
        defaulted.data["spec"]["template"]["spec"]["format"],
        "cloud-config"
    );
    let stored = templates.create(&params, &marked).await.unwrap();
    assert_eq!(stored.data["spec"]["template"]["spec"].get("format"), None);

    // A template with metadata only, as Cluster API's own templates declare their workers', in both
    // versions and also as the topology controller's dry run: admitted, and stored without a spec.
    for (version, name) in [("v1beta2", "bare"), ("v1beta1", "bare-v1beta1")] {
        let mut bare = object(version, "KubeadmConfigTemplate", name, Value::Null);
        bare.data = json!({});
        bare.metadata.annotations = marked.metadata.annotations.clone();
        let versioned = api(&client, version, "KubeadmConfigTemplate");
        versioned.create(&dry_run, &bare).await.unwrap_or_else(|e| {
            panic!("{version} template without spec refused on a dry run: {e}")
        });
        let stored = versioned
            .create(&params, &bare)
            .await
            .unwrap_or_else(|e| panic!("{version} template without spec refused: {e}"));
        assert_eq!(
            stored.data.get("spec"),
            None,
            "{version}: {:?}",
            stored.data
        );
    }

    stop.send(true).unwrap();
    server.await.unwrap();
}
