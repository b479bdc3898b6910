//! The condition types and reasons the bootstrap provider reports on a KubeadmConfig, named once
//! (Cluster API's names).

/// KubeadmConfig condition types.
pub mod types {
    /// The bootstrap data is written.
    pub const READY: &str = "Ready";
    /// The bootstrap data secret exists.
    pub const DATA_SECRET_AVAILABLE: &str = "DataSecretAvailable";
    /// The cluster certificates exist.
    pub const CERTIFICATES_AVAILABLE: &str = "CertificatesAvailable";
}

/// Reasons of the conditions above (and of the Events that announce them).
pub mod reasons {
    pub const AVAILABLE: &str = "Available";
    pub const WAITING_FOR_INFRASTRUCTURE: &str = "WaitingForInfrastructure";
    pub const WAITING_FOR_CONTROL_PLANE: &str = "WaitingForControlPlane";
    pub const WAITING_FOR_CONTROL_PLANE_INIT: &str = "WaitingForControlPlaneInit";
    pub const WAITING_FOR_CONTROL_PLANE_ENDPOINT: &str = "WaitingForControlPlaneEndpoint";
    pub const CERTIFICATES_UNAVAILABLE: &str = "CertificatesUnavailable";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const ETCD_LEARNER_MODE_UNSUPPORTED: &str = "EtcdLearnerModeUnsupported";
    pub const SECRET_MISSING: &str = "SecretMissing";
}
