//! The workload cluster's stacked etcd as the controller sees and changes it: a client certificate from the
//! cluster's etcd CA, one observation of the whole membership per reconcile (members found through the
//! client URLs kubeadm annotates on the etcd pods, KEP-2506), the planner's inputs built from it, and the one
//! membership change the planner asks for.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch};
use kubeadm_api::cluster::v1beta2::Machine;
use kubeadm_bootstrap::render::CertPem;
use serde_json::json;

use super::{Context, Error};
use crate::etcd::{EtcdClientCert, EtcdClients, Observation, WorkloadEtcd, issue_client_cert};
use crate::etcd_maintenance::{self, DailyAt, LAST_DEFRAG_ANNOTATION, SCHEDULE_ANNOTATION};
use crate::etcd_membership::{
    self, Action, EtcdMachine, Member, MemberState, REMEDIATE_MACHINE_ANNOTATION,
};
use crate::machines::{CLEANUP_HOOK_ANNOTATION, ControlPlaneMachine, Health};

type ClusterKey = (String, String);

/// Connections, client certificates and learner timers, per workload cluster.
pub(super) struct EtcdCare {
    clients: EtcdClients,
    certs: Mutex<HashMap<ClusterKey, Arc<EtcdClientCert>>>,
    first_seen: Mutex<HashMap<ClusterKey, BTreeMap<u64, Timestamp>>>,
    /// Defragmentation rounds in progress.
    rounds: Mutex<HashMap<ClusterKey, etcd_maintenance::Round>>,
    pub(super) learner_timeout: SignedDuration,
    pub(super) unstarted_grace: SignedDuration,
}

impl EtcdCare {
    pub(super) fn new(learner_timeout: SignedDuration, unstarted_grace: SignedDuration) -> Self {
        Self {
            clients: EtcdClients::new(Default::default()),
            certs: Mutex::default(),
            first_seen: Mutex::default(),
            rounds: Mutex::default(),
            learner_timeout,
            unstarted_grace,
        }
    }
}

/// One reconcile's picture of etcd, in the planner's terms.
pub(super) struct EtcdView {
    pub observation: Observation,
    pub members: Vec<Member>,
    pub states: BTreeMap<u64, MemberState>,
    pub first_seen: BTreeMap<u64, Timestamp>,
    pub etcd: WorkloadEtcd,
}

impl EtcdCare {
    /// Observes the membership through `endpoints` (the etcd pods' client URLs).
    pub(super) async fn observe(
        &self,
        key: ClusterKey,
        cluster: &str,
        etcd_ca: &CertPem,
        endpoints: &[String],
        now: Timestamp,
    ) -> Result<EtcdView, String> {
        if endpoints.is_empty() {
            return Err("no etcd pod announces a client URL yet".into());
        }
        let cert = self.client_cert(&key, cluster, etcd_ca)?;
        let etcd = self.clients.workload(cert);
        let observation = etcd.observe(endpoints).await.map_err(|e| e.to_string())?;
        let members: Vec<Member> = observation
            .members
            .iter()
            .map(|m| Member {
                id: m.id,
                name: m.name.clone(),
                peer_urls: m.peer_urls.clone(),
                client_urls: m.client_urls.clone(),
                is_learner: m.is_learner,
            })
            .collect();
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
            && !cert.needs_renewal(now)
            && cert.ca_pem == etcd_ca.cert
        {
            return Ok(cert.clone());
        }
        let cert = Arc::new(issue_client_cert(cluster, etcd_ca, now).map_err(|e| e.to_string())?);
        certs.insert(key.clone(), cert.clone());
        Ok(cert)
    }
}

/// Each member's probe result in the planner's terms, alarms attached to the member that raised them.
pub(super) fn member_states(observation: &Observation) -> BTreeMap<u64, MemberState> {
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
                        .map(|(_, kind)| format!("{kind:?}").to_uppercase())
                        .collect(),
                    errors: status.errors.clone(),
                },
                Err(e) => MemberState::Unreachable(e.to_string()),
            };
            (*id, state)
        })
        .collect()
}

/// The planner's view of the control-plane machines.
pub(super) fn planner_machines(
    machines: &[ControlPlaneMachine],
    up_to_date: &[String],
) -> Vec<EtcdMachine> {
    machines
        .iter()
        .map(|m| EtcdMachine {
            name: m.name.clone(),
            node: m.node.clone(),
            addresses: m.addresses.clone(),
            deleting: m.deleting,
            has_cleanup_hook: m.has_cleanup_hook,
            up_to_date: up_to_date.contains(&m.name),
            healthy: m.health.components.problem().is_none(),
        })
        .collect()
}

/// The health of a machine's etcd member: found by node name, reachable, no alarm, no error.
pub(super) fn member_health(machine: &ControlPlaneMachine, view: &EtcdView) -> Health {
    let Some(node) = &machine.node else {
        return Health::NotChecked;
    };
    let Some(member) = view.members.iter().find(|m| &m.name == node) else {
        return Health::Unhealthy(format!("no etcd member named {node}"));
    };
    let id = format!("{:x}", member.id);
    match view.states.get(&member.id) {
        Some(MemberState::Reachable { alarms, errors, .. })
            if alarms.is_empty() && errors.is_empty() =>
        {
            if member.is_learner {
                Health::Unhealthy(format!("etcd member {id} ({node}) is still a learner"))
            } else {
                Health::Healthy
            }
        }
        Some(MemberState::Reachable { alarms, errors, .. }) => Health::Unhealthy(format!(
            "etcd member {id} ({node}): {}",
            alarms
                .iter()
                .map(|a| format!("alarm {a}"))
                .chain(errors.iter().cloned())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Some(MemberState::Unreachable(cause)) => {
            Health::Unhealthy(format!("etcd member {id} ({node}) unreachable: {cause}"))
        }
        None => Health::Unknown(format!("etcd member {id} ({node}) was not probed")),
    }
}

/// A membership change made, for its Event.
pub(super) struct Change {
    /// What kind of change (the Event's action).
    pub action: &'static str,
    /// The Machine the changed member belongs to, when known.
    pub machine: Option<String>,
    pub note: String,
}

/// Makes the membership change `action`; returns what was done, or `None` when nothing was to be done.
pub(super) async fn execute(
    ctx: &Context,
    namespace: &str,
    view: &EtcdView,
    action: &Action,
    machines: &[ControlPlaneMachine],
) -> Result<Option<Change>, Error> {
    let machine_of = |id: u64| {
        let name = &view.members.iter().find(|m| m.id == id)?.name;
        machines
            .iter()
            .find(|m| m.node.as_ref() == Some(name))
            .map(|m| m.name.clone())
    };
    let label = |id: u64| {
        view.members
            .iter()
            .find(|m| m.id == id)
            .filter(|m| !m.name.is_empty())
            .map(|m| format!("{id:x} ({})", m.name))
            .unwrap_or_else(|| format!("{id:x}"))
    };
    let leader = || {
        view.observation
            .leader_endpoint()
            .map(str::to_owned)
            .ok_or_else(|| Error::Etcd("etcd has no reachable leader".into()))
    };
    let etcd_error = |e: crate::etcd::EtcdError| Error::Etcd(e.to_string());
    let change = |action: &'static str, machine: Option<String>, note: String| Change {
        action,
        machine,
        note,
    };
    let done = match action {
        Action::Nothing | Action::Wait(_) => return Ok(None),
        Action::Promote { member } => {
            view.etcd
                .promote(&leader()?, *member)
                .await
                .map_err(etcd_error)?;
            let note = format!(
                "promoted etcd learner {} to a voting member",
                label(*member)
            );
            change("PromoteLearner", machine_of(*member), note)
        }
        Action::RemoveStuckLearner { member, machine }
        | Action::RemoveUnstartedMember { member, machine } => {
            view.etcd
                .remove(&leader()?, *member)
                .await
                .map_err(etcd_error)?;
            let (kind, what) = if matches!(action, Action::RemoveStuckLearner { .. }) {
                (
                    "RemoveStuckLearner",
                    "learner that did not catch up in time",
                )
            } else {
                ("RemoveUnstartedMember", "member that never started")
            };
            let mut note = format!("removed etcd {what} {}", label(*member));
            if let Some(machine) = machine {
                annotate(
                    ctx,
                    namespace,
                    machine,
                    REMEDIATE_MACHINE_ANNOTATION,
                    Some(""),
                )
                .await?;
                note.push_str(&format!(" and marked Machine {machine} for remediation"));
            }
            change(kind, machine.clone(), note)
        }
        Action::MoveLeader { from, to } => {
            view.etcd
                .move_leader(&leader()?, *to)
                .await
                .map_err(etcd_error)?;
            let note = format!(
                "moved etcd leadership from {} to {}",
                label(*from),
                label(*to)
            );
            change("MoveLeader", machine_of(*from), note)
        }
        Action::RemoveMember { member, machine } => {
            view.etcd
                .remove(&leader()?, *member)
                .await
                .map_err(etcd_error)?;
            let note = format!(
                "removed etcd member {} of deleting Machine {machine}",
                label(*member)
            );
            change("RemoveMember", Some(machine.clone()), note)
        }
        Action::ReleaseHook { machine } => {
            annotate(ctx, namespace, machine, CLEANUP_HOOK_ANNOTATION, None).await?;
            let note = format!(
                "Machine {machine} has no etcd member left; released its pre-terminate hook"
            );
            change("ReleaseHook", Some(machine.clone()), note)
        }
        Action::RemoveOrphan { member } => {
            view.etcd
                .remove(&leader()?, *member)
                .await
                .map_err(etcd_error)?;
            let note = format!(
                "removed etcd member {} that belongs to no Machine",
                label(*member)
            );
            change("RemoveOrphan", None, note)
        }
    };
    Ok(Some(done))
}

/// Sets (`Some`) or removes (`None`) an annotation on a Machine; a Machine already gone is fine.
pub(super) async fn annotate(
    ctx: &Context,
    namespace: &str,
    machine: &str,
    key: &str,
    value: Option<&str>,
) -> Result<(), Error> {
    let machines = Api::<Machine>::namespaced(ctx.client.clone(), namespace);
    match annotate_object(&machines, machine, key, value).await {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        other => other.map_err(Error::from),
    }
}

/// Sets (`Some`) or removes (`None`) one annotation of an object with a merge patch.
pub(super) async fn annotate_object<K>(
    api: &Api<K>,
    name: &str,
    key: &str,
    value: Option<&str>,
) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({ "metadata": { "annotations": { key: value } } });
    api.patch(name, &super::merge_params(), &Patch::Merge(&patch))
        .await
        .map(drop)
}

/// One step of the scheduled, leader-aware defragmentation (see [`crate::etcd_maintenance`]); returns
/// what was done, for the Event, or `None` when nothing was due.
pub(super) async fn maintain(
    ctx: &Context,
    kcp: &kubeadm_api::controlplane::v1beta2::KubeadmControlPlane,
    key: ClusterKey,
    view: &EtcdView,
    now: Timestamp,
) -> Result<Option<String>, Error> {
    use etcd_maintenance::Step;
    use kube::ResourceExt;
    let annotations = kcp.annotations();
    let schedule = match annotations.get(SCHEDULE_ANNOTATION) {
        None => Some(etcd_maintenance::DEFAULT_SCHEDULE),
        Some(text) => DailyAt::parse(text).map_err(Error::Etcd)?,
    };
    let last = annotations
        .get(LAST_DEFRAG_ANNOTATION)
        .and_then(|t| t.parse::<Timestamp>().ok());
    if schedule.is_some() && last.is_none() {
        // Start the clock: the first round runs at the next scheduled time, not right away.
        annotate_kcp(ctx, kcp, LAST_DEFRAG_ANNOTATION, &now.to_string()).await?;
        return Ok(None);
    }
    let due = etcd_maintenance::due(schedule, last, now);
    let round = current_round(&ctx.etcd, &key);
    let step = etcd_maintenance::next_step(&view.members, &view.states, due, round.as_ref());
    let db_size = || -> i64 {
        view.observation
            .states
            .values()
            .filter_map(|s| s.as_ref().ok())
            .map(|s| s.db_size)
            .sum()
    };
    let leader = || {
        view.observation
            .leader_endpoint()
            .map(str::to_owned)
            .ok_or_else(|| Error::Etcd("etcd has no reachable leader".into()))
    };
    let etcd_error = |e: crate::etcd::EtcdError| Error::Etcd(e.to_string());
    let rounds = || {
        ctx.etcd
            .rounds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    };
    match step {
        Step::Nothing | Step::Wait(_) => snapshot(ctx, kcp, &key, view, now).await,
        Step::Compact => {
            let revision = view
                .observation
                .leader
                .and_then(|id| view.observation.states.get(&id))
                .and_then(|s| s.as_ref().ok())
                .map(|s| s.revision)
                .ok_or_else(|| Error::Etcd("no revision from the leader".into()))?;
            match view.etcd.compact(&leader()?, revision).await {
                Ok(()) => {}
                // kube-apiserver compacts too; an already compacted revision is fine.
                Err(e) if e.to_string().contains("compacted") => {}
                Err(e) => return Err(etcd_error(e)),
            }
            let mut rounds = rounds();
            let round = rounds.entry(key).or_default();
            round.compacted = true;
            round.db_size_before = db_size();
            Ok(Some(format!(
                "compacted etcd to revision {revision} before defragmenting"
            )))
        }
        Step::Defragment { member } => {
            let endpoint = view
                .members
                .iter()
                .find(|m| m.id == member)
                .and_then(|m| m.client_urls.first().cloned())
                .ok_or_else(|| Error::Etcd(format!("member {member:x} has no client URL")))?;
            view.etcd.defragment(&endpoint).await.map_err(etcd_error)?;
            rounds().entry(key).or_default().defragmented.insert(member);
            Ok(Some(format!("defragmented etcd member {member:x}")))
        }
        Step::MoveLeader { from, to } => {
            view.etcd
                .move_leader(&leader()?, to)
                .await
                .map_err(etcd_error)?;
            Ok(Some(format!(
                "moved etcd leadership from {from:x} to {to:x} to defragment the former leader"
            )))
        }
        Step::Finished => {
            let before = rounds()
                .remove(&key)
                .map(|r| r.db_size_before)
                .unwrap_or_default();
            annotate_kcp(ctx, kcp, LAST_DEFRAG_ANNOTATION, &now.to_string()).await?;
            Ok(Some(format!(
                "defragmented all {} etcd members: database files {} → {} bytes",
                view.members.len(),
                before,
                db_size()
            )))
        }
    }
}

/// A scheduled snapshot (when the manager has a snapshot directory): streamed from a healthy voting
/// member (a follower when there is one, to spare the leader) into
/// `<dir>/<namespace>/<cluster>/etcd-<time>.db`, written under a temporary name and renamed when complete;
/// the newest `snapshots_keep` are kept.
async fn snapshot(
    ctx: &Context,
    kcp: &kubeadm_api::controlplane::v1beta2::KubeadmControlPlane,
    key: &ClusterKey,
    view: &EtcdView,
    now: Timestamp,
) -> Result<Option<String>, Error> {
    use etcd_maintenance::{LAST_SNAPSHOT_ANNOTATION, SNAPSHOT_SCHEDULE_ANNOTATION};
    use kube::ResourceExt;
    let Some(root) = &ctx.settings.snapshot_dir else {
        return Ok(None);
    };
    let schedule = match kcp.annotations().get(SNAPSHOT_SCHEDULE_ANNOTATION) {
        None => Some(etcd_maintenance::DEFAULT_SNAPSHOT_SCHEDULE),
        Some(text) => DailyAt::parse(text).map_err(Error::Etcd)?,
    };
    let last = kcp
        .annotations()
        .get(LAST_SNAPSHOT_ANNOTATION)
        .and_then(|v| v.split_whitespace().next()?.parse::<Timestamp>().ok());
    if schedule.is_some() && last.is_none() {
        annotate_kcp(ctx, kcp, LAST_SNAPSHOT_ANNOTATION, &now.to_string()).await?;
        return Ok(None);
    }
    if !etcd_maintenance::due(schedule, last, now) {
        return Ok(None);
    }
    let healthy = |m: &&Member| {
        matches!(view.states.get(&m.id), Some(MemberState::Reachable { alarms, errors, .. }) if alarms.is_empty() && errors.is_empty())
            && !m.is_learner
    };
    let source = view
        .members
        .iter()
        .filter(healthy)
        .min_by_key(|m| Some(m.id) == view.observation.leader)
        .and_then(|m| m.client_urls.first().cloned())
        .ok_or_else(|| Error::Etcd("no healthy voting member to take a snapshot from".into()))?;
    let dir = root.join(&key.0).join(&key.1);
    let io = |what: &str, e: std::io::Error| Error::Etcd(format!("snapshot: {what}: {e}"));
    tokio::fs::create_dir_all(&dir)
        .await
        .map_err(|e| io(&format!("create {}", dir.display()), e))?;
    let name = etcd_maintenance::snapshot_file_name(now);
    let path = dir.join(&name);
    let partial = dir.join(format!("{name}.partial"));
    let mut file = tokio::fs::File::create(&partial)
        .await
        .map_err(|e| io(&format!("create {}", partial.display()), e))?;
    let written = match view.etcd.snapshot(&source, &mut file).await {
        Ok(bytes) => bytes,
        Err(e) => {
            let _ = tokio::fs::remove_file(&partial).await;
            return Err(Error::Etcd(e.to_string()));
        }
    };
    file.sync_all()
        .await
        .map_err(|e| io(&format!("sync {}", partial.display()), e))?;
    tokio::fs::rename(&partial, &path)
        .await
        .map_err(|e| io(&format!("rename to {}", path.display()), e))?;
    let mut names = Vec::new();
    let mut entries = tokio::fs::read_dir(&dir)
        .await
        .map_err(|e| io(&format!("list {}", dir.display()), e))?;
    while let Ok(Some(entry)) = entries.next_entry().await {
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    for old in etcd_maintenance::snapshots_to_prune(&names, ctx.settings.snapshots_keep) {
        let _ = tokio::fs::remove_file(dir.join(old)).await;
    }
    let record = format!("{now} {}", path.display());
    annotate_kcp(ctx, kcp, LAST_SNAPSHOT_ANNOTATION, &record).await?;
    Ok(Some(format!(
        "wrote etcd snapshot {} ({written} bytes)",
        path.display()
    )))
}

fn current_round(care: &EtcdCare, key: &ClusterKey) -> Option<etcd_maintenance::Round> {
    care.rounds
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(key)
        .cloned()
}

async fn annotate_kcp(
    ctx: &Context,
    kcp: &kubeadm_api::controlplane::v1beta2::KubeadmControlPlane,
    key: &str,
    value: &str,
) -> Result<(), Error> {
    use kube::ResourceExt;
    let kcps = Api::<kubeadm_api::controlplane::v1beta2::KubeadmControlPlane>::namespaced(
        ctx.client.clone(),
        &kcp.namespace().unwrap_or_default(),
    );
    Ok(annotate_object(&kcps, &kcp.name_any(), key, Some(value)).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd::{AlarmKind, Status};

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
        let states = member_states(&observation);
        assert!(
            matches!(&states[&1], MemberState::Reachable { is_leader: true, alarms, .. } if alarms.is_empty())
        );
        assert!(
            matches!(&states[&2], MemberState::Reachable { is_leader: false, alarms, .. } if alarms == &["NOSPACE"])
        );
        assert!(matches!(&states[&3], MemberState::Unreachable(_)));
    }
}
