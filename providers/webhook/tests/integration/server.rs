//! The webhook server over real HTTPS on 127.0.0.1: reviews, refusals, certificate rotation, TLS 1.2,
//! shutdown.

use crate::support;

use std::time::{Duration, Instant};

use base64::Engine;
use hyper::StatusCode;
use kubeadm_api::bootstrap::v1beta2::KubeadmConfig;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_webhook::{
    AdmissionRequest, CONVERSION_PATH, Change, Denial, FieldError, TlsFiles, TlsFlags, TlsOptions,
    WebhookServer,
};
use serde_json::{Value, json};
use support::{CertDir, Client, Pki, Running, admission_review};

const VALIDATE: &str = "/validate-example-com-v1-thing";
const MUTATE: &str = "/mutate-example-com-v1-thing";

fn thing(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Thing",
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": null},
        "spec": spec
    })
}

/// Replicas must be odd; a default of 3 when unset.
fn example_server() -> WebhookServer {
    WebhookServer::builder()
        .validating(VALIDATE, |request: &AdmissionRequest| {
            let object = request.object.as_ref().unwrap();
            match object.data["spec"]["replicas"].as_i64() {
                Some(replicas) if replicas % 2 == 0 => Err(Denial::invalid(
                    "example.com",
                    "Thing",
                    &request.name,
                    vec![FieldError::invalid(
                        "spec.replicas",
                        replicas,
                        "an even number of members cannot keep etcd quorum",
                    )],
                )),
                _ => Ok(vec!["spec.legacy is deprecated".to_string()]),
            }
        })
        .mutating(MUTATE, |request: &AdmissionRequest| {
            let mut object = serde_json::to_value(request.object.as_ref().unwrap()).unwrap();
            if object["spec"].get("replicas").is_none() {
                object["spec"]["replicas"] = json!(3);
                object["spec"]["tags"] = json!(["defaulted"]);
                return Ok(Some(object));
            }
            Ok(None)
        })
        .conversion(CONVERSION_PATH, |mut object: Value, desired: &str| {
            if object["spec"]["size"].is_string() {
                return Err("spec.size must be a number to convert".to_string());
            }
            object["apiVersion"] = desired.into();
            object["spec"]["replicas"] = object["spec"]["size"].take();
            object["spec"].as_object_mut().unwrap().remove("size");
            Ok(object)
        })
        .build()
        .unwrap()
}

async fn start_example() -> (Pki, CertDir, Running) {
    let pki = Pki::new("example CA");
    let dir = CertDir::new(&pki.cert_pem, &pki.key_pem);
    let running = Running::start(example_server(), dir.files()).await;
    (pki, dir, running)
}

#[tokio::test]
async fn validation_allows_with_warnings_and_denies_with_field_causes() {
    let (pki, _dir, running) = start_example().await;
    let mut client = Client::connect(running.addr, &pki.ca_pem).await.unwrap();

    let allowed = client
        .post_json(
            VALIDATE,
            &admission_review("uid-1", "CREATE", thing("a", json!({"replicas": 3}))),
        )
        .await;
    assert_eq!(
        allowed,
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": "uid-1", "allowed": true, "warnings": ["spec.legacy is deprecated"]}
        })
    );

    let denied = client
        .post_json(
            VALIDATE,
            &admission_review("uid-2", "CREATE", thing("b", json!({"replicas": 2}))),
        )
        .await;
    let message = r#"Thing.example.com "b" is invalid: spec.replicas: Invalid value: 2: an even number of members cannot keep etcd quorum"#;
    assert_eq!(
        denied,
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {
                "uid": "uid-2",
                "allowed": false,
                "status": {
                    "status": "Failure",
                    "code": 422,
                    "reason": "Invalid",
                    "message": message,
                    "details": {
                        "name": "b",
                        "group": "example.com",
                        "kind": "Thing",
                        "causes": [{
                            "reason": "FieldValueInvalid",
                            "message": "Invalid value: 2: an even number of members cannot keep etcd quorum",
                            "field": "spec.replicas"
                        }]
                    }
                }
            }
        })
    );
    running.stop().await;
}

#[tokio::test]
async fn mutation_returns_a_base64_json_patch_that_yields_the_defaulted_object() {
    let (pki, _dir, running) = start_example().await;
    let mut client = Client::connect(running.addr, &pki.ca_pem).await.unwrap();
    let original = thing("a", json!({"paused": false}));

    let answer = client
        .post_json(
            MUTATE,
            &admission_review("uid-m", "CREATE", original.clone()),
        )
        .await;
    let response = &answer["response"];
    assert_eq!(response["uid"], "uid-m");
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().unwrap())
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
    let mut patched = original.clone();
    json_patch::patch(&mut patched, &patch).unwrap();
    assert_eq!(
        patched,
        thing(
            "a",
            json!({"paused": false, "replicas": 3, "tags": ["defaulted"]})
        )
    );

    // Nothing to default: no patch at all.
    let answer = client
        .post_json(MUTATE, &admission_review("uid-n", "UPDATE", patched))
        .await;
    assert_eq!(answer["response"], json!({"uid": "uid-n", "allowed": true}));
    running.stop().await;
}

#[tokio::test]
async fn conversion_converts_every_object_or_fails_the_review() {
    let (pki, _dir, running) = start_example().await;
    let mut client = Client::connect(running.addr, &pki.ca_pem).await.unwrap();
    let review = |objects: Value| {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {"uid": "conv-1", "desiredAPIVersion": "example.com/v2", "objects": objects}
        })
    };
    let v1 = |name: &str, size: Value| json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": name}, "spec": {"size": size}});
    let v2 = |name: &str, replicas: i64| json!({"apiVersion": "example.com/v2", "kind": "Thing", "metadata": {"name": name}, "spec": {"replicas": replicas}});

    let answer = client
        .post_json(
            CONVERSION_PATH,
            &review(json!([v1("a", json!(1)), v1("b", json!(3))])),
        )
        .await;
    assert_eq!(
        answer,
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "response": {
                "uid": "conv-1",
                "result": {"status": "Success"},
                "convertedObjects": [v2("a", 1), v2("b", 3)]
            }
        })
    );

    let answer = client
        .post_json(
            CONVERSION_PATH,
            &review(json!([v1("a", json!(1)), v1("c", json!("big"))])),
        )
        .await;
    assert_eq!(answer["response"]["uid"], "conv-1");
    assert_eq!(
        answer["response"]["result"],
        json!({
            "status": "Failure",
            "message": "converting Thing c of example.com/v1 to example.com/v2: spec.size must be a number to convert"
        })
    );
    running.stop().await;
}

#[tokio::test]
async fn malformed_reviews_get_400_with_a_short_message() {
    let (pki, _dir, running) = start_example().await;
    let mut client = Client::connect(running.addr, &pki.ca_pem).await.unwrap();
    let no_request = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"});
    let conversion =
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": {}});
    for (path, body, message) in [
        (
            VALIDATE,
            b"{not json".to_vec(),
            "the body is not JSON: key must be a string at line 1 column 2",
        ),
        (
            MUTATE,
            b"".to_vec(),
            "the body is not JSON: EOF while parsing a value at line 1 column 0",
        ),
        (
            VALIDATE,
            serde_json::to_vec(&no_request).unwrap(),
            "the AdmissionReview has no request",
        ),
        (
            VALIDATE,
            serde_json::to_vec(&conversion).unwrap(),
            r#"expected kind AdmissionReview of apiVersion admission.k8s.io/v1, got kind "ConversionReview" of apiVersion "apiextensions.k8s.io/v1""#,
        ),
        (
            CONVERSION_PATH,
            serde_json::to_vec(&conversion).unwrap(),
            "the ConversionReview request is invalid: missing field `uid`",
        ),
    ] {
        let (status, answer) = client.post(path, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}");
        assert_eq!(String::from_utf8_lossy(&answer), message, "{path}");
    }
    // The connection is still good after refusals.
    let answer = client
        .post_json(
            VALIDATE,
            &admission_review("after", "CREATE", thing("a", json!({}))),
        )
        .await;
    assert_eq!(answer["response"]["allowed"], true);
    running.stop().await;
}

#[tokio::test]
async fn unknown_paths_get_404_and_other_methods_405() {
    let (pki, _dir, running) = start_example().await;
    let mut client = Client::connect(running.addr, &pki.ca_pem).await.unwrap();
    let (status, body) = client.post("/validate-nothing-here", "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, "no webhook is served at /validate-nothing-here");
    let (status, _) = client.send(hyper::Method::GET, VALIDATE, "").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    running.stop().await;
}

#[tokio::test]
async fn an_oversized_body_gets_413() {
    let pki = Pki::new("example CA");
    let dir = CertDir::new(&pki.cert_pem, &pki.key_pem);
    let server = WebhookServer::builder()
        .validating(VALIDATE, |_: &AdmissionRequest| Ok(Vec::new()))
        .max_body_bytes(64 * 1024)
        .build()
        .unwrap();
    let running = Running::start(server, dir.files()).await;
    let mut client = Client::connect(running.addr, &pki.ca_pem).await.unwrap();

    let padding = "x".repeat(64 * 1024);
    let big = admission_review("big", "CREATE", thing("a", json!({"padding": padding})));
    let (status, body) = client
        .post(VALIDATE, serde_json::to_vec(&big).unwrap())
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(body, "the body is larger than 65536 bytes");

    let mut client = Client::connect(running.addr, &pki.ca_pem).await.unwrap();
    let small = admission_review("small", "CREATE", thing("a", json!({"padding": "x"})));
    assert_eq!(
        client.post_json(VALIDATE, &small).await["response"]["allowed"],
        true
    );
    running.stop().await;
}

#[tokio::test]
async fn a_tls_1_2_client_is_served() {
    let (pki, _dir, running) = start_example().await;
    let mut client = Client::connect_with(running.addr, &pki.ca_pem, &[&rustls::version::TLS12])
        .await
        .unwrap();
    assert_eq!(client.version, rustls::ProtocolVersion::TLSv1_2);
    let answer = client
        .post_json(
            VALIDATE,
            &admission_review("tls12", "CREATE", thing("a", json!({}))),
        )
        .await;
    assert_eq!(answer["response"]["uid"], "tls12");

    let client = Client::connect(running.addr, &pki.ca_pem).await.unwrap();
    assert_eq!(client.version, rustls::ProtocolVersion::TLSv1_3);
    running.stop().await;
}

/// Cluster API's `--tls-min-version`, `--tls-cipher-suites` and `--tls-curve-preferences`
/// (kubernetes-sigs/cluster-api#14194) hold in real handshakes.
#[tokio::test]
async fn the_tls_flags_decide_versions_suites_and_curves() {
    let pki = Pki::new("example CA");
    let dir = CertDir::new(&pki.cert_pem, &pki.key_pem);
    let flags = TlsFlags {
        min_version: "VersionTLS13".into(),
        cipher_suites: Vec::new(),
        curve_preferences: vec!["CurveP384".into()],
    };
    let server = example_server().with_tls(TlsOptions::from_flags(&flags).unwrap());
    let running = Running::start(server, dir.files()).await;
    let tls12 = Client::connect_with(running.addr, &pki.ca_pem, &[&rustls::version::TLS12]).await;
    assert!(
        tls12
            .as_ref()
            .is_err_and(|e| e.starts_with("TLS handshake")),
        "a TLS 1.2 client got through: {:?}",
        tls12.map(|c| c.version)
    );
    let only =
        |group: &'static dyn rustls::crypto::SupportedKxGroup| rustls::crypto::CryptoProvider {
            kx_groups: vec![group],
            ..rustls::crypto::ring::default_provider()
        };
    let x25519 = Client::connect_offering(
        running.addr,
        &pki.ca_pem,
        rustls::ALL_VERSIONS,
        only(rustls::crypto::ring::kx_group::X25519),
    )
    .await;
    assert!(x25519.is_err(), "an X25519-only client got through");
    let mut p384 = Client::connect_offering(
        running.addr,
        &pki.ca_pem,
        rustls::ALL_VERSIONS,
        only(rustls::crypto::ring::kx_group::SECP384R1),
    )
    .await
    .unwrap();
    assert_eq!(p384.version, rustls::ProtocolVersion::TLSv1_3);
    let answer = p384
        .post_json(
            VALIDATE,
            &admission_review("p384", "CREATE", thing("a", json!({}))),
        )
        .await;
    assert_eq!(answer["response"]["uid"], "p384");
    running.stop().await;

    // TLS 1.2 with one suite: a client offering only another is refused.
    let flags = TlsFlags {
        min_version: "VersionTLS12".into(),
        cipher_suites: vec!["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384".into()],
        curve_preferences: Vec::new(),
    };
    let running = Running::start(
        example_server().with_tls(TlsOptions::from_flags(&flags).unwrap()),
        dir.files(),
    )
    .await;
    let suite = |s: rustls::SupportedCipherSuite| rustls::crypto::CryptoProvider {
        cipher_suites: vec![s],
        ..rustls::crypto::ring::default_provider()
    };
    let other = Client::connect_offering(
        running.addr,
        &pki.ca_pem,
        &[&rustls::version::TLS12],
        suite(rustls::crypto::ring::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
    )
    .await;
    assert!(
        other.is_err(),
        "a client without the chosen suite got through"
    );
    let chosen = Client::connect_offering(
        running.addr,
        &pki.ca_pem,
        &[&rustls::version::TLS12],
        suite(rustls::crypto::ring::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384),
    )
    .await;
    assert!(chosen.is_ok(), "{:?}", chosen.err());
    running.stop().await;
}

#[tokio::test]
async fn a_rotated_certificate_from_a_new_ca_is_served_without_restart() {
    let (old, mut dir, running) = start_example().await;
    let first = Client::connect(running.addr, &old.ca_pem).await.unwrap();
    assert_eq!(first.peer_cert, old.cert_der);

    let new = Pki::new("rotated CA");
    dir.swap_in(&new.cert_pem, &new.key_pem);
    let started = Instant::now();
    let mut client = loop {
        match Client::connect(running.addr, &new.ca_pem).await {
            Ok(client) => break client,
            Err(e) if started.elapsed() < Duration::from_secs(10) => {
                assert!(e.starts_with("TLS handshake"), "{e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the new certificate is not served after 10 s: {e}"),
        }
    };
    assert_eq!(client.peer_cert, new.cert_der);
    let answer = client
        .post_json(
            VALIDATE,
            &admission_review("rotated", "CREATE", thing("a", json!({}))),
        )
        .await;
    assert_eq!(answer["response"]["allowed"], true);
    // A client that trusts only the old CA no longer gets in.
    let refused = Client::connect(running.addr, &old.ca_pem)
        .await
        .err()
        .unwrap();
    assert!(refused.contains("UnknownIssuer"), "{refused}");
    running.stop().await;
}

#[tokio::test]
async fn a_bad_replacement_keeps_the_previous_certificate() {
    let pki = Pki::new("example CA");
    let mut dir = CertDir::new(&pki.cert_pem, &pki.key_pem);
    let server = WebhookServer::builder()
        .validating(VALIDATE, |_: &AdmissionRequest| Ok(Vec::new()))
        .cert_reload_interval(Duration::from_millis(100))
        .build()
        .unwrap();
    let running = Running::start(server, dir.files()).await;

    let other = Pki::new("other CA");
    for (cert, key) in [
        ("not a certificate", pki.key_pem.as_str()),
        (pki.cert_pem.as_str(), "not a key"),
        // Halfway through a rotation: a new certificate next to the old key.
        (other.cert_pem.as_str(), pki.key_pem.as_str()),
    ] {
        dir.swap_in(cert, key);
        // Several reload periods.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut client = Client::connect(running.addr, &pki.ca_pem).await.unwrap();
        assert_eq!(client.peer_cert, pki.cert_der);
        let answer = client
            .post_json(
                VALIDATE,
                &admission_review("kept", "CREATE", thing("a", json!({}))),
            )
            .await;
        assert_eq!(answer["response"]["allowed"], true);
    }
    running.stop().await;
}

#[tokio::test]
async fn startup_fails_naming_the_missing_or_invalid_file() {
    let dir = tempfile::tempdir().unwrap();
    let listener = kubeadm_webhook::bind(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let err = example_server()
        .serve(
            listener,
            TlsFiles::in_dir(dir.path()),
            std::future::pending(),
        )
        .await
        .unwrap_err()
        .to_string();
    let cert = dir.path().join("tls.crt");
    assert!(
        err.starts_with(&format!("cannot read {}: No such file", cert.display())),
        "{err}"
    );

    std::fs::write(
        &cert,
        "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("tls.key"), "").unwrap();
    let listener = kubeadm_webhook::bind(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let err = example_server()
        .serve(
            listener,
            TlsFiles::in_dir(dir.path()),
            std::future::pending(),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!(
            "{} holds no usable PEM certificate",
            cert.display()
        )),
        "{err}"
    );
}

#[tokio::test]
async fn shutdown_closes_idle_keep_alive_connections_and_stops_listening() {
    let (pki, _dir, running) = start_example().await;
    let addr = running.addr;
    let mut idle = Client::connect(addr, &pki.ca_pem).await.unwrap();
    let answer = idle
        .post_json(
            VALIDATE,
            &admission_review("idle", "CREATE", thing("a", json!({}))),
        )
        .await;
    assert_eq!(answer["response"]["allowed"], true);

    let started = Instant::now();
    running.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        started.elapsed()
    );
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn typed_handlers_serve_at_the_kinds_kubebuilder_paths() {
    let pki = Pki::new("example CA");
    let dir = CertDir::new(&pki.cert_pem, &pki.key_pem);
    let server = WebhookServer::builder()
        .defaulter::<KubeadmConfig, _>(|config| {
            config
                .metadata
                .labels
                .get_or_insert_default()
                .insert("example.com/seen".into(), "true".into());
            Ok(())
        })
        .validator::<KubeadmControlPlane, _>(|change| match change {
            Change::Update { old, new } if old.spec.version != new.spec.version => {
                Err(Denial::invalid_object(
                    new,
                    vec![FieldError::forbidden(
                        "spec.version",
                        "this example forbids upgrades",
                    )],
                ))
            }
            _ => Ok(Vec::new()),
        })
        .build()
        .unwrap();
    assert_eq!(
        server.paths().collect::<Vec<_>>(),
        [
            "/mutate-bootstrap-cluster-x-k8s-io-v1beta2-kubeadmconfig",
            "/validate-controlplane-cluster-x-k8s-io-v1beta2-kubeadmcontrolplane",
        ]
    );
    let running = Running::start(server, dir.files()).await;
    let mut client = Client::connect(running.addr, &pki.ca_pem).await.unwrap();

    let config = json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmConfig",
        "metadata": {"name": "worker-0", "namespace": "default"},
        "spec": {}
    });
    let mut review = admission_review("typed-1", "CREATE", config.clone());
    review["request"]["kind"] = json!({"group": "bootstrap.cluster.x-k8s.io", "version": "v1beta2", "kind": "KubeadmConfig"});
    let answer = client
        .post_json(
            "/mutate-bootstrap-cluster-x-k8s-io-v1beta2-kubeadmconfig",
            &review,
        )
        .await;
    let patch = base64::engine::general_purpose::STANDARD
        .decode(answer["response"]["patch"].as_str().unwrap())
        .unwrap();
    let mut patched = config;
    let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
    json_patch::patch(&mut patched, &patch).unwrap();
    assert_eq!(
        patched["metadata"]["labels"],
        json!({"example.com/seen": "true"})
    );

    let kcp = |version: &str| {
        json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
            "kind": "KubeadmControlPlane",
            "metadata": {"name": "cp", "namespace": "default"},
            "spec": {
                "version": version,
                "machineTemplate": {"spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachineTemplate", "name": "cp"}}}
            }
        })
    };
    let mut review = admission_review("typed-2", "UPDATE", kcp("v1.31.0"));
    review["request"]["oldObject"] = kcp("v1.30.0");
    let answer = client
        .post_json(
            "/validate-controlplane-cluster-x-k8s-io-v1beta2-kubeadmcontrolplane",
            &review,
        )
        .await;
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(
        answer["response"]["status"]["message"],
        r#"KubeadmControlPlane.controlplane.cluster.x-k8s.io "cp" is invalid: spec.version: Forbidden: this example forbids upgrades"#
    );

    // An object that does not decode into the kind is a 400 denial, not a crash.
    let mut review = admission_review("typed-3", "CREATE", kcp("v1.31.0"));
    review["request"]["object"]["spec"]["replicas"] = json!("three");
    let answer = client
        .post_json(
            "/validate-controlplane-cluster-x-k8s-io-v1beta2-kubeadmcontrolplane",
            &review,
        )
        .await;
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["status"]["code"], 400);
    running.stop().await;
}

#[tokio::test]
async fn requests_are_counted_by_path_and_outcome() {
    let (pki, _dir, running) = start_example().await;
    let mut client = Client::connect(running.addr, &pki.ca_pem).await.unwrap();
    // Only this test sends to this path, so its counts are its own.
    let (status, _) = client.post("/metrics-test-unknown", "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    client
        .post_json(
            VALIDATE,
            &admission_review("m", "CREATE", thing("a", json!({"replicas": 2}))),
        )
        .await;
    let text = kubeadm_runtime::metrics::encode();
    for line in [
        "kubeadm_webhook_requests_total{path=\"/validate-example-com-v1-thing\",outcome=\"denied\"}",
        "kubeadm_webhook_requests_total{path=\"unmatched\",outcome=\"not_found\"}",
        "kubeadm_webhook_request_duration_seconds_count{path=\"/validate-example-com-v1-thing\"}",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(line)),
            "no {line} in\n{text}"
        );
    }
    running.stop().await;
}
