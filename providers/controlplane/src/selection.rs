//! Where a new machine goes and which machine goes first: failure-domain spreading as Cluster API does it.

use std::collections::BTreeMap;

use crate::machines::ControlPlaneMachine;

/// The failure domain for a new machine: among `failure_domains` (those marked for control planes), the
/// one with the fewest up-to-date machines, then the fewest machines, then the first by name. `None` when
/// the infrastructure has no failure domains. A machine with only Cluster API's cleanup left does not count.
pub fn failure_domain_for_scale_up(
    failure_domains: &[String],
    machines: &[ControlPlaneMachine],
    up_to_date: &[&str],
) -> Option<String> {
    let count = |domain: &str, only_up_to_date: bool| {
        crate::preflight::standing(machines)
            .filter(|m| m.failure_domain.as_deref() == Some(domain))
            .filter(|m| !only_up_to_date || up_to_date.contains(&m.name.as_str()))
            .count()
    };
    failure_domains
        .iter()
        .min_by_key(|domain| (count(domain, true), count(domain, false), domain.as_str()))
        .cloned()
}

/// The machine to delete when scaling down: candidates are, in order of preference, outdated machines marked
/// with the delete annotation, any marked machine, outdated machines, or else all machines; among the
/// candidates, the oldest one in the failure domain that has the most machines.
pub fn machine_for_scale_down<'a>(
    machines: &'a [ControlPlaneMachine],
    outdated: &[&str],
) -> Option<&'a ControlPlaneMachine> {
    let is_outdated = |m: &&ControlPlaneMachine| outdated.contains(&m.name.as_str());
    let live: Vec<&ControlPlaneMachine> = machines.iter().filter(|m| !m.deleting).collect();
    let marked_outdated: Vec<_> = live
        .iter()
        .copied()
        .filter(|m| m.marked_for_deletion && is_outdated(m))
        .collect();
    let marked: Vec<_> = live
        .iter()
        .copied()
        .filter(|m| m.marked_for_deletion)
        .collect();
    let stale: Vec<_> = live.iter().copied().filter(is_outdated).collect();
    let candidates = [marked_outdated, marked, stale, live.clone()]
        .into_iter()
        .find(|set| !set.is_empty())?;

    // Machines per failure domain, over all live machines (a machine without a domain counts under "").
    let mut per_domain: BTreeMap<&str, usize> = BTreeMap::new();
    for m in &live {
        *per_domain.entry(domain(m)).or_default() += 1;
    }
    let busiest = candidates
        .iter()
        .map(|m| domain(m))
        .max_by_key(|d| (per_domain[d], std::cmp::Reverse(*d)))?;
    candidates
        .into_iter()
        .filter(|m| domain(m) == busiest)
        .min_by_key(|m| (m.created, m.name.clone()))
}

fn domain(machine: &ControlPlaneMachine) -> &str {
    machine.failure_domain.as_deref().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, domain: Option<&str>, created_day: u8) -> ControlPlaneMachine {
        ControlPlaneMachine {
            name: name.into(),
            failure_domain: domain.map(Into::into),
            created: format!("2026-01-{created_day:02}T00:00:00Z")
                .parse()
                .unwrap(),
            ..Default::default()
        }
    }

    fn domains() -> Vec<String> {
        vec!["az1".into(), "az2".into(), "az3".into()]
    }

    #[test]
    fn scale_up_fills_the_domain_with_fewest_up_to_date_machines() {
        let machines = [
            m("a", Some("az1"), 1),
            m("b", Some("az2"), 2),
            m("c", Some("az2"), 3),
        ];
        assert_eq!(
            failure_domain_for_scale_up(&domains(), &machines, &["a", "b", "c"]).as_deref(),
            Some("az3")
        );
        // During a rollout, old machines do not hold a domain's place: az1's machine is outdated.
        let machines = [
            m("a", Some("az1"), 1),
            m("b", Some("az2"), 2),
            m("c", Some("az3"), 3),
        ];
        assert_eq!(
            failure_domain_for_scale_up(&domains(), &machines, &["b", "c"]).as_deref(),
            Some("az1")
        );
        // Ties on up-to-date machines go to the domain with fewer machines overall, then by name.
        assert_eq!(
            failure_domain_for_scale_up(&domains(), &machines, &[]).as_deref(),
            Some("az1")
        );
        assert_eq!(failure_domain_for_scale_up(&[], &machines, &[]), None);
    }

    #[test]
    fn scale_down_takes_the_oldest_in_the_busiest_domain() {
        let machines = [
            m("a", Some("az1"), 1),
            m("b", Some("az2"), 2),
            m("c", Some("az2"), 3),
            m("d", Some("az3"), 4),
        ];
        assert_eq!(machine_for_scale_down(&machines, &[]).unwrap().name, "b");
    }

    #[test]
    fn outdated_and_marked_machines_go_first() {
        let mut machines = vec![
            m("a", Some("az1"), 1),
            m("b", Some("az2"), 2),
            m("c", Some("az2"), 3),
            m("d", Some("az3"), 4),
        ];
        assert_eq!(machine_for_scale_down(&machines, &["d"]).unwrap().name, "d");
        machines[0].marked_for_deletion = true;
        assert_eq!(machine_for_scale_down(&machines, &["d"]).unwrap().name, "a");
        machines[3].marked_for_deletion = true;
        assert_eq!(machine_for_scale_down(&machines, &["d"]).unwrap().name, "d");
    }

    #[test]
    fn a_rollout_without_failure_domains_replaces_oldest_first() {
        let mut machines = vec![m("new", None, 9), m("old2", None, 2), m("old1", None, 1)];
        assert_eq!(
            machine_for_scale_down(&machines, &["old1", "old2"])
                .unwrap()
                .name,
            "old1"
        );
        machines[2].deleting = true;
        assert_eq!(
            machine_for_scale_down(&machines, &["old1", "old2"])
                .unwrap()
                .name,
            "old2"
        );
    }
}
