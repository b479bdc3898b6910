//! The cluster templates in `templates/` against the example settings: every template renders, passes the
//! offline admission rules of both providers, renders the same bytes twice, and a counter bump renames
//! exactly the machine templates that carry the counter.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use kubeadm_api::cluster::v1beta2::{Cluster, MachineDeployment};
use kubeadm_tools::template::{
    self, CONTROL_PLANE_MACHINE_GEN, ClusterOptions, GenerateError, Settings, WORKER_MACHINE_GEN,
    bump_in_text,
};
use kubeadm_tools::validate::check_documents;
use serde_json::Value;

/// Set by `generate cluster` from its arguments, so the example only mentions them in a comment.
const SET_BY_THE_COMMAND: [&str; 2] = ["CLUSTER_NAME", "NAMESPACE"];

fn templates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates")
}

/// Every `templates/cluster-template*.yaml` and `templates/cluster-class-*.yaml`, by the name the user
/// would type.
fn templates() -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = std::fs::read_dir(templates_dir())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| {
            (name.starts_with("cluster-template") || name.starts_with("cluster-class-"))
                && name.ends_with(".yaml")
        })
        .map(|name| {
            let text = std::fs::read_to_string(templates_dir().join(&name)).unwrap();
            (format!("templates/{name}"), text)
        })
        .collect();
    found.sort();
    assert!(!found.is_empty(), "no templates/cluster-template*.yaml");
    found
}

fn example_text() -> String {
    std::fs::read_to_string(templates_dir().join("clusterctl.yaml.example")).unwrap()
}

fn settings_from(example: &str) -> Settings {
    Settings::from_clusterctl_yaml("templates/clusterctl.yaml.example", example)
        .unwrap()
        .for_cluster(&ClusterOptions {
            cluster_name: "demo".into(),
            ..ClusterOptions::default()
        })
        .unwrap()
}

fn render(name: &str, template: &str, example: &str) -> String {
    template::generate(template, name, &settings_from(example))
        .unwrap_or_else(|error| panic!("{error}"))
}

/// The YAML documents of a rendered template, parsed.
fn documents(rendered: &str) -> Vec<Value> {
    let mut documents = Vec::new();
    let mut current = String::new();
    for line in rendered.split_inclusive('\n') {
        if line.trim_end() == "---" {
            documents.push(std::mem::take(&mut current));
        } else {
            current.push_str(line);
        }
    }
    documents.push(current);
    documents
        .iter()
        .filter(|text| {
            text.lines()
                .any(|line| !line.trim_start().starts_with('#') && !line.trim().is_empty())
        })
        .map(|text| serde_saphyr::from_str(text).unwrap_or_else(|error| panic!("{error}\n{text}")))
        .collect()
}

fn kind_and_name(document: &Value) -> (String, String) {
    (
        document["kind"].as_str().unwrap_or_default().to_owned(),
        document["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

#[test]
fn the_example_covers_every_variable_of_every_template() {
    let example = example_text();
    let settings =
        Settings::from_clusterctl_yaml("templates/clusterctl.yaml.example", &example).unwrap();
    for name in SET_BY_THE_COMMAND {
        assert!(
            example.contains(&format!("#   {name} ")),
            "clusterctl.yaml.example should say in a comment that the command sets {name}"
        );
    }
    for (name, template) in templates() {
        let lacking: Vec<String> = template::list_variables(&template, &name)
            .unwrap()
            .into_iter()
            .filter(|variable| {
                !SET_BY_THE_COMMAND.contains(&variable.name.as_str())
                    && settings.get(&variable.name).is_none()
            })
            .map(|variable| format!("{} (first used on line {})", variable.name, variable.line))
            .collect();
        assert!(
            lacking.is_empty(),
            "{name} uses variables templates/clusterctl.yaml.example does not set: {}",
            lacking.join(", ")
        );
    }
    // Every setting in the example says what it is, on the line above.
    let lines: Vec<&str> = example.lines().collect();
    for (index, line) in lines.iter().enumerate() {
        if !line.is_empty() && !line.starts_with('#') {
            assert!(
                index > 0 && lines[index - 1].starts_with('#'),
                "clusterctl.yaml.example line {}: {line:?} has no comment",
                index + 1
            );
        }
    }
}

#[test]
fn every_template_renders_and_passes_the_offline_admission_rules() {
    let example = example_text();
    for (name, template) in templates() {
        let rendered = render(&name, &template, &example);
        let report = check_documents(
            &name,
            &rendered,
            &[
                kubeadm_api::bootstrap::GROUP,
                kubeadm_api::controlplane::GROUP,
            ],
        );
        let problems: Vec<String> = report.problems.iter().map(ToString::to_string).collect();
        assert!(problems.is_empty(), "{name}:\n{}", problems.join("\n"));
        // A Cluster of a ClusterClass holds nothing of ours: the class has the templates.
        let of_a_class = documents(&rendered)
            .iter()
            .any(|d| d["kind"] == "Cluster" && d["spec"]["topology"].is_object());
        assert!(
            report.checked >= 2 || of_a_class,
            "{name}: expected a control plane and a worker template"
        );
        assert!(
            !rendered.contains("${"),
            "{name} still holds a variable after rendering"
        );

        let documents = documents(&rendered);
        let mut kinds = BTreeSet::new();
        for document in &documents {
            let (kind, object) = kind_and_name(document);
            assert_eq!(
                document["metadata"]["namespace"], "default",
                "{name}: {kind}/{object}"
            );
            match kind.as_str() {
                "Cluster" => {
                    serde_json::from_value::<Cluster>(document.clone())
                        .unwrap_or_else(|error| panic!("{name}: Cluster: {error}"));
                }
                "MachineDeployment" => {
                    serde_json::from_value::<MachineDeployment>(document.clone())
                        .unwrap_or_else(|error| panic!("{name}: MachineDeployment: {error}"));
                }
                _ => {}
            }
            kinds.insert(kind);
        }
        let expected: &[&str] = if kinds.contains("ClusterClass") {
            &[
                "ClusterClass",
                "KubeadmControlPlaneTemplate",
                "KubeadmConfigTemplate",
            ]
        } else if of_a_class {
            &["Cluster"]
        } else {
            &[
                "Cluster",
                "KubeadmControlPlane",
                "MachineDeployment",
                "KubeadmConfigTemplate",
            ]
        };
        for kind in expected {
            assert!(kinds.contains(*kind), "{name} has no {kind}");
        }
    }
}

#[test]
fn the_openstack_template_has_the_scs_shape() {
    let template = std::fs::read_to_string(templates_dir().join("cluster-template.yaml")).unwrap();
    let rendered = render(
        "templates/cluster-template.yaml",
        &template,
        &example_text(),
    );
    let by_kind: BTreeMap<(String, String), Value> = documents(&rendered)
        .into_iter()
        .map(|document| (kind_and_name(&document), document))
        .collect();
    let names: BTreeSet<(&str, &str)> = by_kind
        .keys()
        .map(|(kind, name)| (kind.as_str(), name.as_str()))
        .collect();
    let expected: BTreeSet<(&str, &str)> = [
        ("Secret", "demo-cloud-config"),
        ("Cluster", "demo"),
        ("OpenStackCluster", "demo"),
        ("KubeadmControlPlane", "demo-control-plane"),
        ("OpenStackMachineTemplate", "capi-demo-control-plane-genc01"),
        ("MachineDeployment", "capi-demo-md-0-no1"),
        ("OpenStackMachineTemplate", "capi-demo-md-0-genw01"),
        ("KubeadmConfigTemplate", "capi-demo-md-0-genw01"),
    ]
    .into_iter()
    .collect();
    assert_eq!(names, expected);

    let kcp = &by_kind[&(
        "KubeadmControlPlane".to_owned(),
        "demo-control-plane".to_owned(),
    )];
    assert_eq!(
        kcp["metadata"]["annotations"]["controlplane.cluster.x-k8s.io/etcd-unsafe-no-fsync"],
        "false"
    );
    assert_eq!(kcp["spec"]["replicas"], 3);
    assert_eq!(
        kcp["spec"]["machineTemplate"]["spec"]["infrastructureRef"]["name"],
        "capi-demo-control-plane-genc01"
    );
    assert_eq!(
        kcp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["etcd"]["local"]["extraArgs"],
        serde_json::json!([
            {"name": "heartbeat-interval", "value": "250"},
            {"name": "election-timeout", "value": "2500"},
        ])
    );
    let md = &by_kind[&(
        "MachineDeployment".to_owned(),
        "capi-demo-md-0-no1".to_owned(),
    )];
    assert_eq!(md["spec"]["replicas"], 3);
    assert_eq!(
        md["spec"]["template"]["spec"]["bootstrap"]["configRef"]["name"],
        "capi-demo-md-0-genw01"
    );
    assert_eq!(
        md["spec"]["template"]["spec"]["infrastructureRef"]["name"],
        "capi-demo-md-0-genw01"
    );

    let mut unsafe_fs = Settings::from_clusterctl_yaml("c.yaml", &example_text())
        .unwrap()
        .with_env([("ETCD_UNSAFE_FS".to_owned(), "true".to_owned())])
        .for_cluster(&ClusterOptions {
            cluster_name: "demo".into(),
            ..ClusterOptions::default()
        })
        .unwrap();
    unsafe_fs.set("KUBERNETES_VERSION", "v1.34.2");
    let rendered = template::generate(&template, "t", &unsafe_fs).unwrap();
    assert!(rendered.contains("controlplane.cluster.x-k8s.io/etcd-unsafe-no-fsync: \"true\"\n"));
    assert!(rendered.contains("  version: v1.34.2\n"));
}

/// The OpenStack template rendered with the example settings; review changes as a diff of
/// `tests/golden/cluster-template.yaml`, `UPDATE_GOLDEN=1 cargo test` rewrites it.
#[test]
fn the_openstack_template_renders_as_the_golden_file() {
    let template = std::fs::read_to_string(templates_dir().join("cluster-template.yaml")).unwrap();
    let rendered = render(
        "templates/cluster-template.yaml",
        &template,
        &example_text(),
    );
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/cluster-template.yaml");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &rendered).unwrap();
        return;
    }
    let golden = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run UPDATE_GOLDEN=1 cargo test", path.display()));
    assert!(
        golden == rendered,
        "the rendered template differs from tests/golden/cluster-template.yaml; if the change is \
         intended, run UPDATE_GOLDEN=1 cargo test and review the diff\n--- rendered ---\n{rendered}"
    );
}

#[test]
fn rendering_unchanged_settings_twice_gives_the_same_bytes() {
    let example = example_text();
    for (name, template) in templates() {
        assert_eq!(
            render(&name, &template, &example),
            render(&name, &template, &example),
            "{name}"
        );
    }
}

#[test]
fn a_counter_bump_renames_exactly_the_machine_templates_that_carry_it() {
    let example = example_text();
    let mut counted = 0;
    for (name, template) in templates() {
        let variables: Vec<String> = template::list_variables(&template, &name)
            .unwrap()
            .into_iter()
            .map(|v| v.name)
            .collect();
        // A ClusterClass is versioned by its name instead.
        if ![CONTROL_PLANE_MACHINE_GEN, WORKER_MACHINE_GEN]
            .iter()
            .any(|counter| variables.iter().any(|v| v == counter))
        {
            continue;
        }
        counted += 1;
        let before = render(&name, &template, &example);
        for variable in [CONTROL_PLANE_MACHINE_GEN, WORKER_MACHINE_GEN] {
            let bump = bump_in_text("clusterctl.yaml", &example, variable).unwrap();
            let after = render(&name, &template, &bump.text);
            // Every change is the counter itself: nothing else moves.
            assert_eq!(
                after,
                before.replace(&bump.old, &bump.new),
                "{name}: {variable}"
            );

            let names = |rendered: &str| -> BTreeSet<(String, String)> {
                documents(rendered).iter().map(kind_and_name).collect()
            };
            let (before_names, after_names) = (names(&before), names(&after));
            let renamed: BTreeSet<_> = before_names.difference(&after_names).cloned().collect();
            // The raw template is YAML too: `${VAR}` reads as text.
            let carrying: BTreeSet<_> = documents(&template)
                .iter()
                .map(kind_and_name)
                .filter(|(_, object)| object.contains(&format!("${{{variable}}}")))
                .map(|(kind, _)| kind)
                .collect();
            let renamed_kinds: BTreeSet<_> = renamed.iter().map(|(kind, _)| kind.clone()).collect();
            assert_eq!(renamed_kinds, carrying, "{name}: {variable}");
            assert!(!renamed.is_empty(), "{name}: {variable} names nothing");
            for (kind, object) in &renamed {
                assert!(object.ends_with(&bump.old), "{name}: {kind}/{object}");
                assert!(
                    after_names.contains(&(kind.clone(), object.replace(&bump.old, &bump.new))),
                    "{name}: {kind}/{object} has no successor"
                );
            }
        }
    }
    assert!(
        counted >= 2,
        "the generation-counter templates were not found"
    );
}

#[test]
fn a_missing_variable_is_named_with_file_and_line_of_first_use() {
    let example: String = example_text()
        .lines()
        .filter(|line| !line.starts_with("OPENSTACK_CLOUD:") && !line.starts_with("PREFIX:"))
        .map(|line| format!("{line}\n"))
        .collect();
    let template = std::fs::read_to_string(templates_dir().join("cluster-template.yaml")).unwrap();
    let first_line = |needle: &str| {
        template
            .lines()
            .position(|line| line.contains(needle))
            .unwrap()
            + 1
    };
    let error = template::generate(
        &template,
        "templates/cluster-template.yaml",
        &settings_from(&example),
    )
    .unwrap_err();
    let GenerateError::MissingVariables { missing, .. } = &error else {
        panic!("{error}");
    };
    let missing: Vec<(&str, usize)> = missing.iter().map(|v| (v.name.as_str(), v.line)).collect();
    assert_eq!(
        missing,
        [
            ("OPENSTACK_CLOUD", first_line("${OPENSTACK_CLOUD}")),
            ("PREFIX", first_line("${PREFIX}")),
        ]
    );
    let message = error.to_string();
    assert!(
        message.contains(&format!(
            "\n  templates/cluster-template.yaml:{}: OPENSTACK_CLOUD",
            first_line("${OPENSTACK_CLOUD}")
        )),
        "{message}"
    );
}
