//! AdmissionReview v1: decoding the request, running a mutating or validating handler, and the
//! response the API server expects (uid echoed, JSONPatch in base64, denials as a `Status` whose
//! causes name the fields).

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use base64::Engine;
use kube_core::DynamicObject;
use kube_core::Resource;
use kube_core::TypeMeta;
use kube_core::response::{Status, StatusCause, StatusDetails, StatusSummary};
use serde::Serialize;
use serde_json::Value;

use crate::metrics::Outcome;
use crate::review::{self, BadReview};

const API_VERSION: &str = "admission.k8s.io/v1";
const KIND: &str = "AdmissionReview";

/// What the API server asks a webhook about: the operation, the object (absent on DELETE), the old
/// object (on UPDATE and DELETE), who asks, and whether it is a dry run.
pub type AdmissionRequest = kube_core::admission::AdmissionRequest<DynamicObject>;

/// Warnings the API server passes on to the client (kubectl prints them); keep each under 120
/// characters.
pub type Warnings = Vec<String>;

pub(crate) type MutateFn =
    dyn Fn(&AdmissionRequest) -> Result<Option<Value>, Denial> + Send + Sync + 'static;
pub(crate) type ValidateFn =
    dyn Fn(&AdmissionRequest) -> Result<Warnings, Denial> + Send + Sync + 'static;

/// Why a request is refused. The API server shows the message to the client; for
/// [`Denial::invalid`] it also carries one cause per field (`status.details.causes`), as Kubernetes
/// does for its own kinds.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct Denial {
    code: u16,
    reason: &'static str,
    message: String,
    /// Boxed: denials travel in `Result`s and should stay small.
    target: Option<Box<Target>>,
    errors: Vec<FieldError>,
}

#[derive(Clone, Debug, PartialEq)]
struct Target {
    group: String,
    kind: String,
    name: String,
}

impl Denial {
    /// The object breaks rules on its fields: HTTP-ish code 422, reason `Invalid`, message
    /// `Kind.group "name" is invalid: <field>: <what is wrong>` (several errors in brackets).
    pub fn invalid(
        group: &str,
        kind: &str,
        name: &str,
        errors: impl IntoIterator<Item = FieldError>,
    ) -> Self {
        let errors: Vec<FieldError> = errors.into_iter().collect();
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let message = match errors.as_slice() {
            [] => format!("{qualified} {name:?} is invalid"),
            [one] => format!("{qualified} {name:?} is invalid: {one}"),
            many => {
                let listed: Vec<String> = many.iter().map(ToString::to_string).collect();
                format!("{qualified} {name:?} is invalid: [{}]", listed.join(", "))
            }
        };
        Self {
            code: 422,
            reason: "Invalid",
            message,
            target: Some(Box::new(Target {
                group: group.into(),
                kind: kind.into(),
                name: name.into(),
            })),
            errors,
        }
    }

    /// [`Denial::invalid`] for `object`, naming it by its kind, group and name.
    pub fn invalid_object<K>(object: &K, errors: impl IntoIterator<Item = FieldError>) -> Self
    where
        K: Resource<DynamicType = ()>,
    {
        Self::invalid(
            &K::group(&()),
            &K::kind(&()),
            object.meta().name.as_deref().unwrap_or_default(),
            errors,
        )
    }

    /// [`Denial::invalid_object`] for the rules `object` broke, as the rules beside our kinds report
    /// them.
    pub fn from_field_errors<K>(object: &K, errors: kubeadm_api::validation::FieldErrors) -> Self
    where
        K: Resource<DynamicType = ()>,
    {
        Self::invalid_object(object, errors.into_iter().map(FieldError::from))
    }

    /// The request is not allowed as a whole (code 403, reason `Forbidden`).
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::plain(403, "Forbidden", message.into())
    }

    /// The request cannot be understood, e.g. its object does not decode (code 400, reason
    /// `BadRequest`).
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::plain(400, "BadRequest", message.into())
    }

    /// The webhook failed on its own account (code 500, reason `InternalError`).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::plain(500, "InternalError", message.into())
    }

    fn plain(code: u16, reason: &'static str, message: String) -> Self {
        Self {
            code,
            reason,
            message,
            target: None,
            errors: Vec::new(),
        }
    }

    /// The HTTP-ish status code the API server reports (422, 403, 400 or 500).
    pub fn code(&self) -> u16 {
        self.code
    }

    /// The Kubernetes status reason (`Invalid`, `Forbidden`, `BadRequest`, `InternalError`).
    pub fn reason(&self) -> &str {
        self.reason
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// The field errors of an [`Denial::invalid`] denial.
    pub fn field_errors(&self) -> &[FieldError] {
        &self.errors
    }

    fn into_status(self) -> Status {
        let details = self.target.map(|target| StatusDetails {
            name: target.name,
            group: target.group,
            kind: target.kind,
            uid: String::new(),
            causes: self
                .errors
                .iter()
                .map(|error| StatusCause {
                    reason: error.kind.cause_type().into(),
                    message: error.body(),
                    field: error.field.clone(),
                })
                .collect(),
            retry_after_seconds: 0,
        });
        Status {
            status: Some(StatusSummary::Failure),
            code: self.code,
            message: self.message,
            metadata: None,
            reason: self.reason.into(),
            details,
        }
    }
}

/// One broken rule on one field, e.g. `spec.replicas: Invalid value: 2: an even number of
/// replicas breaks etcd quorum`.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    /// The field path as Kubernetes writes it, e.g. `spec.kubeadmConfigSpec.files[0].path`.
    pub field: String,
    pub kind: FieldErrorKind,
    /// The offending value, shown in the message; `None` for secrets, large objects, or kinds
    /// where a value says nothing (required, forbidden).
    pub value: Option<Value>,
    /// The rule that is broken, said so that the user knows what to change.
    pub detail: String,
}

/// What is wrong with a field; each renders as Kubernetes' own field errors do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// The value breaks a rule.
    Invalid,
    /// A value is missing.
    Required,
    /// The field may not be set, or not changed.
    Forbidden,
    /// The value is not one of the supported ones.
    NotSupported,
    /// The value appears twice where it must be unique.
    Duplicate,
}

impl FieldErrorKind {
    /// The cause type of a Kubernetes `Invalid` status, e.g. `FieldValueInvalid`.
    pub fn cause_type(self) -> &'static str {
        match self {
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::NotSupported => "FieldValueNotSupported",
            FieldErrorKind::Duplicate => "FieldValueDuplicate",
        }
    }

    fn text(self) -> &'static str {
        match self {
            FieldErrorKind::Invalid => "Invalid value",
            FieldErrorKind::Required => "Required value",
            FieldErrorKind::Forbidden => "Forbidden",
            FieldErrorKind::NotSupported => "Unsupported value",
            FieldErrorKind::Duplicate => "Duplicate value",
        }
    }
}

impl FieldError {
    /// `value` breaks the rule `detail`.
    pub fn invalid(
        field: impl Into<String>,
        value: impl Into<Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(field, FieldErrorKind::Invalid, Some(value.into()), detail)
    }

    /// The value breaks the rule `detail` and is not shown (a secret, or too large).
    pub fn invalid_hidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(field, FieldErrorKind::Invalid, None, detail)
    }

    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(field, FieldErrorKind::Required, None, detail)
    }

    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(field, FieldErrorKind::Forbidden, None, detail)
    }

    /// `value` is not among `supported`; the message lists them.
    pub fn not_supported<S: AsRef<str>>(
        field: impl Into<String>,
        value: impl Into<Value>,
        supported: &[S],
    ) -> Self {
        let listed: Vec<String> = supported
            .iter()
            .map(|s| format!("{:?}", s.as_ref()))
            .collect();
        Self::new(
            field,
            FieldErrorKind::NotSupported,
            Some(value.into()),
            format!("supported values: {}", listed.join(", ")),
        )
    }

    pub fn duplicate(field: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(field, FieldErrorKind::Duplicate, Some(value.into()), "")
    }

    pub fn new(
        field: impl Into<String>,
        kind: FieldErrorKind,
        value: Option<Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            field: field.into(),
            kind,
            value,
            detail: detail.into(),
        }
    }

    /// The message without the field path, as a status cause carries it: `Invalid value: 2: must
    /// be odd`.
    pub fn body(&self) -> String {
        let mut body = self.kind.text().to_string();
        if let Some(value) = &self.value {
            body.push_str(&format!(": {value}"));
        }
        if !self.detail.is_empty() {
            body.push_str(": ");
            body.push_str(&self.detail);
        }
        body
    }
}

impl From<kubeadm_api::validation::ErrorKind> for FieldErrorKind {
    fn from(kind: kubeadm_api::validation::ErrorKind) -> Self {
        use kubeadm_api::validation::ErrorKind;
        match kind {
            ErrorKind::Required => FieldErrorKind::Required,
            ErrorKind::Invalid => FieldErrorKind::Invalid,
            ErrorKind::Forbidden => FieldErrorKind::Forbidden,
            ErrorKind::Duplicate => FieldErrorKind::Duplicate,
        }
    }
}

/// A broken rule of our kinds. The rules keep the offending value as text; an integer is shown as
/// a number (`Invalid value: 2`), anything else quoted, as Kubernetes shows its own values.
impl From<kubeadm_api::validation::FieldError> for FieldError {
    fn from(error: kubeadm_api::validation::FieldError) -> Self {
        let value = error.value.map(|text| match text.parse::<i64>() {
            Ok(number) => Value::from(number),
            Err(_) => Value::String(text),
        });
        Self::new(error.path, error.kind.into(), value, error.rule)
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    api_version: &'static str,
    kind: &'static str,
    response: Response,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Response {
    uid: String,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    /// The JSONPatch, base64 as Go encodes `[]byte`.
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

impl Response {
    fn allowed(request: &AdmissionRequest) -> Self {
        Self {
            uid: request.uid.clone(),
            allowed: true,
            status: None,
            patch_type: None,
            patch: None,
            warnings: Vec::new(),
        }
    }

    fn denied(request: &AdmissionRequest, denial: Denial) -> Self {
        Self {
            allowed: false,
            status: Some(denial.into_status()),
            ..Self::allowed(request)
        }
    }

    fn into_review(self) -> Value {
        serde_json::to_value(Review {
            api_version: API_VERSION,
            kind: KIND,
            response: self,
        })
        .expect("a review response serializes")
    }
}

/// The request of an AdmissionReview body.
pub(crate) fn decode(body: &[u8]) -> Result<AdmissionRequest, BadReview> {
    let request = review::request_of(body, API_VERSION, KIND)?;
    let mut request: AdmissionRequest = serde_json::from_value(request)
        .map_err(|e| BadReview::new(format!("the AdmissionReview request is invalid: {e}")))?;
    request.types = TypeMeta {
        api_version: API_VERSION.into(),
        kind: KIND.into(),
    };
    Ok(request)
}

/// Runs a defaulting handler and answers with the patch from the object to what it returned.
pub(crate) fn mutate(handler: &MutateFn, body: &[u8]) -> Result<(Value, Outcome), BadReview> {
    let request = decode(body)?;
    let (response, outcome) = match guarded(&request, || handler(&request)) {
        Ok(None) => (Response::allowed(&request), Outcome::Allowed),
        Ok(Some(mutated)) => match &request.object {
            None => (
                Response::denied(
                    &request,
                    Denial::internal("the webhook returned an object for a request without one"),
                ),
                Outcome::Failed,
            ),
            Some(object) => {
                let original = serde_json::to_value(object).expect("a decoded object re-encodes");
                let patch = json_patch::diff(&original, &mutated);
                if patch.0.is_empty() {
                    (Response::allowed(&request), Outcome::Allowed)
                } else {
                    let patch = serde_json::to_vec(&patch).expect("a JSON patch serializes");
                    let response = Response {
                        patch_type: Some("JSONPatch"),
                        patch: Some(base64::engine::general_purpose::STANDARD.encode(patch)),
                        ..Response::allowed(&request)
                    };
                    (response, Outcome::Patched)
                }
            }
        },
        Err(denial) => denied(&request, denial),
    };
    Ok((response.into_review(), outcome))
}

/// Runs a validating handler and answers allowed (with its warnings) or denied.
pub(crate) fn validate(handler: &ValidateFn, body: &[u8]) -> Result<(Value, Outcome), BadReview> {
    let request = decode(body)?;
    let (response, outcome) = match guarded(&request, || handler(&request)) {
        Ok(warnings) => (
            Response {
                warnings,
                ..Response::allowed(&request)
            },
            Outcome::Allowed,
        ),
        Err(denial) => denied(&request, denial),
    };
    Ok((response.into_review(), outcome))
}

fn denied(request: &AdmissionRequest, denial: Denial) -> (Response, Outcome) {
    let outcome = if denial.code >= 500 {
        Outcome::Failed
    } else {
        Outcome::Denied
    };
    (Response::denied(request, denial), outcome)
}

/// Runs `handler`, turning a panic into an internal-error denial: one broken rule must not take
/// the connection (or the server) down.
fn guarded<T>(
    request: &AdmissionRequest,
    handler: impl FnOnce() -> Result<T, Denial>,
) -> Result<T, Denial> {
    catch_unwind(AssertUnwindSafe(handler)).unwrap_or_else(|panic| {
        tracing::error!(
            uid = %request.uid,
            kind = %request.kind.kind,
            name = %request.name,
            panic = crate::server::panic_text(&*panic),
            "admission handler panicked"
        );
        Err(Denial::internal(
            "the webhook failed while handling this request",
        ))
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn review(operation: &str, object: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "example.com", "version": "v1", "kind": "Thing"},
                "resource": {"group": "example.com", "version": "v1", "resource": "things"},
                "name": "one",
                "namespace": "default",
                "operation": operation,
                "userInfo": {"username": "admin"},
                "object": object,
                "oldObject": null,
                "dryRun": false
            }
        }))
        .unwrap()
    }

    fn thing(spec: Value) -> Value {
        json!({
            "apiVersion": "example.com/v1",
            "kind": "Thing",
            "metadata": {"name": "one", "namespace": "default", "creationTimestamp": null},
            "spec": spec
        })
    }

    #[test]
    fn invalid_denial_names_fields_like_kubernetes() {
        let denial = Denial::invalid(
            "controlplane.cluster.x-k8s.io",
            "KubeadmControlPlane",
            "cp",
            vec![
                FieldError::invalid("spec.replicas", 2, "must be odd"),
                FieldError::required("spec.version", ""),
                FieldError::not_supported(
                    "spec.rollout.strategy.type",
                    "Recreate",
                    &["RollingUpdate"],
                ),
            ],
        );
        assert_eq!(
            denial.message(),
            r#"KubeadmControlPlane.controlplane.cluster.x-k8s.io "cp" is invalid: [spec.replicas: Invalid value: 2: must be odd, spec.version: Required value, spec.rollout.strategy.type: Unsupported value: "Recreate": supported values: "RollingUpdate"]"#
        );
        let status = serde_json::to_value(denial.into_status()).unwrap();
        assert_eq!(
            status,
            json!({
                "status": "Failure",
                "code": 422,
                "reason": "Invalid",
                "message": r#"KubeadmControlPlane.controlplane.cluster.x-k8s.io "cp" is invalid: [spec.replicas: Invalid value: 2: must be odd, spec.version: Required value, spec.rollout.strategy.type: Unsupported value: "Recreate": supported values: "RollingUpdate"]"#,
                "details": {
                    "name": "cp",
                    "group": "controlplane.cluster.x-k8s.io",
                    "kind": "KubeadmControlPlane",
                    "causes": [
                        {"reason": "FieldValueInvalid", "message": "Invalid value: 2: must be odd", "field": "spec.replicas"},
                        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.version"},
                        {"reason": "FieldValueNotSupported", "message": "Unsupported value: \"Recreate\": supported values: \"RollingUpdate\"", "field": "spec.rollout.strategy.type"}
                    ]
                }
            })
        );
    }

    #[test]
    fn a_single_field_error_is_not_bracketed() {
        let denial = Denial::invalid(
            "",
            "Pod",
            "p",
            vec![FieldError::forbidden("spec.nodeName", "cannot be changed")],
        );
        assert_eq!(
            denial.message(),
            r#"Pod "p" is invalid: spec.nodeName: Forbidden: cannot be changed"#
        );
    }

    #[test]
    fn a_hidden_value_is_left_out_of_the_message() {
        let error = FieldError::invalid_hidden("spec.users[0].passwd", "must be a hash");
        assert_eq!(
            error.to_string(),
            "spec.users[0].passwd: Invalid value: must be a hash"
        );
        assert_eq!(error.kind.cause_type(), "FieldValueInvalid");
    }

    #[test]
    fn broken_rules_of_our_kinds_become_field_causes() {
        use kubeadm_api::controlplane::v1beta2::{KubeadmControlPlane, KubeadmControlPlaneSpec};
        use kubeadm_api::validation::{FieldError as RuleError, FieldErrors};

        let kcp = KubeadmControlPlane::new("cp", KubeadmControlPlaneSpec::default());
        let denial = Denial::from_field_errors(
            &kcp,
            FieldErrors(vec![
                RuleError::invalid("spec.replicas", 2, "cannot be even"),
                RuleError::invalid("spec.version", "1.30", "must start with v"),
                RuleError::invalid_hidden("spec.kubeadmConfigSpec.files[0]", "one source only"),
                RuleError::required("spec.version", "is required"),
                RuleError::forbidden("spec.kubeadmConfigSpec.format", "cannot be changed"),
                RuleError::duplicate("spec.kubeadmConfigSpec.files[1].path", "/a", "unique"),
            ]),
        );
        assert_eq!(denial.code(), 422);
        let shown: Vec<String> = denial
            .field_errors()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            shown,
            [
                "spec.replicas: Invalid value: 2: cannot be even",
                r#"spec.version: Invalid value: "1.30": must start with v"#,
                "spec.kubeadmConfigSpec.files[0]: Invalid value: one source only",
                "spec.version: Required value: is required",
                "spec.kubeadmConfigSpec.format: Forbidden: cannot be changed",
                r#"spec.kubeadmConfigSpec.files[1].path: Duplicate value: "/a": unique"#,
            ]
        );
        assert!(
            denial
                .message()
                .starts_with(r#"KubeadmControlPlane.controlplane.cluster.x-k8s.io "cp" is invalid: [spec.replicas"#),
            "{}",
            denial.message()
        );
    }

    #[test]
    fn forbidden_denial_has_no_details() {
        let status = serde_json::to_value(Denial::forbidden("no").into_status()).unwrap();
        assert_eq!(
            status,
            json!({"status": "Failure", "code": 403, "reason": "Forbidden", "message": "no"})
        );
    }

    #[test]
    fn mutation_answers_with_a_patch_that_yields_the_mutated_object() {
        let object = thing(json!({"replicas": 1, "list": ["a", "b", "c"]}));
        let handler = |request: &AdmissionRequest| {
            let mut object = serde_json::to_value(request.object.as_ref().unwrap()).unwrap();
            object["spec"]["replicas"] = json!(3);
            object["spec"]["list"] = json!(["a"]);
            object["metadata"]["labels"] = json!({"defaulted": "true"});
            Ok(Some(object))
        };
        let (answer, outcome) = mutate(&handler, &review("CREATE", object.clone())).unwrap();
        assert_eq!(outcome, Outcome::Patched);
        let response = &answer["response"];
        assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(response["allowed"], true);
        assert_eq!(response["patchType"], "JSONPatch");
        let patch = base64::engine::general_purpose::STANDARD
            .decode(response["patch"].as_str().unwrap())
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        let mut patched = object;
        json_patch::patch(&mut patched, &patch).unwrap();
        assert_eq!(patched["spec"], json!({"replicas": 3, "list": ["a"]}));
        assert_eq!(patched["metadata"]["labels"], json!({"defaulted": "true"}));
    }

    #[test]
    fn an_unchanged_object_gets_no_patch() {
        let handler = |request: &AdmissionRequest| {
            Ok(Some(
                serde_json::to_value(request.object.as_ref().unwrap()).unwrap(),
            ))
        };
        let (answer, outcome) = mutate(&handler, &review("CREATE", thing(json!({})))).unwrap();
        assert_eq!(outcome, Outcome::Allowed);
        assert_eq!(
            answer,
            json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": true}
            })
        );
    }

    #[test]
    fn validation_passes_warnings_and_denials() {
        let allow = |_: &AdmissionRequest| Ok(vec!["spec.x is deprecated".to_string()]);
        let (answer, outcome) = validate(&allow, &review("CREATE", thing(json!({})))).unwrap();
        assert_eq!(outcome, Outcome::Allowed);
        assert_eq!(
            answer["response"]["warnings"],
            json!(["spec.x is deprecated"])
        );

        let deny = |_: &AdmissionRequest| Err(Denial::forbidden("not today"));
        let (answer, outcome) = validate(&deny, &review("CREATE", thing(json!({})))).unwrap();
        assert_eq!(outcome, Outcome::Denied);
        assert_eq!(answer["response"]["allowed"], false);
        assert_eq!(answer["response"]["status"]["code"], 403);
        assert_eq!(answer["response"]["status"]["message"], "not today");
    }

    #[test]
    fn a_panicking_handler_is_an_internal_error() {
        let handler = |_: &AdmissionRequest| -> Result<Warnings, Denial> { panic!("rule bug") };
        let (answer, outcome) = validate(&handler, &review("CREATE", thing(json!({})))).unwrap();
        assert_eq!(outcome, Outcome::Failed);
        assert_eq!(answer["response"]["allowed"], false);
        assert_eq!(answer["response"]["status"]["code"], 500);
        assert_eq!(
            answer["response"]["uid"],
            "705ab4f5-6393-11e8-b7cc-42010a800002"
        );
    }

    #[test]
    fn a_request_without_its_required_fields_is_a_bad_review() {
        let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1"}}"#;
        let err = decode(body).unwrap_err().to_string();
        assert!(
            err.starts_with("the AdmissionReview request is invalid: missing field"),
            "{err}"
        );
    }
}
