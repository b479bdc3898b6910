//! The images of real nodes in a real containerd: every image `kubeadm config images list` names for the
//! release is built from this machine's binaries, imported with `ctr images import` under the name kubeadm
//! gives it, and runs under runc: each component answers for its version from inside its container, and
//! kube-proxy's packet filter programs find their shared libraries.

use std::collections::BTreeMap;

use testenv::containerd::Containerd;
use testenv::images;

/// Needs what `hack/install-testenv.sh nodes` installs and builds (containerd, runc, the node components,
/// CoreDNS): `make test-nodes` runs it; `make test` does not build them yet.
#[test]
#[ignore = "needs `hack/install-testenv.sh nodes`; run by `make test-nodes`"]
fn containerd_imports_and_runs_every_image_kubeadm_names() {
    let images = images::node_images().unwrap_or_else(|e| panic!("{e}"));
    let version = testenv::binaries::ToolModule::KubernetesNode.version();
    let tarballs = images::tarballs(&images).unwrap_or_else(|e| panic!("{e}"));

    let dir = tempfile::tempdir().unwrap();
    let containerd = Containerd::start(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    for tarball in &tarballs {
        containerd
            .import(tarball)
            .unwrap_or_else(|e| panic!("{}: {e}", tarball.display()));
    }
    let mut wanted: Vec<String> = images.iter().map(|i| i.reference.clone()).collect();
    wanted.sort();
    assert_eq!(containerd.images().unwrap(), wanted);

    // What each image answers from inside its container.
    let by_component: BTreeMap<&str, &str> = images
        .iter()
        .map(|i| (i.component(), i.reference.as_str()))
        .collect();
    let etcd = testenv::binaries::ToolModule::Etcd.version();
    let kubernetes = format!("Kubernetes {version}");
    let questions: [(&str, &[&str], &str); 9] = [
        (
            "kube-apiserver",
            &["kube-apiserver", "--version"],
            &kubernetes,
        ),
        (
            "kube-controller-manager",
            &["kube-controller-manager", "--version"],
            &kubernetes,
        ),
        (
            "kube-scheduler",
            &["kube-scheduler", "--version"],
            &kubernetes,
        ),
        ("kube-proxy", &["kube-proxy", "--version"], &kubernetes),
        ("kube-proxy", &["nft", "--version"], "nftables v"),
        ("kube-proxy", &["iptables-save", "--version"], "(nf_tables)"),
        (
            "etcd",
            &["etcd", "--version"],
            &format!("etcd Version: {}", etcd.trim_start_matches('v')),
        ),
        // At the paths their images' entrypoints name (ctr's arguments replace the entrypoint).
        ("coredns", &["/coredns", "-version"], "CoreDNS-"),
        ("pause", &["/pause", "-v"], "pause"),
    ];
    for (n, (component, args, expected)) in questions.iter().enumerate() {
        let reference = by_component
            .get(component)
            .unwrap_or_else(|| panic!("kubeadm names no {component} image: {wanted:?}"));
        let answer = containerd
            .run(reference, &format!("question-{n}"), args)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            answer.contains(expected),
            "{reference} {args:?} answered {answer:?}, expected {expected:?}"
        );
    }
    // kube-proxy's iptables mode loads rule matches from the extensions it carries.
    let rules = containerd
        .run(
            by_component["kube-proxy"],
            "question-extensions",
            &["iptables", "-m", "comment", "-h"],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(rules.contains("comment match options"), "{rules}");

    // Every container was removed: no shim serves this containerd any more, and nothing of its store is
    // mounted.
    assert_eq!(containerd.shims(), Vec::<u32>::new());
    let pid = containerd.pid();
    let parent = containerd.cgroup_parent();
    assert!(!containerd.cgroups().is_empty(), "no cgroup under {parent}");
    containerd.stop();
    assert!(!testenv::process::pid_alive(pid), "containerd still runs");
    let left: Vec<_> = std::fs::read_dir("/sys/fs/cgroup")
        .unwrap()
        .flatten()
        .map(|hierarchy| hierarchy.path().join(&parent))
        .filter(|dir| dir.exists())
        .collect();
    assert!(left.is_empty(), "cgroups left behind: {left:?}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let root = dir.path().display().to_string();
    assert!(
        !mounts.lines().any(|l| l.contains(&root)),
        "left mounted under {root}: {mounts}"
    );
}
