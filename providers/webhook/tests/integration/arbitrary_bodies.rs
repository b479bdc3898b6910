//! Whatever arrives in a body, the router answers 200 (a review) or 400 (a short message) and never
//! panics; and the patch a mutating webhook answers with turns the object into the mutated one.

use std::sync::LazyLock;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use kubeadm_webhook::{AdmissionRequest, CONVERSION_PATH, Denial, WebhookServer};
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use tower::ServiceExt;

const PATHS: [&str; 3] = ["/mutate-x", "/validate-x", CONVERSION_PATH];

static ROUTER: LazyLock<Router> = LazyLock::new(|| {
    WebhookServer::builder()
        .mutating("/mutate-x", |request: &AdmissionRequest| {
            let Some(object) = &request.object else {
                return Ok(None);
            };
            let mut object = serde_json::to_value(object).unwrap();
            object["metadata"]["labels"] = json!({"mutated": "yes"});
            Ok(Some(object))
        })
        .validating("/validate-x", |request: &AdmissionRequest| {
            if request.name.len() % 2 == 1 {
                Err(Denial::forbidden("odd names are refused"))
            } else {
                Ok(Vec::new())
            }
        })
        .conversion(
            CONVERSION_PATH,
            |mut object: Value, desired: &str| match object.as_object_mut() {
                Some(fields) => {
                    fields.insert("apiVersion".into(), desired.into());
                    Ok(object)
                }
                None => Err("not an object".into()),
            },
        )
        .build()
        .unwrap()
        .router()
});

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

async fn post(path: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
    let request = Request::post(path).body(Body::from(body)).unwrap();
    let response = ROUTER.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, body.to_vec())
}

/// Any JSON value, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "[a-zA-Z0-9 /.-]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Keys a review has, so that random reviews get past the envelope now and then.
fn review_key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("uid".to_string()),
        Just("kind".to_string()),
        Just("resource".to_string()),
        Just("operation".to_string()),
        Just("userInfo".to_string()),
        Just("object".to_string()),
        Just("oldObject".to_string()),
        Just("desiredAPIVersion".to_string()),
        Just("objects".to_string()),
        "[a-z]{1,6}",
    ]
}

/// A review envelope around a request made of review keys with random values.
fn review_like() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            Just(("admission.k8s.io/v1", "AdmissionReview")),
            Just(("apiextensions.k8s.io/v1", "ConversionReview")),
            Just(("admission.k8s.io/v1beta1", "AdmissionReview")),
        ],
        prop::collection::btree_map(review_key(), json_value(), 0..10),
    )
        .prop_map(|((api_version, kind), request)| {
            json!({"apiVersion": api_version, "kind": kind, "request": Value::Object(request.into_iter().collect())})
        })
}

fn assert_answered(path: &str, status: StatusCode, body: &[u8]) {
    match status {
        StatusCode::OK => {
            let review: Value = serde_json::from_slice(body).expect("a 200 carries a review");
            assert!(review["response"].is_object(), "{review}");
        }
        StatusCode::BAD_REQUEST => {
            let message = String::from_utf8_lossy(body);
            assert!(
                !message.is_empty() && message.chars().count() <= 301,
                "{message}"
            );
        }
        other => panic!("{path} answered {other}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_bytes_get_200_or_400(path in prop::sample::select(&PATHS[..]), body in prop::collection::vec(any::<u8>(), 0..512)) {
        let (status, answer) = runtime().block_on(post(path, body));
        assert_answered(path, status, &answer);
    }

    #[test]
    fn random_json_gets_200_or_400(path in prop::sample::select(&PATHS[..]), value in json_value()) {
        let (status, answer) = runtime().block_on(post(path, serde_json::to_vec(&value).unwrap()));
        assert_answered(path, status, &answer);
    }

    #[test]
    fn random_reviews_get_200_or_400(path in prop::sample::select(&PATHS[..]), review in review_like()) {
        let (status, answer) = runtime().block_on(post(path, serde_json::to_vec(&review).unwrap()));
        assert_answered(path, status, &answer);
    }

    #[test]
    fn the_patch_between_two_objects_turns_one_into_the_other(from in json_value(), to in json_value()) {
        let patch = json_patch::diff(&from, &to);
        let mut patched = from.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        prop_assert_eq!(patched, to);
    }
}

/// A well-formed review with random object contents always reaches the handler.
#[test]
fn well_formed_reviews_with_random_objects_are_answered_with_their_uid() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(128));
    let objects = prop::collection::btree_map("[a-zA-Z]{1,8}", json_value(), 0..6);
    runner
        .run(&objects, |fields| {
            let mut object: Map<String, Value> = fields.into_iter().collect();
            object.remove("kind");
            object.insert("metadata".into(), json!({"name": "ab"}));
            let review = json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": "u-1",
                    "kind": {"group": "", "version": "v1", "kind": "Thing"},
                    "resource": {"group": "", "version": "v1", "resource": "things"},
                    "name": "ab",
                    "operation": "CREATE",
                    "userInfo": {},
                    "object": Value::Object(object),
                }
            });
            let body = serde_json::to_vec(&review).unwrap();
            for path in ["/mutate-x", "/validate-x"] {
                let (status, answer) = runtime().block_on(post(path, body.clone()));
                prop_assert_eq!(
                    status,
                    StatusCode::OK,
                    "{}",
                    String::from_utf8_lossy(&answer)
                );
                let answer: Value = serde_json::from_slice(&answer).unwrap();
                prop_assert_eq!(&answer["response"]["uid"], "u-1");
                prop_assert_eq!(&answer["response"]["allowed"], true);
            }
            Ok(())
        })
        .unwrap();
}
