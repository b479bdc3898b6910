//! The images of real nodes in a real containerd: for every release nodes run here, every image `kubeadm
//! config images list` names for it is built from this machine's binaries of that release, imported with
//! `ctr images import` under the name kubeadm gives it, and runs under runc: each component answers for
//! its version from inside its container, and kube-proxy's packet filter programs find their shared
//! libraries.

use std::collections::BTreeMap;

use testenv::containerd::Containerd;
use testenv::images;

/// Needs what `hack/install-testenv.sh nodes node-releases` installs and builds (containerd, runc, the node
/// components of every release, CoreDNS): `make test-nodes` runs it.
#[test]
#[ignore = "needs `hack/install-testenv.sh nodes node-releases`; run by `make test-nodes`"]
fn containerd_imports_and_runs_every_image_kubeadm_names() {
    let dir = tempfile::tempdir().unwrap();
    let containerd = Containerd::start(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    for version in testenv::binaries::kubernetes_releases() {
        release_images_run(&containerd, &version);
    }
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

/// Imports the images of a node of Kubernetes `version` into `containerd` and asks each component, from
/// inside its container, which release it is.
fn release_images_run(containerd: &Containerd, version: &str) {
    let images = images::node_images(version).unwrap_or_else(|e| panic!("{version}: {e}"));
    let tarballs = images::tarballs(&images).unwrap_or_else(|e| panic!("{e}"));
    for tarball in &tarballs {
        containerd
            .import(tarball)
            .unwrap_or_else(|e| panic!("{}: {e}", tarball.display()));
    }
    let wanted: Vec<String> = images.iter().map(|i| i.reference.clone()).collect();
    let there = containerd.images().unwrap();
    for reference in &wanted {
        assert!(
            there.contains(reference),
            "{reference} not in containerd: {there:?}"
        );
    }

    // What each image answers from inside its container.
    // What kubeadm lists, by component; the add-ons of other releases carried besides are asked below.
    let kubeadm = testenv::binaries::kubernetes_binary("kubeadm", version).unwrap();
    let listed = images::kubeadm_image_list(&kubeadm, version).unwrap();
    let by_component: BTreeMap<&str, &str> = images
        .iter()
        .filter(|i| listed.contains(&i.reference))
        .map(|i| (i.component(), i.reference.as_str()))
        .collect();
    let etcd_tag = images
        .iter()
        .find(|i| i.component() == "etcd")
        .map(|i| i.tag().to_owned())
        .expect("kubeadm names an etcd image");
    // The etcd build of the minor kubeadm's tag names (3.6.5-0: 3.6.16; 3.7.0-0: 3.7.3).
    let coredns = format!(
        "CoreDNS-{}",
        by_component["coredns"]
            .rsplit_once(":v")
            .map_or("", |(_, tag)| tag)
    );
    let etcd_minor = etcd_tag.split('.').take(2).collect::<Vec<_>>().join(".");
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
            &format!("etcd Version: {etcd_minor}."),
        ),
        // At the paths their images' entrypoints name (ctr's arguments replace the entrypoint).
        ("coredns", &["/coredns", "-version"], &coredns),
        ("pause", &["/pause", "-v"], "pause"),
    ];
    for (n, (component, args, expected)) in questions.iter().enumerate() {
        let reference = by_component
            .get(component)
            .unwrap_or_else(|| panic!("kubeadm names no {component} image: {wanted:?}"));
        let answer = containerd
            .run(reference, &format!("question-{version}-{n}"), args)
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
            &format!("question-{version}-extensions"),
            &["iptables", "-m", "comment", "-h"],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(rules.contains("comment match options"), "{rules}");

    for add_on in images.iter().filter(|i| !listed.contains(&i.reference)) {
        let (args, expected): (&[&str], String) = match add_on.component() {
            "kube-proxy" => (
                &["kube-proxy", "--version"],
                format!("Kubernetes {}", add_on.tag()),
            ),
            "coredns" => (
                &["/coredns", "-version"],
                format!("CoreDNS-{}", add_on.tag().trim_start_matches('v')),
            ),
            other => panic!(
                "{version}: an add-on image of {other}: {}",
                add_on.reference
            ),
        };
        let answer = containerd
            .run(
                &add_on.reference,
                &format!("question-{version}-{}-{}", add_on.component(), add_on.tag()),
                args,
            )
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            answer.contains(&expected),
            "{} answered {answer:?}, expected {expected:?}",
            add_on.reference
        );
    }
}
