//! An S3-compatible object store on loopback (or on an address of the simulator's bridge, for nodes in
//! network namespaces): versitygw (`hack/tools/versitygw`) serving a folder, each
//! bucket a directory of it and each object a file, with signature V4, multipart uploads and S3's own
//! errors. With a capacity, the folder is a tmpfs of that size in the store process's own mount
//! namespace: the store is full when it is, and the mount goes with the process.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::process::Process;
use crate::{Error, binaries, ports};

/// The region the store answers for.
pub const REGION: &str = "us-east-1";

/// How to start the store.
#[derive(Clone, Debug, Default)]
pub struct ObjectStoreOptions {
    /// At most this many bytes of objects (a tmpfs of that size); `None`: the disk's space.
    pub capacity: Option<u64>,
    /// The address it listens on; `None`: 127.0.0.1. Nodes in network namespaces reach the host at
    /// their bridge's gateway address, not at the host's loopback.
    pub address: Option<std::net::Ipv4Addr>,
}

/// A running object store; stopped by PID when dropped.
pub struct ObjectStore {
    process: Option<Process>,
    dir: PathBuf,
    port: u16,
    options: ObjectStoreOptions,
    access_key: String,
    secret_key: String,
}

impl ObjectStore {
    /// Starts the store in `dir` (its objects under `dir/objects`, its log `dir/versitygw.log`) and
    /// waits until it answers.
    pub async fn start(dir: &Path, options: ObjectStoreOptions) -> Result<Self, Error> {
        let objects = dir.join("objects");
        std::fs::create_dir_all(&objects)
            .map_err(|e| Error::io(format!("create {}", objects.display()), e))?;
        let mut store = Self {
            process: None,
            dir: dir.to_owned(),
            port: ports::free_port()?,
            options,
            // Keys of this store only: random, as a cloud issues them.
            access_key: format!("AK{:016X}", rand_u64()),
            secret_key: format!("{:016x}{:016x}", rand_u64(), rand_u64()),
        };
        store.launch().await?;
        Ok(store)
    }

    async fn launch(&mut self) -> Result<(), Error> {
        let binary = binaries::versitygw()?;
        let objects = self.dir.join("objects");
        let listen = format!("{}:{}", self.address(), self.port);
        let mut gateway = vec![
            binary.display().to_string(),
            "--access".into(),
            self.access_key.clone(),
            "--secret".into(),
            self.secret_key.clone(),
            "--region".into(),
            REGION.into(),
            "--port".into(),
            listen,
            "posix".into(),
            objects.display().to_string(),
        ];
        let command = match self.options.capacity {
            None => {
                let mut command = Command::new(gateway.remove(0));
                command.args(&gateway);
                command
            }
            Some(bytes) => {
                // Its own mount namespace with a tmpfs of `bytes` over the folder; `exec` keeps one PID.
                let mut command = Command::new("unshare");
                command.args(["--mount", "--propagation", "private", "--", "sh", "-c"]);
                command.arg(format!(
                    "mount -t tmpfs -o size={bytes} tmpfs \"$1\" && shift && exec \"$@\""
                ));
                command.arg("versitygw").arg(&objects).args(&gateway);
                command
            }
        };
        let mut process = Process::spawn("versitygw", command, &self.dir.join("versitygw.log"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect((self.address(), self.port)).is_err() {
            process.ensure_running()?;
            if Instant::now() > deadline {
                return Err(Error::NotReady {
                    what: format!("versitygw on {}:{}", self.address(), self.port),
                    timeout: Duration::from_secs(30),
                    last_error: "not listening".into(),
                    log_tail: process.log_tail(20),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.process = Some(process);
        Ok(())
    }

    fn address(&self) -> std::net::Ipv4Addr {
        self.options
            .address
            .unwrap_or(std::net::Ipv4Addr::LOCALHOST)
    }

    /// `http://<address>:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://{}:{}", self.address(), self.port)
    }

    pub fn access_key(&self) -> &str {
        &self.access_key
    }

    pub fn secret_key(&self) -> &str {
        &self.secret_key
    }

    /// Makes the bucket `name` (a directory of the store's folder, which is what a bucket is to it).
    pub fn create_bucket(&self, name: &str) -> Result<(), Error> {
        let bucket = self.objects()?.join(name);
        std::fs::create_dir_all(&bucket)
            .map_err(|e| Error::io(format!("create {}", bucket.display()), e))
    }

    /// The file holding object `key` of `bucket`, as the store keeps it (e.g. to corrupt it).
    pub fn object_file(&self, bucket: &str, key: &str) -> Result<PathBuf, Error> {
        Ok(self.objects()?.join(bucket).join(key))
    }

    /// The store's folder as its process sees it: through `/proc/<pid>/root` when it is a tmpfs of the
    /// process's own mount namespace.
    fn objects(&self) -> Result<PathBuf, Error> {
        let objects = self.dir.join("objects");
        match (&self.options.capacity, &self.process) {
            (None, _) => Ok(objects),
            (Some(_), Some(process)) => Ok(PathBuf::from(format!("/proc/{}/root", process.pid()))
                .join(objects.strip_prefix("/").unwrap_or(&objects))),
            (Some(_), None) => Err(Error::Other(
                "the object store is stopped, and its tmpfs went with it".into(),
            )),
        }
    }

    /// Stops the store (clients then meet a refused connection).
    pub fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.stop();
        }
    }

    /// Starts a stopped store again on the same port and folder (a store of limited capacity starts
    /// empty: its tmpfs went with the process).
    pub async fn restart(&mut self) -> Result<(), Error> {
        self.stop();
        self.launch().await
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Process::pid)
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    hasher.finish()
}
