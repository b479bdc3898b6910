//! Leader-aware defragmentation of stacked etcd on a daily schedule, as Sovereign Cloud Stack runs it on
//! slow clouds, decided one step per reconcile: compact, defragment the followers one by one, hand
//! leadership to a defragmented member, then defragment the former leader. Defragmenting a member blocks
//! its reads and writes for a moment; doing the leader last, after it stopped leading, keeps the cluster
//! answering throughout. Only a healthy cluster of several voters is defragmented, and only the members
//! whose database file is fragmented enough ([`MinFree`]) are rewritten.

use kubeadm_api::meta::{
    ETCD_DEFRAG_MIN_FREE_ANNOTATION, ETCD_DEFRAG_SCHEDULE_ANNOTATION,
    ETCD_SNAPSHOT_TARGET_ANNOTATION,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::jiff::{Timestamp, ToSpan, civil::Time, tz::TimeZone};

use crate::etcd_membership::{Member, MemberState, judge_member};

/// The default daily snapshot time, after the defragmentation.
pub const DEFAULT_SNAPSHOT_SCHEDULE: DailyAt = DailyAt { hour: 3, minute: 0 };

/// Key of the gzip-compressed snapshot in a snapshot Secret.
pub const SNAPSHOT_SECRET_KEY: &str = "snapshot.db.gz";
/// Type of snapshot Secrets.
pub use kubeadm_api::meta::ETCD_SNAPSHOT_SECRET_TYPE as SNAPSHOT_SECRET_TYPE;
/// Most compressed bytes a snapshot Secret takes: the API server refuses Secrets whose data exceed
/// 1 MiB; a little is left for the object's other parts.
pub const SECRET_SNAPSHOT_LIMIT: usize = 1024 * 1024 - 4 * 1024;

/// Where scheduled snapshots are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotTarget {
    /// Files in the manager's snapshot directory.
    Dir,
    /// One Secret per snapshot, gzip-compressed.
    Secret,
}

impl SnapshotTarget {
    /// The target from the annotation's value and whether the manager has a snapshot directory;
    /// `None` when no snapshots are taken. An error names the annotation and the rule.
    pub fn resolve(annotation: Option<&str>, has_dir: bool) -> Result<Option<Self>, String> {
        match annotation.map(str::trim) {
            None => Ok(has_dir.then_some(SnapshotTarget::Dir)),
            Some("secret") => Ok(Some(SnapshotTarget::Secret)),
            Some("dir") if has_dir => Ok(Some(SnapshotTarget::Dir)),
            Some("dir") => Err(format!(
                "{ETCD_SNAPSHOT_TARGET_ANNOTATION}: \"dir\" needs the manager's --etcd-snapshot-dir; \
                 use \"secret\" or start the manager with a snapshot directory"
            )),
            Some(other) => Err(format!(
                "{ETCD_SNAPSHOT_TARGET_ANNOTATION}: {other:?} is not a snapshot target; use \"secret\" or \"dir\""
            )),
        }
    }
}

/// The name of the Secret for a snapshot of `cluster` taken at `at`: sortable by time, and a valid
/// object name (lower case).
pub fn snapshot_secret_name(cluster: &str, at: Timestamp) -> String {
    format!("{cluster}-etcd-snapshot-{}", at.strftime("%Y%m%dt%H%M%Sz"))
}

/// Snapshot Secrets of `cluster` to delete so that the newest `keep` remain; Secrets named otherwise
/// are never touched.
pub fn snapshot_secrets_to_prune(names: &[String], cluster: &str, keep: usize) -> Vec<String> {
    let prefix = format!("{cluster}-etcd-snapshot-");
    let mut ours: Vec<&String> = names.iter().filter(|n| n.starts_with(&prefix)).collect();
    ours.sort();
    let excess = ours.len().saturating_sub(keep);
    ours.into_iter().take(excess).cloned().collect()
}

/// Snapshot files of one cluster to delete so that the newest `keep` remain. Names sort by time
/// (`etcd-<UTC timestamp>.db`); other files in the directory are never touched.
pub fn snapshots_to_prune(files: &[String], keep: usize) -> Vec<String> {
    let mut ours: Vec<&String> = files
        .iter()
        .filter(|f| f.starts_with("etcd-") && f.ends_with(".db"))
        .collect();
    ours.sort();
    let excess = ours.len().saturating_sub(keep);
    ours.into_iter().take(excess).cloned().collect()
}

/// The file name of a snapshot taken at `at`: sortable, no characters that trouble file systems.
pub fn snapshot_file_name(at: Timestamp) -> String {
    format!("etcd-{}.db", at.strftime("%Y%m%dT%H%M%SZ"))
}

/// The default daily time, when few people use a cluster.
pub const DEFAULT_SCHEDULE: DailyAt = DailyAt {
    hour: 2,
    minute: 30,
};

/// A time of day in UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DailyAt {
    pub hour: i8,
    pub minute: i8,
}

impl DailyAt {
    /// Parses `HH:MM`; `None` for `disabled`; an error names the rule.
    pub fn parse(text: &str) -> Result<Option<Self>, String> {
        let text = text.trim();
        if text == "disabled" {
            return Ok(None);
        }
        let parsed = text.split_once(':').and_then(|(h, m)| {
            let (hour, minute) = (h.parse::<i8>().ok()?, m.parse::<i8>().ok()?);
            ((0..24).contains(&hour) && (0..60).contains(&minute) && m.len() == 2)
                .then_some(Self { hour, minute })
        });
        parsed.map(Some).ok_or_else(|| {
            format!("{ETCD_DEFRAG_SCHEDULE_ANNOTATION}: {text:?} is not a time of day like 02:30 (UTC) or \"disabled\"")
        })
    }

    /// The first scheduled time strictly after `after`.
    pub fn next_after(self, after: Timestamp) -> Timestamp {
        let day = after.to_zoned(TimeZone::UTC).date();
        let at = |d: k8s_openapi::jiff::civil::Date| {
            d.to_datetime(Time::constant(self.hour, self.minute, 0, 0))
                .to_zoned(TimeZone::UTC)
                .map(|z| z.timestamp())
                .unwrap_or(after)
        };
        let today = at(day);
        if today > after {
            today
        } else {
            at(day.checked_add(1.day()).unwrap_or(day))
        }
    }
}

/// How much of a member's database file must be free (allocated, no longer in use) for a round to
/// defragment it: rewriting a file that is mostly in use, or a small one, blocks the member for little.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MinFree {
    pub percent: u8,
    /// Fewer free bytes than this are not worth a rewrite whatever their share (a small file is never
    /// packed tight: bbolt keeps free pages).
    pub bytes: i64,
}

impl MinFree {
    /// 40 %, where a rewrite returns a good part of the file, and at least 4 MiB.
    pub const DEFAULT: MinFree = MinFree {
        percent: 40,
        bytes: 4 * 1024 * 1024,
    };

    /// Parses `40%` or `40` (0 to 100); an error names the annotation and the rule.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        text.strip_suffix('%')
            .unwrap_or(text)
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|p| *p <= 100)
            .map(|percent| MinFree {
                percent,
                ..MinFree::DEFAULT
            })
            .ok_or_else(|| {
                format!(
                    "{ETCD_DEFRAG_MIN_FREE_ANNOTATION}: {text:?} is not a share of the database like 40% \
                     (0% to 100%)"
                )
            })
    }

    /// Whether a database file of `size` bytes of which `in_use` are used is fragmented enough.
    pub fn reached(self, size: i64, in_use: i64) -> bool {
        if self.percent == 0 {
            return true;
        }
        let free = size - in_use.clamp(0, size);
        size > 0 && free >= self.bytes && free * 100 >= i64::from(self.percent) * size
    }

    /// The members (id → database size and size in use) fragmented enough.
    pub fn members(self, sizes: &BTreeMap<u64, (i64, i64)>) -> BTreeSet<u64> {
        sizes
            .iter()
            .filter(|(_, (size, in_use))| self.reached(*size, *in_use))
            .map(|(id, _)| *id)
            .collect()
    }
}

/// Progress of a defragmentation round, kept by the caller between reconciles (in memory: a restart
/// starts the round over, which only defragments some members twice).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Round {
    pub compacted: bool,
    /// Members done, in the order they were defragmented.
    pub defragmented: Vec<u64>,
    /// Sum of the members' database file sizes when the round started, for the report.
    pub db_size_before: i64,
}

/// The next maintenance step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Compact the keyspace to the current revision, so defragmentation can return the space.
    Compact,
    /// Defragment this member.
    Defragment {
        member: u64,
    },
    /// Hand leadership to a defragmented member before the leader's turn.
    MoveLeader {
        from: u64,
        to: u64,
    },
    /// Every member is done: record the time.
    Finished,
    /// Due, but the cluster is not in a state to be defragmented.
    Wait(String),
    Nothing,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Compact => f.write_str("compact"),
            Step::Defragment { member } => write!(f, "defragment member {member:x}"),
            Step::MoveLeader { from, to } => write!(f, "move leadership from {from:x} to {to:x}"),
            Step::Finished => f.write_str("finished"),
            Step::Wait(why) => write!(f, "waiting: {why}"),
            Step::Nothing => f.write_str("nothing to do"),
        }
    }
}

/// Whether a defragmentation is due at `now`: the first scheduled time after the last one has passed.
pub fn due(schedule: Option<DailyAt>, last: Option<Timestamp>, now: Timestamp) -> bool {
    match (schedule, last) {
        (None, _) => false,
        // Never recorded: the caller records "now", so the first round runs at the next scheduled time.
        (Some(_), None) => false,
        (Some(at), Some(last)) => at.next_after(last) <= now,
    }
}

/// The next step of a round (`round` is `Some` once started), given the membership, each member's state
/// and which members are fragmented enough to defragment (judged after the round's compaction).
pub fn next_step(
    members: &[Member],
    states: &BTreeMap<u64, MemberState>,
    due_now: bool,
    round: Option<&Round>,
    fragmented: &BTreeSet<u64>,
) -> Step {
    let Some(round) = round.cloned().or(due_now.then(Round::default)) else {
        return Step::Nothing;
    };
    let voters: Vec<&Member> = members.iter().filter(|m| !m.is_learner).collect();
    if voters.len() < 2 || voters.len() != members.len() {
        return Step::Wait(format!(
            "defragmentation needs two or more voting members and no learner ({} members, {} voting)",
            members.len(),
            voters.len()
        ));
    }
    let mut leader = None;
    for member in &voters {
        if let Err(reason) = judge_member(member, states) {
            return Step::Wait(reason.to_string());
        }
        if let Some(MemberState::Reachable {
            is_leader: true, ..
        }) = states.get(&member.id)
        {
            leader = Some(member.id);
        }
    }
    let Some(leader) = leader else {
        return Step::Wait("etcd has no leader".into());
    };
    if !round.compacted {
        return Step::Compact;
    }
    let due = |id: &u64| fragmented.contains(id) && !round.defragmented.contains(id);
    if let Some(follower) = voters
        .iter()
        .map(|m| m.id)
        .find(|id| *id != leader && due(id))
    {
        return Step::Defragment { member: follower };
    }
    if !due(&leader) {
        return Step::Finished;
    }
    // To a member already rewritten when there is one: it answers fastest.
    let followers = || voters.iter().map(|m| m.id).filter(|id| *id != leader);
    let to = followers()
        .find(|id| round.defragmented.contains(id))
        .or_else(|| followers().next())
        .expect("two or more voters");
    Step::MoveLeader { from: leader, to }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u64, learner: bool) -> Member {
        Member {
            id,
            name: format!("node-{id}"),
            peer_urls: vec![],
            client_urls: vec![format!("https://10.0.0.{id}:2379")],
            is_learner: learner,
        }
    }

    fn healthy(leader: u64, ids: &[u64]) -> BTreeMap<u64, MemberState> {
        ids.iter()
            .map(|id| {
                (
                    *id,
                    MemberState::Reachable {
                        raft_index: 10,
                        raft_applied_index: 10,
                        is_leader: *id == leader,
                        alarms: vec![],
                        errors: vec![],
                    },
                )
            })
            .collect()
    }

    fn all(ids: &[u64]) -> BTreeSet<u64> {
        ids.iter().copied().collect()
    }

    /// Runs a round to its end the way the controller applies the steps; `fragmented` members stay so
    /// until they are defragmented.
    fn run_round(members: &[Member], mut leader: u64, fragmented: &[u64]) -> Vec<Step> {
        let ids: Vec<u64> = members.iter().map(|m| m.id).collect();
        let mut fragmented = all(fragmented);
        let mut round = Round::default();
        let mut steps = Vec::new();
        for _ in 0..20 {
            let step = next_step(
                members,
                &healthy(leader, &ids),
                true,
                Some(&round),
                &fragmented,
            );
            steps.push(step.clone());
            match step {
                Step::Compact => round.compacted = true,
                Step::Defragment { member } => {
                    round.defragmented.push(member);
                    fragmented.remove(&member);
                }
                Step::MoveLeader { to, .. } => leader = to,
                _ => return steps,
            }
        }
        panic!("no end: {steps:?}");
    }

    #[test]
    fn followers_first_then_leadership_moves_then_the_former_leader() {
        let members = [member(1, false), member(2, false), member(3, false)];
        assert_eq!(
            run_round(&members, 2, &[1, 2, 3]),
            [
                Step::Compact,
                Step::Defragment { member: 1 },
                Step::Defragment { member: 3 },
                Step::MoveLeader { from: 2, to: 1 },
                Step::Defragment { member: 2 },
                Step::Finished,
            ]
        );
    }

    #[test]
    fn only_fragmented_members_are_rewritten_and_leadership_moves_only_for_the_leader() {
        let members = [member(1, false), member(2, false), member(3, false)];
        // Only a follower: the leader keeps leading.
        assert_eq!(
            run_round(&members, 2, &[3]),
            [
                Step::Compact,
                Step::Defragment { member: 3 },
                Step::Finished
            ]
        );
        // Only the leader: leadership moves to a follower first, none of them rewritten.
        assert_eq!(
            run_round(&members, 2, &[2]),
            [
                Step::Compact,
                Step::MoveLeader { from: 2, to: 1 },
                Step::Defragment { member: 2 },
                Step::Finished,
            ]
        );
        // Nobody: the compaction alone.
        assert_eq!(run_round(&members, 2, &[]), [Step::Compact, Step::Finished]);
    }

    #[test]
    fn fragmentation_is_the_share_of_the_file_not_in_use() {
        const MIB: i64 = 1024 * 1024;
        let forty = MinFree::DEFAULT;
        assert!(forty.reached(100 * MIB, 60 * MIB));
        assert!(!forty.reached(100 * MIB, 61 * MIB));
        assert!(!forty.reached(0, 0), "an empty file is not fragmented");
        assert!(forty.reached(100 * MIB, -5), "in use is never below none");
        assert!(
            !forty.reached(6 * MIB, 3 * MIB),
            "less than 4 MiB free is not worth it"
        );
        assert!(forty.reached(8 * MIB, 4 * MIB));
        let share = |percent| MinFree { percent, bytes: 0 };
        assert!(share(0).reached(100, 100));
        assert!(!share(100).reached(100, 1));
        assert!(share(100).reached(100, 0));
        let sizes = BTreeMap::from([
            (1, (1000 * MIB, 900 * MIB)),
            (2, (1000 * MIB, 500 * MIB)),
            (3, (1000 * MIB, 600 * MIB)),
        ]);
        assert_eq!(forty.members(&sizes), all(&[2, 3]));
        assert_eq!(MinFree::parse(" 25% ").map(|m| m.percent), Ok(25));
        assert_eq!(MinFree::parse("0").map(|m| m.percent), Ok(0));
        for bad in ["101%", "-1%", "forty", "40 percent", ""] {
            let error = MinFree::parse(bad).unwrap_err();
            assert!(
                error.contains(ETCD_DEFRAG_MIN_FREE_ANNOTATION) && error.contains("0% to 100%"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn only_a_healthy_cluster_of_several_voters() {
        let one = [member(1, false)];
        assert!(matches!(
            next_step(&one, &healthy(1, &[1]), true, None, &all(&[1])),
            Step::Wait(_)
        ));
        let learner = [member(1, false), member(2, false), member(3, true)];
        assert!(matches!(
            next_step(
                &learner,
                &healthy(1, &[1, 2, 3]),
                true,
                None,
                &all(&[1, 2, 3])
            ),
            Step::Wait(_)
        ));
        let members = [member(1, false), member(2, false), member(3, false)];
        let mut states = healthy(1, &[1, 2, 3]);
        states.insert(3, MemberState::Unreachable("connection refused".into()));
        assert_eq!(
            next_step(&members, &states, true, None, &all(&[1, 2, 3])),
            Step::Wait("member 3 (node-3) unreachable: connection refused".into())
        );
        let mut states = healthy(1, &[1, 2, 3]);
        if let Some(MemberState::Reachable { alarms, .. }) = states.get_mut(&2) {
            alarms.push("NOSPACE".into());
        }
        assert!(
            matches!(next_step(&members, &states, true, None, &all(&[1, 2, 3])), Step::Wait(w) if w.contains("NOSPACE"))
        );
        assert_eq!(
            next_step(
                &members,
                &healthy(1, &[1, 2, 3]),
                false,
                None,
                &all(&[1, 2, 3])
            ),
            Step::Nothing
        );
    }

    #[test]
    fn the_newest_snapshots_are_kept_and_nothing_else_is_touched() {
        let files: Vec<String> = [
            "etcd-20261127T030000Z.db",
            "etcd-20261129T030000Z.db",
            "notes.txt",
            "etcd-20261128T030000Z.db",
            "etcd-20261129T030000Z.db.partial",
        ]
        .map(String::from)
        .into();
        assert_eq!(snapshots_to_prune(&files, 2), ["etcd-20261127T030000Z.db"]);
        assert!(snapshots_to_prune(&files, 7).is_empty());
        assert_eq!(snapshots_to_prune(&files, 0).len(), 3);
        let name = snapshot_file_name("2026-11-29T03:00:07Z".parse().unwrap());
        assert_eq!(name, "etcd-20261129T030007Z.db");
    }

    #[test]
    fn the_snapshot_target_comes_from_the_annotation_or_the_manager() {
        assert_eq!(SnapshotTarget::resolve(None, false), Ok(None));
        assert_eq!(
            SnapshotTarget::resolve(None, true),
            Ok(Some(SnapshotTarget::Dir))
        );
        for has_dir in [false, true] {
            assert_eq!(
                SnapshotTarget::resolve(Some("secret"), has_dir),
                Ok(Some(SnapshotTarget::Secret))
            );
        }
        assert_eq!(
            SnapshotTarget::resolve(Some("dir"), true),
            Ok(Some(SnapshotTarget::Dir))
        );
        let err = SnapshotTarget::resolve(Some("dir"), false).unwrap_err();
        assert!(
            err.starts_with(ETCD_SNAPSHOT_TARGET_ANNOTATION) && err.contains("--etcd-snapshot-dir"),
            "{err}"
        );
        let err = SnapshotTarget::resolve(Some("s3"), true).unwrap_err();
        assert!(
            err.starts_with(ETCD_SNAPSHOT_TARGET_ANNOTATION) && err.contains("\"s3\""),
            "{err}"
        );
    }

    #[test]
    fn snapshot_secrets_are_named_by_time_and_the_newest_kept() {
        let at = "2026-11-29T03:00:07Z".parse().unwrap();
        assert_eq!(
            snapshot_secret_name("prod", at),
            "prod-etcd-snapshot-20261129t030007z"
        );
        let names: Vec<String> = [
            "prod-etcd-snapshot-20261129t030000z",
            "prod-etcd-snapshot-20261127t030000z",
            "prod-etcd",
            "prod-etcd-snapshot-20261128t030000z",
            "staging-etcd-snapshot-20200101t030000z",
        ]
        .map(String::from)
        .into();
        assert_eq!(
            snapshot_secrets_to_prune(&names, "prod", 2),
            ["prod-etcd-snapshot-20261127t030000z"]
        );
        assert_eq!(snapshot_secrets_to_prune(&names, "prod", 0).len(), 3);
        assert!(snapshot_secrets_to_prune(&names, "prod", 3).is_empty());
    }

    #[test]
    fn schedules_are_daily_utc_times() {
        let at = DailyAt::parse("02:30").unwrap().unwrap();
        let t = |s: &str| s.parse::<Timestamp>().unwrap();
        assert_eq!(
            at.next_after(t("2026-11-29T01:00:00Z")),
            t("2026-11-29T02:30:00Z")
        );
        assert_eq!(
            at.next_after(t("2026-11-29T02:30:00Z")),
            t("2026-11-30T02:30:00Z")
        );
        assert!(due(
            Some(at),
            Some(t("2026-11-28T03:00:00Z")),
            t("2026-11-29T02:31:00Z")
        ));
        assert!(!due(
            Some(at),
            Some(t("2026-11-29T02:35:00Z")),
            t("2026-11-29T23:00:00Z")
        ));
        assert!(
            !due(Some(at), None, t("2026-11-29T23:00:00Z")),
            "the first round waits for its time"
        );
        assert!(!due(
            None,
            Some(t("2020-01-01T00:00:00Z")),
            t("2026-11-29T23:00:00Z")
        ));
        assert_eq!(DailyAt::parse("disabled"), Ok(None));
        for bad in ["2:3", "24:00", "02:60", "noon", ""] {
            let err = DailyAt::parse(bad).unwrap_err();
            assert!(err.starts_with(ETCD_DEFRAG_SCHEDULE_ANNOTATION), "{err}");
        }
    }
}
