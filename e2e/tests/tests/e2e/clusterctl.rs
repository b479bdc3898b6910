//! Cluster API's own `clusterctl` (built from `hack/tools/capi`) against what this project ships.

use std::path::{Path, PathBuf};
use std::process::Command;

use e2e_tests::env::{CLUSTERCTL_EXAMPLE, manager_binary};
use serde_json::Value;
use testenv::capi::{CLUSTERCTL, ClusterApi};

fn templates() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("cluster-") && n.ends_with(".yaml"))
        })
        .collect();
    files.sort();
    files
}

fn run(mut command: Command) -> String {
    let shown = format!("{command:?}");
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{shown}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap()
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// `clusterctl generate cluster --from` and `controlplane-manager generate cluster --from` give the same
/// objects in the same order for every template we ship (clusterctl re-serializes them: key order,
/// quoting and comments differ, the objects do not).
#[test]
fn clusterctl_generate_cluster_gives_our_objects_for_every_template() {
    let release = ClusterApi::find().expect("Cluster API built by hack/install-testenv.sh");
    let dir = tempfile::tempdir().unwrap();
    // clusterctl picks the configuration reader by file extension.
    let config = dir.path().join("clusterctl.yaml");
    std::fs::copy(CLUSTERCTL_EXAMPLE, &config).unwrap();
    let ours_binary = manager_binary("controlplane-manager", "CONTROLPLANE_MANAGER");
    let shipped = templates();
    assert!(shipped.len() >= 4, "{shipped:?}");
    for template in shipped {
        let args = |command: &mut Command| {
            command
                .args(["generate", "cluster", "demo", "--from"])
                .arg(&template)
                .arg("--config")
                .arg(&config)
                .args([
                    "--target-namespace",
                    "team-a",
                    "--kubernetes-version",
                    "v1.34.4",
                ])
                .args(["--control-plane-machine-count", "3"])
                .args(["--worker-machine-count", "2"])
                .env_remove("NAMESPACE")
                .env("XDG_CONFIG_HOME", dir.path());
        };
        let mut theirs = Command::new(release.binary(CLUSTERCTL));
        args(&mut theirs);
        let mut ours = Command::new(&ours_binary);
        args(&mut ours);
        let (theirs, ours) = (documents(&run(theirs)), documents(&run(ours)));
        assert!(!ours.is_empty(), "{}: nothing rendered", template.display());
        assert_eq!(
            serde_json::to_string_pretty(&theirs).unwrap(),
            serde_json::to_string_pretty(&ours).unwrap(),
            "{}: clusterctl's objects (left) and ours (right) differ",
            template.display()
        );
    }
}

/// `clusterctl generate provider` reads our local repository (what `make release-manifests` writes to
/// `out/`) through a `providers:` override: it accepts our `metadata.yaml` and components, and prints
/// every object of our components file with the provider label clusterctl adds.
#[test]
fn clusterctl_generate_provider_reads_our_local_repository() {
    use xtask::components::{self, Provider};
    let release = ClusterApi::find().expect("Cluster API built by hack/install-testenv.sh");
    let dir = tempfile::tempdir().unwrap();
    let repository = dir.path().join("out");
    for (path, content) in components::repository_files(&[]) {
        let path = repository.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let version = components::version();
    let mut providers = String::from("providers:\n");
    for provider in Provider::ALL {
        let kind = match provider {
            Provider::Bootstrap => "BootstrapProvider",
            Provider::ControlPlane => "ControlPlaneProvider",
        };
        let url = repository
            .join(provider.label())
            .join(&version)
            .join(provider.components_file());
        providers.push_str(&format!(
            "  - name: kubeadm\n    type: {kind}\n    url: {}\n",
            url.display()
        ));
    }
    let config = dir.path().join("clusterctl.yaml");
    std::fs::write(&config, &providers).unwrap();
    for provider in Provider::ALL {
        let flag = match provider {
            Provider::Bootstrap => "--bootstrap",
            Provider::ControlPlane => "--control-plane",
        };
        let mut command = Command::new(release.binary(CLUSTERCTL));
        command
            .args(["generate", "provider", flag, "kubeadm", "--config"])
            .arg(&config)
            .env("XDG_CONFIG_HOME", dir.path());
        let generated = documents(&run(command));
        let ours = documents(&components::components_yaml(provider));
        let key = |d: &Value| {
            format!(
                "{}/{}",
                d["kind"].as_str().unwrap_or_default(),
                d["metadata"]["name"].as_str().unwrap_or_default()
            )
        };
        let mut theirs_keys: Vec<String> = generated.iter().map(key).collect();
        let mut ours_keys: Vec<String> = ours.iter().map(key).collect();
        theirs_keys.sort();
        ours_keys.sort();
        assert_eq!(theirs_keys, ours_keys, "{}", provider.label());
        for object in &generated {
            assert_eq!(
                object["metadata"]["labels"]["cluster.x-k8s.io/provider"],
                provider.label(),
                "{}: clusterctl labels {} as ours",
                provider.label(),
                key(object)
            );
        }
        let deployment = generated
            .iter()
            .find(|d| d["kind"] == "Deployment")
            .expect("a Deployment");
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][0]["image"],
            format!("docker.io/library/kubeadm-providers:{version}"),
            "the image variable's default, as clusterctl fills it in"
        );
    }
}

/// `clusterctl init` installs Cluster API's core (its release's components, built by kustomize), our
/// components and the simulated infrastructure from a local repository into a fresh management plane;
/// once cert-manager's work is done and the installed Deployments run with their installed arguments
/// and service accounts (see `testenv::clusterctl`), every webhook answers through its installed
/// Service and configuration: the core's, and our conversion, defaulting (in the topology controller's
/// dry runs) and validation.
#[tokio::test(flavor = "multi_thread")]
async fn clusterctl_init_installs_our_providers_and_their_webhooks_answer() {
    use e2e_tests::installed;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
    use xtask::components::{self, Provider};

    let release = ClusterApi::find().expect("Cluster API built by hack/install-testenv.sh");
    let network = sim::netns::Fabric::create().expect("a bridge for the webhook Services");
    let plane = installed::management_plane().await;
    let installed = installed::install(
        &plane,
        std::net::IpAddr::V4(network.gateway()),
        installed::Kubeadm::Ours,
        Vec::new(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let output = &installed.init_output;
    assert!(
        output.contains("Skipping installing cert-manager"),
        "clusterctl found cert-manager answering:\n{output}"
    );

    // clusterctl's inventory holds each provider at its version, in its own namespace.
    let version = components::version();
    let core_version = release.version().unwrap();
    let expected: Vec<(String, String, String, String)> = [
        (
            "capi-kubeadm-bootstrap-system",
            "kubeadm",
            "BootstrapProvider",
            version.as_str(),
        ),
        (
            "capi-kubeadm-control-plane-system",
            "kubeadm",
            "ControlPlaneProvider",
            &version,
        ),
        ("capi-system", "cluster-api", "CoreProvider", &core_version),
        (
            "sim-system",
            "sim",
            "InfrastructureProvider",
            installed::SIM_VERSION,
        ),
    ]
    .iter()
    .map(|(ns, name, kind, v)| {
        (
            ns.to_string(),
            name.to_string(),
            kind.to_string(),
            v.to_string(),
        )
    })
    .collect();
    let inventory = testenv::clusterctl::inventory(&plane).await.unwrap();
    assert_eq!(inventory, expected, "clusterctl's inventory:\n{output}");
    // It labels every object it installed, the CRDs clusterctl move and upgrade look for among them.
    let client = plane.client().await.unwrap();
    for provider in Provider::ALL {
        for crd in provider.crds() {
            let name = crd.metadata.name.unwrap();
            let installed = Api::<CustomResourceDefinition>::all(client.clone())
                .get(&name)
                .await
                .unwrap();
            let labels = installed.metadata.labels.unwrap_or_default();
            assert_eq!(
                labels.get("cluster.x-k8s.io/provider").map(String::as_str),
                Some(provider.label()),
                "{name}"
            );
            assert!(
                labels.contains_key("clusterctl.cluster.x-k8s.io"),
                "{name}: {labels:?}"
            );
        }
    }

    let dynamic = |group: &str, version: &str, kind: &str| {
        Api::<DynamicObject>::namespaced_with(
            client.clone(),
            "default",
            &ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind)),
        )
    };
    let object =
        |value: serde_json::Value| -> DynamicObject { serde_json::from_value(value).unwrap() };
    // The core's admission webhooks, through capi-webhook-service.
    dynamic("cluster.x-k8s.io", "v1beta2", "Cluster")
        .create(
            &PostParams::default(),
            &object(serde_json::json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": "demo", "namespace": "default"},
                "spec": {"controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io",
                    "kind": "KubeadmControlPlane", "name": "demo"}}
            })),
        )
        .await
        .unwrap();
    // Our conversion (v1beta1 in, v1beta2 stored and read back) and defaulting, through our Service.
    dynamic(
        "bootstrap.cluster.x-k8s.io",
        "v1beta1",
        "KubeadmConfigTemplate",
    )
    .create(
        &PostParams::default(),
        &object(serde_json::json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1", "kind": "KubeadmConfigTemplate",
            "metadata": {"name": "demo", "namespace": "default"},
            "spec": {"template": {"spec": {
                "joinConfiguration": {"nodeRegistration": {"name": "node-a"}}}}}
        })),
    )
    .await
    .unwrap();
    let stored = dynamic(
        "bootstrap.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmConfigTemplate",
    )
    .get("demo")
    .await
    .unwrap();
    let spec = &stored.data["spec"]["template"]["spec"];
    assert_eq!(
        spec["joinConfiguration"]["nodeRegistration"]["name"], "node-a",
        "{stored:?}"
    );
    assert!(
        spec["format"].is_null(),
        "defaulted outside a dry run: {stored:?}"
    );
    // Defaulting, as the topology controller's dry runs get it (Cluster API v1.14 defaults only then).
    let dry_run = dynamic(
        "bootstrap.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmConfigTemplate",
    )
    .create(
        &PostParams {
            dry_run: true,
            ..Default::default()
        },
        &object(serde_json::json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate",
            "metadata": {"name": "dry", "namespace": "default",
                "annotations": {"topology.cluster.x-k8s.io/dry-run": ""}},
            "spec": {"template": {"spec": {}}}
        })),
    )
    .await
    .unwrap();
    assert_eq!(
        dry_run.data["spec"]["template"]["spec"]["format"], "cloud-config",
        "defaulted in the topology controller's dry run: {dry_run:?}"
    );
    // Our validation, through our Service: the rule and the field are named.
    let refused = dynamic(
        "controlplane.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmControlPlane",
    )
    .create(
        &PostParams::default(),
        &object(serde_json::json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
            "metadata": {"name": "demo", "namespace": "default"},
            "spec": {"replicas": 2, "version": "v1.34.4",
                "machineTemplate": {"spec": {"infrastructureRef": {
                    "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachineTemplate",
                    "name": "demo"}}}}
        })),
    )
    .await
    .expect_err("two replicas of stacked etcd are refused");
    let message = refused.to_string();
    assert!(
        message.contains("spec.replicas") && message.contains("even number"),
        "{message}"
    );
    drop(installed);
}
