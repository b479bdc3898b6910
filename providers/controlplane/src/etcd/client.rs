//! A thin, timed API over `etcd-client`: one endpoint per call, so the caller always knows which member
//! answered, and errors that say which endpoint failed doing what.
//!
//! etcd 3.4 learners answer only `Status` and serializable reads; everything else here (member list, alarms,
//! membership changes, compaction) must be sent to a voting member.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{
    AlarmAction, AlarmType, Certificate, Client, ConnectOptions, Identity, MemberAddOptions,
    TlsOptions,
};
use futures::future::join_all;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::{AlarmKind, EtcdClientCert, Member, Observation, Status};

/// Timeouts and retry bounds of etcd calls.
#[derive(Clone, Debug)]
pub struct EtcdClientConfig {
    /// Establishing the TCP + TLS connection.
    pub dial_timeout: Duration,
    /// One ordinary call (status, member list, membership change, compaction).
    pub call_timeout: Duration,
    /// Defragmentation, and the longest pause between two chunks of a snapshot.
    pub maintenance_timeout: Duration,
    /// A leadership transfer. etcd answers one within its request timeout, 5 s plus two election
    /// timeouts (7 s with etcd's default election timeout, 10 s with Sovereign Cloud Stack's 2.5 s):
    /// waiting longer than that, a transfer etcd completes under load is not taken for a timeout.
    pub leader_transfer_timeout: Duration,
    /// How long a promotion is retried while the learner is not yet in sync with the leader.
    pub promote_retry_for: Duration,
    /// How long a membership change is retried while etcd calls the cluster unhealthy (it does for a few
    /// seconds after every membership change).
    pub membership_retry_for: Duration,
    /// A cached connection unused for this long is closed.
    pub idle_client_ttl: Duration,
}

impl Default for EtcdClientConfig {
    fn default() -> Self {
        Self {
            dial_timeout: Duration::from_secs(3),
            call_timeout: Duration::from_secs(5),
            maintenance_timeout: Duration::from_secs(60),
            leader_transfer_timeout: Duration::from_secs(15),
            promote_retry_for: Duration::from_secs(30),
            membership_retry_for: Duration::from_secs(30),
            idle_client_ttl: Duration::from_secs(600),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error("etcd at {endpoint} is unreachable: {cause}")]
    Unreachable { endpoint: String, cause: String },
    #[error("etcd at {endpoint}: TLS: {problem} ({cause})")]
    Tls {
        endpoint: String,
        problem: TlsProblem,
        cause: String,
    },
    #[error("etcd at {endpoint} did not answer {op} within {after:?}")]
    Timeout {
        endpoint: String,
        op: &'static str,
        after: Duration,
    },
    #[error(
        "etcd at {endpoint} is a learner and refuses {op}; send it to a voting member's endpoint"
    )]
    LearnerRefused { endpoint: String, op: &'static str },
    #[error("etcd at {endpoint} has no leader (lost quorum or cut off from the others)")]
    NoLeader { endpoint: String },
    #[error(
        "etcd at {endpoint} is not the leader and refuses {op}; send it to the leader's endpoint"
    )]
    NotLeader { endpoint: String, op: &'static str },
    #[error("etcd at {endpoint}: {op}: member {id:x} is not in the member list")]
    MemberNotFound {
        endpoint: String,
        op: &'static str,
        id: u64,
    },
    #[error("etcd at {endpoint}: {op} still refused after retrying for {after:?}: {cause}")]
    GaveUp {
        endpoint: String,
        op: &'static str,
        after: Duration,
        cause: String,
    },
    #[error(
        "etcd at {endpoint} answered as member {found:x}, but the member list gives it to {expected:x}"
    )]
    WrongMember {
        endpoint: String,
        expected: u64,
        found: u64,
    },
    #[error("etcd at {endpoint}: {op} failed: {cause}")]
    Call {
        endpoint: String,
        op: &'static str,
        cause: String,
    },
    #[error("cannot build an etcd client for {endpoint}: {cause}")]
    Client { endpoint: String, cause: String },
    #[error("etcd at {endpoint}: cannot write the snapshot: {source}")]
    SnapshotWrite {
        endpoint: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no voting etcd member answered a member list; tried {}", describe_attempts(.attempts))]
    NoMemberList { attempts: Vec<EtcdError> },
}

fn describe_attempts(attempts: &[EtcdError]) -> String {
    if attempts.is_empty() {
        return "no endpoint".to_owned();
    }
    attempts
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl EtcdError {
    /// Short, bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            EtcdError::Unreachable { .. } => "etcd_unreachable",
            EtcdError::Tls { .. } => "etcd_tls",
            EtcdError::Timeout { .. } => "etcd_timeout",
            EtcdError::LearnerRefused { .. } => "etcd_learner_refused",
            EtcdError::NoLeader { .. } => "etcd_no_leader",
            EtcdError::NotLeader { .. } => "etcd_not_leader",
            EtcdError::MemberNotFound { .. } => "etcd_member_not_found",
            EtcdError::GaveUp { .. } => "etcd_retries_exhausted",
            EtcdError::WrongMember { .. } => "etcd_wrong_member",
            EtcdError::Call { .. } => "etcd_call",
            EtcdError::Client { .. } => "etcd_client",
            EtcdError::SnapshotWrite { .. } => "etcd_snapshot_write",
            EtcdError::NoMemberList { .. } => "etcd_no_member_list",
        }
    }

    /// The endpoint the error is about, if it is about one.
    pub fn endpoint(&self) -> Option<&str> {
        match self {
            EtcdError::Unreachable { endpoint, .. }
            | EtcdError::Tls { endpoint, .. }
            | EtcdError::Timeout { endpoint, .. }
            | EtcdError::LearnerRefused { endpoint, .. }
            | EtcdError::NoLeader { endpoint }
            | EtcdError::NotLeader { endpoint, .. }
            | EtcdError::MemberNotFound { endpoint, .. }
            | EtcdError::GaveUp { endpoint, .. }
            | EtcdError::WrongMember { endpoint, .. }
            | EtcdError::Call { endpoint, .. }
            | EtcdError::Client { endpoint, .. }
            | EtcdError::SnapshotWrite { endpoint, .. } => Some(endpoint),
            EtcdError::NoMemberList { .. } => None,
        }
    }

    /// The member did not answer at all (down, or the network to it is): as opposed to answering with a
    /// refusal.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            EtcdError::Unreachable { .. } | EtcdError::Timeout { .. }
        )
    }

    /// The TLS handshake failed: the member and the controller do not trust each other's certificates.
    pub fn tls_problem(&self) -> Option<TlsProblem> {
        match self {
            EtcdError::Tls { problem, .. } => Some(*problem),
            _ => None,
        }
    }

    fn cause(&self) -> Option<&str> {
        match self {
            EtcdError::Call { cause, .. } => Some(cause),
            _ => None,
        }
    }
}

/// Why a TLS handshake with a member failed. Either side refusing the other's certificate is a
/// configuration fault, not an outage: retrying does not help until a certificate or CA is replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsProblem {
    /// The member's serving certificate is not signed by the etcd CA the controller trusts.
    ServerUntrusted,
    /// The member's serving certificate expired or is not valid yet.
    ServerCertExpired,
    /// The member refused the controller's client certificate: it trusts another CA, or the
    /// certificate expired.
    ClientCertRejected,
}

impl std::fmt::Display for TlsProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TlsProblem::ServerUntrusted => {
                "the member's serving certificate is not signed by the etcd CA of the cluster's \
                 <cluster>-etcd Secret"
            }
            TlsProblem::ServerCertExpired => {
                "the member's serving certificate expired or is not valid yet"
            }
            TlsProblem::ClientCertRejected => {
                "the member rejected our client certificate: its trusted CA (--trusted-ca-file) is \
                 not the CA of the cluster's <cluster>-etcd Secret, or the certificate expired"
            }
        })
    }
}

/// Tells a certificate refusal apart in a transport error's text. rustls words its own verdict on
/// the member's certificate as `invalid peer certificate: …`; the member's verdict on ours arrives
/// as a TLS alert (`received fatal alert: …`).
pub fn tls_problem(cause: &str) -> Option<TlsProblem> {
    if let Some((_, verdict)) = cause.split_once("invalid peer certificate") {
        let expired = ["Expired", "expired", "NotValidYet", "not valid yet"];
        return Some(if expired.iter().any(|e| verdict.contains(e)) {
            TlsProblem::ServerCertExpired
        } else {
            TlsProblem::ServerUntrusted
        });
    }
    let (_, alert) = cause.split_once("received fatal alert: ")?;
    const REJECTIONS: [&str; 6] = [
        "BadCertificate",
        "UnknownCA",
        "CertificateExpired",
        "CertificateUnknown",
        "CertificateRequired",
        "AccessDenied",
    ];
    REJECTIONS
        .iter()
        .any(|r| alert.starts_with(r))
        .then_some(TlsProblem::ClientCertRejected)
}

// etcd's refusals, as its gRPC status messages spell them (3.4 and later).
const NOT_IN_SYNC: &str = "can only promote a learner member which is in sync with leader";
const NOT_A_LEARNER: &str = "can only promote a learner member";
const UNHEALTHY: &str = "unhealthy cluster";
const LEARNER_REFUSES: &str = "rpc not supported for learner";
const NOT_LEADER: &str = "not leader";
const MEMBER_NOT_FOUND: &str = "member not found";

/// Connections to etcd endpoints, shared by all reconciles: one per endpoint and client certificate (a new
/// certificate gets new connections), closed when unused for [`EtcdClientConfig::idle_client_ttl`].
#[derive(Clone, Default)]
pub struct EtcdClients {
    config: EtcdClientConfig,
    cache: Arc<Mutex<HashMap<CacheKey, Cached>>>,
}

/// (endpoint, certificate fingerprint)
type CacheKey = (String, String);

struct Cached {
    client: Client,
    last_used: Instant,
}

impl EtcdClients {
    pub fn new(config: EtcdClientConfig) -> Self {
        Self {
            config,
            cache: Arc::default(),
        }
    }

    pub fn config(&self) -> &EtcdClientConfig {
        &self.config
    }

    /// Access to one workload cluster's etcd with `cert`.
    pub fn workload(&self, cert: Arc<EtcdClientCert>) -> WorkloadEtcd {
        WorkloadEtcd {
            clients: self.clone(),
            fingerprint: cert.fingerprint(),
            cert,
            routes: Arc::default(),
        }
    }

    /// Number of open cached connections.
    pub fn cached(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CacheKey, Cached>> {
        // A panic while holding the lock leaves nothing half-written: entries are inserted whole.
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn cached_client(&self, endpoint: &str, fingerprint: &str) -> Option<Client> {
        let now = Instant::now();
        let mut cache = self.lock();
        let ttl = self.config.idle_client_ttl;
        cache.retain(|_, c| now.duration_since(c.last_used) < ttl);
        let entry = cache.get_mut(&(endpoint.to_owned(), fingerprint.to_owned()))?;
        entry.last_used = now;
        Some(entry.client.clone())
    }

    fn store(&self, endpoint: &str, fingerprint: &str, client: Client) {
        self.lock().insert(
            (endpoint.to_owned(), fingerprint.to_owned()),
            Cached {
                client,
                last_used: Instant::now(),
            },
        );
    }
}

/// One workload cluster's etcd, reached with one client certificate.
#[derive(Clone)]
pub struct WorkloadEtcd {
    clients: EtcdClients,
    cert: Arc<EtcdClientCert>,
    fingerprint: String,
    /// Where to connect for a member's client URL instead of the URL itself (a port-forward's local
    /// listener); errors still name the member's URL.
    routes: Arc<BTreeMap<String, String>>,
}

impl std::fmt::Debug for WorkloadEtcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadEtcd")
            .field("cert", &self.cert)
            .finish_non_exhaustive()
    }
}

impl WorkloadEtcd {
    /// The same access, connecting to `routes[url]` for each client URL listed there.
    pub fn routed(mut self, routes: BTreeMap<String, String>) -> Self {
        self.routes = Arc::new(routes);
        self
    }

    fn target<'a>(&'a self, endpoint: &'a str) -> &'a str {
        self.routes.get(endpoint).map_or(endpoint, String::as_str)
    }

    /// The member list, as seen by the member at `endpoint` (which must be a voting member on etcd 3.4).
    pub async fn member_list(&self, endpoint: &str) -> Result<Vec<Member>, EtcdError> {
        let resp = self
            .call(endpoint, "member list", |mut c| async move {
                c.member_list().await
            })
            .await?;
        Ok(resp.members().iter().map(member_from).collect())
    }

    /// What the member at `endpoint` says about itself; learners answer too.
    pub async fn status(&self, endpoint: &str) -> Result<Status, EtcdError> {
        let resp = self
            .call(endpoint, "status", |mut c| async move { c.status().await })
            .await?;
        let header = resp.header();
        Ok(Status {
            id: header.map_or(0, |h| h.member_id()),
            leader: resp.leader(),
            raft_index: resp.raft_index(),
            raft_term: resp.raft_term(),
            raft_applied_index: resp.raft_applied_index(),
            revision: header.map_or(0, |h| h.revision()),
            db_size: resp.db_size(),
            db_size_in_use: resp.raft_used_db_size(),
            is_learner: resp.is_learner(),
            errors: resp.errors().to_vec(),
            version: resp.version().to_owned(),
        })
    }

    /// Alarms raised anywhere in the cluster.
    pub async fn alarms(&self, endpoint: &str) -> Result<Vec<(u64, AlarmKind)>, EtcdError> {
        let resp = self
            .call(endpoint, "alarm list", |mut c| async move {
                c.alarm(AlarmAction::Get, AlarmType::None, None).await
            })
            .await?;
        Ok(resp
            .alarms()
            .iter()
            .filter_map(|a| {
                let kind = match a.alarm() {
                    AlarmType::Nospace => AlarmKind::NoSpace,
                    AlarmType::Corrupt => AlarmKind::Corrupt,
                    AlarmType::None => return None,
                };
                Some((a.member_id(), kind))
            })
            .collect())
    }

    /// Adds a learner with `peer_url` (kubeadm's join does this itself; the controller needs it only to
    /// repair). Retried while etcd calls the cluster unhealthy after a recent membership change.
    pub async fn add_learner(&self, endpoint: &str, peer_url: &str) -> Result<Member, EtcdError> {
        let op = "add learner";
        let resp = retry_while(
            &[endpoint],
            op,
            UNHEALTHY,
            self.config().membership_retry_for,
            |endpoint| {
                self.call(endpoint, op, |mut c| {
                    let urls = vec![peer_url.to_owned()];
                    async move {
                        c.member_add(urls, Some(MemberAddOptions::new().with_is_learner()))
                            .await
                    }
                })
            },
        )
        .await?;
        resp.member()
            .map(member_from)
            .ok_or_else(|| EtcdError::Call {
                endpoint: endpoint.to_owned(),
                op,
                cause: "the answer names no added member".to_owned(),
            })
    }

    /// Promotes learner `id` to a voting member, retrying while etcd says it is not yet in sync with the
    /// leader. A member that is already a voter counts as promoted: an earlier answer may have been lost.
    pub async fn promote(&self, endpoint: &str, id: u64) -> Result<(), EtcdError> {
        let op = "promote member";
        let result = retry_while(
            &[endpoint],
            op,
            NOT_IN_SYNC,
            self.config().promote_retry_for,
            |endpoint| {
                self.call(
                    endpoint,
                    op,
                    |mut c| async move { c.member_promote(id).await },
                )
            },
        )
        .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if e.cause().is_some_and(already_voter) => Ok(()),
            Err(e) => Err(with_member(e, id)),
        }
    }

    /// Removes member `id` through the first of `endpoints` that takes it, retrying while each calls the
    /// cluster unhealthy (a member does for ≈ 5 s after it joined, or after a promotion). Removing a
    /// member that is no longer listed succeeds: an earlier answer may have been lost.
    pub async fn remove(&self, endpoints: &[&str], id: u64) -> Result<(), EtcdError> {
        let op = "remove member";
        let result = retry_while(
            endpoints,
            op,
            UNHEALTHY,
            self.config().membership_retry_for,
            |endpoint| {
                self.call(
                    endpoint,
                    op,
                    |mut c| async move { c.member_remove(id).await },
                )
            },
        )
        .await;
        match result {
            Ok(_) | Err(EtcdError::MemberNotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Hands leadership to `target_id`. Only the leader accepts this: `endpoint` must be the leader's.
    pub async fn move_leader(&self, endpoint: &str, target_id: u64) -> Result<(), EtcdError> {
        let timeout = self.config().leader_transfer_timeout;
        self.call_within(endpoint, "move leader", timeout, |mut c| async move {
            c.move_leader(target_id).await
        })
        .await
        .map(drop)
        .map_err(|e| with_member(e, target_id))
    }

    /// Defragments the database of the member at `endpoint` (it stops answering while it runs; do one
    /// member at a time, the leader last).
    pub async fn defragment(&self, endpoint: &str) -> Result<(), EtcdError> {
        let timeout = self.config().maintenance_timeout;
        self.call_within(endpoint, "defragment", timeout, |mut c| async move {
            c.defragment().await
        })
        .await
        .map(drop)
    }

    /// Compacts the key-value history up to `revision` (see [`Status::revision`]); cluster-wide.
    pub async fn compact(&self, endpoint: &str, revision: i64) -> Result<(), EtcdError> {
        self.call(endpoint, "compact", |mut c| async move {
            c.compact(revision, None).await
        })
        .await
        .map(drop)
    }

    /// Streams a snapshot of the member's database into `out`; returns the bytes written. `out` is
    /// flushed but not synced or closed.
    pub async fn snapshot<W>(&self, endpoint: &str, out: &mut W) -> Result<u64, EtcdError>
    where
        W: AsyncWrite + Unpin + ?Sized,
    {
        let op = "snapshot";
        let mut stream = self
            .call(endpoint, op, |mut c| async move { c.snapshot().await })
            .await?;
        let idle = self.config().maintenance_timeout;
        let mut written = 0u64;
        loop {
            let chunk = tokio::time::timeout(idle, stream.message())
                .await
                .map_err(|_| EtcdError::Timeout {
                    endpoint: endpoint.to_owned(),
                    op,
                    after: idle,
                })?
                .map_err(|e| classify(endpoint, op, e))?;
            let Some(chunk) = chunk else { break };
            let write_error = |source| EtcdError::SnapshotWrite {
                endpoint: endpoint.to_owned(),
                source,
            };
            out.write_all(chunk.blob()).await.map_err(write_error)?;
            written += chunk.blob().len() as u64;
        }
        out.flush()
            .await
            .map_err(|source| EtcdError::SnapshotWrite {
                endpoint: endpoint.to_owned(),
                source,
            })?;
        Ok(written)
    }

    /// The member list from the first voting member with a leader among `endpoints`, then the status of
    /// every started member at its own client URL (concurrently). Fails only if no voter lists members.
    pub async fn observe(&self, endpoints: &[String]) -> Result<Observation, EtcdError> {
        let mut attempts = Vec::new();
        let mut listed = None;
        for endpoint in endpoints {
            match self.list_from_voter(endpoint).await {
                Ok(found) => {
                    listed = Some(found);
                    break;
                }
                Err(e) => attempts.push(e),
            }
        }
        let Some((members, alarms)) = listed else {
            return Err(EtcdError::NoMemberList { attempts });
        };
        let asked = members
            .iter()
            .filter_map(|m| Some((m.id, m.client_urls.first()?.clone())));
        let states: BTreeMap<u64, Result<Status, EtcdError>> =
            join_all(asked.map(|(id, url)| async move {
                let status = self.status(&url).await.and_then(|s| {
                    if s.id == id {
                        Ok(s)
                    } else {
                        Err(EtcdError::WrongMember {
                            endpoint: url.clone(),
                            expected: id,
                            found: s.id,
                        })
                    }
                });
                (id, status)
            }))
            .await
            .into_iter()
            .collect();
        let leader = agreed_leader(&states);
        Ok(Observation {
            members,
            states,
            alarms,
            leader,
        })
    }

    async fn list_from_voter(
        &self,
        endpoint: &str,
    ) -> Result<(Vec<Member>, Vec<(u64, AlarmKind)>), EtcdError> {
        // Learners refuse the list, and a member without a leader may list a stale membership.
        let status = self.status(endpoint).await?;
        if status.is_learner {
            return Err(EtcdError::LearnerRefused {
                endpoint: endpoint.to_owned(),
                op: "member list",
            });
        }
        if status.leader == 0 {
            return Err(EtcdError::NoLeader {
                endpoint: endpoint.to_owned(),
            });
        }
        let members = self.member_list(endpoint).await?;
        let alarms = self.alarms(endpoint).await?;
        Ok((members, alarms))
    }

    fn config(&self) -> &EtcdClientConfig {
        &self.clients.config
    }

    async fn client(&self, endpoint: &str) -> Result<Client, EtcdError> {
        let target = self.target(endpoint);
        if let Some(client) = self.clients.cached_client(target, &self.fingerprint) {
            return Ok(client);
        }
        let config = self.config();
        let tls = TlsOptions::new()
            .ca_certificate(Certificate::from_pem(&self.cert.ca_pem))
            .identity(Identity::from_pem(&self.cert.cert_pem, &self.cert.key_pem));
        let options = ConnectOptions::new()
            .with_connect_timeout(config.dial_timeout)
            // Notices a member that vanished without closing the connection.
            .with_keep_alive(Duration::from_secs(30), config.dial_timeout)
            .with_tls(tls);
        // Connecting is lazy: this fails only on a malformed endpoint or TLS material.
        let client = Client::connect([target], Some(options))
            .await
            .map_err(|e| EtcdError::Client {
                endpoint: endpoint.to_owned(),
                cause: error_chain(&e),
            })?;
        self.clients
            .store(target, &self.fingerprint, client.clone());
        Ok(client)
    }

    async fn call<T, F, Fut>(&self, endpoint: &str, op: &'static str, f: F) -> Result<T, EtcdError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.call_within(endpoint, op, self.config().call_timeout, f)
            .await
    }

    async fn call_within<T, F, Fut>(
        &self,
        endpoint: &str,
        op: &'static str,
        timeout: Duration,
        f: F,
    ) -> Result<T, EtcdError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let client = self.client(endpoint).await?;
        match tokio::time::timeout(timeout, f(client)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => match classify(endpoint, op, e) {
                EtcdError::Unreachable { endpoint, cause } => {
                    Err(self.diagnose(endpoint, cause).await)
                }
                other => Err(other),
            },
            Err(_) => Err(EtcdError::Timeout {
                endpoint: endpoint.to_owned(),
                op,
                after: timeout,
            }),
        }
    }

    /// Looks closer at a connection failure. With TLS 1.3 a member verifies the client certificate
    /// after the handshake and its refusal only reaches the gRPC client as a closed stream; a TLS
    /// handshake of our own, which reads the member's first answer, shows the alert.
    async fn diagnose(&self, endpoint: String, cause: String) -> EtcdError {
        let target = self.target(&endpoint).to_owned();
        match probe_tls(&target, &self.cert, self.config().dial_timeout).await {
            Some((problem, seen)) => EtcdError::Tls {
                endpoint,
                problem,
                cause: format!("{seen}; the gRPC client saw: {cause}"),
            },
            None => EtcdError::Unreachable { endpoint, cause },
        }
    }
}

/// Asks `endpoints` in turn until one answers other than with `refusal`; when all refuse, pauses (a
/// little longer each time) and asks again, for up to `limit`.
async fn retry_while<'e, T, F, Fut>(
    endpoints: &[&'e str],
    op: &'static str,
    refusal: &'static str,
    limit: Duration,
    mut attempt: F,
) -> Result<T, EtcdError>
where
    F: FnMut(&'e str) -> Fut,
    Fut: Future<Output = Result<T, EtcdError>>,
{
    let Some(first) = endpoints.first() else {
        return Err(EtcdError::Call {
            endpoint: String::new(),
            op,
            cause: "no member to ask".to_owned(),
        });
    };
    let started = Instant::now();
    let deadline = started + limit;
    let mut pause = RETRY_FIRST_PAUSE;
    loop {
        let mut refused = None;
        for endpoint in endpoints {
            match attempt(endpoint).await {
                Err(EtcdError::Call { cause, .. }) if cause.contains(refusal) => {
                    tracing::debug!(endpoint, op, %cause, "etcd refused");
                    refused = Some(cause);
                }
                other => return other,
            }
        }
        let cause = refused.unwrap_or_default();
        let now = Instant::now();
        if now >= deadline {
            return Err(EtcdError::GaveUp {
                endpoint: first.to_string(),
                op,
                after: started.elapsed(),
                cause,
            });
        }
        tracing::debug!(endpoint = first, op, %cause, ?pause, "etcd refused, retrying");
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(RETRY_MAX_PAUSE);
    }
}

/// Connects to `endpoint` (`https://host:port`) with `cert`, completes a TLS handshake, sends the
/// HTTP/2 preface and reads the member's first bytes: a certificate refusal on either side shows up as
/// a TLS error here. `None` when the connection works, or fails for another reason (e.g. refused).
async fn probe_tls(
    endpoint: &str,
    cert: &EtcdClientCert,
    timeout: Duration,
) -> Option<(TlsProblem, String)> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use tokio::io::AsyncReadExt;
    let authority = endpoint.strip_prefix("https://")?.split('/').next()?;
    let (host, _) = authority.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(cert.ca_pem.as_bytes()) {
        roots.add(ca.ok()?).ok()?;
    }
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .ok()?;
    let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).ok()?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .ok()?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    let name = ServerName::try_from(host.to_owned()).ok()?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let probe = async {
        let tcp = tokio::net::TcpStream::connect(authority).await.ok()?;
        let mut tls = match connector.connect(name, tcp).await {
            Ok(tls) => tls,
            Err(e) => return tls_problem(&e.to_string()).map(|p| (p, e.to_string())),
        };
        // The client preface and an empty SETTINGS frame: a member that accepts us answers with its own.
        let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";
        if let Err(e) = tls.write_all(preface).await {
            return tls_problem(&e.to_string()).map(|p| (p, e.to_string()));
        }
        let mut first = [0u8; 1];
        match tls.read(&mut first).await {
            Err(e) => tls_problem(&e.to_string()).map(|p| (p, e.to_string())),
            Ok(_) => None,
        }
    };
    tokio::time::timeout(timeout, probe).await.ok().flatten()
}

const RETRY_FIRST_PAUSE: Duration = Duration::from_millis(100);
const RETRY_MAX_PAUSE: Duration = Duration::from_secs(1);

fn member_from(m: &etcd_client::Member) -> Member {
    Member {
        id: m.id(),
        name: m.name().to_owned(),
        peer_urls: m.peer_urls().to_vec(),
        client_urls: m.client_urls().to_vec(),
        is_learner: m.is_learner(),
    }
}

fn already_voter(cause: &str) -> bool {
    cause.contains(NOT_A_LEARNER) && !cause.contains(NOT_IN_SYNC)
}

/// Names the member in a `MemberNotFound` error.
fn with_member(e: EtcdError, id: u64) -> EtcdError {
    match e {
        EtcdError::MemberNotFound { endpoint, op, .. } => {
            EtcdError::MemberNotFound { endpoint, op, id }
        }
        other => other,
    }
}

/// The leader named by most members that answered; ties go to the smaller ID so the result is stable.
fn agreed_leader(states: &BTreeMap<u64, Result<Status, EtcdError>>) -> Option<u64> {
    let mut votes: BTreeMap<u64, usize> = BTreeMap::new();
    for status in states.values().flatten() {
        if status.leader != 0 {
            *votes.entry(status.leader).or_default() += 1;
        }
    }
    votes
        .into_iter()
        .max_by(|(a_id, a), (b_id, b)| a.cmp(b).then(b_id.cmp(a_id)))
        .map(|(id, _)| id)
}

fn classify(endpoint: &str, op: &'static str, e: etcd_client::Error) -> EtcdError {
    let endpoint = endpoint.to_owned();
    match e {
        etcd_client::Error::GRpcStatus(status) => {
            let message = status.message();
            // etcd's own refusals carry its prefix; an Unavailable without it comes from the transport.
            let from_etcd = message.starts_with("etcdserver:");
            if !from_etcd && (status.code() == tonic::Code::Unavailable || from_transport(&status))
            {
                unreachable(endpoint, status_cause(&status))
            } else if message.contains(LEARNER_REFUSES) {
                EtcdError::LearnerRefused { endpoint, op }
            } else if message.ends_with(NOT_LEADER) {
                EtcdError::NotLeader { endpoint, op }
            } else if message.contains(MEMBER_NOT_FOUND) {
                EtcdError::MemberNotFound {
                    endpoint,
                    op,
                    id: 0,
                }
            } else {
                EtcdError::Call {
                    endpoint,
                    op,
                    cause: message.to_owned(),
                }
            }
        }
        etcd_client::Error::TransportError(e) => unreachable(endpoint, error_chain(&e)),
        etcd_client::Error::IoError(e) => unreachable(endpoint, error_chain(&e)),
        etcd_client::Error::InvalidUri(e) => EtcdError::Client {
            endpoint,
            cause: error_chain(&e),
        },
        other => EtcdError::Call {
            endpoint,
            op,
            cause: error_chain(&other),
        },
    }
}

/// A connection failure: a certificate refusal when the text says so, otherwise an unreachable member.
fn unreachable(endpoint: String, cause: String) -> EtcdError {
    match tls_problem(&cause) {
        Some(problem) => EtcdError::Tls {
            endpoint,
            problem,
            cause,
        },
        None => EtcdError::Unreachable { endpoint, cause },
    }
}

/// A connection failure wrapped into a gRPC status by the client.
fn from_transport(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(s) = source {
        if s.is::<tonic::transport::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// A status's message and the errors beneath it (the status's own `Display` dumps debug output).
fn status_cause(status: &tonic::Status) -> String {
    with_sources(
        status.message().to_owned(),
        std::error::Error::source(status),
    )
}

/// An error with its sources, `outer: inner: …`.
fn error_chain(e: &dyn std::error::Error) -> String {
    with_sources(e.to_string(), e.source())
}

/// Appends each source not already part of the text.
fn with_sources(mut text: String, mut source: Option<&dyn std::error::Error>) -> String {
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refusal_passes_the_change_to_the_next_member_before_any_pause() {
        let refusal = |endpoint: &str| EtcdError::Call {
            endpoint: endpoint.to_owned(),
            op: "remove member",
            cause: "etcdserver: unhealthy cluster".to_owned(),
        };
        let asked = std::sync::Mutex::new(Vec::new());
        let attempt = |endpoint: &'static str| {
            asked.lock().unwrap().push(endpoint);
            let answer = match endpoint {
                "https://new-leader:2379" => Err(refusal(endpoint)),
                _ => Ok(endpoint),
            };
            async move { answer }
        };
        let endpoints = ["https://new-leader:2379", "https://old-voter:2379"];
        // No time to retry: the one round must reach the second member.
        let taken = retry_while(
            &endpoints,
            "remove member",
            UNHEALTHY,
            Duration::ZERO,
            attempt,
        )
        .await
        .unwrap();
        assert_eq!(taken, "https://old-voter:2379");
        assert_eq!(*asked.lock().unwrap(), endpoints);

        // When every member refuses, the error names the first (the leader) and etcd's refusal.
        let err = retry_while(
            &endpoints[..1],
            "remove member",
            UNHEALTHY,
            Duration::ZERO,
            attempt,
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, EtcdError::GaveUp { ref endpoint, .. } if endpoint == endpoints[0]),
            "{err:?}"
        );
        assert!(err.to_string().contains("unhealthy cluster"), "{err}");
        // Another error ends the round at once.
        let unreachable = retry_while(
            &endpoints,
            "remove member",
            UNHEALTHY,
            Duration::ZERO,
            |e| async move {
                Err::<(), _>(EtcdError::Unreachable {
                    endpoint: e.to_owned(),
                    cause: "connection refused".into(),
                })
            },
        )
        .await
        .unwrap_err();
        assert!(
            matches!(unreachable, EtcdError::Unreachable { ref endpoint, .. } if endpoint == endpoints[0])
        );
        let none: &[&str] = &[];
        assert!(
            retry_while(
                none,
                "remove member",
                UNHEALTHY,
                Duration::ZERO,
                |_| async { Ok(()) }
            )
            .await
            .is_err()
        );
    }

    fn status(id: u64, leader: u64) -> Status {
        Status {
            id,
            leader,
            raft_index: 0,
            raft_term: 0,
            raft_applied_index: 0,
            revision: 0,
            db_size: 0,
            db_size_in_use: 0,
            is_learner: false,
            errors: Vec::new(),
            version: String::new(),
        }
    }

    #[test]
    fn the_leader_is_the_one_most_members_follow() {
        let unreachable = || EtcdError::Unreachable {
            endpoint: "https://10.0.0.3:2379".into(),
            cause: "connection refused".into(),
        };
        let states = BTreeMap::from([
            (1, Ok(status(1, 2))),
            (2, Ok(status(2, 2))),
            (3, Ok(status(3, 0))),
            (4, Err(unreachable())),
            (5, Ok(status(5, 1))),
        ]);
        assert_eq!(agreed_leader(&states), Some(2));
        let none = BTreeMap::from([(1, Ok(status(1, 0))), (2, Err(unreachable()))]);
        assert_eq!(agreed_leader(&none), None);
        let tie = BTreeMap::from([(1, Ok(status(1, 7))), (2, Ok(status(2, 3)))]);
        assert_eq!(agreed_leader(&tie), Some(3));
    }

    #[test]
    fn membership_changes_go_to_the_leader_or_else_to_a_voter_that_follows_one() {
        let member = |id: u64| crate::etcd_membership::Member {
            id,
            name: format!("node-{id}"),
            peer_urls: vec![],
            client_urls: vec![format!("https://10.0.0.{id}:2379")],
            is_learner: false,
        };
        let unreachable = || EtcdError::Unreachable {
            endpoint: "https://10.0.0.1:2379".into(),
            cause: "connection refused".into(),
        };
        let learner = Status {
            is_learner: true,
            ..status(2, 1)
        };
        let observation = |states: BTreeMap<u64, Result<Status, EtcdError>>| Observation {
            members: (1..=4).map(member).collect(),
            leader: agreed_leader(&states),
            states,
            alarms: vec![],
        };
        let answering = observation(BTreeMap::from([
            (1, Ok(status(1, 3))),
            (3, Ok(status(3, 3))),
        ]));
        assert_eq!(
            answering.proposer_endpoints(None),
            ["https://10.0.0.3:2379", "https://10.0.0.1:2379"]
        );
        assert_eq!(
            answering.proposer_endpoints(Some(3)),
            ["https://10.0.0.1:2379"],
            "never the member to remove"
        );
        let cut_off = observation(BTreeMap::from([
            (1, Err(unreachable())),
            (2, Ok(learner)),
            (3, Ok(status(3, 1))),
            (4, Ok(status(4, 1))),
        ]));
        assert_eq!(cut_off.leader, Some(1));
        assert_eq!(
            cut_off.proposer_endpoints(None),
            ["https://10.0.0.3:2379", "https://10.0.0.4:2379"],
            "the voters that answered, by ID, when the leader did not"
        );
        let leaderless = observation(BTreeMap::from([(3, Ok(status(3, 0)))]));
        assert!(leaderless.proposer_endpoints(None).is_empty());
    }

    #[test]
    fn certificate_refusals_are_told_apart_from_outages() {
        let cases = [
            (
                "transport error: invalid peer certificate: UnknownIssuer",
                Some(TlsProblem::ServerUntrusted),
            ),
            (
                "tcp connect error: invalid peer certificate: BadSignature",
                Some(TlsProblem::ServerUntrusted),
            ),
            (
                "transport error: invalid peer certificate: certificate expired: verification time 1, \
                 but certificate is not valid after 0",
                Some(TlsProblem::ServerCertExpired),
            ),
            (
                "invalid peer certificate: Expired",
                Some(TlsProblem::ServerCertExpired),
            ),
            (
                "h2 protocol error: received fatal alert: BadCertificate",
                Some(TlsProblem::ClientCertRejected),
            ),
            (
                "received fatal alert: CertificateExpired",
                Some(TlsProblem::ClientCertRejected),
            ),
            (
                "received fatal alert: UnknownCA",
                Some(TlsProblem::ClientCertRejected),
            ),
            ("received fatal alert: ProtocolVersion", None),
            ("tcp connect error: Connection refused (os error 111)", None),
            ("", None),
        ];
        for (cause, expected) in cases {
            assert_eq!(tls_problem(cause), expected, "{cause}");
        }
        let e = unreachable(
            "https://10.0.0.1:2379".into(),
            "received fatal alert: BadCertificate".into(),
        );
        assert_eq!(e.tls_problem(), Some(TlsProblem::ClientCertRejected));
        assert!(!e.is_unreachable());
        assert_eq!(e.metric_label(), "etcd_tls");
        let text = e.to_string();
        assert!(
            text.contains("https://10.0.0.1:2379")
                && text.contains("rejected our client certificate"),
            "{text}"
        );
        let e = unreachable("https://10.0.0.1:2379".into(), "connection refused".into());
        assert!(e.is_unreachable() && e.tls_problem().is_none());
    }

    #[test]
    fn refusals_are_told_apart_from_other_failures() {
        let status =
            |code, msg: &str| etcd_client::Error::GRpcStatus(tonic::Status::new(code, msg));
        let e = classify(
            "https://a:2379",
            "status",
            status(
                tonic::Code::Unavailable,
                "tcp connect error: Connection refused",
            ),
        );
        assert!(matches!(e, EtcdError::Unreachable { .. }), "{e}");
        let e = classify(
            "https://a:2379",
            "member list",
            status(
                tonic::Code::Unavailable,
                "etcdserver: rpc not supported for learner",
            ),
        );
        assert!(matches!(e, EtcdError::LearnerRefused { .. }), "{e}");
        let e = classify(
            "https://a:2379",
            "remove member",
            status(tonic::Code::Unavailable, "etcdserver: unhealthy cluster"),
        );
        assert_eq!(e.cause(), Some("etcdserver: unhealthy cluster"));
        let e = classify(
            "https://a:2379",
            "move leader",
            status(tonic::Code::FailedPrecondition, "etcdserver: not leader"),
        );
        assert!(matches!(e, EtcdError::NotLeader { .. }), "{e}");
        assert!(e.to_string().contains("https://a:2379"), "{e}");
        assert!(already_voter(
            "etcdserver: can only promote a learner member"
        ));
        assert!(!already_voter(
            "etcdserver: can only promote a learner member which is in sync with leader"
        ));
    }
}
