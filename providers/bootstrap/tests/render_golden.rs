//! Golden outputs: every role × output format × kubeadm API version, rendered from one realistic spec.
//! Review changes as diffs of `tests/golden/`; `UPDATE_GOLDEN=1 cargo test` rewrites the files.

mod common;

use kubeadm_api::bootstrap::v1beta2::Format;
use kubeadm_bootstrap::render::Role;

use common::{V1BETA3_VERSION, V1BETA4_VERSION, fixture_spec_with_format, golden_dir, render_with};

fn check_golden(role: Role, format: Format, kubernetes_version: &str) {
    let spec = fixture_spec_with_format(format);
    let output = render_with(&spec, role, kubernetes_version).unwrap();
    let role_name = match role {
        Role::Init => "init",
        Role::ControlPlaneJoin => "control-plane-join",
        Role::WorkerJoin => "worker-join",
    };
    let api = if kubernetes_version == V1BETA3_VERSION {
        "v1beta3"
    } else {
        "v1beta4"
    };
    let (name, text) = match format {
        Format::CloudConfig => (
            format!("{role_name}-{api}.cloud-config.yaml"),
            String::from_utf8(output).unwrap(),
        ),
        // Compact JSON is unreadable in a diff; the golden holds the same document pretty-printed.
        Format::Ignition => {
            let value: serde_json::Value = serde_json::from_slice(&output).unwrap();
            let pretty = serde_json::to_string_pretty(&value).unwrap() + "\n";
            (format!("{role_name}-{api}.ignition.json"), pretty)
        }
    };
    let path = golden_dir().join(&name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let golden = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run UPDATE_GOLDEN=1 cargo test", path.display()));
    assert!(
        golden == text,
        "{name} differs from the golden file; if the change is intended, run UPDATE_GOLDEN=1 cargo test \
         and review the diff\n--- rendered ---\n{text}"
    );
}

macro_rules! golden_tests {
    ($($name:ident: $role:expr, $format:expr, $version:expr;)*) => {
        $(
            #[test]
            fn $name() {
                check_golden($role, $format, $version);
            }
        )*
    };
}

golden_tests! {
    init_v1beta3_cloud_config: Role::Init, Format::CloudConfig, V1BETA3_VERSION;
    init_v1beta4_cloud_config: Role::Init, Format::CloudConfig, V1BETA4_VERSION;
    control_plane_join_v1beta3_cloud_config: Role::ControlPlaneJoin, Format::CloudConfig, V1BETA3_VERSION;
    control_plane_join_v1beta4_cloud_config: Role::ControlPlaneJoin, Format::CloudConfig, V1BETA4_VERSION;
    worker_join_v1beta3_cloud_config: Role::WorkerJoin, Format::CloudConfig, V1BETA3_VERSION;
    worker_join_v1beta4_cloud_config: Role::WorkerJoin, Format::CloudConfig, V1BETA4_VERSION;
    init_v1beta3_ignition: Role::Init, Format::Ignition, V1BETA3_VERSION;
    init_v1beta4_ignition: Role::Init, Format::Ignition, V1BETA4_VERSION;
    control_plane_join_v1beta3_ignition: Role::ControlPlaneJoin, Format::Ignition, V1BETA3_VERSION;
    control_plane_join_v1beta4_ignition: Role::ControlPlaneJoin, Format::Ignition, V1BETA4_VERSION;
    worker_join_v1beta3_ignition: Role::WorkerJoin, Format::Ignition, V1BETA3_VERSION;
    worker_join_v1beta4_ignition: Role::WorkerJoin, Format::Ignition, V1BETA4_VERSION;
}
