//! One observation of etcd per reconcile, in the planner's terms, and each machine's member health.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError};

use k8s_openapi::jiff::Timestamp;
use kubeadm_cluster::CertPem;

use kubeadm_api::controlplane::conditions::reasons;

use super::{ClusterKey, EtcdSessions};
use crate::controller::Error;
use crate::etcd::{AlarmKind, EtcdClientCert, Observation, WorkloadEtcd, issue_client_cert};
use crate::etcd_membership::{self, EtcdMachine, Member, MemberLabel, MemberState};
use crate::machines::{ControlPlaneMachine, Health};

/// Why etcd could not be observed at all this reconcile.
#[derive(Debug)]
pub(in crate::controller) struct Unobservable {
    pub message: String,
    /// Certificate refusals by client URL, so that each machine's member is named with its cause.
    pub refusals: BTreeMap<String, String>,
}

impl Unobservable {
    pub(in crate::controller) fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            refusals: BTreeMap::new(),
        }
    }

    /// The condition reason: a certificate problem needs a person; anything else may pass by itself.
    pub fn reason(&self) -> &'static str {
        if self.refusals.is_empty() {
            reasons::ETCD_NOT_OBSERVABLE
        } else {
            reasons::ETCD_CERTIFICATE_REFUSED
        }
    }

    /// The health of the etcd member served at `endpoints` (one machine's etcd pod).
    pub fn member_health(&self, node: &str, endpoints: &[String]) -> Health {
        match endpoints.iter().find_map(|e| self.refusals.get(e)) {
            Some(refusal) => Health::Unhealthy(format!("etcd member {node}: {refusal}")),
            None => Health::Unknown(format!("etcd not observable: {}", self.message)),
        }
    }
}

impl EtcdView {
    /// Client URL of the leader, where membership and leadership changes go.
    pub(in crate::controller) fn leader(&self) -> Result<String, Error> {
        self.observation
            .leader_endpoint()
            .map(str::to_owned)
            .ok_or_else(|| Error::Etcd("etcd has no reachable leader".into()))
    }

    /// Where the removal of member `id` goes, best first (see [`Observation::proposer_endpoints`]).
    pub(in crate::controller) fn proposers_without(&self, id: u64) -> Result<Vec<&str>, Error> {
        let endpoints = self.observation.proposer_endpoints(Some(id));
        if endpoints.is_empty() {
            return Err(Error::Etcd(
                "no etcd voter with a leader answered, other than the member to remove".into(),
            ));
        }
        Ok(endpoints)
    }

    /// How member `id` is named in messages (see [`MemberLabel`]).
    pub(in crate::controller) fn label(&self, id: u64) -> MemberLabel {
        self.members.iter().find(|m| m.id == id).map_or(
            MemberLabel {
                id,
                name: String::new(),
            },
            Member::label,
        )
    }

    /// A member's name, or its id in hex (as etcdctl prints it) while it has none.
    pub(in crate::controller) fn member_name(&self, id: u64) -> String {
        self.members
            .iter()
            .find(|m| m.id == id && !m.name.is_empty())
            .map_or_else(|| format!("{id:x}"), |m| m.name.clone())
    }
}

impl std::fmt::Display for Unobservable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<crate::etcd::EtcdError> for Unobservable {
    fn from(error: crate::etcd::EtcdError) -> Self {
        let attempts = match &error {
            crate::etcd::EtcdError::NoMemberList { attempts } => attempts.iter().collect(),
            other => vec![other],
        };
        let refusals = attempts
            .into_iter()
            .filter(|e| e.tls_problem().is_some())
            .filter_map(|e| Some((e.endpoint()?.to_owned(), e.to_string())))
            .collect();
        Self {
            message: error.to_string(),
            refusals,
        }
    }
}

/// `endpoints` with `leader` (when among them) first, the rest in their order.
fn leader_first(endpoints: &[String], leader: Option<&str>) -> Vec<String> {
    let mut ordered = endpoints.to_vec();
    if let Some(at) = ordered.iter().position(|e| Some(e.as_str()) == leader) {
        let url = ordered.remove(at);
        ordered.insert(0, url);
    }
    ordered
}

/// The first client URL of the member the observation found leading.
fn leader_url(observation: &Observation) -> Option<String> {
    let leader = observation.leader?;
    let member = observation.members.iter().find(|m| m.id == leader)?;
    member.client_urls.first().cloned()
}

/// One reconcile's picture of etcd, in the planner's terms.
pub(in crate::controller) struct EtcdView {
    pub observation: Observation,
    pub members: Vec<Member>,
    pub states: BTreeMap<u64, MemberState>,
    pub first_seen: BTreeMap<u64, Timestamp>,
    pub etcd: WorkloadEtcd,
}

impl EtcdView {
    /// Each member's server version, as its status reported it (members that answered).
    pub fn versions(&self) -> BTreeMap<u64, String> {
        self.observation
            .states
            .iter()
            .filter_map(|(id, state)| Some((*id, state.as_ref().ok()?.version.clone())))
            .collect()
    }
}

impl EtcdSessions {
    /// Observes the membership through `endpoints` (the etcd pods' client URLs).
    pub(in crate::controller) async fn observe(
        &self,
        key: ClusterKey,
        cluster: &str,
        etcd_ca: &CertPem,
        endpoints: &[String],
        routes: BTreeMap<String, String>,
        now: Timestamp,
    ) -> Result<EtcdView, Unobservable> {
        if endpoints.is_empty() {
            return Err(Unobservable::new("no etcd pod announces a client URL yet"));
        }
        let cert = self
            .client_cert(&key, cluster, etcd_ca)
            .map_err(Unobservable::new)?;
        let etcd = self.clients.workload(cert).routed(routes);
        let leaders = || self.leaders.lock().unwrap_or_else(PoisonError::into_inner);
        let ordered = leader_first(endpoints, leaders().get(&key).map(String::as_str));
        let observation = etcd.observe(&ordered).await?;
        match leader_url(&observation) {
            Some(url) => leaders().insert(key.clone(), url),
            None => leaders().remove(&key),
        };
        let members: Vec<Member> = observation.members.clone();
        let states = member_states(&observation);
        let first_seen = {
            let mut all = self
                .first_seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let seen = all.entry(key).or_default();
            let timed: BTreeSet<u64> = etcd_membership::timed_members(&members)
                .into_iter()
                .collect();
            seen.retain(|id, _| timed.contains(id));
            for id in timed {
                seen.entry(id).or_insert(now);
            }
            seen.clone()
        };
        Ok(EtcdView {
            observation,
            members,
            states,
            first_seen,
            etcd,
        })
    }

    fn client_cert(
        &self,
        key: &ClusterKey,
        cluster: &str,
        etcd_ca: &CertPem,
    ) -> Result<Arc<EtcdClientCert>, String> {
        let now = time::OffsetDateTime::now_utc();
        let mut certs = self.certs.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cert) = certs.get(key)
            && cert.reusable(&etcd_ca.cert, now)
        {
            return Ok(cert.clone());
        }
        let cert = Arc::new(issue_client_cert(cluster, etcd_ca, now).map_err(|e| e.to_string())?);
        certs.insert(key.clone(), cert.clone());
        Ok(cert)
    }
}

/// Each member's probe result in the planner's terms, alarms attached to the member that raised them.
pub(in crate::controller) fn member_states(
    observation: &Observation,
) -> BTreeMap<u64, MemberState> {
    observation
        .states
        .iter()
        .map(|(id, state)| {
            let state = match state {
                Ok(status) => MemberState::Reachable {
                    raft_index: status.raft_index,
                    raft_applied_index: status.raft_applied_index,
                    is_leader: status.leader == status.id && status.leader != 0,
                    alarms: observation
                        .alarms
                        .iter()
                        .filter(|(member, _)| member == id)
                        .map(|(_, kind)| alarm_name(*kind))
                        .collect(),
                    // etcd repeats every alarm of the cluster in each member's errors; alarms are
                    // attached to their own member above.
                    errors: status
                        .errors
                        .iter()
                        .filter(|e| !e.contains("alarm:"))
                        .cloned()
                        .collect(),
                },
                Err(e) => MemberState::Unreachable(e.to_string()),
            };
            (*id, state)
        })
        .collect()
}

/// An alarm as etcdctl names it, e.g. `NOSPACE`.
fn alarm_name(kind: AlarmKind) -> String {
    format!("{kind:?}").to_uppercase()
}

/// Every alarm raised in the cluster, worded as [`member_health`] words it on the member's machine. Each
/// holds the whole cluster, also when no machine that stays reports it: the member's Machine is being
/// deleted, or the member was removed (etcd keeps its alarms until they are disarmed).
pub(in crate::controller) fn alarms(observation: &Observation) -> Vec<String> {
    observation
        .alarms
        .iter()
        .map(|(id, kind)| {
            let member = observation.member(*id).map_or(
                MemberLabel {
                    id: *id,
                    name: String::new(),
                },
                Member::label,
            );
            let alarm = alarm_name(*kind);
            format!("etcd {}", etcd_membership::Reason::Alarm { member, alarm })
        })
        .collect()
}

/// The planner's view of the control-plane machines; `hooks_first`: other controllers' pre-terminate
/// hooks run before the member goes (Kubernetes 1.31 and later, as Cluster API's provider).
pub(in crate::controller) fn planner_machines(
    machines: &[ControlPlaneMachine],
    up_to_date: &[String],
    hooks_first: bool,
) -> Vec<EtcdMachine> {
    machines
        .iter()
        .map(|m| EtcdMachine {
            name: m.name.clone(),
            node: m.node.clone(),
            addresses: m.addresses.clone(),
            deleting: m.deleting,
            has_cleanup_hook: m.has_cleanup_hook,
            draining: m.draining,
            waits_for_hooks: if hooks_first {
                m.other_pre_terminate_hooks.clone()
            } else {
                Vec::new()
            },
            up_to_date: up_to_date.contains(&m.name),
            healthy: m.health.components.problem().is_none(),
        })
        .collect()
}

/// The health of a machine's etcd member, found by node name (see [`etcd_membership::judge_member`]); a
/// learner is not healthy yet.
pub(in crate::controller) fn member_health(
    machine: &ControlPlaneMachine,
    view: &EtcdView,
) -> Health {
    let Some(node) = &machine.node else {
        return Health::NotChecked;
    };
    let Some(member) = view.members.iter().find(|m| &m.name == node) else {
        return Health::Unhealthy(format!("no etcd member named {node}"));
    };
    let label = member.label();
    if !view.states.contains_key(&member.id) {
        return Health::Unknown(format!("etcd member {label} was not probed"));
    }
    match etcd_membership::judge_member(member, &view.states) {
        Ok(_) if member.is_learner => {
            Health::Unhealthy(format!("etcd member {label} is still a learner"))
        }
        Ok(_) => Health::Healthy,
        // A certificate refusal says what is wrong on its own.
        Err(etcd_membership::Reason::Unreachable { cause, .. })
            if matches!(
                view.observation.states.get(&member.id),
                Some(Err(e)) if e.tls_problem().is_some()
            ) =>
        {
            Health::Unhealthy(format!("etcd member {label}: {cause}"))
        }
        Err(reason) => Health::Unhealthy(format!("etcd {reason}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd::Status;

    #[test]
    fn the_last_leader_is_asked_first() {
        let urls: Vec<String> = [
            "https://10.0.0.1:2379",
            "https://10.0.0.2:2379",
            "https://10.0.0.3:2379",
        ]
        .map(String::from)
        .to_vec();
        let ordered = leader_first(&urls, Some("https://10.0.0.3:2379"));
        assert_eq!(ordered[0], urls[2]);
        assert_eq!(ordered[1..], urls[..2]);
        // A leader no pod announces any more (its machine went) changes nothing.
        assert_eq!(leader_first(&urls, Some("https://10.0.0.9:2379")), urls);
        assert_eq!(leader_first(&urls, None), urls);
    }

    fn status(id: u64, leader: u64) -> Status {
        Status {
            id,
            leader,
            raft_index: 100,
            raft_term: 2,
            raft_applied_index: 100,
            revision: 5,
            db_size: 1,
            db_size_in_use: 1,
            is_learner: false,
            errors: vec![],
            version: "3.4.23".into(),
        }
    }

    #[test]
    fn certificate_refusals_name_the_member_of_each_machine() {
        use crate::etcd::{EtcdError, TlsProblem};
        let refused = |endpoint: &str| EtcdError::Tls {
            endpoint: endpoint.into(),
            problem: TlsProblem::ClientCertRejected,
            cause: "received fatal alert: BadCertificate".into(),
        };
        let unobservable = Unobservable::from(EtcdError::NoMemberList {
            attempts: vec![
                refused("https://10.0.0.1:2379"),
                EtcdError::Unreachable {
                    endpoint: "https://10.0.0.2:2379".into(),
                    cause: "connection refused".into(),
                },
            ],
        });
        assert_eq!(unobservable.reason(), "EtcdCertificateRefused");
        let health = unobservable.member_health("node-a", &["https://10.0.0.1:2379".into()]);
        let Health::Unhealthy(why) = health else {
            panic!("{health:?}")
        };
        assert!(why.starts_with("etcd member node-a: etcd at https://10.0.0.1:2379: TLS: the member rejected our client certificate"), "{why}");
        assert!(matches!(
            unobservable.member_health("node-b", &["https://10.0.0.2:2379".into()]),
            Health::Unknown(why) if why.contains("connection refused")
        ));
        let down = Unobservable::from(EtcdError::NoMemberList { attempts: vec![] });
        assert_eq!(down.reason(), "EtcdNotObservable");
    }

    #[test]
    fn alarms_are_worded_as_their_members_health_also_for_a_removed_member() {
        let member = Member {
            id: 2,
            name: "node-b".into(),
            client_urls: vec!["https://10.0.0.2:2379".into()],
            ..Default::default()
        };
        let observation = Observation {
            members: vec![member.clone()],
            states: BTreeMap::from([(2, Ok(status(2, 2)))]),
            // 0x9: a member removed since it raised its alarm; etcd keeps the alarm.
            alarms: vec![(2, AlarmKind::NoSpace), (9, AlarmKind::NoSpace)],
            leader: Some(2),
        };
        let health = etcd_membership::judge_member(&member, &member_states(&observation));
        assert_eq!(
            alarms(&observation),
            [
                format!("etcd {}", health.unwrap_err()),
                "etcd alarm NOSPACE on member 9".into()
            ]
        );
    }

    #[test]
    fn states_carry_leadership_and_alarms_of_their_member() {
        let observation = Observation {
            members: vec![],
            states: BTreeMap::from([
                (1, Ok(status(1, 1))),
                (2, Ok(status(2, 1))),
                (
                    3,
                    Err(crate::etcd::EtcdError::NoMemberList { attempts: vec![] }),
                ),
            ]),
            alarms: vec![(2, AlarmKind::NoSpace)],
            leader: Some(1),
        };
        let mut observation = observation;
        for state in observation.states.values_mut().flatten() {
            state.errors = vec![format!("memberID:2 alarm:NOSPACE")];
        }
        let states = member_states(&observation);
        assert!(
            matches!(&states[&1], MemberState::Reachable { is_leader: true, alarms, errors, .. } if alarms.is_empty() && errors.is_empty()),
            "the alarm of member 2 is not member 1's"
        );
        assert!(
            matches!(&states[&2], MemberState::Reachable { is_leader: false, alarms, .. } if alarms == &["NOSPACE"])
        );
        assert!(matches!(&states[&3], MemberState::Unreachable(_)));
    }
}
