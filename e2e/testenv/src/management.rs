//! The local management plane: one TLS etcd member and a kube-apiserver in a temporary folder, with an
//! admin kubeconfig. Dropping it stops both processes by PID and removes the folder.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};

use crate::apiserver::{ApiServerOptions, KubeApiServer};
use crate::binaries::{ManagementBinaries, ManagementRelease};
use crate::etcd::{EtcdCluster, EtcdOptions};
use crate::{Error, Result};

pub struct ManagementPlane {
    // Field order is drop order: the apiserver stops before its etcd, the folder goes last.
    apiserver: KubeApiServer,
    etcd: EtcdCluster,
    dir: tempfile::TempDir,
}

impl ManagementPlane {
    /// Starts etcd and kube-apiserver in a new temporary folder and waits until the apiserver is ready.
    pub async fn start() -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("testenv-")
            .tempdir()
            .map_err(|e| Error::io("create a temporary folder", e))?;
        Self::start_in(dir).await
    }

    /// Like [`ManagementPlane::start`] but in a given folder (removed on drop).
    pub async fn start_in(dir: tempfile::TempDir) -> Result<Self> {
        Self::start_in_with(dir, ApiServerOptions::default()).await
    }

    /// Like [`ManagementPlane::start`], with kube-apiserver options (e.g. extra flags such as an audit
    /// log or admission plugins).
    pub async fn start_with(options: ApiServerOptions) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("testenv-")
            .tempdir()
            .map_err(|e| Error::io("create a temporary folder", e))?;
        Self::start_in_with(dir, options).await
    }

    /// Like [`ManagementPlane::start`] on the releases named, whatever `$TESTENV_MANAGEMENT` says: for a
    /// test that runs on each end of the matrix.
    pub async fn start_on(release: ManagementRelease) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("testenv-")
            .tempdir()
            .map_err(|e| Error::io("create a temporary folder", e))?;
        Self::start_binaries(dir, ApiServerOptions::default(), release.binaries()?).await
    }

    async fn start_in_with(dir: tempfile::TempDir, options: ApiServerOptions) -> Result<Self> {
        // The newest kube-apiserver on the newest etcd where they are built (CRDs with their CEL rules
        // active), else what `$TESTENV_MANAGEMENT` asks for (see `binaries::management`).
        Self::start_binaries(dir, options, crate::binaries::management()?).await
    }

    async fn start_binaries(
        dir: tempfile::TempDir,
        mut options: ApiServerOptions,
        binaries: ManagementBinaries,
    ) -> Result<Self> {
        let started = Instant::now();
        options
            .binary
            .get_or_insert_with(|| (binaries.kube_apiserver.clone(), binaries.legacy()));
        let etcd_options = EtcdOptions {
            binary: Some(binaries.etcd.clone()),
            ..EtcdOptions::default()
        };
        let etcd = EtcdCluster::start(&dir.path().join("etcd"), etcd_options).await?;
        let tls = etcd.tls().expect("management etcd uses TLS").clone();
        let apiserver = KubeApiServer::start(
            &dir.path().join("apiserver"),
            &etcd.client_urls(),
            &tls,
            options,
        )
        .await?;
        tracing::info!(
            elapsed = ?started.elapsed(),
            url = apiserver.url(),
            kube_apiserver = %binaries.kube_apiserver.display(),
            "management plane ready"
        );
        Ok(Self {
            apiserver,
            etcd,
            dir,
        })
    }

    pub async fn client(&self) -> Result<kube::Client> {
        self.apiserver.client().await
    }

    pub fn apiserver(&self) -> &KubeApiServer {
        &self.apiserver
    }

    pub fn etcd(&self) -> &EtcdCluster {
        &self.etcd
    }

    pub fn kubeconfig_path(&self) -> &Path {
        self.apiserver.kubeconfig_path()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// PIDs of every process this management plane started.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = self.etcd.pids();
        pids.push(self.apiserver.pid());
        pids
    }

    /// Kills kube-apiserver and etcd with SIGKILL, as a power cut of the management node would, waits
    /// `down`, and starts both again from their data on the same addresses; returns once the
    /// apiserver is ready again, with how long it did not answer.
    pub async fn restart(&mut self, down: Duration) -> Result<Duration> {
        let killed = Instant::now();
        self.apiserver.kill();
        self.etcd.kill();
        tracing::info!(?down, "management plane killed");
        tokio::time::sleep(down).await;
        self.etcd.start_again().await?;
        self.apiserver.start_again().await?;
        let outage = killed.elapsed();
        tracing::info!(?outage, "management plane back");
        Ok(outage)
    }

    /// Keeps the folder (logs, kubeconfig, certificates) after the processes stop; returns its path.
    pub fn keep_dir(self) -> std::path::PathBuf {
        let Self {
            mut apiserver,
            mut etcd,
            dir,
        } = self;
        apiserver.stop();
        etcd.stop();
        dir.keep()
    }

    /// Applies CRDs with server-side apply and waits until each is Established.
    pub async fn install_crds(&self, crds: &[CustomResourceDefinition]) -> Result<()> {
        install_crds(&self.client().await?, crds).await
    }
}

/// Applies CRDs with server-side apply and waits until each is Established.
pub async fn install_crds(client: &kube::Client, crds: &[CustomResourceDefinition]) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply("testenv").force();
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(crd)).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        loop {
            let current = api.get(&name).await?;
            let established = current
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                break;
            }
            if Instant::now() > deadline {
                return Err(Error::Other(format!(
                    "CRD {name} not Established after 30s"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}
