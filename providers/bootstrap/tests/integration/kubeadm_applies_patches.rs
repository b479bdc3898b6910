//! Fidelity check of the KEP-2506 machine annotations against real kubeadm: the patch files the renderer
//! writes are picked up by `kubeadm init phase` (file names, patch type, directory), and the resulting
//! static pod manifests carry our annotations next to kubeadm's own endpoint annotations.
//!
//! kubeadm 1.20 (what `hack/install-testenv.sh` builds) reads only config v1beta2 and spells the flag
//! `--experimental-patches`; the patch file format and naming rules are the same as in later releases.

use crate::common;

use std::path::Path;
use std::process::Command;

use kubeadm_bootstrap::render::kubeadm::machine_annotation_patches;
use kubeadm_bootstrap::render::{RenderInput, Role};

/// A documentation address: kubeadm only writes it into manifests, nothing connects to it.
const ADVERTISE: &str = "198.51.100.7";

fn kubeadm(rootfs: &Path, args: &[&str]) {
    let binary = testenv::binaries::kubeadm().expect("kubeadm is built by hack/install-testenv.sh");
    let out = Command::new(binary)
        .args(args)
        .arg("--rootfs")
        .arg(rootfs)
        .args([
            "--config",
            "/cfg/kubeadm.yaml",
            "--experimental-patches",
            "/patches",
        ])
        .output()
        .expect("kubeadm runs");
    assert!(
        out.status.success(),
        "kubeadm {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn real_kubeadm_applies_the_machine_annotation_patches() {
    let spec = common::fixture_spec();
    let cluster = common::cluster(common::V1BETA4_VERSION);
    let machine = common::machine();
    let certificates = common::certificates();
    let secrets = common::secrets();
    let input = RenderInput {
        role: Role::Init,
        spec: &spec,
        cluster: &cluster,
        machine: &machine,
        certificates: Some(&certificates),
        join: None,
        secrets: &secrets,
    };
    let patches = machine_annotation_patches(&input);
    assert_eq!(
        patches.len(),
        4,
        "etcd and the three control-plane components"
    );

    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("cfg")).unwrap();
    std::fs::create_dir_all(root.path().join("patches")).unwrap();
    for patch in &patches {
        let name = Path::new(&patch.path).file_name().unwrap();
        std::fs::write(root.path().join("patches").join(name), &patch.content).unwrap();
    }
    std::fs::write(
        root.path().join("cfg/kubeadm.yaml"),
        format!(
            "apiVersion: kubeadm.k8s.io/v1beta2\nkind: InitConfiguration\nlocalAPIEndpoint:\n  advertiseAddress: {ADVERTISE}\nnodeRegistration:\n  name: node-a\n---\napiVersion: kubeadm.k8s.io/v1beta2\nkind: ClusterConfiguration\nkubernetesVersion: v1.20.2\n"
        ),
    )
    .unwrap();
    kubeadm(root.path(), &["init", "phase", "control-plane", "all"]);
    kubeadm(root.path(), &["init", "phase", "etcd", "local"]);

    let manifests = root.path().join("etc/kubernetes/manifests");
    for (pod, kubeadm_annotation) in [
        (
            "etcd",
            Some((
                "kubeadm.kubernetes.io/etcd.advertise-client-urls",
                format!("https://{ADVERTISE}:2379"),
            )),
        ),
        (
            "kube-apiserver",
            Some((
                "kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint",
                format!("{ADVERTISE}:6443"),
            )),
        ),
        ("kube-controller-manager", None),
        ("kube-scheduler", None),
    ] {
        let text = std::fs::read_to_string(manifests.join(format!("{pod}.yaml"))).unwrap();
        let manifest: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        let annotations = &manifest["metadata"]["annotations"];
        assert_eq!(
            annotations["cluster.x-k8s.io/machine"],
            machine.name.as_str(),
            "{pod}: {text}"
        );
        assert_eq!(
            annotations["controlplane.cluster.x-k8s.io/machine-generation"], "3",
            "{pod}"
        );
        if let Some((key, value)) = kubeadm_annotation {
            assert_eq!(
                annotations[key],
                value.as_str(),
                "{pod} keeps kubeadm's KEP-2506 annotation"
            );
        }
    }
}
