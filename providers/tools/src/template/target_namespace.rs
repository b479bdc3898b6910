//! `clusterctl generate cluster` puts every namespaced object of a cluster template into the target
//! namespace (`--target-namespace`), whatever the template says, so `clusterctl move` and the
//! controllers find a cluster's objects together; a `Namespace` object is renamed to it.
//!
//! clusterctl re-serializes the whole template to do that. Here the rendered text stays as written
//! (comments, order, quoting): the `namespace:` line under `metadata:` is rewritten or added, and a
//! document whose layout this edit cannot handle (e.g. `metadata: {name: x}`) is re-serialized alone.
//! Namespaced subjects of (Cluster)RoleBindings are not rewritten, unlike clusterctl.

use serde_json::Value;

use crate::yaml::{self, Document};

/// Kinds clusterctl treats as cluster-scoped; every other kind is namespaced.
const CLUSTER_SCOPED_KINDS: [&str; 16] = [
    "Namespace",
    "Node",
    "PersistentVolume",
    "PodSecurityPolicy",
    "CertificateSigningRequest",
    "ClusterRoleBinding",
    "ClusterRole",
    "VolumeAttachment",
    "StorageClass",
    "CSIDriver",
    "CSINode",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "CustomResourceDefinition",
    "PriorityClass",
    "RuntimeClass",
];

/// A rendered document that is not YAML.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotYaml {
    /// Line of the problem in the whole text, counting from 1.
    pub line: usize,
    /// What the YAML parser said.
    pub message: String,
}

/// `yaml` (one or more documents) with every namespaced object in `namespace` and every `Namespace`
/// object named `namespace`. Documents already right are left byte for byte.
pub fn into_namespace(yaml: &str, namespace: &str) -> Result<String, NotYaml> {
    let mut out = String::with_capacity(yaml.len());
    for document in yaml::split(yaml) {
        out.push_str(&fix_document(document, namespace)?);
    }
    Ok(out)
}

fn parse(document: Document<'_>, text: &str) -> Result<Option<Value>, NotYaml> {
    serde_saphyr::from_str::<Option<Value>>(text).map_err(|error| NotYaml {
        line: document.first_line
            + error
                .location()
                .map_or(0, |location| (location.line().max(1) - 1) as usize),
        message: error.to_string(),
    })
}

/// The metadata field to set and its value, if the object needs a change.
fn needed_change(object: &Value, namespace: &str) -> Option<&'static str> {
    let kind = object.get("kind")?.as_str()?;
    let (field, cluster_scoped) = if kind == "Namespace" {
        ("name", false)
    } else {
        ("namespace", CLUSTER_SCOPED_KINDS.contains(&kind))
    };
    let current = object
        .get("metadata")
        .and_then(|metadata| metadata.get(field))
        .and_then(Value::as_str);
    (!cluster_scoped && current != Some(namespace)).then_some(field)
}

fn fix_document(document: Document<'_>, namespace: &str) -> Result<String, NotYaml> {
    let Some(object) = parse(document, document.text)? else {
        return Ok(document.text.to_owned());
    };
    let Some(field) = needed_change(&object, namespace) else {
        return Ok(document.text.to_owned());
    };
    let mut expected = object.clone();
    if let Some(map) = expected.as_object_mut() {
        let metadata = map
            .entry("metadata")
            .or_insert_with(|| Value::Object(Default::default()));
        if !metadata.is_object() {
            *metadata = Value::Object(Default::default());
        }
        metadata[field] = Value::String(namespace.to_owned());
    }
    if let Some(edited) = edit_metadata_field(document.text, field, namespace)
        && parse(document, &edited).ok().flatten().as_ref() == Some(&expected)
    {
        return Ok(edited);
    }
    // The layout is beyond a line edit: write this document anew.
    let separator = if document.is_explicit() { "---\n" } else { "" };
    let body = serde_saphyr::to_string(&expected).map_err(|error| NotYaml {
        line: document.first_line,
        message: error.to_string(),
    })?;
    Ok(format!("{separator}{body}"))
}

/// Rewrites or adds `field: value` in the block-style top-level `metadata:` mapping of `text`.
fn edit_metadata_field(text: &str, field: &str, value: &str) -> Option<String> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let metadata = lines.iter().position(|line| {
        line.strip_prefix("metadata:").is_some_and(|rest| {
            let rest = rest.trim_start_matches([' ', '\t']);
            rest.is_empty() || rest.starts_with(['\n', '\r', '#'])
        })
    })?;
    let is_content = |line: &str| {
        let trimmed = line.trim_start_matches([' ', '\t']);
        !trimmed.trim_end().is_empty() && !trimmed.starts_with('#')
    };
    let indent_of = |line: &str| line.len() - line.trim_start_matches(' ').len();
    // The mapping's lines: up to the first content line indented less than its first key.
    let body = &lines[metadata + 1..];
    let indent = indent_of(body.iter().find(|line| is_content(line))?);
    if indent == 0 {
        return None;
    }
    let block_len = body
        .iter()
        .position(|line| is_content(line) && indent_of(line) < indent)
        .unwrap_or(body.len());
    let existing = body[..block_len].iter().position(|line| {
        indent_of(line) == indent
            && line[indent..]
                .strip_prefix(field)
                .is_some_and(|rest| rest.starts_with(':'))
    });
    let mut out: Vec<String> = lines.iter().map(|line| (*line).to_owned()).collect();
    match existing {
        Some(at) => {
            let line = body[at];
            let rest = &line[indent + field.len() + 1..];
            let ending = &rest[rest.trim_end_matches(['\n', '\r']).len()..];
            // Keep a trailing comment with the blanks before it.
            let comment = rest.find(" #").map_or("", |at| {
                let blanks_start = rest[..at].trim_end_matches(' ').len();
                rest[blanks_start..].trim_end_matches(['\n', '\r'])
            });
            out[metadata + 1 + at] =
                format!("{}{field}: {value}{comment}{ending}", &line[..indent]);
        }
        None => {
            let line = lines[metadata];
            let ending = if line.ends_with("\r\n") { "\r\n" } else { "\n" };
            out.insert(
                metadata + 1,
                format!("{}{field}: {value}{ending}", " ".repeat(indent)),
            );
        }
    }
    Some(out.concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_without_a_namespace_get_one_after_metadata() {
        let yaml = "\
# header
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: demo
  labels:
    a: b
spec: {}
";
        assert_eq!(
            into_namespace(yaml, "team-a").unwrap(),
            yaml.replace("metadata:\n", "metadata:\n  namespace: team-a\n")
        );
    }

    #[test]
    fn a_different_namespace_is_replaced_keeping_its_comment() {
        let yaml = "kind: Secret\nmetadata:\n    name: s   # secret\n    namespace: other  # moved\ndata: {}\n";
        assert_eq!(
            into_namespace(yaml, "team-a").unwrap(),
            "kind: Secret\nmetadata:\n    name: s   # secret\n    namespace: team-a  # moved\ndata: {}\n"
        );
    }

    #[test]
    fn right_namespaces_cluster_scoped_kinds_and_kindless_documents_stay_as_they_are() {
        let yaml = "\
kind: ConfigMap
metadata:
  namespace: team-a   # already right
  name: c
---
kind: ClusterRole
metadata:
  name: r
---
# only a comment
---
just: data
";
        assert_eq!(into_namespace(yaml, "team-a").unwrap(), yaml);
    }

    #[test]
    fn a_namespace_object_is_renamed() {
        let yaml = "kind: Namespace\nmetadata:\n  name: old\n";
        assert_eq!(
            into_namespace(yaml, "team-a").unwrap(),
            "kind: Namespace\nmetadata:\n  name: team-a\n"
        );
    }

    #[test]
    fn nested_namespace_fields_are_not_mistaken_for_the_object_namespace() {
        let yaml = "\
kind: RoleBinding
metadata:
  name: rb
  annotations:
    namespace: keep
subjects:
  - kind: ServiceAccount
    namespace: elsewhere
";
        assert_eq!(
            into_namespace(yaml, "team-a").unwrap(),
            yaml.replace("metadata:\n", "metadata:\n  namespace: team-a\n")
        );
    }

    #[test]
    fn layouts_a_line_edit_cannot_handle_are_written_anew() {
        for yaml in [
            "kind: Secret\nmetadata: {name: s, namespace: x}\n",
            "kind: Secret\nspec: {}\n",
        ] {
            let fixed = into_namespace(yaml, "team-a").unwrap();
            let value: Value = serde_saphyr::from_str(&fixed).unwrap();
            assert_eq!(
                value["metadata"]["namespace"], "team-a",
                "{yaml:?} -> {fixed:?}"
            );
            assert_eq!(value["kind"], "Secret");
        }
        let two = "kind: A\nmetadata: {name: a}\n---\nkind: B\nmetadata: {name: b}\n";
        let fixed = into_namespace(two, "ns").unwrap();
        assert_eq!(fixed.matches("---\n").count(), 1, "{fixed}");
        assert_eq!(fixed.matches("namespace: ns").count(), 2, "{fixed}");
    }

    #[test]
    fn invalid_yaml_names_its_line() {
        let error = into_namespace("kind: A\n---\nkind: B\nmetadata: [\n", "ns").unwrap_err();
        assert!((3..=5).contains(&error.line), "{error:?}");
    }
}
