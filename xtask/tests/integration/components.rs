//! The clusterctl components files, read back the way clusterctl and the API server would: every
//! document parses into its typed Kubernetes object, the references between objects line up, RBAC holds
//! no wildcard, and every setting a user may change is a clusterctl variable with a default.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::de::DeserializeOwned;
use serde_json::Value;
use xtask::components::{self, PROVIDER_LABEL, Provider};

/// A components file split by kind, each object typed.
#[derive(Default)]
struct Parsed {
    namespaces: Vec<Namespace>,
    crds: Vec<CustomResourceDefinition>,
    service_accounts: Vec<ServiceAccount>,
    cluster_roles: Vec<ClusterRole>,
    cluster_role_bindings: Vec<ClusterRoleBinding>,
    roles: Vec<Role>,
    role_bindings: Vec<RoleBinding>,
    services: Vec<Service>,
    deployments: Vec<Deployment>,
    mutating: Vec<MutatingWebhookConfiguration>,
    validating: Vec<ValidatingWebhookConfiguration>,
    /// cert-manager objects (no typed API here), by kind.
    cert_manager: BTreeMap<String, Value>,
    /// Every document as parsed, for checks that hold for all kinds.
    all: Vec<Value>,
}

fn typed<T: DeserializeOwned>(document: &Value, index: usize) -> T {
    serde_json::from_value(document.clone()).unwrap_or_else(|e| {
        panic!(
            "document {index} ({}) does not parse as its kind: {e}",
            document["kind"]
        )
    })
}

fn parse(text: &str) -> Parsed {
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(text).expect("the components file is YAML");
    let mut parsed = Parsed::default();
    for (index, document) in documents.into_iter().enumerate() {
        let api_version = document["apiVersion"].as_str().unwrap_or_default();
        let kind = document["kind"].as_str().unwrap_or_default().to_owned();
        match (api_version, kind.as_str()) {
            ("v1", "Namespace") => parsed.namespaces.push(typed(&document, index)),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
                parsed.crds.push(typed(&document, index))
            }
            ("v1", "ServiceAccount") => parsed.service_accounts.push(typed(&document, index)),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
                parsed.cluster_roles.push(typed(&document, index))
            }
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                parsed.cluster_role_bindings.push(typed(&document, index))
            }
            ("rbac.authorization.k8s.io/v1", "Role") => parsed.roles.push(typed(&document, index)),
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
                parsed.role_bindings.push(typed(&document, index))
            }
            ("v1", "Service") => parsed.services.push(typed(&document, index)),
            ("apps/v1", "Deployment") => parsed.deployments.push(typed(&document, index)),
            ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration") => {
                parsed.mutating.push(typed(&document, index))
            }
            ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration") => {
                parsed.validating.push(typed(&document, index))
            }
            ("cert-manager.io/v1", "Issuer" | "Certificate") => {
                assert!(
                    parsed
                        .cert_manager
                        .insert(kind.clone(), document.clone())
                        .is_none(),
                    "two {kind}s"
                );
            }
            other => panic!("document {index}: unexpected kind {other:?}"),
        }
        parsed.all.push(document);
    }
    parsed
}

fn components(provider: Provider) -> Parsed {
    parse(&components::components_yaml(provider))
}

#[test]
fn exactly_one_namespace_and_every_namespaced_object_in_it() {
    for provider in Provider::ALL {
        let parsed = components(provider);
        let names: Vec<String> = parsed
            .namespaces
            .iter()
            .map(|n| n.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, [provider.namespace()], "{provider:?}");
        for document in &parsed.all {
            let kind = document["kind"].as_str().unwrap();
            let cluster_scoped = matches!(
                kind,
                "Namespace"
                    | "CustomResourceDefinition"
                    | "ClusterRole"
                    | "ClusterRoleBinding"
                    | "MutatingWebhookConfiguration"
                    | "ValidatingWebhookConfiguration"
            );
            let namespace = document["metadata"]["namespace"].as_str();
            if cluster_scoped {
                assert_eq!(namespace, None, "{kind} is cluster-scoped");
            } else {
                assert_eq!(namespace, Some(provider.namespace()), "{kind}");
            }
        }
    }
}

#[test]
fn every_object_carries_the_provider_label_and_its_name_prefix() {
    for provider in Provider::ALL {
        for document in &components(provider).all {
            let metadata = &document["metadata"];
            let name = metadata["name"].as_str().unwrap();
            assert_eq!(
                metadata["labels"][PROVIDER_LABEL].as_str(),
                Some(provider.label()),
                "{} {name}",
                document["kind"]
            );
            let kind = document["kind"].as_str().unwrap();
            if !matches!(kind, "Namespace" | "CustomResourceDefinition") {
                assert!(
                    name.starts_with(provider.name_prefix()),
                    "{kind} {name} lacks the prefix {}",
                    provider.name_prefix()
                );
            }
        }
    }
}

/// The base CRD with the references that assembling the components fills in.
fn as_shipped(mut crd: CustomResourceDefinition, provider: Provider) -> CustomResourceDefinition {
    let prefix = provider.name_prefix();
    crd.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(PROVIDER_LABEL.into(), provider.label().into());
    crd.metadata.annotations.as_mut().unwrap().insert(
        "cert-manager.io/inject-ca-from".into(),
        format!("{}/{prefix}serving-cert", provider.namespace()),
    );
    let service = crd
        .spec
        .conversion
        .as_mut()
        .and_then(|c| c.webhook.as_mut())
        .and_then(|w| w.client_config.as_mut())
        .and_then(|c| c.service.as_mut())
        .unwrap();
    service.name = format!("{prefix}webhook-service");
    service.namespace = provider.namespace().into();
    crd
}

#[test]
fn every_crd_of_the_provider_is_shipped_as_in_config_crd_bases() {
    let bases = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/crd/bases");
    for provider in Provider::ALL {
        let shipped = components(provider).crds;
        let expected: Vec<CustomResourceDefinition> = provider
            .crds()
            .iter()
            .map(|crd| {
                let path = bases.join(kubeadm_api::crd::file_name(crd));
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let on_disk: CustomResourceDefinition = serde_saphyr::from_str(&text).unwrap();
                as_shipped(on_disk, provider)
            })
            .collect();
        assert_eq!(shipped.len(), expected.len(), "{provider:?}");
        for (shipped, expected) in shipped.iter().zip(&expected) {
            assert_eq!(shipped, expected, "{:?}", shipped.metadata.name);
            assert_eq!(shipped.spec.group, provider.api_group());
        }
    }
}

fn rules(parsed: &Parsed) -> Vec<PolicyRule> {
    parsed
        .cluster_roles
        .iter()
        .flat_map(|r| r.rules.clone().unwrap_or_default())
        .chain(
            parsed
                .roles
                .iter()
                .flat_map(|r| r.rules.clone().unwrap_or_default()),
        )
        .collect()
}

#[test]
fn no_rule_grants_a_wildcard() {
    for provider in Provider::ALL {
        let rules = rules(&components(provider));
        assert!(!rules.is_empty());
        for rule in rules {
            let words = rule
                .verbs
                .iter()
                .chain(rule.resources.iter().flatten())
                .chain(rule.api_groups.iter().flatten())
                .chain(rule.resource_names.iter().flatten())
                .chain(rule.non_resource_urls.iter().flatten());
            for word in words {
                assert!(!word.contains('*'), "{provider:?}: wildcard in {rule:?}");
            }
        }
    }
}

#[test]
fn bindings_give_the_roles_to_the_managers_service_account() {
    for provider in Provider::ALL {
        let parsed = components(provider);
        let (namespace, account) = provider.service_account();
        assert_eq!(parsed.service_accounts.len(), 1);
        assert_eq!(
            parsed.service_accounts[0].metadata.name.as_deref(),
            Some(account.as_str())
        );
        let cluster_roles: BTreeSet<String> = parsed
            .cluster_roles
            .iter()
            .map(|r| r.metadata.name.clone().unwrap())
            .collect();
        let mut bound = BTreeSet::new();
        for binding in &parsed.cluster_role_bindings {
            assert_eq!(binding.role_ref.kind, "ClusterRole");
            assert!(cluster_roles.contains(&binding.role_ref.name));
            bound.insert(binding.role_ref.name.clone());
            let subject = &binding.subjects.as_ref().unwrap()[0];
            assert_eq!(
                (subject.kind.as_str(), subject.name.as_str()),
                ("ServiceAccount", account.as_str())
            );
            assert_eq!(subject.namespace.as_deref(), Some(namespace.as_str()));
        }
        // Roles only reach the manager through a binding or through aggregation.
        for role in &parsed.cluster_roles {
            let name = role.metadata.name.clone().unwrap();
            let aggregated =
                role.metadata.labels.as_ref().is_some_and(|l| {
                    l.contains_key(components::rbac::CONTROLPLANE_AGGREGATION_LABEL)
                });
            assert!(bound.contains(&name) || aggregated, "{name} reaches nobody");
        }
        assert_eq!(parsed.roles.len(), 1);
        assert_eq!(parsed.role_bindings.len(), 1);
        let binding = &parsed.role_bindings[0];
        assert_eq!(binding.role_ref.kind, "Role");
        assert_eq!(
            Some(&binding.role_ref.name),
            parsed.roles[0].metadata.name.as_ref()
        );
        let leases = &parsed.roles[0].rules.as_ref().unwrap()[0];
        assert_eq!(
            leases.resources.as_deref(),
            Some(&["leases".to_owned()][..])
        );
    }
}

#[test]
fn control_plane_manager_gets_infrastructure_through_the_aggregation_label_cluster_api_uses() {
    let parsed = components(Provider::ControlPlane);
    let aggregated = parsed
        .cluster_roles
        .iter()
        .find(|r| r.aggregation_rule.is_some())
        .expect("an aggregated role");
    let selector = &aggregated
        .aggregation_rule
        .as_ref()
        .unwrap()
        .cluster_role_selectors
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        selector.match_labels.as_ref().unwrap()["kubeadm.controlplane.cluster.x-k8s.io/aggregate-to-manager"],
        "true"
    );
    let infrastructure: Vec<&PolicyRule> = parsed
        .cluster_roles
        .iter()
        .flat_map(|r| r.rules.iter().flatten())
        .filter(|r| {
            r.api_groups.as_deref() == Some(&["infrastructure.cluster.x-k8s.io".to_owned()][..])
        })
        .collect();
    let resources: BTreeSet<&str> = infrastructure
        .iter()
        .flat_map(|r| r.resources.iter().flatten())
        .map(String::as_str)
        .collect();
    assert!(resources.contains("openstackmachines"));
    assert!(resources.contains("openstackmachinetemplates"));
    assert!(resources.contains("dockermachinetemplates"));
    // The bootstrap manager needs nothing of the infrastructure.
    let bootstrap = rules(&components(Provider::Bootstrap));
    assert!(bootstrap.iter().all(|r| {
        !r.api_groups
            .iter()
            .flatten()
            .any(|g| g.starts_with("infrastructure"))
    }));
}

/// `${NAME:=default}` references in `text`, as `(name, default)`.
fn variables(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let tail = &rest[start + 2..];
        let end = tail.find('}').expect("a closed ${...}");
        let inner = &tail[..end];
        let (name, default) = inner.split_once(":=").unwrap_or_else(|| {
            panic!("${{{inner}}} has no `:=default`: clusterctl would require it")
        });
        found.push((name.to_owned(), default.to_owned()));
        rest = &tail[end..];
    }
    found
}

#[test]
fn settings_are_clusterctl_variables_with_defaults() {
    for provider in Provider::ALL {
        let text = components::components_yaml(provider);
        for placeholder in ["$(CERTIFICATE_", "$(SERVICE_"] {
            assert!(
                !text.contains(placeholder),
                "{placeholder}...) left unfilled"
            );
        }
        // clusterctl also substitutes bare `$NAME`, and would require it to be set.
        let bare = text
            .match_indices('$')
            .filter(|(i, _)| {
                text[i + 1..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            })
            .count();
        assert_eq!(bare, 0, "a bare $NAME in the components");
        let variables = variables(&text);
        assert!(!variables.is_empty());
        for (name, default) in &variables {
            assert!(
                !default.is_empty(),
                "${{{name}}}: an empty default makes clusterctl require the variable"
            );
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'),
                "{name}"
            );
        }
        let parsed = components(provider);
        assert_eq!(parsed.deployments.len(), 1);
        let pod = parsed.deployments[0]
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap();
        let container = &pod.containers[0];
        assert_eq!(pod.containers.len(), 1);
        assert_eq!(
            container.name, "manager",
            "clusterctl looks for the container named manager"
        );
        assert_eq!(
            container.image.as_deref(),
            Some(
                format!(
                    "${{KUBEADM_PROVIDERS_IMAGE:=docker.io/library/kubeadm-providers:{}}}",
                    components::version()
                )
                .as_str()
            )
        );
        let args = container.args.clone().unwrap();
        assert_eq!(args[..2], ["run", "--leader-elect"]);
        assert!(args.contains(&"--log-format=${KUBEADM_PROVIDERS_LOG_FORMAT:=text}".to_owned()));
        let ttl = "--bootstrap-token-ttl=${KUBEADM_BOOTSTRAP_TOKEN_TTL:=15m}".to_owned();
        assert_eq!(args.contains(&ttl), provider == Provider::Bootstrap);
        // With every variable at its default the arguments are ones the manager accepts.
        assert!(
            args.iter()
                .any(|a| a == "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs")
        );
    }
}

#[test]
fn the_manager_runs_unprivileged_with_probes_and_the_webhook_certificate() {
    for provider in Provider::ALL {
        let parsed = components(provider);
        let deployment = &parsed.deployments[0];
        let spec = deployment.spec.as_ref().unwrap();
        let pod = spec.template.spec.as_ref().unwrap();
        let container = &pod.containers[0];
        let pod_security = pod.security_context.as_ref().unwrap();
        assert_eq!(pod_security.run_as_non_root, Some(true));
        assert_eq!(
            pod_security.seccomp_profile.as_ref().unwrap().type_,
            "RuntimeDefault"
        );
        let security = container.security_context.as_ref().unwrap();
        assert_eq!(security.read_only_root_filesystem, Some(true));
        assert_eq!(security.allow_privilege_escalation, Some(false));
        assert_eq!(
            security.capabilities.as_ref().unwrap().drop.as_deref(),
            Some(&["ALL".to_owned()][..])
        );
        let probe_path = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
            probe
                .as_ref()
                .unwrap()
                .http_get
                .as_ref()
                .unwrap()
                .path
                .clone()
                .unwrap()
        };
        assert_eq!(probe_path(&container.liveness_probe), "/healthz");
        assert_eq!(probe_path(&container.readiness_probe), "/readyz");
        let requests = container
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap();
        assert!(requests.contains_key("cpu") && requests.contains_key("memory"));
        assert_eq!(
            pod.service_account_name.as_ref(),
            Some(&provider.service_account().1)
        );

        // Certificate -> Secret -> volume; Service -> pods; webhooks, CRD conversion -> Service;
        // CA injection -> Certificate.
        let certificate = &parsed.cert_manager["Certificate"];
        let issuer = &parsed.cert_manager["Issuer"];
        assert_eq!(
            certificate["spec"]["issuerRef"]["name"],
            issuer["metadata"]["name"]
        );
        let secret = certificate["spec"]["secretName"].as_str().unwrap();
        let volume = &pod.volumes.as_ref().unwrap()[0];
        assert_eq!(
            volume.secret.as_ref().unwrap().secret_name.as_deref(),
            Some(secret)
        );
        let mount = &container.volume_mounts.as_ref().unwrap()[0];
        assert_eq!(mount.name, volume.name);
        assert_eq!(mount.mount_path, "/tmp/k8s-webhook-server/serving-certs");
        let service = &parsed.services[0];
        let service_name = service.metadata.name.clone().unwrap();
        let selector = service.spec.as_ref().unwrap().selector.clone().unwrap();
        let pod_labels = spec
            .template
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .clone()
            .unwrap();
        assert!(selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)));
        assert_eq!(spec.selector.match_labels.as_ref(), Some(&pod_labels));
        let dns: Vec<&str> = certificate["spec"]["dnsNames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap())
            .collect();
        assert_eq!(
            dns,
            [
                format!("{service_name}.{}.svc", provider.namespace()),
                format!("{service_name}.{}.svc.cluster.local", provider.namespace())
            ]
        );
        let injection = format!(
            "{}/{}",
            provider.namespace(),
            certificate["metadata"]["name"].as_str().unwrap()
        );
        let mut references = 0;
        for configuration in &parsed.mutating {
            assert_eq!(
                configuration.metadata.annotations.as_ref().unwrap()["cert-manager.io/inject-ca-from"],
                injection
            );
            for webhook in configuration.webhooks.iter().flatten() {
                let target = webhook.client_config.service.as_ref().unwrap();
                assert_eq!(
                    (target.name.as_str(), target.namespace.as_str()),
                    (service_name.as_str(), provider.namespace())
                );
                assert_eq!(
                    webhook.rules.as_ref().unwrap()[0]
                        .api_groups
                        .as_ref()
                        .unwrap()[0],
                    provider.api_group()
                );
                references += 1;
            }
        }
        for configuration in &parsed.validating {
            assert_eq!(
                configuration.metadata.annotations.as_ref().unwrap()["cert-manager.io/inject-ca-from"],
                injection
            );
            for webhook in configuration.webhooks.iter().flatten() {
                let target = webhook.client_config.service.as_ref().unwrap();
                assert_eq!(
                    (target.name.as_str(), target.namespace.as_str()),
                    (service_name.as_str(), provider.namespace())
                );
                assert_eq!(
                    webhook.rules.as_ref().unwrap()[0]
                        .api_groups
                        .as_ref()
                        .unwrap()[0],
                    provider.api_group()
                );
                references += 1;
            }
        }
        for crd in &parsed.crds {
            assert_eq!(
                crd.metadata.annotations.as_ref().unwrap()["cert-manager.io/inject-ca-from"],
                injection
            );
            let target = crd
                .spec
                .conversion
                .as_ref()
                .unwrap()
                .webhook
                .as_ref()
                .unwrap()
                .client_config
                .as_ref()
                .unwrap()
                .service
                .as_ref()
                .unwrap();
            assert_eq!(
                (target.name.as_str(), target.namespace.as_str()),
                (service_name.as_str(), provider.namespace())
            );
        }
        // Both providers have defaulting and validation webhooks.
        assert!(!parsed.mutating.is_empty() && !parsed.validating.is_empty() && references >= 3);
        let webhook_port = service.spec.as_ref().unwrap().ports.as_ref().unwrap()[0]
            .target_port
            .clone();
        let container_port = container
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .find(|p| p.name.as_deref() == Some("webhook-server"))
            .unwrap()
            .container_port;
        assert_eq!(
            webhook_port,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(container_port))
        );
    }
}

#[test]
fn metadata_names_the_contract_the_crds_are_labelled_with() {
    let metadata: Value = serde_saphyr::from_str(&components::metadata_yaml()).unwrap();
    assert_eq!(
        metadata["apiVersion"],
        "clusterctl.cluster.x-k8s.io/v1alpha3"
    );
    assert_eq!(metadata["kind"], "Metadata");
    let series = metadata["releaseSeries"].as_array().unwrap();
    assert_eq!(series.len(), 1);
    let version = components::version();
    let mut numbers = version.trim_start_matches('v').split('.');
    assert_eq!(series[0]["major"].to_string(), numbers.next().unwrap());
    assert_eq!(series[0]["minor"].to_string(), numbers.next().unwrap());
    let contract = series[0]["contract"].as_str().unwrap();
    assert_eq!(contract, "v1beta2");
    for provider in Provider::ALL {
        for crd in components(provider).crds {
            let labels = crd.metadata.labels.unwrap();
            assert_eq!(
                labels
                    .get(&format!("cluster.x-k8s.io/{contract}"))
                    .map(String::as_str),
                Some(contract),
                "{:?}",
                crd.metadata.name
            );
        }
    }
}

#[test]
fn the_local_repository_is_laid_out_as_clusterctl_reads_it() {
    let templates = vec![
        (
            "cluster-template.yaml".to_owned(),
            "kind: Cluster\n".to_owned(),
        ),
        (
            "cluster-template-scs.yaml".to_owned(),
            "kind: Cluster\n".to_owned(),
        ),
    ];
    let version = components::version();
    let paths: Vec<String> = components::repository_files(&templates)
        .into_iter()
        .map(|(path, _)| path)
        .collect();
    assert_eq!(
        paths,
        [
            format!("bootstrap-kubeadm/{version}/bootstrap-components.yaml"),
            format!("bootstrap-kubeadm/{version}/metadata.yaml"),
            format!("control-plane-kubeadm/{version}/control-plane-components.yaml"),
            format!("control-plane-kubeadm/{version}/metadata.yaml"),
            format!("control-plane-kubeadm/{version}/cluster-template.yaml"),
            format!("control-plane-kubeadm/{version}/cluster-template-scs.yaml"),
        ]
    );
    assert!(components::is_cluster_template("cluster-template-scs.yaml"));
    assert!(!components::is_cluster_template("clusterclass-scs.yaml"));
    assert!(!components::is_cluster_template(
        "cluster-template.yaml.orig"
    ));
    // No templates folder yet: the repository still has both providers.
    assert_eq!(components::repository_files(&[]).len(), 4);
}

/// The Dockerfile builds the image the Deployments name: both binaries (built by `hack/image.sh`) at the
/// paths their `command` runs, the user their security context sets, and the Makefile tags it with the
/// manifests' default.
#[test]
fn the_image_holds_what_the_deployments_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    let script = std::fs::read_to_string(root.join("hack/image.sh")).unwrap();
    let makefile = std::fs::read_to_string(root.join("Makefile")).unwrap();
    let built = script
        .lines()
        .find_map(|l| l.strip_prefix("binaries=("))
        .and_then(|l| l.strip_suffix(')'))
        .expect("hack/image.sh names the binaries it builds");
    for provider in Provider::ALL {
        let parsed = components(provider);
        let pod = parsed.deployments[0]
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap();
        let container = &pod.containers[0];
        let command = &container.command.as_ref().unwrap()[0];
        let binary = command.trim_start_matches('/');
        assert!(
            built.split(' ').any(|b| b == binary)
                && dockerfile.lines().any(|l| l.starts_with("COPY ")
                    && l.ends_with(" /")
                    && l.contains(&format!(" bin/{binary} "))),
            "the image lacks {command}"
        );
        let image = container.image.as_deref().unwrap();
        let default = image
            .split(":=")
            .nth(1)
            .unwrap()
            .trim_end_matches('}')
            .replace(env!("CARGO_PKG_VERSION"), "$(VERSION)");
        assert!(
            makefile.contains(&format!("IMAGE ?= {default}")),
            "make image does not tag {default}"
        );
        let user = pod
            .security_context
            .as_ref()
            .and_then(|s| s.run_as_user)
            .or_else(|| {
                container
                    .security_context
                    .as_ref()
                    .and_then(|s| s.run_as_user)
            })
            .unwrap();
        assert!(
            dockerfile.contains(&format!("USER {user}:{user}")),
            "USER {user}"
        );
    }
}

/// `clusterctl delete` leaves a provider's ClusterRoles and ClusterRoleBindings behind, and a binding's
/// `roleRef` cannot change: our components install over Cluster API's (and Cluster API's over ours)
/// only when each binding has the name and role reference Cluster API v1.14's components give it.
#[test]
fn cluster_role_bindings_are_cluster_apis_so_each_side_installs_over_the_other() {
    for (provider, expected) in [
        (
            Provider::Bootstrap,
            (
                "capi-kubeadm-bootstrap-manager-rolebinding",
                "capi-kubeadm-bootstrap-manager-role",
            ),
        ),
        (
            Provider::ControlPlane,
            (
                "capi-kubeadm-control-plane-manager-rolebinding",
                "capi-kubeadm-control-plane-aggregated-manager-role",
            ),
        ),
    ] {
        let parsed = components(provider);
        let bindings: Vec<(&str, &str)> = parsed
            .cluster_role_bindings
            .iter()
            .map(|b| {
                (
                    b.metadata.name.as_deref().unwrap(),
                    b.role_ref.name.as_str(),
                )
            })
            .collect();
        assert_eq!(bindings, [expected], "{provider:?}");
    }
    // The control plane's own rules reach its manager through the aggregated role, as Cluster API's do.
    let parsed = components(Provider::ControlPlane);
    let manager = parsed
        .cluster_roles
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some("capi-kubeadm-control-plane-manager-role"))
        .expect("the manager role");
    assert_eq!(
        manager.metadata.labels.as_ref().unwrap()[components::rbac::CONTROLPLANE_AGGREGATION_LABEL],
        "true"
    );
}
