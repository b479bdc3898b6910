//! Every golden cloud-config must pass `cloud-init schema`, the check cloud-init itself applies at boot.

use crate::common;

use std::process::Command;

const INSTALL_HINT: &str = "cloud-init not found: run hack/install-testenv.sh";

#[test]
fn golden_cloud_configs_pass_cloud_init_schema() {
    let mut goldens: Vec<_> = std::fs::read_dir(common::golden_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().ends_with(".cloud-config.yaml"))
        .collect();
    goldens.sort();
    // One per role and API version, plus the special cases (empty spec, file discovery).
    assert!(
        goldens.len() >= 6,
        "expected at least one cloud-config golden per role and API version"
    );

    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for golden in &goldens {
        let text = std::fs::read_to_string(golden).unwrap();
        // cloud-init renders the Jinja template first; the schema check expects the plain cloud-config.
        let cloud_config = text
            .strip_prefix("## template: jinja\n")
            .unwrap_or_else(|| panic!("{}: missing the Jinja header", golden.display()));
        let file = dir.path().join(golden.file_name().unwrap());
        std::fs::write(&file, cloud_config).unwrap();

        let output = Command::new("cloud-init")
            .args(["schema", "--config-file"])
            .arg(&file)
            .output()
            .unwrap_or_else(|e| panic!("{INSTALL_HINT} ({e})"));
        if !output.status.success() {
            failures.push(format!(
                "{}:\n{}{}",
                golden.display(),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "cloud-init schema rejected:\n{}",
        failures.join("\n")
    );
}
