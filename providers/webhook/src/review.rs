//! The envelope both kinds of review share: a JSON object naming its kind and apiVersion, carrying a
//! `request`. A body that is not such an envelope is answered with HTTP 400, never with a review.

use serde_json::Value;

/// Longest message a 400 answer carries; parser errors can quote the offending input.
const MAX_MESSAGE_CHARS: usize = 300;

/// Why a body is not a review this endpoint answers; the text goes back with HTTP 400.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadReview(String);

impl BadReview {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        let mut message: String = message.into();
        if let Some((cut, _)) = message.char_indices().nth(MAX_MESSAGE_CHARS) {
            message.truncate(cut);
            message.push('…');
        }
        Self(message)
    }
}

/// The `request` of a review of `kind` in `api_version`.
pub(crate) fn request_of(body: &[u8], api_version: &str, kind: &str) -> Result<Value, BadReview> {
    let review: Value = serde_json::from_slice(body)
        .map_err(|e| BadReview::new(format!("the body is not JSON: {e}")))?;
    let Value::Object(mut review) = review else {
        return Err(BadReview::new(format!(
            "the body is {}, expected an object of kind {kind}",
            json_type(&review)
        )));
    };
    let field = |name: &str| review.get(name).and_then(Value::as_str).unwrap_or_default();
    let (got_kind, got_version) = (field("kind"), field("apiVersion"));
    if got_kind != kind || got_version != api_version {
        return Err(BadReview::new(format!(
            "expected kind {kind} of apiVersion {api_version}, got kind {got_kind:?} of apiVersion {got_version:?}"
        )));
    }
    match review.remove("request") {
        None | Some(Value::Null) => Err(BadReview::new(format!("the {kind} has no request"))),
        Some(request) => Ok(request),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "admission.k8s.io/v1";

    #[test]
    fn takes_the_request_of_the_expected_review() {
        let body = br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"1"}}"#;
        assert_eq!(
            request_of(body, V1, "AdmissionReview"),
            Ok(serde_json::json!({"uid": "1"}))
        );
    }

    #[test]
    fn names_what_is_wrong() {
        for (body, message) in [
            (&b"{"[..], "the body is not JSON: EOF while parsing an object at line 1 column 1"),
            (b"[1]", "the body is an array, expected an object of kind AdmissionReview"),
            (
                br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1beta1","request":{}}"#,
                r#"expected kind AdmissionReview of apiVersion admission.k8s.io/v1, got kind "AdmissionReview" of apiVersion "admission.k8s.io/v1beta1""#,
            ),
            (
                br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":null}"#,
                "the AdmissionReview has no request",
            ),
        ] {
            assert_eq!(
                request_of(body, V1, "AdmissionReview"),
                Err(BadReview(message.to_string()))
            );
        }
    }

    #[test]
    fn long_messages_are_cut() {
        let long = "x".repeat(10_000);
        let body = format!(r#"{{"kind":"{long}","apiVersion":"v1"}}"#);
        let err = request_of(body.as_bytes(), V1, "AdmissionReview").unwrap_err();
        assert_eq!(err.to_string().chars().count(), MAX_MESSAGE_CHARS + 1);
        assert!(err.to_string().ends_with('…'));
    }
}
