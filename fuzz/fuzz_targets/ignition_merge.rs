//! Any text as `ignition.containerLinuxConfig.additionalConfig` of a small Ignition spec, rendered for
//! a worker. The admission rule and the renderer agree on it, a refusal names the field, and an
//! accepted config is appended as Ignition 2.3's `Append` does: every list of the rendered config is
//! the one rendered without it followed by the transpiled one's; `ignition.config` and the timeouts
//! the transpiled config sets are taken from it.

#![no_main]

use std::collections::BTreeMap;
use std::sync::LazyLock;

use kubeadm_api::bootstrap::ignition::transpile;
use kubeadm_api::bootstrap::v1beta2::{File, Format, KubeadmConfig, KubeadmConfigSpec, User};
use kubeadm_api::bootstrap::validation::validate_kubeadm_config_create;
use kubeadm_bootstrap::render::{
    ClusterFacts, JoinFacts, MachineFacts, RenderError, RenderInput, Role, render,
};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const FIELD: &str = "spec.ignition.containerLinuxConfig.additionalConfig";

/// The lists `Append` concatenates, as JSON pointers.
const LISTS: [&str; 11] = [
    "/ignition/security/tls/certificateAuthorities",
    "/networkd/units",
    "/passwd/groups",
    "/passwd/users",
    "/storage/directories",
    "/storage/disks",
    "/storage/files",
    "/storage/filesystems",
    "/storage/links",
    "/storage/raid",
    "/systemd/units",
];

fn spec(additional_config: Option<&str>, strict: bool) -> KubeadmConfigSpec {
    let mut spec = KubeadmConfigSpec {
        format: Some(Format::Ignition),
        files: vec![File {
            path: "/etc/motd".into(),
            content: Some("hello\n".into()),
            ..File::default()
        }],
        users: vec![User {
            name: "core".into(),
            ..User::default()
        }],
        ..KubeadmConfigSpec::default()
    };
    let clc = &mut spec.ignition.container_linux_config;
    clc.additional_config = additional_config.map(str::to_owned);
    clc.strict = strict.then_some(true);
    spec
}

fn render_worker(spec: &KubeadmConfigSpec) -> Result<Vec<u8>, RenderError> {
    let cluster = ClusterFacts {
        name: "c".into(),
        kubernetes_version: "v1.33.1".into(),
        control_plane_endpoint: Some("api.example.com:6443".into()),
        ..ClusterFacts::default()
    };
    let join = JoinFacts {
        token: "abcdef.0123456789abcdef".into(),
        api_server_endpoint: "api.example.com:6443".into(),
        ca_cert_hashes: vec!["sha256:00".into()],
    };
    render(&RenderInput {
        role: Role::WorkerJoin,
        spec,
        cluster: &cluster,
        machine: &MachineFacts::default(),
        certificates: None,
        join: Some(&join),
        secrets: &BTreeMap::new(),
    })
}

/// The config rendered without `additionalConfig`.
static BASE: LazyLock<Value> = LazyLock::new(|| {
    let bytes = render_worker(&spec(None, false)).expect("the base spec renders");
    serde_json::from_slice(&bytes).expect("Ignition output is JSON")
});

fuzz_target!(|data: &[u8]| {
    let Some((&flags, text)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let strict = flags & 1 == 1;
    let spec = spec(Some(text), strict);
    let transpiled = transpile(text, strict);
    let admitted = validate_kubeadm_config_create(&KubeadmConfig::new("w", spec.clone()));
    let rendered = render_worker(&spec);
    assert_eq!(
        admitted.is_ok(),
        transpiled.is_ok(),
        "admission and transpiler disagree"
    );

    let (bytes, added) = match (rendered, transpiled) {
        (Ok(bytes), Ok(transpiled)) => (bytes, transpiled.config),
        (Err(error), Err(clc)) => {
            let expected = RenderError::Invalid {
                field: FIELD.into(),
                rule: clc.to_string(),
            };
            assert_eq!(error, expected);
            return;
        }
        (Ok(_), Err(clc)) => panic!("rendered a config the transpiler refuses: {clc}"),
        (Err(error), Ok(_)) => panic!("refused a config the transpiler takes: {error}"),
    };
    let config: Value = serde_json::from_slice(&bytes).expect("Ignition output is JSON");
    let added = serde_json::to_value(&added).expect("configs serialize");
    assert_eq!(config["ignition"]["version"], "2.3.0");
    let list = |value: &Value, pointer: &str| -> Vec<Value> {
        value
            .pointer(pointer)
            .map(|v| v.as_array().expect("a list").clone())
            .unwrap_or_default()
    };
    for pointer in LISTS {
        let mut expected = list(&BASE, pointer);
        expected.extend(list(&added, pointer));
        assert_eq!(list(&config, pointer), expected, "{pointer}");
    }
    assert_eq!(config["ignition"]["config"], added["ignition"]["config"]);
    for timeout in ["httpResponseHeaders", "httpTotal"] {
        let taken = match &added["ignition"]["timeouts"][timeout] {
            Value::Null => &BASE["ignition"]["timeouts"][timeout],
            set => set,
        };
        assert_eq!(&config["ignition"]["timeouts"][timeout], taken, "{timeout}");
    }
});
