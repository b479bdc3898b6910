//! `templates/cluster-template-sim.yaml`, rendered as `controlplane-manager generate cluster` renders it,
//! passes both managers' `validate` as processes; its machine templates carry the generation counters.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use e2e_tests::env::{manager_binary, render_sim_template};

fn validate(binary: &str, var: &str, yaml: &str) -> (Option<i32>, String) {
    let mut child = Command::new(manager_binary(binary, var))
        .args(["validate", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    (
        output.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

#[test]
fn renders_with_the_example_settings_and_passes_both_validators() {
    let vars: BTreeMap<&str, String> = [("CLUSTER_NAME", "demo".to_owned())].into();
    let rendered = render_sim_template(&vars);
    for (binary, var) in [
        ("controlplane-manager", "CONTROLPLANE_MANAGER"),
        ("bootstrap-manager", "BOOTSTRAP_MANAGER"),
    ] {
        let (code, output) = validate(binary, var, &rendered);
        assert_eq!(code, Some(0), "{binary} validate: {output}");
    }
    assert!(
        rendered.contains("name: demo-control-plane-genc01"),
        "{rendered}"
    );
    assert!(rendered.contains("name: demo-md-0-genw01"), "{rendered}");
    assert_eq!(
        rendered.matches("replicas: 3").count(),
        2,
        "3 control planes, 3 workers: {rendered}"
    );
    assert!(rendered.contains("image: sim-node-genc01"), "{rendered}");
}

#[test]
fn bumping_a_counter_renames_only_that_group() {
    let mut vars: BTreeMap<&str, String> = [("CLUSTER_NAME", "demo".to_owned())].into();
    let before = render_sim_template(&vars);
    vars.insert("CONTROL_PLANE_MACHINE_GEN", "genc02".into());
    let after = render_sim_template(&vars);
    let changed: Vec<(&str, &str)> = before
        .lines()
        .zip(after.lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert!(!changed.is_empty());
    assert!(
        changed
            .iter()
            .all(|(a, b)| a.contains("genc01") && b.contains("genc02")),
        "{changed:#?}"
    );
}
