//! Bootstrap tokens in a real workload apiserver, reached through the kubeconfig Secret in a real management
//! apiserver.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use kubeadm_bootstrap::tokens::{self, Refresh};
use kubeadm_cluster::workload::{self, WorkloadError};
use testenv::ManagementPlane;

const NS: &str = "default";

fn value(secret: &Secret, key: &str) -> String {
    String::from_utf8(secret.data.as_ref().unwrap()[key].0.clone()).unwrap()
}

async fn store_kubeconfig(
    management: &kube::Client,
    cluster: &str,
    data: BTreeMap<String, ByteString>,
) {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(workload::kubeconfig_secret_name(cluster)),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(management.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

#[tokio::test]
async fn tokens_are_created_refreshed_and_found_missing_in_the_workload_cluster() {
    let (management_plane, workload_plane) =
        tokio::join!(ManagementPlane::start(), ManagementPlane::start());
    let (management_plane, workload_plane) = (management_plane.unwrap(), workload_plane.unwrap());
    let management = management_plane.client().await.unwrap();

    let kubeconfig = std::fs::read_to_string(workload_plane.kubeconfig_path()).unwrap();
    store_kubeconfig(
        &management,
        "work",
        BTreeMap::from([("value".to_owned(), ByteString(kubeconfig.into_bytes()))]),
    )
    .await;
    let workload = workload::client(&management, NS, "work").await.unwrap();

    let ttl = tokens::DEFAULT_TTL;
    let created_at = SystemTime::now();
    let token = tokens::create(&workload, ttl, created_at).await.unwrap();

    // Read through the workload apiserver's own admin client, not the one under test.
    let secrets: Api<Secret> =
        Api::namespaced(workload_plane.client().await.unwrap(), "kube-system");
    let name = format!("bootstrap-token-{}", token.id);
    let secret = secrets
        .get(&name)
        .await
        .expect("the token Secret exists in the workload cluster");
    assert_eq!(
        secret.type_.as_deref(),
        Some("bootstrap.kubernetes.io/token")
    );
    assert_eq!(value(&secret, "token-id"), token.id);
    assert_eq!(value(&secret, "token-secret"), token.secret);
    let first_expiration = value(&secret, "expiration");
    assert_eq!(
        first_expiration,
        tokens::format_expiration(created_at + ttl)
    );

    assert_eq!(
        tokens::refresh(&workload, &token, ttl, created_at)
            .await
            .unwrap(),
        Refresh::StillValid
    );
    assert_eq!(
        value(&secrets.get(&name).await.unwrap(), "expiration"),
        first_expiration
    );

    let later = created_at + Duration::from_secs(10 * 60);
    assert_eq!(
        tokens::refresh(&workload, &token, ttl, later)
            .await
            .unwrap(),
        Refresh::Extended
    );
    let refreshed = secrets.get(&name).await.unwrap();
    assert_eq!(
        value(&refreshed, "expiration"),
        tokens::format_expiration(later + ttl)
    );
    assert_eq!(
        value(&refreshed, "token-secret"),
        token.secret,
        "only the expiration changes"
    );

    secrets
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(
        tokens::refresh(&workload, &token, ttl, later)
            .await
            .unwrap(),
        Refresh::Missing
    );
}

async fn client_error(management: &kube::Client, cluster: &str) -> WorkloadError {
    match workload::client(management, NS, cluster).await {
        Ok(_) => panic!("a client for {cluster} must fail"),
        Err(error) => error,
    }
}

#[tokio::test]
async fn workload_client_errors_name_the_secret_and_key() {
    let plane = ManagementPlane::start().await.unwrap();
    let management = plane.client().await.unwrap();

    let missing = client_error(&management, "absent").await;
    assert!(
        matches!(missing, WorkloadError::SecretMissing { .. }),
        "{missing:?}"
    );
    assert!(
        missing.to_string().contains("default/absent-kubeconfig"),
        "{missing}"
    );

    store_kubeconfig(
        &management,
        "nokey",
        BTreeMap::from([("kubeconfig".to_owned(), ByteString(b"x".to_vec()))]),
    )
    .await;
    let no_key = client_error(&management, "nokey").await;
    assert!(
        matches!(no_key, WorkloadError::KeyMissing { .. }),
        "{no_key:?}"
    );
    assert!(
        no_key.to_string().contains("default/nokey-kubeconfig"),
        "{no_key}"
    );
    assert!(no_key.to_string().contains("\"value\""), "{no_key}");

    store_kubeconfig(
        &management,
        "garbled",
        BTreeMap::from([(
            "value".to_owned(),
            ByteString(b"clusters: [unclosed client-key-data".to_vec()),
        )]),
    )
    .await;
    let garbled = client_error(&management, "garbled").await;
    assert!(
        matches!(garbled, WorkloadError::Unparseable { .. }),
        "{garbled:?}"
    );
    assert!(
        garbled.to_string().contains("default/garbled-kubeconfig"),
        "{garbled}"
    );
    assert!(
        !garbled.to_string().contains("client-key-data"),
        "{garbled}"
    );
}
