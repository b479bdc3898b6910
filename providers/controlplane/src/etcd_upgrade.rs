//! etcd minor upgrades made safe: a member of a newer etcd minor joins only a cluster whose members all
//! run at least that minor's upgrade floor (etcd's upgrade guides: every 3.5 member at 3.5.20 or newer
//! before a 3.6 member joins, every 3.6 member at 3.6.11 or newer before 3.7). kubeadm does not check
//! it (kubeadm#3247), and its own etcd images are below the floor: kubeadm 1.36 deploys 3.6.8, so
//! bumping a control plane from 1.36 to 1.37 (etcd 3.7.0) with kubeadm's images would add a 3.7
//! learner to 3.6.8 members. The control plane holds such a scale up, naming each member below the
//! floor; members of an older minor than the floor's are below it too, so a rollout never mixes more
//! than two etcd minors.

use std::collections::BTreeMap;

use kubeadm_api::etcd_release::etcd_release;
use kubeadm_api::version::Semver;

use crate::desired::DesiredState;
use crate::etcd_membership::Member;

/// The least version every member must run before a member of `target`'s minor joins; `None` when no
/// floor is known for that minor.
pub fn upgrade_floor(target: &Semver) -> Option<Semver> {
    match (target.major, target.minor) {
        (3, 7) => Some(Semver::new(3, 6, 11)),
        (3, 6) => Some(Semver::new(3, 5, 20)),
        _ => None,
    }
}

/// A scale up that would bring a newer etcd minor to members below its floor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BelowFloor {
    /// The etcd release the new member would run.
    pub target: String,
    pub floor: String,
    /// `name (version)` of each member below the floor.
    pub members: Vec<String>,
}

/// The members (`(name or id, version)`) below the upgrade floor of `target`, when `target` is of a
/// newer minor than theirs; `None` when the new member may join. A version that does not parse is left
/// to the other checks.
pub fn below_floor(target: &Semver, members: &[(String, String)]) -> Option<BelowFloor> {
    let floor = upgrade_floor(target)?;
    let below: Vec<String> = members
        .iter()
        .filter_map(|(name, version)| {
            let running = Semver::parse_image_tag(version).ok()?;
            let older_minor = (running.major, running.minor) < (target.major, target.minor);
            (older_minor && running < floor).then(|| format!("{name} ({version})"))
        })
        .collect();
    (!below.is_empty()).then(|| BelowFloor {
        target: format!("{}.{}.{}", target.major, target.minor, target.patch),
        floor: floor.to_string(),
        members: below,
    })
}

/// The check for a stacked control plane of Kubernetes `version`: the etcd the next machine runs
/// (`image_tag`, else what kubeadm of `version` deploys) against each member's server version as its
/// status reported it (`versions` by member id).
pub fn check(
    version: &str,
    image_tag: Option<&str>,
    members: &[Member],
    versions: &BTreeMap<u64, String>,
) -> Option<BelowFloor> {
    let target = etcd_release(version, image_tag)?;
    let running: Vec<(String, String)> = members
        .iter()
        .filter_map(|m| {
            let version = versions.get(&m.id)?;
            let name = if m.name.is_empty() {
                format!("{:x}", m.id)
            } else {
                m.name.clone()
            };
            Some((name, version.clone()))
        })
        .collect();
    below_floor(&target, &running)
}

/// [`check`] for the machine a control plane would add now; `None` with external etcd.
pub fn check_desired(
    desired: &DesiredState,
    members: &[Member],
    versions: &BTreeMap<u64, String>,
) -> Option<BelowFloor> {
    if desired.external_etcd {
        return None;
    }
    let etcd = &desired.join.cluster_configuration.etcd.local;
    check(
        &desired.version,
        etcd.image_tag.as_deref(),
        members,
        versions,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(versions: &[(&str, &str)]) -> Vec<(String, String)> {
        versions
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_newer_minor_waits_for_every_member_at_the_floor() {
        let v37 = Semver::new(3, 7, 0);
        // kubeadm 1.36's etcd is below 3.7's floor.
        let held = below_floor(
            &v37,
            &members(&[("cp-a", "3.6.8"), ("cp-b", "3.6.11"), ("cp-c", "3.6.16")]),
        );
        assert_eq!(
            held,
            Some(BelowFloor {
                target: "3.7.0".into(),
                floor: "3.6.11".into(),
                members: vec!["cp-a (3.6.8)".into()],
            })
        );
        assert_eq!(
            below_floor(&v37, &members(&[("cp-a", "3.6.11"), ("cp-b", "3.6.16")])),
            None
        );
        // A third minor is below the floor too: never more than two minors at once.
        let three = below_floor(&v37, &members(&[("cp-a", "3.5.24"), ("cp-b", "3.6.16")])).unwrap();
        assert_eq!(three.members, ["cp-a (3.5.24)"]);
        // Members of the target's own minor (a rollout under way) or newer are not held.
        assert_eq!(
            below_floor(&v37, &members(&[("cp-a", "3.7.0"), ("cp-b", "3.6.16")])),
            None
        );
        assert_eq!(
            below_floor(&Semver::new(3, 6, 5), &members(&[("cp-a", "3.6.1")])),
            None
        );
        // 3.6 waits for 3.5.20.
        let v36 = Semver::new(3, 6, 5);
        assert_eq!(
            below_floor(&v36, &members(&[("cp-a", "3.5.19"), ("cp-b", "3.4.23")]))
                .unwrap()
                .members,
            ["cp-a (3.5.19)", "cp-b (3.4.23)"]
        );
        assert_eq!(below_floor(&v36, &members(&[("cp-a", "3.5.20")])), None);
        // No floor known (3.5 and older targets), or a version that does not parse: not held here.
        assert_eq!(
            below_floor(&Semver::new(3, 5, 24), &members(&[("cp-a", "3.4.23")])),
            None
        );
        assert_eq!(below_floor(&v37, &members(&[("cp-a", "weird")])), None);
    }

    #[test]
    fn the_hold_names_the_members_the_floor_and_the_way_out() {
        let held = below_floor(&Semver::new(3, 7, 0), &members(&[("cp-a", "3.6.8")])).unwrap();
        let blocker = crate::preflight::Blocker::EtcdBelowUpgradeFloor(held);
        assert_eq!(blocker.reason(), "EtcdBelowUpgradeFloor");
        assert_eq!(
            blocker.to_string(),
            "a new member would run etcd 3.7.0, which may join only members at 3.6.11 or newer: \
             cp-a (3.6.8) below it; roll the control plane to an etcd of 3.6.11 or newer first \
             (etcd.local.imageTag), then to the new release"
        );
    }
}
