//! The rows of the reference pages on labels, annotations and conditions, built from the constants
//! the providers use (`make manifests` writes the pages from these and from the Events in
//! `controlplane::events` and `bootstrap::events`; a test fails when a page is stale or a constant is
//! missing from it).

use crate::bootstrap::conditions as config;
use crate::bootstrap::defaults::TOPOLOGY_DRY_RUN_ANNOTATION;
use crate::controlplane::conditions::{machine, reasons, types};
use crate::conversion::{CONVERSION_DATA_ANNOTATION, V1BETA1_DATA_ANNOTATION};
use crate::meta::*;

/// The object a key is found on, which is the section of the page it is listed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum On {
    ControlPlane,
    Machine,
    /// Another object, named.
    Other(&'static str),
}

/// A label, annotation, finalizer, taint or Secret type.
#[derive(Clone, Copy, Debug)]
pub struct Key {
    /// One key, or several that go together.
    pub keys: &'static [&'static str],
    /// `label`, `annotation`, `finalizer`, …
    pub kind: &'static str,
    pub on: On,
    /// Who sets it: `you` (a user), `we` (the providers), `read` (someone else; we read it), …
    pub who: &'static str,
    pub meaning: &'static str,
}

const fn key(
    keys: &'static [&'static str],
    kind: &'static str,
    on: On,
    who: &'static str,
    meaning: &'static str,
) -> Key {
    Key {
        keys,
        kind,
        on,
        who,
        meaning,
    }
}

use On::{ControlPlane, Machine, Other};

/// Every key the providers define, read or write.
#[rustfmt::skip]
pub const KEYS: &[Key] = &[
    key(&[PAUSED_ANNOTATION], "annotation", ControlPlane, "you", "leave the control plane alone (also on the Cluster; or the Cluster's `spec.paused`)"),
    key(&[SKIP_KUBE_PROXY_ANNOTATION], "annotation", ControlPlane, "you", "leave the kube-proxy DaemonSet alone"),
    key(&[SKIP_COREDNS_ANNOTATION], "annotation", ControlPlane, "you", "leave CoreDNS alone, and do not check CoreDNS upgrades at admission"),
    key(&[ETCD_UNSAFE_NO_FSYNC_ANNOTATION], "annotation", ControlPlane, "you", "`\"true\"`: run stacked etcd with `--unsafe-no-fsync` (changes the machines, so it rolls them)"),
    key(&[ETCD_DEFRAG_SCHEDULE_ANNOTATION], "annotation", ControlPlane, "you", "daily defragmentation time `\"HH:MM\"` (UTC, default `02:30`) or `\"disabled\"`"),
    key(&[ETCD_DEFRAG_MIN_FREE_ANNOTATION], "annotation", ControlPlane, "you", "the share of a member's database that must be free (and at least 4 MiB) for the scheduled defragmentation to rewrite it: `40%` (default), `0%` for every member every time"),
    key(&[ETCD_LAST_DEFRAG_ANNOTATION], "annotation", ControlPlane, "we", "when the last defragmentation round finished; the schedule's clock"),
    key(&[ETCD_SNAPSHOT_SCHEDULE_ANNOTATION], "annotation", ControlPlane, "you", "daily snapshot time `\"HH:MM\"` (UTC, default `03:00`) or `\"disabled\"`"),
    key(&[ETCD_SNAPSHOT_TARGET_ANNOTATION], "annotation", ControlPlane, "you", "`\"secret\"` (a Secret per snapshot) or `\"dir\"` (`--etcd-snapshot-dir`, the default when the manager has one)"),
    key(&[ETCD_LAST_SNAPSHOT_ANNOTATION], "annotation", ControlPlane, "we", "time of the last snapshot and where it went (a path, `secret/<name>` or `refused`); the schedule's clock"),
    key(&[ETCD_RESTORE_FROM_ANNOTATION], "annotation", ControlPlane, "you", "restore stacked etcd from `secret/<name>`, `file:<path>` or `s3://<bucket>/<object>` ([restore](../how-to/restore-etcd.md)); removed when done"),
    key(&[ETCD_RESTORED_ANNOTATION], "annotation", ControlPlane, "we", "when the last restore finished, and from what"),
    key(&[REMEDIATION_IN_PROGRESS_ANNOTATION], "annotation", ControlPlane, "we", "the remediation under way (JSON: machine, timestamp, retryCount, in Cluster API's shape), until the replacement exists"),
    key(&[CLUSTER_NAME_LABEL], "label", ControlPlane, "read", "the Cluster, where the owner reference is missing (deletion, the status selector)"),
    key(&[CONVERSION_DATA_ANNOTATION], "annotation", ControlPlane, "we", "on a v1beta1 read: the v1beta2 form (e.g. `status.etcd`) v1beta1 has no field for"),
    key(&[CONTROL_PLANE_FINALIZER], "finalizer", ControlPlane, "we", "removed once every control-plane Machine is gone"),
    key(&[CLUSTER_NAME_LABEL], "label", Machine, "we", "the Cluster (also on the KubeadmConfig and the infrastructure machine)"),
    key(&[CONTROL_PLANE_LABEL], "label", Machine, "we", "a control-plane machine (also on the KubeadmConfig and the infrastructure machine)"),
    key(&[CONTROL_PLANE_NAME_LABEL], "label", Machine, "we", "the KubeadmControlPlane (also on the KubeadmConfig and the infrastructure machine)"),
    key(&[MACHINE_GENERATION_LABEL], "label", Machine, "we", "the machine's [generation](../explanation/generation-counters.md): the template's counter (`genc02`) or `h` + a hash of the desired state (also on the KubeadmConfig and the infrastructure machine)"),
    key(&[REMEDIATE_MACHINE_ANNOTATION], "annotation", Machine, "you, or we", "replace this machine ([remediation](../how-to/remediate-machines.md)); we set it on a machine whose stuck or never-started etcd member we removed"),
    key(&[REMEDIATION_FOR_ANNOTATION], "annotation", Machine, "we", "on a replacement: the remediation it completes, so a failure within `minHealthyPeriodSeconds` counts as a retry"),
    key(&[DELETE_MACHINE_ANNOTATION], "annotation", Machine, "you", "remove this machine first when scaling down (outdated ones among them first)"),
    key(&[ETCD_RESTORE_SNAPSHOT_ANNOTATION], "annotation", Machine, "we", "the machine that restores etcd, and the Secret with the snapshot (also on its KubeadmConfig, where the bootstrap provider reads it)"),
    key(&[CLEANUP_HOOK_ANNOTATION], "annotation (hook)", Machine, "we", "with stacked etcd: holds the Machine's deletion until its etcd member is removed"),
    key(&[PRE_TERMINATE_HOOK_PREFIX], "annotation prefix (hooks)", Machine, "read", "other controllers' pre-terminate hooks (`<prefix>/<name>`): from Kubernetes 1.31 on, a deleting machine's etcd member is removed only once they are gone, so that they still find a working kubelet and etcd (as Cluster API)"),
    key(&[CLONED_FROM_NAME_ANNOTATION, CLONED_FROM_GROUP_KIND_ANNOTATION], "annotation", Other("infrastructure machine"), "we", "the template it was cloned from; a different template makes it outdated"),
    key(&[CERTIFICATES_EXPIRY_ANNOTATION], "annotation", Other("KubeadmConfig"), "read", "when the node's certificates expire (RFC 3339), for `spec.rollout.before.certificatesExpiryDays`; the providers read it and do not write it"),
    key(&[MACHINE_ANNOTATION], "annotation", Other("control-plane static pods"), "we (kubeadm patches)", "the Machine the pod belongs to"),
    key(&[MACHINE_GENERATION_LABEL], "annotation", Other("control-plane static pods"), "we (kubeadm patches)", "the Machine's generation (from the Machine's label)"),
    key(&[API_SERVER_ENDPOINT_ANNOTATION], "annotation", Other("kube-apiserver pods"), "kubeadm; read", "`host:port` the API server advertises (KEP-2506)"),
    key(&[ETCD_CLIENT_URLS_ANNOTATION], "annotation", Other("etcd pods"), "kubeadm; read", "the member's client URLs (KEP-2506)"),
    key(&[CONTROL_PLANE_NODE_ROLE], "label and taint", Other("Nodes"), "kubeadm; read", "reported in the Machine's `NodeKubeadmLabelsAndTaintsSet`"),
    key(&[UNINITIALIZED_TAINT], "taint", Other("worker Nodes"), "we (kubeadm config)", "`NoSchedule` until Cluster API has synced the Node's labels"),
    key(&[CLUSTER_NAME_LABEL], "label", Other("data, certificate and snapshot Secrets"), "we", "the Cluster"),
    key(&[CLUSTER_SECRET_TYPE], "Secret type", Other("data, certificate and kubeconfig Secrets"), "we", "Cluster API's type of provider Secrets"),
    key(&[ETCD_SNAPSHOT_LABEL], "label; Secret type", Other("snapshot Secrets"), "we", "the cluster name (label), to list and prune them"),
    key(&[ETCD_SNAPSHOT_SIZE_ANNOTATION, ETCD_SNAPSHOT_MEMBER_ANNOTATION, ETCD_SNAPSHOT_REVISION_ANNOTATION], "annotation", Other("snapshot Secrets"), "we", "uncompressed bytes, source member, its revision"),
    key(&[ETCD_RESTORE_SECRET_KEY], "Secret key", Other("the restore Secret `<cluster>-etcd-restore`"), "we", "the snapshot being restored, gzip + base64; deleted when the restore is done"),
    key(&[ETCD_RESTORE_DOWNLOAD_KEY], "Secret key", Other("the restore Secret `<cluster>-etcd-restore`"), "we", "instead of the snapshot, for one in object storage: a presigned URL, its SHA-256 and the keys of that one object; deleted when the restore is done"),
    key(&[WATCH_FILTER_LABEL], "label", Other("every watched object"), "you", "with `--watch-filter VALUE`, only objects with this value are reconciled"),
    key(&[CONVERSION_DATA_ANNOTATION, V1BETA1_DATA_ANNOTATION], "annotation", Other("our kinds"), "we (conversion webhook)", "what one version cannot hold, kept for the round trip"),
    key(&[TOPOLOGY_DRY_RUN_ANNOTATION], "annotation", Other("KubeadmConfigTemplate"), "the topology controller; read", "its dry runs get the defaults older releases wrote"),
    key(&[crate::crd::CONTRACT_LABELS[1].0, crate::crd::CONTRACT_LABELS[0].0], "label", Other("CRDs"), "providers; read", "the contract versions of a referenced kind, for conversion of its references"),
    key(&[PROVIDER_LABEL], "label", Other("components"), "we", "`bootstrap-kubeadm` or `control-plane-kubeadm`"),
    key(&[CONTROLPLANE_AGGREGATION_LABEL], "label", Other("ClusterRoles"), "infrastructure providers", "aggregated into the control-plane manager's role ([RBAC](../how-to/install-with-clusterctl.md#infrastructure-providers-and-rbac))"),
    key(&["cert-manager.io/inject-ca-from"], "annotation", Other("webhook configurations, CRDs"), "we (manifests)", "cert-manager injects the serving CA"),
];

/// A condition type (or several that go together) as the reference describes it.
#[derive(Clone, Copy, Debug)]
pub struct Condition {
    pub types: &'static [&'static str],
    pub true_reasons: &'static [&'static str],
    /// Said after the True reasons.
    pub true_also: &'static str,
    /// False and Unknown reasons.
    pub other_reasons: &'static [&'static str],
    /// Said after the other reasons.
    pub other_also: &'static str,
    /// What the message says, or what the condition means.
    pub message: &'static str,
}

const fn condition(
    types: &'static [&'static str],
    true_reasons: &'static [&'static str],
    other_reasons: &'static [&'static str],
    message: &'static str,
) -> Condition {
    Condition {
        types,
        true_reasons,
        true_also: "",
        other_reasons,
        other_also: "",
        message,
    }
}

const WAITS: &str = "or the [reason it waits](#why-a-change-waits)";

/// The conditions of a KubeadmControlPlane.
#[rustfmt::skip]
pub const CONTROL_PLANE_CONDITIONS: &[Condition] = &[
    condition(&[types::SPEC_VALID], &[reasons::VALID], &[reasons::INVALID_SPEC], "what is wrong with the spec"),
    condition(&[types::INITIALIZED], &[reasons::INITIALIZED], &[reasons::NOT_INITIALIZED, reasons::WAITING_FOR_INFRASTRUCTURE, reasons::WAITING_FOR_CONTROL_PLANE_ENDPOINT], "what the Cluster still lacks"),
    condition(&[types::AVAILABLE], &[reasons::AVAILABLE], &[reasons::NOT_AVAILABLE], "not initialized, or no control-plane machine has a Node"),
    condition(&[types::CERTIFICATES_AVAILABLE], &[reasons::AVAILABLE], &[reasons::INTERNAL_ERROR], "why the cluster certificates could not be read or made"),
    condition(&[types::MACHINES_CREATED], &[reasons::CREATED], &[reasons::INFRASTRUCTURE_TEMPLATE_CLONING_FAILED], "the object and what is wrong"),
    condition(&[types::MACHINES_UP_TO_DATE], &[reasons::UP_TO_DATE], &[reasons::NOT_UP_TO_DATE], "`<machine>: <reasons>; …`"),
    Condition { true_also: WAITS, ..condition(&[types::ROLLING_OUT], &[reasons::ROLLING_OUT], &[reasons::NOT_ROLLING_OUT], "`rolling out v1.34.4 generation genc02: 2 of 3 machines left to replace[; waiting: …]`") },
    Condition { true_also: WAITS, ..condition(&[types::SCALING_UP], &[reasons::SCALING_UP], &[reasons::NOT_SCALING_UP], "`scaling up from 1 to 3 replicas[; waiting: …]`") },
    Condition { true_also: WAITS, ..condition(&[types::SCALING_DOWN], &[reasons::SCALING_DOWN], &[reasons::NOT_SCALING_DOWN], "`scaling down from 5 to 3 replicas[; waiting: …]`") },
    condition(&[types::CONTROL_PLANE_COMPONENTS_HEALTHY], &[reasons::HEALTHY], &[reasons::NOT_HEALTHY], "the machines with problems and the problem"),
    Condition { true_also: "(the latter with external etcd)", ..condition(&[types::ETCD_CLUSTER_HEALTHY], &[reasons::HEALTHY, reasons::EXTERNAL], &[reasons::NOT_HEALTHY], "per machine: the member, an alarm, a refused certificate, …") },
    condition(&[types::ETCD_MEMBERSHIP_SETTLED], &[reasons::SETTLED], &[reasons::WAITING, reasons::CHANGING, reasons::ETCD_NOT_OBSERVABLE, reasons::ETCD_CERTIFICATE_REFUSED], "what the membership waits for, e.g. `alarm NOSPACE on member <id> (<node>)`"),
    condition(&[types::ETCD_SNAPSHOT_TAKEN], &[reasons::TAKEN], &[reasons::TOO_LARGE_FOR_SECRET, reasons::BACKUP_MISCONFIGURED, reasons::OBJECT_STORE_DENIED, reasons::OBJECT_STORE_FAILED], "why the last scheduled snapshot was not kept"),
    condition(&[types::ETCD_RESTORED], &[reasons::RESTORED], &[reasons::RESTORING, reasons::RESTORE_REFUSED], "the step a restore is at, or why it is refused"),
];

/// Why a scale or rollout step waits: the preflight checks in the order they are tried.
#[rustfmt::skip]
pub const WAIT_REASONS: &[(&str, &str)] = &[
    (reasons::WAITING_FOR_MACHINE_DELETION, "a machine is being deleted (one operation at a time): until its etcd member is removed and its infrastructure machine gone"),
    (reasons::WAITING_FOR_MACHINE_PROVISIONING, "a machine has no Node yet"),
    (reasons::CONTROL_PLANE_COMPONENTS_NOT_HEALTHY, "a machine's control-plane components are not healthy"),
    (reasons::ETCD_CLUSTER_NOT_HEALTHY, "a machine's etcd member is not healthy, or etcd cannot take another member now (a learner catching up, a member down, too few healthy voters, …), or etcd could not be looked at"),
    (reasons::ETCD_BELOW_UPGRADE_FLOOR, "the new member would run a newer etcd minor than members below its upgrade floor (3.6.11 before 3.7, 3.5.20 before 3.6), named with their versions"),
];

/// What ends each of [`WAIT_REASONS`], and how the control plane learns of it.
#[rustfmt::skip]
pub const WAIT_ENDS: &[(&str, &str)] = &[
    (reasons::WAITING_FOR_MACHINE_DELETION, "the control plane's own removal of the member and release of its hook (looked at again at once); the infrastructure machine's deletion (the watch of that kind wakes the control plane of its Machine)"),
    (reasons::WAITING_FOR_MACHINE_PROVISIONING, "core Cluster API setting the Machine's `status.nodeRef`, after the bootstrap data and the infrastructure machine are ready (the Machine watch)"),
    (reasons::CONTROL_PLANE_COMPONENTS_NOT_HEALTHY, "their mirror pods turning ready (the workload cluster's pod watch)"),
    (reasons::ETCD_CLUSTER_NOT_HEALTHY, "the etcd pod turning ready (the pod watch); the member list and member status, which no watch announces: polled while a change is in flight (every 0.5 s for 30 s after the last step, then 2 s, then 10 s), and looked at again at once after a membership change of the control plane's own"),
    (reasons::ETCD_BELOW_UPGRADE_FLOOR, "the members' server versions (member status, looked at with the membership): a rollout of the control plane to an etcd image of the floor or newer (`etcd.local.imageTag`), or a spec that no longer brings the newer minor"),
];

const POD_CONDITIONS: &[&str] = &[
    machine::API_SERVER_POD_HEALTHY,
    machine::CONTROLLER_MANAGER_POD_HEALTHY,
    machine::SCHEDULER_POD_HEALTHY,
    machine::ETCD_POD_HEALTHY,
];

/// The conditions the control plane writes on each of its Machines.
#[rustfmt::skip]
pub const MACHINE_CONDITIONS: &[Condition] = &[
    condition(POD_CONDITIONS, &[reasons::HEALTHY], &[reasons::UNHEALTHY, reasons::INSPECTION_FAILED], "the static pod's health; Unknown (`InspectionFailed`) when it could not be looked at"),
    condition(&[machine::ETCD_MEMBER_HEALTHY], &[reasons::HEALTHY], &[reasons::UNHEALTHY, reasons::INSPECTION_FAILED], "the etcd member's health; Unknown (`InspectionFailed`) when etcd could not be looked at"),
    condition(&[machine::NODE_KUBEADM_LABELS_AND_TAINTS_SET], &[reasons::SET], &[reasons::NOT_SET, reasons::INSPECTION_FAILED], "`NotSet` names the missing label or taint; Unknown (`InspectionFailed`): no such Node"),
    condition(&[machine::UP_TO_DATE], &[reasons::UP_TO_DATE], &[reasons::NOT_UP_TO_DATE, reasons::UPDATING], "`NotUpToDate`: one `* reason` line per difference; `Updating`: the kubelet still reports another version"),
    Condition { other_also: "([remediation](../how-to/remediate-machines.md))", ..condition(&[machine::OWNER_REMEDIATED], &[], &[reasons::REMEDIATION_DEFERRED, reasons::CANNOT_BE_REMEDIATED, reasons::MACHINE_DELETING], "written False when a MachineHealthCheck leaves remediation to the control plane: why it waits, or that it cannot") },
    condition(&[machine::HEALTH_CHECK_SUCCEEDED], &[], &[], "read: written by a MachineHealthCheck; False marks the machine for remediation"),
    condition(&[machine::DELETING], &[], &[reasons::WAITING_FOR_PRE_TERMINATE_HOOK], "read: written by Cluster API's Machine controller; the etcd member of a deleting machine is removed, and the control plane's pre-terminate hook released, once it says WaitingForPreTerminateHook (the node is drained)"),
];

/// The conditions of a KubeadmConfig.
pub const CONFIG_CONDITIONS: &[Condition] = &[condition(
    &[
        config::types::READY,
        config::types::DATA_SECRET_AVAILABLE,
        config::types::CERTIFICATES_AVAILABLE,
    ],
    &[config::reasons::AVAILABLE],
    &[],
    "True once the data secret exists; otherwise `Ready` and `DataSecretAvailable` are False with a reason below",
)];

/// Why a KubeadmConfig has no bootstrap data yet.
#[rustfmt::skip]
pub const CONFIG_WAIT_REASONS: &[(&str, &str)] = &[
    (config::reasons::WAITING_FOR_INFRASTRUCTURE, "the Cluster's infrastructure is not provisioned yet"),
    (config::reasons::WAITING_FOR_CONTROL_PLANE, "a worker waits for the control plane to be initialized"),
    (config::reasons::WAITING_FOR_CONTROL_PLANE_INIT, "another Machine holds the init lock and runs `kubeadm init`"),
    (config::reasons::WAITING_FOR_CONTROL_PLANE_ENDPOINT, "the Cluster has no `controlPlaneEndpoint` yet"),
    (config::reasons::CERTIFICATES_UNAVAILABLE, "the cluster certificates are missing (also sets `CertificatesAvailable` False)"),
    (config::reasons::INVALID_SPEC, "the renderer refuses the spec; the message names the field and the rule"),
    (config::reasons::ETCD_LEARNER_MODE_UNSUPPORTED, "the Kubernetes or etcd version cannot add etcd members as learners"),
    (config::reasons::SECRET_MISSING, "a Secret the spec refers to (`contentFrom`, `passwdFrom`) is missing"),
];
