//! Access to a workload cluster's etcd: what the membership looks like and the few changes the controller
//! makes to it (add, promote and remove learners, remove members, move leadership) plus maintenance
//! (defragment, compact, snapshot).
//!
//! The decisions live in the membership planner; this module only reads and writes. Every call has a
//! timeout and names the endpoint and the operation when it fails. The client certificate comes from
//! [`tls`], signed by the cluster's etcd CA.

pub mod client;
pub mod port_forward;
pub mod tls;

use std::collections::BTreeMap;

pub use client::{EtcdClientConfig, EtcdClients, EtcdError, TlsProblem, WorkloadEtcd, tls_problem};
pub use port_forward::{EtcdAccess, PortForwards};
pub use tls::{EtcdClientCert, EtcdTlsError, issue_client_cert};

/// One entry of etcd's member list, in the one type the planner, maintenance and remediation share.
pub use crate::etcd_membership::Member;

/// What one member says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// The answering member's ID.
    pub id: u64,
    /// The leader this member follows; 0 while there is none.
    pub leader: u64,
    pub raft_index: u64,
    pub raft_term: u64,
    pub raft_applied_index: u64,
    /// Current key-value store revision of this member (for compaction).
    pub revision: i64,
    /// Size of the backend database file, in bytes.
    pub db_size: i64,
    /// Bytes of the database file in use; the rest is reclaimed by defragmentation.
    pub db_size_in_use: i64,
    pub is_learner: bool,
    /// Errors the member reports about itself (e.g. a raised alarm).
    pub errors: Vec<String>,
    /// etcd server version, e.g. `3.4.23`.
    pub version: String,
}

/// An alarm raised on a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AlarmKind {
    /// The database reached its space quota; etcd accepts only reads and deletes until it is
    /// compacted, defragmented and the alarm disarmed.
    NoSpace,
    /// Data corruption was detected.
    Corrupt,
}

/// The whole membership with each member's own view, gathered in one pass so that decisions are never taken
/// on a partial list.
#[derive(Debug)]
pub struct Observation {
    pub members: Vec<Member>,
    /// Status of every member that has a client URL, asked at that URL. Unstarted members have no entry.
    pub states: BTreeMap<u64, Result<Status, EtcdError>>,
    /// Alarms raised in the cluster: (member ID, kind).
    pub alarms: Vec<(u64, AlarmKind)>,
    /// The leader most reachable members agree on.
    pub leader: Option<u64>,
}

impl Observation {
    /// The member with `id`, if listed.
    pub fn member(&self, id: u64) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    /// Client URL of the current leader, where leader-only calls (move leader) must go.
    pub fn leader_endpoint(&self) -> Option<&str> {
        let leader = self.member(self.leader?)?;
        leader.client_urls.first().map(String::as_str)
    }

    /// Every place a membership change may go, best first: the leader when it answered, then the other
    /// voters that answered and follow a leader, by ID (each forwards the change to the leader: the
    /// leader may be cut off from this controller alone, its node's kubelet down or a route gone, while
    /// the members still reach it); never `except`, the member the change removes, whose answer may be
    /// lost as it leaves. etcd checks a
    /// removal against the connections of the member it is sent to: one that joined a moment ago (a
    /// new leader, after a hand-over) refuses it as "unhealthy cluster" for its first 5 s, where a
    /// voter of longer standing takes it.
    pub fn proposer_endpoints(&self, except: Option<u64>) -> Vec<&str> {
        let answered = |id: u64| {
            Some(id) != except
                && matches!(self.states.get(&id), Some(Ok(status)) if status.leader != 0 && !status.is_learner)
        };
        let leader = self.leader.filter(|id| answered(*id));
        let mut others: Vec<u64> = self
            .members
            .iter()
            .map(|m| m.id)
            .filter(|id| answered(*id) && Some(*id) != leader)
            .collect();
        others.sort_unstable();
        leader
            .into_iter()
            .chain(others)
            .filter_map(|id| self.member(id)?.client_urls.first().map(String::as_str))
            .collect()
    }
}
