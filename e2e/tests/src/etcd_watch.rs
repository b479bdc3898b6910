//! Samples the workload cluster's etcd membership while a scenario runs: which members are voters or
//! learners, how many voters answer, whether a linearizable read goes through. Every look is kept, with
//! its time: one in which no member answered, one that found no quorum. A look that finds no quorum is
//! taken again at once with longer timeouts; what that finds is kept beside the sample to explain it
//! (a slow moment or a loss), never in its place. [`EtcdWatch::check`] is what every scenario asks:
//! quorum in every sample, at most one learner, and no blind time over [`BLIND_BOUND`].

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use futures::future::{join_all, select_ok};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use sim::SimView;
use testenv::pki::{Ca, Usage};

/// One look at the membership.
#[derive(Clone, Debug)]
pub struct Sample {
    /// When the look began, from the start of the watch.
    pub at: Duration,
    /// When the look was complete.
    pub taken: Instant,
    /// Whether some member answered the member list. When none did, the other fields are empty and
    /// `silent_voters` holds what each client URL said.
    pub answered: bool,
    /// Member names (empty for a member that never started) with whether each is a learner.
    pub members: Vec<(String, bool)>,
    /// Voters whose client URL answered a status request within [`QUICK`].
    pub healthy_voters: usize,
    /// Voters that did not answer, with what went wrong (or, with no answer at all, each URL asked).
    pub silent_voters: Vec<(String, String)>,
    /// A linearizable read through a member that listed the membership went through within [`QUICK`]:
    /// raft had a quorum.
    pub quorum_read: bool,
    /// The voter that answered saying it leads.
    pub leader: Option<String>,
    /// The server version each voter that answered runs (`3.7.3`), by member name.
    pub versions: Vec<(String, String)>,
    /// When this look found no quorum: what a look taken at once after it with [`PATIENT`] timeouts found.
    pub recheck: Option<Recheck>,
}

/// A second look after one without quorum: it explains the sample (quorum back within seconds: a slow
/// moment or a short loss; still none: a loss), it does not change it.
#[derive(Clone, Debug)]
pub struct Recheck {
    /// How long after the first look began the second one was complete.
    pub after: Duration,
    pub answered: bool,
    pub healthy_voters: usize,
    pub quorum_read: bool,
    pub silent_voters: Vec<(String, String)>,
}

impl Sample {
    pub fn voters(&self) -> usize {
        self.members.iter().filter(|(_, learner)| !learner).count()
    }

    pub fn learners(&self) -> usize {
        self.members.iter().filter(|(_, learner)| *learner).count()
    }

    /// A member answered, and a majority of the voters answered or a linearizable read went through,
    /// within [`QUICK`]. The read is what quorum means to raft; answering a status request is more: a
    /// just-promoted member takes part in raft a moment before it serves clients.
    pub fn has_quorum(&self) -> bool {
        self.answered && has_quorum(self.voters(), self.healthy_voters, self.quorum_read)
    }

    /// The sample in one line, for a failure message.
    pub fn describe(&self) -> String {
        let what = if !self.answered {
            "no member answered".to_owned()
        } else if self.has_quorum() {
            format!(
                "quorum ({} of {} voters answered)",
                self.healthy_voters,
                self.voters()
            )
        } else {
            format!(
                "no quorum: {} of {} voters answered, the linearizable read did not go through",
                self.healthy_voters,
                self.voters()
            )
        };
        let recheck = self.recheck.as_ref().map_or_else(String::new, |r| {
            format!(
                "; looked again: {} {:.1?} after ({} voters answered, read {})",
                if r.answered && has_quorum(self.voters(), r.healthy_voters, r.quorum_read) {
                    "quorum"
                } else {
                    "still no quorum"
                },
                r.after,
                r.healthy_voters,
                if r.quorum_read {
                    "through"
                } else {
                    "not through"
                }
            )
        });
        format!(
            "at {:.1?}: {what}; members {:?}; silent {:?}{recheck}",
            self.at, self.members, self.silent_voters
        )
    }
}

fn has_quorum(voters: usize, healthy_voters: usize, quorum_read: bool) -> bool {
    quorum_read || healthy_voters * 2 > voters
}

/// The longest time without a sample showing quorum that a scenario accepts: more means the watch was
/// blind (etcd or the watch starved) for longer than a quorum loss we must be able to see.
pub const BLIND_BOUND: Duration = Duration::from_secs(5);

/// The samples of a watch, summed up.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    pub samples: usize,
    /// Samples in which no member answered (after the first that did).
    pub unanswered: usize,
    /// Samples without quorum (unanswered ones included).
    pub without_quorum: usize,
    /// Samples that were looked at again (each of them is without quorum).
    pub rechecked: usize,
    pub most_learners: usize,
    /// The longest time between two samples showing quorum, from the first that did to the last sample.
    pub longest_blind: Duration,
}

/// Sums up `samples`; the samples before the first one a member answered (etcd not started yet) are
/// left out.
pub fn summarize(samples: &[Sample]) -> Summary {
    let Some(first) = samples.iter().position(|s| s.answered) else {
        return Summary::default();
    };
    let samples = &samples[first..];
    let mut summary = Summary {
        samples: samples.len(),
        ..Summary::default()
    };
    let mut last_quorum: Option<Instant> = None;
    for s in samples {
        summary.unanswered += usize::from(!s.answered);
        summary.without_quorum += usize::from(!s.has_quorum());
        summary.rechecked += usize::from(s.recheck.is_some());
        summary.most_learners = summary.most_learners.max(s.learners());
        if let Some(seen) = last_quorum {
            summary.longest_blind = summary.longest_blind.max(s.taken - seen);
        }
        if s.has_quorum() || last_quorum.is_none() {
            last_quorum = Some(s.taken);
        }
    }
    summary
}

/// Whether `samples` show a safe membership: quorum in every sample, at most one learner, no blind time
/// over [`BLIND_BOUND`]. The error names every sample that broke a rule.
pub fn check(samples: &[Sample]) -> Result<Summary, String> {
    let summary = summarize(samples);
    if summary.samples == 0 {
        return Err("etcd was never sampled with an answer".into());
    }
    let first = samples.iter().position(|s| s.answered).unwrap_or(0);
    let mut broken: Vec<String> = samples[first..]
        .iter()
        .filter(|s| !s.has_quorum() || s.learners() > 1)
        .map(|s| {
            if s.learners() > 1 {
                format!("more than one learner {}", s.describe())
            } else {
                s.describe()
            }
        })
        .collect();
    if summary.longest_blind > BLIND_BOUND {
        broken.push(format!(
            "{:.1?} without a sample showing quorum (bound {BLIND_BOUND:?})",
            summary.longest_blind
        ));
    }
    if broken.is_empty() {
        Ok(summary)
    } else {
        Err(format!(
            "{} of {} samples broke a rule:\n  {}",
            broken.len(),
            summary.samples,
            broken.join("\n  ")
        ))
    }
}

/// A member's way in, as the watch saw it (each from the start of the watch).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberTimeline {
    /// First seen as a learner without a name: added, its etcd not started yet.
    pub added: Option<Duration>,
    /// First seen under its name as a learner: its etcd runs and catches up.
    pub started: Option<Duration>,
    /// First seen as a voter.
    pub promoted: Option<Duration>,
}

/// When the member `name` was added, started and promoted. An unnamed learner is `name`'s when it is the
/// one in the samples right before `name` first shows (there is at most one learner at a time).
pub fn member_timeline(samples: &[Sample], name: &str) -> MemberTimeline {
    let answered: Vec<&Sample> = samples.iter().filter(|s| s.answered).collect();
    let role = |s: &Sample| s.members.iter().find(|(n, _)| n == name).map(|m| m.1);
    let Some(first) = answered.iter().position(|s| role(s).is_some()) else {
        return MemberTimeline::default();
    };
    let unnamed_learner = |s: &Sample| {
        s.members
            .iter()
            .any(|(n, learner)| n.is_empty() && *learner)
    };
    let added = answered[..first]
        .iter()
        .rev()
        .take_while(|s| unnamed_learner(s))
        .last()
        .map(|s| s.at);
    let started = (role(answered[first]) == Some(true)).then(|| answered[first].at);
    let promoted = answered[first..]
        .iter()
        .find(|s| role(s) == Some(false))
        .map(|s| s.at);
    MemberTimeline {
        added,
        started,
        promoted,
    }
}

/// Where the watch finds etcd: the client URLs of the members as the machines run them.
type Urls = Box<dyn Fn() -> Vec<String> + Send + Sync>;

pub struct EtcdWatch {
    samples: Arc<Mutex<Vec<Sample>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for EtcdWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl EtcdWatch {
    /// Starts sampling every `period` the members the simulator runs for `cluster`, once the
    /// control-plane provider has created `<cluster>-etcd`.
    pub fn start(
        management: kube::Client,
        namespace: &str,
        cluster: &str,
        sim: SimView,
        period: Duration,
    ) -> Self {
        let (namespace, cluster) = (namespace.to_owned(), cluster.to_owned());
        let nodes_namespace = namespace.clone();
        let urls: Urls = Box::new(move || {
            sim.nodes()
                .into_iter()
                .filter(|n| n.namespace == nodes_namespace)
                .filter_map(|n| n.etcd_client_url)
                .collect()
        });
        Self::spawn(
            async move {
                loop {
                    if let Some(a) = access(&management, &namespace, &cluster).await {
                        break a;
                    }
                    tokio::time::sleep(period).await;
                }
            },
            urls,
            period,
        )
    }

    /// Starts sampling every `period` the members at `urls`, as a client of the etcd CA `ca` (PEM
    /// certificate and key).
    pub fn over(
        ca: (&str, &str),
        urls: impl Fn() -> Vec<String> + Send + Sync + 'static,
        period: Duration,
    ) -> Self {
        let access = Access::issued(ca.0, ca.1).expect("a client certificate from the etcd CA");
        Self::spawn(async move { access }, Box::new(urls), period)
    }

    fn spawn(
        access: impl Future<Output = Access> + Send + 'static,
        urls: Urls,
        period: Duration,
    ) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let record = samples.clone();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let access = access.await;
            loop {
                let sample = look_and_explain(&access, &urls(), started).await;
                record
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(sample);
                tokio::time::sleep(period).await;
            }
        });
        Self { samples, task }
    }

    /// Every sample taken so far, in order.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The longest time without a sample showing quorum (see [`Summary::longest_blind`]).
    pub fn longest_blind(&self) -> Duration {
        summarize(&self.samples()).longest_blind
    }

    /// See [`check`].
    pub fn check(&self) -> Result<Summary, String> {
        check(&self.samples())
    }

    /// Panics, naming `what` and each sample that broke a rule, unless [`check`] holds; returns the
    /// number of samples.
    pub fn assert_safe(&self, what: &str) -> usize {
        match self.check() {
            Ok(summary) => summary.samples,
            Err(broken) => panic!("{what}: etcd membership: {broken}"),
        }
    }

    /// The latest sample in which a member answered, if any.
    pub fn last(&self) -> Option<Sample> {
        self.samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .rev()
            .find(|s| s.answered)
            .cloned()
    }

    /// Waits until a sample shows exactly `names` as voters and no learner.
    pub async fn wait_voters(&self, mut names: Vec<String>, timeout: Duration, what: &str) {
        names.sort();
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(last) = self.last() {
                let mut voters: Vec<String> = last
                    .members
                    .iter()
                    .filter(|(_, learner)| !learner)
                    .map(|(n, _)| n.clone())
                    .collect();
                voters.sort();
                if voters == names && last.learners() == 0 {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "{what}: etcd members {:?}, expected voters {names:?}",
                    last.members
                );
            } else {
                assert!(Instant::now() < deadline, "{what}: etcd never answered");
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

struct Access {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

impl Access {
    fn issued(ca_pem: &str, ca_key_pem: &str) -> Option<Self> {
        let ca = Ca::from_pem(ca_pem, ca_key_pem).ok()?;
        let client = ca
            .issue("e2e-etcd-observer", None, &[], Usage::Client)
            .ok()?;
        Some(Self {
            ca_pem: ca_pem.to_owned(),
            cert_pem: client.cert_pem,
            key_pem: client.key_pem,
        })
    }

    /// A client of `url` whose calls give up after `patience`.
    async fn connect(&self, url: &str, patience: Duration) -> Result<Client, String> {
        let options = ConnectOptions::new()
            .with_connect_timeout(patience)
            .with_timeout(patience)
            .with_tls(
                TlsOptions::new()
                    .ca_certificate(Certificate::from_pem(&self.ca_pem))
                    .identity(Identity::from_pem(&self.cert_pem, &self.key_pem))
                    .domain_name("localhost"),
            );
        match tokio::time::timeout(patience, Client::connect([url], Some(options))).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(format!("{url}: {e}")),
            Err(_) => Err(format!("{url}: no connection within {patience:?}")),
        }
    }
}

async fn access(management: &kube::Client, namespace: &str, cluster: &str) -> Option<Access> {
    let secret = Api::<Secret>::namespaced(management.clone(), namespace)
        .get_opt(&format!("{cluster}-etcd"))
        .await
        .ok()??;
    let data = secret.data?;
    let text = |k: &str| {
        data.get(k)
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
    };
    Access::issued(&text("tls.crt")?, &text("tls.key")?)
}

/// How long a look's calls may take: the member list, each voter's status, the quorum read. A member
/// that does not answer within it is silent for that sample; a quorum that takes longer is not there.
pub const QUICK: Duration = Duration::from_secs(1);
/// How long they may take when a look found no quorum and is taken again to explain it: a machine
/// starved of CPU for a moment answers within it, a member that is gone or cut off does not.
pub const PATIENT: Duration = Duration::from_secs(5);

/// One look with [`QUICK`] timeouts, and when it finds no quorum a second with [`PATIENT`] ones.
async fn look_and_explain(access: &Access, urls: &[String], started: Instant) -> Sample {
    let began = Instant::now();
    let mut sample = look(access, urls, QUICK).await;
    sample.at = began - started;
    if !sample.has_quorum() {
        let again = look(access, urls, PATIENT).await;
        sample.recheck = Some(Recheck {
            after: began.elapsed(),
            answered: again.answered,
            healthy_voters: again.healthy_voters,
            quorum_read: again.quorum_read,
            silent_voters: again.silent_voters,
        });
    }
    sample
}

/// Lists the membership through whichever member answers first, then asks every voter for its status
/// and reads linearizably, all at once, each giving up after `patience`: a member that hangs costs the
/// look `patience`, not the others' time as well.
async fn look(access: &Access, urls: &[String], patience: Duration) -> Sample {
    let mut sample = Sample {
        at: Duration::ZERO,
        taken: Instant::now(),
        answered: false,
        members: Vec::new(),
        healthy_voters: 0,
        silent_voters: Vec::new(),
        quorum_read: false,
        leader: None,
        versions: Vec::new(),
        recheck: None,
    };
    if urls.is_empty() {
        sample.silent_voters = vec![(String::new(), "no member runs yet".into())];
        sample.taken = Instant::now();
        return sample;
    }
    let listing = urls.iter().map(|url| {
        Box::pin(async move {
            let mut client = access.connect(url, patience).await?;
            match tokio::time::timeout(patience, client.member_list()).await {
                Ok(Ok(list)) => Ok((client, list)),
                Ok(Err(e)) => Err(format!("{url}: member list: {e}")),
                Err(_) => Err(format!("{url}: member list timed out")),
            }
        })
    });
    let (mut through, list) = match select_ok(listing).await {
        Ok(((client, list), _)) => (client, list),
        Err(last) => {
            sample.silent_voters = vec![(
                String::new(),
                format!("no member answered; the last to fail: {last}"),
            )];
            sample.taken = Instant::now();
            return sample;
        }
    };
    sample.answered = true;
    let read = async {
        matches!(
            tokio::time::timeout(patience, through.get("e2e-quorum", None)).await,
            Ok(Ok(_))
        )
    };
    let voters: Vec<_> = list.members().iter().filter(|m| !m.is_learner()).collect();
    let statuses = join_all(voters.iter().map(|m| async move {
        let Some(url) = m.client_urls().first() else {
            return Err("no client URL published".to_owned());
        };
        let mut client = access.connect(url, patience).await?;
        match tokio::time::timeout(patience, client.status()).await {
            Ok(Ok(s)) => Ok((
                s.header().is_some_and(|h| h.member_id() == s.leader()),
                s.version().to_owned(),
            )),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("status timed out".to_owned()),
        }
    }));
    let (quorum_read, statuses) = tokio::join!(read, statuses);
    sample.quorum_read = quorum_read;
    for (m, answer) in voters.iter().zip(statuses) {
        match answer {
            Ok((leads, version)) => {
                sample.healthy_voters += 1;
                if leads {
                    sample.leader = Some(m.name().to_owned());
                }
                sample.versions.push((m.name().to_owned(), version));
            }
            Err(why) => sample.silent_voters.push((m.name().to_owned(), why)),
        }
    }
    sample.members = list
        .members()
        .iter()
        .map(|m| (m.name().to_owned(), m.is_learner()))
        .collect();
    sample.members.sort();
    sample.taken = Instant::now();
    sample
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_ms: u64, taken: Instant, answered: bool, healthy: usize) -> Sample {
        Sample {
            at: Duration::from_millis(at_ms),
            taken: taken + Duration::from_millis(at_ms),
            answered,
            members: if answered {
                vec![
                    ("a".into(), false),
                    ("b".into(), false),
                    ("c".into(), false),
                ]
            } else {
                Vec::new()
            },
            healthy_voters: healthy,
            silent_voters: Vec::new(),
            quorum_read: false,
            leader: None,
            versions: Vec::new(),
            recheck: None,
        }
    }

    #[test]
    fn a_member_is_added_unnamed_started_under_its_name_then_promoted() {
        let t = Instant::now();
        let with = |at_ms: u64, answered: bool, members: &[(&str, bool)]| Sample {
            members: members.iter().map(|(n, l)| ((*n).to_owned(), *l)).collect(),
            ..sample(at_ms, t, answered, 1)
        };
        let samples = vec![
            with(0, true, &[("a", false)]),
            // An earlier learner's: promoted before d's was added.
            with(100, true, &[("a", false), ("", true)]),
            with(200, true, &[("a", false), ("b", false)]),
            with(300, true, &[("a", false), ("b", false), ("", true)]),
            with(400, false, &[]),
            with(500, true, &[("a", false), ("b", false), ("", true)]),
            with(600, true, &[("a", false), ("b", false), ("d", true)]),
            with(700, true, &[("a", false), ("b", false), ("d", false)]),
        ];
        assert_eq!(
            member_timeline(&samples, "d"),
            MemberTimeline {
                added: Some(Duration::from_millis(300)),
                started: Some(Duration::from_millis(600)),
                promoted: Some(Duration::from_millis(700)),
            }
        );
        // b was never seen as a learner: only its promotion is known.
        assert_eq!(
            member_timeline(&samples, "b"),
            MemberTimeline {
                added: Some(Duration::from_millis(100)),
                started: None,
                promoted: Some(Duration::from_millis(200)),
            }
        );
        assert_eq!(member_timeline(&samples, "z"), MemberTimeline::default());
    }

    #[test]
    fn samples_before_etcd_answered_are_left_out_and_later_silence_counts() {
        let t = Instant::now();
        let samples = vec![
            sample(0, t, false, 0),
            sample(250, t, true, 3),
            sample(500, t, false, 0),
            sample(750, t, true, 3),
        ];
        let summary = check(&samples).unwrap_err();
        assert!(
            summary.contains("at 500.0ms: no member answered"),
            "{summary}"
        );
        let s = summarize(&samples);
        assert_eq!((s.samples, s.unanswered, s.without_quorum), (3, 1, 1));
        assert_eq!(s.longest_blind, Duration::from_millis(500));
    }

    #[test]
    fn a_sample_without_quorum_fails_even_when_the_second_look_found_one() {
        let t = Instant::now();
        let mut lost = sample(250, t, true, 1);
        lost.recheck = Some(Recheck {
            after: Duration::from_millis(1800),
            answered: true,
            healthy_voters: 3,
            quorum_read: true,
            silent_voters: Vec::new(),
        });
        let samples = vec![sample(0, t, true, 3), lost, sample(2300, t, true, 3)];
        let broken = check(&samples).unwrap_err();
        assert!(broken.contains("1 of 3 voters answered"), "{broken}");
        assert!(
            broken.contains("looked again: quorum 1.8s after"),
            "{broken}"
        );
        assert_eq!(summarize(&samples).rechecked, 1);
    }

    #[test]
    fn blind_time_over_the_bound_fails_and_a_majority_is_quorum() {
        let t = Instant::now();
        let samples = vec![sample(0, t, true, 2), sample(6000, t, true, 2)];
        let broken = check(&samples).unwrap_err();
        assert!(
            broken.contains("without a sample showing quorum"),
            "{broken}"
        );
        let samples = vec![sample(0, t, true, 2), sample(4000, t, true, 2)];
        assert_eq!(
            check(&samples).unwrap().longest_blind,
            Duration::from_secs(4)
        );
    }

    fn signal(pids: &[u32], which: &str) {
        for pid in pids {
            let status = std::process::Command::new("kill")
                .args([which, &pid.to_string()])
                .status()
                .unwrap();
            assert!(status.success(), "kill {which} {pid}");
        }
    }

    /// Waits until `watch` has taken `more` samples beyond `from`, each bounded by 30 s in all.
    async fn samples_after(watch: &EtcdWatch, from: usize, more: usize) -> Vec<Sample> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let samples = watch.samples();
            if samples.len() >= from + more {
                return samples;
            }
            assert!(
                Instant::now() < deadline,
                "the watch took {} samples",
                samples.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The watch against real etcd: two of three members frozen for 2 s is a sample without quorum, all
    /// three frozen a sample in which no member answered; each is kept with its second look, and the
    /// check fails on it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_watch_catches_a_two_second_quorum_loss_and_a_silence() {
        let dir = tempfile::tempdir().unwrap();
        let mut etcd = testenv::EtcdCluster::start(
            dir.path(),
            testenv::EtcdOptions {
                members: 3,
                tls: true,
                ..testenv::EtcdOptions::default()
            },
        )
        .await
        .unwrap();
        let tls = etcd.tls().unwrap().clone();
        let urls = etcd.client_urls();
        let pids: Vec<u32> = etcd.members().iter().filter_map(|m| m.pid()).collect();
        assert_eq!(pids.len(), 3);
        let watch = EtcdWatch::over(
            (&tls.ca_pem, tls.ca_key_pem()),
            move || urls.clone(),
            Duration::from_millis(250),
        );
        let steady = samples_after(&watch, 0, 8).await;
        let first = steady
            .iter()
            .position(|s| s.answered)
            .expect("etcd answered");
        check(&steady[first..]).expect("a steady cluster has quorum in every sample");

        for (frozen, expect) in [(&pids[..2], "no quorum"), (&pids[..], "no member answered")] {
            let before = watch.samples().len();
            signal(frozen, "-STOP");
            tokio::time::sleep(Duration::from_secs(2)).await;
            signal(frozen, "-CONT");
            // Until the members answer again, with quorum.
            let deadline = Instant::now() + Duration::from_secs(30);
            while watch.samples()[before..]
                .last()
                .is_none_or(|s| !s.has_quorum())
            {
                assert!(Instant::now() < deadline, "quorum never came back");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let samples = watch.samples();
            let lost: Vec<&Sample> = samples[before..]
                .iter()
                .filter(|s| !s.has_quorum())
                .collect();
            assert!(
                !lost.is_empty(),
                "{expect}: the watch saw no sample without quorum"
            );
            assert!(
                lost.iter().any(|s| s.describe().contains(expect)),
                "{expect}: {:?}",
                lost.iter().map(|s| s.describe()).collect::<Vec<_>>()
            );
            assert!(
                lost.iter().all(|s| s.recheck.is_some()),
                "each was looked at again"
            );
            let broken = check(&samples[first..]).unwrap_err();
            assert!(broken.contains(expect), "{broken}");
            println!("{expect}: {broken}");
        }
        drop(watch);
        etcd.stop();
    }
}
