//! Latency of a validating review over HTTPS on loopback at a steady 500 requests/s.
//!
//! Four clients, each on one keep-alive connection, send on a fixed schedule (open loop): latency is
//! measured from when a request was due, so a slow answer also counts against the requests queued
//! behind it. Prints p50/p99/max; asserts nothing.
//!
//! `cargo bench -p kubeadm-webhook --bench admission`

#[path = "../tests/integration/support.rs"]
mod support;

use std::time::{Duration, Instant};

use kubeadm_webhook::{AdmissionRequest, WebhookServer};
use serde_json::json;
use support::{CertDir, Client, Pki, Running, admission_review};

const RATE_PER_SECOND: u32 = 500;
const CLIENTS: u32 = 4;
const RUN_FOR: Duration = Duration::from_secs(10);
const PATH: &str = "/validate-example-com-v1-thing";

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}

async fn run() {
    let pki = Pki::new("bench CA");
    let dir = CertDir::new(&pki.cert_pem, &pki.key_pem);
    let server = WebhookServer::builder()
        .validating(PATH, |request: &AdmissionRequest| {
            if request.name.is_empty() {
                Err(kubeadm_webhook::Denial::forbidden("a name is required"))
            } else {
                Ok(Vec::new())
            }
        })
        .build()
        .unwrap();
    let running = Running::start(server, dir.files()).await;

    let object = json!({
        "apiVersion": "example.com/v1",
        "kind": "Thing",
        "metadata": {"name": "bench", "namespace": "default", "labels": {"app": "bench"}},
        "spec": {"replicas": 3, "version": "v1.31.0", "template": {"image": "registry.example/thing:1.0"}}
    });
    let body = serde_json::to_vec(&admission_review("bench", "CREATE", object)).unwrap();

    let interval = Duration::from_secs(1) * CLIENTS / RATE_PER_SECOND;
    let per_client = (RUN_FOR.as_secs_f64() / interval.as_secs_f64()) as u32;
    let start = Instant::now() + Duration::from_millis(100);
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let mut connection = Client::connect(running.addr, &pki.ca_pem).await.unwrap();
        let body = body.clone();
        // Clients are staggered so the server sees an even stream, not bursts of four.
        let first = start + interval * client / CLIENTS;
        clients.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_client as usize);
            for n in 0..per_client {
                let due = first + interval * n;
                tokio::time::sleep_until(due.into()).await;
                let (status, _) = connection.post(PATH, body.clone()).await;
                assert!(status.is_success(), "{status}");
                latencies.push(due.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for client in clients {
        latencies.extend(client.await.unwrap());
    }
    let took = start.elapsed();
    running.stop().await;

    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    println!(
        "admission (validating, HTTPS keep-alive, {CLIENTS} clients, open loop): {} requests in {:.1} s ({:.0}/s)",
        latencies.len(),
        took.as_secs_f64(),
        latencies.len() as f64 / took.as_secs_f64()
    );
    println!(
        "latency p50 {:?}  p99 {:?}  max {:?}",
        at(0.50),
        at(0.99),
        latencies.last().unwrap()
    );
}
