//! Restore of stacked etcd from a snapshot, when the KubeadmControlPlane asks for one with
//! [`ETCD_RESTORE_FROM_ANNOTATION`]: the step [`restore::next_step`] chooses, one per reconcile. While a
//! restore runs, no other phase acts (no rollout, scale or remediation); a refused restore touches
//! nothing and leaves the other phases to run.

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, Patch, PostParams};
use kubeadm_api::controlplane::events;
use kubeadm_api::controlplane::events::restore_actions::{
    CREATE_MACHINE, DELETE_MACHINES, FINISH, RELEASE_HOOKS, STAGE_SNAPSHOT,
};
use kubeadm_api::meta::{
    CLEANUP_HOOK_ANNOTATION, CLUSTER_NAME_LABEL, CLUSTER_SECRET_TYPE, ETCD_RESTORED_ANNOTATION,
    ETCD_SNAPSHOT_LABEL,
};
use serde_json::json;

use super::Next;
use crate::controller::annotations::annotate_machine;
use crate::controller::etcd::backup::open as open_store;
use crate::controller::events::{publish, publish_about};
use crate::controller::machines::{self, Kubeadm};
use crate::controller::scope::ControlPlane;
use crate::controller::status::Report;
use crate::controller::{Context, Error, merge_params};
use crate::etcd_backup::store::{self, StoreError};
use crate::etcd_maintenance::{SECRET_SNAPSHOT_LIMIT, SNAPSHOT_SECRET_KEY};
use crate::machines::Health;
use crate::restore::{
    self, Download, ETCD_RESTORE_DOWNLOAD_KEY, ETCD_RESTORE_FROM_ANNOTATION,
    ETCD_RESTORE_SECRET_KEY, Refusal, Source, Step,
};

/// How soon a snapshot is read again from a store that did not answer.
const STORE_RETRY: std::time::Duration = std::time::Duration::from_secs(60);

pub(super) async fn reconcile(
    cp: &ControlPlane<'_>,
    ctx: &Context,
    report: &mut Report,
) -> Result<Option<Next>, Error> {
    let Some(requested) = cp.kcp.annotations().get(ETCD_RESTORE_FROM_ANNOTATION) else {
        // Said again from the record each time: a status written from an older copy of the control
        // plane must not bring back a step of the finished restore.
        match cp
            .kcp
            .annotations()
            .get(ETCD_RESTORED_ANNOTATION)
            .and_then(|record| restore::recorded(record))
        {
            Some((finished, source)) => {
                report.etcd_restore(&finished, source);
            }
            None => report.no_etcd_restore(),
        }
        return Ok(None);
    };
    let secrets = Api::<Secret>::namespaced(ctx.client.clone(), &cp.namespace);
    let secret_name = restore::restore_secret_name(&cp.cluster_name);
    let staged = secrets
        .get_opt(&secret_name)
        .await?
        .and_then(|s| s.annotations().get(ETCD_RESTORE_FROM_ANNOTATION).cloned());
    let machines: Vec<restore::Machine> = cp
        .machines
        .machines
        .iter()
        .map(|m| restore::Machine {
            name: m.name.clone(),
            restores: m.restores_etcd,
            deleting: m.deleting,
            holds_hook: m.has_cleanup_hook,
            ready: m.node.is_some() && m.health.etcd == Health::Healthy,
        })
        .collect();
    let mut step = restore::next_step(restore::Observed {
        requested,
        external_etcd: cp.desired.external_etcd,
        staged: staged.as_deref(),
        machines: &machines,
    });
    if let Step::Stage(source) = &step
        && let Err(refusal) = stage(cp, ctx, &secrets, &secret_name, source).await?
    {
        step = Step::Refuse(refusal);
    }
    let news = report.etcd_restore(&step, requested);
    let mut note = step.describe(requested);
    let (action, machine) = match &step {
        Step::Refuse(refusal) => {
            if news {
                publish(ctx, cp.kcp, &events::ETCD_RESTORE_REFUSED, &note).await;
            }
            // A store that does not answer yet: the restore goes ahead once it does, so nothing else
            // acts meanwhile (no machine is made for a cluster about to be replaced).
            if let Refusal::StoreUnavailable { .. } = refusal {
                return Ok(Some(Next::After(STORE_RETRY)));
            }
            return Ok(None);
        }
        Step::Stage(_) => (STAGE_SNAPSHOT, None),
        // The Event of an irreversible step goes first: a manager stopped between the deletes and
        // the Event would leave them unexplained, since the next one only sees them deleting.
        Step::Delete(names) => {
            publish_about(
                ctx,
                cp.kcp,
                &events::ETCD_RESTORE,
                DELETE_MACHINES,
                &note,
                None,
            )
            .await;
            for name in names {
                machines::delete(ctx, &cp.namespace, name).await?;
            }
            return Ok(Some(Next::Stepped));
        }
        Step::ReleaseHooks(names) => {
            publish_about(
                ctx,
                cp.kcp,
                &events::ETCD_RESTORE,
                RELEASE_HOOKS,
                &note,
                None,
            )
            .await;
            for name in names {
                annotate_machine(ctx, &cp.namespace, name, CLEANUP_HOOK_ANNOTATION, None).await?;
            }
            return Ok(Some(Next::Stepped));
        }
        Step::WaitForDeletion(_) | Step::WaitForMachine(_) => return Ok(Some(Next::Waiting)),
        Step::Create => {
            if let Ok(source) = Source::parse(requested) {
                sign_again(cp, ctx, &secrets, &secret_name, &source).await?;
            }
            let name = machines::create(
                ctx,
                cp.kcp,
                cp.cluster,
                &cp.desired,
                None,
                Kubeadm::RestoreEtcd {
                    secret: &secret_name,
                },
                None,
            )
            .await?;
            (CREATE_MACHINE, Some(name))
        }
        Step::Finish { machine } => {
            let removed = finish(cp, ctx, &secrets, &secret_name, requested, machine).await?;
            if !removed.is_empty() {
                note = format!(
                    "{note}; deleted the snapshot's Nodes of machines that are gone: {}",
                    removed.join(", ")
                );
            }
            (FINISH, Some(machine.clone()))
        }
    };
    if let (Step::Create, Some(name)) = (&step, &machine) {
        note = format!("{note}: Machine {name}");
    }
    publish_about(
        ctx,
        cp.kcp,
        &events::ETCD_RESTORE,
        action,
        &note,
        machine.as_deref(),
    )
    .await;
    Ok(Some(Next::Stepped))
}

/// Reads the snapshot, checks that it is this cluster's and intact, and stages it in the restore Secret
/// the restoring machine's bootstrap data reads: the snapshot itself (gzip, base64), or for an object in
/// the store where the machine downloads it from ([`Download`]). A refusal is returned, not raised.
async fn stage(
    cp: &ControlPlane<'_>,
    ctx: &Context,
    secrets: &Api<Secret>,
    secret_name: &str,
    source: &Source,
) -> Result<Result<(), Refusal>, Error> {
    let staged = match source {
        Source::Object { bucket, key } => stage_object(cp, ctx, source, bucket, key).await?,
        Source::Secret(name) => match read_secret(cp, secrets, source, name).await? {
            Ok(snapshot) => stage_inline(source, &snapshot)?,
            Err(refusal) => Err(refusal),
        },
        Source::File(path) => match read_file(cp, ctx, source, path).await? {
            Ok(snapshot) => stage_inline(source, &snapshot)?,
            Err(refusal) => Err(refusal),
        },
    };
    let Staged {
        key,
        value,
        verified,
    } = match staged {
        Ok(staged) => staged,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(secret_name.to_owned()),
            namespace: Some(cp.namespace.clone()),
            labels: Some([(CLUSTER_NAME_LABEL.to_owned(), cp.cluster_name.clone())].into()),
            annotations: Some(
                [
                    (ETCD_RESTORE_FROM_ANNOTATION.to_owned(), source.to_string()),
                    (
                        "controlplane.cluster.x-k8s.io/etcd-snapshot-sha256".to_owned(),
                        verified.sha256.clone(),
                    ),
                ]
                .into(),
            ),
            owner_references: Some(vec![crate::controller::owner_reference(cp.kcp)]),
            ..Default::default()
        },
        type_: Some(CLUSTER_SECRET_TYPE.to_owned()),
        data: Some([(key.to_owned(), ByteString(value.into_bytes()))].into()),
        ..Default::default()
    };
    // A copy staged for an earlier request is replaced.
    machines::delete_ignoring_missing(secrets, secret_name).await?;
    secrets.create(&PostParams::default(), &secret).await?;
    tracing::info!(
        kcp = %cp.kcp.name_any(),
        %source,
        bytes = verified.database_bytes,
        sha256 = %verified.sha256,
        "staged the etcd snapshot to restore"
    );
    Ok(Ok(()))
}

/// What a stage puts in the restore Secret, and what the check found.
struct Staged {
    /// [`ETCD_RESTORE_SECRET_KEY`] (the snapshot itself) or [`ETCD_RESTORE_DOWNLOAD_KEY`].
    key: &'static str,
    value: String,
    verified: restore::Verified,
}

/// A snapshot from a Secret or a file, read whole: checked, and compressed into the Secret.
fn stage_inline(source: &Source, snapshot: &[u8]) -> Result<Result<Staged, Refusal>, Error> {
    let verified = match restore::verify(source, snapshot) {
        Ok(verified) => verified,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let encoded = {
        use std::io::Write;
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gzip.write_all(snapshot)
            .and_then(|()| gzip.finish())
            .map(|compressed| base64::engine::general_purpose::STANDARD.encode(compressed))
            .map_err(|e| Error::Etcd(format!("compress the snapshot {source}: {e}")))?
    };
    if encoded.len() > SECRET_SNAPSHOT_LIMIT {
        return Ok(Err(Refusal::TooLarge {
            snapshot: source.to_string(),
            size: encoded.len(),
            limit: SECRET_SNAPSHOT_LIMIT,
        }));
    }
    Ok(Ok(Staged {
        key: ETCD_RESTORE_SECRET_KEY,
        value: encoded,
        verified,
    }))
}

/// How long the restoring machine may use its download URL. It is signed again when the machine is
/// created, so this only has to cover the machine's provisioning.
const DOWNLOAD_VALID: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

/// A snapshot object in the store: its manifest read, the object streamed through every check (its
/// stored checksum, its seal, etcd's own hash) without keeping it, and a download for the machine.
async fn stage_object(
    cp: &ControlPlane<'_>,
    ctx: &Context,
    source: &Source,
    bucket: &str,
    key: &str,
) -> Result<Result<Staged, Refusal>, Error> {
    let backup = cp.kcp.spec.etcd_backup.as_ref();
    let manifest_name =
        match restore::check_object(bucket, key, backup, &cp.namespace, &cp.cluster_name) {
            Ok(name) => name,
            Err(refusal) => return Ok(Err(refusal)),
        };
    let backup = backup.expect("check_object refuses without spec.etcdBackup");
    let unavailable = |why: String| Refusal::StoreUnavailable {
        snapshot: source.to_string(),
        why,
    };
    let refusal = |error: StoreError| match error {
        StoreError::NotFound(_) => Refusal::Missing {
            snapshot: source.to_string(),
        },
        StoreError::Corrupt(why) => Refusal::Corrupt {
            snapshot: source.to_string(),
            why,
        },
        StoreError::Denied(why) | StoreError::Failed(why) => unavailable(why),
    };
    let (client, sealing) = match open_store(ctx, &cp.namespace, backup).await {
        Ok(opened) => opened,
        Err(why) => return Ok(Err(unavailable(why))),
    };
    let manifest = match store::manifest(client.as_ref(), &manifest_name).await {
        Ok(manifest) => manifest,
        Err(e) => return Ok(Err(refusal(e))),
    };
    let own = format!("{}/{}", cp.namespace, cp.cluster_name);
    if manifest.cluster != own {
        return Ok(Err(Refusal::OtherCluster {
            snapshot: source.to_string(),
            cluster: cp.cluster_name.clone(),
            why: format!(
                "its manifest {manifest_name} names cluster {}",
                manifest.cluster
            ),
        }));
    }
    if manifest.object != key {
        return Ok(Err(Refusal::Corrupt {
            snapshot: source.to_string(),
            why: format!(
                "its manifest {manifest_name} names object {}",
                manifest.object
            ),
        }));
    }
    let mut check = restore::SnapshotCheck::default();
    let key_of_seal = sealing.as_ref().map(|(key, _)| key);
    let keys = match store::read_checked(client.as_ref(), &manifest, key_of_seal, |piece| {
        check.update(piece);
        Ok(())
    })
    .await
    {
        Ok(keys) => keys,
        Err(e) => return Ok(Err(refusal(e))),
    };
    let verified = match check.finish(source) {
        Ok(verified) => verified,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let url = match store::presigned_get(client.as_ref(), key, DOWNLOAD_VALID).await {
        Ok(url) => url,
        Err(e) => return Ok(Err(refusal(e))),
    };
    let download = Download {
        url,
        stored_sha256: manifest.stored_sha256,
        sha256: manifest.sha256,
        sealed: keys,
    };
    Ok(Ok(Staged {
        key: ETCD_RESTORE_DOWNLOAD_KEY,
        value: download.render(),
        verified,
    }))
}

/// Signs the staged download of an object again just before the machine that uses it is created, so
/// that its URL is valid for that machine's whole provisioning however long the old machines took.
async fn sign_again(
    cp: &ControlPlane<'_>,
    ctx: &Context,
    secrets: &Api<Secret>,
    secret_name: &str,
    source: &Source,
) -> Result<(), Error> {
    let Source::Object { key, .. } = source else {
        return Ok(());
    };
    let Some(backup) = cp.kcp.spec.etcd_backup.as_ref() else {
        return Err(Error::Etcd(format!(
            "restore from {source}: spec.etcdBackup was removed while the restore runs"
        )));
    };
    let staged = secrets
        .get(secret_name)
        .await?
        .data
        .and_then(|d| d.get(ETCD_RESTORE_DOWNLOAD_KEY).cloned())
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        .ok_or_else(|| {
            Error::Etcd(format!(
                "restore from {source}: Secret {secret_name} has no {ETCD_RESTORE_DOWNLOAD_KEY:?}"
            ))
        })?;
    let (client, _) = open_store(ctx, &cp.namespace, backup)
        .await
        .map_err(|why| Error::Etcd(format!("restore from {source}: {why}")))?;
    let url = store::presigned_get(client.as_ref(), key, DOWNLOAD_VALID)
        .await
        .map_err(|e| Error::Etcd(format!("restore from {source}: {e}")))?;
    let value = base64::engine::general_purpose::STANDARD.encode(Download::with_url(&staged, &url));
    let patch = json!({ "data": { ETCD_RESTORE_DOWNLOAD_KEY: value } });
    secrets
        .patch(secret_name, &merge_params(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// The snapshot's bytes in Secret `name` (gzip, as a scheduled snapshot keeps them); a refusal when it
/// is missing or not this cluster's.
async fn read_secret(
    cp: &ControlPlane<'_>,
    secrets: &Api<Secret>,
    source: &Source,
    name: &str,
) -> Result<Result<Vec<u8>, Refusal>, Error> {
    let missing = || Refusal::Missing {
        snapshot: source.to_string(),
    };
    let Some(secret) = secrets.get_opt(name).await? else {
        return Ok(Err(missing()));
    };
    if let Err(refusal) = restore::check_secret(
        source,
        &cp.cluster_name,
        secret.type_.as_deref(),
        secret.labels().get(ETCD_SNAPSHOT_LABEL).map(String::as_str),
    ) {
        return Ok(Err(refusal));
    }
    let Some(compressed) = secret
        .data
        .as_ref()
        .and_then(|d| d.get(SNAPSHOT_SECRET_KEY))
    else {
        return Ok(Err(missing()));
    };
    let mut snapshot = Vec::new();
    let unpacked = std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(compressed.0.as_slice()),
        &mut snapshot,
    );
    Ok(match unpacked {
        Ok(_) => Ok(snapshot),
        Err(e) => Err(Refusal::Corrupt {
            snapshot: source.to_string(),
            why: format!("{SNAPSHOT_SECRET_KEY} is not gzip: {e}"),
        }),
    })
}

/// The snapshot's bytes in the manager's file `path`; a refusal when it is missing or not this
/// cluster's.
async fn read_file(
    cp: &ControlPlane<'_>,
    ctx: &Context,
    source: &Source,
    path: &std::path::Path,
) -> Result<Result<Vec<u8>, Refusal>, Error> {
    if let Err(refusal) = restore::check_file(
        path,
        ctx.settings.snapshot_dir.as_deref(),
        &cp.namespace,
        &cp.cluster_name,
    ) {
        return Ok(Err(refusal));
    }
    match tokio::fs::read(path).await {
        Ok(snapshot) => Ok(Ok(snapshot)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Err(Refusal::Missing {
            snapshot: source.to_string(),
        })),
        Err(e) => Err(Error::Etcd(format!("read {}: {e}", path.display()))),
    }
}

/// The restoring machine's member answers: the control-plane Nodes the snapshot brought back for
/// machines that are gone (and their mirror pods, which no kubelet updates) are deleted, the staged copy
/// is dropped, the restore recorded and the request removed (the last write, so a restart before it
/// finishes again rather than restoring again). Returns the Nodes deleted.
async fn finish(
    cp: &ControlPlane<'_>,
    ctx: &Context,
    secrets: &Api<Secret>,
    secret_name: &str,
    requested: &str,
    machine: &str,
) -> Result<Vec<String>, Error> {
    let removed = forget_lost_nodes(cp).await?;
    machines::delete_ignoring_missing(secrets, secret_name).await?;
    let record = restore::record(cp.now, requested, machine);
    let patch = json!({ "metadata": { "annotations": {
        ETCD_RESTORED_ANNOTATION: record,
        ETCD_RESTORE_FROM_ANNOTATION: null,
    } } });
    let kcps = Api::<kubeadm_api::controlplane::v1beta2::KubeadmControlPlane>::namespaced(
        ctx.client.clone(),
        &cp.namespace,
    );
    kcps.patch(&cp.kcp.name_any(), &merge_params(), &Patch::Merge(&patch))
        .await?;
    Ok(removed)
}

/// Deletes the workload cluster's control-plane Nodes that are no Machine's Node, and their pods.
async fn forget_lost_nodes(cp: &ControlPlane<'_>) -> Result<Vec<String>, Error> {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::api::ListParams;
    use kubeadm_api::meta::CONTROL_PLANE_NODE_ROLE;
    let client = cp.workload()?;
    let current: Vec<&str> = cp
        .machines
        .machines
        .iter()
        .filter_map(|m| m.node.as_deref())
        .collect();
    let nodes = Api::<Node>::all(client.clone());
    let pods = Api::<Pod>::namespaced(client.clone(), "kube-system");
    let mut removed = Vec::new();
    for node in nodes
        .list(&ListParams::default().labels(CONTROL_PLANE_NODE_ROLE))
        .await?
    {
        let name = node.name_any();
        if current.contains(&name.as_str()) {
            continue;
        }
        for pod in pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
            .await?
        {
            machines::delete_ignoring_missing(&pods, &pod.name_any()).await?;
        }
        machines::delete_ignoring_missing(&nodes, &name).await?;
        removed.push(name);
    }
    Ok(removed)
}
