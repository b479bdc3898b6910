use super::*;
use crate::desired::fixtures::desired;
use crate::machines::ClonedFrom;

fn now() -> Timestamp {
    "2026-11-01T00:00:00Z".parse().unwrap()
}

/// A joined, healthy machine named `name`, created `age` minutes before [`now`], cloned from `template`.
fn machine(name: &str, age: i64, domain: &str, template: &str) -> ControlPlaneMachine {
    let built_for = desired(3, template, 1);
    ControlPlaneMachine {
        name: name.into(),
        created: now() - k8s_openapi::jiff::SignedDuration::from_mins(age),
        version: Some(built_for.version.clone()),
        failure_domain: (!domain.is_empty()).then(|| domain.to_owned()),
        node: Some(format!("node-{name}")),
        ready: true,
        available: true,
        cloned_from: Some(ClonedFrom {
            name: template.into(),
            group_kind: built_for.infrastructure.group_kind.clone(),
        }),
        kubeadm_config: Some(built_for.join.clone()),
        health: MachineHealth {
            components: Health::Healthy,
            etcd: Health::Healthy,
        },
        ..Default::default()
    }
}

fn run(desired: &DesiredState, machines: &[ControlPlaneMachine], domains: &[&str]) -> Preview {
    let domains: Vec<String> = domains.iter().map(|d| d.to_string()).collect();
    preview(
        Observed {
            desired,
            machines,
            failure_domains: &domains,
            etcd_refuses_member: None,
        },
        now(),
    )
}

/// The steps as `+name@domain` and `-name`.
fn short(preview: &Preview) -> Vec<String> {
    preview
        .steps
        .iter()
        .map(|a| match a {
            Action::Create {
                name,
                failure_domain,
                ..
            } => format!("+{name}@{}", failure_domain.as_deref().unwrap_or("")),
            Action::Delete { machine, .. } => format!("-{machine}"),
        })
        .collect()
}

fn three_old() -> Vec<ControlPlaneMachine> {
    vec![
        machine("a", 30, "az1", "cp-genc01"),
        machine("b", 20, "az2", "cp-genc01"),
        machine("c", 10, "az3", "cp-genc01"),
    ]
}

#[test]
fn a_generation_bump_replaces_each_machine_create_first_oldest_first() {
    let desired = desired(3, "cp-genc02", 1);
    let preview = run(&desired, &three_old(), &["az1", "az2", "az3"]);
    assert_eq!(
        short(&preview),
        ["+new-1@az1", "-a", "+new-2@az2", "-b", "+new-3@az3", "-c"]
    );
    assert_eq!(preview.stops, None);
    assert!(preview.blocked_now.is_empty());
    assert_eq!(
        preview.outdated["a"],
        [Outdated::InfrastructureTemplate {
            from: "cp-genc01".into(),
            to: "cp-genc02".into()
        }]
    );
    let Action::Delete {
        purpose, reasons, ..
    } = &preview.steps[1]
    else {
        panic!("{:?}", preview.steps[1]);
    };
    assert_eq!(*purpose, Purpose::Rollout);
    assert_eq!(reasons, &preview.outdated["a"]);
}

#[test]
fn with_max_surge_0_each_machine_goes_before_its_replacement_comes() {
    let desired = desired(3, "cp-genc02", 0);
    let preview = run(&desired, &three_old(), &[]);
    assert_eq!(
        short(&preview),
        ["-a", "+new-1@", "-b", "+new-2@", "-c", "+new-3@"]
    );
}

#[test]
fn a_control_plane_that_matches_its_spec_has_no_step() {
    let desired = desired(3, "cp-genc01", 1);
    let preview = run(&desired, &three_old(), &[]);
    assert!(preview.steps.is_empty());
    assert!(preview.outdated.is_empty());
    assert_eq!(preview.up_to_date, ["a", "b", "c"]);
    assert!(preview.to_string().contains("Steps: none"));
}

#[test]
fn scaling_up_from_nothing_initializes_then_joins() {
    let desired = desired(3, "cp-genc01", 1);
    let preview = run(&desired, &[], &["az1", "az2"]);
    assert_eq!(short(&preview), ["+new-1@az1", "+new-2@az2", "+new-3@az1"]);
    assert!(matches!(
        preview.steps[0],
        Action::Create {
            initialize: true,
            ..
        }
    ));
    assert!(matches!(
        preview.steps[1],
        Action::Create {
            initialize: false,
            purpose: Purpose::Scale,
            ..
        }
    ));
}

#[test]
fn scaling_down_names_the_machines_without_reasons() {
    let desired = desired(1, "cp-genc01", 1);
    let preview = run(&desired, &three_old(), &[]);
    assert_eq!(short(&preview), ["-a", "-b"]);
    assert!(matches!(
        &preview.steps[0],
        Action::Delete { purpose: Purpose::Scale, reasons, .. } if reasons.is_empty()
    ));
}

#[test]
fn what_blocks_now_is_shown_and_the_order_still_previewed() {
    let desired = desired(3, "cp-genc02", 1);
    let mut machines = three_old();
    machines[1].health.etcd = Health::Unhealthy("member is not started".into());
    let preview = run(&desired, &machines, &[]);
    assert_eq!(
        preview.blocked_now,
        [Blocker::EtcdUnhealthy {
            machine: "b".into(),
            reason: "member is not started".into()
        }]
    );
    assert_eq!(short(&preview).len(), 6);
    let text = preview.to_string();
    assert!(
        text.contains("Machine b: etcd member not healthy: member is not started"),
        "{text}"
    );
}

#[test]
fn a_machine_being_deleted_is_assumed_gone() {
    let desired = desired(3, "cp-genc02", 1);
    let mut machines = three_old();
    machines[0].deleting = true;
    let preview = run(&desired, &machines, &[]);
    assert_eq!(preview.deleting, ["a"]);
    assert_eq!(preview.blocked_now, [Blocker::MachineDeleting("a".into())]);
    assert_eq!(
        short(&preview),
        ["+new-1@", "+new-2@", "-b", "+new-3@", "-c"]
    );
}

#[test]
fn the_text_names_every_step_and_its_etcd_part() {
    let desired = desired(1, "cp-genc02", 1);
    let machines = [machine("a", 30, "", "cp-genc01")];
    let text = run(&desired, &machines, &[]).to_string();
    assert_eq!(
        text,
        "\
1 replicas, rolling update: create first (maxSurge 1)
Outdated machines:
  a:
    * infrastructure template cp-genc01, cp-genc02 required
Blocked now: nothing
Steps (one per reconcile, each once the one before has finished):
  1. create a machine (rollout), called new-1 below
     etcd: joins as a learner (one at a time), promoted to voter once in sync
  2. delete a (rollout): infrastructure template cp-genc01, cp-genc02 required
     etcd: quorum checked without it; if it leads, leadership moves to a healthy voter on a machine that stays; its member is removed before the Machine's pre-terminate hook is released
"
    );
}
