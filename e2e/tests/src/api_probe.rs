//! Samples the workload cluster's API server through its control-plane endpoint (the simulated load
//! balancer), as a user's kubectl would reach it, to show it stays reachable while machines are replaced.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};

#[derive(Default)]
struct Record {
    ok: usize,
    failed: usize,
    /// Start of the current run of failures.
    failing_since: Option<Instant>,
    longest_outage: Duration,
}

/// A running probe; stops when dropped.
pub struct ApiProbe {
    record: Arc<Mutex<Record>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ApiProbe {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ApiProbe {
    /// Lists namespaces through the cluster's `<cluster>-kubeconfig` every `every`, each call bounded.
    pub fn start(client: kube::Client, every: Duration) -> Self {
        let record = Arc::new(Mutex::new(Record::default()));
        let shared = record.clone();
        let task = tokio::spawn(async move {
            let api: Api<Namespace> = Api::all(client);
            let params = ListParams::default().limit(1);
            loop {
                let call = api.list(&params);
                let ok = matches!(
                    tokio::time::timeout(Duration::from_secs(2), call).await,
                    Ok(Ok(_))
                );
                {
                    let mut r = shared.lock().unwrap_or_else(PoisonError::into_inner);
                    let now = Instant::now();
                    if ok {
                        r.ok += 1;
                        if let Some(since) = r.failing_since.take() {
                            r.longest_outage = r.longest_outage.max(now - since);
                        }
                    } else {
                        r.failed += 1;
                        r.failing_since.get_or_insert(now);
                    }
                }
                tokio::time::sleep(every).await;
            }
        });
        ApiProbe { record, task }
    }

    /// (answered, failed, longest time without an answer).
    pub fn summary(&self) -> (usize, usize, Duration) {
        let r = self.record.lock().unwrap_or_else(PoisonError::into_inner);
        let ongoing = r.failing_since.map(|s| s.elapsed()).unwrap_or_default();
        (r.ok, r.failed, r.longest_outage.max(ongoing))
    }
}

/// The workload cluster's kubeconfig, from its `<cluster>-kubeconfig` Secret (key `value`).
pub async fn workload_kubeconfig(
    management: &kube::Client,
    namespace: &str,
    cluster: &str,
) -> Result<String, String> {
    use k8s_openapi::api::core::v1::Secret;
    let name = format!("{cluster}-kubeconfig");
    let secret = Api::<Secret>::namespaced(management.clone(), namespace)
        .get(&name)
        .await
        .map_err(|e| format!("Secret {namespace}/{name}: {e}"))?;
    let value = secret
        .data
        .as_ref()
        .and_then(|d| d.get("value"))
        .ok_or_else(|| format!("Secret {namespace}/{name} has no key value"))?;
    Ok(String::from_utf8_lossy(&value.0).into_owned())
}

/// A client for the workload cluster from its `<cluster>-kubeconfig` Secret.
pub async fn workload_client(
    management: &kube::Client,
    namespace: &str,
    cluster: &str,
) -> Result<kube::Client, String> {
    let yaml = workload_kubeconfig(management, namespace, cluster).await?;
    testenv::apiserver::client_from_kubeconfig(&yaml)
        .await
        .map_err(|e| format!("kubeconfig of {cluster}: {e}"))
}

/// Creates `count` ConfigMaps `fill-<i>` of `bytes` incompressible bytes each in the default namespace
/// of the workload cluster: a database of about `count * bytes`, the same values in every run.
pub async fn fill(
    management: &kube::Client,
    namespace: &str,
    cluster: &str,
    count: usize,
    bytes: usize,
) {
    let workload = workload_client(management, namespace, cluster)
        .await
        .unwrap();
    let config_maps = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(workload, "default");
    // xorshift64*: bytes no compression shrinks, without a random source.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut data = vec![0u8; bytes];
    for i in 0..count {
        for chunk in data.chunks_mut(8) {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let word = state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        let filler = k8s_openapi::api::core::v1::ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(format!("fill-{i:04}")),
                ..Default::default()
            },
            binary_data: Some([("data".to_owned(), k8s_openapi::ByteString(data.clone()))].into()),
            ..Default::default()
        };
        config_maps
            .create(&kube::api::PostParams::default(), &filler)
            .await
            .unwrap();
    }
}
