//! Scheduled snapshots to S3-compatible object storage (`spec.etcdBackup`, see
//! [`crate::etcd_backup`]): streamed from a healthy voting member (a follower when there is one) into
//! the bucket, sealed when a key is set, its manifest written after it, then the oldest beyond the
//! retention deleted, all on a task of its own ([`super::background`]) so that the reconciles go on
//! meanwhile. A snapshot the store does not take is reported (condition, Warning Event) and tried again
//! [`RETRY_AFTER`] later; the snapshots already stored stay.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kubeadm_api::controlplane::conditions::reasons;
use kubeadm_api::controlplane::etcd_backup::{
    ACCESS_KEY_ID_KEY, CA_KEY, EtcdBackup, SECRET_ACCESS_KEY_KEY, SESSION_TOKEN_KEY,
};
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::meta::ETCD_LAST_SNAPSHOT_ANNOTATION;
use object_store::aws::AmazonS3;

use super::background::State;
use super::defrag::Refusal;
use super::{ClusterKey, EtcdView, Maintained};
use crate::controller::annotations::annotate_kcp;
use crate::controller::{Context, Error};
use crate::etcd::WorkloadEtcd;
use crate::etcd_backup::store::{self, Credentials, Destination, Source, StoreError, UploadError};
use crate::etcd_backup::{self, Manifest, Schedule, sealed};

/// How long after a failed attempt the next one is made (not at every reconcile).
pub const RETRY_AFTER: SignedDuration = SignedDuration::from_mins(5);

/// A snapshot streamed into the store by a task of its own ([`Background`]), and how it went.
pub(in crate::controller) struct Upload {
    /// When it was due and started: its name, its status time and the clock's new value.
    time: Timestamp,
    member: String,
    revision: Option<i64>,
    bucket: String,
    outcome: Result<Stored, Failed>,
}

struct Stored {
    written: Manifest,
    /// What retention did after it, for the Event.
    retention: String,
}

enum Failed {
    /// The store did not take it.
    Refused(Refusal),
    /// The member did not stream it.
    Etcd(String),
}

/// The upload of `key` that finished since the last reconcile, recorded now: the clock moves and the
/// status and Event say where it went, or it is reported refused and tried again [`RETRY_AFTER`]
/// later. `Running` while one streams; `Idle` when there is nothing to record.
pub(super) async fn finished(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    key: &ClusterKey,
    now: Timestamp,
) -> Result<State<Maintained>, Error> {
    let upload = match ctx.etcd.uploads.take(key) {
        State::Done(upload) => upload,
        State::Running => return Ok(State::Running),
        State::Idle => return Ok(State::Idle),
    };
    let Upload {
        time,
        member,
        revision,
        bucket,
        outcome,
    } = upload;
    let Stored { written, retention } = match outcome {
        Ok(stored) => stored,
        Err(Failed::Etcd(e)) => return Err(Error::Etcd(e)),
        Err(Failed::Refused(refusal)) => {
            ctx.etcd.backup_failed(key, now);
            return Ok(State::Done(Maintained::refused(refusal)));
        }
    };
    ctx.etcd.backup_succeeded(key);
    let location = format!("s3://{bucket}/{}", written.object);
    let note = format!(
        "wrote etcd snapshot of member {member} to {location} ({} bytes{}){retention}",
        written.size,
        if written.encryption.is_some() {
            ", encrypted"
        } else {
            ""
        },
    );
    let snapshot = super::snapshot::taken(time, location, written.size, revision, member);
    super::snapshot::kept(ctx, kcp, time, note, snapshot)
        .await
        .map(State::Done)
}

/// The snapshot of `spec.etcdBackup`, when one is due and none is streaming: started on a task of its
/// own (see [`finished`] for its end). A store that cannot be opened (a Secret or key missing) is
/// reported at once.
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
    let (client, sealing) = match open(ctx, namespace, backup).await {
        Ok(opened) => opened,
        Err(message) => {
            ctx.etcd.backup_failed(key, now);
            let reason = reasons::BACKUP_MISCONFIGURED;
            return Ok(Some(Maintained::refused(Refusal { reason, message })));
        }
    };
    let folder = etcd_backup::folder(backup, namespace, cluster);
    let (object, manifest) = etcd_backup::names(&folder, now, sealing.is_some());
    let job = Job {
        etcd: view.etcd.clone(),
        source,
        described: Source {
            cluster: format!("{namespace}/{cluster}"),
            member,
            revision,
            time: now,
        },
        client,
        sealing,
        bucket: backup.s3.bucket.clone(),
        object,
        manifest,
        folder,
        retention: etcd_backup::retention(backup),
    };
    if ctx
        .etcd
        .uploads
        .start(key, ObjectRef::from_obj(kcp), job.run())
    {
        tracing::info!("streaming an etcd snapshot into s3://{}", backup.s3.bucket);
    }
    Ok(None)
}

/// Everything a snapshot's upload needs, owned, so that it runs on a task of its own.
struct Job {
    etcd: WorkloadEtcd,
    /// The client URL of the member it streams from.
    source: String,
    described: Source,
    client: Arc<AmazonS3>,
    sealing: Option<(sealed::Key, String)>,
    bucket: String,
    object: String,
    manifest: String,
    folder: String,
    retention: usize,
}

impl Job {
    /// Streams the snapshot into the store, then deletes the snapshots beyond the retention (a failure
    /// there only delays it to the next snapshot).
    async fn run(self) -> Upload {
        let Job {
            etcd,
            source,
            described,
            client,
            sealing,
            bucket,
            object,
            manifest,
            folder,
            retention,
        } = self;
        let (time, member, revision) =
            (described.time, described.member.clone(), described.revision);
        let destination = Destination {
            store: client.as_ref(),
            object,
            manifest,
            key: sealing.as_ref().map(|(key, from)| (key, from.clone())),
        };
        let uploaded = store::upload(&destination, described, |mut pipe| async move {
            etcd.snapshot(&source, &mut pipe).await
        })
        .await;
        let outcome = match uploaded {
            Ok(written) => Ok(Stored {
                retention: prune(client.as_ref(), &folder, retention).await,
                written,
            }),
            Err(UploadError::Source(e)) => Err(Failed::Etcd(e.to_string())),
            Err(UploadError::Store(e)) => {
                let reason = match &e {
                    StoreError::Denied(_) => reasons::OBJECT_STORE_DENIED,
                    _ => reasons::OBJECT_STORE_FAILED,
                };
                let message = format!(
                    "etcd snapshot of member {member} not stored in s3://{bucket}: {e}; the \
                     snapshots stored before are kept"
                );
                Err(Failed::Refused(Refusal { reason, message }))
            }
        };
        Upload {
            time,
            member,
            revision,
            bucket,
            outcome,
        }
    }
}

/// Deletes the snapshots of `folder` beyond the newest `keep`; says what it did, for the Event.
async fn prune(store: &AmazonS3, folder: &str, keep: usize) -> String {
    let pruned = match store::list(store, folder).await {
        Ok(names) => {
            let old = etcd_backup::to_prune(&names, keep, None);
            store::delete(store, folder, &old).await.map(|()| old.len())
        }
        Err(e) => Err(e),
    };
    match pruned {
        Ok(0) => String::new(),
        Ok(n) => format!("; deleted {n} objects of older snapshots"),
        Err(e) => format!("; older snapshots not deleted this time: {e}"),
    }
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
