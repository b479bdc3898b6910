//! Remediation of unhealthy control-plane Machines by delete and recreate, as Cluster API's control-plane
//! provider does it: which machine goes first, whether losing it now is safe, and how retries of a
//! replacement that fails again are counted. The replacement itself is an ordinary scale up.
//!
//! A Machine asks for remediation when a MachineHealthCheck marks it (`HealthCheckSucceeded` and
//! `OwnerRemediated` False) or when it carries `cluster.x-k8s.io/remediate-machine`, which this provider
//! also sets on a machine whose etcd member it had to remove (a learner that never caught up), so that
//! machine is replaced even where no MachineHealthCheck watches the control plane.

use std::collections::BTreeMap;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlaneRemediationSpec;
use serde::{Deserialize, Serialize};

use crate::etcd_membership;
use crate::machines::{ControlPlaneMachine, Health};

/// The Machine conditions and `OwnerRemediated` reasons, as Cluster API's control-plane provider reports
/// them.
pub use kubeadm_api::controlplane::conditions::machine::{
    HEALTH_CHECK_SUCCEEDED as HEALTH_CHECK_SUCCEEDED_CONDITION,
    OWNER_REMEDIATED as OWNER_REMEDIATED_CONDITION,
};
pub use kubeadm_api::controlplane::conditions::reasons::{
    CANNOT_BE_REMEDIATED as CANNOT_REMEDIATE_REASON, MACHINE_DELETING as MACHINE_DELETING_REASON,
    REMEDIATION_DEFERRED as DEFERRED_REASON,
};

/// A failure within this period after a remediation makes the next remediation a retry.
pub const DEFAULT_MIN_HEALTHY_PERIOD: SignedDuration = SignedDuration::from_hours(1);

/// One remediation: which machine was replaced, when, and how many retries led to it. Stored as JSON in
/// [`REMEDIATION_IN_PROGRESS_ANNOTATION`](kubeadm_api::meta::REMEDIATION_IN_PROGRESS_ANNOTATION) and [`REMEDIATION_FOR_ANNOTATION`](kubeadm_api::meta::REMEDIATION_FOR_ANNOTATION), in the shape Cluster API uses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemediationData {
    pub machine: String,
    /// `None` when the annotation was written without a time (treated as long ago).
    #[serde(default)]
    pub timestamp: Option<Timestamp>,
    #[serde(default)]
    pub retry_count: i32,
}

impl RemediationData {
    /// Reads an annotation value; an unreadable one is reported, so nobody loses a retry count silently.
    pub fn parse(value: &str) -> Result<Self, String> {
        serde_json::from_str(value).map_err(|e| format!("not remediation data ({e}): {value}"))
    }

    /// The annotation value, with the time in whole seconds like a Kubernetes timestamp.
    pub fn to_annotation(&self) -> String {
        let whole = RemediationData {
            timestamp: self
                .timestamp
                .and_then(|t| Timestamp::from_second(t.as_second()).ok()),
            ..self.clone()
        };
        serde_json::to_string(&whole).unwrap_or_default()
    }
}

/// `spec.remediation` with its defaults applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Retries allowed for a machine whose replacements keep failing; unlimited when `None`.
    pub max_retry: Option<i32>,
    /// How long to wait after a remediation before retrying it.
    pub retry_period: SignedDuration,
    /// A replacement healthy this long is no longer a retry when it fails.
    pub min_healthy_period: SignedDuration,
}

impl Settings {
    pub fn of(spec: Option<&KubeadmControlPlaneRemediationSpec>) -> Self {
        let seconds = |s: Option<i32>| s.map(|s| SignedDuration::from_secs(i64::from(s.max(0))));
        Settings {
            max_retry: spec.and_then(|s| s.max_retry),
            retry_period: seconds(spec.and_then(|s| s.retry_period_seconds)).unwrap_or_default(),
            min_healthy_period: seconds(spec.and_then(|s| s.min_healthy_period_seconds))
                .unwrap_or(DEFAULT_MIN_HEALTHY_PERIOD),
        }
    }
}

/// What a reconcile knows for the decision.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    pub machines: &'a [ControlPlaneMachine],
    /// The control plane was initialized (`kubeadm init` succeeded once).
    pub initialized: bool,
    pub external_etcd: bool,
    /// The remediation in progress, from [`REMEDIATION_IN_PROGRESS_ANNOTATION`](kubeadm_api::meta::REMEDIATION_IN_PROGRESS_ANNOTATION), unless it is stale (see [`is_stale`]).
    pub in_progress: Option<&'a RemediationData>,
    pub settings: Settings,
    pub now: Timestamp,
    /// Stacked etcd: `Err` when its members could not be listed; otherwise, per machine name, why removing
    /// that machine's member would cost quorum (machines not listed are safe to lose).
    pub etcd: Result<&'a BTreeMap<String, String>, &'a str>,
}

/// What to do about unhealthy machines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No machine asks for remediation.
    Nothing,
    /// The machine to remediate is already being deleted.
    Deleting { machine: String },
    /// An earlier remediation still waits for its replacement machine.
    InProgress { machine: String },
    /// The machine cannot be remediated now; `reason` is [`DEFERRED_REASON`] (it may be later) or
    /// [`CANNOT_REMEDIATE_REASON`] (not without help).
    Blocked {
        machine: String,
        reason: &'static str,
        message: String,
    },
    /// Delete this machine now and record `data` on the control plane.
    Remediate {
        machine: String,
        data: RemediationData,
    },
}

/// Per machine asking for remediation: why losing its etcd member now would cost quorum (the `etcd` input
/// of [`decide`]). Like Cluster API, a control plane with a learner or a member still starting waits until
/// that settles, unless that member is the machine's own: a joiner that broke mid-join (its learner added,
/// then nothing) is replaced at once, as losing a learner or a member that never started costs no quorum.
pub fn etcd_unsafe_to_lose(
    etcd: etcd_membership::Observed<'_>,
    machines: &[ControlPlaneMachine],
) -> BTreeMap<String, String> {
    let owned_by = |member: &etcd_membership::Member, machine: &str| {
        etcd_membership::member_machine(member, etcd.machines)
            .is_some_and(|owner| owner.name == machine)
    };
    machines
        .iter()
        .filter(|m| wants_remediation(m))
        .filter_map(|m| {
            let settling = etcd.members.iter().find(|member| {
                (member.is_learner || !member.is_started()) && !owned_by(member, &m.name)
            });
            if let Some(other) = settling {
                return Some((
                    m.name.clone(),
                    format!(
                        "etcd member {} is still joining (learner or not started)",
                        other.label()
                    ),
                ));
            }
            let member = etcd
                .members
                .iter()
                .find(|member| owned_by(member, &m.name))?;
            etcd_membership::is_quorum_safe_without(member.id, etcd)
                .err()
                .map(|reason| (m.name.clone(), reason.to_string()))
        })
        .collect()
}

/// Whether the machine asks to be remediated.
pub fn wants_remediation(m: &ControlPlaneMachine) -> bool {
    m.remediate_annotation || (m.health_check_failed && m.owner_remediation_requested)
}

/// An in-progress record is stale once a machine newer than it exists: its replacement was created and
/// only the cleanup of the record was lost (e.g. to a restart).
pub fn is_stale(in_progress: &RemediationData, machines: &[ControlPlaneMachine]) -> bool {
    let since = in_progress.timestamp.unwrap_or_default();
    machines.iter().any(|m| m.created > since)
}

/// The machine to remediate first: the "most broken" one, so that the replacement has the best chance
/// (a scale up needs a healthy control plane).
pub fn pick<'a>(
    candidates: &[&'a ControlPlaneMachine],
    external_etcd: bool,
) -> Option<&'a ControlPlaneMachine> {
    let broken = |h: &Health| !matches!(h, Health::Healthy);
    candidates.iter().copied().min_by_key(|m| {
        (
            !m.remediate_annotation,
            m.node.is_some(),
            external_etcd || !broken(&m.health.etcd),
            !broken(&m.health.components),
            m.created,
            m.name.clone(),
        )
    })
}

/// Decides, as Cluster API's control-plane provider does, whether and which machine to delete now.
pub fn decide(observed: Observed<'_>) -> Decision {
    let candidates: Vec<&ControlPlaneMachine> = observed
        .machines
        .iter()
        .filter(|m| wants_remediation(m))
        .collect();
    let Some(victim) = pick(&candidates, observed.external_etcd) else {
        return Decision::Nothing;
    };
    let machine = victim.name.clone();
    if victim.deleting {
        return Decision::Deleting { machine };
    }
    // A record naming this very machine means its deletion was cut short: finish it.
    if let Some(in_progress) = observed.in_progress {
        if in_progress.machine == victim.name {
            return Decision::Remediate {
                machine,
                data: in_progress.clone(),
            };
        }
        return Decision::InProgress {
            machine: in_progress.machine.clone(),
        };
    }
    let blocked = |reason, message: String| Decision::Blocked {
        machine: victim.name.clone(),
        reason,
        message,
    };
    let data = match retry(victim, observed.settings, observed.now) {
        Ok(data) => data,
        Err((reason, message)) => return blocked(reason, message),
    };
    if observed.initialized {
        let machines = observed.machines;
        if machines.len() <= 1 {
            return blocked(
                CANNOT_REMEDIATE_REASON,
                "KubeadmControlPlane can't remediate if current replicas are less or equal to 1"
                    .into(),
            );
        }
        // A machine that itself asks for remediation is not "still provisioning": a join whose etcd
        // member never started never gets its Node.
        if let Some(m) = machines
            .iter()
            .find(|m| !m.health_check_failed && !wants_remediation(m) && m.node.is_none())
        {
            return blocked(
                DEFERRED_REASON,
                format!(
                    "KubeadmControlPlane waiting for control plane Machine provisioning to complete before triggering remediation (Machine {} has no Node yet)",
                    m.name
                ),
            );
        }
        if let Some(m) = machines.iter().find(|m| m.deleting) {
            return blocked(
                DEFERRED_REASON,
                format!(
                    "KubeadmControlPlane waiting for control plane Machine deletion to complete before triggering remediation (Machine {} is deleting)",
                    m.name
                ),
            );
        }
        let lost_etcd = if observed.external_etcd {
            None
        } else {
            match observed.etcd {
                Err(cause) => {
                    return blocked(
                        DEFERRED_REASON,
                        format!("Failed to check etcd cluster health before remediation: {cause}"),
                    );
                }
                Ok(unsafe_to_lose) => unsafe_to_lose.get(&victim.name),
            }
        };
        let operational = |m: &&ControlPlaneMachine| {
            m.name != victim.name
                && m.health.components == Health::Healthy
                && (observed.external_etcd || m.health.etcd == Health::Healthy)
        };
        if !machines.iter().any(|m| operational(&m)) {
            return blocked(
                CANNOT_REMEDIATE_REASON,
                "KubeadmControlPlane can't remediate this Machine because no other Machine runs healthy control plane components".into(),
            );
        }
        if let Some(why) = lost_etcd {
            return blocked(
                CANNOT_REMEDIATE_REASON,
                format!(
                    "KubeadmControlPlane can't remediate this Machine because this could result in etcd quorum loss: {why}"
                ),
            );
        }
    }
    Decision::Remediate { machine, data }
}

type Refusal = (&'static str, String);

/// The record of this remediation, counting it as a retry when the machine replaced an earlier unhealthy
/// machine less than `min_healthy_period` ago; refused while `retry_period` runs or once `max_retry`
/// retries were spent.
fn retry(
    victim: &ControlPlaneMachine,
    settings: Settings,
    now: Timestamp,
) -> Result<RemediationData, Refusal> {
    let mut data = RemediationData {
        machine: victim.name.clone(),
        timestamp: Some(now),
        retry_count: 0,
    };
    let Some(last) = &victim.remediation_for else {
        return Ok(data);
    };
    let long_ago = now
        .checked_sub(settings.min_healthy_period.max(settings.retry_period) * 2)
        .unwrap_or(Timestamp::MIN);
    let last_time = last.timestamp.unwrap_or(long_ago);
    let healthy_until = last_time
        .checked_add(settings.min_healthy_period)
        .unwrap_or(Timestamp::MAX);
    if healthy_until <= now {
        // It stayed healthy long enough: a new failure, not a retry.
        return Ok(data);
    }
    data.retry_count = last.retry_count;
    let retry_at = last_time
        .checked_add(settings.retry_period)
        .unwrap_or(Timestamp::MAX);
    if retry_at > now {
        return Err((
            DEFERRED_REASON,
            format!(
                "KubeadmControlPlane can't remediate this machine because the operation already failed in the latest {:#} (retryPeriodSeconds); it may retry after {retry_at}",
                settings.retry_period
            ),
        ));
    }
    if let Some(max) = settings.max_retry
        && data.retry_count >= max
    {
        return Err((
            CANNOT_REMEDIATE_REASON,
            format!(
                "KubeadmControlPlane can't remediate this machine because the operation already failed {max} times (maxRetry)"
            ),
        ));
    }
    data.retry_count += 1;
    Ok(data)
}

/// The remediation to show as `status.lastRemediation`: the one in progress, else the newest recorded on
/// a replacement machine.
pub fn last<'a>(
    in_progress: Option<&'a RemediationData>,
    machines: &'a [ControlPlaneMachine],
) -> Option<&'a RemediationData> {
    in_progress.or_else(|| {
        machines
            .iter()
            .filter_map(|m| m.remediation_for.as_ref())
            .max_by_key(|d| (d.timestamp, d.machine.clone()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn healthy(name: &str, created: i64) -> ControlPlaneMachine {
        ControlPlaneMachine {
            name: name.into(),
            created: at(created),
            node: Some(format!("node-{name}")),
            health: crate::machines::MachineHealth {
                components: Health::Healthy,
                etcd: Health::Healthy,
            },
            ..Default::default()
        }
    }

    fn unhealthy(name: &str, created: i64) -> ControlPlaneMachine {
        ControlPlaneMachine {
            health_check_failed: true,
            owner_remediation_requested: true,
            ..healthy(name, created)
        }
    }

    struct Case {
        machines: Vec<ControlPlaneMachine>,
        initialized: bool,
        external_etcd: bool,
        in_progress: Option<RemediationData>,
        settings: Settings,
        now: Timestamp,
        unsafe_to_lose: BTreeMap<String, String>,
        etcd_error: Option<&'static str>,
    }

    impl Case {
        fn new(machines: Vec<ControlPlaneMachine>) -> Self {
            Case {
                machines,
                initialized: true,
                external_etcd: false,
                in_progress: None,
                settings: Settings::of(None),
                now: at(10_000),
                unsafe_to_lose: BTreeMap::new(),
                etcd_error: None,
            }
        }

        fn decide(&self) -> Decision {
            decide(Observed {
                machines: &self.machines,
                initialized: self.initialized,
                external_etcd: self.external_etcd,
                in_progress: self.in_progress.as_ref(),
                settings: self.settings,
                now: self.now,
                etcd: match self.etcd_error {
                    Some(e) => Err(e),
                    None => Ok(&self.unsafe_to_lose),
                },
            })
        }
    }

    fn blocked_reason(decision: &Decision) -> (&str, &str) {
        match decision {
            Decision::Blocked {
                machine, reason, ..
            } => (machine, reason),
            other => panic!("expected Blocked, got {other:?}"),
        }
    }

    #[test]
    fn a_marked_machine_without_a_node_does_not_wait_for_itself() {
        let mut stuck = healthy("b", 1);
        stuck.node = None;
        stuck.remediate_annotation = true;
        let case = Case::new(vec![healthy("a", 0), stuck.clone()]);
        assert!(
            matches!(case.decide(), Decision::Remediate { ref machine, .. } if machine == "b"),
            "{:?}",
            case.decide()
        );
        // Another machine still coming up is waited for.
        let mut provisioning = healthy("c", 2);
        provisioning.node = None;
        let case = Case::new(vec![healthy("a", 0), stuck, provisioning]);
        assert_eq!(blocked_reason(&case.decide()), ("b", DEFERRED_REASON));
    }

    #[test]
    fn nothing_without_a_request() {
        let case = Case::new(vec![healthy("a", 0), healthy("b", 1), healthy("c", 2)]);
        assert_eq!(case.decide(), Decision::Nothing);
        // A failed health check that is not handed to the owner is someone else's job.
        let mut machines = case.machines.clone();
        machines[0].health_check_failed = true;
        assert_eq!(Case::new(machines).decide(), Decision::Nothing);
    }

    #[test]
    fn an_unhealthy_machine_of_three_is_remediated_with_a_fresh_record() {
        let case = Case::new(vec![unhealthy("a", 0), healthy("b", 1), healthy("c", 2)]);
        assert_eq!(
            case.decide(),
            Decision::Remediate {
                machine: "a".into(),
                data: RemediationData {
                    machine: "a".into(),
                    timestamp: Some(at(10_000)),
                    retry_count: 0
                }
            }
        );
    }

    #[test]
    fn the_remediate_annotation_alone_asks_for_remediation_and_goes_first() {
        let mut marked = healthy("c", 2);
        marked.remediate_annotation = true;
        let case = Case::new(vec![unhealthy("a", 0), healthy("b", 1), marked]);
        assert!(matches!(case.decide(), Decision::Remediate { machine, .. } if machine == "c"));
    }

    #[test]
    fn the_most_broken_machine_goes_first() {
        let mut no_node = unhealthy("late", 5);
        no_node.node = None;
        let mut bad_etcd = unhealthy("etcd", 3);
        bad_etcd.health.etcd = Health::Unhealthy("alarm NOSPACE".into());
        let mut bad_pods = unhealthy("pods", 1);
        bad_pods.health.components = Health::Unhealthy("scheduler".into());
        let plain = unhealthy("plain", 0);
        let all = [&plain, &bad_pods, &bad_etcd, &no_node];
        assert_eq!(pick(&all, false).unwrap().name, "late");
        assert_eq!(pick(&all[..3], false).unwrap().name, "etcd");
        // With external etcd the etcd health is no criterion.
        assert_eq!(pick(&all[..3], true).unwrap().name, "pods");
        assert_eq!(pick(&all[..2], false).unwrap().name, "pods");
        // Otherwise the oldest.
        let older = unhealthy("b-older", -1);
        assert_eq!(pick(&[&plain, &older], false).unwrap().name, "b-older");
    }

    #[test]
    fn a_deleting_machine_is_waited_for_and_one_remediation_runs_at_a_time() {
        let mut deleting = unhealthy("a", 0);
        deleting.deleting = true;
        let case = Case::new(vec![deleting, healthy("b", 1), healthy("c", 2)]);
        assert_eq!(
            case.decide(),
            Decision::Deleting {
                machine: "a".into()
            }
        );

        let mut case = Case::new(vec![healthy("b", 1), healthy("c", 2), unhealthy("d", 3)]);
        case.in_progress = Some(RemediationData {
            machine: "a".into(),
            timestamp: Some(at(5)),
            retry_count: 0,
        });
        assert_eq!(
            case.decide(),
            Decision::InProgress {
                machine: "a".into()
            }
        );
    }

    #[test]
    fn a_record_naming_the_victim_finishes_an_interrupted_deletion() {
        let mut case = Case::new(vec![unhealthy("a", 0), healthy("b", 1), healthy("c", 2)]);
        let record = RemediationData {
            machine: "a".into(),
            timestamp: Some(at(9_000)),
            retry_count: 2,
        };
        case.in_progress = Some(record.clone());
        assert_eq!(
            case.decide(),
            Decision::Remediate {
                machine: "a".into(),
                data: record
            }
        );
    }

    #[test]
    fn stale_records_are_recognised_by_a_newer_machine() {
        let record = RemediationData {
            machine: "a".into(),
            timestamp: Some(at(100)),
            retry_count: 0,
        };
        assert!(!is_stale(&record, &[healthy("b", 1), healthy("c", 100)]));
        assert!(is_stale(&record, &[healthy("b", 1), healthy("d", 101)]));
    }

    #[test]
    fn one_machine_is_never_remediated_once_initialized_but_may_be_before() {
        let case = Case::new(vec![unhealthy("a", 0)]);
        assert_eq!(
            blocked_reason(&case.decide()),
            ("a", CANNOT_REMEDIATE_REASON)
        );
        let mut case = Case::new(vec![unhealthy("a", 0)]);
        case.initialized = false;
        assert!(matches!(case.decide(), Decision::Remediate { .. }));
    }

    #[test]
    fn transitions_defer_remediation() {
        let mut provisioning = healthy("c", 2);
        provisioning.node = None;
        let case = Case::new(vec![unhealthy("a", 0), healthy("b", 1), provisioning]);
        assert_eq!(blocked_reason(&case.decide()), ("a", DEFERRED_REASON));

        let mut leaving = healthy("c", 2);
        leaving.deleting = true;
        let case = Case::new(vec![unhealthy("a", 0), healthy("b", 1), leaving]);
        assert_eq!(blocked_reason(&case.decide()), ("a", DEFERRED_REASON));

        let mut case = Case::new(vec![unhealthy("a", 0), healthy("b", 1), healthy("c", 2)]);
        case.etcd_error = Some("no etcd pod announces a client URL yet");
        let Decision::Blocked {
            reason, message, ..
        } = case.decide()
        else {
            panic!("expected Blocked");
        };
        assert_eq!(reason, DEFERRED_REASON);
        assert!(message.contains("no etcd pod announces"), "{message}");
    }

    #[test]
    fn quorum_and_a_working_control_plane_must_survive() {
        let mut case = Case::new(vec![unhealthy("a", 0), healthy("b", 1), healthy("c", 2)]);
        case.unsafe_to_lose
            .insert("a".into(), "2 of 3 voters healthy, 1 of 2 would be".into());
        let Decision::Blocked {
            reason, message, ..
        } = case.decide()
        else {
            panic!("expected Blocked");
        };
        assert_eq!(reason, CANNOT_REMEDIATE_REASON);
        assert!(message.contains("quorum"), "{message}");

        let mut b = healthy("b", 1);
        b.health.components = Health::Unhealthy("kube-apiserver not ready".into());
        let mut c = healthy("c", 2);
        c.health.etcd = Health::Unknown("etcd pod missing".into());
        let case = Case::new(vec![unhealthy("a", 0), b.clone(), c.clone()]);
        assert_eq!(
            blocked_reason(&case.decide()),
            ("a", CANNOT_REMEDIATE_REASON)
        );
        // With external etcd only the components count.
        let mut case = Case::new(vec![unhealthy("a", 0), b, c]);
        case.external_etcd = true;
        assert!(matches!(case.decide(), Decision::Remediate { .. }));
    }

    #[test]
    fn retries_are_counted_spaced_and_limited() {
        let replacement = |last: i64, count: i32| ControlPlaneMachine {
            remediation_for: Some(RemediationData {
                machine: "old".into(),
                timestamp: Some(at(last)),
                retry_count: count,
            }),
            ..unhealthy("a", last + 1)
        };
        let settings = Settings {
            max_retry: Some(2),
            retry_period: SignedDuration::from_mins(5),
            min_healthy_period: SignedDuration::from_hours(1),
        };
        let case_with = |m: ControlPlaneMachine| {
            let mut case = Case::new(vec![m, healthy("b", 0), healthy("c", 0)]);
            case.settings = settings;
            case
        };
        // Failed again within the hour, after the retry period: retry number 1.
        let case = case_with(replacement(10_000 - 600, 0));
        let Decision::Remediate { data, .. } = case.decide() else {
            panic!("expected Remediate");
        };
        assert_eq!(data.retry_count, 1);
        // Within the retry period: later.
        let case = case_with(replacement(10_000 - 60, 0));
        assert_eq!(blocked_reason(&case.decide()), ("a", DEFERRED_REASON));
        // Retries spent.
        let case = case_with(replacement(10_000 - 600, 2));
        assert_eq!(
            blocked_reason(&case.decide()),
            ("a", CANNOT_REMEDIATE_REASON)
        );
        // Healthy for more than the hour: a new failure, counted from zero.
        let case = case_with(replacement(10_000 - 4_000, 2));
        let Decision::Remediate { data, .. } = case.decide() else {
            panic!("expected Remediate");
        };
        assert_eq!(data.retry_count, 0);
    }

    #[test]
    fn records_round_trip_in_the_cluster_api_shape() {
        let record = RemediationData {
            machine: "m-1".into(),
            timestamp: Some(at(0) + SignedDuration::from_millis(300)),
            retry_count: 3,
        };
        let value = record.to_annotation();
        assert_eq!(
            value,
            r#"{"machine":"m-1","timestamp":"2027-01-15T08:00:00Z","retryCount":3}"#
        );
        let back = RemediationData::parse(&value).unwrap();
        assert_eq!(back.timestamp, Some(at(0)));
        assert_eq!(back.retry_count, 3);
        let go =
            RemediationData::parse(r#"{"machine":"m","timestamp":null,"retryCount":0}"#).unwrap();
        assert_eq!(go.timestamp, None);
        assert!(
            RemediationData::parse("{")
                .unwrap_err()
                .contains("not remediation data")
        );
    }

    #[test]
    fn the_last_remediation_is_the_running_one_or_the_newest_record() {
        let mut m1 = healthy("x", 0);
        m1.remediation_for = Some(RemediationData {
            machine: "old-1".into(),
            timestamp: Some(at(10)),
            retry_count: 0,
        });
        let mut m2 = healthy("y", 0);
        m2.remediation_for = Some(RemediationData {
            machine: "old-2".into(),
            timestamp: Some(at(20)),
            retry_count: 1,
        });
        let machines = [m1, m2];
        assert_eq!(last(None, &machines).unwrap().machine, "old-2");
        let running = RemediationData {
            machine: "now".into(),
            timestamp: Some(at(30)),
            retry_count: 0,
        };
        assert_eq!(last(Some(&running), &machines).unwrap().machine, "now");
    }

    mod etcd_unsafe_to_lose {
        use super::*;
        use crate::etcd_membership::{EtcdMachine, Member, MemberState};

        fn member(id: u64, name: &str, is_learner: bool) -> Member {
            Member {
                id,
                name: name.into(),
                peer_urls: vec![format!("https://{name}:2380")],
                client_urls: vec![format!("https://{name}:2379")],
                is_learner,
            }
        }

        fn three_voters() -> [Member; 3] {
            [
                member(1, "node-a", false),
                member(2, "node-b", false),
                member(3, "node-c", false),
            ]
        }

        fn reachable(states: &mut BTreeMap<u64, MemberState>, id: u64) {
            states.insert(
                id,
                MemberState::Reachable {
                    raft_index: 10,
                    raft_applied_index: 10,
                    is_leader: id == 1,
                    alarms: vec![],
                    errors: vec![],
                },
            );
        }

        fn etcd_machine(name: &str) -> EtcdMachine {
            EtcdMachine {
                name: name.into(),
                node: Some(format!("node-{name}")),
                up_to_date: true,
                healthy: true,
                ..Default::default()
            }
        }

        fn judge(
            members: &[Member],
            states: &BTreeMap<u64, MemberState>,
            machines: &[ControlPlaneMachine],
        ) -> BTreeMap<String, String> {
            let etcd_machines: Vec<EtcdMachine> =
                machines.iter().map(|m| etcd_machine(&m.name)).collect();
            let first_seen = BTreeMap::new();
            let observed = etcd_membership::Observed {
                members,
                states,
                machines: &etcd_machines,
                first_seen: &first_seen,
                agreed_leader: Some(1),
                now: at(0),
                learner_timeout: etcd_membership::DEFAULT_LEARNER_TIMEOUT,
                unstarted_grace: etcd_membership::DEFAULT_UNSTARTED_GRACE,
            };
            etcd_unsafe_to_lose(observed, machines)
        }

        #[test]
        fn one_broken_member_of_three_may_go() {
            let members = three_voters();
            let mut states = BTreeMap::new();
            reachable(&mut states, 1);
            reachable(&mut states, 2);
            states.insert(3, MemberState::Unreachable("connection refused".into()));
            let machines = [healthy("a", 0), healthy("b", 1), unhealthy("c", 2)];
            assert_eq!(judge(&members, &states, &machines), BTreeMap::new());
        }

        #[test]
        fn a_healthy_member_may_not_go_while_another_is_down() {
            let members = three_voters();
            let mut states = BTreeMap::new();
            reachable(&mut states, 1);
            reachable(&mut states, 3);
            states.insert(2, MemberState::Unreachable("connection refused".into()));
            let machines = [healthy("a", 0), healthy("b", 1), unhealthy("c", 2)];
            let unsafe_ = judge(&members, &states, &machines);
            assert_eq!(unsafe_.keys().collect::<Vec<_>>(), ["c"]);
            assert!(unsafe_["c"].contains("node-c"), "{}", unsafe_["c"]);
        }

        #[test]
        fn a_joining_member_holds_every_remediation_and_is_named() {
            let mut members = three_voters().to_vec();
            members.push(member(0xabc, "node-d", true));
            let mut states = BTreeMap::new();
            for id in [1, 2, 3, 0xabc] {
                reachable(&mut states, id);
            }
            let machines = [healthy("a", 0), healthy("b", 1), unhealthy("c", 2)];
            let unsafe_ = judge(&members, &states, &machines);
            assert_eq!(
                unsafe_["c"],
                "etcd member abc (node-d) is still joining (learner or not started)"
            );
        }

        #[test]
        fn a_joiner_that_broke_with_its_own_learner_added_may_go() {
            let mut members = three_voters().to_vec();
            // kubeadm added the learner, then the node crashed before etcd started: no name, no
            // client URL, only the peer URL on the machine's address.
            members.push(Member {
                id: 0xd,
                name: String::new(),
                peer_urls: vec!["https://10.0.0.4:2380".into()],
                client_urls: vec![],
                is_learner: true,
            });
            let mut states = BTreeMap::new();
            for id in [1, 2, 3] {
                reachable(&mut states, id);
            }
            let machines = [
                healthy("a", 0),
                healthy("b", 1),
                healthy("c", 2),
                unhealthy("d", 3),
            ];
            let mut etcd_machines: Vec<EtcdMachine> =
                machines.iter().map(|m| etcd_machine(&m.name)).collect();
            etcd_machines[3].node = None;
            etcd_machines[3].addresses = vec!["10.0.0.4".into()];
            let first_seen = BTreeMap::new();
            let observed = etcd_membership::Observed {
                members: &members,
                states: &states,
                machines: &etcd_machines,
                first_seen: &first_seen,
                agreed_leader: Some(1),
                now: at(0),
                learner_timeout: etcd_membership::DEFAULT_LEARNER_TIMEOUT,
                unstarted_grace: etcd_membership::DEFAULT_UNSTARTED_GRACE,
            };
            assert_eq!(etcd_unsafe_to_lose(observed, &machines), BTreeMap::new());

            // Another machine's unhealthy state still waits for that learner.
            let mut machines = machines;
            machines[2] = unhealthy("c", 2);
            let unsafe_ = etcd_unsafe_to_lose(observed, &machines);
            assert_eq!(unsafe_.keys().collect::<Vec<_>>(), ["c"]);
            assert!(unsafe_["c"].contains("still joining"), "{}", unsafe_["c"]);
        }
    }
}
