//! etcd reached through the workload cluster's API server: a port-forward to each member's etcd pod
//! (`kube-system/etcd-<node>`, as kubeadm names the static pod's mirror), for management clusters that
//! cannot reach the nodes' etcd client port. Each member gets a listener on 127.0.0.1; every connection
//! accepted there is bridged to a port-forward stream. TLS runs end to end between the controller and the
//! member (kubeadm's etcd serving certificate is valid for 127.0.0.1); the API server only carries bytes.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

/// How the controller reaches etcd.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EtcdAccess {
    /// Through the workload API server's port-forward to each etcd pod: needs only the API server port,
    /// as Cluster API's own control-plane provider does.
    #[default]
    PortForward,
    /// At the client URL each etcd pod announces: needs the nodes' etcd port reachable from the manager.
    Direct,
}

/// The etcd pod and port to forward to for one client URL.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ForwardTarget {
    pub pod: String,
    pub port: u16,
}

/// The port of a client URL such as `https://10.0.0.1:2379` (2379, etcd's client port, when none is
/// written).
pub fn client_port(url: &str) -> Option<u16> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next()?;
    let after_host = match authority.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once(']')?.1,
        None => authority.rsplit_once(':').map_or("", |(_, port)| port),
    };
    let port = after_host.trim_start_matches(':');
    if port.is_empty() {
        return Some(2379);
    }
    port.parse().ok()
}

/// What to forward each client URL to: the etcd pod of the node that announces it. `nodes` pairs each
/// node name with the client URLs its etcd pod announces.
pub fn forward_targets<'a>(
    nodes: impl IntoIterator<Item = (&'a str, &'a [String])>,
) -> BTreeMap<String, ForwardTarget> {
    nodes
        .into_iter()
        .flat_map(|(node, urls)| {
            urls.iter().filter_map(move |url| {
                Some((
                    url.clone(),
                    ForwardTarget {
                        pod: format!("etcd-{node}"),
                        port: client_port(url)?,
                    },
                ))
            })
        })
        .collect()
}

/// The local URL that reaches a forward listening at `local`.
pub fn local_url(local: SocketAddr) -> String {
    format!("https://{local}")
}

/// Listeners of one workload cluster, by target.
#[derive(Default)]
struct ClusterForwards {
    /// The workload client the bridges open port-forwards with; replaced when the kubeconfig changes.
    client: Option<Arc<Mutex<kube::Client>>>,
    listeners: HashMap<ForwardTarget, Listener>,
}

struct Listener {
    local: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The port-forward listeners of all workload clusters, shared by all reconciles.
#[derive(Default)]
pub struct PortForwards {
    clusters: Mutex<HashMap<(String, String), ClusterForwards>>,
}

impl PortForwards {
    /// Local URLs for the client URLs in `targets`, opening listeners for new targets and closing those
    /// of targets that are gone. `client` is the workload cluster's API client.
    pub async fn routes(
        &self,
        cluster: (String, String),
        client: &kube::Client,
        targets: &BTreeMap<String, ForwardTarget>,
    ) -> Result<BTreeMap<String, String>, String> {
        let mut missing = Vec::new();
        let shared = {
            let mut clusters = self.lock();
            let forwards = clusters.entry(cluster.clone()).or_default();
            let shared = forwards
                .client
                .get_or_insert_with(|| Arc::new(Mutex::new(client.clone())))
                .clone();
            *shared.lock().unwrap_or_else(PoisonError::into_inner) = client.clone();
            forwards
                .listeners
                .retain(|target, _| targets.values().any(|t| t == target));
            for target in targets.values() {
                if !forwards.listeners.contains_key(target) && !missing.contains(target) {
                    missing.push(target.clone());
                }
            }
            shared
        };
        for target in missing {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| format!("cannot listen on 127.0.0.1 for a port-forward: {e}"))?;
            let local = listener
                .local_addr()
                .map_err(|e| format!("cannot listen on 127.0.0.1 for a port-forward: {e}"))?;
            let task = tokio::spawn(serve(listener, shared.clone(), target.clone()));
            self.lock()
                .entry(cluster.clone())
                .or_default()
                .listeners
                .insert(target, Listener { local, task });
        }
        let clusters = self.lock();
        let forwards = clusters.get(&cluster);
        Ok(targets
            .iter()
            .filter_map(|(url, target)| {
                let listener = forwards?.listeners.get(target)?;
                Some((url.clone(), local_url(listener.local)))
            })
            .collect())
    }

    /// Closes the listeners of a cluster that is gone.
    pub fn forget(&self, cluster: &(String, String)) {
        self.lock().remove(cluster);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), ClusterForwards>> {
        self.clusters.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Accepts connections until aborted; each one is bridged to its own port-forward stream.
async fn serve(
    listener: tokio::net::TcpListener,
    client: Arc<Mutex<kube::Client>>,
    target: ForwardTarget,
) {
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            continue;
        };
        let client = client
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let target = target.clone();
        tokio::spawn(async move {
            let pods: Api<Pod> = Api::namespaced(client, "kube-system");
            let mut forward = match pods.portforward(&target.pod, &[target.port]).await {
                Ok(forward) => forward,
                Err(e) => {
                    tracing::debug!(pod = %target.pod, error = %e, "etcd port-forward refused");
                    return;
                }
            };
            let Some(mut upstream) = forward.take_stream(target.port) else {
                return;
            };
            if let Err(e) = tokio::io::copy_bidirectional(&mut conn, &mut upstream).await {
                tracing::debug!(pod = %target.pod, error = %e, "etcd port-forward closed");
            }
            drop(upstream);
            let _ = forward.join().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ports_come_from_the_url_or_default_to_etcds() {
        assert_eq!(client_port("https://10.0.0.1:2379"), Some(2379));
        assert_eq!(client_port("https://10.0.0.1:32379/"), Some(32379));
        assert_eq!(client_port("https://[fd00::1]:2379"), Some(2379));
        assert_eq!(client_port("https://[fd00::1]"), Some(2379));
        assert_eq!(client_port("https://etcd.example"), Some(2379));
        assert_eq!(client_port("https://10.0.0.1:http"), None);
    }

    #[test]
    fn each_client_url_goes_to_the_etcd_pod_of_its_node() {
        let a = vec!["https://10.0.0.1:2379".to_owned()];
        let b = vec![
            "https://10.0.0.2:2379".to_owned(),
            "https://[fd00::2]:2379".to_owned(),
        ];
        let targets = forward_targets([("node-a", a.as_slice()), ("node-b", b.as_slice())]);
        assert_eq!(targets.len(), 3);
        assert_eq!(
            targets["https://10.0.0.1:2379"],
            ForwardTarget {
                pod: "etcd-node-a".into(),
                port: 2379
            }
        );
        assert_eq!(targets["https://[fd00::2]:2379"].pod, "etcd-node-b");
        assert_eq!(
            local_url("127.0.0.1:40001".parse().unwrap()),
            "https://127.0.0.1:40001"
        );
    }

    #[test]
    fn port_forward_is_the_default_and_direct_is_chosen_by_name() {
        use clap::ValueEnum;
        assert_eq!(EtcdAccess::default(), EtcdAccess::PortForward);
        assert_eq!(
            EtcdAccess::from_str("port-forward", false),
            Ok(EtcdAccess::PortForward)
        );
        assert_eq!(
            EtcdAccess::from_str("direct", false),
            Ok(EtcdAccess::Direct)
        );
        assert!(EtcdAccess::from_str("ssh", false).is_err());
    }

    /// Whether connecting to `addr` fails within a second (an aborted listener closes on the next poll).
    async fn closes(addr: &str) -> bool {
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(addr).await.is_err() {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        false
    }

    #[tokio::test]
    async fn listeners_follow_the_targets() {
        let forwards = PortForwards::default();
        // No connection is made until a client connects, so any client will do here.
        let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let key = ("default".to_owned(), "prod".to_owned());
        let urls = vec!["https://10.0.0.1:2379".to_owned()];
        let more = vec!["https://10.0.0.2:2379".to_owned()];
        let both = forward_targets([("a", urls.as_slice()), ("b", more.as_slice())]);
        let routes = forwards.routes(key.clone(), &client, &both).await.unwrap();
        assert_eq!(routes.len(), 2);
        assert!(routes.values().all(|u| u.starts_with("https://127.0.0.1:")));
        let again = forwards.routes(key.clone(), &client, &both).await.unwrap();
        assert_eq!(again, routes, "listeners are reused");
        let one = forward_targets([("a", urls.as_slice())]);
        let fewer = forwards.routes(key.clone(), &client, &one).await.unwrap();
        assert_eq!(fewer.len(), 1);
        assert_eq!(
            fewer["https://10.0.0.1:2379"],
            routes["https://10.0.0.1:2379"]
        );
        let closed = routes["https://10.0.0.2:2379"].trim_start_matches("https://");
        assert!(
            closes(closed).await,
            "the listener of a target that is gone is closed"
        );
        forwards.forget(&key);
        assert!(closes(routes["https://10.0.0.1:2379"].trim_start_matches("https://")).await);
    }
}
