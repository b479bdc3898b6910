//! Which data survives a conversion that the target version cannot hold: guarded edits of JSON.
//!
//! An edit says "at this path, where the converted object still holds `expect`, put `value`
//! (or remove the field when there is no value)". Edits are computed between what the field-by-field
//! conversion produces and what the object really held, and are replayed after the next conversion
//! back. The guard makes a change made in the meantime win: where the converted object no longer
//! holds what it held when the edit was recorded, the edit is skipped.
//!
//! Objects are compared member by member; arrays and scalars are compared whole, so an edit never
//! lands on the wrong element of a list that was reordered since.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// One guarded edit of a JSON document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Edit {
    /// JSON pointer (RFC 6901) of the edited member.
    pub path: String,
    /// What the converted document holds at `path` for the edit to apply; absent when nothing.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub expect: Option<Value>,
    /// What to put at `path`; absent to remove the member.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub value: Option<Value>,
}

/// Keeps an explicit `null` as `Some(Value::Null)`; an absent member is `None` through `default`.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// The edits that turn `derived` into `original`.
pub(crate) fn diff(derived: &Value, original: &Value) -> Vec<Edit> {
    let mut edits = Vec::new();
    diff_member(String::new(), Some(derived), Some(original), &mut edits);
    edits
}

fn diff_member(
    path: String,
    derived: Option<&Value>,
    original: Option<&Value>,
    out: &mut Vec<Edit>,
) {
    if derived == original {
        return;
    }
    let empty = Map::new();
    let (derived_members, original_members) = match (derived, original) {
        (Some(Value::Object(d)), Some(Value::Object(o))) => (d, o),
        (None, Some(Value::Object(o))) => {
            // Create the object first, so that its members can be restored one by one and each
            // still lands when the other version has filled the object in the meantime.
            out.push(Edit {
                path: path.clone(),
                expect: None,
                value: Some(Value::Object(Map::new())),
            });
            (&empty, o)
        }
        _ => {
            out.push(Edit {
                path,
                expect: derived.cloned(),
                value: original.cloned(),
            });
            return;
        }
    };
    let mut keys: Vec<&String> = derived_members
        .keys()
        .chain(original_members.keys())
        .collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        diff_member(
            format!("{path}/{}", escape(key)),
            derived_members.get(key),
            original_members.get(key),
            out,
        );
    }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn segments(path: &str) -> Option<Vec<String>> {
    if path.is_empty() {
        return Some(Vec::new());
    }
    let rest = path.strip_prefix('/')?;
    Some(
        rest.split('/')
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect(),
    )
}

fn get<'a>(document: &'a Value, segments: &[String]) -> Option<&'a Value> {
    segments
        .iter()
        .try_fold(document, |value, key| value.as_object()?.get(key))
}

/// Applies the edits whose guard holds; returns an error naming the first malformed path.
pub(crate) fn apply(document: &mut Value, edits: &[Edit]) -> Result<(), String> {
    for edit in edits {
        let segments =
            segments(&edit.path).ok_or_else(|| format!("{:?} is not a JSON pointer", edit.path))?;
        if get(document, &segments) != edit.expect.as_ref() {
            continue;
        }
        match (&edit.value, segments.is_empty()) {
            (Some(value), true) => *document = value.clone(),
            (None, true) => {}
            (Some(value), false) => set(document, &segments, value.clone()),
            (None, false) => remove(document, &segments),
        }
    }
    Ok(())
}

/// Puts `value` at the path when its parent object exists: an edit whose context is gone (e.g. a
/// member of an object removed since) is dropped, while [`diff`] creates missing objects itself.
fn set(document: &mut Value, segments: &[String], value: Value) {
    let Some(object) = document.as_object_mut() else {
        return;
    };
    match segments {
        [] => {}
        [last] => {
            object.insert(last.clone(), value);
        }
        [first, rest @ ..] => {
            if let Some(child) = object.get_mut(first) {
                set(child, rest, value);
            }
        }
    }
}

fn remove(document: &mut Value, segments: &[String]) {
    let Some(object) = document.as_object_mut() else {
        return;
    };
    match segments {
        [] => {}
        [last] => {
            object.remove(last);
        }
        [first, rest @ ..] => {
            if let Some(child) = object.get_mut(first) {
                remove(child, rest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(derived: Value, original: Value) -> Vec<Edit> {
        let edits = diff(&derived, &original);
        let mut document = derived;
        apply(&mut document, &edits).unwrap();
        assert_eq!(document, original);
        edits
    }

    #[test]
    fn equal_documents_need_no_edit() {
        assert!(
            round_trip(
                json!({"a": [1, 2], "b": {"c": 1}}),
                json!({"a": [1, 2], "b": {"c": 1}})
            )
            .is_empty()
        );
    }

    #[test]
    fn restores_changed_missing_and_extra_members() {
        let edits = round_trip(
            json!({"spec": {"timeout": "10m0s", "extra": true, "list": [1]}}),
            json!({"spec": {"timeout": "10m", "kept": {"deep": {"x": 1}}, "list": [1, 1], "a/b": null}}),
        );
        let paths: Vec<_> = edits.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/spec/a~1b",
                "/spec/extra",
                "/spec/kept",
                "/spec/kept/deep",
                "/spec/kept/deep/x",
                "/spec/list",
                "/spec/timeout"
            ]
        );
    }

    #[test]
    fn an_edit_skips_what_changed_since() {
        let edits = diff(
            &json!({"spec": {"timeout": "10m0s", "name": "a"}}),
            &json!({"spec": {"timeout": "10m", "name": "a", "version": "v1.30.0"}}),
        );
        // The other version changed the timeout and filled in a missing object.
        let mut document = json!({"spec": {"timeout": "5m0s", "name": "b"}});
        apply(&mut document, &edits).unwrap();
        assert_eq!(
            document,
            json!({"spec": {"timeout": "5m0s", "name": "b", "version": "v1.30.0"}})
        );
    }

    #[test]
    fn members_of_a_missing_object_land_in_the_object_created_since() {
        let edits = diff(
            &json!({}),
            &json!({"cluster": {"kubernetesVersion": "v1.30.0"}}),
        );
        let mut document = json!({"cluster": {"etcd": {}}});
        apply(&mut document, &edits).unwrap();
        assert_eq!(
            document,
            json!({"cluster": {"etcd": {}, "kubernetesVersion": "v1.30.0"}})
        );
    }

    #[test]
    fn members_of_an_object_that_is_gone_are_dropped() {
        let edits = diff(
            &json!({"status": {}}),
            &json!({"status": {"initialization": {"created": false}}}),
        );
        let mut document = json!({});
        apply(&mut document, &edits).unwrap();
        assert_eq!(document, json!({}));
    }

    #[test]
    fn removal_of_a_missing_member_creates_nothing() {
        let edits = vec![Edit {
            path: "/a/b".into(),
            expect: None,
            value: None,
        }];
        let mut document = json!({});
        apply(&mut document, &edits).unwrap();
        assert_eq!(document, json!({}));
    }

    #[test]
    fn null_and_absent_are_told_apart_in_the_stored_form() {
        let edits = diff(&json!({"a": 1}), &json!({"a": null}));
        let text = serde_json::to_string(&edits).unwrap();
        assert_eq!(text, r#"[{"path":"/a","expect":1,"value":null}]"#);
        let back: Vec<Edit> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, edits);
        let removal: Vec<Edit> = serde_json::from_str(r#"[{"path":"/a","expect":1}]"#).unwrap();
        assert_eq!(removal[0].value, None);
    }

    #[test]
    fn malformed_paths_are_reported() {
        let edits = vec![Edit {
            path: "spec".into(),
            expect: None,
            value: Some(json!(1)),
        }];
        assert!(
            apply(&mut json!({}), &edits)
                .unwrap_err()
                .contains("\"spec\"")
        );
    }
}
