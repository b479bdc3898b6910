//! The provider's Namespace and the manager Deployment: one container named `manager` (clusterctl
//! looks for it), running `<binary> run --leader-elect` as a non-root user on a read-only root
//! filesystem, serving webhooks with the cert-manager Secret mounted where the manager reads it.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, HTTPGetAction, Namespace, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile, SecretVolumeSource,
    SecurityContext, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use kubeadm_api::webhook::{WEBHOOK_CERT_DIR, WEBHOOK_PORT};

use super::{Naming, Provider, rbac};
use crate::webhook::SERVING_CERT_SECRET;

/// The clusterctl variable naming the manager image, and its default: one image holds both binaries.
pub const IMAGE_VARIABLE: &str = "KUBEADM_PROVIDERS_IMAGE";
pub const LOG_FORMAT_VARIABLE: &str = "KUBEADM_PROVIDERS_LOG_FORMAT";
pub const BOOTSTRAP_TOKEN_TTL_VARIABLE: &str = "KUBEADM_BOOTSTRAP_TOKEN_TTL";

const CONTAINER: &str = "manager";
const DEPLOYMENT: &str = "controller-manager";
const HEALTH_PORT: i32 = 9440;
/// The non-root user the manager runs as (distroless `nonroot`).
const USER_ID: i64 = 65532;

/// `${NAME:=default}`: clusterctl fills it in and uses `default` when `NAME` is not set.
fn variable(name: &str, default: &str) -> String {
    format!("${{{name}:={default}}}")
}

/// The image reference in the Deployment:
/// `${KUBEADM_PROVIDERS_IMAGE:=docker.io/library/kubeadm-providers:v<version>}`, the canonical form of the
/// tag `make image` builds (clusterctl refuses a reference without its registry).
pub fn image() -> String {
    variable(
        IMAGE_VARIABLE,
        &format!("docker.io/library/kubeadm-providers:{}", super::version()),
    )
}

/// The manager's arguments after the binary.
pub fn args(provider: Provider) -> Vec<String> {
    let mut args = vec![
        "run".to_owned(),
        "--leader-elect".to_owned(),
        format!("--health-addr=0.0.0.0:{HEALTH_PORT}"),
        format!("--webhook-port={WEBHOOK_PORT}"),
        format!("--webhook-cert-dir={WEBHOOK_CERT_DIR}"),
        format!("--log-format={}", variable(LOG_FORMAT_VARIABLE, "text")),
    ];
    if provider == Provider::Bootstrap {
        args.push(format!(
            "--bootstrap-token-ttl={}",
            variable(BOOTSTRAP_TOKEN_TTL_VARIABLE, "15m")
        ));
    }
    args
}

fn binary(provider: Provider) -> &'static str {
    match provider {
        Provider::Bootstrap => "/bootstrap-manager",
        Provider::ControlPlane => "/controlplane-manager",
    }
}

pub(super) fn namespace(naming: &Naming) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(naming.namespace.clone()),
            labels: naming.labels(),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The labels that select the manager's pods (and the webhook Service's endpoints).
pub(super) fn pod_labels(naming: &Naming) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([("control-plane".to_owned(), DEPLOYMENT.to_owned())]);
    labels.extend(naming.labels.clone());
    labels
}

pub(super) fn deployment(provider: Provider, naming: &Naming) -> Deployment {
    let mut metadata = naming.namespaced(DEPLOYMENT);
    metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .extend(pod_labels(naming));
    let probe = |path: &str| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("healthz".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let port = |name: &str, port: i32| ContainerPort {
        container_port: port,
        name: Some(name.into()),
        protocol: Some("TCP".into()),
        ..Default::default()
    };
    let container = Container {
        name: CONTAINER.into(),
        image: Some(image()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec![binary(provider).into()]),
        args: Some(args(provider)),
        ports: Some(vec![
            port("webhook-server", WEBHOOK_PORT.into()),
            port("healthz", HEALTH_PORT),
        ]),
        liveness_probe: Some(probe("/healthz")),
        readiness_probe: Some(probe("/readyz")),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity("100m".into())),
                ("memory".to_owned(), Quantity("128Mi".into())),
            ])),
            ..Default::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Default::default()
            }),
            privileged: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_user: Some(USER_ID),
            run_as_group: Some(USER_ID),
            ..Default::default()
        }),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        volume_mounts: Some(vec![VolumeMount {
            name: "cert".into(),
            mount_path: WEBHOOK_CERT_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let toleration = |key: &str| Toleration {
        effect: Some("NoSchedule".into()),
        key: Some(key.into()),
        ..Default::default()
    };
    Deployment {
        metadata,
        spec: Some(DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(pod_labels(naming)),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels(naming)),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    service_account_name: Some(naming.name(rbac::SERVICE_ACCOUNT)),
                    // Longer than the managers' own 20 s grace for in-flight reconciles.
                    termination_grace_period_seconds: Some(30),
                    tolerations: Some(vec![
                        toleration("node-role.kubernetes.io/master"),
                        toleration("node-role.kubernetes.io/control-plane"),
                    ]),
                    volumes: Some(vec![Volume {
                        name: "cert".into(),
                        secret: Some(SecretVolumeSource {
                            secret_name: Some(naming.name(SERVING_CERT_SECRET)),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}
