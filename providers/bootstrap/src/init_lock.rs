//! The init lock: exactly one control-plane Machine per Cluster runs `kubeadm init`.
//!
//! The lock is the ConfigMap `<cluster>-lock` in the Cluster's namespace, holding
//! `lock-information: {"machineName":"<machine>"}`. Name and format are those of Cluster API's Go provider, so a
//! lock taken by either provider is honoured by the other. Creating the ConfigMap is the atomic step; the
//! lock survives controller restarts, and a lock whose holder Machine is gone is taken over (the holder can
//! no longer run `kubeadm init`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::{Resource, ResourceExt};
use kubeadm_api::cluster::v1beta2::{Cluster, Machine};
use kubeadm_api::meta::CLUSTER_NAME_LABEL;
use serde::{Deserialize, Serialize};

/// Key of the ConfigMap data that names the holder.
pub const LOCK_INFORMATION_KEY: &str = "lock-information";

/// Name of the init lock ConfigMap of a Cluster.
pub fn lock_name(cluster: &str) -> String {
    format!("{cluster}-lock")
}

/// Outcome of [`try_acquire`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// The asking Machine holds the lock and may run `kubeadm init`.
    Yes,
    /// Another Machine, named here, holds the lock; wait for it to initialise the control plane.
    HeldBy(String),
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "init lock ConfigMap {namespace}/{name} has unreadable {LOCK_INFORMATION_KEY:?} data ({reason}); \
         it is treated as held: delete the ConfigMap once no Machine of the Cluster is running kubeadm init"
    )]
    Unreadable {
        namespace: String,
        name: String,
        reason: String,
    },
    #[error("init lock ConfigMap {namespace}/{name} kept changing while acquiring it; retry")]
    Contended { namespace: String, name: String },
    #[error("cannot {action} for the init lock {namespace}/{name}: {source}")]
    Kube {
        action: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl LockError {
    /// Short, bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            LockError::Unreadable { .. } => "init_lock_unreadable",
            LockError::Contended { .. } => "init_lock_contended",
            LockError::Kube { .. } => "init_lock_api",
        }
    }
}

/// The JSON stored under [`LOCK_INFORMATION_KEY`].
#[derive(Serialize, Deserialize)]
struct LockInformation {
    #[serde(rename = "machineName")]
    machine_name: String,
}

/// The lock ConfigMap as the given Machine creates it.
pub fn lock_config_map(
    namespace: &str,
    cluster: &str,
    machine: &str,
    owner: Option<OwnerReference>,
) -> ConfigMap {
    let information = serde_json::to_string(&LockInformation {
        machine_name: machine.to_owned(),
    })
    .expect("a struct of one string serializes");
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(lock_name(cluster)),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                CLUSTER_NAME_LABEL.to_owned(),
                cluster.to_owned(),
            )])),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            LOCK_INFORMATION_KEY.to_owned(),
            information,
        )])),
        ..ConfigMap::default()
    }
}

/// The Machine named in a lock ConfigMap, or why it cannot be read.
pub fn holder(lock: &ConfigMap) -> Result<String, String> {
    let raw = lock
        .data
        .as_ref()
        .and_then(|data| data.get(LOCK_INFORMATION_KEY))
        .ok_or_else(|| format!("no {LOCK_INFORMATION_KEY:?} key"))?;
    let information: LockInformation =
        serde_json::from_str(raw).map_err(|e| format!("not {{\"machineName\": ...}}: {e}"))?;
    if information.machine_name.is_empty() {
        return Err("empty machineName".to_owned());
    }
    Ok(information.machine_name)
}

/// Takes the init lock of `cluster` for `machine`, or says who holds it.
///
/// Acquiring again as the holder succeeds, so a restarted controller finds its own lock. A lock whose holder
/// Machine no longer exists is deleted (only if unchanged since it was read) and acquiring is tried once more.
pub async fn try_acquire(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    machine: &str,
) -> Result<Acquired, LockError> {
    let name = lock_name(cluster);
    let locks: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let machines: Api<Machine> = Api::namespaced(client.clone(), namespace);
    let kube_error = |action: &'static str| {
        let name = name.clone();
        move |source| LockError::Kube {
            action,
            namespace: namespace.to_owned(),
            name,
            source,
        }
    };

    let owner = cluster_owner_reference(client, namespace, cluster)
        .await
        .map_err(kube_error("read the Cluster"))?;
    let lock = lock_config_map(namespace, cluster, machine, owner);
    let create = PostParams {
        field_manager: Some(crate::FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };

    // The first attempt may find a stale lock; the second runs after it was removed.
    for attempt in 1..=2 {
        match locks.create(&create, &lock).await {
            Ok(_) => {
                tracing::info!(%namespace, lock = %name, %machine, "acquired the init lock");
                return Ok(Acquired::Yes);
            }
            Err(kube::Error::Api(status)) if status.is_already_exists() => {}
            Err(source) => return Err(kube_error("create the ConfigMap")(source)),
        }

        let Some(existing) = locks
            .get_opt(&name)
            .await
            .map_err(kube_error("read the ConfigMap"))?
        else {
            // Released between our create and get.
            continue;
        };
        let holder = holder(&existing).map_err(|reason| {
            tracing::warn!(%namespace, lock = %name, %reason, "init lock has unreadable data; treating it as held");
            LockError::Unreadable {
                namespace: namespace.to_owned(),
                name: name.clone(),
                reason,
            }
        })?;
        if holder == machine {
            return Ok(Acquired::Yes);
        }
        let holder_exists = machines
            .get_opt(&holder)
            .await
            .map_err(kube_error("read the holder Machine"))?
            .is_some();
        if holder_exists || attempt == 2 {
            tracing::info!(%namespace, lock = %name, %holder, "waiting for the init lock holder to initialise the control plane");
            return Ok(Acquired::HeldBy(holder));
        }

        tracing::warn!(%namespace, lock = %name, %holder, "init lock holder Machine is gone; releasing its lock");
        let unchanged = DeleteParams {
            preconditions: Some(Preconditions {
                uid: existing.metadata.uid.clone(),
                resource_version: existing.metadata.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match locks.delete(&name, &unchanged).await {
            Ok(_) => {}
            // Someone released or re-took it meanwhile; the next attempt sees the current state.
            Err(kube::Error::Api(status)) if status.is_conflict() || status.is_not_found() => {}
            Err(source) => return Err(kube_error("delete the stale ConfigMap")(source)),
        }
    }
    Err(LockError::Contended {
        namespace: namespace.to_owned(),
        name,
    })
}

/// Releases the init lock of `cluster`, whoever holds it. Releasing a lock that does not exist succeeds.
pub async fn release(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
) -> Result<(), LockError> {
    let name = lock_name(cluster);
    let locks: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    match locks.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {
            tracing::info!(%namespace, lock = %name, "released the init lock");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
        Err(source) => Err(LockError::Kube {
            action: "delete the ConfigMap",
            namespace: namespace.to_owned(),
            name,
            source,
        }),
    }
}

/// An owner reference to the Cluster, so the lock goes with it; none if the Cluster is not found.
async fn cluster_owner_reference(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
) -> Result<Option<OwnerReference>, kube::Error> {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), namespace);
    Ok(clusters.get_opt(cluster).await?.and_then(|c| {
        Some(OwnerReference {
            api_version: Cluster::api_version(&()).into_owned(),
            kind: Cluster::kind(&()).into_owned(),
            name: c.name_any(),
            uid: c.metadata.uid?,
            ..OwnerReference::default()
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_data(value: Option<&str>) -> ConfigMap {
        ConfigMap {
            data: value.map(|v| BTreeMap::from([(LOCK_INFORMATION_KEY.to_owned(), v.to_owned())])),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn lock_is_named_after_the_cluster() {
        assert_eq!(lock_name("prod"), "prod-lock");
    }

    #[test]
    fn lock_data_is_capi_format_and_labelled() {
        let lock = lock_config_map("ns", "prod", "prod-cp-abc", None);
        assert_eq!(lock.metadata.name.as_deref(), Some("prod-lock"));
        assert_eq!(lock.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(
            lock.metadata.labels.as_ref().unwrap()[CLUSTER_NAME_LABEL],
            "prod".to_owned()
        );
        assert_eq!(
            lock.data.as_ref().unwrap()[LOCK_INFORMATION_KEY],
            r#"{"machineName":"prod-cp-abc"}"#
        );
        assert_eq!(holder(&lock).unwrap(), "prod-cp-abc");
    }

    #[test]
    fn holder_is_read_from_go_written_data() {
        // The Go provider marshals the same struct; extra fields from a newer version are ignored.
        assert_eq!(
            holder(&with_data(Some(r#"{"machineName":"m-1"}"#))).unwrap(),
            "m-1"
        );
        assert_eq!(
            holder(&with_data(Some(r#"{"machineName":"m-1","other":1}"#))).unwrap(),
            "m-1"
        );
    }

    #[test]
    fn unreadable_lock_data_is_an_error_not_a_free_lock() {
        for bad in [
            None,
            Some(""),
            Some("m-1"),
            Some("{}"),
            Some(r#"{"machineName":""}"#),
            Some(r#"{"machineName":3}"#),
        ] {
            assert!(holder(&with_data(bad)).is_err(), "{bad:?} must not parse");
        }
        assert!(
            holder(&ConfigMap::default())
                .unwrap_err()
                .contains("lock-information")
        );
    }
}
