//! Samples the workload cluster's etcd membership while a scenario runs: which members are voters or
//! learners and how many voters answer. Members are asked one endpoint at a time, since learners refuse
//! the member list. A look that finds no quorum within a second is taken again with five: a member
//! starved of CPU or disk for a moment is slow, not gone.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use sim::SimView;
use testenv::pki::{Ca, Usage};

/// One look at the membership.
#[derive(Clone, Debug)]
pub struct Sample {
    pub at: Duration,
    /// When the sample was complete (its member list was read before).
    pub taken: Instant,
    /// Member names (empty for a member that never started) with whether each is a learner.
    pub members: Vec<(String, bool)>,
    /// Voters whose client URL answered a status request.
    pub healthy_voters: usize,
    /// Voters that did not answer, with what went wrong.
    pub silent_voters: Vec<(String, String)>,
    /// A linearizable read through the member that listed the membership succeeded: raft had a quorum.
    pub quorum_read: bool,
    /// The voter that answered saying it leads.
    pub leader: Option<String>,
    /// The quick look found no quorum and the sample was taken again with [`PATIENT`] timeouts.
    pub looked_again: bool,
}

impl Sample {
    pub fn voters(&self) -> usize {
        self.members.iter().filter(|(_, learner)| !learner).count()
    }

    pub fn learners(&self) -> usize {
        self.members.iter().filter(|(_, learner)| *learner).count()
    }

    /// A majority of the voters answers, or a linearizable read went through. The read is what quorum
    /// means to raft; answering a status request is more: a just-promoted member takes part in raft a
    /// moment before it serves clients (kubeadm promotes a learner once it has started and is in sync).
    pub fn has_quorum(&self) -> bool {
        has_quorum(&self.members, self.healthy_voters, self.quorum_read)
    }
}

fn has_quorum(members: &[(String, bool)], healthy_voters: usize, quorum_read: bool) -> bool {
    let voters = members.iter().filter(|(_, learner)| !learner).count();
    quorum_read || healthy_voters * 2 > voters
}

#[derive(Default)]
struct Record {
    samples: Vec<Sample>,
    /// Longest time during which no member answered the member list.
    longest_blind: Duration,
}

pub struct EtcdWatch {
    record: Arc<Mutex<Record>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for EtcdWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl EtcdWatch {
    /// Starts sampling every `period` once the control-plane provider has created `<cluster>-etcd`.
    pub fn start(
        management: kube::Client,
        namespace: &str,
        cluster: &str,
        sim: SimView,
        period: Duration,
    ) -> Self {
        let record = Arc::new(Mutex::new(Record::default()));
        let task = tokio::spawn(sample(
            management,
            namespace.to_owned(),
            cluster.to_owned(),
            sim,
            period,
            record.clone(),
        ));
        Self { record, task }
    }

    pub fn samples(&self) -> Vec<Sample> {
        self.record
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .samples
            .clone()
    }

    pub fn longest_blind(&self) -> Duration {
        self.record
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .longest_blind
    }

    /// The latest sample, if any.
    pub fn last(&self) -> Option<Sample> {
        self.record
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .samples
            .last()
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
    /// A client of `url`; each call gives up after its own, shorter timeout, [`PATIENT`] at most.
    async fn connect(&self, url: &str) -> Option<Client> {
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(1))
            .with_timeout(PATIENT)
            .with_tls(
                TlsOptions::new()
                    .ca_certificate(Certificate::from_pem(&self.ca_pem))
                    .identity(Identity::from_pem(&self.cert_pem, &self.key_pem))
                    .domain_name("localhost"),
            );
        Client::connect([url], Some(options)).await.ok()
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
    let (cert, key) = (text("tls.crt")?, text("tls.key")?);
    let ca = Ca::from_pem(&cert, &key).ok()?;
    let client = ca
        .issue("e2e-etcd-observer", None, &[], Usage::Client)
        .ok()?;
    Some(Access {
        ca_pem: cert,
        cert_pem: client.cert_pem,
        key_pem: client.key_pem,
    })
}

/// How long the member list may take, through any member.
const LIST: Duration = Duration::from_secs(2);
/// How long a voter's status and the quorum read may take at the first look.
const QUICK: Duration = Duration::from_secs(1);
/// How long they may take when the first look found no quorum: a machine starved of CPU or disk for a
/// moment answers slowly, which is not a lost quorum; a member that is gone or cut off does not answer.
pub const PATIENT: Duration = Duration::from_secs(5);

/// The voters' answers to one look at a listed membership.
struct Look {
    members: Vec<(String, bool)>,
    healthy_voters: usize,
    silent_voters: Vec<(String, String)>,
    quorum_read: bool,
    leader: Option<String>,
}

impl Look {
    /// Asks every voter of `list` for its status and reads linearizably through `through` (the client
    /// that listed it), each giving up after `patience`.
    async fn take(
        access: &Access,
        through: &mut Client,
        list: &etcd_client::MemberListResponse,
        patience: Duration,
    ) -> Self {
        let quorum_read = matches!(
            tokio::time::timeout(patience, through.get("e2e-quorum", None)).await,
            Ok(Ok(_))
        );
        let mut look = Self {
            members: Vec::new(),
            healthy_voters: 0,
            silent_voters: Vec::new(),
            quorum_read,
            leader: None,
        };
        for m in list.members() {
            look.members.push((m.name().to_owned(), m.is_learner()));
            if m.is_learner() {
                continue;
            }
            let Some(url) = m.client_urls().first() else {
                look.silent_voters
                    .push((m.name().to_owned(), "no client URL published".into()));
                continue;
            };
            let answer = match access.connect(url).await {
                Some(mut c) => tokio::time::timeout(patience, c.status())
                    .await
                    .map_err(|_| "status timed out".to_owned())
                    .and_then(|r| {
                        r.map(|s| s.header().is_some_and(|h| h.member_id() == s.leader()))
                            .map_err(|e| e.to_string())
                    }),
                None => Err(format!("{url} refused the connection")),
            };
            match answer {
                Ok(leads) => {
                    look.healthy_voters += 1;
                    if leads {
                        look.leader = Some(m.name().to_owned());
                    }
                }
                Err(why) => look.silent_voters.push((m.name().to_owned(), why)),
            }
        }
        look
    }

    fn has_quorum(&self) -> bool {
        has_quorum(&self.members, self.healthy_voters, self.quorum_read)
    }
}

async fn sample(
    management: kube::Client,
    namespace: String,
    cluster: String,
    sim: SimView,
    period: Duration,
    record: Arc<Mutex<Record>>,
) {
    let started = Instant::now();
    let access = loop {
        if let Some(a) = access(&management, &namespace, &cluster).await {
            break a;
        }
        tokio::time::sleep(period).await;
    };
    let mut last_seen: Option<Instant> = None;
    loop {
        let urls: Vec<String> = sim
            .nodes()
            .into_iter()
            .filter(|n| n.namespace == namespace)
            .filter_map(|n| n.etcd_client_url)
            .collect();
        let mut listed = None;
        for url in &urls {
            let Some(mut client) = access.connect(url).await else {
                continue;
            };
            if let Ok(Ok(list)) = tokio::time::timeout(LIST, client.member_list()).await {
                listed = Some((client, list));
                break;
            }
        }
        if let Some((mut through, list)) = listed {
            let mut look = Look::take(&access, &mut through, &list, QUICK).await;
            let looked_again = !look.has_quorum();
            if looked_again {
                look = Look::take(&access, &mut through, &list, PATIENT).await;
            }
            let Look {
                mut members,
                healthy_voters,
                silent_voters,
                quorum_read,
                leader,
            } = look;
            members.sort();
            let now = Instant::now();
            let mut r = record.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(seen) = last_seen {
                r.longest_blind = r.longest_blind.max(now - seen);
            }
            last_seen = Some(now);
            r.samples.push(Sample {
                at: started.elapsed(),
                taken: now,
                members,
                healthy_voters,
                silent_voters,
                quorum_read,
                leader,
                looked_again,
            });
        }
        tokio::time::sleep(period).await;
    }
}
