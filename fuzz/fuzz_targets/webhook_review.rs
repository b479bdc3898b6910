//! Any body POSTed to each webhook either manager serves: the bootstrap manager's (defaulting,
//! validation of both kinds, conversion of all four) and the control-plane manager's (defaulting,
//! validation and the scale subresource of its kinds, conversion), through their routers as the HTTPS
//! layer hands requests to them. The answer is a review (200) or a short message (400). A review is
//! JSON of the request's kind, echoes the request's uid, and a successful conversion returns every
//! object in the desired version.

#![no_main]

use std::sync::LazyLock;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tower::ServiceExt;

/// Every webhook path of both managers, with the router that serves it.
static SERVERS: LazyLock<Vec<(Router, String)>> = LazyLock::new(|| {
    let bootstrap = kubeadm_bootstrap::webhooks::server().expect("the bootstrap webhooks build");
    // No control plane is stored: updates and scale requests see none, as before the first list.
    let (kcps, _writer) = kube::runtime::reflector::store();
    let control_plane =
        kubeadm_controlplane::webhooks::server(kcps, kubeadm_api::conversion::NoContractVersions)
            .expect("the control-plane webhooks build");
    [bootstrap, control_plane]
        .iter()
        .flat_map(|server| {
            let router = server.router();
            server
                .paths()
                .map(move |path| (router.clone(), path.to_owned()))
                .collect::<Vec<_>>()
        })
        .collect()
});

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime starts")
});

/// Longest 400 message: the server cuts parser errors there and adds `…`.
const MAX_MESSAGE_CHARS: usize = 301;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let (router, path) = &SERVERS[usize::from(selector) % SERVERS.len()];
    let (status, answer) = RUNTIME.block_on(post(router, path, body.to_vec()));
    match status {
        StatusCode::OK => check_review(path, body, &answer),
        StatusCode::BAD_REQUEST => {
            let message = std::str::from_utf8(&answer).expect("a 400 message is text");
            assert!(!message.trim().is_empty());
            assert!(message.chars().count() <= MAX_MESSAGE_CHARS, "{message}");
        }
        other => panic!("{path} answered {other}"),
    }
});

async fn post(router: &Router, path: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
    let request = Request::post(path)
        .body(Body::from(body))
        .expect("a request");
    let response = router
        .clone()
        .oneshot(request)
        .await
        .expect("routers never fail");
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("the answer is in memory");
    (status, body.to_vec())
}

fn check_review(path: &str, body: &[u8], answer: &[u8]) {
    let review: Value = serde_json::from_slice(answer).expect("a 200 carries JSON");
    // Only a review of the expected kind is answered with 200, so the body is one.
    let request: Value = serde_json::from_slice(body).expect("an answered body is JSON");
    assert_eq!(review["apiVersion"], request["apiVersion"], "{path}");
    assert_eq!(review["kind"], request["kind"], "{path}");
    let response = &review["response"];
    assert!(response.is_object(), "{review}");
    if let Some(uid) = request["request"]["uid"].as_str() {
        assert_eq!(response["uid"], uid, "{review}");
    }
    match request["kind"].as_str() {
        Some("AdmissionReview") => {
            assert!(response["allowed"].is_boolean(), "{review}");
            if !response["patch"].is_null() {
                assert_eq!(response["patchType"], "JSONPatch", "{review}");
                assert!(response["patch"].is_string(), "{review}");
            }
        }
        Some("ConversionReview") if response["result"]["status"] == "Success" => {
            let desired = &request["request"]["desiredAPIVersion"];
            let objects = request["request"]["objects"].as_array().map_or(0, Vec::len);
            let converted = response["convertedObjects"].as_array().expect("a list");
            assert_eq!(converted.len(), objects, "{review}");
            for object in converted {
                assert_eq!(&object["apiVersion"], desired, "{review}");
            }
        }
        Some("ConversionReview") => {
            assert_eq!(response["result"]["status"], "Failure", "{review}");
            assert!(
                response["result"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty())
            );
        }
        other => panic!("{path} answered a review for kind {other:?}"),
    }
}
