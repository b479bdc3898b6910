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

/// Annotation the caller sets on the Machine of a removed stuck learner, so that it is replaced.
pub const REMEDIATE_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/remediate-machine";
/// How long a learner may take to catch up before it counts as stuck.
pub const DEFAULT_LEARNER_TIMEOUT: SignedDuration = SignedDuration::from_mins(10);
/// How long an added member may take to start before it counts as abandoned.
pub const DEFAULT_UNSTARTED_GRACE: SignedDuration = SignedDuration::from_mins(5);

/// An etcd member as the member list reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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
    /// [`REMEDIATE_MACHINE_ANNOTATION`] so it is replaced.
    RemoveStuckLearner {
        member: u64,
        machine: Option<String>,
    },
    /// Remove this member, added but never started within its grace.
    RemoveUnstartedMember {
        member: u64,
        machine: Option<String>,
    },
    /// Move leadership before the leader is removed, so the cluster does not go through an election.
    MoveLeader {
        from: u64,
        to: u64,
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
    machines.iter().find(|machine| {
        member.peer_urls.iter().map(|u| url_host(u)).any(|host| {
            !host.is_empty()
                && machine
                    .addresses
                    .iter()
                    .any(|a| a.eq_ignore_ascii_case(host))
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
    let action = leader
        .and_then(|l| planner.promote(l, &mut waits))
        .or_else(|| leader.and_then(|l| planner.remove_expired(l, &mut waits)))
        .or_else(|| planner.deleting(leader, &mut waits))
        .or_else(|| leader.and_then(|l| planner.orphan(l, &mut waits)));
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
    raft_index: u64,
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
    /// behind a partition), the one furthest ahead is the real one.
    fn leader(&self) -> Result<Leader, Reason> {
        let voters = self.members.iter().filter(|m| !m.is_learner).count();
        let healthy = healthy_voters(self.observed).len();
        if healthy < quorum(voters) {
            return Err(Reason::QuorumLost { healthy, voters });
        }
        self.members
            .iter()
            .filter(|m| !m.is_learner)
            .filter_map(|m| match self.observed.states.get(&m.id) {
                Some(MemberState::Reachable {
                    raft_index,
                    is_leader: true,
                    ..
                }) => Some(Leader {
                    id: m.id,
                    raft_index: *raft_index,
                }),
                _ => None,
            })
            .min_by_key(|l| (std::cmp::Reverse(l.raft_index), l.id))
            .ok_or(Reason::NoLeader)
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
            let release = Action::ReleaseHook {
                machine: machine.name.clone(),
            };
            // The last control-plane Machine takes the whole cluster with it.
            if self.observed.machines.len() == 1 {
                return Some(release);
            }
            let Some(member) = self.members.iter().find(|m| {
                self.machine(m)
                    .is_some_and(|owner| owner.name == machine.name)
            }) else {
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
        if member.id != leader.id {
            return Ok(None);
        }
        self.successor(member)
            .map(|to| {
                Some(Action::MoveLeader {
                    from: member.id,
                    to: to.id,
                })
            })
            .ok_or_else(|| Reason::NoLeaderCandidate {
                member: member.label(),
            })
    }

    /// A healthy voter on a Machine that stays, preferring up-to-date Machines with healthy components.
    fn successor(&self, from: &Member) -> Option<&'a Member> {
        self.members
            .iter()
            .copied()
            .filter(|m| m.id != from.id && !m.is_learner && problem(self.observed, m).is_none())
            .filter_map(|m| {
                let machine = self.machine(m).filter(|machine| !machine.deleting)?;
                Some((!(machine.up_to_date && machine.healthy), m))
            })
            .min_by_key(|(worse, m)| (*worse, m.id))
            .map(|(_, m)| m)
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
    let label = member.label();
    match observed.states.get(&member.id) {
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
mod tests {
    use super::*;

    fn now() -> Timestamp {
        Timestamp::from_second(1_750_000_000).unwrap()
    }

    fn node(id: u64) -> String {
        format!("node-{id}")
    }

    fn voter(id: u64) -> Member {
        Member {
            id,
            name: node(id),
            peer_urls: vec![format!("https://10.0.0.{id}:2380")],
            client_urls: vec![format!("https://10.0.0.{id}:2379")],
            is_learner: false,
        }
    }

    fn machine(id: u64) -> EtcdMachine {
        EtcdMachine {
            name: format!("m-{id}"),
            node: Some(node(id)),
            addresses: vec![format!("10.0.0.{id}")],
            deleting: false,
            has_cleanup_hook: true,
            up_to_date: true,
            healthy: true,
        }
    }

    fn reachable(raft_index: u64) -> MemberState {
        MemberState::Reachable {
            raft_index,
            raft_applied_index: raft_index,
            is_leader: false,
            alarms: vec![],
            errors: vec![],
        }
    }

    fn label(id: u64) -> MemberLabel {
        MemberLabel { id, name: node(id) }
    }

    fn unnamed(id: u64) -> MemberLabel {
        MemberLabel {
            id,
            name: String::new(),
        }
    }

    #[derive(Clone, Debug)]
    struct Cluster {
        members: Vec<Member>,
        states: BTreeMap<u64, MemberState>,
        machines: Vec<EtcdMachine>,
        first_seen: BTreeMap<u64, Timestamp>,
    }

    impl Cluster {
        /// `n` healthy voters with their Machines, all at raft index 1000; member 1 leads.
        fn healthy(n: u64) -> Self {
            let mut cluster = Cluster {
                members: (1..=n).map(voter).collect(),
                states: (1..=n).map(|id| (id, reachable(1000))).collect(),
                machines: (1..=n).map(machine).collect(),
                first_seen: BTreeMap::new(),
            };
            if n > 0 {
                cluster = cluster.leader(1);
            }
            cluster
        }

        fn observed(&self) -> Observed<'_> {
            Observed {
                members: &self.members,
                states: &self.states,
                machines: &self.machines,
                first_seen: &self.first_seen,
                now: now(),
                learner_timeout: DEFAULT_LEARNER_TIMEOUT,
                unstarted_grace: DEFAULT_UNSTARTED_GRACE,
            }
        }

        fn next(&self) -> Action {
            next_action(self.observed())
        }

        /// A learner at `raft_index`, with its Machine.
        fn learner(mut self, id: u64, raft_index: u64) -> Self {
            self.members.push(Member {
                is_learner: true,
                ..voter(id)
            });
            self.states.insert(id, reachable(raft_index));
            self.machines.push(machine(id));
            self
        }

        /// A member added but never started, with its Machine (found by address only).
        fn unstarted(mut self, id: u64, is_learner: bool) -> Self {
            self.members.push(Member {
                name: String::new(),
                client_urls: vec![],
                is_learner,
                ..voter(id)
            });
            self.machines.push(machine(id));
            self
        }

        fn state(mut self, id: u64, state: MemberState) -> Self {
            self.states.insert(id, state);
            self
        }

        fn unreachable(self, id: u64) -> Self {
            self.state(id, MemberState::Unreachable("connection refused".into()))
        }

        fn alarm(mut self, id: u64, alarm: &str) -> Self {
            if let Some(MemberState::Reachable { alarms, .. }) = self.states.get_mut(&id) {
                alarms.push(alarm.into());
            }
            self
        }

        fn leader(mut self, id: u64) -> Self {
            for (member, state) in &mut self.states {
                if let MemberState::Reachable { is_leader, .. } = state {
                    *is_leader = *member == id;
                }
            }
            self
        }

        fn seen(mut self, id: u64, minutes_ago: i64) -> Self {
            let at = now() - SignedDuration::from_mins(minutes_ago);
            self.first_seen.insert(id, at);
            self
        }

        fn with_machine(mut self, name: &str, change: impl FnOnce(&mut EtcdMachine)) -> Self {
            let index = match self.machines.iter().position(|m| m.name == name) {
                Some(index) => index,
                None => {
                    self.machines.push(EtcdMachine {
                        name: name.into(),
                        node: Some(format!("{name}-node")),
                        ..machine(0)
                    });
                    self.machines.len() - 1
                }
            };
            change(&mut self.machines[index]);
            self
        }

        fn deleting(self, id: u64) -> Self {
            self.with_machine(&format!("m-{id}"), |m| m.deleting = true)
        }

        fn without_machine(mut self, id: u64) -> Self {
            self.machines.retain(|m| m.name != format!("m-{id}"));
            self
        }
    }

    #[test]
    fn quorum_is_a_strict_majority_of_voters() {
        let table = [
            (0, 1),
            (1, 1),
            (2, 2),
            (3, 2),
            (4, 3),
            (5, 3),
            (6, 4),
            (7, 4),
        ];
        for (voters, expected) in table {
            assert_eq!(quorum(voters), expected, "{voters} voters");
        }
    }

    #[test]
    fn learners_never_count_toward_quorum() {
        let cluster = Cluster::healthy(3).unreachable(3).learner(4, 1000);
        let healthy: Vec<u64> = healthy_voters(cluster.observed())
            .iter()
            .map(|m| m.id)
            .collect();
        assert_eq!(healthy, [1, 2]);
        assert_eq!(
            is_quorum_safe_without(2, cluster.observed()),
            Err(Reason::QuorumAtRisk {
                member: label(2),
                healthy: 1,
                voters: 2
            }),
            "a caught-up learner is no vote"
        );
        assert_eq!(is_quorum_safe_without(4, cluster.observed()), Ok(()));
    }

    #[test]
    fn the_next_expiry_is_the_earliest_timer_of_a_learner_or_unstarted_member() {
        let none = Cluster::healthy(3);
        assert_eq!(next_expiry(none.observed()), None);
        let timed = Cluster::healthy(3)
            .learner(4, 10)
            .seen(4, 1)
            .unstarted(5, true)
            .seen(5, 1);
        let observed = timed.observed();
        let unstarted_ends = now() - SignedDuration::from_mins(1) + observed.unstarted_grace;
        assert!(observed.unstarted_grace < observed.learner_timeout);
        assert_eq!(next_expiry(observed), Some(unstarted_ends));
    }

    #[test]
    fn an_alarm_anywhere_stops_every_membership_change() {
        let nospace_on = |id| {
            Action::Wait(Reason::Alarm {
                member: label(id),
                alarm: "NOSPACE".into(),
            })
        };
        let unstarted = Cluster::healthy(3).unstarted(4, true).seen(4, 60);
        assert!(matches!(
            unstarted.next(),
            Action::RemoveUnstartedMember { member: 4, .. }
        ));
        assert_eq!(unstarted.alarm(2, "NOSPACE").next(), nospace_on(2));
        let caught_up = Cluster::healthy(3).learner(4, 1000);
        assert_eq!(caught_up.next(), Action::Promote { member: 4 });
        assert_eq!(caught_up.alarm(1, "NOSPACE").next(), nospace_on(1));
        let everywhere = Cluster::healthy(3)
            .deleting(3)
            .alarm(3, "NOSPACE")
            .alarm(1, "CORRUPT")
            .alarm(2, "NOSPACE");
        assert_eq!(
            everywhere.next(),
            Action::Wait(Reason::Alarm {
                member: label(1),
                alarm: "CORRUPT".into(),
            }),
            "the first member by id names the alarm"
        );
        let reason = Reason::Alarm {
            member: label(2),
            alarm: "NOSPACE".into(),
        };
        assert_eq!(reason.to_string(), "alarm NOSPACE on member 2 (node-2)");
    }

    #[test]
    fn removing_a_voter_needs_quorum_now_and_a_healthy_majority_of_the_rest() {
        let at_risk = |member, healthy, voters| {
            Err(Reason::QuorumAtRisk {
                member: label(member),
                healthy,
                voters,
            })
        };
        let table = [
            ("three healthy, one goes", Cluster::healthy(3), 2, Ok(())),
            ("two healthy, one goes", Cluster::healthy(2), 2, Ok(())),
            ("the last voter", Cluster::healthy(1), 1, at_risk(1, 0, 0)),
            (
                "a healthy one while another is down",
                Cluster::healthy(3).unreachable(3),
                2,
                at_risk(2, 1, 2),
            ),
            (
                "the one that is down",
                Cluster::healthy(3).unreachable(3),
                3,
                Ok(()),
            ),
            (
                "an alarmed member is not healthy",
                Cluster::healthy(3).alarm(3, "NOSPACE"),
                2,
                at_risk(2, 1, 2),
            ),
            (
                "five tolerate one more down",
                Cluster::healthy(5).unreachable(5),
                2,
                Ok(()),
            ),
            (
                "no quorum to commit with",
                Cluster::healthy(3).unreachable(2).unreachable(3),
                3,
                Err(Reason::QuorumLost {
                    healthy: 1,
                    voters: 3,
                }),
            ),
            (
                "an unstarted voter lowers the quorum needed",
                Cluster::healthy(2).unstarted(3, false),
                3,
                Ok(()),
            ),
            (
                "one voter and one that never started have no quorum",
                Cluster::healthy(1).unstarted(2, false),
                2,
                Err(Reason::QuorumLost {
                    healthy: 1,
                    voters: 2,
                }),
            ),
            ("an unknown member", Cluster::healthy(3), 99, Ok(())),
        ];
        for (case, cluster, member, expected) in table {
            assert_eq!(
                is_quorum_safe_without(member, cluster.observed()),
                expected,
                "{case}"
            );
        }
    }

    #[test]
    fn a_members_machine_is_found_by_node_then_by_peer_host() {
        let machines = [
            machine(1),
            EtcdMachine {
                name: "m-2".into(),
                node: None,
                addresses: vec!["10.0.0.2".into(), "cp-2.example".into()],
                ..Default::default()
            },
            EtcdMachine {
                name: "m-3".into(),
                node: Some(node(3)),
                addresses: vec!["fd00::3".into()],
                ..Default::default()
            },
        ];
        let unstarted = |peer: &str| Member {
            id: 9,
            peer_urls: vec![peer.into()],
            ..Default::default()
        };
        let table = [
            ("by node name", voter(1), Some("m-1")),
            (
                "a started member only by name",
                Member {
                    name: "node-9".into(),
                    ..voter(2)
                },
                None,
            ),
            (
                "unstarted, by IPv4 peer host",
                unstarted("https://10.0.0.2:2380"),
                Some("m-2"),
            ),
            (
                "unstarted, by host name",
                unstarted("https://CP-2.example:2380"),
                Some("m-2"),
            ),
            (
                "unstarted, by IPv6 peer host",
                unstarted("https://[fd00::3]:2380"),
                Some("m-3"),
            ),
            (
                "unstarted, unknown host",
                unstarted("https://10.0.0.9:2380"),
                None,
            ),
        ];
        for (case, member, expected) in table {
            assert_eq!(
                member_machine(&member, &machines).map(|m| m.name.as_str()),
                expected,
                "{case}"
            );
        }
    }

    #[test]
    fn nothing_is_decided_on_a_partial_picture() {
        let empty = Cluster::healthy(0);
        assert_eq!(empty.next(), Action::Wait(Reason::NoMembers));

        let mut unprobed = Cluster::healthy(3).deleting(3);
        unprobed.states.remove(&2);
        assert_eq!(
            unprobed.next(),
            Action::Wait(Reason::Unreachable {
                member: label(2),
                cause: "not probed".into()
            })
        );

        let never_started = Cluster::healthy(3).unstarted(4, true);
        assert_eq!(
            never_started.next(),
            Action::Wait(Reason::Unstarted { member: unnamed(4) }),
            "a member that never started has nothing to probe"
        );
    }

    #[test]
    fn a_healthy_cluster_needs_nothing() {
        assert_eq!(Cluster::healthy(1).next(), Action::Nothing);
        assert_eq!(Cluster::healthy(3).next(), Action::Nothing);
        let without_hook = Cluster::healthy(3).with_machine("m-3", |m| {
            m.deleting = true;
            m.has_cleanup_hook = false;
        });
        assert_eq!(
            without_hook.next(),
            Action::Nothing,
            "a Machine without the hook does not wait for us"
        );
    }

    #[test]
    fn a_learner_that_caught_up_is_promoted() {
        let promote = Action::Promote { member: 4 };
        let table = [
            (1000, 1000, promote.clone()),
            (1000, 900, promote.clone()),
            (1000, 1005, promote.clone()),
            (0, 0, promote.clone()),
            (
                1000,
                899,
                Action::Wait(Reason::LearnerCatchingUp {
                    member: label(4),
                    raft_index: 899,
                    leader_raft_index: 1000,
                }),
            ),
        ];
        for (leader_index, learner_index, expected) in table {
            let cluster = Cluster::healthy(3)
                .state(1, reachable(leader_index))
                .leader(1)
                .learner(4, learner_index);
            assert_eq!(
                cluster.next(),
                expected,
                "learner at {learner_index} of {leader_index}"
            );
        }
    }

    #[test]
    fn only_learners_of_machines_that_stay_are_promoted() {
        let leaving = Cluster::healthy(3).learner(4, 1000).deleting(4);
        assert_eq!(
            leaving.next(),
            Action::RemoveMember {
                member: 4,
                machine: "m-4".into()
            }
        );
        let orphan = Cluster::healthy(3).learner(4, 1000).without_machine(4);
        assert_eq!(orphan.next(), Action::RemoveOrphan { member: 4 });
    }

    #[test]
    fn a_learner_still_behind_after_its_timeout_is_removed() {
        let stuck = Action::RemoveStuckLearner {
            member: 4,
            machine: Some("m-4".into()),
        };
        let catching_up = Action::Wait(Reason::LearnerCatchingUp {
            member: label(4),
            raft_index: 10,
            leader_raft_index: 1000,
        });
        let behind = Cluster::healthy(3).learner(4, 10);
        let table = [
            (
                "within its timeout",
                behind.clone().seen(4, 9),
                catching_up.clone(),
            ),
            (
                "past its timeout",
                behind.clone().seen(4, 10),
                stuck.clone(),
            ),
            ("first seen now", behind.clone(), catching_up),
            (
                "unreachable past its timeout",
                behind.clone().unreachable(4).seen(4, 30),
                stuck.clone(),
            ),
            (
                "unreachable within its timeout",
                behind.clone().unreachable(4).seen(4, 1),
                Action::Wait(Reason::Unreachable {
                    member: label(4),
                    cause: "connection refused".into(),
                }),
            ),
            (
                "caught up but alarmed past its timeout: alarms stop every change",
                Cluster::healthy(3)
                    .learner(4, 1000)
                    .alarm(4, "NOSPACE")
                    .seen(4, 10),
                Action::Wait(Reason::Alarm {
                    member: label(4),
                    alarm: "NOSPACE".into(),
                }),
            ),
            (
                "without a machine",
                behind.without_machine(4).seen(4, 10),
                Action::RemoveStuckLearner {
                    member: 4,
                    machine: None,
                },
            ),
        ];
        for (case, cluster, expected) in table {
            assert_eq!(cluster.next(), expected, "{case}");
        }
    }

    #[test]
    fn a_member_that_never_started_is_removed_after_its_grace() {
        let removed = |machine: Option<&str>| Action::RemoveUnstartedMember {
            member: 4,
            machine: machine.map(Into::into),
        };
        let table = [
            (
                "a learner within its grace",
                Cluster::healthy(3).unstarted(4, true).seen(4, 4),
                Action::Wait(Reason::Unstarted { member: unnamed(4) }),
            ),
            (
                "a learner past its grace",
                Cluster::healthy(3).unstarted(4, true).seen(4, 5),
                removed(Some("m-4")),
            ),
            (
                "a voter past its grace",
                Cluster::healthy(3).unstarted(4, false).seen(4, 5),
                removed(Some("m-4")),
            ),
            (
                "a voter without a machine",
                Cluster::healthy(3)
                    .unstarted(4, false)
                    .without_machine(4)
                    .seen(4, 5),
                removed(None),
            ),
            (
                "a voter next to a single voter: etcd cannot commit the removal",
                Cluster::healthy(1).unstarted(4, false).seen(4, 60),
                Action::Wait(Reason::QuorumLost {
                    healthy: 1,
                    voters: 2,
                }),
            ),
        ];
        for (case, cluster, expected) in table {
            assert_eq!(cluster.next(), expected, "{case}");
        }
    }

    #[test]
    fn promotion_comes_first_then_expired_members_then_deletions_then_orphans() {
        let leaving = Cluster::healthy(3).deleting(3);
        assert_eq!(
            leaving.clone().learner(4, 1000).next(),
            Action::Promote { member: 4 }
        );
        assert_eq!(
            leaving.clone().learner(4, 10).seen(4, 10).next(),
            Action::RemoveStuckLearner {
                member: 4,
                machine: Some("m-4".into())
            }
        );
        let with_orphan = Cluster {
            members: [leaving.members.clone(), vec![voter(5)]].concat(),
            ..leaving.clone()
        }
        .state(5, reachable(1000));
        assert_eq!(
            with_orphan.next(),
            Action::RemoveMember {
                member: 3,
                machine: "m-3".into()
            }
        );
    }

    #[test]
    fn a_blocked_change_does_not_hold_up_others() {
        let cluster = Cluster::healthy(1)
            .unstarted(4, false)
            .seen(4, 60)
            .with_machine("m-9", |m| m.deleting = true);
        assert_eq!(
            cluster.next(),
            Action::ReleaseHook {
                machine: "m-9".into()
            }
        );
    }

    #[test]
    fn a_leaving_leader_hands_over_first() {
        let leaving = Cluster::healthy(3).deleting(1);
        let table = [
            (
                "to the lowest id",
                leaving.clone(),
                Action::MoveLeader { from: 1, to: 2 },
            ),
            (
                "to an up-to-date Machine",
                leaving
                    .clone()
                    .with_machine("m-2", |m| m.up_to_date = false),
                Action::MoveLeader { from: 1, to: 3 },
            ),
            (
                "to a Machine with healthy components",
                leaving.clone().with_machine("m-2", |m| m.healthy = false),
                Action::MoveLeader { from: 1, to: 3 },
            ),
            (
                "to the lowest id when none is perfect",
                leaving
                    .clone()
                    .with_machine("m-2", |m| m.up_to_date = false)
                    .with_machine("m-3", |m| m.healthy = false),
                Action::MoveLeader { from: 1, to: 2 },
            ),
            (
                "never to a Machine that is leaving too",
                leaving
                    .clone()
                    .with_machine("m-2", |m| m.has_cleanup_hook = false)
                    .with_machine("m-3", |m| {
                        m.deleting = true;
                        m.has_cleanup_hook = false;
                    })
                    .deleting(2),
                Action::Wait(Reason::NoLeaderCandidate { member: label(1) }),
            ),
            (
                "once handed over, the member goes",
                leaving.clone().leader(2),
                Action::RemoveMember {
                    member: 1,
                    machine: "m-1".into(),
                },
            ),
            (
                "not when the removal would be unsafe anyway",
                leaving.unreachable(3),
                Action::Wait(Reason::QuorumAtRisk {
                    member: label(1),
                    healthy: 1,
                    voters: 2,
                }),
            ),
        ];
        for (case, cluster, expected) in table {
            assert_eq!(cluster.next(), expected, "{case}");
        }
    }

    #[test]
    fn a_leaving_member_goes_only_when_quorum_survives() {
        let remove = |id: u64| Action::RemoveMember {
            member: id,
            machine: format!("m-{id}"),
        };
        let table = [
            ("all healthy", Cluster::healthy(3).deleting(2), remove(2)),
            (
                "another is down",
                Cluster::healthy(3).deleting(2).unreachable(3),
                Action::Wait(Reason::QuorumAtRisk {
                    member: label(2),
                    healthy: 1,
                    voters: 2,
                }),
            ),
            (
                "another has an alarm",
                Cluster::healthy(3).deleting(2).alarm(3, "NOSPACE"),
                Action::Wait(Reason::Alarm {
                    member: label(3),
                    alarm: "NOSPACE".into(),
                }),
            ),
            (
                "it is the one down",
                Cluster::healthy(3).deleting(3).unreachable(3),
                remove(3),
            ),
            (
                "five tolerate one more down",
                Cluster::healthy(5).deleting(2).unreachable(4),
                remove(2),
            ),
            (
                "an unstarted voter on a leaving Machine",
                Cluster::healthy(3).unstarted(4, false).deleting(4),
                remove(4),
            ),
            (
                "two leaving, by Machine name",
                Cluster::healthy(5).deleting(3).deleting(2),
                remove(2),
            ),
        ];
        for (case, cluster, expected) in table {
            assert_eq!(cluster.next(), expected, "{case}");
        }
    }

    #[test]
    fn a_hook_is_released_once_the_member_is_gone() {
        let release = |machine: &str| Action::ReleaseHook {
            machine: machine.into(),
        };
        let lost = Cluster::healthy(3).unreachable(2).unreachable(3);
        let table = [
            (
                "its member is gone",
                Cluster::healthy(2).with_machine("m-3", |m| m.deleting = true),
                release("m-3"),
            ),
            (
                "even without quorum: no etcd change",
                lost.clone().with_machine("m-9", |m| m.deleting = true),
                release("m-9"),
            ),
            (
                "the last Machine takes the cluster with it",
                Cluster::healthy(1).deleting(1),
                release("m-1"),
            ),
            (
                "but a member needs quorum to go",
                lost.deleting(3),
                Action::Wait(Reason::QuorumLost {
                    healthy: 1,
                    voters: 3,
                }),
            ),
        ];
        for (case, cluster, expected) in table {
            assert_eq!(cluster.next(), expected, "{case}");
        }
    }

    #[test]
    fn orphans_go_one_at_a_time_and_only_when_all_is_well() {
        let table = [
            (
                "the lowest id first",
                Cluster::healthy(3).without_machine(3).without_machine(2),
                Action::RemoveOrphan { member: 2 },
            ),
            (
                "even when unreachable",
                Cluster::healthy(3).without_machine(3).unreachable(3),
                Action::RemoveOrphan { member: 3 },
            ),
            (
                "a leading orphan hands over first",
                Cluster::healthy(3).without_machine(1),
                Action::MoveLeader { from: 1, to: 2 },
            ),
            (
                "a learner never touches quorum",
                Cluster::healthy(3)
                    .unreachable(3)
                    .learner(4, 10)
                    .without_machine(4),
                Action::RemoveOrphan { member: 4 },
            ),
            (
                "not while another voter is down",
                Cluster::healthy(5).without_machine(5).unreachable(4),
                Action::Wait(Reason::Unreachable {
                    member: label(4),
                    cause: "connection refused".into(),
                }),
            ),
            (
                "not while a learner joins",
                Cluster::healthy(3).without_machine(3).learner(4, 10),
                Action::Wait(Reason::LearnerCatchingUp {
                    member: label(4),
                    raft_index: 10,
                    leader_raft_index: 1000,
                }),
            ),
            (
                "not while a member has yet to start",
                Cluster::healthy(3).without_machine(3).unstarted(4, true),
                Action::Wait(Reason::Unstarted { member: unnamed(4) }),
            ),
            (
                "not while a Machine may still own it",
                Cluster::healthy(3)
                    .without_machine(3)
                    .with_machine("m-9", |m| m.node = None),
                Action::Wait(Reason::MachineWithoutNode {
                    machine: "m-9".into(),
                }),
            ),
            (
                "never the last voter",
                Cluster::healthy(1).without_machine(1),
                Action::Wait(Reason::QuorumAtRisk {
                    member: label(1),
                    healthy: 0,
                    voters: 0,
                }),
            ),
        ];
        for (case, cluster, expected) in table {
            assert_eq!(cluster.next(), expected, "{case}");
        }
    }

    #[test]
    fn no_change_without_quorum_or_a_leader() {
        let lost = Cluster::healthy(3)
            .unreachable(2)
            .unreachable(3)
            .learner(4, 1000);
        assert_eq!(
            lost.next(),
            Action::Wait(Reason::QuorumLost {
                healthy: 1,
                voters: 3
            })
        );
        let leaderless = Cluster::healthy(3).leader(0).learner(4, 1000);
        assert_eq!(leaderless.next(), Action::Wait(Reason::NoLeader));
        let stale_leader = Cluster::healthy(3)
            .state(
                2,
                MemberState::Reachable {
                    raft_index: 500,
                    raft_applied_index: 500,
                    is_leader: true,
                    alarms: vec![],
                    errors: vec![],
                },
            )
            .learner(4, 899);
        assert_eq!(
            stale_leader.next(),
            Action::Wait(Reason::LearnerCatchingUp {
                member: label(4),
                raft_index: 899,
                leader_raft_index: 1000,
            }),
            "the leader furthest ahead is the real one"
        );
    }

    #[test]
    fn a_member_may_join_only_a_settled_healthy_cluster() {
        let mut unprobed = Cluster::healthy(3);
        unprobed.states.remove(&3);
        let errors = Cluster::healthy(5).state(
            2,
            MemberState::Reachable {
                raft_index: 1000,
                raft_applied_index: 1000,
                is_leader: false,
                alarms: vec![],
                errors: vec!["etcdserver: no leader".into()],
            },
        );
        let table = [
            ("healthy", Cluster::healthy(3), Ok(())),
            ("a single voter", Cluster::healthy(1), Ok(())),
            ("no members", Cluster::healthy(0), Err(Reason::NoMembers)),
            (
                "a member not probed",
                unprobed,
                Err(Reason::Unreachable {
                    member: label(3),
                    cause: "not probed".into(),
                }),
            ),
            (
                "one learner at a time",
                Cluster::healthy(3).learner(4, 1000),
                Err(Reason::LearnerPresent { member: label(4) }),
            ),
            (
                "a member has yet to start",
                Cluster::healthy(3).unstarted(4, true),
                Err(Reason::Unstarted { member: unnamed(4) }),
            ),
            (
                "a new voter that never becomes healthy would cost quorum",
                Cluster::healthy(3).unreachable(3),
                Err(Reason::AddRisksQuorum {
                    healthy: 2,
                    voters: 4,
                }),
            ),
            (
                "quorum holds but a member is down",
                Cluster::healthy(5).unreachable(5),
                Err(Reason::Unreachable {
                    member: label(5),
                    cause: "connection refused".into(),
                }),
            ),
            (
                "an alarm",
                Cluster::healthy(5).alarm(2, "NOSPACE"),
                Err(Reason::Alarm {
                    member: label(2),
                    alarm: "NOSPACE".into(),
                }),
            ),
            (
                "errors",
                errors,
                Err(Reason::Errors {
                    member: label(2),
                    errors: vec!["etcdserver: no leader".into()],
                }),
            ),
        ];
        for (case, cluster, expected) in table {
            assert_eq!(may_add_member(cluster.observed()), expected, "{case}");
        }
    }

    #[test]
    fn reasons_name_the_member_and_the_cause() {
        let a = MemberLabel {
            id: 0x8e9e_05c5_2164_694d,
            name: "node-a".into(),
        };
        let table = [
            (
                Reason::Unreachable {
                    member: a.clone(),
                    cause: "connection refused".into(),
                },
                "member 8e9e05c52164694d (node-a) unreachable: connection refused",
            ),
            (
                Reason::QuorumAtRisk {
                    member: a.clone(),
                    healthy: 1,
                    voters: 2,
                },
                "removing member 8e9e05c52164694d (node-a) would leave 1 healthy of 2 voters: quorum needs 2",
            ),
            (
                Reason::Alarm {
                    member: a.clone(),
                    alarm: "NOSPACE".into(),
                },
                "alarm NOSPACE on member 8e9e05c52164694d (node-a)",
            ),
            (
                Reason::LearnerCatchingUp {
                    member: a.clone(),
                    raft_index: 10,
                    leader_raft_index: 1000,
                },
                "learner 8e9e05c52164694d (node-a) is catching up (raft index 10 of 1000)",
            ),
            (
                Reason::Unstarted {
                    member: unnamed(0xab),
                },
                "member ab was added but has not started",
            ),
            (
                Reason::QuorumLost {
                    healthy: 1,
                    voters: 3,
                },
                "etcd has no quorum: 1 of 3 voters healthy, quorum needs 2",
            ),
            (
                Reason::AddRisksQuorum {
                    healthy: 2,
                    voters: 4,
                },
                "adding a member would make 4 voters with 2 healthy: quorum needs 3",
            ),
            (
                Reason::Errors {
                    member: a,
                    errors: vec!["a".into(), "b".into()],
                },
                "member 8e9e05c52164694d (node-a) reports errors: a; b",
            ),
        ];
        for (reason, text) in table {
            assert_eq!(reason.to_string(), text);
        }
    }

    #[test]
    fn learners_and_unstarted_members_are_timed() {
        let cluster = Cluster::healthy(2).learner(3, 10).unstarted(4, false);
        assert_eq!(timed_members(&cluster.members), [3, 4]);
    }
}

/// Random clusters driven by the planner's own actions, with members failing and recovering in between.
#[cfg(test)]
mod simulation {
    use super::*;
    use proptest::prelude::*;
    use proptest::sample::Index;

    #[derive(Clone, Debug)]
    struct MachineSpec {
        deleting: bool,
        hook: bool,
        up_to_date: bool,
        healthy: bool,
        has_node: bool,
    }

    #[derive(Clone, Debug)]
    struct MemberSpec {
        learner: bool,
        unstarted: bool,
        reachable: bool,
        probed: bool,
        alarm: bool,
        lag: u64,
        seen_minutes_ago: Option<i64>,
        machine: Option<MachineSpec>,
    }

    /// What happens between two reconciles.
    #[derive(Clone, Debug)]
    struct Tick {
        minutes: i64,
        flip: Option<Index>,
        catch_up: u64,
    }

    prop_compose! {
        fn machine_spec()(
            deleting in prop::bool::weighted(0.3),
            hook in prop::bool::weighted(0.8),
            up_to_date in any::<bool>(),
            healthy in prop::bool::weighted(0.8),
            has_node in prop::bool::weighted(0.9),
        ) -> MachineSpec {
            MachineSpec { deleting, hook, up_to_date, healthy, has_node }
        }
    }

    prop_compose! {
        fn member_spec()(
            learner in prop::bool::weighted(0.25),
            unstarted in prop::bool::weighted(0.1),
            reachable in prop::bool::weighted(0.85),
            probed in prop::bool::weighted(0.97),
            alarm in prop::bool::weighted(0.05),
            lag in 0u64..300,
            seen_minutes_ago in prop::option::weighted(0.8, 0i64..30),
            machine in prop::option::weighted(0.85, machine_spec()),
        ) -> MemberSpec {
            MemberSpec { learner, unstarted, reachable, probed, alarm, lag, seen_minutes_ago, machine }
        }
    }

    prop_compose! {
        fn tick()(
            minutes in 0i64..8,
            flip in prop::option::weighted(0.4, any::<Index>()),
            catch_up in 0u64..200,
        ) -> Tick {
            Tick { minutes, flip, catch_up }
        }
    }

    #[derive(Clone, Debug)]
    struct Sim {
        members: Vec<Member>,
        states: BTreeMap<u64, MemberState>,
        machines: Vec<EtcdMachine>,
        first_seen: BTreeMap<u64, Timestamp>,
        now: Timestamp,
    }

    impl Sim {
        fn new(
            specs: &[MemberSpec],
            leader: Option<Index>,
            extra_machines: &[MachineSpec],
        ) -> Self {
            let now = Timestamp::from_second(1_750_000_000).unwrap();
            let mut sim = Sim {
                members: Vec::new(),
                states: BTreeMap::new(),
                machines: Vec::new(),
                first_seen: BTreeMap::new(),
                now,
            };
            for (i, spec) in specs.iter().enumerate() {
                let id = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let host = format!("10.0.{i}.1");
                let started = !spec.unstarted;
                sim.members.push(Member {
                    id,
                    name: if started {
                        format!("node-{i}")
                    } else {
                        String::new()
                    },
                    peer_urls: vec![format!("https://{host}:2380")],
                    client_urls: if started {
                        vec![format!("https://{host}:2379")]
                    } else {
                        vec![]
                    },
                    is_learner: spec.learner,
                });
                if started && spec.probed {
                    let state = if spec.reachable {
                        MemberState::Reachable {
                            raft_index: 1000 - spec.lag,
                            raft_applied_index: 1000 - spec.lag,
                            is_leader: false,
                            alarms: if spec.alarm {
                                vec!["NOSPACE".into()]
                            } else {
                                vec![]
                            },
                            errors: vec![],
                        }
                    } else {
                        MemberState::Unreachable("connection refused".into())
                    };
                    sim.states.insert(id, state);
                }
                if let Some(ago) = spec.seen_minutes_ago
                    && (spec.learner || spec.unstarted)
                {
                    sim.first_seen
                        .insert(id, now - SignedDuration::from_mins(ago));
                }
                if let Some(m) = &spec.machine {
                    sim.machines.push(EtcdMachine {
                        name: format!("m-{i}"),
                        node: m.has_node.then(|| format!("node-{i}")),
                        addresses: vec![host],
                        deleting: m.deleting,
                        has_cleanup_hook: m.hook,
                        up_to_date: m.up_to_date,
                        healthy: m.healthy,
                    });
                }
            }
            for (j, m) in extra_machines.iter().enumerate() {
                sim.machines.push(EtcdMachine {
                    name: format!("x-{j}"),
                    node: m.has_node.then(|| format!("other-{j}")),
                    addresses: vec![format!("10.1.{j}.1")],
                    deleting: m.deleting,
                    has_cleanup_hook: m.hook,
                    up_to_date: m.up_to_date,
                    healthy: m.healthy,
                });
            }
            let reachable_voters: Vec<u64> = sim
                .members
                .iter()
                .filter(|m| !m.is_learner && sim.is_reachable(m.id))
                .map(|m| m.id)
                .collect();
            if let Some(pick) = leader.filter(|_| !reachable_voters.is_empty()) {
                sim.make_leader(reachable_voters[pick.index(reachable_voters.len())]);
            }
            sim
        }

        fn observed(&self) -> Observed<'_> {
            Observed {
                members: &self.members,
                states: &self.states,
                machines: &self.machines,
                first_seen: &self.first_seen,
                now: self.now,
                learner_timeout: DEFAULT_LEARNER_TIMEOUT,
                unstarted_grace: DEFAULT_UNSTARTED_GRACE,
            }
        }

        fn is_reachable(&self, id: u64) -> bool {
            matches!(self.states.get(&id), Some(MemberState::Reachable { .. }))
        }

        fn leader(&self) -> Option<(u64, u64)> {
            self.states.iter().find_map(|(id, s)| match s {
                MemberState::Reachable {
                    raft_index,
                    is_leader: true,
                    ..
                } => Some((*id, *raft_index)),
                _ => None,
            })
        }

        fn make_leader(&mut self, leader: u64) {
            for (id, state) in &mut self.states {
                if let MemberState::Reachable {
                    is_leader,
                    raft_index,
                    ..
                } = state
                {
                    *is_leader = *id == leader;
                    if *id == leader {
                        *raft_index = (*raft_index).max(1000);
                    }
                }
            }
        }

        fn member(&self, id: u64) -> &Member {
            self.members
                .iter()
                .find(|m| m.id == id)
                .unwrap_or_else(|| panic!("action names unknown member {id:x}"))
        }

        fn learners(&self) -> usize {
            self.members.iter().filter(|m| m.is_learner).count()
        }

        /// The property: a voter leaves only when the reachable voters left are a quorum of the voters left.
        fn remove(&mut self, id: u64) {
            if !self.member(id).is_learner {
                let voters_left = self.members.iter().filter(|m| !m.is_learner).count() - 1;
                let reachable_left = self
                    .members
                    .iter()
                    .filter(|m| !m.is_learner && m.id != id && self.is_reachable(m.id))
                    .count();
                assert!(
                    reachable_left >= quorum(voters_left),
                    "removing voter {id:x} leaves {reachable_left} reachable of {voters_left}"
                );
            }
            self.members.retain(|m| m.id != id);
            self.states.remove(&id);
            self.first_seen.remove(&id);
        }

        fn hooked_machine(&self, name: &str) -> &EtcdMachine {
            let machine = self
                .machines
                .iter()
                .find(|m| m.name == name)
                .unwrap_or_else(|| panic!("action names unknown Machine {name}"));
            assert!(machine.deleting && machine.has_cleanup_hook, "{machine:?}");
            machine
        }

        fn apply(&mut self, action: &Action) {
            match action {
                Action::Promote { member } => {
                    let learner = self.member(*member);
                    assert!(learner.is_learner && learner.is_started());
                    let (_, leader_index) = self.leader().expect("promotion without a leader");
                    match self.states.get(member) {
                        Some(MemberState::Reachable { raft_index, .. }) => {
                            assert!(u128::from(*raft_index) * 10 >= u128::from(leader_index) * 9)
                        }
                        other => panic!("promoted a learner in state {other:?}"),
                    }
                    self.members
                        .iter_mut()
                        .filter(|m| m.id == *member)
                        .for_each(|m| m.is_learner = false);
                }
                Action::RemoveStuckLearner { member, .. } => {
                    assert!(self.member(*member).is_learner);
                    self.remove(*member);
                }
                Action::RemoveUnstartedMember { member, .. } => {
                    assert!(!self.member(*member).is_started());
                    self.remove(*member);
                }
                Action::MoveLeader { from, to } => {
                    assert_eq!(self.leader().map(|(id, _)| id), Some(*from));
                    assert!(!self.member(*to).is_learner && self.is_reachable(*to));
                    self.make_leader(*to);
                }
                Action::RemoveMember { member, machine } => {
                    self.hooked_machine(machine);
                    self.remove(*member);
                    // The hook is released and the Machine goes.
                    self.machines.retain(|m| m.name != *machine);
                }
                Action::ReleaseHook { machine } => {
                    let hooked = self.hooked_machine(machine);
                    let owns_member = self
                        .members
                        .iter()
                        .any(|m| member_machine(m, &self.machines) == Some(hooked));
                    assert!(!owns_member || self.machines.len() == 1);
                    self.machines.retain(|m| m.name != *machine);
                }
                Action::RemoveOrphan { member } => {
                    assert_eq!(member_machine(self.member(*member), &self.machines), None);
                    self.remove(*member);
                }
                Action::Wait(_) | Action::Nothing => {}
            }
        }

        /// Time passes, a member may fail or recover, learners catch up, and a leaderless majority elects one.
        fn tick(&mut self, tick: &Tick) {
            self.now += SignedDuration::from_mins(tick.minutes);
            if let Some(flip) = &tick.flip
                && !self.members.is_empty()
            {
                let member = &self.members[flip.index(self.members.len())];
                let id = member.id;
                if member.is_started() {
                    let state = if self.is_reachable(id) {
                        MemberState::Unreachable("partitioned".into())
                    } else {
                        MemberState::Reachable {
                            raft_index: 990,
                            raft_applied_index: 990,
                            is_leader: false,
                            alarms: vec![],
                            errors: vec![],
                        }
                    };
                    self.states.insert(id, state);
                }
            }
            let leader_index = self.leader().map_or(1000, |(_, index)| index);
            for member in self.members.iter().filter(|m| m.is_learner) {
                if let Some(MemberState::Reachable { raft_index, .. }) =
                    self.states.get_mut(&member.id)
                {
                    *raft_index = (*raft_index + tick.catch_up).min(leader_index);
                }
            }
            if self.leader().is_none() {
                let voters = self.members.iter().filter(|m| !m.is_learner).count();
                let mut reachable = self
                    .members
                    .iter()
                    .filter(|m| !m.is_learner && self.is_reachable(m.id))
                    .map(|m| m.id);
                if let Some(first) = reachable.next()
                    && reachable.count() + 1 >= quorum(voters)
                {
                    self.make_leader(first);
                }
            }
            for id in timed_members(&self.members) {
                self.first_seen.entry(id).or_insert(self.now);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn the_planner_never_costs_quorum(
            specs in prop::collection::vec(member_spec(), 1..=7),
            leader in prop::option::weighted(0.9, any::<Index>()),
            extra_machines in prop::collection::vec(machine_spec(), 0..3),
            ticks in prop::collection::vec(tick(), 1..12),
        ) {
            let mut sim = Sim::new(&specs, leader, &extra_machines);
            let at_most_one_learner = sim.learners() <= 1;
            for tick in &ticks {
                let action = next_action(sim.observed());
                sim.apply(&action);
                if at_most_one_learner {
                    prop_assert!(sim.learners() <= 1);
                }
                sim.tick(tick);
            }
        }

        #[test]
        fn the_planner_is_deterministic(
            specs in prop::collection::vec(member_spec(), 1..=7),
            leader in prop::option::weighted(0.9, any::<Index>()),
            extra_machines in prop::collection::vec(machine_spec(), 0..3),
        ) {
            let sim = Sim::new(&specs, leader, &extra_machines);
            let action = next_action(sim.observed());
            prop_assert_eq!(&action, &next_action(sim.observed()));
            let mut shuffled = sim.clone();
            shuffled.members.reverse();
            shuffled.machines.reverse();
            prop_assert_eq!(&action, &next_action(shuffled.observed()), "list order must not matter");
        }
    }
}
