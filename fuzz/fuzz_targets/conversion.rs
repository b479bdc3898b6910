//! A JSON object read as each of our four kinds, in each version, converted to the other version and
//! back: the trip must return the object, typed and through JSON as the webhook sees it. Equality is
//! the one the property tests of `kubeadm_api::conversion` use: the object as its type reads and
//! writes it, without the conversion annotations (the conversion's own state, which no generated
//! object carries).

#![no_main]

use std::fmt::Debug;

use kubeadm_api::conversion::{
    CONVERSION_DATA_ANNOTATION, HubOf, Spoke, V1BETA1_DATA_ANNOTATION, convert_object_with,
    from_hub_with, to_hub_with,
};
use kubeadm_api::{bootstrap, controlplane};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

/// The lookup the property tests use: every group serves v1beta2.
fn contract_versions(group: &str, _kind: &str) -> Option<String> {
    (!group.is_empty()).then(|| format!("{group}/v1beta2"))
}

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Object(object)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    use bootstrap::v1beta1 as b1;
    use controlplane::v1beta1 as c1;
    let (b, c) = (bootstrap::GROUP, controlplane::GROUP);
    round_trips::<b1::KubeadmConfig>(&object, b, "KubeadmConfig");
    round_trips::<b1::KubeadmConfigTemplate>(&object, b, "KubeadmConfigTemplate");
    round_trips::<c1::KubeadmControlPlane>(&object, c, "KubeadmControlPlane");
    round_trips::<c1::KubeadmControlPlaneTemplate>(&object, c, "KubeadmControlPlaneTemplate");
});

fn round_trips<S>(object: &Map<String, Value>, group: &str, kind: &str)
where
    S: Spoke + Debug,
    HubOf<S>: Debug,
{
    let (spoke_version, hub_version) = (format!("{group}/v1beta1"), format!("{group}/v1beta2"));
    if let Some(hub) = read::<HubOf<S>>(object, &hub_version, kind) {
        hub_round_trip::<S>(hub, &spoke_version, &hub_version);
    }
    if let Some(spoke) = read::<S>(object, &spoke_version, kind) {
        spoke_round_trip(spoke, &spoke_version, &hub_version);
    }
}

/// The object as `T`, if it reads as one, after a trip through JSON (which must not change it).
fn read<T>(object: &Map<String, Value>, api_version: &str, kind: &str) -> Option<T>
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + Debug,
{
    let mut object = object.clone();
    object.insert("apiVersion".into(), api_version.into());
    object.insert("kind".into(), kind.into());
    if let Some(Value::Object(annotations)) = object
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
    {
        annotations.remove(CONVERSION_DATA_ANNOTATION);
        annotations.remove(V1BETA1_DATA_ANNOTATION);
    }
    let typed: T = serde_json::from_value(Value::Object(object)).ok()?;
    let json = serde_json::to_value(&typed).expect("objects serialize");
    let reread: T = serde_json::from_value(json.clone())
        .unwrap_or_else(|e| panic!("{kind} does not read back its own JSON: {e}\n{json}"));
    assert_eq!(reread, typed, "{kind} changes through JSON");
    Some(typed)
}

fn annotation(object: &impl serde::Serialize, key: &str) -> Option<Value> {
    let json = serde_json::to_value(object).expect("objects serialize");
    json.pointer("/metadata/annotations")?.get(key).cloned()
}

/// v1beta2 → v1beta1 → v1beta2.
fn hub_round_trip<S>(hub: HubOf<S>, spoke_version: &str, hub_version: &str)
where
    S: Spoke + Debug,
    HubOf<S>: Debug,
{
    // A hub v1beta1 cannot express (e.g. a reference of an unknown group) may be refused.
    let spoke: S = match from_hub_with(hub.clone(), &contract_versions) {
        Ok(spoke) => spoke,
        Err(error) => {
            assert!(!error.to_string().is_empty());
            return;
        }
    };
    assert_eq!(annotation(&spoke, V1BETA1_DATA_ANNOTATION), None);
    let back = to_hub_with(spoke.clone(), &contract_versions).unwrap_or_else(|e| {
        panic!("the v1beta1 form of a hub does not convert back: {e}\n{spoke:?}")
    });
    assert_eq!(back, hub, "v1beta2 → v1beta1 → v1beta2 changed the object");

    let json = serde_json::to_value(&hub).expect("objects serialize");
    let spoke_json = convert_object_with(json.clone(), spoke_version, &contract_versions)
        .unwrap_or_else(|e| panic!("converts typed but not as JSON: {e}"));
    assert_eq!(
        spoke_json,
        serde_json::to_value(&spoke).expect("objects serialize")
    );
    let back_json = convert_object_with(spoke_json, hub_version, &contract_versions)
        .unwrap_or_else(|e| panic!("the v1beta1 JSON of a hub does not convert back: {e}"));
    assert_eq!(
        back_json, json,
        "v1beta2 → v1beta1 → v1beta2 changed the JSON"
    );
}

/// v1beta1 → v1beta2 → v1beta1.
fn spoke_round_trip<S>(spoke: S, spoke_version: &str, hub_version: &str)
where
    S: Spoke + Debug,
    HubOf<S>: Debug,
{
    // v1beta1 holds text where v1beta2 holds numbers (durations): bad text is refused.
    let hub = match to_hub_with(spoke.clone(), &contract_versions) {
        Ok(hub) => hub,
        Err(error) => {
            assert!(!error.to_string().is_empty());
            return;
        }
    };
    assert_eq!(annotation(&hub, CONVERSION_DATA_ANNOTATION), None);
    let back: S = from_hub_with(hub.clone(), &contract_versions).unwrap_or_else(|e| {
        panic!("the hub of a v1beta1 object does not convert back: {e}\n{hub:?}")
    });
    assert_eq!(
        back, spoke,
        "v1beta1 → v1beta2 → v1beta1 changed the object"
    );

    let json = serde_json::to_value(&spoke).expect("objects serialize");
    let hub_json = convert_object_with(json.clone(), hub_version, &contract_versions)
        .unwrap_or_else(|e| panic!("converts typed but not as JSON: {e}"));
    assert_eq!(
        hub_json,
        serde_json::to_value(&hub).expect("objects serialize")
    );
    let back_json = convert_object_with(hub_json, spoke_version, &contract_versions)
        .unwrap_or_else(|e| panic!("the hub JSON of a v1beta1 object does not convert back: {e}"));
    assert_eq!(
        back_json, json,
        "v1beta1 → v1beta2 → v1beta1 changed the JSON"
    );
}
