//! One step of the scheduled, leader-aware defragmentation (see [`crate::etcd_maintenance`]).

use kubeadm_api::meta::{
    ETCD_DEFRAG_MIN_FREE_ANNOTATION, ETCD_DEFRAG_SCHEDULE_ANNOTATION, ETCD_LAST_DEFRAG_ANNOTATION,
};

use k8s_openapi::jiff::Timestamp;
use kubeadm_api::controlplane::v1beta2::{
    EtcdDefragmentationStatus, EtcdSnapshotStatus, KubeadmControlPlane,
};

use super::background::State;
use super::snapshot::snapshot;
use super::{ClusterKey, EtcdSessions, EtcdView, whole_seconds};
use crate::controller::annotations::annotate_kcp;
use crate::controller::{Context, Error};
use crate::etcd_maintenance::{self, DailyAt, MinFree};

/// A maintenance step taken: the note for its Event and, when it finished something, the record for the
/// status.
#[derive(Debug, Default)]
pub(in crate::controller) struct Maintained {
    pub note: String,
    pub defragmentation: Option<EtcdDefragmentationStatus>,
    pub snapshot: Option<EtcdSnapshotStatus>,
    /// A snapshot that was due but could not be kept, and why.
    pub refused: Option<Refusal>,
}

/// Why a due snapshot was not kept: the reason of the `EtcdSnapshotTaken` condition and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::controller) struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

impl Maintained {
    pub(in crate::controller) fn refused(refusal: Refusal) -> Self {
        Self {
            note: refusal.message.clone(),
            refused: Some(refusal),
            ..Self::default()
        }
    }
}

impl From<String> for Maintained {
    fn from(note: String) -> Self {
        Self {
            note,
            ..Self::default()
        }
    }
}

/// One step of the scheduled, leader-aware defragmentation (see [`crate::etcd_maintenance`]); returns
/// what was done, or `None` when nothing was due.
pub(in crate::controller) async fn maintain(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    key: ClusterKey,
    view: &EtcdView,
    now: Timestamp,
) -> Result<Option<Maintained>, Error> {
    use etcd_maintenance::Step;
    use kube::ResourceExt;
    // A snapshot streaming from a member would hold up that member's defragmentation (which waits
    // for the snapshot's read to end, and blocks the member's writes meanwhile): the round waits.
    match super::backup::finished(ctx, kcp, &key, now).await? {
        State::Done(recorded) => return Ok(Some(recorded)),
        State::Running => return Ok(None),
        State::Idle => {}
    }
    let annotations = kcp.annotations();
    let schedule = match annotations.get(ETCD_DEFRAG_SCHEDULE_ANNOTATION) {
        None => Some(etcd_maintenance::DEFAULT_SCHEDULE),
        Some(text) => DailyAt::parse(text).map_err(Error::Etcd)?,
    };
    let last = annotations
        .get(ETCD_LAST_DEFRAG_ANNOTATION)
        .and_then(|t| t.parse::<Timestamp>().ok());
    if schedule.is_some() && last.is_none() {
        // Start the clock: the first round runs at the next scheduled time, not right away.
        annotate_kcp(ctx, kcp, ETCD_LAST_DEFRAG_ANNOTATION, &now.to_string()).await?;
        return Ok(None);
    }
    let min_free = match annotations.get(ETCD_DEFRAG_MIN_FREE_ANNOTATION) {
        None => MinFree::DEFAULT,
        Some(text) => MinFree::parse(text).map_err(Error::Etcd)?,
    };
    let sizes: std::collections::BTreeMap<u64, (i64, i64)> = view
        .observation
        .states
        .iter()
        .filter_map(|(id, s)| {
            s.as_ref()
                .ok()
                .map(|s| (*id, (s.db_size, s.db_size_in_use)))
        })
        .collect();
    let due = etcd_maintenance::due(schedule, last, now);
    let round = current_round(&ctx.etcd, &key);
    let step = etcd_maintenance::next_step(
        &view.members,
        &view.states,
        due,
        round.as_ref(),
        &min_free.members(&sizes),
    );
    let db_size = || -> i64 {
        view.observation
            .states
            .values()
            .filter_map(|s| s.as_ref().ok())
            .map(|s| s.db_size)
            .sum()
    };
    let rounds = || super::lock(&ctx.etcd.rounds);
    match step {
        Step::Nothing | Step::Wait(_) => snapshot(ctx, kcp, &key, view, now).await,
        Step::Compact => {
            let revision = view
                .observation
                .leader
                .and_then(|id| view.observation.states.get(&id))
                .and_then(|s| s.as_ref().ok())
                .map(|s| s.revision)
                .ok_or_else(|| Error::Etcd("no revision from the leader".into()))?;
            match view.etcd.compact(&view.leader()?, revision).await {
                Ok(()) => {}
                // kube-apiserver compacts too; an already compacted revision is fine.
                Err(e) if e.to_string().contains("compacted") => {}
                Err(e) => return Err(e.into()),
            }
            let mut rounds = rounds();
            let round = rounds.entry(key).or_default();
            round.compacted = true;
            round.db_size_before = db_size();
            Ok(Some(
                format!("compacted etcd to revision {revision} before defragmenting").into(),
            ))
        }
        Step::Defragment { member } => {
            let endpoint = view
                .members
                .iter()
                .find(|m| m.id == member)
                .and_then(|m| m.client_urls.first().cloned())
                .ok_or_else(|| Error::Etcd(format!("member {member:x} has no client URL")))?;
            view.etcd.defragment(&endpoint).await?;
            rounds().entry(key).or_default().defragmented.push(member);
            Ok(Some(format!("defragmented etcd member {member:x}").into()))
        }
        Step::MoveLeader { from, to } => {
            view.etcd.move_leader(&view.leader()?, to).await?;
            Ok(Some(
                format!(
                    "moved etcd leadership from {from:x} to {to:x} to defragment the former leader"
                )
                .into(),
            ))
        }
        Step::Finished => {
            let round = rounds().remove(&key).unwrap_or_default();
            annotate_kcp(ctx, kcp, ETCD_LAST_DEFRAG_ANNOTATION, &now.to_string()).await?;
            let after = db_size();
            let members = round
                .defragmented
                .iter()
                .map(|id| view.member_name(*id))
                .collect();
            let note = if round.defragmented.is_empty() {
                let most = sizes
                    .values()
                    .filter(|(size, _)| *size > 0)
                    .map(|(size, in_use)| (size - in_use) * 100 / size)
                    .max()
                    .unwrap_or(0);
                format!(
                    "compacted etcd; no member has {}% of its database file free and 4 MiB or more \
                     (at most {most}%), none defragmented: database files {} → {after} bytes",
                    min_free.percent, round.db_size_before,
                )
            } else {
                format!(
                    "defragmented {} of {} etcd members (those with {}% of their database file free or \
                     more): database files {} → {after} bytes",
                    round.defragmented.len(),
                    view.members.len(),
                    min_free.percent,
                    round.db_size_before,
                )
            };
            Ok(Some(Maintained {
                note,
                defragmentation: Some(EtcdDefragmentationStatus {
                    time: whole_seconds(now),
                    members,
                    db_size_before: Some(round.db_size_before),
                    db_size_after: Some(after),
                }),
                snapshot: None,
                refused: None,
            }))
        }
    }
}

fn current_round(care: &EtcdSessions, key: &ClusterKey) -> Option<etcd_maintenance::Round> {
    super::lock(&care.rounds).get(key).cloned()
}
