//! Generators of valid field values shared by the conversion property tests of both groups.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;

use super::duration;
use crate::cluster::v1beta2::{
    ConditionPolarity, MachineReadinessGate, MachineTaint, MachineTaintPropagation, StatusVersion,
    TaintEffect,
};
use crate::meta::V1Beta1Condition;

/// Cases per property: each case builds and converts several large objects.
pub(crate) fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// The contract lookup the property tests use for references: every group serves v1beta2.
pub(crate) fn contract_versions(group: &str, _kind: &str) -> Option<String> {
    (!group.is_empty()).then(|| format!("{group}/v1beta2"))
}

pub(crate) fn word() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9-]{0,6}"
}

/// Free text: mostly printable ASCII, sometimes any non-control characters.
pub(crate) fn text() -> impl Strategy<Value = String> {
    prop_oneof![3 => "[ -~]{0,10}", 1 => "\\PC{0,6}"]
}

pub(crate) fn opt<S: Strategy>(strategy: S) -> impl Strategy<Value = Option<S::Value>> {
    option::of(strategy)
}

pub(crate) fn few<S: Strategy>(strategy: S) -> impl Strategy<Value = Vec<S::Value>> {
    vec(strategy, 0..3)
}

pub(crate) fn map_of<S: Strategy>(values: S) -> impl Strategy<Value = BTreeMap<String, S::Value>> {
    btree_map(word(), values, 0..3)
}

pub(crate) fn one_of(choices: &'static [&'static str]) -> impl Strategy<Value = String> {
    proptest::sample::select(choices).prop_map(str::to_owned)
}

/// Whole seconds as v1beta2 holds them; mostly small, sometimes large or negative.
pub(crate) fn seconds() -> impl Strategy<Value = i32> {
    prop_oneof![6 => 0..7200i32, 2 => 0..=i32::MAX, 1 => -100..0i32]
}

/// A valid Go duration: Go's own spelling, or one a person writes.
pub(crate) fn go_duration() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => seconds().prop_map(duration::from_seconds),
        2 => (1..100u32, one_of(&["h", "m", "s", "ms", "us", "ns"]))
            .prop_map(|(n, unit)| format!("{n}{unit}")),
        1 => (0..5u32, 0..60u32, 0..60u32).prop_map(|(h, m, s)| format!("{h}h{m}m{s}s")),
        1 => (0..100u32, 1..100u32).prop_map(|(whole, fraction)| format!("{whole}.{fraction}s")),
        1 => one_of(&["0", "-90s", "+1h"]),
    ]
}

pub(crate) fn time() -> impl Strategy<Value = Time> {
    (0i64..4_000_000_000).prop_map(|s| Time(Timestamp::from_second(s).expect("in range")))
}

fn condition_type() -> impl Strategy<Value = String> {
    "[A-Z][a-zA-Z]{0,10}"
}

fn condition_status() -> impl Strategy<Value = String> {
    one_of(&["True", "False", "Unknown"])
}

pub(crate) fn condition() -> impl Strategy<Value = Condition> {
    (
        condition_type(),
        condition_status(),
        condition_type(),
        text(),
        time(),
        opt(0..10i64),
    )
        .prop_map(
            |(type_, status, reason, message, last_transition_time, observed_generation)| {
                Condition {
                    type_,
                    status,
                    reason,
                    message,
                    last_transition_time,
                    observed_generation,
                }
            },
        )
}

pub(crate) fn v1beta1_condition() -> impl Strategy<Value = V1Beta1Condition> {
    (
        condition_type(),
        condition_status(),
        opt(one_of(&["Error", "Warning", "Info"])),
        opt(time()),
        opt(condition_type()),
        opt(text()),
    )
        .prop_map(
            |(type_, status, severity, last_transition_time, reason, message)| V1Beta1Condition {
                type_,
                status,
                severity,
                last_transition_time,
                reason,
                message,
            },
        )
}

/// Annotations of a stored object; never the conversion annotations themselves.
fn annotations() -> impl Strategy<Value = Option<BTreeMap<String, String>>> {
    opt(btree_map(
        prop_oneof![word(), word().prop_map(|w| format!("example.com/{w}"))],
        text(),
        1..3,
    ))
}

pub(crate) fn object_meta() -> impl Strategy<Value = ObjectMeta> {
    (
        opt(word()),
        opt(word()),
        opt(map_of(text())),
        annotations(),
        opt(1..5i64),
        opt("[0-9]{1,6}"),
    )
        .prop_map(
            |(name, namespace, labels, annotations, generation, resource_version)| ObjectMeta {
                name,
                namespace,
                labels,
                annotations,
                generation,
                resource_version,
                ..ObjectMeta::default()
            },
        )
}

/// Labels and annotations of objects created from a template.
pub(crate) fn template_meta() -> impl Strategy<Value = crate::meta::ObjectMeta> {
    (map_of(text()), map_of(text())).prop_map(|(labels, annotations)| crate::meta::ObjectMeta {
        labels,
        annotations,
    })
}

pub(crate) fn taint() -> impl Strategy<Value = Taint> {
    (
        word(),
        opt(word()),
        one_of(&["NoSchedule", "PreferNoSchedule", "NoExecute"]),
        opt(time()),
    )
        .prop_map(|(key, value, effect, time_added)| Taint {
            key,
            value,
            effect,
            time_added,
        })
}

pub(crate) fn env_var() -> impl Strategy<Value = EnvVar> {
    (word(), opt(text())).prop_map(|(name, value)| EnvVar {
        name,
        value,
        value_from: None,
    })
}

pub(crate) fn machine_taint() -> impl Strategy<Value = MachineTaint> {
    (
        word(),
        opt(word()),
        prop_oneof![
            Just(TaintEffect::NoSchedule),
            Just(TaintEffect::PreferNoSchedule),
            Just(TaintEffect::NoExecute)
        ],
        prop_oneof![
            Just(MachineTaintPropagation::Always),
            Just(MachineTaintPropagation::OnInitialization)
        ],
    )
        .prop_map(|(key, value, effect, propagation)| MachineTaint {
            key,
            value,
            effect,
            propagation,
        })
}

pub(crate) fn readiness_gate() -> impl Strategy<Value = MachineReadinessGate> {
    (
        condition_type(),
        opt(prop_oneof![
            Just(ConditionPolarity::Positive),
            Just(ConditionPolarity::Negative)
        ]),
    )
        .prop_map(|(condition_type, polarity)| MachineReadinessGate {
            condition_type,
            polarity,
        })
}

pub(crate) fn status_version() -> impl Strategy<Value = StatusVersion> {
    ("v1\\.[0-9]{2}\\.[0-9]", opt(0..5i32))
        .prop_map(|(version, replicas)| StatusVersion { version, replicas })
}

pub(crate) fn int_or_string() -> impl Strategy<Value = IntOrString> {
    prop_oneof![
        (0..3i32).prop_map(IntOrString::Int),
        one_of(&["0", "1", "50%"]).prop_map(IntOrString::String),
    ]
}

fn fail(error: super::ConversionError) -> TestCaseError {
    TestCaseError::fail(error.to_string())
}

fn has_annotation(meta: &ObjectMeta, key: &str) -> bool {
    meta.annotations
        .as_ref()
        .is_some_and(|annotations| annotations.contains_key(key))
}

/// v1beta1 → v1beta2 → v1beta1 returns the object, typed and through JSON as the webhook sees it.
pub(crate) fn check_spoke_round_trip<S>(
    spoke: &S,
    versions: &dyn super::ContractVersions,
) -> Result<(), TestCaseError>
where
    S: super::Spoke + std::fmt::Debug,
    super::HubOf<S>: std::fmt::Debug,
{
    use kube::Resource;
    let json = serde_json::to_value(spoke).expect("serializes");
    let reread: S = serde_json::from_value(json.clone()).expect("deserializes");
    prop_assert_eq!(&reread, spoke, "the generated object survives JSON");

    let hub = super::to_hub_with(spoke.clone(), versions).map_err(fail)?;
    prop_assert!(!has_annotation(
        hub.meta(),
        super::CONVERSION_DATA_ANNOTATION
    ));
    let back: S = super::from_hub_with(hub.clone(), versions).map_err(fail)?;
    prop_assert_eq!(&back, spoke);

    let hub_version = <super::HubOf<S> as Resource>::api_version(&());
    let hub_json =
        super::convert_object_with(json.clone(), &hub_version, versions).map_err(fail)?;
    prop_assert_eq!(&hub_json, &serde_json::to_value(&hub).expect("serializes"));
    let back_json =
        super::convert_object_with(hub_json, &S::api_version(&()), versions).map_err(fail)?;
    prop_assert_eq!(back_json, json);
    Ok(())
}

/// v1beta2 → v1beta1 → v1beta2 returns the object, typed and through JSON as the webhook sees it.
pub(crate) fn check_hub_round_trip<S>(
    hub: &super::HubOf<S>,
    versions: &dyn super::ContractVersions,
) -> Result<(), TestCaseError>
where
    S: super::Spoke + std::fmt::Debug,
    super::HubOf<S>: std::fmt::Debug,
{
    use kube::Resource;
    let json = serde_json::to_value(hub).expect("serializes");
    let reread: super::HubOf<S> = serde_json::from_value(json.clone()).expect("deserializes");
    prop_assert_eq!(&reread, hub, "the generated object survives JSON");

    let spoke: S = super::from_hub_with(hub.clone(), versions).map_err(fail)?;
    prop_assert!(!has_annotation(
        spoke.meta(),
        super::V1BETA1_DATA_ANNOTATION
    ));
    let back = super::to_hub_with(spoke.clone(), versions).map_err(fail)?;
    prop_assert_eq!(&back, hub);

    let spoke_json =
        super::convert_object_with(json.clone(), &S::api_version(&()), versions).map_err(fail)?;
    prop_assert_eq!(
        &spoke_json,
        &serde_json::to_value(&spoke).expect("serializes")
    );
    let hub_version = <super::HubOf<S> as Resource>::api_version(&());
    let back_json = super::convert_object_with(spoke_json, &hub_version, versions).map_err(fail)?;
    prop_assert_eq!(back_json, json);
    Ok(())
}
