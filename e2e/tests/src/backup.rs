//! A control plane backed up to an object store of the tests, its first snapshot due at once.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubeadm_api::controlplane::etcd_backup::{ACCESS_KEY_ID_KEY, SECRET_ACCESS_KEY_KEY};
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::meta::ETCD_LAST_SNAPSHOT_ANNOTATION;
use testenv::object_store::ObjectStore;

use crate::Env;

/// Sets `spec.etcdBackup` of control plane `kcp` to `bucket` of `store` (with `more` of its fields merged
/// in: a retention, an `s3.prefix`), its credentials in a Secret `<kcp>-backup`, on a daily schedule whose last
/// run was long ago: a snapshot is due at once.
pub async fn back_up_now(
    client: &kube::Client,
    namespace: &str,
    kcp: &str,
    store: &ObjectStore,
    bucket: &str,
    more: serde_json::Value,
) {
    let secret = format!("{kcp}-backup");
    let credentials: Secret = serde_json::from_value(serde_json::json!({
        "metadata": { "name": secret },
        "stringData": {
            ACCESS_KEY_ID_KEY: store.access_key(),
            SECRET_ACCESS_KEY_KEY: store.secret_key(),
        },
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &credentials)
        .await
        .unwrap();
    let mut backup = serde_json::json!({
        "schedule": "0 3 * * *",
        "s3": {
            "endpoint": store.endpoint(),
            "bucket": bucket,
            "credentialsSecret": { "name": secret },
        },
    });
    merge(&mut backup, more);
    let due = serde_json::json!({
        "metadata": { "annotations": { ETCD_LAST_SNAPSHOT_ANNOTATION: "2020-01-02T03:00:00Z" } },
        "spec": { "etcdBackup": backup },
    });
    Api::<KubeadmControlPlane>::namespaced(client.clone(), namespace)
        .patch(kcp, &PatchParams::default(), &Patch::Merge(&due))
        .await
        .unwrap();
}

/// `more` merged into `into`, object into object; any other value of `more` replaces what was there,
/// but null (`Default::default()`) adds nothing.
fn merge(into: &mut serde_json::Value, more: serde_json::Value) {
    match (into, more) {
        (_, serde_json::Value::Null) => {}
        (serde_json::Value::Object(into), serde_json::Value::Object(more)) => {
            for (key, value) in more {
                merge(into.entry(key).or_insert(serde_json::Value::Null), value);
            }
        }
        (into, more) => *into = more,
    }
}

/// Waits until control plane `kcp` records a snapshot stored where `kind` says (`secret/`, `s3://`);
/// returns its location. Panics after `timeout`, naming what it last saw and the environment's state.
pub async fn wait_recorded(env: &Env, kcp: &str, kind: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let record = env
            .kcp(kcp)
            .await
            .annotations()
            .get(ETCD_LAST_SNAPSHOT_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        if let Some(location) = record.split_whitespace().nth(1)
            && location.starts_with(kind)
        {
            return location.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "no snapshot was taken: {record:?}\n{}",
            env.diagnostics().await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn more_fields_merge_in_and_nothing_more_changes_nothing() {
        let mut backup = json!({ "schedule": "0 3 * * *", "s3": { "bucket": "b" } });
        super::merge(&mut backup, serde_json::Value::default());
        assert_eq!(
            backup,
            json!({ "schedule": "0 3 * * *", "s3": { "bucket": "b" } })
        );
        super::merge(
            &mut backup,
            json!({ "retention": 1, "s3": { "prefix": "etcd" } }),
        );
        assert_eq!(
            backup,
            json!({ "schedule": "0 3 * * *", "retention": 1, "s3": { "bucket": "b", "prefix": "etcd" } })
        );
    }
}
