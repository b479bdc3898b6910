//! Scheduled snapshots to S3-compatible object storage (`spec.etcdBackup`, see
//! [`crate::etcd_backup`]): streamed from a healthy voting member (a follower when there is one) into
//! the bucket, sealed when a key is set, its manifest written after it, then the oldest beyond the
//! retention deleted. A snapshot the store does not take is reported (condition, Warning Event) and
//! tried again [`RETRY_AFTER`] later; the snapshots already stored stay.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::Api;
use kubeadm_api::controlplane::conditions::reasons;
use kubeadm_api::controlplane::etcd_backup::{
    ACCESS_KEY_ID_KEY, CA_KEY, EtcdBackup, SECRET_ACCESS_KEY_KEY, SESSION_TOKEN_KEY,
};
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::meta::ETCD_LAST_SNAPSHOT_ANNOTATION;
use object_store::aws::AmazonS3;

use super::defrag::Refusal;
use super::{ClusterKey, EtcdView, Maintained};
use crate::controller::annotations::annotate_kcp;
use crate::controller::{Context, Error};
use crate::etcd_backup::store::{self, Credentials, Destination, Source, StoreError, UploadError};
use crate::etcd_backup::{self, Schedule, sealed};

/// How long after a failed attempt the next one is made (not at every reconcile).
pub const RETRY_AFTER: SignedDuration = SignedDuration::from_mins(5);

/// The snapshot of `spec.etcdBackup`, when one is due.
pub(super) async fn snapshot(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    key: &ClusterKey,
    view: &EtcdView,
    now: Timestamp,
    backup: &EtcdBackup,
) -> Result<Option<Maintained>, Error> {
    let schedule = Schedule::of(backup).map_err(Error::Etcd)?;
    let last = super::snapshot::last_snapshot(kcp);
    if last.is_none() {
        // Start the clock: the first snapshot is taken at the next scheduled time.
        annotate_kcp(ctx, kcp, ETCD_LAST_SNAPSHOT_ANNOTATION, &now.to_string()).await?;
        return Ok(None);
    }
    if !schedule.due(last, now) || ctx.etcd.backup_failed_recently(key, now, RETRY_AFTER) {
        return Ok(None);
    }
    let (source, member, revision) = super::snapshot::source(view)?;
    let (namespace, cluster) = key;
    let refused = |reason: &'static str, message: String| {
        ctx.etcd.backup_failed(key, now);
        Ok(Some(Maintained::refused(Refusal { reason, message })))
    };
    let (client, sealing) = match open(ctx, namespace, backup).await {
        Ok(opened) => opened,
        Err(why) => return refused(reasons::BACKUP_MISCONFIGURED, why),
    };
    let folder = etcd_backup::folder(backup, namespace, cluster);
    let (object, manifest) = etcd_backup::names(&folder, now, sealing.is_some());
    let destination = Destination {
        store: client.as_ref(),
        object,
        manifest,
        key: sealing.as_ref().map(|(key, from)| (key, from.clone())),
    };
    let described = Source {
        cluster: format!("{namespace}/{cluster}"),
        member: member.clone(),
        revision,
        time: now,
    };
    let uploaded = store::upload(&destination, described, |mut pipe| async move {
        view.etcd.snapshot(&source, &mut pipe).await
    })
    .await;
    let written = match uploaded {
        Ok(written) => written,
        Err(UploadError::Source(e)) => return Err(e.into()),
        Err(UploadError::Store(e)) => {
            let reason = match &e {
                StoreError::Denied(_) => reasons::OBJECT_STORE_DENIED,
                _ => reasons::OBJECT_STORE_FAILED,
            };
            return refused(
                reason,
                format!(
                    "etcd snapshot of member {member} not stored in s3://{}: {e}; the snapshots \
                     stored before are kept",
                    backup.s3.bucket
                ),
            );
        }
    };
    ctx.etcd.backup_succeeded(key);
    let location = format!("s3://{}/{}", backup.s3.bucket, written.object);
    // Retention after the new snapshot is whole; a failure here only delays it to the next one.
    let pruned = match store::list(client.as_ref(), &folder).await {
        Ok(names) => {
            let old = etcd_backup::to_prune(&names, etcd_backup::retention(backup), None);
            store::delete(client.as_ref(), &folder, &old)
                .await
                .map(|()| old.len())
        }
        Err(e) => Err(e),
    };
    let retention = match pruned {
        Ok(0) => String::new(),
        Ok(n) => format!("; deleted {n} objects of older snapshots"),
        Err(e) => format!("; older snapshots not deleted this time: {e}"),
    };
    let note = format!(
        "wrote etcd snapshot of member {member} to {location} ({} bytes{}){retention}",
        written.size,
        if written.encryption.is_some() {
            ", encrypted"
        } else {
            ""
        },
    );
    let snapshot = super::snapshot::taken(now, location, written.size, revision, member);
    super::snapshot::kept(ctx, kcp, now, note, snapshot)
        .await
        .map(Some)
}

/// A client of the store `backup` names, and its sealing key (with where it came from), from the
/// Secrets of `namespace`. An error names the Secret, the key or the field at fault.
pub(in crate::controller) async fn open(
    ctx: &Context,
    namespace: &str,
    backup: &EtcdBackup,
) -> Result<(Arc<AmazonS3>, Option<(sealed::Key, String)>), String> {
    let (credentials, sealing) = secrets(ctx, namespace, backup).await?;
    Ok((store::client(&backup.s3, &credentials)?, sealing))
}

/// The credentials (and CA) and the sealing key `backup` names, from Secrets of `namespace`. An error
/// names the Secret, the key and the field that names them.
async fn secrets(
    ctx: &Context,
    namespace: &str,
    backup: &EtcdBackup,
) -> Result<(Credentials, Option<(sealed::Key, String)>), String> {
    let secrets = Api::<Secret>::namespaced(ctx.client.clone(), namespace);
    let read = |name: String, field: &'static str| {
        let secrets = secrets.clone();
        async move {
            match secrets.get_opt(&name).await {
                Ok(Some(secret)) => Ok(secret),
                Ok(None) => Err(format!("{field}: Secret {namespace}/{name} does not exist")),
                Err(e) => Err(format!(
                    "{field}: cannot read Secret {namespace}/{name}: {e}"
                )),
            }
        }
    };
    let value = |secret: &Secret, key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|v| v.0.clone())
    };
    let text = |secret: &Secret, key: &str, field: &str| {
        value(secret, key)
            .and_then(|v| String::from_utf8(v).ok())
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                format!(
                    "{field}: Secret {namespace}/{} has no {key:?}",
                    secret.metadata.name.as_deref().unwrap_or_default()
                )
            })
    };
    let field = "spec.etcdBackup.s3.credentialsSecret";
    let credentials = read(backup.s3.credentials_secret.name.clone(), field).await?;
    let mut found = Credentials {
        access_key_id: text(&credentials, ACCESS_KEY_ID_KEY, field)?,
        secret_access_key: text(&credentials, SECRET_ACCESS_KEY_KEY, field)?,
        session_token: text(&credentials, SESSION_TOKEN_KEY, field).ok(),
        ca: None,
    };
    if let Some(ca) = &backup.s3.ca_secret {
        let field = "spec.etcdBackup.s3.caSecret";
        let secret = read(ca.name.clone(), field).await?;
        found.ca =
            Some(value(&secret, CA_KEY).ok_or_else(|| {
                format!("{field}: Secret {namespace}/{} has no {CA_KEY:?}", ca.name)
            })?);
    }
    let sealing = match &backup.encryption {
        None => None,
        Some(encryption) => {
            let field = "spec.etcdBackup.encryption.keySecret";
            let reference = &encryption.key_secret;
            let entry = reference.key.as_deref().unwrap_or("key");
            let secret = read(reference.name.clone(), field).await?;
            let raw = value(&secret, entry).ok_or_else(|| {
                format!(
                    "{field}: Secret {namespace}/{} has no {entry:?}",
                    reference.name
                )
            })?;
            let key = sealed::Key::from_secret_value(&raw).map_err(|e| {
                format!(
                    "{field}: Secret {namespace}/{} key {entry:?}: {e}",
                    reference.name
                )
            })?;
            Some((key, format!("{}/{entry}", reference.name)))
        }
    };
    Ok((found, sealing))
}
