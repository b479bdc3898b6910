//! Leader election over a `coordination.k8s.io/v1` Lease, so that of several replicas of a manager only
//! one runs its controllers.
//!
//! The protocol is client-go's: the Lease names its holder, how long a claim lasts, when it was acquired
//! and last renewed, and how often it changed hands. Every write carries the `resourceVersion` that was
//! read, so of two candidates racing for the same Lease the API server lets exactly one through.
//!
//! Expiry is measured on the candidate's own monotonic clock, from the moment it saw the Lease last
//! change, not from the holder's `renewTime`: replicas whose wall clocks disagree can then never both
//! believe they hold it. The price, as in client-go, is that a new candidate waits one lease duration
//! before taking over a Lease whose holder vanished without releasing it.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kubeadm_api::rbac::Rule;
use tokio::sync::{oneshot, watch};

/// What leader election needs in the manager's own namespace: the Lease is read, created, and renewed
/// with an update that carries the read `resourceVersion`.
pub const RBAC_RULES: &[Rule] = &[Rule {
    groups: &["coordination.k8s.io"],
    resources: &["leases"],
    verbs: &["create", "get", "update"],
}];

/// Where the service account token mounts the pod's namespace.
const POD_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// How long releasing the Lease may take at shutdown before the successor is left to wait for expiry.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a claim lasts and how often it is renewed. The defaults are controller-runtime's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How long other candidates wait after the Lease last changed before they take it over.
    pub lease_duration: Duration,
    /// How long the leader keeps retrying a failed renewal before it gives up; shorter than
    /// `lease_duration`, so that it stops acting before anyone else may start.
    pub renew_deadline: Duration,
    /// Pause between two attempts to acquire or renew.
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl Timing {
    fn check(self) -> Result<Self, Error> {
        let whole_seconds = self.lease_duration.as_secs() >= 1
            && self.lease_duration.subsec_nanos() == 0
            && self.lease_duration.as_secs() <= i32::MAX as u64;
        if whole_seconds
            && self.renew_deadline < self.lease_duration
            && !self.retry_period.is_zero()
            && self.retry_period < self.renew_deadline
        {
            Ok(self)
        } else {
            Err(Error::Timing(self))
        }
    }

    fn lease_duration_seconds(self) -> i32 {
        // Checked in `Timing::check` to fit.
        self.lease_duration.as_secs() as i32
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "leader election needs a lease duration of whole seconds (at least 1), a shorter renew deadline \
         and a shorter, non-zero retry period; got {0:?}"
    )]
    Timing(Timing),
}

/// Why a leader stopped being one. A manager that sees this must stop writing at once.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Lost {
    #[error("the Lease {lease} now names {holder} as its holder")]
    TakenOver { lease: String, holder: String },
    #[error(
        "the Lease {lease} could not be renewed within the renew deadline of {deadline:?}: {last_error}"
    )]
    NotRenewed {
        lease: String,
        deadline: Duration,
        last_error: String,
    },
}

/// What a candidate may do with the Lease it just read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// It holds the Lease already: renew it.
    Renew,
    /// Nobody holds the Lease (absent, released, or expired): claim it. `previous` is the holder
    /// whose claim expired, if any.
    Acquire { previous: Option<String> },
    /// `holder` holds the Lease for at least `remaining` more.
    Wait { holder: String, remaining: Duration },
}

/// May `identity` take `lease` now? `unchanged_for` is how long this candidate has seen the Lease
/// without any write, on its own clock. A holder whose Lease shows no duration is treated as expired,
/// as client-go does.
pub fn decide(lease: Option<&LeaseSpec>, identity: &str, unchanged_for: Duration) -> Decision {
    let holder = lease
        .and_then(|spec| spec.holder_identity.as_deref())
        .filter(|holder| !holder.is_empty());
    let Some(holder) = holder else {
        return Decision::Acquire { previous: None };
    };
    if holder == identity {
        return Decision::Renew;
    }
    let duration = lease
        .and_then(|spec| spec.lease_duration_seconds)
        .map_or(Duration::ZERO, |seconds| {
            Duration::from_secs(seconds.max(0).unsigned_abs().into())
        });
    if unchanged_for >= duration {
        Decision::Acquire {
            previous: Some(holder.to_owned()),
        }
    } else {
        Decision::Wait {
            holder: holder.to_owned(),
            remaining: duration - unchanged_for,
        }
    }
}

/// The spec `identity` writes to hold the Lease at `now`: a renewal keeps the acquire time and the
/// transition count, a change of holder restarts the one and bumps the other.
pub fn claimed(
    current: Option<&LeaseSpec>,
    identity: &str,
    lease_duration_seconds: i32,
    now: Timestamp,
) -> LeaseSpec {
    let previous = current.cloned().unwrap_or_default();
    let renewal = previous.holder_identity.as_deref() == Some(identity);
    let (acquire_time, lease_transitions) = match current {
        None => (MicroTime(now), 0),
        Some(_) if renewal => (
            previous.acquire_time.clone().unwrap_or(MicroTime(now)),
            previous.lease_transitions.unwrap_or(0),
        ),
        Some(_) => (
            MicroTime(now),
            previous.lease_transitions.unwrap_or(0).saturating_add(1),
        ),
    };
    LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(lease_duration_seconds),
        acquire_time: Some(acquire_time),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(lease_transitions),
        ..previous
    }
}

/// The spec a leader leaves behind on a graceful stop: no holder and a one-second duration, so that a
/// waiting candidate takes over at its next attempt instead of waiting for expiry.
pub fn released(current: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        ..current.clone()
    }
}

/// `<hostname>_<random hex>`: the hostname says which pod leads, the suffix keeps two processes on one
/// host apart.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|host| host.trim().to_owned())
        .filter(|host| !host.is_empty())
        .unwrap_or_else(|| "unknown-host".into());
    let rng = ring::rand::SystemRandom::new();
    let suffix: [u8; 8] = match ring::rand::generate(&rng) {
        Ok(random) => random.expose(),
        // No system randomness: pid and start time are still unique enough between replicas.
        Err(_) => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos() as u64;
            (nanos ^ (u64::from(std::process::id()) << 32)).to_be_bytes()
        }
    };
    let suffix: String = suffix.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{host}_{suffix}")
}

/// The namespace this pod runs in, from the service account mount; `None` outside a cluster.
pub fn pod_namespace() -> Option<String> {
    std::fs::read_to_string(POD_NAMESPACE_FILE)
        .ok()
        .map(|namespace| namespace.trim().to_owned())
        .filter(|namespace| !namespace.is_empty())
}

/// What one attempt to acquire or renew came to.
enum Round {
    /// This candidate holds the Lease now.
    Holding,
    /// Someone else holds it (or, seen by a leader, took it and let it go).
    Held { holder: String, remaining: Duration },
    /// Another writer changed the Lease between our read and our write.
    Conflict,
}

/// A candidate for one Lease.
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    namespace: String,
    identity: String,
    timing: Timing,
    /// The `resourceVersion` last seen (none while the Lease is absent) and when it was first seen.
    observed: Option<(Option<String>, Instant)>,
}

impl LeaderElector {
    /// A candidate `identity` for the Lease `namespace/lease`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        lease: &str,
        identity: String,
        timing: Timing,
    ) -> Result<Self, Error> {
        Ok(Self {
            api: Api::namespaced(client, namespace),
            name: lease.to_owned(),
            namespace: namespace.to_owned(),
            identity,
            timing: timing.check()?,
            observed: None,
        })
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// `namespace/name` of the Lease, for messages.
    pub fn lease(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Waits until this candidate holds the Lease, retrying every retry period; API errors are
    /// logged and retried. Then keeps it renewed in the background until the [`Leader`] steps down,
    /// loses it, or is dropped. Dropping this future stops the attempt.
    pub async fn acquire(mut self) -> Leader {
        tracing::info!(lease = %self.lease(), identity = %self.identity, "waiting to become leader");
        let mut last_note = String::new();
        loop {
            let round = tokio::time::timeout(self.timing.renew_deadline, self.round(false)).await;
            let note = match round {
                Ok(Ok(Round::Holding)) => break,
                Ok(Ok(Round::Held { holder, remaining })) => {
                    if last_note != holder {
                        tracing::info!(lease = %self.lease(), %holder, expires_in = ?remaining,
                            "another replica leads; waiting until it releases the Lease or stops renewing it");
                    }
                    holder
                }
                Ok(Ok(Round::Conflict)) => {
                    tracing::debug!(lease = %self.lease(), "another candidate wrote the Lease first");
                    last_note
                }
                Ok(Err(error)) => {
                    let error = error.to_string();
                    if last_note != error {
                        tracing::warn!(lease = %self.lease(), %error, "cannot read or write the Lease; retrying");
                    }
                    error
                }
                Err(_) => {
                    tracing::warn!(lease = %self.lease(), timeout = ?self.timing.renew_deadline,
                        "no answer from the API server about the Lease; retrying");
                    String::new()
                }
            };
            last_note = note;
            tokio::time::sleep(self.timing.retry_period).await;
        }
        tracing::info!(lease = %self.lease(), identity = %self.identity, "became leader");
        Leader::start(self)
    }

    /// Reads the Lease, decides, and writes it if this candidate may hold it. A `leading` candidate
    /// never takes the Lease back from another holder: having lost it once, it must stop.
    async fn round(&mut self, leading: bool) -> Result<Round, kube::Error> {
        let current = self.api.get_opt(&self.name).await?;
        let unchanged_for = self.observe(current.as_ref());
        let spec = current.as_ref().and_then(|lease| lease.spec.as_ref());
        match decide(spec, &self.identity, unchanged_for) {
            Decision::Wait { holder, remaining } => return Ok(Round::Held { holder, remaining }),
            Decision::Acquire { .. } if leading && current.is_some() => {
                let holder = spec
                    .and_then(|spec| spec.holder_identity.clone())
                    .filter(|holder| !holder.is_empty())
                    .unwrap_or_else(|| "nobody".into());
                return Ok(Round::Held {
                    holder,
                    remaining: Duration::ZERO,
                });
            }
            Decision::Renew | Decision::Acquire { .. } => {}
        }
        let spec = claimed(
            spec,
            &self.identity,
            self.timing.lease_duration_seconds(),
            Timestamp::now(),
        );
        let written = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        namespace: Some(self.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            // The resourceVersion read above travels along: a concurrent write makes this a conflict.
            Some(mut lease) => {
                lease.spec = Some(spec);
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(lease) => {
                self.observe(Some(&lease));
                Ok(Round::Holding)
            }
            Err(kube::Error::Api(status)) if status.is_conflict() || status.is_already_exists() => {
                Ok(Round::Conflict)
            }
            Err(error) => Err(error),
        }
    }

    /// Notes the Lease's version and returns how long it has been unchanged.
    fn observe(&mut self, lease: Option<&Lease>) -> Duration {
        let version = lease.and_then(|lease| lease.metadata.resource_version.clone());
        match &self.observed {
            Some((seen, since)) if *seen == version => since.elapsed(),
            _ => {
                self.observed = Some((version, Instant::now()));
                Duration::ZERO
            }
        }
    }

    /// Hands the Lease over if this candidate still holds it.
    async fn release(&mut self) {
        let lease = self.lease();
        let attempt = async {
            let Some(mut current) = self.api.get_opt(&self.name).await? else {
                return Ok(false);
            };
            let Some(spec) = current.spec.as_ref() else {
                return Ok(false);
            };
            if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                return Ok(false);
            }
            current.spec = Some(released(spec, Timestamp::now()));
            self.api
                .replace(&self.name, &PostParams::default(), &current)
                .await
                .map(|_| true)
        };
        match tokio::time::timeout(RELEASE_TIMEOUT, attempt).await {
            Ok(Ok(true)) => tracing::info!(%lease, "released the Lease"),
            Ok(Ok(false)) => tracing::info!(%lease, "the Lease was no longer ours to release"),
            Ok(Err(error)) => tracing::warn!(%lease, %error,
                "cannot release the Lease; the next leader takes over when it expires"),
            Err(_) => tracing::warn!(%lease, timeout = ?RELEASE_TIMEOUT,
                "cannot release the Lease in time; the next leader takes over when it expires"),
        }
    }
}

/// Holds a Lease: a background task renews it every retry period.
pub struct Leader {
    lease: String,
    identity: String,
    lost: watch::Receiver<Option<Lost>>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Leader {
    fn start(elector: LeaderElector) -> Self {
        let (lost_tx, lost) = watch::channel(None);
        let (stop, stop_rx) = oneshot::channel();
        Self {
            lease: elector.lease(),
            identity: elector.identity.clone(),
            lost,
            stop: Some(stop),
            task: tokio::spawn(keep_renewed(elector, lost_tx, stop_rx)),
        }
    }

    /// `namespace/name` of the Lease.
    pub fn lease(&self) -> &str {
        &self.lease
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Resolves when the Lease is lost; pending as long as it is held.
    pub async fn lost(&mut self) -> Lost {
        match self.lost.wait_for(Option::is_some).await {
            Ok(lost) => lost.clone().expect("waited for Some"),
            // The renewer ended without a loss: it stepped down, nothing more to report.
            Err(_) => std::future::pending().await,
        }
    }

    /// Stops renewing and releases the Lease, so that a waiting candidate takes over at its next
    /// attempt rather than after the lease duration.
    pub async fn step_down(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for Leader {
    /// Without `step_down` the Lease is left to expire, as if the process had died.
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Renews every retry period until told to stop (then releases the Lease) or until the Lease is lost
/// (then reports why and leaves the Lease alone).
async fn keep_renewed(
    mut elector: LeaderElector,
    lost: watch::Sender<Option<Lost>>,
    mut stop: oneshot::Receiver<()>,
) {
    match renew_until_lost(&mut elector, &mut stop).await {
        Some(reason) => {
            let _ = lost.send(Some(reason));
        }
        None => elector.release().await,
    }
}

/// `None` when told to stop while still leading.
async fn renew_until_lost(
    elector: &mut LeaderElector,
    stop: &mut oneshot::Receiver<()>,
) -> Option<Lost> {
    let timing = elector.timing;
    let mut renewed_at = Instant::now();
    let mut last_error = String::new();
    loop {
        tokio::select! {
            _ = &mut *stop => return None,
            _ = tokio::time::sleep(timing.retry_period) => {}
        }
        let left = timing.renew_deadline.saturating_sub(renewed_at.elapsed());
        let round = if left.is_zero() {
            // Nothing ran for a whole renew deadline: the process was paused or starved.
            None
        } else {
            tokio::select! {
                _ = &mut *stop => return None,
                round = tokio::time::timeout(left, elector.round(true)) => Some(round),
            }
        };
        match round {
            Some(Ok(Ok(Round::Holding))) => {
                if !last_error.is_empty() {
                    tracing::info!(lease = %elector.lease(), "renewed the Lease again");
                    last_error.clear();
                }
                renewed_at = Instant::now();
            }
            Some(Ok(Ok(Round::Held { holder, .. }))) => {
                return Some(Lost::TakenOver {
                    lease: elector.lease(),
                    holder,
                });
            }
            Some(Ok(Ok(Round::Conflict))) => {
                last_error = "another writer changed the Lease between read and write".into();
            }
            Some(Ok(Err(error))) => {
                last_error = error.to_string();
                tracing::warn!(lease = %elector.lease(), error = %last_error, "cannot renew the Lease; retrying");
            }
            Some(Err(_)) => last_error = "no answer from the API server".into(),
            None if last_error.is_empty() => {
                last_error =
                    "no attempt to renew could run in time (was the process paused?)".into();
            }
            None => {}
        }
        if renewed_at.elapsed() >= timing.renew_deadline {
            return Some(Lost::NotRenewed {
                lease: elector.lease(),
                deadline: timing.renew_deadline,
                last_error,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: &str = "manager-0_aa";
    const OTHER: &str = "manager-1_bb";

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    fn held_by(holder: &str, duration_seconds: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(duration_seconds),
            acquire_time: Some(MicroTime(at(0))),
            renew_time: Some(MicroTime(at(10))),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    fn secs(seconds: u64) -> Duration {
        Duration::from_secs(seconds)
    }

    #[test]
    fn an_absent_lease_is_free() {
        assert_eq!(
            decide(None, ME, Duration::ZERO),
            Decision::Acquire { previous: None }
        );
    }

    #[test]
    fn a_released_lease_is_free_at_once() {
        let lease = released(&held_by(OTHER, 15), at(20));
        assert_eq!(
            decide(Some(&lease), ME, Duration::ZERO),
            Decision::Acquire { previous: None }
        );
        let empty = LeaseSpec {
            holder_identity: Some(String::new()),
            ..held_by(OTHER, 15)
        };
        assert_eq!(
            decide(Some(&empty), ME, Duration::ZERO),
            Decision::Acquire { previous: None }
        );
    }

    #[test]
    fn another_holder_is_waited_for_until_its_lease_expires() {
        let lease = held_by(OTHER, 15);
        assert_eq!(
            decide(Some(&lease), ME, secs(4)),
            Decision::Wait {
                holder: OTHER.into(),
                remaining: secs(11),
            }
        );
        assert_eq!(
            decide(Some(&lease), ME, secs(15)),
            Decision::Acquire {
                previous: Some(OTHER.into())
            }
        );
    }

    #[test]
    fn a_lease_without_duration_has_expired() {
        let lease = LeaseSpec {
            lease_duration_seconds: None,
            ..held_by(OTHER, 15)
        };
        assert_eq!(
            decide(Some(&lease), ME, Duration::ZERO),
            Decision::Acquire {
                previous: Some(OTHER.into())
            }
        );
    }

    #[test]
    fn our_own_lease_is_renewed_even_when_overdue() {
        let lease = held_by(ME, 15);
        assert_eq!(decide(Some(&lease), ME, Duration::ZERO), Decision::Renew);
        assert_eq!(decide(Some(&lease), ME, secs(60)), Decision::Renew);
    }

    #[test]
    fn a_new_lease_starts_with_no_transitions() {
        let spec = claimed(None, ME, 15, at(5));
        assert_eq!(spec.holder_identity.as_deref(), Some(ME));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(5))));
        assert_eq!(spec.renew_time, Some(MicroTime(at(5))));
        assert_eq!(spec.lease_transitions, Some(0));
    }

    #[test]
    fn a_renewal_keeps_acquire_time_and_transitions() {
        let spec = claimed(Some(&held_by(ME, 15)), ME, 15, at(30));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(0))));
        assert_eq!(spec.renew_time, Some(MicroTime(at(30))));
        assert_eq!(spec.lease_transitions, Some(3));
    }

    #[test]
    fn a_takeover_counts_a_transition() {
        let spec = claimed(Some(&held_by(OTHER, 15)), ME, 15, at(30));
        assert_eq!(spec.holder_identity.as_deref(), Some(ME));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(30))));
        assert_eq!(spec.lease_transitions, Some(4));

        let after_release = claimed(Some(&released(&held_by(OTHER, 15), at(20))), ME, 15, at(21));
        assert_eq!(after_release.lease_transitions, Some(4));
    }

    #[test]
    fn releasing_keeps_fields_we_do_not_own() {
        let lease = LeaseSpec {
            preferred_holder: Some(OTHER.into()),
            ..held_by(ME, 15)
        };
        let spec = released(&lease, at(40));
        assert_eq!(spec.holder_identity, None);
        assert_eq!(spec.lease_duration_seconds, Some(1));
        assert_eq!(spec.lease_transitions, Some(3));
        assert_eq!(spec.preferred_holder.as_deref(), Some(OTHER));
    }

    #[test]
    fn identities_differ_between_calls_and_name_the_host() {
        let (a, b) = (default_identity(), default_identity());
        assert_ne!(a, b);
        let (host, suffix) = a.rsplit_once('_').unwrap();
        assert!(!host.is_empty());
        assert_eq!(suffix.len(), 16);
    }

    #[test]
    fn timings_that_let_a_leader_outlive_its_lease_are_refused() {
        assert!(Timing::default().check().is_ok());
        let too_late = Timing {
            renew_deadline: secs(15),
            ..Timing::default()
        };
        assert!(too_late.check().is_err());
        let busy = Timing {
            retry_period: Duration::ZERO,
            ..Timing::default()
        };
        assert!(busy.check().is_err());
        let fractional = Timing {
            lease_duration: Duration::from_millis(1500),
            renew_deadline: secs(1),
            retry_period: Duration::from_millis(100),
        };
        assert!(fractional.check().is_err());
    }
}
