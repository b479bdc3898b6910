//! `make bench-snapshot`: etcd backup to object storage at two database sizes, measured in one run
//! against the standard tools. Numbers printed, nothing asserted.
//!
//! One real etcd member (current release) is filled with values of 1 MiB of incompressible bytes up
//! to each size (`BENCH_SNAPSHOT_MIB`, default `256,1024`); a real S3 server (versitygw, files on disk)
//! takes the snapshots. For each size:
//! - **ours**: the release build of the manager's backup path (`examples/snapshot_upload.rs`, path in
//!   `SNAPSHOT_UPLOAD`) streams the snapshot into the bucket, plain and sealed; wall time and the
//!   process's peak RSS;
//! - **baseline**: `etcdctl snapshot save` to a file, then `curl --aws-sigv4 -T` of that file (one
//!   PUT, payload unsigned);
//! - **check**: the same tool reading a stored snapshot back through every check a restore makes
//!   before it touches a member (stored SHA-256, seal, database SHA-256, etcd's own hash).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use testenv::object_store::{ObjectStore, ObjectStoreOptions};
use testenv::{EtcdCluster, EtcdOptions, EtcdRelease};

const MIB: usize = 1024 * 1024;
const BUCKET: &str = "bench";
const SEAL_KEY: &str = "q83vEjRWeJASNFZ4mrze8BI0VniavN7wEjRWeJq83vA=";

/// What one run of the tool printed.
#[derive(Debug, Default, Clone, Copy)]
struct Measured {
    bytes: u64,
    seconds: f64,
    peak_rss_kib: u64,
}

fn parse(line: &str) -> Measured {
    let mut measured = Measured::default();
    for field in line.split_whitespace() {
        match field.split_once('=') {
            Some(("bytes", v)) => measured.bytes = v.parse().unwrap(),
            Some(("seconds", v)) => measured.seconds = v.parse().unwrap(),
            Some(("peak_rss_kib", v)) => measured.peak_rss_kib = v.parse().unwrap(),
            _ => {}
        }
    }
    measured
}

struct Bench {
    tool: String,
    etcd: EtcdCluster,
    store: ObjectStore,
    ca_key: std::path::PathBuf,
}

impl Bench {
    fn tool(&self, mode: &str, object: &str, manifest: &str, sealed: bool) -> Measured {
        let tls = self.etcd.tls().expect("TLS");
        let mut command = Command::new(&self.tool);
        command
            .env("MODE", mode)
            .env("ETCD_ENDPOINT", &self.etcd.client_urls()[0])
            .env("ETCD_CA_CERT", &tls.ca_file)
            .env("ETCD_CA_KEY", &self.ca_key)
            .env("S3_ENDPOINT", self.store.endpoint())
            .env("S3_BUCKET", BUCKET)
            .env("S3_ACCESS_KEY", self.store.access_key())
            .env("S3_SECRET_KEY", self.store.secret_key())
            .env("OBJECT", object)
            .env("MANIFEST", manifest)
            .env_remove("SEAL_KEY");
        if sealed {
            command.env("SEAL_KEY", SEAL_KEY);
        }
        let output = command.output().expect("the snapshot tool runs");
        assert!(
            output.status.success(),
            "{mode} {object}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        parse(&String::from_utf8_lossy(&output.stdout))
    }

    /// `etcdctl snapshot save`, then a `curl` upload of the file; the seconds of each.
    fn baseline(&self, dir: &Path, name: &str) -> (f64, f64, u64) {
        let tls = self.etcd.tls().expect("TLS");
        let file = dir.join(name);
        let started = Instant::now();
        let saved = Command::new(testenv::binaries::etcdctl_current().unwrap())
            .args(["snapshot", "save"])
            .arg(&file)
            .arg(format!("--endpoints={}", self.etcd.client_urls()[0]))
            .arg(format!("--cacert={}", tls.ca_file.display()))
            .arg(format!("--cert={}", tls.client.cert.display()))
            .arg(format!("--key={}", tls.client.key.display()))
            .output()
            .unwrap();
        assert!(
            saved.status.success(),
            "{}",
            String::from_utf8_lossy(&saved.stderr)
        );
        let save = started.elapsed().as_secs_f64();
        let bytes = std::fs::metadata(&file).unwrap().len();
        let started = Instant::now();
        let uploaded = Command::new("curl")
            .args(["--fail", "--silent", "--show-error", "--aws-sigv4"])
            .arg("aws:amz:us-east-1:s3")
            // What S3 clients send over a channel of its own integrity (the aws CLI over TLS).
            .args(["-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"])
            .arg("--user")
            .arg(format!(
                "{}:{}",
                self.store.access_key(),
                self.store.secret_key()
            ))
            .arg("-T")
            .arg(&file)
            .arg(format!(
                "{}/{BUCKET}/baseline/{name}",
                self.store.endpoint()
            ))
            .output()
            .unwrap();
        assert!(
            uploaded.status.success(),
            "{}",
            String::from_utf8_lossy(&uploaded.stderr)
        );
        let upload = started.elapsed().as_secs_f64();
        std::fs::remove_file(&file).unwrap();
        (save, upload, bytes)
    }
}

async fn fill(etcd: &EtcdCluster, from: usize, to: usize) {
    let mut client = etcd.client().await.unwrap();
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ from as u64;
    let mut value = vec![0u8; MIB];
    for i in from..to {
        for chunk in value.chunks_mut(8) {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            chunk.copy_from_slice(&state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
        }
        client
            .put(format!("/registry/bench/{i:05}"), value.clone(), None)
            .await
            .unwrap();
    }
}

fn main() {
    let Ok(tool) = std::env::var("SNAPSHOT_UPLOAD") else {
        eprintln!(
            "SNAPSHOT_UPLOAD (the release build of examples/snapshot_upload) is not set: run `make bench-snapshot`"
        );
        std::process::exit(2);
    };
    let sizes: Vec<usize> = std::env::var("BENCH_SNAPSHOT_MIB")
        .unwrap_or_else(|_| "256,1024".into())
        .split(',')
        .map(|s| s.trim().parse().expect("BENCH_SNAPSHOT_MIB: sizes in MiB"))
        .collect();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let dir = tempfile::tempdir().unwrap();
        let etcd = EtcdCluster::start(
            &dir.path().join("etcd"),
            EtcdOptions {
                members: 1,
                extra_args: vec![format!("--quota-backend-bytes={}", 8u64 << 30)],
                ..EtcdOptions::on(EtcdRelease::Current).unwrap()
            },
        )
        .await
        .unwrap();
        let ca_key = dir.path().join("etcd-ca.key");
        std::fs::write(&ca_key, etcd.tls().unwrap().ca_key_pem()).unwrap();
        let store = ObjectStore::start(&dir.path().join("s3"), ObjectStoreOptions::default())
            .await
            .unwrap();
        store.create_bucket(BUCKET).unwrap();
        let bench = Bench {
            tool,
            etcd,
            store,
            ca_key,
        };
        let mut rows = Vec::new();
        let mut filled = 0;
        for size in sizes {
            let started = Instant::now();
            fill(&bench.etcd, filled, size).await;
            filled = size;
            println!("etcd filled to {size} MiB in {:.1?}", started.elapsed());
            let (save, upload, file_bytes) = bench.baseline(dir.path(), &format!("{size}.db"));
            let plain = bench.tool(
                "upload",
                &format!("ours/{size}.db"),
                &format!("ours/{size}.json"),
                false,
            );
            let sealed = bench.tool(
                "upload",
                &format!("ours/{size}.db.sealed"),
                &format!("ours/{size}-sealed.json"),
                true,
            );
            let check_plain = bench.tool("check", "", &format!("ours/{size}.json"), false);
            let check_sealed = bench.tool("check", "", &format!("ours/{size}-sealed.json"), true);
            let row = format!(
                "| {size} MiB ({:.0} MB file) | {save:.1} + {upload:.1} = {:.1} s | {:.1} s ({:.2}×), {} MiB | {:.1} s ({:.2}×), {} MiB | {:.1} s, {} MiB | {:.1} s, {} MiB |",
                file_bytes as f64 / 1e6,
                save + upload,
                plain.seconds,
                plain.seconds / (save + upload),
                plain.peak_rss_kib / 1024,
                sealed.seconds,
                sealed.seconds / (save + upload),
                sealed.peak_rss_kib / 1024,
                check_plain.seconds,
                check_plain.peak_rss_kib / 1024,
                check_sealed.seconds,
                check_sealed.peak_rss_kib / 1024,
            );
            println!("{row}");
            rows.push(row);
        }
        println!(
            "\n| database | etcdctl snapshot save + curl upload | ours, plain (× baseline), peak RSS | ours, sealed, peak RSS | restore check, plain | restore check, sealed |"
        );
        println!("|---|---|---|---|---|---|");
        for row in rows {
            println!("{row}");
        }
    });
}
