//! The control-plane manager's etcd backup path alone, for `make bench-snapshot`: a snapshot streamed
//! from an etcd member into an S3 bucket (sealed when a key is given), or a stored snapshot read back
//! through every check as a restore stages it. Prints one line `bytes=… seconds=… peak_rss_kib=…`, the
//! peak being this whole process's (VmHWM).
//!
//! Environment: `MODE` (`upload` or `check`), `ETCD_ENDPOINT`, `ETCD_CA_CERT` and `ETCD_CA_KEY` (PEM
//! files of the etcd CA, which signs this client's certificate as the manager's does), `S3_ENDPOINT`,
//! `S3_BUCKET`, `S3_ACCESS_KEY`, `S3_SECRET_KEY`, `SEAL_KEY` (base64 of 32 bytes, optional), `OBJECT`
//! and `MANIFEST` (names in the bucket).

use std::sync::Arc;
use std::time::Instant;

use kubeadm_api::controlplane::etcd_backup::EtcdBackupS3;
use kubeadm_cluster::CertPem;
use kubeadm_controlplane::etcd::{EtcdClientConfig, EtcdClients, issue_client_cert};
use kubeadm_controlplane::etcd_backup::sealed::Key;
use kubeadm_controlplane::etcd_backup::store::{self, Credentials, Destination, Source};

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::main]
async fn main() {
    let s3 = EtcdBackupS3 {
        endpoint: env("S3_ENDPOINT"),
        bucket: env("S3_BUCKET"),
        ..EtcdBackupS3::default()
    };
    let client = store::client(
        &s3,
        &Credentials {
            access_key_id: env("S3_ACCESS_KEY"),
            secret_access_key: env("S3_SECRET_KEY"),
            ..Credentials::default()
        },
    )
    .expect("a store client");
    let key = std::env::var("SEAL_KEY")
        .ok()
        .map(|k| Key::from_secret_value(k.as_bytes()).expect("SEAL_KEY"));
    let started = Instant::now();
    let bytes = match env("MODE").as_str() {
        "upload" => {
            let ca = CertPem {
                cert: std::fs::read_to_string(env("ETCD_CA_CERT")).unwrap(),
                key: std::fs::read_to_string(env("ETCD_CA_KEY")).unwrap(),
            };
            let cert = issue_client_cert("bench", &ca, time::OffsetDateTime::now_utc()).unwrap();
            let clients = EtcdClients::new(EtcdClientConfig::default());
            let etcd = clients.workload(Arc::new(cert));
            let endpoint = env("ETCD_ENDPOINT");
            let written = store::upload(
                &Destination {
                    store: client.as_ref(),
                    object: env("OBJECT"),
                    manifest: env("MANIFEST"),
                    key: key.as_ref().map(|k| (k, "bench/key".to_owned())),
                },
                Source {
                    cluster: "default/bench".into(),
                    member: "bench".into(),
                    revision: None,
                    time: k8s_openapi::jiff::Timestamp::now(),
                },
                |mut pipe| async move { etcd.snapshot(&endpoint, &mut pipe).await },
            )
            .await
            .expect("the snapshot is stored");
            written.stored_size
        }
        "check" => {
            let manifest = store::manifest(client.as_ref(), &env("MANIFEST"))
                .await
                .expect("the manifest");
            let mut check = kubeadm_controlplane::restore::SnapshotCheck::default();
            store::read_checked(client.as_ref(), &manifest, key.as_ref(), |piece| {
                check.update(piece);
                Ok(())
            })
            .await
            .expect("the snapshot reads back whole");
            let source = kubeadm_controlplane::restore::Source::File("/bench".into());
            check
                .finish(&source)
                .expect("etcd's own check")
                .database_bytes as u64
        }
        other => panic!("MODE {other:?}: upload or check"),
    };
    println!(
        "bytes={bytes} seconds={:.3} peak_rss_kib={}",
        started.elapsed().as_secs_f64(),
        peak_rss_kib()
    );
}
