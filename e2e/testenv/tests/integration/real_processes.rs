//! The test environment against the real binaries: etcd learner lifecycle, the management plane, and
//! process cleanup on panic.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use testenv::binaries::ManagementRelease;
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

/// The management plane runs the releases `TESTENV_MANAGEMENT` names: by default the newest built here
/// (kube-apiserver 1.37 on etcd 3.7); and either end of the matrix starts by name whatever it says.
#[tokio::test]
async fn the_management_plane_runs_the_release_asked_for() {
    let default = testenv::binaries::management().unwrap().release;
    if std::env::var_os("TESTENV_MANAGEMENT").is_none() {
        // Only outside CI does a missing build fall back (see `management`).
        assert!(
            default == ManagementRelease::Newest || !testenv::in_ci(),
            "{default:?}"
        );
    }
    let mut releases = vec![(default, ManagementPlane::start().await.unwrap())];
    if default != ManagementRelease::Legacy {
        for release in [ManagementRelease::Newest, ManagementRelease::Current] {
            if release != default {
                releases.push((release, ManagementPlane::start_on(release).await.unwrap()));
            }
        }
    }
    for (release, plane) in releases {
        let version = plane
            .client()
            .await
            .unwrap()
            .apiserver_version()
            .await
            .unwrap();
        let etcd = std::process::Command::new(&release.binaries().unwrap().etcd)
            .arg("--version")
            .output()
            .unwrap();
        let etcd = String::from_utf8_lossy(&etcd.stdout);
        println!(
            "{release:?}: kube-apiserver {} on {etcd}",
            version.git_version
        );
        assert_eq!(version.git_version, release.kubernetes_version());
        assert!(
            etcd.contains(&format!("etcd Version: {}", release.etcd_version())),
            "{etcd}"
        );
    }
}

/// `TESTENV_MANAGEMENT` takes the minor of either end of the matrix, or `legacy`, and refuses anything
/// else naming what it takes.
#[test]
fn testenv_management_names_the_releases_it_takes() {
    use testenv::binaries::ToolModule;
    let asked = |value: &str| {
        // SAFETY: the variable is read only by this test's own calls below.
        unsafe { std::env::set_var("TESTENV_MANAGEMENT", value) };
        let release = ManagementRelease::from_env();
        unsafe { std::env::remove_var("TESTENV_MANAGEMENT") };
        release
    };
    let current = ToolModule::Kubernetes.version();
    let current_minor = current
        .trim_start_matches('v')
        .rsplit_once('.')
        .unwrap()
        .0
        .to_owned();
    assert_eq!(
        asked(&current_minor).unwrap(),
        Some(ManagementRelease::Current)
    );
    let newest = testenv::binaries::newest_kubernetes();
    let newest_minor = newest
        .trim_start_matches('v')
        .rsplit_once('.')
        .unwrap()
        .0
        .to_owned();
    assert_eq!(
        asked(&newest_minor).unwrap(),
        Some(ManagementRelease::Newest)
    );
    assert_eq!(asked("legacy").unwrap(), Some(ManagementRelease::Legacy));
    let refused = asked("1.29").unwrap_err().to_string();
    assert!(
        refused.contains("TESTENV_MANAGEMENT=1.29") && refused.contains(&newest_minor),
        "{refused}"
    );
}
