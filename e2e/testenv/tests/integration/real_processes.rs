//! The test environment against the real binaries: etcd learner lifecycle, the management plane, and
//! process cleanup on panic.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use testenv::process::pid_alive;
use testenv::{EtcdCluster, EtcdOptions, ManagementPlane};

#[tokio::test]
async fn etcd_learner_joins_is_promoted_and_removed_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = EtcdCluster::start(
        dir.path(),
        EtcdOptions {
            members: 3,
            ..Default::default()
        },
    )
    .await
    .expect("3-member TLS etcd starts");

    let mut client = cluster.client().await.unwrap();
    client.put("/probe", "v", None).await.unwrap();

    let learner = cluster
        .add_learner("learner-0")
        .await
        .expect("learner added and started");
    let members = client.member_list().await.unwrap();
    let as_learner = members
        .members()
        .iter()
        .find(|m| m.id() == learner)
        .unwrap();
    assert!(
        as_learner.is_learner(),
        "a joining member starts as a learner"
    );
    assert_eq!(members.members().len(), 4);

    // A second learner is refused while the first one exists (KEP-3614: one learner at a time).
    let second = cluster.add_learner("learner-1").await;
    let err = second
        .expect_err("etcd refuses a second learner")
        .to_string();
    assert!(
        err.contains("too many learner members"),
        "unexpected error: {err}"
    );

    cluster
        .promote(learner, Duration::from_secs(30))
        .await
        .expect("learner promoted");
    // The leader acknowledged the promotion; the member this client asks (member lists are served from
    // its own view, not linearizably, on 3.4) applies it a moment later.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let members = client.member_list().await.unwrap();
        if members.members().iter().all(|m| !m.is_learner()) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the promoted learner is still listed as a learner: {:?}",
            members.members()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        cluster.client_urls().len(),
        4,
        "the promoted member serves clients"
    );

    let learner_pid = cluster
        .members()
        .iter()
        .find(|m| m.name == "learner-0")
        .unwrap()
        .pid()
        .unwrap();
    cluster
        .remove(learner, Duration::from_secs(30))
        .await
        .expect("member removed");
    let members = client.member_list().await.unwrap();
    assert_eq!(members.members().len(), 3);
    assert!(
        !pid_alive(learner_pid),
        "the removed member's process is gone"
    );
    let value = client.get("/probe", None).await.unwrap();
    assert_eq!(
        value.kvs()[0].value(),
        b"v",
        "data survives membership changes"
    );

    let pids = cluster.pids();
    drop(cluster);
    assert!(
        pids.iter().all(|p| !pid_alive(*p)),
        "every member stopped by PID"
    );
}

#[tokio::test]
async fn management_plane_serves_with_cert_and_token_auth_and_stops_by_pid() {
    let plane = ManagementPlane::start()
        .await
        .expect("management plane starts");
    let namespaces: Api<Namespace> = Api::all(plane.client().await.unwrap());
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(names.contains(&"kube-system".to_string()), "got {names:?}");

    let by_token: Api<Namespace> = Api::all(plane.apiserver().token_client().await.unwrap());
    by_token
        .get("kube-system")
        .await
        .expect("token authentication works");

    let kubeconfig = std::fs::read_to_string(plane.kubeconfig_path()).unwrap();
    assert!(kubeconfig.contains(plane.apiserver().url()));

    let pids = plane.pids();
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|p| pid_alive(*p)));
    let dir = plane.dir().to_owned();
    drop(plane);
    assert!(
        pids.iter().all(|p| !pid_alive(*p)),
        "etcd and apiserver stopped by PID"
    );
    assert!(!dir.exists(), "temporary folder removed");
}

#[tokio::test]
async fn a_killed_management_plane_comes_back_on_its_address_with_its_data() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::PostParams;
    let mut plane = ManagementPlane::start()
        .await
        .expect("management plane starts");
    let client = plane.client().await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut kept = ConfigMap::default();
    kept.metadata.name = Some("kept".into());
    let created = maps.create(&PostParams::default(), &kept).await.unwrap();
    let (url, before) = (plane.apiserver().url().to_owned(), plane.pids());

    let outage = plane
        .restart(std::time::Duration::from_millis(500))
        .await
        .expect("management plane starts again");

    assert!(
        before.iter().all(|p| !pid_alive(*p)),
        "the old processes are gone: {before:?}"
    );
    let after = plane.pids();
    assert_eq!(after.len(), 2);
    assert!(after.iter().all(|p| pid_alive(*p) && !before.contains(p)));
    assert_eq!(plane.apiserver().url(), url, "same address");
    // The client made before the restart works again, and the object written before it is there.
    let read = maps.get("kept").await.expect("the ConfigMap survived");
    assert_eq!(read.metadata.uid, created.metadata.uid);
    println!("management plane answered again {outage:?} after it was killed");
    drop(plane);
    assert!(after.iter().all(|p| !pid_alive(*p)), "stopped by PID");
}

#[test]
fn processes_are_stopped_when_a_test_panics() {
    let (tx, rx) = std::sync::mpsc::channel();
    let outcome = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let dir = tempfile::tempdir().unwrap();
            let cluster = EtcdCluster::start(dir.path(), EtcdOptions::default())
                .await
                .unwrap();
            tx.send(cluster.pids()).unwrap();
            panic!("test failure while etcd runs");
        })
    })
    .join();
    assert!(outcome.is_err(), "the thread panicked");
    let pids = rx.recv().unwrap();
    assert!(!pids.is_empty());
    assert!(
        pids.iter().all(|p| !pid_alive(*p)),
        "etcd stopped while unwinding"
    );
}

#[test]
fn missing_binary_error_says_how_to_fix_it() {
    // SAFETY: this test's process is not running other threads that read the environment.
    unsafe { std::env::set_var("KUBE_APISERVER", "/nonexistent/kube-apiserver") };
    let err = testenv::binaries::kube_apiserver().unwrap_err().to_string();
    unsafe { std::env::remove_var("KUBE_APISERVER") };
    assert!(err.contains("$KUBE_APISERVER"), "{err}");
    assert!(err.contains("not an executable"), "{err}");
}

/// Where `hack/install-testenv.sh` built the current releases, the management plane runs them.
#[tokio::test]
async fn the_management_plane_runs_the_current_kubernetes_release_when_built() {
    let binaries = testenv::binaries::management().unwrap();
    let plane = ManagementPlane::start().await.unwrap();
    let version = plane
        .client()
        .await
        .unwrap()
        .apiserver_version()
        .await
        .unwrap();
    let etcd = std::process::Command::new(&binaries.etcd)
        .arg("--version")
        .output()
        .unwrap();
    let etcd = String::from_utf8_lossy(&etcd.stdout);
    println!("ran kube-apiserver {} on {etcd}", version.git_version);
    if binaries.legacy {
        // Only where asked for (TESTENV_MANAGEMENT=legacy) or outside CI (see `management`).
        assert_eq!(version.git_version, testenv::binaries::KUBE_VERSION);
        assert!(etcd.contains("etcd Version: 3.4."), "{etcd}");
    } else {
        use testenv::binaries::ToolModule;
        assert_eq!(version.git_version, ToolModule::Kubernetes.version());
        let pinned = ToolModule::Etcd.version();
        assert!(
            etcd.contains(&format!("etcd Version: {}", pinned.trim_start_matches('v'))),
            "{etcd}"
        );
    }
}
