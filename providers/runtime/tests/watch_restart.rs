//! A controller built by `watching::controller` against a management plane that is killed and comes
//! back: its watches resume within seconds, though every one of them is told its place is gone (410).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use kubeadm_runtime::watching;
use testenv::ManagementPlane;

const NS: &str = "default";

fn named<K: Resource + Default>(name: &str) -> K {
    let mut object = K::default();
    object.meta_mut().name = Some(name.into());
    object
}

/// Wakes the ConfigMap of the same name as the object of another kind.
fn same_name<K: Resource>(object: K) -> Option<ObjectRef<ConfigMap>> {
    Some(ObjectRef::new(&object.meta().name.clone()?).within(NS))
}

/// Waits until `name` has been reconciled; returns how long that took, or `None` after `bound`.
async fn reconciled(
    seen: &Mutex<BTreeSet<String>>,
    name: &str,
    bound: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < bound {
        if seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(name)
        {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_reconciles_again_soon_after_the_management_plane_restarts() {
    let mut plane = ManagementPlane::start()
        .await
        .expect("management plane starts");
    let client = plane.client().await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let seen = Arc::new(Mutex::new(BTreeSet::new()));

    // The controlled kind and three more watches that wake it, as the managers' controllers have.
    let config = watcher::Config::default();
    let secrets = watching::watch(
        Api::<Secret>::namespaced(client.clone(), NS),
        config.clone(),
    )
    .touched_objects();
    let services = watching::watch(
        Api::<Service>::namespaced(client.clone(), NS),
        config.clone(),
    )
    .touched_objects();
    let accounts = watching::watch(
        Api::<ServiceAccount>::namespaced(client.clone(), NS),
        config.clone(),
    )
    .touched_objects();
    let record = seen.clone();
    let controller = tokio::spawn(
        watching::controller(maps.clone(), config)
            .watches_stream(secrets, same_name)
            .watches_stream(services, same_name)
            .watches_stream(accounts, same_name)
            .run(
                move |map: Arc<ConfigMap>, _| {
                    let record = record.clone();
                    async move {
                        record
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .insert(map.name_any());
                        Ok::<_, kube::Error>(Action::await_change())
                    }
                },
                |_, _, _| Action::requeue(Duration::from_secs(1)),
                Arc::new(()),
            )
            .for_each(|_| async {}),
    );
    maps.create(&PostParams::default(), &named("before"))
        .await
        .unwrap();
    assert!(
        reconciled(&seen, "before", Duration::from_secs(30))
            .await
            .is_some(),
        "the controller never reconciled"
    );

    for round in 0..2 {
        // A write elsewhere moves the store's revision past every watch's last one: after the restart
        // each watch resumes from a revision the new API server no longer has.
        Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
            .create(
                &PostParams::default(),
                &named(&format!("elsewhere-{round}")),
            )
            .await
            .unwrap();
        let outage = plane
            .restart(Duration::from_secs(2))
            .await
            .expect("management plane comes back");
        let name = format!("after-{round}");
        maps.create(&PostParams::default(), &named(&name))
            .await
            .unwrap();
        let took = reconciled(&seen, &name, Duration::from_secs(10)).await;
        println!("round {round}: down {outage:?}, {name} reconciled after {took:?}");
        assert!(
            took.is_some(),
            "{name}, created once the API server was back, was not reconciled within 10 s"
        );
    }
    controller.abort();
}
