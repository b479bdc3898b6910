//! Offline validation of manifests: the defaulting and create rules of the admission webhooks, applied
//! to YAML files before they reach a cluster (`<manager> validate -f FILE`, see [`run_validate`]).
//!
//! Documents of other kinds are ignored, so a whole cluster template can be checked. v1beta1 objects are
//! converted to v1beta2 first. Templates from clusterctl may still hold `${VAR}` variables: defaults
//! (`${VAR:=x}`, `${VAR=x}`, `${VAR:-x}`) are filled in, a variable where a number, boolean, list or
//! object is needed is reported (render the template first), and rules about text fields that still
//! hold a variable are skipped, since their final value is unknown.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::OnceLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::de::DeserializeOwned;
use serde_json::Value;

use kubeadm_api::bootstrap::v1beta2::{KubeadmConfig, KubeadmConfigTemplate};
use kubeadm_api::bootstrap::validation::{
    validate_kubeadm_config_create, validate_kubeadm_config_template_create,
};
use kubeadm_api::controlplane::defaults::default_kcp;
use kubeadm_api::controlplane::v1beta2::{KubeadmControlPlane, KubeadmControlPlaneTemplate};
use kubeadm_api::controlplane::validation::{validate_kcp_create, validate_kcp_template_create};
use kubeadm_api::conversion::convert_object;
use kubeadm_api::crd::{STORAGE_VERSION, provider_crds};
use kubeadm_api::validation::FieldError;
use kubeadm_api::{bootstrap, controlplane};

use crate::variables::Template;
use crate::yaml;

mod command;
mod spec;
pub use command::{ValidateArgs, run_validate};
pub use spec::{EmbeddedSpec, read_embedded_spec};

/// One thing wrong with a document. Prints as `FILE:DOCUMENT: Kind/name: field.path: rule`, leaving
/// out the parts that are unknown (e.g. for a document that is not valid YAML).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The file as named by the user (`-` for standard input).
    pub file: String,
    /// Number of the document in the file, counting from 1; 0 for a problem of the whole file.
    pub document: usize,
    /// `Kind/name` of the object, when known.
    pub object: Option<String>,
    /// JSON path of the offending field, when the problem is about one field.
    pub path: Option<String>,
    /// What is wrong, and what to do about it.
    pub rule: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.document {
            // A problem of the whole file.
            0 => write!(f, "{}: ", self.file)?,
            document => write!(f, "{}:{document}: ", self.file)?,
        }
        if let Some(object) = &self.object {
            write!(f, "{object}: ")?;
        }
        if let Some(path) = &self.path {
            write!(f, "{path}: ")?;
        }
        f.write_str(&self.rule)
    }
}

/// Converts an object to another served version of its kind (the conversion webhook's logic).
type Converter<'a> = &'a dyn Fn(Value, &str) -> Result<Value, String>;

/// Validates every document in `yaml` whose API group is in `groups` and whose kind is one of ours:
/// v1beta1 objects are converted to v1beta2, then defaulted and checked like a create request.
/// `file` only names the source in the problems.
pub fn validate_documents(file: &str, yaml: &str, groups: &[&str]) -> Vec<Problem> {
    check_documents(file, yaml, groups).problems
}

/// [`validate_documents`], also telling how many documents were checked.
pub fn check_documents(file: &str, yaml: &str, groups: &[&str]) -> Report {
    check_documents_with(file, yaml, groups, &|object, desired| {
        convert_object(object, desired).map_err(|error| error.to_string())
    })
}

/// The outcome of checking one file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Number of documents of our kinds that were checked.
    pub checked: usize,
    /// Everything found wrong, in document order.
    pub problems: Vec<Problem>,
    /// What is accepted but worth knowing, e.g. v1beta1-only fields v1beta2 does not use.
    pub warnings: Vec<Problem>,
}

/// [`check_documents`] with the converter for v1beta1 objects given.
fn check_documents_with(file: &str, yaml: &str, groups: &[&str], convert: Converter<'_>) -> Report {
    let schemas = Schemas::shared();
    let mut report = Report::default();
    for yaml::Document {
        number, content, ..
    } in yaml::documents(yaml)
    {
        let problem = |object: Option<&str>, path: Option<&str>, rule: String| Problem {
            file: file.to_owned(),
            document: number,
            object: object.map(str::to_owned),
            path: path.map(str::to_owned),
            rule,
        };
        let value: Value = match serde_saphyr::from_str(content) {
            Ok(value) => value,
            Err(error) => {
                report
                    .problems
                    .push(problem(None, None, format!("cannot parse YAML: {error}")));
                continue;
            }
        };
        let Some(header) = Header::of(&value) else {
            continue;
        };
        if !groups.contains(&header.group.as_str()) || !is_our_kind(&header.group, &header.kind) {
            continue;
        }
        report.checked += 1;
        let object = format!("{}/{}", header.kind, header.name);
        let mut warnings = Vec::new();
        for (path, rule) in check_document(value, &header, schemas, convert, &mut warnings) {
            report
                .problems
                .push(problem(Some(&object), path.as_deref(), rule));
        }
        for (path, rule) in warnings {
            report
                .warnings
                .push(problem(Some(&object), Some(&path), rule));
        }
    }
    report
}

/// Finds the problems of one object of our kinds: `(field path, rule)` pairs.
/// v1beta1-only fields the converted object does not use go to `unused` as `(path, rule)`.
fn check_document(
    mut value: Value,
    header: &Header,
    schemas: &Schemas,
    convert: Converter<'_>,
    unused: &mut Vec<(String, String)>,
) -> Vec<(Option<String>, String)> {
    let Some(schema) = schemas.get(&header.group, &header.kind, &header.version) else {
        return vec![(
            Some("apiVersion".into()),
            format!(
                "{} is not served for {}; use {}/{STORAGE_VERSION}",
                header.api_version, header.kind, header.group
            ),
        )];
    };

    // The API server fills an absent spec with the schema's default (KubeadmConfig has `{}`) before it
    // checks the schema; the templates have none, and Cluster API takes them without a spec.
    if let Value::Object(fields) = &mut value
        && fields.get("spec").is_none_or(Value::is_null)
    {
        match schema.pointer("/properties/spec/default") {
            Some(default) => fields.insert("spec".into(), default.clone()),
            None => fields.remove("spec"),
        };
    }
    let spec_absent = value.get("spec").is_none();
    let mut problems = Vec::new();
    resolve_variables(&mut value, Some(schema), &mut Vec::new(), &mut problems);
    let removed: Vec<Option<String>> = problems.iter().map(|(path, _)| path.clone()).collect();
    let mut shape = Vec::new();
    schema_problems(&value, schema, &mut Vec::new(), &mut shape);
    shape.retain(|(path, _)| !removed.contains(path));
    if !shape.is_empty() {
        // The API server would refuse the object before any admission rule sees it.
        problems.extend(shape);
        return problems;
    }

    if header.version != STORAGE_VERSION {
        let desired = format!("{}/{STORAGE_VERSION}", header.group);
        match convert(value, &desired) {
            Ok(converted) => {
                let annotations: Option<BTreeMap<String, String>> = converted
                    .pointer("/metadata/annotations")
                    .and_then(|a| serde_json::from_value(a.clone()).ok());
                unused.extend(kubeadm_api::conversion::unused_v1beta1_fields(
                    &header.kind,
                    annotations.as_ref(),
                ));
                value = converted;
            }
            Err(error) => {
                problems.push((
                    None,
                    format!(
                        "cannot convert {} to {desired}: {error}",
                        header.api_version
                    ),
                ));
                return problems;
            }
        }
    }

    let mut unresolved = Vec::new();
    text_variable_paths(&value, &mut Vec::new(), &mut unresolved);
    let typed_placeholders = !problems.is_empty();
    // The Go webhooks see an absent spec as the zero spec; a KubeadmControlPlane's zero spec lacks
    // its required fields, a template's is complete.
    if spec_absent {
        value["spec"] = match header.kind.as_str() {
            "KubeadmConfigTemplate" => kubeadm_api::meta::zero_spec::<KubeadmConfigTemplate>(),
            "KubeadmControlPlaneTemplate" => {
                kubeadm_api::meta::zero_spec::<KubeadmControlPlaneTemplate>()
            }
            _ => Value::Object(Default::default()),
        };
        if header.kind == "KubeadmControlPlane" {
            schema_problems(&value, schema, &mut Vec::new(), &mut problems);
            return problems;
        }
    }
    let result = match header.kind.as_str() {
        "KubeadmConfig" => {
            typed::<KubeadmConfig>(value).map(|c| validate_kubeadm_config_create(&c))
        }
        "KubeadmConfigTemplate" => typed::<KubeadmConfigTemplate>(value)
            .map(|t| validate_kubeadm_config_template_create(&t)),
        "KubeadmControlPlane" => typed::<KubeadmControlPlane>(value).map(|mut kcp| {
            default_kcp(&mut kcp);
            validate_kcp_create(&kcp)
        }),
        _ => typed::<KubeadmControlPlaneTemplate>(value).map(|t| validate_kcp_template_create(&t)),
    };
    match result {
        Ok(Ok(())) => {}
        Ok(Err(errors)) => problems.extend(
            errors
                .into_iter()
                .filter(|error| !depends_on_variable(error, &unresolved))
                .map(|error| (Some(error.path.clone()), error.explanation())),
        ),
        // A removed variable may be what broke the schema; those are reported already.
        Err(_) if typed_placeholders => {}
        Err(error) => problems.push((None, format!("does not match the schema: {error}"))),
    }
    problems
}

/// The structural checks of the CRD schema, with field paths: required fields are present, values
/// have the schema's type, enums hold one of their values. Unknown fields are ignored (the API server
/// drops them) and `null` counts as absent.
fn schema_problems(
    value: &Value,
    schema: &Value,
    path: &mut Vec<PathPart>,
    out: &mut Vec<(Option<String>, String)>,
) {
    let here = |path: &[PathPart]| Some(render_path(path));
    if value.is_null() {
        return;
    }
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        if !(value.is_i64() || value.is_u64() || value.is_string()) {
            out.push((here(path), "must be an integer or a string".into()));
        }
        return;
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => {
            let Value::Object(fields) = value else {
                out.push((here(path), "must be an object".into()));
                return;
            };
            let required = schema.get("required").and_then(Value::as_array);
            for key in required.into_iter().flatten().filter_map(Value::as_str) {
                if fields.get(key).is_none_or(Value::is_null) {
                    path.push(PathPart::Key(key.to_owned()));
                    out.push((here(path), "is required".into()));
                    path.pop();
                }
            }
            for (key, field) in fields {
                if let Some(field_schema) = child_schema(schema, key) {
                    path.push(PathPart::Key(key.clone()));
                    schema_problems(field, field_schema, path, out);
                    path.pop();
                }
            }
        }
        Some("array") => {
            let Value::Array(items) = value else {
                out.push((here(path), "must be a list".into()));
                return;
            };
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    path.push(PathPart::Index(i));
                    schema_problems(item, item_schema, path, out);
                    path.pop();
                }
            }
        }
        Some("string") => match value.as_str() {
            None => out.push((here(path), "must be a string".into())),
            Some(text) => {
                let allowed: Vec<&str> = schema
                    .get("enum")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                if !allowed.is_empty() && !allowed.contains(&text) {
                    out.push((
                        here(path),
                        format!("must be one of {} (value: {text:?})", allowed.join(", ")),
                    ));
                }
            }
        },
        Some("integer") if !(value.is_i64() || value.is_u64()) => {
            out.push((here(path), "must be an integer".into()));
        }
        Some("number") if !value.is_number() => {
            out.push((here(path), "must be a number".into()));
        }
        Some("boolean") if !value.is_boolean() => {
            out.push((here(path), "must be true or false".into()));
        }
        _ => {}
    }
}

/// Decodes a checked object; a failure names the field (`spec.files[0].encoding: unknown variant …`).
fn typed<T: DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| format!("{}: {}", e.path(), e.inner()))
}

/// apiVersion, kind and name of a document; `None` for documents that are not Kubernetes objects.
struct Header {
    api_version: String,
    group: String,
    version: String,
    kind: String,
    name: String,
}

impl Header {
    fn of(value: &Value) -> Option<Self> {
        let api_version = value.get("apiVersion")?.as_str()?.to_owned();
        let kind = value.get("kind")?.as_str()?.to_owned();
        let (group, version) = match api_version.split_once('/') {
            Some((group, version)) => (group.to_owned(), version.to_owned()),
            None => (String::new(), api_version.clone()),
        };
        let name = value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("<unnamed>")
            .to_owned();
        Some(Self {
            api_version,
            group,
            version,
            kind,
            name,
        })
    }
}

/// Other providers share our groups (e.g. other control planes): only our kinds are checked.
fn is_our_kind(group: &str, kind: &str) -> bool {
    match group {
        bootstrap::GROUP => matches!(kind, "KubeadmConfig" | "KubeadmConfigTemplate"),
        controlplane::GROUP => {
            matches!(kind, "KubeadmControlPlane" | "KubeadmControlPlaneTemplate")
        }
        _ => false,
    }
}

/// OpenAPI schemas of our kinds by (group, kind, version), as JSON.
struct Schemas(BTreeMap<(String, String, String), Value>);

impl Schemas {
    /// The schemas of the CRDs this build generates, computed once.
    fn shared() -> &'static Self {
        static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
        SCHEMAS.get_or_init(Schemas::new)
    }

    fn new() -> Self {
        let mut schemas = BTreeMap::new();
        for crd in provider_crds() {
            let CustomResourceDefinition { spec, .. } = crd;
            for version in spec.versions {
                let schema = version
                    .schema
                    .and_then(|s| s.open_api_v3_schema)
                    .and_then(|s| serde_json::to_value(s).ok())
                    .unwrap_or(Value::Null);
                schemas.insert(
                    (spec.group.clone(), spec.names.kind.clone(), version.name),
                    schema,
                );
            }
        }
        Self(schemas)
    }

    fn get(&self, group: &str, kind: &str, version: &str) -> Option<&Value> {
        self.0
            .get(&(group.to_owned(), kind.to_owned(), version.to_owned()))
    }
}

fn has_unresolved_variable(text: &str) -> bool {
    Template::scan(text).has_variables()
}

/// The schema type of a field if it is not text: "number", "boolean", "list" or "object".
fn non_text_type(schema: &Value) -> Option<&'static str> {
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return None;
    }
    match schema.get("type").and_then(Value::as_str)? {
        "integer" | "number" => Some("a number"),
        "boolean" => Some("true or false"),
        "array" => Some("a list"),
        "object" => Some("an object"),
        _ => None,
    }
}

fn child_schema<'a>(schema: &'a Value, key: &str) -> Option<&'a Value> {
    schema
        .get("properties")
        .and_then(|p| p.get(key))
        .or_else(|| schema.get("additionalProperties").filter(|s| s.is_object()))
}

fn render_path(path: &[PathPart]) -> String {
    let mut text = String::new();
    for part in path {
        match part {
            PathPart::Key(key) => {
                if !text.is_empty() {
                    text.push('.');
                }
                text.push_str(key);
            }
            PathPart::Index(i) => text.push_str(&format!("[{i}]")),
        }
    }
    text
}

enum PathPart {
    Key(String),
    Index(usize),
}

/// Fills in the defaults of clusterctl variables, then removes (and reports) strings still holding a
/// variable where the schema wants a number, boolean, list or object: such a field cannot be checked
/// before the template is rendered. A field that was only a variable with a default takes the value
/// the default spells in YAML, so `replicas: ${N:=3}` becomes the number 3.
fn resolve_variables(
    value: &mut Value,
    schema: Option<&Value>,
    path: &mut Vec<PathPart>,
    problems: &mut Vec<(Option<String>, String)>,
) -> Resolution {
    match value {
        Value::String(text) => {
            let template = Template::scan(text);
            if !template.has_variables() {
                return Resolution::Keep;
            }
            let whole = template.is_variable_only();
            let filled = template.fill_defaults();
            let wanted = schema.and_then(non_text_type);
            if has_unresolved_variable(&filled) {
                if let Some(wanted) = wanted {
                    problems.push((Some(render_path(path)), typed_variable_rule(text, wanted)));
                    return Resolution::Remove;
                }
                *value = Value::String(filled);
            } else if whole && wanted.is_some() {
                *value = serde_saphyr::from_str::<Value>(&filled)
                    .ok()
                    .filter(|v| !v.is_null())
                    .unwrap_or(Value::String(filled));
            } else {
                *value = Value::String(filled);
            }
            Resolution::Keep
        }
        Value::Object(fields) => {
            let keys: Vec<String> = fields.keys().cloned().collect();
            for key in keys {
                let field_schema = schema.and_then(|s| child_schema(s, &key));
                path.push(PathPart::Key(key.clone()));
                if let Some(field) = fields.get_mut(&key)
                    && resolve_variables(field, field_schema, path, problems) == Resolution::Remove
                {
                    fields.remove(&key);
                }
                path.pop();
            }
            Resolution::Keep
        }
        Value::Array(items) => {
            let item_schema = schema.and_then(|s| s.get("items"));
            let mut index = 0;
            items.retain_mut(|item| {
                path.push(PathPart::Index(index));
                let keep = resolve_variables(item, item_schema, path, problems) == Resolution::Keep;
                path.pop();
                index += 1;
                keep
            });
            Resolution::Keep
        }
        _ => Resolution::Keep,
    }
}

#[derive(PartialEq, Eq)]
enum Resolution {
    Keep,
    Remove,
}

fn typed_variable_rule(text: &str, wanted: &str) -> String {
    format!(
        "holds the unresolved variable {text:?} where {wanted} is needed; render the template \
         first (e.g. with clusterctl generate cluster)"
    )
}

/// Paths of text fields that still hold a variable; rules about them are skipped.
fn text_variable_paths(value: &Value, path: &mut Vec<PathPart>, out: &mut Vec<String>) {
    match value {
        Value::String(text) if has_unresolved_variable(text) => out.push(render_path(path)),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(PathPart::Index(i));
                text_variable_paths(item, path, out);
                path.pop();
            }
        }
        Value::Object(fields) => {
            for (key, field) in fields {
                path.push(PathPart::Key(key.clone()));
                text_variable_paths(field, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

/// Whether `error` is about a field (or an element) that still holds a variable, or about an object
/// containing one, such as a list element that is compared as a whole.
fn depends_on_variable(error: &FieldError, unresolved: &[String]) -> bool {
    unresolved.iter().any(|path| {
        path == &error.path
            || path
                .strip_prefix(error.path.as_str())
                .is_some_and(|rest| rest.starts_with(['.', '[']))
    })
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    const BOOTSTRAP_GROUP: &str = bootstrap::GROUP;
    const CONTROLPLANE_GROUP: &str = controlplane::GROUP;
    const BOTH: &[&str] = &[BOOTSTRAP_GROUP, CONTROLPLANE_GROUP];

    const CLUSTER_TEMPLATE: &str = r#"# A cluster template as clusterctl renders it.
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: demo
spec:
  controlPlaneRef:
    apiGroup: controlplane.cluster.x-k8s.io
    kind: KubeadmControlPlane
    name: demo-control-plane
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata:
  name: demo-control-plane
spec:
  replicas: 3
  version: v1.33.1
  machineTemplate:
    spec:
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: DockerMachineTemplate
        name: demo-control-plane
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfigTemplate
metadata:
  name: demo-md-0
spec:
  template:
    spec:
      files:
        - path: /etc/motd
          content: hello
        - path: /etc/motd
          content: bye
          contentFrom:
            secret: {name: motd, key: ""}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata:
  name: legacy-control-plane
spec:
  replicas: 2
  version: v1.33.1
  kubeadmConfigSpec:
    clusterConfiguration:
      apiServer:
        certSANs: [localhost]
  machineTemplate:
    infrastructureRef:
      apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
      kind: DockerMachineTemplate
      name: legacy-control-plane
"#;

    fn lines(problems: &[Problem]) -> Vec<String> {
        problems.iter().map(Problem::to_string).collect()
    }

    #[test]
    fn cluster_template() {
        let problems = validate_documents("cluster.yaml", CLUSTER_TEMPLATE, BOTH);
        assert_eq!(
            lines(&problems),
            [
                "cluster.yaml:3: KubeadmConfigTemplate/demo-md-0: spec.template.spec.files[1]: \
                 only one of content or contentFrom may be specified for a single file",
                "cluster.yaml:3: KubeadmConfigTemplate/demo-md-0: \
                 spec.template.spec.files[1].contentFrom.secret.key: secret file source must \
                 specify non-empty secret key",
                "cluster.yaml:3: KubeadmConfigTemplate/demo-md-0: spec.template.spec.files[1].path: \
                 path property must be unique among all files (value: \"/etc/motd\")",
                "cluster.yaml:4: KubeadmControlPlane/legacy-control-plane: spec.replicas: cannot \
                 be an even number when etcd is stacked",
            ]
        );
    }

    #[test]
    fn conversion_failures_are_problems() {
        let yaml = CLUSTER_TEMPLATE.replace(
            "    infrastructureRef:\n      apiVersion: infrastructure.cluster.x-k8s.io/v1beta1",
            "    nodeDrainTimeout: soon\n    infrastructureRef:\n      apiVersion: infrastructure.cluster.x-k8s.io/v1beta1",
        );
        let problems = validate_documents("cluster.yaml", &yaml, &[CONTROLPLANE_GROUP]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].document, 4);
        assert!(
            problems[0].rule.starts_with(
                "cannot convert controlplane.cluster.x-k8s.io/v1beta1 to \
                 controlplane.cluster.x-k8s.io/v1beta2: "
            ),
            "{}",
            problems[0]
        );
        assert!(problems[0].rule.contains("soon"), "{}", problems[0]);
    }

    #[test]
    fn v1beta1_objects_are_converted_then_checked() {
        let asked = RefCell::new(Vec::new());
        let convert = |object: Value, desired: &str| -> Result<Value, String> {
            asked
                .borrow_mut()
                .push((object["metadata"]["name"].clone(), desired.to_owned()));
            Ok(serde_json::json!({
                "apiVersion": desired,
                "kind": "KubeadmControlPlane",
                "metadata": object["metadata"],
                "spec": {
                    "replicas": object["spec"]["replicas"],
                    "version": object["spec"]["version"],
                    "machineTemplate": {"spec": {"infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "DockerMachineTemplate",
                        "name": "legacy-control-plane"
                    }}}
                }
            }))
        };
        let report = check_documents_with(
            "cluster.yaml",
            CLUSTER_TEMPLATE,
            &[CONTROLPLANE_GROUP],
            &convert,
        );
        assert_eq!(report.checked, 2);
        assert_eq!(
            asked.into_inner(),
            [(
                Value::String("legacy-control-plane".into()),
                "controlplane.cluster.x-k8s.io/v1beta2".to_owned()
            )]
        );
        assert_eq!(
            lines(&report.problems),
            [
                "cluster.yaml:4: KubeadmControlPlane/legacy-control-plane: spec.replicas: cannot be \
              an even number when etcd is stacked"
            ]
        );
    }

    #[test]
    fn only_the_given_groups_and_our_kinds_are_checked() {
        let report = check_documents_with("f", CLUSTER_TEMPLATE, &[BOOTSTRAP_GROUP], &|_, _| {
            unreachable!("no control plane object is converted")
        });
        assert_eq!(report.checked, 1);
        assert!(report.problems.iter().all(|p| p.document == 3));

        let others = "apiVersion: controlplane.cluster.x-k8s.io/v1alpha3\nkind: TalosControlPlane\n\
                      metadata: {name: t}\n---\nkind: List\n---\nplain: value\n---\n";
        let report = check_documents_with("f", others, BOTH, &|_, _| unreachable!());
        assert_eq!(report, Report::default());
    }

    #[test]
    fn unparsable_documents_and_unserved_versions_are_problems() {
        let yaml = "apiVersion: v1\nkind: ConfigMap\n---\nkind: [unclosed\n---\n\
                    apiVersion: bootstrap.cluster.x-k8s.io/v1alpha4\nkind: KubeadmConfig\n\
                    metadata: {name: old}\n---\n\
                    apiVersion: bootstrap.cluster.x-k8s.io/v1beta2\nkind: KubeadmConfig\n\
                    metadata: {name: typo}\nspec:\n  files: {path: /x}\n";
        let problems = validate_documents("-", yaml, BOTH);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert_eq!(problems[0].document, 2);
        assert_eq!(problems[0].object, None);
        assert!(
            problems[0]
                .to_string()
                .starts_with("-:2: cannot parse YAML: ")
        );
        assert_eq!(
            problems[1].to_string(),
            "-:3: KubeadmConfig/old: apiVersion: bootstrap.cluster.x-k8s.io/v1alpha4 is not served \
             for KubeadmConfig; use bootstrap.cluster.x-k8s.io/v1beta2"
        );
        assert_eq!(
            problems[2].to_string(),
            "-:4: KubeadmConfig/typo: spec.files: must be a list"
        );
    }

    const TEMPLATED_KCP: &str = r#"
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata:
  name: ${CLUSTER_NAME}-control-plane
spec:
  replicas: ${CONTROL_PLANE_MACHINE_COUNT}
  version: ${KUBERNETES_VERSION}
  machineTemplate:
    spec:
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: OpenStackMachineTemplate
        name: ${PREFIX}-${CLUSTER_NAME}-control-plane-${CONTROL_PLANE_MACHINE_GEN}
  kubeadmConfigSpec:
    clusterConfiguration:
      certificateValidityPeriodDays: ${CERT_DAYS:=2000}
    files:
      - path: /etc/motd
        content: hello
        append: ${APPEND}
"#;

    #[test]
    fn clusterctl_variables() {
        let problems = validate_documents("t.yaml", TEMPLATED_KCP, BOTH);
        let object = "KubeadmControlPlane/${CLUSTER_NAME}-control-plane";
        assert_eq!(
            lines(&problems),
            [
                format!(
                    "t.yaml:1: {object}: spec.kubeadmConfigSpec.files[0].append: holds the \
                     unresolved variable \"${{APPEND}}\" where true or false is needed; render the \
                     template first (e.g. with clusterctl generate cluster)"
                ),
                format!(
                    "t.yaml:1: {object}: spec.replicas: holds the unresolved variable \
                     \"${{CONTROL_PLANE_MACHINE_COUNT}}\" where a number is needed; render the \
                     template first (e.g. with clusterctl generate cluster)"
                ),
                // The default is filled in and checked; the version variable is skipped.
                format!(
                    "t.yaml:1: {object}: \
                     spec.kubeadmConfigSpec.clusterConfiguration.certificateValidityPeriodDays: \
                     must be between 1 and 1095 (value: \"2000\")"
                ),
            ]
        );
    }

    #[test]
    fn variable_defaults_become_values() {
        let yaml = TEMPLATED_KCP
            .replace(
                "${CONTROL_PLANE_MACHINE_COUNT}",
                "${CONTROL_PLANE_MACHINE_COUNT:=2}",
            )
            .replace("${KUBERNETES_VERSION}", "${KUBERNETES_VERSION:-v1.26.0}")
            .replace("${CERT_DAYS:=2000}", "${CERT_DAYS=365}")
            .replace("${APPEND}", "${APPEND:=true}");
        let rules: Vec<(String, String)> = validate_documents("t.yaml", &yaml, BOTH)
            .into_iter()
            .map(|p| (p.path.unwrap_or_default(), p.rule))
            .collect();
        assert_eq!(
            rules,
            [
                (
                    "spec.replicas".to_owned(),
                    "cannot be an even number when etcd is stacked".to_owned()
                ),
                (
                    "spec.version".to_owned(),
                    format!(
                        "{} (value: \"v1.26.0\")",
                        controlplane::validation::LEARNER_MODE_UNSUPPORTED
                    )
                ),
            ]
        );
    }

    #[test]
    fn an_object_without_spec_is_checked_with_an_empty_spec() {
        let yaml = "apiVersion: bootstrap.cluster.x-k8s.io/v1beta2\nkind: KubeadmConfig\n\
                    metadata: {name: worker-0}\n";
        assert_eq!(
            check_documents("f", yaml, BOTH),
            Report {
                checked: 1,
                ..Report::default()
            }
        );
        let kcp = "apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\n\
                   metadata: {name: cp}\n";
        let paths: Vec<Option<String>> = validate_documents("f", kcp, BOTH)
            .into_iter()
            .map(|p| p.path)
            .collect();
        assert_eq!(
            paths,
            [
                Some("spec.machineTemplate".to_owned()),
                Some("spec.version".to_owned())
            ]
        );
    }

    #[test]
    fn templates_without_spec_are_accepted_as_cluster_api_accepts_them() {
        for (api_version, kind) in [
            (
                "bootstrap.cluster.x-k8s.io/v1beta2",
                "KubeadmConfigTemplate",
            ),
            (
                "bootstrap.cluster.x-k8s.io/v1beta1",
                "KubeadmConfigTemplate",
            ),
            (
                "controlplane.cluster.x-k8s.io/v1beta2",
                "KubeadmControlPlaneTemplate",
            ),
            (
                "controlplane.cluster.x-k8s.io/v1beta1",
                "KubeadmControlPlaneTemplate",
            ),
        ] {
            let yaml = format!("apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: t}}\n");
            assert_eq!(
                check_documents("f", &yaml, BOTH),
                Report {
                    checked: 1,
                    ..Report::default()
                },
                "{api_version} {kind}"
            );
        }
        // A spec that is written needs its template, as the CRD says.
        let yaml = "apiVersion: bootstrap.cluster.x-k8s.io/v1beta2\nkind: KubeadmConfigTemplate\n\
                    metadata: {name: t}\nspec: {}\n";
        let paths: Vec<Option<String>> = validate_documents("f", yaml, BOTH)
            .into_iter()
            .map(|p| p.path)
            .collect();
        assert_eq!(paths, [Some("spec.template".to_owned())]);
    }

    #[test]
    fn v1beta1_only_fields_that_v1beta2_does_not_use_are_warned_about() {
        let yaml = "apiVersion: controlplane.cluster.x-k8s.io/v1beta1\nkind: KubeadmControlPlane\n\
                    metadata: {name: cp}\nspec:\n  replicas: 3\n  version: v1.33.1\n\
                    \x20 machineTemplate:\n    infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta1, kind: M, name: m}\n\
                    \x20 kubeadmConfigSpec:\n    useExperimentalRetryJoin: true\n\
                    \x20   clusterConfiguration:\n      kubernetesVersion: ci/v1.33.1\n\
                    \x20     apiServer: {timeoutForControlPlane: 20m}\n";
        let report = check_documents("f", yaml, BOTH);
        assert_eq!(report.problems, []);
        let warned: Vec<String> = report.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(warned.len(), 2, "{warned:#?}");
        assert!(warned[0].starts_with(
            "f:1: KubeadmControlPlane/cp: spec.kubeadmConfigSpec.clusterConfiguration.kubernetesVersion: \
             exists only in v1beta1 and is not used (the Machine's version is used instead)"
        ), "{warned:#?}");
        assert!(warned[1].starts_with(
            "f:1: KubeadmControlPlane/cp: spec.kubeadmConfigSpec.useExperimentalRetryJoin: exists only in v1beta1"
        ), "{warned:#?}");
    }
}
