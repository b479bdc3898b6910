//! Scheduled etcd snapshots, to the manager's snapshot directory or into Secrets.

use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kubeadm_api::controlplane::v1beta2::{EtcdSnapshotStatus, KubeadmControlPlane};
use kubeadm_api::meta::{
    ETCD_LAST_SNAPSHOT_ANNOTATION, ETCD_SNAPSHOT_LABEL, ETCD_SNAPSHOT_MEMBER_ANNOTATION,
    ETCD_SNAPSHOT_REVISION_ANNOTATION, ETCD_SNAPSHOT_SCHEDULE_ANNOTATION,
    ETCD_SNAPSHOT_SIZE_ANNOTATION, ETCD_SNAPSHOT_TARGET_ANNOTATION,
};

use super::defrag::Refusal;
use super::{ClusterKey, EtcdView, Maintained, whole_seconds};
use crate::controller::annotations::annotate_kcp;
use crate::controller::{Context, Error};
use crate::etcd_maintenance::{self, DailyAt};
use crate::etcd_membership::{Member, judge_member};

/// A scheduled snapshot (when the manager has a snapshot directory): streamed from a healthy voting
/// member (a follower when there is one, to spare the leader) into
/// `<dir>/<namespace>/<cluster>/etcd-<time>.db`, written under a temporary name and renamed when complete;
/// the newest `snapshots_keep` are kept.
pub(super) async fn snapshot(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    key: &ClusterKey,
    view: &EtcdView,
    now: Timestamp,
) -> Result<Option<Maintained>, Error> {
    use etcd_maintenance::SnapshotTarget;
    use kube::ResourceExt;
    if let Some(backup) = &kcp.spec.etcd_backup {
        return super::backup::snapshot(ctx, kcp, key, view, now, backup).await;
    }
    let target = SnapshotTarget::resolve(
        kcp.annotations()
            .get(ETCD_SNAPSHOT_TARGET_ANNOTATION)
            .map(String::as_str),
        ctx.settings.snapshot_dir.is_some(),
    )
    .map_err(Error::Etcd)?;
    let Some(target) = target else {
        return Ok(None);
    };
    let schedule = match kcp.annotations().get(ETCD_SNAPSHOT_SCHEDULE_ANNOTATION) {
        None => Some(etcd_maintenance::DEFAULT_SNAPSHOT_SCHEDULE),
        Some(text) => DailyAt::parse(text).map_err(Error::Etcd)?,
    };
    let last = last_snapshot(kcp);
    if schedule.is_some() && last.is_none() {
        annotate_kcp(ctx, kcp, ETCD_LAST_SNAPSHOT_ANNOTATION, &now.to_string()).await?;
        return Ok(None);
    }
    if !etcd_maintenance::due(schedule, last, now) {
        return Ok(None);
    }
    let (source, source_name, revision) = source(view)?;
    let root = match (target, &ctx.settings.snapshot_dir) {
        (SnapshotTarget::Dir, Some(root)) => root,
        _ => {
            return snapshot_to_secret(ctx, kcp, key, view, now, &source, &source_name, revision)
                .await
                .map(Some);
        }
    };
    let dir = root.join(&key.0).join(&key.1);
    let io = |what: &str, e: std::io::Error| Error::Etcd(format!("snapshot: {what}: {e}"));
    tokio::fs::create_dir_all(&dir)
        .await
        .map_err(|e| io(&format!("create {}", dir.display()), e))?;
    let name = etcd_maintenance::snapshot_file_name(now);
    let path = dir.join(&name);
    let partial = dir.join(format!("{name}.partial"));
    let mut file = tokio::fs::File::create(&partial)
        .await
        .map_err(|e| io(&format!("create {}", partial.display()), e))?;
    let written = match view.etcd.snapshot(&source, &mut file).await {
        Ok(bytes) => bytes,
        Err(e) => {
            let _ = tokio::fs::remove_file(&partial).await;
            return Err(e.into());
        }
    };
    file.sync_all()
        .await
        .map_err(|e| io(&format!("sync {}", partial.display()), e))?;
    tokio::fs::rename(&partial, &path)
        .await
        .map_err(|e| io(&format!("rename to {}", path.display()), e))?;
    let mut names = Vec::new();
    let mut entries = tokio::fs::read_dir(&dir)
        .await
        .map_err(|e| io(&format!("list {}", dir.display()), e))?;
    while let Ok(Some(entry)) = entries.next_entry().await {
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    for old in etcd_maintenance::snapshots_to_prune(&names, ctx.settings.snapshots_keep) {
        let _ = tokio::fs::remove_file(dir.join(old)).await;
    }
    let note = format!("wrote etcd snapshot {} ({written} bytes)", path.display());
    let snapshot = taken(
        now,
        path.display().to_string(),
        written,
        revision,
        source_name,
    );
    kept(ctx, kcp, now, note, snapshot).await.map(Some)
}

/// When the last snapshot was taken (or the clock started): the first word of
/// [`ETCD_LAST_SNAPSHOT_ANNOTATION`].
pub(super) fn last_snapshot(kcp: &KubeadmControlPlane) -> Option<Timestamp> {
    use kube::ResourceExt;
    kcp.annotations()
        .get(ETCD_LAST_SNAPSHOT_ANNOTATION)
        .and_then(|v| v.split_whitespace().next()?.parse::<Timestamp>().ok())
}

/// The status record of a snapshot of `size` bytes from `member` (at `revision`) kept at `location`.
pub(super) fn taken(
    now: Timestamp,
    location: String,
    size: u64,
    revision: Option<i64>,
    member: String,
) -> EtcdSnapshotStatus {
    EtcdSnapshotStatus {
        time: whole_seconds(now),
        location,
        size: i64::try_from(size).ok(),
        revision,
        member: Some(member),
    }
}

/// A snapshot kept: the clock moves to `now` with where it went, and `note` and `snapshot` are what the
/// Event and the status get.
pub(super) async fn kept(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    now: Timestamp,
    note: String,
    snapshot: EtcdSnapshotStatus,
) -> Result<Maintained, Error> {
    let record = format!("{now} {}", snapshot.location);
    annotate_kcp(ctx, kcp, ETCD_LAST_SNAPSHOT_ANNOTATION, &record).await?;
    Ok(Maintained {
        note,
        snapshot: Some(snapshot),
        ..Maintained::default()
    })
}

/// Where a snapshot is streamed from: a healthy voting member, a follower when there is one (to spare
/// the leader); its client URL, name and revision.
pub(super) fn source(view: &EtcdView) -> Result<(String, String, Option<i64>), Error> {
    let healthy = |m: &&Member| !m.is_learner && judge_member(m, &view.states).is_ok();
    let (source_id, source) = view
        .members
        .iter()
        .filter(healthy)
        .min_by_key(|m| Some(m.id) == view.observation.leader)
        .and_then(|m| Some((m.id, m.client_urls.first().cloned()?)))
        .ok_or_else(|| Error::Etcd("no healthy voting member to take a snapshot from".into()))?;
    let revision = view
        .observation
        .states
        .get(&source_id)
        .and_then(|s| s.as_ref().ok())
        .map(|s| s.revision);
    Ok((source, view.member_name(source_id), revision))
}

/// A snapshot into a new Secret `<cluster>-etcd-snapshot-<time>` in the control plane's namespace
/// (gzip-compressed under `snapshot.db.gz`, labelled with the cluster, owned by the control plane), then
/// the oldest beyond `snapshots_keep` deleted. A snapshot whose compressed size passes what a Secret can
/// hold is refused, recorded as refused (so it is tried again at the next scheduled time, not at once)
/// and reported.
#[allow(clippy::too_many_arguments)]
async fn snapshot_to_secret(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    key: &ClusterKey,
    view: &EtcdView,
    now: Timestamp,
    source: &str,
    source_name: &str,
    revision: Option<i64>,
) -> Result<Maintained, Error> {
    use etcd_maintenance::{SECRET_SNAPSHOT_LIMIT, SNAPSHOT_SECRET_KEY, SNAPSHOT_SECRET_TYPE};
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{DeleteParams, ListParams, PostParams};
    let (namespace, cluster) = key;
    let name = etcd_maintenance::snapshot_secret_name(cluster, now);
    let mut out = CompressedSnapshot::new(SECRET_SNAPSHOT_LIMIT);
    let streamed = view.etcd.snapshot(source, &mut out).await;
    let refuse = || async move {
        let why = format!(
            "etcd snapshot of member {source_name} cannot be kept in a Secret: compressed, it exceeds \
             {SECRET_SNAPSHOT_LIMIT} bytes, more than a Secret holds; compact and defragment etcd, or take \
             snapshots to a volume (--etcd-snapshot-dir with the {} annotation set to \"dir\")",
            ETCD_SNAPSHOT_TARGET_ANNOTATION
        );
        annotate_kcp(
            ctx,
            kcp,
            ETCD_LAST_SNAPSHOT_ANNOTATION,
            &format!("{now} refused"),
        )
        .await?;
        Ok::<_, Error>(Maintained::refused(Refusal {
            reason: kubeadm_api::controlplane::conditions::reasons::TOO_LARGE_FOR_SECRET,
            message: why,
        }))
    };
    let written = match streamed {
        Ok(bytes) => bytes,
        Err(_) if out.exceeded() => return refuse().await,
        Err(e) => return Err(e.into()),
    };
    let Ok(compressed) = out.finish() else {
        return refuse().await;
    };
    let compressed_size = compressed.len();
    let mut labels = std::collections::BTreeMap::new();
    labels.insert(
        kubeadm_api::meta::CLUSTER_NAME_LABEL.to_owned(),
        cluster.clone(),
    );
    labels.insert(ETCD_SNAPSHOT_LABEL.to_owned(), cluster.clone());
    let mut annotations = std::collections::BTreeMap::new();
    annotations.insert(
        ETCD_SNAPSHOT_SIZE_ANNOTATION.to_owned(),
        written.to_string(),
    );
    annotations.insert(
        ETCD_SNAPSHOT_MEMBER_ANNOTATION.to_owned(),
        source_name.to_owned(),
    );
    if let Some(revision) = revision {
        annotations.insert(
            ETCD_SNAPSHOT_REVISION_ANNOTATION.to_owned(),
            revision.to_string(),
        );
    }
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![crate::controller::owner_reference(kcp)]),
            ..Default::default()
        },
        type_: Some(SNAPSHOT_SECRET_TYPE.to_owned()),
        data: Some([(SNAPSHOT_SECRET_KEY.to_owned(), ByteString(compressed))].into()),
        ..Default::default()
    };
    let secrets = Api::<Secret>::namespaced(ctx.client.clone(), namespace);
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => {}
        // Written by an earlier attempt at the same second whose answer was lost.
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let listed = secrets
        .list(&ListParams::default().labels(&format!("{ETCD_SNAPSHOT_LABEL}={cluster}")))
        .await?;
    let names: Vec<String> = listed
        .items
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    for old in
        etcd_maintenance::snapshot_secrets_to_prune(&names, cluster, ctx.settings.snapshots_keep)
    {
        match secrets.delete(&old, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let note = format!(
        "wrote etcd snapshot of member {source_name} to Secret {name} ({written} bytes, \
         {compressed_size} compressed)"
    );
    let snapshot = taken(
        now,
        format!("secret/{name}"),
        written,
        revision,
        source_name.to_owned(),
    );
    kept(ctx, kcp, now, note, snapshot).await
}

/// A snapshot compressed with gzip as it streams in, refused as soon as the compressed bytes pass
/// `limit`: a database too large for a Secret is noticed after about `limit` compressed bytes, not after
/// the whole database went through memory.
pub struct CompressedSnapshot {
    encoder: flate2::write::GzEncoder<Vec<u8>>,
    limit: usize,
    exceeded: bool,
}

impl CompressedSnapshot {
    pub fn new(limit: usize) -> Self {
        Self {
            encoder: flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default()),
            limit,
            exceeded: false,
        }
    }

    /// Whether the compressed snapshot outgrew the limit (the stream was then refused).
    pub fn exceeded(&self) -> bool {
        self.exceeded
    }

    /// The finished gzip stream; an error when it outgrew the limit.
    pub fn finish(mut self) -> std::io::Result<Vec<u8>> {
        if self.exceeded {
            return Err(Self::too_large(self.limit));
        }
        let compressed = self.encoder.finish()?;
        if compressed.len() > self.limit {
            self.exceeded = true;
            return Err(Self::too_large(self.limit));
        }
        Ok(compressed)
    }

    fn too_large(limit: usize) -> std::io::Error {
        std::io::Error::other(format!(
            "the compressed snapshot exceeds {limit} bytes, more than a Secret can hold"
        ))
    }
}

impl tokio::io::AsyncWrite for CompressedSnapshot {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::io::Write;
        if self.exceeded {
            return std::task::Poll::Ready(Err(Self::too_large(self.limit)));
        }
        let written = self.encoder.write_all(buf);
        if written.is_ok() && self.encoder.get_ref().len() > self.limit {
            self.exceeded = true;
            return std::task::Poll::Ready(Err(Self::too_large(self.limit)));
        }
        std::task::Poll::Ready(written.map(|()| buf.len()))
    }

    // A gzip flush would only add sync markers; everything is finished in `finish`.
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn snapshots_are_gzipped_and_refused_past_the_limit() {
        use std::io::Read;
        use tokio::io::AsyncWriteExt;
        let repetitive = vec![7u8; 4 * 1024 * 1024];
        let mut out = CompressedSnapshot::new(64 * 1024);
        for chunk in repetitive.chunks(64 * 1024) {
            out.write_all(chunk).await.unwrap();
        }
        out.flush().await.unwrap();
        let compressed = out.finish().unwrap();
        assert!(compressed.len() < 64 * 1024, "{}", compressed.len());
        let mut restored = Vec::new();
        flate2::read::GzDecoder::new(compressed.as_slice())
            .read_to_end(&mut restored)
            .unwrap();
        assert_eq!(restored, repetitive);

        // Random bytes do not compress: refused once the compressed stream passes the limit.
        let mut noise = vec![0u8; 256 * 1024];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut noise).unwrap();
        let mut out = CompressedSnapshot::new(64 * 1024);
        let mut refused = None;
        for (i, chunk) in noise.chunks(16 * 1024).enumerate() {
            if let Err(e) = out.write_all(chunk).await {
                refused = Some((i, e));
                break;
            }
        }
        let (at_chunk, error) = refused.expect("the limit was never reached");
        assert!(out.exceeded());
        assert!(at_chunk < 8, "refused early, after chunk {at_chunk}");
        assert!(
            error.to_string().contains("more than a Secret can hold"),
            "{error}"
        );
        assert!(out.finish().is_err());
    }
}
