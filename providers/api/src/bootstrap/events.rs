//! The Events the bootstrap provider publishes on a KubeadmConfig.

use super::conditions::reasons;
use crate::events::EventReason;
use crate::events::Severity::{Normal, Warning};

const WRITE_BOOTSTRAP_DATA: &[&str] = &["WriteBootstrapData"];

pub const INIT_LOCK_ACQUIRED: EventReason = EventReason {
    reason: "InitLockAcquired",
    severity: Normal,
    actions: &["AcquireInitLock"],
    when: "its Machine holds the init lock and runs `kubeadm init`",
};
pub const BOOTSTRAP_DATA_WRITTEN: EventReason = EventReason {
    reason: "BootstrapDataWritten",
    severity: Normal,
    actions: WRITE_BOOTSTRAP_DATA,
    when: "the data secret was written (init, control-plane or worker data)",
};
pub const BOOTSTRAP_TOKEN_ROTATED: EventReason = EventReason {
    reason: "BootstrapTokenRotated",
    severity: Normal,
    actions: &["RotateBootstrapToken"],
    when: "a MachinePool's join token was rotated and its data rewritten",
};

const fn failure(reason: &'static str) -> EventReason {
    EventReason {
        reason,
        severity: Warning,
        actions: WRITE_BOOTSTRAP_DATA,
        when: "the status's failure, with its message",
    }
}

/// The failures that stop the bootstrap data from being written: each is also the reason of the
/// KubeadmConfig's `Ready` and `DataSecretAvailable` conditions.
pub const FAILURES: &[EventReason] = &[
    failure(reasons::CERTIFICATES_UNAVAILABLE),
    failure(reasons::INVALID_SPEC),
    failure(reasons::ETCD_LEARNER_MODE_UNSUPPORTED),
    failure(reasons::SECRET_MISSING),
];

/// The Event announcing the failure `reason`.
pub fn failed(reason: &'static str) -> EventReason {
    FAILURES
        .iter()
        .find(|e| e.reason == reason)
        .copied()
        .unwrap_or(failure(reason))
}

/// Every Event the bootstrap provider publishes but the failures, in the reference's order.
pub const ALL: &[EventReason] = &[
    INIT_LOCK_ACQUIRED,
    BOOTSTRAP_DATA_WRITTEN,
    BOOTSTRAP_TOKEN_ROTATED,
];
