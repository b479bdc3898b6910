//! The condition types and reasons the control plane reports, on the KubeadmControlPlane and on the
//! Machines it owns, named once (Cluster API's names where it has them).

/// KubeadmControlPlane condition types.
pub mod types {
    /// The spec can be turned into a desired state.
    pub const SPEC_VALID: &str = "SpecValid";
    /// `kubeadm init` has run on the first machine.
    pub const INITIALIZED: &str = "Initialized";
    /// The control plane is initialized and some machine has a Node.
    pub const AVAILABLE: &str = "Available";
    /// The cluster certificates exist (or were generated).
    pub const CERTIFICATES_AVAILABLE: &str = "CertificatesAvailable";
    /// Every machine matches the desired state; the message names the others and why.
    pub const MACHINES_UP_TO_DATE: &str = "MachinesUpToDate";
    /// Outdated machines are being replaced.
    pub const ROLLING_OUT: &str = "RollingOut";
    /// Machines are being added toward `spec.replicas`.
    pub const SCALING_UP: &str = "ScalingUp";
    /// Machines are being removed toward `spec.replicas`.
    pub const SCALING_DOWN: &str = "ScalingDown";
    /// The last machine creation worked.
    pub const MACHINES_CREATED: &str = "MachinesCreated";
    /// Every machine's control-plane static pods are healthy.
    pub const CONTROL_PLANE_COMPONENTS_HEALTHY: &str = "ControlPlaneComponentsHealthy";
    /// Every machine's etcd member (or etcd pod) is healthy.
    pub const ETCD_CLUSTER_HEALTHY: &str = "EtcdClusterHealthy";
    /// The etcd membership needs no change.
    pub const ETCD_MEMBERSHIP_SETTLED: &str = "EtcdMembershipSettled";
    /// The last scheduled etcd snapshot was kept.
    pub const ETCD_SNAPSHOT_TAKEN: &str = "EtcdSnapshotTaken";
    /// A requested etcd restore finished; while it runs, the message says which step it is at.
    pub const ETCD_RESTORED: &str = "EtcdRestored";
}

/// Conditions the control plane reports on each Machine it owns.
pub mod machine {
    /// The Node carries kubeadm's control-plane label (and taint, where expected).
    pub const NODE_KUBEADM_LABELS_AND_TAINTS_SET: &str = "NodeKubeadmLabelsAndTaintsSet";
    /// The machine matches the control plane's desired state.
    pub const UP_TO_DATE: &str = "UpToDate";
    /// The machine's etcd member is healthy.
    pub const ETCD_MEMBER_HEALTHY: &str = "EtcdMemberHealthy";
    /// The machine's kube-apiserver static pod is healthy.
    pub const API_SERVER_POD_HEALTHY: &str = "APIServerPodHealthy";
    /// The machine's kube-controller-manager static pod is healthy.
    pub const CONTROLLER_MANAGER_POD_HEALTHY: &str = "ControllerManagerPodHealthy";
    /// The machine's kube-scheduler static pod is healthy.
    pub const SCHEDULER_POD_HEALTHY: &str = "SchedulerPodHealthy";
    /// The machine's etcd static pod is healthy.
    pub const ETCD_POD_HEALTHY: &str = "EtcdPodHealthy";
    /// Set by a MachineHealthCheck: the machine passed its health checks.
    pub const HEALTH_CHECK_SUCCEEDED: &str = "HealthCheckSucceeded";
    /// Set False by a MachineHealthCheck that leaves remediation to the owner; the control plane says in
    /// it why remediation waits.
    pub const OWNER_REMEDIATED: &str = "OwnerRemediated";
    /// Set by Cluster API's Machine controller while the Machine is deleted, its reason naming the
    /// phase (drain, volume detach, hooks).
    pub const DELETING: &str = "Deleting";
}

/// Reasons of the conditions above.
pub mod reasons {
    /// Of a Machine's `Deleting` condition: drained, volumes detached, only pre-terminate hooks hold it.
    pub const WAITING_FOR_PRE_TERMINATE_HOOK: &str = "WaitingForPreTerminateHook";
    pub const VALID: &str = "Valid";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const INITIALIZED: &str = "Initialized";
    pub const NOT_INITIALIZED: &str = "NotInitialized";
    pub const WAITING_FOR_INFRASTRUCTURE: &str = "WaitingForInfrastructure";
    pub const WAITING_FOR_CONTROL_PLANE_ENDPOINT: &str = "WaitingForControlPlaneEndpoint";
    pub const AVAILABLE: &str = "Available";
    pub const NOT_AVAILABLE: &str = "NotAvailable";
    pub const INTERNAL_ERROR: &str = "InternalError";
    pub const UP_TO_DATE: &str = "UpToDate";
    pub const NOT_UP_TO_DATE: &str = "NotUpToDate";
    pub const ROLLING_OUT: &str = "RollingOut";
    pub const NOT_ROLLING_OUT: &str = "NotRollingOut";
    pub const SCALING_UP: &str = "ScalingUp";
    pub const NOT_SCALING_UP: &str = "NotScalingUp";
    pub const SCALING_DOWN: &str = "ScalingDown";
    pub const NOT_SCALING_DOWN: &str = "NotScalingDown";
    pub const CREATED: &str = "Created";
    pub const INFRASTRUCTURE_TEMPLATE_CLONING_FAILED: &str = "InfrastructureTemplateCloningFailed";
    pub const HEALTHY: &str = "Healthy";
    pub const NOT_HEALTHY: &str = "NotHealthy";
    /// A machine's pod or etcd member is not healthy.
    pub const UNHEALTHY: &str = "Unhealthy";
    /// A machine's pod, member or Node could not be looked at.
    pub const INSPECTION_FAILED: &str = "InspectionFailed";
    /// `NodeKubeadmLabelsAndTaintsSet`.
    pub const SET: &str = "Set";
    pub const NOT_SET: &str = "NotSet";
    /// `UpToDate`: the kubelet still reports another version than the Machine's.
    pub const UPDATING: &str = "Updating";
    pub const EXTERNAL: &str = "External";
    pub const SETTLED: &str = "Settled";
    pub const WAITING: &str = "Waiting";
    pub const CHANGING: &str = "Changing";
    pub const TAKEN: &str = "Taken";
    pub const TOO_LARGE_FOR_SECRET: &str = "TooLargeForSecret";
    /// `spec.etcdBackup` names a Secret or key that is missing or malformed.
    pub const BACKUP_MISCONFIGURED: &str = "BackupMisconfigured";
    /// The object store refused the credentials (HTTP 401 or 403).
    pub const OBJECT_STORE_DENIED: &str = "ObjectStoreDenied";
    /// The object store could not be reached, failed, or did not take the snapshot (e.g. full).
    pub const OBJECT_STORE_FAILED: &str = "ObjectStoreFailed";
    /// `EtcdRestored`.
    pub const RESTORED: &str = "Restored";
    pub const RESTORING: &str = "Restoring";
    pub const RESTORE_REFUSED: &str = "RestoreRefused";
    /// etcd could not be looked at (no member list from any client URL).
    pub const ETCD_NOT_OBSERVABLE: &str = "EtcdNotObservable";
    /// etcd refused the controller's client certificate, or the controller refused a member's.
    pub const ETCD_CERTIFICATE_REFUSED: &str = "EtcdCertificateRefused";
    pub const WAITING_FOR_MACHINE_DELETION: &str = "WaitingForMachineDeletion";
    pub const WAITING_FOR_MACHINE_PROVISIONING: &str = "WaitingForMachineProvisioning";
    pub const CONTROL_PLANE_COMPONENTS_NOT_HEALTHY: &str = "ControlPlaneComponentsNotHealthy";
    pub const ETCD_CLUSTER_NOT_HEALTHY: &str = "EtcdClusterNotHealthy";
    /// A scale up would add a member of a newer etcd minor to members below its upgrade floor.
    pub const ETCD_BELOW_UPGRADE_FLOOR: &str = "EtcdBelowUpgradeFloor";
    /// `OwnerRemediated`: remediation waits (retry period, another remediation, etcd quorum).
    pub const REMEDIATION_DEFERRED: &str = "RemediationDeferred";
    /// `OwnerRemediated`: the machine cannot be remediated (the last one, maxRetry reached).
    pub const CANNOT_BE_REMEDIATED: &str = "CannotBeRemediated";
    /// `OwnerRemediated`: the machine is being deleted to be replaced.
    pub const MACHINE_DELETING: &str = "MachineDeleting";
}
