//! Which etcd a stacked control plane runs, and the etcd flags a release removed.
//!
//! kubeadm deploys the etcd image its own constants name for the Kubernetes minor it sets up
//! (`SupportedEtcdVersion`, `DefaultEtcdVersion` in `cmd/kubeadm/app/constants`), unless
//! `etcd.local.imageTag` pins one. A Machine runs the kubeadm of its own release, so the etcd of a control
//! plane at `v1.37.x` is what kubeadm 1.37 names: 3.7. etcd 3.7 removed the 23 `--experimental-*` flags
//! 3.6 deprecated (etcd-io/etcd#19959): a member started with one of them does not start, so the first
//! 3.7 member of a rollout would crash-loop.

use crate::version::Semver;

/// The etcd image tag kubeadm deploys for a control plane of Kubernetes `minor` (1.x), as the newest
/// patch of kubeadm `1.minor` names it: 1.31–1.33 from kubeadm 1.34.4, 1.34 from 1.34.4, 1.35 from
/// 1.35.4, 1.36 from 1.36.3, 1.37 from 1.37.2. `None` before 1.31 (kubeadm releases no longer
/// supported by Cluster API v1.14) and after 1.37 (not released).
pub fn kubeadm_etcd_tag(minor: u64) -> Option<&'static str> {
    Some(match minor {
        31..=33 => "3.5.24-0",
        34 => "3.6.5-0",
        35 => "3.6.6-0",
        36 => "3.6.8-0",
        37 => "3.7.0-0",
        _ => return None,
    })
}

/// The etcd release a stacked control plane of Kubernetes `version` runs: `image_tag` when it names
/// one, else what kubeadm deploys for that minor ([`kubeadm_etcd_tag`]); `None` when neither is known.
pub fn etcd_release(version: &str, image_tag: Option<&str>) -> Option<Semver> {
    if let Some(tag) = image_tag.filter(|t| !t.is_empty()) {
        return Semver::parse_image_tag(tag).ok();
    }
    let kubernetes = Semver::parse_tolerant(version).ok()?;
    if kubernetes.major != 1 {
        return None;
    }
    Semver::parse_image_tag(kubeadm_etcd_tag(kubernetes.minor)?).ok()
}

/// The first etcd release without the `--experimental-*` flags of [`REMOVED_IN_3_7`].
pub const EXPERIMENTAL_FLAGS_REMOVED_IN: Semver = Semver::new(3, 7, 0);

/// Each flag etcd 3.7 removed, with what replaces it (from etcd 3.6's own deprecation notices and
/// `ExperimentalFlagToFeatureMap`).
pub const REMOVED_IN_3_7: [(&str, &str); 23] = [
    (
        "experimental-initial-corrupt-check",
        "--feature-gates=InitialCorruptCheck=true",
    ),
    (
        "experimental-compact-hash-check-enabled",
        "--feature-gates=CompactHashCheck=true",
    ),
    (
        "experimental-txn-mode-write-with-shared-buffer",
        "--feature-gates=TxnModeWriteWithSharedBuffer=true",
    ),
    (
        "experimental-stop-grpc-service-on-defrag",
        "--feature-gates=StopGRPCServiceOnDefrag=true",
    ),
    (
        "experimental-enable-lease-checkpoint",
        "--feature-gates=LeaseCheckpoint=true",
    ),
    (
        "experimental-enable-lease-checkpoint-persist",
        "--feature-gates=LeaseCheckpointPersist=true",
    ),
    (
        "experimental-compact-hash-check-time",
        "--compact-hash-check-time",
    ),
    ("experimental-corrupt-check-time", "--corrupt-check-time"),
    (
        "experimental-compaction-batch-limit",
        "--compaction-batch-limit",
    ),
    (
        "experimental-compaction-sleep-interval",
        "--compaction-sleep-interval",
    ),
    (
        "experimental-watch-progress-notify-interval",
        "--watch-progress-notify-interval",
    ),
    (
        "experimental-warning-apply-duration",
        "--warning-apply-duration",
    ),
    (
        "experimental-warning-unary-request-duration",
        "--warning-unary-request-duration",
    ),
    (
        "experimental-bootstrap-defrag-threshold-megabytes",
        "--bootstrap-defrag-threshold-megabytes",
    ),
    ("experimental-memory-mlock", "--memory-mlock"),
    (
        "experimental-snapshot-catchup-entries",
        "--snapshot-catchup-entries",
    ),
    (
        "experimental-downgrade-check-time",
        "--downgrade-check-time",
    ),
    (
        "experimental-peer-skip-client-san-verification",
        "--peer-skip-client-san-verification",
    ),
    (
        "experimental-enable-distributed-tracing",
        "--enable-distributed-tracing",
    ),
    (
        "experimental-distributed-tracing-address",
        "--distributed-tracing-address",
    ),
    (
        "experimental-distributed-tracing-service-name",
        "--distributed-tracing-service-name",
    ),
    (
        "experimental-distributed-tracing-instance-id",
        "--distributed-tracing-instance-id",
    ),
    (
        "experimental-distributed-tracing-sampling-rate",
        "--distributed-tracing-sampling-rate",
    ),
];

/// What replaces `flag` (an etcd flag name without dashes) in `etcd`, when that release removed it.
pub fn removed_flag(flag: &str, etcd: &Semver) -> Option<&'static str> {
    if *etcd < EXPERIMENTAL_FLAGS_REMOVED_IN {
        return None;
    }
    let flag = flag.trim_start_matches('-');
    REMOVED_IN_3_7
        .iter()
        .find(|(removed, _)| *removed == flag)
        .map(|(_, replacement)| *replacement)
}

/// The rule a removed flag breaks, for a control plane of Kubernetes `version` running `etcd`.
pub fn removed_flag_rule(version: &str, etcd: &Semver, replacement: &str) -> String {
    format!(
        "etcd {}.{} (which a control plane at {version} runs) no longer has this flag and would not start; use {replacement} instead",
        etcd.major, etcd.minor
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_etcd_of_a_control_plane_is_its_image_tag_or_what_its_kubeadm_deploys() {
        let release = |v: &str, tag: Option<&str>| {
            etcd_release(v, tag).map(|s| format!("{}.{}.{}", s.major, s.minor, s.patch))
        };
        assert_eq!(release("v1.33.4", None).as_deref(), Some("3.5.24"));
        assert_eq!(release("v1.34.4", None).as_deref(), Some("3.6.5"));
        assert_eq!(release("v1.36.3", None).as_deref(), Some("3.6.8"));
        assert_eq!(release("v1.37.0", None).as_deref(), Some("3.7.0"));
        assert_eq!(
            release("v1.37.2", Some("3.6.16-0")).as_deref(),
            Some("3.6.16")
        );
        assert_eq!(release("v1.36.3", Some("")).as_deref(), Some("3.6.8"));
        assert_eq!(release("v1.38.0", None), None);
        assert_eq!(release("v1.30.0", None), None);
        assert_eq!(release("not a version", None), None);
    }

    #[test]
    fn every_experimental_flag_is_removed_from_3_7_on_and_kept_before() {
        let v36 = Semver::new(3, 6, 16);
        let v37 = Semver::new(3, 7, 0);
        for (flag, replacement) in REMOVED_IN_3_7 {
            assert!(flag.starts_with("experimental-"), "{flag}");
            assert!(replacement.starts_with("--"), "{replacement}");
            assert_eq!(removed_flag(flag, &v36), None);
            assert_eq!(removed_flag(flag, &v37), Some(replacement));
        }
        assert_eq!(
            removed_flag(
                "--experimental-initial-corrupt-check",
                &Semver::new(3, 7, 3)
            ),
            Some("--feature-gates=InitialCorruptCheck=true")
        );
        assert_eq!(removed_flag("quota-backend-bytes", &v37), None);
        let names: std::collections::BTreeSet<&str> = REMOVED_IN_3_7.iter().map(|f| f.0).collect();
        assert_eq!(names.len(), REMOVED_IN_3_7.len(), "a flag listed twice");
    }
}
