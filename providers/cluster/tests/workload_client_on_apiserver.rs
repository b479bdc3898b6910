//! A workload cluster's client against a real kube-apiserver: its watches and calls share one
//! connection (HTTP/2), where kube's own HTTP/1.1 stack opened one per watch.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use kubeadm_cluster::workload::{KUBECONFIG_KEY, client_from_secret_at};
use testenv::ManagementPlane;

/// Relays every connection to `upstream`, counting those open.
async fn counting_relay(upstream: String) -> (u16, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let open = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&open);
    let task = tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let upstream = upstream.clone();
            let counter = Arc::clone(&counter);
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(&upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
                counter.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (port, open, task)
}

/// Runs a watch of the ConfigMaps in `namespace`, which says when it has seen `name` and keeps running
/// until the task is aborted.
fn watch(
    client: &kube::Client,
    namespace: &str,
    name: &'static str,
) -> (
    tokio::sync::oneshot::Receiver<()>,
    tokio::task::JoinHandle<()>,
) {
    let events = watcher(
        Api::<ConfigMap>::namespaced(client.clone(), namespace),
        watcher::Config::default(),
    );
    let (seen, said) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut seen = Some(seen);
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(object)) = event
                && object.metadata.name.as_deref() == Some(name)
                && let Some(seen) = seen.take()
            {
                let _ = seen.send(());
            }
        }
    });
    (said, task)
}

async fn create_config_map(client: &kube::Client, namespace: &str, name: &str) {
    let config_map = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .create(&kube::api::PostParams::default(), &config_map)
        .await
        .unwrap();
}

#[tokio::test]
async fn watches_and_calls_of_a_cluster_share_one_connection() {
    let plane = ManagementPlane::start().await.expect("API server starts");
    let kubeconfig = std::fs::read(plane.apiserver().kubeconfig_path()).unwrap();
    let secret = Secret {
        data: Some([(KUBECONFIG_KEY.to_owned(), ByteString(kubeconfig))].into()),
        ..Secret::default()
    };
    let upstream = plane
        .apiserver()
        .url()
        .trim_start_matches("https://")
        .to_owned();
    let (port, open, relay) = counting_relay(upstream).await;
    let server = format!("127.0.0.1:{port}");
    let client = client_from_secret_at(&secret, "default", "prod", Some(&server))
        .await
        .unwrap();

    // Two watches, as the control-plane manager keeps on every workload cluster, and calls while both
    // are open; each watch sees an object created after it started.
    let (first, first_task) = watch(&client, "kube-system", "first");
    let (second, second_task) = watch(&client, "default", "second");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    for _ in 0..3 {
        config_maps.list(&ListParams::default()).await.unwrap();
    }
    // Both watches are running once they have listed; the objects they wait for come after that.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let management = plane.client().await.unwrap();
    create_config_map(&management, "kube-system", "first").await;
    create_config_map(&management, "default", "second").await;
    for (what, seen) in [("first", first), ("second", second)] {
        tokio::time::timeout(Duration::from_secs(30), seen)
            .await
            .unwrap_or_else(|_| panic!("the watch saw {what}"))
            .unwrap();
    }
    // Connections opened by calls racing the first one to be set up close once it carries everything.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        open.load(Ordering::SeqCst),
        1,
        "two running watches and the calls made meanwhile keep one connection open"
    );
    first_task.abort();
    second_task.abort();
    relay.abort();
}
