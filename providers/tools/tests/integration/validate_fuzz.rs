//! The offline validator takes whatever a user feeds it: no input may panic or hang it. Random text,
//! random YAML-looking documents and mutations of a real cluster template, bounded in count.

use kubeadm_tools::validate::check_documents;
use proptest::prelude::*;

const TEMPLATE: &str = include_str!("../fixtures/cluster-template.yaml");
const GROUPS: [&str; 2] = [
    kubeadm_api::bootstrap::GROUP,
    kubeadm_api::controlplane::GROUP,
];

fn yamlish() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("---\n".to_owned()),
        Just("apiVersion: controlplane.cluster.x-k8s.io/v1beta2\n".to_owned()),
        Just("apiVersion: bootstrap.cluster.x-k8s.io/v1beta1\n".to_owned()),
        Just("kind: KubeadmControlPlane\n".to_owned()),
        Just("kind: KubeadmConfigTemplate\n".to_owned()),
        Just("spec:\n".to_owned()),
        Just("  replicas: ${CONTROL_PLANE_MACHINE_COUNT}\n".to_owned()),
        Just("  version: v1.33.1\n".to_owned()),
        Just(
            "  files: [{path: /a, content: x, contentFrom: {secret: {name: s, key: k}}}]\n"
                .to_owned()
        ),
        Just("  - &a [*a]\n".to_owned()),
        Just("  ? {a: [b, {c: d}]}\n".to_owned()),
        "[ -~]{0,40}\n",
    ];
    prop::collection::vec(token, 0..24).prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_text_never_panics(text in "\\PC{0,400}") {
        let _ = check_documents("random.yaml", &text, &GROUPS);
    }

    #[test]
    fn yaml_looking_documents_never_panic(text in yamlish()) {
        let _ = check_documents("doc.yaml", &text, &GROUPS);
    }

    #[test]
    fn a_cut_or_spliced_template_never_panics(cut in 0..TEMPLATE.len(), insert in "[ -~\n]{0,30}") {
        let mut text = TEMPLATE.as_bytes()[..cut].to_vec();
        text.extend_from_slice(insert.as_bytes());
        text.extend_from_slice(&TEMPLATE.as_bytes()[cut..]);
        let text = String::from_utf8_lossy(&text);
        let _ = check_documents("template.yaml", &text, &GROUPS);
    }
}

#[test]
fn the_template_itself_is_checked() {
    let report = check_documents("template.yaml", TEMPLATE, &GROUPS);
    assert!(report.checked >= 2, "{report:?}");
}
