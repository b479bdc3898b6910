//! The one etcd membership change a reconcile makes, chosen so that the control plane never costs the cluster
//! its etcd quorum.
//!
//! kubeadm adds every new member as a learner and promotes it once it caught up; a join that dies half-way
//! leaves a learner that is never promoted or a member that never started. Deleting a Machine must take its
//! member out before the Machine goes, and members that no Machine owns must go too. Each of these is a raft
//! configuration change: one at a time, each only while a healthy majority of voters remains.
//!
//! An active alarm anywhere (NOSPACE, CORRUPT) stops every change: NOSPACE makes etcd refuse writes
//! cluster-wide and CORRUPT means a member's data cannot be trusted; both need an operator (compact,
//! defragment, `etcdctl alarm disarm`), and a membership change meanwhile only adds risk.
//!
//! Priority, highest first; the first change that may go ahead is the step. A change that is due but blocked
//! is reported as [`Action::Wait`] only when nothing else may go ahead, so a blocked removal never starves a
//! promotion or the release of a hook.
//! 1. Promote a learner that caught up (kubeadm's own promotion timed out): it only adds a healthy voter.
//! 2. Remove a learner still behind after the learner timeout, or a member that never started after its grace.
//! 3. Deleting Machines with the cleanup hook, by name: move leadership away from their member, then remove
//!    the member, then release the hook.
//! 4. Remove one member that no Machine owns.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// How long a learner may take to catch up before it counts as stuck.
pub const DEFAULT_LEARNER_TIMEOUT: SignedDuration = SignedDuration::from_mins(10);
/// How long an added member may take to start before it counts as abandoned.
pub const DEFAULT_UNSTARTED_GRACE: SignedDuration = SignedDuration::from_mins(5);

/// An etcd member as the member list reports it. A member that was added but never started has an empty
/// `name` and no `client_urls`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Member {
    pub id: u64,
    /// Empty until the member's etcd process first starts; kubeadm then names it after the Node.
    pub name: String,
    pub peer_urls: Vec<String>,
    /// Empty until the member first starts.
    pub client_urls: Vec<String>,
    pub is_learner: bool,
}

impl Member {
    /// etcd fills in name and client URLs only when the member's process joins.
    pub fn is_started(&self) -> bool {
        !self.name.is_empty() || !self.client_urls.is_empty()
    }

    /// How the member is named in messages.
    pub fn label(&self) -> MemberLabel {
        MemberLabel {
            id: self.id,
            name: self.name.clone(),
        }
    }
}

/// What probing one member's status endpoint returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberState {
    Reachable {
        raft_index: u64,
        raft_applied_index: u64,
        is_leader: bool,
        /// Active alarms on the member, e.g. `NOSPACE`.
        alarms: Vec<String>,
        /// Errors the member reports in its status.
        errors: Vec<String>,
    },
    /// The probe failed, with its cause.
    Unreachable(String),
}

/// What the planner needs to know about one control-plane Machine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdMachine {
    pub name: String,
    /// `status.nodeRef.name`; kubeadm names the etcd member after the Node.
    pub node: Option<String>,
    /// `status.addresses`, to find the Machine of a member that never started and so has no name.
    pub addresses: Vec<String>,
    pub deleting: bool,
    /// The Machine carries the control plane's pre-terminate hook, so it waits for its member to be removed.
    pub has_cleanup_hook: bool,
    /// Being deleted, and Cluster API's Machine controller has not reached the pre-terminate hooks yet
    /// (pre-drain hooks, drain, volume detach): the member stays until it has, so that the node's API
    /// server and kubelet keep working while the node is drained.
    pub draining: bool,
    /// Pre-terminate hooks of other controllers the member waits for (Kubernetes 1.31 and later, as
    /// Cluster API's provider): the control plane's hook runs last.
    pub waits_for_hooks: Vec<String>,
    pub up_to_date: bool,
    /// Its control-plane components are healthy.
    pub healthy: bool,
}

/// What a reconcile saw of etcd and the Machines.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Observed<'a> {
    pub members: &'a [Member],
    /// Probe result per member id; a started member without one was not probed.
    pub states: &'a BTreeMap<u64, MemberState>,
    pub machines: &'a [EtcdMachine],
    /// When the controller first saw each learner and unstarted member (see [`timed_members`]). Kept in
    /// memory only: a restart forgets it, which only makes the timeouts start over.
    pub first_seen: &'a BTreeMap<u64, Timestamp>,
    /// The leader most members that answered follow (their status' leader), whether it answered itself
    /// or not.
    pub agreed_leader: Option<u64>,
    pub now: Timestamp,
    pub learner_timeout: SignedDuration,
    pub unstarted_grace: SignedDuration,
}

/// The membership change to make now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Promote this learner: it caught up but kubeadm did not promote it.
    Promote {
        member: u64,
    },
    /// Remove this learner, still behind after the learner timeout; mark its Machine with
    /// [`REMEDIATE_MACHINE_ANNOTATION`](kubeadm_api::meta::REMEDIATE_MACHINE_ANNOTATION) so it is replaced.
    RemoveStuckLearner {
        member: u64,
        machine: Option<String>,
    },
    /// Remove this member, added but never started within its grace.
    RemoveUnstartedMember {
        member: u64,
        machine: Option<String>,
    },
    /// Move leadership before the leader is removed, so the cluster does not go through an election:
    /// to `to`, or where it refuses, to each of `then` in turn (the other candidates, best first).
    MoveLeader {
        from: u64,
        to: u64,
        then: Vec<u64>,
    },
    /// Remove the member of this deleting Machine, then release the Machine's hook.
    RemoveMember {
        member: u64,
        machine: String,
    },
    /// Release the hook of this deleting Machine: its member is gone or it never had one.
    ReleaseHook {
        machine: String,
    },
    /// Remove this member, which no Machine owns.
    RemoveOrphan {
        member: u64,
    },
    /// A change is due but must wait for this.
    Wait(Reason),
    Nothing,
}

/// How a member is named in messages: its id in hex, as etcdctl prints it, and its name when it has one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberLabel {
    pub id: u64,
    pub name: String,
}

impl fmt::Display for MemberLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}", self.id)?;
        if !self.name.is_empty() {
            write!(f, " ({})", self.name)?;
        }
        Ok(())
    }
}

/// Why a membership change has to wait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// No member list: nothing can be judged.
    NoMembers,
    Unreachable {
        member: MemberLabel,
        cause: String,
    },
    Unstarted {
        member: MemberLabel,
    },
    Alarm {
        member: MemberLabel,
        alarm: String,
    },
    Errors {
        member: MemberLabel,
        errors: Vec<String>,
    },
    /// No reachable voter reports being the leader: an election is running or the leader is cut off.
    NoLeader,
    /// Too few healthy voters for etcd to commit any change.
    QuorumLost {
        healthy: usize,
        voters: usize,
    },
    /// Removing `member` would leave `healthy` healthy of `voters` voters.
    QuorumAtRisk {
        member: MemberLabel,
        healthy: usize,
        voters: usize,
    },
    /// A new member, should it never become healthy, would leave `healthy` healthy of `voters` voters.
    AddRisksQuorum {
        healthy: usize,
        voters: usize,
    },
    LearnerCatchingUp {
        member: MemberLabel,
        raft_index: u64,
        leader_raft_index: u64,
    },
    /// etcd allows one learner at a time, and a learner means a join is under way.
    LearnerPresent {
        member: MemberLabel,
    },
    /// The leader has to be removed but no voter may take over.
    NoLeaderCandidate {
        member: MemberLabel,
    },
    /// A Machine without a Node may own a member that otherwise looks orphaned.
    MachineWithoutNode {
        machine: String,
    },
    /// A deleting Machine whose node is still being drained keeps its member.
    Draining {
        machine: String,
    },
    /// A deleting Machine keeps its member until other controllers' pre-terminate hooks are gone.
    OtherHooks {
        machine: String,
        hooks: Vec<String>,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NoMembers => f.write_str("the etcd member list is empty"),
            Reason::Unreachable { member, cause } => {
                write!(f, "member {member} unreachable: {cause}")
            }
            Reason::Unstarted { member } => {
                write!(f, "member {member} was added but has not started")
            }
            Reason::Alarm { member, alarm } => write!(f, "alarm {alarm} on member {member}"),
            Reason::Errors { member, errors } => {
                write!(f, "member {member} reports errors: {}", errors.join("; "))
            }
            Reason::NoLeader => f.write_str("no reachable etcd member reports being the leader"),
            Reason::QuorumLost { healthy, voters } => write!(
                f,
                "etcd has no quorum: {healthy} of {voters} voters healthy, quorum needs {}",
                quorum(*voters)
            ),
            Reason::QuorumAtRisk {
                member,
                healthy,
                voters,
            } => write!(
                f,
                "removing member {member} would leave {healthy} healthy of {voters} voters: quorum needs {}",
                quorum(*voters)
            ),
            Reason::AddRisksQuorum { healthy, voters } => write!(
                f,
                "adding a member would make {voters} voters with {healthy} healthy: quorum needs {}",
                quorum(*voters)
            ),
            Reason::LearnerCatchingUp {
                member,
                raft_index,
                leader_raft_index,
            } => write!(
                f,
                "learner {member} is catching up (raft index {raft_index} of {leader_raft_index})"
            ),
            Reason::LearnerPresent { member } => write!(
                f,
                "learner {member} is not promoted yet: one membership change at a time"
            ),
            Reason::NoLeaderCandidate { member } => write!(
                f,
                "member {member} leads, but no healthy voter on a Machine that stays can take over"
            ),
            Reason::MachineWithoutNode { machine } => write!(
                f,
                "Machine {machine} has no Node yet: members it may own cannot be told from orphans"
            ),
            Reason::Draining { machine } => write!(
                f,
                "Machine {machine} is being drained: its member is removed once Cluster API waits \
                 for the pre-terminate hooks"
            ),
            Reason::OtherHooks { machine, hooks } => write!(
                f,
                "Machine {machine} waits for other pre-terminate hooks ({}): the control plane's \
                 runs last",
                hooks.join(", ")
            ),
        }
    }
}

/// Votes etcd needs to commit anything with this many voters. Zero voters still need one: an empty cluster
/// commits nothing.
pub fn quorum(voters: usize) -> usize {
    voters / 2 + 1
}

/// Voters that answered their probe without alarms or errors. Learners never count: they do not vote.
pub fn healthy_voters<'a>(observed: Observed<'a>) -> Vec<&'a Member> {
    observed
        .members
        .iter()
        .filter(|m| !m.is_learner && problem(observed, m).is_none())
        .collect()
}

/// Whether removing `member` now keeps quorum: the removal itself needs a quorum of today's voters, and the
/// healthy voters left must be a quorum of the voters left. Removing a learner only needs the first.
///
/// An unhealthy voter (unstarted, unreachable, alarmed) already counts against quorum, so removing it never
/// costs a healthy vote and usually lowers the quorum needed.
pub fn is_quorum_safe_without(member: u64, observed: Observed<'_>) -> Result<(), Reason> {
    let voters = observed.members.iter().filter(|m| !m.is_learner).count();
    let healthy = healthy_voters(observed);
    if healthy.len() < quorum(voters) {
        return Err(Reason::QuorumLost {
            healthy: healthy.len(),
            voters,
        });
    }
    let Some(voter) = observed
        .members
        .iter()
        .find(|m| m.id == member && !m.is_learner)
    else {
        return Ok(());
    };
    let healthy_left = healthy.iter().filter(|m| m.id != member).count();
    if healthy_left < quorum(voters - 1) {
        return Err(Reason::QuorumAtRisk {
            member: voter.label(),
            healthy: healthy_left,
            voters: voters - 1,
        });
    }
    Ok(())
}

/// Whether a new member may join now. A join adds a learner that kubeadm promotes, so it waits for any learner
/// (one at a time) and any unstarted member, and it assumes the worst: the new voter never becomes healthy.
/// A single voter is the exception, or no cluster could ever grow past one member.
pub fn may_add_member(observed: Observed<'_>) -> Result<(), Reason> {
    let members = by_id(observed.members);
    if members.is_empty() {
        return Err(Reason::NoMembers);
    }
    if let Some(reason) = missing_state(observed) {
        return Err(reason);
    }
    if let Some(m) = members.iter().find(|m| !m.is_started()) {
        return Err(Reason::Unstarted { member: m.label() });
    }
    if let Some(m) = members.iter().find(|m| m.is_learner) {
        return Err(Reason::LearnerPresent { member: m.label() });
    }
    let voters = members.len();
    let healthy = healthy_voters(observed).len();
    if voters > 1 && healthy < quorum(voters + 1) {
        return Err(Reason::AddRisksQuorum {
            healthy,
            voters: voters + 1,
        });
    }
    match members.iter().find_map(|m| problem(observed, m)) {
        Some(reason) => Err(reason),
        None => Ok(()),
    }
}

/// The Machine that hosts a member: the one whose Node carries the member's name, or, for a member that never
/// started and so has no name yet, the one with the host of one of its peer URLs among its addresses.
///
/// A started member whose Machine has no Node yet is deliberately nobody's here: kubeadm promotes its own
/// learner before the kubelet registers the Node, and a learner of no Machine is left to it (promoting it
/// first makes kubeadm's own promotion, and so the join, fail). Only a deleting Machine looks further
/// ([`machine_member`]).
pub fn member_machine<'m>(member: &Member, machines: &'m [EtcdMachine]) -> Option<&'m EtcdMachine> {
    if !member.name.is_empty()
        && let Some(machine) = machines
            .iter()
            .find(|m| m.node.as_deref() == Some(member.name.as_str()))
    {
        return Some(machine);
    }
    if member.is_started() {
        return None;
    }
    machines.iter().find(|machine| at_address(member, machine))
}

/// Whether the host of one of `member`'s peer URLs is among `machine`'s addresses.
fn at_address(member: &Member, machine: &EtcdMachine) -> bool {
    member.peer_urls.iter().map(|u| url_host(u)).any(|host| {
        !host.is_empty()
            && machine
                .addresses
                .iter()
                .any(|a| a.eq_ignore_ascii_case(host))
    })
}

/// The member of `machine` among `members`: the one [`member_machine`] gives it, else, when the Machine has
/// no Node to go by (it lost it, or its kubelet never registered while its etcd runs), the started member
/// at one of its addresses. Used for a deleting Machine, so that its hook is not released with its member
/// left behind as a dead voter (the fault Cluster API v1.14.3 fixed in kubernetes-sigs/cluster-api#14263).
pub fn machine_member<'a>(
    machine: &EtcdMachine,
    members: &[&'a Member],
    machines: &[EtcdMachine],
) -> Option<&'a Member> {
    members
        .iter()
        .copied()
        .find(|m| member_machine(m, machines).is_some_and(|owner| owner.name == machine.name))
        .or_else(|| {
            if machine.node.is_some() {
                return None;
            }
            members.iter().copied().find(|m| {
                m.is_started() && member_machine(m, machines).is_none() && at_address(m, machine)
            })
        })
}

/// Members whose first sighting the caller records in [`Observed::first_seen`]; it may forget all others.
pub fn timed_members(members: &[Member]) -> Vec<u64> {
    members
        .iter()
        .filter(|m| m.is_learner || !m.is_started())
        .map(|m| m.id)
        .collect()
}

/// When the next learner timeout or unstarted grace runs out, so that the caller looks again then rather
/// than at its next periodic pass.
pub fn next_expiry(observed: Observed<'_>) -> Option<Timestamp> {
    observed
        .members
        .iter()
        .filter_map(|m| {
            let seen = observed.first_seen.get(&m.id)?;
            let limit = if !m.is_started() {
                observed.unstarted_grace
            } else if m.is_learner {
                observed.learner_timeout
            } else {
                return None;
            };
            seen.checked_add(limit).ok()
        })
        .min()
}

/// Decides the one membership change to make now (see the module docs for the order).
pub fn next_action(observed: Observed<'_>) -> Action {
    if observed.members.is_empty() {
        return Action::Wait(Reason::NoMembers);
    }
    // Quorum math over a partial picture could remove a healthy member believed lost.
    if let Some(reason) = missing_state(observed) {
        return Action::Wait(reason);
    }
    if let Some(reason) = first_alarm(observed) {
        return Action::Wait(reason);
    }
    let planner = Planner::new(observed);
    let mut waits = Vec::new();
    // Every change except releasing a hook is a raft entry: it needs quorum and a leader to commit it.
    let leader = match planner.leader() {
        Ok(leader) => Some(leader),
        Err(reason) => {
            waits.push(reason);
            None
        }
    };
    // Whether a learner caught up is judged against the leader's own log.
    let answering = leader.filter(|l| l.answered);
    let action = answering
        .and_then(|l| planner.promote(l, &mut waits))
        .or_else(|| answering.and_then(|l| planner.remove_expired(l, &mut waits)))
        .or_else(|| planner.deleting(leader, &mut waits))
        .or_else(|| leader.and_then(|l| planner.orphan(l, &mut waits)));
    // Learners wait for a leader that answers.
    if let Some(unseen) = leader.filter(|l| !l.answered)
        && let Some(member) = planner.members.iter().find(|m| m.id == unseen.id)
    {
        waits.push(Reason::Unreachable {
            member: member.label(),
            cause: "it leads, and only the other members reach it".into(),
        });
    }
    match action {
        Some(action) => action,
        None => waits
            .into_iter()
            .next()
            .map_or(Action::Nothing, Action::Wait),
    }
}

/// The leader's id and raft index.
#[derive(Clone, Copy, Debug)]
struct Leader {
    id: u64,
    /// Its own when it answered; else the highest a voter that answered reported.
    raft_index: u64,
    /// It answered this controller. A leader only the members reach cannot hand over leadership; a
    /// change still commits, proposed through a member that follows it.
    answered: bool,
}

struct Planner<'a> {
    observed: Observed<'a>,
    /// Members by id, so every choice is the same whatever order the member list came in.
    members: Vec<&'a Member>,
}

impl<'a> Planner<'a> {
    fn new(observed: Observed<'a>) -> Self {
        Self {
            observed,
            members: by_id(observed.members),
        }
    }

    fn machine(&self, member: &Member) -> Option<&'a EtcdMachine> {
        member_machine(member, self.observed.machines)
    }

    fn elapsed(&self, member: &Member) -> SignedDuration {
        let seen = self.observed.first_seen.get(&member.id);
        let now = self.observed.now;
        now.duration_since(seen.copied().unwrap_or(now))
    }

    /// The leader, when the cluster can commit a change. Should several voters claim to lead (a stale leader
    /// behind a partition), the one furthest ahead is the real one. When no voter that answered leads, the
    /// voter the members agree on leads unseen (see [`Leader::answered`]).
    fn leader(&self) -> Result<Leader, Reason> {
        let voters = self.members.iter().filter(|m| !m.is_learner).count();
        let healthy = healthy_voters(self.observed).len();
        if healthy < quorum(voters) {
            return Err(Reason::QuorumLost { healthy, voters });
        }
        let voter_states = self
            .members
            .iter()
            .filter(|m| !m.is_learner)
            .filter_map(|m| match self.observed.states.get(&m.id) {
                Some(MemberState::Reachable {
                    raft_index,
                    is_leader,
                    ..
                }) => Some((m.id, *raft_index, *is_leader)),
                _ => None,
            });
        if let Some(leader) = voter_states
            .clone()
            .filter(|(_, _, is_leader)| *is_leader)
            .map(|(id, raft_index, _)| Leader {
                id,
                raft_index,
                answered: true,
            })
            .min_by_key(|l| (std::cmp::Reverse(l.raft_index), l.id))
        {
            return Ok(leader);
        }
        let unseen = self.observed.agreed_leader.filter(|id| {
            self.members.iter().any(|m| m.id == *id && !m.is_learner)
                && matches!(
                    self.observed.states.get(id),
                    Some(MemberState::Unreachable(_))
                )
        });
        match (unseen, voter_states.map(|(_, index, _)| index).max()) {
            (Some(id), Some(raft_index)) => Ok(Leader {
                id,
                raft_index,
                answered: false,
            }),
            _ => Err(Reason::NoLeader),
        }
    }

    /// Whether a learner caught up as etcd judges it before promotion: within 10 % of the leader's log.
    fn learner_ready(&self, learner: &Member, leader: Leader) -> Result<(), Reason> {
        let raft_index = health(self.observed, learner)?;
        if u128::from(raft_index) * 10 >= u128::from(leader.raft_index) * 9 {
            Ok(())
        } else {
            Err(Reason::LearnerCatchingUp {
                member: learner.label(),
                raft_index,
                leader_raft_index: leader.raft_index,
            })
        }
    }

    /// Tier 1. Only learners of Machines that stay: promoting one that is leaving or owned by no Machine would
    /// add a voter only to remove it again.
    fn promote(&self, leader: Leader, waits: &mut Vec<Reason>) -> Option<Action> {
        for learner in self
            .members
            .iter()
            .filter(|m| m.is_learner && m.is_started())
        {
            if self.machine(learner).is_none_or(|m| m.deleting) {
                continue;
            }
            match self.learner_ready(learner, leader) {
                Ok(()) => return Some(Action::Promote { member: learner.id }),
                Err(reason) if self.elapsed(learner) < self.observed.learner_timeout => {
                    waits.push(reason)
                }
                // Past its timeout: tier 2 removes it.
                Err(_) => {}
            }
        }
        None
    }

    /// Tier 2.
    fn remove_expired(&self, leader: Leader, waits: &mut Vec<Reason>) -> Option<Action> {
        for &member in &self.members {
            let machine = || self.machine(member).map(|m| m.name.clone());
            let action = if !member.is_started() {
                if self.elapsed(member) < self.observed.unstarted_grace {
                    waits.push(Reason::Unstarted {
                        member: member.label(),
                    });
                    continue;
                }
                Action::RemoveUnstartedMember {
                    member: member.id,
                    machine: machine(),
                }
            } else if member.is_learner
                && self.elapsed(member) >= self.observed.learner_timeout
                && self.learner_ready(member, leader).is_err()
            {
                Action::RemoveStuckLearner {
                    member: member.id,
                    machine: machine(),
                }
            } else {
                continue;
            };
            // Implied by the leader check (an unstarted voter is never healthy, a learner never votes), and
            // checked here anyway so that no removal path goes without it.
            match is_quorum_safe_without(member.id, self.observed) {
                Ok(()) => return Some(action),
                Err(reason) => waits.push(reason),
            }
        }
        None
    }

    /// Tier 3. Releasing a hook changes no membership, so it goes ahead even without quorum.
    fn deleting(&self, leader: Option<Leader>, waits: &mut Vec<Reason>) -> Option<Action> {
        let mut deleting: Vec<&EtcdMachine> = self
            .observed
            .machines
            .iter()
            .filter(|m| m.deleting && m.has_cleanup_hook)
            .collect();
        deleting.sort_by(|a, b| a.name.cmp(&b.name));
        for machine in deleting {
            if machine.draining {
                waits.push(Reason::Draining {
                    machine: machine.name.clone(),
                });
                continue;
            }
            if !machine.waits_for_hooks.is_empty() {
                waits.push(Reason::OtherHooks {
                    machine: machine.name.clone(),
                    hooks: machine.waits_for_hooks.clone(),
                });
                continue;
            }
            let release = Action::ReleaseHook {
                machine: machine.name.clone(),
            };
            // The last control-plane Machine takes the whole cluster with it.
            if self.observed.machines.len() == 1 {
                return Some(release);
            }
            let Some(member) = machine_member(machine, &self.members, self.observed.machines)
            else {
                return Some(release);
            };
            let Some(leader) = leader else { continue };
            match self.remove_voter(member, leader) {
                Ok(None) => {
                    return Some(Action::RemoveMember {
                        member: member.id,
                        machine: machine.name.clone(),
                    });
                }
                Ok(Some(move_leader)) => return Some(move_leader),
                Err(reason) => waits.push(reason),
            }
        }
        None
    }

    /// Tier 4. A member is only an orphan when every Machine has its Node, and a voter only when no join is
    /// under way and every other voter is healthy: removing it must not be the change that tips the balance.
    fn orphan(&self, leader: Leader, waits: &mut Vec<Reason>) -> Option<Action> {
        let orphans: Vec<&Member> = self
            .members
            .iter()
            .copied()
            .filter(|m| m.is_started() && self.machine(m).is_none())
            .collect();
        if orphans.is_empty() {
            return None;
        }
        let mut machines: Vec<&EtcdMachine> = self.observed.machines.iter().collect();
        machines.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(machine) = machines.iter().find(|m| m.node.is_none()) {
            waits.push(Reason::MachineWithoutNode {
                machine: machine.name.clone(),
            });
            return None;
        }
        // Learners first: removing one never touches quorum.
        if let Some(learner) = orphans.iter().find(|m| m.is_learner) {
            return Some(Action::RemoveOrphan { member: learner.id });
        }
        let orphan = orphans[0];
        let blocker = self.members.iter().find_map(|m| {
            if !m.is_started() {
                Some(Reason::Unstarted { member: m.label() })
            } else if m.is_learner {
                Some(Reason::LearnerPresent { member: m.label() })
            } else if m.id != orphan.id {
                problem(self.observed, m)
            } else {
                None
            }
        });
        if let Some(reason) = blocker {
            waits.push(reason);
            return None;
        }
        match self.remove_voter(orphan, leader) {
            Ok(None) => Some(Action::RemoveOrphan { member: orphan.id }),
            Ok(Some(move_leader)) => Some(move_leader),
            Err(reason) => {
                waits.push(reason);
                None
            }
        }
    }

    /// Checks that `member` may go; `Some(MoveLeader)` when it leads and must hand over first. Leadership only
    /// moves when the removal that follows is safe, so the cluster is not disturbed for nothing.
    fn remove_voter(&self, member: &Member, leader: Leader) -> Result<Option<Action>, Reason> {
        is_quorum_safe_without(member.id, self.observed)?;
        self.others_healthy(member)?;
        // A leader this controller cannot reach cannot be asked to hand over; the quorum without it is
        // safe, so it goes at the cost of one election.
        if member.id != leader.id || !leader.answered {
            return Ok(None);
        }
        let mut candidates = self.successors(member).into_iter().map(|m| m.id);
        let to = candidates.next().ok_or_else(|| Reason::NoLeaderCandidate {
            member: member.label(),
        })?;
        Ok(Some(Action::MoveLeader {
            from: member.id,
            to,
            then: candidates.collect(),
        }))
    }

    /// A healthy voter goes only while every other voter is healthy too: with one cut off or down, removing a
    /// healthy one spends the margin the cluster has left (five voters with one down tolerate one more
    /// failure, four with one down none), so it waits, as Cluster API's preflight does. An unhealthy
    /// voter may always go when quorum survives it: that is how a dead machine leaves.
    fn others_healthy(&self, member: &Member) -> Result<(), Reason> {
        if problem(self.observed, member).is_some() {
            return Ok(());
        }
        match self
            .members
            .iter()
            .filter(|m| m.id != member.id && !m.is_learner)
            .find_map(|m| problem(self.observed, m))
        {
            Some(reason) => Err(reason),
            None => Ok(()),
        }
    }

    /// The healthy voters on Machines that stay, best first: up-to-date Machines with healthy
    /// components, then by member id.
    fn successors(&self, from: &Member) -> Vec<&'a Member> {
        let mut candidates: Vec<(bool, &Member)> = self
            .members
            .iter()
            .copied()
            .filter(|m| m.id != from.id && !m.is_learner && problem(self.observed, m).is_none())
            .filter_map(|m| {
                let machine = self.machine(m).filter(|machine| !machine.deleting)?;
                Some((!(machine.up_to_date && machine.healthy), m))
            })
            .collect();
        candidates.sort_by_key(|(worse, m)| (*worse, m.id));
        candidates.into_iter().map(|(_, m)| m).collect()
    }
}

fn by_id(members: &[Member]) -> Vec<&Member> {
    let mut sorted: Vec<&Member> = members.iter().collect();
    sorted.sort_by_key(|m| m.id);
    sorted
}

/// The first started member without a probe result. A member that never started has no client URL to probe.
fn missing_state(observed: Observed<'_>) -> Option<Reason> {
    by_id(observed.members)
        .into_iter()
        .find(|m| m.is_started() && !observed.states.contains_key(&m.id))
        .map(|m| Reason::Unreachable {
            member: m.label(),
            cause: "not probed".into(),
        })
}

/// The first alarm raised on any member, by member id.
fn first_alarm(observed: Observed<'_>) -> Option<Reason> {
    by_id(observed.members)
        .into_iter()
        .find_map(|m| match observed.states.get(&m.id) {
            Some(MemberState::Reachable { alarms, .. }) => {
                alarms.first().map(|alarm| Reason::Alarm {
                    member: m.label(),
                    alarm: alarm.clone(),
                })
            }
            _ => None,
        })
}

/// Why a member is not healthy, if it is not.
fn problem(observed: Observed<'_>, member: &Member) -> Option<Reason> {
    health(observed, member).err()
}

/// A healthy member's raft index, or why it is not healthy.
fn health(observed: Observed<'_>, member: &Member) -> Result<u64, Reason> {
    judge_member(member, observed.states)
}

/// The one judgement of a member's health that membership planning, maintenance, snapshots and remediation
/// share: its probe answered without alarms or errors (then its raft index), or why not.
pub fn judge_member(member: &Member, states: &BTreeMap<u64, MemberState>) -> Result<u64, Reason> {
    let label = member.label();
    match states.get(&member.id) {
        None if !member.is_started() => Err(Reason::Unstarted { member: label }),
        None => Err(Reason::Unreachable {
            member: label,
            cause: "not probed".into(),
        }),
        Some(MemberState::Unreachable(cause)) => Err(Reason::Unreachable {
            member: label,
            cause: cause.clone(),
        }),
        Some(MemberState::Reachable {
            raft_index,
            alarms,
            errors,
            ..
        }) => match (alarms.first(), errors.is_empty()) {
            (Some(alarm), _) => Err(Reason::Alarm {
                member: label,
                alarm: alarm.clone(),
            }),
            (None, false) => Err(Reason::Errors {
                member: label,
                errors: errors.clone(),
            }),
            (None, true) => Ok(*raft_index),
        },
    }
}

/// The host of a URL such as `https://10.0.0.1:2380` or `https://[fd00::1]:2380`.
fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    if let Some(bracketed) = authority.strip_prefix('[') {
        return bracketed.split(']').next().unwrap_or(bracketed);
    }
    authority
        .rsplit_once(':')
        .map_or(authority, |(host, _)| host)
}

#[cfg(test)]
mod tests;

/// Random clusters driven by the planner's own actions, with members failing and recovering in between.
#[cfg(test)]
mod simulation;
