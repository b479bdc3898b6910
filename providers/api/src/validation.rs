//! Field errors reported by the validation rules of our kinds, and the checks of Kubernetes names and
//! metadata that several rules share.
//!
//! Every error names the field by its JSON path (e.g.
//! `spec.kubeadmConfigSpec.files[2].contentFrom.secret.key`) and the rule that failed, so a webhook
//! rejection or an offline check tells the user what to change.

use std::collections::BTreeMap;
use std::fmt;

use crate::cluster::v1beta2::MachineTaint;
use crate::meta::ObjectMeta;

/// What kind of rule a field broke; maps to the cause types of a Kubernetes `Invalid` status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A required field is missing.
    Required,
    /// The value is not acceptable.
    Invalid,
    /// The field may not be set (or changed) in this situation.
    Forbidden,
    /// The value repeats one that must be unique.
    Duplicate,
}

impl ErrorKind {
    /// The `StatusCause.type` Kubernetes uses for this kind, e.g. `FieldValueInvalid`.
    pub fn cause_type(self) -> &'static str {
        match self {
            Self::Required => "FieldValueRequired",
            Self::Invalid => "FieldValueInvalid",
            Self::Forbidden => "FieldValueForbidden",
            Self::Duplicate => "FieldValueDuplicate",
        }
    }
}

/// One broken rule: the field's JSON path, the kind of problem, the offending value when it is safe
/// and useful to show, and the rule in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// JSON path of the field, e.g. `spec.kubeadmConfigSpec.files[2].contentFrom.secret.key`.
    pub path: String,
    /// The kind of problem.
    pub kind: ErrorKind,
    /// The rejected value; never set for file contents, passwords or tokens.
    pub value: Option<String>,
    /// The rule that failed, e.g. `cannot be an even number when etcd is stacked`.
    pub rule: String,
}

impl FieldError {
    /// A required field is missing.
    pub fn required(path: impl Into<String>, rule: impl Into<String>) -> Self {
        Self::new(path, ErrorKind::Required, None, rule)
    }

    /// The value breaks `rule`; `value` is shown in the message.
    pub fn invalid(
        path: impl Into<String>,
        value: impl fmt::Display,
        rule: impl Into<String>,
    ) -> Self {
        Self::new(path, ErrorKind::Invalid, Some(value.to_string()), rule)
    }

    /// The value breaks `rule` and must not be echoed (it may be a secret or a large object).
    pub fn invalid_hidden(path: impl Into<String>, rule: impl Into<String>) -> Self {
        Self::new(path, ErrorKind::Invalid, None, rule)
    }

    /// The field may not be set or changed.
    pub fn forbidden(path: impl Into<String>, rule: impl Into<String>) -> Self {
        Self::new(path, ErrorKind::Forbidden, None, rule)
    }

    /// The value repeats one that must be unique.
    pub fn duplicate(
        path: impl Into<String>,
        value: impl fmt::Display,
        rule: impl Into<String>,
    ) -> Self {
        Self::new(path, ErrorKind::Duplicate, Some(value.to_string()), rule)
    }

    fn new(
        path: impl Into<String>,
        kind: ErrorKind,
        value: Option<String>,
        rule: impl Into<String>,
    ) -> Self {
        Self {
            path: path.into(),
            kind,
            value,
            rule: rule.into(),
        }
    }
}

impl FieldError {
    /// The rule, followed by the rejected value when it is shown: `must start with v (value: "1.30.0")`.
    pub fn explanation(&self) -> String {
        match &self.value {
            Some(value) => format!("{} (value: {value:?})", self.rule),
            None => self.rule.clone(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.explanation())
    }
}

impl std::error::Error for FieldError {}

/// All rules an object broke, in the order they were checked. Never empty when returned as an error.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldErrors(pub Vec<FieldError>);

impl FieldErrors {
    /// `Ok(())` when `errors` is empty, else the errors.
    pub fn into_result(errors: Vec<FieldError>) -> Result<(), FieldErrors> {
        if errors.is_empty() {
            Ok(())
        } else {
            Err(FieldErrors(errors))
        }
    }

    /// The errors, in the order they were found.
    pub fn iter(&self) -> std::slice::Iter<'_, FieldError> {
        self.0.iter()
    }

    /// Number of errors.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are no errors.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [] => f.write_str("no field errors"),
            [one] => one.fmt(f),
            many => {
                write!(f, "{} field errors: ", many.len())?;
                for (i, error) in many.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    error.fmt(f)?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for FieldErrors {}

impl IntoIterator for FieldErrors {
    type Item = FieldError;
    type IntoIter = std::vec::IntoIter<FieldError>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// `parent.child`, or `child` when there is no parent.
pub(crate) fn child(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_owned()
    } else {
        format!("{parent}.{name}")
    }
}

/// `parent[index]`.
pub(crate) fn index(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

const DNS1123_SUBDOMAIN_MAX: usize = 253;
const QUALIFIED_NAME_MAX: usize = 63;
const LABEL_VALUE_MAX: usize = 63;
const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

/// Why `name` is not a lowercase RFC 1123 subdomain (the rule for most object names), if it is not.
pub(crate) fn dns1123_subdomain_problem(name: &str) -> Option<String> {
    if name.len() > DNS1123_SUBDOMAIN_MAX {
        return Some(format!(
            "must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
        ));
    }
    let lower_alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let valid = !name.is_empty()
        && name.split('.').all(|label| {
            let bytes = label.as_bytes();
            bytes.first().is_some_and(lower_alnum)
                && bytes.last().is_some_and(lower_alnum)
                && bytes.iter().all(|b| lower_alnum(b) || *b == b'-')
        });
    (!valid).then(|| {
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or \
         '.', and must start and end with an alphanumeric character"
            .to_owned()
    })
}

/// Whether `s` is 1-63 characters of `[A-Za-z0-9_.-]` starting and ending with an alphanumeric.
fn is_qualified_name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= QUALIFIED_NAME_MAX
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Why `key` is not a qualified name (`[prefix/]name`, the rule for label, annotation and taint keys).
pub(crate) fn qualified_name_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Some("prefix part must be non-empty".into());
        }
        if dns1123_subdomain_problem(prefix).is_some() {
            return Some(
                "prefix part must be a lowercase RFC 1123 subdomain (e.g. example.com)".into(),
            );
        }
    }
    if is_qualified_name_part(name) {
        None
    } else {
        Some(
            "name part must be 1-63 characters of alphanumerics, '-', '_' or '.', starting and \
             ending with an alphanumeric character (e.g. 'MyName', 'my.name' or '123-abc')"
                .into(),
        )
    }
}

fn label_value_problem(value: &str) -> Option<String> {
    if value.is_empty() || is_qualified_name_part(value) {
        return None;
    }
    Some(format!(
        "a label value must be empty or at most {LABEL_VALUE_MAX} characters of alphanumerics, '-', \
         '_' or '.', starting and ending with an alphanumeric character"
    ))
}

/// Labels and annotations of a template's metadata: keys are qualified names, label values are
/// valid label values, and all annotations together stay below 256 KiB.
pub(crate) fn validate_object_meta(meta: &ObjectMeta, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let labels = child(path, "labels");
    for (key, value) in &meta.labels {
        if let Some(problem) = qualified_name_problem(key) {
            errors.push(FieldError::invalid(&labels, key, problem));
        }
        if let Some(problem) = label_value_problem(value) {
            errors.push(FieldError::invalid(&labels, value, problem));
        }
    }
    let annotations = child(path, "annotations");
    for key in meta.annotations.keys() {
        if let Some(problem) = qualified_name_problem(&key.to_ascii_lowercase()) {
            errors.push(FieldError::invalid(&annotations, key, problem));
        }
    }
    if annotations_size(&meta.annotations) > ANNOTATIONS_MAX_BYTES {
        errors.push(FieldError::invalid_hidden(
            annotations,
            format!("may not have more than {ANNOTATIONS_MAX_BYTES} bytes in total"),
        ));
    }
    errors
}

fn annotations_size(annotations: &BTreeMap<String, String>) -> usize {
    annotations.iter().map(|(k, v)| k.len() + v.len()).sum()
}

/// Taints Cluster API manages on Nodes: keys are qualified names and must not collide with taints
/// Cluster API, the node lifecycle controller or cloud providers set themselves.
pub(crate) fn validate_machine_taints(taints: &[MachineTaint], path: &str) -> Vec<FieldError> {
    const CAPI_RESERVED: [&str; 2] = [
        crate::meta::UNINITIALIZED_TAINT,
        "node.cluster.x-k8s.io/outdated-revision",
    ];
    let mut errors = Vec::new();
    for (i, taint) in taints.iter().enumerate() {
        let key_path = child(&index(path, i), "key");
        let key = taint.key.as_str();
        let reserved = if CAPI_RESERVED.contains(&key) {
            Some("taint key is not allowed")
        } else if key.starts_with("node.kubernetes.io/")
            && key != "node.kubernetes.io/out-of-service"
        {
            Some(
                "taint key must not have the prefix node.kubernetes.io/, except for \
                 node.kubernetes.io/out-of-service",
            )
        } else if key.starts_with("node.cloudprovider.kubernetes.io/") {
            Some("taint key must not have the prefix node.cloudprovider.kubernetes.io/")
        } else if key == "node-role.kubernetes.io/master" {
            Some("taint is deprecated since 1.24 and should not be used anymore")
        } else {
            None
        };
        if let Some(rule) = reserved {
            errors.push(FieldError::invalid(&key_path, key, rule));
        }
        if let Some(problem) = qualified_name_problem(key) {
            errors.push(FieldError::invalid(&key_path, key, problem));
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_path_rule_and_value() {
        let error = FieldError::invalid("spec.version", "1.30.0", "must start with v");
        assert_eq!(
            error.to_string(),
            r#"spec.version: must start with v (value: "1.30.0")"#
        );
        let hidden =
            FieldError::invalid_hidden("spec.files[0]", "only one of content or contentFrom");
        assert_eq!(
            hidden.to_string(),
            "spec.files[0]: only one of content or contentFrom"
        );
        assert_eq!(ErrorKind::Forbidden.cause_type(), "FieldValueForbidden");
    }

    #[test]
    fn summary_lists_every_error() {
        let errors = FieldErrors(vec![
            FieldError::forbidden(
                "spec.replicas",
                "cannot be an even number when etcd is stacked",
            ),
            FieldError::required("spec.files[0].contentFrom.secret.key", "is required"),
        ]);
        assert_eq!(
            errors.to_string(),
            "2 field errors: spec.replicas: cannot be an even number when etcd is stacked; \
             spec.files[0].contentFrom.secret.key: is required"
        );
        assert_eq!(FieldErrors::into_result(Vec::new()), Ok(()));
    }

    #[test]
    fn names_and_label_keys() {
        assert_eq!(dns1123_subdomain_problem("cp-0.example"), None);
        for bad in ["", "Upper", "-lead", "trail-", "a..b", "under_score"] {
            assert!(dns1123_subdomain_problem(bad).is_some(), "{bad:?}");
        }
        for good in ["app", "app.kubernetes.io/name", "A_b.c-9", "example.com/x"] {
            assert_eq!(qualified_name_problem(good), None, "{good:?}");
        }
        for bad in [
            "",
            "/x",
            "Example.com/x",
            "a/",
            "-a",
            "a/b/c",
            &"x".repeat(64),
        ] {
            assert!(qualified_name_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn object_meta_rules() {
        let mut meta = ObjectMeta::default();
        meta.labels.insert("environment".into(), "test".into());
        meta.annotations
            .insert("Example.com/Note".into(), "anything goes".into());
        assert_eq!(validate_object_meta(&meta, "spec.template.metadata"), []);

        meta.labels.insert("bad key!".into(), "ok".into());
        meta.labels.insert("tier".into(), "not a value".into());
        let errors = validate_object_meta(&meta, "spec.template.metadata");
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors
                .iter()
                .all(|e| e.path == "spec.template.metadata.labels")
        );
        assert_eq!(errors[0].value.as_deref(), Some("bad key!"));
        assert!(errors[1].rule.starts_with("a label value must be empty"));

        let mut big = ObjectMeta::default();
        big.annotations
            .insert("a".into(), "x".repeat(ANNOTATIONS_MAX_BYTES));
        let errors = validate_object_meta(&big, "m");
        assert_eq!(errors[0].path, "m.annotations");
        assert!(errors[0].rule.contains("262144 bytes"));
    }

    #[test]
    fn taint_keys() {
        let taint = |key: &str| MachineTaint {
            key: key.into(),
            ..Default::default()
        };
        let taints = [
            taint("example.com/dedicated"),
            taint("node.kubernetes.io/out-of-service"),
            taint("node.cluster.x-k8s.io/uninitialized"),
            taint("node.kubernetes.io/not-ready"),
            taint("node.cloudprovider.kubernetes.io/uninitialized"),
            taint("node-role.kubernetes.io/master"),
            taint("bad key"),
        ];
        let errors = validate_machine_taints(&taints, "spec.taints");
        let found: Vec<(&str, &str)> = errors
            .iter()
            .map(|e| (e.path.as_str(), e.rule.as_str()))
            .collect();
        assert_eq!(found.len(), 5, "{found:?}");
        assert_eq!(found[0], ("spec.taints[2].key", "taint key is not allowed"));
        assert!(
            found[1]
                .1
                .contains("except for node.kubernetes.io/out-of-service")
        );
        assert_eq!(found[1].0, "spec.taints[3].key");
        assert!(found[2].1.ends_with("node.cloudprovider.kubernetes.io/"));
        assert!(found[3].1.starts_with("taint is deprecated since 1.24"));
        assert_eq!(found[4].0, "spec.taints[6].key");
        assert!(found[4].1.starts_with("name part must be"));
    }
}
