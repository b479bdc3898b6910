//! Real etcd clusters on 127.0.0.1: one or more members, mutual TLS, learners added and promoted through
//! the etcd API the way kubeadm does it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use etcd_client::{Certificate, Client, ConnectOptions, Identity, MemberAddOptions, TlsOptions};

use crate::pki::{self, Ca, CertFiles, Usage};
use crate::process::{Process, log_tail};
use crate::{Error, Result, binaries, ports};

const START_ATTEMPTS: usize = 3;

#[derive(Clone, Debug)]
pub struct EtcdOptions {
    /// Voting members to start with.
    pub members: usize,
    /// Serve clients and peers over mutual TLS (as kubeadm's stacked etcd does).
    pub tls: bool,
    /// How long a member may take to answer its first status request.
    pub ready_timeout: Duration,
    /// Names of the initial members (default `m0-a1`, …); when given, one per member.
    pub names: Vec<String>,
    /// CA certificate and key (PKCS#8 PEM) to sign the member and client certificates with, instead of a
    /// fresh one: a test that hands the same CA to a provider lets the provider reach the members.
    pub ca: Option<(String, String)>,
    /// More etcd flags for every member, e.g. `--quota-backend-bytes=2097152`.
    pub extra_args: Vec<String>,
    /// The etcd binary; Debian's ([`binaries::etcd`]) when unset.
    pub binary: Option<PathBuf>,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        Self {
            members: 1,
            tls: true,
            ready_timeout: crate::timeout_from_env(
                "TESTENV_ETCD_READY_TIMEOUT",
                Duration::from_secs(30),
            ),
            names: Vec::new(),
            ca: None,
            extra_args: Vec::new(),
            binary: None,
        }
    }
}

impl EtcdOptions {
    /// The defaults, with the etcd binary of `release`.
    pub fn on(release: binaries::EtcdRelease) -> Result<Self> {
        Ok(Self {
            binary: Some(release.etcd()?),
            ..Self::default()
        })
    }
}

/// Certificates of an etcd cluster, as files the processes read and as PEM for clients.
#[derive(Clone, Debug)]
pub struct EtcdTls {
    pub ca_file: PathBuf,
    pub ca_pem: String,
    /// Serving and peer certificate shared by all members (SANs 127.0.0.1 and localhost).
    pub member: CertFiles,
    /// A client certificate the members trust.
    pub client: CertFiles,
    pub client_cert_pem: String,
    pub client_key_pem: String,
    ca_key_pem: String,
}

impl EtcdTls {
    fn generate(dir: &Path, ca: Option<&(String, String)>) -> Result<Self> {
        let ca = match ca {
            Some((cert, key)) => Ca::from_pem(cert, key)?,
            None => Ca::new("etcd-ca")?,
        };
        let ca_file = ca.write(dir, "ca")?.cert;
        let member = ca
            .issue(
                "etcd-member",
                None,
                pki::LOOPBACK_HOSTS,
                Usage::ServerAndClient,
            )?
            .write(dir, "member")?;
        let client_pair = ca.issue("testenv-etcd-client", None, &[], Usage::Client)?;
        let client = client_pair.write(dir, "client")?;
        Ok(Self {
            ca_file,
            ca_pem: ca.cert_pem().to_owned(),
            member,
            client,
            client_cert_pem: client_pair.cert_pem,
            client_key_pem: client_pair.key_pem,
            ca_key_pem: ca.key_pem().to_owned(),
        })
    }

    /// The CA private key, for tests that sign their own client certificates.
    pub fn ca_key_pem(&self) -> &str {
        &self.ca_key_pem
    }
}

/// One member process and where it listens.
pub struct EtcdMember {
    pub name: String,
    pub client_url: String,
    pub peer_url: String,
    pub data_dir: PathBuf,
    /// Set for members added as learners until they are promoted.
    pub learner_id: Option<u64>,
    /// The certificate it serves clients with, when not the cluster's member certificate.
    serving: Option<CertFiles>,
    process: Option<Process>,
}

impl EtcdMember {
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Process::pid)
    }

    pub fn is_running(&mut self) -> bool {
        self.process
            .as_mut()
            .is_some_and(|p| p.try_exit_status().is_none())
    }

    /// Stops the process (SIGTERM, then SIGKILL); the member stays in the cluster's member list.
    pub fn stop(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.stop();
        }
    }
}

pub struct EtcdCluster {
    dir: PathBuf,
    scheme: &'static str,
    tls: Option<EtcdTls>,
    token: String,
    options: EtcdOptions,
    members: Vec<EtcdMember>,
}

impl EtcdCluster {
    /// Starts `options.members` voting members in `dir` and waits until each answers a status request.
    pub async fn start(dir: &Path, options: EtcdOptions) -> Result<Self> {
        if options.members == 0 {
            return Err(Error::Other(
                "an etcd cluster needs at least one member".into(),
            ));
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
        let tls = if options.tls {
            Some(EtcdTls::generate(dir, options.ca.as_ref())?)
        } else {
            None
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut cluster = Self {
                dir: dir.to_owned(),
                scheme: if options.tls { "https" } else { "http" },
                tls: tls.clone(),
                token: format!("testenv-{}-{attempt}", std::process::id()),
                options: options.clone(),
                members: Vec::new(),
            };
            match cluster.start_initial_members(attempt).await {
                Ok(()) => return Ok(cluster),
                Err(Error::PortInUse { .. }) if attempt < START_ATTEMPTS => continue,
                Err(e) => return Err(e),
            }
        }
    }

    async fn start_initial_members(&mut self, attempt: usize) -> Result<()> {
        let mut planned = Vec::new();
        for i in 0..self.options.members {
            let name = match self.options.names.get(i) {
                Some(name) => name.clone(),
                None => format!("m{i}-a{attempt}"),
            };
            planned.push(self.plan_member(&name)?);
        }
        let initial: Vec<(String, String)> = planned
            .iter()
            .map(|m| (m.name.clone(), m.peer_url.clone()))
            .collect();
        for mut member in planned {
            member.process = Some(self.spawn(&member, &initial, "new")?);
            self.members.push(member);
        }
        for i in 0..self.members.len() {
            self.wait_ready(i).await?;
        }
        Ok(())
    }

    fn plan_member(&self, name: &str) -> Result<EtcdMember> {
        let client_port = ports::free_port()?;
        let peer_port = ports::free_port()?;
        Ok(EtcdMember {
            name: name.to_owned(),
            client_url: format!("{}://127.0.0.1:{client_port}", self.scheme),
            peer_url: format!("{}://127.0.0.1:{peer_port}", self.scheme),
            data_dir: self.dir.join(format!("{name}.data")),
            learner_id: None,
            serving: None,
            process: None,
        })
    }

    fn spawn(&self, m: &EtcdMember, initial: &[(String, String)], state: &str) -> Result<Process> {
        let initial_cluster = initial
            .iter()
            .map(|(name, url)| format!("{name}={url}"))
            .collect::<Vec<_>>()
            .join(",");
        let binary = match &self.options.binary {
            Some(binary) => binary.clone(),
            None => binaries::etcd()?,
        };
        let mut cmd = Command::new(binary);
        cmd.arg(format!("--name={}", m.name))
            .arg(format!("--data-dir={}", m.data_dir.display()))
            .arg(format!("--listen-client-urls={}", m.client_url))
            .arg(format!("--advertise-client-urls={}", m.client_url))
            .arg(format!("--listen-peer-urls={}", m.peer_url))
            .arg(format!("--initial-advertise-peer-urls={}", m.peer_url))
            .arg(format!("--initial-cluster={initial_cluster}"))
            .arg(format!("--initial-cluster-state={state}"))
            .arg(format!("--initial-cluster-token={}", self.token))
            .arg("--logger=zap")
            .arg("--log-outputs=stderr")
            // Small timings keep elections quick on loopback.
            .arg("--heartbeat-interval=50")
            .arg("--election-timeout=500")
            .args(&self.options.extra_args);
        if let Some(tls) = &self.tls {
            let (cert, key, ca) = (&tls.member.cert, &tls.member.key, &tls.ca_file);
            let serving = m.serving.as_ref().unwrap_or(&tls.member);
            cmd.arg(format!("--cert-file={}", serving.cert.display()))
                .arg(format!("--key-file={}", serving.key.display()))
                .arg(format!("--trusted-ca-file={}", ca.display()))
                .arg("--client-cert-auth")
                .arg(format!("--peer-cert-file={}", cert.display()))
                .arg(format!("--peer-key-file={}", key.display()))
                .arg(format!("--peer-trusted-ca-file={}", ca.display()))
                .arg("--peer-client-cert-auth");
        }
        let log = self.dir.join(format!("{}.log", m.name));
        Process::spawn(&format!("etcd member {}", m.name), cmd, &log)
    }

    /// Waits until member `index` answers a (serializable) status request — learners too.
    async fn wait_ready(&mut self, index: usize) -> Result<()> {
        let timeout = self.options.ready_timeout;
        let deadline = Instant::now() + timeout;
        let url = self.members[index].client_url.clone();
        let mut last_error = String::from("no attempt yet");
        while Instant::now() < deadline {
            self.check_alive(index)?;
            match self.connect(std::slice::from_ref(&url)).await {
                Ok(mut client) => match client.status().await {
                    Ok(_) => return Ok(()),
                    Err(e) => last_error = e.to_string(),
                },
                Err(e) => last_error = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let m = &self.members[index];
        Err(Error::NotReady {
            what: format!("etcd member {} at {}", m.name, m.client_url),
            timeout,
            last_error,
            log_tail: log_tail(&self.dir.join(format!("{}.log", m.name)), 30),
        })
    }

    fn check_alive(&mut self, index: usize) -> Result<()> {
        let m = &mut self.members[index];
        let Some(p) = m.process.as_mut() else {
            return Err(Error::Other(format!(
                "etcd member {} is not running",
                m.name
            )));
        };
        match p.ensure_running() {
            Err(Error::Exited { what, log_tail, .. })
                if log_tail.contains("address already in use") =>
            {
                Err(Error::PortInUse { what, log_tail })
            }
            other => other,
        }
    }

    /// A client for the given endpoints with the cluster's client certificate.
    pub async fn connect(&self, endpoints: &[String]) -> Result<Client> {
        Ok(Client::connect(endpoints, Some(self.connect_options())).await?)
    }

    /// How [`connect`](Self::connect) reaches the members (timeouts, TLS client identity), for a caller
    /// that connects without holding the cluster.
    pub fn connect_options(&self) -> ConnectOptions {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(5));
        if let Some(tls) = &self.tls {
            options = options.with_tls(
                TlsOptions::new()
                    .ca_certificate(Certificate::from_pem(&tls.ca_pem))
                    .identity(Identity::from_pem(
                        &tls.client_cert_pem,
                        &tls.client_key_pem,
                    ))
                    .domain_name("localhost"),
            );
        }
        options
    }

    /// A client for every running voting member. Learners are left out: they refuse most requests
    /// ("rpc not supported for learner") and the client balances across its endpoints.
    pub async fn client(&self) -> Result<Client> {
        self.connect(&self.client_urls()).await
    }

    /// Client URLs of the running voting members.
    pub fn client_urls(&self) -> Vec<String> {
        self.members
            .iter()
            .filter(|m| m.process.is_some() && m.learner_id.is_none())
            .map(|m| m.client_url.clone())
            .collect()
    }

    /// Client URLs of every member whose process runs, learners included.
    pub fn running_urls(&self) -> Vec<String> {
        self.members
            .iter()
            .filter(|m| m.pid().is_some())
            .map(|m| m.client_url.clone())
            .collect()
    }

    pub fn tls(&self) -> Option<&EtcdTls> {
        self.tls.as_ref()
    }

    pub fn members(&self) -> &[EtcdMember] {
        &self.members
    }

    pub fn member_mut(&mut self, name: &str) -> Option<&mut EtcdMember> {
        self.members.iter_mut().find(|m| m.name == name)
    }

    /// PIDs of every process this cluster started and still owns.
    pub fn pids(&self) -> Vec<u32> {
        self.members.iter().filter_map(EtcdMember::pid).collect()
    }

    /// Adds a member as a learner through the etcd API, then starts its process (kubeadm's join order).
    /// Returns the new member's ID once the process answers status requests.
    pub async fn add_learner(&mut self, name: &str) -> Result<u64> {
        self.refresh_learners().await;
        let planned = self.plan_member(name)?;
        let peer_url = planned.peer_url.clone();
        // Right after a membership change etcd refuses another one until members have been connected
        // for a few seconds ("unhealthy cluster"); kubeadm retries the same way.
        let resp = self
            .retry(
                self.options.ready_timeout,
                "add learner",
                |e| e.contains("unhealthy cluster"),
                |mut c| {
                    let peer_url = peer_url.clone();
                    async move {
                        c.member_add(
                            [peer_url.as_str()],
                            Some(MemberAddOptions::new().with_is_learner()),
                        )
                        .await
                    }
                },
            )
            .await?;
        let id = resp
            .member()
            .map(|m| m.id())
            .ok_or_else(|| Error::Other("member add returned no member".into()))?;
        let initial: Vec<(String, String)> = resp
            .member_list()
            .iter()
            .map(|m| {
                let n = if m.id() == id { name } else { m.name() };
                (
                    n.to_owned(),
                    m.peer_urls().first().cloned().unwrap_or_default(),
                )
            })
            .collect();
        let mut member = planned;
        member.learner_id = Some(id);
        member.process = Some(self.spawn(&member, &initial, "existing")?);
        self.members.push(member);
        let index = self.members.len() - 1;
        self.wait_ready(index).await?;
        Ok(id)
    }

    /// Promotes a learner, retrying while etcd says it is not yet in sync with the leader.
    pub async fn promote(&mut self, id: u64, timeout: Duration) -> Result<()> {
        self.retry(
            timeout,
            "promote learner",
            |e| e.contains("in sync with leader"),
            |mut c| async move { c.member_promote(id).await.map(drop) },
        )
        .await?;
        for m in self.members.iter_mut().filter(|m| m.learner_id == Some(id)) {
            m.learner_id = None;
        }
        Ok(())
    }

    /// Removes a member, retrying while etcd refuses because a recent member is not yet connected long
    /// enough ("unhealthy cluster"), and stops its process if it belongs to this cluster.
    pub async fn remove(&mut self, id: u64, timeout: Duration) -> Result<()> {
        let name = self.member_name(id).await?;
        self.retry(
            timeout,
            "remove member",
            |e| e.contains("unhealthy cluster"),
            |mut c| async move { c.member_remove(id).await.map(drop) },
        )
        .await?;
        if let Some(name) = name
            && let Some(pos) = self.members.iter().position(|m| m.name == name)
        {
            let mut m = self.members.remove(pos);
            m.stop();
        }
        Ok(())
    }

    async fn member_name(&self, id: u64) -> Result<Option<String>> {
        let mut client = self.client().await?;
        let list = client.member_list().await?;
        Ok(list
            .members()
            .iter()
            .find(|m| m.id() == id)
            .map(|m| m.name().to_owned()))
    }

    async fn retry<T, F, Fut>(
        &self,
        timeout: Duration,
        what: &str,
        retryable: impl Fn(&str) -> bool,
        call: F,
    ) -> Result<T>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            let client = self.client().await?;
            match call(client).await {
                Ok(value) => return Ok(value),
                Err(e) if retryable(&e.to_string()) && Instant::now() < deadline => {
                    tracing::debug!(what, error = %e, "retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Forgets the learner mark of members someone else promoted (e.g. a controller under test), so that
    /// [`EtcdCluster::client_urls`] includes them; asks each running member in turn until one answers.
    pub async fn refresh_learners(&mut self) {
        let running: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.process.is_some())
            .map(|m| m.client_url.clone())
            .collect();
        for url in running {
            let Ok(mut client) = self.connect(std::slice::from_ref(&url)).await else {
                continue;
            };
            let Ok(list) = client.member_list().await else {
                continue;
            };
            for member in &mut self.members {
                let promoted = member.learner_id.is_some_and(|id| {
                    list.members()
                        .iter()
                        .any(|m| m.id() == id && !m.is_learner())
                });
                if promoted {
                    member.learner_id = None;
                }
            }
            return;
        }
    }

    /// Restarts member `name` serving its clients with `serving` (the cluster's member certificate when
    /// `None`); its peer certificate stays. Returns without waiting for it to answer: a certificate its
    /// clients refuse (e.g. one from [`Ca::issue_expired`]) is the point of such a restart.
    pub fn serve_with(&mut self, name: &str, serving: Option<CertFiles>) -> Result<()> {
        let initial: Vec<(String, String)> = self
            .members
            .iter()
            .map(|m| (m.name.clone(), m.peer_url.clone()))
            .collect();
        let index = self
            .members
            .iter()
            .position(|m| m.name == name)
            .ok_or_else(|| Error::Other(format!("no etcd member {name}")))?;
        self.members[index].stop();
        self.members[index].serving = serving;
        let process = self.spawn(&self.members[index], &initial, "existing")?;
        self.members[index].process = Some(process);
        Ok(())
    }

    /// Kills every running member with SIGKILL, as a power cut would; their data stays for
    /// [`start_again`](Self::start_again).
    pub fn kill(&mut self) {
        for m in &mut self.members {
            if let Some(mut p) = m.process.take() {
                p.kill();
            }
        }
    }

    /// Starts every stopped member again from its data folder, on the same addresses, and waits until
    /// each answers a status request.
    pub async fn start_again(&mut self) -> Result<()> {
        let initial: Vec<(String, String)> = self
            .members
            .iter()
            .map(|m| (m.name.clone(), m.peer_url.clone()))
            .collect();
        for i in 0..self.members.len() {
            if self.members[i].process.is_none() {
                let process = self.spawn(&self.members[i], &initial, "existing")?;
                self.members[i].process = Some(process);
            }
        }
        for i in 0..self.members.len() {
            self.wait_ready(i).await?;
        }
        Ok(())
    }

    /// Stops every member (SIGTERM, then SIGKILL after a grace period).
    pub fn stop(&mut self) {
        for m in &mut self.members {
            m.stop();
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        self.stop();
    }
}
