//! Random clusters driven by the planner's own actions, with members failing and recovering in between.
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
    /// A leader this controller no longer reaches is replaced by an election (cut off from the members
    /// too); otherwise the members keep following it (cut off from this controller alone).
    elect: bool,
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
        elect in prop::bool::weighted(0.7),
    ) -> Tick {
        Tick { minutes, flip, catch_up, elect }
    }
}

#[derive(Clone, Debug)]
struct Sim {
    members: Vec<Member>,
    states: BTreeMap<u64, MemberState>,
    machines: Vec<EtcdMachine>,
    first_seen: BTreeMap<u64, Timestamp>,
    /// The leader the members follow, reachable or not.
    agreed_leader: Option<u64>,
    now: Timestamp,
}

impl Sim {
    fn new(specs: &[MemberSpec], leader: Option<Index>, extra_machines: &[MachineSpec]) -> Self {
        let now = Timestamp::from_second(1_750_000_000).unwrap();
        let mut sim = Sim {
            members: Vec::new(),
            states: BTreeMap::new(),
            machines: Vec::new(),
            first_seen: BTreeMap::new(),
            agreed_leader: None,
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
                    draining: false,
                    waits_for_hooks: Vec::new(),
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
                draining: false,
                waits_for_hooks: Vec::new(),
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
            agreed_leader: self.agreed_leader,
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
        self.agreed_leader = Some(leader);
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
        if self.agreed_leader == Some(id) {
            self.agreed_leader = None;
        }
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
            Action::MoveLeader { from, to, .. } => {
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
            if let Some(MemberState::Reachable { raft_index, .. }) = self.states.get_mut(&member.id)
            {
                *raft_index = (*raft_index + tick.catch_up).min(leader_index);
            }
        }
        let followed = self
            .agreed_leader
            .is_some_and(|id| self.members.iter().any(|m| m.id == id));
        if self.leader().is_none() && (tick.elect || !followed) {
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
