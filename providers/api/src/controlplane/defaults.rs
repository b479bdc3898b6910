//! Defaulting of KubeadmControlPlane.
//!
//! As in Cluster API v1.14, only three things are defaulted: `replicas` (1), the `v` prefix of
//! `version`, and the rollout strategy (always RollingUpdate, `maxSurge` 1 when unset). The embedded
//! KubeadmConfigSpec is left alone (see [`crate::bootstrap::defaults`]), and KubeadmControlPlaneTemplate
//! has no defaulting: its rollout strategy stopped being defaulted in v1.11, and its update rule
//! accepts the old default in place of an unset strategy.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::v1beta2::{KubeadmControlPlane, KubeadmControlPlaneRolloutStrategyType};

/// Fills the defaults of a KubeadmControlPlane on admission. Idempotent.
pub fn default_kcp(kcp: &mut KubeadmControlPlane) {
    let spec = &mut kcp.spec;
    spec.replicas.get_or_insert(1);
    if !spec.version.starts_with('v') {
        spec.version.insert(0, 'v');
    }
    let strategy = spec
        .rollout
        .get_or_insert_default()
        .strategy
        .get_or_insert_default();
    strategy.type_ = KubeadmControlPlaneRolloutStrategyType::RollingUpdate;
    strategy
        .rolling_update
        .get_or_insert_default()
        .max_surge
        .get_or_insert(IntOrString::Int(1));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controlplane::v1beta2::{
        KubeadmControlPlaneRolloutSpec, KubeadmControlPlaneRolloutStrategy,
        KubeadmControlPlaneRolloutStrategyRollingUpdate, KubeadmControlPlaneSpec,
    };

    fn kcp(spec: KubeadmControlPlaneSpec) -> KubeadmControlPlane {
        KubeadmControlPlane::new("cp", spec)
    }

    #[test]
    fn fills_replicas_version_prefix_and_strategy() {
        let mut object = kcp(KubeadmControlPlaneSpec {
            version: "1.33.1".into(),
            ..Default::default()
        });
        default_kcp(&mut object);
        assert_eq!(object.spec.replicas, Some(1));
        assert_eq!(object.spec.version, "v1.33.1");
        let strategy = object.spec.rollout.unwrap().strategy.unwrap();
        assert_eq!(
            strategy.type_,
            KubeadmControlPlaneRolloutStrategyType::RollingUpdate
        );
        assert_eq!(
            strategy.rolling_update.unwrap().max_surge,
            Some(IntOrString::Int(1))
        );
    }

    #[test]
    fn keeps_what_the_user_set() {
        let rollout = KubeadmControlPlaneRolloutSpec {
            strategy: Some(KubeadmControlPlaneRolloutStrategy {
                type_: KubeadmControlPlaneRolloutStrategyType::RollingUpdate,
                rolling_update: Some(KubeadmControlPlaneRolloutStrategyRollingUpdate {
                    max_surge: Some(IntOrString::Int(0)),
                }),
            }),
            ..Default::default()
        };
        let mut object = kcp(KubeadmControlPlaneSpec {
            replicas: Some(3),
            version: "v1.33.1".into(),
            rollout: Some(rollout.clone()),
            ..Default::default()
        });
        let before = object.clone();
        default_kcp(&mut object);
        assert_eq!(object, before);
    }

    #[test]
    fn defaulting_is_idempotent() {
        let mut once = kcp(KubeadmControlPlaneSpec {
            version: "1.32.0".into(),
            ..Default::default()
        });
        default_kcp(&mut once);
        let mut twice = once.clone();
        default_kcp(&mut twice);
        assert_eq!(once, twice);
    }
}
