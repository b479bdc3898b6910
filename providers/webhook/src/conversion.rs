//! ConversionReview v1: every object of the request goes through the conversion function; one
//! failure fails the whole review, as the API server expects.

use std::panic::{AssertUnwindSafe, catch_unwind};

use kube_core::conversion::{ConversionRequest, ConversionResponse};
use kube_core::response::Status;
use serde_json::Value;

use crate::metrics::Outcome;
use crate::review::{self, BadReview};

const API_VERSION: &str = "apiextensions.k8s.io/v1";
const KIND: &str = "ConversionReview";

pub(crate) type ConvertFn = dyn Fn(Value, &str) -> Result<Value, String> + Send + Sync + 'static;

/// Converts the objects of a ConversionReview body to its desired apiVersion.
pub(crate) fn convert(handler: &ConvertFn, body: &[u8]) -> Result<(Value, Outcome), BadReview> {
    let request = review::request_of(body, API_VERSION, KIND)?;
    let mut request: ConversionRequest = serde_json::from_value(request)
        .map_err(|e| BadReview::new(format!("the ConversionReview request is invalid: {e}")))?;
    let objects = std::mem::take(&mut request.objects);
    let desired = request.desired_api_version.clone();
    let response = ConversionResponse::for_request(request);
    let mut converted = Vec::with_capacity(objects.len());
    for object in objects {
        let what = describe(&object);
        let result =
            catch_unwind(AssertUnwindSafe(|| handler(object, &desired))).unwrap_or_else(|panic| {
                tracing::error!(
                    object = %what,
                    desired,
                    panic = crate::server::panic_text(&*panic),
                    "conversion panicked"
                );
                Err("the conversion webhook failed on this object".to_string())
            });
        match result {
            Ok(object) => converted.push(object),
            Err(message) => {
                let message = format!("converting {what} to {desired}: {message}");
                let review = response
                    .failure(Status::failure(&message, ""))
                    .into_review();
                return Ok((to_json(review), Outcome::Failed));
            }
        }
    }
    Ok((
        to_json(response.success(converted).into_review()),
        Outcome::Converted,
    ))
}

/// `Kind namespace/name of apiVersion`, for messages.
fn describe(object: &Value) -> String {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let (namespace, name) = (text("/metadata/namespace"), text("/metadata/name"));
    let name = if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    };
    format!("{} {name} of {}", text("/kind"), text("/apiVersion"))
}

fn to_json(review: kube_core::conversion::ConversionReview) -> Value {
    serde_json::to_value(review).expect("a conversion review serializes")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn review(objects: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {
                "uid": "c1",
                "desiredAPIVersion": "example.com/v2",
                "objects": objects
            }
        }))
        .unwrap()
    }

    fn set_version(mut object: Value, desired: &str) -> Result<Value, String> {
        if object["spec"]["bad"] == true {
            return Err("spec.bad cannot be converted".into());
        }
        object["apiVersion"] = desired.into();
        Ok(object)
    }

    #[test]
    fn converts_every_object() {
        let objects = json!([
            {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "a"}},
            {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "b"}}
        ]);
        let (answer, outcome) = convert(&set_version, &review(objects)).unwrap();
        assert_eq!(outcome, Outcome::Converted);
        assert_eq!(
            answer,
            json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "ConversionReview",
                "response": {
                    "uid": "c1",
                    "result": {"status": "Success"},
                    "convertedObjects": [
                        {"apiVersion": "example.com/v2", "kind": "Thing", "metadata": {"name": "a"}},
                        {"apiVersion": "example.com/v2", "kind": "Thing", "metadata": {"name": "b"}}
                    ]
                }
            })
        );
    }

    #[test]
    fn one_failure_fails_the_review_naming_the_object() {
        let objects = json!([
            {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "a"}},
            {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "b", "namespace": "ns"}, "spec": {"bad": true}}
        ]);
        let (answer, outcome) = convert(&set_version, &review(objects)).unwrap();
        assert_eq!(outcome, Outcome::Failed);
        assert_eq!(answer["response"]["uid"], "c1");
        assert_eq!(answer["response"]["result"]["status"], "Failure");
        assert_eq!(
            answer["response"]["result"]["message"],
            "converting Thing ns/b of example.com/v1 to example.com/v2: spec.bad cannot be converted"
        );
        assert_eq!(answer["response"]["convertedObjects"], json!([]));
    }

    #[test]
    fn an_admission_review_is_not_a_conversion_review() {
        let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}"#;
        let err = convert(&set_version, body).unwrap_err().to_string();
        assert!(err.starts_with("expected kind ConversionReview"), "{err}");
    }
}
