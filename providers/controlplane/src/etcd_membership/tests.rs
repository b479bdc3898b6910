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
        draining: false,
        waits_for_hooks: Vec::new(),
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
    agreed_leader: Option<u64>,
}

impl Cluster {
    /// `n` healthy voters with their Machines, all at raft index 1000; member 1 leads.
    fn healthy(n: u64) -> Self {
        let mut cluster = Cluster {
            members: (1..=n).map(voter).collect(),
            states: (1..=n).map(|id| (id, reachable(1000))).collect(),
            machines: (1..=n).map(machine).collect(),
            first_seen: BTreeMap::new(),
            agreed_leader: None,
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
            agreed_leader: self.agreed_leader,
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
        self.agreed_leader = (id != 0).then_some(id);
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

/// Cluster API v1.14.2 (kubernetes-sigs/cluster-api#14208, fixing #14197): its provider removed a learner
/// that had not started yet (no name) as soon as the joining Machine's Node registered, which the kubelet
/// does before kubeadm's etcd static pod runs, and so killed joins. Here an unstarted member belongs to
/// the Machine whose address its peer URL names, Node or not, and goes only after its grace.
#[test]
fn an_unstarted_learner_whose_node_registered_is_kept_within_its_grace() {
    let joining = Cluster::healthy(3).unstarted(4, true);
    assert!(
        joining.machines[3].node.is_some(),
        "the joining Machine's Node registered"
    );
    assert_eq!(
        member_machine(&joining.members[3], &joining.machines).map(|m| m.name.as_str()),
        Some("m-4")
    );
    assert_eq!(
        joining.clone().seen(4, 4).next(),
        Action::Wait(Reason::Unstarted { member: unnamed(4) })
    );
    assert_eq!(
        joining.seen(4, 5).next(),
        Action::RemoveUnstartedMember {
            member: 4,
            machine: Some("m-4".into()),
        }
    );
}

/// Cluster API v1.14.3 (kubernetes-sigs/cluster-api#14263): the member of a Machine being deleted is found
/// even when the Machine has no usable nodeRef, by its address; its member is removed before the hook is
/// released, not left behind as a dead voter.
#[test]
fn the_member_of_a_deleting_machine_without_a_node_is_removed_before_its_hook_is_released() {
    let without_node = Cluster::healthy(3)
        .deleting(3)
        .with_machine("m-3", |m| m.node = None);
    let members: Vec<&Member> = without_node.members.iter().collect();
    assert_eq!(
        machine_member(&without_node.machines[2], &members, &without_node.machines).map(|m| m.id),
        Some(3)
    );
    assert_eq!(
        without_node.next(),
        Action::RemoveMember {
            member: 3,
            machine: "m-3".into(),
        }
    );
    // A Machine whose Node is another's is not matched by address: the name decides.
    let renamed = Cluster::healthy(3).with_machine("m-3", |m| m.node = Some("elsewhere".into()));
    let members: Vec<&Member> = renamed.members.iter().collect();
    assert_eq!(
        machine_member(&renamed.machines[2], &members, &renamed.machines),
        None
    );
}

/// kubeadm promotes its own learner before the kubelet registers the Node; promoting it first makes
/// kubeadm's promotion fail ("can only promote a learner member") and the join with it. A started
/// learner of a Machine without a Node is kubeadm's.
#[test]
fn a_learner_whose_machine_has_no_node_yet_is_left_to_kubeadm() {
    let joining = Cluster::healthy(3)
        .learner(4, 1000)
        .with_machine("m-4", |m| m.node = None);
    assert_ne!(joining.next(), Action::Promote { member: 4 });
    // Once its Node is there (kubeadm's promotion timed out), a learner that caught up is promoted.
    let registered = Cluster::healthy(3).learner(4, 1000);
    assert_eq!(registered.next(), Action::Promote { member: 4 });
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
            Action::MoveLeader {
                from: 1,
                to: 2,
                then: vec![3],
            },
        ),
        (
            "to an up-to-date Machine",
            leaving
                .clone()
                .with_machine("m-2", |m| m.up_to_date = false),
            Action::MoveLeader {
                from: 1,
                to: 3,
                then: vec![2],
            },
        ),
        (
            "to a Machine with healthy components",
            leaving.clone().with_machine("m-2", |m| m.healthy = false),
            Action::MoveLeader {
                from: 1,
                to: 3,
                then: vec![2],
            },
        ),
        (
            "to the lowest id when none is perfect",
            leaving
                .clone()
                .with_machine("m-2", |m| m.up_to_date = false)
                .with_machine("m-3", |m| m.healthy = false),
            Action::MoveLeader {
                from: 1,
                to: 2,
                then: vec![3],
            },
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
            "five with one down hold a healthy one",
            Cluster::healthy(5).deleting(2).unreachable(4),
            Action::Wait(Reason::Unreachable {
                member: label(4),
                cause: "connection refused".into(),
            }),
        ),
        (
            "four with one down hold a healthy one",
            Cluster::healthy(4).deleting(2).unreachable(4),
            Action::Wait(Reason::Unreachable {
                member: label(4),
                cause: "connection refused".into(),
            }),
        ),
        (
            "five with one down let another down one go",
            Cluster::healthy(5)
                .deleting(2)
                .unreachable(2)
                .unreachable(4),
            remove(2),
        ),
        (
            "a learner catching up holds nothing",
            Cluster::healthy(4).deleting(2).learner(5, 10),
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
            Action::MoveLeader {
                from: 1,
                to: 2,
                then: vec![3],
            },
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

#[test]
fn a_leaving_machine_keeps_its_member_until_its_node_is_drained() {
    // Cluster API drains the node before it waits for pre-terminate hooks: removing the member
    // earlier would take the node's API server down under the drain.
    let draining = Cluster::healthy(3).with_machine("m-3", |m| {
        m.deleting = true;
        m.draining = true;
    });
    assert_eq!(
        draining.next(),
        Action::Wait(Reason::Draining {
            machine: "m-3".into()
        })
    );
    let drained = draining.with_machine("m-3", |m| m.draining = false);
    assert_eq!(
        drained.next(),
        Action::RemoveMember {
            member: 3,
            machine: "m-3".into()
        }
    );
    // A machine without a member waits for the drain too before its hook is released.
    let memberless = Cluster::healthy(3).with_machine("m-9", |m| {
        m.deleting = true;
        m.draining = true;
    });
    assert_eq!(
        memberless.next(),
        Action::Wait(Reason::Draining {
            machine: "m-9".into()
        })
    );
}

#[test]
fn a_leaving_machine_keeps_its_member_until_other_pre_terminate_hooks_are_gone() {
    // Cluster API's provider runs its hook last: other hooks may still need the node's kubelet and etcd.
    let hooked = Cluster::healthy(3).with_machine("m-3", |m| {
        m.deleting = true;
        m.waits_for_hooks =
            vec!["pre-terminate.delete.hook.machine.cluster.x-k8s.io/backup".into()];
    });
    let wait = hooked.next();
    assert_eq!(
        wait,
        Action::Wait(Reason::OtherHooks {
            machine: "m-3".into(),
            hooks: vec!["pre-terminate.delete.hook.machine.cluster.x-k8s.io/backup".into()],
        })
    );
    let Action::Wait(reason) = wait else {
        unreachable!()
    };
    assert_eq!(
        reason.to_string(),
        "Machine m-3 waits for other pre-terminate hooks \
         (pre-terminate.delete.hook.machine.cluster.x-k8s.io/backup): the control plane's runs last"
    );
    let released = hooked.with_machine("m-3", |m| m.waits_for_hooks.clear());
    assert_eq!(
        released.next(),
        Action::RemoveMember {
            member: 3,
            machine: "m-3".into()
        }
    );
}

/// Member 1 leads and the others follow it, but this controller cannot reach it (its node's kubelet or
/// the route to it is down).
fn leader_cut_off_from_us() -> Cluster {
    Cluster::healthy(3).unreachable(1)
}

#[test]
fn a_leader_only_the_members_reach_is_removed_through_a_follower_without_handing_over() {
    let cluster = leader_cut_off_from_us().deleting(1);
    assert_eq!(
        cluster.next(),
        Action::RemoveMember {
            member: 1,
            machine: "m-1".into()
        }
    );
}

#[test]
fn a_leader_only_the_members_reach_still_guards_quorum() {
    // Without the unreachable leader, removing 3 would leave 2 with only one that answers.
    let cluster = leader_cut_off_from_us().deleting(3);
    assert!(
        matches!(
            cluster.next(),
            Action::Wait(Reason::QuorumAtRisk { ref member, .. }) if member.id == 3
        ),
        "{:?}",
        cluster.next()
    );
}

#[test]
fn learners_wait_while_the_leader_does_not_answer() {
    let cluster = leader_cut_off_from_us().learner(4, 1000);
    assert_eq!(
        cluster.next(),
        Action::Wait(Reason::Unreachable {
            member: label(1),
            cause: "it leads, and only the other members reach it".into()
        })
    );
}

#[test]
fn a_leader_nobody_answers_for_is_no_leader() {
    // The members name a leader that answers and denies leading (stale), or none at all.
    let stale = Cluster::healthy(3).leader(0).deleting(1);
    let stale = Cluster {
        agreed_leader: Some(1),
        ..stale
    };
    assert_eq!(stale.next(), Action::Wait(Reason::NoLeader));
    let none = leader_cut_off_from_us().deleting(1);
    let none = Cluster {
        agreed_leader: None,
        ..none
    };
    assert_eq!(none.next(), Action::Wait(Reason::NoLeader));
}
